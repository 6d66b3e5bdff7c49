//===- dtcc.cpp - the dtcc command line -----------------------------------===//
//
// dtcc import | compile | zoo | explain | ops, and the plan and calibrate
// subcommands (Commands.h): options parsed with llvm::cl, the work done by
// compiler/ (Driver.h, Planning.h, Explain.h), the results printed.
//
//===----------------------------------------------------------------------===//

#include "tools/dtcc/Commands.h"

#include "compiler/Driver.h"
#include "compiler/Explain.h"
#include "compiler/InternalErrors.h"
#include "compiler/PlanByCompiling.h"
#include "compiler/Planning.h"
#include "dialects/Graph/IR/GraphOps.h"
#include "frontends/zoo/Zoo.h"
#include "runtime/format/Container.h"

#include "mlir/IR/BuiltinDialect.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
namespace cl = llvm::cl;


namespace {

cl::OptionCategory category("dtcc options");

cl::SubCommand importCmd("import", "Import an ONNX model and print it in the "
                                   "dgraph dialect");
cl::SubCommand compileCmd("compile", "Compile a model (ONNX or .mlir) into an "
                                     "executable");
cl::SubCommand opsCmd("ops", "List the ONNX ops dtcc supports and the lowest "
                             "opset of each");
cl::SubCommand explainCmd(
    "explain", "Show what a compiled program does on its mesh: each "
               "parameter's sharding and every collective (kind, axis, bytes, "
               "phase, ONNX node)");
cl::opt<std::string> explainPath(cl::Positional,
                                 cl::desc("<compiled executable|program|.mlir>"),
                                 cl::sub(explainCmd), cl::cat(category));
cl::opt<std::string> explainCluster(
    "cluster",
    cl::desc("Also price the program on a cluster (a preset or a cluster "
             "file, e.g. from dtcc calibrate): its memory plan tensor by "
             "tensor and its step simulated instruction by instruction"),
    cl::value_desc("preset|file"), cl::sub(explainCmd), cl::cat(category));
cl::SubCommand zooCmd("zoo", "Write a GPT, Llama or MLP model of any size as "
                             "ONNX: dtcc zoo gpt|llama|mlp [options] -o model.onnx");

cl::opt<std::string> inputPath(cl::Positional, cl::desc("<model.onnx|.onnxtext|.mlir>"),
                               cl::sub(importCmd), cl::sub(compileCmd),
                               cl::cat(category));
cl::opt<std::string> outputPath("o", cl::desc("Output file ('-' for stdout)"),
                                cl::value_desc("path"), cl::init("-"),
                                cl::sub(importCmd), cl::sub(compileCmd),
                                cl::sub(zooCmd), cl::cat(category));

cl::OptionCategory zooCategory("model options (dtcc zoo)");
cl::opt<std::string> zooFamily(cl::Positional, cl::desc("<gpt|llama|mlp>"),
                               cl::sub(zooCmd), cl::cat(zooCategory));
cl::opt<std::string> zooPreset(
    "preset",
    cl::desc("Start from a published model's sizes: gpt2, gpt2-medium, "
             "gpt2-large, gpt2-xl, tinyllama, llama3-8b, llama3-70b, "
             "llama3-405b (explicit flags win)"),
    cl::sub(zooCmd), cl::cat(zooCategory));
cl::opt<int64_t> zooLayers("layers", cl::desc("Transformer blocks, or MLP hidden layers"),
                           cl::init(0), cl::sub(zooCmd), cl::cat(zooCategory));
cl::opt<int64_t> zooHidden("hidden", cl::desc("Model (or MLP hidden) width"),
                           cl::init(0), cl::sub(zooCmd), cl::cat(zooCategory));
cl::opt<int64_t> zooHeads("heads", cl::desc("Attention heads"), cl::init(0),
                          cl::sub(zooCmd), cl::cat(zooCategory));
cl::opt<int64_t> zooKvHeads("kv-heads",
                            cl::desc("Key/value heads (Llama grouped-query "
                                     "attention; default: --heads)"),
                            cl::init(0), cl::sub(zooCmd), cl::cat(zooCategory));
cl::opt<int64_t> zooFfn("ffn-hidden", cl::desc("Feed-forward width"),
                        cl::init(0), cl::sub(zooCmd), cl::cat(zooCategory));
cl::opt<int64_t> zooVocab("vocab", cl::desc("Vocabulary size"), cl::init(0),
                          cl::sub(zooCmd), cl::cat(zooCategory));
cl::opt<int64_t> zooSeq("seq", cl::desc("Sequence length"), cl::init(0),
                        cl::sub(zooCmd), cl::cat(zooCategory));
cl::opt<int64_t> zooBatch("batch", cl::desc("Batch size of the inputs"),
                          cl::init(0), cl::sub(zooCmd), cl::cat(zooCategory));
cl::opt<int64_t> zooInputs("inputs", cl::desc("Input features (MLP)"),
                           cl::init(0), cl::sub(zooCmd), cl::cat(zooCategory));
cl::opt<int64_t> zooClasses("classes", cl::desc("Output classes (MLP)"),
                            cl::init(0), cl::sub(zooCmd), cl::cat(zooCategory));
cl::opt<double> zooRopeTheta("rope-theta",
                             cl::desc("Rotary frequency base (Llama; default 10000)"),
                             cl::init(0), cl::sub(zooCmd), cl::cat(zooCategory));
cl::opt<double> zooNormEps("norm-eps", cl::desc("Normalization epsilon (default 1e-5)"),
                           cl::init(0), cl::sub(zooCmd), cl::cat(zooCategory));
cl::opt<uint64_t> zooSeed("seed", cl::desc("Seed of the initial weights"),
                          cl::init(0), cl::sub(zooCmd), cl::cat(zooCategory));
cl::opt<int64_t> zooOpset("opset", cl::desc("ONNX opset (default 17)"),
                          cl::init(17), cl::sub(zooCmd), cl::cat(zooCategory));
cl::opt<bool> zooTied("tied-embeddings",
                      cl::desc("The output head reuses the token embedding"),
                      cl::sub(zooCmd), cl::cat(zooCategory));
cl::opt<double> zooDropout(
    "dropout",
    cl::desc("GPT: Dropout (training mode) of this probability after the "
             "embedding, on the attention probabilities and on both residual "
             "branches, as GPT-2 and Megatron-LM place it (default 0: none)"),
    cl::init(0), cl::sub(zooCmd), cl::cat(zooCategory));
cl::opt<bool> zooAlibi(
    "alibi",
    cl::desc("GPT: ALiBi attention biases (BLOOM, MPT) in place of learned "
             "positions: each head adds its slope times the key position to "
             "its scores"),
    cl::sub(zooCmd), cl::cat(zooCategory));
cl::list<std::string> inputShapes(
    "input-shape",
    cl::desc("Size an input with symbolic dimensions: NAME=D0xD1x... "
             "(repeatable)"),
    cl::value_desc("name=dims"), cl::sub(importCmd), cl::sub(compileCmd),
    cl::cat(category));
cl::list<std::string> dimSizes(
    "dim",
    cl::desc("Size a symbolic dimension (an export's dynamic axis) in every "
             "input that has it: NAME=N, e.g. batch=8 (repeatable)"),
    cl::value_desc("name=size"), cl::sub(importCmd), cl::sub(compileCmd),
    cl::cat(category));
cl::list<std::string> bindings(
    "bind",
    cl::desc("Freeze a graph input to the tensor in an ONNX TensorProto "
             "file: NAME=FILE.pb (repeatable)"),
    cl::value_desc("name=file.pb"), cl::sub(importCmd), cl::sub(compileCmd),
    cl::cat(category));
cl::opt<bool> noWeights("no-weights",
                        cl::desc("Shapes only, without weight data (import: "
                                 "ignore the weights; zoo: write none)"),
                        cl::sub(importCmd), cl::sub(compileCmd),
                        cl::sub(zooCmd), cl::cat(category));
cl::opt<std::string> compileTo(
    "compile-to",
    cl::desc("Stop after a phase: import, dgraph, train, shard, dexec (print MLIR), "
             "program (a bare program file) or executable (default)"),
    cl::value_desc("phase"), cl::init("executable"), cl::sub(compileCmd),
    cl::cat(category));
cl::opt<std::string> target(
    "target",
    cl::desc(
        "The device the executable runs on: cpu (oneDNN, OpenBLAS, MPI) or "
        "cuda (NVIDIA GPUs: cuBLASLt, NCCL; one rank per GPU)"),
    cl::value_desc("cpu|cuda"), cl::init("cpu"), cl::sub(compileCmd),
    cl::cat(category));
cl::opt<bool> fuse(
    "fuse",
    cl::desc("Fuse elementwise chains, and softmaxes, norms and reductions "
             "along the last axis with the ops around them, into regions "
             "with kernels generated for the target: the CPU (linked with "
             "ld.lld) or CUDA (PTX, and cubins for sm_80 and sm_90; a block "
             "of threads per row) (the default; without ld.lld a CPU compile "
             "warns and does not fuse unless --fuse is given)"),
    cl::sub(compileCmd), cl::cat(category));
cl::opt<bool> noFuse("no-fuse",
                     cl::desc("Do not fuse: every op a library kernel"),
                     cl::sub(compileCmd), cl::cat(category));
cl::opt<bool> noRowRegions(
    "no-row-regions",
    cl::desc("Fuse elementwise chains only: softmaxes, norms and reductions "
             "along the last axis stay library kernels (for comparisons)"),
    cl::sub(compileCmd), cl::cat(category));
cl::opt<bool> matmulEpilogues(
    "matmul-epilogues",
    cl::desc("Add each dense layer's bias in its product's epilogue and "
             "compute its bias gradient in the epilogue of its weight "
             "gradient's product (cuBLASLt's BIAS and BGRADA/BGRADB) "
             "instead of second passes over the product and the output "
             "gradient (the default on --target cuda; on the CPU the fused "
             "ops run as their two kernels, for tests)"),
    cl::sub(compileCmd), cl::cat(category));
cl::opt<bool> noMatmulEpilogues(
    "no-matmul-epilogues",
    cl::desc("Biases as separate adds and bias gradients as separate "
             "reductions (for comparisons)"),
    cl::sub(compileCmd), cl::cat(category));
cl::opt<bool> noStridedViews(
    "no-strided-views",
    cl::desc("Copy attention's heads around it (the slices, transposes and "
             "concats as imported) instead of passing them as strided views "
             "(for comparisons)"),
    cl::sub(compileCmd), cl::cat(category));
cl::opt<bool> noHalfWeightCopies(
    "no-half-weight-copies",
    cl::desc("With --dtype bf16/fp16: cast each fp32 master weight at "
             "every micro-batch instead of keeping a bf16/fp16 copy of the "
             "weights that the update refreshes (kept for ZeRO-1/2 with "
             "micro-batches or a pipeline, where the masters are split "
             "over dp: Megatron-LM's distributed optimizer; elsewhere "
             "the AdamW kernel writes the copy, on both targets); for "
             "comparisons"),
    cl::sub(compileCmd), cl::cat(category));
cl::opt<bool> printIrAfterAll("print-ir-after-all",
                              cl::desc("Print the IR after every pass"),
                              cl::sub(compileCmd), cl::cat(category));
cl::opt<std::string> dumpDir("dump-dir",
                             cl::desc("Write each phase's IR to DIR"),
                             cl::value_desc("dir"), cl::sub(compileCmd),
                             cl::cat(category));
cl::opt<std::string> runnerPath(
    "runner", cl::desc("The runtime runner to embed (default: dtcc-runner "
                       "beside dtcc, or $DTCC_RUNNER)"),
    cl::value_desc("path"), cl::sub(compileCmd), cl::cat(category));
cl::OptionCategory trainCategory("training options (dtcc compile --train)");
cl::opt<bool> train("train",
                    cl::desc("Compile a training step: derive the backward "
                             "pass and the optimizer update"),
                    cl::sub(compileCmd), cl::cat(trainCategory));
cl::opt<std::string> lossSpec(
    "loss",
    cl::desc("The loss: an output name, or cross_entropy:<logits>,<labels> "
             "(default: the graph's only scalar float output)"),
    cl::value_desc("spec"), cl::sub(compileCmd), cl::cat(trainCategory));
cl::opt<std::string> optimizerName("optimizer", cl::desc("adamw or sgd"),
                                   cl::init("adamw"), cl::sub(compileCmd),
                                   cl::cat(trainCategory));
cl::opt<double> lr("lr", cl::desc("Peak learning rate (default 3e-4)"),
                   cl::init(3e-4), cl::sub(compileCmd), cl::cat(trainCategory));
cl::opt<double> minLr("min-lr", cl::desc("Learning rate at the end of decay"),
                      cl::init(0.0), cl::sub(compileCmd), cl::cat(trainCategory));
cl::opt<double> beta1("beta1", cl::desc("AdamW beta1"), cl::init(0.9),
                      cl::sub(compileCmd), cl::cat(trainCategory));
cl::opt<double> beta2("beta2", cl::desc("AdamW beta2"), cl::init(0.999),
                      cl::sub(compileCmd), cl::cat(trainCategory));
cl::opt<double> adamEps("adam-eps", cl::desc("AdamW epsilon"), cl::init(1e-8),
                        cl::sub(compileCmd), cl::cat(trainCategory));
cl::opt<double> weightDecay(
    "weight-decay",
    cl::desc("Decoupled weight decay (AdamW) or L2 penalty (SGD); default "
             "0.01, for every weight and bias"),
    cl::init(0.01), cl::sub(compileCmd), cl::cat(trainCategory));
cl::opt<double> momentum("momentum", cl::desc("SGD momentum"), cl::init(0.0),
                         cl::sub(compileCmd), cl::cat(trainCategory));
cl::opt<bool> nesterov("nesterov", cl::desc("SGD Nesterov momentum"),
                       cl::sub(compileCmd), cl::cat(trainCategory));
cl::opt<double> gradClip("grad-clip",
                         cl::desc("Clip the global gradient norm (0: off)"),
                         cl::init(0.0), cl::sub(compileCmd),
                         cl::cat(trainCategory));
cl::opt<int64_t> warmup("warmup", cl::desc("Linear warmup steps"), cl::init(0),
                        cl::sub(compileCmd), cl::cat(trainCategory));
cl::opt<std::string> schedule("schedule",
                              cl::desc("Learning-rate decay after warmup: "
                                       "constant, linear or cosine"),
                              cl::init("constant"), cl::sub(compileCmd),
                              cl::cat(trainCategory));
cl::list<std::string> frozenNames(
    "frozen", cl::desc("Initializers not to train (comma-separated)"),
    cl::CommaSeparated, cl::value_desc("name,..."), cl::sub(compileCmd),
    cl::cat(trainCategory));
cl::opt<int64_t> microBatches(
    "micro-batches",
    cl::desc("Split each step's batch into M micro-batches and accumulate "
             "their gradients (the model's inputs are one micro-batch; with "
             "pp, the pipeline's micro-batches)"),
    cl::init(1), cl::sub(compileCmd), cl::cat(trainCategory));
cl::opt<std::string> recompute(
    "recompute",
    cl::desc("Activation recomputation: none; selective (recompute the "
             "attention core: scores, softmax, dropout, the product with V); "
             "full (keep only each layer's input, recompute the rest in the "
             "backward pass); layers=K (full, for the first K layers of "
             "each pipeline stage)"),
    cl::value_desc("none|selective|full|layers=K"), cl::init("none"),
    cl::sub(compileCmd), cl::cat(trainCategory));
cl::opt<std::string> offload(
    "offload",
    cl::desc("none, or optimizer: the optimizer state lives in host memory "
             "and its step runs on the host (ZeRO-Offload)"),
    cl::value_desc("none|optimizer"), cl::init("none"), cl::sub(compileCmd),
    cl::cat(trainCategory));
cl::opt<bool> sequenceParallel(
    "sequence-parallel",
    cl::desc("With tp: split the activations outside the tensor-parallel "
             "matmuls (norms, dropout, residuals) along the sequence "
             "(Megatron-LM's sequence parallelism)"),
    cl::sub(compileCmd), cl::cat(trainCategory));
cl::opt<bool> noFusedAttention(
    "no-fused-attention",
    cl::desc("Keep the attention cores as imported (MatMul, scale, mask, "
             "Softmax, MatMul) instead of one fused dgraph.attention (for "
             "comparisons: the fused op keeps no score matrix)"),
    cl::sub(compileCmd), cl::cat(trainCategory));
cl::opt<int64_t> virtualStages(
    "virtual-stages",
    cl::desc("With --pipeline-schedule interleaved: layer chunks per "
             "pipeline rank"),
    cl::init(1), cl::sub(compileCmd), cl::cat(trainCategory));
cl::opt<std::string> computeDtype(
    "dtype",
    cl::desc("Compute type of the forward and backward pass: fp32, bf16 or "
             "fp16 (master weights and optimizer state stay fp32)"),
    cl::init("fp32"), cl::sub(compileCmd), cl::cat(trainCategory));
cl::opt<std::string> normDtype(
    "norm-dtype",
    cl::desc("With --dtype bf16|fp16: the type norms and softmax read and "
             "write: half (default; f32 inside their kernels, f32 "
             "statistics, as Megatron-LM and FSDP with half parameters run "
             "them) or fp32 (f32 between casts with f32 scale and bias, as "
             "PyTorch autocast)"),
    cl::init("half"), cl::sub(compileCmd), cl::cat(trainCategory));
cl::opt<std::string> gradReduce(
    "grad-reduce",
    cl::desc("With --dtype bf16|fp16 on a mesh: the type weight gradients "
             "are summed over dp and cp in: fp32 (default; widened to the "
             "fp32 master gradient first, as Megatron-LM and FSDP's "
             "reduce_dtype float32) or half (the compute type, then "
             "widened, as FSDP with reduce_dtype bf16: half the bytes under "
             "NCCL, while CPU ranks' communicators sum half values as f32; "
             "with --micro-batches only under --zero 2|3 without pp)"),
    cl::value_desc("fp32|half"), cl::init("fp32"), cl::sub(compileCmd),
    cl::cat(trainCategory));
cl::opt<bool> exportGradients(
    "export-gradients",
    cl::desc("Also return every gradient from train_step (for testing)"),
    cl::sub(compileCmd), cl::cat(trainCategory));
cl::opt<std::string> meshSpec(
    "mesh",
    cl::desc("Train on a device mesh, one rank per device: dp (data), pp "
             "(pipeline stages), tp (tensor parallel), cp (context "
             "parallel), e.g. dp=2,pp=2,tp=2; run with mpirun -np "
             "<product>"),
    cl::value_desc("axis=size,..."), cl::sub(compileCmd),
    cl::cat(trainCategory));
cl::opt<std::string> pipelineSchedule(
    "pipeline-schedule",
    cl::desc("With a pp axis: gpipe (all forwards, then all backwards), "
             "1f1b (one forward, one backward: fewer activations alive), "
             "interleaved (1F1B over --virtual-stages layer chunks per rank) "
             "or zb-h1 (zero bubble: weight gradients fill the bubble)"),
    cl::value_desc("gpipe|1f1b|interleaved|zb-h1"), cl::init("1f1b"), cl::sub(compileCmd),
    cl::cat(trainCategory));
cl::opt<int> zeroStage(
    "zero",
    cl::desc("ZeRO stage over dp: 1 splits optimizer state, 2 also the "
             "gradient accumulators, 3 also parameters (0: replicate all)"),
    cl::init(0), cl::sub(compileCmd), cl::cat(trainCategory));
cl::opt<std::string> planMode(
    "plan",
    cl::desc("auto: choose --mesh and --zero with the planner (the default "
             "when --ranks, --cluster or --nodes is given without --mesh)"),
    cl::value_desc("auto"), cl::sub(compileCmd), cl::cat(trainCategory));
cl::opt<std::string> planIn(
    "plan-in",
    cl::desc("Compile the plan `dtcc plan --plan-out` saved: its mesh, ZeRO "
             "stage, micro-batches, schedule, recomputation, sequence "
             "parallelism and offload (the model's batch is one micro-batch "
             "split over dp); replaces those flags"),
    cl::value_desc("plan.json"), cl::sub(compileCmd), cl::cat(trainCategory));
cl::opt<int64_t> planRanks("ranks", cl::desc("Plan for N ranks (--plan auto)"),
                           cl::init(0), cl::sub(compileCmd),
                           cl::cat(trainCategory));
cl::opt<std::string> planCluster(
    "cluster",
    cl::desc("Cluster preset or file to plan for (--plan auto; default "
             "cpu-local; dtcc calibrate writes one)"),
    cl::value_desc("name|file"), cl::sub(compileCmd), cl::cat(trainCategory));
cl::opt<int64_t> planNodes("nodes",
                           cl::desc("Nodes of the cluster (--plan auto)"),
                           cl::init(0), cl::sub(compileCmd),
                           cl::cat(trainCategory));
cl::opt<std::string> layoutSearchMode(
    "layout-search",
    cl::desc("Tensor-parallel layouts beyond the Megatron-style rule: ilp "
             "(every op's sharding by an ILP solved with CBC, priced with "
             "--cluster's figures; the default when --plan auto compiles "
             "the candidate plans), descent (--plan auto: one pass "
             "of coordinate descent over 2-D weights, each try compiled), "
             "both (--plan auto: list both), none"),
    cl::value_desc("ilp|descent|both|none"), cl::sub(compileCmd),
    cl::cat(trainCategory));

cl::opt<bool> debugInfo("debug-info",
                        cl::desc("Print each op's location (its ONNX node)"),
                        cl::sub(importCmd), cl::sub(compileCmd),
                        cl::cat(category));
cl::opt<bool> elide("elide-weights",
                    cl::desc("Print large constants and weights as '...'"),
                    cl::init(true), cl::sub(importCmd), cl::sub(compileCmd),
                    cl::cat(category));

FailureOr<dtcc::onnx_frontend::ImportOptions> importOptions() {
  dtcc::onnx_frontend::ImportOptions options;
  options.loadWeights = !noWeights;
  if (std::string e = dtcc::readShapeFlags(
          inputShapes, dimSizes, options.inputShapes, options.dimSizes);
      !e.empty()) {
    llvm::errs() << "error: " << e << "\n";
    return failure();
  }
  for (const std::string &spec : bindings) {
    auto [name, file] = StringRef(spec).split('=');
    if (name.empty() || file.empty()) {
      llvm::errs() << "error: --bind expects NAME=FILE.pb, got '" << spec
                   << "'\n";
      return failure();
    }
    options.bindings[name.str()] = file.str();
  }
  return options;
}

/// Prints diagnostics as "error: node 'X' (Op): message", with notes; an
/// internal error (compiler/InternalErrors.h) as "dtcc: internal error: ...
/// (at ONNX node 'X')".
void printDiagnostic(Diagnostic &diag) {
  std::string message = diag.str();
  Location loc = diag.getLocation();
  if (StringRef(message).starts_with("dtcc: internal error")) {
    llvm::errs() << message;
    if (std::string node = dtcc::graph::nodeName(loc); !node.empty())
      llvm::errs() << " (at ONNX node '" << node << "')";
    llvm::errs() << "\n";
    for (Diagnostic &note : diag.getNotes())
      printDiagnostic(note);
    return;
  }
  switch (diag.getSeverity()) {
  case DiagnosticSeverity::Error: llvm::errs() << "error: "; break;
  case DiagnosticSeverity::Warning: llvm::errs() << "warning: "; break;
  case DiagnosticSeverity::Remark: llvm::errs() << "remark: "; break;
  case DiagnosticSeverity::Note: llvm::errs() << "note: "; break;
  }
  if (auto name = dyn_cast<NameLoc>(loc)) {
    if (!StringRef(message).starts_with("node '"))
      llvm::errs() << "'" << name.getName().getValue() << "': ";
  } else if (auto file = dyn_cast<FileLineColLoc>(loc)) {
    if (file.getLine() == 0)
      llvm::errs() << file.getFilename().getValue() << ": ";
  }
  llvm::errs() << message << "\n";
  for (Diagnostic &note : diag.getNotes())
    printDiagnostic(note);
}

LogicalResult printModule(ModuleOp module) {
  std::string error;
  auto out = openOutputFile(outputPath, &error);
  if (!out) {
    llvm::errs() << "error: " << error << "\n";
    return failure();
  }
  OpPrintingFlags flags;
  if (elide)
    flags.elideLargeElementsAttrs(16).elideLargeResourceString(64);
  if (debugInfo)
    flags.enableDebugInfo(/*enable=*/true, /*prettyForm=*/false);
  module->print(out->os(), flags);
  out->os() << "\n";
  out->keep();
  return success();
}

/// `dtcc compile --plan auto`: the chosen plan written into `options`;
/// `lowered` is the chosen candidate compiled to dexec when candidates
/// were compiled.
LogicalResult planAutomatically(ModuleOp module, dtcc::CompileOptions &options,
                                OwningOpRef<ModuleOp> &lowered) {
  auto fail = [](const dtcc::runtime::Status &status) {
    llvm::errs() << "error: --plan auto: " << status.message() << "\n";
    return failure();
  };
  auto cluster = dtcc::clusterForCompile(planCluster, planNodes, planRanks);
  if (!cluster.isOk())
    return fail(cluster.status());
  auto plan = dtcc::planForCompile(module, options, cluster.value(), planRanks,
                                   layoutSearchMode, inputPath);
  if (!plan.isOk())
    return fail(plan.status());
  llvm::errs() << plan.value().messages;
  if (!plan.value().chosen) {
    llvm::errs() << "error: --plan auto: no candidate plan fits\n";
    return failure();
  }
  lowered = std::move(plan.value().lowered);
  return success();
}

int runImportOrCompile(bool compile) {
  if (inputPath.empty()) {
    llvm::errs() << "error: no model given (see dtcc " << (compile ? "compile" : "import")
                 << " --help)\n";
    return 1;
  }
  auto options = importOptions();
  if (failed(options))
    return 1;
  dtcc::CompileOptions compileOptions;
  bool autoPlan = false;
  if (compile) {
    auto phase = dtcc::parsePhase(compileTo);
    if (!phase) {
      llvm::errs() << "error: unknown phase '" << compileTo
                   << "' for --compile-to (import, dgraph, train, shard, dexec, "
                      "program, executable)\n";
      return 1;
    }
    compileOptions.compileTo = *phase;
    compileOptions.printIrAfterAll = printIrAfterAll;
    compileOptions.dumpDir = dumpDir;
    compileOptions.runnerPath = runnerPath;
    compileOptions.target = target;
    if (fuse && noFuse) {
      llvm::errs() << "error: --fuse and --no-fuse contradict each other\n";
      return 1;
    }
    compileOptions.fuse = !noFuse;
    compileOptions.rowRegions = !noRowRegions;
    // Fused by default where the target's kernels can be generated here;
    // --fuse insists (and a missing linker is then an error).
    if (compileOptions.fuse && !fuse) {
      std::string why = dtcc::fusionUnavailable(target);
      if (!why.empty()) {
        llvm::errs() << "warning: compiling without fused regions: " << why
                     << "\n";
        compileOptions.fuse = false;
      }
    }
    if (matmulEpilogues && noMatmulEpilogues) {
      llvm::errs() << "error: --matmul-epilogues and --no-matmul-epilogues "
                      "contradict each other\n";
      return 1;
    }
    if (matmulEpilogues || noMatmulEpilogues)
      compileOptions.matmulEpilogues = bool(matmulEpilogues);
    compileOptions.stridedViews = !noStridedViews;
    compileOptions.halfWeightCopies = !noHalfWeightCopies;
    dtcc::TrainOptions &t = compileOptions.train;
    t.enabled = train;
    t.loss = lossSpec;
    t.frozen.assign(frozenNames.begin(), frozenNames.end());
    if (StringRef(recompute).starts_with("layers=")) {
      // layers=K: full recomputation of the first K layers of each stage.
      int64_t k = 0;
      if (StringRef(recompute).drop_front(7).getAsInteger(10, k) || k < 1) {
        llvm::errs() << "error: --recompute: expected layers=K with K >= 1, "
                        "got '"
                     << recompute << "'\n";
        return 1;
      }
      t.plan.recompute = "full";
      t.plan.recomputeLayers = k;
    } else {
      t.plan.recompute = recompute;
    }
    t.plan.offload = offload;
    t.plan.sequenceParallel = sequenceParallel;
    t.plan.virtualStages = virtualStages;
    t.fusedAttention = !noFusedAttention;
    t.optimizer = optimizerName;
    t.lr = lr;
    t.minLr = minLr;
    t.beta1 = beta1;
    t.beta2 = beta2;
    t.epsilon = adamEps;
    t.weightDecay = weightDecay;
    t.momentum = momentum;
    t.nesterov = nesterov;
    t.gradClip = gradClip;
    t.warmup = warmup;
    t.schedule = schedule;
    t.plan.microBatches = microBatches;
    t.exportGradients = exportGradients;
    t.dtype = computeDtype;
    if (normDtype != "half" && normDtype != "fp32") {
      llvm::errs() << "error: --norm-dtype: expected half or fp32, got '"
                   << normDtype << "'\n";
      return 1;
    }
    t.halfNorms = normDtype == "half";
    t.plan.gradReduce = gradReduce;
    if (!meshSpec.empty()) {
      // The one place the mesh is parsed: everything after reads its axes.
      auto mesh = dtcc::runtime::MeshShape::parse(meshSpec);
      if (!mesh.isOk()) {
        llvm::errs() << "error: --mesh: " << mesh.status().message() << "\n";
        return 1;
      }
      t.plan.mesh = std::move(mesh.value());
    }
    t.plan.zero = zeroStage;
    t.plan.schedule = pipelineSchedule;
    autoPlan = planMode == "auto" ||
               (planMode.empty() && meshSpec.empty() && planIn.empty() &&
                (planRanks > 0 || !planCluster.empty() || planNodes > 0));
    if (!planMode.empty() && planMode != "auto") {
      llvm::errs() << "error: --plan expects auto, got '" << planMode << "'\n";
      return 1;
    }
    if (!planIn.empty()) {
      if (autoPlan || !meshSpec.empty() || !train) {
        llvm::errs() << "error: --plan-in compiles a saved training plan "
                        "(--train) and replaces --mesh and --plan auto\n";
        return 1;
      }
      auto saved = dtcc::compilerPlanFromFile(planIn);
      if (!saved.isOk()) {
        llvm::errs() << "error: --plan-in: " << saved.status().message()
                     << "\n";
        return 1;
      }
      t.plan = std::move(saved.value());
    }
    if (autoPlan && (!meshSpec.empty() || !train)) {
      llvm::errs() << "error: --plan auto plans training (--train) and "
                      "replaces --mesh\n";
      return 1;
    }
    const std::string &search = layoutSearchMode;
    if (!search.empty() && search != "ilp" && search != "descent" &&
        search != "both" && search != "none") {
      llvm::errs() << "error: --layout-search expects ilp, descent, both or "
                      "none, got '"
                   << search << "'\n";
      return 1;
    }
    if ((search == "descent" || search == "both") && !autoPlan) {
      llvm::errs() << "error: --layout-search=" << search
                   << " compares the plans --plan auto compiles for a model "
                      "that is not a transformer the planner describes\n";
      return 1;
    }
    options->training = train;
    if (*phase >= dtcc::Phase::Program && outputPath == "-") {
      llvm::errs() << "error: give the output file with -o\n";
      return 1;
    }
  } else {
    compileOptions.compileTo = dtcc::Phase::Import;
  }

  DialectRegistry registry;
  dtcc::registerDtccDialects(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  context.printOpOnDiagnostic(false);
  // .mlir inputs get source-line diagnostics; ONNX ones node names.
  llvm::SourceMgr sourceMgr;
  std::unique_ptr<ScopedDiagnosticHandler> handler;
  if (StringRef(inputPath).ends_with(".mlir"))
    handler = std::make_unique<SourceMgrDiagnosticHandler>(sourceMgr, &context);
  else
    handler = std::make_unique<ScopedDiagnosticHandler>(
        &context, [](Diagnostic &d) {
          printDiagnostic(d);
          return success();
        });

  auto module = dtcc::loadModel(inputPath, context, *options);
  if (failed(module))
    return 1;
  OwningOpRef<ModuleOp> lowered;
  if (autoPlan &&
      failed(planAutomatically(**module, compileOptions, lowered)))
    return 1;
  dtcc::TrainOptions &t = compileOptions.train;
  if (compile && layoutSearchMode == "ilp" && !lowered && !t.plan.mesh.empty() &&
      !t.layoutSearch.enabled) {
    // A mesh (given, or the planner's): every op's tp sharding by the ILP,
    // priced with the cluster's figures.
    auto cluster =
        dtcc::clusterForCompile(planCluster, planNodes, t.plan.mesh.ranks());
    if (!cluster.isOk()) {
      llvm::errs() << "error: --plan auto: " << cluster.status().message()
                   << "\n";
      return 1;
    }
    t.layoutSearch =
        dtcc::layoutSearchFigures(dtcc::deviceFigures(cluster.value()), t.plan.mesh);
  }
  // The chosen candidate was compiled to dexec while it was priced: it is
  // the program, unless the phases before dexec are asked for (an earlier
  // --compile-to, --dump-dir, --print-ir-after-all), which compile the
  // chosen plan again.
  bool handOn = lowered && compileOptions.compileTo >= dtcc::Phase::Exec &&
                compileOptions.dumpDir.empty() &&
                !compileOptions.printIrAfterAll;
  if (handOn) {
    *module = std::move(lowered);
    llvm::errs() << "note: --plan auto: the chosen candidate, compiled while "
                    "it was priced, is the program\n";
  } else if (failed(dtcc::runPhases(**module, compileOptions)))
    return 1;
  if (compileOptions.compileTo <= dtcc::Phase::Exec)
    return failed(printModule(**module)) ? 1 : 0;
  return failed(dtcc::writeArtifact(**module, outputPath, compileOptions)) ? 1 : 0;
}

int runZoo() {
  auto family = dtcc::zoo::parseFamily(zooFamily);
  if (!family) {
    llvm::errs() << "error: expected a model family gpt, llama or mlp, got '"
                 << zooFamily << "'\n";
    return 1;
  }
  if (outputPath == "-") {
    llvm::errs() << "error: give the output file with -o\n";
    return 1;
  }
  dtcc::zoo::ZooOptions options;
  options.family = *family;
  options.layers = zooLayers;
  options.hidden = zooHidden;
  options.heads = zooHeads;
  options.kvHeads = zooKvHeads;
  options.ffnHidden = zooFfn;
  options.vocab = zooVocab;
  options.seq = zooSeq;
  options.batch = zooBatch;
  options.inputs = zooInputs;
  options.classes = zooClasses;
  options.ropeTheta = zooRopeTheta;
  options.normEps = zooNormEps;
  options.seed = zooSeed;
  options.weights = !noWeights;
  options.opset = zooOpset;
  options.tiedEmbeddings = zooTied;
  options.dropout = zooDropout;
  options.alibi = zooAlibi;
  if (!zooPreset.empty())
    if (std::string e = dtcc::zoo::applyPreset(options, zooPreset); !e.empty()) {
      llvm::errs() << "error: " << e << "\n";
      return 1;
    }
  if (std::string e = dtcc::zoo::validate(options); !e.empty()) {
    llvm::errs() << "error: " << e << "\n";
    return 1;
  }
  if (std::string e = dtcc::zoo::buildAndWriteModel(options, outputPath);
      !e.empty()) {
    llvm::errs() << "error: " << e << "\n";
    return 1;
  }
  llvm::outs() << "wrote " << outputPath << ": "
               << dtcc::zoo::describe(options) << ", "
               << dtcc::zoo::parameterCount(options) << " parameters"
               << (options.weights ? "" : " (shapes only)") << "\n";
  return 0;
}

/// The explain report, and with --cluster the program priced on it.
int explainWithCost(const dtcc::runtime::format::Program &program,
                    std::string_view data = {}) {
  llvm::outs() << dtcc::explainProgram(program, data);
  if (explainCluster.empty())
    return 0;
  auto cost = dtcc::explainProgramCost(program, explainCluster);
  if (!cost.isOk()) {
    llvm::errs() << "error: " << cost.status().message() << "\n";
    return 1;
  }
  llvm::outs() << "\n" << cost.value();
  return 0;
}

int runExplain() {
  if (explainPath.empty()) {
    llvm::errs() << "error: give a compiled program (dtcc compile ... -o "
                    "train) or an .mlir file: dtcc explain train\n";
    return 1;
  }
  if (!StringRef(explainPath).ends_with(".mlir")) {
    auto loaded = dtcc::runtime::LoadedProgram::open(explainPath);
    if (!loaded.isOk()) {
      llvm::errs() << "error: " << loaded.status().message() << "\n";
      return 1;
    }
    const dtcc::runtime::LoadedProgram &p = *loaded.value();
    return explainWithCost(
        p.program(), std::string_view(reinterpret_cast<const char *>(p.data()),
                                      p.dataSize()));
  }
  DialectRegistry registry;
  dtcc::registerDtccDialects(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler handler(sourceMgr, &context);
  dtcc::onnx_frontend::ImportOptions options;
  auto module = dtcc::loadModel(explainPath, context, options);
  if (failed(module))
    return 1;
  auto program = dtcc::programToExplain(**module);
  if (failed(program))
    return 1;
  return explainWithCost(*program);
}

int runOps() {
  auto ops = dtcc::onnx_frontend::supportedOps();
  size_t width = 0;
  for (auto &[op, opset] : ops)
    width = std::max(width, op.size());
  for (auto &[op, opset] : ops)
    llvm::outs() << llvm::left_justify(op, width + 1) << "from opset " << opset
                 << "\n";
  return 0;
}

} // namespace

std::string
dtcc::readShapeFlags(const std::vector<std::string> &inputShapes,
                     const std::vector<std::string> &dims,
                     std::map<std::string, std::vector<int64_t>> &shapes,
                     std::map<std::string, int64_t> &dimSizes) {
  for (const std::string &spec : inputShapes) {
    auto [name, rest] = StringRef(spec).split('=');
    if (name.empty() || !StringRef(spec).contains('='))
      return "--input-shape expects NAME=D0xD1x..., got '" + spec + "'";
    SmallVector<StringRef> parts;
    if (!rest.empty())
      rest.split(parts, 'x');
    std::vector<int64_t> &out = shapes[name.str()];
    out.clear();
    for (StringRef p : parts) {
      int64_t d;
      if (p.getAsInteger(10, d) || d < 0)
        return ("--input-shape for '" + name + "' has a bad dimension '" + p +
                "'")
            .str();
      out.push_back(d);
    }
  }
  for (const std::string &spec : dims) {
    auto [name, size] = StringRef(spec).split('=');
    int64_t n;
    if (name.empty() || size.getAsInteger(10, n) || n < 0)
      return "--dim expects NAME=N (a symbolic dimension's name and its "
             "size), got '" +
             spec + "'";
    dimSizes[name.str()] = n;
  }
  return "";
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  dtcc::installInternalErrorHandlers("dtcc");
  // calibrate's arguments, --help included, are the measuring tool's.
  if (argc > 1 && llvm::StringRef(argv[1]) == "calibrate")
    return dtcc::runCalibrateCommand(argc - 1, argv + 1);
  // run's arguments are the executable's supervisor's.
  if (argc > 1 && llvm::StringRef(argv[1]) == "run")
    return dtcc::runRunCommand(argc - 1, argv + 1);
  // A command's option with no command before it (`dtcc --heads 6`) is
  // refused: LLVM would read "--heads" as the grouped short options -h
  // (help) -e -a ..., print the overview and exit with 0.
  if (argc > 1 && argv[1][0] == '-') {
    llvm::StringRef flag = llvm::StringRef(argv[1]).ltrim('-');
    if (flag != "h" && !flag.starts_with("help") && flag != "version" &&
        !flag.starts_with("print-")) {
      llvm::errs() << "dtcc: no command before '" << argv[1]
                   << "': options follow a command, as in dtcc zoo gpt "
                      "--heads 6 (dtcc --help lists the commands)\n";
      return 1;
    }
  }
  cl::HideUnrelatedOptions(category, importCmd);
  cl::HideUnrelatedOptions({&category, &trainCategory}, compileCmd);
  cl::HideUnrelatedOptions({&category, &zooCategory}, zooCmd);
  cl::HideUnrelatedOptions(category, explainCmd);
  cl::HideUnrelatedOptions(category, opsCmd);
  dtcc::hideOptionsUnrelatedToPlan();
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(
      argc, argv,
      "dtcc: a distributed-training compiler\n\n"
      "  dtcc import model.onnx             print the model in dgraph\n"
      "  dtcc compile model.onnx -o model   build an executable; run ./model --help\n"
      "  dtcc compile model.onnx --train -o train   build a training executable\n"
      "  dtcc zoo gpt --layers 2 -o gpt.onnx   write a GPT, Llama or MLP model\n"
      "  dtcc ops                           list the supported ONNX ops\n"
      "  dtcc plan model.onnx --nodes 8 --global-batch 512   choose a plan\n"
      "  dtcc calibrate -o cluster.json     measure this machine for the planner\n"
      "  dtcc calibrate --device cuda -o gpu.json   measure its GPUs (cuBLASLt, NCCL)\n"
      "  dtcc explain train                 shardings and collectives of a program\n"
      "  dtcc run ./train --data t.bin --checkpoint-dir ckpt --save-every 100\n"
      "                                     train under the supervisor (restarts)\n"
      "\n  dtcc <command> --help lists a command's options\n");
  if (importCmd)
    return runImportOrCompile(false);
  if (compileCmd)
    return runImportOrCompile(true);
  if (opsCmd)
    return runOps();
  if (zooCmd)
    return runZoo();
  if (explainCmd)
    return runExplain();
  if (dtcc::planCommand)
    return dtcc::runPlanCommand();
  cl::PrintHelpMessage();
  return 1;
}
