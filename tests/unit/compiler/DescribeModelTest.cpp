//===- DescribeModelTest.cpp - the planner's model read from the IR -------===//
//
// Zoo models built in memory, imported with shapes only and described from
// their IR: the sizes equal the zoo's own options (as the zoo spec
// describes them), the parameters the zoo's closed-form count, and the
// FLOPs of each layer a count written out here from the options (2 per
// multiply-add of every matmul at the model's batch and sequence).
//
//===----------------------------------------------------------------------===//

#include "compiler/DescribeModel.h"
#include "compiler/Driver.h"
#include "compiler/Planning.h"
#include "frontends/onnx/OnnxImporter.h"
#include "frontends/zoo/Zoo.h"

#include "mlir/IR/MLIRContext.h"
#include "tests/unit/compiler/CompilerTestContext.h"

#include <gtest/gtest.h>

using namespace dtcc;

namespace {

/// The zoo model of `options` (validated here), imported without weights
/// and described.
DescribedModel describeZoo(zoo::ZooOptions &options, mlir::MLIRContext &ctx) {
  options.weights = false;
  EXPECT_EQ(zoo::validate(options), "");
  std::string bytes;
  EXPECT_TRUE(zoo::buildModel(options).SerializeToString(&bytes));
  onnx_frontend::ImportOptions import;
  import.loadWeights = false;
  auto module = onnx_frontend::importOnnxBytes(bytes, "model.onnx", "", &ctx,
                                               import);
  EXPECT_TRUE(mlir::succeeded(module));
  if (mlir::failed(module))
    return {};
  return describeModel(**module, "model.onnx");
}

/// Forward FLOPs of one layer of `o` for one step: each matmul's 2*m*k*n
/// at batch x seq tokens, and the attention's scores and context (2 * seq
/// * head_dim per key, per head and query, twice).
double layerFlops(const zoo::ZooOptions &o) {
  double tokens = double(o.batch) * double(o.seq), h = double(o.hidden);
  double kv = double(o.kvHeads ? o.kvHeads : o.heads) * h / double(o.heads);
  double f = double(o.ffnHidden);
  double weights = o.family == zoo::Family::Llama
                       ? h * h + 2 * h * kv + h * h + 3 * h * f
                       : h * 3 * h + h * h + 2 * h * f;
  double attention = 2 * 2 * tokens * double(o.seq) * h;
  return 2 * tokens * weights + attention;
}

void expectSameSizes(const planner::ModelDesc &got,
                     const planner::ModelDesc &want) {
  EXPECT_EQ(got.layers, want.layers);
  EXPECT_EQ(got.hidden, want.hidden);
  EXPECT_EQ(got.heads, want.heads);
  EXPECT_EQ(got.kvHeads, want.kvHeads);
  EXPECT_EQ(got.ffnHidden, want.ffnHidden);
  EXPECT_EQ(got.vocab, want.vocab);
  EXPECT_EQ(got.seq, want.seq);
  EXPECT_EQ(got.gatedMlp, want.gatedMlp);
  EXPECT_EQ(got.tiedEmbeddings, want.tiedEmbeddings);
  EXPECT_EQ(got.norm, want.norm);
  EXPECT_EQ(got.linearBias, want.linearBias);
  EXPECT_EQ(got.learnedPositions, want.learnedPositions);
  EXPECT_EQ(got.dropout, want.dropout);
  EXPECT_EQ(got.flashAttention, want.flashAttention);
}

struct Case {
  const char *what;
  zoo::ZooOptions options;
};

std::vector<Case> transformers() {
  std::vector<Case> cases;
  zoo::ZooOptions gpt;
  gpt.family = zoo::Family::Gpt;
  gpt.layers = 3;
  gpt.hidden = 48;
  gpt.heads = 4;
  gpt.vocab = 96;
  gpt.seq = 12;
  gpt.batch = 2;
  cases.push_back({"gpt", gpt});
  zoo::ZooOptions tied = gpt;
  tied.tiedEmbeddings = true;
  tied.ffnHidden = 80; // not 4 x hidden
  cases.push_back({"gpt tied, ffn 80", tied});
  zoo::ZooOptions llama;
  llama.family = zoo::Family::Llama;
  llama.layers = 2;
  llama.hidden = 64;
  llama.heads = 8;
  llama.kvHeads = 2;
  llama.vocab = 100;
  llama.seq = 10;
  llama.batch = 3;
  cases.push_back({"llama, grouped-query attention", llama});
  zoo::ZooOptions llamaTied = llama;
  llamaTied.kvHeads = 0;
  llamaTied.tiedEmbeddings = true;
  llamaTied.opset = 21;
  cases.push_back({"llama tied, opset 21", llamaTied});
  return cases;
}

TEST(DescribeModel, ZooTransformersAreTheZoosOwnOptions) {
  for (Case &c : transformers()) {
    SCOPED_TRACE(c.what);
    DescribedModel d = describeZoo(c.options, test::compilerContext());
    ASSERT_TRUE(d.isTransformer()) << d.notTransformer;
    expectSameSizes(d.model, describeZooOptions(c.options, "model.onnx"));

    const planner::ModelDesc::GraphFigures &g = d.model.graph;
    EXPECT_EQ(g.batch, c.options.batch);
    EXPECT_EQ(g.parameters, double(zoo::parameterCount(c.options)));
    EXPECT_EQ(g.parameterBytes, 4.0 * double(zoo::parameterCount(c.options)));
    ASSERT_EQ(g.layerForwardFlops.size(), size_t(c.options.layers));
    for (double f : g.layerForwardFlops)
      EXPECT_DOUBLE_EQ(f, layerFlops(c.options));
    // The layers and the logits [tokens, hidden] x [hidden, vocab].
    double head = 2.0 * double(c.options.batch) * double(c.options.seq) *
                  double(c.options.hidden) * double(c.options.vocab);
    EXPECT_DOUBLE_EQ(g.forwardFlops,
                     double(c.options.layers) * layerFlops(c.options) + head);
    // At least the logits and each layer's [batch, heads, seq, seq] scores
    // and probabilities, in f32.
    double scores = double(c.options.batch) * double(c.options.heads) *
                    double(c.options.seq) * double(c.options.seq);
    EXPECT_GT(g.activationBytes,
              4.0 * (head / 2 / double(c.options.hidden) +
                     2 * scores * double(c.options.layers)));
  }
}

TEST(DescribeModel, AnMlpIsNotATransformerButHasItsFigures) {
  zoo::ZooOptions mlp;
  mlp.family = zoo::Family::Mlp;
  mlp.layers = 2;
  mlp.hidden = 32;
  mlp.inputs = 20;
  mlp.classes = 5;
  mlp.batch = 4;
  DescribedModel d = describeZoo(mlp, test::compilerContext());
  EXPECT_FALSE(d.isTransformer());
  EXPECT_FALSE(d.notTransformer.empty());
  EXPECT_EQ(d.model.layers, 0);
  const planner::ModelDesc::GraphFigures &g = d.model.graph;
  EXPECT_EQ(g.batch, 4);
  EXPECT_EQ(g.parameters, double(zoo::parameterCount(mlp)));
  // Gemm x W for 20 -> 32 -> 32 -> 5 at batch 4.
  EXPECT_DOUBLE_EQ(g.forwardFlops, 2.0 * 4 * (20 * 32 + 32 * 32 + 32 * 5));
}

} // namespace
