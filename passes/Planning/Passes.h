//===- Passes.h - planning passes -------------------------------*- C++ -*-===//

#ifndef DTCC_PASSES_PLANNING_PASSES_H
#define DTCC_PASSES_PLANNING_PASSES_H

#include "dialects/Graph/IR/GraphOps.h"
#include "dialects/Shard/IR/ShardOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace dtcc::planning {

#define GEN_PASS_DECL
#include "passes/Planning/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Planning/Passes.h.inc"

} // namespace dtcc::planning

#endif // DTCC_PASSES_PLANNING_PASSES_H
