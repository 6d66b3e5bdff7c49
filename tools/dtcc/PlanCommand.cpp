//===- PlanCommand.cpp - `dtcc plan`: choose and explain a plan -----------===//
//
// Reads a model (an ONNX file written by `dtcc zoo`, any other ONNX file, a
// zoo spec on the command line, or a saved plan), a cluster (a preset or a
// file) and a batch, then searches or evaluates a plan with the planner
// library and prints the report as text or JSON, optionally with a Chrome
// trace of one predicted step.
//
//===----------------------------------------------------------------------===//

#include "tools/dtcc/Commands.h"

#include "compiler/Driver.h"
#include "compiler/PlanByCompiling.h"
#include "dialects/Graph/IR/GraphOps.h"
#include "frontends/zoo/Zoo.h"
#include "planner/AutoPlan.h"
#include "planner/Report.h"
#include "planner/Units.h"
#include "runtime/base/Format.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

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

const char *kUsage = R"(usage: dtcc plan [model.onnx] [options]

Chooses (or evaluates) a distributed-training plan and explains it: mesh,
ZeRO stage, micro-batching, schedule, recomputation, per-device memory
against capacity, step time, throughput, communication and the best
rejected alternatives.

model (one of):
  model.onnx                 a model; `dtcc zoo` models carry their sizes
  --zoo gpt|llama            a zoo model without a file, sized by:
    --preset NAME            gpt2, gpt2-medium, gpt2-large, gpt2-xl,
                             tinyllama, llama3-8b, llama3-70b, llama3-405b
    --layers N --hidden N --heads N --kv-heads N --ffn N --vocab N --seq N
    --tied-embeddings
  --plan-in FILE             a saved plan (its model and cluster too)

cluster:
  --cluster NAME|FILE        dgx-a100-80g, dgx-h100 (default), h200,
                             cpu-local, or a JSON/YAML cluster file
                             (`dtcc calibrate -o FILE` measures this machine)
  --nodes N                  nodes of the cluster (default 1)
  --ranks N                  plan for N devices (ranks) of the cluster's kind

  On a CPU cluster (cpu-local, calibrated files) with a model file, every
  plan dtcc compile builds (dp x pp x tp, ZeRO 0..3, 1F1B and GPipe, tp
  layouts by Megatron's rule or the layout ILP) is compiled and its
  program priced: memory = the program's static memory plan, tensor by
  tensor; time = the program simulated instruction by instruction with
  the cluster's figures. A step trains the model's batch times
  --micro-batches.

training:
  --global-batch N           sequences per step (required unless --plan-in)
  --seq N                    sequence length (overrides the model's)
  --dtype bf16|fp16|fp32     bf16/fp16 with fp32 master weights, or fp32
                             everywhere (default bf16)

plan:
  --search-budget T          search time budget, e.g. 10s, 500ms (default 10s)
  --mesh dp=A,pp=B,tp=C      evaluate this mesh (any part may be left out)
  --zero N                   ZeRO stage 0..3
  --micro-batch N            micro-batch size
  --micro-batches M          CPU clusters: micro-batches per step (default 1)
  --pipeline-schedule S      CPU clusters: 1f1b or gpipe (with --mesh pp=..)
  --analytic                 CPU clusters: the transformer formula model
                             instead of compiling (as for GPU clusters)
  --no-offload               do not consider host offload
  --alternatives N           rejected alternatives shown per kind (default 5)

output:
  --compiled                 also compile the model (ONNX) with the plan
                             and report each category of its static memory
                             plan (rank 0) beside the memory model
  --json                     the report as JSON (docs/planner.md)
  --trace FILE               a Chrome trace of one predicted step
  --plan-out FILE            save the plan for --plan-in
  --tokens N                 whole-run cost for N tokens (e.g. 2T)
  --price-per-gpu-hour X     and its price
)";

struct Args {
  std::string modelPath;
  std::string zooFamily, zooPreset;
  std::map<std::string, int64_t> zooSizes; ///< --layers, --hidden, ...
  bool tiedEmbeddings = false;
  std::string cluster = "dgx-h100";
  int64_t nodes = 1;
  int64_t globalBatch = 0;
  int64_t seq = 0;
  std::string dtype = "bf16";
  double budget = 10;
  runtime::MeshShape mesh; ///< --mesh, parsed; empty when not given
  int zero = -1;
  int64_t microBatch = 0;
  bool offload = true;
  int alternatives = 5;
  bool json = false;
  std::string tracePath, planOut, planIn;
  double tokens = 0, price = 0;
  bool clusterGiven = false;
  bool dtypeGiven = false;
  int64_t ranks = 0;
  bool compiled = false;
  /// CPU clusters: micro-batches per step and the pipeline schedule of the
  /// compiled plans; --analytic uses the formula model instead.
  int64_t microBatches = 1;
  std::string schedule;
  bool analytic = false;
};

Status parseInteger(const std::string &flag, const std::string &text,
                    int64_t &out) {
  char *end = nullptr;
  long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0')
    return invalidArgument(flag, ": expected an integer, got '", text, "'");
  out = value;
  return Status::ok();
}

Status parseArgs(int argc, char **argv, Args &args, bool &help) {
  const char *const kSizes[] = {"layers", "hidden", "heads", "kv-heads",
                                "ffn", "ffn-hidden", "vocab"};
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    bool hasValue = false;
    // --flag=value and --flag value.
    if (arg.rfind("--", 0) == 0) {
      size_t eq = arg.find('=');
      if (eq != std::string::npos) {
        value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
        hasValue = true;
      }
    }
    auto next = [&]() -> StatusOr<std::string> {
      if (hasValue)
        return value;
      if (i + 1 >= argc)
        return invalidArgument(arg, ": expected a value");
      return std::string(argv[++i]);
    };
    auto integer = [&](int64_t &out) -> Status {
      auto text = next();
      if (!text.isOk())
        return text.status();
      return parseInteger(arg, text.value(), out);
    };
    auto text = [&](std::string &out) -> Status {
      auto t = next();
      if (!t.isOk())
        return t.status();
      out = t.value();
      return Status::ok();
    };
    if (arg == "-h" || arg == "--help") {
      help = true;
      return Status::ok();
    }
    bool isSize = false;
    for (const char *size : kSizes)
      if (arg == std::string("--") + size) {
        int64_t n = 0;
        DTCC_RETURN_IF_ERROR(integer(n));
        args.zooSizes[arg.substr(2) == "ffn-hidden" ? "ffn" : arg.substr(2)] =
            n;
        isSize = true;
      }
    if (isSize)
      continue;
    if (arg == "--zoo") {
      DTCC_RETURN_IF_ERROR(text(args.zooFamily));
    } else if (arg == "--preset") {
      DTCC_RETURN_IF_ERROR(text(args.zooPreset));
    } else if (arg == "--tied-embeddings") {
      args.tiedEmbeddings = true;
    } else if (arg == "--seq") {
      DTCC_RETURN_IF_ERROR(integer(args.seq));
    } else if (arg == "--cluster") {
      DTCC_RETURN_IF_ERROR(text(args.cluster));
      args.clusterGiven = true;
    } else if (arg == "--nodes") {
      DTCC_RETURN_IF_ERROR(integer(args.nodes));
      args.clusterGiven = true;
    } else if (arg == "--global-batch") {
      DTCC_RETURN_IF_ERROR(integer(args.globalBatch));
    } else if (arg == "--dtype") {
      DTCC_RETURN_IF_ERROR(text(args.dtype));
      args.dtypeGiven = true;
    } else if (arg == "--ranks") {
      DTCC_RETURN_IF_ERROR(integer(args.ranks));
      if (args.ranks < 1)
        return invalidArgument("--ranks: expected at least 1, got ",
                               args.ranks);
    } else if (arg == "--compiled") {
      args.compiled = true;
    } else if (arg == "--search-budget") {
      std::string t;
      DTCC_RETURN_IF_ERROR(text(t));
      auto seconds = parseDuration(t);
      if (!seconds.isOk())
        return seconds.status().withContext("--search-budget");
      args.budget = seconds.value();
    } else if (arg == "--mesh") {
      std::string spec;
      DTCC_RETURN_IF_ERROR(text(spec));
      auto mesh = runtime::MeshShape::parse(spec);
      if (!mesh.isOk())
        return mesh.status().withContext("--mesh");
      args.mesh = std::move(mesh.value());
    } else if (arg == "--zero") {
      int64_t z = 0;
      DTCC_RETURN_IF_ERROR(integer(z));
      if (z < 0 || z > 3)
        return invalidArgument("--zero: expected 0..3, got ", z);
      args.zero = int(z);
    } else if (arg == "--micro-batch") {
      DTCC_RETURN_IF_ERROR(integer(args.microBatch));
    } else if (arg == "--micro-batches") {
      DTCC_RETURN_IF_ERROR(integer(args.microBatches));
      if (args.microBatches < 1)
        return invalidArgument("--micro-batches: expected at least 1, got ",
                               args.microBatches);
    } else if (arg == "--pipeline-schedule") {
      DTCC_RETURN_IF_ERROR(text(args.schedule));
      if (args.schedule != "1f1b" && args.schedule != "gpipe")
        return invalidArgument("--pipeline-schedule: expected 1f1b or gpipe, "
                               "got '",
                               args.schedule, "'");
    } else if (arg == "--analytic") {
      args.analytic = true;
    } else if (arg == "--no-offload") {
      args.offload = false;
    } else if (arg == "--alternatives") {
      int64_t n = 0;
      DTCC_RETURN_IF_ERROR(integer(n));
      args.alternatives = int(n);
    } else if (arg == "--json") {
      args.json = true;
    } else if (arg == "--trace") {
      DTCC_RETURN_IF_ERROR(text(args.tracePath));
    } else if (arg == "--plan-out") {
      DTCC_RETURN_IF_ERROR(text(args.planOut));
    } else if (arg == "--plan-in") {
      DTCC_RETURN_IF_ERROR(text(args.planIn));
    } else if (arg == "--tokens") {
      std::string t;
      DTCC_RETURN_IF_ERROR(text(t));
      auto n = parseCount(t);
      if (!n.isOk())
        return n.status().withContext("--tokens");
      args.tokens = n.value();
    } else if (arg == "--price-per-gpu-hour") {
      std::string t;
      DTCC_RETURN_IF_ERROR(text(t));
      char *end = nullptr;
      args.price = std::strtod(t.c_str(), &end);
      if (t.empty() || *end != '\0' || args.price < 0)
        return invalidArgument("--price-per-gpu-hour: expected a number, got '",
                               t, "'");
    } else if (arg.rfind("-", 0) == 0) {
      return invalidArgument("unknown option '", arg,
                             "' (dtcc plan --help lists them)");
    } else if (args.modelPath.empty()) {
      args.modelPath = arg;
    } else {
      return invalidArgument("more than one model given: '", args.modelPath,
                             "' and '", arg, "'");
    }
  }
  return Status::ok();
}

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

StatusOr<ModelDesc> zooModel(const Args &args) {
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

/// The zoo options written in a model's "dtcc.zoo" metadata ("llama
/// layers=2 hidden=64 ..."), or nullopt.
std::optional<zoo::ZooOptions> parseZooMetadata(const std::string &text) {
  std::istringstream in(text);
  std::string familyName;
  in >> familyName;
  auto family = zoo::parseFamily(familyName);
  if (!family)
    return std::nullopt;
  zoo::ZooOptions o;
  o.family = *family;
  std::string item;
  while (in >> item) {
    size_t eq = item.find('=');
    if (eq == std::string::npos)
      continue;
    std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    int64_t n = std::strtoll(value.c_str(), nullptr, 10);
    if (key == "layers")
      o.layers = n;
    else if (key == "hidden")
      o.hidden = n;
    else if (key == "heads")
      o.heads = n;
    else if (key == "kv-heads")
      o.kvHeads = n;
    else if (key == "ffn-hidden")
      o.ffnHidden = n;
    else if (key == "vocab")
      o.vocab = n;
    else if (key == "seq")
      o.seq = n;
    else if (key == "batch")
      o.batch = n;
    else if (key == "tied-embeddings")
      o.tiedEmbeddings = n != 0;
  }
  return o;
}

/// A model from an ONNX file: its zoo metadata, or else only its parameter
/// count (`opaqueParams`).
StatusOr<ModelDesc> onnxModel(const Args &args, std::string &source,
                              double &opaqueParams, int64_t *batch = nullptr) {
  std::ifstream in(args.modelPath, std::ios::binary);
  if (!in)
    return runtime::notFound("cannot open '", args.modelPath, "'");
  onnx::ModelProto model;
  if (!model.ParseFromIstream(&in))
    return invalidArgument("'", args.modelPath, "' is not an ONNX model");
  for (const auto &entry : model.metadata_props()) {
    if (entry.key() != "dtcc.zoo")
      continue;
    auto options = parseZooMetadata(entry.value());
    if (!options || options->family == zoo::Family::Mlp)
      break;
    if (args.seq)
      options->seq = args.seq;
    if (std::string e = zoo::validate(*options); !e.empty())
      return invalidArgument(args.modelPath, ": dtcc.zoo metadata: ", e);
    source = "dtcc.zoo metadata of " + args.modelPath;
    if (batch)
      *batch = options->batch;
    return fromZoo(*options, baseName(args.modelPath));
  }
  // Not a zoo transformer: count the parameters from the initializers.
  double params = 0;
  for (const onnx::TensorProto &t : model.graph().initializer()) {
    double n = 1;
    for (int64_t d : t.dims())
      n *= double(d);
    params += n;
  }
  if (params <= 0)
    return invalidArgument("'", args.modelPath,
                           "' has neither dtcc.zoo metadata nor initializers: "
                           "no parameters to plan for");
  opaqueParams = params;
  source = "initializers of " + args.modelPath + " (no dtcc.zoo metadata)";
  ModelDesc opaque;
  opaque.name = baseName(args.modelPath);
  return opaque;
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

StatusOr<ClusterSpec> loadCluster(const Args &args) {
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
std::string opaqueReport(const Args &args, const ClusterSpec &cluster,
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

/// Imports `path` (ONNX or .mlir) for training.
StatusOr<std::unique_ptr<ImportedModel>>
importForCompile(const std::string &path) {
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
  options.training = true;
  auto module = loadModel(path, m->context, options);
  if (mlir::failed(module))
    return invalidArgument("cannot import '", path, "'", m->diagnostics);
  m->module = std::move(*module);
  return m;
}

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
                                        const Plan &plan) {
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
  options.train.mesh = out.mesh;
  options.train.zero = plan.zeroStage;
  options.train.microBatches = plan.microBatches;
  options.train.pipelineSchedule =
      plan.schedule == Schedule::kGPipe ? "gpipe" : "1f1b";
  options.train.recompute =
      plan.recompute == Recompute::kFull ? "full" : "none";
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
  plan.dtype = policy;
  return plan;
}

/// `dtcc plan model.onnx --cluster <cpu>`: the plans dtcc compile builds,
/// each compiled and priced (planByCompiling), or the one --mesh/--zero
/// give.
int compiledCpuPlan(const Args &args, ClusterSpec cluster, ModelDesc model,
                    const std::string &source, double opaqueParams,
                    int64_t modelBatch, const DTypePolicy &policy) {
  auto fail = [](const Status &status) {
    std::fprintf(stderr, "dtcc plan: error: %s\n", status.message().c_str());
    return 1;
  };
  const bool given = !args.mesh.empty() || args.zero >= 0;
  // The given mesh sizes the cluster when --ranks does not.
  if (given && args.ranks == 0 && !args.mesh.empty()) {
    auto c = clusterForRanks(cluster, args.mesh.ranks());
    if (!c.isOk())
      return fail(c.status());
    cluster = c.value();
  }
  const int64_t ranks = cluster.numDevices();

  auto imported = importForCompile(args.modelPath);
  if (!imported.isOk())
    return fail(imported.status());
  mlir::ModuleOp module = *imported.value()->module;
  CompileOptions base;
  base.train.enabled = true;
  base.train.microBatches = args.microBatches;
  base.train.pipelineSchedule = args.schedule.empty() ? "1f1b" : args.schedule;
  base.train.dtype = dtypeName(policy.compute);
  DeviceFigures figures = deviceFigures(cluster);

  auto started = std::chrono::steady_clock::now();
  std::vector<CompiledCandidate> candidates;
  if (given) {
    CompileOptions options = base;
    // The mesh as given (its axis order is the ranks'); --zero alone
    // spreads dp over the ranks.
    options.train.mesh = args.mesh.empty()
                             ? runtime::MeshShape::megatron(ranks, 1, 1)
                             : args.mesh;
    options.train.zero = std::max(0, args.zero);
    candidates.push_back(compileCandidate(module, options, figures));
    if (!candidates.front().priced)
      return fail(invalidArgument("plan ", options.train.mesh.str(), " ZeRO-",
                                  options.train.zero, " does not compile: ",
                                  candidates.front().rejected));
  } else {
    candidates = planByCompiling(module, base, ranks, figures);
  }
  double seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - started)
                       .count();
  if (candidates.empty() || !candidates.front().priced)
    return fail(invalidArgument(
        "no plan of ", ranks, " ranks compiles",
        candidates.empty() ? std::string()
                           : ": " + candidates.front().rejected));

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
        "not a zoo transformer (", formatCount(opaqueParams),
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
      return fail(traced.status());
    Json trace = traceToJson(traced.value().timeline,
                             model.name + ": " + chosen.plan.summary() +
                                 " (compiled program, simulated)");
    if (Status s = writeFile(args.tracePath, trace.dump(-1) + "\n"); !s.isOk())
      return fail(s);
  }
  if (!args.planOut.empty()) {
    Json saved = Json::object();
    saved.set("schemaVersion", kReportSchemaVersion);
    saved.set("plan", planToJson(chosen.plan));
    saved.set("model", modelToJson(model));
    saved.set("cluster", clusterToJson(cluster));
    saved.set("globalBatch", report.globalBatch);
    if (Status s = writeFile(args.planOut, saved.dump(2) + "\n"); !s.isOk())
      return fail(s);
  }
  if (args.json) {
    Json j = reportToJson(report);
    Json compiled = programCostToJson(best.priced->memory, &best.priced->time);
    compiled.set("mesh", best.mesh.str());
    compiled.set("zeroStage", best.zero);
    compiled.set("layoutSearch", best.search);
    Json layouts = Json::array();
    for (const std::string &l : best.layouts)
      layouts.push(l);
    compiled.set("layouts", layouts);
    j.set("compiledProgram", compiled);
    std::fputs((j.dump(2) + "\n").c_str(), stdout);
  } else {
    std::fputs(formatReport(report).c_str(), stdout);
    std::printf("\nThe chosen plan compiled: dtcc compile %s --train --mesh "
                "%s --zero %d%s%s\n\n",
                args.modelPath.c_str(), best.mesh.str().c_str(), best.zero,
                args.microBatches > 1
                    ? (" --micro-batches " + std::to_string(args.microBatches))
                          .c_str()
                    : "",
                best.schedule.empty()
                    ? ""
                    : (" --pipeline-schedule " + best.schedule).c_str());
    std::fputs(formatProgramCost(best.priced->memory, &best.priced->time,
                                 cluster)
                   .c_str(),
               stdout);
  }
  return chosen.fits ? 0 : 2;
}

} // namespace

int runPlanCommand(int argc, char **argv) {
  Args args;
  bool help = false;
  auto fail = [](const Status &status) {
    std::fprintf(stderr, "dtcc plan: error: %s\n", status.message().c_str());
    return 1;
  };
  if (Status s = parseArgs(argc, argv, args, help); !s.isOk())
    return fail(s);
  if (help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  auto dtype = dtypePolicy(args.dtype);
  if (!dtype.isOk())
    return fail(dtype.status());

  // A saved plan brings its model, cluster and batch.
  std::optional<Plan> savedPlan;
  std::optional<ModelDesc> savedModel;
  std::optional<ClusterSpec> savedCluster;
  if (!args.planIn.empty()) {
    auto json = readJsonFile(args.planIn);
    if (!json.isOk())
      return fail(json.status());
    const Json *planJson = json.value().find("plan");
    auto plan = planFromJson(planJson ? *planJson : json.value());
    if (!plan.isOk())
      return fail(plan.status().withContext(args.planIn));
    savedPlan = plan.value();
    if (const Json *m = json.value().find("model")) {
      auto model = modelFromJson(*m);
      if (!model.isOk())
        return fail(model.status().withContext(args.planIn));
      savedModel = model.value();
    }
    if (const Json *c = json.value().find("cluster")) {
      auto cluster = clusterFromJson(*c, "plan file " + args.planIn);
      if (!cluster.isOk())
        return fail(cluster.status().withContext(args.planIn));
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
      return fail(m.status());
    model = m.value();
    source = "zoo spec on the command line";
  } else if (!args.modelPath.empty()) {
    auto m = onnxModel(args, source, opaqueParams, &modelBatch);
    if (!m.isOk())
      return fail(m.status());
    model = m.value();
  } else if (savedModel) {
    model = *savedModel;
    if (args.seq)
      model.seq = args.seq;
    source = "plan file " + args.planIn;
  } else {
    return fail(invalidArgument(
        "no model: give model.onnx, --zoo gpt|llama [sizes] or --plan-in"));
  }

  // The cluster.
  ClusterSpec cluster;
  if (savedCluster && !args.clusterGiven) {
    cluster = *savedCluster;
  } else {
    auto c = loadCluster(args);
    if (!c.isOk())
      return fail(c.status());
    cluster = c.value();
  }
  if (args.ranks > 0) {
    auto c = clusterForRanks(cluster, args.ranks);
    if (!c.isOk())
      return fail(c.status());
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
    return fail(invalidArgument("--compiled needs a model file to compile"));

  if (cpu && !args.modelPath.empty() && !args.analytic && !savedPlan) {
    return compiledCpuPlan(args, cluster, model, source, opaqueParams,
                           modelBatch, policy);
  }
  if (opaqueParams > 0) {
    std::fputs(opaqueReport(args, cluster, opaqueParams, policy, source)
                   .c_str(),
               stdout);
    return 0;
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
    if (compiler.batch < 1)
      return fail(invalidArgument(
          "--global-batch is required (the model carries no batch)"));
    SearchOptions fixed;
    if (Status s = pinMesh(args.mesh, fixed); !s.isOk())
      return fail(s);
    if (fixed.fixPp > 1)
      return fail(invalidArgument(
          "--mesh pp=", fixed.fixPp,
          ": the analytic CPU model has no pipeline stages (without "
          "--analytic, dtcc plan compiles the plan and prices its program)"));
    if (!args.mesh.empty() || args.zero >= 0) {
      int64_t tp = fixed.fixTp ? fixed.fixTp : 1;
      // Axes left out of --mesh are 1, as for dtcc compile; --zero alone
      // spreads dp over the cluster.
      int64_t dp = fixed.fixDp        ? fixed.fixDp
                   : args.mesh.empty() ? cluster.numDevices() / tp
                                       : 1;
      if (args.ranks == 0 && !args.mesh.empty()) {
        auto c = clusterForRanks(cluster, dp * tp);
        if (!c.isOk())
          return fail(c.status());
        cluster = c.value();
      }
      Plan plan = compilerPlan(dp, tp, std::max(0, args.zero), compiler);
      std::optional<std::string> problem = planProblem(plan, model, cluster);
      if (!problem)
        problem = compilerPlanProblem(plan, model, compiler);
      if (problem)
        return fail(invalidArgument("plan cannot run: ", *problem));
      auto candidate = evaluatePlan(model, cluster, plan);
      if (!candidate.isOk())
        return fail(candidate.status());
      report.chosen = candidate.value();
      report.origin = "given";
    } else {
      auto chosen = chooseCompilerPlan(model, cluster, compiler);
      if (!chosen.isOk())
        return fail(chosen.status());
      SearchResult result;
      result.best = chosen.value().chosen;
      result.alternatives = chosen.value().rejected;
      result.evaluated = int64_t(chosen.value().rejected.size()) + 1;
      result.note = chosen.value().summary;
      report.chosen = chosen.value().chosen;
      report.search = result;
      report.origin = "search";
    }
    report.cluster = cluster;
    report.globalBatch = compiler.batch * compiler.microBatches;
    report.notes.push_back(
        "CPU backend: plans are what dtcc compile builds today (dp x tp, "
        "ZeRO 0-3, one pipeline stage, the model's batch as one micro-batch "
        "split over dp), in fp32 with unfused attention");
  } else if (savedPlan && args.mesh.empty() && args.zero < 0) {
    Plan plan = *savedPlan;
    if (args.globalBatch && args.globalBatch != plan.globalBatch())
      return fail(invalidArgument(
          "--global-batch ", args.globalBatch, " differs from the plan's ",
          plan.globalBatch(), " (", args.planIn, ")"));
    auto candidate = evaluatePlan(model, cluster, plan);
    if (!candidate.isOk())
      return fail(candidate.status().withContext(args.planIn));
    report.chosen = candidate.value();
    report.origin = "given";
    report.globalBatch = plan.globalBatch();
  } else {
    if (args.globalBatch < 1)
      return fail(invalidArgument("--global-batch is required"));
    SearchOptions options;
    options.globalBatch = args.globalBatch;
    options.dtype = policy;
    options.budgetSeconds = args.budget;
    options.allowOffload = args.offload;
    options.alternativesPerKind = args.alternatives;
    options.fixZero = args.zero;
    options.fixMicroBatchSize = args.microBatch;
    if (Status s = pinMesh(args.mesh, options); !s.isOk())
      return fail(s);
    bool pinned = options.fixDp || options.fixPp || options.fixTp ||
                  options.fixZero >= 0;
    auto result = searchPlans(model, cluster, options);
    if (!result.isOk())
      return fail(result.status());
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
      return fail(s);
  }
  if (!args.planOut.empty() && report.chosen) {
    Json saved = Json::object();
    saved.set("schemaVersion", kReportSchemaVersion);
    saved.set("plan", planToJson(report.chosen->plan));
    saved.set("model", modelToJson(model));
    saved.set("cluster", clusterToJson(cluster));
    saved.set("globalBatch", report.globalBatch);
    if (Status s = writeFile(args.planOut, saved.dump(2) + "\n"); !s.isOk())
      return fail(s);
  }

  std::optional<CompiledMemory> compiled;
  if (args.compiled && report.chosen) {
    auto c = compiledMemory(args.modelPath, report.chosen->plan);
    if (!c.isOk())
      return fail(c.status());
    compiled = c.value();
  }
  double reserve = cluster.device.reservedBytes.value;
  if (args.json) {
    Json j = reportToJson(report);
    if (compiled)
      j.set("compiled", compiledToJson(*compiled, *report.chosen, reserve));
    std::fputs((j.dump(2) + "\n").c_str(), stdout);
  } else {
    std::fputs(formatReport(report).c_str(), stdout);
    if (compiled)
      std::fputs(formatCompiled(*compiled, *report.chosen, reserve).c_str(),
                 stdout);
  }
  return report.chosen && report.chosen->fits ? 0 : 2;
}

bool deviceFiguresForCompile(const std::string &clusterName, int64_t nodes,
                             int64_t ranks, DeviceFigures &figures,
                             std::string &clusterLabel) {
  Args args;
  args.cluster = clusterName.empty() ? "cpu-local" : clusterName;
  args.nodes = std::max<int64_t>(1, nodes);
  auto cluster = loadCluster(args);
  if (!cluster.isOk()) {
    std::fprintf(stderr, "error: --plan auto: %s\n",
                 cluster.status().message().c_str());
    return false;
  }
  ClusterSpec c = cluster.value();
  if (ranks > 0) {
    auto sized = clusterForRanks(c, ranks);
    if (!sized.isOk()) {
      std::fprintf(stderr, "error: --plan auto: %s\n",
                   sized.status().message().c_str());
      return false;
    }
    c = sized.value();
  }
  figures = deviceFigures(c);
  clusterLabel = std::to_string(c.numDevices()) + " x " + c.device.name +
                 " (" + c.name + ")";
  return true;
}

PlanChoice choosePlanForCompile(const std::string &modelPath,
                         const std::string &clusterName, int64_t nodes,
                         int64_t ranks, int64_t microBatches,
                         const std::string &recompute,
                         runtime::MeshShape &mesh,
                         int &zero) {
  auto fail = [](const Status &status) {
    std::fprintf(stderr, "error: --plan auto: %s\n", status.message().c_str());
    return PlanChoice::kFailed;
  };
  Args args;
  args.modelPath = modelPath;
  args.cluster = clusterName.empty() ? "cpu-local" : clusterName;
  args.nodes = std::max<int64_t>(1, nodes);
  std::string source;
  double opaqueParams = 0;
  int64_t batch = 0;
  auto model = onnxModel(args, source, opaqueParams, &batch);
  if (!model.isOk())
    return fail(model.status());
  // Not a transformer the planner describes: the caller compiles the
  // candidates instead (planByCompiling).
  if (opaqueParams > 0)
    return PlanChoice::kCompileCandidates;
  auto cluster = loadCluster(args);
  if (!cluster.isOk())
    return fail(cluster.status());
  ClusterSpec c = cluster.value();
  // CPU ranks: compile every plan and price its program (planByCompiling),
  // which also places pipeline stages and tp layouts.
  if (c.device.isCpu())
    return PlanChoice::kCompileCandidates;
  if (ranks > 0) {
    auto sized = clusterForRanks(c, ranks);
    if (!sized.isOk())
      return fail(sized.status());
    c = sized.value();
  }
  ModelDesc m = model.value();
  // The compiled program runs on the CPU backend: fp32, unfused attention.
  m.flashAttention = false;
  CompilerPlanOptions options;
  options.batch = batch;
  options.microBatches = std::max<int64_t>(1, microBatches);
  options.recompute = recompute == "full" ? Recompute::kFull : Recompute::kNone;
  auto chosen = chooseCompilerPlan(m, c, options);
  if (!chosen.isOk())
    return fail(chosen.status());
  mesh = chosen.value().mesh;
  zero = chosen.value().zero;
  std::fprintf(stderr, "plan auto: %s on %s\n", chosen.value().summary.c_str(),
               c.name.c_str());
  return PlanChoice::kChosen;
}

} // namespace dtcc
