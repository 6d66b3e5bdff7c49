//===- MixedPrecision.cpp - bf16/fp16 training with fp32 master weights ---===//
//
// Retypes @train_step (forward + backward, after autodiff) to a half type:
// weights are cast at their loads, sensitive ops run in fp32 between casts,
// the loss stays fp32 and gradients are returned in fp32 for the optimizer.
//
//===----------------------------------------------------------------------===//

#include "passes/Graph/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"

#include <functional>

namespace dtcc::graph {
#define GEN_PASS_DEF_MIXEDPRECISION
#include "passes/Graph/Passes.h.inc"
} // namespace dtcc::graph

using namespace mlir;
using namespace dtcc::graph;

namespace {

/// The element type of a ranked float tensor, or null.
FloatType floatElement(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t ? dyn_cast<FloatType>(t.getElementType()) : FloatType();
}

RankedTensorType withElement(Value v, Type element) {
  return cast<RankedTensorType>(v.getType()).clone(element);
}

/// How an op is typed (see the pass description).
enum class Policy {
  Half,      ///< always in the half type (matmul, convolutions)
  HalfIO,    ///< half operands and results, f32 statistics (norms, softmax)
  Island,    ///< fp32 inside, half results outside (batch/group norms,
             ///< loss gradients; norms and softmax with half-norms=false)
  LossPath,  ///< fp32 inputs, fp32 results (log_softmax, cross_entropy)
  Widest,    ///< the widest of its non-constant float operands
};

Policy policyOf(Operation *op, bool halfNorms) {
  if (isa<MatmulOp, ConvOp, ConvInputGradOp, ConvFilterGradOp>(op))
    return Policy::Half;
  // Both backends' kernels compute these in f32 (or wider) from half
  // operands and round once when they store: the f32 island around them
  // would only add two casts and twice the bytes.
  if (halfNorms && isa<SoftmaxOp, SoftmaxGradOp, LayerNormOp, LayerNormGradOp,
                       RmsNormOp, RmsNormGradOp, AttentionOp,
                       AttentionGradOp>(op))
    return Policy::HalfIO;
  if (isa<SoftmaxOp, LayerNormOp, RmsNormOp, SoftmaxGradOp, LogSoftmaxGradOp,
          LayerNormGradOp, RmsNormGradOp, CrossEntropyGradOp, BatchNormOp,
          BatchNormGradOp, GroupNormOp, GroupNormGradOp, AttentionOp,
          AttentionGradOp>(op))
    return Policy::Island;
  // A half grid (or half regions) would place samples a pixel off in a
  // 256-pixel image (bf16's 8 bits): fp32, as PyTorch autocast runs
  // grid_sampler and torchvision's roi_align.
  if (isa<GridSampleOp, GridSampleGradOp, RoiAlignOp, RoiAlignGradOp>(op))
    return Policy::Island;
  // Batch-norm statistics stay fp32 too: the mean and variance computed
  // from them, the running statistics and the parameter gradients.
  if (isa<LogSoftmaxOp, CrossEntropyOp, BatchNormStatsOp,
          BatchNormGradStatsOp>(op))
    return Policy::LossPath;
  return Policy::Widest;
}

/// Whether `v` (an operand or result of `op`) is one of a norm's per-row
/// statistics (mean, rstd) or attention's log-sum-exp, which a half norm
/// or attention keeps in f32.
bool isNormStatistic(Operation *op, Value v) {
  if (auto a = dyn_cast<AttentionOp>(op))
    return v == a.getLogsumexp();
  if (auto g = dyn_cast<AttentionGradOp>(op))
    return v == g.getLogsumexp();
  if (auto n = dyn_cast<LayerNormOp>(op))
    return v == n.getMean() || v == n.getRstd();
  if (auto n = dyn_cast<RmsNormOp>(op))
    return v == n.getRstd();
  if (auto g = dyn_cast<LayerNormGradOp>(op))
    return v == g.getMean() || v == g.getRstd();
  if (auto g = dyn_cast<RmsNormGradOp>(op))
    return v == g.getRstd();
  return false;
}

struct MixedPrecisionPass
    : public dtcc::graph::impl::MixedPrecisionBase<MixedPrecisionPass> {
  using MixedPrecisionBase::MixedPrecisionBase;

  void runOnOperation() final;

private:
  /// `v` as a tensor of element type `element`: `v` itself, the value it was
  /// cast from (no double rounding), a converted constant, or a new cast
  /// right after `v`'s definition (shared by all users).
  Value as(Value v, Type element);
  /// Records that `to` is `from` converted, so that asking `to` back in
  /// `from`'s type returns `from`.
  void link(Value from, Value to) {
    versions[{to, getElementTypeOrSelf(from.getType())}] = from;
    versions[{from, getElementTypeOrSelf(to.getType())}] = to;
  }

  /// `op`'s operand `i` as `element`: as(), except that a backward op
  /// reading a forward value widened (a recomputed norm's input, a norm
  /// gradient's) gets a cast of its own, made before the first backward op
  /// that asks. The forward value then stays saved in its own, narrower type
  /// and not also as its fp32 copy, which its forward users let die; the
  /// conversion is exact, so the copy made again is the same.
  Value operandAs(Operation *op, unsigned i, Type element);

  llvm::DenseMap<std::pair<Value, Type>, Value> versions;
  llvm::DenseMap<std::pair<Value, Type>, Value> backwardVersions;
  /// The ops before the loss gradient's seed (the forward pass).
  llvm::DenseSet<Operation *> forwardOps;
  SmallVector<CastOp> created;
};

Value MixedPrecisionPass::operandAs(Operation *op, unsigned i, Type element) {
  Value v = op->getOperand(i);
  FloatType from = floatElement(v);
  auto to = dyn_cast<FloatType>(element);
  Operation *def = v.getDefiningOp();
  // Not the loss's gradient: it runs at the turn from the forward pass to
  // the backward, where the forward copy is still alive.
  bool widenedForBackward =
      !forwardOps.empty() && !forwardOps.count(op) && def &&
      forwardOps.count(def) && from && to && to.getWidth() > from.getWidth() &&
      !isa<CrossEntropyGradOp, LogSoftmaxGradOp>(op);
  if (!widenedForBackward)
    return as(v, element);
  if (Value known = backwardVersions.lookup({v, element}))
    return known;
  OpBuilder b(op);
  auto c = CastOp::create(b, v.getLoc(), withElement(v, element), v);
  inheritLayer(op, c);
  created.push_back(c);
  backwardVersions[{v, element}] = c;
  return c;
}

Value MixedPrecisionPass::as(Value v, Type element) {
  if (getElementTypeOrSelf(v.getType()) == element)
    return v;
  if (Value known = versions.lookup({v, element}))
    return known;
  OpBuilder b(&getContext());
  if (Operation *def = v.getDefiningOp())
    b.setInsertionPointAfter(def);
  else
    b.setInsertionPointToStart(cast<BlockArgument>(v).getOwner());
  Value converted;
  auto constant = v.getDefiningOp<ConstantOp>();
  auto dense = constant ? dyn_cast<DenseFPElementsAttr>(constant.getValue())
                        : DenseFPElementsAttr();
  if (dense) {
    const llvm::fltSemantics &sem = cast<FloatType>(element).getFloatSemantics();
    converted = ConstantOp::create(
        b, v.getLoc(), dense.mapValues(element, [&](const APFloat &x) {
          APFloat y = x;
          bool lost;
          y.convert(sem, APFloat::rmNearestTiesToEven, &lost);
          return y.bitcastToAPInt();
        }));
  } else if (auto broadcast = v.getDefiningOp<BroadcastInDimOp>()) {
    // Cast the broadcast's operand and broadcast that: the same values
    // (a conversion commutes with copying), fewer elements converted, and
    // the broadcast stays next to its users, where sharding can split its
    // new dimensions locally (refineBroadcasts) instead of materializing
    // the whole broadcast (a causal mask at the global batch) and slicing.
    Value operand = as(broadcast.getOperand(), element);
    b.setInsertionPointAfter(broadcast);
    auto made = BroadcastInDimOp::create(b, v.getLoc(), withElement(v, element),
                                         operand, broadcast.getDimsAttr());
    inheritLayer(broadcast, made);
    converted = made;
  } else {
    auto c = CastOp::create(b, v.getLoc(), withElement(v, element), v);
    if (Operation *def = v.getDefiningOp())
      inheritLayer(def, c);
    created.push_back(c);
    converted = c;
  }
  link(v, converted);
  return converted;
}

void MixedPrecisionPass::runOnOperation() {
  ModuleOp module = getOperation();
  MLIRContext *ctx = &getContext();
  Type half;
  if (dtype == "bf16")
    half = BFloat16Type::get(ctx);
  else if (dtype == "fp16")
    half = Float16Type::get(ctx);
  else if (dtype != "fp32") {
    module.emitError("expected dtype bf16, fp16 or fp32, got '") << dtype << "'";
    return signalPassFailure();
  }
  if (!half)
    return;
  auto train = module.lookupSymbol<func::FuncOp>("train_step");
  if (!train) {
    module.emitError("expected @train_step (run dtcc-graph-autodiff first)");
    return signalPassFailure();
  }
  if (module->hasAttr(dtcc::graph::kOptimizerAttr)) {
    train.emitError("expected @train_step before dtcc-graph-optimizer, got one "
                    "that already updates the parameters");
    return signalPassFailure();
  }
  bool scaleLoss = dtype == "fp16" && lossScale != 1.0;
  if (scaleLoss && !(lossScale > 0)) {
    module.emitError("expected a positive loss-scale, got ") << lossScale;
    return signalPassFailure();
  }
  Type f32 = Float32Type::get(ctx);
  auto retypable = [&](Value v) {
    FloatType t = floatElement(v);
    return t && (t == f32 || t == half);
  };

  Block &body = train.front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());

  // fp16: the backward pass starts from `loss-scale` instead of 1, before
  // the seed is typed like any other constant.
  if (scaleLoss) {
    ConstantOp seed;
    for (auto c : train.getOps<ConstantOp>())
      if (c->hasAttr(dtcc::graph::kGradSeedAttr))
        seed = c;
    if (!seed) {
      train.emitError("fp16 loss scaling expected the loss gradient seed "
                      "(dgraph.grad_seed) that dtcc-graph-autodiff creates");
      return signalPassFailure();
    }
    OpBuilder sb(seed);
    auto type = cast<RankedTensorType>(seed.getType());
    auto scaled = ConstantOp::create(
        sb, seed.getLoc(),
        DenseElementsAttr::get(type, sb.getFloatAttr(type.getElementType(),
                                                     lossScale)));
    scaled->setAttr(dtcc::graph::kGradSeedAttr, sb.getUnitAttr());
    seed.getResult().replaceAllUsesWith(scaled.getResult());
    seed.erase();
  }

  for (Operation &op : body) {
    if (op.hasAttr(dtcc::graph::kGradSeedAttr)) {
      for (Operation *o = op.getPrevNode(); o; o = o->getPrevNode())
        forwardOps.insert(o);
      break;
    }
  }

  // Values computed from constants alone: they adapt to their users. Ops
  // this loop inserts sit right after the op being visited or earlier, so
  // the early-increment walk never visits them.
  llvm::DenseSet<Value> weak;
  for (Operation &op : llvm::make_early_inc_range(body.without_terminator())) {
    if (auto load = dyn_cast<LoadOp>(op)) {
      // The master weight stays fp32; its users see it in the half type.
      if (floatElement(load.getResult()) == f32) {
        Value h = as(load.getResult(), half);
        load.getResult().replaceAllUsesExcept(h, h.getDefiningOp());
      }
      continue;
    }
    if (llvm::all_of(op.getOperands(), [&](Value v) { return weak.count(v); })) {
      weak.insert(op.result_begin(), op.result_end());
      continue;
    }
    if (auto store = dyn_cast<StoreOp>(op)) {
      auto var = module.lookupSymbol<VariableOp>(store.getVariableAttr());
      if (var)
        store->setOperand(0, as(store.getValue(),
                                var.getTensorType().getElementType()));
      continue;
    }
    if (isa<CastOp>(op))
      continue; // explicit conversions keep their types

    SmallVector<unsigned> floats;
    bool other = false;
    for (OpOperand &use : op.getOpOperands()) {
      if (retypable(use.get()))
        floats.push_back(use.getOperandNumber());
      else
        other |= bool(floatElement(use.get())); // f64, or a float we keep
    }
    for (Value r : op.getResults())
      other |= floatElement(r) && !retypable(r);
    if (floats.empty() || other)
      continue;

    Policy policy = policyOf(&op, halfNorms);
    Type compute;
    switch (policy) {
    case Policy::Half:
    case Policy::HalfIO:
      compute = half;
      break;
    case Policy::Island:
    case Policy::LossPath:
      compute = f32;
      break;
    case Policy::Widest:
      for (unsigned i : floats) {
        Value v = op.getOperand(i);
        if (weak.count(v))
          continue;
        if (!compute || floatElement(v) == f32)
          compute = floatElement(v);
      }
      break;
    }
    if (!compute)
      continue;
    auto typeOf = [&](Value v) {
      return policy == Policy::HalfIO && isNormStatistic(&op, v) ? f32
                                                                  : compute;
    };
    for (unsigned i : floats)
      op.setOperand(i, operandAs(&op, i, typeOf(op.getOperand(i))));
    for (Value r : op.getResults())
      if (floatElement(r))
        r.setType(withElement(r, typeOf(r)));
    if (policy != Policy::Island)
      continue;
    // Half results for half users; fp32 users (a gradient's saved mean or
    // rstd, the loss) get the fp32 value back through `versions`.
    for (Value r : op.getResults()) {
      if (!floatElement(r) || r.use_empty())
        continue;
      Value h = as(r, half);
      r.replaceAllUsesExcept(h, h.getDefiningOp());
    }
  }

  // The loss and the gradients leave in their original (fp32) types. With
  // widen-terms (a pipeline), a gradient summed from several terms (a
  // weight several ops read: tied embeddings and heads) is summed in fp32
  // from each term widened: its terms stay apart as in an fp32 program, so
  // the pipeline sums those of different stages after the micro-batches.
  SmallVector<Operation *> summedInHalf;
  std::function<Value(Value, Type)> widened = [&](Value v,
                                                  Type element) -> Value {
    auto add = v.getDefiningOp<AddOp>();
    if (!add || !v.hasOneUse() || floatElement(v) != half || element != f32)
      return as(v, element);
    Value lhs = widened(add.getLhs(), element);
    Value rhs = widened(add.getRhs(), element);
    OpBuilder ab(add);
    auto sum = AddOp::create(ab, add.getLoc(), lhs, rhs);
    inheritLayer(add, sum);
    summedInHalf.push_back(add);
    return sum;
  };
  OpBuilder b(ret);
  for (OpOperand &use : ret->getOpOperands()) {
    unsigned i = use.getOperandNumber();
    Type element = getElementTypeOrSelf(train.getResultTypes()[i]);
    Value v = widenTerms && train.getResultAttr(i, dtcc::graph::kGradOfAttr)
                  ? widened(use.get(), element)
                  : as(use.get(), element);
    if (scaleLoss && train.getResultAttr(i, dtcc::graph::kGradOfAttr)) {
      auto type = cast<RankedTensorType>(v.getType());
      Value inverse = ConstantOp::create(
          b, ret.getLoc(),
          DenseElementsAttr::get(type, b.getFloatAttr(type.getElementType(),
                                                      1.0 / lossScale)));
      v = MulOp::create(b, ret.getLoc(), v, inverse);
    }
    use.set(v);
  }
  // The half sums replaced (each read only by the next, or the return).
  for (Operation *add : llvm::reverse(summedInHalf))
    if (add->use_empty())
      add->erase();
  for (CastOp c : llvm::reverse(created))
    if (c->use_empty())
      c.erase();
  module->setAttr(dtcc::graph::kDtypeAttr, StringAttr::get(ctx, dtype));
}

} // namespace
