//===- CudaTensorOpKernelTest.cpp - resize, pad modes, scatters on the GPU ===//
//
// The CUDA kernels of GraphIndexingOps.td against the CPU backend on the same
// inputs: resize and pad (and their adjoints, which sum in the CPU kernel's
// order, in double), gather_nd, scatter_nd and scatter_elements with
// duplicate indices (applied in index order, so equal to the CPU's
// sequential loop) and top_k with ties. A scatter run twice gives the same
// bits. Skipped (GTEST_SKIP) where cudaGetDeviceCount reports no GPU.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cuda/CudaDevice.h"
#include "tests/unit/cuda/ScratchReservation.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

namespace dtcc::runtime {
namespace {

bool haveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

struct Operand {
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<double> values; // inputs: the values; outputs: ignored
};

int64_t numelOf(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

double load(DType d, const uint8_t *p, int64_t i) {
  switch (d) {
  case DType::kBF16: return bf16ToFloat(reinterpret_cast<const uint16_t *>(p)[i]);
  case DType::kF16: return halfToFloat(reinterpret_cast<const uint16_t *>(p)[i]);
  case DType::kF64: return reinterpret_cast<const double *>(p)[i];
  case DType::kI64: return double(reinterpret_cast<const int64_t *>(p)[i]);
  case DType::kI32: return double(reinterpret_cast<const int32_t *>(p)[i]);
  case DType::kU8: return double(p[i]);
  case DType::kBool: return p[i] ? 1 : 0;
  default: return reinterpret_cast<const float *>(p)[i];
  }
}
void store(DType d, uint8_t *p, int64_t i, double v) {
  switch (d) {
  case DType::kBF16: reinterpret_cast<uint16_t *>(p)[i] = floatToBf16(float(v)); break;
  case DType::kF16: reinterpret_cast<uint16_t *>(p)[i] = floatToHalf(float(v)); break;
  case DType::kF64: reinterpret_cast<double *>(p)[i] = v; break;
  case DType::kI64: reinterpret_cast<int64_t *>(p)[i] = int64_t(v); break;
  case DType::kI32: reinterpret_cast<int32_t *>(p)[i] = int32_t(v); break;
  case DType::kU8: p[i] = uint8_t(v); break;
  case DType::kBool: p[i] = v != 0; break;
  default: reinterpret_cast<float *>(p)[i] = float(v); break;
  }
}

/// Runs `kernel` on `device` `times` times; returns the outputs' bytes.
std::vector<std::vector<uint8_t>> run(Device &device, const std::string &kernel,
                                      const Attrs &attrs,
                                      const std::vector<Operand> &inputs,
                                      const std::vector<Operand> &outputs,
                                      int times = 1) {
  KernelContext ctx;
  ctx.kernel = kernel;
  ctx.location = "test";
  ctx.attrs = attrs;
  Reservation scratch(device);
  ctx.scratch = &scratch.plan;
  std::vector<void *> buffers;
  auto make = [&](const Operand &o, bool fill) {
    int64_t n = numelOf(o.shape);
    void *p = device.allocate(std::max<int64_t>(8, n * dtypeSize(o.dtype))).value();
    buffers.push_back(p);
    if (fill) {
      std::vector<uint8_t> host(n * dtypeSize(o.dtype));
      for (int64_t i = 0; i < n; ++i)
        store(o.dtype, host.data(), i, o.values[i]);
      EXPECT_TRUE(device.copyHostToDevice(p, host.data(), host.size()).isOk());
    }
    return makeView(p, o.dtype, o.shape);
  };
  for (const Operand &o : inputs)
    ctx.inputs.push_back(make(o, true));
  for (const Operand &o : outputs)
    ctx.outputs.push_back(make(o, false));
  auto fn = (*device.kernels().find(kernel))(ctx);
  EXPECT_TRUE(fn.isOk()) << fn.status().toString();
  std::vector<std::vector<uint8_t>> result;
  if (!fn.isOk())
    return result;
  scratch.reserve();
  for (int t = 0; t < times; ++t) {
    Status s = fn.value()();
    EXPECT_TRUE(s.isOk()) << s.toString();
    EXPECT_TRUE(device.synchronize().isOk());
    for (const TensorView &v : ctx.outputs) {
      std::vector<uint8_t> host(v.sizeInBytes());
      EXPECT_TRUE(
          device.copyDeviceToHost(host.data(), v.data, host.size()).isOk());
      result.push_back(host);
    }
  }
  for (void *p : buffers)
    device.deallocate(p);
  return result;
}

std::vector<double> iota(int64_t n, double scale = 1, double offset = 0) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i)
    v[i] = std::sin(double(i) * 1.7 + offset) * scale;
  return v;
}

class CudaTensorOpKernels : public ::testing::Test {
protected:
  void SetUp() override {
    if (!haveGpu())
      GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount reports none)";
    auto d = createCudaDevice(0);
    ASSERT_TRUE(d.isOk()) << d.status().toString();
    gpu = std::move(d.value());
    cpu = createCpuDevice();
  }
  /// Compares the GPU with the CPU backend, relative to max(1, |cpu|).
  void compare(const std::string &kernel, const Attrs &attrs,
               const std::vector<Operand> &inputs,
               const std::vector<Operand> &outputs, double tol) {
    auto want = run(*cpu, kernel, attrs, inputs, outputs);
    auto got = run(*gpu, kernel, attrs, inputs, outputs);
    ASSERT_EQ(want.size(), got.size()) << kernel;
    for (size_t o = 0; o < want.size(); ++o) {
      DType dt = outputs[o].dtype;
      for (int64_t i = 0; i < numelOf(outputs[o].shape); ++i) {
        double w = load(dt, want[o].data(), i), g = load(dt, got[o].data(), i);
        if (std::isnan(w)) {
          ASSERT_TRUE(std::isnan(g)) << kernel << " element " << i;
          continue;
        }
        ASSERT_NEAR(g, w, tol * std::max(1.0, std::fabs(w)))
            << kernel << " output " << o << " element " << i;
      }
    }
  }
  std::unique_ptr<Device> gpu, cpu;
};

Attrs resizeAttrs(const std::string &mode, const std::string &coordinates,
                  std::vector<double> scales) {
  Attrs a;
  a.set("mode", mode);
  a.set("coordinate_transformation_mode", coordinates);
  a.set("scales", std::move(scales));
  return a;
}

TEST_F(CudaTensorOpKernels, ResizeAndItsAdjoint) {
  for (const char *mode : {"nearest", "linear", "cubic"})
    for (const char *coord : {"half_pixel", "align_corners", "asymmetric"}) {
      SCOPED_TRACE(std::string(mode) + " " + coord);
      Attrs a = resizeAttrs(mode, coord, {1.0, 2.0, 0.6});
      compare("resize", a, {{DType::kF32, {2, 5, 5}, iota(50)}},
              {{DType::kF32, {2, 10, 3}, {}}}, 1e-6);
      compare("resize", a, {{DType::kBF16, {2, 5, 5}, iota(50)}},
              {{DType::kBF16, {2, 10, 3}, {}}}, 0);
      compare("resize_grad", a, {{DType::kF32, {2, 10, 3}, iota(60)}},
              {{DType::kF32, {2, 5, 5}, {}}}, 1e-6);
    }
  Attrs a = resizeAttrs("nearest", "half_pixel", {3.0, 1.5});
  compare("resize", a, {{DType::kU8, {2, 4}, {1, 2, 3, 4, 5, 6, 7, 8}}},
          {{DType::kU8, {6, 6}, {}}}, 0);
  Attrs crop = resizeAttrs("linear", "tf_crop_and_resize", {1.0, 1.0});
  crop.set("roi", std::vector<double>{0.0, 0.3, 1.0, 1.4});
  crop.set("extrapolation_value", 7.0);
  compare("resize", crop, {{DType::kF32, {3, 5}, iota(15)}},
          {{DType::kF32, {3, 5}, {}}}, 1e-6);
}

TEST_F(CudaTensorOpKernels, PadModesAndAdjoint) {
  for (const char *mode : {"edge", "reflect", "wrap"}) {
    SCOPED_TRACE(mode);
    Attrs p;
    p.set("low", std::vector<int64_t>{2, -1});
    p.set("high", std::vector<int64_t>{5, 4});
    p.set("mode", std::string(mode));
    compare("pad", p,
            {{DType::kBF16, {3, 4}, iota(12)}, {DType::kBF16, {}, {0}}},
            {{DType::kBF16, {10, 7}, {}}}, 0);
    compare("pad_grad", p, {{DType::kF32, {10, 7}, iota(70)}},
            {{DType::kF32, {3, 4}, {}}}, 1e-6);
  }
}

TEST_F(CudaTensorOpKernels, GatherNd) {
  Attrs a;
  a.set("batch_dims", int64_t(1));
  compare("gather_nd", a,
          {{DType::kF16, {2, 3, 4}, iota(24)},
           {DType::kI64, {2, 5, 1}, {0, 2, -1, 1, 0, 2, 2, 1, -3, 0}}},
          {{DType::kF16, {2, 5, 4}, {}}}, 0);
}

TEST_F(CudaTensorOpKernels, ScattersApplyInIndexOrder) {
  // Eight updates onto three rows, with repeats: every reduction's result
  // depends on the order for "none" and on rounding for the others.
  std::vector<double> idx = {2, 0, -1, 1, 2, 0, 2, 1};
  for (const char *r : {"none", "add", "mul", "max", "min"}) {
    SCOPED_TRACE(r);
    Attrs a;
    a.set("reduction", std::string(r));
    compare("scatter_nd", a,
            {{DType::kF32, {3, 5}, iota(15)},
             {DType::kI64, {8, 1}, idx},
             {DType::kF32, {8, 5}, iota(40, 1.5, 0.3)}},
            {{DType::kF32, {3, 5}, {}}}, 0);
    Attrs e = a;
    e.set("axis", int64_t(1));
    std::vector<double> eidx(3 * 6);
    for (int i = 0; i < 18; ++i)
      eidx[i] = (i * 7) % 5 - 2;
    compare("scatter_elements", e,
            {{DType::kBF16, {3, 5}, iota(15)},
             {DType::kI32, {3, 6}, eidx},
             {DType::kBF16, {3, 6}, iota(18, 2.0)}},
            {{DType::kBF16, {3, 5}, {}}}, 0);
  }
  // The same bits on every run.
  Attrs add;
  add.set("reduction", std::string("add"));
  std::vector<double> many(4096);
  for (int i = 0; i < 4096; ++i)
    many[i] = (i * 31) % 3;
  auto runs = run(*gpu, "scatter_nd", add,
                  {{DType::kF32, {3, 8}, iota(24)},
                   {DType::kI64, {4096, 1}, many},
                   {DType::kF32, {4096, 8}, iota(4096 * 8, 3.0)}},
                  {{DType::kF32, {3, 8}, {}}}, 5);
  ASSERT_EQ(runs.size(), 5u);
  for (size_t t = 1; t < runs.size(); ++t)
    EXPECT_EQ(runs[t], runs[0]) << "run " << t;
}

TEST_F(CudaTensorOpKernels, TopKWithTies) {
  std::vector<double> x(4 * 9);
  for (int i = 0; i < 36; ++i)
    x[i] = (i * 5) % 4; // few values: many ties
  for (bool largest : {true, false}) {
    Attrs a;
    a.set("k", int64_t(4));
    a.set("axis", int64_t(1));
    a.set("largest", int64_t(largest));
    compare("top_k", a, {{DType::kF32, {4, 9}, x}},
            {{DType::kF32, {4, 4}, {}}, {DType::kI64, {4, 4}, {}}}, 0);
  }
}

} // namespace
} // namespace dtcc::runtime
