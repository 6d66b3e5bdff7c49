//===- PlanByCompiling.cpp - choose a plan by compiling candidates --------===//

#include "compiler/PlanByCompiling.h"

#include "compiler/Explain.h"
#include "compiler/Serialize.h"
#include "dialects/Graph/IR/GraphOps.h"
#include "passes/Sharding/SearchLayouts.h"

#include "mlir/IR/Diagnostics.h"

#include <algorithm>

using namespace mlir;

namespace dtcc {

runtime::StatusOr<PricedProgram>
compileAndPrice(ModuleOp module, CompileOptions options,
                const planner::ClusterSpec &cluster) {
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
  auto serialized = serializeProgram(*clone);
  if (failed(serialized))
    return runtime::invalidArgument(
        diagnostics.empty() ? "cannot be serialized" : diagnostics);
  PricedProgram out;
  out.program = std::move(serialized->program);
  out.memory = planner::programMemory(out.program);
  auto time = planner::simulateProgram(out.program, cluster);
  if (!time.isOk())
    return time.status();
  out.time = std::move(time.value());
  return out;
}

/// Compiles `module` with `options` and weighs the program: its simulated
/// step on the cluster, its memory plan against the device.
static CompiledCandidate evaluate(ModuleOp module, CompileOptions options,
                                  const DeviceFigures &device) {
  CompiledCandidate c;
  c.mesh = options.train.mesh;
  c.zero = options.train.zero;
  c.layouts = options.train.layouts;
  auto priced = compileAndPrice(module, options, device.cluster);
  if (!priced.isOk()) {
    c.rejected = priced.status().message();
    return c;
  }
  c.peakBytes = priced->memory.total;
  c.flops = priced->time.flops;
  for (const CollectiveInfo &ci : listCollectives(priced->program)) {
    c.commBytes += ci.sentBytes;
    ++c.collectives;
  }
  c.seconds = priced->time.stepTime;
  if ((double)c.peakBytes > device.memoryBytes)
    c.rejected = "needs " + std::to_string(c.peakBytes >> 20) +
                 " MiB per rank, more than the device's " +
                 std::to_string((int64_t)device.memoryBytes >> 20) + " MiB";
  return c;
}

static bool better(const CompiledCandidate &a, const CompiledCandidate &b) {
  if (a.rejected.empty() != b.rejected.empty())
    return a.rejected.empty();
  return a.seconds < b.seconds;
}

namespace {

/// dtcc-shard-search-layouts' choice for `mesh`, found on a clone of
/// `module` compiled to its training step: whether CBC found one, and its
/// 2-D parameters' layouts to report (the candidate's own compile runs the
/// same search again and gets the same answer).
struct SearchedMesh {
  bool solved = false;
  std::string error;
  std::vector<std::string> layouts; ///< NAME=rows|cols|whole
  double modelledSeconds = 0, solveSeconds = 0;
};

SearchedMesh searchMesh(ModuleOp module, CompileOptions options,
                        const std::string &mesh,
                        const TrainOptions::LayoutSearch &figures) {
  SearchedMesh out;
  options.compileTo = Phase::Train;
  options.dumpDir.clear();
  options.train.mesh = mesh;
  OwningOpRef<ModuleOp> clone(module.clone());
  std::string diagnostics;
  ScopedDiagnosticHandler capture(module.getContext(), [&](Diagnostic &d) {
    if (d.getSeverity() == DiagnosticSeverity::Error && diagnostics.empty())
      diagnostics = d.str();
    return success();
  });
  if (failed(runPhases(*clone, options))) {
    out.error = diagnostics.empty() ? "does not compile" : diagnostics;
    return out;
  }
  shard::LayoutSearchOptions o;
  o.mesh = mesh;
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
  return out;
}

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
      options.train.mesh = best.mesh;
      options.train.zero = best.zero;
      options.train.layouts = best.layouts;
      llvm::erase_if(options.train.layouts, [&](const std::string &l) {
        return StringRef(l).starts_with(w + "=");
      });
      options.train.layouts.push_back(w + "=" + layout);
      CompiledCandidate c = evaluate(module, options, device);
      if (better(c, best) && c.seconds < best.seconds * 0.999)
        best = c;
    }
  best.search = "descent";
  return best;
}

} // namespace

std::vector<CompiledCandidate>
planByCompiling(ModuleOp module, const CompileOptions &base, int64_t ranks,
                const DeviceFigures &device, LayoutSearchMode search) {
  TrainOptions::LayoutSearch ilp;
  ilp.enabled = true;
  ilp.flops = device.flops;
  ilp.busBandwidth = device.busBandwidth;
  ilp.latency = device.latency;
  std::vector<CompiledCandidate> out;
  bool ilpFailed = false;
  for (int64_t tp = 1; tp <= ranks; ++tp) {
    if (ranks % tp != 0)
      continue;
    int64_t dp = ranks / tp;
    std::string mesh = "dp=" + std::to_string(dp) + ",tp=" + std::to_string(tp);
    // Every op's tp sharding by the ILP, once per mesh (it prices ZeRO 0;
    // each stage is compiled and weighed with its layouts).
    SearchedMesh searched;
    bool useIlp = tp > 1 && (search == LayoutSearchMode::kIlp ||
                             search == LayoutSearchMode::kBoth);
    if (useIlp) {
      searched = searchMesh(module, base, mesh, ilp);
      if (!searched.solved) {
        ilpFailed = true;
        CompiledCandidate failed;
        failed.mesh = mesh;
        failed.search = "ilp";
        failed.rejected = "tp layout search: " + searched.error;
        out.push_back(failed);
      }
    }
    for (int zero = 0; zero <= (dp > 1 ? 3 : 0); ++zero) {
      CompileOptions options = base;
      options.train.mesh = mesh;
      options.train.zero = zero;
      out.push_back(evaluate(module, options, device));
      if (useIlp && searched.solved) {
        options.train.layoutSearch = ilp;
        CompiledCandidate c = evaluate(module, options, device);
        c.search = "ilp";
        c.layoutSearch = ilp;
        c.layouts = searched.layouts;
        out.push_back(c);
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), better);
  if (search == LayoutSearchMode::kNone ||
      (search == LayoutSearchMode::kIlp && !ilpFailed))
    return out;

  // Coordinate descent from the best Megatron-style plan with tensor
  // parallelism.
  auto start = llvm::find_if(out, [](const CompiledCandidate &c) {
    return c.search.empty() && c.rejected.empty() &&
           c.mesh.find("tp=1") == std::string::npos;
  });
  if (start == out.end())
    return out;
  CompiledCandidate descent = coordinateDescent(module, base, *start, device);
  // Listed when it changed something, or always when compared with the ILP.
  if (descent.layouts != start->layouts || search == LayoutSearchMode::kBoth) {
    out.push_back(descent);
    std::stable_sort(out.begin(), out.end(), better);
  }
  return out;
}

} // namespace dtcc
