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

/// Writes the compiler's prediction of each function's traffic per call and
/// rank into the program's metadata, for the runtime to print beside what
/// it measures: dtcc.bytes_sent.<fn> (the ring algorithms' bytes) and
/// dtcc.bytes_handed.<fn> (the send buffers handed to MPI or NCCL). On the
/// CPU target (metadata dtcc.target absent or "cpu") f16 and bf16
/// reductions travel as f32, as the CPU communicators stage them; NCCL
/// reduces them as they are. serializeProgram calls it; call it again
/// after changing the target.
void recordTraffic(runtime::format::Program &program);

/// The name of the ONNX node (or other source) a location stands for.
std::string locationName(mlir::Location loc);

} // namespace dtcc

#endif // DTCC_COMPILER_SERIALIZE_H
