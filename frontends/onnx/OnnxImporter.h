//===- OnnxImporter.h - ONNX models to dgraph -------------------*- C++ -*-===//
//
// Imports an ONNX model (binary .onnx, ONNX text .onnxtext, with external
// data files) into a module of dgraph ops: initializers become variables,
// the graph becomes func @main, every op is located at its ONNX node name.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_FRONTENDS_ONNX_ONNXIMPORTER_H
#define DTCC_FRONTENDS_ONNX_ONNXIMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dtcc::onnx_frontend {

struct ImportOptions {
  /// Sizes for inputs with symbolic or unknown dimensions.
  std::map<std::string, std::vector<int64_t>> inputShapes;
  /// Sizes of symbolic dimensions by name (an export's dynamic axes:
  /// "batch" = 8), in every input that has them; an input of
  /// `inputShapes` takes its own.
  std::map<std::string, int64_t> dimSizes;
  /// Graph inputs frozen to the value in a TensorProto file (name -> path):
  /// they become constants, as shape operands must be.
  std::map<std::string, std::string> bindings;
  /// Without weights, variables carry shapes only (planning huge models).
  bool loadWeights = true;
  /// The model will be trained: warn about exports that lose training
  /// behaviour (eval-mode dropout, parameters folded into new tensors).
  bool training = false;
};

/// The lowest and highest default-domain opsets the importer accepts. Each
/// op also has its own lowest opset: where its current semantics began.
/// Opsets 22 to 25 changed the ops dtcc imports only in their types (bf16
/// for many, float4/8 and 4-bit integers that dtcc rejects by name, Cast's
/// round_mode for float8 targets), added RMSNormalization, Attention,
/// RotaryEmbedding (23) and Swish (24), and worded ceil_mode's pools as
/// dtcc already sizes them (22); 26 to 28 were not reviewed.
constexpr int64_t kMinOpset = 1;
constexpr int64_t kMaxOpset = 25;

/// Imports the model in `path` (format chosen by content: binary protobuf or
/// ONNX text). Errors are emitted as diagnostics on `context`.
mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>>
importOnnxFile(const std::string &path, mlir::MLIRContext *context,
               const ImportOptions &options);

/// Imports a model held in memory; `baseDir` resolves external data.
mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>>
importOnnxBytes(const std::string &bytes, const std::string &fileName,
                const std::string &baseDir, mlir::MLIRContext *context,
                const ImportOptions &options);

/// The op types (with their lowest opset) the importer supports, sorted.
std::vector<std::pair<std::string, int64_t>> supportedOps();

} // namespace dtcc::onnx_frontend

#endif // DTCC_FRONTENDS_ONNX_ONNXIMPORTER_H
