//===- Phases.h - the pass pipeline of each compile phase -------*- C++ -*-===//
//
// `dtcc compile` runs its phases (dgraph, train, shard, dexec) as these
// pipelines, and dtcc-opt registers the same ones (dtcc-phase-graph,
// dtcc-phase-train, dtcc-phase-shard, dtcc-phase-dexec), so any phase of a
// compile can be replayed on its input IR (`dtcc compile --dump-dir`):
//
//   dtcc-opt 02-train.mlir -dtcc-phase-shard="mesh=dp=2,tp=2 zero=1"
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_PASSES_PIPELINES_PHASES_H
#define DTCC_PASSES_PIPELINES_PHASES_H

#include "passes/Graph/Passes.h"
#include "passes/Sharding/Passes.h"
#include "runtime/base/MeshShape.h"

#include "mlir/Pass/PassManager.h"

#include <optional>
#include <string>
#include <vector>

namespace dtcc::pipelines {

/// The training step: autodiff, mixed precision (unless fp32), the
/// micro-batch unrolling of a pipelined step, the optimizer.
struct TrainPhase {
  graph::AutodiffOptions autodiff;
  std::string dtype = "fp32";
  /// Pipeline stages of the shard phase to come (the mesh's pp): more than
  /// one unrolls the step over its micro-batches here, and the optimizer
  /// then sees one.
  int64_t stages = 1;
  int64_t microBatches = 1;
  /// Its microBatches is set from the two above.
  graph::OptimizerOptions optimizer;
};

/// One rank's program on the mesh: pipeline stages (pp), the layout
/// search (when given; not with pp), annotation, propagation, partition,
/// all-reduces combined, overlap.
struct ShardPhase {
  runtime::MeshShape mesh;
  int zero = 0;
  std::vector<std::string> layouts; ///< NAME=rows|cols|whole
  std::string pipelineSchedule = "1f1b";
  /// dtcc-shard-search-layouts' figures; its mesh is set from `mesh`.
  std::optional<shard::ShardSearchLayoutsOptions> layoutSearch;
};

void buildGraphPhase(mlir::OpPassManager &pm);
void buildTrainPhase(mlir::OpPassManager &pm, const TrainPhase &options);
void buildShardPhase(mlir::OpPassManager &pm, const ShardPhase &options);
void buildExecPhase(mlir::OpPassManager &pm);

/// Registers the four phases as pass pipelines (for dtcc-opt).
void registerPhasePipelines();

} // namespace dtcc::pipelines

#endif // DTCC_PASSES_PIPELINES_PHASES_H
