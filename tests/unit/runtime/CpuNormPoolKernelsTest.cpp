//===- CpuNormPoolKernelsTest.cpp - batch/group norm and pooling kernels --===//
//
// Every kernel of NormPoolKernels.cpp against a naive reference loop in f64
// over the same (rounded) inputs, for f32, f64, f16 and bf16; pooling's tie
// and NaN rules; and the factories' checks.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/runtime/CpuKernelTestUtils.h"

#include <algorithm>
#include <limits>
#include <set>

namespace dtcc::runtime::test {
namespace {

Attrs attrsOf(std::initializer_list<std::pair<const char *, Attrs::Value>> kv) {
  Attrs a;
  for (const auto &[k, v] : kv)
    a.set(k, v);
  return a;
}

/// Tolerances for results that went through one more rounding to `dt`
/// than the reference (and float arithmetic for f32).
std::pair<double, double> tol(DType dt) {
  switch (dt) {
  case DType::kF64:
    return {1e-12, 1e-12};
  case DType::kF16:
    return {4e-3, 4e-3};
  case DType::kBF16:
    return {2e-2, 2e-2};
  default:
    return {2e-5, 2e-5};
  }
}

::testing::AssertionResult close(const Tensor &a, const Tensor &e, DType dt) {
  auto [r, t] = tol(dt);
  return tensorsClose(a, e, r, t);
}

/// [N, C, S]: the channel c's elements of sample n.
struct Nchw {
  int64_t n, c, s;
  explicit Nchw(const std::vector<int64_t> &shape)
      : n(shape[0]), c(shape[1]), s(numelOf(shape) / (shape[0] * shape[1])) {}
  int64_t at(int64_t i, int64_t ch, int64_t k) const {
    return (i * c + ch) * s + k;
  }
};

const std::vector<std::vector<int64_t>> &channelShapes() {
  static const std::vector<std::vector<int64_t>> v = {
      {4, 3, 5},    {2, 3},          {3, 2, 4, 4}, {2, 4, 700},
      {1, 1, 3001}, {2, 6, 2, 3, 2}, {40, 2000}};
  return v;
}

//===----------------------------------------------------------------------===//
// batch norm
//===----------------------------------------------------------------------===//

TEST(CpuNormPoolKernels, BatchNormStatsMatchReference) {
  std::mt19937 rng(101);
  for (DType dt : floatDTypes())
    for (const auto &shape : channelShapes()) {
      Nchw l(shape);
      Tensor x = randomTensor(rng, dt, shape, -2, 3);
      Tensor shift = randomTensor(rng, dt, {l.c}, -1, 1);
      Tensor out = Tensor::output(dt, {2, l.c}), expected(dt, {2, l.c});
      ASSERT_TRUE(runKernel("batch_norm_stats", {x.view(), shift.view()},
                            {out.view()})
                      .isOk());
      for (int64_t c = 0; c < l.c; ++c) {
        double s1 = 0, s2 = 0;
        for (int64_t n = 0; n < l.n; ++n)
          for (int64_t k = 0; k < l.s; ++k) {
            double d = x.get(l.at(n, c, k)) - shift.get(c);
            s1 += d;
            s2 += d * d;
          }
        expected.set(c, s1);
        expected.set(l.c + c, s2);
      }
      // Sums of many terms: relative to the sum of magnitudes.
      auto [r, t] = tol(dt);
      EXPECT_TRUE(tensorsClose(out, expected, r, t * double(l.n * l.s)))
          << dtypeName(dt) << " " << shapeStr(shape);
    }
}

TEST(CpuNormPoolKernels, BatchNormStatsAreExactForLargeMeans) {
  // x = 1e4 + u with small u: E[x^2] - E[x]^2 in float would lose every
  // digit; the centred sum about the mean keeps them (f64 accumulation).
  std::mt19937 rng(102);
  const std::vector<int64_t> shape = {64, 2, 32};
  Nchw l(shape);
  Tensor x(DType::kF32, shape);
  for (int64_t i = 0; i < x.numel(); ++i)
    x.set(i, 1e4 + std::uniform_real_distribution<double>(-0.01, 0.01)(rng));
  Tensor mean(DType::kF32, {2});
  for (int64_t c = 0; c < 2; ++c) {
    double s = 0;
    for (int64_t n = 0; n < l.n; ++n)
      for (int64_t k = 0; k < l.s; ++k)
        s += x.get(l.at(n, c, k));
    mean.set(c, s / double(l.n * l.s));
  }
  Tensor out = Tensor::output(DType::kF32, {2, 2});
  ASSERT_TRUE(
      runKernel("batch_norm_stats", {x.view(), mean.view()}, {out.view()}).isOk());
  for (int64_t c = 0; c < 2; ++c) {
    double s1 = 0, s2 = 0;
    for (int64_t n = 0; n < l.n; ++n)
      for (int64_t k = 0; k < l.s; ++k) {
        double d = x.get(l.at(n, c, k)) - mean.get(c);
        s1 += d;
        s2 += d * d;
      }
    EXPECT_NEAR(out.get(2 + c), s2, 1e-6 * s2) << "channel " << c;
    EXPECT_NEAR(out.get(c), s1, 1e-6 * std::sqrt(s2) + 1e-9) << "channel " << c;
  }
}

TEST(CpuNormPoolKernels, BatchNormMatchesReference) {
  std::mt19937 rng(103);
  for (DType dt : floatDTypes())
    for (const auto &shape : channelShapes()) {
      Nchw l(shape);
      Tensor x = randomTensor(rng, dt, shape, -2, 3);
      Tensor scale = randomTensor(rng, dt, {l.c}, 0.5, 1.5);
      Tensor bias = randomTensor(rng, dt, {l.c}, -1, 1);
      Tensor mean = randomTensor(rng, dt, {l.c}, -1, 1);
      Tensor var = randomTensor(rng, dt, {l.c}, 0.2, 2);
      const double eps = 1e-3;
      Tensor y = Tensor::output(dt, shape), expected(dt, shape);
      ASSERT_TRUE(runKernel("batch_norm",
                            {x.view(), scale.view(), bias.view(), mean.view(),
                             var.view()},
                            {y.view()}, attrsOf({{"epsilon", eps}}))
                      .isOk());
      for (int64_t n = 0; n < l.n; ++n)
        for (int64_t c = 0; c < l.c; ++c)
          for (int64_t k = 0; k < l.s; ++k) {
            int64_t i = l.at(n, c, k);
            expected.set(i, (x.get(i) - mean.get(c)) /
                                    std::sqrt(var.get(c) + eps) * scale.get(c) +
                                bias.get(c));
          }
      EXPECT_TRUE(close(y, expected, dt)) << dtypeName(dt) << " " << shapeStr(shape);
    }
}

TEST(CpuNormPoolKernels, BatchNormUpdateMatchesReference) {
  std::mt19937 rng(104);
  for (DType dt : floatDTypes()) {
    Tensor rm = randomTensor(rng, dt, {7}), rv = randomTensor(rng, dt, {7}, 0, 2);
    Tensor m = randomTensor(rng, dt, {7}), v = randomTensor(rng, dt, {7}, 0, 2);
    Tensor nm = Tensor::output(dt, {7}), nv = Tensor::output(dt, {7});
    ASSERT_TRUE(runKernel("batch_norm_update",
                          {rm.view(), rv.view(), m.view(), v.view()},
                          {nm.view(), nv.view()},
                          attrsOf({{"momentum", 0.9}, {"var_scale", 8.0 / 7.0}}))
                    .isOk());
    Tensor em(dt, {7}), ev(dt, {7});
    for (int64_t i = 0; i < 7; ++i) {
      em.set(i, 0.9 * rm.get(i) + 0.1 * m.get(i));
      ev.set(i, 0.9 * rv.get(i) + 0.1 * v.get(i) * 8.0 / 7.0);
    }
    EXPECT_TRUE(close(nm, em, dt)) << dtypeName(dt);
    EXPECT_TRUE(close(nv, ev, dt)) << dtypeName(dt);
    // In place, as when the result goes back into the variable's buffer.
    Tensor rm2 = rm, rv2 = rv;
    ASSERT_TRUE(runKernel("batch_norm_update",
                          {rm2.view(), rv2.view(), m.view(), v.view()},
                          {rm2.view(), rv2.view()},
                          attrsOf({{"momentum", 0.9}, {"var_scale", 8.0 / 7.0}}))
                    .isOk());
    EXPECT_TRUE(close(rm2, em, dt)) << dtypeName(dt) << " in place";
    EXPECT_TRUE(close(rv2, ev, dt)) << dtypeName(dt) << " in place";
  }
}

TEST(CpuNormPoolKernels, BatchNormGradientsMatchReference) {
  std::mt19937 rng(105);
  for (DType dt : floatDTypes())
    for (const auto &shape : channelShapes()) {
      Nchw l(shape);
      const int64_t count = l.n * l.s;
      Tensor x = randomTensor(rng, dt, shape, -2, 3);
      Tensor dy = randomTensor(rng, dt, shape, -1, 1);
      Tensor scale = randomTensor(rng, dt, {l.c}, 0.5, 1.5);
      // The batch's own statistics, as training has them.
      Tensor mean(dt, {l.c}), var(dt, {l.c});
      for (int64_t c = 0; c < l.c; ++c) {
        double s = 0, q = 0;
        for (int64_t n = 0; n < l.n; ++n)
          for (int64_t k = 0; k < l.s; ++k)
            s += x.get(l.at(n, c, k));
        double mu = s / double(count);
        for (int64_t n = 0; n < l.n; ++n)
          for (int64_t k = 0; k < l.s; ++k)
            q += (x.get(l.at(n, c, k)) - mu) * (x.get(l.at(n, c, k)) - mu);
        mean.set(c, mu);
        var.set(c, q / double(count));
      }
      Tensor stats = Tensor::output(dt, {2, l.c}), estats(dt, {2, l.c});
      ASSERT_TRUE(runKernel("batch_norm_grad_stats",
                            {x.view(), mean.view(), dy.view()}, {stats.view()})
                      .isOk());
      for (int64_t c = 0; c < l.c; ++c) {
        double s1 = 0, s2 = 0;
        for (int64_t n = 0; n < l.n; ++n)
          for (int64_t k = 0; k < l.s; ++k) {
            int64_t i = l.at(n, c, k);
            s1 += dy.get(i);
            s2 += dy.get(i) * (x.get(i) - mean.get(c));
          }
        estats.set(c, s1);
        estats.set(l.c + c, s2);
      }
      auto [r, t] = tol(dt);
      EXPECT_TRUE(tensorsClose(stats, estats, r, t * double(count)))
          << dtypeName(dt) << " " << shapeStr(shape) << " stats";

      // dx from the exact sums (rounded to dt), against the textbook
      // formula dx = g r (dy - mean(dy) - xhat mean(dy xhat)).
      const double eps = 1e-5;
      Tensor dx = Tensor::output(dt, shape), edx(dt, shape);
      ASSERT_TRUE(runKernel("batch_norm_grad",
                            {x.view(), dy.view(), scale.view(), mean.view(),
                             var.view(), estats.view()},
                            {dx.view()},
                            attrsOf({{"epsilon", eps}, {"count", count}}))
                      .isOk());
      for (int64_t c = 0; c < l.c; ++c) {
        const double rs = 1 / std::sqrt(var.get(c) + eps);
        const double meanDy = estats.get(c) / double(count);
        const double meanDyH = estats.get(l.c + c) * rs / double(count);
        for (int64_t n = 0; n < l.n; ++n)
          for (int64_t k = 0; k < l.s; ++k) {
            int64_t i = l.at(n, c, k);
            double h = (x.get(i) - mean.get(c)) * rs;
            edx.set(i, scale.get(c) * rs * (dy.get(i) - meanDy - h * meanDyH));
          }
      }
      // dx cancels terms of the size of dy: compare against that scale.
      EXPECT_TRUE(tensorsClose(dx, edx, r, t * 4))
          << dtypeName(dt) << " " << shapeStr(shape) << " dx";
    }
}

//===----------------------------------------------------------------------===//
// group norm
//===----------------------------------------------------------------------===//

struct GroupCase {
  std::vector<int64_t> shape;
  int64_t perGroup;
};

const std::vector<GroupCase> &groupCases() {
  static const std::vector<GroupCase> v = {
      {{2, 6, 5}, 3}, {{2, 6, 5}, 1}, {{2, 6, 5}, 6}, {{3, 4, 3, 3}, 2},
      {{1, 2, 1500}, 1}, {{4, 3}, 1}, {{2, 8, 2, 2, 2}, 4}};
  return v;
}

TEST(CpuNormPoolKernels, GroupNormMatchesReference) {
  std::mt19937 rng(106);
  for (DType dt : floatDTypes())
    for (const GroupCase &gc : groupCases()) {
      Nchw l(gc.shape);
      const int64_t groups = l.c / gc.perGroup, block = gc.perGroup * l.s;
      Tensor x = randomTensor(rng, dt, gc.shape, -2, 3);
      Tensor scale = randomTensor(rng, dt, {l.c}, 0.5, 1.5);
      Tensor bias = randomTensor(rng, dt, {l.c}, -1, 1);
      const double eps = 1e-5;
      Tensor y = Tensor::output(dt, gc.shape), ey(dt, gc.shape);
      Tensor mean = Tensor::output(dt, {l.n, groups}), em(dt, {l.n, groups});
      Tensor rstd = Tensor::output(dt, {l.n, groups}), er(dt, {l.n, groups});
      ASSERT_TRUE(runKernel("group_norm", {x.view(), scale.view(), bias.view()},
                            {y.view(), mean.view(), rstd.view()},
                            attrsOf({{"channels_per_group", gc.perGroup},
                                     {"epsilon", eps}}))
                      .isOk());
      for (int64_t n = 0; n < l.n; ++n)
        for (int64_t g = 0; g < groups; ++g) {
          double s = 0, q = 0;
          for (int64_t c = g * gc.perGroup; c < (g + 1) * gc.perGroup; ++c)
            for (int64_t k = 0; k < l.s; ++k)
              s += x.get(l.at(n, c, k));
          double mu = s / double(block);
          for (int64_t c = g * gc.perGroup; c < (g + 1) * gc.perGroup; ++c)
            for (int64_t k = 0; k < l.s; ++k)
              q += std::pow(x.get(l.at(n, c, k)) - mu, 2);
          double rs = 1 / std::sqrt(q / double(block) + eps);
          em.set(n * groups + g, mu);
          er.set(n * groups + g, rs);
          for (int64_t c = g * gc.perGroup; c < (g + 1) * gc.perGroup; ++c)
            for (int64_t k = 0; k < l.s; ++k) {
              int64_t i = l.at(n, c, k);
              ey.set(i, (x.get(i) - mu) * rs * scale.get(c) + bias.get(c));
            }
        }
      std::string what = std::string(dtypeName(dt)) + " " + shapeStr(gc.shape) +
                         " per group " + std::to_string(gc.perGroup);
      EXPECT_TRUE(close(y, ey, dt)) << what << " y";
      EXPECT_TRUE(close(mean, em, dt)) << what << " mean";
      // A group of one element per sample has var 0: rstd = 1/sqrt(eps).
      EXPECT_TRUE(close(rstd, er, dt)) << what << " rstd";
    }
}

TEST(CpuNormPoolKernels, GroupNormGradMatchesReference) {
  std::mt19937 rng(107);
  for (DType dt : floatDTypes())
    for (const GroupCase &gc : groupCases()) {
      Nchw l(gc.shape);
      const int64_t groups = l.c / gc.perGroup, block = gc.perGroup * l.s;
      Tensor x = randomTensor(rng, dt, gc.shape, -2, 3);
      Tensor dy = randomTensor(rng, dt, gc.shape, -1, 1);
      Tensor scale = randomTensor(rng, dt, {l.c}, 0.5, 1.5);
      Tensor mean(dt, {l.n, groups}), rstd(dt, {l.n, groups});
      for (int64_t n = 0; n < l.n; ++n)
        for (int64_t g = 0; g < groups; ++g) {
          double s = 0, q = 0;
          for (int64_t c = g * gc.perGroup; c < (g + 1) * gc.perGroup; ++c)
            for (int64_t k = 0; k < l.s; ++k)
              s += x.get(l.at(n, c, k));
          double mu = s / double(block);
          for (int64_t c = g * gc.perGroup; c < (g + 1) * gc.perGroup; ++c)
            for (int64_t k = 0; k < l.s; ++k)
              q += std::pow(x.get(l.at(n, c, k)) - mu, 2);
          mean.set(n * groups + g, mu);
          rstd.set(n * groups + g, 1 / std::sqrt(q / double(block) + 1e-5));
        }
      Tensor dx = Tensor::output(dt, gc.shape), edx(dt, gc.shape);
      Tensor ds = Tensor::output(dt, {l.c}), eds(dt, {l.c});
      Tensor db = Tensor::output(dt, {l.c}), edb(dt, {l.c});
      ASSERT_TRUE(runKernel("group_norm_grad",
                            {x.view(), scale.view(), mean.view(), rstd.view(),
                             dy.view()},
                            {dx.view(), ds.view(), db.view()},
                            attrsOf({{"channels_per_group", gc.perGroup}}))
                      .isOk());
      std::vector<double> sds(l.c, 0), sdb(l.c, 0);
      for (int64_t n = 0; n < l.n; ++n)
        for (int64_t g = 0; g < groups; ++g) {
          const double mu = mean.get(n * groups + g), rs = rstd.get(n * groups + g);
          double mg = 0, mgh = 0;
          for (int64_t c = g * gc.perGroup; c < (g + 1) * gc.perGroup; ++c)
            for (int64_t k = 0; k < l.s; ++k) {
              int64_t i = l.at(n, c, k);
              double h = (x.get(i) - mu) * rs, gv = dy.get(i) * scale.get(c);
              mg += gv / double(block);
              mgh += gv * h / double(block);
              sds[c] += dy.get(i) * h;
              sdb[c] += dy.get(i);
            }
          for (int64_t c = g * gc.perGroup; c < (g + 1) * gc.perGroup; ++c)
            for (int64_t k = 0; k < l.s; ++k) {
              int64_t i = l.at(n, c, k);
              double h = (x.get(i) - mu) * rs;
              edx.set(i, rs * (dy.get(i) * scale.get(c) - mg - h * mgh));
            }
        }
      for (int64_t c = 0; c < l.c; ++c) {
        eds.set(c, sds[c]);
        edb.set(c, sdb[c]);
      }
      std::string what = std::string(dtypeName(dt)) + " " + shapeStr(gc.shape) +
                         " per group " + std::to_string(gc.perGroup);
      auto [r, t] = tol(dt);
      // dx of a one-element group is ~0 from cancelling terms of size
      // rstd = 1/sqrt(eps): compare at that scale there.
      double dxScale = block == 1 ? 1 / std::sqrt(1e-5) : 8;
      EXPECT_TRUE(tensorsClose(dx, edx, r, t * dxScale)) << what << " dx";
      EXPECT_TRUE(tensorsClose(ds, eds, r, t * double(l.n * l.s))) << what << " dscale";
      EXPECT_TRUE(tensorsClose(db, edb, r, t * double(l.n * l.s))) << what << " dbias";
    }
}

//===----------------------------------------------------------------------===//
// pooling
//===----------------------------------------------------------------------===//

struct PoolCase {
  std::vector<int64_t> in, kernel, strides, dilations, low, high;
  bool ceil = false, countPad = false;
};

/// dgraph.max_pool's output size, computed as ONNX's shape inference with
/// PyTorch's ceil-mode rule spelled out separately.
int64_t refOutSize(int64_t in, int64_t k, int64_t s, int64_t d, int64_t lo,
                   int64_t hi, bool ceil) {
  double v = double(in + lo + hi - (k - 1) * d - 1) / double(s);
  int64_t out = int64_t(ceil ? std::ceil(v) : std::floor(v)) + 1;
  if (ceil && (out - 1) * s >= in + lo)
    --out;
  return out;
}

const std::vector<PoolCase> &poolCases() {
  static const std::vector<PoolCase> v = {
      {{2, 3, 8, 8}, {2, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0}},
      {{1, 2, 7, 9}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, false, true},
      {{1, 2, 7, 9}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, true, true},
      {{1, 2, 7, 9}, {3, 2}, {2, 3}, {1, 1}, {0, 1}, {1, 0}, true, false},
      {{2, 2, 11}, {3}, {2}, {2}, {2}, {1}, false, false},
      {{2, 2, 11}, {4}, {3}, {1}, {1}, {2}, true, true},
      {{1, 2, 5, 6, 4}, {2, 3, 2}, {2, 1, 2}, {1, 1, 1}, {1, 0, 0}, {0, 1, 1},
       false, true},
      {{1, 1, 6, 6}, {6, 6}, {1, 1}, {1, 1}, {0, 0}, {0, 0}}, // global
  };
  return v;
}

std::vector<int64_t> outShape(const PoolCase &pc) {
  std::vector<int64_t> out = {pc.in[0], pc.in[1]};
  for (size_t d = 0; d + 2 < pc.in.size(); ++d)
    out.push_back(refOutSize(pc.in[d + 2], pc.kernel[d], pc.strides[d],
                             pc.dilations[d], pc.low[d], pc.high[d], pc.ceil));
  return out;
}

/// max_pool takes no count_include_pad (avg_pool does).
Attrs poolAttrs(const PoolCase &pc, bool average = true) {
  Attrs a = attrsOf({{"kernel", pc.kernel},
                     {"strides", pc.strides},
                     {"dilations", pc.dilations},
                     {"pad_low", pc.low},
                     {"pad_high", pc.high}});
  if (pc.ceil)
    a.set("ceil_mode", int64_t(1));
  if (pc.countPad && average)
    a.set("count_include_pad", int64_t(1));
  return a;
}

/// Calls fn(outPlaneIndex, taps) for every output of a plane, `taps` being
/// the plane positions of its window in window order (-1 for a tap on the
/// explicit padding, -2 beyond it: ceil mode's extra end).
void forEachWindow(const PoolCase &pc,
                   const std::function<void(int64_t, const std::vector<int64_t> &)> &fn) {
  std::vector<int64_t> out = outShape(pc);
  std::vector<int64_t> spatialOut(out.begin() + 2, out.end());
  std::vector<int64_t> spatialIn(pc.in.begin() + 2, pc.in.end());
  int64_t o = 0;
  forEachIndex(spatialOut, [&](const std::vector<int64_t> &oi) {
    std::vector<int64_t> taps;
    forEachIndex(pc.kernel, [&](const std::vector<int64_t> &ki) {
      int64_t pos = 0, state = 0;
      for (size_t d = 0; d < oi.size(); ++d) {
        int64_t i = oi[d] * pc.strides[d] - pc.low[d] + ki[d] * pc.dilations[d];
        if (i < -pc.low[d] || i >= spatialIn[d] + pc.high[d])
          state = -2;
        else if ((i < 0 || i >= spatialIn[d]) && state == 0)
          state = -1;
        pos = pos * spatialIn[d] + std::clamp<int64_t>(i, 0, spatialIn[d] - 1);
      }
      taps.push_back(state < 0 ? state : pos);
    });
    fn(o++, taps);
  });
}

TEST(CpuNormPoolKernels, MaxPoolMatchesReference) {
  std::mt19937 rng(108);
  std::vector<DType> types = floatDTypes();
  types.push_back(DType::kU8);
  types.push_back(DType::kI8);
  for (DType dt : types)
    for (const PoolCase &pc : poolCases()) {
      // Integers with few values: ties are common.
      Tensor x = isFloatDType(dt) ? randomTensor(rng, dt, pc.in, -3, 3)
                                  : randomTensor(rng, dt, pc.in, 0, 5);
      std::vector<int64_t> os = outShape(pc);
      Tensor y = Tensor::output(dt, os), idx = Tensor::output(DType::kI64, os);
      ASSERT_TRUE(runKernel("max_pool", {x.view()}, {y.view(), idx.view()},
                            poolAttrs(pc, false))
                      .isOk())
          << shapeStr(pc.in);
      Tensor ey(dt, os), ei(DType::kI64, os);
      const int64_t inPlane = numelOf(pc.in) / (pc.in[0] * pc.in[1]);
      const int64_t outPlane = numelOf(os) / (os[0] * os[1]);
      for (int64_t plane = 0; plane < pc.in[0] * pc.in[1]; ++plane)
        forEachWindow(pc, [&](int64_t o, const std::vector<int64_t> &taps) {
          double best = -std::numeric_limits<double>::infinity();
          int64_t at = -1;
          for (int64_t t : taps) {
            if (t < 0)
              continue;
            double v = x.get(plane * inPlane + t);
            if (at < 0 || v > best) { // strictly greater: the first maximum
              best = v;
              at = t;
            }
          }
          ey.set(plane * outPlane + o, best);
          ei.setInt(plane * outPlane + o, at);
        });
      std::string what = std::string(dtypeName(dt)) + " " + shapeStr(pc.in);
      EXPECT_TRUE(tensorsClose(y, ey, 0, 0)) << what << " values";
      EXPECT_TRUE(tensorsClose(idx, ei)) << what << " indices";
    }
}

TEST(CpuNormPoolKernels, MaxPoolTiesNaNsAndPadding) {
  // A 1-D plane [1, 1, NaN, NaN, 2] with one padded element on each side,
  // windows of 3 with stride 1.
  PoolCase pc{{1, 1, 5}, {3}, {1}, {1}, {1}, {1}};
  Tensor x(DType::kF32, {1, 1, 5});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double values[] = {1, 1, nan, nan, 2};
  for (int i = 0; i < 5; ++i)
    x.set(i, values[i]);
  Tensor y = Tensor::output(DType::kF32, {1, 1, 5});
  Tensor idx = Tensor::output(DType::kI64, {1, 1, 5});
  ASSERT_TRUE(
      runKernel("max_pool", {x.view()}, {y.view(), idx.view()}, poolAttrs(pc, false)).isOk());
  // Windows: [pad,1,1] -> first 1 (index 0); [1,1,nan] -> nan at 2;
  // [1,nan,nan] -> the last NaN (3); [nan,nan,2] -> 3; [nan,2,pad] -> 3.
  const int64_t expected[] = {0, 2, 3, 3, 3};
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(idx.getInt(i), expected[i]) << "output " << i;
  EXPECT_EQ(y.get(0), 1);
  EXPECT_TRUE(std::isnan(y.get(1)) && std::isnan(y.get(4)));
  // All -inf: the first tap on the input wins, as in PyTorch.
  Tensor m(DType::kF32, {1, 1, 2});
  m.set(0, -INFINITY);
  m.set(1, -INFINITY);
  PoolCase pm{{1, 1, 2}, {2}, {1}, {1}, {0}, {0}};
  Tensor my = Tensor::output(DType::kF32, {1, 1, 1});
  Tensor mi = Tensor::output(DType::kI64, {1, 1, 1});
  ASSERT_TRUE(
      runKernel("max_pool", {m.view()}, {my.view(), mi.view()}, poolAttrs(pm, false)).isOk());
  EXPECT_EQ(mi.getInt(0), 0);
  EXPECT_EQ(my.get(0), -INFINITY);
}

TEST(CpuNormPoolKernels, MaxPoolGradScattersToIndices) {
  std::mt19937 rng(109);
  for (DType dt : floatDTypes())
    for (const PoolCase &pc : poolCases()) {
      Tensor x = randomTensor(rng, dt, pc.in, -3, 3);
      std::vector<int64_t> os = outShape(pc);
      Tensor y = Tensor::output(dt, os), idx = Tensor::output(DType::kI64, os);
      ASSERT_TRUE(runKernel("max_pool", {x.view()}, {y.view(), idx.view()},
                            poolAttrs(pc, false))
                      .isOk());
      Tensor dy = randomTensor(rng, dt, os, -1, 1);
      Tensor dx = Tensor::output(dt, pc.in);
      ASSERT_TRUE(
          runKernel("max_pool_grad", {dy.view(), idx.view()}, {dx.view()}).isOk());
      std::vector<double> acc(numelOf(pc.in), 0);
      const int64_t inPlane = numelOf(pc.in) / (pc.in[0] * pc.in[1]);
      const int64_t outPlane = numelOf(os) / (os[0] * os[1]);
      for (int64_t o = 0; o < dy.numel(); ++o)
        acc[(o / outPlane) * inPlane + idx.getInt(o)] += dy.get(o);
      Tensor edx(dt, pc.in);
      for (int64_t i = 0; i < edx.numel(); ++i)
        edx.set(i, acc[i]);
      EXPECT_TRUE(close(dx, edx, dt)) << dtypeName(dt) << " " << shapeStr(pc.in);
    }
  // An index past the plane is a run-time error naming the node.
  Tensor dy(DType::kF32, {1, 1, 2}), idx(DType::kI64, {1, 1, 2});
  idx.setInt(1, 4);
  Tensor dx = Tensor::output(DType::kF32, {1, 1, 4});
  Status s = runKernel("max_pool_grad", {dy.view(), idx.view()}, {dx.view()});
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("node_max_pool_grad"), std::string::npos) << s.toString();
}

TEST(CpuNormPoolKernels, AvgPoolAndGradMatchReference) {
  std::mt19937 rng(110);
  for (DType dt : floatDTypes())
    for (const PoolCase &pc : poolCases()) {
      Tensor x = randomTensor(rng, dt, pc.in, -3, 3);
      std::vector<int64_t> os = outShape(pc);
      Tensor y = Tensor::output(dt, os), ey(dt, os);
      ASSERT_TRUE(runKernel("avg_pool", {x.view()}, {y.view()}, poolAttrs(pc)).isOk());
      Tensor dy = randomTensor(rng, dt, os, -1, 1);
      Tensor dx = Tensor::output(dt, pc.in);
      ASSERT_TRUE(
          runKernel("avg_pool_grad", {dy.view()}, {dx.view()}, poolAttrs(pc)).isOk());
      std::vector<double> acc(numelOf(pc.in), 0);
      const int64_t inPlane = numelOf(pc.in) / (pc.in[0] * pc.in[1]);
      const int64_t outPlane = numelOf(os) / (os[0] * os[1]);
      for (int64_t plane = 0; plane < pc.in[0] * pc.in[1]; ++plane)
        forEachWindow(pc, [&](int64_t o, const std::vector<int64_t> &taps) {
          // PyTorch: the divisor counts the explicit padding with
          // count_include_pad, never ceil mode's extra end.
          double sum = 0;
          int64_t onInput = 0, onPadded = 0;
          for (int64_t t : taps) {
            onPadded += t >= -1;
            if (t >= 0) {
              sum += x.get(plane * inPlane + t);
              ++onInput;
            }
          }
          double div = double(pc.countPad ? onPadded : onInput);
          ey.set(plane * outPlane + o, sum / div);
          for (int64_t t : taps)
            if (t >= 0)
              acc[plane * inPlane + t] += dy.get(plane * outPlane + o) / div;
        });
      Tensor edx(dt, pc.in);
      for (int64_t i = 0; i < edx.numel(); ++i)
        edx.set(i, acc[i]);
      std::string what = std::string(dtypeName(dt)) + " " + shapeStr(pc.in);
      EXPECT_TRUE(close(y, ey, dt)) << what << " y";
      EXPECT_TRUE(close(dx, edx, dt)) << what << " dx";
    }
}

//===----------------------------------------------------------------------===//
// factory checks
//===----------------------------------------------------------------------===//

TEST(CpuNormPoolKernels, FactoriesRejectBadInstructions) {
  Tensor x(DType::kF32, {2, 3, 4}), c3(DType::kF32, {3}), c4(DType::kF32, {4});
  Tensor s23(DType::kF32, {2, 3}), y(DType::kF32, {2, 3, 4});
  // A shift of the wrong size; stats of the wrong shape.
  Status s = runKernel("batch_norm_stats", {x.view(), c4.view()}, {s23.view()});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("shift"), std::string::npos) << s.toString();
  EXPECT_FALSE(runKernel("batch_norm_stats", {x.view(), c3.view()}, {c3.view()}).isOk());
  // batch_norm without epsilon; with a negative one.
  s = runKernel("batch_norm", {x.view(), c3.view(), c3.view(), c3.view(), c3.view()},
                {y.view()});
  EXPECT_NE(s.message().find("epsilon"), std::string::npos) << s.toString();
  EXPECT_FALSE(runKernel("batch_norm",
                         {x.view(), c3.view(), c3.view(), c3.view(), c3.view()},
                         {y.view()}, attrsOf({{"epsilon", -1.0}}))
                   .isOk());
  // Integer batch norm.
  Tensor xi(DType::kI32, {2, 3, 4}), ci(DType::kI32, {3}), si(DType::kI32, {2, 3});
  EXPECT_FALSE(runKernel("batch_norm_stats", {xi.view(), ci.view()}, {si.view()}).isOk());
  // batch_norm_grad's count.
  EXPECT_FALSE(runKernel("batch_norm_grad",
                         {x.view(), y.view(), c3.view(), c3.view(), c3.view(),
                          s23.view()},
                         {y.view()}, attrsOf({{"epsilon", 1e-5}, {"count", int64_t(0)}}))
                   .isOk());
  // A momentum outside [0, 1].
  Tensor o1(DType::kF32, {3}), o2(DType::kF32, {3});
  EXPECT_FALSE(runKernel("batch_norm_update",
                         {c3.view(), c3.view(), c3.view(), c3.view()},
                         {o1.view(), o2.view()},
                         attrsOf({{"momentum", 2.0}, {"var_scale", 1.0}}))
                   .isOk());
  // Groups that do not divide the channels.
  Tensor gm(DType::kF32, {2, 1});
  s = runKernel("group_norm", {x.view(), c3.view(), c3.view()},
                {y.view(), gm.view(), gm.view()},
                attrsOf({{"channels_per_group", int64_t(2)}, {"epsilon", 1e-5}}));
  EXPECT_NE(s.message().find("channels_per_group"), std::string::npos) << s.toString();
  // A pooled output of the wrong shape; a window attribute of the wrong
  // size; integer average pooling.
  PoolCase pc{{2, 3, 4}, {2}, {2}, {1}, {0}, {0}};
  Tensor p3(DType::kF32, {2, 3, 3}), i3(DType::kI64, {2, 3, 3});
  s = runKernel("max_pool", {x.view()}, {p3.view(), i3.view()}, poolAttrs(pc, false));
  EXPECT_NE(s.message().find("expected the pooled tensor of shape [2, 3, 2]"),
            std::string::npos)
      << s.toString();
  Attrs bad = poolAttrs(pc);
  bad.set("strides", std::vector<int64_t>{2, 2});
  Tensor p2(DType::kF32, {2, 3, 2}), i2(DType::kI64, {2, 3, 2});
  EXPECT_FALSE(runKernel("max_pool", {x.view()}, {p2.view(), i2.view()}, bad).isOk());
  Tensor pi(DType::kI32, {2, 3, 2});
  EXPECT_FALSE(runKernel("avg_pool", {xi.view()}, {pi.view()}, poolAttrs(pc)).isOk());
  // Indices that are not i64.
  Tensor i32(DType::kI32, {2, 3, 2});
  EXPECT_FALSE(runKernel("max_pool_grad", {p2.view(), i32.view()}, {x.view()}).isOk());
}

TEST(CpuNormPoolKernels, RegistryHasEveryNormPoolKernel) {
  std::set<std::string> names;
  for (const std::string &n : cpuRegistry().names())
    names.insert(n);
  for (const char *name :
       {"batch_norm_stats", "batch_norm", "batch_norm_update",
        "batch_norm_grad_stats", "batch_norm_grad", "group_norm",
        "group_norm_grad", "max_pool", "max_pool_grad", "avg_pool",
        "avg_pool_grad"})
    EXPECT_TRUE(names.count(name)) << name;
}

} // namespace
} // namespace dtcc::runtime::test
