//===- CpuAttentionKernelsTest.cpp - attention and attention_grad ---------===//
//
// The tiled attention kernels against a naive f64 reference that builds the
// whole score matrix (softmax(scale Q·Kᵀ + mask) · V and its gradients by
// the chain rule), causal and not, with broadcast and full masks, at sizes
// that are not multiples of the tile; the gradients also against central
// differences of the forward kernel (f64).
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/AttentionPlan.h"
#include "runtime/device/cpu/TileProduct.h"
#include "tests/unit/runtime/CpuKernelTestUtils.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <memory>

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

/// Whether two tensors of one type and shape hold the same bits.
bool sameBits(const Tensor &a, const Tensor &b) {
  return a.numel() == b.numel() &&
         std::memcmp(a.data(), b.data(), a.numel() * dtypeSize(a.dtype)) ==
             0;
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
      {{2, 3}, 70, 70, 16, 16, true, {}},              // crosses a tile, causal
      {{2}, 67, 130, 8, 5, false, {}},                 // Sq != Sk, odd sizes
      {{2, 2}, 65, 65, 12, 12, false, {1, 1, 65, 65}}, // a broadcast mask
      {{2, 2}, 33, 40, 4, 6, false, {2, 1, 1, 40}},    // a padding mask
      {{3}, 129, 129, 8, 8, true, {3, 129, 129}},      // causal + a full mask
      // Heads wide enough for the packing's 16 x 16 blocks, with tails.
      {{2}, 83, 97, 40, 34, false, {}},
      {{1}, 100, 100, 64, 64, true, {}},
      // Heads wider than a tile product's panel of 64 columns.
      {{2}, 45, 45, 80, 72, true, {}},
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
  const DType lseType = cpu::logsumexpDType(dtype);
  Tensor lse = Tensor::output(lseType, withTail(c.lead, {c.sq}));
  std::vector<TensorView> ins = {q.view(), k.view(), v.view()};
  if (!c.mask.empty())
    ins.push_back(mask.view());
  Status s = runKernel("attention", ins, {out.view(), lse.view()}, attrs);
  ASSERT_TRUE(s.isOk()) << s.message();
  Reference r = reference(c, q, k, v, c.mask.empty() ? nullptr : &mask,
                          &dout, scale);
  EXPECT_TRUE(tensorsClose(out, fromValues(dtype, out.shape, r.out), rtol, atol));
  EXPECT_TRUE(tensorsClose(lse, fromValues(lseType, lse.shape, r.lse),
                           lseType == DType::kF64 ? rtol : 1e-5,
                           lseType == DType::kF64 ? atol : 1e-5));
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
  // The log-sum-exp is f64 too: the probabilities the backward recomputes
  // from it are the forward's to f64's rounding (with an f32 log-sum-exp
  // they carried its ~4e-7, and this test allowed 1e-5).
  for (const Case &c : cases())
    checkCase(c, DType::kF64, 1e-11, 1e-12);
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
    Tensor lse = Tensor::output(cpu::logsumexpDType(f64), {2, 7});
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

//===-- Strided rows: views of transposed and packed storage --------------===//

/// A [B, S, width] buffer holding operands [B, H, S, X] as views, each from
/// its column on with its heads side by side, as a [B, S, H, X] projection
/// (or a packed [B, S, 3 H X] one) holds them. What no view covers keeps
/// Tensor::output's pattern: a kernel must not write there.
struct RowBuffer {
  Tensor storage;
  int64_t seq, width;

  RowBuffer(DType dtype, int64_t batch, int64_t seq, int64_t width)
      : storage(Tensor::output(dtype, {batch, seq, width})), seq(seq),
        width(width) {}

  /// The operand of `shape` [B, H, S, X] at `column`.
  TensorView view(const std::vector<int64_t> &shape, int64_t column) {
    TensorView v;
    v.data = storage.bytes() + column * dtypeSize(storage.dtype);
    v.dtype = storage.dtype;
    v.shape = shape;
    v.strides = {seq * width, shape[3], width, 1};
    return v;
  }
  /// The element of `storage` that is element i of the contiguous operand.
  int64_t position(const std::vector<int64_t> &shape, int64_t column,
                   int64_t i) const {
    const int64_t heads = shape[1], s = shape[2], x = shape[3];
    const int64_t e = i % x, si = i / x % s, h = i / x / s % heads,
                  b = i / x / s / heads;
    return (b * seq + si) * width + column + h * x + e;
  }
  /// Copies the contiguous `t` into its view at `column`.
  void place(const Tensor &t, int64_t column) {
    const int64_t size = dtypeSize(t.dtype);
    for (int64_t i = 0; i < t.numel(); ++i)
      std::memcpy(storage.bytes() + position(t.shape, column, i) * size,
                  t.bytes() + i * size, size);
  }
};

/// An operand's place: a buffer and a column.
struct Placed {
  RowBuffer *buffer;
  int64_t column;
  TensorView view(const std::vector<int64_t> &shape) const {
    return buffer->view(shape, column);
  }
};

/// Every element of the contiguous `want` at its place, bitwise; marks the
/// places in `covered` (one flag per element of the buffer).
::testing::AssertionResult sameBits(const Placed &at, const Tensor &want,
                                    std::vector<char> &covered) {
  const int64_t size = dtypeSize(want.dtype);
  const Tensor &got = at.buffer->storage;
  covered.resize(got.numel(), 0);
  int64_t failures = 0, first = -1;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const int64_t pos = at.buffer->position(want.shape, at.column, i);
    covered[pos] = 1;
    if (std::memcmp(got.bytes() + pos * size, want.bytes() + i * size, size)) {
      if (first < 0)
        first = i;
      ++failures;
    }
  }
  if (!failures)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << failures << " of " << want.numel()
         << " elements differ from the contiguous run's, the first " << first
         << ": got "
         << got.get(at.buffer->position(want.shape, at.column, first))
         << ", expected " << want.get(first);
}

/// The buffer's elements that no view covers hold Tensor::output's pattern.
::testing::AssertionResult gapsUntouched(const RowBuffer &buffer,
                                         const std::vector<char> &covered) {
  const Tensor &t = buffer.storage;
  const int64_t size = dtypeSize(t.dtype);
  int64_t gaps = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (covered[i])
      continue;
    ++gaps;
    for (int64_t byte = 0; byte < size; ++byte)
      if (uint8_t(t.bytes()[i * size + byte]) != 0xA5)
        return ::testing::AssertionFailure()
               << "element " << i << " of a [" << t.shape[0] << ", "
               << buffer.seq << ", " << buffer.width
               << "] buffer is outside every view but was written";
  }
  return ::testing::AssertionSuccess() << gaps << " gaps";
}

/// Runs attention and attention_grad on the contiguous operands of `c`
/// (lead {B, H}) and again on strided views of the same values, and
/// expects the views' results bitwise the contiguous ones and nothing
/// written outside them. `packed`: Q, K and V are slices of one packed
/// projection [B, S, H (2 D + Dv)] (K and V only where Sq != Sk), O a
/// transposed view of [B, S, H Dv] storage with padding after each row, and
/// dQ, dK and dV slices of one padded packed buffer. Otherwise every
/// operand is a transposed view of its own [B, S, H X] storage, O the
/// middle third of a [B, S, 3 H Dv] buffer and each gradient a view from
/// column 1 of a buffer one wider than its rows.
void checkStridedRows(const Case &c, DType dtype, bool packed) {
  SCOPED_TRACE("lead " + shapeStr(c.lead) + " sq " + std::to_string(c.sq) +
               " sk " + std::to_string(c.sk) + " d " + std::to_string(c.d) +
               " dv " + std::to_string(c.dv) + (c.causal ? " causal" : "") +
               " mask " + shapeStr(c.mask) + " " + dtypeName(dtype) +
               (packed ? " packed" : " transposed"));
  const int64_t batch = c.lead[0], heads = c.lead[1];
  const int64_t hd = heads * c.d, hdv = heads * c.dv;
  std::mt19937 rng(13);
  const std::vector<int64_t> qShape = withTail(c.lead, {c.sq, c.d}),
                             kShape = withTail(c.lead, {c.sk, c.d}),
                             vShape = withTail(c.lead, {c.sk, c.dv}),
                             oShape = withTail(c.lead, {c.sq, c.dv});
  Tensor q = randomTensor(rng, dtype, qShape);
  Tensor k = randomTensor(rng, dtype, kShape);
  Tensor v = randomTensor(rng, dtype, vShape);
  Tensor dout = randomTensor(rng, dtype, oShape);
  Tensor mask;
  if (!c.mask.empty()) {
    mask = randomTensor(rng, dtype, c.mask, -3, 1);
    for (int64_t i = 0; i < mask.numel(); i += 3)
      mask.set(i, -1e9);
    if (c.mask.back() > 1)
      for (int64_t i = 0; i < mask.numel(); i += c.mask.back())
        mask.set(i, 0.5);
  }
  const Attrs attrs = attentionAttrs(1 / std::sqrt(double(c.d)), c.causal);

  // The contiguous run.
  Tensor out = Tensor::output(dtype, oShape);
  Tensor lse =
      Tensor::output(cpu::logsumexpDType(dtype), withTail(c.lead, {c.sq}));
  std::vector<TensorView> ins = {q.view(), k.view(), v.view()};
  if (!c.mask.empty())
    ins.push_back(mask.view());
  Status s = runKernel("attention", ins, {out.view(), lse.view()}, attrs);
  ASSERT_TRUE(s.isOk()) << s.message();
  Tensor dq = Tensor::output(dtype, qShape), dk = Tensor::output(dtype, kShape),
         dv = Tensor::output(dtype, vShape);
  std::vector<TensorView> gins = {q.view(),   k.view(),   v.view(),
                                  out.view(), lse.view(), dout.view()};
  if (!c.mask.empty())
    gins.push_back(mask.view());
  s = runKernel("attention_grad", gins, {dq.view(), dk.view(), dv.view()},
                attrs);
  ASSERT_TRUE(s.isOk()) << s.message();

  // The same values in views. Buffers are made up front: views point into
  // them.
  std::vector<std::unique_ptr<RowBuffer>> buffers;
  auto buffer = [&](int64_t seq, int64_t width) {
    buffers.push_back(std::make_unique<RowBuffer>(dtype, batch, seq, width));
    return buffers.back().get();
  };
  Placed pq, pk, pv, po, pdo, pdq, pdk, pdv;
  if (packed) {
    const bool shared = c.sq == c.sk;
    RowBuffer *kv = buffer(c.sk, (shared ? hd : 0) + hd + hdv);
    RowBuffer *qb = shared ? kv : buffer(c.sq, hd);
    const int64_t k0 = shared ? hd : 0;
    pq = {qb, 0};
    pk = {kv, k0};
    pv = {kv, k0 + hd};
    po = {buffer(c.sq, hdv + 3), 0};
    pdo = {buffer(c.sq, hdv), 0};
    RowBuffer *grads = buffer(c.sk, (shared ? hd : 0) + hd + hdv + 2);
    RowBuffer *dqb = shared ? grads : buffer(c.sq, hd + 2);
    pdq = {dqb, 0};
    pdk = {grads, k0};
    pdv = {grads, k0 + hd};
  } else {
    pq = {buffer(c.sq, hd), 0};
    pk = {buffer(c.sk, hd), 0};
    pv = {buffer(c.sk, hdv), 0};
    po = {buffer(c.sq, 3 * hdv), hdv};
    pdo = {buffer(c.sq, hdv), 0};
    pdq = {buffer(c.sq, hd + 1), 1};
    pdk = {buffer(c.sk, hd + 1), 1};
    pdv = {buffer(c.sk, hdv + 1), 1};
  }
  pq.buffer->place(q, pq.column);
  pk.buffer->place(k, pk.column);
  pv.buffer->place(v, pv.column);
  pdo.buffer->place(dout, pdo.column);

  Tensor lse2 = Tensor::output(lse.dtype, lse.shape);
  ins = {pq.view(qShape), pk.view(kShape), pv.view(vShape)};
  if (!c.mask.empty())
    ins.push_back(mask.view());
  s = runKernel("attention", ins, {po.view(oShape), lse2.view()}, attrs);
  ASSERT_TRUE(s.isOk()) << s.message();
  std::vector<char> oCovered;
  EXPECT_TRUE(sameBits(po, out, oCovered));
  EXPECT_TRUE(gapsUntouched(*po.buffer, oCovered));
  EXPECT_TRUE(sameBits(lse, lse2));

  // The gradient reads O from the forward's view.
  gins = {pq.view(qShape), pk.view(kShape), pv.view(vShape),
          po.view(oShape), lse2.view(),     pdo.view(oShape)};
  if (!c.mask.empty())
    gins.push_back(mask.view());
  s = runKernel("attention_grad", gins,
                {pdq.view(qShape), pdk.view(kShape), pdv.view(vShape)}, attrs);
  ASSERT_TRUE(s.isOk()) << s.message();
  // The views each buffer holds, then each buffer's gaps.
  std::map<const RowBuffer *, std::vector<char>> covered;
  EXPECT_TRUE(sameBits(pdq, dq, covered[pdq.buffer]));
  EXPECT_TRUE(sameBits(pdk, dk, covered[pdk.buffer]));
  EXPECT_TRUE(sameBits(pdv, dv, covered[pdv.buffer]));
  for (const auto &[buf, flags] : covered)
    EXPECT_TRUE(gapsUntouched(*buf, flags));
}

/// Cases with Sq = Sk (one packed projection) and one without.
const std::vector<Case> &stridedCases() {
  static const std::vector<Case> all = {
      {{2, 3}, 70, 70, 16, 16, true, {}},               // crosses a tile
      {{2, 2}, 65, 65, 12, 12, false, {2, 1, 1, 65}},   // a padding mask
      {{1, 2}, 129, 129, 8, 8, true, {1, 2, 129, 129}}, // causal + full mask
      {{2, 2}, 33, 40, 5, 6, false, {1, 1, 33, 40}},    // Sq != Sk, odd D
  };
  return all;
}

// The heads' transposes and a packed projection's slices read and written
// in place compute bitwise what contiguous copies do, in every float type
// (bf16 on the dot-product path where the CPU has AVX512-BF16; run with
// DTCC_CPU_ATTENTION=f32 for its widened path, which f16 always takes), and
// write nothing between their rows. The (batch x head) work is split over
// cpuThreads() (the machine's cores here).
TEST(CpuAttentionKernels, StridedRowsAreBitwiseTheContiguousRun) {
  for (const Case &c : stridedCases())
    for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16})
      for (bool packed : {true, false})
        checkStridedRows(c, dtype, packed);
}

// Inputs whose rows the products cannot take as a leading dimension (rows
// broadcast with stride 0, rows overlapping) are copied first: the same
// bits as their contiguous copies.
TEST(CpuAttentionKernels, ReadsBroadcastAndOverlappingRows) {
  const int64_t b = 2, h = 2, sq = 70, sk = 70, d = 8, dv = 6;
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtypeName(dtype));
    std::mt19937 rng(17);
    Tensor q = randomTensor(rng, dtype, {b, h, sq, d});
    // K: one row per head, broadcast over the keys. V: row j is elements
    // [j, j + dv) of a head's line of sk + dv - 1.
    Tensor kRow = randomTensor(rng, dtype, {b, h, 1, d});
    Tensor vLine = randomTensor(rng, dtype, {b, h, sk + dv - 1});
    Tensor dout = randomTensor(rng, dtype, {b, h, sq, dv});
    Tensor k(dtype, {b, h, sk, d}), v(dtype, {b, h, sk, dv});
    for (int64_t bh = 0; bh < b * h; ++bh)
      for (int64_t j = 0; j < sk; ++j) {
        for (int64_t e = 0; e < d; ++e)
          k.set((bh * sk + j) * d + e, kRow.get(bh * d + e));
        for (int64_t e = 0; e < dv; ++e)
          v.set((bh * sk + j) * dv + e, vLine.get(bh * (sk + dv - 1) + j + e));
      }
    TensorView kView = kRow.view(), vView = vLine.view();
    kView.shape = k.shape;
    kView.strides = {h * d, d, 0, 1};
    vView.shape = v.shape;
    vView.strides = {h * (sk + dv - 1), sk + dv - 1, 1, 1};
    const Attrs attrs = attentionAttrs(0.3, true);
    Tensor out = Tensor::output(dtype, dout.shape),
           out2 = Tensor::output(dtype, dout.shape);
    Tensor lse = Tensor::output(cpu::logsumexpDType(dtype), {b, h, sq}),
           lse2 = Tensor::output(cpu::logsumexpDType(dtype), {b, h, sq});
    ASSERT_TRUE(runKernel("attention", {q.view(), k.view(), v.view()},
                          {out.view(), lse.view()}, attrs)
                    .isOk());
    Status s = runKernel("attention", {q.view(), kView, vView},
                         {out2.view(), lse2.view()}, attrs);
    ASSERT_TRUE(s.isOk()) << s.message();
    EXPECT_TRUE(sameBits(out, out2));
    EXPECT_TRUE(sameBits(lse, lse2));
    std::vector<Tensor> grads, grads2;
    for (const Tensor *t : {&q, &k, &v}) {
      grads.push_back(Tensor::output(dtype, t->shape));
      grads2.push_back(Tensor::output(dtype, t->shape));
    }
    ASSERT_TRUE(runKernel("attention_grad",
                          {q.view(), k.view(), v.view(), out.view(), lse.view(),
                           dout.view()},
                          {grads[0].view(), grads[1].view(), grads[2].view()},
                          attrs)
                    .isOk());
    s = runKernel("attention_grad",
                  {q.view(), kView, vView, out.view(), lse.view(), dout.view()},
                  {grads2[0].view(), grads2[1].view(), grads2[2].view()},
                  attrs);
    ASSERT_TRUE(s.isOk()) << s.message();
    for (int i = 0; i < 3; ++i)
      EXPECT_TRUE(sameBits(grads[i], grads2[i])) << "gradient " << i;
  }
}

// A single query's row stride is never stepped, so a view may say any (0
// here, for the query, the output, dout and dQ): the kernels must not hand
// it to OpenBLAS, which refuses a leading dimension below the width.
TEST(CpuAttentionKernels, TakeAnyStrideAlongASingleRow) {
  const int64_t b = 2, h = 3, sk = 37, d = 8;
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtypeName(dtype));
    std::mt19937 rng(19);
    Tensor q = randomTensor(rng, dtype, {b, h, 1, d});
    Tensor k = randomTensor(rng, dtype, {b, h, sk, d});
    Tensor v = randomTensor(rng, dtype, {b, h, sk, d});
    Tensor dout = randomTensor(rng, dtype, {b, h, 1, d});
    auto oneRow = [&](Tensor &t) {
      TensorView view = t.view();
      view.strides[2] = 0;
      return view;
    };
    const Attrs attrs = attentionAttrs(0.35, false);
    Tensor lse = Tensor::output(cpu::logsumexpDType(dtype), {b, h, 1});
    std::vector<Tensor> want, got;
    for (int run = 0; run < 2; ++run) {
      std::vector<Tensor> &r = run ? got : want;
      for (const Tensor *t : {&q, &q, &k, &v})
        r.push_back(Tensor::output(dtype, t->shape)); // out, dq, dk, dv
      const bool view = run == 1;
      Status s = runKernel(
          "attention", {view ? oneRow(q) : q.view(), k.view(), v.view()},
          {view ? oneRow(r[0]) : r[0].view(), lse.view()}, attrs);
      ASSERT_TRUE(s.isOk()) << s.message();
      s = runKernel("attention_grad",
                    {view ? oneRow(q) : q.view(), k.view(), v.view(),
                     view ? oneRow(r[0]) : r[0].view(), lse.view(),
                     view ? oneRow(dout) : dout.view()},
                    {view ? oneRow(r[1]) : r[1].view(), r[2].view(),
                     r[3].view()},
                    attrs);
      ASSERT_TRUE(s.isOk()) << s.message();
    }
    for (int i = 0; i < 4; ++i)
      EXPECT_TRUE(sameBits(want[i], got[i])) << "result " << i;
  }
}

TEST(CpuAttentionKernels, RefuseViewsTheyCannotTake) {
  Tensor q(DType::kF32, {2, 4, 16}), k(DType::kF32, {2, 4, 8}),
      v(DType::kF32, {2, 4, 3});
  Tensor out(DType::kF32, {2, 4, 3}), lse(DType::kF32, {2, 4});
  // A query of every other element: its rows are not adjacent elements.
  TensorView qView = q.view();
  qView.shape = {2, 4, 8};
  qView.strides = {64, 16, 2};
  Status s = runKernel("attention", {qView, k.view(), v.view()},
                       {out.view(), lse.view()}, attentionAttrs(1, false));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("expected query's last dimension to be "
                             "contiguous (stride 1), got strides [64, 16, 2] "
                             "for shape [2, 4, 8]"),
            std::string::npos)
      << s.message();
  // An output whose rows all write one row.
  TensorView outView = out.view();
  outView.strides = {3, 0, 1};
  s = runKernel("attention", {k.view(), k.view(), v.view()},
                {outView, lse.view()}, attentionAttrs(1, false));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("expected output 0 to reach each element once, "
                             "got strides [3, 0, 1] for shape [2, 4, 3]"),
            std::string::npos)
      << s.message();
  // A key gradient whose batches overlap their rows.
  Tensor dq(DType::kF32, {2, 4, 8}), dk(DType::kF32, {2, 4, 8}),
      dv(DType::kF32, {2, 4, 3});
  TensorView dkView = dk.view();
  dkView.strides = {8, 8, 1};
  s = runKernel(
      "attention_grad",
      {k.view(), k.view(), v.view(), out.view(), lse.view(), out.view()},
      {dq.view(), dkView, dv.view()}, attentionAttrs(1, false));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("expected output 1 to reach each element once, "
                             "got strides [8, 8, 1] for shape [2, 4, 8]"),
            std::string::npos)
      << s.message();
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

/// Random operands of a bf16Dot block (strides wider than the block) and
/// a random C; `check(a, lda, b, ldb, c, ldc)` runs on each shape class the
/// kernels use: rows and columns past a multiple of 4 and 16 (the vector
/// blocks, AMX's tiles), more than 64 columns, words past a multiple of
/// 16, accumulating and not.
template <typename Check> void forEachBf16DotBlock(Check check) {
  std::mt19937 rng(5);
  for (int64_t rows : {1, 3, 4, 7, 16, 33, 64})
    for (int64_t cols : {1, 15, 16, 33, 64, 100})
      for (int64_t kp : {1, 2, 16, 19, 32, 40})
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
          SCOPED_TRACE("rows " + std::to_string(rows) + " cols " +
                       std::to_string(cols) + " kp " + std::to_string(kp) +
                       (accumulate ? " accumulate" : ""));
          check(rows, cols, kp, a, lda, b, ldb, c, ldc, accumulate);
        }
}

// The attention kernels' bf16 products on AVX512-BF16's dot product are
// bitwise their scalar reference, which spells out the instruction's order
// of operations.
TEST(CpuAttentionKernels, Bf16DotVectorIsBitwiseItsReference) {
  if (!cpu::cpuHasAvx512Bf16())
    GTEST_SKIP() << "this CPU has no AVX512-BF16";
  forEachBf16DotBlock([](int64_t rows, int64_t cols, int64_t kp,
                         const std::vector<uint32_t> &a, int64_t lda,
                         const std::vector<uint32_t> &b, int64_t ldb,
                         std::vector<float> c, int64_t ldc, bool accumulate) {
    std::vector<float> want = c;
    cpu::bf16DotVector(rows, cols, kp, a.data(), lda, b.data(), ldb, c.data(),
                       ldc, accumulate);
    cpu::bf16DotReference(rows, cols, kp, a.data(), lda, b.data(), ldb,
                          want.data(), ldc, accumulate);
    ASSERT_EQ(std::memcmp(c.data(), want.data(), c.size() * 4), 0);
  });
}

// bf16Dot (on AMX's tiles where the CPU has them, the vector instruction
// for the rows, columns and words past them) is within f32 rounding of the
// exact sum: each result within 2 kp + 1 roundings (2^-24 of the sum of
// the magnitudes of its terms) of the sum in f64, f32 subnormals aside;
// C's elements outside the block untouched.
TEST(CpuAttentionKernels, Bf16DotIsTheSumWithinF32Rounding) {
  if (!cpu::cpuHasAvx512Bf16())
    GTEST_SKIP() << "this CPU has no AVX512-BF16";
  if (!cpu::cpuHasAmxBf16())
    std::printf("this CPU has no AMX: bf16Dot is bf16DotVector\n");
  forEachBf16DotBlock([](int64_t rows, int64_t cols, int64_t kp,
                         const std::vector<uint32_t> &a, int64_t lda,
                         const std::vector<uint32_t> &b, int64_t ldb,
                         std::vector<float> c, int64_t ldc, bool accumulate) {
    const std::vector<float> before = c;
    cpu::bf16Dot(rows, cols, kp, a.data(), lda, b.data(), ldb, c.data(), ldc,
                 accumulate);
    auto half = [](uint32_t word, int h) {
      return double(bf16ToFloat(uint16_t(word >> (16 * h))));
    };
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < ldc; ++j) {
        if (j >= cols) {
          ASSERT_EQ(c[r * ldc + j], before[r * ldc + j]) << "outside the block";
          continue;
        }
        double sum = accumulate ? before[r * ldc + j] : 0.0;
        double magnitude = std::fabs(sum);
        for (int64_t p = 0; p < kp; ++p)
          for (int h : {0, 1}) {
            const double term =
                half(a[r * lda + p], h) * half(b[p * ldb + j], h);
            sum += term;
            magnitude += std::fabs(term);
          }
        const double bound =
            double(2 * kp + 1) * std::ldexp(magnitude, -24) + 0x1p-90;
        ASSERT_LE(std::fabs(double(c[r * ldc + j]) - sum), bound)
            << "row " << r << " column " << j;
      }
  });
}

// The f32 block products on AVX-512 (TileProduct.h) against a sum in f64:
// every shape of a panel's rows and columns (whole and masked registers,
// panels past 64 columns), A read as rows or transposed, overwriting or
// accumulating; each result within f32 rounding of the exact sum
// (2^-23 of (k + 1) times the sum of its terms' magnitudes), C's elements
// outside the block untouched. Then the transposes the products read.
TEST(CpuAttentionKernels, TileProductsAreTheSumWithinF32Rounding) {
  if (!cpu::cpuHasTileProducts())
    GTEST_SKIP() << "this CPU has no AVX-512 (or DTCC_CPU_ATTENTION=blas)";
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t m : {1, 3, 7, 16, 23, 64})
    for (int64_t n : {1, 15, 16, 17, 40, 64, 72, 130})
      for (int64_t k : {0, 1, 9, 32, 64})
        for (bool transA : {false, true})
          for (bool accumulate : {false, true}) {
            SCOPED_TRACE("m " + std::to_string(m) + " n " + std::to_string(n) +
                         " k " + std::to_string(k) + (transA ? " transA" : "") +
                         (accumulate ? " accumulate" : ""));
            const int64_t lda = (transA ? m : k) + 3, ldb = n + 5, ldc = n + 2;
            std::vector<float> a((transA ? k : m) * lda + 1),
                b(std::max<int64_t>(k, 1) * ldb), c(m * ldc);
            for (float &x : a)
              x = u(rng);
            for (float &x : b)
              x = u(rng);
            for (float &x : c)
              x = u(rng);
            const std::vector<float> before = c;
            const float alpha = 0.37f;
            cpu::tileProduct(transA, m, n, k, alpha, a.data(), lda, b.data(),
                             ldb, accumulate, c.data(), ldc);
            for (int64_t r = 0; r < m; ++r)
              for (int64_t col = 0; col < ldc; ++col) {
                const float got = c[r * ldc + col];
                if (col >= n) {
                  ASSERT_EQ(got, before[r * ldc + col]) << "outside the block";
                  continue;
                }
                double sum = 0, magnitude = 0;
                for (int64_t e = 0; e < k; ++e) {
                  const double term =
                      double(transA ? a[e * lda + r] : a[r * lda + e]) *
                      double(b[e * ldb + col]);
                  sum += term;
                  magnitude += std::fabs(term);
                }
                double want = double(alpha) * sum;
                magnitude *= alpha;
                if (accumulate) {
                  want += before[r * ldc + col];
                  magnitude += std::fabs(before[r * ldc + col]);
                }
                ASSERT_NEAR(got, want,
                            std::ldexp(double(k + 2) * magnitude, -23) + 1e-30)
                    << "row " << r << " column " << col;
              }
          }
  for (int64_t rows : {1, 16, 37, 64})
    for (int64_t cols : {1, 15, 16, 33, 80}) {
      const int64_t ldx = cols + 1, ldo = rows + 4;
      std::vector<float> x(rows * ldx), out(cols * ldo, -7.f);
      for (float &v : x)
        v = u(rng);
      cpu::transposeTile(x.data(), rows, cols, ldx, out.data(), ldo);
      for (int64_t col = 0; col < cols; ++col)
        for (int64_t r = 0; r < ldo; ++r)
          ASSERT_EQ(out[col * ldo + r], r < rows ? x[r * ldx + col] : -7.f)
              << "rows " << rows << " cols " << cols;
    }
}

// The causal blocks' parts of a product (Triangle): with A zero where the
// shape says (kLowerA: past r + offset; kUpperA: before r - offset) the
// products skip those terms and give the whole product; kLowerC computes
// C[r][c] for c <= r + offset and leaves nothing else changed past the
// strip's extent. Diagonals inside, before and past the block.
TEST(CpuAttentionKernels, TileProductTrianglesAreTheirPartOfTheProduct) {
  if (!cpu::cpuHasTileProducts())
    GTEST_SKIP() << "this CPU has no AVX-512 (or DTCC_CPU_ATTENTION=blas)";
  using cpu::Triangle;
  std::mt19937 rng(29);
  std::uniform_real_distribution<float> u(-1, 1);
  const int64_t m = 45, n = 37, k = 50;
  for (Triangle::Kind kind :
       {Triangle::kLowerC, Triangle::kLowerA, Triangle::kUpperA})
    for (int64_t offset : {-60, -20, -1, 0, 7, 100})
      for (bool transA : {false, true}) {
        SCOPED_TRACE("kind " + std::to_string(int(kind)) + " offset " +
                     std::to_string(offset) + (transA ? " transA" : ""));
        const int64_t lda = transA ? m : k;
        std::vector<float> a((transA ? k : m) * lda), b(k * n), c(m * n);
        for (float &x : b)
          x = u(rng);
        for (float &x : c)
          x = u(rng);
        auto at = [&](int64_t r, int64_t e) -> float & {
          return transA ? a[e * lda + r] : a[r * lda + e];
        };
        for (int64_t r = 0; r < m; ++r)
          for (int64_t e = 0; e < k; ++e) {
            const bool zero = (kind == Triangle::kLowerA && e > r + offset) ||
                              (kind == Triangle::kUpperA && e < r - offset);
            at(r, e) = zero ? 0.f : u(rng);
          }
        const std::vector<float> before = c;
        cpu::tileProduct(transA, m, n, k, 1.f, a.data(), lda, b.data(), n, true,
                         c.data(), n, Triangle{kind, offset});
        for (int64_t r = 0; r < m; ++r)
          for (int64_t col = 0; col < n; ++col) {
            const float got = c[r * n + col];
            if (kind == Triangle::kLowerC && col > r + offset) {
              // Computed or left, within the strip's extent; past it left.
              const int64_t strip = r / cpu::kTriangleRows;
              const int64_t extent =
                  std::min(m, (strip + 1) * cpu::kTriangleRows) + offset;
              if (col >= extent)
                ASSERT_EQ(got, before[r * n + col]) << r << ", " << col;
              continue;
            }
            double want = before[r * n + col], magnitude = std::fabs(want);
            for (int64_t e = 0; e < k; ++e) {
              const double term = double(at(r, e)) * double(b[e * n + col]);
              want += term;
              magnitude += std::fabs(term);
            }
            ASSERT_NEAR(got, want, std::ldexp(double(k + 2) * magnitude, -23))
                << "row " << r << " column " << col;
          }
      }
}
