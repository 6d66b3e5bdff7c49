//===- CudaCalibrateTest.cpp - dtcc calibrate's workloads on a GPU --------===//
//
// What `dtcc calibrate --device cuda` times, checked on the GPU: every case
// of calibrate's kernel list (KernelBench.h) binds through the CUDA registry
// on device memory, runs, and computes what the CPU backend computes on the
// same operands; the GPU sizes bind and stay finite; the matmul by dtype
// matches the CPU; and sustained timing with a sync waits for the GPU.
// Skipped (GTEST_SKIP) where cudaGetDeviceCount reports no GPU.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cuda/CudaDevice.h"
#include "tools/dtcc-calibrate/KernelBench.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

namespace dtcc::calibrate {
namespace {

using runtime::DType;

bool haveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

const runtime::KernelRegistry &cpuRegistry() { return runtime::cpuKernels(); }

/// Element i of a host copy as a double (integers and bools exactly).
double element(DType dtype, const std::vector<uint8_t> &bytes, int64_t i) {
  const uint8_t *p = bytes.data();
  switch (dtype) {
  case DType::kF32: {
    float f;
    std::memcpy(&f, p + 4 * i, 4);
    return f;
  }
  case DType::kF64: {
    double d;
    std::memcpy(&d, p + 8 * i, 8);
    return d;
  }
  case DType::kBF16: {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return runtime::bf16ToFloat(h);
  }
  case DType::kF16: {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return runtime::halfToFloat(h);
  }
  case DType::kI64: {
    int64_t v;
    std::memcpy(&v, p + 8 * i, 8);
    return double(v);
  }
  case DType::kI32: {
    int32_t v;
    std::memcpy(&v, p + 4 * i, 4);
    return double(v);
  }
  case DType::kBool:
    return p[i] ? 1 : 0;
  default:
    return 0;
  }
}

/// The tolerance of a dtype relative to max(1, |cpu|): one rounding of the
/// 16-bit formats; float kernels whose order of operations differs
/// (reductions, atomics, library math) for f32; exact for the rest.
double tolerance(DType dtype) {
  switch (dtype) {
  case DType::kBF16:
    return 1e-2;
  case DType::kF16:
    return 2e-3;
  case DType::kF32:
    return 1e-4;
  case DType::kF64:
    return 1e-10;
  default:
    return 0;
  }
}

/// Compares every output of the two bindings.
void expectSameOutputs(const BoundKernelCase &cpu, const BoundKernelCase &gpu,
                       double f32Tolerance) {
  ASSERT_EQ(cpu.outputs().size(), gpu.outputs().size());
  for (size_t o = 0; o < cpu.outputs().size(); ++o) {
    const runtime::TensorView &v = cpu.outputs()[o];
    auto want = cpu.outputBytes(o);
    auto got = gpu.outputBytes(o);
    ASSERT_TRUE(want.isOk()) << want.status().toString();
    ASSERT_TRUE(got.isOk()) << got.status().toString();
    ASSERT_EQ(want.value().size(), got.value().size()) << "output " << o;
    const double tol =
        v.dtype == DType::kF32 ? f32Tolerance : tolerance(v.dtype);
    for (int64_t i = 0; i < v.numel(); ++i) {
      const double w = element(v.dtype, want.value(), i);
      const double g = element(v.dtype, got.value(), i);
      ASSERT_NEAR(g, w, tol * std::max(1.0, std::fabs(w)))
          << "output " << o << " element " << i;
    }
  }
}

class CudaCalibrate : public ::testing::Test {
protected:
  void SetUp() override {
    if (!haveGpu())
      GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount reports none)";
    // Plain f32 matmuls unless a test asks for TF32.
    unsetenv("DTCC_CUDA_ALLOW_TF32");
    auto d = runtime::cuda::CudaDevice::create(0);
    ASSERT_TRUE(d.isOk()) << d.status().toString();
    gpu = std::move(d.value());
  }
  std::unique_ptr<runtime::cuda::CudaDevice> gpu;
};

TEST_F(CudaCalibrate, EveryCaseBindsRunsAndMatchesTheCpu) {
  for (const KernelCase &kase : kernelBenchCases(KernelBenchSizes::tiny())) {
    SCOPED_TRACE(kase.kernel + " on " + kase.workload());
    auto cpu = BoundKernelCase::bind(kase, cpuRegistry());
    auto onGpu = BoundKernelCase::bind(kase, *gpu);
    ASSERT_TRUE(cpu.isOk()) << cpu.status().toString();
    ASSERT_TRUE(onGpu.isOk()) << onGpu.status().toString();
    ASSERT_TRUE(cpu.value()->run().isOk());
    runtime::Status ran = onGpu.value()->run();
    ASSERT_TRUE(ran.isOk()) << ran.toString();
    ASSERT_TRUE(gpu->synchronize().isOk());
    expectSameOutputs(*cpu.value(), *onGpu.value(), 1e-4);
    // Several runs: in-place updates (adamw, sgd) must stay finite.
    for (int i = 0; i < 4; ++i)
      ASSERT_TRUE(onGpu.value()->run().isOk());
    EXPECT_TRUE(onGpu.value()->outputsFinite());
  }
}

TEST_F(CudaCalibrate, EveryCaseBindsAndRunsAtGpuSizes) {
  for (const KernelCase &kase : kernelBenchCases(KernelBenchSizes::gpu())) {
    SCOPED_TRACE(kase.kernel + " on " + kase.workload());
    auto bound = BoundKernelCase::bind(kase, *gpu);
    ASSERT_TRUE(bound.isOk()) << bound.status().toString();
    for (int i = 0; i < 2; ++i) {
      runtime::Status s = bound.value()->run();
      ASSERT_TRUE(s.isOk()) << s.toString();
    }
    runtime::Status synced = gpu->synchronize();
    ASSERT_TRUE(synced.isOk()) << synced.toString();
    EXPECT_TRUE(bound.value()->outputsFinite());
  }
}

TEST_F(CudaCalibrate, MatmulByDtypeMatchesTheCpu) {
  struct Case {
    DType dtype;
    bool tf32;
    double tol; ///< of f32 outputs
  };
  for (const Case &c :
       {Case{DType::kF32, false, 1e-4}, Case{DType::kF32, true, 1e-2},
        Case{DType::kBF16, false, 0}, Case{DType::kF16, false, 0}}) {
    SCOPED_TRACE(std::string(runtime::dtypeName(c.dtype)) +
                 (c.tf32 ? " with TF32" : ""));
    if (c.tf32)
      setenv("DTCC_CUDA_ALLOW_TF32", "1", 1);
    auto onGpu = BoundKernelCase::bind(matmulCase(96, c.dtype), *gpu);
    unsetenv("DTCC_CUDA_ALLOW_TF32");
    auto cpu = BoundKernelCase::bind(matmulCase(96, c.dtype), cpuRegistry());
    ASSERT_TRUE(onGpu.isOk()) << onGpu.status().toString();
    ASSERT_TRUE(cpu.isOk()) << cpu.status().toString();
    ASSERT_TRUE(onGpu.value()->run().isOk());
    ASSERT_TRUE(cpu.value()->run().isOk());
    // 96 products of values in [-1, 1]: relative to max(1, |sum|), the
    // 16-bit outputs' one rounding.
    expectSameOutputs(*cpu.value(), *onGpu.value(), c.tol);
  }
}

// Timed with device.synchronize() as the sync, a bf16 4096^3 product
// (137 GFLOP) takes real GPU time: a rate above any GPU's peak would mean
// the timing measured kernel launches, not the products.
TEST_F(CudaCalibrate, SustainedTimingWaitsForTheGpu) {
  auto bound = BoundKernelCase::bind(matmulCase(4096, DType::kBF16), *gpu);
  ASSERT_TRUE(bound.isOk()) << bound.status().toString();
  auto seconds = timeSustained([&] { return bound.value()->run(); },
                               [&] { return gpu->synchronize(); }, 0.05, 2e-3);
  ASSERT_TRUE(seconds.isOk()) << seconds.status().toString();
  const double rate = 2.0 * 4096.0 * 4096.0 * 4096.0 / seconds.value();
  EXPECT_GT(rate, 1e12) << "slower than 1 TFLOP/s: " << rate;
  EXPECT_LT(rate, 5e15) << "faster than any GPU: " << rate;

  auto launch = BoundKernelCase::bind(launchCase(), *gpu);
  ASSERT_TRUE(launch.isOk()) << launch.status().toString();
  auto perLaunch =
      timeSustained([&] { return launch.value()->run(); },
                    [&] { return gpu->synchronize(); }, 0.02, 2e-3);
  ASSERT_TRUE(perLaunch.isOk()) << perLaunch.status().toString();
  EXPECT_GT(perLaunch.value(), 5e-7); // no GPU launches faster
  EXPECT_LT(perLaunch.value(), 1e-4);
}

} // namespace
} // namespace dtcc::calibrate
