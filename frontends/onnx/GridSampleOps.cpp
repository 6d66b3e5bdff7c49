//===- GridSampleOps.cpp - ONNX GridSample to dgraph.grid_sample ----------===//
//
// GridSample (opset 16, the 4-D form torch.nn.functional.grid_sample
// exports; opset 20's "linear"/"cubic" names too) as dgraph.grid_sample.
// Volumetric (5-D) sampling of opset 20 is rejected with the node's name.
// AffineGrid (opset 20), the grid of F.affine_grid, 2-D and 3-D.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/NodeImporter.h"

using namespace mlir;
using namespace dtcc::graph;

namespace dtcc::onnx_frontend {
namespace {

LogicalResult importGridSample(NodeImporter &n) {
  Value x = n.input(0), grid = n.input(1);
  RankedTensorType xType = n.inputType(0), gridType = n.inputType(1);
  if (xType.getRank() == 5)
    return n.error() << "volumetric (5-D) GridSample is not supported: dtcc "
                        "samples 4-D inputs [N, C, H, W] only, got X of "
                        "type "
                     << xType;
  if (xType.getRank() != 4)
    return n.error() << "expected X of rank 4 [N, C, H, W], got " << xType;
  if (gridType.getRank() != 4 || gridType.getDimSize(3) != 2)
    return n.error() << "expected a grid of shape [N, H_out, W_out, 2], got "
                     << gridType;
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

  auto resultType =
      RankedTensorType::get({xType.getDimSize(0), xType.getDimSize(1),
                             gridType.getDimSize(1), gridType.getDimSize(2)},
                            element);
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

} // namespace

void appendGridSampleOps(std::vector<OpEntry> &ops) {
  ops.insert(ops.end(), {
                            {"GridSample", 16, importGridSample},
                            {"AffineGrid", 20, importAffineGrid},
                        });
}

} // namespace dtcc::onnx_frontend
