//===- Phases.cpp - the pass pipeline of each compile phase ---------------===//

#include "passes/Pipelines/Phases.h"

#include "passes/Lowering/Passes.h"

#include "mlir/Pass/PassOptions.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

namespace dtcc::pipelines {

void buildGraphPhase(OpPassManager &pm) {
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

void buildTrainPhase(OpPassManager &pm, const TrainPhase &o) {
  // Layers for recomputation and pipelines where node names gave none;
  // a pipeline of a model without repeated layers cuts between pieces.
  graph::MarkLayersOptions layers;
  layers.parts = o.stages > 1;
  pm.addPass(graph::createMarkLayers(layers));
  pm.addPass(graph::createAutodiff(o.autodiff));
  if (o.dtype != "fp32") {
    graph::MixedPrecisionOptions mp;
    mp.dtype = o.dtype;
    pm.addPass(graph::createMixedPrecision(mp));
  }
  if (o.stages > 1) {
    shard::ShardMicrobatchOptions mb;
    mb.microBatches = o.microBatches;
    pm.addPass(shard::createShardMicrobatch(mb));
  }
  graph::OptimizerOptions opt = o.optimizer;
  opt.microBatches = o.stages > 1 ? 1 : o.microBatches;
  pm.addPass(graph::createOptimizer(opt));
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

void buildShardPhase(OpPassManager &pm, const ShardPhase &o) {
  const int64_t stages = o.mesh.size("pp");
  if (stages > 1) {
    shard::ShardPipelineOptions pipe;
    pipe.stages = stages;
    pipe.scheduleKind = o.pipelineSchedule;
    pm.addPass(shard::createShardPipeline(pipe));
    pm.addPass(createCanonicalizerPass());
  }
  if (o.layoutSearch && stages == 1) {
    shard::ShardSearchLayoutsOptions search = *o.layoutSearch;
    search.mesh = o.mesh.str();
    pm.addPass(shard::createShardSearchLayouts(search));
  }
  shard::ShardAnnotateOptions annotate;
  annotate.mesh = o.mesh.str();
  annotate.zero = o.zero;
  annotate.layouts.assign(o.layouts.begin(), o.layouts.end());
  pm.addPass(shard::createShardAnnotate(annotate));
  pm.addPass(shard::createShardPropagate());
  pm.addPass(shard::createShardPartition());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  pm.addPass(shard::createShardCombineAllReduces());
  pm.addPass(shard::createShardOverlap());
}

void buildExecPhase(OpPassManager &pm) {
  pm.addPass(lowering::createLowerToExec());
}

namespace {

/// dtcc compile's training options, as dtcc-phase-train takes them
/// (defaults from TrainPhase, the passes' own).
struct TrainPhaseOptions : PassPipelineOptions<TrainPhaseOptions> {
  Option<std::string> loss{*this, "loss",
                           llvm::cl::desc("The loss output (default: the "
                                          "model's only scalar output)")};
  ListOption<std::string> frozen{*this, "frozen",
                                 llvm::cl::desc("Variables not trained")};
  Option<std::string> recompute{*this, "recompute",
                                llvm::cl::init(TrainPhase().autodiff.recompute),
                                llvm::cl::desc("none or full")};
  Option<std::string> dtype{*this, "dtype", llvm::cl::init(TrainPhase().dtype),
                            llvm::cl::desc("fp32, bf16 or fp16")};
  Option<std::string> optimizer{
      *this, "optimizer", llvm::cl::init(TrainPhase().optimizer.optimizer),
      llvm::cl::desc("adamw or sgd")};
  Option<double> lr{*this, "lr", llvm::cl::init(TrainPhase().optimizer.lr),
                    llvm::cl::desc("Learning rate")};
  Option<int64_t> microBatches{*this, "micro-batches",
                               llvm::cl::init(TrainPhase().microBatches),
                               llvm::cl::desc("Micro-batches per step")};
  Option<int64_t> stages{
      *this, "pipeline-stages", llvm::cl::init(TrainPhase().stages),
      llvm::cl::desc("The mesh's pp: more than 1 unrolls the micro-batches")};
};

/// dtcc compile's mesh options, as dtcc-phase-shard takes them.
struct ShardPhaseOptions : PassPipelineOptions<ShardPhaseOptions> {
  Option<std::string> mesh{*this, "mesh",
                           llvm::cl::desc("The device mesh, e.g. dp=2,tp=2")};
  Option<int> zero{*this, "zero", llvm::cl::init(ShardPhase().zero),
                   llvm::cl::desc("ZeRO stage over dp (0-3)")};
  ListOption<std::string> layouts{
      *this, "layouts", llvm::cl::desc("NAME=rows|cols|whole overrides")};
  Option<std::string> schedule{*this, "pipeline-schedule",
                               llvm::cl::init(ShardPhase().pipelineSchedule),
                               llvm::cl::desc("gpipe or 1f1b (with pp)")};
};

} // namespace

void registerPhasePipelines() {
  PassPipelineRegistration<>(
      "dtcc-phase-graph", "dtcc compile's dgraph phase (canonicalize, CSE)",
      [](OpPassManager &pm) { buildGraphPhase(pm); });
  PassPipelineRegistration<TrainPhaseOptions>(
      "dtcc-phase-train",
      "dtcc compile's train phase: autodiff, mixed precision, micro-batches, "
      "optimizer",
      [](OpPassManager &pm, const TrainPhaseOptions &o) {
        TrainPhase t;
        t.autodiff.loss = o.loss;
        t.autodiff.frozen.assign(o.frozen.begin(), o.frozen.end());
        t.autodiff.recompute = o.recompute;
        t.dtype = o.dtype;
        t.stages = o.stages;
        t.microBatches = o.microBatches;
        t.optimizer.optimizer = o.optimizer;
        t.optimizer.lr = o.lr;
        buildTrainPhase(pm, t);
      });
  PassPipelineRegistration<ShardPhaseOptions>(
      "dtcc-phase-shard",
      "dtcc compile's shard phase: pipeline stages, annotation, propagation, "
      "partition, overlap (a bad mesh is the annotation's error)",
      [](OpPassManager &pm, const ShardPhaseOptions &o) {
        auto mesh = runtime::MeshShape::parse(o.mesh.getValue());
        if (!mesh.isOk()) {
          // Nothing to place: annotation reports the spelling at the module.
          shard::ShardAnnotateOptions annotate;
          annotate.mesh = o.mesh.getValue();
          pm.addPass(shard::createShardAnnotate(annotate));
          return;
        }
        ShardPhase s;
        s.mesh = std::move(mesh.value());
        s.zero = o.zero;
        s.layouts.assign(o.layouts.begin(), o.layouts.end());
        s.pipelineSchedule = o.schedule;
        buildShardPhase(pm, s);
      });
  PassPipelineRegistration<>(
      "dtcc-phase-dexec", "dtcc compile's dexec phase (lowering)",
      [](OpPassManager &pm) { buildExecPhase(pm); });
}

} // namespace dtcc::pipelines
