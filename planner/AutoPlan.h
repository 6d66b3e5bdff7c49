//===- AutoPlan.h - the plan `dtcc compile --plan auto` compiles -*- C++ -*-===//
//
// The planner's search over what the compiler builds: every mesh (dp x pp x
// tp), ZeRO stage, schedule, recomputation, sequence parallelism and
// offload the search considers, less what the compiler refuses (its check,
// passed in: the planner has no compiler), with the model's batch as one
// micro-batch split over dp. Returns the chosen plan, its mesh and ZeRO
// stage, with the candidates it weighed.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_PLANNER_AUTOPLAN_H
#define DTCC_PLANNER_AUTOPLAN_H

#include "planner/Search.h"
#include "runtime/base/MeshShape.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace dtcc::planner {

struct CompilerPlanOptions {
  /// Sequences of one micro-batch (the model's batch dimension): the
  /// compiler splits them over dp.
  int64_t batch = 0;
  /// Micro-batches per step (--micro-batches): accumulated, or a
  /// pipeline's.
  int64_t microBatches = 1;
  /// The recomputation the user pinned; nullopt: the search chooses.
  std::optional<Recompute> recompute;
  /// With recompute pinned to kFull: the first K layers of each stage
  /// (--recompute layers=K; Plan::recomputeLayers), 0: every layer.
  int64_t recomputeLayers = 0;
  /// The compiled program's precision: the CPU backend is fp32 throughout.
  DTypePolicy dtype = DTypePolicy::fp32();
  /// Why the compiler cannot build a plan (a plan field whose
  /// transformation is not there), or nullopt; empty: it builds all.
  std::function<std::optional<std::string>(const Plan &)> unbuilt;
  /// The search's pins (mesh axes and their order, ZeRO stage), budget
  /// and alternatives; the batch, dtype and recomputation come from here.
  SearchOptions search;
};

struct CompilerPlan {
  /// The chosen plan, evaluated; its mesh (meshOf) and its ZeRO stage.
  Candidate chosen;
  runtime::MeshShape mesh;
  int zero = 0;
  /// Every other candidate with why it lost (slower, out of memory, or
  /// what the compiler or the model does not allow).
  std::vector<Rejection> rejected;
  /// Every mesh-and-ZeRO group's best plan slower than `chosen`, fastest
  /// first (SearchResult::slowerPlans).
  std::vector<Rejection> slower;
  /// One line: "dp=2,tp=2 ZeRO-1: 12.3 ms per step predicted, 45 MiB per
  /// rank (of 8 candidates; fastest that fits)".
  std::string summary;
};

/// The plan's mesh in its rank order (Plan::mesh: axes of size 1 left
/// out, none for one device), the order the time model prices it in.
runtime::MeshShape meshOf(const Plan &plan);

/// The plan the compiler builds for mesh dp x tp and `zero`: one
/// micro-batch of batch / dp sequences per rank (times options.microBatches).
Plan compilerPlan(int64_t dp, int64_t tp, int zero,
                  const CompilerPlanOptions &options);

/// Why the compiler cannot build `plan` (beyond planProblem): the batch not
/// divisible by dp or micro-batches other than the model's batch over dp,
/// the vocabulary not divisible by tp (no padding), a hidden size ZeRO
/// cannot shard evenly, what `options.unbuilt` names; or nullopt.
std::optional<std::string> compilerPlanProblem(const Plan &plan,
                                               const ModelDesc &model,
                                               const CompilerPlanOptions &options);

/// The planner's search (searchPlans) over cluster.numDevices() ranks with
/// the global batch options.batch x options.microBatches, each mesh's
/// micro-batch the model's batch over dp, less what compilerPlanProblem
/// refuses: the fastest plan that fits. Errors when nothing fits or
/// builds, with the reasons.
StatusOr<CompilerPlan> chooseCompilerPlan(const ModelDesc &model,
                                          const ClusterSpec &cluster,
                                          const CompilerPlanOptions &options);

/// The cluster `dtcc compile --ranks N` plans for: `base` with as many
/// nodes as N ranks need (N <= devices per node: one node of N devices).
/// Errors when N is not a multiple of a full node's devices.
StatusOr<ClusterSpec> clusterForRanks(ClusterSpec base, int64_t ranks);

} // namespace dtcc::planner

#endif // DTCC_PLANNER_AUTOPLAN_H
