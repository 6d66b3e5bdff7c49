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

std::vector<CompiledCandidate>
planByCompiling(ModuleOp module, const CompileOptions &base, int64_t ranks,
                const DeviceFigures &device) {
  std::vector<CompiledCandidate> out;
  for (int64_t tp = 1; tp <= ranks; ++tp) {
    if (ranks % tp != 0)
      continue;
    int64_t dp = ranks / tp;
    for (int zero = 0; zero <= (dp > 1 ? 3 : 0); ++zero) {
      CompiledCandidate c;
      c.mesh = "dp=" + std::to_string(dp) + ",tp=" + std::to_string(tp);
      c.zero = zero;
      CompileOptions options = base;
      options.compileTo = Phase::Shard;
      options.dumpDir.clear();
      options.train.mesh = c.mesh;
      options.train.zero = zero;
      OwningOpRef<ModuleOp> clone(module.clone());
      std::string diagnostics;
      {
        // A candidate that does not compile (a split that does not divide)
        // is rejected with the compiler's message.
        ScopedDiagnosticHandler capture(module.getContext(), [&](Diagnostic &d) {
          if (d.getSeverity() == DiagnosticSeverity::Error && diagnostics.empty())
            diagnostics = d.str();
          return success();
        });
        if (failed(runPhases(*clone, options))) {
          c.rejected = diagnostics.empty() ? "does not compile" : diagnostics;
          out.push_back(c);
          continue;
        }
        c.flops = matmulFlops(*clone);
        options.compileTo = Phase::Exec;
        // The shard phase is done: lower what it left.
        CompileOptions lower;
        lower.compileTo = Phase::Exec;
        if (failed(runPhases(*clone, lower))) {
          c.rejected = diagnostics.empty() ? "does not lower" : diagnostics;
          out.push_back(c);
          continue;
        }
      }
      auto serialized = serializeProgram(*clone);
      if (failed(serialized)) {
        c.rejected = "cannot be serialized";
        out.push_back(c);
        continue;
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
      out.push_back(c);
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const auto &a, const auto &b) {
    if (a.rejected.empty() != b.rejected.empty())
      return a.rejected.empty();
    return a.seconds < b.seconds;
  });
  return out;
}

} // namespace dtcc
