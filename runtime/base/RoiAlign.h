//===- RoiAlign.h - roi_align's samples, shared by CPU and CUDA -*- C++ -*-===//
//
// Where dgraph.roi_align reads and with which weights, as ONNX's RoiAlign
// (opsets 10 and 16; its reference implementation and ONNX Runtime's, which
// torchvision's roi_align matches for "avg"): each region of interest is
// cut into output_height x output_width bins, each bin sampled on a grid of
// sampling_ratio^2 points (0: ceil(region / bins) per axis, decided by the
// region's size at run time), each point read bilinearly from its four
// neighbours. The CPU kernels and the CUDA kernels (nvcc) include this one
// definition, so both backends sample, and differentiate, alike.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_BASE_ROIALIGN_H
#define DTCC_RUNTIME_BASE_ROIALIGN_H

#include <math.h>

#include <cstdint>

#ifdef __CUDACC__
#define DTCC_ROI_HD __host__ __device__ __forceinline__
#else
#define DTCC_ROI_HD inline
#endif

namespace dtcc::runtime::roi {

/// The sizes and attributes of one roi_align: x [n, c, h, w], rois
/// [rois, 4] (x1, y1, x2, y2 in the input's scale), batch indices [rois],
/// y [rois, c, outH, outW].
struct Geometry {
  int64_t n = 0, c = 0, h = 0, w = 0, rois = 0, outH = 0, outW = 0;
  int64_t samplingRatio = 0;
  double spatialScale = 1.0;
  bool halfPixel = true; ///< "half_pixel"; false: "output_half_pixel"
  bool max = false;      ///< mode "max"; false: "avg"
  DTCC_ROI_HD int64_t plane() const { return h * w; }
  DTCC_ROI_HD int64_t bins() const { return outH * outW; }
};

/// One region's bins: where they start, their size, and the sampling grid
/// of each (`count` divides the average).
template <typename T> struct Region {
  T startH, startW, binH, binW;
  int64_t gridH, gridW, count;
};

/// The most samples along one axis of a bin: the adaptive grid's cap, and
/// the largest sampling_ratio the verifier takes (int64 products of counts
/// stay exact).
constexpr int64_t kMaxGrid = int64_t(1) << 20;

/// ceil(v) as a count of samples (0 for a region of no size or NaN; at
/// most kMaxGrid).
template <typename T> DTCC_ROI_HD int64_t gridOf(T v) {
  if (!(v > T(0)))
    return 0;
  const double c = ceil(double(v));
  return c > double(kMaxGrid) ? kMaxGrid : int64_t(c);
}

/// The bins of region `box` (x1, y1, x2, y2).
template <typename T>
DTCC_ROI_HD Region<T> regionOf(const Geometry &g, const T *box) {
  const T scale = T(g.spatialScale), offset = g.halfPixel ? T(0.5) : T(0);
  Region<T> r;
  r.startW = box[0] * scale - offset;
  r.startH = box[1] * scale - offset;
  T width = box[2] * scale - offset - r.startW;
  T height = box[3] * scale - offset - r.startH;
  if (!g.halfPixel) {
    // The legacy transform: every region at least one pixel.
    width = width > T(1) ? width : T(1);
    height = height > T(1) ? height : T(1);
  }
  r.binH = height / T(g.outH);
  r.binW = width / T(g.outW);
  r.gridH = g.samplingRatio > 0 ? g.samplingRatio : gridOf(height / T(g.outH));
  r.gridW = g.samplingRatio > 0 ? g.samplingRatio : gridOf(width / T(g.outW));
  r.count = r.gridH * r.gridW > 1 ? r.gridH * r.gridW : 1;
  return r;
}

/// One sampling point's four neighbours (offsets into an [h, w] plane) and
/// their bilinear weights; a point more than a pixel outside the image
/// reads nothing (every weight 0, offsets 0).
template <typename T> struct Sample {
  int64_t at[4];
  T weight[4];
};

/// Sample (iy, ix) of bin (ph, pw) of region `r`.
template <typename T>
DTCC_ROI_HD Sample<T> sampleOf(const Geometry &g, const Region<T> &r,
                               int64_t ph, int64_t pw, int64_t iy, int64_t ix) {
  Sample<T> s;
  T y = r.startH + T(ph) * r.binH + (T(iy) + T(0.5)) * r.binH / T(r.gridH);
  T x = r.startW + T(pw) * r.binW + (T(ix) + T(0.5)) * r.binW / T(r.gridW);
  if (!(y >= T(-1) && y <= T(g.h) && x >= T(-1) && x <= T(g.w))) {
    for (int k = 0; k < 4; ++k) {
      s.at[k] = 0;
      s.weight[k] = T(0);
    }
    return s;
  }
  y = y > T(0) ? y : T(0);
  x = x > T(0) ? x : T(0);
  int64_t yLow = int64_t(y), xLow = int64_t(x), yHigh, xHigh;
  if (yLow >= g.h - 1) {
    yHigh = yLow = g.h - 1;
    y = T(yLow);
  } else {
    yHigh = yLow + 1;
  }
  if (xLow >= g.w - 1) {
    xHigh = xLow = g.w - 1;
    x = T(xLow);
  } else {
    xHigh = xLow + 1;
  }
  const T ly = y - T(yLow), lx = x - T(xLow);
  const T hy = T(1) - ly, hx = T(1) - lx;
  s.at[0] = yLow * g.w + xLow;
  s.at[1] = yLow * g.w + xHigh;
  s.at[2] = yHigh * g.w + xLow;
  s.at[3] = yHigh * g.w + xHigh;
  s.weight[0] = hy * hx;
  s.weight[1] = hy * lx;
  s.weight[2] = ly * hx;
  s.weight[3] = ly * lx;
  return s;
}

/// The samples [lo, hi) of bin p along one axis whose coordinate (as
/// sampleOf computes it: start + p * bin + (i + 0.5) * bin / grid) lies in
/// [-1, limit]; the others read nothing. Grids of up to 64 samples are
/// visited whole; larger ones (a region far larger than the image: its
/// grid grows with its size) only inside, found from an estimate and
/// checked with sampleOf's own arithmetic (the coordinate grows with the
/// sample), so that they cost what their part near the image costs.
template <typename T>
DTCC_ROI_HD void insideRange(T start, T bin, int64_t grid, int64_t p,
                             int64_t limit, int64_t &lo, int64_t &hi) {
  lo = 0;
  hi = grid;
  if (grid <= 64 || !(bin > T(0)))
    return;
  const T base = start + T(p) * bin;
  const double step = double(bin) / double(grid);
  // Not finite: every coordinate is outside (or NaN), as sampleOf finds.
  if (!(double(base) - double(base) == 0) || !(step - step == 0)) {
    hi = 0;
    return;
  }
  auto at = [&](int64_t i) { return base + (T(i) + T(0.5)) * bin / T(grid); };
  auto clamped = [&](double i) {
    return i <= 0 ? int64_t(0) : i >= double(grid) ? grid : int64_t(i);
  };
  lo = clamped(floor((-1.0 - double(base)) / step - 0.5) - 1);
  while (lo > 0 && at(lo - 1) >= T(-1))
    --lo;
  while (lo < grid && !(at(lo) >= T(-1)))
    ++lo;
  hi = clamped(floor((double(limit) - double(base)) / step - 0.5) + 2);
  hi = hi < lo ? lo : hi;
  while (hi > lo && !(at(hi - 1) <= T(limit)))
    --hi;
  while (hi < grid && at(hi) <= T(limit))
    ++hi;
}

/// The samples of bin (ph, pw) that can read a pixel: rows [y0, y1) and
/// columns [x0, x1) of its sampling grid.
struct Window {
  int64_t y0, y1, x0, x1;
};
template <typename T>
DTCC_ROI_HD Window windowOf(const Geometry &g, const Region<T> &r, int64_t ph,
                            int64_t pw) {
  Window w;
  insideRange(r.startH, r.binH, r.gridH, ph, g.h, w.y0, w.y1);
  insideRange(r.startW, r.binW, r.gridW, pw, g.w, w.x0, w.x1);
  // An empty image (H or W 0): no sample reads a pixel.
  if (g.h <= 0 || g.w <= 0)
    w.y1 = w.y0;
  return w;
}

/// The value bin (ph, pw) of region `r` pools from a plane whose pixel i
/// `load(i)` reads: the average of its samples ("avg") or, as ONNX's
/// reference and ONNX Runtime compute "max", the largest weighted
/// neighbour of any sample (0 with no samples). `winner` gets where the
/// "max" came from (-1: no pixel) and `winnerWeight` its weight. Samples
/// outside the window read nothing: for "avg" they add 0; for "max" each
/// offers 0, of which only the first in sampling order can win (the
/// comparison is strict).
template <typename T, typename Load>
DTCC_ROI_HD T poolOf(const Geometry &g, const Region<T> &r, Load &&load,
                     int64_t ph, int64_t pw, int64_t &winner, T &winnerWeight) {
  const Window w = windowOf(g, r, ph, pw);
  T sum = T(0), best = T(0);
  bool first = true;
  winner = -1;
  auto offer = [&](T v, int64_t at, T weight) {
    if (first || v > best) {
      best = v;
      winner = at;
      winnerWeight = weight;
      first = false;
    }
  };
  const bool empty = w.y0 == w.y1 || w.x0 == w.x1;
  const bool skipped = w.y1 - w.y0 < r.gridH || w.x1 - w.x0 < r.gridW || empty;
  // Where the first skipped sample comes: before every visited one, after
  // the first visited row, or after all of them.
  const bool zeroFirst = skipped && (w.y0 > 0 || w.x0 > 0 || empty);
  const bool zeroAfterRow = skipped && !zeroFirst && w.x1 < r.gridW;
  if (g.max && zeroFirst)
    offer(T(0), -1, T(0));
  for (int64_t iy = w.y0; iy < w.y1; ++iy) {
    for (int64_t ix = w.x0; ix < w.x1; ++ix) {
      const Sample<T> s = sampleOf(g, r, ph, pw, iy, ix);
      if (!g.max) {
        T v = T(0);
        for (int k = 0; k < 4; ++k)
          v += s.weight[k] * load(s.at[k]);
        sum += v;
        continue;
      }
      for (int k = 0; k < 4; ++k)
        offer(s.weight[k] * load(s.at[k]), s.at[k], s.weight[k]);
    }
    if (g.max && zeroAfterRow && iy == w.y0)
      offer(T(0), -1, T(0));
  }
  if (g.max && skipped && !zeroFirst && !zeroAfterRow)
    offer(T(0), -1, T(0));
  return g.max ? best : sum / T(r.count);
}

/// Where bin (ph, pw)'s gradient `d` goes: add(i, value) for the pixels i
/// of the plane (read through `load`) it pooled from: "avg" every visited
/// sample's neighbours of nonzero weight, weight x d / count; "max" the
/// winner, weight x d.
template <typename T, typename Load, typename Add>
DTCC_ROI_HD void spreadOf(const Geometry &g, const Region<T> &r, Load &&load,
                          int64_t ph, int64_t pw, T d, Add &&add) {
  if (g.max) {
    int64_t winner;
    T weight = T(0);
    poolOf(g, r, load, ph, pw, winner, weight);
    if (winner >= 0)
      add(winner, weight * d);
    return;
  }
  const T share = d / T(r.count);
  const Window w = windowOf(g, r, ph, pw);
  for (int64_t iy = w.y0; iy < w.y1; ++iy)
    for (int64_t ix = w.x0; ix < w.x1; ++ix) {
      const Sample<T> s = sampleOf(g, r, ph, pw, iy, ix);
      for (int k = 0; k < 4; ++k)
        if (s.weight[k] != T(0))
          add(s.at[k], s.weight[k] * share);
    }
}

} // namespace dtcc::runtime::roi

#endif // DTCC_RUNTIME_BASE_ROIALIGN_H
