//===- Registration.h - every dialect dtcc's IR can contain -----*- C++ -*-===//
//
// One list for the dtcc command, the compiler's tests and dtcc-opt, so
// that a dump any of them writes the others parse.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_DIALECTS_REGISTRATION_H
#define DTCC_DIALECTS_REGISTRATION_H

#include "dialects/Exec/IR/ExecOps.h"
#include "dialects/Graph/IR/GraphOps.h"
#include "dialects/Shard/IR/ShardOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/DialectRegistry.h"

namespace dtcc {

/// Every dialect dtcc's IR can contain.
inline void registerDtccDialects(mlir::DialectRegistry &registry) {
  registry.insert<graph::GraphDialect, shard::ShardDialect, exec::ExecDialect,
                  mlir::func::FuncDialect>();
  // Fused regions' functions (dtcc-lower-fuse-regions), in dumps: the
  // one-generic form (linalg) and the row form (scf loops).
  registry.insert<mlir::linalg::LinalgDialect, mlir::arith::ArithDialect,
                  mlir::math::MathDialect, mlir::memref::MemRefDialect,
                  mlir::scf::SCFDialect>();
}

} // namespace dtcc

#endif // DTCC_DIALECTS_REGISTRATION_H
