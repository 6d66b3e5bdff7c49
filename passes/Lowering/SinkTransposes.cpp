//===- SinkTransposes.cpp - transposes moved to attention, where they are views
//
// An exported Llama (PyTorch's, and most others) transposes its heads to
// [B, H, S, D] right after the projections and applies the rotary
// embedding in that layout: slices of the head dimension, a negation, a
// concat, products with broadcast cos/sin tables and an add, then
// attention; the backward pass transposes the embedding's gradients back
// after it. The transposes are copies there; moved next to attention they
// are strided views of what it reads or writes (dtcc-lower-to-exec). This
// pass (Passes.td, dtcc-sink-transposes) first moves a transpose below
// every op that reads it when each such op computes the same thing in the
// untransposed layout (elementwise ops whose other operands are
// transposes by the same permutation, broadcasts or splats; slices, pads
// and concats), then moves each transpose that would still be copied
// above the op that makes its operand while it is that op's only reader.
// It keeps the moved program of a function only where fewer elements are
// copied by transposes that are not views.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Passes.h"

#include "dialects/Graph/IR/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Utils/IndexingUtils.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"

namespace dtcc::lowering {
#define GEN_PASS_DEF_SINKTRANSPOSES
#include "passes/Lowering/Passes.h.inc"
} // namespace dtcc::lowering

using namespace mlir;
using namespace dtcc;

namespace {

/// `shape` in the layout a transpose by `perm` reads: dimension perm[i]
/// of the result is dimension i of `shape`.
SmallVector<int64_t> unpermuted(ArrayRef<int64_t> shape, ArrayRef<int64_t> perm) {
  return applyPermutation(shape, invertPermutationVector(perm));
}

RankedTensorType unpermutedType(Type type, ArrayRef<int64_t> perm) {
  auto t = cast<RankedTensorType>(type);
  return RankedTensorType::get(unpermuted(t.getShape(), perm),
                               t.getElementType());
}

/// The operand of a transpose by `perm` that makes `v`, if one does.
Value transposedFrom(Value v, ArrayRef<int64_t> perm) {
  auto t = v.getDefiningOp<graph::TransposeOp>();
  return t && t.getPerm() == perm ? t.getOperand() : Value();
}

/// The broadcast dimensions of `b`'s operand in the untransposed layout,
/// strictly increasing as dgraph.broadcast_in_dim needs, if they are: the
/// operand's dimensions of size 1 are left out (the broadcast repeats them
/// anyway), so `squeezed` says whether the operand must be reshaped first.
std::optional<SmallVector<int64_t>>
unpermutedBroadcastDims(graph::BroadcastInDimOp b, ArrayRef<int64_t> perm,
                        bool &squeezed) {
  auto in = cast<RankedTensorType>(b.getOperand().getType());
  SmallVector<int64_t> dims;
  squeezed = false;
  for (auto [k, d] : llvm::enumerate(b.getDims())) {
    if (in.getDimSize(k) == 1) {
      squeezed = true;
      continue;
    }
    dims.push_back(perm[d]);
  }
  for (size_t i = 1; i < dims.size(); ++i)
    if (dims[i] <= dims[i - 1])
      return std::nullopt;
  return dims;
}

/// Whether `v`, an operand of an elementwise op read through a transpose
/// by `perm`, has a value in the untransposed layout without a copy.
bool hasUnpermuted(Value v, ArrayRef<int64_t> perm) {
  if (transposedFrom(v, perm))
    return true;
  if (auto b = v.getDefiningOp<graph::BroadcastInDimOp>()) {
    bool squeezed;
    return unpermutedBroadcastDims(b, perm, squeezed).has_value();
  }
  if (auto c = v.getDefiningOp<graph::ConstantOp>())
    if (auto dense = dyn_cast<DenseElementsAttr>(c.getValue()))
      return dense.isSplat();
  return false;
}

/// `v` in the untransposed layout (hasUnpermuted said there is one).
Value unpermutedValue(OpBuilder &b, Location loc, Value v,
                      ArrayRef<int64_t> perm) {
  if (Value x = transposedFrom(v, perm))
    return x;
  RankedTensorType type = unpermutedType(v.getType(), perm);
  if (auto bcast = v.getDefiningOp<graph::BroadcastInDimOp>()) {
    bool squeezed;
    SmallVector<int64_t> dims = *unpermutedBroadcastDims(bcast, perm, squeezed);
    Value operand = bcast.getOperand();
    if (squeezed) {
      auto in = cast<RankedTensorType>(operand.getType());
      SmallVector<int64_t> shape;
      for (int64_t d : in.getShape())
        if (d != 1)
          shape.push_back(d);
      operand = graph::ReshapeOp::create(
          b, loc, RankedTensorType::get(shape, in.getElementType()), operand);
    }
    return graph::BroadcastInDimOp::create(b, loc, type, operand, dims);
  }
  auto c = v.getDefiningOp<graph::ConstantOp>();
  auto dense = cast<DenseElementsAttr>(c.getValue());
  return graph::ConstantOp::create(b, loc, dense.resizeSplat(type));
}

/// Whether `user`, reading `t`'s result, computes the same in `t`'s
/// operand's layout followed by the transpose.
bool sinks(Operation *user, graph::TransposeOp t) {
  ArrayRef<int64_t> perm = t.getPerm();
  if (user->getNumResults() != 1)
    return false;
  if (isa<graph::SliceOp>(user))
    return true;
  if (auto pad = dyn_cast<graph::PadOp>(user))
    return pad.getOperand() == t.getResult() &&
           pad.getValue() != t.getResult();
  if (auto concat = dyn_cast<graph::ConcatOp>(user))
    return llvm::all_of(concat.getOperands(),
                        [&](Value v) { return transposedFrom(v, perm); });
  if (!user->hasTrait<OpTrait::Elementwise>())
    return false;
  auto rank = cast<RankedTensorType>(t.getType()).getRank();
  return cast<RankedTensorType>(user->getResult(0).getType()).getRank() ==
             rank &&
         llvm::all_of(user->getOperands(), [&](Value v) {
           auto type = dyn_cast<RankedTensorType>(v.getType());
           return type && type.getRank() == rank && hasUnpermuted(v, perm);
         });
}

/// `user` rebuilt to compute in the layout a transpose by `perm` reads:
/// its slice, pad and concat attributes mapped back through `perm`, its
/// operands `operand` gives (a pad's value stays), an elementwise op's
/// result of the unpermuted type. Sinking a transpose by p past `user`
/// rebuilds it with p; hoisting one above it, with p's inverse.
Value relayout(OpBuilder &b, Operation *user, ArrayRef<int64_t> perm,
               function_ref<Value(Value)> operand) {
  Location loc = user->getLoc();
  Value moved;
  if (auto slice = dyn_cast<graph::SliceOp>(user)) {
    moved = graph::SliceOp::create(b, loc, operand(slice.getOperand()),
                                   unpermuted(slice.getStart(), perm),
                                   unpermuted(slice.getLimit(), perm),
                                   unpermuted(slice.getStride(), perm));
  } else if (auto pad = dyn_cast<graph::PadOp>(user)) {
    moved = graph::PadOp::create(b, loc, operand(pad.getOperand()),
                                 pad.getValue(), unpermuted(pad.getLow(), perm),
                                 unpermuted(pad.getHigh(), perm),
                                 pad.getMode());
  } else if (auto concat = dyn_cast<graph::ConcatOp>(user)) {
    SmallVector<Value> operands;
    for (Value v : concat.getOperands())
      operands.push_back(operand(v));
    moved = graph::ConcatOp::create(b, loc, operands, perm[concat.getDim()]);
  } else {
    SmallVector<Value> operands;
    for (Value v : user->getOperands())
      operands.push_back(operand(v));
    Operation *clone = b.clone(*user);
    clone->setOperands(operands);
    clone->getResult(0).setType(
        unpermutedType(user->getResult(0).getType(), perm));
    moved = clone->getResult(0);
  }
  for (NamedAttribute a : user->getDiscardableAttrs())
    moved.getDefiningOp()->setAttr(a.getName(), a.getValue());
  return moved;
}

/// The transposes, broadcasts and splats `op` reads: rewriting it may
/// leave them dead (eraseDead).
SmallVector<Operation *> layoutInputs(Operation *op) {
  SmallVector<Operation *> inputs;
  for (Value v : op->getOperands())
    if (Operation *def = v.getDefiningOp();
        def &&
        isa<graph::TransposeOp, graph::BroadcastInDimOp, graph::ConstantOp>(
            def) &&
        !llvm::is_contained(inputs, def))
      inputs.push_back(def);
  return inputs;
}

/// Erases those of `inputs` that lost their last reader, but `keep`,
/// recording them in `erased`.
void eraseDead(ArrayRef<Operation *> inputs, Operation *keep,
               llvm::DenseSet<Operation *> &erased) {
  for (Operation *def : inputs)
    if (def != keep && def->use_empty() && erased.insert(def).second)
      def->erase();
}

/// Rewrites `user` (sinks() said it can) to read `t`'s layout, with a
/// transpose by `t`'s permutation after it.
void sinkPast(Operation *user, graph::TransposeOp t) {
  ArrayRef<int64_t> perm = t.getPerm();
  OpBuilder b(user);
  // Every operand has a value in that layout: `t`'s operand, another
  // transpose's, a broadcast or splat remade (hasUnpermuted).
  Value moved = relayout(b, user, perm, [&](Value v) {
    return unpermutedValue(b, user->getLoc(), v, perm);
  });
  auto after = graph::TransposeOp::create(b, user->getLoc(), moved, perm);
  for (NamedAttribute a : user->getDiscardableAttrs())
    after->setAttr(a.getName(), a.getValue());
  user->getResult(0).replaceAllUsesWith(after.getResult());
  user->erase();
}

/// Moves every transpose of `fn` below the ops that read it, as long as
/// each of them can take it (sinks()), until none moves.
void sinkAll(func::FuncOp fn) {
  bool moved = true;
  while (moved) {
    moved = false;
    SmallVector<graph::TransposeOp> transposes;
    fn.walk([&](graph::TransposeOp t) { transposes.push_back(t); });
    llvm::DenseSet<Operation *> erased;
    for (graph::TransposeOp t : transposes) {
      if (erased.contains(t) || t->use_empty())
        continue;
      llvm::SetVector<Operation *> users;
      for (Operation *u : t->getUsers())
        users.insert(u);
      if (!llvm::all_of(users, [&](Operation *u) { return sinks(u, t); }))
        continue;
      for (Operation *u : users) {
        // A transpose the user also read (a concat's other operands, an
        // elementwise op's) may now be dead: erased, not revisited. So may
        // a broadcast or splat it read, remade in the untransposed layout.
        SmallVector<Operation *> inputs = layoutInputs(u);
        sinkPast(u, t);
        eraseDead(inputs, t, erased);
      }
      erased.insert(t);
      t->erase();
      moved = true;
    }
  }
}

/// Whether `use` is one attention or its gradient reads as a view: a
/// query, key, value, out or dout operand.
bool readsView(OpOperand &use) {
  Operation *u = use.getOwner();
  unsigned i = use.getOperandNumber();
  return (isa<graph::AttentionOp>(u) && i < 3) ||
         (isa<graph::AttentionGradOp>(u) && (i < 4 || i == 5));
}

/// Whether the lowering passes `t` as a view: its readers are all
/// attention's or its gradient's view operands, or its operand is a
/// result attention or its gradient writes through strides, read
/// otherwise only as such an operand.
bool isView(graph::TransposeOp t) {
  auto type = cast<RankedTensorType>(t.getType());
  if (type.getRank() < 1 || t.getPerm().back() != type.getRank() - 1)
    return false;
  if (llvm::all_of(t->getUses(), readsView))
    return true;
  Value in = t.getOperand();
  Operation *def = in.getDefiningOp();
  return def &&
         ((isa<graph::AttentionOp>(def) &&
           cast<OpResult>(in).getResultNumber() == 0) ||
          isa<graph::AttentionGradOp>(def)) &&
         llvm::all_of(in.getUses(), [&](OpOperand &use) {
           return use.getOwner() == t.getOperation() || readsView(use);
         });
}

/// Elements a function's transposes copy: all but those the lowering
/// passes as views (isView).
int64_t copiedElements(func::FuncOp fn) {
  int64_t copied = 0;
  fn.walk([&](graph::TransposeOp t) {
    if (!isView(t))
      copied += cast<RankedTensorType>(t.getType()).getNumElements();
  });
  return copied;
}

/// Merges the transposes of one value by one permutation into the first
/// of them (hoisting makes one per path that met there).
bool mergeTransposes(func::FuncOp fn) {
  bool merged = false;
  SmallVector<graph::TransposeOp> transposes;
  fn.walk([&](graph::TransposeOp t) { transposes.push_back(t); });
  llvm::DenseMap<std::pair<Value, Attribute>, graph::TransposeOp> first;
  for (graph::TransposeOp t : transposes) {
    auto key = std::make_pair(t.getOperand(), Attribute(t.getPermAttr()));
    auto [it, fresh] = first.try_emplace(key, t);
    if (fresh)
      continue;
    // Both in one block, the first before: it dominates the other's uses.
    t.getResult().replaceAllUsesWith(it->second.getResult());
    t->erase();
    merged = true;
  }
  return merged;
}

/// Whether the transpose `t` of `user`'s only result, its only reader,
/// can move above `user`: the op then reads its operands transposed (or,
/// for broadcasts and splats, remade in the transposed layout).
bool hoists(Operation *user, graph::TransposeOp t) {
  if (user->getNumResults() != 1 || !user->getResult(0).hasOneUse())
    return false;
  if (isa<graph::SliceOp, graph::ConcatOp, graph::PadOp>(user))
    return true;
  if (!user->hasTrait<OpTrait::Elementwise>())
    return false;
  auto rank = cast<RankedTensorType>(t.getType()).getRank();
  return llvm::all_of(user->getOperands(), [&](Value v) {
    auto type = dyn_cast<RankedTensorType>(v.getType());
    return type && type.getRank() == rank;
  });
}

/// Moves `t` above `user` (hoists() said it can), recording the ops it
/// erases in `erased`.
void hoistPast(Operation *user, graph::TransposeOp t,
               llvm::DenseSet<Operation *> &erased) {
  ArrayRef<int64_t> perm = t.getPerm();
  // The op computes in the layout after `t`: rebuilt with the inverse
  // permutation, each operand transposed by `t`'s (a transpose by the
  // inverse undone, a broadcast or splat remade).
  SmallVector<int64_t> inverse = invertPermutationVector(perm);
  OpBuilder b(user);
  Value moved = relayout(b, user, inverse, [&](Value v) -> Value {
    if (hasUnpermuted(v, inverse))
      return unpermutedValue(b, user->getLoc(), v, inverse);
    auto moved = graph::TransposeOp::create(b, user->getLoc(), v, perm);
    for (NamedAttribute a : t->getDiscardableAttrs())
      moved->setAttr(a.getName(), a.getValue());
    return moved;
  });
  t.getResult().replaceAllUsesWith(moved);
  erased.insert(t);
  t->erase();
  SmallVector<Operation *> inputs = layoutInputs(user);
  erased.insert(user);
  user->erase();
  eraseDead(inputs, nullptr, erased);
}

/// Moves every transpose of `fn` above the op that makes its operand
/// while it is that op's only reader (hoists()), merging the transposes of
/// one value, until none moves: the rotary embedding's gradient, computed
/// in attention's layout, then transposes attention_grad's results, which
/// the lowering writes through views.
void hoistAll(func::FuncOp fn) {
  bool moved = true;
  while (moved) {
    moved = mergeTransposes(fn);
    SmallVector<graph::TransposeOp> transposes;
    fn.walk([&](graph::TransposeOp t) { transposes.push_back(t); });
    // Every transpose that hoists, in one sweep from the last (one per
    // sweep re-walked the function each time: minutes for the planner's
    // programs of many layers); those it creates, and those a merge lets
    // hoist, in the next.
    llvm::DenseSet<Operation *> erased;
    for (graph::TransposeOp t : llvm::reverse(transposes)) {
      if (erased.contains(t))
        continue;
      // One the lowering passes as a view stays (a transpose moved down
      // to attention would come back up).
      Operation *user = t.getOperand().getDefiningOp();
      if (!user || isView(t) || !hoists(user, t))
        continue;
      hoistPast(user, t, erased);
      moved = true;
    }
  }
}

struct SinkTransposesPass
    : public dtcc::lowering::impl::SinkTransposesBase<SinkTransposesPass> {
  void runOnOperation() final {
    for (auto fn : llvm::make_early_inc_range(
             getOperation().getOps<func::FuncOp>())) {
      if (fn.isExternal())
        continue;
      int64_t before = copiedElements(fn);
      if (before == 0)
        continue;
      // Sunk on a copy, kept where it copies less: a transpose read by
      // several ops becomes one per op, which pays only where they join
      // again (the rotary embedding's add) or end in attention.
      auto candidate = cast<func::FuncOp>(fn->clone());
      sinkAll(candidate);
      hoistAll(candidate);
      if (copiedElements(candidate) < before) {
        fn.getBody().takeBody(candidate.getBody());
      }
      candidate->erase();
    }
  }
};

} // namespace
