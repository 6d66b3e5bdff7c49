//===- Pipeline.cpp - micro-batches and pipeline stages -------------------===//
//
// dtcc-shard-microbatch unrolls a training step over M micro-batches;
// dtcc-shard-pipeline cuts the unrolled step into one function per pipeline
// stage (pp x V chunks of layers, V per stage when interleaved), ordered by
// the plan's schedule (GPipe, 1F1B, interleaved 1F1B, ZB-H1 with each
// backward split into input and weight gradients), with send/recv between
// stages.
//
//===----------------------------------------------------------------------===//

#include "passes/Sharding/Passes.h"
#include "passes/Sharding/ShardingUtils.h"
#include "planner/PipelineSchedule.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/StringExtras.h"

#include <limits>
#include <map>
#include <queue>
#include <tuple>

namespace dtcc::shard {
#define GEN_PASS_DEF_SHARDMICROBATCH
#define GEN_PASS_DEF_SHARDPIPELINE
#include "passes/Sharding/Passes.h.inc"
} // namespace dtcc::shard

using namespace mlir;
using namespace dtcc;
using namespace dtcc::shard;

namespace {

/// Whether dtcc-shard-microbatch tagged `op` as part of a micro-batch's
/// backward pass.
bool inBackward(Operation *op) {
  auto pass = op->getAttrOfType<StringAttr>(kPassAttr);
  return pass && pass.getValue() == "backward";
}

Value splatLike(OpBuilder &b, Location loc, Type type, double v) {
  return graph::ConstantOp::create(
      b, loc, graph::splatOf(cast<RankedTensorType>(type), v));
}

//===----------------------------------------------------------------------===//
// dtcc-shard-microbatch
//===----------------------------------------------------------------------===//

struct ShardMicrobatchPass
    : public dtcc::shard::impl::ShardMicrobatchBase<ShardMicrobatchPass> {
  using ShardMicrobatchBase::ShardMicrobatchBase;

  void runOnOperation() final {
    ModuleOp module = getOperation();
    auto train = module.lookupSymbol<func::FuncOp>("train_step");
    if (!train) {
      module.emitError("expected @train_step (run dtcc-graph-autodiff first)");
      return signalPassFailure();
    }
    PlanAttr plan = getPlan(module);
    if (!plan) {
      module.emitError("expected a module with a dshard.plan (run "
                       "dtcc-plan-set first)");
      return signalPassFailure();
    }
    int64_t m = plan.getMicroBatchesInStep();
    Block &body = train.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    MLIRContext *ctx = module.getContext();

    // The ops that depend on the batch or on a parameter (they run per
    // micro-batch, in the stage of their layer), and those the loss
    // depends on. Parameter loads and constants run once, and so do the
    // half-type copies of the weights (casts of a parameter), in the stages
    // that read them: each micro-batch in flight does not keep a copy of
    // its stage's weights.
    llvm::DenseSet<Operation *> data, forward, weightCopies;
    SymbolTable symbols(module);
    auto isParameter = [&](Operation *def) {
      auto load = dyn_cast_or_null<graph::LoadOp>(def);
      if (!load)
        return false;
      auto var = symbols.lookup<graph::VariableOp>(load.getVariable());
      return var && var.getTrainable();
    };
    auto isWeight = [&](Operation *def) {
      return isParameter(def) || weightCopies.contains(def);
    };
    for (Operation &op : body.without_terminator()) {
      if (isa<graph::CastOp>(op) &&
          isWeight(op.getOperand(0).getDefiningOp())) {
        weightCopies.insert(&op);
        continue;
      }
      if (llvm::any_of(op.getOperands(), [&](Value v) {
            Operation *def = v.getDefiningOp();
            return isa<BlockArgument>(v) || data.contains(def) || isWeight(def);
          }))
        data.insert(&op);
    }
    SmallVector<Value> work{ret.getOperand(0)};
    while (!work.empty()) {
      Operation *def = work.pop_back_val().getDefiningOp();
      if (!def || !data.contains(def) || !forward.insert(def).second)
        continue;
      llvm::append_range(work, def->getOperands());
    }

    // Arguments hold M micro-batches along dimension 0; a scalar (a
    // temperature, a loss weight) has no batch and is the same for every
    // micro-batch, as the trainer feeds it with accumulation.
    for (BlockArgument arg : body.getArguments()) {
      auto t = cast<RankedTensorType>(arg.getType());
      if (t.getRank() == 0)
        continue;
      SmallVector<int64_t> shape(t.getShape());
      shape[0] *= m;
      arg.setType(RankedTensorType::get(shape, t.getElementType()));
    }

    OpBuilder b(ret);
    SmallVector<SmallVector<Value>> results(ret.getNumOperands());
    // The ops cloned per micro-batch, in order (the clones go before the
    // return: walking the block again would walk every earlier
    // micro-batch's clones too, m^2 / 2 ops in all).
    SmallVector<Operation *> perMicroBatch;
    for (Operation &op : body.without_terminator())
      if (data.contains(&op))
        perMicroBatch.push_back(&op);
    for (int64_t i = 0; i < m; ++i) {
      IRMapping map;
      for (BlockArgument arg : body.getArguments()) {
        auto t = cast<RankedTensorType>(arg.getType());
        if (t.getRank() == 0)
          continue; // every micro-batch reads the whole scalar
        int64_t rows = t.getDimSize(0) / m;
        SmallVector<int64_t> start(t.getRank(), 0), limit(t.getShape()),
            stride(t.getRank(), 1);
        start[0] = i * rows;
        limit[0] = (i + 1) * rows;
        map.map(arg, graph::SliceOp::create(b, train.getLoc(), arg, start,
                                            limit, stride));
      }
      for (Operation *op : perMicroBatch) {
        Operation *clone = b.clone(*op, map);
        clone->setAttr(kMicroAttr, b.getI64IntegerAttr(i));
        clone->setAttr(kPassAttr, b.getStringAttr(forward.contains(op)
                                                      ? "forward"
                                                      : "backward"));
      }
      for (auto [r, v] : llvm::enumerate(ret.getOperands()))
        results[r].push_back(map.lookupOrDefault(v));
    }
    // The step's loss and gradients are the means over micro-batches.
    SmallVector<Value> means;
    for (auto [r, values] : llvm::enumerate(results)) {
      Value v = ret.getOperand(r);
      if (!v.getDefiningOp() || !data.contains(v.getDefiningOp())) {
        means.push_back(v);
        continue;
      }
      // At the location of the op that made the value (a gradient's ONNX
      // node), which the collectives that reduce it are then named after.
      Location loc = v.getLoc();
      Value sum = values[0];
      for (Value x : ArrayRef<Value>(values).drop_front())
        sum = graph::AddOp::create(b, loc, sum, x);
      if (m > 1)
        sum = graph::MulOp::create(b, loc, sum,
                                   splatLike(b, loc, sum.getType(), 1.0 / m));
      means.push_back(sum);
    }
    ret->setOperands(means);
    for (Operation *op : llvm::reverse(perMicroBatch))
      op->erase();
    train.setType(FunctionType::get(ctx, body.getArgumentTypes(),
                                    ret.getOperandTypes()));
  }
};

//===----------------------------------------------------------------------===//
// dtcc-shard-pipeline
//===----------------------------------------------------------------------===//

/// How a value of the step is placed across stages.
struct Placement {
  enum Kind { kReplicated, kStage, kPartial } kind = kReplicated;
  int64_t stage = 0;
};

struct ShardPipelinePass
    : public dtcc::shard::impl::ShardPipelineBase<ShardPipelinePass> {
  using ShardPipelineBase::ShardPipelineBase;

  void runOnOperation() final;

private:
  LogicalResult place(func::FuncOp train);
  void liftCrossStageSums(Block &body);
  LogicalResult emitStage(func::FuncOp train, int64_t stage);
  SmallVector<int64_t> balanceStages(Block &body, ArrayRef<std::string> layers,
                                     int64_t stages);

  int64_t numStages() const { return stages_; }
  /// Layer chunks: pp x V, chunk k on stage k % pp (Megatron-LM's virtual
  /// stage k).
  int64_t numChunks() const { return stages_ * virtualStages_; }
  /// How the ops are grouped into the units the stages take, each mode
  /// tried in turn while the last gave at most one unit (no sequence to
  /// cut): layers (#dgraph.layer index); top-level modules (#dgraph.layer
  /// module: a U-Net's enc1, enc2, ...); where one module wraps every named
  /// op, the modules inside it (by their ONNX node names: "/m/stage2/...",
  /// "/m/stage3/..." of timm's HRNet in a wrapper, whose repeated blocks
  /// restart their numbering in each stage, so it has one layer and one
  /// top-level module).
  enum class Units { kLayers, kTopModules, kSubModules };
  /// The unit of an op: its layer's index, its top-level module, or its
  /// module below the shared path; empty for none.
  std::string layerOf(Operation *op) const {
    switch (units_) {
    case Units::kLayers: {
      std::optional<int64_t> layer = graph::layerIndexOf(op);
      return layer ? std::to_string(*layer) : "";
    }
    case Units::kTopModules:
      return graph::moduleOf(op).str();
    case Units::kSubModules:
      return subModuleOf(op);
    }
    return "";
  }
  /// The components of an op's ONNX node name ("/m/stage2/stage2.0/Conv":
  /// m, stage2, stage2.0, Conv), pointing into `name`.
  static SmallVector<StringRef> pathOf(const std::string &name) {
    SmallVector<StringRef> parts;
    StringRef(name).split(parts, '/', -1, /*KeepEmpty=*/false);
    return parts;
  }
  /// kSubModules' unit: the shared path and the component after it, for
  /// an op whose node lies deeper than that (the last component names the
  /// node itself).
  std::string subModuleOf(Operation *op) const {
    std::string name = graph::nodeName(op->getLoc());
    SmallVector<StringRef> parts = pathOf(name);
    if (parts.size() < sharedDepth_ + 2)
      return "";
    return llvm::join(ArrayRef<StringRef>(parts).take_front(sharedDepth_ + 1),
                      "/");
  }
  /// The number of leading path components that every forward op of the
  /// first micro-batch whose node name has a module (two or more
  /// components) shares; sets sharedDepth_.
  void findSharedPath(Block &body);
  /// The tasks of `stage` in the plan's schedule order.
  std::vector<planner::PipelineTask> schedule(int64_t stage) const;
  /// ZB-H1: splits each micro-batch's backward ops on each stage into B, those
  /// the input gradients sent to earlier stages depend on, and W, the rest
  /// (the weight gradients), into weightOps_.
  void splitBackward(Block &body);
  /// The task `op` belongs to in its stage's schedule: its micro-batch,
  /// its chunk on the stage, its pass and (ZB-H1's backward) whether it is
  /// W; none for an op of no micro-batch.
  using TaskKey = std::tuple<int64_t, int64_t, bool, bool>;
  std::optional<std::pair<int64_t, TaskKey>> taskOf(Operation &op) const;
  /// Gathers the ops emitStage clones in one walk of the step, after place
  /// (and splitBackward): walking the whole unrolled step several times
  /// for each stage grew with stages x layers x micro-batches.
  void gatherStageOps(Block &body);
  static TaskKey keyOf(const planner::PipelineTask &task) {
    return {task.microBatch, task.chunk, task.backward, task.weight};
  }

  int64_t microBatches_ = 1;
  /// The plan's pp, chunks per stage and schedule.
  int64_t stages_ = 1;
  int64_t virtualStages_ = 1;
  PipelineSchedule schedule_ = PipelineSchedule::OneFOneB;
  Units units_ = Units::kLayers;
  size_t sharedDepth_ = 0;
  /// Each op's stage (ops of the micro-batches and staged epilogue ops),
  /// its chunk (micro-batch ops), and the placement of each value.
  llvm::DenseMap<Operation *, int64_t> stageOf_, chunkOf_;
  /// ZB-H1: the backward ops that compute weight gradients only (W).
  llvm::DenseSet<Operation *> weightOps_;
  llvm::DenseMap<Value, Placement> placement_;
  llvm::DenseSet<Operation *> prologue_, epilogue_;
  /// The prologue in program order, the epilogue ops each stage runs (in
  /// program order; those of no one stage in every stage's list), and each
  /// stage's ops of each task (in program order).
  SmallVector<Operation *> prologueOps_;
  std::vector<SmallVector<Operation *>> epilogueOps_;
  std::vector<std::map<TaskKey, SmallVector<Operation *>>> taskOps_;
  /// Values sent between stages: (value, destination) -> tag.
  std::map<std::pair<void *, int64_t>, int64_t> tags_;
  /// The sends of `v` in tags_, by destination stage (one search instead
  /// of one per stage: the stages' clones asked for every result).
  llvm::iterator_range<std::map<std::pair<void *, int64_t>, int64_t>::const_iterator>
  sendsOf(Value v) const {
    void *key = v.getAsOpaquePointer();
    return llvm::make_range(
        tags_.lower_bound({key, std::numeric_limits<int64_t>::min()}),
        tags_.upper_bound({key, std::numeric_limits<int64_t>::max()}));
  }
  int64_t handle_ = 1 << 20;
};

std::vector<planner::PipelineTask>
ShardPipelinePass::schedule(int64_t stage) const {
  planner::Schedule kind = planner::Schedule::k1F1B;
  switch (schedule_) {
  case PipelineSchedule::GPipe:
    kind = planner::Schedule::kGPipe;
    break;
  case PipelineSchedule::OneFOneB:
    kind = planner::Schedule::k1F1B;
    break;
  case PipelineSchedule::Interleaved:
    kind = planner::Schedule::kInterleaved;
    break;
  case PipelineSchedule::ZeroBubbleH1:
    kind = planner::Schedule::kZeroBubbleH1;
    break;
  }
  return planner::pipelineOrder(kind, numStages(), microBatches_,
                                virtualStages_, stage);
}

std::optional<std::pair<int64_t, ShardPipelinePass::TaskKey>>
ShardPipelinePass::taskOf(Operation &op) const {
  auto m = op.getAttrOfType<IntegerAttr>(kMicroAttr);
  if (!m)
    return std::nullopt;
  int64_t chunk = chunkOf_.lookup(&op);
  bool backward =
      op.getAttrOfType<StringAttr>(kPassAttr).getValue() != "forward";
  bool weight = schedule_ == PipelineSchedule::ZeroBubbleH1 && backward &&
                weightOps_.contains(&op);
  return std::make_pair(chunk % numStages(),
                        TaskKey{m.getInt(), chunk / numStages(), backward,
                                weight});
}

void ShardPipelinePass::gatherStageOps(Block &body) {
  prologueOps_.clear();
  epilogueOps_.assign(numStages(), {});
  taskOps_.assign(numStages(), {});
  for (Operation &op : body.without_terminator()) {
    if (prologue_.contains(&op)) {
      prologueOps_.push_back(&op);
    } else if (epilogue_.contains(&op)) {
      // Its stage: its result's, or a stage's own op without results (a
      // store); every stage's otherwise. Each stage asked of every op
      // before (pp x the step's state updates).
      Placement p =
          op.getNumResults() ? placement_.lookup(op.getResult(0)) : Placement();
      int64_t stage = -1;
      if (p.kind == Placement::kStage)
        stage = p.stage;
      else if (auto it = stageOf_.find(&op);
               op.getNumResults() == 0 && it != stageOf_.end())
        stage = it->second;
      for (int64_t k = 0; k < numStages(); ++k)
        if (stage < 0 || stage == k)
          epilogueOps_[k].push_back(&op);
    } else if (auto task = taskOf(op))
      taskOps_[task->first][task->second].push_back(&op);
  }
}

void ShardPipelinePass::splitBackward(Block &body) {
  // Per (micro-batch, stage): the backward ops whose results another stage
  // receives seed B; B is everything of that backward they depend on.
  llvm::DenseSet<Operation *> critical;
  SmallVector<Operation *> work;
  auto backwardOf = [&](Operation *op) {
    return op && op->hasAttr(kMicroAttr) && inBackward(op);
  };
  for (Operation &op : body) {
    if (!backwardOf(&op))
      continue;
    for (Value r : op.getResults())
      if (!sendsOf(r).empty() && critical.insert(&op).second)
        work.push_back(&op);
  }
  while (!work.empty()) {
    Operation *op = work.pop_back_val();
    for (Value v : op->getOperands()) {
      Operation *def = v.getDefiningOp();
      if (backwardOf(def) && stageOf_.lookup(def) == stageOf_.lookup(op) &&
          def->getAttr(kMicroAttr) == op->getAttr(kMicroAttr) &&
          critical.insert(def).second)
        work.push_back(def);
    }
  }
  for (Operation &op : body)
    if (backwardOf(&op) && !critical.contains(&op))
      weightOps_.insert(&op);
}

/// The cost of an op for balancing stages: its FLOPs (matrix products and
/// convolutions, dgraph's CostOpInterface), else the elements it writes.
static double opCost(Operation &op) {
  if (isa<graph::CostOpInterface>(op))
    return graph::flopsOf(&op);
  double c = 0;
  for (Value r : op.getResults())
    if (auto t = dyn_cast<RankedTensorType>(r.getType()))
      c += (double)t.getNumElements();
  return c;
}

/// Cuts `layers` into `stages` contiguous runs minimizing the costliest
/// stage, counting the ops of micro-batch 0 (all micro-batches are alike):
/// each layer's forward and backward ops, and the ops outside layers on the
/// stage where they run (embeddings on the first, the head and loss on the
/// last). Returns the first layer of each stage.
SmallVector<int64_t> ShardPipelinePass::balanceStages(
    Block &body, ArrayRef<std::string> layers, int64_t stages) {
  int64_t n = layers.size();
  SmallVector<double> cost(n, 0.0);
  double head = 0, tail = 0;
  llvm::StringMap<int64_t> index;
  for (auto [i, k] : llvm::enumerate(layers))
    index[k] = i;
  // Position of each op among its pass's ops, to tell ops before the layers
  // from ops after them.
  for (bool forward : {true, false}) {
    SmallVector<Operation *> ops;
    for (Operation &op : body)
      if (auto m = op.getAttrOfType<IntegerAttr>(kMicroAttr);
          m && m.getInt() == 0 &&
          (op.getAttrOfType<StringAttr>(kPassAttr).getValue() == "forward") ==
              forward)
        ops.push_back(&op);
    bool seenLayer = false;
    for (Operation *op : ops) {
      std::string k = layerOf(op);
      if (!k.empty() && index.count(k)) {
        cost[index[k]] += opCost(*op);
        seenLayer = true;
      } else if (seenLayer == forward) {
        tail += opCost(*op); // after the layers going forward, before going back
      } else {
        head += opCost(*op);
      }
    }
  }
  // best[s][j]: the least possible costliest stage when stages 0..s hold
  // layers 0..j-1.
  SmallVector<double> prefix(n + 1, 0.0);
  for (int64_t i = 0; i < n; ++i)
    prefix[i + 1] = prefix[i] + cost[i];
  auto runCost = [&](int64_t s, int64_t from, int64_t to) {
    return prefix[to] - prefix[from] + (s == 0 ? head : 0) +
           (s == stages - 1 ? tail : 0);
  };
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages, std::vector<double>(n + 1, inf));
  std::vector<std::vector<int64_t>> cut(stages, std::vector<int64_t>(n + 1, 0));
  for (int64_t j = 1; j <= n; ++j)
    best[0][j] = runCost(0, 0, j);
  for (int64_t s = 1; s < stages; ++s)
    for (int64_t j = s + 1; j <= n; ++j)
      for (int64_t i = s; i < j; ++i) {
        double c = std::max(best[s - 1][i], runCost(s, i, j));
        if (c < best[s][j]) {
          best[s][j] = c;
          cut[s][j] = i;
        }
      }
  SmallVector<int64_t> first(stages, 0);
  for (int64_t s = stages - 1, j = n; s > 0; --s) {
    first[s] = cut[s][j];
    j = first[s];
  }
  return first;
}

/// A parameter several stages read (tied embeddings: the token embedding on
/// the first stage, the output head on the last) gets a gradient term on
/// each, which autodiff sums within the micro-batch. Placed on one stage,
/// that sum would receive the whole gradient from the others every
/// micro-batch and leave the other stages with a stale parameter. Instead
/// the sum leaves the micro-batch: each stage accumulates its own terms
/// over the micro-batches, the sum is partial over pp and completed once
/// per step where the optimizer reads it (Megatron-LM's embedding
/// all-reduce), and every stage applies the same update to its copy.
/// A lifted sum is a backward AddOp of the micro-batches whose operands
/// come from more than one stage and whose users are all after the
/// micro-batches (or lifted sums).
/// Under mixed precision the half-type sum is widened (to the fp32 master
/// gradient) within the micro-batch: each term is widened on its own stage
/// instead, and the widened terms are summed.
void ShardPipelinePass::liftCrossStageSums(Block &body) {
  auto isBackwardSum = [](Operation *op) {
    return isa<graph::AddOp>(op) && op->hasAttr(kMicroAttr) && inBackward(op);
  };
  auto stageOfValue = [&](Value v) -> std::optional<int64_t> {
    auto it = stageOf_.find(v.getDefiningOp());
    if (it == stageOf_.end())
      return std::nullopt;
    return it->second;
  };
  SmallVector<std::pair<Operation *, graph::CastOp>> widened;
  for (Operation &op : body) {
    if (!isBackwardSum(&op) || !op.hasOneUse())
      continue;
    auto widen = dyn_cast<graph::CastOp>(*op.getUsers().begin());
    if (!widen || !widen->hasAttr(kMicroAttr))
      continue;
    std::optional<int64_t> a = stageOfValue(op.getOperand(0)),
                           b = stageOfValue(op.getOperand(1));
    if (a && b && *a != *b)
      widened.push_back({&op, widen});
  }
  for (auto [add, widen] : widened) {
    Operation &op = *add;
    OpBuilder builder(&op);
    SmallVector<Value, 2> terms;
    for (Value v : op.getOperands()) {
      Operation *def = v.getDefiningOp();
      auto cast = graph::CastOp::create(builder, widen.getLoc(),
                                        widen.getType(), v);
      for (StringRef attr : {kMicroAttr, kPassAttr})
        cast->setAttr(attr, widen->getAttr(attr));
      if (Attribute layer = def->getAttr(graph::kLayerAttr))
        cast->setAttr(graph::kLayerAttr, layer);
      chunkOf_[cast] = chunkOf_.lookup(def);
      stageOf_[cast] = stageOf_.lookup(def);
      terms.push_back(cast);
    }
    auto sum = graph::AddOp::create(builder, op.getLoc(), terms[0], terms[1]);
    sum->setAttrs(op.getAttrDictionary());
    chunkOf_[sum] = chunkOf_.lookup(&op);
    stageOf_[sum] = stageOf_.lookup(&op);
    widen.replaceAllUsesWith(sum.getResult());
    chunkOf_.erase(widen);
    stageOf_.erase(widen);
    chunkOf_.erase(&op);
    stageOf_.erase(&op);
    widen.erase();
    op.erase();
  }
  // Candidates by their users, users first.
  llvm::DenseSet<Operation *> candidates;
  for (Operation &op : llvm::reverse(body))
    if (isBackwardSum(&op) &&
        llvm::all_of(op.getUsers(), [&](Operation *user) {
          return !user->hasAttr(kMicroAttr) || candidates.contains(user);
        }))
      candidates.insert(&op);
  // The stages of each candidate's terms, operands first.
  llvm::DenseMap<Operation *, SmallVector<int64_t, 2>> stagesOf;
  SmallVector<Operation *> lifted;
  for (Operation &op : body) {
    if (!candidates.contains(&op))
      continue;
    SmallVector<int64_t, 2> &stages = stagesOf[&op];
    for (Value v : op.getOperands()) {
      Operation *def = v.getDefiningOp();
      SmallVector<int64_t, 2> terms;
      if (auto it = stagesOf.find(def); it != stagesOf.end())
        terms = it->second;
      else if (auto st = stageOf_.find(def); st != stageOf_.end())
        terms.push_back(st->second);
      for (int64_t t : terms)
        if (!llvm::is_contained(stages, t))
          stages.push_back(t);
    }
    if (stages.size() > 1)
      lifted.push_back(&op);
  }
  for (Operation *op : lifted) {
    op->removeAttr(kMicroAttr);
    op->removeAttr(kPassAttr);
    chunkOf_.erase(op);
    stageOf_.erase(op);
  }
}

void ShardPipelinePass::findSharedPath(Block &body) {
  std::optional<SmallVector<std::string>> shared;
  for (Operation &op : body) {
    auto pass = op.getAttrOfType<StringAttr>(kPassAttr);
    auto micro = op.getAttrOfType<IntegerAttr>(kMicroAttr);
    if (!pass || pass.getValue() != "forward" || !micro || micro.getInt() != 0)
      continue;
    const std::string name = graph::nodeName(op.getLoc());
    SmallVector<StringRef> parts = pathOf(name);
    if (parts.size() < 2)
      continue;       // a node of the root module, or none
    parts.pop_back(); // the node itself
    if (!shared) {
      shared.emplace(parts.begin(), parts.end());
      continue;
    }
    size_t n = 0;
    while (n < shared->size() && n < parts.size() && (*shared)[n] == parts[n])
      ++n;
    shared->resize(n);
  }
  sharedDepth_ = shared ? shared->size() : 0;
}

LogicalResult ShardPipelinePass::place(func::FuncOp train) {
  Block &body = train.getBody().front();
  int64_t s = numStages();
  // Layers (#dgraph.layer), in the order the forward pass meets them, cut
  // into contiguous runs of balanced cost. A model without layers (a
  // U-Net's enc1, enc2, mid, ...) is cut between its top-level modules.
  auto collect = [&] {
    SmallVector<std::string> keys;
    for (Operation &op : body)
      if (auto pass = op.getAttrOfType<StringAttr>(kPassAttr);
          pass && pass.getValue() == "forward" &&
          op.getAttrOfType<IntegerAttr>(kMicroAttr).getInt() == 0)
        if (std::string k = layerOf(&op);
            !k.empty() && !llvm::is_contained(keys, k))
          keys.push_back(k);
    return keys;
  };
  int64_t chunks = numChunks();
  findSharedPath(body);
  // The layers, unless there are fewer than two (a sequence of one cannot
  // be cut): then the top-level modules, and where one module wraps every
  // named op, the modules inside it; whichever gives more units.
  SmallVector<std::string> layers = collect();
  SmallVector<size_t> counts = {layers.size()};
  for (Units next : {Units::kTopModules, Units::kSubModules}) {
    if (layers.size() >= 2 || (next == Units::kSubModules && sharedDepth_ == 0))
      break;
    Units previous = units_;
    units_ = next;
    SmallVector<std::string> more = collect();
    counts.push_back(more.size());
    if (more.size() > layers.size())
      layers = std::move(more);
    else
      units_ = previous;
  }
  const char *what = units_ == Units::kSubModules
                         ? " modules inside the module that wraps the rest"
                     : units_ == Units::kTopModules
                         ? " top-level modules and no layers (#dgraph.layer "
                           "module and index)"
                         : " (#dgraph.layer index)";
  if (virtualStages_ == 1 && (int64_t)layers.size() < s) {
    InFlightDiagnostic d = train.emitError("pipeline parallelism over ")
                           << s
                           << " stages needs at least as many layers; the "
                              "model has "
                           << layers.size() << what;
    if (counts.size() == 3)
      d << " (layers: " << counts[0] << ", top-level modules: " << counts[1]
        << ", modules inside the module that wraps the rest: " << counts[2]
        << ")";
    return d;
  }
  // Interleaved: Megatron-LM's equal chunks (the planner prices them so).
  if (virtualStages_ > 1 && (int64_t)layers.size() % chunks != 0)
    return train.emitError("the interleaved schedule cuts the layers into pp x "
                           "virtual_stages = ")
           << s << " x " << virtualStages_ << " = " << chunks
           << " chunks of equal size: expected a number of layers divisible "
              "by "
           << chunks << ", the model has " << layers.size() << what;
  llvm::StringMap<int64_t> layerChunk;
  SmallVector<int64_t> firstLayerOf = balanceStages(body, layers, chunks);
  for (auto [chunk, first] : llvm::enumerate(firstLayerOf)) {
    int64_t end = chunk + 1 < firstLayerOf.size() ? firstLayerOf[chunk + 1]
                                                  : (int64_t)layers.size();
    for (int64_t i = first; i < end; ++i)
      layerChunk[layers[i]] = chunk;
  }

  // Micro-batch ops: their layer's chunk. An op outside the layers (an
  // attention core or an add written in the model's own forward) follows
  // its operands: a forward op their last chunk. Its backward ops belong
  // with it, as a layer's do: a backward op that reads forward values (the
  // VJP of a product reads its operands) goes to their last chunk, one that
  // reads gradients alone (a sum of gradient terms, a reduction to a
  // broadcast parameter's shape) to its operands' first. Gradients then
  // flow back towards the stage that read the parameter, which updates it
  // (the operands' last would put a parameter's gradient on a later stage
  // than its forward reads: stage 0 would read a parameter stage 1 updates).
  auto isForward = [](Operation *op) { return !inBackward(op); };
  llvm::DenseSet<Operation *> unlabelledBackward;
  // The chunks of the forward ops outside the layers, by ONNX node: their
  // VJPs carry the node's location, and a backward op of one node's
  // forward ops goes with them (a downsampling convolution between two
  // stages' layers: reading only gradients from the later stage, it would
  // otherwise go there, and its weight be updated in a later stage than
  // the one reading it). A node whose forward ops span chunks (-1) says
  // nothing.
  llvm::DenseMap<Location, int64_t> forwardChunkOfNode;
  for (Operation &op : body) {
    if (!op.hasAttr(kMicroAttr))
      continue;
    int64_t chunk = -1;
    if (std::string k = layerOf(&op); !k.empty()) {
      chunk = layerChunk.lookup(k);
    } else if (isForward(&op)) {
      for (Value v : op.getOperands())
        if (auto it = chunkOf_.find(v.getDefiningOp()); it != chunkOf_.end())
          chunk = std::max(chunk, it->second);
      if (chunk >= 0 && !graph::nodeName(op.getLoc()).empty()) {
        auto [it, inserted] =
            forwardChunkOfNode.try_emplace(op.getLoc(), chunk);
        if (!inserted && it->second != chunk)
          it->second = -1;
      }
    } else if (auto it = forwardChunkOfNode.find(op.getLoc());
               it != forwardChunkOfNode.end() && it->second >= 0) {
      unlabelledBackward.insert(&op);
      chunk = it->second;
    } else {
      unlabelledBackward.insert(&op);
      int64_t lastForward = -1, firstBackward = INT64_MAX;
      for (Value v : op.getOperands()) {
        auto it = chunkOf_.find(v.getDefiningOp());
        if (it == chunkOf_.end())
          continue;
        if (isForward(v.getDefiningOp()))
          lastForward = std::max(lastForward, it->second);
        else
          firstBackward = std::min(firstBackward, it->second);
      }
      chunk = lastForward >= 0            ? lastForward
              : firstBackward != INT64_MAX ? firstBackward
                                           : -1;
    }
    if (chunk >= 0)
      chunkOf_[&op] = chunk;
  }
  // Gradients only flow to the same or earlier stages: a backward op outside
  // the layers runs no earlier than the backward ops that read it (users
  // first, so that a raised op raises what it reads).
  for (Operation &op : llvm::reverse(body)) {
    if (!unlabelledBackward.contains(&op) || !chunkOf_.count(&op))
      continue;
    int64_t &chunk = chunkOf_[&op];
    for (Operation *user : op.getUsers())
      if (!isForward(user))
        if (auto it = chunkOf_.find(user); it != chunkOf_.end())
          chunk = std::max(chunk, it->second);
  }
  // Ops that say nothing (a reshape of the labels) go where they are read.
  for (Operation &op : llvm::reverse(body)) {
    if (!op.hasAttr(kMicroAttr) || chunkOf_.count(&op))
      continue;
    int64_t chunk = INT64_MAX;
    for (Operation *user : op.getUsers())
      if (auto it = chunkOf_.find(user); it != chunkOf_.end())
        chunk = std::min(chunk, it->second);
    chunkOf_[&op] = chunk == INT64_MAX ? 0 : chunk;
  }
  for (auto [op, chunk] : chunkOf_)
    stageOf_[op] = chunk % s;
  liftCrossStageSums(body);
  for (Operation &op : body)
    if (op.hasAttr(kMicroAttr))
      for (Value r : op.getResults())
        placement_[r] = {Placement::kStage, stageOf_[&op]};
  // The rest: before the micro-batches (what they read: parameters,
  // constants, the inputs' slices) every stage computes alike; after them
  // (accumulation, the optimizer) an op runs in the stage of its operands,
  // sums of values of several stages are partial over pp.
  for (Operation &op : body.without_terminator()) {
    if (op.hasAttr(kMicroAttr))
      continue;
    bool late = false;
    SmallVector<int64_t> stagesSeen;
    bool partial = false;
    for (Value v : op.getOperands()) {
      Placement p = placement_.lookup(v);
      if (Operation *def = v.getDefiningOp();
          def && (def->hasAttr(kMicroAttr) || epilogue_.contains(def)))
        late = true;
      if (p.kind == Placement::kStage && !llvm::is_contained(stagesSeen, p.stage))
        stagesSeen.push_back(p.stage);
      partial |= p.kind == Placement::kPartial;
    }
    if (!late) {
      prologue_.insert(&op);
      continue;
    }
    epilogue_.insert(&op);
    Placement p;
    bool sum = isa<graph::AddOp>(op);
    if (partial && sum) {
      p.kind = Placement::kPartial;
    } else if (stagesSeen.size() > 1) {
      if (!sum)
        return op.emitOpError("combines values of pipeline stages ")
               << stagesSeen[0] << " and " << stagesSeen[1]
               << " in a way dtcc cannot split (only sums can be)";
      p.kind = Placement::kPartial;
    } else if (stagesSeen.size() == 1 && !partial) {
      p = {Placement::kStage, stagesSeen[0]};
    } // else: replicated, or made whole from a partial sum
    if (p.kind == Placement::kStage)
      stageOf_[&op] = p.stage;
    for (Value r : op.getResults())
      placement_[r] = p;
  }
  // Tags of the values that cross stages, in program order.
  int64_t tag = 0;
  for (Operation &op : body)
    if (op.hasAttr(kMicroAttr))
      for (Value r : op.getResults()) {
        SmallVector<int64_t> dests;
        for (Operation *user : r.getUsers())
          if (auto it = stageOf_.find(user);
              it != stageOf_.end() && it->second != stageOf_[&op] &&
              !llvm::is_contained(dests, it->second))
            dests.push_back(it->second);
        llvm::sort(dests);
        for (int64_t d : dests)
          tags_[{r.getAsOpaquePointer(), d}] = tag++;
      }
  return success();
}

LogicalResult ShardPipelinePass::emitStage(func::FuncOp train, int64_t stage) {
  MLIRContext *ctx = train.getContext();
  OpBuilder mb(train);
  // The signature and attributes are cloned; the body is built below (a
  // whole clone, erased again, cost every stage the step's full body).
  auto fn = cast<func::FuncOp>(mb.insert(train->cloneWithoutRegions()));
  fn.setSymName(("train_step_pp" + Twine(stage)).str());
  fn->setAttr(kStageAttr, IntegerAttr::get(IntegerType::get(ctx, 64), stage));
  Block &old = train.getBody().front();
  Block &body = *fn.addEntryBlock();
  IRMapping map;
  for (auto [a, b] : llvm::zip(old.getArguments(), body.getArguments()))
    map.map(a, b);
  OpBuilder b = OpBuilder::atBlockEnd(&body);
  auto i64 = IntegerType::get(ctx, 64);
  SmallVector<Value> sent;
  llvm::DenseMap<Value, Value> received, whole;

  // The value of `v` here: its clone, received from its stage, or zero
  // where another stage holds a term of a partial sum.
  auto operand = [&](Value v, Operation *user) -> Value {
    Placement p = placement_.lookup(v);
    if (p.kind == Placement::kStage && p.stage != stage) {
      Operation *def = v.getDefiningOp();
      if (def && def->hasAttr(kMicroAttr) && !epilogue_.contains(user)) {
        auto it = received.find(v);
        if (it != received.end())
          return it->second;
        int64_t tag = tags_.at({v.getAsOpaquePointer(), stage});
        auto recv = RecvOp::create(b, v.getLoc(), v.getType(), "pp",
                                   p.stage - stage, tag);
        if (auto pass = def->getAttrOfType<StringAttr>(kPassAttr))
          recv->setAttr("phase", pass);
        Value r = recv;
        return received[v] = r;
      }
      return splatLike(b, v.getLoc(), v.getType(), 0.0);
    }
    // A term of a sum over pp that every stage holds whole is added by
    // the first stage only.
    if (p.kind == Placement::kReplicated && stage != 0 &&
        isa<graph::AddOp>(user) && epilogue_.contains(user) &&
        placement_.lookup(user->getResult(0)).kind == Placement::kPartial)
      return splatLike(b, v.getLoc(), v.getType(), 0.0);
    Value local = map.lookupOrDefault(v);
    // A partial sum read by anything but a sum is completed first.
    if (p.kind == Placement::kPartial &&
        placement_.lookup(user->getNumResults() ? user->getResult(0) : Value())
                .kind != Placement::kPartial) {
      auto it = whole.find(v);
      if (it != whole.end())
        return it->second;
      auto sum = AllReduceOp::create(b, v.getLoc(), local.getType(), local,
                                     "pp", "sum");
      sum->setAttr("phase", b.getStringAttr("optimizer"));
      return whole[v] = sum;
    }
    return local;
  };
  // The gradient sums over micro-batches (below) waiting for operands: by
  // operand, the sums (indices into `sums`) that read it; per sum, how
  // many of its operands are not cloned yet; the sums ready to clone.
  llvm::DenseMap<Value, SmallVector<size_t, 1>> waiting;
  SmallVector<int64_t> missing;
  std::priority_queue<size_t, std::vector<size_t>, std::greater<size_t>> ready;
  auto cloneOp = [&](Operation &op) -> Operation * {
    SmallVector<Value> operands;
    for (Value v : op.getOperands())
      operands.push_back(operand(v, &op));
    Operation *clone = b.clone(op, map);
    clone->setOperands(operands);
    for (auto [r, c] : llvm::zip(op.getResults(), clone->getResults())) {
      map.map(r, c);
      if (auto it = waiting.find(r); it != waiting.end()) {
        for (size_t i : it->second)
          if (--missing[i] == 0)
            ready.push(i);
        waiting.erase(it);
      }
    }
    clone->removeAttr(kMicroAttr);
    clone->removeAttr(kPassAttr);
    // Send what later (or earlier) stages read.
    for (Value r : op.getResults())
      for (auto [key, tag] : sendsOf(r)) {
        const int64_t dest = key.second;
        auto send = SendOp::create(b, op.getLoc(), map.lookup(r), "pp",
                                   dest - stage, tag);
        send->setAttr("async", IntegerAttr::get(i64, 1));
        if (auto pass = op.getAttrOfType<StringAttr>(kPassAttr))
          send->setAttr("phase", pass);
        send->setAttr("handle", IntegerAttr::get(i64, handle_));
        sent.push_back(map.lookup(r));
        send->setAttr(kWaitHandleAttr, IntegerAttr::get(i64, handle_++));
      }
    return clone;
  };

  // The prologue ops this stage reads (through its tasks, its epilogue and
  // the step's results), and those with effects, in program order: a
  // stage cloned the whole prologue (every parameter's load and cast) and
  // erased most of it again below.
  llvm::DenseSet<Operation *> needed;
  SmallVector<Operation *> work;
  auto need = [&](Operation *op) {
    for (Value v : op->getOperands())
      if (Operation *def = v.getDefiningOp();
          def && prologue_.contains(def) && needed.insert(def).second)
        work.push_back(def);
  };
  for (const auto &[key, ops] : taskOps_[stage])
    for (Operation *op : ops)
      need(op);
  for (Operation *op : epilogueOps_[stage])
    need(op);
  need(old.getTerminator());
  for (Operation *op : prologueOps_)
    if (!isMemoryEffectFree(op) && needed.insert(op).second)
      work.push_back(op);
  while (!work.empty())
    need(work.pop_back_val());
  for (Operation *op : prologueOps_)
    if (needed.contains(op))
      cloneOp(*op);
  // The sums over micro-batches (gradient accumulation) run as soon as
  // their terms exist, so that each micro-batch's gradients die at once
  // instead of all staying alive until the step's end. "As soon" is after
  // the task that made them, not after each op: a sum inside the backward
  // task would run before the stage sends its input gradient upstream, on
  // the pipeline's critical path. Summed op by op, a 39B stage (tp=2 pp=4
  // ZeRO-1) held 119.5 -> 116.6 GB but Megatron-LM's 145B (pp=8, 48
  // micro-batches) was priced 4.9% slower.
  //
  // Each sum waits for its operands not yet cloned (an operand another
  // stage holds is zero here, never waited for); a sum whose last operand
  // is cloned becomes ready and is cloned after the task, in the body's
  // order. Rescanning every sum after every task grew with the square of
  // the micro-batches (a third of a 145B plan's compile, pp=8 x 48).
  //
  // A term that a task widens for its sum (the bf16 weight gradient cast
  // to the fp32 accumulator's type) is widened with the sum, after the
  // task: until then the task's terms stay in bf16. Widened inside the
  // task, a whole fp32 copy of the stage's gradients was alive at each
  // backward task's end beside the accumulators (Llama 3 70B, pp=2 tp=4
  // ZeRO-1: 35 GB of the stage's 127 GB; the bf16 terms alive there now
  // are half that, the stage 109 GB).
  SmallVector<Operation *> sums;
  for (Operation *op : epilogueOps_[stage])
    if (isa<graph::AddOp>(op))
      sums.push_back(op);
  llvm::SmallPtrSet<Operation *, 32> sumSet(sums.begin(), sums.end());
  llvm::SmallPtrSet<Operation *, 32> widenLater;
  for (const auto &[key, ops] : taskOps_[stage])
    for (Operation *op : ops) {
      auto widen = dyn_cast<graph::CastOp>(op);
      // The first term (a chain's first sum's left operand) is widened in
      // its task: it becomes the accumulator, and every later micro-batch
      // then adds the same work after its task (the step stays linear in
      // the micro-batches, which pricing extrapolates).
      if (!widen || !sendsOf(widen.getResult()).empty() ||
          widen.getResult().use_empty() ||
          !llvm::all_of(widen.getResult().getUsers(), [&](Operation *u) {
            return sumSet.contains(u) &&
                   u->getOperand(0) != widen.getResult();
          }))
        continue;
      auto from = dyn_cast<RankedTensorType>(widen.getOperand().getType());
      auto to = dyn_cast<RankedTensorType>(widen.getType());
      if (from && to && from.getElementTypeBitWidth() < to.getElementTypeBitWidth())
        widenLater.insert(op);
    }
  // What a sum waits for: its operand, or the narrow term a deferred
  // widening reads.
  auto awaited = [&](Value v) {
    Operation *def = v.getDefiningOp();
    return def && widenLater.contains(def) ? def->getOperand(0) : v;
  };
  auto arrived = [&](Value v) {
    Placement p = placement_.lookup(v);
    return map.contains(v) || (p.kind == Placement::kStage && p.stage != stage);
  };
  missing.assign(sums.size(), 0);
  for (auto [i, op] : llvm::enumerate(sums)) {
    for (Value v : op->getOperands())
      if (Value w = awaited(v); !arrived(w)) {
        ++missing[i];
        waiting[w].push_back(i);
      }
    if (missing[i] == 0)
      ready.push(i);
  }
  // An epilogue op, after the widenings it reads.
  auto cloneAfterWidening = [&](Operation &op) {
    for (Value v : op.getOperands())
      if (Operation *def = v.getDefiningOp();
          def && widenLater.contains(def) && !map.contains(v))
        cloneOp(*def);
    cloneOp(op);
  };
  llvm::SmallPtrSet<Operation *, 32> accumulated;
  auto accumulateReady = [&] {
    while (!ready.empty()) {
      Operation *op = sums[ready.top()];
      ready.pop();
      cloneAfterWidening(*op);
      accumulated.insert(op);
    }
  };
  const std::map<TaskKey, SmallVector<Operation *>> &tasks = taskOps_[stage];
  for (const planner::PipelineTask &task : schedule(stage)) {
    // Named as in the planner's predicted trace; the runtime's --trace
    // reports it with each kernel.
    std::string name =
        (task.weight     ? "weight gradients"
         : !task.backward ? "forward"
         : schedule_ == PipelineSchedule::ZeroBubbleH1 ? "input gradient"
                                                       : "backward") +
        std::string(" mb") + std::to_string(task.microBatch);
    if (virtualStages_ > 1)
      name += " chunk" + std::to_string(task.chunk);
    auto taskAttr = b.getStringAttr(name);
    auto it = tasks.find(keyOf(task));
    if (it != tasks.end())
      for (Operation *op : it->second) {
        if (widenLater.contains(op))
          continue;
        Operation *clone = cloneOp(*op);
        clone->setAttr(kTaskAttr, taskAttr);
      }
    accumulateReady();
  }
  for (Operation *op : epilogueOps_[stage])
    if (!accumulated.contains(op))
      cloneAfterWidening(*op);
  // Every stage returns the whole loss, learning rate and norm.
  auto ret = cast<func::ReturnOp>(old.getTerminator());
  SmallVector<Value> results;
  for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
    Placement p = placement_.lookup(v);
    Value local = p.kind == Placement::kStage && p.stage != stage
                      ? splatLike(b, v.getLoc(), v.getType(), 0.0)
                      : map.lookupOrDefault(v);
    if (p.kind != Placement::kReplicated) {
      auto sum = AllReduceOp::create(b, v.getLoc(), local.getType(), local, "pp", "sum");
      auto name = train.getResultAttrOfType<StringAttr>(i, dtcc::graph::kNameAttr);
      sum->setAttr("phase", b.getStringAttr(name && name.getValue() == "loss"
                                                ? "forward"
                                                : "optimizer"));
      local = sum;
    }
    results.push_back(local);
  }
  // Sends finish before the step ends; waitSendsEarly moves each wait up
  // to where it cannot deadlock, once every stage's receives are in place.
  for (Operation &op : llvm::make_early_inc_range(body))
    if (auto h = op.getAttrOfType<IntegerAttr>(kWaitHandleAttr)) {
      op.removeAttr(kWaitHandleAttr);
      WaitOp::create(b, op.getLoc(), h.getInt(), ValueRange{op.getOperand(0)});
    }
  func::ReturnOp::create(b, ret.getLoc(), results);

  // Every value a stage reads is its own (computed, received or zero): one
  // of the step it was cut from would dangle once that step is erased.
  WalkResult foreign = fn.walk([&](Operation *op) {
    for (Value v : op->getOperands())
      if (v.getParentRegion() == &train.getBody()) {
        op->emitOpError("in pipeline stage ")
            << stage << " reads a value of the unsplit step that the stage "
            << "does not compute (internal error: a micro-batch op lost its "
            << "dshard.micro tag?)";
        return WalkResult::interrupt();
      }
    return WalkResult::advance();
  });
  if (foreign.wasInterrupted())
    return failure();

  // Drop what this stage does not use.
  bool changed = true;
  while (changed) {
    changed = false;
    for (Operation &op : llvm::make_early_inc_range(llvm::reverse(body)))
      if (isOpTriviallyDead(&op)) {
        op.erase();
        changed = true;
      }
  }
  return success();
}

/// The function of each pipeline stage (null where the pass made none).
static SmallVector<func::FuncOp> stageFunctions(ModuleOp module,
                                                int64_t stages) {
  SmallVector<func::FuncOp> fns;
  for (int64_t k = 0; k < stages; ++k)
    fns.push_back(
        module.lookupSymbol<func::FuncOp>(("train_step_pp" + Twine(k)).str()));
  return fns;
}

/// A pipeline stage's pp send or receive.
struct Message {
  Operation *op;
  int64_t peer; ///< the other stage
  uint64_t tag;
  size_t position; ///< in the stage's function
};

/// Each stage's pp sends and receives, in program order.
struct StageMessages {
  SmallVector<SmallVector<Message>> sends, recvs;
};

static StageMessages stageMessages(ArrayRef<func::FuncOp> fns) {
  StageMessages out;
  out.sends.resize(fns.size());
  out.recvs.resize(fns.size());
  for (auto [k, stageFn] : llvm::enumerate(fns)) {
    func::FuncOp fn = stageFn;
    if (!fn)
      continue;
    size_t i = 0;
    for (Operation &op : fn.getBody().front()) {
      if (auto send = dyn_cast<SendOp>(op); send && send.getAxis() == "pp")
        out.sends[k].push_back(
            {&op, int64_t(k) + int64_t(send.getPeer()), send.getTag(), i});
      else if (auto recv = dyn_cast<RecvOp>(op); recv && recv.getAxis() == "pp")
        out.recvs[k].push_back(
            {&op, int64_t(k) + int64_t(recv.getPeer()), recv.getTag(), i});
      ++i;
    }
  }
  return out;
}

/// Moves receives up so that each stage receives from every other stage in
/// the order that stage sends. NCCL matches the messages between two ranks
/// in the order they are posted, not by tag, and the runtime refuses a
/// program whose orders differ (runtime/exec/P2POrder.h); a stage's
/// receives are emitted where their values are first read, which need not
/// be the order they were produced in. A receive moved up only starts
/// earlier: its sender sends it before the message the stage already waits
/// for at that point, so the move adds no wait.
static void orderReceives(ModuleOp module, int64_t stages) {
  SmallVector<func::FuncOp> fns = stageFunctions(module, stages);
  // Each stage's pp sends by destination and receives by source, in
  // program order, from one walk of each function (a walk per pair of
  // stages grew with the square of the stages). Moving one source's
  // receives keeps every other source's in their order.
  StageMessages messages = stageMessages(fns);
  SmallVector<llvm::DenseMap<int64_t, SmallVector<uint64_t>>> sentTo(stages);
  SmallVector<llvm::DenseMap<int64_t, SmallVector<RecvOp>>> receivedFrom(
      stages);
  for (int64_t k = 0; k < stages; ++k) {
    for (const Message &m : messages.sends[k])
      sentTo[k][m.peer].push_back(m.tag);
    for (const Message &m : messages.recvs[k])
      receivedFrom[k][m.peer].push_back(cast<RecvOp>(m.op));
  }
  for (int64_t dst = 0; dst < stages; ++dst)
    for (int64_t src = 0; src < stages; ++src) {
      if (src == dst || !fns[src] || !fns[dst])
        continue;
      auto sentIt = sentTo[src].find(dst);
      auto receivedIt = receivedFrom[dst].find(src);
      if (receivedIt == receivedFrom[dst].end())
        continue;
      ArrayRef<uint64_t> sent;
      if (sentIt != sentTo[src].end())
        sent = sentIt->second;
      ArrayRef<RecvOp> received = receivedIt->second;
      llvm::DenseMap<uint64_t, RecvOp> recvOfTag;
      for (RecvOp recv : received)
        recvOfTag[recv.getTag()] = recv;
      llvm::DenseSet<Operation *> placed;
      size_t next = 0; // the next message of `sent` not received yet
      for (RecvOp recv : received) {
        if (placed.contains(recv))
          continue;
        // Receive what `src` sends before this one right here, first.
        for (; next < sent.size() && sent[next] != recv.getTag(); ++next) {
          auto it = recvOfTag.find(sent[next]);
          if (it != recvOfTag.end() && !placed.contains(it->second)) {
            it->second->moveBefore(recv);
            placed.insert(it->second);
          }
        }
        if (next < sent.size())
          ++next;
        placed.insert(recv);
      }
    }
}

/// Moves the wait for each pipeline send up from the step's end to the
/// earliest point where it cannot deadlock, so that a sent tensor dies
/// about one task after it is sent instead of at the step's end. Stage A's
/// send X to stage B is waited for right after A's receive of the first
/// message M that B sends to A after B's receive of X: receives complete
/// in program order on the main thread (and on the communication stream),
/// so once M has arrived B has received X, and the wait only lets the
/// transport finish. A wait for a send that B answers with no later
/// message stays at the step's end. (Waiting after A's next task instead
/// deadlocks once messages exceed what the transport buffers: each stage
/// can block in the wait for a send whose receive the other has not
/// reached.)
static void waitSendsEarly(ModuleOp module, int64_t stages) {
  SmallVector<func::FuncOp> fns = stageFunctions(module, stages);
  // After orderReceives: the receives' positions as they are now.
  StageMessages messages = stageMessages(fns);
  SmallVector<SmallVector<Message>> &recvs = messages.recvs,
                                    &sends = messages.sends;
  auto find = [](ArrayRef<Message> list, int64_t peer,
                 uint64_t tag) -> const Message * {
    for (const Message &m : list)
      if (m.peer == peer && m.tag == tag)
        return &m;
    return nullptr;
  };
  for (int64_t a = 0; a < stages; ++a) {
    if (!fns[a])
      continue;
    llvm::DenseMap<int64_t, const Message *> sendOfHandle;
    for (const Message &m : sends[a])
      if (auto h = m.op->getAttrOfType<IntegerAttr>("handle"))
        sendOfHandle[h.getInt()] = &m;
    for (WaitOp wait : llvm::to_vector(fns[a].getOps<WaitOp>())) {
      const Message *send = sendOfHandle.lookup(int64_t(wait.getHandle()));
      if (!send || send->peer < 0 || send->peer >= stages || !fns[send->peer])
        continue;
      int64_t b = send->peer;
      const Message *received = find(recvs[b], a, send->tag);
      if (!received)
        continue;
      // B's first send to A after it has received X.
      const Message *answer = nullptr;
      for (const Message &m : sends[b])
        if (m.peer == a && m.position > received->position) {
          answer = &m;
          break;
        }
      if (!answer)
        continue;
      const Message *arrival = find(recvs[a], b, answer->tag);
      if (!arrival || arrival->position < send->position)
        continue;
      wait->moveAfter(arrival->op);
    }
  }
}

void ShardPipelinePass::runOnOperation() {
  ModuleOp module = getOperation();
  auto train = module.lookupSymbol<func::FuncOp>("train_step");
  if (!train) {
    module.emitError("expected @train_step");
    return signalPassFailure();
  }
  // The plan's pp is the one number of stages: this pass cuts that many.
  PlanAttr plan = getPlan(module);
  if (!plan || plan.getPipelineStages() < 2) {
    module.emitError("expected a plan whose mesh has pp > 1, got ")
        << (plan ? "pp=" + std::to_string(plan.getPipelineStages())
                 : std::string("no dshard.plan (run dtcc-plan-set first)"));
    return signalPassFailure();
  }
  stages_ = plan.getPipelineStages();
  schedule_ = plan.getSchedule();
  virtualStages_ = plan.getVirtualStages();
  microBatches_ = plan.getMicroBatchesInStep();
  if (schedule_ == PipelineSchedule::Interleaved && virtualStages_ < 2) {
    module.emitError("the interleaved schedule needs virtual_stages >= 2 "
                     "layer chunks per stage, got ")
        << virtualStages_ << " (one chunk per stage: use 1f1b)";
    return signalPassFailure();
  }
  if (schedule_ == PipelineSchedule::Interleaved &&
      microBatches_ % stages_ != 0) {
    module.emitError("the interleaved schedule runs micro-batches in groups "
                     "of pp: expected micro-batches a multiple of pp = ")
        << stages_ << ", got " << microBatches_;
    return signalPassFailure();
  }
  if (!llvm::any_of(train.getBody().front(),
                    [](Operation &op) { return op.hasAttr(kMicroAttr); })) {
    module.emitError("expected a step unrolled over micro-batches (run "
                     "dtcc-shard-microbatch before the optimizer)");
    return signalPassFailure();
  }
  if (failed(place(train)))
    return signalPassFailure();
  if (schedule_ == PipelineSchedule::ZeroBubbleH1)
    splitBackward(train.getBody().front());
  gatherStageOps(train.getBody().front());
  for (int64_t k = 0; k < numStages(); ++k)
    if (failed(emitStage(train, k)))
      return signalPassFailure();
  orderReceives(module, numStages());
  waitSendsEarly(module, numStages());
  // Each variable lives in the stage that updates it (all: the counters).
  SmallVector<func::FuncOp> stageFns = stageFunctions(module, numStages());
  llvm::StringMap<SmallVector<int64_t>> users;
  for (int64_t k = 0; k < numStages(); ++k) {
    stageFns[k].walk([&](graph::StoreOp store) {
      auto &list = users[store.getVariable()];
      if (!llvm::is_contained(list, k))
        list.push_back(k);
    });
  }
  for (auto var : module.getOps<graph::VariableOp>()) {
    auto it = users.find(var.getSymName());
    if (it != users.end() && it->second.size() == 1)
      var->setAttr(kStageAttr, IntegerAttr::get(IntegerType::get(module.getContext(), 64),
                                                    it->second.front()));
  }
  // A parameter read by a stage that does not update it would be stale.
  SymbolTable symbols(module);
  for (int64_t k = 0; k < numStages(); ++k) {
    WalkResult r = stageFns[k].walk([&](graph::LoadOp load) {
      auto var = symbols.lookup<graph::VariableOp>(load.getVariable());
      auto owner = var->getAttrOfType<IntegerAttr>(kStageAttr);
      if (owner && owner.getInt() != k) {
        load.emitOpError("reads parameter '")
            << load.getVariable() << "' in pipeline stage " << k
            << " but stage " << owner.getInt()
            << " updates it (a weight several stages read needs its "
               "gradient terms summed after the micro-batches; here they "
               "are combined within one)";
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (r.wasInterrupted())
      return signalPassFailure();
  }
  train.erase();
}

} // namespace
