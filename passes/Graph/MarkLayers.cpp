//===- MarkLayers.cpp - layers of a model from its graph's structure ------===//
//
// dtcc-graph-mark-layers: sets #dgraph.layer where the importer could not
// read it from node names, by cutting each function where one activation
// is alive and finding the repeated runs of the pieces.
//
//===----------------------------------------------------------------------===//

#include "passes/Graph/Passes.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/Hashing.h"

namespace dtcc::graph {
#define GEN_PASS_DEF_MARKLAYERS
#include "passes/Graph/Passes.h.inc"
} // namespace dtcc::graph

using namespace mlir;
using namespace dtcc::graph;

namespace {

/// A run of `count` repetitions of `period` segments from segment `start`.
struct Run {
  int64_t start = 0, period = 0, count = 0;
  int64_t covered() const { return period * count; }
};

/// The longest run of equal signatures in [lo, hi) repeated at least twice
/// (the shortest period, then the earliest start, among equals).
Run longestRun(ArrayRef<llvm::hash_code> sig, int64_t lo, int64_t hi) {
  Run best;
  for (int64_t p = 1; 2 * p <= hi - lo; ++p)
    for (int64_t s = lo; s + 2 * p <= hi; ++s) {
      int64_t k = 1;
      while (s + (k + 1) * p <= hi &&
             std::equal(sig.begin() + s, sig.begin() + s + p,
                        sig.begin() + s + k * p))
        ++k;
      if (k >= 2 && p * k > best.covered())
        best = {s, p, k};
    }
  return best;
}

/// Numbers the layers in [lo, hi): the longest run's repetitions, after
/// those before it and before those after it.
void findLayers(ArrayRef<llvm::hash_code> sig, int64_t lo, int64_t hi,
                SmallVectorImpl<int64_t> &layerOfSegment, int64_t &next) {
  Run run = longestRun(sig, lo, hi);
  if (!run.count)
    return;
  findLayers(sig, lo, run.start, layerOfSegment, next);
  for (int64_t k = 0; k < run.count; ++k, ++next)
    for (int64_t p = 0; p < run.period; ++p)
      layerOfSegment[run.start + k * run.period + p] = next;
  findLayers(sig, run.start + run.covered(), hi, layerOfSegment, next);
}

struct MarkLayersPass : public dtcc::graph::impl::MarkLayersBase<MarkLayersPass> {
  using MarkLayersBase::MarkLayersBase;

  void runOnOperation() final {
    ModuleOp module = getOperation();
    bool marked = false, indexed = false;
    llvm::SmallDenseSet<StringRef, 4> modules;
    module.walk([&](Operation *op) {
      if (auto layer = op->getAttrOfType<LayerAttr>(kLayerAttr)) {
        marked = true;
        indexed |= layer.getIndex().has_value();
        if (!layer.getModule().empty())
          modules.insert(layer.getModule());
      }
    });
    // The importer (or an earlier run) has set them. Except, for a
    // pipeline, names that number no layers and give one top-level module
    // (a model inside a wrapper's attribute, `/m/...`: nothing to cut
    // between): the pieces are found as for unnamed IR, in place of it.
    bool oneModule = marked && !indexed && modules.size() <= 1;
    if (marked && !(parts && oneModule))
      return;
    if (oneModule)
      module.walk([](Operation *op) { op->removeAttr(kLayerAttr); });
    if (auto train = module.lookupSymbol<func::FuncOp>("train_step")) {
      train.emitError("expected the forward model, got @train_step without "
                      "layers: run dtcc-graph-mark-layers before "
                      "dtcc-graph-autodiff");
      return signalPassFailure();
    }
    for (auto fn : module.getOps<func::FuncOp>())
      if (!fn.isExternal())
        markFunction(fn);
  }

  void markFunction(func::FuncOp fn) {
    Block &body = fn.front();
    SmallVector<Operation *> ops;
    llvm::DenseMap<Operation *, int64_t> position;
    for (Operation &op : body.without_terminator()) {
      position[&op] = ops.size();
      ops.push_back(&op);
    }
    int64_t n = ops.size();
    // Activations: values computed from an argument and from a variable.
    llvm::DenseSet<Value> fromArgument, fromVariable;
    SmallVector<bool> computesActivation(n, false);
    for (auto [i, op] : llvm::enumerate(ops)) {
      bool argument = false, variable = isa<LoadOp>(op);
      for (Value v : op->getOperands()) {
        argument |= isa<BlockArgument>(v) || fromArgument.contains(v);
        variable |= fromVariable.contains(v);
      }
      for (Value r : op->getResults()) {
        if (argument)
          fromArgument.insert(r);
        if (variable)
          fromVariable.insert(r);
      }
      computesActivation[i] = argument && variable;
    }
    // Activations alive after each op: born where defined, dead after
    // their last use (the return keeps them to the end).
    SmallVector<int64_t> born(n, 0), died(n + 1, 0);
    for (auto [i, op] : llvm::enumerate(ops)) {
      if (!computesActivation[i])
        continue;
      for (Value r : op->getResults()) {
        if (r.use_empty())
          continue;
        int64_t last = i;
        for (Operation *user : r.getUsers())
          last = std::max(last, position.lookup_or(user, n));
        ++born[i];
        ++died[last];
      }
    }
    // Cut after an activation op that leaves one activation alive.
    SmallVector<int64_t> segmentOf(n, 0);
    int64_t segments = 0, alive = 0;
    for (int64_t i = 0; i < n; ++i) {
      segmentOf[i] = segments;
      alive += born[i] - died[i];
      if (computesActivation[i] && alive == 1 && i + 1 < n)
        ++segments;
    }
    ++segments;
    // A segment's signature: its activation ops' names, in order.
    SmallVector<llvm::hash_code> signature(segments, llvm::hash_code(0));
    for (int64_t i = 0; i < n; ++i)
      if (computesActivation[i])
        signature[segmentOf[i]] = llvm::hash_combine(
            signature[segmentOf[i]], ops[i]->getName().getStringRef());
    SmallVector<int64_t> layerOfSegment(segments, -1);
    int64_t layers = 0;
    findLayers(signature, 0, segments, layerOfSegment, layers);
    if (layers == 0 && (!parts || segments < 2))
      return; // no layers, and no pieces asked for (or one)
    MLIRContext *ctx = fn.getContext();
    for (int64_t i = 0; i < n; ++i) {
      if (!computesActivation[i])
        continue;
      int64_t s = segmentOf[i];
      LayerAttr layer;
      if (layers > 0 && layerOfSegment[s] >= 0)
        layer = LayerAttr::get(ctx, "", layerOfSegment[s]);
      else if (layers == 0)
        layer = LayerAttr::get(ctx, ("part." + Twine(s)).str(), std::nullopt);
      if (layer)
        ops[i]->setAttr(kLayerAttr, layer);
    }
    // What a layer computes from its variables alone (a load, a bias's
    // broadcast, a transposed weight) belongs to the layer that reads it,
    // when one layer does, as the importer finds it from the node's name.
    for (int64_t i = n - 1; i >= 0; --i) {
      Operation *op = ops[i];
      if (computesActivation[i] || op->hasTrait<OpTrait::ConstantLike>() ||
          !llvm::all_of(op->getResults(),
                        [&](Value r) { return fromVariable.contains(r); }))
        continue;
      LayerAttr common;
      bool one = !op->use_empty();
      for (Operation *user : op->getUsers()) {
        LayerAttr l = layerOf(user);
        one &= l && (!common || l == common);
        common = l;
      }
      if (one && common)
        op->setAttr(kLayerAttr, common);
    }
  }
};

} // namespace
