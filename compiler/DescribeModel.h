//===- DescribeModel.h - the planner's model, read from the IR --*- C++ -*-===//
//
// Builds planner::ModelDesc from a dgraph module as imported: what every
// graph shows (parameters and their bytes, per-layer FLOPs by the dgraph
// cost interface, activation bytes, the batch) and, where the IR is a
// decoder-only transformer, its sizes (layers, hidden, heads, kv heads, ffn,
// vocabulary, sequence) read from the embedding table, the attention
// softmax and the matmul shapes. The planner reads no metadata.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_COMPILER_DESCRIBEMODEL_H
#define DTCC_COMPILER_DESCRIBEMODEL_H

#include "planner/Model.h"

#include "mlir/IR/BuiltinOps.h"

#include <string>
#include <vector>

namespace dtcc {

/// A model described from its IR.
struct DescribedModel {
  /// `model.graph` is always filled. `model.layers` > 0 when the graph is a
  /// transformer the planner's formulas price (its parameters are exactly
  /// those of a transformer of the sizes read); then every size is set.
  planner::ModelDesc model;
  /// Why the graph is not such a transformer (empty when it is), e.g. "no
  /// attention softmax in a layer".
  std::string notTransformer;
  bool isTransformer() const { return model.layers > 0; }
};

/// Describes the forward pass of `module`'s function (dgraph as imported,
/// before autodiff). Layers are the ops that graph::layerKey assigns to one;
/// a variable belongs to the layer of the ops that read it. `name` becomes
/// the description's name. Variables named in `frozen` are not parameters
/// (as `dtcc compile --train --frozen`: an export's masks and rotary
/// tables). flashAttention is set as for every GPU plan
/// (docs/planner.md, "Assumptions"); dropout is false (dgraph has no
/// dropout op: an export's dropout is gone by import).
DescribedModel describeModel(mlir::ModuleOp module, const std::string &name,
                             llvm::ArrayRef<std::string> frozen = {});

} // namespace dtcc

#endif // DTCC_COMPILER_DESCRIBEMODEL_H
