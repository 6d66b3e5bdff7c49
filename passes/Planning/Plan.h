//===- Plan.h - a training plan as C++ holds it -----------------*- C++ -*-===//
//
// The C++ mirror of #dshard.plan that the CLI fills once (its mesh parsed
// by runtime::MeshShape) and the driver and phases carry; planToAttr checks
// it by dtcc-plan-set's rules and turns it into the attribute.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_PASSES_PLANNING_PLAN_H
#define DTCC_PASSES_PLANNING_PLAN_H

#include "dialects/Shard/IR/ShardOps.h"
#include "runtime/base/MeshShape.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

#include <optional>
#include <string>
#include <vector>

namespace dtcc::planning {

struct Plan {
  /// Axes in rank order (the last fastest); empty: one device.
  runtime::MeshShape mesh;
  int zero = 0;
  int64_t microBatches = 1;
  /// gpipe, 1f1b, interleaved or zb-h1 (with pp).
  std::string schedule = "1f1b";
  int64_t virtualStages = 1; ///< layer chunks per pp rank (interleaved)
  std::string recompute = "none"; ///< none, selective or full
  /// With full: only the first K layers of each stage (0: every layer).
  int64_t recomputeLayers = 0;
  bool sequenceParallel = false; ///< with tp: norms etc. split on sequence
  std::string offload = "none";  ///< none or optimizer
  /// fp32, or half: weight gradients summed over dp and cp at the compute
  /// type (bf16, fp16) before mixed precision widens them, instead of in
  /// fp32 after (#dshard.plan's grad_reduce). With micro-batches half only
  /// under ZeRO-2/3 without pp.
  std::string gradReduce = "fp32";
  /// NAME=rows|cols|whole: tensor-parallel layouts of 2-D weights that
  /// replace the Megatron-style choice.
  std::vector<std::string> layouts;

  int64_t pipelineStages() const { return mesh.size("pp"); }
};

/// `plan` as #dshard.plan, or failure with `error` saying what is wrong
/// (the plan verifier's rules, and a layout that does not parse).
mlir::FailureOr<shard::PlanAttr> planToAttr(mlir::MLIRContext *ctx,
                                            const Plan &plan,
                                            std::string &error);

/// `attr` as a Plan (its rows/cols/whole layouts; a search's exact
/// shardings have no spelling here); the default plan for null.
Plan planFromAttr(shard::PlanAttr attr);

/// Checks `plan` against `module` (a layout names a 2-D variable of it) and
/// writes it as the module's `dshard.plan`; errors at the module.
mlir::LogicalResult setPlan(mlir::ModuleOp module, shard::PlanAttr plan);

/// dtcc-plan-set writing all of `plan` (replacing the module's plan).
std::unique_ptr<mlir::Pass> createPlanSet(const Plan &plan);

} // namespace dtcc::planning

#endif // DTCC_PASSES_PLANNING_PLAN_H
