//===- IndexingOps.cpp - ONNX resampling, indexing, einsum and RNNs -------===//
//
// Resize and Upsample become dgraph.resize; GatherND, ScatterND,
// ScatterElements (and Scatter) and TopK their dgraph ops. Einsum is
// decomposed into transposes, reshapes, matmuls, products and sums (and a
// masked sum for repeated labels), and LSTM, GRU and RNN are unrolled over
// their (static) sequence, so the existing VJP rules differentiate both.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/NodeImporter.h"

#include "dialects/Graph/IR/GraphMath.h"

#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringExtras.h"

#include <cmath>
#include <map>

using namespace mlir;
using namespace dtcc::graph;

namespace dtcc::onnx_frontend {
namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

bool isFloat(Value v) {
  return isa<FloatType>(getElementTypeOrSelf(v.getType()));
}

LogicalResult requireIndices(NodeImporter &n, Value indices) {
  Type t = getElementTypeOrSelf(indices.getType());
  if (t.isInteger(32) || t.isInteger(64))
    return success();
  return n.error() << "expected i32 or i64 indices, got " << indices.getType();
}

/// A constant input as doubles (any float or integer type).
FailureOr<SmallVector<double>> constantDoubles(NodeImporter &n, int i,
                                               StringRef what) {
  auto value = n.constantInput(i, what);
  if (failed(value))
    return failure();
  SmallVector<double> out;
  if (isa<FloatType>(value->getElementType())) {
    for (const APFloat &f : value->getValues<APFloat>())
      out.push_back(f.convertToDouble());
  } else {
    for (const APInt &v : value->getValues<APInt>())
      out.push_back(double(v.getSExtValue()));
  }
  return out;
}

//===----------------------------------------------------------------------===//
// Resize, Upsample
//===----------------------------------------------------------------------===//

/// What a Resize or Upsample node asks for, before building the op.
struct ResizeRequest {
  std::string mode = "nearest";
  std::string coordinates = "half_pixel";
  std::string nearest = "round_prefer_floor";
  double cubicA = -0.75;
  bool excludeOutside = false;
  double extrapolation = 0;
  bool antialias = false;
  SmallVector<double> scales;
  SmallVector<int64_t> sizes;
  std::optional<SmallVector<double>> roi;
};

LogicalResult emitResize(NodeImporter &n, Value x, const ResizeRequest &r) {
  auto type = typeOf(x);
  if (r.mode != "nearest" && r.mode != "linear" && r.mode != "cubic")
    return n.error() << "expected mode \"nearest\", \"linear\" or \"cubic\", "
                        "got \""
                     << r.mode << "\"";
  if (r.mode != "nearest" && !isFloat(x))
    return n.error() << "\"" << r.mode
                     << "\" interpolation needs a floating-point input, got "
                     << type << " (only \"nearest\" resizes integers)";
  if (failed(n.checkShape(r.sizes, "output size")))
    return failure();
  Builder &b = n.builder();
  auto resultType = RankedTensorType::get(r.sizes, type.getElementType());
  DenseF64ArrayAttr roi;
  if (r.roi)
    roi = b.getDenseF64ArrayAttr(*r.roi);
  auto op = n.create<ResizeOp>(
      resultType, x, b.getStringAttr(r.mode), b.getStringAttr(r.coordinates),
      b.getStringAttr(r.nearest), b.getF64FloatAttr(r.cubicA),
      r.excludeOutside ? b.getUnitAttr() : UnitAttr(),
      b.getF64FloatAttr(r.extrapolation),
      r.antialias ? b.getUnitAttr() : UnitAttr(),
      b.getDenseF64ArrayAttr(r.scales), roi);
  if (failed(mlir::verify(op))) {
    op->erase();
    return failure();
  }
  n.setOutput(0, op.getResult());
  return success();
}

/// Output sizes from scales: floor(dim * scale), as ONNX's reference.
SmallVector<int64_t> sizesFromScales(ArrayRef<int64_t> shape,
                                     ArrayRef<double> scales) {
  SmallVector<int64_t> sizes;
  for (auto [d, s] : llvm::zip(shape, scales))
    sizes.push_back(int64_t(std::floor(double(d) * s)));
  return sizes;
}

LogicalResult importResize(NodeImporter &n) {
  Value x = n.input(0);
  auto type = typeOf(x);
  int64_t rank = type.getRank();
  ResizeRequest r;
  r.mode = n.attrString("mode", "nearest");
  int64_t opset = n.getOpset();
  // Resize-10 (X, scales) resamples like Upsample.
  int scalesInput = opset < 11 ? 1 : 2, sizesInput = 3;
  if (opset < 11) {
    r.coordinates = "asymmetric";
    r.nearest = "floor";
  } else {
    r.coordinates = n.attrString("coordinate_transformation_mode", "half_pixel");
    r.nearest = n.attrString("nearest_mode", "round_prefer_floor");
    r.cubicA = n.attrFloat("cubic_coeff_a", -0.75f);
    r.excludeOutside = n.attrInt("exclude_outside", 0) != 0;
    r.extrapolation = n.attrFloat("extrapolation_value", 0.0f);
  }
  if (opset >= 18)
    r.antialias = n.attrInt("antialias", 0) != 0 && r.mode != "nearest";
  if (r.coordinates == "half_pixel_symmetric" && opset < 19)
    return n.error() << "coordinate_transformation_mode "
                        "\"half_pixel_symmetric\" needs opset 19, got "
                     << opset;
  // The resized axes (opset 18): scales, sizes and roi cover only them.
  SmallVector<int64_t> axes;
  if (auto given = n.attrInts("axes"); given && opset >= 18) {
    auto normalized = n.normalizeAxes(*given, rank);
    if (failed(normalized))
      return failure();
    axes = std::move(*normalized);
  } else {
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  }
  const size_t count = axes.size();
  auto expand = [&](ArrayRef<double> given, double fill) {
    SmallVector<double> full(rank, fill);
    for (auto [i, a] : llvm::enumerate(axes))
      full[a] = given[i];
    return full;
  };

  bool hasScales = n.hasInput(scalesInput) &&
                   typeOf(n.input(scalesInput)).getNumElements() > 0;
  bool hasSizes = opset >= 11 && n.hasInput(sizesInput) &&
                  typeOf(n.input(sizesInput)).getNumElements() > 0;
  if (hasScales == hasSizes)
    return n.error() << "expected exactly one of scales and sizes";
  if (hasScales) {
    auto scales = constantDoubles(n, scalesInput, "scales");
    if (failed(scales))
      return failure();
    if (scales->size() != count)
      return n.error() << "expected " << count << " scales, got "
                       << scales->size();
    for (double s : *scales)
      if (!(s > 0))
        return n.error() << "expected positive scales, got " << s;
    r.scales = expand(*scales, 1.0);
    r.sizes = sizesFromScales(type.getShape(), r.scales);
  } else {
    auto sizes = n.constantInts(sizesInput, "sizes");
    if (failed(sizes))
      return failure();
    if (sizes->size() != count)
      return n.error() << "expected " << count << " sizes, got "
                       << sizes->size();
    if (failed(n.checkShape(*sizes, "sizes")))
      return failure();
    std::string policy = n.attrString("keep_aspect_ratio_policy", "stretch");
    if (opset < 18)
      policy = "stretch";
    r.sizes.assign(type.getShape().begin(), type.getShape().end());
    r.scales.assign(rank, 1.0);
    if (policy == "stretch") {
      for (auto [i, a] : llvm::enumerate(axes)) {
        r.sizes[a] = (*sizes)[i];
        r.scales[a] = type.getDimSize(a) == 0
                          ? 1.0
                          : double((*sizes)[i]) / double(type.getDimSize(a));
      }
    } else if (policy == "not_larger" || policy == "not_smaller") {
      // One scale for every resized axis, the output rounded half up.
      double scale = policy == "not_larger" ? INFINITY : 0;
      for (auto [i, a] : llvm::enumerate(axes)) {
        if (type.getDimSize(a) == 0)
          continue;
        double s = double((*sizes)[i]) / double(type.getDimSize(a));
        scale = policy == "not_larger" ? std::min(scale, s) : std::max(scale, s);
      }
      if (!(scale > 0) || std::isinf(scale))
        return n.error() << "cannot keep the aspect ratio of " << type
                         << " with the given sizes";
      for (int64_t a : axes) {
        r.scales[a] = scale;
        r.sizes[a] = int64_t(std::floor(double(type.getDimSize(a)) * scale + 0.5));
      }
    } else {
      return n.error() << "expected keep_aspect_ratio_policy \"stretch\", "
                          "\"not_larger\" or \"not_smaller\", got \""
                       << policy << "\"";
    }
  }
  if (r.coordinates == "tf_crop_and_resize") {
    SmallVector<double> roi(2 * rank, 0.0);
    for (int64_t d = 0; d < rank; ++d)
      roi[rank + d] = 1.0;
    if (n.hasInput(1) && typeOf(n.input(1)).getNumElements() > 0) {
      auto given = constantDoubles(n, 1, "roi");
      if (failed(given))
        return failure();
      if (given->size() != 2 * count)
        return n.error() << "expected " << 2 * count
                         << " roi entries (starts, then ends), got "
                         << given->size();
      for (auto [i, a] : llvm::enumerate(axes)) {
        roi[a] = (*given)[i];
        roi[rank + a] = (*given)[count + i];
      }
    }
    r.roi = roi;
  }
  for (int64_t d = 0; d < rank; ++d)
    if (type.getDimSize(d) > 0 && r.sizes[d] < 1)
      return n.error() << "resizing dim " << d << " of size "
                       << type.getDimSize(d) << " by " << r.scales[d]
                       << " leaves no element";
  return emitResize(n, x, r);
}

LogicalResult importUpsample(NodeImporter &n) {
  Value x = n.input(0);
  auto type = typeOf(x);
  ResizeRequest r;
  r.mode = n.attrString("mode", "nearest");
  if (r.mode == "bilinear")
    r.mode = "linear";
  if (r.mode != "nearest" && r.mode != "linear")
    return n.error() << "expected mode \"nearest\" or \"linear\", got \""
                     << r.mode << "\"";
  r.coordinates = "asymmetric";
  r.nearest = "floor";
  if (n.getOpset() >= 9) {
    auto scales = constantDoubles(n, 1, "scales");
    if (failed(scales))
      return failure();
    r.scales = *scales;
  } else if (const onnx::AttributeProto *a = n.attr("scales")) {
    r.scales.assign(a->floats().begin(), a->floats().end());
  }
  if ((int64_t)r.scales.size() != type.getRank())
    return n.error() << "expected " << type.getRank() << " scales, got "
                     << r.scales.size();
  for (double s : r.scales)
    if (!(s > 0))
      return n.error() << "expected positive scales, got " << s;
  r.sizes = sizesFromScales(type.getShape(), r.scales);
  return emitResize(n, x, r);
}

//===----------------------------------------------------------------------===//
// GatherND, ScatterND, ScatterElements, TopK
//===----------------------------------------------------------------------===//

LogicalResult importGatherND(NodeImporter &n) {
  Value data = n.input(0), indices = n.input(1);
  if (failed(requireIndices(n, indices)))
    return failure();
  auto dt = typeOf(data), it = typeOf(indices);
  int64_t b = n.attrInt("batch_dims", 0);
  if (it.getRank() < 1 || b < 0 || b >= std::min(dt.getRank(), it.getRank()))
    return n.error() << "expected batch_dims in [0, "
                     << std::min(dt.getRank(), it.getRank()) << "), got " << b;
  int64_t k = it.getShape().back();
  if (k < 1 || k > dt.getRank() - b)
    return n.error() << "expected index tuples of length in [1, "
                     << dt.getRank() - b << "], got " << k;
  if (dt.getShape().take_front(b) != it.getShape().take_front(b))
    return n.error() << "expected the first " << b
                     << " dims of data and indices to agree, got " << dt
                     << " and " << it;
  n.setOutput(0, n.create<GatherNdOp>(data, indices, b).getResult());
  return success();
}

LogicalResult checkReduction(NodeImporter &n, StringRef reduction, Value data) {
  if (reduction != "none" && reduction != "add" && reduction != "mul" &&
      reduction != "max" && reduction != "min")
    return n.error() << "expected reduction \"none\", \"add\", \"mul\", "
                        "\"max\" or \"min\", got \""
                     << reduction << "\"";
  if (reduction != "none" && getElementTypeOrSelf(data.getType()).isInteger(1))
    return n.error() << "reduction \"" << reduction
                     << "\" needs a numeric input, got " << data.getType();
  return success();
}

LogicalResult importScatterND(NodeImporter &n) {
  Value data = n.input(0), indices = n.input(1), updates = n.input(2);
  if (failed(requireIndices(n, indices)))
    return failure();
  std::string reduction = n.attrString("reduction", "none");
  if (failed(checkReduction(n, reduction, data)))
    return failure();
  auto dt = typeOf(data), it = typeOf(indices), ut = typeOf(updates);
  int64_t k = it.getRank() ? it.getShape().back() : 0;
  if (it.getRank() < 1 || k < 1 || k > dt.getRank())
    return n.error() << "expected indices of rank >= 1 with tuples of length "
                        "in [1, "
                     << dt.getRank() << "], got " << it;
  SmallVector<int64_t> shape(it.getShape().drop_back());
  llvm::append_range(shape, dt.getShape().drop_front(k));
  if (ut.getShape() != ArrayRef<int64_t>(shape) ||
      ut.getElementType() != dt.getElementType())
    return n.error() << "expected updates of type "
                     << RankedTensorType::get(shape, dt.getElementType())
                     << ", got " << ut;
  n.setOutput(0, n.create<ScatterNdOp>(dt, data, indices, updates, 0, reduction)
                     .getResult());
  return success();
}

LogicalResult importScatterElements(NodeImporter &n) {
  Value data = n.input(0), indices = n.input(1), updates = n.input(2);
  if (failed(requireIndices(n, indices)))
    return failure();
  auto dt = typeOf(data), it = typeOf(indices), ut = typeOf(updates);
  auto axis = n.normalizeAxis(n.attrInt("axis", 0), dt.getRank());
  if (failed(axis))
    return failure();
  std::string reduction = n.attrString("reduction", "none");
  if (failed(checkReduction(n, reduction, data)))
    return failure();
  if (it.getRank() != dt.getRank() || it.getShape() != ut.getShape() ||
      ut.getElementType() != dt.getElementType())
    return n.error() << "expected indices and updates of one shape and the "
                        "data's rank, and updates of its element type, got "
                     << dt << ", " << it << " and " << ut;
  for (int64_t d = 0; d < dt.getRank(); ++d)
    if (d != *axis && it.getDimSize(d) > dt.getDimSize(d))
      return n.error() << "indices dim " << d << " (" << it.getDimSize(d)
                       << ") exceeds the data's (" << dt.getDimSize(d) << ")";
  n.setOutput(0, n.create<ScatterElementsOp>(dt, data, indices, updates, *axis,
                                             reduction)
                     .getResult());
  return success();
}

LogicalResult importTopK(NodeImporter &n) {
  Value x = n.input(0);
  auto type = typeOf(x);
  if (getElementTypeOrSelf(x.getType()).isInteger(1))
    return n.error() << "expected a numeric input, got " << type;
  auto axis = n.normalizeAxis(n.attrInt("axis", -1), type.getRank());
  if (failed(axis))
    return failure();
  int64_t k;
  if (n.getOpset() >= 10) {
    auto given = n.constantInts(1, "K");
    if (failed(given))
      return failure();
    if (given->size() != 1)
      return n.error() << "expected a single K, got " << given->size()
                       << " values";
    k = (*given)[0];
  } else {
    k = n.attrInt("k", -1);
  }
  if (k < 0 || k > type.getDimSize(*axis))
    return n.error() << "expected K in [0, " << type.getDimSize(*axis)
                     << "] (the size of axis " << *axis << "), got " << k;
  bool largest = n.attrInt("largest", 1) != 0;
  bool sorted = n.attrInt("sorted", 1) != 0;
  auto op = n.create<TopKOp>(x, k, *axis, largest, sorted);
  n.setOutput(0, op.getValues());
  n.setOutput(1, op.getIndices());
  return success();
}

//===----------------------------------------------------------------------===//
// Einsum
//===----------------------------------------------------------------------===//

/// A tensor of the decomposition with the label of each of its dimensions.
/// Labels are letters; the dimensions an ellipsis stands for get labels
/// from 256 on (right-aligned, so that they broadcast as numpy's do).
struct Labeled {
  Value value;
  SmallVector<int> labels;
};

constexpr int kEllipsisLabel = 256;

/// Parses one term ("ab...c") for an operand of `rank` (-1 for the output,
/// whose ellipsis has `ellipsisRank` dims).
FailureOr<SmallVector<int>> parseTerm(NodeImporter &n, StringRef term,
                                      int64_t rank, int64_t ellipsisRank) {
  SmallVector<int> labels;
  size_t dots = term.find("...");
  int64_t letters = 0;
  for (char c : term)
    if (c != '.') {
      if (!llvm::isAlpha(c))
        return n.error() << "expected letters and '...' in the equation term '"
                         << term << "', got '" << c << "'";
      ++letters;
    }
  if (dots != StringRef::npos &&
      (term.count('.') != 3 || term.substr(dots, 3) != "..."))
    return n.error() << "expected at most one '...' in the equation term '"
                     << term << "'";
  if (dots == StringRef::npos && term.count('.'))
    return n.error() << "expected '...' in the equation term '" << term << "'";
  int64_t covered = dots == StringRef::npos ? 0 : rank - letters;
  if (rank >= 0 && (covered < 0 || (dots == StringRef::npos && letters != rank)))
    return n.error() << "equation term '" << term << "' has " << letters
                     << " labels for an input of rank " << rank;
  if (rank < 0)
    covered = dots == StringRef::npos ? 0 : ellipsisRank;
  for (size_t i = 0; i < term.size(); ++i) {
    if (i == dots) {
      for (int64_t e = 0; e < covered; ++e)
        labels.push_back(kEllipsisLabel + int(ellipsisRank - covered + e));
      i += 2;
      continue;
    }
    labels.push_back(term[i]);
  }
  return labels;
}

/// Takes the diagonal of two dimensions with one label: multiplies by an
/// identity mask and sums one of them away (differentiable with the
/// existing rules).
Labeled diagonal(NodeImporter &n, Labeled t, int p, int q) {
  auto type = typeOf(t.value);
  int64_t size = type.getDimSize(p);
  auto maskType = RankedTensorType::get({size, size}, type.getElementType());
  SmallVector<Attribute> eye;
  for (int64_t i = 0; i < size; ++i)
    for (int64_t j = 0; j < size; ++j)
      eye.push_back(isa<FloatType>(type.getElementType())
                        ? Attribute(FloatAttr::get(type.getElementType(), i == j))
                        : Attribute(IntegerAttr::get(type.getElementType(), i == j)));
  Value mask = n.constant(DenseElementsAttr::get(maskType, eye));
  Value wide = n.fold<BroadcastInDimOp>(type, mask, ArrayRef<int64_t>{p, q});
  Value masked = n.fold<MulOp>(t.value, wide);
  t.value = n.fold<ReduceSumOp>(masked, ArrayRef<int64_t>{q});
  t.labels.erase(t.labels.begin() + q);
  return t;
}

/// Sums the dimensions whose labels `drop` says.
Labeled sumLabels(NodeImporter &n, Labeled t, function_ref<bool(int)> drop) {
  SmallVector<int64_t> dims;
  SmallVector<int> kept;
  for (auto [d, l] : llvm::enumerate(t.labels)) {
    if (drop(l))
      dims.push_back(d);
    else
      kept.push_back(l);
  }
  if (dims.empty())
    return t;
  t.value = n.fold<ReduceSumOp>(t.value, dims);
  t.labels = kept;
  return t;
}

/// `t` transposed to the label order `order` (a permutation of its labels).
Value arrange(NodeImporter &n, const Labeled &t, ArrayRef<int> order) {
  SmallVector<int64_t> perm;
  for (int l : order)
    perm.push_back(llvm::find(t.labels, l) - t.labels.begin());
  bool identity = llvm::all_of(llvm::enumerate(perm), [](auto p) {
    return int64_t(p.index()) == p.value();
  });
  return identity ? t.value : n.transpose(t.value, perm);
}

LogicalResult importEinsum(NodeImporter &n) {
  std::string equation = n.attrString("equation", "");
  equation.erase(llvm::remove_if(equation, ::isspace), equation.end());
  StringRef eq(equation);
  auto [lhs, rhs] = eq.split("->");
  bool explicitOutput = eq.contains("->");
  SmallVector<StringRef> terms;
  lhs.split(terms, ',');
  int inputs = n.numInputs();
  if ((int)terms.size() != inputs)
    return n.error() << "the equation '" << equation << "' has "
                     << terms.size() << " terms for " << inputs << " inputs";
  // The ellipsis covers the most dims any input gives it.
  int64_t ellipsisRank = 0;
  SmallVector<Labeled> ops;
  Type elementType;
  for (int i = 0; i < inputs; ++i) {
    Value v = n.input(i);
    if (!v)
      return n.error() << "expected input " << i;
    auto type = typeOf(v);
    if (type.getElementType().isInteger(1))
      return n.error() << "expected numeric inputs, got " << type;
    if (elementType && type.getElementType() != elementType)
      return n.error() << "expected inputs of one element type, got "
                       << elementType << " and " << type.getElementType();
    elementType = type.getElementType();
    int64_t letters = llvm::count_if(terms[i], [](char c) { return c != '.'; });
    if (terms[i].contains("..."))
      ellipsisRank = std::max(ellipsisRank, type.getRank() - letters);
  }
  for (int i = 0; i < inputs; ++i) {
    auto labels = parseTerm(n, terms[i], typeOf(n.input(i)).getRank(),
                            ellipsisRank);
    if (failed(labels))
      return failure();
    // Ellipsis labels of a shorter input are the trailing ones.
    ops.push_back({n.input(i), *labels});
  }
  // The size of each label (1 broadcasts).
  std::map<int, int64_t> sizes;
  std::map<int, int> uses;
  for (const Labeled &t : ops)
    for (auto [d, l] : llvm::enumerate(t.labels)) {
      int64_t s = typeOf(t.value).getDimSize(d);
      auto [it, inserted] = sizes.try_emplace(l, s);
      if (!inserted && it->second != s) {
        if (it->second == 1)
          it->second = s;
        else if (s != 1)
          return n.error() << "label '"
                           << (l < kEllipsisLabel ? std::string(1, char(l))
                                                  : std::string("..."))
                           << "' has sizes " << it->second << " and " << s;
      }
      ++uses[l];
    }
  SmallVector<int> output;
  if (explicitOutput) {
    auto labels = parseTerm(n, rhs, -1, ellipsisRank);
    if (failed(labels))
      return failure();
    output = *labels;
    for (int l : output) {
      if (!sizes.count(l) && l < kEllipsisLabel)
        return n.error() << "output label '" << char(l)
                         << "' appears in no input";
      if (llvm::count(output, l) > 1)
        return n.error() << "output label '" << char(l) << "' repeats";
    }
  } else {
    for (int e = 0; e < ellipsisRank; ++e)
      output.push_back(kEllipsisLabel + e);
    for (auto [l, count] : uses)
      if (l < kEllipsisLabel && count == 1)
        output.push_back(l);
  }
  // An ellipsis dim no input has (all inputs shorter) is size 1.
  for (int l : output)
    sizes.try_emplace(l, 1);

  auto neededAfter = [&](size_t i, int label) {
    if (llvm::is_contained(output, label))
      return true;
    for (size_t j = i + 1; j < ops.size(); ++j)
      if (llvm::is_contained(ops[j].labels, label))
        return true;
    return false;
  };
  auto inOperand = [&](size_t i, int label) {
    return llvm::is_contained(ops[i].labels, label);
  };
  // Per operand: diagonals of repeated labels, sums of labels used nowhere
  // else, broadcasts of size-1 dims to the label's size.
  for (size_t i = 0; i < ops.size(); ++i) {
    Labeled &t = ops[i];
    for (bool found = true; found;) {
      found = false;
      for (size_t p = 0; p < t.labels.size() && !found; ++p)
        for (size_t q = p + 1; q < t.labels.size() && !found; ++q)
          if (t.labels[p] == t.labels[q]) {
            auto type = typeOf(t.value);
            if (type.getDimSize(p) != type.getDimSize(q))
              return n.error() << "repeated label '" << char(t.labels[p])
                               << "' has sizes " << type.getDimSize(p)
                               << " and " << type.getDimSize(q);
            t = diagonal(n, t, p, q);
            found = true;
          }
    }
    t = sumLabels(n, t, [&](int l) {
      if (llvm::is_contained(output, l))
        return false;
      for (size_t j = 0; j < ops.size(); ++j)
        if (j != i && llvm::is_contained(ops[j].labels, l))
          return false;
      return true;
    });
    SmallVector<int64_t> full;
    for (int l : t.labels)
      full.push_back(sizes[l]);
    if (typeOf(t.value).getShape() != ArrayRef<int64_t>(full)) {
      SmallVector<int64_t> dims;
      for (size_t d = 0; d < t.labels.size(); ++d)
        dims.push_back(d);
      t.value = n.fold<BroadcastInDimOp>(
          RankedTensorType::get(full, elementType), t.value, dims);
    }
  }
  auto shapeOf = [&](ArrayRef<int> labels) {
    SmallVector<int64_t> shape;
    for (int l : labels)
      shape.push_back(sizes[l]);
    return shape;
  };
  auto product = [&](ArrayRef<int> labels) {
    int64_t p = 1;
    for (int l : labels)
      p *= sizes[l];
    return p;
  };
  // Left to right: contract the accumulated tensor with the next operand.
  Labeled acc = ops[0];
  for (size_t i = 1; i < ops.size(); ++i) {
    const Labeled &next = ops[i];
    SmallVector<int> batch, contracted, aOnly, bOnly;
    for (int l : acc.labels) {
      if (inOperand(i, l))
        (neededAfter(i, l) ? batch : contracted).push_back(l);
      else
        aOnly.push_back(l);
    }
    for (int l : next.labels)
      if (!llvm::is_contained(acc.labels, l))
        bOnly.push_back(l);
    SmallVector<int> result(batch);
    llvm::append_range(result, aOnly);
    llvm::append_range(result, bOnly);
    SmallVector<int64_t> resultShape = shapeOf(result);
    Value y;
    if (contracted.empty()) {
      // An outer product over the batch: broadcast both and multiply.
      auto full = RankedTensorType::get(resultShape, elementType);
      auto expand = [&](const Labeled &t, ArrayRef<int> order) {
        SmallVector<int64_t> dims;
        for (int l : order)
          dims.push_back(llvm::find(result, l) - result.begin());
        return n.fold<BroadcastInDimOp>(full, arrange(n, t, order), dims);
      };
      SmallVector<int> aOrder(batch), bOrder(batch);
      llvm::append_range(aOrder, aOnly);
      llvm::append_range(bOrder, bOnly);
      y = n.fold<MulOp>(expand(acc, aOrder), expand(next, bOrder));
    } else {
      SmallVector<int> aOrder(batch), bOrder(batch);
      llvm::append_range(aOrder, aOnly);
      llvm::append_range(aOrder, contracted);
      llvm::append_range(bOrder, contracted);
      llvm::append_range(bOrder, bOnly);
      int64_t bt = product(batch), m = product(aOnly), k = product(contracted),
              nn = product(bOnly);
      SmallVector<int64_t> aShape, bShape;
      if (!batch.empty()) {
        aShape.push_back(bt);
        bShape.push_back(bt);
      }
      aShape.append({m, k});
      bShape.append({k, nn});
      Value a = n.reshape(arrange(n, acc, aOrder), aShape);
      Value b = n.reshape(arrange(n, next, bOrder), bShape);
      y = n.reshape(n.create<MatmulOp>(a, b, false, false).getResult(),
                    resultShape);
    }
    acc = {y, result};
  }
  acc = sumLabels(n, acc, [&](int l) { return !llvm::is_contained(output, l); });
  // Output ellipsis dims that no input had are size-1 broadcasts.
  for (int l : output)
    if (!llvm::is_contained(acc.labels, l)) {
      SmallVector<int64_t> shape(typeOf(acc.value).getShape());
      shape.push_back(1);
      acc.value = n.reshape(acc.value, shape);
      acc.labels.push_back(l);
    }
  n.setOutput(0, arrange(n, acc, output));
  return success();
}

//===----------------------------------------------------------------------===//
// RNN, GRU, LSTM
//===----------------------------------------------------------------------===//

/// One activation of a recurrent cell with its alpha and beta.
struct Activation {
  std::string name;
  float alpha = 0, beta = 0;
};

/// ONNX's activation functions of recurrent ops, as dgraph ops.
Value activate(NodeImporter &n, const Activation &f, Value x) {
  auto type = typeOf(x);
  auto c = [&](double v) { return n.splat(type, v); };
  std::string name = StringRef(f.name).lower();
  if (name == "relu")
    return n.fold<ReluOp>(x);
  if (name == "tanh")
    return n.fold<TanhOp>(x);
  if (name == "sigmoid")
    return n.fold<SigmoidOp>(x);
  if (name == "affine")
    return n.fold<AddOp>(n.fold<MulOp>(x, c(f.alpha)), c(f.beta));
  if (name == "leakyrelu")
    return n.fold<SelectOp>(n.fold<GeOp>(x, c(0)), x,
                            n.fold<MulOp>(x, c(f.alpha)));
  if (name == "thresholdedrelu")
    return n.fold<SelectOp>(n.fold<GtOp>(x, c(f.alpha)), x, c(0));
  if (name == "scaledtanh")
    return n.fold<MulOp>(c(f.alpha),
                         n.fold<TanhOp>(n.fold<MulOp>(x, c(f.beta))));
  if (name == "hardsigmoid")
    return n.fold<MaxOp>(
        c(0), n.fold<MinOp>(c(1), n.fold<AddOp>(n.fold<MulOp>(x, c(f.alpha)),
                                                c(f.beta))));
  if (name == "elu") {
    // exp reads 0 where x >= 0: exp of a large x would be inf there, and
    // its gradient times the select's 0 a NaN.
    Value nonNegative = n.fold<GeOp>(x, c(0));
    Value negative = n.fold<SelectOp>(nonNegative, c(0), x);
    return n.fold<SelectOp>(
        nonNegative, x,
        n.fold<MulOp>(c(f.alpha),
                      n.fold<SubOp>(n.fold<ExpOp>(negative), c(1))));
  }
  if (name == "softsign")
    return n.fold<DivOp>(x, n.fold<AddOp>(c(1), n.fold<AbsOp>(x)));
  return buildSoftplus(n.builder(), n.getLoc(), x);
}

/// The activations of a recurrent node: `perDirection` defaults, or the
/// `activations` attribute with alpha/beta consumed in order by the
/// functions that take them.
FailureOr<SmallVector<Activation>>
readActivations(NodeImporter &n, ArrayRef<StringRef> defaults, int directions) {
  SmallVector<Activation> out;
  const onnx::AttributeProto *a = n.attr("activations");
  if (!a) {
    for (int d = 0; d < directions; ++d)
      for (StringRef name : defaults)
        out.push_back({name.str()});
    return out;
  }
  if (a->strings_size() != int(defaults.size()) * directions)
    return n.error() << "expected " << defaults.size() * directions
                     << " activations, got " << a->strings_size();
  const onnx::AttributeProto *alphas = n.attr("activation_alpha");
  const onnx::AttributeProto *betas = n.attr("activation_beta");
  int nextAlpha = 0, nextBeta = 0;
  static const std::map<std::string, std::pair<float, float>> kDefaults = {
      {"relu", {0, 0}},         {"tanh", {0, 0}},
      {"sigmoid", {0, 0}},      {"affine", {1.0f, 0.0f}},
      {"leakyrelu", {0.01f, 0}}, {"thresholdedrelu", {1.0f, 0}},
      {"scaledtanh", {1.0f, 1.0f}}, {"hardsigmoid", {0.2f, 0.5f}},
      {"elu", {1.0f, 0}},       {"softsign", {0, 0}},
      {"softplus", {0, 0}}};
  for (const std::string &name : a->strings()) {
    std::string lower = StringRef(name).lower();
    auto it = kDefaults.find(lower);
    if (it == kDefaults.end())
      return n.error() << "unknown activation \"" << name << "\"";
    Activation f{name, it->second.first, it->second.second};
    bool takesAlpha = lower == "affine" || lower == "leakyrelu" ||
                      lower == "thresholdedrelu" || lower == "scaledtanh" ||
                      lower == "hardsigmoid" || lower == "elu";
    bool takesBeta =
        lower == "affine" || lower == "scaledtanh" || lower == "hardsigmoid";
    if (takesAlpha && alphas && nextAlpha < alphas->floats_size())
      f.alpha = alphas->floats(nextAlpha++);
    if (takesBeta && betas && nextBeta < betas->floats_size())
      f.beta = betas->floats(nextBeta++);
    out.push_back(f);
  }
  return out;
}

enum class Cell { kRnn, kGru, kLstm };

/// The recurrence of one direction over the unrolled sequence.
struct Direction {
  Value w, r;          ///< [gates*hidden, input], [gates*hidden, hidden]
  Value wb, rb;        ///< [batch, gates*hidden] or null
  Value p;             ///< LSTM peepholes [3*hidden] or null
  Value h, c;          ///< initial state [batch, hidden]
  ArrayRef<Activation> f;
  bool reverse = false;
};

LogicalResult importRecurrent(NodeImporter &n, Cell cell) {
  const int gates = cell == Cell::kRnn ? 1 : cell == Cell::kGru ? 3 : 4;
  Value x = n.input(0), w = n.input(1), r = n.input(2);
  if (!isFloat(x))
    return n.error() << "expected a floating-point X, got " << x.getType();
  auto xt = typeOf(x);
  Type et = xt.getElementType();
  int64_t layout = n.getOpset() >= 14 ? n.attrInt("layout", 0) : 0;
  if (layout != 0 && layout != 1)
    return n.error() << "expected layout 0 or 1, got " << layout;
  if (xt.getRank() != 3)
    return n.error() << "expected X of rank 3, got " << xt;
  if (layout == 1)
    x = n.transpose(x, {1, 0, 2});
  xt = typeOf(x);
  const int64_t seq = xt.getDimSize(0), batch = xt.getDimSize(1),
                input = xt.getDimSize(2);
  std::string direction = n.attrString("direction", "forward");
  if (direction != "forward" && direction != "reverse" &&
      direction != "bidirectional")
    return n.error() << "expected direction \"forward\", \"reverse\" or "
                        "\"bidirectional\", got \""
                     << direction << "\"";
  const int dirs = direction == "bidirectional" ? 2 : 1;
  int64_t hidden = n.attrInt("hidden_size", 0);
  if (hidden < 1)
    return n.error() << "expected a positive hidden_size, got " << hidden;
  auto check = [&](Value v, ArrayRef<int64_t> shape,
                   StringRef what) -> LogicalResult {
    auto t = typeOf(v);
    if (t.getShape() == shape && t.getElementType() == et)
      return success();
    return n.error() << "expected " << what << " of type "
                     << RankedTensorType::get(shape, et) << ", got " << t;
  };
  if (failed(check(w, {dirs, gates * hidden, input}, "W")) ||
      failed(check(r, {dirs, gates * hidden, hidden}, "R")))
    return failure();
  float clip = n.attrFloat("clip", 0.0f);
  bool hasClip = n.hasAttr("clip");
  if (hasClip && !(clip > 0))
    return n.error() << "expected a positive clip, got " << clip;
  bool linearBeforeReset =
      cell == Cell::kGru && n.attrInt("linear_before_reset", 0) != 0;
  bool inputForget = cell == Cell::kLstm && n.attrInt("input_forget", 0) != 0;
  SmallVector<StringRef> defaults;
  if (cell == Cell::kRnn)
    defaults = {"Tanh"};
  else if (cell == Cell::kGru)
    defaults = {"Sigmoid", "Tanh"};
  else
    defaults = {"Sigmoid", "Tanh", "Tanh"};
  auto acts = readActivations(n, defaults, dirs);
  if (failed(acts))
    return failure();

  auto stateType = RankedTensorType::get({batch, hidden}, et);
  auto gateType = RankedTensorType::get({batch, gates * hidden}, et);
  // Optional inputs, each per direction.
  auto slice0 = [&](Value v, int64_t d, ArrayRef<int64_t> shape) {
    auto t = typeOf(v);
    SmallVector<int64_t> start(t.getRank(), 0), limit(t.getShape()),
        stride(t.getRank(), 1);
    start[0] = d;
    limit[0] = d + 1;
    return n.reshape(n.fold<SliceOp>(v, start, limit, stride), shape);
  };
  Value bias = n.input(3);
  if (bias && failed(check(bias, {dirs, 2 * gates * hidden}, "B")))
    return failure();
  Value seqLens = n.input(4);
  if (seqLens) {
    auto st = typeOf(seqLens);
    if (st.getRank() != 1 || st.getDimSize(0) != batch ||
        !isa<IntegerType>(st.getElementType()))
      return n.error() << "expected integer sequence_lens of shape [" << batch
                       << "], got " << st;
  }
  Value initH = n.input(5), initC, peep;
  if (initH) {
    if (layout == 1)
      initH = n.transpose(initH, {1, 0, 2});
    if (failed(check(initH, {dirs, batch, hidden}, "initial_h")))
      return failure();
  }
  if (cell == Cell::kLstm) {
    initC = n.input(6);
    if (initC) {
      if (layout == 1)
        initC = n.transpose(initC, {1, 0, 2});
      if (failed(check(initC, {dirs, batch, hidden}, "initial_c")))
        return failure();
    }
    peep = n.input(7);
    if (peep && failed(check(peep, {dirs, 3 * hidden}, "P")))
      return failure();
  }

  // Per-step masks when sequence_lens is given: step t of batch b is valid
  // when t < len[b]; a reverse direction reads x[len[b] - 1 - t].
  Type i64 = n.builder().getI64Type();
  Value lens;
  if (seqLens)
    lens = n.castTo(seqLens, i64);
  auto validAt = [&](int64_t t) -> Value { // i1 [batch, hidden]
    Value lt = n.fold<LtOp>(n.splat(RankedTensorType::get({batch}, i64), t), lens);
    return n.fold<BroadcastInDimOp>(
        RankedTensorType::get({batch, hidden}, n.builder().getI1Type()), lt,
        ArrayRef<int64_t>{0});
  };
  // Reverses each batch element's valid prefix along dim 0 of v [seq, batch,
  // k]: t < len reads len - 1 - t, the (masked) rest stays in place.
  auto reverseValid = [&](Value v) -> Value {
    if (!lens)
      return n.create<ReverseOp>(v, ArrayRef<int64_t>{0}).getResult();
    auto vt = typeOf(v);
    auto idxType = RankedTensorType::get({seq, batch}, i64);
    Value steps = n.create<IotaOp>(idxType, 0).getResult();
    Value len = n.fold<BroadcastInDimOp>(idxType, lens, ArrayRef<int64_t>{1});
    Value mirrored =
        n.fold<SubOp>(n.fold<SubOp>(len, n.splat(idxType, 1)), steps);
    Value idx = n.fold<SelectOp>(n.fold<LtOp>(steps, len), mirrored, steps);
    Value full = n.fold<BroadcastInDimOp>(
        RankedTensorType::get(vt.getShape(), i64), idx, ArrayRef<int64_t>{0, 1});
    return n.create<GatherElementsOp>(vt, v, full, 0).getResult();
  };

  SmallVector<Value> ys, hs, cs;
  for (int d = 0; d < dirs; ++d) {
    bool reverse = direction == "reverse" || d == 1;
    Value wd = slice0(w, d, {gates * hidden, input});
    Value rd = slice0(r, d, {gates * hidden, hidden});
    Value wb, rb;
    if (bias) {
      Value bd = slice0(bias, d, {2 * gates * hidden});
      wb = n.broadcastTo(
          n.fold<SliceOp>(bd, ArrayRef<int64_t>{0},
                          ArrayRef<int64_t>{gates * hidden}, ArrayRef<int64_t>{1}),
          gateType.getShape());
      rb = n.broadcastTo(
          n.fold<SliceOp>(bd, ArrayRef<int64_t>{gates * hidden},
                          ArrayRef<int64_t>{2 * gates * hidden},
                          ArrayRef<int64_t>{1}),
          gateType.getShape());
    }
    Value h = initH ? slice0(initH, d, {batch, hidden}) : n.splat(stateType, 0);
    Value c;
    if (cell == Cell::kLstm)
      c = initC ? slice0(initC, d, {batch, hidden}) : n.splat(stateType, 0);
    SmallVector<Value, 3> pd;
    if (peep) {
      Value p = slice0(peep, d, {3 * hidden});
      for (int g = 0; g < 3; ++g)
        pd.push_back(n.broadcastTo(
            n.fold<SliceOp>(p, ArrayRef<int64_t>{g * hidden},
                            ArrayRef<int64_t>{(g + 1) * hidden},
                            ArrayRef<int64_t>{1}),
            stateType.getShape()));
    }
    ArrayRef<Activation> f =
        ArrayRef<Activation>(*acts).slice(d * defaults.size(), defaults.size());
    // X W^T for every step at once: [seq * batch, gates * hidden].
    Value xs = reverse ? reverseValid(x) : x;
    Value xw = n.create<MatmulOp>(n.reshape(xs, {seq * batch, input}), wd,
                                  false, true)
                   .getResult();
    xw = n.reshape(xw, {seq, batch, gates * hidden});
    auto gate = [&](Value v, int g) { // [batch, hidden] slice g of v
      return n.fold<SliceOp>(v, ArrayRef<int64_t>{0, g * hidden},
                             ArrayRef<int64_t>{batch, (g + 1) * hidden},
                             ArrayRef<int64_t>{1, 1});
    };
    auto clipped = [&](Value v) -> Value {
      if (!hasClip)
        return v;
      auto t = typeOf(v);
      return n.fold<MaxOp>(n.splat(t, -clip),
                           n.fold<MinOp>(n.splat(t, clip), v));
    };
    SmallVector<Value> steps;
    for (int64_t t = 0; t < seq; ++t) {
      Value xt = n.reshape(
          n.fold<SliceOp>(xw, ArrayRef<int64_t>{t, 0, 0},
                          ArrayRef<int64_t>{t + 1, batch, gates * hidden},
                          ArrayRef<int64_t>{1, 1, 1}),
          {batch, gates * hidden});
      if (wb)
        xt = n.fold<AddOp>(xt, wb);
      Value hr = n.create<MatmulOp>(h, rd, false, true).getResult();
      if (rb)
        hr = n.fold<AddOp>(hr, rb);
      Value hNew, cNew;
      if (cell == Cell::kRnn) {
        hNew = activate(n, f[0], clipped(n.fold<AddOp>(xt, hr)));
      } else if (cell == Cell::kGru) {
        // Gates z, r, h.
        Value z = activate(n, f[0], clipped(n.fold<AddOp>(gate(xt, 0), gate(hr, 0))));
        Value rg = activate(n, f[0], clipped(n.fold<AddOp>(gate(xt, 1), gate(hr, 1))));
        Value hh;
        if (linearBeforeReset) {
          hh = n.fold<AddOp>(gate(xt, 2), n.fold<MulOp>(rg, gate(hr, 2)));
        } else {
          Value rh = n.fold<MulOp>(rg, h);
          Value rd2 = n.fold<SliceOp>(rd, ArrayRef<int64_t>{2 * hidden, 0},
                                      ArrayRef<int64_t>{3 * hidden, hidden},
                                      ArrayRef<int64_t>{1, 1});
          Value rr = n.create<MatmulOp>(rh, rd2, false, true).getResult();
          if (rb)
            rr = n.fold<AddOp>(rr, gate(rb, 2));
          hh = n.fold<AddOp>(gate(xt, 2), rr);
        }
        hh = activate(n, f[1], clipped(hh));
        // H = (1 - z) * hh + z * H.
        Value one = n.splat(stateType, 1);
        hNew = n.fold<AddOp>(n.fold<MulOp>(n.fold<SubOp>(one, z), hh),
                             n.fold<MulOp>(z, h));
      } else {
        // Gates i, o, f, c; peepholes i, o, f.
        Value gi = n.fold<AddOp>(gate(xt, 0), gate(hr, 0));
        Value go = n.fold<AddOp>(gate(xt, 1), gate(hr, 1));
        Value gf = n.fold<AddOp>(gate(xt, 2), gate(hr, 2));
        Value gc = n.fold<AddOp>(gate(xt, 3), gate(hr, 3));
        if (peep) {
          gi = n.fold<AddOp>(gi, n.fold<MulOp>(pd[0], c));
          gf = n.fold<AddOp>(gf, n.fold<MulOp>(pd[2], c));
        }
        Value i = activate(n, f[0], clipped(gi));
        Value fg = inputForget
                       ? n.fold<SubOp>(n.splat(stateType, 1), i)
                       : activate(n, f[0], clipped(gf));
        Value cc = activate(n, f[1], clipped(gc));
        cNew = n.fold<AddOp>(n.fold<MulOp>(fg, c), n.fold<MulOp>(i, cc));
        if (peep)
          go = n.fold<AddOp>(go, n.fold<MulOp>(pd[1], cNew));
        Value o = activate(n, f[0], clipped(go));
        hNew = n.fold<MulOp>(o, activate(n, f[2], cNew));
      }
      if (lens) {
        Value valid = validAt(t);
        steps.push_back(n.fold<SelectOp>(valid, hNew, n.splat(stateType, 0)));
        h = n.fold<SelectOp>(valid, hNew, h);
        if (cNew)
          c = n.fold<SelectOp>(valid, cNew, c);
      } else {
        steps.push_back(hNew);
        h = hNew;
        c = cNew;
      }
    }
    // Y of this direction in step order, then in time order.
    SmallVector<Value> shaped;
    for (Value s : steps)
      shaped.push_back(n.reshape(s, {1, batch, hidden}));
    Value y = seq == 0 ? n.splat(RankedTensorType::get({0, batch, hidden}, et), 0)
                       : n.fold<ConcatOp>(shaped, 0);
    if (reverse && seq > 0)
      y = reverseValid(y);
    ys.push_back(n.reshape(y, {seq, 1, batch, hidden}));
    hs.push_back(n.reshape(h, {1, batch, hidden}));
    if (c)
      cs.push_back(n.reshape(c, {1, batch, hidden}));
  }
  Value y = ys.size() == 1 ? ys[0] : n.fold<ConcatOp>(ys, 1);
  Value yh = hs.size() == 1 ? hs[0] : n.fold<ConcatOp>(hs, 0);
  Value yc;
  if (!cs.empty())
    yc = cs.size() == 1 ? cs[0] : n.fold<ConcatOp>(cs, 0);
  if (layout == 1) {
    y = n.transpose(y, {2, 0, 1, 3});
    yh = n.transpose(yh, {1, 0, 2});
    if (yc)
      yc = n.transpose(yc, {1, 0, 2});
  }
  n.setOutput(0, y);
  n.setOutput(1, yh);
  if (yc)
    n.setOutput(2, yc);
  return success();
}

LogicalResult importRNN(NodeImporter &n) { return importRecurrent(n, Cell::kRnn); }
LogicalResult importGRU(NodeImporter &n) { return importRecurrent(n, Cell::kGru); }
LogicalResult importLSTM(NodeImporter &n) {
  return importRecurrent(n, Cell::kLstm);
}

} // namespace

void appendIndexingOps(std::vector<OpEntry> &ops) {
  ops.insert(ops.end(), {
      {"Resize", 10, importResize},
      {"Upsample", 7, importUpsample},
      {"GatherND", 11, importGatherND},
      {"ScatterND", 11, importScatterND},
      {"ScatterElements", 11, importScatterElements},
      {"Scatter", 9, importScatterElements},
      {"TopK", 1, importTopK},
      {"Einsum", 12, importEinsum},
      {"RNN", 7, importRNN},
      {"GRU", 7, importGRU},
      {"LSTM", 7, importLSTM},
  });
}

} // namespace dtcc::onnx_frontend
