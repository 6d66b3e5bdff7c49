//===- ShardOps.cpp - dshard dialect, attributes and verifiers ------------===//

#include "dialects/Shard/IR/ShardOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace dtcc::shard;

#include "dialects/Shard/IR/ShardOpsDialect.cpp.inc"

#include "dialects/Shard/IR/ShardEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/Shard/IR/ShardAttrs.cpp.inc"

void ShardDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/Shard/IR/ShardAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "dialects/Shard/IR/ShardOps.cpp.inc"
      >();
}

LogicalResult ShardDialect::verifyOperationAttribute(Operation *op,
                                                    NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  Attribute value = attr.getValue();
  // A sharding of `v`: one entry per dimension of its tensor type.
  auto checkSharding = [&](Attribute a, Type type, StringRef what,
                           unsigned i) -> LogicalResult {
    auto s = dyn_cast<ShardingAttr>(a);
    if (!s)
      return op->emitOpError("expected '")
             << name << "' to hold #dshard.sharding attributes, got " << a;
    auto t = dyn_cast<RankedTensorType>(type);
    if (t && (int64_t)s.getDims().size() != t.getRank())
      return op->emitOpError("expected '")
             << name << "' of " << what << " " << i << " to have "
             << t.getRank() << " dimensions, as its type " << type
             << ", got " << s;
    return success();
  };
  auto checkList = [&](TypeRange types, StringRef what) -> LogicalResult {
    auto list = dyn_cast<ArrayAttr>(value);
    if (!list || list.size() != types.size())
      return op->emitOpError("expected '")
             << name << "' to be an array of " << types.size()
             << " #dshard.sharding attributes (one per " << what << "), got "
             << value;
    for (auto [i, a] : llvm::enumerate(list))
      if (failed(checkSharding(a, types[i], what, i)))
        return failure();
    return success();
  };
  auto expected = [&](StringRef what) {
    return op->emitOpError("expected '")
           << name << "' to be " << what << ", got " << value;
  };
  auto isCount = [&] {
    auto i = dyn_cast<IntegerAttr>(value);
    return i && i.getType().isSignlessInteger() && i.getInt() >= 0;
  };
  if (name == kResultShardingsAttr)
    return checkList(op->getResultTypes(), "result");
  if (name == kInShardingsAttr)
    return checkList(op->getOperandTypes(), "operand");
  if (name == kShardingAttr)
    return isa<ShardingAttr>(value)
               ? success()
               : expected("a #dshard.sharding attribute");
  if (name == kMeshAttr)
    return isa<MeshAttr>(value) ? success()
                                : expected("a #dshard.mesh attribute");
  if (name == kPlanAttr) {
    if (!isa<ModuleOp>(op))
      return op->emitOpError("expected '") << name << "' on a module";
    return isa<PlanAttr>(value) ? success()
                                : expected("a #dshard.plan attribute");
  }
  if (name == kStageAttr || name == kMicroAttr || name == kWaitHandleAttr)
    return isCount() ? success() : expected("an integer >= 0");
  if (name == kZeroAttr || name == kGatherOnceAttr)
    return isa<UnitAttr>(value) ? success() : expected("a unit attribute");
  if (name == kHalfCopyAttr)
    return isa<FlatSymbolRefAttr>(value) ? success()
                                         : expected("a symbol reference");
  if (name == kSequenceAttr) {
    if (!isa<ConstraintOp>(op))
      return op->emitOpError("expected '") << name << "' on a dshard.constraint";
    return isa<UnitAttr>(value) ? success() : expected("a unit attribute");
  }
  if (name == kGlobalTypeAttr)
    return isa<TypeAttr>(value) ? success() : expected("a type");
  if (name == kPassAttr) {
    auto pass = dyn_cast<StringAttr>(value);
    return pass && (pass.getValue() == "forward" ||
                    pass.getValue() == "backward")
               ? success()
               : expected("\"forward\" or \"backward\"");
  }
  if (name == kTaskAttr)
    return isa<StringAttr>(value) ? success() : expected("a string");
  return op->emitOpError("unknown dshard attribute '")
         << name << "' (dialects/Shard/IR/ShardOps.h lists them)";
}

MeshAttr dtcc::shard::getMesh(Operation *op) {
  auto module = op->getParentOfType<ModuleOp>();
  if (!module && isa<ModuleOp>(op))
    module = cast<ModuleOp>(op);
  return module ? module->getAttrOfType<MeshAttr>(kMeshAttr) : MeshAttr();
}

PlanAttr dtcc::shard::getPlan(Operation *op) {
  auto module = dyn_cast<ModuleOp>(op);
  if (!module)
    module = op->getParentOfType<ModuleOp>();
  return module ? module->getAttrOfType<PlanAttr>(kPlanAttr) : PlanAttr();
}

//===----------------------------------------------------------------------===//
// MeshAttr: #dshard.mesh<[dp = 2, tp = 4]>
//===----------------------------------------------------------------------===//

/// `[dp = 2, tp = 4]`, the axes of a mesh in rank order.
static ParseResult parseMeshAxes(AsmParser &parser,
                                 SmallVectorImpl<StringAttr> &axes,
                                 SmallVectorImpl<int64_t> &sizes) {
  auto parseAxis = [&]() -> ParseResult {
    std::string name;
    int64_t size;
    if (parser.parseKeywordOrString(&name) || parser.parseEqual() ||
        parser.parseInteger(size))
      return failure();
    axes.push_back(StringAttr::get(parser.getContext(), name));
    sizes.push_back(size);
    return success();
  };
  return parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, parseAxis);
}

static void printMeshAxes(AsmPrinter &p, MeshAttr mesh) {
  p << "[";
  for (auto [i, axis] : llvm::enumerate(mesh.getAxes()))
    p << (i ? ", " : "") << axis.getValue() << " = " << mesh.getSizes()[i];
  p << "]";
}

Attribute MeshAttr::parse(AsmParser &parser, Type) {
  SmallVector<StringAttr> axes;
  SmallVector<int64_t> sizes;
  if (parser.parseLess() || parseMeshAxes(parser, axes, sizes) ||
      parser.parseGreater())
    return {};
  return MeshAttr::getChecked([&] { return parser.emitError(parser.getNameLoc()); },
                              parser.getContext(), axes, sizes);
}

void MeshAttr::print(AsmPrinter &p) const {
  p << "<";
  printMeshAxes(p, *this);
  p << ">";
}

LogicalResult MeshAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               ArrayRef<StringAttr> axes, ArrayRef<int64_t> sizes) {
  if (axes.size() != sizes.size())
    return emitError() << "expected one size per mesh axis";
  llvm::SmallSet<StringRef, 4> seen;
  for (auto [axis, size] : llvm::zip(axes, sizes)) {
    if (!seen.insert(axis.getValue()).second)
      return emitError() << "mesh axis '" << axis.getValue() << "' repeats";
    if (size < 1)
      return emitError() << "expected mesh axis '" << axis.getValue()
                         << "' of size >= 1, got " << size;
  }
  return success();
}

int64_t MeshAttr::getSize(StringRef axis) const {
  for (auto [a, size] : llvm::zip(getAxes(), getSizes()))
    if (a.getValue() == axis)
      return size;
  return 1;
}

int64_t MeshAttr::getNumRanks() const {
  int64_t n = 1;
  for (int64_t s : getSizes())
    n *= s;
  return n;
}

//===----------------------------------------------------------------------===//
// ShardingAttr: #dshard.sharding<[{dp}, {}, {tp}x3], partial = {dp}>
//===----------------------------------------------------------------------===//

/// Parses `{a, b}` into axis names.
static ParseResult parseAxisSet(AsmParser &parser, SmallVectorImpl<StringAttr> &axes) {
  return parser.parseCommaSeparatedList(AsmParser::Delimiter::Braces, [&]() {
    std::string name;
    if (parser.parseKeywordOrString(&name))
      return failure();
    axes.push_back(StringAttr::get(parser.getContext(), name));
    return success();
  });
}

static void printAxisSet(AsmPrinter &p, ArrayRef<StringAttr> axes) {
  p << "{";
  llvm::interleaveComma(axes, p, [&](StringAttr a) { p << a.getValue(); });
  p << "}";
}

Attribute ShardingAttr::parse(AsmParser &parser, Type) {
  MLIRContext *ctx = parser.getContext();
  SmallVector<DimShardingAttr> dims;
  SmallVector<StringAttr> partial;
  auto parseDim = [&]() -> ParseResult {
    SmallVector<StringAttr> axes;
    if (parseAxisSet(parser, axes))
      return failure();
    int64_t groups = 1;
    // `x3`: an identifier token like x3 follows the closing brace.
    StringRef keyword;
    if (succeeded(parser.parseOptionalKeyword(&keyword))) {
      if (!keyword.consume_front("x") || keyword.getAsInteger(10, groups))
        return parser.emitError(parser.getCurrentLocation(),
                                "expected a group count like x3");
    }
    dims.push_back(DimShardingAttr::get(ctx, axes, groups));
    return success();
  };
  if (parser.parseLess() ||
      parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, parseDim))
    return {};
  if (succeeded(parser.parseOptionalComma())) {
    if (parser.parseKeyword("partial") || parser.parseEqual() ||
        parseAxisSet(parser, partial))
      return {};
  }
  if (parser.parseGreater())
    return {};
  return ShardingAttr::getChecked(
      [&] { return parser.emitError(parser.getNameLoc()); }, ctx, dims, partial);
}

void ShardingAttr::print(AsmPrinter &p) const {
  p << "<[";
  llvm::interleaveComma(getDims(), p, [&](DimShardingAttr d) {
    printAxisSet(p, d.getAxes());
    if (d.getGroups() != 1)
      p << "x" << d.getGroups();
  });
  p << "]";
  if (!getPartial().empty()) {
    p << ", partial = ";
    printAxisSet(p, getPartial());
  }
  p << ">";
}

LogicalResult ShardingAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                   ArrayRef<DimShardingAttr> dims,
                                   ArrayRef<StringAttr> partial) {
  llvm::SmallSet<StringRef, 4> seen;
  auto see = [&](StringAttr a) -> LogicalResult {
    if (!seen.insert(a.getValue()).second)
      return emitError() << "mesh axis '" << a.getValue()
                         << "' appears twice in a sharding";
    return success();
  };
  for (DimShardingAttr d : dims) {
    if (d.getGroups() < 1)
      return emitError() << "expected groups >= 1, got " << d.getGroups();
    for (StringAttr a : d.getAxes())
      if (failed(see(a)))
        return failure();
  }
  for (StringAttr a : partial)
    if (failed(see(a)))
      return failure();
  return success();
}

ShardingAttr ShardingAttr::replicated(MLIRContext *ctx, int64_t rank) {
  SmallVector<DimShardingAttr> dims(rank, DimShardingAttr::get(ctx, {}, 1));
  return ShardingAttr::get(ctx, dims, {});
}

bool ShardingAttr::isReplicated() const {
  return getPartial().empty() &&
         llvm::all_of(getDims(), [](DimShardingAttr d) { return d.getAxes().empty(); });
}

SmallVector<StringAttr> ShardingAttr::usedAxes() const {
  SmallVector<StringAttr> out;
  for (DimShardingAttr d : getDims())
    llvm::append_range(out, d.getAxes());
  llvm::append_range(out, getPartial());
  return out;
}

FailureOr<SmallVector<int64_t>>
ShardingAttr::localShape(ArrayRef<int64_t> global, MeshAttr mesh,
                         std::string *why) const {
  SmallVector<int64_t> local(global);
  for (auto [d, dim] : llvm::enumerate(getDims())) {
    int64_t shards = 1;
    for (StringAttr a : dim.getAxes())
      shards *= mesh ? mesh.getSize(a.getValue()) : 1;
    int64_t divisor = shards * dim.getGroups();
    if (d >= global.size() || global[d] % divisor != 0) {
      if (why)
        *why = "dim " + std::to_string(d) + " of size " +
               (d < global.size() ? std::to_string(global[d]) : "?") +
               " does not split into " + std::to_string(shards) + " shards" +
               (dim.getGroups() > 1
                    ? " of " + std::to_string(dim.getGroups()) + " groups"
                    : "");
      return failure();
    }
    local[d] = global[d] / shards;
  }
  return local;
}

ShardingAttr ShardingAttr::withoutPartial() const {
  return ShardingAttr::get(getContext(), getDims(), {});
}

//===----------------------------------------------------------------------===//
// Ops
//===----------------------------------------------------------------------===//

static RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

LogicalResult ConstraintOp::verify() {
  if ((int64_t)getSharding().getDims().size() != typeOf(getOperand()).getRank())
    return emitOpError("expected a sharding of rank ")
           << typeOf(getOperand()).getRank() << ", got "
           << getSharding().getDims().size();
  return success();
}

static LogicalResult verifyKind(Operation *op, StringRef kind) {
  if (kind != "sum" && kind != "max" && kind != "min" && kind != "prod")
    return op->emitOpError("expected kind sum, max, min or prod, got '")
           << kind << "'";
  return success();
}

/// Checks that `big` is `small` with dimension `dim` multiplied by the axis
/// size (unknown without a mesh: then only the other dimensions).
static LogicalResult verifyScaled(Operation *op, RankedTensorType small,
                                  RankedTensorType big, int64_t dim,
                                  StringRef axis) {
  if (small.getRank() != big.getRank() || dim < 0 || dim >= small.getRank())
    return op->emitOpError("expected operand and result of one rank with dim in [0, ")
           << small.getRank() << "), got dim " << dim;
  if (small.getElementType() != big.getElementType())
    return op->emitOpError("expected operand and result of one element type");
  for (int64_t d = 0; d < small.getRank(); ++d)
    if (d != dim && small.getDimSize(d) != big.getDimSize(d))
      return op->emitOpError("expected dim ")
             << d << " to agree, got " << small.getDimSize(d) << " and "
             << big.getDimSize(d);
  if (MeshAttr mesh = getMesh(op)) {
    int64_t n = mesh.getSize(axis);
    if (small.getDimSize(dim) * n != big.getDimSize(dim))
      return op->emitOpError("expected dim ")
             << dim << " of " << big.getDimSize(dim) << " = "
             << small.getDimSize(dim) << " x " << n << " (the size of axis '"
             << axis << "')";
  }
  return success();
}

LogicalResult AllReduceOp::verify() { return verifyKind(*this, getKind()); }

LogicalResult AllGatherOp::verify() {
  return verifyScaled(*this, typeOf(getOperand()), typeOf(getResult()), getDim(),
                      getAxis());
}

LogicalResult ReduceScatterOp::verify() {
  if (failed(verifyKind(*this, getKind())))
    return failure();
  return verifyScaled(*this, typeOf(getResult()), typeOf(getOperand()), getDim(),
                      getAxis());
}

LogicalResult ShardSliceOp::verify() {
  if (getGroups() < 1 || typeOf(getResult()).getRank() <= getDim() ||
      typeOf(getResult()).getDimSize(getDim()) % getGroups() != 0)
    return emitOpError("expected groups >= 1 dividing the result's dim");
  return verifyScaled(*this, typeOf(getResult()), typeOf(getOperand()), getDim(),
                      getAxis());
}

LogicalResult AllToAllOp::verify() {
  auto in = typeOf(getOperand()), out = typeOf(getResult());
  int64_t s = getSplitDim(), c = getConcatDim();
  if (in.getRank() != out.getRank() || s < 0 || c < 0 || s >= in.getRank() ||
      c >= in.getRank())
    return emitOpError("expected split and concat dims inside the operand");
  if (MeshAttr mesh = getMesh(*this)) {
    int64_t n = mesh.getSize(getAxis());
    SmallVector<int64_t> expected(in.getShape());
    expected[s] /= n;
    expected[c] *= n;
    if (in.getDimSize(s) % n != 0 || ArrayRef<int64_t>(expected) != out.getShape())
      return emitOpError("expected the operand's split dim divided and concat "
                         "dim multiplied by ")
             << n;
  }
  return success();
}

LogicalResult BroadcastOp::verify() {
  if (getRoot() < 0)
    return emitOpError("expected a non-negative root");
  if (MeshAttr mesh = getMesh(*this))
    if (getRoot() >= mesh.getSize(getAxis()))
      return emitOpError("expected root < ") << mesh.getSize(getAxis());
  return success();
}

#define GET_OP_CLASSES
#include "dialects/Shard/IR/ShardOps.cpp.inc"

//===----------------------------------------------------------------------===//
// PlanAttr: #dshard.plan<mesh = [dp = 2], zero = 1, micro_batches = 2, ...>
//===----------------------------------------------------------------------===//

/// The layouts a plan may name for a 2-D weight besides a full sharding.
static bool isLayoutKeyword(StringRef s) {
  return s == "rows" || s == "cols" || s == "whole";
}

Attribute PlanAttr::parse(AsmParser &parser, Type) {
  MLIRContext *ctx = parser.getContext();
  SmallVector<StringAttr> axes;
  SmallVector<int64_t> sizes;
  int64_t zero = 0, microBatches = 1, virtualStages = 1, recomputeLayers = 0;
  PipelineSchedule schedule = PipelineSchedule::OneFOneB;
  Recompute recompute = Recompute::None;
  bool sequenceParallel = false, halfGradReduce = false;
  Offload offload = Offload::None;
  SmallVector<NamedAttribute> layouts;
  llvm::SmallSet<StringRef, 8> seen;
  auto parseLayout = [&]() -> ParseResult {
    std::string name, keyword;
    if (parser.parseKeywordOrString(&name) || parser.parseEqual())
      return failure();
    Attribute value;
    if (succeeded(parser.parseOptionalKeywordOrString(&keyword))) {
      if (!isLayoutKeyword(keyword))
        return parser.emitError(parser.getCurrentLocation(),
                                "expected a layout rows, cols, whole or a "
                                "#dshard.sharding, got '")
               << keyword << "'";
      value = StringAttr::get(ctx, keyword);
    } else if (parser.parseAttribute(value)) {
      return failure();
    }
    layouts.push_back(NamedAttribute(StringAttr::get(ctx, name), value));
    return success();
  };
  auto parseField = [&]() -> ParseResult {
    StringRef key;
    llvm::SMLoc loc = parser.getCurrentLocation();
    if (parser.parseKeyword(&key) || parser.parseEqual())
      return failure();
    if (!seen.insert(key).second)
      return parser.emitError(loc, "plan field '") << key << "' appears twice";
    if (key == "mesh")
      return parseMeshAxes(parser, axes, sizes);
    if (key == "zero")
      return parser.parseInteger(zero);
    if (key == "micro_batches")
      return parser.parseInteger(microBatches);
    if (key == "virtual_stages")
      return parser.parseInteger(virtualStages);
    if (key == "recompute_layers")
      return parser.parseInteger(recomputeLayers);
    if (key == "schedule" || key == "recompute" || key == "offload" ||
        key == "sequence_parallel" || key == "grad_reduce") {
      std::string value;
      llvm::SMLoc at = parser.getCurrentLocation();
      if (parser.parseKeywordOrString(&value))
        return failure();
      if (key == "schedule") {
        auto s = symbolizePipelineSchedule(value);
        if (!s)
          return parser.emitError(at, "expected a pipeline schedule gpipe, "
                                      "1f1b, interleaved or zb-h1, got '")
                 << value << "'";
        schedule = *s;
      } else if (key == "recompute") {
        auto r = symbolizeRecompute(value);
        if (!r)
          return parser.emitError(at, "expected recompute none, selective or "
                                      "full, got '")
                 << value << "'";
        recompute = *r;
      } else if (key == "offload") {
        auto o = symbolizeOffload(value);
        if (!o)
          return parser.emitError(at, "expected offload none or optimizer, "
                                      "got '")
                 << value << "'";
        offload = *o;
      } else if (key == "grad_reduce") {
        if (value != "half" && value != "fp32")
          return parser.emitError(at, "expected grad_reduce fp32 or half, "
                                      "got '")
                 << value << "'";
        halfGradReduce = value == "half";
      } else {
        if (value != "true" && value != "false")
          return parser.emitError(at, "expected sequence_parallel true or "
                                      "false, got '")
                 << value << "'";
        sequenceParallel = value == "true";
      }
      return success();
    }
    if (key == "layouts")
      return parser.parseCommaSeparatedList(AsmParser::Delimiter::Braces,
                                            parseLayout);
    return parser.emitError(loc, "unknown plan field '")
           << key << "' (expected mesh, zero, micro_batches, schedule, "
                     "virtual_stages, recompute, recompute_layers, "
                     "sequence_parallel, offload, grad_reduce or layouts)";
  };
  // `#dshard.plan<>`: every field its default.
  if (parser.parseLess() ||
      (failed(parser.parseOptionalGreater()) &&
       (parser.parseCommaSeparatedList(parseField) || parser.parseGreater())))
    return {};
  auto emitError = [&] { return parser.emitError(parser.getNameLoc()); };
  MeshAttr mesh = MeshAttr::getChecked(emitError, ctx, axes, sizes);
  if (!mesh)
    return {};
  // DictionaryAttr sorts its entries; a name given twice is an error.
  llvm::SmallSet<StringRef, 8> names;
  for (NamedAttribute l : layouts)
    if (!names.insert(l.getName().getValue()).second) {
      emitError() << "layout of variable '" << l.getName().getValue()
                  << "' given twice";
      return {};
    }
  return PlanAttr::getChecked(emitError, ctx, mesh, zero, microBatches,
                              schedule, virtualStages, recompute,
                              recomputeLayers, sequenceParallel, offload,
                              halfGradReduce, DictionaryAttr::get(ctx, layouts));
}

void PlanAttr::print(AsmPrinter &p) const {
  p << "<mesh = ";
  printMeshAxes(p, getMesh());
  p << ", zero = " << getZero() << ", micro_batches = " << getMicroBatches()
    << ", schedule = ";
  p.printKeywordOrString(stringifyPipelineSchedule(getSchedule()));
  if (getVirtualStages() != 1)
    p << ", virtual_stages = " << getVirtualStages();
  p << ", recompute = ";
  p.printKeywordOrString(stringifyRecompute(getRecompute()));
  if (getRecomputeLayers() != 0)
    p << ", recompute_layers = " << getRecomputeLayers();
  if (getSequenceParallel())
    p << ", sequence_parallel = true";
  if (getOffload() != Offload::None)
    p << ", offload = " << stringifyOffload(getOffload());
  if (getHalfGradReduce())
    p << ", grad_reduce = half";
  if (getLayouts() && !getLayouts().empty()) {
    p << ", layouts = {";
    llvm::interleaveComma(getLayouts(), p, [&](NamedAttribute l) {
      p.printKeywordOrString(l.getName().getValue());
      p << " = ";
      if (auto s = dyn_cast<StringAttr>(l.getValue()))
        p << s.getValue();
      else
        p.printAttribute(l.getValue());
    });
    p << "}";
  }
  p << ">";
}

LogicalResult PlanAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               MeshAttr mesh, int64_t zero,
                               int64_t microBatches,
                               PipelineSchedule schedule,
                               int64_t virtualStages, Recompute recompute,
                               int64_t recomputeLayers, bool, Offload,
                               bool halfGradReduce, DictionaryAttr layouts) {
  if (!mesh)
    return emitError() << "expected a plan's mesh";
  for (StringAttr axis : mesh.getAxes())
    if (axis.getValue() != "dp" && axis.getValue() != "pp" &&
        axis.getValue() != "tp" && axis.getValue() != "cp")
      return emitError() << "unknown mesh axis '" << axis.getValue()
                         << "': dtcc knows dp (data), pp (pipeline), tp "
                            "(tensor parallel) and cp (context parallel)";
  if (zero < 0 || zero > 3)
    return emitError() << "expected a ZeRO stage 0, 1, 2 or 3, got " << zero;
  if (microBatches < 1)
    return emitError() << "expected micro-batches >= 1, got " << microBatches;
  if (virtualStages < 1)
    return emitError() << "expected virtual stages >= 1, got "
                       << virtualStages;
  if (virtualStages > 1 && schedule != PipelineSchedule::Interleaved)
    return emitError() << "virtual stages (" << virtualStages
                       << ") need the interleaved schedule, got "
                       << stringifyPipelineSchedule(schedule);
  if (recomputeLayers < 0)
    return emitError() << "expected recompute_layers >= 0, got "
                       << recomputeLayers;
  if (recomputeLayers > 0 && recompute != Recompute::Full)
    return emitError() << "recompute_layers (" << recomputeLayers
                       << ") needs recompute = full, got "
                       << stringifyRecompute(recompute);
  // Accumulated partial sums (below ZeRO-2) are summed once per step in
  // fp32, as are a pipeline's micro-batches inside its step.
  if (halfGradReduce && microBatches != 1 &&
      (zero < 2 || mesh.getSize("pp") > 1))
    return emitError() << "grad_reduce = half with " << microBatches
                       << " micro-batches needs ZeRO-2 or 3 and no pipeline "
                          "stages (accumulated micro-batches' gradients are "
                          "otherwise summed once per step, in fp32)";
  if (!layouts)
    return success();
  for (NamedAttribute l : layouts) {
    if (auto s = dyn_cast<StringAttr>(l.getValue())) {
      if (!isLayoutKeyword(s.getValue()))
        return emitError() << "expected the layout of '"
                           << l.getName().getValue()
                           << "' to be rows, cols, whole or a "
                              "#dshard.sharding, got '"
                           << s.getValue() << "'";
      continue;
    }
    auto sharding = dyn_cast<ShardingAttr>(l.getValue());
    if (!sharding)
      return emitError() << "expected the layout of '"
                         << l.getName().getValue()
                         << "' to be rows, cols, whole or a "
                            "#dshard.sharding, got "
                         << l.getValue();
    for (StringAttr axis : sharding.usedAxes())
      if (!llvm::is_contained(mesh.getAxes(), axis))
        return emitError() << "the layout of '" << l.getName().getValue()
                           << "' uses mesh axis '" << axis.getValue()
                           << "', which the plan's mesh does not have";
  }
  return success();
}

PlanAttr PlanAttr::withLayouts(DictionaryAttr layouts) const {
  return PlanAttr::get(getContext(), getMesh(), getZero(), getMicroBatches(),
                       getSchedule(), getVirtualStages(), getRecompute(),
                       getRecomputeLayers(), getSequenceParallel(),
                       getOffload(), getHalfGradReduce(), layouts);
}
