//===- TimeModelTest.cpp - roofline, collectives, pipeline schedules ------===//

#include "planner/TimeModel.h"

#include <gtest/gtest.h>

#include <cmath>

namespace dtcc::planner {
namespace {

ClusterSpec h100Nodes(int64_t nodes) {
  ClusterSpec c = clusterPreset("dgx-h100").value();
  c.nodes = nodes;
  return c;
}

TEST(TimeModel, CollectivesFollowNcclTestsBusBandwidth) {
  ClusterSpec c = h100Nodes(1);
  TimeModel time(ModelDesc::gpt2Small(), c);
  double bytes = 1e9, bus = c.intraNode.busBandwidth();
  EXPECT_NEAR(bus, 370e9, 1e6); // nccl-tests ring all-reduce on 8x H100
  double lat = c.intraNode.latency.value;
  // all-reduce: 2(n-1)/n of the data per rank; the latency term is the
  // smaller of ring (2(n-1) steps) and tree (2 log2 n); all-gather and
  // reduce-scatter are rings in NCCL: n - 1 steps.
  EXPECT_NEAR(time.collectiveTime(Collective::kAllReduce, bytes, 8,
                                  Link::kIntraNode),
              2.0 * 7 / 8 * bytes / bus + 6 * lat, 1e-12);
  EXPECT_NEAR(time.collectiveTime(Collective::kAllGather, bytes, 8,
                                  Link::kIntraNode),
              7.0 / 8 * bytes / bus + 7 * lat, 1e-12);
  EXPECT_NEAR(time.collectiveTime(Collective::kReduceScatter, bytes, 4,
                                  Link::kIntraNode),
              3.0 / 4 * bytes / bus + 3 * lat, 1e-12);
  EXPECT_EQ(time.collectiveTime(Collective::kAllReduce, bytes, 1,
                                Link::kIntraNode),
            0);
  // Across nodes, a group with g ranks per node drives g NICs per node.
  double nic = c.interNode.busBandwidth();
  double one = time.collectiveTime(Collective::kAllReduce, bytes, 16,
                                   Link::kInterNode, 1);
  double two = time.collectiveTime(Collective::kAllReduce, bytes, 16,
                                   Link::kInterNode, 2);
  EXPECT_NEAR(one - 8 * c.interNode.latency.value, 2.0 * 15 / 16 * bytes / nic,
              1e-9);
  // Two per node: 8 nodes, a tree of 3 levels across them and one NVLink
  // hop within each (collectiveLatency).
  EXPECT_NEAR((one - 8 * c.interNode.latency.value) /
                  (two - 2 * (3 * c.interNode.postOverhead.value +
                              3 * c.interNode.latency.value)),
              2.0, 1e-9);
  // NVLink beats the network.
  EXPECT_LT(time.collectiveTime(Collective::kAllReduce, bytes, 8,
                                Link::kIntraNode),
            time.collectiveTime(Collective::kAllReduce, bytes, 8,
                                Link::kInterNode));
}

TEST(TimeModel, RooflinePicksTheBoundAndAddsOverhead) {
  ClusterSpec c = h100Nodes(1);
  TimeModel time(ModelDesc::gpt2Small(), c);
  const DeviceSpec &d = c.device;
  OpCost gemm{"gemm", OpCost::Kind::kMatmul};
  gemm.flops = 1e12;
  gemm.bytes = 1e6;
  EXPECT_NEAR(time.opTime(gemm, false, DType::kBf16),
              1e12 / (d.peakBf16.value * d.matmulEfficiency.value) +
                  d.kernelOverhead.value,
              1e-12);
  OpCost copy{"copy", OpCost::Kind::kMemory};
  copy.bytes = 1e9;
  EXPECT_NEAR(time.opTime(copy, false, DType::kBf16),
              1e9 / (d.memoryBandwidth.value * d.memoryEfficiency.value) +
                  d.kernelOverhead.value,
              1e-12);
  // fp32 is slower than bf16 on the same GEMM.
  EXPECT_GT(time.opTime(gemm, false, DType::kFp32),
            time.opTime(gemm, false, DType::kBf16));
}

/// Uniform stages, no communication: the simulated schedule must show the
/// textbook bubble, (p - 1)/m of the busy time, (p - 1)/(v m) interleaved.
TEST(TimeModel, SimulatedBubbleMatchesTheFormulas) {
  for (Schedule schedule :
       {Schedule::kGPipe, Schedule::k1F1B, Schedule::kInterleaved}) {
    Plan plan;
    plan.pp = 4;
    plan.microBatches = 8;
    plan.schedule = schedule;
    plan.virtualStages = schedule == Schedule::kInterleaved ? 2 : 1;
    int64_t v = plan.virtualStages;
    double f = 1.0 / double(v), b = 2.0 / double(v);
    std::vector<std::vector<double>> fw(4, std::vector<double>(size_t(v), f));
    std::vector<std::vector<double>> bw(4, std::vector<double>(size_t(v), b));
    auto tasks = simulatePipeline(plan, fw, bw, 0);
    ASSERT_EQ(tasks.size(), size_t(4 * 8 * v * 2)) << scheduleName(schedule);
    double end = 0;
    for (const PipelineTask &t : tasks)
      end = std::max(end, t.end);
    double busy = 8 * 3.0;
    EXPECT_NEAR((end - busy) / busy, 3.0 / (8.0 * double(v)), 1e-9)
        << scheduleName(schedule);
  }
}

/// ZB-H1 with T_F = T_B = T_W (the paper's setting): the bubble is (p - 1)
/// T_F, a third of 1F1B's (p - 1)(T_F + T_B + T_W) (Qi et al. 2023, Table 1),
/// every stage runs each micro-batch's F, B and W once with W after its B,
/// and at most p micro-batches wait for their W on any stage (1F1B's peak).
TEST(TimeModel, ZeroBubbleH1SplitsBackwardsAndShrinksTheBubble) {
  for (int64_t m : {4, 8, 12}) {
    Plan plan;
    plan.pp = 4;
    plan.microBatches = m;
    plan.schedule = Schedule::kZeroBubbleH1;
    std::vector<std::vector<double>> fw(4, std::vector<double>(1, 1.0));
    std::vector<std::vector<double>> bw(4, std::vector<double>(1, 2.0));
    auto tasks = simulatePipeline(plan, fw, bw, 0);
    ASSERT_EQ(tasks.size(), size_t(4 * m * 3));
    double end = 0;
    for (const PipelineTask &t : tasks)
      end = std::max(end, t.end);
    double busy = double(m) * 3.0;
    EXPECT_NEAR(end - busy, 3.0 * 1.0, 1e-9) << "m=" << m;
    plan.schedule = Schedule::k1F1B;
    auto oneF = simulatePipeline(plan, fw, bw, 0);
    double oneFEnd = 0;
    for (const PipelineTask &t : oneF)
      oneFEnd = std::max(oneFEnd, t.end);
    EXPECT_NEAR((oneFEnd - busy) / (end - busy), 3.0, 1e-9) << "m=" << m;
    plan.schedule = Schedule::kZeroBubbleH1;
    for (int64_t s = 0; s < 4; ++s) {
      std::vector<int> seen(size_t(m) * 3, 0);
      int64_t waiting = 0, most = 0;
      std::vector<bool> backwardDone(size_t(m), false);
      for (const PipelineTask &t : scheduleOrder(plan, s)) {
        int kind = t.weight ? 2 : t.backward ? 1 : 0;
        ++seen[size_t(t.microBatch * 3 + kind)];
        if (kind == 0)
          most = std::max(most, ++waiting);
        if (kind == 1)
          backwardDone[size_t(t.microBatch)] = true;
        if (kind == 2) {
          EXPECT_TRUE(backwardDone[size_t(t.microBatch)]);
          --waiting;
        }
      }
      for (int n : seen)
        EXPECT_EQ(n, 1);
      EXPECT_LE(most, std::min<int64_t>(4, m)) << "stage " << s;
    }
  }
}

TEST(TimeModel, EstimateAgreesWithTheSimulatedTimeline) {
  ModelDesc model = ModelDesc::llama3_70b();
  model.seq = 4096;
  TimeModel time(model, h100Nodes(8));
  Plan plan;
  plan.dp = 2;
  plan.pp = 4;
  plan.tp = 8;
  plan.zeroStage = 1;
  plan.microBatches = 64;
  plan.recompute = Recompute::kFull;
  plan.sequenceParallel = true;
  for (Schedule s : {Schedule::k1F1B, Schedule::kInterleaved,
                     Schedule::kZeroBubbleH1}) {
    plan.schedule = s;
    plan.virtualStages = s == Schedule::kInterleaved ? 4 : 1;
    TimeBreakdown estimate = time.estimate(plan);
    Timeline timeline = time.timeline(plan);
    EXPECT_FALSE(timeline.truncated);
    EXPECT_EQ(timeline.ranks.size(), 4u);
    // The closed form and the event simulation agree within a few percent
    // (the closed form's fill/drain is exact only for uniform stages).
    EXPECT_NEAR(timeline.stepTime / estimate.stepTime, 1.0, 0.05)
        << scheduleName(s);
    EXPECT_GT(estimate.mfu, 0.2);
    EXPECT_LT(estimate.mfu, 0.75);
  }
}

TEST(TimeModel, RecomputationCostsTimeAndFp32IsSlower) {
  ModelDesc model = ModelDesc::llama3_8b();
  model.seq = 4096;
  TimeModel time(model, h100Nodes(1));
  Plan plan;
  plan.dp = 8;
  plan.microBatches = 4;
  TimeBreakdown none = time.estimate(plan);
  plan.recompute = Recompute::kFull;
  TimeBreakdown full = time.estimate(plan);
  // Full recomputation re-runs each layer's forward: about 4/3 the time.
  EXPECT_NEAR(full.computeTime / none.computeTime, 4.0 / 3.0, 0.05);
  EXPECT_NEAR(full.modelFlopsPerStep, none.modelFlopsPerStep, 1);
  EXPECT_GT(full.hardwareFlopsPerStep, none.hardwareFlopsPerStep);
  plan.recompute = Recompute::kNone;
  plan.dtype = DTypePolicy::fp32();
  EXPECT_GT(time.estimate(plan).stepTime, 2 * none.stepTime);
}

TEST(TimeModel, CommunicationVolumesByKind) {
  ModelDesc model = ModelDesc::llama3_8b();
  model.seq = 2048;
  TimeModel time(model, h100Nodes(4));
  Plan plan;
  plan.dp = 32;
  plan.microBatches = 1;
  for (int zero : {0, 3}) {
    plan.zeroStage = zero;
    // ZeRO paper: plain DP and ZeRO-1/2 move 2 psi per step, ZeRO-3 3 psi
    // (here with one micro-batch), each times (n - 1)/n: psi the bf16
    // parameters gathered, and the gradients summed in fp32 (the
    // compiler's default under mixed precision) or, with
    // halfGradReduce, in bf16.
    double psi = double(model.totalParams()) * 2;
    for (bool half : {false, true}) {
      plan.halfGradReduce = half;
      TimeBreakdown t = time.estimate(plan);
      double bus = 0;
      for (const CommItem &c : t.comm)
        if (std::string(c.group) == "dp")
          bus += c.busBytes;
      double grads = (half ? 1.0 : 2.0) * psi;
      double expected =
          (zero == 3 ? psi + grads + psi : grads + grads) * 31.0 / 32.0;
      EXPECT_NEAR(bus / expected, 1.0, 1e-6) << zero << " half " << half;
    }
  }
}

TEST(TimeModel, ZeroThreeGathersEveryUnitEveryMicroBatch) {
  // PyTorch FSDP and DeepSpeed ZeRO-3 gather each layer's parameters for
  // the forward and again for the backward of every micro-batch, and
  // reduce-scatter each layer's gradients: 2 m (L + 2) gathers and m (L + 2)
  // reduce-scatters per step (the embedding and the head are units of their
  // own), each paying the ring's n - 1 latency steps: the network's on
  // the nodes - 1 that cross nodes, NVLink's on the others.
  ModelDesc model = ModelDesc::llama3_8b();
  model.seq = 2048;
  ClusterSpec cluster = h100Nodes(4);
  TimeModel time(model, cluster);
  Plan plan;
  plan.dp = 32;
  plan.zeroStage = 3;
  plan.microBatches = 4;
  TimeBreakdown t = time.estimate(plan);
  const double units = double(model.layers + 2);
  int found = 0;
  for (const CommItem &c : t.comm) {
    if (std::string(c.group) != "dp")
      continue;
    bool gather = c.kind == Collective::kAllGather;
    EXPECT_DOUBLE_EQ(c.count, (gather ? 2.0 : 1.0) * 4 * units);
    double one = time.collectiveTime(c.kind, c.payloadBytes, 32, c.link, 8);
    EXPECT_NEAR(c.time, c.count * one, 1e-12);
    // The latency part: of 31 ring steps, 3 cross the 4 nodes; the others
    // pay 3x the network's post overhead (more than NVLink's latency).
    double bandwidthOnly = c.count * busVolume(c.kind, c.payloadBytes, 32) /
                           linkFigures(cluster, c.link, 8).busBandwidth;
    EXPECT_NEAR(c.time - bandwidthOnly,
                c.count * (28 * 3 * cluster.interNode.postOverhead.value +
                           3 * cluster.interNode.latency.value),
                1e-9);
    ++found;
  }
  EXPECT_EQ(found, 2);
}

TEST(TimeModel, OverlappedCollectivesSlowTheComputeBesideThem) {
  // ZeRO-3's gathers and reduce-scatters run beside the layers' compute;
  // with collectives holding a fifth of the SMs, that compute is slowed by
  // a fifth of the time they overlap: more exposed time, by at most a fifth
  // of the data-parallel communication, and the step longer by as much.
  ModelDesc model = ModelDesc::llama3_8b();
  model.seq = 2048;
  Plan plan;
  plan.dp = 32;
  plan.zeroStage = 3;
  plan.microBatches = 4;
  ClusterSpec none = h100Nodes(4), some = h100Nodes(4);
  none.device.collectiveShare.value = 0;
  some.device.collectiveShare.value = 0.2;
  TimeBreakdown a = TimeModel(model, none).estimate(plan);
  TimeBreakdown b = TimeModel(model, some).estimate(plan);
  double dpComm = 0;
  for (const CommItem &c : a.comm)
    if (std::string(c.group) == "dp")
      dpComm += c.time;
  double slowed = b.dpCommExposed - a.dpCommExposed;
  EXPECT_GT(slowed, 0);
  EXPECT_LE(slowed, 0.2 * dpComm + 1e-12);
  EXPECT_NEAR(b.stepTime - a.stepTime, slowed, 1e-9);
}

} // namespace
} // namespace dtcc::planner
