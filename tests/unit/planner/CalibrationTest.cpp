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
  d.gemm = {{1024, 2, 150e9}};
  // Out of order: the curve is sorted by size.
  d.matmul = {{256, 60e9}, {32, 30e9}, {64, 40e9}, {1024, 80e9}};
  d.kernels = {
      {"gelu", "512x512xf32 -> 512x512xf32 {approximate = none}", 262144,
       262144 * 1.5e-9},
      {"cast", "512x512xf32 -> 512x512xbf16 and 512x512xbf16 -> 512x512xf32",
       524288, 524288 * 0.25e-9},
      {"lr_schedule", "i64, i64 -> f32 {kind = constant}", 1, 20e-9}};
  d.stream = {{1, 1 << 20, 50e9}, {1, 64 << 20, 12e9}, {2, 64 << 20, 20e9}};
  d.callOverheadSeconds = 1e-7;
  return d;
}

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
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
  EXPECT_DOUBLE_EQ(s.device.attentionEfficiency.value, 0.5);
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
  EXPECT_TRUE(contains(s.device.peakFp32.source,
                       "dtcc's CPU matmul kernel (OpenBLAS sgemm) on f32 "
                       "1024x1024x1024 products, 1 thread, one process"))
      << s.device.peakFp32.source;
  EXPECT_TRUE(contains(s.device.matmulEfficiency.source, "256^3 over 1024^3"))
      << s.device.matmulEfficiency.source;
  // One process: the links are the base's, and say they were not measured.
  EXPECT_NE(s.intraNode.bandwidth.source.find("not measured"),
            std::string::npos);
  EXPECT_NE(s.intraNode.bandwidth.source.find("cpu-local"), std::string::npos);
  // The raw samples travel with the file and survive a round trip.
  auto back = clusterFromJson(clusterToJson(s), "test");
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  EXPECT_TRUE(back.value().device.isCpu());
  ASSERT_NE(back.value().calibration.find("sgemm"), nullptr);
  EXPECT_EQ(back.value().calibration.find("sgemm")->items().size(), 1u);
  ASSERT_NE(back.value().calibration.find("matmulKernel"), nullptr);
  EXPECT_EQ(back.value().calibration.find("matmulKernel")->items().size(), 4u);
  ASSERT_NE(back.value().calibration.find("kernels"), nullptr);
  EXPECT_EQ(back.value().calibration.find("kernels")->items().size(), 3u);
  EXPECT_EQ(back.value().device.peakFp32.source, s.device.peakFp32.source);
}

TEST(Calibration, MatmulEfficiencyCurveFromTheKernelBySize) {
  CalibrationData d = sampleData();
  auto c = calibratedCluster(d, clusterPreset("cpu-local").value());
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  const DeviceSpec &dev = c.value().device;
  // Every size over the peak (80 GFLOP/s at n = 1024), ascending.
  ASSERT_EQ(dev.gemmEfficiency.size(), 4u);
  const double n[] = {32, 64, 256, 1024}, e[] = {0.375, 0.5, 0.75, 1.0};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_DOUBLE_EQ(dev.gemmEfficiency[i].n, n[i]) << i;
    EXPECT_DOUBLE_EQ(dev.gemmEfficiency[i].efficiency, e[i]) << i;
  }
  // Read by the cost model at cbrt(m k n), log-interpolated: 128 lies
  // halfway between 64 and 256.
  EXPECT_DOUBLE_EQ(dev.matmulEfficiencyAt(128, 128, 128), 0.625);
  EXPECT_DOUBLE_EQ(dev.matmulEfficiencyAt(16, 16, 16), 0.375);
  for (const char *part :
       {"measured by dtcc calibrate on testhost at 2026-01-01T00:00:00Z",
        "matmul kernel", "n = 32, 64, 256, 1024", "1 thread, one process",
        "median of three windows of >= 0.15 s", "80.0 GFLOP/s"})
    EXPECT_TRUE(contains(dev.gemmEfficiencySource, part))
        << part << " not in: " << dev.gemmEfficiencySource;
  // Through a cluster file and back.
  auto back = clusterFromJson(clusterToJson(c.value()), "test");
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  ASSERT_EQ(back.value().device.gemmEfficiency.size(), 4u);
  EXPECT_DOUBLE_EQ(back.value().device.gemmEfficiency[1].efficiency, 0.5);
  EXPECT_EQ(back.value().device.gemmEfficiencySource, dev.gemmEfficiencySource);

  // A size measured twice, or without a rate, is a calibrate bug.
  d.matmul.push_back({32, 1e9});
  EXPECT_FALSE(calibratedCluster(d, clusterPreset("cpu-local").value()).isOk());
  d = sampleData();
  d.matmul[0].flopsPerSecond = 0;
  EXPECT_FALSE(calibratedCluster(d, clusterPreset("cpu-local").value()).isOk());
}

TEST(Calibration, KernelFiguresAreSecondsPerElementWithTheirWorkload) {
  CalibrationData d = sampleData();
  auto c = calibratedCluster(d, clusterPreset("cpu-local").value());
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  const auto &kernels = c.value().device.kernelSeconds;
  ASSERT_EQ(kernels.size(), 3u);
  EXPECT_NEAR(kernels.at("gelu").value, 1.5e-9, 1e-21);
  EXPECT_NEAR(kernels.at("cast").value, 0.25e-9, 1e-21); // both directions
  EXPECT_NEAR(kernels.at("lr_schedule").value, 20e-9, 1e-21);
  const std::string &gelu = kernels.at("gelu").source;
  for (const char *part :
       {"measured by dtcc calibrate on testhost at 2026-01-01T00:00:00Z",
        "dtcc's CPU gelu kernel on 512x512xf32 -> 512x512xf32 "
        "{approximate = none}",
        "1 thread, one process", "median of three windows of >= 10 ms",
        "393 us per call over 262144 elements"})
    EXPECT_TRUE(contains(gelu, part)) << part << " not in: " << gelu;

  auto back = clusterFromJson(clusterToJson(c.value()), "test");
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  EXPECT_EQ(back.value().device.kernelSeconds.size(), 3u);
  EXPECT_DOUBLE_EQ(back.value().device.kernelSeconds.at("gelu").value,
                   kernels.at("gelu").value);
  EXPECT_EQ(back.value().device.kernelSeconds.at("gelu").source, gelu);

  // Under a launcher the figure is the slowest rank's, and says so.
  d.concurrent = true;
  d.ranks = 4;
  auto four = calibratedCluster(d, clusterPreset("cpu-local").value());
  ASSERT_TRUE(four.isOk()) << four.status().toString();
  EXPECT_TRUE(contains(four.value().device.kernelSeconds.at("gelu").source,
                       "on all 4 ranks at once (slowest rank)"));
}

TEST(Calibration, BadKernelSamplesAreErrors) {
  auto calibrated = [](const CalibrationData &d) {
    return calibratedCluster(d, clusterPreset("cpu-local").value());
  };
  CalibrationData d = sampleData();
  d.kernels.push_back(d.kernels[0]);
  auto twice = calibrated(d);
  ASSERT_FALSE(twice.isOk());
  EXPECT_TRUE(contains(twice.status().message(), "gelu measured twice"));
  d = sampleData();
  d.kernels[0].seconds = 0;
  EXPECT_FALSE(calibrated(d).isOk());
  d = sampleData();
  d.kernels[1].elements = 0;
  EXPECT_FALSE(calibrated(d).isOk());
  d = sampleData();
  d.kernels[0].kernel.clear();
  EXPECT_FALSE(calibrated(d).isOk());
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
  d.matmul.clear();
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
