//===- ShardConformanceMain.cpp - every op under every sharding its rule allows ===//
//
// For each op case (OpCases.cpp): builds loss = sum(y * w) over the op's
// float results with fixed random w, differentiates it as
// dtcc-graph-autodiff does, and runs @train_step on one device. Then for
// every sharding the op's rule allows on 2 ranks (tp=2) and 4 ranks (tp=4,
// dp=2 x tp=2): pins the op's operands, results and the loss weights with
// dshard.constraint, runs propagation (checking that the op took the pinned
// sharding), partition and lowering, and runs the program on real ranks:
// torchrun-style TCP ranks forked by this process, which inherit the
// compiled programs and the single-device outputs and compare the loss, the
// op's results and every gradient. Prints per-op counts and
// `onnx-shard: P passed, F failed, S skipped`.
//
//===----------------------------------------------------------------------===//

#include "tests/shardconf/ShardConformance.h"

#include "compiler/Driver.h"
#include "compiler/Serialize.h"
#include "passes/Graph/Passes.h"
#include "passes/Sharding/Passes.h"
#include "runtime/comm/CommContext.h"
#include "runtime/comm/Communicator.h"
#include "runtime/comm/TcpPort.h"
#include "runtime/device/Device.h"
#include "runtime/exec/Executable.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <functional>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace mlir;
using namespace dtcc;
using namespace dtcc::shardconf;

namespace {

constexpr llvm::StringLiteral kTargetAttr = "shardconf.target";
constexpr llvm::StringLiteral kWeightAttr = "shardconf.weight";
/// Seconds a rank waits in a collective before the job is declared hung.
constexpr double kCollectiveTimeout = 20;
/// Seconds one group of ranks may take for all its jobs.
constexpr double kGroupTimeout = 300;
/// --print-ir: print each sharded program before lowering.
bool gPrintIr = false;

//===----------------------------------------------------------------------===//
// Outcomes
//===----------------------------------------------------------------------===//

struct Outcome {
  enum Kind { kPass, kFail, kSkip };
  Kind kind = kPass;
  std::string reason;
};

/// One sharding of one case on one mesh (or why the case has none there).
struct Entry {
  size_t caseIndex = 0, meshIndex = 0;
  std::string sharding; ///< describeSharding(); empty for a whole-case entry
  bool wholeCase = false; ///< about the case, not one mesh
  Outcome outcome;
  /// Index into the job list when it runs on ranks, else -1.
  int64_t job = -1;
};

/// A compiled program to run on the ranks of its mesh.
struct Job {
  size_t caseIndex = 0, meshIndex = 0;
  std::string sharding;
  std::unique_ptr<SerializedProgram> program;
  /// A self-check: the program carries this injected fault and must fail.
  std::string fault;
  Outcome outcome; ///< filled after the run
};

/// The single-device run of a case.
struct Reference {
  std::vector<std::string> names;
  std::vector<runtime::HostTensor> outputs;
};

//===----------------------------------------------------------------------===//
// Building a case
//===----------------------------------------------------------------------===//

/// Every diagnostic of the compiler, kept for the verdict instead of
/// printed.
struct Diagnostics {
  std::string text;
  void clear() { text.clear(); }
  std::string take() {
    std::string t = text;
    text.clear();
    while (!t.empty() && t.back() == '\n')
      t.pop_back();
    return t.empty() ? "(no diagnostic)" : t;
  }
};

std::string tensorType(const std::vector<int64_t> &shape, const std::string &dt) {
  std::string s = "tensor<";
  for (int64_t d : shape)
    s += std::to_string(d) + "x";
  return s + dt + ">";
}

/// A dense literal of `p`'s shape and dtype with random values.
std::string denseOf(const Param &p, std::mt19937 &rng) {
  std::uniform_real_distribution<double> real(p.lo, p.hi);
  std::uniform_int_distribution<int64_t> whole(int64_t(p.lo), int64_t(p.hi));
  std::ostringstream os;
  os.precision(17);
  std::function<void(size_t)> emit = [&](size_t dim) {
    if (dim == p.shape.size()) {
      if (p.dtype == "i1")
        os << (whole(rng) % 2 ? "true" : "false");
      else if (p.dtype[0] == 'i' || p.dtype[0] == 'u')
        os << whole(rng);
      else
        os << real(rng);
      return;
    }
    os << "[";
    for (int64_t i = 0; i < p.shape[dim]; ++i) {
      if (i)
        os << ", ";
      emit(dim + 1);
    }
    os << "]";
  };
  os << "dense<";
  emit(0);
  os << ">";
  return os.str();
}

Operation *findMarked(func::FuncOp fn, StringRef attr) {
  Operation *found = nullptr;
  fn.walk([&](Operation *op) {
    if (!found && op->hasAttr(attr))
      found = op;
  });
  return found;
}

bool isFloatTensor(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && isa<FloatType>(t.getElementType());
}

/// Random weights of `type` (a float tensor), as a constant.
DenseElementsAttr randomWeights(RankedTensorType type, std::mt19937 &rng) {
  std::uniform_real_distribution<double> dist(-1, 1);
  auto fty = cast<FloatType>(type.getElementType());
  std::vector<APFloat> values;
  for (int64_t i = 0; i < type.getNumElements(); ++i) {
    APFloat v(dist(rng));
    bool lost;
    v.convert(fty.getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
    values.push_back(v);
  }
  return DenseElementsAttr::get(type, values);
}

/// Replaces the function's return by one of `values`, named `names`.
void setReturn(func::FuncOp fn, ArrayRef<Value> values,
               ArrayRef<std::string> names) {
  auto ret = cast<func::ReturnOp>(fn.front().getTerminator());
  OpBuilder b(ret);
  func::ReturnOp::create(b, ret.getLoc(), values);
  ret.erase();
  fn.setFunctionType(FunctionType::get(fn.getContext(), {},
                                       ValueRange(values).getTypes()));
  SmallVector<DictionaryAttr> attrs;
  for (const std::string &name : names)
    attrs.push_back(b.getDictionaryAttr(
        {b.getNamedAttr("dgraph.name", b.getStringAttr(name))}));
  fn.setAllResultAttrs(attrs);
}

/// A case's training step, before any sharding: @train_step returns the
/// loss and gradients (when the op is differentiable) and the op's results
/// ("y0", "y1", ...). The op carries kTargetAttr, the loss weights
/// kWeightAttr (the index of their result).
struct Prepared {
  OwningOpRef<ModuleOp> module;
  std::string caseName;
  std::string opName;
  bool differentiable = false;
};

/// Which of the op's results the loss weighs: every float one, the first
/// only (when the op's VJP refuses gradients for the others), or none (the
/// op has no VJP for these operands: its forward results are compared).
enum class LossOver { kAllResults, kFirstResult, kNothing };

FailureOr<Prepared> prepare(MLIRContext &ctx, const OpCase &c, LossOver over,
                            Diagnostics &diags, std::string &error) {
  std::mt19937 rng(1234);
  std::ostringstream text;
  for (const Param &p : c.params)
    text << "dgraph.variable @" << p.name << " : " << tensorType(p.shape, p.dtype)
         << " = " << denseOf(p, rng)
         << (p.dtype[0] == 'f' || p.dtype[0] == 'b' ? " {trainable}" : "") << "\n";
  text << "func.func @main() {\n";
  for (const Param &p : c.params)
    text << "  %" << p.name << " = dgraph.load @" << p.name << " : "
         << tensorType(p.shape, p.dtype) << "\n";
  text << c.body << "\n  return\n}\n";
  diags.clear();
  Prepared out;
  out.caseName = c.name;
  out.module = parseSourceString<ModuleOp>(text.str(), &ctx);
  if (!out.module) {
    error = "does not parse: " + diags.take();
    return failure();
  }
  auto main = out.module->lookupSymbol<func::FuncOp>("main");
  Operation *target = main.front().getTerminator()->getPrevNode();
  if (!target || isa<graph::LoadOp>(target)) {
    error = "the body has no op";
    return failure();
  }
  out.opName = target->getName().getStringRef().str();
  target->setAttr(kTargetAttr, UnitAttr::get(&ctx));

  bool floatParam = llvm::any_of(c.params, [](const Param &p) {
    return p.dtype[0] == 'f' || p.dtype[0] == 'b';
  });
  bool floatResult = llvm::any_of(target->getResults(), isFloatTensor);
  out.differentiable = isa<graph::DifferentiableOpInterface>(target) &&
                       floatParam && floatResult && over != LossOver::kNothing;
  SmallVector<std::string> names;
  for (unsigned j = 0; j < target->getNumResults(); ++j)
    names.push_back(target->getNumResults() == 1 ? "y" : "y" + std::to_string(j));

  PassManager graph(&ctx);
  graph.addPass(createCanonicalizerPass());
  graph.addPass(createCSEPass());
  if (!out.differentiable) {
    // Forward only: the op's results are the outputs.
    SmallVector<Value> results(target->getResults());
    setReturn(main, results, names);
    main.setName("train_step");
    if (failed(graph.run(*out.module))) {
      error = "does not compile: " + diags.take();
      return failure();
    }
    if (!findMarked(main, kTargetAttr)) {
      error = "the op under test was folded away";
      return failure();
    }
    return out;
  }

  // loss = sum_j sum(result_j * w_j) over the float results.
  OpBuilder b(main.front().getTerminator());
  Location loc = target->getLoc();
  Value loss;
  for (auto [j, r] : llvm::enumerate(target->getResults())) {
    if (!isFloatTensor(r) || (loss && over == LossOver::kFirstResult))
      continue;
    auto type = cast<RankedTensorType>(r.getType());
    auto w = graph::ConstantOp::create(b, loc, randomWeights(type, rng));
    w->setAttr(kWeightAttr, b.getI64IntegerAttr(j));
    Value p = graph::MulOp::create(b, loc, type, r, w);
    if (type.getRank() > 0) {
      SmallVector<int64_t> dims;
      for (int64_t d = 0; d < type.getRank(); ++d)
        dims.push_back(d);
      p = graph::ReduceSumOp::create(b, loc, p, dims);
    }
    loss = loss ? graph::AddOp::create(b, loc, loss, p).getResult() : p;
  }
  setReturn(main, ArrayRef<Value>{loss}, ArrayRef<std::string>{"loss"});
  graph::AutodiffOptions ad;
  ad.loss = "loss";
  graph.addPass(graph::createAutodiff(ad));
  graph.addPass(createCanonicalizerPass());
  graph.addPass(createCSEPass());
  if (failed(graph.run(*out.module))) {
    error = "does not differentiate: " + diags.take();
    return failure();
  }
  out.module->lookupSymbol<func::FuncOp>("main").erase();
  auto train = out.module->lookupSymbol<func::FuncOp>("train_step");
  target = findMarked(train, kTargetAttr);
  if (!target) {
    error = "the op under test was folded away";
    return failure();
  }
  // Append the op's results to the loss and gradients.
  auto ret = cast<func::ReturnOp>(train.front().getTerminator());
  SmallVector<Value> values(ret.getOperands());
  SmallVector<std::string> all;
  for (unsigned i = 0; i < train.getNumResults(); ++i)
    all.push_back(train.getResultAttrOfType<StringAttr>(i, "dgraph.name").str());
  values.append(target->getResults().begin(), target->getResults().end());
  all.append(names.begin(), names.end());
  setReturn(train, values, all);
  return out;
}

/// Removes the harness's marks, lowers to dexec and serializes.
FailureOr<SerializedProgram> lower(ModuleOp module, Diagnostics &diags,
                                   std::string &error) {
  module.walk([](Operation *op) {
    op->removeAttr(kTargetAttr);
    op->removeAttr(kWeightAttr);
  });
  CompileOptions options;
  options.compileTo = Phase::Exec;
  options.startAfter = Phase::Shard;
  if (failed(runPhases(module, options))) {
    error = "does not lower: " + diags.take();
    return failure();
  }
  auto program = serializeProgram(module);
  if (failed(program)) {
    error = "does not serialize: " + diags.take();
    return failure();
  }
  return std::move(*program);
}

//===----------------------------------------------------------------------===//
// Sharding a case
//===----------------------------------------------------------------------===//

/// Faults the self-check injects: each must make a sharded run fail.
enum class Fault {
  kNone,
  /// A partial sum completed by max instead of sum: a wrong collective.
  kSumAsMax,
  /// The op's result recorded as complete where it is a partial sum: a
  /// mis-pinned sharding (the all-reduce that completes it is never made).
  kForgetPartial,
  /// A slice taken along the other mesh axis: a block of the wrong rank.
  kSliceOtherAxis,
};

const char *faultName(Fault f) {
  switch (f) {
  case Fault::kNone: return "none";
  case Fault::kSumAsMax: return "all-reduce by max instead of sum";
  case Fault::kForgetPartial: return "the op's partial result taken as complete";
  case Fault::kSliceOtherAxis: return "a slice along the other mesh axis";
  }
  return "?";
}

struct Sharded {
  Outcome outcome;  ///< kPass: `program` is ready to run
  bool faultApplied = false;
  std::unique_ptr<SerializedProgram> program;
};

/// Why propagation gave `target` other factor axes than pinned: a skip when
/// the rule's kinds say it may (a special factor without a distributed form
/// for that split, a max/min reduction, a source op), else a failure.
Outcome explainMismatch(Operation *target, const graph::ShardingRule &rule,
                        const shard::FactorAxes &want,
                        const shard::FactorAxes &got, MLIRContext *ctx) {
  using Kind = graph::ShardingRule::Kind;
  auto axesText = [](ArrayRef<StringAttr> axes) {
    std::string s = "[";
    for (auto [i, a] : llvm::enumerate(axes))
      s += (i ? ", " : "") + a.str();
    return s + "]";
  };
  for (size_t f = 0; f < rule.factors.size(); ++f) {
    if (want.axes[f] == got.axes[f])
      continue;
    const auto &factor = rule.factors[f];
    if (got.axes[f].empty()) {
      if (target->getNumOperands() == 0)
        return {Outcome::kSkip, "a source (no operands): propagation keeps it whole"};
      if (factor.kind == Kind::kSpecial)
        return {Outcome::kSkip,
                want.axes[f].size() > 1
                    ? "special factor over two axes: its distributed form takes one"
                    : "special factor: no distributed form for this split"};
      if (factor.kind == Kind::kReduction && factor.reduction != "sum")
        return {Outcome::kSkip,
                "a split " + factor.reduction.str() +
                    " reduction would leave partial " +
                    (factor.reduction == "max" ? "maxima" : "minima")};
    }
    std::string s;
    llvm::raw_string_ostream os(s);
    os << "propagation did not take the pinned sharding: factor " << f
       << " (size " << factor.size << ") pinned to " << axesText(want.axes[f])
       << ", took " << axesText(got.axes[f]) << "; the op got ";
    auto ins = target->getAttrOfType<ArrayAttr>("dshard.in_shardings");
    auto outs = target->getAttrOfType<ArrayAttr>(shard::kResultShardingsAttr);
    os << (ins ? ins : ArrayAttr::get(ctx, {})) << " -> "
       << (outs ? outs : ArrayAttr::get(ctx, {}));
    return {Outcome::kFail, s};
  }
  return {};
}

/// `s` (a result's sharding) with each partial axis moved onto the first
/// dimension whose local blocks it divides: the sharding a user that wants
/// the result split that way requires, which the partitioner reaches by a
/// reduce-scatter. Partial axes that fit nowhere stay partial.
shard::ShardingAttr scatterPartial(shard::ShardingAttr s, Value result,
                                   const MeshSpec &mesh, MLIRContext *ctx) {
  auto type = cast<RankedTensorType>(result.getType());
  SmallVector<shard::DimShardingAttr> dims(s.getDims());
  SmallVector<StringAttr> partial;
  auto sizeOf = [&](StringAttr a) {
    for (auto [name, size] : llvm::zip(mesh.axes, mesh.sizes))
      if (name == a.getValue())
        return size;
    return int64_t(1);
  };
  for (StringAttr p : s.getPartial()) {
    bool placed = false;
    for (auto [d, dim] : llvm::enumerate(dims)) {
      int64_t local = type.getDimSize(d) / dim.getGroups();
      for (StringAttr a : dim.getAxes())
        local /= sizeOf(a);
      if (local % sizeOf(p) != 0 || local < sizeOf(p))
        continue;
      SmallVector<StringAttr> axes(dim.getAxes());
      axes.push_back(p);
      dim = shard::DimShardingAttr::get(ctx, axes, dim.getGroups());
      placed = true;
      break;
    }
    if (!placed)
      partial.push_back(p);
  }
  return shard::ShardingAttr::get(ctx, dims, partial);
}

/// Compiles `prepared` with its op pinned to `axes` on `mesh`; with
/// `scatter`, the users of its partial results want them split (a
/// reduce-scatter) rather than whole (an all-reduce).
Sharded shardCase(const Prepared &prepared, const MeshSpec &mesh,
                  const shard::FactorAxes &axes, bool scatter, Fault fault,
                  Diagnostics &diags) {
  Sharded out;
  ModuleOp base = prepared.module.get();
  MLIRContext *ctx = base.getContext();
  OwningOpRef<ModuleOp> module = base.clone();
  auto train = module->lookupSymbol<func::FuncOp>("train_step");
  Operation *target = findMarked(train, kTargetAttr);
  graph::ShardingRule rule =
      cast<graph::ShardableOpInterface>(target).getShardingRule();
  auto fail = [&](std::string why) {
    out.outcome = {Outcome::kFail, std::move(why)};
    return std::move(out);
  };

  // Pin: operands as the rule's projections, results and the loss weights
  // (hence the results' gradients) as theirs, without the partial sums.
  OpBuilder b(target);
  for (auto [i, factors] : llvm::enumerate(rule.operands)) {
    auto s = shard::project(rule, factors, axes, /*isResult=*/false, ctx);
    auto c = shard::ConstraintOp::create(b, target->getLoc(), target->getOperand(i), s);
    target->setOperand(i, c);
  }
  b.setInsertionPointAfter(target);
  SmallVector<shard::ShardingAttr> resultPins;
  for (auto [j, factors] : llvm::enumerate(rule.results)) {
    auto s = shard::project(rule, factors, axes, /*isResult=*/true, ctx);
    if (scatter)
      s = scatterPartial(s, target->getResult(j), mesh, ctx);
    s = s.withoutPartial();
    resultPins.push_back(s);
    Value r = target->getResult(j);
    auto c = shard::ConstraintOp::create(b, target->getLoc(), r, s);
    r.replaceAllUsesExcept(c, c);
  }
  train.walk([&](graph::ConstantOp w) {
    auto j = w->getAttrOfType<IntegerAttr>(kWeightAttr);
    if (!j)
      return;
    OpBuilder wb(w->getContext());
    wb.setInsertionPointAfter(w);
    auto c = shard::ConstraintOp::create(wb, w.getLoc(), w.getResult(),
                                         resultPins[j.getInt()]);
    w.getResult().replaceAllUsesExcept(c, c);
  });
  SmallVector<StringAttr> axisNames;
  for (const std::string &a : mesh.axes)
    axisNames.push_back(StringAttr::get(ctx, a));
  auto meshAttr = shard::MeshAttr::get(ctx, axisNames, mesh.sizes);
  (*module)->setAttr(shard::kMeshAttr, meshAttr);

  diags.clear();
  {
    PassManager pm(ctx);
    pm.addPass(shard::createShardPropagate());
    if (failed(pm.run(*module)))
      return fail("propagation fails: " + diags.take());
  }
  // The op must compute in the pinned sharding: recover its factors' axes
  // from what propagation recorded.
  {
    SmallVector<shard::ShardingAttr> recorded;
    auto ins = target->getAttrOfType<ArrayAttr>("dshard.in_shardings");
    auto outs = target->getAttrOfType<ArrayAttr>(shard::kResultShardingsAttr);
    if (!ins || !outs)
      return fail("propagation recorded no shardings on the op");
    for (Attribute a : ins)
      recorded.push_back(cast<shard::ShardingAttr>(a));
    for (Attribute a : outs)
      recorded.push_back(cast<shard::ShardingAttr>(a).withoutPartial());
    shard::FactorAxes got;
    shard::assignFactors(rule, recorded, meshAttr, got);
    Outcome mismatch = explainMismatch(target, rule, axes, got, ctx);
    if (mismatch.kind != Outcome::kPass) {
      out.outcome = mismatch;
      return out;
    }
    if (fault == Fault::kForgetPartial) {
      SmallVector<Attribute> changed;
      for (Attribute a : outs) {
        auto s = cast<shard::ShardingAttr>(a);
        out.faultApplied |= s.isPartial();
        changed.push_back(s.withoutPartial());
      }
      target->setAttr(shard::kResultShardingsAttr, ArrayAttr::get(ctx, changed));
      if (!out.faultApplied)
        return out;
    }
  }
  {
    PassManager pm(ctx);
    pm.addPass(shard::createShardPartition());
    pm.addPass(createCanonicalizerPass());
    pm.addPass(createCSEPass());
    if (failed(pm.run(*module)))
      return fail("partition fails: " + diags.take());
  }
  if (fault == Fault::kSumAsMax) {
    module.get().walk([&](shard::AllReduceOp ar) {
      if (!out.faultApplied && ar.getKind() == "sum") {
        ar.setKind("max");
        out.faultApplied = true;
      }
    });
    if (!out.faultApplied)
      return out;
  }
  if (fault == Fault::kSliceOtherAxis) {
    module.get().walk([&](shard::ShardSliceOp s) {
      if (out.faultApplied || mesh.axes.size() != 2)
        return;
      s.setAxis(s.getAxis() == mesh.axes[0] ? mesh.axes[1] : mesh.axes[0]);
      out.faultApplied = true;
    });
    if (!out.faultApplied)
      return out;
  }
  {
    PassManager pm(ctx);
    pm.addPass(shard::createShardOverlap());
    if (failed(pm.run(*module)))
      return fail("dtcc-shard-overlap fails: " + diags.take());
  }
  if (gPrintIr) {
    std::string ir;
    llvm::raw_string_ostream os(ir);
    module->print(os, OpPrintingFlags().elideLargeElementsAttrs(16));
    std::printf("// %s on %s %s\n%s\n", prepared.caseName.c_str(),
                mesh.name.c_str(), describeSharding(rule, axes, ctx).c_str(),
                ir.c_str());
  }
  std::string error;
  auto program = lower(*module, diags, error);
  if (failed(program))
    return fail(error);
  out.program = std::make_unique<SerializedProgram>(std::move(*program));
  return out;
}

//===----------------------------------------------------------------------===//
// Running on ranks
//===----------------------------------------------------------------------===//

/// Runs `program`'s @train_step; its outputs or an error.
std::string runProgram(const SerializedProgram &program, runtime::Device &device,
                       runtime::CommContext *comm,
                       std::vector<runtime::HostTensor> &outputs,
                       std::vector<std::string> &names) {
  auto exe = runtime::Executable::create(
      program.program, reinterpret_cast<const uint8_t *>(program.data.data()),
      program.data.size(), device, comm);
  if (!exe.isOk())
    return "does not load: " + exe.status().toString();
  const auto *fn = exe.value()->findFunction("train_step");
  if (!fn)
    return "no @train_step in the program";
  runtime::Status s = exe.value()->run(*fn, {}, &outputs);
  if (!s.isOk())
    return "fails: " + s.toString();
  names.clear();
  for (const auto &o : fn->outputs)
    names.push_back(o.name);
  return "";
}

std::string readFile(int fd) {
  std::string s;
  ::lseek(fd, 0, SEEK_SET);
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0)
    s.append(buf, n);
  return s;
}

void writeAll(int fd, const std::string &s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n <= 0)
      return;
    done += n;
  }
}

int tempFile() {
  char path[] = "/tmp/dtcc-shardconf-XXXXXX";
  int fd = ::mkstemp(path);
  ::unlink(path);
  return fd;
}

/// One rank of a group (a forked child): joins the TCP world, builds the
/// meshes' communicators, runs jobs[start..] and writes "k\tmessage\n" per
/// job to `resultFd` (an empty message: matches one device). Never returns.
[[noreturn]] void rankMain(int rank, int size, int port,
                           const std::vector<Job *> &jobs, size_t start,
                           const std::vector<MeshSpec> &meshes,
                           const std::vector<Reference> &refs, int resultFd) {
  using namespace dtcc::runtime;
  LaunchInfo launch;
  launch.launcher = "torchrun";
  launch.rank = rank;
  launch.size = size;
  launch.localRank = rank;
  launch.masterAddr = "127.0.0.1";
  launch.masterPort = port;
  auto world = World::init(launch);
  if (!world.isOk()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, world.status().toString().c_str());
    std::_Exit(3);
  }
  world.value()->queue().setTimeout(kCollectiveTimeout);
  std::map<size_t, MeshComms> comms;
  for (size_t m = 0; m < meshes.size(); ++m) {
    if (meshes[m].ranks() != size)
      continue;
    auto mc = createMeshComms(*world.value(), meshes[m].axes, meshes[m].sizes);
    if (!mc.isOk()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, mc.status().toString().c_str());
      std::_Exit(3);
    }
    comms[m] = std::move(mc.value());
  }
  auto device = createCpuDevice();
  for (size_t k = start; k < jobs.size(); ++k) {
    const Job &job = *jobs[k];
    std::vector<HostTensor> outputs;
    std::vector<std::string> names;
    // A program's asynchronous collectives are numbered from 0: each
    // program gets its own context.
    CommContext context(comms[job.meshIndex], world.value()->queue());
    std::string message =
        runProgram(*job.program, *device, &context, outputs, names);
    if (message.empty())
      message = compareOutputs(outputs, refs[job.caseIndex].outputs, names);
    for (char &ch : message)
      if (ch == '\n' || ch == '\t')
        ch = ' ';
    writeAll(resultFd, std::to_string(k) + "\t" + message + "\n");
  }
  comms.clear();
  world.value().reset();
  std::_Exit(0);
}

/// Runs `jobs` (all on meshes of `size` ranks) on forked ranks and fills
/// their outcomes. A group whose rank dies or hangs fails the job it was
/// in; a new group goes on from the next one.
void runOnRanks(std::vector<Job *> &jobs, int size,
                const std::vector<MeshSpec> &meshes,
                const std::vector<Reference> &refs) {
  size_t start = 0;
  while (start < jobs.size()) {
    int port = dtcc::runtime::pickFreeTcpPort();
    std::vector<int> results(size), logs(size);
    std::vector<pid_t> pids(size);
    std::fflush(stdout);
    std::fflush(stderr);
    for (int r = 0; r < size; ++r) {
      results[r] = tempFile();
      logs[r] = tempFile();
    }
    for (int r = 0; r < size; ++r) {
      pid_t pid = ::fork();
      if (pid == 0) {
        ::dup2(logs[r], 1);
        ::dup2(logs[r], 2);
        rankMain(r, size, port, jobs, start, meshes, refs, results[r]);
      }
      pids[r] = pid;
    }
    // Wait for every rank, killing them all past the group's time.
    auto deadline = std::chrono::steady_clock::now() +
                    std::chrono::duration<double>(kGroupTimeout);
    std::vector<int> status(size, -1);
    int alive = size;
    while (alive > 0) {
      for (int r = 0; r < size; ++r) {
        if (pids[r] <= 0)
          continue;
        int st;
        if (::waitpid(pids[r], &st, WNOHANG) == pids[r]) {
          status[r] = st;
          pids[r] = 0;
          --alive;
        }
      }
      if (alive == 0)
        break;
      if (std::chrono::steady_clock::now() > deadline) {
        for (int r = 0; r < size; ++r)
          if (pids[r] > 0)
            ::kill(pids[r], SIGKILL);
        deadline = std::chrono::steady_clock::time_point::max();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    // What each rank reported.
    std::vector<std::map<size_t, std::string>> reported(size);
    for (int r = 0; r < size; ++r) {
      std::istringstream in(readFile(results[r]));
      std::string line;
      while (std::getline(in, line)) {
        size_t tab = line.find('\t');
        if (tab == std::string::npos)
          continue;
        reported[r][std::stoul(line.substr(0, tab))] = line.substr(tab + 1);
      }
    }
    size_t k = start;
    for (; k < jobs.size(); ++k) {
      bool all = true;
      std::string message;
      for (int r = 0; r < size; ++r) {
        auto it = reported[r].find(k);
        if (it == reported[r].end()) {
          all = false;
          break;
        }
        if (message.empty() && !it->second.empty())
          message = "rank " + std::to_string(r) + ": " + it->second;
      }
      if (!all)
        break;
      jobs[k]->outcome = message.empty() ? Outcome{Outcome::kPass, ""}
                                         : Outcome{Outcome::kFail, message};
    }
    if (k < jobs.size()) {
      // The job the group died in.
      std::string why;
      for (int r = 0; r < size && why.empty(); ++r) {
        if (reported[r].count(k))
          continue;
        int st = status[r];
        why = "rank " + std::to_string(r) +
              (WIFSIGNALED(st) ? " killed by signal " + std::to_string(WTERMSIG(st))
                               : " exited with " + std::to_string(WEXITSTATUS(st)));
        std::string log = readFile(logs[r]);
        if (log.size() > 600)
          log = "..." + log.substr(log.size() - 600);
        for (char &ch : log)
          if (ch == '\n')
            ch = ' ';
        if (!log.empty())
          why += ": " + log;
      }
      jobs[k]->outcome = {Outcome::kFail, why};
    }
    for (int r = 0; r < size; ++r) {
      ::close(results[r]);
      ::close(logs[r]);
    }
    start = k + 1;
  }
}

//===----------------------------------------------------------------------===//
// The suite
//===----------------------------------------------------------------------===//

struct Options {
  std::string filter;
  bool verbose = false;
  int64_t minPassed = 0;
  bool selfCheck = true;
};

void usage(const char *argv0) {
  std::printf(
      "usage: %s [--filter REGEX] [--verbose] [--min-passed N] [--no-self-check]\n"
      "          [--print-ir]\n"
      "Runs every dgraph op under every sharding its rule allows on 2 and 4\n"
      "ranks (forked, TCP) against one device: forward results, loss and\n"
      "gradients. --filter keeps the cases whose name matches; --min-passed\n"
      "fails the run below N passes; the self-check injects faults into\n"
      "three sharded programs and requires each to be caught; --print-ir\n"
      "prints every sharded program before lowering.\n",
      argv0);
}

/// OpenBLAS and OpenMP start their thread pools when loaded: ranks forked
/// from this process must not inherit a process that had them.
void singleThreaded(char **argv) {
  const char *blas = std::getenv("OPENBLAS_NUM_THREADS");
  const char *omp = std::getenv("OMP_NUM_THREADS");
  if (blas && omp && std::string(blas) == "1" && std::string(omp) == "1")
    return;
  ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
  ::setenv("OMP_NUM_THREADS", "1", 1);
  ::execv("/proc/self/exe", argv);
  std::perror("re-executing with OPENBLAS_NUM_THREADS=1");
  std::exit(2);
}

} // namespace

int main(int argc, char **argv) {
  singleThreaded(argv);
  Options opts;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--filter" && i + 1 < argc)
      opts.filter = argv[++i];
    else if (a == "--verbose" || a == "-v")
      opts.verbose = true;
    else if (a == "--min-passed" && i + 1 < argc)
      opts.minPassed = std::atoll(argv[++i]);
    else if (a == "--print-ir")
      gPrintIr = true;
    else if (a == "--no-self-check")
      opts.selfCheck = false;
    else {
      usage(argv[0]);
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  auto started = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
        .count();
  };

  DialectRegistry registry;
  registerDtccDialects(registry);
  MLIRContext ctx(registry);
  ctx.disableMultithreading(); // no threads in a process that forks ranks
  ctx.loadAllAvailableDialects();
  Diagnostics diags;
  ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &d) {
    llvm::raw_string_ostream os(diags.text);
    os << d.getLocation() << ": " << d << "\n";
    for (const Diagnostic &note : d.getNotes())
      os << "  note: " << note << "\n";
    return success();
  });

  std::vector<OpCase> cases = opCases();
  if (!opts.filter.empty()) {
    std::regex re(opts.filter);
    llvm::erase_if(cases, [&](const OpCase &c) { return !std::regex_search(c.name, re); });
  }
  std::vector<MeshSpec> meshes = suiteMeshes();
  auto device = runtime::createCpuDevice();

  std::vector<Entry> entries;
  std::vector<std::unique_ptr<Job>> jobs;
  std::vector<Reference> refs(cases.size());
  std::set<std::string> covered;
  std::vector<Fault> pendingFaults;
  std::vector<std::string> notes;
  if (opts.selfCheck)
    pendingFaults = {Fault::kSumAsMax, Fault::kForgetPartial, Fault::kSliceOtherAxis};

  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const OpCase &c = cases[ci];
    auto caseFailure = [&](std::string why) {
      Entry e;
      e.caseIndex = ci;
      e.wholeCase = true;
      e.outcome = {Outcome::kFail, std::move(why)};
      entries.push_back(std::move(e));
    };
    // A case of an op this build does not have (it reaches the branch
    // later) is skipped, not failed.
    {
      std::string missing;
      static const std::regex opName("dgraph\\.([a-z_0-9]+)");
      for (std::sregex_iterator it(c.body.begin(), c.body.end(), opName), end;
           it != end && missing.empty(); ++it)
        if (!RegisteredOperationName::lookup(it->str(), &ctx))
          missing = it->str();
      if (!missing.empty()) {
        Entry e;
        e.caseIndex = ci;
        e.wholeCase = true;
        e.outcome = {Outcome::kSkip, missing + " is not in this build"};
        entries.push_back(std::move(e));
        continue;
      }
    }
    // The loss over every float result; where the op's VJP refuses that,
    // over its first result, else forward only (noted in the report).
    std::string error;
    FailureOr<Prepared> prepared = failure();
    for (LossOver over : {LossOver::kAllResults, LossOver::kFirstResult,
                          LossOver::kNothing}) {
      std::string why;
      prepared = prepare(ctx, c, over, diags, why);
      if (succeeded(prepared)) {
        if (over != LossOver::kAllResults)
          notes.push_back(c.name + ": " +
                          (over == LossOver::kFirstResult
                               ? "loss over its first result only"
                               : "forward only") +
                          " (" + error + ")");
        break;
      }
      if (error.empty())
        error = why.substr(0, why.find('\n'));
      if (why.rfind("does not differentiate", 0) != 0)
        break;
    }
    if (failed(prepared)) {
      caseFailure(error);
      continue;
    }
    covered.insert(prepared->opName);
    // The single-device run.
    {
      OwningOpRef<ModuleOp> single = prepared->module->clone();
      auto program = lower(*single, diags, error);
      if (failed(program)) {
        caseFailure("one device: " + error);
        continue;
      }
      std::string message = runProgram(*program, *device, nullptr,
                                       refs[ci].outputs, refs[ci].names);
      if (!message.empty()) {
        caseFailure("one device: " + message);
        continue;
      }
    }
    auto train = prepared->module->lookupSymbol<func::FuncOp>("train_step");
    Operation *target = findMarked(train, kTargetAttr);
    auto shardable = dyn_cast<graph::ShardableOpInterface>(target);
    if (!shardable) {
      caseFailure(prepared->opName + " has no sharding rule");
      continue;
    }
    graph::ShardingRule rule = shardable.getShardingRule();
    for (size_t mi = 0; mi < meshes.size(); ++mi) {
      Enumeration en = enumerateShardings(rule, meshes[mi], &ctx);
      if (en.shardings.empty()) {
        Entry e;
        e.caseIndex = ci;
        e.meshIndex = mi;
        e.outcome = {Outcome::kSkip, en.none};
        entries.push_back(std::move(e));
        continue;
      }
      for (const shard::FactorAxes &axes : en.shardings) {
        // A partial result is run twice: made whole (all-reduce) and split
        // onto one of its dimensions (reduce-scatter).
        bool partialResult = llvm::any_of(rule.results, [&](const auto &t) {
          return shard::project(rule, t, axes, /*isResult=*/true, &ctx).isPartial();
        });
        for (bool scatter : {false, true}) {
          if (scatter && !partialResult)
            continue;
          Entry e;
          e.caseIndex = ci;
          e.meshIndex = mi;
          e.sharding = describeSharding(rule, axes, &ctx) +
                       (scatter ? " reduce-scattered" : "");
          Sharded s = shardCase(*prepared, meshes[mi], axes, scatter,
                                Fault::kNone, diags);
          e.outcome = s.outcome;
          if (s.outcome.kind == Outcome::kPass) {
            auto job = std::make_unique<Job>();
            job->caseIndex = ci;
            job->meshIndex = mi;
            job->sharding = e.sharding;
            job->program = std::move(s.program);
            e.job = jobs.size();
            jobs.push_back(std::move(job));
            // The self-check's faults go into the first programs they fit.
            for (auto it = pendingFaults.begin(); it != pendingFaults.end();) {
              Sharded f = shardCase(*prepared, meshes[mi], axes, scatter, *it, diags);
              if (!f.faultApplied || f.outcome.kind != Outcome::kPass) {
                ++it;
                continue;
              }
              auto fj = std::make_unique<Job>();
              fj->caseIndex = ci;
              fj->meshIndex = mi;
              fj->sharding = e.sharding;
              fj->program = std::move(f.program);
              fj->fault = faultName(*it);
              jobs.push_back(std::move(fj));
              it = pendingFaults.erase(it);
            }
          }
          entries.push_back(std::move(e));
        }
      }
    }
  }
  double compileSeconds = seconds();

  // Run: 2 ranks, then 4.
  for (int size : {2, 4}) {
    std::vector<Job *> group;
    for (auto &j : jobs)
      if (meshes[j->meshIndex].ranks() == size)
        group.push_back(j.get());
    runOnRanks(group, size, meshes, refs);
  }
  for (Entry &e : entries)
    if (e.job >= 0)
      e.outcome = jobs[e.job]->outcome;

  // Report.
  int64_t passed = 0, failedCount = 0, skipped = 0;
  std::map<std::string, std::vector<std::array<int64_t, 3>>> perCase;
  std::map<std::string, std::vector<std::string>> skipReasons;
  for (const Entry &e : entries) {
    const OpCase &c = cases[e.caseIndex];
    const MeshSpec &m = meshes[e.meshIndex];
    std::string where = c.name + (e.wholeCase ? "" : " on " + m.name);
    if (!e.sharding.empty())
      where += " " + e.sharding;
    auto &counts = perCase[c.name];
    counts.resize(meshes.size(), {0, 0, 0});
    counts[e.meshIndex][e.outcome.kind] += 1;
    switch (e.outcome.kind) {
    case Outcome::kPass:
      ++passed;
      if (opts.verbose)
        std::printf("PASS %s\n", where.c_str());
      break;
    case Outcome::kFail:
      ++failedCount;
      std::printf("FAIL %s: %s\n", where.c_str(), e.outcome.reason.c_str());
      break;
    case Outcome::kSkip:
      ++skipped;
      skipReasons[e.outcome.reason].push_back(
          e.wholeCase ? c.name : c.name + " (" + m.name + ")");
      if (opts.verbose)
        std::printf("SKIP %s: %s\n", where.c_str(), e.outcome.reason.c_str());
      break;
    }
  }
  // Ops with a sharding rule and no case.
  std::vector<std::string> uncovered;
  if (opts.filter.empty())
    for (RegisteredOperationName name : ctx.getRegisteredOperations())
      if (name.getDialectNamespace() == "dgraph" &&
          name.hasInterface<graph::ShardableOpInterface>() &&
          !covered.count(name.getStringRef().str()))
        uncovered.push_back(name.getStringRef().str());
  for (const std::string &op : uncovered) {
    ++skipped;
    skipReasons["no case in tests/shardconf/OpCases.cpp"].push_back(op);
  }

  std::printf("\n%-28s", "case (pass/fail/skip)");
  for (const MeshSpec &m : meshes)
    std::printf(" %12s", m.name.c_str());
  std::printf("\n");
  for (const OpCase &c : cases) {
    auto it = perCase.find(c.name);
    if (it == perCase.end())
      continue;
    std::printf("%-28s", c.name.c_str());
    for (size_t m = 0; m < meshes.size(); ++m) {
      const auto &n = it->second[m];
      std::string cell = std::to_string(n[0]) + "/" + std::to_string(n[1]) + "/" +
                         std::to_string(n[2]);
      std::printf(" %12s", cell.c_str());
    }
    std::printf("\n");
  }
  if (!skipReasons.empty()) {
    std::printf("\nskipped, by reason:\n");
    for (auto &[reason, where] : skipReasons) {
      std::printf("  %s (%zu):", reason.c_str(), where.size());
      std::map<std::string, int> counted;
      std::vector<std::string> order;
      for (const std::string &w : where)
        if (counted[w]++ == 0)
          order.push_back(w);
      for (size_t i = 0; i < order.size(); ++i)
        std::printf("%s %s%s", i ? "," : "", order[i].c_str(),
                    counted[order[i]] > 1
                        ? (" x" + std::to_string(counted[order[i]])).c_str()
                        : "");
      std::printf("\n");
    }
  }
  if (!notes.empty()) {
    std::printf("\ngradients not compared in full (the op's VJP refuses them):\n");
    for (const std::string &n : notes)
      std::printf("  %s\n", n.c_str());
  }
  int rc = 0;
  if (opts.selfCheck) {
    int detected = 0, injected = 0;
    std::printf("\nself-check (each injected fault must fail):\n");
    for (auto &j : jobs) {
      if (j->fault.empty())
        continue;
      ++injected;
      bool caught = j->outcome.kind == Outcome::kFail;
      detected += caught;
      std::printf("  %s: %s in %s on %s %s%s%s\n", caught ? "caught" : "MISSED",
                  j->fault.c_str(), cases[j->caseIndex].name.c_str(),
                  meshes[j->meshIndex].name.c_str(), j->sharding.c_str(),
                  caught ? ": " : "", caught ? j->outcome.reason.c_str() : "");
    }
    for (Fault f : pendingFaults)
      std::printf("  NOT INJECTED: %s (no program it fits)\n", faultName(f));
    if (detected != injected || !pendingFaults.empty() || injected == 0) {
      std::printf("self-check failed: the comparison cannot be trusted\n");
      rc = 1;
    }
  }
  std::printf("\n%zu cases, %zu sharded programs; compile %.1f s, total %.1f s\n",
              cases.size(), jobs.size(), compileSeconds, seconds());
  std::printf("onnx-shard: %lld passed, %lld failed, %lld skipped\n",
              (long long)passed, (long long)failedCount, (long long)skipped);
  if (failedCount > 0)
    rc = 1;
  if (passed < opts.minPassed) {
    std::printf("fewer passes than the floor (%lld)\n", (long long)opts.minPassed);
    rc = 1;
  }
  return rc;
}
