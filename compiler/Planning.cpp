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
#include "compiler/Timing.h"
#include "dialects/Graph/IR/GraphOps.h"
#include "frontends/onnx/OnnxImporter.h"
#include "planner/AutoPlan.h"
#include "planner/Report.h"
#include "planner/Sensitivity.h"
#include "planner/Units.h"
#include "runtime/base/Format.h"
#include "runtime/format/ProgramMetadata.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/FormatVariadic.h"

#include <cctype>
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
  m.dropout = o.dropout > 0;
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

/// A context with dtcc's dialects whose errors collect in `diagnostics`,
/// for a module to import into.
std::unique_ptr<ImportedModel> newImportedModel() {
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
  return m;
}

/// Imports `path` (ONNX or .mlir) for training, or with shapes only
/// (`weights` false: enough to describe it, or, `training` true, to compile
/// and price it).
StatusOr<std::unique_ptr<ImportedModel>>
importForCompile(const std::string &path, const PlanRequest &args,
                 bool weights = true, bool training = true) {
  std::unique_ptr<ImportedModel> m = newImportedModel();
  onnx_frontend::ImportOptions options;
  options.inputShapes = args.inputShapes;
  options.dimSizes = args.dimSizes;
  options.training = weights || training;
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
  auto imported = importForCompile(args.modelPath, args, /*weights=*/false,
                                   /*training=*/false);
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
    else if (a.name == "cp")
      options.fixCp = a.size;
    else
      return invalidArgument("--mesh: unknown axis '", a.name,
                             "' (expected dp, pp, tp, cp)");
  }
  return Status::ok();
}

/// Whether `mesh` (--mesh) can be a plan of `cluster`'s devices: its ranks
/// are the devices when every axis is given or, with `leftOutAreOne`, the
/// axes left out are 1; else the axes given divide the devices (the search
/// chooses the others).
Status checkMeshRanks(const runtime::MeshShape &mesh,
                      const ClusterSpec &cluster, bool leftOutAreOne) {
  if (mesh.empty())
    return Status::ok();
  const int64_t given = mesh.ranks(), devices = cluster.numDevices();
  const bool whole =
      leftOutAreOne || (mesh.has("dp") && mesh.has("pp") && mesh.has("tp"));
  if (whole ? given == devices : devices % given == 0)
    return Status::ok();
  return invalidArgument(
      "--mesh ", mesh.str(), " has ", given, " ranks, ",
      whole ? "not the " : "which do not divide the ", devices,
      devices == 1 ? " device" : " devices", " of the cluster (",
      cluster.nodes, " node",
      cluster.nodes > 1 ? "s" : "", " of ", cluster.perNode(),
      "): give --nodes or --ranks to match");
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
  /// The host's arenas (--offload optimizer): the optimizer state there and
  /// the host step's workspace (its copies of gradients and parameters).
  double hostState = 0, hostWorkspace = 0;
  double total() const { return state + workspace + constants; }
};

StatusOr<CompiledMemory> compiledMemory(const PlanRequest &args,
                                        const Plan &plan) {
  const std::string &modelPath = args.modelPath;
  const std::vector<std::string> &frozen = args.frozen;
  CompiledMemory out;
  out.mesh = meshOf(plan);
  out.zero = plan.zeroStage;
  auto imported = importForCompile(modelPath, args);
  if (!imported.isOk())
    return imported.status().withContext("--compiled");
  mlir::ModuleOp module = *imported.value()->module;
  const std::string &diagnostics = imported.value()->diagnostics;
  CompileOptions options;
  options.fuse = fusionUnavailable(options.target).empty();
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
  out.hostState = double(m.hostState);
  out.hostWorkspace = double(m.hostWorkspace);
  return out;
}

std::string signedPercent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%+.1f%%", 100 * fraction);
  return buf;
}

/// The compiled memory beside the memory model, less the runtime reserve,
/// which the memory plan does not hold.
std::string formatCompiled(const CompiledMemory &c, const Candidate &chosen) {
  const MemoryBreakdown &m = chosen.memory;
  std::ostringstream os;
  double modelWorkspace = m.gradients + m.activations + m.temporaries +
                          m.commBuffers - m.reused;
  double modelTotal = m.total() - m.reserve;
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
  if (c.hostState + c.hostWorkspace > 0) {
    // The offloaded optimizer: the host's share, beside the model's.
    row("host: optimizer state", c.hostState, m.hostOptimizerState);
    row("host: workspace (gradient copies)", c.hostWorkspace,
        m.hostGradients);
    row("host total", c.hostState + c.hostWorkspace, m.hostTotal());
  }
  os << "  (the model's total excludes the runtime reserve of "
     << runtime::formatBytes(int64_t(m.reserve))
     << ", which is not part of the memory plan; the workspace is reused "
        "over the step, so it is compared with gradients + activations + "
        "temporaries + comm buffers - reused together)\n";
  return os.str();
}

Json compiledToJson(const CompiledMemory &c, const Candidate &chosen) {
  Json j = Json::object();
  j.set("mesh", c.mesh.str());
  j.set("zeroStage", c.zero);
  j.set("parameters", c.parameters);
  j.set("optimizerState", c.optimizerState);
  j.set("gradientState", c.gradientState);
  j.set("workspace", c.workspace);
  j.set("constants", c.constants);
  j.set("hostState", c.hostState);
  j.set("hostWorkspace", c.hostWorkspace);
  j.set("total", c.total());
  j.set("modelTotalExcludingReserve",
        chosen.memory.total() - chosen.memory.reserve);
  j.set("reserve", chosen.memory.reserve);
  return j;
}

//===----------------------------------------------------------------------===//
// GPU clusters: the plan compiled, its layers compiled once, its program priced
//===----------------------------------------------------------------------===//

/// The zoo family whose blocks are `m`'s (GPT: LayerNorm, biases, GeLU MLP,
/// learned positions; Llama: RMSNorm, no biases, SwiGLU, rotary), or why
/// neither builds it.
std::optional<zoo::Family> zooFamilyOf(const ModelDesc &m, std::string &why) {
  // GPT's block, with learned positions or ALiBi (BLOOM's).
  if (!m.gatedMlp && m.norm == NormKind::kLayerNorm && m.linearBias &&
      m.kvHeads == m.heads)
    return zoo::Family::Gpt;
  if (m.gatedMlp && m.norm == NormKind::kRmsNorm && !m.linearBias &&
      !m.learnedPositions)
    return zoo::Family::Llama;
  why = "a block neither zoo family builds (GPT: LayerNorm, biases, GeLU, "
        "learned positions or ALiBi; Llama: RMSNorm, SwiGLU, rotary, no "
        "biases)";
  return std::nullopt;
}

/// Where the programs that price a GPU plan come from: the zoo, which
/// rebuilds the described model with a few layers (compileGpuLayers), or
/// the model file itself, imported once (shapes only) and compiled whole
/// with each plan.
struct GpuProgramSource {
  std::string modelPath;           ///< empty: the zoo
  mlir::ModuleOp module;           ///< the file's, when modelPath is set
  std::vector<std::string> frozen; ///< as for dtcc compile --frozen
  int64_t batch = 0;               ///< the file's batch dimension
  /// PlanRequest::progress, told before each long compile, and before
  /// every compile once pricing has run kAnnouncedAfterSeconds.
  std::function<void(const std::string &)> progress;
  std::chrono::steady_clock::time_point started =
      std::chrono::steady_clock::now();
  bool isFile() const { return !modelPath.empty(); }
};

std::pair<int64_t, int64_t>
compiledLayerCounts(const ModelDesc &model, const Plan &plan,
                    const GpuProgramSource &source = GpuProgramSource());
std::pair<int64_t, int64_t> compiledMicroBatches(const Plan &plan);

/// The most layer x micro-batch instances a pipeline's compile for pricing
/// unrolls (its micro-batches are unrolled in the step, so the program grows
/// with both). On a 2-core machine the four programs of Megatron-LM's 145B
/// row (at most 32 layers x 24 micro-batches) compile and price in ~10 s,
/// its 310B row's (64 x 48) in ~37 s, MT-NLG's (70 x 70, 1F1B) in ~72 s
/// and Megatron-LM's 530B (105 x 105, interleaved) in ~190 s, Megatron-LM's
/// 1T (128 x 128, its 2 layers a stage compiled whole at 64 and 128
/// micro-batches) in ~4 minutes and 6 GB: a few minutes is what pricing one
/// given plan may take (it says on stderr what it compiles).
constexpr int64_t kMaxUnrolledLayers = 16384;
/// The same for the plans a search compares (its choice and the closest
/// alternatives, --sensitivity's plans), each compiled in turn, so that a
/// search stays within about a minute.
constexpr int64_t kMaxUnrolledSearched = 512;
/// From how many layer x micro-batch instances a compile for pricing is
/// announced (GpuProgramSource::progress): ~5 s on a 2-core machine.
constexpr int64_t kAnnouncedInstances = 512;
/// After how long every compile for pricing is announced: large layers
/// (Llama 3 70B at sequence 4096) take seconds a program at a few
/// instances.
constexpr double kAnnouncedAfterSeconds = 5;

/// The layer instances a compile of `layers` layers at `plan`'s pipeline
/// unrolls: each layer once per micro-batch with stages, else once.
int64_t unrolledInstances(int64_t layers, const Plan &plan) {
  return layers * (plan.pp > 1 ? plan.microBatches : 1);
}

/// Whether `plan` of a zoo model recomputes only the first K of a stage's
/// layers.
bool recomputesFirstLayers(const ModelDesc &model, const Plan &plan,
                           const GpuProgramSource &source) {
  return !source.isFile() && plan.recompute == Recompute::kFull &&
         plan.recomputeLayers > 0 &&
         plan.recomputeLayers < mostStageLayers(model, plan.pp);
}
/// Whether it does so and its compile for pricing holds fewer layers than
/// the model (a compile of the whole model recomputes exactly those).
bool partlyRecomputed(const ModelDesc &model, const Plan &plan,
                      const GpuProgramSource &source) {
  return recomputesFirstLayers(model, plan, source) &&
         compiledLayerCounts(model, plan, source).second < model.layers;
}

/// Why `plan` of `model` is priced by the analytic model instead of its
/// compiled program before compiling it: a model the zoo does not build (a
/// file is compiled itself), tf32, a file whose batch is not the plan's
/// (a file is compiled as it is: its batch is one micro-batch of every
/// data-parallel rank), a pipeline whose compile would unroll more than
/// `maxUnrolled` layer x micro-batch instances; empty when it can be
/// tried. A feature the compiler does not build is refused by the compile
/// itself, which names it.
std::string
compiledPricingGap(const Plan &plan, const ModelDesc &model,
                   int64_t maxUnrolled = kMaxUnrolledLayers,
                   const GpuProgramSource &source = GpuProgramSource()) {
  if (model.layers < 1 || model.heads < 1)
    return "not a transformer the planner describes";
  if (plan.dtype.compute == DType::kTf32)
    return "tf32 compute";
  if (source.isFile() && source.batch != plan.microBatchSize * plan.dp)
    return llvm::formatv("the file's batch of {0} sequences is not the "
                         "plan's micro-batch of {1} on each of its {2} "
                         "data-parallel ranks (a file is compiled as it is)",
                         source.batch, plan.microBatchSize, plan.dp)
        .str();
  if (plan.pp > 1) {
    int64_t layers = compiledLayerCounts(model, plan, source).second;
    Plan largest = plan;
    largest.microBatches = compiledMicroBatches(plan).second;
    if (unrolledInstances(layers, largest) > maxUnrolled)
      return llvm::formatv("the pipeline's compile would unroll {0} layers x "
                           "{1} micro-batches (at most {2} layer instances "
                           "are compiled for pricing{3})",
                           layers, largest.microBatches, maxUnrolled,
                           maxUnrolled < kMaxUnrolledLayers
                               ? " a searched plan"
                               : "")
          .str();
  }
  // A stage's first K layers recomputed: compiled with K recomputed and
  // more layers (compiledLayerCounts); an interleaved stage's chunks are
  // not.
  if (partlyRecomputed(model, plan, source) && plan.pp > 1 &&
      plan.virtualStages > 1)
    return llvm::formatv("recomputing the first {0} of a pipeline stage's "
                         "{1} layers in {2} interleaved chunks",
                         plan.recomputeLayers, mostStageLayers(model, plan.pp),
                         plan.virtualStages)
        .str();
  std::string why;
  if (!source.isFile() && !zooFamilyOf(model, why))
    return why;
  return "";
}

/// The layer counts a GPU plan is compiled at (compileGpuLayers), the
/// model's L layers priced as T(a) + (L - a) x (T(b) - T(a)). Without
/// pipeline stages, four and five: the first and last layers differ from
/// the middle ones (the embedding's and the head's neighbours, the last
/// segment's recomputation; with fewer than two layers dtcc-graph-autodiff
/// segments recomputation by op count), and the step's fullest point only
/// grows by one layer's saved tensors and state per layer once the
/// program's windows are full: ZeRO-3 gathers started one layer ahead,
/// gradient collectives in flight for two layers (dtcc-shard-overlap).
/// Compiled at 2 and 3 a 70B ZeRO-3 plan's memory grew 2.7 GB per layer, at
/// 4 and 5 (and 6 and 7, 9 and 10) 0.38 GB.
constexpr int64_t kLayersCompiled[2] = {4, 5};
/// With pp stages (and v chunks per stage, interleaved) the program is
/// compiled with a and a + 1 layers per chunk (pp x v chunks), at least one
/// and two. dtcc-shard-pipeline cuts the layers into stages of balanced
/// cost, the embedding's on the first and the head's and loss's on the
/// last: every stage's time and memory grow linearly in the layers per
/// chunk only once the stages can be balanced, when a chunk holds at least
/// as many layers as the head costs (a = the head's forward FLOPs over a
/// layer's, rounded up). Below that the head's stage is the slowest and
/// the others wait for it: compiled at one and two layers per chunk, a
/// 32-layer GPT of width 1024 and vocabulary 32000 on 3 stages was priced
/// at 92.9 ms a step (with the stages' parts extrapolated, 39.5 ms with the
/// step itself), at three and four 63.5 ms, and at 10 and 11 (nearly the
/// whole model) 63.8 ms. Models whose head costs less than a layer
/// (Megatron-LM's, GPT-3's, Llama 2 and 3 70B and 405B) stay at one and
/// two.
constexpr int64_t kChunkLayersCompiled[2] = {1, 2};

/// The layers per chunk a pipeline plan of `model` is compiled at (before
/// the model's own layers per chunk cap them): the head's layers' worth,
/// rounded up, at least kChunkLayersCompiled[0], and one more.
std::pair<int64_t, int64_t> chunkLayersCompiled(const ModelDesc &model) {
  const double heads = model.headForwardFlopsPerToken() /
                       std::max(1.0, model.layerForwardFlopsPerToken());
  const int64_t a = std::max(kChunkLayersCompiled[0],
                             int64_t(std::ceil(heads - 1e-9)));
  return {a, std::max(a + 1, kChunkLayersCompiled[1])};
}

/// The two micro-batch counts a pipeline plan is compiled at: a pipeline's
/// micro-batches are unrolled in its step, and once every stage has a
/// steady state the schedule only repeats it: the step grows by the same
/// time per micro-batch and the memory by the same bytes (none but
/// GPipe's), so two counts are compiled, the plan's step extrapolated
/// linearly and its memory GPipe's likewise, the others' the fuller
/// program's (priceCompiledLayers). 1F1B and GPipe are linear from pp
/// micro-batches on (each stage's warm-up is at most pp - 1 forward
/// passes), and 1F1B's memory settles a few micro-batches later, when the
/// last ones' gradient collectives and the static memory plan's packing no
/// longer change the fullest point: they are compiled at pp and pp + 4
/// (2 pp below 4 stages). Llama 3 405B on 16 stages (1F1B, 8 layers a
/// stage) plans 117.2, 123.5, 123.9, 124.08 and 124.08 GB at 16, 17, 18, 20
/// and 32 micro-batches, BLOOM on 12 stages 56.09, 56.73, 56.92, 56.84 and
/// 56.84 at 12, 13, 14, 16 and 24, both steps within 3e-7 of linear from pp
/// on. Against pp and 2 pp, Megatron-LM's 1T (64 stages) is priced within
/// 3e-6 in 34% less time, MT-NLG 530B (35 stages) 0.08% faster in 23% less
/// time, memory within 3e-5 of theirs. ZB-H1's deferred weight passes hold 6% less at pp than from 2 pp on:
/// compiled at pp and 2 pp. An interleaved stage warms up over (v - 1) pp +
/// 2 (pp - 1) chunk passes and runs micro-batches in groups of pp, so its
/// step is linear from 2 pp on: compiled at 2 pp and 3 pp. Measured: GPT 16
/// and 32 layers on 4 and 8 stages, the step at 5 pp from pp and 2 pp
/// within 2.3e-6 of its compile for 1F1B, ZB-H1 and GPipe; the interleaved
/// step 2.9e-3 (v = 2) and 4.8e-3 (v = 3) off from pp and 2 pp, exact from
/// 2 pp and 3 pp. A plan with at most the second count is compiled at its
/// own (no program is larger than the second's); so is one without stages.
std::pair<int64_t, int64_t> compiledMicroBatches(const Plan &plan) {
  int64_t first = plan.pp, second = plan.pp + std::min<int64_t>(plan.pp, 4);
  if (plan.schedule == Schedule::kInterleaved) {
    first = 2 * plan.pp;
    second = 3 * plan.pp;
  } else if (plan.schedule == Schedule::kZeroBubbleH1) {
    second = 2 * plan.pp;
  }
  if (plan.pp <= 1 || plan.microBatches <= second)
    return {plan.microBatches, plan.microBatches};
  return {first, second};
}

/// The two layer counts `plan` of `model` is compiled at; equal when the
/// model is compiled whole (a file always is).
std::pair<int64_t, int64_t> compiledLayerCounts(const ModelDesc &model,
                                                const Plan &plan,
                                                const GpuProgramSource &source) {
  if (source.isFile())
    return {model.layers, model.layers};
  // A plan recomputing the first K layers (of each stage) is compiled with
  // those K recomputed and, beyond them (and a stage's share of the head),
  // kLayersCompiled[0] - 1 layers and one more not recomputed: adding
  // layers then adds layers not recomputed, and the step's fullest point
  // stays where it is. With fewer the fullest point is elsewhere: Llama 3
  // 70B at sequence 4096, dp=64 ZeRO-3, 3 layers recomputed, compiled whole
  // at 4, 5, 6 and 8 layers lives on 14.0, 14.1, 15.7 and 19.0 GB (1.64 GB
  // a layer from 5 on, 0.12 from 4 to 5); a 24-layer GPT of width 2048 on 2
  // stages recomputing 6 of each stage's layers, at 16, 18, 20, 22 and 24
  // layers needs 8.57, 9.70, 11.11, 12.52 and 13.93 GB (linear from 18 on,
  // 4 of the first stage's 10 layers not recomputed). Nor is the price
  // linear in the layers recomputed: dtcc-shard-pipeline balances the
  // stages' costs, recomputation counted, so its cut moves with them (that
  // GPT at K = 6, scaled from 5 and 6 layers a stage with 3 and 4
  // recomputed: 1056 ms a step, 851 ms compiled whole), and compiled at 4
  // and 5 layers with 2 and 3 recomputed the Llama's 40 of 80 read no
  // workspace at all.
  const bool firstK = recomputesFirstLayers(model, plan, source) &&
                      plan.virtualStages <= 1;
  const int64_t beyondK =
      firstK ? plan.recomputeLayers + kLayersCompiled[0] - 1 : 0;
  // Where the second count is the model's own, the line through the two
  // is read at its second point: the model is compiled whole, once
  // (Megatron-LM's 1T, 2 layers on each of 64 stages, unrolls 128 x 128
  // layer instances once instead of also 64 x 128).
  auto wholeAtSecond = [&](int64_t a, int64_t b) -> std::pair<int64_t, int64_t> {
    return b == model.layers ? std::make_pair(b, b) : std::make_pair(a, b);
  };
  if (plan.pp <= 1)
    return wholeAtSecond(
        std::min(model.layers, std::max(kLayersCompiled[0], beyondK)),
        std::min(model.layers, std::max(kLayersCompiled[1], beyondK + 1)));
  const int64_t chunks = plan.pp * std::max<int64_t>(1, plan.virtualStages);
  const int64_t perChunk = std::max<int64_t>(1, model.layers / chunks);
  auto [first, second] = chunkLayersCompiled(model);
  if (firstK) {
    first += beyondK;
    second = std::max(second, first + 1);
  }
  return wholeAtSecond(chunks * std::min(perChunk, first),
                       chunks * std::min(perChunk, second));
}

/// The probability of the Dropout nodes of a model described with dropout
/// (GPT-2's and Megatron-LM's 0.1).
constexpr double kPricedDropout = 0.1;

/// "4 and 5 layers compiled for cuda and simulated, scaled to L layers",
/// or "all L layers compiled ..." for a model compiled whole, or "the file
/// compiled ..." for a model file.
std::string
compiledLayersText(const ModelDesc &model, const Plan &plan,
                   const GpuProgramSource &source = GpuProgramSource()) {
  auto [a, b] = compiledLayerCounts(model, plan, source);
  std::string text =
      source.isFile()
          ? llvm::formatv("{0} compiled whole for cuda and simulated",
                          baseName(source.modelPath))
                .str()
      : a == b && a == model.layers
          ? llvm::formatv("all {0} layers compiled for cuda and simulated",
                          model.layers)
                .str()
          : llvm::formatv("{0} and {1} layers compiled for cuda and "
                          "simulated, scaled to {2} layers",
                          a, b, model.layers)
                .str();
  auto [m1, m2] = compiledMicroBatches(plan);
  if (m1 != m2)
    text += llvm::formatv(", at {0} and {1} micro-batches, scaled to {2}", m1,
                          m2, plan.microBatches)
                .str();
  return text;
}

/// The chosen plan compiled and priced.
struct CompiledPrice {
  Candidate candidate;
  ProgramTime time;     ///< extrapolated to the model's layers
  ProgramMemory memory; ///< likewise
  double seconds = 0;   ///< compiling and pricing
};

/// A plan's layer-scaled programs (see compileGpuLayers): compiled once,
/// priced on any cluster by priceCompiledLayers.
struct CompiledLayers {
  /// [micro-batch count][layer count] (compiledMicroBatches and
  /// compiledLayerCounts; equal counts share a program).
  PricedProgram priced[2][2];
  /// The model's layers as T(a) + factor x (T(b) - T(a)).
  double factor = 0;
  /// The plan's micro-batches, likewise from the two counts compiled.
  double factorMicro = 0;
  RunKernels run;
  double seconds = 0; ///< compiling
};

/// `layers` priced on `cluster` (its programs simulated again there unless
/// `simulate` is false: they were priced on it when compiled) and scaled
/// to the model's layers.
StatusOr<CompiledPrice> priceCompiledLayers(const CompiledLayers &layers,
                                            const ModelDesc &model,
                                            const Plan &plan,
                                            const ClusterSpec &cluster,
                                            bool simulate) {
  auto started = std::chrono::steady_clock::now();
  // Over the layers at each micro-batch count, then over the
  // micro-batches.
  CompiledPrice out;
  ProgramTime byLayers[2];
  ProgramMemory memoryByLayers[2];
  for (int m = 0; m < 2; ++m) {
    ProgramTime t[2];
    for (int i = 0; i < 2; ++i) {
      const PricedProgram &priced = layers.priced[m][i];
      if (!simulate) {
        t[i] = priced.time;
        continue;
      }
      auto simulated = simulateProgram(priced.program, cluster,
                                       /*recordTimeline=*/false, layers.run);
      if (!simulated.isOk())
        return simulated.status();
      t[i] = std::move(simulated.value());
    }
    byLayers[m] = extrapolateProgramTime(t[0], t[1], layers.factor);
    memoryByLayers[m] = extrapolateProgramMemory(layers.priced[m][0].memory,
                                                 layers.priced[m][1].memory,
                                                 layers.factor);
  }
  out.time = extrapolateProgramTime(byLayers[0], byLayers[1],
                                    layers.factorMicro);
  // Memory grows with the micro-batches only under GPipe (every forward
  // pass keeps its activations until the backward passes); the other
  // schedules hold as many micro-batches at the second count as at any
  // more (compiledMicroBatches), so their memory is the fuller of the two
  // programs. A line through the two would scale the packing difference
  // of their static memory plans by the micro-batches beyond it.
  const bool growsWithMicroBatches = plan.schedule == Schedule::kGPipe;
  out.memory =
      growsWithMicroBatches
          ? extrapolateProgramMemory(memoryByLayers[0], memoryByLayers[1],
                                     layers.factorMicro)
          : memoryByLayers[memoryByLayers[1].total >= memoryByLayers[0].total
                               ? 1
                               : 0];
  double tokens = double(plan.globalBatch()) * double(model.seq);
  double modelFlops = model.trainingFlopsPerToken(Recompute::kNone) * tokens;
  out.candidate = candidateFromProgram(plan, out.memory, out.time, cluster,
                                       tokens, modelFlops);
  out.seconds = layers.seconds + std::chrono::duration<double>(
                                     std::chrono::steady_clock::now() - started)
                                     .count();
  return out;
}

/// Compiles `plan` of `model` for the GPU `cluster`, to price it from its
/// compiled program. Identical layers are compiled once: the model is built by the
/// zoo with kLayersCompiled a and b layers (same hidden size, heads,
/// sequence, vocabulary, embedding and head), each compiled for the CUDA
/// target with the plan and its step simulated; the model of L layers is
/// priced as T(a) + (L - a) x (T(b) - T(a)), every time, byte count and
/// collective alike (extrapolateProgramTime/Memory); a model of at most b
/// layers is compiled whole (a plan recomputing its first K layers with
/// more, compiledLayerCounts). A model file (`source`) is compiled itself,
/// whole, its batch one micro-batch of every data-parallel rank (the
/// pricing gap says so otherwise). The attention core and the work before
/// each data-parallel gradient sum are priced as `run` says the run
/// executes them (RunKernels). Errors: the compiler's.
StatusOr<CompiledLayers>
compileGpuLayers(const ModelDesc &model, const Plan &plan,
                 const ClusterSpec &cluster, const RunKernels &run,
                 const GpuProgramSource &source = GpuProgramSource()) {
  auto started = std::chrono::steady_clock::now();
  std::string why;
  std::optional<zoo::Family> family = zooFamilyOf(model, why);
  if (!family && !source.isFile())
    return invalidArgument(why);
  std::vector<runtime::MeshShape::Axis> axes;
  for (const std::string &axis : plan.order) {
    int64_t size = axis == "dp" ? plan.dp : axis == "tp" ? plan.tp : plan.pp;
    if (size > 1 || axis == "dp")
      axes.push_back({axis, size});
  }
  auto mesh = runtime::MeshShape::of(std::move(axes));
  if (!mesh.isOk())
    return mesh.status();
  const auto [layersA, layersB] = compiledLayerCounts(model, plan, source);
  const auto [microA, microB] = compiledMicroBatches(plan);
  CompiledLayers out;
  const int programCount =
      (layersB != layersA ? 2 : 1) * (microB != microA ? 2 : 1);
  int compiles = 0;
  // Each (micro-batch count m, layer count i), layers fastest.
  for (int k = 0; k < 4; ++k) {
    const int m = k / 2, i = k % 2;
    if (i == 1 && layersB == layersA) {
      out.priced[m][1] = out.priced[m][0];
      continue;
    }
    if (m == 1 && microB == microA) {
      out.priced[1][i] = out.priced[0][i];
      continue;
    }
    Plan compiled = plan;
    compiled.microBatches = m == 0 ? microA : microB;
    const int64_t layers = i == 0 ? layersA : layersB;
    ++compiles;
    if (source.progress &&
        (unrolledInstances(layers, compiled) >= kAnnouncedInstances ||
         std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                       source.started)
                 .count() >= kAnnouncedAfterSeconds))
      source.progress(llvm::formatv(
          "compiling {0} layer{1} of {2} x {3} micro-batch{4} for cuda to "
          "price dp={5} pp={6} tp={7} (program {8} of {9})",
          layers, layers > 1 ? "s" : "", model.name, compiled.microBatches,
          compiled.microBatches > 1 ? "es" : "", plan.dp, plan.pp, plan.tp,
          compiles, programCount));
    // compileAndPrice compiles a clone: the file's module serves every plan.
    mlir::ModuleOp module = source.module;
    std::unique_ptr<ImportedModel> zooModel;
    if (!source.isFile()) {
      zoo::ZooOptions o;
      o.family = *family;
      o.layers = layers;
      o.hidden = model.hidden;
      o.heads = model.heads;
      if (*family == zoo::Family::Llama)
        o.kvHeads = model.kvHeads;
      o.ffnHidden = model.ffnHidden;
      o.vocab = model.vocab;
      o.seq = model.seq;
      // The module's inputs are one micro-batch of every data-parallel rank.
      o.batch = plan.microBatchSize * plan.dp;
      o.tiedEmbeddings = model.tiedEmbeddings;
      // A GPT block without learned positions has ALiBi's (BLOOM).
      o.alibi = *family == zoo::Family::Gpt && !model.learnedPositions;
      // Where GPT-2 and Megatron-LM place it; its cost does not depend on
      // the probability.
      o.dropout = model.dropout ? kPricedDropout : 0.0;
      o.weights = false;
      if (std::string e = zoo::validate(o); !e.empty())
        return invalidArgument("the model as a zoo ", zoo::familyName(*family),
                               ": ", e);
      mlir::TimingScope timing =
          compilerTiming().nest("build and import the zoo model");
      std::string bytes;
      if (!zoo::buildModel(o).SerializeToString(&bytes))
        return runtime::internalError("cannot serialize the zoo model");
      zooModel = newImportedModel();
      onnx_frontend::ImportOptions io;
      io.loadWeights = false;
      io.training = true;
      auto imported = onnx_frontend::importOnnxBytes(
          bytes, model.name + ".onnx", "", &zooModel->context, io);
      if (mlir::failed(imported))
        return invalidArgument("cannot import the zoo model",
                               zooModel->diagnostics);
      zooModel->module = std::move(*imported);
      module = *zooModel->module;
    }
    CompileOptions options;
    options.target = "cuda";
    options.stridedViews = run.stridedViews;
    options.halfWeightCopies = run.halfWeightCopies;
    options.matmulEpilogues = run.matmulEpilogues;
    options.fuse = run.fuse;
    // A zoo model's IR is verified once, after the phases; a file's after
    // every pass, so that a compiler fault names the pass.
    options.verifyEachPass = source.isFile();
    options.train.enabled = true;
    options.train.dtype = dtypeName(plan.dtype.compute);
    // dtcc's own run fuses the attention cores (the CUDA attention kernels,
    // priced as compiled); a run the plan file describes keeps them in the
    // program, priced as that run executed them (`attention`).
    // A file is dtcc's own run too: its cores as dtcc compile fuses them.
    options.train.fusedAttention =
        (model.flashAttention || source.isFile()) &&
        run.attention == AttentionKernels::kAsCompiled;
    options.train.frozen = source.frozen;
    // Every field of the plan: one the compiler does not build yet is
    // refused by dtcc-plan-set, naming it (and the plan stays analytic).
    options.train.plan = compilerPlanOf(compiled);
    options.train.plan.mesh = mesh.value();
    auto p = compileAndPrice(module, options, cluster, run);
    if (!p.isOk())
      return p.status().withContext(runtime::strCat(
          "compiling ", layers, " layer", layers > 1 ? "s" : "", " of ",
          model.name, " with --mesh ", mesh.value().str(), " --zero ",
          plan.zeroStage, " and ", compiled.microBatches, " micro-batch",
          compiled.microBatches > 1 ? "es" : ""));
    // A plan with tp whose program does not communicate over tp would
    // compute everything on every tp rank: not the plan. (A guard: the
    // Megatron layouts find a bf16 graph's weights behind their casts.)
    if (plan.tp > 1) {
      bool tpComm = false;
      for (const CollectiveInfo &c : listCollectives(p.value().program))
        tpComm = tpComm || c.axes.find("tp") != std::string::npos;
      if (!tpComm)
        return invalidArgument(
            "the compiled program does not shard over tp=", plan.tp,
            " (the compiler finds no weight to split in the ",
            dtypeName(plan.dtype.compute), " graph)");
    }
    out.priced[m][i] = std::move(p.value());
  }
  out.factor = layersB == layersA ? 0.0
                                  : double(model.layers - layersA) /
                                        double(layersB - layersA);
  out.factorMicro = microB == microA ? 0.0
                                     : double(plan.microBatches - microA) /
                                           double(microB - microA);
  out.run = run;
  out.seconds = std::chrono::duration<double>(
                    std::chrono::steady_clock::now() - started)
                    .count();
  return out;
}

/// Prices `plan` of `model` on the GPU `cluster` from its compiled program
/// (compileGpuLayers, then priceCompiledLayers as compiled).
StatusOr<CompiledPrice>
priceCompiledGpuPlan(const ModelDesc &model, const Plan &plan,
                     const ClusterSpec &cluster, const RunKernels &run,
                     const GpuProgramSource &source = GpuProgramSource()) {
  auto layers = compileGpuLayers(model, plan, cluster, run, source);
  if (!layers.isOk())
    return layers.status();
  return priceCompiledLayers(layers.value(), model, plan, cluster,
                             /*simulate=*/false);
}

/// The analytic search is the pre-filter of a GPU cluster's plans: its
/// choice is compiled and priced from its program, then the slower plans
/// it found (the best of each mesh and ZeRO stage, fastest first) that
/// could still win, which are compiled and priced too; the programs
/// decide. A slower plan could still win when its analytic price is within
/// kComparedWithin of the choice's, or of the best step a compiled program
/// that fits has priced so far, whichever is larger: the formulas leave out
/// costs a program pays (kernel launches, casts, copies, exposed gathers),
/// which can make a small per-device batch's program several times its
/// formula, and then plans the formulas rank far apart are close by their
/// programs. Compiles are what planning spends its time on: at most
/// kComparedSlower of them are compiled once a program fits, and at most
/// kComparedUnfit until one does.
constexpr double kComparedWithin = 0.10;
constexpr int kComparedSlower = 4;
constexpr int kComparedUnfit = 8;
/// --sensitivity compiles, in each world, up to this many of the world's
/// slower plans within kComparedWithin of its analytic best.
constexpr int kSensitivityCompared = 4;

/// Searches again with the capacity scaled down by the analytic memory
/// model's underestimate, where no compiled program of a search fits: at
/// most this many rounds, and none once the capacities left to try are
/// within kMemoryRoundsApart of each other.
constexpr int kMemoryRounds = 5;
constexpr double kMemoryRoundsApart = 0.005;

/// The plan a GPU cluster's programs choose among the analytic search's
/// choice and its slower plans that could still win.
struct ProgramChoice {
  /// The chosen plan priced from its program; nullopt when the analytic
  /// choice itself could not be (`gap` says why: a pricing gap or its
  /// compile's error), and then it keeps its analytic price.
  std::optional<CompiledPrice> price;
  std::string gap;
  /// "PLAN: 1.2 ms analytic, 1.5 ms compiled" for the search's choice and
  /// each alternative priced; empty when no alternative was.
  std::vector<std::string> compared;
  /// Slower plans that could still have won but were not compiled, the
  /// compiles being spent (kComparedSlower, kComparedUnfit).
  int leftOut = 0;
  /// Every plan compiled and priced, the search's choice first (the chosen
  /// one among them).
  std::vector<Candidate> priced;

  /// One line for a report's notes: the alternatives and both prices.
  std::string comparedNote() const {
    std::string list;
    for (const std::string &c : compared)
      list += (list.empty() ? "" : "; ") + c;
    std::string note = llvm::formatv(
        "the analytic search's choice and the slower plans that could "
        "still win (analytic price within {0:f0}% of the choice's or of "
        "the best compiled step; at most {1}, or {2} until one fits) "
        "compiled and priced, the chosen plan is the best by its program: ",
        kComparedWithin * 100, kComparedSlower, kComparedUnfit);
    note += list;
    if (leftOut > 0)
      note += llvm::formatv("; {0} more could still win and were not "
                            "compiled",
                            leftOut)
                  .str();
    return note;
  }
};

/// The search's alternatives once its choice was decided by compiled
/// programs (`choice`): the plans compiled and not chosen are rejected by
/// their programs' prices against the chosen plan's; the slower plans only
/// the analytic model priced keep that price, against the search's analytic
/// choice, and say so; the chosen plan is not among them. At most
/// `perKind` of each kind, as the search keeps them.
void reviseAlternatives(SearchResult &search, const Candidate &chosen,
                        const ProgramChoice &choice, double capacity,
                        int perKind) {
  const std::string chosenPlan = chosen.plan.summary();
  std::set<std::string> compiled;
  std::vector<Rejection> slower, unfit, rest;
  for (const Candidate &c : choice.priced) {
    if (!compiled.insert(c.plan.summary()).second ||
        c.plan.summary() == chosenPlan)
      continue;
    Rejection r;
    r.plan = c.plan;
    r.stepTime = c.time.stepTime;
    r.pricedBy = "compiled program";
    if (c.fits) {
      r.kind = Rejection::Kind::kSlower;
      r.slowerFraction =
          std::max(0.0, c.time.stepTime / chosen.time.stepTime - 1);
      r.reason = "slower by " + formatPercent(r.slowerFraction) +
                 " (both compiled programs)";
      slower.push_back(r);
    } else {
      r.kind = Rejection::Kind::kOutOfMemory;
      r.excessBytes = c.memory.total() - capacity;
      r.reason = c.problem + " (compiled program)";
      unfit.push_back(r);
    }
  }
  auto byStep = [](const Rejection &a, const Rejection &b) {
    return a.stepTime < b.stepTime;
  };
  std::stable_sort(slower.begin(), slower.end(), byStep);
  for (const Rejection &r : search.slowerPlans)
    if (!compiled.count(r.plan.summary()) && r.plan.summary() != chosenPlan) {
      Rejection a = r;
      a.reason = "analytic model: slower by " +
                 formatPercent(r.slowerFraction) +
                 " than the search's choice (not compiled)";
      slower.push_back(a);
    }
  for (const Rejection &r : search.alternatives) {
    if (r.kind == Rejection::Kind::kSlower ||
        r.plan.summary() == chosenPlan)
      continue;
    (r.kind == Rejection::Kind::kOutOfMemory ? unfit : rest).push_back(r);
  }
  auto keep = [&](std::vector<Rejection> &list) {
    if (list.size() > size_t(std::max(0, perKind)))
      list.resize(size_t(std::max(0, perKind)));
  };
  keep(slower);
  keep(unfit);
  search.alternatives = std::move(slower);
  search.alternatives.insert(search.alternatives.end(), unfit.begin(),
                             unfit.end());
  search.alternatives.insert(search.alternatives.end(), rest.begin(),
                             rest.end());
}

/// `chosen` (the analytic search's choice, or a given plan, priced
/// `analyticStep` by the analytic model) compiled and priced on `cluster`;
/// then the plans of `slower` (the search's slower plans, fastest first)
/// that could still win (see kComparedWithin), at most kComparedSlower
/// (kComparedUnfit while no program fits) of those whose compile stays
/// within kMaxUnrolledSearched layer instances, each compiled and priced
/// too. The programs decide: a plan that fits first, then the faster step;
/// while none fits, the one that needs the least memory. An alternative
/// whose compile fails is left out.
ProgramChoice chooseByPrograms(const ModelDesc &model, const Plan &chosen,
                               double analyticStep,
                               const std::vector<Rejection> *slower,
                               const ClusterSpec &cluster,
                               const RunKernels &run,
                               const GpuProgramSource &programs,
                               int64_t maxUnrolled) {
  ProgramChoice out;
  out.gap = compiledPricingGap(chosen, model, maxUnrolled, programs);
  if (!out.gap.empty())
    return out;
  auto priced =
      priceCompiledGpuPlan(model, chosen, cluster, run, programs);
  if (!priced.isOk()) {
    std::string m = priced.status().message();
    out.gap = "its compile failed: " + m.substr(0, m.find('\n'));
    return out;
  }
  out.price = std::move(priced.value());
  out.priced.push_back(out.price->candidate);
  if (!slower)
    return out;
  const std::string proposed = llvm::formatv(
      "{0} (the search's choice): {1} analytic, {2} compiled{3}",
      chosen.summary(), formatSeconds(analyticStep),
      formatSeconds(out.price->candidate.time.stepTime),
      out.price->candidate.fits ? "" : " (does not fit)");
  for (const Rejection &r : *slower) {
    // Until a program fits, every slower plan could still win.
    const Candidate &now = out.price->candidate;
    const double reach =
        now.fits ? (1 + kComparedWithin) *
                       std::max(analyticStep, now.time.stepTime)
                 : std::numeric_limits<double>::infinity();
    if (r.stepTime > reach)
      break; // fastest first: none after it can win either
    if (!compiledPricingGap(r.plan, model, kMaxUnrolledSearched, programs)
             .empty())
      continue;
    if (int(out.compared.size()) >=
        (now.fits ? kComparedSlower : kComparedUnfit)) {
      ++out.leftOut;
      continue;
    }
    auto p = priceCompiledGpuPlan(model, r.plan, cluster, run, programs);
    if (!p.isOk())
      continue;
    const Candidate &other = p.value().candidate;
    out.priced.push_back(other);
    out.compared.push_back(llvm::formatv(
        "{0}: {1} analytic, {2} compiled{3}", r.plan.summary(),
        formatSeconds(r.stepTime), formatSeconds(other.time.stepTime),
        other.fits ? "" : " (does not fit)"));
    // A plan that fits first, then the faster step; of plans that do not
    // fit, the one closest to fitting (the report says by how much).
    bool better = other.fits != now.fits ? other.fits
                  : other.fits ? other.time.stepTime < now.time.stepTime
                               : other.memory.total() < now.memory.total();
    if (better)
      out.price = std::move(p.value());
  }
  if (!out.compared.empty())
    out.compared.insert(out.compared.begin(), proposed);
  return out;
}

/// Where no program `choice` compiled fits the device, the analytic
/// model's memory was too low for this model: `search` again with the
/// device's capacity scaled down by the compiled plans' analytic/compiled
/// memory ratio, the mildest first, then the worst, and its choice and
/// closest slower plans compiled and priced the same way, until a program
/// fits. Further rounds (kMemoryRounds) halve the interval between the
/// largest scale at which the analytic model fits no plan and the smallest
/// whose programs missed (below every scale tried, by the worst ratio
/// again while the model still fits a plan at each): a plan whose program
/// fits was found at a little less memory, and a scale a little above
/// where the analytic model fits nothing holds the plans that need least.
/// `choice` and the returned search are then that round's; `note` says
/// what each round found (empty when none ran).
std::optional<SearchResult> searchUntilAProgramFits(
    ProgramChoice &choice, const ModelDesc &model, const ClusterSpec &cluster,
    const RunKernels &run, const GpuProgramSource &programs,
    llvm::function_ref<StatusOr<SearchResult>(const ClusterSpec &)> search,
    std::string &note) {
  if (!choice.price || choice.price->candidate.fits)
    return std::nullopt;
  std::vector<double> ratios;
  for (const Candidate &compiled : choice.priced) {
    auto analytic = evaluatePlan(model, cluster, compiled.plan);
    if (analytic.isOk() &&
        compiled.memory.total() > analytic.value().memory.total())
      ratios.push_back(analytic.value().memory.total() /
                       compiled.memory.total());
  }
  llvm::sort(ratios, std::greater<double>());
  std::optional<SearchResult> adopted;
  if (ratios.empty())
    return adopted;
  // The smallest scale whose round's programs missed, and the largest at
  // which the analytic model fits no plan.
  double missed = 1.0, infeasible = 0.0;
  for (int round = 0; round < kMemoryRounds; ++round) {
    double ratio = round == 0                   ? ratios.front()
                   : infeasible > 0             ? (infeasible + missed) / 2
                   : ratios.back() < missed     ? ratios.back()
                                                : missed * ratios.back();
    if (round > 0 && missed - infeasible < kMemoryRoundsApart)
      break;
    ClusterSpec tighter = cluster;
    tighter.device.memoryBytes.value *= ratio;
    note += llvm::formatv(
        "{0}searched again with {1:f0}% of the device's memory (the "
        "compiled programs needed {2:f2}x the analytic model's): ",
        note.empty() ? "no compiled program of the first search fit the "
                       "device; "
                     : "; ",
        ratio * 100, 1 / ratio);
    StatusOr<SearchResult> again = search(tighter);
    if (!again.isOk() || !again.value().best) {
      note += "no plan fits then";
      infeasible = std::max(infeasible, ratio);
      continue;
    }
    missed = std::min(missed, ratio);
    ProgramChoice next = chooseByPrograms(
        model, again.value().best->plan, again.value().best->time.stepTime,
        &again.value().slowerPlans, cluster, run, programs,
        kMaxUnrolledSearched);
    if (!next.price) {
      note += "its choice was not compiled (" + next.gap + ")";
      continue;
    }
    bool fits = next.price->candidate.fits;
    note += next.price->candidate.plan.summary() +
            (fits ? "" : " (does not fit either)");
    if (fits) {
      choice = std::move(next);
      adopted = std::move(again.value());
      break;
    }
  }
  return adopted;
}

/// The instructions of `time` with every layer's instance of one
/// instruction merged: a node "layers.7/mlp/MatMul_fc1" (a weight
/// "layers.7.mlp.fc1.weight") becomes "layers.*/mlp/MatMul_fc1", its calls
/// and times summed over the layers; most time first.
std::vector<InstructionTime> byLayerPattern(const ProgramTime &time) {
  std::map<std::pair<std::string, std::string>, InstructionTime> merged;
  for (const InstructionTime &it : time.instructions) {
    // Each name of the node (a joined collective names several, ", "-
    // separated).
    std::string node;
    llvm::SmallVector<llvm::StringRef> names;
    llvm::StringRef(it.node).split(names, ", ");
    for (llvm::StringRef name : names) {
      std::string n = name.str();
      if (n.rfind("layers.", 0) == 0) {
        size_t end = 7;
        while (end < n.size() && std::isdigit((unsigned char)n[end]))
          ++end;
        if (end > 7)
          n = "layers.*" + n.substr(end);
      }
      node += (node.empty() ? "" : ", ") + n;
    }
    InstructionTime &m = merged[{it.kernel, node}];
    m.kernel = it.kernel;
    m.node = node;
    m.collective = it.collective;
    m.calls += it.calls;
    m.seconds += it.seconds;
    m.exposed += it.exposed;
    m.bytes += it.bytes;
  }
  std::vector<InstructionTime> out;
  for (auto &[key, it] : merged)
    out.push_back(it);
  std::stable_sort(out.begin(), out.end(),
                   [](const InstructionTime &a, const InstructionTime &b) {
                     return a.seconds > b.seconds;
                   });
  return out;
}

/// `--explain-cost`: the `count` most expensive instructions and
/// collectives of the chosen plan's step (every layer's instance of one
/// summed), with their ONNX node.
std::string formatExplainCost(const ProgramTime &program, double stepTime,
                              const std::string &how, size_t count = 10) {
  ProgramTime time;
  time.instructions = byLayerPattern(program);
  std::ostringstream os;
  os << "\nCost of the step by instruction (" << how
     << "; layers.* sums every layer's instance), the " << count
     << " most expensive:\n";
  char line[512];
  std::snprintf(line, sizeof(line), "  %-3s %-15s %7s %11s %7s %11s  %s\n",
                "#", "kernel", "calls", "time", "of step", "exposed",
                "ONNX node");
  os << line;
  size_t n = std::min(count, time.instructions.size());
  for (size_t i = 0; i < n; ++i) {
    const InstructionTime &it = time.instructions[i];
    std::snprintf(
        line, sizeof(line), "  %-3zu %-15s %7lld %11s %6.1f%% %11s  %s\n",
        i + 1, it.kernel.c_str(), (long long)it.calls,
        formatSeconds(it.seconds).c_str(),
        stepTime > 0 ? 100 * it.seconds / stepTime : 0.0,
        it.collective ? formatSeconds(it.exposed).c_str() : "-",
        it.node.empty() ? "-" : it.node.c_str());
    os << line;
  }
  double listed = 0, all = 0;
  for (size_t i = 0; i < time.instructions.size(); ++i) {
    (i < n ? listed : all) += time.instructions[i].seconds;
  }
  os << "  (" << time.instructions.size() << " instructions and collectives; "
     << "the rest price " << formatSeconds(all)
     << "; a collective's time is on its link, `exposed` the part the "
        "compute thread waited for)\n";
  return os.str();
}

Json explainCostToJson(const ProgramTime &program, const std::string &how,
                       size_t count = 10) {
  ProgramTime time;
  time.instructions = byLayerPattern(program);
  Json j = Json::object();
  j.set("how", how);
  Json list = Json::array();
  for (size_t i = 0; i < std::min(count, time.instructions.size()); ++i) {
    const InstructionTime &it = time.instructions[i];
    Json e = Json::object();
    e.set("kernel", it.kernel);
    e.set("node", it.node);
    e.set("collective", it.collective);
    e.set("calls", it.calls);
    e.set("seconds", it.seconds);
    if (it.collective) {
      e.set("exposedSeconds", it.exposed);
      e.set("bytes", it.bytes);
    }
    list.push(e);
  }
  j.set("instructions", list);
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
  plan.cp = c.mesh.size("cp");
  plan.zeroStage = c.zero;
  plan.microBatches = c.microBatches;
  plan.microBatchSize = std::max<int64_t>(1, batch / std::max<int64_t>(1, plan.dp));
  plan.schedule = c.schedule == "gpipe"         ? Schedule::kGPipe
                  : c.schedule == "interleaved" ? Schedule::kInterleaved
                  : c.schedule == "zb-h1"       ? Schedule::kZeroBubbleH1
                                                : Schedule::k1F1B;
  plan.virtualStages = c.virtualStages;
  plan.sequenceParallel = c.sequenceParallel;
  plan.dtype = policy;
  return plan;
}

/// What a candidate whose tp splits nothing does (CompiledCandidate::
/// tpIdle), for the reports.
static std::string tpIdleText(const CompiledCandidate &c) {
  return runtime::strCat("tp=", c.mesh.size("tp"),
                         " splits none of the model's weights: every tp rank "
                         "computes the whole step");
}

/// `dtcc plan model.onnx --cluster <cpu>`, and on a GPU cluster a model
/// the planner's formulas do not describe: the plans dtcc compile builds
/// for the cluster's target, each compiled and priced (planByCompiling, as
/// `dtcc compile --plan auto` chooses for such a model), or the one
/// --mesh/--zero give.
StatusOr<PlanOutput> compiledFilePlan(const PlanRequest &args,
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
  } else if (Status s = checkMeshRanks(args.mesh, cluster,
                                       /*leftOutAreOne=*/true);
             !s.isOk()) {
    return s;
  }
  const int64_t ranks = cluster.numDevices();
  // A file is compiled as it is: a step trains its batch times
  // --micro-batches, which --global-batch, where given, must be.
  const int64_t fileBatch = std::max<int64_t>(1, modelBatch);
  if (args.globalBatch > 0 && args.globalBatch != fileBatch * args.microBatches)
    return invalidArgument(
        "--global-batch ", args.globalBatch, ": ", args.modelPath,
        " is compiled as it is, and a step trains its batch of ", fileBatch,
        " times --micro-batches ", args.microBatches, " = ",
        fileBatch * args.microBatches,
        args.globalBatch % fileBatch == 0
            ? runtime::strCat(" (--micro-batches ",
                              args.globalBatch / fileBatch, " trains ",
                              args.globalBatch, ")")
            : std::string(" (export the model with another batch)"));

  auto imported = importForCompile(args.modelPath, args);
  if (!imported.isOk())
    return imported.status();
  mlir::ModuleOp module = *imported.value()->module;
  CompileOptions base;
  const bool cpu = cluster.device.isCpu();
  base.target = cpu ? "cpu" : "cuda";
  base.fuse = args.fuse && fusionUnavailable(base.target).empty();
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
    candidates =
        planByCompiling(module, base, ranks, figures, LayoutSearchMode::kIlp,
                        /*searchSchedules=*/args.schedule.empty());
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
  report.pricedBy = "compiled program";
  report.pricedByReason = "each plan compiled and its step simulated";
  if (opaqueParams > 0)
    report.notes.push_back(runtime::strCat(
        "not a transformer (", formatCount(opaqueParams),
        " parameters): planned from its compiled training step"));
  report.notes.push_back(
      std::string(cpu ? "CPU" : "CUDA") +
      " backend: each plan compiled and its program priced (memory: its "
      "static memory plan; time: its step simulated with the cluster's "
      "figures)" +
      std::string(best.search == "ilp"
                      ? "; tp layouts by the layout ILP (dtcc-shard-search-"
                        "layouts)"
                      : ""));
  if (best.tpIdle) {
    // The work of fewer ranks: say so, and what dividing it would cost.
    const int64_t tp = best.mesh.size("tp");
    std::string note =
        runtime::strCat(tpIdleText(best), ", so the plan does the work of ",
                        ranks / tp, " rank", ranks / tp == 1 ? "" : "s");
    auto divides = llvm::find_if(candidates, [](const CompiledCandidate &c) {
      return c.rejected.empty() && !c.tpIdle;
    });
    // (Searched: the plans that divide the work were all slower.)
    if (divides != candidates.end())
      note += runtime::strCat(
          "; the fastest plan that divides it (",
          planOf(*divides, batch, policy).summary(), ") is slower by ",
          formatPercent(divides->seconds / best.seconds - 1),
          ": the model is too small for ", ranks, " ranks to gain");
    report.notes.push_back(note);
  }
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
      r.pricedBy = "compiled program";
      if (c.rejected.empty()) {
        r.kind = Rejection::Kind::kSlower;
        r.slowerFraction = c.seconds / best.seconds - 1;
        r.reason =
            r.slowerFraction >= 0
                ? "slower by " + formatPercent(r.slowerFraction)
                : "faster by " + formatPercent(-r.slowerFraction) +
                      ", but the chosen plan is simpler and within " +
                      formatPercent(kSimplerPlanWithin) +
                      " (dtcc plan prefers the lower ZeRO stage, then "
                      "fewer pipeline stages and tensor-parallel ranks)";
      } else if (c.priced) {
        r.kind = Rejection::Kind::kOutOfMemory;
        r.excessBytes = double(c.peakBytes) - figures.memoryBytes;
        r.reason = c.rejected;
      } else {
        r.kind = Rejection::Kind::kInvalid;
        r.reason = c.rejected.substr(0, c.rejected.find('\n'));
      }
      if (c.tpIdle)
        r.reason += " (" + tpIdleText(c) + ")";
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
    if (args.explainCost)
      j.set("explainCost",
            explainCostToJson(best.priced->time,
                              "the compiled program's step simulated"));
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
        best.schedule.empty()
            ? std::string()
            : " --pipeline-schedule " + best.schedule +
                  (best.virtualStages > 1
                       ? " --virtual-stages " + std::to_string(best.virtualStages)
                       : std::string()),
        best.sequenceParallel ? " --sequence-parallel" : "");
    out.report +=
        formatProgramCost(best.priced->memory, &best.priced->time, cluster);
    if (args.explainCost)
      out.report += formatExplainCost(best.priced->time,
                                      best.priced->time.stepTime,
                                      "the compiled program's step simulated");
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
  out.recomputeLayers = plan.recomputeLayers;
  out.sequenceParallel = plan.sequenceParallel;
  out.offload = offloadName(plan.offload);
  out.gradReduce = plan.halfGradReduce ? "half" : "fp32";
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
    // The file's global batch is its plan's (dtcc plan --plan-out writes
    // both): one that differs was edited and says another plan.
    if (const Json *b = json.value().find("globalBatch");
        b && b->isNumber() && int64_t(b->asNumber()) != plan.value().globalBatch())
      return invalidArgument(
          args.planIn, ": globalBatch ", int64_t(b->asNumber()),
          " is not its plan's dp x micro-batches x micro-batch size = ",
          plan.value().dp, " x ", plan.value().microBatches, " x ",
          plan.value().microBatchSize, " = ", plan.value().globalBatch());
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
    // --ranks packs its ranks into nodes of the cluster's kind; with
    // --nodes they must fit in those.
    if (args.nodesGiven && args.ranks > cluster.numDevices())
      return invalidArgument("--ranks ", args.ranks, " exceed the ",
                             cluster.numDevices(), " devices of --nodes ",
                             cluster.nodes, " (", cluster.perNode(),
                             " a node)");
    auto c = clusterForRanks(cluster, args.ranks);
    if (!c.isOk())
      return c.status();
    cluster = c.value();
  }
  if (args.replan && !savedPlan)
    return invalidArgument("--replan searches for the model of a --plan-in "
                           "file, and none is given");
  DTypePolicy policy = dtype.value();
  if (args.replan && !args.dtypeGiven)
    policy = savedPlan->dtype;
  // The CPU backend stores attention scores (no fused kernel) and computes
  // in fp32: the models must count what it runs.
  const bool cpu = cluster.device.isCpu();
  // A saved plan is priced, or with --replan its model searched.
  const bool pricingSaved = savedPlan && !args.replan;
  // A file on CPU ranks, or one the formulas do not describe on GPUs (not
  // with --seq: a file is compiled as it is), is planned by compiling it
  // under every plan (compiledFilePlan), a search that takes
  // --micro-batches and --pipeline-schedule. Elsewhere they are refused,
  // not dropped: a GPU search chooses micro-batches (from --global-batch
  // and --micro-batch) and schedules itself.
  const bool compiledFile = !args.modelPath.empty() && !args.analytic &&
                            !pricingSaved &&
                            (cpu || (opaqueParams > 0 && !args.seq));
  if (!cpu && !compiledFile && args.microBatches != 1)
    return invalidArgument(
        "--micro-batches applies to CPU clusters; on ", cluster.name,
        " the search chooses the micro-batches from --global-batch and "
        "--micro-batch");
  if (!cpu && !compiledFile && !args.schedule.empty())
    return invalidArgument(
        "--pipeline-schedule applies to CPU clusters; on ", cluster.name,
        " the search chooses the schedule (a saved plan's schedule field "
        "sets one: --plan-out, edit, --plan-in)");
  if (cpu) {
    model.flashAttention = false;
    model.attentionKernel.clear();
    if (!args.dtypeGiven)
      policy = DTypePolicy::fp32();
  }
  // A plan file's model may name the fused attention kernel its run used;
  // every model below prices that kernel.
  if (Status s = useModelAttentionKernel(model, cluster); !s.isOk())
    return s;
  if (args.compiled && args.modelPath.empty())
    return invalidArgument("--compiled needs a model file to compile");
  // A zoo model on a GPU cluster is priced as dtcc compiles and runs it:
  // the CUDA target fuses each attention core without dropout on the
  // probabilities (dtcc-graph-fuse-attention; the zoo's --dropout puts one
  // there), so the analytic search (the compiled pricing's pre-filter)
  // stores and streams the scores only with dropout.
  if (!cpu && !args.zooFamily.empty() && !args.analytic)
    model.flashAttention = !model.dropout;

  // A saved plan's model says how its run executes attention (a fused
  // kernel or fused softmax, as the published runs of the validation
  // suite); a model compiled by dtcc runs the CUDA backend's unfused
  // attention. Compiled programs are priced so.
  const bool runsOwnKernels =
      savedModel && args.zooFamily.empty() && args.modelPath.empty();
  const AttentionKernels attention =
      !runsOwnKernels            ? AttentionKernels::kAsCompiled
      : model.flashAttention     ? AttentionKernels::kFlash
      : model.fusedSoftmax       ? AttentionKernels::kFusedSoftmax
                                 : AttentionKernels::kAsCompiled;
  const std::string attentionCoreText =
      std::string(attentionKernelsText(attention)) +
      (attention == AttentionKernels::kFlash
           ? " (the plan file's model has flashAttention" +
                 (model.attentionKernel.empty()
                      ? std::string()
                      : ", kernel " + model.attentionKernel) +
                 ")"
       : attention == AttentionKernels::kFusedSoftmax
           ? " (the plan file's model has fusedSoftmax)"
           : "");
  // A saved plan's model may say what its run did to each gradient before
  // summing it over dp (FSDP1's post-backward copies); priced so too.
  RunKernels run(attention, runsOwnKernels && model.gradientPasses == "fsdp1"
                                ? GradientPasses::kFsdp1
                                : GradientPasses::kAsCompiled);
  run.stridedViews = args.stridedViews;
  run.halfWeightCopies = args.halfWeightCopies;
  run.matmulEpilogues = args.matmulEpilogues;
  // A run whose saved model names its own attention kernel or gradient
  // passes used its framework's kernels (priced unfused); dtcc's own
  // program is fused where dtcc compile fuses it here.
  run.fuse = args.fuse && run.asCompiled() &&
             fusionUnavailable(cpu ? "cpu" : "cuda").empty();
  const std::string attentionText =
      attentionCoreText +
      (run.gradients == GradientPasses::kAsCompiled
           ? std::string()
           : std::string("; ") + gradientPassesText(run.gradients) +
                 " (the plan file's model has gradientPasses " +
                 model.gradientPasses + ")");
  if (args.halfGradReduce && (cpu || pricingSaved))
    return invalidArgument(
        "--grad-reduce half applies to the plans the search proposes on a "
        "GPU cluster (",
        cpu ? "a CPU cluster's communicators sum half values as f32"
            : "a saved plan says its own: its gradReduce field",
        ")");
  if (args.sensitivity && (cpu || pricingSaved || opaqueParams > 0))
    return invalidArgument(
        "--sensitivity re-runs the planner's search over GPU clusters, which "
        "this request does not use (",
        cpu ? "a CPU cluster's plans are what dtcc compile builds"
        : pricingSaved ? "a saved plan is evaluated, not searched"
                    : "the model has operators the planner does not describe",
        ")");
  std::optional<SensitivityResult> sensitivity;
  // --sensitivity on a GPU cluster: each compared plan's compiled layers,
  // by the plan's JSON, and whether the compiled programs decided.
  std::map<std::string, StatusOr<CompiledLayers>> sensitivityPrograms;
  // On a GPU cluster a model file is compiled itself, whole (the zoo
  // rebuilds a described model with a few layers); not when --seq replaces
  // its sequence length (a file is compiled as it is).
  GpuProgramSource programs;
  programs.progress = args.progress;
  std::unique_ptr<ImportedModel> programsFile;
  if (!args.modelPath.empty() && !cpu && !args.analytic && !args.seq &&
      opaqueParams <= 0) {
    auto imported = importForCompile(args.modelPath, args, /*weights=*/false,
                                     /*training=*/true);
    if (!imported.isOk())
      return imported.status();
    programsFile = std::move(imported.value());
    programs.modelPath = args.modelPath;
    programs.module = *programsFile->module;
    programs.frozen = args.frozen;
    programs.batch = modelBatch;
  }
  const std::string fileGap =
      !args.modelPath.empty() && args.seq
          ? "--seq replaces the file's sequence length, and a file is "
            "compiled as it is"
          : "";
  bool sensitivityCompiled = false;
  if (compiledFile)
    return compiledFilePlan(args, cluster, model, source, opaqueParams,
                            modelBatch, policy);
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
  // What the compiler cannot build (compilerRefuses), for the searches.
  mlir::MLIRContext shardContext;
  shardContext.loadDialect<shard::ShardDialect>();
  // The GPU search's options, to search again (kMemoryRounds).
  std::optional<SearchOptions> searched;

  if (cpu && !pricingSaved) {
    // What `dtcc compile` builds: dp x tp, ZeRO, the model's batch split
    // over dp.
    CompilerPlanOptions compiler;
    compiler.batch = args.globalBatch ? args.globalBatch : modelBatch;
    compiler.dtype = policy;
    compiler.microBatches = args.microBatches;
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
      for (int64_t *pin :
           {&fixed.fixDp, &fixed.fixPp, &fixed.fixTp, &fixed.fixCp})
        *pin = std::max<int64_t>(1, *pin);
      if (args.ranks == 0) {
        auto c = clusterForRanks(cluster, fixed.fixDp * fixed.fixPp *
                                              fixed.fixTp * fixed.fixCp);
        if (!c.isOk())
          return c.status();
        cluster = c.value();
      } else if (Status s = checkMeshRanks(args.mesh, cluster,
                                           /*leftOutAreOne=*/true);
                 !s.isOk()) {
        return s;
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
        "micro-batch split over dp), in fp32 with fused attention");
  } else if (pricingSaved && args.mesh.empty() && args.zero < 0) {
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
    const int64_t globalBatch =
        args.globalBatch > 0 ? args.globalBatch
        : args.replan        ? savedPlan->globalBatch()
                             : 0;
    if (globalBatch < 1)
      return invalidArgument("--global-batch is required");
    SearchOptions options;
    options.globalBatch = globalBatch;
    options.dtype = policy;
    options.budgetSeconds = args.budgetSeconds;
    options.allowOffload = args.offload;
    options.halfGradReduce =
        args.halfGradReduce || (args.replan && savedPlan->halfGradReduce);
    options.alternativesPerKind = args.alternatives;
    options.fixZero = args.zero;
    options.fixMicroBatchSize = args.microBatch;
    if (Status s = pinMesh(args.mesh, options); !s.isOk())
      return s;
    if (Status s = checkMeshRanks(args.mesh, cluster,
                                  /*leftOutAreOne=*/false);
        !s.isOk())
      return s;
    bool pinned = options.fixDp || options.fixPp || options.fixTp ||
                  options.fixZero >= 0;
    // The search chooses only plans dtcc compile builds; the others are
    // rejected alternatives with the compiler's reason.
    options.buildable = [&shardContext, &model](const Plan &plan) {
      if (std::optional<std::string> why = zeroSplitProblem(plan, model))
        return why;
      return compilerRefuses(&shardContext, plan);
    };
    StatusOr<SearchResult> result = SearchResult();
    if (args.sensitivity) {
      // The plans are compared under the cost model that chooses them: on
      // a GPU cluster each plan's compiled program (compiled once, its
      // programs simulated again in each world), else the analytic model.
      SensitivityPricing pricing;
      if (!args.analytic && fileGap.empty()) {
        pricing.model =
            "its compiled program (" +
            (programs.isFile()
                 ? baseName(programs.modelPath) +
                       " compiled whole for cuda and simulated"
                 : llvm::formatv("{0} and {1} layers compiled for cuda "
                                 "and simulated (with pipeline stages "
                                 "{2} and {3} per stage chunk: the head's "
                                 "cost in layers, rounded up, and one "
                                 "more), scaled "
                                 "to {4} layers",
                                 kLayersCompiled[0], kLayersCompiled[1],
                                 chunkLayersCompiled(model).first,
                                 chunkLayersCompiled(model).second,
                                 model.layers)
                       .str()) +
            "; compiled once, simulated in each world)";
        // As without --sensitivity: the analytic search's closest slower
        // plans are compiled and priced too.
        pricing.extraWithin = kComparedWithin;
        pricing.extraSlower = kSensitivityCompared;
        pricing.price = [&](const Plan &plan,
                            const ClusterSpec &c) -> StatusOr<Candidate> {
          if (std::string gap = compiledPricingGap(
                  plan, model, kMaxUnrolledSearched, programs);
              !gap.empty())
            return invalidArgument(gap);
          std::string key = planToJson(plan).dump(-1);
          auto it = sensitivityPrograms.find(key);
          if (it == sensitivityPrograms.end())
            it = sensitivityPrograms
                     .emplace(key, compileGpuLayers(model, plan, cluster,
                                                    run, programs))
                     .first;
          if (!it->second.isOk())
            return it->second.status();
          auto p = priceCompiledLayers(it->second.value(), model, plan, c,
                                       /*simulate=*/true);
          if (!p.isOk())
            return p.status();
          return p.value().candidate;
        };
      }
      auto analyzed = analyzeSensitivity(model, cluster, options, 0.02, 0.2,
                                         pricing);
      if (analyzed.isOk() && pricing.price && analyzed.value().search.best &&
          analyzed.value().compared == 0) {
        // No proposed plan compiles: the analytic model compares them, as
        // it then prices the chosen one.
        std::string why =
            compiledPricingGap(analyzed.value().search.best->plan, model,
                               kMaxUnrolledSearched, programs);
        analyzed = analyzeSensitivity(model, cluster, options);
        if (analyzed.isOk())
          analyzed.value().pricedBy =
              "the analytic model (no proposed plan was priced from its "
              "compiled program" +
              (why.empty() ? std::string() : ": " + why) + ")";
      } else if (analyzed.isOk() && pricing.price) {
        sensitivityCompiled = true;
      }
      if (!analyzed.isOk())
        return analyzed.status();
      sensitivity = std::move(analyzed.value());
      result = sensitivity->search;
    } else {
      result = searchPlans(model, cluster, options);
      searched = options;
    }
    if (!result.isOk())
      return result.status();
    report.globalBatch = globalBatch;
    report.search = result.value();
    report.chosen = result.value().best;
    if (sensitivityCompiled)
      report.chosen = sensitivity->chosen;
    if (sensitivity && sensitivity->preferenceChanged) {
      report.chosen = sensitivity->chosen;
      report.notes.push_back(
          "--sensitivity: chosen over the fastest as modelled, within " +
          formatPercent(sensitivity->within) +
          " of it and losing less when the figures are worse (see "
          "Sensitivity below)");
    }
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
  // GPU clusters: the plan the analytic model chose (or was given) is
  // compiled and priced from its program, where the compiler builds it.
  std::optional<CompiledPrice> compiledPrice;
  if (sensitivityCompiled && report.chosen) {
    // --sensitivity compiled and priced every compared plan already.
    auto it = sensitivityPrograms.find(planToJson(report.chosen->plan).dump(-1));
    if (it == sensitivityPrograms.end() || !it->second.isOk())
      return runtime::internalError(
          "--sensitivity chose a plan it did not compile");
    auto priced = priceCompiledLayers(it->second.value(), model,
                                      report.chosen->plan, cluster,
                                      /*simulate=*/false);
    if (!priced.isOk())
      return priced.status();
    compiledPrice = std::move(priced.value());
    report.chosen = compiledPrice->candidate;
    report.pricedBy = "compiled program";
    report.pricedByReason = llvm::formatv(
        "{0}; attention {1}; {2} plans compared by their programs in {3} "
        "worlds (--sensitivity)",
        compiledLayersText(model, report.chosen->plan, programs),
        attentionText,
        sensitivity->compared, sensitivity->worlds.size() + 1);
  } else if (!cpu && report.chosen) {
    std::string gap = args.analytic ? "--analytic" : fileGap;
    if (gap.empty()) {
      ProgramChoice choice = chooseByPrograms(
          model, report.chosen->plan, report.chosen->time.stepTime,
          report.search && !pricingSaved ? &report.search->slowerPlans
                                         : nullptr,
          cluster, run, programs,
          report.origin == "search" ? kMaxUnrolledSearched
                                    : kMaxUnrolledLayers);
      std::optional<SearchResult> again;
      std::string tightened;
      if (searched && report.origin == "search")
        again = searchUntilAProgramFits(
            choice, model, cluster, run, programs,
            [&](const ClusterSpec &tighter) {
              return searchPlans(model, tighter, *searched);
            },
            tightened);
      if (again) {
        // The alternatives are the new search's.
        for (Rejection &r : again->alternatives)
          if (r.kind == Rejection::Kind::kOutOfMemory)
            r.reason += " (with the capacity scaled)";
        report.search = std::move(*again);
      }
      if (!tightened.empty())
        report.notes.push_back(tightened);
      gap = choice.gap;
      if (choice.price) {
        compiledPrice = std::move(choice.price);
        report.chosen = compiledPrice->candidate;
        report.pricedBy = "compiled program";
        report.pricedByReason = llvm::formatv(
            "{0}; attention {1}; {2:f2} s",
            compiledLayersText(model, report.chosen->plan, programs),
            attentionText, compiledPrice->seconds);
        if (!choice.compared.empty()) {
          report.notes.push_back(choice.comparedNote());
          if (report.search)
            reviseAlternatives(*report.search, *report.chosen, choice,
                               cluster.device.memoryBytes.value,
                               args.alternatives);
        }
      }
    }
    if (!compiledPrice)
      report.pricedByReason = gap;
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
    auto c = compiledMemory(args, report.chosen->plan);
    if (!c.isOk())
      return c.status();
    compiled = c.value();
  }
  const std::string explainHow =
      "the compiled program's step simulated; layers compiled once, each "
      "layer instruction counted for every layer";
  if (args.explainCost && !compiledPrice)
    return invalidArgument(
        "--explain-cost lists the instructions of a compiled program, but "
        "this plan was priced by the analytic model (",
        report.pricedByReason.empty() ? "no plan" : report.pricedByReason, ")");
  if (args.json) {
    Json j = reportToJson(report);
    if (compiled)
      j.set("compiled", compiledToJson(*compiled, *report.chosen));
    if (compiledPrice)
      j.set("compiledProgram",
            programCostToJson(compiledPrice->memory, &compiledPrice->time));
    if (args.explainCost)
      j.set("explainCost", explainCostToJson(compiledPrice->time, explainHow));
    if (sensitivity)
      j.set("sensitivity", sensitivityToJson(*sensitivity));
    out.report += (j.dump(2) + "\n");
  } else {
    out.report += formatReport(report);
    if (compiled)
      out.report += formatCompiled(*compiled, *report.chosen);
    if (args.explainCost)
      out.report += formatExplainCost(compiledPrice->time,
                                      compiledPrice->time.stepTime, explainHow);
    if (sensitivity)
      out.report += formatSensitivity(*sensitivity);
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
                     const TrainOptions &train, const std::string &modelPath) {
  CompilePlanChoice choice;
  DescribedModel described = describeModel(module, "model", train.frozen);
  // Not a transformer the planner describes, or CPU ranks: the caller
  // compiles every plan and prices its program (planByCompiling), which
  // also places pipeline stages and tp layouts.
  if (!described.isTransformer() || cluster.device.isCpu()) {
    choice.compileCandidates = true;
    return choice;
  }
  // GPU ranks: the planner's search over what the compiler builds is the
  // pre-filter (the analytic model; attention fused, as the CUDA target
  // compiles it), in the compile's precision; its choice and its closest
  // slower plans are then compiled for cuda and priced from their
  // programs, which decide (chooseByPrograms, as dtcc plan does).
  ModelDesc m = described.model;
  auto dtype = dtypePolicy(train.dtype);
  if (!dtype.isOk())
    return dtype.status();
  CompilerPlanOptions options;
  options.batch = m.graph.batch;
  options.dtype = dtype.value();
  options.microBatches = std::max<int64_t>(1, train.plan.microBatches);
  // Recomputation other than none was asked for; otherwise the search
  // chooses it with the rest.
  if (train.plan.recompute == "full") {
    options.recompute = Recompute::kFull;
    options.recomputeLayers = train.plan.recomputeLayers;
  } else if (train.plan.recompute == "selective")
    options.recompute = Recompute::kSelective;
  options.unbuilt = [ctx = module.getContext()](const Plan &plan) {
    return compilerRefuses(ctx, plan);
  };
  auto chosen = chooseCompilerPlan(m, cluster, options);
  if (!chosen.isOk())
    return chosen.status();
  GpuProgramSource programs;
  programs.modelPath = modelPath.empty() ? std::string("the model") : modelPath;
  programs.module = module;
  programs.frozen = train.frozen;
  programs.batch = m.graph.batch;
  ProgramChoice byPrograms = chooseByPrograms(
      m, chosen.value().chosen.plan, chosen.value().chosen.time.stepTime,
      &chosen.value().slower, cluster,
      AttentionKernels::kAsCompiled, programs, kMaxUnrolledSearched);
  std::string tightened;
  searchUntilAProgramFits(
      byPrograms, m, cluster, AttentionKernels::kAsCompiled, programs,
      [&](const ClusterSpec &tighter) -> StatusOr<SearchResult> {
        auto again = chooseCompilerPlan(m, tighter, options);
        if (!again.isOk())
          return again.status();
        SearchResult r;
        r.best = again.value().chosen;
        r.slowerPlans = again.value().slower;
        r.alternatives = again.value().rejected;
        return r;
      },
      tightened);
  if (!byPrograms.price) {
    choice.plan = compilerPlanOf(chosen.value().chosen.plan);
    choice.summary = "plan auto: " + chosen.value().summary + " on " +
                     cluster.name + "; priced by the analytic model (" +
                     byPrograms.gap + ")";
    return choice;
  }
  const CompiledPrice &price = *byPrograms.price;
  const Candidate &best = price.candidate;
  choice.plan = compilerPlanOf(best.plan);
  choice.summary = llvm::formatv(
      "plan auto: {0} (--mesh {7} --zero {8}): {1} per step predicted, {2} "
      "per rank{3} on {4}, priced by its compiled program ({5}); the "
      "analytic search proposed {6}",
      best.plan.summary(), formatSeconds(best.time.stepTime),
      formatBytes(best.memory.total()),
      best.fits ? "" : " (does not fit by its program)", cluster.name,
      compiledLayersText(m, best.plan, programs),
      chosen.value().summary, choice.plan.mesh.str(), choice.plan.zero);
  if (!tightened.empty())
    choice.summary += "\n  note: " + tightened;
  if (!byPrograms.compared.empty())
    choice.summary += "\n  note: " + byPrograms.comparedNote();
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
        c.mesh.str() + (c.schedule.empty() ? "" : " " + c.scheduleLabel()),
        c.zero,
        !c.search.empty()       ? c.search
        : c.sequenceParallel    ? "megatron+sp"
        : c.mesh.size("tp") > 1 ? "megatron"
                                : "",
        c.rejected.empty()
            ? llvm::formatv("{0,8:f2} ms/step (compute {1:f2} GFLOP, {2} "
                            "collectives, {3:f1} KiB sent), {4:f2} MiB/rank",
                            c.seconds * 1e3, c.flops / 1e9, c.collectives,
                            c.commBytes / 1024.0, c.peakBytes / 1048576.0)
                      .str() +
                  (c.tpIdle ? ", tp splits nothing" : "")
            : "rejected: " + c.rejected);
  return out;
}

static std::string formatChosenCandidate(const CompiledCandidate &chosen) {
  std::string out;
  llvm::raw_string_ostream os(out);
  os << "plan auto: " << chosen.mesh.str() << ", zero " << chosen.zero;
  if (!chosen.schedule.empty())
    os << ", " << chosen.scheduleLabel();
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
  if (chosen.tpIdle)
    os << "; " << tpIdleText(chosen)
       << " (the model is too small to gain from dividing it)";
  os << "\n";
  return out;
}

StatusOr<CompilePlan> planForCompile(mlir::ModuleOp module,
                                     CompileOptions &options,
                                     const ClusterSpec &cluster, int64_t ranks,
                                     const std::string &search,
                                     const std::string &modelPath) {
  CompilePlan out;
  auto choice =
      choosePlanForCompile(module, cluster, options.train, modelPath);
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
  if (!best.schedule.empty()) {
    options.train.plan.schedule = best.schedule;
    options.train.plan.virtualStages = best.virtualStages;
  }
  out.messages += formatChosenCandidate(best);
  out.chosen = true;
  if (best.lowered)
    out.lowered = std::move(*best.lowered);
  return out;
}

} // namespace dtcc
