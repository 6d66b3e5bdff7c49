//===- PlanCommand.cpp - `dtcc plan`: its options -------------------------===//
//
// The flags of `dtcc plan`, parsed by llvm::cl into a PlanRequest; the
// planning itself is compiler/Planning.h's planModel.
//
//===----------------------------------------------------------------------===//

#include "tools/dtcc/Commands.h"

#include "compiler/Planning.h"
#include "planner/Report.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;

namespace dtcc {

cl::SubCommand planCommand(
    "plan",
    "Choose (or evaluate) a distributed-training plan and explain it: mesh, "
    "ZeRO stage, micro-batching, schedule, recomputation, memory per device, "
    "step time, communication and the best rejected alternatives "
    "(docs/planner.md); exits with 2 when no plan fits in memory");

namespace {

cl::OptionCategory modelCategory(
    "model (one of: a model file, --zoo, --plan-in)");
cl::OptionCategory clusterCategory("cluster");
cl::OptionCategory trainingCategory("training");
cl::OptionCategory planCategory("plan");
cl::OptionCategory outputCategory("output");

cl::opt<std::string> modelPath(
    cl::Positional,
    cl::desc("<model.onnx|.mlir>"),
    cl::sub(planCommand), cl::cat(modelCategory));
cl::opt<std::string> zooFamily(
    "zoo", cl::desc("A zoo model without a file, sized by --preset and the "
                    "size flags"),
    cl::value_desc("gpt|llama"), cl::sub(planCommand), cl::cat(modelCategory));
cl::opt<std::string> zooPreset(
    "preset",
    cl::desc("--zoo: gpt2, gpt2-medium, gpt2-large, gpt2-xl, tinyllama, "
             "llama3-8b, llama3-70b, llama3-405b"),
    cl::value_desc("name"), cl::sub(planCommand), cl::cat(modelCategory));
cl::opt<int64_t> layers("layers", cl::desc("--zoo: transformer blocks"),
                        cl::init(0), cl::sub(planCommand),
                        cl::cat(modelCategory));
cl::opt<int64_t> hidden("hidden", cl::desc("--zoo: model width"), cl::init(0),
                        cl::sub(planCommand), cl::cat(modelCategory));
cl::opt<int64_t> heads("heads", cl::desc("--zoo: attention heads"),
                       cl::init(0), cl::sub(planCommand),
                       cl::cat(modelCategory));
cl::opt<int64_t> kvHeads("kv-heads", cl::desc("--zoo: key/value heads"),
                         cl::init(0), cl::sub(planCommand),
                         cl::cat(modelCategory));
cl::opt<int64_t> ffn("ffn", cl::desc("--zoo: feed-forward width"),
                     cl::init(0), cl::sub(planCommand),
                     cl::cat(modelCategory));
cl::alias ffnHidden("ffn-hidden", cl::desc("Alias for --ffn"),
                    cl::aliasopt(ffn), cl::cat(modelCategory));
cl::opt<int64_t> vocab("vocab", cl::desc("--zoo: vocabulary size"),
                       cl::init(0), cl::sub(planCommand),
                       cl::cat(modelCategory));
cl::opt<bool> tiedEmbeddings(
    "tied-embeddings", cl::desc("--zoo: the head reuses the token embedding"),
    cl::sub(planCommand), cl::cat(modelCategory));
cl::list<std::string> frozen(
    "frozen",
    cl::desc("Initializers that are not parameters (comma-separated; an "
             "export's masks and rotary tables), as for dtcc compile --train"),
    cl::CommaSeparated, cl::value_desc("name,..."), cl::sub(planCommand),
    cl::cat(modelCategory));
cl::list<std::string>
    inputShapes("input-shape",
                cl::desc("Size a model file's input with symbolic dimensions: "
                         "NAME=D0xD1x... (repeatable), as for dtcc compile"),
                cl::value_desc("name=dims"), cl::sub(planCommand),
                cl::cat(modelCategory));
cl::list<std::string> dimSizes(
    "dim",
    cl::desc("Size a symbolic dimension of a model file (an export's dynamic "
             "axis) in every input that has it: NAME=N, e.g. batch=8 "
             "(repeatable), as for dtcc compile"),
    cl::value_desc("name=size"), cl::sub(planCommand), cl::cat(modelCategory));
cl::opt<std::string> planIn(
    "plan-in", cl::desc("A saved plan (its model and cluster too)"),
    cl::value_desc("file"), cl::sub(planCommand), cl::cat(modelCategory));
cl::opt<bool> replan(
    "replan",
    cl::desc("With --plan-in: search a plan for the file's model, cluster "
             "and global batch instead of pricing the file's plan"),
    cl::sub(planCommand), cl::cat(modelCategory));

cl::opt<std::string> cluster(
    "cluster",
    cl::desc("dgx-a100-80g, dgx-a100-40g, dgx-h100 (default), h200, "
             "cpu-local, or a "
             "JSON/YAML cluster file (dtcc calibrate -o FILE measures this "
             "machine). On a CPU cluster with a model file, every plan dtcc "
             "compile builds (dp x pp x tp, ZeRO 0..3, 1F1B and GPipe, tp "
             "layouts by Megatron's rule or the layout ILP) is compiled and "
             "its program priced: memory = its static memory plan, time = "
             "its step simulated with the cluster's figures"),
    cl::value_desc("name|file"), cl::init("dgx-h100"), cl::sub(planCommand),
    cl::cat(clusterCategory));
cl::opt<int64_t> nodes("nodes", cl::desc("Nodes of the cluster (default 1)"),
                       cl::init(1), cl::sub(planCommand),
                       cl::cat(clusterCategory));
cl::opt<int64_t> ranks(
    "ranks", cl::desc("Plan for N devices (ranks) of the cluster's kind"),
    cl::init(0), cl::sub(planCommand), cl::cat(clusterCategory));

cl::opt<int64_t> globalBatch(
    "global-batch",
    cl::desc("Sequences per step (required unless --plan-in, or on a CPU "
             "cluster with a model file: a step trains the model's batch "
             "times --micro-batches)"),
    cl::init(0), cl::sub(planCommand), cl::cat(trainingCategory));
cl::opt<int64_t> seq("seq", cl::desc("Sequence length (overrides the model's)"),
                     cl::init(0), cl::sub(planCommand),
                     cl::cat(trainingCategory));
cl::opt<std::string> dtype(
    "dtype",
    cl::desc("bf16/fp16 with fp32 master weights, or fp32 everywhere "
             "(default bf16; fp32 on CPU clusters)"),
    cl::value_desc("bf16|fp16|fp32"), cl::init("bf16"), cl::sub(planCommand),
    cl::cat(trainingCategory));

cl::opt<std::string> searchBudget(
    "search-budget",
    cl::desc("Search time budget, e.g. 10s, 500ms (default 10s)"),
    cl::value_desc("time"), cl::init("10s"), cl::sub(planCommand),
    cl::cat(planCategory));
cl::opt<std::string> mesh(
    "mesh", cl::desc("Evaluate this mesh (any part may be left out)"),
    cl::value_desc("dp=A,pp=B,tp=C"), cl::sub(planCommand),
    cl::cat(planCategory));
cl::opt<int> zero("zero", cl::desc("ZeRO stage 0..3"), cl::init(-1),
                  cl::sub(planCommand), cl::cat(planCategory));
cl::opt<int64_t> microBatch("micro-batch", cl::desc("Micro-batch size"),
                            cl::init(0), cl::sub(planCommand),
                            cl::cat(planCategory));
cl::opt<int64_t> microBatches(
    "micro-batches",
    cl::desc("CPU clusters: micro-batches per step (default 1)"), cl::init(1),
    cl::sub(planCommand), cl::cat(planCategory));
cl::opt<std::string> pipelineSchedule(
    "pipeline-schedule",
    cl::desc("CPU clusters: 1f1b, gpipe or zb-h1 (with --mesh pp=..)"),
    cl::value_desc("1f1b|gpipe|zb-h1"), cl::sub(planCommand), cl::cat(planCategory));
cl::opt<bool> analytic(
    "analytic",
    cl::desc("Price with the transformer formula model instead of "
             "compiling the plan and pricing its program"),
    cl::sub(planCommand), cl::cat(planCategory));
cl::opt<bool> sensitivity(
    "sensitivity",
    cl::desc("Plan again with each bandwidth (intra-node, inter-node, "
             "memory) and the compute rate scaled by 0.8 and 1.2, and all by "
             "0.8; report how the chosen plan fares in each, and prefer, "
             "among the plans within 2% of the fastest, the one that loses "
             "least when the figures are worse"),
    cl::sub(planCommand), cl::cat(planCategory));
cl::opt<std::string> gradReduce(
    "grad-reduce",
    cl::desc("fp32 (default) or half: the searched plans sum their weight "
             "gradients over dp in fp32, or in the compute type where the "
             "compiler can (one micro-batch, or ZeRO-2/3 without pp; the "
             "plan's summary says so), as dtcc compile --grad-reduce"),
    cl::value_desc("fp32|half"), cl::init("fp32"), cl::sub(planCommand),
    cl::cat(trainingCategory));
cl::opt<bool> noOffload("no-offload",
                        cl::desc("Do not consider host offload"),
                        cl::sub(planCommand), cl::cat(planCategory));
cl::opt<int> alternatives(
    "alternatives",
    cl::desc("Rejected alternatives shown per kind (default 5)"), cl::init(5),
    cl::sub(planCommand), cl::cat(planCategory));

cl::opt<bool> compiled(
    "compiled",
    cl::desc("Also compile the model with the plan and report each category "
             "of its static memory plan (rank 0) beside the memory model"),
    cl::sub(planCommand), cl::cat(outputCategory));
cl::opt<bool> explainCost(
    "explain-cost",
    cl::desc("List the chosen plan's ten most expensive instructions and "
             "collectives with their priced time and ONNX node"),
    cl::sub(planCommand), cl::cat(outputCategory));
cl::opt<bool> noStridedViews(
    "no-strided-views",
    cl::desc("GPU clusters: price programs compiled as dtcc compile "
             "--no-strided-views (attention's heads copied around it: the "
             "programs dtcc ran before they were views)"),
    cl::sub(planCommand), cl::cat(outputCategory));
cl::opt<bool> noHalfWeightCopies(
    "no-half-weight-copies",
    cl::desc("GPU clusters: price programs compiled as dtcc compile "
             "--no-half-weight-copies (ZeRO-1/2 with micro-batches or a "
             "pipeline keep whole fp32 master weights, cast at every "
             "micro-batch)"),
    cl::sub(planCommand), cl::cat(outputCategory));
cl::opt<bool> noMatmulEpilogues(
    "no-matmul-epilogues",
    cl::desc("GPU clusters: price programs compiled as dtcc compile "
             "--no-matmul-epilogues (each bias an add and each bias "
             "gradient a reduction of its own: the programs dtcc ran "
             "before they were epilogues)"),
    cl::sub(planCommand), cl::cat(outputCategory));
cl::opt<bool> noFuse(
    "no-fuse",
    cl::desc("Price programs compiled as dtcc compile --no-fuse (every op a "
             "library kernel; by default the fused regions dtcc compile "
             "builds)"),
    cl::sub(planCommand), cl::cat(outputCategory));
cl::opt<bool> json("json", cl::desc("The report as JSON (docs/planner.md)"),
                   cl::sub(planCommand), cl::cat(outputCategory));
cl::opt<std::string> tracePath(
    "trace", cl::desc("A Chrome trace of one predicted step"),
    cl::value_desc("file"), cl::sub(planCommand), cl::cat(outputCategory));
cl::opt<std::string> planOut("plan-out",
                             cl::desc("Save the plan for --plan-in"),
                             cl::value_desc("file"), cl::sub(planCommand),
                             cl::cat(outputCategory));
cl::opt<std::string> tokens("tokens",
                            cl::desc("Whole-run cost for N tokens (e.g. 2T)"),
                            cl::value_desc("N"), cl::sub(planCommand),
                            cl::cat(outputCategory));
cl::opt<double> price("price-per-gpu-hour",
                      cl::desc("And its price per device-hour"),
                      cl::init(0), cl::sub(planCommand),
                      cl::cat(outputCategory));

using runtime::invalidArgument;
using runtime::Status;
using runtime::StatusOr;

StatusOr<PlanRequest> request() {
  PlanRequest r;
  r.modelPath = modelPath;
  r.zooFamily = zooFamily;
  r.zooPreset = zooPreset;
  // A size given is a size: 0 is not "the default". The first six are the
  // zoo model's.
  const std::pair<const char *, cl::opt<int64_t> *> sizes[] = {
      {"layers", &layers},  {"hidden", &hidden}, {"heads", &heads},
      {"kv-heads", &kvHeads}, {"ffn", &ffn},     {"vocab", &vocab},
      {"seq", &seq},        {"global-batch", &globalBatch},
      {"micro-batch", &microBatch}};
  for (size_t i = 0; i < std::size(sizes); ++i) {
    auto [name, option] = sizes[i];
    if (!option->getNumOccurrences())
      continue;
    if (*option < 1)
      return invalidArgument("--", name, ": expected at least 1, got ",
                             int64_t(*option));
    if (i < 6)
      r.zooSizes[name] = *option;
  }
  r.tiedEmbeddings = tiedEmbeddings;
  r.frozen.assign(frozen.begin(), frozen.end());
  if (std::string e =
          readShapeFlags(inputShapes, dimSizes, r.inputShapes, r.dimSizes);
      !e.empty())
    return invalidArgument(e);
  r.planIn = planIn;
  r.replan = replan;
  // A saved plan is priced as saved: a flag that would change it is a
  // mistake, not something to drop.
  if (!planIn.empty() && !replan)
    for (auto [name, given] : std::initializer_list<
             std::pair<const char *, bool>>{
             {"mesh", mesh.getNumOccurrences() > 0},
             {"zero", zero.getNumOccurrences() > 0},
             {"micro-batch", microBatch.getNumOccurrences() > 0},
             {"micro-batches", microBatches.getNumOccurrences() > 0},
             {"pipeline-schedule", pipelineSchedule.getNumOccurrences() > 0},
             {"dtype", dtype.getNumOccurrences() > 0}})
      if (given)
        return invalidArgument(
            "--", name, " would change the plan of --plan-in ",
            planIn.getValue(),
            ", which is priced as saved: edit the file, or add --replan to "
            "search a plan for its model and cluster");
  r.cluster = cluster;
  r.nodes = nodes;
  r.clusterGiven = cluster.getNumOccurrences() || nodes.getNumOccurrences();
  r.nodesGiven = nodes.getNumOccurrences() > 0;
  r.ranks = ranks;
  if (ranks.getNumOccurrences() && ranks < 1)
    return invalidArgument("--ranks: expected at least 1, got ", ranks);
  r.globalBatch = globalBatch;
  r.seq = seq;
  r.dtype = dtype;
  r.dtypeGiven = dtype.getNumOccurrences() > 0;
  auto seconds = planner::parseDuration(searchBudget);
  if (!seconds.isOk())
    return seconds.status().withContext("--search-budget");
  r.budgetSeconds = seconds.value();
  if (!mesh.empty()) {
    auto m = runtime::MeshShape::parse(mesh);
    if (!m.isOk())
      return m.status().withContext("--mesh");
    r.mesh = std::move(m.value());
  }
  if (zero.getNumOccurrences() && (zero < 0 || zero > 3))
    return invalidArgument("--zero: expected 0..3, got ", int(zero));
  r.zero = zero;
  r.microBatch = microBatch;
  if (microBatches < 1)
    return invalidArgument("--micro-batches: expected at least 1, got ",
                           microBatches);
  r.microBatches = microBatches;
  r.schedule = pipelineSchedule;
  if (!r.schedule.empty() && r.schedule != "1f1b" && r.schedule != "gpipe" &&
      r.schedule != "zb-h1")
    return invalidArgument("--pipeline-schedule: expected 1f1b, gpipe or "
                           "zb-h1, got '",
                           r.schedule, "'");
  r.analytic = analytic;
  r.sensitivity = sensitivity;
  r.offload = !noOffload;
  if (gradReduce != "fp32" && gradReduce != "half")
    return invalidArgument("--grad-reduce: expected fp32 or half, got '",
                           gradReduce.getValue(), "'");
  r.halfGradReduce = gradReduce == "half";
  r.alternatives = alternatives;
  r.compiled = compiled;
  r.explainCost = explainCost;
  r.stridedViews = !noStridedViews;
  r.halfWeightCopies = !noHalfWeightCopies;
  r.matmulEpilogues = !noMatmulEpilogues;
  r.fuse = !noFuse;
  r.json = json;
  r.tracePath = tracePath;
  r.planOut = planOut;
  if (!tokens.empty()) {
    auto n = planner::parseCount(tokens);
    if (!n.isOk())
      return n.status().withContext("--tokens");
    r.tokens = n.value();
  }
  if (price < 0)
    return invalidArgument("--price-per-gpu-hour: expected a number >= 0, "
                           "got ",
                           double(price));
  r.price = price;
  return r;
}

} // namespace

void hideOptionsUnrelatedToPlan() {
  cl::HideUnrelatedOptions({&modelCategory, &clusterCategory,
                            &trainingCategory, &planCategory,
                            &outputCategory},
                           planCommand);
}

int runPlanCommand() {
  auto fail = [](const Status &status) {
    llvm::errs() << "dtcc plan: error: " << status.message() << "\n";
    return 1;
  };
  auto r = request();
  if (!r.isOk())
    return fail(r.status());
  r.value().progress = [](const std::string &line) {
    llvm::errs() << "dtcc plan: " << line << "\n";
  };
  auto output = planModel(r.value());
  if (!output.isOk())
    return fail(output.status());
  llvm::outs() << output.value().report;
  return output.value().fits ? 0 : kNoPlanFits;
}

} // namespace dtcc
