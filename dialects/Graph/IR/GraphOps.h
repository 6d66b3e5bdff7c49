//===- GraphOps.h - dgraph dialect and ops ----------------------*- C++ -*-===//
//
// The dgraph dialect: coarse tensor ops on static-shaped tensors.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_DIALECTS_GRAPH_IR_GRAPHOPS_H
#define DTCC_DIALECTS_GRAPH_IR_GRAPHOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/Graph/IR/GraphOpsDialect.h.inc"
#include "dialects/Graph/IR/ShardingRule.h"
#include "dialects/Graph/IR/GraphInterfaces.h.inc"

namespace dtcc::graph {
/// Returns an i1 tensor type with the shape of `type` (a ranked tensor).
mlir::Type getI1TensorLike(mlir::Type type);
} // namespace dtcc::graph

#define GET_OP_CLASSES
#include "dialects/Graph/IR/GraphOps.h.inc"

#endif // DTCC_DIALECTS_GRAPH_IR_GRAPHOPS_H
