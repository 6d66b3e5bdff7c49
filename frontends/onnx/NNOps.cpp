//===- NNOps.cpp - ONNX neural-network ops to dgraph ----------------------===//
//
// Matrix products, softmax, normalization, losses and dropout.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/NodeImporter.h"

#include "llvm/Support/xxhash.h"

using namespace mlir;
using namespace dtcc::graph;

namespace dtcc::onnx_frontend {
namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

LogicalResult importMatMul(NodeImporter &n) {
  auto y = numpyMatmul(n, n.input(0), n.input(1));
  if (failed(y))
    return failure();
  n.setOutput(0, *y);
  return success();
}

LogicalResult importGemm(NodeImporter &n) {
  Value a = n.input(0), b = n.input(1);
  if (typeOf(a).getRank() != 2 || typeOf(b).getRank() != 2)
    return n.error() << "expected rank-2 A and B, got " << a.getType()
                     << " and " << b.getType();
  if (typeOf(a).getElementType() != typeOf(b).getElementType())
    return n.error() << "expected A and B of one element type, got "
                     << a.getType() << " and " << b.getType();
  bool ta = n.attrInt("transA", 0) != 0, tb = n.attrInt("transB", 0) != 0;
  float alpha = n.attrFloat("alpha", 1.0f), beta = n.attrFloat("beta", 1.0f);
  int64_t k = typeOf(a).getDimSize(ta ? 0 : 1);
  if (typeOf(b).getDimSize(tb ? 1 : 0) != k)
    return n.error() << "expected contracted dimensions to agree, got "
                     << a.getType() << " and " << b.getType();
  Value y = n.create<MatmulOp>(a, b, ta, tb).getResult();
  auto type = typeOf(y);
  if (alpha != 1.0f)
    y = n.fold<MulOp>(y, n.splat(type, alpha));
  if (n.hasInput(2) && beta != 0.0f) {
    Value c = n.broadcastTo(n.input(2), type.getShape());
    if (typeOf(c).getShape() != type.getShape())
      return n.error() << "expected C broadcastable to " << type;
    if (beta != 1.0f)
      c = n.fold<MulOp>(c, n.splat(type, beta));
    y = n.fold<AddOp>(y, c);
  }
  n.setOutput(0, y);
  return success();
}

/// Runs `build(value, axis)` along the node's axis. Before opset 13,
/// Softmax, LogSoftmax and Hardmax coerce their input to 2-D at `axis`
/// (default 1): [product of the dimensions before it, product of the rest],
/// the op along the second; at the last axis that is the op along it, as
/// opset 13 defines it (default -1), which PyTorch's exports at opsets 9 to
/// 12 write.
template <typename Build>
LogicalResult alongCoercedAxis(NodeImporter &n, Build build) {
  Value x = n.input(0);
  auto type = typeOf(x);
  const bool coerced = n.getOpset() < 13;
  auto axis =
      n.normalizeAxis(n.attrInt("axis", coerced ? 1 : -1), type.getRank());
  if (failed(axis))
    return failure();
  if (!coerced || *axis == type.getRank() - 1) {
    n.setOutput(0, build(x, *axis));
    return success();
  }
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < type.getRank(); ++d)
    (d < *axis ? outer : inner) *= type.getDimSize(d);
  Value y = build(n.reshape(x, {outer, inner}), 1);
  n.setOutput(0, n.reshape(y, type.getShape()));
  return success();
}

template <typename OpTy> LogicalResult importSoftmax(NodeImporter &n) {
  if (failed(requireFloat(n, n.input(0))))
    return failure();
  return alongCoercedAxis(n, [&](Value x, int64_t axis) {
    return n.create<OpTy>(x, axis).getResult();
  });
}

LogicalResult importHardmax(NodeImporter &n) {
  return alongCoercedAxis(n, [&](Value x, int64_t axis) {
    auto type = typeOf(x);
    Value index = n.create<ArgMaxOp>(x, axis, false).getResult();
    auto idxType =
        RankedTensorType::get(type.getShape(), n.builder().getI64Type());
    SmallVector<int64_t> dims;
    for (int64_t d = 0; d < type.getRank(); ++d)
      if (d != axis)
        dims.push_back(d);
    Value expanded = n.fold<BroadcastInDimOp>(idxType, index, dims);
    Value hot =
        n.fold<EqOp>(n.create<IotaOp>(idxType, axis).getResult(), expanded);
    return n.castTo(hot, type.getElementType());
  });
}

LogicalResult importLayerNorm(NodeImporter &n) {
  Value x = n.input(0);
  auto type = typeOf(x);
  if (failed(requireFloat(n, x)))
    return failure();
  auto axis = n.normalizeAxis(n.attrInt("axis", -1), type.getRank());
  if (failed(axis))
    return failure();
  ArrayRef<int64_t> normalized = type.getShape().drop_front(*axis);
  auto param = [&](int i) -> FailureOr<Value> {
    auto pType = typeOf(n.input(i));
    if (!NodeImporter::isBroadcastable(pType.getShape(), normalized) ||
        pType.getElementType() != type.getElementType())
      return n.error() << "expected " << (i == 1 ? "scale" : "bias")
                       << " broadcastable to the normalized shape, got "
                       << n.input(i).getType();
    return n.broadcastTo(n.input(i), normalized);
  };
  auto scale = param(1);
  if (failed(scale))
    return failure();
  Value bias;
  if (n.hasInput(2)) {
    auto b = param(2);
    if (failed(b))
      return failure();
    bias = *b;
  }
  float eps = n.attrFloat("epsilon", 1e-5f);
  auto op = n.create<LayerNormOp>(x, *scale, bias, *axis, APFloat(eps));
  n.setOutput(0, op.getResult());
  // ONNX keeps the normalized dimensions as ones in Mean and InvStdDev.
  SmallVector<int64_t> statShape(type.getShape().take_front(*axis));
  statShape.append(type.getRank() - *axis, 1);
  if (n.wantsOutput(1))
    n.setOutput(1, n.reshape(op.getMean(), statShape));
  if (n.wantsOutput(2))
    n.setOutput(2, n.reshape(op.getRstd(), statShape));
  return success();
}

/// Shared by SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss: the loss
/// from per-element losses [N, d...] and their weights.
Value reduceLoss(NodeImporter &n, Value perElement, Value weights,
                 StringRef reduction) {
  auto type = typeOf(perElement);
  SmallVector<int64_t> all;
  for (int64_t d = 0; d < type.getRank(); ++d)
    all.push_back(d);
  if (reduction == "none")
    return perElement;
  Value total = n.fold<ReduceSumOp>(perElement, all);
  if (reduction == "sum")
    return total;
  return n.fold<DivOp>(total, n.fold<ReduceSumOp>(weights, all));
}

/// Whether targets (labels) [N, d...] fit class scores [N, C, d...].
static bool targetsFit(RankedTensorType scores, RankedTensorType targets) {
  return scores.getRank() >= 2 && targets.getRank() == scores.getRank() - 1 &&
         targets.getDimSize(0) == scores.getDimSize(0) &&
         targets.getShape().drop_front() == scores.getShape().drop_front(2);
}

/// Whether `labels` are i32 or i64, the class indices the losses take.
static bool isLabelType(Value labels) {
  Type t = getElementTypeOrSelf(labels.getType());
  return t.isInteger(32) || t.isInteger(64);
}

/// The loss over class scores [N, C, d...] (a float type) and labels
/// [N, d...] (i32 or i64) through the fused cross_entropy over rows of
/// classes, where no copy is needed to make those rows; null otherwise.
/// Scores [N, C, d...] take it where they were transposed to put the
/// classes second (language models' `cross_entropy(logits.transpose(1, 2),
/// labels)`): the rows [N * d..., C] are then the scores before that
/// transpose. Elsewhere (images' [N, C, H, W]) making rows would copy the
/// scores there and the gradient back (3x the NLL's time on 8 x 21 x 64 x
/// 64), and the caller gathers from the log-softmax instead.
static Value fusedCrossEntropy(NodeImporter &n, Value scores, Value labels,
                               std::optional<int64_t> ignore,
                               StringRef reduction) {
  auto type = typeOf(scores), labelsType = typeOf(labels);
  int64_t rank = type.getRank();
  SmallVector<int64_t> perm{0};
  for (int64_t d = 2; d < rank; ++d)
    perm.push_back(d);
  perm.push_back(1);
  auto transposed = scores.getDefiningOp<TransposeOp>();
  bool classesLast =
      transposed && llvm::all_of(llvm::enumerate(perm), [&](auto p) {
        return transposed.getPerm()[p.value()] == int64_t(p.index());
      });
  if (rank != 2 && !classesLast)
    return {};
  Value rows = scores, rowLabels = labels;
  if (rank > 2) {
    int64_t count = labelsType.getNumElements();
    rows = n.reshape(n.transpose(scores, perm), {count, type.getDimSize(1)});
    rowLabels = n.reshape(labels, {count});
  }
  Value loss = n.create<CrossEntropyOp>(rows, rowLabels, ignore.value_or(-100))
                   .getResult();
  if (rank > 2)
    loss = n.reshape(loss, labelsType.getShape());
  auto lossType = typeOf(loss);
  Value w = n.splat(lossType, 1);
  if (ignore) {
    Value ignored = n.fold<EqOp>(labels, n.splat(labelsType, *ignore));
    w = n.fold<SelectOp>(ignored, n.splat(lossType, 0), w);
  }
  return reduceLoss(n, loss, w, reduction);
}

/// Targets [N, d...] read as class indices, and each element's weight.
struct LabelWeights {
  /// The class indices (i64; an ignored target reads class 0).
  Value index;
  /// Its class's weight (1 without weights), 0 where the target is ignored.
  Value weight;
  /// Where the target is ignore_index (null without one).
  Value ignored;
};

/// LabelWeights of `target` for class weights `weight` (null: none) and
/// `ignoreIndex`, the weights of float type `ft`.
LabelWeights labelWeights(NodeImporter &n, Value target, Value weight,
                          std::optional<int64_t> ignoreIndex, Type ft) {
  LabelWeights l;
  l.index = n.castTo(target, n.builder().getI64Type());
  auto tType = typeOf(l.index);
  auto fType = RankedTensorType::get(tType.getShape(), ft);
  if (ignoreIndex) {
    l.ignored = n.fold<EqOp>(l.index, n.splat(tType, *ignoreIndex));
    l.index = n.fold<SelectOp>(l.ignored, n.splat(tType, 0), l.index);
  }
  l.weight = weight ? n.fold<GatherOp>(weight, l.index, 0) : n.splat(fType, 1);
  if (l.ignored)
    l.weight = n.fold<SelectOp>(l.ignored, n.splat(fType, 0), l.weight);
  return l;
}

/// NLL over log-probabilities [N, C, d...] with targets [N, d...].
FailureOr<Value> negativeLogLikelihood(NodeImporter &n, Value logProb,
                                       Value target, Value weight,
                                       std::optional<int64_t> ignoreIndex,
                                       StringRef reduction) {
  auto type = typeOf(logProb);
  auto targetType = typeOf(target);
  if (!targetsFit(type, targetType))
    return n.error() << "expected input [N, C, d...] and target [N, d...], got "
                     << type << " and " << targetType;
  if (weight && (typeOf(weight).getRank() != 1 ||
                 typeOf(weight).getDimSize(0) != type.getDimSize(1) ||
                 typeOf(weight).getElementType() != type.getElementType()))
    return n.error() << "expected weights of shape [" << type.getDimSize(1)
                     << "] and the input's element type, got "
                     << weight.getType();
  LabelWeights labels =
      labelWeights(n, target, weight, ignoreIndex, type.getElementType());
  auto tType = typeOf(labels.index);
  // picked[n, d...] = logProb[n, t[n, d...], d...]: gathered along the
  // classes (a one-hot mask would keep [N, C, d...] i64 and i1 tensors
  // alive into the backward, gigabytes at a language model's vocabulary;
  // the gather's gradient scatters into the one [N, C, d...] the log-softmax
  // gradient reads anyway).
  SmallVector<int64_t> pickShape(tType.getShape());
  pickShape.insert(pickShape.begin() + 1, 1);
  Value index = n.reshape(labels.index, pickShape);
  Value picked =
      n.reshape(n.create<GatherElementsOp>(
                     RankedTensorType::get(pickShape, type.getElementType()),
                     logProb, index, 1)
                    .getResult(),
                tType.getShape());
  Value loss = n.fold<MulOp>(n.fold<NegOp>(picked), labels.weight);
  return reduceLoss(n, loss, labels.weight, reduction);
}

LogicalResult importNllLoss(NodeImporter &n) {
  std::optional<int64_t> ignore;
  if (n.hasAttr("ignore_index"))
    ignore = n.attrInt("ignore_index", 0);
  std::string reduction = n.attrString("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean")
    return n.error() << "expected reduction none, sum or mean, got \""
                     << reduction << "\"";
  // NLL of a LogSoftmax over the classes, unweighted (F.nll_loss of
  // F.log_softmax): the fused cross-entropy of its scores, where it applies.
  auto logSoftmax = n.input(0).getDefiningOp<LogSoftmaxOp>();
  if (!n.hasInput(2) && logSoftmax && logSoftmax.getDim() == 1 &&
      isLabelType(n.input(1)) &&
      targetsFit(typeOf(n.input(0)), typeOf(n.input(1))))
    if (Value loss = fusedCrossEntropy(n, logSoftmax.getOperand(), n.input(1),
                                       ignore, reduction)) {
      n.setOutput(0, loss);
      return success();
    }
  auto loss = negativeLogLikelihood(n, n.input(0), n.input(1),
                                    n.hasInput(2) ? n.input(2) : Value(), ignore,
                                    reduction);
  if (failed(loss))
    return failure();
  n.setOutput(0, *loss);
  return success();
}

/// The label smoothing of the F.cross_entropy a PyTorch 2 export made this
/// node from, its sixth argument as the node's metadata records it; ONNX's
/// node has none, and the exporter drops it. 0 for other producers.
double torchLabelSmoothing(NodeImporter &n) {
  if (n.torchOp() != "cross_entropy_loss")
    return 0;
  SmallVector<std::string> args = n.torchArgs();
  double smoothing = 0;
  if (args.size() < 6 || llvm::StringRef(args[5]).getAsDouble(smoothing))
    return 0;
  return smoothing;
}

/// PyTorch's label-smoothing term of a cross-entropy over log-probabilities
/// [N, C, d...]: each element's -sum_c weight_c log p_c (0 where its label
/// is ignored), reduced as the loss is (a mean over the same weights of
/// the labels as the cross-entropy's).
Value smoothingTerm(NodeImporter &n, Value logProb, Value labels, Value weight,
                    std::optional<int64_t> ignore, StringRef reduction) {
  auto type = typeOf(logProb);
  if (weight) {
    SmallVector<int64_t> shape(type.getRank(), 1);
    shape[1] = type.getDimSize(1);
    logProb = n.fold<MulOp>(
        logProb, n.broadcastTo(n.reshape(weight, shape), type.getShape()));
  }
  Value term =
      n.fold<NegOp>(n.fold<ReduceSumOp>(logProb, ArrayRef<int64_t>{1}));
  LabelWeights l =
      labelWeights(n, labels, weight, ignore, type.getElementType());
  if (l.ignored)
    term = n.fold<SelectOp>(l.ignored, n.splat(typeOf(term), 0), term);
  return reduceLoss(n, term, l.weight, reduction);
}

LogicalResult importSoftmaxCrossEntropy(NodeImporter &n) {
  Value scores = n.input(0), labels = n.input(1);
  if (failed(requireFloat(n, scores)))
    return failure();
  std::optional<int64_t> ignore;
  if (n.hasAttr("ignore_index"))
    ignore = n.attrInt("ignore_index", 0);
  std::string reduction = n.attrString("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean")
    return n.error() << "expected reduction none, sum or mean, got \""
                     << reduction << "\"";
  auto type = typeOf(scores);
  if (type.getRank() < 2)
    return n.error() << "expected scores of rank >= 2, got " << type;
  if (!isLabelType(labels))
    return n.error() << "expected i32 or i64 labels, got " << labels.getType();
  if (!targetsFit(type, typeOf(labels)))
    return n.error()
           << "expected scores [N, C, d...] and labels [N, d...], got " << type
           << " and " << labels.getType();
  Value weight = n.hasInput(2) ? n.input(2) : Value();
  // (1 - e) times the cross-entropy plus e / C times the smoothing term,
  // as F.cross_entropy(..., label_smoothing=e) computes it, in a training
  // import of a PyTorch 2 export that recorded e (the ONNX node computes
  // the cross-entropy alone).
  double smoothing =
      n.getImportOptions().training ? torchLabelSmoothing(n) : 0.0;
  if (!(smoothing >= 0 && smoothing <= 1))
    return n.error() << "expected the label smoothing its metadata records "
                        "to be in [0, 1], got "
                     << smoothing;
  Value loss = weight ? Value()
                      : fusedCrossEntropy(n, scores, labels, ignore, reduction);
  // The log-probabilities: of the NLL where the fused cross-entropy does
  // not serve, of the smoothing term, and output 1 where it is asked for
  // (apart from the fused loss and its gradient: unused, they are dropped
  // with the other dead ops).
  Value logProb;
  if (!loss || smoothing != 0 || n.wantsOutput(1))
    logProb = n.create<LogSoftmaxOp>(scores, 1).getResult();
  if (!loss) {
    auto nll =
        negativeLogLikelihood(n, logProb, labels, weight, ignore, reduction);
    if (failed(nll))
      return failure();
    loss = *nll;
  }
  if (smoothing != 0) {
    auto lossType = typeOf(loss);
    Value term = smoothingTerm(n, logProb, labels, weight, ignore, reduction);
    loss = n.fold<AddOp>(
        n.fold<MulOp>(loss, n.splat(lossType, 1 - smoothing)),
        n.fold<MulOp>(
            term, n.splat(lossType, smoothing / double(type.getDimSize(1)))));
  }
  n.setOutput(0, loss);
  if (logProb)
    n.setOutput(1, logProb);
  return success();
}

/// Dropout-7 and -10: `ratio` is an attribute and there is no training
/// mode; ONNX defines the node (and exporters write it) as the inference
/// identity, with an all-true mask (of x's type before opset 10).
LogicalResult importLegacyDropout(NodeImporter &n) {
  Value x = n.input(0);
  double ratio = n.attrFloat("ratio", 0.5f);
  if (!(ratio >= 0 && ratio < 1))
    return n.error() << "expected 0 <= ratio < 1, got " << ratio;
  if (ratio != 0 && n.getImportOptions().training)
    emitWarning(n.getLoc()) << "node '" << n.getNode().name()
                            << "': Dropout of opset " << n.getOpset()
                            << " has no training mode: dtcc trains without "
                               "it; export with opset >= 12 and "
                               "training=torch.onnx.TrainingMode.TRAINING to "
                               "keep it";
  n.setOutput(0, x);
  if (n.wantsOutput(1)) {
    auto type = typeOf(x);
    Type maskElement = n.getOpset() >= 10 ? Type(n.builder().getI1Type())
                                          : type.getElementType();
    n.setOutput(1, n.splat(RankedTensorType::get(type.getShape(), maskElement),
                           1));
  }
  return success();
}

LogicalResult importDropout(NodeImporter &n) {
  Value x = n.input(0);
  if (failed(requireFloat(n, x)))
    return failure();
  if (n.getOpset() < 12)
    return importLegacyDropout(n);
  bool training = false;
  if (n.hasInput(2)) {
    auto mode = n.constantInput(2, "training_mode");
    if (failed(mode))
      return failure();
    if (mode->getNumElements() != 1 || !mode->getElementType().isInteger(1))
      return n.error() << "expected a boolean scalar training_mode (input 2), "
                          "got "
                       << mode->getType();
    training = mode->getValues<bool>()[0];
  }
  double ratio = 0.5;
  if (n.hasInput(1)) {
    auto r = n.constantInput(1, "ratio");
    if (failed(r))
      return failure();
    if (r->getNumElements() != 1 || !isa<FloatType>(r->getElementType()))
      return n.error() << "expected a floating-point scalar ratio (input 1), "
                          "got "
                       << r->getType();
    ratio = cast<FloatAttr>(r->getValues<Attribute>()[0]).getValueAsDouble();
    if (!(ratio >= 0 && ratio < 1))
      return n.error() << "expected 0 <= ratio < 1, got " << ratio;
  }
  auto type = typeOf(x);
  auto maskType = RankedTensorType::get(type.getShape(), n.builder().getI1Type());
  // Ratio 0 (nn.Dropout(0.0), PyTorch's default in some layers) is the
  // identity in training too; only an eval-mode export loses a dropout.
  if (!training || ratio == 0) {
    if (!training && ratio != 0 && n.getImportOptions().training)
      emitWarning(n.getLoc()) << "node '" << n.getNode().name()
                              << "': Dropout was exported in eval mode "
                                 "(training_mode false): dtcc trains without "
                                 "it; export with "
                                 "training=torch.onnx.TrainingMode.TRAINING to "
                                 "keep it";
    n.setOutput(0, x);
    if (n.wantsOutput(1))
      n.setOutput(1, n.splat(maskType, 1));
    return success();
  }
  // The mask depends on (seed, step, element): a seed per node, from the
  // node's own seed attribute or its name.
  int64_t seed = n.hasAttr("seed")
                     ? n.attrInt("seed", 0)
                     : (int64_t)llvm::xxh3_64bits(n.getNode().name() +
                                                  n.getNode().output(0));
  auto op = n.create<DropoutOp>(type, maskType, x, n.stepCounter(), Value(),
                                n.builder().getF32FloatAttr(ratio),
                                n.builder().getI64IntegerAttr(seed),
                                DenseI64ArrayAttr());
  n.setOutput(0, op.getResult());
  n.setOutput(1, op.getMask());
  return success();
}

} // namespace

void appendNNOps(std::vector<OpEntry> &ops) {
  ops.insert(ops.end(), {
      {"MatMul", 1, importMatMul},
      {"Gemm", 7, importGemm},
      {"Softmax", 1, importSoftmax<SoftmaxOp>},
      {"LogSoftmax", 1, importSoftmax<LogSoftmaxOp>},
      {"Hardmax", 1, importHardmax},
      {"LayerNormalization", 17, importLayerNorm},
      {"NegativeLogLikelihoodLoss", 12, importNllLoss},
      {"SoftmaxCrossEntropyLoss", 12, importSoftmaxCrossEntropy},
      {"Dropout", 7, importDropout},
  });
}

} // namespace dtcc::onnx_frontend
