//===- CudaGeneratedKernelTest.cpp - Generated kernels on the GPU ---------===//
//
// The kernel modules dtcc-gpu-codegen made at build time of the lit tests'
// hand-written regions (tests/lit/Codegen): anywhere, each parses and has
// PTX (and, with ptxas, a cubin) for sm_80 and sm_90; on a GPU, each region
// is bound as an instruction (bindCudaFusedRegion: its scratch reserved as
// a program's), launched on the device's compute stream, and its outputs
// compared with naive loops in double (skipped without a GPU).
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cuda/CudaDevice.h"
#include "runtime/device/cuda/CudaGeneratedKernels.h"
#include "tests/unit/cuda/ScratchReservation.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>

namespace dtcc::runtime {
namespace {

bool haveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

/// The generated modules' folder: the build's, or $DTCC_GPU_KERNEL_MODULES
/// (a GPU machine that runs a copy of the test binary: scripts/gpu_kit.sh).
std::string modulesDir() {
  const char *env = std::getenv("DTCC_GPU_KERNEL_MODULES");
  return env && *env ? env : DTCC_GPU_KERNEL_MODULES;
}

GpuKernelModule loadModule(const std::string &name) {
  std::ifstream in(modulesDir() + "/" + name + ".gpumod", std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << modulesDir() << "/" << name
                         << ".gpumod";
  std::stringstream bytes;
  bytes << in.rdbuf();
  auto parsed = parseGpuKernelModule(bytes.str());
  EXPECT_TRUE(parsed.isOk()) << name << ": " << parsed.status().toString();
  return parsed.isOk() ? std::move(parsed).value() : GpuKernelModule{};
}

const char *kRegions[] = {"elementwise_broadcast", "bias_gelu", "softmax_row",
                          "adamw_update", "norm_rows"};

TEST(CudaGeneratedKernelModules, HaveBothArchitectures) {
  for (const char *name : kRegions) {
    GpuKernelModule module = loadModule(name);
    ASSERT_EQ(module.images.size(), 2u) << name;
    EXPECT_EQ(module.images[0].chip, "sm_80");
    EXPECT_EQ(module.images[1].chip, "sm_90");
    for (const GpuKernelImage &image : module.images) {
      EXPECT_NE(image.ptx.find(".target " + image.chip), std::string::npos);
      if (DTCC_GPU_KERNELS_HAVE_CUBIN)
        EXPECT_EQ(image.cubin.substr(0, 4), "\x7f" "ELF") << name;
    }
    for (const GpuFusedRegion &region : module.regions)
      EXPECT_TRUE(checkGpuRegion(region).isOk()) << region.symbol;
  }
}

/// Buffers in operand order: the region's inputs then its outputs as the
/// instruction passes them (an in-place buffer is an output only).
using Buffers = std::vector<std::vector<float>>;

class GeneratedOnGpu : public ::testing::Test {
protected:
  void SetUp() override {
    if (!haveGpu())
      GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount reports none)";
    auto d = cuda::CudaDevice::create(0);
    ASSERT_TRUE(d.isOk()) << d.status().toString();
    device = std::move(d).value();
  }

  /// Runs `symbol` of module `name` on `buffers` (shapes: `shapes`; the
  /// first `numInputs` are the instruction's inputs) and returns them.
  Buffers run(const std::string &name, const std::string &symbol,
              const std::vector<std::vector<int64_t>> &shapes,
              size_t numInputs, Buffers buffers) {
    auto loaded = cuda::CudaGeneratedKernels::load(loadModule(name));
    EXPECT_TRUE(loaded.isOk()) << loaded.status().toString();
    if (!loaded.isOk())
      return {};
    std::unique_ptr<cuda::CudaGeneratedKernels> kernels =
        std::move(loaded).value();
    std::printf("%s: loaded %s\n", symbol.c_str(),
                kernels->loadedImage().c_str());
    KernelContext ctx;
    ctx.kernel = "fused";
    ctx.location = symbol;
    std::vector<void *> device_buffers;
    for (size_t i = 0; i < buffers.size(); ++i) {
      auto p = device->allocate(buffers[i].size() * sizeof(float));
      EXPECT_TRUE(p.isOk());
      device_buffers.push_back(p.value());
      EXPECT_TRUE(device
                      ->copyHostToDevice(p.value(), buffers[i].data(),
                                         buffers[i].size() * sizeof(float))
                      .isOk());
      TensorView view = makeView(p.value(), DType::kF32, shapes[i]);
      (i < numInputs ? ctx.inputs : ctx.outputs).push_back(view);
    }
    Reservation reservation(*device);
    ctx.scratch = &reservation.plan;
    ctx.attrs.set("symbol", symbol);
    auto fn = cuda::bindCudaFusedRegion(*device, *kernels, ctx);
    EXPECT_TRUE(fn.isOk()) << fn.status().toString();
    if (!fn.isOk())
      return {};
    reservation.reserve();
    Status ran = fn.value()();
    EXPECT_TRUE(ran.isOk()) << ran.toString();
    Status synced = device->synchronize();
    EXPECT_TRUE(synced.isOk()) << synced.toString();
    for (size_t i = 0; i < buffers.size(); ++i) {
      EXPECT_TRUE(device
                      ->copyDeviceToHost(buffers[i].data(), device_buffers[i],
                                         buffers[i].size() * sizeof(float))
                      .isOk());
      device->deallocate(device_buffers[i]);
    }
    return buffers;
  }

  std::unique_ptr<cuda::CudaDevice> device;
};

Buffers random(const std::vector<std::vector<int64_t>> &shapes, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  Buffers out;
  for (const auto &shape : shapes) {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    out.emplace_back(n);
    for (float &v : out.back())
      v = dist(rng);
  }
  return out;
}

void expectNear(const std::vector<float> &got, const std::vector<double> &want,
                double tolerance, const char *what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tolerance * (1 + std::fabs(want[i])))
        << what << " element " << i;
}

TEST_F(GeneratedOnGpu, ElementwiseChainWithBroadcast) {
  std::vector<std::vector<int64_t>> shapes{{8, 33}, {33}, {8, 33}};
  Buffers in = random(shapes, 1);
  Buffers out = run("elementwise_broadcast", "ew_chain", shapes, 2, in);
  ASSERT_EQ(out.size(), shapes.size());
  std::vector<double> want(8 * 33);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 33; ++j) {
      double x = in[0][i * 33 + j];
      want[i * 33 + j] = std::max(x * in[1][j], 0.0) + x;
    }
  expectNear(out[2], want, 1e-6, "y");
}

TEST_F(GeneratedOnGpu, BiasGelu) {
  std::vector<std::vector<int64_t>> shapes{{2, 5, 37}, {37}, {2, 5, 37}};
  Buffers in = random(shapes, 2);
  Buffers out = run("bias_gelu", "bias_gelu", shapes, 2, in);
  ASSERT_EQ(out.size(), shapes.size());
  std::vector<double> want(370);
  for (int e = 0; e < 370; ++e) {
    double z = double(in[0][e]) + in[1][e % 37];
    want[e] = 0.5 * z * (1.0 + std::erf(z / std::sqrt(2.0)));
  }
  expectNear(out[2], want, 1e-5, "y");
}

TEST_F(GeneratedOnGpu, SoftmaxRowsWithScratch) {
  std::vector<std::vector<int64_t>> shapes{{6, 300}, {6, 300}};
  Buffers in = random(shapes, 3);
  Buffers out = run("softmax_row", "softmax_row", shapes, 1, in);
  ASSERT_EQ(out.size(), shapes.size());
  std::vector<double> want(1800);
  for (int r = 0; r < 6; ++r) {
    double mx = -INFINITY, sum = 0;
    for (int c = 0; c < 300; ++c)
      mx = std::max(mx, double(in[0][r * 300 + c]));
    for (int c = 0; c < 300; ++c)
      sum += std::exp(in[0][r * 300 + c] - mx);
    for (int c = 0; c < 300; ++c)
      want[r * 300 + c] = std::exp(in[0][r * 300 + c] - mx) / sum;
  }
  expectNear(out[1], want, 1e-5, "softmax");
}

TEST_F(GeneratedOnGpu, AdamWUpdateInPlace) {
  // p, g, m, v, lr; p, m and v are updated in place.
  std::vector<std::vector<int64_t>> shapes{{1000}, {1000}, {1000}, {1000}, {}};
  Buffers in = random(shapes, 5);
  for (float &v : in[3])
    v = std::fabs(v);
  in[4][0] = 0.01f;
  Buffers out = run("adamw_update", "adamw_update", shapes, 5, in);
  ASSERT_EQ(out.size(), shapes.size());
  std::vector<double> p(1000), m(1000), v(1000);
  for (int i = 0; i < 1000; ++i) {
    double g = in[1][i];
    m[i] = 0.9 * in[2][i] + 0.1 * g;
    v[i] = 0.999 * in[3][i] + 0.001 * g * g;
    p[i] = in[0][i] - 0.01 * (m[i] / (std::sqrt(v[i]) + 1e-8) + 0.01 * in[0][i]);
  }
  expectNear(out[0], p, 1e-5, "p");
  expectNear(out[2], m, 1e-5, "m");
  expectNear(out[3], v, 1e-5, "v");
}

// Row regions in the parallel row form (tests/lit/Codegen/norm_rows.mlir):
// a block of threads per row, reductions across the block.

TEST_F(GeneratedOnGpu, ResidualLayerNormRows) {
  // a, b, scale, bias; the sum, the norm, mean and rstd per row.
  const int rows = 6, cols = 40;
  std::vector<std::vector<int64_t>> shapes{
      {2, 3, cols}, {2, 3, cols}, {cols}, {cols},
      {2, 3, cols}, {2, 3, cols}, {2, 3}, {2, 3}};
  Buffers in = random(shapes, 6);
  Buffers out = run("norm_rows", "residual_layer_norm", shapes, 4, in);
  ASSERT_EQ(out.size(), shapes.size());
  std::vector<double> x(rows * cols), y(rows * cols), mean(rows), rstd(rows);
  for (int r = 0; r < rows; ++r) {
    double sum = 0, squares = 0;
    for (int c = 0; c < cols; ++c) {
      x[r * cols + c] = double(in[0][r * cols + c]) + in[1][r * cols + c];
      sum += x[r * cols + c];
    }
    mean[r] = sum / cols;
    for (int c = 0; c < cols; ++c)
      squares += (x[r * cols + c] - mean[r]) * (x[r * cols + c] - mean[r]);
    rstd[r] = 1 / std::sqrt(squares / cols + 1e-5);
    for (int c = 0; c < cols; ++c)
      y[r * cols + c] =
          (x[r * cols + c] - mean[r]) * rstd[r] * in[2][c] + in[3][c];
  }
  expectNear(out[4], x, 1e-6, "x");
  expectNear(out[5], y, 1e-5, "y");
  expectNear(out[6], mean, 1e-6, "mean");
  expectNear(out[7], rstd, 1e-5, "rstd");
}

TEST_F(GeneratedOnGpu, ResidualRmsNormRowsOf1024) {
  const int rows = 5, cols = 1024;
  std::vector<std::vector<int64_t>> shapes{
      {rows, cols}, {rows, cols}, {cols}, {rows, cols}, {rows}};
  Buffers in = random(shapes, 7);
  Buffers out = run("norm_rows", "residual_rms_norm", shapes, 3, in);
  ASSERT_EQ(out.size(), shapes.size());
  std::vector<double> y(rows * cols), rstd(rows);
  for (int r = 0; r < rows; ++r) {
    double squares = 0;
    for (int c = 0; c < cols; ++c) {
      double x = double(in[0][r * cols + c]) + in[1][r * cols + c];
      squares += x * x;
    }
    rstd[r] = 1 / std::sqrt(squares / cols + 1e-6);
    for (int c = 0; c < cols; ++c)
      y[r * cols + c] = (double(in[0][r * cols + c]) + in[1][r * cols + c]) *
                        rstd[r] * in[2][c];
  }
  expectNear(out[3], y, 1e-5, "y");
  expectNear(out[4], rstd, 1e-5, "rstd");
}

// A layer norm's dx (its parameter gradients are a kernel of their own)
// with the residual gradient added, over rows of 100 (guarded columns).
TEST_F(GeneratedOnGpu, LayerNormGradResidualRows) {
  const int rows = 6, cols = 100;
  // x, mean, rstd, dy, scale, the residual gradient; the sum.
  std::vector<std::vector<int64_t>> shapes{{rows, cols}, {rows}, {rows},
                                           {rows, cols}, {cols}, {rows, cols},
                                           {rows, cols}};
  Buffers in = random(shapes, 9);
  Buffers out = run("norm_rows", "residual_layer_norm_grad", shapes, 6, in);
  ASSERT_EQ(out.size(), shapes.size());
  std::vector<double> want(rows * cols);
  for (int r = 0; r < rows; ++r) {
    std::vector<double> h(cols), g(cols);
    double sumG = 0, sumGH = 0;
    for (int c = 0; c < cols; ++c) {
      h[c] = (double(in[0][r * cols + c]) - in[1][r]) * in[2][r];
      g[c] = double(in[3][r * cols + c]) * in[4][c];
      sumG += g[c];
      sumGH += g[c] * h[c];
    }
    for (int c = 0; c < cols; ++c)
      want[r * cols + c] =
          in[5][r * cols + c] +
          in[2][r] * (g[c] - sumG / cols - h[c] * (sumGH / cols));
  }
  expectNear(out[6], want, 1e-5, "res + dx");
}

TEST_F(GeneratedOnGpu, MaskedSoftmaxRows) {
  const int rows = 4, cols = 300;
  std::vector<std::vector<int64_t>> shapes{{rows, cols}, {cols}, {rows, cols}};
  Buffers in = random(shapes, 8);
  Buffers out = run("norm_rows", "masked_softmax", shapes, 2, in);
  ASSERT_EQ(out.size(), shapes.size());
  std::vector<double> want(rows * cols);
  for (int r = 0; r < rows; ++r) {
    double mx = -INFINITY, sum = 0;
    auto z = [&](int c) {
      return double(in[0][r * cols + c]) * 0.25 + in[1][c];
    };
    for (int c = 0; c < cols; ++c)
      mx = std::max(mx, z(c));
    for (int c = 0; c < cols; ++c)
      sum += std::exp(z(c) - mx);
    for (int c = 0; c < cols; ++c)
      want[r * cols + c] = std::exp(z(c) - mx) / sum;
  }
  expectNear(out[2], want, 1e-5, "softmax");
}

} // namespace
} // namespace dtcc::runtime
