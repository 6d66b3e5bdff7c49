//===- Serialize.h - dexec modules to the runtime's format ------*- C++ -*-===//

#ifndef DTCC_COMPILER_SERIALIZE_H
#define DTCC_COMPILER_SERIALIZE_H

#include "runtime/format/Program.pb.h"

#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace dtcc {

/// A program and its data section (variable initial values, constants).
struct SerializedProgram {
  runtime::format::Program program;
  std::string data;
};

/// Serializes a module lowered by dtcc-lower-to-exec. Fails with a
/// diagnostic on ops it does not know or data it cannot encode.
mlir::FailureOr<SerializedProgram> serializeProgram(mlir::ModuleOp module);

/// The name of the ONNX node (or other source) a location stands for.
std::string locationName(mlir::Location loc);

} // namespace dtcc

#endif // DTCC_COMPILER_SERIALIZE_H
