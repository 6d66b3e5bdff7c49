//===- GraphConvOps.cpp - convolutions: verifiers, VJPs, sharding rules ---===//
//
// The three ops of GraphConvOps.td share one window check (convResultShape),
// one VJP scheme (each op's operand gradients are the other two ops) and
// one sharding rule shape (batch, groups, channels; spatial replicated).
//
//===----------------------------------------------------------------------===//

#include "dialects/Graph/IR/GraphOps.h"
#include "runtime/base/OpFlops.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace dtcc::graph;

namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// The window attributes of a convolution op.
struct Window {
  ArrayRef<int64_t> strides, dilations, low, high;
  int64_t groups;
};

template <typename Op> Window windowOf(Op op) {
  return {op.getStrides(), op.getDilations(), op.getPadLow(), op.getPadHigh(),
          static_cast<int64_t>(op.getGroups())};
}

/// Checks `dgraph.conv`'s constraints for `input` and `filter` and returns
/// its result shape [N, O, Y1..Yd]; emits the first violation at `loc`.
FailureOr<SmallVector<int64_t>> convResultShape(std::optional<Location> loc,
                                                RankedTensorType input,
                                                RankedTensorType filter,
                                                const Window &w) {
  int64_t rank = input.getRank();
  if (rank < 3 || rank > 5)
    return emitOptionalError(loc, "expected an input of rank 3, 4 or 5 "
                                  "(batch, channels and 1 to 3 spatial "
                                  "dimensions), got ", input);
  if (filter.getRank() != rank)
    return emitOptionalError(loc, "expected a filter of rank ", rank,
                             " (the input's), got ", filter);
  if (filter.getElementType() != input.getElementType())
    return emitOptionalError(loc, "expected input and filter of one element "
                                  "type, got ", input.getElementType(),
                             " and ", filter.getElementType());
  size_t spatial = rank - 2;
  for (auto [name, values] :
       {std::pair<StringRef, ArrayRef<int64_t>>{"strides", w.strides},
        {"dilations", w.dilations},
        {"pad_low", w.low},
        {"pad_high", w.high}}) {
    if (values.size() != spatial)
      return emitOptionalError(loc, "expected ", name, " of size ", spatial,
                               " (one per spatial dimension), got ",
                               values.size());
    int64_t least = name.starts_with("pad") ? 0 : 1;
    for (auto [d, v] : llvm::enumerate(values))
      if (v < least)
        return emitOptionalError(loc, "expected ", name, " >= ", least,
                                 ", got ", v, " in spatial dimension ", d);
  }
  int64_t c = input.getDimSize(1), o = filter.getDimSize(0);
  if (w.groups < 1)
    return emitOptionalError(loc, "expected groups >= 1, got ", w.groups);
  if (c % w.groups != 0)
    return emitOptionalError(loc, "expected groups (", w.groups,
                             ") to divide the input channels (", c, ")");
  if (o % w.groups != 0)
    return emitOptionalError(loc, "expected groups (", w.groups,
                             ") to divide the filter's output channels (", o,
                             ")");
  if (filter.getDimSize(1) != c / w.groups)
    return emitOptionalError(loc, "expected filter dimension 1 to be C / "
                                  "groups = ", c / w.groups, ", got ",
                             filter.getDimSize(1));
  SmallVector<int64_t> shape = {input.getDimSize(0), o};
  for (size_t d = 0; d < spatial; ++d) {
    int64_t k = filter.getDimSize(d + 2);
    if (k < 1)
      return emitOptionalError(loc, "expected kernel sizes >= 1, got ", k,
                               " in spatial dimension ", d);
    int64_t padded = input.getDimSize(d + 2) + w.low[d] + w.high[d];
    int64_t extent = (k - 1) * w.dilations[d] + 1;
    if (padded < extent)
      return emitOptionalError(loc, "expected the padded input (", padded,
                               ") to hold a dilated window (", extent,
                               ") in spatial dimension ", d);
    shape.push_back((padded - extent) / w.strides[d] + 1);
  }
  return shape;
}

/// The check shared by the gradients: `grad` is the convolution of
/// `input` by `filter`, and all three have one element type.
LogicalResult verifyGradient(Operation *op, RankedTensorType input,
                             RankedTensorType filter, RankedTensorType grad,
                             const Window &w, StringRef inputIs,
                             StringRef filterIs) {
  auto shape = convResultShape(op->getLoc(), input, filter, w);
  if (failed(shape))
    return failure();
  auto expected = RankedTensorType::get(*shape, input.getElementType());
  if (grad != expected)
    return op->emitOpError("expected grad of type ")
           << expected << " (the convolution of " << inputIs << " by "
           << filterIs << "), got " << grad;
  return success();
}

} // namespace

//===----------------------------------------------------------------------===//
// Verifiers and type inference
//===----------------------------------------------------------------------===//

LogicalResult ConvOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr, OpaqueProperties properties, RegionRange,
    SmallVectorImpl<Type> &inferred) {
  Adaptor adaptor(operands, nullptr, properties);
  auto input = cast<RankedTensorType>(adaptor.getInput().getType());
  auto filter = cast<RankedTensorType>(adaptor.getFilter().getType());
  Window w{adaptor.getStrides(), adaptor.getDilations(), adaptor.getPadLow(),
           adaptor.getPadHigh(), static_cast<int64_t>(adaptor.getGroups())};
  auto shape = convResultShape(loc, input, filter, w);
  if (failed(shape))
    return failure();
  inferred.push_back(RankedTensorType::get(*shape, input.getElementType()));
  return success();
}

LogicalResult ConvInputGradOp::verify() {
  return verifyGradient(*this, typeOf(getResult()), typeOf(getFilter()),
                        typeOf(getGrad()), windowOf(*this), "the result",
                        "the filter");
}

LogicalResult ConvFilterGradOp::verify() {
  return verifyGradient(*this, typeOf(getInput()), typeOf(getResult()),
                        typeOf(getGrad()), windowOf(*this), "the input",
                        "the result");
}

//===----------------------------------------------------------------------===//
// VJP rules
//===----------------------------------------------------------------------===//
//
// With <a, b> the sum of a * b, the three ops are one trilinear form:
//   <conv(x, w), dy> = <x, conv_input_grad(dy, w)> = <w, conv_filter_grad(x, dy)>
// so the gradient of each operand of any of them is one of the other two.

namespace {

/// Builds conv-family op `Op` with `window` (of the op whose VJP this is).
template <typename Op, typename From>
Value createLike(OpBuilder &b, From from, Type type, Value a, Value c) {
  return Op::create(b, from.getLoc(), type, a, c, from.getStridesAttr(),
                    from.getDilationsAttr(), from.getPadLowAttr(),
                    from.getPadHighAttr(), from.getGroupsAttr());
}

} // namespace

LogicalResult ConvOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                               SmallVectorImpl<Value> &out) {
  out.assign(2, Value());
  if (!grads[0])
    return success();
  out[0] = createLike<ConvInputGradOp>(b, *this, getInput().getType(),
                                       grads[0], getFilter());
  out[1] = createLike<ConvFilterGradOp>(b, *this, getFilter().getType(),
                                        getInput(), grads[0]);
  return success();
}

LogicalResult ConvInputGradOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                        SmallVectorImpl<Value> &out) {
  // result = conv_input_grad(grad, filter): d grad = conv(g, filter),
  // d filter = conv_filter_grad(g, grad).
  out.assign(2, Value());
  if (!grads[0])
    return success();
  out[0] = createLike<ConvOp>(b, *this, getGrad().getType(), grads[0],
                              getFilter());
  out[1] = createLike<ConvFilterGradOp>(b, *this, getFilter().getType(),
                                        grads[0], getGrad());
  return success();
}

LogicalResult ConvFilterGradOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                         SmallVectorImpl<Value> &out) {
  // result = conv_filter_grad(input, grad): d input =
  // conv_input_grad(grad, g), d grad = conv(input, g).
  out.assign(2, Value());
  if (!grads[0])
    return success();
  out[0] = createLike<ConvInputGradOp>(b, *this, getInput().getType(),
                                       getGrad(), grads[0]);
  out[1] = createLike<ConvOp>(b, *this, getGrad().getType(), getInput(),
                              grads[0]);
  return success();
}

//===----------------------------------------------------------------------===//
// Sharding rules
//===----------------------------------------------------------------------===//

namespace {

using Rule = ShardingRule;
using Kind = ShardingRule::Kind;

/// A convolution's factors: batch (n), groups (g), the output (og) and input
/// (cg) channels of a group, and the spatial sizes of the input (x), the
/// convolution's result (y) and the kernel (k), which are replicated: a
/// split spatial dimension would need a halo exchange, which dtcc does not
/// do. Size-1 factors are left out of the tensors (they cannot be split).
struct ConvFactors {
  Rule rule;
  int64_t n, g, og, cg;
  SmallVector<int64_t> x, y, k;

  ConvFactors(RankedTensorType input, RankedTensorType filter,
              RankedTensorType result, int64_t groups, Kind batch,
              Kind outChannels, Kind inChannels) {
    n = rule.addFactor(input.getDimSize(0), batch);
    g = rule.addFactor(groups);
    og = rule.addFactor(filter.getDimSize(0) / groups, outChannels);
    cg = rule.addFactor(filter.getDimSize(1), inChannels);
    for (int64_t d = 2; d < input.getRank(); ++d) {
      x.push_back(rule.addFactor(input.getDimSize(d), Kind::kReplicated));
      y.push_back(rule.addFactor(result.getDimSize(d), Kind::kReplicated));
      k.push_back(rule.addFactor(filter.getDimSize(d), Kind::kReplicated));
    }
  }

  /// One dimension made of `ids`, major to minor.
  SmallVector<int64_t, 2> dim(std::initializer_list<int64_t> ids) const {
    SmallVector<int64_t, 2> out;
    for (int64_t id : ids)
      if (rule.factors[id].size != 1)
        out.push_back(id);
    return out;
  }
  Rule::TensorFactors tensor(SmallVector<int64_t, 2> d0,
                             SmallVector<int64_t, 2> d1,
                             ArrayRef<int64_t> spatial) const {
    Rule::TensorFactors t = {d0, d1};
    for (int64_t id : spatial)
      t.push_back(dim({id}));
    return t;
  }
  /// [N, C, X..], [O, C/groups, K..] and [N, O, Y..].
  Rule::TensorFactors input() const {
    return tensor(dim({n}), dim({g, cg}), x);
  }
  Rule::TensorFactors filter() const {
    return tensor(dim({g, og}), dim({cg}), k);
  }
  Rule::TensorFactors output() const {
    return tensor(dim({n}), dim({g, og}), y);
  }
};

} // namespace

ShardingRule ConvOp::getShardingRule() {
  // Input channels are summed over: split, they leave partial sums.
  ConvFactors f(typeOf(getInput()), typeOf(getFilter()), typeOf(getResult()),
                getGroups(), Kind::kParallel, Kind::kParallel,
                Kind::kReduction);
  f.rule.operands = {f.input(), f.filter()};
  f.rule.results = {f.output()};
  return f.rule;
}

ShardingRule ConvInputGradOp::getShardingRule() {
  // The forward's output channels are summed over.
  ConvFactors f(typeOf(getResult()), typeOf(getFilter()), typeOf(getGrad()),
                getGroups(), Kind::kParallel, Kind::kReduction,
                Kind::kParallel);
  f.rule.operands = {f.output(), f.filter()};
  f.rule.results = {f.input()};
  return f.rule;
}

ShardingRule ConvFilterGradOp::getShardingRule() {
  // The batch is summed over.
  ConvFactors f(typeOf(getInput()), typeOf(getResult()), typeOf(getGrad()),
                getGroups(), Kind::kReduction, Kind::kParallel,
                Kind::kParallel);
  f.rule.operands = {f.input(), f.output()};
  f.rule.results = {f.filter()};
  return f.rule;
}

//===----------------------------------------------------------------------===//
// FLOPs: the forward's multiply-adds, for each of the three
//===----------------------------------------------------------------------===//

static std::vector<int64_t> shapeVector(ArrayRef<int64_t> shape) {
  return std::vector<int64_t>(shape.begin(), shape.end());
}

double ConvOp::getFlops(ArrayRef<SmallVector<int64_t>> operands,
                        ArrayRef<SmallVector<int64_t>> results) {
  return dtcc::runtime::convFlops(shapeVector(operands[1]),
                                  shapeVector(results[0]));
}

double ConvInputGradOp::getFlops(ArrayRef<SmallVector<int64_t>> operands,
                                 ArrayRef<SmallVector<int64_t>> results) {
  return dtcc::runtime::convFlops(shapeVector(operands[1]),
                                  shapeVector(operands[0]));
}

double ConvFilterGradOp::getFlops(ArrayRef<SmallVector<int64_t>> operands,
                                  ArrayRef<SmallVector<int64_t>> results) {
  return dtcc::runtime::convFlops(shapeVector(results[0]),
                                  shapeVector(operands[1]));
}
