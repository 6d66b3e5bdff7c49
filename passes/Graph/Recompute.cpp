//===- Recompute.cpp - attention cores and per-stage recomputation --------===//
//
// Selective recomputation's attention cores, the summary of what a module
// recomputes, and dtcc-graph-recompute-layers, which keeps full
// recomputation for the first K layers of each pipeline stage only.
//
//===----------------------------------------------------------------------===//

#include "passes/Graph/Recompute.h"

#include "passes/Graph/Passes.h"
#include "dialects/Shard/IR/ShardOps.h"

#include "mlir/IR/Dominance.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/CSE.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <map>
#include <set>

namespace dtcc::graph {
#define GEN_PASS_DEF_RECOMPUTELAYERS
#include "passes/Graph/Passes.h.inc"
} // namespace dtcc::graph

using namespace mlir;

namespace dtcc::graph {

namespace {

int64_t elementsOf(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t ? t.getNumElements() : -1;
}

/// The matmul of two activations that the scores `v` come from, through ops
/// of the scores' size (scale, mask, select, cast, reshape); null if none
/// within a few ops.
Operation *scoresMatmul(Value v, const llvm::DenseSet<Value> &activations,
                        int64_t elements, int depth) {
  Operation *def = v.getDefiningOp();
  if (!def || depth > 8 || def->getNumRegions() || elementsOf(v) != elements)
    return nullptr;
  if (auto mm = dyn_cast<MatmulOp>(def))
    return activations.contains(mm.getLhs()) && activations.contains(mm.getRhs())
               ? def
               : nullptr;
  for (Value operand : def->getOperands())
    if (activations.contains(operand))
      if (Operation *m = scoresMatmul(operand, activations, elements, depth + 1))
        return m;
  return nullptr;
}

/// The matmul that takes the probabilities `v` (through ops of their size:
/// dropout, cast, reshape) with another activation; null if none.
Operation *valuesMatmul(Value v, const llvm::DenseSet<Value> &activations,
                        int64_t elements, int depth) {
  for (OpOperand &use : v.getUses()) {
    Operation *user = use.getOwner();
    if (auto mm = dyn_cast<MatmulOp>(user)) {
      Value other = use.getOperandNumber() == 0 ? mm.getRhs() : mm.getLhs();
      if (activations.contains(other))
        return user;
      continue;
    }
    if (depth >= 4 || user->getNumRegions() || user->getNumResults() == 0)
      continue;
    Value r = user->getResult(0);
    if (elementsOf(r) != elements || !activations.contains(r))
      continue;
    if (Operation *m = valuesMatmul(r, activations, elements, depth + 1))
      return m;
  }
  return nullptr;
}

/// "0-3, 5" for {0, 1, 2, 3, 5}.
std::string rangesText(const std::set<int64_t> &layers) {
  std::string out;
  for (auto it = layers.begin(); it != layers.end();) {
    int64_t first = *it, last = first;
    for (++it; it != layers.end() && *it == last + 1; ++it)
      last = *it;
    out += (out.empty() ? "" : ", ") + std::to_string(first) +
           (last > first ? "-" + std::to_string(last) : "");
  }
  return out;
}

} // namespace

SmallVector<SmallVector<Operation *>>
findAttentionCores(ArrayRef<Operation *> forward,
                   const llvm::DenseSet<Value> &activations) {
  llvm::DenseMap<Operation *, size_t> position;
  for (auto [i, op] : llvm::enumerate(forward))
    position[op] = i;
  SmallVector<SmallVector<Operation *>> cores;
  llvm::SmallPtrSet<Operation *, 8> ends;
  for (Operation *op : forward) {
    auto softmax = dyn_cast<SoftmaxOp>(op);
    if (!softmax || !activations.contains(softmax.getResult()))
      continue;
    int64_t n = elementsOf(softmax.getResult());
    Operation *first = scoresMatmul(softmax.getOperand(), activations, n, 0);
    Operation *last = valuesMatmul(softmax.getResult(), activations, n, 0);
    if (!first || !last || !position.count(first) || !position.count(last) ||
        !ends.insert(last).second)
      continue;
    // The ops on a path first -> last: reachable from `first` going forward
    // and from `last` going back.
    size_t from = position[first], to = position[last];
    llvm::SmallPtrSet<Operation *, 16> reached{first};
    for (size_t i = from + 1; i <= to; ++i)
      if (llvm::any_of(forward[i]->getOperands(), [&](Value v) {
            return reached.contains(v.getDefiningOp());
          }))
        reached.insert(forward[i]);
    llvm::SmallPtrSet<Operation *, 16> needed{last};
    SmallVector<Operation *> core;
    for (size_t i = to + 1; i-- > from;) {
      Operation *o = forward[i];
      bool onPath = o == last || llvm::any_of(o->getUsers(), [&](Operation *u) {
                      return needed.contains(u);
                    });
      if (onPath && reached.contains(o)) {
        needed.insert(o);
        core.push_back(o);
      }
    }
    std::reverse(core.begin(), core.end());
    cores.push_back(std::move(core));
  }
  return cores;
}

std::string describeRecomputation(ModuleOp module) {
  shard::PlanAttr plan = shard::getPlan(module);
  std::string mode = "none";
  if (plan) {
    mode = shard::stringifyRecompute(plan.getRecompute()).str();
    if (plan.getRecompute() == shard::Recompute::Selective)
      mode += " (attention cores)";
    else if (plan.getRecompute() == shard::Recompute::Full &&
             plan.getRecomputeLayers() > 0)
      mode += " (the first " + std::to_string(plan.getRecomputeLayers()) +
              " layers of each stage)";
  }
  std::string text;
  for (auto fn : module.getOps<func::FuncOp>()) {
    std::set<int64_t> layers;
    std::map<std::string, int64_t> kinds;
    int64_t total = 0;
    fn.walk([&](Operation *op) {
      if (!op->hasAttr(kRecomputeAttr))
        return;
      ++total;
      ++kinds[op->getName().stripDialect().str()];
      if (std::optional<int64_t> layer = layerIndexOf(op))
        layers.insert(*layer);
    });
    if (!total)
      continue;
    std::string ops;
    for (const auto &[kind, count] : kinds)
      ops += (ops.empty() ? "" : ", ") + kind + " " + std::to_string(count);
    text += "; " + fn.getSymName().str() + ": " + std::to_string(total) +
            " ops" +
            (layers.empty() ? std::string()
                            : " in layers " + rangesText(layers)) +
            " (" + ops + ")";
  }
  bool fused = false;
  module.walk([&](AttentionOp) { fused = true; });
  if (text.empty())
    text = !plan || plan.getRecompute() != shard::Recompute::Selective
               ? "; nothing recomputed"
           : fused ? "; nothing recomputed (the attention cores are fused: "
                     "dgraph.attention keeps no scores)"
                   : "; nothing recomputed (no attention core: a softmax "
                     "between a matmul of two activations and one with a "
                     "third)";
  return mode + text;
}

void recordRecomputation(ModuleOp module) {
  module->setAttr(kRecomputedAttr,
                  StringAttr::get(module.getContext(),
                                  describeRecomputation(module)));
}

namespace {

/// Whether `a` and `b` compute the same value: the same op on the same
/// operands with the same attributes, but for the pipeline's task label
/// (a forward op and its clone in a backward task differ only there).
bool sameComputation(Operation *a, Operation *b) {
  if (a->getName() != b->getName() || a->getOperands() != b->getOperands() ||
      a->getResultTypes() != b->getResultTypes() || a->getNumRegions() != 0 ||
      b->getNumRegions() != 0)
    return false;
  auto attrs = [](Operation *op) {
    NamedAttrList list(op->getAttrDictionary());
    list.erase(shard::kTaskAttr);
    return list.getDictionary(op->getContext());
  };
  return attrs(a) == attrs(b);
}

struct RecomputeLayersPass
    : public impl::RecomputeLayersBase<RecomputeLayersPass> {
  using RecomputeLayersBase::RecomputeLayersBase;

  void runOnOperation() final {
    ModuleOp module = getOperation();
    shard::PlanAttr plan = shard::getPlan(module);
    if (!plan || plan.getRecompute() == shard::Recompute::None)
      return;
    // What each stage recomputes, after the cut (and the trim below).
    llvm::scope_exit record([&] { recordRecomputation(module); });
    if (plan.getRecompute() != shard::Recompute::Full ||
        plan.getRecomputeLayers() == 0)
      return;
    int64_t keep = plan.getRecomputeLayers();
    // One op per value first: the micro-batches' copies of an op on shared
    // operands (a bias broadcast) become one, so a clone matches exactly
    // one forward op below. Clones (dgraph.recompute) stay apart.
    {
      // The pipeline's task labels (dshard.task) tell the micro-batches'
      // copies apart; CSE runs without them and the ops it keeps get
      // theirs back.
      llvm::DenseMap<Operation *, Attribute> tasks;
      module.walk([&](Operation *op) {
        if (Attribute task = op->getAttr(shard::kTaskAttr)) {
          tasks[op] = task;
          op->removeAttr(shard::kTaskAttr);
        }
      });
      IRRewriter rewriter(module.getContext());
      DominanceInfo dominance(module);
      eliminateCommonSubExpressions(rewriter, dominance, module);
      module.walk([&](Operation *op) {
        if (Attribute task = tasks.lookup(op))
          op->setAttr(shard::kTaskAttr, task);
      });
    }
    for (auto fn : module.getOps<func::FuncOp>()) {
      if (fn.isExternal())
        continue;
      Block &body = fn.getBody().front();
      // The stage's layers in the order its forward ops meet them (the
      // first micro-batch's forward runs before any backward).
      SmallVector<int64_t> order;
      for (Operation &op : body)
        if (std::optional<int64_t> layer = layerIndexOf(&op);
            layer && !op.hasAttr(kRecomputeAttr) &&
            !llvm::is_contained(order, *layer))
          order.push_back(*layer);
      llvm::SmallDenseSet<int64_t> recomputed(
          order.begin(), order.begin() + std::min<int64_t>(keep, order.size()));
      // A clone of a later layer (or of ops outside layers) becomes its
      // forward op again: the same op on the same operands, earlier in the
      // block, whose result then stays alive until the backward.
      for (Operation &op : llvm::make_early_inc_range(body)) {
        if (!op.hasAttr(kRecomputeAttr))
          continue;
        std::optional<int64_t> layer = layerIndexOf(&op);
        if (layer && recomputed.contains(*layer))
          continue;
        if (op.getNumOperands() == 0)
          continue;
        op.removeAttr(kRecomputeAttr);
        Operation *original = nullptr;
        for (Operation *user : op.getOperand(0).getUsers())
          if (user != &op && user->getBlock() == &body &&
              user->isBeforeInBlock(&op) && !user->hasAttr(kRecomputeAttr) &&
              sameComputation(user, &op)) {
            original = user;
            break;
          }
        if (!original) {
          // Not found (folded since autodiff): it stays recomputed.
          op.setAttr(kRecomputeAttr, UnitAttr::get(module.getContext()));
          continue;
        }
        op.replaceAllUsesWith(original);
        op.erase();
      }
    }
  }
};

} // namespace

} // namespace dtcc::graph
