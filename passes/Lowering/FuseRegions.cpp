//===- FuseRegions.cpp - elementwise chains into generated kernels --------===//
//
// Groups producer-consumer chains of elementwise dgraph ops (with the
// broadcasts and splat constants they read) into fused regions: each region
// becomes one `linalg.generic` on memrefs in a function of the nested
// `dtcc_kernels` module, and a `dgraph.fused` call of it replaces its ops.
// The values inside a region never reach memory; the lowering then plans
// only the region's inputs and outputs.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Passes.h"

#include "dialects/Graph/IR/GraphOps.h"
#include "dialects/Shard/IR/ShardOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"

namespace dtcc::lowering {
#define GEN_PASS_DEF_FUSEREGIONS
#include "passes/Lowering/Passes.h.inc"
} // namespace dtcc::lowering

using namespace mlir;
using namespace dtcc;

namespace {

constexpr StringLiteral kKernelsModule = "dtcc_kernels";

/// The type a region of element type `t` computes in: f32 for the half
/// types (their kernels compute in f32 too, rounding each result; a region
/// rounds only what it writes), else `t`.
Type computeType(Type t) {
  return t.isBF16() || t.isF16() ? Float32Type::get(t.getContext()) : t;
}

/// Whether a region computes `op`: a float elementwise op whose scalar form
/// emitScalar knows.
bool isFusableCompute(Operation *op) {
  if (!isa<graph::AddOp, graph::SubOp, graph::MulOp, graph::DivOp,
           graph::MaxOp, graph::MinOp, graph::NegOp, graph::AbsOp,
           graph::ExpOp, graph::LogOp, graph::SqrtOp, graph::RsqrtOp,
           graph::ReciprocalOp, graph::TanhOp, graph::SigmoidOp,
           graph::ReluOp, graph::SiluOp, graph::ErfOp, graph::GeluOp,
           graph::GeluGradOp, graph::SiluGradOp>(op))
    return false;
  auto type = dyn_cast<RankedTensorType>(op->getResult(0).getType());
  if (!type)
    return false;
  Type e = type.getElementType();
  return e.isF32() || e.isF64() || e.isBF16() || e.isF16();
}

/// A broadcast a region reads through an indexing map instead of a buffer:
/// it keeps the order of dimensions (no transpose) and really broadcasts.
bool isInlinedBroadcast(Operation *op) {
  auto b = dyn_cast_or_null<graph::BroadcastInDimOp>(op);
  if (!b || b.getOperand().getType() == b.getType())
    return false;
  ArrayRef<int64_t> dims = b.getDims();
  return llvm::is_sorted(dims) &&
         std::adjacent_find(dims.begin(), dims.end()) == dims.end();
}

/// A splat constant a region reads as a scalar.
DenseElementsAttr inlinedSplat(Operation *op) {
  auto c = dyn_cast_or_null<graph::ConstantOp>(op);
  if (!c)
    return {};
  auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
  return dense && dense.isSplat() ? dense : DenseElementsAttr();
}

/// Whether every operand of `op` is a region value of its result type, an
/// inlined broadcast or splat of its element type.
bool operandsFit(Operation *op) {
  Type type = op->getResult(0).getType();
  for (Value v : op->getOperands()) {
    if (v.getType() == type)
      continue;
    return false;
  }
  return true;
}

int64_t tensorBytes(Type t) {
  auto type = cast<RankedTensorType>(t);
  return type.getNumElements() *
         std::max<int64_t>(1, type.getElementTypeBitWidth() / 8);
}

/// The scalar form of a region's op. `x` are its operands' scalars.
Value emitScalar(OpBuilder &b, Location loc, Operation *op, ValueRange x) {
  Type t = x[0].getType();
  auto c = [&](double v) -> Value {
    return arith::ConstantOp::create(b, loc, t, b.getFloatAttr(t, v));
  };
  auto add = [&](Value l, Value r) -> Value { return arith::AddFOp::create(b, loc, l, r); };
  auto sub = [&](Value l, Value r) -> Value { return arith::SubFOp::create(b, loc, l, r); };
  auto mul = [&](Value l, Value r) -> Value { return arith::MulFOp::create(b, loc, l, r); };
  auto div = [&](Value l, Value r) -> Value { return arith::DivFOp::create(b, loc, l, r); };
  auto neg = [&](Value v) -> Value { return arith::NegFOp::create(b, loc, v); };
  auto exp = [&](Value v) -> Value { return math::ExpOp::create(b, loc, v); };
  auto tanh = [&](Value v) -> Value { return math::TanhOp::create(b, loc, v); };
  auto erf = [&](Value v) -> Value { return math::ErfOp::create(b, loc, v); };
  // The formulas are the CPU kernels' (runtime/device/cpu), operation for
  // operation, so that a region computes what the kernels it replaces do.
  constexpr double kInvSqrt2 = 0.70710678118654752440;
  constexpr double kSqrt2OverPi = 0.79788456080286535588;
  constexpr double kInvSqrt2Pi = 0.39894228040143267794;
  return llvm::TypeSwitch<Operation *, Value>(op)
      .Case([&](graph::AddOp) { return add(x[0], x[1]); })
      .Case([&](graph::SubOp) { return sub(x[0], x[1]); })
      .Case([&](graph::MulOp) { return mul(x[0], x[1]); })
      .Case([&](graph::DivOp) { return div(x[0], x[1]); })
      .Case([&](graph::MaxOp) -> Value {
        return arith::MaximumFOp::create(b, loc, x[0], x[1]);
      })
      .Case([&](graph::MinOp) -> Value {
        return arith::MinimumFOp::create(b, loc, x[0], x[1]);
      })
      .Case([&](graph::NegOp) { return neg(x[0]); })
      .Case([&](graph::AbsOp) -> Value { return math::AbsFOp::create(b, loc, x[0]); })
      .Case([&](graph::ExpOp) { return exp(x[0]); })
      .Case([&](graph::LogOp) -> Value { return math::LogOp::create(b, loc, x[0]); })
      .Case([&](graph::SqrtOp) -> Value { return math::SqrtOp::create(b, loc, x[0]); })
      .Case([&](graph::RsqrtOp) -> Value {
        return div(c(1), math::SqrtOp::create(b, loc, x[0]));
      })
      .Case([&](graph::ReciprocalOp) { return div(c(1), x[0]); })
      .Case([&](graph::TanhOp) { return tanh(x[0]); })
      .Case([&](graph::ErfOp) { return erf(x[0]); })
      .Case([&](graph::SigmoidOp) { return div(c(1), add(c(1), exp(neg(x[0])))); })
      .Case([&](graph::SiluOp) { return div(x[0], add(c(1), exp(neg(x[0])))); })
      .Case([&](graph::ReluOp) -> Value {
        Value lt = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, x[0], c(0));
        return arith::SelectOp::create(b, loc, lt, c(0), x[0]);
      })
      .Case([&](graph::GeluOp g) -> Value {
        Value v = x[0];
        Value phi;
        if (g.getApproximate() == "tanh") {
          Value cube = mul(mul(mul(c(0.044715), v), v), v);
          phi = tanh(mul(c(kSqrt2OverPi), add(v, cube)));
        } else {
          phi = erf(mul(v, c(kInvSqrt2)));
        }
        return mul(mul(c(0.5), v), add(c(1), phi));
      })
      .Case([&](graph::GeluGradOp g) -> Value {
        Value v = x[0], dy = x[1];
        if (g.getApproximate() == "tanh") {
          Value k = c(kSqrt2OverPi), a = c(0.044715);
          Value t = tanh(mul(k, add(v, mul(mul(mul(a, v), v), v))));
          Value du = mul(k, add(c(1), mul(mul(mul(c(3), a), v), v)));
          Value left = mul(c(0.5), add(c(1), t));
          Value right = mul(mul(mul(c(0.5), v), sub(c(1), mul(t, t))), du);
          return mul(dy, add(left, right));
        }
        Value cdf = erf(mul(v, c(kInvSqrt2)));
        Value pdf = exp(mul(mul(c(-0.5), v), v));
        return mul(dy, add(mul(c(0.5), add(c(1), cdf)),
                           mul(v, mul(c(kInvSqrt2Pi), pdf))));
      })
      .Case([&](graph::SiluGradOp) -> Value {
        Value v = x[0], dy = x[1];
        Value sig = div(c(1), add(c(1), exp(neg(v))));
        return mul(mul(dy, sig), add(c(1), mul(v, sub(c(1), sig))));
      })
      .Default([](Operation *) -> Value { return {}; });
}

/// One fused region: its compute ops in program order.
struct Region {
  SmallVector<Operation *> ops;
};

class FunctionFusion {
public:
  FunctionFusion(func::FuncOp fn, ModuleOp kernels, unsigned &counter,
                 bool remarks)
      : fn(fn), kernels(kernels), counter(counter), remarks(remarks) {}

  void run();

private:
  bool canJoin(ArrayRef<Operation *> members, Operation *op);
  void outline(Region &region);

  func::FuncOp fn;
  ModuleOp kernels;
  unsigned &counter;
  bool remarks;
  llvm::DenseMap<Operation *, int64_t> order;
};

/// The region of the op's members placed at `op`: legal when no member's
/// result is read outside the region before `op` (the region then runs at
/// `op` and every outside reader comes after it; this also excludes
/// cycles through outside ops).
bool FunctionFusion::canJoin(ArrayRef<Operation *> members, Operation *op) {
  llvm::SmallPtrSet<Operation *, 16> inRegion(members.begin(), members.end());
  inRegion.insert(op);
  int64_t at = order.lookup(op);
  for (Operation *m : members)
    for (Operation *user : m->getUsers())
      if (!inRegion.contains(user) && order.lookup(user) < at)
        return false;
  return true;
}

void FunctionFusion::run() {
  Block &body = fn.front();
  int64_t i = 0;
  for (Operation &op : body)
    order[&op] = i++;

  // Regions grow in program order: an op joins the regions of its
  // producers (all of them, or else the first that it may join alone).
  SmallVector<Region> regions;
  llvm::DenseMap<Operation *, unsigned> regionOf;
  for (Operation &op : body) {
    if (!isFusableCompute(&op) || !operandsFit(&op))
      continue;
    Type type = op.getResult(0).getType();
    Attribute stage = op.getAttr(shard::kStageAttr);
    llvm::SetVector<unsigned> producers;
    for (Value v : op.getOperands())
      if (Operation *def = v.getDefiningOp())
        if (auto it = regionOf.find(def);
            it != regionOf.end() && def->getResult(0).getType() == type &&
            def->getAttr(shard::kStageAttr) == stage)
          producers.insert(it->second);
    auto membersOf = [&](ArrayRef<unsigned> rs) {
      SmallVector<Operation *> members;
      for (unsigned r : rs)
        llvm::append_range(members, regions[r].ops);
      return members;
    };
    SmallVector<unsigned> join;
    if (!producers.empty() && canJoin(membersOf(producers.getArrayRef()), &op))
      join.assign(producers.begin(), producers.end());
    else
      for (unsigned r : producers)
        if (canJoin(regions[r].ops, &op)) {
          join = {r};
          break;
        }
    if (join.empty()) {
      regionOf[&op] = regions.size();
      regions.push_back(Region{{&op}});
      continue;
    }
    // Merge into the first, in program order.
    unsigned into = join.front();
    for (unsigned r : llvm::drop_begin(join)) {
      for (Operation *m : regions[r].ops)
        regionOf[m] = into;
      llvm::append_range(regions[into].ops, regions[r].ops);
      regions[r].ops.clear();
    }
    regions[into].ops.push_back(&op);
    llvm::sort(regions[into].ops, [&](Operation *a, Operation *b) {
      return order.lookup(a) < order.lookup(b);
    });
    regionOf[&op] = into;
  }
  for (Region &region : regions)
    if (region.ops.size() >= 2)
      outline(region);
}

void FunctionFusion::outline(Region &region) {
  MLIRContext *ctx = fn.getContext();
  llvm::SmallPtrSet<Operation *, 16> members(region.ops.begin(), region.ops.end());
  Operation *last = region.ops.back();
  auto type = cast<RankedTensorType>(last->getResult(0).getType());
  int64_t rank = type.getRank();

  // Inputs: each outside value with the map the region reads it through.
  llvm::MapVector<std::pair<Value, AffineMap>, unsigned> inputs;
  AffineMap identity = AffineMap::getMultiDimIdentityMap(rank, ctx);
  auto inputOf = [&](Value v) -> std::pair<Value, AffineMap> {
    Operation *def = v.getDefiningOp();
    if (isInlinedBroadcast(def)) {
      auto bcast = cast<graph::BroadcastInDimOp>(def);
      auto operandType = cast<RankedTensorType>(bcast.getOperand().getType());
      SmallVector<AffineExpr> exprs;
      for (auto [i, d] : llvm::enumerate(bcast.getDims()))
        exprs.push_back(operandType.getDimSize(i) == 1 && type.getDimSize(d) != 1
                            ? getAffineConstantExpr(0, ctx)
                            : getAffineDimExpr(d, ctx));
      return {bcast.getOperand(), AffineMap::get(rank, 0, exprs, ctx)};
    }
    return {v, identity};
  };
  for (Operation *op : region.ops)
    for (Value v : op->getOperands()) {
      Operation *def = v.getDefiningOp();
      if ((def && members.contains(def)) || inlinedSplat(def))
        continue;
      inputs.insert({inputOf(v), inputs.size()});
    }
  // Outputs: members' results read outside the region.
  SmallVector<Value> outputs;
  int64_t savedBytes = 0;
  for (Operation *op : region.ops) {
    Value r = op->getResult(0);
    if (llvm::any_of(r.getUsers(),
                     [&](Operation *u) { return !members.contains(u); }))
      outputs.push_back(r);
    else
      savedBytes += tensorBytes(r.getType());
  }

  // The region function: one linalg.generic over the result's shape.
  OpBuilder kb = OpBuilder::atBlockEnd(kernels.getBody());
  SmallVector<Type> argTypes;
  for (auto &[key, index] : inputs) {
    auto t = cast<RankedTensorType>(key.first.getType());
    argTypes.push_back(MemRefType::get(t.getShape(), t.getElementType()));
  }
  for (Value v : outputs) {
    auto t = cast<RankedTensorType>(v.getType());
    argTypes.push_back(MemRefType::get(t.getShape(), t.getElementType()));
  }
  std::string name = (fn.getSymName() + "_fused_" + Twine(counter++)).str();
  Location loc = last->getLoc();
  auto kernel = func::FuncOp::create(kb, loc, name,
                                     FunctionType::get(ctx, argTypes, {}));
  SmallVector<Attribute> opNames;
  for (Operation *op : region.ops)
    opNames.push_back(op->getName().getIdentifier());
  kernel->setAttr("dtcc.fused_ops", ArrayAttr::get(ctx, opNames));
  kernel->setAttr("dtcc.saved_bytes", kb.getI64IntegerAttr(savedBytes));
  Block *entry = kernel.addEntryBlock();
  OpBuilder b = OpBuilder::atBlockEnd(entry);
  SmallVector<AffineMap> maps;
  for (auto &[key, index] : inputs)
    maps.push_back(key.second);
  maps.append(outputs.size(), identity);
  SmallVector<utils::IteratorType> iterators(rank, utils::IteratorType::parallel);
  ValueRange args = entry->getArguments();
  linalg::GenericOp::create(
      b, loc, TypeRange{}, args.take_front(inputs.size()),
      args.drop_front(inputs.size()), maps, iterators,
      [&](OpBuilder &nb, Location nloc, ValueRange scalars) {
        // Half-precision regions read their inputs into f32 and round
        // what they write.
        Type element = type.getElementType();
        Type compute = computeType(element);
        IRMapping map;
        auto scalarOf = [&](Value v) -> Value {
          if (Value s = map.lookupOrNull(v))
            return s;
          Value s;
          if (DenseElementsAttr splat = inlinedSplat(v.getDefiningOp())) {
            APFloat value = splat.getSplatValue<APFloat>();
            bool lost = false;
            value.convert(cast<FloatType>(compute).getFloatSemantics(),
                          APFloat::rmNearestTiesToEven, &lost);
            s = arith::ConstantOp::create(nb, nloc, compute,
                                          nb.getFloatAttr(compute, value));
          } else {
            s = scalars[inputs.lookup(inputOf(v))];
            if (s.getType() != compute)
              s = arith::ExtFOp::create(nb, nloc, compute, s);
          }
          map.map(v, s);
          return s;
        };
        for (Operation *op : region.ops) {
          SmallVector<Value> xs;
          for (Value v : op->getOperands())
            xs.push_back(scalarOf(v));
          map.map(op->getResult(0), emitScalar(nb, op->getLoc(), op, xs));
        }
        SmallVector<Value> yields;
        for (Value v : outputs) {
          Value y = map.lookup(v);
          yields.push_back(y.getType() == element
                               ? y
                               : arith::TruncFOp::create(nb, nloc, element, y));
        }
        linalg::YieldOp::create(nb, nloc, yields);
      });
  func::ReturnOp::create(b, loc);

  // The call replaces the region's ops where its last op was.
  OpBuilder fb(last);
  SmallVector<Value> operands;
  for (auto &[key, index] : inputs)
    operands.push_back(key.first);
  SmallVector<Type> resultTypes;
  for (Value v : outputs)
    resultTypes.push_back(v.getType());
  auto ref = SymbolRefAttr::get(ctx, kKernelsModule,
                                {FlatSymbolRefAttr::get(ctx, name)});
  auto fused = graph::FusedOp::create(fb, loc, resultTypes, ref, operands);
  if (Attribute stage = last->getAttr(shard::kStageAttr))
    fused->setAttr(shard::kStageAttr, stage);
  if (Attribute layer = last->getAttr(graph::kLayerAttr))
    fused->setAttr(graph::kLayerAttr, layer);
  if (remarks)
    fused->emitRemark() << "fused " << region.ops.size() << " ops into @"
                        << name << " (" << inputs.size() << " inputs, "
                        << outputs.size() << " outputs, " << savedBytes
                        << " bytes of intermediates kept out of memory)";
  for (auto [v, r] : llvm::zip(outputs, fused.getResults()))
    v.replaceAllUsesWith(r);
  llvm::SetVector<Operation *> dead;
  for (Operation *op : llvm::reverse(region.ops)) {
    for (Value v : op->getOperands())
      if (Operation *def = v.getDefiningOp();
          def && !members.contains(def) &&
          (isInlinedBroadcast(def) || inlinedSplat(def)))
        dead.insert(def);
    op->erase();
  }
  for (Operation *op : dead)
    if (op->use_empty())
      op->erase();
}

struct FuseRegionsPass
    : public dtcc::lowering::impl::FuseRegionsBase<FuseRegionsPass> {
  using FuseRegionsBase::FuseRegionsBase;

  void runOnOperation() final {
    ModuleOp module = getOperation();
    MLIRContext *ctx = module.getContext();
    auto kernels = module.lookupSymbol<ModuleOp>(kKernelsModule);
    bool fresh = !kernels;
    if (fresh) {
      OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
      kernels = ModuleOp::create(b, module.getLoc(), StringRef(kKernelsModule));
    }
    unsigned counter = 0;
    for (auto fn : llvm::make_early_inc_range(module.getOps<func::FuncOp>())) {
      if (fn.isExternal() || !fn.getBody().hasOneBlock())
        continue;
      FunctionFusion(fn, kernels, counter, remarks).run();
    }
    if (fresh && kernels.getBody()->empty())
      kernels.erase();
    (void)ctx;
  }
};

} // namespace
