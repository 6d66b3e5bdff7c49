//===- GridSample.h - grid_sample's taps, shared by CPU and CUDA -*- C++
//-*-===//
//
// Where dgraph.grid_sample reads and with which weights, as PyTorch's
// grid_sampler_2d and grid_sampler_3d (aten/src/ATen/native/GridSampler.h)
// compute it, in 1 to 3 spatial dimensions (ONNX's N-D GridSample; 1-D and
// 3-D bicubic as ONNX's reference extends it, one cubic axis at a time):
// the CPU kernels and the CUDA kernels (nvcc) include this one definition,
// so both backends sample, and differentiate, alike.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_BASE_GRIDSAMPLE_H
#define DTCC_RUNTIME_BASE_GRIDSAMPLE_H

#include <math.h>

#include <cstdint>
#include <type_traits>

#ifdef __CUDACC__
#define DTCC_GRID_HD __host__ __device__ __forceinline__
#else
#define DTCC_GRID_HD inline
#endif

namespace dtcc::runtime::grid {

enum class Mode : int32_t { kBilinear = 0, kNearest = 1, kBicubic = 2 };
enum class Padding : int32_t { kZeros = 0, kBorder = 1, kReflection = 2 };

/// The most spatial dimensions grid_sample samples (ONNX allows any; PyTorch
/// samples 2 and 3).
constexpr int kMaxDims = 3;

/// The sizes and attributes of one grid_sample: x [n, c, s_1, ..., s_r],
/// grid [n, o_1, ..., o_r, r], y [n, c, o_1, ..., o_r] for r = `dims`
/// spatial dimensions. `size` and `outSize` hold them per grid coordinate,
/// x first: size[0] is the operand's last dimension (W), size[1] the one
/// before (H), size[2] the depth (D); the unused ones are 1.
struct Geometry {
  int64_t n = 0, c = 0;
  int dims = 2;
  int64_t size[kMaxDims] = {1, 1, 1}, outSize[kMaxDims] = {1, 1, 1};
  Mode mode = Mode::kBilinear;
  Padding padding = Padding::kZeros;
  bool alignCorners = false;
  /// Elements of one (sample, channel) of the operand, and of the result.
  DTCC_GRID_HD int64_t plane() const { return size[0] * size[1] * size[2]; }
  DTCC_GRID_HD int64_t points() const {
    return outSize[0] * outSize[1] * outSize[2];
  }
};

template <typename T> DTCC_GRID_HD T floorOf(T v) {
  if constexpr (std::is_same_v<T, float>)
    return floorf(v);
  else
    return floor(v);
}
template <typename T> DTCC_GRID_HD T absOf(T v) {
  if constexpr (std::is_same_v<T, float>)
    return fabsf(v);
  else
    return fabs(v);
}
template <typename T> DTCC_GRID_HD T fmodOf(T a, T b) {
  if constexpr (std::is_same_v<T, float>)
    return fmodf(a, b);
  else
    return fmod(a, b);
}
/// Rounds halves to even (nearbyint in the default rounding mode).
template <typename T> DTCC_GRID_HD T roundEvenOf(T v) {
  if constexpr (std::is_same_v<T, float>)
    return nearbyintf(v);
  else
    return nearbyint(v);
}

/// A pixel index from a whole-valued coordinate; far-away (or NaN)
/// coordinates map to indices a few pixels out of range, so that the
/// conversion is defined and every neighbour stays out of range.
template <typename T> DTCC_GRID_HD int64_t indexOf(T v) {
  if (!(v > T(-16)))
    return -16;
  if (!(v < T(int64_t(1) << 40)))
    return int64_t(1) << 40;
  return int64_t(v);
}

/// [-1, 1] to pixel coordinates; `grad` gets d out / d coord.
template <typename T>
DTCC_GRID_HD T unnormalize(T coord, int64_t size, bool alignCorners, T *grad) {
  if (alignCorners) {
    *grad = T(size - 1) / T(2);
    return ((coord + T(1)) / T(2)) * T(size - 1);
  }
  *grad = T(size) / T(2);
  return ((coord + T(1)) * T(size) - T(1)) / T(2);
}

/// Clamps to [0, size - 1]; the gradient is 0 where the clamp is active.
template <typename T> DTCC_GRID_HD T clip(T in, int64_t size, T *grad) {
  if (in <= T(0)) {
    *grad = T(0);
    return T(0);
  }
  const T top = T(size - 1);
  if (in >= top) {
    *grad = T(0);
    return top;
  }
  *grad = T(1);
  return in;
}

/// Reflects into [twiceLow / 2, twiceHigh / 2]; the gradient is +-1.
template <typename T>
DTCC_GRID_HD T reflect(T in, int64_t twiceLow, int64_t twiceHigh, T *grad) {
  if (twiceLow == twiceHigh) {
    *grad = T(0);
    return T(0);
  }
  const T low = T(twiceLow) / T(2);
  const T span = T(twiceHigh - twiceLow) / T(2);
  T sign = T(1);
  in = in - low;
  if (in < T(0)) {
    sign = T(-1);
    in = -in;
  }
  const T extra = fmodOf(in, span);
  const T flips = floorOf(in / span);
  if (fmodOf(flips, T(2)) == T(0)) {
    *grad = sign;
    return extra + low;
  }
  *grad = -sign;
  return span - extra + low;
}

/// Places a pixel coordinate by the padding mode (zeros: unchanged).
template <typename T>
DTCC_GRID_HD T pad(T coord, int64_t size, Padding padding, bool alignCorners,
                   T *grad) {
  *grad = T(1);
  if (padding == Padding::kBorder)
    return clip(coord, size, grad);
  if (padding == Padding::kReflection) {
    T reflected, clipped;
    coord = alignCorners ? reflect(coord, 0, 2 * (size - 1), &reflected)
                         : reflect(coord, -1, 2 * size - 1, &reflected);
    coord = clip(coord, size, &clipped);
    *grad = reflected * clipped;
  }
  return coord;
}

/// Keys' cubic kernel (A = -0.75) at offsets 1 + t, t, 1 - t, 2 - t, and
/// its derivative with respect to t as PyTorch's backward uses it.
template <typename T> DTCC_GRID_HD void cubicWeights(T t, T *w) {
  const T a = T(-0.75);
  auto near = [&](T x) { return ((a + T(2)) * x - (a + T(3))) * x * x + T(1); };
  auto far = [&](T x) {
    return ((a * x - T(5) * a) * x + T(8) * a) * x - T(4) * a;
  };
  w[0] = far(t + T(1));
  w[1] = near(t);
  w[2] = near(T(1) - t);
  w[3] = far(T(2) - t);
}
template <typename T> DTCC_GRID_HD void cubicWeightGrads(T t, T *g) {
  const T a = T(-0.75);
  T x = T(-1) - t;
  g[0] = (T(-3) * a * x - T(10) * a) * x - T(8) * a;
  x = -t;
  g[1] = (T(-3) * (a + T(2)) * x - T(2) * (a + T(3))) * x;
  x = T(1) - t;
  g[2] = (T(3) * (a + T(2)) * x - T(2) * (a + T(3))) * x;
  x = T(2) - t;
  g[3] = (T(3) * a * x - T(10) * a) * x + T(8) * a;
}

/// One grid coordinate's taps along its axis: the indices it reads (out
/// of range: reads 0), their 1-D weights, the weights' derivatives with
/// respect to the pixel coordinate, and d pixel / d grid coordinate.
template <typename T> struct AxisTaps {
  int count = 0;
  int64_t index[4];
  T weight[4], dweight[4];
  T grad = T(0);
};

/// The taps of normalized coordinate `coord` along axis `axis` (0: x, the
/// operand's last dimension).
template <typename T>
DTCC_GRID_HD void axisTapsOf(const Geometry &g, int axis, T coord,
                             AxisTaps<T> &a) {
  const int64_t size = g.size[axis];
  T u;
  T at = unnormalize(coord, size, g.alignCorners, &u);
  if (g.mode == Mode::kBicubic) {
    // Unpadded coordinates; each tap is placed by the padding on its own.
    a.grad = u;
    const T at0 = floorOf(at);
    T w[4], gw[4];
    cubicWeights(at - at0, w);
    cubicWeightGrads(at - at0, gw);
    a.count = 4;
    for (int k = 0; k < 4; ++k) {
      T unused;
      a.index[k] = indexOf(
          pad(at0 - T(1) + T(k), size, g.padding, g.alignCorners, &unused));
      a.weight[k] = w[k];
      a.dweight[k] = -gw[k];
    }
    return;
  }
  T padded;
  at = pad(at, size, g.padding, g.alignCorners, &padded);
  a.grad = u * padded;
  if (g.mode == Mode::kNearest) {
    a.count = 1;
    a.index[0] = indexOf(roundEvenOf(at));
    a.weight[0] = T(1);
    a.dweight[0] = T(0);
    return;
  }
  const T at0 = floorOf(at), at1 = at0 + T(1);
  a.count = 2;
  a.index[0] = indexOf(at0);
  a.index[1] = a.index[0] + 1;
  a.weight[0] = at1 - at;
  a.weight[1] = at - at0;
  a.dweight[0] = T(-1);
  a.dweight[1] = T(1);
}

/// The taps a mode reads along one axis: 1 nearest, 2 linear, 4 cubic.
DTCC_GRID_HD constexpr int tapsPerAxis(Mode mode) {
  return mode == Mode::kNearest ? 1 : mode == Mode::kBicubic ? 4 : 2;
}

/// The pixels one grid point of a `Dims`-dimensional sample reads, with
/// at most `PerAxis` taps along each axis (tapsPerAxis of the mode):
/// offsets into the operand's [(d,) (h,) w] block (-1: out of the image,
/// reads 0), their weights (the product of the axes' 1-D weights), and the
/// weights' derivatives with respect to each pixel coordinate, which the
/// grid's gradient chains with `grad` (d pixel / d grid coordinate). Sized
/// by the mode, so that a volume's trilinear taps (8) do not take the room
/// of its tricubic ones (64): on a GPU that room is each thread's stack.
template <typename T, int Dims, int PerAxis> struct Taps {
  static constexpr int kMax = Dims == 1   ? PerAxis
                              : Dims == 2 ? PerAxis * PerAxis
                                          : PerAxis * PerAxis * PerAxis;
  int count = 0;
  int64_t at[kMax];
  T weight[kMax];
  T d[Dims][kMax];
  T grad[Dims];
};

/// The taps of grid point `coords` (normalized; x first): the product of
/// the axes' taps, x fastest (as PyTorch sums them: north-west, north-east,
/// south-west, south-east, then the same a slice deeper).
template <typename T, int Dims, int PerAxis>
DTCC_GRID_HD void tapsOf(const Geometry &g, const T *coords,
                         Taps<T, Dims, PerAxis> &t) {
  AxisTaps<T> axes[Dims];
  for (int i = 0; i < Dims; ++i) {
    axisTapsOf(g, i, coords[i], axes[i]);
    t.grad[i] = axes[i].grad;
  }
  int k[Dims];
  for (int i = 0; i < Dims; ++i)
    k[i] = 0;
  t.count = 0;
  while (true) {
    bool inside = true;
    int64_t at = 0, stride = 1;
    T weight = axes[0].weight[k[0]];
    for (int i = 0; i < Dims; ++i) {
      const int64_t index = axes[i].index[k[i]];
      inside = inside && index >= 0 && index < g.size[i];
      at += index * stride;
      stride *= g.size[i];
      if (i > 0)
        weight = weight * axes[i].weight[k[i]];
    }
    t.at[t.count] = inside ? at : -1;
    t.weight[t.count] = weight;
    for (int j = 0; j < Dims; ++j) {
      T dw = j == 0 ? axes[0].dweight[k[0]] : axes[0].weight[k[0]];
      for (int i = 1; i < Dims; ++i)
        dw = dw * (i == j ? axes[i].dweight[k[i]] : axes[i].weight[k[i]]);
      t.d[j][t.count] = dw;
    }
    ++t.count;
    int i = 0;
    while (i < Dims && ++k[i] == axes[i].count)
      k[i++] = 0;
    if (i == Dims)
      return;
  }
}

/// Calls f(std::integral_constant<int, D>{}, std::integral_constant<int,
/// P>{}) for the geometry's D spatial dimensions (1 to kMaxDims) and its
/// mode's P taps per axis (tapsPerAxis), on the host.
template <typename F> inline void visitTaps(const Geometry &g, F &&f) {
  auto withDims = [&](auto perAxis) {
    if (g.dims == 1)
      f(std::integral_constant<int, 1>{}, perAxis);
    else if (g.dims == 2)
      f(std::integral_constant<int, 2>{}, perAxis);
    else
      f(std::integral_constant<int, 3>{}, perAxis);
  };
  switch (tapsPerAxis(g.mode)) {
  case 1:
    withDims(std::integral_constant<int, 1>{});
    break;
  case 2:
    withDims(std::integral_constant<int, 2>{});
    break;
  default:
    withDims(std::integral_constant<int, 4>{});
  }
}

} // namespace dtcc::runtime::grid

#endif // DTCC_RUNTIME_BASE_GRIDSAMPLE_H
