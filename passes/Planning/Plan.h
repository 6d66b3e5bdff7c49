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

#include <string>
#include <vector>

namespace dtcc::planning {

struct Plan {
  /// Axes in rank order (the last fastest); empty: one device.
  runtime::MeshShape mesh;
  int zero = 0;
  int64_t microBatches = 1;
  std::string schedule = "1f1b"; ///< gpipe or 1f1b (with pp)
  std::string recompute = "none"; ///< none or full
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
