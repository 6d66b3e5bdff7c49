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

#define GET_OP_CLASSES
#include "dialects/Exec/IR/ExecOps.h.inc"

#endif // DTCC_DIALECTS_EXEC_IR_EXECOPS_H
