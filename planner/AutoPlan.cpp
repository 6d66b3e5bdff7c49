//===- AutoPlan.cpp - the plan `dtcc compile --plan auto` compiles --------===//

#include "planner/AutoPlan.h"

#include "planner/Units.h"

#include <algorithm>
#include <tuple>

namespace dtcc::planner {

using runtime::invalidArgument;
using runtime::strCat;

runtime::MeshShape meshOf(const Plan &plan) { return plan.mesh(); }

StatusOr<ClusterSpec> clusterForRanks(ClusterSpec base, int64_t ranks) {
  if (ranks < 1)
    return invalidArgument("--ranks: expected at least 1, got ", ranks);
  int64_t perNode = base.perNode();
  if (ranks <= perNode) {
    if (ranks < perNode)
      base.devicesPerNode.source =
          strCat(ranks, " ranks on one node (of ", perNode, " devices: ",
                 base.devicesPerNode.source, ")");
    base.devicesPerNode.value = double(ranks);
    base.nodes = 1;
    return base;
  }
  if (ranks % perNode != 0)
    return invalidArgument("--ranks ", ranks, " is not a multiple of the ",
                           perNode, " devices per node of cluster '",
                           base.name, "'");
  base.nodes = ranks / perNode;
  return base;
}

Plan compilerPlan(int64_t dp, int64_t tp, int zero,
                  const CompilerPlanOptions &options) {
  Plan plan;
  plan.dp = dp;
  plan.tp = tp;
  plan.zeroStage = zero;
  plan.microBatchSize = std::max<int64_t>(1, options.batch / std::max<int64_t>(1, dp));
  plan.microBatches = options.microBatches;
  plan.recompute = options.recompute.value_or(Recompute::kNone);
  plan.recomputeLayers = options.recompute ? options.recomputeLayers : 0;
  plan.dtype = options.dtype;
  return plan;
}

std::optional<std::string> compilerPlanProblem(const Plan &plan,
                                               const ModelDesc &model,
                                               const CompilerPlanOptions &o) {
  if (o.batch % plan.dp != 0)
    return strCat("batch ", o.batch, " not divisible by dp=", plan.dp);
  if (plan.dp * plan.microBatchSize != o.batch ||
      plan.microBatches != o.microBatches)
    return strCat(plan.microBatches, " micro-batches of ",
                  plan.microBatchSize, ": the compiled model's batch ",
                  o.batch, " is one micro-batch over dp=", plan.dp, ", ",
                  o.microBatches, " per step");
  if (model.vocab % plan.tp != 0)
    return strCat("vocabulary ", model.vocab, " not divisible by tp=",
                  plan.tp, " (the compiler does not pad it)");
  if (std::optional<std::string> why = zeroSplitProblem(plan, model))
    return why;
  if (o.unbuilt)
    if (std::optional<std::string> why = o.unbuilt(plan))
      return why;
  return std::nullopt;
}

StatusOr<CompilerPlan> chooseCompilerPlan(const ModelDesc &model,
                                          const ClusterSpec &cluster,
                                          const CompilerPlanOptions &options) {
  if (options.batch < 1)
    return invalidArgument("the model's batch must be at least 1, got ",
                           options.batch);
  if (options.microBatches < 1)
    return invalidArgument("micro-batches must be at least 1, got ",
                           options.microBatches);
  SearchOptions search = options.search;
  search.globalBatch = options.batch * options.microBatches;
  search.dataBatch = options.batch;
  search.dtype = options.dtype;
  search.fixRecompute = options.recompute;
  if (options.recompute)
    search.fixRecomputeLayers = options.recomputeLayers;
  search.buildable = [&](const Plan &plan) {
    return compilerPlanProblem(plan, model, options);
  };
  auto searched = searchPlans(model, cluster, search);
  if (!searched.isOk())
    return searched.status();
  const SearchResult &r = searched.value();
  CompilerPlan result;
  result.rejected = r.alternatives;
  result.slower = r.slowerPlans;
  if (!r.best) {
    std::string why;
    for (const Rejection &x : r.alternatives)
      why += strCat("\n  ", x.plan.summary(), ": ", x.reason);
    return invalidArgument("no plan on ", cluster.numDevices(),
                           " ranks fits or compiles (", r.note, "):", why);
  }
  result.chosen = *r.best;
  result.mesh = meshOf(result.chosen.plan);
  result.zero = result.chosen.plan.zeroStage;
  result.summary = strCat(
      result.chosen.plan.summary(), ": ",
      formatSeconds(result.chosen.time.stepTime), " per step predicted, ",
      formatBytes(result.chosen.memory.total()), " per rank (the fastest of ",
      r.evaluated, " plans on ", cluster.numDevices(),
      " ranks that fits and compiles)");
  return result;
}

} // namespace dtcc::planner
