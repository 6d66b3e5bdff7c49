//===- MemoryModel.cpp - per-rank memory of a plan ------------------------===//

#include "planner/MemoryModel.h"

#include <algorithm>

namespace dtcc::planner {

namespace {

/// Gradient buckets of data-parallel reduction: two 25 MB buckets in flight
/// (PyTorch DDP's default bucket_cap_mb).
constexpr double kBucketBytes = 25e6;

} // namespace

double stageParameters(const ModelDesc &model, const Plan &plan,
                       int64_t stage) {
  double params = double(stageLayers(model, plan.pp, stage)) *
                  layerParamsPerRank(model, plan.tp);
  if (stage == 0)
    params += embeddingParamsPerRank(model, plan.tp);
  if (stage == plan.pp - 1) {
    params += headParamsPerRank(model, plan.tp);
    if (model.tiedEmbeddings && plan.pp > 1)
      params += double(model.paddedVocab(plan.tp)) * double(model.hidden) /
                double(plan.tp);
  }
  return params;
}

int64_t chunksInFlight(const Plan &plan, int64_t stage) {
  int64_t p = plan.pp, m = plan.microBatches;
  if (p == 1)
    return 1; // gradient accumulation runs micro-batches one by one
  switch (plan.schedule) {
  case Schedule::kGPipe:
    return m;
  case Schedule::k1F1B:
    return std::min(p - stage, m);
  case Schedule::kInterleaved: {
    int64_t v = plan.virtualStages;
    // Megatron's warm-up: 2(p - s - 1) + (v - 1)p forward chunks, plus the
    // one whose backward comes next.
    return std::min(m * v, 2 * (p - stage - 1) + (v - 1) * p + 1);
  }
  case Schedule::kZeroBubbleH1:
    // p - s - 1 warm-up forwards, then s backwards whose W waits: every
    // stage holds p micro-batches until their W (1F1B's first stage).
    return std::min(p, m);
  }
  return m;
}

MemoryModel::MemoryModel(ModelDesc model, ClusterSpec cluster)
    : model_(std::move(model)), cluster_(std::move(cluster)) {}

const LayerProfile &MemoryModel::profile(int kind, const Plan &plan) const {
  auto key = std::make_tuple(kind, plan.microBatchSize, plan.tp,
                             plan.sequenceParallel, int(plan.dtype.compute),
                             plan.cp);
  auto it = profiles_.find(key);
  if (it != profiles_.end())
    return it->second;
  LayerProfile p = contextParallelProfile(kind, model_, plan.microBatchSize,
                                          plan.tp, plan.cp,
                                          plan.sequenceParallel,
                                          plan.dtype.compute);
  return profiles_.emplace(key, std::move(p)).first->second;
}

MemoryBreakdown MemoryModel::modelState(double params,
                                        const DTypePolicy &policy,
                                        int zeroStage, int64_t dp,
                                        Offload offload) {
  MemoryBreakdown m;
  double n = double(dp);
  m.parameters = params * policy.paramBytes() / (zeroStage >= 3 ? n : 1.0);
  m.gradients = params * policy.gradBytes() / (zeroStage >= 2 ? n : 1.0);
  m.optimizerState =
      params * policy.optimizerBytes() / (zeroStage >= 1 ? n : 1.0);
  if (offload == Offload::kOptimizer) {
    // dtcc's compiled step (--offload optimizer): the state only the
    // optimizer reads and writes, Adam's moments, lives on the host, where
    // the step runs on copies of the gradient shard; the fp32 master
    // weights, which the forward pass reads, stay on the device (sharded
    // as the optimizer state is), and so do the gradients until the step
    // (the global norm is computed there).
    double master = policy.masterWeights
                        ? params * 4.0 / (zeroStage >= 1 ? n : 1.0)
                        : 0.0;
    m.hostGradients = m.gradients;
    m.hostOptimizerState = m.optimizerState - master;
    m.optimizerState = master;
  } else if (offload == Offload::kOptimizerAndParams) {
    // ZeRO-Infinity (the planner's only: dtcc compile refuses it): the
    // whole optimizer state and the parameters on the host.
    m.hostGradients = m.gradients;
    m.hostOptimizerState = m.optimizerState;
    m.optimizerState = 0;
    m.gradients = 0;
    m.hostParameters = m.parameters;
    m.parameters = 0;
  }
  return m;
}

MemoryBreakdown MemoryModel::stage(const Plan &plan, int64_t s) const {
  const int64_t p = plan.pp;
  const double a = dtypeBytes(plan.dtype.compute);
  const double t = double(plan.tp);
  // A rank holds s/cp positions of each sequence.
  const double tokens =
      double(plan.microBatchSize) * double(model_.seq) / double(plan.cp);
  const double h = double(model_.hidden);
  const double rep = plan.sequenceParallel ? 1.0 / t : 1.0;
  const LayerProfile &layer = profile(0, plan);
  const LayerProfile &embedding = profile(1, plan);
  const LayerProfile &head = profile(2, plan);

  MemoryBreakdown m = modelState(stageParameters(model_, plan, s),
                                 plan.dtype, plan.zeroStage, plan.dp,
                                 plan.offload);
  m.stage = s;
  const double stageParams = stageParameters(model_, plan, s);

  // Gradients summed over micro-batches, as dtcc's programs hold them: an
  // accumulator per parameter in the type of the data-parallel sum (fp32
  // under mixed precision), split over dp from ZeRO-2 on; a pipeline stage
  // also holds one backward task's gradient terms (in the compute type),
  // which are added to the accumulators after the task (so that its input
  // gradient is sent first). Without stages each term is added where it
  // is made below ZeRO-2 (under tp, a replicated vector's at the
  // micro-batch's end: negligible), and reduce-scattered as it is made
  // from ZeRO-2 on; with cp below ZeRO-2 the terms, widened to the sum's
  // type and all-reduced over cp, are added at the micro-batch's end
  // (dtcc-graph-optimizer). ZeRO's own accounting (a gradient in the
  // compute type) is that of one micro-batch.
  if ((p > 1 || plan.microBatches > 1) && plan.offload == Offload::kNone) {
    const double shards = plan.zeroStage >= 2 ? double(plan.dp) : 1.0;
    m.gradients = stageParams * plan.gradReduceBytes() / shards;
    if (p > 1)
      m.gradients += stageParams * plan.dtype.gradBytes();
    else if (plan.zeroStage < 2 && plan.cp > 1)
      m.gradients += stageParams * plan.gradReduceBytes();
  }

  // Activations of the chunks in flight.
  int64_t layers = stageLayers(model_, p, s);
  int64_t v = plan.schedule == Schedule::kInterleaved ? plan.virtualStages : 1;
  int64_t chunks = chunksInFlight(plan, s);
  double layersPerChunk = double(layers) / double(v);
  double perLayer = layer.activations(plan.recompute);
  // Recompute only the first K layers of the stage: they keep their input,
  // the others (and the embedding and head) everything.
  Recompute outside = plan.recompute;
  if (plan.recompute == Recompute::kFull && plan.recomputeLayers > 0 &&
      layers > 0) {
    double k = double(std::min(plan.recomputeLayers, layers));
    perLayer = (k * layer.activations(Recompute::kFull) +
                (double(layers) - k) * layer.activations(Recompute::kNone)) /
               double(layers);
    outside = Recompute::kNone;
  }
  m.activations = double(chunks) * layersPerChunk * perLayer;
  if (s == 0)
    m.activations += double((chunks + v - 1) / v) *
                     embedding.activations(outside);
  if (s == p - 1) {
    // The last stage runs each micro-batch's backward right after its
    // forward, except under GPipe.
    int64_t headInFlight =
        plan.schedule == Schedule::kGPipe && p > 1 ? plan.microBatches : 1;
    m.activations += double(headInFlight) * head.activations(outside);
  }

  // Temporaries.
  m.reserve = cluster_.device.reservedBytes.value;
  if (plan.recompute == Recompute::kFull)
    m.temporaries += layer.activations(Recompute::kNone);
  double widest = std::max(
      h * rep, (model_.gatedMlp ? 2.0 : 1.0) * double(model_.ffnHidden) / t);
  m.temporaries += 2 * tokens * widest * a; // gradient in/out of one op
  // Context parallelism: a layer's key and value gradients over the whole
  // sequence (partial sums) before their reduce-scatter.
  if (plan.cp > 1)
    m.temporaries += 2 * layer.cpPayloadBytes;
  if (s == p - 1)
    m.temporaries +=
        tokens * double(model_.paddedVocab(plan.tp)) / t * a; // logits

  if (cluster_.device.isCpu() && p == 1)
    return cpuBackend(plan, m, stageParams, layer, embedding, head);

  // Communication buffers.
  if (plan.dp > 1 && plan.zeroStage <= 2)
    m.commBuffers +=
        std::min(2 * kBucketBytes, stageParams * plan.dtype.gradBytes());
  if (plan.zeroStage == 3 && plan.dp > 1) {
    double largest = layer.params;
    if (s == 0)
      largest = std::max(largest, embedding.params);
    if (s == p - 1)
      largest = std::max(largest, head.params);
    // The layer in use and the prefetched one, gathered; the unsharded
    // gradient of one layer before its reduce-scatter.
    m.commBuffers += 2 * largest * plan.dtype.paramBytes() +
                     largest * plan.dtype.gradBytes();
  }
  if (plan.offload != Offload::kNone)
    m.commBuffers += 2 * kBucketBytes; // pinned staging for PCIe copies
  if (p > 1)
    m.commBuffers += 4 * tokens * h * a * rep; // send/recv, both directions
  if (plan.sequenceParallel)
    m.commBuffers += tokens * h * a; // all-gathered sequence
  if (plan.cp > 1)
    m.commBuffers += layer.cpPayloadBytes; // a layer's gathered keys or values
  return m;
}

MemoryBreakdown MemoryModel::cpuBackend(const Plan &plan, MemoryBreakdown m,
                                        double params,
                                        const LayerProfile &layer,
                                        const LayerProfile &embedding,
                                        const LayerProfile &head) const {
  // What dtcc compile's static memory plan holds (one pipeline stage):
  // parameters and optimizer state in the state arena; gradients in the
  // workspace, whole on every rank whatever the ZeRO stage (the collective
  // that shards them reads them whole), unless micro-batches accumulate
  // them in state.
  const double n = double(plan.dp);
  if (plan.microBatches == 1)
    m.gradients = params * plan.dtype.gradBytes();
  // Plain DP all-reduces a flat copy of every gradient; ZeRO reduce-scatters
  // into the rank's shard.
  double collective = 0;
  if (plan.dp > 1)
    collective = plan.zeroStage == 0 ? m.gradients : m.gradients / n;
  else if (plan.cp > 1) // gradients are summed over cp as over dp
    collective = m.gradients;
  // ZeRO-3 keeps each unit's gathered parameters from its forward to its
  // backward use: at the turn of the step every unit but the last is
  // gathered.
  double gathered = 0;
  if (plan.dp > 1 && plan.zeroStage == 3) {
    double largest = std::max({layer.params, embedding.params, head.params});
    gathered = (params - largest) * plan.dtype.paramBytes();
  }
  m.commBuffers = collective + gathered;
  // The backward pass frees activations (and gathered parameters) as it
  // produces gradients: the workspace peaks at the larger of the two
  // phases, not at their sum. Accumulated gradients (micro-batches) live in
  // state instead.
  if (plan.microBatches == 1)
    m.reused = std::min(m.activations + gathered, m.gradients + collective);
  return m;
}

MemoryBreakdown MemoryModel::peak(const Plan &plan) const {
  MemoryBreakdown best = stage(plan, 0);
  for (int64_t s = 1; s < plan.pp; ++s) {
    MemoryBreakdown m = stage(plan, s);
    if (m.total() > best.total())
      best = m;
  }
  return best;
}

double MemoryModel::lowerBound(const Plan &plan) const {
  double fullest = 0;
  // Stage 0 and the last stage hold the embedding and the head; stage 1 is
  // the first to get an extra layer. Checking those three is enough.
  for (int64_t s : {int64_t(0), std::min<int64_t>(1, plan.pp - 1),
                    plan.pp - 1}) {
    MemoryBreakdown m = modelState(stageParameters(model_, plan, s),
                                   plan.dtype, plan.zeroStage, plan.dp,
                                   plan.offload);
    fullest = std::max(fullest, m.total());
  }
  return fullest + cluster_.device.reservedBytes.value;
}

} // namespace dtcc::planner
