//===- GraphTrainingOps.cpp - verifiers of gradient and optimizer ops -----===//

#include "dialects/Graph/IR/GraphOps.h"

#include <cmath>

using namespace mlir;
using namespace dtcc::graph;

static LogicalResult verifyDimIn(Operation *op, int64_t dim, int64_t rank,
                                 StringRef what) {
  if (dim < 0 || dim >= rank)
    return op->emitOpError("expected ")
           << what << " in [0, " << rank << "), got " << dim;
  return success();
}

LogicalResult SoftmaxGradOp::verify() {
  return verifyDimIn(*this, getDim(), getType().getRank(), "dim");
}

LogicalResult LogSoftmaxGradOp::verify() {
  return verifyDimIn(*this, getDim(), getType().getRank(), "dim");
}

/// Shared by the normalization gradients: x/dy/dx agree, the parameter
/// gradients have scale's type x[axis:], the statistics have shape x[:axis].
/// The parameter gradients' ops have no scale and no dx (both null).
static LogicalResult verifyNormGrad(Operation *op, Value x, Value scale,
                                    ArrayRef<Value> stats, Value dy, Value dx,
                                    ArrayRef<Value> paramGrads, int64_t axis) {
  auto xt = cast<RankedTensorType>(x.getType());
  if (failed(verifyDimIn(op, axis, xt.getRank(), "axis")))
    return failure();
  if (dy.getType() != xt || (dx && dx.getType() != xt))
    return op->emitOpError(dx ? "expected dy and dx of type "
                              : "expected dy of type ")
           << xt;
  auto st = RankedTensorType::get(xt.getShape().drop_front(axis),
                                  xt.getElementType());
  if (scale) {
    auto given = cast<RankedTensorType>(scale.getType());
    if (given.getShape() != st.getShape() ||
        given.getElementType() != st.getElementType())
      return op->emitOpError("expected scale of shape x[axis:], got ") << given;
    st = given;
  }
  for (Value g : paramGrads)
    if (g.getType() != st)
      return op->emitOpError("expected parameter gradients of type ") << st;
  for (Value s : stats) {
    auto t = cast<RankedTensorType>(s.getType());
    if (t.getShape() != xt.getShape().take_front(axis))
      return op->emitOpError("expected statistics of shape x[:axis], got ")
             << t;
  }
  return success();
}

LogicalResult AdamwOp::verify() {
  Type p = getParam().getType().getElementType(),
       g = getGrad().getType().getElementType();
  if (isSameOrF32OfHalf(g, p))
    return success();
  return emitOpError("expected a gradient of element type ")
         << p << (p.isF32() ? " (or bf16, f16)" : "") << ", got " << g;
}

LogicalResult SumSquaresOp::verify() {
  auto in = getOperand().getType();
  auto out = getResult().getType();
  llvm::SmallVector<bool> reduced(in.getRank(), false);
  for (int64_t d : getDims()) {
    if (d < 0 || d >= in.getRank() || reduced[d])
      return emitOpError("expected distinct dims in [0, ")
             << in.getRank() << "), got " << d;
    reduced[d] = true;
  }
  llvm::SmallVector<int64_t> shape;
  for (int64_t d = 0; d < in.getRank(); ++d)
    if (!reduced[d])
      shape.push_back(in.getDimSize(d));
  if (out.getShape() != ArrayRef<int64_t>(shape))
    return emitOpError("expected a result of the operand's shape without "
                       "dims, got ")
           << out;
  Type ie = in.getElementType(), oe = out.getElementType();
  if (!isSameOrF32OfHalf(ie, oe))
    return emitOpError("expected a result of element type ")
           << ie << (ie.isBF16() || ie.isF16() ? " or f32" : "") << ", got "
           << oe;
  return success();
}

LogicalResult GlobalSumSquaresOp::verify() {
  if (getOperands().empty())
    return emitOpError("expected at least one operand");
  auto out = cast<RankedTensorType>(getResult().getType());
  bool wide = cast<RankedTensorType>(getOperands().front().getType())
                  .getElementType()
                  .isF64();
  for (Value v : getOperands())
    if (cast<RankedTensorType>(v.getType()).getElementType().isF64() != wide)
      return emitOpError("expected f64 operands only or none");
  if (out.getRank() != 0 ||
      out.getElementType() != (wide ? Type(Float64Type::get(getContext()))
                                    : Type(Float32Type::get(getContext()))))
    return emitOpError("expected a result of type ")
           << (wide ? "tensor<f64>" : "tensor<f32>") << ", got " << out;
  return success();
}

LogicalResult LayerNormGradOp::verify() {
  return verifyNormGrad(*this, getX(), getScale(), {getMean(), getRstd()},
                        getDy(), getDx(), {getDscale(), getDbias()}, getAxis());
}

LogicalResult RmsNormGradOp::verify() {
  return verifyNormGrad(*this, getX(), getScale(), {getRstd()}, getDy(),
                        getDx(), {getDscale()}, getAxis());
}

LogicalResult LayerNormParamGradOp::verify() {
  return verifyNormGrad(*this, getX(), Value(), {getMean(), getRstd()}, getDy(),
                        Value(), {getDscale(), getDbias()}, getAxis());
}

LogicalResult RmsNormParamGradOp::verify() {
  return verifyNormGrad(*this, getX(), Value(), {getRstd()}, getDy(), Value(),
                        {getDscale()}, getAxis());
}

LogicalResult MatmulBiasOp::verify() {
  SmallVector<Type> inferred;
  MatmulOp::Properties props;
  if (getTransposeLhs())
    props.transpose_lhs = UnitAttr::get(getContext());
  if (getTransposeRhs())
    props.transpose_rhs = UnitAttr::get(getContext());
  if (failed(MatmulOp::inferReturnTypes(
          getContext(), getLoc(), ValueRange{getLhs(), getRhs()},
          DictionaryAttr(), &props, {}, inferred)))
    return failure();
  auto result = cast<RankedTensorType>(getType());
  if (inferred.front() != result)
    return emitOpError("expected the product's type ")
           << inferred.front() << ", got " << result;
  auto bias = cast<RankedTensorType>(getBias().getType());
  if (bias.getRank() != 1 || bias.getDimSize(0) != result.getShape().back() ||
      bias.getElementType() != result.getElementType())
    return emitOpError("expected a bias of type ")
           << RankedTensorType::get({result.getShape().back()},
                                    result.getElementType())
           << ", got " << bias;
  return success();
}

LogicalResult MatmulBiasGradOp::verify() {
  auto lhs = cast<RankedTensorType>(getLhs().getType());
  auto rhs = cast<RankedTensorType>(getRhs().getType());
  auto product = cast<RankedTensorType>(getProduct().getType());
  auto sums = cast<RankedTensorType>(getSums().getType());
  if (lhs.getRank() != 2 || rhs.getRank() != 2)
    return emitOpError("expected matrices, got ") << lhs << " and " << rhs;
  Type e = lhs.getElementType();
  if (rhs.getElementType() != e || product.getElementType() != e ||
      sums.getElementType() != e)
    return emitOpError("expected operands and results of one element type");
  const bool tl = getTransposeLhs(), tr = getTransposeRhs();
  const int64_t m = lhs.getDimSize(tl ? 1 : 0), kl = lhs.getDimSize(tl ? 0 : 1);
  const int64_t kr = rhs.getDimSize(tr ? 1 : 0), n = rhs.getDimSize(tr ? 0 : 1);
  if (kl != kr)
    return emitOpError("expected contracted dimensions to agree, got ")
           << kl << " and " << kr;
  const int64_t summed = getSummed();
  if (summed != 0 && summed != 1)
    return emitOpError("expected summed 0 (lhs) or 1 (rhs), got ") << summed;
  if (summed == 0 ? !tl : tr)
    return emitOpError("expected the summed ")
           << (summed == 0 ? "lhs transposed" : "rhs not transposed")
           << " (its rows contracted)";
  const int64_t columns = summed == 0 ? m : n;
  if (product.getShape() != ArrayRef<int64_t>{m, n} ||
      sums.getShape() != ArrayRef<int64_t>{columns})
    return emitOpError("expected a product of shape [")
           << m << ", " << n << "] and sums of shape [" << columns << "], got "
           << product << " and " << sums;
  return success();
}

LogicalResult CrossEntropyGradOp::verify() {
  auto logits = cast<RankedTensorType>(getLogits().getType());
  auto labels = cast<RankedTensorType>(getLabels().getType());
  auto dloss = cast<RankedTensorType>(getDloss().getType());
  if (logits.getRank() != 2 || getType() != logits)
    return emitOpError("expected rank-2 logits and a result of their type");
  if (labels.getShape() != logits.getShape().take_front(1) ||
      dloss.getShape() != logits.getShape().take_front(1) ||
      !isSameOrF32OfHalf(logits.getElementType(), dloss.getElementType()))
    return emitOpError("expected labels and dloss of shape [")
           << logits.getDimSize(0) << "], dloss of the logits' element type "
           << "(or f32 for half logits)";
  return success();
}

/// A counter-based draw's block of a split tensor (dropout, random):
/// `offsets` and `global_shape` together, one of each per dimension of
/// `type` (the block's, named `what`), the whole tensor no smaller.
static LogicalResult verifyBlock(Operation *op, Value offsets,
                                 std::optional<ArrayRef<int64_t>> global,
                                 RankedTensorType type, StringRef what) {
  if (bool(offsets) != bool(global))
    return op->emitOpError("expected offsets and global_shape together");
  if (!global)
    return success();
  auto offsetsType = cast<RankedTensorType>(offsets.getType());
  if (offsetsType.getDimSize(0) != type.getRank() ||
      int64_t(global->size()) != type.getRank())
    return op->emitOpError("expected ")
           << type.getRank() << " offsets and global dimensions (one per "
           << "dimension of the " << what << "), got "
           << offsetsType.getDimSize(0) << " and " << global->size();
  for (int64_t d = 0; d < type.getRank(); ++d)
    if ((*global)[d] < type.getDimSize(d))
      return op->emitOpError("expected global dimension ")
             << d << " of at least " << type.getDimSize(d) << ", got "
             << (*global)[d];
  return success();
}

LogicalResult DropoutOp::verify() {
  float ratio = getRatio().convertToFloat();
  if (!(ratio >= 0 && ratio < 1))
    return emitOpError("expected 0 <= ratio < 1, got ") << ratio;
  if (getResult().getType() != getOperand().getType() ||
      getMask().getType() != getI1TensorLike(getOperand().getType()))
    return emitOpError("expected a result of the operand's type and an i1 mask "
                       "of its shape");
  return verifyBlock(*this, getOffsets(), getGlobalShape(),
                     cast<RankedTensorType>(getOperand().getType()), "operand");
}

LogicalResult RandomOp::verify() {
  StringRef distribution = getDistribution();
  if (distribution != "uniform" && distribution != "normal")
    return emitOpError("expected distribution \"uniform\" or \"normal\", "
                       "got \"")
           << distribution << "\"";
  double shift = getShift().convertToDouble(),
         scale = getScale().convertToDouble();
  if (!std::isfinite(shift) || !std::isfinite(scale))
    return emitOpError("expected a finite shift and scale, got ")
           << shift << " and " << scale;
  return verifyBlock(*this, getOffsets(), getGlobalShape(), getType(),
                     "result");
}

LogicalResult LrScheduleOp::verify() {
  StringRef kind = getKind();
  if (kind != "constant" && kind != "linear" && kind != "cosine")
    return emitOpError("expected kind \"constant\", \"linear\" or \"cosine\", "
                       "got \"")
           << kind << "\"";
  if (getWarmup() < 0)
    return emitOpError("expected warmup >= 0, got ") << getWarmup();
  return success();
}

/// dgraph.attention's and dgraph.attention_grad's shared constraints: the
/// operands' shapes, the mask's broadcast, causal's square scores.
static LogicalResult verifyAttentionOperands(Operation *op, Value query,
                                             Value key, Value value, Value mask,
                                             bool causal) {
  auto q = cast<RankedTensorType>(query.getType());
  auto k = cast<RankedTensorType>(key.getType());
  auto v = cast<RankedTensorType>(value.getType());
  int64_t rank = q.getRank();
  if (rank < 2 || k.getRank() != rank || v.getRank() != rank)
    return op->emitOpError("expected query, key and value of one rank >= 2");
  if (k.getElementType() != q.getElementType() ||
      v.getElementType() != q.getElementType())
    return op->emitOpError("expected query, key and value of one element type");
  ArrayRef<int64_t> qs = q.getShape(), ks = k.getShape(), vs = v.getShape();
  if (qs.drop_back(2) != ks.drop_back(2) || qs.drop_back(2) != vs.drop_back(2))
    return op->emitOpError("expected query, key and value with the same "
                           "leading dimensions");
  if (ks.back() != qs.back())
    return op->emitOpError("expected key's last dimension ")
           << ks.back() << " to equal query's " << qs.back();
  if (vs[rank - 2] != ks[rank - 2])
    return op->emitOpError("expected as many values as keys, got ")
           << vs[rank - 2] << " and " << ks[rank - 2];
  if (causal && qs[rank - 2] != ks[rank - 2])
    return op->emitOpError("causal attention expects as many queries as "
                           "keys, got ")
           << qs[rank - 2] << " and " << ks[rank - 2];
  if (mask) {
    auto m = cast<RankedTensorType>(mask.getType());
    SmallVector<int64_t> scores(qs.drop_back(1));
    scores.push_back(ks[rank - 2]);
    if (m.getRank() != rank)
      return op->emitOpError("expected a mask of rank ") << rank;
    for (int64_t d = 0; d < rank; ++d)
      if (m.getDimSize(d) != 1 && m.getDimSize(d) != scores[d])
        return op->emitOpError("expected mask dimension ")
               << d << " to be 1 or " << scores[d] << ", got "
               << m.getDimSize(d);
  }
  return success();
}

RankedTensorType AttentionOp::logsumexpType(RankedTensorType query) {
  Type element = query.getElementType().isF64()
                     ? Type(Float64Type::get(query.getContext()))
                     : Type(Float32Type::get(query.getContext()));
  return RankedTensorType::get(query.getShape().drop_back(1), element);
}

LogicalResult AttentionOp::verify() {
  if (failed(verifyAttentionOperands(*this, getQuery(), getKey(), getValue(),
                                     getMask(), getCausal())))
    return failure();
  auto q = cast<RankedTensorType>(getQuery().getType());
  auto v = cast<RankedTensorType>(getValue().getType());
  SmallVector<int64_t> out(q.getShape().drop_back(1));
  out.push_back(v.getShape().back());
  if (getResult().getType() != RankedTensorType::get(out, q.getElementType()))
    return emitOpError("expected a result of type ")
           << RankedTensorType::get(out, q.getElementType());
  auto lse = AttentionOp::logsumexpType(q);
  if (getLogsumexp().getType() != lse)
    return emitOpError("expected a logsumexp of type ") << lse;
  return success();
}

LogicalResult AttentionGradOp::verify() {
  if (failed(verifyAttentionOperands(*this, getQuery(), getKey(), getValue(),
                                     getMask(), getCausal())))
    return failure();
  auto q = cast<RankedTensorType>(getQuery().getType());
  auto v = cast<RankedTensorType>(getValue().getType());
  SmallVector<int64_t> out(q.getShape().drop_back(1));
  out.push_back(v.getShape().back());
  auto outType = RankedTensorType::get(out, q.getElementType());
  if (getOut().getType() != outType || getDout().getType() != outType)
    return emitOpError("expected out and dout of type ") << outType;
  auto lse = AttentionOp::logsumexpType(q);
  if (getLogsumexp().getType() != lse)
    return emitOpError("expected a logsumexp of type ") << lse;
  if (getDquery().getType() != q || getDkey().getType() != getKey().getType() ||
      getDvalue().getType() != v)
    return emitOpError("expected dquery, dkey and dvalue of the types of "
                       "query, key and value");
  return success();
}
