//===- ShardingUtils.h - factors, projections and shardings of values -*- C++ -*-===//
//
// Shared by propagation and partitioning: where a value's sharding is
// recorded, how an op's factor shardings follow from the shardings of its
// tensors, and how factor shardings project back onto tensors.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_PASSES_SHARDING_SHARDINGUTILS_H
#define DTCC_PASSES_SHARDING_SHARDINGUTILS_H

#include "dialects/Graph/IR/GraphOps.h"
#include "dialects/Shard/IR/ShardOps.h"
#include "runtime/base/MeshShape.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/IR/Value.h"

namespace dtcc::shard {

/// The axes assigned to each factor of a rule (empty: not split), and the
/// number of blocks each split factor is viewed as (a fused projection's
/// output split per part: 3 for Q, K and V), 1 when it splits contiguously.
struct FactorAxes {
  llvm::SmallVector<llvm::SmallVector<mlir::StringAttr, 2>> axes;
  llvm::SmallVector<int64_t> groups;
  /// Whether the factor's tp split comes from a sequence-parallel split
  /// (which yields to any other use of tp).
  llvm::SmallVector<bool> sequence;

  void resize(size_t n) {
    axes.resize(n);
    groups.resize(n, 1);
    sequence.resize(n, false);
  }
  void clear(size_t f) {
    axes[f].clear();
    groups[f] = 1;
    sequence[f] = false;
  }
  bool uses(mlir::StringAttr axis) const {
    for (const auto &list : axes)
      if (llvm::is_contained(list, axis))
        return true;
    return false;
  }
};

/// The sharding recorded for `value` (an op result's `dshard.shardings`
/// entry, a function argument's `dshard.sharding`), or null.
ShardingAttr getSharding(mlir::Value value);
/// Records `sharding` for `value`.
void setSharding(mlir::Value value, ShardingAttr sharding);

/// The variable `value` loads, or null when it is not a load. A pass that
/// asks for many loads passes its `symbols` (a module's symbol lookup
/// without a table walks every op: a deep pipeline's module holds
/// thousands of variables).
graph::VariableOp loadedVariable(mlir::Value value,
                                 mlir::SymbolTableCollection *symbols = nullptr);
/// Whether `value` is a load of a variable split by ZeRO (`dshard.zero`: its
/// dp split is storage; a parameter's is gathered before each use, or once
/// a step with `dshard.gather_once`).
bool loadsZeroVariable(mlir::Value value,
                       mlir::SymbolTableCollection *symbols = nullptr);
/// Whether `value` is a load of a ZeRO-1/2 parameter, gathered once a step
/// (`dshard.gather_once`).
bool loadsGatherOnceVariable(mlir::Value value,
                             mlir::SymbolTableCollection *symbols = nullptr);
/// Whether some variable of `module` is split over mesh axis `axis` (its
/// `dshard.sharding` uses it).
bool splitsVariableOver(mlir::ModuleOp module, llvm::StringRef axis);
/// `s` without its splits over `axis` (its partial sums kept).
ShardingAttr withoutAxis(ShardingAttr s, llvm::StringRef axis);
/// `s` without its splits over dp (ZeRO's axis).
ShardingAttr withoutDp(ShardingAttr s);

/// The first op of the block that uses `v` (dshard.wait aside when
/// `skipWaits`), or null.
mlir::Operation *firstUser(mlir::Value v, bool skipWaits = false);

/// Whether `dense` is a splat of zero (either sign, float or integer): a
/// partial sum over any axes, and what a pad may add to one.
bool isSplatZero(mlir::DenseElementsAttr dense);

/// Assigns axes to factors from the known shardings of an op's tensors
/// (`shardings` lists operands then results; null = unknown). A factor takes
/// the axes of the first tensor dimension that splits it; factors of kind
/// kReplicated, axes already used by another factor and splits that do not
/// divide the factor are ignored. With `weakAxis`, splits along that axis
/// coming from `weakTensors` are considered last (ZeRO's storage sharding
/// of parameters must not outrank the batch sharding of activations).
/// Tensors marked in `sequenceTensors` are sequence-parallel activations:
/// their split over `tp` is considered after every other split too and
/// yields to any other use of tp (a matmul whose weight is split over tp
/// gathers them), while their other axes (dp) still apply; the factors it
/// splits are marked in `axes.sequence`.
void assignFactors(const graph::ShardingRule &rule,
                   llvm::ArrayRef<ShardingAttr> shardings, MeshAttr mesh,
                   FactorAxes &axes, llvm::ArrayRef<bool> weakTensors = {},
                   mlir::StringAttr weakAxis = {},
                   llvm::ArrayRef<bool> sequenceTensors = {});

/// The sharding of a tensor with factors `tensor` under `axes`. For a result
/// (`isResult`), split reduction factors absent from it make it partial.
ShardingAttr project(const graph::ShardingRule &rule,
                     const graph::ShardingRule::TensorFactors &tensor,
                     const FactorAxes &axes, bool isResult,
                     mlir::MLIRContext *ctx);

/// What propagation records for one op: the sharding each operand is
/// required in, each result's, and the axes its factors took.
struct OpShardings {
  llvm::SmallVector<ShardingAttr> ins, outs;
  FactorAxes axes;
  /// Per result: whether its tp split is a sequence-parallel split.
  llvm::SmallVector<bool> sequenceResults;
};

/// Propagation's step for one op (dtcc-shard-propagate): its factors take
/// the axes of `operands` (the shardings its operands arrive in), its
/// operands are required in the projections and its results get them,
/// partial where a split reduction factor or a partial sum passing through
/// makes them so. `zeroStorage` marks operands that are ZeRO-split
/// parameters (their dp split yields), `soleReader` operands whose every
/// user is `op` (only those pass a partial sum on), `sequenceSplit`
/// operands that are sequence-parallel activations (their tp split yields:
/// assignFactors). Fails with an error at the op when its rule does not
/// match it.
mlir::FailureOr<OpShardings> propagateOp(graph::ShardableOpInterface op,
                                         llvm::ArrayRef<ShardingAttr> operands,
                                         llvm::ArrayRef<bool> zeroStorage,
                                         llvm::ArrayRef<bool> soleReader,
                                         MeshAttr mesh,
                                         llvm::ArrayRef<bool> sequenceSplit = {});

/// A float cast to a wider type (mixed precision's bf16 -> f32 in the
/// backward pass).
bool isWideningCast(mlir::Operation *op);

/// Whether a partial sum passes through `op` when the operands marked in
/// `partialOperands` are partial: ops linear in them (add and sub of
/// equally partial values, mul and matmul with one partial operand, div of
/// a partial numerator, neg, reshapes, transposes, broadcasts, reduce_sum,
/// float casts).
bool partialPassesThrough(mlir::Operation *op,
                          llvm::ArrayRef<bool> partialOperands);

/// One step of bringing a value from one sharding to another.
struct ReshardStep {
  enum class Kind {
    kReduceScatter, ///< a partial sum, scattered onto `dim`
    kAllReduce,     ///< a partial sum, made whole
    kAllGather,     ///< `axis` no longer splits `dim`
    kSlice,         ///< `axis` splits `dim` further: local, no communication
  };
  Kind kind;
  mlir::StringAttr axis;
  int64_t dim = -1;   ///< not for kAllReduce
  int64_t groups = 1; ///< `dim` is that many blocks, each split alike
  /// The value's sharding before and after the step.
  ShardingAttr before, after;
};

/// The steps dtcc-shard-partition takes from `from` to `to`, in order:
/// partial axes reduce-scattered onto a dimension the target splits next
/// by them (else all-reduced); then, per dimension, the axes the target
/// does not split it by gathered, innermost first; then the axes the
/// target adds sliced. The layout search prices exactly these. Fails when
/// `to` is partial over an axis `from` is not (nothing makes a partial sum).
mlir::FailureOr<llvm::SmallVector<ReshardStep>>
planReshard(ShardingAttr from, ShardingAttr to);

/// The mesh attribute of a parsed mesh (runtime/base/MeshShape.h, the one
/// parser of "dp=2,tp=4"), axes in the same rank order.
MeshAttr meshAttr(const runtime::MeshShape &shape, mlir::MLIRContext *ctx);

/// The product of the sizes of `axes` on `mesh`.
int64_t axesSize(MeshAttr mesh, llvm::ArrayRef<mlir::StringAttr> axes);

/// Gives every fp32 master weight that the step reads only through casts
/// to one half type a persistent copy `W/half` of that type, which the
/// casts become loads of and the update rounds its new value into
/// (HalfWeightCopies.cpp). `symbols` is the module's table; the copies are
/// entered in it.
void keepHalfWeightCopies(mlir::ModuleOp module, mlir::SymbolTable &symbols);

} // namespace dtcc::shard

#endif // DTCC_PASSES_SHARDING_SHARDINGUTILS_H
