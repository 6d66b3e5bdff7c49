//===- NormPoolKernels.cu - batch/group norm and pooling kernels ----------===//
//
// Batch-norm sums: blocks of 256 threads over slices of one channel's
// elements, accumulated in double, then a per-channel finish over the
// slices. Per-element batch norm and its gradient: grid-stride loops.
// Group norm: a block per (sample, group), statistics in double (mean, then
// centred moments), and a block per channel for the parameter gradients.
// Pooling: a thread per output (forward) or per input element (average
// pooling's gradient, gathered, so deterministic); max pooling's gradient
// adds atomically at the saved positions. f16/bf16 compute in float.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cuda/KernelCommon.cuh"
#include "runtime/device/cuda/NormPoolLaunch.h"

#include <limits>

namespace dtcc::runtime::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T> __device__ __forceinline__ T rsqrtOf(T v);
template <> __device__ __forceinline__ float rsqrtOf(float v) { return rsqrtf(v); }
template <> __device__ __forceinline__ double rsqrtOf(double v) { return rsqrt(v); }

template <typename S> __device__ __forceinline__ double loadD(const S *p, int64_t i) {
  return double(Elem<S>::load(p[i]));
}

/// Sums a double over the block (blockDim.x a multiple of 32, at most
/// 1024); every thread gets the total. `shared` holds 32 doubles.
__device__ __forceinline__ double blockSum(double v, double *shared) {
  v = warpSum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0)
    shared[warp] = v;
  __syncthreads();
  v = lane < int(blockDim.x >> 5) ? shared[lane] : 0.0;
  return warpSum(v);
}

/// Every thread of the grid over [0, n), for the per-element kernels.
#define DTCC_ELEMENTS(i, n) DTCC_GRID_LOOP(i, n)

//===----------------------------------------------------------------------===//
// Batch norm
//===----------------------------------------------------------------------===//

/// Block b: channel b / slices, slice b % slices of its batch*spatial
/// elements; partials[(c * slices + slice) * 2 + {0, 1}].
template <typename S, bool Grad>
__global__ void batchNormSumsKernel(const S *x, const S *center, const S *dy,
                                    double *partials, ChannelDims d,
                                    int64_t slices) {
  __shared__ double shared[32];
  const int64_t c = blockIdx.x / slices, slice = blockIdx.x % slices;
  const int64_t total = d.batch * d.spatial;
  const int64_t per = (total + slices - 1) / slices;
  const int64_t begin = slice * per;
  const int64_t end = begin + per < total ? begin + per : total;
  const double k = loadD(center, c);
  double a = 0, b = 0;
  for (int64_t e = begin + threadIdx.x; e < end; e += blockDim.x) {
    const int64_t n = e / d.spatial, s = e - n * d.spatial;
    const int64_t i = (n * d.channels + c) * d.spatial + s;
    const double v = loadD(x, i) - k;
    if constexpr (Grad) {
      const double g = loadD(dy, i);
      a += g;
      b += g * v;
    } else {
      a += v;
      b += v * v;
    }
  }
  a = blockSum(a, shared);
  b = blockSum(b, shared);
  if (threadIdx.x == 0) {
    partials[(c * slices + slice) * 2] = a;
    partials[(c * slices + slice) * 2 + 1] = b;
  }
}

template <typename S>
__global__ void batchNormSumsFinishKernel(const double *partials, S *out,
                                          int64_t channels, int64_t slices) {
  DTCC_ELEMENTS(c, channels) {
    double a = 0, b = 0;
    for (int64_t k = 0; k < slices; ++k) {
      a += partials[(c * slices + k) * 2];
      b += partials[(c * slices + k) * 2 + 1];
    }
    out[c] = Elem<S>::store(ComputeT<S>(a));
    out[channels + c] = Elem<S>::store(ComputeT<S>(b));
  }
}

template <typename S>
__global__ void batchNormKernel(const S *x, const S *scale, const S *bias,
                                const S *mean, const S *var, S *y,
                                ChannelDims d, ComputeT<S> eps) {
  using C = ComputeT<S>;
  DTCC_ELEMENTS(i, d.batch * d.channels * d.spatial) {
    const int64_t c = (i / d.spatial) % d.channels;
    const C a = Elem<S>::load(scale[c]) * rsqrtOf(Elem<S>::load(var[c]) + eps);
    y[i] = Elem<S>::store((Elem<S>::load(x[i]) - Elem<S>::load(mean[c])) * a +
                          Elem<S>::load(bias[c]));
  }
}

template <typename S>
__global__ void batchNormGradKernel(const S *x, const S *dy, const S *scale,
                                    const S *mean, const S *var,
                                    const S *stats, S *dx, ChannelDims d,
                                    ComputeT<S> eps, ComputeT<S> invCount) {
  using C = ComputeT<S>;
  DTCC_ELEMENTS(i, d.batch * d.channels * d.spatial) {
    const int64_t c = (i / d.spatial) % d.channels;
    const C r = rsqrtOf(Elem<S>::load(var[c]) + eps);
    const C k1 = Elem<S>::load(stats[c]) * invCount;
    const C k2 = r * r * Elem<S>::load(stats[d.channels + c]) * invCount;
    const C a = Elem<S>::load(scale[c]) * r;
    dx[i] = Elem<S>::store((Elem<S>::load(dy[i]) - k1 -
                            (Elem<S>::load(x[i]) - Elem<S>::load(mean[c])) * k2) *
                           a);
  }
}

template <typename S>
__global__ void batchNormUpdateKernel(const S *rm, const S *rv, const S *mean,
                                      const S *var, S *nm, S *nv, int64_t n,
                                      double momentum, double varScale) {
  using C = ComputeT<S>;
  DTCC_ELEMENTS(i, n) {
    const double keep = 1 - momentum;
    const double m = loadD(rm, i) * momentum + loadD(mean, i) * keep;
    const double v = loadD(rv, i) * momentum + loadD(var, i) * varScale * keep;
    nm[i] = Elem<S>::store(C(m));
    nv[i] = Elem<S>::store(C(v));
  }
}

//===----------------------------------------------------------------------===//
// Group norm
//===----------------------------------------------------------------------===//

/// A block per (sample, group): its perGroup * spatial elements are
/// contiguous.
template <typename S>
__global__ void groupNormKernel(const S *x, const S *scale, const S *bias,
                                S *y, S *meanOut, S *rstdOut, ChannelDims d,
                                int64_t perGroup, double eps) {
  using C = ComputeT<S>;
  __shared__ double shared[32];
  const int64_t groups = d.channels / perGroup, block = perGroup * d.spatial;
  for (int64_t row = blockIdx.x; row < d.batch * groups; row += gridDim.x) {
    const S *xr = x + row * block;
    S *yr = y + row * block;
    double s = 0;
    for (int64_t e = threadIdx.x; e < block; e += blockDim.x)
      s += loadD(xr, e);
    const double mean = block ? blockSum(s, shared) / double(block) : 0.0;
    double d1 = 0, d2 = 0;
    for (int64_t e = threadIdx.x; e < block; e += blockDim.x) {
      const double v = loadD(xr, e) - mean;
      d1 += v;
      d2 += v * v;
    }
    d1 = blockSum(d1, shared);
    d2 = blockSum(d2, shared);
    double var = block ? (d2 - d1 * d1 / double(block)) / double(block) : 0.0;
    var = var > 0 ? var : 0.0;
    const double r = 1.0 / sqrt(var + eps);
    if (threadIdx.x == 0) {
      meanOut[row] = Elem<S>::store(C(mean));
      rstdOut[row] = Elem<S>::store(C(r));
    }
    const int64_t c0 = (row % groups) * perGroup;
    const C m = C(mean), rc = C(r);
    for (int64_t e = threadIdx.x; e < block; e += blockDim.x) {
      const int64_t c = c0 + e / d.spatial;
      yr[e] = Elem<S>::store((Elem<S>::load(xr[e]) - m) * rc *
                                 Elem<S>::load(scale[c]) +
                             Elem<S>::load(bias[c]));
    }
  }
}

/// dx per (sample, group): r (g - avg(g) - h avg(g h)), g = dy scale.
template <typename S>
__global__ void groupNormGradRowKernel(const S *x, const S *scale,
                                       const S *mean, const S *rstd,
                                       const S *dy, S *dx, ChannelDims d,
                                       int64_t perGroup) {
  using C = ComputeT<S>;
  __shared__ double shared[32];
  const int64_t groups = d.channels / perGroup, block = perGroup * d.spatial;
  for (int64_t row = blockIdx.x; row < d.batch * groups; row += gridDim.x) {
    const int64_t base = row * block, c0 = (row % groups) * perGroup;
    const double mu = loadD(mean, row), r = loadD(rstd, row);
    double sg = 0, sgh = 0;
    for (int64_t e = threadIdx.x; e < block; e += blockDim.x) {
      const double g = loadD(dy, base + e) * loadD(scale, c0 + e / d.spatial);
      sg += g;
      sgh += g * (loadD(x, base + e) - mu) * r;
    }
    sg = blockSum(sg, shared);
    sgh = blockSum(sgh, shared);
    const C meanG = C(block ? sg / double(block) : 0.0);
    const C meanGH = C(block ? sgh / double(block) : 0.0);
    const C mc = C(mu), rc = C(r);
    for (int64_t e = threadIdx.x; e < block; e += blockDim.x) {
      const C h = (Elem<S>::load(x[base + e]) - mc) * rc;
      const C g = Elem<S>::load(dy[base + e]) *
                  Elem<S>::load(scale[c0 + e / d.spatial]);
      dx[base + e] = Elem<S>::store(rc * (g - meanG - h * meanGH));
    }
  }
}

/// dscale[c] = sum(dy h), dbias[c] = sum(dy) over samples and space: a
/// block per channel.
template <typename S>
__global__ void groupNormGradParamKernel(const S *x, const S *mean,
                                         const S *rstd, const S *dy,
                                         S *dscale, S *dbias, ChannelDims d,
                                         int64_t perGroup) {
  __shared__ double shared[32];
  const int64_t groups = d.channels / perGroup;
  for (int64_t c = blockIdx.x; c < d.channels; c += gridDim.x) {
    double ds = 0, db = 0;
    const int64_t total = d.batch * d.spatial;
    for (int64_t e = threadIdx.x; e < total; e += blockDim.x) {
      const int64_t n = e / d.spatial, s = e - n * d.spatial;
      const int64_t i = (n * d.channels + c) * d.spatial + s;
      const int64_t row = n * groups + c / perGroup;
      const double g = loadD(dy, i);
      ds += g * (loadD(x, i) - loadD(mean, row)) * loadD(rstd, row);
      db += g;
    }
    ds = blockSum(ds, shared);
    db = blockSum(db, shared);
    if (threadIdx.x == 0) {
      dscale[c] = Elem<S>::store(ComputeT<S>(ds));
      dbias[c] = Elem<S>::store(ComputeT<S>(db));
    }
  }
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

template <typename T> __device__ __forceinline__ T lowestOf() {
  if constexpr (std::is_floating_point_v<T>)
    return T(-INFINITY);
  else
    return std::numeric_limits<T>::lowest();
}

template <typename T> __device__ __forceinline__ bool isNanOf(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return v != v;
  else
    return false;
}

/// Output o of a plane as (o0, o1, o2).
__device__ __forceinline__ void outCoords(const PoolWindow &w, int64_t o,
                                          int64_t (&c)[3]) {
  c[2] = o % w.out[2];
  o /= w.out[2];
  c[1] = o % w.out[1];
  c[0] = o / w.out[1];
}

/// Taps of the window of `c` on the input (explicit padding counted with
/// countIncludePad), per dimension, multiplied.
__device__ int64_t divisorOf(const PoolWindow &w, const int64_t (&c)[3]) {
  int64_t count = 1;
  for (int d = 0; d < 3; ++d) {
    const int64_t lo = w.countIncludePad ? -w.low[d] : 0;
    const int64_t hi = w.countIncludePad ? w.in[d] + w.high[d] : w.in[d];
    const int64_t start = c[d] * w.stride[d] - w.low[d];
    int64_t taps = 0;
    for (int64_t k = 0; k < w.kernel[d]; ++k) {
      const int64_t i = start + k * w.dilation[d];
      taps += i >= lo && i < hi;
    }
    count *= taps;
  }
  return count;
}

/// The first maximum in window order, or the last NaN; -1 for a window of
/// padding only (as the CPU kernel).
template <typename S>
__global__ void maxPoolKernel(const S *x, S *y, int64_t *indices,
                              PoolWindow w) {
  using C = ComputeT<S>;
  const int64_t outPlane = w.out[0] * w.out[1] * w.out[2];
  const int64_t inPlane = w.in[0] * w.in[1] * w.in[2];
  DTCC_ELEMENTS(i, w.planes * outPlane) {
    const int64_t plane = i / outPlane;
    int64_t c[3];
    outCoords(w, i - plane * outPlane, c);
    const S *xp = x + plane * inPlane;
    C best = lowestOf<C>();
    int64_t at = -1;
    for (int64_t k0 = 0; k0 < w.kernel[0]; ++k0) {
      const int64_t i0 = c[0] * w.stride[0] - w.low[0] + k0 * w.dilation[0];
      if (i0 < 0 || i0 >= w.in[0])
        continue;
      for (int64_t k1 = 0; k1 < w.kernel[1]; ++k1) {
        const int64_t i1 = c[1] * w.stride[1] - w.low[1] + k1 * w.dilation[1];
        if (i1 < 0 || i1 >= w.in[1])
          continue;
        for (int64_t k2 = 0; k2 < w.kernel[2]; ++k2) {
          const int64_t i2 = c[2] * w.stride[2] - w.low[2] + k2 * w.dilation[2];
          if (i2 < 0 || i2 >= w.in[2])
            continue;
          const int64_t p = (i0 * w.in[1] + i1) * w.in[2] + i2;
          const C v = Elem<S>::load(xp[p]);
          if (at < 0 || v > best || isNanOf(v)) {
            best = v;
            at = p;
          }
        }
      }
    }
    y[i] = Elem<S>::store(best);
    indices[i] = at;
  }
}

template <typename A, typename S>
__global__ void maxPoolGradKernel(const S *dy, const int64_t *indices, A *acc,
                                  int64_t planes, int64_t inPlane,
                                  int64_t outPlane, DeviceError *error,
                                  int32_t site) {
  DTCC_ELEMENTS(o, planes * outPlane) {
    const int64_t at = indices[o];
    if (at < 0)
      continue;
    if (at >= inPlane) {
      recordError(error, site, kBadIndex, at, o, inPlane);
      continue;
    }
    atomicAdd(acc + (o / outPlane) * inPlane + at, A(Elem<S>::load(dy[o])));
  }
}

template <typename S>
__global__ void avgPoolKernel(const S *x, S *y, PoolWindow w) {
  using C = ComputeT<S>;
  const int64_t outPlane = w.out[0] * w.out[1] * w.out[2];
  const int64_t inPlane = w.in[0] * w.in[1] * w.in[2];
  DTCC_ELEMENTS(i, w.planes * outPlane) {
    const int64_t plane = i / outPlane;
    int64_t c[3];
    outCoords(w, i - plane * outPlane, c);
    const S *xp = x + plane * inPlane;
    C sum = 0;
    for (int64_t k0 = 0; k0 < w.kernel[0]; ++k0) {
      const int64_t i0 = c[0] * w.stride[0] - w.low[0] + k0 * w.dilation[0];
      if (i0 < 0 || i0 >= w.in[0])
        continue;
      for (int64_t k1 = 0; k1 < w.kernel[1]; ++k1) {
        const int64_t i1 = c[1] * w.stride[1] - w.low[1] + k1 * w.dilation[1];
        if (i1 < 0 || i1 >= w.in[1])
          continue;
        for (int64_t k2 = 0; k2 < w.kernel[2]; ++k2) {
          const int64_t i2 = c[2] * w.stride[2] - w.low[2] + k2 * w.dilation[2];
          if (i2 < 0 || i2 >= w.in[2])
            continue;
          sum += Elem<S>::load(xp[(i0 * w.in[1] + i1) * w.in[2] + i2]);
        }
      }
    }
    const int64_t div = divisorOf(w, c);
    y[i] = Elem<S>::store(div ? sum / C(div) : C(0));
  }
}

/// The outputs whose windows hold input position `i` along one dimension:
/// for tap k, o = (i + low - k * dilation) / stride when that divides and
/// falls in [0, out).
__device__ __forceinline__ bool outputOfTap(const PoolWindow &w, int d,
                                            int64_t i, int64_t k,
                                            int64_t &o) {
  const int64_t p = i + w.low[d] - k * w.dilation[d];
  if (p < 0 || p % w.stride[d] != 0)
    return false;
  o = p / w.stride[d];
  return o < w.out[d];
}

template <typename S>
__global__ void avgPoolGradKernel(const S *dy, S *dx, PoolWindow w) {
  using C = ComputeT<S>;
  const int64_t outPlane = w.out[0] * w.out[1] * w.out[2];
  const int64_t inPlane = w.in[0] * w.in[1] * w.in[2];
  DTCC_ELEMENTS(e, w.planes * inPlane) {
    const int64_t plane = e / inPlane;
    int64_t rest = e - plane * inPlane;
    const int64_t i2 = rest % w.in[2];
    rest /= w.in[2];
    const int64_t i1 = rest % w.in[1], i0 = rest / w.in[1];
    const S *gp = dy + plane * outPlane;
    C acc = 0;
    int64_t c[3];
    for (int64_t k0 = 0; k0 < w.kernel[0]; ++k0) {
      if (!outputOfTap(w, 0, i0, k0, c[0]))
        continue;
      for (int64_t k1 = 0; k1 < w.kernel[1]; ++k1) {
        if (!outputOfTap(w, 1, i1, k1, c[1]))
          continue;
        for (int64_t k2 = 0; k2 < w.kernel[2]; ++k2) {
          if (!outputOfTap(w, 2, i2, k2, c[2]))
            continue;
          const int64_t div = divisorOf(w, c);
          if (div)
            acc += Elem<S>::load(gp[(c[0] * w.out[1] + c[1]) * w.out[2] + c[2]]) /
                   C(div);
        }
      }
    }
    dx[e] = Elem<S>::store(acc);
  }
}

/// Calls fn(S{}) for the 8-bit integer types max pooling also takes.
template <typename Fn> bool visitPoolType(DType dtype, Fn &&fn) {
  switch (dtype) {
  case DType::kI8: fn(int8_t{}); return true;
  case DType::kU8: fn(uint8_t{}); return true;
  default: return visitFloat(dtype, fn);
  }
}

dim3 elementBlocks(int64_t n) {
  return blocksOf(elementwiseLaunch(n, launchLimits()));
}

/// Blocks for a loop over `rows` rows of a block each (grid-stride beyond).
dim3 rowBlocks(int64_t rows) {
  const int64_t most = int64_t(launchLimits().smCount) * kBlocksPerSm;
  return dim3(unsigned(rows < most ? rows : most));
}

} // namespace

cudaError_t launchBatchNormSums(bool grad, DType dtype, const void *x,
                                const void *center, const void *dy, void *out,
                                ChannelDims d, double *partials, int64_t slices,
                                cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  visitFloat(dtype, [&](auto tag) {
    using S = decltype(tag);
    err = cudaSuccess;
    if (d.channels == 0)
      return;
    const S *xs = static_cast<const S *>(x), *cs = static_cast<const S *>(center),
            *gs = static_cast<const S *>(dy);
    const dim3 blocks(unsigned(d.channels * slices));
    if (grad)
      batchNormSumsKernel<S, true><<<blocks, kThreads, 0, s>>>(xs, cs, gs, partials,
                                                               d, slices);
    else
      batchNormSumsKernel<S, false><<<blocks, kThreads, 0, s>>>(xs, cs, nullptr,
                                                                partials, d, slices);
    batchNormSumsFinishKernel<S><<<elementBlocks(d.channels), kElementwiseThreads, 0,
                                   s>>>(partials, static_cast<S *>(out), d.channels,
                                        slices);
    err = cudaGetLastError();
  });
  return err;
}

cudaError_t launchBatchNorm(DType dtype, const void *x, const void *scale,
                            const void *bias, const void *mean, const void *var,
                            void *y, ChannelDims d, double eps, cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  visitFloat(dtype, [&](auto tag) {
    using S = decltype(tag);
    err = cudaSuccess;
    const int64_t n = d.batch * d.channels * d.spatial;
    if (n == 0)
      return;
    batchNormKernel<S><<<elementBlocks(n), kElementwiseThreads, 0, s>>>(
        static_cast<const S *>(x), static_cast<const S *>(scale),
        static_cast<const S *>(bias), static_cast<const S *>(mean),
        static_cast<const S *>(var), static_cast<S *>(y), d, ComputeT<S>(eps));
    err = cudaGetLastError();
  });
  return err;
}

cudaError_t launchBatchNormGrad(DType dtype, const void *x, const void *dy,
                                const void *scale, const void *mean,
                                const void *var, const void *stats, void *dx,
                                ChannelDims d, double eps, int64_t count,
                                cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  visitFloat(dtype, [&](auto tag) {
    using S = decltype(tag);
    err = cudaSuccess;
    const int64_t n = d.batch * d.channels * d.spatial;
    if (n == 0)
      return;
    batchNormGradKernel<S><<<elementBlocks(n), kElementwiseThreads, 0, s>>>(
        static_cast<const S *>(x), static_cast<const S *>(dy),
        static_cast<const S *>(scale), static_cast<const S *>(mean),
        static_cast<const S *>(var), static_cast<const S *>(stats),
        static_cast<S *>(dx), d, ComputeT<S>(eps),
        ComputeT<S>(1.0 / double(count)));
    err = cudaGetLastError();
  });
  return err;
}

cudaError_t launchBatchNormUpdate(DType dtype, const void *runningMean,
                                  const void *runningVar, const void *mean,
                                  const void *var, void *newMean, void *newVar,
                                  int64_t n, double momentum, double varScale,
                                  cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  visitFloat(dtype, [&](auto tag) {
    using S = decltype(tag);
    err = cudaSuccess;
    if (n == 0)
      return;
    batchNormUpdateKernel<S><<<elementBlocks(n), kElementwiseThreads, 0, s>>>(
        static_cast<const S *>(runningMean), static_cast<const S *>(runningVar),
        static_cast<const S *>(mean), static_cast<const S *>(var),
        static_cast<S *>(newMean), static_cast<S *>(newVar), n, momentum,
        varScale);
    err = cudaGetLastError();
  });
  return err;
}

cudaError_t launchGroupNorm(DType dtype, const void *x, const void *scale,
                            const void *bias, void *y, void *mean, void *rstd,
                            ChannelDims d, int64_t perGroup, double eps,
                            cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  visitFloat(dtype, [&](auto tag) {
    using S = decltype(tag);
    err = cudaSuccess;
    const int64_t rows = d.batch * (d.channels / perGroup);
    if (rows == 0)
      return;
    groupNormKernel<S><<<rowBlocks(rows), kThreads, 0, s>>>(
        static_cast<const S *>(x), static_cast<const S *>(scale),
        static_cast<const S *>(bias), static_cast<S *>(y), static_cast<S *>(mean),
        static_cast<S *>(rstd), d, perGroup, eps);
    err = cudaGetLastError();
  });
  return err;
}

cudaError_t launchGroupNormGrad(DType dtype, const void *x, const void *scale,
                                const void *mean, const void *rstd,
                                const void *dy, void *dx, void *dscale,
                                void *dbias, ChannelDims d, int64_t perGroup,
                                cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  visitFloat(dtype, [&](auto tag) {
    using S = decltype(tag);
    err = cudaSuccess;
    if (d.channels == 0)
      return;
    const S *xs = static_cast<const S *>(x), *sc = static_cast<const S *>(scale),
            *ms = static_cast<const S *>(mean), *rs = static_cast<const S *>(rstd),
            *gs = static_cast<const S *>(dy);
    const int64_t rows = d.batch * (d.channels / perGroup);
    if (rows > 0)
      groupNormGradRowKernel<S><<<rowBlocks(rows), kThreads, 0, s>>>(
          xs, sc, ms, rs, gs, static_cast<S *>(dx), d, perGroup);
    groupNormGradParamKernel<S><<<rowBlocks(d.channels), kThreads, 0, s>>>(
        xs, ms, rs, gs, static_cast<S *>(dscale), static_cast<S *>(dbias), d,
        perGroup);
    err = cudaGetLastError();
  });
  return err;
}

cudaError_t launchMaxPool(DType dtype, const void *x, void *y, int64_t *indices,
                          const PoolWindow &w, cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  visitPoolType(dtype, [&](auto tag) {
    using S = decltype(tag);
    err = cudaSuccess;
    const int64_t n = w.planes * w.out[0] * w.out[1] * w.out[2];
    if (n == 0)
      return;
    maxPoolKernel<S><<<elementBlocks(n), kElementwiseThreads, 0, s>>>(
        static_cast<const S *>(x), static_cast<S *>(y), indices, w);
    err = cudaGetLastError();
  });
  return err;
}

cudaError_t launchMaxPoolGrad(DType dtype, const void *dy,
                              const int64_t *indices, void *dx, float *scratch,
                              int64_t planes, int64_t inPlane, int64_t outPlane,
                              DeviceError *error, int32_t site,
                              cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  visitFloat(dtype, [&](auto tag) {
    using S = decltype(tag);
    const int64_t out = planes * outPlane;
    err = accumulateAtomically<S>(
        dx, scratch, planes * inPlane, s, [&](ComputeT<S> *acc) {
          if (out > 0)
            maxPoolGradKernel<ComputeT<S>, S>
                <<<elementBlocks(out), kElementwiseThreads, 0, s>>>(
                    static_cast<const S *>(dy), indices, acc, planes, inPlane,
                    outPlane, error, site);
        });
  });
  return err;
}

cudaError_t launchAvgPool(DType dtype, const void *x, void *y,
                          const PoolWindow &w, cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  visitFloat(dtype, [&](auto tag) {
    using S = decltype(tag);
    err = cudaSuccess;
    const int64_t n = w.planes * w.out[0] * w.out[1] * w.out[2];
    if (n == 0)
      return;
    avgPoolKernel<S><<<elementBlocks(n), kElementwiseThreads, 0, s>>>(
        static_cast<const S *>(x), static_cast<S *>(y), w);
    err = cudaGetLastError();
  });
  return err;
}

cudaError_t launchAvgPoolGrad(DType dtype, const void *dy, void *dx,
                              const PoolWindow &w, cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  visitFloat(dtype, [&](auto tag) {
    using S = decltype(tag);
    err = cudaSuccess;
    const int64_t n = w.planes * w.in[0] * w.in[1] * w.in[2];
    if (n == 0)
      return;
    avgPoolGradKernel<S><<<elementBlocks(n), kElementwiseThreads, 0, s>>>(
        static_cast<const S *>(dy), static_cast<S *>(dx), w);
    err = cudaGetLastError();
  });
  return err;
}

} // namespace dtcc::runtime::cuda
