//===- KernelCalls.h - kernel calls against the signature table -*- C++ -*-===//
//
// How the lowering builds and verifies the kernel calls it emits: the
// kernel's attributes from the op's, as the kernel-signature table
// (runtime/kernels/Kernels.td) names them, and the check of the whole call
// (operands, attributes) against the table, so that a call the runtime
// would refuse is a compiler error at the op, never a run-time refusal.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_PASSES_LOWERING_KERNELCALLS_H
#define DTCC_PASSES_LOWERING_KERNELCALLS_H

#include "runtime/kernels/KernelSignature.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Operation.h"

#include <optional>

namespace dtcc::lowering {

/// The runtime's element type of `type`; kInvalid for types it has none of.
runtime::DType kernelDType(mlir::Type type);

/// `attr` as the program format carries it (compiler/Serialize.cpp writes
/// the same); nullopt for attributes the format cannot carry.
std::optional<runtime::Attrs::Value> kernelAttrValue(mlir::Attribute attr);

/// Whether `attr` is a dialect's ("dshard.task", "dgraph.layer"): a kernel
/// call carries it over from its op, and the signature check
/// (runtime::checkKernelCall) reads none.
inline bool isDialectAttr(mlir::NamedAttribute attr) {
  return attr.getName().getValue().contains('.');
}

/// Adds `op`'s attributes of a dialect ("dshard.task", "dgraph.layer") to
/// `attrs`, as they are: what every kernel call carries over from its op.
void addDialectAttrs(mlir::Operation *op, mlir::NamedAttrList &attrs);

/// The attributes of the kernel call `op` lowers to: each op attribute
/// under the kernel's name for it (the table's `From`), attributes of a
/// dialect ("dshard.stage") as they are. An attribute the kernel does not
/// take is an error at `op`.
mlir::FailureOr<mlir::DictionaryAttr>
kernelAttrsOf(mlir::Operation *op, const runtime::KernelSignature &sig);

/// Checks a call of `kernel` on operands of `ins` and `outs` with `attrs`
/// against the kernel-signature table; the error is at `loc` and names the
/// kernel and `origin` (the op it was emitted for, or what the lowering
/// emitted it for).
mlir::LogicalResult verifyKernelCall(mlir::Location loc, llvm::StringRef origin,
                                     llvm::StringRef kernel,
                                     llvm::ArrayRef<mlir::RankedTensorType> ins,
                                     llvm::ArrayRef<mlir::RankedTensorType> outs,
                                     mlir::DictionaryAttr attrs);

} // namespace dtcc::lowering

#endif // DTCC_PASSES_LOWERING_KERNELCALLS_H
