//===- CudnnConvPlan.h - a convolution as cuDNN's descriptors see it -*- C++ -*-===//
//
// How a convolution's geometry maps onto cuDNN's descriptors: 1-D windows as
// 2-D, asymmetric padding as an explicitly padded copy of the input. Plain
// C++ (no cuDNN header): the conv kernels (CudaConv.cpp) and the CUDA
// kernels' scratch table (runtime/exec/CudaScratch.cpp, which the planner
// links without the toolkit) size the padded copy from the same plan.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CUDA_CUDNNCONVPLAN_H
#define DTCC_RUNTIME_DEVICE_CUDA_CUDNNCONVPLAN_H

#include "runtime/base/Status.h"
#include "runtime/device/cpu/ConvGeometry.h"

#include <cstdint>
#include <vector>

namespace dtcc::runtime::cuda {

/// A convolution as cuDNN's descriptors see it. cuDNN convolves 2 or 3
/// spatial dimensions with symmetric padding: a 1-D window becomes 2-D with
/// a leading size-1 dimension, and a window whose padding differs between
/// the sides (ONNX's asymmetric pads, SAME auto-padding) convolves an
/// explicitly padded copy of the input with no padding of its own.
struct CudnnConvPlan {
  int spatial = 2; ///< 2 or 3
  /// [N, C, spatial..], [O, C/groups, kernel..] and [N, O, spatial..] of the
  /// descriptors (`spatial + 2` entries each); the input is the padded copy
  /// when `explicitPad`.
  std::vector<int> input, filter, output;
  std::vector<int> pad, stride, dilation;
  int groups = 1;
  /// Whether the input is copied into a zero-padded buffer first (and the
  /// input gradient cropped out of one).
  bool explicitPad = false;
  /// The unpadded input [N, C, spatial..] and where it lies in the padded
  /// one (padLow per spatial dimension); only with explicitPad.
  std::vector<int64_t> unpadded, padLow;

  /// Elements of the descriptors' input (the padded copy's size).
  int64_t inputElements() const;
};

/// The plan of `g`; invalidArgument when a size exceeds cuDNN's int range.
StatusOr<CudnnConvPlan> planCudnnConv(const cpu::ConvGeometry &g);

} // namespace dtcc::runtime::cuda

#endif // DTCC_RUNTIME_DEVICE_CUDA_CUDNNCONVPLAN_H
