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

//===----------------------------------------------------------------------===//
// GPUs (dtcc calibrate --device cuda)
//===----------------------------------------------------------------------===//

GpuCalibrationData gpuSampleData() {
  GpuCalibrationData d;
  d.host = "gpuhost";
  d.date = "2026-02-01T00:00:00Z";
  d.gpu = "NVIDIA H100 80GB HBM3";
  d.computeCapability = "9.0";
  d.multiprocessors = 132;
  d.software = "CUDA runtime 13.0, driver 13.0, cuBLASLt 13.0.0, NCCL 2.27.3";
  d.cpuModel = "Test Xeon";
  d.gpusPerHost = 8;
  d.deviceMemoryBytes = 85e9;
  d.deviceMemoryFreeBytes = 84e9;
  d.hostMemTotalBytes = 2e12;
  // Out of order and mixed: each dtype's curve is sorted by size.
  d.matmul = {{DType::kBf16, 8192, 750e12}, {DType::kBf16, 256, 150e12},
              {DType::kFp32, 1024, 40e12},  {DType::kBf16, 4096, 600e12},
              {DType::kBf16, 16384, 720e12}, {DType::kBf16, 1024, 375e12},
              {DType::kFp32, 8192, 50e12},  {DType::kTf32, 8192, 400e12},
              {DType::kFp16, 8192, 760e12}};
  d.kernels = {{"gelu", "4096x4096xf32 -> 4096x4096xf32 {approximate = none}",
                int64_t(1) << 24, double(int64_t(1) << 24) * 0.05e-9}};
  d.copies = {{"device-to-device", int64_t(1) << 20, 5e12}, // in L2: ignored
              {"device-to-device", int64_t(1) << 30, 2.8e12},
              {"host-to-device", int64_t(1) << 28, 50e9},
              {"device-to-host", int64_t(1) << 28, 45e9}};
  d.launchSeconds = 2.5e-6;
  d.launchWorkload = "neg kernel on 1xf32 -> 1xf32";
  return d;
}

StatusOr<ClusterSpec> gpuCalibrated(const GpuCalibrationData &d) {
  return calibratedGpuCluster(d, clusterPreset(gpuBasePreset(d.gpu)).value());
}

TEST(GpuCalibration, DeviceFiguresAndSources) {
  GpuCalibrationData d = gpuSampleData();
  auto c = gpuCalibrated(d);
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  const ClusterSpec &s = c.value();
  EXPECT_FALSE(s.device.isCpu());
  EXPECT_EQ(s.device.name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(s.nodes, 1);
  // Each dtype's peak is its best size.
  EXPECT_DOUBLE_EQ(s.device.peakBf16.value, 750e12);
  EXPECT_DOUBLE_EQ(s.device.peakFp32.value, 50e12);
  EXPECT_DOUBLE_EQ(s.device.peakTf32.value, 400e12);
  EXPECT_DOUBLE_EQ(s.device.peakFp16.value, 760e12);
  EXPECT_DOUBLE_EQ(s.device.peak(DType::kBf16).value, 750e12);
  // The largest copy beyond the caches, not the faster small one.
  EXPECT_DOUBLE_EQ(s.device.memoryBandwidth.value, 2.8e12);
  EXPECT_DOUBLE_EQ(s.device.memoryEfficiency.value, 1.0);
  EXPECT_DOUBLE_EQ(s.pcieBandwidth.value, 45e9); // the slower direction
  EXPECT_DOUBLE_EQ(s.device.kernelOverhead.value, 2.5e-6);
  EXPECT_DOUBLE_EQ(s.device.memoryBytes.value, 85e9);
  EXPECT_DOUBLE_EQ(s.hostMemoryBytes.value, 2e12);
  EXPECT_EQ(s.perNode(), 8);
  for (const Figure *f :
       {&s.device.peakBf16, &s.device.memoryBandwidth, &s.pcieBandwidth,
        &s.device.kernelOverhead, &s.device.memoryBytes, &s.devicesPerNode}) {
    EXPECT_TRUE(contains(f->source, "measured by dtcc calibrate --device cuda "
                                    "on gpuhost (NVIDIA H100 80GB HBM3) at "
                                    "2026-02-01T00:00:00Z"))
        << f->source;
  }
  EXPECT_TRUE(contains(s.device.peakBf16.source,
                       "dtcc's CUDA matmul kernel (cuBLASLt) on "
                       "8192x8192x8192 products of bf16 operands, fp32 "
                       "accumulation, one GPU, sustained (median of three "
                       "windows of >= 0.1 s), the best of n = 256, 1024, "
                       "4096, 8192, 16384"))
      << s.device.peakBf16.source;
  EXPECT_TRUE(contains(s.device.peakTf32.source, "DTCC_CUDA_ALLOW_TF32"));
  EXPECT_TRUE(contains(s.device.peakFp32.source, "DTCC_CUDA_ALLOW_TF32 unset"));
  EXPECT_TRUE(contains(s.pcieBandwidth.source, "50.0 GB/s to the GPU, 45.0 "
                                               "GB/s from it"))
      << s.pcieBandwidth.source;
  EXPECT_TRUE(contains(s.device.memoryBandwidth.source, "1.00 GiB"))
      << s.device.memoryBandwidth.source;
  EXPECT_TRUE(contains(s.device.kernelOverhead.source,
                       "neg kernel on 1xf32 -> 1xf32"));
  // What a GPU calibration does not measure stays the base's, and says so.
  const ClusterSpec h100 = clusterPreset("dgx-h100").value();
  EXPECT_DOUBLE_EQ(s.device.attentionEfficiency.value,
                   h100.device.attentionEfficiency.value);
  EXPECT_TRUE(contains(s.device.attentionEfficiency.source, "not measured"));
  EXPECT_DOUBLE_EQ(s.device.reservedBytes.value, h100.device.reservedBytes.value);
  EXPECT_TRUE(contains(s.device.reservedBytes.source, "953.67 MiB of the GPU's memory were in use"))
      << s.device.reservedBytes.source;
  EXPECT_DOUBLE_EQ(s.hostMemoryBandwidth.value, h100.hostMemoryBandwidth.value);
  EXPECT_TRUE(contains(s.hostMemoryBandwidth.source, "not measured"));
  // One process: no links measured.
  EXPECT_TRUE(contains(s.intraNode.bandwidth.source, "not measured (one "
                                                     "process"));
  EXPECT_TRUE(contains(s.interNode.latency.source, "dgx-h100"));
  // Per-kernel rates as on the CPU: seconds per element.
  ASSERT_EQ(s.device.kernelSeconds.size(), 1u);
  EXPECT_NEAR(s.device.kernelSeconds.at("gelu").value, 0.05e-9, 1e-22);
  EXPECT_TRUE(contains(s.device.kernelSeconds.at("gelu").source,
                       "dtcc's CUDA gelu kernel on 4096x4096xf32 -> "
                       "4096x4096xf32 {approximate = none}, one GPU, "
                       "sustained (median of three windows of >= 50 ms): "
                       "839 us per call over 16777216 elements"))
      << s.device.kernelSeconds.at("gelu").source;

  // Through a cluster file and back, the raw samples included.
  auto back = clusterFromJson(clusterToJson(s), "test");
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  EXPECT_FALSE(back.value().device.isCpu());
  EXPECT_EQ(back.value().device.peakBf16.source, s.device.peakBf16.source);
  const Json &raw = back.value().calibration;
  ASSERT_NE(raw.find("tool"), nullptr);
  EXPECT_EQ(raw.find("tool")->asString(), "dtcc calibrate --device cuda");
  ASSERT_NE(raw.find("matmulKernel"), nullptr);
  EXPECT_EQ(raw.find("matmulKernel")->items().size(), 9u);
  EXPECT_EQ(raw.find("matmulKernel")->items()[0].find("dtype")->asString(),
            "bf16");
  ASSERT_NE(raw.find("copies"), nullptr);
  EXPECT_EQ(raw.find("copies")->items().size(), 4u);
  EXPECT_EQ(raw.find("gpu")->asString(), "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(raw.find("collectives"), nullptr);
}

TEST(GpuCalibration, EfficiencyCurveIsBf16OverItsOwnPeak) {
  GpuCalibrationData d = gpuSampleData();
  auto c = gpuCalibrated(d);
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  const DeviceSpec &dev = c.value().device;
  ASSERT_EQ(dev.gemmEfficiency.size(), 5u);
  const double n[] = {256, 1024, 4096, 8192, 16384},
               e[] = {0.2, 0.5, 0.8, 1.0, 0.96};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_DOUBLE_EQ(dev.gemmEfficiency[i].n, n[i]) << i;
    EXPECT_DOUBLE_EQ(dev.gemmEfficiency[i].efficiency, e[i]) << i;
  }
  // Halfway (in log n) between 1024 and 4096.
  EXPECT_NEAR(dev.matmulEfficiencyAt(2048, 2048, 2048), 0.65, 1e-12);
  // The formula model's "large GEMMs": the curve at 4096.
  EXPECT_DOUBLE_EQ(dev.matmulEfficiency.value, 0.8);
  EXPECT_TRUE(contains(dev.matmulEfficiency.source, "bf16 4096^3 over its "
                                                    "best (8192^3)"))
      << dev.matmulEfficiency.source;
  for (const char *part :
       {"n = 256, 1024, 4096, 8192, 16384", "over the best (n = 8192: "
                                            "750.0 TFLOP/s)",
        "the curve of bf16, what mixed-precision training multiplies in"})
    EXPECT_TRUE(contains(dev.gemmEfficiencySource, part))
        << part << " not in: " << dev.gemmEfficiencySource;
  // A program's bf16 product of 4096^3 at 0.8 of the bf16 peak; an f32 one
  // at the same fraction of the f32 peak.
  EXPECT_DOUBLE_EQ(dev.peakFlops(DType::kBf16) *
                       dev.matmulEfficiencyAt(4096, 4096, 4096),
                   600e12);

  // Without bf16 products the curve is fp16's, and says so; a dtype not
  // measured keeps the base's peak.
  std::vector<GpuMatmulSample> noBf16;
  for (const GpuMatmulSample &m : d.matmul)
    if (m.dtype != DType::kBf16)
      noBf16.push_back(m);
  d.matmul = noBf16;
  d.matmul.push_back({DType::kFp16, 1024, 380e12});
  auto fp16 = gpuCalibrated(d);
  ASSERT_TRUE(fp16.isOk()) << fp16.status().toString();
  EXPECT_EQ(gpuCurveDType(d).value(), DType::kFp16);
  ASSERT_EQ(fp16.value().device.gemmEfficiency.size(), 2u);
  EXPECT_DOUBLE_EQ(fp16.value().device.gemmEfficiency[0].efficiency, 0.5);
  EXPECT_TRUE(contains(fp16.value().device.gemmEfficiencySource,
                       "the curve of fp16, no bf16 products were measured"));
  EXPECT_DOUBLE_EQ(fp16.value().device.peakBf16.value,
                   clusterPreset("dgx-h100").value().device.peakBf16.value);
  EXPECT_TRUE(contains(fp16.value().device.peakBf16.source,
                       "not measured (no bf16 matmul on this GPU, compute "
                       "capability 9.0)"));
  // Every size is below the reference: the largest one is the figure.
  d.matmul = {{DType::kBf16, 256, 100e12}, {DType::kBf16, 1024, 200e12}};
  auto small = gpuCalibrated(d);
  ASSERT_TRUE(small.isOk()) << small.status().toString();
  EXPECT_DOUBLE_EQ(small.value().device.matmulEfficiency.value, 1.0);
}

TEST(GpuCalibration, CollectivesGoToTheLinksTheRanksShared) {
  GpuCalibrationData d = gpuSampleData();
  d.launcher = "mpirun";
  d.ranks = 8;
  d.concurrent = true;
  d.transport = "NCCL 2.27.3";
  d.collectives = exactSamples(8e-6, 360e9, 8);
  auto one = gpuCalibrated(d);
  ASSERT_TRUE(one.isOk()) << one.status().toString();
  const ClusterSpec &s = one.value();
  EXPECT_NEAR(s.intraNode.busBandwidth(), 360e9, 1e-3 * 360e9);
  EXPECT_NEAR(s.intraNode.latency.value, 8e-6, 1e-3 * 8e-6);
  EXPECT_EQ(s.intraNode.name, "NCCL 2.27.3");
  EXPECT_TRUE(contains(s.intraNode.bandwidth.source,
                       "all-reduce and all-gather over 8 GPUs on 1 host "
                       "(NCCL 2.27.3), the runtime's NCCL communicators"))
      << s.intraNode.bandwidth.source;
  EXPECT_TRUE(contains(s.interNode.bandwidth.source,
                       "not measured (all 8 ranks on gpuhost)"));
  EXPECT_TRUE(contains(s.device.peakBf16.source,
                       "on all 8 GPUs at once (slowest rank)"));
  EXPECT_EQ(s.calibration.find("collectives")->items().size(),
            d.collectives.size());

  // Two hosts of 8: the world sweep is the inter-node link, the per-host
  // sweep the intra-node one.
  d.ranks = 16;
  d.hosts = 2;
  d.collectives = exactSamples(12e-6, 45e9, 16);
  d.hostCollectives = exactSamples(8e-6, 360e9, 8);
  d.ranksPerHost = 8;
  auto two = gpuCalibrated(d);
  ASSERT_TRUE(two.isOk()) << two.status().toString();
  EXPECT_EQ(two.value().nodes, 2);
  EXPECT_NEAR(two.value().interNode.busBandwidth(), 45e9, 1e-3 * 45e9);
  EXPECT_NEAR(two.value().interNode.latency.value, 12e-6, 1e-3 * 12e-6);
  EXPECT_NEAR(two.value().intraNode.busBandwidth(), 360e9, 1e-3 * 360e9);
  EXPECT_NEAR(two.value().intraNode.latency.value, 8e-6, 1e-3 * 8e-6);
  EXPECT_TRUE(contains(two.value().intraNode.bandwidth.source,
                       "each host's 8 GPUs at once (2 hosts"))
      << two.value().intraNode.bandwidth.source;
  ASSERT_NE(two.value().calibration.find("hostCollectives"), nullptr);

  // Two hosts, one rank each: nothing inside a host was measured.
  d.hostCollectives.clear();
  auto spread = gpuCalibrated(d);
  ASSERT_TRUE(spread.isOk()) << spread.status().toString();
  EXPECT_TRUE(contains(spread.value().intraNode.bandwidth.source,
                       "not measured (no host ran two ranks)"));

  // A sweep the fit cannot use is an error naming it.
  d.hostCollectives = {{"all-reduce", 8, 8, 1e-5}};
  auto bad = gpuCalibrated(d);
  ASSERT_FALSE(bad.isOk());
  EXPECT_TRUE(contains(bad.status().message(), "collectives inside each host"))
      << bad.status().message();
}

TEST(GpuCalibration, BasePresetByGpuName) {
  EXPECT_EQ(gpuBasePreset("NVIDIA H100 80GB HBM3"), "dgx-h100");
  EXPECT_EQ(gpuBasePreset("NVIDIA H200"), "h200");
  EXPECT_EQ(gpuBasePreset("NVIDIA A100-SXM4-80GB"), "dgx-a100-80g");
  EXPECT_EQ(gpuBasePreset("NVIDIA L40S"), "dgx-h100");
  for (const char *name : {"NVIDIA H200", "NVIDIA A100-SXM4-40GB"})
    EXPECT_TRUE(clusterPreset(gpuBasePreset(name)).isOk()) << name;
}

TEST(GpuCalibration, MissingOrBadMeasurementsAreErrors) {
  GpuCalibrationData d = gpuSampleData();
  d.matmul.clear();
  EXPECT_FALSE(gpuCalibrated(d).isOk());
  EXPECT_FALSE(gpuCurveDType(d).isOk());
  d = gpuSampleData();
  d.copies = {{"host-to-device", 1 << 28, 50e9}};
  auto noCopy = gpuCalibrated(d);
  ASSERT_FALSE(noCopy.isOk());
  EXPECT_TRUE(contains(noCopy.status().message(), "device-to-device"));
  d = gpuSampleData();
  d.matmul.push_back({DType::kBf16, 8192, 1e12});
  auto twice = gpuCalibrated(d);
  ASSERT_FALSE(twice.isOk());
  EXPECT_TRUE(contains(twice.status().message(), "bf16 size 8192 measured "
                                                  "twice"))
      << twice.status().message();
  d = gpuSampleData();
  d.matmul[1].flopsPerSecond = 0;
  EXPECT_FALSE(gpuCalibrated(d).isOk());
  d = gpuSampleData();
  d.kernels.push_back(d.kernels[0]);
  EXPECT_FALSE(gpuCalibrated(d).isOk());
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
