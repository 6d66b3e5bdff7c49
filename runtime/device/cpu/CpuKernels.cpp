//===- CpuKernels.cpp - registration of the CPU kernels --------------------===//

#include "runtime/exec/Kernel.h"

namespace dtcc::runtime {

void registerCpuKernels(KernelRegistry &registry) {}

} // namespace dtcc::runtime
