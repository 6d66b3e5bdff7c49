//===- ScratchReservation.h - kernels' scratch in single-kernel tests -*- C++ -*-===//
//
// The CUDA kernel tests bind kernels one by one, outside a program: this
// gives their KernelContext a scratch plan and reserves it on the device
// after binding and before running, as Executable does for a program.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_TESTS_UNIT_CUDA_SCRATCHRESERVATION_H
#define DTCC_TESTS_UNIT_CUDA_SCRATCHRESERVATION_H

#include "runtime/device/Device.h"
#include "runtime/exec/Scratch.h"

#include <gtest/gtest.h>

namespace dtcc::runtime {

/// The scratch of kernels bound one by one, reserved as a program's is.
struct Reservation {
  explicit Reservation(Device &d) : device(d) {}
  ~Reservation() {
    if (base)
      device.deallocate(base);
  }
  /// After binding, before running.
  void reserve() {
    auto r = device.reserveScratch(plan);
    ASSERT_TRUE(r.isOk()) << r.status().toString();
    base = r.value();
  }
  Device &device;
  ScratchPlan plan;
  void *base = nullptr;
};

} // namespace dtcc::runtime

#endif // DTCC_TESTS_UNIT_CUDA_SCRATCHRESERVATION_H
