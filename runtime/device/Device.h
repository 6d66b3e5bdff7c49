//===- Device.h - the device abstraction of the runtime ---------*- C++ -*-===//
//
// One rank drives one device. A device owns memory and a kernel registry;
// the executor carves its arenas from device allocations and binds kernels.
// CPU and CUDA implement it.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_DEVICE_H
#define DTCC_RUNTIME_DEVICE_DEVICE_H

#include "runtime/base/Status.h"
#include "runtime/exec/Kernel.h"

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dtcc::runtime {

class Device {
public:
  virtual ~Device() = default;
  /// "cpu", "cuda:0 (NVIDIA H100 ...)".
  virtual std::string name() const = 0;
  /// Allocates `bytes` (at least 1) aligned to 64 bytes.
  virtual StatusOr<void *> allocate(int64_t bytes) = 0;
  virtual void deallocate(void *ptr) = 0;
  /// Allocates a program's arenas (`bytes` each); each pointer is later
  /// given to deallocate(). The default calls allocate() per arena; a GPU
  /// carves them from one allocation.
  virtual StatusOr<std::vector<void *>>
  allocateArenas(const std::vector<int64_t> &bytes) {
    std::vector<void *> out;
    for (int64_t b : bytes) {
      StatusOr<void *> p = allocate(b);
      if (!p.isOk()) {
        for (void *q : out)
          deallocate(q);
        return p.status();
      }
      out.push_back(p.value());
    }
    return out;
  }
  virtual Status copyHostToDevice(void *dst, const void *src,
                                  int64_t bytes) = 0;
  virtual Status copyDeviceToHost(void *dst, const void *src,
                                  int64_t bytes) = 0;
  virtual Status fillZero(void *dst, int64_t bytes) = 0;
  /// Reserves the scratch memory the kernels of a program asked for when
  /// they were bound (runtime/exec/Scratch.h) and binds `plan` to it: once,
  /// after every instruction is bound, before anything runs. Returns what
  /// to give deallocate() when the program is unloaded (null: nothing was
  /// reserved). The default takes one allocate().
  virtual StatusOr<void *> reserveScratch(ScratchPlan &plan) {
    DTCC_ASSIGN_OR_RETURN(ScratchLayout layout, plan.layout());
    void *base = nullptr;
    if (layout.totalBytes > 0) {
      DTCC_ASSIGN_OR_RETURN(base, allocate(layout.totalBytes));
    }
    Status bound = plan.bind(base);
    if (!bound.isOk()) {
      if (base)
        deallocate(base);
      return bound;
    }
    return base;
  }
  /// Host memory for a program's host arenas (an offloaded optimizer
  /// step), which the copy routines move to and from at full speed: pinned
  /// on a GPU. The default calls allocate(), which on the CPU is host
  /// memory of its own (a separate arena: transfers are real copies).
  virtual StatusOr<void *> allocateHost(int64_t bytes) { return allocate(bytes); }
  virtual void deallocateHost(void *ptr) { deallocate(ptr); }
  /// Waits for the transfers (`copy_to_host`, `copy_to_device` kernels)
  /// queued so far: every host instruction waits first. The CPU's copies
  /// are done when queued.
  virtual Status waitForTransfers() { return Status::ok(); }
  /// Waits for all work queued on the device.
  virtual Status synchronize() = 0;
  /// Waits for the work an instruction's timing needs finished (--profile,
  /// --trace time each instruction): by default all of it. A device whose
  /// sends run on streams of their own leaves those out: a send may wait
  /// for its receiver, which posts the receive only later in its program
  /// (a pipeline stage that sends activations on before it receives the
  /// gradient its peer sends back), and the function's end waits for it.
  virtual Status synchronizeForTiming() { return synchronize(); }
  /// Timing on the device itself (a GPU's events), which --profile prefers
  /// to synchronizing after every kernel: that leaves the device idle
  /// between kernels and adds the host's round trip to each. A device that
  /// has it records a mark in order with the kernels (markTime) and, once
  /// it has synchronized, gives the seconds between consecutive marks
  /// (takeMarkIntervals, which forgets them).
  virtual bool timesOnDevice() const { return false; }
  virtual Status markTime() {
    return unimplemented("device '", name(), "' has no timing of its own");
  }
  virtual StatusOr<std::vector<double>> takeMarkIntervals() {
    return unimplemented("device '", name(), "' has no timing of its own");
  }
  virtual const KernelRegistry &kernels() const = 0;
  /// The kernels of host instructions: the CPU's. The default is kernels(),
  /// right for the CPU device.
  virtual const KernelRegistry &hostKernels() const { return kernels(); }
  /// Called before the instructions of each function are bound, in order. A
  /// device that binds runs of consecutive instructions as one launch (the
  /// CUDA device's adamw) ends the run here; the default does nothing.
  virtual void beginFunction() {}
  /// Loads the kernels the compiler generated for the program's fused
  /// regions on a GPU (a serialized GpuKernelModule, runtime/format/
  /// GpuKernelModule.h), which its `fused` instructions then launch: once,
  /// before any instruction is bound. The default refuses: only a GPU runs
  /// them.
  virtual Status loadGpuKernels(std::string_view module) {
    (void)module;
    return unimplemented("device '", name(), "' cannot run kernels generated "
                         "for CUDA (the program was compiled with --target "
                         "cuda --fuse)");
  }
};

/// The host CPU, with the kernels of runtime/device/cpu.
std::unique_ptr<Device> createCpuDevice();

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_DEVICE_DEVICE_H
