//===- SelectionOps.cpp - NonZero's selections with static shapes ---------===//
//
// `x[mask]` in PyTorch exports as NonZero(mask) -> Transpose -> GatherND:
// the number of rows is data-dependent, and dgraph's shapes are static.
// dtcc keeps one row for every element the mask could select and which of
// them it does (Selection, NodeImporter.h): ops that treat the rows one by
// one keep such a value a selection, reductions over its rows and losses
// over them read only the selected ones, and anything else (its shape, a
// graph output) is an error that says so. A masked loss, F.cross_entropy(
// logits[mask], labels[mask]) or (x[mask] ** 2).mean(), trains as PyTorch
// computes it.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/GraphImporter.h"

#include "llvm/ADT/StringSet.h"

#include <limits>

using namespace mlir;
using namespace dtcc::graph;

namespace dtcc::onnx_frontend {
namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// NonZero(x): the coordinates [rank, N] of every element of x, those x
/// does not select replaced by the first one it selects (the first element
/// when none).
LogicalResult importNonZero(NodeImporter &n) {
  Value x = n.input(0);
  auto type = typeOf(x);
  if (type.getRank() == 0)
    return n.error() << "expected an input of rank >= 1, got " << type;
  int64_t count = type.getNumElements();
  Type i64 = n.builder().getI64Type();
  auto flatI64 = RankedTensorType::get({count}, i64);
  Value flat = n.reshape(x, {count});
  Value valid =
      type.getElementType().isInteger(1)
          ? flat
          : n.fold<NotOp>(n.fold<EqOp>(flat, n.splat(typeOf(flat), 0.0)));
  Value index = n.create<IotaOp>(flatI64, 0).getResult();
  Value first =
      n.create<ArgMaxOp>(n.castTo(valid, n.builder().getI32Type()), 0, false)
          .getResult();
  Value chosen = n.fold<SelectOp>(valid, index, n.broadcastTo(first, {count}));
  SmallVector<Value> coords;
  int64_t stride = count;
  for (int64_t d = 0; d < type.getRank(); ++d) {
    int64_t size = type.getDimSize(d);
    stride = size ? stride / size : 0;
    Value c = n.fold<DivOp>(
        chosen, n.splat(flatI64, double(std::max<int64_t>(stride, 1))));
    c = n.fold<RemOp>(c, n.splat(flatI64, double(std::max<int64_t>(size, 1))));
    coords.push_back(n.reshape(c, {1, count}));
  }
  Value out =
      coords.size() == 1 ? coords[0] : n.fold<ConcatOp>(ValueRange(coords), 0);
  n.setOutput(0, out);
  // importNode names the node's location after it.
  n.noteSelection(out,
                  {x, valid, 1, cast<NameLoc>(n.getLoc()).getName().str()});
  return success();
}

/// The ops whose output element depends only on the elements at the same
/// position of their (broadcast) inputs.
const llvm::StringSet<> &elementwiseOps() {
  // clang-format off
  static const llvm::StringSet<> ops = {
      "Add", "Sub", "Mul", "Div", "Pow", "Mod", "BitShift", "And", "Or",
      "Xor", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "Equal",
      "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Max", "Min",
      "Sum", "Mean", "Where", "Clip", "Cast", "CastLike", "Identity", "Abs",
      "Neg", "Sign", "Relu", "Exp", "Log", "Sqrt", "Reciprocal", "Tanh",
      "Sigmoid", "Erf", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh",
      "Cosh", "Asinh", "Acosh", "Atanh", "Floor", "Ceil", "Round", "Not",
      "IsNaN", "IsInf", "Gelu", "LeakyRelu", "Elu", "Selu", "Celu",
      "HardSigmoid", "HardSwish", "Softplus", "Mish", "Swish", "Softsign",
      "ThresholdedRelu", "Shrink", "PRelu", "Dropout"};
  // clang-format on
  return ops;
}

bool isReduction(llvm::StringRef op) { return op.starts_with("Reduce"); }

/// `node`'s attribute `name`, added (without a value) when it has none.
onnx::AttributeProto &attributeOf(onnx::NodeProto &node, llvm::StringRef name) {
  for (onnx::AttributeProto &a : *node.mutable_attribute())
    if (a.name() == name)
      return a;
  onnx::AttributeProto &a = *node.add_attribute();
  a.set_name(name.str());
  return a;
}

} // namespace

LogicalResult
GraphImporter::importWithInputs(const onnx::NodeProto &node,
                                ArrayRef<std::pair<int, Value>> inputs,
                                int64_t opset, OpBuilder &b, Location loc) {
  // The handler reads its inputs by name: each value under a name of its
  // own, in a copy of the node (only then: a Constant's may be large).
  std::optional<onnx::NodeProto> renamed;
  SmallVector<std::string> names;
  for (auto [i, v] : inputs) {
    if (!renamed)
      renamed = node;
    names.push_back(node.input(i) + "/selected" + std::to_string(i));
    renamed->set_input(i, names.back());
    values[names.back()] = v;
  }
  NodeImporter importer(*this, renamed ? *renamed : node, opset, b, loc);
  LogicalResult result =
      opRegistry().at(opKey(node.domain(), node.op_type())).handler(importer);
  for (const std::string &name : names)
    values.erase(name);
  return failure(failed(result) || importer.hadError());
}

LogicalResult GraphImporter::importOnSelection(const onnx::NodeProto &node,
                                               int64_t opset, OpBuilder &b,
                                               Location loc) {
  llvm::StringRef op = node.op_type();
  NodeImporter n(*this, node, opset, b, loc);
  // The selection inputs, all of one mask.
  SmallVector<std::pair<int, const Selection *>> selected;
  for (int i = 0; i < node.input_size(); ++i)
    if (n.hasInput(i))
      if (const Selection *s = selectionOf(n.input(i)))
        selected.push_back({i, s});
  const Selection &sel = *selected.front().second;
  auto rows = [&](int i) {
    const Selection *s = selectionOf(n.input(i));
    return "input " + std::to_string(i) + " '" + node.input(i) +
           "' (the elements NonZero node '" + s->node +
           "' selects, along axis " + std::to_string(s->axis) + ")";
  };
  for (auto [i, s] : selected)
    if (s->source != sel.source)
      return n.error() << rows(i) << " and " << rows(selected.front().first)
                       << " select by different masks: their rows do not "
                          "correspond";
  auto unsupported = [&](llvm::StringRef why) {
    return n.error() << rows(selected.front().first)
                     << " has a data-dependent size, which dtcc keeps only "
                        "through ops that treat its rows one by one, "
                        "reductions over them and losses over them: "
                     << why;
  };
  auto mark = [&](int output, int64_t axis) {
    if (n.wantsOutput(output))
      noteSelection(lookup(node.output(output)),
                    {sel.source, sel.valid, axis, sel.node});
  };
  // `valid` as a mask of `v`'s shape, its rows along `axis`.
  auto validOf = [&](Value v, int64_t axis) {
    auto type = typeOf(v);
    SmallVector<int64_t> shape(type.getRank(), 1);
    shape[axis] = type.getDimSize(axis);
    return n.broadcastTo(n.reshape(sel.valid, shape), type.getShape());
  };
  // A selection's shape serves only as the shape of its rows.
  for (int i = 0; i < node.input_size(); ++i)
    if (n.hasInput(i) && rowShapes.count(n.input(i)) &&
        !((op == "Expand" || op == "Reshape") && i == 1))
      return unsupported("input " + std::to_string(i) + " '" + node.input(i) +
                         "' is the shape of selected rows, which serves only "
                         "as the shape of those rows (Expand, Reshape)");
  auto onlyInput = [&](int i) -> LogicalResult {
    if (selected.size() != 1 || selected.front().first != i)
      return unsupported("expected only input " + std::to_string(i) +
                         " to be a selection");
    return success();
  };
  auto run = [&] { return importWithInputs(node, {}, opset, b, loc); };

  if (elementwiseOps().contains(op)) {
    if (failed(run()))
      return failure();
    int64_t rank = typeOf(lookup(node.output(0))).getRank();
    int64_t axis = -1;
    for (auto [i, s] : selected) {
      int64_t aligned = s->axis + rank - typeOf(n.input(i)).getRank();
      if (axis >= 0 && aligned != axis)
        return unsupported("its rows meet another selection's along a "
                           "different axis");
      axis = aligned;
    }
    for (int i = 0; i < node.input_size(); ++i) {
      if (!n.hasInput(i) || selectionOf(n.input(i)))
        continue;
      auto type = typeOf(n.input(i));
      int64_t at = axis - (rank - type.getRank());
      if (at >= 0 && type.getDimSize(at) != 1)
        return unsupported("input " + std::to_string(i) + " '" + node.input(i) +
                           "' has " + std::to_string(type.getDimSize(at)) +
                           " elements along the rows' axis (a static size "
                           "where the rows' is data-dependent)");
    }
    for (int o = 0; o < node.output_size(); ++o)
      mark(o, axis);
    return success();
  }

  if (op == "Transpose" || op == "Softmax" || op == "LogSoftmax" ||
      op == "Hardmax" || op == "LayerNormalization" ||
      op == "RMSNormalization" || op == "ArgMax" || op == "ArgMin") {
    if (failed(onlyInput(0)))
      return failure();
    int64_t rank = typeOf(n.input(0)).getRank();
    if (op == "Transpose") {
      if (failed(run()))
        return failure();
      SmallVector<int64_t> perm;
      if (auto given = n.attrInts("perm"))
        perm = *given;
      else
        for (int64_t d = rank - 1; d >= 0; --d)
          perm.push_back(d);
      mark(0, llvm::find(perm, sel.axis) - perm.begin());
      return success();
    }
    // The op works along (or from, for the norms and opset < 13's
    // softmax) one axis; the rows must be outside it.
    bool from = op == "LayerNormalization" || op == "RMSNormalization" ||
                (opset < 13 && op.ends_with("max"));
    int64_t fallback =
        (op == "Softmax" || op == "LogSoftmax" || op == "Hardmax") && opset < 13
            ? 1
        : op.starts_with("Arg") ? 0
                                : -1;
    auto axis = n.normalizeAxis(n.attrInt("axis", fallback), rank);
    if (failed(axis))
      return failure();
    if (from ? sel.axis >= *axis : sel.axis == *axis)
      return unsupported("the op computes along the rows' axis");
    if (failed(run()))
      return failure();
    int64_t out = sel.axis;
    if (op.starts_with("Arg") && !n.attrInt("keepdims", 1) && *axis < sel.axis)
      --out;
    for (int o = 0; o < node.output_size(); ++o)
      mark(o, out);
    return success();
  }

  if (op == "Split" || op == "Squeeze" || op == "Unsqueeze" ||
      op == "Reshape") {
    if (failed(onlyInput(0)))
      return failure();
    auto in = typeOf(n.input(0));
    int64_t rank = in.getRank();
    if (op == "Split") {
      auto axis = n.normalizeAxis(n.attrInt("axis", 0), rank);
      if (failed(axis))
        return failure();
      if (*axis == sel.axis)
        return unsupported("it splits along the rows' axis");
      if (failed(run()))
        return failure();
      for (int o = 0; o < node.output_size(); ++o)
        mark(o, sel.axis);
      return success();
    }
    if (op == "Reshape") {
      // Only a shape that keeps the rows' axis and every axis before it.
      if (failed(run()))
        return failure();
      auto out = typeOf(lookup(node.output(0)));
      if (out.getRank() <= sel.axis ||
          in.getShape().take_front(sel.axis + 1) !=
              out.getShape().take_front(sel.axis + 1))
        return unsupported("the new shape does not keep the rows' axis and "
                           "the axes before it");
      mark(0, sel.axis);
      return success();
    }
    int64_t outRank = rank;
    auto axes =
        op == "Squeeze" ? readAxes(n, 1, 13, rank) : unsqueezeAxes(n, rank);
    if (failed(axes))
      return failure();
    if (op == "Unsqueeze")
      outRank += int64_t(axes->size());
    if (op == "Squeeze" && (llvm::is_contained(*axes, sel.axis) ||
                            (axes->empty() && in.getDimSize(sel.axis) == 1)))
      return unsupported("it squeezes the rows' axis");
    if (failed(run()))
      return failure();
    int64_t out = sel.axis;
    if (op == "Squeeze") {
      for (int64_t d = 0; d < sel.axis; ++d)
        if (axes->empty() ? in.getDimSize(d) == 1
                          : llvm::is_contained(*axes, d))
          --out;
    } else {
      // The rows land on the (sel.axis + 1)-th output position not inserted.
      for (int64_t d = 0, seen = -1; d < outRank; ++d)
        if (!llvm::is_contained(*axes, d) && ++seen == sel.axis) {
          out = d;
          break;
        }
    }
    mark(0, out);
    return success();
  }

  if (op == "Expand") {
    // A broadcast: the rows stay rows where the shape keeps their axis.
    if (failed(onlyInput(0)))
      return failure();
    auto in = typeOf(n.input(0));
    if (failed(run()))
      return failure();
    auto out = typeOf(lookup(node.output(0)));
    int64_t axis = sel.axis + out.getRank() - in.getRank();
    if (out.getDimSize(axis) != in.getDimSize(sel.axis))
      return unsupported("it expands along the rows' axis");
    mark(0, axis);
    return success();
  }

  if (op == "Concat") {
    // Selections of one mask, their rows along one axis, joined along
    // another.
    int64_t rank = typeOf(n.input(0)).getRank();
    auto axis = n.normalizeAxis(n.attrInt("axis", 0), rank);
    if (failed(axis))
      return failure();
    for (int i = 0; i < node.input_size(); ++i) {
      const Selection *s = n.hasInput(i) ? selectionOf(n.input(i)) : nullptr;
      if (!s || s->axis != sel.axis)
        return unsupported("expected every input to be a selection with its "
                           "rows along one axis");
    }
    if (*axis == sel.axis)
      return unsupported("it joins along the rows' axis");
    if (failed(run()))
      return failure();
    mark(0, sel.axis);
    return success();
  }

  if (op == "MatMul" || op == "Gemm") {
    if (failed(onlyInput(0)))
      return failure();
    auto a = typeOf(n.input(0)), w = typeOf(n.input(1));
    if (a.getRank() < 2 || sel.axis >= a.getRank() - 1 ||
        (op == "Gemm" && n.attrInt("transA", 0)) || w.getRank() > 2)
      return unsupported("a product whose rows are not the selection's");
    if (failed(run()))
      return failure();
    mark(0, sel.axis + typeOf(lookup(node.output(0))).getRank() - a.getRank());
    return success();
  }

  if (op == "GatherND") {
    // The indices' rows (not their coordinate axis), batch_dims 0.
    if (failed(onlyInput(1)))
      return failure();
    if (n.attrInt("batch_dims", 0) != 0 ||
        sel.axis == typeOf(n.input(1)).getRank() - 1)
      return unsupported("expected its rows to index the data (batch_dims "
                         "0, rows along an axis before the coordinates')");
    if (failed(run()))
      return failure();
    mark(0, sel.axis);
    return success();
  }

  if (op == "Gather") {
    int64_t rank = typeOf(n.input(0)).getRank();
    auto axis = n.normalizeAxis(n.attrInt("axis", 0), rank);
    if (failed(axis))
      return failure();
    if (selected.size() != 1)
      return unsupported("both inputs are selections");
    int i = selected.front().first;
    if (i == 0 && sel.axis == *axis)
      return unsupported("it gathers along the rows' axis");
    if (failed(run()))
      return failure();
    int64_t q = typeOf(n.input(1)).getRank();
    mark(0, i == 1             ? *axis + sel.axis
            : sel.axis < *axis ? sel.axis
                               : sel.axis + q - 1);
    return success();
  }

  if (isReduction(op)) {
    if (failed(onlyInput(0)))
      return failure();
    Value x = n.input(0);
    auto type = typeOf(x);
    auto dims = reducedAxes(n, type.getRank());
    if (failed(dims))
      return failure();
    bool keep = n.attrInt("keepdims", 1) != 0;
    if (!*dims || !llvm::is_contained(**dims, sel.axis)) {
      if (failed(run()))
        return failure();
      int64_t out = sel.axis;
      if (*dims && !keep)
        out -= llvm::count_if(**dims, [&](int64_t d) { return d < sel.axis; });
      mark(0, out);
      return success();
    }
    // Over the rows: the rows not selected hold the reduction's identity.
    Type element = type.getElementType();
    double identity = 0;
    bool isFloat = isa<FloatType>(element);
    unsigned width = element.getIntOrFloatBitWidth();
    double lowest = isFloat ? -std::numeric_limits<double>::infinity()
                            : -std::ldexp(1.0, int(width) - 1);
    double highest = isFloat ? std::numeric_limits<double>::infinity()
                             : std::ldexp(1.0, int(width) - 1) - 1;
    if (op == "ReduceMax" || op == "ReduceLogSumExp")
      identity = lowest;
    else if (op == "ReduceMin")
      identity = highest;
    else if (op == "ReduceProd")
      identity = 1;
    Value masked =
        n.fold<SelectOp>(validOf(x, sel.axis), x, n.splat(type, identity));
    if (failed(importWithInputs(node, {{0, masked}}, opset, b, loc)))
      return failure();
    if (op == "ReduceMean") {
      // The handler divided by every row; the mean is over the selected.
      auto scalar = RankedTensorType::get({}, element);
      Value selectedCount = n.fold<ReduceSumOp>(n.castTo(sel.valid, element),
                                                SmallVector<int64_t>{0});
      Value scale = n.fold<DivOp>(
          n.splat(scalar, double(type.getDimSize(sel.axis))), selectedCount);
      Value mean = lookup(node.output(0));
      Value scaled =
          n.fold<MulOp>(mean, n.broadcastTo(scale, typeOf(mean).getShape()));
      define(node.output(0), scaled);
    }
    return success();
  }

  if (op == "SoftmaxCrossEntropyLoss" || op == "NegativeLogLikelihoodLoss") {
    // Samples along axis 0 of the scores and the labels, both of one mask.
    bool scores = false, labels = false;
    for (auto [i, s] : selected) {
      if (i > 1 || s->axis != 0)
        return unsupported("expected the scores and the labels to be "
                           "selections along their first axis");
      (i == 0 ? scores : labels) = true;
    }
    if (!scores || !labels)
      return unsupported("expected both the scores and the labels to be "
                         "selections");
    std::string reduction = n.attrString("reduction", "mean");
    if (reduction == "none") {
      if (failed(run()))
        return failure();
      mark(0, 0);
      mark(1, 0);
      return success();
    }
    // The rows not selected are ignored: their label becomes ignore_index
    // (-1 when the node has none: labels are in [0, C)).
    onnx::NodeProto ignoring = node;
    int64_t ignore = n.attrInt("ignore_index", -1);
    onnx::AttributeProto &ignoreIndex = attributeOf(ignoring, "ignore_index");
    ignoreIndex.set_type(onnx::AttributeProto::INT);
    ignoreIndex.set_i(ignore);
    Value target = n.input(1);
    Value relabelled = n.fold<SelectOp>(
        validOf(target, 0), target, n.splat(typeOf(target), double(ignore)));
    if (failed(importWithInputs(ignoring, {{1, relabelled}}, opset, b, loc)))
      return failure();
    mark(1, 0);
    return success();
  }

  if (op == "ScatterND" || op == "ScatterElements") {
    // Updates written through a selection's indices, both of one mask's
    // rows: those not selected add zeros. `none` writes where a selected
    // row lands and keeps the data elsewhere; `add` adds.
    const Selection *indices = selectionOf(n.input(1));
    const Selection *updates = selectionOf(n.input(2));
    if (selectionOf(n.input(0)) || !indices || !updates)
      return unsupported("expected the indices and the updates to be "
                         "selections and the data not");
    if (updates->axis != indices->axis ||
        (op == "ScatterND" &&
         indices->axis == typeOf(n.input(1)).getRank() - 1))
      return unsupported("expected the updates' rows to be the indices'");
    std::string reduction = n.attrString("reduction", "none");
    if (reduction != "none" && reduction != "add")
      return unsupported("reduction \"" + reduction +
                         "\" (none and add are supported)");
    Value data = n.input(0), update = n.input(2);
    auto dataType = typeOf(data), updateType = typeOf(update);
    Value valid = validOf(update, updates->axis);
    Value masked = n.fold<SelectOp>(valid, update, n.splat(updateType, 0));
    onnx::NodeProto adding = node;
    onnx::AttributeProto &add = attributeOf(adding, "reduction");
    add.set_type(onnx::AttributeProto::STRING);
    add.set_s("add");
    if (reduction == "add")
      return importWithInputs(adding, {{2, masked}}, opset, b, loc);
    // The selected rows' sum into zeros, and how many landed where.
    Value zeros = n.splat(dataType, 0);
    if (failed(
            importWithInputs(adding, {{0, zeros}, {2, masked}}, opset, b, loc)))
      return failure();
    Value written = lookup(node.output(0));
    if (failed(importWithInputs(
            adding,
            {{0, zeros}, {2, n.castTo(valid, dataType.getElementType())}},
            opset, b, loc)))
      return failure();
    Value hit = n.fold<GtOp>(lookup(node.output(0)), zeros);
    define(node.output(0), n.fold<SelectOp>(hit, written, data));
    return success();
  }

  if (op == "Shape") {
    // The static count of rows kept: the shape of those rows, and nothing
    // else (importOnRowShape).
    if (failed(run()))
      return failure();
    rowShapes[lookup(node.output(0))] = sel.node;
    return success();
  }
  if (op == "Size")
    return unsupported("its size is not known when dtcc compiles (dtcc "
                       "computes reductions over the rows instead: sum, "
                       "mean, max, min, and losses over them)");

  return unsupported(op.str() + " is not one of them");
}

LogicalResult GraphImporter::importOnRowShape(const onnx::NodeProto &node,
                                              int64_t opset, OpBuilder &b,
                                              Location loc) {
  NodeImporter n(*this, node, opset, b, loc);
  int first = 0;
  while (!n.hasInput(first) || !rowShapes.count(n.input(first)))
    ++first;
  std::string nonZero = rowShapes.lookup(n.input(first));
  if (node.op_type() != "Concat")
    return n.error() << "input " << first << " '" << node.input(first)
                     << "' is the shape of the elements NonZero node '"
                     << nonZero
                     << "' selects, whose number is data-dependent: dtcc "
                        "uses it only as the shape of those rows (Expand, "
                        "Reshape)";
  if (failed(importWithInputs(node, {}, opset, b, loc)))
    return failure();
  rowShapes[lookup(node.output(0))] = nonZero;
  return success();
}

void appendSelectionOps(std::vector<OpEntry> &ops) {
  ops.insert(ops.end(), {
                            {"NonZero", 9, importNonZero},
                        });
}

} // namespace dtcc::onnx_frontend
