//===- LaunchConfig.h - grid and block sizes of the CUDA kernels -*- C++ -*-===//
//
// Host-side arithmetic shared by every launch: how many blocks and threads
// an elementwise kernel, a row kernel (softmax, norms, cross-entropy) and a
// column reduction get, and the 256-byte carving of a program's arenas out
// of one device allocation, and which consecutive adamw instructions share
// one launch. Pure C++, tested without a GPU.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CUDA_LAUNCHCONFIG_H
#define DTCC_RUNTIME_DEVICE_CUDA_LAUNCHCONFIG_H

#include "runtime/device/AdamwGroup.h"
#include "runtime/device/cuda/CudaLaunch.h"

#include <cstdint>
#include <vector>

namespace dtcc::runtime::cuda {

/// What the launch arithmetic needs to know of the device.
struct DeviceLimits {
  int smCount = 132;             ///< multiprocessors (H100 SXM: 132)
  int maxThreadsPerBlock = 1024;
  int64_t maxGridX = 2147483647; ///< 2^31 - 1
};

/// A 1-d or 2-d launch; `blocks == 0` means there is nothing to launch.
struct LaunchConfig {
  int64_t blocks = 0;
  int threadsX = 1, threadsY = 1;
  int threads() const { return threadsX * threadsY; }
};

/// Threads per block of the elementwise kernels.
constexpr int kElementwiseThreads = 256;
/// At most this many blocks per multiprocessor for grid-stride loops.
constexpr int kBlocksPerSm = 32;

/// A grid-stride loop over `n` elements: 256 threads, enough blocks to
/// cover n but at most kBlocksPerSm per multiprocessor.
LaunchConfig elementwiseLaunch(int64_t n, const DeviceLimits &limits);

/// Rows of `cols` elements each reduced by threadsX threads (a multiple of
/// 32: a warp for rows of up to 1024 elements, else a block of up to 1024
/// threads, about one thread per 4 elements); threadsY rows per block so a
/// block has at least 128 threads; blocks cover every row (grid-stride when
/// capped).
LaunchConfig rowLaunch(int64_t rows, int64_t cols, const DeviceLimits &limits);

/// Column sums of a [rows, cols] matrix (norm gradients' dscale/dbias):
/// threadsX = 32 consecutive columns, threadsY = 8 row slices; blocks cover
/// ceil(cols / 32) column groups.
LaunchConfig columnLaunch(int64_t rows, int64_t cols,
                          const DeviceLimits &limits);

/// A block per row of `packs` accesses (gather and scatter_add by rows):
/// threadsX a multiple of 32 up to 256 covering the row, blocks one per row
/// but at most kBlocksPerSm per multiprocessor (grid-stride over the rest).
LaunchConfig packRowLaunch(int64_t rows, int64_t packs,
                           const DeviceLimits &limits);

/// The vector width (1: the scalar kernels) and which operands broadcast
/// one element along the innermost dimension.
struct VectorPlan {
  int width = 1;
  bool broadcast[kMaxOperands] = {};
};

/// The plan of `l` for `n` operands `data` (output first) of `elemSize`
/// bytes: width 16 / elemSize when the layout is linear or its innermost
/// dimension is a multiple of the width, every operand's innermost stride
/// is 1 (16-byte aligned, outer strides multiples of the width) or 0 (not
/// the output), and there is at least one whole vector.
VectorPlan vectorPlan(const Layout &l, int elemSize, const void *const *data,
                      int n);

/// The smallest power of two >= v (v >= 1).
int64_t nextPowerOfTwo(int64_t v);

/// Arenas carved from one allocation: offset of each and the total size.
struct ArenaLayout {
  std::vector<int64_t> offsets;
  int64_t totalBytes = 0;
};

/// The alignment of each arena in the allocation (cudaMalloc's own).
constexpr int64_t kArenaAlignment = 256;

/// Lays `sizes` (bytes, >= 0) out back to back, each starting at a multiple
/// of `alignment` (a power of two); an empty arena takes no space but still
/// gets an aligned offset. The total is at least 1 and a multiple of the
/// alignment.
ArenaLayout carveArenas(const std::vector<int64_t> &sizes,
                        int64_t alignment = kArenaAlignment);

/// One adamw instruction as the fusion of consecutive adamw instructions
/// sees it: its tensors and what its launch shares with the others.
struct AdamwMember {
  AdamwTensor tensor;
  DType gradType = DType::kF32;
  /// The type of tensor.rounded (kF32: the member writes no rounded copy).
  DType roundedType = DType::kF32;
  double beta1 = 0, beta2 = 0, eps = 0, weightDecay = 0;
  const void *lr = nullptr, *step = nullptr, *gradScale = nullptr;
};

/// Whether `next`, the adamw bound right after the members of `group`, can
/// run in their launch (runtime::canJoinAdamwGroup of their tensors).
bool canJoinAdamwGroup(const std::vector<AdamwMember> &group,
                       const AdamwMember &next);

/// Splits a run of consecutive adamw members into launches by
/// canJoinAdamwGroup, greedily in order; returns each launch's size.
std::vector<int> groupAdamw(const std::vector<AdamwMember> &members);

} // namespace dtcc::runtime::cuda

#endif // DTCC_RUNTIME_DEVICE_CUDA_LAUNCHCONFIG_H
