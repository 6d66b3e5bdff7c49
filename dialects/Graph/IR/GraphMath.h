//===- GraphMath.h - accurate compositions of dgraph ops --------*- C++ -*-===//
//
// Functions dgraph has no op for, composed of its elementwise ops so that
// every backend and the autodiff take them as they are, with their rounding
// as small as the composition allows. The importers and the canonicalizer
// build them alike.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_DIALECTS_GRAPH_IR_GRAPHMATH_H
#define DTCC_DIALECTS_GRAPH_IR_GRAPHMATH_H

#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLFunctionalExtras.h"

namespace dtcc::graph {

/// Sees each op a builder below makes (the canonicalizer copies the
/// replaced op's attributes onto them).
using OnBuilt = llvm::function_ref<void(mlir::Operation *)>;

/// log(1 + u) for a float tensor u in [0, 1], within a few ulp of the
/// result even where u is below the rounding of 1 + u (where log(1 + u)
/// alone is 0 or off by that rounding relative to u): log(w) - ((w - 1) -
/// u) / w with w = 1 + u rounded, the second term the rounding error of w
/// (w - 1 and the difference are exact there, Sterbenz), divided by w as
/// log's derivative. No select: its gradient is 1 / w plus that term's.
mlir::Value buildLog1p(mlir::OpBuilder &b, mlir::Location loc, mlir::Value u,
                       OnBuilt onBuilt = {});

/// softplus(x) = log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)): no
/// overflow for a large x, and for a very negative x exp(x) itself (as
/// PyTorch's log1p(exp(x))), where log(1 + exp(x)) rounds to 0.
mlir::Value buildSoftplus(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x,
                          OnBuilt onBuilt = {});

} // namespace dtcc::graph

#endif // DTCC_DIALECTS_GRAPH_IR_GRAPHMATH_H
