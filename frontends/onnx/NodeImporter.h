//===- NodeImporter.h - what an ONNX op handler works with ------*- C++ -*-===//
//
// Each ONNX op has a handler that reads its node through a NodeImporter:
// inputs as dgraph values, attributes with their defaults, compile-time
// constants, and builder helpers for ONNX's implicit broadcasting.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_FRONTENDS_ONNX_NODEIMPORTER_H
#define DTCC_FRONTENDS_ONNX_NODEIMPORTER_H

#include "dialects/Graph/IR/GraphOps.h"
#include "frontends/onnx/OnnxImporter.h"

#include "mlir/IR/Builders.h"
#include "onnx/onnx_pb.h"
#include "llvm/ADT/StringMap.h"

#include <limits>
#include <optional>

namespace dtcc::onnx_frontend {

class GraphImporter;

/// An ONNX sequence value: its tensors in order, and the element type of
/// its tensors (SequenceEmpty's dtype while it has none).
struct Sequence {
  llvm::SmallVector<mlir::Value> items;
  mlir::Type elementType;
};

/// The value of `key` in the metadata (`metadata_props`) that onnx 1.16
/// added to values, nodes and graphs and Debian's onnx 1.12 schema keeps as
/// unknown fields (PyTorch's dynamo exporter writes torch.export's
/// signature and each node's scope and op there); empty when absent.
std::string metadataValue(const onnx::ValueInfoProto &info,
                          llvm::StringRef key);
std::string metadataValue(const onnx::NodeProto &node, llvm::StringRef key);
std::string metadataValue(const onnx::GraphProto &graph, llvm::StringRef key);

/// Converts an ONNX element type; null for types dgraph lacks.
mlir::Type convertElementType(int32_t onnxType, mlir::MLIRContext *ctx);
/// ONNX's name for an element type number ("FLOAT", "STRING", ...).
std::string onnxTypeName(int32_t onnxType);

/// What a QuantizeLinear computed, kept for a DequantizeLinear that reads
/// its result with the same scale and zero point: together they are a fake
/// quantization (quantization-aware training), which trains through the
/// straight-through estimator. Values are in the float type of the
/// computation, broadcast to the input's shape.
struct QuantizedValue {
  /// The node's input x; null when it was an integer (no gradient).
  mlir::Value input;
  /// round(x / scale) + zero point, before saturation, and after it.
  mlir::Value level, saturated;
  mlir::Value scale, zeroPoint;
  /// What the scale and zero point were as the node's inputs (the zero
  /// point null when omitted), their values where known at compile time,
  /// and the axis of a per-axis pair (-1: per tensor).
  mlir::Value scaleInput, zeroPointInput;
  std::optional<mlir::DenseElementsAttr> scaleValue, zeroPointValue;
  int64_t axis = -1;
  /// The integer type's range.
  double low = 0, high = 0;
};

/// The elements of a tensor that NonZero selects, as the rows of what is
/// computed from its indices (GatherND through them, then ops that treat
/// rows one by one): their number is data-dependent, and dgraph's shapes
/// are static. Such a value keeps one row for every element the mask
/// could select (N, the mask's size), along `axis`, and which of them are
/// selected (`valid`); each row not selected is a copy of the first
/// selected one (the first element when none is), so that it computes
/// nothing a selected row does not (no log of a masked-out zero), and
/// reductions over the rows and losses over them read only the selected
/// ones.
struct Selection {
  /// The NonZero's input: selections of one mask may meet in one op.
  mlir::Value source;
  /// i1 [N]: which rows are selected, in the mask's row-major order.
  mlir::Value valid;
  int64_t axis = 0;
  /// The NonZero node's name, for errors.
  std::string node;
};

class NodeImporter {
public:
  NodeImporter(GraphImporter &graph, const onnx::NodeProto &node,
               int64_t opset, mlir::OpBuilder &builder, mlir::Location loc)
      : graph(graph), node(node), opset(opset), b(builder), loc(loc) {}

  const onnx::NodeProto &getNode() const { return node; }
  /// The default-domain opset of the model.
  int64_t getOpset() const { return opset; }
  mlir::OpBuilder &builder() { return b; }
  mlir::Location getLoc() const { return loc; }
  mlir::MLIRContext *getContext() const { return b.getContext(); }

  //===-- Inputs and outputs ----------------------------------------------===//

  /// Number of inputs, counting empty (omitted optional) ones.
  int numInputs() const { return node.input_size(); }
  /// Whether optional input `i` is given.
  bool hasInput(int i) const {
    return i < node.input_size() && !node.input(i).empty();
  }
  /// Input `i`; null when omitted. Every given input was checked to exist.
  mlir::Value input(int i);
  mlir::RankedTensorType inputType(int i) {
    return mlir::cast<mlir::RankedTensorType>(input(i).getType());
  }
  int numOutputs() const { return node.output_size(); }
  /// Whether output `i` is wanted by the graph (named and not empty).
  bool wantsOutput(int i) const {
    return i < node.output_size() && !node.output(i).empty();
  }
  /// Defines output `i`.
  void setOutput(int i, mlir::Value value);
  /// Input `i` as a sequence, or an error when it is a tensor.
  mlir::FailureOr<Sequence> sequenceInput(int i);
  /// Defines output `i` as a sequence.
  void setOutputSequence(int i, Sequence s);

  /// The value of input `i` if it is a compile-time constant (a constant, a
  /// folded expression, an initializer or a bound input); otherwise an error
  /// naming `what` (and `why` it must be known, when given) that says how to
  /// bind it, and failure.
  mlir::FailureOr<mlir::DenseElementsAttr>
  constantInput(int i, llvm::StringRef what, llvm::StringRef why = {});
  /// The value of input `i` where it is known at compile time, as
  /// constantInput finds it; nothing (and no error) where it is not.
  std::optional<mlir::DenseElementsAttr> knownInput(int i);
  /// constantInput as integers (any integer type), for axes and shapes.
  mlir::FailureOr<llvm::SmallVector<int64_t>> constantInts(int i,
                                                           llvm::StringRef what);

  /// The import's options (training mode, shapes, bindings).
  const ImportOptions &getImportOptions() const;
  /// The training step counter (the variable __step, created on first use),
  /// for ops whose randomness depends on the step.
  mlir::Value stepCounter();
  /// The model's producer_name ("pytorch", "backend-test", ...), for ops
  /// whose exporters disagree with ONNX's definition.
  const std::string &producerName() const;
  /// The PyTorch op a dynamo export made this node from, as its metadata
  /// records it ("hardtanh" for torch.ops.aten.hardtanh.default); empty
  /// for other exporters. For ONNX ops that stand for several PyTorch ops
  /// whose gradients differ.
  std::string torchOp() const;
  /// That op's positional arguments as the metadata prints them ("%x",
  /// "None", "True", "0.1", "[1, 2]"); empty for other exporters.
  llvm::SmallVector<std::string> torchArgs() const;
  /// Records what the QuantizeLinear whose result is `q` computed.
  void noteQuantized(mlir::Value q, QuantizedValue info);
  /// What made `q`, when a QuantizeLinear did; null otherwise.
  const QuantizedValue *quantizedFrom(mlir::Value q) const;
  /// Records that `v` holds the rows of a selection.
  void noteSelection(mlir::Value v, Selection s);

  //===-- Attributes --------------------------------------------------------===//

  const onnx::AttributeProto *attr(llvm::StringRef name) const;
  bool hasAttr(llvm::StringRef name) const { return attr(name) != nullptr; }
  /// Checks that the attributes the op's schema requires are given, else
  /// reports "expected attribute NAME (required)" for the first missing.
  mlir::LogicalResult requireAttrs(llvm::ArrayRef<llvm::StringRef> names);
  int64_t attrInt(llvm::StringRef name, int64_t fallback) const;
  float attrFloat(llvm::StringRef name, float fallback) const;
  std::string attrString(llvm::StringRef name, llvm::StringRef fallback) const;
  std::optional<llvm::SmallVector<int64_t>> attrInts(llvm::StringRef name) const;
  /// A tensor attribute as a constant.
  mlir::FailureOr<mlir::DenseElementsAttr> attrTensor(llvm::StringRef name);
  /// A tensor attribute of any size: dense when small or when every element
  /// is the same (a splat, which folds), otherwise a resource blob.
  mlir::FailureOr<mlir::ElementsAttr> attrElements(llvm::StringRef name);

  //===-- Errors ------------------------------------------------------------===//

  /// Emits "node 'NAME' (OpType): <message>" at the node and returns
  /// failure; stream more text into the result.
  mlir::InFlightDiagnostic error();
  /// Whether error() was called: the node's import failed even if its
  /// handler went on (broadcastTo reports and builds a placeholder).
  bool hadError() const { return errorEmitted; }
  /// Checks a shape computed from the model's data: no negative dimension
  /// and at most 2^48 elements.
  mlir::LogicalResult checkShape(llvm::ArrayRef<int64_t> shape,
                                 llvm::StringRef what);
  /// Normalizes a possibly negative axis against `rank`, or reports it.
  mlir::FailureOr<int64_t> normalizeAxis(int64_t axis, int64_t rank,
                                         llvm::StringRef what = "axis");
  /// normalizeAxis of each of `axes`, which must be distinct ("axes entry
  /// A repeats").
  mlir::FailureOr<llvm::SmallVector<int64_t>>
  normalizeAxes(llvm::ArrayRef<int64_t> axes, int64_t rank);

  //===-- Builders ----------------------------------------------------------===//

  /// A constant of `type`'s element type and shape, filled with `value`.
  mlir::Value splat(mlir::RankedTensorType type, double value);
  /// A rank-0 constant of `elementType`.
  mlir::Value scalar(mlir::Type elementType, double value);
  /// A constant of float `type` holding `values` (row-major), each rounded
  /// to nearest even in the element type.
  mlir::Value floatConstant(mlir::RankedTensorType type,
                            llvm::ArrayRef<double> values);
  mlir::Value constant(mlir::DenseElementsAttr value);
  mlir::Value constant(mlir::ElementsAttr value);
  /// Reshape (no-op when the shape already matches).
  mlir::Value reshape(mlir::Value v, llvm::ArrayRef<int64_t> shape);
  mlir::Value transpose(mlir::Value v, llvm::ArrayRef<int64_t> perm);
  /// Cast (no-op when the element type already matches).
  mlir::Value castTo(mlir::Value v, mlir::Type elementType);
  /// Whether `from` broadcasts to `to` numpy-style (trailing dimensions
  /// align; each of `from` is 1 or equal).
  static bool isBroadcastable(llvm::ArrayRef<int64_t> from,
                              llvm::ArrayRef<int64_t> to);
  /// Numpy-style broadcast of `v` to `shape` (trailing dimensions align).
  /// When `v` does not broadcast to `shape` it reports an error (see
  /// hadError) and returns zeros of the target type, so that no invalid IR
  /// is built: callers check what they can name better first.
  mlir::Value broadcastTo(mlir::Value v, llvm::ArrayRef<int64_t> shape);
  /// The multidirectional broadcast shape of `shapes`, or an error.
  mlir::FailureOr<llvm::SmallVector<int64_t>>
  broadcastShape(llvm::ArrayRef<llvm::ArrayRef<int64_t>> shapes);
  /// Broadcasts all values to their common shape.
  mlir::FailureOr<llvm::SmallVector<mlir::Value>>
  broadcastAll(llvm::ArrayRef<mlir::Value> values);
  /// Sums over `dims` keeping them as size-1 dimensions when `keepDims`.
  template <typename ReduceOp>
  mlir::Value reduce(mlir::Value v, llvm::ArrayRef<int64_t> dims, bool keepDims);

  template <typename OpTy, typename... Args>
  OpTy create(Args &&...args) {
    return OpTy::create(b, loc, std::forward<Args>(args)...);
  }
  /// Creates a single-result op, folding it when its operands are constant.
  template <typename OpTy, typename... Args> mlir::Value fold(Args &&...args) {
    return b.createOrFold<OpTy>(loc, std::forward<Args>(args)...);
  }

private:
  GraphImporter &graph;
  const onnx::NodeProto &node;
  int64_t opset;
  mlir::OpBuilder &b;
  mlir::Location loc;
  bool errorEmitted = false;
};

template <typename ReduceOp>
mlir::Value NodeImporter::reduce(mlir::Value v, llvm::ArrayRef<int64_t> dims,
                                 bool keepDims) {
  auto type = mlir::cast<mlir::RankedTensorType>(v.getType());
  mlir::Value r = fold<ReduceOp>(v, dims);
  if (!keepDims)
    return r;
  llvm::SmallVector<int64_t> shape(type.getShape());
  for (int64_t d : dims)
    shape[d] = 1;
  return reshape(r, shape);
}

/// An op handler: reads the node, builds dgraph ops, sets the outputs.
using OpHandler = mlir::LogicalResult (*)(NodeImporter &);

struct OpEntry {
  const char *opType;
  /// The lowest opset whose semantics the handler implements (of the op's
  /// domain).
  int64_t minOpset;
  OpHandler handler;
  /// The op's domain; empty for the default one (ai.onnx).
  const char *domain = "";
};

/// ONNX's name for the default domain, which a node may also leave empty.
inline constexpr llvm::StringLiteral kDefaultDomain = "ai.onnx";
/// Whether `domain` is the default one (ai.onnx, or left empty).
inline bool isDefaultDomain(llvm::StringRef domain) {
  return domain.empty() || domain == kDefaultDomain;
}
/// The registry's key for an op: its type in the default domain,
/// "<domain>.<type>" in another ("ai.onnx.preview.training.Adam").
std::string opKey(llvm::StringRef domain, llvm::StringRef opType);

/// The axes a Reduce* node reduces (its axes attribute or input, negative
/// ones normalized against `rank`, sorted; all without any), or none for an
/// identity (no axes and noop_with_empty_axes).
mlir::FailureOr<std::optional<llvm::SmallVector<int64_t>>>
reducedAxes(NodeImporter &n, int64_t rank);

/// Axes from the input `index` (opset >= `inputSince`) or the "axes"
/// attribute, normalized against `rank`. Empty when none are given.
mlir::FailureOr<llvm::SmallVector<int64_t>>
readAxes(NodeImporter &n, int index, int64_t inputSince, int64_t rank);
/// Unsqueeze's axes (input 1 from opset 13, else the attribute): positions
/// in the output, of rank `inputRank` + their count, normalized; a repeated
/// one is an error.
mlir::FailureOr<llvm::SmallVector<int64_t>> unsqueezeAxes(NodeImporter &n,
                                                          int64_t inputRank);

/// Checks that `v` has a floating-point element type, else reports
/// "expected a floating-point <what>, got <type>" at the node.
mlir::LogicalResult requireFloat(NodeImporter &n, mlir::Value v,
                                 llvm::StringRef what = "input");

/// `sum` ^ `exponent` (sqrt(`sum`) without one) as a p-norm of the
/// nonnegative terms summed: its gradient is 0 where the sum is 0 (PyTorch's
/// norm_backward), not pow's or sqrt's 0 * inf. For ReduceL2, for the Sqrt
/// or Pow of a ReduceSum of x * x, |x|^p or x^p (p even) that
/// torch.norm(x, dim=...), torch.linalg.vector_norm and torch.cdist export,
/// and for the Sqrt of a value clamped at 0 (PyTorch 2's torch.cdist).
mlir::Value normOfSum(NodeImporter &n, mlir::Value sum,
                      mlir::Value exponent = {});

/// numpy.matmul of `a` and `b` (ONNX MatMul): 1-D operands promoted and
/// the added dimension removed, batch dimensions broadcast; errors at the
/// node for operands that do not multiply.
mlir::FailureOr<mlir::Value> numpyMatmul(NodeImporter &n, mlir::Value a,
                                         mlir::Value b);

/// `v` with no gradient through it in a training import (its own value
/// otherwise, and an integer's, through which none flows anyway).
mlir::Value detached(NodeImporter &n, mlir::Value v);
/// `v` as "[a, b, c]", for errors.
std::string formatList(llvm::ArrayRef<int64_t> v);
/// The list attribute `name` of `count` entries, each >= `least`, or
/// `fallback` repeated when it is absent; `each` says what an entry is for
/// in the error ("one per spatial dimension").
mlir::FailureOr<llvm::SmallVector<int64_t>>
listAttr(NodeImporter &n, llvm::StringRef name, size_t count, int64_t fallback,
         int64_t least = std::numeric_limits<int64_t>::min(),
         llvm::StringRef each = {});
/// `v` clamped to [`low`, `high`]: saturation to an integer type's range.
mlir::Value saturate(NodeImporter &n, mlir::Value v, double low, double high);
/// The requantization that ends QLinearConv and QLinearMatMul: the integer
/// accumulator `acc` (f64) times `scale`, rounded half to even, plus
/// `zeroPoint` (null: none), saturated to the 8- or 16-bit integer type
/// `out` and cast to it; `what` names `out`'s source in the error.
mlir::FailureOr<mlir::Value> requantize(NodeImporter &n, mlir::Value acc,
                                        mlir::Value scale,
                                        mlir::Value zeroPoint, mlir::Type out,
                                        llvm::StringRef what);

/// `x` cut along `axis` into consecutive pieces of `sizes` (which sum to
/// its extent there): slices, as Split and SplitToSequence make them.
llvm::SmallVector<mlir::Value> splitAlong(NodeImporter &n, mlir::Value x,
                                          int64_t axis,
                                          llvm::ArrayRef<int64_t> sizes);
/// Concatenates `inputs` along `axis` (ONNX's Concat: negative counts from
/// the end; inputs that add nothing along the axis are left out).
mlir::FailureOr<mlir::Value>
concatenate(NodeImporter &n, llvm::ArrayRef<mlir::Value> inputs, int64_t axis);
/// Whether `opType` takes a sequence as its input `index` (the sequence
/// ops); every other input of every op is a tensor.
bool takesSequence(llvm::StringRef opType, int index);

/// The handlers of each op family (one per file).
void appendElementwiseOps(std::vector<OpEntry> &ops);
void appendTensorOps(std::vector<OpEntry> &ops);
void appendReductionOps(std::vector<OpEntry> &ops);
void appendNNOps(std::vector<OpEntry> &ops);
void appendConvOps(std::vector<OpEntry> &ops);
void appendNormPoolOps(std::vector<OpEntry> &ops);
void appendSequenceOps(std::vector<OpEntry> &ops);
void appendIndexingOps(std::vector<OpEntry> &ops);
void appendRandomOps(std::vector<OpEntry> &ops);
void appendGridSampleOps(std::vector<OpEntry> &ops);
void appendAttentionOps(std::vector<OpEntry> &ops);
void appendQuantOps(std::vector<OpEntry> &ops);
void appendSpectralOps(std::vector<OpEntry> &ops);
void appendSelectionOps(std::vector<OpEntry> &ops);
void appendOptimizerOps(std::vector<OpEntry> &ops);
void appendTextOps(std::vector<OpEntry> &ops);
/// Every op's entry, by opKey.
const llvm::StringMap<OpEntry> &opRegistry();

} // namespace dtcc::onnx_frontend

#endif // DTCC_FRONTENDS_ONNX_NODEIMPORTER_H
