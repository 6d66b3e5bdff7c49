//===- Partition.cpp - one rank's program and its communication -----------===//
//
// Rewrites a propagated module in place into the program every rank runs
// (SPMD): local types everywhere, and collectives where a value's sharding
// differs from the one its user requires.
//
//===----------------------------------------------------------------------===//

#include "passes/Sharding/Passes.h"
#include "passes/Sharding/ShardingUtils.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/MapVector.h"

namespace dtcc::shard {
#define GEN_PASS_DEF_SHARDPARTITION
#include "passes/Sharding/Passes.h.inc"
} // namespace dtcc::shard

using namespace mlir;
using namespace dtcc;
using namespace dtcc::shard;

namespace {

/// On split variables and arguments: their type before partitioning.

class FunctionPartitioner {
public:
  FunctionPartitioner(func::FuncOp fn, MeshAttr mesh) : fn_(fn), mesh_(mesh) {
    PlanAttr plan = getPlan(fn);
    regather_ = plan && plan.getSequenceParallel();
  }

  LogicalResult run();

private:
  /// The local type of a value of global type `global` laid out as `s`.
  FailureOr<RankedTensorType> localType(RankedTensorType global, ShardingAttr s,
                                        Operation *at);
  /// `v` (local, laid out as `from`) laid out as `to`, for `user`.
  FailureOr<Value> reshard(Value v, ShardingAttr from, ShardingAttr to,
                           Operation *user);
  /// Applies `step` to dimension `dim` of `v`, viewing it as `groups` blocks
  /// (a reshape around the step when groups > 1).
  Value onGroups(OpBuilder &b, Location loc, Value v, int64_t dim,
                 int64_t groups, int64_t newBlock,
                 llvm::function_ref<Value(Value, int64_t, RankedTensorType)> step);
  LogicalResult fixAttributes(Operation *op, ArrayRef<ShardingAttr> ins);
  /// A counter-based draw (dgraph.dropout's mask, dgraph.random) on a
  /// block of a split tensor draws the whole tensor's values: its offsets
  /// operand and global_shape (the ops' descriptions). `s` lays out the
  /// drawn tensor (dropout's operand, random's result).
  template <typename DrawOp>
  LogicalResult drawAsWhole(DrawOp op, ShardingAttr s);
  /// The distributed form of an op whose vocabulary (special factor) is
  /// split: embedding lookup and its gradient, cross-entropy and its
  /// gradient (Megatron's vocab-parallel forms). Returns the local results,
  /// or an empty list when the op's vocabulary is whole.
  FailureOr<SmallVector<Value>> lowerVocabParallel(Operation *op,
                                                   ArrayRef<ShardingAttr> ins);
  /// "forward", "backward" or "optimizer": where `op` sits in the step.
  StringRef phaseOf(Operation *op) const;
  /// The pass of a pipeline's op (dtcc-shard-microbatch's tag), else its
  /// phase.
  StringRef passOf(Operation *op) const;
  /// Tags the collectives reshard() just made with the phase of `at`.
  void tagPhase(Operation *at);
  /// ZeRO-3 parameters cast once at their load (mixed precision) gathered
  /// in the compute type, anew for each pass and layer that uses them.
  void gatherCastParametersPerUse();
  /// The dimension a pipeline transfer of local type `t` laid out as `s`
  /// travels split over tp on (splitTransfer), or -1.
  int64_t transportDim(RankedTensorType t, ShardingAttr s) const;
  /// Scatter/gather of pipeline transfers (Megatron-LM SC'21 section 4.1):
  /// a value sent between stages that tensor parallelism replicates goes as
  /// each tp rank's 1/tp of it (transportDim), sliced before the send (no
  /// communication; the send's wait keeps the slice alive) and gathered
  /// over tp after the receive, so the pp link, across nodes, carries 1/tp
  /// of the bytes and the tp group's link (NVLink) the rest.
  void splitTransfer(Operation *op);
  /// Slices sent in place of the values the sends' waits still name, by
  /// the sends' handles.
  llvm::DenseMap<int64_t, std::pair<Value, Value>> transferSlices_;

  /// Records the ops reshard() makes.
  struct Recorder : public OpBuilder::Listener {
    explicit Recorder(SmallVector<Operation *> *ops) : ops(ops) {}
    SmallVector<Operation *> *ops;
    void notifyOperationInserted(Operation *op, OpBuilder::InsertPoint) final {
      ops->push_back(op);
    }
  };
  SmallVector<Operation *> created_;
  Recorder recorder_{&created_};

  func::FuncOp fn_;
  MeshAttr mesh_;
  /// The module's variables by name (ZeRO loads are asked about per use).
  SymbolTableCollection symbols_;
  llvm::DenseMap<Value, RankedTensorType> global_;
  llvm::DenseMap<Value, ShardingAttr> sharding_;
  /// Resharded versions of a value, by sharding, reused by later users.
  llvm::DenseMap<Value, SmallVector<std::pair<ShardingAttr, Value>>> versions_;
  /// Versions gathered for a forward-pass user. With sequence parallelism
  /// the backward pass gathers again rather than keep them (Megatron's
  /// choice: the gathered activations are what it saves).
  llvm::DenseSet<Value> forwardGathers_;
  bool regather_ = false;
  /// Program positions: of each original op, of the loss and of the first
  /// optimizer op.
  llvm::DenseMap<Operation *, int64_t> position_;
  int64_t lossPosition_ = -1, optimizerPosition_ = INT64_MAX;
  /// In a pipeline stage's function: the first and last op of a task.
  int64_t firstTask_ = -1, lastTask_ = -1;
};

StringRef FunctionPartitioner::passOf(Operation *op) const {
  if (auto pass = op->getAttrOfType<StringAttr>(kPassAttr))
    return pass.getValue();
  return phaseOf(op);
}

StringRef FunctionPartitioner::phaseOf(Operation *op) const {
  int64_t pos = position_.lookup(op);
  // A pipeline stage interleaves its micro-batches' passes: each op of a
  // task says which; before the first task is the step's set-up (forward:
  // weight loads and casts), after the last the update, and between tasks
  // the gradients' accumulation (backward).
  if (firstTask_ >= 0) {
    if (auto task = op->getAttrOfType<StringAttr>(kTaskAttr))
      return task.getValue().starts_with("forward") ? "forward" : "backward";
    if (pos < firstTask_)
      return "forward";
    return pos > lastTask_ ? "optimizer" : "backward";
  }
  if (pos >= optimizerPosition_)
    return "optimizer";
  return pos <= lossPosition_ ? "forward" : "backward";
}

FailureOr<RankedTensorType>
FunctionPartitioner::localType(RankedTensorType global, ShardingAttr s,
                               Operation *at) {
  std::string why;
  auto shape = s.localShape(global.getShape(), mesh_, &why);
  if (failed(shape))
    return at->emitOpError("cannot split ")
           << global << " as " << s << " on " << mesh_ << ": " << why
           << " (uneven shards are not supported)";
  return RankedTensorType::get(*shape, global.getElementType());
}

Value FunctionPartitioner::onGroups(
    OpBuilder &b, Location loc, Value v, int64_t dim, int64_t groups,
    int64_t newBlock,
    llvm::function_ref<Value(Value, int64_t, RankedTensorType)> step) {
  auto type = cast<RankedTensorType>(v.getType());
  SmallVector<int64_t> out(type.getShape());
  out[dim] = groups * newBlock;
  auto outType = RankedTensorType::get(out, type.getElementType());
  if (groups == 1)
    return step(v, dim, outType);
  SmallVector<int64_t> split(type.getShape());
  split[dim] = type.getDimSize(dim) / groups;
  split.insert(split.begin() + dim, groups);
  Value grouped = graph::ReshapeOp::create(
      b, loc, RankedTensorType::get(split, type.getElementType()), v);
  SmallVector<int64_t> splitOut(split);
  splitOut[dim + 1] = newBlock;
  Value r = step(grouped, dim + 1,
                 RankedTensorType::get(splitOut, type.getElementType()));
  return graph::ReshapeOp::create(b, loc, outType, r);
}

FailureOr<Value> FunctionPartitioner::reshard(Value v, ShardingAttr from,
                                              ShardingAttr to, Operation *user) {
  if (from == to)
    return v;
  auto &known = versions_[v];
  bool backward = regather_ && passOf(user) == "backward";
  for (auto &[s, version] : known)
    if (s == to && !(backward && forwardGathers_.contains(version)))
      return version;
  RankedTensorType global = global_.lookup(v);
  // A partial sum is resolved where it is made: it is that op's collective.
  Location loc = user->getLoc();
  if (Operation *maker = v.getDefiningOp();
      maker && from.isPartial() && !isa<UnknownLoc>(maker->getLoc()))
    loc = maker->getLoc();
  Value original = v;

  // A replicated version of a partial sum already made serves sharded users
  // by slicing: no second collective.
  // (A reduce-scattered one is gathered: cheaper than a second all-reduce.)
  if (from.isPartial() && !to.isPartial())
    for (auto &[s, version] : known)
      if (!s.isPartial() && !(backward && forwardGathers_.contains(version))) {
        from = s;
        v = version;
        if (s.isReplicated())
          break;
      }

  // A splat constant is rebuilt at the local shape; a splat of zero is
  // also a partial sum over any axes (every rank's part is zero), which is
  // how @apply_step clears accumulators of partial sums.
  if (auto c = v.getDefiningOp<graph::ConstantOp>())
    if (auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
        dense && dense.isSplat() && from.isReplicated() &&
        (!to.isPartial() || isSplatZero(dense))) {
      auto type = localType(global, to.withoutPartial(), user);
      if (failed(type))
        return failure();
      OpBuilder b(c);
      b.setListener(&recorder_);
      b.setInsertionPointAfter(c);
      Value local = graph::ConstantOp::create(
          b, c.getLoc(), DenseElementsAttr::get(*type, dense.getSplatValue<Attribute>()));
      known.push_back({to, local});
      return local;
    }

  // Partial sums are resolved where they are made; gathers and slices
  // happen just before their user (a ZeRO-3 parameter is gathered for each
  // use and freed after it, not kept whole for the step).
  OpBuilder b(user);
  b.setListener(&recorder_);
  bool resolvesPartial = from.isPartial();
  if (resolvesPartial)
    b.setInsertionPointAfterValue(v);

  auto localDim = [&](int64_t d, ArrayRef<StringAttr> axes) {
    return global.getDimSize(d) / axesSize(mesh_, axes);
  };
  auto plan = planReshard(from, to);
  if (failed(plan))
    return user->emitOpError("cannot make a value partial over an axis it "
                             "is not partial over (internal error)");
  for (const ReshardStep &step : *plan) {
    bool resolving = step.kind == ReshardStep::Kind::kReduceScatter ||
                     step.kind == ReshardStep::Kind::kAllReduce;
    // 2. and 3. happen just before the user.
    if (!resolving && resolvesPartial) {
      b.setInsertionPoint(user);
      resolvesPartial = false;
    }
    int64_t d = step.dim, g = step.groups;
    StringRef axis = step.axis.getValue();
    switch (step.kind) {
    case ReshardStep::Kind::kReduceScatter:
      v = onGroups(b, loc, v, d, g, localDim(d, step.after.axesOf(d)) / g,
                   [&](Value x, int64_t dim, RankedTensorType t) -> Value {
                     return ReduceScatterOp::create(b, loc, t, x, axis, dim,
                                                    "sum");
                   });
      break;
    case ReshardStep::Kind::kAllReduce:
      v = AllReduceOp::create(b, loc, v.getType(), v, axis, "sum");
      break;
    case ReshardStep::Kind::kAllGather:
      v = onGroups(b, loc, v, d, g, localDim(d, step.after.axesOf(d)) / g,
                   [&](Value x, int64_t dim, RankedTensorType t) -> Value {
                     return AllGatherOp::create(b, loc, t, x, axis, dim);
                   });
      break;
    case ReshardStep::Kind::kSlice: {
      auto type = cast<RankedTensorType>(v.getType());
      SmallVector<int64_t> shape(type.getShape());
      shape[d] = localDim(d, step.after.axesOf(d));
      v = ShardSliceOp::create(
          b, loc, RankedTensorType::get(shape, type.getElementType()), v,
          axis, d, g);
      break;
    }
    }
    if (resolving && !step.after.isPartial())
      known.push_back({step.after, v});
  }
  // ZeRO-3 parameters are gathered anew for each use; ZeRO-1/2's once.
  bool once = loadsGatherOnceVariable(original, &symbols_);
  if (!loadsZeroVariable(original, &symbols_) || once || from.isPartial())
    known.push_back({to, v});
  if (regather_ && !once && passOf(user) == "forward" &&
      llvm::any_of(*plan, [](const ReshardStep &s) {
        return s.kind == ReshardStep::Kind::kAllGather;
      }))
    forwardGathers_.insert(v);
  return v;
}

void FunctionPartitioner::tagPhase(Operation *at) {
  StringAttr phase = StringAttr::get(fn_.getContext(), phaseOf(at));
  for (Operation *o : created_)
    if (isa<ShardDialect>(o->getDialect()))
      o->setAttr("phase", phase);
}

namespace {

/// Builds the index arithmetic of a vocabulary split over one mesh axis.
struct VocabBuilder {
  OpBuilder &b;
  Location loc;

  RankedTensorType like(Value v, Type element) {
    return RankedTensorType::get(cast<RankedTensorType>(v.getType()).getShape(),
                                 element);
  }
  Value splat(RankedTensorType t, double value) {
    return graph::ConstantOp::create(b, loc, graph::splatOf(t, value));
  }

  /// `scalar` (rank 0) broadcast to `t`.
  Value broadcast(Value scalar, RankedTensorType t) {
    return graph::BroadcastInDimOp::create(b, loc, t, scalar,
                                           b.getDenseI64ArrayAttr({}));
  }
  /// `v` broadcast to `t`, its dimensions at `dims`.
  Value broadcast(Value v, RankedTensorType t, ArrayRef<int64_t> dims) {
    return graph::BroadcastInDimOp::create(b, loc, t, v,
                                           b.getDenseI64ArrayAttr(dims));
  }
  template <typename OpTy> Value binary(Value x, Value y, Type result = {}) {
    return OpTy::create(b, loc, result ? result : x.getType(), x, y);
  }
  Value convert(Value v, Type element) {
    return graph::CastOp::create(b, loc, like(v, element), v);
  }
  Value allReduce(Value v, StringRef axis, StringRef kind) {
    return AllReduceOp::create(b, loc, v.getType(), v, axis, kind);
  }
  /// Indices relative to this rank's block of `block` rows, whether each is
  /// in it, and a safe index (0 where it is not). With `whole` (the
  /// dimension's global size), negative indices count from its end first,
  /// as gather's and scatter_add's do (Falcon's `fused_qkv[..., [-2], :]`
  /// picks its key head so); labels (whole 0) are taken as they are.
  std::tuple<Value, Value, Value>
  localIndices(Value ids, StringRef axis, int64_t block, int64_t whole = 0) {
    auto t = cast<RankedTensorType>(ids.getType());
    auto scalar = RankedTensorType::get({}, t.getElementType());
    if (whole > 0) {
      Value negative =
          binary<graph::LtOp>(ids, splat(t, 0), like(ids, b.getI1Type()));
      ids = graph::SelectOp::create(
          b, loc, t, negative,
          binary<graph::AddOp>(ids, splat(t, (double)whole)), ids);
    }
    Value rank = AxisIndexOp::create(b, loc, RankedTensorType::get({}, b.getI64Type()),
                                     axis);
    if (!t.getElementType().isInteger(64))
      rank = graph::CastOp::create(b, loc, scalar, rank);
    Value offset = binary<graph::MulOp>(rank, splat(scalar, (double)block));
    Value rel = binary<graph::SubOp>(ids, broadcast(offset, t));
    Type i1 = b.getI1Type();
    Value lo = binary<graph::GeOp>(rel, splat(t, 0), like(ids, i1));
    Value hi = binary<graph::LtOp>(rel, splat(t, (double)block), like(ids, i1));
    Value in = binary<graph::AndOp>(lo, hi);
    Value safe = graph::SelectOp::create(b, loc, t, in, rel, splat(t, 0));
    return {rel, in, safe};
  }
};

/// The single mesh axis splitting dimension `d` of `s`, or empty.
StringRef splitAxis(ShardingAttr s, int64_t d) {
  ArrayRef<StringAttr> axes = s.axesOf(d);
  return axes.size() == 1 ? axes[0].getValue() : StringRef();
}

} // namespace

FailureOr<SmallVector<Value>>
FunctionPartitioner::lowerVocabParallel(Operation *op, ArrayRef<ShardingAttr> ins) {
  OpBuilder b(op);
  b.setListener(&recorder_);
  VocabBuilder vb{b, op->getLoc()};
  auto typeOf = [](Value v) { return cast<RankedTensorType>(v.getType()); };
  if (auto gather = dyn_cast<graph::GatherOp>(op)) {
    int64_t axis = gather.getAxis();
    StringRef mesh = splitAxis(ins[0], axis);
    if (mesh.empty())
      return SmallVector<Value>{};
    int64_t block = typeOf(gather.getOperand()).getDimSize(axis);
    auto [rel, in, safe] = vb.localIndices(gather.getIndices(), mesh, block,
                                           block * mesh_.getSize(mesh));
    (void)rel;
    auto outType = RankedTensorType::get(
        global_.lookup(gather.getResult()).getShape(),
        typeOf(gather.getOperand()).getElementType());
    auto local = localType(outType, sharding_.lookup(gather.getResult()).withoutPartial(), op);
    if (failed(local))
      return failure();
    Value rows = graph::GatherOp::create(b, op->getLoc(), *local,
                                         gather.getOperand(), safe, axis);
    SmallVector<int64_t> dims;
    for (int64_t i = 0; i < typeOf(safe).getRank(); ++i)
      dims.push_back(axis + i);
    Value mask = vb.broadcast(vb.convert(in, local->getElementType()), *local, dims);
    return SmallVector<Value>{vb.binary<graph::MulOp>(rows, mask)};
  }
  if (auto scatter = dyn_cast<graph::ScatterAddOp>(op)) {
    int64_t axis = scatter.getAxis();
    ShardingAttr out = sharding_.lookup(scatter.getResult());
    StringRef mesh = splitAxis(out, axis);
    if (mesh.empty())
      return SmallVector<Value>{};
    auto local = localType(global_.lookup(scatter.getResult()), out.withoutPartial(), op);
    if (failed(local))
      return failure();
    int64_t block = local->getDimSize(axis);
    auto [rel, in, safe] = vb.localIndices(scatter.getIndices(), mesh, block,
                                           block * mesh_.getSize(mesh));
    (void)rel;
    auto updType = typeOf(scatter.getUpdates());
    SmallVector<int64_t> dims;
    for (int64_t i = 0; i < typeOf(safe).getRank(); ++i)
      dims.push_back(axis + i);
    Value mask = vb.broadcast(vb.convert(in, updType.getElementType()), updType, dims);
    Value upd = vb.binary<graph::MulOp>(scatter.getUpdates(), mask);
    return SmallVector<Value>{graph::ScatterAddOp::create(
        b, op->getLoc(), *local, upd, safe, axis, block)};
  }
  auto ce = dyn_cast<graph::CrossEntropyOp>(op);
  auto ceGrad = dyn_cast<graph::CrossEntropyGradOp>(op);
  if (!ce && !ceGrad)
    return SmallVector<Value>{};
  StringRef mesh = splitAxis(ins[0], 1);
  if (mesh.empty())
    return SmallVector<Value>{};
  Value logits = op->getOperand(0), labels = op->getOperand(1);
  int64_t ignore = ce ? ce.getIgnoreIndex() : ceGrad.getIgnoreIndex();
  auto lt = typeOf(logits);
  int64_t n = lt.getDimSize(0), block = lt.getDimSize(1);
  Type f = lt.getElementType();
  auto rowType = RankedTensorType::get({n}, f);
  // The global row max and sum of exponentials.
  Value maxLocal = graph::ReduceMaxOp::create(b, op->getLoc(), rowType, logits,
                                              b.getDenseI64ArrayAttr({1}));
  Value gmax = vb.allReduce(maxLocal, mesh, "max");
  Value shifted = vb.binary<graph::SubOp>(logits, vb.broadcast(gmax, lt, {0}));
  Value e = graph::ExpOp::create(b, op->getLoc(), lt, shifted);
  Value sum = vb.allReduce(graph::ReduceSumOp::create(b, op->getLoc(), rowType, e,
                                                      b.getDenseI64ArrayAttr({1})),
                           mesh, "sum");
  auto [rel, in, safe] = vb.localIndices(labels, mesh, block);
  auto labelType = typeOf(labels);
  Value valid = graph::NotOp::create(
      b, op->getLoc(), vb.like(labels, b.getI1Type()),
      vb.binary<graph::EqOp>(labels, vb.splat(labelType, (double)ignore),
                             vb.like(labels, b.getI1Type())));
  Value validF = vb.convert(valid, f);
  if (ce) {
    Value lse = vb.binary<graph::AddOp>(graph::LogOp::create(b, op->getLoc(), rowType, sum),
                                        gmax);
    auto colType = RankedTensorType::get({n, 1}, labelType.getElementType());
    Value col = graph::ReshapeOp::create(b, op->getLoc(), colType, safe);
    Value picked = graph::GatherElementsOp::create(
        b, op->getLoc(), RankedTensorType::get({n, 1}, f), logits, col, 1);
    picked = graph::ReshapeOp::create(b, op->getLoc(), rowType, picked);
    picked = vb.allReduce(vb.binary<graph::MulOp>(picked, vb.convert(in, f)), mesh, "sum");
    Value loss = vb.binary<graph::SubOp>(lse, picked);
    return SmallVector<Value>{vb.binary<graph::MulOp>(loss, validF)};
  }
  // (softmax - onehot(label)) * dloss, zero rows for ignored labels: the
  // exponentials times dloss / sum, less dloss at the label's column on the
  // rank whose block holds it. A scatter of one element per row, not a
  // one-hot of [n, block] indices.
  Value scale = vb.binary<graph::MulOp>(ceGrad.getDloss(), validF);
  Value g = vb.binary<graph::MulOp>(
      e, vb.broadcast(vb.binary<graph::DivOp>(scale, sum), lt, {0}));
  auto colType = RankedTensorType::get({n, 1}, labelType.getElementType());
  Value col = graph::ReshapeOp::create(b, op->getLoc(), colType, safe);
  Value hit = graph::NegOp::create(
      b, op->getLoc(), rowType, vb.binary<graph::MulOp>(scale, vb.convert(in, f)));
  hit = graph::ReshapeOp::create(b, op->getLoc(), RankedTensorType::get({n, 1}, f), hit);
  return SmallVector<Value>{graph::ScatterElementsOp::create(
      b, op->getLoc(), lt, g, col, hit, /*axis=*/1, /*reduction=*/"add")};
}

LogicalResult FunctionPartitioner::fixAttributes(Operation *op,
                                                 ArrayRef<ShardingAttr> ins) {
  auto splitOf = [&](int64_t d) {
    return ins.empty() ? 1 : axesSize(mesh_, ins[0].axesOf(d));
  };
  auto divide = [&](ArrayRef<int64_t> values, StringRef what)
      -> FailureOr<SmallVector<int64_t>> {
    SmallVector<int64_t> out(values);
    for (auto [d, x] : llvm::enumerate(out)) {
      int64_t k = splitOf(d);
      if (x % k != 0)
        return op->emitOpError(what)
               << " " << x << " of dimension " << d
               << " does not fall on a shard boundary of the split by " << k;
      x /= k;
    }
    return out;
  };
  // A splat constant split like a parameter (dtcc-shard-propagate) is the
  // same splat at its local type.
  if (auto c = dyn_cast<graph::ConstantOp>(op)) {
    auto type = cast<RankedTensorType>(c.getResult().getType());
    if (auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
        dense && dense.isSplat() && dense.getType() != type)
      c.setValueAttr(dense.resizeSplat(type));
    return success();
  }
  if (auto slice = dyn_cast<graph::SliceOp>(op)) {
    auto start = divide(slice.getStart(), "slice start");
    auto limit = divide(slice.getLimit(), "slice limit");
    if (failed(start) || failed(limit))
      return failure();
    slice.setStart(*start);
    slice.setLimit(*limit);
  } else if (auto pad = dyn_cast<graph::PadOp>(op)) {
    auto low = divide(pad.getLow(), "padding");
    auto high = divide(pad.getHigh(), "padding");
    if (failed(low) || failed(high))
      return failure();
    pad.setLow(*low);
    pad.setHigh(*high);
  } else if (isa<graph::ConvOp, graph::ConvInputGradOp,
                 graph::ConvFilterGradOp>(op)) {
    // A split of the groups (the major factor of the channels) leaves each
    // rank its own groups: its input channels over the channels per group.
    auto shape = [](Value v) {
      return cast<RankedTensorType>(v.getType()).getShape();
    };
    Value input = isa<graph::ConvInputGradOp>(op) ? op->getResult(0)
                                                  : op->getOperand(0);
    Value filter = isa<graph::ConvFilterGradOp>(op) ? op->getResult(0)
                                                    : op->getOperand(1);
    int64_t channels = shape(input)[1], perGroup = shape(filter)[1];
    if (perGroup > 0 && channels % perGroup == 0)
      op->setAttr("groups", IntegerAttr::get(IntegerType::get(op->getContext(), 64),
                                             channels / perGroup));
  } else if (auto dropout = dyn_cast<graph::DropoutOp>(op)) {
    if (!ins.empty() && !ins[0].isReplicated())
      return drawAsWhole(dropout, ins[0]);
  } else if (auto random = dyn_cast<graph::RandomOp>(op)) {
    // A generator: its result's layout is the one it draws in.
    ShardingAttr s = sharding_.lookup(random.getResult());
    if (s && !s.isReplicated())
      return drawAsWhole(random, s);
  }
  return success();
}

template <typename DrawOp>
LogicalResult FunctionPartitioner::drawAsWhole(DrawOp op, ShardingAttr s) {
  if (op.getOffsets())
    return success();
  RankedTensorType global = global_.lookup(op.getResult());
  created_.clear();
  OpBuilder b(op);
  b.setListener(&recorder_);
  Location loc = op.getLoc();
  auto scalar = RankedTensorType::get({}, b.getI64Type());
  auto one = RankedTensorType::get({1}, b.getI64Type());
  auto constant = [&](int64_t v) {
    return graph::ConstantOp::create(b, loc, graph::splatOf(scalar, double(v)))
        .getResult();
  };
  // Each dimension's offset: the block's coordinate (its axes' indices,
  // row-major) times the block's size.
  SmallVector<Value> parts;
  for (auto [d, dim] : llvm::enumerate(s.getDims())) {
    if (dim.getGroups() != 1)
      return op.emitOpError("on a tensor whose dimension ")
             << d << " is split in " << dim.getGroups()
             << " groups is not supported: its blocks are not contiguous";
    Value offset;
    if (dim.getAxes().empty()) {
      offset = constant(0);
    } else {
      Value coord;
      for (StringAttr axis : dim.getAxes()) {
        Value index = AxisIndexOp::create(b, loc, scalar, axis.getValue());
        coord = coord ? graph::AddOp::create(
                            b, loc, scalar,
                            graph::MulOp::create(
                                b, loc, scalar, coord,
                                constant(mesh_.getSize(axis.getValue()))),
                            index)
                            .getResult()
                      : index;
      }
      int64_t block = global.getDimSize(d) / axesSize(mesh_, dim.getAxes());
      offset = graph::MulOp::create(b, loc, scalar, coord, constant(block));
    }
    parts.push_back(graph::ReshapeOp::create(b, loc, one, offset));
  }
  Value offsets =
      parts.size() == 1
          ? parts[0]
          : graph::ConcatOp::create(
                b, loc,
                RankedTensorType::get({int64_t(parts.size())}, b.getI64Type()),
                parts, 0)
                .getResult();
  op->insertOperands(op->getNumOperands(), offsets);
  op.setGlobalShapeAttr(b.getDenseI64ArrayAttr(global.getShape()));
  tagPhase(op);
  return success();
}

LogicalResult FunctionPartitioner::run() {
  Block &body = fn_.getBody().front();
  {
    int64_t i = 0;
    for (Operation &op : body) {
      position_[&op] = i;
      // The update reads the step counter first (its learning-rate
      // schedule). A dropout or a random draw reads it too, to draw each
      // step's values, and then the one load of it may sit at the top of
      // the forward pass: the update starts at the schedule.
      auto load = dyn_cast<graph::LoadOp>(op);
      bool optimizer =
          isa<graph::LrScheduleOp, graph::AdamwOp, graph::SgdOp>(op) ||
          (load && load.getVariable() == "__step" &&
           llvm::none_of(load->getUsers(), [](Operation *user) {
             return isa<graph::DropoutOp, graph::RandomOp>(user);
           }));
      if (optimizer && optimizerPosition_ == INT64_MAX)
        optimizerPosition_ = i;
      if (op.hasAttr(kTaskAttr)) {
        if (firstTask_ < 0)
          firstTask_ = i;
        lastTask_ = i;
      }
      ++i;
    }
    // The loss is the returned value named "loss"; a function without one
    // (the update of accumulated micro-batches) is all optimizer.
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    for (auto [r, v] : llvm::enumerate(ret.getOperands()))
      if (auto name = fn_.getResultAttrOfType<StringAttr>(r, dtcc::graph::kNameAttr);
          name && name.getValue() == "loss" && v.getDefiningOp())
        lossPosition_ = position_.lookup(v.getDefiningOp());
    if (lossPosition_ < 0)
      optimizerPosition_ = std::min<int64_t>(optimizerPosition_, 0);
  }
  for (BlockArgument arg : body.getArguments()) {
    global_[arg] = cast<RankedTensorType>(arg.getType());
    sharding_[arg] = getSharding(arg);
  }
  for (Operation &op : body)
    for (Value r : op.getResults()) {
      global_[r] = cast<RankedTensorType>(r.getType());
      sharding_[r] = getSharding(r);
    }

  for (BlockArgument arg : body.getArguments()) {
    auto type = localType(global_[arg], sharding_[arg], fn_);
    if (failed(type))
      return failure();
    fn_.setArgAttr(arg.getArgNumber(), kGlobalTypeAttr, TypeAttr::get(global_[arg]));
    arg.setType(*type);
  }
  for (Operation &op : llvm::make_early_inc_range(body)) {
    auto ins = op.getAttrOfType<ArrayAttr>(kInShardingsAttr);
    if (!ins || ins.size() != op.getNumOperands())
      return op.emitOpError("has no propagated shardings "
                            "(run dtcc-shard-propagate first)");
    SmallVector<ShardingAttr> required;
    for (auto [i, attr] : llvm::enumerate(ins)) {
      auto to = cast<ShardingAttr>(attr);
      required.push_back(to);
      Value operand = op.getOperand(i);
      // Operands are the original values (already local) or reshards.
      Value source = operand;
      auto from = sharding_.lookup(source);
      if (!from)
        return op.emitOpError("operand without a sharding (internal error)");
      created_.clear();
      auto local = reshard(source, from, to, &op);
      if (failed(local))
        return failure();
      // A partial sum resolved where it is made belongs to its maker's
      // phase; the rest to the user's.
      Operation *maker = source.getDefiningOp();
      tagPhase(from.isPartial() && maker ? maker : &op);
      op.setOperand(i, *local);
    }
    created_.clear();
    auto vocab = lowerVocabParallel(&op, required);
    if (failed(vocab))
      return failure();
    if (!vocab->empty()) {
      tagPhase(&op);
      for (auto [r, v] : llvm::zip(op.getResults(), *vocab)) {
        // Copies first: inserting v may grow the maps and move r's entry
        // (`global_[v] = global_[r]` read it from freed memory).
        RankedTensorType type = global_.lookup(r);
        ShardingAttr sharding = sharding_.lookup(r);
        global_[v] = type;
        sharding_[v] = sharding;
        r.replaceAllUsesWith(v);
      }
      op.erase();
      continue;
    }
    for (Value r : op.getResults()) {
      auto type = localType(global_[r], sharding_[r].withoutPartial(), &op);
      if (failed(type))
        return failure();
      r.setType(*type);
    }
    if (failed(fixAttributes(&op, required)))
      return failure();
    if (isa<SendOp, RecvOp>(op))
      splitTransfer(&op);
  }
  // A split send's wait keeps its slice alive, not the whole value.
  for (auto wait : body.getOps<WaitOp>()) {
    auto it = transferSlices_.find(wait.getHandle());
    if (it == transferSlices_.end())
      continue;
    for (OpOperand &buffer : wait->getOpOperands())
      if (buffer.get() == it->second.first)
        buffer.set(it->second.second);
  }
  gatherCastParametersPerUse();
  for (Operation &op : body) {
    op.removeAttr(kInShardingsAttr);
    op.removeAttr(kResultShardingsAttr);
  }
  // A ZeRO constraint has done its work once its operand is resharded.
  for (Operation &op : llvm::make_early_inc_range(body))
    if (auto c = dyn_cast<ConstraintOp>(op)) {
      c.getResult().replaceAllUsesWith(c.getOperand());
      c.erase();
    }
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  fn_.setType(FunctionType::get(fn_.getContext(), body.getArgumentTypes(),
                                ret.getOperandTypes()));
  return success();
}

int64_t FunctionPartitioner::transportDim(RankedTensorType t,
                                          ShardingAttr s) const {
  const int64_t tp = mesh_.getSize("tp");
  if (tp <= 1 || regather_ || t.getRank() < 2 || !s)
    return -1;
  for (int64_t d = 0; d < t.getRank(); ++d)
    for (StringAttr axis : s.getDims()[d].getAxes())
      if (axis.getValue() == "tp")
        return -1; // already split over tp (sequence parallelism)
  for (int64_t d = t.getRank() - 1; d >= 0; --d)
    if (!t.isDynamicDim(d) && t.getDimSize(d) % tp == 0)
      return d;
  return -1;
}

void FunctionPartitioner::splitTransfer(Operation *op) {
  auto onPp = [](StringRef axis) { return axis == "pp"; };
  const int64_t tp = mesh_.getSize("tp");
  OpBuilder b(op);
  if (auto send = dyn_cast<SendOp>(op)) {
    Value whole = send.getOperand();
    auto type = cast<RankedTensorType>(whole.getType());
    // Laid out as the transfer requires (its propagated in-sharding).
    auto ins = op->getAttrOfType<ArrayAttr>(kInShardingsAttr);
    int64_t d = ins && ins.size() == 1
                    ? transportDim(type, cast<ShardingAttr>(ins[0]))
                    : -1;
    if (!onPp(send.getAxis()) || d < 0)
      return;
    SmallVector<int64_t> shape(type.getShape());
    shape[d] /= tp;
    auto slice = ShardSliceOp::create(
        b, op->getLoc(), RankedTensorType::get(shape, type.getElementType()),
        whole, "tp", d, 1);
    if (auto phase = op->getAttr("phase"))
      slice->setAttr("phase", phase);
    send->setOperand(0, slice);
    if (auto handle = op->getAttrOfType<IntegerAttr>("handle"))
      transferSlices_[handle.getInt()] = {whole, slice};
    return;
  }
  auto recv = cast<RecvOp>(op);
  auto type = cast<RankedTensorType>(recv.getType());
  int64_t d = transportDim(type, sharding_.lookup(recv.getResult()));
  if (!onPp(recv.getAxis()) || d < 0)
    return;
  SmallVector<int64_t> shape(type.getShape());
  shape[d] /= tp;
  b.setInsertionPointAfter(op);
  auto gather = AllGatherOp::create(b, op->getLoc(), type, recv.getResult(),
                                    "tp", d);
  if (auto phase = op->getAttr("phase"))
    gather->setAttr("phase", phase);
  recv.getResult().replaceAllUsesExcept(gather.getResult(), gather);
  recv.getResult().setType(
      RankedTensorType::get(shape, type.getElementType()));
  global_[gather.getResult()] = global_.lookup(recv.getResult());
  sharding_[gather.getResult()] = sharding_.lookup(recv.getResult());
}

// Mixed precision casts a parameter once, right after its load, and the
// forward and backward pass share the cast. For a ZeRO-3 parameter that one
// cast is the gather's only user: the parameter would be gathered once, in
// fp32, at the top of the step and kept whole until its last use in the
// backward pass, every layer's at once. Instead the shard is cast (a
// conversion commutes with a gather, so the values are the same bits) and
// gathered in the compute type, half the bytes for bf16, once for each
// pass and layer that uses it, just before the first such use; the
// gathered copy dies after the group's last use (dtcc-shard-overlap starts
// each layer's gathers one layer ahead). A ZeRO-1/2 parameter (gathered
// once a step) is one group: its shard is cast and gathered just before
// its first use, and the whole is kept for the others.
void FunctionPartitioner::gatherCastParametersPerUse() {
  Block &body = fn_.getBody().front();
  SmallVector<std::pair<AllGatherOp, graph::CastOp>> found;
  for (auto g : body.getOps<AllGatherOp>()) {
    if (!loadsZeroVariable(g.getOperand(), &symbols_) || !g->hasOneUse())
      continue;
    auto c = dyn_cast<graph::CastOp>(*g->user_begin());
    if (!c)
      continue;
    // Only users the partitioner placed (original ops) have a pass.
    if (llvm::all_of(c->getUsers(), [&](Operation *u) {
          return position_.count(u) && !isa<func::ReturnOp>(u);
        }))
      found.push_back({g, c});
  }
  for (auto [g, c] : found) {
    using Key = std::pair<StringRef, int64_t>;
    llvm::MapVector<Key, SmallVector<OpOperand *>> groups;
    const bool once = loadsGatherOnceVariable(g.getOperand(), &symbols_);
    for (OpOperand &use : c.getResult().getUses()) {
      Operation *u = use.getOwner();
      groups[once ? Key{"", -1}
                  : Key{passOf(u), graph::layerIndexOf(u).value_or(-1)}]
          .push_back(&use);
    }
    auto shardType = cast<RankedTensorType>(g.getOperand().getType())
                         .clone(getElementTypeOrSelf(c.getType()));
    for (auto &[key, uses] : groups) {
      Operation *first = uses.front()->getOwner();
      for (OpOperand *use : uses)
        if (use->getOwner()->isBeforeInBlock(first))
          first = use->getOwner();
      OpBuilder b(first);
      auto shard = graph::CastOp::create(b, c.getLoc(), shardType, g.getOperand());
      shard->setDiscardableAttrs(c->getDiscardableAttrDictionary());
      auto gathered = AllGatherOp::create(b, g.getLoc(), c.getType(), shard,
                                          g.getAxis(), g.getDim());
      gathered->setDiscardableAttrs(g->getDiscardableAttrDictionary());
      gathered->setAttr("phase",
                        StringAttr::get(fn_.getContext(), phaseOf(first)));
      for (OpOperand *use : uses)
        use->set(gathered);
    }
    c.erase();
    g.erase();
  }
}

struct ShardPartitionPass
    : public dtcc::shard::impl::ShardPartitionBase<ShardPartitionPass> {
  void runOnOperation() final {
    ModuleOp module = getOperation();
    auto mesh = module->getAttrOfType<MeshAttr>(kMeshAttr);
    if (!mesh) {
      module.emitError("expected a module with a dshard.mesh "
                       "(run dtcc-shard-annotate first)");
      return signalPassFailure();
    }
    for (auto var : module.getOps<graph::VariableOp>()) {
      auto s = var->getAttrOfType<ShardingAttr>(kShardingAttr);
      if (!s)
        continue;
      std::string why;
      auto shape = s.localShape(var.getTensorType().getShape(), mesh, &why);
      if (failed(shape)) {
        var.emitOpError("cannot be split as ") << s << ": " << why;
        return signalPassFailure();
      }
      var->setAttr(kGlobalTypeAttr, TypeAttr::get(var.getTensorType()));
      var.setType(RankedTensorType::get(*shape, var.getTensorType().getElementType()));
    }
    for (auto fn : module.getOps<func::FuncOp>())
      if (failed(FunctionPartitioner(fn, mesh).run()))
        return signalPassFailure();
  }
};

} // namespace
