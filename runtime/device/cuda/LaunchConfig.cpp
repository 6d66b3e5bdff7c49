//===- LaunchConfig.cpp - grid and block sizes of the CUDA kernels --------===//

#include "runtime/device/cuda/LaunchConfig.h"
#include "runtime/device/cuda/CudaLaunch.h"

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

LaunchConfig packRowLaunch(int64_t rows, int64_t packs,
                           const DeviceLimits &limits) {
  LaunchConfig c;
  c.threadsX = int(std::clamp<int64_t>(ceilDiv(packs, 32) * 32, 32, 256));
  if (rows > 0)
    c.blocks = std::min(rows, maxBlocks(limits));
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

namespace dtcc::runtime::cuda {

int64_t planAdamwChunks(AdamwTensor *tensors, int count) {
  int64_t total = 0;
  for (int i = 0; i < count; ++i) {
    tensors[i].firstChunk = total;
    total += (tensors[i].n + kAdamwChunk - 1) / kAdamwChunk;
  }
  return total;
}

namespace {

/// What `m` shares with a launch and the device memory it reads and writes.
AdamwAccess accessOf(const AdamwMember &m) {
  const AdamwTensor &t = m.tensor;
  const int64_t f32 = t.n * int64_t(sizeof(float));
  AdamwAccess a;
  a.gradType = m.gradType;
  a.roundedType = m.roundedType;
  a.beta1 = m.beta1;
  a.beta2 = m.beta2;
  a.eps = m.eps;
  a.weightDecay = m.weightDecay;
  a.lr = m.lr;
  a.step = m.step;
  a.gradScale = m.gradScale;
  a.reads = {byteRange(t.param, f32),
             byteRange(t.grad, t.n * dtypeSize(m.gradType)),
             byteRange(t.m, f32),
             byteRange(t.v, f32),
             byteRange(m.lr, sizeof(float)),
             byteRange(m.step, sizeof(int64_t)),
             byteRange(m.gradScale, sizeof(float))};
  a.writes = {byteRange(t.newParam, f32), byteRange(t.newM, f32),
              byteRange(t.newV, f32)};
  if (m.roundedType != DType::kF32)
    a.writes.push_back(byteRange(t.rounded, t.n * dtypeSize(m.roundedType)));
  return a;
}

} // namespace

bool canJoinAdamwGroup(const std::vector<AdamwMember> &group,
                       const AdamwMember &next) {
  std::vector<AdamwAccess> members;
  for (const AdamwMember &m : group)
    members.push_back(accessOf(m));
  return runtime::canJoinAdamwGroup(members, accessOf(next));
}

std::vector<int> groupAdamw(const std::vector<AdamwMember> &members) {
  std::vector<int> sizes;
  std::vector<AdamwMember> group;
  for (const AdamwMember &m : members) {
    if (!canJoinAdamwGroup(group, m)) {
      sizes.push_back(int(group.size()));
      group.clear();
    }
    group.push_back(m);
  }
  if (!group.empty())
    sizes.push_back(int(group.size()));
  return sizes;
}

VectorPlan vectorPlan(const Layout &l, int elemSize, const void *const *data,
                      int n) {
  const int width = 16 / elemSize;
  if (width < 2 || l.numel < width)
    return {};
  const int inner = l.rank - 1;
  if (!l.linear && l.shape[inner] % width != 0)
    return {};
  VectorPlan plan;
  for (int k = 0; k < n; ++k) {
    const int64_t stride = l.linear ? 1 : l.strides[inner][k];
    if (stride == 0 && k > 0) {
      plan.broadcast[k] = true;
      continue;
    }
    if (stride != 1 || (reinterpret_cast<uintptr_t>(data[k]) & 15) != 0)
      return {};
    for (int d = 0; !l.linear && d < inner; ++d)
      if (l.strides[d][k] % width != 0)
        return {};
  }
  plan.width = width;
  return plan;
}

void prepareLayout(Layout &l) {
  l.fastDivision = !l.linear && l.numel < int64_t(kFastDivisionLimit);
  for (int d = 0; d < kMaxLayoutDims; ++d)
    l.divisors[d] = l.fastDivision && d < l.rank
                        ? makeFastDivisor(uint32_t(l.shape[d]))
                        : FastDivisor();
}

} // namespace dtcc::runtime::cuda
