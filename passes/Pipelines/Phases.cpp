//===- Phases.cpp - the pass pipeline of each compile phase ---------------===//

#include "passes/Pipelines/Phases.h"

#include "passes/Lowering/Passes.h"
#include "runtime/base/MeshShape.h"

#include "mlir/Pass/PassOptions.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/StringExtras.h"

using namespace mlir;

namespace dtcc::pipelines {

/// MLIR's canonicalizer without its region simplification, in one sweep:
/// dtcc's graphs are single-block functions (none of its ops has a region),
/// where the greedy driver's folding and dead-op removal do all there is to
/// do, and the region pass's liveness analysis and block walks took 45% of
/// the canonicalizer's time on a pipeline's unrolled step. The driver's
/// worklist takes in every op a rewrite touches, so a second sweep over
/// the module (the default whenever the first changed anything) found
/// nothing: the programs of 23 PyTorch-exported and zoo models under 10
/// meshes, dtypes and recomputations, CPU and CUDA, are the same with one
/// sweep but for the order of their constants, and it was half the
/// canonicalizer's time (Megatron-LM's 145B row priced: 1.6-2.1 -> 0.8 s).
static std::unique_ptr<Pass> createCanonicalizer() {
  return createCanonicalizerPass(
      GreedyRewriteConfig()
          .setRegionSimplificationLevel(GreedySimplifyRegionLevel::Disabled)
          .setMaxIterations(1));
}

/// The train phase after its plan is written.
static void addTrainPasses(OpPassManager &pm, int64_t stages,
                           const TrainPhase &o) {
  // Layers for recomputation and pipelines where node names gave none;
  // a pipeline of a model without repeated layers cuts between pieces.
  graph::MarkLayersOptions layers;
  layers.parts = stages > 1;
  pm.addPass(graph::createMarkLayers(layers));
  if (o.fuseAttention) {
    graph::FuseAttentionOptions fuse;
    fuse.frozen = o.autodiff.frozen;
    fuse.maxHeadDim = o.fuseAttentionMaxHeadDim;
    pm.addPass(graph::createFuseAttention(fuse));
  }
  pm.addPass(graph::createAutodiff(o.autodiff));
  if (o.dtype != "fp32") {
    graph::MixedPrecisionOptions mp;
    mp.dtype = o.dtype;
    mp.halfNorms = o.halfNorms;
    // A pipeline sums the gradient terms of its stages after the
    // micro-batches: each term is widened apart.
    mp.widenTerms = stages > 1;
    pm.addPass(graph::createMixedPrecision(mp));
  }
  // A pipeline (the plan's pp > 1) unrolls its micro-batches in the step;
  // the optimizer accumulates them otherwise (both read the plan).
  if (stages > 1)
    pm.addPass(shard::createShardMicrobatch());
  pm.addPass(graph::createOptimizer(o.optimizer));
  pm.addPass(createCanonicalizer());
  pm.addPass(createCSEPass());
}

/// The shard phase after its plan (with pp = `stages`) is written.
static void addShardPasses(OpPassManager &pm, int64_t stages,
                           const ShardPhase &o) {
  if (stages > 1) {
    pm.addPass(shard::createShardPipeline());
    // recompute_layers = K: the first K layers of each stage recompute.
    pm.addPass(graph::createRecomputeLayers());
    pm.addPass(createCanonicalizer());
  }
  if (o.layoutSearch && stages == 1)
    pm.addPass(planning::createPlanSearchLayouts(*o.layoutSearch));
  shard::ShardAnnotateOptions annotate;
  annotate.halfWeightCopies = o.halfWeightCopies;
  pm.addPass(shard::createShardAnnotate(annotate));
  pm.addPass(shard::createShardPropagate());
  pm.addPass(shard::createShardPartition());
  pm.addPass(createCanonicalizer());
  pm.addPass(createCSEPass());
  pm.addPass(shard::createShardCombineAllReduces());
  pm.addPass(shard::createShardOverlap());
  pm.addPass(shard::createShardBucket());
}

void buildGraphPhase(OpPassManager &pm) {
  pm.addPass(createCanonicalizer());
  pm.addPass(createCSEPass());
}

void buildTrainPhase(OpPassManager &pm, const planning::Plan &plan,
                     const TrainPhase &o) {
  pm.addPass(planning::createPlanSet(plan));
  addTrainPasses(pm, plan.pipelineStages(), o);
}

void buildShardPhase(OpPassManager &pm, const planning::Plan &plan,
                     const ShardPhase &o) {
  pm.addPass(planning::createPlanSet(plan));
  addShardPasses(pm, plan.pipelineStages(), o);
}

void buildExecPhase(OpPassManager &pm, const ExecPhase &options) {
  if (options.halfWeightCopies)
    pm.addPass(shard::createShardHalfWeightCopies());
  if (options.stridedViews)
    pm.addPass(lowering::createSinkTransposes());
  pm.addPass(lowering::createFoldNarrowReads());
  pm.addPass(lowering::createFoldGlobalNorm());
  if (options.matmulEpilogues)
    pm.addPass(lowering::createMatmulEpilogues());
  if (options.fuse) {
    lowering::FuseRegionsOptions fuse;
    fuse.rows = options.fuseRows;
    fuse.parallelRows = options.parallelRows;
    pm.addPass(lowering::createFuseRegions(fuse));
  }
  lowering::LowerToExecOptions lower;
  lower.stridedViews = options.stridedViews;
  lower.roundedCopies = options.halfWeightCopies;
  pm.addPass(lowering::createLowerToExec(lower));
}

namespace {

/// dtcc compile's training options, as dtcc-phase-train takes them
/// (defaults from TrainPhase and planning::Plan, the passes' own).
struct TrainPhaseOptions : PassPipelineOptions<TrainPhaseOptions> {
  Option<std::string> loss{*this, "loss",
                           llvm::cl::desc("The loss output (default: the "
                                          "model's only scalar output)")};
  ListOption<std::string> frozen{*this, "frozen",
                                 llvm::cl::desc("Variables not trained")};
  Option<std::string> recompute{*this, "recompute",
                                llvm::cl::init(planning::Plan().recompute),
                                llvm::cl::desc("none, selective or full")};
  Option<int64_t> recomputeLayers{
      *this, "recompute-layers",
      llvm::cl::init(planning::Plan().recomputeLayers),
      llvm::cl::desc("With full: the first K layers of each stage (0: all)")};
  Option<std::string> offload{*this, "offload",
                              llvm::cl::init(planning::Plan().offload),
                              llvm::cl::desc("none or optimizer")};
  Option<std::string> dtype{*this, "dtype", llvm::cl::init(TrainPhase().dtype),
                            llvm::cl::desc("fp32, bf16 or fp16")};
  Option<bool> halfNorms{*this, "half-norms",
                         llvm::cl::init(TrainPhase().halfNorms),
                         llvm::cl::desc("Norms and softmax in the half type "
                                        "(f32 inside their kernels)")};
  Option<std::string> optimizer{
      *this, "optimizer", llvm::cl::init(TrainPhase().optimizer.optimizer),
      llvm::cl::desc("adamw or sgd")};
  Option<double> lr{*this, "lr", llvm::cl::init(TrainPhase().optimizer.lr),
                    llvm::cl::desc("Learning rate")};
  Option<int64_t> microBatches{*this, "micro-batches",
                               llvm::cl::init(planning::Plan().microBatches),
                               llvm::cl::desc("Micro-batches per step")};
  Option<bool> fuseAttention{
      *this, "fuse-attention", llvm::cl::init(true),
      llvm::cl::desc("Replace the attention cores by dgraph.attention (as "
                     "dtcc compile does for CPU programs in fp32)")};
  Option<int64_t> stages{
      *this, "pipeline-stages", llvm::cl::init(1),
      llvm::cl::desc("The mesh's pp: more than 1 unrolls the micro-batches")};
};

/// dtcc compile's mesh options, as dtcc-phase-shard takes them.
struct ShardPhaseOptions : PassPipelineOptions<ShardPhaseOptions> {
  Option<std::string> mesh{*this, "mesh",
                           llvm::cl::desc("The device mesh, e.g. dp=2,tp=2")};
  Option<int> zero{*this, "zero", llvm::cl::init(planning::Plan().zero),
                   llvm::cl::desc("ZeRO stage over dp (0-3)")};
  ListOption<std::string> layouts{
      *this, "layouts", llvm::cl::desc("NAME=rows|cols|whole overrides")};
  Option<std::string> schedule{*this, "pipeline-schedule",
                               llvm::cl::init(planning::Plan().schedule),
                               llvm::cl::desc("gpipe, 1f1b, interleaved or "
                                              "zb-h1 (with pp)")};
  Option<int64_t> virtualStages{
      *this, "virtual-stages", llvm::cl::init(planning::Plan().virtualStages),
      llvm::cl::desc("Layer chunks per pipeline rank (interleaved)")};
  Option<bool> sequenceParallel{
      *this, "sequence-parallel",
      llvm::cl::init(planning::Plan().sequenceParallel),
      llvm::cl::desc("With tp: split norms, dropout and residuals along the "
                     "sequence")};
};

/// dtcc-plan-set given `options` only: the decisions a phase's options
/// own; the module's plan keeps the others.
void addPlanSet(OpPassManager &pm, const std::string &options) {
  std::unique_ptr<Pass> pass = planning::createPlanSet();
  // The options are this file's spelling of values the pass parses itself
  // (a bad mesh is its error at the module), so they always initialize.
  (void)pass->initializeOptions(
      options, [](const llvm::Twine &) { return failure(); });
  pm.addPass(std::move(pass));
}

} // namespace

void registerPhasePipelines() {
  PassPipelineRegistration<>(
      "dtcc-phase-graph", "dtcc compile's dgraph phase (canonicalize, CSE)",
      [](OpPassManager &pm) { buildGraphPhase(pm); });
  PassPipelineRegistration<TrainPhaseOptions>(
      "dtcc-phase-train",
      "dtcc compile's train phase: the plan's recompute, offload and "
      "micro-batches, "
      "autodiff, mixed precision, micro-batches, optimizer",
      [](OpPassManager &pm, const TrainPhaseOptions &o) {
        // The values have no spaces: no quoting (an empty mesh is left out).
        std::string options =
            "recompute=" + o.recompute.getValue() +
            " recompute-layers=" + std::to_string(o.recomputeLayers) +
            " offload=" + o.offload.getValue() +
            " micro-batches=" + std::to_string(o.microBatches);
        if (o.stages > 1)
          options += " mesh=pp=" + std::to_string(o.stages);
        addPlanSet(pm, options);
        TrainPhase t;
        t.autodiff.loss = o.loss;
        t.autodiff.frozen.assign(o.frozen.begin(), o.frozen.end());
        t.dtype = o.dtype;
        t.halfNorms = o.halfNorms;
        t.fuseAttention = o.fuseAttention;
        t.optimizer.optimizer = o.optimizer;
        t.optimizer.lr = o.lr;
        addTrainPasses(pm, o.stages, t);
      });
  PassPipelineRegistration<ShardPhaseOptions>(
      "dtcc-phase-shard",
      "dtcc compile's shard phase: the plan's mesh, ZeRO stage, layouts, "
      "schedule, virtual stages and sequence parallelism, pipeline stages, annotation, propagation, partition, "
      "overlap (a bad mesh is dtcc-plan-set's error)",
      [](OpPassManager &pm, const ShardPhaseOptions &o) {
        std::string options =
            "zero=" + std::to_string(o.zero) +
            " schedule=" + o.schedule.getValue() +
            " virtual-stages=" + std::to_string(o.virtualStages) +
            " sequence-parallel=" + (o.sequenceParallel ? "true" : "false");
        if (!o.mesh.empty())
          options += " mesh=" + o.mesh.getValue();
        if (o.layouts.hasValue())
          options += " layouts=" + llvm::join(o.layouts, ",");
        addPlanSet(pm, options);
        // The stage count the pipeline pass will read; a mesh that does not
        // parse stops at dtcc-plan-set.
        auto mesh = runtime::MeshShape::parse(o.mesh.getValue());
        addShardPasses(pm, mesh.isOk() ? mesh.value().size("pp") : 1,
                       ShardPhase());
      });
  PassPipelineRegistration<>(
      "dtcc-phase-dexec", "dtcc compile's dexec phase (lowering)",
      [](OpPassManager &pm) { buildExecPhase(pm); });
}

} // namespace dtcc::pipelines
