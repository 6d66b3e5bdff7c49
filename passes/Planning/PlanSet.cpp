//===- PlanSet.cpp - dtcc-plan-set: an explicit plan ----------------------===//
//
// Writes `dshard.plan` from options (Passes.td describes the pass) and
// holds the rules every plan is checked by before it is written.
//
//===----------------------------------------------------------------------===//

#include "passes/Planning/Passes.h"
#include "passes/Planning/Plan.h"
#include "passes/Sharding/ShardingUtils.h"

#include "mlir/IR/Diagnostics.h"

namespace dtcc::planning {
#define GEN_PASS_DEF_PLANSET
#include "passes/Planning/Passes.h.inc"
} // namespace dtcc::planning

using namespace mlir;
using namespace dtcc;
using namespace dtcc::shard;

FailureOr<PlanAttr> dtcc::planning::planToAttr(MLIRContext *ctx,
                                               const Plan &plan,
                                               std::string &error) {
  auto schedule = symbolizePipelineSchedule(plan.schedule);
  if (!schedule) {
    error = "expected a pipeline schedule gpipe, 1f1b, interleaved or zb-h1, "
            "got '" +
            plan.schedule + "'";
    return failure();
  }
  auto recompute = symbolizeRecompute(plan.recompute);
  if (!recompute) {
    error = "expected recompute none, selective or full, got '" +
            plan.recompute + "'";
    return failure();
  }
  auto offload = symbolizeOffload(plan.offload);
  if (!offload) {
    error = "expected offload none or optimizer, got '" + plan.offload + "'";
    return failure();
  }
  if (plan.gradReduce != "fp32" && plan.gradReduce != "half") {
    error = "expected grad-reduce fp32 or half, got '" + plan.gradReduce + "'";
    return failure();
  }
  NamedAttrList layouts;
  for (const std::string &entry : plan.layouts) {
    auto [name, layout] = StringRef(entry).rsplit('=');
    if (name.empty() || layout.empty() || name == entry ||
        (layout != "rows" && layout != "cols" && layout != "whole")) {
      error = "layout '" + entry + "': expected NAME=rows|cols|whole";
      return failure();
    }
    if (layouts.get(name)) {
      error = "layout of variable '" + name.str() + "' given twice";
      return failure();
    }
    layouts.append(name, StringAttr::get(ctx, layout));
  }
  // The attribute's verifier has the other rules; its message is the error.
  std::string message;
  auto emitAt = [&] { return mlir::emitError(UnknownLoc::get(ctx)); };
  llvm::function_ref<InFlightDiagnostic()> emitError = emitAt;
  ScopedDiagnosticHandler capture(ctx, [&](Diagnostic &d) {
    if (message.empty())
      message = d.str();
    return success();
  });
  // MeshShape has checked the axes (each once, sizes >= 1).
  PlanAttr attr = PlanAttr::getChecked(
      emitError, ctx, shard::meshAttr(plan.mesh, ctx), int64_t(plan.zero),
      plan.microBatches, *schedule, plan.virtualStages, *recompute,
      plan.recomputeLayers, plan.sequenceParallel, *offload,
      plan.gradReduce == "half", layouts.getDictionary(ctx));
  if (!attr) {
    error = message;
    return failure();
  }
  return attr;
}

dtcc::planning::Plan dtcc::planning::planFromAttr(PlanAttr attr) {
  Plan plan;
  if (!attr)
    return plan;
  std::vector<runtime::MeshShape::Axis> axes;
  for (auto [a, n] :
       llvm::zip(attr.getMesh().getAxes(), attr.getMesh().getSizes()))
    axes.push_back({a.str(), n});
  // The attribute's verifier has checked what MeshShape checks; no axes is
  // one device.
  if (!axes.empty())
    plan.mesh = runtime::MeshShape::of(std::move(axes)).value();
  plan.zero = attr.getZero();
  plan.microBatches = attr.getMicroBatches();
  plan.schedule = stringifyPipelineSchedule(attr.getSchedule()).str();
  plan.virtualStages = attr.getVirtualStages();
  plan.recompute = stringifyRecompute(attr.getRecompute()).str();
  plan.recomputeLayers = attr.getRecomputeLayers();
  plan.sequenceParallel = attr.getSequenceParallel();
  plan.offload = stringifyOffload(attr.getOffload()).str();
  plan.gradReduce = attr.getHalfGradReduce() ? "half" : "fp32";
  for (NamedAttribute l : attr.getLayouts())
    if (auto s = dyn_cast<StringAttr>(l.getValue()))
      plan.layouts.push_back((l.getName().getValue() + "=" + s.getValue()).str());
  return plan;
}

LogicalResult dtcc::planning::setPlan(ModuleOp module, PlanAttr plan) {
  // What earlier passes built from a plan binds the next one: the stages
  // dtcc-shard-pipeline cut and the mesh dtcc-shard-annotate placed on.
  llvm::SmallDenseSet<int64_t> cut;
  for (auto fn : module.getOps<func::FuncOp>())
    if (auto s = fn->getAttrOfType<IntegerAttr>(kStageAttr))
      cut.insert(s.getInt());
  int64_t stages = cut.size();
  if (stages > 0 && stages != plan.getPipelineStages())
    return module.emitError("the plan's mesh has pp=")
           << plan.getPipelineStages() << " but dtcc-shard-pipeline cut the "
           << "step into " << stages << " stages";
  if (MeshAttr placed = getMesh(module); placed && placed != plan.getMesh())
    return module.emitError("the module is already placed on ")
           << placed << ", the plan's mesh is " << plan.getMesh();
  for (NamedAttribute l : plan.getLayouts()) {
    auto var = module.lookupSymbol<graph::VariableOp>(l.getName());
    if (!var)
      return module.emitError("layout of '")
             << l.getName().getValue() << "': the module has no variable '"
             << l.getName().getValue() << "'";
    if (isa<StringAttr>(l.getValue()) && var.getTensorType().getRank() != 2)
      return module.emitError("layout '")
             << l.getName().getValue() << "="
             << cast<StringAttr>(l.getValue()).getValue()
             << "': expected a 2-D variable, got " << var.getTensorType();
    if (auto s = dyn_cast<ShardingAttr>(l.getValue());
        s && int64_t(s.getDims().size()) != var.getTensorType().getRank())
      return module.emitError("layout of '")
             << l.getName().getValue() << "': " << s << " has "
             << s.getDims().size() << " dimensions, the variable "
             << var.getTensorType();
  }
  module->setAttr(kPlanAttr, plan);
  return success();
}

namespace {

struct PlanSetPass : public dtcc::planning::impl::PlanSetBase<PlanSetPass> {
  using PlanSetBase::PlanSetBase;
  explicit PlanSetPass(planning::Plan plan) : given_(std::move(plan)) {}

  void runOnOperation() final {
    ModuleOp module = getOperation();
    PlanAttr old = getPlan(module);
    // A whole plan from C++ (the CLI parsed its mesh) replaces any; the
    // pass's options replace what they give and keep the rest of the
    // module's plan (each phase sets its own).
    std::optional<planning::Plan> plan = given_ ? given_ : fromOptions(old);
    if (!plan)
      return signalPassFailure();
    std::string error;
    auto attr = planning::planToAttr(module.getContext(), *plan, error);
    if (failed(attr)) {
      module.emitError("invalid plan: ") << error;
      return signalPassFailure();
    }
    // Layouts a search chose (exact shardings) stay unless new ones are
    // given: a step the planner's layout search decided is sharded by its
    // decisions.
    const bool newLayouts =
        given_ ? !given_->layouts.empty() : layouts.hasValue();
    if (old && !newLayouts)
      attr = attr->withLayouts(old.getLayouts());
    if (failed(planning::setPlan(module, *attr)))
      return signalPassFailure();
  }

  /// The module's plan `old` with what the options give; nullopt (an error
  /// emitted) for a mesh that does not parse.
  std::optional<planning::Plan> fromOptions(PlanAttr old) {
    planning::Plan plan = planning::planFromAttr(old);
    if ((mesh.hasValue() || !old) && mesh.empty()) {
      plan.mesh = runtime::MeshShape(); // one device
    } else if (mesh.hasValue() || !old) {
      auto parsed = runtime::MeshShape::parse(mesh.getValue());
      if (!parsed.isOk()) {
        getOperation().emitError("invalid mesh '")
            << mesh.getValue() << "': " << parsed.status().message();
        return std::nullopt;
      }
      plan.mesh = std::move(parsed.value());
    }
    if (zero.hasValue() || !old)
      plan.zero = zero;
    if (microBatches.hasValue() || !old)
      plan.microBatches = microBatches;
    if (schedule.hasValue() || !old)
      plan.schedule = schedule;
    if (recompute.hasValue() || !old)
      plan.recompute = recompute;
    if (virtualStages.hasValue() || !old)
      plan.virtualStages = virtualStages;
    if (recomputeLayers.hasValue() || !old)
      plan.recomputeLayers = recomputeLayers;
    if (sequenceParallel.hasValue() || !old)
      plan.sequenceParallel = sequenceParallel;
    if (offload.hasValue() || !old)
      plan.offload = offload;
    if (gradReduce.hasValue() || !old)
      plan.gradReduce = gradReduce;
    if (layouts.hasValue() || !old)
      plan.layouts.assign(layouts.begin(), layouts.end());
    return plan;
  }

private:
  std::optional<planning::Plan> given_;
};

} // namespace

std::unique_ptr<Pass> dtcc::planning::createPlanSet(const Plan &plan) {
  return std::make_unique<PlanSetPass>(plan);
}
