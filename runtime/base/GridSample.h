//===- GridSample.h - grid_sample's taps, shared by CPU and CUDA -*- C++
//-*-===//
//
// Where dgraph.grid_sample reads and with which weights, as PyTorch's
// grid_sampler_2d (aten/src/ATen/native/GridSampler.h) computes it: the
// CPU kernels and the CUDA kernels (nvcc) include this one definition, so
// both backends sample, and differentiate, alike.
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

/// The sizes and attributes of one grid_sample: x [n, c, h, w], grid
/// [n, outH, outW, 2], y [n, c, outH, outW].
struct Geometry {
  int64_t n = 0, c = 0, h = 0, w = 0, outH = 0, outW = 0;
  Mode mode = Mode::kBilinear;
  Padding padding = Padding::kZeros;
  bool alignCorners = false;
  DTCC_GRID_HD int64_t plane() const { return h * w; }
  DTCC_GRID_HD int64_t points() const { return outH * outW; }
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

/// The pixels one grid point reads: offsets into an [h, w] plane (-1: out
/// of the image, reads 0), their weights, and the derivatives of the
/// weights with respect to the pixel coordinates (dx, dy), which the
/// grid's gradient chains with `gradX`, `gradY` (d pixel / d grid).
template <typename T> struct Taps {
  static constexpr int kMax = 16;
  int count = 0;
  int64_t at[kMax];
  T weight[kMax], dx[kMax], dy[kMax];
  T gradX = T(0), gradY = T(0);
};

template <typename T>
DTCC_GRID_HD void addTap(Taps<T> &t, const Geometry &g, int64_t ix, int64_t iy,
                         T weight, T dx, T dy) {
  const bool inside = ix >= 0 && ix < g.w && iy >= 0 && iy < g.h;
  t.at[t.count] = inside ? iy * g.w + ix : -1;
  t.weight[t.count] = weight;
  t.dx[t.count] = dx;
  t.dy[t.count] = dy;
  ++t.count;
}

/// The taps of grid position (x, y) (normalized).
template <typename T>
DTCC_GRID_HD void tapsOf(const Geometry &g, T x, T y, Taps<T> &t) {
  t.count = 0;
  T ux, uy;
  T ix = unnormalize(x, g.w, g.alignCorners, &ux);
  T iy = unnormalize(y, g.h, g.alignCorners, &uy);
  if (g.mode == Mode::kBicubic) {
    // Unpadded coordinates; each tap is placed by the padding on its own.
    t.gradX = ux;
    t.gradY = uy;
    const T x0 = floorOf(ix), y0 = floorOf(iy);
    const T tx = ix - x0, ty = iy - y0;
    T wx[4], wy[4], gx[4], gy[4];
    cubicWeights(tx, wx);
    cubicWeights(ty, wy);
    cubicWeightGrads(tx, gx);
    cubicWeightGrads(ty, gy);
    for (int j = 0; j < 4; ++j) {
      for (int i = 0; i < 4; ++i) {
        T unused;
        const T px =
            pad(x0 - T(1) + T(i), g.w, g.padding, g.alignCorners, &unused);
        const T py =
            pad(y0 - T(1) + T(j), g.h, g.padding, g.alignCorners, &unused);
        addTap(t, g, indexOf(px), indexOf(py), wx[i] * wy[j], -gx[i] * wy[j],
               -gy[j] * wx[i]);
      }
    }
    return;
  }
  T px, py;
  ix = pad(ix, g.w, g.padding, g.alignCorners, &px);
  iy = pad(iy, g.h, g.padding, g.alignCorners, &py);
  t.gradX = ux * px;
  t.gradY = uy * py;
  if (g.mode == Mode::kNearest) {
    addTap(t, g, indexOf(roundEvenOf(ix)), indexOf(roundEvenOf(iy)), T(1), T(0),
           T(0));
    return;
  }
  const T x0 = floorOf(ix), y0 = floorOf(iy);
  const T x1 = x0 + T(1), y1 = y0 + T(1);
  const int64_t i0 = indexOf(x0), j0 = indexOf(y0);
  // North-west, north-east, south-west, south-east, as PyTorch sums them.
  addTap(t, g, i0, j0, (x1 - ix) * (y1 - iy), -(y1 - iy), -(x1 - ix));
  addTap(t, g, i0 + 1, j0, (ix - x0) * (y1 - iy), y1 - iy, -(ix - x0));
  addTap(t, g, i0, j0 + 1, (x1 - ix) * (iy - y0), -(iy - y0), x1 - ix);
  addTap(t, g, i0 + 1, j0 + 1, (ix - x0) * (iy - y0), iy - y0, ix - x0);
}

} // namespace dtcc::runtime::grid

#endif // DTCC_RUNTIME_BASE_GRIDSAMPLE_H
