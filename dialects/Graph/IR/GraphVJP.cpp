//===- GraphVJP.cpp - vector-Jacobian products of dgraph ops --------------===//
//
// One rule per op: given the gradients of an op's results, build those of its
// operands. Each rule mirrors the op's semantics in GraphOps.td; gradients of
// fused ops use the fused gradient ops of GraphTrainingOps.td.
//
//===----------------------------------------------------------------------===//

#include "dialects/Graph/IR/GraphOps.h"

#include "mlir/IR/Builders.h"

#include <cmath>

using namespace mlir;
using namespace dtcc::graph;

namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// Builders for the arithmetic the rules share.
struct Emit {
  OpBuilder &b;
  Location loc;

  Value splat(Value like, double value) {
    auto type = typeOf(like);
    Attribute element;
    if (auto f = dyn_cast<FloatType>(type.getElementType()))
      element = FloatAttr::get(f, value);
    else
      element = IntegerAttr::get(type.getElementType(), (int64_t)value);
    return ConstantOp::create(b, loc, DenseElementsAttr::get(type, element));
  }
  Value add(Value x, Value y) { return AddOp::create(b, loc, x, y); }
  Value sub(Value x, Value y) { return SubOp::create(b, loc, x, y); }
  Value mul(Value x, Value y) { return MulOp::create(b, loc, x, y); }
  Value div(Value x, Value y) { return DivOp::create(b, loc, x, y); }
  Value neg(Value x) { return NegOp::create(b, loc, x); }
  Value exp(Value x) { return ExpOp::create(b, loc, x); }
  Value sqrt(Value x) { return SqrtOp::create(b, loc, x); }
  Value select(Value c, Value x, Value y) {
    return SelectOp::create(b, loc, c, x, y);
  }
  Value zerosLike(Value x) { return splat(x, 0.0); }
  /// A rank-0 zero of `element` (a pad's fill).
  Value scalarZero(Type element) {
    return ConstantOp::create(
        b, loc,
        DenseElementsAttr::get(RankedTensorType::get({}, element),
                               b.getZeroAttr(element)));
  }
  /// `g` masked by `c`: g where c, 0 elsewhere.
  Value where(Value c, Value g) { return select(c, g, zerosLike(g)); }
  Value reshape(Value x, RankedTensorType type) {
    if (x.getType() == type)
      return x;
    return ReshapeOp::create(b, loc, type, x);
  }
  /// Broadcasts `x` (of `type`'s shape without `reduced` dims) back to `type`.
  Value unreduce(Value x, RankedTensorType type, ArrayRef<int64_t> reduced) {
    SmallVector<int64_t> kept;
    for (int64_t d = 0; d < type.getRank(); ++d)
      if (!llvm::is_contained(reduced, d))
        kept.push_back(d);
    auto out = RankedTensorType::get(type.getShape(), typeOf(x).getElementType());
    return BroadcastInDimOp::create(b, loc, out, x, kept);
  }
};

/// The common shape of a single-operand rule: operandGrads = {f(g)}.
LogicalResult unaryRule(Operation *op, OpBuilder &b, ArrayRef<Value> grads,
                        SmallVectorImpl<Value> &out,
                        function_ref<Value(Emit &, Value x, Value y, Value g)> f) {
  out.assign(op->getNumOperands(), Value());
  if (!grads[0])
    return success();
  Emit e{b, op->getLoc()};
  out[0] = f(e, op->getOperand(0), op->getResult(0), grads[0]);
  return success();
}

/// Rules for ops through which no gradient flows (piecewise constant).
LogicalResult noGradient(Operation *op, SmallVectorImpl<Value> &out) {
  out.assign(op->getNumOperands(), Value());
  return success();
}

} // namespace

//===----------------------------------------------------------------------===//
// Unary elementwise
//===----------------------------------------------------------------------===//

#define DTCC_UNARY_VJP(OP, BODY)                                               \
  LogicalResult OP::buildVJP(OpBuilder &b, ArrayRef<Value> grads,              \
                             SmallVectorImpl<Value> &out) {                    \
    return unaryRule(*this, b, grads, out,                                     \
                     [&](Emit &e, Value x, Value y, Value g) -> Value {        \
                       (void)x;                                                \
                       (void)y;                                                \
                       BODY                                                    \
                     });                                                       \
  }

DTCC_UNARY_VJP(NegOp, return e.neg(g);)
DTCC_UNARY_VJP(AbsOp, return e.mul(g, SignOp::create(e.b, e.loc, x));)
DTCC_UNARY_VJP(ExpOp, return e.mul(g, y);)
DTCC_UNARY_VJP(LogOp, return e.div(g, x);)
DTCC_UNARY_VJP(SqrtOp, return e.div(g, e.mul(e.splat(y, 2.0), y));)
// d/dx x^-1/2 = -1/2 x^-3/2 = -1/2 y^3
DTCC_UNARY_VJP(RsqrtOp,
               return e.mul(g, e.mul(e.splat(y, -0.5), e.mul(y, e.mul(y, y))));)
DTCC_UNARY_VJP(ReciprocalOp, return e.neg(e.mul(g, e.mul(y, y)));)
DTCC_UNARY_VJP(TanhOp, return e.mul(g, e.sub(e.splat(y, 1.0), e.mul(y, y)));)
DTCC_UNARY_VJP(SigmoidOp,
               return e.mul(g, e.mul(y, e.sub(e.splat(y, 1.0), y)));)
DTCC_UNARY_VJP(ReluOp,
               return e.where(GtOp::create(e.b, e.loc, x, e.zerosLike(x)), g);)
DTCC_UNARY_VJP(SiluOp, return SiluGradOp::create(e.b, e.loc, x, g);)
DTCC_UNARY_VJP(ErfOp,
               return e.mul(g, e.mul(e.splat(x, 2.0 / std::sqrt(M_PI)),
                                     e.exp(e.neg(e.mul(x, x)))));)
DTCC_UNARY_VJP(SinOp, return e.mul(g, CosOp::create(e.b, e.loc, x));)
DTCC_UNARY_VJP(CosOp, return e.neg(e.mul(g, SinOp::create(e.b, e.loc, x)));)
DTCC_UNARY_VJP(TanOp, return e.mul(g, e.add(e.splat(y, 1.0), e.mul(y, y)));)
DTCC_UNARY_VJP(AsinOp,
               return e.div(g, e.sqrt(e.sub(e.splat(x, 1.0), e.mul(x, x))));)
DTCC_UNARY_VJP(AcosOp, return e.neg(e.div(
                           g, e.sqrt(e.sub(e.splat(x, 1.0), e.mul(x, x)))));)
DTCC_UNARY_VJP(AtanOp, return e.div(g, e.add(e.splat(x, 1.0), e.mul(x, x)));)
DTCC_UNARY_VJP(SinhOp, return e.mul(g, CoshOp::create(e.b, e.loc, x));)
DTCC_UNARY_VJP(CoshOp, return e.mul(g, SinhOp::create(e.b, e.loc, x));)
DTCC_UNARY_VJP(AsinhOp,
               return e.div(g, e.sqrt(e.add(e.mul(x, x), e.splat(x, 1.0))));)
DTCC_UNARY_VJP(AcoshOp,
               return e.div(g, e.sqrt(e.sub(e.mul(x, x), e.splat(x, 1.0))));)
DTCC_UNARY_VJP(AtanhOp, return e.div(g, e.sub(e.splat(x, 1.0), e.mul(x, x)));)
#undef DTCC_UNARY_VJP

LogicalResult GeluOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                               SmallVectorImpl<Value> &out) {
  return unaryRule(*this, b, grads, out, [&](Emit &e, Value x, Value, Value g) {
    return GeluGradOp::create(e.b, e.loc, x, g, getApproximate()).getResult();
  });
}

// Piecewise-constant ops pass no gradient (PyTorch gives zeros).
#define DTCC_NO_VJP(OP)                                                        \
  LogicalResult OP::buildVJP(OpBuilder &, ArrayRef<Value>,                     \
                             SmallVectorImpl<Value> &out) {                    \
    return noGradient(*this, out);                                             \
  }
DTCC_NO_VJP(SignOp)
DTCC_NO_VJP(FloorOp)
DTCC_NO_VJP(CeilOp)
DTCC_NO_VJP(RoundOp)
DTCC_NO_VJP(NotOp)
DTCC_NO_VJP(AndOp)
DTCC_NO_VJP(OrOp)
DTCC_NO_VJP(XorOp)
DTCC_NO_VJP(ShiftLeftOp)
DTCC_NO_VJP(ShiftRightOp)
#undef DTCC_NO_VJP

//===----------------------------------------------------------------------===//
// Binary elementwise
//===----------------------------------------------------------------------===//

/// The common shape of a two-operand rule.
static LogicalResult
binaryRule(Operation *op, OpBuilder &b, ArrayRef<Value> grads,
           SmallVectorImpl<Value> &out,
           function_ref<std::pair<Value, Value>(Emit &, Value, Value, Value, Value)>
               f) {
  out.assign(2, Value());
  if (!grads[0])
    return success();
  Emit e{b, op->getLoc()};
  auto [dl, dr] = f(e, op->getOperand(0), op->getOperand(1), op->getResult(0),
                    grads[0]);
  out[0] = dl;
  out[1] = dr;
  return success();
}

LogicalResult AddOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                              SmallVectorImpl<Value> &out) {
  return binaryRule(*this, b, grads, out,
                    [](Emit &, Value, Value, Value, Value g) {
                      return std::make_pair(g, g);
                    });
}

LogicalResult SubOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                              SmallVectorImpl<Value> &out) {
  return binaryRule(*this, b, grads, out,
                    [](Emit &e, Value, Value, Value, Value g) {
                      return std::make_pair(g, e.neg(g));
                    });
}

LogicalResult MulOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                              SmallVectorImpl<Value> &out) {
  return binaryRule(*this, b, grads, out,
                    [](Emit &e, Value x, Value y, Value, Value g) {
                      return std::make_pair(e.mul(g, y), e.mul(g, x));
                    });
}

LogicalResult DivOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                              SmallVectorImpl<Value> &out) {
  return binaryRule(*this, b, grads, out,
                    [](Emit &e, Value, Value y, Value q, Value g) {
                      Value dx = e.div(g, y);
                      return std::make_pair(dx, e.neg(e.mul(dx, q)));
                    });
}

LogicalResult PowOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                              SmallVectorImpl<Value> &out) {
  return binaryRule(
      *this, b, grads, out, [](Emit &e, Value x, Value y, Value p, Value g) {
        // d/dx x^y = y x^(y-1); d/dy x^y = x^y log(x), which is 0 at x = 0
        // for y >= 0 (0^y is constant there; the product would be 0 * -inf).
        Value xm1 = PowOp::create(e.b, e.loc, x, e.sub(y, e.splat(y, 1.0)));
        Value dx = e.mul(g, e.mul(y, xm1));
        Value dy = e.mul(g, e.mul(p, LogOp::create(e.b, e.loc, x)));
        Value zeroBase = AndOp::create(
            e.b, e.loc, EqOp::create(e.b, e.loc, x, e.zerosLike(x)),
            GeOp::create(e.b, e.loc, y, e.zerosLike(y)));
        dy = e.select(zeroBase, e.zerosLike(dy), dy);
        return std::make_pair(dx, dy);
      });
}

/// max/min: the gradient goes to the chosen operand, split evenly on ties
/// (as PyTorch's maximum/minimum do).
static std::pair<Value, Value> selectRule(Emit &e, Value x, Value y, Value g,
                                          bool isMax) {
  Value first = isMax ? Value(GtOp::create(e.b, e.loc, x, y))
                      : Value(LtOp::create(e.b, e.loc, x, y));
  Value second = isMax ? Value(LtOp::create(e.b, e.loc, x, y))
                       : Value(GtOp::create(e.b, e.loc, x, y));
  Value half = e.mul(g, e.splat(g, 0.5));
  Value tie = EqOp::create(e.b, e.loc, x, y);
  Value dx = e.select(first, g, e.where(tie, half));
  Value dy = e.select(second, g, e.where(tie, half));
  return {dx, dy};
}

LogicalResult MaxOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                              SmallVectorImpl<Value> &out) {
  return binaryRule(*this, b, grads, out,
                    [](Emit &e, Value x, Value y, Value, Value g) {
                      return selectRule(e, x, y, g, /*isMax=*/true);
                    });
}

LogicalResult MinOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                              SmallVectorImpl<Value> &out) {
  return binaryRule(*this, b, grads, out,
                    [](Emit &e, Value x, Value y, Value, Value g) {
                      return selectRule(e, x, y, g, /*isMax=*/false);
                    });
}

LogicalResult RemOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                              SmallVectorImpl<Value> &out) {
  // x - trunc(x / y) * y: the quotient is piecewise constant.
  return binaryRule(
      *this, b, grads, out, [](Emit &e, Value x, Value y, Value r, Value g) {
        Value quotient = e.div(e.sub(x, r), y);
        return std::make_pair(g, e.neg(e.mul(g, quotient)));
      });
}

LogicalResult SelectOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                 SmallVectorImpl<Value> &out) {
  out.assign(3, Value());
  if (!grads[0])
    return success();
  Emit e{b, getLoc()};
  out[1] = e.where(getCondition(), grads[0]);
  out[2] = e.select(getCondition(), e.zerosLike(grads[0]), grads[0]);
  return success();
}

LogicalResult CastOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                               SmallVectorImpl<Value> &out) {
  out.assign(1, Value());
  auto from = typeOf(getOperand()), to = typeOf(getResult());
  if (!grads[0] || !isa<FloatType>(from.getElementType()) ||
      !isa<FloatType>(to.getElementType()))
    return success();
  out[0] = CastOp::create(b, getLoc(), from, grads[0]);
  return success();
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

LogicalResult BroadcastInDimOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                         SmallVectorImpl<Value> &out) {
  out.assign(1, Value());
  if (!grads[0])
    return success();
  auto in = typeOf(getOperand()), res = typeOf(getResult());
  // Sum over the new dimensions and the expanded size-1 ones.
  SmallVector<int64_t> reduced;
  ArrayRef<int64_t> dims = getDims();
  for (int64_t d = 0; d < res.getRank(); ++d) {
    auto it = llvm::find(dims, d);
    if (it == dims.end() || (in.getDimSize(it - dims.begin()) == 1 &&
                             res.getDimSize(d) != 1))
      reduced.push_back(d);
  }
  Value g = grads[0];
  if (!reduced.empty())
    g = ReduceSumOp::create(b, getLoc(), g, reduced);
  out[0] = Emit{b, getLoc()}.reshape(g, in);
  return success();
}

LogicalResult ReshapeOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                  SmallVectorImpl<Value> &out) {
  out.assign(1, Value());
  if (grads[0])
    out[0] = ReshapeOp::create(b, getLoc(), typeOf(getOperand()), grads[0]);
  return success();
}

LogicalResult TransposeOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                    SmallVectorImpl<Value> &out) {
  out.assign(1, Value());
  if (!grads[0])
    return success();
  SmallVector<int64_t> inverse(getPerm().size());
  for (auto [i, p] : llvm::enumerate(getPerm()))
    inverse[p] = i;
  out[0] = TransposeOp::create(b, getLoc(), grads[0], inverse);
  return success();
}

LogicalResult SliceOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                SmallVectorImpl<Value> &out) {
  out.assign(1, Value());
  if (!grads[0])
    return success();
  Emit e{b, getLoc()};
  auto in = typeOf(getOperand());
  Type element = in.getElementType();
  Value zero = e.scalarZero(element);
  // Spread each strided dimension: g[k] moves to k * stride, zeros between
  // (a size-1 dimension after it padded to `stride`, merged, cut to the
  // span start.. of the operand).
  Value g = grads[0];
  SmallVector<int64_t> start(getStart()), limit(getLimit());
  for (auto [d, stride] : llvm::enumerate(getStride())) {
    if (stride == 1)
      continue;
    auto type = typeOf(g);
    int64_t n = type.getDimSize(d), rank = type.getRank();
    SmallVector<int64_t> split(type.getShape());
    split.insert(split.begin() + d + 1, 1);
    g = e.reshape(g, RankedTensorType::get(split, element));
    SmallVector<int64_t> low(rank + 1, 0), high(rank + 1, 0);
    high[d + 1] = stride - 1;
    g = PadOp::create(b, getLoc(), g, zero, low, high);
    SmallVector<int64_t> merged(type.getShape());
    merged[d] = n * stride;
    g = e.reshape(g, RankedTensorType::get(merged, element));
    // Every taken element lies below limit; keep what fits in the operand.
    int64_t span = std::min(n * stride, in.getDimSize(d) - start[d]);
    SmallVector<int64_t> from(rank, 0), to(merged), step(rank, 1);
    to[d] = span;
    g = SliceOp::create(b, getLoc(), g, from, to, step);
    limit[d] = start[d] + span;
  }
  SmallVector<int64_t> high;
  for (auto [d, l] : llvm::enumerate(limit))
    high.push_back(in.getDimSize(d) - l);
  out[0] = PadOp::create(b, getLoc(), g, zero, start, high);
  return success();
}

LogicalResult ReverseOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                  SmallVectorImpl<Value> &out) {
  out.assign(1, Value());
  if (grads[0])
    out[0] = ReverseOp::create(b, getLoc(), grads[0], getDims());
  return success();
}

LogicalResult ConcatOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                 SmallVectorImpl<Value> &out) {
  out.assign(getNumOperands(), Value());
  if (!grads[0])
    return success();
  auto res = typeOf(getResult());
  SmallVector<int64_t> start(res.getRank(), 0), limit(res.getShape()),
      stride(res.getRank(), 1);
  int64_t offset = 0, dim = getDim();
  for (auto [i, v] : llvm::enumerate(getOperands())) {
    int64_t size = typeOf(v).getDimSize(dim);
    start[dim] = offset;
    limit[dim] = offset + size;
    out[i] = SliceOp::create(b, getLoc(), grads[0], start, limit, stride);
    offset += size;
  }
  return success();
}

LogicalResult PadOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                              SmallVectorImpl<Value> &out) {
  out.assign(2, Value());
  if (!grads[0])
    return success();
  // Copies of the operand's own elements: each adds back where it came from.
  if (getMode() != "constant") {
    out[0] = PadGradOp::create(b, getLoc(), typeOf(getOperand()), grads[0],
                               getLow(), getHigh(), getMode());
    return success();
  }
  auto in = typeOf(getOperand());
  // A negative amount removed elements (a crop, as a ZeroPad2d with negative
  // padding makes): their gradient is 0. The gradient is then dy padded by
  // the opposite amounts, zeros where the op cut and cut where it padded.
  if (llvm::any_of(getLow(), [](int64_t v) { return v < 0; }) ||
      llvm::any_of(getHigh(), [](int64_t v) { return v < 0; })) {
    Value zero = Emit{b, getLoc()}.scalarZero(in.getElementType());
    SmallVector<int64_t> low, high;
    for (auto [l, h] : llvm::zip_equal(getLow(), getHigh())) {
      low.push_back(-l);
      high.push_back(-h);
    }
    out[0] = PadOp::create(b, getLoc(), grads[0], zero, low, high);
    return success();
  }
  SmallVector<int64_t> limit, stride(in.getRank(), 1);
  for (auto [d, low] : llvm::enumerate(getLow()))
    limit.push_back(low + in.getDimSize(d));
  out[0] = SliceOp::create(b, getLoc(), grads[0], getLow(), limit, stride);
  return success();
}

LogicalResult GatherOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                 SmallVectorImpl<Value> &out) {
  out.assign(2, Value());
  if (!grads[0])
    return success();
  auto data = typeOf(getOperand());
  // From an empty axis (no index, then) nothing was read: the gradient is
  // zeros, and a scatter into a dimension of size 0 would not verify.
  if (data.getDimSize(getAxis()) == 0) {
    out[0] = Emit{b, getLoc()}.zerosLike(getOperand());
    return success();
  }
  out[0] = ScatterAddOp::create(b, getLoc(), grads[0], getIndices(), getAxis(),
                                data.getDimSize(getAxis()));
  return success();
}

LogicalResult ScatterAddOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                     SmallVectorImpl<Value> &out) {
  out.assign(2, Value());
  if (grads[0])
    out[0] = GatherOp::create(b, getLoc(), grads[0], getIndices(), getAxis());
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

LogicalResult ReduceSumOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                    SmallVectorImpl<Value> &out) {
  out.assign(1, Value());
  if (grads[0])
    out[0] = Emit{b, getLoc()}.unreduce(grads[0], typeOf(getOperand()), getDims());
  return success();
}

/// max/min reductions: the gradient is shared evenly by the elements that
/// attain the extreme (as PyTorch's amax/amin).
static LogicalResult extremumRule(Operation *op, ArrayRef<int64_t> dims,
                                  OpBuilder &b, ArrayRef<Value> grads,
                                  SmallVectorImpl<Value> &out) {
  out.assign(1, Value());
  if (!grads[0])
    return success();
  Emit e{b, op->getLoc()};
  Value x = op->getOperand(0);
  auto type = typeOf(x);
  Value hit = EqOp::create(b, e.loc, x, e.unreduce(op->getResult(0), type, dims));
  Value ones = CastOp::create(b, e.loc, type, hit);
  Value count = ReduceSumOp::create(b, e.loc, ones, dims);
  Value share = e.div(grads[0], count);
  out[0] = e.where(hit, e.unreduce(share, type, dims));
  return success();
}

LogicalResult ReduceMaxOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                    SmallVectorImpl<Value> &out) {
  return extremumRule(*this, getDims(), b, grads, out);
}

LogicalResult ReduceMinOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                    SmallVectorImpl<Value> &out) {
  return extremumRule(*this, getDims(), b, grads, out);
}

LogicalResult ReduceProdOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                     SmallVectorImpl<Value> &out) {
  out.assign(1, Value());
  if (!grads[0])
    return success();
  // d/dx_i prod = the product of the others: prod / x_i where no element of
  // the group is zero; at the only zero of a group, the product of the
  // nonzero others; 0 elsewhere (as PyTorch's prod).
  Emit e{b, getLoc()};
  Value x = getOperand();
  auto type = typeOf(x);
  ArrayRef<int64_t> dims = getDims();
  Value isZero = EqOp::create(b, e.loc, x, e.zerosLike(x));
  Value nonzero = e.select(isZero, e.splat(x, 1.0), x);
  Value nonzeroProd = ReduceProdOp::create(b, e.loc, nonzero, dims);
  Value zeros = ReduceSumOp::create(
      b, e.loc, CastOp::create(b, e.loc, type, isZero), dims);
  Value noZero = EqOp::create(b, e.loc, zeros, e.zerosLike(zeros));
  Value oneZero = EqOp::create(b, e.loc, zeros, e.splat(zeros, 1.0));
  Value g = e.unreduce(grads[0], type, dims);
  Value atNonzero = e.where(e.unreduce(noZero, type, dims),
                            e.div(e.unreduce(e.mul(grads[0], getResult()), type,
                                             dims),
                                  nonzero));
  Value atZero = e.where(e.unreduce(oneZero, type, dims),
                         e.mul(g, e.unreduce(nonzeroProd, type, dims)));
  out[0] = e.select(isZero, atZero, atNonzero);
  return success();
}

LogicalResult CumSumOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                 SmallVectorImpl<Value> &out) {
  out.assign(1, Value());
  if (grads[0])
    out[0] = CumSumOp::create(b, getLoc(), grads[0], getDim(), getExclusive(),
                              !getReverse());
  return success();
}

//===----------------------------------------------------------------------===//
// Linear algebra and neural-network ops
//===----------------------------------------------------------------------===//

/// Sums `g` (batch dimensions `[..., r0, r1]` of a matmul result) over the
/// batch dimensions along which an operand of type `type` was broadcast:
/// the leading ones it lacks and those where it has size 1.
static Value sumToOperand(Emit &e, Value g, RankedTensorType type) {
  auto gt = typeOf(g);
  int64_t extra = gt.getRank() - type.getRank();
  SmallVector<int64_t> reduced;
  for (int64_t d = 0; d < gt.getRank() - 2; ++d)
    if (d < extra ||
        (type.getDimSize(d - extra) == 1 && gt.getDimSize(d) != 1))
      reduced.push_back(d);
  if (!reduced.empty())
    g = ReduceSumOp::create(e.b, e.loc, g, reduced);
  return e.reshape(g, RankedTensorType::get(type.getShape(),
                                            gt.getElementType()));
}

LogicalResult MatmulOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                 SmallVectorImpl<Value> &out) {
  out.assign(2, Value());
  if (!grads[0])
    return success();
  Emit e{b, getLoc()};
  Value g = grads[0], lhs = getLhs(), rhs = getRhs();
  bool tl = getTransposeLhs(), tr = getTransposeRhs();
  auto lt = typeOf(lhs), rt = typeOf(rhs), gt = typeOf(g);
  // With C = op(A) op(B): dA and dB in the stored layouts of A and B, over
  // C's batch dimensions, then summed over those A or B was broadcast along.
  Value da = !tl ? MatmulOp::create(b, e.loc, g, rhs, false, !tr)
                 : MatmulOp::create(b, e.loc, rhs, g, tr, true);
  out[0] = sumToOperand(e, da, lt);

  // A matrix shared by every batch (B without batch dimensions other than
  // 1s) and an A that is not broadcast itself: fold the batch into the rows,
  // one [k, rows] x [rows, n] product instead of a batch of them and a sum
  // (with one batch, [1, s, k], a sum over the size-1 dimension: a copy
  // of the gradient).
  int64_t batch = gt.getNumElements() / std::max<int64_t>(
                      1, gt.getDimSize(gt.getRank() - 2) *
                             gt.getDimSize(gt.getRank() - 1));
  int64_t lhsBatch = lt.getNumElements() /
                     std::max<int64_t>(1, lt.getDimSize(lt.getRank() - 2) *
                                              lt.getDimSize(lt.getRank() - 1));
  bool sharedRhs = llvm::all_of(rt.getShape().drop_back(2),
                                [](int64_t d) { return d == 1; });
  if (sharedRhs && !tl && (batch > 1 || gt.getRank() > 2) &&
      lhsBatch == batch && lt.getNumElements() > 0) {
    int64_t k = lt.getShape().back(), n = gt.getShape().back();
    int64_t rows = lt.getNumElements() / k;
    Value a2 = e.reshape(lhs, RankedTensorType::get({rows, k}, lt.getElementType()));
    Value g2 = e.reshape(g, RankedTensorType::get({rows, n}, gt.getElementType()));
    Value db = !tr ? MatmulOp::create(b, e.loc, a2, g2, true, false)
                   : MatmulOp::create(b, e.loc, g2, a2, true, false);
    out[1] = e.reshape(db, rt);
    return success();
  }
  Value db = !tr ? MatmulOp::create(b, e.loc, lhs, g, !tl, false)
                 : MatmulOp::create(b, e.loc, g, lhs, true, tl);
  out[1] = sumToOperand(e, db, rt);
  return success();
}

LogicalResult SoftmaxOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                  SmallVectorImpl<Value> &out) {
  out.assign(1, Value());
  if (grads[0])
    out[0] = SoftmaxGradOp::create(b, getLoc(), getResult(), grads[0], getDim());
  return success();
}

LogicalResult LogSoftmaxOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                     SmallVectorImpl<Value> &out) {
  out.assign(1, Value());
  if (grads[0])
    out[0] = LogSoftmaxGradOp::create(b, getLoc(), getResult(), grads[0],
                                      getDim());
  return success();
}

/// The gradient that flows to a normalization's input through its
/// statistics: mean = sum(x) / n and rstd = 1 / sqrt(var + eps) with var =
/// mean((x - mean)^2) (layer_norm) or mean(x^2) (rms_norm, centered = false)
/// over dims axis.., so d mean / dx = 1 / n and d rstd / dx = -rstd^3 (x -
/// mean) / n. Computed in the statistics' element type, returned in x's.
static Value statisticsGrad(Emit &e, Value x, int64_t axis, Value mean,
                            Value gMean, Value rstd, Value gRstd) {
  auto xType = typeOf(x);
  auto statType = typeOf(rstd);
  SmallVector<int64_t> dims;
  int64_t n = 1;
  for (int64_t d = axis; d < xType.getRank(); ++d) {
    dims.push_back(d);
    n *= xType.getDimSize(d);
  }
  auto wide = RankedTensorType::get(xType.getShape(), statType.getElementType());
  Value xs = x;
  if (wide != xType)
    xs = CastOp::create(e.b, e.loc, wide, x);
  Value total;
  if (gMean)
    total = e.mul(e.unreduce(gMean, wide, dims), e.splat(xs, 1.0 / n));
  if (gRstd) {
    // -g_rstd * rstd^3 / n, broadcast, times the centered input.
    Value r3 = e.mul(rstd, e.mul(rstd, rstd));
    Value coef = e.mul(e.mul(gRstd, r3), e.splat(rstd, -1.0 / n));
    Value centered = mean ? e.sub(xs, e.unreduce(mean, wide, dims)) : xs;
    Value t = e.mul(e.unreduce(coef, wide, dims), centered);
    total = total ? e.add(total, t) : t;
  }
  if (wide != xType)
    total = CastOp::create(e.b, e.loc, xType, total);
  return total;
}

LogicalResult LayerNormOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                    SmallVectorImpl<Value> &out) {
  out.assign(getNumOperands(), Value());
  Emit e{b, getLoc()};
  if (grads[0]) {
    auto scale = typeOf(getScale());
    auto op = LayerNormGradOp::create(b, getLoc(), typeOf(getOperand()), scale,
                                      scale, getOperand(), getScale(), getMean(),
                                      getRstd(), grads[0], getAxis());
    out[0] = op.getDx();
    out[1] = op.getDscale();
    if (getBias())
      out[2] = op.getDbias();
  }
  // ONNX LayerNormalization also outputs Mean and InvStdDev.
  if (grads[1] || grads[2]) {
    Value dx = statisticsGrad(e, getOperand(), getAxis(), getMean(), grads[1],
                              getRstd(), grads[2]);
    out[0] = out[0] ? e.add(out[0], dx) : dx;
  }
  return success();
}

LogicalResult RmsNormOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                  SmallVectorImpl<Value> &out) {
  out.assign(2, Value());
  Emit e{b, getLoc()};
  if (grads[0]) {
    auto op = RmsNormGradOp::create(b, getLoc(), typeOf(getOperand()),
                                    typeOf(getScale()), getOperand(), getScale(),
                                    getRstd(), grads[0], getAxis());
    out[0] = op.getDx();
    out[1] = op.getDscale();
  }
  if (grads[1]) {
    Value dx = statisticsGrad(e, getOperand(), getAxis(), Value(), Value(),
                              getRstd(), grads[1]);
    out[0] = out[0] ? e.add(out[0], dx) : dx;
  }
  return success();
}

LogicalResult CrossEntropyOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                       SmallVectorImpl<Value> &out) {
  out.assign(2, Value());
  if (grads[0])
    out[0] = CrossEntropyGradOp::create(b, getLoc(), typeOf(getLogits()),
                                        getLogits(), getLabels(), grads[0],
                                        getIgnoreIndex());
  return success();
}

LogicalResult DropoutOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                  SmallVectorImpl<Value> &out) {
  out.assign(getNumOperands(), Value());
  if (!grads[0])
    return success();
  Emit e{b, getLoc()};
  double keep = 1.0 - getRatio().convertToDouble();
  Value scaled = e.mul(grads[0], e.splat(grads[0], 1.0 / keep));
  out[0] = e.where(getMask(), scaled);
  return success();
}

LogicalResult AttentionOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                    SmallVectorImpl<Value> &out) {
  out.assign(getNumOperands(), Value());
  if (grads[1])
    return emitOpError("has a gradient for its logsumexp, which is the "
                       "backward's own statistic (no VJP rule for it)");
  if (!grads[0])
    return success();
  auto op = AttentionGradOp::create(
      b, getLoc(), getQuery().getType(), getKey().getType(),
      getValue().getType(), getQuery(), getKey(), getValue(), getResult(),
      getLogsumexp(), grads[0], getMask(), getScaleAttr(), getCausalAttr());
  out[0] = op.getDquery();
  out[1] = op.getDkey();
  out[2] = op.getDvalue();
  // The mask gets none: dtcc-graph-fuse-attention fuses only masks that no
  // parameter reaches.
  return success();
}
