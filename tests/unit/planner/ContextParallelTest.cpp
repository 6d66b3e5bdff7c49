//===- ContextParallelTest.cpp - the planner's cp axis --------------------===//
//
// Context parallelism (Llama 3's): the plan's cp axis in its JSON and mesh,
// activations per device against Korthikanti et al.'s formula for s/cp
// positions plus the gathered keys and values, and the keys' and values'
// traffic against its closed form.
//
//===----------------------------------------------------------------------===//

#include "planner/MemoryModel.h"
#include "planner/Search.h"
#include "planner/TimeModel.h"

#include <gtest/gtest.h>

namespace dtcc::planner {
namespace {

ClusterSpec h100Nodes(int64_t nodes) {
  ClusterSpec c = clusterPreset("dgx-h100").value();
  c.nodes = nodes;
  return c;
}

TEST(ContextParallel, PlanJsonMeshAndProblems) {
  Plan plan;
  plan.dp = 2;
  plan.tp = 8;
  plan.cp = 4;
  EXPECT_EQ(plan.devices(), 64);
  // Megatron-LM's order: tp fastest, then cp, then dp.
  EXPECT_EQ(plan.mesh().str(), "dp=2,cp=4,tp=8");
  EXPECT_TRUE(plan.megatronOrder());
  plan.order = {"pp", "cp", "dp", "tp"};
  EXPECT_EQ(plan.mesh().str(), "cp=4,dp=2,tp=8");
  EXPECT_FALSE(plan.megatronOrder());
  EXPECT_NE(plan.summary().find("cp=4"), std::string::npos);

  auto back = planFromJson(planToJson(plan));
  ASSERT_TRUE(back.isOk()) << back.status().message();
  EXPECT_EQ(back.value(), plan);
  EXPECT_EQ(back.value().cp, 4);
  // A plan without cp writes no "cp" (the JSON of plans before it).
  Plan plain;
  EXPECT_EQ(planToJson(plain).find("cp"), nullptr);

  ModelDesc model = ModelDesc::llama3_8b();
  model.seq = 8192;
  plan.order = {"pp", "dp", "tp"};
  EXPECT_FALSE(planProblem(plan, model, h100Nodes(8)).has_value());
  model.seq = 8190;
  auto problem = planProblem(plan, model, h100Nodes(8));
  ASSERT_TRUE(problem.has_value());
  EXPECT_EQ(*problem, "sequence 8190 not divisible by cp=4");
  model.seq = 8192;
  problem = planProblem(plan, model, h100Nodes(4));
  ASSERT_TRUE(problem.has_value());
  EXPECT_EQ(*problem, "dp x pp x cp x tp = 64 but the cluster has 32 devices");
}

TEST(ContextParallel, ActivationsAreThoseOfTheLocalChunkPlusGatheredKeys) {
  // Korthikanti et al. (2022), per layer in 16-bit: s*b*h*(10 + 24/t) with
  // selective recomputation, plus 5*a*s^2*b/t for the scores without. A
  // rank of cp holds s/cp positions: 1/cp of the first; its s/cp x s
  // scores are 1/cp of the second; and it keeps the other chunks' keys
  // and values (2 b s (1 - 1/cp) kv/t elements), gathered over cp.
  ModelDesc model = ModelDesc::megatronGpt(4096, 32, 32);
  const int64_t b = 1, t = 2;
  const double s = double(model.seq), h = double(model.hidden);
  const double a = double(model.heads);
  const double selectiveWhole = s * b * h * (10 + 24.0 / t);
  const double scoresWhole = 5 * a * s * s * b / t;
  for (int64_t cp : {1, 2, 4, 8}) {
    LayerProfile p = contextParallelProfile(0, model, b, t, cp, false,
                                            DType::kBf16);
    double kv = double(model.kvDim()) / double(t);
    double gathered = 2.0 * b * s * (1 - 1.0 / double(cp)) * kv * 2;
    double selective = selectiveWhole / double(cp) + gathered;
    EXPECT_NEAR(p.activations(Recompute::kSelective), selective,
                1e-9 * selective)
        << "cp=" << cp;
    EXPECT_NEAR(p.activations(Recompute::kNone),
                selective + scoresWhole / double(cp), 1e-9 * selective)
        << "cp=" << cp;
    EXPECT_DOUBLE_EQ(p.cpPayloadBytes, cp > 1 ? b * s * kv * 2 : 0);
    // Attention's scores: s/cp queries against s keys, 1/cp of the whole.
    LayerProfile whole =
        contextParallelProfile(0, model, b, t, 1, false, DType::kBf16);
    double core = 0, coreWhole = 0;
    for (const OpCost &op : p.ops)
      core += op.attentionCore ? op.flops : 0;
    for (const OpCost &op : whole.ops)
      coreWhole += op.attentionCore ? op.flops : 0;
    EXPECT_NEAR(core * double(cp), coreWhole, 1e-9 * coreWhole);
  }
}

TEST(ContextParallel, AttentionFlopsSplitAndKeyValueTraffic) {
  ModelDesc model = ModelDesc::llama3_8b();
  model.seq = 32768;
  ClusterSpec cluster = h100Nodes(4);
  TimeModel time(model, cluster);
  MemoryModel memory(model, cluster);
  Plan plan;
  plan.tp = 8;
  plan.dp = 1;
  plan.cp = 4;
  plan.microBatches = 2;
  plan.sequenceParallel = true;
  plan.recompute = Recompute::kSelective;
  TimeBreakdown t = time.estimate(plan);
  // Every layer gathers keys and values (2 all-gathers) and reduce-scatters
  // their gradients (2), per micro-batch, over the 4 cp ranks (one per
  // node in Megatron's order): (cp - 1)/cp of the whole sequence's keys
  // of this tp rank each.
  double kv = double(model.kvDim()) / 8.0;
  double payload = double(model.seq) * kv * 2;
  double count = 2.0 * double(model.layers) * 2;
  int found = 0;
  for (const CommItem &c : t.comm) {
    if (std::string(c.group) != "cp")
      continue;
    EXPECT_EQ(c.groupSize, 4);
    EXPECT_EQ(c.link, Link::kInterNode);
    if (c.kind == Collective::kAllReduce) { // gradients, once per step
      EXPECT_EQ(c.count, 1);
      ++found;
      continue;
    }
    EXPECT_DOUBLE_EQ(c.count, count);
    EXPECT_DOUBLE_EQ(c.payloadBytes, payload);
    EXPECT_NEAR(c.busBytes, count * payload * 3.0 / 4.0, 1e-6 * c.busBytes);
    EXPECT_LE(c.exposed, c.time);
    ++found;
  }
  EXPECT_EQ(found, 3);
  EXPECT_GT(t.cpCommExposed, 0);

  // cp=4 x dp=1 on 32 GPUs trains a quarter of the tokens of dp=4 x cp=1
  // (cp splits sequences, dp multiplies them): a quarter of the model
  // FLOPs per step. cp's activations per device are a quarter of the
  // sequence's plus the gathered keys and values.
  Plan dp = plan;
  dp.cp = 1;
  dp.dp = 4;
  dp.microBatches = 2;
  TimeBreakdown td = time.estimate(dp);
  EXPECT_NEAR(t.modelFlopsPerStep * 4, td.modelFlopsPerStep,
              1e-9 * td.modelFlopsPerStep);
  EXPECT_DOUBLE_EQ(t.tokensPerStep * 4, td.tokensPerStep);
  Plan one = plan;
  one.cp = 1;
  MemoryBreakdown m4 = memory.peak(plan), m1 = memory.peak(one);
  EXPECT_LT(m4.activations, m1.activations / 3.0);
}

TEST(ContextParallel, SearchKeepsAGivenCp) {
  ModelDesc model = ModelDesc::llama3_8b();
  model.seq = 32768;
  SearchOptions options;
  options.fixCp = 4;
  options.globalBatch = 8;
  auto result = searchPlans(model, h100Nodes(4), options);
  ASSERT_TRUE(result.isOk()) << result.status().message();
  const SearchResult &r = result.value();
  ASSERT_TRUE(r.best.has_value());
  EXPECT_EQ(r.best->plan.cp, 4);
  EXPECT_EQ(r.best->plan.devices(), 32);
}

} // namespace
} // namespace dtcc::planner
