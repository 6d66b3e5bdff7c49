//===- ShardOps.h - dshard dialect, attributes and ops ----------*- C++ -*-===//

#ifndef DTCC_DIALECTS_SHARD_IR_SHARDOPS_H
#define DTCC_DIALECTS_SHARD_IR_SHARDOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/Shard/IR/ShardOpsDialect.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/Shard/IR/ShardAttrs.h.inc"

#define GET_OP_CLASSES
#include "dialects/Shard/IR/ShardOps.h.inc"

namespace dtcc::shard {

/// The mesh of the module around `op` (its `dshard.mesh` attribute), or null.
MeshAttr getMesh(mlir::Operation *op);

/// The name of the attribute that holds shardings: on variables and
/// function arguments (one sharding) and on ops (`dshard.shardings`, one per
/// result).
constexpr llvm::StringLiteral kShardingAttr = "dshard.sharding";
constexpr llvm::StringLiteral kResultShardingsAttr = "dshard.shardings";
constexpr llvm::StringLiteral kMeshAttr = "dshard.mesh";

} // namespace dtcc::shard

#endif // DTCC_DIALECTS_SHARD_IR_SHARDOPS_H
