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

#include "dialects/Shard/IR/ShardEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/Shard/IR/ShardAttrs.h.inc"

#define GET_OP_CLASSES
#include "dialects/Shard/IR/ShardOps.h.inc"

namespace dtcc::shard {

/// The mesh of the module around `op` (its `dshard.mesh` attribute), or null.
MeshAttr getMesh(mlir::Operation *op);

/// The plan of the module around `op` (its `dshard.plan` attribute), or
/// null: the one place a pass reads a planning decision from.
PlanAttr getPlan(mlir::Operation *op);

/// Every dshard attribute the passes put on other dialects' ops, spelled
/// once here; ShardDialect::verifyOperationAttribute checks each one's
/// value and refuses any other dshard.* name.
///
/// A variable's or a function argument's sharding (#dshard.sharding).
constexpr llvm::StringLiteral kShardingAttr = "dshard.sharding";
/// An op's shardings, one per result (array of #dshard.sharding).
constexpr llvm::StringLiteral kResultShardingsAttr = "dshard.shardings";
/// The layouts an op's operands must arrive in, one per operand (array of
/// #dshard.sharding; dtcc-shard-propagate, read by partition).
constexpr llvm::StringLiteral kInShardingsAttr = "dshard.in_shardings";
/// The module's plan (#dshard.plan): mesh, ZeRO, micro-batches, schedule,
/// recomputation, layouts; written by passes/Planning only.
constexpr llvm::StringLiteral kPlanAttr = "dshard.plan";
/// The mesh the module's program is placed on (#dshard.mesh; the plan's,
/// recorded by dtcc-shard-annotate).
constexpr llvm::StringLiteral kMeshAttr = "dshard.mesh";
/// The pipeline stage (integer >= 0) of a stage function or a variable.
constexpr llvm::StringLiteral kStageAttr = "dshard.stage";
/// On a variable: ZeRO-sharded over dp (unit).
constexpr llvm::StringLiteral kZeroAttr = "dshard.zero";
/// On a parameter split by ZeRO-1/2 (with `dshard.zero`): its dp split is
/// its master copy's, the optimizer state's; the step gathers it once, at
/// its first use, and keeps the whole (compute-type) tensor for the step's
/// other uses, where ZeRO-3 gathers again for each (unit).
constexpr llvm::StringLiteral kGatherOnceAttr = "dshard.gather_once";
/// On a master weight (FlatSymbolRefAttr): the compute-type copy the step
/// reads instead of it (dtcc-shard-annotate's half-weight-copies); ZeRO-1/2
/// split the master over dp with the optimizer state.
constexpr llvm::StringLiteral kHalfCopyAttr = "dshard.half_copy";
/// On a dshard.constraint: its split over tp is a sequence-parallel split
/// (unit; dtcc-shard-annotate), which yields to any other use of tp.
constexpr llvm::StringLiteral kSequenceAttr = "dshard.sequence";
/// A partitioned value's whole tensor type (type attribute).
constexpr llvm::StringLiteral kGlobalTypeAttr = "dshard.global_type";
/// The micro-batch (integer >= 0) and the pass ("forward" or "backward")
/// of an op of an unrolled pipeline step (dtcc-shard-microbatch).
constexpr llvm::StringLiteral kMicroAttr = "dshard.micro";
constexpr llvm::StringLiteral kPassAttr = "dshard.pass";
/// An asynchronous send's handle (integer >= 0) until its wait is placed.
constexpr llvm::StringLiteral kWaitHandleAttr = "dshard.wait_handle";
/// On a pipeline stage's ops: the schedule task they run in ("forward mb0",
/// "input gradient mb1", "backward mb2 chunk1"); it travels to the program's
/// kernels, and the runtime's --trace reports it.
constexpr llvm::StringLiteral kTaskAttr = "dshard.task";

} // namespace dtcc::shard

#endif // DTCC_DIALECTS_SHARD_IR_SHARDOPS_H
