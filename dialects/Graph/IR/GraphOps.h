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
#define GET_ATTRDEF_CLASSES
#include "dialects/Graph/IR/GraphAttrs.h.inc"
#include "dialects/Graph/IR/ShardingRule.h"
#include "dialects/Graph/IR/GraphInterfaces.h.inc"

namespace dtcc::graph {
/// Every dgraph attribute outside the dialect's ops, spelled once here;
/// GraphDialect's attribute verifiers check each one's place and value and
/// refuse any other dgraph.* name.
///
/// A function argument's or result's name (the ONNX input or output).
constexpr llvm::StringLiteral kNameAttr = "dgraph.name";
/// On a train_step result: the variable it is the gradient of (symbol).
constexpr llvm::StringLiteral kGradOfAttr = "dgraph.grad_of";
/// On the module: the ONNX graph's name.
constexpr llvm::StringLiteral kModelAttr = "dgraph.model";
/// On an op (unit): the loss gradient's seed (autodiff), an op recomputed
/// for the backward pass.
constexpr llvm::StringLiteral kGradSeedAttr = "dgraph.grad_seed";
constexpr llvm::StringLiteral kRecomputeAttr = "dgraph.recompute";
/// On an op other than the module (#dgraph.layer): its top-level module
/// and its layer (repeated block). Set by the ONNX importer from node
/// names, or by dtcc-graph-mark-layers from the graph's structure; read by
/// recomputation, pipeline cutting and prefetching.
constexpr llvm::StringLiteral kLayerAttr = "dgraph.layer";
/// On the module, the training step's facts the runtime needs (written into
/// the program's metadata, runtime/format/ProgramMetadata.h):
/// a language model's token inputs (array of the inputs' names: ids,
/// labels), set by autodiff;
constexpr llvm::StringLiteral kDataInputsAttr = "dgraph.data_inputs";
/// its vocabulary (i64: the classes of its only cross-entropy), by autodiff;
constexpr llvm::StringLiteral kVocabSizeAttr = "dgraph.vocab_size";
/// the optimizer that updates the parameters ("adamw" or "sgd"), by
/// dtcc-graph-optimizer: a module with it is a complete training step;
constexpr llvm::StringLiteral kOptimizerAttr = "dgraph.optimizer";
/// the compute type of mixed precision ("bf16" or "fp16"), by
/// dtcc-graph-mixed-precision.
constexpr llvm::StringLiteral kDtypeAttr = "dgraph.dtype";
/// On a variable: it starts as the named variable's initial value rounded
/// to its own type (FlatSymbolRefAttr): the half-precision copy of an fp32
/// master weight (dtcc-shard-annotate, ZeRO-1/2), which the runtime fills
/// from the master's data when the program is loaded.
constexpr llvm::StringLiteral kRoundedFromAttr = "dgraph.rounded_from";
/// What the backward pass recomputes (a string: the mode, the layers and
/// the ops per function), by autodiff and dtcc-graph-recompute-layers; the
/// program carries it to `dtcc explain`.
constexpr llvm::StringLiteral kRecomputedAttr = "dgraph.recomputed";
/// Which attention cores dtcc-graph-fuse-attention made dgraph.attention
/// ops, and why the others stayed (a string); the program carries it to
/// `dtcc explain`.
constexpr llvm::StringLiteral kFusedAttentionAttr = "dgraph.fused_attention";
/// On the module, from the ONNX importer when training: the names of the
/// initializers that became constants rather than variables (integer and
/// bool tensors), an array of strings. They are not trainable anyway, so
/// autodiff's `frozen` may name them (a model's named_buffers() includes
/// integer buffers such as BERT's position_ids); autodiff removes it.
constexpr llvm::StringLiteral kConstantInitializersAttr =
    "dgraph.constant_initializers";
/// The parameters autodiff found no gradient path to the loss from (an
/// array of variable names), made non-trainable as PyTorch's optimizers skip
/// a parameter whose .grad is None; the program carries it to `dtcc explain`.
constexpr llvm::StringLiteral kUntrainedAttr = "dgraph.untrained";

/// The #dgraph.layer of `op`; null when it has none.
LayerAttr layerOf(mlir::Operation *op);
/// The layer (repeated block) index of `op`; std::nullopt outside layers.
std::optional<int64_t> layerIndexOf(mlir::Operation *op);
/// The top-level module of `op`; empty when it belongs to none.
llvm::StringRef moduleOf(mlir::Operation *op);
/// Gives `to` the layer of `from` (nothing when `from` has none, or when
/// `to` has one already).
void inheritLayer(mlir::Operation *from, mlir::Operation *to);

/// The FLOPs of `op` at its own shapes (CostOpInterface; 0 for ops without
/// it, whose time is the bytes they move).
double flopsOf(mlir::Operation *op);

/// Whether an op that reads elements of type `element` may take or give
/// `other` in their place: the same type, or f32 for f16 and bf16 (a kernel
/// that reads a half tensor as its exact f32 cast: sum_squares, adamw's
/// gradient, cross_entropy's loss; dtcc-fold-narrow-reads).
bool isSameOrF32OfHalf(mlir::Type element, mlir::Type other);

/// Returns an i1 tensor type with the shape of `type` (a ranked tensor).
mlir::Type getI1TensorLike(mlir::Type type);

/// `value` in every element of `type` (a float or integer tensor).
mlir::DenseElementsAttr splatOf(mlir::RankedTensorType type, double value);

/// The ONNX node name a location carries (NameLoc, possibly fused); empty
/// when it has none.
std::string nodeName(mlir::Location loc);
/// The metadata of a FusedLoc whose op stands for several ops (one
/// collective for a layer's, dtcc-shard-bucket): nodeName lists every
/// node, ", "-separated, instead of the first.
inline constexpr llvm::StringLiteral kJoinedNodesLoc = "dtcc.joined";

/// The batch dimensions of a matmul of operands of shapes `lhs` and `rhs`
/// (all but their last two dimensions): NumPy's broadcast, aligned from the
/// right, a missing or size-1 dimension taking the other side's size.
/// std::nullopt when a pair differs and neither is 1.
std::optional<llvm::SmallVector<int64_t>>
broadcastBatchShape(llvm::ArrayRef<int64_t> lhs, llvm::ArrayRef<int64_t> rhs);
} // namespace dtcc::graph

#define GET_OP_CLASSES
#include "dialects/Graph/IR/GraphOps.h.inc"

#endif // DTCC_DIALECTS_GRAPH_IR_GRAPHOPS_H
