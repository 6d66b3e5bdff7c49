//===- CpuCodegen.h - fused regions to a shared object for the CPU -*- C++ -*-===//
//
// Compiles the region functions of dtcc-lower-fuse-regions (the nested
// `dtcc_kernels` module) ahead of time: linalg -> loops -> LLVM dialect ->
// LLVM IR, optimized and vectorized by LLVM for the host CPU, emitted as an
// object in-process and linked into a shared object by ld.lld. The runtime
// loads it without MLIR or LLVM (runtime/exec/GeneratedKernels.h).
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_COMPILER_CODEGEN_CPUCODEGEN_H
#define DTCC_COMPILER_CODEGEN_CPUCODEGEN_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace dtcc::codegen {

/// The nested module that holds the region functions.
inline constexpr const char *kKernelsModuleName = "dtcc_kernels";

struct CpuCodegenOptions {
  /// When not empty: writes `kernels.ll` (the optimized LLVM IR) there.
  std::string dumpDir;
  /// The linker; empty: $DTCC_LLD (none if it cannot be run), else
  /// ld.lld-22, ld.lld (PATH), then /usr/lib/llvm-22/bin/ld.lld.
  std::string linker;
};

/// The linker `compileCpuKernels` uses (`options.linker`, else as
/// CpuCodegenOptions::linker says), or an empty string when there is none.
std::string findCpuLinker(const CpuCodegenOptions &options = {});

/// Writes `dir`/`name` with `write`; an error at `at` when it cannot.
mlir::LogicalResult
writeDumpFile(mlir::Operation *at, llvm::StringRef dir, llvm::StringRef name,
              llvm::function_ref<void(llvm::raw_ostream &)> write);

/// The region-function module of `module` (its `dtcc_kernels`), or null.
mlir::ModuleOp findKernelsModule(mlir::ModuleOp module);

/// Compiles every function of `kernels` into one shared object for the
/// host CPU and returns its bytes. Each `func.func @f` (the region form of
/// docs/architecture.md, "Fused regions") becomes the exported C function
/// `void f(void *const *buffers, int64_t begin, int64_t end)`, taking its
/// memrefs' data pointers in argument order and computing the elements
/// whose outermost index is in [begin, end) (a rank-0 region ignores the
/// range); the object also exports `kCpuKernelAbiSymbol`, an int32 holding
/// kCpuKernelAbiVersion (runtime/exec/GeneratedKernels.h checks it).
/// Errors are diagnostics at the module (a missing linker,
/// a function outside the region form, a failed lowering).
mlir::FailureOr<std::string>
compileCpuKernels(mlir::ModuleOp kernels, const CpuCodegenOptions &options = {});

} // namespace dtcc::codegen

#endif // DTCC_COMPILER_CODEGEN_CPUCODEGEN_H
