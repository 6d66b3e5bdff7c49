//===- AttentionKernels.cpp - attention and its gradient, tile by tile ----===//
//
// dgraph.attention and dgraph.attention_grad on the CPU: FlashAttention-2's
// recurrences over blocks of kTile queries x kTile keys. The forward keeps a
// running maximum and sum per query row (online softmax) and writes the
// output and each row's log-sum-exp; the backward recomputes each block of
// probabilities from the log-sum-exp. No [Sq, Sk] buffer exists: the
// scratch is a few kTile x kTile blocks per thread. The block products are
// OpenBLAS GEMM calls on the tiles (faster than our own loops from a
// head dimension of 16 on; see the unit test's timing). Causal attention
// skips the blocks above the diagonal. The exponentials go through
// VectorMath (libmvec). Work is split over (batch x head)
// and, in the forward, query blocks: each output element is computed by
// one thread in one order, so results do not depend on the thread count.
// Each task's loops run compiled for AVX-512 where the CPU has it
// (IsaDispatch.h: the same values as the baseline build's).
// bf16 and f16 compute in f32: each task widens the rows it reads into
// per-thread f32 scratch (made when the kernel is bound) and rounds what it
// writes once, at the end.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/AttentionPlan.h"
#include "runtime/device/cpu/CpuKernelUtils.h"
#include "runtime/device/cpu/IsaDispatch.h"
#include "runtime/device/cpu/ThreadPool.h"
#include "runtime/device/cpu/VectorMath.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

namespace dtcc::runtime {
namespace {

using namespace cpu;

constexpr int64_t kTile = 64;

/// C[m x n] = alpha A[m x k] op B + beta C, row-major with leading
/// dimensions; transB: B is [n x k].
inline void gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                 float alpha, const float *a, int64_t lda, const float *b,
                 int64_t ldb, float beta, float *c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, int(m), int(n), int(k), alpha,
              a, int(lda), b, int(ldb), beta, c, int(ldc));
}
inline void gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                 double alpha, const double *a, int64_t lda, const double *b,
                 int64_t ldb, double beta, double *c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, int(m), int(n), int(k), alpha,
              a, int(lda), b, int(ldb), beta, c, int(ldc));
}

/// Scores of queries [i0, i0 + m) (rows `qi`, the block's first) against
/// keys [j0, j0 + n) of batch b (rows `k`), scaled and masked, into s (m x
/// n, leading dimension kTile); -inf where causal attention hides the key.
/// The mask is of the storage type M.
template <typename C, typename M>
void blockScores(const AttentionShape &p, const C *qi, const C *k,
                 const M *mask, int64_t b, int64_t i0, int64_t m, int64_t j0,
                 int64_t n, C *s) {
  gemm(false, true, m, n, p.d, C(p.scale), qi, p.d, k + j0 * p.d, p.d, C(0),
       s, kTile);
  if (p.hasMask) {
    const M *mb = mask + p.maskBase[b];
    for (int64_t i = 0; i < m; ++i) {
      const M *row = mb + (i0 + i) * p.maskRow + j0 * p.maskCol;
      C *sr = s + i * kTile;
      for (int64_t j = 0; j < n; ++j)
        sr[j] += C(Elem<M>::load(row[j * p.maskCol]));
    }
  }
  if (p.causal && j0 + n - 1 > i0)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = std::max<int64_t>(0, i0 + i + 1 - j0); j < n; ++j)
        s[i * kTile + j] = -std::numeric_limits<C>::infinity();
}

/// `n` elements of `from` in the compute type: `from` itself when S is C,
/// else widened into `to`.
template <typename S, typename C>
const C *widen(const S *from, int64_t n, C *to) {
  if constexpr (std::is_same_v<S, C>) {
    (void)n;
    (void)to;
    return from;
  } else {
    for (int64_t i = 0; i < n; ++i)
      to[i] = Elem<S>::load(from[i]);
    return to;
  }
}

/// Where a task computes `n` output elements that go to `out`: `out` itself
/// when S is C, else `scratch` (then narrow() stores them).
template <typename S, typename C> C *computeInto(S *out, C *scratch) {
  if constexpr (std::is_same_v<S, C>) {
    (void)scratch;
    return out;
  } else {
    (void)out;
    return scratch;
  }
}
template <typename S, typename C>
void narrow(const C *from, int64_t n, S *out) {
  if constexpr (!std::is_same_v<S, C>)
    for (int64_t i = 0; i < n; ++i)
      out[i] = Elem<S>::store(from[i]);
}

/// Keys [0, end) that query block [i0, i0 + m) sees.
inline int64_t keysSeen(const AttentionShape &p, int64_t i0, int64_t m) {
  return p.causal ? std::min(p.sk, i0 + m) : p.sk;
}

template <typename S>
KernelFn makeAttention(AttentionShape p, const S *q, const S *k, const S *v,
                       const S *mask, S *out, float *lse) {
  using C = ComputeT<S>;
  constexpr bool kWiden = !std::is_same_v<S, C>;
  const int64_t qBlocks = (p.sq + kTile - 1) / kTile;
  // Per thread: a block of scores and the rows' max and sum; for a half
  // type also the query block, the keys and values, and the output block
  // in f32.
  const int64_t widened =
      kWiden ? kTile * p.d + p.sk * (p.d + p.dv) + kTile * p.dv : 0;
  auto scratch = std::make_shared<std::vector<std::vector<C>>>(
      cpuThreads(), std::vector<C>(2 * kTile * kTile + 2 * kTile + widened));
  return [=]() -> Status {
    parallelFor(p.batch * qBlocks, 1, [&](int64_t begin, int64_t end, int w) {
      C *s = (*scratch)[w].data();
      C *rowMax = s + kTile * kTile, *rowSum = rowMax + kTile;
      // The f32 copies of a half type's rows (none for f32 and f64).
      C *qw = kWiden ? rowSum + kTile : nullptr;
      C *kw = kWiden ? qw + kTile * p.d : nullptr;
      C *vw = kWiden ? kw + p.sk * p.d : nullptr;
      C *ow = kWiden ? vw + p.sk * p.dv : nullptr;
      withAvx512([&]() DTCC_INLINE_LAMBDA {
        for (int64_t t = begin; t < end; ++t) {
          const int64_t b = t / qBlocks, i0 = (t % qBlocks) * kTile;
          const int64_t m = std::min(kTile, p.sq - i0);
          const int64_t keys = keysSeen(p, i0, m);
          const C *qi = widen(q + (b * p.sq + i0) * p.d, m * p.d, qw);
          const C *kb = widen(k + b * p.sk * p.d, keys * p.d, kw);
          const C *vb = widen(v + b * p.sk * p.dv, keys * p.dv, vw);
          S *obOut = out + (b * p.sq + i0) * p.dv;
          C *ob = computeInto(obOut, ow);
          std::fill(ob, ob + m * p.dv, C(0));
          std::fill(rowMax, rowMax + m, -std::numeric_limits<C>::infinity());
          std::fill(rowSum, rowSum + m, C(0));
          for (int64_t j0 = 0; j0 < keys; j0 += kTile) {
            const int64_t n = std::min(kTile, keys - j0);
            blockScores(p, qi, kb, mask, b, i0, m, j0, n, s);
            for (int64_t i = 0; i < m; ++i) {
              C *sr = s + i * kTile;
              // Eight lanes each (cpu::rowMax, blockedSum): a row's maximum
              // and sum vectorize instead of running one dependent
              // comparison or addition per key.
              const C tileMax = cpu::rowMax(sr, n);
              const C blockMax =
                  tileMax > rowMax[i] || isNan(tileMax) ? tileMax : rowMax[i];
              if (blockMax == -std::numeric_limits<C>::infinity()) {
                // Every key so far hidden: nothing to add yet.
                std::fill(sr, sr + n, C(0));
                continue;
              }
              const C alpha = std::exp(rowMax[i] - blockMax);
              for (int64_t j = 0; j < n; ++j)
                sr[j] -= blockMax;
              vectorMath(MathFn::kExp, sr, n);
              const C sum =
                  C(blockedSum<C>(n, [&](int64_t j) { return sr[j]; }));
              rowSum[i] = rowSum[i] * alpha + sum;
              rowMax[i] = blockMax;
              if (alpha != C(1)) {
                C *orow = ob + i * p.dv;
                for (int64_t e = 0; e < p.dv; ++e)
                  orow[e] *= alpha;
              }
            }
            // O += P · V_block.
            gemm(false, false, m, p.dv, n, C(1), s, kTile, vb + j0 * p.dv, p.dv,
                 C(1), ob, p.dv);
          }
          for (int64_t i = 0; i < m; ++i) {
            const C inv = C(1) / rowSum[i];
            C *orow = ob + i * p.dv;
            for (int64_t e = 0; e < p.dv; ++e)
              orow[e] *= inv;
            lse[b * p.sq + i0 + i] = float(rowMax[i] + std::log(rowSum[i]));
          }
          narrow(ob, m * p.dv, obOut);
        }
      });
    });
    return Status::ok();
  };
}

template <typename S>
KernelFn makeAttentionGrad(AttentionShape p, const S *q, const S *k,
                           const S *v, const S *o, const float *lse,
                           const S *dout, const S *mask, S *dq, S *dk, S *dv) {
  using C = ComputeT<S>;
  constexpr bool kWiden = !std::is_same_v<S, C>;
  // Per thread: the block's P and dS, dP, and the rows' D = rowsum(dO * O);
  // for a half type also the batch's operands and gradients in f32.
  const int64_t widened =
      kWiden ? 2 * (p.sq * p.d + p.sk * p.d + p.sk * p.dv) + 2 * p.sq * p.dv
             : 0;
  auto scratch = std::make_shared<std::vector<std::vector<C>>>(
      cpuThreads(), std::vector<C>(2 * kTile * kTile + p.sq + widened));
  return [=]() -> Status {
    parallelFor(p.batch, 1, [&](int64_t begin, int64_t end, int w) {
      C *pb = (*scratch)[w].data(), *ds = pb + kTile * kTile,
        *rowDot = ds + kTile * kTile;
      // The f32 copies of a half type's operands and gradients (none for
      // f32 and f64).
      C *qw = nullptr, *kw = nullptr, *vw = nullptr, *ow = nullptr,
        *dow = nullptr, *dqw = nullptr, *dkw = nullptr, *dvw = nullptr;
      if (kWiden) {
        qw = rowDot + p.sq;
        kw = qw + p.sq * p.d;
        vw = kw + p.sk * p.d;
        ow = vw + p.sk * p.dv;
        dow = ow + p.sq * p.dv;
        dqw = dow + p.sq * p.dv;
        dkw = dqw + p.sq * p.d;
        dvw = dkw + p.sk * p.d;
      }
      withAvx512([&]() DTCC_INLINE_LAMBDA {
        for (int64_t b = begin; b < end; ++b) {
          const C *qb = widen(q + b * p.sq * p.d, p.sq * p.d, qw),
                  *kb = widen(k + b * p.sk * p.d, p.sk * p.d, kw),
                  *vb = widen(v + b * p.sk * p.dv, p.sk * p.dv, vw),
                  *ob = widen(o + b * p.sq * p.dv, p.sq * p.dv, ow),
                  *dob = widen(dout + b * p.sq * p.dv, p.sq * p.dv, dow);
          const float *lb = lse + b * p.sq;
          S *dqOut = dq + b * p.sq * p.d, *dkOut = dk + b * p.sk * p.d,
            *dvOut = dv + b * p.sk * p.dv;
          C *dqb = computeInto(dqOut, dqw), *dkb = computeInto(dkOut, dkw),
            *dvb = computeInto(dvOut, dvw);
          std::fill(dqb, dqb + p.sq * p.d, C(0));
          std::fill(dkb, dkb + p.sk * p.d, C(0));
          std::fill(dvb, dvb + p.sk * p.dv, C(0));
          for (int64_t i = 0; i < p.sq; ++i) {
            const C *dor = dob + i * p.dv, *orow = ob + i * p.dv;
            rowDot[i] = C(blockedSum<C>(
                p.dv, [&](int64_t e) { return dor[e] * orow[e]; }));
          }
          for (int64_t i0 = 0; i0 < p.sq; i0 += kTile) {
            const int64_t m = std::min(kTile, p.sq - i0);
            const int64_t keys = keysSeen(p, i0, m);
            for (int64_t j0 = 0; j0 < keys; j0 += kTile) {
              const int64_t n = std::min(kTile, keys - j0);
              // P = exp(S - lse), recomputed.
              blockScores(p, qb + i0 * p.d, kb, mask, b, i0, m, j0, n, pb);
              for (int64_t i = 0; i < m; ++i) {
                C *pr = pb + i * kTile;
                const C l = C(lb[i0 + i]);
                for (int64_t j = 0; j < n; ++j)
                  pr[j] -= l;
                vectorMath(MathFn::kExp, pr, n);
              }
              // dV_j += Pᵀ dO_i.
              gemm(true, false, n, p.dv, m, C(1), pb, kTile, dob + i0 * p.dv,
                   p.dv, C(1), dvb + j0 * p.dv, p.dv);
              // dP = dO_i V_jᵀ; dS = P (dP - D).
              gemm(false, true, m, n, p.dv, C(1), dob + i0 * p.dv, p.dv,
                   vb + j0 * p.dv, p.dv, C(0), ds, kTile);
              for (int64_t i = 0; i < m; ++i) {
                C *dr = ds + i * kTile;
                const C *pr = pb + i * kTile;
                const C dot = rowDot[i0 + i];
                for (int64_t j = 0; j < n; ++j)
                  dr[j] = pr[j] * (dr[j] - dot);
              }
              // dQ_i += scale dS K_j; dK_j += scale dSᵀ Q_i.
              gemm(false, false, m, p.d, n, C(p.scale), ds, kTile,
                   kb + j0 * p.d, p.d, C(1), dqb + i0 * p.d, p.d);
              gemm(true, false, n, p.d, m, C(p.scale), ds, kTile, qb + i0 * p.d,
                   p.d, C(1), dkb + j0 * p.d, p.d);
            }
          }
          narrow(dqb, p.sq * p.d, dqOut);
          narrow(dkb, p.sk * p.d, dkOut);
          narrow(dvb, p.sk * p.dv, dvOut);
        }
      });
    });
    return Status::ok();
  };
}

StatusOr<KernelFn> buildAttention(const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(AttentionShape p, planAttention(ctx));
  const TensorView &q = ctx.inputs[0], &k = ctx.inputs[1], &v = ctx.inputs[2];
  const TensorView *mask = p.hasMask ? &ctx.inputs[3] : nullptr;
  KernelFn fn;
  if (!visitDType<kSetFloats>(q.dtype, [&](auto tag) {
        using S = typename decltype(tag)::type;
        fn = makeAttention<S>(p, q.as<const S>(), k.as<const S>(),
                              v.as<const S>(),
                              mask ? mask->as<const S>() : nullptr,
                              ctx.outputs[0].as<S>(),
                              ctx.outputs[1].as<float>());
      }))
    return unsupportedDType(ctx, q.dtype, kSetFloats);
  return fn;
}

StatusOr<KernelFn> buildAttentionGrad(const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(AttentionShape p, planAttentionGrad(ctx));
  const TensorView &q = ctx.inputs[0], &k = ctx.inputs[1], &v = ctx.inputs[2],
                   &o = ctx.inputs[3], &lse = ctx.inputs[4],
                   &dout = ctx.inputs[5];
  const TensorView *mask = p.hasMask ? &ctx.inputs[6] : nullptr;
  KernelFn fn;
  if (!visitDType<kSetFloats>(q.dtype, [&](auto tag) {
        using S = typename decltype(tag)::type;
        fn = makeAttentionGrad<S>(
            p, q.as<const S>(), k.as<const S>(), v.as<const S>(),
            o.as<const S>(), lse.as<const float>(), dout.as<const S>(),
            mask ? mask->as<const S>() : nullptr, ctx.outputs[0].as<S>(),
            ctx.outputs[1].as<S>(), ctx.outputs[2].as<S>());
      }))
    return unsupportedDType(ctx, q.dtype, kSetFloats);
  return fn;
}

} // namespace

void registerCpuAttentionKernels(KernelRegistry &registry) {
  registry.add("attention", buildAttention);
  registry.add("attention_grad", buildAttentionGrad);
}

} // namespace dtcc::runtime
