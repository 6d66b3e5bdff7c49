//===- AutoPlan.h - the plan `dtcc compile --plan auto` compiles -*- C++ -*-===//
//
// The planner restricted to what the compiler implements today: data and
// tensor parallelism and ZeRO 0-3 over a given number of ranks, one pipeline
// stage, no offload, no sequence parallelism, the model's own batch split
// over the data-parallel ranks. Returns the mesh and ZeRO stage as the
// compiler's --mesh/--zero spell them, with the candidates it weighed.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_PLANNER_AUTOPLAN_H
#define DTCC_PLANNER_AUTOPLAN_H

#include "planner/Search.h"
#include "runtime/base/MeshShape.h"

#include <string>
#include <vector>

namespace dtcc::planner {

struct CompilerPlanOptions {
  /// Sequences of one micro-batch (the model's batch dimension): the
  /// compiler splits them over dp.
  int64_t batch = 0;
  /// Micro-batches accumulated per step (--micro-batches).
  int64_t microBatches = 1;
  Recompute recompute = Recompute::kNone;
  /// The compiled program's precision: the CPU backend is fp32 throughout.
  DTypePolicy dtype = DTypePolicy::fp32();
};

struct CompilerPlan {
  /// The chosen plan, evaluated; its mesh (meshOf), its ZeRO stage and
  /// whether it is sequence-parallel.
  Candidate chosen;
  runtime::MeshShape mesh;
  int zero = 0;
  bool sequenceParallel = false;
  /// Every other candidate with why it lost (slower, out of memory, or
  /// what the compiler or the model does not allow).
  std::vector<Rejection> rejected;
  /// One line: "dp=2,tp=2 ZeRO-1: 12.3 ms per step predicted, 45 MiB per
  /// rank (of 8 candidates; fastest that fits)".
  std::string summary;
};

/// The plan's mesh in its rank order (Plan::mesh: axes of size 1 left
/// out, none for one device), the order the time model prices it in.
runtime::MeshShape meshOf(const Plan &plan);

/// The plan the compiler builds for mesh dp x tp and `zero` (and sequence
/// parallelism with tp > 1): one micro-batch of batch / dp sequences per
/// rank (times options.microBatches).
Plan compilerPlan(int64_t dp, int64_t tp, int zero,
                  const CompilerPlanOptions &options,
                  bool sequenceParallel = false);

/// Why the compiler cannot build `plan` (beyond planProblem): the batch not
/// divisible by dp, the vocabulary by tp (no padding), a hidden size ZeRO
/// cannot shard evenly, pp > 1, offload; or nullopt.
std::optional<std::string> compilerPlanProblem(const Plan &plan,
                                               const ModelDesc &model,
                                               const CompilerPlanOptions &options);

/// Enumerates dp x tp = cluster.numDevices() and ZeRO 0..3 (ZeRO only with
/// dp > 1), drops what the compiler cannot build (batch not divisible by
/// dp, vocabulary or heads not divisible by tp, tp across nodes), evaluates
/// the rest with the memory and time models and returns the fastest that
/// fits (ties within 0.5% go to the lower ZeRO stage: less traffic, fewer
/// collectives to get wrong). Errors when nothing fits, with the reasons.
StatusOr<CompilerPlan> chooseCompilerPlan(const ModelDesc &model,
                                          const ClusterSpec &cluster,
                                          const CompilerPlanOptions &options);

/// The cluster `dtcc compile --ranks N` plans for: `base` with as many
/// nodes as N ranks need (N <= devices per node: one node of N devices).
/// Errors when N is not a multiple of a full node's devices.
StatusOr<ClusterSpec> clusterForRanks(ClusterSpec base, int64_t ranks);

} // namespace dtcc::planner

#endif // DTCC_PLANNER_AUTOPLAN_H
