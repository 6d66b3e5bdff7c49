//===- NNKernels.cu - softmax, normalizations, cross-entropy, reductions ==//
//
// Row kernels: threadsX threads reduce one row (a warp for rows of up to
// 1024 elements, a block beyond), threadsY rows per block (LaunchConfig's
// rowLaunch). Sums accumulate in float, in double for f64 rows; softmax
// subtracts the row maximum. Softmax over a non-last dimension and reductions that keep the
// innermost dimension use one thread per output column instead. argmax /
// argmin take a warp per row when their dimension is the innermost, cumsum
// a thread per column.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cuda/KernelCommon.cuh"

#include <algorithm>

namespace dtcc::runtime::cuda {
namespace {

constexpr int kMaxRowsPerBlock = 4; // rowLaunch: 128 / 32

#define DTCC_ROW_LOOP(row, rows)                                               \
  for (int64_t row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;          \
       row < (rows); row += int64_t(gridDim.x) * blockDim.y)

template <typename T> __device__ __forceinline__ T *rowShared(T *base) {
  return base + threadIdx.y * 32;
}

//===----------------------------------------------------------------------===//
// softmax / log_softmax and their gradients
//===----------------------------------------------------------------------===//

template <typename S, bool Log>
__global__ void softmaxRowKernel(const S *x, S *y, int64_t rows, int64_t cols) {
  using A = AccT<S>;
  __shared__ A shared[kMaxRowsPerBlock * 32];
  A *sh = rowShared(shared);
  DTCC_ROW_LOOP(r, rows) {
    const S *xr = x + r * cols;
    S *yr = y + r * cols;
    A m = -INFINITY;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const A v = Elem<S>::load(xr[c]);
      m = (v > m || v != v) ? v : m;
    }
    m = rowMax(m, sh);
    A sum = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
      sum += accExp(A(Elem<S>::load(xr[c])) - m);
    sum = rowSum(sum, sh);
    if constexpr (Log) {
      const A logSum = accLog(sum);
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        yr[c] = Elem<S>::store((A(Elem<S>::load(xr[c])) - m) - logSum);
    } else {
      const A inv = A(1) / sum;
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        yr[c] = Elem<S>::store(accExp(A(Elem<S>::load(xr[c])) - m) * inv);
    }
  }
}

/// One thread per (outer, inner) column of [outer, size, inner].
template <typename S, bool Log>
__global__ void softmaxColumnKernel(const S *x, S *y, int64_t outer,
                                    int64_t size, int64_t inner) {
  using A = AccT<S>;
  DTCC_GRID_LOOP(col, outer * inner) {
    const int64_t o = col / inner, i = col % inner;
    const S *xc = x + o * size * inner + i;
    S *yc = y + o * size * inner + i;
    A m = -INFINITY;
    for (int64_t d = 0; d < size; ++d) {
      const A v = Elem<S>::load(xc[d * inner]);
      m = (v > m || v != v) ? v : m;
    }
    A sum = 0;
    for (int64_t d = 0; d < size; ++d)
      sum += accExp(A(Elem<S>::load(xc[d * inner])) - m);
    const A logSum = accLog(sum), inv = A(1) / sum;
    for (int64_t d = 0; d < size; ++d) {
      const A v = A(Elem<S>::load(xc[d * inner])) - m;
      yc[d * inner] = Elem<S>::store(Log ? v - logSum : accExp(v) * inv);
    }
  }
}

template <typename S, bool Log>
__global__ void softmaxGradRowKernel(const S *y, const S *dy, S *dx,
                                     int64_t rows, int64_t cols) {
  using A = AccT<S>;
  __shared__ A shared[kMaxRowsPerBlock * 32];
  A *sh = rowShared(shared);
  DTCC_ROW_LOOP(r, rows) {
    const S *yr = y + r * cols, *dr = dy + r * cols;
    S *xr = dx + r * cols;
    A s = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
      s += Log ? A(Elem<S>::load(dr[c]))
               : A(Elem<S>::load(dr[c])) * A(Elem<S>::load(yr[c]));
    s = rowSum(s, sh);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const A yv = Elem<S>::load(yr[c]), dv = Elem<S>::load(dr[c]);
      xr[c] = Elem<S>::store(Log ? dv - accExp(yv) * s : yv * (dv - s));
    }
  }
}

template <typename S, bool Log>
__global__ void softmaxGradColumnKernel(const S *y, const S *dy, S *dx,
                                        int64_t outer, int64_t size,
                                        int64_t inner) {
  using A = AccT<S>;
  DTCC_GRID_LOOP(col, outer * inner) {
    const int64_t base = (col / inner) * size * inner + col % inner;
    A s = 0;
    for (int64_t d = 0; d < size; ++d) {
      const int64_t k = base + d * inner;
      s += Log ? A(Elem<S>::load(dy[k]))
               : A(Elem<S>::load(dy[k])) * A(Elem<S>::load(y[k]));
    }
    for (int64_t d = 0; d < size; ++d) {
      const int64_t k = base + d * inner;
      const A yv = Elem<S>::load(y[k]), dv = Elem<S>::load(dy[k]);
      dx[k] = Elem<S>::store(Log ? dv - accExp(yv) * s : yv * (dv - s));
    }
  }
}

//===----------------------------------------------------------------------===//
// layer_norm / rms_norm and their gradients
//===----------------------------------------------------------------------===//

/// Statistics (mean, rstd) of any float type, read and written in the
/// accumulator type A of the rows.
template <typename T, typename A>
__device__ __forceinline__ A loadStat(const void *p, int64_t i) {
  return A(Elem<T>::load(static_cast<const T *>(p)[i]));
}
template <typename T, typename A>
__device__ __forceinline__ void storeStat(void *p, int64_t i, A v) {
  static_cast<T *>(p)[i] = Elem<T>::store(ComputeT<T>(v));
}

template <typename S, typename St, bool Layer>
__global__ void normKernel(const S *x, const S *scale, const S *bias, S *y,
                           void *mean, void *rstd, int64_t rows, int64_t cols,
                           AccT<S> eps) {
  using A = AccT<S>;
  __shared__ A shared[kMaxRowsPerBlock * 32];
  A *sh = rowShared(shared);
  DTCC_ROW_LOOP(r, rows) {
    const S *xr = x + r * cols;
    S *yr = y + r * cols;
    A mu = 0;
    if constexpr (Layer) {
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        mu += A(Elem<S>::load(xr[c]));
      // A row of no elements: mean 0 and variance 0 (rstd 1 / sqrt(eps)),
      // as the CPU backend writes them, not 0 / 0. (cols is uniform: every
      // thread calls rowSum or none does.)
      mu = cols ? rowSum(mu, sh) / A(cols) : A(0);
    }
    A ss = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const A d = A(Elem<S>::load(xr[c])) - mu;
      ss += d * d;
    }
    const A rs = accRsqrt((cols ? rowSum(ss, sh) / A(cols) : A(0)) + eps);
    if (threadIdx.x == 0) {
      if constexpr (Layer)
        storeStat<St>(mean, r, mu);
      storeStat<St>(rstd, r, rs);
    }
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      A v = (A(Elem<S>::load(xr[c])) - mu) * rs * A(Elem<S>::load(scale[c]));
      if (Layer && bias)
        v += A(Elem<S>::load(bias[c]));
      yr[c] = Elem<S>::store(v);
    }
  }
}

/// dx per row: rstd (g - mean(g) - xhat mean(g xhat)), g = dy scale (rms:
/// without mean(g)).
template <typename S, typename St, bool Layer>
__global__ void normGradRowKernel(const S *x, const S *scale, const void *mean,
                                  const void *rstd, const S *dy, S *dx,
                                  int64_t rows, int64_t cols) {
  using A = AccT<S>;
  __shared__ A shared[kMaxRowsPerBlock * 32];
  A *sh = rowShared(shared);
  DTCC_ROW_LOOP(r, rows) {
    const S *xr = x + r * cols, *dr = dy + r * cols;
    S *xo = dx + r * cols;
    const A mu = Layer ? loadStat<St, A>(mean, r) : A(0);
    const A rs = loadStat<St, A>(rstd, r);
    A sumG = 0, sumGH = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const A h = (A(Elem<S>::load(xr[c])) - mu) * rs;
      const A g = A(Elem<S>::load(dr[c])) * A(Elem<S>::load(scale[c]));
      sumG += g;
      sumGH += g * h;
    }
    const A meanGH = rowSum(sumGH, sh) / A(cols);
    const A meanG = Layer ? rowSum(sumG, sh) / A(cols) : A(0);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const A h = (A(Elem<S>::load(xr[c])) - mu) * rs;
      const A g = A(Elem<S>::load(dr[c])) * A(Elem<S>::load(scale[c]));
      xo[c] = Elem<S>::store(rs * (g - meanG - h * meanGH));
    }
  }
}

/// partials[slice][c] (and [slices + slice][c] for dbias): sums over the
/// rows of one slice. blockIdx.x: 32 columns, blockIdx.y: the slice.
template <typename S, typename St, bool Layer>
__global__ void normGradColumnKernel(const S *x, const void *mean,
                                     const void *rstd, const S *dy,
                                     AccT<S> *partials, int64_t rows,
                                     int64_t cols, int64_t slices) {
  using A = AccT<S>;
  __shared__ A accScale[8][33], accBias[8][33];
  const int64_t c = int64_t(blockIdx.x) * 32 + threadIdx.x;
  const int64_t per = (rows + slices - 1) / slices;
  const int64_t begin = blockIdx.y * per;
  const int64_t end = begin + per < rows ? begin + per : rows;
  A s = 0, b = 0;
  if (c < cols)
    for (int64_t r = begin + threadIdx.y; r < end; r += blockDim.y) {
      const A mu = Layer ? loadStat<St, A>(mean, r) : A(0);
      const A h =
          (A(Elem<S>::load(x[r * cols + c])) - mu) * loadStat<St, A>(rstd, r);
      const A d = Elem<S>::load(dy[r * cols + c]);
      s += d * h;
      b += d;
    }
  accScale[threadIdx.y][threadIdx.x] = s;
  accBias[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    for (int k = 1; k < int(blockDim.y); ++k) {
      s += accScale[k][threadIdx.x];
      b += accBias[k][threadIdx.x];
    }
    partials[blockIdx.y * cols + c] = s;
    if (Layer)
      partials[(slices + blockIdx.y) * cols + c] = b;
  }
}

/// normGradColumnKernel with V = 16 / sizeof(S) columns a thread (one
/// 16-byte access of x and of dy a row) and kNormGradUnroll of its rows
/// loaded before any is added, in the scalar kernel's order: the sums are
/// its sums to the bit. (The scalar kernel's warp moves 64 bytes of a bf16
/// row a request. With this one a 350M GPT's layer_norm_param_grad, 8192 x
/// 1024 bf16 with the slices' sum, takes 28 us under --profile: 1.1 TB/s,
/// far from the memory's 4.2; more slices, 64 rows each, made it 31.)
constexpr int kNormGradUnroll = 4;

template <typename S, typename St, bool Layer, int V>
__global__ void normGradColumnVectorKernel(const S *x, const void *mean,
                                           const void *rstd, const S *dy,
                                           AccT<S> *partials, int64_t rows,
                                           int64_t cols, int64_t slices) {
  using A = AccT<S>;
  constexpr int U = kNormGradUnroll;
  __shared__ A accScale[8][32 * V], accBias[Layer ? 8 : 1][32 * V];
  const int64_t c0 = (int64_t(blockIdx.x) * 32 + threadIdx.x) * V;
  const int64_t per = (rows + slices - 1) / slices;
  const int64_t begin = blockIdx.y * per;
  const int64_t end = begin + per < rows ? begin + per : rows;
  const int64_t step = blockDim.y;
  A s[V], b[V];
#pragma unroll
  for (int j = 0; j < V; ++j)
    s[j] = b[j] = A(0);
  auto add = [&](const Pack<S, V> &xv, const Pack<S, V> &dv, A mu, A rs) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const A h = (A(Elem<S>::load(xv.v[j])) - mu) * rs;
      const A d = Elem<S>::load(dv.v[j]);
      s[j] += d * h;
      b[j] += d;
    }
  };
  if (c0 < cols) {
    int64_t r = begin + threadIdx.y;
    for (; r + (U - 1) * step < end; r += U * step) {
      Pack<S, V> xv[U], dv[U];
      A mu[U], rs[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t row = r + u * step;
        xv[u] = *reinterpret_cast<const Pack<S, V> *>(x + row * cols + c0);
        dv[u] = *reinterpret_cast<const Pack<S, V> *>(dy + row * cols + c0);
        mu[u] = Layer ? loadStat<St, A>(mean, row) : A(0);
        rs[u] = loadStat<St, A>(rstd, row);
      }
#pragma unroll
      for (int u = 0; u < U; ++u)
        add(xv[u], dv[u], mu[u], rs[u]);
    }
    for (; r < end; r += step)
      add(*reinterpret_cast<const Pack<S, V> *>(x + r * cols + c0),
          *reinterpret_cast<const Pack<S, V> *>(dy + r * cols + c0),
          Layer ? loadStat<St, A>(mean, r) : A(0), loadStat<St, A>(rstd, r));
  }
#pragma unroll
  for (int j = 0; j < V; ++j) {
    accScale[threadIdx.y][threadIdx.x * V + j] = s[j];
    if (Layer)
      accBias[threadIdx.y][threadIdx.x * V + j] = b[j];
  }
  __syncthreads();
  if (threadIdx.y == 0 && c0 < cols) {
    for (int k = 1; k < int(blockDim.y); ++k)
#pragma unroll
      for (int j = 0; j < V; ++j) {
        s[j] += accScale[k][threadIdx.x * V + j];
        if (Layer)
          b[j] += accBias[k][threadIdx.x * V + j];
      }
#pragma unroll
    for (int j = 0; j < V; ++j) {
      partials[blockIdx.y * cols + c0 + j] = s[j];
      if (Layer)
        partials[(slices + blockIdx.y) * cols + c0 + j] = b[j];
    }
  }
}

template <typename S, bool Layer>
__global__ void normGradFinishKernel(const AccT<S> *partials, S *dscale,
                                     S *dbias, int64_t cols, int64_t slices) {
  using A = AccT<S>;
  DTCC_GRID_LOOP(c, cols) {
    A s = 0, b = 0;
    for (int64_t k = 0; k < slices; ++k) {
      s += partials[k * cols + c];
      if (Layer)
        b += partials[(slices + k) * cols + c];
    }
    dscale[c] = Elem<S>::store(s);
    if (Layer)
      dbias[c] = Elem<S>::store(b);
  }
}

//===----------------------------------------------------------------------===//
// cross_entropy and its gradient
//===----------------------------------------------------------------------===//

/// Logits S; the loss (forward) and dloss (gradient) L: S, or float for
/// half logits; the gradient's output S. Each thread reads and writes V
/// logits at a time (one 16-byte access where V divides the classes and
/// the rows are aligned: the vocabulary's rows of a language model are
/// read two or three times, and 2-byte accesses reached a fraction of the
/// memory's bandwidth).
template <typename S, typename L, typename I, bool Grad, int V>
__global__ void
crossEntropyKernel(const S *logits, const I *labels, const L *dloss,
                   std::conditional_t<Grad, S, L> *out, int64_t n, int64_t c,
                   int64_t ignore, DeviceError *error, int32_t site) {
  using A = AccT<S>;
  using O = std::conditional_t<Grad, S, L>;
  using P = Pack<S, V>;
  __shared__ A shared[kMaxRowsPerBlock * 32];
  A *sh = rowShared(shared);
  const int64_t packs = c / V;
  DTCC_ROW_LOOP(i, n) {
    const int64_t label = int64_t(labels[i]);
    const bool ignored = label == ignore;
    const bool bad = !ignored && (label < 0 || label >= c);
    if (bad && threadIdx.x == 0)
      recordError(error, site, kBadLabel, label, i, c);
    const P *x = reinterpret_cast<const P *>(logits + i * c);
    if (ignored || bad) {
      if constexpr (Grad) {
        P zero;
#pragma unroll
        for (int k = 0; k < V; ++k)
          zero.v[k] = Elem<O>::store(A(0));
        for (int64_t j = threadIdx.x; j < packs; j += blockDim.x)
          reinterpret_cast<P *>(out + i * c)[j] = zero;
      } else if (threadIdx.x == 0) {
        out[i] = Elem<O>::store(A(0));
      }
      continue; // uniform over the row's threads
    }
    // The maximum and the sum of exp(v - maximum) in one pass over the
    // row: each thread's sum is rescaled when its running maximum grows,
    // then by its maximum's distance to the row's. Two passes read a
    // language model's vocabulary rows twice; one pass left the 350M GPT's
    // forward cross_entropy where it was under --profile (8192 x 50304
    // bf16, over six steps with the first's module loads) and took 6% off
    // its gradient. A NaN makes the maximum and so the sum NaN; a thread
    // whose values are all -inf adds nothing.
    A m = -INFINITY, part = 0;
    for (int64_t j = threadIdx.x; j < packs; j += blockDim.x) {
      const P p = x[j];
      A pm = m;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const A v = Elem<S>::load(p.v[k]);
        pm = (v > pm || v != v) ? v : pm;
      }
      if (pm != m) {
        part = m == A(-INFINITY) ? A(0) : part * accExp(m - pm);
        m = pm;
      }
      if (m != A(-INFINITY)) {
#pragma unroll
        for (int k = 0; k < V; ++k)
          part += accExp(A(Elem<S>::load(p.v[k])) - m);
      }
    }
    const A rowM = rowMax(m, sh);
    A sum = rowSum(m == A(-INFINITY) ? A(0) : part * accExp(m - rowM), sh);
    m = rowM;
    if constexpr (Grad) {
      const A dl = A(Elem<L>::load(dloss[i])), inv = A(1) / sum;
      for (int64_t j = threadIdx.x; j < packs; j += blockDim.x) {
        const P p = x[j];
        P r;
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const A q = accExp(A(Elem<S>::load(p.v[k])) - m) * inv;
          const bool hit = j * V + k == label;
          r.v[k] = Elem<O>::store((q - (hit ? A(1) : A(0))) * dl);
        }
        reinterpret_cast<P *>(out + i * c)[j] = r;
      }
    } else if (threadIdx.x == 0) {
      out[i] = Elem<O>::store((m - A(Elem<S>::load(logits[i * c + label]))) +
                              accLog(sum));
    }
  }
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

template <typename A> __device__ A reduceIdentity(ReduceOp op) {
  switch (op) {
  case ReduceOp::kSum:
  case ReduceOp::kSumSquares: return A(0);
  case ReduceOp::kProd: return A(1);
  case ReduceOp::kMax:
    return std::is_floating_point_v<A> ? A(-INFINITY)
                                       : std::numeric_limits<A>::lowest();
  case ReduceOp::kMin:
    return std::is_floating_point_v<A> ? A(INFINITY)
                                       : std::numeric_limits<A>::max();
  }
  return A(0);
}
template <typename A> __device__ A reduceCombine(ReduceOp op, A a, A b) {
  switch (op) {
  case ReduceOp::kSum:
  case ReduceOp::kSumSquares: return a + b;
  case ReduceOp::kProd: return a * b;
  case ReduceOp::kMax: return (b > a || b != b) ? b : a;
  case ReduceOp::kMin: return (b < a || b != b) ? b : a;
  }
  return a;
}

/// What element `x` contributes: itself, or (kSumSquares) its square,
/// rounded before any sum (no contraction into a fused multiply-add).
template <typename S>
__device__ __forceinline__ ComputeT<S> reduceElement(ReduceOp op, S x) {
  using A = ComputeT<S>;
  const A v = A(Elem<S>::load(x));
  if (op != ReduceOp::kSumSquares)
    return v;
  if constexpr (std::is_same_v<A, float>)
    return __fmul_rn(v, v);
  else if constexpr (std::is_same_v<A, double>)
    return __dmul_rn(v, v);
  else
    return v * v;
}

/// The input offset of output element `o` (kept dims, output order).
__device__ int64_t keptOffset(const ReducePlan &p, int64_t o) {
  int64_t off = 0;
  for (int d = p.keptRank - 1; d >= 0; --d) {
    off += (o % p.keptShape[d]) * p.keptStrides[d];
    o /= p.keptShape[d];
  }
  return off;
}
__device__ int64_t reducedOffset(const ReducePlan &p, int64_t k) {
  int64_t off = 0;
  for (int d = p.reducedRank - 1; d >= 0; --d) {
    off += (k % p.reducedShape[d]) * p.reducedStrides[d];
    k /= p.reducedShape[d];
  }
  return off;
}

/// rowTail: a warp per output over a contiguous row of reducedNumel.
template <typename S, typename O>
__global__ void reduceRowKernel(ReduceOp op, ReducePlan p, const S *in, O *out) {
  using A = ComputeT<S>;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t o = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
       o < p.outNumel; o += warps) {
    const S *row = in + keptOffset(p, o);
    A acc = reduceIdentity<A>(op);
    for (int64_t k = threadIdx.x % 32; k < p.reducedNumel; k += 32)
      acc = reduceCombine(op, acc, reduceElement(op, row[k]));
#pragma unroll
    for (int sh = 16; sh > 0; sh /= 2)
      acc = reduceCombine(op, acc, __shfl_xor_sync(0xffffffffu, acc, sh));
    if (threadIdx.x % 32 == 0)
      out[o] = Elem<O>::store(acc);
  }
}

/// The slice [begin, end) of the reduced elements that slice `s` takes.
__device__ void sliceRange(const ReducePlan &p, int64_t s, int64_t &begin,
                           int64_t &end) {
  const int64_t per = (p.reducedNumel + p.slices - 1) / p.slices;
  begin = s * per;
  end = begin + per < p.reducedNumel ? begin + per : p.reducedNumel;
}

/// rowTail with slices: a block of 256 threads per (output, slice); the
/// slice's result goes to partial[s * outNumel + o].
template <typename S>
__global__ void reduceRowSliceKernel(ReduceOp op, ReducePlan p, const S *in,
                                     ComputeT<S> *partial) {
  using A = ComputeT<S>;
  __shared__ A warpResults[32];
  for (int64_t b = blockIdx.x; b < p.outNumel * p.slices; b += gridDim.x) {
    const int64_t o = b / p.slices, s = b % p.slices;
    int64_t begin, end;
    sliceRange(p, s, begin, end);
    const S *row = in + keptOffset(p, o);
    A acc = reduceIdentity<A>(op);
    for (int64_t k = begin + threadIdx.x; k < end; k += blockDim.x)
      acc = reduceCombine(op, acc, reduceElement(op, row[k]));
#pragma unroll
    for (int sh = 16; sh > 0; sh /= 2)
      acc = reduceCombine(op, acc, __shfl_xor_sync(0xffffffffu, acc, sh));
    if (threadIdx.x % 32 == 0)
      warpResults[threadIdx.x / 32] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
      A total = warpResults[0];
      for (unsigned w = 1; w < blockDim.x / 32; ++w)
        total = reduceCombine(op, total, warpResults[w]);
      partial[s * p.outNumel + o] = total;
    }
    __syncthreads();
  }
}

/// Everything else: blocks of 32 x 8 threads, threadIdx.x along 32
/// consecutive outputs (coalesced when the kept innermost dim is the
/// input's innermost), threadIdx.y along the reduced elements of slice
/// blockIdx.y. One slice writes the output; several write partial results.
template <typename S, typename O>
__global__ void reduceColumnKernel(ReduceOp op, ReducePlan p, const S *in,
                                   O *out, ComputeT<S> *partial) {
  using A = ComputeT<S>;
  __shared__ A lanes[8][33];
  const int64_t s = blockIdx.y;
  int64_t begin, end;
  sliceRange(p, s, begin, end);
  for (int64_t tile = blockIdx.x; tile * 32 < p.outNumel; tile += gridDim.x) {
    const int64_t o = tile * 32 + threadIdx.x;
    A acc = reduceIdentity<A>(op);
    if (o < p.outNumel) {
      const S *base = in + keptOffset(p, o);
      if (p.reducedRank == 1) {
        const int64_t stride = p.reducedStrides[0];
        for (int64_t k = begin + threadIdx.y; k < end; k += 8)
          acc = reduceCombine(op, acc, reduceElement(op, base[k * stride]));
      } else {
        for (int64_t k = begin + threadIdx.y; k < end; k += 8)
          acc = reduceCombine(op, acc,
                              reduceElement(op, base[reducedOffset(p, k)]));
      }
    }
    lanes[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && o < p.outNumel) {
      for (int j = 1; j < 8; ++j)
        acc = reduceCombine(op, acc, lanes[j][threadIdx.x]);
      if (p.slices == 1)
        out[o] = Elem<O>::store(acc);
      else
        partial[s * p.outNumel + o] = acc;
    }
    __syncthreads();
  }
}

/// The second pass: each output combines its slices in slice order.
template <typename S, typename O>
__global__ void reduceSlicesKernel(ReduceOp op, ReducePlan p,
                                   const ComputeT<S> *partial, O *out) {
  using A = ComputeT<S>;
  DTCC_GRID_LOOP(o, p.outNumel) {
    A acc = partial[o];
    for (int64_t s = 1; s < p.slices; ++s)
      acc = reduceCombine(op, acc, partial[s * p.outNumel + o]);
    out[o] = Elem<O>::store(acc);
  }
}

/// The statistics' type (mean, rstd): any float type for any rows.
template <typename S, typename Fn> void withStatType(DType st, Fn &&fn) {
  switch (st) {
  case DType::kF16: fn(__half{}); break;
  case DType::kBF16: fn(__nv_bfloat16{}); break;
  case DType::kF64: fn(double{}); break;
  default: fn(float{}); break;
  }
}

//===----------------------------------------------------------------------===//
// argmax / argmin and cumsum
//===----------------------------------------------------------------------===//

template <typename C> __device__ __forceinline__ bool isNanValue(C v) {
  if constexpr (std::is_floating_point_v<C>)
    return v != v;
  else
    return false;
}

/// Whether (v, iv) replaces (best, ib) as the extreme: NaN is the extreme,
/// ties go to the lower index (the higher with Last). The CPU backend's
/// sequential rule, made symmetric so that partial results combine.
template <bool IsMax, bool Last, typename C>
__device__ __forceinline__ bool argBetter(C v, int64_t iv, C best, int64_t ib) {
  const bool vn = isNanValue(v), bn = isNanValue(best);
  const bool later = Last ? iv > ib : iv < ib;
  if (vn || bn)
    return vn && (!bn || later);
  if (v == best)
    return later;
  return IsMax ? v > best : v < best;
}

/// One thread per (outer, inner) output.
template <typename S, bool IsMax, bool Last>
__global__ void argColumnKernel(const S *in, int64_t *out, int64_t outer,
                                int64_t size, int64_t inner) {
  using C = ComputeT<S>;
  DTCC_GRID_LOOP(o, outer * inner) {
    const S *x = in + (o / inner) * size * inner + o % inner;
    C best = Elem<S>::load(x[0]);
    int64_t bi = 0;
    for (int64_t d = 1; d < size; ++d) {
      const C v = Elem<S>::load(x[d * inner]);
      if (argBetter<IsMax, Last>(v, d, best, bi)) {
        best = v;
        bi = d;
      }
    }
    out[o] = bi;
  }
}

/// inner == 1: a warp per row; each lane scans a stride, then the lanes'
/// candidates combine.
template <typename S, bool IsMax, bool Last>
__global__ void argRowKernel(const S *in, int64_t *out, int64_t rows,
                             int64_t size) {
  using C = ComputeT<S>;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  const int lane = threadIdx.x % 32;
  for (int64_t r = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
       r < rows; r += warps) {
    const S *x = in + r * size;
    C best = Elem<S>::load(x[lane < size ? lane : 0]);
    int64_t bi = lane < size ? lane : 0;
    for (int64_t d = lane + 32; d < size; d += 32) {
      const C v = Elem<S>::load(x[d]);
      if (argBetter<IsMax, Last>(v, d, best, bi)) {
        best = v;
        bi = d;
      }
    }
#pragma unroll
    for (int sh = 16; sh > 0; sh /= 2) {
      const C v = __shfl_xor_sync(0xffffffffu, best, sh);
      const int64_t iv = __shfl_xor_sync(0xffffffffu, bi, sh);
      if (argBetter<IsMax, Last>(v, iv, best, bi)) {
        best = v;
        bi = iv;
      }
    }
    if (lane == 0)
      out[r] = bi;
  }
}

template <typename C> __device__ __forceinline__ C wrappingAdd(C a, C b) {
  if constexpr (std::is_integral_v<C>)
    return C(std::make_unsigned_t<C>(a) + std::make_unsigned_t<C>(b));
  else
    return a + b;
}

/// One thread per (outer, inner) column, in the CPU backend's order.
template <typename S>
__global__ void cumsumKernel(const S *in, S *out, int64_t outer, int64_t size,
                             int64_t inner, bool exclusive, bool reverse) {
  using C = ComputeT<S>;
  DTCC_GRID_LOOP(col, outer * inner) {
    const int64_t base = (col / inner) * size * inner + col % inner;
    C acc = C(0);
    for (int64_t t = 0; t < size; ++t) {
      const int64_t k = base + (reverse ? size - 1 - t : t) * inner;
      const C v = Elem<S>::load(in[k]);
      if (exclusive) {
        out[k] = Elem<S>::store(acc);
        acc = wrappingAdd(acc, v);
      } else {
        acc = wrappingAdd(acc, v);
        out[k] = Elem<S>::store(acc);
      }
    }
  }
}

template <typename Fn> bool visitRowType(DType dtype, Fn &&fn) {
  return visitFloat(dtype, fn);
}

} // namespace

cudaError_t launchSoftmax(DType dtype, bool log, const void *x, void *y,
                          int64_t outer, int64_t size, int64_t inner,
                          cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  visitRowType(dtype, [&](auto tag) {
    using S = decltype(tag);
    const S *xs = static_cast<const S *>(x);
    S *ys = static_cast<S *>(y);
    err = cudaSuccess;
    if (outer * inner == 0 || size == 0)
      return;
    if (inner == 1) {
      LaunchConfig c = rowLaunch(outer, size, launchLimits());
      if (log)
        softmaxRowKernel<S, true><<<blocksOf(c), threadsOf(c), 0, s>>>(xs, ys, outer, size);
      else
        softmaxRowKernel<S, false><<<blocksOf(c), threadsOf(c), 0, s>>>(xs, ys, outer, size);
    } else {
      LaunchConfig c = elementwiseLaunch(outer * inner, launchLimits());
      if (log)
        softmaxColumnKernel<S, true><<<blocksOf(c), threadsOf(c), 0, s>>>(xs, ys, outer, size, inner);
      else
        softmaxColumnKernel<S, false><<<blocksOf(c), threadsOf(c), 0, s>>>(xs, ys, outer, size, inner);
    }
    err = cudaGetLastError();
  });
  return err;
}

cudaError_t launchSoftmaxGrad(DType dtype, bool log, const void *y,
                              const void *dy, void *dx, int64_t outer,
                              int64_t size, int64_t inner, cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  visitRowType(dtype, [&](auto tag) {
    using S = decltype(tag);
    const S *ys = static_cast<const S *>(y), *ds = static_cast<const S *>(dy);
    S *xs = static_cast<S *>(dx);
    err = cudaSuccess;
    if (outer * inner == 0 || size == 0)
      return;
    if (inner == 1) {
      LaunchConfig c = rowLaunch(outer, size, launchLimits());
      if (log)
        softmaxGradRowKernel<S, true><<<blocksOf(c), threadsOf(c), 0, s>>>(ys, ds, xs, outer, size);
      else
        softmaxGradRowKernel<S, false><<<blocksOf(c), threadsOf(c), 0, s>>>(ys, ds, xs, outer, size);
    } else {
      LaunchConfig c = elementwiseLaunch(outer * inner, launchLimits());
      if (log)
        softmaxGradColumnKernel<S, true><<<blocksOf(c), threadsOf(c), 0, s>>>(ys, ds, xs, outer, size, inner);
      else
        softmaxGradColumnKernel<S, false><<<blocksOf(c), threadsOf(c), 0, s>>>(ys, ds, xs, outer, size, inner);
    }
    err = cudaGetLastError();
  });
  return err;
}

cudaError_t launchNorm(bool layer, DType dtype, DType statType, const void *x,
                       const void *scale, const void *bias, void *y,
                       void *mean, void *rstd, int64_t rows, int64_t cols,
                       double eps, cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  visitRowType(dtype, [&](auto tag) {
    using S = decltype(tag);
    withStatType<S>(statType, [&](auto stag) {
      using St = decltype(stag);
      err = cudaSuccess;
      // Rows of no elements still have their statistics written.
      if (rows == 0)
        return;
      LaunchConfig c = rowLaunch(rows, cols, launchLimits());
      const S *xs = static_cast<const S *>(x), *sc = static_cast<const S *>(scale),
              *bs = static_cast<const S *>(bias);
      if (layer)
        normKernel<S, St, true><<<blocksOf(c), threadsOf(c), 0, s>>>(
            xs, sc, bs, static_cast<S *>(y), mean, rstd, rows, cols,
            AccT<S>(eps));
      else
        normKernel<S, St, false><<<blocksOf(c), threadsOf(c), 0, s>>>(
            xs, sc, nullptr, static_cast<S *>(y), nullptr, rstd, rows, cols,
            AccT<S>(eps));
      err = cudaGetLastError();
    });
  });
  return err;
}

cudaError_t launchNormGrad(bool layer, DType dtype, DType statType,
                           const void *x, const void *scale, const void *mean,
                           const void *rstd, const void *dy, void *dx,
                           void *dscale, void *dbias, int64_t rows,
                           int64_t cols, int64_t slices, void *scratch,
                           cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  visitRowType(dtype, [&](auto tag) {
    using S = decltype(tag);
    withStatType<S>(statType, [&](auto stag) {
      using St = decltype(stag);
      using A = AccT<S>;
      A *partials = static_cast<A *>(scratch);
      err = cudaSuccess;
      if (cols == 0)
        return;
      const S *xs = static_cast<const S *>(x), *sc = static_cast<const S *>(scale),
              *ds = static_cast<const S *>(dy);
      if (rows > 0 && dx) {
        LaunchConfig c = rowLaunch(rows, cols, launchLimits());
        if (layer)
          normGradRowKernel<S, St, true><<<blocksOf(c), threadsOf(c), 0, s>>>(
              xs, sc, mean, rstd, ds, static_cast<S *>(dx), rows, cols);
        else
          normGradRowKernel<S, St, false><<<blocksOf(c), threadsOf(c), 0, s>>>(
              xs, sc, mean, rstd, ds, static_cast<S *>(dx), rows, cols);
      }
      if (rows > 0) {
        // 16 bytes a thread where the rows are whole aligned packs.
        constexpr int V = 16 / sizeof(S);
        const bool wide =
            cols % V == 0 && alignedTo(x, 16) && alignedTo(dy, 16);
        LaunchConfig cc = columnLaunch(rows, cols, launchLimits());
        dim3 grid(unsigned(wide ? (cols / V + 31) / 32 : cc.blocks),
                  unsigned(slices));
        auto columns = [&](auto kernel) {
          kernel<<<grid, threadsOf(cc), 0, s>>>(xs, mean, rstd, ds, partials,
                                                rows, cols, slices);
        };
        if (wide)
          layer ? columns(normGradColumnVectorKernel<S, St, true, V>)
                : columns(normGradColumnVectorKernel<S, St, false, V>);
        else
          layer ? columns(normGradColumnKernel<S, St, true>)
                : columns(normGradColumnKernel<S, St, false>);
      } else {
        err = cudaMemsetAsync(partials, 0,
                              (layer ? 2 : 1) * slices * cols * sizeof(A), s);
        if (err != cudaSuccess)
          return;
      }
      LaunchConfig f = elementwiseLaunch(cols, launchLimits());
      if (layer)
        normGradFinishKernel<S, true><<<blocksOf(f), threadsOf(f), 0, s>>>(
            partials, static_cast<S *>(dscale), static_cast<S *>(dbias), cols,
            slices);
      else
        normGradFinishKernel<S, false><<<blocksOf(f), threadsOf(f), 0, s>>>(
            partials, static_cast<S *>(dscale), nullptr, cols, slices);
      err = cudaGetLastError();
    });
  });
  return err;
}

template <bool Grad>
static cudaError_t crossEntropy(DType dtype, DType lossType, DType labelType,
                                const void *logits, const void *labels,
                                const void *dloss, void *out, int64_t n,
                                int64_t c, int64_t ignore, DeviceError *error,
                                int32_t site, cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  visitRowType(dtype, [&](auto tag) {
    using S = decltype(tag);
    auto run = [&](auto ltag, auto itag) {
      using L = decltype(ltag);
      using I = decltype(itag);
      using O = std::conditional_t<Grad, S, L>;
      err = cudaSuccess;
      if (n == 0)
        return;
      LaunchConfig cfg = rowLaunch(n, c, launchLimits());
      // 16 bytes at a time where every row starts aligned to them.
      constexpr int kV = 16 / sizeof(S);
      const bool wide =
          c % kV == 0 && alignedTo(logits, 16) && (!Grad || alignedTo(out, 16));
      auto go = [&](auto width) {
        crossEntropyKernel<S, L, I, Grad, decltype(width)::value>
            <<<blocksOf(cfg), threadsOf(cfg), 0, s>>>(
                static_cast<const S *>(logits), static_cast<const I *>(labels),
                static_cast<const L *>(dloss), static_cast<O *>(out), n, c,
                ignore, error, site);
      };
      if (wide)
        go(std::integral_constant<int, kV>{});
      else
        go(std::integral_constant<int, 1>{});
      err = cudaGetLastError();
    };
    auto withLabels = [&](auto ltag) {
      if (labelType == DType::kI32)
        run(ltag, int32_t{});
      else if (labelType == DType::kI64)
        run(ltag, int64_t{});
    };
    if (lossType == dtype)
      withLabels(S{});
    else if constexpr (!std::is_same_v<S, float> && !std::is_same_v<S, double>)
      if (lossType == DType::kF32)
        withLabels(float{});
  });
  return err;
}

cudaError_t launchCrossEntropy(DType dtype, DType lossType, DType labelType,
                               const void *logits, const void *labels,
                               void *loss, int64_t n, int64_t c, int64_t ignore,
                               DeviceError *error, int32_t site,
                               cudaStream_t s) {
  return crossEntropy<false>(dtype, lossType, labelType, logits, labels,
                             nullptr, loss, n, c, ignore, error, site, s);
}

cudaError_t launchCrossEntropyGrad(DType dtype, DType lossType,
                                   DType labelType, const void *logits,
                                   const void *labels, const void *dloss,
                                   void *dlogits, int64_t n, int64_t c,
                                   int64_t ignore, DeviceError *error,
                                   int32_t site, cudaStream_t s) {
  return crossEntropy<true>(dtype, lossType, labelType, logits, labels, dloss,
                            dlogits, n, c, ignore, error, site, s);
}

namespace {
/// launchReduce with input S and output O.
template <typename S, typename O>
cudaError_t reduceAs(ReduceOp op, const ReducePlan &plan, const void *in,
                     void *out, void *partials, cudaStream_t s) {
  using A = ComputeT<S>;
  static_assert(sizeof(A) <= 8, "partial results are 8-byte slots");
  if (plan.outNumel == 0)
    return cudaSuccess;
  const S *is = static_cast<const S *>(in);
  O *os = static_cast<O *>(out);
  A *partial = static_cast<A *>(partials);
  if (plan.slices > 1 && !partial)
    return cudaErrorInvalidValue; // the plan's scratch was not bound
  const DeviceLimits &limits = launchLimits();
  if (plan.rowTail && plan.reducedNumel >= 32 && plan.slices == 1) {
    LaunchConfig c = elementwiseLaunch(plan.outNumel * 32, limits);
    reduceRowKernel<S, O><<<blocksOf(c), threadsOf(c), 0, s>>>(op, plan, is,
                                                               os);
  } else if (plan.rowTail && plan.slices > 1) {
    const int64_t blocks = std::min<int64_t>(plan.outNumel * plan.slices,
                                             int64_t(1) << 30);
    reduceRowSliceKernel<S><<<unsigned(blocks), 256, 0, s>>>(op, plan, is,
                                                             partial);
  } else {
    const int64_t tiles = std::min<int64_t>((plan.outNumel + 31) / 32,
                                            int64_t(1) << 30);
    reduceColumnKernel<S, O><<<dim3(unsigned(tiles), unsigned(plan.slices)),
                               dim3(32, 8), 0, s>>>(op, plan, is, os, partial);
  }
  if (plan.slices > 1) {
    LaunchConfig c = elementwiseLaunch(plan.outNumel, limits);
    reduceSlicesKernel<S, O><<<blocksOf(c), threadsOf(c), 0, s>>>(op, plan,
                                                                  partial, os);
  }
  return cudaGetLastError();
}
} // namespace

namespace {

/// The squares of x[begin, end) (this thread's share) summed in A, each
/// rounded before the sum as sum_squares rounds it. Where the chunk's start
/// is aligned, a thread reads 16 bytes at a time into as many sums (added
/// in order at the end), four accesses in flight: one 2-byte load at a
/// time per thread read a 350M GPT's bf16 gradients at a third of the
/// memory's bandwidth (global_sum_squares under --profile).
template <typename S, typename A>
__device__ A chunkSquares(const void *data, int64_t begin, int64_t end) {
  const S *x = static_cast<const S *>(data);
  auto square = [](A v) {
    if constexpr (std::is_same_v<A, double>)
      return __dmul_rn(v, v);
    else
      return __fmul_rn(v, v);
  };
  constexpr int V = 16 / sizeof(S);
  A acc[V];
#pragma unroll
  for (int j = 0; j < V; ++j)
    acc[j] = A(0);
  int64_t tail = begin;
  if (alignedTo(x + begin, 16)) {
    const int64_t whole = begin + (end - begin) / V * V;
#pragma unroll 4
    for (int64_t i = begin + int64_t(threadIdx.x) * V; i < whole;
         i += int64_t(blockDim.x) * V) {
      const Pack<S, V> p = *reinterpret_cast<const Pack<S, V> *>(x + i);
#pragma unroll
      for (int j = 0; j < V; ++j)
        acc[j] += square(A(Elem<S>::load(p.v[j])));
    }
    tail = whole;
  }
  for (int64_t i = tail + threadIdx.x; i < end; i += blockDim.x)
    acc[0] += square(A(Elem<S>::load(x[i])));
  A sum = acc[0];
#pragma unroll
  for (int j = 1; j < V; ++j)
    sum += acc[j];
  return sum;
}

/// Each block takes every gridDim.x-th chunk (in increasing order, so each
/// search of the table starts from the last chunk's tensor): its partial
/// sum of squares into partials[chunk].
template <typename A>
__global__ void sumSquaresChunksKernel(const SumSquaresTensor *tensors,
                                       int count, int64_t chunks,
                                       int64_t chunkElems, A *partials) {
  __shared__ A shared[32];
  int owner = 0;
  for (int64_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
    owner = chunkOwner(tensors, count, chunk, owner);
    const SumSquaresTensor t = tensors[owner];
    const int64_t begin = (chunk - t.firstChunk) * chunkElems;
    const int64_t end = begin + chunkElems < t.n ? begin + chunkElems : t.n;
    A acc = 0;
    if constexpr (std::is_same_v<A, double>) {
      acc = chunkSquares<double, A>(t.data, begin, end);
    } else {
      switch (DType(t.dtype)) {
      case DType::kBF16:
        acc = chunkSquares<__nv_bfloat16, A>(t.data, begin, end);
        break;
      case DType::kF16:
        acc = chunkSquares<__half, A>(t.data, begin, end);
        break;
      default:
        acc = chunkSquares<float, A>(t.data, begin, end);
        break;
      }
    }
    acc = rowSum(acc, shared);
    if (threadIdx.x == 0)
      partials[chunk] = acc;
  }
}

constexpr int kSumSquaresFinishThreads = 1024;

/// One block: each operand's chunks summed by a warp, then the operands'
/// sums added in order by one thread.
template <typename A>
__global__ void sumSquaresFinishKernel(const SumSquaresTensor *tensors,
                                       int count, int64_t chunks,
                                       int64_t chunkElems, A *partials,
                                       A *out) {
  __shared__ A tile[kSumSquaresFinishThreads];
  A *sums = partials + chunks;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5,
            warps = blockDim.x >> 5;
  for (int t = warp; t < count; t += warps) {
    const int64_t first = tensors[t].firstChunk,
                  n = (tensors[t].n + chunkElems - 1) / chunkElems;
    A v = 0;
    for (int64_t c = lane; c < n; c += 32)
      v += partials[first + c];
    v = warpSum(v);
    if (lane == 0)
      sums[t] = v;
  }
  A total = 0;
  for (int base = 0; base < count; base += blockDim.x) {
    __syncthreads();
    if (base + int(threadIdx.x) < count)
      tile[threadIdx.x] = sums[base + threadIdx.x];
    __syncthreads();
    if (threadIdx.x == 0) {
      const int m = count - base < int(blockDim.x) ? count - base
                                                   : int(blockDim.x);
      for (int i = 0; i < m; ++i)
        total = base + i == 0 ? tile[0] : total + tile[i];
    }
  }
  if (threadIdx.x == 0)
    *out = total;
}

template <typename A>
cudaError_t globalSumSquares(const SumSquaresTensor *table, int count,
                             int64_t chunks, int64_t chunkElems,
                             void *partials, void *out, cudaStream_t s) {
  A *p = static_cast<A *>(partials);
  // Blocks resident at once (8 of 256 threads a multiprocessor), each
  // taking chunks in turn.
  const int64_t width = int64_t(std::max(launchLimits().smCount, 1)) * 8;
  if (chunks > 0)
    sumSquaresChunksKernel<A><<<unsigned(std::min(chunks, width)), 256, 0, s>>>(
        table, count, chunks, chunkElems, p);
  sumSquaresFinishKernel<A><<<1, kSumSquaresFinishThreads, 0, s>>>(
      table, count, chunks, chunkElems, p, static_cast<A *>(out));
  return cudaGetLastError();
}

} // namespace

cudaError_t launchGlobalSumSquares(const SumSquaresTensor *table, int count,
                                   int64_t chunks, int64_t chunkElems,
                                   DType outType, void *partials, void *out,
                                   cudaStream_t s) {
  if (count < 1 || chunks >= (int64_t(1) << 31))
    return cudaErrorInvalidValue;
  if (outType == DType::kF64)
    return globalSumSquares<double>(table, count, chunks, chunkElems, partials,
                                    out, s);
  if (outType == DType::kF32)
    return globalSumSquares<float>(table, count, chunks, chunkElems, partials,
                                   out, s);
  return cudaErrorInvalidValue;
}

cudaError_t launchReduce(ReduceOp op, DType dtype, DType outType,
                         const ReducePlan &plan, const void *in, void *out,
                         void *partials, cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  visitArithmetic(dtype, [&](auto tag) {
    using S = decltype(tag);
    if (outType == dtype) {
      err = reduceAs<S, S>(op, plan, in, out, partials, s);
      return;
    }
    // f16 and bf16 squares summed into f32.
    if constexpr (std::is_same_v<ComputeT<S>, float> &&
                  !std::is_same_v<S, float>)
      if (op == ReduceOp::kSumSquares && outType == DType::kF32)
        err = reduceAs<S, float>(op, plan, in, out, partials, s);
  });
  return err;
}

cudaError_t launchArgExtreme(bool isMax, bool last, DType dtype, const void *in,
                             int64_t *out, int64_t outer, int64_t size,
                             int64_t inner, cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  visitArithmetic(dtype, [&](auto tag) {
    using S = decltype(tag);
    err = cudaSuccess;
    if (outer * inner == 0 || size == 0)
      return;
    const S *x = static_cast<const S *>(in);
    auto go = [&](auto maxTag, auto lastTag) {
      constexpr bool M = decltype(maxTag)::value, L = decltype(lastTag)::value;
      if (inner == 1 && size >= 32) {
        LaunchConfig c = elementwiseLaunch(outer * 32, launchLimits());
        argRowKernel<S, M, L><<<blocksOf(c), threadsOf(c), 0, s>>>(x, out,
                                                                   outer, size);
      } else {
        LaunchConfig c = elementwiseLaunch(outer * inner, launchLimits());
        argColumnKernel<S, M, L>
            <<<blocksOf(c), threadsOf(c), 0, s>>>(x, out, outer, size, inner);
      }
    };
    using T = std::true_type;
    using F = std::false_type;
    if (isMax)
      last ? go(T{}, T{}) : go(T{}, F{});
    else
      last ? go(F{}, T{}) : go(F{}, F{});
    err = cudaGetLastError();
  });
  return err;
}

cudaError_t launchCumsum(DType dtype, const void *in, void *out, int64_t outer,
                         int64_t size, int64_t inner, bool exclusive,
                         bool reverse, cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  visitArithmetic(dtype, [&](auto tag) {
    using S = decltype(tag);
    err = cudaSuccess;
    if (outer * inner == 0 || size == 0)
      return;
    LaunchConfig c = elementwiseLaunch(outer * inner, launchLimits());
    cumsumKernel<S><<<blocksOf(c), threadsOf(c), 0, s>>>(
        static_cast<const S *>(in), static_cast<S *>(out), outer, size, inner,
        exclusive, reverse);
    err = cudaGetLastError();
  });
  return err;
}

} // namespace dtcc::runtime::cuda
