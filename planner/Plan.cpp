//===- Plan.cpp - plans, their structural checks and JSON -----------------===//

#include "planner/Plan.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace dtcc::planner {

using runtime::invalidArgument;
using runtime::strCat;

const char *scheduleName(Schedule schedule) {
  switch (schedule) {
  case Schedule::kGPipe:
    return "gpipe";
  case Schedule::k1F1B:
    return "1f1b";
  case Schedule::kInterleaved:
    return "interleaved";
  case Schedule::kZeroBubbleH1:
    return "zb-h1";
  }
  return "unknown";
}

const char *offloadName(Offload offload) {
  switch (offload) {
  case Offload::kNone:
    return "none";
  case Offload::kOptimizer:
    return "optimizer";
  case Offload::kOptimizerAndParams:
    return "optimizer+params";
  }
  return "unknown";
}

DTypePolicy DTypePolicy::mixed(DType half) {
  DTypePolicy p;
  p.compute = p.params = p.grads = half;
  p.masterWeights = true;
  p.lossScaling = half == DType::kFp16;
  return p;
}

DTypePolicy DTypePolicy::fp32() {
  DTypePolicy p;
  p.compute = p.params = p.grads = DType::kFp32;
  p.masterWeights = false;
  return p;
}

DTypePolicy DTypePolicy::halfWithoutMaster(DType half) {
  DTypePolicy p = mixed(half);
  p.masterWeights = false;
  return p;
}

std::string DTypePolicy::describe() const {
  std::ostringstream os;
  os << dtypeName(compute) << " compute, " << dtypeName(params)
     << " weights, " << dtypeName(grads) << " gradients, ";
  if (masterWeights)
    os << "fp32 master weights, ";
  else
    os << "no master copy, ";
  os << optimizerMoments << " Adam moment" << (optimizerMoments == 1 ? "" : "s")
     << " in " << dtypeName(optimizerState);
  if (lossScaling)
    os << ", dynamic loss scaling";
  os << " (" << bytesPerParam() << " B/param)";
  return os.str();
}

/// Megatron-LM's rank order, cp between dp and tp: pp, dp, cp, tp.
static runtime::MeshShape megatronMesh(int64_t dp, int64_t pp, int64_t cp,
                                       int64_t tp) {
  if (cp <= 1)
    return runtime::MeshShape::megatron(dp, pp, tp);
  std::vector<runtime::MeshShape::Axis> axes;
  for (const runtime::MeshShape::Axis &a :
       {runtime::MeshShape::Axis{"pp", pp}, runtime::MeshShape::Axis{"dp", dp},
        runtime::MeshShape::Axis{"cp", cp}, runtime::MeshShape::Axis{"tp", tp}})
    if (a.size > 1)
      axes.push_back(a);
  return runtime::MeshShape::of(std::move(axes)).value();
}

runtime::MeshShape Plan::mesh() const {
  std::vector<std::string> names = order;
  if (cp > 1 && std::find(names.begin(), names.end(), "cp") == names.end())
    names.insert(std::find(names.begin(), names.end(), "tp"), "cp");
  std::vector<runtime::MeshShape::Axis> axes;
  for (const std::string &axis : names) {
    int64_t size = axis == "dp"   ? dp
                   : axis == "pp" ? pp
                   : axis == "tp" ? tp
                   : axis == "cp" ? cp
                                  : 1;
    if (size > 1)
      axes.push_back({axis, size});
  }
  auto shape = runtime::MeshShape::of(std::move(axes));
  return shape.isOk() ? std::move(shape).value()
                      : megatronMesh(dp, pp, cp, tp);
}

bool Plan::megatronOrder() const {
  return mesh() == megatronMesh(dp, pp, cp, tp);
}

std::string Plan::summary() const {
  std::ostringstream os;
  os << "dp=" << dp << " pp=" << pp << " tp=" << tp;
  if (cp > 1)
    os << " cp=" << cp;
  if (!megatronOrder())
    os << " (rank order " << mesh().str() << ")";
  os << ", " << (zeroStage ? "ZeRO-" + std::to_string(zeroStage) : "no ZeRO");
  os << ", " << microBatches << " micro-batch" << (microBatches == 1 ? "" : "es")
     << " of " << microBatchSize;
  if (pp > 1) {
    os << ", " << scheduleName(schedule);
    if (schedule == Schedule::kInterleaved)
      os << "(v=" << virtualStages << ")";
  }
  os << ", recompute " << recomputeName(recompute);
  if (recompute == Recompute::kFull && recomputeLayers > 0)
    os << " (" << recomputeLayers << " layer" << (recomputeLayers == 1 ? "" : "s")
       << " per stage)";
  if (sequenceParallel)
    os << ", sequence parallel";
  if (offload != Offload::kNone)
    os << ", offload " << offloadName(offload);
  if (halfGradReduce)
    os << ", gradients reduced in " << dtypeName(dtype.compute);
  return os.str();
}

bool Plan::operator==(const Plan &o) const {
  return dp == o.dp && pp == o.pp && tp == o.tp && cp == o.cp &&
         zeroStage == o.zeroStage &&
         microBatchSize == o.microBatchSize &&
         microBatches == o.microBatches && schedule == o.schedule &&
         virtualStages == o.virtualStages && recompute == o.recompute &&
         recomputeLayers == o.recomputeLayers &&
         sequenceParallel == o.sequenceParallel && offload == o.offload &&
         halfGradReduce == o.halfGradReduce &&
         dtype.compute == o.dtype.compute && dtype.params == o.dtype.params &&
         dtype.grads == o.dtype.grads &&
         dtype.masterWeights == o.dtype.masterWeights &&
         dtype.optimizerState == o.dtype.optimizerState &&
         dtype.optimizerMoments == o.dtype.optimizerMoments &&
         dtype.lossScaling == o.dtype.lossScaling && order == o.order;
}

int64_t mostStageLayers(const ModelDesc &model, int64_t pp) {
  pp = std::max<int64_t>(1, pp);
  return (model.layers + pp - 1) / pp;
}

int64_t stageLayers(const ModelDesc &model, int64_t pp, int64_t stage) {
  int64_t base = model.layers / pp, extra = model.layers % pp;
  // Preference for the extra layers: middle stages, then the first, then
  // the last (which carries the head).
  int64_t order;
  if (pp <= 2)
    order = stage;
  else if (stage == 0)
    order = pp - 2;
  else if (stage == pp - 1)
    order = pp - 1;
  else
    order = stage - 1;
  return base + (order < extra ? 1 : 0);
}

std::optional<std::string> zeroSplitProblem(const Plan &plan,
                                            const ModelDesc &model) {
  if (plan.zeroStage > 0 && plan.dp > 1 && model.hidden % plan.dp != 0)
    return strCat("hidden ", model.hidden, " not divisible by dp=", plan.dp,
                  ": ZeRO-", plan.zeroStage,
                  " would leave the parameters whole (the compiler splits a "
                  "tensor over dp only along a dimension dp divides)");
  return std::nullopt;
}

std::optional<std::string> planProblem(const Plan &plan,
                                       const ModelDesc &model,
                                       const ClusterSpec &cluster) {
  {
    std::vector<std::string> sorted = plan.order;
    std::sort(sorted.begin(), sorted.end());
    if (sorted != std::vector<std::string>{"dp", "pp", "tp"} &&
        sorted != std::vector<std::string>{"cp", "dp", "pp", "tp"})
      return strCat("the rank order must name dp, pp and tp once each (and "
                    "cp at most once)");
  }
  if (plan.dp < 1 || plan.pp < 1 || plan.tp < 1 || plan.cp < 1)
    return strCat("mesh dimensions must be at least 1 (dp=", plan.dp,
                  " pp=", plan.pp, " tp=", plan.tp, " cp=", plan.cp, ")");
  if (plan.devices() != cluster.numDevices())
    return strCat(plan.cp > 1 ? "dp x pp x cp x tp = " : "dp x pp x tp = ",
                  plan.devices(), " but the cluster has ",
                  cluster.numDevices(), " devices");
  // Context parallelism splits every sequence into cp equal chunks.
  if (model.seq % plan.cp != 0)
    return strCat("sequence ", model.seq, " not divisible by cp=", plan.cp);
  int64_t perNode = cluster.perNode();
  if (plan.tp > perNode)
    return strCat("tp=", plan.tp, " exceeds ", perNode,
                  " devices per node");
  if (perNode % plan.tp != 0)
    return strCat("tp=", plan.tp, " does not divide ", perNode,
                  " devices per node");
  if (model.heads % plan.tp != 0)
    return strCat("heads ", model.heads, " not divisible by tp=", plan.tp);
  if (model.kvHeads % plan.tp != 0 && plan.tp % model.kvHeads != 0)
    return strCat("kv heads ", model.kvHeads, " and tp=", plan.tp,
                  " do not divide each other");
  if (model.ffnHidden % plan.tp != 0)
    return strCat("ffn hidden ", model.ffnHidden, " not divisible by tp=",
                  plan.tp);
  if (plan.pp > model.layers)
    return strCat("pp=", plan.pp, " exceeds ", model.layers, " layers");
  if (plan.microBatchSize < 1 || plan.microBatches < 1)
    return strCat("micro-batch size and count must be at least 1");
  if (plan.zeroStage < 0 || plan.zeroStage > 3)
    return strCat("ZeRO stage ", plan.zeroStage, " is not 0..3");
  if (plan.sequenceParallel && plan.tp == 1)
    return strCat("sequence parallelism needs tp > 1");
  if (const int64_t perStage = mostStageLayers(model, plan.pp);
      plan.recomputeLayers > perStage)
    return strCat("recomputing the first ", plan.recomputeLayers,
                  " layers of each stage, which holds at most ", perStage,
                  " of the ", model.layers, " layers");
  if (plan.recomputeLayers < 0 ||
      (plan.recomputeLayers > 0 && plan.recompute != Recompute::kFull))
    return strCat("recomputing the first ", plan.recomputeLayers,
                  " layers of each stage needs recompute full, got ",
                  recomputeName(plan.recompute));
  if (plan.schedule == Schedule::kInterleaved) {
    if (plan.pp < 2)
      return strCat("the interleaved schedule needs pp > 1");
    if (plan.virtualStages < 2)
      return strCat("the interleaved schedule needs v >= 2 chunks");
    if (model.layers % (plan.pp * plan.virtualStages) != 0)
      return strCat("layers ", model.layers, " not divisible by pp x v = ",
                    plan.pp, " x ", plan.virtualStages);
    if (plan.microBatches % plan.pp != 0)
      return strCat("the interleaved schedule needs micro-batches (",
                    plan.microBatches, ") divisible by pp=", plan.pp);
  } else if (plan.virtualStages != 1) {
    return strCat("virtual stages (v=", plan.virtualStages,
                  ") need the interleaved schedule");
  }
  if (plan.offload == Offload::kOptimizerAndParams && plan.zeroStage != 3)
    return strCat("parameter offload builds on ZeRO-3, got ZeRO-",
                  plan.zeroStage);
  if (plan.zeroStage > 0 && plan.dp == 1 && plan.offload == Offload::kNone)
    return strCat("ZeRO-", plan.zeroStage, " with dp=1 shards nothing");
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// JSON
//===----------------------------------------------------------------------===//

Json dtypePolicyToJson(const DTypePolicy &p) {
  Json j = Json::object();
  j.set("compute", dtypeName(p.compute));
  j.set("params", dtypeName(p.params));
  j.set("grads", dtypeName(p.grads));
  j.set("masterWeights", p.masterWeights);
  j.set("optimizerState", dtypeName(p.optimizerState));
  j.set("optimizerMoments", p.optimizerMoments);
  j.set("lossScaling", p.lossScaling);
  j.set("bytesPerParam", p.bytesPerParam());
  return j;
}

StatusOr<DTypePolicy> dtypePolicyFromJson(const Json &j) {
  if (!j.isObject())
    return invalidArgument("dtype: expected an object");
  DTypePolicy p;
  for (const auto &member : j.members()) {
    const std::string &key = member.first;
    const Json &value = member.second;
    std::string path = "dtype." + key;
    auto dtype = [&](DType &out) -> Status {
      if (!value.isString() || !parseDType(value.asString()))
        return invalidArgument(path, ": expected fp32, tf32, bf16 or fp16");
      out = *parseDType(value.asString());
      return Status::ok();
    };
    auto boolean = [&](bool &out) -> Status {
      if (!value.isBool())
        return invalidArgument(path, ": expected a boolean, got ",
                               Json::kindName(value.kind()));
      out = value.asBool();
      return Status::ok();
    };
    if (key == "compute") {
      DTCC_RETURN_IF_ERROR(dtype(p.compute));
    } else if (key == "params") {
      DTCC_RETURN_IF_ERROR(dtype(p.params));
    } else if (key == "grads") {
      DTCC_RETURN_IF_ERROR(dtype(p.grads));
    } else if (key == "optimizerState") {
      DTCC_RETURN_IF_ERROR(dtype(p.optimizerState));
    } else if (key == "masterWeights") {
      DTCC_RETURN_IF_ERROR(boolean(p.masterWeights));
    } else if (key == "lossScaling") {
      DTCC_RETURN_IF_ERROR(boolean(p.lossScaling));
    } else if (key == "optimizerMoments") {
      if (!value.isNumber() || value.asNumber() < 0 || value.asNumber() > 2 ||
          value.asNumber() != std::floor(value.asNumber()))
        return invalidArgument(path, ": expected 0, 1 or 2");
      p.optimizerMoments = int(value.asNumber());
    } else if (key == "bytesPerParam") {
      continue; // derived
    } else {
      return invalidArgument("dtype: unknown field '", key, "'");
    }
  }
  return p;
}

Json planToJson(const Plan &p) {
  Json j = Json::object();
  j.set("dp", p.dp);
  j.set("pp", p.pp);
  j.set("tp", p.tp);
  if (p.cp > 1)
    j.set("cp", p.cp);
  j.set("zeroStage", p.zeroStage);
  j.set("microBatchSize", p.microBatchSize);
  j.set("microBatches", p.microBatches);
  j.set("schedule", scheduleName(p.schedule));
  j.set("virtualStages", p.virtualStages);
  j.set("recompute", recomputeName(p.recompute));
  j.set("recomputeLayers", p.recomputeLayers);
  j.set("sequenceParallel", p.sequenceParallel);
  j.set("offload", offloadName(p.offload));
  if (p.halfGradReduce)
    j.set("gradReduce", "half");
  j.set("dtype", dtypePolicyToJson(p.dtype));
  if (!p.megatronOrder()) {
    Json order = Json::array();
    for (const std::string &axis : p.order)
      order.push(axis);
    j.set("order", std::move(order));
  }
  return j;
}

StatusOr<Plan> planFromJson(const Json &j) {
  if (!j.isObject())
    return invalidArgument("plan: expected an object, got ",
                           Json::kindName(j.kind()));
  Plan p;
  for (const auto &member : j.members()) {
    const std::string &key = member.first;
    const Json &value = member.second;
    std::string path = "plan." + key;
    auto integer = [&](int64_t &out, int64_t min) -> Status {
      if (!value.isNumber() ||
          value.asNumber() != std::floor(value.asNumber()) ||
          value.asNumber() < double(min))
        return invalidArgument(path, ": expected an integer >= ", min);
      out = int64_t(value.asNumber());
      return Status::ok();
    };
    auto name = [&](const char *const *names, int count,
                    int &out) -> Status {
      if (value.isString())
        for (int i = 0; i < count; ++i)
          if (value.asString() == names[i]) {
            out = i;
            return Status::ok();
          }
      std::string expected;
      for (int i = 0; i < count; ++i)
        expected += std::string(i ? ", " : "") + names[i];
      return invalidArgument(path, ": expected one of ", expected);
    };
    if (key == "dp") {
      DTCC_RETURN_IF_ERROR(integer(p.dp, 1));
    } else if (key == "pp") {
      DTCC_RETURN_IF_ERROR(integer(p.pp, 1));
    } else if (key == "tp") {
      DTCC_RETURN_IF_ERROR(integer(p.tp, 1));
    } else if (key == "cp") {
      DTCC_RETURN_IF_ERROR(integer(p.cp, 1));
    } else if (key == "zeroStage") {
      int64_t stage = 0;
      DTCC_RETURN_IF_ERROR(integer(stage, 0));
      if (stage > 3)
        return invalidArgument(path, ": expected 0..3, got ", stage);
      p.zeroStage = int(stage);
    } else if (key == "microBatchSize") {
      DTCC_RETURN_IF_ERROR(integer(p.microBatchSize, 1));
    } else if (key == "microBatches") {
      DTCC_RETURN_IF_ERROR(integer(p.microBatches, 1));
    } else if (key == "recomputeLayers") {
      DTCC_RETURN_IF_ERROR(integer(p.recomputeLayers, 0));
    } else if (key == "virtualStages") {
      DTCC_RETURN_IF_ERROR(integer(p.virtualStages, 1));
    } else if (key == "schedule") {
      static const char *const names[] = {"gpipe", "1f1b", "interleaved",
                                          "zb-h1"};
      int index = 0;
      DTCC_RETURN_IF_ERROR(name(names, 4, index));
      p.schedule = Schedule(index);
    } else if (key == "recompute") {
      static const char *const names[] = {"none", "selective", "full"};
      int index = 0;
      DTCC_RETURN_IF_ERROR(name(names, 3, index));
      p.recompute = Recompute(index);
    } else if (key == "offload") {
      static const char *const names[] = {"none", "optimizer",
                                          "optimizer+params"};
      int index = 0;
      DTCC_RETURN_IF_ERROR(name(names, 3, index));
      p.offload = Offload(index);
    } else if (key == "order") {
      size_t n = value.isArray() ? value.items().size() : 0;
      if (n != 3 && n != 4)
        return invalidArgument(path, ": expected [\"pp\", \"dp\", \"tp\"] "
                                     "(and \"cp\") in rank order");
      p.order.clear();
      for (const Json &axis : value.items()) {
        if (!axis.isString() ||
            (axis.asString() != "dp" && axis.asString() != "pp" &&
             axis.asString() != "tp" && axis.asString() != "cp") ||
            std::count(p.order.begin(), p.order.end(), axis.asString()))
          return invalidArgument(path, ": expected dp, pp and tp once each "
                                       "(and cp at most once)");
        p.order.push_back(axis.asString());
      }
    } else if (key == "gradReduce") {
      if (!value.isString() ||
          (value.asString() != "half" && value.asString() != "fp32"))
        return invalidArgument(path, ": expected \"fp32\" or \"half\"");
      p.halfGradReduce = value.asString() == "half";
    } else if (key == "sequenceParallel") {
      if (!value.isBool())
        return invalidArgument(path, ": expected a boolean");
      p.sequenceParallel = value.asBool();
    } else if (key == "dtype") {
      auto policy = dtypePolicyFromJson(value);
      if (!policy.isOk())
        return policy.status().withContext("plan");
      p.dtype = policy.value();
    } else {
      return invalidArgument("plan: unknown field '", key, "'");
    }
  }
  return p;
}

} // namespace dtcc::planner
