//===- CpuAdamw.h - runs of adamw instructions as one pass ----------------===//
//
// The CPU device binds a run of consecutive adamw instructions that
// runtime::canJoinAdamwGroup allows as one update: the first instruction
// updates every member's elements in one pass split over the kernels'
// threads, the others do nothing. Each element is updated as its own
// instruction would update it (the same coefficients, the same loop), so
// the results do not depend on the grouping; the gain is the threads (a
// tensor below kParallelGrain elements ran on one) and one call instead of
// one per parameter tensor.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CPU_CPUADAMW_H
#define DTCC_RUNTIME_DEVICE_CPU_CPUADAMW_H

#include "runtime/exec/Kernel.h"

#include <memory>

namespace dtcc::runtime::cpu {

/// The run of adamw instructions being bound (opaque).
struct AdamwRun;

/// Binds an adamw instruction; it joins `open`, the run bound right before
/// it, where it can (and its kernel does nothing), else it starts a run
/// that `open` becomes (and its kernel updates every member's tensors).
/// The device resets `open` whenever it binds another kernel and at the
/// start of each function.
StatusOr<KernelFn> bindAdamwInRun(const KernelContext &ctx,
                                  std::shared_ptr<AdamwRun> &open);

} // namespace dtcc::runtime::cpu

#endif // DTCC_RUNTIME_DEVICE_CPU_CPUADAMW_H
