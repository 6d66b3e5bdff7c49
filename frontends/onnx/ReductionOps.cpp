//===- ReductionOps.cpp - ONNX reductions to dgraph -----------------------===//
//
// dgraph has sum, max, min and prod reductions; ONNX's mean, L1, L2,
// log-sum, log-sum-exp and sum-of-squares are built from them. Det reduces
// each matrix to the product of its Gaussian elimination's pivots.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/NodeImporter.h"

using namespace mlir;
using namespace dtcc::graph;

namespace dtcc::onnx_frontend {
namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

enum class Kind { Sum, Mean, Max, Min, Prod, L1, L2, LogSum, LogSumExp, SumSquare };

/// The reduced dimensions of a Reduce* node, or none for an identity (empty
/// axes with noop_with_empty_axes).
FailureOr<std::optional<SmallVector<int64_t>>> reducedDims(NodeImporter &n,
                                                           Kind kind,
                                                           int64_t rank) {
  // ReduceSum took axes as an input from opset 13, the others from 18;
  // before, an attribute (negative axes from opset 11, accepted for all).
  int64_t inputSince = kind == Kind::Sum ? 13 : 18;
  auto given = readAxes(n, 1, inputSince, rank);
  if (failed(given))
    return failure();
  SmallVector<int64_t> axes = std::move(*given);
  if (axes.empty()) {
    if (n.getOpset() >= inputSince && n.attrInt("noop_with_empty_axes", 0))
      return std::optional<SmallVector<int64_t>>();
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  }
  llvm::sort(axes);
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  return std::optional<SmallVector<int64_t>>(axes);
}

LogicalResult importReduce(NodeImporter &n, Kind kind) {
  Value x = n.input(0);
  auto type = typeOf(x);
  auto dimsOr = reducedDims(n, kind, type.getRank());
  if (failed(dimsOr))
    return failure();
  bool keep = n.attrInt("keepdims", 1) != 0;
  bool isFloat = isa<FloatType>(type.getElementType());
  if (!isFloat && (kind == Kind::L2 || kind == Kind::LogSum ||
                   kind == Kind::LogSumExp))
    return n.error() << "expected a floating-point input, got " << type;
  if (!*dimsOr) { // identity; keeps the elementwise part of L1/L2/...
    Value y = x;
    if (kind == Kind::L1)
      y = n.fold<AbsOp>(x);
    else if (kind == Kind::SumSquare)
      y = n.fold<MulOp>(x, x);
    else if (kind == Kind::L2)
      y = n.fold<AbsOp>(x);
    else if (kind == Kind::LogSum)
      y = n.fold<LogOp>(x);
    n.setOutput(0, y);
    return success();
  }
  ArrayRef<int64_t> dims = **dimsOr;
  int64_t count = 1;
  for (int64_t d : dims)
    count *= type.getDimSize(d);
  Value y;
  switch (kind) {
  case Kind::Sum:
    y = n.reduce<ReduceSumOp>(x, dims, keep);
    break;
  case Kind::Max:
    y = n.reduce<ReduceMaxOp>(x, dims, keep);
    break;
  case Kind::Min:
    y = n.reduce<ReduceMinOp>(x, dims, keep);
    break;
  case Kind::Prod:
    y = n.reduce<ReduceProdOp>(x, dims, keep);
    break;
  case Kind::Mean: {
    y = n.reduce<ReduceSumOp>(x, dims, keep);
    y = n.fold<DivOp>(y, n.splat(typeOf(y), count));
    break;
  }
  case Kind::L1:
    y = n.reduce<ReduceSumOp>(n.fold<AbsOp>(x), dims, keep);
    break;
  case Kind::L2:
    y = normOfSum(n, n.reduce<ReduceSumOp>(n.fold<MulOp>(x, x), dims, keep));
    break;
  case Kind::SumSquare:
    y = n.reduce<ReduceSumOp>(n.fold<MulOp>(x, x), dims, keep);
    break;
  case Kind::LogSum:
    y = n.fold<LogOp>(n.reduce<ReduceSumOp>(x, dims, keep));
    break;
  case Kind::LogSumExp: {
    // max + log(sum(exp(x - max))), stable for large inputs.
    Value m = n.reduce<ReduceMaxOp>(x, dims, /*keepDims=*/true);
    Value shifted = n.fold<SubOp>(x, n.broadcastTo(m, type.getShape()));
    Value s = n.reduce<ReduceSumOp>(n.fold<ExpOp>(shifted), dims, keep);
    y = n.fold<AddOp>(n.fold<LogOp>(s), n.reshape(m, typeOf(s).getShape()));
    break;
  }
  }
  n.setOutput(0, y);
  return success();
}

template <typename ArgOp> LogicalResult importArgReduce(NodeImporter &n) {
  Value x = n.input(0);
  auto type = typeOf(x);
  auto axis = n.normalizeAxis(n.attrInt("axis", 0), type.getRank());
  if (failed(axis))
    return failure();
  bool last = n.attrInt("select_last_index", 0) != 0;
  Value y = n.create<ArgOp>(x, *axis, last).getResult();
  if (n.attrInt("keepdims", 1)) {
    SmallVector<int64_t> shape(type.getShape());
    shape[*axis] = 1;
    y = n.reshape(y, shape);
  }
  n.setOutput(0, y);
  return success();
}

LogicalResult importCumSum(NodeImporter &n) {
  Value x = n.input(0);
  auto axisValue = n.constantInts(1, "axis");
  if (failed(axisValue))
    return failure();
  auto axis = n.normalizeAxis((*axisValue)[0], typeOf(x).getRank());
  if (failed(axis))
    return failure();
  n.setOutput(0, n.create<CumSumOp>(x, *axis, n.attrInt("exclusive", 0) != 0,
                                    n.attrInt("reverse", 0) != 0)
                     .getResult());
  return success();
}

/// LpNormalization: x / ||x||_p along `axis` (p 1 or 2), 0 where the norm
/// is 0 (ONNX defines it so); the 2-norm through normOfSum, whose gradient
/// is 0 at a zero vector.
LogicalResult importLpNormalization(NodeImporter &n) {
  Value x = n.input(0);
  if (failed(requireFloat(n, x)))
    return failure();
  auto type = typeOf(x);
  auto axis = n.normalizeAxis(n.attrInt("axis", -1), type.getRank());
  if (failed(axis))
    return failure();
  int64_t p = n.attrInt("p", 2);
  if (p != 1 && p != 2)
    return n.error() << "expected p 1 or 2, got " << p;
  Value norm =
      p == 2 ? normOfSum(n, n.reduce<ReduceSumOp>(n.fold<MulOp>(x, x),
                                                  {*axis}, true))
             : n.reduce<ReduceSumOp>(n.fold<AbsOp>(x), {*axis}, true);
  Value full = n.broadcastTo(norm, type.getShape());
  Value zero = n.splat(type, 0), isZero = n.fold<EqOp>(full, zero);
  Value safe = n.fold<SelectOp>(isZero, n.splat(type, 1), full);
  n.setOutput(0, n.fold<SelectOp>(isZero, zero, n.fold<DivOp>(x, safe)));
  return success();
}

/// Det (opset 11): each [M, M] matrix of X [..., M, M] reduced to its
/// determinant by Gaussian elimination with partial pivoting, unrolled over
/// the M columns: the product of the pivots, negated per row exchange
/// (as LAPACK's getrf, which numpy.linalg.det calls). Rows are read and
/// exchanged by products with unit vectors and with the one-hot of the
/// pivot's row (an argmax of the column's magnitudes), so that the
/// gradient, det(X) * inverse(X)^T where X is invertible, is autodiff's
/// of the elimination. A singular matrix's determinant is 0.
LogicalResult importDet(NodeImporter &n) {
  Value x = n.input(0);
  auto type = typeOf(x);
  if (failed(requireFloat(n, x)))
    return failure();
  int64_t rank = type.getRank();
  if (rank < 2 || type.getDimSize(rank - 1) != type.getDimSize(rank - 2))
    return n.error() << "expected square matrices [..., M, M], got " << type;
  // The largest order dtcc unrolls the elimination for.
  constexpr int64_t kMaxOrder = 64;
  int64_t m = type.getDimSize(rank - 1);
  if (m > kMaxOrder)
    return n.error() << "eliminates at most " << kMaxOrder << " x " << kMaxOrder
                     << " matrices (unrolled over the rows), got " << m << " x "
                     << m;
  ArrayRef<int64_t> batchShape = type.getShape().drop_back(2);
  int64_t batch = 1;
  for (int64_t d : batchShape)
    batch *= d;
  Type f = type.getElementType();
  auto scalars = RankedTensorType::get({batch}, f);
  // A constant [rows, cols] of f, 1 where `one` holds of the row index.
  auto indicator = [&](int64_t rows, int64_t cols,
                       llvm::function_ref<bool(int64_t)> one) {
    SmallVector<double> v;
    for (int64_t i = 0; i < rows * cols; ++i)
      v.push_back(one(rows == 1 ? i : i / cols) ? 1.0 : 0.0);
    return n.floatConstant(RankedTensorType::get({rows, cols}, f), v);
  };
  auto times = [&](Value l, Value r, ArrayRef<int64_t> shape) {
    return n.fold<MulOp>(n.broadcastTo(l, shape), n.broadcastTo(r, shape));
  };
  auto product = [&](Value l, Value r) { return *numpyMatmul(n, l, r); };
  SmallVector<int64_t> rowIds(m);
  for (int64_t r = 0; r < m; ++r)
    rowIds[r] = r;
  Value rows =
      n.broadcastTo(n.constant(DenseElementsAttr::get(
                        RankedTensorType::get({1, m}, n.builder().getI64Type()),
                        ArrayRef<int64_t>(rowIds))),
                    {batch, m});
  Value a = n.reshape(x, {batch, m, m});
  Value det = n.splat(scalars, 1.0);
  for (int64_t k = 0; k < m; ++k) {
    Value ekColumn = indicator(m, 1, [&](int64_t r) { return r == k; });
    Value ekRow = indicator(1, m, [&](int64_t r) { return r == k; });
    // The pivot's row: the largest magnitude in column k at or below row k
    // (rows above score -1), the first of equals.
    Value column = n.reshape(product(a, ekColumn), {batch, m});
    Value below = indicator(1, m, [&](int64_t r) { return r >= k; });
    Value above = indicator(1, m, [&](int64_t r) { return r < k; });
    Value score = n.fold<SubOp>(times(n.fold<AbsOp>(column), below, {batch, m}),
                                n.broadcastTo(above, {batch, m}));
    Value pivotRow = n.create<ArgMaxOp>(score, 1, false).getResult();
    Value onehot = n.castTo(
        n.fold<EqOp>(n.broadcastTo(n.reshape(pivotRow, {batch, 1}), {batch, m}),
                     rows),
        f);
    // Rows k and p exchanged: A + (e_k - P) (row_p - row_k).
    Value rowK = product(ekRow, a); // [batch, 1, m]
    Value rowP = product(n.reshape(onehot, {batch, 1, m}), a);
    Value exchange = n.fold<SubOp>(n.broadcastTo(ekRow, {batch, m}), onehot);
    a = n.fold<AddOp>(a, times(n.reshape(exchange, {batch, m, 1}),
                               n.fold<SubOp>(rowP, rowK), {batch, m, m}));
    // An exchange (p != k) negates the determinant: 2 P[k] - 1.
    Value kept = n.reshape(product(onehot, ekColumn), {batch});
    Value sign = n.fold<SubOp>(n.fold<MulOp>(kept, n.splat(scalars, 2.0)),
                               n.splat(scalars, 1.0));
    Value pivot = n.reshape(product(rowP, ekColumn), {batch});
    det = n.fold<MulOp>(det, n.fold<MulOp>(sign, pivot));
    if (k + 1 == m)
      break;
    // The rows below k less their multiple of row k (a zero pivot, whose
    // column below is zero too, eliminates nothing).
    Value isZero = n.fold<EqOp>(pivot, n.splat(scalars, 0.0));
    Value divisor = n.fold<SelectOp>(isZero, n.splat(scalars, 1.0), pivot);
    Value strictlyBelow = indicator(m, 1, [&](int64_t r) { return r > k; });
    Value factors = n.fold<DivOp>(
        times(product(a, ekColumn), strictlyBelow, {batch, m, 1}),
        n.broadcastTo(n.reshape(divisor, {batch, 1, 1}), {batch, m, 1}));
    a = n.fold<SubOp>(a, times(factors, rowP, {batch, m, m}));
  }
  n.setOutput(0, n.reshape(det, batchShape));
  return success();
}

} // namespace

Value normOfSum(NodeImporter &n, Value sum, Value exponent) {
  // The root reads 1 in place of a zero sum and its result is then replaced
  // by 0, so neither select passes a gradient through the zero.
  auto type = typeOf(sum);
  Value zero = n.splat(type, 0), isZero = n.fold<EqOp>(sum, zero);
  Value safe = n.fold<SelectOp>(isZero, n.splat(type, 1), sum);
  Value root = exponent ? n.fold<PowOp>(safe, exponent) : n.fold<SqrtOp>(safe);
  return n.fold<SelectOp>(isZero, zero, root);
}

FailureOr<std::optional<SmallVector<int64_t>>> reducedAxes(NodeImporter &n,
                                                           int64_t rank) {
  return reducedDims(
      n, n.getNode().op_type() == "ReduceSum" ? Kind::Sum : Kind::Mean, rank);
}

void appendReductionOps(std::vector<OpEntry> &ops) {
  ops.insert(ops.end(), {
      {"ReduceSum", 1, [](NodeImporter &n) { return importReduce(n, Kind::Sum); }},
      {"ReduceMean", 1, [](NodeImporter &n) { return importReduce(n, Kind::Mean); }},
      {"ReduceMax", 1, [](NodeImporter &n) { return importReduce(n, Kind::Max); }},
      {"ReduceMin", 1, [](NodeImporter &n) { return importReduce(n, Kind::Min); }},
      {"ReduceProd", 1, [](NodeImporter &n) { return importReduce(n, Kind::Prod); }},
      {"ReduceL1", 1, [](NodeImporter &n) { return importReduce(n, Kind::L1); }},
      {"LpNormalization", 1, importLpNormalization},
      {"ReduceL2", 1, [](NodeImporter &n) { return importReduce(n, Kind::L2); }},
      {"ReduceLogSum", 1, [](NodeImporter &n) { return importReduce(n, Kind::LogSum); }},
      {"ReduceLogSumExp", 1,
       [](NodeImporter &n) { return importReduce(n, Kind::LogSumExp); }},
      {"ReduceSumSquare", 1,
       [](NodeImporter &n) { return importReduce(n, Kind::SumSquare); }},
      {"ArgMax", 1, importArgReduce<ArgMaxOp>},
      {"ArgMin", 1, importArgReduce<ArgMinOp>},
      {"CumSum", 11, importCumSum},
      {"Det", 11, importDet},
  });
}

} // namespace dtcc::onnx_frontend
