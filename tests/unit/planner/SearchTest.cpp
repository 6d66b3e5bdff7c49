//===- SearchTest.cpp - plan search, reports, plan and trace JSON ---------===//

#include "planner/Report.h"

#include <gtest/gtest.h>

#include <cmath>

namespace dtcc::planner {
namespace {

ClusterSpec h100Nodes(int64_t nodes) {
  ClusterSpec c = clusterPreset("dgx-h100").value();
  c.nodes = nodes;
  return c;
}

TEST(Search, SmallModelGetsPlainDataParallelism) {
  SearchOptions options;
  options.globalBatch = 64;
  auto result = searchPlans(ModelDesc::gpt2Small(), h100Nodes(1), options);
  ASSERT_TRUE(result.isOk());
  const SearchResult &r = result.value();
  ASSERT_TRUE(r.best);
  EXPECT_TRUE(r.fitsOnOneDevice);
  EXPECT_EQ(r.best->plan.tp, 1);
  EXPECT_EQ(r.best->plan.pp, 1);
  EXPECT_EQ(r.best->plan.dp, 8);
  EXPECT_NE(r.note.find("fits on one device"), std::string::npos) << r.note;
  EXPECT_FALSE(r.budgetExhausted);
}

TEST(Search, OneDeviceMeansNoDistribution) {
  ClusterSpec one = h100Nodes(1);
  one.devicesPerNode.value = 1;
  SearchOptions options;
  options.globalBatch = 8;
  auto result = searchPlans(ModelDesc::gpt2Small(), one, options);
  ASSERT_TRUE(result.isOk());
  ASSERT_TRUE(result.value().best);
  EXPECT_EQ(result.value().best->plan.devices(), 1);
  EXPECT_NE(result.value().note.find("no distribution"), std::string::npos);
}

TEST(Search, SeventyBillionOnSixtyFourGpusExplainsItsChoice) {
  ModelDesc model = ModelDesc::llama3_70b();
  model.seq = 4096;
  SearchOptions options;
  options.globalBatch = 512;
  auto result = searchPlans(model, h100Nodes(8), options);
  ASSERT_TRUE(result.isOk());
  const SearchResult &r = result.value();
  ASSERT_TRUE(r.best);
  EXPECT_TRUE(r.best->fits);
  EXPECT_LE(r.best->memory.total(), 81559.0 * 1024 * 1024);
  EXPECT_FALSE(r.fitsOnOneDevice);
  bool slower = false, oom = false, invalid = false;
  for (const Rejection &a : r.alternatives) {
    if (a.kind == Rejection::Kind::kSlower) {
      slower = true;
      EXPECT_GE(a.stepTime, r.best->time.stepTime);
      EXPECT_NE(a.reason.find("slower by"), std::string::npos);
    } else if (a.kind == Rejection::Kind::kOutOfMemory) {
      oom = true;
      EXPECT_GT(a.excessBytes, 0);
      EXPECT_NE(a.reason.find("out of memory by"), std::string::npos);
    } else {
      invalid = true;
      EXPECT_FALSE(a.reason.empty());
    }
  }
  EXPECT_TRUE(slower && oom && invalid);
  // The chosen plan is no slower than any plan the search could evaluate
  // directly, e.g. a typical hand-made one.
  Plan manual;
  manual.dp = 2;
  manual.pp = 4;
  manual.tp = 8;
  manual.zeroStage = 1;
  manual.microBatches = 256;
  manual.schedule = Schedule::kInterleaved;
  manual.virtualStages = 5;
  manual.recompute = Recompute::kFull;
  manual.sequenceParallel = true;
  auto given = evaluatePlan(model, h100Nodes(8), manual);
  ASSERT_TRUE(given.isOk()) << given.status().toString();
  EXPECT_TRUE(given.value().fits);
  EXPECT_LE(r.best->time.stepTime, given.value().time.stepTime);
}

TEST(Search, OffloadLetsSeventyBillionFitOnFewerGpus) {
  // 70B on 4 GPUs: 16 B/param is 1.1 TB of model state, 282 GB each;
  // only offloading optimizer state (and parameters) to the host fits.
  ModelDesc model = ModelDesc::llama3_70b();
  model.seq = 2048;
  ClusterSpec four = h100Nodes(1);
  four.devicesPerNode.value = 4;
  SearchOptions options;
  options.globalBatch = 16;
  auto result = searchPlans(model, four, options);
  ASSERT_TRUE(result.isOk());
  ASSERT_TRUE(result.value().best);
  EXPECT_NE(result.value().best->plan.offload, Offload::kNone);
  EXPECT_GT(result.value().best->memory.hostTotal(), 0);
  options.allowOffload = false;
  auto without = searchPlans(model, four, options);
  ASSERT_TRUE(without.isOk());
  EXPECT_FALSE(without.value().best);
  EXPECT_NE(without.value().note.find("no plan fits"), std::string::npos);
}

TEST(Search, BudgetReturnsBestSoFar) {
  ModelDesc model = ModelDesc::llama3_405b();
  SearchOptions options;
  options.globalBatch = 2048;
  options.budgetSeconds = 0;
  auto result = searchPlans(model, h100Nodes(2048), options);
  ASSERT_TRUE(result.isOk());
  EXPECT_TRUE(result.value().budgetExhausted);
  EXPECT_LT(result.value().seconds, 1.0);
}

TEST(Search, PinnedMeshAndZeroAreRespected) {
  ModelDesc model = ModelDesc::llama3_8b();
  model.seq = 4096;
  SearchOptions options;
  options.globalBatch = 256;
  options.fixDp = 8;
  options.fixTp = 8;
  options.fixZero = 2;
  auto result = searchPlans(model, h100Nodes(8), options);
  ASSERT_TRUE(result.isOk());
  ASSERT_TRUE(result.value().best);
  const Plan &p = result.value().best->plan;
  EXPECT_EQ(p.dp, 8);
  EXPECT_EQ(p.tp, 8);
  EXPECT_EQ(p.pp, 1);
  EXPECT_EQ(p.zeroStage, 2);
}

TEST(Search, ErrorsNameTheProblem) {
  SearchOptions options;
  options.globalBatch = 0;
  auto bad = searchPlans(ModelDesc::gpt2Small(), h100Nodes(1), options);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("global batch"), std::string::npos);
  Plan plan;
  plan.tp = 8; // GPT-2's 12 heads do not split 8 ways
  plan.dp = 1;
  auto invalid = evaluatePlan(ModelDesc::gpt2Small(), h100Nodes(1), plan);
  ASSERT_FALSE(invalid.isOk());
  EXPECT_NE(invalid.status().message().find("heads 12 not divisible by tp=8"),
            std::string::npos)
      << invalid.status().message();
}

TEST(Search, RecomputesTheFirstLayersOfEachStageWhenThatFits) {
  // Llama 3 8B with flash attention (selective recomputation saves
  // nothing) on tp=8, one sequence per micro-batch: with room for 16 of its
  // 32 layers' activations but not for 8, the search recomputes the first
  // 16 layers (K of a quarter, half and three quarters of the stage), not
  // every layer, and says so.
  ModelDesc model = ModelDesc::llama3_8b();
  model.flashAttention = true;
  ClusterSpec cluster = h100Nodes(1);
  SearchOptions options;
  options.globalBatch = 8;
  options.fixDp = 1;
  options.fixTp = 8;
  options.fixPp = 1;
  options.fixZero = 0;
  options.fixMicroBatchSize = 1;
  options.allowOffload = false;
  options.allowSequenceParallel = false;
  Plan plan;
  plan.tp = 8;
  plan.microBatches = 8;
  plan.dtype = options.dtype;
  plan.recompute = Recompute::kFull;
  MemoryModel memory(model, cluster);
  plan.recomputeLayers = 8;
  double eight = memory.peak(plan).total();
  plan.recomputeLayers = 16;
  double sixteen = memory.peak(plan).total();
  ASSERT_LT(sixteen, eight);
  cluster.device.memoryBytes.value = (eight + sixteen) / 2;
  auto result = searchPlans(model, cluster, options);
  ASSERT_TRUE(result.isOk()) << result.status().toString();
  ASSERT_TRUE(result.value().best);
  const Plan &best = result.value().best->plan;
  EXPECT_EQ(best.recompute, Recompute::kFull);
  EXPECT_EQ(best.recomputeLayers, 16);
  EXPECT_NE(best.summary().find("recompute full (16 layers per stage)"),
            std::string::npos)
      << best.summary();
  // Pinning full recomputation means every layer.
  options.fixRecompute = Recompute::kFull;
  auto pinned = searchPlans(model, cluster, options);
  ASSERT_TRUE(pinned.isOk());
  ASSERT_TRUE(pinned.value().best);
  EXPECT_EQ(pinned.value().best->plan.recomputeLayers, 0);
}

TEST(Plan, JsonRoundTrip) {
  Plan p;
  p.dp = 4;
  p.pp = 2;
  p.tp = 8;
  p.zeroStage = 1;
  p.microBatchSize = 2;
  p.microBatches = 8;
  p.schedule = Schedule::kInterleaved;
  p.virtualStages = 3;
  p.recompute = Recompute::kSelective;
  p.sequenceParallel = true;
  p.offload = Offload::kNone;
  p.dtype = DTypePolicy::mixed(DType::kFp16);
  auto text = planToJson(p).dump();
  auto parsed = Json::parse(text);
  ASSERT_TRUE(parsed.isOk());
  auto back = planFromJson(parsed.value());
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  EXPECT_TRUE(back.value() == p);
  // Full recomputation of the first K layers of each stage.
  Plan layers = p;
  layers.recompute = Recompute::kFull;
  layers.recomputeLayers = 3;
  auto layersBack = planFromJson(planToJson(layers));
  ASSERT_TRUE(layersBack.isOk()) << layersBack.status().toString();
  EXPECT_EQ(layersBack.value().recomputeLayers, 3);
  EXPECT_FALSE(layersBack.value() == p);
  Json negative = planToJson(layers);
  negative.set("recomputeLayers", -1);
  EXPECT_FALSE(planFromJson(negative).isOk());
  Json bad = planToJson(p);
  bad.set("zeroStage", 5);
  auto error = planFromJson(bad);
  ASSERT_FALSE(error.isOk());
  EXPECT_NE(error.status().message().find("plan.zeroStage"), std::string::npos);

  // A rank order other than Megatron-LM's travels with the plan.
  p.order = {"tp", "pp", "dp"};
  EXPECT_EQ(p.mesh().str(), "tp=8,pp=2,dp=4");
  EXPECT_FALSE(p.megatronOrder());
  auto ordered = planFromJson(planToJson(p));
  ASSERT_TRUE(ordered.isOk()) << ordered.status().toString();
  EXPECT_TRUE(ordered.value() == p);
  Json twice = planToJson(p);
  Json axes = Json::array();
  for (const char *axis : {"tp", "tp", "dp"})
    axes.push(axis);
  twice.set("order", axes);
  auto refused = planFromJson(twice);
  ASSERT_FALSE(refused.isOk());
  EXPECT_NE(refused.status().message().find("plan.order"), std::string::npos);
}

TEST(TimeModel, GroupsPricedOnTheLinksOfTheirRankOrder) {
  // Two 8-GPU nodes, tp=8 x dp=2: with tp fastest (Megatron-LM) each tp
  // group stays in a node; with dp fastest every tp group spans both nodes
  // and its collectives are slower, the dp pair's faster.
  Plan megatron;
  megatron.dp = 2;
  megatron.tp = 8;
  megatron.microBatchSize = 4;
  Plan dpFastest = megatron;
  dpFastest.order = {"pp", "tp", "dp"};
  ModelDesc model = ModelDesc::megatronGpt(/*hidden=*/2048, /*layers=*/8,
                                           /*heads=*/16);
  auto fast = evaluatePlan(model, h100Nodes(2), megatron);
  auto slow = evaluatePlan(model, h100Nodes(2), dpFastest);
  ASSERT_TRUE(fast.isOk()) << fast.status().toString();
  ASSERT_TRUE(slow.isOk()) << slow.status().toString();
  auto linkOf = [](const TimeBreakdown &t, const std::string &group) {
    for (const CommItem &c : t.comm)
      if (c.group == group)
        return c.link;
    return Link::kPcie;
  };
  EXPECT_EQ(linkOf(fast.value().time, "tp"), Link::kIntraNode);
  EXPECT_EQ(linkOf(fast.value().time, "dp"), Link::kInterNode);
  EXPECT_EQ(linkOf(slow.value().time, "tp"), Link::kInterNode);
  EXPECT_EQ(linkOf(slow.value().time, "dp"), Link::kIntraNode);
  EXPECT_GT(slow.value().time.stepTime, fast.value().time.stepTime);
}

TEST(Report, TextJsonTraceAndRunCost) {
  ModelDesc model = ModelDesc::llama3_70b();
  model.seq = 4096;
  ClusterSpec cluster = h100Nodes(8);
  SearchOptions options;
  options.globalBatch = 512;
  auto result = searchPlans(model, cluster, options);
  ASSERT_TRUE(result.isOk());
  PlanReport report;
  report.model = model;
  report.cluster = cluster;
  report.globalBatch = 512;
  report.search = result.value();
  report.chosen = result.value().best;
  report.cost = runCost(report.chosen->time, 64, 2e12, 3.5);
  EXPECT_NEAR(report.cost->gpuHours,
              std::ceil(2e12 / (512.0 * 4096)) *
                  report.chosen->time.stepTime / 3600 * 64,
              1e-6);
  EXPECT_NEAR(report.cost->price, report.cost->gpuHours * 3.5, 1e-6);

  std::string text = formatReport(report);
  for (const char *part :
       {"Chosen plan", "Memory per device", "optimizer state", "activations",
        "comm buffers", "headroom", "Time per step", "MFU", "tokens/s",
        "Communication per device", "Best rejected alternatives",
        "slower by", "out of memory by", "GPU-hours", "$"})
    EXPECT_NE(text.find(part), std::string::npos) << part << "\n" << text;

  Json json = reportToJson(report);
  auto reparsed = Json::parse(json.dump());
  ASSERT_TRUE(reparsed.isOk());
  const Json &j = reparsed.value();
  ASSERT_TRUE(j.find("schemaVersion"));
  EXPECT_EQ(j.find("schemaVersion")->asNumber(), kReportSchemaVersion);
  for (const char *key : {"model", "cluster", "plan", "memory", "time",
                          "alternatives", "search", "runCost", "notes"})
    EXPECT_TRUE(j.find(key)) << key;
  EXPECT_TRUE(planFromJson(*j.find("plan")).isOk());
  EXPECT_EQ(j.find("memory")->find("total")->asNumber(),
            report.chosen->memory.total());

  TimeModel time(model, cluster);
  Json trace = traceToJson(time.timeline(report.chosen->plan), "t");
  const Json *events = trace.find("traceEvents");
  ASSERT_TRUE(events && events->isArray());
  int complete = 0;
  for (const Json &e : events->items())
    if (e.find("ph")->asString() == "X") {
      ++complete;
      EXPECT_GE(e.find("dur")->asNumber(), 0);
    }
  EXPECT_GT(complete, 0);
}

TEST(Report, ParsesQuantities) {
  EXPECT_EQ(parseCount("2T").value(), 2e12);
  EXPECT_EQ(parseCount("300B").value(), 3e11);
  EXPECT_EQ(parseCount("1.5e6").value(), 1.5e6);
  EXPECT_FALSE(parseCount("2X").isOk());
  EXPECT_EQ(parseDuration("10s").value(), 10);
  EXPECT_EQ(parseDuration("500ms").value(), 0.5);
  EXPECT_EQ(parseDuration("2m").value(), 120);
  EXPECT_FALSE(parseDuration("fast").isOk());
}

} // namespace
} // namespace dtcc::planner
