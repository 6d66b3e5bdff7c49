//===- GraphCanonicalize.cpp - rewrite patterns of dgraph ops
//--------------===//
//
// Canonicalizations that matter for exported models: transposes and batch
// broadcasts folded into matrix products (Linear layers export W^T; an
// Expand before a MatMul becomes the matmul's own broadcast), the elementwise
// decompositions exporters write for GELU and SiLU fused back into one op,
// powers by small integer constants as products, and sums of zero pads
// that tile a tensor (slices' gradients) joined, the logs of sigmoids
// that exporters write for log-sigmoid and BCE-with-logits made stable, and
// reductions over dimensions of size 1 made reshapes.
//
//===----------------------------------------------------------------------===//

#include "dialects/Graph/IR/GraphMath.h"
#include "dialects/Graph/IR/GraphOps.h"

#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"

#include <cmath>

using namespace mlir;
using namespace dtcc::graph;

namespace {

/// Replaces `op` by a new OpTy that keeps `op`'s discardable attributes: what
/// passes recorded on it (a pipeline's micro-batch and pass tags, shardings)
/// survives a canonicalization between them.
template <typename OpTy, typename... Args>
void replaceKeepingAttrs(PatternRewriter &rewriter, Operation *op,
                         Args &&...args) {
  SmallVector<NamedAttribute> kept(op->getDiscardableAttrs());
  auto replacement =
      rewriter.replaceOpWithNewOp<OpTy>(op, std::forward<Args>(args)...);
  for (NamedAttribute a : kept)
    if (!replacement->hasAttr(a.getName()))
      replacement->setAttr(a.getName(), a.getValue());
}

/// Gives `to` each discardable attribute of `from` that it lacks.
void keepAttrs(Operation *from, Operation *to) {
  for (NamedAttribute a : from->getDiscardableAttrs())
    if (!to->hasAttr(a.getName()))
      to->setAttr(a.getName(), a.getValue());
}

/// A new OpTy before `op`, at its location, that carries `op`'s discardable
/// attributes (as replaceKeepingAttrs): one of several ops replacing it.
template <typename OpTy, typename... Args>
Value createKeepingAttrs(PatternRewriter &rewriter, Operation *op,
                         Args &&...args) {
  auto made = OpTy::create(rewriter, op->getLoc(), std::forward<Args>(args)...);
  keepAttrs(op, made);
  return made;
}

/// Whether `perm` swaps the last two dimensions and keeps the others.
bool swapsLastTwo(ArrayRef<int64_t> perm) {
  int64_t n = perm.size();
  if (n < 2 || perm[n - 1] != n - 2 || perm[n - 2] != n - 1)
    return false;
  for (int64_t i = 0; i < n - 2; ++i)
    if (perm[i] != i)
      return false;
  return true;
}

/// matmul(transpose(a), b) -> matmul(a, b) {transpose_lhs}, and likewise for
/// the rhs, when the transpose swaps the last two dimensions.
struct FoldTransposeIntoMatmul : OpRewritePattern<MatmulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MatmulOp op,
                                PatternRewriter &rewriter) const override {
    Value lhs = op.getLhs(), rhs = op.getRhs();
    bool tl = op.getTransposeLhs(), tr = op.getTransposeRhs();
    bool changed = false;
    if (auto t = lhs.getDefiningOp<TransposeOp>(); t && swapsLastTwo(t.getPerm())) {
      lhs = t.getOperand();
      tl = !tl;
      changed = true;
    }
    if (auto t = rhs.getDefiningOp<TransposeOp>(); t && swapsLastTwo(t.getPerm())) {
      rhs = t.getOperand();
      tr = !tr;
      changed = true;
    }
    if (!changed)
      return failure();
    replaceKeepingAttrs<MatmulOp>(rewriter, op, op.getType(), lhs, rhs, tl, tr);
    return success();
  }
};

/// The operand of a broadcast_in_dim that only adds or repeats batch
/// dimensions NumPy-style (aligned from the right, the last two kept), the
/// value itself otherwise.
Value batchBroadcastSource(Value v) {
  auto bcast = v.getDefiningOp<BroadcastInDimOp>();
  if (!bcast)
    return v;
  auto in = cast<RankedTensorType>(bcast.getOperand().getType());
  auto out = cast<RankedTensorType>(bcast.getType());
  int64_t ri = in.getRank(), ro = out.getRank();
  if (ri < 2)
    return v;
  for (auto [i, d] : llvm::enumerate(bcast.getDims()))
    if (d != ro - ri + int64_t(i))
      return v;
  if (in.getShape().take_back(2) != out.getShape().take_back(2))
    return v;
  return bcast.getOperand();
}

/// matmul(broadcast_in_dim(a), b) -> matmul(a, b), and likewise for the rhs,
/// when the broadcast only expands batch dimensions that the matmul's own
/// broadcasting expands to the same result: kernels then read the operand
/// with batch stride 0 instead of a materialized copy.
struct FoldBatchBroadcastIntoMatmul : OpRewritePattern<MatmulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MatmulOp op,
                                PatternRewriter &rewriter) const override {
    Value lhs = batchBroadcastSource(op.getLhs());
    Value rhs = batchBroadcastSource(op.getRhs());
    auto type = cast<RankedTensorType>(op.getType());
    auto keepsResult = [&](Value l, Value r) {
      auto batch =
          broadcastBatchShape(cast<RankedTensorType>(l.getType()).getShape(),
                              cast<RankedTensorType>(r.getType()).getShape());
      return batch && ArrayRef<int64_t>(*batch) == type.getShape().drop_back(2);
    };
    // Both broadcasts if the result stays, else either one.
    if (!keepsResult(lhs, rhs)) {
      if (lhs != op.getLhs() && keepsResult(lhs, op.getRhs()))
        rhs = op.getRhs();
      else
        lhs = op.getLhs();
    }
    if (!keepsResult(lhs, rhs) || (lhs == op.getLhs() && rhs == op.getRhs()))
      return failure();
    replaceKeepingAttrs<MatmulOp>(rewriter, op, op.getType(), lhs, rhs,
                                  op.getTransposeLhs(), op.getTransposeRhs());
    return success();
  }
};

/// Whether `v` is a splat constant equal to `value` (within `tolerance`).
bool isSplatNear(Value v, double value, double tolerance = 0) {
  DenseElementsAttr attr;
  if (!matchPattern(v, m_Constant(&attr)) || !attr.isSplat())
    return false;
  auto f = dyn_cast<FloatAttr>(attr.getSplatValue<Attribute>());
  return f && std::abs(f.getValueAsDouble() - value) <= tolerance;
}

/// x * 0.5 * (1 + erf(x / sqrt(2))), in any operand order -> gelu(x). This
/// is how torch.onnx.export writes nn.GELU before opset 20.
struct FuseErfGelu : OpRewritePattern<MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MulOp op,
                                PatternRewriter &rewriter) const override {
    // Shape 1: (x * (1 + erf)) * 0.5; shape 2: (x * 0.5) * (1 + erf).
    for (int half = 0; half < 2; ++half) {
      Value h = op->getOperand(half), rest = op->getOperand(1 - half);
      if (isSplatNear(h, 0.5)) {
        auto inner = rest.getDefiningOp<MulOp>();
        if (!inner)
          continue;
        for (int k = 0; k < 2; ++k)
          if (Value x = matchOnePlusErf(inner->getOperand(k));
              x && inner->getOperand(1 - k) == x)
            return replace(op, x, rewriter);
      } else if (auto scaled = h.getDefiningOp<MulOp>()) {
        // Constants sit on the right after canonicalization.
        if (!isSplatNear(scaled.getRhs(), 0.5))
          continue;
        Value x = scaled.getLhs();
        if (Value y = matchOnePlusErf(rest); y && y == x)
          return replace(op, x, rewriter);
      }
    }
    return failure();
  }

  /// 1 + erf(x / sqrt(2)) (or x * (1/sqrt(2))): returns x.
  static Value matchOnePlusErf(Value v) {
    auto add = v.getDefiningOp<AddOp>();
    if (!add)
      return {};
    for (int k = 0; k < 2; ++k) {
      if (!isSplatNear(add->getOperand(1 - k), 1.0))
        continue;
      auto erf = add->getOperand(k).getDefiningOp<ErfOp>();
      if (!erf)
        continue;
      Operation *scale = erf.getOperand().getDefiningOp();
      if (auto div = dyn_cast_or_null<DivOp>(scale);
          div && isSplatNear(div.getRhs(), std::sqrt(2.0), 1e-6))
        return div.getLhs();
      if (auto mul = dyn_cast_or_null<MulOp>(scale);
          mul && isSplatNear(mul.getRhs(), 1.0 / std::sqrt(2.0), 1e-6))
        return mul.getLhs();
    }
    return {};
  }

  LogicalResult replace(MulOp op, Value x, PatternRewriter &rewriter) const {
    if (x.getType() != op.getType())
      return failure();
    replaceKeepingAttrs<GeluOp>(rewriter, op, x, "none");
    return success();
  }
};

/// Float powers with the exponents 1, 2, 3 and -1 (a splat constant) ->
/// x, x * x, x * x * x and 1 / x, as PyTorch computes them: exporters
/// write x.pow(2) for RMS norms and variances, and its gradient is
/// 2 * x^1. A libm pow call per element costs ten multiplications, and
/// elementwise regions cannot vectorize it. Squares and reciprocals are the
/// correctly rounded results; the cube rounds twice.
struct PowBySmallConstant : OpRewritePattern<PowOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(PowOp op,
                                PatternRewriter &rewriter) const override {
    Value x = op.getLhs(), y = op.getRhs();
    if (!isa<FloatType>(getElementTypeOrSelf(op.getType())))
      return failure();
    if (isSplatNear(y, 1.0)) {
      rewriter.replaceOp(op, x);
      return success();
    }
    if (isSplatNear(y, 2.0)) {
      replaceKeepingAttrs<MulOp>(rewriter, op, x, x);
      return success();
    }
    if (isSplatNear(y, 3.0)) {
      Value square = createKeepingAttrs<MulOp>(rewriter, op, x, x);
      replaceKeepingAttrs<MulOp>(rewriter, op, square, x);
      return success();
    }
    if (isSplatNear(y, -1.0)) {
      replaceKeepingAttrs<ReciprocalOp>(rewriter, op, x);
      return success();
    }
    return failure();
  }
};

/// x * sigmoid(x) -> silu(x).
struct FuseSilu : OpRewritePattern<MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MulOp op,
                                PatternRewriter &rewriter) const override {
    for (int k = 0; k < 2; ++k) {
      auto sigmoid = op->getOperand(k).getDefiningOp<SigmoidOp>();
      if (sigmoid && sigmoid.getOperand() == op->getOperand(1 - k)) {
        replaceKeepingAttrs<SiluOp>(rewriter, op, sigmoid.getOperand());
        return success();
      }
    }
    return failure();
  }
};

/// A sum of zero-padded tensors whose operands tile the result along one
/// dimension in equal parts -> the operands joined (concat). Autodiff writes the gradient
/// of slices so (a fused QKV projection split in three: each part's gradient
/// padded to the whole and the three summed); joined, the step copies each
/// part once instead of filling a zero tensor per part and adding them. The
/// same numbers (a -0.0 stays -0.0 where the sum made it +0.0).
struct SumOfPadsToConcat : OpRewritePattern<AddOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(AddOp op,
                                PatternRewriter &rewriter) const override {
    auto type = dyn_cast<RankedTensorType>(op.getType());
    if (!type || !type.hasStaticShape() ||
        !isa<FloatType>(type.getElementType()))
      return failure();
    // The leaves of the tree of adds rooted at `op`, each a zero pad.
    SmallVector<PadOp> pads;
    SmallVector<Value> pending{op.getLhs(), op.getRhs()};
    while (!pending.empty()) {
      Value v = pending.pop_back_val();
      if (v.getType() != type || pads.size() > 64)
        return failure();
      if (auto add = v.getDefiningOp<AddOp>()) {
        pending.push_back(add.getLhs());
        pending.push_back(add.getRhs());
        continue;
      }
      auto pad = v.getDefiningOp<PadOp>();
      if (!pad || pad.getMode() != "constant" || !isSplatNear(pad.getValue(), 0))
        return failure();
      pads.push_back(pad);
    }
    // Every pad along one dimension, growing only.
    std::optional<int64_t> dim;
    for (PadOp pad : pads) {
      for (int64_t d = 0; d < type.getRank(); ++d) {
        int64_t low = pad.getLow()[d], high = pad.getHigh()[d];
        if (low < 0 || high < 0)
          return failure();
        if (low == 0 && high == 0)
          continue;
        if (dim && *dim != d)
          return failure();
        dim = d;
      }
    }
    if (!dim)
      return failure();
    // The operands, in order along it, cover it once, in equal parts (the
    // parts a concat's sharding rule splits alike, as the pads' does).
    llvm::sort(pads, [&](PadOp a, PadOp b) {
      return a.getLow()[*dim] < b.getLow()[*dim];
    });
    int64_t at = 0;
    const int64_t part =
        cast<RankedTensorType>(pads[0].getOperand().getType()).getDimSize(*dim);
    SmallVector<Value> parts;
    for (PadOp pad : pads) {
      if (pad.getLow()[*dim] != at ||
          cast<RankedTensorType>(pad.getOperand().getType()).getDimSize(*dim) !=
              part)
        return failure();
      at += part;
      parts.push_back(pad.getOperand());
    }
    if (at != type.getDimSize(*dim))
      return failure();
    replaceKeepingAttrs<ConcatOp>(rewriter, op, type, parts, *dim);
    return success();
  }
};

/// log(sigmoid(x)) -> -softplus(-x) and log(1 - sigmoid(x)) -> -softplus(x)
/// (buildSoftplus). torch.onnx.export writes F.logsigmoid and
/// BCEWithLogits so; in f32, 1 - sigmoid(x) rounds to 0 above x = 17 and
/// sigmoid(x) below about -88 to -104, where the log is -inf and its
/// gradient NaN, and log(sigmoid(x)) rounds to 0 above x = 17 where it is
/// -exp(-x). Here nothing overflows, and forward and gradient keep their
/// relative precision.
struct StableLogSigmoid : OpRewritePattern<LogOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(LogOp op,
                                PatternRewriter &rewriter) const override {
    Value v = op.getOperand();
    bool complement = false;
    if (auto sub = v.getDefiningOp<SubOp>(); sub && isSplatNear(sub.getLhs(), 1.0)) {
      v = sub.getRhs();
      complement = true;
    }
    auto sigmoid = v.getDefiningOp<SigmoidOp>();
    if (!sigmoid)
      return failure();
    // log(sigmoid(x)) = -softplus(-x); log(1 - sigmoid(x)) = -softplus(x).
    Value x = sigmoid.getOperand();
    Value arg = complement ? x : createKeepingAttrs<NegOp>(rewriter, op, x);
    Value softplus =
        buildSoftplus(rewriter, op.getLoc(), arg,
                      [&](Operation *made) { keepAttrs(op, made); });
    rewriter.replaceOp(op, createKeepingAttrs<NegOp>(rewriter, op, softplus));
    return success();
  }
};

/// A reduction over dimensions that all have size 1 reduces each element
/// alone: the elements in the same order, a reshape (no kernel pass over
/// the tensor). Autodiff writes such sums where a broadcast dimension has
/// size 1 (a positional embedding's gradient with micro-batches of one
/// sequence); after partitioning, a dimension split down to one element per
/// rank, whose sum over the ranks is the collective's.
template <typename ReduceOp>
struct ReduceOfUnitDims : OpRewritePattern<ReduceOp> {
  using OpRewritePattern<ReduceOp>::OpRewritePattern;
  LogicalResult matchAndRewrite(ReduceOp op,
                                PatternRewriter &rewriter) const override {
    auto type = cast<RankedTensorType>(op.getOperand().getType());
    ArrayRef<int64_t> dims = op.getDims();
    if (dims.empty() ||
        !llvm::all_of(dims, [&](int64_t d) { return type.getDimSize(d) == 1; }))
      return failure();
    replaceKeepingAttrs<ReshapeOp>(rewriter, op, op.getType(), op.getOperand());
    return success();
  }
};

} // namespace

void MatmulOp::getCanonicalizationPatterns(RewritePatternSet &patterns,
                                           MLIRContext *context) {
  patterns.add<FoldTransposeIntoMatmul, FoldBatchBroadcastIntoMatmul>(context);
}

void MulOp::getCanonicalizationPatterns(RewritePatternSet &patterns,
                                        MLIRContext *context) {
  patterns.add<FuseErfGelu, FuseSilu>(context);
}

void AddOp::getCanonicalizationPatterns(RewritePatternSet &patterns,
                                        MLIRContext *context) {
  patterns.add<SumOfPadsToConcat>(context);
}

void PowOp::getCanonicalizationPatterns(RewritePatternSet &patterns,
                                        MLIRContext *context) {
  patterns.add<PowBySmallConstant>(context);
}

void LogOp::getCanonicalizationPatterns(RewritePatternSet &patterns,
                                        MLIRContext *context) {
  patterns.add<StableLogSigmoid>(context);
}

void ReduceSumOp::getCanonicalizationPatterns(RewritePatternSet &patterns,
                                              MLIRContext *context) {
  patterns.add<ReduceOfUnitDims<ReduceSumOp>>(context);
}

void ReduceProdOp::getCanonicalizationPatterns(RewritePatternSet &patterns,
                                               MLIRContext *context) {
  patterns.add<ReduceOfUnitDims<ReduceProdOp>>(context);
}

void ReduceMaxOp::getCanonicalizationPatterns(RewritePatternSet &patterns,
                                              MLIRContext *context) {
  patterns.add<ReduceOfUnitDims<ReduceMaxOp>>(context);
}

void ReduceMinOp::getCanonicalizationPatterns(RewritePatternSet &patterns,
                                              MLIRContext *context) {
  patterns.add<ReduceOfUnitDims<ReduceMinOp>>(context);
}

//===----------------------------------------------------------------------===//
// GraphMath.h
//===----------------------------------------------------------------------===//

namespace dtcc::graph {

namespace {
template <typename OpTy, typename... Args>
Value built(OpBuilder &b, Location loc, OnBuilt onBuilt, Args &&...args) {
  Value v = b.createOrFold<OpTy>(loc, std::forward<Args>(args)...);
  if (Operation *op = v.getDefiningOp(); op && onBuilt)
    onBuilt(op);
  return v;
}

Value splatLike(OpBuilder &b, Location loc, OnBuilt onBuilt, Value like,
                double value) {
  auto made = ConstantOp::create(
      b, loc, splatOf(cast<RankedTensorType>(like.getType()), value));
  if (onBuilt)
    onBuilt(made);
  return made;
}
} // namespace

Value buildLog1p(OpBuilder &b, Location loc, Value u, OnBuilt onBuilt) {
  Value one = splatLike(b, loc, onBuilt, u, 1);
  Value w = built<AddOp>(b, loc, onBuilt, one, u);
  // The rounding error of w (w - 1 - u, exactly), relative to w.
  Value error =
      built<SubOp>(b, loc, onBuilt, built<SubOp>(b, loc, onBuilt, w, one), u);
  return built<SubOp>(b, loc, onBuilt, built<LogOp>(b, loc, onBuilt, w),
                      built<DivOp>(b, loc, onBuilt, error, w));
}

Value buildSoftplus(OpBuilder &b, Location loc, Value x, OnBuilt onBuilt) {
  Value negAbs =
      built<NegOp>(b, loc, onBuilt, built<AbsOp>(b, loc, onBuilt, x));
  Value tail =
      buildLog1p(b, loc, built<ExpOp>(b, loc, onBuilt, negAbs), onBuilt);
  return built<AddOp>(
      b, loc, onBuilt,
      built<MaxOp>(b, loc, onBuilt, x, splatLike(b, loc, onBuilt, x, 0)), tail);
}

} // namespace dtcc::graph
