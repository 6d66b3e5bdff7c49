//===- Bucket.cpp - one data-parallel collective per layer ----------------===//
//
// The data-parallel collectives of one layer joined into one: each
// gradient's reduce-scatter (or all-reduce), each ZeRO-3 parameter gather
// and each post-update parameter gather of ZeRO-1/2 is a collective of its
// own after partitioning, a dozen per layer, each paying the ring's latency
// (n - 1 steps: 0.76 ms over 512 GPUs, more than the transfer of a layer's
// norms and biases). PyTorch FSDP gathers and reduce-scatters one flat
// buffer per wrapped unit, and DDP all-reduces gradient buckets; this pass
// does the same per layer: the members' tensors are reshaped to
// [ranks, elements / ranks] (a dim-0 block is a row), joined along the
// second dimension, sent by one collective, and sliced back.
//
//===----------------------------------------------------------------------===//

#include "passes/Sharding/Passes.h"
#include "passes/Sharding/ShardingUtils.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/MapVector.h"

#include <map>

namespace dtcc::shard {
#define GEN_PASS_DEF_SHARDBUCKET
#include "passes/Sharding/Passes.h.inc"
} // namespace dtcc::shard

using namespace mlir;
using namespace dtcc;
using namespace dtcc::shard;

namespace {

/// The mesh axis whose collectives are joined: data parallelism (gradients,
/// ZeRO's gathers).
constexpr llvm::StringLiteral kAxis = "dp";
/// A collective joins a bucket when the ring's latency would take at
/// least as long as its transfer: bytes <= (ranks - 1) x this, the bytes a
/// ring step moves in its latency (latency x bus bandwidth: NVLink 4's
/// 1 us x 370 GB/s, NDR InfiniBand's 5 us x 50 GB/s per GPU; the planner's
/// presets). Larger tensors go alone: joining them would copy them in and
/// out for a latency that their transfer dwarfs (8 GPUs: up to 1.75 MiB,
/// a layer's norms and biases; 512 GPUs: up to 128 MiB, nearly all).
constexpr int64_t kLatencyBytesPerStep = 256 * 1024;

/// A bucket of m members over n ranks saves (m - 1) collectives' ring
/// latency, (n - 1) steps each, and adds a join and m slices, a kernel
/// each: it is sent as one only when (m - 1)(n - 1) x kStepLatency >
/// (m + 1) x kKernelGap. NVLink's 1 us per step and the 2 us between
/// back-to-back CUDA kernels (the planner's presets): 8 ranks join any two
/// members, 4 ranks six or more, 2 ranks never.
constexpr double kStepLatency = 1e-6;
constexpr double kKernelGap = 2e-6;

/// How many elementwise ops (a clipping scale, casts) may lie between an
/// update's gradient and the collective that reduced it.
constexpr int kGradientChain = 8;

/// The layer index of `op` as a key: "" outside layers (an anonymous
/// export names no modules, so modules do not count).
std::string indexKey(Operation *op) {
  std::optional<int64_t> index = op ? graph::layerIndexOf(op) : std::nullopt;
  return index ? std::to_string(*index) : "";
}

/// An updated parameter's layer: that of the op that made its gradient,
/// found from the update (dgraph.adamw / dgraph.sgd, behind casts) through
/// the gradient's elementwise ops and the collective that reduced it.
std::string updatedLayer(Value v) {
  while (auto cast = v.getDefiningOp<graph::CastOp>())
    v = cast.getOperand();
  Operation *update = v.getDefiningOp();
  if (!isa_and_nonnull<graph::AdamwOp, graph::SgdOp>(update))
    return "";
  Value g = update->getOperand(1);
  for (int i = 0; i < kGradientChain; ++i) {
    Operation *def = g.getDefiningOp();
    if (isa_and_nonnull<ReduceScatterOp, AllReduceOp>(def))
      return indexKey(def->getOperand(0).getDefiningOp());
    if (!isa_and_nonnull<graph::CastOp, graph::MulOp, graph::DivOp>(def))
      return indexKey(def);
    g = def->getOperand(0);
  }
  return "";
}

/// One collective that may join a bucket.
struct Member {
  Operation *op = nullptr;
  /// Its wait when asynchronous; null for a synchronous gather whose one
  /// user is `store`.
  WaitOp wait;
  graph::StoreOp store;
  int64_t ranks = 0;    ///< the axis size (1 for an all-reduce's rows)
  int64_t elements = 0; ///< of the unsharded side, / ranks = one row
};

struct ShardBucketPass
    : public dtcc::shard::impl::ShardBucketBase<ShardBucketPass> {
  void runOnOperation() final {
    ModuleOp module = getOperation();
    // The optimizer offloaded to the host updates (and gathers) parameters
    // on the host's copies: left as they are.
    if (PlanAttr plan = getPlan(module);
        plan && plan.getOffload() != Offload::None)
      return;
    MeshAttr mesh = getMesh(module);
    if (!mesh)
      return;
    for (auto fn : module.getOps<func::FuncOp>())
      bucket(fn, mesh.getSize(kAxis));
  }

  /// Whether `op` may join a bucket; fills `m` and the key of its bucket.
  static bool candidate(Operation *op, Member &m, std::string &key,
                        const llvm::StringMap<Operation *> &lastLoad,
                        int64_t axisSize) {
    if (!isa<AllGatherOp, ReduceScatterOp, AllReduceOp>(op))
      return false;
    if (op->getAttrOfType<StringAttr>("axis").getValue() != kAxis)
      return false;
    auto in = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
    auto out = dyn_cast<RankedTensorType>(op->getResult(0).getType());
    if (!in || !out || !in.hasStaticShape() || !out.hasStaticShape() ||
        in.getRank() == 0 || in.getNumElements() == 0 ||
        !in.getElementType().isIntOrFloat())
      return false;
    if (auto kind = op->getAttrOfType<StringAttr>("kind");
        kind && kind.getValue() != "sum")
      return false;
    if (auto dim = op->getAttrOfType<IntegerAttr>("dim");
        dim && dim.getInt() != 0)
      return false; // a block of another dimension is not a row
    m.op = op;
    if (isa<AllReduceOp>(op)) {
      m.ranks = 1;
      m.elements = in.getNumElements();
    } else {
      bool gather = isa<AllGatherOp>(op);
      RankedTensorType whole = gather ? out : in, part = gather ? in : out;
      if (part.getDimSize(0) == 0 || whole.getDimSize(0) % part.getDimSize(0))
        return false;
      m.ranks = whole.getDimSize(0) / part.getDimSize(0);
      m.elements = whole.getNumElements();
    }
    // Latency-bound members only (kLatencyBytesPerStep).
    const int64_t bytes =
        std::max(in.getNumElements(), out.getNumElements()) *
        std::max<int64_t>(1, in.getElementTypeBitWidth() / 8);
    if (axisSize < 2 || bytes > (axisSize - 1) * kLatencyBytesPerStep)
      return false;
    auto phase = op->getAttrOfType<StringAttr>("phase");
    std::string layer;
    if (op->hasAttr("async")) {
      for (Operation *user : op->getResult(0).getUsers())
        if (auto w = dyn_cast<WaitOp>(user))
          m.wait = w;
      if (!m.wait || m.wait->getBlock() != op->getBlock())
        return false;
      // A gradient's layer is its maker's; a gathered parameter's, its
      // first user's (the pass is part of the key: the backward gathers
      // again).
      layer = indexKey(isa<AllGatherOp>(op)
                           ? firstUser(op->getResult(0), /*skipWaits=*/true)
                           : op->getOperand(0).getDefiningOp());
    } else {
      // A synchronous gather of an updated parameter, stored once into a
      // variable nothing reads after the store (so the store may move
      // down to the bucket's gather).
      if (!isa<AllGatherOp>(op) || !phase || phase.getValue() != "optimizer" ||
          !op->getResult(0).hasOneUse())
        return false;
      m.store = dyn_cast<graph::StoreOp>(*op->getResult(0).getUsers().begin());
      if (!m.store || m.store->getBlock() != op->getBlock())
        return false;
      if (Operation *load = lastLoad.lookup(m.store.getVariable());
          load && m.store->isBeforeInBlock(load))
        return false;
      layer = updatedLayer(op->getOperand(0));
    }
    key = (op->getName().getStringRef() + "|" + std::to_string(m.ranks) +
           "|" + (m.wait ? "async" : "sync") + "|" +
           (phase ? phase.getValue() : "") + "|" + layer + "|")
              .str();
    llvm::raw_string_ostream os(key);
    os << in.getElementType();
    return true;
  }

  /// Whether `m` may join `bucket` (members in program order): the bucket
  /// is sent where its last member was, which must come before every
  /// member's wait.
  static bool fits(ArrayRef<Member> bucket, const Member &m) {
    for (const Member &b : bucket)
      if (b.wait && !m.op->isBeforeInBlock(b.wait))
        return false;
    return true;
  }

  void bucket(func::FuncOp fn, int64_t axisSize) {
    if (fn.getBody().empty())
      return;
    Block &body = fn.getBody().front();
    llvm::StringMap<Operation *> lastLoad;
    for (Operation &op : body)
      if (auto load = dyn_cast<graph::LoadOp>(op))
        lastLoad[load.getVariable()] = &op;
    // Candidates by key, in program order.
    llvm::MapVector<std::string, SmallVector<Member>,
                    std::map<std::string, unsigned>>
        byKey;
    for (Operation &op : body) {
      Member m;
      std::string key;
      if (candidate(&op, m, key, lastLoad, axisSize))
        byKey[key].push_back(m);
    }
    for (auto &[key, members] : byKey) {
      SmallVector<SmallVector<Member>> buckets;
      for (const Member &m : members) {
        if (buckets.empty() || !fits(buckets.back(), m))
          buckets.emplace_back();
        buckets.back().push_back(m);
      }
      for (ArrayRef<Member> b : buckets) {
        const double m = double(b.size());
        if (b.size() > 1 && (m - 1) * double(axisSize - 1) * kStepLatency >
                                (m + 1) * kKernelGap)
          join(b);
      }
    }
  }

  /// Replaces the members of `b` by one collective where the last one was.
  void join(ArrayRef<Member> b) {
    Operation *first = b.front().op, *last = b.back().op;
    MLIRContext *ctx = first->getContext();
    const bool gather = isa<AllGatherOp>(first);
    const bool allReduce = isa<AllReduceOp>(first);
    const int64_t ranks = b.front().ranks; // 1 for an all-reduce
    Type element =
        cast<RankedTensorType>(first->getOperand(0).getType()).getElementType();
    SmallVector<Location> locs;
    for (const Member &m : b)
      locs.push_back(m.op->getLoc());
    Location loc =
        FusedLoc::get(ctx, locs, StringAttr::get(ctx, graph::kJoinedNodesLoc));

    // Each member's operand as [rows, row elements]: for a reduce-scatter a
    // row per rank (rank i's block), for a gather this rank's block as one
    // row, for an all-reduce one row.
    OpBuilder builder(last);
    const int64_t inRows = gather ? 1 : ranks;
    const int64_t outRows = gather ? ranks : 1;
    SmallVector<Value> rows;
    SmallVector<int64_t> widths;
    int64_t width = 0;
    for (const Member &m : b) {
      int64_t w = m.elements / ranks;
      auto type = RankedTensorType::get({inRows, w}, element);
      rows.push_back(graph::ReshapeOp::create(builder, m.op->getLoc(), type,
                                              m.op->getOperand(0)));
      widths.push_back(w);
      width += w;
    }
    auto joinedType = RankedTensorType::get({inRows, width}, element);
    Value joined =
        graph::ConcatOp::create(builder, loc, joinedType, rows, 1).getResult();
    auto sentType = RankedTensorType::get({outRows, width}, element);
    Operation *sent;
    StringAttr axis = first->getAttrOfType<StringAttr>("axis");
    if (gather)
      sent = AllGatherOp::create(builder, loc, sentType, joined, axis,
                                 builder.getI64IntegerAttr(0));
    else if (allReduce)
      sent = AllReduceOp::create(builder, loc, joined, axis);
    else
      sent = ReduceScatterOp::create(builder, loc, sentType, joined, axis,
                                     builder.getI64IntegerAttr(0));
    for (NamedAttribute a : first->getDiscardableAttrs())
      sent->setAttr(a.getName(), a.getValue());
    Value result = sent->getResult(0);

    // Where the members' results become readable: after the earliest wait
    // (asynchronous), else right after the collective.
    Operation *readyAt = sent;
    if (b.front().wait) {
      Operation *earliest = b.front().wait;
      for (const Member &m : b)
        if (m.wait->isBeforeInBlock(earliest))
          earliest = m.wait;
      OpBuilder w(earliest);
      WaitOp firstWait = b.front().wait;
      readyAt = WaitOp::create(w, loc, firstWait.getHandle(),
                               ValueRange{joined, result});
    }
    OpBuilder after(readyAt->getBlock(), std::next(readyAt->getIterator()));
    int64_t offset = 0;
    SmallVector<Operation *> stores;
    for (auto [m, w] : llvm::zip(b, widths)) {
      auto sliceType = RankedTensorType::get({outRows, w}, element);
      Value piece = graph::SliceOp::create(
          after, m.op->getLoc(), sliceType, result,
          after.getDenseI64ArrayAttr({0, offset}),
          after.getDenseI64ArrayAttr({outRows, offset + w}),
          after.getDenseI64ArrayAttr({1, 1}));
      Value back = graph::ReshapeOp::create(after, m.op->getLoc(),
                                            m.op->getResult(0).getType(), piece);
      offset += w;
      m.op->getResult(0).replaceAllUsesWith(back);
      if (m.store)
        stores.push_back(m.store);
    }
    // A synchronous gather's store moves down to its slice (the variable
    // is not read after it, candidate() checked).
    for (Operation *store : stores) {
      Operation *value = store->getOperand(0).getDefiningOp();
      if (value->getBlock() == store->getBlock() &&
          store->isBeforeInBlock(value))
        store->moveAfter(value);
    }
    // Last, as the builder above inserts before the first member's wait.
    for (const Member &m : b) {
      if (m.wait)
        m.wait->erase();
      m.op->erase();
    }
  }
};

} // namespace
