//===- Driver.h - the phases behind the dtcc command ------------*- C++ -*-===//
//
// Loads a model (ONNX or .mlir), runs the compiler's phases on it and writes
// the artifact. tools/dtcc is a thin command line over these functions.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_COMPILER_DRIVER_H
#define DTCC_COMPILER_DRIVER_H

#include "frontends/onnx/OnnxImporter.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/OwningOpRef.h"

#include <string>

namespace dtcc {

/// Every dialect dtcc's IR can contain.
void registerDtccDialects(mlir::DialectRegistry &registry);

/// Where compilation stops. Each phase's output is the next one's input.
enum class Phase {
  Import,     ///< dgraph as imported
  Graph,      ///< dgraph after folding and cleanup
  Exec,       ///< dexec: buffers, offsets and kernel calls
  Program,    ///< the serialized program, without the runner
  Executable, ///< the runner with the program appended
};

/// Parses "import", "dgraph", "dexec", "program", "executable".
std::optional<Phase> parsePhase(llvm::StringRef name);

struct CompileOptions {
  Phase compileTo = Phase::Executable;
  bool printIrAfterAll = false;
  /// When set, each phase's IR is written to DIR/NN-<phase>.mlir.
  std::string dumpDir;
  /// The runner to embed; empty: `dtcc-runner` beside the dtcc executable.
  std::string runnerPath;
};

/// Loads `path`: an ONNX model (.onnx, ONNX text) through the importer, or
/// MLIR (.mlir) in any of dtcc's dialects.
mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>>
loadModel(const std::string &path, mlir::MLIRContext &context,
          const onnx_frontend::ImportOptions &options);

/// Runs the phases up to `options.compileTo` (Graph or Exec) in place.
mlir::LogicalResult runPhases(mlir::ModuleOp module,
                              const CompileOptions &options);

/// Serializes a dexec module; writes a bare program file (Phase::Program) or
/// an executable (Phase::Executable) to `outPath`.
mlir::LogicalResult writeArtifact(mlir::ModuleOp module,
                                  const std::string &outPath,
                                  const CompileOptions &options);

/// The runner beside the running dtcc, or the path in $DTCC_RUNNER.
std::string defaultRunnerPath();

} // namespace dtcc

#endif // DTCC_COMPILER_DRIVER_H
