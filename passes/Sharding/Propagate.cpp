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

namespace {

ShardingAttr replicatedFor(Value v) {
  return ShardingAttr::replicated(
      v.getContext(), cast<RankedTensorType>(v.getType()).getRank());
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
    SymbolTableCollection symbols;
    symbols_ = &symbols;
    PlanAttr plan = getPlan(module);
    sequenceParallel_ = plan && plan.getSequenceParallel();
    module.walk([&](ConstraintOp c) {
      if (c->hasAttr(kSequenceAttr))
        hiddenState_.try_emplace(c.getType(), c.getSharding());
    });
    for (auto fn : module.getOps<func::FuncOp>()) {
      for (BlockArgument arg : fn.getArguments())
        if (!getSharding(arg))
          setSharding(arg, replicatedFor(arg));
      for (Operation &op : fn.getBody().front())
        if (failed(visit(&op)))
          return signalPassFailure();
      refineSequenceReshapes(fn);
      refineBroadcasts(fn);
      refineDraws(fn);
    }
  }

private:
  /// The sharding `variable` is stored in (replicated when unannotated).
  ShardingAttr variableSharding(StringRef name) {
    auto var = symbols_->getSymbolTable(module_).lookup<graph::VariableOp>(name);
    if (auto s = var->getAttrOfType<ShardingAttr>(kShardingAttr))
      return s;
    return ShardingAttr::replicated(var.getContext(),
                                    var.getTensorType().getRank());
  }

  /// The layout of the parameter an optimizer updates with `gradient`
  /// (through the elementwise scaling and casts between them, the sums
  /// that accumulate micro-batches' or tied uses' terms, a pipeline's sum
  /// over pp and ZeRO's split), or null. A
  /// loaded parameter's is its variable's, known before propagation reaches
  /// the load (the optimizer's loads follow the backward pass).
  ShardingAttr parameterLayoutOf(Value gradient) {
    auto layout = [&](Value param) {
      if (auto load = param.getDefiningOp<graph::LoadOp>())
        return variableSharding(load.getVariable());
      return getSharding(param);
    };
    SmallVector<Value> work{gradient};
    llvm::SmallPtrSet<Operation *, 8> seen;
    while (!work.empty()) {
      Value v = work.pop_back_val();
      for (OpOperand &use : v.getUses()) {
        Operation *user = use.getOwner();
        // (Bounded: a sum over micro-batches chains one add per
        // micro-batch, 128 and more in a deep pipeline.)
        if (!seen.insert(user).second || seen.size() > 4096)
          continue;
        if (auto adam = dyn_cast<graph::AdamwOp>(user);
            adam && use.get() == adam.getGrad())
          return layout(adam.getParam());
        if (auto sgd = dyn_cast<graph::SgdOp>(user);
            sgd && use.get() == sgd.getGrad())
          return layout(sgd.getParam());
        // (A pipeline's sum over pp of a tied parameter's terms passes it
        // on too, and ZeRO's constraint that splits it for the update.)
        if (isa<graph::MulOp, graph::DivOp, graph::CastOp, graph::AddOp,
                AllReduceOp, ConstraintOp>(user) &&
            cast<ShapedType>(user->getResult(0).getType()).getShape() ==
                cast<ShapedType>(v.getType()).getShape())
          work.push_back(user->getResult(0));
      }
    }
    return {};
  }

  /// The layout of a value sent between pipeline stages: the batch split
  /// over dp, the sequence over cp; with sequence parallelism, a hidden
  /// state's sequence split over tp too (dimension 1, or the tokens of a
  /// [tokens, hidden] one), as the stages hold it; the rest whole.
  ShardingAttr transferSharding(Type type, bool *sequence = nullptr) {
    auto t = cast<RankedTensorType>(type);
    MLIRContext *ctx = type.getContext();
    SmallVector<DimShardingAttr> dims(t.getRank(), DimShardingAttr::get(ctx, {}, 1));
    int64_t dp = mesh_.getSize("dp"), tp = mesh_.getSize("tp");
    SmallVector<SmallVector<StringAttr>> axes(t.getRank());
    if (dp > 1 && t.getRank() > 0 && t.getDimSize(0) % dp == 0)
      axes[0].push_back(StringAttr::get(ctx, "dp"));
    // Under context parallelism, activations [B, S, ...] travel as each
    // rank's chunk of the sequence.
    int64_t cp = mesh_.getSize("cp");
    if (cp > 1 && t.getRank() > 1 && t.getDimSize(1) % cp == 0)
      axes[1].push_back(StringAttr::get(ctx, "cp"));
    if (sequenceParallel_ && tp > 1 && t.getRank() >= 2) {
      int64_t seq = t.getRank() >= 3 ? 1 : 0;
      if (t.getDimSize(seq) % (axesSize(mesh_, axes[seq]) * tp) == 0) {
        axes[seq].push_back(StringAttr::get(ctx, "tp"));
        if (sequence)
          *sequence = true;
      }
    }
    for (auto [d, list] : llvm::enumerate(axes))
      dims[d] = DimShardingAttr::get(ctx, list, 1);
    return ShardingAttr::get(ctx, dims, {});
  }


  void record(Operation *op, ArrayRef<ShardingAttr> ins,
              ArrayRef<ShardingAttr> outs) {
    MLIRContext *ctx = op->getContext();
    // Both in one new dictionary of the op's dialect attributes (each
    // setAttr builds one).
    NamedAttrList attrs(op->getDiscardableAttrDictionary());
    attrs.set(
        kInShardingsAttr,
        ArrayAttr::get(ctx, SmallVector<Attribute>(ins.begin(), ins.end())));
    if (!outs.empty())
      attrs.set(kResultShardingsAttr,
                ArrayAttr::get(
                    ctx, SmallVector<Attribute>(outs.begin(), outs.end())));
    op->setDiscardableAttrs(attrs.getDictionary(ctx));
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
        auto ins = use.getOwner()->getAttrOfType<ArrayAttr>(kInShardingsAttr);
        auto s = ins ? dyn_cast<ShardingAttr>(ins[use.getOperandNumber()]) : ShardingAttr();
        if (!s || s.isPartial() || (wanted && s != wanted)) {
          agree = false;
          break;
        }
        wanted = s;
      }
      if (!agree || wanted == current)
        continue;
      // New dimensions, and dimensions expanded from size 1 ([n, 1] ->
      // [n, d]), hold the same values at every index: any split of them is
      // the broadcast of the operand as it is.
      auto in = cast<RankedTensorType>(b.getOperand().getType());
      auto out = cast<RankedTensorType>(b.getType());
      auto copied = [&](int64_t d) {
        for (auto [i, m] : llvm::enumerate(b.getDims()))
          if (m == d)
            return in.getDimSize(i) == out.getDimSize(d);
        return false;
      };
      bool onlyNewDims = true, onlyAddsSplits = true;
      for (auto [d, dim] : llvm::enumerate(wanted.getDims()))
        if (copied(d) && dim != current.getDims()[d]) {
          onlyNewDims = false;
          // Only cp's splits: sequence parallelism's weak tp split must
          // stay on the broadcast's result, where its gathers are placed.
          onlyAddsSplits &= current.getDims()[d].getAxes().empty() &&
                            llvm::all_of(dim.getAxes(), [](StringAttr a) {
                              return a.getValue() == "cp";
                            });
        }
      if (current.isPartial())
        continue;
      ShardingAttr operand = cast<ShardingAttr>(
          cast<ArrayAttr>(b->getAttr(kInShardingsAttr))[0]);
      if (onlyNewDims) {
        record(b, {operand}, {wanted});
        continue;
      }
      // Splits of copied dimensions that the operand does not have yet
      // (a causal mask or position table meeting a sequence split over
      // cp): slice the smaller operand rather than the broadcast result.
      if (!onlyAddsSplits || operand.isPartial())
        continue;
      SmallVector<DimShardingAttr> dims(operand.getDims());
      for (auto [i, m] : llvm::enumerate(b.getDims()))
        if (in.getDimSize(i) == out.getDimSize(m))
          dims[i] = wanted.getDims()[m];
      record(b, {ShardingAttr::get(b.getContext(), dims, {})}, {wanted});
    }
  }

  /// A random draw has no operand to take a split from; when all its
  /// users want its result split the same way, each rank draws its own
  /// block of the single-device tensor (dtcc-shard-partition gives it its
  /// offsets) instead of drawing the whole and slicing it. Blocks that are
  /// not contiguous (a split in groups) are still sliced from the whole.
  void refineDraws(func::FuncOp fn) {
    fn.walk([&](graph::RandomOp r) {
      ShardingAttr wanted = commonUse(r.getResult());
      if (!wanted || wanted == getSharding(r.getResult()) ||
          llvm::any_of(wanted.getDims(),
                       [](DimShardingAttr d) { return d.getGroups() != 1; }))
        return;
      SmallVector<ShardingAttr> ins;
      for (Attribute a : r->getAttrOfType<ArrayAttr>(kInShardingsAttr))
        ins.push_back(cast<ShardingAttr>(a));
      record(r, ins, {wanted});
    });
  }

  /// `s` with its sequence split gathered (tp is innermost on the
  /// dimension a sequence split splits).
  static ShardingAttr gatherSequence(ShardingAttr s) {
    SmallVector<DimShardingAttr> dims;
    for (DimShardingAttr d : s.getDims()) {
      SmallVector<StringAttr> axes(d.getAxes());
      if (!axes.empty() && axes.back().getValue() == "tp")
        axes.pop_back();
      dims.push_back(DimShardingAttr::get(s.getContext(), axes,
                                          axes.empty() ? 1 : d.getGroups()));
    }
    return ShardingAttr::get(s.getContext(), dims, s.getPartial());
  }

  /// The one sharding every use of `v` requires, or null when they differ
  /// or one of them is partial.
  ShardingAttr commonUse(Value v) {
    ShardingAttr wanted;
    for (OpOperand &use : v.getUses()) {
      auto ins = use.getOwner()->getAttrOfType<ArrayAttr>(kInShardingsAttr);
      auto s = ins ? dyn_cast<ShardingAttr>(ins[use.getOperandNumber()]) : ShardingAttr();
      if (!s || s.isPartial() || (wanted && s != wanted))
        return {};
      wanted = s;
    }
    return wanted;
  }

  /// A reshape of a sequence-parallel activation whose users all want it
  /// gathered over tp (a weight gradient's [tokens, hidden] view) reshapes
  /// the gathered activation instead, so that a value gathered for one
  /// matmul (the input gradient's) is not gathered again for the other.
  void refineSequenceReshapes(func::FuncOp fn) {
    fn.walk([&](graph::ReshapeOp r) {
      if (!sequence_.contains(r.getOperand()))
        return;
      ShardingAttr wanted = commonUse(r.getResult());
      if (!wanted || llvm::any_of(wanted.getDims(), [](DimShardingAttr d) {
            return llvm::any_of(d.getAxes(), [](StringAttr a) {
              return a.getValue() == "tp";
            });
          }))
        return;
      ShardingAttr from = getSharding(r.getOperand());
      ShardingAttr gathered = gatherSequence(from);
      if (gathered == from || from.isPartial())
        return;
      FailureOr<OpShardings> res = propagateOp(
          cast<graph::ShardableOpInterface>(r.getOperation()), {gathered},
          {false}, {true}, mesh_);
      if (failed(res) || res->ins[0] != gathered || res->outs[0] != wanted)
        return;
      record(r, res->ins, res->outs);
      sequence_.erase(r.getResult());
    });
  }

  /// An embedding gradient (scatter_add) whose users all want its rows
  /// split (a vocab-parallel table) makes only this rank's rows; when its
  /// updates are split too (a partial sum), those rows stay partial.
  void refineScatters(func::FuncOp fn) {
    fn.walk([&](graph::ScatterAddOp s) {
      ShardingAttr current = getSharding(s.getResult());
      if (!current || s.getResult().use_empty())
        return;
      ShardingAttr wanted;
      for (OpOperand &use : s.getResult().getUses()) {
        auto ins = use.getOwner()->getAttrOfType<ArrayAttr>(kInShardingsAttr);
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
          !current.axesOf(axis).empty() ||
          llvm::is_contained(current.getPartial(), wanted.axesOf(axis)[0]))
        return;
      // Its operands stay as they are: the updates and indices are whole
      // or split by their index dimensions, as propagation found them.
      record(s, llvm::to_vector(llvm::map_range(
                    cast<ArrayAttr>(s->getAttr(kInShardingsAttr)),
                    [](Attribute a) { return cast<ShardingAttr>(a); })),
             {ShardingAttr::get(s.getContext(), wanted.getDims(),
                                current.getPartial())});
    });
  }

  /// An embedding gradient (scatter_add) whose parameter is split by rows
  /// over a model axis (a vocab-parallel table: tp) makes only this rank's
  /// rows, the partitioner's vocab-parallel scatter (indices outside them
  /// masked), from all of the updates: updates split over that axis
  /// (sequence parallelism's tokens) are gathered first. Otherwise every
  /// rank sums the whole table, which the clipping norm and the casts then
  /// read whole (or tp all-reduces, under sequence parallelism) before the
  /// optimizer slices its rows. Its users, the norm's square and the
  /// casts, rarely want the split themselves, which refineScatters needs.
  void splitScatterRows(graph::ScatterAddOp s, OpShardings &result) {
    ShardingAttr param = parameterLayoutOf(s.getResult());
    if (!param)
      return;
    const int64_t axis = s.getAxis();
    DimShardingAttr rows = withoutDp(param).getDims()[axis];
    ShardingAttr out = result.outs[0];
    if (rows.getAxes().size() != 1 || rows.getGroups() != 1 ||
        !out.axesOf(axis).empty())
      return;
    MLIRContext *ctx = s.getContext();
    StringAttr row = rows.getAxes()[0];
    // `x` neither split nor partial over `row`.
    auto drop = [&](ShardingAttr x) {
      SmallVector<StringAttr> partial;
      for (StringAttr a : x.getPartial())
        if (a != row)
          partial.push_back(a);
      return ShardingAttr::get(ctx, withoutAxis(x, row.getValue()).getDims(),
                               partial);
    };
    for (ShardingAttr &in : result.ins)
      in = drop(in);
    ShardingAttr whole = drop(out);
    SmallVector<DimShardingAttr> dims(whole.getDims());
    dims[axis] = DimShardingAttr::get(ctx, {row}, 1);
    result.outs[0] = ShardingAttr::get(ctx, dims, whole.getPartial());
    result.sequenceResults[0] = false;
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
      if (c->hasAttr(kSequenceAttr))
        sequence_.insert(c.getResult());
      return success();
    }
    // Pipeline transfers carry values between stages in one layout
    // (transferSharding).
    if (isa<SendOp, WaitOp>(op)) {
      for (Value v : op->getOperands())
        ins.push_back(transferSharding(v.getType()));
      record(op, ins, {});
      return success();
    }
    if (auto recv = dyn_cast<RecvOp>(op)) {
      bool sequence = false;
      record(op, {}, {transferSharding(recv.getType(), &sequence)});
      if (sequence)
        sequence_.insert(recv.getResult());
      return success();
    }
    // A pipeline's all-reduce over pp: of whole values, in one layout on
    // every stage. A gradient several stages contribute to (tied
    // embeddings) is summed in its parameter's layout, which every stage's
    // optimizer shares, whatever layout each stage's own term has.
    if (auto ar = dyn_cast<AllReduceOp>(op)) {
      ShardingAttr s = parameterLayoutOf(ar.getResult());
      if (!s)
        s = getSharding(ar.getOperand()).withoutPartial();
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
      for (Value r : op->getResults()) {
        // A splat is the same in every layout: one that becomes a
        // parameter's gradient (a pipeline stage's zero term of a tied
        // parameter's sum over pp, the 1/m of a micro-batch mean) is made
        // in the parameter's layout, not whole (a 250880 x 14336 embedding
        // gradient is 14 GB in fp32).
        ShardingAttr s;
        if (auto c = dyn_cast<graph::ConstantOp>(op))
          if (auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
              dense && dense.isSplat())
            s = parameterLayoutOf(r);
        outs.push_back(s ? s.withoutPartial() : replicatedFor(r));
      }
      record(op, {}, outs);
      return success();
    }
    auto shardable = dyn_cast<graph::ShardableOpInterface>(op);
    if (!shardable)
      return op->emitOpError("has no sharding rule: it cannot be placed on "
                             "the mesh ")
             << mesh_;
    SmallVector<ShardingAttr> operands;
    SmallVector<bool> weak, soleReader, sequence;
    for (Value v : op->getOperands()) {
      sequence.push_back(sequence_.contains(v));
      ShardingAttr s = getSharding(v);
      if (!s)
        return op->emitOpError("operand has no sharding (internal error)");
      // An optimizer updates its parameter in the parameter's layout: a
      // gradient's sequence split is gathered once rather than the
      // parameter and its state after the update.
      if (sequence.back() && isa<graph::AdamwOp, graph::SgdOp>(op)) {
        s = gatherSequence(s);
        sequence.back() = false;
      }
      // A ZeRO split yields to any other use of the axis. A parameter's
      // use outside the update sees the parameter as ZeRO found it: its dp
      // split is storage, gathered for the use, and the rest of its layout
      // (a tp split) holds as it would without ZeRO.
      bool zero = loadsZeroVariable(v, symbols_);
      if (zero && loadedVariable(v, symbols_).getTrainable() &&
          !isa<graph::AdamwOp, graph::SgdOp>(op)) {
        s = withoutDp(s);
        zero = false;
      }
      operands.push_back(s);
      weak.push_back(zero);
      soleReader.push_back(llvm::all_of(v.getUsers(),
                                        [&](Operation *u) { return u == op; }));
    }
    FailureOr<OpShardings> result =
        propagateOp(shardable, operands, weak, soleReader, mesh_, sequence);
    if (failed(result))
      return failure();
    // A partial sum over tp of the hidden state (the input gradient of a
    // column-parallel matmul in the backward pass) that this op resolves
    // is scattered along the sequence, as annotate's constraints scatter
    // the forward pass's, when the op can take the sequence split.
    bool retry = false;
    for (auto [i, v] : llvm::enumerate(op->getOperands())) {
      auto it = hiddenState_.find(v.getType());
      if (it == hiddenState_.end() || result->ins[i].isPartial() ||
          !llvm::any_of(operands[i].getPartial(), [](StringAttr a) {
            return a.getValue() == "tp";
          }))
        continue;
      operands[i] = it->second;
      sequence[i] = true;
      retry = true;
    }
    if (retry) {
      FailureOr<OpShardings> scattered =
          propagateOp(shardable, operands, weak, soleReader, mesh_, sequence);
      if (failed(scattered))
        return failure();
      result = std::move(scattered);
    }
    if (auto scatter = dyn_cast<graph::ScatterAddOp>(op))
      splitScatterRows(scatter, *result);
    record(op, result->ins, result->outs);
    for (auto [r, isSequence] :
         llvm::zip(op->getResults(), result->sequenceResults))
      if (isSequence)
        sequence_.insert(r);
    return success();
  }

  MeshAttr mesh_;
  /// The module's symbols (runOnOperation's; the pass adds none).
  SymbolTableCollection *symbols_ = nullptr;
  ModuleOp module_;
  /// Values whose split over tp is a sequence-parallel split: the results
  /// of dtcc-shard-annotate's sequence constraints and of ops whose factors
  /// took that split from them.
  llvm::DenseSet<Value> sequence_;
  bool sequenceParallel_ = false;
  /// The hidden state's types and their sequence splits (annotate's
  /// sequence constraints).
  llvm::DenseMap<Type, ShardingAttr> hiddenState_;
};

} // namespace
