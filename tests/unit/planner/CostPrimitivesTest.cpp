//===- CostPrimitivesTest.cpp - the one alpha-beta model of collectives ---===//
//
// Against nccl-tests' bus-volume definitions (all-reduce 2(n-1)/n, all-gather
// and reduce-scatter (n-1)/n of the payload) and NCCL's algorithms: the
// fewer latency steps of a ring and a tree for all-reduce, rings only for
// all-gather and reduce-scatter.
//
//===----------------------------------------------------------------------===//

#include "planner/CostPrimitives.h"
#include "planner/TimeModel.h"

#include <gtest/gtest.h>

using namespace dtcc::planner;

namespace {

TEST(CostPrimitives, BusVolumeAsNcclTestsDefinesIt) {
  EXPECT_DOUBLE_EQ(busVolume(Collective::kAllReduce, 800, 8), 1400);
  EXPECT_DOUBLE_EQ(busVolume(Collective::kAllGather, 800, 8), 700);
  EXPECT_DOUBLE_EQ(busVolume(Collective::kReduceScatter, 800, 8), 700);
  EXPECT_DOUBLE_EQ(busVolume(Collective::kSendRecv, 800, 2), 800);
  EXPECT_DOUBLE_EQ(busVolume(Collective::kAllReduce, 800, 1), 0);
  // A copy moves its bytes whatever the group.
  EXPECT_DOUBLE_EQ(busVolume(Collective::kCopy, 800, 1), 800);
}

TEST(CostPrimitives, LatencyStepsOfRingOrTree) {
  // 2 ranks: ring and tree agree.
  EXPECT_DOUBLE_EQ(latencySteps(Collective::kAllReduce, 2), 2);
  EXPECT_DOUBLE_EQ(latencySteps(Collective::kAllGather, 2), 1);
  // 3 ranks: the ring's 4 and 2 steps are the tree's too.
  EXPECT_DOUBLE_EQ(latencySteps(Collective::kAllReduce, 3), 4);
  // 1024 ranks: an all-reduce takes the tree's 2 x 10, not the ring's
  // 2046; reduce-scatter and all-gather are rings in NCCL: 1023.
  EXPECT_DOUBLE_EQ(latencySteps(Collective::kAllReduce, 1024), 20);
  EXPECT_DOUBLE_EQ(latencySteps(Collective::kReduceScatter, 1024), 1023);
  EXPECT_DOUBLE_EQ(latencySteps(Collective::kAllGather, 64), 63);
  EXPECT_DOUBLE_EQ(latencySteps(Collective::kSendRecv, 2), 1);
  EXPECT_DOUBLE_EQ(latencySteps(Collective::kAllReduce, 1), 0);
}

TEST(CostPrimitives, OnlyStepsAcrossNodesPayTheNetworksLatency) {
  const double intra = 1e-6, inter = 5e-6;
  // One node: every step at the link's latency, as latencySteps counts.
  EXPECT_DOUBLE_EQ(
      collectiveLatency(Collective::kReduceScatter, 8, 1, intra, inter),
      7 * intra);
  // 512 ranks in 64 nodes: a ring reduce-scatter crosses nodes 63 times
  // of its 511 steps (NCCL's nInterSteps = nNodes - 1).
  EXPECT_DOUBLE_EQ(
      collectiveLatency(Collective::kReduceScatter, 512, 64, intra, inter),
      448 * intra + 63 * inter);
  EXPECT_DOUBLE_EQ(
      collectiveLatency(Collective::kAllGather, 512, 64, intra, inter),
      448 * intra + 63 * inter);
  // An all-reduce takes the tree's 2 (7 intra + 6 inter) over the ring's
  // (1022 - 126) intra + 126 inter.
  EXPECT_DOUBLE_EQ(
      collectiveLatency(Collective::kAllReduce, 512, 64, intra, inter),
      2 * (7 * intra + 6 * inter));
  // Two nodes of one rank each: the ring's 2 steps both cross.
  EXPECT_DOUBLE_EQ(
      collectiveLatency(Collective::kAllReduce, 2, 2, intra, inter),
      2 * inter);
  // The cluster form across nodes: 32 ranks in 4 nodes of 8, the steps
  // within nodes at 3x the network's post overhead (3 us > NVLink's 1 us).
  auto cluster = clusterPreset("dgx-h100");
  ASSERT_TRUE(cluster.isOk());
  cluster.value().nodes = 4;
  LinkFigures f = linkFigures(cluster.value(), Link::kInterNode, 8);
  EXPECT_DOUBLE_EQ(
      collectiveSeconds(cluster.value(), Collective::kAllGather, 1e8, 32,
                        Link::kInterNode, 8),
      collectiveLatency(Collective::kAllGather, 32, 4,
                        3 * cluster.value().interNode.postOverhead.value,
                        cluster.value().interNode.latency.value) +
          busVolume(Collective::kAllGather, 1e8, 32) / f.busBandwidth);
}

TEST(CostPrimitives, KernelsAndWhatTheySend) {
  EXPECT_EQ(collectiveOfKernel("all_reduce"), Collective::kAllReduce);
  EXPECT_EQ(collectiveOfKernel("all_to_all"), Collective::kAllGather);
  EXPECT_EQ(collectiveOfKernel("recv"), Collective::kSendRecv);
  EXPECT_FALSE(collectiveOfKernel("matmul").has_value());
  EXPECT_DOUBLE_EQ(sentBytes("all_reduce", 400, 4), 600);
  EXPECT_DOUBLE_EQ(sentBytes("send", 400, 2), 400);
  EXPECT_DOUBLE_EQ(sentBytes("recv", 400, 2), 0);
  EXPECT_DOUBLE_EQ(sentBytes("matmul", 400, 2), 0);
}

TEST(CostPrimitives, AlphaBetaAndTheClusterFormAgree) {
  EXPECT_DOUBLE_EQ(
      collectiveSeconds(Collective::kAllReduce, 1e6, 4, 1e9, 1e-5),
      4 * 1e-5 + 1.5e6 / 1e9);
  EXPECT_DOUBLE_EQ(collectiveSeconds(Collective::kAllReduce, 0, 4, 1e9, 1e-5),
                   0);
  auto cluster = clusterPreset("dgx-h100");
  ASSERT_TRUE(cluster.isOk());
  cluster.value().nodes = 4;
  // Within a node: the alpha-beta form on NVLink's figures (across nodes
  // see OnlyStepsAcrossNodesPayTheNetworksLatency).
  EXPECT_DOUBLE_EQ(collectiveSeconds(cluster.value(), Collective::kAllGather,
                                     1e8, 8, Link::kIntraNode, 8),
                   collectiveSeconds(Collective::kAllGather, 1e8, 8,
                                     cluster.value().intraNode.busBandwidth(),
                                     cluster.value().intraNode.latency.value));
  // A group's link from its members: ranks 0..7 share node 0; {0, 8, 16,
  // 24} span four nodes, one member in each.
  std::vector<int64_t> node0 = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(groupLink(cluster.value(), node0).link, Link::kIntraNode);
  GroupLink strided = groupLink(cluster.value(), {0, 8, 16, 24});
  EXPECT_EQ(strided.link, Link::kInterNode);
  EXPECT_EQ(strided.perNode, 1);
}

} // namespace
