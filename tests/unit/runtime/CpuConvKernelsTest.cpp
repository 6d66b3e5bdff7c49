//===- CpuConvKernelsTest.cpp - convolution kernels against a naive loop --===//
//
// conv, conv_input_grad and conv_filter_grad against one naive f64 loop over
// the definition (GraphConvOps.td), for 1-, 2- and 3-D windows with
// strides, dilations, groups (depthwise too), asymmetric padding, leftover
// input and non-square shapes: f32 through oneDNN and through im2col +
// sgemm, f64 through im2col + dgemm, f16/bf16 through f32.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/runtime/CpuKernelTestUtils.h"

#include <cstdlib>

using namespace dtcc::runtime;
using namespace dtcc::runtime::test;

namespace {

struct ConvCase {
  std::string name;
  int64_t batch, channels, outChannels, groups;
  std::vector<int64_t> in, kernel, stride, dilation, low, high;

  size_t spatial() const { return in.size(); }
  int64_t out(size_t d) const {
    int64_t extent = (kernel[d] - 1) * dilation[d] + 1;
    return (in[d] + low[d] + high[d] - extent) / stride[d] + 1;
  }
  std::vector<int64_t> inputShape() const {
    std::vector<int64_t> s = {batch, channels};
    s.insert(s.end(), in.begin(), in.end());
    return s;
  }
  std::vector<int64_t> filterShape() const {
    std::vector<int64_t> s = {outChannels, channels / groups};
    s.insert(s.end(), kernel.begin(), kernel.end());
    return s;
  }
  std::vector<int64_t> outputShape() const {
    std::vector<int64_t> s = {batch, outChannels};
    for (size_t d = 0; d < spatial(); ++d)
      s.push_back(out(d));
    return s;
  }
  Attrs attrs() const {
    Attrs a;
    a.set("strides", stride);
    a.set("dilations", dilation);
    a.set("pad_low", low);
    a.set("pad_high", high);
    a.set("groups", groups);
    return a;
  }
};

void PrintTo(const ConvCase &c, std::ostream *os) { *os << c.name; }

/// The three results of the definition, in f64: y = conv(x, w), dx =
/// conv_input_grad(dy, w), dw = conv_filter_grad(x, dy).
struct Reference {
  std::vector<double> y, dx, dw;
};

Reference reference(const ConvCase &c, const Tensor &x, const Tensor &w,
                    const Tensor &dy) {
  Reference r;
  r.y.assign(numelOf(c.outputShape()), 0.0);
  r.dx.assign(numelOf(c.inputShape()), 0.0);
  r.dw.assign(numelOf(c.filterShape()), 0.0);
  const int64_t cg = c.channels / c.groups, og = c.outChannels / c.groups;
  const std::vector<int64_t> outShape = c.outputShape();
  const std::vector<int64_t> outSpatial(outShape.begin() + 2, outShape.end());
  for (int64_t n = 0; n < c.batch; ++n)
    for (int64_t o = 0; o < c.outChannels; ++o)
      forEachIndex(outSpatial, [&](const std::vector<int64_t> &yPos) {
        std::vector<int64_t> yIdx = {n, o};
        yIdx.insert(yIdx.end(), yPos.begin(), yPos.end());
        const int64_t yi = linearIndex(yIdx, c.outputShape());
        const int64_t g = o / og;
        for (int64_t ci = 0; ci < cg; ++ci)
          forEachIndex(c.kernel, [&](const std::vector<int64_t> &k) {
            std::vector<int64_t> xIdx = {n, g * cg + ci};
            for (size_t d = 0; d < c.spatial(); ++d) {
              int64_t p = yPos[d] * c.stride[d] + k[d] * c.dilation[d] - c.low[d];
              if (p < 0 || p >= c.in[d])
                return;
              xIdx.push_back(p);
            }
            std::vector<int64_t> wIdx = {o, ci};
            wIdx.insert(wIdx.end(), k.begin(), k.end());
            const int64_t xi = linearIndex(xIdx, c.inputShape());
            const int64_t wi = linearIndex(wIdx, c.filterShape());
            r.y[yi] += w.get(wi) * x.get(xi);
            r.dx[xi] += dy.get(yi) * w.get(wi);
            r.dw[wi] += dy.get(yi) * x.get(xi);
          });
      });
  return r;
}

std::vector<ConvCase> convCases() {
  // name, N, C, O, groups, in, kernel, stride, dilation, pad_low, pad_high
  return {
      {"conv1d", 2, 3, 4, 1, {11}, {3}, {1}, {1}, {0}, {0}},
      {"conv1d_strided_dilated_padded", 2, 3, 4, 1, {12}, {3}, {2}, {2}, {1}, {2}},
      {"conv1d_leftover", 1, 2, 3, 1, {10}, {3}, {3}, {1}, {0}, {0}},
      {"conv1d_kernel_wider_than_input", 2, 2, 2, 1, {2}, {5}, {1}, {1}, {2}, {2}},
      {"conv2d_non_square_asymmetric", 2, 3, 5, 1, {7, 9}, {3, 2}, {2, 1}, {1, 2}, {1, 0}, {0, 1}},
      {"conv2d_groups", 2, 4, 6, 2, {6, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}},
      {"conv2d_depthwise_strided", 2, 4, 4, 4, {8, 5}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}},
      {"conv2d_depthwise_multiplier_dilated", 1, 3, 6, 3, {5, 5}, {2, 2}, {1, 1}, {2, 2}, {0, 1}, {1, 0}},
      {"conv2d_1x1", 2, 6, 4, 1, {5, 3}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}},
      {"conv2d_1x1_grouped", 2, 6, 4, 2, {3, 4}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}},
      {"conv2d_1x1_strided_leftover", 1, 2, 3, 1, {6, 5}, {1, 1}, {2, 2}, {1, 1}, {0, 0}, {0, 0}},
      {"conv2d_larger", 2, 8, 16, 1, {16, 16}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}},
      {"conv2d_patch_embedding", 2, 3, 8, 1, {16, 16}, {4, 4}, {4, 4}, {1, 1}, {0, 0}, {0, 0}},
      {"conv3d", 1, 2, 3, 1, {5, 4, 6}, {3, 2, 3}, {1, 2, 2}, {1, 1, 2}, {1, 0, 1}, {0, 1, 2}},
      {"conv3d_groups_strided", 2, 4, 2, 2, {4, 4, 5}, {2, 2, 2}, {2, 2, 2}, {1, 1, 1}, {0, 0, 0}, {0, 0, 1}},
  };
}

class CpuConvKernels : public ::testing::TestWithParam<ConvCase> {};

struct Variant {
  DType dtype;
  bool im2col; ///< f32 only: DTCC_CPU_CONV=im2col
  double rtol, atol; ///< atol relative to the largest reference magnitude
};

/// Runs the three kernels on `c` in `v` and compares them with the f64
/// reference of the same (rounded) operands.
void checkVariant(const ConvCase &c, const Variant &v) {
  SCOPED_TRACE(std::string(dtypeName(v.dtype)) + (v.im2col ? " im2col" : ""));
  if (v.im2col)
    setenv("DTCC_CPU_CONV", "im2col", 1);
  else
    unsetenv("DTCC_CPU_CONV");
  std::mt19937 rng(17);
  Tensor x = randomTensor(rng, v.dtype, c.inputShape(), -1, 1);
  Tensor w = randomTensor(rng, v.dtype, c.filterShape(), -1, 1);
  Tensor dy = randomTensor(rng, v.dtype, c.outputShape(), -1, 1);
  Reference ref = reference(c, x, w, dy);
  auto compare = [&](const Tensor &got, const std::vector<double> &want,
                     const char *what) {
    double scale = 0;
    for (double e : want)
      scale = std::max(scale, std::abs(e));
    Tensor expected(v.dtype, got.shape);
    for (int64_t i = 0; i < expected.numel(); ++i)
      expected.set(i, want[i]);
    EXPECT_TRUE(tensorsClose(got, expected, v.rtol, v.atol * scale)) << what;
  };
  // A second run of each bound kernel must give the same result (nothing
  // accumulates across steps, e.g. the filter gradient over images).
  auto runTwice = [&](const std::string &name, std::vector<TensorView> inputs,
                      Tensor &out) {
    KernelContext ctx;
    ctx.kernel = name;
    ctx.location = "node_" + name;
    ctx.inputs = std::move(inputs);
    ctx.outputs = {out.view()};
    ctx.attrs = c.attrs();
    auto bound = (*cpuRegistry().find(name))(ctx);
    ASSERT_TRUE(bound.isOk()) << bound.status().toString();
    for (int i = 0; i < 2; ++i) {
      Status s = bound.value()();
      ASSERT_TRUE(s.isOk()) << s.toString();
    }
  };
  Tensor y = Tensor::output(v.dtype, c.outputShape());
  runTwice("conv", {x.view(), w.view()}, y);
  compare(y, ref.y, "conv");
  Tensor dx = Tensor::output(v.dtype, c.inputShape());
  runTwice("conv_input_grad", {dy.view(), w.view()}, dx);
  compare(dx, ref.dx, "conv_input_grad");
  Tensor dw = Tensor::output(v.dtype, c.filterShape());
  runTwice("conv_filter_grad", {x.view(), dy.view()}, dw);
  compare(dw, ref.dw, "conv_filter_grad");
  unsetenv("DTCC_CPU_CONV");
}

TEST_P(CpuConvKernels, MatchesNaiveLoop) {
  const ConvCase &c = GetParam();
  for (const Variant &v : {Variant{DType::kF64, false, 1e-12, 1e-13},
                           Variant{DType::kF32, false, 1e-5, 1e-5},
                           Variant{DType::kF32, true, 1e-5, 1e-5},
                           Variant{DType::kF16, false, 2e-3, 2e-3},
                           Variant{DType::kBF16, false, 1.6e-2, 1e-2}})
    checkVariant(c, v);
}

INSTANTIATE_TEST_SUITE_P(Configurations, CpuConvKernels,
                         ::testing::ValuesIn(convCases()),
                         [](const ::testing::TestParamInfo<ConvCase> &info) {
                           return info.param.name;
                         });

/// Binds `name` with the case's window on the given shapes; returns the
/// status of binding.
Status bindOnly(const std::string &name, DType dtype,
                const std::vector<int64_t> &a, const std::vector<int64_t> &b,
                const std::vector<int64_t> &out, const Attrs &attrs) {
  Tensor ta(dtype, a), tb(dtype, b), to(dtype, out);
  return runKernel(name, {ta.view(), tb.view()}, {to.view()}, attrs);
}

TEST(CpuConvKernelErrors, SayWhatWasExpected) {
  ConvCase c{"", 2, 4, 6, 2, {6, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}};
  Status s = bindOnly("conv", DType::kF32, c.inputShape(), c.filterShape(),
                      {2, 6, 5, 6}, c.attrs());
  EXPECT_EQ(s.message(), "conv at 'node_conv': expected output 0 of shape "
                         "[2, 6, 6, 6], got [2, 6, 5, 6]");
  Attrs bad = c.attrs();
  bad.set("groups", int64_t(3));
  s = bindOnly("conv", DType::kF32, c.inputShape(), c.filterShape(),
               c.outputShape(), bad);
  EXPECT_EQ(s.message(), "conv at 'node_conv': expected groups (3) >= 1 "
                         "dividing the input channels (4) and the output "
                         "channels (6)");
  s = bindOnly("conv_filter_grad", DType::kF32, c.inputShape(),
               c.outputShape(), {6, 4, 3, 3}, c.attrs());
  EXPECT_EQ(s.message(), "conv_filter_grad at 'node_conv_filter_grad': "
                         "expected output 0 dimension 1 to be C / groups = 2, "
                         "got tensor<6x4x3x3xf32>");
  Attrs shortStrides = c.attrs();
  shortStrides.set("strides", std::vector<int64_t>{1});
  s = bindOnly("conv_input_grad", DType::kF32, c.outputShape(),
               c.filterShape(), c.inputShape(), shortStrides);
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("strides"), std::string::npos) << s.message();
  s = bindOnly("conv", DType::kI32, c.inputShape(), c.filterShape(),
               c.outputShape(), c.attrs());
  EXPECT_NE(s.message().find("expected element type f16, bf16, f32 or f64, "
                             "got tensor<2x4x6x6xi32>"),
            std::string::npos)
      << s.message();
}

/// An empty batch binds and runs; the filter gradient of no images is zero.
TEST(CpuConvKernelErrors, EmptyBatchGivesZeroFilterGradient) {
  ConvCase c{"", 0, 2, 3, 1, {5}, {3}, {1}, {1}, {0}, {0}};
  Tensor x(DType::kF32, c.inputShape()), dy(DType::kF32, c.outputShape());
  Tensor dw = Tensor::output(DType::kF32, c.filterShape());
  Status s = runKernel("conv_filter_grad", {x.view(), dy.view()}, {dw.view()},
                       c.attrs());
  ASSERT_TRUE(s.isOk()) << s.toString();
  for (int64_t i = 0; i < dw.numel(); ++i)
    EXPECT_EQ(dw.get(i), 0.0);
}

} // namespace
