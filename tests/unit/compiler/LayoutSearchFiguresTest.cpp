//===- LayoutSearchFiguresTest.cpp - the layout search's figures per mesh -===//
//
// Each mesh axis priced on the link its groups span, as the program model
// prices it: cpu-local has 2 ranks per node, ranks row-major over the mesh's
// axes in the order they are written (the last fastest).
//
//===----------------------------------------------------------------------===//

#include "compiler/PlanByCompiling.h"
#include "planner/Cluster.h"

#include <gtest/gtest.h>

using namespace dtcc;

namespace {

runtime::MeshShape mesh(const char *spec) {
  auto m = runtime::MeshShape::parse(spec);
  EXPECT_TRUE(m.isOk()) << m.status().message();
  return m.value();
}

DeviceFigures cpuLocal(int64_t nodes) {
  auto c = planner::clusterPreset("cpu-local");
  EXPECT_TRUE(c.isOk());
  planner::ClusterSpec spec = c.value();
  spec.nodes = nodes;
  return deviceFigures(spec);
}

TEST(LayoutSearchFigures, AxesOnTheLinksTheirGroupsSpan) {
  DeviceFigures d = cpuLocal(2);
  const planner::ClusterSpec &c = d.cluster;
  double intra = c.intraNode.busBandwidth(), inter = c.interNode.busBandwidth();
  ASSERT_EQ(c.perNode(), 2);

  // dp=2 x tp=2: tp pairs share a node, dp pairs cross nodes one per node.
  TrainOptions::LayoutSearch f = layoutSearchFigures(d, mesh("dp=2,tp=2"));
  EXPECT_TRUE(f.enabled);
  EXPECT_DOUBLE_EQ(f.tpBusBandwidth, intra);
  EXPECT_DOUBLE_EQ(f.tpLatency, c.intraNode.latency.value);
  EXPECT_DOUBLE_EQ(f.dpBusBandwidth, std::min(intra, inter));
  EXPECT_DOUBLE_EQ(f.dpLatency, c.interNode.latency.value);
  EXPECT_DOUBLE_EQ(f.memoryBandwidth, c.device.memoryBandwidth.value *
                                          c.device.memoryEfficiency.value);
  EXPECT_DOUBLE_EQ(f.flops, d.flops);

  // tp=4 spans both nodes with two members in each: two links' worth.
  f = layoutSearchFigures(d, mesh("dp=1,tp=4"));
  EXPECT_DOUBLE_EQ(f.tpBusBandwidth, std::min(intra, 2 * inter));
  EXPECT_DOUBLE_EQ(f.tpLatency, c.interNode.latency.value);

  // dp=2 x tp=1 inside one node.
  f = layoutSearchFigures(cpuLocal(1), mesh("dp=2,tp=1"));
  EXPECT_DOUBLE_EQ(f.dpBusBandwidth, intra);
}

TEST(LayoutSearchFigures, TheAxisOrderWrittenPlacesTheGroups) {
  DeviceFigures d = cpuLocal(2);
  const planner::ClusterSpec &c = d.cluster;
  double intra = c.intraNode.busBandwidth(), inter = c.interNode.busBandwidth();
  // tp=2,dp=2: dp is fastest, so the dp pairs share a node and the tp
  // pairs (ranks 0 and 2) cross nodes: the transpose of dp=2,tp=2.
  TrainOptions::LayoutSearch f = layoutSearchFigures(d, mesh("tp=2,dp=2"));
  EXPECT_DOUBLE_EQ(f.dpBusBandwidth, intra);
  EXPECT_DOUBLE_EQ(f.dpLatency, c.intraNode.latency.value);
  EXPECT_DOUBLE_EQ(f.tpBusBandwidth, std::min(intra, inter));
  EXPECT_DOUBLE_EQ(f.tpLatency, c.interNode.latency.value);
  // An axis before pp: pp=2,dp=2 with 2 ranks per node keeps dp inside.
  f = layoutSearchFigures(d, mesh("pp=2,dp=2"));
  EXPECT_DOUBLE_EQ(f.dpBusBandwidth, intra);
}

TEST(LayoutSearchFigures, WithoutAClusterEveryAxisUsesTheSummary) {
  DeviceFigures d;
  d.busBandwidth = 3e9;
  d.latency = 7e-6;
  TrainOptions::LayoutSearch f = layoutSearchFigures(d, mesh("dp=2,tp=2"));
  EXPECT_DOUBLE_EQ(f.busBandwidth, 3e9);
  EXPECT_DOUBLE_EQ(f.latency, 7e-6);
  EXPECT_DOUBLE_EQ(f.tpBusBandwidth, 0);
  EXPECT_DOUBLE_EQ(f.memoryBandwidth, 0);
}

} // namespace
