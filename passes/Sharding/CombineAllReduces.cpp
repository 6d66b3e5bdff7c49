//===- CombineAllReduces.cpp - one all-reduce for a sum of partial sums ---===//
//
// A sum of terms of which several are all-reduced over the same axis sums
// those terms' partial values first and all-reduces once: the gradient norm
// of a tensor-parallel step, one scalar all-reduce per split parameter, so
// becomes one.
//
//===----------------------------------------------------------------------===//

#include "passes/Sharding/Passes.h"

#include "mlir/IR/Builders.h"

namespace dtcc::shard {
#define GEN_PASS_DEF_SHARDCOMBINEALLREDUCES
#include "passes/Sharding/Passes.h.inc"
} // namespace dtcc::shard

using namespace mlir;
using namespace dtcc;
using namespace dtcc::shard;

namespace {

/// A synchronous sum all-reduce whose only user is `user`.
AllReduceOp combinable(Value v, Operation *user) {
  auto ar = v.getDefiningOp<AllReduceOp>();
  if (!ar || ar.getKind() != "sum" || ar->hasAttr("async") || !ar->hasOneUse() ||
      *ar->getUsers().begin() != user)
    return {};
  return ar;
}

struct ShardCombineAllReducesPass
    : public dtcc::shard::impl::ShardCombineAllReducesBase<
          ShardCombineAllReducesPass> {
  void runOnOperation() final {
    for (auto fn : getOperation().getOps<func::FuncOp>())
      combine(fn);
  }

  /// Whether `add` is an inner node of a larger sum: its only user is an
  /// add of the same type.
  static bool inner(graph::AddOp add) {
    if (!add->hasOneUse())
      return false;
    auto user = dyn_cast<graph::AddOp>(*add->getUsers().begin());
    return user && user.getType() == add.getType();
  }

  /// The leaves of the sum rooted at `root`, left to right, with the add
  /// each hangs from.
  static void leaves(graph::AddOp root,
                     SmallVectorImpl<std::pair<Value, Operation *>> &out) {
    for (Value v : {root.getLhs(), root.getRhs()}) {
      auto add = v.getDefiningOp<graph::AddOp>();
      if (add && inner(add) && add.getType() == root.getType())
        leaves(add, out);
      else
        out.push_back({v, root});
    }
  }

  void combine(func::FuncOp fn) {
    SmallVector<graph::AddOp> roots;
    fn.walk([&](graph::AddOp add) {
      if (!inner(add))
        roots.push_back(add);
    });
    for (graph::AddOp root : roots) {
      SmallVector<std::pair<Value, Operation *>> terms;
      leaves(root, terms);
      // The all-reduced terms by axis, in the order the sum meets them.
      llvm::MapVector<StringRef, SmallVector<AllReduceOp>> byAxis;
      SmallVector<Value> rest;
      for (auto [v, user] : terms) {
        if (auto ar = combinable(v, user))
          byAxis[ar.getAxis()].push_back(ar);
        else
          rest.push_back(v);
      }
      if (llvm::none_of(byAxis, [](auto &e) { return e.second.size() > 1; }))
        continue;
      // The same terms: the others summed in order, then each axis's
      // partial values summed and all-reduced once, added last.
      OpBuilder b(root);
      Location loc = root.getLoc();
      Value sum;
      auto add = [&](Value acc, Value v) {
        return acc ? graph::AddOp::create(b, loc, acc, v).getResult() : v;
      };
      for (Value v : rest)
        sum = add(sum, v);
      for (auto &[axis, ars] : byAxis) {
        Value partial;
        for (AllReduceOp ar : ars)
          partial = add(partial, ar.getOperand());
        if (ars.size() == 1) {
          sum = add(sum, ars.front().getResult());
          continue;
        }
        auto combined = AllReduceOp::create(b, ars.front().getLoc(), partial,
                                            ars.front().getAxisAttr(),
                                            ars.front().getKindAttr());
        combined->setDiscardableAttrs(ars.front()->getDiscardableAttrDictionary());
        sum = add(sum, combined.getResult());
      }
      root.getResult().replaceAllUsesWith(sum);
      // The old sum and its all-reduces, users first.
      SmallVector<Operation *> dead{root};
      for (size_t i = 0; i < dead.size(); ++i)
        for (Value v : dead[i]->getOperands())
          if (Operation *def = v.getDefiningOp())
            if ((isa<graph::AddOp>(def) && inner(cast<graph::AddOp>(def)) &&
                 *def->getUsers().begin() == dead[i]) ||
                (isa<AllReduceOp>(def) && def->hasOneUse() &&
                 *def->getUsers().begin() == dead[i] &&
                 combinable(v, dead[i]) &&
                 byAxis[cast<AllReduceOp>(def).getAxis()].size() > 1))
              dead.push_back(def);
      for (Operation *op : dead) {
        op->dropAllUses();
        op->erase();
      }
    }
  }
};

} // namespace
