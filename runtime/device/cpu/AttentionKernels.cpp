//===- AttentionKernels.cpp - attention and its gradient, tile by tile ----===//
//
// dgraph.attention and dgraph.attention_grad on the CPU: FlashAttention-2's
// recurrences over blocks of kTile queries x kTile keys. The forward keeps a
// running maximum and sum per query row (online softmax) and writes the
// output and each row's log-sum-exp; the backward recomputes each block of
// probabilities from the log-sum-exp. No [Sq, Sk] buffer exists: the
// scratch is a few kTile x kTile blocks per thread. The f32 block products
// run in registers on AVX-512 (TileProduct.h: no packing, no zeroing, C
// kept in registers over the whole sum; a key or value block transposed
// for the products that read it transposed), elsewhere and in f64 as OpenBLAS
// GEMM calls on the tiles (DTCC_CPU_ATTENTION=blas keeps OpenBLAS for
// comparisons; bench/attention_cpu.cpp times both). Causal attention skips the
// blocks above the diagonal, and in a diagonal block computes each row's
// exponentials only up to its last vector of 16 with a key it sees. The
// softmax takes 16 rows at a time: their maxima and sums reduced together,
// their rescaling factors and log-sum-exps one vector of exponentials or
// logarithms each. The exponentials go through
// VectorMath (libmvec). Work is split over (batch x head)
// and, in the forward, query blocks: each output element is computed by
// one thread in one order, so results do not depend on the thread count.
// Each task's loops run compiled for AVX-512 where the CPU has it
// (IsaDispatch.h: the same values as the baseline build's).
// bf16 and f16 compute in f32: each task widens the rows it reads into
// per-thread f32 scratch (made when the kernel is bound) and rounds what it
// writes once, at the end; bf16 on CPUs with AVX512-BF16 multiplies its
// blocks as bf16 dot products instead (makeAttentionBf16Dot below).
// Query, key, value, the output and the gradients may be views of strided
// rows (AttentionRows: the heads' transposes and a packed projection's
// slices, read and written in place; the mask and the log-sum-exp are
// contiguous): the products take a view's row stride as their leading
// dimension (inputs whose rows overlap are copied first), so a view
// computes bitwise what a contiguous copy would, and the writes stay within
// the views' rows.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/AttentionPlan.h"
#include "runtime/device/cpu/Bf16Dot.h"
#include "runtime/device/cpu/CpuKernelUtils.h"
#include "runtime/device/cpu/IsaDispatch.h"
#include "runtime/device/cpu/ThreadPool.h"
#include "runtime/device/cpu/TileProduct.h"
#include "runtime/device/cpu/VectorMath.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <utility>
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

/// Rows in the compute type as the products read them: row r at
/// data + r * ld.
template <typename C> struct RowBlock {
  const C *data;
  int64_t ld;
};

/// The keys of a block that each of its query rows sees: the block's n,
/// or for causal attention those up to the row's own position (none in a
/// row above the block's diagonal). Scores past them are never read: the
/// softmax writes zeros there.
struct Visible {
  int64_t n, diagonal = 0;
  bool causal = false;
  Visible(const AttentionShape &p, int64_t i0, int64_t j0, int64_t n)
      : n(n), diagonal(i0 - j0), causal(p.causal) {}
  /// Keys [0, (*this)(i)) of row i.
  DTCC_ALWAYS_INLINE int64_t operator()(int64_t i) const {
    return causal ? std::clamp<int64_t>(diagonal + i + 1, 0, n) : n;
  }
  /// Row i's keys rounded up to whole vectors of 16 (within the rows'
  /// kTile, as n <= kTile): the exponentials' extent, vector loops without
  /// a scalar tail.
  DTCC_ALWAYS_INLINE int64_t vectors(int64_t i) const {
    return ((*this)(i) + 15) / 16 * 16;
  }
  /// The part of a product of the block that the keys seen need
  /// (TileProduct.h): the whole block unless some row sees fewer than n.
  Triangle triangle(Triangle::Kind kind) const {
    if (!causal || diagonal + 1 >= n)
      return {};
    return {kind, diagonal};
  }
};

/// Adds the mask (of the storage type M) to a block of scaled scores of
/// queries [i0, i0 + m) and keys [j0, j0 + n) of batch b (s: m x n, leading
/// dimension kTile), on the keys each row sees (Visible).
template <typename C, typename M>
DTCC_ALWAYS_INLINE void maskScores(const AttentionShape &p, const M *mask,
                                   int64_t b, int64_t i0, int64_t m,
                                   int64_t j0, int64_t n, C *s) {
  if (!p.hasMask)
    return;
  const Visible visible(p, i0, j0, n);
  const M *mb = mask + p.maskBase[b];
  for (int64_t i = 0; i < m; ++i) {
    const M *row = mb + (i0 + i) * p.maskRow + j0 * p.maskCol;
    C *sr = s + i * kTile;
    const int64_t keys = visible(i);
    for (int64_t j = 0; j < keys; ++j)
      sr[j] += C(Elem<M>::load(row[j * p.maskCol]));
  }
}

/// C = alpha A Bᵀ (+ C when `accumulate`): A [m x k] and B [n x k] rows
/// (n <= kTile). On the tile products (f32 where cpuHasTileProducts) B's
/// transpose goes to `packed` (k x kTile) first, and only the `triangle`
/// of the product is computed; elsewhere OpenBLAS reads B transposed and
/// computes it whole.
template <typename C>
void productNT(int64_t m, int64_t n, int64_t k, C alpha, const C *a,
               int64_t lda, const C *b, int64_t ldb, bool accumulate, C *c,
               int64_t ldc, C *packed, Triangle triangle = {}) {
  if constexpr (std::is_same_v<C, float>)
    if (cpuHasTileProducts()) {
      transposeTile(b, n, k, ldb, packed, kTile);
      tileProduct(false, m, n, k, alpha, a, lda, packed, kTile, accumulate, c,
                  ldc, triangle);
      return;
    }
  gemm(false, true, m, n, k, alpha, a, lda, b, ldb, C(accumulate ? 1 : 0), c,
       ldc);
}

/// C = alpha op(A) B (+ C when `accumulate`), op(A) A or (transA) Aᵀ: on
/// the tile products for f32 where cpuHasTileProducts (the `triangle` of
/// it), else OpenBLAS (the whole product).
template <typename C>
void product(bool transA, int64_t m, int64_t n, int64_t k, C alpha, const C *a,
             int64_t lda, const C *b, int64_t ldb, bool accumulate, C *c,
             int64_t ldc, Triangle triangle = {}) {
  if constexpr (std::is_same_v<C, float>)
    if (cpuHasTileProducts()) {
      tileProduct(transA, m, n, k, alpha, a, lda, b, ldb, accumulate, c, ldc,
                  triangle);
      return;
    }
  gemm(transA, false, m, n, k, alpha, a, lda, b, ldb, C(accumulate ? 1 : 0), c,
       ldc);
}

/// Scores of queries [i0, i0 + m) (rows `qi`, the block's first) against
/// keys [j0, j0 + n) of batch b (rows `k`), scaled and masked, into s (m x
/// n, leading dimension kTile; `packed`: productNT's). The mask is of the
/// storage type M.
template <typename C, typename M>
void blockScores(const AttentionShape &p, RowBlock<C> qi, RowBlock<C> k,
                 const M *mask, int64_t b, int64_t i0, int64_t m, int64_t j0,
                 int64_t n, C *s, C *packed) {
  productNT(m, n, p.d, C(p.scale), qi.data, qi.ld, k.data + j0 * k.ld, k.ld,
            false, s, kTile, packed,
            Visible(p, i0, j0, n).triangle(Triangle::kLowerC));
  maskScores(p, mask, b, i0, m, j0, n, s);
}

/// Lane e of one operand of a merge at width B (rowsMerged): x's lanes
/// are 0-15, y's 16-31; each group of 2B lanes takes B lanes of x, then B
/// of y, from the first half of the group's lanes or (`second`) from the
/// other half.
constexpr int mergeLane(int b, int e, bool second) {
  const int group = e / (2 * b) * (2 * b), w = e % (2 * b);
  return group + (second ? b : 0) + (w < b ? w : 16 + w - b);
}

/// One level of reduceRows16: x and y hold 2B partial results of each of
/// their rows per group of 2B lanes; the result holds B of each row of
/// both, the halves combined.
template <int B, typename C, typename F, int... E>
DTCC_ALWAYS_INLINE Lanes16<C> rowsMerged(Lanes16<C> x, Lanes16<C> y, F combine,
                                         std::integer_sequence<int, E...>) {
  return combine(__builtin_shufflevector(x, y, mergeLane(B, E, false)...),
                 __builtin_shufflevector(x, y, mergeLane(B, E, true)...));
}

/// Lane r: the `combine` reduction of v[r]'s 16 lanes, for each r < 16.
/// Four levels of pairwise merges, each halving the lanes that hold a
/// row's partial results and doubling the rows a vector holds (after the
/// level of width B, w[r] holds rows r, r + B, r + 2B, ...), so 16 rows
/// cost 15 merges instead of a 4-level tree each, and every row's lanes
/// combine in the same order.
template <typename C, typename F>
DTCC_ALWAYS_INLINE Lanes16<C> reduceRows16(const Lanes16<C> *v, F combine) {
  using Lanes = std::make_integer_sequence<int, 16>;
  Lanes16<C> w[8];
  for (int r = 0; r < 8; ++r)
    w[r] = rowsMerged<8>(v[r], v[r + 8], combine, Lanes{});
  for (int r = 0; r < 4; ++r)
    w[r] = rowsMerged<4>(w[r], w[r + 4], combine, Lanes{});
  for (int r = 0; r < 2; ++r)
    w[r] = rowsMerged<2>(w[r], w[r + 2], combine, Lanes{});
  return rowsMerged<1>(w[0], w[1], combine, Lanes{});
}

/// Lanes [0, count) of 16 (a mask for Lanes16 of C, lane l set where
/// l < count).
template <typename C> DTCC_ALWAYS_INLINE auto lanesBelow(int64_t count) {
  using I = std::conditional_t<sizeof(C) == 4, int32_t, int64_t>;
  const Lanes16<I> lane = {0, 1, 2,  3,  4,  5,  6,  7,
                           8, 9, 10, 11, 12, 13, 14, 15};
  return lane < I(std::clamp<int64_t>(count, 0, 16));
}

constexpr auto kAdd = [](auto a, auto v) DTCC_INLINE_LAMBDA { return a + v; };

/// One block of the forward's online softmax: each row of s (m x n) becomes
/// exp(s - the row's new maximum) on the keys it sees (`visible`) and zero
/// past them; the rows' maxima and sums move on, and the output rows so far
/// (ob, m x dv, row stride ldo) are rescaled to the new maximum. Rows go 16
/// at a time: their maxima and sums are reduced together (reduceRows16)
/// and their rescaling factors are one vector of exponentials. A row's
/// exponentials stop at its last vector of 16 with a key it sees (-inf, so
/// zero, past the keys within it): a causal diagonal block computes about
/// half of them. The rows of s are kTile wide, so n rounded up to 16 fits.
template <typename C>
DTCC_ALWAYS_INLINE void softmaxBlock(int64_t m, int64_t n, int64_t dv, C *s,
                                     C *rowMax, C *rowSum, C *ob, int64_t ldo,
                                     const Visible &visible) {
  using V = Lanes16<C>;
  constexpr C kNegInf = -std::numeric_limits<C>::infinity();
  const V negInf = V{} + kNegInf, zero = V{};
  // Whole vectors of 16 (the rows of s are kTile wide): lanes past a row's
  // keys are masked in registers, never filled in memory first (a vector
  // load of a freshly filled row waits for the fill's narrower stores).
  const int64_t width = (n + 15) / 16 * 16;
  for (int64_t g = 0; g < m; g += 16) {
    const int64_t rows = std::min<int64_t>(16, m - g);
    V part[16];
    V oldMax = negInf;
    for (int64_t r = 0; r < rows; ++r) {
      const C *sr = s + (g + r) * kTile;
      const int64_t keys = visible(g + r);
      V mx = negInf;
      for (int64_t j = 0; j < keys; j += 16)
        mx = kTakeGreaterOrNan(mx, lanesBelow<C>(keys - j) ? loadLanes(sr + j)
                                                           : negInf);
      part[r] = mx;
      oldMax[r] = rowMax[g + r];
    }
    for (int64_t r = rows; r < 16; ++r)
      part[r] = negInf;
    const V newMax =
        kTakeGreaterOrNan(oldMax, reduceRows16(part, kTakeGreaterOrNan));
    // exp(old - new maximum); 1 (unused) in rows that see no key yet, whose
    // difference would be -inf - -inf.
    alignas(64) C alpha[16];
    for (int r = 0; r < 16; ++r)
      alpha[r] = newMax[r] == kNegInf ? C(0) : oldMax[r] - newMax[r];
    vectorMath(MathFn::kExp, alpha, 16);
    for (int64_t r = 0; r < rows; ++r) {
      C *sr = s + (g + r) * kTile;
      part[r] = zero;
      // A row that sees no key yet has nothing to add: zeros.
      const bool hidden = newMax[r] == kNegInf;
      const int64_t exps = hidden ? 0 : visible.vectors(g + r);
      if (!hidden) {
        // s - max on the keys, -inf (exp: zero) on the rest of their last
        // vector.
        const int64_t keys = visible(g + r);
        const V shift = V{} + newMax[r];
        for (int64_t j = 0; j < exps; j += 16) {
          const V x =
              lanesBelow<C>(keys - j) ? loadLanes(sr + j) - shift : negInf;
          std::memcpy(sr + j, &x, sizeof(V));
        }
        vectorMath(MathFn::kExp, sr, exps);
        for (int64_t j = 0; j < exps; j += 16)
          part[r] += loadLanes(sr + j);
      }
      for (int64_t j = exps; j < width; j += 16)
        std::memcpy(sr + j, &zero, sizeof(V));
    }
    for (int64_t r = rows; r < 16; ++r)
      part[r] = zero;
    const V sums = reduceRows16(part, kAdd);
    for (int64_t r = 0; r < rows; ++r) {
      if (newMax[r] == kNegInf)
        continue;
      rowSum[g + r] = rowSum[g + r] * alpha[r] + sums[r];
      rowMax[g + r] = newMax[r];
      if (alpha[r] != C(1)) {
        C *orow = ob + (g + r) * ldo;
        const C scale = alpha[r];
        for (int64_t e = 0; e < dv; ++e)
          orow[e] *= scale;
      }
    }
  }
}

/// The forward's last step for a block of m rows: the outputs (row stride
/// ldo) divided by the rows' sums, and each row's log-sum-exp, kept in the
/// compute type C (AttentionPlan.h's logsumexpDType: an f32 one would round
/// the probabilities an f64 backward recomputes); the logarithms 16 rows
/// at a time.
template <typename C>
DTCC_ALWAYS_INLINE void finishRows(int64_t m, int64_t dv, const C *rowMax,
                                   const C *rowSum, C *ob, int64_t ldo,
                                   C *lse) {
  for (int64_t g = 0; g < m; g += 16) {
    const int64_t rows = std::min<int64_t>(16, m - g);
    alignas(64) C logs[16];
    for (int64_t r = 0; r < 16; ++r)
      logs[r] = r < rows ? rowSum[g + r] : C(1);
    vectorMath(MathFn::kLog, logs, 16);
    for (int64_t r = 0; r < rows; ++r) {
      const C inv = C(1) / rowSum[g + r];
      C *orow = ob + (g + r) * ldo;
      for (int64_t e = 0; e < dv; ++e)
        orow[e] *= inv;
      lse[g + r] = rowMax[g + r] + logs[r];
    }
  }
}

/// The backward's probabilities of a block, from its scores (m x n) and the
/// rows' log-sum-exp: P = exp(S - lse) on the keys each row sees
/// (`visible`), zero past them.
template <typename C>
DTCC_ALWAYS_INLINE void blockProbabilities(int64_t m, int64_t n, const C *lse,
                                           C *pb, const Visible &visible) {
  for (int64_t i = 0; i < m; ++i) {
    C *pr = pb + i * kTile;
    const C l = C(lse[i]);
    const int64_t exps = visible.vectors(i);
    for (int64_t j = 0; j < exps; ++j)
      pr[j] -= l;
    vectorMath(MathFn::kExp, pr, exps);
    std::fill(pr + visible(i), pr + n, C(0));
  }
}

/// dS = P (dP - D) in place of dP (m x n), D the rows' rowsum(dO * O), on
/// the keys each row sees (`visible`), zero past them (where dP may be
/// left uncomputed: Triangle::kLowerC).
template <typename C>
DTCC_ALWAYS_INLINE void scoreGradients(int64_t m, int64_t n, const C *pb,
                                       const C *rowDot, C *ds,
                                       const Visible &visible) {
  for (int64_t i = 0; i < m; ++i) {
    C *dr = ds + i * kTile;
    const C *pr = pb + i * kTile;
    const C dot = rowDot[i];
    const int64_t keys = visible(i);
    for (int64_t j = 0; j < keys; ++j)
      dr[j] = pr[j] * (dr[j] - dot);
    std::fill(dr + keys, dr + n, C(0));
  }
}

/// Whether the f32/f64 products read an operand of S in place: rows of the
/// compute type that do not overlap (the row stride at least the width;
/// OpenBLAS takes no smaller leading dimension). Others are copied first
/// (readRows), such as a half type's or rows broadcast with stride 0.
template <typename S> bool readsInPlace(const AttentionRows &r, int64_t width) {
  return std::is_same_v<S, ComputeT<S>> && r.row >= width;
}

/// `rows` rows of `width` elements at `from` (row stride ld) in the compute
/// type: `from` itself where readsInPlace, else widened (or copied) into
/// `to` with row stride `width`; one loop over the block where its rows are
/// adjacent.
template <typename S, typename C>
RowBlock<C> readRows(const S *from, int64_t rows, int64_t width, int64_t ld,
                     C *to) {
  if constexpr (std::is_same_v<S, C>)
    if (ld >= width)
      return {from, ld};
  if (ld == width) {
    for (int64_t i = 0; i < rows * width; ++i)
      to[i] = Elem<S>::load(from[i]);
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t e = 0; e < width; ++e)
        to[r * width + e] = Elem<S>::load(from[r * ld + e]);
  }
  return {to, width};
}

/// Zeroes `rows` rows of `width` elements (row stride ld) and nothing
/// between them: a strided output's gaps belong to other tensors.
template <typename C>
void zeroRows(C *x, int64_t rows, int64_t width, int64_t ld) {
  if (ld == width) {
    std::fill(x, x + rows * width, C(0));
    return;
  }
  for (int64_t r = 0; r < rows; ++r)
    std::fill(x + r * ld, x + r * ld + width, C(0));
}

/// Where a task computes output rows that go to `out` (row stride ld):
/// `out` itself when S is C, else `scratch` with row stride `width` (then
/// narrowRows() stores them).
template <typename C> struct OutRows {
  C *data;
  int64_t ld;
};
template <typename S, typename C>
OutRows<C> computeInto(S *out, int64_t width, int64_t ld, C *scratch) {
  if constexpr (std::is_same_v<S, C>) {
    (void)width;
    (void)scratch;
    return {out, ld};
  } else {
    (void)out;
    (void)ld;
    return {scratch, width};
  }
}

/// Rounds `rows` rows of `width` elements (row stride `width`) into `out`
/// (row stride ld); nothing where S is C (computeInto wrote them there).
template <typename S, typename C>
DTCC_ALWAYS_INLINE void narrowRows(const C *from, int64_t rows, int64_t width,
                                   S *out, int64_t ld) {
  if constexpr (std::is_same_v<S, BFloat16> && std::is_same_v<C, float>) {
    // 16 at a time, as storeBf16 rounds each.
    const int64_t full = width / 16 * 16;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t e = 0; e < full; e += 16) {
        const Lanes16<uint16_t> v = bf16Lanes(loadLanes(from + r * width + e));
        std::memcpy(out + r * ld + e, &v, sizeof(v));
      }
      for (int64_t e = full; e < width; ++e)
        out[r * ld + e] = Elem<S>::store(from[r * width + e]);
    }
  } else if constexpr (!std::is_same_v<S, C>) {
    if (ld == width) {
      for (int64_t i = 0; i < rows * width; ++i)
        out[i] = Elem<S>::store(from[i]);
      return;
    }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t e = 0; e < width; ++e)
        out[r * ld + e] = Elem<S>::store(from[r * width + e]);
  } else {
    (void)from, (void)rows, (void)width, (void)out, (void)ld;
  }
}

/// Keys [0, end) that query block [i0, i0 + m) sees.
inline int64_t keysSeen(const AttentionShape &p, int64_t i0, int64_t m) {
  return p.causal ? std::min(p.sk, i0 + m) : p.sk;
}

template <typename S>
KernelFn makeAttention(AttentionShape p, const S *q, const S *k, const S *v,
                       const S *mask, S *out, ComputeT<S> *lse) {
  using C = ComputeT<S>;
  constexpr bool kWiden = !std::is_same_v<S, C>;
  const int64_t qBlocks = (p.sq + kTile - 1) / kTile;
  // Per thread: a block of scores and the rows' max and sum; for a half
  // type also the query block, the keys and values, and the output block
  // in f32 (for f32 and f64 copies only of rows the products cannot read
  // in place); then a key block's transpose (productNT).
  const bool copyQ = !readsInPlace<S>(p.rows.q, p.d),
             copyK = !readsInPlace<S>(p.rows.k, p.d),
             copyV = !readsInPlace<S>(p.rows.v, p.dv);
  const int64_t qCopy = copyQ ? kTile * p.d : 0, kCopy = copyK ? p.sk * p.d : 0,
                vCopy = copyV ? p.sk * p.dv : 0;
  const int64_t widened = qCopy + kCopy + vCopy + (kWiden ? kTile * p.dv : 0);
  auto scratch = std::make_shared<std::vector<std::vector<C>>>(
      cpuThreads(),
      std::vector<C>(kTile * kTile + 2 * kTile + widened + kTile * p.d));
  return [=]() -> Status {
    parallelFor(p.batch * qBlocks, 1, [&](int64_t begin, int64_t end, int w) {
      C *s = (*scratch)[w].data();
      C *rowMax = s + kTile * kTile, *rowSum = rowMax + kTile;
      // The compute-type copies of the rows (none for contiguous f32 and
      // f64).
      C *qw = rowSum + kTile, *kw = qw + qCopy, *vw = kw + kCopy,
        *ow = vw + vCopy, *packed = ow + (kWiden ? kTile * p.dv : 0);
      const AttentionRows &rq = p.rows.q, &rk = p.rows.k, &rv = p.rows.v,
                          &ro = p.rows.o;
      withAvx512([&]() DTCC_INLINE_LAMBDA {
        for (int64_t t = begin; t < end; ++t) {
          const int64_t b = t / qBlocks, i0 = (t % qBlocks) * kTile;
          const int64_t m = std::min(kTile, p.sq - i0);
          const int64_t keys = keysSeen(p, i0, m);
          const RowBlock<C> qi =
              readRows(q + rq.base[b] + i0 * rq.row, m, p.d, rq.row, qw);
          const RowBlock<C> kb =
              readRows(k + rk.base[b], keys, p.d, rk.row, kw);
          const RowBlock<C> vb =
              readRows(v + rv.base[b], keys, p.dv, rv.row, vw);
          S *obOut = out + ro.base[b] + i0 * ro.row;
          const OutRows<C> ob = computeInto(obOut, p.dv, ro.row, ow);
          zeroRows(ob.data, m, p.dv, ob.ld);
          std::fill(rowMax, rowMax + m, -std::numeric_limits<C>::infinity());
          std::fill(rowSum, rowSum + m, C(0));
          for (int64_t j0 = 0; j0 < keys; j0 += kTile) {
            const int64_t n = std::min(kTile, keys - j0);
            blockScores(p, qi, kb, mask, b, i0, m, j0, n, s, packed);
            const Visible visible(p, i0, j0, n);
            softmaxBlock(m, n, p.dv, s, rowMax, rowSum, ob.data, ob.ld,
                         visible);
            // O += P · V_block.
            product(false, m, p.dv, n, C(1), s, kTile, vb.data + j0 * vb.ld,
                    vb.ld, true, ob.data, ob.ld,
                    visible.triangle(Triangle::kLowerA));
          }
          finishRows(m, p.dv, rowMax, rowSum, ob.data, ob.ld,
                     lse + b * p.sq + i0);
          narrowRows(ob.data, m, p.dv, obOut, ro.row);
        }
      });
    });
    return Status::ok();
  };
}

template <typename S>
KernelFn makeAttentionGrad(AttentionShape p, const S *q, const S *k, const S *v,
                           const S *o, const ComputeT<S> *lse,
                           const S *dout, const S *mask, S *dq, S *dk, S *dv) {
  using C = ComputeT<S>;
  constexpr bool kWiden = !std::is_same_v<S, C>;
  // Per thread: the block's P and dS, dP, and the rows' D = rowsum(dO * O);
  // for a half type also the batch's operands and gradients in f32 (for
  // f32 and f64 copies only of rows the products cannot read in place);
  // then a key block's transpose (productNT).
  auto copySize = [&](const AttentionRows &r, int64_t rows, int64_t width) {
    return readsInPlace<S>(r, width) ? int64_t(0) : rows * width;
  };
  const int64_t qCopy = copySize(p.rows.q, p.sq, p.d),
                kCopy = copySize(p.rows.k, p.sk, p.d),
                vCopy = copySize(p.rows.v, p.sk, p.dv),
                oCopy = copySize(p.rows.o, p.sq, p.dv),
                doCopy = copySize(p.rows.dout, p.sq, p.dv);
  const int64_t widened = qCopy + kCopy + vCopy + oCopy + doCopy +
                          (kWiden ? p.sq * p.d + p.sk * p.d + p.sk * p.dv : 0);
  auto scratch = std::make_shared<std::vector<std::vector<C>>>(
      cpuThreads(), std::vector<C>(2 * kTile * kTile + p.sq + widened +
                                   kTile * std::max(p.d, p.dv)));
  return [=]() -> Status {
    parallelFor(p.batch, 1, [&](int64_t begin, int64_t end, int w) {
      C *pb = (*scratch)[w].data(), *ds = pb + kTile * kTile,
        *rowDot = ds + kTile * kTile;
      // The compute-type copies of the operands (none for contiguous f32
      // and f64), then a half type's gradients in f32.
      C *qw = rowDot + p.sq, *kw = qw + qCopy, *vw = kw + kCopy,
        *ow = vw + vCopy, *dow = ow + oCopy;
      C *dqw = kWiden ? dow + doCopy : nullptr,
        *dkw = kWiden ? dqw + p.sq * p.d : nullptr,
        *dvw = kWiden ? dkw + p.sk * p.d : nullptr;
      C *packed = (kWiden ? dvw + p.sk * p.dv : dow + doCopy);
      const AttentionRows &rq = p.rows.q, &rk = p.rows.k, &rv = p.rows.v,
                          &ro = p.rows.o, &rdo = p.rows.dout, &rdq = p.rows.dq,
                          &rdk = p.rows.dk, &rdv = p.rows.dv;
      withAvx512([&]() DTCC_INLINE_LAMBDA {
        for (int64_t b = begin; b < end; ++b) {
          const RowBlock<C>
              qb = readRows(q + rq.base[b], p.sq, p.d, rq.row, qw),
              kb = readRows(k + rk.base[b], p.sk, p.d, rk.row, kw),
              vb = readRows(v + rv.base[b], p.sk, p.dv, rv.row, vw),
              ob = readRows(o + ro.base[b], p.sq, p.dv, ro.row, ow),
              dob = readRows(dout + rdo.base[b], p.sq, p.dv, rdo.row, dow);
          const C *lb = lse + b * p.sq;
          S *dqOut = dq + rdq.base[b], *dkOut = dk + rdk.base[b],
            *dvOut = dv + rdv.base[b];
          const OutRows<C> dqb = computeInto(dqOut, p.d, rdq.row, dqw),
                           dkb = computeInto(dkOut, p.d, rdk.row, dkw),
                           dvb = computeInto(dvOut, p.dv, rdv.row, dvw);
          zeroRows(dqb.data, p.sq, p.d, dqb.ld);
          zeroRows(dkb.data, p.sk, p.d, dkb.ld);
          zeroRows(dvb.data, p.sk, p.dv, dvb.ld);
          for (int64_t i = 0; i < p.sq; ++i) {
            const C *dor = dob.data + i * dob.ld, *orow = ob.data + i * ob.ld;
            rowDot[i] = C(blockedSum<C>(
                p.dv, [&](auto at) { return at(dor) * at(orow); }));
          }
          for (int64_t i0 = 0; i0 < p.sq; i0 += kTile) {
            const int64_t m = std::min(kTile, p.sq - i0);
            const int64_t keys = keysSeen(p, i0, m);
            const RowBlock<C> qi{qb.data + i0 * qb.ld, qb.ld};
            const C *doi = dob.data + i0 * dob.ld;
            for (int64_t j0 = 0; j0 < keys; j0 += kTile) {
              const int64_t n = std::min(kTile, keys - j0);
              // P = exp(S - lse), recomputed.
              const Visible visible(p, i0, j0, n);
              blockScores(p, qi, kb, mask, b, i0, m, j0, n, pb, packed);
              blockProbabilities(m, n, lb + i0, pb, visible);
              // dV_j += Pᵀ dO_i (Pᵀ's row j is zero before query j - the
              // diagonal: kUpperA).
              product(true, n, p.dv, m, C(1), pb, kTile, doi, dob.ld, true,
                      dvb.data + j0 * dvb.ld, dvb.ld,
                      visible.triangle(Triangle::kUpperA));
              // dP = dO_i V_jᵀ; dS = P (dP - D).
              productNT(m, n, p.dv, C(1), doi, dob.ld, vb.data + j0 * vb.ld,
                        vb.ld, false, ds, kTile, packed,
                        visible.triangle(Triangle::kLowerC));
              scoreGradients(m, n, pb, rowDot + i0, ds, visible);
              // dQ_i += scale dS K_j; dK_j += scale dSᵀ Q_i.
              product(false, m, p.d, n, C(p.scale), ds, kTile,
                      kb.data + j0 * kb.ld, kb.ld, true, dqb.data + i0 * dqb.ld,
                      dqb.ld, visible.triangle(Triangle::kLowerA));
              product(true, n, p.d, m, C(p.scale), ds, kTile, qi.data, qi.ld,
                      true, dkb.data + j0 * dkb.ld, dkb.ld,
                      visible.triangle(Triangle::kUpperA));
            }
          }
          narrowRows(dqb.data, p.sq, p.d, dqOut, rdq.row);
          narrowRows(dkb.data, p.sk, p.d, dkOut, rdk.row);
          narrowRows(dvb.data, p.sk, p.dv, dvOut, rdv.row);
        }
      });
    });
    return Status::ok();
  };
}

//===-- bf16 on AVX512-BF16: the block products as bf16 dot products -----===//
//
// Where the CPU has AVX512-BF16, bf16 attention multiplies its blocks with
// the bf16 dot-product instruction (Bf16Dot.h) instead of widening Q, K and
// V to f32 for OpenBLAS: twice the multiply-adds a cycle; where it also has
// AMX, the blocks' whole tiles run on AMX's tile instruction. The operands are
// packed into the instruction's layout (pairs of bf16 along the summed
// dimension, zero past the data) block by block; the probabilities P and
// the score gradients dS are rounded to bf16 for the products that take
// them (as FlashAttention and PyTorch's CPU flash attention do in bf16),
// every sum accumulates in f32, and the softmax runs in f32 as above.

/// The packing every operand goes through: word w of pairing r (its
/// elements 2w and 2w + 1 of k, `elem(r, e)` the bf16 bits of element e;
/// zero past k) at out[r * rowStride + w * wordStride], for pairings
/// [r0, r1) and whole words [w0, w1); `last` also writes the last word of
/// an odd k. The loops follow the source in memory order: element e of
/// consecutive pairings adjacent (`pairingsAdjacent`: a column of the
/// source is a word position), or a pairing's elements adjacent. The
/// packers below run the parts that fill whole vectors or 16 x 16 blocks
/// in Lanes16 and leave the rest to this loop: the same words either way.
template <bool pairingsAdjacent, typename Elem>
DTCC_ALWAYS_INLINE void
packPairs(int64_t r0, int64_t r1, int64_t w0, int64_t w1, int64_t k, bool last,
          Elem elem, uint32_t *out, int64_t rowStride, int64_t wordStride) {
  auto word = [&](int64_t r, int64_t w) DTCC_INLINE_LAMBDA {
    out[r * rowStride + w * wordStride] =
        bf16Pair(elem(r, 2 * w), elem(r, 2 * w + 1));
  };
  auto lastWord = [&](int64_t r) DTCC_INLINE_LAMBDA {
    out[r * rowStride + (k / 2) * wordStride] = bf16Pair(elem(r, k - 1), 0);
  };
  last = last && k % 2;
  if constexpr (pairingsAdjacent) {
    for (int64_t w = w0; w < w1; ++w)
      for (int64_t r = r0; r < r1; ++r)
        word(r, w);
    if (last)
      for (int64_t r = r0; r < r1; ++r)
        lastWord(r);
  } else {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t w = w0; w < w1; ++w)
        word(r, w);
      if (last)
        lastWord(r);
    }
  }
}

/// The words of 16 pairs of rows (rows 2w and 2w + 1 of `lo` and `hi`'s
/// lanes): lane c the word of lo[c] and hi[c].
DTCC_ALWAYS_INLINE Lanes16<uint32_t> wordLanes(Lanes16<uint16_t> lo,
                                               Lanes16<uint16_t> hi) {
  using U32 = Lanes16<uint32_t>;
  return __builtin_convertvector(lo, U32) |
         (__builtin_convertvector(hi, U32) << 16);
}

DTCC_ALWAYS_INLINE Lanes16<uint16_t> bitsLanes(const BFloat16 *p) {
  static_assert(sizeof(BFloat16) == 2, "bf16 is its 16 bits");
  Lanes16<uint16_t> v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

/// Rows r < rows of x (row stride ld) as a left operand along their k
/// elements: out[r * kp + w], kp = (k + 1) / 2. With k even a row's words
/// are its bytes.
DTCC_ALWAYS_INLINE void packRows(const BFloat16 *x, int64_t rows, int64_t k,
                                 int64_t ld, uint32_t *out) {
  const int64_t kp = (k + 1) / 2;
  if (k % 2 == 0) {
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(out + r * kp, x + r * ld, size_t(k) * sizeof(BFloat16));
    return;
  }
  packPairs<false>(
      0, rows, 0, k / 2, k, true,
      [&](int64_t r, int64_t e)
          DTCC_INLINE_LAMBDA { return x[r * ld + e].bits; },
      out, kp, 1);
}

/// Blocks of 16 x 16 words transposed in registers: for pairings [0, n)
/// and words [0, whole), each in whole blocks of 16, `block(j0, w0, lanes)`
/// loads the block's 16 rows of lanes as its source holds them and returns
/// where the transposed block goes in `out`: its row r at that address +
/// r * ldo. Returns the pairings and words the blocks covered.
template <typename Block>
DTCC_ALWAYS_INLINE std::pair<int64_t, int64_t>
transposedBlocks(int64_t n, int64_t whole, Block block, uint32_t *out,
                 int64_t ldo) {
  const int64_t nFull = n / 16 * 16, wFull = whole / 16 * 16;
  Lanes16<uint32_t> lanes[16];
  for (int64_t j0 = 0; j0 < nFull; j0 += 16)
    for (int64_t w0 = 0; w0 < wFull; w0 += 16) {
      uint32_t *o = block(j0, w0, lanes);
      transpose16(lanes);
      for (int r = 0; r < 16; ++r)
        std::memcpy(o + r * ldo, &lanes[r], sizeof(lanes[r]));
    }
  return {nFull, wFull};
}

/// x (n rows of k, row stride ld) as the right operand of a product with
/// its transpose: out[w * ldo + j] = the word of row j's elements 2w, 2w+1
/// (a word's two elements are adjacent in x, read as one 32-bit load):
/// 16 x 16 blocks of words transposed in registers, the rest word by word
/// down the rows (contiguous stores).
DTCC_ALWAYS_INLINE void packTransposed(const BFloat16 *x, int64_t n, int64_t k,
                                       int64_t ld, uint32_t *out,
                                       int64_t ldo) {
  static_assert(sizeof(BFloat16) == 2, "two bf16 make one word");
  const int64_t whole = k / 2;
  const auto [nFull, wFull] = transposedBlocks(
      n, whole,
      [&](int64_t j0, int64_t w0, Lanes16<uint32_t> *lanes) DTCC_INLINE_LAMBDA {
        for (int r = 0; r < 16; ++r)
          std::memcpy(&lanes[r], x + (j0 + r) * ld + 2 * w0, sizeof(lanes[r]));
        return out + w0 * ldo + j0;
      },
      out, ldo);
  auto word = [&](int64_t j, int64_t w) DTCC_INLINE_LAMBDA {
    uint32_t v; // the even element the lower half, as bf16Pair's
    std::memcpy(&v, x + j * ld + 2 * w, sizeof(v));
    out[w * ldo + j] = v;
  };
  for (int64_t w = 0; w < whole; ++w)
    for (int64_t j = w < wFull ? nFull : 0; j < n; ++j)
      word(j, w);
  if (k % 2)
    for (int64_t j = 0; j < n; ++j)
      out[whole * ldo + j] = bf16Pair(x[j * ld + k - 1].bits, 0);
}

/// x (rows of `cols`, row stride ld) as a right operand summed over its
/// rows: out[w * cols + c] = the word of rows 2w and 2w + 1 at column c.
DTCC_ALWAYS_INLINE void packRowPairs(const BFloat16 *x, int64_t rows,
                                     int64_t cols, int64_t ld,
                                     uint32_t *out) {
  const int64_t whole = rows / 2, cFull = cols / 16 * 16;
  for (int64_t w = 0; w < whole; ++w)
    for (int64_t c = 0; c < cFull; c += 16) {
      const Lanes16<uint32_t> v = wordLanes(
          bitsLanes(x + 2 * w * ld + c), bitsLanes(x + (2 * w + 1) * ld + c));
      std::memcpy(out + w * cols + c, &v, sizeof(v));
    }
  auto elem = [&](int64_t c, int64_t e)
                  DTCC_INLINE_LAMBDA { return x[e * ld + c].bits; };
  packPairs<true>(cFull, cols, 0, whole, rows, false, elem, out, 1, cols);
  packPairs<true>(0, cols, whole, whole, rows, true, elem, out, 1, cols);
}

/// An f32 block s (rows x n, leading dimension kTile) times `mul`, rounded
/// to bf16, as a left operand along n: out[r * ldo + w]. 32 elements round
/// into 16 words at a time (a word's elements are adjacent).
DTCC_ALWAYS_INLINE void packRoundedRows(const float *s, int64_t rows,
                                        int64_t n, float mul, uint32_t *out,
                                        int64_t ldo) {
  const int64_t whole = n / 2, wFull = whole / 16 * 16;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t w = 0; w < wFull; w += 16) {
      const float *sr = s + r * kTile + 2 * w;
      const Lanes16<uint16_t> lo = bf16Lanes(loadLanes(sr) * mul),
                              hi = bf16Lanes(loadLanes(sr + 16) * mul);
      std::memcpy(out + r * ldo + w, &lo, sizeof(lo));
      std::memcpy(out + r * ldo + w + 8, &hi, sizeof(hi));
    }
  packPairs<false>(
      0, rows, wFull, whole, n, true,
      [&](int64_t r, int64_t e)
          DTCC_INLINE_LAMBDA { return floatToBf16(s[r * kTile + e] * mul); },
      out, ldo, 1);
}

/// The transpose of the f32 block s (rows x n, leading dimension kTile)
/// times `mul`, rounded to bf16, as a left operand along the rows:
/// out[j * ldo + w] = the word of s[2w][j] and s[2w + 1][j]. 16 x 16
/// blocks of words made along the rows and transposed in registers.
DTCC_ALWAYS_INLINE void packRoundedColumns(const float *s, int64_t rows,
                                           int64_t n, float mul,
                                           uint32_t *out, int64_t ldo) {
  const int64_t whole = rows / 2;
  const auto [nFull, wFull] = transposedBlocks(
      n, whole,
      [&](int64_t j0, int64_t w0, Lanes16<uint32_t> *lanes) DTCC_INLINE_LAMBDA {
        for (int i = 0; i < 16; ++i) {
          const float *even = s + 2 * (w0 + i) * kTile + j0;
          lanes[i] = wordLanes(bf16Lanes(loadLanes(even) * mul),
                               bf16Lanes(loadLanes(even + kTile) * mul));
        }
        return out + j0 * ldo + w0;
      },
      out, ldo);
  auto elem = [&](int64_t j, int64_t e) DTCC_INLINE_LAMBDA {
    return floatToBf16(s[e * kTile + j] * mul);
  };
  packPairs<true>(nFull, n, 0, whole, rows, true, elem, out, ldo, 1);
  packPairs<true>(0, nFull, wFull, whole, rows, true, elem, out, ldo, 1);
}

/// Multiplies a block of scores in place by the attention's scale.
DTCC_ALWAYS_INLINE void scaleBlock(int64_t m, int64_t n, float scale,
                                   float *s) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      s[i * kTile + j] *= scale;
}

/// Per-thread scratch of the bf16 kernels: f32 values and packed words.
struct Bf16DotScratch {
  std::vector<float> values;
  std::vector<uint32_t> words;
};

KernelFn makeAttentionBf16Dot(AttentionShape p, const BFloat16 *q,
                              const BFloat16 *k, const BFloat16 *v,
                              const BFloat16 *mask, BFloat16 *out,
                              float *lse) {
  const int64_t qBlocks = (p.sq + kTile - 1) / kTile;
  const int64_t dp = (p.d + 1) / 2, pairsPerRow = kTile / 2;
  // Per thread: the scores, the rows' max and sum, the output block; the
  // query block's words, a key block's (transposed), P's, a value block's.
  auto scratch = std::make_shared<std::vector<Bf16DotScratch>>(
      cpuThreads(),
      Bf16DotScratch{
          std::vector<float>(kTile * kTile + 2 * kTile + kTile * p.dv),
          std::vector<uint32_t>(kTile * dp + dp * kTile +
                                kTile * pairsPerRow + pairsPerRow * p.dv)});
  return [=]() -> Status {
    parallelFor(p.batch * qBlocks, 1, [&](int64_t begin, int64_t end, int w) {
      Bf16DotScratch &t = (*scratch)[w];
      float *s = t.values.data(), *rowMax = s + kTile * kTile,
            *rowSum = rowMax + kTile, *ob = rowSum + kTile;
      uint32_t *qa = t.words.data(), *kt = qa + kTile * dp,
               *pa = kt + dp * kTile, *vt = pa + kTile * pairsPerRow;
      // The packing reads every operand through its row stride.
      const AttentionRows &rq = p.rows.q, &rk = p.rows.k, &rv = p.rows.v,
                          &ro = p.rows.o;
      withAvx512([&]() DTCC_INLINE_LAMBDA {
        for (int64_t task = begin; task < end; ++task) {
          const int64_t b = task / qBlocks, i0 = (task % qBlocks) * kTile;
          const int64_t m = std::min(kTile, p.sq - i0);
          const int64_t keys = keysSeen(p, i0, m);
          packRows(q + rq.base[b] + i0 * rq.row, m, p.d, rq.row, qa);
          std::fill(ob, ob + m * p.dv, 0.0f);
          std::fill(rowMax, rowMax + m, -std::numeric_limits<float>::infinity());
          std::fill(rowSum, rowSum + m, 0.0f);
          for (int64_t j0 = 0; j0 < keys; j0 += kTile) {
            const int64_t n = std::min(kTile, keys - j0);
            const int64_t np = (n + 1) / 2;
            packTransposed(k + rk.base[b] + j0 * rk.row, n, p.d, rk.row, kt,
                           kTile);
            bf16Dot(m, n, dp, qa, dp, kt, kTile, s, kTile, false);
            scaleBlock(m, n, float(p.scale), s);
            maskScores(p, mask, b, i0, m, j0, n, s);
            softmaxBlock(m, n, p.dv, s, rowMax, rowSum, ob, p.dv,
                         Visible(p, i0, j0, n));
            // O += P · V_block, P in bf16.
            packRoundedRows(s, m, n, 1.0f, pa, pairsPerRow);
            packRowPairs(v + rv.base[b] + j0 * rv.row, n, p.dv, rv.row, vt);
            bf16Dot(m, p.dv, np, pa, pairsPerRow, vt, p.dv, ob, p.dv, true);
          }
          finishRows(m, p.dv, rowMax, rowSum, ob, p.dv, lse + b * p.sq + i0);
          narrowRows(ob, m, p.dv, out + ro.base[b] + i0 * ro.row, ro.row);
        }
      });
    });
    return Status::ok();
  };
}

KernelFn makeAttentionGradBf16Dot(AttentionShape p, const BFloat16 *q,
                                  const BFloat16 *k, const BFloat16 *v,
                                  const BFloat16 *o, const float *lse,
                                  const BFloat16 *dout, const BFloat16 *mask,
                                  BFloat16 *dq, BFloat16 *dk, BFloat16 *dv) {
  const int64_t dp = (p.d + 1) / 2, dvp = (p.dv + 1) / 2;
  const int64_t pairsPerRow = kTile / 2;
  // Per thread: P and dS blocks, the rows' D = rowsum(dO * O), the batch's
  // gradients in f32; the words of the query block (along d and in row
  // pairs), of the dO block (along dv and in row pairs), of a key block
  // (transposed and in row pairs), of a value block (transposed), of P
  // transposed, of dS and of dS transposed.
  auto scratch = std::make_shared<std::vector<Bf16DotScratch>>(
      cpuThreads(),
      Bf16DotScratch{
          std::vector<float>(2 * kTile * kTile + p.sq + p.sq * p.d +
                             p.sk * p.d + p.sk * p.dv),
          std::vector<uint32_t>(kTile * dp + pairsPerRow * p.d +
                                kTile * dvp + pairsPerRow * p.dv +
                                dp * kTile + pairsPerRow * p.d + dvp * kTile +
                                3 * kTile * pairsPerRow)});
  return [=]() -> Status {
    parallelFor(p.batch, 1, [&](int64_t begin, int64_t end, int w) {
      Bf16DotScratch &t = (*scratch)[w];
      float *pb = t.values.data(), *ds = pb + kTile * kTile,
            *rowDot = ds + kTile * kTile, *dqb = rowDot + p.sq,
            *dkb = dqb + p.sq * p.d, *dvb = dkb + p.sk * p.d;
      uint32_t *qa = t.words.data(), *qPairs = qa + kTile * dp,
               *doa = qPairs + pairsPerRow * p.d,
               *doPairs = doa + kTile * dvp, *kt = doPairs + pairsPerRow * p.dv,
               *kPairs = kt + dp * kTile, *vt = kPairs + pairsPerRow * p.d,
               *pt = vt + dvp * kTile, *dsa = pt + kTile * pairsPerRow,
               *dst = dsa + kTile * pairsPerRow;
      // The packing reads every operand through its row stride; the
      // gradients accumulate in compact f32 and are rounded into their rows.
      const int64_t ldq = p.rows.q.row, ldk = p.rows.k.row,
                    ldv = p.rows.v.row, ldo = p.rows.o.row,
                    lddo = p.rows.dout.row;
      withAvx512([&]() DTCC_INLINE_LAMBDA {
        for (int64_t b = begin; b < end; ++b) {
          const BFloat16 *qb = q + p.rows.q.base[b], *kb = k + p.rows.k.base[b],
                         *vb = v + p.rows.v.base[b], *ob = o + p.rows.o.base[b],
                         *dob = dout + p.rows.dout.base[b];
          const float *lb = lse + b * p.sq;
          for (int64_t i = 0; i < p.sq; ++i) {
            const BFloat16 *dor = dob + i * lddo, *orow = ob + i * ldo;
            rowDot[i] =
                float(blockedSum<float>(p.dv, [&](auto at) DTCC_INLINE_LAMBDA {
                  return at(dor) * at(orow);
                }));
          }
          std::fill(dqb, dqb + p.sq * p.d, 0.0f);
          std::fill(dkb, dkb + p.sk * p.d, 0.0f);
          std::fill(dvb, dvb + p.sk * p.dv, 0.0f);
          const float scale = float(p.scale);
          for (int64_t i0 = 0; i0 < p.sq; i0 += kTile) {
            const int64_t m = std::min(kTile, p.sq - i0);
            const int64_t mp = (m + 1) / 2;
            const int64_t keys = keysSeen(p, i0, m);
            packRows(qb + i0 * ldq, m, p.d, ldq, qa);
            packRowPairs(qb + i0 * ldq, m, p.d, ldq, qPairs);
            packRows(dob + i0 * lddo, m, p.dv, lddo, doa);
            packRowPairs(dob + i0 * lddo, m, p.dv, lddo, doPairs);
            for (int64_t j0 = 0; j0 < keys; j0 += kTile) {
              const int64_t n = std::min(kTile, keys - j0);
              const int64_t np = (n + 1) / 2;
              // P = exp(S - lse), recomputed.
              packTransposed(kb + j0 * ldk, n, p.d, ldk, kt, kTile);
              bf16Dot(m, n, dp, qa, dp, kt, kTile, pb, kTile, false);
              scaleBlock(m, n, scale, pb);
              maskScores(p, mask, b, i0, m, j0, n, pb);
              blockProbabilities(m, n, lb + i0, pb, Visible(p, i0, j0, n));
              // dV_j += Pᵀ dO_i.
              packRoundedColumns(pb, m, n, 1.0f, pt, pairsPerRow);
              bf16Dot(n, p.dv, mp, pt, pairsPerRow, doPairs, p.dv,
                      dvb + j0 * p.dv, p.dv, true);
              // dP = dO_i V_jᵀ; dS = P (dP - D).
              packTransposed(vb + j0 * ldv, n, p.dv, ldv, vt, kTile);
              bf16Dot(m, n, dvp, doa, dvp, vt, kTile, ds, kTile, false);
              scoreGradients(m, n, pb, rowDot + i0, ds, Visible(p, i0, j0, n));
              // dQ_i += (scale dS) K_j; dK_j += (scale dS)ᵀ Q_i.
              packRoundedRows(ds, m, n, scale, dsa, pairsPerRow);
              packRowPairs(kb + j0 * ldk, n, p.d, ldk, kPairs);
              bf16Dot(m, p.d, np, dsa, pairsPerRow, kPairs, p.d,
                      dqb + i0 * p.d, p.d, true);
              packRoundedColumns(ds, m, n, scale, dst, pairsPerRow);
              bf16Dot(n, p.d, mp, dst, pairsPerRow, qPairs, p.d,
                      dkb + j0 * p.d, p.d, true);
            }
          }
          narrowRows(dqb, p.sq, p.d, dq + p.rows.dq.base[b], p.rows.dq.row);
          narrowRows(dkb, p.sk, p.d, dk + p.rows.dk.base[b], p.rows.dk.row);
          narrowRows(dvb, p.sk, p.dv, dv + p.rows.dv.base[b], p.rows.dv.row);
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
        if constexpr (std::is_same_v<S, BFloat16>)
          if (cpuHasAvx512Bf16()) {
            fn = makeAttentionBf16Dot(
                p, q.as<const S>(), k.as<const S>(), v.as<const S>(),
                mask ? mask->as<const S>() : nullptr, ctx.outputs[0].as<S>(),
                ctx.outputs[1].as<float>());
            return;
          }
        fn = makeAttention<S>(
            p, q.as<const S>(), k.as<const S>(), v.as<const S>(),
            mask ? mask->as<const S>() : nullptr, ctx.outputs[0].as<S>(),
            ctx.outputs[1].as<ComputeT<S>>());
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
        if constexpr (std::is_same_v<S, BFloat16>)
          if (cpuHasAvx512Bf16()) {
            fn = makeAttentionGradBf16Dot(
                p, q.as<const S>(), k.as<const S>(), v.as<const S>(),
                o.as<const S>(), lse.as<const float>(), dout.as<const S>(),
                mask ? mask->as<const S>() : nullptr, ctx.outputs[0].as<S>(),
                ctx.outputs[1].as<S>(), ctx.outputs[2].as<S>());
            return;
          }
        fn = makeAttentionGrad<S>(
            p, q.as<const S>(), k.as<const S>(), v.as<const S>(),
            o.as<const S>(), lse.as<const ComputeT<S>>(),
            dout.as<const S>(), mask ? mask->as<const S>() : nullptr,
            ctx.outputs[0].as<S>(), ctx.outputs[1].as<S>(),
            ctx.outputs[2].as<S>());
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
