//===- CpuTensorOpKernelsTest.cpp - resize, pad modes, N-d indexing, top_k ===//
//
// The kernels of GraphIndexingOps.td against naive references written
// independently of the kernels: resize against a literal port of ONNX's
// Python reference (neighbors found by sorting distances, recursive N-d
// interpolation), pad modes against reflection by repeated mirroring, the
// adjoints (resize_grad, pad_grad) by <A x, y> == <x, A^T y>, the scatters
// and gathers against sequential loops, top_k against a stable sort.
//
//===----------------------------------------------------------------------===//

#include "runtime/base/RoiAlign.h"
#include "tests/unit/runtime/CpuKernelTestUtils.h"

#include <algorithm>
#include <functional>
#include <numeric>

using namespace dtcc::runtime;
using namespace dtcc::runtime::test;

namespace {

//===----------------------------------------------------------------------===//
// Resize: ONNX's reference, literally
//===----------------------------------------------------------------------===//

struct ResizeCase {
  std::string mode = "nearest", coordinates = "half_pixel",
              nearest = "round_prefer_floor";
  double cubicA = -0.75, extrapolation = 0;
  bool excludeOutside = false, antialias = false;
  std::vector<double> scales, roi;
};

Attrs resizeAttrs(const ResizeCase &c) {
  Attrs a;
  a.set("mode", c.mode);
  a.set("coordinate_transformation_mode", c.coordinates);
  a.set("nearest_mode", c.nearest);
  a.set("cubic_coeff_a", c.cubicA);
  a.set("extrapolation_value", c.extrapolation);
  if (c.excludeOutside)
    a.set("exclude_outside", int64_t(1));
  if (c.antialias)
    a.set("antialias", int64_t(1));
  a.set("scales", c.scales);
  if (!c.roi.empty())
    a.set("roi", c.roi);
  return a;
}

std::vector<double> refCoeffs(const ResizeCase &c, double ratio, double scale) {
  if (c.mode == "nearest") {
    if (ratio == std::floor(ratio))
      return {0, 1};
    if (c.nearest == "round_prefer_floor")
      return {double(ratio <= 0.5), double(ratio > 0.5)};
    if (c.nearest == "round_prefer_ceil")
      return {double(ratio < 0.5), double(ratio >= 0.5)};
    if (c.nearest == "floor")
      return {1, 0};
    return {0, 1};
  }
  const double a = c.cubicA;
  if (c.antialias && scale < 1) {
    std::vector<double> out;
    double sum = 0;
    if (c.mode == "linear") {
      int64_t start = int64_t(std::floor(-1 / scale) + 1);
      for (int64_t i = start; i < start + 2 - 2 * start; ++i)
        out.push_back(std::clamp(1 - std::fabs((i - ratio) * scale), 0.0, 1.0));
    } else {
      auto w = [&](double x) {
        x = std::fabs(x);
        if (x <= 1)
          return (a + 2) * x * x * x - (a + 3) * x * x + 1;
        if (x < 2)
          return a * x * x * x - 5 * a * x * x + 8 * a * x - 4 * a;
        return 0.0;
      };
      int64_t start = int64_t(std::floor(-2 / scale) + 1);
      for (int64_t i = start; i < 2 - start; ++i)
        out.push_back(w(scale * (i - ratio)));
    }
    for (double v : out)
      sum += v;
    for (double &v : out)
      v /= sum;
    return out;
  }
  if (c.mode == "linear")
    return {1 - ratio, ratio};
  double r = ratio;
  return {((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
          ((a + 2) * r - (a + 3)) * r * r + 1,
          ((a + 2) * (1 - r) - (a + 3)) * (1 - r) * (1 - r) + 1,
          ((a * ((1 - r) + 1) - 5 * a) * ((1 - r) + 1) + 8 * a) *
                  ((1 - r) + 1) -
              4 * a};
}

/// interpolate_1d_with_x of ONNX's resize.py over `len` elements read by
/// `fetch`; nullopt means the extrapolation value.
std::optional<double> refInterp1d(const ResizeCase &c, int64_t len,
                                  double scale, int64_t x, int64_t outLen,
                                  double roi0, double roi1,
                                  const std::function<double(int64_t)> &fetch) {
  const double in = double(len), width = scale * in;
  double xo;
  if (c.coordinates == "align_corners")
    xo = width == 1 ? 0 : x * (in - 1) / (width - 1);
  else if (c.coordinates == "asymmetric")
    xo = x / scale;
  else if (c.coordinates == "tf_crop_and_resize") {
    xo = width == 1 ? (roi1 - roi0) * (in - 1) / 2
                    : x * (roi1 - roi0) * (in - 1) / (width - 1);
    xo += roi0 * (in - 1);
    if (xo < 0 || xo > in - 1)
      return std::nullopt;
  } else if (c.coordinates == "pytorch_half_pixel")
    xo = width == 1 ? -0.5 : (x + 0.5) / scale - 0.5;
  else if (c.coordinates == "tf_half_pixel_for_nn")
    xo = (x + 0.5) / scale;
  else if (c.coordinates == "half_pixel_symmetric") {
    double adj = double(outLen) / width;
    xo = (in / 2) * (1 - adj) + (x + 0.5) / scale - 0.5;
  } else
    xo = (x + 0.5) / scale - 0.5;
  double xi = std::floor(xo);
  double ratio = xo == xi ? 1.0 : xo - xi;
  std::vector<double> coeffs = refCoeffs(c, ratio, scale);
  const int64_t n = int64_t(coeffs.size());
  const int64_t pad = (n + 1) / 2;
  // The n nearest positions of the edge-padded array, smaller first on ties.
  std::vector<int64_t> idx(len + 2 * pad);
  std::iota(idx.begin(), idx.end(), 0);
  const double xp = xo + pad;
  std::sort(idx.begin(), idx.end(), [&](int64_t p, int64_t q) {
    double dp = std::fabs(xp - p), dq = std::fabs(xp - q);
    return dp != dq ? dp < dq : p < q;
  });
  idx.resize(n);
  std::sort(idx.begin(), idx.end());
  if (c.excludeOutside) {
    double sum = 0;
    for (int64_t k = 0; k < n; ++k) {
      int64_t i = idx[k] - pad;
      if (i < 0 || i >= len)
        coeffs[k] = 0;
      sum += coeffs[k];
    }
    for (double &v : coeffs)
      v /= sum;
  }
  double out = 0;
  for (int64_t k = 0; k < n; ++k)
    out += coeffs[k] * fetch(std::clamp<int64_t>(idx[k] - pad, 0, len - 1));
  return out;
}

/// interpolate_nd_with_x: dimension d interpolates the (d+1..)-d results.
double refInterpNd(const ResizeCase &c, const Tensor &t,
                   const std::vector<int64_t> &outShape,
                   const std::vector<int64_t> &x, size_t d, int64_t offset,
                   bool &extrapolated) {
  const size_t rank = t.shape.size();
  if (d == rank)
    return t.get(offset);
  int64_t stride = numelOf(std::vector<int64_t>(t.shape.begin() + d + 1,
                                                t.shape.end()));
  bool crop = c.coordinates == "tf_crop_and_resize";
  auto v = refInterp1d(
      c, t.shape[d], c.scales[d], x[d], outShape[d], crop ? c.roi[d] : 0,
      crop ? c.roi[d + rank] : 1, [&](int64_t i) {
        return refInterpNd(c, t, outShape, x, d + 1, offset + i * stride,
                           extrapolated);
      });
  if (!v) {
    extrapolated = true;
    return c.extrapolation;
  }
  return *v;
}

Tensor refResize(const ResizeCase &c, const Tensor &in,
                 const std::vector<int64_t> &outShape) {
  Tensor out(in.dtype, outShape);
  int64_t o = 0;
  forEachIndex(outShape, [&](const std::vector<int64_t> &x) {
    bool extrapolated = false;
    double v = refInterpNd(c, in, outShape, x, 0, 0, extrapolated);
    out.set(o++, extrapolated ? c.extrapolation : v);
  });
  return out;
}

std::vector<int64_t> sizesOf(const std::vector<int64_t> &shape,
                             const std::vector<double> &scales) {
  std::vector<int64_t> out;
  for (size_t d = 0; d < shape.size(); ++d)
    out.push_back(int64_t(std::floor(shape[d] * scales[d])));
  return out;
}

TEST(CpuTensorOpKernels, ResizeMatchesOnnxReference) {
  std::mt19937 rng(3);
  const char *coordinates[] = {"half_pixel",    "half_pixel_symmetric",
                               "pytorch_half_pixel", "align_corners",
                               "asymmetric",    "tf_half_pixel_for_nn"};
  const char *nearest[] = {"round_prefer_floor", "round_prefer_ceil", "floor",
                           "ceil"};
  std::vector<std::vector<double>> scaleSets = {
      {1.0, 2.0, 1.5}, {1.0, 0.6, 0.75}, {2.0, 1.0, 3.0}, {1.0, 0.5, 1.7}};
  int checked = 0;
  for (const char *mode : {"nearest", "linear", "cubic"})
    for (const char *coord : coordinates)
      for (const auto &scales : scaleSets)
        for (bool flag : {false, true}) {
          ResizeCase c;
          c.mode = mode;
          c.coordinates = coord;
          c.scales = scales;
          if (c.mode == "nearest")
            c.nearest = nearest[checked % 4];
          else if (c.mode == "cubic")
            c.excludeOutside = flag, c.cubicA = flag ? -0.5 : -0.75;
          else
            c.antialias = flag;
          std::vector<int64_t> shape = {2, 5, 4};
          std::vector<int64_t> outShape = sizesOf(shape, scales);
          for (DType dt : {DType::kF64, DType::kF32, DType::kF16}) {
            SCOPED_TRACE(std::string(mode) + " " + coord + " " +
                         dtypeName(dt) + " scales " +
                         std::to_string(scales[1]) + "," +
                         std::to_string(scales[2]) + " flag " +
                         std::to_string(flag));
            Tensor in = randomTensor(rng, dt, shape, -2, 2);
            Tensor out = Tensor::output(dt, outShape);
            Status s = runKernel("resize", {in.view()}, {out.view()},
                                 resizeAttrs(c));
            ASSERT_TRUE(s.isOk()) << s.toString();
            EXPECT_TRUE(tensorsClose(out, refResize(c, in, outShape)));
            ++checked;
          }
        }
  EXPECT_EQ(checked, 3 * 6 * 4 * 2 * 3);
}

TEST(CpuTensorOpKernels, ResizeCropAndResizeExtrapolates) {
  std::mt19937 rng(4);
  ResizeCase c;
  c.mode = "linear";
  c.coordinates = "tf_crop_and_resize";
  c.extrapolation = 10;
  c.roi = {0, 0, 0.4, 0.6, 1, 1, 1.2, 1.7};
  c.scales = {1, 1, 0.75, 0.75};
  Tensor in = randomTensor(rng, DType::kF32, {1, 1, 4, 4});
  Tensor out = Tensor::output(DType::kF32, {1, 1, 3, 3});
  ASSERT_TRUE(
      runKernel("resize", {in.view()}, {out.view()}, resizeAttrs(c)).isOk());
  Tensor ref = refResize(c, in, {1, 1, 3, 3});
  EXPECT_TRUE(tensorsClose(out, ref));
  int extrapolated = 0;
  for (int64_t i = 0; i < ref.numel(); ++i)
    extrapolated += ref.get(i) == 10;
  EXPECT_GT(extrapolated, 0) << "the case must reach outside the input";
}

TEST(CpuTensorOpKernels, NearestResizeCopiesAnyDType) {
  std::mt19937 rng(5);
  ResizeCase c;
  c.coordinates = "asymmetric";
  c.nearest = "floor";
  c.scales = {2.0, 1.5};
  for (DType dt : allDTypes()) {
    SCOPED_TRACE(dtypeName(dt));
    Tensor in = randomTensor(rng, dt, {3, 4}, 0, 100, true);
    Tensor out = Tensor::output(dt, {6, 6});
    ASSERT_TRUE(
        runKernel("resize", {in.view()}, {out.view()}, resizeAttrs(c)).isOk());
    // floor(x / scale) of each output coordinate.
    forEachIndex({6, 6}, [&](const std::vector<int64_t> &x) {
      int64_t r = int64_t(std::floor(x[0] / 2.0)),
              q = int64_t(std::floor(x[1] / 1.5));
      EXPECT_EQ(out.getInt(linearIndex(x, {6, 6})),
                in.getInt(linearIndex({r, q}, {3, 4})));
    });
  }
}

TEST(CpuTensorOpKernels, ResizeRejectsInterpolatedIntegers) {
  ResizeCase c;
  c.mode = "linear";
  c.scales = {2.0};
  Tensor in(DType::kI32, {3}), out = Tensor::output(DType::kI32, {6});
  Status s = runKernel("resize", {in.view()}, {out.view()}, resizeAttrs(c));
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("node_resize"), std::string::npos) << s.toString();
}

double dot(const Tensor &a, const Tensor &b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    s += a.get(i) * b.get(i);
  return s;
}

/// <A x, y> == <x, A^T y> for a kernel A and its adjoint.
void expectAdjoint(const std::string &forward, const std::string &adjoint,
                   const Attrs &attrs, const std::vector<int64_t> &inShape,
                   const std::vector<int64_t> &outShape, std::mt19937 &rng) {
  Tensor x = randomTensor(rng, DType::kF64, inShape);
  Tensor y = randomTensor(rng, DType::kF64, outShape);
  Tensor ax = Tensor::output(DType::kF64, outShape);
  Tensor aty = Tensor::output(DType::kF64, inShape);
  std::vector<TensorView> fwdInputs = {x.view()};
  Tensor zero(DType::kF64, {});
  if (forward == "pad")
    fwdInputs.push_back(zero.view());
  Status s = runKernel(forward, fwdInputs, {ax.view()}, attrs);
  ASSERT_TRUE(s.isOk()) << s.toString();
  s = runKernel(adjoint, {y.view()}, {aty.view()}, attrs);
  ASSERT_TRUE(s.isOk()) << s.toString();
  double lhs = dot(ax, y), rhs = dot(x, aty);
  EXPECT_NEAR(lhs, rhs, 1e-10 * std::max(1.0, std::fabs(lhs)));
}

TEST(CpuTensorOpKernels, ResizeGradIsTheAdjoint) {
  std::mt19937 rng(6);
  for (const char *mode : {"nearest", "linear", "cubic"})
    for (const char *coord :
         {"half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"})
      for (const auto &scales : std::vector<std::vector<double>>{
               {1.0, 2.0, 1.5}, {1.0, 0.5, 0.75}, {3.0, 1.0, 0.4}}) {
        SCOPED_TRACE(std::string(mode) + " " + coord);
        ResizeCase c;
        c.mode = mode;
        c.coordinates = coord;
        c.scales = scales;
        c.antialias = std::string(mode) != "nearest";
        std::vector<int64_t> shape = {2, 6, 5};
        expectAdjoint("resize", "resize_grad", resizeAttrs(c), shape,
                      sizesOf(shape, scales), rng);
      }
  // Outputs that took the extrapolation value get no gradient.
  ResizeCase c;
  c.mode = "linear";
  c.coordinates = "tf_crop_and_resize";
  c.roi = {0.0, 0.2, 1.0, 1.6};
  c.scales = {1.0, 1.0};
  expectAdjoint("resize", "resize_grad", resizeAttrs(c), {3, 5}, {3, 5}, rng);
}

//===----------------------------------------------------------------------===//
// Pad modes
//===----------------------------------------------------------------------===//

/// numpy.pad's source index of padded position `o`: reflect mirrors at the
/// edges again and again, wrap repeats, edge clamps.
int64_t refPadSource(const std::string &mode, int64_t o, int64_t low,
                     int64_t n) {
  int64_t i = o - low;
  if (mode == "edge")
    return std::clamp<int64_t>(i, 0, n - 1);
  if (mode == "wrap") {
    while (i < 0)
      i += n;
    while (i >= n)
      i -= n;
    return i;
  }
  if (n == 1)
    return 0;
  while (i < 0 || i >= n) {
    if (i < 0)
      i = -i;
    if (i >= n)
      i = 2 * (n - 1) - i;
  }
  return i;
}

TEST(CpuTensorOpKernels, PadModesMatchNumpy) {
  std::mt19937 rng(7);
  const std::vector<int64_t> shape = {3, 1, 4};
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>
      pads = {{{0, 2, 3}, {1, 3, 2}},   // short and long (repeated) pads
              {{2, 0, 9}, {0, 0, 1}},   // pad 9 on a dimension of 4
              {{-1, 1, -2}, {1, 0, 3}}}; // crop and pad
  for (const char *mode : {"edge", "reflect", "wrap"})
    for (const auto &lowHigh : pads)
      for (DType dt : {DType::kF32, DType::kF64, DType::kBF16, DType::kI8,
                       DType::kU64, DType::kBool}) {
        const std::vector<int64_t> &low = lowHigh.first, &high = lowHigh.second;
        SCOPED_TRACE(std::string(mode) + " " + dtypeName(dt) + " low " +
                     shapeStr(low));
        std::vector<int64_t> outShape;
        for (size_t d = 0; d < shape.size(); ++d)
          outShape.push_back(low[d] + shape[d] + high[d]);
        Tensor in = randomTensor(rng, dt, shape, 0, 50, true);
        Tensor value(dt, {});
        Tensor out = Tensor::output(dt, outShape);
        Attrs a;
        a.set("low", low);
        a.set("high", high);
        a.set("mode", std::string(mode));
        Status s = runKernel("pad", {in.view(), value.view()}, {out.view()}, a);
        ASSERT_TRUE(s.isOk()) << s.toString();
        forEachIndex(outShape, [&](const std::vector<int64_t> &o) {
          std::vector<int64_t> src;
          for (size_t d = 0; d < shape.size(); ++d)
            src.push_back(refPadSource(mode, o[d], low[d], shape[d]));
          EXPECT_EQ(out.getInt(linearIndex(o, outShape)),
                    in.getInt(linearIndex(src, shape)));
        });
        // pad_grad is pad's adjoint (floats).
        if (dt == DType::kF64)
          expectAdjoint("pad", "pad_grad", a, shape, outShape, rng);
      }
}

TEST(CpuTensorOpKernels, PadModeRejectsEmptyDimension) {
  Tensor in(DType::kF32, {0, 2}), value(DType::kF32, {});
  Tensor out = Tensor::output(DType::kF32, {2, 2});
  Attrs a;
  a.set("low", std::vector<int64_t>{1, 0});
  a.set("high", std::vector<int64_t>{1, 0});
  a.set("mode", std::string("reflect"));
  Status s = runKernel("pad", {in.view(), value.view()}, {out.view()}, a);
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("empty dimension 0"), std::string::npos)
      << s.toString();
}

//===----------------------------------------------------------------------===//
// gather_nd, scatter_nd
//===----------------------------------------------------------------------===//

/// The data offset of tuple [b.., i..] or -1: a sequential reference.
int64_t refTupleOffset(const Tensor &data, const Tensor &idx, int64_t b,
                       int64_t batchIndex, int64_t tuple) {
  int64_t k = idx.shape.back();
  std::vector<int64_t> strides = contiguousStrides(data.shape);
  int64_t off = 0, rest = batchIndex;
  for (int64_t d = b - 1; d >= 0; --d) {
    off += (rest % data.shape[d]) * strides[d];
    rest /= data.shape[d];
  }
  for (int64_t j = 0; j < k; ++j) {
    int64_t v = idx.getInt(tuple * k + j), n = data.shape[b + j];
    if (v < -n || v >= n)
      return -1;
    off += (v < 0 ? v + n : v) * strides[b + j];
  }
  return off;
}

TEST(CpuTensorOpKernels, GatherNdWithBatchDims) {
  std::mt19937 rng(8);
  struct Shape {
    std::vector<int64_t> data, indices;
    int64_t b;
  };
  for (const Shape &sh : std::vector<Shape>{{{4, 5, 6}, {3, 2}, 0},
                                            {{4, 5, 6}, {2, 2, 1}, 0},
                                            {{2, 3, 4, 5}, {2, 6, 2}, 1},
                                            {{2, 3, 4}, {2, 3, 1}, 2},
                                            {{3, 4}, {5, 2}, 0}})
    for (DType dt : {DType::kF32, DType::kF16, DType::kI64, DType::kBool})
      for (DType it : {DType::kI32, DType::kI64}) {
        SCOPED_TRACE(shapeStr(sh.data) + " " + shapeStr(sh.indices) + " " +
                     dtypeName(dt));
        Tensor data = randomTensor(rng, dt, sh.data, 0, 9, true);
        Tensor idx(it, sh.indices);
        int64_t k = sh.indices.back();
        for (int64_t i = 0; i < idx.numel(); ++i) {
          int64_t n = sh.data[sh.b + i % k];
          idx.setInt(i, std::uniform_int_distribution<int64_t>(-n, n - 1)(rng));
        }
        std::vector<int64_t> outShape(sh.indices.begin(), sh.indices.end() - 1);
        outShape.insert(outShape.end(), sh.data.begin() + sh.b + k,
                        sh.data.end());
        Tensor out = Tensor::output(dt, outShape);
        Attrs a;
        a.set("batch_dims", sh.b);
        Status s = runKernel("gather_nd", {data.view(), idx.view()},
                             {out.view()}, a);
        ASSERT_TRUE(s.isOk()) << s.toString();
        int64_t slice = numelOf(
            std::vector<int64_t>(sh.data.begin() + sh.b + k, sh.data.end()));
        int64_t perBatch = numelOf(std::vector<int64_t>(
            sh.indices.begin() + sh.b, sh.indices.end() - 1));
        int64_t tuples = idx.numel() / k;
        for (int64_t t = 0; t < tuples; ++t) {
          int64_t off = refTupleOffset(data, idx, sh.b, t / perBatch, t);
          for (int64_t j = 0; j < slice; ++j)
            EXPECT_EQ(out.getInt(t * slice + j), data.getInt(off + j));
        }
      }
}

TEST(CpuTensorOpKernels, GatherNdReportsIndexOutOfRange) {
  Tensor data(DType::kF32, {4, 5}), idx(DType::kI64, {2, 2});
  idx.setInt(0, 1);
  idx.setInt(1, 2);
  idx.setInt(2, 3);
  idx.setInt(3, 5);
  Tensor out = Tensor::output(DType::kF32, {2});
  Status s = runKernel("gather_nd", {data.view(), idx.view()}, {out.view()});
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.toString();
  EXPECT_NE(s.message().find("node_gather_nd"), std::string::npos);
  EXPECT_NE(s.message().find("index 5 at position 3"), std::string::npos)
      << s.toString();
}

double refCombine(const std::string &r, double a, double b) {
  if (r == "none")
    return b;
  if (r == "add")
    return a + b;
  if (r == "mul")
    return a * b;
  if (r == "max")
    return std::max(a, b);
  return std::min(a, b);
}

TEST(CpuTensorOpKernels, ScatterNdAppliesInIndexOrder) {
  std::mt19937 rng(9);
  const std::vector<int64_t> dataShape = {4, 3, 2};
  for (const char *r : {"none", "add", "mul", "max", "min"})
    for (DType dt : {DType::kF32, DType::kF64, DType::kBF16, DType::kI32,
                     DType::kU8})
      for (int64_t k : {1, 2, 3}) {
        SCOPED_TRACE(std::string(r) + " " + dtypeName(dt) + " k " +
                     std::to_string(k));
        Tensor data = randomTensor(rng, dt, dataShape, 0, 5, true);
        // Six tuples, with repeats, some negative.
        Tensor idx(DType::kI64, {6, k});
        for (int64_t t = 0; t < 6; ++t)
          for (int64_t j = 0; j < k; ++j) {
            int64_t n = dataShape[j];
            idx.setInt(t * k + j, t % 3 == 2 ? -1 : (t / 2) % n);
          }
        std::vector<int64_t> updShape = {6};
        updShape.insert(updShape.end(), dataShape.begin() + k, dataShape.end());
        Tensor upd = randomTensor(rng, dt, updShape, 0, 5, true);
        Tensor out = Tensor::output(dt, dataShape);
        Attrs a;
        a.set("reduction", std::string(r));
        Status s = runKernel("scatter_nd", {data.view(), idx.view(), upd.view()},
                             {out.view()}, a);
        ASSERT_TRUE(s.isOk()) << s.toString();
        Tensor ref(dt, dataShape);
        for (int64_t i = 0; i < data.numel(); ++i)
          ref.set(i, data.get(i));
        int64_t slice = upd.numel() / 6;
        for (int64_t t = 0; t < 6; ++t) {
          int64_t off = refTupleOffset(data, idx, 0, 0, t);
          for (int64_t j = 0; j < slice; ++j)
            ref.set(off + j, refCombine(r, ref.get(off + j), upd.get(t * slice + j)));
        }
        EXPECT_TRUE(tensorsClose(out, ref));
      }
}

TEST(CpuTensorOpKernels, ScatterNdRejectsBadInput) {
  Tensor data(DType::kF32, {4}), idx(DType::kI64, {1, 1}), upd(DType::kF32, {1});
  idx.setInt(0, -5);
  Tensor out = Tensor::output(DType::kF32, {4});
  Status s = runKernel("scatter_nd", {data.view(), idx.view(), upd.view()},
                       {out.view()});
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.toString();
  EXPECT_NE(s.message().find("index -5 at position 0"), std::string::npos);
  Tensor flags(DType::kBool, {4}), bupd(DType::kBool, {1});
  Attrs a;
  a.set("reduction", std::string("add"));
  s = runKernel("scatter_nd", {flags.view(), idx.view(), bupd.view()},
                {flags.view()}, a);
  EXPECT_FALSE(s.isOk());
}

//===----------------------------------------------------------------------===//
// scatter_elements
//===----------------------------------------------------------------------===//

TEST(CpuTensorOpKernels, ScatterElementsAlongEveryAxis) {
  std::mt19937 rng(10);
  const std::vector<int64_t> dataShape = {3, 4, 5};
  const std::vector<int64_t> idxShape = {2, 4, 3};
  for (int64_t axis = 0; axis < 3; ++axis)
    for (const char *r : {"none", "add", "mul", "max", "min"})
      for (DType dt : {DType::kF32, DType::kF16, DType::kI64})
        for (DType it : {DType::kI32, DType::kI64}) {
          SCOPED_TRACE(std::to_string(axis) + " " + r + " " + dtypeName(dt));
          Tensor data = randomTensor(rng, dt, dataShape, 0, 6, true);
          Tensor upd = randomTensor(rng, dt, idxShape, 0, 6, true);
          Tensor idx(it, idxShape);
          int64_t n = dataShape[axis];
          for (int64_t i = 0; i < idx.numel(); ++i)
            idx.setInt(i, std::uniform_int_distribution<int64_t>(-n, n - 1)(rng));
          Tensor out = Tensor::output(dt, dataShape);
          Attrs a;
          a.set("axis", axis);
          a.set("reduction", std::string(r));
          Status s = runKernel("scatter_elements",
                               {data.view(), idx.view(), upd.view()},
                               {out.view()}, a);
          ASSERT_TRUE(s.isOk()) << s.toString();
          Tensor ref(dt, dataShape);
          for (int64_t i = 0; i < data.numel(); ++i)
            ref.set(i, data.get(i));
          int64_t e = 0;
          forEachIndex(idxShape, [&](const std::vector<int64_t> &p) {
            std::vector<int64_t> target = p;
            int64_t v = idx.getInt(e);
            target[axis] = v < 0 ? v + n : v;
            int64_t t = linearIndex(target, dataShape);
            ref.set(t, refCombine(r, ref.get(t), upd.get(e)));
            ++e;
          });
          EXPECT_TRUE(tensorsClose(out, ref));
        }
}

TEST(CpuTensorOpKernels, ScatterElementsReportsIndexOutOfRange) {
  Tensor data(DType::kF32, {2, 3}), idx(DType::kI64, {2, 1}),
      upd(DType::kF32, {2, 1});
  idx.setInt(1, 3);
  Tensor out = Tensor::output(DType::kF32, {2, 3});
  Attrs a;
  a.set("axis", int64_t(1));
  Status s = runKernel("scatter_elements", {data.view(), idx.view(), upd.view()},
                       {out.view()}, a);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.toString();
  EXPECT_NE(s.message().find("scatter_elements at 'node_scatter_elements': "
                             "index 3 at position 1"),
            std::string::npos)
      << s.toString();
}

//===----------------------------------------------------------------------===//
// top_k
//===----------------------------------------------------------------------===//

TEST(CpuTensorOpKernels, TopKMatchesStableSort) {
  std::mt19937 rng(11);
  const std::vector<int64_t> shape = {3, 7, 2};
  for (int64_t axis = 0; axis < 3; ++axis)
    for (bool largest : {true, false})
      for (DType dt : {DType::kF32, DType::kF64, DType::kBF16, DType::kI32,
                       DType::kU8}) {
        SCOPED_TRACE(std::to_string(axis) + (largest ? " largest " : " smallest ") +
                     dtypeName(dt));
        // Few distinct values: many ties.
        Tensor in = randomTensor(rng, dt, shape, 0, 3, true);
        if (dt == DType::kF32)
          in.set(2, NAN);
        int64_t size = shape[axis];
        for (int64_t k : {int64_t(0), int64_t(1), size}) {
          std::vector<int64_t> outShape = shape;
          outShape[axis] = k;
          Tensor values = Tensor::output(dt, outShape);
          Tensor indices = Tensor::output(DType::kI64, outShape);
          Attrs a;
          a.set("k", k);
          a.set("axis", axis);
          a.set("largest", int64_t(largest));
          Status s = runKernel("top_k", {in.view()},
                               {values.view(), indices.view()}, a);
          ASSERT_TRUE(s.isOk()) << s.toString();
          std::vector<int64_t> rowShape = shape;
          rowShape[axis] = 1;
          forEachIndex(rowShape, [&](const std::vector<int64_t> &base) {
            std::vector<int64_t> order(size);
            std::iota(order.begin(), order.end(), 0);
            auto at = [&](int64_t i) {
              std::vector<int64_t> p = base;
              p[axis] = i;
              return in.get(linearIndex(p, shape));
            };
            // NaN counts as the largest value.
            auto key = [&](int64_t i) {
              double v = at(i);
              return std::isnan(v) ? INFINITY : v;
            };
            // Stable: equal keys keep index order.
            std::sort(order.begin(), order.end(), [&](int64_t p, int64_t q) {
              if (key(p) != key(q))
                return largest ? key(p) > key(q) : key(p) < key(q);
              return p < q;
            });
            for (int64_t r = 0; r < k; ++r) {
              std::vector<int64_t> p = base;
              p[axis] = r;
              int64_t o = linearIndex(p, outShape);
              EXPECT_EQ(indices.getInt(o), order[r]);
              double v = values.get(o), e = at(order[r]);
              EXPECT_TRUE(v == e || (std::isnan(v) && std::isnan(e)));
            }
          });
        }
      }
}

TEST(CpuTensorOpKernels, RegistryHasTheTensorOps) {
  for (const char *name : {"resize", "resize_grad", "pad_grad", "gather_nd",
                           "scatter_nd", "scatter_elements", "top_k"})
    EXPECT_NE(cpuRegistry().find(name), nullptr) << name;
}

//===----------------------------------------------------------------------===//
// grid_sample
//===----------------------------------------------------------------------===//

Attrs gridSampleAttrs(const std::string &mode, const std::string &padding,
                      int64_t align) {
  Attrs a;
  a.set("mode", mode);
  a.set("padding_mode", padding);
  a.set("align_corners", align);
  return a;
}

/// `t` in `dtype` (rounded), and those values again in f64.
std::pair<Tensor, Tensor> roundedPair(const Tensor &t, DType dtype) {
  Tensor narrow(dtype, t.shape), wide(DType::kF64, t.shape);
  for (int64_t i = 0; i < t.numel(); ++i) {
    narrow.set(i, t.get(i));
    wide.set(i, narrow.get(i));
  }
  return {narrow, wide};
}

/// Each half-precision result (`got`) against f64's from the same rounded
/// inputs (`want`), relative to the tensor's largest magnitude: the halves
/// round the result once, after float arithmetic.
void expectHalvesNearF64(
    DType half, std::initializer_list<std::pair<Tensor *, Tensor *>> pairs) {
  const double rtol = half == DType::kF16 ? 2e-3 : 1.6e-2;
  for (auto [got, want] : pairs) {
    double scale = 1;
    for (int64_t i = 0; i < want->numel(); ++i)
      scale = std::max(scale, std::fabs(want->get(i)));
    for (int64_t i = 0; i < want->numel(); ++i)
      ASSERT_NEAR(got->get(i), want->get(i), rtol * scale) << "element " << i;
  }
}

// The image's gradient is the adjoint of sampling: <Y(x), dy> = <x, dX(dy)>
// for every mode and padding, grid points past the borders, in 1, 2 and 3
// spatial dimensions; and f16/bf16 compute in float what f64 computes from
// the same rounded values.
TEST(CpuTensorOpKernels, GridSampleGradAndHalvesMatchF64) {
  std::mt19937 rng(16);
  struct Shapes {
    std::vector<int64_t> xs, gs, ys;
  };
  for (const Shapes &shapes :
       {Shapes{{2, 3, 5, 6}, {2, 4, 7, 2}, {2, 3, 4, 7}},
        Shapes{{2, 3, 7}, {2, 9, 1}, {2, 3, 9}},
        Shapes{{1, 2, 3, 4, 5}, {1, 2, 3, 4, 3}, {1, 2, 2, 3, 4}}})
    for (const char *mode : {"bilinear", "nearest", "bicubic"})
      for (const char *padding : {"zeros", "border", "reflection"})
        for (int64_t align : {0, 1}) {
          const std::vector<int64_t> &xs = shapes.xs, &gs = shapes.gs,
                                     &ys = shapes.ys;
          SCOPED_TRACE(std::to_string(xs.size() - 2) + "-D " + mode + " " +
                       padding + " align " + std::to_string(align));
          Attrs a = gridSampleAttrs(mode, padding, align);
          Tensor x = randomTensor(rng, DType::kF64, xs);
          Tensor g = randomTensor(rng, DType::kF64, gs, -1.3, 1.3);
          Tensor dy = randomTensor(rng, DType::kF64, ys);
          Tensor y = Tensor::output(DType::kF64, ys);
          Tensor dx = Tensor::output(DType::kF64, xs);
          Tensor dg = Tensor::output(DType::kF64, gs);
          Status s =
              runKernel("grid_sample", {x.view(), g.view()}, {y.view()}, a);
          ASSERT_TRUE(s.isOk()) << s.toString();
          s = runKernel("grid_sample_grad", {dy.view(), x.view(), g.view()},
                        {dx.view(), dg.view()}, a);
          ASSERT_TRUE(s.isOk()) << s.toString();
          double lhs = dot(y, dy), rhs = dot(x, dx);
          EXPECT_NEAR(lhs, rhs, 1e-10 * std::max(1.0, std::fabs(lhs)));
          if (std::string(mode) == "nearest")
            for (int64_t i = 0; i < dg.numel(); ++i)
              ASSERT_EQ(dg.get(i), 0.0) << "nearest's grid gradient at " << i;
          for (DType half : {DType::kF16, DType::kBF16}) {
            SCOPED_TRACE(dtypeName(half));
            auto [hx, wx] = roundedPair(x, half);
            auto [hg, wg] = roundedPair(g, half);
            auto [hdy, wdy] = roundedPair(dy, half);
            Tensor wy = Tensor::output(DType::kF64, ys),
                   wdx = Tensor::output(DType::kF64, xs),
                   wdg = Tensor::output(DType::kF64, gs);
            Tensor hy = Tensor::output(half, ys),
                   hdx = Tensor::output(half, xs),
                   hdg = Tensor::output(half, gs);
            ASSERT_TRUE(
                runKernel("grid_sample", {wx.view(), wg.view()}, {wy.view()}, a)
                    .isOk());
            ASSERT_TRUE(runKernel("grid_sample_grad",
                                  {wdy.view(), wx.view(), wg.view()},
                                  {wdx.view(), wdg.view()}, a)
                            .isOk());
            ASSERT_TRUE(
                runKernel("grid_sample", {hx.view(), hg.view()}, {hy.view()}, a)
                    .isOk());
            ASSERT_TRUE(runKernel("grid_sample_grad",
                                  {hdy.view(), hx.view(), hg.view()},
                                  {hdx.view(), hdg.view()}, a)
                            .isOk());
            expectHalvesNearF64(half, {{&hy, &wy}, {&hdx, &wdx}, {&hdg, &wdg}});
          }
        }
}

//===----------------------------------------------------------------------===//
// roi_align
//===----------------------------------------------------------------------===//

Attrs roiAlignAttrs(const std::string &mode, int64_t ratio, bool halfPixel) {
  Attrs a;
  a.set("mode", mode);
  a.set("output_height", int64_t(3));
  a.set("output_width", int64_t(2));
  a.set("sampling_ratio", ratio);
  a.set("spatial_scale", 0.5);
  a.set("half_pixel", int64_t(halfPixel));
  return a;
}

/// Regions over two 8x10 images (0.5 of the boxes' scale): inside, past
/// the borders, of no size, and one of 1 by 30 pixels.
std::pair<Tensor, Tensor> roiBoxes(DType dtype) {
  const std::vector<std::vector<double>> boxes = {{2, 3, 13, 11},
                                                  {-6, -4, 5, 7},
                                                  {10, 10, 24, 22},
                                                  {6, 6, 6, 6},
                                                  {0, 0, 2, 60}};
  Tensor rois(dtype, {5, 4}), batch(DType::kI64, {5});
  for (int64_t r = 0; r < 5; ++r) {
    for (int64_t k = 0; k < 4; ++k)
      rois.set(r * 4 + k, boxes[size_t(r)][size_t(k)]);
    batch.set(r, double(r % 2));
  }
  return {rois, batch};
}

// The image's gradient is the adjoint of "avg" pooling: <Y(x), dy> =
// <x, dX(dy)>, for both transforms, fixed and adaptive sampling grids; for
// "max" each bin's dy lands on one pixel, weighted; f16/bf16 compute in
// float what f64 computes from the same rounded values.
TEST(CpuTensorOpKernels, RoiAlignGradAndHalvesMatchF64) {
  std::mt19937 rng(10);
  const std::vector<int64_t> xs{2, 3, 8, 10}, ys{5, 3, 3, 2};
  auto [rois, batch] = roiBoxes(DType::kF64);
  for (const char *mode : {"avg", "max"})
    for (int64_t ratio : {0, 2})
      for (bool halfPixel : {true, false}) {
        SCOPED_TRACE(std::string(mode) + " ratio " + std::to_string(ratio) +
                     (halfPixel ? " half_pixel" : " output_half_pixel"));
        Attrs a = roiAlignAttrs(mode, ratio, halfPixel);
        Tensor x = randomTensor(rng, DType::kF64, xs);
        Tensor dy = randomTensor(rng, DType::kF64, ys);
        Tensor y = Tensor::output(DType::kF64, ys);
        Tensor dx = Tensor::output(DType::kF64, xs);
        Status s = runKernel("roi_align", {x.view(), rois.view(), batch.view()},
                             {y.view()}, a);
        ASSERT_TRUE(s.isOk()) << s.toString();
        s = runKernel("roi_align_grad",
                      {dy.view(), x.view(), rois.view(), batch.view()},
                      {dx.view()}, a);
        ASSERT_TRUE(s.isOk()) << s.toString();
        if (std::string(mode) == "avg") {
          double lhs = dot(y, dy), rhs = dot(x, dx);
          EXPECT_NEAR(lhs, rhs, 1e-10 * std::max(1.0, std::fabs(lhs)));
        }
        // The region of no size pools nothing with an adaptive grid (none
        // of its samples; the legacy transform makes it a pixel wide, a
        // fixed grid samples its one point).
        if (halfPixel && ratio == 0)
          for (int64_t i = 3 * 18; i < 4 * 18; ++i)
            ASSERT_EQ(y.get(i), 0.0) << "element " << i;
        for (DType half : {DType::kF16, DType::kBF16}) {
          SCOPED_TRACE(dtypeName(half));
          auto [hx, wx] = roundedPair(x, half);
          auto [hdy, wdy] = roundedPair(dy, half);
          auto [hr, wr] = roundedPair(rois, half);
          Tensor wy = Tensor::output(DType::kF64, ys),
                 wdx = Tensor::output(DType::kF64, xs);
          Tensor hy = Tensor::output(half, ys), hdx = Tensor::output(half, xs);
          ASSERT_TRUE(runKernel("roi_align",
                                {wx.view(), wr.view(), batch.view()},
                                {wy.view()}, a)
                          .isOk());
          ASSERT_TRUE(
              runKernel("roi_align_grad",
                        {wdy.view(), wx.view(), wr.view(), batch.view()},
                        {wdx.view()}, a)
                  .isOk());
          ASSERT_TRUE(runKernel("roi_align",
                                {hx.view(), hr.view(), batch.view()},
                                {hy.view()}, a)
                          .isOk());
          ASSERT_TRUE(
              runKernel("roi_align_grad",
                        {hdy.view(), hx.view(), hr.view(), batch.view()},
                        {hdx.view()}, a)
                  .isOk());
          expectHalvesNearF64(half, {{&hy, &wy}, {&hdx, &wdx}});
        }
      }
}

// A region far larger than the image (an adaptive grid of 1,000-8,000
// samples a side) pools what visiting all of its samples pools, in both
// modes, and its gradient ("avg") is the adjoint: only the samples near
// the image are visited.
TEST(CpuTensorOpKernels, RoiAlignOfHugeRegionsVisitsTheImageOnly) {
  std::mt19937 rng(11);
  const std::vector<int64_t> xs{1, 2, 6, 7}, ys{3, 2, 2, 1};
  Tensor rois(DType::kF64, {3, 4}), batch(DType::kI64, {3});
  const double boxes[3][4] = {
      {-1500, -1000, 1500, 1200}, {-5.5, 1, 8000, 4}, {2, -4000, 3.5, -3990}};
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t k = 0; k < 4; ++k)
      rois.set(r * 4 + k, boxes[r][k]);
  for (const char *mode : {"avg", "max"}) {
    SCOPED_TRACE(mode);
    Attrs a;
    a.set("mode", std::string(mode));
    a.set("output_height", int64_t(2));
    a.set("output_width", int64_t(1));
    a.set("sampling_ratio", int64_t(0));
    a.set("spatial_scale", 1.0);
    a.set("half_pixel", int64_t(1));
    Tensor x = randomTensor(rng, DType::kF64, xs);
    // Negative pixels: "max" must still offer the zeros of the samples
    // that read nothing.
    Tensor y = Tensor::output(DType::kF64, ys);
    ASSERT_TRUE(runKernel("roi_align", {x.view(), rois.view(), batch.view()},
                          {y.view()}, a)
                    .isOk());
    roi::Geometry g;
    g.n = 1, g.c = 2, g.h = 6, g.w = 7, g.rois = 3, g.outH = 2, g.outW = 1;
    g.max = std::string(mode) == "max";
    for (int64_t r = 0; r < 3; ++r) {
      const roi::Region<double> region = roi::regionOf(g, boxes[r]);
      for (int64_t c = 0; c < 2; ++c)
        for (int64_t ph = 0; ph < 2; ++ph) {
          double sum = 0, best = 0;
          bool first = true;
          for (int64_t iy = 0; iy < region.gridH; ++iy)
            for (int64_t ix = 0; ix < region.gridW; ++ix) {
              roi::Sample<double> s = roi::sampleOf(g, region, ph, 0, iy, ix);
              for (int k = 0; k < 4; ++k) {
                const double v = s.weight[k] * x.get(c * 42 + s.at[k]);
                sum += v;
                if (first || v > best)
                  best = v, first = false;
              }
            }
          const double want = g.max ? best : sum / double(region.count);
          EXPECT_NEAR(y.get((r * 2 + c) * 2 + ph), want,
                      1e-12 * std::max(1.0, std::fabs(want)))
              << "region " << r << " channel " << c << " bin " << ph;
        }
    }
    if (!g.max) {
      Tensor dy = randomTensor(rng, DType::kF64, ys);
      Tensor dx = Tensor::output(DType::kF64, xs);
      ASSERT_TRUE(runKernel("roi_align_grad",
                            {dy.view(), x.view(), rois.view(), batch.view()},
                            {dx.view()}, a)
                      .isOk());
      EXPECT_NEAR(dot(y, dy), dot(x, dx), 1e-10);
    }
  }
}

TEST(CpuTensorOpKernels, RoiAlignRejectsABatchIndexOutOfRange) {
  auto [rois, batch] = roiBoxes(DType::kF32);
  batch.set(3, 2.0);
  Tensor x(DType::kF32, {2, 3, 8, 10});
  Tensor y = Tensor::output(DType::kF32, {5, 3, 3, 2});
  Status s = runKernel("roi_align", {x.view(), rois.view(), batch.view()},
                       {y.view()}, roiAlignAttrs("avg", 0, true));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("batch index 2 of region 3 is outside [0, 2)"),
            std::string::npos)
      << s.message();
}

// An image of no rows or no columns has nothing to read: every bin is 0
// and the gradient (of no elements) is written nowhere. The samples of a
// region near it read offsets below 0 before (found by a review of the
// CUDA kernels, which share runtime/base/RoiAlign.h).
TEST(CpuTensorOpKernels, RoiAlignOfAnEmptyImageIsZero) {
  for (auto [h, w] : {std::pair<int64_t, int64_t>{0, 5}, {4, 0}}) {
    SCOPED_TRACE(std::to_string(h) + "x" + std::to_string(w));
    Tensor rois(DType::kF32, {2, 4}), batch(DType::kI64, {2});
    const float boxes[8] = {0, 0, 2, 1, -0.5f, -0.75f, 0.25f, 0.5f};
    for (int64_t k = 0; k < 8; ++k)
      rois.set(k, boxes[k]);
    for (const char *mode : {"avg", "max"}) {
      Tensor x(DType::kF32, {1, 3, h, w});
      Tensor y = Tensor::output(DType::kF32, {2, 3, 3, 2});
      for (int64_t i = 0; i < 36; ++i)
        y.set(i, 7.0);
      ASSERT_TRUE(runKernel("roi_align", {x.view(), rois.view(), batch.view()},
                            {y.view()}, roiAlignAttrs(mode, 0, true))
                      .isOk());
      for (int64_t i = 0; i < 36; ++i)
        EXPECT_EQ(y.get(i), 0.0) << mode << " element " << i;
      Tensor dy(DType::kF32, {2, 3, 3, 2});
      for (int64_t i = 0; i < 36; ++i)
        dy.set(i, 1.0);
      Tensor dx = Tensor::output(DType::kF32, {1, 3, h, w});
      EXPECT_TRUE(runKernel("roi_align_grad",
                            {dy.view(), x.view(), rois.view(), batch.view()},
                            {dx.view()}, roiAlignAttrs(mode, 0, true))
                      .isOk());
    }
  }
}

TEST(CpuTensorOpKernels, GridSampleRejectsMismatchedGrid) {
  Tensor x(DType::kF32, {2, 3, 5, 6}), g(DType::kF32, {1, 4, 7, 2});
  Tensor y = Tensor::output(DType::kF32, {2, 3, 4, 7});
  Status s = runKernel("grid_sample", {x.view(), g.view()}, {y.view()},
                       gridSampleAttrs("bilinear", "zeros", 0));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("expected a grid of shape [2, H_out, W_out, 2], "
                             "got [1, 4, 7, 2]"),
            std::string::npos)
      << s.message();
}

} // namespace
