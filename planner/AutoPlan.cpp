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
                  const CompilerPlanOptions &options, bool sequenceParallel) {
  Plan plan;
  plan.dp = dp;
  plan.tp = tp;
  plan.sequenceParallel = sequenceParallel && tp > 1;
  plan.zeroStage = zero;
  plan.microBatchSize = std::max<int64_t>(1, options.batch / std::max<int64_t>(1, dp));
  plan.microBatches = options.microBatches;
  plan.recompute = options.recompute;
  plan.dtype = options.dtype;
  return plan;
}

std::optional<std::string> compilerPlanProblem(const Plan &plan,
                                               const ModelDesc &model,
                                               const CompilerPlanOptions &o) {
  if (plan.pp > 1)
    return strCat("pp=", plan.pp,
                  ": --plan auto does not choose pipeline stages yet (the "
                  "compiler builds them: give --mesh ...,pp=N --micro-batches M)");
  if (plan.offload != Offload::kNone)
    return std::string("the compiler does not implement offload");
  if (o.batch % plan.dp != 0)
    return strCat("batch ", o.batch, " not divisible by dp=", plan.dp);
  if (model.vocab % plan.tp != 0)
    return strCat("vocabulary ", model.vocab, " not divisible by tp=",
                  plan.tp, " (the compiler does not pad it)");
  if (plan.zeroStage > 0 && model.hidden % plan.dp != 0)
    return strCat("hidden ", model.hidden, " not divisible by dp=", plan.dp,
                  " (ZeRO shards every parameter evenly)");
  return std::nullopt;
}

StatusOr<CompilerPlan> chooseCompilerPlan(const ModelDesc &model,
                                          const ClusterSpec &cluster,
                                          const CompilerPlanOptions &options) {
  DTCC_RETURN_IF_ERROR(model.validate());
  DTCC_RETURN_IF_ERROR(cluster.validate());
  if (options.batch < 1)
    return invalidArgument("the model's batch must be at least 1, got ",
                           options.batch);
  int64_t devices = cluster.numDevices();
  std::vector<Candidate> fitting;
  CompilerPlan result;
  int64_t considered = 0;
  for (int64_t tp = 1; tp <= devices; ++tp) {
    if (devices % tp != 0)
      continue;
    for (int zero = 0; zero <= 3; ++zero) {
      if (zero > 0 && devices / tp == 1)
        break;
      // Sequence parallelism goes with tensor parallelism.
      for (bool sp : {false, true}) {
        if (sp && tp == 1)
          continue;
        Plan plan = compilerPlan(devices / tp, tp, zero, options, sp);
        ++considered;
        std::optional<std::string> problem = planProblem(plan, model, cluster);
        if (!problem)
          problem = compilerPlanProblem(plan, model, options);
        if (problem) {
          Rejection r;
          r.kind = Rejection::Kind::kInvalid;
          r.plan = plan;
          r.reason = *problem;
          result.rejected.push_back(r);
          continue;
        }
        auto candidate = evaluatePlan(model, cluster, plan);
        if (!candidate.isOk())
          return candidate.status();
        if (!candidate.value().fits) {
          Rejection r;
          r.kind = Rejection::Kind::kOutOfMemory;
          r.plan = plan;
          r.reason = candidate.value().problem;
          r.stepTime = candidate.value().time.stepTime;
          result.rejected.push_back(r);
          continue;
        }
        fitting.push_back(candidate.value());
      }
    }
  }
  if (fitting.empty()) {
    std::string why;
    for (const Rejection &r : result.rejected)
      why += strCat("\n  ", r.plan.summary(), ": ", r.reason);
    return invalidArgument("no dp x tp plan with ZeRO 0-3 on ", devices,
                           " ranks fits or compiles:", why);
  }
  // Fastest first; within 0.5% the lower ZeRO stage, then the smaller tp,
  // then without sequence parallelism.
  auto simplicity = [](const Plan &p) {
    return std::make_tuple(p.zeroStage, p.tp, p.sequenceParallel);
  };
  std::sort(fitting.begin(), fitting.end(),
            [&](const Candidate &a, const Candidate &b) {
              return std::make_tuple(a.time.stepTime, simplicity(a.plan)) <
                     std::make_tuple(b.time.stepTime, simplicity(b.plan));
            });
  size_t best = 0;
  for (size_t i = 1; i < fitting.size(); ++i) {
    if (fitting[i].time.stepTime > 1.005 * fitting[0].time.stepTime)
      break;
    if (simplicity(fitting[i].plan) < simplicity(fitting[best].plan))
      best = i;
  }
  result.chosen = fitting[best];
  for (size_t i = 0; i < fitting.size(); ++i) {
    if (i == best)
      continue;
    Rejection r;
    r.kind = Rejection::Kind::kSlower;
    r.plan = fitting[i].plan;
    r.stepTime = fitting[i].time.stepTime;
    r.slowerFraction = r.stepTime / result.chosen.time.stepTime - 1;
    r.reason = r.slowerFraction > 0.005
                   ? strCat("slower by ", formatPercent(r.slowerFraction))
                   : std::string("as fast; a lower ZeRO stage or tp won");
    result.rejected.push_back(r);
  }
  result.mesh = meshOf(result.chosen.plan);
  result.zero = result.chosen.plan.zeroStage;
  result.sequenceParallel = result.chosen.plan.sequenceParallel;
  result.summary = strCat(
      result.mesh.empty() ? std::string("one device") : result.mesh.str(),
      result.zero ? strCat(" ZeRO-", result.zero) : std::string(),
      result.sequenceParallel ? " sequence-parallel" : "", ": ",
      formatSeconds(result.chosen.time.stepTime), " per step predicted, ",
      formatBytes(result.chosen.memory.total()), " per rank (of ", considered,
      " candidates on ", devices, " ranks; the fastest that fits)");
  return result;
}

} // namespace dtcc::planner
