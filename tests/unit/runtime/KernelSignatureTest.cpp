//===- KernelSignatureTest.cpp - the kernel-signature table and its check -===//
//
// The table generated from runtime/kernels/Kernels.td: its check on good and
// bad calls (operand counts, element types, ranks, relations, attributes),
// the defaults it gives readers, and that it lists exactly the kernels the
// CPU registry has (the CUDA registry is compared in tests/unit/cuda).
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/KernelSignature.h"

#include <gtest/gtest.h>

#include <set>

namespace dtcc::runtime {
namespace {

KernelOperandType t(DType d, std::vector<int64_t> shape) {
  return {d, std::move(shape)};
}

Status check(const std::string &kernel, std::vector<KernelOperandType> ins,
             std::vector<KernelOperandType> outs, const Attrs &attrs = {}) {
  const KernelSignature *sig = findKernelSignature(kernel);
  if (!sig)
    return notFound("no signature for ", kernel);
  return checkKernelCall(*sig, ins, outs, attrs);
}

/// Expects `s` to fail with `text` in its message.
void expectError(const Status &s, const std::string &text) {
  EXPECT_FALSE(s.isOk()) << "expected an error with: " << text;
  EXPECT_NE(s.message().find(text), std::string::npos) << s.message();
}

TEST(KernelSignatures, TableIsSortedAndComplete) {
  const std::vector<KernelSignature> &table = kernelSignatures();
  ASSERT_GT(table.size(), 100u);
  for (size_t i = 1; i < table.size(); ++i)
    EXPECT_LT(table[i - 1].name, table[i].name);
  for (const KernelSignature &sig : table) {
    EXPECT_EQ(findKernelSignature(sig.name), &sig) << sig.name;
    EXPECT_FALSE(sig.summary.empty()) << sig.name;
    EXPECT_NE(sig.backends, 0u) << sig.name;
    for (const KernelTensorSignature &op : sig.inputs)
      EXPECT_FALSE(op.dtypes.empty()) << sig.name << " " << op.name;
    for (const KernelTensorSignature &op : sig.outputs)
      EXPECT_FALSE(op.dtypes.empty()) << sig.name << " " << op.name;
  }
  EXPECT_EQ(findKernelSignature("no_such_kernel"), nullptr);
}

TEST(KernelSignatures, DgraphSourcesAreTheirKernelsNames) {
  // The lowering emits an op as the kernel of its name: the table says so.
  for (const KernelSignature &sig : kernelSignatures()) {
    if (sig.source.empty())
      continue;
    size_t dot = sig.source.find('.');
    ASSERT_NE(dot, std::string::npos) << sig.source;
    EXPECT_EQ(sig.source.substr(dot + 1), sig.name);
  }
  EXPECT_EQ(findKernelSignature("matmul")->source, "dgraph.matmul");
  EXPECT_EQ(findKernelSignature("all_reduce")->source, "dshard.all_reduce");
  EXPECT_EQ(findKernelSignature("copy")->source, "");
}

TEST(KernelSignatures, AcceptsGoodCalls) {
  Attrs transpose;
  transpose.set("transpose_rhs", int64_t(1));
  EXPECT_TRUE(check("matmul", {t(DType::kF32, {2, 3}), t(DType::kF32, {4, 3})},
                    {t(DType::kF32, {2, 4})}, transpose)
                  .isOk());
  Attrs dim;
  dim.set("dim", int64_t(-1));
  EXPECT_TRUE(check("softmax", {t(DType::kBF16, {2, 5})},
                    {t(DType::kBF16, {2, 5})}, dim)
                  .isOk());
  // Attributes of a dialect are not the kernel's and pass through.
  dim.set("dshard.stage", int64_t(1));
  EXPECT_TRUE(check("softmax", {t(DType::kF32, {5})}, {t(DType::kF32, {5})},
                    dim)
                  .isOk());
}

TEST(KernelSignatures, RefusesWrongOperandCounts) {
  Status s = check("add", {t(DType::kF32, {2})}, {t(DType::kF32, {2})});
  expectError(s, "expected 2 inputs (lhs, rhs), got 1");
  s = check("add", {t(DType::kF32, {2}), t(DType::kF32, {2})}, {});
  expectError(s, "expected 1 outputs (result), got 0");
  // An optional last input: layer_norm takes a bias or not.
  Attrs ln;
  ln.set("axis", int64_t(1));
  ln.set("epsilon", 1e-5);
  const auto x = t(DType::kF32, {2, 4}), w = t(DType::kF32, {4}),
             stat = t(DType::kF32, {2, 1});
  EXPECT_TRUE(check("layer_norm", {x, w}, {x, stat, stat}, ln).isOk());
  EXPECT_TRUE(check("layer_norm", {x, w, w}, {x, stat, stat}, ln).isOk());
  expectError(check("layer_norm", {x, w, w, w}, {x, stat, stat}, ln),
              "expected 2 or 3 inputs (operand, scale, bias?), got 4");
  // Variadic: concat takes any number of operands, wait none at all.
  Attrs cat;
  cat.set("dim", int64_t(0));
  EXPECT_TRUE(check("concat", {w, w, w}, {t(DType::kF32, {12})}, cat).isOk());
  Attrs handle;
  handle.set("handle", int64_t(3));
  EXPECT_TRUE(check("wait", {}, {}, handle).isOk());
  expectError(check("wait", {}, {w}, handle), "expected 0 outputs");
}

TEST(KernelSignatures, RefusesWrongElementTypesRanksAndRelations) {
  expectError(check("exp", {t(DType::kI32, {3})}, {t(DType::kI32, {3})}),
              "input 0 'operand': expected element type f16, bf16, f32 or "
              "f64, got tensor<3xi32>");
  expectError(check("add", {t(DType::kF32, {3}), t(DType::kF64, {3})},
                    {t(DType::kF32, {3})}),
              "expected 'rhs' to have the type of 'lhs' (tensor<3xf32>), got "
              "tensor<3xf64>");
  expectError(check("add", {t(DType::kF32, {3}), t(DType::kF32, {3})},
                    {t(DType::kF32, {4})}),
              "expected 'result' to have the type of 'lhs'");
  expectError(check("eq", {t(DType::kF32, {3}), t(DType::kF32, {3})},
                    {t(DType::kF32, {3})}),
              "output 0 'result': expected element type i1");
  // A scalar is one element of any rank; two elements are not one.
  Attrs lr;
  lr.set("base_lr", 0.1);
  lr.set("min_lr", 0.0);
  lr.set("warmup", int64_t(0));
  lr.set("kind", std::string("cosine"));
  const auto step = t(DType::kI64, {});
  EXPECT_TRUE(
      check("lr_schedule", {step, t(DType::kI64, {1, 1})},
            {t(DType::kF32, {})}, lr)
          .isOk());
  expectError(check("lr_schedule", {step, t(DType::kI64, {2})},
                    {t(DType::kF32, {})}, lr),
              "input 1 'total': expected one element, got tensor<2xi64>");
  // A rank: dropout's offsets are a vector.
  Attrs drop;
  drop.set("ratio", 0.5);
  drop.set("seed", int64_t(1));
  const auto x = t(DType::kF32, {4}), mask = t(DType::kBool, {4});
  EXPECT_TRUE(check("dropout", {x, step, t(DType::kI64, {1})}, {x, mask}, drop)
                  .isOk());
  expectError(check("dropout", {x, step, t(DType::kI64, {1, 1})}, {x, mask},
                    drop),
              "input 2 'offsets': expected rank 1, got tensor<1x1xi64>");
  // random: a step, offsets optional, a float result and its distribution.
  Attrs draw;
  draw.set("distribution", std::string("normal"));
  draw.set("shift", 0.0);
  draw.set("scale", 1.0);
  draw.set("seed", int64_t(1));
  EXPECT_TRUE(check("random", {step}, {x}, draw).isOk());
  EXPECT_TRUE(check("random", {step, t(DType::kI64, {1})}, {x}, draw).isOk());
  expectError(check("random", {step}, {t(DType::kI64, {4})}, draw),
              "output 0 'result': expected element type f16, bf16, f32 or f64");
  draw.set("distribution", std::string("gamma"));
  expectError(check("random", {step}, {x}, draw),
              "attribute 'distribution': expected one of \"uniform\", "
              "\"normal\", got \"gamma\"");
}

TEST(KernelSignatures, RefusesBadAttributes) {
  const auto x = t(DType::kF32, {2, 5});
  expectError(check("softmax", {x}, {x}), "missing attribute 'dim' (an integer)");
  Attrs dim;
  dim.set("dim", std::string("last"));
  expectError(check("softmax", {x}, {x}, dim),
              "attribute 'dim': expected an integer, got a string");
  Attrs extra;
  extra.set("dim", int64_t(1));
  extra.set("temperature", 2.0);
  expectError(check("softmax", {x}, {x}, extra),
              "unexpected attribute 'temperature' (the kernel takes dim)");
  Attrs none;
  none.set("alpha", 1.0);
  expectError(check("relu", {x}, {x}, none),
              "unexpected attribute 'alpha' (the kernel takes none)");
  Attrs gelu;
  gelu.set("approximate", std::string("fast"));
  expectError(check("gelu", {x}, {x}, gelu),
              "attribute 'approximate': expected one of \"none\", \"tanh\", "
              "got \"fast\"");
  // A flag is 0 or 1; a float takes an integer's value, an integer no float.
  Attrs mm;
  mm.set("transpose_lhs", int64_t(2));
  expectError(check("matmul", {x, t(DType::kF32, {5, 2})},
                    {t(DType::kF32, {2, 2})}, mm),
              "attribute 'transpose_lhs': expected a bool (0 or 1), got an "
              "integer");
  Attrs ar;
  ar.set("axes", std::string("dp,tp"));
  ar.set("handle", 1.5);
  expectError(check("all_reduce", {x}, {x}, ar),
              "attribute 'handle': expected an integer, got a float");
  Attrs axes;
  axes.set("axes", std::vector<std::string>{"dp", "tp"});
  axes.set("reduce", std::string("max"));
  EXPECT_TRUE(check("all_reduce", {x}, {x}, axes).isOk());
  axes.set("reduce", std::string("avg"));
  expectError(check("all_reduce", {x}, {x}, axes),
              "attribute 'reduce': expected one of \"sum\", \"max\", \"min\", "
              "\"prod\", got \"avg\"");
  // Integer arrays may be left out (read as empty), not be of floats.
  EXPECT_TRUE(check("transpose", {x}, {x}).isOk());
  Attrs perm;
  perm.set("perm", std::vector<double>{1.0, 0.0});
  expectError(check("transpose", {x}, {x}, perm),
              "attribute 'perm': expected an integer array, got a float array");
}

TEST(KernelSignatures, GivesReadersTheTablesDefaults) {
  const KernelSignature &resize = *findKernelSignature("resize");
  Attrs a = withKernelDefaults(resize, Attrs());
  EXPECT_EQ(a.getString("mode").value(), "nearest");
  EXPECT_EQ(a.getString("coordinate_transformation_mode").value(),
            "half_pixel");
  EXPECT_EQ(a.getFloat("cubic_coeff_a").value(), -0.75);
  EXPECT_EQ(a.getInt("antialias").value(), 0);
  EXPECT_FALSE(a.has("roi")); // optional, no default
  Attrs set;
  set.set("mode", std::string("cubic"));
  EXPECT_EQ(withKernelDefaults(resize, set).getString("mode").value(), "cubic");
  Attrs conv = withKernelDefaults(*findKernelSignature("is_inf"), Attrs());
  EXPECT_EQ(conv.getInt("detect_positive").value(), 1);
  EXPECT_EQ(withKernelDefaults(*findKernelSignature("cross_entropy"), Attrs())
                .getInt("ignore_index")
                .value(),
            -100);
}

TEST(KernelSignatures, ListExactlyTheCpuKernels) {
  std::set<std::string> registered, listed;
  for (const std::string &n : cpuKernels().names())
    registered.insert(n);
  for (const KernelSignature &sig : kernelSignatures())
    if (sig.backends & kCpuBackend)
      listed.insert(sig.name);
  for (const std::string &n : registered)
    EXPECT_TRUE(listed.count(n))
        << "the CPU backend registers '" << n
        << "', which runtime/kernels/Kernels.td does not list for \"cpu\"";
  for (const std::string &n : listed)
    EXPECT_TRUE(registered.count(n))
        << "runtime/kernels/Kernels.td lists '" << n
        << "' for \"cpu\", which the CPU backend does not register";
}

TEST(KernelSignatures, RegistriesCheckBeforeTheFactory) {
  // A factory that would bind anything: only calls the table takes reach it.
  KernelRegistry registry;
  int reached = 0;
  KernelFactory anything = [&](const KernelContext &) -> StatusOr<KernelFn> {
    ++reached;
    return KernelFn([] { return Status::ok(); });
  };
  registry.add("relu", anything);
  registry.add("not_a_kernel", anything);
  float data[4] = {};
  KernelContext ctx;
  ctx.kernel = "relu";
  ctx.location = "node_relu";
  ctx.inputs = {makeView(data, DType::kF32, {4})};
  ctx.outputs = {makeView(data, DType::kF32, {4})};
  EXPECT_TRUE((*registry.find("relu"))(ctx).isOk());
  EXPECT_EQ(reached, 1);
  ctx.attrs.set("alpha", 0.1);
  auto bad = (*registry.find("relu"))(ctx);
  expectError(bad.status(), "relu at 'node_relu': unexpected attribute 'alpha'");
  EXPECT_EQ(reached, 1);
  ctx.kernel = "not_a_kernel";
  ctx.attrs = Attrs();
  auto unknown = (*registry.find("not_a_kernel"))(ctx);
  expectError(unknown.status(),
              "not_a_kernel at 'node_relu': no such kernel in the "
              "kernel-signature table (runtime/kernels/Kernels.td)");
  EXPECT_EQ(reached, 1);
}

} // namespace
} // namespace dtcc::runtime
