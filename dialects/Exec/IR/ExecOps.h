//===- ExecOps.h - dexec dialect and ops ------------------------*- C++ -*-===//

#ifndef DTCC_DIALECTS_EXEC_IR_EXECOPS_H
#define DTCC_DIALECTS_EXEC_IR_EXECOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/Exec/IR/ExecOpsDialect.h.inc"

namespace dtcc::exec {
/// The kernels that move a buffer between the device's memory and the
/// host's (an offloaded optimizer step's gradients and parameters).
inline constexpr llvm::StringLiteral kCopyToHostKernel = "copy_to_host";
inline constexpr llvm::StringLiteral kCopyToDeviceKernel = "copy_to_device";

/// Whether `arena` is in the host's memory ("host_workspace", "host_state").
inline bool isHostArena(llvm::StringRef arena) {
  return arena == "host_workspace" || arena == "host_state";
}
} // namespace dtcc::exec

#define GET_OP_CLASSES
#include "dialects/Exec/IR/ExecOps.h.inc"

#endif // DTCC_DIALECTS_EXEC_IR_EXECOPS_H
