//===- FoldOptimizerInputs.cpp - gradients read without casts -------------===//
//
// The optimizer step reads each gradient three times under mixed precision:
// a cast to f32, a squared copy for the clipping norm and its sum, and the
// update. This pass (Passes.td, dtcc-fold-optimizer-inputs) folds the
// squaring into dgraph.sum_squares and lets sum_squares and adamw read the
// narrow gradient, so that each gradient is read twice and written never.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Passes.h"

#include "dialects/Graph/IR/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"

namespace dtcc::lowering {
#define GEN_PASS_DEF_FOLDOPTIMIZERINPUTS
#include "passes/Lowering/Passes.h.inc"
} // namespace dtcc::lowering

using namespace mlir;
using namespace dtcc;

namespace {

/// The bf16 or f16 tensor `v` is an exact f32 cast of, or null.
Value narrowSource(Value v) {
  auto cast = v.getDefiningOp<graph::CastOp>();
  if (!cast)
    return Value();
  auto to = cast.getType().getElementType();
  auto from = cast.getOperand().getType().getElementType();
  if (!to.isF32() || !(from.isBF16() || from.isF16()))
    return Value();
  return cast.getOperand();
}

/// reduce_sum(mul(x, x)) over every dimension, the product used only there:
/// sum_squares of x, or of the narrow tensor x is a cast of. Returns the x
/// it no longer reads through the product (null: nothing folded).
Value foldSquares(graph::ReduceSumOp sum) {
  auto mul = sum.getOperand().getDefiningOp<graph::MulOp>();
  if (!mul || mul.getLhs() != mul.getRhs() || !mul->hasOneUse())
    return Value();
  auto type = cast<RankedTensorType>(mul.getType());
  if ((int64_t)sum.getDims().size() != type.getRank() ||
      !isa<FloatType>(type.getElementType()))
    return Value();
  Value x = mul.getLhs(), read = x;
  if (Value narrow = narrowSource(x))
    read = narrow;
  OpBuilder b(sum);
  auto squares = graph::SumSquaresOp::create(b, sum.getLoc(), sum.getType(),
                                             read, sum.getDimsAttr());
  sum.getResult().replaceAllUsesWith(squares.getResult());
  sum.erase();
  mul.erase();
  return x;
}

/// adamw's gradient: the narrow tensor it is a cast of. Returns the cast
/// gradient it no longer reads (null: nothing folded).
Value foldAdamwGrad(graph::AdamwOp adam) {
  if (!adam.getParam().getType().getElementType().isF32())
    return Value();
  Value grad = adam.getGrad();
  Value narrow = narrowSource(grad);
  if (!narrow)
    return Value();
  adam.getGradMutable().assign(narrow);
  return grad;
}

struct FoldOptimizerInputsPass
    : lowering::impl::FoldOptimizerInputsBase<FoldOptimizerInputsPass> {
  void runOnOperation() override {
    SmallVector<graph::ReduceSumOp> sums;
    SmallVector<graph::AdamwOp> updates;
    getOperation().walk([&](Operation *op) {
      if (auto s = dyn_cast<graph::ReduceSumOp>(op))
        sums.push_back(s);
      else if (auto a = dyn_cast<graph::AdamwOp>(op))
        updates.push_back(a);
    });
    // The casts the folds stopped reading, erased once nothing does.
    llvm::SetVector<Operation *> casts;
    auto noteCast = [&](Value v) {
      if (auto c = v ? v.getDefiningOp<graph::CastOp>() : nullptr)
        casts.insert(c);
    };
    for (graph::ReduceSumOp s : sums)
      noteCast(foldSquares(s));
    for (graph::AdamwOp a : updates)
      noteCast(foldAdamwGrad(a));
    for (Operation *c : casts)
      if (c->use_empty())
        c->erase();
  }
};

} // namespace
