//===- DescribeModel.cpp - the planner's model, read from the IR ----------===//

#include "compiler/DescribeModel.h"

#include "dialects/Graph/IR/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <map>

using namespace mlir;

namespace dtcc {

namespace {

/// The layer an op belongs to (its #dgraph.layer index), "" for none.
std::string layerKeyOf(Operation *op) {
  std::optional<int64_t> index = graph::layerIndexOf(op);
  return index ? std::to_string(*index) : "";
}


double elements(RankedTensorType type) {
  double n = 1;
  for (int64_t d : type.getShape())
    n *= double(d);
  return n;
}

double bytesOf(RankedTensorType type) {
  Type e = type.getElementType();
  int64_t bits = e.isIntOrFloat() ? e.getIntOrFloatBitWidth() : 8;
  return elements(type) * double(std::max<int64_t>(1, (bits + 7) / 8));
}

/// The trainable variable `value` reads, seen through transposes (an
/// exported Linear's weight is often transposed in the graph); null when it
/// reads none.
/// The parameters: trainable variables not frozen.
struct Parameters {
  SymbolTable &symbols;
  llvm::ArrayRef<std::string> frozen;
  bool contains(graph::VariableOp var) const {
    return var && var.getTrainable() &&
           !llvm::is_contained(frozen, var.getSymName().str());
  }
};

graph::VariableOp trainableVariable(Value value, const Parameters &params) {
  while (auto t = value.getDefiningOp<graph::TransposeOp>())
    value = t->getOperand(0);
  auto load = value.getDefiningOp<graph::LoadOp>();
  if (!load)
    return nullptr;
  auto var = params.symbols.lookup<graph::VariableOp>(load.getVariable());
  return params.contains(var) ? var : nullptr;
}

/// The ops that use `value`, through broadcasts and reshapes.
void usersThroughViews(Value value, SmallVectorImpl<Operation *> &out) {
  for (Operation *user : value.getUsers()) {
    if (isa<graph::BroadcastInDimOp, graph::ReshapeOp>(user))
      usersThroughViews(user->getResult(0), out);
    else
      out.push_back(user);
  }
}

/// One repeated layer: its ops in program order and its parameters.
struct Layer {
  SmallVector<Operation *> ops;
  double parameters = 0;
  double vectorParameters = 0; ///< of rank 1: norms' and biases
  double flops = 0;
};

} // namespace

DescribedModel describeModel(ModuleOp module, const std::string &name,
                             llvm::ArrayRef<std::string> frozen) {
  DescribedModel out;
  planner::ModelDesc &m = out.model;
  m.name = name;
  m.dropout = false;
  // GPU backends fuse attention; the planner assumes they do for every
  // model (the CPU path clears it).
  m.flashAttention = true;
  planner::ModelDesc::GraphFigures &g = m.graph;
  SymbolTable symbols(module);
  Parameters params{symbols, frozen};

  func::FuncOp func;
  for (auto f : module.getOps<func::FuncOp>())
    if (!f.isExternal()) {
      func = f;
      break;
    }

  // The layer of each op and of each variable (the layer of the ops that
  // read it), in program order.
  llvm::MapVector<std::string, Layer, std::map<std::string, unsigned>> layers;
  llvm::StringMap<std::string> layerOfVariable;
  // Each op's place in program order, and the first layer op's.
  llvm::DenseMap<Operation *, int64_t> order;
  int64_t firstLayerOp = -1;
  if (func) {
    if (func.getNumArguments() > 0)
      if (auto t = dyn_cast<RankedTensorType>(func.getArgument(0).getType()))
        if (t.getRank() > 0)
          g.batch = t.getDimSize(0);
    func.walk([&](Operation *op) {
      order[op] = int64_t(order.size());
      if (isa<func::ReturnOp>(op))
        return;
      std::string key = layerKeyOf(op);
      double flops = graph::flopsOf(op);
      g.forwardFlops += flops;
      if (auto load = dyn_cast<graph::LoadOp>(op)) {
        SmallVector<Operation *> users;
        usersThroughViews(load.getResult(), users);
        for (Operation *user : users)
          if (std::string k = layerKeyOf(user); !k.empty()) {
            layerOfVariable[load.getVariable()] = k;
            break;
          }
        return;
      }
      if (!isa<graph::ConstantOp>(op))
        for (Value r : op->getResults())
          if (auto t = dyn_cast<RankedTensorType>(r.getType()))
            if (isa<FloatType>(t.getElementType()))
              g.activationBytes += bytesOf(t);
      if (key.empty())
        return;
      if (firstLayerOp < 0)
        firstLayerOp = order[op];
      Layer &layer = layers[key];
      layer.ops.push_back(op);
      layer.flops += flops;
    });
  }
  for (auto var : module.getOps<graph::VariableOp>()) {
    if (!params.contains(var))
      continue;
    RankedTensorType t = var.getTensorType();
    g.parameters += elements(t);
    g.parameterBytes += bytesOf(t);
    auto it = layerOfVariable.find(var.getSymName());
    std::string key = it != layerOfVariable.end()
                          ? it->second
                          : layerKeyOf(var);
    if (auto l = layers.find(key); l != layers.end()) {
      l->second.parameters += elements(t);
      if (t.getRank() == 1)
        l->second.vectorParameters += elements(t);
    }
  }
  for (auto &[key, layer] : layers)
    g.layerForwardFlops.push_back(layer.flops);

  // Not a transformer: the graph's figures only, no sizes half read.
  auto notTransformer = [&](std::string why) {
    planner::ModelDesc bare;
    bare.name = m.name;
    bare.dropout = m.dropout;
    bare.flashAttention = m.flashAttention;
    bare.fusedSoftmax = m.fusedSoftmax;
    bare.graph = std::move(m.graph);
    m = std::move(bare);
    out.notTransformer = std::move(why);
    return out;
  };
  if (!func)
    return notTransformer("no function");
  if (layers.empty())
    return notTransformer("no layers (no op names a layer)");

  // The token embedding: a trainable [vocab, hidden] table gathered by ids.
  graph::VariableOp table;
  int64_t idsBatch = 0; // the token ids' rows
  for (Operation &op : func.getBody().front())
    if (auto gather = dyn_cast<graph::GatherOp>(&op))
      if (auto var = trainableVariable(gather.getOperand(), params))
        if (var.getTensorType().getRank() == 2 && gather.getAxis() == 0 &&
            layerKeyOf(gather).empty()) {
          table = var;
          if (auto ids =
                  dyn_cast<RankedTensorType>(gather.getIndices().getType()))
            if (ids.getRank() == 2)
              idsBatch = ids.getDimSize(0);
          break;
        }
  if (!table)
    return notTransformer("no token embedding (a trainable table gathered "
                          "by ids outside the layers)");
  m.vocab = table.getTensorType().getDimSize(0);
  m.hidden = table.getTensorType().getDimSize(1);
  const int64_t h = m.hidden;

  // Each layer: its attention (a softmax over [batch, heads, seq, seq]) and
  // the weights of its matrix products in program order.
  for (auto &[key, layer] : layers) {
    graph::SoftmaxOp softmax;
    for (Operation *op : layer.ops)
      if (auto s = dyn_cast<graph::SoftmaxOp>(op)) {
        softmax = s;
        break;
      }
    if (!softmax)
      return notTransformer("layer '" + key + "' has no attention softmax");
    // [batch, heads, seq, seq]; [batch, seq, heads, seq] (GPT-BigCode's
    // multi-query attention puts the heads beside the queries); or
    // [batch x heads, seq, seq] (OPT's folds them into the batch, the
    // batch the token ids').
    auto scores = cast<RankedTensorType>(softmax.getType());
    const int64_t rank = scores.getRank();
    const int64_t folded = rank == 3 ? scores.getDimSize(0) : 0;
    const bool headsFirst =
        rank == 4 && scores.getDimSize(2) == scores.getDimSize(3);
    const bool queriesFirst = rank == 4 && !headsFirst &&
                              scores.getDimSize(1) == scores.getDimSize(3);
    if (!headsFirst && !queriesFirst &&
        (rank != 3 || scores.getDimSize(1) != scores.getDimSize(2) ||
         idsBatch < 1 || folded % idsBatch != 0))
      return notTransformer("layer '" + key +
                            "': the attention softmax is not over [batch, "
                            "heads, seq, seq] (nor [batch, seq, heads, seq], "
                            "[batch x heads, seq, seq])");
    int64_t heads = headsFirst     ? scores.getDimSize(1)
                    : queriesFirst ? scores.getDimSize(2)
                                   : folded / idsBatch;
    int64_t seq = scores.getDimSize(rank - 1);
    if (key != layers.front().first && (heads != m.heads || seq != m.seq))
      return notTransformer("layer '" + key + "' differs from the first");
    m.heads = heads;
    m.seq = seq;
    g.batch = rank == 4 ? scores.getDimSize(0) : idsBatch;
  }
  if (m.heads < 1 || h % m.heads != 0)
    return notTransformer("the heads do not divide the hidden size");
  const int64_t headDim = h / m.heads;

  // The first layer's shape. After the attention's context matmul (the
  // first matmul after the softmax) come the output projection and the
  // MLP: up (and gate) [h, ffn], down [ffn, h].
  Layer &first = layers.front().second;
  double attentionWeights = 0;
  SmallVector<std::pair<int64_t, int64_t>> mlp;
  bool pastSoftmax = false, pastContext = false, pastProjection = false;
  bool layerNormOp = false;
  m.linearBias = false;
  bool normShift = false;
  for (Operation *op : first.ops) {
    if (isa<graph::SoftmaxOp>(op))
      pastSoftmax = true;
    if (isa<graph::LayerNormOp>(op))
      layerNormOp = true;
    if (auto add = dyn_cast<graph::AddOp>(op)) {
      // A trainable vector added to a matmul's result is a linear layer's
      // bias; added to anything else, a norm's shift.
      for (int i = 0; i < 2; ++i) {
        Value v = add->getOperand(i), other = add->getOperand(1 - i);
        while (isa_and_nonnull<graph::BroadcastInDimOp, graph::ReshapeOp>(
            v.getDefiningOp()))
          v = v.getDefiningOp()->getOperand(0);
        auto var = trainableVariable(v, params);
        if (!var || var.getTensorType().getRank() != 1)
          continue;
        if (other.getDefiningOp<graph::MatmulOp>())
          m.linearBias = true;
        else
          normShift = true;
      }
    }
    auto matmul = dyn_cast<graph::MatmulOp>(op);
    if (!matmul)
      continue;
    if (pastSoftmax && !pastContext) {
      pastContext = true;
      continue;
    }
    if (!trainableVariable(matmul.getRhs(), params))
      continue;
    auto rhs = cast<RankedTensorType>(matmul.getRhs().getType());
    if (rhs.getRank() != 2)
      return notTransformer("layer '" + layers.front().first +
                            "': a weight of rank " +
                            std::to_string(rhs.getRank()));
    // A weight read transposed by the product itself is [n, k].
    int64_t k = rhs.getDimSize(0), n = rhs.getDimSize(1);
    if (matmul.getTransposeRhs())
      std::swap(k, n);
    if (!pastContext || !pastProjection) {
      attentionWeights += double(k) * double(n);
      pastProjection = pastContext;
    } else {
      mlp.push_back({k, n});
    }
  }
  if (mlp.size() != 2 && mlp.size() != 3)
    return notTransformer("layer '" + layers.front().first +
                          "': expected an MLP of 2 or 3 matmuls after the "
                          "attention, got " + std::to_string(mlp.size()));
  m.gatedMlp = mlp.size() == 3;
  m.ffnHidden = mlp.back().first;
  for (size_t i = 0; i + 1 < mlp.size(); ++i)
    if (mlp[i] != std::make_pair(h, m.ffnHidden))
      return notTransformer("the MLP's weights are not [hidden, ffn]");
  if (mlp.back() != std::make_pair(m.ffnHidden, h))
    return notTransformer("the MLP's down projection is not [ffn, hidden]");
  // q and the output projection are [h, h]; k and v [h, kv heads x head].
  double kvDim = (attentionWeights - 2.0 * double(h) * double(h)) /
                 (2.0 * double(h));
  if (kvDim <= 0 || kvDim != double(int64_t(kvDim)) ||
      int64_t(kvDim) % headDim != 0)
    return notTransformer("the attention's weights are not q, k, v and an "
                          "output projection");
  m.kvHeads = int64_t(kvDim) / headDim;
  m.norm = layerNormOp || normShift ? planner::NormKind::kLayerNorm
                                    : planner::NormKind::kRmsNorm;
  m.layers = int64_t(layers.size());

  // Outside the layers: learned positions ([rows, hidden], rows at least
  // seq: a model's maximum positions, of which the sequence reads the
  // first) and the head's own [hidden, vocab] weight, or the table again
  // (tied).
  m.learnedPositions = false;
  bool ownHead = false;
  // The variables the program reads before its first layer: an
  // embedding's parts (the others outside the layers are the head's).
  llvm::StringSet<> readBeforeLayers;
  func.walk([&](graph::LoadOp load) {
    SmallVector<Operation *> users;
    usersThroughViews(load.getResult(), users);
    for (Operation *user : users)
      if (auto it = order.find(user);
          it != order.end() && it->second < firstLayerOp)
        readBeforeLayers.insert(load.getVariable());
  });
  SmallVector<graph::VariableOp> others;
  for (auto var : module.getOps<graph::VariableOp>()) {
    if (!params.contains(var) || var == table ||
        layerOfVariable.count(var.getSymName()))
      continue;
    ArrayRef<int64_t> s = var.getTensorType().getShape();
    // (A table of more rows than seq that has the vocabulary's is the
    // head's, not positions.)
    if (s.size() == 2 && s[1] == h && !m.learnedPositions &&
        (s[0] == m.seq || (s[0] > m.seq && s[0] != m.vocab))) {
      m.learnedPositions = true;
      m.positionRows = s[0] == m.seq ? 0 : s[0];
      continue;
    }
    if (!ownHead && s.size() == 2 &&
        ((s[0] == h && s[1] == m.vocab) || (s[0] == m.vocab && s[1] == h))) {
      ownHead = true;
      continue;
    }
    others.push_back(var);
  }
  m.tiedEmbeddings = !ownHead;
  // The rest outside the layers, on the side of the layers that reads it:
  // the final norm (the head's, in the formulas), and what they do not
  // count: an embedding LayerNorm (BLOOM), a token-type table (BERT), a
  // pooler or a masked-LM transform and the output bias (BERT's heads).
  int64_t outside = 0, embeddingSide = 0, headSide = 0;
  for (graph::VariableOp var : others) {
    const int64_t n = int64_t(elements(var.getTensorType()));
    outside += n;
    (readBeforeLayers.contains(var.getSymName()) ? embeddingSide : headSide) +=
        n;
  }
  // The final norm's parameters are the formulas' own (the head's, less
  // its weight); the count below checks the rest.
  const int64_t finalNorm = m.headParams() - (ownHead ? m.vocab * h : 0);
  m.embeddingExtraParams = embeddingSide;
  m.headExtraParams = std::max<int64_t>(0, headSide - finalNorm);
  // More than a layer's worth outside the layers is a model the formulas
  // do not describe (an encoder beside the decoder, a large adapter).
  if (m.embeddingExtraParams + m.headExtraParams > m.layerParams())
    return notTransformer(
        "outside its layers it holds " + std::to_string(outside) +
        " parameters besides the embedding and the head's weight, more "
        "than a layer's " +
        std::to_string(m.layerParams()));

  // A layer's vectors as the graph holds them where they are not the
  // formulas' (one norm before attention and MLP side by side, attention
  // without biases), its matrices still the formulas'.
  if (first.parameters != double(m.layerParams()) &&
      first.vectorParameters > 0 &&
      first.parameters - first.vectorParameters ==
          double(m.layerMatrixParams()))
    m.layerVectorParams = int64_t(first.vectorParameters);
  // The formulas must count what the graph holds.
  for (auto &[key, layer] : layers)
    if (layer.parameters != double(m.layerParams()))
      return notTransformer(
          "layer '" + key + "' holds " +
          std::to_string(int64_t(layer.parameters)) +
          " parameters, a transformer layer of these sizes " +
          std::to_string(m.layerParams()));
  if (g.parameters != double(m.totalParams()))
    return notTransformer(
        "its " + std::to_string(int64_t(g.parameters)) +
        " parameters are not those of a transformer of these sizes (" +
        std::to_string(m.totalParams()) + ")");
  return out;
}

} // namespace dtcc
