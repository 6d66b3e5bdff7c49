//===- CompilerTestContext.h - one MLIR context for compiler tests -*- C++ -*-===//

#ifndef DTCC_TESTS_UNIT_COMPILER_COMPILERTESTCONTEXT_H
#define DTCC_TESTS_UNIT_COMPILER_COMPILERTESTCONTEXT_H

#include "compiler/Driver.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"

namespace dtcc::test {

/// The test binary's MLIR context, with every dialect dtcc registers loaded.
inline mlir::MLIRContext &compilerContext() {
  static mlir::DialectRegistry registry = [] {
    mlir::DialectRegistry r;
    registerDtccDialects(r);
    return r;
  }();
  static mlir::MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  return ctx;
}

} // namespace dtcc::test

#endif // DTCC_TESTS_UNIT_COMPILER_COMPILERTESTCONTEXT_H
