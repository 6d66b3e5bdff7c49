//===- Random.h - counter-based random numbers for the runtime --*- C++ -*-===//
//
// splitmix64 and the uniform variates built on it: stateless, so dropout
// masks and data-loader shuffles are reproducible from (seed, step, index).
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_BASE_RANDOM_H
#define DTCC_RUNTIME_BASE_RANDOM_H

#include <cstdint>

namespace dtcc::runtime {

/// Steele, Lea and Flood's splitmix64 finalizer of `x + golden gamma`: a
/// bijection of 64-bit words whose outputs pass BigCrush for counter inputs.
constexpr uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
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
