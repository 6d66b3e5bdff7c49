//===- AxisMap.h - separable resampling maps for resize and pad -*- C++ -*-===//
//
// Resize (nearest, linear, cubic, antialiased) and pad's edge/reflect/wrap
// modes read every output element as a weighted sum over a tensor product of
// per-dimension taps. The taps of each dimension are computed once, when a
// kernel is bound, by the functions here; the CPU and CUDA kernels apply
// them, and the adjoints (resize_grad, pad_grad) apply their transposes, so
// every input position sums its contributions itself (no atomics).
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CPU_AXISMAP_H
#define DTCC_RUNTIME_DEVICE_CPU_AXISMAP_H

#include "runtime/exec/Kernel.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dtcc::runtime::cpu {

/// How the `outSize` positions of one output dimension read the `inSize`
/// positions of the input's: output o is the sum of `weight[t] *
/// input[index[t]]` over taps t in [offsets[o], offsets[o + 1]), or the fill
/// value when `fill[o]` is set (then it has no taps).
struct AxisMap {
  int64_t inSize = 0, outSize = 0;
  std::vector<int64_t> offsets; ///< outSize + 1 entries
  std::vector<int64_t> index;
  std::vector<double> weight;
  std::vector<uint8_t> fill; ///< outSize entries, or empty when none is set

  int64_t taps() const { return static_cast<int64_t>(index.size()); }
  /// Output o reads input o with weight 1, for every o.
  bool isIdentity() const;
  /// Every output reads exactly one input with weight 1 (or is filled):
  /// applying the map copies elements.
  bool isCopy() const;
  bool hasFill() const;
};

/// The transpose: input position i lists the (output, weight) pairs that
/// read it, in output order; filled outputs read nothing.
AxisMap transposeAxisMap(const AxisMap &map);

/// ONNX Resize's attributes as a resize / resize_grad kernel receives them.
struct ResizeSpec {
  std::string mode = "nearest";
  std::string coordinates = "half_pixel";
  std::string nearest = "round_prefer_floor";
  double cubicA = -0.75;
  double extrapolation = 0;
  bool excludeOutside = false;
  bool antialias = false;
  std::vector<double> scales;
  std::vector<double> roi; ///< 2 * rank for tf_crop_and_resize, else empty
};

/// Reads and checks the attributes of a resize kernel over `rank`
/// dimensions.
StatusOr<ResizeSpec> readResizeSpec(const KernelContext &ctx, size_t rank);

/// The map of every dimension of a resize from `in` to `out` (ONNX's
/// reference semantics: the resized length of dimension d is
/// `scales[d] * in[d]`).
StatusOr<std::vector<AxisMap>> resizeAxisMaps(const ResizeSpec &spec,
                                              const std::vector<int64_t> &in,
                                              const std::vector<int64_t> &out);

/// The map of every dimension of an edge/reflect/wrap pad of `in` by
/// `low`/`high` (numpy.pad's semantics, repeated reflection and wrapping
/// included); an error for another mode or an empty padded dimension.
StatusOr<std::vector<AxisMap>> padAxisMaps(const std::string &mode,
                                           const std::vector<int64_t> &in,
                                           const std::vector<int64_t> &low,
                                           const std::vector<int64_t> &high);

/// A resize_grad / pad_grad map: the transposes of the forward maps.
std::vector<AxisMap> transposeAxisMaps(const std::vector<AxisMap> &maps);

/// Binds a kernel applying `maps` (one per dimension of `in`) to `in` into
/// `out`, the fill value `fill` where a map fills: copies for copy maps
/// (any dtype), weighted sums accumulated in double otherwise (float
/// dtypes). Errors name the kernel and its node.
StatusOr<KernelFn> bindAxisMaps(const KernelContext &ctx,
                                std::vector<AxisMap> maps, const TensorView &in,
                                const TensorView &out, double fill);

/// The pad kernel of modes edge, reflect and wrap (MovementKernels.cpp's
/// pad handles constant).
StatusOr<KernelFn> buildModePad(const KernelContext &ctx,
                                const std::string &mode);

} // namespace dtcc::runtime::cpu

#endif // DTCC_RUNTIME_DEVICE_CPU_AXISMAP_H
