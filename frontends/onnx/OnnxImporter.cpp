//===- OnnxImporter.cpp - ONNX graphs to dgraph modules -------------------===//
//
// Reads a model, checks up front that every node has a handler (listing all
// that do not), turns initializers into variables or constants, and builds
// func @main node by node.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/OnnxImporter.h"

#include "frontends/onnx/GraphImporter.h"
#include "frontends/onnx/LayerNames.h"
#include "runtime/io/TensorFile.h"

#include "google/protobuf/unknown_field_set.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinDialect.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/IR/Verifier.h"
#include "onnx/defs/parser.h"
#include "onnx/defs/schema.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/PrettyStackTrace.h"

#include <algorithm>
#include <exception>
#include <functional>
#include <set>

using namespace mlir;

namespace dtcc::onnx_frontend {

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

Type convertElementType(int32_t onnxType, MLIRContext *ctx) {
  Builder b(ctx);
  switch (onnxType) {
  case onnx::TensorProto::FLOAT: return b.getF32Type();
  case onnx::TensorProto::DOUBLE: return b.getF64Type();
  case onnx::TensorProto::FLOAT16: return b.getF16Type();
  case onnx::TensorProto::BFLOAT16: return b.getBF16Type();
  case onnx::TensorProto::BOOL: return b.getI1Type();
  case onnx::TensorProto::INT8: return b.getIntegerType(8);
  case onnx::TensorProto::INT16: return b.getIntegerType(16);
  case onnx::TensorProto::INT32: return b.getIntegerType(32);
  case onnx::TensorProto::INT64: return b.getIntegerType(64);
  case onnx::TensorProto::UINT8: return b.getIntegerType(8, false);
  case onnx::TensorProto::UINT16: return b.getIntegerType(16, false);
  case onnx::TensorProto::UINT32: return b.getIntegerType(32, false);
  case onnx::TensorProto::UINT64: return b.getIntegerType(64, false);
  default: return {};
  }
}

std::string onnxTypeName(int32_t onnxType) {
  if (onnx::TensorProto_DataType_IsValid(onnxType))
    return onnx::TensorProto_DataType_Name(
        static_cast<onnx::TensorProto_DataType>(onnxType));
  // The types newer than Debian's onnx 1.12 (onnx.proto of 1.23).
  static constexpr const char *kNewer[] = {
      "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ",
      "UINT4",        "INT4",           "FLOAT4E2M1", "FLOAT8E8M0",
      "UINT2",        "INT2",           "FLOAT6E2M3", "FLOAT6E3M2"};
  if (onnxType >= 17 && onnxType < 17 + int32_t(std::size(kNewer)))
    return kNewer[onnxType - 17];
  return "type " + std::to_string(onnxType);
}

//===----------------------------------------------------------------------===//
// torch.export's signature
//===----------------------------------------------------------------------===//

/// The value of `key` in the metadata (`metadata_props`, a repeated
/// StringStringEntryProto) that onnx 1.16 added to values, nodes and graphs,
/// read from `message`'s unknown field `number`: Debian's onnx 1.12 schema
/// predates them. Empty when absent.
static std::string metadataValue(const google::protobuf::Message &message,
                                 int number, llvm::StringRef key) {
  const google::protobuf::UnknownFieldSet &fields =
      message.GetReflection()->GetUnknownFields(message);
  for (int i = 0; i < fields.field_count(); ++i) {
    const google::protobuf::UnknownField &field = fields.field(i);
    if (field.number() != number ||
        field.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED)
      continue;
    onnx::StringStringEntryProto entry;
    if (entry.ParseFromString(field.length_delimited()) && entry.key() == key)
      return entry.value();
  }
  return "";
}

std::string metadataValue(const onnx::ValueInfoProto &info,
                          llvm::StringRef key) {
  return metadataValue(info, /*ValueInfoProto.metadata_props*/ 4, key);
}
std::string metadataValue(const onnx::NodeProto &node, llvm::StringRef key) {
  return metadataValue(node, /*NodeProto.metadata_props*/ 9, key);
}
std::string metadataValue(const onnx::GraphProto &graph, llvm::StringRef key) {
  return metadataValue(graph, /*GraphProto.metadata_props*/ 16, key);
}

/// What PyTorch's ONNX exporter (torch.onnx.export(..., dynamo=True), the
/// default in PyTorch 2.15) records of torch.export's graph signature: the
/// kind of each value that is an input of the exported program
/// ("PARAMETER", "BUFFER", "CONSTANT_TENSOR", "USER_INPUT"), by name; and
/// the targets of the program's PARAMETER inputs (the module's parameters,
/// tied ones once). Both empty for other exporters.
struct TorchExportSignature {
  llvm::StringMap<std::string> kinds;
  std::vector<std::string> parameters;
};

static TorchExportSignature torchExportSignature(const onnx::GraphProto &g) {
  TorchExportSignature s;
  auto scan = [&](const auto &infos) {
    for (const onnx::ValueInfoProto &info : infos)
      if (std::string kind = metadataValue(
              info, "pkg.torch.export.graph_signature.InputSpec.kind");
          !kind.empty())
        s.kinds[info.name()] = kind;
  };
  scan(g.input());
  scan(g.value_info());
  // One input per line: "p_fc_weight: PARAMETER target='fc.weight'".
  std::string text =
      metadataValue(g, "pkg.torch.export.ExportedProgram.graph_signature");
  llvm::SmallVector<llvm::StringRef> lines;
  llvm::StringRef(text).split(lines, '\n');
  for (llvm::StringRef line : lines) {
    size_t at = line.find(": PARAMETER target='");
    if (at == llvm::StringRef::npos)
      continue;
    llvm::StringRef target =
        line.drop_front(at + llvm::StringRef(": PARAMETER target='").size());
    s.parameters.push_back(
        target.take_until([](char c) { return c == '\''; }).str());
  }
  return s;
}

/// The tensors `g` reads only as a QuantizeLinear's or DequantizeLinear's
/// scale or zero point (PyTorch's FakeQuantize buffers): quantization
/// parameters, which training does not update. A read by any other node,
/// in a subgraph too, or as a graph output, keeps a name out.
static llvm::StringSet<> quantizationParameters(const onnx::GraphProto &g) {
  llvm::StringSet<> asParameter, otherwise;
  std::function<void(const onnx::GraphProto &)> scan =
      [&](const onnx::GraphProto &graph) {
        for (const onnx::NodeProto &node : graph.node()) {
          bool quant =
              node.domain().empty() && (node.op_type() == "QuantizeLinear" ||
                                        node.op_type() == "DequantizeLinear");
          for (int i = 0; i < node.input_size(); ++i)
            (quant && i > 0 ? asParameter : otherwise).insert(node.input(i));
          for (const onnx::AttributeProto &a : node.attribute()) {
            if (a.has_g())
              scan(a.g());
            for (const onnx::GraphProto &sub : a.graphs())
              scan(sub);
          }
        }
        for (const onnx::ValueInfoProto &out : graph.output())
          otherwise.insert(out.name());
      };
  scan(g);
  llvm::StringSet<> only;
  for (const auto &name : asParameter)
    if (!otherwise.contains(name.getKey()))
      only.insert(name.getKey());
  return only;
}

//===----------------------------------------------------------------------===//
// The op registry
//===----------------------------------------------------------------------===//

const llvm::StringMap<OpEntry> &opRegistry() {
  static const llvm::StringMap<OpEntry> registry = [] {
    std::vector<OpEntry> ops;
    appendElementwiseOps(ops);
    appendTensorOps(ops);
    appendReductionOps(ops);
    appendNNOps(ops);
    appendConvOps(ops);
    appendNormPoolOps(ops);
    appendIndexingOps(ops);
    appendRandomOps(ops);
    appendGridSampleOps(ops);
    appendQuantOps(ops);
    appendSpectralOps(ops);
    appendAttentionOps(ops);
    appendSequenceOps(ops);
    appendSelectionOps(ops);
    appendOptimizerOps(ops);
    appendTextOps(ops);
    llvm::StringMap<OpEntry> map;
    for (const OpEntry &e : ops)
      map[opKey(e.domain, e.opType)] = e;
    return map;
  }();
  return registry;
}

std::string opKey(llvm::StringRef domain, llvm::StringRef opType) {
  if (isDefaultDomain(domain))
    return opType.str();
  return (domain + "." + opType).str();
}

std::vector<std::pair<std::string, int64_t>> supportedOps() {
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto &e : opRegistry())
    out.push_back({e.getKey().str(), e.getValue().minOpset});
  // The default domain's ops first, then the others by domain.
  auto qualified = [](const std::string &op) {
    return op.find('.') != std::string::npos;
  };
  // Imported by the graph importer itself (a compile-time condition).
  out.push_back({"If", 1});
  out.push_back({"Loop", 1});
  out.push_back({"Scan", 8});
  std::sort(out.begin(), out.end(), [&](const auto &a, const auto &b) {
    return std::make_pair(qualified(a.first), a) <
           std::make_pair(qualified(b.first), b);
  });
  return out;
}

//===----------------------------------------------------------------------===//
// GraphImporter
//===----------------------------------------------------------------------===//

GraphImporter::GraphImporter(MLIRContext *ctx, const onnx::ModelProto &model,
                             std::string fileName, std::string baseDir,
                             const ImportOptions &options)
    : ctx(ctx), model(model), fileName(std::move(fileName)),
      baseDir(std::move(baseDir)), options(options) {}

Location GraphImporter::fileLoc() {
  return FileLineColLoc::get(ctx, fileName, 0, 0);
}

/// The module path PyTorch's dynamo exporter records on a node
/// (NodeProto.metadata_props "pkg.torch.onnx.name_scopes", a Python list of
/// the scopes from the root: ['', 'm', 'm.transformer', 'm.transformer.h.0',
/// 'm.transformer.h.0.ln_1', 'layer_norm'], the last the op's own) in the
/// TorchScript exporter's form of node names: "/m/transformer/h.0/ln_1/";
/// empty without it. The layers and modules are read from that form
/// (LayerNames.h).
static std::string dynamoScope(const onnx::NodeProto &node) {
  std::string value = metadataValue(node, "pkg.torch.onnx.name_scopes");
  SmallVector<llvm::StringRef> scopes;
  for (llvm::StringRef rest(value);;) {
    size_t open = rest.find('\'');
    size_t close = rest.find('\'', open + 1);
    if (open == llvm::StringRef::npos || close == llvm::StringRef::npos)
      break;
    scopes.push_back(rest.slice(open + 1, close));
    rest = rest.drop_front(close + 1);
  }
  // The modules: every scope but the op's own (the last), each named as
  // TorchScript names a scope, by its attribute, a container's child with
  // its indices ("m.transformer.h.0" is "h.0", "stages.0.layers.0" under
  // the Sequential "stages.0.layers" is "layers.0", "m.features.0.1" is
  // "features.0.1").
  std::string path = "/";
  for (size_t i = 0; i + 1 < scopes.size(); ++i) {
    if (scopes[i].empty())
      continue;
    SmallVector<llvm::StringRef> parts;
    scopes[i].split(parts, '.');
    size_t first = parts.size() - 1;
    uint64_t index;
    while (first > 0 && !parts[first].getAsInteger(10, index))
      --first;
    path += llvm::join(llvm::ArrayRef(parts).drop_front(first), ".") + "/";
  }
  return path == "/" ? "" : path;
}

std::string GraphImporter::nodeName(const onnx::NodeProto &node, int index) {
  std::string name = node.name().empty()
                         ? node.op_type() + "_" + std::to_string(index)
                         : node.name();
  // A dynamo export's node names say nothing of the module
  // ("node_layer_norm"): its recorded scope does.
  if (std::string scope = dynamoScope(node);
      !scope.empty() && !llvm::StringRef(name).starts_with("/"))
    return scope + name;
  return name;
}

Value GraphImporter::stepCounter(OpBuilder &b) {
  if (step)
    return step;
  auto type = RankedTensorType::get({}, b.getI64Type());
  Location loc = NameLoc::get(b.getStringAttr("__step"), fileLoc());
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(module.getBody());
  auto zero = DenseElementsAttr::get(type, b.getI64IntegerAttr(0));
  auto var = graph::VariableOp::create(b, loc, "__step", type,
                                       cast<ElementsAttr>(zero), false);
  b.setInsertionPointToStart(&function.front());
  step = graph::LoadOp::create(b, loc, type, var.getSymName());
  return step;
}

Value GraphImporter::lookup(const std::string &name) {
  return values.lookup(name);
}

std::optional<DenseElementsAttr> GraphImporter::constantValueOf(Value v) {
  Attribute attr;
  if (auto c = v.getDefiningOp<graph::ConstantOp>())
    attr = c.getValue();
  else if (auto load = v.getDefiningOp<graph::LoadOp>())
    if (auto var = variables.lookup(load.getVariable()))
      attr = var.getInitialValueAttr();
  if (auto dense = dyn_cast_or_null<DenseElementsAttr>(attr))
    return dense;
  if (auto resource = dyn_cast_or_null<DenseResourceElementsAttr>(attr)) {
    AsmResourceBlob *blob = resource.getRawHandle().getBlob();
    if (!blob)
      return std::nullopt;
    auto type = cast<ShapedType>(resource.getType());
    ArrayRef<char> data = blob->getData();
    if (type.getElementType().isInteger(1)) {
      SmallVector<bool> bits(data.begin(), data.end());
      return DenseElementsAttr::get(type, bits);
    }
    bool isSplat = false;
    if (!DenseElementsAttr::isValidRawBuffer(type, data, isSplat))
      return std::nullopt;
    return DenseElementsAttr::getFromRawBuffer(type, data);
  }
  return std::nullopt;
}

FailureOr<ElementsAttr> GraphImporter::tensorToAttr(const onnx::TensorProto &t,
                                                    Location loc) {
  Type elementType = convertElementType(t.data_type(), ctx);
  if (!elementType)
    return emitError(loc, "tensor '")
           << t.name() << "' has element type " << onnxTypeName(t.data_type())
           << ", which dtcc does not support";
  auto decoded = runtime::decodeTensorProto(t, baseDir);
  if (!decoded.isOk())
    return emitError(loc, decoded.status().message());
  runtime::HostTensor host = std::move(decoded.value());
  auto type = RankedTensorType::get(host.shape, elementType);
  if (elementType.isInteger(1)) {
    SmallVector<bool> bits(host.bytes.begin(), host.bytes.end());
    return cast<ElementsAttr>(DenseElementsAttr::get(type, bits));
  }
  // Small tensors stay dense (they fold); large ones become resource blobs
  // that own the bytes without copying them into the attribute storage.
  if (host.bytes.size() <= kMaxDenseBytes)
    return cast<ElementsAttr>(DenseElementsAttr::getFromRawBuffer(
        type, ArrayRef<char>(reinterpret_cast<const char *>(host.bytes.data()),
                             host.bytes.size())));
  auto *owned = new std::vector<uint8_t>(std::move(host.bytes));
  AsmResourceBlob blob(
      ArrayRef<char>(reinterpret_cast<const char *>(owned->data()), owned->size()),
      alignof(std::max_align_t),
      [owned](void *, size_t, size_t) { delete owned; }, /*dataIsMutable=*/false);
  return cast<ElementsAttr>(DenseResourceElementsAttr::get(
      type, t.name().empty() ? "tensor" : t.name(), std::move(blob)));
}

int64_t GraphImporter::domainOpset(const onnx::NodeProto &node,
                                   int64_t opset) const {
  if (isDefaultDomain(node.domain()))
    return opset;
  auto it = opsets.find(node.domain());
  return it == opsets.end() ? -1 : it->second;
}

const onnx::OpSchema *GraphImporter::schemaOf(const onnx::NodeProto &node,
                                              int64_t opset) const {
  return onnx::OpSchemaRegistry::Schema(
      node.op_type(), domainOpset(node, opset),
      isDefaultDomain(node.domain()) ? "" : node.domain());
}

/// What dtcc takes from the other domains, from the registry:
/// "ai.onnx.preview.training's Adagrad, Adam and Momentum".
static std::string otherDomainsSupported() {
  std::map<std::string, std::vector<std::string>> byDomain;
  for (const auto &e : opRegistry())
    if (!isDefaultDomain(e.getValue().domain))
      byDomain[e.getValue().domain].push_back(e.getValue().opType);
  std::string text;
  for (auto &[domain, ops] : byDomain) {
    std::sort(ops.begin(), ops.end());
    if (!text.empty())
      text += "; ";
    text += domain + "'s ";
    for (size_t i = 0; i < ops.size(); ++i)
      text += (i == 0 ? "" : i + 1 == ops.size() ? " and " : ", ") + ops[i];
  }
  return text;
}

std::string GraphImporter::unsupportedReason(const onnx::NodeProto &node,
                                             int64_t opset) const {
  if (!isDefaultDomain(node.domain())) {
    const std::string &domain = node.domain();
    int64_t version = domainOpset(node, opset);
    std::string where =
        "domain " + domain + ", opset " +
        (version < 0 ? std::string("?") : std::to_string(version));
    auto it = opRegistry().find(opKey(domain, node.op_type()));
    if (it == opRegistry().end())
      return where + ": dtcc supports the default ONNX domain and " +
             otherDomainsSupported();
    if (version < it->second.minOpset)
      return where + ": dtcc supports " + node.op_type() + " from opset " +
             std::to_string(it->second.minOpset);
    return "";
  }
  if (node.op_type() == "If")
    return ""; // imported by inlining the branch its constant condition takes
  if (node.op_type() == "Loop")
    return ""; // imported by unrolling its known iterations
  if (node.op_type() == "Scan")
    return opset < 8 ? "domain ai.onnx, opset " + std::to_string(opset) +
                           ": dtcc supports Scan from opset 8"
                     : ""; // imported by unrolling its steps
  const auto &registry = opRegistry();
  auto it = registry.find(node.op_type());
  if (it == registry.end())
    return "domain ai.onnx, opset " + std::to_string(opset) +
           ": not in dtcc's op set";
  if (opset < it->second.minOpset)
    return "domain ai.onnx, opset " + std::to_string(opset) +
           ": dtcc supports " + node.op_type() + " from opset " +
           std::to_string(it->second.minOpset);
  return "";
}

LogicalResult GraphImporter::checkOps(int64_t opset) {
  std::string unsupported;
  int count = 0;
  for (int i = 0; i < model.graph().node_size(); ++i) {
    const onnx::NodeProto &node = model.graph().node(i);
    if (std::string why = unsupportedReason(node, opset); !why.empty()) {
      ++count;
      unsupported += "\n  node '" + nodeName(node, i) + "': " + node.op_type() +
                     " (" + why + ")";
    }
  }
  if (count)
    return emitError(fileLoc(), "unsupported ")
           << (count == 1 ? "op" : "ops") << " (" << count << "):" << unsupported;
  return success();
}

LogicalResult GraphImporter::checkArity(const onnx::NodeProto &node, int index,
                                        int64_t opset, Location loc) {
  // ONNX's schema registry knows the required inputs of ops up to opset 17;
  // the newer ops dtcc supports (Gelu) take one.
  const onnx::OpSchema *schema = schemaOf(node, opset);
  int required = schema ? schema->min_input() : 1;
  int present = 0;
  for (int i = 0; i < required && i < node.input_size(); ++i) {
    // An optional input before required ones (opset 8 Scan's
    // sequence_lens) may be left empty.
    bool optional = schema && i < int(schema->inputs().size()) &&
                    schema->inputs()[i].GetOption() ==
                        onnx::OpSchema::FormalParameterOption::Optional;
    present += !node.input(i).empty() || optional;
  }
  if (present < required)
    return emitError(loc, "node '")
           << nodeName(node, index) << "' (" << node.op_type()
           << "): expected at least " << required << " inputs, got " << present;
  // Optional outputs may be left out (an LSTM's Y when only Y_h is used).
  if (llvm::none_of(node.output(),
                    [](const std::string &o) { return !o.empty(); }))
    return emitError(loc, "node '")
           << nodeName(node, index) << "' (" << node.op_type()
           << "): expected an output";
  return success();
}

/// An element type as ONNX's type constraints spell it inside "tensor(...)"
/// ("float", "int8", "bool"); empty for none.
static std::string onnxElementName(Type t) {
  if (t.isF32())
    return "float";
  if (t.isF64())
    return "double";
  if (t.isF16())
    return "float16";
  if (t.isBF16())
    return "bfloat16";
  if (t.isInteger(1))
    return "bool";
  if (auto i = dyn_cast<IntegerType>(t))
    return (i.isUnsigned() ? "uint" : "int") + std::to_string(i.getWidth());
  return "";
}

/// Attributes ONNX's ops define as flags, 0 or 1. Other values differ
/// between runtimes (onnx's shape inference and ONNX Runtime take only 1
/// as set, PyTorch any nonzero value): an error, not a guess.
static constexpr llvm::StringLiteral kFlagAttributes[] = {
    "align_corners",
    "allowzero",
    "antialias",
    "broadcast",
    "ceil_mode",
    "count_include_pad",
    "detect_negative",
    "detect_positive",
    "exclude_outside",
    "exclusive",
    "fmod",
    "input_forget",
    "keepdims",
    "largest",
    "linear_before_reset",
    "new_axis",
    "noop_with_empty_axes",
    "reverse",
    "select_last_index",
    "sorted",
    "training_mode",
    "transA",
    "transB",
    "upper"};

LogicalResult GraphImporter::checkFlagAttributes(const onnx::NodeProto &node,
                                                 int index, Location loc) {
  for (const onnx::AttributeProto &attr : node.attribute()) {
    if (attr.type() != onnx::AttributeProto::INT || attr.i() == 0 ||
        attr.i() == 1 || !llvm::is_contained(kFlagAttributes, attr.name()))
      continue;
    return emitError(loc, "node '")
           << nodeName(node, index) << "' (" << node.op_type()
           << "): expected attribute " << attr.name() << " 0 or 1, got "
           << attr.i();
  }
  return success();
}

/// The kind of an ONNX element type name: bool, integer or floating point.
static char elementKind(llvm::StringRef name) {
  if (name == "bool")
    return 'b';
  return name.starts_with("int") || name.starts_with("uint") ? 'i' : 'f';
}

LogicalResult GraphImporter::checkInputTypes(const onnx::NodeProto &node,
                                             int index, int64_t opset,
                                             Location loc) {
  const onnx::OpSchema *schema = schemaOf(node, opset);
  if (!schema || schema->inputs().empty())
    return success();
  const auto &formals = schema->inputs();
  // The first input bound to each type parameter, with its element type.
  std::map<std::string, std::pair<int, std::string>> bound;
  for (int i = 0; i < node.input_size(); ++i) {
    const std::string &in = node.input(i);
    if (in.empty() || !values.count(in))
      continue; // absent, or a sequence
    const bool past = size_t(i) >= formals.size();
    const auto &formal = formals[past ? formals.size() - 1 : size_t(i)];
    if (past && formal.GetOption() != onnx::OpSchema::Variadic)
      break;
    const std::string &param = formal.GetTypeStr();
    if (llvm::StringRef(param).contains('('))
      continue; // a fixed type ("tensor(int64)"), which the handler reads
    Value v = values.lookup(in);
    const std::string name = onnxElementName(getElementTypeOrSelf(v.getType()));
    if (name.empty())
      continue;
    // Of a kind the parameter allows: types added in later opsets (bf16,
    // narrow integers) are not told apart from the ones this opset lists.
    std::set<std::string> allowed;
    bool kindAllowed = false;
    for (onnx::DataType t : formal.GetTypes()) {
      llvm::StringRef spelled(*t);
      if (!spelled.consume_front("tensor(") || !spelled.consume_back(")"))
        continue;
      allowed.insert(spelled.str());
      kindAllowed |= elementKind(spelled) == elementKind(name);
    }
    if (!allowed.empty() && !kindAllowed)
      return emitError(loc, "node '")
             << nodeName(node, index) << "' (" << node.op_type()
             << "): expected input " << i << " ('" << in << "') of ONNX's type "
             << param << " (" << llvm::join(allowed, ", ") << "), got "
             << v.getType();
    if (formal.GetOption() == onnx::OpSchema::Variadic &&
        !formal.GetIsHomogeneous())
      continue;
    // onnx 1.12's schema gives GridSample's grid the input's type T1; the
    // operator's specification, T2 (any float type).
    if (node.op_type() == "GridSample" && i == 1)
      continue;
    auto [first, fresh] = bound.try_emplace(param, i, name);
    if (!fresh && first->second.second != name)
      return emitError(loc, "node '")
             << nodeName(node, index) << "' (" << node.op_type()
             << "): expected inputs " << first->second.first << " and " << i
             << " of one element type (ONNX's type " << param << "), got '"
             << first->second.second << "' and '" << name << "'";
  }
  return success();
}

LogicalResult GraphImporter::checkSize(Value v, Location loc,
                                       const std::string &node) {
  auto type = cast<RankedTensorType>(v.getType());
  int64_t n = 1;
  for (int64_t d : type.getShape()) {
    if (d < 0 || (d != 0 && n > kMaxElements / d))
      return emitError(loc, "node '")
             << node << "' produces a tensor of shape " << type
             << ", beyond dtcc's limit of 2^48 elements";
    n *= d;
  }
  return success();
}

FailureOr<RankedTensorType>
GraphImporter::inputType(const onnx::ValueInfoProto &info) {
  if (!info.type().has_tensor_type())
    return emitError(fileLoc(), "input '")
           << info.name() << "' is not a tensor (sequences, maps and optionals "
           << "are not supported)";
  const auto &tt = info.type().tensor_type();
  Type elementType = convertElementType(tt.elem_type(), ctx);
  if (!elementType)
    return emitError(fileLoc(), "input '")
           << info.name() << "' has element type " << onnxTypeName(tt.elem_type())
           << ", which dtcc does not support";
  auto given = options.inputShapes.find(info.name());
  if (given != options.inputShapes.end()) {
    // The user's sizes win over the model's, with a warning: models do
    // declare wrong static shapes (ONNX's own CastLike tests among them).
    if (tt.has_shape()) {
      bool differs = tt.shape().dim_size() != (int)given->second.size();
      std::string declared;
      for (int d = 0; d < tt.shape().dim_size(); ++d) {
        const auto &dim = tt.shape().dim(d);
        declared += (d ? "x" : "") + (dim.has_dim_value()
                                          ? std::to_string(dim.dim_value())
                                          : std::string("?"));
        differs |= !differs && dim.has_dim_value() &&
                   dim.dim_value() != given->second[d];
      }
      if (differs) {
        std::string requested;
        for (auto [i, d] : llvm::enumerate(given->second))
          requested += (i ? "x" : "") + std::to_string(d);
        emitWarning(fileLoc(), "--input-shape gives '")
            << info.name() << "' the shape "
            << (requested.empty() ? "scalar" : requested)
            << " where the model declares "
            << (declared.empty() ? "scalar" : declared);
      }
    }
    return RankedTensorType::get(given->second, elementType);
  }
  if (!tt.has_shape())
    return emitError(fileLoc(), "input '")
           << info.name() << "' has no shape; give it with --input-shape "
           << info.name() << "=D0xD1x...";
  SmallVector<int64_t> shape;
  for (int d = 0; d < tt.shape().dim_size(); ++d) {
    const auto &dim = tt.shape().dim(d);
    if (dim.has_dim_value() && dim.dim_value() >= 0) {
      shape.push_back(dim.dim_value());
      continue;
    }
    auto named = dim.has_dim_param() ? options.dimSizes.find(dim.dim_param())
                                     : options.dimSizes.end();
    if (named != options.dimSizes.end()) {
      shape.push_back(named->second);
      continue;
    }
    // The flags that would size it, spelled out: the input's whole shape
    // with its known dimensions, the symbolic ones by name.
    std::string spelled;
    for (int e = 0; e < tt.shape().dim_size(); ++e) {
      const auto &de = tt.shape().dim(e);
      spelled += (e ? "x" : "") +
                 (de.has_dim_value() && de.dim_value() >= 0
                      ? std::to_string(de.dim_value())
                      : "<" +
                            (de.has_dim_param() ? de.dim_param()
                                                : "D" + std::to_string(e)) +
                            ">");
    }
    auto diag = emitError(fileLoc(), "input '")
                << info.name() << "' has a symbolic dimension "
                << (dim.has_dim_param() ? "'" + dim.dim_param() + "' " : "")
                << "(dim " << d << "); give its size with ";
    if (dim.has_dim_param())
      diag << "--dim " << dim.dim_param() << "=N (every input's '"
           << dim.dim_param() << "') or ";
    return diag << "--input-shape " << info.name() << "=" << spelled;
  }
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d != 0 && n > kMaxElements / d)
      return emitError(fileLoc(), "input '")
             << info.name() << "' has more than 2^48 elements";
    n *= d;
  }
  return RankedTensorType::get(shape, elementType);
}

FailureOr<OwningOpRef<ModuleOp>> GraphImporter::run() {
  ctx->loadDialect<graph::GraphDialect, func::FuncDialect>();
  const onnx::GraphProto &g = model.graph();

  // Opsets.
  int64_t opset = -1;
  for (const auto &imp : model.opset_import()) {
    opsets[imp.domain()] = imp.version();
    if (isDefaultDomain(imp.domain()))
      opset = imp.version();
  }
  // A model of other domains only has no default opset; checkOps then
  // reports each of its ops.
  if (opset > kMaxOpset)
    return emitError(fileLoc(), "the model uses opset ")
           << opset << "; dtcc supports opsets up to " << kMaxOpset;
  if (failed(checkOps(opset)))
    return failure();
  // Models written by `dtcc zoo --no-weights` hold shapes only.
  bool loadWeights = options.loadWeights;
  for (const auto &prop : model.metadata_props())
    if (prop.key() == "dtcc.no_weights" && prop.value() == "1")
      loadWeights = false;

  OwningOpRef<ModuleOp> owned = ModuleOp::create(fileLoc());
  module = *owned;
  OpBuilder b(ctx);
  b.setInsertionPointToEnd(module.getBody());
  if (!g.name().empty())
    module->setAttr(dtcc::graph::kModelAttr, b.getStringAttr(g.name()));

  // Initializers: floats are weights (variables), the rest constants. An
  // export that carries torch.export's signature says which are the
  // module's: its parameters train, its buffers (running statistics) are
  // state, and the exporter's own constants (a mask, a GELU coefficient, an
  // exponent) are constants, where every float would otherwise train.
  // Without one, a float read only as a quantization scale is state.
  TorchExportSignature signature = torchExportSignature(g);
  llvm::StringSet<> quantParams = quantizationParameters(g);
  llvm::StringSet<> initializerNames;
  int64_t exporterConstants = 0;
  SmallVector<std::string> folded;
  SmallVector<Attribute> constantNames;
  for (const onnx::TensorProto &t : g.initializer()) {
    if (!initializerNames.insert(t.name()).second)
      return emitError(NameLoc::get(b.getStringAttr(t.name()), fileLoc()),
                       "initializer '")
             << t.name() << "' is defined twice (an ONNX graph names each "
             << "value once)";
    // PyTorch names the tensors its exporter folds "onnx::<Op>_<n>": a
    // parameter folded with a transpose is no longer that parameter (tied
    // weights come apart, names change).
    if (options.training && llvm::StringRef(t.name()).starts_with("onnx::") &&
        convertElementType(t.data_type(), ctx) &&
        isa<FloatType>(convertElementType(t.data_type(), ctx)))
      folded.push_back(t.name());
    Location loc = NameLoc::get(b.getStringAttr(t.name()), fileLoc());
    Type elementType = convertElementType(t.data_type(), ctx);
    if (!elementType)
      return emitError(loc, "initializer '")
             << t.name() << "' has element type " << onnxTypeName(t.data_type())
             << ", which dtcc does not support";
    SmallVector<int64_t> shape(t.dims().begin(), t.dims().end());
    auto type = RankedTensorType::get(shape, elementType);
    bool isWeight = isa<FloatType>(elementType);
    // Quantization scales are state, as PyTorch's buffers (not trained).
    bool trainable = !quantParams.contains(t.name());
    if (isWeight && !signature.kinds.empty()) {
      auto kind = signature.kinds.find(t.name());
      std::string k = kind == signature.kinds.end() ? "" : kind->second;
      trainable = k == "PARAMETER";
      isWeight = trainable || k == "BUFFER";
      exporterConstants += !isWeight;
    }
    ElementsAttr value;
    if (loadWeights || !isWeight) {
      auto attr = tensorToAttr(t, loc);
      if (failed(attr))
        return failure();
      value = *attr;
    }
    if (isWeight) {
      auto var =
          graph::VariableOp::create(b, loc, t.name(), type, value, trainable);
      variables[t.name()] = var;
    } else {
      constantInitializers[t.name()] = value;
      constantNames.push_back(b.getStringAttr(t.name()));
    }
  }
  // `--frozen` may name them (autodiff reads this).
  if (options.training && !constantNames.empty())
    module->setAttr(dtcc::graph::kConstantInitializersAttr,
                    b.getArrayAttr(constantNames));

  // torch.onnx.export's graph optimizer (optimize=True, its default) lifts
  // the exporter's constants into initializers, and also merges initializers
  // of equal value (every norm's ones become one tensor) and drops zero
  // biases: the graph then trains fewer, shared tensors than the module.
  if (options.training && exporterConstants > 0) {
    SmallVector<llvm::StringRef> missing;
    for (const std::string &p : signature.parameters)
      if (!initializerNames.contains(p))
        missing.push_back(p);
    if (!missing.empty()) {
      std::string names;
      for (auto [i, p] : llvm::enumerate(missing)) {
        if (i == 3) {
          names += ", ...";
          break;
        }
        names += (i ? ", " : "") + p.str();
      }
      emitWarning(fileLoc())
          << missing.size() << " of the module's "
          << signature.parameters.size() << " parameters "
          << (missing.size() == 1 ? "is not an initializer"
                                  : "are not initializers")
          << " of this optimized export (" << names
          << "): torch.onnx.export's optimizer (optimize=True, the default) "
             "merges initializers of equal value and drops zero biases, so "
             "dtcc trains fewer, shared tensors than PyTorch would (a tied "
             "parameter appears once either way); export with "
             "optimize=False to train the module's own";
    }
  }

  // Flags that name inputs must name real ones.
  for (const auto &[name, path] : options.bindings) {
    bool found = false;
    for (const onnx::ValueInfoProto &info : g.input())
      found |= info.name() == name;
    if (!found)
      return emitError(fileLoc(), "--bind names '")
             << name << "', which is not an input of the graph";
  }
  for (const auto &[name, shape] : options.inputShapes) {
    bool found = false;
    for (const onnx::ValueInfoProto &info : g.input())
      found |= info.name() == name;
    if (!found)
      return emitError(fileLoc(), "--input-shape names '")
             << name << "', which is not an input of the graph";
  }
  for (const auto &[name, size] : options.dimSizes) {
    bool found = false;
    for (const onnx::ValueInfoProto &info : g.input())
      for (const auto &dim : info.type().tensor_type().shape().dim())
        found |= dim.has_dim_param() && dim.dim_param() == name;
    if (!found)
      return emitError(fileLoc(), "--dim names '")
             << name << "', which is no symbolic dimension of the graph's "
             << "inputs";
  }

  if (!folded.empty()) {
    auto diag = emitWarning(fileLoc())
                << folded.size()
                << " initializers were produced by constant folding at export ("
                << folded.front() << (folded.size() > 1 ? ", ..." : "")
                << "): dtcc trains each as a parameter of its own; export with "
                   "do_constant_folding=False to keep parameter names and "
                   "tied weights";
  }

  // The signature: graph inputs that are not initializers and not bound.
  SmallVector<const onnx::ValueInfoProto *> inputs;
  SmallVector<Type> argTypes;
  llvm::StringMap<ElementsAttr> bound;
  for (const onnx::ValueInfoProto &info : g.input()) {
    if (initializerNames.contains(info.name()))
      continue;
    auto it = options.bindings.find(info.name());
    if (it != options.bindings.end()) {
      auto t = runtime::readTensorFile(it->second);
      if (!t.isOk())
        return emitError(fileLoc(), "--bind ")
               << info.name() << ": " << t.status().message();
      onnx::TensorProto proto;
      proto.set_name(info.name());
      proto.set_data_type(static_cast<int32_t>(t.value().dtype));
      for (int64_t d : t.value().shape)
        proto.add_dims(d);
      proto.set_raw_data(t.value().bytes.data(), t.value().bytes.size());
      auto attr = tensorToAttr(proto, fileLoc());
      if (failed(attr))
        return failure();
      bound[info.name()] = *attr;
      continue;
    }
    auto type = inputType(info);
    if (failed(type))
      return failure();
    inputs.push_back(&info);
    argTypes.push_back(*type);
  }
  auto fn = func::FuncOp::create(b, fileLoc(), "main",
                                 FunctionType::get(ctx, argTypes, {}));
  function = fn;
  SmallVector<Location> argLocs;
  for (const onnx::ValueInfoProto *info : inputs)
    argLocs.push_back(NameLoc::get(b.getStringAttr(info->name()), fileLoc()));
  Block *body = b.createBlock(&fn.getBody(), {}, argTypes, argLocs);
  for (auto [i, info] : llvm::enumerate(inputs)) {
    fn.setArgAttr(i, dtcc::graph::kNameAttr, b.getStringAttr(info->name()));
    values[info->name()] = body->getArgument(i);
  }
  b.setInsertionPointToStart(body);
  for (const onnx::TensorProto &t : g.initializer()) {
    Location loc = NameLoc::get(b.getStringAttr(t.name()), fileLoc());
    if (auto var = variables.lookup(t.name()))
      values[t.name()] = graph::LoadOp::create(b, loc, var.getTensorType(),
                                               var.getSymName());
    else if (auto c = constantInitializers.lookup(t.name()))
      values[t.name()] = graph::ConstantOp::create(b, loc, c);
  }
  for (auto &entry : bound)
    values[entry.getKey().str()] = graph::ConstantOp::create(
        b, NameLoc::get(b.getStringAttr(entry.getKey()), fileLoc()),
        entry.getValue());

  // Nodes, in the graph's (topological) order.
  for (int i = 0; i < g.node_size(); ++i)
    if (failed(importNode(g.node(i), i, opset, b,
                          FileLineColLoc::get(ctx, fileName, i + 1, 0))))
      return failure();

  // Results.
  SmallVector<Value> results;
  for (const onnx::ValueInfoProto &info : g.output()) {
    Value v = values.lookup(info.name());
    if (!v && sequences.count(info.name()))
      return emitError(fileLoc(), "graph output '")
             << info.name() << "' is a sequence of "
             << sequences.lookup(info.name()).items.size()
             << " tensors: dtcc's programs return tensors (concatenate them "
                "with ConcatFromSequence, or return each one)";
    if (!v)
      return emitError(fileLoc(), "graph output '")
             << info.name() << "' is not produced by any node";
    if (const Selection *s = selectionOf(v))
      return emitError(fileLoc(), "graph output '")
             << info.name()
             << "' has a data-dependent shape (the elements NonZero node '"
             << s->node
             << "' selects): dtcc's programs have static shapes; reduce "
                "the selection in the graph (a sum, a mean, a loss) or "
                "return the mask";
    if (rowShapes.count(v))
      return emitError(fileLoc(), "graph output '")
             << info.name() << "' is the shape of the elements NonZero node '"
             << rowShapes.lookup(v)
             << "' selects, whose number is data-dependent: count them with "
                "a ReduceSum of the mask";
    if (failed(checkDeclaredType(info, v)))
      return failure();
    results.push_back(v);
  }
  func::ReturnOp::create(b, fileLoc(), results);
  fn.setFunctionType(FunctionType::get(ctx, argTypes, ValueRange(results).getTypes()));
  for (auto [i, info] : llvm::enumerate(g.output()))
    fn.setResultAttr(i, dtcc::graph::kNameAttr, b.getStringAttr(info.name()));
  // A training graph whose batch norms normalize with their running
  // statistics (training_mode 0) is an inference export (torch.onnx.export
  // with dynamo=True writes one even from a module in train()): it trains,
  // but not as the module in train() mode would.
  if (options.training) {
    int64_t inference = 0;
    std::string first;
    fn.walk([&](graph::BatchNormOp op) {
      if (op.getTraining())
        return;
      if (!inference++)
        if (auto name = dyn_cast<NameLoc>(op.getLoc()))
          first = name.getName().str();
    });
    if (inference)
      emitWarning(fileLoc())
          << inference << " BatchNormalization node"
          << (inference == 1 ? " ('" : "s (the first '") << first
          << (inference == 1 ? "') normalizes" : "') normalize")
          << " with the running statistics (training_mode 0, "
             "an inference export): training keeps those statistics fixed "
             "and never uses the batch's, as PyTorch's eval() mode; export "
             "the module in train() mode with torch.onnx.export(..., "
             "training=torch.onnx.TrainingMode.TRAINING, dynamo=False) for "
             "batch statistics";
  }
  // Where each op sits (layer, top-level module), read from the node names
  // here once; later passes read the attributes.
  markLayersFromNames(module);
  // The handlers check what they build: an op that does not verify now
  // is the importer's bug.
  ScopedDiagnosticHandler internal(ctx, [](Diagnostic &d) {
    if (d.getSeverity() == DiagnosticSeverity::Error) {
      Diagnostic rewritten(d.getLocation(), DiagnosticSeverity::Error);
      rewritten << "dtcc: internal error: the ONNX importer produced invalid IR: "
                << d.str();
      for (Diagnostic &note : d.getNotes())
        rewritten.attachNote(note.getLocation()) << note.str();
      d = std::move(rewritten);
    }
    return failure(); // printed by the caller's handler
  });
  if (failed(verify(module)))
    return failure();
  return owned;
}

LogicalResult GraphImporter::importNode(const onnx::NodeProto &node, int index,
                                        int64_t opset, OpBuilder &b,
                                        Location line) {
  std::string name = nodeName(node, index);
  // What a fatal error or crash report names (compiler/InternalErrors.h).
  llvm::PrettyStackTraceFormat importing("importing ONNX node '%s' (%s)",
                                         name.c_str(), node.op_type().c_str());
  Location loc = NameLoc::get(b.getStringAttr(name), line);
  for (const std::string &in : node.input())
    if (!in.empty() && !values.count(in) && !sequences.count(in))
      return emitError(loc, "node '")
             << name << "' (" << node.op_type() << ") uses '" << in
             << "', which no earlier node, input or initializer defines";
  if (failed(checkArity(node, index, opset, loc)) ||
      failed(checkFlagAttributes(node, index, loc)))
    return failure();
  // Top-level nodes were checked (checkOps); a branch's or loop body's are
  // checked here.
  if (std::string why = unsupportedReason(node, opset); !why.empty())
    return emitError(loc, "node '")
           << name << "': " << node.op_type() << " (" << why
           << "), in an If branch or a Loop's or Scan's body: unsupported op";
  for (auto [i, in] : llvm::enumerate(node.input()))
    if (sequences.count(in) && !takesSequence(node.op_type(), i))
      return emitError(loc, "node '")
             << name << "' (" << node.op_type() << "): input " << i << " '"
             << in << "' is a sequence where the op takes a tensor";
  bool readsSelection = llvm::any_of(node.input(), [&](const std::string &in) {
    return !in.empty() && values.count(in) &&
           selections.count(values.lookup(in));
  });
  bool readsRowShape = llvm::any_of(node.input(), [&](const std::string &in) {
    return !in.empty() && values.count(in) &&
           rowShapes.count(values.lookup(in));
  });
  if (readsSelection || readsRowShape) {
    if (failed(readsSelection ? importOnSelection(node, opset, b, loc)
                              : importOnRowShape(node, opset, b, loc)) ||
        failed(checkInputTypes(node, index, opset, loc)))
      return failure();
  } else if (node.op_type() == "If") {
    if (failed(importIf(node, name, opset, b, loc, line)))
      return failure();
  } else if (node.op_type() == "Loop") {
    if (failed(importLoop(node, name, opset, b, loc, line)))
      return failure();
  } else if (node.op_type() == "Scan") {
    if (failed(importScan(node, name, opset, b, loc, line)))
      return failure();
  } else {
    if (failed(importWithInputs(node, {}, opset, b, loc)) ||
        failed(checkInputTypes(node, index, opset, loc)))
      return failure();
  }
  for (const std::string &out : node.output()) {
    if (out.empty() || !values.count(out))
      continue;
    if (failed(checkSize(values.lookup(out), loc, name)))
      return failure();
  }
  for (int o = 0; o < node.output_size(); ++o)
    if (!node.output(o).empty() && !values.count(node.output(o)) &&
        !sequences.count(node.output(o)))
      return emitError(loc, "node '")
             << name << "' (" << node.op_type()
             << ") does not produce its output " << o << " '"
             << node.output(o) << "' in dtcc";
  return success();
}

/// The value of a one-element integer (bool) constant, as a condition.
static std::optional<bool> booleanOf(DenseElementsAttr dense) {
  if (dense.getNumElements() != 1 || !isa<IntegerType>(dense.getElementType()))
    return std::nullopt;
  return dense.getElementType().isInteger(1)
             ? *dense.value_begin<bool>()
             : !(*dense.value_begin<APInt>()).isZero();
}

LogicalResult GraphImporter::defineConstants(const onnx::GraphProto &g,
                                             OpBuilder &b, Location line) {
  for (const onnx::TensorProto &t : g.initializer()) {
    Location at = NameLoc::get(b.getStringAttr(t.name()), line);
    auto attr = tensorToAttr(t, at);
    if (failed(attr))
      return failure();
    values[t.name()] = graph::ConstantOp::create(b, at, *attr);
  }
  return success();
}

LogicalResult GraphImporter::importIf(const onnx::NodeProto &node,
                                      const std::string &name, int64_t opset,
                                      OpBuilder &b, Location loc,
                                      Location line) {
  // Only a condition known now (a constant, or folded from shapes, as
  // PyTorch's exports of LocalResponseNorm and F.interpolate compute it)
  // picks a branch: dgraph has no control flow, and a variable's value
  // changes as it trains. One computed from graph inputs is an error that
  // names them (--bind makes them constants), as for any input that must
  // be known at compile time.
  NodeImporter n(*this, node, opset, b, loc);
  auto dense = n.constantInput(0, "the condition");
  if (failed(dense))
    return failure();
  std::optional<bool> condition = booleanOf(*dense);
  if (!condition)
    return n.error() << "expected the condition to be one boolean, got "
                     << dense->getType();
  bool taken = *condition;
  const onnx::GraphProto *branch = nullptr;
  for (const onnx::AttributeProto &a : node.attribute())
    if (a.name() == (taken ? "then_branch" : "else_branch") && a.has_g())
      branch = &a.g();
  if (!branch)
    return emitError(loc, "node '")
           << name << "' (If): expected the attribute "
           << (taken ? "then_branch" : "else_branch") << " (a graph)";
  if (branch->output_size() != node.output_size())
    return emitError(loc, "node '")
           << name << "' (If): its " << (taken ? "then" : "else")
           << " branch has " << branch->output_size()
           << " outputs, the node " << node.output_size();
  if (failed(defineConstants(*branch, b, line)))
    return failure();
  for (int i = 0; i < branch->node_size(); ++i) {
    const onnx::NodeProto &inner = branch->node(i);
    // Nodes of a branch are often unnamed: name them after the If.
    onnx::NodeProto named = inner;
    if (named.name().empty())
      named.set_name(name + "/" + nodeName(inner, i));
    if (failed(importNode(named, i, opset, b, line)))
      return failure();
  }
  for (int o = 0; o < node.output_size(); ++o) {
    if (node.output(o).empty())
      continue;
    const std::string &out = branch->output(o).name();
    if (sequences.count(out)) {
      sequences[node.output(o)] = sequences.lookup(out);
      continue;
    }
    Value v = values.lookup(out);
    if (!v)
      return emitError(loc, "node '") << name << "' (If): branch output '"
                                      << out << "' is not produced by any node";
    values[node.output(o)] = v;
  }
  return success();
}

/// `parts` (of one shape) stacked along a new dimension `axis`.
static FailureOr<Value> stack(NodeImporter &n, ArrayRef<Value> parts,
                              int64_t axis) {
  SmallVector<Value> widened;
  for (Value v : parts) {
    auto t = cast<RankedTensorType>(v.getType());
    SmallVector<int64_t> shape(t.getShape());
    shape.insert(shape.begin() + axis, 1);
    widened.push_back(n.reshape(v, shape));
  }
  return concatenate(n, widened, axis);
}

/// `x`'s slices along `axis`, each without that dimension.
static SmallVector<Value> unstack(NodeImporter &n, Value x, int64_t axis) {
  auto t = cast<RankedTensorType>(x.getType());
  SmallVector<int64_t> shape(t.getShape());
  shape.erase(shape.begin() + axis);
  SmallVector<Value> slices;
  for (Value piece :
       splitAlong(n, x, axis, SmallVector<int64_t>(t.getDimSize(axis), 1)))
    slices.push_back(n.reshape(piece, shape));
  return slices;
}

FailureOr<SmallVector<GraphImporter::BodyValue>>
GraphImporter::inlineBody(const onnx::GraphProto &body,
                          ArrayRef<BodyValue> inputs, const std::string &scope,
                          int64_t opset, OpBuilder &b, Location line,
                          NodeImporter &owner) {
  for (auto [info, v] : llvm::zip(body.input(), inputs)) {
    values.erase(info.name());
    sequences.erase(info.name());
    if (auto *seq = std::get_if<Sequence>(&v))
      sequences[info.name()] = *seq;
    else
      values[info.name()] = std::get<Value>(v);
  }
  if (failed(defineConstants(body, b, line)))
    return failure();
  for (int i = 0; i < body.node_size(); ++i) {
    onnx::NodeProto named = body.node(i);
    named.set_name(scope + nodeName(body.node(i), i));
    if (failed(importNode(named, i, opset, b, line)))
      return failure();
  }
  SmallVector<BodyValue> outs;
  for (const onnx::ValueInfoProto &o : body.output()) {
    if (Value v = values.lookup(o.name()))
      outs.push_back(v);
    else if (auto it = sequences.find(o.name()); it != sequences.end())
      outs.push_back(it->second);
    else
      return owner.error() << "its body's output '" << o.name()
                           << "' is not produced by any node";
  }
  return outs;
}

LogicalResult GraphImporter::importScan(const onnx::NodeProto &node,
                                        const std::string &name, int64_t opset,
                                        OpBuilder &b, Location loc,
                                        Location line) {
  // Unrolled, one step per element of the scan inputs along their scan
  // axis: every extent is static, so the number of steps is known. Opset
  // 8's Scan takes a batch of sequences ([batch, sequence, ...] scan
  // inputs, [batch, ...] states; an optional sequence_lens, which must
  // leave every sequence whole): one scan per batch element, its results
  // stacked along the batch.
  NodeImporter n(*this, node, opset, b, loc);
  const onnx::GraphProto *body = nullptr;
  for (const onnx::AttributeProto &a : node.attribute())
    if (a.name() == "body" && a.has_g())
      body = &a.g();
  int64_t m = n.attrInt("num_scan_inputs", -1);
  bool batched = opset < 9;
  int first = batched ? 1 : 0; // opset 8's input 0: sequence_lens
  int states = node.input_size() - first - int(m);
  if (!body || m < 1 || states < 0)
    return n.error() << "expected a body graph and num_scan_inputs between 1 "
                        "and the number of inputs";
  int scanOutputs = body->output_size() - states;
  if (body->input_size() != states + m || scanOutputs < 0 ||
      node.output_size() > body->output_size())
    return n.error() << "expected a body of " << states + m << " inputs ("
                     << states << " states, " << m
                     << " scan inputs) and at least " << states
                     << " outputs, got " << body->input_size() << " and "
                     << body->output_size();
  auto inAxes = listAttr(n, "scan_input_axes", m, 0);
  auto inDirections =
      listAttr(n, batched ? "directions" : "scan_input_directions", m, 0, 0);
  auto outAxes = listAttr(n, "scan_output_axes", scanOutputs, 0);
  auto outDirections = listAttr(n, "scan_output_directions", scanOutputs, 0, 0);
  if (failed(inAxes) || failed(inDirections) || failed(outAxes) ||
      failed(outDirections))
    return failure();
  // (importNode has refused sequences: Scan takes none.)
  SmallVector<Value> init, scanned;
  for (int i = first; i < node.input_size(); ++i)
    (i < first + states ? init : scanned).push_back(n.input(i));
  // The batch: opset 8's leading dimension, else one.
  int64_t batch = 1;
  if (batched) {
    batch = cast<RankedTensorType>(scanned[0].getType()).getDimSize(0);
    for (Value v : llvm::concat<Value>(init, scanned))
      if (auto t = cast<RankedTensorType>(v.getType());
          t.getRank() < 1 || t.getDimSize(0) != batch)
        return n.error() << "expected every input to lead with the batch ("
                         << batch << "), got " << t;
  }
  for (int64_t &axis : *inAxes) {
    int64_t j = &axis - inAxes->data();
    int64_t rank =
        cast<RankedTensorType>(scanned[j].getType()).getRank() - batched;
    auto normalized = n.normalizeAxis(batched ? 0 : axis, rank);
    if (failed(normalized))
      return failure();
    axis = *normalized;
  }
  int64_t length = -1;
  for (auto [j, v] : llvm::enumerate(scanned)) {
    int64_t extent =
        cast<RankedTensorType>(v.getType()).getDimSize((*inAxes)[j] + batched);
    if (length >= 0 && extent != length)
      return n.error() << "expected its scan inputs of one length along "
                          "their scan axes, got "
                       << length << " and " << extent << " (scan input " << j
                       << ")";
    length = extent;
  }
  if (length < 1)
    return n.error() << "scans no element, so its scan outputs have no shape";
  constexpr int64_t kMaxSteps = 4096;
  if (length * batch > kMaxSteps)
    return n.error() << "unrolls at most " << kMaxSteps << " steps; this scan "
                     << "runs " << length * batch;
  if (batched && n.hasInput(0)) {
    auto lens = n.constantInts(0, "sequence_lens");
    if (failed(lens))
      return failure();
    if (llvm::any_of(*lens, [&](int64_t l) { return l != length; }))
      return n.error() << "expected every sequence_lens entry to be the "
                          "sequence length "
                       << length << ": dtcc does not scan shorter sequences";
  }
  // Each input per batch element (opset 8's cut along the batch once).
  auto perElement = [&](Value v) {
    return batched ? unstack(n, v, 0) : SmallVector<Value>{v};
  };
  SmallVector<SmallVector<Value>> initOf, scannedOf;
  for (Value v : init)
    initOf.push_back(perElement(v));
  for (Value v : scanned)
    scannedOf.push_back(perElement(v));
  // Per batch element: the final states and each scan output's stack.
  SmallVector<SmallVector<Value>> finals(states), stacks(scanOutputs);
  for (int64_t e = 0; e < batch; ++e) {
    SmallVector<Value> state;
    for (const SmallVector<Value> &v : initOf)
      state.push_back(v[e]);
    SmallVector<SmallVector<Value>> steps;
    for (auto [j, v] : llvm::enumerate(scannedOf))
      steps.push_back(unstack(n, v[e], (*inAxes)[j]));
    SmallVector<SmallVector<Value>> collected(scanOutputs);
    for (int64_t t = 0; t < length; ++t) {
      std::string scope = name + "/" +
                          (batched ? std::to_string(e) + "/" : "") +
                          std::to_string(t) + "/";
      SmallVector<BodyValue> inputs(state.begin(), state.end());
      for (int64_t j = 0; j < m; ++j)
        inputs.push_back(steps[j][(*inDirections)[j] ? length - 1 - t : t]);
      auto bodyOutputs = inlineBody(*body, inputs, scope, opset, b, line, n);
      if (failed(bodyOutputs))
        return failure();
      SmallVector<Value> outs;
      for (auto [k, v] : llvm::enumerate(*bodyOutputs)) {
        if (!std::holds_alternative<Value>(v))
          return n.error() << "expected its body's output '"
                           << body->output(k).name()
                           << "' to be a tensor, got a sequence";
        outs.push_back(std::get<Value>(v));
      }
      for (int k = 0; k < states; ++k) {
        if (outs[k].getType() != state[k].getType())
          return n.error() << "expected state " << k << " to keep its type "
                           << state[k].getType() << ", got "
                           << outs[k].getType() << " at step " << t;
        state[k] = outs[k];
      }
      for (int k = 0; k < scanOutputs; ++k)
        collected[k].push_back(outs[states + k]);
    }
    for (int k = 0; k < states; ++k)
      finals[k].push_back(state[k]);
    for (int k = 0; k < scanOutputs; ++k) {
      if ((*outDirections)[k])
        std::reverse(collected[k].begin(), collected[k].end());
      int64_t rank =
          cast<RankedTensorType>(collected[k][0].getType()).getRank() + 1;
      auto axis = n.normalizeAxis((*outAxes)[k], rank);
      if (failed(axis))
        return failure();
      auto stacked = stack(n, collected[k], *axis);
      if (failed(stacked))
        return failure();
      stacks[k].push_back(*stacked);
    }
  }
  auto result = [&](ArrayRef<Value> perBatch) -> FailureOr<Value> {
    return batched ? stack(n, perBatch, 0) : FailureOr<Value>(perBatch[0]);
  };
  for (int o = 0; o < node.output_size(); ++o) {
    if (node.output(o).empty())
      continue;
    auto v = result(o < states ? finals[o] : stacks[o - states]);
    if (failed(v))
      return failure();
    values[node.output(o)] = *v;
  }
  return success();
}

LogicalResult GraphImporter::importLoop(const onnx::NodeProto &node,
                                        const std::string &name, int64_t opset,
                                        OpBuilder &b, Location loc,
                                        Location line) {
  // Unrolled: dgraph has no control flow, so the trip count (M) and every
  // iteration's condition must be known now. A body that computes its
  // condition from the carried values (a while loop) stops where the
  // condition folds to false.
  NodeImporter n(*this, node, opset, b, loc);
  std::optional<int64_t> trips;
  if (n.hasInput(0)) {
    auto m = n.constantInts(0, "the trip count M");
    if (failed(m))
      return failure();
    if (m->size() != 1 || (*m)[0] < 0)
      return n.error() << "expected a trip count M of one integer >= 0";
    trips = (*m)[0];
  }
  bool running = true;
  if (n.hasInput(1)) {
    auto dense = n.constantInput(1, "the condition", "dtcc unrolls loops");
    if (failed(dense))
      return failure();
    std::optional<bool> c = booleanOf(*dense);
    if (!c)
      return n.error() << "expected the condition (input 1) to be one "
                          "boolean";
    running = *c;
  }
  // The largest number of iterations dtcc unrolls.
  constexpr int64_t kMaxIterations = 4096;
  if (!trips && !n.hasInput(1))
    return n.error() << "expected a trip count M or a condition: a loop "
                        "without either never ends";
  const onnx::GraphProto *body = nullptr;
  for (const onnx::AttributeProto &a : node.attribute())
    if (a.name() == "body" && a.has_g())
      body = &a.g();
  int carried = node.input_size() - 2;
  if (!body || body->input_size() != carried + 2 ||
      body->output_size() < carried + 1 ||
      node.output_size() > body->output_size() - 1)
    return n.error() << "expected a body graph of " << carried + 2
                     << " inputs (iteration, condition, " << carried
                     << " carried values) and at least " << carried + 1
                     << " outputs (condition, carried values, scan outputs)";
  int scans = body->output_size() - 1 - carried;
  SmallVector<BodyValue> state;
  for (int k = 0; k < carried; ++k) {
    if (const Sequence *seq = lookupSequence(node.input(k + 2)))
      state.push_back(*seq);
    else
      state.push_back(n.input(k + 2));
  }
  // A carried value's kind and type, for the errors.
  auto describe = [](const BodyValue &v) {
    std::string s;
    llvm::raw_string_ostream os(s);
    if (auto *seq = std::get_if<Sequence>(&v))
      os << "a sequence of " << seq->elementType;
    else
      os << std::get<Value>(v).getType();
    return s;
  };
  auto sameKind = [](const BodyValue &a, const BodyValue &b) {
    if (a.index() != b.index())
      return false;
    if (auto *seq = std::get_if<Sequence>(&a))
      return seq->elementType == std::get<Sequence>(b).elementType;
    return std::get<Value>(a).getType() == std::get<Value>(b).getType();
  };
  SmallVector<SmallVector<Value>> scanned(scans);
  int64_t iteration = 0;
  for (; running && (!trips || iteration < *trips); ++iteration) {
    if (iteration == kMaxIterations)
      return n.error() << "unrolls at most " << kMaxIterations
                       << " iterations; this loop runs more";
    std::string scope = name + "/" + std::to_string(iteration) + "/";
    Location at = NameLoc::get(b.getStringAttr(scope), line);
    SmallVector<BodyValue> inputs{
        graph::ConstantOp::create(
            b, at,
            DenseElementsAttr::get(RankedTensorType::get({}, b.getI64Type()),
                                   APInt(64, iteration))),
        graph::ConstantOp::create(
            b, at,
            DenseElementsAttr::get(RankedTensorType::get({}, b.getI1Type()),
                                   true))};
    inputs.append(state.begin(), state.end());
    auto bodyOutputs = inlineBody(*body, inputs, scope, opset, b, line, n);
    if (failed(bodyOutputs))
      return failure();
    SmallVector<BodyValue> &outs = *bodyOutputs;
    auto *conditionValue = std::get_if<Value>(&outs[0]);
    auto condition =
        conditionValue ? constantValueOf(*conditionValue) : std::nullopt;
    std::optional<bool> next =
        condition ? booleanOf(*condition) : std::optional<bool>();
    if (!next)
      return n.error() << "expected its body's condition '"
                       << body->output(0).name()
                       << "' to be known at compile time (iteration "
                       << iteration << "): dtcc unrolls loops";
    running = *next;
    for (int k = 0; k < carried; ++k) {
      if (!sameKind(outs[k + 1], state[k]))
        return n.error() << "expected carried value " << k
                         << " to keep its type " << describe(state[k])
                         << ", got " << describe(outs[k + 1])
                         << " at iteration " << iteration;
      state[k] = outs[k + 1];
    }
    for (int s = 0; s < scans; ++s) {
      auto *v = std::get_if<Value>(&outs[carried + 1 + s]);
      if (!v)
        return n.error() << "expected its scan output " << s
                         << " to be a tensor, got a sequence";
      scanned[s].push_back(*v);
    }
  }
  for (int k = 0; k < carried && k < node.output_size(); ++k) {
    if (node.output(k).empty())
      continue;
    if (auto *seq = std::get_if<Sequence>(&state[k]))
      sequences[node.output(k)] = *seq;
    else
      values[node.output(k)] = std::get<Value>(state[k]);
  }
  for (int s = 0; s < scans && carried + s < node.output_size(); ++s) {
    if (node.output(carried + s).empty())
      continue;
    if (scanned[s].empty())
      return n.error() << "runs no iteration, so its scan output " << s
                       << " has no shape";
    auto joined = stack(n, scanned[s], 0);
    if (failed(joined))
      return failure();
    values[node.output(carried + s)] = *joined;
  }
  return success();
}

LogicalResult GraphImporter::checkDeclaredType(const onnx::ValueInfoProto &info,
                                               Value v) {
  if (!info.type().has_tensor_type())
    return success();
  const auto &tt = info.type().tensor_type();
  auto actual = cast<RankedTensorType>(v.getType());
  if (tt.elem_type() != 0) {
    Type declared = convertElementType(tt.elem_type(), ctx);
    if (declared && declared != actual.getElementType())
      return emitError(v.getLoc(), "graph output '")
             << info.name() << "' is declared " << onnxTypeName(tt.elem_type())
             << " but computes " << actual.getElementType();
  }
  if (!tt.has_shape())
    return success();
  bool mismatch = tt.shape().dim_size() != actual.getRank();
  for (int d = 0; !mismatch && d < tt.shape().dim_size(); ++d)
    mismatch = tt.shape().dim(d).has_dim_value() &&
               tt.shape().dim(d).dim_value() != actual.getDimSize(d);
  if (mismatch) {
    std::string declared;
    for (int d = 0; d < tt.shape().dim_size(); ++d)
      declared += (d ? "x" : "") + (tt.shape().dim(d).has_dim_value()
                                        ? std::to_string(tt.shape().dim(d).dim_value())
                                        : std::string("?"));
    return emitError(v.getLoc(), "graph output '")
           << info.name() << "' is declared with shape " << declared
           << " but computes " << actual;
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

static std::string dirOf(const std::string &path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

FailureOr<OwningOpRef<ModuleOp>>
importOnnxBytes(const std::string &bytes, const std::string &fileName,
                const std::string &baseDir, MLIRContext *context,
                const ImportOptions &options) {
  Location loc = FileLineColLoc::get(context, fileName, 0, 0);
  onnx::ModelProto model;
  // ONNX text starts with '<' (the model header), after blank lines and '#'
  // comments; binary protobuf cannot start that way.
  size_t first = 0;
  while (true) {
    first = bytes.find_first_not_of(" \t\r\n", first);
    if (first == std::string::npos || bytes[first] != '#')
      break;
    first = bytes.find('\n', first);
  }
  bool isText = first != std::string::npos && bytes[first] == '<';
  if (isText) {
    std::string message;
    try {
      onnx::OnnxParser parser(bytes.c_str());
      auto status = parser.Parse(model);
      if (!status.IsOK())
        message = status.ErrorMessage();
    } catch (const std::exception &e) {
      message = e.what();
    }
    if (!message.empty())
      return emitError(loc, "cannot parse ONNX text: ") << message;
  } else if (!model.ParseFromString(bytes)) {
    return emitError(loc, "not an ONNX model: the file does not parse as an "
                          "ONNX ModelProto (truncated, or another format)");
  }
  if (!model.has_graph())
    return emitError(loc, "not an ONNX model: it has no graph");
  GraphImporter importer(context, model, fileName, baseDir, options);
  return importer.run();
}

FailureOr<OwningOpRef<ModuleOp>> importOnnxFile(const std::string &path,
                                                MLIRContext *context,
                                                const ImportOptions &options) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return emitError(UnknownLoc::get(context), "cannot read '")
           << path << "': " << buffer.getError().message();
  return importOnnxBytes((*buffer)->getBuffer().str(), path, dirOf(path),
                         context, options);
}

} // namespace dtcc::onnx_frontend
