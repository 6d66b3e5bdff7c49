//===- ImportFuzzer.cpp - libFuzzer target for the ONNX importer -----------===//
//
// Feeds arbitrary bytes to the importer (binary and text ONNX) and, when the
// import succeeds, through folding, lowering and serialization. Any crash,
// sanitizer report or abort is a bug: bad input must end in a diagnostic.
//
//===----------------------------------------------------------------------===//

#include "compiler/Driver.h"
#include "compiler/Serialize.h"
#include "frontends/onnx/OnnxImporter.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // A context per input: uniqued attributes would otherwise pile up.
  mlir::DialectRegistry registry;
  dtcc::registerDtccDialects(registry);
  mlir::MLIRContext context(registry, mlir::MLIRContext::Threading::DISABLED);
  context.loadAllAvailableDialects();
  mlir::ScopedDiagnosticHandler quiet(&context, [](mlir::Diagnostic &) {
    return mlir::success();
  });
  dtcc::onnx_frontend::ImportOptions options;
  auto module = dtcc::onnx_frontend::importOnnxBytes(
      std::string(reinterpret_cast<const char *>(data), size), "fuzz.onnx",
      "/nonexistent", &context, options);
  if (mlir::failed(module))
    return 0;
  dtcc::CompileOptions compile;
  compile.compileTo = dtcc::Phase::Exec;
  if (mlir::failed(dtcc::runPhases(**module, compile)))
    return 0;
  (void)dtcc::serializeProgram(**module);
  return 0;
}
