//===- Recompute.h - which forward ops the backward pass recomputes -*- C++ -*-===//
//
// The recomputation choices autodiff and dtcc-graph-recompute-layers share:
// the attention cores of selective recomputation, found from the graph's
// structure, and the summary of what a module recomputes.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_PASSES_GRAPH_RECOMPUTE_H
#define DTCC_PASSES_GRAPH_RECOMPUTE_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallVector.h"

#include <string>

namespace dtcc::graph {

/// The attention cores among `forward` (ops in program order): for each
/// softmax whose input comes, through ops with one operand on the path
/// (scale, mask, select, cast, reshape), from a matmul of two activations
/// (Q·Kᵀ) and whose output reaches, the same way (dropout included), a
/// matmul with another activation (·V): every op on a path from the first
/// matmul to the second, in program order. An activation is a value in
/// `activations` (computed from the step's inputs), not a parameter or a
/// constant, so a dense layer's matmul never starts or ends a core.
/// Korthikanti et al. 2022's selective recomputation recomputes these.
llvm::SmallVector<llvm::SmallVector<mlir::Operation *>>
findAttentionCores(llvm::ArrayRef<mlir::Operation *> forward,
                   const llvm::DenseSet<mlir::Value> &activations);

/// One line saying what `module` recomputes: the plan's mode, then per
/// function the layers (#dgraph.layer index) with ops marked
/// dgraph.recompute and the kinds and counts of those ops, or "nothing".
std::string describeRecomputation(mlir::ModuleOp module);

/// Writes describeRecomputation(module) as the module's
/// `dgraph.recomputed` string, which the program carries to `dtcc explain`.
void recordRecomputation(mlir::ModuleOp module);

} // namespace dtcc::graph

#endif // DTCC_PASSES_GRAPH_RECOMPUTE_H
