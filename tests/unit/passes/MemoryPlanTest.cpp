//===- MemoryPlanTest.cpp - the static memory planner ---------------------===//
//
// Checks plans against a brute-force validity check (no two buffers that are
// live together overlap) and against the live-bytes lower bound.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/MemoryPlan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

using namespace dtcc;

namespace {

/// Every pair of buffers alive at one step occupies disjoint bytes, every
/// offset is aligned, and the peak covers every buffer.
void expectValid(const std::vector<PlannedBuffer> &buffers,
                 const MemoryPlan &plan) {
  ASSERT_EQ(plan.offsets.size(), buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) {
    EXPECT_EQ(plan.offsets[i] % kBufferAlignment, 0);
    EXPECT_LE(plan.offsets[i] + buffers[i].size, plan.peakBytes);
    for (size_t j = i + 1; j < buffers.size(); ++j) {
      bool together = buffers[i].first <= buffers[j].last &&
                      buffers[j].first <= buffers[i].last;
      bool disjoint = plan.offsets[i] + buffers[i].size <= plan.offsets[j] ||
                      plan.offsets[j] + buffers[j].size <= plan.offsets[i];
      EXPECT_TRUE(!together || disjoint) << "buffers " << i << " and " << j;
    }
  }
}

TEST(MemoryPlanTest, ReusesMemoryOfDeadBuffers) {
  // A chain a -> b -> c: a and c never live together.
  std::vector<PlannedBuffer> buffers = {{1000, 0, 1}, {1000, 1, 2}, {1000, 2, 3}};
  MemoryPlan plan = planMemory(buffers);
  expectValid(buffers, plan);
  EXPECT_EQ(plan.peakBytes, 2 * alignBytes(1000));
  EXPECT_EQ(plan.offsets[0], plan.offsets[2]);
}

TEST(MemoryPlanTest, PlacesSmallBuffersInGaps) {
  // A big buffer dies at 2; a small one born at 3 fits in its place.
  std::vector<PlannedBuffer> buffers = {
      {4096, 0, 2}, {4096, 0, 5}, {100, 3, 5}};
  MemoryPlan plan = planMemory(buffers);
  expectValid(buffers, plan);
  EXPECT_EQ(plan.peakBytes, 2 * 4096);
}

TEST(MemoryPlanTest, EmptyAndZeroSized) {
  EXPECT_EQ(planMemory({}).peakBytes, 0);
  std::vector<PlannedBuffer> buffers = {{0, 0, 0}, {0, 0, 0}};
  MemoryPlan plan = planMemory(buffers);
  expectValid(buffers, plan);
  EXPECT_NE(plan.offsets[0], plan.offsets[1]); // distinct addresses
}

TEST(MemoryPlanTest, RandomPlansAreValidAndNearTheLowerBound) {
  std::mt19937 rng(42);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<PlannedBuffer> buffers;
    int n = 5 + rng() % 200;
    for (int i = 0; i < n; ++i) {
      int64_t first = rng() % 300;
      buffers.push_back({int64_t(1 + rng() % 100000), first,
                         first + int64_t(rng() % 40)});
    }
    MemoryPlan plan = planMemory(buffers);
    expectValid(buffers, plan);
    int64_t bound = liveBytesLowerBound(buffers);
    EXPECT_GE(plan.peakBytes, bound);
    // Greedy-by-size stays close to optimal on such inputs.
    EXPECT_LE(plan.peakBytes, bound * 13 / 10) << "trial " << trial;
  }
}

} // namespace

/// The greedy plan as first written (largest first; the smallest gap, or
/// the lowest): each buffer's overlaps found by scanning every buffer
/// placed before it.
static MemoryPlan planByScanning(const std::vector<PlannedBuffer> &buffers,
                                 bool lowest) {
  MemoryPlan plan;
  plan.offsets.assign(buffers.size(), -1);
  std::vector<size_t> order(buffers.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (buffers[a].size != buffers[b].size)
      return buffers[a].size > buffers[b].size;
    return buffers[a].first < buffers[b].first;
  });
  std::vector<size_t> placed;
  for (size_t i : order) {
    const PlannedBuffer &b = buffers[i];
    int64_t size = alignBytes(std::max<int64_t>(b.size, 1));
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (size_t j : placed)
      if (buffers[j].first <= b.last && b.first <= buffers[j].last)
        busy.push_back({plan.offsets[j],
                        plan.offsets[j] +
                            alignBytes(std::max<int64_t>(buffers[j].size, 1))});
    std::sort(busy.begin(), busy.end());
    int64_t best = -1, bestGap = INT64_MAX, cursor = 0;
    for (auto [start, end] : busy) {
      if (start - cursor >= size && start - cursor < bestGap &&
          (!lowest || best < 0)) {
        best = cursor;
        bestGap = start - cursor;
      }
      cursor = std::max(cursor, end);
    }
    plan.offsets[i] = best < 0 ? cursor : best;
    plan.peakBytes = std::max(plan.peakBytes, plan.offsets[i] + size);
    placed.push_back(i);
  }
  return plan;
}

TEST(MemoryPlanTest, IndexedOverlapsPlanAsScanningDoes) {
  // Short and long lifetimes, equal sizes (ties), single steps, lifetimes
  // that start at step 0 and end at the last step.
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<PlannedBuffer> buffers;
    int n = 1 + rng() % 300;
    int64_t steps = 1 + rng() % 500;
    for (int i = 0; i < n; ++i) {
      int64_t first = rng() % steps;
      int64_t span = rng() % 4 == 0 ? rng() % steps : rng() % 8;
      buffers.push_back({int64_t(rng() % 6 == 0 ? 4096 : rng() % 50000),
                         first, std::min(steps - 1, first + span)});
    }
    for (GapChoice gap : {GapChoice::kSmallest, GapChoice::kLowest}) {
      MemoryPlan indexed =
          planMemoryWith(buffers, PlacementOrder::kLargestFirst, gap);
      MemoryPlan scanned =
          planByScanning(buffers, gap == GapChoice::kLowest);
      EXPECT_EQ(indexed.offsets, scanned.offsets) << "trial " << trial;
      EXPECT_EQ(indexed.peakBytes, scanned.peakBytes) << "trial " << trial;
    }
  }
}

TEST(MemoryPlanTest, TakesTheSmallestOfItsRules) {
  // Staggered lifetimes of a few sizes, as a pipeline stage's micro-batches
  // leave them: planMemory is valid and no larger than any of its rules
  // (or within 2% of the lower bound, where it stops trying), and the
  // rules differ: on some inputs one of them is larger.
  std::mt19937 rng(11);
  int strictlyBetter = 0;
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<PlannedBuffer> buffers;
    int n = 20 + rng() % 200;
    for (int i = 0; i < n; ++i) {
      int64_t first = rng() % 400;
      int64_t span = rng() % 3 == 0 ? 50 + rng() % 150 : rng() % 10;
      buffers.push_back({int64_t(1024 * (1 + rng() % 6)), first, first + span});
    }
    MemoryPlan plan = planMemory(buffers);
    expectValid(buffers, plan);
    const int64_t bound = liveBytesLowerBound(buffers);
    int64_t worst = 0;
    for (PlacementOrder order :
         {PlacementOrder::kLargestFirst, PlacementOrder::kEarliestFirst})
      for (GapChoice gap : {GapChoice::kSmallest, GapChoice::kLowest}) {
        MemoryPlan rule = planMemoryWith(buffers, order, gap);
        expectValid(buffers, rule);
        if (order == PlacementOrder::kLargestFirst ||
            gap == GapChoice::kSmallest)
          EXPECT_TRUE(plan.peakBytes <= rule.peakBytes ||
                      plan.peakBytes <= bound + bound / 50)
              << "trial " << trial;
        worst = std::max(worst, rule.peakBytes);
      }
    EXPECT_GE(plan.peakBytes, bound);
    strictlyBetter += plan.peakBytes < worst;
  }
  EXPECT_GT(strictlyBetter, 0);
}
