//===- FastDivision.h - division by an invariant divisor --------*- C++ -*-===//
//
// The strided kernels split a linear index into per-dimension indices, one
// division per dimension and element. A 64-bit integer division is a long
// instruction sequence on a GPU (there is no divide instruction); dividing
// 31-bit values by a divisor fixed at load time is a multiply-high and a
// shift (Granlund & Montgomery, "Division by invariant integers using
// multiplication", PLDI 1994; the form CUTLASS's FastDivmod uses): for
// 2 <= d <= 2^31 with l = ceil(log2 d), m = ceil(2^(31+l) / d) < 2^32, and
// every n < 2^31, floor(n / d) = floor(n * m / 2^32) >> (l - 1). Plain C++
// (host and device), so host tests check it exhaustively where it is made.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CUDA_FASTDIVISION_H
#define DTCC_RUNTIME_DEVICE_CUDA_FASTDIVISION_H

#include <cstdint>

#if defined(__CUDACC__)
#define DTCC_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define DTCC_HOST_DEVICE inline
#endif

namespace dtcc::runtime::cuda {

/// Dividends below this bound divide exactly.
constexpr uint32_t kFastDivisionLimit = 0x80000000u;

/// The multiplier and shift of one divisor (multiplier 0: divide by 1).
struct FastDivisor {
  uint32_t multiplier = 0;
  uint32_t shift = 0;
};

/// The FastDivisor of `d`, 1 <= d <= 2^31.
inline FastDivisor makeFastDivisor(uint32_t d) {
  FastDivisor f;
  if (d <= 1)
    return f;
  uint32_t l = 0;
  while ((uint64_t(1) << l) < d)
    ++l;
  f.multiplier =
      uint32_t(((uint64_t(1) << (31 + l)) + d - 1) / uint64_t(d));
  f.shift = l - 1;
  return f;
}

/// floor(n / d) for n < kFastDivisionLimit, `f` being makeFastDivisor(d).
DTCC_HOST_DEVICE uint32_t fastDivide(uint32_t n, FastDivisor f) {
  if (f.multiplier == 0)
    return n;
#if defined(__CUDA_ARCH__)
  const uint32_t high = __umulhi(n, f.multiplier);
#else
  const uint32_t high = uint32_t((uint64_t(n) * f.multiplier) >> 32);
#endif
  return high >> f.shift;
}

} // namespace dtcc::runtime::cuda

#endif // DTCC_RUNTIME_DEVICE_CUDA_FASTDIVISION_H
