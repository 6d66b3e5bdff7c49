//===- LowerToExec.cpp - dgraph functions to dexec programs ---------------===//
//
// Assigns every tensor value a view of a storage (workspace, state or
// constant), plans the workspace offsets from value lifetimes, and rewrites
// each function into dexec buffers, kernel calls and I/O bindings. With the
// plan's `offload = optimizer`, the optimizer updates and their state live
// in the host's memory space, with its own arenas, memory plan and the
// transfers between the two.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Passes.h"

#include "dialects/Exec/IR/ExecOps.h"
#include "dialects/Graph/IR/GraphOps.h"
#include "dialects/Shard/IR/ShardOps.h"
#include "passes/Lowering/KernelCalls.h"
#include "passes/Lowering/MemoryPlan.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Utils/IndexingUtils.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringSet.h"

#include <array>
#include <map>
#include <optional>
#include <set>

namespace dtcc::lowering {
#define GEN_PASS_DEF_LOWERTOEXEC
#include "passes/Lowering/Passes.h.inc"
} // namespace dtcc::lowering

using namespace mlir;
using namespace dtcc;

namespace {

enum class ArenaKind { Workspace, State, Constant, HostWorkspace, HostState };

StringRef arenaName(ArenaKind kind) {
  switch (kind) {
  case ArenaKind::Workspace:
    return "workspace";
  case ArenaKind::State:
    return "state";
  case ArenaKind::Constant:
    return "constant";
  case ArenaKind::HostWorkspace:
    return "host_workspace";
  case ArenaKind::HostState:
    return "host_state";
  }
  llvm_unreachable("unknown arena");
}

bool isHost(ArenaKind kind) {
  return kind == ArenaKind::HostWorkspace || kind == ArenaKind::HostState;
}
bool isWorkspace(ArenaKind kind) {
  return kind == ArenaKind::Workspace || kind == ArenaKind::HostWorkspace;
}

/// The ops an offloaded optimizer step runs on the host: the parameter
/// updates, which read and write the optimizer's state.
bool isOffloadable(Operation *op) {
  return isa<graph::AdamwOp, graph::SgdOp>(op);
}

/// Whether the plan offloads the optimizer step to the host.
bool offloadsOptimizer(ModuleOp module) {
  shard::PlanAttr plan = shard::getPlan(module);
  return plan && plan.getOffload() == shard::Offload::Optimizer;
}

/// Bytes per element as stored by the runtime (i1 takes a byte).
int64_t elementBytes(Type type) {
  return std::max<int64_t>(1, (type.getIntOrFloatBitWidth() + 7) / 8);
}

int64_t tensorBytes(RankedTensorType type) {
  return type.getNumElements() * elementBytes(type.getElementType());
}

/// Memory that holds one or more values (a value and its reshapes).
struct Storage {
  ArenaKind arena = ArenaKind::Workspace;
  int64_t bytes = 0;
  int64_t first = 0, last = 0; // lifetime in steps (workspace only)
  int64_t offset = -1;
  FlatSymbolRefAttr variable; // state
  ElementsAttr value;         // constant
  /// Values that read or write this storage, to decide in-place reuse.
  SmallVector<Value> aliases;
};

/// How a tensor value sits in its storage.
struct View {
  unsigned storage = 0;
  RankedTensorType type;
  SmallVector<int64_t> strides; // empty: contiguous row-major
  /// Elements from the storage's start to the view's first element (a
  /// slice's): the buffer's offset in the program.
  int64_t offset = 0;

  bool isContiguous() const { return strides.empty() && offset == 0; }
  /// The same elements at the same places: a dimension of size 1 addresses
  /// nothing with its stride, so two views that differ only there are one
  /// (a transpose's view of a slot of a concat along a dimension of size 1).
  bool operator==(const View &o) const;
};

SmallVector<int64_t> rowMajorStrides(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> strides(shape.size(), 1);
  for (int64_t d = int64_t(shape.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

/// The strides `view` reads with, written out.
SmallVector<int64_t> stridesOf(const View &view) {
  return view.strides.empty() ? rowMajorStrides(view.type.getShape())
                              : view.strides;
}

bool View::operator==(const View &o) const {
  if (storage != o.storage || type != o.type || offset != o.offset)
    return false;
  if (strides == o.strides)
    return true;
  ArrayRef<int64_t> shape = type.getShape();
  SmallVector<int64_t> mine = stridesOf(*this), theirs = stridesOf(o);
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != 1 && mine[d] != theirs[d])
      return false;
  return true;
}

/// `view` of `type` with `strides`, contiguous (no strides) where they are
/// the row-major ones.
View withStrides(View view, RankedTensorType type,
                 SmallVector<int64_t> strides) {
  view.type = type;
  view.strides = std::move(strides);
  if (view.strides == rowMajorStrides(type.getShape()))
    view.strides.clear();
  return view;
}

/// Whether a kernel reading rows through strides can take `view`: its
/// last dimension's elements adjacent (Kernels.td's RowStrided).
bool hasAdjacentRows(const View &view) {
  int64_t rank = view.type.getRank();
  SmallVector<int64_t> strides = stridesOf(view);
  return rank >= 1 &&
         llvm::none_of(strides, [](int64_t s) { return s < 0; }) &&
         (view.type.getShape()[rank - 1] <= 1 || strides[rank - 1] == 1);
}

/// The view of `type` that reshaping `view` gives without moving elements,
/// if there is one: each group of dimensions that merges or splits must be
/// contiguous within itself (PyTorch's computeStride, which `view` uses).
std::optional<View> reshapeView(const View &view, RankedTensorType type) {
  ArrayRef<int64_t> oldShape = view.type.getShape(), newShape = type.getShape();
  if (view.isContiguous() || view.type.getNumElements() == 0)
    return withStrides(view, type, {});
  if (oldShape.empty() || newShape.empty())
    return std::nullopt;
  SmallVector<int64_t> oldStrides = stridesOf(view);
  SmallVector<int64_t> newStrides(newShape.size(), 0);
  int64_t viewDim = int64_t(newShape.size()) - 1;
  int64_t chunkStride = oldStrides.back();
  int64_t oldNumel = 1, newNumel = 1;
  for (int64_t d = int64_t(oldShape.size()) - 1; d >= 0; --d) {
    oldNumel *= oldShape[d];
    // A chunk ends where the next dimension out is not contiguous with it.
    if (d == 0 || (oldShape[d - 1] != 1 &&
                   oldStrides[d - 1] != oldNumel * chunkStride)) {
      while (viewDim >= 0 &&
             (newNumel < oldNumel || newShape[viewDim] == 1)) {
        newStrides[viewDim] = newNumel * chunkStride;
        newNumel *= newShape[viewDim];
        --viewDim;
      }
      if (newNumel != oldNumel)
        return std::nullopt;
      if (d > 0) {
        chunkStride = oldStrides[d - 1];
        oldNumel = newNumel = 1;
      }
    }
  }
  if (viewDim != -1)
    return std::nullopt;
  return withStrides(view, type, newStrides);
}

/// What `op` makes of its operand's `view` when it only renames elements:
/// a transpose permutes the strides, a slice moves the offset and scales
/// them, a reshape as reshapeView. None for other ops.
std::optional<View> derivedView(Operation *op, const View &view) {
  auto type = cast<RankedTensorType>(op->getResult(0).getType());
  SmallVector<int64_t> in = stridesOf(view);
  if (auto transpose = dyn_cast<graph::TransposeOp>(op))
    return withStrides(view, type,
                       applyPermutation(ArrayRef(in), transpose.getPerm()));
  if (auto slice = dyn_cast<graph::SliceOp>(op)) {
    View out = view;
    SmallVector<int64_t> strides;
    for (auto [d, start, step] :
         llvm::enumerate(slice.getStart(), slice.getStride())) {
      out.offset += start * in[d];
      strides.push_back(in[d] * step);
    }
    return withStrides(out, type, strides);
  }
  if (isa<graph::ReshapeOp>(op))
    return reshapeView(view, type);
  return std::nullopt;
}

/// The view of a transpose's or reshape's operand whose result is `view`
/// (derivedView backwards), if there is one.
std::optional<View> sourceView(Operation *op, const View &view) {
  auto type = cast<RankedTensorType>(op->getOperand(0).getType());
  if (auto transpose = dyn_cast<graph::TransposeOp>(op))
    return withStrides(
        view, type,
        applyPermutation(ArrayRef(stridesOf(view)),
                         invertPermutationVector(transpose.getPerm())));
  if (isa<graph::ReshapeOp>(op))
    return reshapeView(view, type);
  return std::nullopt;
}

struct PlannedKernel {
  std::string kernel;
  SmallVector<View> ins, outs;
  DictionaryAttr attrs;
  Location loc;
  /// What it was emitted for, for errors: "'dgraph.matmul'", "a copy".
  std::string origin = "a copy";
  /// The step it runs at, and whether it runs on the host.
  int64_t step = 0;
  bool host = false;
};

/// Offsets shared by all functions of the module.
struct ModuleLayout {
  llvm::StringMap<int64_t> stateOffsets;
  int64_t stateBytes = 0;
  /// Variables in the host's state arena (offsets in stateOffsets) and
  /// whether the optimizer's updates run on the host.
  llvm::StringSet<> hostVariables;
  int64_t hostStateBytes = 0;
  bool offload = false;
  llvm::DenseMap<Attribute, int64_t> constantOffsets;
  int64_t constantBytes = 0;
};

/// Lowers one function. Builds the plan first, then rewrites the IR.
class FunctionLowering {
public:
  FunctionLowering(func::FuncOp fn, ModuleLayout &layout, bool stridedViews,
                   bool roundedCopies)
      : fn(fn), layout(layout), stridedViews(stridedViews),
        roundedCopies(roundedCopies) {}

  LogicalResult run();

private:
  LogicalResult plan();
  void rewrite();

  unsigned newStorage(ArenaKind arena, int64_t bytes) {
    Storage s;
    s.arena = arena;
    s.bytes = bytes;
    s.first = s.last = step;
    storages.push_back(std::move(s));
    return storages.size() - 1;
  }
  View contiguous(unsigned storage, Type type) {
    return View{storage, cast<RankedTensorType>(type), {}};
  }
  void bind(Value value, View view) {
    views[value] = view;
    storages[view.storage].aliases.push_back(value);
  }
  /// The one storage of a variable's state buffer in this function.
  unsigned stateStorage(FlatSymbolRefAttr variable) {
    auto it = variableStorages.find(variable.getValue());
    if (it != variableStorages.end())
      return it->second;
    unsigned s = newStorage(layout.hostVariables.contains(variable.getValue())
                                ? ArenaKind::HostState
                                : ArenaKind::State,
                            0);
    storages[s].offset = layout.stateOffsets.lookup(variable.getValue());
    storages[s].variable = variable;
    variableStorages[variable.getValue()] = s;
    return s;
  }
  /// Records a read of `view` at the current step.
  void use(const View &view) {
    Storage &s = storages[view.storage];
    s.last = std::max(s.last, step);
  }
  bool onHost(const View &view) const {
    return isHost(storages[view.storage].arena);
  }
  /// A contiguous copy of `view` in a new workspace storage of the host's
  /// memory space (`host`) or the device's: a `copy`, or a transfer between
  /// the two.
  View materialize(const View &view, Location loc, bool host = false) {
    use(view);
    View in = view;
    if (!in.isContiguous() && onHost(in) != host)
      in = materialize(in, loc, onHost(in)); // transfers copy whole buffers
    View out = contiguous(newStorage(host ? ArenaKind::HostWorkspace
                                          : ArenaKind::Workspace,
                                     tensorBytes(view.type)),
                          view.type);
    StringRef kernel = onHost(in) == host ? "copy"
                       : host             ? exec::kCopyToHostKernel
                                          : exec::kCopyToDeviceKernel;
    PlannedKernel k{kernel.str(), {in}, {out},
                    DictionaryAttr::get(fn.getContext()), loc};
    k.origin = kernel == "copy" ? "a copy" : "a transfer";
    k.step = step;
    k.host = host && kernel == "copy";
    kernels.push_back(std::move(k));
    return out;
  }
  /// Whether `value`'s storage can be overwritten at the current step: no
  /// value sharing it is read later and it holds no variable or constant.
  bool diesHere(const View &view) {
    return isWorkspace(storages[view.storage].arena) && readNoLater(view);
  }
  /// Whether no value sharing `view`'s storage is read after the current
  /// step but by `ownWait`.
  bool readNoLater(const View &view, Operation *ownWait = nullptr) const {
    return llvm::all_of(storages[view.storage].aliases, [&](Value v) {
      return lastUseBut(v, ownWait) <= step;
    });
  }
  /// The last step that reads `v` but at `except` (an asynchronous
  /// collective's wait, which names the buffers it keeps alive).
  int64_t lastUseBut(Value v, Operation *except) const {
    if (!except)
      return lastUse.lookup(v);
    int64_t last = 0;
    for (Operation *user : v.getUsers())
      if (user != except) {
        auto it = opSteps.find(user);
        last = std::max(last, it == opSteps.end() ? endStep : it->second);
      }
    return last;
  }
  /// The first step after the current one that writes `variable`'s state
  /// buffer (a store's copy, or the producer of a value computed in it),
  /// if it comes before any read of the variable's current value; 0
  /// otherwise.
  int64_t nextOverwrite(StringRef variable) const {
    int64_t write = 0;
    for (int64_t w : writeSteps.lookup(variable))
      if (w > step && (!write || w < write))
        write = w;
    if (!write)
      return 0;
    for (int64_t read : loadSteps.lookup(variable))
      if (read > step && read < write)
        return 0;
    return write;
  }
  /// Whether the current op may write `result` over `view`: a contiguous
  /// buffer of the result's type whose values are read no later than now
  /// (but by `ownWait`, the op's wait when it runs asynchronously, which
  /// reads the operand and the result alike). That is a workspace buffer,
  /// or a device variable's state buffer between its value's last read and
  /// the whole overwrite that follows in this function, with `result` read
  /// before that write: @apply_step reads each gradient accumulator, takes
  /// the mean and sums it over dp in the accumulator's buffer, and then
  /// zeroes it, so no second copy of the gradients is held.
  bool mayOverwrite(const View &view, Value result,
                    Operation *ownWait = nullptr) const {
    const Storage &s = storages[view.storage];
    if (!view.isContiguous() || view.type != result.getType() ||
        !readNoLater(view, ownWait))
      return false;
    if (isWorkspace(s.arena))
      return true;
    if (s.arena != ArenaKind::State || !s.variable || layout.offload)
      return false;
    int64_t write = nextOverwrite(s.variable.getValue());
    return write && lastUse.lookup(result) < write;
  }
  View broadcastView(const View &operand, graph::BroadcastInDimOp op);
  /// Whether `user` reads its operand `index` through strides (Kernels.td's
  /// RowStrided) and can read it as `view`.
  bool takesView(Operation *user, unsigned index, const View &view) const;
  /// Whether `value` may be `view` (not a copy) for every op that reads it:
  /// transposes, slices and reshapes of it are views their readers take
  /// too, the kernels take strided rows, or it is the view planned for it.
  bool viewServesUsers(Value value, const View &view) const;
  /// Plans where the results of `op` that its kernel may write through
  /// strides go: into the buffer of the transposes and reshapes after them,
  /// or of the concat those end in, so that these move no data
  /// (attention's output and the gradients of its heads). Fills
  /// plannedViews and plannedConcats.
  void planResultViews(Operation &op, const runtime::KernelSignature &sig);
  /// The views planned for values before their producer ran.
  llvm::DenseMap<Value, View> plannedViews;
  /// Concats whose operands their producers write into the result's
  /// storage (planResultViews).
  llvm::DenseMap<Operation *, unsigned> plannedConcats;
  LogicalResult lowerOp(Operation &op);
  /// Copies to the host, right after `op`, the values it makes final that
  /// a host op reads (a gradient after its last reduction).
  void copyToHostAfter(Operation &op);
  bool runsOnHost(Operation *op) const {
    return layout.offload && isOffloadable(op);
  }
  /// Host copies of device values that host ops read.
  llvm::DenseMap<Value, View> hostCopies;

  func::FuncOp fn;
  ModuleLayout &layout;
  /// Kernels that read strided rows get views (the pass's strided-views).
  bool stridedViews;
  /// AdamW writes the rounded copy of its new parameter (the pass's
  /// rounded-copies; foldRoundedCopies).
  bool roundedCopies;
  void foldRoundedCopies();
  int64_t step = 0;
  SmallVector<Storage> storages;
  llvm::DenseMap<Value, View> views;
  llvm::DenseMap<Value, int64_t> lastUse;
  llvm::StringMap<SmallVector<int64_t>> storeSteps;
  /// The steps that load each variable, and that write its state buffer:
  /// its stores' copies, or for a store planned in place its value's
  /// producer.
  llvm::StringMap<SmallVector<int64_t>> loadSteps, writeSteps;
  /// The step of each op of the body; the terminator's is endStep.
  llvm::DenseMap<Operation *, int64_t> opSteps;
  int64_t endStep = 0;
  llvm::StringMap<unsigned> variableStorages;
  /// Results computed directly in the state buffer of the variable they are
  /// stored to, and the stores that therefore need no copy.
  llvm::DenseMap<Value, FlatSymbolRefAttr> stateTargets;
  llvm::DenseSet<Operation *> inPlaceStores;
  void planInPlaceUpdates(Block &body);
  SmallVector<std::pair<std::string, View>> inputs, outputs;
  /// The mesh layout of each input (dshard.sharding, dshard.global_type).
  SmallVector<DictionaryAttr> inputShardings;
  std::vector<PlannedKernel> kernels;
  int64_t workspaceBytes = 0, hostWorkspaceBytes = 0;
};

View FunctionLowering::broadcastView(const View &operand,
                                     graph::BroadcastInDimOp op) {
  auto outType = cast<RankedTensorType>(op.getType());
  SmallVector<int64_t> operandStrides = stridesOf(operand);
  SmallVector<int64_t> strides(outType.getRank(), 0);
  for (auto [i, d] : llvm::enumerate(op.getDims()))
    if (operand.type.getDimSize(i) != 1)
      strides[d] = operandStrides[i];
  return View{operand.storage, outType, strides, operand.offset};
}

/// The `fused` kernel's attributes: the region function's symbol, what
/// the region holds (dtcc.fused_ops, comma-separated, and
/// dtcc.saved_bytes), and the call's own dotted attributes as every
/// kernel's (its pipeline task and layer: kernelAttrsOf).
static DictionaryAttr fusedKernelAttrs(graph::FusedOp fused) {
  MLIRContext *ctx = fused.getContext();
  NamedAttrList attrs;
  lowering::addDialectAttrs(fused, attrs);
  attrs.set("symbol", fused.getKernelAttr().getLeafReference());
  Operation *fn = SymbolTable::lookupNearestSymbolFrom(fused, fused.getKernelAttr());
  if (!fn)
    return attrs.getDictionary(ctx);
  if (auto ops = fn->getAttrOfType<ArrayAttr>("dtcc.fused_ops")) {
    std::string names;
    for (Attribute a : ops)
      if (auto s = dyn_cast<StringAttr>(a))
        names += (names.empty() ? "" : ",") + s.str();
    attrs.set("dtcc.fused_ops", StringAttr::get(ctx, names));
  }
  if (Attribute bytes = fn->getAttr("dtcc.saved_bytes"))
    attrs.set("dtcc.saved_bytes", bytes);
  return attrs.getDictionary(ctx);
}

bool FunctionLowering::takesView(Operation *user, unsigned index,
                                 const View &view) const {
  if (!stridedViews || runsOnHost(user) || !hasAdjacentRows(view) ||
      user->getDialect()->getNamespace() != "dgraph")
    return false;
  std::string kernel = user->getName().stripDialect().str();
  const runtime::KernelSignature *sig = runtime::findKernelSignature(kernel);
  if (!sig || sig->source != user->getName().getStringRef() ||
      index >= sig->inputs.size())
    return false;
  const runtime::KernelTensorSignature &t = sig->inputs[index];
  return t.rowStrided && !t.variadic;
}

bool FunctionLowering::viewServesUsers(Value value, const View &view) const {
  if (auto it = plannedViews.find(value);
      it != plannedViews.end() && it->second == view)
    return true;
  // Views into device workspace only: the state and constants stay whole
  // buffers, and transfers copy whole buffers.
  if (storages[view.storage].arena != ArenaKind::Workspace)
    return false;
  for (OpOperand &use : value.getUses()) {
    Operation *user = use.getOwner();
    if (isa<graph::TransposeOp, graph::SliceOp, graph::ReshapeOp>(user)) {
      std::optional<View> derived = derivedView(user, view);
      if (!derived ||
          (!derived->isContiguous() &&
           !viewServesUsers(user->getResult(0), *derived)))
        return false;
      continue;
    }
    if (!takesView(user, use.getOperandNumber(), view))
      return false;
  }
  return true;
}

void FunctionLowering::planResultViews(Operation &op,
                                       const runtime::KernelSignature &sig) {
  if (!stridedViews || runsOnHost(&op))
    return;
  // Each result's chain of transposes and reshapes: the first may be one
  // of several readers (the others must take the result's view), the
  // rest each the only reader of the one before.
  struct Chain {
    unsigned result;
    SmallVector<Operation *> ops;
  };
  SmallVector<Chain> chains;
  for (auto [i, result] : llvm::enumerate(op.getResults())) {
    if (i >= sig.outputs.size() || !sig.outputs[i].rowStrided)
      continue;
    Chain chain{unsigned(i), {}};
    Value cur = result;
    for (;;) {
      SmallVector<Operation *> moves;
      for (Operation *user : cur.getUsers())
        if (isa<graph::TransposeOp, graph::ReshapeOp>(user))
          moves.push_back(user);
      if (moves.size() != 1 || (cur != result && !cur.hasOneUse()) ||
          llvm::count(cur.getUsers(), moves[0]) != 1)
        break;
      chain.ops.push_back(moves[0]);
      cur = moves[0]->getResult(0);
    }
    if (!chain.ops.empty())
      chains.push_back(std::move(chain));
  }
  auto endOf = [](const Chain &c) { return c.ops.back()->getResult(0); };

  // Pulls `end`'s view back through the chain to the result; false where
  // some step has no view or the kernel or the result's other readers
  // cannot take it.
  auto pullBack = [&](const Chain &c, View view,
                      llvm::DenseMap<Value, View> &planned) {
    for (Operation *move : llvm::reverse(c.ops)) {
      planned[move->getResult(0)] = view;
      std::optional<View> source = sourceView(move, view);
      if (!source)
        return false;
      view = *source;
    }
    Value result = op.getResult(c.result);
    if (!hasAdjacentRows(view))
      return false;
    for (OpOperand &use : result.getUses())
      if (use.getOwner() != c.ops.front() &&
          !takesView(use.getOwner(), use.getOperandNumber(), view))
        return false;
    planned[result] = view;
    return true;
  };

  // A concat of chain ends only: the results are written into its slots.
  llvm::SmallPtrSet<Operation *, 2> concatsTried;
  for (const Chain &c : chains) {
    Value end = endOf(c);
    auto concat = end.hasOneUse()
                      ? dyn_cast<graph::ConcatOp>(*end.getUsers().begin())
                      : graph::ConcatOp();
    if (!concat) {
      // Its own buffer of the chain's end type, worth it where the chain
      // would copy (a transpose; reshapes are free anyway).
      if (llvm::none_of(c.ops, [](Operation *o) {
            return isa<graph::TransposeOp>(o);
          }))
        continue;
      llvm::DenseMap<Value, View> planned;
      auto type = cast<RankedTensorType>(end.getType());
      if (!pullBack(c, contiguous(storages.size(), type), planned))
        continue;
      newStorage(ArenaKind::Workspace, tensorBytes(type));
      for (auto &[v, view] : planned)
        plannedViews[v] = view;
      continue;
    }
    if (!concatsTried.insert(concat).second)
      continue;
    auto type = cast<RankedTensorType>(concat.getType());
    SmallVector<int64_t> strides = rowMajorStrides(type.getShape());
    int64_t dim = concat.getDim(), at = 0;
    llvm::DenseMap<Value, View> planned;
    bool ok = true;
    for (Value operand : concat.getOperands()) {
      const Chain *from = llvm::find_if(
          chains, [&](const Chain &o) { return endOf(o) == operand; });
      auto operandType = cast<RankedTensorType>(operand.getType());
      if (from == chains.end() || planned.count(operand)) {
        ok = false;
        break;
      }
      View slot = withStrides(View{unsigned(storages.size()), operandType, {},
                                   at * strides[dim]},
                              operandType, strides);
      at += operandType.getDimSize(dim);
      if (!pullBack(*from, slot, planned)) {
        ok = false;
        break;
      }
    }
    if (!ok)
      continue;
    plannedConcats[concat] =
        newStorage(ArenaKind::Workspace, tensorBytes(type));
    for (auto &[v, view] : planned)
      plannedViews[v] = view;
  }
}

LogicalResult FunctionLowering::lowerOp(Operation &op) {
  MLIRContext *ctx = op.getContext();
  if (auto c = dyn_cast<graph::ConstantOp>(op)) {
    auto type = cast<RankedTensorType>(c.getType());
    ElementsAttr value = c.getValue();
    // A splat read only by elementwise ops is one element seen with stride 0;
    // so is a large one (the zeros a gradient scatters into): other kernels
    // get it filled in the workspace instead of a copy in the program.
    auto dense = dyn_cast<DenseElementsAttr>(value);
    constexpr int64_t kLargeSplatBytes = 64 * 1024;
    bool splatView = dense && dense.isSplat() && type.getNumElements() > 1 &&
                     (tensorBytes(type) >= kLargeSplatBytes ||
                      llvm::all_of(c->getUsers(), [](Operation *u) {
                        return u->hasTrait<OpTrait::Elementwise>();
                      }));
    if (splatView)
      value = dense.resizeSplat(RankedTensorType::get({}, type.getElementType()));
    auto it = layout.constantOffsets.find(value);
    int64_t offset;
    if (it == layout.constantOffsets.end()) {
      offset = layout.constantBytes;
      layout.constantOffsets[value] = offset;
      layout.constantBytes +=
          alignBytes(tensorBytes(cast<RankedTensorType>(value.getType())));
    } else {
      offset = it->second;
    }
    unsigned s = newStorage(ArenaKind::Constant, 0);
    storages[s].offset = offset;
    storages[s].value = value;
    View view = contiguous(s, type);
    if (splatView)
      view.strides.assign(type.getRank(), 0);
    bind(c.getResult(), view);
    return success();
  }
  if (auto load = dyn_cast<graph::LoadOp>(op)) {
    StringRef name = load.getVariable();
    View view = contiguous(stateStorage(load.getVariableAttr()), load.getType());
    // A value read before a store but used after it must not see the store.
    int64_t last = lastUse.lookup(load.getResult());
    if (llvm::any_of(storeSteps.lookup(name),
                     [&](int64_t st) { return st > step && st < last; }))
      view = materialize(view, load.getLoc());
    bind(load.getResult(), view);
    return success();
  }
  if (auto store = dyn_cast<graph::StoreOp>(op)) {
    if (inPlaceStores.contains(store))
      return success(); // the producer already wrote the variable
    View value = views.lookup(store.getValue());
    use(value);
    unsigned s = stateStorage(store.getVariableAttr());
    // Into a variable of the other memory space: a transfer of a whole
    // buffer.
    bool host = isHost(storages[s].arena);
    if (onHost(value) != host && !value.isContiguous())
      value = materialize(value, op.getLoc(), onHost(value));
    StringRef kernel = onHost(value) == host ? "copy"
                       : host                ? exec::kCopyToHostKernel
                                             : exec::kCopyToDeviceKernel;
    PlannedKernel k{kernel.str(), {value}, {contiguous(s, value.type)},
                    DictionaryAttr::get(ctx), op.getLoc()};
    k.origin = kernel == "copy" ? "a copy" : "a transfer";
    k.step = step;
    k.host = host && kernel == "copy";
    kernels.push_back(std::move(k));
    return success();
  }
  // A reshape, transpose or slice is a view of its operand where its
  // result is the operand's elements in order, or where its readers take
  // strided views (attention's heads); a reshape is otherwise a view of a
  // contiguous copy, a transpose or slice a kernel. Views into device
  // workspace only, but a reshape's in order.
  if (isa<graph::ReshapeOp, graph::TransposeOp, graph::SliceOp>(op) &&
      !runsOnHost(&op)) {
    const bool reshape = isa<graph::ReshapeOp>(op);
    View operand = views.lookup(op.getOperand(0));
    std::optional<View> derived = derivedView(&op, operand);
    if (derived &&
        (reshape || storages[operand.storage].arena == ArenaKind::Workspace) &&
        (derived->isContiguous() ||
         viewServesUsers(op.getResult(0), *derived))) {
      // No read here: the view's readers keep the storage alive.
      bind(op.getResult(0), *derived);
      return success();
    }
    if (reshape) {
      View copy = materialize(operand, op.getLoc());
      bind(op.getResult(0),
           contiguous(copy.storage, op.getResult(0).getType()));
      return success();
    }
  }
  // A concat whose operands were written into its slots (planResultViews).
  if (auto concat = dyn_cast<graph::ConcatOp>(op)) {
    auto it = plannedConcats.find(concat);
    if (it != plannedConcats.end() &&
        llvm::all_of(concat.getOperands(), [&](Value v) {
          auto planned = plannedViews.find(v);
          return planned != plannedViews.end() &&
                 views.lookup(v) == planned->second;
        })) {
      for (Value v : concat.getOperands())
        use(views.lookup(v));
      bind(concat.getResult(), contiguous(it->second, concat.getType()));
      return success();
    }
  }
  if (auto bcast = dyn_cast<graph::BroadcastInDimOp>(op)) {
    bool onlyElementwiseUsers = llvm::all_of(bcast->getUsers(), [](Operation *u) {
      return u->hasTrait<OpTrait::Elementwise>();
    });
    if (onlyElementwiseUsers) {
      bind(bcast.getResult(), broadcastView(views.lookup(bcast.getOperand()), bcast));
      return success();
    }
  }
  // dgraph ops and dshard's collectives are kernels of the same name.
  StringRef dialect = op.getDialect()->getNamespace();
  if (dialect != "dgraph" && dialect != "dshard")
    return op.emitOpError("cannot be lowered to dexec: not a dgraph or "
                          "dshard op");
  if (dialect == "dshard" && op.getName().stripDialect() == "constraint")
    return op.emitOpError("cannot be lowered to dexec: run "
                          "dtcc-shard-partition first");

  // Every other op is one kernel call, of the op's name, with the op's
  // attributes under the kernel's names for them (the kernel-signature
  // table's: dshard's `axis` is the collectives' `axes`).
  bool elementwise = op.hasTrait<OpTrait::Elementwise>();
  std::string kernelName = op.getName().stripDialect().str();
  const runtime::KernelSignature *signature =
      runtime::findKernelSignature(kernelName);
  if (!signature || signature->source != op.getName().getStringRef())
    return op.emitOpError("has no runtime kernel: the kernel-signature table "
                          "(runtime/kernels/Kernels.td) has no '")
           << kernelName << "' for it";
  // A fused region's call (dtcc-lower-fuse-regions) names its generated
  // kernel; it reads contiguous inputs and writes outputs of their own
  // (the generated code assumes no buffer of a region overlaps an output:
  // its loops vectorize without run-time overlap checks).
  // Its region's ops and the bytes kept out of memory travel as
  // attributes of the compiler's (`dtcc.`), for `dtcc explain`.
  auto fused = dyn_cast<graph::FusedOp>(op);
  FailureOr<DictionaryAttr> kernelAttrs =
      fused ? fusedKernelAttrs(fused) : lowering::kernelAttrsOf(&op, *signature);
  if (failed(kernelAttrs))
    return failure();
  PlannedKernel kernel{kernelName, {}, {}, *kernelAttrs, op.getLoc(),
                       ("'" + op.getName().getStringRef() + "'").str()};
  const bool host = runsOnHost(&op);
  kernel.step = step;
  kernel.host = host;
  for (auto [index, operand] : llvm::enumerate(op.getOperands())) {
    View v = views.lookup(operand);
    // An operand in the other memory space: its copy made when it became
    // final (copyToHostAfter), else a transfer now.
    if (onHost(v) != host) {
      auto it = host ? hostCopies.find(operand) : hostCopies.end();
      if (it != hostCopies.end())
        v = it->second;
      else
        v = materialize(v, op.getLoc(), host);
    }
    if (!v.isContiguous() && !elementwise && !takesView(&op, index, v))
      v = materialize(v, op.getLoc(), host);
    use(v);
    kernel.ins.push_back(v);
  }
  if (!fused)
    planResultViews(op, *signature);
  for (Value result : op.getResults()) {
    auto type = cast<RankedTensorType>(result.getType());
    const unsigned number = cast<OpResult>(result).getResultNumber();
    // Whether the kernel can write `view`: a strided place only through
    // an output that writes rows through strides.
    auto writes = [&](const View &view) {
      return view.strides.empty() ||
             (number < signature->outputs.size() &&
              signature->outputs[number].rowStrided && hasAdjacentRows(view));
    };
    std::optional<View> reused;
    if (FlatSymbolRefAttr var = stateTargets.lookup(result)) {
      // Written straight into the variable it is stored to (see plan()).
      reused = contiguous(stateStorage(var), type);
    } else if (auto planned = plannedViews.find(result);
               planned != plannedViews.end() && writes(planned->second)) {
      // Written where the transposes after it would have copied it to (a
      // transpose planned as a view that became a kernel writes its own
      // buffer).
      reused = planned->second;
    } else if (host && number == 0 && isa<graph::AdamwOp, graph::SgdOp>(op)) {
      // The updated parameter overwrites the host copy of the old one.
      const View &in = kernel.ins[0];
      if (in.isContiguous() && in.type == type && diesHere(in))
        reused = contiguous(in.storage, type);
    } else if (isa<graph::ScatterElementsOp, graph::ScatterNdOp>(op)) {
      // A scatter whose data dies at it (and is not also its indices or
      // updates) writes into the data: both backends' kernels copy the
      // data to the result only when the two differ.
      const View &in = kernel.ins[0];
      if (in.isContiguous() && in.type == type && diesHere(in) &&
          llvm::none_of(llvm::drop_begin(kernel.ins), [&](const View &v) {
            return v.storage == in.storage;
          }))
        reused = contiguous(in.storage, type);
    } else if (auto sum = dyn_cast<shard::AllReduceOp>(op);
               sum && !host && !onHost(kernel.ins[0])) {
      // An all-reduce sums in place (both backends' communicators take
      // the input as the output) where its input is read no more.
      Operation *ownWait = nullptr;
      if (auto async = op.getAttrOfType<IntegerAttr>("async");
          async && async.getInt() != 0)
        for (Operation *user : result.getUsers())
          if (isa<shard::WaitOp>(user))
            ownWait = user;
      if (mayOverwrite(kernel.ins[0], result, ownWait))
        reused = contiguous(kernel.ins[0].storage, type);
    } else if (elementwise) {
      for (const View &in : kernel.ins)
        if (onHost(in) == host && mayOverwrite(in, result) &&
            llvm::none_of(kernel.outs, [&](const View &o) {
              return o.storage == in.storage;
            })) {
          reused = contiguous(in.storage, type);
          break;
        }
    }
    View out = reused ? *reused
                      : contiguous(newStorage(host ? ArenaKind::HostWorkspace
                                                   : ArenaKind::Workspace,
                                              tensorBytes(type)),
                                   type);
    kernel.outs.push_back(out);
    bind(result, out);
  }
  kernels.push_back(std::move(kernel));
  return success();
}

void FunctionLowering::copyToHostAfter(Operation &op) {
  if (!layout.offload || runsOnHost(&op))
    return;
  // An asynchronous collective's result is final at its wait, which names
  // it.
  if (auto async = op.getAttrOfType<IntegerAttr>("async");
      async && async.getInt() != 0)
    return;
  ValueRange values = op.getName().getStringRef() == "dshard.wait"
                          ? ValueRange(op.getOperands())
                          : ValueRange(op.getResults());
  for (Value v : values) {
    if (hostCopies.count(v) || !views.count(v) ||
        llvm::none_of(v.getUsers(),
                      [&](Operation *user) { return runsOnHost(user); }))
      continue;
    View view = views.lookup(v);
    if (onHost(view))
      continue;
    View copy = materialize(view, op.getLoc(), /*host=*/true);
    // The copy lives as long as the value is read.
    storages[copy.storage].aliases.push_back(v);
    hostCopies[v] = copy;
  }
}

/// For `dgraph.store %v, @w`, lets %v's producer write @w's state buffer
/// directly when it reads @w's current value in the matching operand (an
/// elementwise op, or an optimizer's param/state operands) and nothing reads
/// @w's old value after it. Saves a copy and a buffer per variable update.
void FunctionLowering::planInPlaceUpdates(Block &body) {
  llvm::StringMap<SmallVector<graph::LoadOp>> loads;
  for (Operation &op : body.without_terminator())
    if (auto load = dyn_cast<graph::LoadOp>(op))
      loads[load.getVariable()].push_back(load);
  for (Operation &op : body.without_terminator()) {
    auto store = dyn_cast<graph::StoreOp>(op);
    if (!store || storeSteps.lookup(store.getVariable()).size() != 1)
      continue;
    Value value = store.getValue();
    Operation *producer = value.getDefiningOp();
    if (!producer || producer->getBlock() != &body || stateTargets.count(value))
      continue;
    // A host op writes only the host's variables, a device op the
    // device's.
    if (runsOnHost(producer) !=
        layout.hostVariables.contains(store.getVariable()))
      continue;
    // The operand of the producer that may share the result's memory.
    unsigned result = cast<OpResult>(value).getResultNumber();
    SmallVector<unsigned> candidates;
    if (isa<graph::AdamwOp>(producer))
      candidates = {std::array<unsigned, 3>{0, 2, 3}[result]};
    else if (isa<graph::SgdOp>(producer))
      candidates = {std::array<unsigned, 2>{0, 2}[result]};
    else if (producer->hasTrait<OpTrait::Elementwise>())
      for (unsigned j = 0; j < producer->getNumOperands(); ++j)
        candidates.push_back(j);
    bool readsOld = llvm::any_of(candidates, [&](unsigned j) {
      auto load = producer->getOperand(j).getDefiningOp<graph::LoadOp>();
      return load && load.getVariable() == store.getVariable() &&
             load.getType() == value.getType();
    });
    // A rounding stored whole (a master weight's compute-type copy,
    // dtcc-shard-half-weight-copies) writes the variable it is stored in
    // too (the store's verifier has matched the variable's type).
    const bool rounding = isa<graph::CastOp>(producer);
    int64_t at = opSteps.lookup(producer);
    bool oldDeadAfter = llvm::all_of(loads[store.getVariable()], [&](auto load) {
      return lastUse.lookup(load.getResult()) <= at;
    });
    if ((readsOld || rounding) && oldDeadAfter) {
      stateTargets[value] = store.getVariableAttr();
      inPlaceStores.insert(store);
    }
  }
}

/// An AdamW update followed by the rounding of its new parameter into a
/// variable's state buffer (the master's compute-type copy that
/// dtcc-shard-half-weight-copies keeps and planInPlaceUpdates lets the cast
/// write) becomes one kernel: the update writes the copy as its optional
/// output `rounded` while it holds the new value, instead of a second pass
/// reading the master back from memory. Both buffers are state, so the
/// workspace plan does not change.
void FunctionLowering::foldRoundedCopies() {
  std::vector<PlannedKernel> folded;
  for (PlannedKernel &k : kernels) {
    if (k.kernel == "cast" && !folded.empty()) {
      PlannedKernel &update = folded.back();
      const View &to = k.outs[0];
      auto half = dyn_cast<FloatType>(to.type.getElementType());
      if (update.kernel == "adamw" && update.outs.size() == 3 && !update.host &&
          !k.host && k.ins[0] == update.outs[0] &&
          update.outs[0].isContiguous() &&
          update.outs[0].type.getElementType().isF32() && half &&
          half.getWidth() == 16 && to.isContiguous() &&
          storages[to.storage].arena == ArenaKind::State) {
        update.outs.push_back(to);
        continue;
      }
    }
    folded.push_back(std::move(k));
  }
  kernels = std::move(folded);
}

LogicalResult FunctionLowering::plan() {
  Block &body = fn.front();
  auto terminator = dyn_cast<func::ReturnOp>(body.getTerminator());
  if (!terminator)
    return fn.emitOpError("expected a func.return terminator");

  // Steps: 0 binds the inputs, op i runs at step i + 1, outputs are read at
  // the step after the last op.
  int64_t numOps = 0;
  for (Operation &op : body.without_terminator()) {
    opSteps[&op] = ++numOps;
    for (Value operand : op.getOperands())
      lastUse[operand] = numOps;
    if (auto store = dyn_cast<graph::StoreOp>(op))
      storeSteps[store.getVariable()].push_back(numOps);
    if (auto load = dyn_cast<graph::LoadOp>(op))
      loadSteps[load.getVariable()].push_back(numOps);
  }
  endStep = numOps + 1;
  // About one kernel per op: regrowing the vector moved every planned
  // kernel again (3% of a pipeline's lowering).
  kernels.reserve(numOps + numOps / 8);
  for (Value v : terminator.getOperands())
    lastUse[v] = endStep;
  planInPlaceUpdates(body);
  for (Operation &op : body.without_terminator())
    if (auto store = dyn_cast<graph::StoreOp>(op)) {
      Operation *producer = store.getValue().getDefiningOp();
      writeSteps[store.getVariable()].push_back(
          inPlaceStores.contains(store) ? opSteps.lookup(producer)
                                        : opSteps.lookup(store));
    }

  step = 0;
  for (BlockArgument arg : body.getArguments()) {
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (!type || !type.hasStaticShape())
      return fn.emitOpError("expected statically shaped tensor arguments, got ")
             << arg.getType();
    auto name = fn.getArgAttrOfType<StringAttr>(arg.getArgNumber(), dtcc::graph::kNameAttr);
    View view = contiguous(newStorage(ArenaKind::Workspace, tensorBytes(type)), type);
    bind(arg, view);
    inputs.push_back({name ? name.str() : "input" + std::to_string(arg.getArgNumber()),
                      view});
    NamedAttrList layout;
    for (StringRef key : {shard::kShardingAttr, shard::kGlobalTypeAttr})
      if (Attribute a = fn.getArgAttr(arg.getArgNumber(), key))
        layout.set(key, a);
    inputShardings.push_back(layout.getDictionary(fn.getContext()));
  }
  for (Operation &op : body.without_terminator()) {
    ++step;
    if (failed(lowerOp(op)))
      return failure();
    copyToHostAfter(op);
  }
  step = endStep;
  llvm::DenseSet<unsigned> outputStorages;
  for (auto [i, v] : llvm::enumerate(terminator.getOperands())) {
    View view = views.lookup(v);
    // Outputs own a contiguous workspace buffer each, on the device.
    if (!view.isContiguous() ||
        storages[view.storage].arena != ArenaKind::Workspace ||
        !outputStorages.insert(view.storage).second)
      view = materialize(view, terminator.getLoc());
    outputStorages.insert(view.storage);
    use(view);
    auto name = fn.getResultAttrOfType<StringAttr>(i, dtcc::graph::kNameAttr);
    outputs.push_back({name ? name.str() : "output" + std::to_string(i), view});
  }

  if (roundedCopies)
    foldRoundedCopies();

  // Every call must be one the runtime takes: checked here, against the
  // table both backends check it against when they load the program. The
  // check reads a call's kernel, its operands' types and its attributes
  // but a dialect's (uniqued: compared by address), so a call like one
  // checked already (each micro-batch of an unrolled step repeats them) is
  // not checked again.
  std::set<std::pair<std::string, std::vector<const void *>>> checked;
  for (const PlannedKernel &k : kernels) {
    std::vector<const void *> key;
    for (const View &v : k.ins)
      key.push_back(v.type.getAsOpaquePointer());
    key.push_back(nullptr);
    for (const View &v : k.outs)
      key.push_back(v.type.getAsOpaquePointer());
    key.push_back(nullptr);
    for (NamedAttribute a : k.attrs)
      if (!lowering::isDialectAttr(a)) {
        key.push_back(a.getName().getAsOpaquePointer());
        key.push_back(a.getValue().getAsOpaquePointer());
      }
    if (!checked.emplace(k.kernel, std::move(key)).second)
      continue;
    SmallVector<RankedTensorType> ins, outs;
    for (const View &v : k.ins)
      ins.push_back(v.type);
    for (const View &v : k.outs)
      outs.push_back(v.type);
    if (failed(lowering::verifyKernelCall(k.loc, k.origin, k.kernel, ins, outs,
                                          k.attrs)))
      return failure();
  }

  // A transfer runs asynchronously on a GPU (a copy stream): its source
  // stays untouched until the next host kernel, which waits for every
  // transfer queued before it, or the function's end.
  int64_t nextHost = endStep;
  for (PlannedKernel &k : llvm::reverse(kernels)) {
    if (k.host)
      nextHost = k.step;
    if (k.kernel == exec::kCopyToHostKernel ||
        k.kernel == exec::kCopyToDeviceKernel) {
      Storage &src = storages[k.ins[0].storage];
      src.last = std::max(src.last, nextHost);
    }
  }

  // Plan each memory space's workspace.
  auto planArena = [&](ArenaKind arena) {
    SmallVector<unsigned> planned;
    std::vector<PlannedBuffer> buffers;
    for (auto [i, s] : llvm::enumerate(storages)) {
      if (s.arena != arena)
        continue;
      planned.push_back(i);
      buffers.push_back({s.bytes, s.first, s.last});
    }
    MemoryPlan memory = planMemory(buffers);
    for (auto [i, s] : llvm::enumerate(planned))
      storages[s].offset = memory.offsets[i];
    return memory.peakBytes;
  };
  workspaceBytes = planArena(ArenaKind::Workspace);
  hostWorkspaceBytes = planArena(ArenaKind::HostWorkspace);
  return success();
}

void FunctionLowering::rewrite() {
  MLIRContext *ctx = fn.getContext();
  Block &oldBody = fn.front();
  Location loc = fn.getLoc();
  auto *newBody = new Block();
  OpBuilder b(ctx);
  b.setInsertionPointToStart(newBody);

  // Each workspace storage's lifetime in kernel indices: the kernels that
  // run at a step of its lifetime (steps only grow along `kernels`).
  auto liveOf = [&](const Storage &s) -> DenseI64ArrayAttr {
    if (!isWorkspace(s.arena))
      return {};
    auto byStep = [](const PlannedKernel &k, int64_t step) {
      return k.step < step;
    };
    int64_t first =
        std::lower_bound(kernels.begin(), kernels.end(), s.first, byStep) -
        kernels.begin();
    int64_t last =
        std::lower_bound(kernels.begin(), kernels.end(), s.last + 1, byStep) -
        kernels.begin() - 1;
    if (first > last)
      return {};
    return DenseI64ArrayAttr::get(ctx, {first, last});
  };

  llvm::DenseMap<std::tuple<unsigned, Type, int64_t>, Value> buffers;
  Operation *lastBuffer = nullptr; // buffers come first, in creation order
  auto bufferFor = [&](const View &view) -> Value {
    Type elementType = view.type.getElementType();
    MemRefLayoutAttrInterface layoutAttr;
    if (!view.strides.empty())
      layoutAttr = StridedLayoutAttr::get(ctx, 0, view.strides);
    auto type = MemRefType::get(view.type.getShape(), elementType, layoutAttr);
    auto key = std::make_tuple(view.storage, Type(type), view.offset);
    if (Value v = buffers.lookup(key))
      return v;
    const Storage &s = storages[view.storage];
    OpBuilder::InsertionGuard guard(b);
    if (lastBuffer)
      b.setInsertionPointAfter(lastBuffer);
    else
      b.setInsertionPointToStart(newBody);
    // A view into its storage (a slice of it) starts that many elements in.
    int64_t offset = s.offset + view.offset * elementBytes(elementType);
    auto op = exec::BufferOp::create(b, loc, type, arenaName(s.arena), offset,
                                     s.variable, s.value, StringAttr(),
                                     liveOf(s));
    lastBuffer = op;
    buffers[key] = op.getResult();
    return op.getResult();
  };

  for (auto [input, layout] : llvm::zip(inputs, inputShardings)) {
    auto op = exec::InputOp::create(b, loc, input.first, bufferFor(input.second));
    for (NamedAttribute a : layout)
      op->setAttr(a.getName(), a.getValue());
  }
  for (PlannedKernel &k : kernels) {
    SmallVector<Value> ins, outs;
    for (const View &v : k.ins)
      ins.push_back(bufferFor(v));
    for (const View &v : k.outs)
      outs.push_back(bufferFor(v));
    auto op = exec::KernelOp::create(b, k.loc, k.kernel, ins, outs, k.attrs);
    if (k.host)
      op.setHost(true);
  }
  for (auto &[name, view] : outputs)
    exec::OutputOp::create(b, loc, name, bufferFor(view));
  func::ReturnOp::create(b, loc);

  oldBody.dropAllDefinedValueUses();
  oldBody.erase();
  fn.getBody().push_back(newBody);
  fn.setFunctionType(FunctionType::get(ctx, {}, {}));
  fn.removeArgAttrsAttr();
  fn.removeResAttrsAttr();
  fn->setAttr("dexec.workspace_bytes",
              IntegerAttr::get(IntegerType::get(ctx, 64), workspaceBytes));
  if (hostWorkspaceBytes > 0)
    fn->setAttr("dexec.host_workspace_bytes",
                IntegerAttr::get(IntegerType::get(ctx, 64), hostWorkspaceBytes));
}

LogicalResult FunctionLowering::run() {
  if (!fn.getBody().hasOneBlock())
    return fn.emitOpError("expected a function with one block");
  if (failed(plan()))
    return failure();
  rewrite();
  return success();
}

struct LowerToExecPass
    : public dtcc::lowering::impl::LowerToExecBase<LowerToExecPass> {
  using LowerToExecBase::LowerToExecBase;
  void runOnOperation() final {
    ModuleOp module = getOperation();
    MLIRContext *ctx = module.getContext();
    ModuleLayout layout;
    layout.offload = offloadsOptimizer(module);
    if (layout.offload)
      findHostVariables(module, layout.hostVariables);
    // Variables every rank holds come first; those of one pipeline stage
    // (dshard.stage) share the space after them with the other stages'.
    // The host's variables (an offloaded optimizer's state) are laid out
    // alike in their own arena.
    for (bool host : {false, true}) {
      int64_t &bytes = host ? layout.hostStateBytes : layout.stateBytes;
      auto mine = [&](graph::VariableOp var) {
        return layout.hostVariables.contains(var.getSymName()) == host;
      };
      auto place = [&](graph::VariableOp var, int64_t &offset) {
        layout.stateOffsets[var.getSymName()] = offset;
        var->setAttr("dexec.offset",
                     IntegerAttr::get(IntegerType::get(ctx, 64), offset));
        if (host)
          var->setAttr("dexec.arena", StringAttr::get(ctx, "host_state"));
        offset += alignBytes(tensorBytes(var.getTensorType()));
      };
      for (auto var : module.getOps<graph::VariableOp>())
        if (mine(var) && !var->hasAttr(shard::kStageAttr))
          place(var, bytes);
      std::map<int64_t, int64_t> stageEnd;
      for (auto var : module.getOps<graph::VariableOp>())
        if (auto stage = var->getAttrOfType<IntegerAttr>(shard::kStageAttr);
            stage && mine(var)) {
          auto [it, fresh] = stageEnd.try_emplace(stage.getInt(), bytes);
          place(var, it->second);
        }
      for (auto &[stage, end] : stageEnd)
        bytes = std::max(bytes, end);
    }
    int64_t workspace = 0, hostWorkspace = 0;
    for (auto fn : llvm::make_early_inc_range(module.getOps<func::FuncOp>())) {
      if (fn.isExternal()) {
        fn.emitOpError("is a declaration without a body: a program's "
                       "functions are defined in it");
        return signalPassFailure();
      }
      FunctionLowering lowering(fn, layout, stridedViews, roundedCopies);
      if (failed(lowering.run()))
        return signalPassFailure();
      workspace = std::max(
          workspace,
          fn->getAttrOfType<IntegerAttr>("dexec.workspace_bytes").getInt());
      if (auto bytes = fn->getAttrOfType<IntegerAttr>("dexec.host_workspace_bytes"))
        hostWorkspace = std::max(hostWorkspace, bytes.getInt());
    }
    auto i64 = IntegerType::get(ctx, 64);
    module->setAttr("dexec.workspace_bytes", IntegerAttr::get(i64, workspace));
    module->setAttr("dexec.state_bytes", IntegerAttr::get(i64, layout.stateBytes));
    module->setAttr("dexec.constant_bytes",
                    IntegerAttr::get(i64, layout.constantBytes));
    if (layout.offload) {
      module->setAttr("dexec.host_workspace_bytes",
                      IntegerAttr::get(i64, hostWorkspace));
      module->setAttr("dexec.host_state_bytes",
                      IntegerAttr::get(i64, layout.hostStateBytes));
    }
  }

  /// The variables only the optimizer's updates read and write (their
  /// state: Adam's moments, SGD's momentum), which live on the host.
  static void findHostVariables(ModuleOp module, llvm::StringSet<> &host) {
    llvm::StringMap<bool> onlyOptimizer;
    module.walk([&](Operation *op) {
      if (auto load = dyn_cast<graph::LoadOp>(op)) {
        bool ok = !load->use_empty() &&
                  llvm::all_of(load->getUsers(), isOffloadable);
        auto [it, fresh] = onlyOptimizer.try_emplace(load.getVariable(), ok);
        it->second &= ok;
      } else if (auto store = dyn_cast<graph::StoreOp>(op)) {
        Operation *producer = store.getValue().getDefiningOp();
        bool ok = producer && isOffloadable(producer);
        auto [it, fresh] = onlyOptimizer.try_emplace(store.getVariable(), ok);
        it->second &= ok;
      }
    });
    for (auto var : module.getOps<graph::VariableOp>())
      if (!var.getTrainable() && onlyOptimizer.lookup(var.getSymName()))
        host.insert(var.getSymName());
  }
};

} // namespace
