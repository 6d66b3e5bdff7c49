//===- AxisMap.cpp - separable resampling maps for resize and pad ---------===//
//
// The coordinate transforms and interpolation coefficients follow ONNX's
// reference implementation of Resize (onnx/backend/test/case/node/resize.py
// and, for antialiasing, onnx/reference/ops/op_resize.py): a dimension of
// the input is padded by repeating its edge, the n taps are the n padded
// positions nearest to the original coordinate (the lower one on ties).
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/AxisMap.h"

#include "runtime/device/cpu/CpuKernelUtils.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace dtcc::runtime::cpu {

bool AxisMap::isIdentity() const {
  if (inSize != outSize || taps() != outSize || hasFill())
    return false;
  for (int64_t o = 0; o < outSize; ++o)
    if (offsets[o] != o || index[o] != o || weight[o] != 1.0)
      return false;
  return true;
}

bool AxisMap::isCopy() const {
  for (int64_t o = 0; o < outSize; ++o) {
    int64_t n = offsets[o + 1] - offsets[o];
    bool filled = !fill.empty() && fill[o];
    if (filled ? n != 0 : (n != 1 || weight[offsets[o]] != 1.0))
      return false;
  }
  return true;
}

bool AxisMap::hasFill() const {
  return std::any_of(fill.begin(), fill.end(), [](uint8_t f) { return f; });
}

AxisMap transposeAxisMap(const AxisMap &map) {
  AxisMap t;
  t.inSize = map.outSize;
  t.outSize = map.inSize;
  std::vector<int64_t> counts(map.inSize + 1, 0);
  for (int64_t k = 0; k < map.taps(); ++k)
    ++counts[map.index[k] + 1];
  t.offsets.assign(map.inSize + 1, 0);
  for (int64_t i = 0; i < map.inSize; ++i)
    t.offsets[i + 1] = t.offsets[i] + counts[i + 1];
  t.index.resize(map.taps());
  t.weight.resize(map.taps());
  std::vector<int64_t> next(t.offsets.begin(), t.offsets.end() - 1);
  // Outputs in increasing order: each input's list is in output order.
  for (int64_t o = 0; o < map.outSize; ++o)
    for (int64_t k = map.offsets[o]; k < map.offsets[o + 1]; ++k) {
      int64_t slot = next[map.index[k]]++;
      t.index[slot] = o;
      t.weight[slot] = map.weight[k];
    }
  return t;
}

std::vector<AxisMap> transposeAxisMaps(const std::vector<AxisMap> &maps) {
  std::vector<AxisMap> out;
  for (const AxisMap &m : maps)
    out.push_back(transposeAxisMap(m));
  return out;
}

//===----------------------------------------------------------------------===//
// Resize
//===----------------------------------------------------------------------===//

namespace {

const char *const kModes[] = {"nearest", "linear", "cubic"};
const char *const kCoordinates[] = {
    "half_pixel",    "half_pixel_symmetric", "pytorch_half_pixel",
    "align_corners", "asymmetric",           "tf_half_pixel_for_nn",
    "tf_crop_and_resize"};
const char *const kNearest[] = {"round_prefer_floor", "round_prefer_ceil",
                                "floor", "ceil"};

template <size_t N>
bool oneOf(const std::string &value, const char *const (&allowed)[N]) {
  for (const char *a : allowed)
    if (value == a)
      return true;
  return false;
}

std::vector<double> floatsAttr(const KernelContext &ctx,
                               const std::string &name) {
  auto it = ctx.attrs.all().find(name);
  if (it == ctx.attrs.all().end())
    return {};
  if (auto *v = std::get_if<std::vector<double>>(&it->second))
    return *v;
  if (auto *v = std::get_if<std::vector<int64_t>>(&it->second))
    return std::vector<double>(v->begin(), v->end());
  if (auto *v = std::get_if<double>(&it->second))
    return {*v};
  return {};
}

/// Keys' cubic convolution coefficients of the 4 taps around a position
/// `ratio` in (0, 1] past the second tap (ONNX's cubic_coeffs).
void cubicCoeffs(double r, double a, std::vector<double> &c) {
  c = {((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
       ((a + 2) * r - (a + 3)) * r * r + 1,
       ((a + 2) * (1 - r) - (a + 3)) * (1 - r) * (1 - r) + 1,
       ((a * ((1 - r) + 1) - 5 * a) * ((1 - r) + 1) + 8 * a) * ((1 - r) + 1) -
           4 * a};
}

/// The antialiasing kernels (ONNX-18): the kernel stretched by 1/scale,
/// normalized to sum 1.
void cubicCoeffsAntialias(double r, double scale, double a,
                          std::vector<double> &c) {
  scale = std::min(scale, 1.0);
  auto w = [a](double x) {
    x = std::abs(x);
    double x2 = x * x, x3 = x2 * x;
    if (x <= 1)
      return (a + 2) * x3 - (a + 3) * x2 + 1;
    if (x < 2)
      return a * x3 - 5 * a * x2 + 8 * a * x - 4 * a;
    return 0.0;
  };
  int64_t start = int64_t(std::floor(-2 / scale)) + 1, end = 2 - start;
  c.clear();
  double sum = 0;
  for (int64_t i = start; i < end; ++i) {
    c.push_back(w(scale * (double(i) - r)));
    sum += c.back();
  }
  for (double &v : c)
    v /= sum;
}

void linearCoeffsAntialias(double r, double scale, std::vector<double> &c) {
  scale = std::min(scale, 1.0);
  int64_t start = int64_t(std::floor(-1 / scale)) + 1;
  int64_t footprint = 2 - 2 * start;
  c.clear();
  double sum = 0;
  for (int64_t i = start; i < start + footprint; ++i) {
    double arg = (double(i) - r) * scale;
    c.push_back(std::clamp(1 - std::abs(arg), 0.0, 1.0));
    sum += c.back();
  }
  for (double &v : c)
    v /= sum;
}

/// The map of one dimension of a resize.
AxisMap resizeAxis(const ResizeSpec &spec, int64_t inSize, int64_t outSize,
                   double scale, double roiStart, double roiEnd) {
  AxisMap m;
  m.inSize = inSize;
  m.outSize = outSize;
  m.offsets.push_back(0);
  const bool crop = spec.coordinates == "tf_crop_and_resize";
  if (crop)
    m.fill.assign(outSize, 0);
  // ONNX's reference resizes to a length of scale * in (not rounded).
  const double length = scale * double(inSize);
  const double in = double(inSize);
  std::vector<double> coeffs;
  std::map<int64_t, double> merged;
  for (int64_t o = 0; o < outSize; ++o) {
    const double x = double(o);
    double xo = 0;
    const std::string &c = spec.coordinates;
    if (c == "half_pixel") {
      xo = (x + 0.5) / scale - 0.5;
    } else if (c == "half_pixel_symmetric") {
      double adjustment = double(outSize) / length;
      double center = in / 2;
      double offset = center * (1 - adjustment);
      xo = offset + (x + 0.5) / scale - 0.5;
    } else if (c == "pytorch_half_pixel") {
      xo = length == 1 ? -0.5 : (x + 0.5) / scale - 0.5;
    } else if (c == "align_corners") {
      xo = length == 1 ? 0 : x * (in - 1) / (length - 1);
    } else if (c == "asymmetric") {
      xo = x / scale;
    } else if (c == "tf_half_pixel_for_nn") {
      xo = (x + 0.5) / scale;
    } else { // tf_crop_and_resize
      xo = length == 1 ? (roiEnd - roiStart) * (in - 1) / 2
                       : x * (roiEnd - roiStart) * (in - 1) / (length - 1);
      xo += roiStart * (in - 1);
      if (xo < 0 || xo > in - 1) {
        m.fill[o] = 1;
        m.offsets.push_back(m.taps());
        continue;
      }
    }
    // The taps lie around `base`, with `ratio` in (0, 1] past it.
    double fl = std::floor(xo);
    bool integral = fl == xo;
    int64_t base = int64_t(fl) - (integral ? 1 : 0);
    double ratio = integral ? 1.0 : xo - fl;
    auto clampIndex = [&](int64_t i) {
      return std::clamp<int64_t>(i, 0, inSize - 1);
    };
    if (spec.mode == "nearest") {
      bool upper;
      if (integral)
        upper = true;
      else if (spec.nearest == "round_prefer_floor")
        upper = ratio > 0.5;
      else if (spec.nearest == "round_prefer_ceil")
        upper = ratio >= 0.5;
      else if (spec.nearest == "floor")
        upper = false;
      else
        upper = true;
      m.index.push_back(clampIndex(base + (upper ? 1 : 0)));
      m.weight.push_back(1.0);
      m.offsets.push_back(m.taps());
      continue;
    }
    bool antialias = spec.antialias && scale < 1;
    if (spec.mode == "linear") {
      if (antialias)
        linearCoeffsAntialias(ratio, scale, coeffs);
      else
        coeffs = {1 - ratio, ratio};
    } else if (antialias) {
      cubicCoeffsAntialias(ratio, scale, spec.cubicA, coeffs);
    } else {
      cubicCoeffs(ratio, spec.cubicA, coeffs);
    }
    // The n positions nearest to xo in the edge-padded dimension.
    const int64_t n = int64_t(coeffs.size());
    const int64_t pad = (n + 1) / 2;
    int64_t start = base - (n / 2 - 1);
    start = std::clamp<int64_t>(start, -pad, inSize + pad - n);
    if (spec.excludeOutside) {
      double sum = 0;
      for (int64_t k = 0; k < n; ++k) {
        int64_t i = start + k;
        if (i < 0 || i >= inSize)
          coeffs[k] = 0;
        sum += coeffs[k];
      }
      for (double &v : coeffs)
        v /= sum;
    }
    merged.clear();
    for (int64_t k = 0; k < n; ++k)
      merged[clampIndex(start + k)] += coeffs[k];
    for (auto [i, w] : merged) {
      if (w == 0)
        continue;
      m.index.push_back(i);
      m.weight.push_back(w);
    }
    m.offsets.push_back(m.taps());
  }
  return m;
}

} // namespace

StatusOr<ResizeSpec> readResizeSpec(const KernelContext &ctx, size_t rank) {
  ResizeSpec s;
  s.mode = ctx.attrs.getString("mode", "nearest");
  s.coordinates =
      ctx.attrs.getString("coordinate_transformation_mode", "half_pixel");
  s.nearest = ctx.attrs.getString("nearest_mode", "round_prefer_floor");
  s.cubicA = ctx.attrs.getFloat("cubic_coeff_a", -0.75);
  s.extrapolation = ctx.attrs.getFloat("extrapolation_value", 0.0);
  s.excludeOutside = ctx.attrs.getBool("exclude_outside");
  s.antialias = ctx.attrs.getBool("antialias");
  s.scales = floatsAttr(ctx, "scales");
  s.roi = floatsAttr(ctx, "roi");
  if (!oneOf(s.mode, kModes))
    return ctx.error("expected mode \"nearest\", \"linear\" or \"cubic\", "
                     "got \"",
                     s.mode, "\"");
  if (!oneOf(s.coordinates, kCoordinates))
    return ctx.error("unknown coordinate_transformation_mode \"",
                     s.coordinates, "\"");
  if (!oneOf(s.nearest, kNearest))
    return ctx.error("unknown nearest_mode \"", s.nearest, "\"");
  if (s.scales.size() != rank)
    return ctx.error("expected ", rank, " scales, got ", s.scales.size());
  for (double v : s.scales)
    if (!(v > 0))
      return ctx.error("expected positive scales, got ", v);
  if (s.coordinates == "tf_crop_and_resize" && s.roi.size() != 2 * rank)
    return ctx.error("expected ", 2 * rank, " roi entries, got ",
                     s.roi.size());
  return s;
}

StatusOr<std::vector<AxisMap>> resizeAxisMaps(const ResizeSpec &spec,
                                              const std::vector<int64_t> &in,
                                              const std::vector<int64_t> &out) {
  if (in.size() != out.size() || spec.scales.size() != in.size())
    return invalidArgument("resize of rank ", in.size(), " to rank ",
                           out.size(), " with ", spec.scales.size(),
                           " scales");
  std::vector<AxisMap> maps;
  const size_t rank = in.size();
  for (size_t d = 0; d < rank; ++d) {
    if ((in[d] == 0) != (out[d] == 0))
      return invalidArgument("resize of an empty dimension ", d);
    bool crop = spec.coordinates == "tf_crop_and_resize";
    maps.push_back(resizeAxis(spec, in[d], out[d], spec.scales[d],
                              crop ? spec.roi[d] : 0.0,
                              crop ? spec.roi[d + rank] : 1.0));
  }
  return maps;
}

//===----------------------------------------------------------------------===//
// Pad
//===----------------------------------------------------------------------===//

StatusOr<std::vector<AxisMap>> padAxisMaps(const std::string &mode,
                                           const std::vector<int64_t> &in,
                                           const std::vector<int64_t> &low,
                                           const std::vector<int64_t> &high) {
  if (mode != "edge" && mode != "reflect" && mode != "wrap")
    return invalidArgument("expected pad mode \"edge\", \"reflect\" or "
                           "\"wrap\", got \"",
                           mode, "\"");
  std::vector<AxisMap> maps;
  for (size_t d = 0; d < in.size(); ++d) {
    AxisMap m;
    m.inSize = in[d];
    m.outSize = low[d] + in[d] + high[d];
    if (m.outSize < 0)
      return invalidArgument("dimension ", d, " pads to a negative size ",
                             m.outSize);
    if (in[d] == 0 && m.outSize > 0)
      return invalidArgument("cannot pad empty dimension ", d, " in mode \"",
                             mode, "\"");
    const int64_t n = in[d];
    m.offsets.push_back(0);
    for (int64_t o = 0; o < m.outSize; ++o) {
      int64_t src = o - low[d], i;
      if (mode == "edge") {
        i = std::clamp<int64_t>(src, 0, n - 1);
      } else if (mode == "wrap") {
        i = ((src % n) + n) % n;
      } else if (n == 1) {
        i = 0;
      } else { // reflect, with period 2 (n - 1)
        int64_t period = 2 * (n - 1);
        int64_t r = ((src % period) + period) % period;
        i = r < n ? r : period - r;
      }
      m.index.push_back(i);
      m.weight.push_back(1.0);
      m.offsets.push_back(m.taps());
    }
    maps.push_back(std::move(m));
  }
  return maps;
}

} // namespace dtcc::runtime::cpu
