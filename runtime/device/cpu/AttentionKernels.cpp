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
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/AttentionPlan.h"
#include "runtime/device/cpu/CpuKernelUtils.h"
#include "runtime/device/cpu/ThreadPool.h"
#include "runtime/device/cpu/VectorMath.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
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

/// Scores of queries [i0, i0 + m) against keys [j0, j0 + n) of batch b,
/// scaled and masked, into s (m x n, leading dimension kTile); -inf where
/// causal attention hides the key.
template <typename C>
void blockScores(const AttentionShape &p, const C *q, const C *k,
                 const C *mask, int64_t b, int64_t i0, int64_t m, int64_t j0,
                 int64_t n, C *s) {
  gemm(false, true, m, n, p.d, C(p.scale), q + i0 * p.d, p.d, k + j0 * p.d,
       p.d, C(0), s, kTile);
  if (p.hasMask) {
    const C *mb = mask + p.maskBase[b];
    for (int64_t i = 0; i < m; ++i) {
      const C *row = mb + (i0 + i) * p.maskRow + j0 * p.maskCol;
      C *sr = s + i * kTile;
      for (int64_t j = 0; j < n; ++j)
        sr[j] += row[j * p.maskCol];
    }
  }
  if (p.causal && j0 + n - 1 > i0)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = std::max<int64_t>(0, i0 + i + 1 - j0); j < n; ++j)
        s[i * kTile + j] = -std::numeric_limits<C>::infinity();
}

/// Keys [0, end) that query block [i0, i0 + m) sees.
inline int64_t keysSeen(const AttentionShape &p, int64_t i0, int64_t m) {
  return p.causal ? std::min(p.sk, i0 + m) : p.sk;
}

template <typename C>
KernelFn makeAttention(AttentionShape p, const C *q, const C *k, const C *v,
                       const C *mask, C *out, float *lse) {
  const int64_t qBlocks = (p.sq + kTile - 1) / kTile;
  auto scratch = std::make_shared<std::vector<std::vector<C>>>(
      cpuThreads(), std::vector<C>(2 * kTile * kTile + 2 * kTile));
  return [=]() -> Status {
    parallelFor(p.batch * qBlocks, 1, [&](int64_t begin, int64_t end, int w) {
      C *s = (*scratch)[w].data();
      C *rowMax = s + kTile * kTile, *rowSum = rowMax + kTile;
      for (int64_t t = begin; t < end; ++t) {
        const int64_t b = t / qBlocks, i0 = (t % qBlocks) * kTile;
        const int64_t m = std::min(kTile, p.sq - i0);
        const C *qb = q + b * p.sq * p.d, *kb = k + b * p.sk * p.d,
                *vb = v + b * p.sk * p.dv;
        C *ob = out + (b * p.sq + i0) * p.dv;
        std::fill(ob, ob + m * p.dv, C(0));
        std::fill(rowMax, rowMax + m, -std::numeric_limits<C>::infinity());
        std::fill(rowSum, rowSum + m, C(0));
        const int64_t keys = keysSeen(p, i0, m);
        for (int64_t j0 = 0; j0 < keys; j0 += kTile) {
          const int64_t n = std::min(kTile, keys - j0);
          blockScores(p, qb, kb, mask, b, i0, m, j0, n, s);
          for (int64_t i = 0; i < m; ++i) {
            C *sr = s + i * kTile;
            C blockMax = rowMax[i];
            for (int64_t j = 0; j < n; ++j)
              blockMax = std::max(blockMax, sr[j]);
            if (blockMax == -std::numeric_limits<C>::infinity()) {
              // Every key so far hidden: nothing to add yet.
              std::fill(sr, sr + n, C(0));
              continue;
            }
            const C alpha = std::exp(rowMax[i] - blockMax);
            for (int64_t j = 0; j < n; ++j)
              sr[j] -= blockMax;
            vectorMath(MathFn::kExp, sr, n);
            C sum = 0;
            for (int64_t j = 0; j < n; ++j)
              sum += sr[j];
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
      }
    });
    return Status::ok();
  };
}

template <typename C>
KernelFn makeAttentionGrad(AttentionShape p, const C *q, const C *k,
                           const C *v, const C *o, const float *lse,
                           const C *dout, const C *mask, C *dq, C *dk, C *dv) {
  // Per thread: the block's P and dS, dP, and the rows' D = rowsum(dO * O).
  auto scratch = std::make_shared<std::vector<std::vector<C>>>(
      cpuThreads(), std::vector<C>(2 * kTile * kTile + p.sq));
  return [=]() -> Status {
    parallelFor(p.batch, 1, [&](int64_t begin, int64_t end, int w) {
      C *pb = (*scratch)[w].data(), *ds = pb + kTile * kTile,
        *rowDot = ds + kTile * kTile;
      for (int64_t b = begin; b < end; ++b) {
        const C *qb = q + b * p.sq * p.d, *kb = k + b * p.sk * p.d,
                *vb = v + b * p.sk * p.dv, *ob = o + b * p.sq * p.dv,
                *dob = dout + b * p.sq * p.dv;
        const float *lb = lse + b * p.sq;
        C *dqb = dq + b * p.sq * p.d, *dkb = dk + b * p.sk * p.d,
          *dvb = dv + b * p.sk * p.dv;
        std::fill(dqb, dqb + p.sq * p.d, C(0));
        std::fill(dkb, dkb + p.sk * p.d, C(0));
        std::fill(dvb, dvb + p.sk * p.dv, C(0));
        for (int64_t i = 0; i < p.sq; ++i) {
          C sum = 0;
          for (int64_t e = 0; e < p.dv; ++e)
            sum += dob[i * p.dv + e] * ob[i * p.dv + e];
          rowDot[i] = sum;
        }
        for (int64_t i0 = 0; i0 < p.sq; i0 += kTile) {
          const int64_t m = std::min(kTile, p.sq - i0);
          const int64_t keys = keysSeen(p, i0, m);
          for (int64_t j0 = 0; j0 < keys; j0 += kTile) {
            const int64_t n = std::min(kTile, keys - j0);
            // P = exp(S - lse), recomputed.
            blockScores(p, qb, kb, mask, b, i0, m, j0, n, pb);
            for (int64_t i = 0; i < m; ++i) {
              C *pr = pb + i * kTile;
              const C l = C(lb[i0 + i]);
              for (int64_t j = 0; j < n; ++j)
                pr[j] -= l;
              vectorMath(MathFn::kExp, pr, n);
            }
            // dV_j += Pᵀ dO_i.
            gemm(true, false, n, p.dv, m, C(1), pb, kTile,
                 dob + i0 * p.dv, p.dv, C(1), dvb + j0 * p.dv, p.dv);
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
            gemm(true, false, n, p.d, m, C(p.scale), ds, kTile,
                 qb + i0 * p.d, p.d, C(1), dkb + j0 * p.d, p.d);
          }
        }
      }
    });
    return Status::ok();
  };
}

StatusOr<KernelFn> buildAttention(const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(AttentionShape p, planAttention(ctx));
  const TensorView &q = ctx.inputs[0], &k = ctx.inputs[1], &v = ctx.inputs[2];
  const TensorView *mask = p.hasMask ? &ctx.inputs[3] : nullptr;
  KernelFn fn;
  if (!visitDType<kSetF32F64>(q.dtype, [&](auto tag) {
        using C = typename decltype(tag)::type;
        fn = makeAttention<C>(p, q.as<const C>(), k.as<const C>(),
                              v.as<const C>(),
                              mask ? mask->as<const C>() : nullptr,
                              ctx.outputs[0].as<C>(),
                              ctx.outputs[1].as<float>());
      }))
    return unsupportedDType(ctx, q.dtype, kSetF32F64);
  return fn;
}

StatusOr<KernelFn> buildAttentionGrad(const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(AttentionShape p, planAttentionGrad(ctx));
  const TensorView &q = ctx.inputs[0], &k = ctx.inputs[1], &v = ctx.inputs[2],
                   &o = ctx.inputs[3], &lse = ctx.inputs[4],
                   &dout = ctx.inputs[5];
  const TensorView *mask = p.hasMask ? &ctx.inputs[6] : nullptr;
  KernelFn fn;
  if (!visitDType<kSetF32F64>(q.dtype, [&](auto tag) {
        using C = typename decltype(tag)::type;
        fn = makeAttentionGrad<C>(
            p, q.as<const C>(), k.as<const C>(), v.as<const C>(),
            o.as<const C>(), lse.as<const float>(), dout.as<const C>(),
            mask ? mask->as<const C>() : nullptr, ctx.outputs[0].as<C>(),
            ctx.outputs[1].as<C>(), ctx.outputs[2].as<C>());
      }))
    return unsupportedDType(ctx, q.dtype, kSetF32F64);
  return fn;
}

} // namespace

void registerCpuAttentionKernels(KernelRegistry &registry) {
  registry.add("attention", buildAttention);
  registry.add("attention_grad", buildAttentionGrad);
}

} // namespace dtcc::runtime
