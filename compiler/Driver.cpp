//===- Driver.cpp - the phases behind the dtcc command --------------------===//

#include "compiler/Driver.h"

#include "compiler/InternalErrors.h"
#include "compiler/Serialize.h"
#include "compiler/Timing.h"
#include "compiler/codegen/CpuCodegen.h"
#include "compiler/codegen/GpuCodegen.h"
#include "dialects/Exec/IR/ExecOps.h"
#include "dialects/Graph/IR/GraphOps.h"
#include "dialects/Shard/IR/ShardOps.h"
#include "passes/Graph/Passes.h"
#include "passes/Lowering/Passes.h"
#include "passes/Pipelines/Phases.h"
#include "runtime/device/cpu/AttentionPlan.h"
#include "runtime/format/Container.h"
#include "runtime/format/ProgramMetadata.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace dtcc {

std::optional<Phase> parsePhase(llvm::StringRef name) {
  return llvm::StringSwitch<std::optional<Phase>>(name)
      .Case("import", Phase::Import)
      .Case("dgraph", Phase::Graph)
      .Case("train", Phase::Train)
      .Case("shard", Phase::Shard)
      .Case("dexec", Phase::Exec)
      .Case("program", Phase::Program)
      .Case("executable", Phase::Executable)
      .Default(std::nullopt);
}

FailureOr<OwningOpRef<ModuleOp>>
loadModel(const std::string &path, MLIRContext &context,
          const onnx_frontend::ImportOptions &options) {
  if (llvm::StringRef(path).ends_with(".mlir")) {
    OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(path, &context);
    if (!module)
      return failure();
    return module;
  }
  return onnx_frontend::importOnnxFile(path, &context, options);
}

/// Writes the module to the dump directory as NN-<phase>.mlir.
static LogicalResult dump(ModuleOp module, const CompileOptions &options,
                          int index, llvm::StringRef phase) {
  if (options.dumpDir.empty())
    return success();
  if (std::error_code ec = llvm::sys::fs::create_directories(options.dumpDir))
    return module.emitError("cannot create '")
           << options.dumpDir << "': " << ec.message();
  std::string path = (llvm::Twine(options.dumpDir) + "/" +
                      llvm::Twine(index).concat("-") + phase + ".mlir")
                         .str();
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (ec)
    return module.emitError("cannot write '") << path << "': " << ec.message();
  OpPrintingFlags flags;
  flags.elideLargeElementsAttrs(64).elideLargeResourceString(64);
  module->print(os, flags);
  return success();
}

static LogicalResult runPhasesOnce(ModuleOp module,
                                   const CompileOptions &options);

LogicalResult runPhases(ModuleOp module, const CompileOptions &options) {
  if (failed(runPhasesOnce(module, options)))
    return failure();
  if (options.verifyEachPass)
    return success();
  mlir::TimingScope timing =
      compilerTiming().nest("verify the compiled module");
  return verify(module);
}

static LogicalResult runPhasesOnce(ModuleOp module,
                                   const CompileOptions &options) {
  MLIRContext *ctx = module.getContext();
  if (failed(dump(module, options, 0, "import")))
    return failure();
  // An .mlir input may already be lowered; then there is nothing to run.
  bool lowered = module->hasAttr("dexec.workspace_bytes");
  auto run = [&](llvm::function_ref<void(PassManager &)> build, int index,
                 llvm::StringRef phase) -> LogicalResult {
    PassManager pm(ctx);
    pm.enableVerifier(options.verifyEachPass);
    // MLIR times a pass under its parent by the pass's address, which a
    // later compile's pass may reuse (each compile frees its passes): its
    // time would be added to the earlier pass's name. Each run's passes
    // nest in a scope of their own, "<phase> phase" (the sum of the
    // phase's passes in the report).
    mlir::TimingScope timing = nestedCompilerTiming(phase.str() + " phase");
    instrumentPassManager(pm, /*useActions=*/true, &timing);
    if (options.printIrAfterAll) {
      ctx->disableMultithreading();
      pm.enableIRPrinting();
    }
    build(pm);
    if (failed(pm.run(module)))
      return failure();
    return dump(module, options, index, phase);
  };
  if (options.compileTo == Phase::Import || lowered)
    return success();
  if (options.startAfter < Phase::Graph &&
      failed(run([](PassManager &pm) { pipelines::buildGraphPhase(pm); }, 1,
                 "dgraph")))
    return failure();
  if (options.compileTo == Phase::Graph)
    return success();
  // Both phases write the one plan (dshard.plan) before their passes read
  // it: the train phase its recomputation and micro-batches (a pipeline
  // unrolls them before the optimizer and cuts the stages after it), the
  // shard phase the rest; a step trained once and sharded by each of a
  // plan search's candidates gets the candidate's plan there.
  const TrainOptions &t = options.train;
  const planning::Plan &plan = t.plan;
  if (t.layoutSearch.enabled && plan.pipelineStages() > 1)
    return module.emitError("the tp layout search places steps without "
                            "pipeline stages, got pp=")
           << plan.pipelineStages();
  if (t.enabled && options.startAfter < Phase::Train) {
    pipelines::TrainPhase train;
    train.autodiff.loss = t.loss;
    train.autodiff.frozen.assign(t.frozen.begin(), t.frozen.end());
    train.dtype = t.dtype;
    train.halfNorms = t.halfNorms;
    // The kernels of both targets take every float type (the CPU's compute
    // half types in f32); the CUDA kernels up to a head dimension.
    train.fuseAttention = t.fusedAttention;
    if (options.target == "cuda")
      train.fuseAttentionMaxHeadDim = runtime::cpu::kCudaAttentionMaxHeadDim;
    graph::OptimizerOptions &opt = train.optimizer;
    opt.optimizer = t.optimizer;
    opt.lr = t.lr;
    opt.minLr = t.minLr;
    opt.beta1 = t.beta1;
    opt.beta2 = t.beta2;
    opt.epsilon = t.epsilon;
    opt.weightDecay = t.weightDecay;
    opt.momentum = t.momentum;
    opt.dampening = t.dampening;
    opt.nesterov = t.nesterov;
    opt.gradClip = t.gradClip;
    opt.warmup = t.warmup;
    opt.schedule = t.schedule;
    opt.exportGradients = t.exportGradients;
    if (failed(run(
            [&](PassManager &pm) {
              pipelines::buildTrainPhase(pm, plan, train);
            },
            2, "train")))
      return failure();
  }
  if (options.compileTo == Phase::Train)
    return success();
  if (!plan.mesh.empty()) {
    if (!t.enabled)
      return module.emitError("--mesh places a training step: add --train");
    pipelines::ShardPhase shardPhase;
    shardPhase.halfWeightCopies = options.halfWeightCopies;
    if (t.layoutSearch.enabled) {
      const TrainOptions::LayoutSearch &search = t.layoutSearch;
      planning::PlanSearchLayoutsOptions o;
      o.flops = search.flops;
      o.bandwidth = search.busBandwidth;
      o.latency = search.latency;
      o.memoryBandwidth = search.memoryBandwidth;
      o.tpBandwidth = search.tpBusBandwidth;
      o.tpLatency = search.tpLatency;
      o.dpBandwidth = search.dpBusBandwidth;
      o.dpLatency = search.dpLatency;
      o.timeLimit = search.timeLimit;
      shardPhase.layoutSearch = o;
    }
    if (failed(run(
            [&](PassManager &pm) {
              pipelines::buildShardPhase(pm, plan, shardPhase);
            },
            3, "shard")))
      return failure();
  }
  if (options.compileTo == Phase::Shard)
    return success();
  // The CUDA AdamW kernel updates f32 master weights (its multi-tensor
  // launch); SGD takes f32 and f64, as on the CPU.
  if (options.target == "cuda") {
    graph::AdamwOp wide;
    module.walk([&](graph::AdamwOp op) {
      if (!wide &&
          !cast<ShapedType>(op.getParam().getType()).getElementType().isF32())
        wide = op;
    });
    if (wide)
      return wide.emitError("--target cuda updates f32 parameters with "
                            "AdamW, got ")
             << wide.getParam().getType()
             << ": train this model with --optimizer sgd on the GPU, or on "
                "--target cpu";
  }
  pipelines::ExecPhase exec;
  exec.fuse = options.fuse;
  // Row regions on both targets: the CPU's in its kernels' order, CUDA's
  // in the parallel row form (a block of threads per row).
  exec.fuseRows = options.rowRegions;
  exec.parallelRows = options.target == "cuda";
  exec.stridedViews = options.stridedViews;
  exec.matmulEpilogues =
      options.matmulEpilogues.value_or(options.target == "cuda");
  // Mixed precision's casts of the master weights re-read them all at
  // every step (and on a GPU are a launch per weight); persistent copies
  // that the update kernels write keep them out of the step
  // (dtcc-shard-annotate makes such copies for ZeRO-1/2 on a mesh; the pass
  // keeps those).
  exec.halfWeightCopies =
      t.enabled && options.halfWeightCopies && t.dtype != "fp32";
  return run([&](PassManager &pm) { pipelines::buildExecPhase(pm, exec); }, 4,
             "dexec");
}

std::string defaultRunnerPath(llvm::StringRef target) {
  if (auto env = llvm::sys::Process::GetEnv("DTCC_RUNNER"))
    return *env;
  std::string self = llvm::sys::fs::getMainExecutable(
      nullptr, reinterpret_cast<void *>(&defaultRunnerPath));
  llvm::SmallString<256> path(llvm::sys::path::parent_path(self));
  llvm::sys::path::append(path, target == "cuda" ? "dtcc-runner-cuda" : "dtcc-runner");
  return path.str().str();
}

std::string fusionUnavailable(llvm::StringRef target) {
  if (target == "cpu" && codegen::findCpuLinker().empty())
    return "ld.lld was not found (install Debian's lld-22 or set DTCC_LLD)";
  return "";
}

/// The fused regions' kernels for the CPU: a shared object.
static FailureOr<std::string> compileCpuKernels(ModuleOp kernels,
                                                const CompileOptions &options) {
  codegen::CpuCodegenOptions codegenOptions;
  codegenOptions.dumpDir = options.dumpDir;
  return codegen::compileCpuKernels(kernels, codegenOptions);
}

/// The fused regions' kernels for CUDA: a serialized GpuKernelModule (PTX
/// per architecture, and cubins where ptxas was found at configure time).
/// Code generation rewrites the module it is given, so it gets a copy.
static FailureOr<std::string> compileGpuKernels(ModuleOp kernels,
                                                const CompileOptions &options) {
  OwningOpRef<ModuleOp> copy(cast<ModuleOp>(kernels->clone()));
  copy->setSymNameAttr(nullptr);
  FailureOr<runtime::GpuKernelModule> generated =
      codegen::generateGpuKernels(*copy, codegen::GpuCodegenOptions());
  if (failed(generated))
    return failure();
  if (!options.dumpDir.empty())
    for (const runtime::GpuKernelImage &image : generated->images)
      if (failed(codegen::writeDumpFile(
              kernels, options.dumpDir, "kernels." + image.chip + ".ptx",
              [&](llvm::raw_ostream &os) { os << image.ptx; })))
        return failure();
  return runtime::serializeGpuKernelModule(*generated);
}

LogicalResult writeArtifact(ModuleOp module, const std::string &outPath,
                            const CompileOptions &options) {
  if (options.target != "cpu" && options.target != "cuda")
    return module.emitError("unknown --target '")
           << options.target << "': expected cpu or cuda";
  auto serialized = serializeProgram(module);
  if (failed(serialized))
    return failure();
  // The fused regions' kernels, generated for the target, in the data
  // section: a shared object for the CPU, PTX and cubins for CUDA.
  // --dump-dir also gets the region functions as the fusion pass made them.
  if (ModuleOp kernels = codegen::findKernelsModule(module)) {
    if (!options.dumpDir.empty() &&
        failed(codegen::writeDumpFile(
            kernels, options.dumpDir, "kernels.mlir",
            [&](llvm::raw_ostream &os) { kernels.print(os); })))
      return failure();
    const bool cpu = options.target == "cpu";
    FailureOr<std::string> code = cpu ? compileCpuKernels(kernels, options)
                                      : compileGpuKernels(kernels, options);
    if (failed(code))
      return failure();
    std::string &data = serialized->data;
    data.resize((data.size() + 63) / 64 * 64, '\0');
    runtime::format::DataRef *ref =
        cpu ? serialized->program.mutable_cpu_kernels()
            : serialized->program.mutable_gpu_kernels();
    ref->set_offset(data.size());
    ref->set_size(code->size());
    data += *code;
  }
  if (options.target != "cpu") {
    (*serialized->program.mutable_metadata())[runtime::metadata::kTarget] = options.target;
    recordTraffic(serialized->program); // NCCL reduces halves as they are
  }
  std::string runner;
  if (options.compileTo == Phase::Executable) {
    runner = options.runnerPath.empty() ? defaultRunnerPath(options.target)
                                        : options.runnerPath;
    if (!llvm::sys::fs::exists(runner))
      return module.emitError("cannot find the runtime runner '")
             << runner << "'"
             << (options.target == "cuda"
                     ? " (dtcc was built without the CUDA backend: it needs "
                       "the CUDA toolkit with cuBLASLt and NCCL)"
                     : " (set DTCC_RUNNER or pass --runner)");
  }
  runtime::Status status =
      runtime::writeContainer(outPath, runner, serialized->program, serialized->data);
  if (!status.isOk())
    return module.emitError(status.message());
  return success();
}

} // namespace dtcc
