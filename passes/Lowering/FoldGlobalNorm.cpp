//===- FoldGlobalNorm.cpp - a global norm's sums in one op -----------------===//
//
// Gradient clipping takes the global norm of every gradient as a chain of
// scalar adds of each gradient's sum of squares: a reduction and an add per
// gradient, two launches or more each on a GPU for a tensor that may hold a
// thousand elements. This pass (Passes.td, dtcc-fold-global-norm) turns
// such a chain into one dgraph.global_sum_squares, which a backend sums in
// one launch, with the same additions in the same order.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Passes.h"

#include "dialects/Graph/IR/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"

namespace dtcc::lowering {
#define GEN_PASS_DEF_FOLDGLOBALNORM
#include "passes/Lowering/Passes.h.inc"
} // namespace dtcc::lowering

using namespace mlir;
using namespace dtcc;

namespace {

/// sum_squares of `v`'s operand over all its dimensions into the type
/// global_sum_squares gives (f32 for f32, bf16, f16; f64 for f64), read
/// only once: the operand; null otherwise.
Value leafOperand(Value v) {
  auto sum = v.getDefiningOp<graph::SumSquaresOp>();
  if (!sum || !sum->hasOneUse())
    return Value();
  auto in = cast<RankedTensorType>(sum.getOperand().getType());
  auto out = cast<RankedTensorType>(sum.getType());
  if ((int64_t)sum.getDims().size() != in.getRank() || out.getRank() != 0)
    return Value();
  Type e = in.getElementType(), r = out.getElementType();
  if (!(e.isF64() ? r.isF64() : r.isF32()))
    return Value();
  return sum.getOperand();
}

/// The chains of scalar adds whose every add has a leaf among its
/// operands and whose other operand is a leaf or an add of the chain read
/// only there: one operand after the other, as the adds sum them.
class Chains {
public:
  /// The operands `add` sums, in its chain's order; empty when it is no
  /// link of a chain.
  ArrayRef<Value> leaves(graph::AddOp add) {
    auto it = memo_.find(add);
    if (it != memo_.end())
      return it->second;
    SmallVector<Value> out;
    auto type = cast<RankedTensorType>(add.getType());
    Value lhs = add.getLhs(), rhs = add.getRhs();
    Value a = leafOperand(lhs), b = leafOperand(rhs);
    if (type.getRank() == 0 && (a || b)) {
      if (a && b) {
        out = {a, b};
      } else {
        // The leaf and the chain it extends (an add is commutative, bit
        // for bit: the chain's sum plus the leaf).
        Value leaf = a ? a : b, rest = a ? rhs : lhs;
        auto inner = rest.getDefiningOp<graph::AddOp>();
        if (inner && inner->hasOneUse()) {
          ArrayRef<Value> before = leaves(inner);
          if (!before.empty()) {
            out.assign(before.begin(), before.end());
            out.push_back(leaf);
          }
        }
      }
    }
    return memo_[add] = std::move(out);
  }

private:
  llvm::DenseMap<Operation *, SmallVector<Value>> memo_;
};

/// Whether `add` extends a chain that goes on past it (its one user is a
/// link of the chain).
bool extendedByItsUser(graph::AddOp add, Chains &chains) {
  if (!add->hasOneUse())
    return false;
  auto user = dyn_cast<graph::AddOp>(*add->getUsers().begin());
  return user && !chains.leaves(user).empty();
}

/// Erases `add`'s chain: the adds, then the sums they read.
void eraseChain(graph::AddOp add) {
  SmallVector<Operation *> sums;
  SmallVector<graph::AddOp> adds = {add};
  for (size_t i = 0; i < adds.size(); ++i)
    for (Value operand : adds[i]->getOperands()) {
      if (auto s = operand.getDefiningOp<graph::SumSquaresOp>())
        sums.push_back(s);
      else if (auto a = operand.getDefiningOp<graph::AddOp>())
        adds.push_back(a);
    }
  for (graph::AddOp a : adds)
    a->erase();
  for (Operation *s : sums)
    s->erase();
}

struct FoldGlobalNormPass
    : lowering::impl::FoldGlobalNormBase<FoldGlobalNormPass> {
  void runOnOperation() override {
    Chains chains;
    SmallVector<graph::AddOp> ends;
    getOperation().walk([&](graph::AddOp add) {
      if (!chains.leaves(add).empty() && !extendedByItsUser(add, chains))
        ends.push_back(add);
    });
    for (graph::AddOp end : ends) {
      SmallVector<Value> operands(chains.leaves(end));
      OpBuilder b(end);
      auto global = graph::GlobalSumSquaresOp::create(
          b, end.getLoc(), end.getType(), operands);
      end.getResult().replaceAllUsesWith(global.getResult());
      eraseChain(end);
    }
  }
};

} // namespace
