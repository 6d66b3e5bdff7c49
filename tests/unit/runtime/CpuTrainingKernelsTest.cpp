//===- CpuTrainingKernelsTest.cpp - gradient, random, optimizer kernels ---===//
//
// The training kernels against naive double-precision references, the
// gradients also against central differences of the forward kernels (f64),
// and the optimizers over several steps, in place and not.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/runtime/CpuKernelTestUtils.h"

#include "runtime/base/Random.h"
#include "runtime/device/Device.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <set>

using namespace dtcc::runtime;
using namespace dtcc::runtime::test;

namespace {

const double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kPi = 3.14159265358979323846;

/// A tensor of `dtype` holding `values`.
Tensor fromValues(DType dtype, std::vector<int64_t> shape,
                  const std::vector<double> &values) {
  Tensor t(dtype, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i)
    t.set(i, values[i]);
  return t;
}

/// A rank-0 tensor.
Tensor scalar(DType dtype, double value) {
  Tensor t(dtype, {});
  t.set(0, value);
  return t;
}

Attrs attrsOf(std::initializer_list<std::pair<const char *, Attrs::Value>> kv) {
  Attrs a;
  for (const auto &[name, value] : kv)
    a.set(name, value);
  return a;
}

/// Central differences of `loss` with respect to every element of `t` (f64),
/// restoring each element afterwards.
std::vector<double> numericGrad(Tensor &t, const std::function<double()> &loss,
                                double h = 1e-5) {
  std::vector<double> g(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = t.get(i);
    t.set(i, v + h);
    const double up = loss();
    t.set(i, v - h);
    const double down = loss();
    t.set(i, v);
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

/// sum(out * w) in double.
double weightedSum(const Tensor &out, const Tensor &w) {
  double s = 0;
  for (int64_t i = 0; i < out.numel(); ++i)
    s += out.get(i) * w.get(i);
  return s;
}

/// The tolerance of a finite-difference check in f64.
constexpr double kFdRtol = 1e-6, kFdAtol = 1e-8;

int64_t normDim(int64_t d, size_t rank) {
  return d < 0 ? d + int64_t(rank) : d;
}

//===----------------------------------------------------------------------===//
// splitmix64
//===----------------------------------------------------------------------===//

TEST(CpuTrainingKernels, Splitmix64MatchesReferenceOutputs) {
  // The first two outputs of Vigna's splitmix64 generator seeded with 0.
  EXPECT_EQ(splitmix64(0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(splitmix64(0x9E3779B97F4A7C15ull), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(splitmix64(12345), 0x22118258A9D111A0ull);
  EXPECT_EQ(uniformFromBits(~0ull), 1.0 - 0x1.0p-53);
  EXPECT_EQ(uniformFromBits(0x7ffull), 0.0);
}

//===----------------------------------------------------------------------===//
// gelu_grad / silu_grad
//===----------------------------------------------------------------------===//

enum class Act { kGeluErf, kGeluTanh, kSilu };

double actGradRef(Act act, double x) {
  switch (act) {
  case Act::kGeluErf:
    return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) +
           x * std::exp(-0.5 * x * x) / std::sqrt(2 * kPi);
  case Act::kGeluTanh: {
    const double k = std::sqrt(2 / kPi), a = 0.044715;
    const double t = std::tanh(k * (x + a * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * a * x * x);
  }
  case Act::kSilu: {
    const double s = 1 / (1 + std::exp(-x));
    return s * (1 + x * (1 - s));
  }
  }
  return 0;
}

struct ActCase {
  Act act;
  const char *name, *forward;
  Attrs attrs;
};

std::vector<ActCase> actCases() {
  return {{Act::kGeluErf, "gelu_grad", "gelu", Attrs()},
          {Act::kGeluTanh, "gelu_grad", "gelu",
           attrsOf({{"approximate", std::string("tanh")}})},
          {Act::kSilu, "silu_grad", "silu", Attrs()}};
}

TEST(CpuTrainingKernels, ActivationGradsMatchReferenceOnStridedViews) {
  std::mt19937 rng(70);
  for (const ActCase &c : actCases())
    for (DType dt : floatDTypes())
      for (const auto &shape : elementwiseShapes()) {
        std::vector<Operand> xs = operandVariants(rng, dt, shape, -5, 5);
        std::vector<Operand> dys = operandVariants(rng, dt, shape, -2, 2);
        for (Operand &x : xs)
          for (Operand &dy : dys) {
            Tensor out = Tensor::output(dt, shape);
            Status s =
                runKernel(c.name, {x.view(), dy.view()}, {out.view()}, c.attrs);
            ASSERT_TRUE(s.isOk()) << s.toString();
            Tensor expected(dt, shape);
            forEachIndex(shape, [&](const std::vector<int64_t> &idx) {
              expected.set(linearIndex(idx, shape),
                           dy.at(idx) * actGradRef(c.act, x.at(idx)));
            });
            double rtol = 4 * tolerance(dt).first,
                   atol = 4 * tolerance(dt).second;
            EXPECT_TRUE(tensorsClose(out, expected, rtol, atol))
                << c.name << " " << int(c.act) << " " << dtypeName(dt) << " "
                << shapeStr(shape) << " x " << x.layout << " dy " << dy.layout;
          }
      }
}

TEST(CpuTrainingKernels, ActivationGradsMatchFiniteDifferences) {
  std::mt19937 rng(71);
  for (const ActCase &c : actCases())
    for (const std::vector<int64_t> &shape :
         {std::vector<int64_t>{7}, std::vector<int64_t>{300}}) {
      Tensor x = randomTensor(rng, DType::kF64, shape, -4, 4);
      Tensor w = randomTensor(rng, DType::kF64, shape, -1, 1);
      auto loss = [&]() {
        Tensor y = Tensor::output(DType::kF64, shape);
        Status s = runKernel(c.forward, {x.view()}, {y.view()}, c.attrs);
        EXPECT_TRUE(s.isOk()) << s.toString();
        return weightedSum(y, w);
      };
      Tensor expected = fromValues(DType::kF64, shape, numericGrad(x, loss));
      Tensor dx = Tensor::output(DType::kF64, shape);
      ASSERT_TRUE(
          runKernel(c.name, {x.view(), w.view()}, {dx.view()}, c.attrs).isOk());
      EXPECT_TRUE(tensorsClose(dx, expected, kFdRtol, kFdAtol))
          << c.name << " " << int(c.act) << " " << shapeStr(shape);
    }
}

TEST(CpuTrainingKernels, ActivationGradsRunInPlace) {
  std::mt19937 rng(72);
  for (const ActCase &c : actCases())
    for (DType dt : {DType::kF32, DType::kF64, DType::kBF16}) {
      const std::vector<int64_t> shape = {3, 700};
      Tensor x = randomTensor(rng, dt, shape, -4, 4);
      Tensor dy = randomTensor(rng, dt, shape, -2, 2);
      Tensor expected = Tensor::output(dt, shape);
      ASSERT_TRUE(
          runKernel(c.name, {x.view(), dy.view()}, {expected.view()}, c.attrs)
              .isOk());
      Tensor x1 = x, dy1 = dy;
      ASSERT_TRUE(
          runKernel(c.name, {x1.view(), dy1.view()}, {x1.view()}, c.attrs)
              .isOk());
      EXPECT_TRUE(tensorsClose(x1, expected, 0, 0)) << c.name << " into x";
      Tensor x2 = x, dy2 = dy;
      ASSERT_TRUE(
          runKernel(c.name, {x2.view(), dy2.view()}, {dy2.view()}, c.attrs)
              .isOk());
      EXPECT_TRUE(tensorsClose(dy2, expected, 0, 0)) << c.name << " into dy";
    }
}

TEST(CpuTrainingKernels, ActivationGradsRejectBadOperands) {
  Tensor x(DType::kF32, {4}), dy(DType::kF32, {4}), out(DType::kF32, {4});
  Status s = runKernel("gelu_grad", {x.view(), dy.view()}, {out.view()},
                       attrsOf({{"approximate", std::string("fast")}}));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("\"fast\""), std::string::npos) << s.message();
  EXPECT_FALSE(runKernel("silu_grad", {x.view()}, {out.view()}).isOk());
  Tensor dy64(DType::kF64, {4}), short_(DType::kF32, {3});
  EXPECT_FALSE(
      runKernel("silu_grad", {x.view(), dy64.view()}, {out.view()}).isOk());
  EXPECT_FALSE(
      runKernel("silu_grad", {x.view(), short_.view()}, {out.view()}).isOk());
  Tensor xi(DType::kI32, {4}), dyi(DType::kI32, {4}), outi(DType::kI32, {4});
  EXPECT_FALSE(
      runKernel("gelu_grad", {xi.view(), dyi.view()}, {outi.view()}).isOk());
}

//===----------------------------------------------------------------------===//
// softmax_grad / log_softmax_grad
//===----------------------------------------------------------------------===//

/// softmax or log_softmax of `x` along `dim`, in double.
Tensor softmaxRef(const Tensor &x, int64_t dim, bool log, DType dt) {
  Tensor y(dt, x.shape);
  forEachIndex(x.shape, [&](const std::vector<int64_t> &idx) {
    std::vector<int64_t> src = idx;
    double sum = 0;
    for (int64_t d = 0; d < x.shape[dim]; ++d) {
      src[dim] = d;
      sum += std::exp(x.get(linearIndex(src, x.shape)));
    }
    const double v = x.get(linearIndex(idx, x.shape));
    y.set(linearIndex(idx, x.shape),
          log ? v - std::log(sum) : std::exp(v) / sum);
  });
  return y;
}

/// The softmax gradient formulas on the stored y and dy, in double.
Tensor softmaxGradRef(const Tensor &y, const Tensor &dy, int64_t dim,
                      bool log) {
  Tensor dx(y.dtype, y.shape);
  forEachIndex(y.shape, [&](const std::vector<int64_t> &idx) {
    std::vector<int64_t> src = idx;
    double sum = 0;
    for (int64_t d = 0; d < y.shape[dim]; ++d) {
      src[dim] = d;
      const int64_t j = linearIndex(src, y.shape);
      sum += log ? dy.get(j) : dy.get(j) * y.get(j);
    }
    const int64_t i = linearIndex(idx, y.shape);
    dx.set(i, log ? dy.get(i) - std::exp(y.get(i)) * sum
                  : y.get(i) * (dy.get(i) - sum));
  });
  return dx;
}

struct SoftmaxCase {
  std::vector<int64_t> shape;
  int64_t dim;
};

const std::vector<SoftmaxCase> &softmaxCases() {
  static const std::vector<SoftmaxCase> v = {
      {{5, 7}, 1}, {{5, 7}, 0}, {{2, 3, 4}, 1}, {{2, 3, 4}, -1}, {{2, 3, 4}, 0},
      {{10}, 0},   {{3, 1}, 1}, {{4, 300}, 1},  {{2, 2000}, -1}, {{600, 3}, 0}};
  return v;
}

TEST(CpuTrainingKernels, SoftmaxGradsMatchReference) {
  std::mt19937 rng(73);
  for (const SoftmaxCase &c : softmaxCases())
    for (DType dt : {DType::kF32, DType::kF64})
      for (bool log : {false, true}) {
        const int64_t dim = normDim(c.dim, c.shape.size());
        Tensor x = randomTensor(rng, DType::kF64, c.shape, -4, 4);
        Tensor y = softmaxRef(x, dim, log, dt);
        Tensor dy = randomTensor(rng, dt, c.shape, -2, 2);
        Tensor dx = Tensor::output(dt, c.shape);
        const char *name = log ? "log_softmax_grad" : "softmax_grad";
        Status s = runKernel(name, {y.view(), dy.view()}, {dx.view()},
                             attrsOf({{"dim", c.dim}}));
        ASSERT_TRUE(s.isOk()) << s.toString();
        double rtol = dt == DType::kF32 ? 2e-5 : 1e-11;
        double atol = dt == DType::kF32 ? 1e-5 : 1e-12;
        EXPECT_TRUE(
            tensorsClose(dx, softmaxGradRef(y, dy, dim, log), rtol, atol))
            << name << " " << dtypeName(dt) << " " << shapeStr(c.shape)
            << " dim " << c.dim;
      }
}

TEST(CpuTrainingKernels, SoftmaxGradsInHalfTypesAreTheF32KernelRoundedOnce) {
  // f16 and bf16 operands are widened exactly and every result is rounded
  // once when stored: bitwise the f32 kernel on the widened operands with
  // its results rounded to the half type.
  std::mt19937 rng(78);
  for (const SoftmaxCase &c : softmaxCases())
    for (DType dt : {DType::kBF16, DType::kF16})
      for (bool log : {false, true}) {
        const int64_t dim = normDim(c.dim, c.shape.size());
        Tensor x = randomTensor(rng, DType::kF64, c.shape, -4, 4);
        Tensor y = softmaxRef(x, dim, log, dt);
        Tensor dy = randomTensor(rng, dt, c.shape, -2, 2);
        Tensor wy(DType::kF32, c.shape), wdy(DType::kF32, c.shape);
        for (int64_t i = 0; i < y.numel(); ++i) {
          wy.set(i, y.get(i));
          wdy.set(i, dy.get(i));
        }
        const char *name = log ? "log_softmax_grad" : "softmax_grad";
        Attrs attrs = attrsOf({{"dim", c.dim}});
        Tensor dx = Tensor::output(dt, c.shape);
        Tensor wdx = Tensor::output(DType::kF32, c.shape);
        ASSERT_TRUE(runKernel(name, {y.view(), dy.view()}, {dx.view()}, attrs).isOk());
        ASSERT_TRUE(
            runKernel(name, {wy.view(), wdy.view()}, {wdx.view()}, attrs).isOk());
        for (int64_t i = 0; i < dx.numel(); ++i) {
          Tensor rounded(dt, {1});
          rounded.set(0, wdx.get(i));
          ASSERT_EQ(dx.raw<uint16_t>(i), rounded.raw<uint16_t>(0))
              << name << " " << dtypeName(dt) << " " << shapeStr(c.shape)
              << " dim " << c.dim << " element " << i;
        }
      }
}

TEST(CpuTrainingKernels, SoftmaxGradsMatchFiniteDifferences) {
  std::mt19937 rng(74);
  for (const SoftmaxCase &c : softmaxCases()) {
    if (numelOf(c.shape) > 100)
      continue;
    for (bool log : {false, true}) {
      const char *forward = log ? "log_softmax" : "softmax";
      Attrs attrs = attrsOf({{"dim", c.dim}});
      Tensor x = randomTensor(rng, DType::kF64, c.shape, -3, 3);
      Tensor w = randomTensor(rng, DType::kF64, c.shape, -1, 1);
      Tensor y = Tensor::output(DType::kF64, c.shape);
      auto loss = [&]() {
        EXPECT_TRUE(runKernel(forward, {x.view()}, {y.view()}, attrs).isOk());
        return weightedSum(y, w);
      };
      Tensor expected = fromValues(DType::kF64, c.shape, numericGrad(x, loss));
      loss(); // y at the unperturbed x
      Tensor dx = Tensor::output(DType::kF64, c.shape);
      const char *name = log ? "log_softmax_grad" : "softmax_grad";
      ASSERT_TRUE(
          runKernel(name, {y.view(), w.view()}, {dx.view()}, attrs).isOk());
      EXPECT_TRUE(tensorsClose(dx, expected, kFdRtol, kFdAtol))
          << name << " " << shapeStr(c.shape) << " dim " << c.dim;
    }
  }
}

TEST(CpuTrainingKernels, SoftmaxGradsRejectBadOperands) {
  Tensor y(DType::kF32, {2, 3}), dy(DType::kF32, {2, 3}),
      dx(DType::kF32, {2, 3}), other(DType::kF32, {3, 2});
  EXPECT_FALSE(runKernel("softmax_grad", {y.view(), dy.view()}, {dx.view()})
                   .isOk()); // no dim
  Attrs dim2 = attrsOf({{"dim", int64_t(2)}});
  EXPECT_FALSE(
      runKernel("softmax_grad", {y.view(), dy.view()}, {dx.view()}, dim2)
          .isOk());
  Attrs dim1 = attrsOf({{"dim", int64_t(1)}});
  EXPECT_FALSE(
      runKernel("log_softmax_grad", {y.view(), other.view()}, {dx.view()}, dim1)
          .isOk());
  EXPECT_EQ(runKernel("log_softmax_grad", {y.view()}, {dx.view()}, dim1).code(),
            StatusCode::kInvalidArgument);
}

//===----------------------------------------------------------------------===//
// layer_norm_grad / rms_norm_grad
//===----------------------------------------------------------------------===//

struct NormCase {
  std::vector<int64_t> shape;
  int64_t axis;
};

const std::vector<NormCase> &normCases() {
  static const std::vector<NormCase> v = {
      {{4, 6}, 1},    {{2, 3, 8}, 2}, {{2, 3, 8}, 1}, {{5, 1}, 1},
      {{3, 300}, -1}, {{2, 1500}, 1}, {{6, 5}, 0}};
  return v;
}

/// The gradients of GraphTrainingOps.td's formulas on the stored operands.
void normGradRef(bool layer, const Tensor &x, const Tensor &scale,
                 const Tensor &mean, const Tensor &rstd, const Tensor &dy,
                 Tensor &dx, Tensor &dscale, Tensor &dbias) {
  const int64_t cols = scale.numel(), rows = x.numel() / cols;
  std::vector<double> ds(cols, 0), db(cols, 0);
  for (int64_t r = 0; r < rows; ++r) {
    const double mu = layer ? mean.get(r) : 0, rs = rstd.get(r);
    std::vector<double> xhat(cols), g(cols);
    double meanG = 0, meanGH = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = r * cols + c;
      xhat[c] = (x.get(i) - mu) * rs;
      g[c] = dy.get(i) * scale.get(c);
      ds[c] += dy.get(i) * xhat[c];
      db[c] += dy.get(i);
      meanG += g[c] / double(cols);
      meanGH += g[c] * xhat[c] / double(cols);
    }
    for (int64_t c = 0; c < cols; ++c)
      dx.set(r * cols + c,
             rs * (g[c] - (layer ? meanG : 0) - xhat[c] * meanGH));
  }
  for (int64_t c = 0; c < cols; ++c) {
    dscale.set(c, ds[c]);
    if (layer)
      dbias.set(c, db[c]);
  }
}

TEST(CpuTrainingKernels, NormGradsMatchReference) {
  std::mt19937 rng(75);
  for (const NormCase &c : normCases())
    for (DType dt : {DType::kF32, DType::kF64})
      for (DType statType : {DType::kF32, dt})
        for (bool layer : {true, false}) {
          const int64_t axis = normDim(c.axis, c.shape.size());
          std::vector<int64_t> norm(c.shape.begin() + axis, c.shape.end());
          std::vector<int64_t> rowsShape(c.shape.begin(),
                                         c.shape.begin() + axis);
          const int64_t cols = numelOf(norm), rows = numelOf(rowsShape);
          Tensor x = randomTensor(rng, dt, c.shape, -2, 3);
          Tensor scale = randomTensor(rng, dt, norm, 0.5, 1.5);
          Tensor dy = randomTensor(rng, dt, c.shape, -1, 1);
          Tensor mean(statType, rowsShape), rstd(statType, rowsShape);
          for (int64_t r = 0; r < rows; ++r) {
            double mu = 0, ms = 0, var = 0;
            for (int64_t j = 0; j < cols; ++j) {
              mu += x.get(r * cols + j) / double(cols);
              ms += x.get(r * cols + j) * x.get(r * cols + j) / double(cols);
            }
            for (int64_t j = 0; j < cols; ++j)
              var += (x.get(r * cols + j) - mu) * (x.get(r * cols + j) - mu) /
                     double(cols);
            mean.set(r, mu);
            rstd.set(r, 1 / std::sqrt((layer ? var : ms) + 1e-5));
          }
          Tensor dx = Tensor::output(dt, c.shape);
          Tensor dscale = Tensor::output(dt, norm),
                 dbias = Tensor::output(dt, norm);
          Attrs attrs = attrsOf({{"axis", c.axis}});
          Status s =
              layer
                  ? runKernel("layer_norm_grad",
                              {x.view(), scale.view(), mean.view(), rstd.view(),
                               dy.view()},
                              {dx.view(), dscale.view(), dbias.view()}, attrs)
                  : runKernel("rms_norm_grad",
                              {x.view(), scale.view(), rstd.view(), dy.view()},
                              {dx.view(), dscale.view()}, attrs);
          ASSERT_TRUE(s.isOk()) << s.toString();
          Tensor edx(dt, c.shape), eds(dt, norm), edb(dt, norm);
          normGradRef(layer, x, scale, mean, rstd, dy, edx, eds, edb);
          std::string what = std::string(layer ? "layer" : "rms") + " " +
                             dtypeName(dt) + " stats " + dtypeName(statType) +
                             " " + shapeStr(c.shape) + " axis " +
                             std::to_string(c.axis);
          double rtol = dt == DType::kF32 ? 1e-4 : 1e-10;
          double atol = dt == DType::kF32 ? 2e-5 : 1e-11;
          EXPECT_TRUE(tensorsClose(dx, edx, rtol, atol)) << what << " dx";
          EXPECT_TRUE(tensorsClose(dscale, eds, rtol, atol))
              << what << " dscale";
          if (layer) {
            EXPECT_TRUE(tensorsClose(dbias, edb, rtol, atol))
                << what << " dbias";
          }
        }
}

TEST(CpuTrainingKernels, NormGradsInHalfTypesAreTheF32KernelRoundedOnce) {
  // f16 and bf16 operands are widened as they are read and every result is
  // rounded once when stored: bitwise the f32 kernel on the widened
  // operands with its results rounded to the half type.
  std::mt19937 rng(77);
  auto widen = [](const Tensor &t) {
    Tensor f(DType::kF32, t.shape);
    for (int64_t i = 0; i < t.numel(); ++i)
      f.set(i, t.get(i));
    return f;
  };
  for (const NormCase &c : normCases())
    for (DType dt : {DType::kBF16, DType::kF16})
      for (bool layer : {true, false}) {
        const int64_t axis = normDim(c.axis, c.shape.size());
        std::vector<int64_t> norm(c.shape.begin() + axis, c.shape.end());
        std::vector<int64_t> rowsShape(c.shape.begin(), c.shape.begin() + axis);
        Tensor x = randomTensor(rng, dt, c.shape, -2, 3);
        Tensor scale = randomTensor(rng, dt, norm, 0.5, 1.5);
        Tensor dy = randomTensor(rng, dt, c.shape, -1, 1);
        Tensor mean = randomTensor(rng, DType::kF32, rowsShape, -0.5, 0.5);
        Tensor rstd = randomTensor(rng, DType::kF32, rowsShape, 0.5, 2);
        Tensor wx = widen(x), wscale = widen(scale), wdy = widen(dy);
        Attrs attrs = attrsOf({{"axis", c.axis}});
        auto run = [&](DType t, Tensor &xs, Tensor &ss, Tensor &ds,
                       std::vector<Tensor> &outs) {
          outs = {Tensor::output(t, c.shape), Tensor::output(t, norm),
                  Tensor::output(t, norm)};
          return layer ? runKernel("layer_norm_grad",
                                   {xs.view(), ss.view(), mean.view(),
                                    rstd.view(), ds.view()},
                                   {outs[0].view(), outs[1].view(),
                                    outs[2].view()},
                                   attrs)
                       : runKernel("rms_norm_grad",
                                   {xs.view(), ss.view(), rstd.view(),
                                    ds.view()},
                                   {outs[0].view(), outs[1].view()}, attrs);
        };
        std::vector<Tensor> half, f32;
        ASSERT_TRUE(run(dt, x, scale, dy, half).isOk());
        ASSERT_TRUE(run(DType::kF32, wx, wscale, wdy, f32).isOk());
        for (size_t o = 0; o < (layer ? 3u : 2u); ++o)
          for (int64_t i = 0; i < half[o].numel(); ++i) {
            Tensor rounded(dt, {1});
            rounded.set(0, f32[o].get(i));
            ASSERT_EQ(half[o].raw<uint16_t>(i), rounded.raw<uint16_t>(0))
                << (layer ? "layer" : "rms") << " " << dtypeName(dt) << " "
                << shapeStr(c.shape) << " output " << o << " element " << i;
          }
      }
}

TEST(CpuTrainingKernels, NormGradsMatchFiniteDifferences) {
  std::mt19937 rng(76);
  for (const NormCase &c : normCases()) {
    if (numelOf(c.shape) > 100)
      continue;
    for (bool layer : {true, false}) {
      const int64_t axis = normDim(c.axis, c.shape.size());
      std::vector<int64_t> norm(c.shape.begin() + axis, c.shape.end());
      std::vector<int64_t> rowsShape(c.shape.begin(), c.shape.begin() + axis);
      const DType f64 = DType::kF64;
      Tensor x = randomTensor(rng, f64, c.shape, -2, 3);
      // Away from 0, where rms_norm of one column, x / sqrt(x^2 + eps),
      // bends too sharply for central differences.
      for (int64_t i = 0; i < x.numel(); ++i)
        if (std::fabs(x.get(i)) < 0.25)
          x.set(i, x.get(i) + 0.5);
      Tensor scale = randomTensor(rng, f64, norm, 0.5, 1.5);
      Tensor bias = randomTensor(rng, f64, norm, -1, 1);
      Tensor w = randomTensor(rng, f64, c.shape, -1, 1);
      Tensor y = Tensor::output(f64, c.shape);
      Tensor mean = Tensor::output(f64, rowsShape),
             rstd = Tensor::output(f64, rowsShape);
      Attrs attrs = attrsOf({{"axis", c.axis}, {"epsilon", 1e-5}});
      Attrs gradAttrs = attrsOf({{"axis", c.axis}});
      auto loss = [&]() {
        Status s =
            layer
                ? runKernel("layer_norm", {x.view(), scale.view(), bias.view()},
                            {y.view(), mean.view(), rstd.view()}, attrs)
                : runKernel("rms_norm", {x.view(), scale.view()},
                            {y.view(), rstd.view()}, attrs);
        EXPECT_TRUE(s.isOk()) << s.toString();
        return weightedSum(y, w);
      };
      Tensor edx = fromValues(f64, c.shape, numericGrad(x, loss));
      Tensor eds = fromValues(f64, norm, numericGrad(scale, loss));
      Tensor edb = fromValues(f64, norm, numericGrad(bias, loss));
      loss(); // the statistics at the unperturbed operands
      Tensor dx = Tensor::output(f64, c.shape), ds = Tensor::output(f64, norm),
             db = Tensor::output(f64, norm);
      Status s =
          layer ? runKernel("layer_norm_grad",
                            {x.view(), scale.view(), mean.view(), rstd.view(),
                             w.view()},
                            {dx.view(), ds.view(), db.view()}, gradAttrs)
                : runKernel("rms_norm_grad",
                            {x.view(), scale.view(), rstd.view(), w.view()},
                            {dx.view(), ds.view()}, gradAttrs);
      ASSERT_TRUE(s.isOk()) << s.toString();
      std::string what = std::string(layer ? "layer" : "rms") + " " +
                         shapeStr(c.shape) + " axis " + std::to_string(c.axis);
      EXPECT_TRUE(tensorsClose(dx, edx, kFdRtol, kFdAtol)) << what << " dx";
      EXPECT_TRUE(tensorsClose(ds, eds, kFdRtol, kFdAtol)) << what << " dscale";
      if (layer) {
        EXPECT_TRUE(tensorsClose(db, edb, kFdRtol, kFdAtol))
            << what << " dbias";
      }
      // The parameter gradients' own kernels (the fused regions' dx
      // leaves them): the same sums, bit for bit.
      Tensor ps = Tensor::output(f64, norm), pb = Tensor::output(f64, norm);
      s = layer ? runKernel("layer_norm_param_grad",
                            {x.view(), mean.view(), rstd.view(), w.view()},
                            {ps.view(), pb.view()}, gradAttrs)
                : runKernel("rms_norm_param_grad",
                            {x.view(), rstd.view(), w.view()}, {ps.view()},
                            gradAttrs);
      ASSERT_TRUE(s.isOk()) << s.toString();
      EXPECT_TRUE(tensorsClose(ps, ds, 0, 0)) << what << " param dscale";
      if (layer) {
        EXPECT_TRUE(tensorsClose(pb, db, 0, 0)) << what << " param dbias";
      }
    }
  }
}

TEST(CpuTrainingKernels, NormGradsRejectBadOperands) {
  Tensor x(DType::kF32, {2, 4}), scale(DType::kF32, {4}), m(DType::kF32, {2}),
      r(DType::kF32, {2}), dy(DType::kF32, {2, 4}), dx(DType::kF32, {2, 4}),
      ds(DType::kF32, {4}), db(DType::kF32, {4});
  Attrs attrs = attrsOf({{"axis", int64_t(1)}});
  ASSERT_TRUE(runKernel("layer_norm_grad",
                        {x.view(), scale.view(), m.view(), r.view(), dy.view()},
                        {dx.view(), ds.view(), db.view()}, attrs)
                  .isOk());
  // rms_norm_grad's arity given to layer_norm_grad.
  Status s = runKernel("layer_norm_grad",
                       {x.view(), scale.view(), r.view(), dy.view()},
                       {dx.view(), ds.view()}, attrs);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("expected 5 inputs (x, scale, mean, rstd, dy)"),
            std::string::npos)
      << s.message();
  Tensor badStats(DType::kF32, {3});
  EXPECT_FALSE(runKernel("rms_norm_grad",
                         {x.view(), scale.view(), badStats.view(), dy.view()},
                         {dx.view(), ds.view()}, attrs)
                   .isOk());
  Tensor badScale(DType::kF32, {2});
  EXPECT_FALSE(runKernel("rms_norm_grad",
                         {x.view(), badScale.view(), r.view(), dy.view()},
                         {dx.view(), ds.view()}, attrs)
                   .isOk());
  EXPECT_FALSE(runKernel("rms_norm_grad",
                         {x.view(), scale.view(), r.view(), dy.view()},
                         {dx.view(), ds.view()})
                   .isOk()); // no axis
}

//===----------------------------------------------------------------------===//
// cross_entropy_grad
//===----------------------------------------------------------------------===//

TEST(CpuTrainingKernels, CrossEntropyGradMatchesReference) {
  std::mt19937 rng(77);
  for (DType dt : {DType::kF32, DType::kF64})
    for (DType lt : {DType::kI32, DType::kI64})
      for (int64_t ignore : {int64_t(-100), int64_t(3)})
        for (int64_t c : {int64_t(10), int64_t(1000)}) {
          const int64_t n = 9;
          Tensor logits = randomTensor(rng, dt, {n, c}, -4, 4);
          Tensor labels = randomTensor(rng, lt, {n}, 0, double(c - 1));
          labels.setInt(2, ignore);
          labels.setInt(5, 3);
          Tensor dloss = randomTensor(rng, dt, {n}, -2, 2);
          Tensor out = Tensor::output(dt, {n, c});
          Attrs attrs;
          if (ignore != -100)
            attrs.set("ignore_index", ignore);
          Status s = runKernel("cross_entropy_grad",
                               {logits.view(), labels.view(), dloss.view()},
                               {out.view()}, attrs);
          ASSERT_TRUE(s.isOk()) << s.toString();
          Tensor expected(dt, {n, c});
          for (int64_t i = 0; i < n; ++i) {
            const int64_t label = labels.getInt(i);
            double sum = 0;
            for (int64_t j = 0; j < c; ++j)
              sum += std::exp(logits.get(i * c + j));
            for (int64_t j = 0; j < c; ++j) {
              double p = std::exp(logits.get(i * c + j)) / sum;
              expected.set(i * c + j, label == ignore
                                          ? 0.0
                                          : (p - (j == label)) * dloss.get(i));
            }
          }
          double rtol = dt == DType::kF32 ? 1e-5 : 1e-12;
          double atol = dt == DType::kF32 ? 1e-6 : 1e-14;
          EXPECT_TRUE(tensorsClose(out, expected, rtol, atol))
              << dtypeName(dt) << " " << dtypeName(lt) << " ignore " << ignore
              << " c " << c;
          // Ignored rows are exactly zero, not merely small.
          for (int64_t j = 0; j < c; ++j)
            ASSERT_EQ(out.get(2 * c + j), 0.0);
        }
}

TEST(CpuTrainingKernels, CrossEntropyReadsHalfLogitsAsTheirCast) {
  // bf16 or f16 logits with an f32 loss (read without their f32 cast:
  // dtcc-fold-narrow-reads) give the loss of the cast to the bit, and the
  // gradient with an f32 dloss is the cast's gradient rounded to the
  // logits' type, also to the bit (ignored rows and a wide vocabulary too).
  std::mt19937 rng(85);
  const int64_t n = 6, c = 3001;
  for (DType narrow : {DType::kBF16, DType::kF16}) {
    Tensor logits = randomTensor(rng, narrow, {n, c}, -6, 6);
    Tensor wide(DType::kF32, {n, c});
    for (int64_t i = 0; i < logits.numel(); ++i)
      wide.set(i, logits.get(i));
    Tensor labels = randomTensor(rng, DType::kI64, {n}, 0, double(c - 1));
    labels.setInt(4, -100);
    Tensor dloss = randomTensor(rng, DType::kF32, {n}, -2, 2);
    Tensor got(DType::kF32, {n}), want(DType::kF32, {n});
    ASSERT_TRUE(runKernel("cross_entropy", {logits.view(), labels.view()},
                          {got.view()})
                    .isOk());
    ASSERT_TRUE(runKernel("cross_entropy", {wide.view(), labels.view()},
                          {want.view()})
                    .isOk());
    EXPECT_TRUE(tensorsClose(got, want, 0, 0)) << dtypeName(narrow);
    Tensor grad(narrow, {n, c}), wideGrad(DType::kF32, {n, c}),
        rounded(narrow, {n, c});
    ASSERT_TRUE(runKernel("cross_entropy_grad",
                          {logits.view(), labels.view(), dloss.view()},
                          {grad.view()})
                    .isOk());
    ASSERT_TRUE(runKernel("cross_entropy_grad",
                          {wide.view(), labels.view(), dloss.view()},
                          {wideGrad.view()})
                    .isOk());
    ASSERT_TRUE(runKernel("cast", {wideGrad.view()}, {rounded.view()}).isOk());
    EXPECT_TRUE(tensorsClose(grad, rounded, 0, 0)) << dtypeName(narrow);
  }
  // An f64 loss of f32 logits is refused (only half logits widen).
  Tensor logits(DType::kF32, {2, 3}), labels(DType::kI64, {2}),
      loss(DType::kF64, {2});
  EXPECT_FALSE(
      runKernel("cross_entropy", {logits.view(), labels.view()}, {loss.view()})
          .isOk());
}

TEST(CpuTrainingKernels, CrossEntropyGradMatchesFiniteDifferences) {
  std::mt19937 rng(78);
  const int64_t n = 5, c = 7;
  Tensor logits = randomTensor(rng, DType::kF64, {n, c}, -3, 3);
  Tensor labels = randomTensor(rng, DType::kI64, {n}, 0, c - 1);
  labels.setInt(3, -100);
  Tensor w = randomTensor(rng, DType::kF64, {n}, -1, 1);
  auto loss = [&]() {
    Tensor out = Tensor::output(DType::kF64, {n});
    EXPECT_TRUE(
        runKernel("cross_entropy", {logits.view(), labels.view()}, {out.view()})
            .isOk());
    return weightedSum(out, w);
  };
  Tensor expected = fromValues(DType::kF64, {n, c}, numericGrad(logits, loss));
  Tensor out = Tensor::output(DType::kF64, {n, c});
  ASSERT_TRUE(runKernel("cross_entropy_grad",
                        {logits.view(), labels.view(), w.view()}, {out.view()})
                  .isOk());
  EXPECT_TRUE(tensorsClose(out, expected, kFdRtol, kFdAtol));
}

TEST(CpuTrainingKernels, CrossEntropyGradReportsBadLabels) {
  Tensor logits(DType::kF32, {3, 5}), dloss(DType::kF32, {3}),
      out(DType::kF32, {3, 5});
  for (DType lt : {DType::kI32, DType::kI64}) {
    Tensor labels(lt, {3});
    labels.setInt(0, 4);
    labels.setInt(1, 7);
    Status s =
        runKernel("cross_entropy_grad",
                  {logits.view(), labels.view(), dloss.view()}, {out.view()});
    EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
    EXPECT_NE(s.message().find("cross_entropy_grad at "
                               "'node_cross_entropy_grad': label 7 of row 1"),
              std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find("[0, 5)"), std::string::npos) << s.message();
    // -100 is only ignored while it is ignore_index.
    labels.setInt(1, -100);
    EXPECT_TRUE(runKernel("cross_entropy_grad",
                          {logits.view(), labels.view(), dloss.view()},
                          {out.view()})
                    .isOk());
    s = runKernel("cross_entropy_grad",
                  {logits.view(), labels.view(), dloss.view()}, {out.view()},
                  attrsOf({{"ignore_index", int64_t(0)}}));
    EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
    EXPECT_NE(s.message().find("label -100 of row 1"), std::string::npos)
        << s.message();
  }
  Tensor floatLabels(DType::kF32, {3});
  EXPECT_EQ(runKernel("cross_entropy_grad",
                      {logits.view(), floatLabels.view(), dloss.view()},
                      {out.view()})
                .code(),
            StatusCode::kInvalidArgument);
  Tensor labels(DType::kI64, {3});
  EXPECT_EQ(runKernel("cross_entropy_grad", {logits.view(), labels.view()},
                      {out.view()})
                .code(),
            StatusCode::kInvalidArgument);
}

//===----------------------------------------------------------------------===//
// dropout
//===----------------------------------------------------------------------===//

/// Word `counter` of the stream of (seed, step), splitmix64 written out
/// independently of runtime/base/Random.h: the draws' references below.
uint64_t streamWordRef(int64_t seed, int64_t step, uint64_t counter) {
  auto mix = [](uint64_t x) {
    uint64_t z = x + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  const uint64_t key = mix(uint64_t(seed) ^ mix(uint64_t(step)));
  return mix(key + counter);
}

/// The spec's formula, written out independently of the kernel's integer
/// threshold.
bool keepRef(int64_t seed, int64_t step, int64_t i, double ratio) {
  const double u =
      double(streamWordRef(seed, step, uint64_t(i)) >> 11) * std::ldexp(1.0, -53);
  return u >= ratio;
}

struct DropoutRun {
  Tensor y, mask;
};

DropoutRun runDropout(const Tensor &x, int64_t step, double ratio,
                      int64_t seed) {
  Tensor xc = x, st = scalar(DType::kI64, 0);
  st.setInt(0, step);
  DropoutRun r{Tensor::output(x.dtype, x.shape),
               Tensor::output(DType::kBool, x.shape)};
  Status s =
      runKernel("dropout", {xc.view(), st.view()}, {r.y.view(), r.mask.view()},
                attrsOf({{"ratio", ratio}, {"seed", seed}}));
  EXPECT_TRUE(s.isOk()) << s.toString();
  return r;
}

TEST(CpuTrainingKernels, DropoutMatchesTheFormula) {
  std::mt19937 rng(79);
  for (DType dt : {DType::kF32, DType::kF64})
    for (double ratio : {0.1, 0.5, 0.9, double(0.3f)})
      for (int64_t seed : {int64_t(0), int64_t(7), int64_t(-3)}) {
        const int64_t step = seed == 7 ? int64_t(1) << 40 : 3;
        Tensor x = randomTensor(rng, dt, {3, 5, 7}, -3, 3);
        DropoutRun r = runDropout(x, step, ratio, seed);
        Tensor ey(dt, x.shape), em(DType::kBool, x.shape);
        for (int64_t i = 0; i < x.numel(); ++i) {
          const bool keep = keepRef(seed, step, i, ratio);
          em.setInt(i, keep);
          ey.set(i, keep ? x.get(i) / (1 - ratio) : 0.0);
        }
        EXPECT_TRUE(tensorsClose(r.mask, em)) << ratio << " seed " << seed;
        EXPECT_TRUE(tensorsClose(r.y, ey, 2 * tolerance(dt).first, 0))
            << dtypeName(dt) << " " << ratio << " seed " << seed;
      }
}

TEST(CpuTrainingKernels, DropoutIsReproducibleAndVariesWithStepAndSeed) {
  std::mt19937 rng(80);
  Tensor x = randomTensor(rng, DType::kF32, {1000}, -1, 1);
  auto differences = [](const Tensor &a, const Tensor &b) {
    int64_t n = 0;
    for (int64_t i = 0; i < a.numel(); ++i)
      n += a.getInt(i) != b.getInt(i);
    return n;
  };
  DropoutRun a = runDropout(x, 5, 0.5, 42), b = runDropout(x, 5, 0.5, 42);
  EXPECT_EQ(differences(a.mask, b.mask), 0);
  EXPECT_TRUE(tensorsClose(a.y, b.y, 0, 0));
  // Independent masks of ratio 1/2 differ in about half of the elements.
  EXPECT_GT(differences(a.mask, runDropout(x, 6, 0.5, 42).mask), 400);
  EXPECT_GT(differences(a.mask, runDropout(x, 5, 0.5, 43).mask), 400);
}

TEST(CpuTrainingKernels, DropoutKeepsTheExpectedFraction) {
  const int64_t n = 100000;
  Tensor x(DType::kF32, {n});
  for (int64_t i = 0; i < n; ++i)
    x.set(i, 1.5);
  for (double ratio : {0.1, 0.25, 0.5, 0.8})
    for (int64_t step : {int64_t(1), int64_t(2)}) {
      DropoutRun r = runDropout(x, step, ratio, 1234);
      int64_t kept = 0;
      for (int64_t i = 0; i < n; ++i) {
        const bool keep = r.mask.getInt(i) != 0;
        kept += keep;
        ASSERT_NEAR(r.y.get(i), keep ? 1.5 / (1 - ratio) : 0.0, 1e-6) << i;
      }
      const double mean = double(n) * (1 - ratio);
      const double sigma = std::sqrt(double(n) * ratio * (1 - ratio));
      EXPECT_LE(std::fabs(double(kept) - mean), 3 * sigma)
          << "ratio " << ratio << " kept " << kept;
    }
}

TEST(CpuTrainingKernels, DropoutWithRatioZeroKeepsEverything) {
  std::mt19937 rng(81);
  Tensor x = randomTensor(rng, DType::kF64, {4, 257}, -5, 5);
  x.set(3, kNan);
  DropoutRun r = runDropout(x, 9, 0.0, 11);
  for (int64_t i = 0; i < x.numel(); ++i) {
    EXPECT_EQ(r.mask.getInt(i), 1) << i;
    if (i == 3)
      EXPECT_TRUE(std::isnan(r.y.get(i)));
    else
      EXPECT_EQ(r.y.get(i), x.get(i)) << i;
  }
}

TEST(CpuTrainingKernels, DropoutRejectsBadOperands) {
  Tensor x(DType::kF32, {8}), st = scalar(DType::kI64, 1), y(DType::kF32, {8}),
                              mask(DType::kBool, {8});
  auto run = [&](Attrs attrs, TensorView step) {
    return runKernel("dropout", {x.view(), step}, {y.view(), mask.view()},
                     attrs);
  };
  EXPECT_TRUE(
      run(attrsOf({{"ratio", 0.5}, {"seed", int64_t(1)}}), st.view()).isOk());
  for (double ratio : {1.0, -0.1, kNan})
    EXPECT_EQ(run(attrsOf({{"ratio", ratio}, {"seed", int64_t(1)}}), st.view())
                  .code(),
              StatusCode::kInvalidArgument)
        << ratio;
  EXPECT_FALSE(run(attrsOf({{"ratio", 0.5}}), st.view()).isOk()); // no seed
  Tensor st32 = scalar(DType::kI32, 1), st2(DType::kI64, {2});
  EXPECT_FALSE(
      run(attrsOf({{"ratio", 0.5}, {"seed", int64_t(1)}}), st32.view()).isOk());
  EXPECT_FALSE(
      run(attrsOf({{"ratio", 0.5}, {"seed", int64_t(1)}}), st2.view()).isOk());
  Tensor floatMask(DType::kF32, {8});
  EXPECT_FALSE(runKernel("dropout", {x.view(), st.view()},
                         {y.view(), floatMask.view()},
                         attrsOf({{"ratio", 0.5}, {"seed", int64_t(1)}}))
                   .isOk());
}

TEST(CpuTrainingKernels, DropoutOfABlockDrawsTheWholeTensorsMask) {
  // Every block of a [4, 6, 5] tensor split as the partitioner splits it
  // (each dimension whole or in 2 or 3 blocks), with its offsets: its y and
  // mask are the whole tensor's at those positions.
  std::mt19937 rng(82);
  const std::vector<int64_t> global = {4, 6, 5};
  Tensor x = randomTensor(rng, DType::kF64, global, -2, 2);
  DropoutRun whole = runDropout(x, 7, 0.4, 21);
  for (std::vector<int64_t> parts :
       {std::vector<int64_t>{2, 1, 1}, {1, 3, 1}, {2, 2, 1}, {1, 1, 5}, {4, 3, 1}}) {
    std::vector<int64_t> block(3);
    for (int d = 0; d < 3; ++d)
      block[d] = global[d] / parts[d];
    for (int64_t b = 0; b < parts[0] * parts[1] * parts[2]; ++b) {
      std::vector<int64_t> coord = {b / (parts[1] * parts[2]),
                                    (b / parts[2]) % parts[1], b % parts[2]};
      Tensor xb(DType::kF64, block), off(DType::kI64, {3});
      Tensor st = scalar(DType::kI64, 0);
      st.setInt(0, 7);
      for (int d = 0; d < 3; ++d)
        off.setInt(d, coord[d] * block[d]);
      auto globalIndex = [&](int64_t i) {
        int64_t l2 = i % block[2], l1 = (i / block[2]) % block[1],
                l0 = i / (block[1] * block[2]);
        return ((off.getInt(0) + l0) * global[1] + off.getInt(1) + l1) *
                   global[2] +
               off.getInt(2) + l2;
      };
      for (int64_t i = 0; i < xb.numel(); ++i)
        xb.set(i, x.get(globalIndex(i)));
      Tensor y = Tensor::output(DType::kF64, block),
             mask = Tensor::output(DType::kBool, block);
      Attrs attrs = attrsOf({{"ratio", 0.4}, {"seed", int64_t(21)}});
      attrs.set("global_shape", global);
      Status s = runKernel("dropout", {xb.view(), st.view(), off.view()},
                           {y.view(), mask.view()}, attrs);
      ASSERT_TRUE(s.isOk()) << s.toString();
      for (int64_t i = 0; i < xb.numel(); ++i) {
        ASSERT_EQ(mask.getInt(i), whole.mask.getInt(globalIndex(i)))
            << "block " << b << " element " << i;
        ASSERT_EQ(y.get(i), whole.y.get(globalIndex(i)));
      }
    }
  }
  // The offsets must be one i64 per dimension, with a global shape as big.
  Tensor xb(DType::kF64, {2, 3, 5}), st = scalar(DType::kI64, 1),
      y(DType::kF64, {2, 3, 5}), mask(DType::kBool, {2, 3, 5});
  Tensor off(DType::kI64, {3}), shortOff(DType::kI64, {2});
  Attrs attrs = attrsOf({{"ratio", 0.4}, {"seed", int64_t(21)}});
  attrs.set("global_shape", std::vector<int64_t>{4, 6, 5});
  EXPECT_TRUE(runKernel("dropout", {xb.view(), st.view(), off.view()},
                        {y.view(), mask.view()}, attrs)
                  .isOk());
  EXPECT_FALSE(runKernel("dropout", {xb.view(), st.view(), shortOff.view()},
                         {y.view(), mask.view()}, attrs)
                   .isOk());
  attrs.set("global_shape", std::vector<int64_t>{4, 2, 5});
  EXPECT_FALSE(runKernel("dropout", {xb.view(), st.view(), off.view()},
                         {y.view(), mask.view()}, attrs)
                   .isOk());
}

//===----------------------------------------------------------------------===//
// random
//===----------------------------------------------------------------------===//

/// The spec's draw (GraphTrainingOps.td) of element i, written out
/// independently of the kernel: uniform from the top `digits` bits of
/// counter i, normal by Box-Muller of counters 2i and 2i + 1.
double drawRef(bool normal, int64_t seed, int64_t step, uint64_t i,
               int digits) {
  auto word = [&](uint64_t counter) {
    return streamWordRef(seed, step, counter);
  };
  if (!normal)
    return std::ldexp(double(word(i) >> (64 - digits)), -digits);
  const double u1 = std::ldexp(double(word(2 * i) >> 11), -53);
  const double u2 = std::ldexp(double(word(2 * i + 1) >> 11), -53);
  return std::sqrt(-2 * std::log(1 - u1)) * std::cos(2 * kPi * u2);
}

struct Draw {
  const char *distribution;
  double shift, scale;
  int64_t seed;
};

Attrs drawAttrs(const Draw &d) {
  Attrs a = attrsOf({{"shift", d.shift}, {"scale", d.scale}, {"seed", d.seed}});
  a.set("distribution", std::string(d.distribution));
  return a;
}

/// dgraph.random of `shape` and `dtype` at `step`, whole.
Tensor runRandom(DType dtype, std::vector<int64_t> shape, int64_t step,
                 const Draw &d) {
  Tensor st = scalar(DType::kI64, 0), y = Tensor::output(dtype, std::move(shape));
  st.setInt(0, step);
  Status s = runKernel("random", {st.view()}, {y.view()}, drawAttrs(d));
  EXPECT_TRUE(s.isOk()) << s.toString();
  return y;
}

/// The standard normal distribution function.
double normalCdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

TEST(CpuTrainingKernels, RandomMatchesTheFormula) {
  // Uniform draws take the type's significand bits; shift + scale * x is
  // computed in double and rounded to the type.
  const std::pair<DType, int> types[] = {
      {DType::kF64, 53}, {DType::kF32, 24}, {DType::kF16, 11}, {DType::kBF16, 8}};
  for (auto [dt, digits] : types)
    for (bool normal : {false, true})
      for (int64_t seed : {int64_t(0), int64_t(-3), int64_t(1) << 40}) {
        const int64_t step = seed == 0 ? 0 : 17;
        const Draw d{normal ? "normal" : "uniform", normal ? 0.5 : -2.0,
                     normal ? 1.5 : 4.0, seed};
        Tensor y = runRandom(dt, {3, 5, 7}, step, d);
        Tensor want(dt, y.shape);
        for (int64_t i = 0; i < y.numel(); ++i)
          want.set(i, d.shift + d.scale * drawRef(normal, seed, step, i, digits));
        // Within an ulp of the type (how a double computed with or without
        // a fused multiply-add may round).
        EXPECT_TRUE(tensorsClose(y, want, std::ldexp(1.0, 1 - digits), 0))
            << dtypeName(dt) << " " << d.distribution << " seed " << seed;
      }
}

TEST(CpuTrainingKernels, RandomUniformHasItsRangeMeanAndVariance) {
  // 1e5 draws in [low, high): every one inside, their mean and variance
  // within 5 standard errors of (low + high) / 2 and (high - low)^2 / 12;
  // [0, 1) in f32 and bf16 never reaches 1.
  const int64_t n = 100000;
  const double low = -1.5, high = 2.5, width = high - low;
  Tensor y = runRandom(DType::kF64, {n}, 3, {"uniform", low, width, 99});
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = y.get(i);
    ASSERT_TRUE(v >= low && v < high) << i << ": " << v;
    sum += v;
    sq += v * v;
  }
  const double mean = sum / n, var = sq / n - mean * mean;
  const double wantVar = width * width / 12;
  EXPECT_NEAR(mean, (low + high) / 2, 5 * std::sqrt(wantVar / n));
  // The variance of a uniform's squared deviation: width^4 / 180.
  EXPECT_NEAR(var, wantVar, 5 * std::sqrt(width * width * width * width / 180 / n));
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    Tensor u = runRandom(dt, {n}, 4, {"uniform", 0.0, 1.0, 5});
    double top = 0;
    for (int64_t i = 0; i < n; ++i)
      top = std::max(top, u.get(i));
    EXPECT_LT(top, 1.0) << dtypeName(dt);
    EXPECT_GT(top, 0.99) << dtypeName(dt);
  }
}

TEST(CpuTrainingKernels, RandomNormalHasItsMomentsAndDistribution) {
  // 1e5 draws of N(mean, scale^2): mean and variance within 5 standard
  // errors, and the Kolmogorov-Smirnov distance to the normal distribution
  // function below its 1% critical value (1.63 / sqrt(n)).
  const int64_t n = 100000;
  const double mean = 2.0, scale = 0.5;
  Tensor y = runRandom(DType::kF64, {n}, 11, {"normal", mean, scale, 1234});
  std::vector<double> z(n);
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    z[i] = (y.get(i) - mean) / scale;
    ASSERT_TRUE(std::isfinite(z[i]) && std::fabs(z[i]) < 9) << i << ": " << z[i];
    sum += z[i];
    sq += z[i] * z[i];
  }
  const double m = sum / n, var = sq / n - m * m;
  EXPECT_NEAR(m, 0, 5 / std::sqrt(double(n)));
  EXPECT_NEAR(var, 1, 5 * std::sqrt(2.0 / n));
  std::sort(z.begin(), z.end());
  double ks = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double f = normalCdf(z[i]);
    ks = std::max({ks, f - double(i) / n, double(i + 1) / n - f});
  }
  EXPECT_LT(ks, 1.63 / std::sqrt(double(n))) << "Kolmogorov-Smirnov distance";
  // The KS statistic can fail: a uniform draw is far from normal.
  Tensor u = runRandom(DType::kF64, {n}, 11, {"uniform", -1.0, 2.0, 1234});
  std::vector<double> w(n);
  for (int64_t i = 0; i < n; ++i)
    w[i] = u.get(i);
  std::sort(w.begin(), w.end());
  double far = 0;
  for (int64_t i = 0; i < n; ++i)
    far = std::max(far, std::fabs(normalCdf(w[i]) - double(i) / n));
  EXPECT_GT(far, 10 * 1.63 / std::sqrt(double(n)));
}

TEST(CpuTrainingKernels, RandomF32AgreesWithF64) {
  // Normal draws are computed in double: f32's is f64's rounded. Uniform
  // f32 draws take the top 24 of f64's 53 bits: within scale * 2^-24.
  const int64_t n = 4096;
  for (bool normal : {false, true}) {
    const Draw d{normal ? "normal" : "uniform", 0.25, 3.0, 8};
    Tensor wide = runRandom(DType::kF64, {n}, 2, d);
    Tensor narrow = runRandom(DType::kF32, {n}, 2, d);
    for (int64_t i = 0; i < n; ++i) {
      if (normal) {
        ASSERT_EQ(narrow.get(i), double(float(wide.get(i)))) << i;
      } else {
        ASSERT_LE(wide.get(i) - narrow.get(i), 3.0 * 0x1.0p-24 + 0x1.0p-22) << i;
        ASSERT_GE(wide.get(i) - narrow.get(i), -0x1.0p-22) << i;
      }
    }
  }
}

TEST(CpuTrainingKernels, RandomIsReproducibleAndVariesWithStepAndSeed) {
  const Draw d{"normal", 0.0, 1.0, 42};
  Tensor a = runRandom(DType::kF32, {1000}, 5, d);
  Tensor b = runRandom(DType::kF32, {1000}, 5, d);
  EXPECT_TRUE(tensorsClose(a, b, 0, 0));
  auto differences = [&](const Tensor &other) {
    int64_t count = 0;
    for (int64_t i = 0; i < a.numel(); ++i)
      count += a.get(i) != other.get(i);
    return count;
  };
  EXPECT_EQ(differences(b), 0);
  EXPECT_GT(differences(runRandom(DType::kF32, {1000}, 6, d)), 990);
  EXPECT_GT(differences(runRandom(DType::kF32, {1000}, 5, {"normal", 0.0, 1.0, 43})),
            990);
}

TEST(CpuTrainingKernels, RandomOfABlockDrawsTheWholeTensorsValues) {
  // Every block of a [4, 6, 5] draw split as the partitioner splits it,
  // with its offsets: its values are the whole tensor's at those positions.
  const std::vector<int64_t> global = {4, 6, 5};
  for (bool normal : {false, true}) {
    const Draw d{normal ? "normal" : "uniform", -1.0, 2.0, 21};
    Tensor whole = runRandom(DType::kF64, global, 7, d);
    for (std::vector<int64_t> parts : {std::vector<int64_t>{2, 1, 1}, {1, 3, 1},
                                       {2, 2, 1}, {1, 1, 5}, {4, 3, 1}}) {
      std::vector<int64_t> block(3);
      for (int i = 0; i < 3; ++i)
        block[i] = global[i] / parts[i];
      for (int64_t b = 0; b < parts[0] * parts[1] * parts[2]; ++b) {
        std::vector<int64_t> coord = {b / (parts[1] * parts[2]),
                                      (b / parts[2]) % parts[1], b % parts[2]};
        Tensor off(DType::kI64, {3}), st = scalar(DType::kI64, 0);
        st.setInt(0, 7);
        for (int i = 0; i < 3; ++i)
          off.setInt(i, coord[i] * block[i]);
        Tensor y = Tensor::output(DType::kF64, block);
        Attrs attrs = drawAttrs(d);
        attrs.set("global_shape", global);
        Status s = runKernel("random", {st.view(), off.view()}, {y.view()}, attrs);
        ASSERT_TRUE(s.isOk()) << s.toString();
        for (int64_t i = 0; i < y.numel(); ++i) {
          int64_t l2 = i % block[2], l1 = (i / block[2]) % block[1],
                  l0 = i / (block[1] * block[2]);
          int64_t g = ((off.getInt(0) + l0) * global[1] + off.getInt(1) + l1) *
                          global[2] +
                      off.getInt(2) + l2;
          ASSERT_EQ(y.get(i), whole.get(g))
              << d.distribution << " block " << b << " element " << i;
        }
      }
    }
  }
  // The offsets must be one i64 per dimension, with a global shape as big.
  Tensor st = scalar(DType::kI64, 1), y(DType::kF64, {2, 3, 5});
  Tensor off(DType::kI64, {3}), shortOff(DType::kI64, {2});
  Attrs attrs = drawAttrs({"uniform", 0.0, 1.0, 1});
  attrs.set("global_shape", global);
  EXPECT_TRUE(runKernel("random", {st.view(), off.view()}, {y.view()}, attrs).isOk());
  EXPECT_FALSE(
      runKernel("random", {st.view(), shortOff.view()}, {y.view()}, attrs).isOk());
  attrs.set("global_shape", std::vector<int64_t>{4, 2, 5});
  EXPECT_FALSE(runKernel("random", {st.view(), off.view()}, {y.view()}, attrs).isOk());
}

TEST(CpuTrainingKernels, RandomRejectsBadOperands) {
  Tensor st = scalar(DType::kI64, 1), y(DType::kF32, {8});
  auto run = [&](const Attrs &attrs, TensorView step, TensorView out) {
    return runKernel("random", {step}, {out}, attrs);
  };
  EXPECT_TRUE(run(drawAttrs({"uniform", 0.0, 1.0, 1}), st.view(), y.view()).isOk());
  EXPECT_EQ(run(drawAttrs({"gamma", 0.0, 1.0, 1}), st.view(), y.view()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(run(drawAttrs({"normal", kNan, 1.0, 1}), st.view(), y.view()).isOk());
  EXPECT_FALSE(run(drawAttrs({"normal", 0.0, HUGE_VAL, 1}), st.view(), y.view()).isOk());
  Attrs noSeed = attrsOf({{"shift", 0.0}, {"scale", 1.0}});
  noSeed.set("distribution", std::string("uniform"));
  EXPECT_FALSE(run(noSeed, st.view(), y.view()).isOk());
  Tensor st32 = scalar(DType::kI32, 1), yi(DType::kI32, {8});
  EXPECT_FALSE(run(drawAttrs({"uniform", 0.0, 1.0, 1}), st32.view(), y.view()).isOk());
  EXPECT_FALSE(run(drawAttrs({"uniform", 0.0, 1.0, 1}), st.view(), yi.view()).isOk());
}

//===----------------------------------------------------------------------===//
// lr_schedule
//===----------------------------------------------------------------------===//

StatusOr<double> runLr(const std::string &kind, int64_t step, int64_t total,
                       int64_t warmup = 10, double base = 0.1,
                       double min = 0.01) {
  Tensor st = scalar(DType::kI64, 0), tot = scalar(DType::kI64, 0);
  st.setInt(0, step);
  tot.setInt(0, total);
  Tensor out = Tensor::output(DType::kF32, {});
  Status s = runKernel("lr_schedule", {st.view(), tot.view()}, {out.view()},
                       attrsOf({{"base_lr", base},
                                {"min_lr", min},
                                {"warmup", warmup},
                                {"kind", kind}}));
  if (!s.isOk())
    return s;
  return out.get(0);
}

TEST(CpuTrainingKernels, LrScheduleValues) {
  // base_lr 0.1, min_lr 0.01, warmup 10, total 110: p = (step - 10) / 100.
  struct Case {
    int64_t step;
    double constant, linear, cosine;
  } cases[] = {
      {0, 0.01, 0.01, 0.01}, // warmup: base * 1 / 10
      {4, 0.05, 0.05, 0.05}, // base * 5 / 10
      {9, 0.1, 0.1, 0.1},    // the last warmup step reaches base
      {10, 0.1, 0.1, 0.1},   // p = 0
      {35, 0.1, 0.0775, 0.08681980515339463},   // p = 1/4: cos(pi/4)
      {60, 0.1, 0.055, 0.055},                  // p = 1/2
      {109, 0.1, 0.0109, 0.010022204783542078}, // p = 0.99
      {110, 0.1, 0.01, 0.01},                   // p = 1: min_lr
  };
  for (const Case &c : cases) {
    for (auto [kind, expected] :
         {std::pair<const char *, double>{"constant", c.constant},
          {"linear", c.linear},
          {"cosine", c.cosine}}) {
      StatusOr<double> lr = runLr(kind, c.step, 110);
      ASSERT_TRUE(lr.isOk()) << lr.status().toString();
      EXPECT_FLOAT_EQ(float(*lr), float(expected))
          << kind << " step " << c.step;
    }
  }
  // No warmup: step 0 is at base_lr; total <= warmup divides by 1.
  EXPECT_FLOAT_EQ(float(*runLr("cosine", 0, 100, 0)), 0.1f);
  EXPECT_FLOAT_EQ(float(*runLr("linear", 50, 100, 0)), 0.055f);
  EXPECT_FLOAT_EQ(float(*runLr("linear", 10, 5, 10)), 0.1f);
}

TEST(CpuTrainingKernels, LrScheduleRejectsBadAttributes) {
  StatusOr<double> lr = runLr("exponential", 0, 10);
  ASSERT_FALSE(lr.isOk());
  EXPECT_EQ(lr.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(lr.status().message().find("\"exponential\""), std::string::npos)
      << lr.status().message();
  EXPECT_NE(lr.status().message().find("lr_schedule at 'node_lr_schedule'"),
            std::string::npos)
      << lr.status().message();
  EXPECT_FALSE(runLr("linear", 0, 10, -1).isOk());
  Tensor st = scalar(DType::kI64, 0), out = Tensor::output(DType::kF32, {});
  Attrs attrs = attrsOf({{"base_lr", 0.1},
                         {"min_lr", 0.0},
                         {"warmup", int64_t(0)},
                         {"kind", std::string("constant")}});
  EXPECT_EQ(runKernel("lr_schedule", {st.view()}, {out.view()}, attrs).code(),
            StatusCode::kInvalidArgument);
  Attrs noKind =
      attrsOf({{"base_lr", 0.1}, {"min_lr", 0.0}, {"warmup", int64_t(0)}});
  EXPECT_FALSE(
      runKernel("lr_schedule", {st.view(), st.view()}, {out.view()}, noKind)
          .isOk());
  Tensor out64 = Tensor::output(DType::kF64, {});
  EXPECT_FALSE(
      runKernel("lr_schedule", {st.view(), st.view()}, {out64.view()}, attrs)
          .isOk());
}

//===----------------------------------------------------------------------===//
// adamw / sgd
//===----------------------------------------------------------------------===//

/// A rank-2 view of one element with odd strides: scalars may come so.
TensorView oddScalarView(Tensor &t) {
  TensorView v = t.view();
  v.shape = {1, 1};
  v.strides = {7, -3};
  return v;
}

struct OptState {
  Tensor param, m, v; // m is SGD's buffer
};

struct AdamwHyper {
  double beta1, beta2, eps, wd;
};

/// PyTorch 1.13's _single_tensor_adamw in double, on the stored values.
void adamwRef(std::vector<double> &p, std::vector<double> &m,
              std::vector<double> &v, const Tensor &grad, double lr,
              int64_t step, double gs, const AdamwHyper &h) {
  const double bc1 = 1 - std::pow(h.beta1, double(step));
  const double bc2 = 1 - std::pow(h.beta2, double(step));
  for (size_t i = 0; i < p.size(); ++i) {
    const double g = grad.get(int64_t(i)) * gs;
    p[i] *= 1 - lr * h.wd;
    m[i] = h.beta1 * m[i] + (1 - h.beta1) * g;
    v[i] = h.beta2 * v[i] + (1 - h.beta2) * g * g;
    const double denom = std::sqrt(v[i]) / std::sqrt(bc2) + h.eps;
    p[i] -= lr / bc1 * m[i] / denom;
  }
}

Attrs adamwAttrs(const AdamwHyper &h) {
  return attrsOf({{"beta1", h.beta1},
                  {"beta2", h.beta2},
                  {"epsilon", h.eps},
                  {"weight_decay", h.wd}});
}

/// Runs `steps` AdamW updates from `init`; in place (the outputs are the
/// memory of param, m and v) or into fresh buffers that feed the next step.
OptState runAdamw(const OptState &init, const std::vector<Tensor> &grads,
                  const std::vector<double> &lrs, double gs,
                  const AdamwHyper &h, bool inPlace) {
  OptState s = init;
  for (size_t k = 0; k < grads.size(); ++k) {
    Tensor grad = grads[k], lr = scalar(DType::kF32, lrs[k]),
           step = scalar(DType::kI64, 0), scale = scalar(DType::kF32, gs);
    step.setInt(0, int64_t(k) + 1);
    const DType dt = s.param.dtype;
    const std::vector<int64_t> shape = s.param.shape;
    OptState next =
        inPlace ? OptState()
                : OptState{Tensor::output(dt, shape), Tensor::output(dt, shape),
                           Tensor::output(dt, shape)};
    OptState &out = inPlace ? s : next;
    Status st = runKernel("adamw",
                          {s.param.view(), grad.view(), s.m.view(), s.v.view(),
                           oddScalarView(lr), step.view(), scale.view()},
                          {out.param.view(), out.m.view(), out.v.view()},
                          adamwAttrs(h));
    EXPECT_TRUE(st.isOk()) << st.toString();
    if (!inPlace)
      s = std::move(next);
  }
  return s;
}

std::vector<double> valuesOf(const Tensor &t) {
  std::vector<double> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i)
    v[i] = t.get(i);
  return v;
}

TEST(CpuTrainingKernels, AdamwMatchesReferenceInPlaceAndNot) {
  std::mt19937 rng(82);
  const AdamwHyper hypers[] = {
      {0.9, 0.999, 1e-8, 0.0}, {0.9, 0.95, 1e-6, 0.1}, {0.5, 0.9, 1e-3, 0.01}};
  for (DType dt : {DType::kF32, DType::kF64})
    for (const AdamwHyper &h : hypers)
      for (double gs : {1.0, 0.25}) {
        const std::vector<int64_t> shape = {5, 67};
        OptState init{randomTensor(rng, dt, shape, -1, 1),
                      randomTensor(rng, dt, shape, -0.1, 0.1),
                      randomTensor(rng, dt, shape, 0, 0.01)};
        std::vector<Tensor> grads;
        std::vector<double> lrs = {1e-2, 3e-3, 1e-3, 2e-3, 5e-4, 1e-2};
        for (size_t k = 0; k < lrs.size(); ++k)
          grads.push_back(randomTensor(rng, dt, shape, -2, 2));
        std::vector<double> p = valuesOf(init.param), m = valuesOf(init.m),
                            v = valuesOf(init.v);
        for (size_t k = 0; k < grads.size(); ++k)
          adamwRef(p, m, v, grads[k], double(float(lrs[k])), int64_t(k) + 1, gs,
                   h);
        OptState inPlace = runAdamw(init, grads, lrs, gs, h, true);
        OptState outOfPlace = runAdamw(init, grads, lrs, gs, h, false);
        std::string what = std::string(dtypeName(dt)) + " beta2 " +
                           std::to_string(h.beta2) + " wd " +
                           std::to_string(h.wd) + " gs " + std::to_string(gs);
        // Same arithmetic either way: bit-identical.
        EXPECT_TRUE(tensorsClose(inPlace.param, outOfPlace.param, 0, 0))
            << what;
        EXPECT_TRUE(tensorsClose(inPlace.m, outOfPlace.m, 0, 0)) << what;
        EXPECT_TRUE(tensorsClose(inPlace.v, outOfPlace.v, 0, 0)) << what;
        double rtol = dt == DType::kF32 ? 1e-5 : 1e-12;
        double atol = dt == DType::kF32 ? 1e-6 : 1e-14;
        EXPECT_TRUE(
            tensorsClose(inPlace.param, fromValues(dt, shape, p), rtol, atol))
            << what;
        EXPECT_TRUE(
            tensorsClose(inPlace.m, fromValues(dt, shape, m), rtol, atol))
            << what;
        EXPECT_TRUE(tensorsClose(inPlace.v, fromValues(dt, shape, v), rtol,
                                 atol * 1e-2))
            << what;
      }
}

TEST(CpuTrainingKernels, AdamwReadsANarrowGradientAsItsCast) {
  // A bf16 or f16 gradient of an f32 parameter (mixed precision, read
  // without its cast: dtcc-fold-narrow-reads) updates exactly as its
  // f32 cast does, in place and not.
  std::mt19937 rng(83);
  const AdamwHyper h{0.9, 0.95, 1e-8, 0.1};
  const std::vector<int64_t> shape = {3, 77};
  for (DType narrow : {DType::kBF16, DType::kF16}) {
    OptState init{randomTensor(rng, DType::kF32, shape, -1, 1),
                  randomTensor(rng, DType::kF32, shape, -0.1, 0.1),
                  randomTensor(rng, DType::kF32, shape, 0, 0.01)};
    std::vector<Tensor> narrowGrads, wideGrads;
    std::vector<double> lrs = {1e-2, 3e-3, 1e-3};
    for (size_t k = 0; k < lrs.size(); ++k) {
      Tensor g = randomTensor(rng, narrow, shape, -2, 2);
      Tensor w(DType::kF32, shape);
      for (int64_t i = 0; i < g.numel(); ++i)
        w.set(i, g.get(i));
      narrowGrads.push_back(std::move(g));
      wideGrads.push_back(std::move(w));
    }
    for (bool inPlace : {true, false}) {
      OptState a = runAdamw(init, narrowGrads, lrs, 0.5, h, inPlace);
      OptState b = runAdamw(init, wideGrads, lrs, 0.5, h, inPlace);
      EXPECT_TRUE(tensorsClose(a.param, b.param, 0, 0)) << dtypeName(narrow);
      EXPECT_TRUE(tensorsClose(a.m, b.m, 0, 0)) << dtypeName(narrow);
      EXPECT_TRUE(tensorsClose(a.v, b.v, 0, 0)) << dtypeName(narrow);
    }
  }
  // An f64 parameter takes an f64 gradient only.
  Tensor p(DType::kF64, {4}), g(DType::kBF16, {4}), m(DType::kF64, {4}),
      v(DType::kF64, {4}), lr = scalar(DType::kF32, 0.1),
                           step = scalar(DType::kI64, 1),
                           scale = scalar(DType::kF32, 1);
  EXPECT_FALSE(runKernel("adamw",
                         {p.view(), g.view(), m.view(), v.view(), lr.view(),
                          step.view(), scale.view()},
                         {p.view(), m.view(), v.view()}, adamwAttrs(h))
                   .isOk());
}

TEST(CpuTrainingKernels, GlobalSumSquaresIsTheChainOfSums) {
  // global_sum_squares (dtcc-fold-global-norm) equals each operand's
  // sum_squares added one after the other in the result's type, to the
  // bit: f32, bf16 and f16 operands into f32 (a long one split over
  // threads, a scalar), f64 into f64; mixing f64 with the others fails.
  std::mt19937 rng(86);
  auto sumOf = [](Tensor &x, DType out) {
    Tensor s(out, {});
    std::vector<int64_t> all;
    for (size_t d = 0; d < x.shape.size(); ++d)
      all.push_back(int64_t(d));
    Attrs dims;
    dims.set("dims", all);
    EXPECT_TRUE(runKernel("sum_squares", {x.view()}, {s.view()}, dims).isOk());
    return s;
  };
  std::vector<Tensor> xs;
  xs.push_back(randomTensor(rng, DType::kBF16, {3, 1 << 17}, -2, 2));
  xs.push_back(randomTensor(rng, DType::kF32, {77}, -3, 3));
  xs.push_back(randomTensor(rng, DType::kF16, {5, 9}, -1, 1));
  xs.push_back(randomTensor(rng, DType::kBF16, {}, -1, 1));
  std::vector<TensorView> ins;
  float want = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    ins.push_back(xs[i].view());
    float s = float(sumOf(xs[i], DType::kF32).get(0));
    want = i == 0 ? s : want + s;
  }
  Tensor got(DType::kF32, {});
  ASSERT_TRUE(runKernel("global_sum_squares", ins, {got.view()}).isOk());
  EXPECT_EQ(float(got.get(0)), want);

  Tensor a = randomTensor(rng, DType::kF64, {1000}, -1, 1),
         b = randomTensor(rng, DType::kF64, {4, 4}, -1, 1);
  Tensor wide(DType::kF64, {});
  ASSERT_TRUE(
      runKernel("global_sum_squares", {a.view(), b.view()}, {wide.view()})
          .isOk());
  EXPECT_EQ(wide.get(0), sumOf(a, DType::kF64).get(0) +
                             sumOf(b, DType::kF64).get(0));
  Tensor narrow(DType::kF32, {});
  EXPECT_FALSE(
      runKernel("global_sum_squares", {a.view(), xs[1].view()}, {narrow.view()})
          .isOk());
}

TEST(CpuTrainingKernels, SumSquaresIsReduceSumOfTheProduct) {
  // sum_squares equals reduce_sum(mul(x, x)) bit for bit on f32 (the same
  // tree; long rows split over threads), over every dimension and some;
  // of bf16 into f32 it equals the f32 reduction of its cast's products.
  std::mt19937 rng(84);
  for (const std::vector<int64_t> &shape :
       std::vector<std::vector<int64_t>>{{5, 67}, {3, 1 << 17}, {1000}}) {
    Tensor x = randomTensor(rng, DType::kF32, shape, -3, 3);
    Tensor sq(DType::kF32, shape);
    ASSERT_TRUE(runKernel("mul", {x.view(), x.view()}, {sq.view()}).isOk());
    std::vector<int64_t> all;
    for (size_t d = 0; d < shape.size(); ++d)
      all.push_back(int64_t(d));
    Attrs dims;
    dims.set("dims", all);
    Tensor want(DType::kF32, {}), got(DType::kF32, {});
    ASSERT_TRUE(runKernel("reduce_sum", {sq.view()}, {want.view()}, dims).isOk());
    ASSERT_TRUE(runKernel("sum_squares", {x.view()}, {got.view()}, dims).isOk());
    EXPECT_EQ(got.get(0), want.get(0)) << shape.size();
    if (shape.size() == 2) {
      // Over the rows only.
      Attrs rows;
      rows.set("dims", std::vector<int64_t>{0});
      Tensor w(DType::kF32, {shape[1]}), r(DType::kF32, {shape[1]});
      ASSERT_TRUE(runKernel("reduce_sum", {sq.view()}, {w.view()}, rows).isOk());
      ASSERT_TRUE(runKernel("sum_squares", {x.view()}, {r.view()}, rows).isOk());
      EXPECT_TRUE(tensorsClose(r, w, 0, 0));
    }
    Tensor h = randomTensor(rng, DType::kBF16, shape, -3, 3);
    Tensor hw(DType::kF32, shape), hsq(DType::kF32, shape);
    for (int64_t i = 0; i < h.numel(); ++i)
      hw.set(i, h.get(i));
    ASSERT_TRUE(runKernel("mul", {hw.view(), hw.view()}, {hsq.view()}).isOk());
    Tensor hwant(DType::kF32, {}), hgot(DType::kF32, {});
    ASSERT_TRUE(
        runKernel("reduce_sum", {hsq.view()}, {hwant.view()}, dims).isOk());
    ASSERT_TRUE(
        runKernel("sum_squares", {h.view()}, {hgot.view()}, dims).isOk());
    EXPECT_EQ(hgot.get(0), hwant.get(0));
  }
  // Integers are not summed as squares; an f32 operand gives f32.
  Tensor i(DType::kI32, {4}), o(DType::kI32, {}), f(DType::kF32, {4}),
      d(DType::kF64, {});
  Attrs dims;
  dims.set("dims", std::vector<int64_t>{0});
  EXPECT_FALSE(runKernel("sum_squares", {i.view()}, {o.view()}, dims).isOk());
  EXPECT_FALSE(runKernel("sum_squares", {f.view()}, {d.view()}, dims).isOk());
}

TEST(CpuTrainingKernels, AdamwFirstStepMovesByLr) {
  // With m = v = 0 and no decay, step 1 moves every parameter by
  // lr * g / (|g| + eps): about lr * sign(g).
  Tensor p = fromValues(DType::kF64, {4}, {1, 2, 3, 4});
  Tensor g = fromValues(DType::kF64, {4}, {0.5, -2, 1e-3, -7});
  Tensor m(DType::kF64, {4}), v(DType::kF64, {4});
  Tensor lr = scalar(DType::kF32, 0.5), step = scalar(DType::kI64, 1),
         scale = scalar(DType::kF32, 1);
  ASSERT_TRUE(runKernel("adamw",
                        {p.view(), g.view(), m.view(), v.view(), lr.view(),
                         step.view(), scale.view()},
                        {p.view(), m.view(), v.view()},
                        adamwAttrs({0.9, 0.999, 0.0, 0.0}))
                  .isOk());
  const double expected[] = {0.5, 2.5, 2.5, 4.5};
  for (int i = 0; i < 4; ++i)
    EXPECT_NEAR(p.get(i), expected[i], 1e-12) << i;
  EXPECT_NEAR(m.get(1), -0.2, 1e-15);
  EXPECT_NEAR(v.get(1), 0.004, 1e-15);
}

// The CPU device binds a run of consecutive adamw instructions as one
// update (cpu/CpuAdamw.h): the first one's kernel updates every member, bit
// for bit as each instruction alone would, over the threads; the others do
// nothing. A member that reads memory another writes, other scalars, any
// other kernel bound in between, a new function and a run that has run
// each start a new run.
TEST(CpuTrainingKernels, AdamwRunsBindAsOneUpdate) {
  AdamwHyper h{0.9, 0.999, 1e-8, 0.1};
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.f, 1.f);
  auto random = [&](int64_t n, bool positive) {
    Tensor t(DType::kF32, {n});
    for (int64_t i = 0; i < n; ++i)
      t.setRaw<float>(i, positive ? std::abs(normal(rng)) : normal(rng));
    return t;
  };
  struct Slot {
    Tensor p, g, m, v;
  };
  // Sizes across the threads' grain (kParallelGrain), one tiny, a tail.
  const std::vector<int64_t> sizes = {70000, 3, 40000, 1003};
  std::vector<Slot> slots;
  for (int64_t n : sizes)
    slots.push_back({random(n, false), random(n, false), random(n, false),
                     random(n, true)});
  Tensor lr = scalar(DType::kF32, 0.01), step = scalar(DType::kI64, 4),
         scale = scalar(DType::kF32, 0.5), step2 = scalar(DType::kI64, 4);
  auto sameBits = [](const Tensor &a, const Tensor &b) {
    return a.numel() == b.numel() &&
           std::memcmp(a.bytes(), b.bytes(), size_t(a.numel()) * 4) == 0;
  };
  // What each instruction alone makes, in order (the kernels' registry).
  std::vector<Slot> want = slots;
  for (Slot &w : want)
    ASSERT_TRUE(runKernel("adamw",
                          {w.p.view(), w.g.view(), w.m.view(), w.v.view(),
                           lr.view(), step.view(), scale.view()},
                          {w.p.view(), w.m.view(), w.v.view()}, adamwAttrs(h))
                    .isOk());

  std::unique_ptr<Device> device = createCpuDevice();
  auto bind = [&](Slot &s, Tensor &stepTensor,
                  Tensor *grad = nullptr) -> KernelFn {
    KernelContext ctx;
    ctx.kernel = "adamw";
    ctx.location = "node_adamw";
    ctx.inputs = {s.p.view(),  grad ? grad->view() : s.g.view(),
                  s.m.view(),  s.v.view(),
                  lr.view(),   stepTensor.view(),
                  scale.view()};
    ctx.outputs = {s.p.view(), s.m.view(), s.v.view()};
    ctx.attrs = adamwAttrs(h);
    StatusOr<KernelFn> fn = (*device->kernels().find("adamw"))(ctx);
    EXPECT_TRUE(fn.isOk()) << fn.status().message();
    return fn.isOk() ? std::move(fn).value() : KernelFn();
  };

  // One run of four: the first kernel updates them all.
  {
    std::vector<Slot> got = slots;
    device->beginFunction();
    std::vector<KernelFn> fns;
    for (Slot &s : got)
      fns.push_back(bind(s, step));
    ASSERT_TRUE(fns[0]().isOk());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(sameBits(got[i].p, want[i].p)) << i;
      EXPECT_TRUE(sameBits(got[i].m, want[i].m)) << i;
      EXPECT_TRUE(sameBits(got[i].v, want[i].v)) << i;
    }
    for (size_t i = 1; i < fns.size(); ++i)
      ASSERT_TRUE(fns[i]().isOk());
    EXPECT_TRUE(sameBits(got[3].p, want[3].p)) << "the members ran twice";
  }
  // Each of these binds a second instruction in a run of its own: the
  // first kernel leaves the second's tensors as they were.
  auto leftAlone = [&](const char *what, Tensor &secondStep,
                       bool gradIsFirstsParam,
                       const std::function<void()> &between) {
    std::vector<Slot> got = slots;
    device->beginFunction();
    KernelFn first = bind(got[0], step);
    between();
    // The second is of the first's size when it reads the first's output.
    Slot second = gradIsFirstsParam ? slots[0] : slots[1];
    const Tensor before = second.p;
    KernelFn next =
        bind(second, secondStep, gradIsFirstsParam ? &got[0].p : nullptr);
    ASSERT_TRUE(first().isOk()) << what;
    EXPECT_TRUE(sameBits(got[0].p, want[0].p)) << what;
    EXPECT_TRUE(sameBits(second.p, before)) << what << ": joined the run";
    ASSERT_TRUE(next().isOk()) << what;
    EXPECT_FALSE(sameBits(second.p, before)) << what << ": not updated";
  };
  leftAlone("its gradient is the first's parameter", step, true, [] {});
  leftAlone("another step tensor", step2, false, [] {});
  Tensor a = random(8, false), b = random(8, false), c(DType::kF32, {8});
  leftAlone("another kernel bound in between", step, false, [&] {
    KernelContext ctx;
    ctx.kernel = "add";
    ctx.location = "node_add";
    ctx.inputs = {a.view(), b.view()};
    ctx.outputs = {c.view()};
    ASSERT_TRUE((*device->kernels().find("add"))(ctx).isOk());
  });
  leftAlone("a new function", step, false, [&] { device->beginFunction(); });
  // A run whose kernel has run takes no new member (it would never be
  // updated).
  {
    std::vector<Slot> got = slots;
    device->beginFunction();
    KernelFn first = bind(got[0], step);
    ASSERT_TRUE(first().isOk());
    const Tensor before = got[1].p;
    KernelFn next = bind(got[1], step);
    ASSERT_TRUE(next().isOk());
    EXPECT_FALSE(sameBits(got[1].p, before)) << "joined a run that had run";
  }
}

TEST(CpuTrainingKernels, AdamwWritesTheRoundedCopyOfTheNewParameter) {
  // The optional fourth output (rounded-copies) is the new parameter cast
  // to bf16 or f16, bit for bit the cast kernel's; the other outputs are
  // the three-output update's. 1003 elements: vector blocks and a tail.
  const int64_t n = 1003;
  AdamwHyper h{0.9, 0.999, 1e-8, 0.1};
  std::mt19937 rng(21);
  std::normal_distribution<float> normal(0.f, 1.f);
  auto randomF32 = [&](bool positive) {
    Tensor t(DType::kF32, {n});
    for (int64_t i = 0; i < n; ++i)
      t.setRaw<float>(i, positive ? std::abs(normal(rng)) : normal(rng));
    return t;
  };
  auto sameBits = [](const Tensor &a, const Tensor &b) {
    return a.dtype == b.dtype && a.numel() == b.numel() &&
           std::memcmp(a.bytes(), b.bytes(),
                       size_t(a.numel()) * dtypeSize(a.dtype)) == 0;
  };
  for (DType half : {DType::kBF16, DType::kF16}) {
    Tensor p = randomF32(false), g = randomF32(false), m = randomF32(false),
           v = randomF32(true);
    Tensor lr = scalar(DType::kF32, 0.01), step = scalar(DType::kI64, 3),
           scale = scalar(DType::kF32, 0.5);
    Tensor p3 = p, m3 = m, v3 = v;
    ASSERT_TRUE(runKernel("adamw",
                          {p3.view(), g.view(), m3.view(), v3.view(), lr.view(),
                           step.view(), scale.view()},
                          {p3.view(), m3.view(), v3.view()}, adamwAttrs(h))
                    .isOk());
    Tensor want(half, {n});
    ASSERT_TRUE(runKernel("cast", {p3.view()}, {want.view()}).isOk());
    Tensor p4 = p, m4 = m, v4 = v, got = Tensor::output(half, {n});
    ASSERT_TRUE(runKernel("adamw",
                          {p4.view(), g.view(), m4.view(), v4.view(), lr.view(),
                           step.view(), scale.view()},
                          {p4.view(), m4.view(), v4.view(), got.view()},
                          adamwAttrs(h))
                    .isOk());
    EXPECT_TRUE(sameBits(p4, p3)) << dtypeName(half);
    EXPECT_TRUE(sameBits(m4, m3)) << dtypeName(half);
    EXPECT_TRUE(sameBits(v4, v3)) << dtypeName(half);
    EXPECT_TRUE(sameBits(got, want)) << dtypeName(half);
  }
  // The copy is of a half type, of the parameter's shape, and overlaps
  // nothing.
  Tensor p(DType::kF32, {8}), g(DType::kF32, {8}), m(DType::kF32, {8}),
      v(DType::kF32, {8}), lr = scalar(DType::kF32, 0.1),
                           step = scalar(DType::kI64, 1),
                           scale = scalar(DType::kF32, 1);
  Tensor wide(DType::kF32, {8}), shortCopy(DType::kBF16, {4});
  TensorView inside = m.view();
  inside.dtype = DType::kBF16;
  for (const TensorView &bad : {wide.view(), shortCopy.view(), inside}) {
    Status st = runKernel("adamw",
                          {p.view(), g.view(), m.view(), v.view(), lr.view(),
                           step.view(), scale.view()},
                          {p.view(), m.view(), v.view(), bad}, adamwAttrs(h));
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
  }
}

TEST(CpuTrainingKernels, AdamwRejectsBadOperands) {
  Tensor p(DType::kF32, {8}), g(DType::kF32, {8}), m(DType::kF32, {8}),
      v(DType::kF32, {8}), lr = scalar(DType::kF32, 0.1),
                           step = scalar(DType::kI64, 0),
                           scale = scalar(DType::kF32, 1);
  AdamwHyper h{0.9, 0.999, 1e-8, 0.0};
  // Step 0 is not a 1-based update count (bias corrections would be 0).
  Status s = runKernel("adamw",
                       {p.view(), g.view(), m.view(), v.view(), lr.view(),
                        step.view(), scale.view()},
                       {p.view(), m.view(), v.view()}, adamwAttrs(h));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("step >= 1"), std::string::npos) << s.message();
  step.setInt(0, 1);
  // Wrong arity.
  EXPECT_EQ(runKernel("adamw",
                      {p.view(), g.view(), m.view(), v.view(), lr.view(),
                       step.view()},
                      {p.view(), m.view(), v.view()}, adamwAttrs(h))
                .code(),
            StatusCode::kInvalidArgument);
  // Missing attribute.
  Attrs noEps =
      attrsOf({{"beta1", 0.9}, {"beta2", 0.999}, {"weight_decay", 0.0}});
  EXPECT_FALSE(runKernel("adamw",
                         {p.view(), g.view(), m.view(), v.view(), lr.view(),
                          step.view(), scale.view()},
                         {p.view(), m.view(), v.view()}, noEps)
                   .isOk());
  // new_m partially overlapping v.
  Tensor mv(DType::kF32, {12});
  TensorView vView = mv.view(), mView = mv.view();
  vView.shape = mView.shape = {8};
  vView.strides = mView.strides = {1};
  mView.data = mv.bytes() + 4 * sizeof(float);
  s = runKernel("adamw",
                {p.view(), g.view(), m.view(), vView, lr.view(), step.view(),
                 scale.view()},
                {p.view(), mView, vView}, adamwAttrs(h));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("partially overlap"), std::string::npos)
      << s.message();
  // Two results in one buffer.
  EXPECT_FALSE(runKernel("adamw",
                         {p.view(), g.view(), m.view(), v.view(), lr.view(),
                          step.view(), scale.view()},
                         {p.view(), m.view(), m.view()}, adamwAttrs(h))
                   .isOk());
  // Scalars of the wrong type or size.
  Tensor lr64 = scalar(DType::kF64, 0.1), lr2(DType::kF32, {2});
  EXPECT_FALSE(runKernel("adamw",
                         {p.view(), g.view(), m.view(), v.view(), lr64.view(),
                          step.view(), scale.view()},
                         {p.view(), m.view(), v.view()}, adamwAttrs(h))
                   .isOk());
  EXPECT_FALSE(runKernel("adamw",
                         {p.view(), g.view(), m.view(), v.view(), lr2.view(),
                          step.view(), scale.view()},
                         {p.view(), m.view(), v.view()}, adamwAttrs(h))
                   .isOk());
  Tensor g64(DType::kF64, {8});
  EXPECT_FALSE(runKernel("adamw",
                         {p.view(), g64.view(), m.view(), v.view(), lr.view(),
                          step.view(), scale.view()},
                         {p.view(), m.view(), v.view()}, adamwAttrs(h))
                   .isOk());
}

struct SgdHyper {
  double momentum, dampening, wd;
  bool nesterov;
};

/// PyTorch's SGD in double; the buffer follows the .td formula even when
/// momentum is 0 (where PyTorch keeps none and the update ignores it).
void sgdRef(std::vector<double> &p, std::vector<double> &buf,
            const Tensor &grad, double lr, int64_t step, double gs,
            const SgdHyper &h) {
  for (size_t i = 0; i < p.size(); ++i) {
    double d = grad.get(int64_t(i)) * gs + h.wd * p[i];
    buf[i] = step == 1 ? d : h.momentum * buf[i] + (1 - h.dampening) * d;
    if (h.nesterov)
      d += h.momentum * buf[i];
    else if (h.momentum != 0)
      d = buf[i];
    p[i] -= lr * d;
  }
}

Attrs sgdAttrs(const SgdHyper &h) {
  Attrs a = attrsOf({{"momentum", h.momentum},
                     {"dampening", h.dampening},
                     {"weight_decay", h.wd}});
  if (h.nesterov)
    a.set("nesterov", int64_t(1));
  return a;
}

TEST(CpuTrainingKernels, SgdMatchesReferenceInPlaceAndNot) {
  std::mt19937 rng(83);
  const SgdHyper hypers[] = {{0.0, 0.0, 0.0, false}, {0.9, 0.0, 0.0, false},
                             {0.9, 0.5, 0.0, false}, {0.9, 0.0, 1e-2, true},
                             {0.5, 0.0, 0.1, false}, {0.0, 0.0, 0.05, false}};
  for (DType dt : {DType::kF32, DType::kF64})
    for (const SgdHyper &h : hypers)
      for (bool inPlace : {true, false}) {
        const std::vector<int64_t> shape = {3, 41};
        Tensor param = randomTensor(rng, dt, shape, -1, 1);
        // The buffer before step 1 is never read: NaN must not leak.
        Tensor buf(dt, shape);
        for (int64_t i = 0; i < buf.numel(); ++i)
          buf.set(i, kNan);
        std::vector<double> p = valuesOf(param), b = valuesOf(buf);
        const double gs = 0.5;
        const double lrs[] = {0.1, 0.05, 0.2, 0.01, 0.1};
        for (int64_t k = 0; k < 5; ++k) {
          Tensor grad = randomTensor(rng, dt, shape, -2, 2);
          sgdRef(p, b, grad, double(float(lrs[k])), k + 1, gs, h);
          Tensor lr = scalar(DType::kF32, lrs[k]),
                 step = scalar(DType::kI64, double(k + 1)),
                 scale = scalar(DType::kF32, gs);
          Tensor newP = Tensor::output(dt, shape),
                 newB = Tensor::output(dt, shape);
          Status s = runKernel("sgd",
                               {param.view(), grad.view(), buf.view(),
                                lr.view(), step.view(), oddScalarView(scale)},
                               {inPlace ? param.view() : newP.view(),
                                inPlace ? buf.view() : newB.view()},
                               sgdAttrs(h));
          ASSERT_TRUE(s.isOk()) << s.toString();
          if (!inPlace) {
            param = newP;
            buf = newB;
          }
        }
        std::string what = std::string(dtypeName(dt)) + " momentum " +
                           std::to_string(h.momentum) + " dampening " +
                           std::to_string(h.dampening) + " wd " +
                           std::to_string(h.wd) + " nesterov " +
                           std::to_string(h.nesterov) + " in place " +
                           std::to_string(inPlace);
        double rtol = dt == DType::kF32 ? 1e-5 : 1e-12;
        double atol = dt == DType::kF32 ? 1e-6 : 1e-14;
        EXPECT_TRUE(tensorsClose(param, fromValues(dt, shape, p), rtol, atol))
            << what;
        EXPECT_TRUE(tensorsClose(buf, fromValues(dt, shape, b), rtol, atol))
            << what;
      }
}

TEST(CpuTrainingKernels, SgdHandComputedSteps) {
  // momentum 0.9, dampening 0, lr 0.5, g = 1 then 2, p0 = 1:
  // step 1: buf = 1, p = 0.5; step 2: buf = 0.9 + 2 = 2.9, p = 0.5 - 1.45.
  Tensor p = fromValues(DType::kF64, {1}, {1}), buf(DType::kF64, {1});
  Tensor lr = scalar(DType::kF32, 0.5), scale = scalar(DType::kF32, 1);
  for (int64_t k = 1; k <= 2; ++k) {
    Tensor g = fromValues(DType::kF64, {1}, {double(k)}),
           step = scalar(DType::kI64, double(k));
    ASSERT_TRUE(runKernel("sgd",
                          {p.view(), g.view(), buf.view(), lr.view(),
                           step.view(), scale.view()},
                          {p.view(), buf.view()},
                          sgdAttrs({0.9, 0.0, 0.0, false}))
                    .isOk());
  }
  EXPECT_NEAR(buf.get(0), 2.9, 1e-15);
  EXPECT_NEAR(p.get(0), -0.95, 1e-15);
}

TEST(CpuTrainingKernels, SgdRejectsBadOperands) {
  Tensor p(DType::kF32, {8}), g(DType::kF32, {8}), b(DType::kF32, {8}),
      lr = scalar(DType::kF32, 0.1), step = scalar(DType::kI64, 1),
      scale = scalar(DType::kF32, 1);
  SgdHyper h{0.9, 0.0, 0.0, false};
  EXPECT_TRUE(runKernel("sgd",
                        {p.view(), g.view(), b.view(), lr.view(), step.view(),
                         scale.view()},
                        {p.view(), b.view()}, sgdAttrs(h))
                  .isOk());
  EXPECT_EQ(runKernel("sgd",
                      {p.view(), g.view(), b.view(), lr.view(), step.view(),
                       scale.view()},
                      {p.view()}, sgdAttrs(h))
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(runKernel("sgd",
                         {p.view(), g.view(), b.view(), lr.view(), step.view(),
                          scale.view()},
                         {p.view(), b.view()}, attrsOf({{"momentum", 0.9}}))
                   .isOk());
  step.setInt(0, -1);
  EXPECT_FALSE(runKernel("sgd",
                         {p.view(), g.view(), b.view(), lr.view(), step.view(),
                          scale.view()},
                         {p.view(), b.view()}, sgdAttrs(h))
                   .isOk());
  Tensor pi(DType::kI32, {8}), gi(DType::kI32, {8}), bi(DType::kI32, {8});
  step.setInt(0, 1);
  EXPECT_FALSE(runKernel("sgd",
                         {pi.view(), gi.view(), bi.view(), lr.view(),
                          step.view(), scale.view()},
                         {pi.view(), bi.view()}, sgdAttrs(h))
                   .isOk());
}

TEST(CpuTrainingKernels, RegistryHasEveryTrainingKernel) {
  std::set<std::string> names;
  for (const std::string &n : cpuRegistry().names())
    names.insert(n);
  for (const char *name :
       {"gelu_grad", "silu_grad", "softmax_grad", "log_softmax_grad",
        "layer_norm_grad", "rms_norm_grad", "layer_norm_param_grad",
        "rms_norm_param_grad", "cross_entropy_grad", "dropout", "random",
        "lr_schedule", "adamw", "sgd"})
    EXPECT_TRUE(names.count(name)) << name;
}

} // namespace
