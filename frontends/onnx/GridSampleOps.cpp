//===- GridSampleOps.cpp - ONNX GridSample to dgraph.grid_sample ----------===//
//
// GridSample (opset 16, the 4-D form torch.nn.functional.grid_sample
// exports; opset 20's "linear"/"cubic" names and its 1-D and volumetric
// (5-D) forms too) as dgraph.grid_sample; more than 3 spatial dimensions
// are rejected with the node's name.
// AffineGrid (opset 20), the grid of F.affine_grid, 2-D and 3-D.
// DeformConv (opset 19; torchvision's deform_conv2d): the input sampled
// bilinearly at each kernel tap's offset position, then a product with
// the filter. RoiAlign (opsets 10 and 16; torchvision's roi_align) as
// dgraph.roi_align.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/NodeImporter.h"
#include "runtime/base/RoiAlign.h"

#include <cmath>

using namespace mlir;
using namespace dtcc::graph;

namespace dtcc::onnx_frontend {
namespace {

LogicalResult importGridSample(NodeImporter &n) {
  Value x = n.input(0), grid = n.input(1);
  RankedTensorType xType = n.inputType(0), gridType = n.inputType(1);
  const int64_t dims = xType.getRank() - 2;
  if (dims < 1 || dims > 3)
    return n.error() << "expected X of rank 3 to 5 [N, C, D1, ..., Dr] (dtcc "
                        "samples r = 1 to 3 spatial dimensions), got "
                     << xType;
  if (gridType.getRank() != xType.getRank() ||
      gridType.getDimSize(dims + 1) != dims)
    return n.error() << "expected a grid of shape [N, D1_out, ..., Dr_out, "
                     << dims << "] (rank " << xType.getRank()
                     << ", as X's), got " << gridType;
  if (gridType.getDimSize(0) != xType.getDimSize(0))
    return n.error() << "expected the grid's batch (" << gridType.getDimSize(0)
                     << ") to be X's (" << xType.getDimSize(0) << ")";
  Type element = xType.getElementType();
  if (!isa<FloatType>(element))
    return n.error() << "expected a floating-point X (dtcc samples floats), "
                        "got "
                     << element;
  if (!isa<FloatType>(gridType.getElementType()))
    return n.error() << "expected a floating-point grid, got "
                     << gridType.getElementType();
  // ONNX lets the grid have its own float type: sample in X's.
  grid = n.castTo(grid, element);

  std::string mode = n.attrString("mode", "bilinear");
  // Opset 20 renamed the modes after Resize's.
  if (n.getOpset() >= 20 && mode == "linear")
    mode = "bilinear";
  else if (n.getOpset() >= 20 && mode == "cubic")
    mode = "bicubic";
  if (mode != "bilinear" && mode != "nearest" && mode != "bicubic")
    return n.error() << "unknown mode \"" << mode
                     << "\": expected \"bilinear\", \"nearest\" or "
                        "\"bicubic\" (\"linear\" and \"cubic\" from opset 20)";
  std::string padding = n.attrString("padding_mode", "zeros");
  if (padding != "zeros" && padding != "border" && padding != "reflection")
    return n.error() << "unknown padding_mode \"" << padding
                     << "\": expected \"zeros\", \"border\" or \"reflection\"";
  int64_t align = n.attrInt("align_corners", 0);
  if (align != 0 && align != 1)
    return n.error() << "expected align_corners 0 or 1, got " << align;

  SmallVector<int64_t> shape = {xType.getDimSize(0), xType.getDimSize(1)};
  llvm::append_range(shape, gridType.getShape().drop_front().drop_back());
  auto resultType = RankedTensorType::get(shape, element);
  OpBuilder &b = n.builder();
  n.setOutput(0, n.create<GridSampleOp>(
                      resultType, x, grid, b.getStringAttr(mode),
                      b.getStringAttr(padding), b.getBoolAttr(align != 0))
                     .getResult());
  return success();
}

/// AffineGrid (opset 20): the sampling grid [N, (D,) H, W, 2 | 3] of the
/// affine maps theta [N, 2, 3] | [N, 3, 4] (PyTorch's F.affine_grid, which
/// spatial transformer networks feed to GridSample): theta times the
/// constant grid of homogeneous coordinates (x, y, (z,) 1) of the output's
/// pixels in [-1, 1], a product whose gradient reaches theta.
LogicalResult importAffineGrid(NodeImporter &n) {
  Value theta = n.input(0);
  if (failed(requireFloat(n, theta, "theta")))
    return failure();
  auto size = n.constantInts(1, "size");
  if (failed(size))
    return failure();
  auto tt = cast<RankedTensorType>(theta.getType());
  int64_t spatial = int64_t(size->size()) - 2;
  if ((spatial != 2 && spatial != 3) || tt.getRank() != 3 ||
      tt.getDimSize(1) != spatial || tt.getDimSize(2) != spatial + 1 ||
      tt.getDimSize(0) != (*size)[0])
    return n.error() << "expected theta [N, 2, 3] with size [N, C, H, W] or "
                        "[N, 3, 4] with [N, C, D, H, W], got "
                     << tt << " and " << size->size() << " sizes";
  bool align = n.attrInt("align_corners", 0) != 0;
  // Coordinates along a dimension of `count` pixels (PyTorch's: 0 for one).
  auto coordinate = [&](int64_t i, int64_t count) {
    if (count <= 1)
      return 0.0;
    return align ? -1.0 + 2.0 * double(i) / double(count - 1)
                 : (2.0 * double(i) + 1.0) / double(count) - 1.0;
  };
  // Points in row-major order of (D,) H, W; columns x, y, (z,) 1.
  SmallVector<int64_t> dims(size->begin() + 2, size->end());
  int64_t points = 1;
  for (int64_t d : dims)
    points *= d;
  Type element = tt.getElementType();
  std::vector<double> base;
  for (int64_t c = 0; c < spatial + 1; ++c)
    for (int64_t p = 0; p < points; ++p) {
      // Column c reads dimension spatial - 1 - c (x is the last, W).
      double v = 1.0;
      if (c < spatial) {
        int64_t d = spatial - 1 - c, stride = 1;
        for (int64_t e = d + 1; e < spatial; ++e)
          stride *= dims[e];
        v = coordinate((p / stride) % dims[d], dims[d]);
      }
      base.push_back(v);
    }
  Value grid = n.floatConstant(
      RankedTensorType::get({spatial + 1, points}, element), base);
  // [N, spatial, spatial + 1] x [spatial + 1, points] -> [N, points, spatial]
  Value product = n.create<MatmulOp>(theta, grid, false, false).getResult();
  SmallVector<int64_t> shape = {(*size)[0]};
  shape.append(dims.begin(), dims.end());
  shape.push_back(spatial);
  n.setOutput(0, n.reshape(n.transpose(product, {0, 2, 1}), shape));
  return success();
}

/// DeformConv (opset 19, 2-D as torchvision's deform_conv2d computes it):
/// X [N, C, H, W] is read at each output pixel's kernel taps moved by
/// `offset` [N, G * kH * kW * 2, oH, oW] ((dy, dx) per offset group G and
/// tap), bilinearly, zero outside X; each sample is scaled by `mask`
/// [N, G * kH * kW, oH, oW] (modulated, DCNv2) where given, and the samples
/// multiply W [M, C / group, kH, kW] as a grouped convolution would, plus B.
/// Built from dgraph.grid_sample (one per offset group, every tap's grid
/// in one: zero padding, corners not aligned) and a batched product: the
/// gradients reach X, W, the offsets and the mask.
LogicalResult importDeformConv(NodeImporter &n) {
  Value x = n.input(0), w = n.input(1), offset = n.input(2);
  RankedTensorType xt = n.inputType(0), wt = n.inputType(1),
                   ot = n.inputType(2);
  Type element = xt.getElementType();
  if (!isa<FloatType>(element) || wt.getElementType() != element ||
      ot.getElementType() != element)
    return n.error() << "expected X, W and offset of one floating-point type, "
                        "got "
                     << xt << ", " << wt << " and " << ot;
  if (xt.getRank() != 4 || wt.getRank() != 4)
    return n.error() << "expected a 2-D deformable convolution (X [N, C, H, "
                        "W], W [M, C/group, kH, kW]), got X "
                     << xt << " and W " << wt
                     << " (dtcc deforms 2-D convolutions only)";
  int64_t batch = xt.getDimSize(0), c = xt.getDimSize(1), h = xt.getDimSize(2),
          width = xt.getDimSize(3), m = wt.getDimSize(0);
  int64_t group = n.attrInt("group", 1), groups = n.attrInt("offset_group", 1);
  if (group < 1 || c % group != 0 || m % group != 0 ||
      wt.getDimSize(1) != c / group)
    return n.error() << "expected group (" << group
                     << ") to divide the input channels (" << c
                     << ") and the filters (" << m << "), and W of shape [M, "
                     << "C/group, kH, kW], got " << wt;
  if (groups < 1 || c % groups != 0)
    return n.error() << "expected offset_group (" << groups
                     << ") to divide the input channels (" << c << ")";
  int64_t kh = wt.getDimSize(2), kw = wt.getDimSize(3);
  StringRef spatial = "one per spatial dimension";
  auto kernel = listAttr(n, "kernel_shape", 2, 0, 1, spatial);
  auto strides = listAttr(n, "strides", 2, 1, 1, spatial);
  auto dilations = listAttr(n, "dilations", 2, 1, 1, spatial);
  auto pads =
      listAttr(n, "pads", 4, 0, 0, "begin and end of each spatial dimension");
  if (failed(kernel) || failed(strides) || failed(dilations) || failed(pads))
    return failure();
  if (n.hasAttr("kernel_shape") && ((*kernel)[0] != kh || (*kernel)[1] != kw))
    return n.error() << "expected kernel_shape to be W's spatial shape [" << kh
                     << ", " << kw << "], got " << formatList(*kernel);
  int64_t oh =
      (h + (*pads)[0] + (*pads)[2] - ((*dilations)[0] * (kh - 1) + 1)) /
          (*strides)[0] +
      1;
  int64_t ow =
      (width + (*pads)[1] + (*pads)[3] - ((*dilations)[1] * (kw - 1) + 1)) /
          (*strides)[1] +
      1;
  if (oh < 1 || ow < 1)
    return n.error() << "leaves no output: the padded input is smaller than "
                        "the dilated kernel";
  int64_t taps = kh * kw;
  if (ot.getRank() != 4 || ot.getDimSize(0) != batch ||
      ot.getDimSize(1) != groups * taps * 2 || ot.getDimSize(2) != oh ||
      ot.getDimSize(3) != ow)
    return n.error() << "expected offset of shape [" << batch << ", "
                     << groups * taps * 2 << ", " << oh << ", " << ow
                     << "] (N, offset_group * kH * kW * 2, oH, oW), got " << ot;
  Value mask;
  if (n.hasInput(4)) {
    mask = n.input(4);
    auto mt = n.inputType(4);
    if (mt.getElementType() != element ||
        mt.getShape() != ArrayRef<int64_t>{batch, groups * taps, oh, ow})
      return n.error() << "expected mask of shape [" << batch << ", "
                       << groups * taps << ", " << oh << ", " << ow
                       << "] (N, offset_group * kH * kW, oH, oW) and X's "
                          "type, got "
                       << mt;
  }
  // Each tap's undeformed position in X's pixels, [taps, oH, oW], in the
  // coordinates grid_sample reads without aligned corners: -1 + (2p + 1) /
  // size. An offset moves the pixel p by d, the coordinate by 2d / size.
  SmallVector<double> ys, xs;
  for (int64_t a = 0; a < kh; ++a)
    for (int64_t bb = 0; bb < kw; ++bb)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double py = i * (*strides)[0] - (*pads)[0] + a * (*dilations)[0];
          double px = j * (*strides)[1] - (*pads)[1] + bb * (*dilations)[1];
          ys.push_back((2 * py + 1) / double(h) - 1);
          xs.push_back((2 * px + 1) / double(width) - 1);
        }
  SmallVector<int64_t> perGroup = {batch, groups, taps, oh, ow};
  auto baseType = RankedTensorType::get({taps, oh, ow}, element);
  // offset [N, G, taps, 2, oH, oW]: dy at 0, dx at 1.
  SmallVector<Value> moves = splitAlong(
      n, n.reshape(offset, {batch, groups, taps, 2, oh, ow}), 3, {1, 1});
  auto coordinate = [&](ArrayRef<double> base, int64_t which, double size) {
    Value d = n.reshape(moves[which], perGroup);
    Value scaled = n.fold<MulOp>(
        d, n.splat(RankedTensorType::get(perGroup, element), 2.0 / size));
    return n.fold<AddOp>(
        scaled, n.broadcastTo(n.floatConstant(baseType, base), perGroup));
  };
  Value gy = coordinate(ys, 0, double(h)),
        gx = coordinate(xs, 1, double(width));
  SmallVector<int64_t> last = perGroup;
  last.push_back(1);
  auto grid = concatenate(n, {n.reshape(gx, last), n.reshape(gy, last)}, 5);
  if (failed(grid))
    return failure();
  // One sampling per offset group, its channels at every tap at once.
  int64_t cg = c / groups;
  SmallVector<Value> sampled;
  auto xParts = splitAlong(n, x, 1, SmallVector<int64_t>(groups, cg));
  auto gridParts = splitAlong(n, *grid, 1, SmallVector<int64_t>(groups, 1));
  SmallVector<Value> maskParts;
  if (mask)
    maskParts = splitAlong(n, n.reshape(mask, {batch, groups, taps, oh * ow}),
                           1, SmallVector<int64_t>(groups, 1));
  OpBuilder &b = n.builder();
  for (int64_t g = 0; g < groups; ++g) {
    Value gridG = n.reshape(gridParts[g], {batch, taps * oh, ow, 2});
    auto type = RankedTensorType::get({batch, cg, taps * oh, ow}, element);
    Value s = n.create<GridSampleOp>(
                   type, xParts[g], gridG, b.getStringAttr("bilinear"),
                   b.getStringAttr("zeros"), b.getBoolAttr(false))
                  .getResult();
    s = n.reshape(s, {batch, cg, taps, oh * ow});
    if (mask)
      s = n.fold<MulOp>(
          s, n.broadcastTo(maskParts[g], {batch, cg, taps, oh * ow}));
    sampled.push_back(s);
  }
  auto columns = concatenate(n, sampled, 1);
  if (failed(columns))
    return failure();
  // [group, M/group, C/group * taps] x [N, group, C/group * taps, oH * oW].
  int64_t k = c / group * taps;
  auto y = numpyMatmul(n, n.reshape(w, {group, m / group, k}),
                       n.reshape(*columns, {batch, group, k, oh * ow}));
  if (failed(y))
    return failure();
  Value out = n.reshape(*y, {batch, m, oh, ow});
  if (n.hasInput(3)) {
    auto bt = n.inputType(3);
    if (bt.getElementType() != element || bt.getRank() != 1 ||
        bt.getDimSize(0) != m)
      return n.error() << "expected a bias B of shape [" << m
                       << "] and X's type, got " << bt;
    out = n.fold<AddOp>(out, n.broadcastTo(n.reshape(n.input(3), {1, m, 1, 1}),
                                           {batch, m, oh, ow}));
  }
  n.setOutput(0, out);
  return success();
}

/// RoiAlign (opsets 10 and 16; torchvision's roi_align) as
/// dgraph.roi_align. Opset 10 has no coordinate_transformation_mode: its
/// transform is opset 16's "output_half_pixel".
LogicalResult importRoiAlign(NodeImporter &n) {
  RankedTensorType xType = n.inputType(0), roisType = n.inputType(1),
                   batchType = n.inputType(2);
  if (xType.getRank() != 4)
    return n.error() << "expected X of rank 4 [N, C, H, W], got " << xType;
  Type element = xType.getElementType();
  if (!isa<FloatType>(element))
    return n.error() << "expected a floating-point X, got " << element;
  if (roisType.getRank() != 2 || roisType.getDimSize(1) != 4 ||
      !isa<FloatType>(roisType.getElementType()))
    return n.error() << "expected floating-point rois of shape [R, 4], got "
                     << roisType;
  const int64_t regions = roisType.getDimSize(0);
  if (batchType.getRank() != 1 || batchType.getDimSize(0) != regions ||
      !batchType.getElementType().isInteger(64))
    return n.error() << "expected int64 batch_indices of shape [" << regions
                     << "], got " << batchType;
  std::string mode = n.attrString("mode", "avg");
  if (mode != "avg" && mode != "max")
    return n.error() << "unknown mode \"" << mode
                     << "\": expected \"avg\" or \"max\"";
  std::string transform =
      n.attrString("coordinate_transformation_mode",
                   n.getOpset() >= 16 ? "half_pixel" : "output_half_pixel");
  if (transform != "half_pixel" && transform != "output_half_pixel")
    return n.error() << "unknown coordinate_transformation_mode \"" << transform
                     << "\": expected \"half_pixel\" or "
                        "\"output_half_pixel\"";
  // torchvision 0.14 exports roi_align through its opset-11 symbolic, with
  // no transform: at opset 16 and later its aligned=False (the default)
  // then reads as half_pixel, which is aligned=True.
  if (n.getOpset() >= 16 && !n.hasAttr("coordinate_transformation_mode") &&
      n.producerName() == "pytorch")
    emitWarning(n.getLoc())
        << "node '" << n.getNode().name() << "': RoiAlign of opset "
        << n.getOpset()
        << " without coordinate_transformation_mode reads its regions as "
           "half_pixel (ONNX's default since opset 16; torchvision's "
           "aligned=True); torchvision 0.14 writes no mode for "
           "aligned=False either: export such a model at opset 15 or lower";
  const int64_t outH = n.attrInt("output_height", 1),
                outW = n.attrInt("output_width", 1),
                ratio = n.attrInt("sampling_ratio", 0);
  if (outH < 1 || outW < 1 || ratio < 0 || ratio > runtime::roi::kMaxGrid)
    return n.error() << "expected output_height, output_width >= 1 and "
                        "0 <= sampling_ratio <= "
                     << runtime::roi::kMaxGrid
                     << " (samples a bin's side), got " << outH << ", " << outW
                     << " and " << ratio;
  const double scale = n.attrFloat("spatial_scale", 1.0f);
  if (!std::isfinite(scale))
    return n.error() << "expected a finite spatial_scale, got " << scale;
  OpBuilder &b = n.builder();
  auto type = RankedTensorType::get({regions, xType.getDimSize(1), outH, outW},
                                    element);
  n.setOutput(0, n.create<RoiAlignOp>(
                      type, n.input(0), n.input(1), n.input(2),
                      b.getStringAttr(mode), b.getI64IntegerAttr(outH),
                      b.getI64IntegerAttr(outW), b.getI64IntegerAttr(ratio),
                      b.getF64FloatAttr(scale),
                      b.getBoolAttr(transform == "half_pixel"))
                     .getResult());
  return success();
}

} // namespace

void appendGridSampleOps(std::vector<OpEntry> &ops) {
  ops.insert(ops.end(), {
                            {"GridSample", 16, importGridSample},
                            {"AffineGrid", 20, importAffineGrid},
                            {"DeformConv", 19, importDeformConv},
                            {"RoiAlign", 10, importRoiAlign},
                        });
}

} // namespace dtcc::onnx_frontend
