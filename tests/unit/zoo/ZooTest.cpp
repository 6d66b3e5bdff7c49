//===- ZooTest.cpp - tests of the model zoo -------------------------------===//
//
// The zoo's models pass ONNX's checker and strict shape inference, count
// their parameters exactly, are deterministic, and write external data.
//
//===----------------------------------------------------------------------===//

#include "frontends/zoo/Zoo.h"

#include "onnx/checker.h"
#include "onnx/shape_inference/implementation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

using namespace dtcc::zoo;
namespace fs = std::filesystem;

namespace {

ZooOptions smallGpt() {
  ZooOptions o;
  o.family = Family::Gpt;
  o.layers = 2;
  o.hidden = 64;
  o.heads = 4;
  o.vocab = 100;
  o.seq = 16;
  o.batch = 2;
  o.seed = 7;
  return o;
}

ZooOptions smallLlama() {
  ZooOptions o;
  o.family = Family::Llama;
  o.layers = 2;
  o.hidden = 64;
  o.heads = 8;
  o.kvHeads = 2;
  o.vocab = 100;
  o.seq = 16;
  o.batch = 2;
  o.seed = 7;
  return o;
}

ZooOptions smallMlp() {
  ZooOptions o;
  o.family = Family::Mlp;
  o.layers = 3;
  o.hidden = 32;
  o.inputs = 20;
  o.classes = 5;
  o.batch = 4;
  return o;
}

/// Runs ONNX's checker and strict shape inference (which also compares the
/// declared output shapes with the inferred ones); returns their error.
std::string checkOnnx(onnx::ModelProto model) {
  try {
    onnx::checker::check_model(model);
    onnx::ShapeInferenceOptions options(/*check_type=*/true,
                                        /*strict_mode=*/1);
    onnx::shape_inference::InferShapes(
        model, onnx::OpSchemaRegistry::Instance(), options);
  } catch (const std::exception &e) {
    return e.what();
  }
  return "";
}

std::vector<int64_t> dimsOf(const onnx::ValueInfoProto &info) {
  std::vector<int64_t> dims;
  for (const auto &d : info.type().tensor_type().shape().dim())
    dims.push_back(d.dim_value());
  return dims;
}

int64_t elements(const onnx::TensorProto &t) {
  int64_t n = 1;
  for (int64_t d : t.dims())
    n *= d;
  return n;
}

int64_t initializerTotal(const onnx::ModelProto &m) {
  int64_t n = 0;
  for (const auto &t : m.graph().initializer())
    n += elements(t);
  return n;
}

const onnx::TensorProto *findInitializer(const onnx::ModelProto &m,
                                         const std::string &name) {
  for (const auto &t : m.graph().initializer())
    if (t.name() == name)
      return &t;
  return nullptr;
}

std::vector<float> floatsOf(const onnx::TensorProto &t) {
  std::vector<float> v(t.raw_data().size() / sizeof(float));
  std::memcpy(v.data(), t.raw_data().data(), v.size() * sizeof(float));
  return v;
}

std::string metadata(const onnx::ModelProto &m, const std::string &key) {
  for (const auto &e : m.metadata_props())
    if (e.key() == key)
      return e.value();
  return "";
}

std::map<std::string, std::string> externalData(const onnx::TensorProto &t) {
  std::map<std::string, std::string> kv;
  for (const auto &e : t.external_data())
    kv[e.key()] = e.value();
  return kv;
}

int countOps(const onnx::ModelProto &m, const std::string &type) {
  int n = 0;
  for (const auto &node : m.graph().node())
    n += node.op_type() == type;
  return n;
}

std::string readFile(const fs::path &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// A fresh directory under the test temp dir.
fs::path freshDir(const std::string &name) {
  fs::path dir = fs::path(::testing::TempDir()) / ("dtcc_zoo_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

ZooOptions validated(ZooOptions o) {
  std::string e = validate(o);
  EXPECT_EQ(e, "");
  return o;
}

//===----------------------------------------------------------------------===//
// Structure
//===----------------------------------------------------------------------===//

TEST(ZooTest, GptPassesCheckerWithDeclaredShapes) {
  onnx::ModelProto m = buildModel(validated(smallGpt()));
  EXPECT_EQ(checkOnnx(m), "");
  EXPECT_EQ(m.ir_version(), 8);
  EXPECT_EQ(m.producer_name(), "dtcc zoo");
  ASSERT_EQ(m.opset_import_size(), 1);
  EXPECT_EQ(m.opset_import(0).domain(), "");
  EXPECT_EQ(m.opset_import(0).version(), 17);
  const auto &g = m.graph();
  ASSERT_EQ(g.input_size(), 2);
  EXPECT_EQ(g.input(0).name(), "ids");
  EXPECT_EQ(g.input(0).type().tensor_type().elem_type(),
            onnx::TensorProto::INT64);
  EXPECT_EQ(dimsOf(g.input(0)), (std::vector<int64_t>{2, 16}));
  EXPECT_EQ(g.input(1).name(), "labels");
  EXPECT_EQ(g.input(1).type().tensor_type().elem_type(),
            onnx::TensorProto::INT64);
  EXPECT_EQ(dimsOf(g.input(1)), (std::vector<int64_t>{2, 16}));
  ASSERT_EQ(g.output_size(), 2);
  EXPECT_EQ(g.output(0).name(), "loss");
  EXPECT_EQ(g.output(0).type().tensor_type().elem_type(),
            onnx::TensorProto::FLOAT);
  EXPECT_TRUE(dimsOf(g.output(0)).empty());
  EXPECT_EQ(g.output(1).name(), "logits");
  EXPECT_EQ(dimsOf(g.output(1)), (std::vector<int64_t>{2, 16, 100}));
  // The exact GELU below opset 20, one per block.
  EXPECT_EQ(countOps(m, "Erf"), 2);
  EXPECT_EQ(countOps(m, "Gelu"), 0);
  EXPECT_EQ(countOps(m, "LayerNormalization"), 5);
  EXPECT_EQ(countOps(m, "SoftmaxCrossEntropyLoss"), 1);
  EXPECT_EQ(metadata(m, "dtcc.zoo"),
            "gpt layers=2 hidden=64 heads=4 ffn-hidden=256 vocab=100 seq=16 "
            "batch=2 norm-eps=1e-05 tied-embeddings=0 opset=17 seed=7 "
            "weights=1");
  EXPECT_EQ(metadata(m, "dtcc.no_weights"), "");
}

TEST(ZooTest, LlamaWithGqaPassesChecker) {
  ZooOptions o = validated(smallLlama());
  // The Llama rule: 256 * ceil((8 * 64 / 3) / 256).
  EXPECT_EQ(o.ffnHidden, 256);
  onnx::ModelProto m = buildModel(o);
  EXPECT_EQ(checkOnnx(m), "");
  EXPECT_EQ(dimsOf(m.graph().output(1)), (std::vector<int64_t>{2, 16, 100}));
  // k and v repeated in each of the two blocks.
  EXPECT_EQ(countOps(m, "Expand"), 4);
  EXPECT_EQ(countOps(m, "Sigmoid"), 2);
  EXPECT_EQ(countOps(m, "LayerNormalization"), 0);
  // RMSNorm: two per block and a final one.
  EXPECT_EQ(countOps(m, "ReduceMean"), 5);
  const auto *k = findInitializer(m, "layers.1.attn.k.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(std::vector<int64_t>(k->dims().begin(), k->dims().end()),
            (std::vector<int64_t>{64, 2 * 8}));
}

TEST(ZooTest, LlamaWithoutGqaHasNoExpand) {
  ZooOptions o = smallLlama();
  o.kvHeads = 0;
  o = validated(o);
  EXPECT_EQ(o.kvHeads, 8);
  onnx::ModelProto m = buildModel(o);
  EXPECT_EQ(checkOnnx(m), "");
  EXPECT_EQ(countOps(m, "Expand"), 0);
}

TEST(ZooTest, MlpPassesChecker) {
  onnx::ModelProto m = buildModel(validated(smallMlp()));
  EXPECT_EQ(checkOnnx(m), "");
  const auto &g = m.graph();
  ASSERT_EQ(g.input_size(), 2);
  EXPECT_EQ(g.input(0).name(), "x");
  EXPECT_EQ(g.input(0).type().tensor_type().elem_type(),
            onnx::TensorProto::FLOAT);
  EXPECT_EQ(dimsOf(g.input(0)), (std::vector<int64_t>{4, 20}));
  EXPECT_EQ(dimsOf(g.input(1)), (std::vector<int64_t>{4}));
  EXPECT_EQ(g.output(0).name(), "loss");
  EXPECT_EQ(dimsOf(g.output(1)), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(countOps(m, "Gemm"), 4);
  EXPECT_EQ(countOps(m, "Relu"), 3);
}

TEST(ZooTest, NodesAreNamedByLayerAndInitializersAreParameters) {
  for (ZooOptions o : {smallGpt(), smallLlama(), smallMlp()}) {
    onnx::ModelProto m = buildModel(validated(o));
    std::set<std::string> names;
    std::map<std::string, int> perLayer;
    for (const auto &n : m.graph().node()) {
      EXPECT_TRUE(names.insert(n.name()).second) << n.name();
      for (int l = 0; l < 8; ++l)
        perLayer[std::to_string(l)] +=
            n.name().rfind("layers." + std::to_string(l) + "/", 0) == 0;
    }
    // Every layer has the same nodes; no layer beyond the last.
    EXPECT_GT(perLayer["0"], 0);
    EXPECT_EQ(perLayer["1"], perLayer["0"]);
    EXPECT_EQ(perLayer[std::to_string(o.layers)], 0);
    for (const auto &t : m.graph().initializer()) {
      EXPECT_EQ(t.data_type(), onnx::TensorProto::FLOAT) << t.name();
      EXPECT_EQ(t.raw_data().size(), size_t(elements(t)) * 4) << t.name();
    }
  }
  onnx::ModelProto gpt = buildModel(validated(smallGpt()));
  for (const char *name :
       {"tok_embedding", "pos_embedding", "layers.1.ln1.scale",
        "layers.1.ln1.bias", "layers.1.attn.qkv.weight",
        "layers.1.attn.qkv.bias", "layers.1.attn.proj.weight",
        "layers.1.attn.proj.bias", "layers.1.ln2.scale",
        "layers.1.mlp.fc1.weight", "layers.1.mlp.fc2.bias", "final_ln.scale",
        "final_ln.bias", "head.weight"})
    EXPECT_NE(findInitializer(gpt, name), nullptr) << name;
  bool sawQkv = false;
  for (const auto &n : gpt.graph().node())
    sawQkv |= n.name() == "layers.1/attn/MatMul_qkv";
  EXPECT_TRUE(sawQkv);
  onnx::ModelProto llama = buildModel(validated(smallLlama()));
  for (const char *name :
       {"tok_embedding", "layers.0.attn_norm.weight", "layers.0.attn.q.weight",
        "layers.0.attn.v.weight", "layers.0.attn.o.weight",
        "layers.0.mlp_norm.weight", "layers.0.mlp.gate.weight",
        "layers.0.mlp.up.weight", "layers.0.mlp.down.weight",
        "final_norm.weight", "head.weight"})
    EXPECT_NE(findInitializer(llama, name), nullptr) << name;
  EXPECT_EQ(findInitializer(llama, "pos_embedding"), nullptr);
}

/// A dense tensor of doubles, for evaluating the constant subgraphs.
struct Tensor {
  std::vector<int64_t> dims;
  std::vector<double> values;
};

int64_t product(const std::vector<int64_t> &dims) {
  int64_t n = 1;
  for (int64_t d : dims)
    n *= d;
  return n;
}

Tensor fromProto(const onnx::TensorProto &t) {
  Tensor r{std::vector<int64_t>(t.dims().begin(), t.dims().end()), {}};
  size_t n = size_t(product(r.dims));
  if (t.data_type() == onnx::TensorProto::INT64) {
    std::vector<int64_t> v(n);
    std::memcpy(v.data(), t.raw_data().data(), n * sizeof(int64_t));
    r.values.assign(v.begin(), v.end());
  } else {
    std::vector<float> v(n);
    std::memcpy(v.data(), t.raw_data().data(), n * sizeof(float));
    r.values.assign(v.begin(), v.end());
  }
  return r;
}

/// numpy broadcasting of a binary function.
template <typename F> Tensor broadcast(const Tensor &a, const Tensor &b, F f) {
  size_t rank = std::max(a.dims.size(), b.dims.size());
  auto padded = [&](const std::vector<int64_t> &d) {
    std::vector<int64_t> p(rank - d.size(), 1);
    p.insert(p.end(), d.begin(), d.end());
    return p;
  };
  std::vector<int64_t> da = padded(a.dims), db = padded(b.dims), out(rank);
  for (size_t i = 0; i < rank; ++i) {
    EXPECT_TRUE(da[i] == db[i] || da[i] == 1 || db[i] == 1);
    out[i] = std::max(da[i], db[i]);
  }
  Tensor r{out, std::vector<double>(size_t(product(out)))};
  for (int64_t flat = 0; flat < int64_t(r.values.size()); ++flat) {
    int64_t rest = flat, ia = 0, ib = 0, sa = 1, sb = 1;
    for (size_t i = rank; i-- > 0;) {
      int64_t idx = rest % out[i];
      rest /= out[i];
      ia += (da[i] == 1 ? 0 : idx) * sa;
      ib += (db[i] == 1 ? 0 : idx) * sb;
      sa *= da[i];
      sb *= db[i];
    }
    r.values[size_t(flat)] = f(a.values[size_t(ia)], b.values[size_t(ib)]);
  }
  return r;
}

/// Evaluates the nodes that depend on constants only (the causal mask and
/// the rotary tables), by the ONNX definitions of their ops.
std::map<std::string, Tensor> evaluateConstants(const onnx::ModelProto &m) {
  std::map<std::string, Tensor> env;
  for (const auto &n : m.graph().node()) {
    bool known = true;
    for (const std::string &in : n.input())
      known &= env.count(in) > 0;
    if (!known)
      continue;
    auto in = [&](int i) -> const Tensor & { return env.at(n.input(i)); };
    const std::string &op = n.op_type();
    Tensor r;
    if (op == "Constant") {
      r = fromProto(n.attribute(0).t());
    } else if (op == "ConstantOfShape") {
      r.dims.assign(in(0).values.begin(), in(0).values.end());
      r.values.assign(size_t(product(r.dims)),
                      fromProto(n.attribute(0).t()).values[0]);
    } else if (op == "Trilu") {
      EXPECT_EQ(n.attribute(0).name(), "upper");
      EXPECT_EQ(n.attribute(0).i(), 1);
      r = in(0);
      int64_t k = int64_t(in(1).values[0]), rows = r.dims[0], cols = r.dims[1];
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j)
          if (j - i < k)
            r.values[size_t(i * cols + j)] = 0;
    } else if (op == "Range") {
      double start = in(0).values[0], limit = in(1).values[0],
             delta = in(2).values[0];
      for (double x = start; x < limit; x += delta)
        r.values.push_back(x);
      r.dims = {int64_t(r.values.size())};
    } else if (op == "Mul") {
      r = broadcast(in(0), in(1), [](double a, double b) { return a * b; });
    } else if (op == "Pow") {
      r = broadcast(in(0), in(1),
                    [](double a, double b) { return std::pow(a, b); });
    } else if (op == "Unsqueeze") {
      r = in(0);
      for (double axis : in(1).values)
        r.dims.insert(r.dims.begin() + int64_t(axis), 1);
    } else if (op == "Concat") {
      // Along the last axis, as the zoo uses it.
      const Tensor &a = in(0), &b = in(1);
      int64_t ca = a.dims.back(), cb = b.dims.back(),
              rows = product(a.dims) / ca;
      r.dims = a.dims;
      r.dims.back() = ca + cb;
      for (int64_t i = 0; i < rows; ++i) {
        r.values.insert(r.values.end(), a.values.begin() + i * ca,
                        a.values.begin() + (i + 1) * ca);
        r.values.insert(r.values.end(), b.values.begin() + i * cb,
                        b.values.begin() + (i + 1) * cb);
      }
    } else if (op == "Cos" || op == "Sin") {
      r = in(0);
      for (double &x : r.values)
        x = op == "Cos" ? std::cos(x) : std::sin(x);
    } else {
      continue;
    }
    env[n.output(0)] = r;
  }
  return env;
}

/// The output of the node called `name`.
std::string outputOf(const onnx::ModelProto &m, const std::string &name) {
  for (const auto &n : m.graph().node())
    if (n.name() == name)
      return n.output(0);
  return "";
}

TEST(ZooTest, CausalMaskAndRotaryTablesAreComputedConstants) {
  ZooOptions o = smallLlama();
  o.ropeTheta = 500000;
  onnx::ModelProto m = buildModel(validated(o));
  std::map<std::string, Tensor> env = evaluateConstants(m);
  ASSERT_EQ(env.count(outputOf(m, "causal_mask/Trilu")), 1u);
  const Tensor &mask = env.at(outputOf(m, "causal_mask/Trilu"));
  ASSERT_EQ(mask.dims, (std::vector<int64_t>{16, 16}));
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j)
      EXPECT_EQ(mask.values[i * 16 + j], j <= i ? 0.0 : double(-1e9f))
          << i << "," << j;
  // Every block adds the one mask to its scores.
  int masked = 0;
  for (const auto &n : m.graph().node())
    masked +=
        n.op_type() == "Add" && n.input(1) == outputOf(m, "causal_mask/Trilu");
  EXPECT_EQ(masked, 2);

  // cos/sin [seq, head_dim 8]: angle(p, i) = p * theta^(-2i/8), both halves.
  ASSERT_EQ(env.count(outputOf(m, "rope/Cos")), 1u);
  ASSERT_EQ(env.count(outputOf(m, "rope/Sin")), 1u);
  const Tensor &c = env.at(outputOf(m, "rope/Cos")),
               &s = env.at(outputOf(m, "rope/Sin"));
  ASSERT_EQ(c.dims, (std::vector<int64_t>{16, 8}));
  ASSERT_EQ(s.dims, (std::vector<int64_t>{16, 8}));
  for (int p = 0; p < 16; ++p)
    for (int i = 0; i < 8; ++i) {
      double angle = p * std::pow(500000.0, -2.0 * (i % 4) / 8);
      EXPECT_NEAR(c.values[p * 8 + i], std::cos(angle), 1e-5);
      EXPECT_NEAR(s.values[p * 8 + i], std::sin(angle), 1e-5);
    }
  // The tables are no parameters, and every Constant stays within the
  // importer's 1 KiB for tensor attributes.
  for (const auto &t : m.graph().initializer())
    EXPECT_EQ(t.name().find("rope"), std::string::npos);
  for (const auto &n : m.graph().node())
    if (n.op_type() == "Constant")
      EXPECT_LE(n.attribute(0).t().raw_data().size(), 1024u) << n.name();
}

TEST(ZooTest, TiedEmbeddingsReuseTheTokenEmbedding) {
  ZooOptions o = smallGpt();
  o.tiedEmbeddings = true;
  onnx::ModelProto m = buildModel(validated(o));
  EXPECT_EQ(checkOnnx(m), "");
  EXPECT_EQ(findInitializer(m, "head.weight"), nullptr);
  bool transposed = false;
  for (const auto &n : m.graph().node())
    transposed |= n.op_type() == "Transpose" && n.input(0) == "tok_embedding";
  EXPECT_TRUE(transposed);
}

TEST(ZooTest, AlibiReplacesLearnedPositions) {
  ZooOptions o = smallGpt();
  o.heads = 8;
  o.alibi = true;
  onnx::ModelProto m = buildModel(validated(o));
  EXPECT_EQ(checkOnnx(m), "");
  EXPECT_EQ(findInitializer(m, "pos_embedding"), nullptr);
  // One bias term per layer, between the scale and the causal mask.
  EXPECT_EQ(countOps(m, "Pow"), 1);
  std::vector<std::string> adds;
  for (const auto &n : m.graph().node())
    if (n.name().find("/attn/Add_alibi") != std::string::npos)
      adds.push_back(n.name());
  EXPECT_EQ(adds, (std::vector<std::string>{"layers.0/attn/Add_alibi",
                                            "layers.1/attn/Add_alibi"}));
  EXPECT_NE(metadata(m, "dtcc.zoo").find(" alibi=1 "), std::string::npos)
      << metadata(m, "dtcc.zoo");
  EXPECT_EQ(parameterCount(o), parameterCount(validated(smallGpt())) -
                                   o.seq * o.hidden);
  // A head count that is not a power of two takes the extra slopes.
  o.heads = 6;
  o.hidden = 48;
  EXPECT_EQ(checkOnnx(buildModel(validated(o))), "");
  ZooOptions llama;
  llama.family = Family::Llama;
  llama.alibi = true;
  EXPECT_EQ(validate(llama), "--alibi applies to gpt models, not llama");
}

TEST(ZooTest, DropoutSitsWhereGpt2AndMegatronPutIt) {
  EXPECT_EQ(countOps(buildModel(validated(smallGpt())), "Dropout"), 0);
  ZooOptions o = smallGpt();
  o.dropout = 0.1;
  onnx::ModelProto m = buildModel(validated(o));
  EXPECT_EQ(checkOnnx(m), "");
  std::vector<std::string> names;
  for (const auto &n : m.graph().node()) {
    if (n.op_type() != "Dropout")
      continue;
    names.push_back(n.name());
    // Training mode, the ratio as given: the importer keeps such a node.
    ASSERT_EQ(n.input_size(), 3) << n.name();
  }
  EXPECT_EQ(names, (std::vector<std::string>{
                       "embed/Dropout_embed", "layers.0/attn/Dropout_probs",
                       "layers.0/attn/Dropout_proj", "layers.0/mlp/Dropout_fc2",
                       "layers.1/attn/Dropout_probs",
                       "layers.1/attn/Dropout_proj",
                       "layers.1/mlp/Dropout_fc2"}));
  // The probabilities' dropout feeds the context product.
  for (const auto &n : m.graph().node())
    if (n.name() == "layers.0/attn/MatMul_context")
      EXPECT_EQ(n.input(0), "layers.0/attn/Dropout_probs_output_0");
  EXPECT_NE(metadata(m, "dtcc.zoo").find(" dropout=0.1 "), std::string::npos)
      << metadata(m, "dtcc.zoo");
  EXPECT_EQ(parameterCount(o), parameterCount(validated(smallGpt())));
}

TEST(ZooTest, NewerOpsetsUseTheirOpForms) {
  ZooOptions gpt = smallGpt();
  gpt.opset = 20;
  onnx::ModelProto m = buildModel(validated(gpt));
  EXPECT_EQ(countOps(m, "Gelu"), 2);
  EXPECT_EQ(countOps(m, "Erf"), 0);
  // ReduceMean takes its axes as an input from opset 18.
  ZooOptions llama = smallLlama();
  llama.opset = 18;
  m = buildModel(validated(llama));
  for (const auto &n : m.graph().node())
    if (n.op_type() == "ReduceMean") {
      EXPECT_EQ(n.input_size(), 2);
      EXPECT_EQ(n.attribute_size(), 1);
    }
  llama.opset = 17;
  m = buildModel(validated(llama));
  for (const auto &n : m.graph().node())
    if (n.op_type() == "ReduceMean")
      EXPECT_EQ(n.input_size(), 1);
}

//===----------------------------------------------------------------------===//
// Options
//===----------------------------------------------------------------------===//

TEST(ZooTest, DefaultsAreFilledIn) {
  ZooOptions gpt;
  gpt.family = Family::Gpt;
  ASSERT_EQ(validate(gpt), "");
  EXPECT_EQ(gpt.layers, 12);
  EXPECT_EQ(gpt.hidden, 768);
  EXPECT_EQ(gpt.heads, 12);
  EXPECT_EQ(gpt.kvHeads, 12);
  EXPECT_EQ(gpt.ffnHidden, 3072);
  EXPECT_EQ(gpt.vocab, 50257);
  EXPECT_EQ(gpt.seq, 1024);
  EXPECT_EQ(gpt.batch, 1);
  EXPECT_EQ(gpt.normEps, 1e-5);
  ZooOptions again = gpt;
  ASSERT_EQ(validate(again), "");
  EXPECT_EQ(describe(again), describe(gpt));

  ZooOptions llama;
  llama.family = Family::Llama;
  llama.hidden = 4096;
  llama.heads = 32;
  ASSERT_EQ(validate(llama), "");
  EXPECT_EQ(llama.ffnHidden, 11008); // Llama 2 7B
  EXPECT_EQ(llama.kvHeads, 32);
  EXPECT_EQ(llama.ropeTheta, 10000);
  EXPECT_EQ(llama.vocab, 32000);

  ZooOptions mlp;
  mlp.family = Family::Mlp;
  ASSERT_EQ(validate(mlp), "");
  EXPECT_EQ(mlp.layers, 2);
  EXPECT_EQ(mlp.hidden, 256);
  EXPECT_EQ(mlp.inputs, 784);
  EXPECT_EQ(mlp.classes, 10);
  EXPECT_EQ(mlp.batch, 32);
}

/// The error of validating `o` after `edit`.
template <typename Edit> std::string errorOf(ZooOptions o, Edit edit) {
  edit(o);
  return validate(o);
}

TEST(ZooTest, InvalidOptionsNameTheFlag) {
  auto has = [](const std::string &error, const std::string &part) {
    return error.find(part) != std::string::npos;
  };
  std::string e = errorOf(smallGpt(), [](ZooOptions &o) { o.heads = 5; });
  EXPECT_EQ(e, "--heads (5) must divide --hidden (64)");
  e = errorOf(smallLlama(), [](ZooOptions &o) { o.kvHeads = 3; });
  EXPECT_EQ(e, "--kv-heads (3) must divide --heads (8)");
  e = errorOf(smallGpt(), [](ZooOptions &o) { o.kvHeads = 2; });
  EXPECT_TRUE(has(e, "--kv-heads applies to llama")) << e;
  e = errorOf(smallGpt(), [](ZooOptions &o) { o.layers = -1; });
  EXPECT_EQ(e, "--layers must be positive, got -1");
  e = errorOf(smallGpt(), [](ZooOptions &o) { o.inputs = 3; });
  EXPECT_EQ(e, "--inputs applies to mlp models, not gpt");
  e = errorOf(smallMlp(), [](ZooOptions &o) { o.heads = 3; });
  EXPECT_EQ(e, "--heads applies to gpt and llama models, not mlp");
  e = errorOf(smallGpt(), [](ZooOptions &o) { o.ropeTheta = 5; });
  EXPECT_TRUE(has(e, "--rope-theta")) << e;
  e = errorOf(smallGpt(), [](ZooOptions &o) { o.dropout = 1; });
  EXPECT_EQ(e, "--dropout must be at least 0 and below 1, got 1");
  e = errorOf(smallLlama(), [](ZooOptions &o) { o.dropout = 0.1; });
  EXPECT_EQ(e, "--dropout applies to gpt models, not llama");
  e = errorOf(smallMlp(), [](ZooOptions &o) { o.dropout = 0.1; });
  EXPECT_EQ(e, "--dropout applies to gpt models, not mlp");
  e = errorOf(smallGpt(), [](ZooOptions &o) { o.opset = 16; });
  EXPECT_TRUE(has(e, "--opset must be between 17 and 25")) << e;
  e = errorOf(smallLlama(), [](ZooOptions &o) { o.opset = 26; });
  EXPECT_TRUE(has(e, "--opset must be between 14 and 25")) << e;
  e = errorOf(smallMlp(), [](ZooOptions &o) { o.opset = 12; });
  EXPECT_TRUE(has(e, "--opset must be between 13 and 25")) << e;
  // Scores [batch 2, heads 4, seq, seq] beyond 2^48 elements.
  e = errorOf(smallGpt(), [](ZooOptions &o) { o.seq = int64_t(1) << 23; });
  EXPECT_TRUE(has(e, "more than 2^48 elements")) << e;
  // head dim 64 / 16 = 4 is fine; 48 / 16 = 3 is odd.
  e = errorOf(smallLlama(), [](ZooOptions &o) {
    o.hidden = 48;
    o.heads = 16;
    o.kvHeads = 0;
  });
  EXPECT_TRUE(has(e, "must be even for rotary")) << e;
  e = errorOf(smallGpt(), [](ZooOptions &o) {
    o.vocab = int64_t(1) << 39;
    o.hidden = 1024;
  });
  EXPECT_TRUE(has(e, "more than 2^48 elements")) << e;
  e = errorOf(smallGpt(), [](ZooOptions &o) { o.hidden = int64_t(1) << 50; });
  EXPECT_EQ(e, "--hidden must be at most 2^40, got 1125899906842624");
  e = errorOf(smallGpt(), [](ZooOptions &o) { o.normEps = -1; });
  EXPECT_TRUE(has(e, "--norm-eps")) << e;
  // Invalid options give no model and no count.
  ZooOptions bad = smallGpt();
  bad.heads = 5;
  EXPECT_FALSE(buildModel(bad).has_graph());
  EXPECT_EQ(parameterCount(bad), -1);
  EXPECT_NE(buildAndWriteModel(bad, (freshDir("bad") / "m.onnx").string()), "");
}

TEST(ZooTest, PresetsFillUnsetFields) {
  ZooOptions o;
  o.family = Family::Llama;
  ASSERT_EQ(applyPreset(o, "llama3-8b"), "");
  ASSERT_EQ(validate(o), "");
  EXPECT_EQ(o.ropeTheta, 500000);
  EXPECT_EQ(parameterCount(o), 8030261248);
  ZooOptions fewer;
  fewer.family = Family::Llama;
  fewer.layers = 2;
  ASSERT_EQ(applyPreset(fewer, "llama3-8b"), "");
  EXPECT_EQ(fewer.layers, 2);
  EXPECT_EQ(fewer.hidden, 4096);
  ZooOptions gpt;
  EXPECT_EQ(applyPreset(gpt, "llama3-8b"),
            "--preset llama3-8b is a llama model, not gpt");
  EXPECT_NE(applyPreset(gpt, "gpt5")
                .find("unknown --preset 'gpt5' (known: "
                      "gpt2, "),
            std::string::npos);
  for (const std::string &name : presetNames()) {
    ZooOptions p;
    p.family = name.rfind("gpt", 0) == 0 ? Family::Gpt : Family::Llama;
    ASSERT_EQ(applyPreset(p, name), "") << name;
    EXPECT_EQ(validate(p), "") << name;
  }
  EXPECT_EQ(parseFamily("llama"), Family::Llama);
  EXPECT_EQ(parseFamily("bert"), std::nullopt);
}

//===----------------------------------------------------------------------===//
// Parameter counts
//===----------------------------------------------------------------------===//

TEST(ZooTest, ParameterCountIsTheInitializersTotal) {
  std::vector<ZooOptions> all = {smallGpt(), smallLlama(), smallMlp()};
  ZooOptions tied = smallLlama();
  tied.tiedEmbeddings = true;
  tied.ffnHidden = 96;
  all.push_back(tied);
  ZooOptions gpt = smallGpt();
  gpt.tiedEmbeddings = true;
  gpt.ffnHidden = 80;
  all.push_back(gpt);
  for (ZooOptions o : all) {
    o.weights = false;
    onnx::ModelProto m = buildModel(o);
    EXPECT_EQ(parameterCount(o), initializerTotal(m)) << describe(o);
    EXPECT_EQ(metadata(m, "dtcc.parameters"),
              std::to_string(parameterCount(o)));
  }
  // By hand: MLP 20 -> 32 -> 32 -> 32 -> 5.
  EXPECT_EQ(parameterCount(smallMlp()),
            (20 * 32 + 32) + 2 * (32 * 32 + 32) + (32 * 5 + 5));
}

TEST(ZooTest, Gpt2SmallHasThePublishedCount) {
  ZooOptions o;
  o.family = Family::Gpt;
  o.layers = 12;
  o.hidden = 768;
  o.heads = 12;
  o.vocab = 50257;
  o.seq = 1024;
  // Embeddings V*h + S*h, 12 blocks of 12h^2 + 13h, final LayerNorm 2h:
  // 124,439,808 (Hugging Face's gpt2, whose head is tied), plus an untied
  // head of h*V.
  int64_t h = 768, blocks = 12 * (12 * h * h + 13 * h);
  int64_t tied = 50257 * h + 1024 * h + blocks + 2 * h;
  EXPECT_EQ(tied, 124439808);
  EXPECT_EQ(parameterCount(o), tied + h * 50257);
  EXPECT_EQ(parameterCount(o), 163037184);
  o.tiedEmbeddings = true;
  EXPECT_EQ(parameterCount(o), 124439808);
}

TEST(ZooTest, LlamaThreeHasThePublishedCounts) {
  ZooOptions o;
  o.family = Family::Llama;
  o.layers = 32;
  o.hidden = 4096;
  o.heads = 32;
  o.kvHeads = 8;
  o.ffnHidden = 14336;
  o.vocab = 128256;
  EXPECT_EQ(parameterCount(o), 8030261248); // Llama 3 8B
  o.layers = 80;
  o.hidden = 8192;
  o.heads = 64;
  o.ffnHidden = 28672;
  EXPECT_EQ(parameterCount(o), 70553706496); // Llama 3 70B
  o.layers = 126;
  o.hidden = 16384;
  o.heads = 128;
  o.ffnHidden = 53248;
  EXPECT_EQ(parameterCount(o), 405853388800); // Llama 3.1 405B
}

//===----------------------------------------------------------------------===//
// Weights
//===----------------------------------------------------------------------===//

TEST(ZooTest, WeightsAreDeterministicAndSeeded) {
  ZooOptions o = validated(smallGpt());
  std::string a = buildModel(o).SerializeAsString();
  EXPECT_EQ(a, buildModel(o).SerializeAsString());
  ZooOptions other = o;
  other.seed = 8;
  onnx::ModelProto m = buildModel(o), n = buildModel(other);
  ASSERT_EQ(m.graph().initializer_size(), n.graph().initializer_size());
  for (int i = 0; i < m.graph().initializer_size(); ++i) {
    const auto &t = m.graph().initializer(i), &u = n.graph().initializer(i);
    EXPECT_EQ(t.name(), u.name());
    bool random = t.name().find("weight") != std::string::npos ||
                  t.name().find("embedding") != std::string::npos;
    if (random)
      EXPECT_NE(t.raw_data(), u.raw_data()) << t.name();
    else
      EXPECT_EQ(t.raw_data(), u.raw_data()) << t.name();
  }
  // Each tensor's values depend on its name, not on what comes before it:
  // the first block's weights are those of a one-layer model.
  ZooOptions shallow = o;
  shallow.layers = 1;
  EXPECT_EQ(findInitializer(buildModel(shallow), "layers.0.mlp.fc1.weight")
                ->raw_data(),
            findInitializer(m, "layers.0.mlp.fc1.weight")->raw_data());
  // Pinned values: the generator must not drift between versions.
  std::vector<float> w = floatsOf(*findInitializer(m, "tok_embedding"));
  // (Within 4 ulps: libm's log, cos and sin may differ in the last bit.)
  EXPECT_FLOAT_EQ(w[0], -0.000512345112f);
  EXPECT_FLOAT_EQ(w[1], 0.0020755115f);
  EXPECT_FLOAT_EQ(w[2], 0.0148292566f);
  EXPECT_FLOAT_EQ(w[3], -0.0341814198f);
}

TEST(ZooTest, InitializationFollowsGpt2) {
  ZooOptions o = smallGpt();
  o.vocab = 4000;
  onnx::ModelProto m = buildModel(validated(o));
  // Normal(0, 0.02) over 256,000 values: the mean within 4.5 standard errors,
  // the standard deviation within 1%.
  std::vector<float> w = floatsOf(*findInitializer(m, "tok_embedding"));
  double sum = 0, sq = 0;
  int beyond2 = 0;
  for (float x : w) {
    sum += x;
    sq += double(x) * x;
    beyond2 += std::abs(x) > 0.04f;
  }
  double mean = sum / w.size(), sd = std::sqrt(sq / w.size() - mean * mean);
  EXPECT_LT(std::abs(mean), 4.5 * 0.02 / std::sqrt(double(w.size())));
  EXPECT_NEAR(sd, 0.02, 0.0002);
  // 4.55% of a normal lies beyond two standard deviations.
  EXPECT_NEAR(double(beyond2) / w.size(), 0.0455, 0.003);
  for (float x : floatsOf(*findInitializer(m, "layers.0.ln1.scale")))
    EXPECT_EQ(x, 1.0f);
  for (const char *name :
       {"layers.0.ln1.bias", "layers.0.attn.qkv.bias", "layers.1.mlp.fc2.bias"})
    for (float x : floatsOf(*findInitializer(m, name)))
      EXPECT_EQ(x, 0.0f);
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

TEST(ZooTest, SmallModelsAreWrittenInline) {
  fs::path dir = freshDir("inline");
  fs::path path = dir / "gpt.onnx";
  ASSERT_EQ(buildAndWriteModel(smallGpt(), path.string()), "");
  EXPECT_FALSE(fs::exists(dir / "gpt.onnx.data"));
  onnx::ModelProto read;
  ASSERT_TRUE(read.ParseFromString(readFile(path)));
  EXPECT_EQ(read.SerializeAsString(),
            buildModel(smallGpt()).SerializeAsString());
  try {
    onnx::checker::check_model(path.string());
  } catch (const std::exception &e) {
    ADD_FAILURE() << e.what();
  }
  fs::remove_all(dir);
}

TEST(ZooTest, LargeWeightsGoToAlignedExternalData) {
  WriteOptions small;
  small.externalThreshold = 1024;
  ZooOptions o = smallLlama();
  onnx::ModelProto inMemory = buildModel(o);

  fs::path a = freshDir("external_a"), b = freshDir("external_b");
  ASSERT_EQ(writeModel(inMemory, (a / "model.onnx").string(), small), "");
  ASSERT_EQ(buildAndWriteModel(o, (b / "model.onnx").string(), small), "");
  // Streaming writes exactly what building in memory writes.
  std::string dataA = readFile(a / "model.onnx.data");
  EXPECT_EQ(readFile(a / "model.onnx"), readFile(b / "model.onnx"));
  EXPECT_EQ(dataA, readFile(b / "model.onnx.data"));

  onnx::ModelProto read;
  ASSERT_TRUE(read.ParseFromString(readFile(a / "model.onnx")));
  ASSERT_EQ(read.graph().initializer_size(),
            inMemory.graph().initializer_size());
  int64_t end = 0;
  for (int i = 0; i < read.graph().initializer_size(); ++i) {
    const auto &t = read.graph().initializer(i);
    EXPECT_EQ(t.data_location(), onnx::TensorProto::EXTERNAL);
    EXPECT_FALSE(t.has_raw_data());
    auto kv = externalData(t);
    EXPECT_EQ(kv["location"], "model.onnx.data");
    int64_t offset = std::stoll(kv["offset"]),
            length = std::stoll(kv["length"]);
    EXPECT_EQ(offset % 4096, 0) << t.name();
    EXPECT_GE(offset, end) << t.name();
    EXPECT_EQ(length, elements(t) * 4);
    EXPECT_EQ(dataA.substr(offset, length),
              inMemory.graph().initializer(i).raw_data())
        << t.name();
    end = offset + length;
  }
  EXPECT_EQ(int64_t(dataA.size()), end);
  try {
    onnx::checker::check_model((a / "model.onnx").string());
  } catch (const std::exception &e) {
    ADD_FAILURE() << e.what();
  }
  WriteOptions odd = small;
  odd.alignment = 3000;
  EXPECT_NE(writeModel(inMemory, (a / "odd.onnx").string(), odd), "");
  EXPECT_NE(writeModel(inMemory, (a / "missing" / "m.onnx").string()), "");
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST(ZooTest, NoWeightsKeepsHugeModelsSmall) {
  ZooOptions o;
  o.family = Family::Llama;
  ASSERT_EQ(applyPreset(o, "llama3-405b"), "");
  o.seq = 512;
  o.weights = false;
  fs::path dir = freshDir("no_weights");
  fs::path path = dir / "llama405b.onnx";
  ASSERT_EQ(buildAndWriteModel(o, path.string()), "");
  EXPECT_FALSE(fs::exists(dir / "llama405b.onnx.data"));
  EXPECT_FALSE(fs::exists(dir / "llama405b.onnx.no-weights"));
  // The mask (1 MiB), rotary tables (0.5 MiB) and ~6,000 nodes.
  EXPECT_LT(fs::file_size(path), 4u << 20);

  onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(readFile(path)));
  EXPECT_EQ(metadata(m, "dtcc.no_weights"), "1");
  EXPECT_EQ(metadata(m, "dtcc.parameters"), "405853388800");
  EXPECT_EQ(metadata(m, "dtcc.zoo"),
            "llama layers=126 hidden=16384 heads=128 kv-heads=8 "
            "ffn-hidden=53248 vocab=128256 seq=512 batch=1 rope-theta=500000 "
            "norm-eps=1e-05 tied-embeddings=0 opset=17 seed=0 weights=0");
  EXPECT_EQ(initializerTotal(m), 405853388800);
  for (const auto &t : m.graph().initializer()) {
    EXPECT_EQ(t.data_location(), onnx::TensorProto::EXTERNAL);
    EXPECT_FALSE(t.has_raw_data());
    auto kv = externalData(t);
    EXPECT_EQ(kv["location"], "llama405b.onnx.no-weights");
    EXPECT_EQ(std::stoll(kv["length"]), elements(t) * 4);
  }
  const auto *head = findInitializer(m, "head.weight");
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(std::vector<int64_t>(head->dims().begin(), head->dims().end()),
            (std::vector<int64_t>{16384, 128256}));
  fs::remove_all(dir);
}

TEST(ZooTest, NoWeightsDiffersOnlyInData) {
  ZooOptions o = smallGpt();
  onnx::ModelProto full = buildModel(o);
  o.weights = false;
  onnx::ModelProto stub = buildModel(o);
  ASSERT_EQ(stub.graph().node_size(), full.graph().node_size());
  for (int i = 0; i < full.graph().node_size(); ++i)
    EXPECT_EQ(stub.graph().node(i).SerializeAsString(),
              full.graph().node(i).SerializeAsString());
  ASSERT_EQ(stub.graph().initializer_size(), full.graph().initializer_size());
  for (int i = 0; i < full.graph().initializer_size(); ++i) {
    onnx::TensorProto t = stub.graph().initializer(i);
    EXPECT_EQ(externalData(t)["location"], "model.onnx.no-weights");
    // With its data back, the stub is the full model's tensor.
    t.clear_external_data();
    t.clear_data_location();
    t.set_raw_data(full.graph().initializer(i).raw_data());
    EXPECT_EQ(t.SerializeAsString(),
              full.graph().initializer(i).SerializeAsString());
  }
  // ONNX's checker rejects the stubs only because their file is absent.
  std::string error = checkOnnx(stub);
  EXPECT_NE(error.find("should be stored in model.onnx.no-weights, but it "
                       "doesn't exist"),
            std::string::npos)
      << error;
}

} // namespace
