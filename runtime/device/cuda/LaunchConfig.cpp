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

/// A byte range [begin, end) of device memory.
struct Range {
  uintptr_t begin, end;
  bool overlaps(const Range &o) const {
    return begin < end && o.begin < o.end && begin < o.end && o.begin < end;
  }
};

Range rangeOf(const void *p, int64_t bytes) {
  const uintptr_t b = reinterpret_cast<uintptr_t>(p);
  return {b, b + uintptr_t(bytes > 0 ? bytes : 0)};
}

std::vector<Range> readsOf(const AdamwMember &m) {
  const AdamwTensor &t = m.tensor;
  const int64_t f32 = t.n * int64_t(sizeof(float));
  return {rangeOf(t.param, f32),
          rangeOf(t.grad, t.n * dtypeSize(m.gradType)),
          rangeOf(t.m, f32),
          rangeOf(t.v, f32),
          rangeOf(m.lr, sizeof(float)),
          rangeOf(m.step, sizeof(int64_t)),
          rangeOf(m.gradScale, sizeof(float))};
}

std::vector<Range> writesOf(const AdamwMember &m) {
  const AdamwTensor &t = m.tensor;
  const int64_t f32 = t.n * int64_t(sizeof(float));
  return {rangeOf(t.newParam, f32), rangeOf(t.newM, f32),
          rangeOf(t.newV, f32)};
}

bool anyOverlap(const std::vector<Range> &a, const std::vector<Range> &b) {
  for (const Range &x : a)
    for (const Range &y : b)
      if (x.overlaps(y))
        return true;
  return false;
}

} // namespace

bool canJoinAdamwGroup(const std::vector<AdamwMember> &group,
                       const AdamwMember &next) {
  if (group.empty())
    return true;
  const AdamwMember &first = group.front();
  if (next.gradType != first.gradType || next.beta1 != first.beta1 ||
      next.beta2 != first.beta2 || next.eps != first.eps ||
      next.weightDecay != first.weightDecay || next.lr != first.lr ||
      next.step != first.step || next.gradScale != first.gradScale)
    return false;
  const std::vector<Range> reads = readsOf(next), writes = writesOf(next);
  for (const AdamwMember &m : group) {
    const std::vector<Range> w = writesOf(m);
    if (anyOverlap(w, reads) || anyOverlap(w, writes) ||
        anyOverlap(readsOf(m), writes))
      return false;
  }
  return true;
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
