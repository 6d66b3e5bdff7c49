//===- GpuCodegen.h - PTX and cubin for fused regions through MLIR -*- C++ -*-===//
//
// CUDA code generation of fused regions: linalg on memrefs -> scf.parallel
// mapped onto blocks and threads -> gpu.launch -> outlined gpu.func -> NVVM
// -> LLVM's NVPTX backend -> PTX per architecture, assembled by ptxas into
// cubins where ptxas is found. The result is a runtime::GpuKernelModule,
// which the CUDA runtime loads with the driver API (no MLIR at run time).
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_COMPILER_CODEGEN_GPUCODEGEN_H
#define DTCC_COMPILER_CODEGEN_GPUCODEGEN_H

#include "runtime/format/GpuKernelModule.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"

#include <string>
#include <vector>

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace dtcc::codegen {

/// The CUDA toolkit found when dtcc was configured (libdevice for the math
/// functions, ptxas for the cubins); empty when there was none.
const char *configuredCudaToolkitDir();
const char *configuredPtxasPath();

struct GpuCodegenOptions {
  /// One PTX (and cubin) per architecture.
  std::vector<std::string> chips{"sm_80", "sm_90"};
  /// PTX ISA 8.0: the oldest that sm_90 accepts is 7.8; CUDA 12.0 drivers
  /// JIT it.
  std::string ptxFeatures = "+ptx80";
  /// Threads per block of every kernel (fewer when a loop has fewer
  /// iterations).
  int64_t threadsPerBlock = 256;
  /// Where libdevice is found (nvvm/libdevice/libdevice.10.bc below it).
  std::string cudaToolkitDir = configuredCudaToolkitDir();
  /// ptxas: validates each PTX and makes the cubins. Empty: PTX only.
  std::string ptxasPath = configuredPtxasPath();
};

/// A region function after mapping: its buffers, then one trailing argument
/// per temporary the region allocated (its scratch, `scratchBytes`).
struct MappedRegion {
  std::string symbol;
  unsigned numBuffers = 0;
  std::vector<uint64_t> scratchBytes;
};

/// Registers the dialects and interfaces code generation needs.
void registerGpuCodegenDialects(mlir::DialectRegistry &registry);

/// Checks that every public function of `module` is a fused region (memref
/// arguments of static shape and identity layout, no results, a body of
/// linalg ops, static memref.alloc/dealloc and constants, or the row loop
/// of the parallel row form) and rewrites its body into top-level
/// scf.parallel loops carrying a gpu mapping: each linalg op's parallel
/// dimensions collapsed into one, tiled by `threadsPerBlock`, tiles on
/// block_x and the elements of a tile on thread_x; reduction dimensions
/// stay sequential loops inside a thread (one thread per row); an op
/// without parallel dimensions runs on one thread. A row loop becomes a
/// block per row (block_x) whose threads (thread_x, at most
/// `threadsPerBlock`) share the row's columns, each reduction a
/// gpu.all_reduce of the block. Temporaries become trailing arguments
/// (scratch). The linalg regions' form runs on the CPU too (tests execute
/// it against a reference); a row region's needs a GPU (gpu.all_reduce).
mlir::FailureOr<std::vector<MappedRegion>>
mapRegionsToGpuLoops(mlir::ModuleOp module, const GpuCodegenOptions &options);

/// Maps (above), turns each mapped loop into a gpu.launch, outlines the
/// kernels into one gpu.module, lowers it to NVVM with bare-pointer memref
/// parameters and serializes it per architecture with LLVM's NVPTX backend;
/// with ptxas, assembles each PTX into a cubin (a rejection is an error
/// with ptxas's message). `module` is left in its final form (the host
/// functions with gpu.launch_func ops and a gpu.binary); errors are
/// diagnostics at the region's ops.
mlir::FailureOr<runtime::GpuKernelModule>
generateGpuKernels(mlir::ModuleOp module, const GpuCodegenOptions &options);

/// Runs ptxas on `ptx` for `chip` and returns the cubin; on a rejection,
/// emits ptxas's output at `loc`.
mlir::FailureOr<std::string> assembleWithPtxas(llvm::StringRef ptxasPath,
                                               llvm::StringRef ptx,
                                               llvm::StringRef chip,
                                               mlir::Location loc);

} // namespace dtcc::codegen

#endif // DTCC_COMPILER_CODEGEN_GPUCODEGEN_H
