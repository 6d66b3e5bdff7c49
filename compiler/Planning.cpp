//===- Planning.cpp - `dtcc plan` and `dtcc compile --plan auto` ----------===//
//
// Reads a model (described from its IR: any ONNX or .mlir file; a zoo spec;
// or a saved plan), a cluster (a preset or a file) and a batch, then
// searches or evaluates a plan with the planner library and returns the
// report as text or JSON, optionally with a Chrome trace of one predicted
// step.
//
//===----------------------------------------------------------------------===//

#include "compiler/Planning.h"

#include "compiler/DescribeModel.h"
#include "compiler/Driver.h"
#include "dialects/Graph/IR/GraphOps.h"
#include "planner/AutoPlan.h"
#include "planner/Report.h"
#include "planner/Units.h"
#include "runtime/base/Format.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/FormatVariadic.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace dtcc {

namespace {

using namespace planner;
using runtime::invalidArgument;


//===----------------------------------------------------------------------===//
// Models
//===----------------------------------------------------------------------===//

/// The file name of `path`, without its directories.
std::string baseName(const std::string &path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

/// The planner's description of a validated zoo model.
ModelDesc fromZoo(const zoo::ZooOptions &o, const std::string &name) {
  ModelDesc m;
  m.name = name;
  m.layers = o.layers;
  m.hidden = o.hidden;
  m.heads = o.heads;
  m.kvHeads = o.kvHeads ? o.kvHeads : o.heads;
  m.ffnHidden = o.ffnHidden;
  m.vocab = o.vocab;
  m.seq = o.seq;
  m.tiedEmbeddings = o.tiedEmbeddings;
  m.dropout = false; // the zoo's graphs have no dropout
  if (o.family == zoo::Family::Llama) {
    m.gatedMlp = true;
    m.norm = NormKind::kRmsNorm;
    m.linearBias = false;
    m.learnedPositions = false;
    m.flashAttention = true;
  } else {
    m.gatedMlp = false;
    m.norm = NormKind::kLayerNorm;
    m.linearBias = true;
    m.learnedPositions = true;
    // GPU backends fuse attention; the planner assumes they do for every
    // family (docs/planner.md, "Assumptions").
    m.flashAttention = true;
  }
  return m;
}

std::string strCatName(const std::string &family, const zoo::ZooOptions &o) {
  return family + "-l" + std::to_string(o.layers) + "-h" +
         std::to_string(o.hidden);
}

StatusOr<ModelDesc> zooModel(const PlanRequest &args) {
  auto family = zoo::parseFamily(args.zooFamily);
  if (!family || *family == zoo::Family::Mlp)
    return invalidArgument("--zoo: expected gpt or llama, got '",
                           args.zooFamily, "'");
  zoo::ZooOptions o;
  o.family = *family;
  o.weights = false;
  auto size = [&](const char *key, int64_t &field) {
    auto it = args.zooSizes.find(key);
    if (it != args.zooSizes.end())
      field = it->second;
  };
  size("layers", o.layers);
  size("hidden", o.hidden);
  size("heads", o.heads);
  size("kv-heads", o.kvHeads);
  size("ffn", o.ffnHidden);
  size("vocab", o.vocab);
  if (args.seq)
    o.seq = args.seq;
  o.tiedEmbeddings = args.tiedEmbeddings;
  if (!args.zooPreset.empty())
    if (std::string e = zoo::applyPreset(o, args.zooPreset); !e.empty())
      return invalidArgument("--preset: ", e);
  if (std::string e = zoo::validate(o); !e.empty())
    return invalidArgument(e);
  std::string name = args.zooPreset.empty()
                         ? strCatName(args.zooFamily, o)
                         : args.zooPreset;
  return fromZoo(o, name);
}

/// A model imported to be compiled in this process; the compiler's errors
/// are collected in `diagnostics` (for a Status) instead of printed.
struct ImportedModel {
  explicit ImportedModel(mlir::DialectRegistry &registry)
      : context(registry) {}
  mlir::MLIRContext context;
  std::string diagnostics;
  std::unique_ptr<mlir::ScopedDiagnosticHandler> handler;
  mlir::OwningOpRef<mlir::ModuleOp> module;
};

/// Imports `path` (ONNX or .mlir) for training, or with shapes only
/// (`weights` false: enough to describe it).
StatusOr<std::unique_ptr<ImportedModel>>
importForCompile(const std::string &path, bool weights = true) {
  mlir::DialectRegistry registry;
  registerDtccDialects(registry);
  auto m = std::make_unique<ImportedModel>(registry);
  m->context.loadAllAvailableDialects();
  m->context.printOpOnDiagnostic(false);
  ImportedModel *raw = m.get();
  m->handler = std::make_unique<mlir::ScopedDiagnosticHandler>(
      &m->context, [raw](mlir::Diagnostic &d) {
        if (d.getSeverity() == mlir::DiagnosticSeverity::Error)
          raw->diagnostics += "\n  " + d.str();
        return mlir::success();
      });
  onnx_frontend::ImportOptions options;
  options.training = weights;
  options.loadWeights = weights;
  auto module = loadModel(path, m->context, options);
  if (mlir::failed(module))
    return invalidArgument("cannot import '", path, "'", m->diagnostics);
  m->module = std::move(*module);
  return m;
}

/// The model in the file `args.modelPath`, imported with shapes only and
/// described from its IR; a graph that is not a transformer the planner's
/// formulas describe is known by its parameter count (`opaqueParams`).
StatusOr<ModelDesc> fileModel(const PlanRequest &args, std::string &source,
                              double &opaqueParams, int64_t *batch = nullptr) {
  auto imported = importForCompile(args.modelPath, /*weights=*/false);
  if (!imported.isOk())
    return imported.status();
  DescribedModel described = describeModel(
      *imported.value()->module, baseName(args.modelPath), args.frozen);
  ModelDesc model = described.model;
  if (batch)
    *batch = model.graph.batch;
  if (described.isTransformer()) {
    if (args.seq)
      model.seq = args.seq;
    source = "the IR of " + args.modelPath;
    return model;
  }
  if (model.graph.parameters <= 0)
    return invalidArgument("'", args.modelPath,
                           "' has no trainable parameters to plan for");
  opaqueParams = model.graph.parameters;
  source = "the IR of " + args.modelPath + " (not a transformer: " +
           described.notTransformer + ")";
  return model;
}

StatusOr<DTypePolicy> dtypePolicy(const std::string &name) {
  if (name == "bf16")
    return DTypePolicy::mixed(DType::kBf16);
  if (name == "fp16")
    return DTypePolicy::mixed(DType::kFp16);
  if (name == "fp32")
    return DTypePolicy::fp32();
  return invalidArgument("--dtype: expected bf16, fp16 or fp32, got '", name,
                         "'");
}

StatusOr<ClusterSpec> loadCluster(const PlanRequest &args) {
  StatusOr<ClusterSpec> cluster = loadClusterSpec(args.cluster);
  if (!cluster.isOk())
    return cluster.status().withContext("--cluster");
  if (args.nodes < 1)
    return invalidArgument("--nodes: expected at least 1, got ", args.nodes);
  cluster.value().nodes = args.nodes;
  return cluster;
}

/// Pins the search to the axes of --mesh and to its rank order (axes it
/// leaves out, of size 1, go first).
Status pinMesh(const runtime::MeshShape &mesh, SearchOptions &options) {
  options.order.clear();
  for (const char *axis : {"pp", "dp", "tp"})
    if (!mesh.has(axis))
      options.order.push_back(axis);
  for (const runtime::MeshShape::Axis &a : mesh.axes()) {
    options.order.push_back(a.name);
    if (a.name == "dp")
      options.fixDp = a.size;
    else if (a.name == "pp")
      options.fixPp = a.size;
    else if (a.name == "tp")
      options.fixTp = a.size;
    else
      return invalidArgument("--mesh: unknown axis '", a.name,
                             "' (expected dp, pp, tp)");
  }
  return Status::ok();
}

/// The plan of a saved plan file (`dtcc plan --plan-out`), or of a bare
/// plan object.
StatusOr<Plan> savedPlanOf(const Json &json) {
  const Json *planJson = json.find("plan");
  return planFromJson(planJson ? *planJson : json);
}

StatusOr<Json> readJsonFile(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    return runtime::notFound("cannot open '", path, "'");
  std::stringstream buffer;
  buffer << in.rdbuf();
  auto json = Json::parse(buffer.str());
  if (!json.isOk())
    return json.status().withContext(path);
  return json;
}

Status writeFile(const std::string &path, const std::string &text) {
  std::ofstream out(path);
  out << text;
  if (!out)
    return runtime::unavailable("cannot write '", path, "'");
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Models known only by their parameter count
//===----------------------------------------------------------------------===//

/// Data parallelism with the leanest ZeRO stage that fits: the fallback
/// for graphs that are not standard transformers.
std::string opaqueReport(const PlanRequest &args, const ClusterSpec &cluster,
                         double params, const DTypePolicy &dtype,
                         const std::string &source) {
  std::ostringstream os;
  int64_t n = cluster.numDevices();
  double capacity = cluster.device.memoryBytes.value -
                    cluster.device.reservedBytes.value;
  os << "dtcc plan: " << args.modelPath << " (" << formatCount(params)
     << " parameters) on " << n << " x " << cluster.device.name << "\n";
  os << "  model from: " << source << "\n";
  os << "  note: not a standard transformer: only data parallelism and the "
        "ZeRO stage are chosen, from the parameter count (activations are "
        "not modelled; the per-op sharding search is not implemented yet)\n";
  Json j = Json::object();
  j.set("schemaVersion", kReportSchemaVersion);
  j.set("modelSource", source);
  j.set("parameters", params);
  j.set("devices", n);
  int chosen = -1;
  Json stages = Json::array();
  for (int zero = 0; zero <= 3; ++zero) {
    if (zero > 0 && n == 1)
      break;
    MemoryBreakdown m = MemoryModel::modelState(params, dtype, zero, n);
    bool fits = m.modelState() <= capacity;
    os << "  ZeRO-" << zero << ": model state " << formatBytes(m.modelState())
       << " per device of " << formatBytes(capacity) << " usable"
       << (fits ? "" : " (out of memory by " +
                           formatBytes(m.modelState() - capacity) + ")")
       << "\n";
    Json s = Json::object();
    s.set("zeroStage", zero);
    s.set("modelStateBytes", m.modelState());
    s.set("fits", fits);
    stages.push(s);
    if (fits && chosen < 0)
      chosen = zero;
  }
  if (chosen >= 0)
    os << "Chosen plan: dp=" << n << " pp=1 tp=1, "
       << (chosen ? "ZeRO-" + std::to_string(chosen) : std::string("no ZeRO"))
       << (chosen == 0 && n == 1
               ? " (the model fits: no distribution)"
           : chosen == 0 ? " (the model fits on one device: plain data "
                           "parallelism, no model split)"
                         : " (the lowest stage that fits moves the least "
                           "data)")
       << "\n";
  else
    os << "No data-parallel plan fits: the model needs a model-parallel "
          "split that dtcc cannot yet derive for this graph\n";
  j.set("zeroStages", stages);
  j.set("chosenZeroStage", chosen);
  return args.json ? j.dump(2) + "\n" : os.str();
}

//===----------------------------------------------------------------------===//
// Memory of the compiled program
//===----------------------------------------------------------------------===//

/// One rank's static memory plan by category, from the lowered module: the
/// state arena split by variable (trainable = parameters, the rest =
/// optimizer state and step counters; gradient accumulators when
/// micro-batches > 1), the workspace (gradients, activations and
/// temporaries, reused by the memory planner) and the constants.
struct CompiledMemory {
  runtime::MeshShape mesh;
  int zero = 0;
  double parameters = 0, optimizerState = 0, gradientState = 0;
  double workspace = 0, constants = 0, state = 0;
  double total() const { return state + workspace + constants; }
};

StatusOr<CompiledMemory> compiledMemory(const std::string &modelPath,
                                        const Plan &plan,
                                        const std::vector<std::string> &frozen) {
  CompiledMemory out;
  out.mesh = meshOf(plan);
  out.zero = plan.zeroStage;
  auto imported = importForCompile(modelPath);
  if (!imported.isOk())
    return imported.status().withContext("--compiled");
  mlir::ModuleOp module = *imported.value()->module;
  const std::string &diagnostics = imported.value()->diagnostics;
  CompileOptions options;
  options.train.enabled = true;
  options.train.frozen = frozen;
  options.train.plan = compilerPlanOf(plan);
  options.train.dtype = dtypeName(plan.dtype.compute);
  // The program's memory plan, read as the program model reads it (the
  // fullest pipeline stage's state, by variable).
  auto priced = compileAndPrice(module, options, clusterPreset("cpu-local").value());
  if (!priced.isOk())
    return invalidArgument("--compiled: compiling with --mesh '", out.mesh.str(),
                           "' --zero ", plan.zeroStage, " failed: ",
                           priced.status().message(), diagnostics);
  const ProgramMemory &m = priced.value().memory;
  out.workspace = double(m.workspace);
  out.state = double(m.state);
  out.constants = double(m.constants);
  out.parameters = double(m.parameters);
  out.gradientState = double(m.gradientAccumulators);
  out.optimizerState = double(m.optimizerState + m.otherState + m.stateAlignment);
  return out;
}

std::string signedPercent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%+.1f%%", 100 * fraction);
  return buf;
}

/// The compiled memory beside the memory model; the model's temporaries
/// less the runtime reserve, which the memory plan does not hold.
std::string formatCompiled(const CompiledMemory &c, const Candidate &chosen,
                           double reserve) {
  const MemoryBreakdown &m = chosen.memory;
  std::ostringstream os;
  double modelWorkspace = m.gradients + m.activations + m.temporaries -
                          reserve + m.commBuffers - m.reused;
  double modelTotal = m.total() - reserve;
  os << "\nMemory of the compiled program (rank 0's static memory plan: dtcc "
        "compile --train"
     << (c.mesh.empty() ? "" : " --mesh " + c.mesh.str())
     << (c.zero ? " --zero " + std::to_string(c.zero) : "") << ")\n";
  char line[256];
  auto row = [&](const char *name, double compiled, double model) {
    std::snprintf(line, sizeof(line), "  %-38s %12s %12s %9s\n", name,
                  runtime::formatBytes(int64_t(compiled)).c_str(),
                  model < 0 ? "-" : runtime::formatBytes(int64_t(model)).c_str(),
                  model > 0 && compiled > 0
                      ? signedPercent(model / compiled - 1).c_str()
                      : "-");
    os << line;
  };
  std::snprintf(line, sizeof(line), "  %-38s %12s %12s %9s\n", "category",
                "compiled", "model", "model err");
  os << line;
  row("parameters", c.parameters, m.parameters);
  row("optimizer state (+ step counters)", c.optimizerState,
      m.optimizerState);
  if (c.gradientState > 0)
    row("gradient accumulators (state)", c.gradientState, -1);
  row("workspace: grads, activations, temps", c.workspace,
      modelWorkspace);
  row("constants", c.constants, -1);
  row("total", c.total(), modelTotal);
  os << "  (the model's temporaries exclude the runtime reserve of "
     << runtime::formatBytes(int64_t(reserve))
     << ", which is not part of the memory plan; the workspace is reused "
        "over the step, so it is compared with gradients + activations + "
        "temporaries + comm buffers - reused together)\n";
  return os.str();
}

Json compiledToJson(const CompiledMemory &c, const Candidate &chosen,
                    double reserve) {
  Json j = Json::object();
  j.set("mesh", c.mesh.str());
  j.set("zeroStage", c.zero);
  j.set("parameters", c.parameters);
  j.set("optimizerState", c.optimizerState);
  j.set("gradientState", c.gradientState);
  j.set("workspace", c.workspace);
  j.set("constants", c.constants);
  j.set("total", c.total());
  j.set("modelTotalExcludingReserve", chosen.memory.total() - reserve);
  j.set("reserve", reserve);
  return j;
}

//===----------------------------------------------------------------------===//
// CPU clusters: every plan compiled and its program priced
//===----------------------------------------------------------------------===//

/// The size of `axis` in a mesh spec "dp=2,pp=2,tp=2" (1 when absent).
/// The plan a compiled candidate is, in the planner's terms.
Plan planOf(const CompiledCandidate &c, int64_t batch,
            const DTypePolicy &policy) {
  Plan plan;
  plan.dp = c.mesh.size("dp");
  plan.pp = c.mesh.size("pp");
  plan.tp = c.mesh.size("tp");
  plan.zeroStage = c.zero;
  plan.microBatches = c.microBatches;
  plan.microBatchSize = std::max<int64_t>(1, batch / std::max<int64_t>(1, plan.dp));
  plan.schedule = c.schedule == "gpipe" ? Schedule::kGPipe : Schedule::k1F1B;
  plan.sequenceParallel = c.sequenceParallel;
  plan.dtype = policy;
  return plan;
}

/// `dtcc plan model.onnx --cluster <cpu>`: the plans dtcc compile builds,
/// each compiled and priced (planByCompiling), or the one --mesh/--zero
/// give.
StatusOr<PlanOutput> compiledCpuPlan(const PlanRequest &args,
                                     ClusterSpec cluster, ModelDesc model,
                                     const std::string &source,
                                     double opaqueParams, int64_t modelBatch,
                                     const DTypePolicy &policy) {
  PlanOutput out;
  const bool given = !args.mesh.empty() || args.zero >= 0;
  // The given mesh sizes the cluster when --ranks does not.
  if (given && args.ranks == 0 && !args.mesh.empty()) {
    auto c = clusterForRanks(cluster, args.mesh.ranks());
    if (!c.isOk())
      return c.status();
    cluster = c.value();
  }
  const int64_t ranks = cluster.numDevices();

  auto imported = importForCompile(args.modelPath);
  if (!imported.isOk())
    return imported.status();
  mlir::ModuleOp module = *imported.value()->module;
  CompileOptions base;
  base.train.enabled = true;
  base.train.frozen = args.frozen;
  base.train.plan.microBatches = args.microBatches;
  base.train.plan.schedule = args.schedule.empty() ? "1f1b" : args.schedule;
  base.train.dtype = dtypeName(policy.compute);
  DeviceFigures figures = deviceFigures(cluster);

  auto started = std::chrono::steady_clock::now();
  std::vector<CompiledCandidate> candidates;
  if (given) {
    CompileOptions options = base;
    // The mesh as given (its axis order is the ranks'); --zero alone
    // spreads dp over the ranks.
    options.train.plan.mesh = args.mesh.empty()
                             ? runtime::MeshShape::megatron(ranks, 1, 1)
                             : args.mesh;
    options.train.plan.zero = std::max(0, args.zero);
    candidates.push_back(compileCandidate(module, options, figures));
    if (!candidates.front().priced)
      return invalidArgument("plan ", options.train.plan.mesh.str(), " ZeRO-",
                                  options.train.plan.zero, " does not compile: ",
                                  candidates.front().rejected);
  } else {
    candidates = planByCompiling(module, base, ranks, figures);
  }
  double seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - started)
                       .count();
  if (candidates.empty() || !candidates.front().priced)
    return invalidArgument(
        "no plan of ", ranks, " ranks compiles",
        candidates.empty() ? std::string()
                           : ": " + candidates.front().rejected);

  // Sequences of one micro-batch (the model's batch dimension), tokens and
  // model FLOPs of a step.
  int64_t batch = modelBatch > 0 ? modelBatch : 1;
  double tokens = double(batch) * double(args.microBatches) *
                  double(model.seq > 0 ? model.seq : 1);
  const CompiledCandidate &best = candidates.front();
  double modelFlops =
      opaqueParams > 0 || model.layers == 0
          ? best.priced->time.flops * double(ranks) /
                double(best.mesh.size("pp"))
          : model.trainingFlopsPerToken(Recompute::kNone) * tokens;

  PlanReport report;
  report.model = model;
  report.cluster = cluster;
  report.modelSource = source;
  report.globalBatch = batch * args.microBatches;
  report.origin = given ? "given" : "search";
  Plan chosenPlan = planOf(best, batch, policy);
  Candidate chosen =
      candidateFromProgram(chosenPlan, best.priced->memory,
                           best.priced->time, cluster, tokens, modelFlops);
  if (!best.rejected.empty() && chosen.fits) {
    chosen.fits = false;
    chosen.problem = best.rejected;
  }
  report.chosen = chosen;
  if (opaqueParams > 0)
    report.notes.push_back(runtime::strCat(
        "not a transformer (", formatCount(opaqueParams),
        " parameters): planned from its compiled training step"));
  report.notes.push_back(
      "CPU backend: each plan compiled and its program priced (memory: its "
      "static memory plan; time: its step simulated with the cluster's "
      "figures)" +
      std::string(best.search == "ilp"
                      ? "; tp layouts by the layout ILP (dtcc-shard-search-"
                        "layouts)"
                      : ""));
  if (!given) {
    SearchResult result;
    result.best = chosen;
    result.evaluated = int64_t(candidates.size());
    result.seconds = seconds;
    std::map<Rejection::Kind, int> shown;
    for (size_t i = 1; i < candidates.size(); ++i) {
      const CompiledCandidate &c = candidates[i];
      Rejection r;
      r.plan = planOf(c, batch, policy);
      r.stepTime = c.seconds;
      if (c.rejected.empty()) {
        r.kind = Rejection::Kind::kSlower;
        r.slowerFraction = c.seconds / best.seconds - 1;
        r.reason = "slower by " + formatPercent(r.slowerFraction);
      } else if (c.priced) {
        r.kind = Rejection::Kind::kOutOfMemory;
        r.excessBytes = double(c.peakBytes) - figures.memoryBytes;
        r.reason = c.rejected;
      } else {
        r.kind = Rejection::Kind::kInvalid;
        r.reason = c.rejected.substr(0, c.rejected.find('\n'));
      }
      if (c.search == "ilp")
        r.reason += " (tp layouts by the ILP)";
      else if (c.search == "descent")
        r.reason += " (tp layouts by coordinate descent)";
      if (shown[r.kind]++ < args.alternatives)
        result.alternatives.push_back(r);
    }
    report.search = result;
  }
  if (args.tokens > 0)
    report.cost = runCost(chosen.time, ranks, args.tokens, args.price);
  if (!args.tracePath.empty()) {
    auto traced =
        simulateProgram(best.priced->program, cluster, /*recordTimeline=*/true);
    if (!traced.isOk())
      return traced.status();
    Json trace = traceToJson(traced.value().timeline,
                             model.name + ": " + chosen.plan.summary() +
                                 " (compiled program, simulated)");
    if (Status s = writeFile(args.tracePath, trace.dump(-1) + "\n"); !s.isOk())
      return s;
  }
  if (!args.planOut.empty()) {
    Json saved = Json::object();
    saved.set("schemaVersion", kReportSchemaVersion);
    saved.set("plan", planToJson(chosen.plan));
    saved.set("model", modelToJson(model));
    saved.set("cluster", clusterToJson(cluster));
    saved.set("globalBatch", report.globalBatch);
    if (Status s = writeFile(args.planOut, saved.dump(2) + "\n"); !s.isOk())
      return s;
  }
  if (args.json) {
    Json j = reportToJson(report);
    Json compiled = programCostToJson(best.priced->memory, &best.priced->time);
    compiled.set("mesh", best.mesh.str());
    compiled.set("zeroStage", best.zero);
    compiled.set("sequenceParallel", best.sequenceParallel);
    compiled.set("layoutSearch", best.search);
    Json layouts = Json::array();
    for (const std::string &l : best.layouts)
      layouts.push(l);
    compiled.set("layouts", layouts);
    j.set("compiledProgram", compiled);
    out.report += (j.dump(2) + "\n");
  } else {
    out.report += formatReport(report);
    out.report += llvm::formatv(
        "\nThe chosen plan compiled: dtcc compile {0} --train --mesh {1} "
        "--zero {2}{3}{4}{5}\n\n",
        args.modelPath, best.mesh.str(), best.zero,
        args.microBatches > 1
            ? " --micro-batches " + std::to_string(args.microBatches)
            : std::string(),
        best.schedule.empty() ? std::string()
                              : " --pipeline-schedule " + best.schedule,
        best.sequenceParallel ? " --sequence-parallel" : "");
    out.report +=
        formatProgramCost(best.priced->memory, &best.priced->time, cluster);
  }
  out.fits = chosen.fits;
  return out;
}

} // namespace

StatusOr<planning::Plan> compilerPlanFromFile(const std::string &path) {
  auto json = readJsonFile(path);
  if (!json.isOk())
    return json.status();
  auto plan = savedPlanOf(json.value());
  if (!plan.isOk())
    return plan.status().withContext(path);
  if (plan.value().offload == Offload::kOptimizerAndParams)
    return invalidArgument(path, ": offload optimizer+params: the compiler "
                                 "does not offload parameters (ZeRO-Infinity)");
  return compilerPlanOf(plan.value());
}

planning::Plan compilerPlanOf(const Plan &plan) {
  planning::Plan out;
  out.mesh = meshOf(plan);
  out.zero = plan.zeroStage;
  out.microBatches = plan.microBatches;
  out.schedule = scheduleName(plan.schedule);
  out.virtualStages = plan.virtualStages;
  out.recompute = recomputeName(plan.recompute);
  out.sequenceParallel = plan.sequenceParallel;
  out.offload = offloadName(plan.offload);
  return out;
}

std::optional<std::string> compilerRefuses(mlir::MLIRContext *ctx,
                                           const Plan &plan) {
  if (plan.offload == Offload::kOptimizerAndParams)
    return std::string("the compiler does not offload parameters "
                       "(ZeRO-Infinity)");
  std::string error;
  auto attr = planning::planToAttr(ctx, compilerPlanOf(plan), error);
  if (failed(attr))
    return "the compiler's plan: " + error;
  if (std::optional<std::string> why = planning::unbuiltFeature(*attr))
    return "the compiler: " + *why;
  return std::nullopt;
}


StatusOr<PlanOutput> planModel(const PlanRequest &args) {
  PlanOutput out;
  auto dtype = dtypePolicy(args.dtype);
  if (!dtype.isOk())
    return dtype.status();

  // A saved plan brings its model, cluster and batch.
  std::optional<Plan> savedPlan;
  std::optional<ModelDesc> savedModel;
  std::optional<ClusterSpec> savedCluster;
  if (!args.planIn.empty()) {
    auto json = readJsonFile(args.planIn);
    if (!json.isOk())
      return json.status();
    auto plan = savedPlanOf(json.value());
    if (!plan.isOk())
      return plan.status().withContext(args.planIn);
    savedPlan = plan.value();
    if (const Json *m = json.value().find("model")) {
      auto model = modelFromJson(*m);
      if (!model.isOk())
        return model.status().withContext(args.planIn);
      savedModel = model.value();
    }
    if (const Json *c = json.value().find("cluster")) {
      auto cluster = clusterFromJson(*c, "plan file " + args.planIn);
      if (!cluster.isOk())
        return cluster.status().withContext(args.planIn);
      savedCluster = cluster.value();
    }
  }

  // The model.
  ModelDesc model;
  std::string source;
  double opaqueParams = 0;
  int64_t modelBatch = 0;
  if (!args.zooFamily.empty()) {
    auto m = zooModel(args);
    if (!m.isOk())
      return m.status();
    model = m.value();
    source = "zoo spec on the command line";
  } else if (!args.modelPath.empty()) {
    auto m = fileModel(args, source, opaqueParams, &modelBatch);
    if (!m.isOk())
      return m.status();
    model = m.value();
  } else if (savedModel) {
    model = *savedModel;
    if (args.seq)
      model.seq = args.seq;
    source = "plan file " + args.planIn;
  } else {
    return invalidArgument(
        "no model: give model.onnx, --zoo gpt|llama [sizes] or --plan-in");
  }

  // The cluster.
  ClusterSpec cluster;
  if (savedCluster && !args.clusterGiven) {
    cluster = *savedCluster;
  } else {
    auto c = loadCluster(args);
    if (!c.isOk())
      return c.status();
    cluster = c.value();
  }
  if (args.ranks > 0) {
    auto c = clusterForRanks(cluster, args.ranks);
    if (!c.isOk())
      return c.status();
    cluster = c.value();
  }
  DTypePolicy policy = dtype.value();
  // The CPU backend stores attention scores (no fused kernel) and computes
  // in fp32: the models must count what it runs.
  const bool cpu = cluster.device.isCpu();
  if (cpu) {
    model.flashAttention = false;
    if (!args.dtypeGiven)
      policy = DTypePolicy::fp32();
  }
  if (args.compiled && args.modelPath.empty())
    return invalidArgument("--compiled needs a model file to compile");

  if (cpu && !args.modelPath.empty() && !args.analytic && !savedPlan) {
    return compiledCpuPlan(args, cluster, model, source, opaqueParams,
                           modelBatch, policy);
  }
  if (opaqueParams > 0) {
    // Exits 0 as it always has: the report lists each ZeRO stage's fit.
    out.report += opaqueReport(args, cluster, opaqueParams, policy, source);
    out.fits = true;
    return out;
  }

  PlanReport report;
  report.model = model;
  report.cluster = cluster;
  report.modelSource = source;

  if (cpu && !savedPlan) {
    // What `dtcc compile` builds: dp x tp, ZeRO, the model's batch split
    // over dp.
    CompilerPlanOptions compiler;
    compiler.batch = args.globalBatch ? args.globalBatch : modelBatch;
    compiler.dtype = policy;
    compiler.microBatches = args.microBatches;
    mlir::MLIRContext shardContext;
    shardContext.loadDialect<shard::ShardDialect>();
    compiler.unbuilt = [&shardContext](const Plan &plan) {
      return compilerRefuses(&shardContext, plan);
    };
    if (compiler.batch < 1)
      return invalidArgument(
          "--global-batch is required (the model carries no batch)");
    SearchOptions fixed;
    if (Status s = pinMesh(args.mesh, fixed); !s.isOk())
      return s;
    if (!args.mesh.empty()) {
      // Axes left out of --mesh are 1, as for dtcc compile; without
      // --ranks the cluster is the mesh's ranks.
      for (int64_t *pin : {&fixed.fixDp, &fixed.fixPp, &fixed.fixTp})
        *pin = std::max<int64_t>(1, *pin);
      if (args.ranks == 0) {
        auto c = clusterForRanks(cluster,
                                 fixed.fixDp * fixed.fixPp * fixed.fixTp);
        if (!c.isOk())
          return c.status();
        cluster = c.value();
      }
    }
    fixed.fixZero = args.zero;
    fixed.alternativesPerKind = args.alternatives;
    fixed.budgetSeconds = args.budgetSeconds;
    compiler.search = fixed;
    auto chosen = chooseCompilerPlan(model, cluster, compiler);
    if (!chosen.isOk())
      return chosen.status();
    report.chosen = chosen.value().chosen;
    if (!args.mesh.empty() || args.zero >= 0) {
      report.origin = "given";
    } else {
      SearchResult result;
      result.best = chosen.value().chosen;
      result.alternatives = chosen.value().rejected;
      result.evaluated = int64_t(chosen.value().rejected.size()) + 1;
      result.note = chosen.value().summary;
      report.search = result;
      report.origin = "search";
    }
    report.cluster = cluster;
    report.globalBatch = compiler.batch * compiler.microBatches;
    report.notes.push_back(
        "CPU backend: plans are what dtcc compile builds (the search's "
        "plans less those the compiler refuses, the model's batch as one "
        "micro-batch split over dp), in fp32 with unfused attention");
  } else if (savedPlan && args.mesh.empty() && args.zero < 0) {
    Plan plan = *savedPlan;
    if (args.globalBatch && args.globalBatch != plan.globalBatch())
      return invalidArgument(
          "--global-batch ", args.globalBatch, " differs from the plan's ",
          plan.globalBatch(), " (", args.planIn, ")");
    auto candidate = evaluatePlan(model, cluster, plan);
    if (!candidate.isOk())
      return candidate.status().withContext(args.planIn);
    report.chosen = candidate.value();
    report.origin = "given";
    report.globalBatch = plan.globalBatch();
  } else {
    if (args.globalBatch < 1)
      return invalidArgument("--global-batch is required");
    SearchOptions options;
    options.globalBatch = args.globalBatch;
    options.dtype = policy;
    options.budgetSeconds = args.budgetSeconds;
    options.allowOffload = args.offload;
    options.alternativesPerKind = args.alternatives;
    options.fixZero = args.zero;
    options.fixMicroBatchSize = args.microBatch;
    if (Status s = pinMesh(args.mesh, options); !s.isOk())
      return s;
    bool pinned = options.fixDp || options.fixPp || options.fixTp ||
                  options.fixZero >= 0;
    // The search chooses only plans dtcc compile builds; the others are
    // rejected alternatives with the compiler's reason.
    mlir::MLIRContext shardContext;
    shardContext.loadDialect<shard::ShardDialect>();
    options.buildable = [&shardContext](const Plan &plan) {
      return compilerRefuses(&shardContext, plan);
    };
    auto result = searchPlans(model, cluster, options);
    if (!result.isOk())
      return result.status();
    report.globalBatch = args.globalBatch;
    report.search = result.value();
    report.chosen = result.value().best;
    report.origin = pinned ? "given" : "search";
    if (!report.chosen && pinned) {
      // Show the given mesh with what it lacks: the out-of-memory candidate
      // closest to fitting.
      for (const Rejection &r : result.value().alternatives)
        if (r.kind == Rejection::Kind::kOutOfMemory) {
          auto candidate = evaluatePlan(model, cluster, r.plan);
          if (candidate.isOk())
            report.chosen = candidate.value();
          break;
        }
    }
    if (pinned)
      report.notes.push_back(
          "the mesh/ZeRO stage was given; the search chose the rest");
  }
  if (args.tokens > 0 && report.chosen)
    report.cost = runCost(report.chosen->time, cluster.numDevices(),
                          args.tokens, args.price);

  if (!args.tracePath.empty() && report.chosen) {
    TimeModel time(model, cluster);
    Timeline timeline = time.timeline(report.chosen->plan);
    Json trace =
        traceToJson(timeline, model.name + ": " + report.chosen->plan.summary());
    if (Status s = writeFile(args.tracePath, trace.dump(-1) + "\n"); !s.isOk())
      return s;
  }
  if (!args.planOut.empty() && report.chosen) {
    Json saved = Json::object();
    saved.set("schemaVersion", kReportSchemaVersion);
    saved.set("plan", planToJson(report.chosen->plan));
    saved.set("model", modelToJson(model));
    saved.set("cluster", clusterToJson(cluster));
    saved.set("globalBatch", report.globalBatch);
    if (Status s = writeFile(args.planOut, saved.dump(2) + "\n"); !s.isOk())
      return s;
  }

  std::optional<CompiledMemory> compiled;
  if (args.compiled && report.chosen) {
    auto c = compiledMemory(args.modelPath, report.chosen->plan, args.frozen);
    if (!c.isOk())
      return c.status();
    compiled = c.value();
  }
  double reserve = cluster.device.reservedBytes.value;
  if (args.json) {
    Json j = reportToJson(report);
    if (compiled)
      j.set("compiled", compiledToJson(*compiled, *report.chosen, reserve));
    out.report += (j.dump(2) + "\n");
  } else {
    out.report += formatReport(report);
    if (compiled)
      out.report += formatCompiled(*compiled, *report.chosen, reserve);
  }
  out.fits = report.chosen && report.chosen->fits;
  return out;
}

ModelDesc describeZooOptions(const zoo::ZooOptions &options,
                             const std::string &name) {
  return fromZoo(options, name);
}

StatusOr<ClusterSpec> clusterForCompile(const std::string &clusterName,
                                        int64_t nodes, int64_t ranks) {
  PlanRequest args;
  args.cluster = clusterName.empty() ? "cpu-local" : clusterName;
  args.nodes = std::max<int64_t>(1, nodes);
  auto cluster = loadCluster(args);
  if (!cluster.isOk() || ranks <= 0)
    return cluster;
  return clusterForRanks(cluster.value(), ranks);
}

std::string clusterLabel(const ClusterSpec &c) {
  return std::to_string(c.numDevices()) + " x " + c.device.name + " (" +
         c.name + ")";
}

StatusOr<CompilePlanChoice>
choosePlanForCompile(mlir::ModuleOp module, const ClusterSpec &cluster,
                     const TrainOptions &train) {
  CompilePlanChoice choice;
  DescribedModel described = describeModel(module, "model", train.frozen);
  // Not a transformer the planner describes, or CPU ranks: the caller
  // compiles every plan and prices its program (planByCompiling), which
  // also places pipeline stages and tp layouts.
  if (!described.isTransformer() || cluster.device.isCpu()) {
    choice.compileCandidates = true;
    return choice;
  }
  ModelDesc m = described.model;
  // The compiled program runs on the CPU backend: fp32, unfused attention.
  m.flashAttention = false;
  CompilerPlanOptions options;
  options.batch = m.graph.batch;
  options.microBatches = std::max<int64_t>(1, train.plan.microBatches);
  // Recomputation other than none was asked for; otherwise the search
  // chooses it with the rest.
  if (train.plan.recompute == "full" && train.plan.recomputeLayers == 0)
    options.recompute = Recompute::kFull;
  else if (train.plan.recompute == "selective")
    options.recompute = Recompute::kSelective;
  options.unbuilt = [ctx = module.getContext()](const Plan &plan) {
    return compilerRefuses(ctx, plan);
  };
  auto chosen = chooseCompilerPlan(m, cluster, options);
  if (!chosen.isOk())
    return chosen.status();
  choice.plan = compilerPlanOf(chosen.value().chosen.plan);
  choice.summary = "plan auto: " + chosen.value().summary + " on " + cluster.name;
  return choice;
}

static std::string formatCompiledCandidates(
    const std::vector<CompiledCandidate> &candidates,
    const std::string &label) {
  std::string out;
  llvm::raw_string_ostream os(out);
  os << "plan auto: compiled " << candidates.size() << " candidate plans for "
     << label << ", each program priced on it:\n";
  for (const CompiledCandidate &c : candidates)
    os << llvm::formatv(
        "  {0,-16} zero {1} {2,-11} {3}\n",
        c.mesh.str() + (c.schedule.empty() ? "" : " " + c.schedule), c.zero,
        !c.search.empty()        ? c.search
        : c.sequenceParallel     ? "megatron+sp"
        : c.mesh.size("tp") > 1 ? "megatron"
                                 : "",
        c.rejected.empty()
            ? llvm::formatv("{0,8:f2} ms/step (compute {1:f2} GFLOP, {2} "
                            "collectives, {3:f1} KiB sent), {4:f2} MiB/rank",
                            c.seconds * 1e3, c.flops / 1e9, c.collectives,
                            c.commBytes / 1024.0, c.peakBytes / 1048576.0)
                  .str()
            : "rejected: " + c.rejected);
  return out;
}

static std::string formatChosenCandidate(const CompiledCandidate &chosen) {
  std::string out;
  llvm::raw_string_ostream os(out);
  os << "plan auto: " << chosen.mesh.str() << ", zero " << chosen.zero;
  if (!chosen.schedule.empty())
    os << ", " << chosen.schedule;
  if (chosen.sequenceParallel)
    os << ", sequence-parallel";
  os << llvm::formatv(": {0:f1} ms per step predicted, {1:f1} MiB per rank",
                      chosen.seconds * 1e3, chosen.peakBytes / 1048576.0);
  if (!chosen.search.empty())
    os << ", tp layouts by "
       << (chosen.search == "ilp" ? "the ILP (dtcc-shard-search-layouts)"
                                  : "coordinate descent");
  for (const std::string &l : chosen.layouts)
    os << ", " << l;
  os << "\n";
  return out;
}

StatusOr<CompilePlan> planForCompile(mlir::ModuleOp module,
                                     CompileOptions &options,
                                     const ClusterSpec &cluster, int64_t ranks,
                                     const std::string &search) {
  CompilePlan out;
  auto choice = choosePlanForCompile(module, cluster, options.train);
  if (!choice.isOk())
    return choice.status();
  if (!choice.value().compileCandidates) {
    if (search == "descent" || search == "both")
      return invalidArgument("--layout-search=", search,
                             " compares the plans --plan auto compiles for a "
                             "model that is not a transformer the planner "
                             "describes");
    options.train.plan = choice.value().plan;
    out.messages = choice.value().summary + "\n";
    out.chosen = true;
    return out;
  }
  // Any model: compile each candidate plan and weigh what it does.
  auto mode = search == "descent" ? LayoutSearchMode::kDescent
              : search == "both"  ? LayoutSearchMode::kBoth
              : search == "none"  ? LayoutSearchMode::kNone
                                  : LayoutSearchMode::kIlp;
  std::vector<CompiledCandidate> candidates =
      planByCompiling(module, options, std::max<int64_t>(1, ranks),
                      deviceFigures(cluster), mode);
  out.messages = formatCompiledCandidates(candidates, clusterLabel(cluster));
  if (candidates.empty() || !candidates.front().rejected.empty())
    return out;
  const CompiledCandidate &best = candidates.front();
  options.train.plan.mesh = best.mesh;
  options.train.plan.zero = best.zero;
  options.train.plan.sequenceParallel = best.sequenceParallel;
  // An ILP candidate's layouts are the search's (listed for people): the
  // search, run again, writes them; descent's are the plan itself.
  options.train.plan.layouts =
      best.layoutSearch.enabled ? std::vector<std::string>() : best.layouts;
  options.train.layoutSearch = best.layoutSearch;
  if (!best.schedule.empty())
    options.train.plan.schedule = best.schedule;
  out.messages += formatChosenCandidate(best);
  out.chosen = true;
  if (best.lowered)
    out.lowered = std::move(*best.lowered);
  return out;
}

} // namespace dtcc
