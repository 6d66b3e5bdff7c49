//===- CudaConv.h - convolutions on cuDNN ----------------------*- C++ -*-===//
//
// conv, conv_input_grad and conv_filter_grad (GraphConvOps.td) on cuDNN 9's
// convolution API: descriptors, algorithms (cuDNN's heuristics, preferring
// deterministic ones) and workspace are chosen when a kernel is bound, so a
// step only launches. The host-side part (how a geometry maps onto cuDNN's
// descriptors, and the dtype table) is here, testable without a GPU; the
// kernels are in CudaConv.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CUDA_CUDACONV_H
#define DTCC_RUNTIME_DEVICE_CUDA_CUDACONV_H

#include "runtime/base/DType.h"
#include "runtime/base/Status.h"
#include "runtime/device/cpu/ConvGeometry.h"

#include <cudnn.h>

#include <array>
#include <vector>

namespace dtcc::runtime {
class KernelRegistry;

namespace cuda {
class CudaDevice;

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

/// The cuDNN types of a convolution on `dtype`: the tensors' data type, the
/// accumulation type and the math mode. f32 accumulates in f32 without TF32
/// (CUDNN_FMA_MATH) unless `allowTf32`; f16 and bf16 accumulate in f32 on
/// tensor cores; f64 in f64. Other dtypes: unimplemented, naming the dtype.
struct CudnnConvTypes {
  cudnnDataType_t data;
  cudnnDataType_t compute;
  cudnnMathType_t math;
  bool doubleScale; ///< alpha and beta are double (f64), else float
};
StatusOr<CudnnConvTypes> cudnnConvTypes(DType dtype, bool allowTf32 = false);

/// The largest cuDNN workspace an algorithm may ask for (bytes); faster
/// algorithms that need more are passed over when the kernel is bound.
constexpr int64_t kMaxCudnnWorkspaceBytes = int64_t(256) << 20;

/// Registers conv, conv_input_grad and conv_filter_grad for `device`
/// (CudaConv.cpp); called by registerCudaKernels when cuDNN was found.
void registerCudaConvKernels(KernelRegistry &registry, CudaDevice &device);

} // namespace cuda
} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_DEVICE_CUDA_CUDACONV_H
