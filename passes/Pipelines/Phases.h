//===- Phases.h - the pass pipeline of each compile phase -------*- C++ -*-===//
//
// `dtcc compile` runs its phases (dgraph, train, shard, dexec) as these
// pipelines, and dtcc-opt registers the same ones (dtcc-phase-graph,
// dtcc-phase-train, dtcc-phase-shard, dtcc-phase-dexec), so any phase of a
// compile can be replayed on its input IR (`dtcc compile --dump-dir`):
//
//   dtcc-opt 02-train.mlir -dtcc-phase-shard="mesh=dp=2,tp=2 zero=1"
//
// The phases take the plan (planning::Plan) and write it first
// (dtcc-plan-set); their passes read it from the module's `dshard.plan`.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_PASSES_PIPELINES_PHASES_H
#define DTCC_PASSES_PIPELINES_PHASES_H

#include "passes/Graph/Passes.h"
#include "passes/Planning/Passes.h"
#include "passes/Planning/Plan.h"
#include "passes/Sharding/Passes.h"

#include "mlir/Pass/PassManager.h"

#include <optional>
#include <string>
#include <vector>

namespace dtcc::pipelines {

/// The training step: the attention cores fused (when asked), autodiff, mixed precision (unless fp32), the
/// micro-batch unrolling of a pipelined step (the plan's pp > 1), the
/// optimizer. The plan's recompute and micro-batches decide the rest.
struct TrainPhase {
  graph::AutodiffOptions autodiff;
  std::string dtype = "fp32";
  /// dtcc-graph-mixed-precision's half-norms.
  bool halfNorms = true;
  graph::OptimizerOptions optimizer;
  /// dtcc-graph-fuse-attention before autodiff, and its max-head-dim (0:
  /// any; the CUDA kernels' limit for --target cuda).
  bool fuseAttention = false;
  int64_t fuseAttentionMaxHeadDim = 0;
};

/// One rank's program on the plan's mesh: pipeline stages (pp), the layout
/// search (when given; not with pp), annotation, propagation, partition,
/// all-reduces combined, overlap.
struct ShardPhase {
  /// dtcc-plan-search-layouts' figures (it reads the mesh from the plan).
  std::optional<planning::PlanSearchLayoutsOptions> layoutSearch;
  /// dtcc-shard-annotate's half-weight-copies.
  bool halfWeightCopies = true;
};

void buildGraphPhase(mlir::OpPassManager &pm);
/// Each writes `plan` as the module's `dshard.plan` first.
void buildTrainPhase(mlir::OpPassManager &pm, const planning::Plan &plan,
                     const TrainPhase &options);
void buildShardPhase(mlir::OpPassManager &pm, const planning::Plan &plan,
                     const ShardPhase &options);
/// The lowering to dexec, after dtcc-lower-fuse-regions with `fuse`. The
/// defaults are `dtcc compile`'s for the CPU target (dtcc-phase-dexec).
struct ExecPhase {
  bool fuse = true;
  /// With fuse: also row regions (reductions along the last axis).
  bool fuseRows = true;
  /// With fuseRows: in the parallel row form (the CUDA code generation's;
  /// the sequential form is the CPU's).
  bool parallelRows = false;
  /// Attention's heads as strided views, not copies (dtcc-lower-to-exec's
  /// strided-views).
  bool stridedViews = true;
  /// Persistent compute-type copies of the master weights
  /// (dtcc-shard-half-weight-copies) whose rounding the optimizer kernels
  /// write (dtcc-lower-to-exec's rounded-copies): programs under mixed
  /// precision, on either target, one device or a mesh.
  bool halfWeightCopies = false;
  /// Dense layers' biases in their products' epilogues and their bias
  /// gradients in their weight gradients' (dtcc-lower-matmul-epilogues;
  /// cuBLASLt's). On the CPU each fused op stays two kernels.
  bool matmulEpilogues = false;
};
void buildExecPhase(mlir::OpPassManager &pm, const ExecPhase &options = {});

/// Registers the four phases as pass pipelines (for dtcc-opt).
void registerPhasePipelines();

} // namespace dtcc::pipelines

#endif // DTCC_PASSES_PIPELINES_PHASES_H
