//===- AutoPlanTest.cpp - the plan `dtcc compile --plan auto` chooses -----===//

#include "planner/AutoPlan.h"

#include <gtest/gtest.h>

#include <set>

namespace dtcc::planner {
namespace {

ModelDesc cpuGpt(int64_t layers, int64_t hidden, int64_t heads, int64_t vocab,
                 int64_t seq) {
  ModelDesc m;
  m.name = "gpt";
  m.layers = layers;
  m.hidden = hidden;
  m.heads = m.kvHeads = heads;
  m.ffnHidden = 4 * hidden;
  m.vocab = vocab;
  m.seq = seq;
  m.dropout = false;
  m.flashAttention = false;
  return m;
}

TEST(AutoPlan, OffloadsTheOptimizerOnlyWhenItMustFit) {
  // Llama 3 8B in fp32 on one H100: parameters, gradients and Adam's
  // moments (16 bytes per parameter, 128 GB) do not fit in 80 GB; without
  // the moments on the device (64 GB) they do.
  ClusterSpec one = clusterForRanks(clusterPreset("dgx-h100").value(), 1).value();
  CompilerPlanOptions o;
  o.batch = 1;
  ModelDesc m = ModelDesc::llama3_8b();
  m.seq = 512;
  auto r = chooseCompilerPlan(m, one, o);
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ(r.value().chosen.plan.offload, Offload::kOptimizer);
  EXPECT_GT(r.value().chosen.memory.hostOptimizerState, 0);
  EXPECT_EQ(r.value().chosen.memory.optimizerState, 0);
  EXPECT_NE(r.value().summary.find("offload optimizer"), std::string::npos)
      << r.value().summary;
  // GPT-2 small fits as it is: the optimizer stays on the device.
  auto small = chooseCompilerPlan(ModelDesc::gpt2Small(), one, o);
  ASSERT_TRUE(small.isOk()) << small.status().toString();
  EXPECT_EQ(small.value().chosen.plan.offload, Offload::kNone);
}

TEST(AutoPlan, MeshSpec) {
  Plan p;
  EXPECT_EQ(meshOf(p).str(), "");
  p.dp = 2;
  p.tp = 2;
  EXPECT_EQ(meshOf(p).str(), "dp=2,tp=2");
  p.dp = 1;
  EXPECT_EQ(meshOf(p).str(), "tp=2");
}

TEST(AutoPlan, ClusterForRanks) {
  ClusterSpec cpu = clusterPreset("cpu-local").value(); // 2 per node
  auto one = clusterForRanks(cpu, 1);
  ASSERT_TRUE(one.isOk());
  EXPECT_EQ(one.value().numDevices(), 1);
  auto four = clusterForRanks(cpu, 4);
  ASSERT_TRUE(four.isOk());
  EXPECT_EQ(four.value().nodes, 2);
  EXPECT_EQ(four.value().numDevices(), 4);
  EXPECT_FALSE(clusterForRanks(cpu, 3).isOk());
  EXPECT_FALSE(clusterForRanks(cpu, 0).isOk());
}

TEST(AutoPlan, OnlyWhatTheCompilerBuilds) {
  ModelDesc m = cpuGpt(2, 32, 4, 64, 16);
  ClusterSpec c = clusterForRanks(clusterPreset("cpu-local").value(), 2).value();
  CompilerPlanOptions o;
  o.batch = 8;
  // A compiler that builds neither pipelines, offload nor sequence
  // parallelism: the search's choice respects it and says why it passed
  // them over.
  o.unbuilt = [](const Plan &p) -> std::optional<std::string> {
    if (p.pp > 1)
      return std::string("no pipelines here");
    if (p.offload != Offload::kNone)
      return std::string("no offload here");
    if (p.sequenceParallel)
      return std::string("no sequence parallelism here");
    return std::nullopt;
  };
  auto r = chooseCompilerPlan(m, c, o);
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  const Plan &p = r.value().chosen.plan;
  EXPECT_EQ(p.pp, 1);
  EXPECT_EQ(p.dp * p.tp, 2);
  EXPECT_EQ(p.offload, Offload::kNone);
  EXPECT_FALSE(p.sequenceParallel);
  // The model's batch is one micro-batch split over dp.
  EXPECT_EQ(p.microBatches, 1);
  EXPECT_EQ(p.microBatchSize, 8 / p.dp);
  EXPECT_EQ(r.value().mesh, meshOf(p));
  EXPECT_EQ(r.value().zero, p.zeroStage);
  std::set<std::string> reasons;
  for (const Rejection &x : r.value().rejected) {
    if (x.kind == Rejection::Kind::kSlower)
      EXPECT_GE(x.stepTime, r.value().chosen.time.stepTime);
    if (x.kind == Rejection::Kind::kInvalid)
      reasons.insert(x.reason);
  }
  EXPECT_TRUE(reasons.count("no pipelines here"));
  EXPECT_TRUE(reasons.count("no offload here"));

  // Micro-batches per step are the user's: a pipeline's too.
  o.microBatches = 4;
  o.unbuilt = nullptr;
  auto four = chooseCompilerPlan(m, c, o);
  ASSERT_TRUE(four.isOk()) << four.status().toString();
  EXPECT_EQ(four.value().chosen.plan.microBatches, 4);
  EXPECT_EQ(four.value().chosen.plan.globalBatch(), 32);

  // A batch that dp cannot split, a vocabulary tp cannot, and no
  // pipelines: nothing left.
  m.vocab = 63;
  o.batch = 7;
  o.microBatches = 1;
  o.unbuilt = [](const Plan &p) -> std::optional<std::string> {
    if (p.pp > 1)
      return std::string("no pipelines here");
    return std::nullopt;
  };
  auto none = chooseCompilerPlan(m, c, o);
  ASSERT_FALSE(none.isOk());
  EXPECT_NE(none.status().message().find("batch 7 not divisible by dp=2"),
            std::string::npos)
      << none.status().message();
  EXPECT_NE(none.status().message().find("vocabulary 63"), std::string::npos)
      << none.status().message();
}

TEST(AutoPlan, MemoryDecidesWhenTheModelDoesNotFit) {
  // 3.2M parameters x 12 B = 38.5 MB of state plus the workspace: give each
  // rank 55 MB so that plain DP does not fit.
  ModelDesc m = cpuGpt(4, 256, 4, 64, 64);
  ClusterSpec c = clusterForRanks(clusterPreset("cpu-local").value(), 2).value();
  c.device.memoryBytes.value = 55e6;
  c.device.reservedBytes.value = 0;
  CompilerPlanOptions o;
  o.batch = 8;
  auto r = chooseCompilerPlan(m, c, o);
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_TRUE(r.value().chosen.plan.zeroStage > 0 ||
              r.value().chosen.plan.tp > 1);
  bool sawOutOfMemory = false;
  for (const Rejection &x : r.value().rejected)
    sawOutOfMemory |= x.kind == Rejection::Kind::kOutOfMemory &&
                      x.plan.zeroStage == 0 && x.plan.tp == 1;
  EXPECT_TRUE(sawOutOfMemory);
}

TEST(AutoPlan, RecomputesWhenTheUsersChoiceDoesNotFit) {
  // One rank, long sequences (the scores dominate the activations): with
  // room for selective recomputation's activations but not for all of
  // them, --plan auto keeps the mesh and recomputes the attention cores;
  // with room for neither, it recomputes layers; a choice that fits stays.
  ModelDesc m = cpuGpt(4, 64, 8, 64, 256);
  ClusterSpec c = clusterForRanks(clusterPreset("cpu-local").value(), 1).value();
  c.device.reservedBytes.value = 0;
  CompilerPlanOptions o;
  o.batch = 4;
  o.search.allowOffload = false;
  auto total = [&](Recompute r, int64_t layers) {
    Plan plan = compilerPlan(1, 1, 0, o);
    plan.recompute = r;
    plan.recomputeLayers = layers;
    return evaluatePlan(m, c, plan).value().memory.total();
  };
  double none = total(Recompute::kNone, 0);
  double selective = total(Recompute::kSelective, 0);
  double full = total(Recompute::kFull, 0);
  ASSERT_LT(selective, none);
  ASSERT_LT(full, selective);
  c.device.memoryBytes.value = (none + selective) / 2;
  auto chosen = chooseCompilerPlan(m, c, o);
  ASSERT_TRUE(chosen.isOk()) << chosen.status().toString();
  EXPECT_EQ(chosen.value().chosen.plan.recompute, Recompute::kSelective);
  EXPECT_NE(chosen.value().summary.find("recompute selective"), std::string::npos)
      << chosen.value().summary;
  c.device.memoryBytes.value = (selective + full) / 2;
  auto leaner = chooseCompilerPlan(m, c, o);
  ASSERT_TRUE(leaner.isOk()) << leaner.status().toString();
  EXPECT_EQ(leaner.value().chosen.plan.recompute, Recompute::kFull)
      << leaner.value().summary;
  o.recompute = Recompute::kFull;
  o.recomputeLayers = 1;
  c.device.memoryBytes.value = 2 * none;
  auto kept = chooseCompilerPlan(m, c, o);
  ASSERT_TRUE(kept.isOk());
  EXPECT_EQ(kept.value().chosen.plan.recompute, Recompute::kFull);
  EXPECT_EQ(kept.value().chosen.plan.recomputeLayers, 1);
}

// The CPU backend's memory plan (checked against compiled programs in
// tests/e2e/plan_checks.py): gradients live in the workspace whole, in the
// space the backward pass frees; the collective's buffer is a full copy
// (DP) or the rank's shard (ZeRO); ZeRO-2 saves nothing over ZeRO-1.
TEST(CpuBackend, MemoryFollowsTheCompiledProgram) {
  ModelDesc m = cpuGpt(4, 256, 4, 64, 64);
  ClusterSpec c = clusterForRanks(clusterPreset("cpu-local").value(), 2).value();
  CompilerPlanOptions o;
  o.batch = 8;
  MemoryModel memory(m, c);
  double params = stageParameters(m, compilerPlan(2, 1, 0, o), 0);
  MemoryBreakdown dp = memory.peak(compilerPlan(2, 1, 0, o));
  EXPECT_DOUBLE_EQ(dp.gradients, 4 * params);
  EXPECT_DOUBLE_EQ(dp.commBuffers, 4 * params);
  EXPECT_DOUBLE_EQ(dp.reused,
                   std::min(dp.activations, dp.gradients + dp.commBuffers));
  EXPECT_DOUBLE_EQ(dp.total(), dp.parameters + dp.optimizerState +
                                   dp.temporaries + dp.reserve +
                                   std::max(dp.activations,
                                            dp.gradients + dp.commBuffers));
  MemoryBreakdown z1 = memory.peak(compilerPlan(2, 1, 1, o));
  MemoryBreakdown z2 = memory.peak(compilerPlan(2, 1, 2, o));
  EXPECT_DOUBLE_EQ(z1.commBuffers, 2 * params);
  EXPECT_DOUBLE_EQ(z1.optimizerState, dp.optimizerState / 2);
  EXPECT_DOUBLE_EQ(z2.total(), z1.total());
  MemoryBreakdown z3 = memory.peak(compilerPlan(2, 1, 3, o));
  EXPECT_DOUBLE_EQ(z3.parameters, dp.parameters / 2);
  EXPECT_GT(z3.commBuffers, z1.commBuffers); // gathered parameters

  // A GPU cluster keeps the general accounting: nothing reused.
  MemoryModel gpu(m, clusterPreset("dgx-h100").value());
  Plan p = compilerPlan(1, 1, 0, o);
  EXPECT_EQ(gpu.peak(p).reused, 0);
}

TEST(CpuBackend, CommunicationIsNotHidden) {
  ModelDesc m = cpuGpt(4, 256, 4, 64, 64);
  ClusterSpec cpu = clusterForRanks(clusterPreset("cpu-local").value(), 2).value();
  CompilerPlanOptions o;
  o.batch = 8;
  TimeBreakdown t = TimeModel(m, cpu).estimate(compilerPlan(2, 1, 0, o));
  ASSERT_FALSE(t.comm.empty());
  double dpTime = 0;
  for (const CommItem &item : t.comm)
    if (std::string(item.group) == "dp")
      dpTime += item.time;
  EXPECT_GT(dpTime, 0);
  EXPECT_NEAR(t.dpCommExposed, dpTime, 1e-12);
}

} // namespace
} // namespace dtcc::planner
