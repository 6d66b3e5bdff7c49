//===- CudaConvTest.cpp - cuDNN convolutions: host plan and GPU kernels ---===//
//
// The host-side plan (how a convolution maps onto cuDNN's descriptors:
// 1-D as 2-D, asymmetric padding as an explicitly padded input) and the
// dtype table run anywhere. The kernels run on the GPU against the CPU
// backend (oneDNN / im2col, itself checked against a naive loop) for 1-,
// 2- and 3-D windows with strides, dilations, groups, depthwise and
// asymmetric padding; they skip where cudaGetDeviceCount reports no GPU.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/ConvGeometry.h"
#include "runtime/device/cuda/CudaDevice.h"
#include "runtime/exec/CudaScratch.h"
#include "tests/unit/cuda/ScratchReservation.h"
#ifdef DTCC_HAVE_CUDNN
#include "runtime/device/cuda/CudaConv.h"
#endif

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace dtcc::runtime {
namespace {

#ifdef DTCC_HAVE_CUDNN

using cpu::ConvGeometry;

/// A geometry of `spatial` dimensions (the leading unused ones like size 1).
ConvGeometry geometry(int64_t n, int64_t c, int64_t o, int64_t groups,
                      std::vector<int64_t> in, std::vector<int64_t> k,
                      std::vector<int64_t> stride, std::vector<int64_t> dilation,
                      std::vector<int64_t> low, std::vector<int64_t> high) {
  ConvGeometry g;
  g.spatial = int(in.size());
  g.batch = n;
  g.inChannels = c;
  g.outChannels = o;
  g.groups = groups;
  const int first = ConvGeometry::kMaxSpatial - g.spatial;
  for (int d = 0; d < g.spatial; ++d) {
    g.in[first + d] = in[d];
    g.kernel[first + d] = k[d];
    g.stride[first + d] = stride[d];
    g.dilation[first + d] = dilation[d];
    g.padLow[first + d] = low[d];
    g.padHigh[first + d] = high[d];
    g.out[first + d] = g.outputSize(first + d, in[d]);
  }
  return g;
}

TEST(CudnnConvPlan, OneDimensionalWindowsBecomeTwoDimensional) {
  auto plan = cuda::planCudnnConv(
      geometry(2, 4, 6, 2, {10}, {3}, {2}, {2}, {2}, {2}));
  ASSERT_TRUE(plan.isOk()) << plan.status().toString();
  const cuda::CudnnConvPlan &p = plan.value();
  EXPECT_EQ(p.spatial, 2);
  EXPECT_FALSE(p.explicitPad);
  EXPECT_EQ(p.input, (std::vector<int>{2, 4, 1, 10}));
  EXPECT_EQ(p.filter, (std::vector<int>{6, 2, 1, 3}));
  EXPECT_EQ(p.output, (std::vector<int>{2, 6, 1, 5})); // (10+4-5)/2+1
  EXPECT_EQ(p.pad, (std::vector<int>{0, 2}));
  EXPECT_EQ(p.stride, (std::vector<int>{1, 2}));
  EXPECT_EQ(p.dilation, (std::vector<int>{1, 2}));
  EXPECT_EQ(p.groups, 2);
}

TEST(CudnnConvPlan, AsymmetricPaddingPadsTheInputExplicitly) {
  auto plan = cuda::planCudnnConv(
      geometry(1, 3, 4, 1, {7, 5}, {3, 3}, {2, 2}, {1, 1}, {1, 0}, {1, 2}));
  ASSERT_TRUE(plan.isOk()) << plan.status().toString();
  const cuda::CudnnConvPlan &p = plan.value();
  EXPECT_TRUE(p.explicitPad);
  EXPECT_EQ(p.input, (std::vector<int>{1, 3, 9, 7}));
  EXPECT_EQ(p.pad, (std::vector<int>{0, 0}));
  EXPECT_EQ(p.output, (std::vector<int>{1, 4, 4, 3}));
  EXPECT_EQ(p.unpadded, (std::vector<int64_t>{1, 3, 7, 5}));
  EXPECT_EQ(p.padLow, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(p.inputElements(), 1 * 3 * 9 * 7);
}

// The scratch a convolution requests (runtime/exec/CudaScratch.h): the
// capped workspace, and the padded copy the plan says the input needs.
TEST(CudnnConvPlan, ScratchFollowsThePlan) {
  auto request = [](const std::string &kernel, DType dtype,
                    std::vector<int64_t> in0, std::vector<int64_t> in1,
                    std::vector<int64_t> out, std::vector<int64_t> low,
                    std::vector<int64_t> high) {
    KernelContext ctx;
    ctx.kernel = kernel;
    ctx.inputs = {makeView(nullptr, dtype, in0), makeView(nullptr, dtype, in1)};
    ctx.outputs = {makeView(nullptr, dtype, out)};
    ctx.attrs.set("strides", std::vector<int64_t>(low.size(), 1));
    ctx.attrs.set("dilations", std::vector<int64_t>(low.size(), 1));
    ctx.attrs.set("pad_low", low);
    ctx.attrs.set("pad_high", high);
    ctx.attrs.set("groups", int64_t(1));
    auto set = cudaKernelScratch(ctx);
    EXPECT_TRUE(set.isOk()) << set.status().toString();
    std::vector<int64_t> bytes;
    if (set.isOk())
      for (const ScratchRequest &r : set.value())
        bytes.push_back(r.bytes);
    return bytes;
  };
  const int64_t cap = kCudaConvWorkspaceBytes;
  // SAME_UPPER-like 2x2 window on [1, 8, 6, 6]: pads 0 low and 1 high, so
  // cuDNN reads [1, 8, 7, 7] (392 elements) in bf16.
  EXPECT_EQ(request("conv", DType::kBF16, {1, 8, 6, 6}, {8, 8, 2, 2},
                    {1, 8, 6, 6}, {0, 0}, {1, 1}),
            (std::vector<int64_t>{cap, 392 * 2}));
  auto plan = cuda::planCudnnConv(
      geometry(1, 8, 8, 1, {6, 6}, {2, 2}, {1, 1}, {1, 1}, {0, 0}, {1, 1}));
  ASSERT_TRUE(plan.isOk());
  EXPECT_EQ(plan->inputElements(), 392);
  // 3-D, f64, symmetric: the workspace only (conv_input_grad reads dy and
  // the filter, writes dx).
  EXPECT_EQ(request("conv_input_grad", DType::kF64, {2, 5, 3, 3, 3},
                    {5, 4, 3, 3, 3}, {2, 4, 3, 3, 3}, {1, 1, 1}, {1, 1, 1}),
            (std::vector<int64_t>{cap}));
}

TEST(CudnnConvPlan, ThreeDimensionalAndDepthwise) {
  auto plan = cuda::planCudnnConv(geometry(2, 8, 8, 8, {4, 6, 5}, {3, 3, 3},
                                           {1, 2, 1}, {1, 1, 2}, {1, 1, 2},
                                           {1, 1, 2}));
  ASSERT_TRUE(plan.isOk()) << plan.status().toString();
  const cuda::CudnnConvPlan &p = plan.value();
  EXPECT_EQ(p.spatial, 3);
  EXPECT_FALSE(p.explicitPad);
  EXPECT_EQ(p.filter, (std::vector<int>{8, 1, 3, 3, 3}));
  EXPECT_EQ(p.output, (std::vector<int>{2, 8, 4, 3, 5}));
  EXPECT_EQ(p.groups, 8);
}

TEST(CudnnConvPlan, SizesBeyondIntAreRejected) {
  auto plan = cuda::planCudnnConv(
      geometry(int64_t(1) << 32, 1, 1, 1, {4}, {1}, {1}, {1}, {0}, {0}));
  ASSERT_FALSE(plan.isOk());
  EXPECT_NE(plan.status().message().find("exceeds cuDNN's int range"),
            std::string::npos)
      << plan.status().message();
}

TEST(CudnnConvTypes, EveryDType) {
  struct Row {
    DType dtype;
    bool tf32;
    cudnnDataType_t data, compute;
    cudnnMathType_t math;
    bool doubleScale;
  };
  for (const Row &r : {
           Row{DType::kF32, false, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT,
               CUDNN_FMA_MATH, false},
           Row{DType::kF32, true, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT,
               CUDNN_DEFAULT_MATH, false},
           Row{DType::kF64, false, CUDNN_DATA_DOUBLE, CUDNN_DATA_DOUBLE,
               CUDNN_DEFAULT_MATH, true},
           Row{DType::kF16, false, CUDNN_DATA_HALF, CUDNN_DATA_FLOAT,
               CUDNN_TENSOR_OP_MATH, false},
           Row{DType::kBF16, false, CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT,
               CUDNN_TENSOR_OP_MATH, false},
       }) {
    auto t = cuda::cudnnConvTypes(r.dtype, r.tf32);
    ASSERT_TRUE(t.isOk()) << dtypeName(r.dtype);
    EXPECT_EQ(t.value().data, r.data) << dtypeName(r.dtype);
    EXPECT_EQ(t.value().compute, r.compute) << dtypeName(r.dtype);
    EXPECT_EQ(t.value().math, r.math) << dtypeName(r.dtype);
    EXPECT_EQ(t.value().doubleScale, r.doubleScale) << dtypeName(r.dtype);
  }
  for (DType d : {DType::kI32, DType::kI8, DType::kBool, DType::kU64}) {
    auto t = cuda::cudnnConvTypes(d);
    ASSERT_FALSE(t.isOk());
    EXPECT_EQ(t.status().code(), StatusCode::kUnimplemented);
    EXPECT_NE(t.status().message().find(dtypeName(d)), std::string::npos);
  }
}

//===----------------------------------------------------------------------===//
// On the GPU, against the CPU backend
//===----------------------------------------------------------------------===//

bool haveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

struct ConvCase {
  std::string name;
  int64_t n, c, o, groups;
  std::vector<int64_t> in, kernel, stride, dilation, low, high;
};

void PrintTo(const ConvCase &c, std::ostream *os) { *os << c.name; }

/// Binds `kernel` on `device` with host-side `inputs`; returns the output
/// as doubles.
std::vector<double> runOn(Device &device, const std::string &kernel,
                          const Attrs &attrs, DType dtype,
                          const std::vector<std::vector<int64_t>> &shapes,
                          const std::vector<std::vector<double>> &inputs,
                          const std::vector<int64_t> &outShape) {
  KernelContext ctx;
  ctx.kernel = kernel;
  ctx.location = "test";
  ctx.attrs = attrs;
  Reservation scratch(device);
  ctx.scratch = &scratch.plan;
  std::vector<void *> buffers;
  auto numel = [](const std::vector<int64_t> &s) {
    int64_t n = 1;
    for (int64_t d : s)
      n *= d;
    return n;
  };
  auto store = [&](std::vector<uint8_t> &host, int64_t i, double v) {
    switch (dtype) {
    case DType::kF64: reinterpret_cast<double *>(host.data())[i] = v; break;
    case DType::kF16: reinterpret_cast<uint16_t *>(host.data())[i] = floatToHalf(float(v)); break;
    case DType::kBF16: reinterpret_cast<uint16_t *>(host.data())[i] = floatToBf16(float(v)); break;
    default: reinterpret_cast<float *>(host.data())[i] = float(v); break;
    }
  };
  auto load = [&](const std::vector<uint8_t> &host, int64_t i) -> double {
    switch (dtype) {
    case DType::kF64: return reinterpret_cast<const double *>(host.data())[i];
    case DType::kF16: return halfToFloat(reinterpret_cast<const uint16_t *>(host.data())[i]);
    case DType::kBF16: return bf16ToFloat(reinterpret_cast<const uint16_t *>(host.data())[i]);
    default: return reinterpret_cast<const float *>(host.data())[i];
    }
  };
  for (size_t k = 0; k < shapes.size(); ++k) {
    int64_t n = numel(shapes[k]);
    void *p = device.allocate(n * dtypeSize(dtype)).value();
    buffers.push_back(p);
    std::vector<uint8_t> host(n * dtypeSize(dtype));
    for (int64_t i = 0; i < n; ++i)
      store(host, i, inputs[k][i]);
    EXPECT_TRUE(device.copyHostToDevice(p, host.data(), host.size()).isOk());
    ctx.inputs.push_back(makeView(p, dtype, shapes[k]));
  }
  const int64_t outN = numel(outShape);
  void *out = device.allocate(outN * dtypeSize(dtype)).value();
  buffers.push_back(out);
  ctx.outputs.push_back(makeView(out, dtype, outShape));
  std::vector<double> result;
  auto fn = (*device.kernels().find(kernel))(ctx);
  EXPECT_TRUE(fn.isOk()) << fn.status().toString();
  if (fn.isOk())
    scratch.reserve();
  if (fn.isOk()) {
    // Twice: nothing may accumulate across steps (the padded copy of an
    // asymmetric window lies in compute scratch: re-zeroed every run).
    for (int i = 0; i < 2; ++i) {
      Status s = fn.value()();
      EXPECT_TRUE(s.isOk()) << s.toString();
    }
    EXPECT_TRUE(device.synchronize().isOk());
    std::vector<uint8_t> host(outN * dtypeSize(dtype));
    EXPECT_TRUE(device.copyDeviceToHost(host.data(), out, host.size()).isOk());
    for (int64_t i = 0; i < outN; ++i)
      result.push_back(load(host, i));
  }
  for (void *p : buffers)
    device.deallocate(p);
  return result;
}

class CudaConvKernels : public ::testing::TestWithParam<ConvCase> {
protected:
  void SetUp() override {
    if (!haveGpu())
      GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount reports none)";
    auto d = createCudaDevice(0);
    ASSERT_TRUE(d.isOk()) << d.status().toString();
    gpu = std::move(d.value());
    cpu = createCpuDevice();
  }
  std::unique_ptr<Device> gpu, cpu;
};

TEST_P(CudaConvKernels, MatchCpu) {
  const ConvCase &c = GetParam();
  ConvGeometry g = geometry(c.n, c.c, c.o, c.groups, c.in, c.kernel, c.stride,
                            c.dilation, c.low, c.high);
  Attrs attrs;
  attrs.set("strides", c.stride);
  attrs.set("dilations", c.dilation);
  attrs.set("pad_low", c.low);
  attrs.set("pad_high", c.high);
  attrs.set("groups", c.groups);
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> dist(-1, 1);
  auto random = [&](const std::vector<int64_t> &shape) {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    std::vector<double> v(n);
    for (double &x : v)
      x = dist(rng);
    return v;
  };
  auto x = g.inputShape(), w = g.filterShape(), y = g.outputShape();
  auto xv = random(x), wv = random(w), yv = random(y);
  struct Kernel {
    const char *name;
    std::vector<std::vector<int64_t>> shapes;
    std::vector<std::vector<double>> values;
    std::vector<int64_t> out;
  };
  for (const Kernel &k : {Kernel{"conv", {x, w}, {xv, wv}, y},
                          Kernel{"conv_input_grad", {y, w}, {yv, wv}, x},
                          Kernel{"conv_filter_grad", {x, y}, {xv, yv}, w}})
    for (auto [dtype, tol] : {std::pair{DType::kF32, 1e-4},
                              std::pair{DType::kF64, 1e-10},
                              std::pair{DType::kF16, 1e-2},
                              std::pair{DType::kBF16, 4e-2}}) {
      auto want = runOn(*cpu, k.name, attrs, dtype, k.shapes, k.values, k.out);
      auto got = runOn(*gpu, k.name, attrs, dtype, k.shapes, k.values, k.out);
      ASSERT_EQ(got.size(), want.size()) << k.name;
      double scale = 1;
      for (double v : want)
        scale = std::max(scale, std::fabs(v));
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[i], want[i], tol * scale)
            << k.name << " " << dtypeName(dtype) << " element " << i;
    }
}

INSTANTIATE_TEST_SUITE_P(
    Configurations, CudaConvKernels,
    ::testing::Values(
        ConvCase{"conv1d_strided_dilated", 2, 3, 4, 1, {12}, {3}, {2}, {2}, {1}, {1}},
        ConvCase{"conv1d_asymmetric_leftover", 2, 2, 3, 1, {10}, {4}, {3}, {1}, {1}, {2}},
        ConvCase{"conv2d_groups", 2, 4, 6, 2, {9, 7}, {3, 3}, {1, 2}, {1, 1}, {1, 1}, {1, 1}},
        ConvCase{"conv2d_asymmetric", 2, 3, 5, 1, {7, 9}, {3, 2}, {2, 1}, {1, 2}, {1, 0}, {0, 1}},
        ConvCase{"conv2d_depthwise", 2, 8, 8, 8, {16, 16}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}},
        ConvCase{"conv2d_patch_embedding", 2, 3, 16, 1, {32, 32}, {8, 8}, {8, 8}, {1, 1}, {0, 0}, {0, 0}},
        ConvCase{"conv3d", 1, 2, 3, 1, {5, 4, 6}, {3, 2, 3}, {1, 2, 2}, {1, 1, 2}, {1, 0, 1}, {0, 1, 2}}),
    [](const ::testing::TestParamInfo<ConvCase> &info) { return info.param.name; });

#else

TEST(CudnnConv, NotBuilt) { GTEST_SKIP() << "built without cuDNN"; }

#endif // DTCC_HAVE_CUDNN

} // namespace
} // namespace dtcc::runtime
