//===- SearchLayouts.cpp - per-op tensor-parallel shardings by an ILP -----===//
//
// Builds the ShardingProblem of a training step (every op's strategies,
// every variable's layouts, the reshards between them as the partitioner
// makes them), solves it with CBC and writes the decision as attributes:
// variables' shardings and dshard.constraint ops. Propagation is the
// oracle for what an op does with the layouts it sees, so the priced
// program is the one dtcc-shard-propagate and dtcc-shard-partition build.
//
//===----------------------------------------------------------------------===//

#include "passes/Planning/SearchLayouts.h"
#include "passes/Planning/Passes.h"
#include "passes/Sharding/Passes.h"
#include "passes/Sharding/ShardingUtils.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/EquivalenceClasses.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <sstream>

namespace dtcc::planning {
#define GEN_PASS_DEF_PLANSEARCHLAYOUTS
#include "passes/Planning/Passes.h.inc"
} // namespace dtcc::planning

using namespace mlir;
using namespace dtcc;
using namespace dtcc::shard;
using graph::ShardingRule;

namespace {

constexpr double kForbidden = ShardingProblem::kForbidden;

/// A figure as a user writes it (1e+09, 2e-05, 30).
std::string shortest(double x) {
  std::ostringstream os;
  os << x;
  return os.str();
}

RankedTensorType tensorType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

int64_t elementBytes(Type t) {
  Type e = getElementTypeOrSelf(t);
  return e.isIntOrFloat()
             ? std::max<int64_t>(1, (e.getIntOrFloatBitWidth() + 7) / 8)
             : 8;
}

/// Elements of one rank's block of `global` laid out as `s`, or -1 when
/// the layout does not divide it.
int64_t localElements(RankedTensorType global, ShardingAttr s, MeshAttr mesh) {
  auto shape = s.withoutPartial().localShape(global.getShape(), mesh);
  if (failed(shape))
    return -1;
  int64_t n = 1;
  for (int64_t d : *shape)
    n *= d;
  return n;
}

/// One collective a reshard makes, for remarks.
struct Collective {
  std::string kind, axis;
  double bytes = 0, seconds = 0;
};

/// What dtcc-shard-partition's reshard does to bring a value of type
/// `global` from `from` to `to` (see Partition.cpp): partial axes
/// reduce-scattered onto a dimension the target splits next, else
/// all-reduced; axes the target does not split that way gathered,
/// innermost first; added axes sliced (free). Returns its cost in seconds,
/// kForbidden when no reshard can (a partial sum to make, a split that
/// does not divide).
double reshardCost(ShardingAttr from, ShardingAttr to, RankedTensorType global,
                   MeshAttr mesh, const StepCostModel &costs,
                   SmallVectorImpl<Collective> *trace = nullptr) {
  if (from == to)
    return 0;
  if (localElements(global, to, mesh) < 0 ||
      localElements(global, from, mesh) < 0)
    return kForbidden;
  auto plan = planReshard(from, to);
  if (failed(plan))
    return kForbidden;
  double elt = (double)elementBytes(global);
  auto localBytes = [&](ShardingAttr s) {
    double n = elt;
    for (int64_t d = 0; d < global.getRank(); ++d)
      n *= (double)global.getDimSize(d) / (double)axesSize(mesh, s.axesOf(d));
    return n;
  };
  double seconds = 0;
  for (const ReshardStep &step : *plan) {
    int64_t n = mesh.getSize(step.axis.getValue());
    std::string axis = step.axis.str();
    double bytes = 0, s = 0;
    const char *kind = "";
    switch (step.kind) {
    case ReshardStep::Kind::kReduceScatter:
      bytes = localBytes(step.before);
      s = costs.reduceScatter(bytes, n, axis);
      kind = "reduce_scatter";
      break;
    case ReshardStep::Kind::kAllReduce:
      bytes = localBytes(step.before);
      s = costs.allReduce(bytes, n, axis);
      kind = "all_reduce";
      break;
    case ReshardStep::Kind::kAllGather:
      bytes = localBytes(step.after);
      s = costs.allGather(bytes, n, axis);
      kind = "all_gather";
      break;
    case ReshardStep::Kind::kSlice:
      continue; // local
    }
    seconds += s;
    if (trace)
      trace->push_back({kind, axis, bytes, s});
  }
  return seconds;
}

/// The single mesh axis splitting dimension `d` of `s`, or empty (as the
/// partitioner's vocab-parallel forms require).
StringAttr singleSplitAxis(ShardingAttr s, int64_t d) {
  ArrayRef<StringAttr> axes = s.axesOf(d);
  return axes.size() == 1 && s.getDims()[d].getGroups() == 1 ? axes[0]
                                                             : StringAttr();
}

/// An op's own cost under `ins` and `outs`: a matmul's multiply-adds, the
/// bytes any other op reads and writes, the all-reduces of the
/// vocab-parallel cross-entropy and its gradient.
/// Returns the compute and communication seconds, or nullopt when a layout
/// does not divide the op's tensors.
std::optional<std::pair<double, double>>
opCost(Operation *op, ArrayRef<ShardingAttr> ins, ArrayRef<ShardingAttr> outs,
       MeshAttr mesh, const StepCostModel &costs) {
  for (auto [v, s] : llvm::zip(op->getOperands(), ins))
    if (localElements(tensorType(v), s, mesh) < 0)
      return std::nullopt;
  for (auto [v, s] : llvm::zip(op->getResults(), outs))
    if (localElements(tensorType(v), s, mesh) < 0)
      return std::nullopt;
  if (auto cost = dyn_cast<graph::CostOpInterface>(op)) {
    // Each rank's FLOPs: the op's count at its block's shapes (a partial
    // result has the whole shape; its reduction factor split shows in the
    // operands').
    auto local = [&](ValueRange values, ArrayRef<ShardingAttr> shardings) {
      SmallVector<SmallVector<int64_t>> shapes;
      for (auto [v, s] : llvm::zip(values, shardings))
        shapes.push_back(*s.withoutPartial().localShape(
            tensorType(v).getShape(), mesh));
      return shapes;
    };
    return std::make_pair(
        costs.compute(cost.getFlops(local(op->getOperands(), ins),
                                    local(op->getResults(), outs))),
        0.0);
  }
  double moved = 0;
  for (auto [v, s] : llvm::zip(op->getOperands(), ins))
    moved += (double)localElements(tensorType(v), s, mesh) *
             elementBytes(v.getType());
  for (auto [v, s] : llvm::zip(op->getResults(), outs))
    moved += (double)localElements(tensorType(v), s, mesh) *
             elementBytes(v.getType());
  double memory = costs.memory(moved);
  if (isa<graph::CrossEntropyOp, graph::CrossEntropyGradOp>(op)) {
    StringAttr axis = singleSplitAxis(ins[0], 1);
    if (!axis)
      return std::make_pair(memory, 0.0);
    auto logits = tensorType(op->getOperand(0));
    auto local = ins[0].withoutPartial().localShape(logits.getShape(), mesh);
    double rowBytes = (double)(*local)[0] * (double)elementBytes(logits);
    // Row max, sum of exponentials (and, forward, the target's logit).
    int count = isa<graph::CrossEntropyOp>(op) ? 3 : 2;
    return std::make_pair(
        memory, count * costs.allReduce(rowBytes, mesh.getSize(axis.getValue()),
                                        axis.str()));
  }
  return std::make_pair(memory, 0.0);
}

/// One way to run an op: its operands' required layouts and its results'.
struct Strategy {
  SmallVector<ShardingAttr> ins, outs;
  double compute = 0, comm = 0;
  /// Seeing `ins`, propagation picks this strategy: constraints can force it.
  bool idempotent = false;
};

/// A node of the problem: an op (its strategies), a variable group (its
/// layouts) or a fixed source or sink (one choice).
struct NodeInfo {
  Operation *op = nullptr;
  int group = -1;
  SmallVector<Strategy> strategies;
  double weight = 1;
  int id = -1;
};

/// A parameter with its optimizer state and gradient accumulator: one
/// layout for all.
struct VarGroup {
  SmallVector<graph::VariableOp> members;
  SmallVector<ShardingAttr> layouts;
  int node = -1;
  bool used = false; ///< loaded or stored by a searched function
};

struct UseInfo {
  OpOperand *operand;
  int node;
  SmallVector<ShardingAttr> needs; ///< per choice of the node
};

struct ValueInfo {
  int node;
  SmallVector<ShardingAttr> stateOf; ///< per choice of the producer
  double weight = 1;
  SmallVector<int> uses;
  int id = -1;
  SmallVector<ShardingAttr> states; ///< the value's state space
  /// Never resharded: a parameter or optimizer state loaded for its
  /// optimizer, which dtcc-shard-annotate must see as a load.
  bool pinned = false;
};

/// A rule: under a combination of the states of an op's operand values,
/// the strategies it may run.
struct RuleInfo {
  SmallVector<std::pair<Value, ShardingAttr>> when;
  int node;
  SmallVector<int> allowed;
};

class LayoutSearch {
public:
  LayoutSearch(ModuleOp module, MeshAttr mesh, const LayoutSearchOptions &o)
      : module_(module), mesh_(mesh), options_(o),
        tp_(StringAttr::get(module.getContext(), "tp")),
        dp_(StringAttr::get(module.getContext(), "dp")) {}

  FailureOr<LayoutSearchResult> run();

private:
  LogicalResult collectGroups();
  LogicalResult walk(func::FuncOp fn, double weight);
  /// Propagation's step for `op` seeing `seen`.
  FailureOr<OpShardings> oracle(Operation *op, ArrayRef<ShardingAttr> seen);
  /// Adds `s` to `strategies` unless present; returns its index, or -1 when
  /// its layouts do not divide the op's tensors.
  int addStrategy(Operation *op, SmallVector<Strategy> &strategies,
                  const OpShardings &s);
  FailureOr<SmallVector<Strategy>> strategiesOf(Operation *op, int node);
  ShardingAttr withTp(ShardingAttr s, int64_t dim);
  int addNode(NodeInfo n) {
    nodes_.push_back(std::move(n));
    return (int)nodes_.size() - 1;
  }
  void addUse(OpOperand &operand, int node, SmallVector<ShardingAttr> needs) {
    values_[operand.get()].uses.push_back((int)uses_.size());
    uses_.push_back({&operand, node, std::move(needs)});
  }
  ShardingAttr replicated(Value v) {
    return ShardingAttr::replicated(v.getContext(), tensorType(v).getRank());
  }
  static std::string layoutName(ShardingAttr s);
  void materialise(const std::vector<int> &choice, LayoutSearchResult &result,
                   std::optional<double> megatron);

  ModuleOp module_;
  MeshAttr mesh_;
  LayoutSearchOptions options_;
  StringAttr tp_, dp_;
  int64_t tpSize_ = 1;

  SmallVector<VarGroup> groups_;
  llvm::StringMap<int> groupOf_;
  SmallVector<NodeInfo> nodes_;
  llvm::MapVector<Value, ValueInfo> values_;
  SmallVector<UseInfo> uses_;
  SmallVector<RuleInfo> rules_;
  /// The data-parallel layout propagation gives each value (tp unused).
  llvm::DenseMap<Value, ShardingAttr> baseline_;
  /// Per op: the strategy propagation derives from each combination of
  /// its operand values' states.
  llvm::DenseMap<Operation *,
                 SmallVector<std::pair<SmallVector<ShardingAttr>, int>>>
      outcomes_;
};

std::string LayoutSearch::layoutName(ShardingAttr s) {
  for (auto [d, dim] : llvm::enumerate(s.getDims()))
    if (!dim.getAxes().empty()) {
      if (s.getDims().size() == 2)
        return d == 0 ? "rows" : "cols";
      return "dim " + std::to_string(d);
    }
  return "whole";
}

ShardingAttr LayoutSearch::withTp(ShardingAttr s, int64_t dim) {
  SmallVector<DimShardingAttr> dims(s.getDims());
  SmallVector<StringAttr> axes(dims[dim].getAxes());
  axes.push_back(tp_);
  dims[dim] = DimShardingAttr::get(s.getContext(), axes, dims[dim].getGroups());
  return ShardingAttr::get(s.getContext(), dims, s.getPartial());
}

LogicalResult LayoutSearch::collectGroups() {
  llvm::EquivalenceClasses<StringRef> classes;
  for (auto var : module_.getOps<graph::VariableOp>())
    classes.insert(var.getSymName());
  // Optimizer state and accumulators of a parameter's type share its layout
  // (dtcc-shard-annotate's rule for optimizer state).
  module_.walk([&](Operation *op) {
    if (!isa<graph::AdamwOp, graph::SgdOp>(op))
      return;
    auto param = op->getOperand(0).getDefiningOp<graph::LoadOp>();
    if (!param)
      return;
    for (Value v : op->getOperands().drop_front(1))
      if (v.getType() == op->getOperand(0).getType())
        if (auto load = v.getDefiningOp<graph::LoadOp>())
          classes.unionSets(param.getVariable(), load.getVariable());
    std::string acc = (param.getVariable() + "/grad_acc").str();
    if (auto accVar = module_.lookupSymbol<graph::VariableOp>(acc))
      if (accVar.getType() == op->getOperand(0).getType())
        classes.unionSets(param.getVariable(), accVar.getSymName());
  });
  for (auto var : module_.getOps<graph::VariableOp>()) {
    StringRef leader = classes.getLeaderValue(var.getSymName());
    // The group's index, copied: inserting the member's own name may grow
    // the map and move the leader's entry.
    auto [it, inserted] = groupOf_.try_emplace(leader, (int)groups_.size());
    int group = it->second;
    if (inserted)
      groups_.emplace_back();
    groupOf_[var.getSymName()] = group;
    groups_[group].members.push_back(var);
  }
  for (VarGroup &g : groups_) {
    auto type = g.members.front().getTensorType();
    for (auto m : g.members)
      if (m.getTensorType().getShape() != type.getShape())
        return m.emitOpError("shares an optimizer's layout with '")
               << g.members.front().getSymName() << "' but has shape "
               << m.getTensorType() << " (internal error)";
    ShardingAttr whole =
        ShardingAttr::replicated(module_.getContext(), type.getRank());
    g.layouts.push_back(whole);
    for (int64_t d = 0; d < type.getRank(); ++d)
      if (type.getDimSize(d) >= tpSize_ && type.getDimSize(d) % tpSize_ == 0)
        g.layouts.push_back(withTp(whole, d));
    NodeInfo n;
    n.group = &g - groups_.data();
    for (size_t i = 0; i < g.layouts.size(); ++i)
      n.strategies.emplace_back();
    g.node = addNode(std::move(n));
  }
  return success();
}

FailureOr<OpShardings> LayoutSearch::oracle(Operation *op,
                                            ArrayRef<ShardingAttr> seen) {
  SmallVector<bool> weak(op->getNumOperands(), false), sole;
  for (Value v : op->getOperands())
    sole.push_back(
        llvm::all_of(v.getUsers(), [&](Operation *u) { return u == op; }));
  return propagateOp(cast<graph::ShardableOpInterface>(op), seen, weak, sole,
                     mesh_);
}

int LayoutSearch::addStrategy(Operation *op, SmallVector<Strategy> &strategies,
                              const OpShardings &s) {
  for (auto [i, t] : llvm::enumerate(strategies))
    if (ArrayRef<ShardingAttr>(t.ins) == ArrayRef<ShardingAttr>(s.ins) &&
        ArrayRef<ShardingAttr>(t.outs) == ArrayRef<ShardingAttr>(s.outs))
      return (int)i;
  // A dimension made of several factors carries the split of one of them
  // only (see project()): two split factors of one dimension would give
  // the partitioner local types that do not match.
  ShardingRule rule = cast<graph::ShardableOpInterface>(op).getShardingRule();
  for (const auto &tensors : {rule.operands, rule.results})
    for (const ShardingRule::TensorFactors &t : tensors)
      for (const auto &dim : t)
        if (llvm::count_if(dim, [&](int64_t f) {
              return f < (int64_t)s.axes.axes.size() && !s.axes.axes[f].empty();
            }) > 1)
          return -1;
  auto cost = opCost(op, s.ins, s.outs, mesh_, options_.costs);
  if (!cost)
    return -1;
  Strategy t;
  t.ins = s.ins;
  t.outs = s.outs;
  t.compute = cost->first;
  t.comm = cost->second;
  auto again = oracle(op, s.ins);
  t.idempotent =
      succeeded(again) &&
      ArrayRef<ShardingAttr>(again->ins) == ArrayRef<ShardingAttr>(s.ins) &&
      ArrayRef<ShardingAttr>(again->outs) == ArrayRef<ShardingAttr>(s.outs);
  strategies.push_back(std::move(t));
  return (int)strategies.size() - 1;
}

FailureOr<SmallVector<Strategy>> LayoutSearch::strategiesOf(Operation *op,
                                                            int node) {
  MLIRContext *ctx = op->getContext();
  auto shardable = cast<graph::ShardableOpInterface>(op);
  ShardingRule rule = shardable.getShardingRule();
  SmallVector<ShardingAttr> base;
  for (Value v : op->getOperands())
    base.push_back(baseline_.lookup(v));
  auto baseResult = oracle(op, base);
  if (failed(baseResult))
    return failure();
  for (auto [r, s] : llvm::zip(op->getResults(), baseResult->outs))
    baseline_[r] = s;
  SmallVector<Strategy> strategies;
  // No tp: the data-parallel layout.
  addStrategy(op, strategies, *baseResult);
  // tp on one factor, above its dp axes.
  const FactorAxes &axes = baseResult->axes;
  for (auto [f, factor] : llvm::enumerate(rule.factors)) {
    if (factor.kind == ShardingRule::Kind::kReplicated || axes.groups[f] != 1)
      continue;
    if (factor.size % (axesSize(mesh_, axes.axes[f]) * tpSize_) != 0)
      continue;
    FactorAxes split = axes;
    split.axes[f].push_back(tp_);
    SmallVector<ShardingAttr> seen;
    bool appears = false;
    for (auto [i, t] : llvm::enumerate(rule.operands)) {
      ShardingAttr s = project(rule, t, split, /*isResult=*/false, ctx);
      seen.push_back(ShardingAttr::get(ctx, s.getDims(), base[i].getPartial()));
      for (const auto &dim : t)
        appears |= llvm::is_contained(dim, (int64_t)f);
    }
    if (!appears)
      continue; // propagation could not derive it from the operands
    auto result = oracle(op, seen);
    if (failed(result))
      return failure();
    if (llvm::is_contained(result->axes.axes[f], tp_))
      addStrategy(op, strategies, *result);
  }
  // A partial sum over tp passed on, where propagation passes one.
  auto tryPartial = [&](ArrayRef<int64_t> which) -> LogicalResult {
    SmallVector<ShardingAttr> seen(base);
    for (int64_t i : which) {
      SmallVector<StringAttr> partial(base[i].getPartial());
      if (llvm::is_contained(partial, tp_))
        return success();
      partial.push_back(tp_);
      seen[i] = ShardingAttr::get(ctx, base[i].getDims(), partial);
    }
    auto result = oracle(op, seen);
    if (failed(result))
      return failure();
    if (llvm::any_of(result->outs, [&](ShardingAttr s) {
          return llvm::is_contained(s.getPartial(), tp_);
        }))
      addStrategy(op, strategies, *result);
    return success();
  };
  int64_t n = op->getNumOperands();
  if (isa<graph::AddOp, graph::SubOp>(op)) {
    SmallVector<int64_t> all = llvm::to_vector(llvm::seq<int64_t>(0, n));
    if (failed(tryPartial(all)))
      return failure();
  } else {
    for (int64_t i = 0; i < n; ++i) {
      SmallVector<bool> which(n, false);
      which[i] = true;
      if (partialPassesThrough(op, which) && failed(tryPartial({i})))
        return failure();
    }
  }

  // What propagation makes of each combination of its operand values'
  // states (the rules; and strategies the canonical ones miss).
  SmallVector<Value> distinct;
  for (Value v : op->getOperands())
    if (!llvm::is_contained(distinct, v))
      distinct.push_back(v);
  SmallVector<SmallVector<ShardingAttr>> stateSets;
  int64_t combos = 1;
  for (Value v : distinct) {
    SmallVector<ShardingAttr> set;
    for (ShardingAttr s : values_[v].stateOf)
      if (!llvm::is_contained(set, s))
        set.push_back(s);
    combos *= (int64_t)set.size();
    stateSets.push_back(std::move(set));
  }
  constexpr int64_t kMaxCombinations = 4096;
  if (combos > kMaxCombinations) {
    if (!options_.constraints)
      return op->emitOpError("has ")
             << combos << " combinations of its operands' layouts, more than "
             << kMaxCombinations << " the search follows without constraints";
    return strategies;
  }
  auto &outcomes = outcomes_[op];
  SmallVector<int64_t> pick(distinct.size(), 0);
  for (int64_t c = 0; c < combos; ++c) {
    SmallVector<ShardingAttr> combo, seen;
    for (auto [i, v] : llvm::enumerate(distinct))
      combo.push_back(stateSets[i][pick[i]]);
    for (Value v : op->getOperands())
      seen.push_back(combo[llvm::find(distinct, v) - distinct.begin()]);
    auto result = oracle(op, seen);
    if (failed(result))
      return failure();
    outcomes.push_back({combo, addStrategy(op, strategies, *result)});
    for (size_t i = 0; i < pick.size(); ++i) {
      if (++pick[i] < (int64_t)stateSets[i].size())
        break;
      pick[i] = 0;
    }
  }
  for (auto &[combo, index] : outcomes) {
    RuleInfo rule;
    rule.node = node;
    for (auto [v, s] : llvm::zip(distinct, combo))
      rule.when.push_back({v, s});
    for (auto [i, t] : llvm::enumerate(strategies))
      if ((int)i == index || (options_.constraints && t.idempotent))
        rule.allowed.push_back(i);
    // A combination whose layouts do not divide the op's tensors: nothing
    // runs it without a constraint.
    if (rule.allowed.size() < strategies.size())
      rules_.push_back(std::move(rule));
  }
  return strategies;
}

LogicalResult LayoutSearch::walk(func::FuncOp fn, double weight) {
  MLIRContext *ctx = fn.getContext();
  int64_t dpSize = mesh_.getSize("dp");
  int64_t micro = getPlan(module_).getMicroBatchesInStep();
  // Data inputs: the batch over dp (dtcc-shard-annotate's rule).
  for (BlockArgument arg : fn.getArguments()) {
    auto type = tensorType(arg);
    ShardingAttr s = replicated(arg);
    if (dpSize > 1 && type.getRank() > 0 &&
        type.getDimSize(0) % (micro * dpSize) == 0) {
      SmallVector<DimShardingAttr> dims(s.getDims());
      dims[0] = DimShardingAttr::get(ctx, {dp_}, micro);
      s = ShardingAttr::get(ctx, dims, {});
    }
    baseline_[arg] = s;
    NodeInfo n;
    n.strategies.push_back({{}, {s}});
    int node = addNode(std::move(n));
    values_[arg] = {node, {s}, weight};
  }
  for (Operation &op : fn.getBody().front()) {
    if (auto load = dyn_cast<graph::LoadOp>(op)) {
      VarGroup &g = groups_[groupOf_.lookup(load.getVariable())];
      g.used = true;
      baseline_[load.getResult()] = replicated(load.getResult());
      ValueInfo &info = values_[load.getResult()];
      info = {g.node, g.layouts, weight};
      info.pinned = !load.getResult().use_empty() &&
                    llvm::all_of(load.getResult().getUsers(), [](Operation *u) {
                      return isa<graph::AdamwOp, graph::SgdOp>(u);
                    });
      continue;
    }
    if (auto store = dyn_cast<graph::StoreOp>(op)) {
      VarGroup &g = groups_[groupOf_.lookup(store.getVariable())];
      g.used = true;
      addUse(op.getOpOperand(0), g.node, g.layouts);
      continue;
    }
    if (isa<SendOp, RecvOp, WaitOp, AllReduceOp>(op))
      return op.emitOpError("is a pipeline transfer: dtcc-plan-search-layouts "
                            "searches steps without pipeline stages");
    NodeInfo n;
    n.op = &op;
    n.weight = weight;
    if (auto c = dyn_cast<ConstraintOp>(op)) {
      n.strategies.push_back({{c.getSharding()}, {c.getSharding()}});
    } else if (isa<func::ReturnOp>(op)) {
      Strategy s;
      for (Value v : op.getOperands())
        s.ins.push_back(replicated(v));
      n.strategies.push_back(std::move(s));
    } else if (op.getNumOperands() == 0) {
      Strategy s;
      for (Value r : op.getResults())
        s.outs.push_back(replicated(r));
      n.strategies.push_back(std::move(s));
    } else if (!isa<graph::ShardableOpInterface>(op)) {
      return op.emitOpError("has no sharding rule: it cannot be placed on the "
                            "mesh ")
             << mesh_;
    }
    bool search = n.strategies.empty();
    int node = addNode(std::move(n));
    if (search) {
      auto strategies = strategiesOf(&op, node);
      if (failed(strategies))
        return failure();
      if (strategies->empty())
        return op.emitOpError("has no layout its tensors divide into on ")
               << mesh_ << " (internal error)";
      nodes_[node].strategies = std::move(*strategies);
    }
    NodeInfo &info = nodes_[node];
    for (OpOperand &operand : op.getOpOperands()) {
      SmallVector<ShardingAttr> needs;
      for (const Strategy &s : info.strategies)
        needs.push_back(s.ins[operand.getOperandNumber()]);
      addUse(operand, node, std::move(needs));
    }
    for (OpResult r : op.getResults()) {
      SmallVector<ShardingAttr> stateOf;
      for (const Strategy &s : info.strategies)
        stateOf.push_back(s.outs[r.getResultNumber()]);
      if (!baseline_.count(r))
        baseline_[r] = stateOf.front();
      values_[r] = {node, std::move(stateOf), weight};
    }
  }
  return success();
}

FailureOr<LayoutSearchResult> LayoutSearch::run() {
  tpSize_ = mesh_.getSize("tp");
  if (failed(collectGroups()))
    return failure();
  double micro = getPlan(module_).getAccumulationSteps();
  for (auto fn : module_.getOps<func::FuncOp>()) {
    StringRef name = fn.getSymName();
    if (name == "train_step" || name == "apply_step")
      if (failed(walk(fn,
                      name == "train_step" && module_.lookupSymbol("apply_step")
                          ? micro
                          : 1.0)))
        return failure();
  }

  // The problem: nodes, then values with their state spaces, uses, rules.
  ShardingProblem problem;
  for (NodeInfo &n : nodes_) {
    std::vector<double> costs;
    for (const Strategy &s : n.strategies)
      costs.push_back((s.compute + s.comm) * n.weight);
    std::string name = n.op ? n.op->getName().getStringRef().str()
                       : n.group >= 0
                           ? groups_[n.group].members.front().getSymName().str()
                           : "input";
    n.id = problem.addNode(name, costs);
  }
  for (auto &[v, info] : values_) {
    for (ShardingAttr s : info.stateOf)
      if (!llvm::is_contained(info.states, s))
        info.states.push_back(s);
    for (int u : info.uses)
      for (ShardingAttr s : uses_[u].needs)
        if (!llvm::is_contained(info.states, s))
          info.states.push_back(s);
    auto type = tensorType(v);
    std::vector<std::vector<double>> transitions(
        info.states.size(), std::vector<double>(info.states.size(), 0));
    for (auto [a, from] : llvm::enumerate(info.states))
      for (auto [b, to] : llvm::enumerate(info.states))
        if (a != b)
          transitions[a][b] =
              info.pinned ? kForbidden
                          : reshardCost(from, to, type, mesh_, options_.costs) *
                                info.weight;
    auto index = [&](ShardingAttr s) {
      return (int)(llvm::find(info.states, s) - info.states.begin());
    };
    std::vector<int> stateOf;
    for (ShardingAttr s : info.stateOf)
      stateOf.push_back(index(s));
    info.id = problem.addValue(nodes_[info.node].id, stateOf, transitions);
    for (int u : info.uses) {
      std::vector<int> needs;
      for (ShardingAttr s : uses_[u].needs)
        needs.push_back(index(s));
      problem.addUse(info.id, nodes_[uses_[u].node].id, needs);
    }
  }
  for (const RuleInfo &r : rules_) {
    std::vector<std::pair<int, int>> when;
    for (auto [v, s] : r.when) {
      const ValueInfo &info = values_[v];
      when.push_back(
          {info.id, (int)(llvm::find(info.states, s) - info.states.begin())});
    }
    problem.addRule(when, nodes_[r.node].id,
                    std::vector<int>(r.allowed.begin(), r.allowed.end()));
  }

  LayoutSearchResult result;
  result.nodes = problem.numNodes();
  // For the remarks: what the Megatron-style layouts cost in this model.
  std::optional<double> megatron;
  if (options_.remarks) {
    OwningOpRef<ModuleOp> clone(module_.clone());
    PassManager pm(module_.getContext());
    pm.addPass(createShardAnnotate());
    pm.addPass(createShardPropagate());
    if (succeeded(pm.run(*clone)))
      if (auto p = priceShardedStep(*clone, options_.costs); succeeded(p))
        megatron = p->seconds;
  }
  std::string error;
  auto solution = problem.solve(options_.timeLimit, error);
  if (!solution) {
    result.error = error;
    return result;
  }
  result.solved = true;
  result.optimal = solution->optimal;
  result.solveSeconds = solution->solveSeconds;
  result.columns = solution->columns;
  result.rows = solution->rows;
  result.seconds = solution->cost;
  for (const NodeInfo &n : nodes_)
    if (n.op)
      result.computeSeconds +=
          n.strategies[solution->choice[n.id]].compute * n.weight;
  result.commSeconds = result.seconds - result.computeSeconds;
  materialise(solution->choice, result, megatron);
  return result;
}

void LayoutSearch::materialise(const std::vector<int> &choice,
                               LayoutSearchResult &result,
                               std::optional<double> megatron) {
  // Every searched variable's layout goes into the plan, with those already
  // there; dtcc-shard-annotate gives each variable its own.
  PlanAttr plan = getPlan(module_);
  NamedAttrList layouts(plan.getLayouts());
  for (VarGroup &g : groups_) {
    // A variable no searched function reads keeps its whole layout.
    ShardingAttr layout =
        g.used ? g.layouts[choice[nodes_[g.node].id]] : g.layouts.front();
    for (auto var : g.members)
      if (var.getTensorType().getRank() > 0)
        layouts.set(var.getSymNameAttr(), layout);
    if (g.used && g.layouts.size() > 1)
      result.layouts.push_back(
          {g.members.front().getSymName().str(), layoutName(layout)});
    if (options_.remarks && g.used && g.layouts.size() > 1)
      g.members.front().emitRemark("tp layout: ")
          << layoutName(layout) << " (" << layout << ")"
          << (g.members.size() > 1 ? ", with its optimizer state" : "");
  }
  module_->setAttr(kPlanAttr,
                   plan.withLayouts(layouts.getDictionary(module_.getContext())));
  auto stateOf = [&](Value v) {
    const ValueInfo &info = values_[v];
    return info.stateOf[choice[nodes_[info.node].id]];
  };
  // Constraints where an op runs a strategy propagation would not derive
  // from its operands' layouts.
  SmallVector<std::tuple<OpOperand *, ShardingAttr, ShardingAttr>> toConstrain;
  for (const NodeInfo &n : nodes_) {
    if (!n.op || !isa<graph::ShardableOpInterface>(n.op) ||
        n.op->getNumOperands() == 0)
      continue;
    const Strategy &t = n.strategies[choice[n.id]];
    SmallVector<ShardingAttr> seen;
    for (Value v : n.op->getOperands())
      seen.push_back(stateOf(v));
    auto natural = oracle(n.op, seen);
    if (succeeded(natural) &&
        ArrayRef<ShardingAttr>(natural->ins) == ArrayRef<ShardingAttr>(t.ins) &&
        ArrayRef<ShardingAttr>(natural->outs) == ArrayRef<ShardingAttr>(t.outs))
      continue;
    for (OpOperand &operand : n.op->getOpOperands())
      if (seen[operand.getOperandNumber()] != t.ins[operand.getOperandNumber()])
        toConstrain.push_back({&operand, seen[operand.getOperandNumber()],
                               t.ins[operand.getOperandNumber()]});
  }
  // One constraint per value and layout, before its first user that needs
  // it: the partitioner reshards into it once for all of them.
  llvm::DenseMap<std::pair<Value, Attribute>, ConstraintOp> made;
  for (auto [operand, from, to] : toConstrain) {
    Operation *user = operand->getOwner();
    Value v = operand->get();
    ConstraintOp &c = made[{v, to}];
    if (c) {
      if (user->isBeforeInBlock(c))
        c->moveBefore(user);
      operand->set(c.getResult());
      continue;
    }
    OpBuilder b(user);
    c = ConstraintOp::create(b, user->getLoc(), v, to);
    operand->set(c.getResult());
    ++result.constraints;
    if (options_.remarks) {
      SmallVector<Collective> trace;
      double s =
          reshardCost(from, to, tensorType(v), mesh_, options_.costs, &trace);
      auto remark = c.emitRemark("resharded for ")
                    << user->getName() << ": " << from << " -> " << to;
      for (const Collective &coll : trace)
        remark << ", " << coll.kind << " over " << coll.axis << " ("
               << llvm::formatv("{0:f0}", coll.bytes).str() << " bytes)";
      remark << llvm::formatv(", {0:f2} us", s * 1e6).str();
    }
  }
  if (options_.remarks) {
    std::string mesh;
    llvm::raw_string_ostream(mesh) << mesh_;
    module_.emitRemark(
        llvm::formatv("modelled step on {0}: {1:f2} us (compute {2:f2} us, "
                      "collectives {3:f2} us){4}; {5} constraints; "
                      "CBC: {6} columns, {7} rows, {8} in {9:f3} s",
                      mesh, result.seconds * 1e6, result.computeSeconds * 1e6,
                      result.commSeconds * 1e6,
                      megatron ? llvm::formatv(", Megatron-style layouts "
                                               "{0:f2} us",
                                               *megatron * 1e6)
                                     .str()
                               : std::string(),
                      result.constraints, result.columns, result.rows,
                      result.optimal ? "optimal" : "not proven optimal",
                      result.solveSeconds)
            .str());
  }
}

struct PlanSearchLayoutsPass
    : public dtcc::planning::impl::PlanSearchLayoutsBase<PlanSearchLayoutsPass> {
  using PlanSearchLayoutsBase::PlanSearchLayoutsBase;

  void runOnOperation() final {
    LayoutSearchOptions o;
    o.costs.flops = flops;
    o.costs.busBandwidth = bandwidth;
    o.costs.latency = latency;
    o.costs.memoryBandwidth = memoryBandwidth;
    if (tpBandwidth > 0 || tpLatency > 0)
      o.costs.links.push_back({"tp", tpBandwidth > 0 ? tpBandwidth : bandwidth,
                               tpLatency > 0 ? tpLatency : latency});
    if (dpBandwidth > 0 || dpLatency > 0)
      o.costs.links.push_back({"dp", dpBandwidth > 0 ? dpBandwidth : bandwidth,
                               dpLatency > 0 ? dpLatency : latency});
    o.timeLimit = timeLimit;
    o.constraints = constraints;
    o.remarks = remarks;
    auto result = searchLayouts(getOperation(), o);
    if (failed(result))
      return signalPassFailure();
    if (!result->solved)
      getOperation().emitWarning("tp layout search: CBC failed: ")
          << result->error << "; keeping the Megatron-style layouts";
  }
};

} // namespace

FailureOr<LayoutSearchResult>
dtcc::shard::searchLayouts(ModuleOp module,
                           const LayoutSearchOptions &options) {
  PlanAttr plan = getPlan(module);
  if (!plan)
    return module.emitError("expected a module with a dshard.plan (run "
                            "dtcc-plan-set first)");
  MeshAttr mesh = plan.getMesh();
  for (auto [axis, size] : llvm::zip(mesh.getAxes(), mesh.getSizes()))
    if (axis.getValue() != "dp" && axis.getValue() != "tp" && size > 1)
      return module.emitError("mesh axis '")
             << axis.getValue() << "' (size " << size
             << "): the layout search places steps on dp and tp only";
  const StepCostModel &c = options.costs;
  bool links = llvm::all_of(c.links, [](const StepCostModel::Link &l) {
    return l.busBandwidth > 0 && l.latency >= 0;
  });
  if (!(c.flops > 0) || !(c.busBandwidth > 0) || !(c.latency >= 0) ||
      !(c.memoryBandwidth >= 0) || !(options.timeLimit >= 0) || !links)
    return module.emitError("expected positive flops and bandwidth and a "
                            "non-negative latency and time limit, got flops=")
           << shortest(c.flops) << ", bandwidth=" << shortest(c.busBandwidth)
           << ", latency=" << shortest(c.latency)
           << ", time-limit=" << shortest(options.timeLimit);
  if (module->hasAttr(kMeshAttr))
    return module.emitError("the module is already placed on a mesh: "
                            "dtcc-plan-search-layouts runs before "
                            "dtcc-shard-annotate");
  if (!module.lookupSymbol<func::FuncOp>("train_step")) {
    if (module.lookupSymbol<func::FuncOp>("train_step_pp0"))
      return module.emitError("expected a step without pipeline stages "
                              "(@train_step), got @train_step_pp0");
    return module.emitError("a sharded program trains: expected @train_step "
                            "(compile with --train)");
  }
  LayoutSearchResult none;
  if (mesh.getSize("tp") <= 1) {
    none.solved = none.optimal = true;
    return none;
  }
  return LayoutSearch(module, mesh, options).run();
}

FailureOr<ModelledStep>
dtcc::shard::priceShardedStep(ModuleOp module, const StepCostModel &costs) {
  auto mesh = module->getAttrOfType<MeshAttr>(kMeshAttr);
  if (!mesh)
    return module.emitError("expected a module with a dshard.mesh "
                            "(run dtcc-shard-annotate first)");
  PlanAttr plan = getPlan(module);
  double micro = plan ? plan.getAccumulationSteps() : 1;
  ModelledStep out;
  for (auto fn : module.getOps<func::FuncOp>()) {
    double weight =
        fn.getSymName() == "train_step" && module.lookupSymbol("apply_step")
            ? micro
            : 1;
    llvm::MapVector<Value, SmallVector<ShardingAttr>> targets;
    for (Operation &op : fn.getBody().front()) {
      auto ins = op.getAttrOfType<ArrayAttr>(kInShardingsAttr);
      if (!ins)
        return op.emitOpError("has no propagated shardings (run "
                              "dtcc-shard-propagate first)");
      SmallVector<ShardingAttr> in, res;
      for (auto [v, a] : llvm::zip(op.getOperands(), ins)) {
        auto &list = targets[v];
        if (!llvm::is_contained(list, cast<ShardingAttr>(a)))
          list.push_back(cast<ShardingAttr>(a));
        in.push_back(cast<ShardingAttr>(a));
      }
      for (Value r : op.getResults())
        res.push_back(getSharding(r));
      if (isa<graph::ShardableOpInterface>(op) && op.getNumOperands() > 0) {
        auto cost = opCost(&op, in, res, mesh, costs);
        if (!cost)
          return op.emitOpError(
              "has a layout that does not divide its tensors");
        out.computeSeconds += cost->first * weight;
        out.commSeconds += cost->second * weight;
      }
    }
    for (auto &[v, list] : targets) {
      ShardingAttr from = getSharding(v);
      for (ShardingAttr to : list) {
        double s = reshardCost(from, to, tensorType(v), mesh, costs);
        if (std::isinf(s))
          return emitError(v.getLoc(), "cannot reshard ")
                 << from << " to " << to;
        out.commSeconds += s * weight;
      }
    }
  }
  out.seconds = out.computeSeconds + out.commSeconds;
  return out;
}
