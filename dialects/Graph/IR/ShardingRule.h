//===- ShardingRule.h - how an op's dimensions may be split ------*- C++ -*-===//
//
// A sharding rule describes an op as a loop nest over factors (Shardy's
// model): each tensor dimension of the op is a product of factors, and a
// factor split over a mesh axis splits every dimension it appears in. What
// happens to a split factor depends on its kind.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_DIALECTS_GRAPH_IR_SHARDINGRULE_H
#define DTCC_DIALECTS_GRAPH_IR_SHARDINGRULE_H

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>

namespace dtcc::graph {

struct ShardingRule {
  enum class Kind {
    /// Split freely: every rank computes its part (a batch, a row).
    kParallel,
    /// Summed (or maxed) over: a split leaves partial results that need an
    /// all-reduce or a reduce-scatter (a contracted or reduced dimension).
    kReduction,
    /// Must be whole on every rank (a softmax or normalization dimension).
    kReplicated,
    /// Split only by the op's own distributed form (the vocabulary of an
    /// embedding lookup or of a cross-entropy): the partitioner has a
    /// dedicated lowering for it.
    kSpecial,
  };

  struct Factor {
    int64_t size = 1;
    Kind kind = Kind::kParallel;
    /// For reductions: "sum", "max" or "min".
    llvm::StringRef reduction = "sum";
  };

  /// A tensor's mapping: for each dimension, its factors major to minor
  /// (their sizes multiply to the dimension; none for a size-1 dimension).
  using TensorFactors = llvm::SmallVector<llvm::SmallVector<int64_t, 2>, 4>;

  llvm::SmallVector<Factor> factors;
  llvm::SmallVector<TensorFactors> operands;
  llvm::SmallVector<TensorFactors> results;

  int64_t addFactor(int64_t size, Kind kind = Kind::kParallel,
                    llvm::StringRef reduction = "sum") {
    factors.push_back({size, kind, reduction});
    return factors.size() - 1;
  }
};

} // namespace dtcc::graph

#endif // DTCC_DIALECTS_GRAPH_IR_SHARDINGRULE_H
