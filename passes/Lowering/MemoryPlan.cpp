//===- MemoryPlan.cpp - greedy arena planning ------------------------------===//

#include "passes/Lowering/MemoryPlan.h"

#include <algorithm>
#include <map>
#include <numeric>

namespace dtcc {

namespace {

/// The placed buffers' lifetimes, asked for those that overlap a lifetime
/// in time proportional to the answer (plus a logarithm) instead of every
/// placed buffer: a lifetime [f, l] overlaps [a, b] iff it contains a or
/// starts in (a, b]. Two segment trees over the steps answer each: one
/// keeps a lifetime at the O(log steps) nodes that cover it ("contains a":
/// the nodes on the path from a's leaf to the root), the other at every
/// node above its first step ("starts in (a, b]": the nodes that cover
/// (a, b]). Each overlapping buffer is found once. Scanning all placed
/// buffers made the plan quadratic in the program's buffers: most of a
/// 310B pipeline's lowering.
class LifetimeIndex {
public:
  explicit LifetimeIndex(int64_t steps) {
    while (leaves_ < steps)
      leaves_ *= 2;
    covering_.resize(2 * leaves_);
    starting_.resize(2 * leaves_);
  }

  void insert(int64_t first, int64_t last, size_t id) {
    for (int64_t lo = first + leaves_, hi = last + leaves_ + 1; lo < hi;
         lo /= 2, hi /= 2) {
      if (lo & 1)
        covering_[lo++].push_back(id);
      if (hi & 1)
        covering_[--hi].push_back(id);
    }
    for (int64_t node = first + leaves_; node >= 1; node /= 2)
      starting_[node].push_back(id);
  }

  template <typename F>
  void forEachOverlap(int64_t first, int64_t last, F &&f) const {
    for (int64_t node = first + leaves_; node >= 1; node /= 2)
      for (size_t id : covering_[node])
        f(id);
    for (int64_t lo = first + 1 + leaves_, hi = last + leaves_ + 1; lo < hi;
         lo /= 2, hi /= 2) {
      if (lo & 1)
        for (size_t id : starting_[lo++])
          f(id);
      if (hi & 1)
        for (size_t id : starting_[--hi])
          f(id);
    }
  }

private:
  int64_t leaves_ = 1;
  std::vector<std::vector<size_t>> covering_, starting_;
};

} // namespace

MemoryPlan planMemoryWith(const std::vector<PlannedBuffer> &buffers,
                          PlacementOrder placement, GapChoice gapChoice) {
  MemoryPlan plan;
  plan.offsets.assign(buffers.size(), -1);
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), 0);
  if (placement == PlacementOrder::kLargestFirst)
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      if (buffers[a].size != buffers[b].size)
        return buffers[a].size > buffers[b].size;
      return buffers[a].first < buffers[b].first;
    });
  else
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      if (buffers[a].first != buffers[b].first)
        return buffers[a].first < buffers[b].first;
      return buffers[a].size > buffers[b].size;
    });

  int64_t steps = 0;
  for (const PlannedBuffer &b : buffers)
    steps = std::max(steps, b.last + 1);
  LifetimeIndex placed(steps);
  std::vector<std::pair<int64_t, int64_t>> busy; // [offset, end) of overlaps
  for (size_t i : order) {
    const PlannedBuffer &b = buffers[i];
    int64_t size = alignBytes(std::max<int64_t>(b.size, 1));
    busy.clear();
    placed.forEachOverlap(b.first, b.last, [&](size_t j) {
      busy.push_back({plan.offsets[j],
                      plan.offsets[j] +
                          alignBytes(std::max<int64_t>(buffers[j].size, 1))});
    });
    // By start only: buffers that start at one offset leave no gap
    // between them whatever their order.
    std::sort(busy.begin(), busy.end(),
              [](const auto &x, const auto &y) { return x.first < y.first; });
    int64_t best = -1, bestGap = INT64_MAX, cursor = 0;
    for (auto [start, end] : busy) {
      int64_t gap = start - cursor;
      if (gap >= size && gap < bestGap) {
        best = cursor;
        bestGap = gap;
        if (gapChoice == GapChoice::kLowest)
          break;
      }
      cursor = std::max(cursor, end);
    }
    if (best < 0)
      best = cursor;
    plan.offsets[i] = best;
    plan.peakBytes = std::max(plan.peakBytes, best + size);
    placed.insert(b.first, b.last, i);
  }
  return plan;
}

/// A plan within 1/kCloseEnough of the lower bound is kept without trying
/// the other rules (each costs as much again: a 23,000-buffer pipeline
/// stage's plan takes about a second).
constexpr int64_t kCloseEnough = 50;

MemoryPlan planMemory(const std::vector<PlannedBuffer> &buffers) {
  const int64_t bound = liveBytesLowerBound(buffers);
  constexpr std::pair<PlacementOrder, GapChoice> kRules[] = {
      {PlacementOrder::kLargestFirst, GapChoice::kLowest},
      {PlacementOrder::kLargestFirst, GapChoice::kSmallest},
      {PlacementOrder::kEarliestFirst, GapChoice::kSmallest}};
  MemoryPlan best;
  for (auto [order, gap] : kRules) {
    MemoryPlan plan = planMemoryWith(buffers, order, gap);
    if (best.offsets.empty() || plan.peakBytes < best.peakBytes)
      best = std::move(plan);
    if (best.peakBytes <= bound + bound / kCloseEnough)
      break;
  }
  return best;
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
