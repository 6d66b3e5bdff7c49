//===- NormPoolOps.cpp - ONNX normalizations over channels and pooling ----===//
//
// BatchNormalization (inference and training mode, with its running
// statistics as training state), InstanceNormalization, GroupNormalization,
// MaxPool (with Indices), AveragePool, LpPool, GlobalAveragePool,
// GlobalMaxPool and GlobalLpPool;
// LRN, MeanVarianceNormalization and MaxUnpool, decomposed into those and
// elementwise ops (no kernels of their own).
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/NodeImporter.h"

#include "mlir/IR/SymbolTable.h"

using namespace mlir;
using namespace dtcc::graph;

namespace dtcc::onnx_frontend {
namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// x of rank >= `minRank` with a float element type (or, with `allowInts`,
/// an 8-bit integer one, as MaxPool takes).
FailureOr<RankedTensorType> checkInput(NodeImporter &n, int64_t minRank,
                                       bool allowInts = false) {
  auto t = n.inputType(0);
  bool ok = isa<FloatType>(t.getElementType()) ||
            (allowInts && t.getElementType().isInteger(8));
  if (!ok)
    return n.error() << "expected a floating-point input"
                     << (allowInts ? " or 8-bit integers" : "") << ", got "
                     << t;
  if (t.getRank() < minRank)
    return n.error() << "expected an input of rank >= " << minRank
                     << " ([N, C" << (minRank > 2 ? ", d...]" : "]")
                     << "), got " << t;
  return t;
}

/// Input `i` as a `[size]` vector of x's element type (cast when its float
/// type differs, as BatchNormalization-15 allows); `what` names it.
FailureOr<Value> channelInput(NodeImporter &n, int i, int64_t size,
                              Type element, StringRef what) {
  Value v = n.input(i);
  auto t = typeOf(v);
  if (t.getRank() != 1 || t.getDimSize(0) != size ||
      !isa<FloatType>(t.getElementType()))
    return n.error() << "expected " << what << " (input " << i
                     << ") of shape [" << size << "] and a float type, got "
                     << t;
  return n.castTo(v, element);
}

/// Row `row` of a [2, C] statistics tensor as [C].
Value statsRow(NodeImporter &n, Value stats, int64_t row) {
  auto t = typeOf(stats);
  int64_t c = t.getDimSize(1);
  Value r = n.create<SliceOp>(stats, ArrayRef<int64_t>{row, 0},
                              ArrayRef<int64_t>{row + 1, c},
                              ArrayRef<int64_t>{1, 1})
                .getResult();
  return n.reshape(r, {c});
}

/// The variable `v` loads, if it is a load of one.
VariableOp loadedVariable(Value v) {
  auto load = v.getDefiningOp<LoadOp>();
  if (!load)
    return {};
  return SymbolTable::lookupNearestSymbolFrom<VariableOp>(
      load, load.getVariableAttr());
}

//===----------------------------------------------------------------------===//
// BatchNormalization
//===----------------------------------------------------------------------===//

LogicalResult importBatchNorm(NodeImporter &n) {
  auto xt = checkInput(n, 2);
  if (failed(xt))
    return failure();
  Value x = n.input(0);
  Type element = xt->getElementType();
  int64_t channels = xt->getDimSize(1);
  SmallVector<Value> params;
  for (auto [i, what] : llvm::enumerate(
           ArrayRef<StringRef>{"scale", "bias", "mean", "var"})) {
    auto p = channelInput(n, i + 1, channels, element, what);
    if (failed(p))
      return failure();
    params.push_back(*p);
  }
  float epsilon = n.attrFloat("epsilon", 1e-5f);
  if (!(epsilon >= 0))
    return n.error() << "expected epsilon >= 0, got " << epsilon;
  // Opsets 7 and 8 could normalize per element instead of per channel.
  if (n.getOpset() < 9 && n.attrInt("spatial", 1) != 1)
    return n.error() << "expected spatial = 1 (statistics per channel), got "
                     << n.attrInt("spatial", 1);
  // Before opset 14 the node had no training mode attribute: extra outputs
  // meant training, with outputs whose meaning ONNX left open.
  bool training = n.getOpset() >= 14 && n.attrInt("training_mode", 0) != 0;
  // PyTorch 2's exporter writes a module in train() mode as this node in
  // its inference form (training_mode 0, one output) but records the op it
  // came from: aten._native_batch_norm_legit_functional (batch_norm,
  // native_batch_norm) with training = True, its sixth argument. A
  // training import normalizes as that module does, with the batch's
  // statistics, and keeps its running statistics.
  if (!training && n.getImportOptions().training) {
    std::string op = n.torchOp();
    SmallVector<std::string> args = n.torchArgs();
    training = (op == "_native_batch_norm_legit_functional" ||
                op == "_native_batch_norm_legit" || op == "batch_norm" ||
                op == "native_batch_norm") &&
               args.size() > 5 && args[5] == "True";
  }
  bool wantsStats = n.wantsOutput(1) || n.wantsOutput(2);
  if (n.getOpset() < 14 && n.numOutputs() > 1)
    return n.error() << "training-mode outputs of BatchNormalization before "
                        "opset 14 are not supported (re-export with opset >= 14)";
  if (!training && wantsStats)
    return n.error() << "expected training_mode = 1 for the running mean and "
                        "variance outputs";
  APFloat epsAttr(epsilon);
  if (!training) {
    // An inference export's node normalizes with the running statistics.
    // ONNX differentiates them as any input; PyTorch's are buffers, never
    // trained: a training import of its export keeps them fixed (the
    // importer warns once that the batch's statistics are not used).
    if (n.getImportOptions().training && n.producerName() == "pytorch")
      for (int i : {3, 4})
        if (VariableOp var = loadedVariable(n.input(i)))
          var.setTrainable(false);
    n.setOutput(0, n.create<BatchNormOp>(x, params[0], params[1], params[2],
                                         params[3], epsAttr, false)
                       .getResult());
    return success();
  }

  // Statistics of the batch in two passes: the mean, then the centred
  // moments about it (var = (sum d^2 - (sum d)^2 / m) / m).
  int64_t count = xt->getNumElements() / std::max<int64_t>(channels, 1);
  if (count < 1)
    return n.error() << "expected at least one value per channel, got " << *xt;
  auto vecType = RankedTensorType::get({channels}, element);
  Value inv = n.splat(vecType, 1.0 / double(count));
  Value first = n.create<BatchNormStatsOp>(x, n.splat(vecType, 0.0)).getResult();
  Value mean = n.create<MulOp>(statsRow(n, first, 0), inv).getResult();
  Value second = n.create<BatchNormStatsOp>(x, mean).getResult();
  Value d = n.create<MulOp>(statsRow(n, second, 0), inv).getResult();
  Value var = n.create<SubOp>(n.create<MulOp>(statsRow(n, second, 1), inv),
                              n.create<MulOp>(d, d))
                  .getResult();
  n.setOutput(0, n.create<BatchNormOp>(x, params[0], params[1], mean, var,
                                       epsAttr, true)
                     .getResult());

  // The running statistics. PyTorch's BatchNorm exports this node but keeps
  // the unbiased variance (m / (m - 1)) where ONNX's definition has the
  // biased one: follow the exporter so that trained buffers match.
  double momentum = n.attrFloat("momentum", 0.9f);
  if (!(momentum >= 0 && momentum <= 1))
    return n.error() << "expected 0 <= momentum <= 1, got " << momentum;
  double varScale = 1.0;
  if (n.producerName() == "pytorch") {
    if (count < 2)
      return n.error() << "PyTorch's BatchNorm needs more than one value per "
                          "channel in training, got "
                       << *xt;
    varScale = double(count) / double(count - 1);
  }
  auto update = n.create<BatchNormUpdateOp>(
      params[2], params[3], mean, var, n.builder().getF64FloatAttr(momentum),
      n.builder().getF64FloatAttr(varScale));
  n.setOutput(1, update.getNewMean());
  n.setOutput(2, update.getNewVar());
  if (!n.getImportOptions().training)
    return success();
  // Training keeps the running statistics as state: non-trainable
  // variables that every step updates.
  VariableOp runningMean = loadedVariable(n.input(3));
  VariableOp runningVar = loadedVariable(n.input(4));
  if (!runningMean || !runningVar ||
      runningMean.getTensorType() != vecType ||
      runningVar.getTensorType() != vecType) {
    emitWarning(n.getLoc()) << "node '" << n.getNode().name()
                            << "': the running mean and variance are not "
                               "initializers of the input's type: dtcc "
                               "trains without keeping them";
    return success();
  }
  for (VariableOp var : {runningMean, runningVar})
    var.setTrainable(false);
  n.create<StoreOp>(update.getNewMean(), runningMean.getSymName());
  n.create<StoreOp>(update.getNewVar(), runningVar.getSymName());
  return success();
}

//===----------------------------------------------------------------------===//
// InstanceNormalization, GroupNormalization
//===----------------------------------------------------------------------===//

LogicalResult importGroupNorm(NodeImporter &n, int64_t groups,
                              int64_t paramSize) {
  Value x = n.input(0);
  auto xt = typeOf(x);
  int64_t channels = xt.getDimSize(1);
  if (groups < 1 || channels % groups != 0)
    return n.error() << "expected a group count >= 1 that divides the "
                     << channels << " channels, got " << groups;
  int64_t perGroup = channels / groups;
  SmallVector<Value> params;
  for (auto [i, what] : llvm::enumerate(ArrayRef<StringRef>{"scale", "bias"})) {
    auto p = channelInput(n, i + 1, paramSize, xt.getElementType(), what);
    if (failed(p))
      return failure();
    Value v = *p;
    if (paramSize != channels) { // one value per group: repeat it per channel
      auto grid = RankedTensorType::get({groups, perGroup}, xt.getElementType());
      v = n.reshape(n.fold<BroadcastInDimOp>(grid, v, ArrayRef<int64_t>{0}),
                    {channels});
    }
    params.push_back(v);
  }
  float epsilon = n.attrFloat("epsilon", 1e-5f);
  if (!(epsilon >= 0))
    return n.error() << "expected epsilon >= 0, got " << epsilon;
  auto op = n.create<GroupNormOp>(x, params[0], params[1], perGroup,
                                  APFloat(epsilon));
  n.setOutput(0, op.getResult());
  return success();
}

LogicalResult importInstanceNorm(NodeImporter &n) {
  auto xt = checkInput(n, 2);
  if (failed(xt))
    return failure();
  int64_t channels = xt->getDimSize(1);
  return importGroupNorm(n, channels, channels);
}

LogicalResult importGroupNormalization(NodeImporter &n) {
  auto xt = checkInput(n, 2);
  if (failed(xt))
    return failure();
  if (!n.hasAttr("num_groups"))
    return n.error() << "expected attribute num_groups";
  int64_t groups = n.attrInt("num_groups", 1);
  // Opset 18 has one scale and bias per group; opset 21 one per channel.
  int64_t paramSize = n.getOpset() >= 21 ? xt->getDimSize(1) : groups;
  return importGroupNorm(n, groups, paramSize);
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

/// The window of a pooling node: kernel, strides, dilations and the pads
/// after auto_pad.
struct Window {
  SmallVector<int64_t> kernel, strides, dilations, low, high;
  bool ceilMode = false;
};

FailureOr<Window> readWindow(NodeImporter &n, RankedTensorType x,
                             bool hasDilations) {
  size_t spatial = x.getRank() - 2;
  Window w;
  auto kernel = n.attrInts("kernel_shape");
  if (!kernel)
    return n.error() << "expected attribute kernel_shape";
  w.kernel = *kernel;
  auto list = [&](StringRef name, size_t size, int64_t fallback,
                  SmallVector<int64_t> &out) -> LogicalResult {
    if (auto given = n.attrInts(name))
      out = *given;
    else
      out.assign(size, fallback);
    if (out.size() != size)
      return n.error() << "expected " << name << " with " << size
                       << " entries, got " << out.size();
    return success();
  };
  SmallVector<int64_t> pads;
  if (w.kernel.size() != spatial)
    return n.error() << "expected kernel_shape with " << spatial
                     << " entries (one per spatial dimension of " << x
                     << "), got " << w.kernel.size();
  if (failed(list("strides", spatial, 1, w.strides)) ||
      failed(list("pads", 2 * spatial, 0, pads)))
    return failure();
  if (hasDilations) {
    if (failed(list("dilations", spatial, 1, w.dilations)))
      return failure();
  } else {
    w.dilations.assign(spatial, 1);
  }
  for (auto [what, values] : {std::pair<StringRef, ArrayRef<int64_t>>{
                                  "kernel_shape", w.kernel},
                              {"strides", w.strides},
                              {"dilations", w.dilations}})
    for (int64_t v : values)
      if (v < 1)
        return n.error() << "expected " << what << " entries >= 1, got " << v;
  for (int64_t p : pads)
    if (p < 0)
      return n.error() << "expected pads >= 0, got " << p;
  w.low.assign(pads.begin(), pads.begin() + spatial);
  w.high.assign(pads.begin() + spatial, pads.end());
  w.ceilMode = n.attrInt("ceil_mode", 0) != 0;
  std::string autoPad = n.attrString("auto_pad", "NOTSET");
  if (autoPad == "VALID") {
    w.low.assign(spatial, 0);
    w.high.assign(spatial, 0);
  } else if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
    // ceil(d / stride) outputs, the padding split with the odd one at the
    // end (SAME_UPPER) or the start (SAME_LOWER).
    for (size_t i = 0; i < spatial; ++i) {
      int64_t size = x.getDimSize(i + 2);
      int64_t out = (size + w.strides[i] - 1) / w.strides[i];
      int64_t span = (w.kernel[i] - 1) * w.dilations[i] + 1;
      int64_t total = std::max<int64_t>(0, (out - 1) * w.strides[i] + span - size);
      int64_t small = total / 2;
      w.low[i] = autoPad == "SAME_UPPER" ? small : total - small;
      w.high[i] = total - w.low[i];
    }
    w.ceilMode = false;
  } else if (autoPad != "NOTSET") {
    return n.error() << "expected auto_pad NOTSET, VALID, SAME_UPPER or "
                        "SAME_LOWER, got \""
                     << autoPad << "\"";
  }
  // The window must fit: the op's own check, with the node named.
  for (size_t i = 0; i < spatial; ++i) {
    int64_t span = (w.kernel[i] - 1) * w.dilations[i] + 1;
    if (x.getDimSize(i + 2) + w.low[i] + w.high[i] < span)
      return n.error() << "kernel " << w.kernel[i] << " with dilation "
                       << w.dilations[i] << " does not fit spatial dimension "
                       << i << " of " << x << " with padding " << w.low[i]
                       << "+" << w.high[i];
  }
  return w;
}

/// The Indices output of MaxPool from plane positions: the flat position in
/// the whole tensor, row-major (storage_order 0) or column-major (1).
Value globalIndices(NodeImporter &n, Value plane, RankedTensorType x,
                    bool columnMajor) {
  auto t = typeOf(plane);
  auto splat = [&](int64_t v) { return n.splat(t, double(v)); };
  int64_t rank = x.getRank();
  int64_t spatialSize = 1;
  for (int64_t d = 2; d < rank; ++d)
    spatialSize *= x.getDimSize(d);
  Value batch = n.create<IotaOp>(t, 0).getResult();
  Value channel = n.create<IotaOp>(t, 1).getResult();
  if (!columnMajor) {
    // ((n * C + c) * spatial) + plane
    Value nc = n.fold<AddOp>(
        n.fold<MulOp>(batch, splat(x.getDimSize(1))), channel);
    return n.fold<AddOp>(n.fold<MulOp>(nc, splat(spatialSize)), plane);
  }
  // n + N * (c + C * (d1 + D1 * (d2 + ...))), with d_i from the row-major
  // plane position.
  SmallVector<Value> coords(rank);
  coords[0] = batch;
  coords[1] = channel;
  Value rest = plane;
  for (int64_t d = rank - 1; d >= 2; --d) {
    coords[d] = n.fold<RemOp>(rest, splat(x.getDimSize(d)));
    rest = n.fold<DivOp>(rest, splat(x.getDimSize(d)));
  }
  Value index = coords[rank - 1];
  for (int64_t d = rank - 2; d >= 0; --d)
    index = n.fold<AddOp>(coords[d],
                          n.fold<MulOp>(splat(x.getDimSize(d)), index));
  return index;
}

LogicalResult importMaxPool(NodeImporter &n) {
  auto xt = checkInput(n, 3, /*allowInts=*/true);
  if (failed(xt))
    return failure();
  auto w = readWindow(n, *xt, /*hasDilations=*/true);
  if (failed(w))
    return failure();
  int64_t storageOrder = n.attrInt("storage_order", 0);
  if (storageOrder != 0 && storageOrder != 1)
    return n.error() << "expected storage_order 0 or 1, got " << storageOrder;
  auto op = n.create<MaxPoolOp>(n.input(0), w->kernel, w->strides, w->dilations,
                                w->low, w->high, w->ceilMode);
  n.setOutput(0, op.getResult());
  if (n.wantsOutput(1))
    n.setOutput(1, globalIndices(n, op.getIndices(), *xt, storageOrder == 1));
  return success();
}

LogicalResult importAveragePool(NodeImporter &n) {
  auto xt = checkInput(n, 3);
  if (failed(xt))
    return failure();
  auto w = readWindow(n, *xt, /*hasDilations=*/n.getOpset() >= 19);
  if (failed(w))
    return failure();
  auto op = n.create<AvgPoolOp>(n.input(0), w->kernel, w->strides,
                                w->dilations, w->low, w->high, w->ceilMode,
                                n.attrInt("count_include_pad", 0) != 0);
  n.setOutput(0, op.getResult());
  return success();
}

/// |x|^p as LpPool reads it (p >= 1).
Value absPower(NodeImporter &n, Value x, int64_t p) {
  if (p == 2)
    return n.fold<MulOp>(x, x);
  Value a = n.fold<AbsOp>(x);
  return p == 1 ? a : n.fold<PowOp>(a, n.splat(typeOf(a), double(p)));
}

/// The p-norm of the summed p-th powers `sum` (its gradient 0 where the
/// sum is 0: normOfSum).
Value lpRoot(NodeImporter &n, Value sum, int64_t p) {
  if (p == 1)
    return sum;
  if (p == 2)
    return normOfSum(n, sum);
  return normOfSum(n, sum, n.splat(typeOf(sum), 1.0 / double(p)));
}

/// (sum over the window of |x|^p)^(1/p), the padding zeros: the mean of
/// an average pool counting the padding times the kernel's size, as ONNX's
/// reference and PyTorch's lp_pool compute it (so that in ceil mode a last
/// window reaching past the padding is scaled as if it were whole).
LogicalResult importLpPool(NodeImporter &n) {
  auto xt = checkInput(n, 3);
  if (failed(xt))
    return failure();
  auto w = readWindow(n, *xt, /*hasDilations=*/n.getOpset() >= 18);
  if (failed(w))
    return failure();
  int64_t p = n.attrInt("p", 2);
  if (p < 1)
    return n.error() << "expected p >= 1, got " << p;
  int64_t count = 1;
  for (int64_t k : w->kernel)
    count *= k;
  Value mean = n.create<AvgPoolOp>(absPower(n, n.input(0), p), w->kernel,
                                   w->strides, w->dilations, w->low, w->high,
                                   w->ceilMode, /*countIncludePad=*/true)
                   .getResult();
  Value sum = n.fold<MulOp>(mean, n.splat(typeOf(mean), double(count)));
  n.setOutput(0, lpRoot(n, sum, p));
  return success();
}

LogicalResult importGlobalLpPool(NodeImporter &n) {
  auto xt = checkInput(n, 3);
  if (failed(xt))
    return failure();
  int64_t p = n.attrInt("p", 2);
  if (p < 1)
    return n.error() << "expected p >= 1, got " << p;
  SmallVector<int64_t> dims;
  for (int64_t d = 2; d < xt->getRank(); ++d)
    dims.push_back(d);
  Value sum = n.reduce<ReduceSumOp>(absPower(n, n.input(0), p), dims,
                                    /*keepDims=*/true);
  n.setOutput(0, lpRoot(n, sum, p));
  return success();
}

/// The mean of `v` over `dims` (kept, of size 1), holding `count` > 0
/// elements each: their sum times 1 / count.
Value meanOver(NodeImporter &n, Value v, ArrayRef<int64_t> dims,
               int64_t count) {
  Value sum = n.reduce<ReduceSumOp>(v, dims, /*keepDims=*/true);
  return n.fold<MulOp>(sum, n.splat(typeOf(sum), 1.0 / double(count)));
}

LogicalResult importGlobalAveragePool(NodeImporter &n) {
  auto xt = checkInput(n, 3);
  if (failed(xt))
    return failure();
  SmallVector<int64_t> dims;
  int64_t count = 1;
  for (int64_t d = 2; d < xt->getRank(); ++d) {
    dims.push_back(d);
    count *= xt->getDimSize(d);
  }
  if (count == 0)
    return n.error() << "expected spatial dimensions of size >= 1, got " << *xt;
  n.setOutput(0, meanOver(n, n.input(0), dims, count));
  return success();
}

LogicalResult importGlobalMaxPool(NodeImporter &n) {
  auto xt = checkInput(n, 3);
  if (failed(xt))
    return failure();
  // A max pool whose window is the whole plane: its gradient goes to the
  // position of the maximum, as PyTorch's adaptive_max_pool.
  size_t spatial = xt->getRank() - 2;
  SmallVector<int64_t> kernel(xt->getShape().drop_front(2)), ones(spatial, 1),
      zeros(spatial, 0);
  if (llvm::is_contained(kernel, 0))
    return n.error() << "expected spatial dimensions of size >= 1, got " << *xt;
  auto op = n.create<MaxPoolOp>(n.input(0), kernel, ones, ones, zeros, zeros,
                                false);
  n.setOutput(0, op.getResult());
  return success();
}

//===----------------------------------------------------------------------===//
// LRN, MeanVarianceNormalization
//===----------------------------------------------------------------------===//

/// y = x / (bias + alpha / size * sum of x^2 over a window of `size`
/// channels)^beta. The window sum is an average pool over the channel axis
/// (x^2 viewed as [N, 1, C, rest], zero padded, counting the padding), so
/// the gradient is avg_pool's.
LogicalResult importLRN(NodeImporter &n) {
  auto xt = checkInput(n, 2);
  if (failed(xt))
    return failure();
  if (!n.hasAttr("size"))
    return n.error() << "expected attribute size";
  int64_t size = n.attrInt("size", 1);
  if (size < 1)
    return n.error() << "expected size >= 1, got " << size;
  double alpha = n.attrFloat("alpha", 1e-4f);
  double beta = n.attrFloat("beta", 0.75f);
  double bias = n.attrFloat("bias", 1.0f);
  Value x = n.input(0);
  int64_t batch = xt->getDimSize(0), channels = xt->getDimSize(1);
  int64_t rest = 1;
  for (int64_t d = 2; d < xt->getRank(); ++d)
    rest *= xt->getDimSize(d);
  if (xt->getNumElements() == 0)
    return n.error() << "expected a non-empty input, got " << *xt;
  // Channels c - floor((size-1)/2) .. c + ceil((size-1)/2).
  int64_t low = (size - 1) / 2, high = size - 1 - low;
  Value squares = n.reshape(n.fold<MulOp>(x, x), {batch, 1, channels, rest});
  Value mean = n.create<AvgPoolOp>(squares, ArrayRef<int64_t>{size, 1},
                                   ArrayRef<int64_t>{1, 1},
                                   ArrayRef<int64_t>{1, 1},
                                   ArrayRef<int64_t>{low, 0},
                                   ArrayRef<int64_t>{high, 0}, false,
                                   /*count_include_pad=*/true)
                   .getResult();
  mean = n.reshape(mean, xt->getShape());
  Value base = n.fold<AddOp>(n.splat(*xt, bias),
                             n.fold<MulOp>(n.splat(*xt, alpha), mean));
  n.setOutput(0, n.fold<DivOp>(x, n.fold<PowOp>(base, n.splat(*xt, beta))));
  return success();
}

/// ONNX's function body: (x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9), the
/// means over `axes`. The variance is clamped at 0 where rounding makes it
/// negative (the function body's sqrt would give NaN there).
LogicalResult importMeanVarianceNorm(NodeImporter &n) {
  auto xt = checkInput(n, 1);
  if (failed(xt))
    return failure();
  SmallVector<int64_t> axes = n.attrInts("axes").value_or(
      SmallVector<int64_t>{0, 2, 3});
  SmallVector<int64_t> dims;
  int64_t count = 1;
  for (int64_t a : axes) {
    auto d = n.normalizeAxis(a, xt->getRank(), "axes entry");
    if (failed(d))
      return failure();
    if (llvm::is_contained(dims, *d))
      return n.error() << "expected distinct axes, got " << a << " twice";
    dims.push_back(*d);
    count *= xt->getDimSize(*d);
  }
  llvm::sort(dims);
  if (count == 0)
    return n.error() << "expected at least one element per mean over the axes, "
                     << "got " << *xt;
  Value x = n.input(0);
  auto meanOf = [&](Value v) {
    return n.broadcastTo(meanOver(n, v, dims, count), xt->getShape());
  };
  Value mean = meanOf(x);
  Value var = n.fold<SubOp>(meanOf(n.fold<MulOp>(x, x)),
                            n.fold<MulOp>(mean, mean));
  var = n.fold<MaxOp>(var, n.splat(*xt, 0.0));
  Value stdDev = n.fold<AddOp>(n.fold<SqrtOp>(var), n.splat(*xt, 1e-9));
  n.setOutput(0, n.fold<DivOp>(n.fold<SubOp>(x, mean), stdDev));
  return success();
}

//===----------------------------------------------------------------------===//
// MaxUnpool
//===----------------------------------------------------------------------===//

/// X written into zeros of the default output shape at the flat positions I
/// (as MaxPool's Indices output gives them), then padded to output_shape: a
/// scatter_nd over the flattened output, so the gradient of X is a gather
/// at I.
LogicalResult importMaxUnpool(NodeImporter &n) {
  auto xt = checkInput(n, 3);
  if (failed(xt))
    return failure();
  auto it = n.inputType(1);
  if (it.getShape() != xt->getShape() || !it.getElementType().isInteger(64))
    return n.error() << "expected indices I (input 1) of type "
                     << RankedTensorType::get(xt->getShape(),
                                              n.builder().getI64Type())
                     << ", got " << it;
  int64_t rank = xt->getRank();
  size_t spatial = rank - 2;
  auto kernel = n.attrInts("kernel_shape");
  if (!kernel)
    return n.error() << "expected attribute kernel_shape";
  SmallVector<int64_t> strides =
      n.attrInts("strides").value_or(SmallVector<int64_t>(spatial, 1));
  SmallVector<int64_t> pads =
      n.attrInts("pads").value_or(SmallVector<int64_t>(2 * spatial, 0));
  if (kernel->size() != spatial || strides.size() != spatial ||
      pads.size() != 2 * spatial)
    return n.error() << "expected kernel_shape and strides with " << spatial
                     << " entries and pads with " << 2 * spatial
                     << " (for input " << *xt << "), got " << kernel->size()
                     << ", " << strides.size() << " and " << pads.size();
  for (auto [k, stride] : llvm::zip(*kernel, strides))
    if (k < 1 || stride < 1)
      return n.error() << "expected kernel_shape and strides entries >= 1, got "
                       << k << " and " << stride;
  for (int64_t p : pads)
    if (p < 0)
      return n.error() << "expected pads >= 0, got " << p;
  // The input size of the MaxPool that X came from: I indexes it.
  SmallVector<int64_t> shape(xt->getShape().begin(),
                             xt->getShape().begin() + 2);
  for (size_t i = 0; i < spatial; ++i)
    shape.push_back((xt->getDimSize(i + 2) - 1) * strides[i] - pads[i] -
                    pads[i + spatial] + (*kernel)[i]);
  if (failed(n.checkShape(shape, "output shape")))
    return failure();
  int64_t total = 1, count = xt->getNumElements();
  for (int64_t d : shape)
    total *= d;
  auto flatType = RankedTensorType::get({total}, xt->getElementType());
  Value indices = n.reshape(n.input(1), {count, 1});
  Value updates = n.reshape(n.input(0), {count});
  Value y = n.create<ScatterNdOp>(flatType, n.splat(flatType, 0.0), indices,
                                  updates, 0, "none")
                .getResult();
  y = n.reshape(y, shape);
  if (n.hasInput(2)) {
    // As ONNX's reference: I still indexes the default shape, whose result
    // is padded with zeros at the end of each dimension to output_shape.
    auto given = n.constantInts(2, "output_shape");
    if (failed(given))
      return failure();
    SmallVector<int64_t> low(rank, 0), high(rank, 0);
    bool ok = (int64_t)given->size() == rank;
    for (int64_t d = 0; ok && d < rank; ++d) {
      high[d] = (*given)[d] - shape[d];
      ok = d < 2 ? high[d] == 0 : high[d] >= 0;
    }
    if (!ok) {
      auto diag = n.error() << "expected output_shape [" << shape[0] << ", "
                            << shape[1] << ", ...] of " << rank
                            << " entries, each spatial one >= the default "
                               "output size (";
      llvm::interleaveComma(ArrayRef<int64_t>(shape).drop_front(2), diag);
      diag << "), got [";
      llvm::interleaveComma(*given, diag);
      return diag << "]";
    }
    y = n.create<PadOp>(y, n.scalar(xt->getElementType(), 0.0), low, high)
            .getResult();
  }
  n.setOutput(0, y);
  return success();
}

} // namespace

void appendNormPoolOps(std::vector<OpEntry> &ops) {
  ops.insert(ops.end(), {
      {"BatchNormalization", 7, importBatchNorm},
      {"InstanceNormalization", 6, importInstanceNorm},
      {"GroupNormalization", 18, importGroupNormalization},
      {"MaxPool", 1, importMaxPool},
      {"AveragePool", 7, importAveragePool},
      {"LpPool", 2, importLpPool},
      {"GlobalLpPool", 2, importGlobalLpPool},
      {"GlobalAveragePool", 1, importGlobalAveragePool},
      {"GlobalMaxPool", 1, importGlobalMaxPool},
      {"LRN", 1, importLRN},
      {"MeanVarianceNormalization", 9, importMeanVarianceNorm},
      {"MaxUnpool", 9, importMaxUnpool},
  });
}

} // namespace dtcc::onnx_frontend
