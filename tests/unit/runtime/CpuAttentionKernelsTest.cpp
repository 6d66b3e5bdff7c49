//===- CpuAttentionKernelsTest.cpp - attention and attention_grad ---------===//
//
// The tiled attention kernels against a naive f64 reference that builds the
// whole score matrix (softmax(scale Q·Kᵀ + mask) · V and its gradients by
// the chain rule), causal and not, with broadcast and full masks, at sizes
// that are not multiples of the tile; the gradients also against central
// differences of the forward kernel (f64).
//
//===----------------------------------------------------------------------===//

#include "tests/unit/runtime/CpuKernelTestUtils.h"

#include <chrono>
#include <cmath>
#include <limits>

using namespace dtcc::runtime;
using namespace dtcc::runtime::test;

namespace {

struct Case {
  std::vector<int64_t> lead; ///< batch, heads
  int64_t sq, sk, d, dv;
  bool causal;
  /// The mask's shape (empty: none): each dimension 1 or the scores'.
  std::vector<int64_t> mask;
};

std::vector<int64_t> withTail(std::vector<int64_t> lead,
                              std::initializer_list<int64_t> tail) {
  lead.insert(lead.end(), tail);
  return lead;
}

/// The reference: every score, in f64.
struct Reference {
  std::vector<double> out, lse, dq, dk, dv;
};

Reference reference(const Case &c, const Tensor &q, const Tensor &k,
                    const Tensor &v, const Tensor *mask, const Tensor *dout,
                    double scale) {
  int64_t batch = 1;
  for (int64_t x : c.lead)
    batch *= x;
  std::vector<int64_t> scoreShape = withTail(c.lead, {c.sq, c.sk});
  Reference r;
  r.out.assign(batch * c.sq * c.dv, 0);
  r.lse.assign(batch * c.sq, 0);
  r.dq.assign(batch * c.sq * c.d, 0);
  r.dk.assign(batch * c.sk * c.d, 0);
  r.dv.assign(batch * c.sk * c.dv, 0);
  std::vector<double> p(c.sq * c.sk), dp(c.sq * c.sk);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < c.sq; ++i) {
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < c.sk; ++j) {
        double s = 0;
        for (int64_t e = 0; e < c.d; ++e)
          s += q.get((b * c.sq + i) * c.d + e) * k.get((b * c.sk + j) * c.d + e);
        s *= scale;
        if (mask) {
          // The mask's element for scores index (b..., i, j), broadcast.
          std::vector<int64_t> idx;
          int64_t rest = b;
          for (int64_t x = int64_t(c.lead.size()) - 1; x >= 0; --x) {
            idx.insert(idx.begin(), rest % c.lead[x]);
            rest /= c.lead[x];
          }
          idx.push_back(i);
          idx.push_back(j);
          int64_t off = 0;
          for (size_t x = 0; x < idx.size(); ++x)
            off = off * c.mask[x] + (c.mask[x] == 1 ? 0 : idx[x]);
          s += mask->get(off);
        }
        if (c.causal && j > i)
          s = -std::numeric_limits<double>::infinity();
        p[i * c.sk + j] = s;
        mx = std::max(mx, s);
      }
      double sum = 0;
      for (int64_t j = 0; j < c.sk; ++j)
        sum += std::exp(p[i * c.sk + j] - mx);
      r.lse[b * c.sq + i] = mx + std::log(sum);
      for (int64_t j = 0; j < c.sk; ++j)
        p[i * c.sk + j] = std::exp(p[i * c.sk + j] - mx) / sum;
      for (int64_t e = 0; e < c.dv; ++e) {
        double o = 0;
        for (int64_t j = 0; j < c.sk; ++j)
          o += p[i * c.sk + j] * v.get((b * c.sk + j) * c.dv + e);
        r.out[(b * c.sq + i) * c.dv + e] = o;
      }
    }
    if (!dout)
      continue;
    // dV = Pᵀ dO; dP = dO Vᵀ; dS = P (dP - rowsum(dP P)); dQ = s dS K ...
    for (int64_t i = 0; i < c.sq; ++i) {
      double dot = 0;
      for (int64_t j = 0; j < c.sk; ++j) {
        double x = 0;
        for (int64_t e = 0; e < c.dv; ++e)
          x += dout->get((b * c.sq + i) * c.dv + e) *
               v.get((b * c.sk + j) * c.dv + e);
        dp[i * c.sk + j] = x;
        dot += x * p[i * c.sk + j];
      }
      for (int64_t j = 0; j < c.sk; ++j) {
        const double pij = p[i * c.sk + j];
        const double ds = pij * (dp[i * c.sk + j] - dot) * scale;
        for (int64_t e = 0; e < c.dv; ++e)
          r.dv[(b * c.sk + j) * c.dv + e] +=
              pij * dout->get((b * c.sq + i) * c.dv + e);
        for (int64_t e = 0; e < c.d; ++e) {
          r.dq[(b * c.sq + i) * c.d + e] += ds * k.get((b * c.sk + j) * c.d + e);
          r.dk[(b * c.sk + j) * c.d + e] += ds * q.get((b * c.sq + i) * c.d + e);
        }
      }
    }
  }
  return r;
}

Tensor fromValues(DType dtype, std::vector<int64_t> shape,
                  const std::vector<double> &values) {
  Tensor t(dtype, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i)
    t.set(i, values[i]);
  return t;
}

Attrs attentionAttrs(double scale, bool causal) {
  Attrs a;
  a.set("scale", scale);
  if (causal)
    a.set("causal", int64_t(1));
  return a;
}

const std::vector<Case> &cases() {
  static const std::vector<Case> all = {
      {{1}, 5, 5, 3, 3, false, {}},
      {{2, 3}, 70, 70, 16, 16, true, {}},        // crosses a tile, causal
      {{2}, 67, 130, 8, 5, false, {}},           // Sq != Sk, odd sizes
      {{2, 2}, 65, 65, 12, 12, false, {1, 1, 65, 65}}, // a broadcast mask
      {{2, 2}, 33, 40, 4, 6, false, {2, 1, 1, 40}},    // a padding mask
      {{3}, 129, 129, 8, 8, true, {3, 129, 129}},      // causal + a full mask
  };
  return all;
}

/// Runs the forward and backward kernels for `c` in `dtype` and compares
/// them with the f64 reference.
void checkCase(const Case &c, DType dtype, double rtol, double atol) {
  SCOPED_TRACE("lead " + shapeStr(c.lead) + " sq " + std::to_string(c.sq) +
               " sk " + std::to_string(c.sk) + " d " + std::to_string(c.d) +
               " dv " + std::to_string(c.dv) +
               (c.causal ? " causal" : "") + " mask " + shapeStr(c.mask) +
               " " + dtypeName(dtype));
  std::mt19937 rng(7);
  Tensor q = randomTensor(rng, dtype, withTail(c.lead, {c.sq, c.d}));
  Tensor k = randomTensor(rng, dtype, withTail(c.lead, {c.sk, c.d}));
  Tensor v = randomTensor(rng, dtype, withTail(c.lead, {c.sk, c.dv}));
  Tensor dout = randomTensor(rng, dtype, withTail(c.lead, {c.sq, c.dv}));
  Tensor mask;
  if (!c.mask.empty()) {
    mask = randomTensor(rng, dtype, c.mask, -3, 1);
    // Some keys masked out entirely, as padding is (never a whole row).
    for (int64_t i = 0; i < mask.numel(); i += 3)
      mask.set(i, -1e9);
    if (c.mask.back() > 1)
      for (int64_t i = 0; i < mask.numel(); i += c.mask.back())
        mask.set(i, 0.5);
  }
  const double scale = 1 / std::sqrt(double(c.d));
  Attrs attrs = attentionAttrs(scale, c.causal);
  Tensor out = Tensor::output(dtype, withTail(c.lead, {c.sq, c.dv}));
  Tensor lse = Tensor::output(DType::kF32, withTail(c.lead, {c.sq}));
  std::vector<TensorView> ins = {q.view(), k.view(), v.view()};
  if (!c.mask.empty())
    ins.push_back(mask.view());
  Status s = runKernel("attention", ins, {out.view(), lse.view()}, attrs);
  ASSERT_TRUE(s.isOk()) << s.message();
  Reference r = reference(c, q, k, v, c.mask.empty() ? nullptr : &mask,
                          &dout, scale);
  EXPECT_TRUE(tensorsClose(out, fromValues(dtype, out.shape, r.out), rtol, atol));
  EXPECT_TRUE(tensorsClose(lse, fromValues(DType::kF32, lse.shape, r.lse),
                           1e-5, 1e-5));
  Tensor dq = Tensor::output(dtype, q.shape), dk = Tensor::output(dtype, k.shape),
         dv = Tensor::output(dtype, v.shape);
  std::vector<TensorView> gins = {q.view(),   k.view(),   v.view(),
                                  out.view(), lse.view(), dout.view()};
  if (!c.mask.empty())
    gins.push_back(mask.view());
  s = runKernel("attention_grad", gins, {dq.view(), dk.view(), dv.view()},
                attrs);
  ASSERT_TRUE(s.isOk()) << s.message();
  EXPECT_TRUE(tensorsClose(dq, fromValues(dtype, dq.shape, r.dq), rtol, atol));
  EXPECT_TRUE(tensorsClose(dk, fromValues(dtype, dk.shape, r.dk), rtol, atol));
  EXPECT_TRUE(tensorsClose(dv, fromValues(dtype, dv.shape, r.dv), rtol, atol));
}

TEST(CpuAttentionKernels, MatchTheNaiveReferenceF32) {
  for (const Case &c : cases())
    checkCase(c, DType::kF32, 2e-4, 2e-5);
}

TEST(CpuAttentionKernels, MatchTheNaiveReferenceF64) {
  // The log-sum-exp is f32 (the op's type): the probabilities the backward
  // recomputes from it carry its rounding (~4e-7 relative).
  for (const Case &c : cases())
    checkCase(c, DType::kF64, 1e-5, 2e-6);
}

TEST(CpuAttentionKernels, MatchTheNaiveReferenceInHalfTypes) {
  // bf16 and f16 compute in f32 and round each output once: the reference
  // runs on the same rounded inputs, so the error is the outputs' rounding
  // (2^-8 and 2^-11 relative) plus f32's.
  for (const Case &c : cases()) {
    checkCase(c, DType::kBF16, 1e-2, 1e-2);
    checkCase(c, DType::kF16, 2e-3, 2e-3);
  }
}

/// The gradients are those of the forward kernel: central differences of
/// sum(out * w) with respect to every element of Q, K and V (f64).
TEST(CpuAttentionKernels, GradientsMatchFiniteDifferences) {
  for (bool causal : {false, true}) {
    Case c{{2}, 7, 7, 3, 4, causal, {1, 7, 7}};
    SCOPED_TRACE(causal ? "causal" : "not causal");
    std::mt19937 rng(11);
    const DType f64 = DType::kF64;
    Tensor q = randomTensor(rng, f64, {2, 7, 3});
    Tensor k = randomTensor(rng, f64, {2, 7, 3});
    Tensor v = randomTensor(rng, f64, {2, 7, 4});
    Tensor w = randomTensor(rng, f64, {2, 7, 4});
    Tensor mask = randomTensor(rng, f64, {1, 7, 7}, -1, 1);
    const double scale = 0.7;
    Attrs attrs = attentionAttrs(scale, causal);
    Tensor out = Tensor::output(f64, {2, 7, 4});
    Tensor lse = Tensor::output(DType::kF32, {2, 7});
    auto loss = [&]() {
      EXPECT_TRUE(runKernel("attention",
                            {q.view(), k.view(), v.view(), mask.view()},
                            {out.view(), lse.view()}, attrs)
                      .isOk());
      double sum = 0;
      for (int64_t i = 0; i < out.numel(); ++i)
        sum += out.get(i) * w.get(i);
      return sum;
    };
    loss();
    Tensor dq = Tensor::output(f64, q.shape), dk = Tensor::output(f64, k.shape),
           dv = Tensor::output(f64, v.shape);
    ASSERT_TRUE(runKernel("attention_grad",
                          {q.view(), k.view(), v.view(), out.view(), lse.view(),
                           w.view(), mask.view()},
                          {dq.view(), dk.view(), dv.view()}, attrs)
                    .isOk());
    for (auto [t, g] : {std::pair{&q, &dq}, {&k, &dk}, {&v, &dv}}) {
      std::vector<double> numeric(t->numel());
      for (int64_t i = 0; i < t->numel(); ++i) {
        const double x = t->get(i), h = 1e-5;
        t->set(i, x + h);
        const double up = loss();
        t->set(i, x - h);
        const double down = loss();
        t->set(i, x);
        numeric[i] = (up - down) / (2 * h);
      }
      // The forward's log-sum-exp is f32, which the backward reads back.
      EXPECT_TRUE(tensorsClose(*g, fromValues(f64, g->shape, numeric), 1e-5,
                               1e-6));
    }
  }
}

TEST(CpuAttentionKernels, RejectBadOperands) {
  Tensor q(DType::kF32, {2, 4, 8}), k(DType::kF32, {2, 5, 8}),
      v(DType::kF32, {2, 5, 3});
  Tensor out(DType::kF32, {2, 4, 3}), lse(DType::kF32, {2, 4});
  Status s = runKernel("attention", {q.view(), k.view(), v.view()},
                       {out.view(), lse.view()}, attentionAttrs(1, true));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("causal attention expects as many queries as "
                             "keys, got 4 and 5"),
            std::string::npos)
      << s.message();
  Tensor bad(DType::kF32, {2, 3, 5});
  s = runKernel("attention", {q.view(), k.view(), v.view(), bad.view()},
                {out.view(), lse.view()}, attentionAttrs(1, false));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("expected mask dimension 1 to be 1 or 4"),
            std::string::npos)
      << s.message();
  Tensor v2(DType::kF32, {2, 6, 3});
  s = runKernel("attention", {q.view(), k.view(), v2.view()},
                {out.view(), lse.view()}, attentionAttrs(1, false));
  EXPECT_FALSE(s.isOk());
}

} // namespace

#include "runtime/device/cpu/Bf16Dot.h"

namespace {

/// A bf16 of `rng`'s choosing: mostly ordinary values over a wide range of
/// magnitudes, some zeros, and some whose products or sums are f32
/// subnormals (which the instruction flushes).
uint16_t randomBf16(std::mt19937 &rng) {
  std::uniform_int_distribution<int> kind(0, 15), exponent(-20, 20);
  std::uniform_real_distribution<float> mantissa(-1, 1);
  float value = std::ldexp(mantissa(rng), exponent(rng));
  switch (kind(rng)) {
  case 0:
    value = 0;
    break;
  case 1:
    value = std::ldexp(mantissa(rng), -64); // squares near the subnormals
    break;
  case 2:
    value = std::ldexp(mantissa(rng), -126);
    break;
  default:
    break;
  }
  return floatToBf16(value);
}

} // namespace

// The attention kernels' bf16 products (AVX512-BF16's dot product) are
// bitwise their scalar reference, which spells out the instruction's order
// of operations, on blocks of every shape class the kernels use (rows and
// columns past a multiple of 4 and 16, more than 64 columns, strides wider
// than the block), accumulating and not.
TEST(CpuAttentionKernels, Bf16DotIsBitwiseItsReference) {
  if (!cpu::cpuHasAvx512Bf16())
    GTEST_SKIP() << "this CPU has no AVX512-BF16";
  std::mt19937 rng(5);
  for (int64_t rows : {1, 3, 4, 7, 64})
    for (int64_t cols : {1, 15, 16, 33, 64, 100})
      for (int64_t kp : {1, 2, 19, 32})
        for (bool accumulate : {false, true}) {
          const int64_t lda = kp + 3, ldb = cols + 5, ldc = cols + 2;
          std::vector<uint32_t> a(rows * lda), b(kp * ldb);
          for (uint32_t &x : a)
            x = cpu::bf16Pair(randomBf16(rng), randomBf16(rng));
          for (uint32_t &x : b)
            x = cpu::bf16Pair(randomBf16(rng), randomBf16(rng));
          std::vector<float> c(rows * ldc);
          for (float &x : c)
            x = bf16ToFloat(randomBf16(rng));
          std::vector<float> want = c;
          cpu::bf16Dot(rows, cols, kp, a.data(), lda, b.data(), ldb, c.data(),
                       ldc, accumulate);
          cpu::bf16DotReference(rows, cols, kp, a.data(), lda, b.data(), ldb,
                                want.data(), ldc, accumulate);
          SCOPED_TRACE("rows " + std::to_string(rows) + " cols " +
                       std::to_string(cols) + " kp " + std::to_string(kp) +
                       (accumulate ? " accumulate" : ""));
          ASSERT_EQ(std::memcmp(c.data(), want.data(), c.size() * 4), 0);
        }
}
