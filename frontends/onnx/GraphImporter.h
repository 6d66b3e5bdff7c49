//===- GraphImporter.h - state of one model's import ------------*- C++ -*-===//

#ifndef DTCC_FRONTENDS_ONNX_GRAPHIMPORTER_H
#define DTCC_FRONTENDS_ONNX_GRAPHIMPORTER_H

#include "frontends/onnx/NodeImporter.h"
#include "frontends/onnx/OnnxImporter.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringMap.h"

#include <map>
#include <variant>

namespace onnx {
class OpSchema;
} // namespace onnx

namespace dtcc::onnx_frontend {

/// Imports one graph: owns the name -> value table that handlers read and
/// write through NodeImporter.
class GraphImporter {
public:
  GraphImporter(mlir::MLIRContext *ctx, const onnx::ModelProto &model,
                std::string fileName, std::string baseDir,
                const ImportOptions &options);

  mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>> run();

  const ImportOptions &getOptions() const { return options; }
  const onnx::ModelProto &getModel() const { return model; }
  /// A load of the step counter variable `__step`, created on first use.
  mlir::Value stepCounter(mlir::OpBuilder &b);
  mlir::Value lookup(const std::string &name);
  void define(const std::string &name, mlir::Value v) { values[name] = v; }
  /// ONNX sequences (SplitToSequence, SequenceConstruct, ...) exist only
  /// during the import: a sequence is its list of tensors, each position
  /// known at compile time. Null when `name` is not a sequence.
  const Sequence *lookupSequence(const std::string &name) const {
    auto it = sequences.find(name);
    return it == sequences.end() ? nullptr : &it->second;
  }
  void defineSequence(const std::string &name, Sequence s) {
    sequences[name] = std::move(s);
  }
  /// The value of `v` when known at compile time: a constant (possibly
  /// folded) or a variable's initial value.
  std::optional<mlir::DenseElementsAttr> constantValueOf(mlir::Value v);
  /// Whether `name` is an input of the graph (bindable with --bind).
  bool isGraphInput(const std::string &name) const {
    for (const auto &info : model.graph().input())
      if (info.name() == name)
        return true;
    return false;
  }
  void noteQuantized(mlir::Value q, QuantizedValue info) {
    quantized[q] = std::move(info);
  }
  const QuantizedValue *quantizedFrom(mlir::Value q) const {
    auto it = quantized.find(q);
    return it == quantized.end() ? nullptr : &it->second;
  }
  /// What NonZero selected, when `v` is computed from its indices row by
  /// row; null otherwise.
  const Selection *selectionOf(mlir::Value v) const {
    auto it = selections.find(v);
    return it == selections.end() ? nullptr : &it->second;
  }
  void noteSelection(mlir::Value v, Selection s) {
    selections[v] = std::move(s);
  }
  mlir::FailureOr<mlir::ElementsAttr> tensorToAttr(const onnx::TensorProto &t,
                                                   mlir::Location loc);
  static std::string nodeName(const onnx::NodeProto &node, int index);

  /// Tensors up to this size stay dense attributes; larger ones are blobs.
  static constexpr size_t kMaxDenseBytes = 1024;
  /// No tensor may have more elements (2^48): shape arithmetic stays exact.
  static constexpr int64_t kMaxElements = int64_t(1) << 48;

private:
  mlir::Location fileLoc();
  /// Imports one node (`index` in its graph) at `line`; an If by inlining
  /// the branch its compile-time condition takes.
  mlir::LogicalResult importNode(const onnx::NodeProto &node, int index,
                                 int64_t opset, mlir::OpBuilder &b,
                                 mlir::Location line);
  /// Defines `g`'s own initializers (an If branch's, a Loop body's) as
  /// constants: not parameters of the model.
  mlir::LogicalResult defineConstants(const onnx::GraphProto &g,
                                      mlir::OpBuilder &b, mlir::Location line);
  /// A Loop by unrolling its iterations, whose count and conditions must
  /// be known at import.
  mlir::LogicalResult importLoop(const onnx::NodeProto &node,
                                 const std::string &name, int64_t opset,
                                 mlir::OpBuilder &b, mlir::Location loc,
                                 mlir::Location line);
  /// A Scan by unrolling its steps, one per element of its scan inputs
  /// along their scan axis (opset 8's batch of sequences: one scan per
  /// batch element).
  mlir::LogicalResult importScan(const onnx::NodeProto &node,
                                 const std::string &name, int64_t opset,
                                 mlir::OpBuilder &b, mlir::Location loc,
                                 mlir::Location line);
  /// A value a Loop's or Scan's body reads or makes: a tensor or a
  /// sequence (a Loop may carry one, as PyTorch 2's EmbeddingBag does).
  using BodyValue = std::variant<mlir::Value, Sequence>;
  /// Imports one iteration of a Loop's or Scan's `body`: its inputs bound
  /// to `inputs`, its initializers as constants, its nodes named `scope`
  /// + their names. Its outputs, in order; errors at `owner`'s node.
  mlir::FailureOr<llvm::SmallVector<BodyValue>>
  inlineBody(const onnx::GraphProto &body, llvm::ArrayRef<BodyValue> inputs,
             const std::string &scope, int64_t opset, mlir::OpBuilder &b,
             mlir::Location line, NodeImporter &owner);
  /// A node that reads a selection (NonZero's indices or what is computed
  /// from them): the ops that treat its rows one by one keep it a
  /// selection, reductions over its rows and losses over them read only the
  /// selected ones (SelectionOps.cpp); any other is an error.
  mlir::LogicalResult importOnSelection(const onnx::NodeProto &node,
                                        int64_t opset, mlir::OpBuilder &b,
                                        mlir::Location loc);
  /// A node that reads a selection's shape (rowShapes) and no selection:
  /// a Concat of it is one too; anything else is an error.
  mlir::LogicalResult importOnRowShape(const onnx::NodeProto &node,
                                       int64_t opset, mlir::OpBuilder &b,
                                       mlir::Location loc);
  /// Runs `node`'s handler (its import), with each input `i` of `inputs`
  /// read as its value instead.
  mlir::LogicalResult
  importWithInputs(const onnx::NodeProto &node,
                   llvm::ArrayRef<std::pair<int, mlir::Value>> inputs,
                   int64_t opset, mlir::OpBuilder &b, mlir::Location loc);
  mlir::LogicalResult importIf(const onnx::NodeProto &node,
                               const std::string &name, int64_t opset,
                               mlir::OpBuilder &b, mlir::Location loc,
                               mlir::Location line);
  mlir::LogicalResult checkOps(int64_t opset);
  /// Why dtcc cannot import `node` at `opset` ("domain ai.onnx, opset 17:
  /// not in dtcc's op set"); empty when it can.
  std::string unsupportedReason(const onnx::NodeProto &node,
                                int64_t opset) const;
  /// The opset of `node`'s domain: `opset` for the default one, the
  /// model's import of another (-1 when it has none).
  int64_t domainOpset(const onnx::NodeProto &node, int64_t opset) const;
  /// ONNX's schema of `node` at its domain's opset (null for ops and
  /// opsets the onnx library does not know).
  const onnx::OpSchema *schemaOf(const onnx::NodeProto &node,
                                 int64_t opset) const;
  mlir::FailureOr<mlir::RankedTensorType>
  inputType(const onnx::ValueInfoProto &info);
  /// The node has its required inputs (ONNX's schema) and an output.
  mlir::LogicalResult checkArity(const onnx::NodeProto &node, int index,
                                 int64_t opset, mlir::Location loc);
  /// Every flag attribute of the node (keepdims, transA, ...: the list in
  /// OnnxImporter.cpp) is 0 or 1.
  mlir::LogicalResult checkFlagAttributes(const onnx::NodeProto &node,
                                          int index, mlir::Location loc);
  /// ONNX's type constraints over the node's tensor inputs, where its
  /// schema (onnx's registry, up to the library's opset) gives them: the
  /// inputs of one type parameter share one element type, and each is of a
  /// kind (bool, integer, floating point) the parameter allows. Checked
  /// after the node's handler, whose own checks name the node's operands
  /// more precisely; what they let through would build invalid IR.
  mlir::LogicalResult checkInputTypes(const onnx::NodeProto &node, int index,
                                      int64_t opset, mlir::Location loc);
  /// `v`'s shape is within kMaxElements.
  mlir::LogicalResult checkSize(mlir::Value v, mlir::Location loc,
                                const std::string &node);
  mlir::LogicalResult checkDeclaredType(const onnx::ValueInfoProto &info,
                                        mlir::Value v);

  mlir::MLIRContext *ctx;
  const onnx::ModelProto &model;
  std::string fileName, baseDir;
  const ImportOptions &options;
  std::map<std::string, int64_t> opsets;
  llvm::StringMap<mlir::Value> values;
  llvm::StringMap<Sequence> sequences;
  llvm::DenseMap<mlir::Value, QuantizedValue> quantized;
  llvm::DenseMap<mlir::Value, Selection> selections;
  /// Shapes of selections (Shape, and Concats of them): their rows' entry
  /// is the static count of rows kept, which serves only as the shape of
  /// those rows (Expand, Reshape). The NonZero's name, by value.
  llvm::DenseMap<mlir::Value, std::string> rowShapes;
  llvm::StringMap<graph::VariableOp> variables;
  llvm::StringMap<mlir::ElementsAttr> constantInitializers;
  mlir::ModuleOp module;
  mlir::func::FuncOp function;
  mlir::Value step;
};

} // namespace dtcc::onnx_frontend

#endif // DTCC_FRONTENDS_ONNX_GRAPHIMPORTER_H
