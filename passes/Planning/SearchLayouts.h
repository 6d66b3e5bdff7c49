//===- SearchLayouts.h - per-op tensor-parallel shardings by an ILP -*- C++
//-*-===//
//
// The C++ entry points of dtcc-plan-search-layouts (Passes.td describes
// the pass), for the plan search and for tests: run the search on a
// training step, and price a propagated step with the same cost model.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_PASSES_PLANNING_SEARCHLAYOUTS_H
#define DTCC_PASSES_PLANNING_SEARCHLAYOUTS_H

#include "passes/Planning/ShardingIlp.h"

#include "mlir/IR/BuiltinOps.h"

#include <string>
#include <utility>
#include <vector>

namespace dtcc::shard {

/// The mesh is the plan's (`dshard.plan`): tp is searched, dp splits the
/// batch.
struct LayoutSearchOptions {
  StepCostModel costs;
  /// CBC's time limit in seconds.
  double timeLimit = 30;
  /// Allow `dshard.constraint`s that reshard activations where propagation
  /// alone would not; false: only variables' layouts are chosen.
  bool constraints = true;
  /// Explain the decisions with remarks.
  bool remarks = false;
};

struct LayoutSearchResult {
  /// False when CBC found no assignment: the module is unchanged and
  /// `error` says why.
  bool solved = false;
  std::string error;
  /// The modelled step of the chosen shardings (seconds): compute (matrix
  /// products, other ops' memory traffic) and collectives.
  double seconds = 0, computeSeconds = 0, commSeconds = 0;
  /// Proven optimal within the time limit.
  bool optimal = false;
  double solveSeconds = 0;
  int64_t columns = 0, rows = 0, nodes = 0;
  /// Each searched parameter (its optimizer state shares it) and its
  /// layout: "rows", "cols", "whole" (2-D), "dim N" (other ranks).
  std::vector<std::pair<std::string, std::string>> layouts;
  /// `dshard.constraint`s added.
  int64_t constraints = 0;
};

/// Decides the tp sharding of every op of the training step in `module`
/// (after dtcc-graph-optimizer, before dtcc-shard-annotate) on its plan's
/// mesh and writes it: variables' layouts into the plan's `layouts`, and
/// `dshard.constraint`s. Errors (at the
/// op) for steps it cannot search; a solver failure is a result with
/// `solved` false.
mlir::FailureOr<LayoutSearchResult>
searchLayouts(mlir::ModuleOp module, const LayoutSearchOptions &options);

/// The search's price of a step after dtcc-shard-propagate (every op's
/// recorded shardings): matrix products, other ops' memory traffic, the
/// collectives the partitioner will insert and the vocab-parallel ops'
/// own. The search's objective is this price of what it decides.
struct ModelledStep {
  double seconds = 0, computeSeconds = 0, commSeconds = 0;
};
mlir::FailureOr<ModelledStep> priceShardedStep(mlir::ModuleOp module,
                                               const StepCostModel &costs);

} // namespace dtcc::shard

#endif // DTCC_PASSES_PLANNING_SEARCHLAYOUTS_H
