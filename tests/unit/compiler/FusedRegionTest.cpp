//===- FusedRegionTest.cpp - generated kernels of fused regions -----------===//
//
// dgraph functions fused by dtcc-lower-fuse-regions, their region functions
// compiled for the CPU (compiler/codegen) and loaded as the runtime loads
// them (runtime/exec/GeneratedKernels.h), run on random inputs and compared
// with naive loops in double written out here from the ops' definitions.
//
//===----------------------------------------------------------------------===//

#include "compiler/Driver.h"
#include "compiler/codegen/CpuCodegen.h"
#include "passes/Lowering/Passes.h"
#include "runtime/exec/GeneratedKernels.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "tests/unit/compiler/CompilerTestContext.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

using namespace dtcc;

namespace {

/// The module of `source` after dtcc-lower-fuse-regions (with row regions
/// when `rows`, in the parallel row form when `parallelRows`).
mlir::OwningOpRef<mlir::ModuleOp>
fuse(const std::string &source, bool rows = false, bool parallelRows = false) {
  auto module = mlir::parseSourceString<mlir::ModuleOp>(source, &test::compilerContext());
  EXPECT_TRUE(module);
  if (!module)
    return {};
  mlir::PassManager pm(&test::compilerContext());
  lowering::FuseRegionsOptions options;
  options.rows = rows;
  options.parallelRows = parallelRows;
  pm.addPass(lowering::createFuseRegions(options));
  EXPECT_TRUE(mlir::succeeded(pm.run(*module)));
  return module;
}

/// The compiled, loaded kernels of `module`'s regions.
std::unique_ptr<runtime::GeneratedKernels> compile(mlir::ModuleOp module) {
  mlir::ModuleOp kernels = codegen::findKernelsModule(module);
  EXPECT_TRUE(kernels);
  if (!kernels)
    return nullptr;
  mlir::FailureOr<std::string> so = codegen::compileCpuKernels(kernels);
  EXPECT_TRUE(mlir::succeeded(so));
  if (mlir::failed(so))
    return nullptr;
  auto loaded = runtime::GeneratedKernels::load(
      reinterpret_cast<const uint8_t *>(so->data()), so->size());
  EXPECT_TRUE(loaded.isOk()) << loaded.status().message();
  return loaded.isOk() ? std::move(loaded).value() : nullptr;
}

template <typename T> std::vector<T> randomVector(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-3.0, 3.0);
  std::vector<T> v(n);
  for (T &x : v)
    x = T(dist(gen));
  return v;
}

double geluTanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
double phi(double x) { return std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI); }
double cdf(double x) { return 0.5 * (1 + std::erf(x / std::sqrt(2.0))); }
double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

/// |got - want| <= tol * max(1, |want|), element by element.
template <typename T>
void expectNear(const std::vector<T> &got, const std::vector<double> &want,
                double tol, const char *what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_LE(std::abs(double(got[i]) - want[i]),
              tol * std::max(1.0, std::abs(want[i])))
        << what << "[" << i << "]: got " << got[i] << ", want " << want[i];
}

// A bias add, a tanh GELU, a scale by a splat and a residual add: one
// region with a broadcast input and two outputs (the pre-activation is
// also returned), in f32, on a shape whose rows are not a multiple of any
// vector width.
TEST(FusedRegion, BiasGeluResidualMatchesReference) {
  auto module = fuse(R"mlir(
func.func @f(%x: tensor<5x37xf32>, %b: tensor<37xf32>) -> (tensor<5x37xf32>, tensor<5x37xf32>) {
  %bb = dgraph.broadcast_in_dim %b, dims = [1] : (tensor<37xf32>) -> tensor<5x37xf32>
  %half = dgraph.constant dense<0.5> : tensor<5x37xf32>
  %a = dgraph.add %x, %bb : tensor<5x37xf32>
  %g = dgraph.gelu %a {approximate = "tanh"} : tensor<5x37xf32>
  %s = dgraph.mul %g, %half : tensor<5x37xf32>
  %y = dgraph.add %s, %x : tensor<5x37xf32>
  return %y, %a : tensor<5x37xf32>, tensor<5x37xf32>
}
)mlir");
  ASSERT_TRUE(module);
  auto fn = module->lookupSymbol<mlir::func::FuncOp>("f");
  int fusedOps = 0;
  fn.walk([&](mlir::Operation *op) {
    fusedOps += op->getName().getStringRef() == "dgraph.fused";
  });
  ASSERT_EQ(fusedOps, 1);
  auto kernels = compile(*module);
  ASSERT_TRUE(kernels);
  auto entry = kernels->find("f_fused_0");
  ASSERT_TRUE(entry.isOk()) << entry.status().message();

  const int rows = 5, cols = 37;
  std::vector<float> x = randomVector<float>(rows * cols, 1);
  std::vector<float> b = randomVector<float>(cols, 2);
  std::vector<float> y(rows * cols), a(rows * cols);
  // Outputs in program order of their producers: %a, then %y.
  void *buffers[] = {x.data(), b.data(), a.data(), y.data()};
  // Rows in two ranges, as two threads run them.
  (*entry)(buffers, 0, 2);
  (*entry)(buffers, 2, rows);

  std::vector<double> wantA(rows * cols), wantY(rows * cols);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      double xi = x[r * cols + c], pre = xi + double(b[c]);
      wantA[r * cols + c] = pre;
      wantY[r * cols + c] = 0.5 * geluTanh(pre) + xi;
    }
  expectNear(a, wantA, 1e-6, "a");
  expectNear(y, wantY, 1e-5, "y");
}

// The gradients and the other activations in f64, where the generated code
// must agree with the definitions to double rounding.
TEST(FusedRegion, GradientsInF64MatchReference) {
  auto module = fuse(R"mlir(
func.func @g(%x: tensor<3x17xf64>, %dy: tensor<3x17xf64>) -> tensor<3x17xf64> {
  %ge = dgraph.gelu_grad %x, %dy : tensor<3x17xf64>
  %si = dgraph.silu_grad %x, %ge : tensor<3x17xf64>
  %sg = dgraph.sigmoid %si : tensor<3x17xf64>
  %r = dgraph.relu %x : tensor<3x17xf64>
  %m = dgraph.max %sg, %r : tensor<3x17xf64>
  %e = dgraph.exp %dy : tensor<3x17xf64>
  %q = dgraph.rsqrt %e : tensor<3x17xf64>
  %d = dgraph.div %m, %q : tensor<3x17xf64>
  %n = dgraph.neg %d : tensor<3x17xf64>
  return %n : tensor<3x17xf64>
}
)mlir");
  ASSERT_TRUE(module);
  auto kernels = compile(*module);
  ASSERT_TRUE(kernels);
  auto entry = kernels->find("g_fused_0");
  ASSERT_TRUE(entry.isOk()) << entry.status().message();
  const int n = 3 * 17;
  std::vector<double> x = randomVector<double>(n, 3), dy = randomVector<double>(n, 4);
  std::vector<double> out(n);
  void *buffers[] = {x.data(), dy.data(), out.data()};
  (*entry)(buffers, 0, 3);
  std::vector<double> want(n);
  for (int i = 0; i < n; ++i) {
    double v = x[i];
    double ge = dy[i] * (cdf(v) + v * phi(v));
    double s = sigmoid(v);
    double si = ge * s * (1 + v * (1 - s));
    double m = std::max(sigmoid(si), std::max(v, 0.0));
    double q = 1 / std::sqrt(std::exp(dy[i]));
    want[i] = -(m / q);
  }
  expectNear(out, want, 1e-12, "out");
}

// A size-1 dimension broadcast (dims kept in order) is read at index 0.
TEST(FusedRegion, SizeOneBroadcastReadsIndexZero) {
  auto module = fuse(R"mlir(
func.func @h(%x: tensor<4x6xf32>, %s: tensor<4x1xf32>) -> tensor<4x6xf32> {
  %sb = dgraph.broadcast_in_dim %s, dims = [0, 1] : (tensor<4x1xf32>) -> tensor<4x6xf32>
  %m = dgraph.sub %x, %sb : tensor<4x6xf32>
  %e = dgraph.exp %m : tensor<4x6xf32>
  return %e : tensor<4x6xf32>
}
)mlir");
  ASSERT_TRUE(module);
  auto kernels = compile(*module);
  ASSERT_TRUE(kernels);
  auto entry = kernels->find("h_fused_0");
  ASSERT_TRUE(entry.isOk());
  std::vector<float> x = randomVector<float>(24, 5), s = randomVector<float>(4, 6);
  std::vector<float> out(24);
  void *buffers[] = {x.data(), s.data(), out.data()};
  // One row at a time, last first: each range reads its own rows of the
  // size-1 broadcast and writes nothing outside its rows.
  for (int r = 3; r >= 0; --r) {
    (*entry)(buffers, r, r + 1);
    for (int c = 0; c < 24; ++c)
      if (c / 6 < r)
        ASSERT_EQ(out[c], 0.0f) << "row " << r << " wrote element " << c;
  }
  std::vector<double> want(24);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 6; ++c)
      want[r * 6 + c] = std::exp(double(x[r * 6 + c]) - double(s[r]));
  expectNear(out, want, 1e-6, "out");
}

// A layer norm from sums (mean, centred values, variance, scale and shift)
// is one row region; in f64 over rows of 4099 values (two pairwise halves
// of the sum above 2048, an 8-lane tail) in two row dimensions, run in two
// ranges of the outer one, it agrees with the definition to double
// rounding.
// A layer norm written from sums and means, in both row forms: the CPU's
// (its kernels' order) and the parallel one (the CUDA target's, which the
// CPU code generation compiles too: its reductions in no fixed order).
class RowForms : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(FusedRegion, RowForms, ::testing::Bool(),
                         [](const auto &info) {
                           return info.param ? "Parallel" : "Sequential";
                         });

TEST_P(RowForms, LayerNormRowRegionMatchesReference) {
  auto module = fuse(R"mlir(
func.func @ln(%x: tensor<3x2x4099xf64>, %g: tensor<4099xf64>) -> (tensor<3x2x4099xf64>, tensor<3x2xf64>) {
  %n = dgraph.constant dense<4099.0> : tensor<3x2xf64>
  %s = dgraph.reduce_sum %x, dims = [2] : (tensor<3x2x4099xf64>) -> tensor<3x2xf64>
  %mean = dgraph.div %s, %n : tensor<3x2xf64>
  %mb = dgraph.broadcast_in_dim %mean, dims = [0, 1] : (tensor<3x2xf64>) -> tensor<3x2x4099xf64>
  %d = dgraph.sub %x, %mb : tensor<3x2x4099xf64>
  %d2 = dgraph.mul %d, %d : tensor<3x2x4099xf64>
  %v = dgraph.reduce_sum %d2, dims = [2] : (tensor<3x2x4099xf64>) -> tensor<3x2xf64>
  %var = dgraph.div %v, %n : tensor<3x2xf64>
  %eps = dgraph.constant dense<1.0e-5> : tensor<3x2xf64>
  %ve = dgraph.add %var, %eps : tensor<3x2xf64>
  %rstd = dgraph.rsqrt %ve : tensor<3x2xf64>
  %rb = dgraph.broadcast_in_dim %rstd, dims = [0, 1] : (tensor<3x2xf64>) -> tensor<3x2x4099xf64>
  %xn = dgraph.mul %d, %rb : tensor<3x2x4099xf64>
  %gb = dgraph.broadcast_in_dim %g, dims = [2] : (tensor<4099xf64>) -> tensor<3x2x4099xf64>
  %y = dgraph.mul %xn, %gb : tensor<3x2x4099xf64>
  return %y, %rstd : tensor<3x2x4099xf64>, tensor<3x2xf64>
}
)mlir",
                     /*rows=*/true, /*parallelRows=*/GetParam());
  ASSERT_TRUE(module);
  auto fn = module->lookupSymbol<mlir::func::FuncOp>("ln");
  int fused = 0, reductions = 0;
  fn.walk([&](mlir::Operation *op) {
    fused += op->getName().getStringRef() == "dgraph.fused";
    reductions += op->getName().getStringRef() == "dgraph.reduce_sum";
  });
  ASSERT_EQ(fused, 1);
  ASSERT_EQ(reductions, 0);
  auto kernels = compile(*module);
  ASSERT_TRUE(kernels);
  auto entry = kernels->find("ln_fused_0");
  ASSERT_TRUE(entry.isOk()) << entry.status().message();

  const int rows = 6, cols = 4099;
  std::vector<double> x = randomVector<double>(rows * cols, 7);
  std::vector<double> g = randomVector<double>(cols, 8);
  std::vector<double> y(rows * cols), rstd(rows);
  // Outputs in program order of their producers: %rstd, then %y.
  void *buffers[] = {x.data(), g.data(), rstd.data(), y.data()};
  (*entry)(buffers, 2, 3);
  (*entry)(buffers, 0, 2);

  std::vector<double> wantY(rows * cols), wantR(rows);
  for (int r = 0; r < rows; ++r) {
    const double *row = &x[r * cols];
    double mean = 0, var = 0;
    for (int c = 0; c < cols; ++c)
      mean += row[c];
    mean /= cols;
    for (int c = 0; c < cols; ++c)
      var += (row[c] - mean) * (row[c] - mean);
    wantR[r] = 1 / std::sqrt(var / cols + 1e-5);
    for (int c = 0; c < cols; ++c)
      wantY[r * cols + c] = (row[c] - mean) * wantR[r] * g[c];
  }
  expectNear(rstd, wantR, 1e-12, "rstd");
  expectNear(y, wantY, 1e-12, "y");
}

// A row maximum propagates NaN as the kernels' does (the row with a NaN
// gives NaN, the others their maximum) and returns -inf for rows of -inf.
TEST_P(RowForms, RowMaximumPropagatesNaN) {
  auto module = fuse(R"mlir(
func.func @mx(%x: tensor<3x21xf32>) -> tensor<3xf32> {
  %e = dgraph.neg %x : tensor<3x21xf32>
  %n = dgraph.neg %e : tensor<3x21xf32>
  %m = dgraph.reduce_max %n, dims = [1] : (tensor<3x21xf32>) -> tensor<3xf32>
  return %m : tensor<3xf32>
}
)mlir",
                     /*rows=*/true, /*parallelRows=*/GetParam());
  ASSERT_TRUE(module);
  auto kernels = compile(*module);
  ASSERT_TRUE(kernels);
  auto entry = kernels->find("mx_fused_0");
  ASSERT_TRUE(entry.isOk()) << entry.status().message();
  std::vector<float> x = randomVector<float>(3 * 21, 9), out(3);
  x[21 + 19] = std::nanf("");
  for (int c = 0; c < 21; ++c)
    x[42 + c] = -INFINITY;
  void *buffers[] = {x.data(), out.data()};
  (*entry)(buffers, 0, 3);
  EXPECT_EQ(out[0], *std::max_element(x.begin(), x.begin() + 21));
  EXPECT_TRUE(std::isnan(out[1]));
  EXPECT_EQ(out[2], -INFINITY);
}

// A residual add and the layer norm op after it (as a GPT's blocks have
// them, in f32): one row region writing the sum, the norm and both
// statistics, in both row forms, against loops in double.
TEST_P(RowForms, ResidualLayerNormOpMatchesReference) {
  auto module = fuse(R"mlir(
func.func @rln(%a: tensor<4x3x77xf32>, %b: tensor<4x3x77xf32>, %g: tensor<77xf32>, %be: tensor<77xf32>)
    -> (tensor<4x3x77xf32>, tensor<4x3x77xf32>, tensor<4x3xf32>, tensor<4x3xf32>) {
  %x = dgraph.add %a, %b : tensor<4x3x77xf32>
  %y, %m, %r = dgraph.layer_norm %x, %g, %be axis = 2, epsilon = 1.0e-05
      : (tensor<4x3x77xf32>, tensor<77xf32>, tensor<77xf32>) -> (tensor<4x3x77xf32>, tensor<4x3xf32>, tensor<4x3xf32>)
  return %x, %y, %m, %r : tensor<4x3x77xf32>, tensor<4x3x77xf32>, tensor<4x3xf32>, tensor<4x3xf32>
}
)mlir",
                     /*rows=*/true, /*parallelRows=*/GetParam());
  ASSERT_TRUE(module);
  int fused = 0, norms = 0;
  module->lookupSymbol<mlir::func::FuncOp>("rln").walk(
      [&](mlir::Operation *op) {
        fused += op->getName().getStringRef() == "dgraph.fused";
        norms += op->getName().getStringRef() == "dgraph.layer_norm";
      });
  ASSERT_EQ(fused, 1);
  ASSERT_EQ(norms, 0);
  auto kernels = compile(*module);
  ASSERT_TRUE(kernels);
  auto entry = kernels->find("rln_fused_0");
  ASSERT_TRUE(entry.isOk()) << entry.status().message();

  const int rows = 12, cols = 77;
  std::vector<float> a = randomVector<float>(rows * cols, 11);
  std::vector<float> b = randomVector<float>(rows * cols, 12);
  std::vector<float> g = randomVector<float>(cols, 13);
  std::vector<float> be = randomVector<float>(cols, 14);
  std::vector<float> x(rows * cols), y(rows * cols), mean(rows), rstd(rows);
  void *buffers[] = {a.data(), b.data(), g.data(),    be.data(),
                     x.data(), y.data(), mean.data(), rstd.data()};
  (*entry)(buffers, 0, 4);

  std::vector<double> wantX(rows * cols), wantY(rows * cols), wantM(rows),
      wantR(rows);
  for (int r = 0; r < rows; ++r) {
    double sum = 0, squares = 0;
    for (int c = 0; c < cols; ++c) {
      const int i = r * cols + c;
      wantX[i] = double(float(a[i] + b[i]));
      sum += wantX[i];
    }
    wantM[r] = sum / cols;
    for (int c = 0; c < cols; ++c)
      squares +=
          (wantX[r * cols + c] - wantM[r]) * (wantX[r * cols + c] - wantM[r]);
    wantR[r] = 1 / std::sqrt(squares / cols + 1e-5);
    for (int c = 0; c < cols; ++c)
      wantY[r * cols + c] =
          (wantX[r * cols + c] - wantM[r]) * wantR[r] * g[c] + be[c];
  }
  expectNear(x, wantX, 0, "x");
  expectNear(mean, wantM, 1e-6, "mean");
  expectNear(rstd, wantR, 1e-6, "rstd");
  expectNear(y, wantY, 1e-5, "y");
}

/// bf16 from f32, rounded to nearest even (finite values), and back.
uint16_t toBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float fromBf16(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// A layer norm's gradient (x, scale, mean, rstd, dy -> dx, dscale, dbias)
/// whose dx a residual gradient is added to, as a GPT's backward pass has
/// it: the row region computes dx and the sum, the parameter gradients
/// stay one kernel (dgraph.layer_norm_param_grad). In f32 and in bf16 with
/// f32 statistics (mixed precision's: their casts start the region), in
/// both row forms, against loops in double.
void checkLayerNormGrad(bool parallel, bool bf16) {
  const std::string t = bf16 ? "bf16" : "f32";
  std::string source = R"mlir(
func.func @lng(%x: tensor<4x3x77xT>, %g: tensor<77xT>, %m: tensor<4x3xf32>, %r: tensor<4x3xf32>, %dy: tensor<4x3x77xT>, %res: tensor<4x3x77xT>)
    -> (tensor<4x3x77xT>, tensor<77xT>, tensor<77xT>) {
  %dx, %dg, %db = dgraph.layer_norm_grad %x, %g, %m, %r, %dy axis = 2
      : (tensor<4x3x77xT>, tensor<77xT>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3x77xT>)
      -> (tensor<4x3x77xT>, tensor<77xT>, tensor<77xT>)
  %s = dgraph.add %res, %dx : tensor<4x3x77xT>
  return %s, %dg, %db : tensor<4x3x77xT>, tensor<77xT>, tensor<77xT>
}
)mlir";
  for (size_t at; (at = source.find("xT>")) != std::string::npos;)
    source.replace(at, 3, "x" + t + ">");
  auto module = fuse(source, /*rows=*/true, parallel);
  ASSERT_TRUE(module);
  auto fn = module->lookupSymbol<mlir::func::FuncOp>("lng");
  mlir::Operation *call = nullptr;
  int grads = 0, params = 0;
  fn.walk([&](mlir::Operation *op) {
    llvm::StringRef name = op->getName().getStringRef();
    if (name == "dgraph.fused") {
      EXPECT_EQ(call, nullptr) << "two regions";
      call = op;
    }
    grads += name == "dgraph.layer_norm_grad";
    params += name == "dgraph.layer_norm_param_grad";
  });
  ASSERT_NE(call, nullptr);
  EXPECT_EQ(grads, 0);
  EXPECT_EQ(params, 1);
  ASSERT_EQ(call->getNumResults(), 1u);
  auto kernels = compile(*module);
  ASSERT_TRUE(kernels);
  auto entry = kernels->find("lng_fused_0");
  ASSERT_TRUE(entry.isOk()) << entry.status().message();

  const int rows = 12, cols = 77;
  std::vector<float> x = randomVector<float>(rows * cols, 21);
  std::vector<float> g = randomVector<float>(cols, 22);
  std::vector<float> dy = randomVector<float>(rows * cols, 23);
  std::vector<float> res = randomVector<float>(rows * cols, 24);
  std::vector<float> mean = randomVector<float>(rows, 25), rstd(rows);
  for (int r = 0; r < rows; ++r)
    rstd[r] = 0.5f + 0.1f * float(r);
  // The operands as the kernel reads them (bf16 ones rounded).
  auto asBf16 = [](std::vector<float> &v) {
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      h[i] = toBf16(v[i]);
      v[i] = fromBf16(h[i]);
    }
    return h;
  };
  std::vector<uint16_t> xh, gh, dyh, resh, outh(rows * cols);
  std::vector<float> out(rows * cols);
  if (bf16) {
    xh = asBf16(x), gh = asBf16(g), dyh = asBf16(dy), resh = asBf16(res);
  }
  void *args[] = {bf16 ? (void *)xh.data() : x.data(),
                  bf16 ? (void *)gh.data() : g.data(),
                  mean.data(),
                  rstd.data(),
                  bf16 ? (void *)dyh.data() : dy.data(),
                  bf16 ? (void *)resh.data() : res.data()};
  // The region's inputs are arguments of the function, in the call's order.
  std::vector<void *> buffers;
  for (mlir::Value v : call->getOperands()) {
    auto arg = mlir::dyn_cast<mlir::BlockArgument>(v);
    ASSERT_TRUE(arg) << "a region input that is no argument";
    buffers.push_back(args[arg.getArgNumber()]);
  }
  buffers.push_back(bf16 ? (void *)outh.data() : out.data());
  (*entry)(buffers.data(), 0, 2);
  (*entry)(buffers.data(), 2, 4);
  if (bf16)
    for (int i = 0; i < rows * cols; ++i)
      out[i] = fromBf16(outh[i]);

  std::vector<double> want(rows * cols);
  for (int r = 0; r < rows; ++r) {
    std::vector<double> h(cols), gg(cols);
    double sumG = 0, sumGH = 0;
    for (int c = 0; c < cols; ++c) {
      const int i = r * cols + c;
      h[c] = (double(x[i]) - mean[r]) * rstd[r];
      gg[c] = double(dy[i]) * g[c];
      sumG += gg[c];
      sumGH += gg[c] * h[c];
    }
    for (int c = 0; c < cols; ++c)
      want[r * cols + c] =
          res[r * cols + c] +
          rstd[r] * (gg[c] - sumG / cols - h[c] * (sumGH / cols));
  }
  expectNear(out, want, bf16 ? 1e-2 : 1e-5, "res + dx");
}

TEST_P(RowForms, LayerNormGradRowRegionMatchesReference) {
  checkLayerNormGrad(GetParam(), /*bf16=*/false);
}

TEST_P(RowForms, Bf16LayerNormGradRowRegionMatchesReference) {
  checkLayerNormGrad(GetParam(), /*bf16=*/true);
}

// Errors are diagnostics naming what is wrong: a linker that is not there,
// an unknown symbol, bytes that are not a shared object.
TEST(FusedRegion, ErrorsAreClear) {
  auto module = fuse(R"mlir(
func.func @k(%x: tensor<4xf32>) -> tensor<4xf32> {
  %e = dgraph.exp %x : tensor<4xf32>
  %n = dgraph.neg %e : tensor<4xf32>
  return %n : tensor<4xf32>
}
)mlir");
  ASSERT_TRUE(module);
  std::string message;
  mlir::ScopedDiagnosticHandler handler(&test::compilerContext(), [&](mlir::Diagnostic &d) {
    message = d.str();
    return mlir::success();
  });
  codegen::CpuCodegenOptions options;
  options.linker = "/nonexistent/ld.lld";
  EXPECT_TRUE(mlir::failed(codegen::compileCpuKernels(
      codegen::findKernelsModule(*module), options)));
  EXPECT_NE(message.find("/nonexistent/ld.lld"), std::string::npos) << message;

  auto kernels = compile(*module);
  ASSERT_TRUE(kernels);
  auto missing = kernels->find("no_such_region");
  ASSERT_FALSE(missing.isOk());
  EXPECT_NE(missing.status().message().find("no_such_region"), std::string::npos);

  const uint8_t junk[] = {1, 2, 3, 4, 5, 6, 7, 8};
  auto bad = runtime::GeneratedKernels::load(junk, sizeof(junk));
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("not an ELF shared object"),
            std::string::npos);
}

} // namespace
