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

#include "mlir/IR/Value.h"

namespace dtcc::shard {

/// The axes assigned to each factor of a rule (empty: not split), and the
/// number of blocks each split factor is viewed as (a fused projection's
/// output split per part: 3 for Q, K and V), 1 when it splits contiguously.
struct FactorAxes {
  llvm::SmallVector<llvm::SmallVector<mlir::StringAttr, 2>> axes;
  llvm::SmallVector<int64_t> groups;

  void resize(size_t n) {
    axes.resize(n);
    groups.resize(n, 1);
  }
  void clear(size_t f) {
    axes[f].clear();
    groups[f] = 1;
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

/// Assigns axes to factors from the known shardings of an op's tensors
/// (`shardings` lists operands then results; null = unknown). A factor takes
/// the axes of the first tensor dimension that splits it; factors of kind
/// kReplicated, axes already used by another factor and splits that do not
/// divide the factor are ignored. With `weakAxis`, splits along that axis
/// coming from `weakTensors` are considered last (ZeRO's storage sharding
/// of parameters must not outrank the batch sharding of activations).
void assignFactors(const graph::ShardingRule &rule,
                   llvm::ArrayRef<ShardingAttr> shardings, MeshAttr mesh,
                   FactorAxes &axes, llvm::ArrayRef<bool> weakTensors = {},
                   mlir::StringAttr weakAxis = {});

/// The sharding of a tensor with factors `tensor` under `axes`. For a result
/// (`isResult`), split reduction factors absent from it make it partial.
ShardingAttr project(const graph::ShardingRule &rule,
                     const graph::ShardingRule::TensorFactors &tensor,
                     const FactorAxes &axes, bool isResult,
                     mlir::MLIRContext *ctx);

/// Parses "dp=2,pp=1,tp=4" into a mesh; the error names the bad entry.
mlir::FailureOr<MeshAttr> parseMesh(llvm::StringRef spec,
                                    mlir::MLIRContext *ctx, std::string &error);

/// The product of the sizes of `axes` on `mesh`.
int64_t axesSize(MeshAttr mesh, llvm::ArrayRef<mlir::StringAttr> axes);

} // namespace dtcc::shard

#endif // DTCC_PASSES_SHARDING_SHARDINGUTILS_H
