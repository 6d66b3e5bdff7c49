//===- MemoryPlan.h - static offsets for buffers with lifetimes -*- C++ -*-===//
//
// Plain C++ (no MLIR): the compiler's buffer assignment and the planner's
// memory model both call it, so predicted and allocated bytes are one number.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_PASSES_LOWERING_MEMORYPLAN_H
#define DTCC_PASSES_LOWERING_MEMORYPLAN_H

#include <cstdint>
#include <vector>

namespace dtcc {

/// A buffer to place: `size` bytes live from step `first` to step `last`
/// (inclusive). Two buffers may share bytes only if their lifetimes are
/// disjoint.
struct PlannedBuffer {
  int64_t size = 0;
  int64_t first = 0;
  int64_t last = 0;
};

struct MemoryPlan {
  std::vector<int64_t> offsets; ///< one per buffer, in input order
  int64_t peakBytes = 0;        ///< the arena size
};

/// Every offset is a multiple of this (cache lines, AVX-512 loads).
constexpr int64_t kBufferAlignment = 64;

/// Rounds `bytes` up to kBufferAlignment.
inline int64_t alignBytes(int64_t bytes) {
  return (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
}

/// The order a greedy plan places buffers in.
enum class PlacementOrder {
  kLargestFirst, ///< size descending, then first step (TFLite's greedy by size)
  kEarliestFirst ///< first step ascending, then size descending
};
/// Where a buffer goes among the gaps left by the buffers already placed
/// whose lifetimes overlap it (or above them all when none fits).
enum class GapChoice {
  kSmallest, ///< the smallest gap that fits (best fit)
  kLowest    ///< the lowest gap that fits (first fit)
};

/// Assigns offsets greedily, buffer by buffer in `order`, each into the gap
/// `gap` chooses.
MemoryPlan planMemoryWith(const std::vector<PlannedBuffer> &buffers,
                          PlacementOrder order, GapChoice gap);

/// The smallest of three greedy plans (largest first into the lowest gap,
/// largest first into the smallest, earliest first into the smallest),
/// tried in that order until one comes within 2% of liveBytesLowerBound
/// (most programs without pipeline stages reach the bound with the
/// first).
/// No rule is best on every program: on the first stage of dtcc's
/// pipelines (activations of staggered micro-batches) each of the three
/// has won, by up to 12% of the arena.
MemoryPlan planMemory(const std::vector<PlannedBuffer> &buffers);

/// The largest sum of sizes of buffers live at one step: a lower bound on
/// any plan's peak.
int64_t liveBytesLowerBound(const std::vector<PlannedBuffer> &buffers);

} // namespace dtcc

#endif // DTCC_PASSES_LOWERING_MEMORYPLAN_H
