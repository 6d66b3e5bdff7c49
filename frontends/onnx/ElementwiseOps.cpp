//===- ElementwiseOps.cpp - ONNX elementwise ops to dgraph ----------------===//
//
// Arithmetic, comparisons, logic and activations. ONNX broadcasts
// implicitly; every handler here makes the broadcast explicit first. ONNX
// activations without a dgraph op of their own are decomposed.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/NodeImporter.h"

#include "dialects/Graph/IR/GraphMath.h"

#include "mlir/IR/Matchers.h"

#include <cmath>

using namespace mlir;
using namespace dtcc::graph;

namespace dtcc::onnx_frontend {
namespace {

LogicalResult requireNumeric(NodeImporter &n, Value v) {
  if (!getElementTypeOrSelf(v.getType()).isInteger(1))
    return success();
  return n.error() << "expected a numeric input, got " << v.getType();
}

/// The node's type constraint T over several inputs: one element type
/// (ONNX's checker passes a graph that breaks it; dgraph's ops verify it).
LogicalResult requireOneElementType(NodeImporter &n, ArrayRef<Value> values) {
  Type first = getElementTypeOrSelf(values.front().getType());
  for (Value v : values.drop_front())
    if (getElementTypeOrSelf(v.getType()) != first)
      return n.error() << "expected operands of one element type, got "
                       << values.front().getType() << " and " << v.getType();
  return success();
}

template <typename OpTy, bool FloatOnly>
LogicalResult unary(NodeImporter &n) {
  Value x = n.input(0);
  if (failed(FloatOnly ? requireFloat(n, x) : requireNumeric(n, x)))
    return failure();
  n.setOutput(0, n.fold<OpTy>(x));
  return success();
}

/// Applies a binary op after broadcasting; `Logical` ops take i1 only.
template <typename OpTy>
LogicalResult binary(NodeImporter &n) {
  auto operands = n.broadcastAll({n.input(0), n.input(1)});
  if (failed(operands))
    return failure();
  if (failed(requireOneElementType(n, *operands)))
    return failure();
  Value lhs = (*operands)[0], rhs = (*operands)[1];
  n.setOutput(0, n.fold<OpTy>(lhs, rhs));
  return success();
}

template <typename OpTy>
LogicalResult compare(NodeImporter &n) { return binary<OpTy>(n); }

/// Add, Sub, Mul, Div: from opset 7 numpy broadcasting (binary); before,
/// operands of one shape unless `broadcast` = 1, which broadcasts B onto A
/// with B's dimensions from `axis` on (by default B's shape is a suffix of
/// A's).
template <typename OpTy>
LogicalResult arithmetic(NodeImporter &n) {
  if (n.getOpset() >= 7)
    return binary<OpTy>(n);
  Value lhs = n.input(0), rhs = n.input(1);
  auto a = cast<RankedTensorType>(lhs.getType());
  auto bt = cast<RankedTensorType>(rhs.getType());
  if (!n.attrInt("broadcast", 0)) {
    if (a.getShape() != bt.getShape())
      return n.error() << "expected operands of one shape (before opset 7 only "
                          "broadcast = 1 broadcasts), got "
                       << a << " and " << bt;
  } else {
    int64_t rank = a.getRank(), brank = bt.getRank();
    int64_t axis = n.attrInt("axis", rank - brank);
    if (axis < 0)
      axis += rank;
    if (brank > rank || axis < 0 || axis + brank > rank)
      return n.error() << "expected B (" << bt << ") to fit into A (" << a
                       << ") from axis " << axis;
    // B's dimensions at [axis, axis + rank(B)), size 1 elsewhere.
    SmallVector<int64_t> shape(rank, 1);
    for (int64_t d = 0; d < brank; ++d) {
      if (bt.getDimSize(d) != 1 && bt.getDimSize(d) != a.getDimSize(axis + d))
        return n.error() << "expected B (" << bt << ") to broadcast onto A ("
                         << a << ") from axis " << axis;
      shape[axis + d] = bt.getDimSize(d);
    }
    // Aligned at the end it is numpy broadcasting; else size-1 dims follow.
    if (axis + brank < rank)
      rhs = n.reshape(rhs, shape);
    rhs = n.broadcastTo(rhs, a.getShape());
  }
  if (a.getElementType() != bt.getElementType())
    return n.error() << "expected operands of one element type, got " << a
                     << " and " << bt;
  n.setOutput(0, n.fold<OpTy>(lhs, rhs));
  return success();
}

/// Max, Min, Sum, Mean: any number of inputs, all broadcast together.
template <typename OpTy>
LogicalResult variadic(NodeImporter &n, bool mean = false) {
  SmallVector<Value> inputs;
  for (int i = 0; i < n.numInputs(); ++i)
    if (n.hasInput(i))
      inputs.push_back(n.input(i));
  if (inputs.empty())
    return n.error() << "expected at least one input";
  auto operands = n.broadcastAll(inputs);
  if (failed(operands) || failed(requireOneElementType(n, *operands)))
    return failure();
  Value acc = (*operands)[0];
  for (Value v : ArrayRef<Value>(*operands).drop_front())
    acc = n.fold<OpTy>(acc, v);
  if (mean) {
    auto type = cast<RankedTensorType>(acc.getType());
    acc = n.fold<DivOp>(acc, n.splat(type, inputs.size()));
  }
  n.setOutput(0, acc);
  return success();
}

/// The splat value of a float constant `v`, if it is one.
std::optional<double> splatValue(Value v) {
  DenseElementsAttr attr;
  if (!matchPattern(v, m_Constant(&attr)) || !attr.isSplat())
    return std::nullopt;
  auto f = dyn_cast<FloatAttr>(attr.getSplatValue<Attribute>());
  return f ? std::optional<double>(f.getValueAsDouble()) : std::nullopt;
}

/// Whether `v` is reduce_sum(x * x), reduce_sum(|x|^p) (p > 0) or
/// reduce_sum(x^p) for an even p (torch.cdist exports Pow(a - b, 2)),
/// reshaped or not (keepdims): a p-norm's sum.
bool isSumOfPowers(Value v) {
  if (auto r = v.getDefiningOp<ReshapeOp>())
    v = r.getOperand();
  auto sum = v.getDefiningOp<ReduceSumOp>();
  if (!sum)
    return false;
  Operation *term = sum.getOperand().getDefiningOp();
  if (auto square = dyn_cast_or_null<MulOp>(term))
    return square.getLhs() == square.getRhs();
  auto pow = dyn_cast_or_null<PowOp>(term);
  auto p = pow ? splatValue(pow.getRhs()) : std::nullopt;
  if (!p || *p <= 0)
    return false;
  const bool even = *p == 2 * std::round(*p / 2);
  return even || pow.getLhs().getDefiningOp<AbsOp>();
}

LogicalResult importPow(NodeImporter &n) {
  auto operands = n.broadcastAll({n.input(0), n.input(1)});
  if (failed(operands))
    return failure();
  Value base = (*operands)[0];
  Value exponent =
      n.castTo((*operands)[1], getElementTypeOrSelf(base.getType()));
  // A root (0 < exponent < 1) of a sum of |x|^p is a p-norm, which
  // torch.norm(x, p, dim) and torch.linalg.vector_norm export so, and
  // torch.cdist (p = 2, the root 1 / (2 + 1e-6)): its gradient is 0 at a
  // zero vector (normOfSum), as PyTorch's (cdist's at a zero distance, a
  // point's own, was NaN: 0 times the root's infinite slope).
  auto e = splatValue(exponent);
  if (e && *e > 0 && *e < 1 && isSumOfPowers(base)) {
    n.setOutput(0, normOfSum(n, base, exponent));
    return success();
  }
  n.setOutput(0, n.fold<PowOp>(base, exponent));
  return success();
}

LogicalResult importMod(NodeImporter &n) {
  auto operands = n.broadcastAll({n.input(0), n.input(1)});
  if (failed(operands) || failed(requireOneElementType(n, *operands)))
    return failure();
  Value a = (*operands)[0], b = (*operands)[1];
  Type element = getElementTypeOrSelf(a.getType());
  bool fmod = n.attrInt("fmod", 0) != 0;
  if (isa<FloatType>(element) && !fmod)
    return n.error() << "expected fmod=1 for floating-point inputs";
  Value r = n.fold<RemOp>(a, b);
  if (fmod || element.isUnsignedInteger()) {
    n.setOutput(0, r);
    return success();
  }
  // Python-style modulo: the result takes the divisor's sign.
  auto type = cast<RankedTensorType>(a.getType());
  Value zero = n.splat(type, 0);
  Value nonzero = n.fold<NotOp>(n.fold<EqOp>(r, zero));
  Value signsDiffer =
      n.fold<XorOp>(n.fold<LtOp>(r, zero), n.fold<LtOp>(b, zero));
  Value fix = n.fold<AndOp>(nonzero, signsDiffer);
  n.setOutput(0, n.fold<SelectOp>(fix, n.fold<AddOp>(r, b), r));
  return success();
}

LogicalResult importBitShift(NodeImporter &n) {
  std::string direction = n.attrString("direction", "");
  if (direction == "LEFT")
    return binary<ShiftLeftOp>(n);
  if (direction == "RIGHT")
    return binary<ShiftRightOp>(n);
  return n.error() << "expected direction \"LEFT\" or \"RIGHT\", got \""
                   << direction << "\"";
}

LogicalResult importWhere(NodeImporter &n) {
  auto operands = n.broadcastAll({n.input(0), n.input(1), n.input(2)});
  if (failed(operands) ||
      failed(requireOneElementType(n, ArrayRef<Value>(*operands).drop_front())))
    return failure();
  if (!getElementTypeOrSelf((*operands)[0].getType()).isInteger(1))
    return n.error() << "expected a bool condition, got "
                     << (*operands)[0].getType();
  n.setOutput(0, n.fold<SelectOp>((*operands)[0], (*operands)[1], (*operands)[2]));
  return success();
}

LogicalResult importClip(NodeImporter &n) {
  Value x = n.input(0);
  auto type = cast<RankedTensorType>(x.getType());
  // The bounds: optional scalar inputs from opset 11, sharing ONNX's
  // numeric type T with the input; before, the float attributes min and
  // max (opset 6; absent, no bound: their defaults are float's extremes).
  Value lo, hi;
  if (n.getOpset() >= 11) {
    SmallVector<Value, 3> operands = {x};
    for (unsigned i : {1u, 2u})
      if (n.hasInput(i))
        operands.push_back(n.input(i));
    if (failed(requireNumeric(n, x)) ||
        failed(requireOneElementType(n, operands)))
      return failure();
    lo = n.hasInput(1) ? n.input(1) : Value();
    hi = n.hasInput(2) ? n.input(2) : Value();
  } else {
    if (failed(requireFloat(n, x)))
      return failure();
    if (n.hasAttr("min"))
      lo = n.scalar(type.getElementType(), n.attrFloat("min", 0.0f));
    if (n.hasAttr("max"))
      hi = n.scalar(type.getElementType(), n.attrFloat("max", 0.0f));
  }
  Value y = x, inside;
  // min(max(x, lo), hi) gives the values (NaN stays NaN; lo > hi gives hi);
  // the gradient is torch.clamp's, x's whole where lo <= x <= hi (bounds
  // included) and 0 elsewhere, by selecting x there: max and min alone
  // would split it in halves at a bound. Where a dynamo export says the
  // node is F.hardtanh (nn.ReLU6, nn.Hardtanh), hardtanh's: the bounds
  // excluded (a value exactly at 0 passes no gradient through a ReLU6).
  if (lo)
    lo = n.broadcastTo(lo, type.getShape());
  if (hi)
    hi = n.broadcastTo(hi, type.getShape());
  if (n.torchOp() == "hardtanh") {
    // The bound where x reaches or passes it (no gradient to x there), x
    // strictly inside (and where x is NaN).
    if (lo)
      y = n.fold<SelectOp>(n.fold<LeOp>(x, lo), lo, y);
    if (hi)
      y = n.fold<SelectOp>(n.fold<GeOp>(x, hi), hi, y);
    n.setOutput(0, y);
    return success();
  }
  auto and_ = [&](Value c, Value d) { return c ? n.fold<AndOp>(c, d) : d; };
  if (lo) {
    y = n.fold<MaxOp>(y, lo);
    inside = and_(inside, n.fold<GeOp>(x, lo));
  }
  if (hi) {
    y = n.fold<MinOp>(y, hi);
    inside = and_(inside, n.fold<LeOp>(x, hi));
  }
  if (inside)
    y = n.fold<SelectOp>(inside, x, y);
  n.setOutput(0, y);
  return success();
}

LogicalResult importCast(NodeImporter &n) {
  int64_t to = n.attrInt("to", 0);
  Type element = convertElementType(to, n.getContext());
  if (!element)
    return n.error() << "cannot cast to " << onnxTypeName(to)
                     << ", which dtcc does not support";
  n.setOutput(0, n.castTo(n.input(0), element));
  return success();
}

LogicalResult importCastLike(NodeImporter &n) {
  n.setOutput(0, n.castTo(n.input(0), getElementTypeOrSelf(n.input(1).getType())));
  return success();
}

/// Identity; a PyTorch 2 export's `.detach()` (the node's metadata names
/// aten.detach) also stops the gradient, as PyTorch's does.
LogicalResult importIdentity(NodeImporter &n) {
  Value x = n.input(0);
  n.setOutput(0, n.torchOp() == "detach" ? detached(n, x) : x);
  return success();
}

LogicalResult importIsInf(NodeImporter &n) {
  Value x = n.input(0);
  if (failed(requireFloat(n, x)))
    return failure();
  n.setOutput(0, n.create<IsInfOp>(x, n.attrInt("detect_positive", 1) != 0,
                                   n.attrInt("detect_negative", 1) != 0)
                     .getResult());
  return success();
}

LogicalResult importGelu(NodeImporter &n) {
  Value x = n.input(0);
  if (failed(requireFloat(n, x)))
    return failure();
  std::string approximate = n.attrString("approximate", "none");
  if (approximate != "none" && approximate != "tanh")
    return n.error() << "expected approximate \"none\" or \"tanh\", got \""
                     << approximate << "\"";
  n.setOutput(0, n.create<GeluOp>(x, approximate).getResult());
  return success();
}

//===-- Decomposed activations ---------------------------------------------===//

/// The pieces activations are built from, for one input's type.
struct Activation {
  NodeImporter &n;
  Value x;
  RankedTensorType type;

  Activation(NodeImporter &n) : n(n), x(n.input(0)),
      type(cast<RankedTensorType>(x.getType())) {}
  Value c(double v) { return n.splat(type, v); }
  Value mul(Value a, Value b) { return n.fold<MulOp>(a, b); }
  Value add(Value a, Value b) { return n.fold<AddOp>(a, b); }
  Value sub(Value a, Value b) { return n.fold<SubOp>(a, b); }
  Value max(Value a, Value b) { return n.fold<MaxOp>(a, b); }
  Value min(Value a, Value b) { return n.fold<MinOp>(a, b); }
  Value exp(Value a) { return n.fold<ExpOp>(a); }
  Value lt(Value a, Value b) { return n.fold<LtOp>(a, b); }
  Value gt(Value a, Value b) { return n.fold<GtOp>(a, b); }
  Value select(Value c, Value a, Value b) { return n.fold<SelectOp>(c, a, b); }
  LogicalResult set(Value y) {
    n.setOutput(0, y);
    return success();
  }
};

LogicalResult importLeakyRelu(NodeImporter &n) {
  Activation a(n);
  double alpha = n.attrFloat("alpha", 0.01f);
  return a.set(a.select(a.lt(a.x, a.c(0)), a.mul(a.x, a.c(alpha)), a.x));
}

/// alpha * (exp(x / scale) - 1) for x <= 0, x above, as PyTorch's elu
/// (its gradient at 0 is the exponential branch's). The exponential reads
/// min(x, 0) through a select: exp(x) of a large x would be inf, and the
/// select's zero gradient times inf a NaN.
Value expLinearUnit(Activation &a, double alpha, double scale) {
  Value positive = a.gt(a.x, a.c(0));
  Value nonPositive = a.select(positive, a.c(0), a.x);
  if (scale != 1)
    nonPositive = a.n.fold<DivOp>(nonPositive, a.c(scale));
  Value neg = a.mul(a.c(alpha), a.sub(a.exp(nonPositive), a.c(1)));
  return a.select(positive, a.x, neg);
}

LogicalResult importElu(NodeImporter &n) {
  Activation a(n);
  double alpha = n.attrFloat("alpha", 1.0f);
  return a.set(expLinearUnit(a, alpha, 1));
}

LogicalResult importSelu(NodeImporter &n) {
  Activation a(n);
  double alpha = n.attrFloat("alpha", 1.67326319217681884765625f);
  double gamma = n.attrFloat("gamma", 1.05070102214813232421875f);
  return a.set(a.mul(a.c(gamma), expLinearUnit(a, alpha, 1)));
}

LogicalResult importCelu(NodeImporter &n) {
  Activation a(n);
  double alpha = n.attrFloat("alpha", 1.0f);
  return a.set(expLinearUnit(a, alpha, alpha));
}

LogicalResult importHardSigmoid(NodeImporter &n) {
  Activation a(n);
  double alpha = n.attrFloat("alpha", 0.2f), beta = n.attrFloat("beta", 0.5f);
  Value lin = a.add(a.mul(a.x, a.c(alpha)), a.c(beta));
  return a.set(a.max(a.c(0), a.min(a.c(1), lin)));
}

LogicalResult importHardSwish(NodeImporter &n) {
  Activation a(n);
  Value lin = a.add(a.mul(a.x, a.c(1.0 / 6)), a.c(0.5));
  return a.set(a.mul(a.x, a.max(a.c(0), a.min(a.c(1), lin))));
}

/// log(1 + exp(x)) without overflow, accurate for a very negative x.
Value softplus(Activation &a) {
  return buildSoftplus(a.n.builder(), a.n.getLoc(), a.x);
}

LogicalResult importSoftplus(NodeImporter &n) {
  Activation a(n);
  return a.set(softplus(a));
}

/// Mish (opset 18): x tanh(softplus(x)), PyTorch 2's export of F.mish.
LogicalResult importMish(NodeImporter &n) {
  Activation a(n);
  return a.set(a.mul(a.x, n.fold<TanhOp>(softplus(a))));
}

/// Swish (opset 24): x sigmoid(alpha x).
LogicalResult importSwish(NodeImporter &n) {
  Activation a(n);
  double alpha = n.attrFloat("alpha", 1.0f);
  Value arg = alpha == 1 ? a.x : a.mul(a.c(alpha), a.x);
  return a.set(a.mul(a.x, n.fold<SigmoidOp>(arg)));
}

LogicalResult importSoftsign(NodeImporter &n) {
  Activation a(n);
  return a.set(n.fold<DivOp>(a.x, a.add(a.c(1), n.fold<AbsOp>(a.x))));
}

LogicalResult importThresholdedRelu(NodeImporter &n) {
  Activation a(n);
  double alpha = n.attrFloat("alpha", 1.0f);
  return a.set(a.select(a.gt(a.x, a.c(alpha)), a.x, a.c(0)));
}

LogicalResult importShrink(NodeImporter &n) {
  Activation a(n);
  double lambd = n.attrFloat("lambd", 0.5f), bias = n.attrFloat("bias", 0.0f);
  Value below = a.lt(a.x, a.c(-lambd)), above = a.gt(a.x, a.c(lambd));
  Value y = a.select(below, a.add(a.x, a.c(bias)),
                     a.select(above, a.sub(a.x, a.c(bias)), a.c(0)));
  return a.set(y);
}

LogicalResult importPRelu(NodeImporter &n) {
  Activation a(n);
  Value slope = n.broadcastTo(n.input(1), a.type.getShape());
  if (cast<RankedTensorType>(slope.getType()).getShape() != a.type.getShape())
    return n.error() << "expected a slope broadcastable to " << a.type;
  return a.set(a.select(a.lt(a.x, a.c(0)), a.mul(a.x, slope), a.x));
}

LogicalResult importSigmoid(NodeImporter &n) { return unary<SigmoidOp, true>(n); }

/// Whether `v` is x clamped below at 0 as importClip builds Clip(x, 0)
/// (select(x >= 0, x, max(x, 0))), or max(x, 0), or relu(x).
bool isClampedAtZero(Value v) {
  auto isZero = [](Value c) {
    auto z = splatValue(c);
    return z && *z == 0;
  };
  auto isMaxWithZero = [&](Operation *op) {
    auto max = dyn_cast_or_null<MaxOp>(op);
    return max && (isZero(max.getLhs()) || isZero(max.getRhs()));
  };
  Operation *op = v.getDefiningOp();
  if (isa_and_nonnull<ReluOp>(op) || isMaxWithZero(op))
    return true;
  auto select = dyn_cast_or_null<SelectOp>(op);
  return select && isMaxWithZero(select.getOperand(2).getDefiningOp());
}

/// Sqrt, and the L2 norm where it reads a sum of squares: torch.norm(x,
/// dim=...) exports as Sqrt(ReduceSum(Mul(x, x))), and PyTorch's gradient of
/// it is 0 at a zero vector. So is dtcc's then for a torch.sqrt((x *
/// x).sum(d)) written out, whose PyTorch gradient there is NaN (0 * inf).
/// Likewise the root of a value clamped at 0: PyTorch 2's exporter writes
/// torch.cdist as Sqrt(Clip(|x|^2 + |y|^2 - 2 x.y, 0)), a distance that is
/// 0 between a point and itself, where PyTorch's cdist has the gradient 0
/// (and the graph's arithmetic 0 * inf, NaN).
LogicalResult importSqrt(NodeImporter &n) {
  Value x = n.input(0);
  if (failed(requireFloat(n, x)))
    return failure();
  n.setOutput(0, isSumOfPowers(x) || isClampedAtZero(x) ? normOfSum(n, x)
                                                        : n.fold<SqrtOp>(x));
  return success();
}

/// BitwiseAnd, BitwiseOr, BitwiseXor (opset 18): dgraph's and, or and xor
/// on integers.
template <typename OpTy> LogicalResult bitwise(NodeImporter &n) {
  for (int i = 0; i < n.numInputs(); ++i)
    if (!isa<IntegerType>(n.inputType(i).getElementType()) ||
        n.inputType(i).getElementType().isInteger(1))
      return n.error() << "expected integer operands, got "
                       << n.input(i).getType();
  return binary<OpTy>(n);
}

/// BitwiseNot: xor with every bit set.
LogicalResult importBitwiseNot(NodeImporter &n) {
  auto type = n.inputType(0);
  auto element = dyn_cast<IntegerType>(type.getElementType());
  if (!element || element.getWidth() == 1)
    return n.error() << "expected an integer operand, got " << type;
  Value ones = n.constant(
      DenseElementsAttr::get(type, APInt::getAllOnes(element.getWidth())));
  n.setOutput(0, n.fold<XorOp>(n.input(0), ones));
  return success();
}

} // namespace

void appendElementwiseOps(std::vector<OpEntry> &ops) {
  ops.insert(ops.end(), {
      {"Add", 1, arithmetic<AddOp>},
      {"Sub", 1, arithmetic<SubOp>},
      {"Mul", 1, arithmetic<MulOp>},
      {"Div", 1, arithmetic<DivOp>},
      {"Pow", 7, importPow},
      {"Mod", 10, importMod},
      {"BitShift", 11, importBitShift},
      {"And", 7, binary<AndOp>},
      {"Or", 7, binary<OrOp>},
      {"Xor", 7, binary<XorOp>},
      {"BitwiseAnd", 18, bitwise<AndOp>},
      {"BitwiseOr", 18, bitwise<OrOp>},
      {"BitwiseXor", 18, bitwise<XorOp>},
      {"BitwiseNot", 18, importBitwiseNot},
      {"Equal", 7, compare<EqOp>},
      {"Less", 7, compare<LtOp>},
      {"LessOrEqual", 12, compare<LeOp>},
      {"Greater", 7, compare<GtOp>},
      {"GreaterOrEqual", 12, compare<GeOp>},
      {"Max", 6, [](NodeImporter &n) { return variadic<MaxOp>(n); }},
      {"Min", 6, [](NodeImporter &n) { return variadic<MinOp>(n); }},
      {"Sum", 6, [](NodeImporter &n) { return variadic<AddOp>(n); }},
      {"Mean", 6, [](NodeImporter &n) { return variadic<AddOp>(n, true); }},
      {"Where", 9, importWhere},
      {"Clip", 6, importClip},
      {"Cast", 6, importCast},
      {"CastLike", 15, importCastLike},
      {"Identity", 1, importIdentity},
      {"Abs", 6, unary<AbsOp, false>},
      {"Neg", 6, unary<NegOp, false>},
      {"Sign", 9, unary<SignOp, false>},
      {"Relu", 6, unary<ReluOp, false>},
      {"Exp", 6, unary<ExpOp, true>},
      {"Log", 6, unary<LogOp, true>},
      {"Sqrt", 6, importSqrt},
      {"Reciprocal", 6, unary<ReciprocalOp, true>},
      {"Tanh", 6, unary<TanhOp, true>},
      {"Sigmoid", 6, importSigmoid},
      {"Erf", 9, unary<ErfOp, true>},
      {"Sin", 7, unary<SinOp, true>},
      {"Cos", 7, unary<CosOp, true>},
      {"Tan", 7, unary<TanOp, true>},
      {"Asin", 7, unary<AsinOp, true>},
      {"Acos", 7, unary<AcosOp, true>},
      {"Atan", 7, unary<AtanOp, true>},
      {"Sinh", 9, unary<SinhOp, true>},
      {"Cosh", 9, unary<CoshOp, true>},
      {"Asinh", 9, unary<AsinhOp, true>},
      {"Acosh", 9, unary<AcoshOp, true>},
      {"Atanh", 9, unary<AtanhOp, true>},
      {"Floor", 6, unary<FloorOp, true>},
      {"Ceil", 6, unary<CeilOp, true>},
      {"Round", 11, unary<RoundOp, true>},
      {"Not", 1, [](NodeImporter &n) {
         n.setOutput(0, n.fold<NotOp>(n.input(0)));
         return success();
       }},
      {"IsNaN", 9, [](NodeImporter &n) {
         if (failed(requireFloat(n, n.input(0))))
           return failure();
         n.setOutput(0, n.fold<IsNanOp>(n.input(0)));
         return success();
       }},
      {"IsInf", 10, importIsInf},
      {"Gelu", 20, importGelu},
      {"LeakyRelu", 6, importLeakyRelu},
      {"Elu", 6, importElu},
      {"Selu", 6, importSelu},
      {"Celu", 12, importCelu},
      {"HardSigmoid", 6, importHardSigmoid},
      {"HardSwish", 14, importHardSwish},
      {"Softplus", 1, importSoftplus},
      {"Mish", 18, importMish},
      {"Swish", 24, importSwish},
      {"Softsign", 1, importSoftsign},
      {"ThresholdedRelu", 10, importThresholdedRelu},
      {"Shrink", 9, importShrink},
      {"PRelu", 7, importPRelu},
  });
}

} // namespace dtcc::onnx_frontend
