//===- GraphNormPoolOps.cpp - batch/group norm and pooling: rules ---------===//
//
// Type inference, verifiers, VJP rules and sharding rules of the ops in
// GraphNormPoolOps.td. Everything these ops need lives here, so that the
// shared rule files stay as they are.
//
//===----------------------------------------------------------------------===//

#include "dialects/Graph/IR/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"

using namespace mlir;
using namespace dtcc::graph;

namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

RankedTensorType tensorOf(ArrayRef<int64_t> shape, Type element) {
  return RankedTensorType::get(shape, element);
}

/// Checks that `v` is `[C]` of `element`; `what` names it.
LogicalResult checkChannelVector(std::optional<Location> loc, Value v,
                                 int64_t channels, Type element,
                                 StringRef what) {
  auto t = typeOf(v);
  if (t.getRank() != 1 || t.getDimSize(0) != channels ||
      t.getElementType() != element)
    return emitOptionalError(loc, "expected ", what, " of type ",
                             tensorOf({channels}, element), ", got ", t);
  return success();
}

/// The common checks of the per-channel ops: rank(x) >= 2, every value of
/// `vectors` `[C]` of x's element type.
LogicalResult checkChannelOp(std::optional<Location> loc, Value x,
                             ArrayRef<std::pair<Value, StringRef>> vectors) {
  auto xt = typeOf(x);
  if (xt.getRank() < 2)
    return emitOptionalError(loc, "expected x of rank >= 2 ([N, C, ...]), got ",
                             xt);
  for (auto [v, what] : vectors)
    if (failed(checkChannelVector(loc, v, xt.getDimSize(1), xt.getElementType(),
                                  what)))
      return failure();
  return success();
}

LogicalResult checkEpsilon(std::optional<Location> loc, APFloat epsilon) {
  if (!(epsilon.convertToDouble() >= 0))
    return emitOptionalError(loc, "expected epsilon >= 0, got ",
                             epsilon.convertToDouble());
  return success();
}

/// `[2, C]` of x's element type: the sums of the statistics ops.
RankedTensorType statsType(Value x) {
  auto xt = typeOf(x);
  return tensorOf({2, xt.getDimSize(1)}, xt.getElementType());
}

/// Number of elements each channel's statistics sum over.
int64_t perChannelCount(RankedTensorType x) {
  return x.getNumElements() / std::max<int64_t>(1, x.getDimSize(1));
}

} // namespace

//===----------------------------------------------------------------------===//
// Batch normalization: types and verifiers
//===----------------------------------------------------------------------===//

LogicalResult BatchNormStatsOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr, OpaqueProperties properties, RegionRange,
    SmallVectorImpl<Type> &inferred) {
  Adaptor adaptor(operands, nullptr, properties);
  if (failed(checkChannelOp(loc, adaptor.getOperand(),
                            {{adaptor.getShift(), "shift"}})))
    return failure();
  inferred.push_back(statsType(adaptor.getOperand()));
  return success();
}

LogicalResult BatchNormOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr, OpaqueProperties properties, RegionRange,
    SmallVectorImpl<Type> &inferred) {
  Adaptor adaptor(operands, nullptr, properties);
  if (failed(checkChannelOp(loc, adaptor.getOperand(),
                            {{adaptor.getScale(), "scale"},
                             {adaptor.getBias(), "bias"},
                             {adaptor.getMean(), "mean"},
                             {adaptor.getVar(), "var"}})) ||
      failed(checkEpsilon(loc, adaptor.getEpsilon())))
    return failure();
  inferred.push_back(adaptor.getOperand().getType());
  return success();
}

LogicalResult BatchNormUpdateOp::verify() {
  if (typeOf(getRunningMean()).getRank() != 1)
    return emitOpError("expected rank-1 statistics, got ")
           << getRunningMean().getType();
  double momentum = getMomentum().convertToDouble();
  if (!(momentum >= 0 && momentum <= 1))
    return emitOpError("expected 0 <= momentum <= 1, got ") << momentum;
  if (!(getVarScale().convertToDouble() > 0))
    return emitOpError("expected var_scale > 0, got ")
           << getVarScale().convertToDouble();
  return success();
}

LogicalResult BatchNormGradStatsOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr, OpaqueProperties properties, RegionRange,
    SmallVectorImpl<Type> &inferred) {
  Adaptor adaptor(operands, nullptr, properties);
  Value x = adaptor.getOperand();
  if (failed(checkChannelOp(loc, x, {{adaptor.getMean(), "mean"}})))
    return failure();
  if (adaptor.getDy().getType() != x.getType())
    return emitOptionalError(loc, "expected dy of type ", x.getType(), ", got ",
                             adaptor.getDy().getType());
  inferred.push_back(statsType(x));
  return success();
}

LogicalResult BatchNormGradOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr, OpaqueProperties properties, RegionRange,
    SmallVectorImpl<Type> &inferred) {
  Adaptor adaptor(operands, nullptr, properties);
  Value x = adaptor.getOperand();
  if (failed(checkChannelOp(loc, x,
                            {{adaptor.getScale(), "scale"},
                             {adaptor.getMean(), "mean"},
                             {adaptor.getVar(), "var"}})) ||
      failed(checkEpsilon(loc, adaptor.getEpsilon())))
    return failure();
  if (adaptor.getDy().getType() != x.getType())
    return emitOptionalError(loc, "expected dy of type ", x.getType(), ", got ",
                             adaptor.getDy().getType());
  if (adaptor.getStats().getType() != statsType(x))
    return emitOptionalError(loc, "expected stats of type ", statsType(x),
                             ", got ", adaptor.getStats().getType());
  if (adaptor.getCount() < 1)
    return emitOptionalError(loc, "expected count >= 1, got ",
                             adaptor.getCount());
  inferred.push_back(x.getType());
  return success();
}

//===----------------------------------------------------------------------===//
// Group normalization: types and verifiers
//===----------------------------------------------------------------------===//

/// Checks x, [C] parameters and the group attribute; returns the group
/// count.
static FailureOr<int64_t>
checkGroupNorm(std::optional<Location> loc, Value x,
               ArrayRef<std::pair<Value, StringRef>> vectors,
               int64_t channelsPerGroup) {
  if (failed(checkChannelOp(loc, x, vectors)))
    return failure();
  int64_t channels = typeOf(x).getDimSize(1);
  if (channelsPerGroup < 1 || channels % channelsPerGroup != 0)
    return emitOptionalError(loc, "expected channels_per_group >= 1 dividing ",
                             channels, " channels, got ", channelsPerGroup);
  return channels / channelsPerGroup;
}

static RankedTensorType groupStatsType(Value x, int64_t groups) {
  auto xt = typeOf(x);
  return tensorOf({xt.getDimSize(0), groups}, xt.getElementType());
}

LogicalResult GroupNormOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr, OpaqueProperties properties, RegionRange,
    SmallVectorImpl<Type> &inferred) {
  Adaptor adaptor(operands, nullptr, properties);
  auto groups = checkGroupNorm(
      loc, adaptor.getOperand(),
      {{adaptor.getScale(), "scale"}, {adaptor.getBias(), "bias"}},
      adaptor.getChannelsPerGroup());
  if (failed(groups) || failed(checkEpsilon(loc, adaptor.getEpsilon())))
    return failure();
  inferred.push_back(adaptor.getOperand().getType());
  inferred.push_back(groupStatsType(adaptor.getOperand(), *groups));
  inferred.push_back(groupStatsType(adaptor.getOperand(), *groups));
  return success();
}

LogicalResult GroupNormGradOp::verify() {
  auto groups = checkGroupNorm(getLoc(), getOperand(),
                               {{getScale(), "scale"},
                                {getDscale(), "dscale"},
                                {getDbias(), "dbias"}},
                               getChannelsPerGroup());
  if (failed(groups))
    return failure();
  auto x = typeOf(getOperand());
  if (getDy().getType() != x || getDx().getType() != x)
    return emitOpError("expected dy and dx of type ") << x;
  auto stats = groupStatsType(getOperand(), *groups);
  if (getMean().getType() != stats || getRstd().getType() != stats)
    return emitOpError("expected mean and rstd of type ") << stats;
  return success();
}

//===----------------------------------------------------------------------===//
// Pooling: window arithmetic, types and verifiers
//===----------------------------------------------------------------------===//

namespace {

/// The window attributes of a pooling op.
struct PoolWindow {
  ArrayRef<int64_t> kernel, strides, dilations, padLow, padHigh;
  bool ceilMode = false;
};

/// The output size along one spatial dimension of `size` elements.
int64_t poolOutputSize(int64_t size, int64_t kernel, int64_t stride,
                       int64_t dilation, int64_t low, int64_t high,
                       bool ceilMode) {
  int64_t span = size + low + high - (kernel - 1) * dilation - 1;
  if (span < 0)
    return 0;
  int64_t out = (ceilMode ? (span + stride - 1) / stride : span / stride) + 1;
  // PyTorch (and ONNX since opset 19): a last window that would start in
  // the high padding is dropped.
  if (ceilMode && (out - 1) * stride >= size + low)
    --out;
  return out;
}

/// Checks the window against `x`'s type and returns the output shape.
FailureOr<SmallVector<int64_t>> poolShape(std::optional<Location> loc,
                                          RankedTensorType x,
                                          const PoolWindow &w) {
  int64_t rank = x.getRank();
  if (rank < 3)
    return emitOptionalError(loc,
                             "expected an input of rank >= 3 ([N, C, d...]), "
                             "got ",
                             x);
  size_t spatial = rank - 2;
  for (auto [what, list] :
       {std::pair<StringRef, ArrayRef<int64_t>>{"kernel", w.kernel},
        {"strides", w.strides},
        {"dilations", w.dilations},
        {"pad_low", w.padLow},
        {"pad_high", w.padHigh}}) {
    if (list.size() != spatial)
      return emitOptionalError(loc, "expected ", what, " with ", spatial,
                               " entries (one per spatial dimension), got ",
                               list.size());
    int64_t least = what.starts_with("pad") ? 0 : 1;
    for (int64_t v : list)
      if (v < least)
        return emitOptionalError(loc, "expected ", what, " entries >= ", least,
                                 ", got ", v);
  }
  SmallVector<int64_t> shape(x.getShape().take_front(2));
  for (size_t i = 0; i < spatial; ++i) {
    int64_t out = poolOutputSize(x.getDimSize(i + 2), w.kernel[i], w.strides[i],
                                 w.dilations[i], w.padLow[i], w.padHigh[i],
                                 w.ceilMode);
    if (out < 1)
      return emitOptionalError(loc, "expected a window that fits spatial "
                                    "dimension ",
                               i, " (", x.getDimSize(i + 2), " elements, ",
                               w.padLow[i], "+", w.padHigh[i],
                               " padding), got kernel ", w.kernel[i],
                               " with dilation ", w.dilations[i]);
    shape.push_back(out);
  }
  return shape;
}

template <typename Adaptor> PoolWindow windowOf(Adaptor &a) {
  return {a.getKernel(), a.getStrides(), a.getDilations(), a.getPadLow(),
          a.getPadHigh(), a.getCeilMode()};
}

} // namespace

LogicalResult MaxPoolOp::inferReturnTypes(
    MLIRContext *ctx, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr, OpaqueProperties properties, RegionRange,
    SmallVectorImpl<Type> &inferred) {
  Adaptor adaptor(operands, nullptr, properties);
  auto x = typeOf(adaptor.getOperand());
  auto shape = poolShape(loc, x, windowOf(adaptor));
  if (failed(shape))
    return failure();
  inferred.push_back(tensorOf(*shape, x.getElementType()));
  inferred.push_back(tensorOf(*shape, IntegerType::get(ctx, 64)));
  return success();
}

LogicalResult MaxPoolGradOp::verify() {
  auto dy = typeOf(getDy()), dx = typeOf(getResult());
  if (dy.getRank() < 3)
    return emitOpError("expected dy of rank >= 3 ([N, C, d...]), got ") << dy;
  if (dx.getRank() != dy.getRank() || dx.getElementType() != dy.getElementType() ||
      dx.getShape().take_front(2) != dy.getShape().take_front(2))
    return emitOpError("expected a result of dy's rank, element type and "
                       "first two dimensions, got ")
           << dx;
  return success();
}

LogicalResult AvgPoolOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr, OpaqueProperties properties, RegionRange,
    SmallVectorImpl<Type> &inferred) {
  Adaptor adaptor(operands, nullptr, properties);
  auto x = typeOf(adaptor.getOperand());
  auto shape = poolShape(loc, x, windowOf(adaptor));
  if (failed(shape))
    return failure();
  inferred.push_back(tensorOf(*shape, x.getElementType()));
  return success();
}

LogicalResult AvgPoolGradOp::verify() {
  auto dx = typeOf(getResult()), dy = typeOf(getDy());
  auto shape = poolShape(getLoc(), dx, windowOf(*this));
  if (failed(shape))
    return failure();
  if (dy != tensorOf(*shape, dx.getElementType()))
    return emitOpError("expected dy of type ")
           << tensorOf(*shape, dx.getElementType())
           << " (the pooled shape of the result), got " << dy;
  return success();
}

//===----------------------------------------------------------------------===//
// VJP rules
//===----------------------------------------------------------------------===//

namespace {

struct Emit {
  OpBuilder &b;
  Location loc;

  Value splat(Value like, double value) {
    return ConstantOp::create(b, loc, splatOf(typeOf(like), value));
  }
  Value add(Value x, Value y) { return AddOp::create(b, loc, x, y); }
  Value mul(Value x, Value y) { return MulOp::create(b, loc, x, y); }
  /// Row `row` of a `[2, C]` statistics tensor, as `[C]`.
  Value row(Value stats, int64_t row) {
    auto t = typeOf(stats);
    int64_t c = t.getDimSize(1);
    Value r = SliceOp::create(b, loc, stats, ArrayRef<int64_t>{row, 0},
                              ArrayRef<int64_t>{row + 1, c},
                              ArrayRef<int64_t>{1, 1});
    return ReshapeOp::create(b, loc, tensorOf({c}, t.getElementType()), r);
  }
  /// `1 / sqrt(var + epsilon)`.
  Value rstd(Value var, double epsilon) {
    return RsqrtOp::create(b, loc, add(var, splat(var, epsilon)));
  }
};

} // namespace

LogicalResult BatchNormOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                    SmallVectorImpl<Value> &out) {
  out.assign(getNumOperands(), Value());
  Value g = grads[0];
  if (!g)
    return success();
  Emit e{b, getLoc()};
  Value x = getOperand();
  auto xt = typeOf(x);
  double epsilon = getEpsilon().convertToDouble();
  Value r = e.rstd(getVar(), epsilon);
  Value stats = BatchNormGradStatsOp::create(b, getLoc(), x, getMean(), g);
  Value sumDy = e.row(stats, 0), sumDyX = e.row(stats, 1);
  out[2] = sumDy;              // dbias
  out[1] = e.mul(sumDyX, r);   // dscale
  if (getTraining()) {
    // Through the batch statistics: mean and var are functions of x here.
    out[0] = BatchNormGradOp::create(b, getLoc(), x, g, getScale(), getMean(),
                                     getVar(), stats, getEpsilonAttr(),
                                     b.getI64IntegerAttr(perChannelCount(xt)));
    return success();
  }
  // Independent statistics: y is affine in x per channel.
  Value a = e.mul(getScale(), r);
  out[0] = e.mul(g, BroadcastInDimOp::create(b, getLoc(), xt, a,
                                             ArrayRef<int64_t>{1}));
  out[3] = NegOp::create(b, getLoc(), e.mul(a, sumDy));
  // d/dvar r = -r^3 / 2.
  out[4] = e.mul(e.mul(sumDyX, e.mul(a, e.mul(r, r))), e.splat(r, -0.5));
  return success();
}

LogicalResult BatchNormUpdateOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                          SmallVectorImpl<Value> &out) {
  out.assign(4, Value());
  Emit e{b, getLoc()};
  double momentum = getMomentum().convertToDouble();
  double scale = getVarScale().convertToDouble();
  if (Value g = grads[0]) {
    out[0] = e.mul(g, e.splat(g, momentum));
    out[2] = e.mul(g, e.splat(g, 1 - momentum));
  }
  if (Value g = grads[1]) {
    out[1] = e.mul(g, e.splat(g, momentum));
    out[3] = e.mul(g, e.splat(g, scale * (1 - momentum)));
  }
  return success();
}

LogicalResult GroupNormOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                    SmallVectorImpl<Value> &out) {
  out.assign(3, Value());
  if (grads[1] || grads[2])
    return emitOpError("has no VJP rule for gradients of its mean and rstd");
  if (!grads[0])
    return success();
  auto scale = typeOf(getScale());
  auto op = GroupNormGradOp::create(b, getLoc(), typeOf(getOperand()), scale,
                                    scale, getOperand(), getScale(), getMean(),
                                    getRstd(), grads[0], getChannelsPerGroup());
  out[0] = op.getDx();
  out[1] = op.getDscale();
  out[2] = op.getDbias();
  return success();
}

LogicalResult MaxPoolOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                  SmallVectorImpl<Value> &out) {
  out.assign(1, Value());
  if (!grads[0])
    return success();
  out[0] = MaxPoolGradOp::create(b, getLoc(), typeOf(getOperand()), grads[0],
                                 getIndices());
  return success();
}

LogicalResult AvgPoolOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                  SmallVectorImpl<Value> &out) {
  out.assign(1, Value());
  if (!grads[0])
    return success();
  out[0] = AvgPoolGradOp::create(
      b, getLoc(), typeOf(getOperand()), grads[0], getKernelAttr(),
      getStridesAttr(), getDilationsAttr(), getPadLowAttr(), getPadHighAttr(),
      getCeilModeAttr(), getCountIncludePadAttr());
  return success();
}

//===----------------------------------------------------------------------===//
// Sharding rules
//===----------------------------------------------------------------------===//

namespace {

using Rule = ShardingRule;
using Kind = ShardingRule::Kind;

/// One factor per dimension (none for size-1 dimensions).
Rule::TensorFactors mapped(RankedTensorType type, ArrayRef<int64_t> ids) {
  Rule::TensorFactors t;
  for (auto [d, id] : llvm::enumerate(ids)) {
    t.emplace_back();
    if (type.getDimSize(d) != 1 && id >= 0)
      t.back().push_back(id);
  }
  return t;
}

/// What a tensor of a per-channel op is: like x, a [C] vector, the [2, C]
/// sums of the batch-norm statistics ops, or group norm's [N, G]
/// statistics. Given per operand and result, not guessed from ranks (a
/// rank-2 x is [N, C], like the sums).
enum class Role { kRows, kChannel, kSums, kGroupStats };

/// The factors of each tensor of a per-channel op over x's dimensions
/// `ids` (channel factor ids[1]); `sumsRow` is the [2, C] tensors' first
/// dimension.
Rule::TensorFactors roleFactors(RankedTensorType t, Role role,
                                ArrayRef<int64_t> ids, int64_t sumsRow) {
  switch (role) {
  case Role::kRows:
    return mapped(t, ids);
  case Role::kChannel:
    return mapped(t, {ids[1]});
  case Role::kSums:
    return mapped(t, {sumsRow, ids[1]});
  case Role::kGroupStats:
    break;
  }
  llvm_unreachable("group statistics belong to groupNormRule");
}

/// Batch-norm ops: x's batch and spatial dimensions `lead` (reductions for
/// the statistics ops, whose split leaves partial sums; parallel for the
/// per-element ops), channels parallel.
Rule channelRule(Operation *op, Kind lead, ArrayRef<Role> operands,
                 ArrayRef<Role> results) {
  Rule r;
  auto xt = typeOf(op->getOperand(0));
  SmallVector<int64_t> ids;
  for (int64_t d = 0; d < xt.getRank(); ++d)
    ids.push_back(r.addFactor(xt.getDimSize(d), d == 1 ? Kind::kParallel : lead));
  int64_t sumsRow = -1;
  if (llvm::is_contained(operands, Role::kSums) ||
      llvm::is_contained(results, Role::kSums))
    sumsRow = r.addFactor(2, Kind::kReplicated);
  for (auto [v, role] : llvm::zip_equal(op->getOperands(), operands))
    r.operands.push_back(roleFactors(typeOf(v), role, ids, sumsRow));
  for (auto [v, role] : llvm::zip_equal(op->getResults(), results))
    r.results.push_back(roleFactors(typeOf(v), role, ids, sumsRow));
  return r;
}

/// Group norm: samples `batch` (parallel, or summed into the parameter
/// gradients), groups parallel, the channels of a group and the spatial
/// dimensions whole.
Rule groupNormRule(Operation *op, int64_t perGroup, Kind batch,
                   ArrayRef<Role> operands, ArrayRef<Role> results) {
  Rule r;
  auto xt = typeOf(op->getOperand(0));
  int64_t channels = xt.getDimSize(1), groups = channels / perGroup;
  int64_t n = r.addFactor(xt.getDimSize(0), batch);
  int64_t g = groups > 1 ? r.addFactor(groups) : -1;
  int64_t cg = perGroup > 1 ? r.addFactor(perGroup, Kind::kReplicated) : -1;
  SmallVector<int64_t, 2> channel;
  for (int64_t f : {g, cg})
    if (f >= 0)
      channel.push_back(f);
  Rule::TensorFactors rows;
  rows.push_back(xt.getDimSize(0) != 1 ? SmallVector<int64_t, 2>{n}
                                       : SmallVector<int64_t, 2>{});
  rows.push_back(channel);
  for (int64_t d = 2; d < xt.getRank(); ++d) {
    rows.emplace_back();
    if (xt.getDimSize(d) != 1)
      rows.back().push_back(r.addFactor(xt.getDimSize(d), Kind::kReplicated));
  }
  auto factors = [&](Value v, Role role) -> Rule::TensorFactors {
    switch (role) {
    case Role::kRows:
      return rows;
    case Role::kChannel:
      return {channel};
    case Role::kGroupStats:
      return mapped(typeOf(v), {n, g});
    case Role::kSums:
      break;
    }
    llvm_unreachable("group norm has no [2, C] sums");
  };
  for (auto [v, role] : llvm::zip_equal(op->getOperands(), operands))
    r.operands.push_back(factors(v, role));
  for (auto [v, role] : llvm::zip_equal(op->getResults(), results))
    r.results.push_back(factors(v, role));
  return r;
}

/// Pooling and its gradients: samples and channels parallel, the spatial
/// dimensions of each tensor whole.
Rule poolRule(Operation *op) {
  Rule r;
  auto first = typeOf(op->getOperand(0));
  int64_t n = r.addFactor(first.getDimSize(0));
  int64_t c = r.addFactor(first.getDimSize(1));
  auto factors = [&](Value v) {
    auto t = typeOf(v);
    SmallVector<int64_t> ids = {n, c};
    for (int64_t d = 2; d < t.getRank(); ++d)
      ids.push_back(r.addFactor(t.getDimSize(d), Kind::kReplicated));
    return mapped(t, ids);
  };
  for (Value v : op->getOperands())
    r.operands.push_back(factors(v));
  for (Value v : op->getResults())
    r.results.push_back(factors(v));
  return r;
}

} // namespace

ShardingRule BatchNormStatsOp::getShardingRule() {
  using R = Role;
  return channelRule(*this, Kind::kReduction, {R::kRows, R::kChannel},
                     {R::kSums});
}

ShardingRule BatchNormGradStatsOp::getShardingRule() {
  using R = Role;
  return channelRule(*this, Kind::kReduction,
                     {R::kRows, R::kChannel, R::kRows}, {R::kSums});
}

ShardingRule BatchNormOp::getShardingRule() {
  using R = Role;
  return channelRule(
      *this, Kind::kParallel,
      {R::kRows, R::kChannel, R::kChannel, R::kChannel, R::kChannel},
      {R::kRows});
}

ShardingRule BatchNormGradOp::getShardingRule() {
  using R = Role;
  return channelRule(
      *this, Kind::kParallel,
      {R::kRows, R::kRows, R::kChannel, R::kChannel, R::kChannel, R::kSums},
      {R::kRows});
}

ShardingRule BatchNormUpdateOp::getShardingRule() {
  Rule r;
  auto t = typeOf(getRunningMean());
  int64_t c = r.addFactor(t.getDimSize(0));
  for (Value v : getOperands())
    r.operands.push_back(mapped(typeOf(v), {c}));
  for (Value v : getResults())
    r.results.push_back(mapped(typeOf(v), {c}));
  return r;
}

ShardingRule GroupNormOp::getShardingRule() {
  using R = Role;
  return groupNormRule(*this, getChannelsPerGroup(), Kind::kParallel,
                       {R::kRows, R::kChannel, R::kChannel},
                       {R::kRows, R::kGroupStats, R::kGroupStats});
}

ShardingRule GroupNormGradOp::getShardingRule() {
  // Samples are parallel for dx and summed into dscale and dbias.
  using R = Role;
  return groupNormRule(
      *this, getChannelsPerGroup(), Kind::kReduction,
      {R::kRows, R::kChannel, R::kGroupStats, R::kGroupStats, R::kRows},
      {R::kRows, R::kChannel, R::kChannel});
}

ShardingRule MaxPoolOp::getShardingRule() { return poolRule(*this); }
ShardingRule MaxPoolGradOp::getShardingRule() { return poolRule(*this); }
ShardingRule AvgPoolOp::getShardingRule() { return poolRule(*this); }
ShardingRule AvgPoolGradOp::getShardingRule() { return poolRule(*this); }

//===----------------------------------------------------------------------===//
// Canonicalization
//===----------------------------------------------------------------------===//

namespace {

/// Whether `v` is a float splat constant equal to `value`.
bool isSplat(Value v, double value) {
  DenseElementsAttr attr;
  if (!matchPattern(v, m_Constant(&attr)) || !attr.isSplat())
    return false;
  auto f = dyn_cast<FloatAttr>(attr.getSplatValue<Attribute>());
  return f && f.getValueAsDouble() == value;
}

/// The per-channel value that `v` broadcasts along dimension 1 of an
/// [N, C, ...] tensor (a [C] or [C, 1, ...] value put on dimension 1), or
/// null.
Value channelSource(Value v, int64_t channels) {
  auto b = v.getDefiningOp<BroadcastInDimOp>();
  if (!b)
    return {};
  auto in = typeOf(b.getOperand());
  bool found = false;
  for (auto [i, d] : llvm::enumerate(b.getDims())) {
    int64_t size = in.getDimSize(i);
    if (d == 1 && size == channels)
      found = true;
    else if (size != 1)
      return {};
  }
  return found ? b.getOperand() : Value();
}

/// `v` (of channelSource) as [C].
Value asChannelVector(Value v, int64_t channels, PatternRewriter &rewriter) {
  auto vec = tensorOf({channels}, typeOf(v).getElementType());
  if (v.getType() == vec)
    return v;
  return ReshapeOp::create(rewriter, v.getLoc(), vec, v);
}

/// The other operand of the single-use binary op `op` using `v`.
template <typename OpTy> Value otherOperand(OpTy op, Value v) {
  return op.getLhs() == v ? op.getRhs() : op.getLhs();
}

/// reshape(x: [N, C, d...] -> [N, G, L]) -> group_norm(ones, zeros, one
/// channel per group) -> reshape back -> mul by a per-channel weight -> add
/// a per-channel bias: group_norm(x, weight, bias) with C / G channels per
/// group. This is torch.onnx.export's nn.GroupNorm (opset <= 17).
struct FuseGroupNormAffine : OpRewritePattern<GroupNormOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(GroupNormOp gn,
                                PatternRewriter &rewriter) const override {
    if (gn.getChannelsPerGroup() != 1 || !gn.getMean().use_empty() ||
        !gn.getRstd().use_empty() || !gn.getResult().hasOneUse() ||
        !isSplat(gn.getScale(), 1.0) || !isSplat(gn.getBias(), 0.0))
      return failure();
    auto in = gn.getOperand().getDefiningOp<ReshapeOp>();
    if (!in)
      return failure();
    Value x = in.getOperand();
    auto xt = typeOf(x), grouped = typeOf(gn.getOperand());
    if (xt.getRank() < 2 || grouped.getRank() != 3 ||
        xt.getDimSize(0) != grouped.getDimSize(0))
      return failure();
    int64_t channels = xt.getDimSize(1), groups = grouped.getDimSize(1);
    if (groups < 1 || channels % groups != 0)
      return failure();
    auto back = dyn_cast<ReshapeOp>(*gn.getResult().getUsers().begin());
    if (!back || back.getType() != xt || !back->hasOneUse())
      return failure();
    auto mul = dyn_cast<MulOp>(*back->getUsers().begin());
    if (!mul || !mul->hasOneUse())
      return failure();
    auto add = dyn_cast<AddOp>(*mul->getUsers().begin());
    if (!add)
      return failure();
    Value weight = channelSource(otherOperand(mul, back.getResult()), channels);
    Value bias = channelSource(otherOperand(add, mul.getResult()), channels);
    if (!weight || !bias ||
        typeOf(weight).getElementType() != xt.getElementType() ||
        typeOf(bias).getElementType() != xt.getElementType())
      return failure();
    rewriter.setInsertionPoint(add);
    weight = asChannelVector(weight, channels, rewriter);
    bias = asChannelVector(bias, channels, rewriter);
    Location loc = rewriter.getFusedLoc({gn.getLoc(), mul.getLoc(), add.getLoc()});
    auto fused = GroupNormOp::create(rewriter, loc, x, weight, bias,
                                     uint64_t(channels / groups), gn.getEpsilon());
    rewriter.replaceOp(add, fused.getResult());
    return success();
  }
};

} // namespace

void GroupNormOp::getCanonicalizationPatterns(RewritePatternSet &patterns,
                                              MLIRContext *context) {
  patterns.add<FuseGroupNormAffine>(context);
}
