//===- PlanByCompiling.cpp - choose a plan by compiling candidates --------===//

#include "compiler/PlanByCompiling.h"

#include "compiler/Explain.h"
#include "compiler/Serialize.h"
#include "dialects/Graph/IR/GraphOps.h"

#include "mlir/IR/Diagnostics.h"

#include <algorithm>

using namespace mlir;

namespace dtcc {

namespace {

/// The multiply-adds of a rank's matrix products in its training step(s).
double matmulFlops(ModuleOp module) {
  double flops = 0;
  module.walk([&](graph::MatmulOp mm) {
    auto lhs = cast<RankedTensorType>(mm.getLhs().getType());
    auto out = cast<RankedTensorType>(mm.getResult().getType());
    int64_t k = lhs.getDimSize(mm.getTransposeLhs() ? lhs.getRank() - 2
                                                    : lhs.getRank() - 1);
    flops += 2.0 * (double)out.getNumElements() * (double)k;
  });
  return flops;
}

} // namespace

/// Compiles `module` with `options` and weighs the program.
static CompiledCandidate evaluate(ModuleOp module, CompileOptions options,
                                  const DeviceFigures &device) {
  CompiledCandidate c;
  c.mesh = options.train.mesh;
  c.zero = options.train.zero;
  c.layouts = options.train.layouts;
  options.compileTo = Phase::Shard;
  options.dumpDir.clear();
  OwningOpRef<ModuleOp> clone(module.clone());
  std::string diagnostics;
  // A candidate that does not compile (a split that does not divide) is
  // rejected with the compiler's message.
  ScopedDiagnosticHandler capture(module.getContext(), [&](Diagnostic &d) {
    if (d.getSeverity() == DiagnosticSeverity::Error && diagnostics.empty())
      diagnostics = d.str();
    return success();
  });
  if (failed(runPhases(*clone, options))) {
    c.rejected = diagnostics.empty() ? "does not compile" : diagnostics;
    return c;
  }
  c.flops = matmulFlops(*clone);
  // The shard phase is done: lower what it left.
  CompileOptions lower;
  lower.compileTo = Phase::Exec;
  if (failed(runPhases(*clone, lower))) {
    c.rejected = diagnostics.empty() ? "does not lower" : diagnostics;
    return c;
  }
  auto serialized = serializeProgram(*clone);
  if (failed(serialized)) {
    c.rejected = "cannot be serialized";
    return c;
  }
  const auto &program = serialized->program;
  c.peakBytes = program.workspace_bytes() + program.state_bytes() +
                program.constant_bytes();
  double commSeconds = 0;
  for (const CollectiveInfo &ci : listCollectives(program)) {
    c.commBytes += ci.sentBytes;
    ++c.collectives;
    commSeconds += (double)ci.sentBytes / device.busBandwidth +
                   2.0 * (double)(ci.groupSize - 1) * device.latency;
  }
  c.seconds = c.flops / device.flops + commSeconds;
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

std::vector<CompiledCandidate>
planByCompiling(ModuleOp module, const CompileOptions &base, int64_t ranks,
                const DeviceFigures &device) {
  std::vector<CompiledCandidate> out;
  for (int64_t tp = 1; tp <= ranks; ++tp) {
    if (ranks % tp != 0)
      continue;
    int64_t dp = ranks / tp;
    for (int zero = 0; zero <= (dp > 1 ? 3 : 0); ++zero) {
      CompileOptions options = base;
      options.train.mesh = "dp=" + std::to_string(dp) + ",tp=" + std::to_string(tp);
      options.train.zero = zero;
      out.push_back(evaluate(module, options, device));
    }
  }
  std::stable_sort(out.begin(), out.end(), better);
  if (out.empty() || !out.front().rejected.empty() ||
      out.front().mesh.find("tp=1") != std::string::npos)
    return out;

  // Per-weight layouts for the best tensor-parallel plan: one pass of
  // coordinate descent over the 2-D parameters, each tried split by rows,
  // by columns and whole, keeping what the compiled cost says is faster.
  CompiledCandidate best = out.front();
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
  if (best.layouts != out.front().layouts)
    out.insert(out.begin(), best);
  return out;
}

} // namespace dtcc
