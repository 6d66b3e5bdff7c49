//===- CudaScratch.h - the scratch of the CUDA backend's kernels -*- C++ -*-===//
//
// What each kernel of the CUDA backend (runtime/device/cuda) requests
// besides its operands when it is bound (runtime/exec/Scratch.h), as a
// function of the instruction alone. The CUDA kernel factories request
// exactly this, and the planner's program model adds it up for a program
// compiled with --target cuda, so `dtcc plan` counts what a GPU rank
// reserves. Pure C++: built without the CUDA toolkit too.
//
// A kernel that gets a new need adds it here, in the table of
// cudaKernelScratch, and requests it with KernelContext::requestScratch; a
// need only a library can size (a cuDNN workspace) is capped here and the
// library is asked for an algorithm within the cap.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_EXEC_CUDASCRATCH_H
#define DTCC_RUNTIME_EXEC_CUDASCRATCH_H

#include "runtime/exec/Kernel.h"
#include "runtime/exec/Scratch.h"

namespace dtcc::runtime {
namespace format {
class Program;
} // namespace format

/// cuBLASLt's workspace of every matmul (compute scratch).
constexpr int64_t kCudaMatmulWorkspaceBytes = int64_t(32) << 20;
/// One entry of the AdamW launch table (cuda::AdamwTensor: seven pointers
/// and two int64; CudaLaunch.h checks the size). A run of adamw
/// instructions sharing a launch reads its entries as one array.
constexpr int64_t kCudaAdamwEntryBytes = 72;
constexpr int64_t kCudaAdamwEntryAlignment = 8;

/// Row slices over which the norm gradients sum dscale/dbias partials
/// before the final column pass: about 256 rows each, 1 to 64.
int64_t cudaNormGradSlices(int64_t rows);

/// The deterministic scatter_add of `count` indices into a dimension of
/// `size`: a stable LSD radix sort of (index, position) pairs with 8-bit
/// digits over tiles of kTileItems, then one sum per output element over
/// its indices in position order (the CPU backend's order). Byte offsets
/// into its compute scratch.
struct CudaScatterAddPlan {
  static constexpr int64_t kTileThreads = 256;
  static constexpr int64_t kItemsPerThread = 4;
  static constexpr int64_t kTileItems = kTileThreads * kItemsPerThread;
  static constexpr int64_t kRadix = 256;
  int64_t count = 0, size = 0;
  int64_t tiles = 0;  ///< ceil(count / kTileItems)
  int passes = 0;     ///< 8-bit digits of `size` (the key of a bad index)
  /// Regions (uint32 each): keys and positions twice (the sort's double
  /// buffers), per-tile digit counts (kRadix * tiles, digit-major), and
  /// the first sorted position of each index value (size + 1).
  int64_t keys[2] = {0, 0}, positions[2] = {0, 0};
  int64_t counts = 0, starts = 0;
  int64_t totalBytes = 0;
};
/// Errors when an index or a position does not fit 32 bits.
StatusOr<CudaScatterAddPlan> planCudaScatterAdd(int64_t count, int64_t size);

/// The scratch `ctx`'s instruction requests on the CUDA backend (empty:
/// none); `groupSize` is the size of its communicator (collectives only).
/// The instruction is assumed valid (its factory checks it first).
StatusOr<ScratchSet> cudaKernelScratch(const KernelContext &ctx,
                                       int64_t groupSize = 1);

/// The scratch a rank running `program` on the CUDA backend reserves: the
/// requests of every instruction it binds, in binding order (the functions
/// of pipeline stage `stage` and those without a stage; every function
/// when `stage` is negative). Group sizes come from the program's mesh.
StatusOr<ScratchLayout> cudaProgramScratch(const format::Program &program,
                                           int64_t stage = -1);

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_EXEC_CUDASCRATCH_H
