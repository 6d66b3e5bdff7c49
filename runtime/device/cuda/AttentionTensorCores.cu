//===- AttentionTensorCores.cu - f16/bf16 attention on the tensor cores ---===//
//
// dgraph.attention and dgraph.attention_grad for f16 and bf16 operands with
// head dimensions up to kAttentionTensorCoreMaxHeadDim (128), their
// products on the tensor cores (mma.sync m16n8k16, float accumulation):
// FlashAttention-2's loops without the [Sq, Sk] score matrix. A block of
// four warps owns 64 rows (16 per warp) of one side and walks over tiles of
// the other side's rows staged in shared memory (zero-padded to whole
// 16-wide fragments, so every head dimension works). A warp's scores,
// probabilities and accumulators stay in the registers of the PTX
// fragments (thread `lane` holds rows g = lane / 4 and g + 8, columns
// 2 (lane % 4) and the next of each 8-wide slice); the softmax runs on them
// with a row's four lanes reduced by shuffles, and the probabilities feed
// the next product as its A fragments without a trip through shared
// memory. Staged rows are padded by 16 bytes, which leaves the fragments'
// 32-bit loads and ldmatrix's row loads free of bank conflicts.
//
// forward:  S = Q K^T per key tile, the online softmax (running max and
//           sum, the output rescaled in registers), O += P V with P rounded
//           to the operands' type (as FlashAttention does);
// backward: dq by query rows (S, dP = dO V^T, dS = P (dP - D), dq += dS K);
//           dk, dv by key rows (S^T, dP^T, dv += P^T dO, dk += dS^T Q).
//           D = rowsum(dout * out) comes from AttentionKernels.cu. No
//           atomics: every result is summed by one warp in one order, the
//           same on every run.
//
// The semantics (masks, causality, fully masked rows, NaN) and the
// operands' layouts (AttentionDims::rows) are the SIMT kernels' of
// AttentionKernels.cu, which take every other case. Rows that are 16-byte
// aligned and whole stage 16 bytes a thread, others element by element.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cuda/AttentionCommon.cuh"
#include "runtime/device/cuda/KernelCommon.cuh"

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace dtcc::runtime::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
/// A block's own rows: 16 per warp (one fragment high).
constexpr int kRows = 16 * kWarps;

__host__ __device__ constexpr int pad16(int64_t n) {
  return int((n + 15) / 16 * 16);
}

/// Regions of the dynamic shared memory, each 128-byte aligned (ldmatrix
/// and the 16-byte staging stores want 16).
struct Carver {
  size_t at = 0;
  __host__ __device__ size_t take(size_t bytes) {
    const size_t from = at;
    at = (at + bytes + 127) / 128 * 128;
    return from;
  }
};

extern __shared__ __align__(128) unsigned char tensorCoreShared[];

template <typename T> __device__ __forceinline__ T *region(size_t offset) {
  return reinterpret_cast<T *>(tensorCoreShared + offset);
}

/// The larger of a and b, keeping a when b is NaN (as the SIMT kernels).
__device__ __forceinline__ float maxKeep(float a, float b) {
  return a < b ? b : a;
}

/// Row stride of a staged operand of padded width `pad`.
__host__ __device__ constexpr int stagedStride(int pad) { return pad + 8; }

/// dst[rows][ld] = rows [first, first + n) of src (rows of `dims` elements,
/// `srcLd` apart), zeros past n rows and past dims columns (up to pad, a
/// multiple of 16). Whole rows whose starts are all 16-byte aligned move
/// 16 bytes a thread.
template <typename S>
__device__ __forceinline__ void stageStrided(S *dst, int ld, const S *src,
                                             int64_t srcLd, int64_t first,
                                             int n, int rows, int64_t dims,
                                             int pad) {
  const S *from = src + first * srcLd;
  if (dims == pad && alignedTo(from, 16) && srcLd % 8 == 0) {
    const int perRow = pad / 8;
    for (int t = threadIdx.x; t < rows * perRow; t += kThreads) {
      const int r = t / perRow, c = t - r * perRow;
      *reinterpret_cast<uint4 *>(dst + r * ld + c * 8) =
          r < n ? *reinterpret_cast<const uint4 *>(from + r * srcLd + c * 8)
                : make_uint4(0, 0, 0, 0);
    }
    return;
  }
  const S zero = Elem<S>::store(0.f);
  for (int t = threadIdx.x; t < rows * pad; t += kThreads) {
    const int r = t / pad, c = t - r * pad;
    dst[r * ld + c] = r < n && c < dims ? from[r * srcLd + c] : zero;
  }
}

/// Two values as one 32-bit register of S x 2, `lo` in the low half (the
/// lower column of a fragment).
template <typename S>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<S, __half>) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
  } else {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
  }
}

__device__ __forceinline__ uint32_t load32(const void *p) {
  return *reinterpret_cast<const uint32_t *>(p);
}

/// d += a x b: a 16 x 16 (row), b 16 x 8 (col), d 16 x 8 in float.
template <typename S>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4],
                                         uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<S, __half>)
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// The A fragment of 16 rows x columns [16 kk, 16 kk + 16) of x[*][ld]
/// (the warp's rows start at x).
template <typename S>
__device__ __forceinline__ void loadA(uint32_t (&a)[4], const S *x, int ld,
                                      int kk, int lane) {
  const S *p = x + (lane / 4) * ld + kk * 16 + 2 * (lane % 4);
  a[0] = load32(p);
  a[1] = load32(p + 8 * ld);
  a[2] = load32(p + 8);
  a[3] = load32(p + 8 * ld + 8);
}

/// S[16][8 NT] += x[16][depth] y[8 NT][depth]^T: A fragments from the warp's
/// rows of x, B fragments from rows of y (both staged, stride ld), depth a
/// multiple of 16.
template <typename S, int NT>
__device__ __forceinline__ void productNTRegs(float (&s)[NT][4], const S *x,
                                              const S *y, int ld, int depth,
                                              int lane) {
  for (int kk = 0; kk < depth / 16; ++kk) {
    uint32_t a[4];
    loadA(a, x, ld, kk, lane);
#pragma unroll
    for (int nn = 0; nn < NT; ++nn) {
      const S *p = y + (nn * 8 + lane / 4) * ld + kk * 16 + 2 * (lane % 4);
      mma16816<S>(s[nn], a, load32(p), load32(p + 8));
    }
  }
}

template <int N>
__device__ __forceinline__ void zeroFragments(float (&x)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
    x[i][0] = x[i][1] = x[i][2] = x[i][3] = 0.f;
}

/// The gradient kernels' two recomputed products of a tile: s = x0 y0^T
/// (depth d0, stride ld0) and dp = x1 y1^T (depth d1, stride ld1).
template <typename S, int NT>
__device__ __forceinline__ void
recomputeProducts(float (&s)[NT][4], float (&dp)[NT][4], const S *x0,
                  const S *y0, int ld0, int d0, const S *x1, const S *y1,
                  int ld1, int d1, int lane) {
  zeroFragments(s);
  zeroFragments(dp);
  productNTRegs<S, NT>(s, x0, y0, ld0, d0, lane);
  productNTRegs<S, NT>(dp, x1, y1, ld1, d1, lane);
}

/// Four transposed 8 x 8 matrices of a staged operand: the B fragments of
/// rows [16 kk, 16 kk + 16) and columns [8 c, 8 c + 16) (b0, b1 of slice c,
/// then of slice c + 1).
template <typename S>
__device__ __forceinline__ void loadBTrans(uint32_t (&r)[4], const S *y, int ld,
                                           int kk, int c, int lane) {
  const S *p = y + (kk * 16 + (lane & 15)) * ld + c * 8 + (lane >> 4) * 8;
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 "
               "{%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

/// acc[16][8 NO] += P[16][8 NT] y[8 NT][width]: P the warp's float
/// fragments, rounded to S as A fragments; y staged (stride ld), its first
/// `width` columns (a multiple of 16).
template <typename S, int NT, int NO>
__device__ __forceinline__ void
accumulateRegs(float (&acc)[NO][4], const float (&p)[NT][4], const S *y, int ld,
               int width, int lane) {
#pragma unroll
  for (int kk = 0; kk < NT / 2; ++kk) {
    const uint32_t a[4] = {pack2<S>(p[2 * kk][0], p[2 * kk][1]),
                           pack2<S>(p[2 * kk][2], p[2 * kk][3]),
                           pack2<S>(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                           pack2<S>(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
    for (int c = 0; c < NO; c += 2)
      if (c < width / 8) {
        uint32_t b[4];
        loadBTrans(b, y, ld, kk, c, lane);
        mma16816<S>(acc[c], a, b[0], b[1]);
        mma16816<S>(acc[c + 1], a, b[2], b[3]);
      }
  }
}

/// Rows row0 + g and row0 + g + 8 (those below `rows`) of dst (rows of
/// `dims` elements, `ld` apart) from the warp's fragments times `scale`.
template <typename S, int NO>
__device__ __forceinline__ void
storeRegs(S *dst, int64_t ld, int64_t row0, int64_t rows, int64_t dims,
          const float (&acc)[NO][4], float scale, int lane) {
  const bool pairs = dims % 2 == 0 && ld % 2 == 0 && alignedTo(dst, 4);
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int64_t row = row0 + lane / 4 + 8 * hr;
    if (row >= rows)
      continue;
    S *out = dst + row * ld;
#pragma unroll
    for (int c = 0; c < NO; ++c) {
      const int64_t col = c * 8 + 2 * (lane % 4);
      const float x0 = acc[c][2 * hr] * scale, x1 = acc[c][2 * hr + 1] * scale;
      if (pairs && col + 1 < dims) {
        *reinterpret_cast<uint32_t *>(out + col) = pack2<S>(x0, x1);
      } else {
        if (col < dims)
          out[col] = Elem<S>::store(x0);
        if (col + 1 < dims)
          out[col + 1] = Elem<S>::store(x1);
      }
    }
  }
}

/// The staged shared memory of the register kernels: the block's own rows
/// of up to two operands and a tile of the other side's (a width of 0
/// takes nothing), with `vec` floats twice (lse and rowDot of a tile's
/// queries).
struct StagedLayout {
  size_t own0, own1, tile0, tile1, lse, dot, bytes;
  __host__ __device__ StagedLayout(int own0Width, int own1Width, int tile0Width,
                                   int tile1Width, int ownRows, int tile,
                                   size_t elem, int vec) {
    auto rows = [&](int n, int width) {
      return width ? size_t(n) * stagedStride(width) * elem : size_t(0);
    };
    Carver c;
    own0 = c.take(rows(ownRows, own0Width));
    own1 = c.take(rows(ownRows, own1Width));
    tile0 = c.take(rows(tile, tile0Width));
    tile1 = c.take(rows(tile, tile1Width));
    lse = c.take(size_t(vec) * 4);
    dot = c.take(size_t(vec) * 4);
    bytes = c.at;
  }
};

/// The forward: a block's 64 query rows (16 a warp) over tiles of T keys.
/// W: the widest padded head dimension's bound (64 or 128). Blocks of a
/// batch entry run their last rows first, which see the most keys under
/// causality.
template <typename S, int W, int T>
__global__ void __launch_bounds__(kThreads)
    mmaAttentionKernel(AttentionDims a, int64_t rowBlocks,
                       const S *__restrict__ q, const S *__restrict__ k,
                       const S *__restrict__ v, const S *__restrict__ mask,
                       S *__restrict__ out, float *__restrict__ lse) {
  constexpr int NT = T / 8, NO = W / 8;
  const int dp = pad16(a.d), dvp = pad16(a.dv);
  const int ldq = stagedStride(dp), ldv = stagedStride(dvp);
  const StagedLayout lay(dp, 0, dp, dvp, kRows, T, sizeof(S), 0);
  S *qs = region<S>(lay.own0), *ks = region<S>(lay.tile0),
    *vs = region<S>(lay.tile1);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t b = blockIdx.x / rowBlocks;
  const int64_t i0 = (rowBlocks - 1 - blockIdx.x % rowBlocks) * kRows;
  __shared__ int64_t base[4]; // q, k, v, out
  attentionBases(a, {&a.rows.q, &a.rows.k, &a.rows.v, &a.rows.o}, b, base);
  stageStrided(qs, ldq, q + base[0], a.rows.q.row, i0,
               int(std::min<int64_t>(kRows, a.sq - i0)), kRows, a.d, dp);
  const S *qw = qs + warp * 16 * ldq;
  const int64_t row0 = i0 + warp * 16 + lane / 4;
  const S *maskBase = mask ? mask + attentionMaskBase(a, b) : nullptr;
  const float scale = float(a.scale);
  float o[NO][4];
  zeroFragments(o);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const int64_t keys = a.causal ? std::min(a.sk, i0 + kRows) : a.sk;
  for (int64_t j0 = 0; j0 < keys; j0 += T) {
    const int n = int(std::min<int64_t>(T, keys - j0));
    __syncthreads();
    stageStrided(ks, ldq, k + base[1], a.rows.k.row, j0, n, T, a.d, dp);
    stageStrided(vs, ldv, v + base[2], a.rows.v.row, j0, n, T, a.dv, dvp);
    __syncthreads();
    float s[NT][4];
    zeroFragments(s);
    productNTRegs<S, NT>(s, qw, ks, ldq, dp, lane);
    float tileMax[2] = {m[0], m[1]};
#pragma unroll
    for (int nn = 0; nn < NT; ++nn)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int hr = e >> 1, col = nn * 8 + 2 * (lane % 4) + (e & 1);
        const int64_t i = row0 + 8 * hr, j = j0 + col;
        float x = -INFINITY;
        if (col < n && !(a.causal && j > i)) {
          x = s[nn][e] * scale;
          if (maskBase && i < a.sq)
            x += Elem<S>::load(maskBase[i * a.maskRow + j * a.maskCol]);
        }
        s[nn][e] = x;
        tileMax[hr] = maxKeep(tileMax[hr], x);
      }
    float alpha[2], sum[2] = {0.f, 0.f};
    bool none[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      tileMax[hr] =
          maxKeep(tileMax[hr], __shfl_xor_sync(0xffffffffu, tileMax[hr], 1));
      tileMax[hr] =
          maxKeep(tileMax[hr], __shfl_xor_sync(0xffffffffu, tileMax[hr], 2));
      // Every key so far hidden: P = 0 adds nothing and nothing rescales.
      none[hr] = tileMax[hr] == -INFINITY;
      alpha[hr] = none[hr] ? 1.f : __expf(m[hr] - tileMax[hr]);
    }
#pragma unroll
    for (int nn = 0; nn < NT; ++nn)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int hr = e >> 1, col = nn * 8 + 2 * (lane % 4) + (e & 1);
        const float p =
            !none[hr] && col < n ? __expf(s[nn][e] - tileMax[hr]) : 0.f;
        s[nn][e] = p;
        sum[hr] += p;
      }
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      sum[hr] += __shfl_xor_sync(0xffffffffu, sum[hr], 1);
      sum[hr] += __shfl_xor_sync(0xffffffffu, sum[hr], 2);
      l[hr] = l[hr] * alpha[hr] + sum[hr];
      if (!none[hr])
        m[hr] = tileMax[hr];
    }
#pragma unroll
    for (int c = 0; c < NO; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        o[c][e] *= alpha[e >> 1];
    accumulateRegs<S, NT, NO>(o, s, vs, ldv, dvp, lane);
  }
  // out = O / l row by row (a fully hidden row divides 0 by 0, as the
  // SIMT kernels do), lse = m + log l.
#pragma unroll
  for (int c = 0; c < NO; ++c)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      o[c][e] /= l[e >> 1];
  storeRegs<S, NO>(out + base[3], a.rows.o.row, i0 + warp * 16, a.sq, a.dv, o,
                   1.f, lane);
  if (lane % 4 == 0)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr)
      if (row0 + 8 * hr < a.sq)
        lse[b * a.sq + row0 + 8 * hr] = m[hr] + logf(l[hr]);
}

/// dq by query rows: a block's 64 rows over tiles of T keys, S = Q K^T and
/// dP = dO V^T recomputed, dq += dS K.
template <typename S, int W, int T>
__global__ void __launch_bounds__(kThreads) mmaAttentionGradQueryKernel(
    AttentionDims a, int64_t rowBlocks, const S *__restrict__ q,
    const S *__restrict__ k, const S *__restrict__ v,
    const float *__restrict__ lse, const S *__restrict__ dout,
    const S *__restrict__ mask, const float *__restrict__ rowDot,
    S *__restrict__ dq) {
  constexpr int NT = T / 8, NO = W / 8;
  const int dp = pad16(a.d), dvp = pad16(a.dv);
  const int ldq = stagedStride(dp), ldv = stagedStride(dvp);
  const StagedLayout lay(dp, dvp, dp, dvp, kRows, T, sizeof(S), 0);
  S *qs = region<S>(lay.own0), *dos = region<S>(lay.own1);
  S *ks = region<S>(lay.tile0), *vs = region<S>(lay.tile1);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t b = blockIdx.x / rowBlocks;
  const int64_t i0 = (rowBlocks - 1 - blockIdx.x % rowBlocks) * kRows;
  const int own = int(std::min<int64_t>(kRows, a.sq - i0));
  __shared__ int64_t base[5]; // q, k, v, dout, dq
  attentionBases(
      a, {&a.rows.q, &a.rows.k, &a.rows.v, &a.rows.dout, &a.rows.dq}, b, base);
  stageStrided(qs, ldq, q + base[0], a.rows.q.row, i0, own, kRows, a.d, dp);
  stageStrided(dos, ldv, dout + base[3], a.rows.dout.row, i0, own, kRows, a.dv,
               dvp);
  const S *qw = qs + warp * 16 * ldq, *dow = dos + warp * 16 * ldv;
  const int64_t row0 = i0 + warp * 16 + lane / 4;
  float ls[2], dots[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int64_t i = row0 + 8 * hr;
    ls[hr] = i < a.sq ? lse[b * a.sq + i] : 0.f;
    dots[hr] = i < a.sq ? rowDot[b * a.sq + i] : 0.f;
  }
  const S *maskBase = mask ? mask + attentionMaskBase(a, b) : nullptr;
  const float scale = float(a.scale);
  float acc[NO][4];
  zeroFragments(acc);
  const int64_t keys = a.causal ? std::min(a.sk, i0 + kRows) : a.sk;
  for (int64_t j0 = 0; j0 < keys; j0 += T) {
    const int n = int(std::min<int64_t>(T, keys - j0));
    __syncthreads();
    stageStrided(ks, ldq, k + base[1], a.rows.k.row, j0, n, T, a.d, dp);
    stageStrided(vs, ldv, v + base[2], a.rows.v.row, j0, n, T, a.dv, dvp);
    __syncthreads();
    float s[NT][4], dpv[NT][4];
    recomputeProducts<S, NT>(s, dpv, qw, ks, ldq, dp, dow, vs, ldv, dvp, lane);
#pragma unroll
    for (int nn = 0; nn < NT; ++nn)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int hr = e >> 1, col = nn * 8 + 2 * (lane % 4) + (e & 1);
        const int64_t i = row0 + 8 * hr, j = j0 + col;
        float ds = 0.f;
        if (col < n) {
          float x = s[nn][e] * scale;
          if (maskBase && i < a.sq)
            x += Elem<S>::load(maskBase[i * a.maskRow + j * a.maskCol]);
          const float p = a.causal && j > i ? 0.f : __expf(x - ls[hr]);
          ds = p * (dpv[nn][e] - dots[hr]);
        }
        s[nn][e] = ds;
      }
    accumulateRegs<S, NT, NO>(acc, s, ks, ldq, dp, lane);
  }
  storeRegs<S, NO>(dq + base[4], a.rows.dq.row, i0 + warp * 16, a.sq, a.d, acc,
                   scale, lane);
}

/// dk, dv by key rows: a block's 64 keys over tiles of T queries, S^T and
/// dP^T recomputed, dv += P^T dO, dk += dS^T Q.
template <typename S, int W, int T>
__global__ void __launch_bounds__(kThreads)
    mmaAttentionGradKeyKernel(AttentionDims a, int64_t rowBlocks,
                              const S *__restrict__ q, const S *__restrict__ k,
                              const S *__restrict__ v,
                              const float *__restrict__ lse,
                              const S *__restrict__ dout,
                              const S *__restrict__ mask,
                              const float *__restrict__ rowDot,
                              S *__restrict__ dk, S *__restrict__ dv) {
  constexpr int NT = T / 8, NO = W / 8;
  const int dp = pad16(a.d), dvp = pad16(a.dv);
  const int ldq = stagedStride(dp), ldv = stagedStride(dvp);
  const StagedLayout lay(dp, dvp, dp, dvp, kRows, T, sizeof(S), T);
  S *ks = region<S>(lay.own0), *vs = region<S>(lay.own1);
  S *qs = region<S>(lay.tile0), *dos = region<S>(lay.tile1);
  float *lses = region<float>(lay.lse), *dotss = region<float>(lay.dot);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t b = blockIdx.x / rowBlocks;
  const int64_t j0 = (blockIdx.x % rowBlocks) * kRows;
  const int own = int(std::min<int64_t>(kRows, a.sk - j0));
  __shared__ int64_t base[6]; // q, k, v, dout, dk, dv
  attentionBases(a,
                 {&a.rows.q, &a.rows.k, &a.rows.v, &a.rows.dout, &a.rows.dk,
                  &a.rows.dv},
                 b, base);
  stageStrided(ks, ldq, k + base[1], a.rows.k.row, j0, own, kRows, a.d, dp);
  stageStrided(vs, ldv, v + base[2], a.rows.v.row, j0, own, kRows, a.dv, dvp);
  const S *kw = ks + warp * 16 * ldq, *vw = vs + warp * 16 * ldv;
  const int64_t key0 = j0 + warp * 16 + lane / 4;
  const S *maskBase = mask ? mask + attentionMaskBase(a, b) : nullptr;
  const float scale = float(a.scale);
  float dka[NO][4], dva[NO][4];
  zeroFragments(dka);
  zeroFragments(dva);
  // Causal: queries before the block's first key see none of its keys.
  for (int64_t t0 = a.causal ? j0 : 0; t0 < a.sq; t0 += T) {
    const int n = int(std::min<int64_t>(T, a.sq - t0));
    __syncthreads();
    stageStrided(qs, ldq, q + base[0], a.rows.q.row, t0, n, T, a.d, dp);
    stageStrided(dos, ldv, dout + base[3], a.rows.dout.row, t0, n, T, a.dv, dvp);
    for (int t = threadIdx.x; t < T; t += kThreads) {
      lses[t] = t < n ? lse[b * a.sq + t0 + t] : 0.f;
      dotss[t] = t < n ? rowDot[b * a.sq + t0 + t] : 0.f;
    }
    __syncthreads();
    float s[NT][4], dpv[NT][4];
    recomputeProducts<S, NT>(s, dpv, kw, qs, ldq, dp, vw, dos, ldv, dvp, lane);
#pragma unroll
    for (int nn = 0; nn < NT; ++nn)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int hr = e >> 1, col = nn * 8 + 2 * (lane % 4) + (e & 1);
        const int64_t j = key0 + 8 * hr, i = t0 + col;
        float p = 0.f, ds = 0.f;
        if (col < n) {
          float x = s[nn][e] * scale;
          if (maskBase && j < a.sk)
            x += Elem<S>::load(maskBase[i * a.maskRow + j * a.maskCol]);
          p = a.causal && j > i ? 0.f : __expf(x - lses[col]);
          ds = p * (dpv[nn][e] - dotss[col]);
        }
        s[nn][e] = p;
        dpv[nn][e] = ds;
      }
    accumulateRegs<S, NT, NO>(dva, s, dos, ldv, dvp, lane);
    accumulateRegs<S, NT, NO>(dka, dpv, qs, ldq, dp, lane);
  }
  storeRegs<S, NO>(dk + base[4], a.rows.dk.row, j0 + warp * 16, a.sk, a.d, dka,
                   scale, lane);
  storeRegs<S, NO>(dv + base[5], a.rows.dv.row, j0 + warp * 16, a.sk, a.dv, dva,
                   1.f, lane);
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

/// Key (and query) tiles of the register kernels: 64 rows; the key
/// kernel's query tiles 32 where head dimensions pass 64 (its dk and dv
/// accumulators take 128 registers there).
constexpr int kMmaTile = 64;
template <int W> constexpr int mmaKeyKernelTile() { return W <= 64 ? 64 : 32; }

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
    constexpr int W = 16 * decltype(chunks)::value;
    const int dp = pad16(a.d), dvp = pad16(a.dv);
    const int64_t rowBlocks = (a.sq + kRows - 1) / kRows;
    err = launchShared(
        mmaAttentionKernel<S, W, kMmaTile>, a.batch * rowBlocks,
        StagedLayout(dp, 0, dp, dvp, kRows, kMmaTile, sizeof(S), 0).bytes,
        stream, a, rowBlocks, static_cast<const S *>(q),
        static_cast<const S *>(k), static_cast<const S *>(v),
        static_cast<const S *>(mask), static_cast<S *>(out), lse);
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
    constexpr int W = 16 * decltype(chunks)::value;
    const int dp = pad16(a.d), dvp = pad16(a.dv);
    const S *qs = static_cast<const S *>(q), *ks = static_cast<const S *>(k),
            *vs = static_cast<const S *>(v),
            *dos = static_cast<const S *>(dout),
            *ms = static_cast<const S *>(mask);
    if (a.batch * a.sq > 0) {
      const int64_t rowBlocks = (a.sq + kRows - 1) / kRows;
      err = launchShared(
          mmaAttentionGradQueryKernel<S, W, kMmaTile>, a.batch * rowBlocks,
          StagedLayout(dp, dvp, dp, dvp, kRows, kMmaTile, sizeof(S), 0).bytes,
          stream, a, rowBlocks, qs, ks, vs, lse, dos, ms, rowDot,
          static_cast<S *>(dq));
      if (err != cudaSuccess)
        return;
    }
    if (a.batch * a.sk > 0) {
      const int64_t rowBlocks = (a.sk + kRows - 1) / kRows;
      constexpr int T = mmaKeyKernelTile<W>();
      err = launchShared(
          mmaAttentionGradKeyKernel<S, W, T>, a.batch * rowBlocks,
          StagedLayout(dp, dvp, dp, dvp, kRows, T, sizeof(S), T).bytes, stream,
          a, rowBlocks, qs, ks, vs, lse, dos, ms, rowDot, static_cast<S *>(dk),
          static_cast<S *>(dv));
    }
  });
  return err;
}

} // namespace dtcc::runtime::cuda
