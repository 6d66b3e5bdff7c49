//===- Passes.h - graph-level training passes -------------------*- C++ -*-===//

#ifndef DTCC_PASSES_GRAPH_PASSES_H
#define DTCC_PASSES_GRAPH_PASSES_H

#include "dialects/Graph/IR/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace dtcc::graph {

#define GEN_PASS_DECL
#include "passes/Graph/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Graph/Passes.h.inc"

} // namespace dtcc::graph

#endif // DTCC_PASSES_GRAPH_PASSES_H
