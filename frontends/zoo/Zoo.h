//===- Zoo.h - standard ONNX models of any size -----------------*- C++ -*-===//
//
// Writes GPT-2, Llama and MLP training models (loss and logits outputs) as
// plain ONNX, with seeded weights or with shapes only, for `dtcc zoo`.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_FRONTENDS_ZOO_ZOO_H
#define DTCC_FRONTENDS_ZOO_ZOO_H

#include "onnx/onnx_pb.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtcc::zoo {

/// The model families of the zoo.
enum class Family {
  /// GPT-2: learned positions, pre-LayerNorm, fused qkv, GELU MLP.
  Gpt,
  /// Llama: RMSNorm, rotary embeddings, grouped-query attention, SwiGLU.
  Llama,
  /// A multi-layer perceptron classifier: Gemm + Relu layers.
  Mlp,
};

/// "gpt", "llama" or "mlp".
const char *familyName(Family family);

/// The family called `name` ("gpt", "llama", "mlp"); nullopt for others.
std::optional<Family> parseFamily(std::string_view name);

/// What to build. Sizes left at 0 take the family's default in validate();
/// the comment of each field names the `dtcc zoo` flag that errors mention.
struct ZooOptions {
  /// The family (the `dtcc zoo` subcommand).
  Family family = Family::Gpt;
  /// --layers: transformer blocks (GPT, Llama) or hidden Gemm+Relu layers
  /// (MLP). Defaults: 12 (GPT, Llama), 2 (MLP).
  int64_t layers = 0;
  /// --hidden: model width (GPT, Llama) or hidden-layer width (MLP).
  /// Defaults: 768 (GPT, Llama), 256 (MLP).
  int64_t hidden = 0;
  /// --heads: attention heads; must divide `hidden`. Default 12.
  int64_t heads = 0;
  /// --kv-heads: key/value heads (Llama grouped-query attention); must
  /// divide `heads`. Default: `heads` (plain multi-head attention). GPT
  /// accepts only `heads`.
  int64_t kvHeads = 0;
  /// --ffn-hidden: MLP width of a block. Defaults: 4 * hidden (GPT); the
  /// Llama rule 256 * ceil((8 * hidden / 3) / 256) (Llama).
  int64_t ffnHidden = 0;
  /// --vocab: vocabulary size. Defaults: 50257 (GPT), 32000 (Llama).
  int64_t vocab = 0;
  /// --seq: sequence length, also the number of learned positions (GPT).
  /// Default 1024.
  int64_t seq = 0;
  /// --batch: batch size of the inputs. Defaults: 1 (GPT, Llama), 32 (MLP).
  int64_t batch = 0;
  /// --inputs: input features (MLP). Default 784.
  int64_t inputs = 0;
  /// --classes: output classes (MLP). Default 10.
  int64_t classes = 0;
  /// --rope-theta: base of the rotary frequencies (Llama). Default 10000
  /// (Llama 3 uses 500000).
  double ropeTheta = 0;
  /// --norm-eps: epsilon of LayerNorm (GPT) and RMSNorm (Llama).
  /// Default 1e-5.
  double normEps = 0;
  /// --seed: seeds the weights; each tensor's values depend only on the seed
  /// and the tensor's name.
  uint64_t seed = 0;
  /// --no-weights clears it: initializers then carry names, types and dims
  /// only (external data in a file that is not written).
  bool weights = true;
  /// --opset: default-domain opset: 17 to 21 for GPT (LayerNormalization),
  /// 14 to 21 for Llama (Trilu), 13 to 21 for the MLP. From 20 GPT uses the
  /// Gelu op, from 18 ReduceMean takes its axes as an input.
  int64_t opset = 17;
  /// --tied-embeddings: the head reuses the token embedding (transposed)
  /// instead of its own [hidden, vocab] weight (GPT, Llama).
  bool tiedEmbeddings = false;
  /// --dropout: the probability of the Dropout nodes (training mode) that
  /// GPT-2 and Megatron-LM place after the embedding, on the attention
  /// probabilities and on both residual branches (after the projection and
  /// after the MLP). 0 (the default) builds none. GPT only.
  double dropout = 0;
  /// --alibi: ALiBi attention biases (Press et al., "Train Short, Test
  /// Long"; BLOOM, MPT) in place of learned positions: head h adds
  /// slope_h x (key position) to its scaled scores before the causal mask,
  /// slope_h = 2^(-8 (h + 1) / n) for n heads a power of two, else those
  /// of the power of two below n followed by every other slope of twice
  /// it (BLOOM's build_alibi_tensor; softmax is unchanged by a shift along
  /// a row, so slope x (key - query) gives the same probabilities). GPT
  /// only.
  bool alibi = false;
};

/// Fills in the family's defaults for fields left at 0 and checks the
/// options (positive sizes, hidden divisible by heads, heads by kvHeads, an
/// even head dimension for rotary embeddings, the opset range, flags of
/// other families left unset). Returns an empty string when they are valid,
/// else an error that names the flag ("--heads (5) must divide --hidden
/// (768)"). Idempotent.
std::string validate(ZooOptions &options);

/// The presets accepted by applyPreset, e.g. "gpt2", "llama3-8b".
std::vector<std::string> presetNames();

/// Fills the fields still at their unset value with the sizes of a
/// published model: gpt2, gpt2-medium, gpt2-large, gpt2-xl (GPT; these also
/// set seq, their number of positions), tinyllama, llama3-8b, llama3-70b,
/// llama3-405b (Llama). Fields set before (explicit flags) win; batch is
/// never set. Returns an error listing the presets when `name` is not one,
/// or when the preset belongs to another family than `options.family`.
std::string applyPreset(ZooOptions &options, std::string_view name);

/// A one-line summary of validated options, e.g. "gpt layers=12 hidden=768
/// heads=12 ...", with the flag names as keys; the model stores it in its
/// "dtcc.zoo" metadata.
std::string describe(const ZooOptions &options);

/// The number of parameters (the total size of the initializers), in closed
/// form. Applies the defaults on a copy; returns -1 for invalid options.
int64_t parameterCount(const ZooOptions &options);

/// Builds the model in memory: inputs `ids` and `labels` (int64 [batch,
/// seq]) for GPT and Llama, `x` (float [batch, inputs]) and `labels` (int64
/// [batch]) for the MLP; outputs `loss` (float scalar, mean cross entropy)
/// then `logits`. Initializers are the parameters only (float32, raw data),
/// named like `layers.3.attn.qkv.weight`. Constants are small Constant
/// nodes; the causal mask and the rotary tables are computed from them
/// (ConstantOfShape + Trilu, Range + Pow + Cos/Sin) in the "causal_mask" and
/// "rope" scopes, so the file stays small at any sequence length. Node
/// names carry their layer (`layers.3/attn/MatMul_qkv`). Without weights,
/// initializers are external-data stubs and metadata "dtcc.no_weights" is "1".
/// Applies the defaults on a copy; returns an empty model (no graph) for
/// invalid options, so call validate() first. Holds every weight in
/// memory: buildAndWriteModel streams large models instead.
onnx::ModelProto buildModel(const ZooOptions &options);

/// How models are written.
struct WriteOptions {
  /// Initializer bytes above which the weights go to an external data file
  /// "<path>.data" beside the model (protobuf cannot hold 2 GiB). 1 GiB by
  /// default; tests lower it.
  int64_t externalThreshold = int64_t(1) << 30;
  /// Alignment of each tensor's offset in the external data file, so that
  /// loaders can map tensors directly. A power of two.
  int64_t alignment = 4096;
};

/// Writes `model` to `path` (pass it with std::move to avoid copying the
/// weights). When the initializers' raw data exceed
/// `options.externalThreshold` bytes, all of them move to "<path>.data"
/// (ONNX external data: location relative to the model's directory,
/// aligned offsets, lengths). A model without weights has its stubs pointed
/// at "<path>.no-weights", which is not written. Returns an empty string
/// on success, else an error naming the file.
std::string writeModel(onnx::ModelProto model, const std::string &path,
                       const WriteOptions &options = {});

/// Validates `options`, builds the model and writes it to `path` like
/// writeModel, but generates the weights tensor by tensor straight into the
/// external data file when they exceed the threshold, so memory stays small
/// for any model size. The bytes equal writeModel(buildModel(options)).
/// This is what `dtcc zoo` calls. Returns an empty string on success.
std::string buildAndWriteModel(const ZooOptions &options,
                               const std::string &path,
                               const WriteOptions &writeOptions = {});

} // namespace dtcc::zoo

#endif // DTCC_FRONTENDS_ZOO_ZOO_H
