//===- LaunchConfig.cpp - grid and block sizes of the CUDA kernels --------===//

#include "runtime/device/cuda/LaunchConfig.h"

#include <algorithm>

namespace dtcc::runtime::cuda {

static int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t nextPowerOfTwo(int64_t v) {
  int64_t p = 1;
  while (p < v)
    p *= 2;
  return p;
}

static int64_t maxBlocks(const DeviceLimits &limits) {
  return std::min<int64_t>(int64_t(std::max(limits.smCount, 1)) * kBlocksPerSm,
                           limits.maxGridX);
}

LaunchConfig elementwiseLaunch(int64_t n, const DeviceLimits &limits) {
  LaunchConfig c;
  c.threadsX = kElementwiseThreads;
  if (n <= 0)
    return c;
  c.blocks = std::min(ceilDiv(n, kElementwiseThreads), maxBlocks(limits));
  return c;
}

LaunchConfig rowLaunch(int64_t rows, int64_t cols, const DeviceLimits &limits) {
  LaunchConfig c;
  const int maxThreads = std::max(32, limits.maxThreadsPerBlock / 32 * 32);
  if (cols <= 1024) {
    c.threadsX = 32;
  } else {
    // About four elements per thread, whole warps, at most a block.
    int64_t t = nextPowerOfTwo(ceilDiv(cols, 4));
    c.threadsX = int(std::clamp<int64_t>(t, 32, maxThreads));
  }
  c.threadsY = std::max(1, std::min(128 / c.threadsX, maxThreads / c.threadsX));
  if (rows <= 0)
    return c;
  c.blocks = std::min(ceilDiv(rows, c.threadsY), limits.maxGridX);
  return c;
}

LaunchConfig columnLaunch(int64_t rows, int64_t cols,
                          const DeviceLimits &limits) {
  LaunchConfig c;
  c.threadsX = 32;
  c.threadsY = 8;
  if (rows <= 0 || cols <= 0)
    return c;
  c.blocks = std::min(ceilDiv(cols, 32), limits.maxGridX);
  return c;
}

ArenaLayout carveArenas(const std::vector<int64_t> &sizes, int64_t alignment) {
  ArenaLayout layout;
  int64_t offset = 0;
  for (int64_t size : sizes) {
    offset = ceilDiv(offset, alignment) * alignment;
    layout.offsets.push_back(offset);
    offset += std::max<int64_t>(size, 0);
  }
  layout.totalBytes =
      std::max<int64_t>(ceilDiv(offset, alignment) * alignment, alignment);
  return layout;
}

} // namespace dtcc::runtime::cuda

#include "runtime/device/cuda/CudaLaunch.h"

namespace dtcc::runtime::cuda {

int64_t planAdamwChunks(AdamwTensor *tensors, int count) {
  int64_t total = 0;
  for (int i = 0; i < count; ++i) {
    tensors[i].firstChunk = total;
    total += (tensors[i].n + kAdamwChunk - 1) / kAdamwChunk;
  }
  return total;
}

} // namespace dtcc::runtime::cuda
