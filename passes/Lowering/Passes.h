//===- Passes.h - lowering passes -------------------------------*- C++ -*-===//

#ifndef DTCC_PASSES_LOWERING_PASSES_H
#define DTCC_PASSES_LOWERING_PASSES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace dtcc::lowering {

#define GEN_PASS_DECL
#include "passes/Lowering/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Lowering/Passes.h.inc"

} // namespace dtcc::lowering

#endif // DTCC_PASSES_LOWERING_PASSES_H
