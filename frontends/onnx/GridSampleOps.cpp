//===- GridSampleOps.cpp - ONNX GridSample to dgraph.grid_sample ----------===//
//
// GridSample (opset 16, the 4-D form torch.nn.functional.grid_sample
// exports; opset 20's "linear"/"cubic" names too) as dgraph.grid_sample.
// Volumetric (5-D) sampling of opset 20 is rejected with the node's name.
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

} // namespace

void appendGridSampleOps(std::vector<OpEntry> &ops) {
  ops.insert(ops.end(), {
                            {"GridSample", 16, importGridSample},
                        });
}

} // namespace dtcc::onnx_frontend
