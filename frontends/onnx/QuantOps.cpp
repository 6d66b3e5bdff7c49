//===- QuantOps.cpp - ONNX QuantizeLinear, DequantizeLinear ---------------===//
//
// QuantizeLinear, DequantizeLinear (per tensor and per axis, 8- and 16-bit
// integers), DynamicQuantizeLinear, MatMulInteger and QLinearMatMul (8-bit
// products summed in f64, exactly), in dgraph's arithmetic: rounding
// half to even, saturation to the integer type's range. A PyTorch export's
// QuantizeLinear multiplies by the scale's reciprocal, as PyTorch's
// fake_quantize does, where ONNX divides by the scale (they differ where
// the quotient is within an ulp of a half).
//
// A QuantizeLinear whose result a DequantizeLinear reads with the same
// scale, zero point and axis is a fake quantization, as PyTorch exports
// torch.fake_quantize_per_tensor_affine / _per_channel_affine and the
// FakeQuantize modules of quantization-aware training. Its value is the
// saturated level times the scale, computed without the round trip through
// the integer type; in a training import its gradient is PyTorch's
// straight-through estimator: the incoming gradient where the level lies
// within the integer range before saturation, zero where it was clamped.
// Scales and zero points receive no gradient (PyTorch's are buffers), and
// an initializer read only as one is not trained (OnnxImporter.cpp).
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/NodeImporter.h"

using namespace mlir;
using namespace dtcc::graph;

namespace dtcc::onnx_frontend {
namespace {

/// The integer types dtcc quantizes to, and their range.
LogicalResult integerRange(NodeImporter &n, Type type, StringRef what,
                           double &low, double &high) {
  auto it = dyn_cast<IntegerType>(type);
  if (!it || (it.getWidth() != 8 && it.getWidth() != 16))
    return n.error() << "expected " << what
                     << " of an 8- or 16-bit integer type (int8, uint8, "
                        "int16, uint16), got "
                     << type
                     << " (dtcc has no float8 or 4-bit integer quantization)";
  unsigned bits = it.getWidth();
  low = it.isUnsigned() ? 0.0 : -std::ldexp(1.0, bits - 1);
  high = it.isUnsigned() ? std::ldexp(1.0, bits) - 1
                         : std::ldexp(1.0, bits - 1) - 1;
  return success();
}

/// A scale or zero point given per tensor (one element) or per axis (1-D,
/// of `x`'s extent along `axis`), converted to `ft` and broadcast to `x`'s
/// shape. `perAxis` is the (normalized) axis of a per-axis one.
FailureOr<Value> quantParam(NodeImporter &n, Value p, RankedTensorType x,
                            int64_t axis, Type ft, StringRef what,
                            std::optional<int64_t> &perAxis) {
  auto type = cast<RankedTensorType>(p.getType());
  SmallVector<int64_t> shape(x.getRank(), 1);
  perAxis.reset();
  if (type.getNumElements() != 1) {
    auto normalized = n.normalizeAxis(axis, x.getRank());
    if (failed(normalized))
      return failure();
    axis = *normalized;
    if (type.getRank() != 1 || type.getDimSize(0) != x.getDimSize(axis))
      return n.error() << "expected a " << what
                       << " of one element (per tensor) or 1-D of the "
                          "input's extent along axis "
                       << axis << " (" << x.getDimSize(axis)
                       << ", per axis), got " << type
                       << " (blocked quantization is not supported)";
    shape[axis] = x.getDimSize(axis);
    perAxis = axis;
  }
  Value v = n.castTo(n.reshape(p, shape), ft);
  return n.broadcastTo(v, x.getShape());
}

/// The axis attribute (opset 13 on; 1 by default), which only a per-axis
/// scale or zero point reads.
FailureOr<int64_t> quantAxis(NodeImporter &n) {
  if (n.getOpset() >= 21 && n.attrInt("block_size", 0) != 0)
    return n.error() << "blocked quantization (block_size "
                     << n.attrInt("block_size", 0) << ") is not supported";
  return n.attrInt("axis", 1);
}

/// The integer type of a QuantizeLinear's result: its zero point's, else
/// output_dtype's (opset 21), else uint8.
FailureOr<Type> quantizedType(NodeImporter &n) {
  if (n.hasInput(2))
    return n.inputType(2).getElementType();
  int64_t dtype = n.getOpset() >= 21 ? n.attrInt("output_dtype", 0) : 0;
  if (dtype == 0)
    return Type(IntegerType::get(n.getContext(), 8, IntegerType::Unsigned));
  Type t = convertElementType(int32_t(dtype), n.getContext());
  if (!t)
    return n.error() << "expected output_dtype of an 8- or 16-bit integer "
                        "type, got "
                     << onnxTypeName(int32_t(dtype));
  return t;
}

/// The float type of a node's arithmetic: its scale's (float, float16,
/// bfloat16), or the type attribute `attr` names where it is given (opset
/// 23's QuantizeLinear precision, DequantizeLinear output_dtype).
FailureOr<Type> arithmeticType(NodeImporter &n, StringRef attr) {
  Type t = n.inputType(1).getElementType();
  if (!isa<FloatType>(t))
    return n.error() << "expected a floating-point scale, got " << t;
  if (n.getOpset() < 23)
    return t;
  int64_t dtype = n.attrInt(attr, 0);
  if (dtype == 0)
    return t;
  Type given = convertElementType(int32_t(dtype), n.getContext());
  if (!given || !isa<FloatType>(given))
    return n.error() << "expected " << attr << " of a floating-point type, got "
                     << onnxTypeName(int32_t(dtype));
  return given;
}

LogicalResult importQuantizeLinear(NodeImporter &n) {
  RankedTensorType xType = n.inputType(0);
  auto ft = arithmeticType(n, "precision");
  auto qt = quantizedType(n);
  auto axis = quantAxis(n);
  if (failed(ft) || failed(qt) || failed(axis))
    return failure();
  QuantizedValue info;
  if (failed(
          integerRange(n, *qt, "a QuantizeLinear result", info.low, info.high)))
    return failure();
  Type xElement = xType.getElementType();
  if (!isa<FloatType>(xElement) &&
      !(isa<IntegerType>(xElement) &&
        cast<IntegerType>(xElement).getWidth() == 32))
    return n.error() << "expected a floating-point or int32 input, got "
                     << xElement;
  Value x = n.castTo(n.input(0), *ft);
  std::optional<int64_t> scalePerAxis, zeroPerAxis;
  auto scale = quantParam(n, detached(n, n.input(1)), xType, *axis, *ft,
                          "scale", scalePerAxis);
  if (failed(scale))
    return failure();
  Value zero = n.splat(RankedTensorType::get(xType.getShape(), *ft), 0.0);
  if (n.hasInput(2)) {
    auto z = quantParam(n, detached(n, n.input(2)), xType, *axis, *ft,
                        "zero point", zeroPerAxis);
    if (failed(z))
      return failure();
    zero = *z;
  }
  // ONNX divides by the scale; PyTorch's fake_quantize multiplies by its
  // reciprocal (rounded to float first), which rounds differently where
  // x / scale is within an ulp of a half: an export from PyTorch is
  // quantized as PyTorch trained it.
  Value scaled = n.producerName() == "pytorch"
                     ? n.fold<MulOp>(x, n.fold<ReciprocalOp>(*scale))
                     : n.fold<DivOp>(x, *scale);
  Value level = n.fold<AddOp>(n.fold<RoundOp>(scaled), zero);
  Value saturated = saturate(n, level, info.low, info.high);
  Value q = n.castTo(saturated, *qt);
  info.input = isa<FloatType>(xElement) ? n.input(0) : Value();
  info.level = level;
  info.saturated = saturated;
  info.scale = *scale;
  info.zeroPoint = zero;
  info.scaleInput = n.input(1);
  info.zeroPointInput = n.input(2);
  info.scaleValue = n.knownInput(1);
  if (n.hasInput(2))
    info.zeroPointValue = n.knownInput(2);
  info.axis = scalePerAxis ? *scalePerAxis : zeroPerAxis ? *zeroPerAxis : -1;
  n.noteQuantized(q, std::move(info));
  n.setOutput(0, q);
  return success();
}

/// Whether a quantization parameter of the DequantizeLinear (`value`, its
/// compile-time value `known`) is the QuantizeLinear's: the same tensor, or
/// equal constants. An omitted zero point is zero, as a zero point of
/// zeros (one, or one per channel) is.
bool sameParam(Value value, std::optional<DenseElementsAttr> known,
               Value theirs, std::optional<DenseElementsAttr> theirsKnown) {
  if (value == theirs)
    return true;
  auto isZero = [](Value v, std::optional<DenseElementsAttr> k) {
    return !v || (k && k->isSplat() && isa<IntegerType>(k->getElementType()) &&
                  k->getSplatValue<APInt>().isZero());
  };
  if (isZero(value, known) && isZero(theirs, theirsKnown))
    return true;
  return value && theirs && known && theirsKnown && *known == *theirsKnown;
}

LogicalResult importDequantizeLinear(NodeImporter &n) {
  RankedTensorType xType = n.inputType(0);
  auto ft = arithmeticType(n, "output_dtype");
  auto axis = quantAxis(n);
  if (failed(ft) || failed(axis))
    return failure();
  Type xElement = xType.getElementType();
  auto it = dyn_cast<IntegerType>(xElement);
  if (!it || (it.getWidth() != 8 && it.getWidth() != 16 && it.getWidth() != 32))
    return n.error() << "expected an input of an 8-, 16- or 32-bit integer "
                        "type, got "
                     << xElement
                     << " (dtcc has no float8 or 4-bit integer quantization)";
  // A fake quantization: the QuantizeLinear's saturated level, dequantized.
  const QuantizedValue *q = n.quantizedFrom(n.input(0));
  int64_t rank = xType.getRank();
  int64_t pairAxis = n.inputType(1).getNumElements() == 1 ? -1
                     : *axis < 0                          ? *axis + rank
                                                          : *axis;
  std::optional<DenseElementsAttr> zeroKnown;
  if (n.hasInput(2))
    zeroKnown = n.knownInput(2);
  if (q && getElementTypeOrSelf(q->scale.getType()) == *ft &&
      sameParam(n.input(1), n.knownInput(1), q->scaleInput, q->scaleValue) &&
      sameParam(n.input(2), zeroKnown, q->zeroPointInput, q->zeroPointValue) &&
      (pairAxis == -1 || q->axis == -1 || pairAxis == q->axis)) {
    Value y =
        n.fold<MulOp>(n.fold<SubOp>(q->saturated, q->zeroPoint), q->scale);
    if (q->input && n.getImportOptions().training &&
        q->input.getType() == y.getType()) {
      // Straight through: x - x (zero) carries x's gradient where the level
      // was not clamped; the dequantized value itself carries none.
      auto full = cast<RankedTensorType>(y.getType());
      Value inRange = n.create<AndOp>(
          n.create<GeOp>(q->level, n.splat(full, q->low)).getResult(),
          n.create<LeOp>(q->level, n.splat(full, q->high)).getResult());
      Value through = n.create<AddOp>(
          y, n.create<SubOp>(q->input, detached(n, q->input)).getResult());
      y = n.create<SelectOp>(inRange, through, y).getResult();
    }
    n.setOutput(0, y);
    return success();
  }

  std::optional<int64_t> scalePerAxis, zeroPerAxis;
  auto scale = quantParam(n, detached(n, n.input(1)), xType, *axis, *ft,
                          "scale", scalePerAxis);
  if (failed(scale))
    return failure();
  Value zero = n.splat(RankedTensorType::get(xType.getShape(), *ft), 0.0);
  if (n.hasInput(2)) {
    if (n.inputType(2).getElementType() != xElement)
      return n.error() << "expected a zero point of the input's type "
                       << xElement << ", got "
                       << n.inputType(2).getElementType();
    auto z =
        quantParam(n, n.input(2), xType, *axis, *ft, "zero point", zeroPerAxis);
    if (failed(z))
      return failure();
    zero = *z;
  }
  n.setOutput(
      0, n.fold<MulOp>(n.fold<SubOp>(n.castTo(n.input(0), *ft), zero), *scale));
  return success();
}

/// y_scale = (max(x, 0) - min(x, 0)) / 255 over the whole tensor, the zero
/// point the saturated round(-min / scale), y = saturate(round(x / scale) +
/// zero point): uint8, as ONNX defines it. No gradient flows through it.
LogicalResult importDynamicQuantizeLinear(NodeImporter &n) {
  Value x = detached(n, n.input(0));
  auto type = cast<RankedTensorType>(x.getType());
  if (failed(requireFloat(n, x)))
    return failure();
  Type ft = type.getElementType();
  SmallVector<int64_t> all;
  for (int64_t d = 0; d < type.getRank(); ++d)
    all.push_back(d);
  auto scalarType = RankedTensorType::get({}, ft);
  Value zero = n.splat(scalarType, 0.0);
  Value hi = n.fold<MaxOp>(n.reduce<ReduceMaxOp>(x, all, false), zero);
  Value lo = n.fold<MinOp>(n.reduce<ReduceMinOp>(x, all, false), zero);
  Value scale =
      n.fold<DivOp>(n.fold<SubOp>(hi, lo), n.splat(scalarType, 255.0));
  Value zeroPoint = saturate(
      n, n.fold<RoundOp>(n.fold<SubOp>(zero, n.fold<DivOp>(lo, scale))), 0,
      255);
  Value level = n.fold<AddOp>(
      n.fold<RoundOp>(n.fold<DivOp>(x, n.broadcastTo(scale, type.getShape()))),
      n.broadcastTo(zeroPoint, type.getShape()));
  Type u8 = IntegerType::get(n.getContext(), 8, IntegerType::Unsigned);
  n.setOutput(0, n.castTo(saturate(n, level, 0, 255), u8));
  n.setOutput(1, scale);
  n.setOutput(2, n.castTo(zeroPoint, u8));
  return success();
}

/// Input `i` (a zero point or scale of a matrix product) in f64 against
/// `like` [..., M, N]: one element, or one per row (M, `rows`) or per
/// column (N) of the matrix it belongs to.
FailureOr<Value> matrixParam(NodeImporter &n, int i, RankedTensorType like,
                             bool rows, StringRef what) {
  Value v = n.castTo(n.input(i), n.builder().getF64Type());
  auto vt = cast<RankedTensorType>(v.getType());
  auto target = RankedTensorType::get(like.getShape(), vt.getElementType());
  int64_t rank = like.getRank();
  if (vt.getNumElements() == 1)
    return n.broadcastTo(n.reshape(v, {}), target.getShape());
  if (rank < (rows ? 2 : 1))
    return n.error() << "expected " << what << " (input " << i
                     << ") with one element for a matrix of type " << like
                     << ", which has no " << (rows ? "rows" : "columns")
                     << ", got " << vt;
  int64_t extent = like.getDimSize(rank - (rows ? 2 : 1));
  if (vt.getRank() != 1 || vt.getDimSize(0) != extent)
    return n.error() << "expected " << what << " (input " << i
                     << ") with one element or one per "
                     << (rows ? "row" : "column") << " (" << extent << "), got "
                     << vt;
  if (rows)
    v = n.reshape(v, {extent, 1});
  return n.broadcastTo(v, target.getShape());
}

/// (A - a_zero_point) x (B - b_zero_point) of 8-bit A (input 0) and B
/// (input `b`) in f64, which holds every sum of their products exactly (up
/// to 2^53); the zero points per tensor, per row of A, per column of B.
FailureOr<Value> integerMatmul(NodeImporter &n, int b, int aZero, int bZero) {
  Value a = n.input(0), bv = n.input(b);
  auto is8Bit = [](Value v) {
    return cast<RankedTensorType>(v.getType()).getElementType().isInteger(8);
  };
  if (!is8Bit(a) || !is8Bit(bv))
    return n.error() << "expected 8-bit integer matrices, got " << a.getType()
                     << " and " << bv.getType();
  if (cast<RankedTensorType>(a.getType()).getRank() == 0 ||
      cast<RankedTensorType>(bv.getType()).getRank() == 0)
    return n.error() << "expected matrices of rank >= 1, got " << a.getType()
                     << " and " << bv.getType();
  Type f64 = n.builder().getF64Type();
  auto centered = [&](Value v, int zp, bool rows) -> FailureOr<Value> {
    Value f = n.castTo(v, f64);
    if (!n.hasInput(zp))
      return f;
    if (n.inputType(zp).getElementType() !=
        cast<RankedTensorType>(v.getType()).getElementType())
      return n.error() << "expected a zero point (input " << zp
                       << ") of its matrix's type, got "
                       << n.input(zp).getType();
    auto z = matrixParam(n, zp, cast<RankedTensorType>(f.getType()), rows,
                         "zero point");
    if (failed(z))
      return failure();
    return n.fold<SubOp>(f, *z);
  };
  auto af = centered(a, aZero, /*rows=*/true);
  auto bf = centered(bv, bZero, /*rows=*/false);
  if (failed(af) || failed(bf))
    return failure();
  return numpyMatmul(n, *af, *bf);
}

/// MatMulInteger: the products' sums as int32.
LogicalResult importMatMulInteger(NodeImporter &n) {
  auto y = integerMatmul(n, 1, 2, 3);
  if (failed(y))
    return failure();
  n.setOutput(0, n.castTo(*y, n.builder().getIntegerType(32)));
  return success();
}

/// QLinearMatMul: the integer product scaled by a_scale * b_scale /
/// y_scale, rounded half to even, offset by y_zero_point and saturated to
/// its 8-bit type; in f64, exact up to that rounding.
LogicalResult importQLinearMatMul(NodeImporter &n) {
  auto acc = integerMatmul(n, 3, 2, 5);
  if (failed(acc))
    return failure();
  auto type = cast<RankedTensorType>((*acc).getType());
  for (int i : {1, 4, 6})
    if (!isa<FloatType>(n.inputType(i).getElementType()))
      return n.error() << "expected a floating-point scale (input " << i
                       << "), got " << n.input(i).getType();
  auto as = matrixParam(n, 1, type, true, "a_scale");
  auto bs = matrixParam(n, 4, type, false, "b_scale");
  auto ys = matrixParam(n, 6, type, false, "y_scale");
  auto yz = matrixParam(n, 7, type, false, "y_zero_point");
  if (failed(as) || failed(bs) || failed(ys) || failed(yz))
    return failure();
  Value scale = n.fold<DivOp>(n.fold<MulOp>(*as, *bs), *ys);
  auto y = requantize(n, *acc, scale, *yz, n.inputType(7).getElementType(),
                      "a y_zero_point");
  if (failed(y))
    return failure();
  n.setOutput(0, *y);
  return success();
}

} // namespace

Value saturate(NodeImporter &n, Value v, double low, double high) {
  auto type = cast<RankedTensorType>(v.getType());
  return n.fold<MinOp>(n.fold<MaxOp>(v, n.splat(type, low)),
                       n.splat(type, high));
}

FailureOr<Value> requantize(NodeImporter &n, Value acc, Value scale,
                            Value zeroPoint, Type out, StringRef what) {
  double low, high;
  if (failed(integerRange(n, out, what, low, high)))
    return failure();
  Value q = n.fold<RoundOp>(n.fold<MulOp>(acc, scale));
  if (zeroPoint)
    q = n.fold<AddOp>(q, zeroPoint);
  return n.castTo(saturate(n, q, low, high), out);
}

void appendQuantOps(std::vector<OpEntry> &ops) {
  ops.insert(ops.end(),
             {
                 {"QuantizeLinear", 10, importQuantizeLinear},
                 {"DequantizeLinear", 10, importDequantizeLinear},
                 {"DynamicQuantizeLinear", 11, importDynamicQuantizeLinear},
                 {"MatMulInteger", 10, importMatMulInteger},
                 {"QLinearMatMul", 10, importQLinearMatMul},
             });
}

} // namespace dtcc::onnx_frontend
