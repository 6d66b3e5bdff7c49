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

int64_t numel(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
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
      maxErr = std::max(maxErr, std::abs(numeric - analytic[k]));
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
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllOps, VJPTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case> &info) {
                           return info.param.name;
                         });

} // namespace
