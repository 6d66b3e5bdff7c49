//===- VJPTest.cpp - every VJP rule against finite differences ------------===//
//
// For each differentiable op, builds loss = sum(op(params) * w) in f64 with
// random parameters and weights, compiles @train_step (autodiff) and @main
// through the real pipeline and runtime, and compares the gradients with
// central finite differences of @main.
//
//===----------------------------------------------------------------------===//

#include "compiler/Driver.h"
#include "compiler/Serialize.h"
#include "passes/Graph/Passes.h"
#include "runtime/device/Device.h"
#include "runtime/exec/Executable.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <sstream>

using namespace dtcc;

namespace {

struct Param {
  std::string name;
  std::vector<int64_t> shape;
  double lo = -1.0, hi = 1.0;
};

/// An op under test: `body` computes %y (of type `yType`) from %<param>.
struct Case {
  std::string name;
  std::vector<Param> params;
  std::string body;
  std::string yType;
};

std::string tensorType(const std::vector<int64_t> &shape, const char *dt = "f64") {
  std::string s = "tensor<";
  for (int64_t d : shape)
    s += std::to_string(d) + "x";
  return s + dt + ">";
}

std::vector<int64_t> shapeOf(const std::string &type) {
  std::vector<int64_t> shape;
  std::string inner = type.substr(7, type.size() - 8); // tensor<...>
  std::stringstream ss(inner);
  std::string part;
  while (std::getline(ss, part, 'x'))
    if (!part.empty() && std::isdigit(part[0]))
      shape.push_back(std::stoll(part));
  return shape;
}

/// A dense literal of `shape` (nested brackets) with uniform values.
std::string denseOf(const std::vector<int64_t> &shape, std::mt19937 &rng,
                    double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::ostringstream os;
  os.precision(17);
  std::function<void(size_t)> emit = [&](size_t dim) {
    if (dim == shape.size()) {
      os << dist(rng);
      return;
    }
    os << "[";
    for (int64_t i = 0; i < shape[dim]; ++i) {
      if (i)
        os << ", ";
      emit(dim + 1);
    }
    os << "]";
  };
  os << "dense<";
  emit(0);
  os << ">";
  return os.str();
}

void PrintTo(const Case &c, std::ostream *os) { *os << c.name; }

class VJPTest : public ::testing::TestWithParam<Case> {};

/// Compiles `text` (with @main) into an executable on `device`.
std::unique_ptr<runtime::Executable>
compile(mlir::MLIRContext &ctx, const std::string &text, bool train,
        runtime::Device &device, std::vector<std::unique_ptr<SerializedProgram>> &keep) {
  auto module = mlir::parseSourceString<mlir::ModuleOp>(text, &ctx);
  if (!module) {
    ADD_FAILURE() << "does not parse";
    return nullptr;
  }
  mlir::PassManager pm(&ctx);
  if (train)
    pm.addPass(graph::createAutodiff());
  pm.addPass(mlir::createCanonicalizerPass());
  if (mlir::failed(pm.run(*module)))
    return nullptr;
  CompileOptions options;
  options.compileTo = Phase::Exec;
  if (mlir::failed(runPhases(*module, options)))
    return nullptr;
  auto serialized = serializeProgram(*module);
  if (mlir::failed(serialized))
    return nullptr;
  keep.push_back(std::make_unique<SerializedProgram>(std::move(*serialized)));
  auto exe = runtime::Executable::create(
      keep.back()->program,
      reinterpret_cast<const uint8_t *>(keep.back()->data.data()),
      keep.back()->data.size(), device);
  if (!exe.isOk()) {
    ADD_FAILURE() << exe.status().toString();
    return nullptr;
  }
  return std::move(exe.value());
}

double runLoss(runtime::Executable &exe, const std::string &fn,
               std::vector<runtime::HostTensor> *outputs = nullptr) {
  std::vector<runtime::HostTensor> out;
  runtime::Status s = exe.run(*exe.findFunction(fn), {}, &out);
  EXPECT_TRUE(s.isOk()) << s.toString();
  if (outputs)
    *outputs = out;
  return out.empty() ? NAN : out[0].data<double>()[0];
}

TEST_P(VJPTest, MatchesFiniteDifferences) {
  const Case &c = GetParam();
  std::mt19937 rng(1234);
  // Variables with random values, and a random weight on the output so that
  // every output element's gradient matters.
  std::ostringstream text;
  for (const Param &p : c.params)
    text << "dgraph.variable @" << p.name << " : " << tensorType(p.shape) << " = "
         << denseOf(p.shape, rng, p.lo, p.hi) << " {trainable}\n";
  std::vector<int64_t> yShape = shapeOf(c.yType);
  text << "func.func @main() -> (tensor<f64> {dgraph.name = \"loss\"}) {\n";
  for (const Param &p : c.params)
    text << "  %" << p.name << " = dgraph.load @" << p.name << " : "
         << tensorType(p.shape) << "\n";
  text << c.body << "\n";
  text << "  %w = dgraph.constant " << denseOf(yShape, rng, -1, 1) << " : "
       << c.yType << "\n";
  text << "  %p = dgraph.mul %y, %w : " << c.yType << "\n";
  text << "  %l = dgraph.reduce_sum %p, dims = [";
  for (size_t d = 0; d < yShape.size(); ++d)
    text << (d ? ", " : "") << d;
  text << "] : (" << c.yType << ") -> tensor<f64>\n";
  text << "  return %l : tensor<f64>\n}\n";

  mlir::DialectRegistry registry;
  registerDtccDialects(registry);
  mlir::MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  auto device = runtime::createCpuDevice();
  std::vector<std::unique_ptr<SerializedProgram>> keep;
  auto trainExe = compile(ctx, text.str(), true, *device, keep);
  auto evalExe = compile(ctx, text.str(), false, *device, keep);
  ASSERT_TRUE(trainExe && evalExe) << text.str();

  std::vector<runtime::HostTensor> outputs;
  double loss = runLoss(*trainExe, "train_step", &outputs);
  EXPECT_NEAR(loss, runLoss(*evalExe, "main"), 1e-9 * std::max(1.0, std::abs(loss)));
  ASSERT_EQ(outputs.size(), c.params.size() + 1);

  const double h = 1e-6;
  for (size_t i = 0; i < c.params.size(); ++i) {
    const runtime::TensorView *var = evalExe->variable(c.params[i].name);
    ASSERT_NE(var, nullptr);
    double *x = var->as<double>();
    const double *analytic = outputs[i + 1].data<double>();
    double maxErr = 0, maxRef = 0;
    for (int64_t k = 0; k < var->numel(); ++k) {
      double saved = x[k];
      x[k] = saved + h;
      double up = runLoss(*evalExe, "main");
      x[k] = saved - h;
      double down = runLoss(*evalExe, "main");
      x[k] = saved;
      double numeric = (up - down) / (2 * h);
      // NaN compares false: count it as an infinite error, not none.
      double err = std::abs(numeric - analytic[k]);
      maxErr = std::isnan(err) ? INFINITY : std::max(maxErr, err);
      maxRef = std::max(maxRef, std::abs(numeric));
    }
    EXPECT_LE(maxErr, 1e-6 * std::max(1.0, maxRef))
        << c.name << ": gradient of " << c.params[i].name << " differs by "
        << maxErr << " (largest " << maxRef << ")";
  }
}

std::string unary(const std::string &op, const std::string &type,
                  const std::string &attrs = "") {
  return "  %y = dgraph." + op + " %a" + attrs + " : " + type;
}

std::string binary(const std::string &op, const std::string &type) {
  return "  %y = dgraph." + op + " %a, %b : " + type;
}

std::vector<Case> cases() {
  const std::string t = "tensor<3x4xf64>";
  std::vector<Case> out;
  auto addUnary = [&](const std::string &op, double lo, double hi,
                      const std::string &attrs = "") {
    out.push_back({op, {{"a", {3, 4}, lo, hi}}, unary(op, t, attrs), t});
  };
  addUnary("neg", -1, 1);
  addUnary("abs", 0.1, 1);
  addUnary("exp", -1, 1);
  addUnary("log", 0.5, 2);
  addUnary("sqrt", 0.5, 2);
  addUnary("rsqrt", 0.5, 2);
  addUnary("reciprocal", 0.5, 2);
  addUnary("tanh", -2, 2);
  addUnary("sigmoid", -2, 2);
  addUnary("relu", 0.1, 1);
  addUnary("silu", -2, 2);
  addUnary("erf", -2, 2);
  addUnary("gelu", -2, 2);
  out.push_back({"gelu_tanh", {{"a", {3, 4}, -2, 2}},
                 "  %y = dgraph.gelu %a {approximate = \"tanh\"} : " + t, t});
  addUnary("sin", -2, 2);
  addUnary("cos", -2, 2);
  addUnary("tan", -1, 1);
  addUnary("asin", -0.8, 0.8);
  addUnary("acos", -0.8, 0.8);
  addUnary("atan", -2, 2);
  addUnary("sinh", -2, 2);
  addUnary("cosh", -2, 2);
  addUnary("asinh", -2, 2);
  addUnary("acosh", 1.5, 3);
  addUnary("atanh", -0.8, 0.8);
  auto addBinary = [&](const std::string &op, double lo, double hi) {
    out.push_back({op, {{"a", {3, 4}, lo, hi}, {"b", {3, 4}, lo, hi}},
                   binary(op, t), t});
  };
  addBinary("add", -1, 1);
  addBinary("sub", -1, 1);
  addBinary("mul", -1, 1);
  addBinary("div", 0.5, 2);
  addBinary("pow", 0.5, 2);
  // The exponent's gradient at a zero base (0^y is constant in y >= 0).
  out.push_back({"pow_zero_base", {{"b", {3, 4}, 0.5, 2}},
                 "  %a = dgraph.constant dense<[[0.0, 1.5, 0.0, 2.0], [0.5, 0.0, 1.0, 3.0], "
                 "[0.0, 0.0, 0.7, 1.2]]> : " + t + "\n"
                 "  %y = dgraph.pow %a, %b : " + t,
                 t});
  addBinary("max", -1, 1);
  addBinary("min", -1, 1);
  out.push_back({"select", {{"a", {3, 4}}, {"b", {3, 4}}},
                 "  %c = dgraph.gt %a, %b : " + t +
                     "\n  %y = dgraph.select %c, %a, %b : " + t,
                 t});
  out.push_back({"broadcast_in_dim", {{"a", {4}}},
                 "  %y = dgraph.broadcast_in_dim %a, dims = [1] : "
                 "(tensor<4xf64>) -> tensor<3x4xf64>",
                 t});
  out.push_back({"broadcast_expand", {{"a", {3, 1}}},
                 "  %y = dgraph.broadcast_in_dim %a, dims = [0, 1] : "
                 "(tensor<3x1xf64>) -> tensor<3x4xf64>",
                 t});
  out.push_back({"reshape", {{"a", {12}}},
                 "  %y = dgraph.reshape %a : (tensor<12xf64>) -> " + t, t});
  out.push_back({"transpose", {{"a", {4, 3}}},
                 "  %y = dgraph.transpose %a, perm = [1, 0] : (tensor<4x3xf64>) -> " + t,
                 t});
  out.push_back({"slice", {{"a", {5, 6}}},
                 "  %y = dgraph.slice %a, start = [1, 2], limit = [4, 6], stride = [1, 1] "
                 ": (tensor<5x6xf64>) -> " + t,
                 t});
  // Strides: every second row and third column; the last taken element of
  // a dimension followed by fewer than `stride` elements.
  out.push_back({"slice_strided", {{"a", {5, 7}}},
                 "  %y = dgraph.slice %a, start = [1, 0], limit = [5, 7], stride = [2, 3] "
                 ": (tensor<5x7xf64>) -> tensor<2x3xf64>",
                 "tensor<2x3xf64>"});
  out.push_back({"slice_strided_tail", {{"a", {7, 5}}},
                 "  %y = dgraph.slice %a, start = [0, 1], limit = [6, 5], stride = [4, 2] "
                 ": (tensor<7x5xf64>) -> tensor<2x2xf64>",
                 "tensor<2x2xf64>"});
  out.push_back({"reverse", {{"a", {3, 4}}},
                 "  %y = dgraph.reverse %a, dims = [1] : " + t, t});
  out.push_back({"concat", {{"a", {1, 4}}, {"b", {2, 4}}},
                 "  %y = dgraph.concat %a, %b dim = 0 : (tensor<1x4xf64>, "
                 "tensor<2x4xf64>) -> " + t,
                 t});
  out.push_back({"pad", {{"a", {2, 3}}},
                 "  %z = dgraph.constant dense<0.5> : tensor<f64>\n"
                 "  %y = dgraph.pad %a, %z, low = [1, 0], high = [0, 1] : "
                 "(tensor<2x3xf64>, tensor<f64>) -> " + t,
                 t});
  // Negative amounts crop (ZeroPad2d((0, 0, 1, -1)), RWKV's time shift).
  out.push_back({"pad_negative",
                 {{"a", {4, 3}}},
                 "  %z = dgraph.constant dense<0.0> : tensor<f64>\n"
                 "  %y = dgraph.pad %a, %z, low = [1, -1], high = [-2, 1] : "
                 "(tensor<4x3xf64>, tensor<f64>) -> tensor<3x3xf64>",
                 "tensor<3x3xf64>"});
  out.push_back({"gather", {{"a", {5, 4}}},
                 "  %i = dgraph.constant dense<[4, 0, 4]> : tensor<3xi64>\n"
                 "  %y = dgraph.gather %a, %i axis = 0 : (tensor<5x4xf64>, "
                 "tensor<3xi64>) -> " + t,
                 t});
  out.push_back({"scatter_add", {{"a", {2, 4}}},
                 "  %i = dgraph.constant dense<[1, 1]> : tensor<2xi64>\n"
                 "  %y = dgraph.scatter_add %a, %i axis = 0, dim_size = 3 : "
                 "(tensor<2x4xf64>, tensor<2xi64>) -> " + t,
                 t});
  out.push_back({"reduce_sum", {{"a", {3, 5, 4}}},
                 "  %y = dgraph.reduce_sum %a, dims = [1] : (tensor<3x5x4xf64>) -> " + t,
                 t});
  out.push_back({"reduce_max", {{"a", {3, 5, 4}}},
                 "  %y = dgraph.reduce_max %a, dims = [1] : (tensor<3x5x4xf64>) -> " + t,
                 t});
  out.push_back({"reduce_min", {{"a", {3, 5, 4}}},
                 "  %y = dgraph.reduce_min %a, dims = [1] : (tensor<3x5x4xf64>) -> " + t,
                 t});
  out.push_back({"reduce_prod", {{"a", {3, 2, 4}, 0.5, 1.5}},
                 "  %y = dgraph.reduce_prod %a, dims = [1] : (tensor<3x2x4xf64>) -> " + t,
                 t});
  // Zeros: one in a group (its gradient is the product of the others), two
  // in another (all zero), none in the rest.
  out.push_back({"reduce_prod_zeros", {{"a", {3, 2, 4}, 0.5, 1.5}},
                 "  %z = dgraph.constant dense<[[[0.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 0.0]], "
                 "[[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]], [[1.0, 0.0, 1.0, 1.0], "
                 "[1.0, 1.0, 1.0, 1.0]]]> : tensor<3x2x4xf64>\n"
                 "  %m = dgraph.mul %a, %z : tensor<3x2x4xf64>\n"
                 "  %y = dgraph.reduce_prod %m, dims = [1] : (tensor<3x2x4xf64>) -> " + t,
                 t});
  out.push_back({"cumsum", {{"a", {3, 4}}},
                 "  %y = dgraph.cumsum %a, dim = 1 {exclusive} : " + t, t});
  const std::string mm = "tensor<2x3x4xf64>";
  out.push_back({"matmul", {{"a", {2, 3, 5}}, {"b", {2, 5, 4}}},
                 "  %y = dgraph.matmul %a, %b : (tensor<2x3x5xf64>, "
                 "tensor<2x5x4xf64>) -> " + mm,
                 mm});
  out.push_back({"matmul_transposed", {{"a", {2, 5, 3}}, {"b", {2, 4, 5}}},
                 "  %y = dgraph.matmul %a, %b {transpose_lhs, transpose_rhs} : "
                 "(tensor<2x5x3xf64>, tensor<2x4x5xf64>) -> " + mm,
                 mm});
  out.push_back({"matmul_transpose_rhs", {{"a", {2, 3, 5}}, {"b", {2, 4, 5}}},
                 "  %y = dgraph.matmul %a, %b {transpose_rhs} : "
                 "(tensor<2x3x5xf64>, tensor<2x4x5xf64>) -> " + mm,
                 mm});
  out.push_back({"matmul_shared_rhs", {{"a", {2, 3, 5}}, {"b", {5, 4}}},
                 "  %y = dgraph.matmul %a, %b : (tensor<2x3x5xf64>, "
                 "tensor<5x4xf64>) -> " + mm,
                 mm});
  out.push_back({"matmul_shared_rhs_t", {{"a", {2, 3, 5}}, {"b", {4, 5}}},
                 "  %y = dgraph.matmul %a, %b {transpose_rhs} : "
                 "(tensor<2x3x5xf64>, tensor<4x5xf64>) -> " + mm,
                 mm});
  // NumPy batch broadcasting in every direction; each operand's gradient
  // sums over the batch dimensions it was broadcast along.
  auto addMatmul = [&](const std::string &name, std::vector<int64_t> a,
                       std::vector<int64_t> b, const std::string &attrs,
                       const std::string &yType) {
    out.push_back({name, {{"a", a}, {"b", b}},
                   "  %y = dgraph.matmul %a, %b" + attrs + " : (" +
                       tensorType(a) + ", " + tensorType(b) + ") -> " + yType,
                   yType});
  };
  addMatmul("matmul_shared_lhs", {4, 5}, {2, 5, 3}, "", "tensor<2x4x3xf64>");
  addMatmul("matmul_shared_lhs_t", {5, 4}, {2, 3, 5}, " {transpose_lhs, transpose_rhs}",
            "tensor<2x4x3xf64>");
  addMatmul("matmul_shared_rhs_tl", {2, 5, 3}, {5, 4}, " {transpose_lhs}",
            "tensor<2x3x4xf64>");
  addMatmul("matmul_shared_rhs_ones", {2, 3, 5}, {1, 5, 4}, "", "tensor<2x3x4xf64>");
  addMatmul("matmul_broadcast_ones", {3, 1, 2, 4}, {2, 4, 3}, "",
            "tensor<3x2x2x3xf64>");
  addMatmul("matmul_broadcast_both", {1, 3, 2, 4}, {2, 1, 3, 4}, " {transpose_rhs}",
            "tensor<2x3x2x3xf64>");
  addMatmul("matmul_rank4_by_2", {2, 1, 3, 4}, {4, 2}, "", "tensor<2x1x3x2xf64>");
  addMatmul("matmul_2_by_rank4", {4, 3}, {2, 2, 4, 2}, " {transpose_lhs}",
            "tensor<2x2x3x2xf64>");
  out.push_back({"softmax", {{"a", {3, 4}}},
                 "  %y = dgraph.softmax %a, dim = 1 : " + t, t});
  out.push_back({"softmax_dim0", {{"a", {3, 4}}},
                 "  %y = dgraph.softmax %a, dim = 0 : " + t, t});
  out.push_back({"log_softmax", {{"a", {3, 4}}},
                 "  %y = dgraph.log_softmax %a, dim = 1 : " + t, t});
  out.push_back({"layer_norm", {{"a", {3, 4}}, {"g", {4}}, {"b", {4}}},
                 "  %y, %m, %r = dgraph.layer_norm %a, %g, %b axis = 1, epsilon = "
                 "1.0e-05 : (" + t + ", tensor<4xf64>, tensor<4xf64>) -> (" + t +
                     ", tensor<3xf64>, tensor<3xf64>)",
                 t});
  out.push_back({"rms_norm", {{"a", {3, 4}}, {"g", {4}}},
                 "  %y, %r = dgraph.rms_norm %a, %g axis = 1, epsilon = 1.0e-05 : (" +
                     t + ", tensor<4xf64>) -> (" + t + ", tensor<3xf64>)",
                 t});
  // The statistics outputs too (ONNX LayerNormalization returns them).
  out.push_back({"layer_norm_stats", {{"a", {3, 4}}, {"g", {4}}, {"b", {4}}},
                 "  %n, %m, %r = dgraph.layer_norm %a, %g, %b axis = 1, epsilon = "
                 "1.0e-05 : (" + t + ", tensor<4xf64>, tensor<4xf64>) -> (" + t +
                     ", tensor<3xf64>, tensor<3xf64>)\n"
                     "  %mb = dgraph.broadcast_in_dim %m, dims = [0] : "
                     "(tensor<3xf64>) -> " + t + "\n"
                     "  %rb = dgraph.broadcast_in_dim %r, dims = [0] : "
                     "(tensor<3xf64>) -> " + t + "\n"
                     "  %s = dgraph.add %n, %mb : " + t + "\n"
                     "  %y = dgraph.add %s, %rb : " + t,
                 t});
  out.push_back({"layer_norm_stats_only", {{"a", {2, 3, 4}}, {"g", {3, 4}}},
                 "  %n, %m, %r = dgraph.layer_norm %a, %g axis = 1, epsilon = "
                 "1.0e-05 : (tensor<2x3x4xf64>, tensor<3x4xf64>) -> "
                 "(tensor<2x3x4xf64>, tensor<2xf64>, tensor<2xf64>)\n"
                 "  %y = dgraph.concat %m, %r dim = 0 : (tensor<2xf64>, "
                 "tensor<2xf64>) -> tensor<4xf64>",
                 "tensor<4xf64>"});
  out.push_back({"rms_norm_stats", {{"a", {3, 4}}, {"g", {4}}},
                 "  %n, %r = dgraph.rms_norm %a, %g axis = 1, epsilon = 1.0e-05 : (" +
                     t + ", tensor<4xf64>) -> (" + t + ", tensor<3xf64>)\n"
                     "  %rb = dgraph.broadcast_in_dim %r, dims = [0] : "
                     "(tensor<3xf64>) -> " + t + "\n"
                     "  %y = dgraph.add %n, %rb : " + t,
                 t});
  out.push_back({"cross_entropy", {{"a", {3, 4}}},
                 "  %t = dgraph.constant dense<[3, -100, 0]> : tensor<3xi64>\n"
                 "  %y = dgraph.cross_entropy %a, %t : (" + t +
                     ", tensor<3xi64>) -> tensor<3xf64>",
                 "tensor<3xf64>"});
  out.push_back({"dropout", {{"a", {3, 4}}},
                 "  %s = dgraph.constant dense<3> : tensor<i64>\n"
                 "  %y, %mask = dgraph.dropout %a, %s {ratio = 0.5 : f32, seed = 11} : "
                 "(" + t + ", tensor<i64>) -> (" + t + ", tensor<3x4xi1>)",
                 t});
  // Convolutions (and the gradients, which transposed convolutions use in
  // the forward pass): strides with leftover input the window never reads,
  // dilations, groups, depthwise, asymmetric padding, 1-, 2- and 3-D.
  auto conv = [&](const std::string &name, const std::string &op,
                  std::vector<int64_t> a, std::vector<int64_t> b,
                  std::vector<int64_t> y, const std::string &window) {
    out.push_back({name, {{"a", a}, {"b", b}},
                   "  %y = dgraph." + op + " %a, %b " + window + " : (" +
                       tensorType(a) + ", " + tensorType(b) + ") -> " +
                       tensorType(y),
                   tensorType(y)});
  };
  const std::string w1 = "strides = [2], dilations = [1], pad_low = [1], "
                          "pad_high = [0], groups = 1";
  const std::string w2 = "strides = [2, 1], dilations = [1, 2], pad_low = [1, "
                         "0], pad_high = [0, 1], groups = 2";
  const std::string wd = "strides = [2, 2], dilations = [1, 1], pad_low = [1, "
                         "1], pad_high = [1, 1], groups = 3";
  const std::string w3 = "strides = [1, 2, 1], dilations = [1, 1, 1], "
                         "pad_low = [0, 1, 0], pad_high = [1, 0, 0], groups = 1";
  conv("conv1d_strided_leftover", "conv", {2, 2, 9}, {3, 2, 3}, {2, 3, 4}, w1);
  conv("conv2d_groups_dilated", "conv", {1, 4, 5, 6}, {6, 2, 2, 3},
       {1, 6, 3, 3}, w2);
  conv("conv2d_depthwise_strided", "conv", {2, 3, 4, 4}, {3, 1, 3, 3},
       {2, 3, 2, 2}, wd);
  conv("conv3d", "conv", {1, 2, 3, 4, 3}, {2, 2, 2, 2, 2}, {1, 2, 3, 2, 2}, w3);
  conv("conv_input_grad1d_leftover", "conv_input_grad", {2, 3, 4}, {3, 2, 3},
       {2, 2, 9}, w1);
  conv("conv_input_grad2d_groups", "conv_input_grad", {1, 6, 3, 3},
       {6, 2, 2, 3}, {1, 4, 5, 6}, w2);
  conv("conv_input_grad3d", "conv_input_grad", {1, 2, 3, 2, 2},
       {2, 2, 2, 2, 2}, {1, 2, 3, 4, 3}, w3);
  conv("conv_filter_grad1d_leftover", "conv_filter_grad", {2, 2, 9}, {2, 3, 4},
       {3, 2, 3}, w1);
  conv("conv_filter_grad2d_depthwise", "conv_filter_grad", {2, 3, 4, 4},
       {2, 3, 2, 2}, {3, 1, 3, 3}, wd);
  conv("conv_filter_grad2d_groups", "conv_filter_grad", {1, 4, 5, 6},
       {1, 6, 3, 3}, {6, 2, 2, 3}, w2);
  // Batch normalization in training mode: the statistics as the importer
  // builds them (two passes), so the VJP of batch_norm {training} is
  // checked against differences through the statistics.
  const std::string x4 = "tensor<4x3x2xf64>", c3 = "tensor<3xf64>",
                    s3 = "tensor<2x3xf64>";
  auto statsRow = [&](const std::string &out, const std::string &stats,
                      int row) {
    return "  %" + out + "_r = dgraph.slice %" + stats + ", start = [" +
           std::to_string(row) + ", 0], limit = [" + std::to_string(row + 1) +
           ", 3], stride = [1, 1] : (" + s3 + ") -> tensor<1x3xf64>\n" +
           "  %" + out + " = dgraph.reshape %" + out +
           "_r : (tensor<1x3xf64>) -> " + c3 + "\n";
  };
  auto bnArgs = "(" + x4 + ", " + c3 + ", " + c3 + ", " + c3 + ", " + c3 +
                ") -> " + x4;
  out.push_back(
      {"batch_norm_training",
       {{"a", {4, 3, 2}, -1, 2}, {"g", {3}, 0.5, 1.5}, {"b", {3}}},
       "  %zero = dgraph.constant dense<0.0> : " + c3 + "\n" +
           "  %inv = dgraph.constant dense<0.125> : " + c3 + "\n" +
           "  %s1 = dgraph.batch_norm_stats %a, %zero : (" + x4 + ", " + c3 +
           ") -> " + s3 + "\n" + statsRow("sum", "s1", 0) +
           "  %mean = dgraph.mul %sum, %inv : " + c3 + "\n" +
           "  %s2 = dgraph.batch_norm_stats %a, %mean : (" + x4 + ", " + c3 +
           ") -> " + s3 + "\n" + statsRow("m2", "s2", 1) +
           "  %var = dgraph.mul %m2, %inv : " + c3 + "\n" +
           "  %y = dgraph.batch_norm %a, %g, %b, %mean, %var epsilon = 1.0e-05 "
           "{training} : " + bnArgs,
       x4});
  out.push_back({"batch_norm_inference",
                 {{"a", {4, 3, 2}},
                  {"g", {3}},
                  {"b", {3}},
                  {"m", {3}},
                  {"v", {3}, 0.5, 1.5}},
                 "  %y = dgraph.batch_norm %a, %g, %b, %m, %v epsilon = 1.0e-03 : " +
                     bnArgs,
                 x4});
  out.push_back({"batch_norm_update",
                 {{"rm", {3}}, {"rv", {3}}, {"m", {3}}, {"v", {3}}},
                 "  %nm, %nv = dgraph.batch_norm_update %rm, %rv, %m, %v "
                 "{momentum = 0.75, var_scale = 1.25} : " + c3 + "\n" +
                     "  %y = dgraph.add %nm, %nv : " + c3,
                 c3});
  const std::string g6 = "tensor<2x6x3xf64>", p6 = "tensor<6xf64>";
  out.push_back({"group_norm",
                 {{"a", {2, 6, 3}}, {"g", {6}}, {"b", {6}}},
                 "  %y, %m, %r = dgraph.group_norm %a, %g, %b channels_per_group = 3, "
                 "epsilon = 1.0e-05 : (" + g6 + ", " + p6 + ", " + p6 + ") -> (" +
                     g6 + ", tensor<2x2xf64>, tensor<2x2xf64>)",
                 g6});
  out.push_back({"instance_norm",
                 {{"a", {2, 6, 3}}, {"g", {6}}, {"b", {6}}},
                 "  %y, %m, %r = dgraph.group_norm %a, %g, %b channels_per_group = 1, "
                 "epsilon = 1.0e-05 : (" + g6 + ", " + p6 + ", " + p6 + ") -> (" +
                     g6 + ", tensor<2x6xf64>, tensor<2x6xf64>)",
                 g6});
  // Pooling: overlapping windows (stride below the kernel), padding, ceil
  // mode (a last window over the padding and past it), dilation, 1-D, 3-D.
  auto pool = [&](const std::string &name, std::vector<int64_t> in,
                  const std::string &op, const std::string &window,
                  const std::string &outType) {
    std::string inType = tensorType(in);
    std::string results =
        op == "max_pool"
            ? "(" + outType + ", " + outType.substr(0, outType.size() - 4) +
                  "i64>)"
            : outType;
    std::string lhs = op == "max_pool" ? "%y, %i" : "%y";
    out.push_back({name, {{"a", in}},
                   "  " + lhs + " = dgraph." + op + " %a " + window + " : (" +
                       inType + ") -> " + results,
                   outType});
  };
  pool("max_pool", {2, 2, 5, 5}, "max_pool",
       "kernel = [3, 3], strides = [2, 2], dilations = [1, 1], pad_low = [1, 1], "
       "pad_high = [1, 1]",
       "tensor<2x2x3x3xf64>");
  pool("max_pool_ceil", {1, 2, 6, 6}, "max_pool",
       "kernel = [3, 3], strides = [2, 2], dilations = [1, 1], pad_low = [0, 0], "
       "pad_high = [0, 0] {ceil_mode}",
       "tensor<1x2x3x3xf64>");
  pool("max_pool_1d_dilated", {2, 3, 9}, "max_pool",
       "kernel = [3], strides = [1], dilations = [2], pad_low = [1], pad_high = [0]",
       "tensor<2x3x6xf64>");
  pool("avg_pool_count_pad", {2, 2, 5, 5}, "avg_pool",
       "kernel = [3, 3], strides = [2, 2], dilations = [1, 1], pad_low = [1, 1], "
       "pad_high = [1, 1] {count_include_pad}",
       "tensor<2x2x3x3xf64>");
  pool("avg_pool_ceil", {1, 2, 6, 6}, "avg_pool",
       "kernel = [3, 3], strides = [2, 2], dilations = [1, 1], pad_low = [1, 1], "
       "pad_high = [1, 1] {ceil_mode, count_include_pad}",
       "tensor<1x2x4x4xf64>");
  pool("avg_pool_3d", {1, 2, 4, 4, 4}, "avg_pool",
       "kernel = [2, 3, 2], strides = [2, 1, 2], dilations = [1, 1, 1], "
       "pad_low = [0, 1, 0], pad_high = [0, 0, 1]",
       "tensor<1x2x2x3x2xf64>");
  // Resampling, pad modes, N-d indexing and top-k (GraphIndexingOps.td).
  auto resize = [&](const std::string &name, const std::string &attrs,
                    const std::string &scales, std::vector<int64_t> in,
                    std::vector<int64_t> outShape) {
    std::string it = tensorType(in), ot = tensorType(outShape);
    out.push_back({name, {{"a", in}},
                   "  %y = dgraph.resize %a scales = [" + scales + "] " + attrs +
                       " : (" + it + ") -> " + ot,
                   ot});
  };
  resize("resize_linear", "{mode = \"linear\"}", "1.0, 2.0, 1.5", {2, 3, 4},
         {2, 6, 6});
  resize("resize_linear_down_align_corners",
         "{mode = \"linear\", coordinate_transformation_mode = \"align_corners\"}",
         "1.0, 0.6, 0.75", {2, 5, 4}, {2, 3, 3});
  resize("resize_nearest", "{nearest_mode = \"round_prefer_ceil\"}",
         "1.0, 2.0, 0.5", {2, 3, 6}, {2, 6, 3});
  resize("resize_cubic_exclude_outside",
         "{mode = \"cubic\", cubic_coeff_a = -0.5, exclude_outside}",
         "1.0, 2.0, 1.0", {2, 4, 3}, {2, 8, 3});
  resize("resize_linear_antialias", "{mode = \"linear\", antialias}",
         "1.0, 0.5, 0.4", {2, 6, 5}, {2, 3, 2});
  resize("resize_crop_extrapolate",
         "{mode = \"linear\", coordinate_transformation_mode = "
         "\"tf_crop_and_resize\", extrapolation_value = 3.0, roi = array<f64: "
         "0.0, 0.2, 1.0, 1.5>}",
         "1.0, 1.0", {3, 5}, {3, 5});
  out.push_back({"resize_grad", {{"a", {2, 6, 6}}},
                 "  %y = dgraph.resize_grad %a scales = [1.0, 2.0, 1.5] {mode = "
                 "\"linear\"} : (tensor<2x6x6xf64>) -> tensor<2x3x4xf64>",
                 "tensor<2x3x4xf64>"});
  // grid_sample: the image's and the grid's gradients (grid points past
  // the borders, clear of the kinks for random values).
  auto gridSample = [&](const std::string &name, const std::string &attrs) {
    out.push_back({name,
                   {{"a", {2, 2, 3, 4}}, {"g", {2, 3, 2, 2}, -1.2, 1.2}},
                   "  %y = dgraph.grid_sample %a, %g " + attrs +
                       " : (tensor<2x2x3x4xf64>, tensor<2x3x2x2xf64>) -> "
                       "tensor<2x2x3x2xf64>",
                   "tensor<2x2x3x2xf64>"});
  };
  gridSample("grid_sample_bilinear_reflection",
             "{padding_mode = \"reflection\"}");
  gridSample("grid_sample_bicubic_border_align_corners",
             "{mode = \"bicubic\", padding_mode = \"border\", "
             "align_corners = true}");
  gridSample("grid_sample_nearest", "{mode = \"nearest\"}");
  auto pad = [&](const std::string &mode, std::vector<int64_t> in,
                 const std::string &low, const std::string &high,
                 std::vector<int64_t> outShape) {
    std::string ot = tensorType(outShape);
    out.push_back({"pad_" + mode, {{"a", in}},
                   "  %z = dgraph.constant dense<0.0> : tensor<f64>\n"
                   "  %y = dgraph.pad %a, %z, low = [" + low + "], high = [" +
                       high + "] {mode = \"" + mode + "\"} : (" +
                       tensorType(in) + ", tensor<f64>) -> " + ot,
                   ot});
  };
  pad("edge", {3, 2}, "1, 2", "2, 3", {6, 7});
  pad("reflect", {3, 2}, "4, 1", "2, 3", {9, 6});
  pad("wrap", {3, 2}, "-1, 3", "4, 2", {6, 7});
  out.push_back({"pad_grad", {{"a", {6, 7}}},
                 "  %y = dgraph.pad_grad %a, low = [1, 2], high = [2, 3] {mode = "
                 "\"reflect\"} : (tensor<6x7xf64>) -> tensor<3x2xf64>",
                 "tensor<3x2xf64>"});
  out.push_back({"gather_nd", {{"a", {4, 3, 2}}},
                 "  %i = dgraph.constant dense<[[1, 2], [-1, 0], [1, 2]]> : "
                 "tensor<3x2xi64>\n"
                 "  %y = dgraph.gather_nd %a, %i batch_dims = 0 : "
                 "(tensor<4x3x2xf64>, tensor<3x2xi64>) -> tensor<3x2xf64>",
                 "tensor<3x2xf64>"});
  out.push_back({"gather_nd_batch", {{"a", {2, 3, 4}}},
                 "  %i = dgraph.constant dense<[[[2], [0], [2]], [[1], [1], [0]]]> "
                 ": tensor<2x3x1xi64>\n"
                 "  %y = dgraph.gather_nd %a, %i batch_dims = 1 : "
                 "(tensor<2x3x4xf64>, tensor<2x3x1xi64>) -> tensor<2x3x4xf64>",
                 "tensor<2x3x4xf64>"});
  auto scatterNd = [&](const std::string &name, const std::string &indices,
                       const std::string &reduction) {
    out.push_back({name, {{"a", {4, 3}}, {"b", {2, 3}}},
                   "  %i = dgraph.constant dense<" + indices +
                       "> : tensor<2x1xi64>\n"
                       "  %y = dgraph.scatter_nd %a, %i, %b batch_dims = 0 "
                       "{reduction = \"" + reduction +
                       "\"} : (tensor<4x3xf64>, tensor<2x1xi64>, "
                       "tensor<2x3xf64>) -> tensor<4x3xf64>",
                   "tensor<4x3xf64>"});
  };
  scatterNd("scatter_nd_none", "[[2], [0]]", "none");
  scatterNd("scatter_nd_add", "[[1], [-3]]", "add");
  // Repeated targets: products and maxima over several updates.
  scatterNd("scatter_nd_mul", "[[1], [1]]", "mul");
  scatterNd("scatter_nd_max", "[[3], [3]]", "max");
  scatterNd("scatter_nd_min", "[[0], [2]]", "min");
  auto scatterElements = [&](const std::string &name,
                             const std::string &indices,
                             const std::string &reduction) {
    out.push_back({name, {{"a", {3, 4}}, {"b", {2, 4}}},
                   "  %i = dgraph.constant dense<" + indices +
                       "> : tensor<2x4xi64>\n"
                       "  %y = dgraph.scatter_elements %a, %i, %b axis = 0 "
                       "{reduction = \"" + reduction +
                       "\"} : (tensor<3x4xf64>, tensor<2x4xi64>, "
                       "tensor<2x4xf64>) -> " + t,
                   t});
  };
  scatterElements("scatter_elements_none", "[[0, 1, 2, 0], [2, 0, 1, -2]]",
                  "none");
  scatterElements("scatter_elements_add", "[[0, 1, 2, 0], [0, 1, 1, 0]]", "add");
  scatterElements("scatter_elements_mul", "[[0, 1, 2, 0], [0, 1, 1, 0]]", "mul");
  scatterElements("scatter_elements_max", "[[2, 1, 2, 0], [2, 0, 1, 0]]", "max");
  scatterElements("scatter_elements_min", "[[1, 1, 2, 0], [1, 0, 1, 2]]", "min");
  out.push_back({"gather_elements", {{"a", {3, 5}}},
                 "  %i = dgraph.constant dense<[[0, 4, 4, 1], [2, 2, 0, -1], "
                 "[3, 1, 0, 0]]> : tensor<3x4xi64>\n"
                 "  %y = dgraph.gather_elements %a, %i axis = 1 : "
                 "(tensor<3x5xf64>, tensor<3x4xi64>) -> " + t,
                 t});
  out.push_back({"top_k", {{"a", {3, 6}}},
                 "  %y, %i = dgraph.top_k %a, k = 4, axis = 1 : "
                 "(tensor<3x6xf64>) -> (" + t + ", tensor<3x4xi64>)",
                 t});
  out.push_back({"top_k_smallest", {{"a", {5, 4}}},
                 "  %y, %i = dgraph.top_k %a, k = 3, axis = 0 {largest = false} "
                 ": (tensor<5x4xf64>) -> (" + t + ", tensor<3x4xi64>)",
                 t});
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllOps, VJPTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case> &info) {
                           return info.param.name;
                         });

} // namespace
