//===- NodeImporter.cpp - inputs, attributes and builders for handlers ----===//

#include "frontends/onnx/NodeImporter.h"

#include "frontends/onnx/GraphImporter.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "llvm/ADT/DenseSet.h"

#include <cstring>

using namespace mlir;

namespace dtcc::onnx_frontend {

/// numpy.matmul: 1-D operands are promoted and the added dimension removed;
/// batch dimensions broadcast, as dgraph.matmul's do (no copies).
FailureOr<Value> numpyMatmul(NodeImporter &n, Value a, Value b) {
  auto at = cast<RankedTensorType>(a.getType());
  auto bt = cast<RankedTensorType>(b.getType());
  if (at.getElementType() != bt.getElementType())
    return n.error() << "expected operands of one element type, got " << at
                     << " and " << bt;
  if (at.getRank() == 0 || bt.getRank() == 0)
    return n.error() << "expected operands of rank >= 1, got " << at << " and "
                     << bt;
  bool squeezeM = at.getRank() == 1, squeezeN = bt.getRank() == 1;
  if (squeezeM)
    a = n.reshape(a, {1, at.getDimSize(0)});
  if (squeezeN)
    b = n.reshape(b, {bt.getDimSize(0), 1});
  at = cast<RankedTensorType>(a.getType());
  bt = cast<RankedTensorType>(b.getType());
  int64_t k = at.getShape().back();
  if (bt.getDimSize(bt.getRank() - 2) != k)
    return n.error() << "expected contracted dimensions to agree, got " << at
                     << " and " << bt;
  if (!graph::broadcastBatchShape(at.getShape(), bt.getShape()))
    return n.error() << "expected batch dimensions that broadcast (aligned "
                        "from the right, equal or 1), got "
                     << at << " and " << bt;
  Value y = n.create<graph::MatmulOp>(a, b, false, false).getResult();
  SmallVector<int64_t> shape(cast<RankedTensorType>(y.getType()).getShape());
  if (squeezeN)
    shape.pop_back();
  if (squeezeM)
    shape.erase(shape.end() - (squeezeN ? 1 : 2));
  return n.reshape(y, shape);
}

Value NodeImporter::input(int i) {
  if (!hasInput(i))
    return {};
  return graph.lookup(node.input(i));
}

const ImportOptions &NodeImporter::getImportOptions() const {
  return graph.getOptions();
}

Value NodeImporter::stepCounter() { return graph.stepCounter(b); }

const std::string &NodeImporter::producerName() const {
  return graph.getModel().producer_name();
}

Value NodeImporter::floatConstant(RankedTensorType type,
                                  ArrayRef<double> values) {
  const llvm::fltSemantics &sem =
      mlir::cast<FloatType>(type.getElementType()).getFloatSemantics();
  SmallVector<APFloat> rounded;
  rounded.reserve(values.size());
  for (double v : values) {
    APFloat f(v);
    bool lost;
    f.convert(sem, APFloat::rmNearestTiesToEven, &lost);
    rounded.push_back(f);
  }
  return constant(DenseElementsAttr::get(type, rounded));
}

void NodeImporter::noteQuantized(Value q, QuantizedValue info) {
  graph.noteQuantized(q, std::move(info));
}

void NodeImporter::noteSelection(Value v, Selection s) {
  graph.noteSelection(v, std::move(s));
}

const QuantizedValue *NodeImporter::quantizedFrom(Value q) const {
  return graph.quantizedFrom(q);
}

void NodeImporter::setOutput(int i, Value value) {
  if (wantsOutput(i))
    graph.define(node.output(i), value);
}

FailureOr<Sequence> NodeImporter::sequenceInput(int i) {
  const Sequence *s =
      hasInput(i) ? graph.lookupSequence(node.input(i)) : nullptr;
  if (!s)
    return error() << "expected a sequence as input " << i << ", got "
                   << (hasInput(i) ? "the tensor '" + node.input(i) + "'"
                                   : std::string("none"));
  return *s;
}

void NodeImporter::setOutputSequence(int i, Sequence s) {
  if (wantsOutput(i))
    graph.defineSequence(node.output(i), std::move(s));
}

std::string NodeImporter::torchOp() const {
  // "%hardtanh : [...] =
  // call_function[target=torch.ops.aten.hardtanh.default](...)"
  std::string value = metadataValue(node, "pkg.torch.onnx.fx_node");
  constexpr llvm::StringLiteral kTarget = "target=torch.ops.aten.";
  llvm::StringRef rest(value);
  size_t at = rest.find(kTarget);
  if (at == llvm::StringRef::npos)
    return "";
  rest = rest.drop_front(at + kTarget.size());
  return rest.take_until([](char c) { return c == '.' || c == ']'; }).str();
}

SmallVector<std::string> NodeImporter::torchArgs() const {
  // "... call_function[target=...](args = (%x, %w, None, True, 0.1),
  // kwargs = {...})": the top-level entries between the parentheses.
  std::string value = metadataValue(node, "pkg.torch.onnx.fx_node");
  constexpr llvm::StringLiteral kArgs = "](args = (";
  llvm::StringRef rest(value);
  size_t at = rest.find(kArgs);
  if (at == llvm::StringRef::npos)
    return {};
  rest = rest.drop_front(at + kArgs.size());
  SmallVector<std::string> args;
  std::string current;
  int depth = 0;
  for (char c : rest) {
    if (depth == 0 && (c == ',' || c == ')')) {
      if (!llvm::StringRef(current).trim().empty())
        args.push_back(llvm::StringRef(current).trim().str());
      current.clear();
      if (c == ')')
        return args;
      continue;
    }
    depth +=
        (c == '(' || c == '[' || c == '{') - (c == ')' || c == ']' || c == '}');
    current += c;
  }
  return {}; // unterminated: not a call's arguments
}

InFlightDiagnostic NodeImporter::error() {
  errorEmitted = true;
  int index = -1;
  if (auto fileLoc = dyn_cast<FileLineColLoc>(cast<NameLoc>(loc).getChildLoc()))
    index = fileLoc.getLine() - 1;
  return emitError(loc) << "node '" << GraphImporter::nodeName(node, index)
                        << "' (" << node.op_type() << "): ";
}

LogicalResult NodeImporter::checkShape(ArrayRef<int64_t> shape, StringRef what) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return error() << "expected a non-negative " << what << ", got " << d;
    if (d != 0 && n > GraphImporter::kMaxElements / d)
      return error() << what << " asks for more than 2^48 elements";
    n *= d;
  }
  return success();
}

FailureOr<int64_t> NodeImporter::normalizeAxis(int64_t axis, int64_t rank,
                                               StringRef what) {
  if (rank < 1)
    return error() << "expected an input of rank >= 1 for " << what;
  if (axis < -rank || axis >= rank)
    return error() << "expected " << what << " in [" << -rank << ", " << rank
                   << "), got " << axis;
  return axis < 0 ? axis + rank : axis;
}

FailureOr<SmallVector<int64_t>>
NodeImporter::normalizeAxes(ArrayRef<int64_t> axes, int64_t rank) {
  SmallVector<int64_t> out;
  for (int64_t a : axes) {
    auto norm = normalizeAxis(a, rank, "axes entry");
    if (failed(norm))
      return failure();
    if (llvm::is_contained(out, *norm))
      return error() << "axes entry " << a << " repeats";
    out.push_back(*norm);
  }
  return out;
}

FailureOr<DenseElementsAttr> NodeImporter::constantInput(int i, StringRef what,
                                                         StringRef why) {
  Value v = input(i);
  if (!v)
    return error() << "expected " << what << " (input " << i << ")";
  if (auto value = graph.constantValueOf(v))
    return *value;
  const std::string &name = node.input(i);
  auto diag = error() << "expected " << what << " (input " << i << ", '"
                      << name << "') to be known at compile time";
  if (!why.empty())
    diag << " (" << why << ")";
  if (graph.isGraphInput(name)) {
    diag << "; it is a graph input: bind its value with --bind " << name
         << "=FILE.pb";
    return diag;
  }
  // Name the graph inputs it is computed from: binding them makes it known.
  SmallVector<std::string> sources;
  SmallVector<Value> work = {v};
  llvm::DenseSet<Value> seen;
  while (!work.empty()) {
    Value cur = work.pop_back_val();
    if (!seen.insert(cur).second)
      continue;
    if (auto arg = dyn_cast<BlockArgument>(cur)) {
      auto fn = cast<func::FuncOp>(arg.getOwner()->getParentOp());
      if (auto n = fn.getArgAttrOfType<StringAttr>(arg.getArgNumber(), dtcc::graph::kNameAttr))
        sources.push_back(n.str());
      continue;
    }
    for (Value operand : cur.getDefiningOp()->getOperands())
      work.push_back(operand);
  }
  llvm::sort(sources);
  for (const std::string &s : sources)
    diag << "; it depends on graph input '" << s
         << "': bind its value with --bind " << s << "=FILE.pb";
  return diag;
}

std::optional<DenseElementsAttr> NodeImporter::knownInput(int i) {
  Value v = input(i);
  if (!v)
    return std::nullopt;
  return graph.constantValueOf(v);
}

FailureOr<SmallVector<int64_t>> NodeImporter::constantInts(int i,
                                                           StringRef what) {
  auto value = constantInput(i, what);
  if (failed(value))
    return failure();
  if (!isa<IntegerType>(value->getElementType()))
    return error() << "expected integer " << what << ", got "
                   << value->getType();
  SmallVector<int64_t> out;
  for (const APInt &v : value->getValues<APInt>())
    out.push_back(v.getSExtValue());
  return out;
}

const onnx::AttributeProto *NodeImporter::attr(StringRef name) const {
  for (const onnx::AttributeProto &a : node.attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}

LogicalResult NodeImporter::requireAttrs(ArrayRef<StringRef> names) {
  for (StringRef name : names)
    if (!hasAttr(name))
      return error() << "expected attribute " << name << " (required)";
  return success();
}

int64_t NodeImporter::attrInt(StringRef name, int64_t fallback) const {
  const onnx::AttributeProto *a = attr(name);
  return a ? a->i() : fallback;
}

float NodeImporter::attrFloat(StringRef name, float fallback) const {
  const onnx::AttributeProto *a = attr(name);
  return a ? a->f() : fallback;
}

std::string NodeImporter::attrString(StringRef name, StringRef fallback) const {
  const onnx::AttributeProto *a = attr(name);
  return a ? a->s() : fallback.str();
}

std::optional<SmallVector<int64_t>> NodeImporter::attrInts(StringRef name) const {
  const onnx::AttributeProto *a = attr(name);
  if (!a)
    return std::nullopt;
  return SmallVector<int64_t>(a->ints().begin(), a->ints().end());
}

Value detached(NodeImporter &n, Value v) {
  if (!v || !n.getImportOptions().training ||
      !isa<FloatType>(cast<RankedTensorType>(v.getType()).getElementType()))
    return v;
  return n.create<graph::StopGradientOp>(v).getResult();
}

std::string formatList(ArrayRef<int64_t> v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

FailureOr<SmallVector<int64_t>> listAttr(NodeImporter &n, StringRef name,
                                         size_t count, int64_t fallback,
                                         int64_t least, StringRef each) {
  auto v = n.attrInts(name);
  if (!v)
    return SmallVector<int64_t>(count, fallback);
  if (v->size() != count) {
    auto d = n.error() << "expected " << name << " of " << count << " entries";
    if (!each.empty())
      d << " (" << each << ")";
    return d << ", got " << formatList(*v);
  }
  for (int64_t e : *v)
    if (e < least)
      return n.error() << "expected " << name << " >= " << least << ", got "
                       << formatList(*v);
  return *v;
}

FailureOr<DenseElementsAttr> NodeImporter::attrTensor(StringRef name) {
  FailureOr<ElementsAttr> value = attrElements(name);
  if (failed(value))
    return failure();
  if (auto dense = dyn_cast<DenseElementsAttr>(*value))
    return dense;
  // Large tensors of distinct elements stay resources; the attribute's
  // users want dense values.
  return error() << "tensor attribute '" << name << "' is too large ("
                 << cast<ShapedType>(value->getType()) << ")";
}

FailureOr<ElementsAttr> NodeImporter::attrElements(StringRef name) {
  const onnx::AttributeProto *a = attr(name);
  if (!a || !a->has_t())
    return error() << "expected tensor attribute '" << name << "'";
  auto value = graph.tensorToAttr(a->t(), loc);
  if (failed(value))
    return failure();
  auto resource = dyn_cast<DenseResourceElementsAttr>(*value);
  if (!resource)
    return *value;
  // A large constant whose elements are all equal (torch.zeros_like,
  // full_like at export) becomes a splat: one element stored, and it folds.
  AsmResourceBlob *blob = resource.getRawHandle().getBlob();
  auto type = cast<ShapedType>(resource.getType());
  if (!blob || type.getNumElements() == 0)
    return *value;
  ArrayRef<char> data = blob->getData();
  size_t width = data.size() / type.getNumElements();
  if (width == 0 || data.size() % width != 0)
    return *value;
  for (size_t i = width; i < data.size(); i += width)
    if (std::memcmp(data.data(), data.data() + i, width) != 0)
      return *value;
  auto one = RankedTensorType::get({}, type.getElementType());
  auto first = DenseElementsAttr::getFromRawBuffer(one, data.take_front(width));
  return cast<ElementsAttr>(
      DenseElementsAttr::get(type, first.getValues<Attribute>()[0]));
}

//===----------------------------------------------------------------------===//
// Builders
//===----------------------------------------------------------------------===//

static Attribute scalarAttr(Type elementType, double value) {
  if (auto f = dyn_cast<FloatType>(elementType))
    return FloatAttr::get(f, value);
  if (elementType.isInteger(1))
    return IntegerAttr::get(elementType, APInt(1, value != 0));
  auto i = cast<IntegerType>(elementType);
  return IntegerAttr::get(
      elementType, APInt(i.getWidth(), static_cast<int64_t>(value), !i.isUnsigned()));
}

Value NodeImporter::splat(RankedTensorType type, double value) {
  return constant(DenseElementsAttr::get(type, scalarAttr(type.getElementType(), value)));
}

Value NodeImporter::scalar(Type elementType, double value) {
  return splat(RankedTensorType::get({}, elementType), value);
}

Value NodeImporter::constant(DenseElementsAttr value) {
  return create<graph::ConstantOp>(cast<ElementsAttr>(value));
}

Value NodeImporter::constant(ElementsAttr value) {
  return create<graph::ConstantOp>(value);
}

Value NodeImporter::reshape(Value v, ArrayRef<int64_t> shape) {
  auto type = cast<RankedTensorType>(v.getType());
  if (type.getShape() == shape)
    return v;
  return fold<graph::ReshapeOp>(RankedTensorType::get(shape, type.getElementType()), v);
}

Value NodeImporter::transpose(Value v, ArrayRef<int64_t> perm) {
  return fold<graph::TransposeOp>(v, perm);
}

Value NodeImporter::castTo(Value v, Type elementType) {
  auto type = mlir::cast<RankedTensorType>(v.getType());
  if (type.getElementType() == elementType)
    return v;
  return fold<graph::CastOp>(RankedTensorType::get(type.getShape(), elementType), v);
}

bool NodeImporter::isBroadcastable(ArrayRef<int64_t> from,
                                   ArrayRef<int64_t> to) {
  if (from.size() > to.size())
    return false;
  size_t offset = to.size() - from.size();
  for (size_t d = 0; d < from.size(); ++d)
    if (from[d] != 1 && from[d] != to[offset + d])
      return false;
  return true;
}

Value NodeImporter::broadcastTo(Value v, ArrayRef<int64_t> shape) {
  auto type = mlir::cast<RankedTensorType>(v.getType());
  if (type.getShape() == shape)
    return v;
  if (!isBroadcastable(type.getShape(), shape)) {
    auto diag = error() << "cannot broadcast " << v.getType() << " to [";
    llvm::interleave(shape, [&](int64_t x) { diag << x; }, [&] { diag << ","; });
    diag << "]";
    return splat(RankedTensorType::get(shape, type.getElementType()), 0);
  }
  int64_t offset = (int64_t)shape.size() - type.getRank();
  SmallVector<int64_t> dims;
  for (int64_t i = 0; i < type.getRank(); ++i)
    dims.push_back(offset + i);
  return fold<graph::BroadcastInDimOp>(
      RankedTensorType::get(shape, type.getElementType()), v, dims);
}

FailureOr<SmallVector<int64_t>>
NodeImporter::broadcastShape(ArrayRef<ArrayRef<int64_t>> shapes) {
  size_t rank = 0;
  for (ArrayRef<int64_t> s : shapes)
    rank = std::max(rank, s.size());
  SmallVector<int64_t> out(rank, 1);
  for (ArrayRef<int64_t> s : shapes) {
    size_t offset = rank - s.size();
    for (size_t d = 0; d < s.size(); ++d) {
      int64_t &o = out[offset + d];
      if (s[d] == o || s[d] == 1)
        continue;
      if (o != 1) {
        auto diag = error() << "cannot broadcast shapes";
        for (ArrayRef<int64_t> t : shapes) {
          diag << " [";
          llvm::interleave(t, [&](int64_t x) { diag << x; }, [&] { diag << ","; });
          diag << "]";
        }
        return diag;
      }
      o = s[d];
    }
  }
  return out;
}

FailureOr<SmallVector<Value>> NodeImporter::broadcastAll(ArrayRef<Value> values) {
  SmallVector<ArrayRef<int64_t>> shapes;
  for (Value v : values)
    shapes.push_back(mlir::cast<RankedTensorType>(v.getType()).getShape());
  auto shape = broadcastShape(shapes);
  if (failed(shape))
    return failure();
  SmallVector<Value> out;
  for (Value v : values)
    out.push_back(broadcastTo(v, *shape));
  return out;
}

LogicalResult requireFloat(NodeImporter &n, Value v, StringRef what) {
  if (isa<FloatType>(getElementTypeOrSelf(v.getType())))
    return success();
  return n.error() << "expected a floating-point " << what << ", got "
                   << v.getType();
}

} // namespace dtcc::onnx_frontend
