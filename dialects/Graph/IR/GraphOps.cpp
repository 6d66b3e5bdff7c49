//===- GraphOps.cpp - dgraph dialect, verifiers and type inference ---------===//

#include "dialects/Graph/IR/GraphOps.h"
#include "runtime/base/OpFlops.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace dtcc::graph;

#include "dialects/Graph/IR/GraphOpsDialect.cpp.inc"
#include "dialects/Graph/IR/GraphInterfaces.cpp.inc"
#define GET_ATTRDEF_CLASSES
#include "dialects/Graph/IR/GraphAttrs.cpp.inc"

void GraphDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/Graph/IR/GraphAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "dialects/Graph/IR/GraphOps.cpp.inc"
      >();
}

LogicalResult GraphDialect::verifyOperationAttribute(Operation *op,
                                                    NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  Attribute value = attr.getValue();
  if (name == kModelAttr || name == kRecomputedAttr ||
      name == kFusedAttentionAttr) {
    if (!isa<ModuleOp>(op) || !isa<StringAttr>(value))
      return op->emitOpError("expected '")
             << name << "' to be a string on the module, got " << value;
    return success();
  }
  if (name == kDataInputsAttr || name == kVocabSizeAttr ||
      name == kUntrainedAttr || name == kConstantInitializersAttr ||
      name == kOptimizerAttr || name == kDtypeAttr) {
    if (!isa<ModuleOp>(op))
      return op->emitOpError("'") << name << "' belongs on the module";
    if (name == kDataInputsAttr || name == kUntrainedAttr ||
        name == kConstantInitializersAttr) {
      auto names = dyn_cast<ArrayAttr>(value);
      if (!names || !llvm::all_of(names, [](Attribute a) {
            return isa<StringAttr>(a);
          }))
        return op->emitOpError("expected '")
               << name << "' to be an array of "
               << (name == kDataInputsAttr    ? "input"
                   : name == kUntrainedAttr ? "variable"
                                            : "initializer")
               << " names, got " << value;
      return success();
    }
    if (name == kVocabSizeAttr) {
      auto size = dyn_cast<IntegerAttr>(value);
      if (!size || size.getInt() < 1)
        return op->emitOpError("expected '")
               << name << "' to be a positive integer, got " << value;
      return success();
    }
    auto text = dyn_cast<StringAttr>(value);
    bool known = text && (name == kOptimizerAttr
                              ? (text == "adamw" || text == "sgd")
                              : (text == "bf16" || text == "fp16"));
    if (!known)
      return op->emitOpError("expected '")
             << name << "' to be "
             << (name == kOptimizerAttr ? "\"adamw\" or \"sgd\""
                                        : "\"bf16\" or \"fp16\"")
             << ", got " << value;
    return success();
  }
  if (name == kGradSeedAttr || name == kRecomputeAttr)
    return isa<UnitAttr>(value)
               ? success()
               : op->emitOpError("expected '")
                     << name << "' to be a unit attribute, got " << value;
  if (name == kLayerAttr) {
    if (isa<ModuleOp>(op))
      return op->emitOpError("'")
             << name << "' belongs on the ops of a function, not on the module";
    return isa<LayerAttr>(value)
               ? success()
               : op->emitOpError("expected '")
                     << name << "' to be a #dgraph.layer, got " << value;
  }
  if (name == kRoundedFromAttr) {
    auto var = dyn_cast<VariableOp>(op);
    if (!var || !isa<FlatSymbolRefAttr>(value))
      return op->emitOpError("expected '")
             << name << "' to be a symbol reference on a dgraph.variable, got "
             << value;
    if (!isa<FloatType>(var.getTensorType().getElementType()) ||
        var.getTensorType().getElementType().getIntOrFloatBitWidth() != 16)
      return op->emitOpError("'") << name << "' makes a bf16 or f16 copy, "
                                  << "but the variable is "
                                  << var.getTensorType();
    return success();
  }
  if (name == kNameAttr || name == kGradOfAttr)
    return op->emitOpError("'")
           << name << "' belongs on function arguments or results";
  return op->emitOpError("unknown dgraph attribute '")
         << name << "' (dialects/Graph/IR/GraphOps.h lists them)";
}

LogicalResult GraphDialect::verifyRegionArgAttribute(Operation *op, unsigned,
                                                     unsigned argIndex,
                                                     NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == kNameAttr)
    return isa<StringAttr>(attr.getValue())
               ? success()
               : op->emitOpError("expected '")
                     << name << "' of argument " << argIndex
                     << " to be a string, got " << attr.getValue();
  return op->emitOpError("unknown dgraph argument attribute '")
         << name << "' (dialects/Graph/IR/GraphOps.h lists them)";
}

LogicalResult GraphDialect::verifyRegionResultAttribute(Operation *op,
                                                        unsigned,
                                                        unsigned resultIndex,
                                                        NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == kNameAttr)
    return isa<StringAttr>(attr.getValue())
               ? success()
               : op->emitOpError("expected '")
                     << name << "' of result " << resultIndex
                     << " to be a string, got " << attr.getValue();
  if (name == kGradOfAttr)
    return isa<FlatSymbolRefAttr>(attr.getValue())
               ? success()
               : op->emitOpError("expected '")
                     << name << "' of result " << resultIndex
                     << " to name a variable (@symbol), got "
                     << attr.getValue();
  return op->emitOpError("unknown dgraph result attribute '")
         << name << "' (dialects/Graph/IR/GraphOps.h lists them)";
}

Operation *GraphDialect::materializeConstant(OpBuilder &builder,
                                             Attribute value, Type type,
                                             Location loc) {
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return ConstantOp::create(builder, loc, elements);
}

Type dtcc::graph::getI1TensorLike(Type type) {
  auto tensor = cast<RankedTensorType>(type);
  return RankedTensorType::get(tensor.getShape(),
                               IntegerType::get(type.getContext(), 1));
}

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

namespace {
/// Formats a shape as `2x3x4` for diagnostics.
std::string formatShape(ArrayRef<int64_t> shape) {
  std::string s;
  llvm::raw_string_ostream os(s);
  llvm::interleave(shape, os, "x");
  if (shape.empty())
    os << "scalar";
  return s;
}

/// Checks that `dims` holds distinct dimensions in [0, rank).
LogicalResult verifyDimList(std::optional<Location> loc, ArrayRef<int64_t> dims,
                            int64_t rank, StringRef what) {
  llvm::SmallSet<int64_t, 8> seen;
  for (int64_t d : dims) {
    if (d < 0 || d >= rank)
      return emitOptionalError(loc, "expected ", what, " in [0, ", rank,
                               "), got ", d);
    if (!seen.insert(d).second)
      return emitOptionalError(loc, "expected distinct ", what, ", got ", d,
                               " twice");
  }
  return success();
}

LogicalResult verifyDim(std::optional<Location> loc, int64_t dim, int64_t rank,
                        StringRef what = "dim") {
  if (dim < 0 || dim >= rank)
    return emitOptionalError(loc, "expected ", what, " in [0, ", rank,
                             "), got ", dim);
  return success();
}

RankedTensorType tensorOf(ArrayRef<int64_t> shape, Type elementType) {
  return RankedTensorType::get(shape, elementType);
}
} // namespace

//===----------------------------------------------------------------------===//
// VariableOp, LoadOp, StoreOp
//===----------------------------------------------------------------------===//

ParseResult VariableOp::parse(OpAsmParser &parser, OperationState &result) {
  StringAttr name;
  Type type;
  if (parser.parseSymbolName(name) || parser.parseColonType(type))
    return failure();
  result.getOrAddProperties<Properties>().sym_name = name;
  result.getOrAddProperties<Properties>().type = TypeAttr::get(type);
  if (succeeded(parser.parseOptionalEqual())) {
    // A split variable's global initial value: `= (tensor<...>) dense<...>`.
    Type initType = type;
    if (succeeded(parser.parseOptionalLParen()) &&
        (parser.parseType(initType) || parser.parseRParen()))
      return failure();
    Attribute value;
    if (parser.parseAttribute(value, initType))
      return failure();
    auto elements = dyn_cast<ElementsAttr>(value);
    if (!elements)
      return parser.emitError(parser.getCurrentLocation(),
                              "expected an elements attribute");
    result.getOrAddProperties<Properties>().initial_value = elements;
  }
  if (parser.parseOptionalAttrDict(result.attributes))
    return failure();
  // `trainable` is an inherent attribute: move it into the properties.
  if (result.attributes.get("trainable")) {
    result.attributes.erase("trainable");
    result.getOrAddProperties<Properties>().trainable =
        UnitAttr::get(parser.getContext());
  }
  return success();
}

void VariableOp::print(OpAsmPrinter &p) {
  p << ' ';
  p.printSymbolName(getSymName());
  p << " : " << getType();
  if (auto init = getInitialValueAttr()) {
    p << " = ";
    if (init.getType() != getType())
      p << "(" << init.getType() << ") ";
    p.printAttributeWithoutType(init);
  }
  SmallVector<StringRef> elided = {"sym_name", "type", "initial_value"};
  NamedAttrList attrs((*this)->getAttrDictionary());
  p.printOptionalAttrDict(attrs.getAttrs(), elided);
}

LogicalResult VariableOp::verify() {
  if (auto init = getInitialValueAttr()) {
    // A variable split over a mesh (dshard.sharding) has its local type and
    // keeps the global initial value; each rank takes its block of it.
    auto initType = cast<RankedTensorType>(init.getType());
    bool sharded = (*this)->hasAttr("dshard.sharding") &&
                   initType.getElementType() == getTensorType().getElementType() &&
                   initType.getRank() == getTensorType().getRank();
    if (init.getType() != getType() && !sharded)
      return emitOpError("expected initial value of type ") << getType()
             << ", got " << init.getType();
  }
  return success();
}

/// Finds the variable `name` in the module around `op`, checking its type.
static LogicalResult verifyVariableUse(Operation *op, FlatSymbolRefAttr name,
                                       Type type,
                                       SymbolTableCollection &symbols) {
  auto variable =
      symbols.lookupNearestSymbolFrom<VariableOp>(op, name.getAttr());
  if (!variable)
    return op->emitOpError("expected '") << name.getValue()
           << "' to name a dgraph.variable";
  if (variable.getType() != type)
    return op->emitOpError("expected type ")
           << variable.getType() << " of variable '" << name.getValue()
           << "', got " << type;
  return success();
}

LogicalResult LoadOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return verifyVariableUse(*this, getVariableAttr(), getType(), symbols);
}

LogicalResult StoreOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return verifyVariableUse(*this, getVariableAttr(), getValue().getType(),
                           symbols);
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

LogicalResult GeluOp::verify() {
  if (getApproximate() != "none" && getApproximate() != "tanh")
    return emitOpError("expected approximate \"none\" or \"tanh\", got \"")
           << getApproximate() << "\"";
  return success();
}

LogicalResult CastOp::verify() {
  auto in = cast<RankedTensorType>(getOperand().getType());
  auto out = cast<RankedTensorType>(getType());
  if (in.getShape() != out.getShape())
    return emitOpError("expected result shape ")
           << formatShape(in.getShape()) << ", got "
           << formatShape(out.getShape());
  return success();
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

LogicalResult IotaOp::verify() {
  return verifyDim(getLoc(), getDim(), getType().getRank());
}

LogicalResult BroadcastInDimOp::verify() {
  auto in = cast<RankedTensorType>(getOperand().getType());
  auto out = cast<RankedTensorType>(getType());
  if (in.getElementType() != out.getElementType())
    return emitOpError("expected result element type ")
           << in.getElementType() << ", got " << out.getElementType();
  ArrayRef<int64_t> dims = getDims();
  if ((int64_t)dims.size() != in.getRank())
    return emitOpError("expected ") << in.getRank()
           << " broadcast dims (one per operand dimension), got "
           << dims.size();
  for (auto [i, d] : llvm::enumerate(dims)) {
    if (d < 0 || d >= out.getRank())
      return emitOpError("expected broadcast dim in [0, ")
             << out.getRank() << "), got " << d;
    if (i > 0 && d <= dims[i - 1])
      return emitOpError("expected strictly increasing broadcast dims, got ")
             << d << " after " << dims[i - 1];
    int64_t size = in.getDimSize(i);
    if (size != 1 && size != out.getDimSize(d))
      return emitOpError("expected operand dim ")
             << i << " to be 1 or " << out.getDimSize(d) << ", got " << size;
  }
  return success();
}

LogicalResult ReshapeOp::verify() {
  auto in = cast<RankedTensorType>(getOperand().getType());
  auto out = cast<RankedTensorType>(getType());
  if (in.getElementType() != out.getElementType())
    return emitOpError("expected result element type ")
           << in.getElementType() << ", got " << out.getElementType();
  if (in.getNumElements() != out.getNumElements())
    return emitOpError("expected ")
           << in.getNumElements() << " elements in the result, got "
           << out.getNumElements() << " (" << formatShape(out.getShape())
           << ")";
  return success();
}

LogicalResult TransposeOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr, OpaqueProperties properties, RegionRange,
    SmallVectorImpl<Type> &inferred) {
  Adaptor adaptor(operands, nullptr, properties);
  auto in = cast<RankedTensorType>(adaptor.getOperand().getType());
  ArrayRef<int64_t> perm = adaptor.getPerm();
  if ((int64_t)perm.size() != in.getRank())
    return emitOptionalError(loc, "expected perm of size ", in.getRank(),
                             ", got ", perm.size());
  if (failed(verifyDimList(loc, perm, in.getRank(), "perm entries")))
    return failure();
  SmallVector<int64_t> shape;
  for (int64_t p : perm)
    shape.push_back(in.getDimSize(p));
  inferred.push_back(tensorOf(shape, in.getElementType()));
  return success();
}

LogicalResult SliceOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr, OpaqueProperties properties, RegionRange,
    SmallVectorImpl<Type> &inferred) {
  Adaptor adaptor(operands, nullptr, properties);
  auto in = cast<RankedTensorType>(adaptor.getOperand().getType());
  ArrayRef<int64_t> start = adaptor.getStart(), limit = adaptor.getLimit(),
                    stride = adaptor.getStride();
  int64_t rank = in.getRank();
  if ((int64_t)start.size() != rank || (int64_t)limit.size() != rank ||
      (int64_t)stride.size() != rank)
    return emitOptionalError(loc, "expected start, limit and stride of size ",
                             rank);
  SmallVector<int64_t> shape;
  for (int64_t d = 0; d < rank; ++d) {
    if (stride[d] < 1)
      return emitOptionalError(loc, "expected stride >= 1 in dim ", d,
                               ", got ", stride[d]);
    if (start[d] < 0 || start[d] > limit[d] || limit[d] > in.getDimSize(d))
      return emitOptionalError(loc, "expected 0 <= start <= limit <= ",
                               in.getDimSize(d), " in dim ", d, ", got ",
                               start[d], ":", limit[d]);
    shape.push_back(llvm::divideCeil(limit[d] - start[d], stride[d]));
  }
  inferred.push_back(tensorOf(shape, in.getElementType()));
  return success();
}

LogicalResult ReverseOp::verify() {
  return verifyDimList(getLoc(), getDims(), getType().getRank(), "dims");
}

LogicalResult ConcatOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr, OpaqueProperties properties, RegionRange,
    SmallVectorImpl<Type> &inferred) {
  Adaptor adaptor(operands, nullptr, properties);
  if (operands.empty())
    return emitOptionalError(loc, "expected at least one operand");
  auto first = cast<RankedTensorType>(operands[0].getType());
  int64_t dim = adaptor.getDim();
  if (failed(verifyDim(loc, dim, first.getRank())))
    return failure();
  SmallVector<int64_t> shape(first.getShape());
  for (auto [i, v] : llvm::enumerate(operands.drop_front())) {
    auto t = cast<RankedTensorType>(v.getType());
    if (t.getElementType() != first.getElementType() ||
        t.getRank() != first.getRank())
      return emitOptionalError(loc, "expected operand ", i + 1, " of rank ",
                               first.getRank(), " and element type ",
                               first.getElementType(), ", got ", t);
    for (int64_t d = 0; d < t.getRank(); ++d) {
      if (d == dim)
        continue;
      if (t.getDimSize(d) != first.getDimSize(d))
        return emitOptionalError(loc, "expected operand ", i + 1, " dim ", d,
                                 " to be ", first.getDimSize(d), ", got ",
                                 t.getDimSize(d));
    }
    shape[dim] += t.getDimSize(dim);
  }
  inferred.push_back(tensorOf(shape, first.getElementType()));
  return success();
}

LogicalResult PadOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr, OpaqueProperties properties, RegionRange,
    SmallVectorImpl<Type> &inferred) {
  Adaptor adaptor(operands, nullptr, properties);
  auto in = cast<RankedTensorType>(adaptor.getOperand().getType());
  auto value = cast<RankedTensorType>(adaptor.getValue().getType());
  if (value.getRank() != 0 || value.getElementType() != in.getElementType())
    return emitOptionalError(loc, "expected a rank-0 pad value of type ",
                             in.getElementType(), ", got ", value);
  ArrayRef<int64_t> low = adaptor.getLow(), high = adaptor.getHigh();
  if ((int64_t)low.size() != in.getRank() ||
      (int64_t)high.size() != in.getRank())
    return emitOptionalError(loc, "expected low and high of size ",
                             in.getRank());
  SmallVector<int64_t> shape;
  for (int64_t d = 0; d < in.getRank(); ++d) {
    int64_t size = low[d] + in.getDimSize(d) + high[d];
    if (size < 0)
      return emitOptionalError(loc, "expected a non-negative size in dim ", d,
                               ", got ", size);
    shape.push_back(size);
  }
  inferred.push_back(tensorOf(shape, in.getElementType()));
  return success();
}

LogicalResult PadOp::verify() {
  StringRef mode = getMode();
  if (mode != "constant" && mode != "edge" && mode != "reflect" &&
      mode != "wrap")
    return emitOpError("expected mode \"constant\", \"edge\", \"reflect\" "
                       "or \"wrap\", got \"")
           << mode << "\"";
  if (mode == "constant")
    return success();
  auto in = cast<RankedTensorType>(getOperand().getType());
  for (int64_t d = 0; d < in.getRank(); ++d)
    if (in.getDimSize(d) == 0 && (getLow()[d] > 0 || getHigh()[d] > 0))
      return emitOpError("cannot pad empty dimension ")
             << d << " in mode \"" << mode << "\"";
  return success();
}

LogicalResult GatherOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr, OpaqueProperties properties, RegionRange,
    SmallVectorImpl<Type> &inferred) {
  Adaptor adaptor(operands, nullptr, properties);
  auto data = cast<RankedTensorType>(adaptor.getOperand().getType());
  auto indices = cast<RankedTensorType>(adaptor.getIndices().getType());
  int64_t axis = adaptor.getAxis();
  if (failed(verifyDim(loc, axis, data.getRank(), "axis")))
    return failure();
  SmallVector<int64_t> shape(data.getShape().take_front(axis));
  llvm::append_range(shape, indices.getShape());
  llvm::append_range(shape, data.getShape().drop_front(axis + 1));
  inferred.push_back(tensorOf(shape, data.getElementType()));
  return success();
}

LogicalResult GatherElementsOp::verify() {
  auto data = cast<RankedTensorType>(getOperand().getType());
  auto indices = cast<RankedTensorType>(getIndices().getType());
  if (data.getRank() != indices.getRank())
    return emitOpError("expected indices of rank ")
           << data.getRank() << ", got " << indices.getRank();
  return verifyDim(getLoc(), getAxis(), data.getRank(), "axis");
}

LogicalResult ScatterAddOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr, OpaqueProperties properties, RegionRange,
    SmallVectorImpl<Type> &inferred) {
  Adaptor adaptor(operands, nullptr, properties);
  auto updates = cast<RankedTensorType>(adaptor.getUpdates().getType());
  auto indices = cast<RankedTensorType>(adaptor.getIndices().getType());
  int64_t axis = adaptor.getAxis();
  int64_t trailing = updates.getRank() - axis - indices.getRank();
  if (axis < 0 || trailing < 0)
    return emitOptionalError(loc, "expected axis in [0, ",
                             updates.getRank() - indices.getRank() + 1,
                             "), got ", axis);
  for (int64_t i = 0; i < indices.getRank(); ++i)
    if (updates.getDimSize(axis + i) != indices.getDimSize(i))
      return emitOptionalError(loc, "expected updates dim ", axis + i, " to be ",
                               indices.getDimSize(i), ", got ",
                               updates.getDimSize(axis + i));
  if (adaptor.getDimSize() < 1)
    return emitOptionalError(loc, "expected dim_size >= 1, got ",
                             adaptor.getDimSize());
  SmallVector<int64_t> shape(updates.getShape().take_front(axis));
  shape.push_back(adaptor.getDimSize());
  llvm::append_range(shape, updates.getShape().take_back(trailing));
  inferred.push_back(tensorOf(shape, updates.getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

/// Shape of `type` with `dims` removed, after checking them.
static LogicalResult inferReduced(std::optional<Location> loc, Type type,
                                  ArrayRef<int64_t> dims, Type elementType,
                                  SmallVectorImpl<Type> &inferred) {
  auto in = cast<RankedTensorType>(type);
  if (failed(verifyDimList(loc, dims, in.getRank(), "reduction dims")))
    return failure();
  SmallVector<int64_t> shape;
  for (int64_t d = 0; d < in.getRank(); ++d)
    if (!llvm::is_contained(dims, d))
      shape.push_back(in.getDimSize(d));
  inferred.push_back(
      tensorOf(shape, elementType ? elementType : in.getElementType()));
  return success();
}

#define DTCC_REDUCE_INFER(OP)                                                  \
  LogicalResult OP::inferReturnTypes(                                          \
      MLIRContext *, std::optional<Location> loc, ValueRange operands,         \
      DictionaryAttr, OpaqueProperties properties, RegionRange,                \
      SmallVectorImpl<Type> &inferred) {                                       \
    Adaptor adaptor(operands, nullptr, properties);                            \
    return inferReduced(loc, adaptor.getOperand().getType(),                   \
                        adaptor.getDims(), Type(), inferred);                  \
  }
DTCC_REDUCE_INFER(ReduceSumOp)
DTCC_REDUCE_INFER(ReduceMaxOp)
DTCC_REDUCE_INFER(ReduceMinOp)
DTCC_REDUCE_INFER(ReduceProdOp)
#undef DTCC_REDUCE_INFER

#define DTCC_ARG_REDUCE_INFER(OP)                                              \
  LogicalResult OP::inferReturnTypes(                                          \
      MLIRContext *context, std::optional<Location> loc, ValueRange operands,  \
      DictionaryAttr, OpaqueProperties properties, RegionRange,                \
      SmallVectorImpl<Type> &inferred) {                                       \
    Adaptor adaptor(operands, nullptr, properties);                            \
    int64_t dim = adaptor.getDim();                                            \
    return inferReduced(loc, adaptor.getOperand().getType(), {dim},            \
                        IntegerType::get(context, 64), inferred);              \
  }
DTCC_ARG_REDUCE_INFER(ArgMaxOp)
DTCC_ARG_REDUCE_INFER(ArgMinOp)
#undef DTCC_ARG_REDUCE_INFER

LogicalResult CumSumOp::verify() {
  return verifyDim(getLoc(), getDim(), getType().getRank());
}

//===----------------------------------------------------------------------===//
// Linear algebra and neural-network ops
//===----------------------------------------------------------------------===//

std::optional<SmallVector<int64_t>>
dtcc::graph::broadcastBatchShape(ArrayRef<int64_t> lhs, ArrayRef<int64_t> rhs) {
  ArrayRef<int64_t> lb = lhs.drop_back(std::min<size_t>(2, lhs.size()));
  ArrayRef<int64_t> rb = rhs.drop_back(std::min<size_t>(2, rhs.size()));
  size_t rank = std::max(lb.size(), rb.size());
  SmallVector<int64_t> shape(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    // Dimension i of the result, aligned from the right.
    int64_t l = i + lb.size() >= rank ? lb[i + lb.size() - rank] : 1;
    int64_t r = i + rb.size() >= rank ? rb[i + rb.size() - rank] : 1;
    if (l != r && l != 1 && r != 1)
      return std::nullopt;
    shape[i] = l == 1 ? r : l;
  }
  return shape;
}

double MatmulOp::getFlops(ArrayRef<SmallVector<int64_t>> operands,
                          ArrayRef<SmallVector<int64_t>> results) {
  return dtcc::runtime::matmulFlops(
      std::vector<int64_t>(operands[0].begin(), operands[0].end()),
      std::vector<int64_t>(operands[1].begin(), operands[1].end()),
      getTransposeLhs(), getTransposeRhs());
}

double dtcc::graph::flopsOf(Operation *op) {
  auto cost = dyn_cast<CostOpInterface>(op);
  if (!cost)
    return 0;
  auto shapes = [](ValueRange values) {
    SmallVector<SmallVector<int64_t>> out;
    for (Value v : values) {
      auto t = dyn_cast<RankedTensorType>(v.getType());
      out.emplace_back(t ? t.getShape() : ArrayRef<int64_t>());
    }
    return out;
  };
  return cost.getFlops(shapes(op->getOperands()), shapes(op->getResults()));
}

LogicalResult MatmulOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr, OpaqueProperties properties, RegionRange,
    SmallVectorImpl<Type> &inferred) {
  Adaptor adaptor(operands, nullptr, properties);
  auto lhs = dyn_cast<RankedTensorType>(adaptor.getLhs().getType());
  auto rhs = dyn_cast<RankedTensorType>(adaptor.getRhs().getType());
  if (!lhs || !rhs)
    return emitOptionalError(loc, "expected ranked tensor operands, got ",
                             adaptor.getLhs().getType(), " and ",
                             adaptor.getRhs().getType());
  if (lhs.getRank() < 2 || rhs.getRank() < 2)
    return emitOptionalError(loc, "expected operands of rank >= 2, got ",
                             lhs.getRank(), " and ", rhs.getRank());
  if (lhs.getElementType() != rhs.getElementType())
    return emitOptionalError(loc, "expected operands of one element type, got ",
                             lhs.getElementType(), " and ",
                             rhs.getElementType());
  ArrayRef<int64_t> ls = lhs.getShape(), rs = rhs.getShape();
  int64_t lr = ls.size(), rr = rs.size();
  auto batch = broadcastBatchShape(ls, rs);
  if (!batch)
    return emitOptionalError(
        loc, "expected batch dimensions that broadcast (aligned from the "
             "right, equal or 1), got ",
        formatShape(ls.drop_back(2)), " and ", formatShape(rs.drop_back(2)));
  bool tl = adaptor.getTransposeLhs(), tr = adaptor.getTransposeRhs();
  int64_t m = tl ? ls[lr - 1] : ls[lr - 2];
  int64_t kl = tl ? ls[lr - 2] : ls[lr - 1];
  int64_t kr = tr ? rs[rr - 1] : rs[rr - 2];
  int64_t n = tr ? rs[rr - 2] : rs[rr - 1];
  if (kl != kr)
    return emitOptionalError(loc, "expected contracted dimensions to agree, "
                                  "got ", kl, " and ", kr);
  SmallVector<int64_t> shape(*batch);
  shape.push_back(m);
  shape.push_back(n);
  inferred.push_back(tensorOf(shape, lhs.getElementType()));
  return success();
}

LogicalResult SoftmaxOp::verify() {
  return verifyDim(getLoc(), getDim(), getType().getRank());
}

LogicalResult LogSoftmaxOp::verify() {
  return verifyDim(getLoc(), getDim(), getType().getRank());
}

/// Shared by layer_norm and rms_norm: checks `axis` and the parameter shapes,
/// and infers y (x's type) followed by `numStats` statistics of shape x[:axis].
static LogicalResult inferNorm(std::optional<Location> loc, Value x,
                               ArrayRef<Value> params, int64_t axis,
                               unsigned numStats,
                               SmallVectorImpl<Type> &inferred) {
  auto in = cast<RankedTensorType>(x.getType());
  if (failed(verifyDim(loc, axis, in.getRank(), "axis")))
    return failure();
  ArrayRef<int64_t> normalized = in.getShape().drop_front(axis);
  for (Value p : params) {
    auto t = cast<RankedTensorType>(p.getType());
    if (t.getShape() != normalized || t.getElementType() != in.getElementType())
      return emitOptionalError(loc, "expected scale and bias of type ",
                               tensorOf(normalized, in.getElementType()),
                               ", got ", t);
  }
  inferred.push_back(in);
  for (unsigned i = 0; i < numStats; ++i)
    inferred.push_back(
        tensorOf(in.getShape().take_front(axis), in.getElementType()));
  return success();
}

LogicalResult LayerNormOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr, OpaqueProperties properties, RegionRange regions,
    SmallVectorImpl<Type> &inferred) {
  Adaptor adaptor(operands, nullptr, properties, regions);
  SmallVector<Value> params = {adaptor.getScale()};
  if (adaptor.getBias())
    params.push_back(adaptor.getBias());
  return inferNorm(loc, adaptor.getOperand(), params, adaptor.getAxis(), 2,
                   inferred);
}

LogicalResult RmsNormOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr, OpaqueProperties properties, RegionRange,
    SmallVectorImpl<Type> &inferred) {
  Adaptor adaptor(operands, nullptr, properties);
  return inferNorm(loc, adaptor.getOperand(), {adaptor.getScale()},
                   adaptor.getAxis(), 1, inferred);
}

/// A norm's results as inferred (statistics in x's element type), or with
/// the statistics in a wider float type: a half-precision norm computes and
/// keeps them in f32.
static bool normResultsCompatible(TypeRange inferred, TypeRange actual) {
  if (inferred.size() != actual.size() || inferred.empty() ||
      inferred.front() != actual.front())
    return false;
  for (auto [i, a] : llvm::zip(inferred.drop_front(), actual.drop_front())) {
    auto it = cast<RankedTensorType>(i);
    auto at = dyn_cast<RankedTensorType>(a);
    auto iElement = dyn_cast<FloatType>(it.getElementType());
    auto aElement = at ? dyn_cast<FloatType>(at.getElementType()) : FloatType();
    if (!iElement || !aElement || at.getShape() != it.getShape() ||
        aElement.getWidth() < iElement.getWidth())
      return false;
  }
  return true;
}

bool LayerNormOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return normResultsCompatible(l, r);
}

bool RmsNormOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return normResultsCompatible(l, r);
}

bool dtcc::graph::isSameOrF32OfHalf(Type element, Type other) {
  return other == element ||
         (other.isF32() && (element.isBF16() || element.isF16()));
}

bool CrossEntropyOp::isCompatibleReturnTypes(TypeRange inferred,
                                             TypeRange actual) {
  if (inferred.size() != 1 || actual.size() != 1)
    return false;
  auto i = cast<RankedTensorType>(inferred.front());
  auto a = dyn_cast<RankedTensorType>(actual.front());
  return a && a.getShape() == i.getShape() &&
         isSameOrF32OfHalf(i.getElementType(), a.getElementType());
}

LogicalResult CrossEntropyOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr, OpaqueProperties properties, RegionRange,
    SmallVectorImpl<Type> &inferred) {
  Adaptor adaptor(operands, nullptr, properties);
  auto logits = cast<RankedTensorType>(adaptor.getLogits().getType());
  auto labels = cast<RankedTensorType>(adaptor.getLabels().getType());
  if (logits.getRank() != 2)
    return emitOptionalError(loc, "expected logits of rank 2, got ",
                             logits.getRank());
  if (labels.getRank() != 1 || labels.getDimSize(0) != logits.getDimSize(0))
    return emitOptionalError(loc, "expected labels of shape ",
                             logits.getDimSize(0), ", got ",
                             formatShape(labels.getShape()));
  inferred.push_back(
      tensorOf({logits.getDimSize(0)}, logits.getElementType()));
  return success();
}

/// dgraph.adamw's gradient type: printed after the parameter's only when it
/// differs (`: tensor<4xf32>, tensor<4xbf16>`).
static ParseResult parseNarrowGradType(OpAsmParser &parser, Type &grad,
                                       Type param) {
  if (failed(parser.parseOptionalComma())) {
    grad = param;
    return success();
  }
  return parser.parseType(grad);
}
static void printNarrowGradType(OpAsmPrinter &printer, Operation *, Type grad,
                                Type param) {
  if (grad != param)
    printer << ", " << grad;
}

#define GET_OP_CLASSES
#include "dialects/Graph/IR/GraphOps.cpp.inc"

//===----------------------------------------------------------------------===//
// Locations
//===----------------------------------------------------------------------===//

/// The ONNX node name a location carries.
std::string dtcc::graph::nodeName(Location loc) {
  if (auto name = dyn_cast<NameLoc>(loc))
    return name.getName().str();
  if (auto fused = dyn_cast<FusedLoc>(loc)) {
    // An op that stands for several (dtcc-shard-bucket's collectives) names
    // each of their nodes.
    if (auto what = dyn_cast_or_null<StringAttr>(fused.getMetadata());
        what && what.getValue() == kJoinedNodesLoc) {
      std::string names;
      llvm::StringSet<> seen;
      for (Location l : fused.getLocations())
        if (std::string n = nodeName(l); !n.empty() && seen.insert(n).second)
          names += (names.empty() ? "" : ", ") + n;
      return names;
    }
    for (Location l : fused.getLocations())
      if (std::string n = nodeName(l); !n.empty())
        return n;
  }
  if (auto callsite = dyn_cast<CallSiteLoc>(loc))
    return nodeName(callsite.getCallee());
  return "";
}

//===----------------------------------------------------------------------===//
// Layers
//===----------------------------------------------------------------------===//

LogicalResult LayerAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                StringRef module, std::optional<int64_t> index) {
  if (module.empty() && !index)
    return emitError() << "expected a module, a layer index or both";
  if (index && *index < 0)
    return emitError() << "expected a layer index >= 0, got " << *index;
  return success();
}

LayerAttr dtcc::graph::layerOf(Operation *op) {
  return op->getAttrOfType<LayerAttr>(kLayerAttr);
}

std::optional<int64_t> dtcc::graph::layerIndexOf(Operation *op) {
  if (LayerAttr layer = layerOf(op))
    return layer.getIndex();
  return std::nullopt;
}

StringRef dtcc::graph::moduleOf(Operation *op) {
  if (LayerAttr layer = layerOf(op))
    return layer.getModule();
  return "";
}

void dtcc::graph::inheritLayer(Operation *from, Operation *to) {
  if (LayerAttr layer = layerOf(from); layer && !to->hasAttr(kLayerAttr))
    to->setAttr(kLayerAttr, layer);
}

DenseElementsAttr dtcc::graph::splatOf(RankedTensorType type, double value) {
  Type e = type.getElementType();
  Attribute a = isa<FloatType>(e) ? Attribute(FloatAttr::get(e, value))
                                  : Attribute(IntegerAttr::get(e, (int64_t)value));
  return DenseElementsAttr::get(type, a);
}

double AttentionOp::getFlops(ArrayRef<SmallVector<int64_t>> operands,
                             ArrayRef<SmallVector<int64_t>>) {
  return dtcc::runtime::attentionFlops(
      std::vector<int64_t>(operands[0].begin(), operands[0].end()),
      std::vector<int64_t>(operands[2].begin(), operands[2].end()),
      getCausal(), /*backward=*/false);
}

double AttentionGradOp::getFlops(ArrayRef<SmallVector<int64_t>> operands,
                                 ArrayRef<SmallVector<int64_t>>) {
  return dtcc::runtime::attentionFlops(
      std::vector<int64_t>(operands[0].begin(), operands[0].end()),
      std::vector<int64_t>(operands[2].begin(), operands[2].end()),
      getCausal(), /*backward=*/true);
}
