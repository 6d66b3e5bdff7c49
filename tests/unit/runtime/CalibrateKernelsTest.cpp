//===- CalibrateKernelsTest.cpp - the kernels dtcc calibrate times --------===//
//
// Binds and runs every case of calibrate's kernel list (KernelBench.h)
// through the CPU registry, so that a renamed kernel or a changed attribute
// fails here instead of in a user's `dtcc calibrate`; and through a Device
// (the CPU device here; tests/unit/cuda binds the same list on a GPU).
//
//===----------------------------------------------------------------------===//

#include "tools/dtcc-calibrate/KernelBench.h"

#include "runtime/device/Device.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <sstream>
#include <string>

namespace dtcc::calibrate {
namespace {

const runtime::KernelRegistry &cpuRegistry() { return runtime::cpuKernels(); }

void bindAndRun(const KernelCase &kase, int runs) {
  SCOPED_TRACE(kase.kernel + " on " + kase.workload());
  auto bound = BoundKernelCase::bind(kase, cpuRegistry());
  ASSERT_TRUE(bound.isOk()) << bound.status().toString();
  for (int i = 0; i < runs; ++i) {
    runtime::Status s = bound.value()->run();
    ASSERT_TRUE(s.isOk()) << s.toString();
  }
  // NaN or infinity would time another path than the programs take.
  EXPECT_TRUE(bound.value()->outputsFinite());
}

TEST(CalibrateKernels, EveryCaseBindsAndRunsOnTinyShapes) {
  std::vector<KernelCase> cases = kernelBenchCases(KernelBenchSizes::tiny());
  ASSERT_FALSE(cases.empty());
  // Several runs: in-place updates (adamw, sgd) must stay finite.
  for (const KernelCase &kase : cases)
    bindAndRun(kase, 5);
}

// What `dtcc calibrate --device cuda` times for the attention efficiency,
// here through the CPU registry (f32: the CPU kernels' type): both calls
// bind, and the gradient's given logsumexp keeps every result finite.
TEST(CalibrateKernels, AttentionCasesBindAndRun) {
  std::vector<KernelCase> cases =
      attentionCases(2, 48, 16, runtime::DType::kF32);
  ASSERT_EQ(cases.size(), 2u);
  EXPECT_EQ(cases[0].kernel, "attention");
  EXPECT_EQ(cases[1].kernel, "attention_grad");
  for (const KernelCase &kase : cases)
    bindAndRun(kase, 2);
}

TEST(CalibrateKernels, EveryCaseBindsAtCalibratesSizes) {
  for (const KernelCase &kase : kernelBenchCases()) {
    bindAndRun(kase, 1);
    // 2^18 elements in the largest operand or result of each call.
    int64_t perCall = kase.kernel == "lr_schedule" ? 1 : int64_t(1) << 18;
    EXPECT_EQ(kase.elements(), perCall * int64_t(kase.calls.size()))
        << kase.kernel;
  }
}

TEST(CalibrateKernels, OneCasePerRegisteredNonCollectiveKernel) {
  const std::set<std::string> collectives = {
      "all_reduce", "all_gather", "reduce_scatter", "all_to_all",
      "broadcast",  "send",       "recv",           "wait",
      "axis_index", "shard_slice"};
  std::set<std::string> seen;
  for (const KernelCase &kase : kernelBenchCases()) {
    EXPECT_TRUE(seen.insert(kase.kernel).second) << kase.kernel << " twice";
    EXPECT_NE(cpuRegistry().find(kase.kernel), nullptr) << kase.kernel;
    EXPECT_FALSE(collectives.count(kase.kernel)) << kase.kernel;
    EXPECT_NE(kase.kernel, "matmul") << "matmul is timed by size, not here";
  }
}

// The kernels of the zoo's training programs: gpt, llama and mlp with
// --train, fp32 and --dtype bf16, --mesh tp=2 and dp=2 with ZeRO,
// --micro-batches 2, --optimizer sgd and --grad-clip (from `dtcc compile
// --compile-to dexec`), less the collectives and matmul, plus the fused
// kernels the compiler emits for RMSNorm. A kernel new to those programs
// belongs in calibrate's list.
TEST(CalibrateKernels, CoversTheZooTrainingPrograms) {
  std::istringstream expected(
      "adamw add and broadcast_in_dim cast concat copy cos cross_entropy "
      "cross_entropy_grad div eq exp gather gather_elements ge gelu gelu_grad "
      "gt iota layer_norm layer_norm_grad log lr_schedule lt min mul neg not "
      "pad pow reciprocal reduce_max reduce_sum relu rms_norm rms_norm_grad "
      "scatter_add select sgd silu silu_grad sin slice softmax softmax_grad "
      "sqrt sub sum_squares transpose");
  std::set<std::string> listed;
  for (const KernelCase &kase : kernelBenchCases())
    listed.insert(kase.kernel);
  int checked = 0;
  for (std::string kernel; expected >> kernel; ++checked)
    EXPECT_TRUE(listed.count(kernel)) << kernel << " is not timed";
  EXPECT_EQ(checked, 50);
}

TEST(CalibrateKernels, WorkloadsSayWhatIsTimed) {
  std::map<std::string, KernelCase> byName;
  for (KernelCase &kase : kernelBenchCases())
    byName.emplace(kase.kernel, std::move(kase));
  EXPECT_EQ(byName.at("gelu").workload(),
            "512x512xf32 -> 512x512xf32 {approximate = none}");
  EXPECT_EQ(byName.at("cast").workload(),
            "512x512xf32 -> 512x512xbf16 and 512x512xbf16 -> 512x512xf32");
  EXPECT_EQ(byName.at("cast").elements(), int64_t(2) << 18);
  // Bytes of every operand and result: 4 + 2 per element, both ways.
  EXPECT_EQ(byName.at("cast").bytes(), int64_t(12) << 18);
  EXPECT_EQ(byName.at("sum_squares").workload(),
            "512x512xbf16 -> f32 {dims = [0, 1]}");
  EXPECT_EQ(byName.at("adamw").workload(),
            "4 x 512x512xf32, f32, i64, f32 -> in place {beta1 = 0.9, "
            "beta2 = 0.999, epsilon = 1e-08, weight_decay = 0.01}");
  // adamw's in-place results counted again: 4 tensors read, 3 written.
  EXPECT_EQ(byName.at("adamw").bytes(), (int64_t(7 * 4) << 18) + 4 + 8 + 4);
  EXPECT_EQ(byName.at("softmax").workload(),
            "16x4x64x64xf32 -> 16x4x64x64xf32 {dim = 3}");
  EXPECT_EQ(byName.at("transpose").workload(),
            "16x64x4x64xf32 -> 16x4x64x64xf32 {perm = [0, 2, 1, 3]}");
  EXPECT_EQ(byName.at("gather").workload(),
            "1024x256xf32, 1024xi64 -> 1024x256xf32 {axis = 0}");
  EXPECT_EQ(matmulCase(32).workload(), "2 x 32x32xf32 -> 32x32xf32");
  EXPECT_EQ(matmulCase(32).elements(), 1024);
}

TEST(CalibrateKernels, MatmulBindsAndTimes) {
  auto bound = BoundKernelCase::bind(matmulCase(16), cpuRegistry());
  ASSERT_TRUE(bound.isOk()) << bound.status().toString();
  auto seconds = timeSustained([&] { return bound.value()->run(); }, 1e-3, 3);
  ASSERT_TRUE(seconds.isOk()) << seconds.status().toString();
  EXPECT_GT(seconds.value(), 0);
  EXPECT_LT(seconds.value(), 1e-3); // 8 kFLOP
  EXPECT_TRUE(bound.value()->outputsFinite());
}

TEST(CalibrateKernels, BindingErrorsNameTheKernelAndWorkload) {
  KernelCase unknown = matmulCase(4);
  unknown.kernel = "no_such_kernel";
  auto missing = BoundKernelCase::bind(unknown, cpuRegistry());
  ASSERT_FALSE(missing.isOk());
  EXPECT_NE(missing.status().message().find("no_such_kernel"),
            std::string::npos);

  bool tried = false;
  for (KernelCase &kase : kernelBenchCases(KernelBenchSizes::tiny())) {
    if (kase.kernel != "gelu")
      continue;
    tried = true;
    kase.calls[0].attrs.set("approximate", std::string("bogus"));
    auto bad = BoundKernelCase::bind(kase, cpuRegistry());
    ASSERT_FALSE(bad.isOk());
    EXPECT_NE(bad.status().message().find("binding gelu on 4x8xf32"),
              std::string::npos)
        << bad.status().message();
    EXPECT_NE(bad.status().message().find("bogus"), std::string::npos);
  }
  EXPECT_TRUE(tried);
}

// The device path (operands in a Device's memory, filled through host
// copies) computes exactly what the host path does: same fills, same kernels.
TEST(CalibrateKernels, ADeviceBindingMatchesTheHostBinding) {
  std::unique_ptr<runtime::Device> cpu = runtime::createCpuDevice();
  for (const KernelCase &kase : kernelBenchCases(KernelBenchSizes::tiny())) {
    SCOPED_TRACE(kase.kernel + " on " + kase.workload());
    auto host = BoundKernelCase::bind(kase, cpuRegistry());
    auto onDevice = BoundKernelCase::bind(kase, *cpu);
    ASSERT_TRUE(host.isOk()) << host.status().toString();
    ASSERT_TRUE(onDevice.isOk()) << onDevice.status().toString();
    ASSERT_TRUE(host.value()->run().isOk());
    ASSERT_TRUE(onDevice.value()->run().isOk());
    ASSERT_EQ(host.value()->outputs().size(),
              onDevice.value()->outputs().size());
    for (size_t i = 0; i < host.value()->outputs().size(); ++i) {
      auto a = host.value()->outputBytes(i);
      auto b = onDevice.value()->outputBytes(i);
      ASSERT_TRUE(a.isOk() && b.isOk());
      EXPECT_EQ(a.value(), b.value()) << "output " << i;
    }
    EXPECT_TRUE(onDevice.value()->outputsFinite());
  }
  EXPECT_FALSE(
      BoundKernelCase::bind(kernelBenchCases().front(), cpuRegistry())
          .value()
          ->outputBytes(7)
          .isOk());
}

TEST(CalibrateKernels, GpuSizesGiveEveryWorkload2To24Elements) {
  std::vector<KernelCase> gpu = kernelBenchCases(KernelBenchSizes::gpu());
  std::vector<KernelCase> cpu = kernelBenchCases();
  ASSERT_EQ(gpu.size(), cpu.size());
  for (size_t i = 0; i < gpu.size(); ++i) {
    const KernelCase &kase = gpu[i];
    // The same list in the same order, only larger.
    EXPECT_EQ(kase.kernel, cpu[i].kernel);
    EXPECT_EQ(kase.calls.size(), cpu[i].calls.size());
    int64_t perCall = kase.kernel == "lr_schedule" ? 1 : int64_t(1) << 24;
    EXPECT_EQ(kase.elements(), perCall * int64_t(kase.calls.size()))
        << kase.kernel << " on " << kase.workload();
  }
}

TEST(CalibrateKernels, MatmulByDtypeAndTheLaunchCase) {
  EXPECT_EQ(matmulCase(32, runtime::DType::kBF16).workload(),
            "2 x 32x32xbf16 -> 32x32xbf16");
  EXPECT_EQ(matmulCase(32, runtime::DType::kF16).workload(),
            "2 x 32x32xf16 -> 32x32xf16");
  EXPECT_EQ(launchCase().kernel, "neg");
  EXPECT_EQ(launchCase().workload(), "1xf32 -> 1xf32");
  EXPECT_EQ(launchCase().elements(), 1);
  auto bf16 =
      BoundKernelCase::bind(matmulCase(16, runtime::DType::kBF16), cpuRegistry());
  ASSERT_TRUE(bf16.isOk()) << bf16.status().toString();
  ASSERT_TRUE(bf16.value()->run().isOk());
  EXPECT_TRUE(bf16.value()->outputsFinite());
  auto launch = BoundKernelCase::bind(launchCase(), cpuRegistry());
  ASSERT_TRUE(launch.isOk()) << launch.status().toString();
  ASSERT_TRUE(launch.value()->run().isOk());
  auto value = launch.value()->outputBytes(0);
  ASSERT_TRUE(value.isOk());
  ASSERT_EQ(value.value().size(), 4u);
}

// With a sync (a GPU's): every clock read follows one, batches grow until
// they last batchSeconds, and a failing sync is the result.
TEST(CalibrateKernels, TimeSustainedWithASync) {
  int64_t calls = 0, syncs = 0, pending = 0, maxPending = 0;
  auto t = timeSustained(
      [&] {
        ++calls;
        maxPending = std::max(maxPending, ++pending);
        return runtime::Status::ok();
      },
      [&] {
        ++syncs;
        pending = 0;
        return runtime::Status::ok();
      },
      2e-3, 1e-4, 3);
  ASSERT_TRUE(t.isOk()) << t.status().toString();
  EXPECT_GT(t.value(), 0);
  EXPECT_LT(t.value(), 1e-5);
  EXPECT_GE(syncs, 5); // warm-up, once, sizing, three windows
  EXPECT_GT(maxPending, 1); // calls batched between syncs
  EXPECT_LT(syncs, calls);
  int64_t left = 3;
  auto failing = timeSustained(
      [] { return runtime::Status::ok(); },
      [&] {
        return --left > 0 ? runtime::Status::ok()
                          : runtime::internalError("device lost");
      },
      1e-3, 1e-4, 3);
  ASSERT_FALSE(failing.isOk());
  EXPECT_EQ(failing.status().message(), "device lost");
}

TEST(CalibrateKernels, TimeSustainedIsTheMedianWindowAndPassesErrors) {
  int64_t calls = 0;
  auto t = timeSustained(
      [&] {
        ++calls;
        return runtime::Status::ok();
      },
      1e-3, 3);
  ASSERT_TRUE(t.isOk());
  EXPECT_GT(t.value(), 0);
  EXPECT_LT(t.value(), 1e-5);
  EXPECT_GT(calls, 3);
  int64_t left = 4;
  auto failing = timeSustained(
      [&] {
        return --left > 0 ? runtime::Status::ok()
                          : runtime::invalidArgument("kernel failed");
      },
      1e-3, 3);
  ASSERT_FALSE(failing.isOk());
  EXPECT_EQ(failing.status().message(), "kernel failed");
}

} // namespace
} // namespace dtcc::calibrate
