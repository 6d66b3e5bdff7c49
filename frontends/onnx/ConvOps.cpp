//===- ConvOps.cpp - ONNX convolutions to dgraph --------------------------===//
//
// Conv, ConvInteger and QLinearConv become dgraph.conv (the integer ones
// in f64, exactly); ConvTranspose becomes
// dgraph.conv_input_grad (a transposed convolution is the input gradient of
// a convolution), followed by a pad when ONNX asks for an output the
// gradient's window cannot produce (negative padding from output_shape, or
// output_padding of a stride or more). Every attribute is read: kernel_shape
// (checked against W), strides, dilations, group, pads, auto_pad,
// output_padding and output_shape; an optional bias is added after.
// Col2Im (F.fold) is a transposed convolution of C groups by a one-hot
// filter.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/NodeImporter.h"

#include "mlir/IR/Matchers.h"

using namespace mlir;
using namespace dtcc::graph;

namespace dtcc::onnx_frontend {
namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// Floor division (ONNX's padding arithmetic may go negative).
int64_t floorDiv(int64_t a, int64_t b) {
  return a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
}

/// The attributes Conv, ConvInteger and ConvTranspose share, checked
/// against the input X and the weights W.
struct Window {
  size_t spatial = 0;
  SmallVector<int64_t> kernel, strides, dilations;
  /// ONNX `pads` ([begin..., end...]) when given.
  std::optional<SmallVector<int64_t>> pads;
  std::string autoPad;
  int64_t groups = 1;

  int64_t extent(size_t d) const { return (kernel[d] - 1) * dilations[d] + 1; }
};

FailureOr<Window> readWindow(NodeImporter &n, RankedTensorType x,
                             RankedTensorType w) {
  Window win;
  if (x.getRank() < 3 || x.getRank() > 5)
    return n.error() << "expected input X of rank 3, 4 or 5 (batch, "
                        "channels and 1 to 3 spatial dimensions), got "
                     << x;
  if (w.getRank() != x.getRank())
    return n.error() << "expected weights W of rank " << x.getRank()
                     << " (X's), got " << w;
  win.spatial = x.getRank() - 2;
  win.kernel.assign(w.getShape().begin() + 2, w.getShape().end());
  if (auto ks = n.attrInts("kernel_shape"); ks && *ks != win.kernel)
    return n.error() << "kernel_shape " << formatList(*ks)
                     << " differs from the spatial shape of W "
                     << formatList(win.kernel);
  auto strides =
      listAttr(n, "strides", win.spatial, 1, 1, "one per spatial dimension");
  auto dilations =
      listAttr(n, "dilations", win.spatial, 1, 1, "one per spatial dimension");
  if (failed(strides) || failed(dilations))
    return failure();
  win.strides = *strides;
  win.dilations = *dilations;
  win.groups = n.attrInt("group", 1);
  if (win.groups < 1)
    return n.error() << "expected group >= 1, got " << win.groups;
  win.autoPad = n.attrString("auto_pad", "NOTSET");
  if (win.autoPad != "NOTSET" && win.autoPad != "SAME_UPPER" &&
      win.autoPad != "SAME_LOWER" && win.autoPad != "VALID")
    return n.error() << "expected auto_pad NOTSET, SAME_UPPER, SAME_LOWER or "
                        "VALID, got \""
                     << win.autoPad << "\"";
  if (auto pads = n.attrInts("pads")) {
    if (win.autoPad != "NOTSET")
      return n.error() << "pads " << formatList(*pads)
                       << " and auto_pad \"" << win.autoPad
                       << "\" cannot both be given";
    if (pads->size() != 2 * win.spatial)
      return n.error() << "expected pads of " << 2 * win.spatial
                       << " entries (begin and end of each spatial "
                          "dimension), got "
                       << formatList(*pads);
    if (llvm::any_of(*pads, [](int64_t p) { return p < 0; }))
      return n.error() << "expected pads >= 0, got " << formatList(*pads);
    win.pads = *pads;
  }
  for (size_t d = 0; d < win.spatial; ++d)
    if (win.kernel[d] < 1)
      return n.error() << "expected kernel sizes >= 1, got W " << w;
  return win;
}

/// Splits a total padding as auto_pad says: SAME_UPPER puts the odd element
/// at the end, SAME_LOWER (and, for ConvTranspose's output_shape, NOTSET)
/// at the beginning.
std::pair<int64_t, int64_t> splitPadding(int64_t total, bool upper) {
  int64_t half = floorDiv(total, 2);
  return upper ? std::make_pair(half, total - half)
               : std::make_pair(total - half, half);
}

/// Builds `conv(x, w)` with the window's attributes and the given pads.
Value createConv(NodeImporter &n, Value x, Value w, const Window &win,
                 ArrayRef<int64_t> low, ArrayRef<int64_t> high) {
  return n.create<ConvOp>(x, w, win.strides, win.dilations, low, high,
                          win.groups)
      .getResult();
}

/// Adds the bias B ([M]) along dimension 1 of `y`.
FailureOr<Value> addBias(NodeImporter &n, Value y, int input) {
  if (!n.hasInput(input))
    return y;
  auto type = typeOf(y);
  Value bias = n.input(input);
  auto bt = typeOf(bias);
  int64_t m = type.getDimSize(1);
  // PyTorch 2.15's exporter (dynamo) writes the zero bias of a bias-free
  // Conv3d as zeros of shape [M, 2], which ONNX Runtime reads as its first M
  // values: a constant of one value everywhere is that value per channel.
  DenseElementsAttr value;
  if ((bt.getRank() != 1 || bt.getDimSize(0) != m) &&
      bt.getElementType() == type.getElementType() &&
      bt.getNumElements() >= m && matchPattern(bias, m_Constant(&value)) &&
      value.isSplat() && isa<FloatType>(bt.getElementType())) {
    bias = n.splat(RankedTensorType::get({m}, bt.getElementType()),
                   value.getSplatValue<APFloat>().convertToDouble());
    bt = typeOf(bias);
  }
  if (bt.getRank() != 1 || bt.getDimSize(0) != m ||
      bt.getElementType() != type.getElementType())
    return n.error() << "expected bias B of shape [" << type.getDimSize(1)
                     << "] and element type " << type.getElementType()
                     << ", got " << bt;
  Value b = n.fold<BroadcastInDimOp>(type, bias, ArrayRef<int64_t>{1});
  return n.fold<AddOp>(y, b);
}

/// Conv's checks of X [N, C, D..] and W [M, C/group, K..]; its pads from
/// `pads` or auto_pad.
LogicalResult convPads(NodeImporter &n, RankedTensorType x, RankedTensorType w,
                       const Window &win, SmallVectorImpl<int64_t> &low,
                       SmallVectorImpl<int64_t> &high) {
  int64_t c = x.getDimSize(1), m = w.getDimSize(0);
  if (c % win.groups != 0 || m % win.groups != 0)
    return n.error() << "expected group (" << win.groups
                     << ") to divide the input channels (" << c
                     << ") and the output channels (" << m << ")";
  if (w.getDimSize(1) != c / win.groups)
    return n.error() << "expected W of shape [M, C/group = " << c / win.groups
                     << ", kernel...] for X " << x << ", got " << w;
  for (size_t d = 0; d < win.spatial; ++d) {
    int64_t in = x.getDimSize(d + 2), lo = 0, hi = 0;
    if (win.pads) {
      lo = (*win.pads)[d];
      hi = (*win.pads)[d + win.spatial];
    } else if (win.autoPad == "SAME_UPPER" || win.autoPad == "SAME_LOWER") {
      int64_t out = llvm::divideCeil(in, win.strides[d]);
      int64_t total = std::max<int64_t>(
          0, (out - 1) * win.strides[d] + win.extent(d) - in);
      std::tie(lo, hi) = splitPadding(total, win.autoPad == "SAME_UPPER");
    }
    if (in + lo + hi < win.extent(d))
      return n.error() << "spatial dimension " << d << " of X (" << in
                       << ", padded " << in + lo + hi
                       << ") is smaller than the dilated kernel ("
                       << win.extent(d) << ")";
    low.push_back(lo);
    high.push_back(hi);
  }
  return success();
}

LogicalResult importConv(NodeImporter &n) {
  Value x = n.input(0), w = n.input(1);
  auto xt = typeOf(x), wt = typeOf(w);
  if (!isa<FloatType>(xt.getElementType()) ||
      xt.getElementType() != wt.getElementType())
    return n.error() << "expected X and W of one floating-point type, got "
                     << xt << " and " << wt;
  auto win = readWindow(n, xt, wt);
  if (failed(win))
    return failure();
  SmallVector<int64_t> low, high;
  if (failed(convPads(n, xt, wt, *win, low, high)))
    return failure();
  auto y = addBias(n, createConv(n, x, w, *win, low, high), 2);
  if (failed(y))
    return failure();
  n.setOutput(0, *y);
  return success();
}

/// Input `i` (one element, or with `perChannel` one per entry of dimension
/// `dim` of `like`) in f64, broadcast to `like`'s shape; `what` names it.
FailureOr<Value> broadcastParameter(NodeImporter &n, int i, StringRef what,
                                    RankedTensorType like, int64_t dim,
                                    bool perChannel) {
  Value v = n.input(i);
  auto vt = typeOf(v);
  auto target = RankedTensorType::get(like.getShape(), n.builder().getF64Type());
  Value f = n.castTo(v, target.getElementType());
  if (vt.getNumElements() == 1)
    return n.broadcastTo(n.reshape(f, {}), target.getShape());
  if (perChannel && vt.getRank() == 1 &&
      vt.getDimSize(0) == like.getDimSize(dim))
    return n.fold<BroadcastInDimOp>(target, f, ArrayRef<int64_t>{dim});
  return n.error() << "expected " << what << " (input " << i << ") "
                   << (perChannel ? "with one element or one per output channel "
                                    "("
                                  : "with one element")
                   << (perChannel ? std::to_string(like.getDimSize(dim)) + ")"
                                  : std::string())
                   << ", got " << vt;
}

/// The 8-bit operand `v` minus its zero point (input `zp`, of v's type;
/// for weights possibly one per output channel), in f64.
FailureOr<Value> centered(NodeImporter &n, Value v, int zp, bool weights) {
  auto vt = typeOf(v);
  Value f = n.castTo(v, n.builder().getF64Type());
  if (!n.hasInput(zp))
    return f;
  if (typeOf(n.input(zp)).getElementType() != vt.getElementType())
    return n.error() << "expected zero point (input " << zp << ") of type "
                     << vt.getElementType() << ", got " << n.input(zp).getType();
  auto z = broadcastParameter(n, zp, "zero point", typeOf(f), 0, weights);
  if (failed(z))
    return failure();
  return n.fold<SubOp>(f, *z);
}

/// The shared part of ConvInteger and QLinearConv: checks x (input 0) and
/// w (input `wInput`), both 8-bit, and builds conv(x - x_zero_point, w -
/// w_zero_point) in f64, which holds every sum of 8-bit products exactly
/// (up to 2^53).
FailureOr<Value> integerConv(NodeImporter &n, int wInput, int xZero,
                             int wZero) {
  Value x = n.input(0), w = n.input(wInput);
  auto xt = typeOf(x), wt = typeOf(w);
  auto is8Bit = [](Type t) { return t.isInteger(8); };
  if (!is8Bit(xt.getElementType()) || !is8Bit(wt.getElementType()))
    return n.error() << "expected 8-bit integer x and w, got " << xt << " and "
                     << wt;
  auto win = readWindow(n, xt, wt);
  if (failed(win))
    return failure();
  SmallVector<int64_t> low, high;
  if (failed(convPads(n, xt, wt, *win, low, high)))
    return failure();
  auto xf = centered(n, x, xZero, false);
  if (failed(xf))
    return failure();
  auto wf = centered(n, w, wZero, true);
  if (failed(wf))
    return failure();
  return createConv(n, *xf, *wf, *win, low, high);
}

/// ConvInteger: the sums of products of the centered operands, as int32.
LogicalResult importConvInteger(NodeImporter &n) {
  auto y = integerConv(n, 1, 2, 3);
  if (failed(y))
    return failure();
  n.setOutput(0, n.castTo(*y, n.builder().getIntegerType(32)));
  return success();
}

/// QLinearConv: the integer convolution plus the int32 bias B, scaled by
/// x_scale * w_scale / y_scale (w_scale possibly per output channel),
/// rounded to nearest even, offset by y_zero_point and saturated to
/// y_zero_point's 8-bit type. In f64: exact up to the final rounding.
LogicalResult importQLinearConv(NodeImporter &n) {
  for (int i : {1, 4, 6})
    if (!typeOf(n.input(i)).getElementType().isF32())
      return n.error() << "expected a float32 scale (input " << i << "), got "
                       << n.input(i).getType();
  auto acc = integerConv(n, 3, 2, 5);
  if (failed(acc))
    return failure();
  Value y = *acc;
  auto type = typeOf(y);
  if (n.hasInput(8)) {
    auto bt = typeOf(n.input(8));
    if (!bt.getElementType().isInteger(32) || bt.getRank() != 1 ||
        bt.getDimSize(0) != type.getDimSize(1))
      return n.error() << "expected an int32 bias B of shape ["
                       << type.getDimSize(1) << "], got " << bt;
    auto b = broadcastParameter(n, 8, "bias", type, 1, true);
    if (failed(b))
      return failure();
    y = n.fold<AddOp>(y, *b);
  }
  auto xs = broadcastParameter(n, 1, "x_scale", type, 1, false);
  auto ws = broadcastParameter(n, 4, "w_scale", type, 1, true);
  auto ys = broadcastParameter(n, 6, "y_scale", type, 1, false);
  if (failed(xs) || failed(ws) || failed(ys))
    return failure();
  Value scale = n.fold<DivOp>(n.fold<MulOp>(*xs, *ws), *ys);
  Type out = n.builder().getIntegerType(8, false);
  Value zeroPoint;
  if (n.hasInput(7)) {
    out = typeOf(n.input(7)).getElementType();
    if (!out.isInteger(8))
      return n.error() << "expected an 8-bit y_zero_point (input 7), got "
                       << n.input(7).getType();
    auto zp = broadcastParameter(n, 7, "y_zero_point", type, 1, false);
    if (failed(zp))
      return failure();
    zeroPoint = *zp;
  }
  auto q = requantize(n, y, scale, zeroPoint, out, "a y_zero_point");
  if (failed(q))
    return failure();
  n.setOutput(0, *q);
  return success();
}

/// ConvTranspose: X [N, C, D..], W [C, M/group, K..]. ONNX's output is
///   full[j + pad_begin] for j < output size (zero outside `full`)
/// where `full` is the transposed convolution without padding, of size
/// stride * (in - 1) + (K - 1) * dilation + 1, followed by output_padding
/// zeros. dgraph.conv_input_grad computes exactly that when the pads are
/// non-negative and output_padding < stride; otherwise it computes `full`
/// from the non-negative part of the begin padding and a dgraph.pad shifts
/// and cuts it.
LogicalResult importConvTranspose(NodeImporter &n) {
  Value x = n.input(0), w = n.input(1);
  auto xt = typeOf(x), wt = typeOf(w);
  if (!isa<FloatType>(xt.getElementType()) ||
      xt.getElementType() != wt.getElementType())
    return n.error() << "expected X and W of one floating-point type, got "
                     << xt << " and " << wt;
  auto win = readWindow(n, xt, wt);
  if (failed(win))
    return failure();
  int64_t c = xt.getDimSize(1);
  if (wt.getDimSize(0) != c)
    return n.error() << "expected W of shape [C = " << c
                     << ", M/group, kernel...] for X " << xt << ", got " << wt;
  if (c % win->groups != 0)
    return n.error() << "expected group (" << win->groups
                     << ") to divide the input channels (" << c << ")";
  int64_t m = wt.getDimSize(1) * win->groups;
  size_t spatial = win->spatial;
  auto outputPadding =
      listAttr(n, "output_padding", spatial, 0, 0, "one per spatial dimension");
  if (failed(outputPadding))
    return failure();
  std::optional<SmallVector<int64_t>> outputShape = n.attrInts("output_shape");
  if (outputShape) {
    // Some exporters give the whole shape [N, M, D..].
    if (outputShape->size() == spatial + 2 &&
        (*outputShape)[0] == xt.getDimSize(0) && (*outputShape)[1] == m)
      outputShape->erase(outputShape->begin(), outputShape->begin() + 2);
    if (outputShape->size() != spatial ||
        llvm::any_of(*outputShape, [](int64_t s) { return s < 1; }))
      return n.error() << "expected output_shape of " << spatial
                       << " positive entries (one per spatial dimension), "
                          "got "
                       << formatList(*outputShape);
  }
  SmallVector<int64_t> low, high, size;
  bool direct = true;
  for (size_t d = 0; d < spatial; ++d) {
    int64_t in = xt.getDimSize(d + 2), s = win->strides[d];
    int64_t op = (*outputPadding)[d];
    int64_t full = s * (in - 1) + op + win->extent(d);
    int64_t lo = 0, hi = 0, out;
    if (outputShape) {
      out = (*outputShape)[d];
      std::tie(lo, hi) =
          splitPadding(full - out, win->autoPad == "SAME_UPPER");
    } else if (win->autoPad == "SAME_UPPER" || win->autoPad == "SAME_LOWER") {
      out = in * s;
      std::tie(lo, hi) =
          splitPadding(full - out, win->autoPad == "SAME_UPPER");
    } else {
      if (win->pads) {
        lo = (*win->pads)[d];
        hi = (*win->pads)[d + spatial];
      }
      out = full - lo - hi;
      if (out < 1)
        return n.error() << "pads " << formatList(*win->pads)
                         << " leave no output in spatial dimension " << d
                         << " (its unpadded size is " << full << ")";
    }
    direct = direct && lo >= 0 && hi >= 0 && op < s;
    low.push_back(lo);
    high.push_back(hi);
    size.push_back(out);
  }
  Type element = xt.getElementType();
  SmallVector<int64_t> shape = {xt.getDimSize(0), m};
  Value y;
  if (direct) {
    shape.append(size);
    y = n.create<ConvInputGradOp>(RankedTensorType::get(shape, element), x, w,
                                  win->strides, win->dilations, low, high,
                                  win->groups)
            .getResult();
  } else {
    // `full` from max(lo, 0), then shifted right by max(lo, 0) - lo and cut
    // (or extended with zeros) to the output size.
    SmallVector<int64_t> fromLow, zeros(spatial, 0), padLow = {0, 0},
                                  padHigh = {0, 0};
    bool empty = false;
    for (size_t d = 0; d < spatial; ++d) {
      int64_t in = xt.getDimSize(d + 2), s = win->strides[d];
      int64_t lo = std::max<int64_t>(low[d], 0);
      int64_t natural = s * (in - 1) + win->extent(d) - lo;
      empty = empty || natural < 1;
      fromLow.push_back(lo);
      shape.push_back(natural);
      padLow.push_back(lo - low[d]);
      padHigh.push_back(size[d] - natural - (lo - low[d]));
    }
    auto outType = RankedTensorType::get(
        SmallVector<int64_t>{xt.getDimSize(0), m}, element);
    SmallVector<int64_t> outShape(outType.getShape());
    outShape.append(size);
    if (empty) {
      // The padding cuts away every computed position: all zeros.
      y = n.splat(RankedTensorType::get(outShape, element), 0);
    } else {
      Value t = n.create<ConvInputGradOp>(RankedTensorType::get(shape, element),
                                          x, w, win->strides, win->dilations,
                                          fromLow, zeros, win->groups)
                    .getResult();
      y = n.fold<PadOp>(t, n.scalar(element, 0), padLow, padHigh);
    }
  }
  auto withBias = addBias(n, y, 2);
  if (failed(withBias))
    return failure();
  n.setOutput(0, *withBias);
  return success();
}

/// Col2Im (opset 18; PyTorch's F.fold): the blocks of `input` [N, C *
/// prod(block), L] added into an image [N, C, image...]. It is the adjoint
/// of cutting the blocks, a convolution of C groups by a one-hot filter
/// [C * K, 1, block...] (output channel c * K + k reads offset k): so a
/// transposed convolution of the blocks laid out [N, C * K, L1, L2, ...],
/// whose gradient cuts blocks again.
LogicalResult importCol2Im(NodeImporter &n) {
  Value x = n.input(0);
  if (failed(requireFloat(n, x)))
    return failure();
  auto image = n.constantInts(1, "image_shape");
  auto block = n.constantInts(2, "block_shape");
  if (failed(image) || failed(block))
    return failure();
  auto xt = typeOf(x);
  size_t dims = image->size();
  if (block->size() != dims || dims == 0 || dims > 3 || xt.getRank() != 3)
    return n.error() << "expected an input [N, C * prod(block_shape), L] and "
                        "image_shape and block_shape of 1 to 3 sizes each, got "
                     << xt << ", " << image->size() << " and " << block->size()
                     << " sizes";
  auto list = [&](StringRef name, int64_t fallback,
                  size_t count) -> FailureOr<SmallVector<int64_t>> {
    SmallVector<int64_t> v(count, fallback);
    if (auto given = n.attrInts(name))
      v = *given;
    if (v.size() != count)
      return n.error() << "expected " << name << " with " << count
                       << " entries, got " << v.size();
    return v;
  };
  auto strides = list("strides", 1, dims);
  auto dilations = list("dilations", 1, dims);
  auto pads = list("pads", 0, 2 * dims);
  if (failed(strides) || failed(dilations) || failed(pads))
    return failure();
  int64_t k = 1;
  for (int64_t b : *block) {
    if (b < 1)
      return n.error() << "expected block sizes >= 1, got " << b;
    k *= b;
  }
  if (xt.getDimSize(1) % k != 0)
    return n.error() << "expected dimension 1 of the input ("
                     << xt.getDimSize(1)
                     << ") to be a multiple of the block's size " << k;
  int64_t channels = xt.getDimSize(1) / k;
  // The number of blocks along each dimension, as the image's convolution
  // by the block gives it.
  SmallVector<int64_t> blocks, low(pads->begin(), pads->begin() + dims),
      high(pads->begin() + dims, pads->end());
  int64_t total = 1;
  for (size_t d = 0; d < dims; ++d) {
    if ((*strides)[d] < 1 || (*dilations)[d] < 1 || low[d] < 0 || high[d] < 0)
      return n.error() << "expected strides and dilations >= 1 and pads >= 0";
    int64_t span = (*image)[d] + low[d] + high[d] -
                   (*dilations)[d] * ((*block)[d] - 1) - 1;
    if (span < 0)
      return n.error() << "expected the block to fit image dimension " << d;
    blocks.push_back(span / (*strides)[d] + 1);
    total *= blocks.back();
  }
  if (total != xt.getDimSize(2))
    return n.error() << "expected " << total
                     << " blocks (dimension 2 of the input) for this image, "
                        "block, strides, dilations and pads, got "
                     << xt.getDimSize(2);
  SmallVector<int64_t> gradShape = {xt.getDimSize(0), channels * k};
  gradShape.append(blocks);
  SmallVector<int64_t> filterShape = {channels * k, 1};
  filterShape.append(block->begin(), block->end());
  Type element = xt.getElementType();
  std::vector<double> ones;
  for (int64_t o = 0; o < channels * k; ++o)
    for (int64_t offset = 0; offset < k; ++offset)
      ones.push_back(offset == o % k ? 1.0 : 0.0);
  Value filter =
      n.floatConstant(RankedTensorType::get(filterShape, element), ones);
  SmallVector<int64_t> shape = {xt.getDimSize(0), channels};
  shape.append(image->begin(), image->end());
  n.setOutput(
      0, n.create<ConvInputGradOp>(RankedTensorType::get(shape, element),
                                   n.reshape(x, gradShape), filter, *strides,
                                   *dilations, low, high, channels)
             .getResult());
  return success();
}

} // namespace

void appendConvOps(std::vector<OpEntry> &ops) {
  ops.insert(ops.end(), {
      {"Conv", 1, importConv},
      {"ConvInteger", 10, importConvInteger},
      {"QLinearConv", 10, importQLinearConv},
      {"Col2Im", 18, importCol2Im},
      {"ConvTranspose", 1, importConvTranspose},
  });
}

} // namespace dtcc::onnx_frontend
