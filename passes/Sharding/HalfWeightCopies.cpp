//===- HalfWeightCopies.cpp - compute-type copies of master weights -------===//
//
// Mixed precision reads each fp32 master weight through a cast to the
// compute type. A persistent copy in that type, which the update writes,
// replaces the casts: dtcc-shard-annotate makes them for ZeRO-1/2 over dp
// (Megatron-LM's distributed optimizer), and dtcc-shard-half-weight-copies
// for every mixed-precision program, CPU or CUDA (one device or a mesh),
// where lowering folds the copy's rounding into the AdamW kernel (the
// step's casts re-read every master from memory).
//
//===----------------------------------------------------------------------===//

#include "passes/Sharding/Passes.h"
#include "passes/Sharding/ShardingUtils.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringMap.h"

namespace dtcc::shard {
#define GEN_PASS_DEF_SHARDHALFWEIGHTCOPIES
#include "passes/Sharding/Passes.h.inc"
} // namespace dtcc::shard

using namespace mlir;
using namespace dtcc;
using namespace dtcc::shard;

namespace dtcc::shard {

/// Megatron-LM's distributed optimizer: every fp32 master weight `W`
/// that the step's functions read only through casts to one half type
/// (mixed precision's) -- besides the optimizer op that updates it --
/// gets a persistent copy `W/half` of that type and of W's layout (its
/// pipeline stage too). The casts become loads of the copy, and after the
/// store of W's update the new value is rounded and stored into it, so
/// W itself is read by the optimizer alone and ZeRO may split it over dp
/// with the optimizer state (annotateZero); the copy's dp-whole layout
/// makes that store an all-gather in the half type. The copy starts as
/// W's initial value rounded (`dgraph.rounded_from`, filled by the
/// runtime): the same values the casts gave. @main (inference) keeps
/// reading W, and a weight that has a copy already keeps it.
void keepHalfWeightCopies(ModuleOp module, SymbolTable &symbols) {
  MLIRContext *ctx = module.getContext();
  // Each updated parameter and the stores of its new value (one per
  // pipeline stage that updates a weight several stages share).
  llvm::MapVector<Operation *, SmallVector<graph::StoreOp>> updates;
  module.walk([&](graph::StoreOp store) {
    Operation *def = store.getValue().getDefiningOp();
    if (!isa_and_nonnull<graph::AdamwOp, graph::SgdOp>(def) ||
        store.getValue() != def->getResult(0))
      return;
    if (auto var = symbols.lookup<graph::VariableOp>(store.getVariable()))
      updates[var].push_back(store);
  });
  // The training functions' loads: @main (inference, which a program on
  // one device keeps) reads the masters, which stay up to date.
  llvm::StringMap<SmallVector<graph::LoadOp>> loads;
  module.walk([&](graph::LoadOp load) {
    auto fn = load->getParentOfType<func::FuncOp>();
    if (!fn || fn.getSymName() != "main")
      loads[load.getVariable()].push_back(load);
  });
  Operation *lastVariable = nullptr;
  for (auto var : module.getOps<graph::VariableOp>())
    lastVariable = var;
  for (auto &[op, stores] : updates) {
    auto var = cast<graph::VariableOp>(op);
    if (!var.getTrainable() || !var.getTensorType().getElementType().isF32() ||
        var->hasAttr(kHalfCopyAttr))
      continue;
    FloatType half;
    SmallVector<graph::CastOp> casts;
    bool onlyCasts = true;
    for (graph::LoadOp load : loads.lookup(var.getSymName())) {
      for (OpOperand &use : load->getUses()) {
        Operation *user = use.getOwner();
        if (isa<graph::AdamwOp, graph::SgdOp>(user) &&
            use.getOperandNumber() == 0)
          continue;
        auto c = dyn_cast<graph::CastOp>(user);
        auto to = c ? dyn_cast<FloatType>(getElementTypeOrSelf(c.getType()))
                    : FloatType();
        if (!to || to.getWidth() != 16 || (half && to != half)) {
          onlyCasts = false;
          break;
        }
        half = to;
        casts.push_back(c);
      }
      if (!onlyCasts)
        break;
    }
    if (!onlyCasts || casts.empty())
      continue;
    std::string name = (var.getSymName() + "/half").str();
    if (symbols.lookup(name))
      continue; // a model's own variable of that name
    RankedTensorType type = var.getTensorType().clone(half);
    OpBuilder vb(ctx);
    vb.setInsertionPointAfter(lastVariable);
    auto copy = graph::VariableOp::create(
        vb, NameLoc::get(vb.getStringAttr(name), var.getLoc()), name, type,
        /*initial_value=*/ElementsAttr(), /*trainable=*/false);
    lastVariable = copy;
    symbols.insert(copy);
    copy->setAttr(graph::kRoundedFromAttr,
                  FlatSymbolRefAttr::get(var.getSymNameAttr()));
    for (StringRef keep : {StringRef(kShardingAttr), StringRef(kStageAttr)})
      if (Attribute a = var->getAttr(keep))
        copy->setAttr(keep, a);
    // After partitioning (the exec phase on a mesh) W holds its rank's part
    // and names the whole tensor's type: so does the copy.
    if (auto global = var->getAttrOfType<TypeAttr>(kGlobalTypeAttr))
      copy->setAttr(
          kGlobalTypeAttr,
          TypeAttr::get(cast<RankedTensorType>(global.getValue()).clone(half)));
    // The stage functions that read the copy: a stage that updates a
    // shared weight without reading it (a tied embedding's middle
    // stages) keeps no copy up to date.
    llvm::SmallPtrSet<Operation *, 4> readers;
    for (graph::CastOp c : casts)
      readers.insert(c->getParentOfType<func::FuncOp>());
    for (graph::CastOp c : casts) {
      OpBuilder b(c);
      auto load = graph::LoadOp::create(b, c.getLoc(), type, name);
      load->setDiscardableAttrs(c->getDiscardableAttrDictionary());
      c.getResult().replaceAllUsesWith(load.getResult());
      Value master = c.getOperand();
      c.erase();
      if (master.use_empty())
        master.getDefiningOp()->erase();
    }
    for (graph::StoreOp update : stores) {
      auto fn = update->getParentOfType<func::FuncOp>();
      if (fn->hasAttr(kStageAttr) && !readers.contains(fn))
        continue;
      OpBuilder b(update->getBlock(), std::next(update->getIterator()));
      auto rounded =
          graph::CastOp::create(b, update.getLoc(), type, update.getValue());
      rounded->setDiscardableAttrs(update->getDiscardableAttrDictionary());
      auto store = graph::StoreOp::create(b, update.getLoc(), rounded, name);
      store->setDiscardableAttrs(update->getDiscardableAttrDictionary());
    }
    var->setAttr(kHalfCopyAttr, FlatSymbolRefAttr::get(copy.getSymNameAttr()));
  }
}

} // namespace dtcc::shard

namespace {

struct ShardHalfWeightCopiesPass
    : public dtcc::shard::impl::ShardHalfWeightCopiesBase<
          ShardHalfWeightCopiesPass> {
  void runOnOperation() final {
    SymbolTable symbols(getOperation());
    keepHalfWeightCopies(getOperation(), symbols);
  }
};

} // namespace
