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

#include "runtime/device/cpu/AxisMap.h"
#include "runtime/exec/Kernel.h"
#include "runtime/exec/Scratch.h"

#include <vector>

namespace dtcc::runtime {
namespace format {
class Program;
} // namespace format

/// cuBLASLt's workspace of every matmul (compute scratch).
constexpr int64_t kCudaMatmulWorkspaceBytes = int64_t(32) << 20;
/// One entry of the AdamW launch table (cuda::AdamwTensor: seven pointers
/// and two int64; CudaLaunch.h checks the size). A run of adamw
/// instructions sharing a launch reads its entries as one array.
constexpr int64_t kCudaAdamwEntryBytes = 80;
constexpr int64_t kCudaAdamwEntryAlignment = 8;

/// global_sum_squares sums every operand in one launch: each operand cut
/// into chunks of kCudaSumSquaresChunk elements, a block per chunk writing
/// its partial sum, then one block adding each operand's partials and the
/// operands' sums in order. Its scratch: the launch's operand table
/// (persistent, kCudaSumSquaresEntryBytes an operand, written once when the
/// reservation is made; cuda::SumSquaresTensor, CudaLaunch.h checks the
/// size) and the partial sums (compute, 8 bytes for each chunk and each
/// operand).
constexpr int64_t kCudaSumSquaresChunk = 16384;
constexpr int64_t kCudaSumSquaresEntryBytes = 32;
constexpr int64_t kCudaSumSquaresEntryAlignment = 8;
/// The chunks of one operand of `numel` elements (0 for an empty one).
inline int64_t cudaSumSquaresChunks(int64_t numel) {
  return (numel + kCudaSumSquaresChunk - 1) / kCudaSumSquaresChunk;
}
/// attention and attention_grad run on cuDNN's fused flash attention
/// (runtime/device/cuda/CudnnAttention.cpp) when cuDNN is there and the call
/// is one it takes: f16 or bf16, no mask, D == Dv a multiple of 8 up to
/// kCudnnAttentionMaxHeadDim. The compute scratch such a call requests for
/// cuDNN's workspace (attention_grad: after its rowsum(dout * out) floats,
/// which cuDNN's graph reads as its softmax sum): the forward
/// kCudaMatmulWorkspaceBytes; the backward the larger of that and its
/// deterministic kernel's dP workspace (2 bytes per score, rows and keys
/// rounded up to 64, with dq's f32 size and 1 MiB to spare). 0: the call
/// runs dtcc's own kernels (cuDNN does not take it, or the backward's
/// workspace would exceed kCudnnAttentionMaxWorkspaceBytes). Each kernel
/// takes cuDNN's plan only if its workspace fits this request; otherwise,
/// or when cuDNN finds no engine, dtcc's own kernels run.
constexpr int64_t kCudnnAttentionMaxHeadDim = 128;
constexpr int64_t kCudnnAttentionMaxWorkspaceBytes = int64_t(512) << 20;
int64_t cudnnAttentionWorkspace(bool backward, DType dtype, bool hasMask,
                                int64_t batch, int64_t sq, int64_t sk,
                                int64_t d, int64_t dv);

/// Row slices over which the norm gradients sum dscale/dbias partials
/// before the final column pass: about 256 rows each, 1 to 64.
int64_t cudaNormGradSlices(int64_t rows);

/// How the CUDA backend runs reduce_{sum,prod,max,min} of `shape` over
/// `dims`: neighbouring dims of one kind that are contiguous in the input
/// merged into runs of (size, input stride), and the reduced elements cut
/// into `slices` whose partial results (8 bytes each, in `scratchBytes` of
/// compute-stream scratch) a second pass combines in slice order. Slicing
/// keeps the GPU busy when there are few outputs (a gradient norm's sum of
/// a whole tensor, a bias gradient's sum over the tokens); the order of
/// the additions depends only on the shapes, so every run gives the same.
struct CudaReducePlan {
  std::vector<std::pair<int64_t, int64_t>> kept, reduced; ///< (size, stride)
  int64_t outNumel = 0, reducedNumel = 1;
  /// The reduced elements are one unit-stride run at the end (rows).
  bool rowTail = false;
  int64_t slices = 1;
  int64_t scratchBytes = 0;
};
StatusOr<CudaReducePlan> planCudaReduce(const std::vector<int64_t> &shape,
                                        const std::vector<int64_t> &dims);

/// A stable LSD radix sort of `count` (key, position) pairs by key, keys in
/// [0, maxKey] (maxKey marks a bad index and sorts last), with 8-bit digits
/// over tiles of kTileItems (the scatter kernels' sort). Byte offsets into
/// its compute scratch.
struct CudaRadixSortPlan {
  static constexpr int64_t kTileThreads = 256;
  static constexpr int64_t kItemsPerThread = 4;
  static constexpr int64_t kTileItems = kTileThreads * kItemsPerThread;
  static constexpr int64_t kRadix = 256;
  int64_t count = 0, maxKey = 0;
  int64_t tiles = 0;  ///< ceil(count / kTileItems)
  int passes = 0;     ///< 8-bit digits of maxKey
  /// Regions (uint32 each): keys and positions twice (the sort's double
  /// buffers), per-tile digit counts (kRadix * tiles, digit-major), and,
  /// when asked for, the first sorted position of each key (maxKey + 1;
  /// -1 otherwise).
  int64_t keys[2] = {0, 0}, positions[2] = {0, 0};
  int64_t counts = 0, starts = -1;
  int64_t totalBytes = 0;
};
/// Errors when a key or a position does not fit 32 bits.
StatusOr<CudaRadixSortPlan> planCudaRadixSort(int64_t count, int64_t maxKey,
                                              bool starts);

/// The deterministic scatter_add of `count` indices into a dimension of
/// `size`: the sort of (index, position) pairs (`size` for a bad index),
/// then one sum per output element over its indices in position order
/// (the CPU backend's order), which reads the segment starts.
using CudaScatterAddPlan = CudaRadixSortPlan;
StatusOr<CudaScatterAddPlan> planCudaScatterAdd(int64_t count, int64_t size);

/// scatter_nd and scatter_elements of `units` updates onto `targets`
/// targets (scatter_nd: the data's slices [B.., K..]; scatter_elements:
/// its elements): the sort of (target, update) pairs, `targets` for a bad
/// index, after which one thread per target applies its updates in order.
StatusOr<CudaRadixSortPlan> planCudaScatterSort(int64_t units,
                                                int64_t targets);

/// The cap on cuDNN's workspace of a convolution (conv, conv_input_grad,
/// conv_filter_grad): each requests this much compute scratch, and its
/// kernel takes cuDNN's fastest deterministic algorithm whose workspace
/// fits (CudaConv.cpp). cuDNN alone knows an algorithm's need, so the
/// request is this cap: 64 MiB, twice cuBLASLt's workspace; faster
/// algorithms that need more are passed over. The compute arena is shared,
/// so a program reserves it once however many convolutions it has.
constexpr int64_t kCudaConvWorkspaceBytes = int64_t(64) << 20;

/// Blocks per channel of the batch-norm sums (batch_norm_stats,
/// batch_norm_grad_stats), whose double partials [channels][slices][2] are
/// compute scratch: enough that all channels together have about
/// kCudaBatchNormBlocks blocks (four per multiprocessor on GPUs of up to
/// 256), but no slice shorter than kCudaBatchNormSliceMin elements; at
/// least 1. A function of the shapes alone, not of the GPU, so the planner
/// counts what a rank reserves.
constexpr int64_t kCudaBatchNormBlocks = 1024;
constexpr int64_t kCudaBatchNormSliceMin = 4096;
int64_t cudaBatchNormSlices(int64_t channels, int64_t perChannel);

/// Where the per-dimension tap tables of a resize or an edge/reflect/wrap
/// pad (and of their gradients) lie in its persistent scratch, written once
/// when the reservation is made: for each dimension d its offsets
/// (outSize + 1 int64), taps (int64 element offsets into the input) and
/// weights (double), then the fill flags (outSize bytes) of the dimensions
/// that fill (-1 for the others). Byte offsets from the table's start.
struct CudaAxisMapTables {
  std::vector<int64_t> offsets, taps, weights, fill;
  int64_t totalBytes = 0;
};
constexpr int64_t kCudaAxisMapTableAlignment = 8;
CudaAxisMapTables planCudaAxisMapTables(const std::vector<cpu::AxisMap> &maps);

/// The maps a resize, resize_grad, pad (modes edge, reflect, wrap) or
/// pad_grad instruction applies, one per dimension of the tensor it reads
/// (the gradients apply the forward maps' transposes), from its shapes and
/// attributes; errors name the instruction. Other kernels: an error.
StatusOr<std::vector<cpu::AxisMap>> cudaAxisMaps(const KernelContext &ctx);

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
