//===- RoiAlignPlan.h - roi_align's checks, shared by backends -*- C++ -*-===//
//
// The load-time checks of roi_align and roi_align_grad (arity, ranks,
// shapes, dtypes, attributes), done once for the CPU and CUDA factories.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CPU_ROIALIGNPLAN_H
#define DTCC_RUNTIME_DEVICE_CPU_ROIALIGNPLAN_H

#include "runtime/base/RoiAlign.h"
#include "runtime/exec/Kernel.h"

namespace dtcc::runtime::cpu {

/// roi_align (operand, rois, batch_indices -> result) or, with `grad`,
/// roi_align_grad (dy, operand, rois, batch_indices -> doperand): the
/// geometry, or an error naming what does not fit.
StatusOr<roi::Geometry> planRoiAlign(const KernelContext &ctx, bool grad);

} // namespace dtcc::runtime::cpu

#endif // DTCC_RUNTIME_DEVICE_CPU_ROIALIGNPLAN_H
