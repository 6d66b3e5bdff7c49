//===- Random.h - counter-based random numbers for the runtime --*- C++ -*-===//
//
// splitmix64 and the uniform variates built on it: stateless, so dropout
// masks, dgraph.random's draws, data-loader shuffles and --random-init draws
// are reproducible from (seed, step, index); and FNV-1a, a hash that is the
// same everywhere.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_BASE_RANDOM_H
#define DTCC_RUNTIME_BASE_RANDOM_H

#include <cmath>
#include <cstddef>
#include <cstdint>

// standardDraw runs in both backends' kernels: host and device under nvcc.
#ifdef __CUDACC__
#define DTCC_RANDOM_HD __host__ __device__
#else
#define DTCC_RANDOM_HD
#endif

namespace dtcc::runtime {

/// splitmix64's increment between consecutive states (2^64 / phi).
constexpr uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ull;

/// Steele, Lea and Flood's splitmix64 output function alone: a bijection of
/// 64-bit words that mixes every input bit into every output bit.
constexpr uint64_t splitmixMix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// Steele, Lea and Flood's splitmix64 finalizer of `x + golden gamma`: a
/// bijection of 64-bit words whose outputs pass BigCrush for counter inputs.
constexpr uint64_t splitmix64(uint64_t x) { return splitmixMix(x + kGoldenGamma); }

/// FNV-1a of `size` bytes: a hash that is the same on every host and
/// standard library (std::hash is neither).
constexpr uint64_t fnv1a(const unsigned char *bytes, size_t size) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (size_t i = 0; i < size; ++i)
    h = (h ^ bytes[i]) * 0x100000001B3ull;
  return h;
}

/// The key of the stream of (seed, step): element i of the stream is
/// splitmix64(key + i).
constexpr uint64_t streamKey(uint64_t seed, uint64_t step) {
  return splitmix64(seed ^ splitmix64(step));
}

/// The top 53 bits of `bits` as a double in [0, 1), exactly.
constexpr double uniformFromBits(uint64_t bits) {
  return double(bits >> 11) * 0x1.0p-53;
}

/// The top `digits` bits of `bits` (1 <= digits <= 53) over 2^digits: a
/// double in [0, 1) that a float type of `digits` significand bits holds
/// exactly (53 f64, 24 f32, 11 f16, 8 bf16), so that a draw stays below 1
/// once stored in that type.
constexpr double uniformFromTopBits(uint64_t bits, int digits) {
  return double(bits >> (64 - digits)) / double(uint64_t(1) << digits);
}

/// dgraph.random's counters: a uniform draw's element i reads counter i of
/// the stream; a normal one's (Box-Muller) reads 2i and 2i + 1.
constexpr uint64_t normalCounter(uint64_t i, int which) { return 2 * i + which; }

/// 2 pi, for Box-Muller's angle.
constexpr double kTwoPi = 6.28318530717958647692;

/// dgraph.random's standard draw (GraphTrainingOps.td), element `counter`
/// of the stream `key`: uniform in [0, 1) from its top `digits` bits (the
/// result type's significand), or normal by Box-Muller of counters 2i and
/// 2i + 1, 53 bits each (1 - u1 >= 2^-53: the logarithm is finite). The
/// CPU and CUDA kernels both compute it; shift and scale come after.
DTCC_RANDOM_HD inline double standardDraw(uint64_t key, uint64_t counter,
                                          bool normal, int digits) {
  if (!normal)
    return uniformFromTopBits(splitmix64(key + counter), digits);
  const double u1 = uniformFromBits(splitmix64(key + normalCounter(counter, 0)));
  const double u2 = uniformFromBits(splitmix64(key + normalCounter(counter, 1)));
  return sqrt(-2.0 * log(1.0 - u1)) * cos(kTwoPi * u2);
}

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_BASE_RANDOM_H
