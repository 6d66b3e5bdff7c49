//===- CalibrationTest.cpp - measurements to a cluster spec ---------------===//

#include "planner/Calibration.h"
#include "planner/TimeModel.h"

#include <gtest/gtest.h>

namespace dtcc::planner {
namespace {

CalibrationData sampleData() {
  CalibrationData d;
  d.host = "testhost";
  d.date = "2026-01-01T00:00:00Z";
  d.cpuModel = "Test CPU";
  d.cores = 2;
  d.memTotalBytes = 16e9;
  d.gemm = {{64, 1, 20e9}, {256, 1, 60e9}, {1024, 1, 80e9}, {1024, 2, 150e9}};
  d.stream = {{1, 1 << 20, 50e9}, {1, 64 << 20, 12e9}, {2, 64 << 20, 20e9}};
  d.callOverheadSeconds = 1e-7;
  return d;
}

/// Samples that follow t = latency x steps + bus volume / bandwidth exactly.
std::vector<CollectiveSample> exactSamples(double latency, double bandwidth,
                                           int64_t ranks) {
  ClusterSpec c = clusterPreset("cpu-local").value();
  c.intraNode.bandwidth.value = bandwidth;
  c.intraNode.efficiency.value = 1;
  c.intraNode.latency.value = latency;
  TimeModel time(ModelDesc::gpt2Small(), c);
  std::vector<CollectiveSample> out;
  for (double bytes = 8; bytes <= 16 << 20; bytes *= 8) {
    out.push_back({"all-reduce", ranks, bytes,
                   time.collectiveTime(Collective::kAllReduce, bytes, ranks,
                                       Link::kIntraNode)});
    out.push_back({"all-gather", ranks, bytes,
                   time.collectiveTime(Collective::kAllGather, bytes, ranks,
                                       Link::kIntraNode)});
  }
  return out;
}

TEST(Calibration, FitRecoversTheTimeModelsOwnLink) {
  for (int64_t ranks : {2, 4, 8}) {
    auto fit = fitLink(exactSamples(20e-6, 3e9, ranks));
    ASSERT_TRUE(fit.isOk()) << fit.status().toString();
    EXPECT_NEAR(fit.value().latency, 20e-6, 1e-4 * 20e-6) << ranks;
    EXPECT_NEAR(fit.value().busBandwidth, 3e9, 1e-4 * 3e9) << ranks;
    EXPECT_GT(fit.value().smallSamples, 0);
    EXPECT_GT(fit.value().largeSamples, 0);
  }
  EXPECT_FALSE(fitLink({}).isOk());
  EXPECT_FALSE(fitLink({{"all-reduce", 2, 8, 1e-5}}).isOk());
}

TEST(Calibration, DeviceFiguresAndSources) {
  CalibrationData d = sampleData();
  auto c = calibratedCluster(d, clusterPreset("cpu-local").value());
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  const ClusterSpec &s = c.value();
  EXPECT_TRUE(s.device.isCpu());
  EXPECT_DOUBLE_EQ(s.device.peakFp32.value, 80e9);
  EXPECT_DOUBLE_EQ(s.device.peakBf16.value, 80e9);
  EXPECT_DOUBLE_EQ(s.device.matmulEfficiency.value, 0.75);
  EXPECT_DOUBLE_EQ(s.device.attentionEfficiency.value, 0.25);
  EXPECT_DOUBLE_EQ(s.device.memoryBandwidth.value, 12e9); // beyond caches
  EXPECT_DOUBLE_EQ(s.hostMemoryBandwidth.value, 20e9);
  EXPECT_DOUBLE_EQ(s.device.memoryBytes.value, 8e9);
  EXPECT_EQ(s.perNode(), 2);
  EXPECT_DOUBLE_EQ(s.device.kernelOverhead.value, 1e-7);
  for (const Figure *f : {&s.device.peakFp32, &s.device.memoryBandwidth,
                          &s.devicesPerNode}) {
    EXPECT_NE(f->source.find("testhost"), std::string::npos) << f->source;
    EXPECT_NE(f->source.find("2026-01-01"), std::string::npos) << f->source;
  }
  EXPECT_NE(s.device.peakFp32.source.find("sgemm 1024^3"), std::string::npos);
  // One process: the links are the base's, and say they were not measured.
  EXPECT_NE(s.intraNode.bandwidth.source.find("not measured"),
            std::string::npos);
  EXPECT_NE(s.intraNode.bandwidth.source.find("cpu-local"), std::string::npos);
  // The raw samples travel with the file and survive a round trip.
  auto back = clusterFromJson(clusterToJson(s), "test");
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  EXPECT_TRUE(back.value().device.isCpu());
  ASSERT_NE(back.value().calibration.find("sgemm"), nullptr);
  EXPECT_EQ(back.value().calibration.find("sgemm")->items().size(), 4u);
  EXPECT_EQ(back.value().device.peakFp32.source, s.device.peakFp32.source);
}

TEST(Calibration, CollectivesGoToTheLinkTheRanksShared) {
  CalibrationData d = sampleData();
  d.launcher = "mpirun";
  d.ranks = 2;
  d.hosts = 1;
  d.concurrent = true;
  d.transport = "MPI (Open MPI, btl self,tcp)";
  d.collectives = exactSamples(30e-6, 2e9, 2);
  auto c = calibratedCluster(d, clusterPreset("cpu-local").value());
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_NEAR(c.value().intraNode.busBandwidth(), 2e9, 1e-3 * 2e9);
  EXPECT_NEAR(c.value().intraNode.latency.value, 30e-6, 1e-3 * 30e-6);
  EXPECT_EQ(c.value().intraNode.name, d.transport);
  EXPECT_NE(c.value().interNode.bandwidth.source.find("not measured"),
            std::string::npos);
  EXPECT_NE(c.value().device.peakFp32.source.find("all 2 ranks at once"),
            std::string::npos);

  d.hosts = 2;
  auto inter = calibratedCluster(d, clusterPreset("cpu-local").value());
  ASSERT_TRUE(inter.isOk());
  EXPECT_NEAR(inter.value().interNode.busBandwidth(), 2e9, 1e-3 * 2e9);
  EXPECT_NE(inter.value().intraNode.bandwidth.source.find("not measured"),
            std::string::npos);
}

TEST(Calibration, MissingMeasurementsAreErrors) {
  CalibrationData d = sampleData();
  d.gemm.clear();
  EXPECT_FALSE(calibratedCluster(d, clusterPreset("cpu-local").value()).isOk());
  d = sampleData();
  d.stream.clear();
  EXPECT_FALSE(calibratedCluster(d, clusterPreset("cpu-local").value()).isOk());
}

TEST(Cluster, DeviceKind) {
  EXPECT_TRUE(clusterPreset("cpu-local").value().device.isCpu());
  EXPECT_FALSE(clusterPreset("dgx-h100").value().device.isCpu());
  auto bad = parseClusterText(R"({"base": "cpu-local", "device": {"kind": "tpu"}})",
                              "k.json");
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("device.kind"), std::string::npos);
}

} // namespace
} // namespace dtcc::planner
