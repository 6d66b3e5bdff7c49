//===- CudaKernelTest.cpp - CUDA kernels against the CPU backend ----------===//
//
// Each case binds one instruction on the CPU device and on the GPU with the
// same inputs and compares the outputs: f32 within 1e-5 relative, bf16
// within 1e-2, f64 within 1e-12; scatter_add and integer kernels exactly.
// Kernels' scratch is reserved after binding, as a program's is. Skipped
// (GTEST_SKIP) where cudaGetDeviceCount reports no GPU.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/AttentionPlan.h"
#include "runtime/device/cpu/CpuKernelUtils.h"
#include "runtime/device/cuda/CudaDevice.h"
#include "runtime/device/cuda/CudaLaunch.h"
#include "runtime/kernels/KernelSignature.h"
#include "tests/unit/cuda/ScratchReservation.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
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
  std::vector<float> values; // inputs: the values; outputs: ignored
  /// Elements the view starts after its allocation's (256-byte aligned)
  /// start: a view at any address.
  int64_t misalign = 0;
  /// The view's strides (elements; 0 broadcasts), inputs only; empty:
  /// contiguous. `values` then fills the elements the strides reach.
  std::vector<int64_t> strides = {};
};

double toDouble(DType d, const uint8_t *p, int64_t i) {
  switch (d) {
  case DType::kBF16: return bf16ToFloat(reinterpret_cast<const uint16_t *>(p)[i]);
  case DType::kF16: return halfToFloat(reinterpret_cast<const uint16_t *>(p)[i]);
  case DType::kI64: return double(reinterpret_cast<const int64_t *>(p)[i]);
  case DType::kI32: return double(reinterpret_cast<const int32_t *>(p)[i]);
  case DType::kI16: return double(reinterpret_cast<const int16_t *>(p)[i]);
  case DType::kI8: return double(reinterpret_cast<const int8_t *>(p)[i]);
  case DType::kU8: return double(p[i]);
  case DType::kU16: return double(reinterpret_cast<const uint16_t *>(p)[i]);
  case DType::kU32: return double(reinterpret_cast<const uint32_t *>(p)[i]);
  case DType::kU64: return double(reinterpret_cast<const uint64_t *>(p)[i]);
  case DType::kF64: return reinterpret_cast<const double *>(p)[i];
  case DType::kBool: return p[i] ? 1 : 0;
  default: return reinterpret_cast<const float *>(p)[i];
  }
}
void fromFloat(DType d, uint8_t *p, int64_t i, float v) {
  switch (d) {
  case DType::kBF16: reinterpret_cast<uint16_t *>(p)[i] = floatToBf16(v); break;
  case DType::kF16: reinterpret_cast<uint16_t *>(p)[i] = floatToHalf(v); break;
  case DType::kI64: reinterpret_cast<int64_t *>(p)[i] = int64_t(v); break;
  case DType::kI32: reinterpret_cast<int32_t *>(p)[i] = int32_t(v); break;
  case DType::kI16: reinterpret_cast<int16_t *>(p)[i] = int16_t(v); break;
  case DType::kI8: reinterpret_cast<int8_t *>(p)[i] = int8_t(v); break;
  case DType::kU8: p[i] = uint8_t(v); break;
  case DType::kU16: reinterpret_cast<uint16_t *>(p)[i] = uint16_t(v); break;
  case DType::kU32: reinterpret_cast<uint32_t *>(p)[i] = uint32_t(v); break;
  case DType::kU64: reinterpret_cast<uint64_t *>(p)[i] = uint64_t(v); break;
  case DType::kF64: reinterpret_cast<double *>(p)[i] = double(v); break;
  case DType::kBool: p[i] = v != 0; break;
  default: reinterpret_cast<float *>(p)[i] = v; break;
  }
}

/// Runs `kernel` on `device` (`runs` times); returns the outputs as
/// doubles, and the status of the device's synchronize in `synced`.
std::vector<std::vector<double>> run(Device &device, const std::string &kernel,
                                    const Attrs &attrs,
                                    const std::vector<Operand> &inputs,
                                    const std::vector<Operand> &outputs,
                                    Status *synced = nullptr, int runs = 1) {
  KernelContext ctx;
  ctx.kernel = kernel;
  ctx.location = "test";
  ctx.attrs = attrs;
  Reservation scratch(device);
  ctx.scratch = &scratch.plan;
  std::vector<void *> buffers;
  auto make = [&](const Operand &o, bool fill) {
    int64_t n = 1;
    for (size_t d = 0; d < o.shape.size(); ++d)
      n = o.strides.empty() ? n * o.shape[d]
                            : n + (o.shape[d] - 1) * o.strides[d];
    const int64_t esz = dtypeSize(o.dtype);
    void *p = device.allocate((n + o.misalign) * esz).value();
    buffers.push_back(p);
    void *view = static_cast<char *>(p) + o.misalign * esz;
    if (fill) {
      std::vector<uint8_t> host(n * esz);
      for (int64_t i = 0; i < n; ++i)
        fromFloat(o.dtype, host.data(), i, o.values[i]);
      EXPECT_TRUE(
          device.copyHostToDevice(view, host.data(), host.size()).isOk());
    }
    TensorView v = makeView(view, o.dtype, o.shape);
    if (!o.strides.empty())
      v.strides = o.strides;
    return v;
  };
  for (const Operand &o : inputs)
    ctx.inputs.push_back(make(o, true));
  for (const Operand &o : outputs)
    ctx.outputs.push_back(make(o, false));
  auto fn = (*device.kernels().find(kernel))(ctx);
  EXPECT_TRUE(fn.isOk()) << fn.status().toString();
  std::vector<std::vector<double>> result;
  if (!fn.isOk())
    return result;
  scratch.reserve();
  for (int r = 0; r < runs; ++r) {
    Status s = fn.value()();
    EXPECT_TRUE(s.isOk()) << s.toString();
  }
  Status sync = device.synchronize();
  if (synced)
    *synced = sync;
  else
    EXPECT_TRUE(sync.isOk()) << sync.toString();
  for (const TensorView &v : ctx.outputs) {
    std::vector<uint8_t> host(v.sizeInBytes());
    EXPECT_TRUE(device.copyDeviceToHost(host.data(), v.data, host.size()).isOk());
    std::vector<double> f(v.numel());
    for (int64_t i = 0; i < v.numel(); ++i)
      f[i] = toDouble(v.dtype, host.data(), i);
    result.push_back(f);
  }
  for (void *p : buffers)
    device.deallocate(p);
  return result;
}

std::vector<float> randomValues(int64_t n, unsigned seed, float scale = 1.f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(gen);
  return v;
}

/// An adamw instruction's attributes (beta1 0.9, epsilon 1e-8).
Attrs adamwAttrs(double beta2, double weightDecay) {
  Attrs a;
  a.set("beta1", 0.9);
  a.set("beta2", beta2);
  a.set("epsilon", 1e-8);
  a.set("weight_decay", weightDecay);
  return a;
}

/// `n` second moments (AdamW's v): |randomValues|.
std::vector<float> secondMoments(int64_t n, unsigned seed) {
  std::vector<float> v = randomValues(n, seed);
  for (float &x : v)
    x = std::fabs(x);
  return v;
}

class CudaKernels : public ::testing::Test {
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
    for (size_t o = 0; o < want.size(); ++o)
      for (size_t i = 0; i < want[o].size(); ++i) {
        if (std::isnan(want[o][i]) || std::isinf(want[o][i])) {
          ASSERT_TRUE(std::isnan(want[o][i]) ? std::isnan(got[o][i])
                                             : got[o][i] == want[o][i])
              << kernel << " output " << o << " element " << i << ": got "
              << got[o][i] << ", want " << want[o][i];
          continue;
        }
        ASSERT_NEAR(got[o][i], want[o][i],
                    tol * std::max(1.0, std::fabs(double(want[o][i]))))
            << kernel << " output " << o << " element " << i;
      }
  }
  std::unique_ptr<Device> gpu, cpu;
};

constexpr double kF32Tol = 1e-5, kBf16Tol = 1e-2;

TEST_F(CudaKernels, MatmulF32Transposes) {
  for (int tl = 0; tl < 2; ++tl)
    for (int tr = 0; tr < 2; ++tr) {
      Attrs a;
      a.set("transpose_lhs", int64_t(tl));
      a.set("transpose_rhs", int64_t(tr));
      std::vector<int64_t> ls = tl ? std::vector<int64_t>{3, 24, 17}
                                   : std::vector<int64_t>{3, 17, 24};
      std::vector<int64_t> rs = tr ? std::vector<int64_t>{3, 40, 24}
                                   : std::vector<int64_t>{3, 24, 40};
      compare("matmul", a,
              {{DType::kF32, ls, randomValues(3 * 17 * 24, 1)},
               {DType::kF32, rs, randomValues(3 * 24 * 40, 2)}},
              {{DType::kF32, {3, 17, 40}, {}}}, 1e-4);
    }
}

TEST_F(CudaKernels, MatmulBf16SharedRhs) {
  compare("matmul", Attrs(),
          {{DType::kBF16, {2, 64, 128}, randomValues(2 * 64 * 128, 3)},
           {DType::kBF16, {128, 96}, randomValues(128 * 96, 4)}},
          {{DType::kBF16, {2, 64, 96}, {}}}, kBf16Tol * 4);
}

// NumPy batch broadcasting: a shared lhs (stride 0), size-1 batch
// dimensions against larger ones on both sides (several strided groups),
// against the CPU kernel.
TEST_F(CudaKernels, MatmulBroadcastBatches) {
  struct Case {
    std::vector<int64_t> lhs, rhs, out;
  } cases[] = {
      {{24, 16}, {3, 16, 8}, {3, 24, 8}},
      {{2, 1, 24, 16}, {3, 16, 8}, {2, 3, 24, 8}},
      {{2, 1, 3, 24, 16}, {1, 4, 1, 16, 8}, {2, 4, 3, 24, 8}},
      {{4, 24, 16}, {1, 16, 8}, {4, 24, 8}},
  };
  for (const Case &c : cases)
    for (int tr = 0; tr < 2; ++tr) {
      Attrs a;
      a.set("transpose_rhs", int64_t(tr));
      std::vector<int64_t> rs = c.rhs;
      if (tr)
        std::swap(rs[rs.size() - 1], rs[rs.size() - 2]);
      compare("matmul", a,
              {{DType::kF32, c.lhs, randomValues(cpu::product(c.lhs), 11)},
               {DType::kF32, rs, randomValues(cpu::product(rs), 12)}},
              {{DType::kF32, c.out, {}}}, 1e-4);
    }
}

// A dense layer's weight and bias gradients in one product (cuBLASLt's
// BGRADA for a summed rhs, BGRADB for a summed transposed lhs, or the
// product and a reduction where cuBLASLt lacks the epilogue: odd sizes),
// against the CPU's matmul and reduce_sum.
TEST_F(CudaKernels, MatmulBiasGradSumsTheContractedRows) {
  struct Case {
    int64_t rows, in, out;
  } cases[] = {{256, 64, 96}, {1024, 128, 512}, {37, 13, 11}};
  for (DType t : {DType::kF32, DType::kBF16})
    for (const Case &c : cases)
      for (int64_t summed : {0, 1}) {
        // summed 1: dW [in, out] = x^T dy, dy the rhs; summed 0: dW [out,
        // in] = dy^T x, dy the lhs.
        Attrs a;
        a.set("transpose_lhs", int64_t(1));
        a.set("summed", summed);
        Operand x{t, {c.rows, c.in}, randomValues(c.rows * c.in, 41)};
        Operand dy{t, {c.rows, c.out}, randomValues(c.rows * c.out, 42)};
        std::vector<int64_t> product = summed
                                           ? std::vector<int64_t>{c.in, c.out}
                                           : std::vector<int64_t>{c.out, c.in};
        // Sums over up to 1024 rows: bf16's rounding of the sums.
        double tol = t == DType::kBF16 ? kBf16Tol * 4 : 1e-4;
        SCOPED_TRACE(::testing::Message() << dtypeName(t) << " rows " << c.rows
                                          << " summed " << summed);
        compare("matmul_bias_grad", a,
                summed ? std::vector<Operand>{x, dy}
                       : std::vector<Operand>{dy, x},
                {{t, product, {}}, {t, {c.out}, {}}}, tol);
      }
}

// A dense layer's product with its bias (cuBLASLt's BIAS epilogue, or the
// product and an add where cuBLASLt lacks it: odd sizes), batched rows and
// a weight stored [out, in], against the CPU's matmul and add.
TEST_F(CudaKernels, MatmulBiasAddsTheBiasAlongTheLastDimension) {
  struct Case {
    std::vector<int64_t> x;
    int64_t in, out;
  } cases[] = {
      {{4, 64, 128}, 128, 384}, {{1000, 64}, 64, 256}, {{3, 7, 13}, 13, 11}};
  for (DType t : {DType::kF32, DType::kBF16})
    for (const Case &c : cases)
      for (int tr = 0; tr < 2; ++tr) {
        Attrs a;
        a.set("transpose_rhs", int64_t(tr));
        std::vector<int64_t> w = tr ? std::vector<int64_t>{c.out, c.in}
                                    : std::vector<int64_t>{c.in, c.out};
        std::vector<int64_t> y = c.x;
        y.back() = c.out;
        SCOPED_TRACE(::testing::Message() << dtypeName(t) << " in " << c.in
                                          << " transpose_rhs " << tr);
        // cuBLASLt rounds the sum once; the CPU the product, then the sum.
        compare("matmul_bias", a,
                {{t, c.x, randomValues(cpu::product(c.x), 43)},
                 {t, w, randomValues(c.in * c.out, 44)},
                 {t, {c.out}, randomValues(c.out, 45)}},
                {{t, y, {}}}, t == DType::kBF16 ? kBf16Tol * 2 : 1e-4);
      }
}

TEST_F(CudaKernels, AddBroadcast) {
  compare("add", Attrs(),
          {{DType::kF32, {64, 33}, randomValues(64 * 33, 5)},
           {DType::kF32, {64, 33}, randomValues(64 * 33, 6)}},
          {{DType::kF32, {64, 33}, {}}}, kF32Tol);
}

/// More elements than the grid has threads (132 SMs x 32 blocks x 256 on
/// an H100): every element kernel's trips of kUnroll elements, the last
/// one partial, for binary, unary, cast and copy (transpose) kernels.
TEST_F(CudaKernels, ElementwiseBeyondOneGridOfThreads) {
  const std::vector<int64_t> shape{3, 1021, 1031};
  const int64_t n = 3 * 1021 * 1031;
  for (DType t : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtypeName(t));
    const double tol = t == DType::kBF16 ? kBf16Tol : kF32Tol;
    for (const char *k : {"add", "div", "mul"})
      compare(k, Attrs(), {{t, shape, randomValues(n, 11)},
                           {t, shape, randomValues(n, 12, 2)}},
              {{t, shape, {}}}, tol);
    compare("exp", Attrs(), {{t, shape, randomValues(n, 13)}}, {{t, shape, {}}},
            tol);
    Attrs perm;
    perm.set("perm", std::vector<int64_t>{2, 0, 1});
    compare("transpose", perm, {{t, shape, randomValues(n, 14)}},
            {{t, {1031, 3, 1021}, {}}}, 0);
  }
  Attrs to;
  compare("cast", to, {{DType::kF32, shape, randomValues(n, 15)}},
          {{DType::kBF16, shape, {}}}, 0);
}

/// The 16-byte paths of the elementwise kernels (ElementwiseKernels.cu,
/// vectorPlan) against the CPU, and the scalar kernels they fall back to:
/// contiguous operands with and without a tail past the last whole vector,
/// a bias broadcast along the outer dimensions, a per-row value broadcast
/// along the innermost one (stride 0), transposes and casts whose rows are
/// whole vectors, and views one element off alignment.
TEST_F(CudaKernels, ElementwiseVectorPathsLikeTheCpu) {
  const std::vector<int64_t> rows{6, 40, 64};
  const int64_t n = 6 * 40 * 64;
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtypeName(t));
    const double tol = t == DType::kF32 ? kF32Tol : kBf16Tol;
    for (int64_t misalign : {0, 1}) {
      SCOPED_TRACE("misalign " + std::to_string(misalign));
      compare("add", Attrs(),
              {{t, rows, randomValues(n, 21), misalign},
               {t, rows, randomValues(n, 22), misalign}},
              {{t, rows, {}, misalign}}, tol);
      compare("mul", Attrs(),
              {{t, {1003}, randomValues(1003, 23), misalign},
               {t, {1003}, randomValues(1003, 24), misalign}},
              {{t, {1003}, {}, misalign}}, tol);
      compare("add", Attrs(),
              {{t, rows, randomValues(n, 25), misalign},
               {t, rows, randomValues(64, 26), 0, {0, 0, 1}}},
              {{t, rows, {}}}, tol);
      compare("sub", Attrs(),
              {{t, rows, randomValues(n, 27)},
               {t, rows, randomValues(240, 28), misalign, {40, 1, 0}}},
              {{t, rows, {}, misalign}}, tol);
      compare("exp", Attrs(), {{t, {1003}, randomValues(1003, 29), misalign}},
              {{t, {1003}, {}}}, tol);
      Attrs perm;
      perm.set("perm", std::vector<int64_t>{0, 2, 1, 3});
      compare("transpose", perm,
              {{t, {2, 24, 4, 64}, randomValues(2 * 24 * 4 * 64, 30), misalign}},
              {{t, {2, 4, 24, 64}, {}}}, 0);
    }
  }
  for (int64_t misalign : {0, 1})
    for (int64_t count : {int64_t(1003), n}) {
      SCOPED_TRACE("cast of " + std::to_string(count) + ", misalign " +
                   std::to_string(misalign));
      compare("cast", Attrs(),
              {{DType::kF32, {count}, randomValues(count, 31, 300), misalign}},
              {{DType::kBF16, {count}, {}}}, 0);
      compare("cast", Attrs(),
              {{DType::kBF16, {count}, randomValues(count, 32, 300)}},
              {{DType::kF32, {count}, {}, misalign}}, 0);
    }
}

// Casts between float types (contiguous operands: the kernel typed by both
// dtypes) round as the CPU does (through float to a half type), bit for
// bit.
TEST_F(CudaKernels, CastsBetweenFloatTypesLikeTheCpu) {
  const std::vector<int64_t> shape{67, 129};
  const int64_t n = 67 * 129;
  const DType floats[] = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16};
  for (DType from : floats)
    for (DType to : floats) {
      if (from == to)
        continue;
      SCOPED_TRACE(std::string(dtypeName(from)) + " -> " + dtypeName(to));
      compare("cast", Attrs(), {{from, shape, randomValues(n, 16, 300)}},
              {{to, shape, {}}}, 0);
    }
}

TEST_F(CudaKernels, Gelu) {
  for (const char *approx : {"none", "tanh"}) {
    Attrs a;
    a.set("approximate", std::string(approx));
    compare("gelu", a, {{DType::kF32, {4096}, randomValues(4096, 7, 4)}},
            {{DType::kF32, {4096}, {}}}, kF32Tol);
    compare("gelu", a, {{DType::kBF16, {4096}, randomValues(4096, 7, 4)}},
            {{DType::kBF16, {4096}, {}}}, kBf16Tol);
  }
}

TEST_F(CudaKernels, SoftmaxRowsAndGrad) {
  for (int64_t cols : {100, 1024, 5000}) {
    Attrs a;
    a.set("dim", int64_t(-1));
    compare("softmax", a, {{DType::kF32, {7, cols}, randomValues(7 * cols, 8, 5)}},
            {{DType::kF32, {7, cols}, {}}}, kF32Tol);
    compare("softmax_grad", a,
            {{DType::kF32, {7, cols}, randomValues(7 * cols, 9)},
             {DType::kF32, {7, cols}, randomValues(7 * cols, 10)}},
            {{DType::kF32, {7, cols}, {}}}, kF32Tol);
  }
}

TEST_F(CudaKernels, LayerNormAndGrad) {
  Attrs a;
  a.set("axis", int64_t(-1));
  a.set("epsilon", 1e-5);
  const int64_t rows = 300, cols = 768;
  compare("layer_norm", a,
          {{DType::kF32, {rows, cols}, randomValues(rows * cols, 11, 3)},
           {DType::kF32, {cols}, randomValues(cols, 12)},
           {DType::kF32, {cols}, randomValues(cols, 13)}},
          {{DType::kF32, {rows, cols}, {}},
           {DType::kF32, {rows}, {}},
           {DType::kF32, {rows}, {}}},
          kF32Tol * 10);
}

/// The norms' parameter gradients: 16-byte columns where every row's
/// columns are whole vectors (1024), one element a thread where they are
/// not (100 bf16 columns); rows that leave the unrolled loop a remainder.
TEST_F(CudaKernels, NormParamGradsInVectorsAndNot) {
  Attrs a;
  a.set("axis", int64_t(-1));
  const int64_t rows = 1001;
  std::vector<float> rstd = randomValues(rows, 80);
  for (float &r : rstd)
    r = 0.5f + std::fabs(r);
  for (DType d : {DType::kF32, DType::kBF16})
    for (int64_t cols : {int64_t(1024), int64_t(100)}) {
      const double tol = d == DType::kF32 ? kF32Tol * 10 : kBf16Tol;
      const auto x = randomValues(rows * cols, 81, 3);
      const auto dy = randomValues(rows * cols, 82);
      compare("layer_norm_param_grad", a,
              {{d, {rows, cols}, x},
               {DType::kF32, {rows}, randomValues(rows, 83)},
               {DType::kF32, {rows}, rstd},
               {d, {rows, cols}, dy}},
              {{d, {cols}, {}}, {d, {cols}, {}}}, tol);
      compare("rms_norm_param_grad", a,
              {{d, {rows, cols}, x},
               {DType::kF32, {rows}, rstd},
               {d, {rows, cols}, dy}},
              {{d, {cols}, {}}}, tol);
    }
}

TEST_F(CudaKernels, CrossEntropy) {
  std::vector<float> labels(64);
  for (int i = 0; i < 64; ++i)
    labels[i] = float((i * 37) % 1000);
  labels[5] = -100; // ignore_index
  compare("cross_entropy", Attrs(),
          {{DType::kF32, {64, 1000}, randomValues(64 * 1000, 14, 3)},
           {DType::kI64, {64}, labels}},
          {{DType::kF32, {64}, {}}}, kF32Tol);
  compare("cross_entropy_grad", Attrs(),
          {{DType::kF32, {64, 1000}, randomValues(64 * 1000, 14, 3)},
           {DType::kI64, {64}, labels},
           {DType::kF32, {64}, randomValues(64, 15)}},
          {{DType::kF32, {64, 1000}, {}}}, kF32Tol);
}

/// bf16 and f16 logits with an f32 loss and dloss (read without their
/// cast, as dtcc-fold-narrow-reads makes the programs), as the CPU's kernel.
TEST_F(CudaKernels, CrossEntropyHalfLogitsLikeTheCpu) {
  std::vector<float> labels(64);
  for (int i = 0; i < 64; ++i)
    labels[i] = float((i * 37) % 5000);
  labels[9] = -100; // ignore_index
  for (DType half : {DType::kBF16, DType::kF16}) {
    const auto logits = randomValues(64 * 5000, 16, 6);
    compare("cross_entropy", Attrs(),
            {{half, {64, 5000}, logits}, {DType::kI64, {64}, labels}},
            {{DType::kF32, {64}, {}}}, kF32Tol);
    compare("cross_entropy_grad", Attrs(),
            {{half, {64, 5000}, logits},
             {DType::kI64, {64}, labels},
             {DType::kF32, {64}, randomValues(64, 17)}},
            {{half, {64, 5000}, {}}}, kBf16Tol);
  }
}

TEST_F(CudaKernels, Adamw) {
  const Attrs a = adamwAttrs(0.999, 0.01);
  const int64_t n = 10000;
  const std::vector<float> v = secondMoments(n, 19);
  compare("adamw", a,
          {{DType::kF32, {n}, randomValues(n, 16)},
           {DType::kF32, {n}, randomValues(n, 17)},
           {DType::kF32, {n}, randomValues(n, 18)},
           {DType::kF32, {n}, v},
           {DType::kF32, {1}, {1e-3f}},
           {DType::kI64, {1}, {3}},
           {DType::kF32, {1}, {1.f}}},
          {{DType::kF32, {n}, {}}, {DType::kF32, {n}, {}}, {DType::kF32, {n}, {}}},
          kF32Tol);
}

/// SGD in f32 and f64 (f64 training runs on the GPU too), with momentum,
/// dampening, weight decay, Nesterov or not, and on the first step (the
/// buffer not read), as the CPU's kernel.
TEST_F(CudaKernels, SgdLikeTheCpu) {
  const int64_t n = 10000;
  for (DType t : {DType::kF32, DType::kF64})
    for (int nesterov = 0; nesterov < 2; ++nesterov)
      for (int64_t step : {1, 3}) {
        Attrs a;
        a.set("momentum", 0.9);
        a.set("dampening", nesterov ? 0.0 : 0.1);
        a.set("weight_decay", 0.01);
        a.set("nesterov", int64_t(nesterov));
        compare("sgd", a,
                {{t, {n}, randomValues(n, 60)},
                 {t, {n}, randomValues(n, 61)},
                 {t, {n}, randomValues(n, 62)},
                 {DType::kF32, {1}, {1e-2f}},
                 {DType::kI64, {1}, {float(step)}},
                 {DType::kF32, {1}, {0.5f}}},
                {{t, {n}, {}}, {t, {n}, {}}},
                t == DType::kF64 ? 1e-12 : kF32Tol);
      }
}

/// A bf16 or f16 gradient of an f32 parameter (read without its cast, as
/// dtcc-fold-narrow-reads makes the programs), as the CPU's kernel.
TEST_F(CudaKernels, AdamwNarrowGradientsLikeTheCpu) {
  const Attrs a = adamwAttrs(0.95, 0.1);
  const int64_t n = 10000;
  const std::vector<float> v = secondMoments(n, 29);
  for (DType g : {DType::kBF16, DType::kF16})
    compare("adamw", a,
            {{DType::kF32, {n}, randomValues(n, 26)},
             {g, {n}, randomValues(n, 27)},
             {DType::kF32, {n}, randomValues(n, 28)},
             {DType::kF32, {n}, v},
             {DType::kF32, {1}, {1e-3f}},
             {DType::kI64, {1}, {3}},
             {DType::kF32, {1}, {0.5f}}},
            {{DType::kF32, {n}, {}}, {DType::kF32, {n}, {}},
             {DType::kF32, {n}, {}}},
            kF32Tol);
}

/// The optional fourth output (the mixed-precision copy the update writes:
/// dtcc-lower-to-exec's rounded-copies) is the GPU's new parameter rounded
/// as the cast kernel rounds it, bit for bit; the other outputs are the
/// three-output update's, and all four the CPU's. A copy of the wrong type
/// or overlapping another operand is refused.
TEST_F(CudaKernels, AdamwWritesTheRoundedCopyOfTheNewParameter) {
  const Attrs a = adamwAttrs(0.95, 0.1);
  const int64_t n = 10003;
  const std::vector<float> v = secondMoments(n, 52);
  for (DType half : {DType::kBF16, DType::kF16}) {
    const std::vector<Operand> in = {{DType::kF32, {n}, randomValues(n, 50)},
                                     {half, {n}, randomValues(n, 51)},
                                     {DType::kF32, {n}, randomValues(n, 53)},
                                     {DType::kF32, {n}, v},
                                     {DType::kF32, {1}, {1e-2f}},
                                     {DType::kI64, {1}, {3}},
                                     {DType::kF32, {1}, {0.5f}}};
    const std::vector<Operand> three = {
        {DType::kF32, {n}, {}}, {DType::kF32, {n}, {}}, {DType::kF32, {n}, {}}};
    std::vector<Operand> four = three;
    four.push_back({half, {n}, {}});
    auto plain = run(*gpu, "adamw", a, in, three);
    auto got = run(*gpu, "adamw", a, in, four);
    ASSERT_EQ(got.size(), 4u);
    for (int o = 0; o < 3; ++o)
      EXPECT_EQ(got[o], plain[o]) << dtypeName(half) << " output " << o;
    std::vector<uint8_t> rounded(size_t(n) * 2);
    for (int64_t i = 0; i < n; ++i)
      fromFloat(half, rounded.data(), i, float(got[0][i]));
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(got[3][i], toDouble(half, rounded.data(), i))
          << dtypeName(half) << " element " << i << " of " << got[0][i];
    // The CPU's update may round its f32 results otherwise (another
    // vector width): its copy is then a bf16 or f16 step away.
    compare("adamw", a, in, four, kBf16Tol);
  }
  // A copy in f32, or of another shape, is refused when bound.
  for (const Operand &bad :
       {Operand{DType::kF32, {8}, {}}, Operand{DType::kBF16, {4}, {}}}) {
    KernelContext ctx;
    ctx.kernel = "adamw";
    ctx.location = "test";
    ctx.attrs = a;
    std::vector<void *> owned;
    auto view = [&](const Operand &o) {
      void *p = gpu->allocate(64).value();
      owned.push_back(p);
      return makeView(p, o.dtype, o.shape);
    };
    for (int i = 0; i < 4; ++i)
      ctx.inputs.push_back(view({DType::kF32, {8}, {}}));
    ctx.inputs.push_back(view({DType::kF32, {1}, {}}));
    ctx.inputs.push_back(view({DType::kI64, {1}, {}}));
    ctx.inputs.push_back(view({DType::kF32, {1}, {}}));
    for (int i = 0; i < 3; ++i)
      ctx.outputs.push_back(view({DType::kF32, {8}, {}}));
    ctx.outputs.push_back(view(bad));
    Reservation scratch(*gpu);
    ctx.scratch = &scratch.plan;
    auto fn = (*gpu->kernels().find("adamw"))(ctx);
    EXPECT_FALSE(fn.isOk()) << dtypeName(bad.dtype);
    // Overlapping the new m.
    ctx.outputs[3] = makeView(ctx.outputs[1].data, DType::kBF16, {8});
    auto overlapping = (*gpu->kernels().find("adamw"))(ctx);
    ASSERT_FALSE(overlapping.isOk());
    EXPECT_NE(overlapping.status().message().find("overlaps output 1"),
              std::string::npos)
        << overlapping.status().message();
    for (void *p : owned)
      gpu->deallocate(p);
  }
}

/// global_sum_squares (a clipping norm's sums of every gradient in one
/// launch) against the CPU's: operands of many chunks, of one, a scalar,
/// bf16, f16 and f32 into f32; f64 into f64.
TEST_F(CudaKernels, GlobalSumSquaresLikeTheCpu) {
  compare("global_sum_squares", Attrs(),
          {{DType::kBF16, {1024, 1000}, randomValues(1024 * 1000, 35)},
           {DType::kF32, {3, 7}, randomValues(21, 36)},
           {DType::kF16, {40000}, randomValues(40000, 37)},
           {DType::kBF16, {}, {0.75f}},
           {DType::kF32, {16384}, randomValues(16384, 38)}},
          {{DType::kF32, {}, {}}}, kF32Tol);
  compare("global_sum_squares", Attrs(),
          {{DType::kF64, {50000}, randomValues(50000, 39)},
           {DType::kF64, {5}, randomValues(5, 40)}},
          {{DType::kF64, {}, {}}}, 1e-12);
}

/// sum_squares (a gradient's squared norm) against the CPU's: a whole
/// tensor in slices, rows, columns; f32, bf16 into f32, f16 into f16.
TEST_F(CudaKernels, SumSquaresLikeTheCpu) {
  auto dims = [](std::vector<int64_t> d) {
    Attrs a;
    a.set("dims", d);
    return a;
  };
  const std::vector<int64_t> big = {1024, 1000};
  compare("sum_squares", dims({0, 1}),
          {{DType::kF32, big, randomValues(1024 * 1000, 30)}},
          {{DType::kF32, {}, {}}}, kF32Tol);
  compare("sum_squares", dims({0, 1}),
          {{DType::kBF16, big, randomValues(1024 * 1000, 31)}},
          {{DType::kF32, {}, {}}}, kF32Tol);
  compare("sum_squares", dims({1}),
          {{DType::kF32, {64, 300}, randomValues(64 * 300, 32)}},
          {{DType::kF32, {64}, {}}}, kF32Tol);
  compare("sum_squares", dims({0}),
          {{DType::kF32, {300, 64}, randomValues(300 * 64, 33)}},
          {{DType::kF32, {64}, {}}}, kF32Tol);
  compare("sum_squares", dims({0}),
          {{DType::kF16, {50, 40}, randomValues(50 * 40, 34)}},
          {{DType::kF16, {40}, {}}}, 1e-2);
}

std::vector<float> iotaValues(int64_t n, float from = 0) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i)
    v[i] = from + float(i);
  return v;
}

Attrs intAttr(const char *name, int64_t v) {
  Attrs a;
  a.set(name, v);
  return a;
}

TEST_F(CudaKernels, InverseTrigAndHyperbolic) {
  std::vector<float> unit = randomValues(1000, 20, 0.99f); // asin, acos, atanh
  std::vector<float> big = randomValues(1000, 21, 3.f);
  std::vector<float> geOne = big;
  for (float &x : geOne)
    x = 1.f + std::fabs(x); // acosh
  const std::pair<const char *, const std::vector<float> *> cases[] = {
      {"tan", &unit},  {"asin", &unit},  {"acos", &unit},
      {"atan", &big},  {"sinh", &big},   {"cosh", &big},
      {"asinh", &big}, {"acosh", &geOne}, {"atanh", &unit}};
  for (const auto &[kernel, values] : cases) {
    compare(kernel, Attrs(), {{DType::kF32, {1000}, *values}},
            {{DType::kF32, {1000}, {}}}, kF32Tol * 10);
    compare(kernel, Attrs(), {{DType::kBF16, {1000}, *values}},
            {{DType::kBF16, {1000}, {}}}, kBf16Tol);
  }
}

TEST_F(CudaKernels, IsNanIsInf) {
  std::vector<float> x = randomValues(64, 22);
  x[3] = NAN;
  x[7] = INFINITY;
  x[9] = -INFINITY;
  compare("is_nan", Attrs(), {{DType::kF32, {64}, x}},
          {{DType::kBool, {64}, {}}}, 0);
  for (int pos = 0; pos < 2; ++pos)
    for (int neg = 0; neg < 2; ++neg) {
      Attrs a;
      a.set("detect_positive", int64_t(pos));
      a.set("detect_negative", int64_t(neg));
      compare("is_inf", a, {{DType::kF32, {64}, x}},
              {{DType::kBool, {64}, {}}}, 0);
      compare("is_inf", a, {{DType::kBF16, {64}, x}},
              {{DType::kBool, {64}, {}}}, 0);
    }
}

TEST_F(CudaKernels, RemAndShifts) {
  std::vector<float> a = randomValues(256, 23, 1000.f),
                     b = randomValues(256, 24, 30.f);
  for (float &x : a)
    x = std::trunc(x);
  for (float &x : b)
    x = std::trunc(x) == 0 ? 7 : std::trunc(x);
  b[0] = -1;
  for (DType d : {DType::kI32, DType::kI64, DType::kF32})
    compare("rem", Attrs(), {{d, {16, 16}, a}, {d, {16, 16}, b}},
            {{d, {16, 16}, {}}}, kF32Tol);
  std::vector<float> counts(256);
  for (int i = 0; i < 256; ++i)
    counts[i] = float(i % 70 - 2); // negative and too large counts too
  for (DType d : {DType::kI32, DType::kI64})
    for (const char *k : {"shift_left", "shift_right", "and", "or", "xor"})
      compare(k, Attrs(), {{d, {256}, a}, {d, {256}, counts}},
              {{d, {256}, {}}}, 0);
}

/// The binary kernels and comparisons of the 8- and 16-bit and unsigned
/// integers (ONNX's Add/Sub/Mul/Div/Mod/Max/Min/BitShift/Equal/Less of uint8
/// and friends), wrapping as the CPU backend does: sums and products past the
/// type's range.
TEST_F(CudaKernels, SmallAndUnsignedIntegersLikeTheCpu) {
  struct Range {
    DType type;
    float lo, hi;
  };
  const Range ranges[] = {
      {DType::kI8, -128, 127},     {DType::kI16, -32768, 32767},
      {DType::kU8, 0, 255},        {DType::kU16, 0, 65535},
      {DType::kU32, 0, 4.0e9f},    {DType::kU64, 0, 1.0e12f},
  };
  for (const Range &r : ranges) {
    SCOPED_TRACE(dtypeName(r.type));
    std::vector<float> a(256), b(256), counts(256);
    std::mt19937 gen(31);
    std::uniform_real_distribution<float> dist(r.lo, r.hi);
    for (int i = 0; i < 256; ++i) {
      a[i] = std::trunc(dist(gen));
      b[i] = std::trunc(dist(gen));
      if (b[i] == 0)
        b[i] = 1;
      counts[i] = float(i % 70);
    }
    a[0] = r.hi; // the largest value plus, times and minus another
    b[1] = r.lo == 0 ? 1 : -1;
    for (const char *k :
         {"add", "sub", "mul", "div", "rem", "max", "min", "pow"})
      compare(k, Attrs(), {{r.type, {256}, a}, {r.type, {256}, b}},
              {{r.type, {256}, {}}}, 0);
    for (const char *k : {"shift_left", "shift_right", "and", "or", "xor"})
      compare(k, Attrs(), {{r.type, {256}, a}, {r.type, {256}, counts}},
              {{r.type, {256}, {}}}, 0);
    b[2] = a[2]; // equal operands for eq, le and ge
    for (const char *k : {"eq", "ne", "lt", "le", "gt", "ge"})
      compare(k, Attrs(), {{r.type, {256}, a}, {r.type, {256}, b}},
              {{DType::kBool, {256}, {}}}, 0);
  }
}

TEST_F(CudaKernels, ReverseAndPad) {
  Attrs r;
  r.set("dims", std::vector<int64_t>{0, 2});
  compare("reverse", r, {{DType::kF32, {3, 4, 5}, iotaValues(60)}},
          {{DType::kF32, {3, 4, 5}, {}}}, 0);
  Attrs p;
  p.set("low", std::vector<int64_t>{1, -1});
  p.set("high", std::vector<int64_t>{2, 3});
  compare("pad", p,
          {{DType::kBF16, {3, 4}, iotaValues(12)}, {DType::kBF16, {}, {-5}}},
          {{DType::kBF16, {6, 6}, {}}}, 0);
}

TEST_F(CudaKernels, GatherElements) {
  std::vector<float> idx(4 * 3);
  for (int i = 0; i < 12; ++i)
    idx[i] = float((i * 5) % 7 - 3); // negative indices too
  for (DType it : {DType::kI32, DType::kI64}) {
    compare("gather_elements", intAttr("axis", 1),
            {{DType::kF32, {4, 7}, iotaValues(28)}, {it, {4, 3}, idx}},
            {{DType::kF32, {4, 3}, {}}}, 0);
  }
  std::vector<float> idx0(2 * 5);
  for (int i = 0; i < 10; ++i)
    idx0[i] = float(i % 4);
  compare("gather_elements", intAttr("axis", 0),
          {{DType::kBF16, {4, 6}, iotaValues(24)}, {DType::kI64, {2, 5}, idx0}},
          {{DType::kBF16, {2, 5}, {}}}, 0);
}

TEST_F(CudaKernels, ArgmaxArgminCumsum) {
  std::vector<float> x = randomValues(8 * 100, 25, 4.f);
  for (int i = 0; i < 800; i += 13)
    x[i] = std::round(x[i]); // ties
  x[205] = NAN;
  for (int64_t dim : {0, 1})
    for (int last = 0; last < 2; ++last)
      for (const char *k : {"argmax", "argmin"}) {
        Attrs a = intAttr("dim", dim);
        a.set("select_last_index", int64_t(last));
        std::vector<int64_t> outShape = {dim == 0 ? 100 : 8};
        compare(k, a, {{DType::kF32, {8, 100}, x}},
                {{DType::kI64, outShape, {}}}, 0);
        compare(k, a, {{DType::kI32, {8, 100}, iotaValues(800, -400)}},
                {{DType::kI64, outShape, {}}}, 0);
      }
  for (int64_t dim : {0, 1})
    for (int ex = 0; ex < 2; ++ex)
      for (int rev = 0; rev < 2; ++rev) {
        Attrs a = intAttr("dim", dim);
        a.set("exclusive", int64_t(ex));
        a.set("reverse", int64_t(rev));
        compare("cumsum", a,
                {{DType::kF32, {8, 100}, randomValues(800, 26)}},
                {{DType::kF32, {8, 100}, {}}}, kF32Tol * 10);
        compare("cumsum", a, {{DType::kI64, {8, 100}, iotaValues(800, -300)}},
                {{DType::kI64, {8, 100}, {}}}, 0);
      }
}

/// Three adamw bound in a row share one launch: running the first kernel
/// alone updates all three tensors.
TEST_F(CudaKernels, AdamwRunFusesIntoOneLaunch) {
  const Attrs a = adamwAttrs(0.999, 0.01);
  const std::vector<int64_t> sizes = {10000, 7, 4096};
  auto upload = [](Device &d, const std::vector<float> &v, DType t,
                   std::vector<void *> &owned) {
    std::vector<uint8_t> host(v.size() * dtypeSize(t));
    for (size_t i = 0; i < v.size(); ++i)
      fromFloat(t, host.data(), int64_t(i), v[i]);
    void *p = d.allocate(int64_t(host.size())).value();
    EXPECT_TRUE(d.copyHostToDevice(p, host.data(), host.size()).isOk());
    owned.push_back(p);
    return makeView(p, t, {int64_t(v.size())});
  };
  auto runAll = [&](Device &d, bool firstOnly) {
    std::vector<void *> owned;
    TensorView lr = upload(d, {1e-3f}, DType::kF32, owned);
    TensorView step = upload(d, {2}, DType::kI64, owned);
    TensorView gs = upload(d, {0.5f}, DType::kF32, owned);
    std::vector<KernelContext> ctxs;
    for (size_t t = 0; t < sizes.size(); ++t) {
      const int64_t n = sizes[t];
      const std::vector<float> v = secondMoments(n, 40 + t);
      KernelContext ctx;
      ctx.kernel = "adamw";
      ctx.location = "p" + std::to_string(t);
      ctx.attrs = a;
      ctx.inputs = {upload(d, randomValues(n, 30 + t), DType::kF32, owned),
                    upload(d, randomValues(n, 33 + t), DType::kF32, owned),
                    upload(d, randomValues(n, 36 + t), DType::kF32, owned),
                    upload(d, v, DType::kF32, owned), lr, step, gs};
      for (int o = 0; o < 3; ++o)
        ctx.outputs.push_back(
            upload(d, std::vector<float>(n, 0.f), DType::kF32, owned));
      ctxs.push_back(ctx);
    }
    std::vector<KernelFn> fns;
    Reservation scratch(d);
    d.beginFunction();
    for (KernelContext &ctx : ctxs) {
      ctx.scratch = &scratch.plan;
      auto fn = (*d.kernels().find("adamw"))(ctx);
      EXPECT_TRUE(fn.isOk()) << fn.status().toString();
      if (!fn.isOk())
        return std::vector<std::vector<float>>{};
      fns.push_back(fn.value());
    }
    scratch.reserve();
    for (size_t i = 0; i < fns.size(); ++i)
      if (i == 0 || !firstOnly)
        EXPECT_TRUE(fns[i]().isOk());
    EXPECT_TRUE(d.synchronize().isOk());
    std::vector<std::vector<float>> out;
    for (const KernelContext &ctx : ctxs)
      for (const TensorView &v : ctx.outputs) {
        std::vector<float> f(v.numel());
        EXPECT_TRUE(
            d.copyDeviceToHost(f.data(), v.data, v.sizeInBytes()).isOk());
        out.push_back(f);
      }
    for (void *p : owned)
      d.deallocate(p);
    return out;
  };
  auto want = runAll(*cpu, false);
  auto got = runAll(*gpu, true);
  ASSERT_EQ(want.size(), got.size());
  for (size_t o = 0; o < want.size(); ++o)
    for (size_t i = 0; i < want[o].size(); ++i)
      ASSERT_NEAR(got[o][i], want[o][i],
                  kF32Tol * std::max(1.0, std::fabs(double(want[o][i]))))
          << "tensor " << o / 3 << " output " << o % 3 << " element " << i;
  // A second run of the whole sequence gives the same (the table is kept).
  auto again = runAll(*gpu, false);
  EXPECT_EQ(again, got);
}

/// The AdamW kernel moves 4 elements of every operand per access where all
/// of a tensor's bases are 16-byte aligned and goes element by element
/// otherwise: the same update with every operand one element off alignment
/// (a bf16 gradient and a bf16 rounded copy) gives the aligned launch's
/// results bit for bit, and both the CPU's. Sizes: a whole chunk and a
/// tail, one access and a tail, less than one access.
TEST_F(CudaKernels, AdamwMisalignedOperandsMatchTheAlignedLaunch) {
  const Attrs a = adamwAttrs(0.95, 0.1);
  for (int64_t n : {int64_t(cuda::kAdamwChunk) + 13, int64_t(7), int64_t(3)}) {
    SCOPED_TRACE("n " + std::to_string(n));
    auto operands = [&](int64_t misalign) {
      std::vector<Operand> in = {
          {DType::kF32, {n}, randomValues(n, 70), misalign},
          {DType::kBF16, {n}, randomValues(n, 71), misalign},
          {DType::kF32, {n}, randomValues(n, 72), misalign},
          {DType::kF32, {n}, secondMoments(n, 73), misalign},
          {DType::kF32, {1}, {1e-3f}},
          {DType::kI64, {1}, {4}},
          {DType::kF32, {1}, {0.5f}}};
      std::vector<Operand> out = {{DType::kF32, {n}, {}, misalign},
                                  {DType::kF32, {n}, {}, misalign},
                                  {DType::kF32, {n}, {}, misalign},
                                  {DType::kBF16, {n}, {}, misalign}};
      return std::make_pair(in, out);
    };
    auto [in, out] = operands(0);
    auto [inOff, outOff] = operands(1);
    const auto aligned = run(*gpu, "adamw", a, in, out);
    EXPECT_EQ(run(*gpu, "adamw", a, inOff, outOff), aligned);
    compare("adamw", a, in, out, kBf16Tol);
  }
}

/// Reductions of every layout the CUDA backend plans (runtime/exec/
/// CudaScratch.h planCudaReduce): sliced rows (a whole tensor to a scalar),
/// sliced columns (a bias gradient), unsliced rows and columns, reduced
/// dims on both sides of a kept one; the same on a second run.
TEST_F(CudaKernels, ReductionsOfEveryLayoutMatchTheCpu) {
  struct Case {
    std::vector<int64_t> shape, dims;
  };
  const Case cases[] = {
      {{512, 1024}, {0, 1}},    {{64, 128, 256}, {0, 1}}, {{3, 5000, 7}, {1}},
      {{64, 300}, {1}},         {{2, 3, 4096}, {0, 2}},   {{1000, 33}, {0}},
      {{7, 1, 9}, {1}},         {{4, 20000}, {1}},
  };
  for (const Case &c : cases) {
    int64_t n = 1;
    for (int64_t d : c.shape)
      n *= d;
    std::vector<int64_t> outShape;
    for (size_t d = 0; d < c.shape.size(); ++d)
      if (std::find(c.dims.begin(), c.dims.end(), int64_t(d)) == c.dims.end())
        outShape.push_back(c.shape[d]);
    Attrs a;
    a.set("dims", c.dims);
    for (const char *k : {"reduce_sum", "reduce_max", "reduce_min"})
      for (DType t : {DType::kF32, DType::kBF16}) {
        SCOPED_TRACE(std::string(k) + " " + dtypeName(t) + " of " +
                     std::to_string(n) + " elements");
        const bool sum = std::string(k) == "reduce_sum";
        // Sums of n elements in another order: relative to sqrt(n).
        const double tol = !sum ? 0
                           : t == DType::kBF16 ? kBf16Tol
                                               : std::max(1e-5, 1e-6 * std::sqrt(double(n)));
        compare(k, a, {{t, c.shape, randomValues(n, 90)}}, {{t, outShape, {}}},
                tol);
      }
  }
}

/// Deterministic scatter_add: 5000 indices (five tiles of the sort) into
/// 1000 rows (two 8-bit digits), most of them repeats of 50 rows, some
/// negative: the sums are the CPU backend's, which adds in index order, to
/// the bit, and the same on every run.
TEST_F(CudaKernels, ScatterAddIsTheCpuSumOnEveryRun) {
  const int64_t count = 5000, size = 1000;
  std::vector<float> idx(count);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t row = (i * 7919) % 50 + (i % 97 == 0 ? 500 : 0);
    idx[i] = float(i % 3 == 0 ? row - size : row);
  }
  Attrs a;
  a.set("axis", int64_t(0));
  a.set("dim_size", size);
  // Rows of 40: 16-byte packs; of 33: an element a thread.
  for (int64_t inner : {33, 40})
    for (DType d : {DType::kF32, DType::kBF16, DType::kF64, DType::kI64}) {
      std::vector<float> upd = randomValues(count * inner, 50, 3.f);
      if (d == DType::kI64)
        for (float &v : upd)
          v = std::round(v * 1000);
      const std::vector<Operand> in = {{d, {count, inner}, upd},
                                       {DType::kI32, {count}, idx}};
      const std::vector<Operand> out = {{d, {size, inner}, {}}};
      compare("scatter_add", a, in, out, 0);
      auto first = run(*gpu, "scatter_add", a, in, out);
      auto second = run(*gpu, "scatter_add", a, in, out, nullptr, 2);
      EXPECT_EQ(first, second) << dtypeName(d);
    }
  // Scattered along a middle axis, i64 indices.
  Attrs mid;
  mid.set("axis", int64_t(1));
  mid.set("dim_size", int64_t(7));
  std::vector<float> few(40);
  for (int i = 0; i < 40; ++i)
    few[i] = float((i * 3) % 7);
  for (int64_t inner : {5, 64})
    compare("scatter_add", mid,
            {{DType::kF32, {3, 40, inner}, randomValues(120 * inner, 51)},
             {DType::kI64, {40}, few}},
            {{DType::kF32, {3, 7, inner}, {}}}, 0);
}

/// gather as the CPU's: rows of 16-byte packs (bf16 rows of 40, f32 of 36),
/// rows an element at a time (33), short rows by element (3); an inner
/// axis; negative indices; a bad index reported with its position.
TEST_F(CudaKernels, GatherRowsLikeTheCpu) {
  std::vector<float> idx = {3, -1, 0, 49, 7, -50, 12};
  for (DType it : {DType::kI32, DType::kI64})
    for (auto [d, inner] : {std::pair{DType::kBF16, int64_t(40)},
                            {DType::kF32, int64_t(36)},
                            {DType::kF32, int64_t(33)},
                            {DType::kF16, int64_t(3)}}) {
      compare("gather", intAttr("axis", 0),
              {{d, {50, inner}, randomValues(50 * inner, 53)}, {it, {7}, idx}},
              {{d, {7, inner}, {}}}, 0);
      compare(
          "gather", intAttr("axis", 1),
          {{d, {2, 50, inner}, randomValues(100 * inner, 54)}, {it, {7}, idx}},
          {{d, {2, 7, inner}, {}}}, 0);
    }
  Status synced;
  run(*gpu, "gather", intAttr("axis", 0),
      {{DType::kF32, {10, 64}, randomValues(640, 55)},
       {DType::kI64, {3}, {1, 12, 2}}},
      {{DType::kF32, {3, 64}, {}}}, &synced);
  ASSERT_FALSE(synced.isOk());
  EXPECT_NE(synced.message().find("index 12 at position 1"), std::string::npos)
      << synced.message();
}

TEST_F(CudaKernels, ScatterAddBadIndexIsReported) {
  Attrs a;
  a.set("axis", int64_t(0));
  a.set("dim_size", int64_t(10));
  Status synced;
  run(*gpu, "scatter_add", a,
      {{DType::kF32, {4, 2}, randomValues(8, 52)},
       {DType::kI64, {4}, {1, 2, 12, 3}}},
      {{DType::kF32, {10, 2}, {}}}, &synced);
  ASSERT_FALSE(synced.isOk());
  EXPECT_NE(synced.message().find("scatter_add at 'test': index 12 at "
                                  "position 2"),
            std::string::npos)
      << synced.message();
}

/// Integer div and rem by zero: an error naming the node, as the CPU
/// backend's (which reports it before writing anything).
TEST_F(CudaKernels, IntegerDivisionByZeroIsReported) {
  std::vector<float> a = {7, -7, 9, 3}, b = {2, 0, -1, 5};
  for (const char *k : {"div", "rem"})
    for (DType d : {DType::kI32, DType::kI64}) {
      Status gpuStatus;
      run(*gpu, k, Attrs(), {{d, {4}, a}, {d, {4}, b}}, {{d, {4}, {}}},
          &gpuStatus);
      ASSERT_FALSE(gpuStatus.isOk()) << k;
      // The CPU backend's message for the same instruction.
      KernelContext ctx;
      ctx.kernel = k;
      ctx.location = "test";
      std::vector<int64_t> av(a.begin(), a.end()), bv(b.begin(), b.end()),
          out(4);
      std::vector<int32_t> a32(a.begin(), a.end()), b32(b.begin(), b.end()),
          out32(4);
      const bool wide = d == DType::kI64;
      ctx.inputs = {makeView(wide ? (void *)av.data() : a32.data(), d, {4}),
                    makeView(wide ? (void *)bv.data() : b32.data(), d, {4})};
      ctx.outputs = {makeView(wide ? (void *)out.data() : out32.data(), d, {4})};
      auto fn = (*cpu->kernels().find(k))(ctx);
      ASSERT_TRUE(fn.isOk());
      Status cpuStatus = fn.value()();
      ASSERT_FALSE(cpuStatus.isOk());
      EXPECT_EQ(gpuStatus.code(), cpuStatus.code()) << k;
      EXPECT_EQ(gpuStatus.message(), cpuStatus.message()) << k;
      // Reported once: the slot is clear for the next run.
      EXPECT_TRUE(gpu->synchronize().isOk());
    }
  // Without a zero divisor both agree element by element (INT_MIN / -1
  // wraps; the remainder takes the dividend's sign).
  std::vector<float> x = {-2147483648.f, 17, -17, 5, 0}, y = {-1, 5, 5, -3, 4};
  for (const char *k : {"div", "rem"})
    compare(k, Attrs(), {{DType::kI32, {5}, x}, {DType::kI32, {5}, y}},
            {{DType::kI32, {5}, {}}}, 0);
}

TEST_F(CudaKernels, IntegerPowLikeTheCpu) {
  std::vector<float> base, exp;
  for (int b = -5; b <= 5; ++b)
    for (int e = -3; e <= 40; ++e) {
      base.push_back(float(b));
      exp.push_back(float(e));
    }
  const int64_t n = int64_t(base.size());
  for (DType d : {DType::kI32, DType::kI64})
    compare("pow", Attrs(), {{d, {n}, base}, {d, {n}, exp}}, {{d, {n}, {}}},
            0);
}

/// f64 rows sum in double, as the CPU backend's.
TEST_F(CudaKernels, F64SoftmaxNormsAndCrossEntropy) {
  const double tol = 1e-12;
  const DType f64 = DType::kF64;
  for (int64_t cols : {100, 3000}) {
    Attrs a;
    a.set("dim", int64_t(-1));
    for (const char *k : {"softmax", "log_softmax"})
      compare(k, a, {{f64, {5, cols}, randomValues(5 * cols, 60, 5)}},
              {{f64, {5, cols}, {}}}, tol);
    for (const char *k : {"softmax_grad", "log_softmax_grad"})
      compare(k, a,
              {{f64, {5, cols}, randomValues(5 * cols, 61)},
               {f64, {5, cols}, randomValues(5 * cols, 62)}},
              {{f64, {5, cols}, {}}}, tol);
  }
  Attrs mid;
  mid.set("dim", int64_t(0));
  compare("softmax", mid, {{f64, {30, 7}, randomValues(210, 63, 5)}},
          {{f64, {30, 7}, {}}}, tol);
  Attrs norm;
  norm.set("axis", int64_t(-1));
  norm.set("epsilon", 1e-5);
  const int64_t rows = 300, cols = 96;
  std::vector<float> rstd = randomValues(rows, 64);
  for (float &r : rstd)
    r = 0.5f + std::fabs(r);
  for (DType stat : {f64, DType::kF32}) {
    compare("layer_norm", norm,
            {{f64, {rows, cols}, randomValues(rows * cols, 65, 3)},
             {f64, {cols}, randomValues(cols, 66)},
             {f64, {cols}, randomValues(cols, 67)}},
            {{f64, {rows, cols}, {}}, {stat, {rows}, {}}, {stat, {rows}, {}}},
            stat == f64 ? tol : 1e-6);
    compare("rms_norm", norm,
            {{f64, {rows, cols}, randomValues(rows * cols, 68, 3)},
             {f64, {cols}, randomValues(cols, 69)}},
            {{f64, {rows, cols}, {}}, {stat, {rows}, {}}}, stat == f64 ? tol : 1e-6);
  }
  Attrs normGrad; // the gradients take the statistics, not epsilon
  normGrad.set("axis", int64_t(-1));
  compare("layer_norm_grad", normGrad,
          {{f64, {rows, cols}, randomValues(rows * cols, 70, 3)},
           {f64, {cols}, randomValues(cols, 71)},
           {f64, {rows}, randomValues(rows, 72)},
           {f64, {rows}, rstd},
           {f64, {rows, cols}, randomValues(rows * cols, 73)}},
          {{f64, {rows, cols}, {}}, {f64, {cols}, {}}, {f64, {cols}, {}}},
          1e-11);
  compare("rms_norm_grad", normGrad,
          {{f64, {rows, cols}, randomValues(rows * cols, 74, 3)},
           {f64, {cols}, randomValues(cols, 75)},
           {f64, {rows}, rstd},
           {f64, {rows, cols}, randomValues(rows * cols, 76)}},
          {{f64, {rows, cols}, {}}, {f64, {cols}, {}}}, 1e-11);
  // The parameter gradients alone (what a fused dx leaves as a kernel).
  compare("layer_norm_param_grad", normGrad,
          {{f64, {rows, cols}, randomValues(rows * cols, 70, 3)},
           {f64, {rows}, randomValues(rows, 72)},
           {f64, {rows}, rstd},
           {f64, {rows, cols}, randomValues(rows * cols, 73)}},
          {{f64, {cols}, {}}, {f64, {cols}, {}}}, 1e-11);
  compare("rms_norm_param_grad", normGrad,
          {{f64, {rows, cols}, randomValues(rows * cols, 74, 3)},
           {f64, {rows}, rstd},
           {f64, {rows, cols}, randomValues(rows * cols, 76)}},
          {{f64, {cols}, {}}}, 1e-11);
  std::vector<float> labels(16);
  for (int i = 0; i < 16; ++i)
    labels[i] = float((i * 37) % 500);
  labels[3] = -100;
  compare("cross_entropy", Attrs(),
          {{f64, {16, 500}, randomValues(16 * 500, 77, 3)},
           {DType::kI64, {16}, labels}},
          {{f64, {16}, {}}}, tol);
  compare("cross_entropy_grad", Attrs(),
          {{f64, {16, 500}, randomValues(16 * 500, 77, 3)},
           {DType::kI64, {16}, labels},
           {f64, {16}, randomValues(16, 78)}},
          {{f64, {16, 500}, {}}}, tol);
  Attrs drop;
  drop.set("ratio", 0.25);
  drop.set("seed", int64_t(11));
  compare("dropout", drop,
          {{f64, {4096}, randomValues(4096, 79)}, {DType::kI64, {1}, {3}}},
          {{f64, {4096}, {}}, {DType::kBool, {4096}, {}}}, 0);
}

/// dgraph.random draws the CPU backend's values from the same counters in
/// every float type, whole and as a block of a split tensor (offsets): only
/// the device's log and cos may round differently.
TEST_F(CudaKernels, RandomLikeTheCpu) {
  const std::pair<DType, double> types[] = {{DType::kF64, 1e-13},
                                            {DType::kF32, kF32Tol},
                                            {DType::kF16, 1e-3},
                                            {DType::kBF16, kBf16Tol}};
  for (auto [dt, tol] : types)
    for (const char *distribution : {"uniform", "normal"}) {
      Attrs draw;
      draw.set("distribution", std::string(distribution));
      draw.set("shift", 0.5);
      draw.set("scale", 2.0);
      draw.set("seed", int64_t(11));
      compare("random", draw, {{DType::kI64, {1}, {3}}}, {{dt, {64, 100}, {}}},
              tol);
      // Rows 32..63 and columns 50..99 of a [64, 100] draw.
      draw.set("global_shape", std::vector<int64_t>{64, 100});
      compare("random", draw,
              {{DType::kI64, {1}, {3}}, {DType::kI64, {2}, {32, 50}}},
              {{dt, {32, 50}, {}}}, tol);
    }
}

/// grid_sample and its gradient read the CPU kernels' taps (one header):
/// every mode and padding, grid points past the borders ([-1.2, 1.2]), in
/// 2, 1 and 3 spatial dimensions, in f64, f32 and bf16 (the gradient's
/// atomics through a float copy).
TEST_F(CudaKernels, GridSampleAndGradLikeTheCpu) {
  struct Shapes {
    std::vector<int64_t> x, g, y;
  };
  const std::pair<DType, double> types[] = {
      {DType::kF64, 1e-12}, {DType::kF32, 1e-4}, {DType::kBF16, 4 * kBf16Tol}};
  for (const Shapes &shapes :
       {Shapes{{2, 3, 5, 7}, {2, 4, 6, 2}, {2, 3, 4, 6}},
        Shapes{{2, 3, 9}, {2, 7, 1}, {2, 3, 7}},
        Shapes{{1, 2, 3, 4, 5}, {1, 2, 3, 4, 3}, {1, 2, 2, 3, 4}}})
    for (auto [dt, tol] : types)
      for (const char *mode : {"bilinear", "nearest", "bicubic"})
        for (const char *padding : {"zeros", "border", "reflection"})
          for (int64_t align : {0, 1}) {
            const std::vector<int64_t> &x = shapes.x, &g = shapes.g,
                                       &y = shapes.y;
            SCOPED_TRACE(std::to_string(x.size() - 2) + "-D " +
                         std::string(dtypeName(dt)) + " " + mode + " " +
                         padding + " align " + std::to_string(align));
            Attrs a;
            a.set("mode", std::string(mode));
            a.set("padding_mode", std::string(padding));
            a.set("align_corners", align);
            std::vector<float> xv = randomValues(cpu::product(x), 31);
            std::vector<float> gv = randomValues(cpu::product(g), 32, 1.2f);
            compare("grid_sample", a, {{dt, x, xv}, {dt, g, gv}}, {{dt, y, {}}},
                    tol);
            compare("grid_sample_grad", a,
                    {{dt, y, randomValues(cpu::product(y), 33)},
                     {dt, x, xv},
                     {dt, g, gv}},
                    {{dt, x, {}}, {dt, g, {}}}, tol);
          }
}

/// roi_align and its gradient read the CPU kernels' samples (one header):
/// both modes, fixed and adaptive sampling grids, regions past the borders,
/// in f64, f32 and bf16 (the gradient's atomics through a float copy).
TEST_F(CudaKernels, RoiAlignAndGradLikeTheCpu) {
  const std::vector<int64_t> x{2, 3, 8, 10}, r{5, 4}, b{5}, y{5, 3, 3, 2};
  const std::vector<float> boxes = {2,  3,  13, 11, -6, -4, 5, 7, 10, 10,
                                    24, 22, 6,  6,  6,  6,  0, 0, 2,  60};
  const std::vector<float> batch = {0, 1, 0, 1, 0};
  const std::pair<DType, double> types[] = {
      {DType::kF64, 1e-12}, {DType::kF32, 1e-4}, {DType::kBF16, 4 * kBf16Tol}};
  for (auto [dt, tol] : types)
    for (const char *mode : {"avg", "max"})
      for (int64_t ratio : {0, 2}) {
        SCOPED_TRACE(std::string(dtypeName(dt)) + " " + mode + " ratio " +
                     std::to_string(ratio));
        Attrs a;
        a.set("mode", std::string(mode));
        a.set("output_height", int64_t(3));
        a.set("output_width", int64_t(2));
        a.set("sampling_ratio", ratio);
        a.set("spatial_scale", 0.5);
        a.set("half_pixel", int64_t(1));
        std::vector<float> xv = randomValues(cpu::product(x), 35);
        compare("roi_align", a,
                {{dt, x, xv}, {dt, r, boxes}, {DType::kI64, b, batch}},
                {{dt, y, {}}}, tol);
        compare("roi_align_grad", a,
                {{dt, y, randomValues(cpu::product(y), 36)},
                 {dt, x, xv},
                 {dt, r, boxes},
                 {DType::kI64, b, batch}},
                {{dt, x, {}}}, tol);
      }
}

/// Nearest sampling of an identity grid that halves 194 columns (97 output
/// columns: align_corners 0 puts every one on a half-pixel boundary) picks
/// the CPU's pixels: the coordinates are computed op by op as on the CPU
/// (GridSampleKernels.cu without contraction; as one FMA, column 0's 0.5
/// read 0.50000006 and took pixel 1).
TEST_F(CudaKernels, GridSampleNearestAtHalfPixelsLikeTheCpu) {
  const int64_t w = 194, wo = 97;
  std::vector<float> grid;
  for (int64_t j = 0; j < wo; ++j) {
    grid.push_back(float((2.0 * double(j) + 1.0) / double(wo) - 1.0));
    grid.push_back(0.0f);
  }
  Attrs a;
  a.set("mode", std::string("nearest"));
  a.set("padding_mode", std::string("zeros"));
  a.set("align_corners", int64_t(0));
  for (DType dt : {DType::kF32, DType::kF64}) {
    SCOPED_TRACE(dtypeName(dt));
    compare(
        "grid_sample", a,
        {{dt, {1, 1, 1, w}, randomValues(w, 34)}, {dt, {1, 1, wo, 2}, grid}},
        {{dt, {1, 1, 1, wo}, {}}}, 0.0);
  }
}

/// cuBLASLt is told the operands' real alignment: views that start 4, 12
/// and 8 bytes past an allocation multiply like aligned ones.
TEST_F(CudaKernels, MatmulOfViewsAtAnyAlignment) {
  Operand lhs{DType::kF32, {3, 17, 24}, randomValues(3 * 17 * 24, 80), 1};
  Operand rhs{DType::kF32, {3, 24, 40}, randomValues(3 * 24 * 40, 81), 3};
  Operand out{DType::kF32, {3, 17, 40}, {}, 2};
  compare("matmul", Attrs(), {lhs, rhs}, {out}, 1e-4);
  Operand a{DType::kBF16, {64, 128}, randomValues(64 * 128, 82), 1};
  Operand b{DType::kBF16, {128, 96}, randomValues(128 * 96, 83), 0};
  Operand c{DType::kBF16, {64, 96}, {}, 3};
  compare("matmul", Attrs(), {a, b}, {c}, kBf16Tol * 4);
}

/// One attention call's operands: q [lead, sq, d], k [lead, sk, d], v
/// [lead, sk, dv], dout [lead, sq, dv] and a mask of shape `mask` (empty:
/// none), values rounded to `t` (the CPU reference computes in f32 or f64
/// on the same values).
struct AttentionCase {
  std::vector<int64_t> lead;
  int64_t sq, sk, d, dv;
  bool causal;
  std::vector<int64_t> mask;
};

std::vector<int64_t> attentionShape(const AttentionCase &c, int64_t rows,
                                    int64_t cols) {
  std::vector<int64_t> s = c.lead;
  s.push_back(rows);
  s.push_back(cols);
  return s;
}

/// `values` as `t` holds them (f16/bf16 rounding; f32/f64 unchanged).
std::vector<float> roundedTo(DType t, std::vector<float> values) {
  for (float &v : values)
    v = t == DType::kBF16  ? bf16ToFloat(floatToBf16(v))
        : t == DType::kF16 ? halfToFloat(floatToHalf(v))
                           : v;
  return values;
}

/// The shapes, values (rounded to `t`; the seeds `seed` to `seed + 4`) and
/// attributes of one attention call of `c`.
struct AttentionOperands {
  std::vector<int64_t> qs, ks, vs, os, ls;
  std::vector<float> q, k, v, dout, mask;
  Attrs attrs;
};
AttentionOperands attentionOperands(const AttentionCase &c, DType t,
                                    unsigned seed) {
  AttentionOperands o;
  o.qs = attentionShape(c, c.sq, c.d);
  o.ks = attentionShape(c, c.sk, c.d);
  o.vs = attentionShape(c, c.sk, c.dv);
  o.os = attentionShape(c, c.sq, c.dv);
  o.ls = c.lead;
  o.ls.push_back(c.sq);
  o.q = roundedTo(t, randomValues(cpu::product(o.qs), seed, 2.f));
  o.k = roundedTo(t, randomValues(cpu::product(o.ks), seed + 1, 2.f));
  o.v = roundedTo(t, randomValues(cpu::product(o.vs), seed + 2));
  o.dout = roundedTo(t, randomValues(cpu::product(o.os), seed + 3));
  if (!c.mask.empty()) {
    o.mask = randomValues(cpu::product(c.mask), seed + 4, 3.f);
    for (size_t i = 0; i < o.mask.size(); i += 7)
      o.mask[i] = -1e9f; // some keys masked out
    o.mask = roundedTo(t, o.mask);
  }
  o.attrs.set("scale", 1.0 / std::sqrt(double(c.d)));
  o.attrs.set("causal", int64_t(c.causal));
  return o;
}

/// attention and attention_grad on the GPU in `t` against the CPU kernels
/// in f32 (f64 for f64) on the same values, within `tol` relative to
/// max(1, |cpu|); the GPU's second run is bitwise its first.
void compareAttention(Device &gpu, Device &cpu, const AttentionCase &c, DType t,
                      double tol) {
  const DType ref = t == DType::kF64 ? DType::kF64 : DType::kF32;
  const AttentionOperands ops = attentionOperands(c, t, 61);
  const auto &qs = ops.qs, &ks = ops.ks, &vs = ops.vs, &os = ops.os,
             &ls = ops.ls;
  const auto &q = ops.q, &k = ops.k, &v = ops.v, &dout = ops.dout,
             &mask = ops.mask;
  const Attrs &a = ops.attrs;
  auto inputs = [&](DType d) {
    std::vector<Operand> in = {{d, qs, q}, {d, ks, k}, {d, vs, v}};
    if (!c.mask.empty())
      in.push_back({d, c.mask, mask});
    return in;
  };
  auto forwardOut = [&](DType d) {
    return std::vector<Operand>{{d, os, {}}, {cpu::logsumexpDType(d), ls, {}}};
  };
  // `kernel` on the CPU in `ref` (its outputs into `want`) and twice on the
  // GPU in `t`: the GPU's runs bitwise equal, each output near the CPU's.
  auto check = [&](const char *kernel, auto in, auto out, size_t outputs,
                   std::vector<std::vector<double>> &want) {
    want = run(cpu, kernel, a, in(ref), out(ref));
    auto got = run(gpu, kernel, a, in(t), out(t), nullptr, 2);
    auto again = run(gpu, kernel, a, in(t), out(t));
    ASSERT_EQ(want.size(), outputs);
    ASSERT_EQ(got.size(), outputs);
    EXPECT_EQ(got, again) << kernel << ": a second run differs";
    for (size_t o = 0; o < outputs; ++o)
      for (size_t i = 0; i < want[o].size(); ++i)
        ASSERT_NEAR(got[o][i], want[o][i],
                    tol * std::max(1.0, std::fabs(want[o][i])))
            << kernel << " output " << o << " element " << i;
  };
  std::vector<std::vector<double>> want, gwant;
  check("attention", inputs, forwardOut, 2, want);
  if (::testing::Test::HasFatalFailure())
    return;
  // The gradient from the CPU's forward results (rounded to t).
  std::vector<float> out(want[0].begin(), want[0].end()),
      lse(want[1].begin(), want[1].end());
  out = roundedTo(t, out);
  auto gradInputs = [&](DType d) {
    std::vector<Operand> in = {{d, qs, q},
                               {d, ks, k},
                               {d, vs, v},
                               {d, os, out},
                               {cpu::logsumexpDType(d), ls, lse},
                               {d, os, dout}};
    if (!c.mask.empty())
      in.push_back({d, c.mask, mask});
    return in;
  };
  auto gradOut = [&](DType d) {
    return std::vector<Operand>{{d, qs, {}}, {d, ks, {}}, {d, vs, {}}};
  };
  check("attention_grad", gradInputs, gradOut, 3, gwant);
}

/// The tiled attention kernels against the CPU's: every row split (head
/// dimensions 16 to 512, D != Dv), causal and not, Sq != Sk, rows and
/// keys not multiples of a block or a tile, masks broadcast along some
/// leading dimensions and along the queries, keys masked out; f32, f64,
/// bf16 and f16.
TEST_F(CudaKernels, AttentionAndGradMatchTheCpu) {
  const AttentionCase cases[] = {
      {{2, 3}, 37, 37, 16, 16, true, {}},
      {{2, 3}, 130, 130, 64, 64, true, {}},
      {{5}, 50, 70, 24, 40, false, {5, 1, 70}},
      {{2, 2}, 33, 65, 96, 96, false, {1, 2, 33, 65}},
      {{2}, 70, 70, 200, 160, true, {}},
      {{1, 2}, 40, 40, 300, 512, true, {1, 2, 40, 40}},
      // f16/bf16 on the tensor cores: 8 fragments a row, tiles of 32 keys;
      // fewer queries than keys, a mask broadcast over the queries, d
      // padded to 80.
      {{1, 2}, 100, 100, 128, 128, true, {}},
      {{3}, 20, 90, 72, 128, false, {3, 1, 90}},
  };
  for (const AttentionCase &c : cases) {
    SCOPED_TRACE("sq " + std::to_string(c.sq) + " sk " + std::to_string(c.sk) +
                 " d " + std::to_string(c.d) + " dv " + std::to_string(c.dv));
    {
      SCOPED_TRACE("f32");
      compareAttention(*gpu, *cpu, c, DType::kF32, 1e-4);
    }
    {
      SCOPED_TRACE("bf16");
      compareAttention(*gpu, *cpu, c, DType::kBF16, 3e-2);
    }
  }
  SCOPED_TRACE("f64 and f16");
  compareAttention(*gpu, *cpu, cases[1], DType::kF64, 1e-10);
  compareAttention(*gpu, *cpu, cases[2], DType::kF64, 1e-10);
  compareAttention(*gpu, *cpu, cases[1], DType::kF16, 1e-2);
  compareAttention(*gpu, *cpu, cases[6], DType::kF16, 1e-2);
  compareAttention(*gpu, *cpu, cases[7], DType::kF16, 1e-2);
}

/// The calls cuDNN's fused flash attention takes (f16 and bf16, no mask,
/// D == Dv a multiple of 8 up to 128) run there, not on dtcc's kernels
/// (DTCC_CUDA_ATTENTION=cudnn makes a fallback an error), and match the
/// CPU: causal and not, Sq != Sk both ways, rows and keys not multiples of
/// a tile; the backward from the CPU's logsumexp, so cuDNN's statistics
/// are dtcc's. Its backward is cuDNN's deterministic kernel: the second
/// run is bitwise the first.
TEST_F(CudaKernels, CudnnAttentionMatchesTheCpu) {
#ifndef DTCC_HAVE_CUDNN
  GTEST_SKIP() << "built without cuDNN";
#else
  const AttentionCase cases[] = {
      {{2, 3}, 130, 130, 64, 64, true, {}},
      {{4}, 96, 160, 64, 64, false, {}},
      {{1, 2}, 200, 72, 128, 128, false, {}},
      {{3}, 256, 256, 128, 128, true, {}},
      {{2}, 40, 40, 32, 32, true, {}},
  };
  ASSERT_EQ(setenv("DTCC_CUDA_ATTENTION", "cudnn", 1), 0);
  for (const AttentionCase &c : cases) {
    SCOPED_TRACE("sq " + std::to_string(c.sq) + " sk " + std::to_string(c.sk) +
                 " d " + std::to_string(c.d) +
                 (c.causal ? " causal" : ""));
    {
      SCOPED_TRACE("bf16");
      compareAttention(*gpu, *cpu, c, DType::kBF16, 3e-2);
    }
    {
      SCOPED_TRACE("f16");
      compareAttention(*gpu, *cpu, c, DType::kF16, 1e-2);
    }
  }
  unsetenv("DTCC_CUDA_ATTENTION");
#endif
}

/// Sets DTCC_CUDA_ATTENTION to `value` (null: unset) until destroyed, which
/// unsets it, so that a failing test leaves the next one the default.
struct AttentionEnv {
  explicit AttentionEnv(const char *value) {
    if (value)
      setenv("DTCC_CUDA_ATTENTION", value, 1);
    else
      unsetenv("DTCC_CUDA_ATTENTION");
  }
  ~AttentionEnv() { unsetenv("DTCC_CUDA_ATTENTION"); }
  AttentionEnv(const AttentionEnv &) = delete;
  AttentionEnv &operator=(const AttentionEnv &) = delete;
};

/// Where an operand [B..., rows, width] lies in its buffer: its dimensions
/// stored in the order `order` (outermost first, the last one last), each
/// stored `pad` elements wider than its size (empty: none), from element
/// `offset` on. Operands may share a buffer, as the slices of a packed
/// projection do.
struct Place {
  int buffer = 0;
  std::vector<int> order;
  std::vector<int64_t> pad = {};
  int64_t offset = 0;
};

/// [B, S, H, D] storage read as [B, H, S, D] (the heads' transpose), its
/// rows `padD` elements wider, from element `offset`.
Place headsLast(int buffer, int64_t padD = 0, int64_t offset = 0) {
  return {buffer, {0, 2, 1, 3}, {0, 0, 0, padD}, offset};
}
/// Slot `slot` (0: q, 1: k, 2: v) of a packed projection [B, S, 3, H, D]
/// of `heads` heads of `d`, read as [B, H, S, D].
Place packedSlot(int buffer, int slot, int64_t heads, int64_t d) {
  return {buffer, {0, 2, 1, 3}, {0, 2 * heads, 0, 0}, slot * heads * d};
}

/// A view of `shape` into buffer `buffer`.
struct BufferView {
  int buffer = 0;
  std::vector<int64_t> shape, strides;
  int64_t offset = 0;
};

BufferView viewAt(const std::vector<int64_t> &shape, const Place &p) {
  BufferView v{p.buffer, shape, std::vector<int64_t>(shape.size()), p.offset};
  int64_t step = 1;
  for (size_t k = p.order.size(); k-- > 0;) {
    const int dim = p.order[k];
    v.strides[size_t(dim)] = step;
    step *= shape[size_t(dim)] + (p.pad.empty() ? 0 : p.pad[size_t(dim)]);
  }
  return v;
}

/// The buffer offsets of `v`'s elements in row-major order.
std::vector<int64_t> elementsOf(const BufferView &v) {
  std::vector<int64_t> at{v.offset};
  for (size_t d = 0; d < v.shape.size(); ++d) {
    std::vector<int64_t> next;
    next.reserve(at.size() * size_t(v.shape[d]));
    for (int64_t base : at)
      for (int64_t i = 0; i < v.shape[d]; ++i)
        next.push_back(base + i * v.strides[d]);
    at = std::move(next);
  }
  return at;
}

/// Binds `kernel` on `device` with `inputs` and `outputs` viewing device
/// copies of `buffers` (Operands of shape {n}) and runs it once; returns
/// every buffer's contents afterwards. With `bound`, a binding error is
/// stored there instead of failing the test (and nothing runs).
std::vector<std::vector<double>>
runOnViews(Device &device, const std::string &kernel, const Attrs &attrs,
           const std::vector<Operand> &buffers,
           const std::vector<BufferView> &inputs,
           const std::vector<BufferView> &outputs, Status *bound = nullptr) {
  KernelContext ctx;
  ctx.kernel = kernel;
  ctx.location = "test";
  ctx.attrs = attrs;
  Reservation scratch(device);
  ctx.scratch = &scratch.plan;
  std::vector<void *> data;
  for (const Operand &b : buffers) {
    const int64_t n = b.shape[0], esz = dtypeSize(b.dtype);
    data.push_back(device.allocate(n * esz).value());
    std::vector<uint8_t> host(size_t(n * esz));
    for (int64_t i = 0; i < n; ++i)
      fromFloat(b.dtype, host.data(), i, b.values[size_t(i)]);
    EXPECT_TRUE(
        device.copyHostToDevice(data.back(), host.data(), host.size()).isOk());
  }
  auto view = [&](const BufferView &v) {
    const DType t = buffers[size_t(v.buffer)].dtype;
    TensorView tv = makeView(static_cast<char *>(data[size_t(v.buffer)]) +
                                 v.offset * dtypeSize(t),
                             t, v.shape);
    tv.strides = v.strides;
    return tv;
  };
  for (const BufferView &v : inputs)
    ctx.inputs.push_back(view(v));
  for (const BufferView &v : outputs)
    ctx.outputs.push_back(view(v));
  std::vector<std::vector<double>> result;
  auto fn = (*device.kernels().find(kernel))(ctx);
  if (bound)
    *bound = fn.status();
  else
    EXPECT_TRUE(fn.isOk()) << fn.status().toString();
  if (fn.isOk()) {
    scratch.reserve();
    Status s = fn.value()();
    EXPECT_TRUE(s.isOk()) << s.toString();
    Status sync = device.synchronize();
    EXPECT_TRUE(sync.isOk()) << sync.toString();
    for (size_t b = 0; b < buffers.size(); ++b) {
      const int64_t n = buffers[b].shape[0];
      std::vector<uint8_t> host(size_t(n * dtypeSize(buffers[b].dtype)));
      EXPECT_TRUE(
          device.copyDeviceToHost(host.data(), data[b], host.size()).isOk());
      std::vector<double> f(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i)
        f[size_t(i)] = toDouble(buffers[b].dtype, host.data(), i);
      result.push_back(std::move(f));
    }
  }
  for (void *p : data)
    device.deallocate(p);
  return result;
}

/// One operand of a strided call: where it lies (null: contiguous, in a
/// buffer of its own), its type, shape and (inputs) values.
struct StridedArg {
  const Place *place;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<float> values = {};
};

/// The buffers and views of a call's operands: the places' buffers (in
/// order of first use), then one per contiguous operand, each reaching its
/// views' last element and 8 more. Output buffers hold kSentinel, input
/// buffers kPoison outside the views (a read of either shows in the
/// results).
constexpr float kSentinel = -448.f, kPoison = 1000.f;
struct StridedCall {
  std::vector<Operand> buffers;
  std::vector<bool> isOutput;
  std::vector<BufferView> ins, outs;
};
StridedCall layOut(const std::vector<StridedArg> &ins,
                   const std::vector<StridedArg> &outs) {
  StridedCall call;
  std::map<int, int> index;
  auto add = [&](const StridedArg &arg, bool output) {
    BufferView view{int(call.buffers.size()), arg.shape,
                    contiguousStrides(arg.shape), 0};
    if (arg.place) {
      view = viewAt(arg.shape, *arg.place);
      auto [it, fresh] =
          index.emplace(arg.place->buffer, int(call.buffers.size()));
      view.buffer = it->second;
      if (fresh) {
        call.buffers.push_back({arg.dtype, {0}, {}});
        call.isOutput.push_back(output);
      }
    } else {
      call.buffers.push_back({arg.dtype, {0}, {}});
      call.isOutput.push_back(output);
    }
    int64_t reach = view.offset + 1;
    for (size_t d = 0; d < view.shape.size(); ++d)
      reach += (view.shape[d] - 1) * view.strides[d];
    int64_t &size = call.buffers[size_t(view.buffer)].shape[0];
    size = std::max(size, reach + 8);
    (output ? call.outs : call.ins).push_back(view);
  };
  for (const StridedArg &arg : ins)
    add(arg, false);
  for (const StridedArg &arg : outs)
    add(arg, true);
  for (size_t b = 0; b < call.buffers.size(); ++b)
    call.buffers[b].values.assign(size_t(call.buffers[b].shape[0]),
                                  call.isOutput[b] ? kSentinel : kPoison);
  for (size_t i = 0; i < ins.size(); ++i) {
    const std::vector<int64_t> at = elementsOf(call.ins[i]);
    std::vector<float> &values = call.buffers[size_t(call.ins[i].buffer)].values;
    for (size_t j = 0; j < at.size(); ++j)
      values[size_t(at[j])] = ins[i].values[j];
  }
  return call;
}

/// `kernel` with `ins` and `outs` laid out as their places say: each
/// output within `tol` of `want` relative to max(1, |want|) (0: bitwise
/// equal), the output buffers' elements outside the views still kSentinel
/// and the input buffers unchanged.
void checkStridedCall(Device &gpu, const char *kernel, const Attrs &a,
                      const std::vector<StridedArg> &ins,
                      const std::vector<StridedArg> &outs,
                      const std::vector<std::vector<double>> &want,
                      double tol) {
  SCOPED_TRACE(kernel);
  const StridedCall call = layOut(ins, outs);
  auto got = runOnViews(gpu, kernel, a, call.buffers, call.ins, call.outs);
  ASSERT_EQ(got.size(), call.buffers.size());
  ASSERT_EQ(want.size(), outs.size());
  std::vector<std::vector<bool>> inView(call.buffers.size());
  for (size_t o = 0; o < outs.size(); ++o) {
    const BufferView &v = call.outs[o];
    const std::vector<int64_t> at = elementsOf(v);
    ASSERT_EQ(at.size(), want[o].size());
    inView[size_t(v.buffer)].resize(got[size_t(v.buffer)].size());
    for (size_t j = 0; j < at.size(); ++j) {
      inView[size_t(v.buffer)][size_t(at[j])] = true;
      const double g = got[size_t(v.buffer)][size_t(at[j])], w = want[o][j];
      if (tol == 0)
        ASSERT_TRUE(g == w || (std::isnan(g) && std::isnan(w)))
            << "output " << o << " element " << j << ": got " << g
            << ", the contiguous call's " << w;
      else
        ASSERT_NEAR(g, w, tol * std::max(1.0, std::fabs(w)))
            << "output " << o << " element " << j;
    }
  }
  for (size_t b = 0; b < got.size(); ++b)
    for (size_t e = 0; e < got[b].size(); ++e)
      if (inView[b].empty() || !inView[b][e])
        ASSERT_EQ(got[b][e], double(call.buffers[b].values[e]))
            << "buffer " << b << " element " << e
            << (call.isOutput[b] ? ": written outside the outputs' views"
                                 : ": an input was written");
}

/// An attention call on strided views: its shapes, and where q, k, v, out
/// (attention's result, attention_grad's input), dout, dq, dk and dv lie
/// (a call's inputs and outputs in different buffers). lse and the mask
/// are contiguous.
struct StridedAttentionCase {
  const char *name;
  AttentionCase shape;
  Place q, k, v, out, dout, dq, dk, dv;
};

/// attention and attention_grad of `c` in `t` on its strided views against
/// the same calls on contiguous operands: outputs within `tol` (0: bitwise
/// equal), nothing written outside the output views. The contiguous calls
/// run under DTCC_CUDA_ATTENTION=`refEnv`, the strided ones under `env`
/// (null: unset); the gradient's out is the contiguous forward's.
void compareStridedAttention(Device &gpu, const StridedAttentionCase &c,
                             DType t, double tol, const char *refEnv,
                             const char *env) {
  SCOPED_TRACE(std::string(c.name) + " " + dtypeName(t));
  const AttentionCase &s = c.shape;
  const AttentionOperands ops = attentionOperands(s, t, 71);
  const auto &qs = ops.qs, &ks = ops.ks, &vs = ops.vs, &os = ops.os,
             &ls = ops.ls;
  const auto &q = ops.q, &k = ops.k, &v = ops.v, &dout = ops.dout,
             &mask = ops.mask;
  const Attrs &a = ops.attrs;
  std::vector<std::vector<double>> want, gwant;
  std::vector<float> out, lse;
  {
    AttentionEnv e(refEnv);
    std::vector<Operand> in = {{t, qs, q}, {t, ks, k}, {t, vs, v}};
    if (!mask.empty())
      in.push_back({t, s.mask, mask});
    want = run(gpu, "attention", a, in,
               {{t, os, {}}, {cpu::logsumexpDType(t), ls, {}}});
    ASSERT_EQ(want.size(), 2u);
    out.assign(want[0].begin(), want[0].end());
    lse.assign(want[1].begin(), want[1].end());
    std::vector<Operand> gin = {{t, qs, q},
                                {t, ks, k},
                                {t, vs, v},
                                {t, os, out},
                                {cpu::logsumexpDType(t), ls, lse},
                                {t, os, dout}};
    if (!mask.empty())
      gin.push_back({t, s.mask, mask});
    gwant = run(gpu, "attention_grad", a, gin,
                {{t, qs, {}}, {t, ks, {}}, {t, vs, {}}});
    ASSERT_EQ(gwant.size(), 3u);
  }
  AttentionEnv e(env);
  std::vector<StridedArg> ins = {{&c.q, t, qs, q}, {&c.k, t, ks, k},
                                 {&c.v, t, vs, v}};
  if (!mask.empty())
    ins.push_back({nullptr, t, s.mask, mask});
  checkStridedCall(gpu, "attention", a, ins,
                   {{&c.out, t, os}, {nullptr, cpu::logsumexpDType(t), ls}},
                   want, tol);
  if (::testing::Test::HasFatalFailure())
    return;
  std::vector<StridedArg> gins = {{&c.q, t, qs, q},
                                  {&c.k, t, ks, k},
                                  {&c.v, t, vs, v},
                                  {&c.out, t, os, out},
                                  {nullptr, cpu::logsumexpDType(t), ls, lse},
                                  {&c.dout, t, os, dout}};
  if (!mask.empty())
    gins.push_back({nullptr, t, s.mask, mask});
  checkStridedCall(gpu, "attention_grad", a, gins,
                   {{&c.dq, t, qs}, {&c.dk, t, ks}, {&c.dv, t, vs}}, gwant,
                   tol);
}

/// A packed projection: q, k, v slices of one [B, S, 3, H, D] buffer, out
/// and dout the heads' transposes of [B, S, H, D], dq, dk, dv written into
/// the slices of one such buffer.
StridedAttentionCase packedCase(const char *name, AttentionCase shape) {
  const int64_t h = shape.lead[1], d = shape.d;
  return {name,
          shape,
          packedSlot(0, 0, h, d),
          packedSlot(0, 1, h, d),
          packedSlot(0, 2, h, d),
          headsLast(1),
          headsLast(2),
          packedSlot(3, 0, h, d),
          packedSlot(3, 1, h, d),
          packedSlot(3, 2, h, d)};
}

/// dtcc's own kernels (DTCC_CUDA_ATTENTION=own) read and write strided
/// views: a packed projection's slices, the heads' transposes with wider
/// rows and views that start anywhere (D not a multiple of 16, odd row
/// strides: the tensor cores' element-by-element staging and stores),
/// three leading dimensions that do not merge, masks broadcast over some
/// of them. f32 (the SIMT kernels) and bf16 (the tensor cores); each
/// output bitwise the contiguous call's, nothing written outside the
/// views.
TEST_F(CudaKernels, AttentionOnStridedViewsMatchesContiguous) {
  const StridedAttentionCase cases[] = {
      packedCase("packed", {{2, 3}, 50, 50, 64, 64, true, {}}),
      {"heads padded and shifted",
       {{2, 3}, 37, 45, 20, 24, false, {2, 1, 37, 45}},
       headsLast(0),
       headsLast(1, 5, 3),
       headsLast(2, 0, 1),
       headsLast(3, 3),
       headsLast(4, 0, 2),
       headsLast(5, 1, 1),
       headsLast(6),
       headsLast(7, 2, 5)},
      // [B, H, S, G, D] storage read as [B, G, H, S, D].
      {"three leading dimensions",
       {{2, 2, 2}, 33, 33, 16, 16, true, {2, 1, 2, 33, 33}},
       {0, {0, 2, 3, 1, 4}},
       {1, {0, 2, 3, 1, 4}},
       {2, {0, 2, 3, 1, 4}},
       {3, {0, 2, 3, 1, 4}},
       {4, {0, 2, 3, 1, 4}},
       {5, {0, 2, 3, 1, 4}},
       {6, {0, 2, 3, 1, 4}},
       {7, {0, 2, 3, 1, 4}}},
  };
  for (const StridedAttentionCase &c : cases)
    for (DType t : {DType::kF32, DType::kBF16}) {
      compareStridedAttention(*gpu, c, t, 0, "own", "own");
      if (HasFatalFailure())
        return;
    }
}

/// cuDNN takes strided views as its tensors' strides
/// (DTCC_CUDA_ATTENTION=cudnn makes a fallback an error): a packed
/// projection and the heads' transposes with rows 16 bytes wider and
/// views 16 and 32 bytes in, Sq != Sk, causal and not. bf16 and f16 within
/// CudnnAttentionMatchesTheCpu's tolerances of the contiguous calls on
/// cuDNN, nothing written outside the views.
TEST_F(CudaKernels, CudnnAttentionOnStridedViewsMatchesContiguous) {
#ifndef DTCC_HAVE_CUDNN
  GTEST_SKIP() << "built without cuDNN";
#else
  const StridedAttentionCase cases[] = {
      packedCase("packed", {{2, 3}, 130, 130, 64, 64, true, {}}),
      {"heads padded and shifted",
       {{2, 4}, 96, 160, 64, 64, false, {}},
       headsLast(0),
       headsLast(1, 8, 8),
       headsLast(2, 0, 16),
       headsLast(3, 8),
       headsLast(4, 0, 8),
       headsLast(5, 8, 8),
       headsLast(6),
       headsLast(7, 16)},
  };
  for (const StridedAttentionCase &c : cases) {
    compareStridedAttention(*gpu, c, DType::kBF16, 3e-2, "cudnn", "cudnn");
    if (HasFatalFailure())
      return;
    compareStridedAttention(*gpu, c, DType::kF16, 1e-2, "cudnn", "cudnn");
    if (HasFatalFailure())
      return;
  }
#endif
}

/// Layouts cuDNN is not given run on dtcc's own kernels: three leading
/// dimensions that do not merge into cuDNN's two, a key whose rows are not
/// a multiple of 16 bytes apart, a key 4 bytes into its buffer. With
/// DTCC_CUDA_ATTENTION=cudnn binding says why; by default the call is
/// bitwise the contiguous call on the own kernels.
TEST_F(CudaKernels, CudnnAttentionLeavesOtherLayoutsToOwnKernels) {
#ifndef DTCC_HAVE_CUDNN
  GTEST_SKIP() << "built without cuDNN";
#else
  const AttentionCase heads{{2, 4}, 64, 64, 64, 64, true, {}};
  const struct {
    StridedAttentionCase c;
    const char *why;
  } cases[] = {
      {{"three leading dimensions",
        {{2, 2, 2}, 64, 64, 64, 64, true, {}},
        {0, {0, 2, 3, 1, 4}},
        {1, {0, 2, 3, 1, 4}},
        {2, {0, 2, 3, 1, 4}},
        {3, {0, 2, 3, 1, 4}},
        {4, {0, 2, 3, 1, 4}},
        {5, {0, 2, 3, 1, 4}},
        {6, {0, 2, 3, 1, 4}},
        {7, {0, 2, 3, 1, 4}}},
       "two leading dimensions"},
      {{"key rows 3 elements wider", heads, headsLast(0), headsLast(1, 3),
        headsLast(2), headsLast(3), headsLast(4), headsLast(5), headsLast(6),
        headsLast(7)},
       "multiples of 16 bytes"},
      {{"key 4 bytes in", heads, headsLast(0), headsLast(1, 0, 2),
        headsLast(2), headsLast(3), headsLast(4), headsLast(5), headsLast(6),
        headsLast(7)},
       "16-byte aligned"},
  };
  const DType t = DType::kBF16;
  for (const auto &[c, why] : cases) {
    SCOPED_TRACE(c.name);
    const AttentionCase &s = c.shape;
    const auto qs = attentionShape(s, s.sq, s.d),
               ks = attentionShape(s, s.sk, s.d),
               vs = attentionShape(s, s.sk, s.dv),
               os = attentionShape(s, s.sq, s.dv);
    std::vector<int64_t> ls = s.lead;
    ls.push_back(s.sq);
    auto values = [&](const std::vector<int64_t> &shape) {
      return roundedTo(t, randomValues(cpu::product(shape), 76));
    };
    Attrs a;
    a.set("scale", 0.125);
    a.set("causal", int64_t(s.causal));
    {
      AttentionEnv e("cudnn");
      const StridedCall fwd =
          layOut({{&c.q, t, qs, values(qs)}, {&c.k, t, ks, values(ks)},
                  {&c.v, t, vs, values(vs)}},
                 {{&c.out, t, os}, {nullptr, DType::kF32, ls}});
      Status bound;
      runOnViews(*gpu, "attention", a, fwd.buffers, fwd.ins, fwd.outs, &bound);
      EXPECT_NE(bound.toString().find(why), std::string::npos)
          << bound.toString();
      const StridedCall grad = layOut(
          {{&c.q, t, qs, values(qs)},
           {&c.k, t, ks, values(ks)},
           {&c.v, t, vs, values(vs)},
           {&c.out, t, os, values(os)},
           {nullptr, DType::kF32, ls, randomValues(cpu::product(ls), 77)},
           {&c.dout, t, os, values(os)}},
          {{&c.dq, t, qs}, {&c.dk, t, ks}, {&c.dv, t, vs}});
      runOnViews(*gpu, "attention_grad", a, grad.buffers, grad.ins, grad.outs,
                 &bound);
      EXPECT_NE(bound.toString().find(why), std::string::npos)
          << bound.toString();
    }
    compareStridedAttention(*gpu, c, t, 0, "own", nullptr);
    if (HasFatalFailure())
      return;
  }
#endif
}

TEST_F(CudaKernels, AttentionRefusesHeadsBeyondItsLimit) {
  KernelContext ctx;
  ctx.kernel = "attention";
  ctx.location = "test";
  ctx.attrs.set("scale", 0.1);
  Reservation scratch(*gpu);
  ctx.scratch = &scratch.plan;
  std::vector<void *> buffers;
  auto view = [&](std::vector<int64_t> shape, DType t) {
    void *p = gpu->allocate(cpu::product(shape) * dtypeSize(t)).value();
    buffers.push_back(p);
    return makeView(p, t, shape);
  };
  ctx.inputs = {view({1, 4, 600}, DType::kF32), view({1, 4, 600}, DType::kF32),
                view({1, 4, 600}, DType::kF32)};
  ctx.outputs = {view({1, 4, 600}, DType::kF32), view({1, 4}, DType::kF32)};
  auto fn = (*gpu->kernels().find("attention"))(ctx);
  ASSERT_FALSE(fn.isOk());
  EXPECT_NE(fn.status().message().find("head dimensions of up to 512, got 600"),
            std::string::npos)
      << fn.status().toString();
  for (void *p : buffers)
    gpu->deallocate(p);
}

TEST(CudaDeviceNoGpu, ClearError) {
  if (haveGpu())
    GTEST_SKIP() << "a GPU is present";
  auto d = createCudaDevice(0);
  ASSERT_FALSE(d.isOk());
  EXPECT_EQ(d.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(d.status().message().find("no CUDA device: cudaGetDeviceCount "
                                      "returned"),
            std::string::npos)
      << d.status().message();
  EXPECT_NE(d.status().message().find("--target cuda"), std::string::npos);
}

// Needs no GPU: the CUDA registry against the kernel-signature table
// (runtime/kernels/Kernels.td), as KernelSignatures.ListExactlyTheCpuKernels
// does for the CPU's.
TEST(CudaKernelRegistry, ListsExactlyTheTablesCudaKernels) {
  std::set<std::string> registered, listed;
  for (const std::string &n : cuda::CudaDevice::kernelNames())
    registered.insert(n);
  for (const KernelSignature &sig : kernelSignatures())
    if (sig.backends & kCudaBackend)
      listed.insert(sig.name);
#ifndef DTCC_HAVE_CUDNN
  // Without cuDNN the convolutions are not built.
  for (const char *conv : {"conv", "conv_input_grad", "conv_filter_grad"})
    listed.erase(conv);
#endif
  for (const std::string &n : registered)
    EXPECT_TRUE(listed.count(n))
        << "the CUDA backend registers '" << n
        << "', which runtime/kernels/Kernels.td does not list for \"cuda\"";
  for (const std::string &n : listed)
    EXPECT_TRUE(registered.count(n))
        << "runtime/kernels/Kernels.td lists '" << n
        << "' for \"cuda\", which the CUDA backend does not register";
}

} // namespace
} // namespace dtcc::runtime

namespace dtcc::runtime {
namespace {

// The device's memory figures are the CUDA runtime's: arenas allocated
// show in cudaMemGetInfo's in-use bytes (within 8 MiB: the allocator's
// 2 MiB granularity, the 256 bytes of padding that round one more page,
// and the driver's own bookkeeping: on 2026-11-30 an H200's figure moved
// at least 4.125 MiB more than the arenas in each of 8 rounds) and in the
// device's cudaMalloc peak exactly. cudaMemGetInfo counts every process on the
// GPU (scripts/gpu_checks.sh runs the unit tests beside training cases), so the
// in-use check takes the closest of a few allocate-and-free rounds; the peak is
// this process's own.
TEST(CudaMemoryUse, ArenasShowInTheMeasuredFigures) {
  if (!haveGpu())
    GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount reports none)";
  auto created = cuda::CudaDevice::create(0);
  ASSERT_TRUE(created.isOk()) << created.status().toString();
  cuda::CudaDevice &gpu = *created.value();
  const cuda::CudaDevice::MemoryUse first = gpu.memoryUse();
  EXPECT_GT(first.total, 0);
  EXPECT_GT(first.usedAtCreate, 0); // the context
  const int64_t bytes = int64_t(256) << 20;
  double closest = 1e300;
  const double slack = double(int64_t(8) << 20);
  for (int round = 0; round < 16 && closest > slack; ++round) {
    const cuda::CudaDevice::MemoryUse before = gpu.memoryUse();
    auto arenas = gpu.allocateArenas({bytes / 2, bytes / 2});
    ASSERT_TRUE(arenas.isOk()) << arenas.status().toString();
    const cuda::CudaDevice::MemoryUse after = gpu.memoryUse();
    EXPECT_GE(after.mallocPeak - first.mallocPeak, bytes);
    EXPECT_LE(after.mallocPeak - first.mallocPeak, bytes + 1024);
    closest = std::min(closest, std::fabs(double(after.usedNow -
                                                 before.usedNow - bytes)));
    for (void *p : arenas.value())
      gpu.deallocate(p);
    EXPECT_EQ(gpu.mallocBytes(), first.mallocPeak); // the error slot stays
  }
  EXPECT_LE(closest, slack)
      << "cudaMemGetInfo's in-use bytes never moved by the arenas' size";
}

} // namespace
} // namespace dtcc::runtime
