//===- MemoryPlan.cpp - greedy-by-size arena planning ---------------------===//

#include "passes/Lowering/MemoryPlan.h"

#include <algorithm>
#include <map>
#include <numeric>

namespace dtcc {

MemoryPlan planMemory(const std::vector<PlannedBuffer> &buffers) {
  MemoryPlan plan;
  plan.offsets.assign(buffers.size(), -1);
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (buffers[a].size != buffers[b].size)
      return buffers[a].size > buffers[b].size;
    return buffers[a].first < buffers[b].first;
  });

  std::vector<size_t> placed;
  std::vector<std::pair<int64_t, int64_t>> busy; // [offset, end) of overlaps
  for (size_t i : order) {
    const PlannedBuffer &b = buffers[i];
    int64_t size = alignBytes(std::max<int64_t>(b.size, 1));
    busy.clear();
    for (size_t j : placed) {
      const PlannedBuffer &o = buffers[j];
      if (o.first <= b.last && b.first <= o.last)
        busy.push_back({plan.offsets[j],
                        plan.offsets[j] + alignBytes(std::max<int64_t>(o.size, 1))});
    }
    std::sort(busy.begin(), busy.end());
    int64_t best = -1, bestGap = INT64_MAX, cursor = 0;
    for (auto [start, end] : busy) {
      int64_t gap = start - cursor;
      if (gap >= size && gap < bestGap) {
        best = cursor;
        bestGap = gap;
      }
      cursor = std::max(cursor, end);
    }
    if (best < 0)
      best = cursor;
    plan.offsets[i] = best;
    plan.peakBytes = std::max(plan.peakBytes, best + size);
    placed.push_back(i);
  }
  return plan;
}

int64_t liveBytesLowerBound(const std::vector<PlannedBuffer> &buffers) {
  std::map<int64_t, int64_t> delta;
  for (const PlannedBuffer &b : buffers) {
    delta[b.first] += alignBytes(std::max<int64_t>(b.size, 1));
    delta[b.last + 1] -= alignBytes(std::max<int64_t>(b.size, 1));
  }
  int64_t live = 0, peak = 0;
  for (auto [step, d] : delta) {
    live += d;
    peak = std::max(peak, live);
  }
  return peak;
}

} // namespace dtcc
