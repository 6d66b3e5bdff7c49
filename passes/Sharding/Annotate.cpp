//===- Annotate.cpp - a plan's fixed shardings ----------------------------===//
//
// Turns an explicit plan (a mesh and a ZeRO stage) into the shardings that
// propagation starts from: batches over dp, ZeRO's storage splits of
// optimizer state, gradients and parameters.
//
//===----------------------------------------------------------------------===//

#include "passes/Sharding/Passes.h"
#include "passes/Sharding/ShardingUtils.h"

#include "mlir/IR/Builders.h"

namespace dtcc::shard {
#define GEN_PASS_DEF_SHARDANNOTATE
#include "passes/Sharding/Passes.h.inc"
} // namespace dtcc::shard

using namespace mlir;
using namespace dtcc;
using namespace dtcc::shard;

namespace {

/// The weight load `v` is, seen through what the step computes from that
/// weight alone, element by element: the float casts that mixed precision
/// (dtcc-graph-mixed-precision) puts between a weight's fp32 load and its
/// bf16/fp16 uses, and a fake quantization of the weight (ONNX Q/DQ in
/// quantization-aware training: a scale, a round, a clamp, with per-channel
/// scales broadcast from state). Such a value is split wherever its weight
/// is. The weight is the one trainable variable of `v`'s shape read on the
/// way (any number of loads of it); other variables read there are state
/// (scales, zero points, masks). Without a trainable one, a single frozen
/// variable of `v`'s shape is the weight. Null when `v` is not one:
/// something between reads an activation, a second trainable variable, or
/// moves elements (a transpose, a slice, a reduction), or no variable of
/// `v`'s shape feeds it.
graph::LoadOp loadThroughCasts(Value v, SymbolTable &symbols) {
  if (auto load = v.getDefiningOp<graph::LoadOp>())
    return load;
  auto shape = cast<RankedTensorType>(v.getType()).getShape();
  constexpr int kMaxOps = 64;
  graph::LoadOp weight, frozen;
  bool severalFrozen = false; // frozen variables of `v`'s shape: more than one
  llvm::SmallPtrSet<Operation *, 16> seen;
  SmallVector<Value> work{v};
  while (!work.empty()) {
    Operation *op = work.pop_back_val().getDefiningOp();
    if (!op)
      return {}; // a function argument: an activation
    if (!seen.insert(op).second)
      continue;
    if (seen.size() > kMaxOps)
      return {};
    if (auto load = dyn_cast<graph::LoadOp>(op)) {
      auto var = symbols.lookup<graph::VariableOp>(load.getVariable());
      bool sameShape =
          cast<RankedTensorType>(load.getType()).getShape() == shape;
      if (var && var.getTrainable()) {
        if (!sameShape ||
            (weight && weight.getVariableAttr() != load.getVariableAttr()))
          return {}; // a second parameter
        weight = load;
      } else if (sameShape) {
        severalFrozen |=
            frozen && frozen.getVariableAttr() != load.getVariableAttr();
        frozen = load;
      }
      continue;
    }
    if (op->hasTrait<OpTrait::ConstantLike>())
      continue;
    if (!op->hasTrait<OpTrait::Elementwise>() &&
        !isa<graph::CastOp, graph::BroadcastInDimOp, graph::ReshapeOp>(op))
      return {};
    work.append(op->operand_begin(), op->operand_end());
  }
  if (weight)
    return weight;
  return severalFrozen ? graph::LoadOp() : frozen;
}

/// `v` without mixed precision's float casts: the broadcast (or other op)
/// a cast converts.
Value throughCasts(Value v) {
  while (auto c = v.getDefiningOp<graph::CastOp>())
    v = c.getOperand();
  return v;
}

/// `base` (null: replicated) further split over `axis` (of `size` ranks)
/// along the first dimension whose local blocks the axis divides; null when
/// none does.
ShardingAttr addSplit(ShardingAttr base, RankedTensorType type,
                      StringAttr axis, int64_t size, MeshAttr mesh) {
  MLIRContext *ctx = type.getContext();
  if (!base)
    base = ShardingAttr::replicated(ctx, type.getRank());
  for (auto [d, n] : llvm::enumerate(type.getShape())) {
    DimShardingAttr dim = base.getDims()[d];
    int64_t block = n / dim.getGroups() / axesSize(mesh, dim.getAxes());
    if (block % size != 0 || block < size)
      continue;
    SmallVector<DimShardingAttr> dims(base.getDims());
    SmallVector<StringAttr> axes(dim.getAxes());
    axes.push_back(axis);
    dims[d] = DimShardingAttr::get(ctx, axes, dim.getGroups());
    return ShardingAttr::get(ctx, dims, {});
  }
  return {};
}

/// A 2-D sharding with `axis` on dimension `d` in `groups` blocks.
ShardingAttr splitDim(MLIRContext *ctx, int64_t rank, int64_t d,
                      StringAttr axis, int64_t groups) {
  SmallVector<DimShardingAttr> dims(rank, DimShardingAttr::get(ctx, {}, 1));
  dims[d] = DimShardingAttr::get(ctx, {axis}, groups);
  return ShardingAttr::get(ctx, dims, {});
}

struct ShardAnnotatePass
    : public dtcc::shard::impl::ShardAnnotateBase<ShardAnnotatePass> {
  using ShardAnnotateBase::ShardAnnotateBase;
  MeshAttr mesh_;
  /// The module's symbols (once @main is gone; keepHalfWeightCopies
  /// enters its copies): looking each variable up in the module scanned
  /// its ops, once per load of every pipeline stage.
  std::optional<SymbolTable> symbols_;

  graph::VariableOp variableNamed(StringRef name) {
    return symbols_->lookup<graph::VariableOp>(name);
  }

  void runOnOperation() final {
    ModuleOp module = getOperation();
    MLIRContext *ctx = module.getContext();
    PlanAttr plan = getPlan(module);
    if (!plan) {
      module.emitError("expected a module with a dshard.plan (run "
                       "dtcc-plan-set first)");
      return signalPassFailure();
    }
    // The plan's verifier has checked its axes and ZeRO stage, and
    // dtcc-shard-pipeline cut as many stages as its pp.
    MeshAttr meshAttr = plan.getMesh();
    int64_t zero = plan.getZero();
    if (meshAttr.getSize("pp") > 1 &&
        !module.lookupSymbol<func::FuncOp>("train_step_pp0")) {
      module.emitError("mesh axis 'pp' (size ")
          << meshAttr.getSize("pp")
          << "): cut the step into stages with dtcc-shard-pipeline first";
      return signalPassFailure();
    }
    auto train = module.lookupSymbol<func::FuncOp>("train_step");
    if (!train)
      train = module.lookupSymbol<func::FuncOp>("train_step_pp0");
    if (!train) {
      module.emitError("a sharded program trains: expected @train_step "
                       "(compile with --train)");
      return signalPassFailure();
    }
    module->setAttr(kMeshAttr, meshAttr);
    if (auto main = module.lookupSymbol<func::FuncOp>("main"))
      main.erase();
    symbols_.emplace(module);
    // A layout search's exact shardings come first: the Megatron-style
    // rules keep a variable that has one.
    if (failed(applySearchedLayouts(module, plan)))
      return signalPassFailure();

    StringAttr dp = StringAttr::get(ctx, "dp");
    int64_t dpSize = meshAttr.getSize("dp");
    for (auto fn : module.getOps<func::FuncOp>())
      if (failed(annotateBatches(fn, dp, dpSize)))
        return signalPassFailure();
    // (@apply_step, the update of accumulated micro-batches, takes no data.)
    if (int64_t cpSize = meshAttr.getSize("cp"); cpSize > 1)
      for (auto fn : module.getOps<func::FuncOp>())
        if (fn.getNumArguments() > 0 &&
            failed(annotateSequences(fn, StringAttr::get(ctx, "cp"), cpSize)))
          return signalPassFailure();
    mesh_ = meshAttr;
    if (int64_t tpSize = meshAttr.getSize("tp"); tpSize > 1) {
      for (auto fn : module.getOps<func::FuncOp>())
        if (fn.getSymName().starts_with("train_step"))
          annotateTensorParallel(module, fn, StringAttr::get(ctx, "tp"), tpSize);
      if (!splitsVariableOver(module, "tp"))
        module.emitWarning("tp=")
            << tpSize << " divides no weight's rows or columns (nor the "
                         "vocabulary): every tp rank computes everything";
    }
    if (failed(applyLayouts(module, plan)))
      return signalPassFailure();
    // ZeRO-1/2 split a master weight over dp when the step can gather it
    // once (one micro-batch, no pipeline) or reads a copy of it in the
    // compute type that the update writes (otherwise it stays whole).
    // (Below ZeRO-1 a copy would only move the step's one cast of each
    // weight, which a pipeline's unrolled micro-batches share, from the
    // workspace into the state: priced, Megatron-LM's 39B row kept its
    // step and its memory.)
    const bool gatherOnce =
        plan.getMicroBatches() == 1 && plan.getPipelineStages() == 1;
    if (halfWeightCopies && dpSize > 1 && (zero == 1 || zero == 2) &&
        !gatherOnce && plan.getOffload() == Offload::None)
      keepHalfWeightCopies(module, *symbols_);
    shareWithOptimizerState(module);
    if (dpSize > 1 && zero > 0)
      annotateZero(module, dp, dpSize, zero, gatherOnce);
    if (dpSize > 1 && zero < 2 && plan.getAccumulationSteps() > 1)
      accumulatePartialSums(module, dp);
    if (plan.getHalfGradReduce() &&
        (dpSize > 1 || meshAttr.getSize("cp") > 1) &&
        reduceGradientsAtComputeType(module) == 0)
      module.emitWarning("grad_reduce = half: no weight gradient is "
                         "widened just before its update (fp32 training, "
                         "or a loss scale between them): the gradients "
                         "are summed as they are");
    if (plan.getSequenceParallel() && meshAttr.getSize("tp") <= 1) {
      module.emitError("sequence parallelism splits the sequence over tp: "
                       "expected a mesh with tp > 1, got ")
          << meshAttr;
      return signalPassFailure();
    }
    if (int64_t tpSize = meshAttr.getSize("tp");
        tpSize > 1 && plan.getSequenceParallel())
      for (auto fn : module.getOps<func::FuncOp>())
        if (fn.getSymName().starts_with("train_step") &&
            failed(annotateSequenceParallel(module, fn, tpSize, dpSize)))
          return signalPassFailure();
  }

  /// Whether `v` is a load of a variable whose dimension `d` is split over
  /// tp.
  bool loadsSplitOverTp(ModuleOp module, Value v, int64_t d) {
    auto load = loadThroughCasts(v, *symbols_);
    auto var = load ? variableNamed(load.getVariable()) : graph::VariableOp();
    auto s = var ? var->getAttrOfType<ShardingAttr>(kShardingAttr) : ShardingAttr();
    return s && d < int64_t(s.getDims().size()) &&
           llvm::any_of(s.axesOf(d),
                        [](StringAttr a) { return a.getValue() == "tp"; });
  }

  /// Sequence parallelism (Korthikanti et al., 2022): the hidden state
  /// between the tensor-parallel regions is split along its sequence over
  /// tp instead of being whole on every tp rank. Where a region ends in a
  /// sum over tp -- a row-parallel matmul (its weight's rows split over
  /// tp), a vocab-parallel embedding lookup -- the sum is constrained to
  /// the sequence split (`dshard.constraint {dshard.sequence}`), which
  /// partition makes a reduce-scatter instead of an all-reduce.
  /// Propagation carries the split through the ops between (norms,
  /// residual adds, dropout and their gradients) and gathers it where a
  /// region starts (a matmul whose weight is split over tp). The hidden
  /// state is [batch, sequence..., hidden]: the sequence is dimension 1
  /// (dimension 0, the tokens, when it is [tokens, hidden]).
  LogicalResult annotateSequenceParallel(ModuleOp module, func::FuncOp fn,
                                         int64_t tpSize, int64_t dpSize) {
    MLIRContext *ctx = module.getContext();
    StringAttr tp = StringAttr::get(ctx, "tp"), dp = StringAttr::get(ctx, "dp");
    for (Operation &op : llvm::make_early_inc_range(fn.getBody().front())) {
      Value sum;
      if (auto mm = dyn_cast<graph::MatmulOp>(op)) {
        // The forward product x @ W (a backward product transposes one
        // side): its contraction is split when W's rows are.
        if (!mm.getTransposeLhs() && !mm.getTransposeRhs() &&
            cast<RankedTensorType>(mm.getRhs().getType()).getRank() == 2 &&
            loadsSplitOverTp(module, mm.getRhs(), 0))
          sum = mm.getResult();
      } else if (auto gather = dyn_cast<graph::GatherOp>(op)) {
        if (loadsSplitOverTp(module, gather.getOperand(), gather.getAxis()))
          sum = gather.getResult();
      }
      if (!sum)
        continue;
      auto type = cast<RankedTensorType>(sum.getType());
      if (type.getRank() < 2)
        continue; // no tokens to split
      int64_t seq = type.getRank() >= 3 ? 1 : 0;
      int64_t size = type.getDimSize(seq);
      bool batchOverDp = dpSize > 1 && type.getDimSize(0) % dpSize == 0;
      int64_t local = seq == 0 && batchOverDp ? size / dpSize : size;
      if (local % tpSize != 0)
        return op.emitOpError("sequence parallelism splits dimension ")
               << seq << " (the " << (seq == 0 ? "tokens" : "sequence")
               << ") of the hidden state this op makes over tp=" << tpSize
               << ": expected a size divisible by " << tpSize << ", got "
               << local << (local != size ? " per dp rank" : "");
      SmallVector<DimShardingAttr> dims(type.getRank(),
                                        DimShardingAttr::get(ctx, {}, 1));
      SmallVector<StringAttr> batchAxes;
      if (batchOverDp)
        batchAxes.push_back(dp);
      dims[0] = DimShardingAttr::get(ctx, batchAxes, 1);
      SmallVector<StringAttr> seqAxes(dims[seq].getAxes());
      seqAxes.push_back(tp);
      dims[seq] = DimShardingAttr::get(ctx, seqAxes, 1);
      OpBuilder b(ctx);
      b.setInsertionPointAfter(&op);
      auto c = ConstraintOp::create(b, op.getLoc(), sum,
                                    ShardingAttr::get(ctx, dims, {}));
      c->setAttr(kSequenceAttr, UnitAttr::get(ctx));
      if (auto layer = op.getAttr(graph::kLayerAttr))
        c->setAttr(graph::kLayerAttr, layer);
      sum.replaceAllUsesExcept(c.getResult(), c);
    }
    return success();
  }

  /// Megatron-style tensor parallelism from the forward pass: a weight
  /// multiplying a whole activation is split by output columns (column
  /// parallel, its bias too), which leaves the activations after it split;
  /// a weight multiplying a split activation is split by input rows (row
  /// parallel), whose partial sums become whole again by an all-reduce
  /// before its bias. A column-parallel output sliced into equal parts
  /// (fused Q, K, V) is split part by part. Embedding tables are split by
  /// rows and the projection to the vocabulary by columns (vocab-parallel,
  /// with the cross-entropy's distributed form).
  void annotateTensorParallel(ModuleOp module, func::FuncOp train,
                              StringAttr tp, int64_t tpSize) {
    MLIRContext *ctx = module.getContext();
    llvm::DenseSet<Value> split;
    auto weightOf = [&](Value v) -> graph::VariableOp {
      auto load = loadThroughCasts(v, *symbols_);
      if (!load)
        return {};
      auto var = variableNamed(load.getVariable());
      if (!var || !var.getTrainable() || var.getTensorType().getRank() != 2)
        return {};
      return var;
    };
    auto feedsLoss = [&](Value v) {
      SmallVector<Value> frontier{v};
      for (int depth = 0; depth < 3 && !frontier.empty(); ++depth) {
        SmallVector<Value> next;
        for (Value x : frontier)
          for (Operation *user : x.getUsers()) {
            if (isa<graph::CrossEntropyOp, func::ReturnOp>(user))
              return true;
            if (isa<graph::AddOp, graph::ReshapeOp, graph::CastOp>(user))
              next.push_back(user->getResult(0));
          }
        frontier = std::move(next);
      }
      return false;
    };
    for (Operation &op : train.getBody().front()) {
      if (auto conv = dyn_cast<graph::ConvOp>(op)) {
        annotateConv(module, conv, tp, tpSize, split);
        continue;
      }
      if (isa<graph::BatchNormOp, graph::GroupNormOp, graph::BatchNormUpdateOp>(op)) {
        annotateNorm(module, op, tp, tpSize, split);
        continue;
      }
      // Vocab-parallel embedding: each rank holds a block of the rows.
      if (auto gather = dyn_cast<graph::GatherOp>(op)) {
        if (auto table = weightOf(gather.getOperand()))
          if (gather.getAxis() == 0 && !table->hasAttr(kShardingAttr) &&
              table.getTensorType().getDimSize(0) % tpSize == 0)
            table->setAttr(kShardingAttr, splitDim(ctx, 2, 0, tp, 1));
        continue;
      }
      auto mm = dyn_cast<graph::MatmulOp>(op);
      graph::VariableOp w = mm ? weightOf(mm.getRhs()) : graph::VariableOp();
      if (!w || mm.getTransposeLhs() || mm.getTransposeRhs()) {
        bool any = llvm::any_of(op.getOperands(),
                                [&](Value v) { return split.contains(v); });
        if (any)
          for (Value r : op.getResults())
            split.insert(r);
        continue;
      }
      if (w->hasAttr(kShardingAttr))
        continue; // decided at its first use
      auto wType = w.getTensorType();
      if (split.contains(mm.getLhs())) {
        if (wType.getDimSize(0) % tpSize == 0)
          w->setAttr(kShardingAttr, splitDim(ctx, 2, 0, tp, 1));
        continue;
      }
      // The output, or its sum with a bias, and the parts it is sliced into.
      // The projection to the vocabulary is split by vocabulary: the
      // cross-entropy after it takes its vocab-parallel form.
      bool head = feedsLoss(mm.getResult());
      Value out = mm.getResult();
      graph::VariableOp bias;
      for (Operation *user : out.getUsers())
        if (auto add = dyn_cast<graph::AddOp>(user)) {
          Value other = add.getLhs() == out ? add.getRhs() : add.getLhs();
          if (auto b = throughCasts(other).getDefiningOp<graph::BroadcastInDimOp>())
            if (auto load = loadThroughCasts(b.getOperand(), *symbols_)) {
              bias = variableNamed(load.getVariable());
              out = add.getResult();
            }
        }
      int64_t n = wType.getDimSize(1), parts = 0;
      for (Operation *user : out.getUsers())
        if (isa<graph::SliceOp>(user))
          ++parts;
      int64_t groups = !head && parts > 1 && n % parts == 0 ? parts : 1;
      if ((n / groups) % tpSize != 0)
        continue;
      w->setAttr(kShardingAttr, splitDim(ctx, 2, 1, tp, groups));
      if (bias && bias.getTensorType().getRank() == 1 &&
          !bias->hasAttr(kShardingAttr))
        bias->setAttr(kShardingAttr, splitDim(ctx, 1, 0, tp, groups));
      split.insert(mm.getResult());
      split.insert(out);
    }
  }

  /// The convolutions' form of the same scheme, over channels: a filter
  /// [O, C/groups, K..] whose input is whole is split by output channels
  /// (its bias too), leaving the activation split by channels; a filter
  /// whose input is split by channels is split by input channels (partial
  /// sums, all-reduced before the bias) or, grouped (depthwise), by groups,
  /// which keeps the activation split at no cost. Spatial dimensions stay
  /// whole (no halo exchange).
  void annotateConv(ModuleOp module, graph::ConvOp conv, StringAttr tp,
                    int64_t tpSize, llvm::DenseSet<Value> &split) {
    MLIRContext *ctx = module.getContext();
    auto load = loadThroughCasts(conv.getFilter(), *symbols_);
    auto w = load ? variableNamed(load.getVariable()) : graph::VariableOp();
    bool inputSplit = split.contains(conv.getInput());
    if (!w || !w.getTrainable() || w->hasAttr(kShardingAttr)) {
      if (inputSplit)
        split.insert(conv.getResult());
      return;
    }
    auto wType = w.getTensorType();
    int64_t rank = wType.getRank(), groups = conv.getGroups();
    if (inputSplit && groups == 1) {
      if (wType.getDimSize(1) % tpSize == 0)
        w->setAttr(kShardingAttr, splitDim(ctx, rank, 1, tp, 1));
      return;
    }
    // Output channels [groups, O/groups]: a grouped convolution of a split
    // input must split its groups as the input is split.
    bool divides = groups > 1 ? groups % tpSize == 0
                              : wType.getDimSize(0) % tpSize == 0;
    if (!divides)
      return;
    w->setAttr(kShardingAttr, splitDim(ctx, rank, 0, tp, 1));
    split.insert(conv.getResult());
    for (Operation *user : conv.getResult().getUsers())
      if (auto add = dyn_cast<graph::AddOp>(user)) {
        Value other = add.getLhs() == conv.getResult() ? add.getRhs() : add.getLhs();
        auto b = throughCasts(other).getDefiningOp<graph::BroadcastInDimOp>();
        auto bl =
            b ? loadThroughCasts(b.getOperand(), *symbols_) : graph::LoadOp();
        auto bias = bl ? variableNamed(bl.getVariable()) : graph::VariableOp();
        if (bias && bias.getTensorType().getRank() == 1 &&
            b.getDims() == ArrayRef<int64_t>{1} && !bias->hasAttr(kShardingAttr))
          bias->setAttr(kShardingAttr, splitDim(ctx, 1, 0, tp, 1));
        split.insert(add.getResult());
      }
  }

  /// A normalization of channels that a convolution split: each rank
  /// normalizes its own channels (batch norm's statistics and group norm's
  /// groups stay within a rank when whole groups are split), so its
  /// per-channel scale and bias, and batch norm's running statistics, are
  /// split like the channels. Kept whole, they would be sliced forward and
  /// their gradients and running statistics gathered back, two collectives
  /// per parameter per step.
  void annotateNorm(ModuleOp module, Operation &op, StringAttr tp,
                    int64_t tpSize, llvm::DenseSet<Value> &split) {
    auto update = dyn_cast<graph::BatchNormUpdateOp>(op);
    // An update splits with the statistics of a split activation.
    Value input = update ? update.getMean() : op.getOperand(0);
    if (!split.contains(input))
      return;
    for (Value r : op.getResults())
      split.insert(r);
    int64_t channels = cast<RankedTensorType>(input.getType()).getDimSize(
        update ? 0 : 1);
    int64_t perRank = 1;
    if (auto group = dyn_cast<graph::GroupNormOp>(op))
      perRank = group.getChannelsPerGroup();
    if (channels % (tpSize * perRank) != 0)
      return;
    SmallVector<Value> params;
    if (update)
      params = {update.getRunningMean(), update.getRunningVar()};
    else
      params = {op.getOperand(1), op.getOperand(2)};
    for (Value v : params) {
      auto load = loadThroughCasts(v, *symbols_);
      auto var = load ? variableNamed(load.getVariable()) : graph::VariableOp();
      if (var && var.getTensorType().getRank() == 1 &&
          !var->hasAttr(kShardingAttr))
        var->setAttr(kShardingAttr, splitDim(module.getContext(), 1, 0, tp, 1));
    }
  }

  /// The plan's exact layouts (#dshard.sharding, a layout search's).
  LogicalResult applySearchedLayouts(ModuleOp module, PlanAttr plan) {
    for (NamedAttribute l : plan.getLayouts()) {
      auto s = dyn_cast<ShardingAttr>(l.getValue());
      if (!s)
        continue;
      auto var = variableNamed(l.getName());
      if (!var || int64_t(s.getDims().size()) != var.getTensorType().getRank())
        return module.emitError("the plan's layout of '")
               << l.getName().getValue() << "' (" << s
               << "): expected a variable of " << s.getDims().size()
               << " dimensions";
      var->setAttr(kShardingAttr, s);
    }
    return success();
  }

  /// The plan's per-weight tensor-parallel layouts (rows, cols, whole),
  /// which replace the Megatron-style choice.
  LogicalResult applyLayouts(ModuleOp module, PlanAttr plan) {
    MLIRContext *ctx = module.getContext();
    StringAttr tp = StringAttr::get(ctx, "tp");
    for (NamedAttribute l : plan.getLayouts()) {
      auto keyword = dyn_cast<StringAttr>(l.getValue());
      if (!keyword)
        continue;
      StringRef name = l.getName().getValue(), layout = keyword.getValue();
      std::string entry = (name + "=" + layout).str();
      auto var = variableNamed(name);
      if (!var || var.getTensorType().getRank() != 2)
        return module.emitError("layout '")
               << entry << "': expected NAME=rows|cols|whole for a 2-D variable";
      if (layout == "whole")
        var->removeAttr(kShardingAttr);
      else if (layout == "rows" || layout == "cols")
        var->setAttr(kShardingAttr,
                     splitDim(ctx, 2, layout == "rows" ? 0 : 1, tp, 1));
      else
        return module.emitError("layout '")
               << entry << "': expected rows, cols or whole";
    }
    return success();
  }

  /// Optimizer state and gradient accumulators are laid out like their
  /// parameter.
  void shareWithOptimizerState(ModuleOp module) {
    module.walk([&](Operation *op) {
      if (!isa<graph::AdamwOp, graph::SgdOp>(op))
        return;
      auto param = op->getOperand(0).getDefiningOp<graph::LoadOp>();
      if (!param)
        return;
      auto var = variableNamed(param.getVariable());
      auto s = var ? var->getAttrOfType<ShardingAttr>(kShardingAttr) : ShardingAttr();
      if (!s)
        return;
      for (Value state : op->getOperands().drop_front(1))
        if (state.getType() == op->getOperand(0).getType())
          if (auto load = state.getDefiningOp<graph::LoadOp>())
            if (auto v = variableNamed(load.getVariable()))
              if (!v->hasAttr(kShardingAttr))
                v->setAttr(kShardingAttr, s);
      std::string acc = (param.getVariable() + "/grad_acc").str();
      if (auto v = variableNamed(acc))
        if (!v->hasAttr(kShardingAttr))
          v->setAttr(kShardingAttr, s);
    });
  }

  /// Gradient accumulation below ZeRO-2: each rank adds its own partial
  /// gradient into its accumulator (`partial = {dp}`), so the data-parallel
  /// sum is taken once per step, where @apply_step reads the accumulators,
  /// instead of once per micro-batch (as Megatron-LM and DDP's no_sync
  /// do). @apply_step zeroes them: zero is a partial sum on every rank,
  /// and so is what a checkpoint saves between steps. ZeRO-2 keeps
  /// reduce-scattering each micro-batch's gradient into its split
  /// accumulator, which holds 1/dp of it.
  void accumulatePartialSums(ModuleOp module, StringAttr dp) {
    MLIRContext *ctx = module.getContext();
    for (auto var : module.getOps<graph::VariableOp>()) {
      if (!var.getSymName().ends_with("/grad_acc"))
        continue;
      auto s = var->getAttrOfType<ShardingAttr>(kShardingAttr);
      if (!s)
        s = ShardingAttr::replicated(ctx, var.getTensorType().getRank());
      SmallVector<StringAttr> partial(s.getPartial());
      if (!llvm::is_contained(partial, dp))
        partial.push_back(dp);
      var->setAttr(kShardingAttr, ShardingAttr::get(ctx, s.getDims(), partial));
    }
  }

  /// `grad_reduce = half`: a weight gradient that mixed precision widens
  /// just before it is used (a bf16 sum, then the cast to the fp32 master
  /// gradient) is laid out as its user reads it before the cast, so that
  /// its sums over dp and cp (and a sequence-parallel norm's over tp)
  /// resolve at the compute type, half the bytes, and the cast widens the
  /// local part. Its user is the optimizer (one micro-batch: without ZeRO
  /// an all-reduce of the bf16 gradient, with ZeRO a reduce-scatter of it
  /// into the parameter's part, where annotateZero's constraint after the
  /// cast then finds it), or, with accumulated micro-batches under ZeRO-2
  /// and 3, the add into its split accumulator (each micro-batch's
  /// reduce-scatter in bf16). Accumulators of partial sums (below ZeRO-2)
  /// are summed once per step, in fp32, and stay so.
  /// Returns how many gradients it lays out so.
  int reduceGradientsAtComputeType(ModuleOp module) {
    MLIRContext *ctx = module.getContext();
    int narrowed = 0;
    // The bf16 value `grad` widens, laid out as `layout` before the cast.
    auto narrowFirst = [&](Value grad, ShardingAttr layout) {
      auto widen = grad.getDefiningOp<graph::CastOp>();
      if (!widen || !isWideningCast(widen) ||
          !widen.getOperand().hasOneUse())
        return;
      if (!layout)
        layout = ShardingAttr::replicated(
            ctx, cast<RankedTensorType>(widen.getType()).getRank());
      OpBuilder b(widen);
      auto c = ConstraintOp::create(b, widen.getLoc(), widen.getOperand(),
                                    layout);
      widen.getOperandMutable().assign(c.getResult());
      ++narrowed;
    };
    SmallVector<Operation *> optimizers;
    SmallVector<graph::StoreOp> accumulations;
    module.walk([&](Operation *op) {
      if (isa<graph::AdamwOp, graph::SgdOp>(op))
        optimizers.push_back(op);
      if (auto store = dyn_cast<graph::StoreOp>(op);
          store && store.getVariable().ends_with("/grad_acc"))
        accumulations.push_back(store);
    });
    for (Operation *op : optimizers) {
      Value grad = op->getOperand(1);
      if (auto c = grad.getDefiningOp<ConstraintOp>())
        narrowFirst(c.getOperand(), c.getSharding());
      else
        narrowFirst(grad, paramSharding(module, op));
    }
    // acc' = acc + widen(g), stored back: g summed as the accumulator lies.
    for (graph::StoreOp store : accumulations) {
      auto var = variableNamed(store.getVariable());
      auto layout = var ? var->getAttrOfType<ShardingAttr>(kShardingAttr)
                        : ShardingAttr();
      auto add = store.getValue().getDefiningOp<graph::AddOp>();
      if (!add || (layout && layout.isPartial()))
        continue;
      for (Value term : add->getOperands()) {
        auto load = term.getDefiningOp<graph::LoadOp>();
        if (!load || load.getVariable() != store.getVariable())
          narrowFirst(term, layout);
      }
    }
    return narrowed;
  }

  /// Splits dimension 0 of every data input over dp. A scalar (rank-0)
  /// input has no batch: every rank takes the whole value (replicated).
  LogicalResult annotateBatches(func::FuncOp fn, StringAttr dp, int64_t dpSize) {
    MLIRContext *ctx = fn.getContext();
    for (BlockArgument arg : fn.getArguments()) {
      auto type = cast<RankedTensorType>(arg.getType());
      SmallVector<DimShardingAttr> dims(type.getRank(),
                                        DimShardingAttr::get(ctx, {}, 1));
      if (dpSize > 1 && type.getRank() > 0) {
        auto name = fn.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                    dtcc::graph::kNameAttr);
        std::string label = name ? name.str() : "#" + std::to_string(arg.getArgNumber());
        if (type.getDimSize(0) % dpSize != 0)
          return fn.emitError("input '")
                 << label << "' of @" << fn.getSymName() << " has batch "
                 << type.getDimSize(0) << " (dimension 0), which dp=" << dpSize
                 << " does not divide: each data-parallel rank takes an "
                    "equal share of every batch";
        // A step of M micro-batches: each rank holds its share of each.
        int64_t micro = getPlan(fn).getMicroBatchesInStep();
        if (type.getDimSize(0) % (micro * dpSize) != 0)
          return fn.emitError("input '")
                 << label << "' of @" << fn.getSymName() << ": "
                 << micro << " micro-batches of "
                 << type.getDimSize(0) / micro
                 << " rows each do not split over dp=" << dpSize;
        dims[0] = DimShardingAttr::get(ctx, {dp}, micro);
      }
      setSharding(arg, ShardingAttr::get(ctx, dims, {}));
    }
    return success();
  }

  /// Context parallelism: dimension 1 of every data input of rank >= 2
  /// (batch-major [B, S, ...]: the sequence) is split over cp, so every
  /// activation derived from it is, and propagation runs everything
  /// position-wise on the local chunk. Attention, a matmul of two such
  /// activations, keeps its queries' split: its keys and values are
  /// gathered over cp (Llama 3's context parallelism) and their gradients,
  /// partial sums over cp, reduce-scattered back.
  LogicalResult annotateSequences(func::FuncOp fn, StringAttr cp,
                                  int64_t cpSize) {
    MLIRContext *ctx = fn.getContext();
    bool attention = false;
    fn.walk([&](graph::AttentionOp) { attention = true; });
    fn.walk([&](graph::MatmulOp mm) {
      auto activation = [](Value v) {
        return !v.getDefiningOp<graph::LoadOp>() &&
               cast<RankedTensorType>(v.getType()).getRank() >= 3;
      };
      attention |= activation(mm.getLhs()) && activation(mm.getRhs());
    });
    if (!attention)
      return fn.emitError("mesh axis 'cp' (size ")
             << cpSize << ") splits the sequence of attention, but @"
             << fn.getSymName()
             << " has no attention (a matmul of two activations)";
    for (BlockArgument arg : fn.getArguments()) {
      auto type = cast<RankedTensorType>(arg.getType());
      if (type.getRank() < 2)
        continue;
      auto name = fn.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                  dtcc::graph::kNameAttr);
      std::string label =
          name ? name.str() : "#" + std::to_string(arg.getArgNumber());
      if (type.getDimSize(1) % cpSize != 0)
        return fn.emitError("input '")
               << label << "' of @" << fn.getSymName() << " has sequence "
               << type.getDimSize(1) << " (dimension 1), which cp=" << cpSize
               << " does not divide: each context-parallel rank takes an "
                  "equal chunk of every sequence";
      ShardingAttr s = getSharding(arg);
      SmallVector<DimShardingAttr> dims(s.getDims());
      dims[1] = DimShardingAttr::get(ctx, {cp}, 1);
      setSharding(arg, ShardingAttr::get(ctx, dims, {}));
    }
    return success();
  }

  /// The sharding of the parameter an optimizer op updates, before ZeRO.
  ShardingAttr paramSharding(ModuleOp module, Operation *op) {
    auto load = op->getOperand(0).getDefiningOp<graph::LoadOp>();
    auto var = load ? variableNamed(load.getVariable()) : graph::VariableOp();
    if (!var)
      return {};
    auto s = var->getAttrOfType<ShardingAttr>(kShardingAttr);
    // Already extended by ZeRO: drop the dp axes again.
    return s && var->hasAttr(kZeroAttr) ? withoutDp(s) : s;
  }

  /// ZeRO: optimizer state (>= 1), gradients (>= 2), parameters (3) split
  /// over dp. A parameter is its own fp32 master copy (mixed precision casts
  /// it at its load), which ZeRO-1/2 split with the rest of the optimizer
  /// state when `gatherOnce` (one micro-batch, no pipeline): the step
  /// gathers it once, in the compute type, at its first use, and keeps the
  /// whole for the step, where it was kept whole in fp32 between steps and
  /// gathered in fp32 after the update (Rajbhandari et al.'s ZeRO-1 splits
  /// the fp32 master weights too; Megatron-LM's distributed optimizer
  /// gathers its bf16 parameters). With accumulating @train_step calls it
  /// stays whole: each call would gather it again. A pipeline stage keeps
  /// it whole too: its collectives run in order on one communication
  /// thread, and its sends to the next stage would queue behind the
  /// forward's gathers (priced: Llama 3 405B's bubble, pp=16 dp=64,
  /// 6.2 -> 8.9 s).
  void annotateZero(ModuleOp module, StringAttr dp, int64_t dpSize,
                    int64_t zero, bool gatherOnce) {
    auto shardVariable = [&](Operation *from, StringRef name,
                             bool once = false) {
      auto var = variableNamed(name);
      if (!var || var->hasAttr(kZeroAttr))
        return;
      auto base = var->getAttrOfType<ShardingAttr>(kShardingAttr);
      if (auto s = addSplit(base, var.getTensorType(), dp, dpSize, mesh_)) {
        var->setAttr(kShardingAttr, s);
        var->setAttr(kZeroAttr, UnitAttr::get(module.getContext()));
        if (once)
          var->setAttr(kGatherOnceAttr, UnitAttr::get(module.getContext()));
      }
      (void)from;
    };
    SmallVector<Operation *> optimizers;
    module.walk([&](Operation *op) {
      if (isa<graph::AdamwOp, graph::SgdOp>(op))
        optimizers.push_back(op);
    });
    for (Operation *op : optimizers) {
      // Operands: param, grad, then the state tensors of the param's type.
      Type paramType = op->getOperand(0).getType();
      for (Value state : op->getOperands().drop_front(2))
        if (state.getType() == paramType)
          if (auto load = state.getDefiningOp<graph::LoadOp>())
            shardVariable(op, load.getVariable());
      if (auto load = op->getOperand(0).getDefiningOp<graph::LoadOp>()) {
        auto var = variableNamed(load.getVariable());
        // A master the step reads through its half copy: the optimizer's.
        if (var && var->hasAttr(kHalfCopyAttr))
          shardVariable(op, load.getVariable());
        else if (zero >= 3 || gatherOnce)
          shardVariable(op, load.getVariable(), /*once=*/zero < 3);
      }
      // Each rank updates its part of the state from its part of the
      // gradient: the data-parallel sum is a reduce-scatter, and the
      // gradient norm a sum of the parts' norms (the gradient itself is
      // transient; ZeRO-2 also splits the accumulators that keep it).
      if (zero >= 1) {
        Value grad = op->getOperand(1);
        if (auto load = grad.getDefiningOp<graph::LoadOp>()) {
          if (zero >= 2)
            shardVariable(op, load.getVariable()); // a gradient accumulator
        } else if (auto s = addSplit(
                       paramSharding(module, op),
                       cast<RankedTensorType>(grad.getType()), dp, dpSize, mesh_)) {
          // A layout search's constraint on the gradient (its parameter's
          // layout) takes the dp split for all its users, as a new one
          // would: a second constraint after it would all-reduce and slice
          // where one reduce-scatter does.
          if (auto c = grad.getDefiningOp<ConstraintOp>();
              c && c.getSharding() == paramSharding(module, op)) {
            c.setShardingAttr(s);
            continue;
          }
          OpBuilder b(op);
          b.setInsertionPointAfterValue(grad);
          auto c = ConstraintOp::create(b, op->getLoc(), grad, s);
          grad.replaceAllUsesExcept(c.getResult(), c);
        }
      }
    }
    if (zero >= 2)
      for (auto var : module.getOps<graph::VariableOp>())
        if (var.getSymName().ends_with("/grad_acc"))
          shardVariable(nullptr, var.getSymName());
  }
};

} // namespace
