//===- TensorOps.cpp - ONNX data-movement and shape ops to dgraph ---------===//
//
// Shapes are static in dgraph, so every shape operand (Reshape's shape,
// Slice's starts, ...) must be known at compile time; shape arithmetic
// (Shape, Gather, Concat on shapes) folds to constants as it is built.
// ReverseSequence and Compress are gathers; the window functions (Hann,
// Hamming, Blackman) fold to constants.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/NodeImporter.h"

#include "mlir/IR/Matchers.h"

#include <cmath>

using namespace mlir;
using namespace dtcc::graph;

namespace dtcc::onnx_frontend {
namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// Range is evaluated at compile time, element by element.
constexpr int64_t kMaxRangeElements = 1 << 20;

int64_t product(ArrayRef<int64_t> dims) {
  int64_t p = 1;
  for (int64_t d : dims)
    p *= d;
  return p;
}

Value i64Constant(NodeImporter &n, ArrayRef<int64_t> values,
                  ArrayRef<int64_t> shape) {
  auto type = RankedTensorType::get(shape, n.builder().getIntegerType(64));
  return n.constant(DenseElementsAttr::get(type, values));
}

LogicalResult importReshape(NodeImporter &n) {
  Value x = n.input(0);
  auto type = typeOf(x);
  auto requested = n.constantInts(1, "shape");
  if (failed(requested))
    return failure();
  bool allowZero = n.attrInt("allowzero", 0) != 0;
  SmallVector<int64_t> shape;
  int64_t inferred = -1, known = 1;
  for (auto [i, d] : llvm::enumerate(*requested)) {
    if (d == 0 && !allowZero) {
      if ((int64_t)i >= type.getRank())
        return n.error() << "shape entry " << i << " is 0 (copy), but the input "
                         << "has rank " << type.getRank();
      d = type.getDimSize(i);
    }
    if (d == -1) {
      if (inferred >= 0)
        return n.error() << "expected at most one -1 in the shape";
      inferred = i;
      shape.push_back(1);
      continue;
    }
    if (d < 0)
      return n.error() << "expected shape entries >= -1, got " << d;
    known *= d;
    shape.push_back(d);
  }
  if (inferred >= 0) {
    if (known == 0 || type.getNumElements() % known != 0)
      return n.error() << "cannot infer the -1 dimension: "
                       << type.getNumElements() << " elements into " << known;
    shape[inferred] = type.getNumElements() / known;
  }
  if (product(shape) != type.getNumElements())
    return n.error() << "cannot reshape " << type << " (" << type.getNumElements()
                     << " elements) to " << product(shape) << " elements";
  n.setOutput(0, n.reshape(x, shape));
  return success();
}

LogicalResult importFlatten(NodeImporter &n) {
  Value x = n.input(0);
  auto type = typeOf(x);
  int64_t axis = n.attrInt("axis", 1);
  if (axis < -type.getRank() || axis > type.getRank())
    return n.error() << "expected axis in [" << -type.getRank() << ", "
                     << type.getRank() << "], got " << axis;
  if (axis < 0)
    axis += type.getRank();
  n.setOutput(0, n.reshape(x, {product(type.getShape().take_front(axis)),
                               product(type.getShape().drop_front(axis))}));
  return success();
}

} // namespace

FailureOr<SmallVector<int64_t>> readAxes(NodeImporter &n, int index,
                                         int64_t inputSince, int64_t rank) {
  SmallVector<int64_t> axes;
  if (n.getOpset() >= inputSince) {
    if (n.hasInput(index)) {
      auto given = n.constantInts(index, "axes");
      if (failed(given))
        return failure();
      axes = *given;
    }
  } else if (auto attr = n.attrInts("axes")) {
    axes = *attr;
  }
  for (int64_t &a : axes) {
    auto norm = n.normalizeAxis(a, rank, "axes entry");
    if (failed(norm))
      return failure();
    a = *norm;
  }
  return axes;
}

FailureOr<SmallVector<int64_t>> unsqueezeAxes(NodeImporter &n,
                                              int64_t inputRank) {
  SmallVector<int64_t> raw;
  if (n.getOpset() >= 13) {
    auto given = n.constantInts(1, "axes");
    if (failed(given))
      return failure();
    raw = *given;
  } else if (auto attr = n.attrInts("axes")) {
    raw = *attr;
  }
  return n.normalizeAxes(raw, inputRank + int64_t(raw.size()));
}

namespace {

LogicalResult importSqueeze(NodeImporter &n) {
  Value x = n.input(0);
  auto type = typeOf(x);
  auto axes = readAxes(n, 1, 13, type.getRank());
  if (failed(axes))
    return failure();
  SmallVector<int64_t> shape;
  for (int64_t d = 0; d < type.getRank(); ++d) {
    bool listed = llvm::is_contained(*axes, d);
    if (listed && type.getDimSize(d) != 1)
      return n.error() << "cannot squeeze dim " << d << " of size "
                       << type.getDimSize(d);
    if (listed || (axes->empty() && type.getDimSize(d) == 1))
      continue;
    shape.push_back(type.getDimSize(d));
  }
  n.setOutput(0, n.reshape(x, shape));
  return success();
}

LogicalResult importUnsqueeze(NodeImporter &n) {
  Value x = n.input(0);
  auto type = typeOf(x);
  auto axes = unsqueezeAxes(n, type.getRank());
  if (failed(axes))
    return failure();
  SmallVector<int64_t> shape;
  int64_t next = 0;
  for (int64_t d = 0; d < type.getRank() + int64_t(axes->size()); ++d)
    shape.push_back(llvm::is_contained(*axes, d) ? 1 : type.getDimSize(next++));
  n.setOutput(0, n.reshape(x, shape));
  return success();
}

LogicalResult importTranspose(NodeImporter &n) {
  Value x = n.input(0);
  int64_t rank = typeOf(x).getRank();
  SmallVector<int64_t> perm;
  if (auto given = n.attrInts("perm")) {
    perm = *given;
  } else {
    for (int64_t d = rank - 1; d >= 0; --d)
      perm.push_back(d);
  }
  SmallVector<int64_t> sorted(perm);
  llvm::sort(sorted);
  bool permutation = (int64_t)sorted.size() == rank;
  for (int64_t i = 0; permutation && i < rank; ++i)
    permutation = sorted[i] == i;
  if (!permutation) {
    auto diag = n.error() << "expected perm to be a permutation of the "
                          << "input's " << rank << " dimensions, got [";
    llvm::interleaveComma(perm, diag);
    return diag << "]";
  }
  n.setOutput(0, n.transpose(x, perm));
  return success();
}

LogicalResult importConcat(NodeImporter &n) {
  SmallVector<Value> inputs;
  for (int i = 0; i < n.numInputs(); ++i)
    if (n.hasInput(i))
      inputs.push_back(n.input(i));
  auto result = concatenate(n, inputs, n.attrInt("axis", 0));
  if (failed(result))
    return failure();
  n.setOutput(0, *result);
  return success();
}

LogicalResult importSplit(NodeImporter &n) {
  Value x = n.input(0);
  auto type = typeOf(x);
  auto axis = n.normalizeAxis(n.attrInt("axis", 0), type.getRank());
  if (failed(axis))
    return failure();
  int64_t dim = type.getDimSize(*axis);
  int64_t parts = n.numOutputs();
  if (parts < 1 || (n.getOpset() >= 18 && n.hasAttr("num_outputs") &&
                    n.attrInt("num_outputs", 0) < 1))
    return n.error() << "expected at least one output";
  SmallVector<int64_t> sizes;
  if (n.getOpset() >= 13 && n.hasInput(1)) {
    auto given = n.constantInts(1, "split");
    if (failed(given))
      return failure();
    sizes = *given;
  } else if (n.getOpset() < 13 && n.attrInts("split")) {
    sizes = *n.attrInts("split");
  } else {
    if (n.getOpset() >= 18 && n.hasAttr("num_outputs"))
      parts = n.attrInt("num_outputs", parts);
    // Equal parts; with num_outputs the last may be smaller.
    int64_t chunk = llvm::divideCeil(dim, parts);
    if (n.getOpset() < 18 && dim % parts != 0)
      return n.error() << "cannot split dim " << *axis << " of size " << dim
                       << " into " << parts << " equal parts";
    for (int64_t i = 0, left = dim; i < parts; ++i, left -= chunk)
      sizes.push_back(std::min(chunk, left));
  }
  if (failed(n.checkShape(sizes, "split size")))
    return failure();
  int64_t total = 0;
  for (int64_t s : sizes)
    total += s;
  if (total != dim || (int64_t)sizes.size() != n.numOutputs())
    return n.error() << "expected " << n.numOutputs()
                     << " split sizes summing to " << dim;
  for (auto [i, piece] : llvm::enumerate(splitAlong(n, x, *axis, sizes)))
    n.setOutput(i, piece);
  return success();
}

/// Slices `x` as ONNX's Slice does: per entry, `starts` to `ends` (negative
/// from the end, clamped) along axis `axes` (not given: 0, 1, ...) by
/// `steps` (not given: 1; negative walks the dimension backwards).
static LogicalResult
sliceAlongAxes(NodeImporter &n, Value x, ArrayRef<int64_t> starts,
               ArrayRef<int64_t> ends,
               std::optional<SmallVector<int64_t>> givenAxes,
               std::optional<SmallVector<int64_t>> givenSteps) {
  auto type = typeOf(x);
  int64_t rank = type.getRank();
  SmallVector<int64_t> axes, steps(starts.size(), 1);
  if (givenAxes)
    axes = *givenAxes;
  else
    for (int64_t i = 0; i < (int64_t)starts.size(); ++i)
      axes.push_back(i);
  if (givenSteps)
    steps = *givenSteps;
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size())
    return n.error() << "expected starts, ends, axes and steps of one length";

  SmallVector<int64_t> start(rank, 0), limit(type.getShape()), stride(rank, 1);
  SmallVector<int64_t> reversed;
  for (size_t i = 0; i < axes.size(); ++i) {
    auto axis = n.normalizeAxis(axes[i], rank, "axes entry");
    if (failed(axis))
      return failure();
    int64_t dim = type.getDimSize(*axis), step = steps[i];
    if (step == 0)
      return n.error() << "expected nonzero steps";
    int64_t s = starts[i], e = ends[i];
    if (s < 0)
      s += dim;
    if (e < 0)
      e += dim;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      start[*axis] = s;
      limit[*axis] = std::max(s, e);
      stride[*axis] = step;
    } else {
      // A negative step walks the reversed dimension forward.
      s = std::clamp<int64_t>(s, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      int64_t rs = dim - 1 - s, re = dim - 1 - e;
      start[*axis] = std::clamp<int64_t>(rs, 0, dim);
      limit[*axis] = std::max(start[*axis], std::clamp<int64_t>(re, 0, dim));
      stride[*axis] = -step;
      reversed.push_back(*axis);
    }
  }
  if (!reversed.empty()) {
    llvm::sort(reversed);
    x = n.fold<ReverseOp>(x, reversed);
  }
  n.setOutput(0, n.fold<SliceOp>(x, start, limit, stride));
  return success();
}

LogicalResult importSlice(NodeImporter &n) {
  Value x = n.input(0);
  // Before opset 10: the attributes starts, ends and axes, no steps.
  if (n.getOpset() < 10) {
    auto starts = n.attrInts("starts"), ends = n.attrInts("ends");
    if (!starts || !ends)
      return n.error() << "expected attributes starts and ends";
    return sliceAlongAxes(n, x, *starts, *ends, n.attrInts("axes"),
                          std::nullopt);
  }
  auto starts = n.constantInts(1, "starts");
  auto ends = n.constantInts(2, "ends");
  if (failed(starts) || failed(ends))
    return failure();
  std::optional<SmallVector<int64_t>> axes, steps;
  if (n.hasInput(3)) {
    auto given = n.constantInts(3, "axes");
    if (failed(given))
      return failure();
    axes = *given;
  }
  if (n.hasInput(4)) {
    auto given = n.constantInts(4, "steps");
    if (failed(given))
      return failure();
    steps = *given;
  }
  return sliceAlongAxes(n, x, *starts, *ends, axes, steps);
}

/// The indices (input 1) of a gather from `axis` of `data`: i32 or i64,
/// none from an empty axis (every index is out of its range), and where
/// known at compile time within the axis (from its end where negative),
/// naming the first bad one as the kernels would when the program runs.
static LogicalResult checkIndices(NodeImporter &n, Value data, int64_t axis) {
  Value indices = n.input(1);
  Type it = getElementTypeOrSelf(indices.getType());
  if (!it.isInteger(32) && !it.isInteger(64))
    return n.error() << "expected i32 or i64 indices, got "
                     << indices.getType();
  const int64_t size = typeOf(data).getDimSize(axis);
  if (size == 0 && typeOf(indices).getNumElements())
    return n.error() << "cannot gather " << typeOf(indices).getNumElements()
                     << " indices from axis " << axis << " of "
                     << data.getType() << ", which is empty";
  auto known = n.knownInput(1);
  if (!known || ShapedType::isDynamic(size))
    return success();
  int64_t position = 0;
  for (const APInt &v : known->getValues<APInt>()) {
    const int64_t index = v.getSExtValue();
    if (index < -size || index >= size)
      return n.error() << "index " << index << " at position " << position
                       << " of the indices is out of range [" << -size << ", "
                       << size << ") of axis " << axis << " of "
                       << data.getType();
    ++position;
  }
  return success();
}

LogicalResult importGather(NodeImporter &n) {
  Value data = n.input(0), indices = n.input(1);
  auto axis = n.normalizeAxis(n.attrInt("axis", 0), typeOf(data).getRank());
  if (failed(axis))
    return failure();
  if (failed(checkIndices(n, data, *axis)))
    return failure();
  n.setOutput(0, n.fold<GatherOp>(data, indices, *axis));
  return success();
}

LogicalResult importGatherElements(NodeImporter &n) {
  Value data = n.input(0), indices = n.input(1);
  auto axis = n.normalizeAxis(n.attrInt("axis", 0), typeOf(data).getRank());
  if (failed(axis))
    return failure();
  if (typeOf(indices).getRank() != typeOf(data).getRank())
    return n.error() << "expected indices of the data's rank";
  if (failed(checkIndices(n, data, *axis)))
    return failure();
  auto resultType = RankedTensorType::get(typeOf(indices).getShape(),
                                          typeOf(data).getElementType());
  n.setOutput(0, n.create<GatherElementsOp>(resultType, data, indices, *axis)
                     .getResult());
  return success();
}

LogicalResult importExpand(NodeImporter &n) {
  Value x = n.input(0);
  auto shape = n.constantInts(1, "shape");
  if (failed(shape) || failed(n.checkShape(*shape, "shape")))
    return failure();
  auto out = n.broadcastShape({typeOf(x).getShape(), *shape});
  if (failed(out) || failed(n.checkShape(*out, "shape")))
    return failure();
  n.setOutput(0, n.broadcastTo(x, *out));
  return success();
}

LogicalResult importTile(NodeImporter &n) {
  Value x = n.input(0);
  auto type = typeOf(x);
  auto repeats = n.constantInts(1, "repeats");
  if (failed(repeats))
    return failure();
  if ((int64_t)repeats->size() != type.getRank())
    return n.error() << "expected " << type.getRank() << " repeats, got "
                     << repeats->size();
  SmallVector<int64_t> expandedCheck(*repeats);
  llvm::append_range(expandedCheck, type.getShape());
  if (failed(n.checkShape(expandedCheck, "repeats")))
    return failure();
  // [d0, d1] repeated [r0, r1] = broadcast to [r0, d0, r1, d1], then merge.
  SmallVector<int64_t> expanded, dims, tiled;
  for (int64_t d = 0; d < type.getRank(); ++d) {
    expanded.push_back((*repeats)[d]);
    expanded.push_back(type.getDimSize(d));
    dims.push_back(2 * d + 1);
    tiled.push_back((*repeats)[d] * type.getDimSize(d));
  }
  Value b = n.fold<BroadcastInDimOp>(
      RankedTensorType::get(expanded, type.getElementType()), x, dims);
  n.setOutput(0, n.reshape(b, tiled));
  return success();
}

LogicalResult importShape(NodeImporter &n) {
  auto type = typeOf(n.input(0));
  int64_t rank = type.getRank();
  int64_t start = n.attrInt("start", 0), end = n.attrInt("end", rank);
  if (start < 0)
    start += rank;
  if (end < 0)
    end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, start, rank);
  SmallVector<int64_t> dims(type.getShape().slice(start, end - start));
  n.setOutput(0, i64Constant(n, dims, {(int64_t)dims.size()}));
  return success();
}

LogicalResult importSize(NodeImporter &n) {
  n.setOutput(0, i64Constant(n, {typeOf(n.input(0)).getNumElements()}, {}));
  return success();
}

LogicalResult importConstant(NodeImporter &n) {
  Builder &b = n.builder();
  DenseElementsAttr value;
  if (n.hasAttr("value")) {
    // Any size: a large tensor stays a resource (as an initializer would).
    auto t = n.attrElements("value");
    if (failed(t))
      return failure();
    n.setOutput(0, n.constant(*t));
    return success();
  } else if (n.hasAttr("value_float")) {
    value = DenseElementsAttr::get(RankedTensorType::get({}, b.getF32Type()),
                                   n.attrFloat("value_float", 0));
  } else if (const auto *a = n.attr("value_floats")) {
    SmallVector<float> v(a->floats().begin(), a->floats().end());
    value = DenseElementsAttr::get(
        RankedTensorType::get({(int64_t)v.size()}, b.getF32Type()),
        ArrayRef<float>(v));
  } else if (n.hasAttr("value_int")) {
    value = DenseElementsAttr::get(RankedTensorType::get({}, b.getI64Type()),
                                   n.attrInt("value_int", 0));
  } else if (auto v = n.attrInts("value_ints")) {
    value = DenseElementsAttr::get(
        RankedTensorType::get({(int64_t)v->size()}, b.getI64Type()),
        ArrayRef<int64_t>(*v));
  } else {
    return n.error() << "expected a value, value_float(s) or value_int(s) "
                        "attribute (strings and sparse tensors are not "
                        "supported)";
  }
  n.setOutput(0, n.constant(value));
  return success();
}

LogicalResult importConstantOfShape(NodeImporter &n) {
  auto shape = n.constantInts(0, "shape");
  if (failed(shape) || failed(n.checkShape(*shape, "shape")))
    return failure();
  DenseElementsAttr value = DenseElementsAttr::get(
      RankedTensorType::get({1}, n.builder().getF32Type()), 0.0f);
  if (n.hasAttr("value")) {
    auto t = n.attrTensor("value");
    if (failed(t))
      return failure();
    if (t->getNumElements() != 1)
      return n.error() << "expected a one-element value";
    value = *t;
  }
  auto type = RankedTensorType::get(*shape, value.getElementType());
  n.setOutput(0, n.constant(DenseElementsAttr::get(
                     type, value.getValues<Attribute>()[0])));
  return success();
}

LogicalResult importRange(NodeImporter &n) {
  auto start = n.constantInput(0, "start");
  auto limit = n.constantInput(1, "limit");
  auto delta = n.constantInput(2, "delta");
  if (failed(start) || failed(limit) || failed(delta))
    return failure();
  // ONNX's start, limit and delta are scalars of one type T.
  const char *names[] = {"start", "limit", "delta"};
  DenseElementsAttr operands[] = {*start, *limit, *delta};
  for (int i = 0; i < 3; ++i)
    if (operands[i].getNumElements() != 1)
      return n.error() << "expected a scalar " << names[i] << " (input " << i
                       << "), got " << operands[i].getType();
  Type element = start->getElementType();
  auto asDouble = [](DenseElementsAttr a) {
    Attribute v = a.getValues<Attribute>()[0];
    if (auto f = dyn_cast<FloatAttr>(v))
      return f.getValueAsDouble();
    return (double)cast<IntegerAttr>(v).getValue().getSExtValue();
  };
  double s = asDouble(*start), l = asDouble(*limit), d = asDouble(*delta);
  if (d == 0)
    return n.error() << "expected a nonzero delta";
  double steps = std::ceil((l - s) / d);
  if (!(steps <= double(kMaxRangeElements)))
    return n.error() << "a range of " << steps << " elements is too large to "
                     << "compute at compile time (at most " << kMaxRangeElements
                     << ")";
  int64_t count = std::max<int64_t>(0, (int64_t)steps);
  SmallVector<Attribute> values;
  for (int64_t i = 0; i < count; ++i) {
    if (auto f = dyn_cast<FloatType>(element))
      values.push_back(FloatAttr::get(f, s + i * d));
    else
      values.push_back(IntegerAttr::get(element, (int64_t)s + i * (int64_t)d));
  }
  n.setOutput(0, n.constant(DenseElementsAttr::get(
                     RankedTensorType::get({count}, element), values)));
  return success();
}

LogicalResult importTrilu(NodeImporter &n) {
  Value x = n.input(0);
  auto type = typeOf(x);
  if (type.getRank() < 2)
    return n.error() << "expected rank >= 2, got " << type;
  int64_t k = 0;
  if (n.hasInput(1)) {
    auto given = n.constantInts(1, "k");
    if (failed(given))
      return failure();
    k = (*given)[0];
  }
  bool upper = n.attrInt("upper", 1) != 0;
  // Keep element (i, j) where j - i >= k (upper) or j - i <= k (lower).
  auto idxType = RankedTensorType::get(type.getShape(), n.builder().getI64Type());
  int64_t r = type.getRank();
  Value rows = n.create<IotaOp>(idxType, r - 2).getResult();
  Value cols = n.create<IotaOp>(idxType, r - 1).getResult();
  Value diff = n.fold<SubOp>(cols, rows);
  Value kv = n.splat(idxType, k);
  Value keep = upper ? n.fold<GeOp>(diff, kv) : n.fold<LeOp>(diff, kv);
  n.setOutput(0, n.fold<SelectOp>(keep, x, n.splat(type, 0)));
  return success();
}

LogicalResult importPad(NodeImporter &n) {
  Value x = n.input(0);
  auto type = typeOf(x);
  int64_t rank = type.getRank();
  std::string mode = n.attrString("mode", "constant");
  if (mode != "constant" && mode != "edge" && mode != "reflect" &&
      mode != "wrap")
    return n.error() << "pad mode \"" << mode
                     << "\" is not supported (only \"constant\", \"edge\", "
                        "\"reflect\" and \"wrap\")";
  // Before opset 11: the attributes pads and value (a float).
  const bool attributes = n.getOpset() < 11;
  FailureOr<SmallVector<int64_t>> pads = failure();
  if (attributes) {
    if (auto given = n.attrInts("pads"))
      pads = *given;
    else
      return n.error() << "expected attribute pads";
  } else {
    pads = n.constantInts(1, "pads");
  }
  if (failed(pads))
    return failure();
  SmallVector<int64_t> axes;
  if (!attributes && n.hasInput(3)) {
    auto given = n.constantInts(3, "axes");
    if (failed(given))
      return failure();
    for (int64_t a : *given) {
      auto norm = n.normalizeAxis(a, rank, "axes entry");
      if (failed(norm))
        return failure();
      axes.push_back(*norm);
    }
  } else {
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  }
  if ((int64_t)pads->size() != 2 * (int64_t)axes.size())
    return n.error() << "expected " << 2 * axes.size() << " pads, got "
                     << pads->size();
  SmallVector<int64_t> low(rank, 0), high(rank, 0), padded;
  for (auto [i, a] : llvm::enumerate(axes)) {
    low[a] = (*pads)[i];
    high[a] = (*pads)[i + axes.size()];
  }
  for (int64_t d = 0; d < rank; ++d)
    padded.push_back(low[d] + type.getDimSize(d) + high[d]);
  if (failed(n.checkShape(padded, "padded size")))
    return failure();
  if (!attributes && n.hasInput(2) &&
      (typeOf(n.input(2)).getNumElements() != 1 ||
       typeOf(n.input(2)).getElementType() != type.getElementType()))
    return n.error() << "expected a one-element constant_value of the data's "
                        "element type, got " << n.input(2).getType();
  if (mode != "constant") {
    // The copies come from the data itself: constant_value is not read.
    for (int64_t d = 0; d < rank; ++d)
      if (type.getDimSize(d) == 0 && (low[d] > 0 || high[d] > 0))
        return n.error() << "cannot pad empty dim " << d << " in mode \""
                         << mode << "\"";
    n.setOutput(0, n.create<PadOp>(x, n.scalar(type.getElementType(), 0), low,
                                   high, mode)
                       .getResult());
    return success();
  }
  Value value =
      attributes ? n.scalar(type.getElementType(), n.attrFloat("value", 0.0f))
      : n.hasInput(2) ? n.reshape(n.input(2), {})
                      : n.scalar(type.getElementType(), 0);
  n.setOutput(0, n.create<PadOp>(x, value, low, high).getResult());
  return success();
}

LogicalResult importDepthToSpace(NodeImporter &n) {
  Value x = n.input(0);
  auto type = typeOf(x);
  int64_t bs = n.attrInt("blocksize", 0);
  if (type.getRank() != 4 || bs < 1 || type.getDimSize(1) % (bs * bs) != 0)
    return n.error() << "expected a rank-4 input whose channels divide by "
                        "blocksize^2, got " << type << " and blocksize " << bs;
  int64_t b = type.getDimSize(0), c = type.getDimSize(1), h = type.getDimSize(2),
          w = type.getDimSize(3);
  bool crd = n.attrString("mode", "DCR") == "CRD";
  Value t = crd ? n.reshape(x, {b, c / (bs * bs), bs, bs, h, w})
                : n.reshape(x, {b, bs, bs, c / (bs * bs), h, w});
  t = crd ? n.transpose(t, {0, 1, 4, 2, 5, 3}) : n.transpose(t, {0, 3, 4, 1, 5, 2});
  n.setOutput(0, n.reshape(t, {b, c / (bs * bs), h * bs, w * bs}));
  return success();
}

LogicalResult importSpaceToDepth(NodeImporter &n) {
  Value x = n.input(0);
  auto type = typeOf(x);
  int64_t bs = n.attrInt("blocksize", 0);
  if (type.getRank() != 4 || bs < 1 || type.getDimSize(2) % bs != 0 ||
      type.getDimSize(3) % bs != 0)
    return n.error() << "expected a rank-4 input whose height and width divide "
                        "by blocksize, got " << type << " and blocksize " << bs;
  int64_t b = type.getDimSize(0), c = type.getDimSize(1), h = type.getDimSize(2),
          w = type.getDimSize(3);
  Value t = n.reshape(x, {b, c, h / bs, bs, w / bs, bs});
  t = n.transpose(t, {0, 3, 5, 1, 2, 4});
  n.setOutput(0, n.reshape(t, {b, c * bs * bs, h / bs, w / bs}));
  return success();
}

LogicalResult importEyeLike(NodeImporter &n) {
  auto type = typeOf(n.input(0));
  if (type.getRank() != 2)
    return n.error() << "expected a rank-2 input, got " << type;
  Type element = type.getElementType();
  if (n.hasAttr("dtype")) {
    element = convertElementType(n.attrInt("dtype", 1), n.getContext());
    if (!element)
      return n.error() << "unsupported dtype";
  }
  auto idxType = RankedTensorType::get(type.getShape(), n.builder().getI64Type());
  Value diff = n.fold<SubOp>(n.create<IotaOp>(idxType, 1).getResult(),
                             n.create<IotaOp>(idxType, 0).getResult());
  Value on = n.fold<EqOp>(diff, n.splat(idxType, n.attrInt("k", 0)));
  n.setOutput(0, n.castTo(on, element));
  return success();
}

LogicalResult importOneHot(NodeImporter &n) {
  Value indices = n.input(0);
  auto depthValue = n.constantInput(1, "depth");
  if (failed(depthValue))
    return failure();
  if (depthValue->getNumElements() != 1)
    return n.error() << "expected a scalar depth";
  Attribute d0 = depthValue->getValues<Attribute>()[0];
  int64_t depth = isa<FloatAttr>(d0)
                      ? (int64_t)cast<FloatAttr>(d0).getValueAsDouble()
                      : cast<IntegerAttr>(d0).getValue().getSExtValue();
  Value values = n.input(2);
  auto valuesType = typeOf(values);
  if (valuesType.getNumElements() != 2)
    return n.error() << "expected two values [off, on], got " << valuesType;
  auto idxType = typeOf(indices);
  int64_t rank = idxType.getRank() + 1;
  auto axis = n.normalizeAxis(n.attrInt("axis", -1), rank);
  if (failed(axis))
    return failure();
  SmallVector<int64_t> shape(idxType.getShape());
  shape.insert(shape.begin() + *axis, depth);
  if (failed(n.checkShape(shape, "one-hot shape")))
    return failure();
  Type i64 = n.builder().getI64Type();
  auto shapeType = RankedTensorType::get(shape, i64);
  // Negative indices count from the end of the depth.
  Value idx = n.castTo(indices, i64);
  Value zero = n.splat(RankedTensorType::get(idxType.getShape(), i64), 0);
  Value wrapped = n.fold<AddOp>(
      idx, n.splat(RankedTensorType::get(idxType.getShape(), i64), depth));
  idx = n.fold<SelectOp>(n.fold<LtOp>(idx, zero), wrapped, idx);
  SmallVector<int64_t> dims;
  for (int64_t d = 0; d < rank; ++d)
    if (d != *axis)
      dims.push_back(d);
  Value expanded = n.fold<BroadcastInDimOp>(shapeType, idx, dims);
  Value hot = n.fold<EqOp>(n.create<IotaOp>(shapeType, *axis).getResult(), expanded);
  Value flat = n.reshape(values, {2});
  Value off = n.fold<SliceOp>(flat, ArrayRef<int64_t>{0}, ArrayRef<int64_t>{1},
                              ArrayRef<int64_t>{1});
  Value on = n.fold<SliceOp>(flat, ArrayRef<int64_t>{1}, ArrayRef<int64_t>{2},
                             ArrayRef<int64_t>{1});
  n.setOutput(0, n.fold<SelectOp>(hot, n.broadcastTo(n.reshape(on, {}), shape),
                                  n.broadcastTo(n.reshape(off, {}), shape)));
  return success();
}

/// Reverses the first seq_lens[b] elements of each batch entry along the
/// time axis: a gather_elements whose index is a constant when seq_lens is
/// one, and otherwise computed from iota and seq_lens.
LogicalResult importReverseSequence(NodeImporter &n) {
  Value x = n.input(0), lens = n.input(1);
  auto xt = typeOf(x), lt = typeOf(lens);
  if (xt.getRank() < 2)
    return n.error() << "expected an input of rank >= 2, got " << xt;
  int64_t batchAxis = n.attrInt("batch_axis", 1);
  int64_t timeAxis = n.attrInt("time_axis", 0);
  if (!((batchAxis == 0 && timeAxis == 1) || (batchAxis == 1 && timeAxis == 0)))
    return n.error() << "expected batch_axis and time_axis to be 0 and 1 in "
                        "either order, got "
                     << batchAxis << " and " << timeAxis;
  int64_t batch = xt.getDimSize(batchAxis), time = xt.getDimSize(timeAxis);
  Type lensElement = lt.getElementType();
  if (lt.getRank() != 1 || lt.getDimSize(0) != batch ||
      !(lensElement.isInteger(32) || lensElement.isInteger(64)))
    return n.error() << "expected sequence_lens (input 1) of shape [" << batch
                     << "] and type i32 or i64, got " << lt;
  // index[t, b] (or [b, t]) = t < len[b] ? len[b] - 1 - t : t, over the
  // first two dimensions, then broadcast over the rest.
  Type i64 = n.builder().getI64Type();
  auto planeType = RankedTensorType::get(xt.getShape().take_front(2), i64);
  Value plane;
  DenseElementsAttr known;
  if (matchPattern(lens, m_Constant(&known))) {
    SmallVector<int64_t> lengths;
    for (const APInt &v : known.getValues<APInt>()) {
      if (v.getSExtValue() < 0 || v.getSExtValue() > time)
        return n.error() << "expected sequence_lens in [0, " << time
                         << "] (the time axis), got " << v.getSExtValue();
      lengths.push_back(v.getSExtValue());
    }
    SmallVector<int64_t> values;
    for (int64_t i = 0; i < planeType.getDimSize(0); ++i)
      for (int64_t j = 0; j < planeType.getDimSize(1); ++j) {
        int64_t t = timeAxis == 0 ? i : j, len = lengths[timeAxis == 0 ? j : i];
        values.push_back(t < len ? len - 1 - t : t);
      }
    plane = n.constant(DenseElementsAttr::get(planeType, ArrayRef(values)));
  } else {
    // A length beyond the time axis is gather_elements' run-time
    // out-of-range error.
    Value len = n.fold<BroadcastInDimOp>(planeType, n.castTo(lens, i64),
                                         ArrayRef<int64_t>{batchAxis});
    Value t = n.create<IotaOp>(planeType, timeAxis).getResult();
    Value reversed =
        n.fold<SubOp>(n.fold<SubOp>(len, n.splat(planeType, 1)), t);
    plane = n.fold<SelectOp>(n.fold<LtOp>(t, len), reversed, t);
  }
  Value index = plane;
  if (xt.getRank() > 2)
    index = n.create<BroadcastInDimOp>(
                 RankedTensorType::get(xt.getShape(), i64), plane,
                 ArrayRef<int64_t>{0, 1})
                .getResult();
  n.setOutput(0,
              n.create<GatherElementsOp>(xt, x, index, timeAxis).getResult());
  return success();
}

/// The slices of the input whose condition is true: a gather of their
/// (compile-time) positions.
LogicalResult importCompress(NodeImporter &n) {
  Value x = n.input(0);
  auto condition = n.constantInput(
      1, "condition",
      "dtcc compiles static shapes: Compress's condition must be a constant");
  if (failed(condition))
    return failure();
  if (!condition->getElementType().isInteger(1) ||
      condition->getType().getRank() != 1)
    return n.error() << "expected a 1-D bool condition, got "
                     << condition->getType();
  int64_t axis = 0;
  if (n.hasAttr("axis")) {
    auto a = n.normalizeAxis(n.attrInt("axis", 0), typeOf(x).getRank());
    if (failed(a))
      return failure();
    axis = *a;
  } else {
    x = n.reshape(x, {typeOf(x).getNumElements()});
  }
  // Slices past the condition's length are dropped.
  int64_t size = typeOf(x).getDimSize(axis);
  SmallVector<int64_t> kept;
  for (auto [i, keep] : llvm::enumerate(condition->getValues<bool>())) {
    if (!keep)
      continue;
    if ((int64_t)i >= size)
      return n.error() << "expected a condition true only below the input's "
                       << "size " << size << " along axis " << axis
                       << ", got true at " << i;
    kept.push_back(i);
  }
  auto indexType =
      RankedTensorType::get({(int64_t)kept.size()}, n.builder().getI64Type());
  Value indices =
      n.constant(DenseElementsAttr::get(indexType, ArrayRef<int64_t>(kept)));
  n.setOutput(0, n.fold<GatherOp>(x, indices, axis));
  return success();
}

/// CenterCropPad: each axis of `axes` cut or zero-padded to its size in
/// `shape`, centred (the odd element at the end): one pad, negative where
/// it cuts.
LogicalResult importCenterCropPad(NodeImporter &n) {
  Value x = n.input(0);
  auto type = typeOf(x);
  int64_t rank = type.getRank();
  auto shape = n.constantInts(1, "shape");
  if (failed(shape))
    return failure();
  SmallVector<int64_t> axes;
  if (auto given = n.attrInts("axes")) {
    for (int64_t a : *given) {
      auto axis = n.normalizeAxis(a, rank, "axes entry");
      if (failed(axis))
        return failure();
      if (llvm::is_contained(axes, *axis))
        return n.error() << "expected distinct axes, got " << a << " twice";
      axes.push_back(*axis);
    }
  } else {
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  }
  if (shape->size() != axes.size())
    return n.error() << "expected a shape of " << axes.size()
                     << " sizes (one per axis), got " << shape->size();
  SmallVector<int64_t> low(rank, 0), high(rank, 0);
  for (auto [axis, size] : llvm::zip(axes, *shape)) {
    if (size < 0)
      return n.error() << "expected sizes >= 0, got " << size;
    int64_t change = size - type.getDimSize(axis);
    // Crop: start at (dim - size) / 2; pad: (size - dim) / 2 before.
    low[axis] = change >= 0 ? change / 2 : -((-change) / 2);
    high[axis] = change - low[axis];
  }
  n.setOutput(0,
              n.fold<PadOp>(x, n.scalar(type.getElementType(), 0), low, high));
  return success();
}

enum class WindowKind { kHann, kHamming, kBlackman };

/// A window of constant size folded to a constant tensor (ONNX's
/// definitions, with the denominator N when periodic and N - 1 otherwise).
template <WindowKind kind> LogicalResult importWindow(NodeImporter &n) {
  auto size = n.constantInts(0, "size");
  if (failed(size))
    return failure();
  if (size->size() != 1)
    return n.error() << "expected a scalar size, got " << size->size()
                     << " values";
  int64_t count = (*size)[0];
  if (count < 0 || count > kMaxRangeElements)
    return n.error() << "expected a size in [0, " << kMaxRangeElements
                     << "], got " << count;
  int64_t dtype = n.attrInt("output_datatype", 1);
  Type element = convertElementType(dtype, n.getContext());
  if (!element || element.isInteger(1))
    return n.error() << "output_datatype has element type "
                     << onnxTypeName(dtype)
                     << ", which dtcc does not support for a window";
  bool periodic = n.attrInt("periodic", 1) != 0;
  double denominator = double(periodic ? count : count - 1);
  SmallVector<Attribute> values;
  for (int64_t k = 0; k < count; ++k) {
    double a = denominator > 0 ? 2 * M_PI * double(k) / denominator : 0.0;
    double v = 0;
    switch (kind) {
    case WindowKind::kHann:
      v = 0.5 - 0.5 * std::cos(a);
      break;
    case WindowKind::kHamming:
      v = 25.0 / 46.0 - 21.0 / 46.0 * std::cos(a);
      break;
    case WindowKind::kBlackman:
      v = 0.42 - 0.5 * std::cos(a) + 0.08 * std::cos(2 * a);
      break;
    }
    if (isa<FloatType>(element))
      values.push_back(FloatAttr::get(element, v));
    else
      values.push_back(IntegerAttr::get(element, (int64_t)v));
  }
  n.setOutput(0, n.constant(DenseElementsAttr::get(
                     RankedTensorType::get({count}, element), values)));
  return success();
}

} // namespace

SmallVector<Value> splitAlong(NodeImporter &n, Value x, int64_t axis,
                              ArrayRef<int64_t> sizes) {
  auto type = typeOf(x);
  SmallVector<int64_t> start(type.getRank(), 0), limit(type.getShape()),
      stride(type.getRank(), 1);
  SmallVector<Value> pieces;
  int64_t offset = 0;
  for (int64_t s : sizes) {
    start[axis] = offset;
    limit[axis] = offset + s;
    pieces.push_back(n.fold<SliceOp>(x, start, limit, stride));
    offset += s;
  }
  return pieces;
}

FailureOr<Value> concatenate(NodeImporter &n, ArrayRef<Value> all,
                             int64_t axisAttr) {
  // The inputs that add nothing along the axis are left out: an extent of
  // 0 there, or PyTorch's legacy empty tensor (shape [0]) beside inputs of
  // a higher rank. An input without elements whose extent along the axis
  // is not 0 (its emptiness is in another dimension) still adds that
  // extent: [0, 14, 1] and [0, 14, 1] along the last axis make [0, 14, 2].
  if (all.empty())
    return n.error() << "expected at least one tensor to concatenate";
  int64_t rank = 0;
  for (Value v : all)
    rank = std::max(rank, typeOf(v).getRank());
  auto axis = n.normalizeAxis(axisAttr, rank);
  if (failed(axis))
    return failure();
  SmallVector<Value> inputs;
  for (Value v : all) {
    auto t = typeOf(v);
    if (t.getNumElements() == 0 &&
        (t.getRank() != rank || t.getDimSize(*axis) == 0))
      continue;
    inputs.push_back(v);
  }
  if (inputs.empty())
    inputs.push_back(all[0]); // all empty: the result is empty too
  auto first = typeOf(inputs[0]);
  for (Value v : inputs) {
    auto t = typeOf(v);
    // The axis was taken against the largest rank, which may be an empty
    // input's that was left out.
    if (*axis >= t.getRank())
      return n.error() << "cannot concatenate " << t << " along axis " << *axis
                       << " (inputs of rank " << rank << ")";
    bool ok = t.getRank() == first.getRank() &&
              t.getElementType() == first.getElementType();
    for (int64_t d = 0; ok && d < t.getRank(); ++d)
      ok = d == *axis || t.getDimSize(d) == first.getDimSize(d);
    if (!ok)
      return n.error() << "cannot concatenate " << first << " and " << t
                       << " along axis " << *axis;
  }
  return n.fold<ConcatOp>(inputs, *axis);
}

void appendTensorOps(std::vector<OpEntry> &ops) {
  ops.insert(ops.end(), {
      {"Reshape", 5, importReshape},
      {"Flatten", 1, importFlatten},
      {"Squeeze", 1, importSqueeze},
      {"Unsqueeze", 1, importUnsqueeze},
      {"Transpose", 1, importTranspose},
      {"Concat", 4, importConcat},
      {"Split", 2, importSplit},
      {"Slice", 1, importSlice},
      {"Gather", 1, importGather},
      {"GatherElements", 11, importGatherElements},
      {"Expand", 8, importExpand},
      {"Tile", 6, importTile},
      {"Shape", 1, importShape},
      {"Size", 1, importSize},
      {"Constant", 1, importConstant},
      {"ConstantOfShape", 9, importConstantOfShape},
      {"Range", 11, importRange},
      {"Trilu", 14, importTrilu},
      {"Pad", 2, importPad},
      {"CenterCropPad", 18, importCenterCropPad},
      {"DepthToSpace", 1, importDepthToSpace},
      {"SpaceToDepth", 1, importSpaceToDepth},
      {"EyeLike", 9, importEyeLike},
      {"OneHot", 9, importOneHot},
      {"ReverseSequence", 10, importReverseSequence},
      {"Compress", 9, importCompress},
      {"HannWindow", 17, importWindow<WindowKind::kHann>},
      {"HammingWindow", 17, importWindow<WindowKind::kHamming>},
      {"BlackmanWindow", 17, importWindow<WindowKind::kBlackman>},
  });
}

} // namespace dtcc::onnx_frontend
