//===- GraphIndexingOps.cpp - resize, N-d indexing and top-k ops ----------===//
//
// Verifiers, type inference, VJP rules and sharding rules of the ops in
// GraphIndexingOps.td, and the VJP of gather_elements (which scatters back
// with scatter_elements). Index dimensions stay whole on every rank; batch
// dimensions and the dimensions a resize leaves alone are parallel.
//
//===----------------------------------------------------------------------===//

#include "dialects/Graph/IR/GraphOps.h"
#include "runtime/base/RoiAlign.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace dtcc::graph;

namespace {

using Rule = ShardingRule;
using Kind = ShardingRule::Kind;

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

std::string formatShape(ArrayRef<int64_t> shape) {
  std::string s;
  llvm::raw_string_ostream os(s);
  llvm::interleave(shape, os, "x");
  if (shape.empty())
    os << "scalar";
  return s;
}

bool isOneOf(StringRef value, ArrayRef<StringRef> allowed) {
  return llvm::is_contained(allowed, value);
}

/// "a", "b" or "c" for diagnostics.
std::string quotedList(ArrayRef<StringRef> values) {
  std::string s;
  for (auto [i, v] : llvm::enumerate(values)) {
    if (i)
      s += i + 1 == values.size() ? " or " : ", ";
    s += "\"" + v.str() + "\"";
  }
  return s;
}

/// A zero tensor of `type`: a splat constant (the lowering keeps one element
/// and fills a buffer at run time when a kernel needs it whole).
Value zerosOf(OpBuilder &b, Location loc, RankedTensorType type) {
  return ConstantOp::create(b, loc, splatOf(type, 0.0));
}

/// A tensor whose dimension d is the single factor ids[d] (none for size-1
/// dimensions, which cannot be split, or for a negative id).
Rule::TensorFactors mapped(RankedTensorType type, ArrayRef<int64_t> ids) {
  Rule::TensorFactors t;
  for (auto [d, id] : llvm::enumerate(ids)) {
    t.emplace_back();
    if (type.getDimSize(d) != 1 && id >= 0)
      t.back().push_back(id);
  }
  return t;
}

constexpr StringRef kResizeModes[] = {"nearest", "linear", "cubic"};
constexpr StringRef kCoordinateModes[] = {
    "half_pixel",   "half_pixel_symmetric", "pytorch_half_pixel",
    "align_corners", "asymmetric",          "tf_half_pixel_for_nn",
    "tf_crop_and_resize"};
constexpr StringRef kNearestModes[] = {"round_prefer_floor", "round_prefer_ceil",
                                       "floor", "ceil"};
constexpr StringRef kReductions[] = {"none", "add", "mul", "max", "min"};

/// The checks shared by resize (in -> out) and resize_grad (out -> in).
LogicalResult verifyResize(Operation *op, RankedTensorType in,
                           RankedTensorType out, StringRef mode,
                           StringRef coordinates, StringRef nearest,
                           ArrayRef<double> scales,
                           std::optional<ArrayRef<double>> roi) {
  if (in.getRank() != out.getRank() ||
      in.getElementType() != out.getElementType())
    return op->emitOpError("expected operand and result of one rank and "
                           "element type, got ")
           << in << " and " << out;
  if (!isOneOf(mode, kResizeModes))
    return op->emitOpError("expected mode ")
           << quotedList(kResizeModes) << ", got \"" << mode << "\"";
  if (mode != "nearest" && !isa<FloatType>(in.getElementType()))
    return op->emitOpError("expected a floating-point element type for mode \"")
           << mode << "\", got " << in.getElementType();
  if (!isOneOf(coordinates, kCoordinateModes))
    return op->emitOpError("expected coordinate_transformation_mode ")
           << quotedList(kCoordinateModes) << ", got \"" << coordinates << "\"";
  if (!isOneOf(nearest, kNearestModes))
    return op->emitOpError("expected nearest_mode ")
           << quotedList(kNearestModes) << ", got \"" << nearest << "\"";
  int64_t rank = in.getRank();
  if ((int64_t)scales.size() != rank)
    return op->emitOpError("expected ")
           << rank << " scales (one per dimension), got " << scales.size();
  for (auto [d, s] : llvm::enumerate(scales))
    if (!(s > 0))
      return op->emitOpError("expected positive scales, got ")
             << s << " in dim " << d;
  bool crop = coordinates == "tf_crop_and_resize";
  if (crop != roi.has_value())
    return op->emitOpError(crop ? "expected roi with tf_crop_and_resize"
                                : "expected no roi outside tf_crop_and_resize");
  if (roi && (int64_t)roi->size() != 2 * rank)
    return op->emitOpError("expected ")
           << 2 * rank << " roi entries (starts, then ends), got "
           << roi->size();
  for (int64_t d = 0; d < rank; ++d)
    if ((in.getDimSize(d) == 0) != (out.getDimSize(d) == 0))
      return op->emitOpError("expected result dim ")
             << d << " to be empty exactly where the operand's is, got "
             << formatShape(in.getShape()) << " -> "
             << formatShape(out.getShape());
  return success();
}

/// Whether a resize leaves dimension d alone: same size, scale 1 and an
/// identity coordinate map (tf_half_pixel_for_nn shifts by half a pixel;
/// tf_crop_and_resize is the identity only for the whole range).
bool isIdentityResizeDim(RankedTensorType in, RankedTensorType out,
                         StringRef coordinates, ArrayRef<double> scales,
                         std::optional<ArrayRef<double>> roi, int64_t d) {
  if (in.getDimSize(d) != out.getDimSize(d) || scales[d] != 1.0)
    return false;
  if (coordinates == "tf_half_pixel_for_nn")
    return in.getDimSize(d) == 1;
  if (coordinates == "tf_crop_and_resize")
    return roi && (*roi)[d] == 0.0 && (*roi)[d + in.getRank()] == 1.0;
  return true;
}

/// Dimensions an op leaves alone (a resize's identity dimensions, a pad's
/// unpadded ones) are parallel, shared by operand and result; the resampled
/// or padded ones must be whole.
Rule keptDimensionsRule(RankedTensorType operand, RankedTensorType result,
                        function_ref<bool(int64_t)> identity) {
  Rule r;
  SmallVector<int64_t> in, out;
  for (int64_t d = 0; d < operand.getRank(); ++d) {
    if (identity(d)) {
      int64_t f = r.addFactor(operand.getDimSize(d));
      in.push_back(f);
      out.push_back(f);
      continue;
    }
    in.push_back(r.addFactor(operand.getDimSize(d), Kind::kReplicated));
    out.push_back(r.addFactor(result.getDimSize(d), Kind::kReplicated));
  }
  r.operands.push_back(mapped(operand, in));
  r.results.push_back(mapped(result, out));
  return r;
}

/// Checks an N-d index layout: indices [B.., I.., k] into data [B.., K.., T..].
LogicalResult verifyNdIndices(std::optional<Location> loc,
                              RankedTensorType data, RankedTensorType indices,
                              int64_t batchDims) {
  if (indices.getRank() < 1)
    return emitOptionalError(loc, "expected indices of rank >= 1");
  if (batchDims < 0 || batchDims >= indices.getRank())
    return emitOptionalError(loc, "expected batch_dims in [0, ",
                             indices.getRank(), "), got ", batchDims);
  int64_t k = indices.getShape().back();
  if (k < 1 || k > data.getRank() - batchDims)
    return emitOptionalError(loc, "expected the last indices dim in [1, ",
                             data.getRank() - batchDims, "], got ", k);
  if (data.getShape().take_front(batchDims) !=
      indices.getShape().take_front(batchDims))
    return emitOptionalError(loc, "expected the first ", batchDims,
                             " dims of operand and indices to agree, got ",
                             formatShape(data.getShape()), " and ",
                             formatShape(indices.getShape()));
  return success();
}

/// indices[:-1] + data[b+k:].
SmallVector<int64_t> ndSliceShape(RankedTensorType data,
                                  RankedTensorType indices, int64_t batchDims) {
  SmallVector<int64_t> shape(indices.getShape().drop_back());
  int64_t k = indices.getShape().back();
  llvm::append_range(shape, data.getShape().drop_front(batchDims + k));
  return shape;
}

LogicalResult verifyReduction(Operation *op, StringRef reduction,
                              Type elementType) {
  if (!isOneOf(reduction, kReductions))
    return op->emitOpError("expected reduction ")
           << quotedList(kReductions) << ", got \"" << reduction << "\"";
  if (reduction != "none" && elementType.isInteger(1))
    return op->emitOpError("expected a numeric element type for reduction \"")
           << reduction << "\", got i1";
  return success();
}

/// The factors of a gather_nd/scatter_nd: batch dims parallel and shared,
/// index-tuple dims (I..) parallel, the indexed data dims (K..) and the
/// tuple length replicated, the slice dims (T..) parallel.
struct NdFactors {
  SmallVector<int64_t> data, indices, slices; // slices: indices[:-1] + T..
};
NdFactors ndFactors(Rule &r, RankedTensorType data, RankedTensorType indices,
                    int64_t b, Kind tupleKind) {
  NdFactors f;
  int64_t k = indices.getShape().back();
  for (int64_t d = 0; d < b; ++d) {
    int64_t id = r.addFactor(data.getDimSize(d));
    f.data.push_back(id);
    f.indices.push_back(id);
  }
  for (int64_t d = b; d < b + k; ++d)
    f.data.push_back(r.addFactor(data.getDimSize(d), Kind::kReplicated));
  for (int64_t d = b; d < indices.getRank() - 1; ++d)
    f.indices.push_back(r.addFactor(indices.getDimSize(d), tupleKind));
  f.slices = f.indices;
  f.indices.push_back(r.addFactor(k, Kind::kReplicated));
  for (int64_t d = b + k; d < data.getRank(); ++d) {
    int64_t id = r.addFactor(data.getDimSize(d));
    f.data.push_back(id);
    f.slices.push_back(id);
  }
  return f;
}

/// scatter_elements / gather_elements: dimensions other than `axis` where
/// indices span the whole operand are parallel and shared; the rest whole.
Rule elementsRule(Operation *op, Value data, Value indices, int64_t axis,
                  ArrayRef<Value> likeIndices, ArrayRef<Value> likeData) {
  Rule r;
  auto dt = typeOf(data), it = typeOf(indices);
  SmallVector<int64_t> dataIds, idxIds;
  for (int64_t d = 0; d < dt.getRank(); ++d) {
    if (d != axis && dt.getDimSize(d) == it.getDimSize(d)) {
      int64_t f = r.addFactor(dt.getDimSize(d));
      dataIds.push_back(f);
      idxIds.push_back(f);
      continue;
    }
    dataIds.push_back(r.addFactor(dt.getDimSize(d), Kind::kReplicated));
    idxIds.push_back(r.addFactor(it.getDimSize(d), Kind::kReplicated));
  }
  for (Value v : op->getOperands())
    r.operands.push_back(llvm::is_contained(likeIndices, v)
                             ? mapped(typeOf(v), idxIds)
                             : mapped(typeOf(v), dataIds));
  for (Value v : op->getResults())
    r.results.push_back(llvm::is_contained(likeData, v)
                            ? mapped(typeOf(v), dataIds)
                            : mapped(typeOf(v), idxIds));
  return r;
}

} // namespace

//===----------------------------------------------------------------------===//
// resize, resize_grad
//===----------------------------------------------------------------------===//

LogicalResult ResizeOp::verify() {
  return verifyResize(*this, typeOf(getOperand()), typeOf(getResult()),
                      getMode(), getCoordinateTransformationMode(),
                      getNearestMode(), getScales(), getRoi());
}

bool ResizeOp::isIdentityDim(int64_t d) {
  return isIdentityResizeDim(typeOf(getOperand()), typeOf(getResult()),
                             getCoordinateTransformationMode(), getScales(),
                             getRoi(), d);
}

LogicalResult ResizeOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                 SmallVectorImpl<Value> &out) {
  out.assign(1, Value());
  if (!grads[0] || !isa<FloatType>(typeOf(getOperand()).getElementType()))
    return success();
  out[0] = ResizeGradOp::create(
      b, getLoc(), typeOf(getOperand()), grads[0], getModeAttr(),
      getCoordinateTransformationModeAttr(), getNearestModeAttr(),
      getCubicCoeffAAttr(), getExcludeOutsideAttr(),
      getExtrapolationValueAttr(), getAntialiasAttr(), getScalesAttr(),
      getRoiAttr());
  return success();
}

ShardingRule ResizeOp::getShardingRule() {
  return keptDimensionsRule(typeOf(getOperand()), typeOf(getResult()),
                            [&](int64_t d) { return isIdentityDim(d); });
}

LogicalResult ResizeGradOp::verify() {
  return verifyResize(*this, typeOf(getResult()), typeOf(getGrad()), getMode(),
                      getCoordinateTransformationMode(), getNearestMode(),
                      getScales(), getRoi());
}

LogicalResult ResizeGradOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                     SmallVectorImpl<Value> &out) {
  // resize_grad is linear; its adjoint is the resize, where positions that
  // took the extrapolation value get zero.
  out.assign(1, Value());
  if (!grads[0])
    return success();
  out[0] = ResizeOp::create(
      b, getLoc(), typeOf(getGrad()), grads[0], getModeAttr(),
      getCoordinateTransformationModeAttr(), getNearestModeAttr(),
      getCubicCoeffAAttr(), getExcludeOutsideAttr(), b.getF64FloatAttr(0.0),
      getAntialiasAttr(), getScalesAttr(), getRoiAttr());
  return success();
}

ShardingRule ResizeGradOp::getShardingRule() {
  auto in = typeOf(getResult()), out = typeOf(getGrad());
  auto identity = [&](int64_t d) {
    return isIdentityResizeDim(in, out, getCoordinateTransformationMode(),
                               getScales(), getRoi(), d);
  };
  Rule forward = keptDimensionsRule(in, out, identity);
  std::swap(forward.operands, forward.results);
  return forward;
}

//===----------------------------------------------------------------------===//
// grid_sample, grid_sample_grad
//===----------------------------------------------------------------------===//

namespace {

constexpr StringRef kGridSampleModes[] = {"bilinear", "nearest", "bicubic"};
constexpr StringRef kGridPaddingModes[] = {"zeros", "border", "reflection"};

/// grid_sample's result shape: [N, C] of the operand, then the grid's
/// output positions.
SmallVector<int64_t> gridSampleShape(RankedTensorType x,
                                     RankedTensorType grid) {
  SmallVector<int64_t> shape = {x.getDimSize(0), x.getDimSize(1)};
  llvm::append_range(shape, grid.getShape().drop_front().drop_back());
  return shape;
}

/// The checks shared by grid_sample (x, grid -> y) and grid_sample_grad.
LogicalResult verifyGridSample(Operation *op, RankedTensorType x,
                               RankedTensorType grid, RankedTensorType y,
                               StringRef mode, StringRef padding) {
  const int64_t dims = x.getRank() - 2;
  if (dims < 1 || dims > 3)
    return op->emitOpError("expected an operand of rank 3 to 5 [N, C, "
                           "spatial...] (1 to 3 spatial dimensions), got ")
           << x;
  if (grid.getRank() != x.getRank() || grid.getDimSize(dims + 1) != dims)
    return op->emitOpError("expected a grid of rank ")
           << x.getRank() << " [N, output positions..., " << dims
           << "] for an operand of rank " << x.getRank() << ", got " << grid;
  if (grid.getElementType() != x.getElementType() ||
      y.getElementType() != x.getElementType())
    return op->emitOpError("expected operand, grid and result of one element "
                           "type, got ")
           << x.getElementType() << ", " << grid.getElementType() << " and "
           << y.getElementType();
  if (grid.getDimSize(0) != x.getDimSize(0))
    return op->emitOpError("expected grid dim 0 to be the operand's batch (")
           << x.getDimSize(0) << "), got " << grid.getDimSize(0);
  SmallVector<int64_t> shape = gridSampleShape(x, grid);
  if (y.getShape() != ArrayRef<int64_t>(shape))
    return op->emitOpError("expected a result of shape ")
           << formatShape(shape) << ", got " << formatShape(y.getShape());
  if (!isOneOf(mode, kGridSampleModes))
    return op->emitOpError("expected mode ")
           << quotedList(kGridSampleModes) << ", got \"" << mode << "\"";
  if (!isOneOf(padding, kGridPaddingModes))
    return op->emitOpError("expected padding_mode ")
           << quotedList(kGridPaddingModes) << ", got \"" << padding << "\"";
  return success();
}

/// grid_sample's factors (`grad`: grid_sample_grad's): the batch N, the
/// channels C (x, y) and the output positions (grid, y) are each computed
/// on their own; the image's spatial dimensions are read at data-dependent
/// positions and stay whole. In the gradient C and the output positions
/// are summed over: dgrid is a partial sum over split channels, doperand
/// over split output positions.
Rule gridSampleRule(RankedTensorType x, RankedTensorType grid, bool grad) {
  Rule r;
  const Kind summed = grad ? Kind::kReduction : Kind::kParallel;
  const int64_t dims = x.getRank() - 2;
  int64_t n = r.addFactor(x.getDimSize(0));
  int64_t c = r.addFactor(x.getDimSize(1), summed);
  SmallVector<int64_t> xf = {n, c}, gridf = {n}, yf = {n, c};
  for (int64_t i = 0; i < dims; ++i)
    xf.push_back(r.addFactor(x.getDimSize(2 + i), Kind::kReplicated));
  for (int64_t i = 0; i < dims; ++i) {
    int64_t out = r.addFactor(grid.getDimSize(1 + i), summed);
    gridf.push_back(out);
    yf.push_back(out);
  }
  gridf.push_back(r.addFactor(dims, Kind::kReplicated));
  auto y = RankedTensorType::get(gridSampleShape(x, grid), x.getElementType());
  Rule::TensorFactors xs = mapped(x, xf), grids = mapped(grid, gridf),
                      ys = mapped(y, yf);
  // Forward: x, grid -> y. Gradient: dy, x, grid -> dx, dgrid.
  if (grad)
    r.operands.push_back(ys);
  r.operands.append({xs, grids});
  if (grad)
    r.results.append({xs, grids});
  else
    r.results.push_back(ys);
  return r;
}

} // namespace

LogicalResult GridSampleOp::verify() {
  return verifyGridSample(*this, typeOf(getOperand()), typeOf(getGrid()),
                          typeOf(getResult()), getMode(), getPaddingMode());
}

LogicalResult GridSampleOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                     SmallVectorImpl<Value> &out) {
  out.assign(2, Value());
  if (!grads[0])
    return success();
  auto grad = GridSampleGradOp::create(
      b, getLoc(), TypeRange{getOperand().getType(), getGrid().getType()},
      grads[0], getOperand(), getGrid(), getModeAttr(), getPaddingModeAttr(),
      getAlignCornersAttr());
  out[0] = grad.getDoperand();
  out[1] = grad.getDgrid();
  return success();
}

ShardingRule GridSampleOp::getShardingRule() {
  return gridSampleRule(typeOf(getOperand()), typeOf(getGrid()),
                        /*grad=*/false);
}

LogicalResult GridSampleGradOp::verify() {
  auto x = typeOf(getOperand()), grid = typeOf(getGrid());
  if (failed(verifyGridSample(*this, x, grid, typeOf(getDy()), getMode(),
                              getPaddingMode())))
    return failure();
  if (getDoperand().getType() != x || getDgrid().getType() != grid)
    return emitOpError("expected doperand of type ")
           << x << " and dgrid of type " << grid << ", got "
           << getDoperand().getType() << " and " << getDgrid().getType();
  return success();
}

ShardingRule GridSampleGradOp::getShardingRule() {
  return gridSampleRule(typeOf(getOperand()), typeOf(getGrid()),
                        /*grad=*/true);
}

//===----------------------------------------------------------------------===//
// roi_align, roi_align_grad
//===----------------------------------------------------------------------===//

namespace {

/// The checks shared by roi_align (x, rois, batch_indices -> y) and
/// roi_align_grad (`y` its dy).
LogicalResult verifyRoiAlign(Operation *op, RankedTensorType x,
                             RankedTensorType rois, RankedTensorType batch,
                             RankedTensorType y, StringRef mode, int64_t outH,
                             int64_t outW, int64_t ratio) {
  if (x.getRank() != 4)
    return op->emitOpError("expected an operand of rank 4 [N, C, H, W], got ")
           << x;
  if (rois.getRank() != 2 || rois.getDimSize(1) != 4)
    return op->emitOpError("expected rois of shape [R, 4], got ") << rois;
  if (batch.getRank() != 1 || batch.getDimSize(0) != rois.getDimSize(0))
    return op->emitOpError("expected batch_indices of shape [")
           << rois.getDimSize(0) << "], got " << batch;
  if (rois.getElementType() != x.getElementType() ||
      y.getElementType() != x.getElementType())
    return op->emitOpError("expected operand, rois and result of one element "
                           "type, got ")
           << x.getElementType() << ", " << rois.getElementType() << " and "
           << y.getElementType();
  if (outH < 1 || outW < 1 || ratio < 0 || ratio > dtcc::runtime::roi::kMaxGrid)
    return op->emitOpError("expected output_height, output_width >= 1 and "
                           "0 <= sampling_ratio <= ")
           << dtcc::runtime::roi::kMaxGrid << ", got " << outH << ", " << outW
           << " and " << ratio;
  SmallVector<int64_t> shape = {rois.getDimSize(0), x.getDimSize(1), outH,
                                outW};
  if (y.getShape() != ArrayRef<int64_t>(shape))
    return op->emitOpError("expected a result of shape ")
           << formatShape(shape) << ", got " << formatShape(y.getShape());
  if (mode != "avg" && mode != "max")
    return op->emitOpError("expected mode \"avg\" or \"max\", got \"")
           << mode << "\"";
  return success();
}

/// roi_align's factors (`grad`: roi_align_grad's): the regions R (rois,
/// batch_indices, y) and the channels C (x, y) are each computed on their
/// own; the image's N, H and W are read at data-dependent positions and
/// stay whole, and so do the bins (their positions are global). In the
/// gradient R is summed over: doperand is a partial sum over split
/// regions.
Rule roiAlignRule(RankedTensorType x, RankedTensorType rois,
                  RankedTensorType batch, int64_t outH, int64_t outW,
                  bool grad) {
  Rule r;
  const Kind summed = grad ? Kind::kReduction : Kind::kParallel;
  int64_t n = r.addFactor(x.getDimSize(0), Kind::kReplicated);
  int64_t c = r.addFactor(x.getDimSize(1));
  int64_t h = r.addFactor(x.getDimSize(2), Kind::kReplicated);
  int64_t w = r.addFactor(x.getDimSize(3), Kind::kReplicated);
  int64_t regions = r.addFactor(rois.getDimSize(0), summed);
  int64_t box = r.addFactor(4, Kind::kReplicated);
  // A bin's position is its global index (the attributes name the whole
  // grid of bins): the bins stay whole.
  int64_t oh = r.addFactor(outH, Kind::kReplicated),
          ow = r.addFactor(outW, Kind::kReplicated);
  auto y = RankedTensorType::get(
      {rois.getDimSize(0), x.getDimSize(1), outH, outW}, x.getElementType());
  Rule::TensorFactors xs = mapped(x, {n, c, h, w}),
                      boxes = mapped(rois, {regions, box}),
                      indices = mapped(batch, {regions}),
                      ys = mapped(y, {regions, c, oh, ow});
  // Forward: x, rois, batch_indices -> y. Gradient: dy, x, rois,
  // batch_indices -> dx.
  if (grad)
    r.operands.push_back(ys);
  r.operands.append({xs, boxes, indices});
  r.results.push_back(grad ? xs : ys);
  return r;
}

} // namespace

LogicalResult RoiAlignOp::verify() {
  return verifyRoiAlign(*this, typeOf(getOperand()), typeOf(getRois()),
                        typeOf(getBatchIndices()), typeOf(getResult()),
                        getMode(), getOutputHeight(), getOutputWidth(),
                        getSamplingRatio());
}

LogicalResult RoiAlignOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                   SmallVectorImpl<Value> &out) {
  // The regions and their indices get no gradient.
  out.assign(3, Value());
  if (!grads[0])
    return success();
  out[0] = RoiAlignGradOp::create(b, getLoc(), getOperand().getType(), grads[0],
                                  getOperand(), getRois(), getBatchIndices(),
                                  getModeAttr(), getOutputHeightAttr(),
                                  getOutputWidthAttr(), getSamplingRatioAttr(),
                                  getSpatialScaleAttr(), getHalfPixelAttr());
  return success();
}

ShardingRule RoiAlignOp::getShardingRule() {
  return roiAlignRule(typeOf(getOperand()), typeOf(getRois()),
                      typeOf(getBatchIndices()), getOutputHeight(),
                      getOutputWidth(), /*grad=*/false);
}

LogicalResult RoiAlignGradOp::verify() {
  auto x = typeOf(getOperand());
  if (failed(verifyRoiAlign(*this, x, typeOf(getRois()),
                            typeOf(getBatchIndices()), typeOf(getDy()),
                            getMode(), getOutputHeight(), getOutputWidth(),
                            getSamplingRatio())))
    return failure();
  if (getDoperand().getType() != x)
    return emitOpError("expected doperand of type ")
           << x << ", got " << getDoperand().getType();
  return success();
}

ShardingRule RoiAlignGradOp::getShardingRule() {
  return roiAlignRule(typeOf(getOperand()), typeOf(getRois()),
                      typeOf(getBatchIndices()), getOutputHeight(),
                      getOutputWidth(), /*grad=*/true);
}

//===----------------------------------------------------------------------===//
// pad_grad
//===----------------------------------------------------------------------===//

LogicalResult PadGradOp::verify() {
  auto in = typeOf(getResult()), padded = typeOf(getGrad());
  StringRef mode = getMode();
  if (mode != "edge" && mode != "reflect" && mode != "wrap")
    return emitOpError("expected mode \"edge\", \"reflect\" or \"wrap\", got \"")
           << mode << "\"";
  ArrayRef<int64_t> low = getLow(), high = getHigh();
  if ((int64_t)low.size() != in.getRank() ||
      (int64_t)high.size() != in.getRank())
    return emitOpError("expected low and high of size ") << in.getRank();
  if (padded.getElementType() != in.getElementType() ||
      padded.getRank() != in.getRank())
    return emitOpError("expected grad of the result's rank and element "
                       "type, got ")
           << padded;
  for (int64_t d = 0; d < in.getRank(); ++d) {
    if (low[d] + in.getDimSize(d) + high[d] != padded.getDimSize(d))
      return emitOpError("expected grad dim ")
             << d << " to be " << low[d] + in.getDimSize(d) + high[d]
             << ", got " << padded.getDimSize(d);
    if (in.getDimSize(d) == 0 && (low[d] > 0 || high[d] > 0))
      return emitOpError("cannot pad empty dimension ") << d;
  }
  return success();
}

LogicalResult PadGradOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                  SmallVectorImpl<Value> &out) {
  out.assign(1, Value());
  if (!grads[0])
    return success();
  auto element = typeOf(getResult()).getElementType();
  Value zero =
      ConstantOp::create(b, getLoc(), splatOf(RankedTensorType::get({}, element), 0));
  out[0] = PadOp::create(b, getLoc(), grads[0], zero, getLow(), getHigh(),
                         getMode());
  return success();
}

ShardingRule PadGradOp::getShardingRule() {
  // As resize_grad's: the rule of the map from the result to the padded
  // gradient, operand and result swapped (unpadded dimensions shared and
  // parallel, padded ones whole).
  Rule forward = keptDimensionsRule(
      typeOf(getResult()), typeOf(getGrad()),
      [&](int64_t d) { return getLow()[d] == 0 && getHigh()[d] == 0; });
  std::swap(forward.operands, forward.results);
  return forward;
}

//===----------------------------------------------------------------------===//
// gather_nd, scatter_nd
//===----------------------------------------------------------------------===//

LogicalResult GatherNdOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr, OpaqueProperties properties, RegionRange,
    SmallVectorImpl<Type> &inferred) {
  Adaptor adaptor(operands, nullptr, properties);
  auto data = typeOf(adaptor.getOperand());
  auto indices = typeOf(adaptor.getIndices());
  int64_t b = adaptor.getBatchDims();
  if (failed(verifyNdIndices(loc, data, indices, b)))
    return failure();
  inferred.push_back(RankedTensorType::get(ndSliceShape(data, indices, b),
                                           data.getElementType()));
  return success();
}

LogicalResult GatherNdOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                   SmallVectorImpl<Value> &out) {
  out.assign(2, Value());
  auto data = typeOf(getOperand());
  if (!grads[0] || !isa<FloatType>(data.getElementType()))
    return success();
  out[0] = ScatterNdOp::create(b, getLoc(), data, zerosOf(b, getLoc(), data),
                               getIndices(), grads[0], getBatchDims(), "add");
  return success();
}

ShardingRule GatherNdOp::getShardingRule() {
  Rule r;
  auto data = typeOf(getOperand()), indices = typeOf(getIndices());
  NdFactors f = ndFactors(r, data, indices, getBatchDims(), Kind::kParallel);
  r.operands.push_back(mapped(data, f.data));
  r.operands.push_back(mapped(indices, f.indices));
  r.results.push_back(mapped(typeOf(getResult()), f.slices));
  return r;
}

LogicalResult ScatterNdOp::verify() {
  auto data = typeOf(getOperand()), indices = typeOf(getIndices()),
       updates = typeOf(getUpdates());
  int64_t b = getBatchDims();
  if (failed(verifyNdIndices(getLoc(), data, indices, b)))
    return failure();
  SmallVector<int64_t> shape = ndSliceShape(data, indices, b);
  if (updates.getShape() != ArrayRef<int64_t>(shape) ||
      updates.getElementType() != data.getElementType())
    return emitOpError("expected updates of type ")
           << RankedTensorType::get(shape, data.getElementType()) << ", got "
           << updates;
  return verifyReduction(*this, getReduction(), data.getElementType());
}

/// How a scatter's VJP reaches its targets: `scatter(base, values, r)`
/// scatters `values` (shaped like the updates) into `base` (shaped like the
/// data) with reduction r at the op's indices; `gather(v)` reads `v`
/// (shaped like the data) at each update's target.
struct ScatterAccess {
  function_ref<Value(Value base, Value values, StringRef reduction)> scatter;
  function_ref<Value(Value v)> gather;
};

/// The VJP of a scatter (scatter_nd or scatter_elements), as PyTorch's
/// scatter_reduce defines it:
///   none  the data's gradient is masked where updates landed; each update
///         gets the gradient at its target;
///   add   both get the gradient (at the targets for the updates);
///   mul   d data = g * P with P the product of the updates at each target;
///         d u_k = g * data * (the product of the other updates at u_k's
///         target), computed without dividing by zero: with Z zero updates
///         at a target and N the product of its nonzero ones, the others'
///         product is N / u_k when Z = 0, N for the one zero when Z = 1,
///         and 0 otherwise;
///   max, min  the gradient goes to the elements equal to the result (the
///         data element and every update that ties with it), split evenly.
static LogicalResult scatterRule(Operation *op, OpBuilder &b,
                                 StringRef reduction, ArrayRef<Value> grads,
                                 SmallVectorImpl<Value> &out,
                                 const ScatterAccess &at) {
  out.assign(3, Value());
  if (!grads[0] || !isa<FloatType>(typeOf(op->getResult(0)).getElementType()))
    return success();
  Location loc = op->getLoc();
  Value g = grads[0], data = op->getOperand(0), updates = op->getOperand(2);
  auto dataType = typeOf(data), updatesType = typeOf(updates);
  auto splat = [&](RankedTensorType type, double v) -> Value {
    return ConstantOp::create(b, loc, splatOf(type, v));
  };
  auto select = [&](Value c, Value x, Value y) -> Value {
    return SelectOp::create(b, loc, c, x, y);
  };
  auto mul = [&](Value x, Value y) -> Value { return MulOp::create(b, loc, x, y); };
  auto div = [&](Value x, Value y) -> Value { return DivOp::create(b, loc, x, y); };
  auto eq = [&](Value x, Value y) -> Value { return EqOp::create(b, loc, x, y); };
  auto asFloat = [&](Value mask, RankedTensorType like) -> Value {
    return select(mask, splat(like, 1.0), splat(like, 0.0));
  };
  if (reduction == "add") {
    out[0] = g;
    out[2] = at.gather(g);
  } else if (reduction == "none") {
    out[0] = at.scatter(g, splat(updatesType, 0.0), "none");
    out[2] = at.gather(g);
  } else if (reduction == "mul") {
    Value product = at.scatter(splat(dataType, 1.0), updates, "mul");
    out[0] = mul(g, product);
    Value zero = eq(updates, splat(updatesType, 0.0));
    Value zeros = at.scatter(splat(dataType, 0.0), asFloat(zero, updatesType),
                             "add");
    Value nonzero = at.scatter(
        splat(dataType, 1.0), select(zero, splat(updatesType, 1.0), updates),
        "mul");
    Value zerosAt = at.gather(zeros), nonzeroAt = at.gather(nonzero);
    Value safeUpdates = select(zero, splat(updatesType, 1.0), updates);
    Value others = select(
        zero,
        select(eq(zerosAt, splat(updatesType, 1.0)), nonzeroAt,
               splat(updatesType, 0.0)),
        select(eq(zerosAt, splat(updatesType, 0.0)),
               div(nonzeroAt, safeUpdates), splat(updatesType, 0.0)));
    out[2] = mul(at.gather(mul(g, data)), others);
  } else if (reduction == "max" || reduction == "min") {
    Value result = op->getResult(0);
    Value dataWins = asFloat(eq(data, result), dataType);
    Value updateWins = asFloat(eq(updates, at.gather(result)), updatesType);
    Value count = AddOp::create(
        b, loc, dataWins, at.scatter(splat(dataType, 0.0), updateWins, "add"));
    // Targets nobody wins (NaN results) keep a count of 0: divide by 1.
    Value share = div(g, select(eq(count, splat(dataType, 0.0)),
                                splat(dataType, 1.0), count));
    out[0] = mul(share, dataWins);
    out[2] = mul(at.gather(share), updateWins);
  } else {
    return op->emitOpError("has no VJP rule for reduction \"")
           << reduction << "\"";
  }
  return success();
}

LogicalResult ScatterNdOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                    SmallVectorImpl<Value> &out) {
  Location loc = getLoc();
  auto scatter = [&](Value base, Value values, StringRef reduction) -> Value {
    return ScatterNdOp::create(b, loc, typeOf(base), base, getIndices(), values,
                               getBatchDims(), reduction);
  };
  auto gather = [&](Value v) -> Value {
    return GatherNdOp::create(b, loc, v, getIndices(), getBatchDims());
  };
  return scatterRule(*this, b, getReduction(), grads, out, {scatter, gather});
}

ShardingRule ScatterNdOp::getShardingRule() {
  // The updates' tuple dims are combined into the result (in index order
  // for "none"): whole on every rank.
  Rule r;
  auto data = typeOf(getOperand()), indices = typeOf(getIndices());
  NdFactors f = ndFactors(r, data, indices, getBatchDims(), Kind::kReplicated);
  r.operands.push_back(mapped(data, f.data));
  r.operands.push_back(mapped(indices, f.indices));
  r.operands.push_back(mapped(typeOf(getUpdates()), f.slices));
  r.results.push_back(mapped(data, f.data));
  return r;
}

//===----------------------------------------------------------------------===//
// scatter_elements, gather_elements (its VJP)
//===----------------------------------------------------------------------===//

LogicalResult ScatterElementsOp::verify() {
  auto data = typeOf(getOperand()), indices = typeOf(getIndices());
  int64_t rank = data.getRank(), axis = getAxis();
  if (indices.getRank() != rank)
    return emitOpError("expected indices and updates of rank ")
           << rank << ", got " << indices.getRank();
  if (axis < 0 || axis >= rank)
    return emitOpError("expected axis in [0, ") << rank << "), got " << axis;
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis && indices.getDimSize(d) > data.getDimSize(d))
      return emitOpError("expected indices dim ")
             << d << " at most " << data.getDimSize(d) << ", got "
             << indices.getDimSize(d);
  if (typeOf(getUpdates()).getElementType() != data.getElementType())
    return emitOpError("expected updates of element type ")
           << data.getElementType() << ", got "
           << typeOf(getUpdates()).getElementType();
  return verifyReduction(*this, getReduction(), data.getElementType());
}

LogicalResult ScatterElementsOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                          SmallVectorImpl<Value> &out) {
  Location loc = getLoc();
  auto scatter = [&](Value base, Value values, StringRef reduction) -> Value {
    return ScatterElementsOp::create(b, loc, typeOf(base), base, getIndices(),
                                     values, getAxis(), reduction);
  };
  auto gather = [&](Value v) -> Value {
    return GatherElementsOp::create(b, loc, typeOf(getUpdates()), v,
                                    getIndices(), getAxis());
  };
  return scatterRule(*this, b, getReduction(), grads, out, {scatter, gather});
}

ShardingRule ScatterElementsOp::getShardingRule() {
  return elementsRule(*this, getOperand(), getIndices(), getAxis(),
                      {getIndices(), getUpdates()}, {getResult()});
}

ShardingRule GatherElementsOp::getShardingRule() {
  return elementsRule(*this, getOperand(), getIndices(), getAxis(),
                      {getIndices()}, {});
}

LogicalResult GatherElementsOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                                         SmallVectorImpl<Value> &out) {
  out.assign(2, Value());
  auto data = typeOf(getOperand());
  if (!grads[0] || !isa<FloatType>(data.getElementType()))
    return success();
  out[0] = ScatterElementsOp::create(b, getLoc(), data,
                                     zerosOf(b, getLoc(), data), getIndices(),
                                     grads[0], getAxis(), "add");
  return success();
}

//===----------------------------------------------------------------------===//
// top_k
//===----------------------------------------------------------------------===//

LogicalResult TopKOp::inferReturnTypes(
    MLIRContext *ctx, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr, OpaqueProperties properties, RegionRange,
    SmallVectorImpl<Type> &inferred) {
  Adaptor adaptor(operands, nullptr, properties);
  auto in = typeOf(adaptor.getOperand());
  int64_t axis = adaptor.getAxis(), k = adaptor.getK();
  if (axis < 0 || axis >= in.getRank())
    return emitOptionalError(loc, "expected axis in [0, ", in.getRank(),
                             "), got ", axis);
  if (k < 0 || k > in.getDimSize(axis))
    return emitOptionalError(loc, "expected k in [0, ", in.getDimSize(axis),
                             "], got ", k);
  SmallVector<int64_t> shape(in.getShape());
  shape[axis] = k;
  inferred.push_back(RankedTensorType::get(shape, in.getElementType()));
  inferred.push_back(RankedTensorType::get(shape, IntegerType::get(ctx, 64)));
  return success();
}

LogicalResult TopKOp::buildVJP(OpBuilder &b, ArrayRef<Value> grads,
                               SmallVectorImpl<Value> &out) {
  out.assign(1, Value());
  auto data = typeOf(getOperand());
  if (!grads[0] || !isa<FloatType>(data.getElementType()))
    return success();
  // The indices along the axis are distinct: each value's gradient lands in
  // its own position.
  out[0] = ScatterElementsOp::create(b, getLoc(), data,
                                     zerosOf(b, getLoc(), data), getIndices(),
                                     grads[0], getAxis(), "add");
  return success();
}

ShardingRule TopKOp::getShardingRule() {
  Rule r;
  auto in = typeOf(getOperand()), out = typeOf(getValues());
  int64_t axis = getAxis();
  SmallVector<int64_t> inIds, outIds;
  for (int64_t d = 0; d < in.getRank(); ++d) {
    if (d != axis) {
      int64_t f = r.addFactor(in.getDimSize(d));
      inIds.push_back(f);
      outIds.push_back(f);
      continue;
    }
    inIds.push_back(r.addFactor(in.getDimSize(d), Kind::kReplicated));
    outIds.push_back(r.addFactor(out.getDimSize(d), Kind::kReplicated));
  }
  r.operands.push_back(mapped(in, inIds));
  r.results.push_back(mapped(out, outIds));
  r.results.push_back(mapped(out, outIds));
  return r;
}
