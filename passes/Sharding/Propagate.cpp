//===- Propagate.cpp - every op's sharding from its rule ------------------===//
//
// A forward walk in program order: by the time an op is visited, the
// shardings of its operands are known, so its factors take their axes and
// its results follow (GSPMD's forward propagation). Annotations (arguments,
// variables, constraints) are the fixed points.
//
//===----------------------------------------------------------------------===//

#include "passes/Sharding/Passes.h"
#include "passes/Sharding/ShardingUtils.h"

#include "mlir/IR/Builders.h"

namespace dtcc::shard {
#define GEN_PASS_DEF_SHARDPROPAGATE
#include "passes/Sharding/Passes.h.inc"
} // namespace dtcc::shard

using namespace mlir;
using namespace dtcc;
using namespace dtcc::shard;
using graph::ShardingRule;

namespace {

ShardingAttr replicatedFor(Value v) {
  return ShardingAttr::replicated(
      v.getContext(), cast<RankedTensorType>(v.getType()).getRank());
}

ShardingAttr withPartial(ShardingAttr s, ArrayRef<StringAttr> partial) {
  return ShardingAttr::get(s.getContext(), s.getDims(), partial);
}

/// Which operands `op` is linear in, and how: a partial sum may pass
/// through when every partial operand is one the op is linear in and the
/// pattern holds (add/sub: all operands equally partial; mul, matmul: one
/// operand partial; div: the numerator).
bool partialPassesThrough(Operation *op, ArrayRef<bool> partialOperands) {
  int count = llvm::count(partialOperands, true);
  if (count == 0)
    return false;
  if (isa<graph::AddOp, graph::SubOp>(op))
    return count == (int)partialOperands.size();
  if (isa<graph::MulOp, graph::MatmulOp>(op))
    return count == 1;
  if (isa<graph::DivOp>(op))
    return count == 1 && partialOperands[0];
  if (isa<graph::NegOp, graph::ReshapeOp, graph::TransposeOp,
          graph::BroadcastInDimOp, graph::ReduceSumOp>(op))
    return true;
  if (auto c = dyn_cast<graph::CastOp>(op))
    return isa<FloatType>(getElementTypeOrSelf(c.getType())) &&
           isa<FloatType>(getElementTypeOrSelf(c.getOperand().getType()));
  return false;
}

struct ShardPropagatePass
    : public dtcc::shard::impl::ShardPropagateBase<ShardPropagatePass> {
  void runOnOperation() final {
    ModuleOp module = getOperation();
    mesh_ = module->getAttrOfType<MeshAttr>(kMeshAttr);
    if (!mesh_) {
      module.emitError("expected a module with a dshard.mesh "
                       "(run dtcc-shard-annotate first)");
      return signalPassFailure();
    }
    module_ = module;
    for (auto fn : module.getOps<func::FuncOp>()) {
      for (BlockArgument arg : fn.getArguments())
        if (!getSharding(arg))
          setSharding(arg, replicatedFor(arg));
      for (Operation &op : fn.getBody().front())
        if (failed(visit(&op)))
          return signalPassFailure();
      refineBroadcasts(fn);
    }
  }

private:
  /// The sharding `variable` is stored in (replicated when unannotated).
  ShardingAttr variableSharding(StringRef name) {
    auto var = module_.lookupSymbol<graph::VariableOp>(name);
    if (auto s = var->getAttrOfType<ShardingAttr>(kShardingAttr))
      return s;
    return ShardingAttr::replicated(var.getContext(),
                                    var.getTensorType().getRank());
  }

  /// The layout of a value sent between pipeline stages.
  ShardingAttr transferSharding(Type type) {
    auto t = cast<RankedTensorType>(type);
    MLIRContext *ctx = type.getContext();
    SmallVector<DimShardingAttr> dims(t.getRank(), DimShardingAttr::get(ctx, {}, 1));
    int64_t dp = mesh_.getSize("dp");
    if (dp > 1 && t.getRank() > 0 && t.getDimSize(0) % dp == 0)
      dims[0] = DimShardingAttr::get(ctx, {StringAttr::get(ctx, "dp")}, 1);
    return ShardingAttr::get(ctx, dims, {});
  }

  /// Whether `v` is a load of a variable split for ZeRO: its split yields to
  /// any other use of the axis.
  bool isZeroStorage(Value v) {
    auto load = v.getDefiningOp<graph::LoadOp>();
    if (!load)
      return false;
    auto var = module_.lookupSymbol<graph::VariableOp>(load.getVariable());
    return var && var->hasAttr("dshard.zero");
  }

  void record(Operation *op, ArrayRef<ShardingAttr> ins,
              ArrayRef<ShardingAttr> outs) {
    MLIRContext *ctx = op->getContext();
    op->setAttr("dshard.in_shardings",
                ArrayAttr::get(ctx, SmallVector<Attribute>(ins.begin(), ins.end())));
    if (!outs.empty())
      op->setAttr(kResultShardingsAttr,
                  ArrayAttr::get(ctx, SmallVector<Attribute>(outs.begin(), outs.end())));
  }

  /// A broadcast's new dimensions have no sharding to inherit going
  /// forward; when all its users want them split the same way, it produces
  /// them split (each rank broadcasts its block) instead of being sliced.
  void refineBroadcasts(func::FuncOp fn) {
    refineScatters(fn);
    SmallVector<graph::BroadcastInDimOp> broadcasts;
    fn.walk([&](graph::BroadcastInDimOp b) { broadcasts.push_back(b); });
    for (auto b : llvm::reverse(broadcasts)) {
      ShardingAttr current = getSharding(b.getResult());
      ShardingAttr wanted;
      bool agree = !b.getResult().use_empty();
      for (OpOperand &use : b.getResult().getUses()) {
        auto ins = use.getOwner()->getAttrOfType<ArrayAttr>("dshard.in_shardings");
        auto s = ins ? dyn_cast<ShardingAttr>(ins[use.getOperandNumber()]) : ShardingAttr();
        if (!s || s.isPartial() || (wanted && s != wanted)) {
          agree = false;
          break;
        }
        wanted = s;
      }
      if (!agree || wanted == current)
        continue;
      ArrayRef<int64_t> mapped = b.getDims();
      bool onlyNewDims = true;
      for (auto [d, dim] : llvm::enumerate(wanted.getDims()))
        if (llvm::is_contained(mapped, (int64_t)d) &&
            dim != current.getDims()[d])
          onlyNewDims = false;
      if (onlyNewDims && !current.isPartial())
        record(b,
               {cast<ShardingAttr>(
                   cast<ArrayAttr>(b->getAttr("dshard.in_shardings"))[0])},
               {wanted});
    }
  }

  /// An embedding gradient (scatter_add) whose users all want its rows
  /// split (a vocab-parallel table) makes only this rank's rows.
  void refineScatters(func::FuncOp fn) {
    fn.walk([&](graph::ScatterAddOp s) {
      ShardingAttr current = getSharding(s.getResult());
      if (!current || current.isPartial() || s.getResult().use_empty())
        return;
      ShardingAttr wanted;
      for (OpOperand &use : s.getResult().getUses()) {
        auto ins = use.getOwner()->getAttrOfType<ArrayAttr>("dshard.in_shardings");
        auto w = ins ? dyn_cast<ShardingAttr>(ins[use.getOperandNumber()]) : ShardingAttr();
        if (!w || w.isPartial() || (wanted && w != wanted))
          return;
        wanted = w;
      }
      int64_t axis = s.getAxis();
      for (auto [d, dim] : llvm::enumerate(wanted.getDims()))
        if ((int64_t)d != axis && dim != current.getDims()[d])
          return;
      if (wanted.axesOf(axis).size() != 1 || wanted.getDims()[axis].getGroups() != 1 ||
          !current.axesOf(axis).empty())
        return;
      // Its operands stay as they are: the updates and indices are whole.
      record(s, llvm::to_vector(llvm::map_range(
                    cast<ArrayAttr>(s->getAttr("dshard.in_shardings")),
                    [](Attribute a) { return cast<ShardingAttr>(a); })),
             {wanted});
    });
  }

  LogicalResult visit(Operation *op) {
    SmallVector<ShardingAttr> ins, outs;
    if (auto load = dyn_cast<graph::LoadOp>(op)) {
      record(op, {}, {variableSharding(load.getVariable())});
      return success();
    }
    if (auto store = dyn_cast<graph::StoreOp>(op)) {
      record(op, {variableSharding(store.getVariable())}, {});
      return success();
    }
    if (auto c = dyn_cast<ConstraintOp>(op)) {
      record(op, {c.getSharding()}, {c.getSharding()});
      return success();
    }
    // Pipeline transfers carry values between stages in one layout: the
    // batch split over dp, the rest whole.
    if (isa<SendOp, WaitOp>(op)) {
      for (Value v : op->getOperands())
        ins.push_back(transferSharding(v.getType()));
      record(op, ins, {});
      return success();
    }
    if (auto recv = dyn_cast<RecvOp>(op)) {
      record(op, {}, {transferSharding(recv.getType())});
      return success();
    }
    // A pipeline's all-reduce over pp: of whole values.
    if (auto ar = dyn_cast<AllReduceOp>(op)) {
      ShardingAttr s = getSharding(ar.getOperand()).withoutPartial();
      record(op, {s}, {s});
      return success();
    }
    if (isa<func::ReturnOp>(op)) {
      for (Value v : op->getOperands())
        ins.push_back(replicatedFor(v));
      record(op, ins, {});
      return success();
    }
    if (op->getNumOperands() == 0) { // constants, iota: replicated sources
      for (Value r : op->getResults())
        outs.push_back(replicatedFor(r));
      record(op, {}, outs);
      return success();
    }
    auto shardable = dyn_cast<graph::ShardableOpInterface>(op);
    if (!shardable)
      return op->emitOpError("has no sharding rule: it cannot be placed on "
                             "the mesh ")
             << mesh_;
    ShardingRule rule = shardable.getShardingRule();

    SmallVector<ShardingAttr> known;
    SmallVector<bool> weak, partial;
    SmallVector<StringAttr> partialAxes;
    bool samePartial = true;
    for (Value v : op->getOperands()) {
      ShardingAttr s = getSharding(v);
      if (!s)
        return op->emitOpError("operand has no sharding (internal error)");
      known.push_back(s.withoutPartial());
      weak.push_back(isZeroStorage(v));
      partial.push_back(s.isPartial());
      if (s.isPartial()) {
        if (!partialAxes.empty() &&
            ArrayRef<StringAttr>(partialAxes) != s.getPartial())
          samePartial = false;
        if (partialAxes.empty() || !isa<graph::AddOp, graph::SubOp>(op)) {
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
    if (op->getNumOperands() == 1 && weak[0])
      known[0] = ShardingAttr::replicated(op->getContext(), known[0].getDims().size());
    FactorAxes axes;
    assignFactors(rule, known, mesh_, axes, weak,
                  StringAttr::get(op->getContext(), "dp"));
    // Special factors (a vocabulary split) need their op's distributed form,
    // which only tensor parallelism asks for: keep them whole.
    // A split max or min would leave a partial max: keep those whole too.
    // Special factors (a vocabulary) split only where the partitioner has
    // the op's vocab-parallel form, over one axis.
    bool vocabParallel = isa<graph::GatherOp, graph::ScatterAddOp,
                             graph::CrossEntropyOp, graph::CrossEntropyGradOp>(op);
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

    // Only a partial sum no other op reads passes through: another reader
    // needs it whole anyway, and resolving it once at its source beats
    // resolving each value derived from it.
    bool soleReader = llvm::all_of(op->getOperands(), [&](Value v) {
      return !getSharding(v).isPartial() ||
             llvm::all_of(v.getUsers(), [&](Operation *u) { return u == op; });
    });
    bool passPartial =
        samePartial && soleReader && partialPassesThrough(op, partial);
    if (passPartial)
      for (StringAttr a : partialAxes)
        if (axes.uses(a))
          passPartial = false;

    MLIRContext *ctx = op->getContext();
    for (auto [i, t] : llvm::enumerate(rule.operands)) {
      ShardingAttr s = project(rule, t, axes, /*isResult=*/false, ctx);
      if (passPartial && partial[i])
        s = withPartial(s, partialAxes);
      ins.push_back(s);
    }
    for (auto &t : rule.results) {
      ShardingAttr s = project(rule, t, axes, /*isResult=*/true, ctx);
      // A lookup in a split table: each rank has the rows it owns, zeros
      // elsewhere, so the sum over the axis is the lookup.
      if (isa<graph::GatherOp>(op) && !vocabAxes.empty())
        s = withPartial(s, vocabAxes);
      if (passPartial) {
        SmallVector<StringAttr> all(s.getPartial().begin(), s.getPartial().end());
        for (StringAttr a : partialAxes)
          if (!llvm::is_contained(all, a))
            all.push_back(a);
        s = withPartial(s, all);
      }
      outs.push_back(s);
    }
    if (ins.size() != op->getNumOperands() || outs.size() != op->getNumResults())
      return op->emitOpError("sharding rule does not match the op's operands "
                             "and results (internal error)");
    record(op, ins, outs);
    return success();
  }

  MeshAttr mesh_;
  ModuleOp module_;
};

} // namespace
