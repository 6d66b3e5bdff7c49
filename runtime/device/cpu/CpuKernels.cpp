//===- CpuKernels.cpp - registration of the CPU kernels -------------------===//
//
// One register function per kernel family; the families live in the other
// files of this directory.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/CpuKernelUtils.h"

namespace dtcc::runtime {

void registerCpuKernels(KernelRegistry &registry) {
  registerCpuUnaryKernels(registry);
  registerCpuBinaryKernels(registry);
  registerCpuCastKernels(registry);
  registerCpuMovementKernels(registry);
  registerCpuIndexingKernels(registry);
  registerCpuReductionKernels(registry);
  registerCpuMatmulKernels(registry);
  registerCpuNNKernels(registry);
  registerCpuTrainingKernels(registry);
  registerCpuCollectiveKernels(registry);
}

} // namespace dtcc::runtime
