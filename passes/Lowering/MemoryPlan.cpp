//===- MemoryPlan.cpp - greedy arena planning ------------------------------===//

#include "passes/Lowering/MemoryPlan.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>

namespace dtcc {

namespace {

/// The buffers' lifetimes, asked for those of the buffers placed so far
/// that overlap a lifetime in time proportional to the answer (plus a
/// logarithm) instead of every placed buffer: a lifetime [f, l] overlaps
/// [a, b] iff it contains a or starts in (a, b]. Two segment trees over the
/// steps answer each: one keeps a lifetime at the O(log steps) nodes that
/// cover it ("contains a": the nodes on the path from a's leaf to the
/// root), the other at every node above its first step ("starts in (a,
/// b]": the nodes that cover (a, b]). Each overlapping buffer is found
/// once. Scanning all placed buffers made the plan quadratic in the
/// program's buffers: most of a 310B pipeline's lowering.
///
/// Every buffer is entered at once, by its rank in the placement order, in
/// one flat array per tree (each node's ranks ascending), and a query
/// reads a node's ranks up to the asking buffer's: the buffers placed
/// before it. Growing a vector per node as buffers were placed spent as
/// long in malloc and free as in the plan (a 35-stage pipeline's stages).
class LifetimeIndex {
public:
  LifetimeIndex(const std::vector<PlannedBuffer> &buffers,
                const std::vector<size_t> &order) {
    int64_t steps = 0;
    for (const PlannedBuffer &b : buffers)
      steps = std::max(steps, b.last + 1);
    while (leaves_ < steps)
      leaves_ *= 2;
    // Count each node's entries, then fill them in placement order.
    covering_.begin.assign(2 * leaves_ + 1, 0);
    starting_.begin.assign(2 * leaves_ + 1, 0);
    for (size_t i : order)
      forEachNode(buffers[i],
                  [](Nodes &tree, int64_t node) { ++tree.begin[node + 1]; });
    for (Nodes *tree : {&covering_, &starting_}) {
      for (size_t k = 1; k < tree->begin.size(); ++k)
        tree->begin[k] += tree->begin[k - 1];
      tree->ranks.resize(tree->begin.back());
      tree->next.assign(tree->begin.begin(), tree->begin.end() - 1);
    }
    for (size_t rank = 0; rank < order.size(); ++rank)
      forEachNode(buffers[order[rank]], [rank](Nodes &tree, int64_t node) {
        tree.ranks[tree.next[node]++] = uint32_t(rank);
      });
  }

  /// Calls f(rank) for each buffer ranked below `rank` (placed before it)
  /// whose lifetime overlaps [first, last].
  template <typename F>
  void forEachPlacedOverlap(int64_t first, int64_t last, size_t rank,
                            F &&f) const {
    auto visit = [&](const Nodes &tree, int64_t node) {
      for (int64_t k = tree.begin[node], e = tree.begin[node + 1];
           k < e && tree.ranks[k] < rank; ++k)
        f(tree.ranks[k]);
    };
    for (int64_t node = first + leaves_; node >= 1; node /= 2)
      visit(covering_, node);
    for (int64_t lo = first + 1 + leaves_, hi = last + leaves_ + 1; lo < hi;
         lo /= 2, hi /= 2) {
      if (lo & 1)
        visit(starting_, lo++);
      if (hi & 1)
        visit(starting_, --hi);
    }
  }

private:
  /// One tree's entries: node k's ranks are ranks[begin[k], begin[k + 1]).
  struct Nodes {
    std::vector<int64_t> begin, next;
    std::vector<uint32_t> ranks;
  };

  /// Calls f(tree, node) for each node of each tree that keeps `b`.
  template <typename F> void forEachNode(const PlannedBuffer &b, F &&f) {
    for (int64_t lo = b.first + leaves_, hi = b.last + leaves_ + 1; lo < hi;
         lo /= 2, hi /= 2) {
      if (lo & 1)
        f(covering_, lo++);
      if (hi & 1)
        f(covering_, --hi);
    }
    for (int64_t node = b.first + leaves_; node >= 1; node /= 2)
      f(starting_, node);
  }

  int64_t leaves_ = 1;
  Nodes covering_, starting_;
};

/// The buffers' indices in the order `placement` places them.
std::vector<size_t> placementOrder(const std::vector<PlannedBuffer> &buffers,
                                   PlacementOrder placement) {
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
  return order;
}

/// Places the buffers in `order` (indexed by `index`), each into the gap
/// `gapChoice` chooses.
MemoryPlan placeInOrder(const std::vector<PlannedBuffer> &buffers,
                        const std::vector<size_t> &order,
                        const LifetimeIndex &index, GapChoice gapChoice) {
  MemoryPlan plan;
  plan.offsets.assign(buffers.size(), -1);
  std::vector<std::pair<int64_t, int64_t>> busy; // [offset, end) of overlaps
  for (size_t rank = 0; rank < order.size(); ++rank) {
    const size_t i = order[rank];
    const PlannedBuffer &b = buffers[i];
    int64_t size = alignBytes(std::max<int64_t>(b.size, 1));
    busy.clear();
    index.forEachPlacedOverlap(b.first, b.last, rank, [&](size_t r) {
      const size_t j = order[r];
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
  }
  return plan;
}

} // namespace

MemoryPlan planMemoryWith(const std::vector<PlannedBuffer> &buffers,
                          PlacementOrder placement, GapChoice gap) {
  std::vector<size_t> order = placementOrder(buffers, placement);
  return placeInOrder(buffers, order, LifetimeIndex(buffers, order), gap);
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
  // The rules of one order share its index.
  std::optional<PlacementOrder> indexed;
  std::vector<size_t> order;
  std::optional<LifetimeIndex> index;
  for (auto [placement, gap] : kRules) {
    if (indexed != placement) {
      order = placementOrder(buffers, placement);
      index.emplace(buffers, order);
      indexed = placement;
    }
    MemoryPlan plan = placeInOrder(buffers, order, *index, gap);
    if (best.offsets.empty() || plan.peakBytes < best.peakBytes)
      best = std::move(plan);
    if (best.peakBytes <= bound + bound / kCloseEnough)
      break;
  }
  return best;
}

int64_t liveBytesLowerBound(const std::vector<PlannedBuffer> &buffers) {
  // (step, change of the live bytes there), a step's changes summed
  // before the peak is read.
  std::vector<std::pair<int64_t, int64_t>> delta;
  delta.reserve(2 * buffers.size());
  for (const PlannedBuffer &b : buffers) {
    delta.push_back({b.first, alignBytes(std::max<int64_t>(b.size, 1))});
    delta.push_back({b.last + 1, -alignBytes(std::max<int64_t>(b.size, 1))});
  }
  std::sort(delta.begin(), delta.end());
  int64_t live = 0, peak = 0;
  for (size_t k = 0; k < delta.size(); ++k) {
    live += delta[k].second;
    if (k + 1 == delta.size() || delta[k + 1].first != delta[k].first)
      peak = std::max(peak, live);
  }
  return peak;
}

} // namespace dtcc
