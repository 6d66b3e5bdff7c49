//===- PlanByCompiling.cpp - choose a plan by compiling candidates --------===//

#include "compiler/PlanByCompiling.h"

#include "compiler/Explain.h"
#include "compiler/Serialize.h"
#include "compiler/Timing.h"
#include "dialects/Graph/IR/GraphOps.h"
#include "passes/Planning/Plan.h"
#include "passes/Planning/SearchLayouts.h"
#include "passes/Sharding/ShardingUtils.h"
#include "runtime/format/ProgramMetadata.h"

#include "mlir/IR/Diagnostics.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <tuple>

using namespace mlir;

namespace dtcc {

runtime::StatusOr<PricedProgram>
compileAndPrice(ModuleOp module, CompileOptions options,
                const planner::ClusterSpec &cluster,
                const planner::RunKernels &run,
                OwningOpRef<ModuleOp> *lowered) {
  options.compileTo = Phase::Exec;
  options.dumpDir.clear();
  OwningOpRef<ModuleOp> clone(module.clone());
  std::string diagnostics;
  ScopedDiagnosticHandler capture(module.getContext(), [&](Diagnostic &d) {
    if (d.getSeverity() == DiagnosticSeverity::Error && diagnostics.empty())
      diagnostics = d.str();
    return success();
  });
  if (failed(runPhases(*clone, options)))
    return runtime::invalidArgument(
        diagnostics.empty() ? "does not compile" : diagnostics);
  mlir::TimingScope timing = compilerTiming().nest("serialize the program");
  auto serialized = serializeProgram(*clone);
  if (failed(serialized))
    return runtime::invalidArgument(
        diagnostics.empty() ? "cannot be serialized" : diagnostics);
  PricedProgram out;
  out.program = std::move(serialized->program);
  // As `dtcc compile` writes it: the CUDA backend reserves its kernels'
  // scratch (cuBLASLt workspace, staging) by target.
  if (options.target != "cpu")
    (*out.program.mutable_metadata())[runtime::metadata::kTarget] =
        options.target;
  timing = compilerTiming().nest("plan the program's memory");
  out.memory =
      planner::programMemory(out.program, /*maxTensors=*/12, run.attention);
  timing = compilerTiming().nest("simulate the program's step");
  auto time = planner::simulateProgram(out.program, cluster,
                                       /*recordTimeline=*/false, run);
  if (!time.isOk())
    return time.status();
  out.time = std::move(time.value());
  if (lowered)
    *lowered = std::move(clone);
  return out;
}

DeviceFigures deviceFigures(const planner::ClusterSpec &cluster) {
  DeviceFigures f;
  f.flops = cluster.device.peakFlops(planner::DType::kFp32) *
            cluster.device.matmulEfficiency.value;
  f.memoryBytes =
      cluster.device.memoryBytes.value - cluster.device.reservedBytes.value;
  const planner::LinkSpec &link =
      cluster.nodes > 1 ? cluster.interNode : cluster.intraNode;
  f.busBandwidth = link.busBandwidth();
  f.latency = link.latency.value;
  f.cluster = cluster;
  return f;
}

CompiledCandidate compileCandidate(ModuleOp module, CompileOptions options,
                                   const DeviceFigures &device) {
  CompiledCandidate c;
  c.mesh = options.train.plan.mesh;
  c.zero = options.train.plan.zero;
  c.layouts = options.train.plan.layouts;
  c.microBatches = options.train.plan.microBatches;
  c.sequenceParallel = options.train.plan.sequenceParallel;
  if (c.mesh.size("pp") > 1) {
    c.schedule = options.train.plan.schedule;
    c.virtualStages = options.train.plan.virtualStages;
  }
  OwningOpRef<ModuleOp> lowered;
  auto priced = compileAndPrice(module, options, device.cluster, {}, &lowered);
  if (!priced.isOk()) {
    c.rejected = priced.status().message();
    return c;
  }
  c.peakBytes = priced->memory.total;
  c.flops = priced->time.flops;
  bool tpTalks = false;
  for (const CollectiveInfo &ci : listCollectives(priced->program)) {
    c.commBytes += ci.sentBytes;
    ++c.collectives;
    tpTalks |= ci.overAxis("tp");
  }
  // tp ranks that split no weight and never communicate compute the same
  // whole step.
  if (c.mesh.size("tp") > 1)
    c.tpIdle = !tpTalks && !shard::splitsVariableOver(*lowered, "tp");
  c.lowered = std::make_shared<OwningOpRef<ModuleOp>>(std::move(lowered));
  c.seconds = priced->time.stepTime;
  c.priced = std::make_shared<const PricedProgram>(std::move(priced.value()));
  if ((double)c.peakBytes > device.memoryBytes)
    c.rejected = "needs " + std::to_string(c.peakBytes >> 20) +
                 " MiB per rank, more than the device's " +
                 std::to_string((int64_t)device.memoryBytes >> 20) + " MiB";
  return c;
}

/// The mesh of candidate dp x pp x tp, in Megatron-LM's rank order (tp
/// fastest, then dp, then pp) as the planner prices it; dp and tp are kept
/// when 1, so that every candidate, one rank's too, is a sharded program.
static runtime::MeshShape candidateMesh(int64_t dp, int64_t pp, int64_t tp) {
  std::vector<runtime::MeshShape::Axis> axes;
  if (pp > 1)
    axes.push_back({"pp", pp});
  axes.push_back({"dp", dp});
  axes.push_back({"tp", tp});
  return runtime::MeshShape::of(std::move(axes)).value();
}

/// The compiled modules of all candidates but the chosen one, released.
static std::vector<CompiledCandidate>
keepFirstLowered(std::vector<CompiledCandidate> candidates) {
  for (size_t i = 1; i < candidates.size(); ++i)
    candidates[i].lowered.reset();
  return candidates;
}

static bool better(const CompiledCandidate &a, const CompiledCandidate &b) {
  if (a.rejected.empty() != b.rejected.empty())
    return a.rejected.empty();
  return a.seconds < b.seconds;
}

/// Sorts `out` fastest fitting first, then moves to the front the simplest
/// plan within 0.5% of the fastest: the lower ZeRO stage, then fewer
/// pipeline stages and tensor-parallel ranks, the Megatron-style layouts,
/// no sequence parallelism (fewer collectives to get wrong, less traffic
/// for a time the model cannot tell apart).
static void rank(std::vector<CompiledCandidate> &out) {
  std::stable_sort(out.begin(), out.end(), better);
  if (out.empty() || !out.front().rejected.empty())
    return;
  auto simplicity = [](const CompiledCandidate &c) {
    return std::make_tuple(c.zero, c.mesh.size("pp"), c.mesh.size("tp"),
                           !c.search.empty(), c.sequenceParallel);
  };
  size_t best = 0;
  for (size_t i = 1; i < out.size() && out[i].rejected.empty(); ++i)
    if (out[i].seconds <= (1 + kSimplerPlanWithin) * out.front().seconds &&
        simplicity(out[i]) < simplicity(out[best]))
      best = i;
  std::rotate(out.begin(), out.begin() + best, out.begin() + best + 1);
}

namespace {

/// dtcc-plan-search-layouts' choice for `mesh`, found on a clone of
/// `module` compiled to its training step: whether CBC found one, and its
/// 2-D parameters' layouts to report (the candidate's own compile runs the
/// same search again and gets the same answer).
struct SearchedMesh {
  bool solved = false;
  std::string error;
  std::vector<std::string> layouts; ///< NAME=rows|cols|whole
  double modelledSeconds = 0, solveSeconds = 0;
  /// The training step with the search's decisions written (variables'
  /// shardings, constraints): each ZeRO stage is sharded from it.
  OwningOpRef<ModuleOp> decided;
};

/// Runs the search on a clone of `trained` (a training step).
SearchedMesh searchMesh(ModuleOp trained, const runtime::MeshShape &mesh,
                        const TrainOptions::LayoutSearch &figures) {
  SearchedMesh out;
  OwningOpRef<ModuleOp> clone(trained.clone());
  std::string diagnostics;
  ScopedDiagnosticHandler capture(trained.getContext(), [&](Diagnostic &d) {
    if (d.getSeverity() == DiagnosticSeverity::Error && diagnostics.empty())
      diagnostics = d.str();
    return success();
  });
  // The search reads its mesh from the step's plan: the candidate's.
  planning::Plan plan = planning::planFromAttr(shard::getPlan(*clone));
  plan.mesh = mesh;
  auto planAttr = planning::planToAttr(trained.getContext(), plan, out.error);
  if (failed(planAttr))
    return out;
  (*clone)->setAttr(shard::kPlanAttr, *planAttr);
  shard::LayoutSearchOptions o;
  o.costs.flops = figures.flops;
  o.costs.busBandwidth = figures.busBandwidth;
  o.costs.latency = figures.latency;
  o.costs.memoryBandwidth = figures.memoryBandwidth;
  if (figures.tpBusBandwidth > 0)
    o.costs.links.push_back({"tp", figures.tpBusBandwidth, figures.tpLatency});
  if (figures.dpBusBandwidth > 0)
    o.costs.links.push_back({"dp", figures.dpBusBandwidth, figures.dpLatency});
  o.timeLimit = figures.timeLimit;
  auto result = shard::searchLayouts(*clone, o);
  if (failed(result) || !result->solved) {
    out.error = failed(result) ? diagnostics : result->error;
    return out;
  }
  out.solved = true;
  out.modelledSeconds = result->seconds;
  out.solveSeconds = result->solveSeconds;
  for (const auto &[name, layout] : result->layouts)
    if (auto var = clone->lookupSymbol<graph::VariableOp>(name))
      if (var.getTensorType().getRank() == 2)
        out.layouts.push_back(name + "=" + layout);
  out.decided = std::move(clone);
  return out;
}

/// The training step of `module` compiled once per kind (unrolled over
/// micro-batches for pipelines, or not), for every candidate to shard.
class TrainedSteps {
public:
  TrainedSteps(ModuleOp module, const CompileOptions &base)
      : module_(module), base_(base) {}

  /// The step for a mesh with `pp` stages, or null with `error` set.
  ModuleOp get(int64_t pp, std::string &error) {
    Slot &slot = slots_[pp > 1];
    if (!slot.tried) {
      slot.tried = true;
      CompileOptions options = base_;
      options.compileTo = Phase::Train;
      options.dumpDir.clear();
      // Only whether there is a pipeline matters to the training phase.
      options.train.plan.mesh = pp > 1 ? runtime::MeshShape::megatron(1, 2, 1)
                                  : runtime::MeshShape();
      options.train.layoutSearch.enabled = false;
      slot.module = module_.clone();
      ScopedDiagnosticHandler capture(module_.getContext(), [&](Diagnostic &d) {
        if (d.getSeverity() == DiagnosticSeverity::Error && slot.error.empty())
          slot.error = d.str();
        return success();
      });
      if (failed(runPhases(*slot.module, options))) {
        if (slot.error.empty())
          slot.error = "the training step does not compile";
        slot.module = nullptr;
      }
    }
    error = slot.error;
    return slot.module ? *slot.module : ModuleOp();
  }

  /// `options` to shard a step from get().
  static CompileOptions fromTrained(CompileOptions options) {
    options.startAfter = Phase::Train;
    return options;
  }

private:
  struct Slot {
    bool tried = false;
    OwningOpRef<ModuleOp> module;
    std::string error;
  };
  ModuleOp module_;
  const CompileOptions &base_;
  Slot slots_[2];
};

/// One pass of coordinate descent from `start`: each 2-D parameter tried
/// split by rows, by columns and whole, keeping what the compiled cost says
/// is faster.
CompiledCandidate coordinateDescent(ModuleOp module, const CompileOptions &base,
                                    const CompiledCandidate &start,
                                    const DeviceFigures &device) {
  CompiledCandidate best = start;
  SmallVector<std::string> weights;
  for (auto var : module.getOps<graph::VariableOp>())
    if (var.getTrainable() && var.getTensorType().getRank() == 2)
      weights.push_back(var.getSymName().str());
  for (const std::string &w : weights)
    for (const char *layout : {"rows", "cols", "whole"}) {
      CompileOptions options = base;
      options.train.plan.mesh = best.mesh;
      options.train.plan.zero = best.zero;
      options.train.plan.layouts = best.layouts;
      llvm::erase_if(options.train.plan.layouts, [&](const std::string &l) {
        return StringRef(l).starts_with(w + "=");
      });
      options.train.plan.layouts.push_back(w + "=" + layout);
      CompiledCandidate c = compileCandidate(module, options, device);
      if (better(c, best) && c.seconds < best.seconds * 0.999)
        best = c;
    }
  best.search = "descent";
  return best;
}

} // namespace

TrainOptions::LayoutSearch
layoutSearchFigures(const DeviceFigures &device,
                    const runtime::MeshShape &mesh) {
  TrainOptions::LayoutSearch f;
  f.enabled = true;
  f.flops = device.flops;
  f.busBandwidth = device.busBandwidth;
  f.latency = device.latency;
  const planner::ClusterSpec &c = device.cluster;
  if (c.perNode() < 1)
    return f;
  f.memoryBandwidth =
      c.device.memoryBandwidth.value * c.device.memoryEfficiency.value;
  // Rank 0's group along each axis, at the mesh's real strides.
  auto link = [&](const char *axis, double &bandwidth, double &latency) {
    planner::GroupLink l = planner::groupLink(c, mesh.group(axis));
    bandwidth = l.figures.busBandwidth;
    latency = l.figures.latency;
  };
  link("tp", f.tpBusBandwidth, f.tpLatency);
  link("dp", f.dpBusBandwidth, f.dpLatency);
  return f;
}

std::vector<CompiledCandidate>
planByCompiling(ModuleOp module, const CompileOptions &base, int64_t ranks,
                const DeviceFigures &device, LayoutSearchMode search,
                bool searchSchedules) {
  std::vector<CompiledCandidate> out;
  bool ilpFailed = false;
  TrainedSteps trained(module, base);
  for (int64_t tp = 1; tp <= ranks; ++tp) {
    if (ranks % tp != 0)
      continue;
    for (int64_t pp = 1; pp <= ranks / tp; ++pp) {
      if ((ranks / tp) % pp != 0)
        continue;
      int64_t dp = ranks / tp / pp;
      const runtime::MeshShape mesh = candidateMesh(dp, pp, tp);
      // (schedule, chunks per stage): interleaved over 2 chunks where the
      // micro-batches come in groups of pp (layers that do not divide into
      // 2pp chunks are rejected by the compile, with the reason).
      std::vector<std::pair<std::string, int64_t>> schedules = {
          {base.train.plan.schedule, base.train.plan.virtualStages}};
      const int64_t micro = base.train.plan.microBatches;
      if (pp > 1 && micro > 1 && searchSchedules) {
        schedules = {{"1f1b", 1}, {"gpipe", 1}, {"zb-h1", 1}};
        if (micro % pp == 0)
          schedules.push_back({"interleaved", 2});
      }
      // Every op's tp sharding by the ILP, once per mesh (it prices ZeRO 0;
      // each stage is compiled and weighed with its layouts). The search
      // does not place pipeline stages.
      SearchedMesh searched;
      TrainOptions::LayoutSearch ilp = layoutSearchFigures(device, mesh);
      bool useIlp = tp > 1 && pp == 1 &&
                    (search == LayoutSearchMode::kIlp ||
                     search == LayoutSearchMode::kBoth);
      std::string error;
      ModuleOp step = trained.get(pp, error);
      if (!step) {
        CompiledCandidate failed;
        failed.mesh = mesh;
        failed.rejected = error;
        out.push_back(failed);
        continue;
      }
      if (useIlp) {
        searched = searchMesh(step, mesh, ilp);
        if (!searched.solved) {
          ilpFailed = true;
          CompiledCandidate failed;
          failed.mesh = mesh;
          failed.search = "ilp";
          failed.rejected = "tp layout search: " + searched.error;
          out.push_back(failed);
        }
      }
      for (int zero = 0; zero <= (dp > 1 ? 3 : 0); ++zero)
        for (const auto &[schedule, chunks] : schedules) {
          CompileOptions options = TrainedSteps::fromTrained(base);
          options.train.plan.mesh = mesh;
          options.train.plan.zero = zero;
          options.train.plan.schedule = schedule;
          options.train.plan.virtualStages = pp > 1 ? chunks : 1;
          out.push_back(compileCandidate(step, options, device));
          // The same plan with sequence parallelism (Megatron's layouts).
          if (tp > 1) {
            options.train.plan.sequenceParallel = true;
            out.push_back(compileCandidate(step, options, device));
            options.train.plan.sequenceParallel = false;
          }
          if (useIlp && searched.solved) {
            // Sharded from the searched step; the final compile runs the
            // search again (`layoutSearch`).
            CompiledCandidate c =
                compileCandidate(*searched.decided, options, device);
            c.search = "ilp";
            c.layoutSearch = ilp;
            c.layouts = searched.layouts;
            out.push_back(c);
          }
        }
    }
  }
  rank(out);
  if (search == LayoutSearchMode::kNone ||
      (search == LayoutSearchMode::kIlp && !ilpFailed))
    return keepFirstLowered(std::move(out));

  // Coordinate descent from the best Megatron-style plan with tensor
  // parallelism.
  auto start = llvm::find_if(out, [](const CompiledCandidate &c) {
    return c.search.empty() && c.rejected.empty() && !c.sequenceParallel &&
           c.mesh.size("tp") > 1 && c.mesh.size("pp") == 1;
  });
  std::string error;
  ModuleOp step = trained.get(1, error);
  if (start == out.end() || !step)
    return out;
  CompiledCandidate descent = coordinateDescent(
      step, TrainedSteps::fromTrained(base), *start, device);
  // Listed when it changed something, or always when compared with the ILP.
  if (descent.layouts != start->layouts || search == LayoutSearchMode::kBoth) {
    out.push_back(descent);
    rank(out);
  }
  return keepFirstLowered(std::move(out));
}

} // namespace dtcc
