//===- Autodiff.cpp - reverse-mode autodiff over dgraph -------------------===//
//
// Clones @main into @train_step and appends the backward pass built from
// each op's VJP rule, optionally recomputing activations segment by segment.
//
//===----------------------------------------------------------------------===//

#include "passes/Graph/Passes.h"
#include "passes/Graph/Recompute.h"
#include "dialects/Shard/IR/ShardOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringSet.h"

#include <cmath>

namespace dtcc::graph {
#define GEN_PASS_DEF_AUTODIFF
#include "passes/Graph/Passes.h.inc"
} // namespace dtcc::graph

using namespace mlir;
using namespace dtcc::graph;

namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

bool isFloatTensor(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && isa<FloatType>(t.getElementType());
}

/// Groups ops into recomputation segments: runs of ops of one layer
/// (#dgraph.layer; an op outside layers joins the run before it), or, when
/// the model has fewer than two layers, about sqrt(n) ops each.
SmallVector<SmallVector<Operation *>> segmentOps(ArrayRef<Operation *> ops) {
  SmallVector<SmallVector<Operation *>> segments;
  llvm::SmallDenseSet<int64_t> layers;
  for (Operation *op : ops)
    if (std::optional<int64_t> layer = layerIndexOf(op))
      layers.insert(*layer);
  if (layers.size() >= 2) {
    std::optional<int64_t> current;
    for (Operation *op : ops) {
      std::optional<int64_t> layer = layerIndexOf(op);
      if (segments.empty() || (layer && layer != current)) {
        segments.emplace_back();
        if (layer)
          current = layer;
      }
      segments.back().push_back(op);
    }
    return segments;
  }
  size_t size = std::max<size_t>(1, std::lround(std::sqrt(double(ops.size()))));
  for (size_t i = 0; i < ops.size(); i += size)
    segments.emplace_back(ops.begin() + i,
                          ops.begin() + std::min(ops.size(), i + size));
  return segments;
}

struct AutodiffPass : public dtcc::graph::impl::AutodiffBase<AutodiffPass> {
  using AutodiffBase::AutodiffBase;

  void runOnOperation() final;

private:
  FailureOr<Value> findLoss(func::FuncOp fn, OpBuilder &b);
  void stripDropout(func::FuncOp fn);
  void useRunningStatistics(func::FuncOp fn);
  void recordDataInputs(func::FuncOp fn);
};

/// The result named `name`, or null.
Value resultNamed(func::FuncOp fn, StringRef name) {
  auto ret = cast<func::ReturnOp>(fn.front().getTerminator());
  for (unsigned i = 0; i < fn.getNumResults(); ++i)
    if (auto n = fn.getResultAttrOfType<StringAttr>(i, dtcc::graph::kNameAttr))
      if (n.getValue() == name)
        return ret.getOperand(i);
  return {};
}

FailureOr<Value> AutodiffPass::findLoss(func::FuncOp fn, OpBuilder &b) {
  auto ret = cast<func::ReturnOp>(fn.front().getTerminator());
  std::string spec = loss;
  auto outputNames = [&] {
    std::string names;
    for (unsigned i = 0; i < fn.getNumResults(); ++i) {
      auto n = fn.getResultAttrOfType<StringAttr>(i, dtcc::graph::kNameAttr);
      names += (names.empty() ? "" : ", ") +
               (n ? n.str() : "output" + std::to_string(i)) + " (" +
               [&] {
                 std::string s;
                 llvm::raw_string_ostream os(s);
                 os << fn.getResultTypes()[i];
                 return s;
               }() + ")";
    }
    return names;
  };
  if (StringRef(spec).starts_with("cross_entropy:")) {
    auto [logitsName, labelsName] =
        StringRef(spec).drop_front(strlen("cross_entropy:")).split(',');
    Value logits = resultNamed(fn, logitsName);
    if (!logits || !isFloatTensor(logits))
      return fn.emitError("--loss names logits '")
             << logitsName << "', which is not a float output; outputs: "
             << outputNames();
    Value labels;
    for (BlockArgument arg : fn.getArguments())
      if (auto n = fn.getArgAttrOfType<StringAttr>(arg.getArgNumber(), dtcc::graph::kNameAttr))
        if (n.getValue() == labelsName)
          labels = arg;
    auto lt = typeOf(logits);
    if (!labels || !isa<IntegerType>(typeOf(labels).getElementType()) ||
        typeOf(labels).getShape() != lt.getShape().drop_back())
      return fn.emitError("--loss names labels '")
             << labelsName << "', which must be an integer input of shape "
             << "logits[:-1]";
    Location loc = NameLoc::get(b.getStringAttr("loss"), fn.getLoc());
    b.setInsertionPoint(ret);
    int64_t classes = lt.getShape().back();
    int64_t rows = lt.getNumElements() / std::max<int64_t>(classes, 1);
    Value l2 = ReshapeOp::create(
        b, loc, RankedTensorType::get({rows, classes}, lt.getElementType()), logits);
    auto labelType = typeOf(labels).getElementType();
    if (!labelType.isInteger(32) && !labelType.isInteger(64))
      labels = CastOp::create(
          b, loc, RankedTensorType::get(typeOf(labels).getShape(), b.getI64Type()),
          labels);
    Value t2 = ReshapeOp::create(
        b, loc, RankedTensorType::get({rows}, typeOf(labels).getElementType()),
        labels);
    Value perRow = CrossEntropyOp::create(b, loc, l2, t2, -100);
    auto rowType = typeOf(perRow);
    Value ignored = EqOp::create(
        b, loc, t2,
        ConstantOp::create(b, loc, DenseElementsAttr::get(
                                       typeOf(t2), b.getIntegerAttr(
                                                       typeOf(t2).getElementType(), -100))));
    Value one = ConstantOp::create(
        b, loc, DenseElementsAttr::get(rowType, b.getFloatAttr(rowType.getElementType(), 1.0)));
    Value zero = ConstantOp::create(
        b, loc, DenseElementsAttr::get(rowType, b.getFloatAttr(rowType.getElementType(), 0.0)));
    Value weights = SelectOp::create(b, loc, ignored, zero, one);
    Value total = ReduceSumOp::create(b, loc, perRow, ArrayRef<int64_t>{0});
    Value count = ReduceSumOp::create(b, loc, weights, ArrayRef<int64_t>{0});
    return DivOp::create(b, loc, total, count).getResult();
  }
  if (!spec.empty()) {
    Value v = resultNamed(fn, spec);
    if (!v)
      return fn.emitError("--loss names '")
             << spec << "', which is not an output; outputs: " << outputNames();
    if (!isFloatTensor(v) || typeOf(v).getRank() != 0)
      return fn.emitError("the loss '")
             << spec << "' must be a float scalar, got " << v.getType();
    return v;
  }
  SmallVector<Value> scalars;
  for (Value v : ret.getOperands())
    if (isFloatTensor(v) && typeOf(v).getRank() == 0)
      scalars.push_back(v);
  if (scalars.size() != 1)
    return fn.emitError("cannot tell the loss: expected one scalar float "
                        "output, got ")
           << scalars.size() << "; name it with --loss NAME or "
           << "--loss cross_entropy:<logits>,<labels>; outputs: " << outputNames();
  return scalars[0];
}

void AutodiffPass::stripDropout(func::FuncOp fn) {
  for (auto dropout : llvm::make_early_inc_range(fn.getOps<DropoutOp>())) {
    OpBuilder b(dropout);
    auto maskType = typeOf(dropout.getMask());
    Value keepAll = ConstantOp::create(
        b, dropout.getLoc(), DenseElementsAttr::get(maskType, true));
    dropout.getResult().replaceAllUsesWith(dropout.getOperand());
    dropout.getMask().replaceAllUsesWith(keepAll);
    dropout.erase();
  }
}

/// Inference normalizes with batch normalization's running statistics and
/// leaves them alone: each training-mode batch_norm takes the running
/// statistics its batch_norm_update would fold the batch's into, and
/// nothing is stored. The batch statistics' ops are left dead.
void AutodiffPass::useRunningStatistics(func::FuncOp fn) {
  for (auto update : llvm::make_early_inc_range(fn.getOps<BatchNormUpdateOp>())) {
    Value mean = update.getMean(), var = update.getVar();
    for (Operation *user : llvm::make_early_inc_range(mean.getUsers()))
      if (auto bn = dyn_cast<BatchNormOp>(user);
          bn && bn.getTraining() && bn.getMean() == mean && bn.getVar() == var) {
        bn.getMeanMutable().assign(update.getRunningMean());
        bn.getVarMutable().assign(update.getRunningVar());
        bn.setTraining(false);
      }
    for (Operation *user : llvm::make_early_inc_range(update->getUsers()))
      if (isa<StoreOp>(user))
        user->erase();
    update.getNewMean().replaceAllUsesWith(update.getRunningMean());
    update.getNewVar().replaceAllUsesWith(update.getRunningVar());
    update.erase();
  }
}

void AutodiffPass::recordDataInputs(func::FuncOp fn) {
  // A language model takes two integer [b, s] inputs: token ids and labels.
  SmallVector<BlockArgument> tokens;
  for (BlockArgument arg : fn.getArguments()) {
    auto t = typeOf(arg);
    if (isa<IntegerType>(t.getElementType()) && t.getRank() == 2)
      tokens.push_back(arg);
  }
  if (tokens.size() != 2 || tokens[0].getType() != tokens[1].getType())
    return;
  SmallVector<Attribute> names;
  for (BlockArgument arg : tokens) {
    auto n = fn.getArgAttrOfType<StringAttr>(arg.getArgNumber(), dtcc::graph::kNameAttr);
    if (!n)
      return;
    names.push_back(n);
  }
  getOperation()->setAttr(dtcc::graph::kDataInputsAttr,
                          ArrayAttr::get(&getContext(), names));
}

void AutodiffPass::runOnOperation() {
  ModuleOp module = getOperation();
  MLIRContext *ctx = &getContext();
  auto main = module.lookupSymbol<func::FuncOp>("main");
  if (!main || main.isExternal()) {
    module.emitError("expected a function @main (the forward pass and loss)");
    return signalPassFailure();
  }
  if (module.lookupSymbol("train_step")) {
    module.emitError("the module already has a @train_step");
    return signalPassFailure();
  }
  // The rules below read every input and output as a dgraph tensor.
  auto checkType = [&](Type type, StringRef what, unsigned i) {
    auto t = dyn_cast<RankedTensorType>(type);
    if (t && t.hasStaticShape())
      return true;
    main.emitOpError("expected statically shaped tensors as the inputs and "
                     "outputs of @main, got ")
        << type << " (" << what << " " << i << ")";
    return false;
  };
  for (auto [i, type] : llvm::enumerate(main.getArgumentTypes()))
    if (!checkType(type, "input", i))
      return signalPassFailure();
  for (auto [i, type] : llvm::enumerate(main.getResultTypes()))
    if (!checkType(type, "output", i))
      return signalPassFailure();
  // The plan's recomputation; without one (no sharding), none.
  dtcc::shard::PlanAttr plan = dtcc::shard::getPlan(module);
  const bool recomputeFull =
      plan && plan.getRecompute() == dtcc::shard::Recompute::Full;
  const bool recomputeSelective =
      plan && plan.getRecompute() == dtcc::shard::Recompute::Selective;
  // The first K layers only; with stages, all of them here and the first K
  // of each stage after dtcc-shard-pipeline (dtcc-graph-recompute-layers).
  const int64_t recomputeLayers =
      recomputeFull && plan.getPipelineStages() == 1 ? plan.getRecomputeLayers()
                                                     : 0;
  // Initializers the importer made constants (integer, bool) are not
  // trained anyway: `frozen` may name them, as a model's named_buffers()
  // lists them. A name that is neither is a mistake.
  llvm::StringSet<> constantInitializers;
  if (auto names = module->getAttrOfType<ArrayAttr>(
          dtcc::graph::kConstantInitializersAttr))
    for (auto name : names.getAsValueRange<StringAttr>())
      constantInitializers.insert(name);
  module->removeAttr(dtcc::graph::kConstantInitializersAttr);
  llvm::StringSet<> frozenSet;
  for (const std::string &name : frozen) {
    auto var = module.lookupSymbol<VariableOp>(name);
    if (!var && constantInitializers.contains(name))
      continue;
    if (!var) {
      module.emitError("--frozen names '")
          << name << "', which is not an initializer of the model (no "
          << "variable or constant of that name)";
      return signalPassFailure();
    }
    frozenSet.insert(name);
    var.setTrainable(false); // not a parameter: no gradient, no update
  }

  auto train = cast<func::FuncOp>(main->clone());
  train.setName("train_step");
  module.push_back(train);
  stripDropout(main);
  useRunningStatistics(main);
  recordDataInputs(main);

  Block &body = train.front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  OpBuilder b(ctx);
  auto lossOr = findLoss(train, b);
  if (failed(lossOr))
    return signalPassFailure();
  Value lossValue = *lossOr;
  // A language model's vocabulary: the classes of its only cross-entropy.
  SmallVector<CrossEntropyOp> crossEntropies(train.getOps<CrossEntropyOp>());
  if (crossEntropies.size() == 1 &&
      module->hasAttr(dtcc::graph::kDataInputsAttr))
    module->setAttr(dtcc::graph::kVocabSizeAttr,
                    IntegerAttr::get(IntegerType::get(ctx, 64),
                                     typeOf(crossEntropies[0].getLogits())
                                         .getDimSize(1)));

  // Forward ops and the values a gradient can reach (parameters onward).
  SmallVector<Operation *> forward;
  for (Operation &op : body.without_terminator())
    forward.push_back(&op);
  llvm::DenseSet<Value> active;
  SmallVector<LoadOp> params;
  for (Operation *op : forward) {
    if (auto load = dyn_cast<LoadOp>(op)) {
      auto var = module.lookupSymbol<VariableOp>(load.getVariableAttr());
      if (var && var.getTrainable() && !frozenSet.contains(var.getSymName()) &&
          isFloatTensor(load.getResult())) {
        active.insert(load.getResult());
        params.push_back(load);
      }
      continue;
    }
    // Nothing is differentiated through a stop_gradient (PyTorch's detach).
    if (isa<StopGradientOp>(op))
      continue;
    if (llvm::any_of(op->getOperands(), [&](Value v) { return active.count(v); }))
      for (Value r : op->getResults())
        if (isFloatTensor(r))
          active.insert(r);
  }
  if (!active.count(lossValue)) {
    train.emitError("the loss does not depend on any trainable parameter");
    return signalPassFailure();
  }
  // The values the loss depends on through float values: a parameter with
  // no such path (read only by a comparison, an integer cast, a shape) has
  // no gradient in PyTorch (.grad stays None), and its optimizers skip it:
  // no update, no weight decay, no state. One that reaches the loss through
  // an op whose gradient is zero (floor, sign, a dead ReLU) has a zero
  // gradient there, and is updated.
  llvm::DenseSet<Value> reachesLoss = {lossValue};
  for (Operation *op : llvm::reverse(forward))
    if (llvm::any_of(op->getResults(),
                     [&](Value r) { return reachesLoss.contains(r); }))
      for (Value v : op->getOperands())
        if (active.count(v))
          reachesLoss.insert(v);
  llvm::SetVector<StringRef> withPath, pathless;
  for (LoadOp load : params)
    (reachesLoss.contains(load.getResult()) ? withPath : pathless)
        .insert(load.getVariable());
  // A variable loaded more than once is trained if any load has a path.
  SmallVector<Attribute> untrainedNames;
  for (StringRef name : pathless) {
    if (withPath.contains(name))
      continue;
    emitWarning(train.getLoc(), "parameter '")
        << name << "' has no gradient path to the loss: it is not trained "
        << "(as PyTorch's optimizers skip a parameter whose .grad is None)";
    module.lookupSymbol<VariableOp>(name).setTrainable(false);
    untrainedNames.push_back(b.getStringAttr(name));
  }
  llvm::erase_if(params, [&](LoadOp load) {
    return !withPath.contains(load.getVariable());
  });
  if (!untrainedNames.empty())
    module->setAttr(dtcc::graph::kUntrainedAttr,
                    ArrayAttr::get(ctx, untrainedNames));

  // Backward, segment by segment in reverse.
  b.setInsertionPoint(ret);
  llvm::DenseMap<Value, Value> grads;
  auto accumulate = [&](Value v, Value g, Location loc) {
    auto it = grads.find(v);
    if (it == grads.end())
      grads[v] = g;
    else
      it->second = AddOp::create(b, loc, it->second, g);
  };
  auto seed = ConstantOp::create(
      b, lossValue.getLoc(),
      DenseElementsAttr::get(typeOf(lossValue),
                             b.getFloatAttr(typeOf(lossValue).getElementType(), 1.0)));
  // dtcc-graph-mixed-precision scales the loss by replacing this seed.
  seed->setAttr(dtcc::graph::kGradSeedAttr, b.getUnitAttr());
  grads[lossValue] = seed;

  // What is recomputed: groups of forward ops, each cloned (from the
  // values it reads from outside) just before the backward of its last op.
  SmallVector<SmallVector<Operation *>> groups;
  if (recomputeFull) {
    SmallVector<SmallVector<Operation *>> segments = segmentOps(forward);
    // The last segment's activations are still alive: recompute the others.
    if (!segments.empty())
      segments.pop_back();
    // The layers in the order the forward pass meets them.
    SmallVector<int64_t> order;
    for (Operation *op : forward)
      if (std::optional<int64_t> layer = layerIndexOf(op);
          layer && !llvm::is_contained(order, *layer))
        order.push_back(*layer);
    for (SmallVector<Operation *> &segment : segments) {
      std::optional<int64_t> layer;
      for (Operation *op : segment)
        if ((layer = layerIndexOf(op)))
          break;
      // Only segments of the first K layers (not the embedding's).
      if (recomputeLayers > 0 &&
          (!layer || llvm::find(order, *layer) - order.begin() >= recomputeLayers))
        continue;
      groups.push_back(std::move(segment));
    }
  } else if (recomputeSelective) {
    // Activations: values computed from the step's inputs (not from
    // parameters and constants alone).
    llvm::DenseSet<Value> fromInputs(body.getArguments().begin(),
                                     body.getArguments().end());
    for (Operation *op : forward)
      if (llvm::any_of(op->getOperands(),
                       [&](Value v) { return fromInputs.contains(v); }))
        fromInputs.insert(op->getResults().begin(), op->getResults().end());
    groups = findAttentionCores(forward, fromInputs);
    // Fused cores (dgraph.attention) keep no scores: nothing to recompute.
    bool fused = llvm::any_of(
        forward, [](Operation *op) { return isa<AttentionOp>(op); });
    if (groups.empty() && !fused)
      emitWarning(train.getLoc(),
                  "selective recomputation found no attention core (a softmax "
                  "between a matmul of two activations and a matmul with a "
                  "third); nothing is recomputed");
  }
  llvm::DenseMap<Operation *, SmallVector<size_t>> groupsEndingAt;
  for (auto [i, group] : llvm::enumerate(groups))
    groupsEndingAt[group.back()].push_back(i);

  IRMapping clones;
  for (Operation *op : llvm::reverse(forward)) {
    for (size_t g : groupsEndingAt.lookup(op)) {
      for (Operation *member : groups[g])
        if (!isa<LoadOp, ConstantOp, StoreOp>(member)) {
          Operation *clone = b.clone(*member, clones);
          clone->setAttr(dtcc::graph::kRecomputeAttr, b.getUnitAttr());
        }
    }
    SmallVector<Value> resultGrads;
    bool any = false;
    for (Value r : op->getResults()) {
      Value g = active.count(r) ? grads.lookup(r) : Value();
      resultGrads.push_back(g);
      any |= bool(g);
    }
    if (!any || isa<LoadOp>(op))
      continue;
    Operation *target = op;
    if (op->getNumResults() && clones.contains(op->getResult(0)))
      target = clones.lookup(op->getResult(0)).getDefiningOp();
    auto iface = dyn_cast<DifferentiableOpInterface>(target);
    if (!iface) {
      op->emitOpError("has no VJP rule, but lies between a parameter and "
                      "the loss");
      return signalPassFailure();
    }
    SmallVector<Value> operandGrads;
    Operation *last = ret->getPrevNode();
    if (failed(iface.buildVJP(b, resultGrads, operandGrads)))
      return signalPassFailure();
    for (auto [i, g] : llvm::enumerate(operandGrads))
      if (g && active.count(op->getOperand(i)))
        accumulate(op->getOperand(i), g, op->getLoc());
    // The backward ops of `op` (its VJP and the sums of its operands'
    // gradients) belong to its layer; constants to none.
    for (Operation *made = last ? last->getNextNode() : &body.front();
         made != ret; made = made->getNextNode())
      if (!made->hasTrait<OpTrait::ConstantLike>())
        inheritLayer(op, made);
  }

  // One gradient per parameter variable, summed over its loads.
  llvm::MapVector<StringRef, Value> paramGrads;
  llvm::MapVector<StringRef, RankedTensorType> paramTypes;
  for (LoadOp load : params) {
    StringRef name = load.getVariable();
    paramTypes[name] = typeOf(load.getResult());
    Value g = grads.lookup(load.getResult());
    if (!g)
      continue;
    auto it = paramGrads.find(name);
    if (it == paramGrads.end())
      paramGrads[name] = g;
    else
      it->second = AddOp::create(b, load.getLoc(), it->second, g);
  }
  SmallVector<Value> results = {lossValue};
  SmallVector<DictionaryAttr> resultAttrs = {b.getDictionaryAttr(
      {b.getNamedAttr(dtcc::graph::kNameAttr, b.getStringAttr("loss"))})};
  for (auto &[name, type] : paramTypes) {
    Value g = paramGrads.lookup(name);
    if (!g) {
      // A path through ops without a gradient (floor, sign): zero, as
      // PyTorch's, which still decays the parameter.
      g = ConstantOp::create(
          b, train.getLoc(),
          DenseElementsAttr::get(type, b.getFloatAttr(type.getElementType(), 0.0)));
    }
    results.push_back(g);
    resultAttrs.push_back(b.getDictionaryAttr(
        {b.getNamedAttr(dtcc::graph::kNameAttr, b.getStringAttr("grad/" + name.str())),
         b.getNamedAttr(dtcc::graph::kGradOfAttr, FlatSymbolRefAttr::get(ctx, name))}));
  }
  func::ReturnOp::create(b, ret.getLoc(), results);
  ret.erase();
  train.setFunctionType(FunctionType::get(ctx, train.getArgumentTypes(),
                                          ValueRange(results).getTypes()));
  train.setAllResultAttrs(resultAttrs);
  if (plan && plan.getRecompute() != dtcc::shard::Recompute::None)
    recordRecomputation(module);
  // The backward pass is built: a stop_gradient is its operand again, in
  // the step and in the forward function alike.
  module.walk([](StopGradientOp op) {
    op.getResult().replaceAllUsesWith(op.getOperand());
    op.erase();
  });
}

} // namespace
