//===- Passes.h - sharding passes -------------------------------*- C++ -*-===//

#ifndef DTCC_PASSES_SHARDING_PASSES_H
#define DTCC_PASSES_SHARDING_PASSES_H

#include "dialects/Graph/IR/GraphOps.h"
#include "dialects/Shard/IR/ShardOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace dtcc::shard {

#define GEN_PASS_DECL
#include "passes/Sharding/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Sharding/Passes.h.inc"

} // namespace dtcc::shard

#endif // DTCC_PASSES_SHARDING_PASSES_H
