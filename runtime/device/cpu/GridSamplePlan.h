//===- GridSamplePlan.h - grid_sample's checks, shared by backends -*- C++
//-*-===//
//
// The load-time checks of grid_sample and grid_sample_grad (arity, ranks,
// shapes, dtypes, attributes), done once for the CPU and CUDA factories.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CPU_GRIDSAMPLEPLAN_H
#define DTCC_RUNTIME_DEVICE_CPU_GRIDSAMPLEPLAN_H

#include "runtime/base/GridSample.h"
#include "runtime/exec/Kernel.h"

namespace dtcc::runtime::cpu {

/// grid_sample (operand, grid -> result) or, with `grad`, grid_sample_grad
/// (dy, operand, grid -> doperand, dgrid): the geometry, or an error
/// naming what does not fit.
StatusOr<grid::Geometry> planGridSample(const KernelContext &ctx, bool grad);

} // namespace dtcc::runtime::cpu

#endif // DTCC_RUNTIME_DEVICE_CPU_GRIDSAMPLEPLAN_H
