//===- ConvGeometry.h - shapes and window of a convolution kernel -*- C++ -*-===//
//
// The three convolution kernels (conv, conv_input_grad, conv_filter_grad;
// dialects/Graph/IR/GraphConvOps.td) read one geometry: the input [N, C,
// X..], filter [O, C/groups, K..] and output [N, O, Y..] shapes and the
// window attributes, checked against each other when a kernel is bound.
// The CPU (oneDNN, im2col + BLAS) and CUDA (cuDNN) kernels share it.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CPU_CONVGEOMETRY_H
#define DTCC_RUNTIME_DEVICE_CPU_CONVGEOMETRY_H

#include "runtime/exec/Kernel.h"

#include <array>
#include <cstdint>
#include <vector>

namespace dtcc::runtime::cpu {

/// A convolution's sizes. Spatial arrays hold `spatial` (1 to 3) entries;
/// the rest is padded like a size-1 dimension (size 1, stride 1, dilation
/// 1, no padding), so loops may always run over three dimensions.
struct ConvGeometry {
  static constexpr int kMaxSpatial = 3;
  int spatial = 0;
  int64_t batch = 0, inChannels = 0, outChannels = 0, groups = 1;
  std::array<int64_t, kMaxSpatial> in{1, 1, 1}, out{1, 1, 1}, kernel{1, 1, 1};
  std::array<int64_t, kMaxSpatial> stride{1, 1, 1}, dilation{1, 1, 1};
  std::array<int64_t, kMaxSpatial> padLow{0, 0, 0}, padHigh{0, 0, 0};

  int64_t inPerGroup() const { return inChannels / groups; }
  int64_t outPerGroup() const { return outChannels / groups; }
  int64_t inPixels() const { return in[0] * in[1] * in[2]; }
  int64_t outPixels() const { return out[0] * out[1] * out[2]; }
  int64_t kernelPixels() const { return kernel[0] * kernel[1] * kernel[2]; }
  /// Multiply-adds of the forward convolution (each gradient does as many).
  double macs() const {
    return double(batch) * double(outChannels) * double(inPerGroup()) *
           double(kernelPixels()) * double(outPixels());
  }

  std::vector<int64_t> inputShape() const;
  std::vector<int64_t> filterShape() const;
  std::vector<int64_t> outputShape() const;
  /// The spatial sizes of a convolution of `size` under dimension d's window:
  /// (size + low + high - ((k - 1) * dilation + 1)) / stride + 1.
  int64_t outputSize(int d, int64_t size) const;
};

/// Which operand of a kernel is which: conv (input, filter) -> output,
/// conv_input_grad (output-shaped grad, filter) -> input-shaped result,
/// conv_filter_grad (input, output-shaped grad) -> filter-shaped result.
enum class ConvKind { kForward, kInputGrad, kFilterGrad };

/// Sets `kind` from a kernel name; false for other names.
bool convKindOf(const std::string &kernel, ConvKind &kind);

/// Checks a conv kernel's arity, dtypes (inputs and output of one dtype),
/// contiguity, window attributes and shapes, and returns its geometry.
/// Errors say what was expected, as dgraph's verifiers do.
StatusOr<ConvGeometry> convGeometry(const KernelContext &ctx, ConvKind kind);

/// The same without looking at the buffers (their data and strides): what
/// an instruction's shapes and attributes say, for those who size a kernel
/// before its buffers exist (runtime/exec/CudaScratch.h, the planner).
StatusOr<ConvGeometry> convGeometryOfShapes(const KernelContext &ctx,
                                            ConvKind kind);

} // namespace dtcc::runtime::cpu

#endif // DTCC_RUNTIME_DEVICE_CPU_CONVGEOMETRY_H
