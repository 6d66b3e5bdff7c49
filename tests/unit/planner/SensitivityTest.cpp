//===- SensitivityTest.cpp - dtcc plan --sensitivity's worlds and rule ----===//

#include "planner/Sensitivity.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace dtcc::planner {
namespace {

TEST(Sensitivity, NineWorldsFiveWorse) {
  std::vector<WorldScale> worlds = sensitivityWorlds(0.2);
  ASSERT_EQ(worlds.size(), 9u);
  int worse = 0;
  for (const WorldScale &w : worlds)
    worse += w.worse();
  EXPECT_EQ(worse, 5); // four alone at 0.8, and the corner
  EXPECT_EQ(worlds.back().name, "all four x0.8");
  EXPECT_DOUBLE_EQ(worlds.back().compute, 0.8);
  EXPECT_DOUBLE_EQ(worlds.back().interNode, 0.8);
  EXPECT_FALSE(WorldScale().worse()); // as modelled
}

TEST(Sensitivity, ScalesOnlyItsFigures) {
  ClusterSpec c = clusterPreset("dgx-a100-80g").value();
  c.device.kernelSeconds["gelu"] = Figure{2e-9, "test"};
  c.device.kernelByteSeconds["gelu"] = Figure{1e-10, "test"};
  WorldScale w;
  w.interNode = 0.8;
  w.memory = 0.5;
  w.compute = 1.2;
  ClusterSpec s = scaleCluster(c, w);
  EXPECT_DOUBLE_EQ(s.intraNode.bandwidth.value, c.intraNode.bandwidth.value);
  EXPECT_DOUBLE_EQ(s.interNode.bandwidth.value,
                   0.8 * c.interNode.bandwidth.value);
  EXPECT_DOUBLE_EQ(s.device.memoryBandwidth.value,
                   0.5 * c.device.memoryBandwidth.value);
  EXPECT_DOUBLE_EQ(s.device.kernelSeconds["gelu"].value, 4e-9);
  EXPECT_DOUBLE_EQ(s.device.kernelByteSeconds["gelu"].value, 2e-10);
  EXPECT_DOUBLE_EQ(s.device.peakBf16.value, 1.2 * c.device.peakBf16.value);
  // Efficiencies stay valid fractions.
  EXPECT_DOUBLE_EQ(s.device.matmulEfficiency.value,
                   c.device.matmulEfficiency.value);
  EXPECT_TRUE(s.validate().isOk());
}

// The choice is the near-best plan with the least worst-world loss, each
// loss recomputed here from evaluatePlan and a search in that world.
TEST(Sensitivity, ChoosesTheNearBestPlanThatLosesLeast) {
  ClusterSpec c = clusterPreset("dgx-a100-80g").value();
  c.nodes = 2;
  c.interNode.bandwidth.value = 3e9; // the lit test's constructed cluster
  ModelDesc model = ModelDesc::megatronGpt(/*hidden=*/4096, /*layers=*/32,
                                           /*heads=*/32);
  SearchOptions options;
  options.globalBatch = 128;
  auto result = analyzeSensitivity(model, c, options);
  ASSERT_TRUE(result.isOk()) << result.status().toString();
  const SensitivityResult &r = result.value();
  ASSERT_TRUE(r.chosen);
  ASSERT_GE(r.nearBest.size(), 1u);
  const double fastest = r.search.best->time.stepTime;
  EXPECT_LE(r.chosen->time.stepTime, fastest * 1.02);
  ASSERT_EQ(r.worlds.size(), 9u);
  std::vector<double> worst(r.nearBest.size(), 0);
  for (const WorldOutcome &o : r.worlds) {
    if (!o.world.worse())
      continue;
    ClusterSpec scaled = scaleCluster(c, o.world);
    for (size_t i = 0; i < r.nearBest.size(); ++i) {
      double t = evaluatePlan(model, scaled, r.nearBest[i].candidate.plan)
                     .value()
                     .time.stepTime;
      EXPECT_GE(t, o.best.time.stepTime * (1 - 1e-9));
      worst[i] = std::max(worst[i], t / o.best.time.stepTime - 1);
    }
  }
  size_t chosen = 0;
  for (size_t i = 0; i < r.nearBest.size(); ++i) {
    EXPECT_NEAR(r.nearBest[i].worstLoss, worst[i], 1e-9);
    if (r.nearBest[i].candidate.plan == r.chosen->plan)
      chosen = i;
  }
  for (size_t i = 0; i < r.nearBest.size(); ++i)
    EXPECT_LE(worst[chosen], worst[i] + 5e-4) << r.nearBest[i].candidate.plan.summary();
  EXPECT_EQ(r.preferenceChanged, !(r.chosen->plan == r.search.best->plan));
}

// With a pricer (as `dtcc plan` passes the compiled programs' prices), every
// plan in every world is priced by it alone: the analytic search only
// proposes. Here a pricer that refuses tensor parallelism and charges
// ZeRO-3 25% more than the analytic model, on the same case.
TEST(Sensitivity, EveryPlanPricedByTheGivenCostModel) {
  ClusterSpec c = clusterPreset("dgx-a100-80g").value();
  c.nodes = 2;
  c.interNode.bandwidth.value = 3e9;
  ModelDesc model = ModelDesc::megatronGpt(/*hidden=*/4096, /*layers=*/32,
                                           /*heads=*/32);
  SearchOptions options;
  options.globalBatch = 128;
  auto price = [&](const Plan &plan,
                   const ClusterSpec &cluster) -> StatusOr<Candidate> {
    if (plan.tp > 1)
      return runtime::invalidArgument("tp refused by this test's pricer");
    DTCC_ASSIGN_OR_RETURN(Candidate out, evaluatePlan(model, cluster, plan));
    if (plan.zeroStage == 3)
      out.time.stepTime *= 1.25;
    return out;
  };
  SensitivityPricing pricing;
  pricing.price = price;
  pricing.model = "the test's pricer";
  pricing.extraWithin = 0.10;
  pricing.extraSlower = 4;
  auto result = analyzeSensitivity(model, c, options, 0.02, 0.2, pricing);
  ASSERT_TRUE(result.isOk()) << result.status().toString();
  const SensitivityResult &r = result.value();
  ASSERT_TRUE(r.chosen && r.fastest);
  EXPECT_EQ(r.pricedBy, "the test's pricer");
  EXPECT_EQ(r.unpriced, r.leftOut.size());
  EXPECT_GT(r.unpriced, 0u); // the search proposes tp plans
  for (const std::string &why : r.leftOut)
    EXPECT_NE(why.find("tp refused"), std::string::npos) << why;
  // The analytic fastest is ZeRO-1 (the lit test's case); the pricer's
  // fastest is not ZeRO-3, and every near-best plan is priced by it.
  EXPECT_NE(r.fastest->plan.zeroStage, 3);
  for (const NearBestPlan &p : r.nearBest) {
    EXPECT_EQ(p.candidate.plan.tp, 1);
    EXPECT_NEAR(p.candidate.time.stepTime,
                price(p.candidate.plan, c).value().time.stepTime, 1e-12);
    EXPECT_LE(p.candidate.time.stepTime,
              r.fastest->time.stepTime * (1 + 0.02) + 1e-12);
  }
  ASSERT_EQ(r.worlds.size(), 9u);
  for (const WorldOutcome &o : r.worlds) {
    ClusterSpec scaled = scaleCluster(c, o.world);
    EXPECT_EQ(o.best.plan.tp, 1);
    EXPECT_NEAR(o.best.time.stepTime,
                price(o.best.plan, scaled).value().time.stepTime, 1e-12);
    EXPECT_NEAR(o.chosenTime,
                price(r.chosen->plan, scaled).value().time.stepTime, 1e-12);
    EXPECT_GE(o.chosenTime, o.best.time.stepTime * (1 - 1e-12));
  }
}

} // namespace
} // namespace dtcc::planner
