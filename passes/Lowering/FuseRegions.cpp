//===- FuseRegions.cpp - elementwise chains into generated kernels --------===//
//
// Groups producer-consumer chains of elementwise dgraph ops (with the
// broadcasts and splat constants they read) into fused regions: each region
// becomes one `linalg.generic` on memrefs in a function of the nested
// `dtcc_kernels` module, and a `dgraph.fused` call of it replaces its ops.
// With `rows`, reductions along the last axis join too (with the
// elementwise ops on their one-value-per-row results and the broadcasts of
// those back over the row, and the softmax and norm ops written as such
// ops in their kernels' order): such a region becomes the row form, loops over
// the rows that compute each row in passes, a row's intermediates in
// row-sized buffers. The values inside a region never reach memory; the
// lowering then plans only the region's inputs and outputs.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Passes.h"

#include "dialects/Graph/IR/GraphOps.h"
#include "dialects/Shard/IR/ShardOps.h"
#include "runtime/base/RowReduction.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/TypeSwitch.h"

#include <functional>
#include <limits>

namespace dtcc::lowering {
#define GEN_PASS_DEF_FUSEREGIONS
#include "passes/Lowering/Passes.h.inc"
} // namespace dtcc::lowering

using namespace mlir;
using namespace dtcc;

namespace {

constexpr StringLiteral kKernelsModule = "dtcc_kernels";

/// The attribute that gives a reduction of a decomposed softmax its
/// kernel's order (it never leaves the pass).
constexpr StringLiteral kRowOrderAttr = "dtcc.row_order";

/// The type a region of element type `t` computes in: f32 for the half
/// types (their kernels compute in f32 too, rounding each result; a region
/// rounds only what it writes), else `t`.
Type computeType(Type t) {
  return t.isBF16() || t.isF16() ? Float32Type::get(t.getContext()) : t;
}

/// Whether regions compute on elements of type `e` (the float types).
bool isRegionFloat(Type e) {
  return e.isF32() || e.isF64() || e.isBF16() || e.isF16();
}

/// Bytes of one element of the type a region of element type `e` computes
/// in (a row buffer's element).
int64_t computeBytes(Type e) {
  return std::max<int64_t>(1, computeType(e).getIntOrFloatBitWidth() / 8);
}

/// A reshape or a broadcast: a region member that computes nothing (a view
/// of its operand, a value per row).
bool isRowView(Operation *op) {
  return isa<graph::ReshapeOp, graph::BroadcastInDimOp>(op);
}

/// A comparison of floats: an i1 result from operands of a region's type.
bool isFloatCompare(Operation *op) {
  if (!isa<graph::EqOp, graph::LtOp, graph::LeOp, graph::GtOp, graph::GeOp>(
          op))
    return false;
  auto type = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
  return type && isRegionFloat(type.getElementType());
}

/// A logical op of i1 tensors (the masks a comparison makes).
bool isMaskLogic(Operation *op) {
  if (!isa<graph::AndOp, graph::OrOp, graph::XorOp, graph::NotOp>(op))
    return false;
  auto type = dyn_cast<RankedTensorType>(op->getResult(0).getType());
  return type && type.getElementType().isInteger(1);
}

/// The attribute that ties a decomposed op's ops together (it never leaves
/// the pass).
constexpr StringLiteral kRowChainAttr = "dtcc.row_chain";

/// A cast between float types of a decomposed norm: its statistics from
/// double to their type or to the compute type. (Casts elsewhere change
/// the type a region iterates over; regions do not take them.)
bool isChainCast(Operation *op) {
  if (!isa<graph::CastOp>(op) || !op->hasAttr(kRowChainAttr))
    return false;
  return isRegionFloat(getElementTypeOrSelf(op->getOperand(0).getType())) &&
         isRegionFloat(getElementTypeOrSelf(op->getResult(0).getType()));
}

/// Copies where `from` runs (its pipeline stage, its schedule's task, its
/// layer) to `to`, an op that computes it or a region that takes it.
void copyPlacement(Operation *from, Operation *to) {
  for (StringRef attr :
       {StringRef(shard::kStageAttr), StringRef(shard::kTaskAttr),
        StringRef(graph::kLayerAttr)})
    if (Attribute value = from->getAttr(attr))
      to->setAttr(attr, value);
}

/// Whether `t` is a tensor of a static shape with at least one element (an
/// op over no element computes nothing: no region takes it).
bool hasElements(Type t) {
  auto type = dyn_cast<RankedTensorType>(t);
  return type && type.hasStaticShape() && type.getNumElements() > 0;
}

/// Whether a region computes `op`: a float elementwise op whose scalar form
/// emitScalar knows, a comparison of floats, a logical op of their masks,
/// or a select between floats.
bool isFusableCompute(Operation *op) {
  if (op->getNumResults() != 1 || !hasElements(op->getResult(0).getType()))
    return false;
  if (isFloatCompare(op) || isMaskLogic(op) || isChainCast(op))
    return true;
  if (!isa<graph::AddOp, graph::SubOp, graph::MulOp, graph::DivOp,
           graph::MaxOp, graph::MinOp, graph::NegOp, graph::AbsOp,
           graph::ExpOp, graph::LogOp, graph::SqrtOp, graph::RsqrtOp,
           graph::ReciprocalOp, graph::TanhOp, graph::SigmoidOp,
           graph::ReluOp, graph::SiluOp, graph::ErfOp, graph::GeluOp,
           graph::GeluGradOp, graph::SiluGradOp, graph::PowOp,
           graph::SelectOp>(op))
    return false;
  auto type = dyn_cast<RankedTensorType>(op->getResult(0).getType());
  return type && isRegionFloat(type.getElementType());
}

/// The i1 tensor of `full`'s shape: a mask in a region over `full`.
RankedTensorType maskOf(RankedTensorType full) {
  return RankedTensorType::get(full.getShape(),
                               IntegerType::get(full.getContext(), 1));
}

/// Whether a region over `full` holds a value of type `t` element by
/// element: of `full`'s type, or a mask of its shape.
bool isElementOf(Type t, RankedTensorType full) {
  return t == full || t == maskOf(full);
}

/// The float type a region that computes `op` iterates over: its operands'
/// for a comparison, its result's for the others; null for a logical op of
/// masks, which only joins the regions of its operands.
RankedTensorType regionTypeOf(Operation *op) {
  if (isMaskLogic(op))
    return {};
  Value v = isFloatCompare(op) ? op->getOperand(0) : op->getResult(0);
  return cast<RankedTensorType>(v.getType());
}

/// A broadcast a region reads through an indexing map instead of a buffer:
/// it keeps the order of dimensions (no transpose) and really broadcasts.
bool isInlinedBroadcast(Operation *op) {
  auto b = dyn_cast_or_null<graph::BroadcastInDimOp>(op);
  if (!b || b.getOperand().getType() == b.getType())
    return false;
  ArrayRef<int64_t> dims = b.getDims();
  return llvm::is_sorted(dims) &&
         std::adjacent_find(dims.begin(), dims.end()) == dims.end();
}

/// A splat constant a region reads as a scalar (a float or a mask's i1).
DenseElementsAttr inlinedSplat(Operation *op) {
  auto c = dyn_cast_or_null<graph::ConstantOp>(op);
  if (!c)
    return {};
  auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
  if (!dense || !dense.isSplat())
    return {};
  Type e = dense.getElementType();
  return isRegionFloat(e) || e.isInteger(1) ? dense : DenseElementsAttr();
}

/// A region's scalar `s` as the type it computes in (a float read widened;
/// a mask's i1 as it is).
Value widened(OpBuilder &b, Location loc, Value s, Type compute) {
  return isa<FloatType>(s.getType()) && s.getType() != compute
             ? arith::ExtFOp::create(b, loc, compute, s).getResult()
             : s;
}

/// A region's scalar `s` as the element type `e` it is written as.
Value narrowed(OpBuilder &b, Location loc, Value s, Type e) {
  return s.getType() != e ? arith::TruncFOp::create(b, loc, e, s).getResult()
                          : s;
}

/// Whether every operand of `op` is a value of the region it computes in
/// element by element (of its type or a mask of its shape; a logical op's
/// of its result's type).
bool operandsFit(Operation *op) {
  if (isChainCast(op))
    return false;
  RankedTensorType full = regionTypeOf(op);
  Type type = op->getResult(0).getType();
  return llvm::all_of(op->getOperandTypes(), [&](Type t) {
    return full ? isElementOf(t, full) : t == type;
  });
}

/// Whether `t` holds one value per row of the full type `full` ([rows...,
/// C]): `[rows...]` or `[rows..., 1]`, of its element type or, in a
/// decomposed norm, another float type (its statistics in double; each op
/// computes in the type of its operands).
bool isRowOf(Type t, RankedTensorType full) {
  auto type = dyn_cast<RankedTensorType>(t);
  if (!type || !isRegionFloat(type.getElementType()) || full.getRank() < 2 ||
      full.getShape().back() == 1)
    return false;
  ArrayRef<int64_t> rows = full.getShape().drop_back();
  ArrayRef<int64_t> shape = type.getShape();
  return shape == rows || (shape.size() == rows.size() + 1 &&
                           shape.drop_back() == rows && shape.back() == 1);
}

/// A reduction a row region computes: the sum or the maximum of a float
/// tensor of rank 2 or more along its last axis (longer than 1).
bool isRowReduction(Operation *op) {
  if (!isa<graph::ReduceSumOp, graph::ReduceMaxOp>(op))
    return false;
  auto in = cast<RankedTensorType>(op->getOperand(0).getType());
  auto dims = op->getAttrOfType<DenseI64ArrayAttr>("dims");
  return isRegionFloat(in.getElementType()) && hasElements(in) && dims &&
         dims.size() == 1 && in.getRank() >= 2 && dims[0] == in.getRank() - 1 &&
         isRowOf(op->getResult(0).getType(), in);
}

/// A reshape between the two forms of one value per row of `full`.
bool isRowReshape(Operation *op, RankedTensorType full) {
  return isa<graph::ReshapeOp>(op) &&
         isRowOf(op->getOperand(0).getType(), full) &&
         isRowOf(op->getResult(0).getType(), full);
}

/// A broadcast of one value per row of `full` over the row.
bool isRowBroadcast(Operation *op, RankedTensorType full) {
  auto b = dyn_cast<graph::BroadcastInDimOp>(op);
  if (!b || b.getType() != full || !isRowOf(b.getOperand().getType(), full))
    return false;
  ArrayRef<int64_t> dims = b.getDims();
  return llvm::equal(dims, llvm::seq<int64_t>(0, dims.size()));
}

/// The bytes of row buffers a row region may use: they live on the stack
/// of the thread that runs the region.
constexpr int64_t kMaxRowBufferBytes = 256 * 1024;

/// Whether `op`'s result is a tensor of rank 2 or more whose last dimension
/// is longer than 1, and its integer attribute `attr` names that axis.
bool overLastAxis(Operation *op, StringRef attr) {
  auto type = dyn_cast<RankedTensorType>(op->getResult(0).getType());
  auto axis = op->getAttrOfType<IntegerAttr>(attr);
  return type && hasElements(type) && axis && type.getRank() >= 2 &&
         type.getShape().back() >= 2 && axis.getInt() == type.getRank() - 1;
}

/// A softmax, log-softmax or one of their gradients along the last axis of
/// a float tensor of rank 2 or more: a row region computes it from its
/// decomposition.
bool isRowSoftmax(Operation *op) {
  return isa<graph::SoftmaxOp, graph::LogSoftmaxOp, graph::SoftmaxGradOp,
             graph::LogSoftmaxGradOp>(op) &&
         overLastAxis(op, "dim") &&
         isRegionFloat(getElementTypeOrSelf(op->getResult(0).getType()));
}

/// A layer_norm or rms_norm over the last axis only, of a float tensor of
/// rank 2 or more: a row region computes it from its decomposition.
bool isRowNorm(Operation *op) {
  return isa<graph::LayerNormOp, graph::RmsNormOp>(op) &&
         overLastAxis(op, "axis") &&
         llvm::all_of(op->getResultTypes(), [](Type t) {
           return isRegionFloat(getElementTypeOrSelf(t));
         });
}

/// A layer_norm_grad or rms_norm_grad over the last axis only, of a float
/// tensor of rank 2 or more: a row region computes its dx from its
/// decomposition (its parameter gradients stay a kernel).
bool isRowNormGrad(Operation *op) {
  return isa<graph::LayerNormGradOp, graph::RmsNormGradOp>(op) &&
         overLastAxis(op, "axis") &&
         llvm::all_of(op->getOperandTypes(), [](Type t) {
           return isRegionFloat(getElementTypeOrSelf(t));
         });
}

/// A softmax-family op or a norm written as the ops a row region computes,
/// in the order of operations of its kernel (runtime/device/cpu/
/// NNKernels.cpp, TrainingKernels.cpp), and what it takes to write it back
/// as the op when no region takes its ops.
struct Decomposition {
  int64_t id;
  OperationName name;
  Location loc;
  SmallVector<Type> types;
  NamedAttrList attrs;
  /// Where the chain reads each of the op's operands (op, operand index).
  SmallVector<std::pair<Operation *, unsigned>> reads;
  /// The ops, in program order.
  SmallVector<Operation *> chain;
  /// The values that replace the op's results, result by result.
  SmallVector<Value> results;
  /// The ops a region takes as members: all but the splat constants and
  /// the broadcasts of a norm's scale and bias, which regions read in place.
  SmallVector<Operation *> members;
  /// Whether one region takes all its members or none does. A norm's
  /// statistics are values in double (a sum of f32 rows into f64) that no
  /// kernel computes, so it is never left in part; a softmax may be (its
  /// ops are ops, in several kernels).
  bool whole = false;
  /// Whether its region must take another op too (a norm's gradient on the
  /// CPU: its kernel makes dx and the parameter gradients in one pass over
  /// x and dy, which the region and the parameter gradients' kernel read
  /// twice; only a neighbour's pass saved pays for that).
  bool needsCompany = false;
};

Decomposition decompose(Operation *op, int64_t id) {
  OpBuilder b(op);
  Location loc = op->getLoc();
  auto full = cast<RankedTensorType>(op->getResult(0).getType());
  const int64_t rank = full.getRank();
  auto perRowOf = [&](Type element) {
    return RankedTensorType::get(full.getShape().drop_back(), element);
  };
  auto perRow = perRowOf(full.getElementType());
  Decomposition d{id,
                  op->getName(),
                  loc,
                  llvm::to_vector(op->getResultTypes()),
                  NamedAttrList(op->getAttrs()),
                  {},
                  {},
                  {},
                  {},
                  false};
  auto make = [&](StringRef name, Type type, ValueRange operands,
                  ArrayRef<NamedAttribute> attrs = {}) -> Value {
    OperationState state(loc, name);
    state.addOperands(operands);
    state.addTypes(type);
    state.addAttributes(attrs);
    Operation *o = b.create(state);
    o->setAttr(kRowChainAttr, b.getI64IntegerAttr(id));
    copyPlacement(op, o);
    d.chain.push_back(o);
    d.members.push_back(o);
    return o->getResult(0);
  };
  auto reduceAs = [&](StringRef name, Value v, StringRef order, Type type) {
    return make(name, type, v,
                {b.getNamedAttr("dims", b.getDenseI64ArrayAttr({rank - 1})),
                 b.getNamedAttr(kRowOrderAttr, b.getStringAttr(order))});
  };
  auto spread = [&](Value v) {
    SmallVector<int64_t> dims =
        llvm::to_vector(llvm::seq<int64_t>(0, rank - 1));
    return make("dgraph.broadcast_in_dim", full, v,
                {b.getNamedAttr("dims", b.getDenseI64ArrayAttr(dims))});
  };
  auto full2 = [&](StringRef name, Value l, Value r) {
    return make(name, full, {l, r});
  };
  // The chain reads operand `index` of the op as `reader`'s operand `at`
  // (by default the last op's operand 0).
  auto readsOperand = [&](unsigned index, Operation *reader = nullptr,
                          unsigned at = 0) {
    if (d.reads.size() <= index)
      d.reads.resize(index + 1, {nullptr, 0});
    d.reads[index] = {reader ? reader : d.chain.back(), at};
  };
  // The norms' and their gradients': values per row in double, splat
  // constants of them (read in place), casts between float types.
  auto perRow64 = perRowOf(b.getF64Type());
  auto splat64 = [&](double v) {
    Value c =
        make("dgraph.constant", perRow64, {},
             {b.getNamedAttr("value", DenseElementsAttr::get(
                                          perRow64, b.getF64FloatAttr(v)))});
    d.members.pop_back();
    return c;
  };
  auto perRow2 = [&](StringRef name, Value l, Value r) {
    return make(name, perRow64, {l, r});
  };
  auto cast = [&](Value v, Type element) {
    return make("dgraph.cast", perRowOf(element), v);
  };
  // A [C] operand of the op over the rows, read in place by the region.
  auto alongRows = [&](unsigned index) {
    Value r =
        make("dgraph.broadcast_in_dim", full, op->getOperand(index),
             {b.getNamedAttr("dims", b.getDenseI64ArrayAttr({rank - 1}))});
    d.members.pop_back();
    readsOperand(index);
    return r;
  };
  SmallVector<Value> results;
  if (isa<graph::LayerNormOp, graph::RmsNormOp>(op)) {
    // The norm kernels (NNKernels.cpp): a row's sums in double (blockedSum)
    // divided by its length in double, rstd = 1 / sqrt(var + eps) in
    // double, the statistics stored from double, the values computed from
    // the mean and rstd rounded to the compute type: layer norm
    // ((x - mean) * rstd) * scale + bias, its variance the sum of the
    // squared differences from that mean; RMS norm (x * rstd) * scale.
    d.whole = true;
    const bool layer = isa<graph::LayerNormOp>(op);
    Value x = op->getOperand(0);
    Value n = splat64(double(full.getShape().back()));
    Value centred = x, squares, mean;
    if (layer) {
      Value sum = reduceAs("dgraph.reduce_sum", x, "blocked_sum", perRow64);
      readsOperand(0);
      mean = perRow2("dgraph.div", sum, n);
      centred =
          full2("dgraph.sub", x, spread(cast(mean, full.getElementType())));
      squares = full2("dgraph.mul", centred, centred);
    } else {
      squares = full2("dgraph.mul", x, x);
      readsOperand(0);
    }
    Value sum = reduceAs("dgraph.reduce_sum", squares, "blocked_sum", perRow64);
    Value eps = splat64(
        op->getAttrOfType<FloatAttr>("epsilon").getValue().convertToDouble());
    Value rstd =
        make("dgraph.reciprocal", perRow64,
             make("dgraph.sqrt", perRow64,
                  perRow2("dgraph.add", perRow2("dgraph.div", sum, n), eps)));
    Value y =
        full2("dgraph.mul", centred, spread(cast(rstd, full.getElementType())));
    y = full2("dgraph.mul", y, alongRows(1));
    if (layer && op->getNumOperands() == 3)
      y = full2("dgraph.add", y, alongRows(2));
    results.push_back(y);
    // The statistics in their own type (f32 for a half norm).
    if (layer)
      results.push_back(
          cast(mean, getElementTypeOrSelf(op->getResult(1).getType())));
    results.push_back(
        cast(rstd, getElementTypeOrSelf(op->getResults().back().getType())));
  } else if (isa<graph::LayerNormGradOp, graph::RmsNormGradOp>(op)) {
    // The gradient kernels (TrainingKernels.cpp, makeNormGrad), per row in
    // the compute type: xhat = (x - mean) * rstd (RMS: x * rstd), g = dy *
    // scale, the means of g * xhat and of g (RMS: none) as blocked sums in
    // double times 1 / C in double, rounded to the compute type; dx = rstd
    // * ((g - mean(g)) - xhat * mean(g * xhat)). The parameter gradients
    // are the op's other kernel, dgraph.{layer,rms}_norm_param_grad: the
    // same sums over the rows, no member of a region.
    d.whole = true;
    d.needsCompany = true;
    const bool layer = isa<graph::LayerNormGradOp>(op);
    const unsigned rstdIndex = layer ? 3 : 2, dyIndex = rstdIndex + 1;
    Type element = full.getElementType();
    // A statistic over the row: cast to the rows' type when it has another
    // (a half norm's f32 statistics; in a region, the compute type), then
    // read in place through a broadcast unless a cast made it.
    auto statistic = [&](unsigned index) {
      Value v = op->getOperand(index);
      const bool other = getElementTypeOrSelf(v.getType()) != element;
      if (other)
        v = cast(v, element);
      Value over = spread(v);
      if (!other)
        d.members.pop_back();
      return over;
    };
    Value x = op->getOperand(0), dy = op->getOperand(dyIndex);
    Value rstd = statistic(rstdIndex);
    Value xhat =
        layer ? full2("dgraph.mul", full2("dgraph.sub", x, statistic(2)), rstd)
              : full2("dgraph.mul", x, rstd);
    Value g = full2("dgraph.mul", dy, alongRows(1));
    Value inv = splat64(1.0 / double(full.getShape().back()));
    auto rowMean = [&](Value v) {
      Value sum = reduceAs("dgraph.reduce_sum", v, "blocked_sum", perRow64);
      return spread(cast(perRow2("dgraph.mul", sum, inv), element));
    };
    Value meanGH = rowMean(full2("dgraph.mul", g, xhat));
    Value centred = layer ? full2("dgraph.sub", g, rowMean(g)) : g;
    results.push_back(
        full2("dgraph.mul", rstd,
              full2("dgraph.sub", centred, full2("dgraph.mul", xhat, meanGH))));
    // The parameter gradients, from the op's operands (also where a
    // recomposition reads them: x, [mean,] rstd and dy; scale from its
    // broadcast).
    OperationState state(loc, layer ? "dgraph.layer_norm_param_grad"
                                    : "dgraph.rms_norm_param_grad");
    SmallVector<unsigned> reads = {0};
    if (layer)
      reads.push_back(2);
    reads.append({rstdIndex, dyIndex});
    for (unsigned index : reads)
      state.addOperands(op->getOperand(index));
    state.addTypes(TypeRange(op->getResultTypes()).drop_front());
    state.addAttribute("axis", op->getAttr("axis"));
    Operation *params = b.create(state);
    params->setAttr(kRowChainAttr, b.getI64IntegerAttr(id));
    copyPlacement(op, params);
    d.chain.push_back(params);
    for (auto [i, index] : llvm::enumerate(reads))
      readsOperand(index, params, unsigned(i));
    llvm::append_range(results, params->getResults());
  } else if (isa<graph::SoftmaxOp, graph::LogSoftmaxOp>(op)) {
    // t = exp(x - max), sum in double; softmax: t * (1 / sum); log-softmax:
    // (x - max) - log(sum).
    Value x = op->getOperand(0);
    Value m = reduceAs("dgraph.reduce_max", x, "first_max", perRow);
    readsOperand(0);
    Value shifted = full2("dgraph.sub", x, spread(m));
    Value t = make("dgraph.exp", full, shifted);
    Value sum = reduceAs("dgraph.reduce_sum", t, "blocked_sum", perRow);
    if (isa<graph::SoftmaxOp>(op))
      results.push_back(full2("dgraph.mul", t,
                              spread(make("dgraph.reciprocal", perRow, sum))));
    else
      results.push_back(full2("dgraph.sub", shifted,
                              spread(make("dgraph.log", perRow, sum))));
  } else if (isa<graph::SoftmaxGradOp>(op)) {
    // dx = y * (dy - sum(dy * y)).
    Value y = op->getOperand(0), dy = op->getOperand(1);
    Value prod = full2("dgraph.mul", dy, y);
    d.reads = {{d.chain.back(), 1}, {d.chain.back(), 0}};
    Value sum = reduceAs("dgraph.reduce_sum", prod, "blocked_sum", perRow);
    results.push_back(
        full2("dgraph.mul", y, full2("dgraph.sub", dy, spread(sum))));
  } else {
    // log-softmax: dx = dy - exp(y) * sum(dy).
    Value y = op->getOperand(0), dy = op->getOperand(1);
    Value sum = reduceAs("dgraph.reduce_sum", dy, "blocked_sum", perRow);
    Operation *sumOp = d.chain.back();
    Value e = make("dgraph.exp", full, y);
    d.reads = {{d.chain.back(), 0}, {sumOp, 0}};
    results.push_back(
        full2("dgraph.sub", dy, full2("dgraph.mul", e, spread(sum))));
  }
  for (auto [old, now] : llvm::zip_equal(op->getResults(), results)) {
    d.results.push_back(now);
    old.replaceAllUsesWith(now);
  }
  op->erase();
  return d;
}

int64_t tensorBytes(Type t) {
  auto type = cast<RankedTensorType>(t);
  return type.getNumElements() *
         std::max<int64_t>(1, type.getElementTypeBitWidth() / 8);
}

/// The scalar form of a region's op. `x` are its operands' scalars.
Value emitScalar(OpBuilder &b, Location loc, Operation *op, ValueRange x) {
  Type t = x[0].getType();
  auto c = [&](double v) -> Value {
    return arith::ConstantOp::create(b, loc, t, b.getFloatAttr(t, v));
  };
  auto add = [&](Value l, Value r) -> Value { return arith::AddFOp::create(b, loc, l, r); };
  auto sub = [&](Value l, Value r) -> Value { return arith::SubFOp::create(b, loc, l, r); };
  auto mul = [&](Value l, Value r) -> Value { return arith::MulFOp::create(b, loc, l, r); };
  auto div = [&](Value l, Value r) -> Value { return arith::DivFOp::create(b, loc, l, r); };
  auto neg = [&](Value v) -> Value { return arith::NegFOp::create(b, loc, v); };
  auto exp = [&](Value v) -> Value { return math::ExpOp::create(b, loc, v); };
  auto tanh = [&](Value v) -> Value { return math::TanhOp::create(b, loc, v); };
  auto erf = [&](Value v) -> Value { return math::ErfOp::create(b, loc, v); };
  // Comparisons are ordered: false when either side is NaN, as the
  // kernels' (and ONNX's).
  auto cmp = [&](arith::CmpFPredicate p) -> Value {
    return arith::CmpFOp::create(b, loc, p, x[0], x[1]);
  };
  // The formulas are the CPU kernels' (runtime/device/cpu), operation for
  // operation, so that a region computes what the kernels it replaces do.
  constexpr double kInvSqrt2 = 0.70710678118654752440;
  constexpr double kSqrt2OverPi = 0.79788456080286535588;
  constexpr double kInvSqrt2Pi = 0.39894228040143267794;
  return llvm::TypeSwitch<Operation *, Value>(op)
      .Case([&](graph::AddOp) { return add(x[0], x[1]); })
      .Case([&](graph::SubOp) { return sub(x[0], x[1]); })
      .Case([&](graph::MulOp) { return mul(x[0], x[1]); })
      .Case([&](graph::DivOp) { return div(x[0], x[1]); })
      .Case([&](graph::MaxOp) -> Value {
        return arith::MaximumFOp::create(b, loc, x[0], x[1]);
      })
      .Case([&](graph::MinOp) -> Value {
        return arith::MinimumFOp::create(b, loc, x[0], x[1]);
      })
      .Case([&](graph::NegOp) { return neg(x[0]); })
      .Case([&](graph::AbsOp) -> Value {
        return math::AbsFOp::create(b, loc, x[0]);
      })
      .Case([&](graph::ExpOp) { return exp(x[0]); })
      .Case([&](graph::LogOp) -> Value {
        return math::LogOp::create(b, loc, x[0]);
      })
      .Case([&](graph::SqrtOp) -> Value {
        return math::SqrtOp::create(b, loc, x[0]);
      })
      .Case([&](graph::RsqrtOp) -> Value {
        return div(c(1), math::SqrtOp::create(b, loc, x[0]));
      })
      .Case([&](graph::ReciprocalOp) { return div(c(1), x[0]); })
      .Case([&](graph::TanhOp) { return tanh(x[0]); })
      .Case([&](graph::ErfOp) { return erf(x[0]); })
      .Case([&](graph::PowOp) -> Value {
        return math::PowFOp::create(b, loc, x[0], x[1]);
      })
      .Case([&](graph::SigmoidOp) {
        return div(c(1), add(c(1), exp(neg(x[0]))));
      })
      .Case([&](graph::SiluOp) { return div(x[0], add(c(1), exp(neg(x[0])))); })
      .Case([&](graph::ReluOp) -> Value {
        Value lt = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, x[0], c(0));
        return arith::SelectOp::create(b, loc, lt, c(0), x[0]);
      })
      .Case([&](graph::GeluOp g) -> Value {
        Value v = x[0];
        Value phi;
        if (g.getApproximate() == "tanh") {
          Value cube = mul(mul(mul(c(0.044715), v), v), v);
          phi = tanh(mul(c(kSqrt2OverPi), add(v, cube)));
        } else {
          phi = erf(mul(v, c(kInvSqrt2)));
        }
        return mul(mul(c(0.5), v), add(c(1), phi));
      })
      .Case([&](graph::GeluGradOp g) -> Value {
        Value v = x[0], dy = x[1];
        if (g.getApproximate() == "tanh") {
          Value k = c(kSqrt2OverPi), a = c(0.044715);
          Value t = tanh(mul(k, add(v, mul(mul(mul(a, v), v), v))));
          Value du = mul(k, add(c(1), mul(mul(mul(c(3), a), v), v)));
          Value left = mul(c(0.5), add(c(1), t));
          Value right = mul(mul(mul(c(0.5), v), sub(c(1), mul(t, t))), du);
          return mul(dy, add(left, right));
        }
        Value cdf = erf(mul(v, c(kInvSqrt2)));
        Value pdf = exp(mul(mul(c(-0.5), v), v));
        return mul(dy, add(mul(c(0.5), add(c(1), cdf)),
                           mul(v, mul(c(kInvSqrt2Pi), pdf))));
      })
      .Case([&](graph::EqOp) { return cmp(arith::CmpFPredicate::OEQ); })
      .Case([&](graph::LtOp) { return cmp(arith::CmpFPredicate::OLT); })
      .Case([&](graph::LeOp) { return cmp(arith::CmpFPredicate::OLE); })
      .Case([&](graph::GtOp) { return cmp(arith::CmpFPredicate::OGT); })
      .Case([&](graph::GeOp) { return cmp(arith::CmpFPredicate::OGE); })
      .Case([&](graph::AndOp) -> Value {
        return arith::AndIOp::create(b, loc, x[0], x[1]);
      })
      .Case([&](graph::OrOp) -> Value {
        return arith::OrIOp::create(b, loc, x[0], x[1]);
      })
      .Case([&](graph::XorOp) -> Value {
        return arith::XOrIOp::create(b, loc, x[0], x[1]);
      })
      .Case([&](graph::NotOp) -> Value {
        Value one = arith::ConstantOp::create(b, loc, b.getBoolAttr(true));
        return arith::XOrIOp::create(b, loc, x[0], one);
      })
      .Case([&](graph::SelectOp) -> Value {
        return arith::SelectOp::create(b, loc, x[0], x[1], x[2]);
      })
      .Case([&](graph::CastOp cast) -> Value {
        // To the type the result computes in (a half type's is f32, rounded
        // only where it is written).
        Type to = computeType(getElementTypeOrSelf(cast.getType()));
        unsigned from = t.getIntOrFloatBitWidth();
        if (to == t)
          return x[0];
        return from < to.getIntOrFloatBitWidth()
                   ? arith::ExtFOp::create(b, loc, to, x[0]).getResult()
                   : arith::TruncFOp::create(b, loc, to, x[0]).getResult();
      })
      .Case([&](graph::SiluGradOp) -> Value {
        Value v = x[0], dy = x[1];
        Value sig = div(c(1), add(c(1), exp(neg(v))));
        return mul(mul(dy, sig), add(c(1), mul(v, sub(c(1), sig))));
      })
      .Default([](Operation *) -> Value { return {}; });
}

/// A splat constant's value as a scalar of the type a region computes in
/// (a mask's as an i1).
Value splatScalar(OpBuilder &b, Location loc, DenseElementsAttr splat,
                  Type compute) {
  if (splat.getElementType().isInteger(1))
    return arith::ConstantOp::create(
        b, loc, b.getBoolAttr(splat.getSplatValue<bool>()));
  APFloat value = splat.getSplatValue<APFloat>();
  bool lost = false;
  value.convert(cast<FloatType>(compute).getFloatSemantics(),
                APFloat::rmNearestTiesToEven, &lost);
  return arith::ConstantOp::create(b, loc, compute,
                                   b.getFloatAttr(compute, value));
}

/// The indices an affine map (dimensions, or the constant 0 of a broadcast
/// dimension) gives for the loop indices `ivs`.
SmallVector<Value> indicesOf(OpBuilder &b, Location loc, AffineMap map,
                             ValueRange ivs) {
  SmallVector<Value> indices;
  for (AffineExpr e : map.getResults()) {
    if (auto d = dyn_cast<AffineDimExpr>(e))
      indices.push_back(ivs[d.getPosition()]);
    else
      indices.push_back(arith::ConstantIndexOp::create(
          b, loc, cast<AffineConstantExpr>(e).getValue()));
  }
  return indices;
}

/// How a row region reduces a row: in the order of the kernel whose result
/// it replaces.
enum class RowOrder {
  /// reduce_sum's reduceRow: kRowLanes lanes, the tail spread over them,
  /// combined as a tree; pairwise halves above kRowBlock elements.
  Sum,
  /// reduce_max's selectRow: kRowLanes lanes of selects (from -inf), the
  /// tail in lane 0, and a NaN flag.
  Max,
  /// The softmax kernels' blockedSum: blocks of kBlockedSumBlock summed in
  /// kRowLanes lanes (the tail in lane 0, combined as a tree), the block
  /// sums added in double.
  BlockedSum,
  /// The softmax kernels' rowMax: kRowLanes lanes from the first element,
  /// each select taking NaN, combined as a tree.
  FirstMax,
};

RowOrder rowOrderOf(Operation *op) {
  auto order = op->getAttrOfType<StringAttr>(kRowOrderAttr);
  if (isa<graph::ReduceMaxOp>(op))
    return order && order.getValue() == "first_max" ? RowOrder::FirstMax
                                                    : RowOrder::Max;
  return order && order.getValue() == "blocked_sum" ? RowOrder::BlockedSum
                                                    : RowOrder::Sum;
}

/// The reduction of a row of `n` elements of type `t`, `load(b, j)` being
/// its element j, in `order` (runtime/device/cpu/ReductionKernels.cpp,
/// reduceRow and selectRow; CpuKernelUtils.h, blockedSum and rowMax),
/// operation for operation (the constants: runtime/base/RowReduction.h).
/// A blocked sum whose result is f64 (a norm's) keeps its total in double.
Value emitRowReduce(OpBuilder &b, Location loc, Type t, int64_t n,
                    function_ref<Value(OpBuilder &, Value)> load,
                    RowOrder order, Type result) {
  constexpr int64_t kLanes = runtime::kRowLanes, kRowBlock = runtime::kRowBlock,
                    kBlock = runtime::kBlockedSumBlock;
  const bool max = order == RowOrder::Max || order == RowOrder::FirstMax;
  auto c = [&](double v) -> Value {
    return arith::ConstantOp::create(b, loc, t, b.getFloatAttr(t, v));
  };
  auto index = [&](int64_t i) -> Value {
    return arith::ConstantIndexOp::create(b, loc, i);
  };
  // Combines lane `a` with the value `v`.
  auto combine = [&](OpBuilder &lb, Value a, Value v) -> Value {
    if (!max)
      return arith::AddFOp::create(lb, loc, a, v);
    // selectRow's plain select, v > a ? v : a; rowMax's takes NaN too.
    Value take =
        arith::CmpFOp::create(lb, loc, arith::CmpFPredicate::OGT, v, a);
    if (order == RowOrder::FirstMax)
      take = arith::OrIOp::create(
          lb, loc, take,
          arith::CmpFOp::create(lb, loc, arith::CmpFPredicate::UNO, v, v));
    return arith::SelectOp::create(lb, loc, take, v, a);
  };
  // Elements [begin, begin + count) in kLanes lanes.
  auto lanes = [&](int64_t begin, int64_t count) -> Value {
    Value first = order == RowOrder::FirstMax ? load(b, index(begin)) : Value();
    const double identity =
        max ? -std::numeric_limits<double>::infinity() : 0.0;
    SmallVector<Value> init(kLanes, first ? first : c(identity));
    const bool flag = order == RowOrder::Max;
    if (flag)
      init.push_back(arith::ConstantIntOp::create(b, loc, b.getI1Type(), 0));
    auto noteNan = [&](OpBuilder &lb, Value flagged, Value v) -> Value {
      Value nan =
          arith::CmpFOp::create(lb, loc, arith::CmpFPredicate::UNO, v, v);
      return arith::OrIOp::create(lb, loc, flagged, nan);
    };
    const int64_t blocks = count / kLanes;
    SmallVector<Value> acc = init;
    if (blocks > 0) {
      auto loop = scf::ForOp::create(
          b, loc, index(begin), index(begin + blocks * kLanes), index(kLanes),
          init, [&](OpBuilder &lb, Location, Value j, ValueRange carried) {
            SmallVector<Value> next(carried);
            for (int64_t l = 0; l < kLanes; ++l) {
              Value at = arith::AddIOp::create(
                  lb, loc, j, arith::ConstantIndexOp::create(lb, loc, l));
              Value v = load(lb, at);
              if (flag)
                next[kLanes] = noteNan(lb, next[kLanes], v);
              next[l] = combine(lb, next[l], v);
            }
            scf::YieldOp::create(lb, loc, next);
          });
      acc.assign(loop.getResults().begin(), loop.getResults().end());
    }
    // The tail: reduceRow spreads it over the lanes, the others keep it in
    // lane 0.
    const bool spread = order == RowOrder::Sum;
    for (int64_t l = 0, j = begin + blocks * kLanes; j < begin + count;
         ++j, ++l) {
      Value v = load(b, index(j));
      if (flag)
        acc[kLanes] = noteNan(b, acc[kLanes], v);
      Value &lane = acc[spread ? l : 0];
      lane = combine(b, lane, v);
    }
    if (max) {
      // rowMax combines its lanes as a tree, selectRow in lane order.
      if (order == RowOrder::FirstMax) {
        for (int64_t w = kLanes / 2; w > 0; w /= 2)
          for (int64_t l = 0; l < w; ++l)
            acc[l] = combine(b, acc[l], acc[l + w]);
        return acc[0];
      }
      Value best = acc[0];
      for (int64_t l = 1; l < kLanes; ++l)
        best = combine(b, best, acc[l]);
      if (!flag)
        return best;
      return arith::SelectOp::create(
          b, loc, acc[kLanes], c(std::numeric_limits<double>::quiet_NaN()),
          best);
    }
    for (int64_t w = kLanes / 2; w > 0; w /= 2)
      for (int64_t l = 0; l < w; ++l)
        acc[l] = arith::AddFOp::create(b, loc, acc[l], acc[l + w]);
    return acc[0];
  };
  if (max)
    return lanes(0, n);
  if (order == RowOrder::BlockedSum) {
    // Block sums added in double, the total rounded to the compute type.
    Type f64 = b.getF64Type();
    Value total =
        arith::ConstantOp::create(b, loc, f64, b.getFloatAttr(f64, 0.0));
    for (int64_t begin = 0; begin < n; begin += kBlock) {
      Value part = lanes(begin, std::min(kBlock, n - begin));
      if (part.getType() != f64)
        part = arith::ExtFOp::create(b, loc, f64, part);
      total = arith::AddFOp::create(b, loc, total, part);
    }
    return t == f64 || result == f64
               ? total
               : arith::TruncFOp::create(b, loc, t, total).getResult();
  }
  std::function<Value(int64_t, int64_t)> sum = [&](int64_t begin,
                                                   int64_t count) -> Value {
    if (count > kRowBlock) {
      int64_t half = (count / 2) / kLanes * kLanes;
      Value l = sum(begin, half);
      Value r = sum(begin + half, count - half);
      return arith::AddFOp::create(b, loc, l, r);
    }
    return lanes(begin, count);
  };
  return sum(0, n);
}

/// The parallel row form's reduction of a row of `n` elements of type `t`
/// (`load(b, j)` its element j): an scf.parallel over the columns whose
/// scf.reduce adds, or takes the maximum keeping NaN (from -inf), in no
/// fixed order. The elements of a sum whose result is f64 (a norm's) are
/// added in f64.
Value emitParallelRowReduce(OpBuilder &b, Location loc, Type t, int64_t n,
                            function_ref<Value(OpBuilder &, Value)> load,
                            RowOrder order, Type result) {
  const bool max = order == RowOrder::Max || order == RowOrder::FirstMax;
  Type acc = !max && result.isF64() ? result : t;
  Value identity = arith::ConstantOp::create(
      b, loc, acc,
      b.getFloatAttr(acc,
                     max ? -std::numeric_limits<double>::infinity() : 0.0));
  auto index = [&](int64_t i) -> Value {
    return arith::ConstantIndexOp::create(b, loc, i);
  };
  auto loop = scf::ParallelOp::create(
      b, loc, ValueRange{index(0)}, ValueRange{index(n)}, ValueRange{index(1)},
      ValueRange{identity},
      [&](OpBuilder &lb, Location, ValueRange ivs, ValueRange) {
        Value v = load(lb, ivs.front());
        if (v.getType() != acc)
          v = arith::ExtFOp::create(lb, loc, acc, v);
        auto reduce = scf::ReduceOp::create(lb, loc, ValueRange{v});
        Block &combiner = reduce.getReductions().front().front();
        OpBuilder cb = OpBuilder::atBlockBegin(&combiner);
        Value l = combiner.getArgument(0), r = combiner.getArgument(1);
        Value c = max ? arith::MaximumFOp::create(cb, loc, l, r).getResult()
                      : arith::AddFOp::create(cb, loc, l, r).getResult();
        scf::ReduceReturnOp::create(cb, loc, c);
      });
  return loop.getResult(0);
}

/// One fused region: its ops in program order, the type it iterates over
/// and whether it is a row region (it has a reduction along the last axis:
/// its members are values of `full` type or one value per row of it).
struct Region {
  SmallVector<Operation *> ops;
  RankedTensorType full;
  bool rows = false;
};

class FunctionFusion {
public:
  FunctionFusion(func::FuncOp fn, ModuleOp kernels, unsigned &counter,
                 llvm::StringMap<std::string> &shared, bool remarks, bool rows,
                 bool parallelRows)
      : fn(fn), kernels(kernels), counter(counter), shared(shared),
        remarks(remarks), rows(rows), parallelRows(parallelRows) {}

  void run();

private:
  /// Groups the function's ops into regions and outlines them; returns the
  /// ops of the row regions whose row buffers would not fit (not formed).
  SmallVector<Operation *> groupAndOutline();
  /// How many ops of each decomposition are still in the function (all of
  /// them: no region took one).
  llvm::DenseMap<int64_t, size_t> chainsLeft();
  /// Writes a decomposition whose ops no region took back as its op.
  void recompose(Decomposition &d);
  bool canJoin(ArrayRef<Operation *> members, Operation *op);
  /// The regions `op` may join, and the region it starts when it joins
  /// none (`full` null: `op` is no member of any region).
  std::pair<SmallVector<unsigned>, Region>
  candidates(Operation *op, ArrayRef<Region> regions,
             const llvm::DenseMap<Operation *, unsigned> &regionOf);
  /// Outlines a region; false when it is a row region that does not fit.
  bool outline(Region &region);
  /// The body of a row region's function; fails (the region stays as it
  /// is) when its row buffers would not fit kMaxRowBufferBytes.
  LogicalResult buildRows(
      Region &region, OpBuilder &b, Location loc, ValueRange args,
      const llvm::MapVector<std::pair<Value, AffineMap>, unsigned> &inputs,
      ArrayRef<Value> outputs,
      llvm::function_ref<std::pair<Value, AffineMap>(Value)> inputOf);

  func::FuncOp fn;
  ModuleOp kernels;
  unsigned &counter;
  /// The region functions by what they compute (their printed form).
  llvm::StringMap<std::string> &shared;
  bool remarks;
  bool rows;
  /// Row regions in the parallel row form (FuseRegions' parallel-rows).
  bool parallelRows;
  llvm::DenseMap<Operation *, int64_t> order;
  /// Reductions left out of row regions (theirs did not fit).
  llvm::DenseSet<Operation *> excluded;
  /// The softmaxes and norms decomposed for row regions, by id.
  std::vector<Decomposition> decompositions;
  /// Decompositions written back as their ops.
  llvm::DenseSet<int64_t> recomposed;
  /// Decompositions some of whose ops an outlined region took (those ops
  /// are erased).
  llvm::DenseSet<int64_t> taken;
};

/// The region of the op's members placed at `op`: legal when no member's
/// result is read outside the region before `op` (the region then runs at
/// `op` and every outside reader comes after it; this also excludes
/// cycles through outside ops).
bool FunctionFusion::canJoin(ArrayRef<Operation *> members, Operation *op) {
  llvm::SmallPtrSet<Operation *, 16> inRegion(members.begin(), members.end());
  inRegion.insert(op);
  int64_t at = order.lookup(op);
  for (Operation *m : members)
    for (Operation *user : m->getUsers())
      if (!inRegion.contains(user) && order.lookup(user) < at)
        return false;
  return true;
}

std::pair<SmallVector<unsigned>, Region> FunctionFusion::candidates(
    Operation *op, ArrayRef<Region> regions,
    const llvm::DenseMap<Operation *, unsigned> &regionOf) {
  // Every op a region takes has one result (the terminator has none: its
  // result 0 would be read from before the op).
  if (op->getNumResults() != 1)
    return {};
  Attribute stage = op->getAttr(shard::kStageAttr);
  Attribute task = op->getAttr(shard::kTaskAttr);
  // The region of `v`'s producer, where `op` would read it (one region is
  // one kernel of one pipeline stage's task).
  auto producer = [&](Value v) -> std::optional<unsigned> {
    Operation *def = v.getDefiningOp();
    if (!def || def->getAttr(shard::kStageAttr) != stage ||
        def->getAttr(shard::kTaskAttr) != task)
      return std::nullopt;
    auto it = regionOf.find(def);
    if (it == regionOf.end())
      return std::nullopt;
    return it->second;
  };
  SmallVector<unsigned> join;
  Type type = op->getResult(0).getType();
  if (isFusableCompute(op) && operandsFit(op)) {
    // Values of a region's type or masks of its shape, or one float value
    // per row of a row region.
    RankedTensorType full = regionTypeOf(op);
    for (Value v : op->getOperands())
      if (std::optional<unsigned> r = producer(v)) {
        const Region &region = regions[*r];
        if ((full ? region.full == full : isElementOf(type, region.full)) ||
            (region.rows && isRowOf(type, region.full)))
          if (!llvm::is_contained(join, *r))
            join.push_back(*r);
      }
    return {join, Region{{}, full, false}};
  }
  if (!rows)
    return {};
  // A decomposed norm's cast of a value per row to another float type
  // joins the row region of its operand; the cast of a statistic a norm's
  // gradient reads (made outside its chain: in the forward pass, often by
  // the norm's own region) joins that region where it may, or else starts
  // a row region over its rows.
  if (isChainCast(op)) {
    auto id = op->getAttrOfType<IntegerAttr>(kRowChainAttr).getInt();
    Operation *def = op->getOperand(0).getDefiningOp();
    auto chain = def ? def->getAttrOfType<IntegerAttr>(kRowChainAttr) : nullptr;
    auto full = cast<RankedTensorType>(decompositions[id].types.front());
    Region fresh;
    if ((!chain || chain.getInt() != id) && isRowOf(type, full))
      fresh = Region{{}, full, true};
    if (std::optional<unsigned> r = producer(op->getOperand(0)))
      if (regions[*r].rows && isRowOf(type, regions[*r].full))
        return {{*r}, fresh};
    return {{}, fresh};
  }
  if (isRowReduction(op) && !excluded.contains(op)) {
    auto full = cast<RankedTensorType>(op->getOperand(0).getType());
    if (std::optional<unsigned> r = producer(op->getOperand(0)))
      if (regions[*r].full == full)
        join.push_back(*r);
    return {join, Region{{}, full, true}};
  }
  // Reshapes and broadcasts of one value per row belong to its region.
  if (isRowView(op))
    if (std::optional<unsigned> r = producer(op->getOperand(0))) {
      const Region &region = regions[*r];
      if (region.rows && (isRowReshape(op, region.full) ||
                          isRowBroadcast(op, region.full)))
        return {{*r}, Region{}};
    }
  return {};
}

void FunctionFusion::run() {
  Block &body = fn.front();
  // Softmaxes and norms with a neighbour a region could take are
  // decomposed into the ops a row region computes; those no region takes
  // are written back.
  if (rows)
    for (Operation &op : llvm::make_early_inc_range(body)) {
      const bool grad = isRowNormGrad(&op);
      if (!isRowSoftmax(&op) && !isRowNorm(&op) && !grad)
        continue;
      auto type = cast<RankedTensorType>(op.getResult(0).getType());
      const int64_t rowBytes =
          type.getShape().back() * computeBytes(type.getElementType());
      auto fusable = [](Operation *o) {
        return o && (isFusableCompute(o) || isRowSoftmax(o) || isRowNorm(o) ||
                     isRowNormGrad(o));
      };
      // A norm's gradient fuses with what makes its dy or reads its dx (its
      // other operands were made in the forward pass, long before); its
      // region reads x and dy once more than its kernel did (for the
      // parameter gradients), which the neighbour's pass pays for.
      bool neighbour =
          grad ? fusable(op.getOperands().back().getDefiningOp()) ||
                     llvm::any_of(op.getResult(0).getUsers(), fusable)
               : llvm::any_of(
                     op.getOperands(),
                     [&](Value v) { return fusable(v.getDefiningOp()); }) ||
                     llvm::any_of(op.getUsers(), fusable);
      // Its own row buffers: 3 at most (a layer norm's: x, the
      // differences from the mean, their squares).
      if (neighbour && 3 * rowBytes <= kMaxRowBufferBytes)
        decompositions.push_back(decompose(&op, decompositions.size()));
    }
  // A row region whose row buffers would not fit is not formed: its
  // decomposed softmaxes are written back, its reductions left out, and
  // the function grouped again, so that its elementwise ops still fuse.
  while (true) {
    SmallVector<Operation *> unfit = groupAndOutline();
    if (unfit.empty())
      break;
    llvm::SmallDenseSet<int64_t> chains;
    for (Operation *op : unfit) {
      if (auto id = op->getAttrOfType<IntegerAttr>(kRowChainAttr))
        chains.insert(id.getInt());
      else if (isRowReduction(op))
        excluded.insert(op);
    }
    llvm::DenseMap<int64_t, size_t> left = chainsLeft();
    for (int64_t id : chains) {
      if (left.lookup(id) == decompositions[id].chain.size()) {
        recompose(decompositions[id]);
        continue;
      }
      // Taken in part: some of its ops were outlined (and erased); its
      // reductions still in the function are left out.
      for (Operation *op : unfit)
        if (auto chain = op->getAttrOfType<IntegerAttr>(kRowChainAttr);
            chain && chain.getInt() == id && isRowReduction(op))
          excluded.insert(op);
    }
  }
  if (decompositions.empty())
    return;
  // A decomposition none of whose ops a region took is its op again; one
  // that a region took in part stays (correct, in several kernels).
  llvm::DenseMap<int64_t, size_t> left = chainsLeft();
  for (auto [id, d] : llvm::enumerate(decompositions))
    if (!recomposed.contains(id) && left.lookup(id) == d.chain.size())
      recompose(d);
  for (Operation &op : body) {
    op.removeAttr(kRowChainAttr);
    op.removeAttr(kRowOrderAttr);
  }
}

llvm::DenseMap<int64_t, size_t> FunctionFusion::chainsLeft() {
  llvm::DenseMap<int64_t, size_t> left;
  for (Operation &op : fn.front())
    if (auto id = op.getAttrOfType<IntegerAttr>(kRowChainAttr))
      ++left[id.getInt()];
  return left;
}

void FunctionFusion::recompose(Decomposition &d) {
  recomposed.insert(d.id);
  OpBuilder b(d.chain.back());
  OperationState state(d.loc, d.name);
  for (auto [reader, index] : d.reads)
    state.addOperands(reader->getOperand(index));
  state.addTypes(d.types);
  state.addAttributes(d.attrs);
  Operation *op = b.create(state);
  for (auto [from, to] : llvm::zip_equal(d.results, op->getResults()))
    from.replaceAllUsesWith(to);
  for (Operation *o : llvm::reverse(d.chain))
    o->erase();
}

SmallVector<Operation *> FunctionFusion::groupAndOutline() {
  Block &body = fn.front();
  order.clear();
  int64_t i = 0;
  for (Operation &op : body)
    order[&op] = i++;

  // Regions grow in program order: an op joins the regions of its
  // producers (all of them, or else the first that it may join alone).
  SmallVector<Region> regions;
  llvm::DenseMap<Operation *, unsigned> regionOf;
  for (Operation &op : body) {
    auto [producers, fresh] = candidates(&op, regions, regionOf);
    if (producers.empty() && !fresh.full)
      continue;
    auto membersOf = [&](ArrayRef<unsigned> rs) {
      SmallVector<Operation *> members;
      for (unsigned r : rs)
        llvm::append_range(members, regions[r].ops);
      return members;
    };
    // Regions merge only when they iterate over one type.
    auto oneType = [&](ArrayRef<unsigned> rs) {
      return llvm::all_of(rs, [&](unsigned r) {
        return regions[r].full == regions[rs.front()].full;
      });
    };
    SmallVector<unsigned> join;
    if (!producers.empty() && oneType(producers) &&
        canJoin(membersOf(producers), &op))
      join = producers;
    else
      for (unsigned r : producers)
        if (canJoin(regions[r].ops, &op)) {
          join = {r};
          break;
        }
    if (join.empty()) {
      if (!fresh.full)
        continue;
      fresh.ops.push_back(&op);
      regionOf[&op] = regions.size();
      regions.push_back(std::move(fresh));
      continue;
    }
    // Merge into the first, in program order.
    unsigned into = join.front();
    for (unsigned r : llvm::drop_begin(join)) {
      for (Operation *m : regions[r].ops)
        regionOf[m] = into;
      llvm::append_range(regions[into].ops, regions[r].ops);
      regions[into].rows |= regions[r].rows;
      regions[r].ops.clear();
    }
    regions[into].ops.push_back(&op);
    regions[into].rows |= fresh.rows;
    llvm::sort(regions[into].ops, [&](Operation *a, Operation *b) {
      return order.lookup(a) < order.lookup(b);
    });
    regionOf[&op] = into;
  }
  // A decomposition that must be whole and is not (a member in no region,
  // or in two) is written back as its op, and the function grouped again.
  bool split = false;
  for (Decomposition &d : decompositions) {
    // (One an earlier pass outlined is gone: its ops were erased.)
    if (!d.whole || recomposed.contains(d.id) || taken.contains(d.id))
      continue;
    auto it = regionOf.find(d.members.front());
    bool one = it != regionOf.end() && regions[it->second].rows &&
               llvm::all_of(d.members, [&](Operation *m) {
                 auto at = regionOf.find(m);
                 return at != regionOf.end() && at->second == it->second;
               });
    // Alone in its region: on the CPU a norm's gradient is its kernel
    // again (the parallel row form's region replaces a library kernel that
    // also makes the parameter gradients in a second pass).
    auto alone = [&] {
      return llvm::all_of(regions[it->second].ops, [&](Operation *m) {
        auto chain = m->getAttrOfType<IntegerAttr>(kRowChainAttr);
        return chain && chain.getInt() == d.id;
      });
    };
    if (!one || (d.needsCompany && !parallelRows && alone())) {
      recompose(d);
      split = true;
    }
  }
  if (split)
    return groupAndOutline();
  // A region of one computing op is left as it is (its kernel is already
  // one pass); reshapes and broadcasts compute nothing.
  SmallVector<Operation *> unfit;
  for (Region &region : regions) {
    auto computing = llvm::count_if(
        region.ops, [](Operation *op) { return !isRowView(op); });
    if (computing >= 2 && !outline(region))
      llvm::append_range(unfit, region.ops);
  }
  return unfit;
}

bool FunctionFusion::outline(Region &region) {
  MLIRContext *ctx = fn.getContext();
  llvm::SmallPtrSet<Operation *, 16> members(region.ops.begin(), region.ops.end());
  Operation *last = region.ops.back();
  RankedTensorType type = region.full;
  int64_t rank = type.getRank();

  // Inputs: each outside value with the map the region reads it through,
  // from the region's index space (a row region's values per row read no
  // column: its last dimension, where they have one, is 0).
  llvm::MapVector<std::pair<Value, AffineMap>, unsigned> inputs;
  auto inputOf = [&](Value v) -> std::pair<Value, AffineMap> {
    auto readerType = cast<RankedTensorType>(v.getType());
    bool perRow = !isElementOf(readerType, type);
    int64_t readerRank = readerType.getRank();
    auto dim = [&](int64_t d) -> AffineExpr {
      return perRow && d == rank - 1 ? getAffineConstantExpr(0, ctx)
                                     : getAffineDimExpr(d, ctx);
    };
    Operation *def = v.getDefiningOp();
    SmallVector<AffineExpr> exprs;
    if (isInlinedBroadcast(def)) {
      auto bcast = cast<graph::BroadcastInDimOp>(def);
      auto operandType = cast<RankedTensorType>(bcast.getOperand().getType());
      for (auto [i, d] : llvm::enumerate(bcast.getDims()))
        exprs.push_back(operandType.getDimSize(i) == 1 &&
                                readerType.getDimSize(d) != 1
                            ? getAffineConstantExpr(0, ctx)
                            : dim(d));
      return {bcast.getOperand(), AffineMap::get(rank, 0, exprs, ctx)};
    }
    for (int64_t d = 0; d < readerRank; ++d)
      exprs.push_back(dim(d));
    return {v, AffineMap::get(rank, 0, exprs, ctx)};
  };
  for (Operation *op : region.ops)
    for (Value v : op->getOperands()) {
      Operation *def = v.getDefiningOp();
      if ((def && members.contains(def)) || inlinedSplat(def))
        continue;
      inputs.insert({inputOf(v), inputs.size()});
    }
  // Outputs: members' results read outside the region. A reshape or
  // broadcast of a value per row read outside is made again after the
  // call, from its operand (an output): written out it would be a whole
  // tensor where the lowering makes a view of no memory.
  llvm::DenseSet<Value> outside;
  for (Operation *op : region.ops)
    if (llvm::any_of(op->getUsers(),
                     [&](Operation *u) { return !members.contains(u); }))
      outside.insert(op->getResult(0));
  llvm::SetVector<Operation *> remade;
  for (Operation *op : llvm::reverse(region.ops)) {
    if (!isRowView(op) || !outside.contains(op->getResult(0)))
      continue;
    remade.insert(op);
    outside.erase(op->getResult(0));
    if (Operation *def = op->getOperand(0).getDefiningOp();
        def && members.contains(def))
      outside.insert(op->getOperand(0));
  }
  SmallVector<Value> outputs;
  int64_t savedBytes = 0;
  for (Operation *op : region.ops) {
    Value r = op->getResult(0);
    if (outside.contains(r))
      outputs.push_back(r);
    else if (!isRowView(op))
      savedBytes += tensorBytes(r.getType());
  }

  // A region of constants only (folded later) or of values nothing reads
  // (dead) is left as it is: a call takes an input and gives an output.
  if (inputs.empty() || outputs.empty())
    return true;

  // The region function.
  OpBuilder kb = OpBuilder::atBlockEnd(kernels.getBody());
  SmallVector<Type> argTypes;
  for (auto &[key, index] : inputs) {
    auto t = cast<RankedTensorType>(key.first.getType());
    argTypes.push_back(MemRefType::get(t.getShape(), t.getElementType()));
  }
  for (Value v : outputs) {
    auto t = cast<RankedTensorType>(v.getType());
    argTypes.push_back(MemRefType::get(t.getShape(), t.getElementType()));
  }
  std::string name = (fn.getSymName() + "_fused_" + Twine(counter)).str();
  Location loc = last->getLoc();
  auto kernel = func::FuncOp::create(kb, loc, name,
                                     FunctionType::get(ctx, argTypes, {}));
  // A decomposed softmax is named once, as the op it was.
  SmallVector<Attribute> opNames;
  llvm::SmallDenseSet<int64_t> named;
  for (Operation *op : region.ops) {
    auto chain = op->getAttrOfType<IntegerAttr>(kRowChainAttr);
    if (!chain)
      opNames.push_back(op->getName().getIdentifier());
    else if (named.insert(chain.getInt()).second)
      opNames.push_back(decompositions[chain.getInt()].name.getIdentifier());
  }
  kernel->setAttr("dtcc.fused_ops", ArrayAttr::get(ctx, opNames));
  kernel->setAttr("dtcc.saved_bytes", kb.getI64IntegerAttr(savedBytes));
  Block *entry = kernel.addEntryBlock();
  OpBuilder b = OpBuilder::atBlockEnd(entry);
  ValueRange args = entry->getArguments();
  if (region.rows) {
    if (failed(buildRows(region, b, loc, args, inputs, outputs, inputOf))) {
      kernel.erase();
      return false;
    }
  } else {
    // One linalg.generic over the region's type.
    AffineMap identity = AffineMap::getMultiDimIdentityMap(rank, ctx);
    SmallVector<AffineMap> maps;
    for (auto &[key, index] : inputs)
      maps.push_back(key.second);
    maps.append(outputs.size(), identity);
    SmallVector<utils::IteratorType> iterators(rank,
                                               utils::IteratorType::parallel);
    linalg::GenericOp::create(
        b, loc, TypeRange{}, args.take_front(inputs.size()),
        args.drop_front(inputs.size()), maps, iterators,
        [&](OpBuilder &nb, Location nloc, ValueRange scalars) {
          // Half-precision regions read their inputs into f32 and round
          // what they write.
          Type element = type.getElementType();
          Type compute = computeType(element);
          IRMapping map;
          auto scalarOf = [&](Value v) -> Value {
            if (Value s = map.lookupOrNull(v))
              return s;
            Value s;
            if (DenseElementsAttr splat = inlinedSplat(v.getDefiningOp())) {
              s = splatScalar(nb, nloc, splat, compute);
            } else {
              s = widened(nb, nloc, scalars[inputs.lookup(inputOf(v))],
                          compute);
            }
            map.map(v, s);
            return s;
          };
          for (Operation *op : region.ops) {
            SmallVector<Value> xs;
            for (Value v : op->getOperands())
              xs.push_back(scalarOf(v));
            map.map(op->getResult(0), emitScalar(nb, op->getLoc(), op, xs));
          }
          SmallVector<Value> yields;
          for (Value v : outputs)
            yields.push_back(narrowed(nb, nloc, map.lookup(v),
                                      getElementTypeOrSelf(v.getType())));
          linalg::YieldOp::create(nb, nloc, yields);
        });
  }
  func::ReturnOp::create(b, loc);
  // Regions that compute the same thing (a layer's, each layer's, the
  // forward's in @main and in @train_step) share one function: its code is
  // generated once.
  std::string key;
  {
    llvm::raw_string_ostream os(key);
    kernel.setSymName("region");
    NamedAttrList informative(kernel->getDiscardableAttrDictionary());
    kernel->setDiscardableAttrs(DictionaryAttr::get(ctx, {}));
    // Local scope: numbered alone, not with the whole module (each region
    // printed in the module's scope renumbered every op of it: 4x the
    // lowering's time on a pipeline's unrolled micro-batches).
    kernel->print(
        os, OpPrintingFlags().elideLargeElementsAttrs(1 << 20).useLocalScope());
    kernel->setDiscardableAttrs(informative.getDictionary(ctx));
    kernel.setSymName(name);
  }
  if (auto [it, fresh] = shared.try_emplace(key, name); !fresh) {
    kernel.erase();
    name = it->second;
  } else {
    ++counter;
  }

  // The call replaces the region's ops where its last op was.
  OpBuilder fb(last);
  SmallVector<Value> operands;
  for (auto &[key, index] : inputs)
    operands.push_back(key.first);
  SmallVector<Type> resultTypes;
  for (Value v : outputs)
    resultTypes.push_back(v.getType());
  auto ref = SymbolRefAttr::get(ctx, kKernelsModule,
                                {FlatSymbolRefAttr::get(ctx, name)});
  // The call stands for every member's ONNX node (`dtcc explain` names
  // them all: a region may join two layers' ops, a residual add and the
  // final norm).
  SmallVector<Location> memberLocs;
  for (Operation *op : region.ops)
    memberLocs.push_back(op->getLoc());
  Location callLoc = FusedLoc::get(
      ctx, memberLocs, StringAttr::get(ctx, graph::kJoinedNodesLoc));
  auto fused = graph::FusedOp::create(fb, callLoc, resultTypes, ref, operands);
  copyPlacement(last, fused);
  if (remarks)
    fused->emitRemark() << "fused " << region.ops.size() << " ops into @"
                        << name << (region.rows ? " (row form, " : " (")
                        << inputs.size() << " inputs, " << outputs.size()
                        << " outputs, " << savedBytes
                        << " bytes of intermediates kept out of memory)";
  IRMapping after;
  for (auto [v, r] : llvm::zip(outputs, fused.getResults()))
    after.map(v, r);
  OpBuilder ab = OpBuilder::atBlockBegin(fused->getBlock());
  ab.setInsertionPointAfter(fused);
  for (Operation *op : llvm::reverse(remade))
    ab.clone(*op, after)->removeAttr(kRowChainAttr);
  for (Operation *op : region.ops)
    if (Value r = after.lookupOrNull(op->getResult(0)))
      op->getResult(0).replaceUsesWithIf(r, [&](OpOperand &use) {
        return !members.contains(use.getOwner());
      });
  for (Operation *op : region.ops)
    if (auto chain = op->getAttrOfType<IntegerAttr>(kRowChainAttr))
      taken.insert(chain.getInt());
  llvm::SetVector<Operation *> dead;
  for (Operation *op : llvm::reverse(region.ops)) {
    for (Value v : op->getOperands())
      if (Operation *def = v.getDefiningOp();
          def && !members.contains(def) &&
          (isInlinedBroadcast(def) || inlinedSplat(def)))
        dead.insert(def);
    op->erase();
  }
  for (Operation *op : dead)
    if (op->use_empty())
      op->erase();
  return true;
}

LogicalResult FunctionFusion::buildRows(
    Region &region, OpBuilder &b, Location loc, ValueRange args,
    const llvm::MapVector<std::pair<Value, AffineMap>, unsigned> &inputs,
    ArrayRef<Value> outputs,
    llvm::function_ref<std::pair<Value, AffineMap>(Value)> inputOf) {
  RankedTensorType full = region.full;
  const int64_t rank = full.getRank();
  const int64_t cols = full.getShape().back();
  Type element = full.getElementType();
  Type compute = computeType(element);
  llvm::SmallPtrSet<Operation *, 16> members(region.ops.begin(),
                                             region.ops.end());
  auto member = [&](Value v) -> Operation * {
    Operation *def = v.getDefiningOp();
    return def && members.contains(def) ? def : nullptr;
  };
  auto isFull = [&](Operation *op) {
    return isElementOf(op->getResult(0).getType(), full);
  };

  // Passes: a row is computed in passes over its columns. A reduction's
  // result exists after the pass that computes its operand; the other
  // members run in the first pass where their operands exist (an outside
  // value exists from pass 0).
  llvm::DenseMap<Operation *, int64_t> level;
  int64_t levels = 1;
  for (Operation *op : region.ops) {
    int64_t l = 0;
    for (Value v : op->getOperands())
      if (Operation *def = member(v))
        l = std::max(l, level.lookup(def));
    if (isRowReduction(op))
      l += 1;
    level[op] = l;
    levels = std::max(levels, l + 1);
  }
  // Row buffers: what a reduction reduces and columns a later pass reads,
  // of the region's own values (it reads outside values where they are).
  llvm::MapVector<Value, Value> rowBuffers;
  for (Operation *op : region.ops)
    for (Value v : op->getOperands()) {
      Operation *def = member(v);
      if (def && isFull(def) &&
          (isRowReduction(op) ||
           (isFull(op) && level.lookup(def) < level.lookup(op))))
        rowBuffers.insert({v, Value()});
    }
  const int64_t bufferBytes = static_cast<int64_t>(rowBuffers.size()) *
                              cols * computeBytes(element);
  if (bufferBytes > kMaxRowBufferBytes)
    return failure();
  // The sequential form's row buffers are the function's, the parallel
  // form's are allocated in its row loop (each row's own).
  auto allocateRowBuffers = [&](OpBuilder &ab) {
    for (auto &[v, buffer] : rowBuffers) {
      Type e = getElementTypeOrSelf(v.getType());
      buffer = memref::AllocaOp::create(
          ab, loc, MemRefType::get({cols}, e.isInteger(1) ? e : compute));
    }
  };
  if (!parallelRows)
    allocateRowBuffers(b);
  llvm::DenseMap<Value, unsigned> outputIndex;
  for (auto [i, v] : llvm::enumerate(outputs))
    outputIndex[v] = inputs.size() + i;

  // A loop over [0, n) at `ob`.
  auto loopTo = [&](OpBuilder &ob, int64_t n) {
    return scf::ForOp::create(ob, loc,
                              arith::ConstantIndexOp::create(ob, loc, 0),
                              arith::ConstantIndexOp::create(ob, loc, n),
                              arith::ConstantIndexOp::create(ob, loc, 1));
  };
  // The parallel form's loop over [0, n), its body at `ob`'s insertion
  // point.
  auto parallelTo = [&](OpBuilder &ob, ArrayRef<int64_t> n) {
    SmallVector<Value> zeros, ends, ones;
    for (int64_t e : n) {
      zeros.push_back(arith::ConstantIndexOp::create(ob, loc, 0));
      ends.push_back(arith::ConstantIndexOp::create(ob, loc, e));
      ones.push_back(arith::ConstantIndexOp::create(ob, loc, 1));
    }
    return scf::ParallelOp::create(ob, loc, zeros, ends, ones);
  };
  // The row loops, one per dimension but the last (the sequential form's
  // outermost becomes the kernel's [begin, end) range); the parallel form
  // has one loop over them all.
  SmallVector<Value> ivs;
  OpBuilder rb = b;
  if (parallelRows) {
    auto loop = parallelTo(rb, full.getShape().drop_back());
    llvm::append_range(ivs, loop.getInductionVars());
    rb.setInsertionPoint(loop.getBody()->getTerminator());
    allocateRowBuffers(rb);
  } else {
    for (int64_t d = 0; d + 1 < rank; ++d) {
      auto loop = loopTo(rb, full.getDimSize(d));
      ivs.push_back(loop.getInductionVar());
      rb.setInsertionPoint(loop.getBody()->getTerminator());
    }
  }

  // Reads an outside value at the row `ivs` and column `col`.
  // (A decomposed norm's constants in double are read as doubles.)
  auto readInput = [&](OpBuilder &ob, Value v, Value col) -> Value {
    if (DenseElementsAttr splat = inlinedSplat(v.getDefiningOp()))
      return splatScalar(ob, loc, splat, computeType(splat.getElementType()));
    auto key = inputOf(v);
    assert(inputs.count(key) && "an outside value the region did not take");
    SmallVector<Value> at(ivs);
    at.push_back(col);
    Value s = memref::LoadOp::create(
        ob, loc, args[inputs.lookup(key)],
        indicesOf(ob, loc, key.second, at));
    return widened(ob, loc, s, computeType(s.getType()));
  };
  // Writes an output's element (a value per row at column 0, if it has one).
  auto writeOutput = [&](OpBuilder &ob, Value v, Value s, Value col) {
    auto it = outputIndex.find(v);
    if (it == outputIndex.end())
      return;
    auto type = cast<RankedTensorType>(v.getType());
    SmallVector<Value> at(ivs);
    if (type.getRank() == rank)
      at.push_back(isElementOf(type, full)
                       ? col
                       : arith::ConstantIndexOp::create(ob, loc, 0));
    memref::StoreOp::create(ob, loc, narrowed(ob, loc, s, type.getElementType()),
                            args[it->second], at);
  };

  IRMapping perRow; // a row's values per row
  // A member's scalar: a reshape's or broadcast's is its operand's (a value
  // per row); the others are computed from their operands' scalars.
  auto scalarOf = [&](OpBuilder &ob, Operation *op,
                      function_ref<Value(Value)> operand) -> Value {
    if (isRowView(op))
      return perRow.lookup(op->getOperand(0));
    SmallVector<Value> xs;
    for (Value v : op->getOperands())
      xs.push_back(operand(v));
    return emitScalar(ob, op->getLoc(), op, xs);
  };
  for (int64_t l = 0; l < levels; ++l) {
    // The values per row this pass reads (reductions of the pass before
    // were computed after it).
    for (Operation *op : region.ops) {
      if (level.lookup(op) != l || isFull(op) || isRowReduction(op))
        continue;
      Value r = scalarOf(rb, op, [&](Value v) {
        return member(v) ? perRow.lookup(v) : readInput(rb, v, Value());
      });
      perRow.map(op->getResult(0), r);
      writeOutput(rb, op->getResult(0), r, Value());
    }
    // The pass over the columns: this pass's values of full type.
    SmallVector<Operation *> pass;
    for (Operation *op : region.ops)
      if (level.lookup(op) == l && isFull(op))
        pass.push_back(op);
    SmallVector<Operation *> reductions;
    for (Operation *op : region.ops)
      if (isRowReduction(op) && level.lookup(op) == l + 1)
        reductions.push_back(op);
    if (!pass.empty()) {
      Block *columns;
      if (parallelRows)
        columns = parallelTo(rb, {cols}).getBody();
      else
        columns = loopTo(rb, cols).getBody();
      OpBuilder cb = OpBuilder::atBlockBegin(columns);
      Value col = columns->getArgument(0);
      IRMapping here;
      auto valueOf = [&](Value v) -> Value {
        if (Value s = here.lookupOrNull(v))
          return s;
        Operation *def = member(v);
        if (!def)
          return readInput(cb, v, col);
        if (!isFull(def))
          return perRow.lookup(v);
        return memref::LoadOp::create(cb, loc, rowBuffers.lookup(v),
                                      ValueRange{col});
      };
      for (Operation *op : pass) {
        Value r = scalarOf(cb, op, valueOf);
        here.map(op->getResult(0), r);
        writeOutput(cb, op->getResult(0), r, col);
        if (Value buffer = rowBuffers.lookup(op->getResult(0)))
          memref::StoreOp::create(cb, loc, r, buffer, ValueRange{col});
      }
    }
    // The reductions of this pass's values.
    for (Operation *op : reductions) {
      Value v = op->getOperand(0);
      Value buffer = rowBuffers.lookup(v);
      auto load = [&](OpBuilder &lb, Value j) -> Value {
        return buffer ? memref::LoadOp::create(lb, loc, buffer, ValueRange{j})
                      : readInput(lb, v, j);
      };
      Type result = getElementTypeOrSelf(op->getResult(0).getType());
      Value r = parallelRows
                    ? emitParallelRowReduce(rb, op->getLoc(), compute, cols,
                                            load, rowOrderOf(op), result)
                    : emitRowReduce(rb, op->getLoc(), compute, cols, load,
                                    rowOrderOf(op), result);
      perRow.map(op->getResult(0), r);
      writeOutput(rb, op->getResult(0), r, Value());
    }
  }
  return success();
}

struct FuseRegionsPass
    : public dtcc::lowering::impl::FuseRegionsBase<FuseRegionsPass> {
  using FuseRegionsBase::FuseRegionsBase;

  void runOnOperation() final {
    ModuleOp module = getOperation();
    MLIRContext *ctx = module.getContext();
    auto kernels = module.lookupSymbol<ModuleOp>(kKernelsModule);
    bool fresh = !kernels;
    if (fresh) {
      OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
      kernels = ModuleOp::create(b, module.getLoc(), StringRef(kKernelsModule));
    }
    unsigned counter = 0;
    llvm::StringMap<std::string> shared;
    for (auto fn : llvm::make_early_inc_range(module.getOps<func::FuncOp>())) {
      if (fn.isExternal() || !fn.getBody().hasOneBlock())
        continue;
      FunctionFusion(fn, kernels, counter, shared, remarks, rows, parallelRows)
          .run();
    }
    if (fresh && kernels.getBody()->empty())
      kernels.erase();
    (void)ctx;
  }
};

} // namespace
