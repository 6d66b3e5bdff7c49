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
  registerCpuTensorOpKernels(registry);
  registerCpuReductionKernels(registry);
  registerCpuMatmulKernels(registry);
  registerCpuNNKernels(registry);
  registerCpuTrainingKernels(registry);
  registerCpuAttentionKernels(registry);
  registerCpuConvKernels(registry);
  registerCpuNormPoolKernels(registry);
  registerCpuGridSampleKernels(registry);
  registerCpuRoiAlignKernels(registry);
  registerCpuCollectiveKernels(registry);
  registerCpuFusedKernels(registry);
}

const KernelRegistry &cpuKernels() {
  static const KernelRegistry registry = [] {
    KernelRegistry r;
    registerCpuKernels(r);
    return r;
  }();
  return registry;
}

} // namespace dtcc::runtime
