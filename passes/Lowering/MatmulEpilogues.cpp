//===- MatmulEpilogues.cpp - a dense layer's bias in its products ---------===//
//
// A dense layer y = x W + b is a matmul and an add of the broadcast bias;
// in its backward pass, dW = x^T dy (a matmul) and db = the sum of dy over
// its rows (a reduce_sum) both read dy, on a GPU the largest tensor either
// touches. cuBLASLt adds a bias in the product's epilogue (BIAS) and sums
// the rows of an operand there (BGRADA/BGRADB; dy is the rhs of x^T dy, or
// the lhs of dy^T x for a weight stored [out, in] as PyTorch stores it), so
// this pass (Passes.td, dtcc-lower-matmul-epilogues) writes the forward
// pair as one dgraph.matmul_bias and the backward pair as one
// dgraph.matmul_bias_grad: the add's and the reduction's separate passes
// over the product and dy are gone.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Passes.h"

#include "dialects/Graph/IR/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Dominance.h"
#include "llvm/ADT/DenseSet.h"

#include <optional>

namespace dtcc::lowering {
#define GEN_PASS_DEF_MATMULEPILOGUES
#include "passes/Lowering/Passes.h.inc"
} // namespace dtcc::lowering

using namespace mlir;
using namespace dtcc;

namespace {

/// `v` before any reshape: reshapes keep the elements in row-major order,
/// so every reshape of one value holds the same rows of its last
/// dimension's size wherever that size is the same.
Value beforeReshapes(Value v) {
  while (auto r = v.getDefiningOp<graph::ReshapeOp>())
    v = r.getOperand();
  return v;
}

/// Whether `sum` adds up the rows of its operand (every dimension but the
/// last), keeping that one.
bool sumsRows(graph::ReduceSumOp sum) {
  auto in = cast<RankedTensorType>(sum.getOperand().getType());
  auto out = cast<RankedTensorType>(sum.getType());
  ArrayRef<int64_t> dims = sum.getDims();
  if (in.getRank() < 2 || !in.hasStaticShape() ||
      int64_t(dims.size()) != in.getRank() - 1 ||
      out.getElementType() != in.getElementType() ||
      out.getShape() != in.getShape().take_back(1))
    return false;
  llvm::SmallDenseSet<int64_t> seen(dims.begin(), dims.end());
  for (int64_t d = 0; d + 1 < in.getRank(); ++d)
    if (!seen.contains(d))
      return false;
  return true;
}

/// A product of two matrices that contracts the rows `sum` adds up, and
/// which operand holds them (0: the lhs, transposed; 1: the rhs, not
/// transposed): the same elements in rows of the same length, so the
/// product's epilogue can sum them.
struct RowProduct {
  graph::MatmulOp matmul;
  int64_t summed = 1;
};

std::optional<RowProduct>
productOverRows(graph::ReduceSumOp sum,
                const llvm::DenseSet<Operation *> &taken) {
  Value rows = beforeReshapes(sum.getOperand());
  auto in = cast<RankedTensorType>(sum.getOperand().getType());
  const int64_t n = in.getShape().back();
  SmallVector<Value> views = {rows};
  for (size_t i = 0; i < views.size(); ++i)
    for (Operation *user : views[i].getUsers())
      if (auto r = dyn_cast<graph::ReshapeOp>(user))
        views.push_back(r.getResult());
  for (Value view : views)
    for (Operation *user : view.getUsers()) {
      auto m = dyn_cast<graph::MatmulOp>(user);
      if (!m || taken.contains(m) || m->getBlock() != sum->getBlock())
        continue;
      auto lhs = cast<RankedTensorType>(m.getLhs().getType());
      auto rhs = cast<RankedTensorType>(m.getRhs().getType());
      auto out = cast<RankedTensorType>(m.getType());
      if (lhs.getRank() != 2 || rhs.getRank() != 2 || out.getRank() != 2)
        continue;
      // The operand that is the rows, its rows contracted.
      for (int64_t summed : {1, 0}) {
        Value operand = summed ? m.getRhs() : m.getLhs();
        bool contractsRows =
            summed ? !m.getTransposeRhs() : m.getTransposeLhs();
        auto type = cast<RankedTensorType>(operand.getType());
        if (operand == view && contractsRows && type.getDimSize(1) == n &&
            type.getNumElements() == in.getNumElements() &&
            type.getElementType() == in.getElementType())
          return RowProduct{m, summed};
      }
    }
  return std::nullopt;
}

/// Where one op that replaces `a` and `b` (of one block) may stand: before
/// the first of them when `operands` are all defined there; else at the
/// second when nothing between them reads the first; null when neither.
Operation *placement(Operation *a, Operation *b, ValueRange operands,
                     DominanceInfo &dominance) {
  Operation *first = a->isBeforeInBlock(b) ? a : b;
  Operation *second = first == a ? b : a;
  if (llvm::all_of(operands, [&](Value v) {
        return dominance.properlyDominates(v, first);
      }))
    return first;
  Block *block = first->getBlock();
  for (Operation *user : first->getUsers()) {
    Operation *at = block->findAncestorOpInBlock(*user);
    if (!at || at->isBeforeInBlock(second))
      return nullptr;
  }
  return second;
}

/// A location for the op that replaces `product` and `other`: both ONNX
/// nodes (`dtcc explain` names each).
Location joinedLoc(OpBuilder &b, Operation *product, Operation *other) {
  return FusedLoc::get(b.getContext(), {product->getLoc(), other->getLoc()},
                       b.getStringAttr(graph::kJoinedNodesLoc));
}

/// Gives `fused` the placement of the matmul it replaces: its layer,
/// pipeline stage and task (the discardable attributes).
void keepPlacement(graph::MatmulOp product, Operation *fused) {
  for (NamedAttribute attr : product->getDiscardableAttrs())
    fused->setAttr(attr.getName(), attr.getValue());
}

/// The bias `add` adds to a matmul read only there: `b` of `[n]`
/// broadcast over every dimension of the product but its last (n); null
/// otherwise. `product` is set to the matmul.
Value biasOfProduct(graph::AddOp add, graph::MatmulOp &product) {
  auto type = cast<RankedTensorType>(add.getType());
  if (!isa<FloatType>(type.getElementType()) || !type.hasStaticShape())
    return Value();
  for (auto [mine, other] : {std::pair{add.getLhs(), add.getRhs()},
                             std::pair{add.getRhs(), add.getLhs()}}) {
    auto m = mine.getDefiningOp<graph::MatmulOp>();
    auto bcast = other.getDefiningOp<graph::BroadcastInDimOp>();
    if (!m || !bcast || !m->hasOneUse() || m.getType() != type ||
        m->getBlock() != add->getBlock())
      continue;
    auto bias = cast<RankedTensorType>(bcast.getOperand().getType());
    ArrayRef<int64_t> dims = bcast.getDims();
    if (bias.getRank() == 1 && dims.size() == 1 &&
        dims[0] == type.getRank() - 1 &&
        bias.getDimSize(0) == type.getShape().back() &&
        bias.getElementType() == type.getElementType()) {
      product = m;
      return bcast.getOperand();
    }
  }
  return Value();
}

/// Writes each matmul plus broadcast bias as one matmul_bias where the
/// add stood (the product and the bias are defined there).
void fuseBiases(ModuleOp module) {
  SmallVector<graph::AddOp> adds;
  module.walk([&](graph::AddOp add) { adds.push_back(add); });
  for (graph::AddOp add : adds) {
    graph::MatmulOp m;
    Value bias = biasOfProduct(add, m);
    if (!bias)
      continue;
    OpBuilder b(add);
    auto fused = graph::MatmulBiasOp::create(
        b, joinedLoc(b, m, add), add.getType(), m.getLhs(), m.getRhs(), bias,
        m.getTransposeLhs(), m.getTransposeRhs());
    keepPlacement(m, fused);
    auto bcast = (add.getLhs() == m.getResult() ? add.getRhs() : add.getLhs())
                     .getDefiningOp();
    add.getResult().replaceAllUsesWith(fused.getResult());
    add->erase();
    m->erase();
    if (bcast->use_empty())
      bcast->erase();
  }
}

struct MatmulEpiloguesPass
    : lowering::impl::MatmulEpiloguesBase<MatmulEpiloguesPass> {
  void runOnOperation() override {
    fuseBiases(getOperation());
    DominanceInfo dominance(getOperation());
    llvm::DenseSet<Operation *> taken;
    SmallVector<std::pair<graph::ReduceSumOp, RowProduct>> pairs;
    getOperation().walk([&](graph::ReduceSumOp sum) {
      if (!sumsRows(sum))
        return;
      if (std::optional<RowProduct> p = productOverRows(sum, taken)) {
        taken.insert(p->matmul);
        pairs.push_back({sum, *p});
      }
    });
    for (auto [sum, pair] : pairs) {
      graph::MatmulOp m = pair.matmul;
      Operation *at = placement(sum, m, m->getOperands(), dominance);
      if (!at)
        continue;
      OpBuilder b(at);
      auto fused = graph::MatmulBiasGradOp::create(
          b, joinedLoc(b, m, sum), m.getType(), sum.getType(), m.getLhs(),
          m.getRhs(), m.getTransposeLhs(), m.getTransposeRhs(), pair.summed);
      keepPlacement(m, fused);
      m.getResult().replaceAllUsesWith(fused.getProduct());
      sum.getResult().replaceAllUsesWith(fused.getSums());
      m->erase();
      sum->erase();
    }
  }
};

} // namespace
