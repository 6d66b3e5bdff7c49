//===- Overlap.cpp - communication overlapped with computation ------------===//
//
// Asynchronous collectives with their waits placed as late as their users
// allow, and ZeRO-3 parameter gathers started one layer ahead.
//
//===----------------------------------------------------------------------===//

#include "passes/Sharding/Passes.h"
#include "passes/Sharding/ShardingUtils.h"

#include "mlir/IR/Builders.h"

namespace dtcc::shard {
#define GEN_PASS_DEF_SHARDOVERLAP
#include "passes/Sharding/Passes.h.inc"
} // namespace dtcc::shard

using namespace mlir;
using namespace dtcc;
using namespace dtcc::shard;

namespace {

/// Whether `op` gathers a ZeRO-3 parameter shard straight from its variable,
/// or cast to the compute type (mixed precision).
bool gathersZeroParameter(Operation *op, SymbolTableCollection &symbols) {
  auto gather = dyn_cast<AllGatherOp>(op);
  if (!gather)
    return false;
  Value shard = gather.getOperand();
  if (auto c = shard.getDefiningOp<graph::CastOp>())
    shard = c.getOperand();
  return loadsZeroVariable(shard, &symbols);
}

/// An asynchronous collective, its wait, and the layer it serves.
struct Async {
  Operation *op;
  Operation *wait;
  std::string layer;
};

/// `asyncs` (in program order) in runs of one layer.
SmallVector<SmallVector<Async *>> byLayer(MutableArrayRef<Async> asyncs) {
  SmallVector<SmallVector<Async *>> runs;
  for (Async &a : asyncs) {
    if (runs.empty() || runs.back().front()->layer != a.layer)
      runs.emplace_back();
    runs.back().push_back(&a);
  }
  return runs;
}

struct ShardOverlapPass
    : public dtcc::shard::impl::ShardOverlapBase<ShardOverlapPass> {
  void runOnOperation() final {
    int64_t handle = 0;
    for (auto fn : getOperation().getOps<func::FuncOp>())
      overlap(fn, handle);
  }

  void overlap(func::FuncOp fn, int64_t &handle) {
    Block &body = fn.getBody().front();
    MLIRContext *ctx = fn.getContext();
    auto i64 = IntegerType::get(ctx, 64);
    SmallVector<Async> prefetched, gradients;
    SymbolTableCollection symbols;
    // A snapshot: casts move down the block as collectives are visited.
    SmallVector<Operation *> ops;
    for (Operation &op : body)
      ops.push_back(&op);
    for (Operation *visited : ops) {
      Operation &op = *visited;
      bool zero = gathersZeroParameter(&op, symbols);
      auto phase = op.getAttrOfType<StringAttr>("phase");
      bool gradient = isa<AllReduceOp, ReduceScatterOp>(op) && phase &&
                      phase.getValue() == "backward";
      if (!zero && !gradient)
        continue;
      Operation *user = firstUser(op.getResult(0));
      // A gradient summed at the compute type and widened after (mixed
      // precision's tp all-reduces, and with grad_reduce = half the dp
      // sums): the cast, whose one operand is the sum, waits where its own
      // result is first needed, and the collective overlaps what comes
      // before. (Another collective of the same op, a norm gradient's
      // scale and bias, may lie between the sum and its cast.)
      if (auto cast = dyn_cast_or_null<graph::CastOp>(user); cast && gradient)
        if (Operation *next = firstUser(cast.getResult());
            next && next != cast->getNextNode()) {
          cast->moveBefore(next);
          user = firstUser(op.getResult(0));
        }
      // Nothing to overlap with when the result is needed at once.
      if (!user || (!zero && user == op.getNextNode()))
        continue;
      op.setAttr("async", IntegerAttr::get(i64, 1));
      op.setAttr("handle", IntegerAttr::get(i64, handle));
      OpBuilder b(user);
      auto wait = WaitOp::create(b, op.getLoc(), handle++,
                                 ValueRange{op.getOperand(0), op.getResult(0)});
      if (gradient) {
        Operation *maker = op.getOperand(0).getDefiningOp();
        std::optional<int64_t> layer =
            maker ? graph::layerIndexOf(maker) : std::nullopt;
        gradients.push_back({&op, wait, layer ? std::to_string(*layer) : ""});
      }
      // Layers are keyed by pass too: the backward pass gathers again.
      if (std::optional<int64_t> layer = graph::layerIndexOf(user);
          zero && layer)
        prefetched.push_back({&op, wait,
                              (phase ? phase.getValue().str() : "") + "/" +
                                  std::to_string(*layer)});
    }
    // A gradient's collective overlaps the backward pass of the next
    // layer, not the rest of the step: its wait comes before the next
    // layer but one starts its own, so that the whole (unsharded) gradient
    // it reads is freed then and at most two layers' are in flight, not
    // every layer's until the optimizer step.
    SmallVector<SmallVector<Async *>> gradientLayers = byLayer(gradients);
    for (size_t i = 0; i + 2 < gradientLayers.size(); ++i) {
      Operation *bound = gradientLayers[i + 2].front()->op;
      for (Async *a : gradientLayers[i])
        if (bound->isBeforeInBlock(a->wait))
          a->wait->moveBefore(bound);
    }
    // Prefetch: the gathers of each layer start where the layer before (in
    // program order) first waits for its own.
    SmallVector<SmallVector<Async *>> layers = byLayer(prefetched);
    for (size_t i = 1; i < layers.size(); ++i) {
      Operation *at = layers[i - 1].front()->wait;
      for (Async *a : layers[i - 1])
        if (a->wait->isBeforeInBlock(at))
          at = a->wait;
      for (Async *a : layers[i]) {
        if (!at->isBeforeInBlock(a->op))
          continue; // already earlier
        // The shard's load and cast move up with the gather: pure ops with
        // no operand but the load, so every use stays dominated.
        SmallVector<Operation *> chain;
        bool movable = true;
        for (Operation *d = a->op->getOperand(0).getDefiningOp();
             d && at->isBeforeInBlock(d);
             d = d->getNumOperands() ? d->getOperand(0).getDefiningOp()
                                     : nullptr) {
          if (!isa<graph::LoadOp, graph::CastOp>(d)) {
            movable = false;
            break;
          }
          chain.push_back(d);
        }
        if (!movable)
          continue;
        for (Operation *d : llvm::reverse(chain))
          d->moveBefore(at);
        a->op->moveBefore(at);
      }
    }
  }
};

} // namespace
