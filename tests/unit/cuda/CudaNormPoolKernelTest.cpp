//===- CudaNormPoolKernelTest.cpp - norm and pool kernels, GPU against CPU -===//
//
// Each case binds one instruction on the CPU device and on the GPU with the
// same inputs and compares every output (the CPU kernels are checked
// against naive f64 loops in CpuNormPoolKernelsTest). GPU cases skip where
// cudaGetDeviceCount reports no GPU; the launch arithmetic is checked
// everywhere.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cuda/CudaDevice.h"
#include "runtime/device/cuda/NormPoolLaunch.h"
#include "runtime/exec/CudaScratch.h"
#include "tests/unit/cuda/ScratchReservation.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

namespace dtcc::runtime {
namespace {

bool haveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

struct Operand {
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<double> values; // inputs only
};

double load(DType d, const uint8_t *p, int64_t i) {
  switch (d) {
  case DType::kBF16: return bf16ToFloat(reinterpret_cast<const uint16_t *>(p)[i]);
  case DType::kF16: return halfToFloat(reinterpret_cast<const uint16_t *>(p)[i]);
  case DType::kF64: return reinterpret_cast<const double *>(p)[i];
  case DType::kI64: return double(reinterpret_cast<const int64_t *>(p)[i]);
  case DType::kI8: return double(reinterpret_cast<const int8_t *>(p)[i]);
  case DType::kU8: return double(p[i]);
  default: return reinterpret_cast<const float *>(p)[i];
  }
}
void store(DType d, uint8_t *p, int64_t i, double v) {
  switch (d) {
  case DType::kBF16: reinterpret_cast<uint16_t *>(p)[i] = floatToBf16(float(v)); break;
  case DType::kF16: reinterpret_cast<uint16_t *>(p)[i] = floatToHalf(float(v)); break;
  case DType::kF64: reinterpret_cast<double *>(p)[i] = v; break;
  case DType::kI64: reinterpret_cast<int64_t *>(p)[i] = int64_t(v); break;
  case DType::kI8: reinterpret_cast<int8_t *>(p)[i] = int8_t(v); break;
  case DType::kU8: p[i] = uint8_t(v); break;
  default: reinterpret_cast<float *>(p)[i] = float(v); break;
  }
}

int64_t numel(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// Runs `kernel` on `device`; returns the outputs as doubles.
std::vector<std::vector<double>> run(Device &device, const std::string &kernel,
                                     const Attrs &attrs,
                                     const std::vector<Operand> &inputs,
                                     const std::vector<Operand> &outputs) {
  KernelContext ctx;
  ctx.kernel = kernel;
  ctx.location = "test";
  ctx.attrs = attrs;
  Reservation scratch(device);
  ctx.scratch = &scratch.plan;
  std::vector<void *> buffers;
  auto make = [&](const Operand &o, bool fill) {
    const int64_t n = numel(o.shape);
    void *p = device.allocate(std::max<int64_t>(1, n * dtypeSize(o.dtype))).value();
    buffers.push_back(p);
    std::vector<uint8_t> host(n * dtypeSize(o.dtype), 0xA5);
    if (fill)
      for (int64_t i = 0; i < n; ++i)
        store(o.dtype, host.data(), i, o.values[i]);
    EXPECT_TRUE(device.copyHostToDevice(p, host.data(), host.size()).isOk());
    return makeView(p, o.dtype, o.shape);
  };
  for (const Operand &o : inputs)
    ctx.inputs.push_back(make(o, true));
  for (const Operand &o : outputs)
    ctx.outputs.push_back(make(o, false));
  std::vector<std::vector<double>> result;
  const KernelFactory *factory = device.kernels().find(kernel);
  EXPECT_NE(factory, nullptr) << kernel;
  if (!factory)
    return result;
  auto fn = (*factory)(ctx);
  EXPECT_TRUE(fn.isOk()) << fn.status().toString();
  if (!fn.isOk())
    return result;
  scratch.reserve();
  Status s = fn.value()();
  EXPECT_TRUE(s.isOk()) << s.toString();
  EXPECT_TRUE(device.synchronize().isOk());
  for (const TensorView &v : ctx.outputs) {
    std::vector<uint8_t> host(v.sizeInBytes());
    EXPECT_TRUE(device.copyDeviceToHost(host.data(), v.data, host.size()).isOk());
    std::vector<double> out(v.numel());
    for (int64_t i = 0; i < v.numel(); ++i)
      out[i] = load(v.dtype, host.data(), i);
    result.push_back(out);
  }
  for (void *p : buffers)
    device.deallocate(p);
  return result;
}

std::vector<double> randomValues(int64_t n, unsigned seed, double lo = -2,
                                 double hi = 2) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (double &x : v)
    x = dist(gen);
  return v;
}

Attrs attrsOf(std::initializer_list<std::pair<const char *, Attrs::Value>> kv) {
  Attrs a;
  for (const auto &[k, v] : kv)
    a.set(k, v);
  return a;
}

double tolerance(DType d) {
  switch (d) {
  case DType::kF64: return 1e-11;
  case DType::kF16: return 4e-3;
  case DType::kBF16: return 2e-2;
  default: return 2e-5;
  }
}

const DType kFloats[] = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16};

class CudaNormPoolKernels : public ::testing::Test {
protected:
  void SetUp() override {
    if (!haveGpu())
      GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount reports none)";
    auto d = createCudaDevice(0);
    ASSERT_TRUE(d.isOk()) << d.status().toString();
    gpu = std::move(d.value());
    cpu = createCpuDevice();
  }
  /// The GPU against the CPU backend, relative to max(scale, |cpu|).
  void compare(const std::string &kernel, const Attrs &attrs,
               const std::vector<Operand> &inputs,
               const std::vector<Operand> &outputs, double tol,
               double scale = 1) {
    auto want = run(*cpu, kernel, attrs, inputs, outputs);
    auto got = run(*gpu, kernel, attrs, inputs, outputs);
    ASSERT_EQ(want.size(), got.size()) << kernel;
    for (size_t o = 0; o < want.size(); ++o)
      for (size_t i = 0; i < want[o].size(); ++i) {
        if (std::isnan(want[o][i]) || std::isinf(want[o][i])) {
          ASSERT_TRUE(std::isnan(want[o][i]) ? std::isnan(got[o][i])
                                             : got[o][i] == want[o][i])
              << kernel << " output " << o << " element " << i;
          continue;
        }
        ASSERT_NEAR(got[o][i], want[o][i],
                    tol * std::max(scale, std::fabs(want[o][i])))
            << kernel << " " << dtypeName(outputs[o].dtype) << " output " << o
            << " element " << i;
      }
  }
  std::unique_ptr<Device> gpu, cpu;
};

TEST_F(CudaNormPoolKernels, BatchNormMatchesCpu) {
  // Channels of a few elements and of many (several slices per channel).
  for (std::vector<int64_t> shape : {std::vector<int64_t>{4, 3, 5},
                                     std::vector<int64_t>{16, 8, 32, 32},
                                     std::vector<int64_t>{2, 2, 70000}})
    for (DType dt : kFloats) {
      const int64_t n = numel(shape), c = shape[1], count = n / c;
      const double tol = tolerance(dt);
      Operand x{dt, shape, randomValues(n, 1, -1, 3)};
      Operand dy{dt, shape, randomValues(n, 2)};
      Operand shift{dt, {c}, randomValues(c, 3, 0, 1)};
      Operand stats{dt, {2, c}, {}};
      compare("batch_norm_stats", Attrs(), {x, shift}, {stats}, tol,
              double(count));
      compare("batch_norm_grad_stats", Attrs(), {x, shift, dy}, {stats}, tol,
              double(count));
      Operand scale{dt, {c}, randomValues(c, 4, 0.5, 1.5)};
      Operand var{dt, {c}, randomValues(c, 5, 0.2, 2)};
      Operand gstats{dt, {2, c}, randomValues(2 * c, 6, -3, 3)};
      compare("batch_norm", attrsOf({{"epsilon", 1e-5}}),
              {x, scale, shift, shift, var}, {{dt, shape, {}}}, tol);
      compare("batch_norm_grad",
              attrsOf({{"epsilon", 1e-5}, {"count", count}}),
              {x, dy, scale, shift, var, gstats}, {{dt, shape, {}}}, tol, 4);
      compare("batch_norm_update",
              attrsOf({{"momentum", 0.9}, {"var_scale", 1.25}}),
              {shift, var, scale, var}, {{dt, {c}, {}}, {dt, {c}, {}}}, tol);
    }
}

TEST_F(CudaNormPoolKernels, GroupNormMatchesCpu) {
  for (auto [shape, perGroup] :
       {std::pair<std::vector<int64_t>, int64_t>{{2, 6, 5}, 3},
        {{4, 32, 16, 16}, 4},
        {{2, 8, 3000}, 1},
        {{3, 4}, 4}})
    for (DType dt : kFloats) {
      const int64_t n = numel(shape), c = shape[1], groups = c / perGroup;
      const double tol = tolerance(dt);
      Operand x{dt, shape, randomValues(n, 7, -1, 3)};
      Operand dy{dt, shape, randomValues(n, 8)};
      Operand scale{dt, {c}, randomValues(c, 9, 0.5, 1.5)};
      Operand bias{dt, {c}, randomValues(c, 10)};
      Attrs a = attrsOf({{"channels_per_group", perGroup}, {"epsilon", 1e-5}});
      compare("group_norm", a, {x, scale, bias},
              {{dt, shape, {}}, {dt, {shape[0], groups}, {}},
               {dt, {shape[0], groups}, {}}},
              tol);
      // The statistics the forward pass would save.
      auto stats = run(*cpu, "group_norm", a, {x, scale, bias},
                       {{dt, shape, {}}, {dt, {shape[0], groups}, {}},
                        {dt, {shape[0], groups}, {}}});
      ASSERT_EQ(stats.size(), 3u);
      Operand mean{dt, {shape[0], groups}, stats[1]};
      Operand rstd{dt, {shape[0], groups}, stats[2]};
      compare("group_norm_grad", attrsOf({{"channels_per_group", perGroup}}),
              {x, scale, mean, rstd, dy},
              {{dt, shape, {}}, {dt, {c}, {}}, {dt, {c}, {}}}, tol,
              double(n / c));
    }
}

struct Window {
  std::vector<int64_t> in, out, kernel, strides, dilations, low, high;
  bool ceil = false, countPad = false;
};

/// max_pool's attributes; avg_pool's add count_include_pad.
Attrs poolAttrs(const Window &w, bool average = false) {
  Attrs a = attrsOf({{"kernel", w.kernel},
                     {"strides", w.strides},
                     {"dilations", w.dilations},
                     {"pad_low", w.low},
                     {"pad_high", w.high}});
  if (w.ceil)
    a.set("ceil_mode", int64_t(1));
  if (average && w.countPad)
    a.set("count_include_pad", int64_t(1));
  return a;
}

TEST_F(CudaNormPoolKernels, PoolingMatchesCpu) {
  const Window windows[] = {
      {{2, 3, 8, 8}, {2, 3, 4, 4}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}},
      {{1, 2, 7, 9}, {1, 2, 4, 5}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, true, true},
      {{2, 2, 11}, {2, 2, 4}, {3}, {3}, {2}, {2}, {1}, false, false},
      {{1, 2, 5, 6, 4}, {1, 2, 3, 5, 2}, {2, 3, 2}, {2, 1, 2}, {1, 1, 1}, {1, 0, 0},
       {0, 1, 1}, false, true},
      {{4, 16, 32, 32}, {4, 16, 16, 16}, {2, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0}},
  };
  for (const Window &w : windows)
    for (DType dt : kFloats) {
      const double tol = tolerance(dt);
      Operand x{dt, w.in, randomValues(numel(w.in), 11, -3, 3)};
      Operand dy{dt, w.out, randomValues(numel(w.out), 12)};
      compare("max_pool", poolAttrs(w), {x}, {{dt, w.out, {}}, {DType::kI64, w.out, {}}},
              0);
      auto pooled = run(*cpu, "max_pool", poolAttrs(w), {x},
                        {{dt, w.out, {}}, {DType::kI64, w.out, {}}});
      ASSERT_EQ(pooled.size(), 2u);
      compare("max_pool_grad", Attrs(), {dy, {DType::kI64, w.out, pooled[1]}},
              {{dt, w.in, {}}}, tol);
      compare("avg_pool", poolAttrs(w, true), {x}, {{dt, w.out, {}}}, tol);
      compare("avg_pool_grad", poolAttrs(w, true), {dy}, {{dt, w.in, {}}}, tol);
    }
  // 8-bit max pooling, with ties.
  const Window &w = windows[0];
  for (DType dt : {DType::kU8, DType::kI8}) {
    std::vector<double> v = randomValues(numel(w.in), 13, 0, 4);
    for (double &e : v)
      e = std::floor(e);
    compare("max_pool", poolAttrs(w), {{dt, w.in, v}},
            {{dt, w.out, {}}, {DType::kI64, w.out, {}}}, 0);
  }
}

TEST_F(CudaNormPoolKernels, MaxPoolGradReportsBadIndex) {
  Operand dy{DType::kF32, {1, 1, 2}, {1, 2}};
  Operand idx{DType::kI64, {1, 1, 2}, {0, 7}};
  KernelContext ctx;
  ctx.kernel = "max_pool_grad";
  ctx.location = "pool_node";
  void *a = gpu->allocate(8).value(), *b = gpu->allocate(16).value(),
       *c = gpu->allocate(16).value();
  std::vector<uint8_t> host(16);
  for (int i = 0; i < 2; ++i)
    store(DType::kF32, host.data(), i, dy.values[i]);
  ASSERT_TRUE(gpu->copyHostToDevice(a, host.data(), 8).isOk());
  for (int i = 0; i < 2; ++i)
    store(DType::kI64, host.data(), i, idx.values[i]);
  ASSERT_TRUE(gpu->copyHostToDevice(b, host.data(), 16).isOk());
  ctx.inputs = {makeView(a, DType::kF32, {1, 1, 2}), makeView(b, DType::kI64, {1, 1, 2})};
  ctx.outputs = {makeView(c, DType::kF32, {1, 1, 4})};
  auto fn = (*gpu->kernels().find("max_pool_grad"))(ctx);
  ASSERT_TRUE(fn.isOk()) << fn.status().toString();
  ASSERT_TRUE(fn.value()().isOk());
  Status s = gpu->synchronize();
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.toString().find("pool_node"), std::string::npos) << s.toString();
  for (void *p : {a, b, c})
    gpu->deallocate(p);
}

// Runs without a GPU: the slicing of the batch-norm sums, which sizes
// their scratch (runtime/exec/CudaScratch.h), and what the norm and pool
// kernels request.
TEST(CudaNormPoolLaunch, BatchNormSlicesFillTheDevice) {
  // Few channels of many elements: about kCudaBatchNormBlocks blocks.
  EXPECT_EQ(cudaBatchNormSlices(2, 1 << 24), kCudaBatchNormBlocks / 2);
  EXPECT_EQ(cudaBatchNormSlices(3, 1 << 24), 342); // ceil(1024 / 3)
  // Many channels: one block each.
  EXPECT_EQ(cudaBatchNormSlices(1024, 1 << 20), 1);
  // No slice shorter than the minimum, and never zero slices.
  EXPECT_EQ(cudaBatchNormSlices(1, 3 * kCudaBatchNormSliceMin), 3);
  EXPECT_EQ(cudaBatchNormSlices(1, 3 * kCudaBatchNormSliceMin + 1), 4);
  EXPECT_EQ(cudaBatchNormSlices(1, 1), 1);
  EXPECT_EQ(cudaBatchNormSlices(0, 0), 1);
  for (int64_t c : {1, 3, 64, 1000})
    for (int64_t per : {int64_t(1), int64_t(5000), int64_t(1) << 22}) {
      int64_t s = cudaBatchNormSlices(c, per);
      EXPECT_GE(s, 1);
      EXPECT_LE(s, std::max<int64_t>(1, (per + kCudaBatchNormSliceMin - 1) /
                                            kCudaBatchNormSliceMin));
      EXPECT_LE(c * s, std::max<int64_t>(c, kCudaBatchNormBlocks + c));
    }
}

TEST(CudaNormPoolLaunch, ScratchOfTheNormAndPoolKernels) {
  auto bytes = [](const std::string &kernel,
                  std::vector<std::pair<DType, std::vector<int64_t>>> in,
                  std::pair<DType, std::vector<int64_t>> out) -> int64_t {
    KernelContext ctx;
    ctx.kernel = kernel;
    for (auto &[d, shape] : in)
      ctx.inputs.push_back(makeView(nullptr, d, shape));
    ctx.outputs.push_back(makeView(nullptr, out.first, out.second));
    auto set = cudaKernelScratch(ctx);
    EXPECT_TRUE(set.isOk()) << set.status().toString();
    int64_t total = 0;
    if (set.isOk())
      for (const ScratchRequest &r : set.value()) {
        EXPECT_EQ(r.use, ScratchUse::kCompute);
        total += r.bytes;
      }
    return total;
  };
  const DType f32 = DType::kF32, f16 = DType::kF16, i64 = DType::kI64;
  // [32, 64, 28, 28]: 64 channels of 25088, 7 slices of 4096 or fewer
  // (16 wanted): 64 x 7 x 2 doubles.
  EXPECT_EQ(bytes("batch_norm_stats", {{f32, {32, 64, 28, 28}}, {f32, {64}}},
                  {f32, {2, 64}}),
            64 * 7 * 2 * 8);
  EXPECT_EQ(bytes("batch_norm_grad_stats",
                  {{f16, {32, 64, 28, 28}}, {f16, {64}}, {f16, {32, 64, 28, 28}}},
                  {f16, {2, 64}}),
            64 * 7 * 2 * 8);
  // Group norm, pooling forward and f32 gradients: none.
  EXPECT_EQ(bytes("group_norm", {{f32, {2, 8, 4}}, {f32, {8}}, {f32, {8}}},
                  {f32, {2, 8, 4}}),
            0);
  EXPECT_EQ(bytes("max_pool", {{f16, {2, 3, 8, 8}}}, {f16, {2, 3, 4, 4}}), 0);
  EXPECT_EQ(bytes("max_pool_grad", {{f32, {2, 3, 4, 4}}, {i64, {2, 3, 4, 4}}},
                  {f32, {2, 3, 8, 8}}),
            0);
  // A half max_pool_grad accumulates into floats of dx's size.
  EXPECT_EQ(bytes("max_pool_grad", {{f16, {2, 3, 4, 4}}, {i64, {2, 3, 4, 4}}},
                  {f16, {2, 3, 8, 8}}),
            2 * 3 * 64 * 4);
  EXPECT_EQ(bytes("avg_pool_grad", {{f16, {2, 3, 4, 4}}}, {f16, {2, 3, 8, 8}}),
            0);
}

} // namespace
} // namespace dtcc::runtime
