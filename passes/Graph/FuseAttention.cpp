//===- FuseAttention.cpp - one dgraph.attention per attention core --------===//
//
// dtcc-graph-fuse-attention: the attention cores that selective
// recomputation finds (findAttentionCores, Recompute.h) become one
// dgraph.attention when every op between the two matmuls is one the fused
// op can say: a positive constant scale, additive masks and selects with a
// large negative fill that no parameter reaches, in one chain of single
// uses. A core with anything else (dropout, a second use of the scores or
// the probabilities, a learned bias) stays as it is, and the module's
// summary says why.
//
//===----------------------------------------------------------------------===//

#include "passes/Graph/Passes.h"
#include "passes/Graph/Recompute.h"
#include "dialects/Shard/IR/ShardOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringSet.h"

#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <tuple>

namespace dtcc::graph {
#define GEN_PASS_DEF_FUSEATTENTION
#include "passes/Graph/Passes.h.inc"
} // namespace dtcc::graph

using namespace mlir;

namespace dtcc::graph {

namespace {

/// A mask value at most this (after the chain's scaling) is "masked out":
/// exp of it is 0 in f32 against any score, so a causal mask of it equals
/// skipping the keys. PyTorch models use -1e9, -inf or the type's lowest.
constexpr double kMaskedOut = -1e9;

/// Elements beyond which a mask is not evaluated at compile time.
constexpr int64_t kMaxEvaluated = int64_t(1) << 24;

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// The elements of a constant (dense or resource) as doubles (a numeric
/// splat as its one value: elementAt); nullopt for other element types or
/// a resource without data.
std::optional<std::vector<double>> constantValues(ElementsAttr attr) {
  auto type = cast<ShapedType>(attr.getType());
  if (type.getNumElements() > kMaxEvaluated)
    return std::nullopt;
  DenseElementsAttr dense = dyn_cast<DenseElementsAttr>(attr);
  if (auto resource = dyn_cast<DenseResourceElementsAttr>(attr)) {
    AsmResourceBlob *blob = resource.getRawHandle().getBlob();
    if (!blob)
      return std::nullopt;
    ArrayRef<char> data = blob->getData();
    if (type.getElementType().isInteger(1))
      dense = DenseElementsAttr::get(
          type, SmallVector<bool>(data.begin(), data.end()));
    else {
      bool isSplat = false;
      if (!DenseElementsAttr::isValidRawBuffer(type, data, isSplat))
        return std::nullopt;
      dense = DenseElementsAttr::getFromRawBuffer(type, data);
    }
  }
  if (!dense)
    return std::nullopt;
  std::vector<double> out;
  Type element = type.getElementType();
  if (!dense.isSplat() || element.isInteger(1))
    out.reserve(type.getNumElements());
  if (element.isInteger(1)) {
    for (bool b : dense.getValues<bool>())
      out.push_back(b);
  } else if (dense.isSplat() && isa<FloatType, IntegerType>(element)) {
    // A splat of any size is its one value (elementAt reads it at every
    // index), read once.
    double value;
    if (isa<FloatType>(element))
      value = dense.getSplatValue<APFloat>().convertToDouble();
    else
      value = cast<IntegerType>(element).isUnsigned()
                  ? double(dense.getSplatValue<APInt>().getZExtValue())
                  : double(dense.getSplatValue<APInt>().getSExtValue());
    out.assign(1, value);
  } else if (element.isF32()) {
    // The common masks read without an APFloat per element (seconds for a
    // [2048, 2048] mask otherwise).
    for (float f : dense.getValues<float>())
      out.push_back(f);
  } else if (element.isF64()) {
    for (double f : dense.getValues<double>())
      out.push_back(f);
  } else if (isa<FloatType>(element)) {
    for (APFloat f : dense.getValues<APFloat>())
      out.push_back(f.convertToDouble());
  } else if (element.isSignlessInteger(64) || element.isSignedInteger(64)) {
    for (int64_t i : dense.getValues<int64_t>())
      out.push_back(double(i));
  } else if (auto it = dyn_cast<IntegerType>(element)) {
    for (APInt i : dense.getValues<APInt>())
      out.push_back(it.isUnsigned() ? double(i.getZExtValue())
                                    : double(i.getSExtValue()));
  } else {
    return std::nullopt;
  }
  return out;
}

/// Row-major strides of `shape`.
SmallVector<int64_t> stridesOf(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> s(shape.size(), 1);
  for (int64_t d = int64_t(shape.size()) - 2; d >= 0; --d)
    s[d] = s[d + 1] * shape[d + 1];
  return s;
}

/// The value of `v` when it is computed from constants alone by the ops a
/// mask is built of (constant, a variable that is not trained, iota, broadcast, reshape, arithmetic,
/// comparisons, select); nullopt otherwise. Values are doubles (booleans
/// 0/1), row-major; a splat constant is its one value (elementAt reads it
/// at every index), not a tensor of copies.
struct Constants {
  ModuleOp module;
  const llvm::StringSet<> &frozen;
};

/// Element `i` of an evaluated value (a splat's one value at every `i`).
double elementAt(const std::vector<double> &values, int64_t i) {
  return values.size() == 1 ? values[0] : values[size_t(i)];
}

/// The storage of an elementwise op's result: the first of its evaluated
/// operands that holds all `n` elements (written in place: element i is
/// read before it is written), else `fresh`, sized. The operands are
/// evaluate()'s temporaries, so a mask is built in two or three buffers,
/// not one per op (each a page-faulted allocation: 134 MB for a
/// [4096, 4096] mask).
std::vector<double> &resultBuffer(int64_t n, std::vector<double> &fresh,
                                  std::initializer_list<std::vector<double> *> operands) {
  for (std::vector<double> *v : operands)
    if (int64_t(v->size()) == n)
      return *v;
  fresh.resize(size_t(n));
  return fresh;
}

std::optional<std::vector<double>> evaluate(const Constants &cs, Value v,
                                            int depth = 0) {
  Operation *def = v.getDefiningOp();
  auto type = dyn_cast<RankedTensorType>(v.getType());
  if (!def || !type || depth > 16 || type.getNumElements() > kMaxEvaluated)
    return std::nullopt;
  int64_t n = type.getNumElements();
  if (auto c = dyn_cast<ConstantOp>(def))
    return constantValues(c.getValue());
  // A variable that is not trained (a PyTorch buffer): its value.
  if (auto load = dyn_cast<LoadOp>(def)) {
    auto var = ModuleOp(cs.module).lookupSymbol<VariableOp>(load.getVariable());
    if (!var || !var.getInitialValue() ||
        (var.getTrainable() && !cs.frozen.contains(var.getSymName())))
      return std::nullopt;
    return constantValues(*var.getInitialValue());
  }
  if (auto iota = dyn_cast<IotaOp>(def)) {
    std::vector<double> out(n);
    ArrayRef<int64_t> shape = type.getShape();
    SmallVector<int64_t> strides = stridesOf(shape);
    int64_t dim = iota.getDim();
    for (int64_t i = 0; i < n; ++i)
      out[i] = double((i / strides[dim]) % shape[dim]);
    return out;
  }
  if (auto r = dyn_cast<ReshapeOp>(def))
    return evaluate(cs, r.getOperand(), depth + 1);
  if (auto bc = dyn_cast<BroadcastInDimOp>(def)) {
    auto in = evaluate(cs, bc.getOperand(), depth + 1);
    if (!in)
      return std::nullopt;
    auto inType = typeOf(bc.getOperand());
    SmallVector<int64_t> inStrides = stridesOf(inType.getShape());
    ArrayRef<int64_t> shape = type.getShape();
    SmallVector<int64_t> outStrides = stridesOf(shape);
    ArrayRef<int64_t> dims = bc.getDims();
    std::vector<double> out(n);
    for (int64_t i = 0; i < n; ++i) {
      int64_t from = 0;
      for (auto [k, d] : llvm::enumerate(dims))
        if (inType.getDimSize(k) != 1)
          from += ((i / outStrides[d]) % shape[d]) * inStrides[k];
      out[i] = elementAt(*in, from);
    }
    return out;
  }
  if (auto sel = dyn_cast<SelectOp>(def)) {
    auto c = evaluate(cs, sel.getCondition(), depth + 1),
         t = evaluate(cs, sel.getOnTrue(), depth + 1),
         f = evaluate(cs, sel.getOnFalse(), depth + 1);
    if (!c || !t || !f)
      return std::nullopt;
    std::vector<double> fresh;
    std::vector<double> &out = resultBuffer(n, fresh, {&*c, &*t, &*f});
    for (int64_t i = 0; i < n; ++i)
      out[i] = elementAt(*c, i) != 0 ? elementAt(*t, i) : elementAt(*f, i);
    return std::move(out);
  }
  auto binary = [&](auto fn) -> std::optional<std::vector<double>> {
    auto a = evaluate(cs, def->getOperand(0), depth + 1),
         b = evaluate(cs, def->getOperand(1), depth + 1);
    if (!a || !b)
      return std::nullopt;
    std::vector<double> fresh;
    std::vector<double> &out = resultBuffer(n, fresh, {&*a, &*b});
    for (int64_t i = 0; i < n; ++i)
      out[i] = fn(elementAt(*a, i), elementAt(*b, i));
    return std::move(out);
  };
  // Integer arithmetic on small indices is exact in doubles.
  if (isa<AddOp>(def))
    return binary([](double a, double b) { return a + b; });
  if (isa<SubOp>(def))
    return binary([](double a, double b) { return a - b; });
  if (isa<MulOp>(def))
    return binary([](double a, double b) { return a * b; });
  if (isa<GeOp>(def))
    return binary([](double a, double b) { return double(a >= b); });
  if (isa<GtOp>(def))
    return binary([](double a, double b) { return double(a > b); });
  if (isa<LeOp>(def))
    return binary([](double a, double b) { return double(a <= b); });
  if (isa<LtOp>(def))
    return binary([](double a, double b) { return double(a < b); });
  if (isa<EqOp>(def))
    return binary([](double a, double b) { return double(a == b); });
  if (isa<AndOp>(def))
    return binary([](double a, double b) { return double(a != 0 && b != 0); });
  if (isa<OrOp>(def))
    return binary([](double a, double b) { return double(a != 0 || b != 0); });
  return std::nullopt;
}

/// The one value of a splat float constant (also through broadcasts and
/// reshapes); nullopt otherwise.
std::optional<double> splatValue(Value v) {
  Operation *def = v.getDefiningOp();
  if (!def)
    return std::nullopt;
  if (isa<BroadcastInDimOp, ReshapeOp>(def))
    return splatValue(def->getOperand(0));
  auto c = dyn_cast<ConstantOp>(def);
  if (!c || !isa<FloatType>(typeOf(v).getElementType()))
    return std::nullopt;
  if (auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
      dense && dense.isSplat())
    return dense.getSplatValue<APFloat>().convertToDouble();
  if (typeOf(v).getNumElements() == 1)
    if (auto values = constantValues(c.getValue()))
      return values->front();
  return std::nullopt;
}

/// Whether a trainable parameter reaches `v`: its gradient would be lost,
/// as dgraph.attention's mask gets none.
bool reachedByParameter(Value v, ModuleOp module,
                        const llvm::StringSet<> &frozen) {
  SmallVector<Value> work{v};
  llvm::SmallPtrSet<Operation *, 16> seen;
  while (!work.empty()) {
    Operation *def = work.pop_back_val().getDefiningOp();
    if (!def || !seen.insert(def).second)
      continue;
    if (auto load = dyn_cast<LoadOp>(def)) {
      auto var = module.lookupSymbol<VariableOp>(load.getVariable());
      if (!var || (var.getTrainable() && !frozen.contains(var.getSymName())))
        return true;
      continue;
    }
    if (def->getNumRegions())
      return true;
    work.append(def->operand_begin(), def->operand_end());
  }
  return false;
}

/// One additive term of the masked scores: `value` (of the scores' shape,
/// or of a smaller one when it was broadcast), times `factor` (the scales
/// applied after it).
struct MaskTerm {
  Value value;
  double factor = 1;
};

/// A core in the fused op's terms, or why it is not one.
struct Match {
  Operation *first = nullptr, *softmax = nullptr, *last = nullptr;
  double scale = 1;
  SmallVector<MaskTerm> terms;
  /// Selects: (condition, fill, whether the scores are on_true), with the
  /// scale factor applied after them.
  struct Select {
    Value condition;
    double fill;
    bool scoresOnTrue;
    double factor;
  };
  SmallVector<Select> selects;
  std::string failure;
};

/// The core `core` (program order, from findAttentionCores) as one chain
/// matmul -> scale / mask / select ... -> softmax -> matmul, each op's
/// result used once, by the next.
Match matchCore(ArrayRef<Operation *> core, ModuleOp module,
                const llvm::StringSet<> &frozen) {
  Match m;
  auto fail = [&](const std::string &why) {
    m.failure = why;
    return m;
  };
  if (core.size() < 3)
    return fail("too few ops");
  m.first = core.front();
  m.last = core.back();
  llvm::SmallPtrSet<Operation *, 16> inCore(core.begin(), core.end());
  auto first = cast<MatmulOp>(m.first);
  auto last = cast<MatmulOp>(m.last);
  RankedTensorType scores = typeOf(first.getResult());
  if (!isa<FloatType>(scores.getElementType()))
    return fail("integer scores");
  // Each op but the last has one use, the next op of the chain; nothing
  // but the softmax's output reaches the product with the values.
  bool pastSoftmax = false;
  for (size_t i = 0; i + 1 < core.size(); ++i) {
    Operation *op = core[i];
    if (pastSoftmax)
      return fail("ops between the softmax and the product with the values "
                  "('" + op->getName().getStringRef().str() + "')");
    pastSoftmax = isa<SoftmaxOp>(op);
    if (op->getNumResults() != 1 || !op->getResult(0).hasOneUse() ||
        *op->getResult(0).getUsers().begin() != core[i + 1])
      return fail("'" + op->getName().getStringRef().str() +
                  "' in the core has a result used outside the chain");
  }
  for (size_t i = 1; i < core.size(); ++i) {
    Operation *op = core[i];
    Value chain = core[i - 1]->getResult(0);
    int64_t fromCore = llvm::count_if(op->getOperands(), [&](Value v) {
      return inCore.contains(v.getDefiningOp());
    });
    if (fromCore != 1 || llvm::count(op->getOperands(), chain) != 1)
      return fail("'" + op->getName().getStringRef().str() +
                  "' takes the scores twice");
    if (op == m.last) {
      if (!m.softmax || core[i - 1] != m.softmax)
        return fail("ops between the softmax and the product with the "
                    "values ('" +
                    core[i - 1]->getName().getStringRef().str() + "')");
      if (last.getLhs() != chain || last.getTransposeLhs())
        return fail("the probabilities are not the left operand of the "
                    "product with the values");
      break;
    }
    if (m.softmax)
      return fail("ops between the softmax and the product with the values "
                  "('" + op->getName().getStringRef().str() + "')");
    if (typeOf(op->getResult(0)) != scores)
      return fail("'" + op->getName().getStringRef().str() +
                  "' changes the scores' type");
    if (auto s = dyn_cast<SoftmaxOp>(op)) {
      if (int64_t(s.getDim()) != scores.getRank() - 1)
        return fail("softmax not along the keys");
      m.softmax = op;
      continue;
    }
    auto other = [&]() {
      return op->getOperand(0) == chain ? op->getOperand(1) : op->getOperand(0);
    };
    if (isa<MulOp, DivOp>(op)) {
      if (isa<DivOp>(op) && op->getOperand(0) != chain)
        return fail("a division by the scores");
      std::optional<double> c = splatValue(other());
      if (!c || !std::isfinite(*c) || *c <= 0)
        return fail("'" + op->getName().getStringRef().str() +
                    "' by something other than a positive constant");
      double f = isa<DivOp>(op) ? 1 / *c : *c;
      m.scale *= f;
      for (MaskTerm &t : m.terms)
        t.factor *= f;
      for (Match::Select &s : m.selects)
        s.factor *= f;
      continue;
    }
    if (isa<AddOp, SubOp>(op)) {
      if (isa<SubOp>(op) && op->getOperand(0) != chain)
        return fail("the scores subtracted from something");
      Value mask = other();
      if (reachedByParameter(mask, module, frozen))
        return fail("a mask that a parameter reaches (its gradient)");
      m.terms.push_back({mask, isa<SubOp>(op) ? -1.0 : 1.0});
      continue;
    }
    if (auto sel = dyn_cast<SelectOp>(op)) {
      bool onTrue = sel.getOnTrue() == chain;
      Value fillValue = onTrue ? sel.getOnFalse() : sel.getOnTrue();
      std::optional<double> fill = splatValue(fillValue);
      if (!fill || !(*fill <= kMaskedOut))
        return fail("a select whose fill is not a constant <= -1e9");
      if (sel.getCondition() == chain ||
          reachedByParameter(sel.getCondition(), module, frozen))
        return fail("a select whose condition a parameter reaches");
      m.selects.push_back({sel.getCondition(), *fill, onTrue, 1.0});
      continue;
    }
    return fail("'" + op->getName().getStringRef().str() +
                "' between the scores and the softmax");
  }
  if (!m.softmax)
    return fail("no softmax");
  // Shapes: Q [B..., Sq, D] · Kᵀ, P · V [B..., Sk, Dv], one rank, the same
  // leading dimensions everywhere (no broadcast).
  auto lhs = typeOf(first.getLhs()), rhs = typeOf(first.getRhs()),
       values = typeOf(last.getRhs());
  int64_t rank = scores.getRank();
  if (rank < 2 || lhs.getRank() != rank || rhs.getRank() != rank ||
      values.getRank() != rank)
    return fail("operands of different ranks (broadcast batch dimensions)");
  ArrayRef<int64_t> lead = scores.getShape().drop_back(2);
  if (lhs.getShape().drop_back(2) != lead ||
      rhs.getShape().drop_back(2) != lead ||
      values.getShape().drop_back(2) != lead)
    return fail("broadcast batch dimensions");
  if (lhs.getElementType() != scores.getElementType() ||
      rhs.getElementType() != scores.getElementType() ||
      values.getElementType() != scores.getElementType())
    return fail("operands of different element types");
  return m;
}

/// `v` ([B..., Sq, Sk]-shaped, or broadcast to it) at its smallest: the
/// operand of a broadcast_in_dim, reshaped to the scores' rank with 1 in
/// the broadcast dimensions.
Value smallMask(OpBuilder &b, Location loc, Value v, RankedTensorType scores) {
  auto bc = v.getDefiningOp<BroadcastInDimOp>();
  if (!bc)
    return v;
  auto in = typeOf(bc.getOperand());
  SmallVector<int64_t> shape(scores.getRank(), 1);
  for (auto [k, d] : llvm::enumerate(bc.getDims()))
    shape[d] = in.getDimSize(k);
  auto type = RankedTensorType::get(shape, in.getElementType());
  if (type == in)
    return bc.getOperand();
  return ReshapeOp::create(b, loc, type, bc.getOperand());
}

Value splat(OpBuilder &b, Location loc, RankedTensorType type, double value) {
  auto element = cast<FloatType>(type.getElementType());
  APFloat f(value);
  bool lost = false;
  f.convert(element.getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
  return ConstantOp::create(b, loc, DenseElementsAttr::get(type, f));
}

/// Whether `mask` (rank R, leading dimensions 1) is the causal mask: 0 on
/// and below the diagonal, <= -1e9 above it.
bool isCausal(const Constants &cs, Value mask, RankedTensorType scores) {
  auto type = typeOf(mask);
  int64_t rank = scores.getRank();
  int64_t sq = scores.getDimSize(rank - 2), sk = scores.getDimSize(rank - 1);
  if (sq != sk || type.getDimSize(rank - 2) != sq ||
      type.getDimSize(rank - 1) != sk ||
      type.getNumElements() != sq * sk)
    return false;
  std::optional<std::vector<double>> values = evaluate(cs, mask);
  if (!values)
    return false;
  for (int64_t i = 0; i < sq; ++i)
    for (int64_t j = 0; j < sk; ++j) {
      double x = elementAt(*values, i * sk + j);
      if (j <= i ? x != 0 : !(x <= kMaskedOut))
        return false;
    }
  return true;
}

/// max(D, Dv) of a matched core: the scores' contraction size and the
/// output's last dimension.
int64_t headDim(const Match &m) {
  auto first = cast<MatmulOp>(m.first);
  RankedTensorType lhs = typeOf(first.getLhs());
  const int64_t rank = lhs.getRank();
  const int64_t d =
      lhs.getDimSize(first.getTransposeLhs() ? rank - 2 : rank - 1);
  return std::max(d, typeOf(m.last->getResult(0)).getShape().back());
}

/// The guard that ONNX Attention's import puts around a softmax whose mask
/// might leave a query row no key (frontends/onnx/AttentionOps.cpp):
///   e = broadcast_in_dim(eq(reduce_max(bias, last dimension), -inf))
///   p = select(e, 0, softmax(select(e, 0, scores)))
/// Where `bias` evaluates with a key in every row, e is false throughout
/// and the guard is the softmax alone: dropped, so that the core can fuse.
/// Each mask is evaluated once (the layers of a model share one). Returns
/// how many guards were dropped.
int64_t dropOpenRowGuards(func::FuncOp fn, const Constants &cs) {
  SmallVector<SoftmaxOp> softmaxes;
  fn.walk([&](SoftmaxOp s) { softmaxes.push_back(s); });
  auto isZero = [](Value v) {
    std::optional<double> x = splatValue(v);
    return x && *x == 0;
  };
  auto isNegInf = [](Value v) {
    std::optional<double> x = splatValue(v);
    return x && std::isinf(*x) && *x < 0;
  };
  // Whether every row of a mask keeps a key: evaluated once per mask.
  llvm::DenseMap<Value, bool> everyRowOpen;
  auto rowsOpen = [&](Value bias) {
    auto [it, inserted] = everyRowOpen.try_emplace(bias, false);
    if (!inserted)
      return it->second;
    std::optional<std::vector<double>> values = evaluate(cs, bias);
    int64_t width = typeOf(bias).getShape().back();
    if (!values || width == 0)
      return false;
    int64_t rows = typeOf(bias).getNumElements() / width;
    for (int64_t r = 0; r < rows; ++r) {
      bool open = false;
      for (int64_t j = 0; j < width && !open; ++j) {
        double v = elementAt(*values, r * width + j);
        open = !(std::isinf(v) && v < 0);
      }
      if (!open)
        return false;
    }
    return it->second = true;
  };
  int64_t dropped = 0;
  for (SoftmaxOp s : softmaxes) {
    auto pre = s.getOperand().getDefiningOp<SelectOp>();
    if (!pre || !pre->hasOneUse() || !s->hasOneUse())
      continue;
    auto post = dyn_cast<SelectOp>(*s->getUsers().begin());
    if (!post || post.getCondition() != pre.getCondition() ||
        post.getOnFalse() != s.getResult() || !isZero(pre.getOnTrue()) ||
        !isZero(post.getOnTrue()))
      continue;
    auto bc = pre.getCondition().getDefiningOp<BroadcastInDimOp>();
    auto eq = bc ? bc.getOperand().getDefiningOp<EqOp>() : EqOp();
    if (!eq)
      continue;
    Value maxed = isNegInf(eq.getRhs())   ? eq.getLhs()
                  : isNegInf(eq.getLhs()) ? eq.getRhs()
                                          : Value();
    auto rowMax = maxed ? maxed.getDefiningOp<ReduceMaxOp>() : ReduceMaxOp();
    if (!rowMax)
      continue;
    Value bias = rowMax.getOperand();
    ArrayRef<int64_t> dims = rowMax.getDims();
    if (dims.size() != 1 || dims[0] != typeOf(bias).getRank() - 1 ||
        !rowsOpen(bias))
      continue;
    post.getResult().replaceAllUsesWith(s.getResult());
    post->erase();
    s->setOperand(0, pre.getOnFalse());
    pre->erase();
    ++dropped;
  }
  return dropped;
}

struct FuseAttentionPass : public impl::FuseAttentionBase<FuseAttentionPass> {
  using FuseAttentionBase::FuseAttentionBase;

  void runOnOperation() final {
    ModuleOp module = getOperation();
    causalOf_.clear();
    for (const std::string &name : frozen)
      frozenSet.insert(name);
    // Under context parallelism a rank holds a chunk of the queries and
    // all the keys: query row i is not key i, so a causal mask stays an
    // operand (split with the queries) instead of becoming `causal`.
    shard::PlanAttr plan = shard::getPlan(module);
    keepCausalMask = plan && plan.getMesh() && plan.getMesh().getSize("cp") > 1;
    int64_t found = 0, fused = 0, causal = 0, masked = 0;
    std::set<int64_t> layers;
    std::map<std::string, int64_t> reasons;
    int64_t guards = 0;
    for (auto fn : module.getOps<func::FuncOp>()) {
      if (fn.isExternal())
        continue;
      guards += dropOpenRowGuards(fn, Constants{module, frozenSet});
      Block &body = fn.getBody().front();
      SmallVector<Operation *> forward;
      for (Operation &op : body)
        forward.push_back(&op);
      llvm::DenseSet<Value> fromInputs(body.getArguments().begin(),
                                       body.getArguments().end());
      for (Operation *op : forward)
        if (llvm::any_of(op->getOperands(),
                         [&](Value v) { return fromInputs.contains(v); }))
          fromInputs.insert(op->getResults().begin(), op->getResults().end());
      for (SmallVector<Operation *> &core :
           findAttentionCores(forward, fromInputs)) {
        ++found;
        Match m = matchCore(core, module, frozenSet);
        if (m.failure.empty() && maxHeadDim > 0 && headDim(m) > maxHeadDim)
          m.failure = "head dimension above " + std::to_string(maxHeadDim) +
                      " (the target's attention kernels)";
        if (!m.failure.empty()) {
          ++reasons[m.failure];
          continue;
        }
        bool isCausalCore = false, hasMask = false;
        fuse(m, isCausalCore, hasMask);
        ++fused;
        causal += isCausalCore;
        masked += hasMask;
        if (std::optional<int64_t> layer = layerIndexOf(m.softmax))
          layers.insert(*layer);
        for (Operation *op : llvm::reverse(core))
          op->erase();
      }
    }
    std::string text = std::to_string(fused) + " of " + std::to_string(found) +
                       " attention cores fused";
    if (fused) {
      text += " (" + std::to_string(causal) + " causal, " +
              std::to_string(masked) + " with a mask operand";
      if (!layers.empty()) {
        std::string list;
        for (int64_t l : layers)
          list += (list.empty() ? "" : ",") + std::to_string(l);
        text += "; layers " + list;
      }
      text += ")";
    }
    for (const auto &[why, count] : reasons)
      text += "; " + std::to_string(count) + " not: " + why;
    if (guards)
      text += "; " + std::to_string(guards) +
              " guards against query rows without a key dropped (every row "
              "of their masks has one)";
    if (!found)
      return;
    module->setAttr(kFusedAttentionAttr,
                    StringAttr::get(module.getContext(), text));
  }

  llvm::StringSet<> frozenSet;
  bool keepCausalMask = false;

  /// A mask as fuse() builds it: the value it is read from (reshapes
  /// looked through), its factor or fill, whether it is a select's
  /// condition (1: the scores on true, 2: on false), and the scores' shape.
  using MaskKey = std::tuple<const void *, double, int, const void *>;
  static MaskKey maskKey(Value v, double factor, int select,
                         RankedTensorType scores) {
    while (auto reshape = v.getDefiningOp<ReshapeOp>())
      v = reshape.getOperand();
    return {v.getAsOpaquePointer(), factor, select,
            scores.getAsOpaquePointer()};
  }
  /// Whether each mask seen in this run is causal.
  std::map<MaskKey, bool> causalOf_;

  void fuse(Match &m, bool &isCausalCore, bool &hasMask) {
    auto first = cast<MatmulOp>(m.first);
    auto last = cast<MatmulOp>(m.last);
    OpBuilder b(m.last);
    Operation *before = m.last->getPrevNode();
    Location loc = m.softmax->getLoc();
    RankedTensorType scores = typeOf(first.getResult());
    int64_t rank = scores.getRank();
    SmallVector<int64_t> swap(rank);
    for (int64_t d = 0; d < rank; ++d)
      swap[d] = d;
    std::swap(swap[rank - 1], swap[rank - 2]);
    auto transposed = [&](Value v) -> Value {
      return TransposeOp::create(b, loc, v, swap);
    };
    Value q = first.getTransposeLhs() ? transposed(first.getLhs()) : first.getLhs();
    Value k = first.getTransposeRhs() ? first.getRhs() : transposed(first.getRhs());
    Value v = last.getTransposeRhs() ? transposed(last.getRhs()) : last.getRhs();
    // The masks at their own (broadcast) size, each times its factor; the
    // causal one becomes the attribute.
    SmallVector<Value> masks;
    // What each mask is built from, for causalOf_: the layers of a model
    // share one mask, which is evaluated once (a [4096, 4096] mask is a
    // second of compile time each).
    SmallVector<MaskKey> keys;
    auto scaled = [&](Value mask, double factor) -> Value {
      if (factor == 1)
        return mask;
      return MulOp::create(b, loc, mask, splat(b, loc, typeOf(mask), factor));
    };
    for (MaskTerm &t : m.terms) {
      Value small = smallMask(b, loc, t.value, scores);
      masks.push_back(scaled(small, t.factor));
      keys.push_back(maskKey(small, t.factor, /*select=*/0, scores));
    }
    for (Match::Select &s : m.selects) {
      Value cond = smallMask(b, loc, s.condition, scores);
      auto type = RankedTensorType::get(typeOf(cond).getShape(),
                                        scores.getElementType());
      Value zero = splat(b, loc, type, 0),
            fill = splat(b, loc, type, s.fill * s.factor);
      masks.push_back(SelectOp::create(b, loc, cond, s.scoresOnTrue ? zero : fill,
                                       s.scoresOnTrue ? fill : zero));
      keys.push_back(maskKey(cond, s.fill * s.factor,
                             /*select=*/s.scoresOnTrue ? 1 : 2, scores));
    }
    for (size_t i = 0; i < masks.size() && !keepCausalMask; ++i) {
      auto [it, inserted] = causalOf_.try_emplace(keys[i], false);
      if (inserted)
        it->second =
            isCausal(Constants{getOperation(), frozenSet}, masks[i], scores);
      if (it->second) {
        isCausalCore = true;
        masks.erase(masks.begin() + i);
        break;
      }
    }
    Value mask;
    if (!masks.empty()) {
      // One operand: the masks broadcast to their common shape and summed.
      SmallVector<int64_t> shape(rank, 1);
      for (Value x : masks)
        for (int64_t d = 0; d < rank; ++d)
          shape[d] = std::max(shape[d], typeOf(x).getDimSize(d));
      auto type = RankedTensorType::get(shape, scores.getElementType());
      SmallVector<int64_t> all(rank);
      for (int64_t d = 0; d < rank; ++d)
        all[d] = d;
      for (Value x : masks) {
        Value wide = typeOf(x) == type
                         ? x
                         : Value(BroadcastInDimOp::create(b, loc, type, x, all));
        mask = mask ? Value(AddOp::create(b, loc, mask, wide)) : wide;
      }
      hasMask = true;
    }
    auto out = typeOf(last.getResult());
    auto lse = AttentionOp::logsumexpType(typeOf(q));
    auto op = AttentionOp::create(b, loc, out, lse, q, k, v, mask,
                                  b.getF64FloatAttr(m.scale),
                                  isCausalCore ? b.getUnitAttr() : UnitAttr());
    // Every op made here (just before the last matmul) belongs to the
    // softmax's layer.
    for (Operation *made = before ? before->getNextNode() : &op->getBlock()->front();
         made != m.last; made = made->getNextNode())
      inheritLayer(m.softmax, made);
    last.getResult().replaceAllUsesWith(op.getResult());
  }
};

} // namespace

} // namespace dtcc::graph
