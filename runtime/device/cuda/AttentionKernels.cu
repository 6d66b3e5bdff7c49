//===- AttentionKernels.cu - attention and its gradient, tile by tile -----===//
//
// dgraph.attention and dgraph.attention_grad on CUDA, without the [Sq, Sk]
// score matrix (FlashAttention's recurrences, as the CPU kernels in
// runtime/device/cpu/AttentionKernels.cpp). f16 and bf16 with head
// dimensions up to 128 go to the tensor-core kernels of
// AttentionTensorCores.cu; these SIMT kernels take the rest. A query row (a key row in the
// gradient of the keys and values) belongs to a group of TPR neighbouring
// threads of one warp, each holding DPT of its head dimensions (in runs of
// 16 bytes, see dimOf); a dot product is each thread's partial sum then a
// butterfly over the group. A block of 256 threads holds 256 / TPR rows and
// walks over tiles of the other side's rows staged in shared memory, which
// every group reads at the same address (a broadcast). Accumulation is in
// float (f32, f16, bf16) or double (f64).
//
// forward:  per key tile, the tile's scores (kept in shared memory), the
//           row maximum, one rescale of the running sum and output, then
//           the probabilities times V;
// backward: D = rowsum(dout * out) per query row; dq by query rows over key
//           tiles; dk and dv by key rows over query tiles. Each recomputes
//           P = exp(scale q.k + mask - lse), so no thread adds into another
//           thread's result: no atomics, the same result on every run.
// Causal attention skips the key tiles past a block's last query (and the
// query tiles before a block's first key).
//
// Query, key, value, the output, dout and the gradients are addressed as
// AttentionDims::rows lays them out (strided views: the heads' transposes,
// slices of a packed projection); each block finds its batch index's
// offsets once (attentionBases). lse and rowDot are contiguous.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cuda/AttentionCommon.cuh"
#include "runtime/device/cuda/KernelCommon.cuh"

#include <algorithm>
#include <type_traits>

namespace dtcc::runtime::cuda {
namespace {

constexpr int kThreads = 256;
/// Bytes of the two staged tiles (K and V, or Q and dout) per block.
constexpr int64_t kTileBytes = 24576;
constexpr int kMaxTileRows = 32;

/// Rows of the other side per staged tile, for staged rows of dp + dvp
/// elements of `accBytes`.
int tileRows(int64_t dp, int64_t dvp, int64_t accBytes) {
  const int64_t perRow = std::max<int64_t>(1, (dp + dvp) * accBytes);
  return int(std::clamp<int64_t>(kTileBytes / perRow, 1, kMaxTileRows));
}

template <typename A> __device__ __forceinline__ A negInf() {
  return -INFINITY;
}

/// The sum over the TPR threads of a row group (aligned lanes of a warp).
template <int TPR, typename A> __device__ __forceinline__ A groupSum(A v) {
#pragma unroll
  for (int o = TPR / 2; o > 0; o /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/// A thread's DPT dimensions of a row come in runs of kVec<A> (16 bytes:
/// 4 floats, 2 doubles), run c of lane at (lane + TPR c) kVec, so that a
/// group reads a staged row with one 16-byte load per run, neighbouring
/// lanes at neighbouring addresses. Staged rows are zero-padded to a
/// multiple of kVec (`padded`).
template <typename A> constexpr int kVec = 16 / int(sizeof(A));
template <typename A> __host__ __device__ constexpr int64_t padded(int64_t dims) {
  return (dims + kVec<A> - 1) / kVec<A> * kVec<A>;
}
template <int TPR, int V> __device__ __forceinline__ int dimOf(int lane, int e) {
  return (lane + TPR * (e / V)) * V + e % V;
}

/// 16 aligned bytes of shared memory as kVec<A> values.
__device__ __forceinline__ void load16(const float *p, float (&x)[4]) {
  const float4 v = *reinterpret_cast<const float4 *>(p);
  x[0] = v.x;
  x[1] = v.y;
  x[2] = v.z;
  x[3] = v.w;
}
__device__ __forceinline__ void load16(const double *p, double (&x)[2]) {
  const double2 v = *reinterpret_cast<const double2 *>(p);
  x[0] = v.x;
  x[1] = v.y;
}

/// Loads a thread's dimensions of a row (zeros past `dims` or when dead).
template <typename S, int TPR, int DPT, typename A>
__device__ __forceinline__ void loadRow(const S *row, int64_t dims, int lane,
                                        bool live, A (&r)[DPT]) {
#pragma unroll
  for (int e = 0; e < DPT; ++e) {
    const int idx = dimOf<TPR, kVec<A>>(lane, e);
    r[e] = live && idx < dims ? Elem<S>::load(row[idx]) : A(0);
  }
}

/// The partial dot product of a thread's dimensions with a staged row of
/// `pad` (padded) elements.
template <int TPR, int DPT, typename A>
__device__ __forceinline__ A partialDot(const A (&r)[DPT], const A *staged,
                                        int pad, int lane) {
  constexpr int V = kVec<A>;
  A part = 0;
#pragma unroll
  for (int c = 0; c < DPT / V; ++c) {
    const int at = (lane + TPR * c) * V;
    if (at < pad) {
      A x[V];
      load16(staged + at, x);
#pragma unroll
      for (int j = 0; j < V; ++j)
        part += r[c * V + j] * x[j];
    }
  }
  return part;
}

/// acc += w * staged row.
template <int TPR, int DPT, typename A>
__device__ __forceinline__ void axpy(A (&acc)[DPT], A w, const A *staged,
                                     int pad, int lane) {
  constexpr int V = kVec<A>;
#pragma unroll
  for (int c = 0; c < DPT / V; ++c) {
    const int at = (lane + TPR * c) * V;
    if (at < pad) {
      A x[V];
      load16(staged + at, x);
#pragma unroll
      for (int j = 0; j < V; ++j)
        acc[c * V + j] += w * x[j];
    }
  }
}

/// Stores a thread's dimensions of a row, times `scale`.
template <typename S, int TPR, int DPT, typename A>
__device__ __forceinline__ void storeRow(S *row, const A (&r)[DPT], A scale,
                                         int64_t dims, int lane) {
#pragma unroll
  for (int e = 0; e < DPT; ++e) {
    const int idx = dimOf<TPR, kVec<A>>(lane, e);
    if (idx < dims)
      row[idx] = Elem<S>::store(r[e] * scale);
  }
}

/// Copies rows [first, first + n) of `dims` elements, `ld` apart from
/// `src`, into shared memory as rows of `pad` elements, zeros after `dims`.
template <typename S, typename A>
__device__ __forceinline__ void stage(A *dst, const S *src, int64_t ld,
                                      int64_t first, int n, int64_t dims,
                                      int pad) {
  const int count = n * pad;
  const S *from = src + first * ld;
  for (int t = threadIdx.x; t < count; t += kThreads) {
    const int row = t / pad, col = t - row * pad;
    dst[t] = col < dims ? Elem<S>::load(from[int64_t(row) * ld + col]) : A(0);
  }
}

extern __shared__ __align__(16) unsigned char attentionShared[];

template <typename S, int TPR, int DPT>
__global__ void __launch_bounds__(kThreads)
    attentionKernel(AttentionDims a, int tile, int64_t rowBlocks,
                    const S *__restrict__ q, const S *__restrict__ k,
                    const S *__restrict__ v, const S *__restrict__ mask,
                    S *__restrict__ out, AccT<S> *__restrict__ lse) {
  using A = AccT<S>;
  constexpr int kRows = kThreads / TPR;
  const int stride = tile + 1; // scores row stride (no bank conflicts)
  const int dp = int(padded<A>(a.d)), dvp = int(padded<A>(a.dv));
  A *ks = reinterpret_cast<A *>(attentionShared);
  A *vs = ks + tile * dp;
  A *ss = vs + tile * dvp;
  const int r = threadIdx.x / TPR, lane = threadIdx.x % TPR;
  const int64_t b = blockIdx.x / rowBlocks;
  const int64_t i0 = (blockIdx.x % rowBlocks) * kRows, i = i0 + r;
  const bool live = i < a.sq;
  __shared__ int64_t base[4]; // q, k, v, out
  attentionBases(a, {&a.rows.q, &a.rows.k, &a.rows.v, &a.rows.o}, b, base);
  const S *mrow = mask ? mask + attentionMaskBase(a, b) + i * a.maskRow : nullptr;
  const A scale = A(a.scale);
  A qr[DPT], acc[DPT];
  loadRow<S, TPR, DPT>(q + base[0] + i * a.rows.q.row, a.d, lane, live, qr);
#pragma unroll
  for (int e = 0; e < DPT; ++e)
    acc[e] = 0;
  A m = negInf<A>(), sum = 0;
  const int64_t keys = a.causal ? std::min(a.sk, i0 + kRows) : a.sk;
  for (int64_t j0 = 0; j0 < keys; j0 += tile) {
    const int n = int(std::min<int64_t>(tile, keys - j0));
    __syncthreads();
    stage(ks, k + base[1], a.rows.k.row, j0, n, a.d, dp);
    stage(vs, v + base[2], a.rows.v.row, j0, n, a.dv, dvp);
    __syncthreads();
    A tileMax = m;
    for (int jj = 0; jj < n; ++jj) {
      const int64_t j = j0 + jj;
      A s = groupSum<TPR>(partialDot<TPR, DPT>(qr, ks + jj * dp, dp, lane)) *
            scale;
      if (mrow && live)
        s += Elem<S>::load(mrow[j * a.maskCol]);
      if (a.causal && j > i)
        s = negInf<A>();
      if (lane == 0)
        ss[r * stride + jj] = s;
      tileMax = tileMax < s ? s : tileMax; // a NaN score leaves the max
    }
    __syncwarp();
    if (tileMax == negInf<A>())
      continue; // every key so far hidden: nothing to add yet
    const A alpha = accExp(m - tileMax);
    sum *= alpha;
#pragma unroll
    for (int e = 0; e < DPT; ++e)
      acc[e] *= alpha;
    for (int jj = 0; jj < n; ++jj) {
      const A p = accExp(ss[r * stride + jj] - tileMax);
      sum += p;
      axpy<TPR, DPT>(acc, p, vs + jj * dvp, dvp, lane);
    }
    m = tileMax;
  }
  if (!live)
    return;
  storeRow<S, TPR, DPT>(out + base[3] + i * a.rows.o.row, acc, A(1) / sum,
                        a.dv, lane);
  if (lane == 0)
    lse[b * a.sq + i] = A(m + accLog(sum));
}

/// Query rows a block of attentionRowDotKernel takes: a warp each.
constexpr int kRowDotRows = kThreads / 32;

/// rowDot[b, i] = sum(dout[b, i] * out[b, i]): a warp per query row, the
/// blocks of a batch index after each other (their operands' rows found
/// once a block).
template <typename S>
__global__ void __launch_bounds__(kThreads)
    attentionRowDotKernel(AttentionDims a, int64_t rowBlocks,
                          const S *__restrict__ dout, const S *__restrict__ out,
                          AccT<S> *__restrict__ rowDot) {
  using A = AccT<S>;
  const int64_t b = blockIdx.x / rowBlocks;
  const int64_t i =
      (blockIdx.x % rowBlocks) * kRowDotRows + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  __shared__ int64_t base[2]; // dout, out
  attentionBases(a, {&a.rows.dout, &a.rows.o}, b, base);
  if (i >= a.sq)
    return;
  const S *dor = dout + base[0] + i * a.rows.dout.row;
  const S *orow = out + base[1] + i * a.rows.o.row;
  A sum = 0;
  for (int64_t e = lane; e < a.dv; e += 32)
    sum += Elem<S>::load(dor[e]) * Elem<S>::load(orow[e]);
  sum = warpSum(sum);
  if (lane == 0)
    rowDot[b * a.sq + i] = sum;
}

/// dq: a group per query row over the key tiles it sees (two blocks an SM
/// where float rows fit in 128 registers; double rows take more).
template <typename S, int TPR, int DPT>
__global__ void __launch_bounds__(kThreads, sizeof(AccT<S>) == 8 ? 1 : 2)
    attentionGradQueryKernel(AttentionDims a, int tile, int64_t rowBlocks,
                             const S *__restrict__ q, const S *__restrict__ k,
                             const S *__restrict__ v,
                             const AccT<S> *__restrict__ lse,
                             const S *__restrict__ dout,
                             const S *__restrict__ mask,
                             const AccT<S> *__restrict__ rowDot,
                             S *__restrict__ dq) {
  using A = AccT<S>;
  constexpr int kRows = kThreads / TPR;
  const int dp = int(padded<A>(a.d)), dvp = int(padded<A>(a.dv));
  A *ks = reinterpret_cast<A *>(attentionShared);
  A *vs = ks + tile * dp;
  const int r = threadIdx.x / TPR, lane = threadIdx.x % TPR;
  const int64_t b = blockIdx.x / rowBlocks;
  const int64_t i0 = (blockIdx.x % rowBlocks) * kRows, i = i0 + r;
  const bool live = i < a.sq;
  __shared__ int64_t base[5]; // q, k, v, dout, dq
  attentionBases(
      a, {&a.rows.q, &a.rows.k, &a.rows.v, &a.rows.dout, &a.rows.dq}, b, base);
  const S *mrow = mask ? mask + attentionMaskBase(a, b) + i * a.maskRow : nullptr;
  const A scale = A(a.scale);
  A qr[DPT], dor[DPT], dqa[DPT];
  loadRow<S, TPR, DPT>(q + base[0] + i * a.rows.q.row, a.d, lane, live, qr);
  loadRow<S, TPR, DPT>(dout + base[3] + i * a.rows.dout.row, a.dv, lane, live,
                       dor);
#pragma unroll
  for (int e = 0; e < DPT; ++e)
    dqa[e] = 0;
  const A l = live ? A(lse[b * a.sq + i]) : A(0);
  const A dot = live ? rowDot[b * a.sq + i] : A(0);
  const int64_t keys = a.causal ? std::min(a.sk, i0 + kRows) : a.sk;
  for (int64_t j0 = 0; j0 < keys; j0 += tile) {
    const int n = int(std::min<int64_t>(tile, keys - j0));
    __syncthreads();
    stage(ks, k + base[1], a.rows.k.row, j0, n, a.d, dp);
    stage(vs, v + base[2], a.rows.v.row, j0, n, a.dv, dvp);
    __syncthreads();
    for (int jj = 0; jj < n; ++jj) {
      const int64_t j = j0 + jj;
      const A *kr = ks + jj * dp;
      A s = groupSum<TPR>(partialDot<TPR, DPT>(qr, kr, dp, lane)) * scale;
      const A dpv =
          groupSum<TPR>(partialDot<TPR, DPT>(dor, vs + jj * dvp, dvp, lane));
      if (mrow && live)
        s += Elem<S>::load(mrow[j * a.maskCol]);
      const A p = a.causal && j > i ? A(0) : accExp(s - l);
      axpy<TPR, DPT>(dqa, p * (dpv - dot), kr, dp, lane);
    }
  }
  if (live)
    storeRow<S, TPR, DPT>(dq + base[4] + i * a.rows.dq.row, dqa, scale, a.d,
                          lane);
}

/// dk, dv: a group per key row over the query tiles that see it.
template <typename S, int TPR, int DPT>
__global__ void __launch_bounds__(kThreads)
    attentionGradKeyKernel(AttentionDims a, int tile, int64_t rowBlocks,
                           const S *__restrict__ q, const S *__restrict__ k,
                           const S *__restrict__ v,
                           const AccT<S> *__restrict__ lse,
                           const S *__restrict__ dout,
                           const S *__restrict__ mask,
                           const AccT<S> *__restrict__ rowDot,
                           S *__restrict__ dk, S *__restrict__ dv) {
  using A = AccT<S>;
  constexpr int kRows = kThreads / TPR;
  const int dp = int(padded<A>(a.d)), dvp = int(padded<A>(a.dv));
  A *qs = reinterpret_cast<A *>(attentionShared);
  A *dos = qs + tile * dp;
  A *ls = dos + tile * dvp;
  A *dots = ls + tile;
  const int r = threadIdx.x / TPR, lane = threadIdx.x % TPR;
  const int64_t b = blockIdx.x / rowBlocks;
  const int64_t j0 = (blockIdx.x % rowBlocks) * kRows, j = j0 + r;
  const bool live = j < a.sk;
  __shared__ int64_t base[6]; // q, k, v, dout, dk, dv
  attentionBases(a,
                 {&a.rows.q, &a.rows.k, &a.rows.v, &a.rows.dout, &a.rows.dk,
                  &a.rows.dv},
                 b, base);
  const S *mcol = mask ? mask + attentionMaskBase(a, b) + j * a.maskCol : nullptr;
  const A scale = A(a.scale);
  A kr[DPT], vr[DPT], dka[DPT], dva[DPT];
  loadRow<S, TPR, DPT>(k + base[1] + j * a.rows.k.row, a.d, lane, live, kr);
  loadRow<S, TPR, DPT>(v + base[2] + j * a.rows.v.row, a.dv, lane, live, vr);
#pragma unroll
  for (int e = 0; e < DPT; ++e) {
    dka[e] = 0;
    dva[e] = 0;
  }
  // Causal: queries before the block's first key see none of its keys.
  for (int64_t t0 = a.causal ? j0 : 0; t0 < a.sq; t0 += tile) {
    const int n = int(std::min<int64_t>(tile, a.sq - t0));
    __syncthreads();
    stage(qs, q + base[0], a.rows.q.row, t0, n, a.d, dp);
    stage(dos, dout + base[3], a.rows.dout.row, t0, n, a.dv, dvp);
    for (int t = threadIdx.x; t < n; t += kThreads) {
      ls[t] = A(lse[b * a.sq + t0 + t]);
      dots[t] = rowDot[b * a.sq + t0 + t];
    }
    __syncthreads();
    for (int ii = 0; ii < n; ++ii) {
      const int64_t i = t0 + ii;
      const A *qrow = qs + ii * dp, *dorow = dos + ii * dvp;
      A s = groupSum<TPR>(partialDot<TPR, DPT>(kr, qrow, dp, lane)) * scale;
      const A dpv = groupSum<TPR>(partialDot<TPR, DPT>(vr, dorow, dvp, lane));
      if (mcol && live)
        s += Elem<S>::load(mcol[i * a.maskRow]);
      const A p = a.causal && j > i ? A(0) : accExp(s - ls[ii]);
      axpy<TPR, DPT>(dva, p, dorow, dvp, lane);
      axpy<TPR, DPT>(dka, p * (dpv - dots[ii]), qrow, dp, lane);
    }
  }
  if (!live)
    return;
  storeRow<S, TPR, DPT>(dk + base[4] + j * a.rows.dk.row, dka, scale, a.d,
                        lane);
  storeRow<S, TPR, DPT>(dv + base[5] + j * a.rows.dv.row, dva, A(1), a.dv,
                        lane);
}

template <int N> using Int = std::integral_constant<int, N>;

/// Calls fn(Int<TPR>, Int<DPT>) for the head dimension: a row over TPR
/// threads of DPT dimensions each (TPR x DPT >= max(d, dv)). Double
/// accumulators (`wide`) take twice the threads of half the dimensions
/// each, as far as a warp goes: the gradient of the keys holds four rows
/// of DPT in registers.
template <bool Wide, typename Fn> bool visitRowSplit(int64_t dims, Fn &&fn) {
  auto split = [&](auto narrowT, auto narrowD, auto wideT, auto wideD) {
    if constexpr (Wide)
      fn(wideT, wideD);
    else
      fn(narrowT, narrowD);
  };
  if (dims <= 32)
    split(Int<4>{}, Int<8>{}, Int<8>{}, Int<4>{});
  else if (dims <= 64)
    split(Int<4>{}, Int<16>{}, Int<8>{}, Int<8>{});
  else if (dims <= 128)
    split(Int<8>{}, Int<16>{}, Int<16>{}, Int<8>{});
  else if (dims <= 256)
    split(Int<16>{}, Int<16>{}, Int<32>{}, Int<8>{});
  else if (dims <= kAttentionMaxHeadDim)
    fn(Int<32>{}, Int<16>{});
  else
    return false;
  return true;
}

} // namespace

cudaError_t launchAttention(DType dtype, const AttentionDims &a, const void *q,
                            const void *k, const void *v, const void *mask,
                            void *out, void *lse, cudaStream_t s) {
  if (attentionOnTensorCores(dtype, a))
    return launchAttentionTensorCores(dtype, a, q, k, v, mask, out,
                                      static_cast<float *>(lse), s);
  cudaError_t err = cudaErrorInvalidValue;
  visitFloat(dtype, [&](auto tag) {
    using S = decltype(tag);
    using A = AccT<S>;
    if (a.batch * a.sq == 0) {
      err = cudaSuccess;
      return;
    }
    const int64_t dp = padded<A>(a.d), dvp = padded<A>(a.dv);
    const int tile = tileRows(dp, dvp, sizeof(A));
    visitRowSplit<sizeof(A) == 8>(std::max(a.d, a.dv), [&](auto tpr, auto dpt) {
      constexpr int TPR = decltype(tpr)::value, DPT = decltype(dpt)::value;
      constexpr int kRows = kThreads / TPR;
      const int64_t rowBlocks = (a.sq + kRows - 1) / kRows;
      const size_t shared =
          (size_t(tile) * (dp + dvp) + size_t(kRows) * (tile + 1)) *
          sizeof(A);
      attentionKernel<S, TPR, DPT>
          <<<dim3(unsigned(a.batch * rowBlocks)), kThreads, shared, s>>>(
              a, tile, rowBlocks, static_cast<const S *>(q),
              static_cast<const S *>(k), static_cast<const S *>(v),
              static_cast<const S *>(mask), static_cast<S *>(out),
              static_cast<A *>(lse));
      err = cudaGetLastError();
    });
  });
  return err;
}

cudaError_t launchAttentionGrad(DType dtype, const AttentionDims &a,
                                const void *q, const void *k, const void *v,
                                const void *out, const void *lse,
                                const void *dout, const void *mask, void *dq,
                                void *dk, void *dv, void *rowDot,
                                cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  visitFloat(dtype, [&](auto tag) {
    using S = decltype(tag);
    using A = AccT<S>;
    const S *qs = static_cast<const S *>(q), *ks = static_cast<const S *>(k),
            *vs = static_cast<const S *>(v), *os = static_cast<const S *>(out),
            *dos = static_cast<const S *>(dout),
            *ms = static_cast<const S *>(mask);
    A *dots = static_cast<A *>(rowDot);
    const A *ls = static_cast<const A *>(lse);
    err = cudaSuccess;
    const int64_t rows = a.batch * a.sq;
    if (rows > 0) {
      const int64_t rowBlocks = (a.sq + kRowDotRows - 1) / kRowDotRows;
      attentionRowDotKernel<S>
          <<<dim3(unsigned(a.batch * rowBlocks)), kThreads, 0, s>>>(
              a, rowBlocks, dos, os, dots);
      if ((err = cudaGetLastError()) != cudaSuccess)
        return;
    }
    if constexpr (std::is_same_v<A, float>)
      if (attentionOnTensorCores(dtype, a)) {
        err = launchAttentionGradTensorCores(dtype, a, q, k, v,
                                             static_cast<const float *>(lse),
                                             dout, mask, dots, dq, dk, dv, s);
        return;
      }
    const int64_t dp = padded<A>(a.d), dvp = padded<A>(a.dv);
    const int tile = tileRows(dp, dvp, sizeof(A));
    const bool split = visitRowSplit<sizeof(A) == 8>(std::max(a.d, a.dv), [&](auto tpr, auto dpt) {
      constexpr int TPR = decltype(tpr)::value, DPT = decltype(dpt)::value;
      constexpr int kRows = kThreads / TPR;
      const size_t staged = size_t(tile) * (dp + dvp) * sizeof(A);
      if (rows > 0) {
        const int64_t rowBlocks = (a.sq + kRows - 1) / kRows;
        attentionGradQueryKernel<S, TPR, DPT>
            <<<dim3(unsigned(a.batch * rowBlocks)), kThreads, staged, s>>>(
                a, tile, rowBlocks, qs, ks, vs, ls, dos, ms, dots,
                static_cast<S *>(dq));
        if ((err = cudaGetLastError()) != cudaSuccess)
          return;
      }
      if (a.batch * a.sk > 0) {
        const int64_t rowBlocks = (a.sk + kRows - 1) / kRows;
        attentionGradKeyKernel<S, TPR, DPT>
            <<<dim3(unsigned(a.batch * rowBlocks)), kThreads,
               staged + 2 * size_t(tile) * sizeof(A), s>>>(
                a, tile, rowBlocks, qs, ks, vs, ls, dos, ms, dots,
                static_cast<S *>(dk), static_cast<S *>(dv));
        err = cudaGetLastError();
      }
    });
    if (!split)
      err = cudaErrorInvalidValue;
  });
  return err;
}

} // namespace dtcc::runtime::cuda
