//===- ShardingUtils.cpp - factors, projections and shardings of values ---===//

#include "passes/Sharding/ShardingUtils.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/TypeUtilities.h"

using namespace mlir;
using namespace dtcc::graph;

namespace dtcc::shard {

graph::VariableOp loadedVariable(Value value, SymbolTableCollection *symbols) {
  auto load = value.getDefiningOp<graph::LoadOp>();
  if (!load)
    return {};
  if (symbols)
    return symbols->lookupNearestSymbolFrom<graph::VariableOp>(
        load, load.getVariableAttr());
  return SymbolTable::lookupNearestSymbolFrom<graph::VariableOp>(
      load, load.getVariableAttr());
}

bool loadsZeroVariable(Value value, SymbolTableCollection *symbols) {
  graph::VariableOp var = loadedVariable(value, symbols);
  return var && var->hasAttr(kZeroAttr);
}

bool loadsGatherOnceVariable(Value value, SymbolTableCollection *symbols) {
  graph::VariableOp var = loadedVariable(value, symbols);
  return var && var->hasAttr(kGatherOnceAttr);
}

bool splitsVariableOver(ModuleOp module, StringRef axis) {
  return llvm::any_of(
      module.getOps<graph::VariableOp>(), [&](graph::VariableOp v) {
        auto s = v->getAttrOfType<ShardingAttr>(kShardingAttr);
        return s && llvm::any_of(s.usedAxes(), [&](StringAttr a) {
                 return a.getValue() == axis;
               });
      });
}

ShardingAttr withoutAxis(ShardingAttr s, StringRef axis) {
  SmallVector<DimShardingAttr> dims;
  for (DimShardingAttr d : s.getDims()) {
    SmallVector<StringAttr> axes;
    for (StringAttr a : d.getAxes())
      if (a.getValue() != axis)
        axes.push_back(a);
    dims.push_back(DimShardingAttr::get(s.getContext(), axes,
                                        axes.empty() ? 1 : d.getGroups()));
  }
  return ShardingAttr::get(s.getContext(), dims, s.getPartial());
}

ShardingAttr withoutDp(ShardingAttr s) { return withoutAxis(s, "dp"); }

Operation *firstUser(Value v, bool skipWaits) {
  Operation *first = nullptr;
  for (Operation *user : v.getUsers())
    if (!(skipWaits && isa<WaitOp>(user)) &&
        (!first || user->isBeforeInBlock(first)))
      first = user;
  return first;
}

ShardingAttr getSharding(Value value) {
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    auto fn = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
    return fn ? fn.getArgAttrOfType<ShardingAttr>(arg.getArgNumber(), kShardingAttr)
              : ShardingAttr();
  }
  auto result = cast<OpResult>(value);
  auto all = result.getOwner()->getAttrOfType<ArrayAttr>(kResultShardingsAttr);
  if (!all || all.size() <= result.getResultNumber())
    return {};
  return dyn_cast<ShardingAttr>(all[result.getResultNumber()]);
}

void setSharding(Value value, ShardingAttr sharding) {
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    auto fn = cast<func::FuncOp>(arg.getOwner()->getParentOp());
    fn.setArgAttr(arg.getArgNumber(), kShardingAttr, sharding);
    return;
  }
  auto result = cast<OpResult>(value);
  Operation *op = result.getOwner();
  SmallVector<Attribute> all(op->getNumResults(), UnitAttr::get(op->getContext()));
  if (auto old = op->getAttrOfType<ArrayAttr>(kResultShardingsAttr))
    for (auto [i, a] : llvm::enumerate(old))
      all[i] = a;
  all[result.getResultNumber()] = sharding;
  op->setAttr(kResultShardingsAttr, ArrayAttr::get(op->getContext(), all));
}

int64_t axesSize(MeshAttr mesh, ArrayRef<StringAttr> axes) {
  int64_t n = 1;
  for (StringAttr a : axes)
    n *= mesh ? mesh.getSize(a.getValue()) : 1;
  return n;
}

/// The factor of a split dimension and the blocks it is viewed as: the
/// factor after those whose sizes multiply to the split's group count, or
/// the factor in which that count falls when it divides it.
static std::optional<std::pair<int64_t, int64_t>>
splitFactor(const ShardingRule &rule, ArrayRef<int64_t> factors,
            int64_t groups) {
  int64_t before = 1;
  for (int64_t f : factors) {
    if (before == groups)
      return std::make_pair(f, int64_t(1));
    int64_t size = rule.factors[f].size;
    if (size <= 0)
      return std::nullopt; // an empty dimension is never split
    if (groups % before == 0 && size % (groups / before) == 0 &&
        before * size > groups)
      return std::make_pair(f, groups / before);
    before *= size;
    if (before > groups)
      return std::nullopt;
  }
  return std::nullopt;
}

void assignFactors(const ShardingRule &rule, ArrayRef<ShardingAttr> shardings,
                   MeshAttr mesh, FactorAxes &axes, ArrayRef<bool> weakTensors,
                   StringAttr weakAxis, ArrayRef<bool> sequenceTensors) {
  axes.resize(rule.factors.size());
  SmallVector<const ShardingRule::TensorFactors *> tensors;
  for (auto &t : rule.operands)
    tensors.push_back(&t);
  for (auto &t : rule.results)
    tensors.push_back(&t);
  auto used = [&](StringAttr a) { return axes.uses(a); };
  // A sharding splits a dimension once: a factor sharing a dimension of
  // any of the op's tensors with a split factor stays whole (a convolution
  // gradient whose channels are [groups, channels per group], the groups
  // over dp and the channels over tp, would otherwise compute its channels
  // as groups of their own).
  auto sharesSplitDim = [&](int64_t f) {
    for (const ShardingRule::TensorFactors *t : tensors)
      for (const auto &dim : *t)
        if (llvm::is_contained(dim, f))
          for (int64_t other : dim)
            if (other != f && !axes.axes[other].empty())
              return true;
    return false;
  };
  for (int pass = 0; pass < 2; ++pass)
    for (auto [i, sharding] : llvm::enumerate(shardings)) {
      if (!sharding || i >= tensors.size())
        continue;
      bool weak = i < weakTensors.size() && weakTensors[i];
      bool sequence = i < sequenceTensors.size() && sequenceTensors[i];
      const ShardingRule::TensorFactors &t = *tensors[i];
      for (auto [d, dim] : llvm::enumerate(sharding.getDims())) {
        if (dim.getAxes().empty() || d >= t.size())
          continue;
        bool isWeak = weak && weakAxis && llvm::is_contained(dim.getAxes(), weakAxis);
        // A sequence split over tp yields to any other use of tp; the
        // axes before it (dp of a [batch x sequence] dimension) still apply.
        const auto *tpAt = llvm::find_if(dim.getAxes(), [](StringAttr a) {
          return a.getValue() == "tp";
        });
        bool isSequence = sequence && tpAt != dim.getAxes().end();
        if ((pass == 0) == (isWeak || isSequence))
          continue;
        auto split = splitFactor(rule, t[d], dim.getGroups());
        if (!split)
          continue;
        auto [f, g] = *split;
        if (rule.factors[f].kind == ShardingRule::Kind::kReplicated)
          continue;
        ArrayRef<StringAttr> want = dim.getAxes();
        if (isSequence && used(*tpAt))
          want = want.take_front(tpAt - dim.getAxes().begin());
        if (want.empty())
          continue;
        if (!axes.axes[f].empty()) {
          // A split that refines the factor's (more axes after the same
          // ones, e.g. ZeRO's dp inside tp) wins: less memory and work.
          ArrayRef<StringAttr> have = axes.axes[f];
          if (want.size() <= have.size() || want.take_front(have.size()) != have ||
              axes.groups[f] != g ||
              llvm::any_of(want.drop_front(have.size()), used))
            continue;
        } else if (llvm::any_of(want, used) || sharesSplitDim(f)) {
          continue;
        }
        if (rule.factors[f].size % (g * axesSize(mesh, want)) != 0)
          continue;
        axes.axes[f].assign(want.begin(), want.end());
        axes.groups[f] = g;
        axes.sequence[f] = isSequence && want.size() == dim.getAxes().size();
      }
    }
}

ShardingAttr project(const ShardingRule &rule,
                     const ShardingRule::TensorFactors &tensor,
                     const FactorAxes &axes, bool isResult, MLIRContext *ctx) {
  SmallVector<DimShardingAttr> dims;
  llvm::SmallDenseSet<int64_t> present;
  for (const auto &factors : tensor) {
    int64_t before = 1;
    DimShardingAttr dim = DimShardingAttr::get(ctx, {}, 1);
    for (int64_t f : factors) {
      present.insert(f);
      if (dim.getAxes().empty() && f < (int64_t)axes.axes.size() &&
          !axes.axes[f].empty())
        dim = DimShardingAttr::get(ctx, axes.axes[f], before * axes.groups[f]);
      before *= rule.factors[f].size;
    }
    dims.push_back(dim);
  }
  SmallVector<StringAttr> partial;
  if (isResult)
    for (auto [f, list] : llvm::enumerate(axes.axes))
      if (!list.empty() && !present.contains(f) &&
          rule.factors[f].kind == ShardingRule::Kind::kReduction)
        partial.append(list.begin(), list.end());
  return ShardingAttr::get(ctx, dims, partial);
}

bool isWideningCast(Operation *op) {
  auto c = dyn_cast<CastOp>(op);
  if (!c)
    return false;
  auto to = dyn_cast<FloatType>(getElementTypeOrSelf(c.getType()));
  auto from = dyn_cast<FloatType>(getElementTypeOrSelf(c.getOperand().getType()));
  return to && from && to.getWidth() > from.getWidth();
}

static ShardingAttr withPartial(ShardingAttr s, ArrayRef<StringAttr> partial) {
  return ShardingAttr::get(s.getContext(), s.getDims(), partial);
}

bool partialPassesThrough(Operation *op, ArrayRef<bool> partialOperands) {
  int count = llvm::count(partialOperands, true);
  if (count == 0)
    return false;
  if (isa<AddOp, SubOp>(op))
    return count == (int)partialOperands.size();
  if (isa<MulOp, MatmulOp>(op))
    return count == 1;
  if (isa<DivOp>(op))
    return count == 1 && partialOperands[0];
  if (isa<NegOp, ReshapeOp, TransposeOp, BroadcastInDimOp, ReduceSumOp>(op))
    return true;
  // A pad is linear in its operand when what it adds is zero (the
  // gradient of a slice: attention's key and value gradients under cp).
  if (auto pad = dyn_cast<PadOp>(op)) {
    if (pad.getMode() != "constant")
      return partialOperands[0] && !partialOperands[1];
    auto c = pad.getValue().getDefiningOp<ConstantOp>();
    auto dense = c ? dyn_cast<DenseElementsAttr>(c.getValue()) : DenseElementsAttr();
    return partialOperands[0] && !partialOperands[1] && dense &&
           isa<FloatType>(dense.getElementType()) && isSplatZero(dense);
  }
  if (auto c = dyn_cast<CastOp>(op))
    return isa<FloatType>(getElementTypeOrSelf(c.getType())) &&
           isa<FloatType>(getElementTypeOrSelf(c.getOperand().getType()));
  return false;
}

bool isSplatZero(DenseElementsAttr dense) {
  if (!dense || !dense.isSplat())
    return false;
  Attribute v = dense.getSplatValue<Attribute>();
  if (auto f = dyn_cast<FloatAttr>(v))
    return f.getValue().isZero();
  if (auto i = dyn_cast<IntegerAttr>(v))
    return i.getValue().isZero();
  return false;
}

static int64_t elementsOf(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t ? t.getNumElements() : 1;
}

FailureOr<OpShardings> propagateOp(ShardableOpInterface shardable,
                                   ArrayRef<ShardingAttr> operands,
                                   ArrayRef<bool> zeroStorage,
                                   ArrayRef<bool> soleReader, MeshAttr mesh,
                                   ArrayRef<bool> sequenceSplit) {
  Operation *op = shardable.getOperation();
  MLIRContext *ctx = op->getContext();
  ShardingRule rule = shardable.getShardingRule();

  SmallVector<ShardingAttr> known;
  SmallVector<bool> weak, partial;
  SmallVector<StringAttr> partialAxes;
  bool samePartial = true;
  for (auto [i, s] : llvm::enumerate(operands)) {
    known.push_back(s.withoutPartial());
    weak.push_back(i < zeroStorage.size() && zeroStorage[i]);
    partial.push_back(s.isPartial());
    if (s.isPartial()) {
      if (!partialAxes.empty() &&
          ArrayRef<StringAttr>(partialAxes) != s.getPartial())
        samePartial = false;
      if (partialAxes.empty() || !isa<AddOp, SubOp>(op)) {
        partialAxes.assign(s.getPartial().begin(), s.getPartial().end());
      } else {
        // A sum of values partial over different axes stays partial over
        // the axes they share; the others are resolved first.
        llvm::erase_if(partialAxes, [&](StringAttr a) {
          return !llvm::is_contained(s.getPartial(), a);
        });
        samePartial = !partialAxes.empty();
      }
    }
  }
  // A ZeRO split is storage, not a layout to compute in: an op reading
  // only a ZeRO-split parameter (a bias broadcast) gathers it first
  // rather than spreading the split to activations.
  if (operands.size() == 1 && weak[0])
    known[0] = ShardingAttr::replicated(ctx, known[0].getDims().size());
  OpShardings out;
  FactorAxes &axes = out.axes;
  assignFactors(rule, known, mesh, axes, weak, StringAttr::get(ctx, "dp"),
                sequenceSplit);
  // Special factors (a vocabulary) split only where the partitioner has
  // the op's vocab-parallel form, over one axis. A split max or min would
  // leave a partial max: keep those whole too.
  bool vocabParallel =
      isa<GatherOp, ScatterAddOp, CrossEntropyOp, CrossEntropyGradOp>(op);
  SmallVector<StringAttr> vocabAxes;
  for (auto [f, factor] : llvm::enumerate(rule.factors)) {
    if (factor.kind == ShardingRule::Kind::kSpecial && vocabParallel &&
        axes.axes[f].size() == 1 && axes.groups[f] == 1) {
      vocabAxes.append(axes.axes[f].begin(), axes.axes[f].end());
      continue;
    }
    if (factor.kind == ShardingRule::Kind::kSpecial ||
        (factor.kind == ShardingRule::Kind::kReduction &&
         factor.reduction != "sum"))
      axes.clear(f);
  }
  // A sequence split of a reduction makes partial sums to add over tp: a
  // bias's or a norm's gradient, far smaller than the activation, is
  // all-reduced; a sum nearly as large as the activation (an embedding
  // gradient scattered into its table) gathers the activation instead,
  // half the bytes of all-reducing the sum.
  for (auto [f, factor] : llvm::enumerate(rule.factors)) {
    if (!axes.sequence[f] || factor.kind != ShardingRule::Kind::kReduction)
      continue;
    int64_t activation = 0, sums = 0;
    for (auto [i, t] : llvm::enumerate(rule.operands))
      if (i < sequenceSplit.size() && sequenceSplit[i])
        activation = std::max(activation, elementsOf(op->getOperand(i)));
    for (auto [i, t] : llvm::enumerate(rule.results))
      if (!llvm::any_of(t, [&](const auto &dim) { return llvm::is_contained(dim, int64_t(f)); }))
        sums += elementsOf(op->getResult(i));
    if (2 * sums >= activation)
      axes.clear(f);
  }
  // A dimension shows one split: project() keeps its first split factor.
  // Another split factor of that dimension (a reshape's [3, 6, 6] -> [108]
  // with both 6s split) would be split in the tensors where it has a
  // dimension of its own and whole in this one: keep it whole everywhere.
  for (const auto &tensor : llvm::concat<const ShardingRule::TensorFactors>(
           rule.operands, rule.results))
    for (const auto &factors : tensor) {
      bool split = false;
      for (int64_t f : factors) {
        if (axes.axes[f].empty())
          continue;
        if (split)
          axes.clear(f);
        split = true;
      }
    }

  // Only a partial sum no other op reads passes through: another reader
  // needs it whole anyway, and resolving it once at its source beats
  // resolving each value derived from it.
  bool sole = true;
  for (auto [i, s] : llvm::enumerate(operands))
    if (s.isPartial() && !(i < soleReader.size() && soleReader[i]))
      sole = false;
  bool passPartial = samePartial && sole && partialPassesThrough(op, partial);
  if (passPartial)
    for (StringAttr a : partialAxes)
      if (axes.uses(a))
        passPartial = false;
  // A widening cast takes its sum over tp first, at the narrower type:
  // half the bytes on the link, as Megatron-LM's tensor-parallel
  // all-reduces travel at the compute type. The other axes' sums (dp's
  // weight gradients) still pass it and are reduced in f32, unless
  // grad_reduce = half has dtcc-shard-annotate lay them out before it.
  if (passPartial && isWideningCast(op)) {
    llvm::erase_if(partialAxes,
                   [](StringAttr a) { return a.getValue() == "tp"; });
    passPartial = !partialAxes.empty();
  }

  for (auto [i, t] : llvm::enumerate(rule.operands)) {
    ShardingAttr s = project(rule, t, axes, /*isResult=*/false, ctx);
    if (passPartial && i < partial.size() && partial[i])
      s = withPartial(s, partialAxes);
    out.ins.push_back(s);
  }
  for (auto &t : rule.results) {
    ShardingAttr s = project(rule, t, axes, /*isResult=*/true, ctx);
    // A lookup in a split table: each rank has the rows it owns, zeros
    // elsewhere, so the sum over the axis is the lookup.
    if (isa<GatherOp>(op) && !vocabAxes.empty())
      s = withPartial(s, vocabAxes);
    if (passPartial) {
      SmallVector<StringAttr> all(s.getPartial().begin(), s.getPartial().end());
      for (StringAttr a : partialAxes)
        if (!llvm::is_contained(all, a))
          all.push_back(a);
      s = withPartial(s, all);
    }
    out.outs.push_back(s);
    // The result keeps a sequence split when the factor splitting one of
    // its dimensions over tp came from one.
    bool sequence = false;
    for (const auto &factors : t)
      for (int64_t f : factors)
        if (!axes.axes[f].empty()) {
          sequence |= axes.sequence[f];
          break;
        }
    out.sequenceResults.push_back(sequence);
  }
  if (out.ins.size() != op->getNumOperands() ||
      out.outs.size() != op->getNumResults())
    return op->emitOpError("sharding rule does not match the op's operands "
                           "and results (internal error)");
  return out;
}

FailureOr<SmallVector<ReshardStep>> planReshard(ShardingAttr from,
                                                ShardingAttr to) {
  SmallVector<ReshardStep> steps;
  if (from == to)
    return steps;
  MLIRContext *ctx = from.getContext();
  SmallVector<SmallVector<StringAttr>> dims;
  SmallVector<int64_t> groups;
  for (DimShardingAttr d : from.getDims()) {
    dims.emplace_back(d.getAxes().begin(), d.getAxes().end());
    groups.push_back(d.getGroups());
  }
  SmallVector<StringAttr> partial(from.getPartial().begin(),
                                  from.getPartial().end());
  auto current = [&]() {
    SmallVector<DimShardingAttr> ds;
    for (auto [axes, g] : llvm::zip(dims, groups))
      ds.push_back(DimShardingAttr::get(ctx, axes, axes.empty() ? 1 : g));
    return ShardingAttr::get(ctx, ds, partial);
  };
  auto isPrefix = [](ArrayRef<StringAttr> a, ArrayRef<StringAttr> b) {
    return a.size() <= b.size() && a == b.take_front(a.size());
  };
  auto step = [&](ReshardStep::Kind kind, StringAttr axis, int64_t dim,
                  int64_t g, llvm::function_ref<void()> apply) {
    ReshardStep s{kind, axis, dim, g, current(), {}};
    apply();
    s.after = current();
    steps.push_back(s);
  };

  // 1. Partial sums: reduce-scattered onto a dimension the target splits
  // next by that axis, else all-reduced.
  for (StringAttr p : SmallVector<StringAttr>(partial)) {
    if (llvm::is_contained(to.getPartial(), p))
      continue;
    std::optional<int64_t> scatterDim;
    for (auto [d, target] : llvm::enumerate(to.getDims())) {
      ArrayRef<StringAttr> want = target.getAxes();
      if (isPrefix(dims[d], want) && want.size() > dims[d].size() &&
          want[dims[d].size()] == p &&
          (dims[d].empty() || groups[d] == target.getGroups())) {
        scatterDim = int64_t(d);
        break;
      }
    }
    if (scatterDim) {
      int64_t d = *scatterDim, g = to.getDims()[d].getGroups();
      step(ReshardStep::Kind::kReduceScatter, p, d, g, [&] {
        llvm::erase(partial, p);
        dims[d].push_back(p);
        groups[d] = g;
      });
    } else {
      step(ReshardStep::Kind::kAllReduce, p, -1, 1,
           [&] { llvm::erase(partial, p); });
    }
  }
  if (!llvm::all_of(to.getPartial(), [&](StringAttr a) {
        return llvm::is_contained(partial, a);
      }))
    return failure();
  // 2. The axes the target does not split this way, innermost first.
  const int64_t rank = to.getDims().size();
  for (int64_t d = 0; d < rank; ++d) {
    DimShardingAttr target = to.getDims()[d];
    while (!isPrefix(dims[d], target.getAxes()) ||
           (!dims[d].empty() && groups[d] != target.getGroups() &&
            !target.getAxes().empty()))
      step(ReshardStep::Kind::kAllGather, dims[d].back(), d, groups[d],
           [&] { dims[d].pop_back(); });
  }
  // 3. The axes the target adds.
  for (int64_t d = 0; d < rank; ++d) {
    DimShardingAttr target = to.getDims()[d];
    int64_t g = target.getGroups();
    for (StringAttr a : target.getAxes().drop_front(dims[d].size()))
      step(ReshardStep::Kind::kSlice, a, d, g, [&] {
        dims[d].push_back(a);
        groups[d] = g;
      });
  }
  return steps;
}

MeshAttr meshAttr(const runtime::MeshShape &shape, MLIRContext *ctx) {
  SmallVector<StringAttr> axes;
  SmallVector<int64_t> sizes;
  for (const runtime::MeshShape::Axis &a : shape.axes()) {
    axes.push_back(StringAttr::get(ctx, a.name));
    sizes.push_back(a.size);
  }
  return MeshAttr::get(ctx, axes, sizes);
}

} // namespace dtcc::shard
