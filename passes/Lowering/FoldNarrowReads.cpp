//===- FoldNarrowReads.cpp - half tensors read without their casts --------===//
//
// Mixed precision keeps the optimizer step and the loss in f32, so a step
// casts every half-precision gradient and the logits to f32 copies (and the
// logits' gradient back). This pass (Passes.td, dtcc-fold-narrow-reads)
// lets the kernels read the narrow tensors themselves: the optimizer reads
// each gradient twice and writes it never (the clipping norm's squares
// folded into dgraph.sum_squares), and the cross-entropy and its gradient
// read the narrow logits, the gradient written narrow.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Passes.h"

#include "dialects/Graph/IR/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"

namespace dtcc::lowering {
#define GEN_PASS_DEF_FOLDNARROWREADS
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

/// `operand` reads the narrow tensor its value is a cast of (its op widens
/// what it reads). Returns the cast value it no longer reads (null:
/// nothing folded).
Value readNarrow(OpOperand &operand) {
  Value wide = operand.get();
  Value narrow = narrowSource(wide);
  if (!narrow)
    return Value();
  operand.set(narrow);
  return wide;
}

/// adamw's gradient of an f32 parameter: the narrow tensor it is a cast
/// of.
Value foldAdamwGrad(graph::AdamwOp adam) {
  if (!adam.getParam().getType().getElementType().isF32())
    return Value();
  return readNarrow(adam.getGradMutable());
}

/// The cross-entropy of a cast of narrow logits: of the narrow logits, its
/// loss still f32.
Value foldCrossEntropy(graph::CrossEntropyOp ce) {
  return readNarrow(ce.getLogitsMutable());
}

/// cast(cross_entropy_grad(cast(x), labels, dloss)) to x's type, the
/// gradient read by that cast only: cross_entropy_grad(x, labels, dloss)
/// of x's type (its f32 value rounded once, as the cast rounded it).
/// Returns the cast logits it no longer reads (null: nothing folded).
Value foldCrossEntropyGrad(graph::CastOp back) {
  auto grad = back.getOperand().getDefiningOp<graph::CrossEntropyGradOp>();
  if (!grad || !grad->hasOneUse())
    return Value();
  Value logits = grad.getLogits();
  Value narrow = narrowSource(logits);
  if (!narrow || narrow.getType() != back.getType())
    return Value();
  OpBuilder b(back);
  auto folded = graph::CrossEntropyGradOp::create(
      b, grad.getLoc(), back.getType(), narrow, grad.getLabels(),
      grad.getDloss(), grad.getIgnoreIndexAttr());
  folded->setDiscardableAttrs(grad->getDiscardableAttrDictionary());
  back.getResult().replaceAllUsesWith(folded.getResult());
  back.erase();
  grad.erase();
  return logits;
}

struct FoldNarrowReadsPass
    : lowering::impl::FoldNarrowReadsBase<FoldNarrowReadsPass> {
  void runOnOperation() override {
    SmallVector<graph::ReduceSumOp> sums;
    SmallVector<graph::AdamwOp> updates;
    SmallVector<graph::CrossEntropyOp> losses;
    SmallVector<graph::CastOp> lossGrads;
    getOperation().walk([&](Operation *op) {
      if (auto s = dyn_cast<graph::ReduceSumOp>(op))
        sums.push_back(s);
      else if (auto a = dyn_cast<graph::AdamwOp>(op))
        updates.push_back(a);
      else if (auto ce = dyn_cast<graph::CrossEntropyOp>(op))
        losses.push_back(ce);
      else if (auto c = dyn_cast<graph::CastOp>(op);
               c && c.getOperand().getDefiningOp<graph::CrossEntropyGradOp>())
        lossGrads.push_back(c);
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
    for (graph::CrossEntropyOp ce : losses)
      noteCast(foldCrossEntropy(ce));
    for (graph::CastOp c : lossGrads)
      noteCast(foldCrossEntropyGrad(c));
    for (Operation *c : casts)
      if (c->use_empty())
        c->erase();
  }
};

} // namespace
