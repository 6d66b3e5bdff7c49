//===- AttentionTensorCores.cu - f16/bf16 attention on the tensor cores ---===//
//
// dgraph.attention and dgraph.attention_grad for f16 and bf16 operands with
// head dimensions up to kAttentionTensorCoreMaxHeadDim (128), their
// products on the tensor cores (WMMA 16x16x16, float accumulation):
// FlashAttention-2's loops without the [Sq, Sk] score matrix. A block of four warps owns 64 rows
// (16 per warp) of one side and walks over tiles of the other side's rows
// staged in shared memory (zero-padded to whole 16 x 16 fragments, so every
// head dimension works); a warp's products of a tile go through shared
// memory, where two lanes per row apply scale, mask, causality and the
// softmax in float.
//
// forward:  S = Q K^T per key tile, the online softmax (running max and
//           sum, the output rescaled in shared memory), O += P V with P
//           rounded to the operands' type (as FlashAttention does);
// backward: dq by query rows (S, dP = dO V^T, dS = P (dP - D), dq += dS K,
//           the dq fragments in registers); dk, dv by key rows (S^T, dP^T,
//           dv += P^T dO, dk += dS^T Q). D = rowsum(dout * out) comes from
//           AttentionKernels.cu. No atomics: every result is summed by one
//           warp in one order, the same on every run.
//
// The semantics (masks, causality, fully masked rows, NaN) are the SIMT
// kernels' of AttentionKernels.cu, which take every other case.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cuda/AttentionCommon.cuh"
#include "runtime/device/cuda/KernelCommon.cuh"

#include <mma.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace dtcc::runtime::cuda {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
/// A block's own rows: 16 per warp (one fragment high).
constexpr int kRows = 16 * kWarps;

using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
template <typename S>
using RowA = wmma::fragment<wmma::matrix_a, 16, 16, 16, S, wmma::row_major>;
template <typename S>
using RowB = wmma::fragment<wmma::matrix_b, 16, 16, 16, S, wmma::row_major>;
template <typename S>
using ColB = wmma::fragment<wmma::matrix_b, 16, 16, 16, S, wmma::col_major>;

__host__ __device__ constexpr int pad16(int64_t n) {
  return int((n + 15) / 16 * 16);
}

/// Rows of the other side per staged tile.
__host__ __device__ constexpr int tileRows(int dp, int dvp) {
  return (dp > dvp ? dp : dvp) <= 64 ? 64 : 32;
}

/// Row strides of the shared tiles whose rows two lanes each walk (scores,
/// dP and the output in float, P and dS in the operands' type). Rows a
/// multiple of 32 banks apart, as 64 or 32 floats are, would put a
/// half-warp's sixteen rows on one bank: every access a 16-way conflict.
/// 16 bytes more per row (WMMA's ldm granule: 4 floats, 8 halves) leaves
/// two rows on a bank.
__host__ __device__ constexpr int floatStride(int cols) { return cols + 4; }
__host__ __device__ constexpr int halfStride(int cols) { return cols + 8; }

/// Regions of the dynamic shared memory, each 128-byte aligned (WMMA
/// wants 32).
struct Carver {
  size_t at = 0;
  __host__ __device__ size_t take(size_t bytes) {
    const size_t from = at;
    at = (at + bytes + 127) / 128 * 128;
    return from;
  }
};

/// The forward's shared memory: the block's Q rows, a K and a V tile, the
/// warps' scores (float) and probabilities, the output (float), and the
/// running max and sum per row.
struct ForwardLayout {
  size_t q, k, v, s, p, o, m, l, bytes;
  __host__ __device__ ForwardLayout(int dp, int dvp, int tile, size_t elem) {
    Carver c;
    q = c.take(kRows * dp * elem);
    k = c.take(size_t(tile) * dp * elem);
    v = c.take(size_t(tile) * dvp * elem);
    s = c.take(size_t(kRows) * floatStride(tile) * 4);
    p = c.take(size_t(kRows) * halfStride(tile) * elem);
    o = c.take(size_t(kRows) * floatStride(dvp) * 4);
    m = c.take(kRows * 4);
    l = c.take(kRows * 4);
    bytes = c.at;
  }
};

/// The gradient kernels' shared memory: the block's own rows of two
/// operands (widths dp and dvp), a tile of the other side's two, scores and
/// dP (float), P and dS, and lse and D for `vec` rows.
struct GradLayout {
  size_t own0, own1, tile0, tile1, s, dp, p, ds, lse, dot, bytes;
  __host__ __device__ GradLayout(int dp_, int dvp, int tile, size_t elem,
                                 int vec) {
    Carver c;
    own0 = c.take(kRows * dp_ * elem);
    own1 = c.take(kRows * dvp * elem);
    tile0 = c.take(size_t(tile) * dp_ * elem);
    tile1 = c.take(size_t(tile) * dvp * elem);
    s = c.take(size_t(kRows) * floatStride(tile) * 4);
    dp = c.take(size_t(kRows) * floatStride(tile) * 4);
    p = c.take(size_t(kRows) * halfStride(tile) * elem);
    ds = c.take(size_t(kRows) * halfStride(tile) * elem);
    lse = c.take(size_t(vec) * 4);
    dot = c.take(size_t(vec) * 4);
    bytes = c.at;
  }
};

extern __shared__ __align__(128) unsigned char tensorCoreShared[];

template <typename T> __device__ __forceinline__ T *region(size_t offset) {
  return reinterpret_cast<T *>(tensorCoreShared + offset);
}

/// dst[rows][pad] = rows [first, first + n) of src[*][dims], zeros past n
/// rows and past dims columns. Rows already a multiple of 16 elements wide
/// (head dimensions 16, 32, ..., 128) from a 16-byte aligned source copy
/// 16 bytes a load: a tile is then 4 loads a thread instead of 32 loads of
/// 2 bytes, each behind an integer division.
template <typename S>
__device__ __forceinline__ void stageRows(S *dst, const S *src, int64_t first,
                                          int n, int rows, int64_t dims,
                                          int pad) {
  static_assert(sizeof(S) == 2, "the tensor-core kernels take f16 and bf16");
  const S zero = Elem<S>::store(0.f);
  const S *from = src + first * dims;
  if (dims == pad && (reinterpret_cast<uintptr_t>(from) & 15) == 0) {
    const int perRow = pad / 8; // pad is a multiple of 16
    const uint4 *in = reinterpret_cast<const uint4 *>(from);
    uint4 *out = reinterpret_cast<uint4 *>(dst);
    for (int t = threadIdx.x; t < rows * perRow; t += kThreads)
      out[t] = t / perRow < n ? in[t] : make_uint4(0, 0, 0, 0);
    return;
  }
  for (int t = threadIdx.x; t < rows * pad; t += kThreads) {
    const int r = t / pad, c = t - r * pad;
    dst[t] = r < n && c < dims ? from[int64_t(r) * dims + c] : zero;
  }
}

/// out[16][cols] (float, row stride ldo) = a[16][depth] x b[cols][depth]^T,
/// cols and depth multiples of 16.
template <typename S>
__device__ __forceinline__ void productNT(float *out, int ldo, const S *a,
                                          int lda, const S *b, int ldb,
                                          int cols, int depth) {
  for (int c = 0; c < cols; c += 16) {
    Acc acc;
    wmma::fill_fragment(acc, 0.f);
    for (int k = 0; k < depth; k += 16) {
      RowA<S> fa;
      ColB<S> fb;
      wmma::load_matrix_sync(fa, a + k, lda);
      wmma::load_matrix_sync(fb, b + c * ldb + k, ldb);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(out + c, acc, ldo, wmma::mem_row_major);
  }
}

/// acc[c] += a[16][depth] x b[depth][16 c, 16 c + 16) for c < chunks.
template <typename S, int C>
__device__ __forceinline__ void accumulateNN(Acc (&acc)[C], int chunks,
                                             const S *a, int lda, const S *b,
                                             int ldb, int depth) {
  for (int k = 0; k < depth; k += 16) {
    RowA<S> fa;
    wmma::load_matrix_sync(fa, a + k, lda);
#pragma unroll
    for (int c = 0; c < C; ++c)
      if (c < chunks) {
        RowB<S> fb;
        wmma::load_matrix_sync(fb, b + k * ldb + c * 16, ldb);
        wmma::mma_sync(acc[c], fa, fb, acc[c]);
      }
  }
}

template <int C> __device__ __forceinline__ void zero(Acc (&acc)[C]) {
#pragma unroll
  for (int c = 0; c < C; ++c)
    wmma::fill_fragment(acc[c], 0.f);
}

/// Writes a warp's 16 rows of fragments times `scale` to rows [row0,
/// row0 + 16) of dst[rows][dims] (those below `rows`), through the warp's
/// 256-float `scratch`.
template <typename S, int C>
__device__ __forceinline__ void storeRows(S *dst, int64_t row0, int64_t rows,
                                          int64_t dims, Acc (&acc)[C],
                                          int chunks, float scale,
                                          float *scratch, int lane) {
#pragma unroll
  for (int c = 0; c < C; ++c)
    if (c < chunks) {
      __syncwarp();
      wmma::store_matrix_sync(scratch, acc[c], 16, wmma::mem_row_major);
      __syncwarp();
      for (int t = lane; t < 256; t += 32) {
        const int64_t row = row0 + t / 16, col = c * 16 + t % 16;
        if (row < rows && col < dims)
          dst[row * dims + col] = Elem<S>::store(scratch[t] * scale);
      }
    }
}

/// The larger of a and b, keeping a when b is NaN (as the SIMT kernels).
__device__ __forceinline__ float maxKeep(float a, float b) {
  return a < b ? b : a;
}

template <typename S, int C>
__global__ void __launch_bounds__(kThreads)
    attentionKernel(AttentionDims a, int64_t rowBlocks,
                    const S *__restrict__ q, const S *__restrict__ k,
                    const S *__restrict__ v, const S *__restrict__ mask,
                    S *__restrict__ out, float *__restrict__ lse) {
  const int dp = pad16(a.d), dvp = pad16(a.dv), tile = tileRows(dp, dvp);
  const ForwardLayout lay(dp, dvp, tile, sizeof(S));
  const int sStride = floatStride(tile), pStride = halfStride(tile),
            oStride = floatStride(dvp);
  S *qs = region<S>(lay.q), *ks = region<S>(lay.k), *vs = region<S>(lay.v);
  float *ss = region<float>(lay.s), *os = region<float>(lay.o);
  S *ps = region<S>(lay.p);
  float *ms = region<float>(lay.m), *ls = region<float>(lay.l);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t b = blockIdx.x / rowBlocks;
  const int64_t i0 = (blockIdx.x % rowBlocks) * kRows;
  stageRows(qs, q + b * a.sq * a.d, i0, int(std::min<int64_t>(kRows, a.sq - i0)),
            kRows, a.d, dp);
  for (int t = threadIdx.x; t < kRows * oStride; t += kThreads)
    os[t] = 0;
  for (int t = threadIdx.x; t < kRows; t += kThreads) {
    ms[t] = -INFINITY;
    ls[t] = 0;
  }
  __syncthreads(); // read at the end even without keys
  // The warp's slices, and this lane's row of them (two lanes a row).
  const S *qw = qs + warp * 16 * dp;
  float *sw = ss + warp * 16 * sStride, *ow = os + warp * 16 * oStride;
  S *pw = ps + warp * 16 * pStride;
  const int r = lane / 2, h = lane % 2, row = warp * 16 + r;
  const int64_t i = i0 + row;
  const S *mrow = mask && i < a.sq
                      ? mask + attentionMaskBase(a, b) + i * a.maskRow
                      : nullptr;
  const float scale = float(a.scale);
  const int64_t keys = a.causal ? std::min(a.sk, i0 + kRows) : a.sk;
  for (int64_t j0 = 0; j0 < keys; j0 += tile) {
    const int n = int(std::min<int64_t>(tile, keys - j0));
    __syncthreads();
    stageRows(ks, k + b * a.sk * a.d, j0, n, tile, a.d, dp);
    stageRows(vs, v + b * a.sk * a.dv, j0, n, tile, a.dv, dvp);
    __syncthreads();
    productNT(sw, sStride, qw, dp, ks, dp, tile, dp);
    __syncwarp();
    const float mOld = ms[row];
    float tileMax = mOld;
    for (int c = h; c < n; c += 2) {
      float s = sw[r * sStride + c] * scale;
      if (mrow)
        s += Elem<S>::load(mrow[(j0 + c) * a.maskCol]);
      if (a.causal && j0 + c > i)
        s = -INFINITY;
      sw[r * sStride + c] = s;
      tileMax = maxKeep(tileMax, s);
    }
    tileMax = maxKeep(tileMax, __shfl_xor_sync(0xffffffffu, tileMax, 1));
    // Every key so far hidden: P = 0 adds nothing and nothing rescales.
    const bool none = tileMax == -INFINITY;
    const float alpha = none ? 1.f : __expf(mOld - tileMax);
    float sum = 0;
    for (int c = h; c < tile; c += 2) {
      const float p =
          !none && c < n ? __expf(sw[r * sStride + c] - tileMax) : 0.f;
      pw[r * pStride + c] = Elem<S>::store(p);
      sum += p;
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    for (int c = h; c < dvp; c += 2)
      ow[r * oStride + c] *= alpha;
    __syncwarp();
    if (h == 0) {
      ms[row] = none ? mOld : tileMax;
      ls[row] = ls[row] * alpha + sum;
    }
    Acc acc[C];
#pragma unroll
    for (int c = 0; c < C; ++c)
      if (c < dvp / 16)
        wmma::load_matrix_sync(acc[c], ow + c * 16, oStride,
                               wmma::mem_row_major);
    accumulateNN(acc, dvp / 16, pw, pStride, vs, dvp, tile);
#pragma unroll
    for (int c = 0; c < C; ++c)
      if (c < dvp / 16)
        wmma::store_matrix_sync(ow + c * 16, acc[c], oStride,
                                wmma::mem_row_major);
  }
  __syncwarp();
  const int64_t w0 = i0 + warp * 16;
  for (int64_t t = lane; t < 16 * a.dv; t += 32) {
    const int rr = int(t / a.dv);
    const int64_t c = t % a.dv;
    if (w0 + rr < a.sq)
      out[(b * a.sq + w0 + rr) * a.dv + c] =
          Elem<S>::store(ow[rr * oStride + c] / ls[warp * 16 + rr]);
  }
  if (lane < 16 && w0 + lane < a.sq)
    lse[b * a.sq + w0 + lane] =
        ms[warp * 16 + lane] + logf(ls[warp * 16 + lane]);
}

/// dq by query rows.
template <typename S, int C>
__global__ void __launch_bounds__(kThreads)
    attentionGradQueryKernel(AttentionDims a, int64_t rowBlocks,
                             const S *__restrict__ q, const S *__restrict__ k,
                             const S *__restrict__ v,
                             const float *__restrict__ lse,
                             const S *__restrict__ dout,
                             const S *__restrict__ mask,
                             const float *__restrict__ rowDot,
                             S *__restrict__ dq) {
  const int dp = pad16(a.d), dvp = pad16(a.dv), tile = tileRows(dp, dvp);
  const GradLayout lay(dp, dvp, tile, sizeof(S), kRows);
  const int sStride = floatStride(tile), pStride = halfStride(tile);
  S *qs = region<S>(lay.own0), *dos = region<S>(lay.own1);
  S *ks = region<S>(lay.tile0), *vs = region<S>(lay.tile1);
  float *ss = region<float>(lay.s), *dps = region<float>(lay.dp);
  S *dss = region<S>(lay.ds);
  float *ls = region<float>(lay.lse), *dots = region<float>(lay.dot);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t b = blockIdx.x / rowBlocks;
  const int64_t i0 = (blockIdx.x % rowBlocks) * kRows;
  const int own = int(std::min<int64_t>(kRows, a.sq - i0));
  stageRows(qs, q + b * a.sq * a.d, i0, own, kRows, a.d, dp);
  stageRows(dos, dout + b * a.sq * a.dv, i0, own, kRows, a.dv, dvp);
  for (int t = threadIdx.x; t < kRows; t += kThreads) {
    ls[t] = t < own ? lse[b * a.sq + i0 + t] : 0.f;
    dots[t] = t < own ? rowDot[b * a.sq + i0 + t] : 0.f;
  }
  const S *qw = qs + warp * 16 * dp, *dow = dos + warp * 16 * dvp;
  float *sw = ss + warp * 16 * sStride, *dpw = dps + warp * 16 * sStride;
  S *dsw = dss + warp * 16 * pStride;
  const int r = lane / 2, h = lane % 2, row = warp * 16 + r;
  const int64_t i = i0 + row;
  const S *mrow = mask && i < a.sq
                      ? mask + attentionMaskBase(a, b) + i * a.maskRow
                      : nullptr;
  const float scale = float(a.scale);
  Acc dqa[C];
  zero(dqa);
  const int64_t keys = a.causal ? std::min(a.sk, i0 + kRows) : a.sk;
  for (int64_t j0 = 0; j0 < keys; j0 += tile) {
    const int n = int(std::min<int64_t>(tile, keys - j0));
    __syncthreads();
    stageRows(ks, k + b * a.sk * a.d, j0, n, tile, a.d, dp);
    stageRows(vs, v + b * a.sk * a.dv, j0, n, tile, a.dv, dvp);
    __syncthreads();
    productNT(sw, sStride, qw, dp, ks, dp, tile, dp);
    productNT(dpw, sStride, dow, dvp, vs, dvp, tile, dvp);
    __syncwarp();
    const float l = ls[row], dot = dots[row];
    for (int c = h; c < tile; c += 2) {
      float ds = 0;
      if (c < n) {
        const int64_t j = j0 + c;
        float s = sw[r * sStride + c] * scale;
        if (mrow)
          s += Elem<S>::load(mrow[j * a.maskCol]);
        const float p = a.causal && j > i ? 0.f : __expf(s - l);
        ds = p * (dpw[r * sStride + c] - dot);
      }
      dsw[r * pStride + c] = Elem<S>::store(ds);
    }
    __syncwarp();
    accumulateNN(dqa, dp / 16, dsw, pStride, ks, dp, tile);
  }
  storeRows(dq + b * a.sq * a.d, i0 + warp * 16, a.sq, a.d, dqa, dp / 16,
            scale, sw, lane);
}

/// dk, dv by key rows.
template <typename S, int C>
__global__ void __launch_bounds__(kThreads)
    attentionGradKeyKernel(AttentionDims a, int64_t rowBlocks,
                           const S *__restrict__ q, const S *__restrict__ k,
                           const S *__restrict__ v,
                           const float *__restrict__ lse,
                           const S *__restrict__ dout,
                           const S *__restrict__ mask,
                           const float *__restrict__ rowDot,
                           S *__restrict__ dk, S *__restrict__ dv) {
  const int dp = pad16(a.d), dvp = pad16(a.dv), tile = tileRows(dp, dvp);
  const GradLayout lay(dp, dvp, tile, sizeof(S), tile);
  const int sStride = floatStride(tile), pStride = halfStride(tile);
  S *ks = region<S>(lay.own0), *vs = region<S>(lay.own1);
  S *qs = region<S>(lay.tile0), *dos = region<S>(lay.tile1);
  float *ss = region<float>(lay.s), *dps = region<float>(lay.dp);
  S *pss = region<S>(lay.p), *dss = region<S>(lay.ds);
  float *ls = region<float>(lay.lse), *dots = region<float>(lay.dot);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t b = blockIdx.x / rowBlocks;
  const int64_t j0 = (blockIdx.x % rowBlocks) * kRows;
  const int own = int(std::min<int64_t>(kRows, a.sk - j0));
  stageRows(ks, k + b * a.sk * a.d, j0, own, kRows, a.d, dp);
  stageRows(vs, v + b * a.sk * a.dv, j0, own, kRows, a.dv, dvp);
  const S *kw = ks + warp * 16 * dp, *vw = vs + warp * 16 * dvp;
  float *sw = ss + warp * 16 * sStride, *dpw = dps + warp * 16 * sStride;
  S *pw = pss + warp * 16 * pStride, *dsw = dss + warp * 16 * pStride;
  const int r = lane / 2, h = lane % 2;
  const int64_t j = j0 + warp * 16 + r;
  const S *mcol = mask && j < a.sk
                      ? mask + attentionMaskBase(a, b) + j * a.maskCol
                      : nullptr;
  const float scale = float(a.scale);
  Acc dka[C], dva[C];
  zero(dka);
  zero(dva);
  // Causal: queries before the block's first key see none of its keys.
  for (int64_t t0 = a.causal ? j0 : 0; t0 < a.sq; t0 += tile) {
    const int n = int(std::min<int64_t>(tile, a.sq - t0));
    __syncthreads();
    stageRows(qs, q + b * a.sq * a.d, t0, n, tile, a.d, dp);
    stageRows(dos, dout + b * a.sq * a.dv, t0, n, tile, a.dv, dvp);
    for (int t = threadIdx.x; t < tile; t += kThreads) {
      ls[t] = t < n ? lse[b * a.sq + t0 + t] : 0.f;
      dots[t] = t < n ? rowDot[b * a.sq + t0 + t] : 0.f;
    }
    __syncthreads();
    productNT(sw, sStride, kw, dp, qs, dp, tile, dp);
    productNT(dpw, sStride, vw, dvp, dos, dvp, tile, dvp);
    __syncwarp();
    for (int c = h; c < tile; c += 2) {
      float p = 0, ds = 0;
      if (c < n) {
        const int64_t i = t0 + c;
        float s = sw[r * sStride + c] * scale;
        if (mcol)
          s += Elem<S>::load(mcol[i * a.maskRow]);
        p = a.causal && j > i ? 0.f : __expf(s - ls[c]);
        ds = p * (dpw[r * sStride + c] - dots[c]);
      }
      pw[r * pStride + c] = Elem<S>::store(p);
      dsw[r * pStride + c] = Elem<S>::store(ds);
    }
    __syncwarp();
    accumulateNN(dva, dvp / 16, pw, pStride, dos, dvp, tile);
    accumulateNN(dka, dp / 16, dsw, pStride, qs, dp, tile);
  }
  const int64_t w0 = j0 + warp * 16;
  storeRows(dk + b * a.sk * a.d, w0, a.sk, a.d, dka, dp / 16, scale, sw, lane);
  storeRows(dv + b * a.sk * a.dv, w0, a.sk, a.dv, dva, dvp / 16, 1.f, sw,
            lane);
}

template <int N> using Int = std::integral_constant<int, N>;

/// Calls fn(S{}, Int<C>{}) for the half type and the fragments a row of
/// the padded head dimension takes (4 up to 64, 8 up to
/// kAttentionTensorCoreMaxHeadDim).
template <typename Fn>
bool visitTensorCoreCase(DType dtype, const AttentionDims &a, Fn &&fn) {
  static_assert(kAttentionTensorCoreMaxHeadDim <= 8 * 16);
  const int widest = std::max(pad16(a.d), pad16(a.dv));
  auto byWidth = [&](auto tag) {
    if (widest <= 64)
      fn(tag, Int<4>{});
    else
      fn(tag, Int<8>{});
  };
  switch (dtype) {
  case DType::kF16: byWidth(__half{}); return true;
  case DType::kBF16: byWidth(__nv_bfloat16{}); return true;
  default: return false;
  }
}

/// Launches `kernel` with `bytes` of dynamic shared memory (past the 48 KiB
/// a launch gets without asking).
template <typename Kernel, typename... Args>
cudaError_t launchShared(Kernel kernel, int64_t blocks, size_t bytes,
                         cudaStream_t stream, Args... args) {
  cudaError_t err = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
  if (err != cudaSuccess)
    return err;
  kernel<<<dim3(unsigned(blocks)), kThreads, bytes, stream>>>(args...);
  return cudaGetLastError();
}

} // namespace

bool attentionOnTensorCores(DType dtype, const AttentionDims &a) {
  return (dtype == DType::kF16 || dtype == DType::kBF16) && a.d > 0 &&
         a.dv > 0 && a.d <= kAttentionTensorCoreMaxHeadDim &&
         a.dv <= kAttentionTensorCoreMaxHeadDim;
}

cudaError_t launchAttentionTensorCores(DType dtype, const AttentionDims &a,
                                       const void *q, const void *k,
                                       const void *v, const void *mask,
                                       void *out, float *lse,
                                       cudaStream_t stream) {
  if (!attentionOnTensorCores(dtype, a))
    return cudaErrorInvalidValue;
  if (a.batch * a.sq == 0)
    return cudaSuccess;
  cudaError_t err = cudaErrorInvalidValue;
  visitTensorCoreCase(dtype, a, [&](auto tag, auto chunks) {
    using S = decltype(tag);
    constexpr int C = decltype(chunks)::value;
    const int dp = pad16(a.d), dvp = pad16(a.dv);
    const int64_t rowBlocks = (a.sq + kRows - 1) / kRows;
    err = launchShared(attentionKernel<S, C>, a.batch * rowBlocks,
                       ForwardLayout(dp, dvp, tileRows(dp, dvp), sizeof(S)).bytes,
                       stream, a, rowBlocks, static_cast<const S *>(q),
                       static_cast<const S *>(k), static_cast<const S *>(v),
                       static_cast<const S *>(mask), static_cast<S *>(out),
                       lse);
  });
  return err;
}

cudaError_t launchAttentionGradTensorCores(
    DType dtype, const AttentionDims &a, const void *q, const void *k,
    const void *v, const float *lse, const void *dout, const void *mask,
    const float *rowDot, void *dq, void *dk, void *dv, cudaStream_t stream) {
  if (!attentionOnTensorCores(dtype, a))
    return cudaErrorInvalidValue;
  cudaError_t err = cudaSuccess;
  visitTensorCoreCase(dtype, a, [&](auto tag, auto chunks) {
    using S = decltype(tag);
    constexpr int C = decltype(chunks)::value;
    const int dp = pad16(a.d), dvp = pad16(a.dv), tile = tileRows(dp, dvp);
    const S *qs = static_cast<const S *>(q), *ks = static_cast<const S *>(k),
            *vs = static_cast<const S *>(v),
            *dos = static_cast<const S *>(dout),
            *ms = static_cast<const S *>(mask);
    if (a.batch * a.sq > 0) {
      const int64_t rowBlocks = (a.sq + kRows - 1) / kRows;
      err = launchShared(attentionGradQueryKernel<S, C>, a.batch * rowBlocks,
                         GradLayout(dp, dvp, tile, sizeof(S), kRows).bytes,
                         stream, a, rowBlocks, qs, ks, vs, lse, dos, ms,
                         rowDot, static_cast<S *>(dq));
      if (err != cudaSuccess)
        return;
    }
    if (a.batch * a.sk > 0) {
      const int64_t rowBlocks = (a.sk + kRows - 1) / kRows;
      err = launchShared(attentionGradKeyKernel<S, C>, a.batch * rowBlocks,
                         GradLayout(dp, dvp, tile, sizeof(S), tile).bytes,
                         stream, a, rowBlocks, qs, ks, vs, lse, dos, ms,
                         rowDot, static_cast<S *>(dk), static_cast<S *>(dv));
    }
  });
  return err;
}

} // namespace dtcc::runtime::cuda
