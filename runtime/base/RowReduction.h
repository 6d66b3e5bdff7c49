//===- RowReduction.h - the order a CPU kernel reduces a row in -*- C++ -*-===//
//
// The CPU kernels reduce a row in independent lanes (so that the loop
// vectorizes and a sum's dependency chain is kRowLanes times shorter), the
// lanes combined as a tree; the fused regions' code (FuseRegions.cpp,
// emitRowReduce) repeats the same operations in the same order, so that a
// region's result is bitwise the kernel's it replaces. Shared by both (plain
// C++).
//
// 32 lanes: two AVX-512 registers of f32 (independent additions, which hide
// the adder's latency), four of f64; eight lanes, as before, were split by
// the vectorizer into 4-lane halves with masked bf16 loads, and a bf16
// layer norm ran 2x slower.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_BASE_ROWREDUCTION_H
#define DTCC_RUNTIME_BASE_ROWREDUCTION_H

#include <cstdint>

namespace dtcc::runtime {

/// Lanes of a row's reduction (reduceRow, selectRow, blockedSum, rowMax).
inline constexpr int64_t kRowLanes = 32;
/// reduceRow: rows longer than this are reduced as two halves (the first a
/// multiple of kRowLanes long), pairwise.
inline constexpr int64_t kRowBlock = 2048;
/// blockedSum: blocks of this many elements summed in the compute type,
/// the block sums added in double.
inline constexpr int64_t kBlockedSumBlock = 512;

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_BASE_ROWREDUCTION_H
