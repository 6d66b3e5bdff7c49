//===- Model.cpp - transformer parameter, FLOP and activation accounting --===//

#include "planner/Model.h"

#include <algorithm>
#include <cmath>

namespace dtcc::planner {

using runtime::invalidArgument;
using runtime::notFound;

const char *recomputeName(Recompute recompute) {
  switch (recompute) {
  case Recompute::kNone:
    return "none";
  case Recompute::kSelective:
    return "selective";
  case Recompute::kFull:
    return "full";
  }
  return "unknown";
}

//===----------------------------------------------------------------------===//
// Parameters and FLOPs
//===----------------------------------------------------------------------===//

namespace {

int64_t normParams(const ModelDesc &m) {
  return m.norm == NormKind::kLayerNorm ? 2 * m.hidden : m.hidden;
}

/// Weights of the matmuls of one layer (what 2 FLOPs per token multiply).
int64_t layerMatmulWeights(const ModelDesc &m) {
  int64_t h = m.hidden, f = m.ffnHidden;
  int64_t attention = 2 * h * h + 2 * h * m.kvDim();
  int64_t mlp = (m.gatedMlp ? 3 : 2) * h * f;
  return attention + mlp;
}

} // namespace

int64_t ModelDesc::layerMatrixParams() const {
  return layerMatmulWeights(*this);
}

int64_t ModelDesc::layerParams() const {
  if (layerVectorParams > 0)
    return layerMatrixParams() + layerVectorParams;
  int64_t params = layerMatrixParams() + 2 * normParams(*this);
  if (linearBias)
    params += (hidden + 2 * kvDim()) + hidden +
              (gatedMlp ? 2 * ffnHidden : ffnHidden) + hidden;
  return params;
}

int64_t ModelDesc::embeddingParams() const {
  return vocab * hidden + positionTableRows() * hidden + embeddingExtraParams;
}

int64_t ModelDesc::headParams() const {
  return normParams(*this) + (tiedEmbeddings ? 0 : vocab * hidden) +
         headExtraParams;
}

int64_t ModelDesc::totalParams() const {
  return layers * layerParams() + embeddingParams() + headParams();
}

double ModelDesc::attentionCoreFlopsPerToken() const {
  // Scores (q . k over s keys) and context (p . v): 2 FLOPs x s x h each.
  // A fused causal kernel skips the masked half of the blocks.
  double full = 4.0 * double(seq) * double(hidden);
  return flashAttention ? full / 2 : full;
}

double ModelDesc::layerForwardFlopsPerToken() const {
  return 2.0 * double(layerMatmulWeights(*this)) +
         attentionCoreFlopsPerToken();
}

double ModelDesc::headForwardFlopsPerToken() const {
  return 2.0 * double(hidden) * double(vocab);
}

double ModelDesc::forwardFlopsPerToken() const {
  return double(layers) * layerForwardFlopsPerToken() +
         headForwardFlopsPerToken();
}

double ModelDesc::trainingFlopsPerToken(Recompute recompute) const {
  double flops = 3.0 * forwardFlopsPerToken();
  if (recompute == Recompute::kFull)
    flops += double(layers) * layerForwardFlopsPerToken();
  else if (recompute == Recompute::kSelective && !flashAttention)
    flops += double(layers) * attentionCoreFlopsPerToken();
  return flops;
}

int64_t ModelDesc::paddedVocab(int64_t tp) const {
  return (vocab + tp - 1) / tp * tp;
}

//===----------------------------------------------------------------------===//
// Activations
//===----------------------------------------------------------------------===//

double ModelDesc::activationBytesPerLayer(int64_t microBatch, int64_t tp,
                                          bool sequenceParallel,
                                          Recompute recompute,
                                          int elementBytes) const {
  double a = elementBytes;
  double tokens = double(microBatch) * double(seq);
  double t = double(tp);
  double replicated = sequenceParallel ? 1.0 / t : 1.0;
  double h = double(hidden);
  if (recompute == Recompute::kFull)
    return tokens * h * a * replicated; // the layer input only
  double mask = dropout ? 1.0 : 0.0;
  // Inputs of the two norms, of the QKV and first MLP matmuls, two dropout
  // masks: outside the tensor-parallel region.
  double outside = tokens * h * (4 * a + 2 * mask) * replicated;
  // Q, K, V, the attention output (input of the projection), and the MLP's
  // intermediate tensors: split by tp.
  double kvPerRank = kvHeads >= tp ? double(kvDim()) / t : double(headDim());
  double mlpTensors = gatedMlp ? 3.0 : 2.0;
  double inside = tokens * (2 * h / t + 2 * kvPerRank) * a +
                  tokens * mlpTensors * double(ffnHidden) / t * a;
  double core = 0;
  if (flashAttention) {
    core = tokens * double(heads) / t * 4; // fp32 log-sum-exp per row
  } else if (recompute == Recompute::kNone) {
    // Softmax output, dropout mask and dropout output of the scores.
    double scores = double(microBatch) * double(heads) / t * double(seq) *
                    double(seq);
    core = scores * (a + (dropout ? a + 1 : 0));
  }
  return outside + inside + core;
}

//===----------------------------------------------------------------------===//
// Profiles
//===----------------------------------------------------------------------===//

namespace {

void addMatmul(LayerProfile &p, const char *name, double batch, double m,
               double k, double n, double a, bool core = false) {
  OpCost op{name, OpCost::Kind::kMatmul};
  op.flops = 2 * batch * m * k * n;
  op.bytes = batch * (m * k + k * n + m * n) * a;
  // Backward: the input gradient and the weight gradient, each as large.
  op.bwdFlops = 2 * op.flops;
  op.bwdBytes = 2 * op.bytes;
  op.bwdKernels = 2;
  op.attentionCore = core;
  p.ops.push_back(op);
}

void addMemory(LayerProfile &p, const char *name, double bytes,
               double bwdBytes, bool core = false) {
  OpCost op{name, OpCost::Kind::kMemory};
  op.bytes = bytes;
  op.bwdBytes = bwdBytes;
  op.attentionCore = core;
  p.ops.push_back(op);
}

} // namespace

double layerParamsPerRank(const ModelDesc &m, int64_t tp) {
  double t = double(tp), h = double(m.hidden);
  double weights = double(layerMatmulWeights(m));
  if (m.layerVectorParams > 0)
    return weights / t + double(m.layerVectorParams);
  double norms = 2.0 * double(normParams(m));
  double biases = 0;
  if (m.linearBias)
    biases = (h + 2 * double(m.kvDim()) +
              (m.gatedMlp ? 2 : 1) * double(m.ffnHidden)) /
                 t +
             2 * h;
  return weights / t + norms + biases;
}

double embeddingParamsPerRank(const ModelDesc &m, int64_t tp) {
  double h = double(m.hidden);
  return double(m.paddedVocab(tp)) * h / double(tp) +
         double(m.positionTableRows()) * h + double(m.embeddingExtraParams);
}

double headParamsPerRank(const ModelDesc &m, int64_t tp) {
  double v = double(m.paddedVocab(tp)) / double(tp);
  return double(normParams(m)) + (m.tiedEmbeddings ? 0 : v * double(m.hidden)) +
         double(m.headExtraParams);
}

LayerProfile transformerLayerProfile(const ModelDesc &m, int64_t microBatch,
                                     int64_t tp, bool sequenceParallel,
                                     DType computeType) {
  LayerProfile p;
  double a = dtypeBytes(computeType);
  double t = double(tp);
  double T = double(microBatch) * double(m.seq);
  double h = double(m.hidden);
  double s = double(m.seq);
  double hd = double(m.headDim());
  double rep = sequenceParallel ? 1.0 / t : 1.0;
  double headsPerRank = double(m.heads) / t;
  double kvPerRank =
      m.kvHeads >= tp ? double(m.kvDim()) / t : double(m.headDim());
  double f = double(m.ffnHidden) / t;
  double mask = m.dropout ? 1.0 : 0.0;

  addMemory(p, "norm1", 2 * T * h * a * rep, 3 * T * h * a * rep);
  addMatmul(p, "qkv", 1, T, h, h / t + 2 * kvPerRank, a);
  if (m.flashAttention) {
    OpCost op{"flash_attention", OpCost::Kind::kAttention};
    op.flops = 4 * T * s * h / t / 2; // causal: half the blocks
    op.bytes = T * (2 * h / t + 2 * kvPerRank) * a + T * headsPerRank * 4;
    // The backward recomputes the scores: 5 matmuls against 2 forward.
    op.bwdFlops = 2.5 * op.flops;
    op.bwdBytes = 2 * op.bytes;
    p.ops.push_back(op);
  } else {
    double batch = double(microBatch) * headsPerRank;
    double scores = batch * s * s;
    addMatmul(p, "attention_scores", batch, s, hd, s, a, /*core=*/true);
    addMemory(p, "softmax", 2 * scores * a, 3 * scores * a, true);
    if (m.dropout)
      addMemory(p, "attention_dropout", scores * (2 * a + 1),
                scores * (2 * a + 1), true);
    addMatmul(p, "attention_context", batch, s, s, hd, a, true);
  }
  addMatmul(p, "attention_projection", 1, T, h / t, h, a);
  addMemory(p, "residual1", T * h * rep * (3 * a + mask),
            T * h * rep * (2 * a + mask));
  addMemory(p, "norm2", 2 * T * h * a * rep, 3 * T * h * a * rep);
  addMatmul(p, "mlp_in", 1, T, h, (m.gatedMlp ? 2 : 1) * f, a);
  if (m.gatedMlp)
    addMemory(p, "swiglu", 3 * T * f * a, 5 * T * f * a);
  else
    addMemory(p, "gelu", 2 * T * f * a, 3 * T * f * a);
  addMatmul(p, "mlp_out", 1, T, f, h, a);
  addMemory(p, "residual2", T * h * rep * (3 * a + mask),
            T * h * rep * (2 * a + mask));

  p.params = layerParamsPerRank(m, tp);

  for (Recompute r : {Recompute::kNone, Recompute::kSelective,
                      Recompute::kFull})
    p.activationBytes[int(r)] = m.activationBytesPerLayer(
        microBatch, tp, sequenceParallel, r, int(a));
  p.tpPayloadBytes = T * h * a;
  p.tpCollectivesForward = tp > 1 ? 2 : 0;
  p.tpCollectivesBackward = tp > 1 ? 2 : 0;
  return p;
}

LayerProfile contextParallelProfile(int kind, const ModelDesc &m,
                                    int64_t microBatch, int64_t tp,
                                    int64_t cp, bool sequenceParallel,
                                    DType computeType) {
  auto plain = [&](const ModelDesc &model) {
    return kind == 0 ? transformerLayerProfile(model, microBatch, tp,
                                               sequenceParallel, computeType)
           : kind == 1
               ? embeddingProfile(model, microBatch, tp, sequenceParallel,
                                  computeType)
               : headProfile(model, microBatch, tp, sequenceParallel,
                             computeType);
  };
  if (cp <= 1)
    return plain(m);
  // Everything position-wise is the profile of a model of s/cp positions.
  ModelDesc chunk = m;
  chunk.seq = m.seq / cp;
  LayerProfile p = plain(chunk);
  LayerProfile whole = plain(m);
  p.params = whole.params; // a position table keeps all its rows
  if (kind != 0)
    return p;
  const double c = double(cp);
  const double a = dtypeBytes(computeType);
  // Attention of s/cp queries against s keys: the scores, softmax and
  // context (or the fused kernel) are cp times the chunk model's.
  for (OpCost &op : p.ops)
    if (op.attentionCore || op.kind == OpCost::Kind::kAttention) {
      op.flops *= c;
      op.bwdFlops *= c;
      op.bytes *= c;
      op.bwdBytes *= c;
    }
  // The stored s/cp x s scores are cp times the chunk's (what selective
  // recomputation drops), and the gathered keys and values of the other
  // chunks are kept for the backward pass unless the layer is recomputed.
  double kvPerRank =
      m.kvHeads >= tp ? double(m.kvDim()) / double(tp) : double(m.headDim());
  double tokens = double(microBatch) * double(m.seq);
  double gathered = 2 * tokens * (1 - 1 / c) * kvPerRank * a;
  double scores = p.activationBytes[int(Recompute::kNone)] -
                  p.activationBytes[int(Recompute::kSelective)];
  p.activationBytes[int(Recompute::kNone)] += (c - 1) * scores + gathered;
  p.activationBytes[int(Recompute::kSelective)] += gathered;
  p.cpPayloadBytes = tokens * kvPerRank * a;
  p.cpCollectivesForward = 2;  // keys, values
  p.cpCollectivesBackward = 2; // their gradients
  return p;
}

LayerProfile embeddingProfile(const ModelDesc &m, int64_t microBatch,
                              int64_t tp, bool sequenceParallel,
                              DType computeType) {
  LayerProfile p;
  double a = dtypeBytes(computeType);
  double T = double(microBatch) * double(m.seq);
  double h = double(m.hidden);
  double rep = sequenceParallel ? 1.0 / double(tp) : 1.0;
  // Gather rows (read + write), add positions; backward scatter-adds into
  // the (fp32-accumulated) table.
  addMemory(p, "embedding", T * h * a * (m.learnedPositions ? 3 : 2),
            T * h * (a + 4));
  if (m.dropout)
    addMemory(p, "embedding_dropout", T * h * rep * (2 * a + 1),
              T * h * rep * (2 * a + 1));
  p.params = embeddingParamsPerRank(m, tp);
  double stored = m.dropout ? T * h * rep : 0; // dropout mask
  for (double &bytes : p.activationBytes)
    bytes = stored;
  p.tpPayloadBytes = T * h * a;
  // Vocabulary-parallel lookup: partial rows are summed across tp.
  p.tpCollectivesForward = tp > 1 ? 1 : 0;
  return p;
}

LayerProfile headProfile(const ModelDesc &m, int64_t microBatch, int64_t tp,
                         bool sequenceParallel, DType computeType) {
  LayerProfile p;
  double a = dtypeBytes(computeType);
  double T = double(microBatch) * double(m.seq);
  double h = double(m.hidden);
  double t = double(tp);
  double rep = sequenceParallel ? 1.0 / t : 1.0;
  double v = double(m.paddedVocab(tp)) / t;
  addMemory(p, "final_norm", 2 * T * h * a * rep, 3 * T * h * a * rep);
  addMatmul(p, "logits", 1, T, h, v, a);
  // Cross-entropy in fp32: read the logits, max/exp/sum passes, and the
  // gradient written back.
  addMemory(p, "cross_entropy", T * v * (a + 8), T * v * (a + 4));
  p.params = headParamsPerRank(m, tp);
  // Kept until the backward: the norm input and fp32 logits for the loss.
  double stored = T * h * a * rep + T * v * 4;
  for (double &bytes : p.activationBytes)
    bytes = stored;
  p.tpPayloadBytes = T * h * a;
  p.tpCollectivesForward = tp > 1 && sequenceParallel ? 1 : 0;
  p.tpCollectivesBackward = tp > 1 ? 1 : 0;
  return p;
}

//===----------------------------------------------------------------------===//
// Validation, presets, JSON
//===----------------------------------------------------------------------===//

Status ModelDesc::validate() const {
  struct {
    const char *name;
    int64_t value;
  } positive[] = {{"layers", layers}, {"hidden", hidden},
                  {"heads", heads},   {"kvHeads", kvHeads},
                  {"ffnHidden", ffnHidden}, {"vocab", vocab},
                  {"seq", seq}};
  for (const auto &field : positive)
    if (field.value <= 0)
      return invalidArgument("model ", name, ": ", field.name,
                             " must be positive, got ", field.value);
  if (hidden % heads != 0)
    return invalidArgument("model ", name, ": hidden ", hidden,
                           " not divisible by heads ", heads);
  if (heads % kvHeads != 0)
    return invalidArgument("model ", name, ": heads ", heads,
                           " not divisible by kvHeads ", kvHeads);
  if (!attentionKernel.empty() && !flashAttention)
    return invalidArgument("model ", name, ": attentionKernel '",
                           attentionKernel,
                           "' names a fused attention kernel, but the model "
                           "has flashAttention false (its run stores the "
                           "scores)");
  return Status::ok();
}

Status useModelAttentionKernel(const ModelDesc &model, ClusterSpec &cluster) {
  if (model.attentionKernel.empty())
    return Status::ok();
  const auto &kernels = cluster.device.attentionKernels;
  auto it = kernels.find(model.attentionKernel);
  if (it == kernels.end()) {
    std::string known;
    for (const auto &[name, figure] : kernels)
      known += (known.empty() ? "" : ", ") + name;
    return invalidArgument(
        "model ", model.name, ": attentionKernel '", model.attentionKernel,
        "' is not one of cluster ", cluster.name,
        "'s device.attentionKernels (",
        known.empty() ? std::string("it lists none") : "it lists " + known,
        "); a cluster file can add it with its fraction of the peak");
  }
  cluster.device.attentionEfficiency = Figure{
      it->second.value, it->second.source + " (the model's attentionKernel '" +
                            model.attentionKernel + "')"};
  return Status::ok();
}

ModelDesc ModelDesc::gpt2Small() {
  ModelDesc m;
  m.name = "gpt2-124m";
  m.layers = 12;
  m.hidden = 768;
  m.heads = m.kvHeads = 12;
  m.ffnHidden = 3072;
  m.vocab = 50257;
  m.seq = 1024;
  m.tiedEmbeddings = true;
  return m;
}

static ModelDesc llama3(const char *name, int64_t layers, int64_t hidden,
                        int64_t heads, int64_t ffn) {
  ModelDesc m;
  m.name = name;
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.kvHeads = 8;
  m.ffnHidden = ffn;
  m.vocab = 128256;
  m.seq = 8192;
  m.gatedMlp = true;
  m.tiedEmbeddings = false;
  m.norm = NormKind::kRmsNorm;
  m.linearBias = false;
  m.learnedPositions = false;
  m.dropout = false;
  m.flashAttention = true;
  return m;
}

ModelDesc ModelDesc::llama3_8b() {
  return llama3("llama3-8b", 32, 4096, 32, 14336);
}
ModelDesc ModelDesc::llama3_70b() {
  return llama3("llama3-70b", 80, 8192, 64, 28672);
}
ModelDesc ModelDesc::llama3_405b() {
  return llama3("llama3-405b", 126, 16384, 128, 53248);
}

ModelDesc ModelDesc::megatronGpt(int64_t hidden, int64_t layers,
                                 int64_t heads) {
  ModelDesc m;
  m.name = "megatron-gpt-h" + std::to_string(hidden) + "-l" +
           std::to_string(layers);
  m.layers = layers;
  m.hidden = hidden;
  m.heads = m.kvHeads = heads;
  m.ffnHidden = 4 * hidden;
  m.vocab = 51200;
  m.seq = 2048;
  m.tiedEmbeddings = true;
  return m;
}

std::vector<std::string> ModelDesc::presetNames() {
  return {"gpt2-124m", "llama3-8b", "llama3-70b", "llama3-405b"};
}

StatusOr<ModelDesc> ModelDesc::preset(const std::string &name) {
  if (name == "gpt2-124m")
    return gpt2Small();
  if (name == "llama3-8b")
    return llama3_8b();
  if (name == "llama3-70b")
    return llama3_70b();
  if (name == "llama3-405b")
    return llama3_405b();
  return notFound("unknown model preset '", name,
                  "' (presets: gpt2-124m, llama3-8b, llama3-70b, "
                  "llama3-405b)");
}

Json modelToJson(const ModelDesc &m) {
  Json j = Json::object();
  j.set("name", m.name);
  j.set("layers", m.layers);
  j.set("hidden", m.hidden);
  j.set("heads", m.heads);
  j.set("kvHeads", m.kvHeads);
  j.set("ffnHidden", m.ffnHidden);
  j.set("vocab", m.vocab);
  j.set("seq", m.seq);
  j.set("gatedMlp", m.gatedMlp);
  j.set("tiedEmbeddings", m.tiedEmbeddings);
  j.set("norm", m.norm == NormKind::kLayerNorm ? "layernorm" : "rmsnorm");
  j.set("linearBias", m.linearBias);
  j.set("learnedPositions", m.learnedPositions);
  if (m.positionRows > 0)
    j.set("positionRows", m.positionRows);
  if (m.layerVectorParams > 0)
    j.set("layerVectorParams", m.layerVectorParams);
  if (m.embeddingExtraParams > 0)
    j.set("embeddingExtraParams", m.embeddingExtraParams);
  if (m.headExtraParams > 0)
    j.set("headExtraParams", m.headExtraParams);
  j.set("dropout", m.dropout);
  j.set("flashAttention", m.flashAttention);
  j.set("fusedSoftmax", m.fusedSoftmax);
  if (!m.attentionKernel.empty())
    j.set("attentionKernel", m.attentionKernel);
  if (!m.gradientPasses.empty())
    j.set("gradientPasses", m.gradientPasses);
  const ModelDesc::GraphFigures &g = m.graph;
  // A graph that is not a transformer has no sizes to count from.
  j.set("parameters", m.layers == 0 && g.parameters > 0
                          ? g.parameters
                          : double(m.totalParams()));
  if (g.parameters > 0) {
    Json graph = Json::object();
    graph.set("batch", g.batch);
    graph.set("parameters", g.parameters);
    graph.set("parameterBytes", g.parameterBytes);
    graph.set("forwardFlops", g.forwardFlops);
    Json layers = Json::array();
    for (double f : g.layerForwardFlops)
      layers.push(f);
    graph.set("layerForwardFlops", layers);
    graph.set("activationBytes", g.activationBytes);
    j.set("graph", graph);
  }
  return j;
}

/// The "graph" object of modelToJson.
static Status graphFiguresFromJson(const Json &j,
                                   ModelDesc::GraphFigures &g) {
  if (!j.isObject())
    return invalidArgument("model.graph: expected an object");
  for (const auto &[key, value] : j.members()) {
    if (key == "layerForwardFlops") {
      if (!value.isArray())
        return invalidArgument("model.graph.layerForwardFlops: expected an "
                               "array");
      g.layerForwardFlops.clear();
      for (const Json &f : value.items()) {
        if (!f.isNumber())
          return invalidArgument("model.graph.layerForwardFlops: expected "
                                 "numbers");
        g.layerForwardFlops.push_back(f.asNumber());
      }
      continue;
    }
    if (!value.isNumber() || value.asNumber() < 0)
      return invalidArgument("model.graph.", key,
                             ": expected a number >= 0");
    double n = value.asNumber();
    if (key == "batch")
      g.batch = int64_t(n);
    else if (key == "parameters")
      g.parameters = n;
    else if (key == "parameterBytes")
      g.parameterBytes = n;
    else if (key == "forwardFlops")
      g.forwardFlops = n;
    else if (key == "activationBytes")
      g.activationBytes = n;
    else
      return invalidArgument("model.graph: unknown field '", key, "'");
  }
  return Status::ok();
}

StatusOr<ModelDesc> modelFromJson(const Json &j) {
  if (!j.isObject())
    return invalidArgument("model: expected an object");
  ModelDesc m;
  for (const auto &member : j.members()) {
    const std::string &key = member.first;
    const Json &value = member.second;
    auto integer = [&](int64_t &out) -> Status {
      if (!value.isNumber() || value.asNumber() != std::floor(value.asNumber()))
        return invalidArgument("model.", key, ": expected an integer, got ",
                               Json::kindName(value.kind()));
      out = int64_t(value.asNumber());
      return Status::ok();
    };
    auto boolean = [&](bool &out) -> Status {
      if (!value.isBool())
        return invalidArgument("model.", key, ": expected a boolean, got ",
                               Json::kindName(value.kind()));
      out = value.asBool();
      return Status::ok();
    };
    if (key == "name") {
      if (!value.isString())
        return invalidArgument("model.name: expected a string");
      m.name = value.asString();
    } else if (key == "layers") {
      DTCC_RETURN_IF_ERROR(integer(m.layers));
    } else if (key == "hidden") {
      DTCC_RETURN_IF_ERROR(integer(m.hidden));
    } else if (key == "heads") {
      DTCC_RETURN_IF_ERROR(integer(m.heads));
    } else if (key == "kvHeads") {
      DTCC_RETURN_IF_ERROR(integer(m.kvHeads));
    } else if (key == "ffnHidden") {
      DTCC_RETURN_IF_ERROR(integer(m.ffnHidden));
    } else if (key == "vocab") {
      DTCC_RETURN_IF_ERROR(integer(m.vocab));
    } else if (key == "seq") {
      DTCC_RETURN_IF_ERROR(integer(m.seq));
    } else if (key == "gatedMlp") {
      DTCC_RETURN_IF_ERROR(boolean(m.gatedMlp));
    } else if (key == "tiedEmbeddings") {
      DTCC_RETURN_IF_ERROR(boolean(m.tiedEmbeddings));
    } else if (key == "linearBias") {
      DTCC_RETURN_IF_ERROR(boolean(m.linearBias));
    } else if (key == "learnedPositions") {
      DTCC_RETURN_IF_ERROR(boolean(m.learnedPositions));
    } else if (key == "positionRows") {
      DTCC_RETURN_IF_ERROR(integer(m.positionRows));
    } else if (key == "layerVectorParams") {
      DTCC_RETURN_IF_ERROR(integer(m.layerVectorParams));
    } else if (key == "embeddingExtraParams") {
      DTCC_RETURN_IF_ERROR(integer(m.embeddingExtraParams));
    } else if (key == "headExtraParams") {
      DTCC_RETURN_IF_ERROR(integer(m.headExtraParams));
    } else if (key == "dropout") {
      DTCC_RETURN_IF_ERROR(boolean(m.dropout));
    } else if (key == "flashAttention") {
      DTCC_RETURN_IF_ERROR(boolean(m.flashAttention));
    } else if (key == "fusedSoftmax") {
      DTCC_RETURN_IF_ERROR(boolean(m.fusedSoftmax));
    } else if (key == "attentionKernel") {
      if (!value.isString() || value.asString().empty())
        return invalidArgument("model.attentionKernel: expected a kernel's "
                               "name (a string), got ",
                               Json::kindName(value.kind()));
      m.attentionKernel = value.asString();
    } else if (key == "gradientPasses") {
      if (!value.isString() || value.asString() != "fsdp1")
        return invalidArgument("model.gradientPasses: expected \"fsdp1\" "
                               "(PyTorch FSDP1's flat-gradient copy and "
                               "pre-division), or leave it out");
      m.gradientPasses = value.asString();
    } else if (key == "norm") {
      if (!value.isString() || (value.asString() != "layernorm" &&
                                value.asString() != "rmsnorm"))
        return invalidArgument(
            "model.norm: expected \"layernorm\" or \"rmsnorm\"");
      m.norm = value.asString() == "layernorm" ? NormKind::kLayerNorm
                                               : NormKind::kRmsNorm;
    } else if (key == "graph") {
      DTCC_RETURN_IF_ERROR(graphFiguresFromJson(value, m.graph));
    } else if (key == "parameters") {
      continue; // derived; written for readers
    } else {
      return invalidArgument("model: unknown field '", key, "'");
    }
  }
  if (m.kvHeads == 0)
    m.kvHeads = m.heads;
  DTCC_RETURN_IF_ERROR(m.validate());
  return m;
}

} // namespace dtcc::planner
