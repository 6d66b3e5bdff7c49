//===- GraphShardingRules.cpp - sharding rules of dgraph ops ---------------===//
//
// One rule per op (ShardingRule.h): the op's factors and how each operand and
// result dimension decomposes into them. Propagation and partitioning
// (passes/Sharding) use nothing else to split an op.
//
//===----------------------------------------------------------------------===//

#include "dialects/Graph/IR/GraphOps.h"

#include <tuple>

using namespace mlir;
using namespace dtcc::graph;

namespace {

using Rule = ShardingRule;
using Kind = ShardingRule::Kind;

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// A tensor whose dimension d is the single factor ids[d] (none for size-1
/// dimensions, which cannot be split).
Rule::TensorFactors mapped(RankedTensorType type, ArrayRef<int64_t> ids) {
  Rule::TensorFactors t;
  for (auto [d, id] : llvm::enumerate(ids)) {
    t.emplace_back();
    if (type.getDimSize(d) != 1 && id >= 0)
      t.back().push_back(id);
  }
  return t;
}

/// One factor per dimension of `type`, of `kind`.
SmallVector<int64_t> addDims(Rule &r, RankedTensorType type,
                             Kind kind = Kind::kParallel) {
  SmallVector<int64_t> ids;
  for (int64_t size : type.getShape())
    ids.push_back(r.addFactor(size, kind));
  return ids;
}

/// Elementwise: every tensor of the op's rank shares one factor per
/// dimension; scalars (rank 0, as AdamW's learning rate) have none.
Rule elementwise(Operation *op) {
  Rule r;
  RankedTensorType shape;
  for (Value v : llvm::concat<Value>(op->getResults(), op->getOperands()))
    if (typeOf(v).getRank() > 0) {
      shape = typeOf(v);
      break;
    }
  SmallVector<int64_t> ids = shape ? addDims(r, shape) : SmallVector<int64_t>();
  auto map = [&](Value v) {
    return typeOf(v).getRank() == 0 ? Rule::TensorFactors() : mapped(typeOf(v), ids);
  };
  for (Value v : op->getOperands())
    r.operands.push_back(map(v));
  for (Value v : op->getResults())
    r.results.push_back(map(v));
  return r;
}

/// Dimensions listed in `special` get `kind`; the others are shared
/// parallel factors of every tensor (all of one shape).
Rule sameShape(Operation *op, ArrayRef<int64_t> special, Kind kind) {
  Rule r;
  auto type = typeOf(op->getResult(0));
  SmallVector<int64_t> ids;
  for (int64_t d = 0; d < type.getRank(); ++d)
    ids.push_back(r.addFactor(type.getDimSize(d),
                              llvm::is_contained(special, d) ? kind : Kind::kParallel));
  for (Value v : op->getOperands())
    r.operands.push_back(typeOf(v).getRank() ? mapped(typeOf(v), ids)
                                             : Rule::TensorFactors());
  for (Value v : op->getResults())
    r.results.push_back(mapped(typeOf(v), ids));
  return r;
}

/// Every dimension of every tensor its own replicated factor: the op must
/// see whole tensors.
Rule replicatedRule(Operation *op) {
  Rule r;
  for (Value v : op->getOperands())
    r.operands.push_back(mapped(typeOf(v), addDims(r, typeOf(v), Kind::kReplicated)));
  for (Value v : op->getResults())
    r.results.push_back(mapped(typeOf(v), addDims(r, typeOf(v), Kind::kReplicated)));
  return r;
}

/// Normalizations: leading dims `kind` (parallel, or reduction for the
/// gradients that sum over rows), normalized dims replicated. `rows` are
/// tensors shaped like x, `stats` x[:axis], `params` x[axis:].
struct NormLayout {
  SmallVector<int64_t> lead, norm;
};
NormLayout addNorm(Rule &r, RankedTensorType x, int64_t axis, Kind leadKind) {
  NormLayout l;
  for (int64_t d = 0; d < x.getRank(); ++d)
    (d < axis ? l.lead : l.norm)
        .push_back(r.addFactor(x.getDimSize(d), d < axis ? leadKind : Kind::kReplicated));
  return l;
}
Rule::TensorFactors rowsOf(const NormLayout &l, RankedTensorType t) {
  SmallVector<int64_t> ids(l.lead);
  ids.append(l.norm);
  return mapped(t, ids);
}

/// What a normalization's tensor is: whole rows (like x), the normalized
/// dimensions (scale, bias) or the leading ones (mean, rstd).
enum class NormPart { kRows, kNorm, kLead };

/// A normalization or its gradient over `x`'s dimensions from `axis`:
/// rows parallel (forward) or summed into the parameters' gradients
/// (backward, `leadKind` kReduction), the normalized dimensions whole.
Rule normRule(Value x, int64_t axis, Kind leadKind,
              ArrayRef<std::pair<Value, NormPart>> operands,
              ArrayRef<std::pair<Value, NormPart>> results) {
  Rule r;
  auto xt = typeOf(x);
  NormLayout l = addNorm(r, xt, axis, leadKind);
  auto factors = [&](Value v, NormPart part) {
    switch (part) {
    case NormPart::kRows:
      return rowsOf(l, xt);
    case NormPart::kNorm:
      return mapped(typeOf(v), l.norm);
    case NormPart::kLead:
      return mapped(typeOf(v), l.lead);
    }
    llvm_unreachable("unknown part");
  };
  for (auto [v, part] : operands)
    if (v)
      r.operands.push_back(factors(v, part));
  for (auto [v, part] : results)
    r.results.push_back(factors(v, part));
  return r;
}

} // namespace

//===----------------------------------------------------------------------===//
// Elementwise ops
//===----------------------------------------------------------------------===//

#define DTCC_ELEMENTWISE_RULE(OP)                                              \
  ShardingRule OP::getShardingRule() { return elementwise(*this); }
DTCC_ELEMENTWISE_RULE(AbsOp)
DTCC_ELEMENTWISE_RULE(AcosOp)
DTCC_ELEMENTWISE_RULE(AcoshOp)
DTCC_ELEMENTWISE_RULE(AdamwOp)
DTCC_ELEMENTWISE_RULE(AddOp)
DTCC_ELEMENTWISE_RULE(AndOp)
DTCC_ELEMENTWISE_RULE(AsinOp)
DTCC_ELEMENTWISE_RULE(AsinhOp)
DTCC_ELEMENTWISE_RULE(AtanOp)
DTCC_ELEMENTWISE_RULE(AtanhOp)
DTCC_ELEMENTWISE_RULE(CastOp)
DTCC_ELEMENTWISE_RULE(CeilOp)
DTCC_ELEMENTWISE_RULE(ConstantOp)
DTCC_ELEMENTWISE_RULE(CosOp)
DTCC_ELEMENTWISE_RULE(CoshOp)
DTCC_ELEMENTWISE_RULE(DivOp)
DTCC_ELEMENTWISE_RULE(EqOp)
DTCC_ELEMENTWISE_RULE(ErfOp)
DTCC_ELEMENTWISE_RULE(ExpOp)
DTCC_ELEMENTWISE_RULE(FloorOp)
DTCC_ELEMENTWISE_RULE(GeOp)
DTCC_ELEMENTWISE_RULE(GeluGradOp)
DTCC_ELEMENTWISE_RULE(GeluOp)
DTCC_ELEMENTWISE_RULE(GtOp)
DTCC_ELEMENTWISE_RULE(IsInfOp)
DTCC_ELEMENTWISE_RULE(IsNanOp)
DTCC_ELEMENTWISE_RULE(LeOp)
DTCC_ELEMENTWISE_RULE(LogOp)
DTCC_ELEMENTWISE_RULE(LrScheduleOp)
DTCC_ELEMENTWISE_RULE(LtOp)
DTCC_ELEMENTWISE_RULE(MaxOp)
DTCC_ELEMENTWISE_RULE(MinOp)
DTCC_ELEMENTWISE_RULE(MulOp)
DTCC_ELEMENTWISE_RULE(NegOp)
DTCC_ELEMENTWISE_RULE(NotOp)
DTCC_ELEMENTWISE_RULE(OrOp)
DTCC_ELEMENTWISE_RULE(PowOp)
DTCC_ELEMENTWISE_RULE(ReciprocalOp)
DTCC_ELEMENTWISE_RULE(ReluOp)
DTCC_ELEMENTWISE_RULE(RemOp)
DTCC_ELEMENTWISE_RULE(RoundOp)
DTCC_ELEMENTWISE_RULE(RsqrtOp)
DTCC_ELEMENTWISE_RULE(SelectOp)
DTCC_ELEMENTWISE_RULE(SgdOp)
DTCC_ELEMENTWISE_RULE(ShiftLeftOp)
DTCC_ELEMENTWISE_RULE(ShiftRightOp)
DTCC_ELEMENTWISE_RULE(SigmoidOp)
DTCC_ELEMENTWISE_RULE(SignOp)
DTCC_ELEMENTWISE_RULE(SiluGradOp)
DTCC_ELEMENTWISE_RULE(SiluOp)
DTCC_ELEMENTWISE_RULE(SinOp)
DTCC_ELEMENTWISE_RULE(SinhOp)
DTCC_ELEMENTWISE_RULE(SqrtOp)
DTCC_ELEMENTWISE_RULE(SubOp)
DTCC_ELEMENTWISE_RULE(TanOp)
DTCC_ELEMENTWISE_RULE(TanhOp)
DTCC_ELEMENTWISE_RULE(XorOp)
#undef DTCC_ELEMENTWISE_RULE

ShardingRule DropoutOp::getShardingRule() {
  // Elementwise in x, y and the mask; a block's offsets (after
  // partitioning) are whole.
  Rule r;
  auto x = typeOf(getOperand());
  SmallVector<int64_t> ids = addDims(r, x);
  r.operands.push_back(mapped(x, ids));
  r.operands.push_back({}); // the step, a scalar
  if (Value offsets = getOffsets())
    r.operands.push_back(
        mapped(typeOf(offsets), addDims(r, typeOf(offsets), Kind::kReplicated)));
  r.results.push_back(mapped(typeOf(getResult()), ids));
  r.results.push_back(mapped(typeOf(getMask()), ids));
  return r;
}

ShardingRule RandomOp::getShardingRule() {
  // A generator: any dimension of the result may be split (its blocks draw
  // the whole tensor's values, dtcc-shard-partition); the step is a
  // scalar, a block's offsets whole.
  Rule r;
  SmallVector<int64_t> ids = addDims(r, getType());
  r.operands.push_back({});
  if (Value offsets = getOffsets())
    r.operands.push_back(
        mapped(typeOf(offsets), addDims(r, typeOf(offsets), Kind::kReplicated)));
  r.results.push_back(mapped(getType(), ids));
  return r;
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

ShardingRule IotaOp::getShardingRule() {
  return sameShape(*this, {int64_t(getDim())}, Kind::kReplicated);
}

ShardingRule BroadcastInDimOp::getShardingRule() {
  Rule r;
  auto in = typeOf(getOperand()), out = typeOf(getResult());
  SmallVector<int64_t> ids = addDims(r, out);
  SmallVector<int64_t> operandIds;
  for (auto [i, d] : llvm::enumerate(getDims()))
    operandIds.push_back(in.getDimSize(i) == out.getDimSize(d) ? ids[d] : -1);
  r.operands.push_back(mapped(in, operandIds));
  r.results.push_back(mapped(out, ids));
  return r;
}

ShardingRule ReshapeOp::getShardingRule() {
  // Decompose both shapes into their common refinement: [b, s, h] ->
  // [b, s, heads, hd] gives factors b, s, heads, hd with operand dim 2 =
  // heads x hd.
  Rule r;
  auto in = typeOf(getOperand()), out = typeOf(getResult());
  Rule::TensorFactors opF(in.getRank()), resF(out.getRank());
  int64_t i = 0, j = 0, inLeft = 0, outLeft = 0;
  // An empty tensor has no refinement (and nothing to split).
  bool broken = in.getNumElements() == 0 || out.getNumElements() == 0;
  while (!broken && (i < in.getRank() || j < out.getRank())) {
    if (i < in.getRank() && inLeft == 0)
      inLeft = in.getDimSize(i);
    if (j < out.getRank() && outLeft == 0)
      outLeft = out.getDimSize(j);
    if (i < in.getRank() && inLeft == 1) {
      ++i;
      inLeft = 0;
      continue;
    }
    if (j < out.getRank() && outLeft == 1) {
      ++j;
      outLeft = 0;
      continue;
    }
    if (i >= in.getRank() || j >= out.getRank()) {
      broken = true;
      break;
    }
    int64_t size;
    if (inLeft % outLeft == 0)
      size = outLeft;
    else if (outLeft % inLeft == 0)
      size = inLeft;
    else {
      broken = true;
      break;
    }
    int64_t f = r.addFactor(size);
    opF[i].push_back(f);
    resF[j].push_back(f);
    inLeft /= size;
    outLeft /= size;
    if (inLeft == 1) {
      ++i;
      inLeft = 0;
    }
    if (outLeft == 1) {
      ++j;
      outLeft = 0;
    }
  }
  if (broken)
    return replicatedRule(*this);
  r.operands.push_back(opF);
  r.results.push_back(resF);
  return r;
}

ShardingRule TransposeOp::getShardingRule() {
  Rule r;
  auto in = typeOf(getOperand());
  SmallVector<int64_t> ids = addDims(r, in), outIds;
  for (int64_t p : getPerm())
    outIds.push_back(ids[p]);
  r.operands.push_back(mapped(in, ids));
  r.results.push_back(mapped(typeOf(getResult()), outIds));
  return r;
}

/// A dimension `big` viewed as `groups` blocks of `small`, when `offset`
/// (the block's start) is a whole block: the block index is a replicated
/// factor and the block's contents a factor shared with the small side.
/// Returns the (outer, inner) factor ids or nothing.
static std::optional<std::pair<int64_t, int64_t>>
blockFactors(Rule &r, int64_t big, int64_t small, int64_t offset) {
  if (small < 1 || big % small != 0 || offset % small != 0 || big == small)
    return std::nullopt;
  int64_t outer = r.addFactor(big / small, Kind::kReplicated);
  int64_t inner = r.addFactor(small);
  return std::make_pair(outer, inner);
}

/// The factors of one dimension of which a slice keeps, or a pad fills, a
/// part: `whole` elements on the big side, `part` at `offset` on the small
/// side. One shared factor when nothing changes; a block index and block
/// contents when the part is one of equal blocks (`blockable`); otherwise
/// whole on both sides. Returns (big side, small side).
static std::pair<SmallVector<int64_t, 2>, SmallVector<int64_t, 2>>
partFactors(Rule &r, int64_t whole, int64_t part, int64_t offset,
            bool blockable) {
  if (whole == part && offset == 0) {
    int64_t f = r.addFactor(whole);
    return {{f}, {f}};
  }
  if (auto b = blockable ? blockFactors(r, whole, part, offset) : std::nullopt)
    return {{b->first, b->second}, {b->second}};
  return {{r.addFactor(whole, Kind::kReplicated)},
          {r.addFactor(part, Kind::kReplicated)}};
}

ShardingRule SliceOp::getShardingRule() {
  // One block of a fused projection (q of q|k|v) stays split like it.
  Rule r;
  auto in = typeOf(getOperand()), out = typeOf(getResult());
  Rule::TensorFactors opF(in.getRank()), resF(out.getRank());
  for (int64_t d = 0; d < in.getRank(); ++d)
    std::tie(opF[d], resF[d]) =
        partFactors(r, in.getDimSize(d), out.getDimSize(d), getStart()[d],
                    getStride()[d] == 1);
  r.operands.push_back(opF);
  r.results.push_back(resF);
  return r;
}

ShardingRule PadOp::getShardingRule() {
  Rule r;
  auto in = typeOf(getOperand()), out = typeOf(getResult());
  Rule::TensorFactors opF(in.getRank()), resF(out.getRank());
  for (int64_t d = 0; d < in.getRank(); ++d)
    std::tie(resF[d], opF[d]) =
        partFactors(r, out.getDimSize(d), in.getDimSize(d), getLow()[d],
                    getMode() == "constant" && getLow()[d] >= 0 &&
                        getHigh()[d] >= 0);
  r.operands.push_back(opF);
  r.operands.push_back({}); // the padding value, a scalar
  r.results.push_back(resF);
  return r;
}

ShardingRule ConcatOp::getShardingRule() {
  Rule r;
  auto out = typeOf(getResult());
  int64_t dim = getDim();
  SmallVector<int64_t> ids;
  for (int64_t d = 0; d < out.getRank(); ++d)
    ids.push_back(d == dim ? -1 : r.addFactor(out.getDimSize(d)));
  // Equal parts: the result's dim is blocks x part, each operand one block.
  int64_t part = typeOf(getOperand(0)).getDimSize(dim);
  bool equal = llvm::all_of(getOperands(), [&](Value v) {
    return typeOf(v).getDimSize(dim) == part;
  });
  Rule::TensorFactors resF = mapped(out, ids);
  if (equal && getNumOperands() > 1) {
    int64_t outer = r.addFactor(getNumOperands(), Kind::kReplicated);
    int64_t inner = r.addFactor(part);
    resF[dim] = {outer, inner};
    for (Value v : getOperands()) {
      Rule::TensorFactors f = mapped(typeOf(v), ids);
      f[dim] = {inner};
      r.operands.push_back(f);
    }
  } else {
    resF[dim] = {r.addFactor(out.getDimSize(dim), Kind::kReplicated)};
    for (Value v : getOperands()) {
      Rule::TensorFactors f = mapped(typeOf(v), ids);
      f[dim] = {r.addFactor(typeOf(v).getDimSize(dim), Kind::kReplicated)};
      r.operands.push_back(f);
    }
  }
  r.results.push_back(resF);
  return r;
}

ShardingRule ReverseOp::getShardingRule() {
  return sameShape(*this, getDims(), Kind::kReplicated);
}

ShardingRule GatherOp::getShardingRule() {
  // table[pre, V, post] x ids[i...] -> [pre, i..., post]; V is the
  // vocabulary: split, each rank looks up the ids it owns (vocab-parallel).
  Rule r;
  auto data = typeOf(getOperand()), idx = typeOf(getIndices());
  int64_t axis = getAxis();
  SmallVector<int64_t> dataIds, idxIds, outIds;
  for (int64_t d = 0; d < data.getRank(); ++d)
    dataIds.push_back(r.addFactor(data.getDimSize(d),
                                  d == axis ? Kind::kSpecial : Kind::kParallel));
  idxIds = addDims(r, idx);
  outIds.append(dataIds.begin(), dataIds.begin() + axis);
  outIds.append(idxIds);
  outIds.append(dataIds.begin() + axis + 1, dataIds.end());
  r.operands.push_back(mapped(data, dataIds));
  r.operands.push_back(mapped(idx, idxIds));
  r.results.push_back(mapped(typeOf(getResult()), outIds));
  return r;
}

ShardingRule ScatterAddOp::getShardingRule() {
  // The transpose of gather: the index dimensions are summed into rows.
  Rule r;
  auto upd = typeOf(getUpdates()), idx = typeOf(getIndices());
  auto out = typeOf(getResult());
  int64_t axis = getAxis();
  SmallVector<int64_t> outIds;
  for (int64_t d = 0; d < out.getRank(); ++d)
    outIds.push_back(r.addFactor(out.getDimSize(d),
                                 d == axis ? Kind::kSpecial : Kind::kParallel));
  SmallVector<int64_t> idxIds = addDims(r, idx, Kind::kReduction), updIds;
  updIds.append(outIds.begin(), outIds.begin() + axis);
  updIds.append(idxIds);
  updIds.append(outIds.begin() + axis + 1, outIds.end());
  r.operands.push_back(mapped(upd, updIds));
  r.operands.push_back(mapped(idx, idxIds));
  r.results.push_back(mapped(out, outIds));
  return r;
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

/// Reduced dimensions are reductions of `kind` (a split leaves partial
/// results), kept ones parallel.
static Rule reduceRule(Operation *op, ArrayRef<int64_t> dims, Kind kind,
                       StringRef reduction) {
  Rule r;
  auto in = typeOf(op->getOperand(0));
  SmallVector<int64_t> ids, kept;
  for (int64_t d = 0; d < in.getRank(); ++d) {
    bool reduced = llvm::is_contained(dims, d);
    ids.push_back(r.addFactor(in.getDimSize(d), reduced ? kind : Kind::kParallel,
                              reduction));
    if (!reduced)
      kept.push_back(ids.back());
  }
  r.operands.push_back(mapped(in, ids));
  r.results.push_back(mapped(typeOf(op->getResult(0)), kept));
  return r;
}

ShardingRule ReduceSumOp::getShardingRule() {
  return reduceRule(*this, getDims(), Kind::kReduction, "sum");
}
ShardingRule ReduceMaxOp::getShardingRule() {
  return reduceRule(*this, getDims(), Kind::kReduction, "max");
}
ShardingRule ReduceMinOp::getShardingRule() {
  return reduceRule(*this, getDims(), Kind::kReduction, "min");
}
ShardingRule ReduceProdOp::getShardingRule() {
  return reduceRule(*this, getDims(), Kind::kReplicated, "sum");
}
ShardingRule ArgMaxOp::getShardingRule() {
  return reduceRule(*this, {int64_t(getDim())}, Kind::kReplicated, "sum");
}
ShardingRule ArgMinOp::getShardingRule() {
  return reduceRule(*this, {int64_t(getDim())}, Kind::kReplicated, "sum");
}
ShardingRule CumSumOp::getShardingRule() {
  return sameShape(*this, {int64_t(getDim())}, Kind::kReplicated);
}

//===----------------------------------------------------------------------===//
// Neural-network ops
//===----------------------------------------------------------------------===//

ShardingRule MatmulOp::getShardingRule() {
  Rule r;
  auto lhs = typeOf(getLhs()), rhs = typeOf(getRhs()), out = typeOf(getResult());
  int64_t rank = out.getRank();
  bool tl = getTransposeLhs(), tr = getTransposeRhs();
  // One factor per batch dimension of the result. An operand broadcast
  // along it (lacking the dimension or of size 1 there) does not map it: a
  // split of the factor leaves that operand whole on every rank.
  SmallVector<int64_t> batch;
  for (int64_t d = 0; d < rank - 2; ++d)
    batch.push_back(r.addFactor(out.getDimSize(d)));
  int64_t m = r.addFactor(out.getDimSize(rank - 2));
  int64_t n = r.addFactor(out.getDimSize(rank - 1));
  int64_t lr = lhs.getRank();
  int64_t k = r.addFactor(lhs.getDimSize(tl ? lr - 2 : lr - 1), Kind::kReduction);
  auto operandIds = [&](RankedTensorType t, ArrayRef<int64_t> matrix) {
    // mapped() leaves size-1 dimensions without a factor.
    SmallVector<int64_t> ids(ArrayRef<int64_t>(batch).take_back(t.getRank() - 2));
    ids.append(matrix.begin(), matrix.end());
    return mapped(t, ids);
  };
  r.operands.push_back(operandIds(lhs, tl ? SmallVector<int64_t>{k, m}
                                          : SmallVector<int64_t>{m, k}));
  r.operands.push_back(operandIds(rhs, tr ? SmallVector<int64_t>{n, k}
                                          : SmallVector<int64_t>{k, n}));
  SmallVector<int64_t> outIds(batch);
  outIds.append({m, n});
  r.results.push_back(mapped(out, outIds));
  return r;
}

ShardingRule SoftmaxOp::getShardingRule() {
  return sameShape(*this, {int64_t(getDim())}, Kind::kReplicated);
}
ShardingRule LogSoftmaxOp::getShardingRule() {
  return sameShape(*this, {int64_t(getDim())}, Kind::kReplicated);
}
ShardingRule SoftmaxGradOp::getShardingRule() {
  return sameShape(*this, {int64_t(getDim())}, Kind::kReplicated);
}
ShardingRule LogSoftmaxGradOp::getShardingRule() {
  return sameShape(*this, {int64_t(getDim())}, Kind::kReplicated);
}

ShardingRule LayerNormOp::getShardingRule() {
  using P = NormPart;
  return normRule(getOperand(), getAxis(), Kind::kParallel,
                  {{getOperand(), P::kRows}, {getScale(), P::kNorm},
                   {getBias(), P::kNorm}},
                  {{getResult(), P::kRows}, {getMean(), P::kLead},
                   {getRstd(), P::kLead}});
}

ShardingRule RmsNormOp::getShardingRule() {
  using P = NormPart;
  return normRule(getOperand(), getAxis(), Kind::kParallel,
                  {{getOperand(), P::kRows}, {getScale(), P::kNorm}},
                  {{getResult(), P::kRows}, {getRstd(), P::kLead}});
}

ShardingRule LayerNormGradOp::getShardingRule() {
  // Rows are parallel for dx and summed into dscale and dbias.
  using P = NormPart;
  return normRule(getX(), getAxis(), Kind::kReduction,
                  {{getX(), P::kRows}, {getScale(), P::kNorm},
                   {getMean(), P::kLead}, {getRstd(), P::kLead},
                   {getDy(), P::kRows}},
                  {{getDx(), P::kRows}, {getDscale(), P::kNorm},
                   {getDbias(), P::kNorm}});
}

ShardingRule RmsNormGradOp::getShardingRule() {
  using P = NormPart;
  return normRule(getX(), getAxis(), Kind::kReduction,
                  {{getX(), P::kRows}, {getScale(), P::kNorm},
                   {getRstd(), P::kLead}, {getDy(), P::kRows}},
                  {{getDx(), P::kRows}, {getDscale(), P::kNorm}});
}

ShardingRule CrossEntropyOp::getShardingRule() {
  // Rows parallel; classes split only by the vocab-parallel lowering.
  Rule r;
  auto logits = typeOf(getLogits());
  int64_t n = r.addFactor(logits.getDimSize(0));
  int64_t c = r.addFactor(logits.getDimSize(1), Kind::kSpecial);
  r.operands.push_back(mapped(logits, {n, c}));
  r.operands.push_back(mapped(typeOf(getLabels()), {n}));
  r.results.push_back(mapped(typeOf(getResult()), {n}));
  return r;
}

ShardingRule CrossEntropyGradOp::getShardingRule() {
  Rule r;
  auto logits = typeOf(getLogits());
  int64_t n = r.addFactor(logits.getDimSize(0));
  int64_t c = r.addFactor(logits.getDimSize(1), Kind::kSpecial);
  r.operands.push_back(mapped(logits, {n, c}));
  r.operands.push_back(mapped(typeOf(getLabels()), {n}));
  r.operands.push_back(mapped(typeOf(getDloss()), {n}));
  r.results.push_back(mapped(typeOf(getResult()), {n, c}));
  return r;
}

namespace {

/// dgraph.attention and its gradient: the leading (batch, head) dimensions
/// split freely; the queries too in the forward (each query row is
/// computed from all keys: under context parallelism the keys and values
/// are gathered); the keys (the online softmax runs over all of them) and
/// the head dimensions stay whole. The gradient keeps the queries whole as
/// well: dK and dV sum over the queries and dQ over the keys, which no one
/// factor kind says.
struct AttentionFactors {
  SmallVector<int64_t> batch;
  int64_t sq, sk, d, dv;
};

AttentionFactors addAttentionFactors(Rule &r, Value query, Value value,
                                     bool forward) {
  AttentionFactors f;
  auto q = typeOf(query), v = typeOf(value);
  int64_t rank = q.getRank();
  for (int64_t d = 0; d + 2 < rank; ++d)
    f.batch.push_back(r.addFactor(q.getDimSize(d)));
  f.sq = r.addFactor(q.getDimSize(rank - 2),
                     forward ? Kind::kParallel : Kind::kReplicated);
  f.sk = r.addFactor(v.getDimSize(rank - 2), Kind::kReplicated);
  f.d = r.addFactor(q.getDimSize(rank - 1), Kind::kReplicated);
  f.dv = r.addFactor(v.getDimSize(rank - 1), Kind::kReplicated);
  return f;
}

SmallVector<int64_t> withTail(ArrayRef<int64_t> batch,
                              std::initializer_list<int64_t> tail) {
  SmallVector<int64_t> ids(batch);
  ids.append(tail);
  return ids;
}

} // namespace

ShardingRule AttentionOp::getShardingRule() {
  Rule r;
  // Causal attention's query i sees keys j <= i: its queries stay whole
  // (dtcc-graph-fuse-attention keeps the causal mask an operand under
  // context parallelism, so the queries split there).
  AttentionFactors f =
      addAttentionFactors(r, getQuery(), getValue(), !getCausal());
  r.operands.push_back(mapped(typeOf(getQuery()), withTail(f.batch, {f.sq, f.d})));
  r.operands.push_back(mapped(typeOf(getKey()), withTail(f.batch, {f.sk, f.d})));
  r.operands.push_back(mapped(typeOf(getValue()), withTail(f.batch, {f.sk, f.dv})));
  if (getMask())
    r.operands.push_back(
        mapped(typeOf(getMask()), withTail(f.batch, {f.sq, f.sk})));
  r.results.push_back(mapped(typeOf(getResult()), withTail(f.batch, {f.sq, f.dv})));
  r.results.push_back(mapped(typeOf(getLogsumexp()), withTail(f.batch, {f.sq})));
  return r;
}

ShardingRule AttentionGradOp::getShardingRule() {
  Rule r;
  AttentionFactors f = addAttentionFactors(r, getQuery(), getValue(), false);
  auto qIds = withTail(f.batch, {f.sq, f.d}), kIds = withTail(f.batch, {f.sk, f.d}),
       vIds = withTail(f.batch, {f.sk, f.dv}),
       oIds = withTail(f.batch, {f.sq, f.dv});
  r.operands.push_back(mapped(typeOf(getQuery()), qIds));
  r.operands.push_back(mapped(typeOf(getKey()), kIds));
  r.operands.push_back(mapped(typeOf(getValue()), vIds));
  r.operands.push_back(mapped(typeOf(getOut()), oIds));
  r.operands.push_back(mapped(typeOf(getLogsumexp()), withTail(f.batch, {f.sq})));
  r.operands.push_back(mapped(typeOf(getDout()), oIds));
  if (getMask())
    r.operands.push_back(
        mapped(typeOf(getMask()), withTail(f.batch, {f.sq, f.sk})));
  r.results.push_back(mapped(typeOf(getDquery()), qIds));
  r.results.push_back(mapped(typeOf(getDkey()), kIds));
  r.results.push_back(mapped(typeOf(getDvalue()), vIds));
  return r;
}
