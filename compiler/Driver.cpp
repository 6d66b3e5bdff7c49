//===- Driver.cpp - the phases behind the dtcc command --------------------===//

#include "compiler/Driver.h"

#include "compiler/InternalErrors.h"
#include "compiler/Serialize.h"
#include "dialects/Exec/IR/ExecOps.h"
#include "dialects/Graph/IR/GraphOps.h"
#include "dialects/Shard/IR/ShardOps.h"
#include "passes/Graph/Passes.h"
#include "passes/Lowering/Passes.h"
#include "passes/Sharding/Passes.h"
#include "passes/Sharding/ShardingUtils.h"
#include "runtime/format/Container.h"

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

void registerDtccDialects(DialectRegistry &registry) {
  registry.insert<graph::GraphDialect, shard::ShardDialect, exec::ExecDialect,
                  func::FuncDialect>();
}

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

LogicalResult runPhases(ModuleOp module, const CompileOptions &options) {
  MLIRContext *ctx = module.getContext();
  if (failed(dump(module, options, 0, "import")))
    return failure();
  // An .mlir input may already be lowered; then there is nothing to run.
  bool lowered = module->hasAttr("dexec.workspace_bytes");
  auto run = [&](llvm::function_ref<void(PassManager &)> build, int index,
                 llvm::StringRef phase) -> LogicalResult {
    PassManager pm(ctx);
    instrumentPassManager(pm);
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
  if (options.startAfter < Phase::Graph && failed(run(
          [](PassManager &pm) {
            pm.addPass(createCanonicalizerPass());
            pm.addPass(createCSEPass());
          },
          1, "dgraph")))
    return failure();
  if (options.compileTo == Phase::Graph)
    return success();
  // Pipeline parallelism unrolls the step over its micro-batches before the
  // optimizer and cuts it into stages after it.
  // The pipeline pass's stages and the mesh's pp axis come from this one
  // mesh (dtcc-shard-annotate checks that they agree).
  const int64_t stages = options.train.mesh.size("pp");
  {
    if (options.train.layoutSearch.enabled && stages > 1)
      return module.emitError("the tp layout search places steps without "
                              "pipeline stages, got pp=")
             << stages;
  }
  if (options.train.enabled && options.startAfter < Phase::Train) {
    const TrainOptions &t = options.train;
    if (failed(run(
            [&](PassManager &pm) {
              graph::AutodiffOptions ad;
              ad.loss = t.loss;
              ad.frozen.assign(t.frozen.begin(), t.frozen.end());
              ad.recompute = t.recompute;
              pm.addPass(graph::createAutodiff(ad));
              if (t.dtype != "fp32") {
                graph::MixedPrecisionOptions mp;
                mp.dtype = t.dtype;
                pm.addPass(graph::createMixedPrecision(mp));
              }
              if (stages > 1) {
                shard::ShardMicrobatchOptions mb;
                mb.microBatches = t.microBatches;
                pm.addPass(shard::createShardMicrobatch(mb));
              }
              graph::OptimizerOptions opt;
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
              opt.microBatches = stages > 1 ? 1 : t.microBatches;
              opt.exportGradients = t.exportGradients;
              pm.addPass(graph::createOptimizer(opt));
              pm.addPass(createCanonicalizerPass());
              pm.addPass(createCSEPass());
            },
            2, "train")))
      return failure();
  }
  if (options.compileTo == Phase::Train)
    return success();
  if (!options.train.mesh.empty()) {
    if (!options.train.enabled)
      return module.emitError("--mesh places a training step: add --train");
    if (failed(run(
            [&](PassManager &pm) {
              if (stages > 1) {
                shard::ShardPipelineOptions pipe;
                pipe.stages = stages;
                pipe.scheduleKind = options.train.pipelineSchedule;
                pm.addPass(shard::createShardPipeline(pipe));
                pm.addPass(createCanonicalizerPass());
              }
              const TrainOptions::LayoutSearch &search =
                  options.train.layoutSearch;
              if (search.enabled && stages == 1) {
                shard::ShardSearchLayoutsOptions o;
                o.mesh = options.train.mesh.str();
                o.flops = search.flops;
                o.bandwidth = search.busBandwidth;
                o.latency = search.latency;
                o.memoryBandwidth = search.memoryBandwidth;
                o.tpBandwidth = search.tpBusBandwidth;
                o.tpLatency = search.tpLatency;
                o.dpBandwidth = search.dpBusBandwidth;
                o.dpLatency = search.dpLatency;
                o.timeLimit = search.timeLimit;
                pm.addPass(shard::createShardSearchLayouts(o));
              }
              shard::ShardAnnotateOptions annotate;
              annotate.mesh = options.train.mesh.str();
              annotate.zero = options.train.zero;
              annotate.layouts.assign(options.train.layouts.begin(),
                                      options.train.layouts.end());
              pm.addPass(shard::createShardAnnotate(annotate));
              pm.addPass(shard::createShardPropagate());
              pm.addPass(shard::createShardPartition());
              pm.addPass(createCanonicalizerPass());
              pm.addPass(createCSEPass());
              pm.addPass(shard::createShardCombineAllReduces());
              pm.addPass(shard::createShardOverlap());
            },
            3, "shard")))
      return failure();
  }
  if (options.compileTo == Phase::Shard)
    return success();
  return run([](PassManager &pm) { pm.addPass(lowering::createLowerToExec()); },
             4, "dexec");
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

LogicalResult writeArtifact(ModuleOp module, const std::string &outPath,
                            const CompileOptions &options) {
  if (options.target != "cpu" && options.target != "cuda")
    return module.emitError("unknown --target '")
           << options.target << "': expected cpu or cuda";
  auto serialized = serializeProgram(module);
  if (failed(serialized))
    return failure();
  if (options.target != "cpu")
    (*serialized->program.mutable_metadata())["dtcc.target"] = options.target;
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
