//===- GraphFolders.cpp - constant folding for dgraph ops -----------------===//
//
// Folders evaluate ops on small constants (shape arithmetic from exported
// models: Shape -> Gather -> Concat -> Reshape) and remove no-op data
// movement. Large constants (weights) are never folded: they stay resources.
//
//===----------------------------------------------------------------------===//

#include "dialects/Graph/IR/GraphOps.h"

#include "mlir/Dialect/CommonFolders.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/APSInt.h"

#include <cmath>

using namespace mlir;
using namespace dtcc::graph;

namespace {
/// Above this many elements, folding would copy too much; the op stays.
constexpr int64_t kMaxFoldElements = 1 << 16;

/// Returns `attr` as a dense constant small enough to fold, or null.
DenseElementsAttr foldable(Attribute attr) {
  auto dense = dyn_cast_or_null<DenseElementsAttr>(attr);
  if (!dense || dense.getNumElements() > kMaxFoldElements)
    return {};
  return dense;
}

/// Row-major strides of `shape`.
SmallVector<int64_t> stridesOf(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> strides(shape.size(), 1);
  for (int64_t d = (int64_t)shape.size() - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

/// Builds a constant of `outType` whose element at each multi-index comes from
/// `in` at the linear index `map` returns.
Attribute foldByIndexMap(
    DenseElementsAttr in, RankedTensorType outType,
    llvm::function_ref<int64_t(ArrayRef<int64_t>)> map) {
  if (in.isSplat())
    return in.resizeSplat(outType);
  SmallVector<Attribute> values(in.getValues<Attribute>());
  SmallVector<Attribute> out;
  out.reserve(outType.getNumElements());
  SmallVector<int64_t> index(outType.getRank(), 0);
  for (int64_t n = 0, e = outType.getNumElements(); n < e; ++n) {
    out.push_back(values[map(index)]);
    for (int64_t d = outType.getRank() - 1; d >= 0; --d) {
      if (++index[d] < outType.getDimSize(d))
        break;
      index[d] = 0;
    }
  }
  return DenseElementsAttr::get(outType, out);
}

bool isUnsignedElement(Type type) {
  return getElementTypeOrSelf(type).isUnsignedInteger();
}

/// Folds an arithmetic binary op with separate float and integer rules.
template <typename FloatFn, typename IntFn>
Attribute foldArith(ArrayRef<Attribute> operands, Type type, FloatFn floatFn,
                    IntFn intFn) {
  if (!foldable(operands[0]) || !foldable(operands[1]))
    return {};
  Type element = getElementTypeOrSelf(type);
  if (isa<FloatType>(element))
    return constFoldBinaryOp<FloatAttr>(
        operands, type,
        [&](const APFloat &a, const APFloat &b) -> std::optional<APFloat> {
          return floatFn(a, b);
        });
  if (element.isInteger(1))
    return {};
  bool isUnsigned = element.isUnsignedInteger();
  return constFoldBinaryOp<IntegerAttr>(
      operands, type,
      [&](const APInt &a, const APInt &b) -> std::optional<APInt> {
        return intFn(a, b, isUnsigned);
      });
}

/// Folds a comparison into an i1 constant.
Attribute foldCompare(ArrayRef<Attribute> operands, Type resultType,
                      Type operandType, function_ref<bool(int)> fromOrder) {
  auto lhs = foldable(operands[0]), rhs = foldable(operands[1]);
  if (!lhs || !rhs)
    return {};
  Type element = getElementTypeOrSelf(operandType);
  bool isUnsigned = element.isUnsignedInteger();
  SmallVector<bool> out;
  auto la = llvm::to_vector(lhs.getValues<Attribute>());
  auto ra = llvm::to_vector(rhs.getValues<Attribute>());
  int64_t n = cast<ShapedType>(resultType).getNumElements();
  for (int64_t i = 0; i < n; ++i) {
    Attribute a = la[lhs.isSplat() ? 0 : i], b = ra[rhs.isSplat() ? 0 : i];
    if (auto fa = dyn_cast<FloatAttr>(a)) {
      APFloat::cmpResult c = fa.getValue().compare(cast<FloatAttr>(b).getValue());
      if (c == APFloat::cmpUnordered) {
        out.push_back(false);
        continue;
      }
      out.push_back(fromOrder(c == APFloat::cmpLessThan      ? -1
                              : c == APFloat::cmpGreaterThan ? 1
                                                             : 0));
      continue;
    }
    APInt x = cast<IntegerAttr>(a).getValue(), y = cast<IntegerAttr>(b).getValue();
    int order;
    if (element.isInteger(1) || isUnsigned)
      order = x.ult(y) ? -1 : x.ugt(y) ? 1 : 0;
    else
      order = x.slt(y) ? -1 : x.sgt(y) ? 1 : 0;
    out.push_back(fromOrder(order));
  }
  return DenseElementsAttr::get(cast<ShapedType>(resultType), out);
}
} // namespace

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

/// Folds a unary op with separate float and integer rules.
template <typename FloatFn, typename IntFn>
static Attribute foldUnary(Attribute operand, Type type, FloatFn floatFn,
                           IntFn intFn) {
  if (!foldable(operand))
    return {};
  if (isa<FloatType>(getElementTypeOrSelf(type)))
    return constFoldUnaryOp<FloatAttr, APFloat, void>(
        {operand}, [&](const APFloat &a) -> std::optional<APFloat> {
          return floatFn(a);
        });
  return constFoldUnaryOp<IntegerAttr, APInt, void>(
      {operand},
      [&](const APInt &a) -> std::optional<APInt> { return intFn(a); });
}

OpFoldResult NegOp::fold(FoldAdaptor adaptor) {
  return foldUnary(
      adaptor.getOperand(), getType(), [](APFloat a) { return neg(a); },
      [](const APInt &a) { return -a; });
}

OpFoldResult AbsOp::fold(FoldAdaptor adaptor) {
  bool isUnsigned = isUnsignedElement(getType());
  return foldUnary(
      adaptor.getOperand(), getType(), [](APFloat a) { return abs(a); },
      [&](const APInt &a) { return isUnsigned ? a : a.abs(); });
}

OpFoldResult ReluOp::fold(FoldAdaptor adaptor) {
  bool isUnsigned = isUnsignedElement(getType());
  return foldUnary(
      adaptor.getOperand(), getType(),
      [](APFloat a) {
        return a.isNegative() && !a.isNaN() ? APFloat::getZero(a.getSemantics())
                                            : a;
      },
      [&](const APInt &a) {
        return isUnsigned || !a.isNegative() ? a
                                             : APInt::getZero(a.getBitWidth());
      });
}

// Rounding and square roots of constants: shape arithmetic as exporters
// write it in floats (math.ceil(n / k) as Cast, Div, Ceil, Cast: PyTorch 2's
// Range limits), which the importer must know.
static Attribute foldRounding(Attribute operand, APFloat::roundingMode mode) {
  if (!foldable(operand))
    return {};
  return constFoldUnaryOp<FloatAttr, APFloat, void>(
      {operand}, [&](APFloat a) -> std::optional<APFloat> {
        a.roundToIntegral(mode);
        return a;
      });
}

OpFoldResult FloorOp::fold(FoldAdaptor adaptor) {
  return foldRounding(adaptor.getOperand(), APFloat::rmTowardNegative);
}

OpFoldResult CeilOp::fold(FoldAdaptor adaptor) {
  return foldRounding(adaptor.getOperand(), APFloat::rmTowardPositive);
}

OpFoldResult RoundOp::fold(FoldAdaptor adaptor) {
  return foldRounding(adaptor.getOperand(), APFloat::rmNearestTiesToEven);
}

OpFoldResult SqrtOp::fold(FoldAdaptor adaptor) {
  // f64 and f32 only: the root in double is correctly rounded, and rounded
  // again to f32 still is (double carries more than 2 x 24 + 2 bits).
  Type element = getElementTypeOrSelf(getType());
  if (!foldable(adaptor.getOperand()) || !(element.isF32() || element.isF64()))
    return {};
  return constFoldUnaryOp<FloatAttr, APFloat, void>(
      {adaptor.getOperand()}, [&](const APFloat &a) -> std::optional<APFloat> {
        APFloat r(std::sqrt(a.convertToDouble()));
        bool lost = false;
        r.convert(a.getSemantics(), APFloat::rmNearestTiesToEven, &lost);
        return r;
      });
}

OpFoldResult NotOp::fold(FoldAdaptor adaptor) {
  return foldUnary(
      adaptor.getOperand(), getType(), [](APFloat a) { return a; },
      [](const APInt &a) { return ~a; });
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

/// Whether `attr` is a splat of `value` (0 or 1), float or integer.
static bool isSplatOf(Attribute attr, int64_t value) {
  auto dense = dyn_cast_or_null<DenseElementsAttr>(attr);
  if (!dense || !dense.isSplat())
    return false;
  Attribute v = dense.getSplatValue<Attribute>();
  if (auto f = dyn_cast<FloatAttr>(v))
    return f.getValue().isExactlyValue(double(value));
  if (auto i = dyn_cast<IntegerAttr>(v))
    return !i.getType().isInteger(1) && i.getValue() == value;
  return false;
}

OpFoldResult AddOp::fold(FoldAdaptor adaptor) {
  // x + 0 = x (for floats only when x cannot be -0: a gradient never is
  // meant to carry the sign of zero, and IEEE gives -0 + 0 = +0 anyway).
  if (isSplatOf(adaptor.getRhs(), 0))
    return getLhs();
  if (isSplatOf(adaptor.getLhs(), 0))
    return getRhs();
  return foldArith(
      adaptor.getOperands(), getType(),
      [](APFloat a, const APFloat &b) {
        a.add(b, APFloat::rmNearestTiesToEven);
        return a;
      },
      [](const APInt &a, const APInt &b, bool) { return a + b; });
}

OpFoldResult SubOp::fold(FoldAdaptor adaptor) {
  return foldArith(
      adaptor.getOperands(), getType(),
      [](APFloat a, const APFloat &b) {
        a.subtract(b, APFloat::rmNearestTiesToEven);
        return a;
      },
      [](const APInt &a, const APInt &b, bool) { return a - b; });
}

OpFoldResult MulOp::fold(FoldAdaptor adaptor) {
  if (isSplatOf(adaptor.getRhs(), 1))
    return getLhs();
  if (isSplatOf(adaptor.getLhs(), 1))
    return getRhs();
  return foldArith(
      adaptor.getOperands(), getType(),
      [](APFloat a, const APFloat &b) {
        a.multiply(b, APFloat::rmNearestTiesToEven);
        return a;
      },
      [](const APInt &a, const APInt &b, bool) { return a * b; });
}

OpFoldResult DivOp::fold(FoldAdaptor adaptor) {
  auto rhs = foldable(adaptor.getRhs());
  // Integer division by zero is left to run time, where it is reported.
  if (rhs && !isa<FloatType>(getElementTypeOrSelf(getType())))
    for (const APInt &v : rhs.getValues<APInt>())
      if (v.isZero())
        return {};
  return foldArith(
      adaptor.getOperands(), getType(),
      [](APFloat a, const APFloat &b) {
        a.divide(b, APFloat::rmNearestTiesToEven);
        return a;
      },
      [](const APInt &a, const APInt &b, bool isUnsigned) {
        return isUnsigned ? a.udiv(b) : a.sdiv(b);
      });
}

OpFoldResult RemOp::fold(FoldAdaptor adaptor) {
  auto rhs = foldable(adaptor.getRhs());
  if (!rhs || isa<FloatType>(getElementTypeOrSelf(getType())))
    return {};
  for (const APInt &v : rhs.getValues<APInt>())
    if (v.isZero())
      return {};
  return foldArith(
      adaptor.getOperands(), getType(), [](APFloat a, const APFloat &) { return a; },
      [](const APInt &a, const APInt &b, bool isUnsigned) {
        return isUnsigned ? a.urem(b) : a.srem(b);
      });
}

OpFoldResult PowOp::fold(FoldAdaptor) { return {}; }

OpFoldResult MaxOp::fold(FoldAdaptor adaptor) {
  return foldArith(
      adaptor.getOperands(), getType(),
      [](const APFloat &a, const APFloat &b) { return llvm::maximum(a, b); },
      [](const APInt &a, const APInt &b, bool isUnsigned) {
        return isUnsigned ? llvm::APIntOps::umax(a, b)
                          : llvm::APIntOps::smax(a, b);
      });
}

OpFoldResult MinOp::fold(FoldAdaptor adaptor) {
  return foldArith(
      adaptor.getOperands(), getType(),
      [](const APFloat &a, const APFloat &b) { return llvm::minimum(a, b); },
      [](const APInt &a, const APInt &b, bool isUnsigned) {
        return isUnsigned ? llvm::APIntOps::umin(a, b)
                          : llvm::APIntOps::smin(a, b);
      });
}

/// Logical ops fold only on i1, where the integer rule is the logical one.
template <typename Fn>
static Attribute foldLogical(ArrayRef<Attribute> operands, Type type, Fn fn) {
  if (!foldable(operands[0]) || !foldable(operands[1]))
    return {};
  return constFoldBinaryOp<IntegerAttr>(
      operands, type,
      [&](const APInt &a, const APInt &b) -> std::optional<APInt> {
        return fn(a, b);
      });
}

OpFoldResult AndOp::fold(FoldAdaptor adaptor) {
  return foldLogical(adaptor.getOperands(), getType(),
                     [](const APInt &a, const APInt &b) { return a & b; });
}
OpFoldResult OrOp::fold(FoldAdaptor adaptor) {
  return foldLogical(adaptor.getOperands(), getType(),
                     [](const APInt &a, const APInt &b) { return a | b; });
}
OpFoldResult XorOp::fold(FoldAdaptor adaptor) {
  return foldLogical(adaptor.getOperands(), getType(),
                     [](const APInt &a, const APInt &b) { return a ^ b; });
}
OpFoldResult ShiftLeftOp::fold(FoldAdaptor) { return {}; }
OpFoldResult ShiftRightOp::fold(FoldAdaptor) { return {}; }

OpFoldResult EqOp::fold(FoldAdaptor adaptor) {
  return foldCompare(adaptor.getOperands(), getType(), getLhs().getType(),
                     [](int o) { return o == 0; });
}
OpFoldResult LtOp::fold(FoldAdaptor adaptor) {
  return foldCompare(adaptor.getOperands(), getType(), getLhs().getType(),
                     [](int o) { return o < 0; });
}
OpFoldResult LeOp::fold(FoldAdaptor adaptor) {
  return foldCompare(adaptor.getOperands(), getType(), getLhs().getType(),
                     [](int o) { return o <= 0; });
}
OpFoldResult GtOp::fold(FoldAdaptor adaptor) {
  return foldCompare(adaptor.getOperands(), getType(), getLhs().getType(),
                     [](int o) { return o > 0; });
}
OpFoldResult GeOp::fold(FoldAdaptor adaptor) {
  return foldCompare(adaptor.getOperands(), getType(), getLhs().getType(),
                     [](int o) { return o >= 0; });
}

OpFoldResult SelectOp::fold(FoldAdaptor adaptor) {
  if (getOnTrue() == getOnFalse())
    return getOnTrue();
  auto cond = foldable(adaptor.getCondition());
  if (!cond)
    return {};
  if (cond.isSplat())
    return cond.getSplatValue<bool>() ? getOnTrue() : getOnFalse();
  auto t = foldable(adaptor.getOnTrue()), f = foldable(adaptor.getOnFalse());
  if (!t || !f)
    return {};
  auto tv = llvm::to_vector(t.getValues<Attribute>());
  auto fv = llvm::to_vector(f.getValues<Attribute>());
  SmallVector<Attribute> out;
  for (auto [i, c] : llvm::enumerate(cond.getValues<bool>()))
    out.push_back(c ? tv[t.isSplat() ? 0 : i] : fv[f.isSplat() ? 0 : i]);
  return DenseElementsAttr::get(getType(), out);
}

OpFoldResult CastOp::fold(FoldAdaptor adaptor) {
  if (getOperand().getType() == getType())
    return getOperand();
  auto in = foldable(adaptor.getOperand());
  if (!in)
    return {};
  Type from = getElementTypeOrSelf(getOperand().getType());
  Type to = getElementTypeOrSelf(getType());
  auto outType = cast<ShapedType>(getType());
  bool fromUnsigned = isUnsignedElement(from);
  SmallVector<Attribute> out;
  for (Attribute a : in.getValues<Attribute>()) {
    if (auto toFloat = dyn_cast<FloatType>(to)) {
      APFloat v(0.0);
      if (auto f = dyn_cast<FloatAttr>(a)) {
        v = f.getValue();
      } else {
        APInt i = cast<IntegerAttr>(a).getValue();
        v = APFloat(toFloat.getFloatSemantics());
        v.convertFromAPInt(i, !(fromUnsigned || from.isInteger(1)),
                           APFloat::rmNearestTiesToEven);
      }
      bool lost;
      v.convert(toFloat.getFloatSemantics(), APFloat::rmNearestTiesToEven,
                &lost);
      out.push_back(FloatAttr::get(to, v));
      continue;
    }
    unsigned width = to.getIntOrFloatBitWidth();
    APInt v(width, 0);
    if (auto f = dyn_cast<FloatAttr>(a)) {
      if (width == 1) {
        v = APInt(1, !f.getValue().isZero());
      } else {
        APSInt result(width, to.isUnsignedInteger());
        bool exact;
        if (f.getValue().convertToInteger(result, APFloat::rmTowardZero,
                                          &exact) &
            APFloat::opInvalidOp)
          return {};
        v = result;
      }
    } else {
      APInt i = cast<IntegerAttr>(a).getValue();
      if (width == 1)
        v = APInt(1, !i.isZero());
      else
        v = (fromUnsigned || from.isInteger(1)) ? i.zextOrTrunc(width)
                                                : i.sextOrTrunc(width);
    }
    out.push_back(IntegerAttr::get(to, v));
  }
  return DenseElementsAttr::get(outType, out);
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

OpFoldResult BroadcastInDimOp::fold(FoldAdaptor adaptor) {
  if (getOperand().getType() == getType())
    return getOperand();
  // A broadcast splat is a splat of any size: it costs nothing to fold.
  if (auto splat = dyn_cast_or_null<SplatElementsAttr>(adaptor.getOperand()))
    return splat.resizeSplat(cast<ShapedType>(getType()));
  auto in = foldable(adaptor.getOperand());
  auto outType = cast<RankedTensorType>(getType());
  if (!in || outType.getNumElements() > kMaxFoldElements)
    return {};
  auto inType = cast<RankedTensorType>(in.getType());
  SmallVector<int64_t> inStrides = stridesOf(inType.getShape());
  ArrayRef<int64_t> dims = getDims();
  return foldByIndexMap(in, outType, [&](ArrayRef<int64_t> idx) {
    int64_t linear = 0;
    for (auto [i, d] : llvm::enumerate(dims))
      if (inType.getDimSize(i) != 1)
        linear += idx[d] * inStrides[i];
    return linear;
  });
}

OpFoldResult ReshapeOp::fold(FoldAdaptor adaptor) {
  if (getOperand().getType() == getType())
    return getOperand();
  if (auto producer = getOperand().getDefiningOp<ReshapeOp>()) {
    setOperand(producer.getOperand());
    return getResult();
  }
  if (auto in = foldable(adaptor.getOperand()))
    return in.reshape(cast<ShapedType>(getType()));
  return {};
}

OpFoldResult TransposeOp::fold(FoldAdaptor adaptor) {
  ArrayRef<int64_t> perm = getPerm();
  bool identity = true;
  for (auto [i, p] : llvm::enumerate(perm))
    identity &= (int64_t)i == p;
  if (identity)
    return getOperand();
  // transpose(transpose(x, p1), p2) = transpose(x, p1[p2[i]]): one copy
  // instead of two (the inner one dies when this was its only user), none
  // when the composition is the identity.
  if (auto inner = getOperand().getDefiningOp<TransposeOp>()) {
    ArrayRef<int64_t> innerPerm = inner.getPerm();
    SmallVector<int64_t> composed;
    bool composedIdentity = true;
    for (auto [i, p] : llvm::enumerate(perm)) {
      composed.push_back(innerPerm[p]);
      composedIdentity &= composed.back() == int64_t(i);
    }
    if (composedIdentity && inner.getOperand().getType() == getType())
      return inner.getOperand();
    setPermAttr(DenseI64ArrayAttr::get(getContext(), composed));
    getOperandMutable().assign(inner.getOperand());
    return getResult();
  }
  auto in = foldable(adaptor.getOperand());
  if (!in)
    return {};
  SmallVector<int64_t> inStrides =
      stridesOf(cast<ShapedType>(in.getType()).getShape());
  return foldByIndexMap(in, cast<RankedTensorType>(getType()),
                        [&](ArrayRef<int64_t> idx) {
                          int64_t linear = 0;
                          for (auto [i, p] : llvm::enumerate(perm))
                            linear += idx[i] * inStrides[p];
                          return linear;
                        });
}

OpFoldResult ReverseOp::fold(FoldAdaptor adaptor) {
  if (getDims().empty())
    return getOperand();
  // Small constants (shape arithmetic, e.g. the pads a Slice with step -1
  // reorders in PyTorch's exports).
  auto in = foldable(adaptor.getOperand());
  if (!in)
    return {};
  auto type = cast<RankedTensorType>(getType());
  SmallVector<int64_t> strides = stridesOf(type.getShape());
  ArrayRef<int64_t> dims = getDims();
  return foldByIndexMap(in, type, [&](ArrayRef<int64_t> idx) {
    int64_t linear = 0;
    for (auto [d, i] : llvm::enumerate(idx))
      linear += (llvm::is_contained(dims, int64_t(d)) ? type.getDimSize(d) - 1 - i
                                                      : i) *
                strides[d];
    return linear;
  });
}

OpFoldResult SliceOp::fold(FoldAdaptor adaptor) {
  if (getOperand().getType() == getType())
    return getOperand();
  auto in = foldable(adaptor.getOperand());
  if (!in)
    return {};
  SmallVector<int64_t> inStrides =
      stridesOf(cast<ShapedType>(in.getType()).getShape());
  ArrayRef<int64_t> start = getStart(), stride = getStride();
  return foldByIndexMap(in, cast<RankedTensorType>(getType()),
                        [&](ArrayRef<int64_t> idx) {
                          int64_t linear = 0;
                          for (size_t d = 0; d < idx.size(); ++d)
                            linear += (start[d] + idx[d] * stride[d]) * inStrides[d];
                          return linear;
                        });
}

OpFoldResult ConcatOp::fold(FoldAdaptor adaptor) {
  if (getOperands().size() == 1)
    return getOperands()[0];
  SmallVector<DenseElementsAttr> parts;
  for (Attribute a : adaptor.getOperands()) {
    auto d = foldable(a);
    if (!d)
      return {};
    parts.push_back(d);
  }
  auto outType = cast<RankedTensorType>(getType());
  int64_t dim = getDim();
  // Rows above `dim` are the outer loop; each part contributes a contiguous
  // chunk of (its dim size x inner) elements per outer index.
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d)
    outer *= outType.getDimSize(d);
  for (int64_t d = dim + 1; d < outType.getRank(); ++d)
    inner *= outType.getDimSize(d);
  SmallVector<SmallVector<Attribute>> values;
  for (DenseElementsAttr p : parts) {
    auto t = cast<ShapedType>(p.getType());
    SmallVector<Attribute> v;
    if (p.isSplat())
      v.assign(t.getNumElements(), p.getSplatValue<Attribute>());
    else
      v.assign(p.value_begin<Attribute>(), p.value_end<Attribute>());
    values.push_back(std::move(v));
  }
  SmallVector<Attribute> out;
  for (int64_t o = 0; o < outer; ++o)
    for (auto [p, v] : llvm::zip(parts, values)) {
      int64_t chunk = cast<ShapedType>(p.getType()).getDimSize(dim) * inner;
      out.append(v.begin() + o * chunk, v.begin() + (o + 1) * chunk);
    }
  return DenseElementsAttr::get(outType, out);
}

OpFoldResult GatherOp::fold(FoldAdaptor adaptor) {
  auto data = foldable(adaptor.getOperand());
  auto indices = foldable(adaptor.getIndices());
  if (!data || !indices)
    return {};
  auto dataType = cast<RankedTensorType>(data.getType());
  int64_t axis = getAxis(), axisSize = dataType.getDimSize(axis);
  SmallVector<int64_t> index;
  for (const APInt &v : indices.getValues<APInt>()) {
    int64_t i = v.getSExtValue();
    if (i < 0)
      i += axisSize;
    if (i < 0 || i >= axisSize)
      return {}; // reported at run time with the node's name
    index.push_back(i);
  }
  auto idxType = cast<RankedTensorType>(indices.getType());
  SmallVector<int64_t> dataStrides = stridesOf(dataType.getShape());
  SmallVector<int64_t> idxStrides = stridesOf(idxType.getShape());
  int64_t idxRank = idxType.getRank();
  return foldByIndexMap(
      data, cast<RankedTensorType>(getType()), [&](ArrayRef<int64_t> idx) {
        int64_t linear = 0, j = 0;
        for (int64_t d = 0; d < axis; ++d)
          linear += idx[d] * dataStrides[d];
        for (int64_t d = 0; d < idxRank; ++d)
          j += idx[axis + d] * idxStrides[d];
        linear += index[indices.isSplat() ? 0 : j] * dataStrides[axis];
        for (int64_t d = axis + 1; d < dataType.getRank(); ++d)
          linear += idx[d - 1 + idxRank] * dataStrides[d];
        return linear;
      });
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

namespace {
/// Folds a reduction over `dims` with a binary combiner on attributes.
Attribute foldReduce(Attribute operand, RankedTensorType outType,
                     ArrayRef<int64_t> dims,
                     function_ref<Attribute(Attribute, Attribute)> combine) {
  auto in = foldable(operand);
  if (!in)
    return {};
  auto inType = cast<RankedTensorType>(in.getType());
  SmallVector<int64_t> outStrides = stridesOf(outType.getShape());
  SmallVector<Attribute> acc(outType.getNumElements());
  SmallVector<int64_t> idx(inType.getRank(), 0);
  SmallVector<Attribute> values;
  if (in.isSplat())
    values.assign(inType.getNumElements(), in.getSplatValue<Attribute>());
  else
    values.assign(in.value_begin<Attribute>(), in.value_end<Attribute>());
  for (int64_t n = 0; n < inType.getNumElements(); ++n) {
    int64_t o = 0, od = 0;
    for (int64_t d = 0; d < inType.getRank(); ++d)
      if (!llvm::is_contained(dims, d))
        o += idx[d] * outStrides[od++];
    acc[o] = acc[o] ? combine(acc[o], values[n]) : values[n];
    if (!acc[o])
      return {};
    for (int64_t d = inType.getRank() - 1; d >= 0; --d) {
      if (++idx[d] < inType.getDimSize(d))
        break;
      idx[d] = 0;
    }
  }
  if (llvm::any_of(acc, [](Attribute a) { return !a; }))
    return {}; // an empty reduction: left to run time
  return DenseElementsAttr::get(outType, acc);
}

/// Combines two scalar attributes with float and integer rules.
Attribute combineScalars(
    Attribute a, Attribute b, function_ref<APFloat(APFloat, APFloat)> f,
    function_ref<APInt(APInt, APInt, bool)> i) {
  if (auto fa = dyn_cast<FloatAttr>(a))
    return FloatAttr::get(fa.getType(),
                          f(fa.getValue(), cast<FloatAttr>(b).getValue()));
  auto ia = cast<IntegerAttr>(a);
  return IntegerAttr::get(ia.getType(),
                          i(ia.getValue(), cast<IntegerAttr>(b).getValue(),
                            ia.getType().isUnsignedInteger()));
}
} // namespace

OpFoldResult ReduceSumOp::fold(FoldAdaptor adaptor) {
  if (getDims().empty())
    return getOperand();
  return foldReduce(adaptor.getOperand(), getType(), getDims(),
                    [](Attribute a, Attribute b) {
                      return combineScalars(
                          a, b,
                          [](APFloat x, APFloat y) {
                            x.add(y, APFloat::rmNearestTiesToEven);
                            return x;
                          },
                          [](APInt x, APInt y, bool) { return x + y; });
                    });
}

OpFoldResult ReduceProdOp::fold(FoldAdaptor adaptor) {
  if (getDims().empty())
    return getOperand();
  return foldReduce(adaptor.getOperand(), getType(), getDims(),
                    [](Attribute a, Attribute b) {
                      return combineScalars(
                          a, b,
                          [](APFloat x, APFloat y) {
                            x.multiply(y, APFloat::rmNearestTiesToEven);
                            return x;
                          },
                          [](APInt x, APInt y, bool) { return x * y; });
                    });
}

OpFoldResult ReduceMaxOp::fold(FoldAdaptor adaptor) {
  if (getDims().empty())
    return getOperand();
  return foldReduce(
      adaptor.getOperand(), getType(), getDims(), [](Attribute a, Attribute b) {
        return combineScalars(
            a, b, [](APFloat x, APFloat y) { return llvm::maximum(x, y); },
            [](APInt x, APInt y, bool u) {
              return u ? llvm::APIntOps::umax(x, y) : llvm::APIntOps::smax(x, y);
            });
      });
}

OpFoldResult ReduceMinOp::fold(FoldAdaptor adaptor) {
  if (getDims().empty())
    return getOperand();
  return foldReduce(
      adaptor.getOperand(), getType(), getDims(), [](Attribute a, Attribute b) {
        return combineScalars(
            a, b, [](APFloat x, APFloat y) { return llvm::minimum(x, y); },
            [](APInt x, APInt y, bool u) {
              return u ? llvm::APIntOps::umin(x, y) : llvm::APIntOps::smin(x, y);
            });
      });
}
