//===- KernelCommon.cuh - helpers shared by dtcc's CUDA kernels -*- CUDA -*-===//
//
// Storage/compute element traits (f16 and bf16 compute in float), the
// strided offsets of a Layout, warp and block sums, dtype dispatch, and the
// launch arithmetic's device limits.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CUDA_KERNELCOMMON_CUH
#define DTCC_RUNTIME_DEVICE_CUDA_KERNELCOMMON_CUH

#include "runtime/device/cuda/CudaLaunch.h"
#include "runtime/device/cuda/LaunchConfig.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace dtcc::runtime::cuda {

/// The limits launches are computed with (the SM count set by the device).
DeviceLimits &launchLimits();

template <typename S> struct Elem {
  using C = S;
  static __device__ __forceinline__ C load(S v) { return v; }
  static __device__ __forceinline__ S store(C v) { return v; }
};
template <> struct Elem<__half> {
  using C = float;
  static __device__ __forceinline__ float load(__half v) {
    return __half2float(v);
  }
  static __device__ __forceinline__ __half store(float v) {
    return __float2half_rn(v);
  }
};
template <> struct Elem<__nv_bfloat16> {
  using C = float;
  static __device__ __forceinline__ float load(__nv_bfloat16 v) {
    return __bfloat162float(v);
  }
  static __device__ __forceinline__ __nv_bfloat16 store(float v) {
    return __float2bfloat16_rn(v);
  }
};
template <typename S> using ComputeT = typename Elem<S>::C;

/// Element offsets of linear index `i` for the first `N` operands.
template <int N>
__device__ __forceinline__ void layoutOffsets(const Layout &l, int64_t i,
                                              int64_t (&off)[N]) {
  if (l.linear) {
#pragma unroll
    for (int k = 0; k < N; ++k)
      off[k] = i;
    return;
  }
#pragma unroll
  for (int k = 0; k < N; ++k)
    off[k] = 0;
  // The outermost index is what is left: no division for it.
  if (l.fastDivision) {
    uint32_t j = uint32_t(i);
    for (int d = l.rank - 1; d > 0; --d) {
      const uint32_t s = uint32_t(l.shape[d]);
      const uint32_t q = fastDivide(j, l.divisors[d]);
      const int64_t idx = int64_t(j - q * s);
      j = q;
#pragma unroll
      for (int k = 0; k < N; ++k)
        off[k] += idx * l.strides[d][k];
    }
#pragma unroll
    for (int k = 0; k < N; ++k)
      off[k] += int64_t(j) * l.strides[0][k];
    return;
  }
  for (int d = l.rank - 1; d > 0; --d) {
    const int64_t s = l.shape[d];
    const int64_t idx = i % s;
    i /= s;
#pragma unroll
    for (int k = 0; k < N; ++k)
      off[k] += idx * l.strides[d][k];
  }
#pragma unroll
  for (int k = 0; k < N; ++k)
    off[k] += i * l.strides[0][k];
}

/// Whether `p` may be read or written `bytes` (a power of two) at a time.
__host__ __device__ __forceinline__ bool alignedTo(const void *p, int bytes) {
  return (reinterpret_cast<uintptr_t>(p) & uintptr_t(bytes - 1)) == 0;
}

/// V elements of S as one aligned access.
template <typename S, int V> struct alignas(sizeof(S) * V) Pack { S v[V]; };

/// The grid-stride loop of the elementwise kernels.
#define DTCC_GRID_LOOP(i, n)                                                   \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);   \
       i += int64_t(gridDim.x) * blockDim.x)

/// out[i] = acc[i] rounded to S, i < n: the last step of a gradient that
/// half types accumulate in float scratch (atomic adds of f16/bf16 would
/// round every term).
template <typename S>
__global__ void storeFromFloatKernel(const float *acc, S *out, int64_t n) {
  DTCC_GRID_LOOP(i, n) { out[i] = Elem<S>::store(acc[i]); }
}

/// A multi-tensor launch's chunk `chunk`: the index of the tensor of
/// `tensors` (entries numbering their chunks by `firstChunk`, a prefix sum)
/// whose chunks hold it, the last one whose first chunk is <= it (an empty
/// tensor shares its first chunk with the next), searched from `from` up (a
/// block that walks its chunks in increasing order passes the last owner).
template <typename T>
__device__ __forceinline__ int chunkOwner(const T *tensors, int count,
                                          int64_t chunk, int from = 0) {
  int lo = from, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (tensors[mid].firstChunk <= chunk)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}
/// The owner of chunk blockIdx.x (a block per chunk).
template <typename T>
__device__ __forceinline__ int chunkOwner(const T *tensors, int count) {
  return chunkOwner(tensors, count, int64_t(blockIdx.x));
}

template <typename T> __device__ __forceinline__ T warpSum(T v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <typename T> __device__ __forceinline__ T warpMax(T v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    T w = __shfl_xor_sync(0xffffffffu, v, o);
    v = (w > v || w != w) ? w : v;
  }
  return v;
}

/// Sum over the blockDim.x threads of this row (threadIdx.y); `shared`
/// holds blockDim.y * 32 values. Every thread of the block must call it
/// when blockDim.x > 32 (then blockDim.y is 1). T: float, or double for f64
/// rows.
template <typename T> __device__ __forceinline__ T rowSum(T v, T *shared) {
  v = warpSum(v);
  if (blockDim.x == 32)
    return v;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0)
    shared[warp] = v;
  __syncthreads();
  v = lane < int(blockDim.x >> 5) ? shared[lane] : T(0);
  return warpSum(v);
}
template <typename T> __device__ __forceinline__ T rowMax(T v, T *shared) {
  v = warpMax(v);
  if (blockDim.x == 32)
    return v;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0)
    shared[warp] = v;
  __syncthreads();
  v = lane < int(blockDim.x >> 5) ? shared[lane] : T(-INFINITY);
  return warpMax(v);
}

/// The type row kernels (softmax, norms, cross-entropy) sum in: float, or
/// double for f64.
template <typename S>
using AccT = std::conditional_t<std::is_same_v<S, double>, double, float>;
/// exp/log/rsqrt of the accumulator type (the fast float intrinsics for
/// float, as before; the precise ones for double).
__device__ __forceinline__ float accExp(float v) { return __expf(v); }
__device__ __forceinline__ double accExp(double v) { return exp(v); }
__device__ __forceinline__ float accLog(float v) { return logf(v); }
__device__ __forceinline__ double accLog(double v) { return log(v); }
__device__ __forceinline__ float accRsqrt(float v) { return rsqrtf(v); }
__device__ __forceinline__ double accRsqrt(double v) { return rsqrt(v); }

/// Records the first data-dependent error of a run.
__device__ __forceinline__ void recordError(DeviceError *e, int32_t site,
                                            int32_t kind, int64_t value,
                                            int64_t position, int64_t bound) {
  if (!e)
    return;
  if (atomicCAS(reinterpret_cast<int *>(&e->site), 0, site) == 0) {
    e->kind = kind;
    e->value = value;
    e->position = position;
    e->bound = bound;
  }
}

/// Calls fn(S{}) for the storage type of a float dtype (f32, f16, bf16,
/// f64); false for others.
template <typename Fn> bool visitFloat(DType dtype, Fn &&fn) {
  switch (dtype) {
  case DType::kF32: fn(float{}); return true;
  case DType::kF16: fn(__half{}); return true;
  case DType::kBF16: fn(__nv_bfloat16{}); return true;
  case DType::kF64: fn(double{}); return true;
  default: return false;
  }
}
/// visitFloat plus i32 and i64.
template <typename Fn> bool visitArithmetic(DType dtype, Fn &&fn) {
  switch (dtype) {
  case DType::kI32: fn(int32_t{}); return true;
  case DType::kI64: fn(int64_t{}); return true;
  default: return visitFloat(dtype, fn);
  }
}
/// visitArithmetic plus the 8- and 16-bit and unsigned integers (the
/// binary kernels).
template <typename Fn> bool visitNumeric(DType dtype, Fn &&fn) {
  switch (dtype) {
  case DType::kI8: fn(int8_t{}); return true;
  case DType::kI16: fn(int16_t{}); return true;
  case DType::kU8: fn(uint8_t{}); return true;
  case DType::kU16: fn(uint16_t{}); return true;
  case DType::kU32: fn(uint32_t{}); return true;
  case DType::kU64: fn(uint64_t{}); return true;
  default: return visitArithmetic(dtype, fn);
  }
}
/// Calls fn(U{}) with an unsigned type of `bytes` bytes.
template <typename Fn> bool visitBytes(int bytes, Fn &&fn) {
  switch (bytes) {
  case 1: fn(uint8_t{}); return true;
  case 2: fn(uint16_t{}); return true;
  case 4: fn(uint32_t{}); return true;
  case 8: fn(uint64_t{}); return true;
  default: return false;
  }
}

inline dim3 blocksOf(const LaunchConfig &c) {
  return dim3(unsigned(c.blocks));
}
inline dim3 threadsOf(const LaunchConfig &c) {
  return dim3(unsigned(c.threadsX), unsigned(c.threadsY));
}

/// A gradient added atomically into dx (`elements` of S): zeroes its
/// accumulator (dx itself, or for f16/bf16 the float copy `scratch`:
/// atomic adds of the half types would round every term), calls add(acc)
/// to launch the adds, then rounds the copy into dx.
template <typename S, typename Add>
cudaError_t accumulateAtomically(void *dx, float *scratch, int64_t elements,
                                 cudaStream_t s, Add &&add) {
  using C = ComputeT<S>;
  constexpr bool viaFloat = !std::is_same_v<S, C>;
  C *acc = viaFloat ? reinterpret_cast<C *>(scratch) : static_cast<C *>(dx);
  cudaError_t err = cudaMemsetAsync(acc, 0, size_t(elements) * sizeof(C), s);
  if (err != cudaSuccess || elements == 0)
    return err;
  add(acc);
  if constexpr (viaFloat)
    storeFromFloatKernel<S>
        <<<blocksOf(elementwiseLaunch(elements, launchLimits())),
           kElementwiseThreads, 0, s>>>(scratch, static_cast<S *>(dx),
                                        elements);
  return cudaGetLastError();
}

} // namespace dtcc::runtime::cuda

#endif // DTCC_RUNTIME_DEVICE_CUDA_KERNELCOMMON_CUH
