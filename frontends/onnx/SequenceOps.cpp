//===- SequenceOps.cpp - ONNX sequences, resolved at import ---------------===//
//
// dgraph has tensors only. An ONNX sequence is a list of tensors that the
// importer keeps while it reads the graph (GraphImporter::defineSequence):
// every position is known at compile time, so SplitToSequence is slices,
// SequenceAt picks one, ConcatFromSequence is a Concat (or a stack), and no
// sequence reaches the IR. PyTorch's ONNX exporter (dynamo=True) writes
// torch.split and tensor.chunk this way (SplitToSequence, then SequenceAt of
// each piece); a position or split size computed from graph inputs must be
// bound (--bind), as any shape operand.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/NodeImporter.h"

using namespace mlir;
using namespace dtcc::graph;

namespace dtcc::onnx_frontend {
namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// A position input (SequenceAt, SequenceInsert, SequenceErase): one
/// integer known at compile time, normalized against `size` where
/// [-size, size - 1] (or up to `size` when `end` is allowed) is valid.
FailureOr<int64_t> position(NodeImporter &n, int input, int64_t size,
                            bool end) {
  auto given = n.constantInts(input, "position");
  if (failed(given))
    return failure();
  if (given->size() != 1)
    return n.error() << "expected one position, got " << given->size()
                     << " values";
  int64_t p = (*given)[0];
  int64_t last = end ? size : size - 1;
  if (p < -size || p > last)
    return n.error() << "position " << p << " is outside [" << -size << ", "
                     << last << "] for a sequence of " << size << " tensors";
  return p < 0 ? p + size : p;
}

/// The element type every tensor of `s` must have to join it.
LogicalResult checkElementType(NodeImporter &n, const Sequence &s, Value v) {
  Type element = typeOf(v).getElementType();
  if (s.elementType && s.elementType != element)
    return n.error() << "expected a tensor of " << s.elementType
                     << " for a sequence of them, got " << typeOf(v);
  return success();
}

LogicalResult importSplitToSequence(NodeImporter &n) {
  Value x = n.input(0);
  auto type = typeOf(x);
  auto axis = n.normalizeAxis(n.attrInt("axis", 0), type.getRank());
  if (failed(axis))
    return failure();
  int64_t dim = type.getDimSize(*axis);
  // Lengths along the axis: `split` as given (1-D), chunks of a scalar
  // `split` (the last smaller), or pieces of 1 without it.
  SmallVector<int64_t> sizes;
  bool squeeze = false;
  if (n.hasInput(1)) {
    auto ints = n.constantInts(1, "split");
    if (failed(ints))
      return failure();
    if (n.inputType(1).getRank() == 0) {
      int64_t chunk = (*ints)[0];
      if (chunk < 1)
        return n.error() << "expected a split size >= 1, got " << chunk;
      for (int64_t left = dim; left > 0; left -= chunk)
        sizes.push_back(std::min(chunk, left));
    } else {
      sizes = *ints;
      int64_t total = 0;
      for (int64_t s : sizes) {
        if (s < 0)
          return n.error() << "expected split sizes >= 0, got " << s;
        total += s;
      }
      if (total != dim)
        return n.error() << "expected split sizes summing to " << dim
                         << " (dim " << *axis << " of " << type << "), got "
                         << total;
    }
  } else {
    sizes.assign(dim, 1);
    squeeze = n.attrInt("keepdims", 1) == 0;
  }
  Sequence out{splitAlong(n, x, *axis, sizes), type.getElementType()};
  if (squeeze)
    for (Value &piece : out.items) {
      SmallVector<int64_t> shape(typeOf(piece).getShape());
      shape.erase(shape.begin() + *axis);
      piece = n.reshape(piece, shape);
    }
  n.setOutputSequence(0, std::move(out));
  return success();
}

LogicalResult importSequenceAt(NodeImporter &n) {
  auto s = n.sequenceInput(0);
  if (failed(s))
    return failure();
  auto p = position(n, 1, s->items.size(), /*end=*/false);
  if (failed(p))
    return failure();
  n.setOutput(0, s->items[*p]);
  return success();
}

LogicalResult importSequenceConstruct(NodeImporter &n) {
  Sequence out;
  for (int i = 0; i < n.numInputs(); ++i) {
    if (!n.hasInput(i))
      return n.error() << "expected every input to be given, input " << i
                       << " is empty";
    Value v = n.input(i);
    if (failed(checkElementType(n, out, v)))
      return failure();
    out.elementType = typeOf(v).getElementType();
    out.items.push_back(v);
  }
  if (out.items.empty())
    return n.error() << "expected at least one tensor";
  n.setOutputSequence(0, std::move(out));
  return success();
}

LogicalResult importSequenceEmpty(NodeImporter &n) {
  int64_t dtype = n.attrInt("dtype", onnx::TensorProto::FLOAT);
  Type element = convertElementType(dtype, n.getContext());
  if (!element)
    return n.error() << "a sequence of " << onnxTypeName(dtype)
                     << " tensors, which dtcc does not support";
  n.setOutputSequence(0, Sequence{{}, element});
  return success();
}

LogicalResult importSequenceInsert(NodeImporter &n) {
  auto s = n.sequenceInput(0);
  if (failed(s))
    return failure();
  Value v = n.input(1);
  if (failed(checkElementType(n, *s, v)))
    return failure();
  int64_t at = s->items.size();
  if (n.hasInput(2)) {
    auto p = position(n, 2, s->items.size(), /*end=*/true);
    if (failed(p))
      return failure();
    at = *p;
  }
  Sequence out = *s;
  out.elementType = typeOf(v).getElementType();
  out.items.insert(out.items.begin() + at, v);
  n.setOutputSequence(0, std::move(out));
  return success();
}

LogicalResult importSequenceErase(NodeImporter &n) {
  auto s = n.sequenceInput(0);
  if (failed(s))
    return failure();
  if (s->items.empty())
    return n.error() << "cannot erase from an empty sequence";
  int64_t at = s->items.size() - 1;
  if (n.hasInput(1)) {
    auto p = position(n, 1, s->items.size(), /*end=*/false);
    if (failed(p))
      return failure();
    at = *p;
  }
  Sequence out = *s;
  out.items.erase(out.items.begin() + at);
  n.setOutputSequence(0, std::move(out));
  return success();
}

LogicalResult importSequenceLength(NodeImporter &n) {
  auto s = n.sequenceInput(0);
  if (failed(s))
    return failure();
  auto type = RankedTensorType::get({}, n.builder().getIntegerType(64));
  n.setOutput(0, n.constant(DenseElementsAttr::get(
                     type, ArrayRef<int64_t>{int64_t(s->items.size())})));
  return success();
}

LogicalResult importConcatFromSequence(NodeImporter &n) {
  auto s = n.sequenceInput(0);
  if (failed(s))
    return failure();
  if (!n.hasAttr("axis"))
    return n.error() << "expected attribute axis";
  if (s->items.empty())
    return n.error() << "cannot concatenate an empty sequence";
  int64_t axis = n.attrInt("axis", 0);
  SmallVector<Value> items = s->items;
  if (n.attrInt("new_axis", 0) != 0) {
    // Stacked: each tensor gains a dimension of 1 at the axis, which may
    // be one past the last (-rank - 1 .. rank).
    int64_t rank = typeOf(items[0]).getRank();
    auto at = n.normalizeAxis(axis, rank + 1);
    if (failed(at))
      return failure();
    for (Value &v : items) {
      SmallVector<int64_t> shape(typeOf(v).getShape());
      if ((int64_t)shape.size() != rank)
        return n.error() << "cannot stack " << typeOf(items[0]) << " and "
                         << typeOf(v);
      shape.insert(shape.begin() + *at, 1);
      v = n.reshape(v, shape);
    }
    axis = *at;
  }
  auto result = concatenate(n, items, axis);
  if (failed(result))
    return failure();
  n.setOutput(0, *result);
  return success();
}

} // namespace

bool takesSequence(llvm::StringRef opType, int index) {
  if (opType == "Loop")
    return index >= 2; // carried values
  return index == 0 &&
         llvm::is_contained({"SequenceAt", "SequenceInsert", "SequenceErase",
                             "SequenceLength", "ConcatFromSequence"},
                            opType);
}

void appendSequenceOps(std::vector<OpEntry> &ops) {
  // clang-format off
  ops.insert(ops.end(), {
      {"SplitToSequence", 11, importSplitToSequence},
      {"SequenceAt", 11, importSequenceAt},
      {"SequenceConstruct", 11, importSequenceConstruct},
      {"SequenceEmpty", 11, importSequenceEmpty},
      {"SequenceInsert", 11, importSequenceInsert},
      {"SequenceErase", 11, importSequenceErase},
      {"SequenceLength", 11, importSequenceLength},
      {"ConcatFromSequence", 11, importConcatFromSequence},
  });
  // clang-format on
}

} // namespace dtcc::onnx_frontend
