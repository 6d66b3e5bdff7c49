//===- Random.h - counter-based random numbers for the runtime --*- C++ -*-===//
//
// splitmix64 and the uniform variates built on it: stateless, so dropout
// masks, data-loader shuffles and --random-init draws are reproducible from
// (seed, step, index); and FNV-1a, a hash that is the same everywhere.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_BASE_RANDOM_H
#define DTCC_RUNTIME_BASE_RANDOM_H

#include <cstddef>
#include <cstdint>

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

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_BASE_RANDOM_H
