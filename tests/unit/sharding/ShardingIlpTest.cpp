//===- ShardingIlpTest.cpp - the sharding ILP and its cost model ----------===//
//
// The formulation against hand-solved problems and against trying every
// assignment; the ring formulas of the collective cost model.
//
//===----------------------------------------------------------------------===//

#include "passes/Planning/ShardingIlp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace dtcc::shard;

namespace {

constexpr double kInf = ShardingProblem::kForbidden;

// The ILP prices collectives as the planner does (planner/CostPrimitives.h):
// bus volume over bandwidth plus latency times the steps of NCCL's
// algorithms (the fewer of a ring's and a tree's for all-reduce, a ring's
// for all-gather and reduce-scatter), so it optimizes the objective
// candidates are ranked by.
TEST(StepCostModel, TheCostPrimitivesFormulas) {
  StepCostModel m;
  m.flops = 1e12;
  m.busBandwidth = 1e9;
  m.latency = 1e-5;
  // all-reduce on 4 ranks: 2(n-1)/n of the bytes; min(2(n-1), 2 log2 n) = 4
  // steps.
  EXPECT_DOUBLE_EQ(m.allReduce(4e6, 4), 2.0 * 3 / 4 * 4e6 / 1e9 + 4 * 1e-5);
  // all-gather and reduce-scatter: (n-1)/n; rings only in NCCL: n-1 = 3
  // steps.
  EXPECT_DOUBLE_EQ(m.allGather(4e6, 4), 3.0 / 4 * 4e6 / 1e9 + 3 * 1e-5);
  EXPECT_DOUBLE_EQ(m.reduceScatter(4e6, 4), m.allGather(4e6, 4));
  // Two ranks: ring and tree agree (2 and 1 steps).
  EXPECT_DOUBLE_EQ(m.allReduce(4e6, 2), 4e6 / 1e9 + 2 * 1e-5);
  EXPECT_DOUBLE_EQ(m.allReduce(4e6, 1), 0);
  EXPECT_DOUBLE_EQ(m.allGather(4e6, 1), 0);
  EXPECT_DOUBLE_EQ(m.compute(2e12), 2.0);
  // An axis with its own link (tp inside a node); others use the default.
  m.links = {{"tp", 4e9, 1e-6}};
  EXPECT_DOUBLE_EQ(m.allReduce(4e6, 4, "tp"),
                   2.0 * 3 / 4 * 4e6 / 4e9 + 4 * 1e-6);
  EXPECT_DOUBLE_EQ(m.allGather(4e6, 4, "tp"), 3.0 / 4 * 4e6 / 4e9 + 3 * 1e-6);
  EXPECT_DOUBLE_EQ(m.allGather(4e6, 4, "dp"), 3.0 / 4 * 4e6 / 1e9 + 3 * 1e-5);
  // One formula: the primitives' own answer for every group size.
  for (int64_t n : {2, 3, 8, 16, 64})
    EXPECT_DOUBLE_EQ(m.allReduce(1e6, n, "dp"),
                     dtcc::planner::collectiveSeconds(
                         dtcc::planner::Collective::kAllReduce, 1e6, n, 1e9,
                         1e-5));
}

/// A chain a -> b: a's choice puts its value in state 0 or 1; b needs state
/// 0 (cheap for b) or 1 (expensive); moving 0 -> 1 costs 5, 1 -> 0 costs 1.
TEST(ShardingProblem, ChainPicksTheCheapestPair) {
  ShardingProblem p;
  int a = p.addNode("a", {3, 0});
  int b = p.addNode("b", {0, 10});
  int v = p.addValue(a, {0, 1}, {{0, 5}, {1, 0}});
  p.addUse(v, b, {0, 1});
  std::string error;
  auto s = p.solve(10, error);
  ASSERT_TRUE(s) << error;
  // (a=1, b=0): 0 + 0 + reshard 1 -> 0 (1) = 1; (a=0, b=0): 3.
  EXPECT_EQ(s->choice, (std::vector<int>{1, 0}));
  EXPECT_DOUBLE_EQ(s->cost, 1);
  EXPECT_TRUE(s->optimal);
}

/// Two users that need the same state pay one reshard, not two.
TEST(ShardingProblem, ReshardIsSharedByUsers) {
  ShardingProblem p;
  int a = p.addNode("a", {0});
  int b = p.addNode("b", {0, 3});
  int c = p.addNode("c", {0, 3});
  int v = p.addValue(a, {0}, {{0, 4}, {4, 0}});
  p.addUse(v, b, {1, 0});
  p.addUse(v, c, {1, 0});
  std::string error;
  auto s = p.solve(10, error);
  ASSERT_TRUE(s) << error;
  // Both in state 1: one reshard (4) beats both keeping state 0 (3 + 3).
  EXPECT_EQ(s->choice, (std::vector<int>{0, 0, 0}));
  EXPECT_DOUBLE_EQ(s->cost, 4);
  EXPECT_DOUBLE_EQ(p.cost({0, 1, 1}), 6);
  EXPECT_DOUBLE_EQ(p.cost({0, 0, 1}), 7);
}

/// A forbidden reshard is never chosen, however cheap the nodes make it.
TEST(ShardingProblem, ForbiddenReshard) {
  ShardingProblem p;
  int a = p.addNode("a", {0, 100});
  int b = p.addNode("b", {0, 100});
  int v = p.addValue(a, {0, 1}, {{0, kInf}, {0, 0}});
  p.addUse(v, b, {1, 0});
  std::string error;
  auto s = p.solve(10, error);
  ASSERT_TRUE(s) << error;
  EXPECT_TRUE(std::isinf(p.cost({0, 0})));
  EXPECT_DOUBLE_EQ(s->cost, 100);
}

/// A rule (what a deterministic pass makes of its inputs) binds the user.
TEST(ShardingProblem, RuleBindsTheUser) {
  ShardingProblem p;
  int a = p.addNode("a", {0, 1});
  int b = p.addNode("b", {5, 0});
  int v = p.addValue(a, {0, 1}, {{0, 0}, {0, 0}});
  p.addUse(v, b, {0, 0});
  // Value in state 0: b must pick choice 0.
  p.addRule({{v, 0}}, b, {0});
  std::string error;
  auto s = p.solve(10, error);
  ASSERT_TRUE(s) << error;
  EXPECT_EQ(s->choice, (std::vector<int>{1, 1}));
  EXPECT_DOUBLE_EQ(s->cost, 1);
  EXPECT_TRUE(std::isinf(p.cost({0, 1})));
}

TEST(ShardingProblem, InfeasibleIsAnError) {
  ShardingProblem p;
  int a = p.addNode("a", {0});
  int b = p.addNode("b", {0});
  int v = p.addValue(a, {0}, {{0, kInf}, {kInf, 0}});
  p.addUse(v, b, {1});
  std::string error;
  EXPECT_FALSE(p.solve(10, error));
  EXPECT_NE(error.find("infeasible"), std::string::npos) << error;
}

/// Random problems: the ILP's optimum is the least cost over every
/// assignment.
TEST(ShardingProblem, MatchesBruteForceOnRandomProblems) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 200; ++trial) {
    ShardingProblem p;
    int nodes = 3 + trial % 5;
    std::uniform_int_distribution<int> choices(1, 3);
    std::uniform_real_distribution<double> cost(0, 10);
    std::vector<int> counts;
    for (int n = 0; n < nodes; ++n) {
      counts.push_back(choices(rng));
      std::vector<double> c;
      for (int i = 0; i < counts.back(); ++i)
        c.push_back(cost(rng));
      p.addNode("n" + std::to_string(n), c);
    }
    // Each node but the last makes a value with 3 states; later nodes use
    // it with probability 1/2.
    std::vector<int> values;
    for (int n = 0; n + 1 < nodes; ++n) {
      std::vector<int> stateOf;
      for (int i = 0; i < counts[n]; ++i)
        stateOf.push_back(std::uniform_int_distribution<int>(0, 2)(rng));
      std::vector<std::vector<double>> t(3, std::vector<double>(3, 0));
      for (auto &row : t)
        for (double &x : row)
          x = std::uniform_int_distribution<int>(0, 9)(rng) == 0 ? kInf
                                                                 : cost(rng);
      int v = p.addValue(n, stateOf, t);
      values.push_back(v);
      for (int m = n + 1; m < nodes; ++m)
        if (std::uniform_int_distribution<int>(0, 1)(rng)) {
          std::vector<int> needs;
          for (int i = 0; i < counts[m]; ++i)
            needs.push_back(std::uniform_int_distribution<int>(0, 2)(rng));
          p.addUse(v, m, needs);
        }
    }
    if (trial % 3 == 0 && !values.empty()) {
      int m = nodes - 1;
      p.addRule({{values[0], 0}}, m, {0});
    }
    ShardingProblem::Solution brute = p.bruteForce();
    std::string error;
    auto s = p.solve(30, error);
    if (std::isinf(brute.cost)) {
      EXPECT_FALSE(s) << "trial " << trial;
      continue;
    }
    ASSERT_TRUE(s) << "trial " << trial << ": " << error;
    EXPECT_TRUE(s->optimal);
    EXPECT_NEAR(s->cost, brute.cost, 1e-9 * std::max(1.0, brute.cost))
        << "trial " << trial;
  }
}

} // namespace
