//===- Model.h - the model description the planner works on -----*- C++ -*-===//
//
// A standard decoder-only transformer by its hyper-parameters, with parameter,
// FLOP and activation-memory accounting, and the per-layer cost profile that
// the time and memory models consume (one profile per repeated unit).
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_PLANNER_MODEL_H
#define DTCC_PLANNER_MODEL_H

#include "planner/Cluster.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dtcc::planner {

enum class NormKind { kLayerNorm, kRmsNorm };

/// What the backward pass recomputes instead of storing.
enum class Recompute {
  kNone,
  /// The attention core (scores, softmax, dropout, context): Korthikanti et
  /// al.'s selective recomputation.
  kSelective,
  /// Everything but each layer's input.
  kFull,
};
const char *recomputeName(Recompute recompute);

/// One kernel of a layer, per micro-batch and tensor-parallel rank.
struct OpCost {
  enum class Kind { kMatmul, kMemory, kAttention };
  const char *name;
  Kind kind;
  double flops = 0;    ///< forward FLOPs
  double bytes = 0;    ///< forward bytes read + written
  double bwdFlops = 0; ///< backward FLOPs (as executed)
  double bwdBytes = 0; ///< backward bytes read + written
  int bwdKernels = 1;  ///< kernels the backward launches
  /// Part of the attention core that selective recomputation redoes.
  bool attentionCore = false;
};

/// The cost of one repeated unit (a transformer layer) for one micro-batch
/// on one tensor-parallel rank: what the memory and time models need. The
/// transformer formulas produce it; the compiler can later produce it from
/// the IR of each distinct repeated block. Layers with equal profiles are
/// solved once.
struct LayerProfile {
  std::vector<OpCost> ops;
  double params = 0; ///< parameters held by one TP rank
  /// Activation bytes kept for the backward pass, per recompute mode.
  double activationBytes[3] = {0, 0, 0};
  /// Payload of one tensor-parallel collective (the b*s*h activation).
  double tpPayloadBytes = 0;
  /// Tensor-parallel collectives (all-reduce, or all-gather + reduce-scatter
  /// pairs with sequence parallelism) in the forward and the backward pass.
  int tpCollectivesForward = 0;
  int tpCollectivesBackward = 0;
  /// Context parallelism: the whole sequence's keys (or values) of one
  /// micro-batch on one TP rank, gathered over cp in the forward pass
  /// (`cpCollectivesForward` all-gathers) and whose gradients are
  /// reduce-scattered back in the backward pass.
  double cpPayloadBytes = 0;
  int cpCollectivesForward = 0;
  int cpCollectivesBackward = 0;

  double activations(Recompute r) const { return activationBytes[int(r)]; }
};

/// A decoder-only transformer. Layers are identical (the repeated unit);
/// the embedding sits before the first and the head (final norm, logits,
/// loss) after the last.
struct ModelDesc {
  std::string name;
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kvHeads = 0; ///< = heads without grouped-query attention
  int64_t ffnHidden = 0;
  int64_t vocab = 0;
  int64_t seq = 0;
  bool gatedMlp = false;       ///< SwiGLU: gate and up projections
  bool tiedEmbeddings = false; ///< the head reuses the embedding matrix
  NormKind norm = NormKind::kLayerNorm;
  bool linearBias = true;       ///< biases on the linear layers
  bool learnedPositions = true; ///< a position embedding [rows, hidden]
  /// The position table's rows where the model has more positions than
  /// its sequence (HuggingFace's GPT-2: n_positions 1024 at any sequence);
  /// 0: seq.
  int64_t positionRows = 0;
  /// A layer's vector parameters (norm scales and shifts, biases) as a
  /// model's IR holds them where they are not the formulas' two norms and
  /// (with linearBias) six biases: GPT-J, Falcon and Phi run attention and
  /// MLP side by side after one norm, GPT-J without the attention's
  /// biases. 0: the formulas' count. Held whole by every tp rank.
  int64_t layerVectorParams = 0;
  /// Parameters outside the layers that the formulas do not count, on the
  /// embedding's side (an embedding LayerNorm: BLOOM; a token-type table:
  /// BERT) and on the head's (a pooler, a masked-LM transform, an output
  /// bias: BERT's heads): held whole by every tp rank of the first and the
  /// last stage. Read from a model's IR (describeModel); 0 in the zoo's.
  int64_t embeddingExtraParams = 0;
  int64_t headExtraParams = 0;
  /// The rows of the learned position table (0 without one).
  int64_t positionTableRows() const {
    return learnedPositions ? (positionRows > 0 ? positionRows : seq) : 0;
  }
  bool dropout = true;          ///< dropout masks are stored (GPT-2 style)
  /// Fused attention that never stores the s x s scores; with a causal mask
  /// it skips the masked half of the score blocks.
  bool flashAttention = false;
  /// Without flashAttention: the run scales, masks and normalizes the
  /// scores in one kernel each way (Megatron-LM's FusedScaleMaskSoftmax),
  /// as the analytic model always prices it; a compiled program's attention
  /// is then priced so (AttentionKernels::kFusedSoftmax) instead of as
  /// dtcc's CUDA backend runs it.
  bool fusedSoftmax = false;
  /// With flashAttention: the fused kernel the run used, by the name a
  /// cluster's device.attentionKernels lists it under ("flash-attn-triton",
  /// the Triton FlashAttention of MosaicML's MPT); empty: the device's own
  /// attentionEfficiency (FlashAttention-2 in the presets, dtcc's kernels
  /// once calibrated). See useModelAttentionKernel.
  std::string attentionKernel;
  /// What the run did to each weight gradient before summing it over data
  /// parallelism, beyond what dtcc's program does: "" nothing more,
  /// "fsdp1" PyTorch FSDP1's flat-gradient copy and pre-division
  /// (GradientPasses::kFsdp1), priced for a compiled program of a saved
  /// plan's model.
  std::string gradientPasses;

  /// What a model's IR shows, transformer or not (compiler/DescribeModel.h);
  /// all zero when the description comes from sizes alone (a preset, `dtcc
  /// plan --zoo`, a saved plan).
  struct GraphFigures {
    int64_t batch = 0;          ///< sequences (rows) of one step's inputs
    double parameters = 0;      ///< trainable elements
    double parameterBytes = 0;  ///< at their stored element types
    /// FLOPs of the forward pass of one step at `batch` (graph::flopsOf:
    /// matrix products and convolutions), in all and per layer in order.
    double forwardFlops = 0;
    std::vector<double> layerForwardFlops;
    /// Bytes of every floating-point result of the forward pass of one
    /// step: what the backward pass could keep, before recomputation.
    double activationBytes = 0;
  };
  GraphFigures graph;

  /// 0 for a model without attention heads (not a transformer).
  int64_t headDim() const { return heads > 0 ? hidden / heads : 0; }
  int64_t kvDim() const { return kvHeads * headDim(); }

  /// Parameters of one layer, of the embedding (token + positions), of the
  /// head (final norm, plus the output matrix unless tied), and in total.
  int64_t layerParams() const;
  /// The weights of one layer's matrix products.
  int64_t layerMatrixParams() const;
  int64_t embeddingParams() const;
  int64_t headParams() const;
  int64_t totalParams() const;

  /// Forward FLOPs per token, counting the matmuls (2 per multiply-add):
  /// one layer, the logits, the whole model.
  double layerForwardFlopsPerToken() const;
  double attentionCoreFlopsPerToken() const;
  double headForwardFlopsPerToken() const;
  double forwardFlopsPerToken() const;
  /// Forward + backward (backward = 2x forward), plus what recomputation
  /// redoes: the model FLOPs of one token when recompute is kNone, the
  /// hardware FLOPs otherwise.
  double trainingFlopsPerToken(Recompute recompute) const;

  /// Activation bytes one layer keeps per micro-batch of `microBatch`
  /// sequences on one TP rank (Korthikanti et al. 2022, counted tensor by
  /// tensor): with `elementBytes` = 2 and a GPT layer this is
  /// s*b*h*(10 + 24/t + 5*a*s/(h*t)) without recompute, s*b*h*(10 + 24/t)
  /// selective, 2*s*b*h full; sequence parallelism divides the first term
  /// by t as well.
  double activationBytesPerLayer(int64_t microBatch, int64_t tp,
                                 bool sequenceParallel, Recompute recompute,
                                 int elementBytes) const;

  /// The vocabulary padded to a multiple of tp (Megatron pads the same way).
  int64_t paddedVocab(int64_t tp) const;

  /// Checks positivity and divisibility (hidden by heads, heads by kv heads).
  Status validate() const;

  /// Presets: GPT-2 small (124M), Llama 3 8B/70B/405B.
  static ModelDesc gpt2Small();
  static ModelDesc llama3_8b();
  static ModelDesc llama3_70b();
  static ModelDesc llama3_405b();
  /// A GPT as in Megatron-LM's SC'21 Table 1: vocabulary 51,200, sequence
  /// 2048, ffn 4h, learned positions, tied embeddings, dropout, no fused
  /// attention.
  static ModelDesc megatronGpt(int64_t hidden, int64_t layers, int64_t heads);
  /// "gpt2-124m", "llama3-8b", "llama3-70b", "llama3-405b".
  static StatusOr<ModelDesc> preset(const std::string &name);
  static std::vector<std::string> presetNames();
};

/// Parameters one tensor-parallel rank holds of a layer (split matmul
/// weights and column-parallel biases, replicated norms and row-parallel
/// biases), of the embedding and of the head.
double layerParamsPerRank(const ModelDesc &model, int64_t tp);
double embeddingParamsPerRank(const ModelDesc &model, int64_t tp);
double headParamsPerRank(const ModelDesc &model, int64_t tp);

/// The profile of one transformer layer (see LayerProfile).
LayerProfile transformerLayerProfile(const ModelDesc &model,
                                     int64_t microBatch, int64_t tp,
                                     bool sequenceParallel,
                                     DType computeType);
/// The embedding (first stage) and the head: final norm, logits and
/// cross-entropy (last stage), as profiles of their own.
LayerProfile embeddingProfile(const ModelDesc &model, int64_t microBatch,
                              int64_t tp, bool sequenceParallel,
                              DType computeType);
LayerProfile headProfile(const ModelDesc &model, int64_t microBatch,
                         int64_t tp, bool sequenceParallel,
                         DType computeType);

/// Part `kind` (0: a transformer layer, 1: the embedding, 2: the head) of
/// a micro-batch whose sequences are split over `cp` context-parallel ranks
/// (Llama 3's context parallelism): every position-wise op runs on the
/// local s/cp positions; attention's scores and context are those of the
/// local queries against the whole sequence's keys and values, gathered
/// over cp and kept for the backward pass, whose gradients are
/// reduce-scattered back. cp = 1 is the profile functions above.
LayerProfile contextParallelProfile(int kind, const ModelDesc &model,
                                    int64_t microBatch, int64_t tp,
                                    int64_t cp, bool sequenceParallel,
                                    DType computeType);

Json modelToJson(const ModelDesc &model);
StatusOr<ModelDesc> modelFromJson(const Json &json);

/// Prices a run of `model` with the fused attention kernel it names
/// (ModelDesc::attentionKernel): `cluster`'s attentionEfficiency becomes
/// that kernel's figure from device.attentionKernels, its source saying so,
/// and every model that reads it (the compiled program's, the analytic
/// one, --sensitivity's perturbations) prices that kernel. A model that
/// names none leaves the cluster as it is. Errors: a kernel the cluster
/// does not list (the message names those it does).
Status useModelAttentionKernel(const ModelDesc &model, ClusterSpec &cluster);

} // namespace dtcc::planner

#endif // DTCC_PLANNER_MODEL_H
