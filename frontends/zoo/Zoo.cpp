//===- Zoo.cpp - standard ONNX models of any size -------------------------===//
//
// Builds the zoo's graphs node by node with the ONNX protos, seeds their
// weights from (seed, tensor name), and writes them inline or as external data.
//
//===----------------------------------------------------------------------===//

#include "frontends/zoo/Zoo.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <utility>

namespace dtcc::zoo {
namespace {

/// The highest opset the dtcc importer accepts (frontends/onnx kMaxOpset);
/// the zoo stays independent of MLIR, so the number is repeated here.
constexpr int64_t kMaxOpset = 25;
/// The importer's limit on the elements of one tensor.
constexpr int64_t kMaxElements = int64_t(1) << 48;
/// A bound on each size option, so that size checks cannot overflow.
constexpr int64_t kMaxSize = int64_t(1) << 40;
/// GPT-2's initializer range, used for every matrix and embedding.
constexpr double kInitStd = 0.02;
/// Added to masked attention scores: large, but finite so that a row's
/// softmax never sees inf - inf.
constexpr float kMaskValue = -1e9f;
constexpr int64_t kDefaultAlignment = 4096;
constexpr const char *kNoWeightsKey = "dtcc.no_weights";

//===----------------------------------------------------------------------===//
// Small helpers
//===----------------------------------------------------------------------===//

std::string str(int64_t v) { return std::to_string(v); }

std::string str(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

int64_t alignUp(int64_t v, int64_t alignment) {
  return (v + alignment - 1) / alignment * alignment;
}

std::string baseName(const std::string &path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

/// Steele, Lea and Flood's splitmix64 of `x + golden gamma`; element i of a
/// tensor's stream is splitmix64(key + i).
uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// FNV-1a: a stable 64-bit hash of a tensor's name (std::hash is not stable
/// across standard libraries).
uint64_t hashName(const std::string &name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

//===----------------------------------------------------------------------===//
// Weights
//===----------------------------------------------------------------------===//

enum class Init { Normal, Zeros, Ones };

/// A parameter: its initializer and how its values are drawn.
struct ParamSpec {
  std::string name;
  std::vector<int64_t> dims;
  Init init = Init::Normal;

  int64_t elements() const {
    int64_t n = 1;
    for (int64_t d : dims)
      n *= d;
    return n;
  }
};

/// Values [begin, begin + count) of the parameter `spec`. Normal values are
/// Box-Muller pairs over the counter-based stream splitmix64(key + i), so any
/// range can be generated alone: streaming writes chunks, memory builds the
/// whole tensor, and the bytes agree.
void generate(const ParamSpec &spec, uint64_t seed, int64_t begin,
              int64_t count, float *out) {
  if (spec.init != Init::Normal) {
    float v = spec.init == Init::Ones ? 1.0f : 0.0f;
    for (int64_t i = 0; i < count; ++i)
      out[i] = v;
    return;
  }
  const uint64_t key = splitmix64(seed ^ splitmix64(hashName(spec.name)));
  const double twoPi = 6.283185307179586476925286766559;
  int64_t end = begin + count;
  for (int64_t i = begin; i < end;) {
    uint64_t pair = uint64_t(i / 2);
    // u1 in (0, 1], so the logarithm is finite.
    double u1 = (double(splitmix64(key + 2 * pair) >> 11) + 1.0) * 0x1.0p-53;
    double u2 = double(splitmix64(key + 2 * pair + 1) >> 11) * 0x1.0p-53;
    double r = kInitStd * std::sqrt(-2.0 * std::log(u1));
    if (i % 2 == 0) {
      out[i - begin] = float(r * std::cos(twoPi * u2));
      if (++i == end)
        break;
    }
    out[i - begin] = float(r * std::sin(twoPi * u2));
    ++i;
  }
}

/// Elements generated at a time when writing a tensor's bytes.
constexpr int64_t kChunk = int64_t(1) << 20;

/// The raw (little-endian float32) bytes of a whole parameter.
std::string rawData(const ParamSpec &spec, uint64_t seed) {
  int64_t n = spec.elements();
  std::string bytes(size_t(n) * sizeof(float), '\0');
  std::vector<float> chunk(size_t(std::min(n, kChunk)));
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    int64_t count = std::min(kChunk, n - begin);
    generate(spec, seed, begin, count, chunk.data());
    std::memcpy(bytes.data() + begin * sizeof(float), chunk.data(),
                size_t(count) * sizeof(float));
  }
  return bytes;
}

void setExternal(onnx::TensorProto &t, const std::string &location,
                 int64_t offset, int64_t length) {
  t.clear_raw_data();
  t.clear_external_data();
  t.set_data_location(onnx::TensorProto::EXTERNAL);
  auto add = [&](const char *key, const std::string &value) {
    auto *entry = t.add_external_data();
    entry->set_key(key);
    entry->set_value(value);
  };
  add("location", location);
  add("offset", str(offset));
  add("length", str(length));
}

/// Points every initializer at `location` with the offsets an external data
/// file would give it; the file itself is not written.
void markNoWeights(onnx::ModelProto &model, const std::string &location,
                   int64_t alignment) {
  int64_t offset = 0;
  for (onnx::TensorProto &t : *model.mutable_graph()->mutable_initializer()) {
    int64_t length = sizeof(float);
    for (int64_t d : t.dims())
      length *= d;
    offset = alignUp(offset, alignment);
    setExternal(t, location, offset, length);
    offset += length;
  }
}

//===----------------------------------------------------------------------===//
// Graph building
//===----------------------------------------------------------------------===//

onnx::AttributeProto attrInt(const char *name, int64_t v) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::INT);
  a.set_i(v);
  return a;
}

onnx::AttributeProto attrInts(const char *name, const std::vector<int64_t> &v) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v)
    a.add_ints(x);
  return a;
}

onnx::AttributeProto attrFloat(const char *name, float v) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::FLOAT);
  a.set_f(v);
  return a;
}

onnx::AttributeProto attrString(const char *name, const std::string &v) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::STRING);
  a.set_s(v);
  return a;
}

onnx::AttributeProto attrTensor(const char *name, int32_t type,
                                const std::vector<int64_t> &dims,
                                std::string data) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::TENSOR);
  onnx::TensorProto *t = a.mutable_t();
  t->set_data_type(type);
  for (int64_t d : dims)
    t->add_dims(d);
  t->set_raw_data(std::move(data));
  return a;
}

/// Appends nodes, parameters and constants to a graph, naming nodes
/// `<scope>/<OpType>_<tag>` and their outputs `<node>_output_<i>`.
class GraphBuilder {
public:
  GraphBuilder(onnx::GraphProto &graph, int64_t opset)
      : graph(graph), opset(opset) {}

  int64_t getOpset() const { return opset; }
  void setScope(std::string s) { scope = std::move(s); }
  const std::vector<ParamSpec> &getParams() const { return params; }

  void addInput(const std::string &name, int32_t type,
                const std::vector<int64_t> &dims) {
    setValueInfo(graph.add_input(), name, type, dims);
  }
  void addOutput(const std::string &name, int32_t type,
                 const std::vector<int64_t> &dims) {
    setValueInfo(graph.add_output(), name, type, dims);
  }

  /// A float32 parameter: an initializer stub (name, type, dims) whose data
  /// is filled in later.
  std::string param(const std::string &name, std::vector<int64_t> dims,
                    Init init) {
    onnx::TensorProto *t = graph.add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims)
      t->add_dims(d);
    params.push_back({name, std::move(dims), init});
    return name;
  }

  /// A node with `outputs` results; `resultName`, when given, names the
  /// first (graph outputs such as "logits").
  std::vector<std::string> node(const std::string &opType,
                                const std::string &tag,
                                const std::vector<std::string> &inputs,
                                std::vector<onnx::AttributeProto> attrs = {},
                                int outputs = 1,
                                const std::string &resultName = "") {
    std::string name = (scope.empty() ? "" : scope + "/") + opType +
                       (tag.empty() ? "" : "_" + tag);
    if (!names.insert(name).second) {
      int i = 2;
      while (!names.insert(name + "_" + std::to_string(i)).second)
        ++i;
      name += "_" + std::to_string(i);
    }
    onnx::NodeProto *n = graph.add_node();
    n->set_name(name);
    n->set_op_type(opType);
    for (const std::string &in : inputs)
      n->add_input(in);
    std::vector<std::string> results;
    for (int i = 0; i < outputs; ++i) {
      results.push_back(i == 0 && !resultName.empty()
                            ? resultName
                            : name + "_output_" + std::to_string(i));
      n->add_output(results.back());
    }
    for (onnx::AttributeProto &a : attrs)
      *n->add_attribute() = std::move(a);
    return results;
  }

  /// A single-result node.
  std::string op(const std::string &opType, const std::string &tag,
                 const std::vector<std::string> &inputs,
                 std::vector<onnx::AttributeProto> attrs = {}) {
    return node(opType, tag, inputs, std::move(attrs))[0];
  }

  /// An int64 vector constant (shapes, axes, split sizes), one node per
  /// distinct value.
  std::string i64(const std::vector<int64_t> &values) {
    std::string tag = "i64";
    for (int64_t v : values)
      tag += "_" + str(v);
    std::string data(values.size() * sizeof(int64_t), '\0');
    std::memcpy(data.data(), values.data(), data.size());
    return constant(tag, onnx::TensorProto::INT64, {int64_t(values.size())},
                    std::move(data));
  }

  /// An int64 scalar constant.
  std::string i64Scalar(int64_t value) {
    std::string data(sizeof(int64_t), '\0');
    std::memcpy(data.data(), &value, sizeof(int64_t));
    return constant("i64_scalar_" + str(value), onnx::TensorProto::INT64, {},
                    std::move(data));
  }

  /// A bool scalar constant.
  std::string boolScalar(bool value) {
    return constant(value ? "true" : "false", onnx::TensorProto::BOOL, {},
                    std::string(1, value ? '\1' : '\0'));
  }

  /// A float32 scalar constant named by `tag`.
  std::string f32(const std::string &tag, float value) {
    std::string data(sizeof(float), '\0');
    std::memcpy(data.data(), &value, sizeof(float));
    return constant(tag, onnx::TensorProto::FLOAT, {}, std::move(data));
  }

private:
  /// Constants are small Constant nodes, not initializers, so that the
  /// compiler does not take them for trainable parameters. They sit in the
  /// "constants" scope, created where first used.
  std::string constant(const std::string &tag, int32_t type,
                       const std::vector<int64_t> &dims, std::string data) {
    auto it = constants.find(tag);
    if (it != constants.end())
      return it->second;
    std::string saved = scope;
    scope = "constants";
    std::string out =
        node("Constant", tag, {},
             {attrTensor("value", type, dims, std::move(data))})[0];
    scope = saved;
    constants[tag] = out;
    return out;
  }

  static void setValueInfo(onnx::ValueInfoProto *info, const std::string &name,
                           int32_t type, const std::vector<int64_t> &dims) {
    info->set_name(name);
    auto *tt = info->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(type);
    auto *shape = tt->mutable_shape();
    for (int64_t d : dims)
      shape->add_dim()->set_dim_value(d);
  }

  onnx::GraphProto &graph;
  int64_t opset;
  std::string scope;
  std::vector<ParamSpec> params;
  std::set<std::string> names;
  std::map<std::string, std::string> constants;
};

//===----------------------------------------------------------------------===//
// Transformer pieces
//===----------------------------------------------------------------------===//

/// The sizes of a transformer, after validate().
struct Dims {
  int64_t b, s, h, nh, kvh, hd, f, v;
  explicit Dims(const ZooOptions &o)
      : b(o.batch), s(o.seq), h(o.hidden), nh(o.heads), kvh(o.kvHeads),
        hd(o.hidden / o.heads), f(o.ffnHidden), v(o.vocab) {}
};

/// `[b, s, heads * hd]` to `[b, heads, s, hd]`.
std::string splitHeads(GraphBuilder &g, const Dims &d, const std::string &x,
                       int64_t heads, const std::string &tag) {
  std::string r = g.op("Reshape", tag, {x, g.i64({d.b, d.s, heads, d.hd})});
  return g.op("Transpose", tag, {r}, {attrInts("perm", {0, 2, 1, 3})});
}

/// The causal mask [s, s]: 0 on and below the diagonal, kMaskValue above.
/// Computed from a splat (ConstantOfShape, Trilu) rather than stored: the
/// importer takes Constant tensors of up to 1 KiB only, and a stored mask
/// would be 256 MiB of model file at seq 8192.
std::string causalMask(GraphBuilder &g, int64_t s) {
  g.setScope("causal_mask");
  std::string fill(sizeof(float), '\0');
  std::memcpy(fill.data(), &kMaskValue, sizeof(float));
  std::string full = g.op(
      "ConstantOfShape", "", {g.i64({s, s})},
      {attrTensor("value", onnx::TensorProto::FLOAT, {1}, std::move(fill))});
  // Trilu(upper, k = 1) keeps the elements with column - row >= 1.
  return g.op("Trilu", "", {full, g.i64Scalar(1)}, {attrInt("upper", 1)});
}

/// `x` through a Dropout node in training mode of probability `p`; `x`
/// itself when `p` is 0.
std::string dropout(GraphBuilder &g, double p, const std::string &x,
                    const std::string &tag) {
  if (p == 0)
    return x;
  return g.op("Dropout", tag,
              {x, g.f32("dropout_ratio", float(p)), g.boolScalar(true)});
}

/// The ALiBi biases [nh, 1, s]: slope_h x key position (ZooOptions::alibi),
/// computed from Range like the rotary tables.
std::string alibiBiases(GraphBuilder &g, const Dims &d) {
  g.setScope("alibi");
  int64_t below = 1;
  while (below * 2 <= d.nh)
    below *= 2;
  // slope_k = 2^(-8 k / below), k = 1 .. below; then 2^(-8 k / (2 below))
  // for k = 1, 3, 5, ... (nh - below of them).
  std::string k = g.op("Range", "slopes",
                       {g.f32("one", 1.0f), g.f32("below_plus_1", float(below + 1)),
                        g.f32("one", 1.0f)});
  std::string exponents = g.op(
      "Mul", "slopes", {k, g.f32("minus_8_over_below", -8.0f / float(below))});
  if (d.nh > below) {
    std::string odd =
        g.op("Range", "extra_slopes",
             {g.f32("one", 1.0f), g.f32("extra_end", float(2 * (d.nh - below))),
              g.f32("two", 2.0f)});
    odd = g.op("Mul", "extra_slopes",
               {odd, g.f32("minus_4_over_below", -4.0f / float(below))});
    exponents = g.op("Concat", "slopes", {exponents, odd}, {attrInt("axis", 0)});
  }
  std::string slopes =
      g.op("Pow", "slopes", {g.f32("two", 2.0f), exponents});
  slopes = g.op("Reshape", "slopes", {slopes, g.i64({d.nh, 1, 1})});
  std::string keys =
      g.op("Range", "keys",
           {g.f32("zero", 0.0f), g.f32("seq", float(d.s)), g.f32("one", 1.0f)});
  keys = g.op("Reshape", "keys", {keys, g.i64({1, 1, d.s})});
  return g.op("Mul", "", {slopes, keys});
}

/// dropout(softmax(q kT / sqrt(hd) [+ alibi] + mask)) v for q, v [b, nh, s,
/// hd] and kT [b, nh, hd, s], merged back to [b, s, h].
std::string attend(GraphBuilder &g, const Dims &d, const std::string &q,
                   const std::string &kT, const std::string &v,
                   const std::string &mask, double dropoutRatio = 0,
                   const std::string &alibi = "") {
  std::string scores = g.op("MatMul", "scores", {q, kT});
  scores =
      g.op("Div", "scale",
           {scores, g.f32("sqrt_head_dim", float(std::sqrt(double(d.hd))))});
  if (!alibi.empty())
    scores = g.op("Add", "alibi", {scores, alibi});
  scores = g.op("Add", "causal_mask", {scores, mask});
  std::string probs = g.op("Softmax", "probs", {scores}, {attrInt("axis", -1)});
  probs = dropout(g, dropoutRatio, probs, "probs");
  std::string ctx = g.op("MatMul", "context", {probs, v});
  ctx = g.op("Transpose", "context", {ctx}, {attrInts("perm", {0, 2, 1, 3})});
  return g.op("Reshape", "context", {ctx, g.i64({d.b, d.s, d.h})});
}

/// The head (untied, or the token embedding transposed) and the loss.
void addHeadAndLoss(GraphBuilder &g, const ZooOptions &o, const Dims &d,
                    const std::string &x, const std::string &embedding,
                    const std::string &labels) {
  g.setScope("head");
  std::string w =
      o.tiedEmbeddings
          ? g.op("Transpose", "tied", {embedding}, {attrInts("perm", {1, 0})})
          : g.param("head.weight", {d.h, d.v}, Init::Normal);
  g.node("MatMul", "", {x, w}, {}, 1, "logits");
  g.setScope("loss");
  std::string flat =
      g.op("Reshape", "logits", {"logits", g.i64({d.b * d.s, d.v})});
  std::string flatLabels =
      g.op("Reshape", "labels", {labels, g.i64({d.b * d.s})});
  g.node("SoftmaxCrossEntropyLoss", "", {flat, flatLabels},
         {attrString("reduction", "mean")}, 1, "loss");
  g.addOutput("loss", onnx::TensorProto::FLOAT, {});
  g.addOutput("logits", onnx::TensorProto::FLOAT, {d.b, d.s, d.v});
}

//===----------------------------------------------------------------------===//
// GPT
//===----------------------------------------------------------------------===//

std::string layerNorm(GraphBuilder &g, const ZooOptions &o,
                      const std::string &x, const std::string &prefix) {
  std::string scale = g.param(prefix + ".scale", {o.hidden}, Init::Ones);
  std::string bias = g.param(prefix + ".bias", {o.hidden}, Init::Zeros);
  return g.op("LayerNormalization", "", {x, scale, bias},
              {attrInt("axis", -1), attrFloat("epsilon", float(o.normEps))});
}

/// The exact GELU: x * 0.5 * (1 + erf(x / sqrt(2))), or the Gelu op where the
/// opset has it.
std::string gelu(GraphBuilder &g, const std::string &x) {
  if (g.getOpset() >= 20)
    return g.op("Gelu", "", {x});
  std::string t =
      g.op("Div", "gelu", {x, g.f32("sqrt_2", float(std::sqrt(2.0)))});
  t = g.op("Erf", "gelu", {t});
  t = g.op("Add", "gelu", {t, g.f32("one", 1.0f)});
  t = g.op("Mul", "gelu", {x, t});
  return g.op("Mul", "gelu_half", {t, g.f32("half", 0.5f)});
}

void buildGpt(GraphBuilder &g, const ZooOptions &o) {
  Dims d(o);
  g.addInput("ids", onnx::TensorProto::INT64, {d.b, d.s});
  g.addInput("labels", onnx::TensorProto::INT64, {d.b, d.s});
  g.setScope("embed");
  std::string tok = g.param("tok_embedding", {d.v, d.h}, Init::Normal);
  std::string x = g.op("Gather", "tok", {tok, "ids"}, {attrInt("axis", 0)});
  if (!o.alibi) {
    std::string pos = g.param("pos_embedding", {d.s, d.h}, Init::Normal);
    x = g.op("Add", "pos", {x, pos});
  }
  x = dropout(g, o.dropout, x, "embed");
  std::string mask = causalMask(g, d.s);
  std::string alibi = o.alibi ? alibiBiases(g, d) : "";

  for (int64_t l = 0; l < o.layers; ++l) {
    std::string p = "layers." + str(l);
    g.setScope(p + "/ln1");
    std::string h = layerNorm(g, o, x, p + ".ln1");
    g.setScope(p + "/attn");
    std::string qkv = g.op(
        "MatMul", "qkv",
        {h, g.param(p + ".attn.qkv.weight", {d.h, 3 * d.h}, Init::Normal)});
    qkv = g.op("Add", "qkv_bias",
               {qkv, g.param(p + ".attn.qkv.bias", {3 * d.h}, Init::Zeros)});
    auto parts = g.node("Split", "qkv", {qkv, g.i64({d.h, d.h, d.h})},
                        {attrInt("axis", -1)}, 3);
    std::string q = splitHeads(g, d, parts[0], d.nh, "q");
    std::string k =
        g.op("Reshape", "k", {parts[1], g.i64({d.b, d.s, d.nh, d.hd})});
    std::string kT =
        g.op("Transpose", "k", {k}, {attrInts("perm", {0, 2, 3, 1})});
    std::string v = splitHeads(g, d, parts[2], d.nh, "v");
    std::string a = attend(g, d, q, kT, v, mask, o.dropout, alibi);
    a = g.op("MatMul", "proj",
             {a, g.param(p + ".attn.proj.weight", {d.h, d.h}, Init::Normal)});
    a = g.op("Add", "proj_bias",
             {a, g.param(p + ".attn.proj.bias", {d.h}, Init::Zeros)});
    a = dropout(g, o.dropout, a, "proj");
    g.setScope(p);
    x = g.op("Add", "residual_attn", {x, a});

    g.setScope(p + "/ln2");
    h = layerNorm(g, o, x, p + ".ln2");
    g.setScope(p + "/mlp");
    std::string m =
        g.op("MatMul", "fc1",
             {h, g.param(p + ".mlp.fc1.weight", {d.h, d.f}, Init::Normal)});
    m = g.op("Add", "fc1_bias",
             {m, g.param(p + ".mlp.fc1.bias", {d.f}, Init::Zeros)});
    m = gelu(g, m);
    m = g.op("MatMul", "fc2",
             {m, g.param(p + ".mlp.fc2.weight", {d.f, d.h}, Init::Normal)});
    m = g.op("Add", "fc2_bias",
             {m, g.param(p + ".mlp.fc2.bias", {d.h}, Init::Zeros)});
    m = dropout(g, o.dropout, m, "fc2");
    g.setScope(p);
    x = g.op("Add", "residual_mlp", {x, m});
  }
  g.setScope("final_ln");
  x = layerNorm(g, o, x, "final_ln");
  addHeadAndLoss(g, o, d, x, tok, "labels");
}

//===----------------------------------------------------------------------===//
// Llama
//===----------------------------------------------------------------------===//

/// x / sqrt(mean(x^2) + eps) * weight, as Llama's RMSNorm.
std::string rmsNorm(GraphBuilder &g, const ZooOptions &o, const std::string &x,
                    const std::string &weightName) {
  std::string sq = g.op("Mul", "square", {x, x});
  std::string mean =
      g.getOpset() >= 18
          ? g.op("ReduceMean", "", {sq, g.i64({-1})}, {attrInt("keepdims", 1)})
          : g.op("ReduceMean", "", {sq},
                 {attrInts("axes", {-1}), attrInt("keepdims", 1)});
  std::string t =
      g.op("Add", "eps", {mean, g.f32("norm_eps", float(o.normEps))});
  t = g.op("Sqrt", "", {t});
  t = g.op("Reciprocal", "", {t});
  t = g.op("Mul", "normalize", {x, t});
  return g.op("Mul", "scale", {t, g.param(weightName, {o.hidden}, Init::Ones)});
}

/// The rotary tables cos and sin [s, hd] of the angles p * theta^(-2i / hd)
/// for position p and i < hd / 2, repeated for the second half (the Hugging
/// Face layout). Computed like the mask, from Range, to stay small.
std::pair<std::string, std::string>
rotaryTables(GraphBuilder &g, const ZooOptions &o, const Dims &d) {
  g.setScope("rope");
  int64_t half = d.hd / 2;
  std::string i =
      g.op("Range", "freq",
           {g.f32("zero", 0.0f), g.f32("half_head_dim", float(half)),
            g.f32("one", 1.0f)});
  std::string exponent = g.op(
      "Mul", "freq", {i, g.f32("minus_2_over_head_dim", -2.0f / float(d.hd))});
  std::string invFreq =
      g.op("Pow", "freq", {g.f32("rope_theta", float(o.ropeTheta)), exponent});
  std::string pos =
      g.op("Range", "positions",
           {g.f32("zero", 0.0f), g.f32("seq", float(d.s)), g.f32("one", 1.0f)});
  pos = g.op("Unsqueeze", "positions", {pos, g.i64({1})});
  std::string angles = g.op("Mul", "angles", {pos, invFreq});
  angles = g.op("Concat", "angles", {angles, angles}, {attrInt("axis", -1)});
  return {g.op("Cos", "", {angles}), g.op("Sin", "", {angles})};
}

/// x * cos + rotate_half(x) * sin over the head dimension of x [b, n, s, hd],
/// with rotate_half(x) = concat(-x2, x1) (the Hugging Face Llama form).
std::string rope(GraphBuilder &g, const Dims &d, const std::string &x,
                 const std::string &cos, const std::string &sin,
                 const std::string &tag) {
  int64_t half = d.hd / 2;
  auto halves = g.node("Split", "rope_" + tag, {x, g.i64({half, half})},
                       {attrInt("axis", -1)}, 2);
  std::string neg = g.op("Neg", "rope_" + tag, {halves[1]});
  std::string rotated =
      g.op("Concat", "rope_" + tag, {neg, halves[0]}, {attrInt("axis", -1)});
  std::string a = g.op("Mul", "rope_cos_" + tag, {x, cos});
  std::string b = g.op("Mul", "rope_sin_" + tag, {rotated, sin});
  return g.op("Add", "rope_" + tag, {a, b});
}

/// [b, kvh, s, hd] to [b, nh, s, hd], each kv head repeated nh / kvh times
/// in a row (Hugging Face repeat_kv).
std::string repeatKv(GraphBuilder &g, const Dims &d, const std::string &x,
                     const std::string &tag) {
  int64_t rep = d.nh / d.kvh;
  if (rep == 1)
    return x;
  std::string u = g.op("Unsqueeze", "gqa_" + tag, {x, g.i64({2})});
  std::string e =
      g.op("Expand", "gqa_" + tag, {u, g.i64({d.b, d.kvh, rep, d.s, d.hd})});
  return g.op("Reshape", "gqa_" + tag, {e, g.i64({d.b, d.nh, d.s, d.hd})});
}

void buildLlama(GraphBuilder &g, const ZooOptions &o) {
  Dims d(o);
  g.addInput("ids", onnx::TensorProto::INT64, {d.b, d.s});
  g.addInput("labels", onnx::TensorProto::INT64, {d.b, d.s});
  g.setScope("embed");
  std::string tok = g.param("tok_embedding", {d.v, d.h}, Init::Normal);
  std::string x = g.op("Gather", "tok", {tok, "ids"}, {attrInt("axis", 0)});

  std::string mask = causalMask(g, d.s);
  auto [cos, sin] = rotaryTables(g, o, d);

  for (int64_t l = 0; l < o.layers; ++l) {
    std::string p = "layers." + str(l);
    g.setScope(p + "/attn_norm");
    std::string h = rmsNorm(g, o, x, p + ".attn_norm.weight");
    g.setScope(p + "/attn");
    std::string q = g.op(
        "MatMul", "q",
        {h, g.param(p + ".attn.q.weight", {d.h, d.nh * d.hd}, Init::Normal)});
    std::string k = g.op(
        "MatMul", "k",
        {h, g.param(p + ".attn.k.weight", {d.h, d.kvh * d.hd}, Init::Normal)});
    std::string v = g.op(
        "MatMul", "v",
        {h, g.param(p + ".attn.v.weight", {d.h, d.kvh * d.hd}, Init::Normal)});
    q = rope(g, d, splitHeads(g, d, q, d.nh, "q"), cos, sin, "q");
    k = rope(g, d, splitHeads(g, d, k, d.kvh, "k"), cos, sin, "k");
    v = splitHeads(g, d, v, d.kvh, "v");
    k = repeatKv(g, d, k, "k");
    v = repeatKv(g, d, v, "v");
    std::string kT =
        g.op("Transpose", "k_t", {k}, {attrInts("perm", {0, 1, 3, 2})});
    std::string a = attend(g, d, q, kT, v, mask);
    a = g.op(
        "MatMul", "o",
        {a, g.param(p + ".attn.o.weight", {d.nh * d.hd, d.h}, Init::Normal)});
    g.setScope(p);
    x = g.op("Add", "residual_attn", {x, a});

    g.setScope(p + "/mlp_norm");
    h = rmsNorm(g, o, x, p + ".mlp_norm.weight");
    g.setScope(p + "/mlp");
    std::string gate =
        g.op("MatMul", "gate",
             {h, g.param(p + ".mlp.gate.weight", {d.h, d.f}, Init::Normal)});
    std::string act =
        g.op("Mul", "silu", {gate, g.op("Sigmoid", "gate", {gate})});
    std::string up =
        g.op("MatMul", "up",
             {h, g.param(p + ".mlp.up.weight", {d.h, d.f}, Init::Normal)});
    std::string m = g.op("Mul", "gate_up", {act, up});
    m = g.op("MatMul", "down",
             {m, g.param(p + ".mlp.down.weight", {d.f, d.h}, Init::Normal)});
    g.setScope(p);
    x = g.op("Add", "residual_mlp", {x, m});
  }
  g.setScope("final_norm");
  x = rmsNorm(g, o, x, "final_norm.weight");
  addHeadAndLoss(g, o, d, x, tok, "labels");
}

//===----------------------------------------------------------------------===//
// MLP
//===----------------------------------------------------------------------===//

void buildMlp(GraphBuilder &g, const ZooOptions &o) {
  g.addInput("x", onnx::TensorProto::FLOAT, {o.batch, o.inputs});
  g.addInput("labels", onnx::TensorProto::INT64, {o.batch});
  std::string x = "x";
  int64_t width = o.inputs;
  for (int64_t l = 0; l < o.layers; ++l) {
    std::string p = "layers." + str(l);
    g.setScope(p);
    std::string w = g.param(p + ".fc.weight", {width, o.hidden}, Init::Normal);
    std::string b = g.param(p + ".fc.bias", {o.hidden}, Init::Zeros);
    x = g.op("Relu", "", {g.op("Gemm", "fc", {x, w, b})});
    width = o.hidden;
  }
  g.setScope("head");
  std::string w = g.param("head.weight", {width, o.classes}, Init::Normal);
  std::string b = g.param("head.bias", {o.classes}, Init::Zeros);
  g.node("Gemm", "", {x, w, b}, {}, 1, "logits");
  g.setScope("loss");
  g.node("SoftmaxCrossEntropyLoss", "", {"logits", "labels"},
         {attrString("reduction", "mean")}, 1, "loss");
  g.addOutput("loss", onnx::TensorProto::FLOAT, {});
  g.addOutput("logits", onnx::TensorProto::FLOAT, {o.batch, o.classes});
}

/// The model with initializer stubs (no data, no location) and the specs
/// of its parameters, in initializer order. `o` is validated.
onnx::ModelProto buildSkeleton(const ZooOptions &o,
                               std::vector<ParamSpec> &params) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("dtcc zoo");
  auto *opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(o.opset);
  model.set_doc_string(describe(o));
  auto addMeta = [&](const std::string &key, const std::string &value) {
    auto *entry = model.add_metadata_props();
    entry->set_key(key);
    entry->set_value(value);
  };
  addMeta("dtcc.zoo", describe(o));
  addMeta("dtcc.parameters", str(parameterCount(o)));
  if (!o.weights)
    addMeta(kNoWeightsKey, "1");

  onnx::GraphProto &graph = *model.mutable_graph();
  graph.set_name(familyName(o.family));
  GraphBuilder g(graph, o.opset);
  switch (o.family) {
  case Family::Gpt:
    buildGpt(g, o);
    break;
  case Family::Llama:
    buildLlama(g, o);
    break;
  case Family::Mlp:
    buildMlp(g, o);
    break;
  }
  params = g.getParams();
  return model;
}

std::string writeProto(const onnx::ModelProto &model, const std::string &path) {
  size_t size = model.ByteSizeLong();
  if (size > size_t(std::numeric_limits<int32_t>::max()))
    return "cannot write '" + path + "': the model proto would be " +
           std::to_string(size) + " bytes, beyond protobuf's 2 GiB limit";
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out)
    return "cannot open '" + path + "' for writing: " + std::strerror(errno);
  if (!model.SerializeToOstream(&out) || !out.flush())
    return "cannot write '" + path + "': " + std::strerror(errno);
  return "";
}

/// Opens "<path>.data" for external data.
std::string openData(std::ofstream &out, const std::string &dataPath) {
  out.open(dataPath, std::ios::binary | std::ios::trunc);
  if (!out)
    return "cannot open '" + dataPath +
           "' for writing: " + std::strerror(errno);
  return "";
}

/// Pads `out` from `offset` to the next multiple of `alignment`.
int64_t pad(std::ofstream &out, int64_t offset, int64_t alignment) {
  int64_t aligned = alignUp(offset, alignment);
  static const char zeros[4096] = {};
  for (int64_t left = aligned - offset; left > 0;) {
    int64_t n = std::min<int64_t>(left, sizeof(zeros));
    out.write(zeros, n);
    left -= n;
  }
  return aligned;
}

bool isPowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

} // namespace

//===----------------------------------------------------------------------===//
// Options
//===----------------------------------------------------------------------===//

const char *familyName(Family family) {
  switch (family) {
  case Family::Gpt:
    return "gpt";
  case Family::Llama:
    return "llama";
  case Family::Mlp:
    return "mlp";
  }
  return "?";
}

std::optional<Family> parseFamily(std::string_view name) {
  for (Family f : {Family::Gpt, Family::Llama, Family::Mlp})
    if (name == familyName(f))
      return f;
  return std::nullopt;
}

std::string validate(ZooOptions &o) {
  const std::string family = familyName(o.family);
  struct Field {
    const char *flag;
    int64_t *value;
  };
  const Field sizes[] = {
      {"--layers", &o.layers},
      {"--hidden", &o.hidden},
      {"--heads", &o.heads},
      {"--kv-heads", &o.kvHeads},
      {"--ffn-hidden", &o.ffnHidden},
      {"--vocab", &o.vocab},
      {"--seq", &o.seq},
      {"--batch", &o.batch},
      {"--inputs", &o.inputs},
      {"--classes", &o.classes},
  };
  for (const Field &f : sizes) {
    if (*f.value < 0)
      return std::string(f.flag) + " must be positive, got " + str(*f.value);
    // Bounds every product below well inside __int128.
    if (*f.value > kMaxSize)
      return std::string(f.flag) + " must be at most 2^40, got " +
             str(*f.value);
  }
  if (!(o.ropeTheta >= 0) || !std::isfinite(o.ropeTheta))
    return "--rope-theta must be positive, got " + str(o.ropeTheta);
  if (!(o.normEps >= 0) || !std::isfinite(o.normEps))
    return "--norm-eps must be positive, got " + str(o.normEps);
  if (!(o.dropout >= 0 && o.dropout < 1))
    return "--dropout must be at least 0 and below 1, got " + str(o.dropout);
  auto setDefault = [](int64_t &v, int64_t d) {
    if (v == 0)
      v = d;
  };
  auto notFor = [&](bool isSet, const char *flag,
                    const char *families) -> std::string {
    if (!isSet)
      return "";
    return std::string(flag) + " applies to " + families + " models, not " +
           family;
  };
  // The flags of GPT's block only.
  auto gptOnly = [&]() -> std::string {
    for (auto [isSet, flag] :
         {std::pair{o.dropout != 0, "--dropout"}, {o.alibi, "--alibi"}})
      if (std::string e = notFor(isSet, flag, "gpt"); !e.empty())
        return e;
    return "";
  };
  // Every product below is of validated sizes; __int128 keeps the size
  // checks themselves from overflowing.
  using Wide = __int128;
  auto tooLarge = [](Wide n) { return n > Wide(kMaxElements); };

  if (o.family == Family::Mlp) {
    for (auto [isSet, flag] : {std::pair{o.heads != 0, "--heads"},
                               {o.kvHeads != 0, "--kv-heads"},
                               {o.ffnHidden != 0, "--ffn-hidden"},
                               {o.vocab != 0, "--vocab"},
                               {o.seq != 0, "--seq"},
                               {o.ropeTheta != 0, "--rope-theta"},
                               {o.normEps != 0, "--norm-eps"},
                               {o.tiedEmbeddings, "--tied-embeddings"}})
      if (std::string e = notFor(isSet, flag, "gpt and llama"); !e.empty())
        return e;
    if (std::string e = gptOnly(); !e.empty())
      return e;
    setDefault(o.layers, 2);
    setDefault(o.hidden, 256);
    setDefault(o.inputs, 784);
    setDefault(o.classes, 10);
    setDefault(o.batch, 32);
    if (o.opset < 13 || o.opset > kMaxOpset)
      return "--opset must be between 13 and " + str(kMaxOpset) +
             " for mlp models, got " + str(o.opset);
    if (tooLarge(Wide(o.batch) * std::max({o.inputs, o.hidden, o.classes})) ||
        tooLarge(Wide(std::max(o.inputs, o.hidden)) * o.hidden) ||
        tooLarge(Wide(o.hidden) * o.classes) ||
        tooLarge(Wide(o.inputs) * o.classes))
      return "--batch, --inputs, --hidden and --classes give a tensor of more "
             "than 2^48 elements";
    if (Wide(o.layers) * o.hidden * o.hidden > Wide(1) << 60)
      return "--layers and --hidden give more than 2^60 parameters";
    return "";
  }

  bool gpt = o.family == Family::Gpt;
  for (auto [isSet, flag] :
       {std::pair{o.inputs != 0, "--inputs"}, {o.classes != 0, "--classes"}})
    if (std::string e = notFor(isSet, flag, "mlp"); !e.empty())
      return e;
  if (!gpt)
    if (std::string e = gptOnly(); !e.empty())
      return e;
  if (gpt) {
    if (std::string e = notFor(o.ropeTheta != 0, "--rope-theta", "llama");
        !e.empty())
      return e;
    if (o.kvHeads != 0 && o.heads != 0 && o.kvHeads != o.heads)
      return "--kv-heads applies to llama models; gpt has --kv-heads = --heads "
             "(" +
             str(o.heads) + "), got " + str(o.kvHeads);
    if (o.kvHeads != 0 && o.heads == 0)
      return "--kv-heads applies to llama models, not gpt";
  }
  setDefault(o.layers, 12);
  setDefault(o.hidden, 768);
  setDefault(o.heads, 12);
  setDefault(o.kvHeads, o.heads);
  setDefault(o.vocab, gpt ? 50257 : 32000);
  setDefault(o.seq, 1024);
  setDefault(o.batch, 1);
  if (o.normEps == 0)
    o.normEps = 1e-5;
  if (!gpt && o.ropeTheta == 0)
    o.ropeTheta = 10000;
  if (o.hidden % o.heads != 0)
    return "--heads (" + str(o.heads) + ") must divide --hidden (" +
           str(o.hidden) + ")";
  if (o.heads % o.kvHeads != 0)
    return "--kv-heads (" + str(o.kvHeads) + ") must divide --heads (" +
           str(o.heads) + ")";
  int64_t headDim = o.hidden / o.heads;
  if (!gpt && headDim % 2 != 0)
    return "--hidden / --heads (" + str(o.hidden) + " / " + str(o.heads) +
           " = " + str(headDim) + ") must be even for rotary embeddings";
  // Meta's rule: int(2 * 4h / 3) rounded up to a multiple of 256; as 8h is
  // a multiple of 8, flooring first never changes the result.
  if (o.ffnHidden == 0)
    o.ffnHidden = gpt ? 4 * o.hidden : 256 * ((8 * o.hidden + 767) / 768);
  // LayerNormalization needs 17, Trilu (the causal mask) 14.
  int64_t minOpset = gpt ? 17 : 14;
  if (o.opset < minOpset || o.opset > kMaxOpset)
    return "--opset must be between " + str(minOpset) + " and " +
           str(kMaxOpset) + " for " + family + " models, got " + str(o.opset);
  Wide widest =
      std::max({3 * Wide(o.hidden), Wide(o.ffnHidden), Wide(o.vocab)});
  if (tooLarge(Wide(o.batch) * o.seq * widest) ||
      tooLarge(Wide(o.batch) * o.heads * o.seq * o.seq) ||
      tooLarge(Wide(o.vocab) * o.hidden) ||
      tooLarge(Wide(o.hidden) *
               std::max(3 * Wide(o.hidden), Wide(o.ffnHidden))))
    return "--batch, --seq, --hidden, --heads, --ffn-hidden and --vocab give a "
           "tensor of more than 2^48 elements";
  if (Wide(o.layers) * 4 * Wide(o.hidden) *
          std::max(Wide(o.hidden), Wide(o.ffnHidden)) >
      Wide(1) << 60)
    return "--layers, --hidden and --ffn-hidden give more than 2^60 parameters";
  return "";
}

std::vector<std::string> presetNames() {
  return {"gpt2",      "gpt2-medium", "gpt2-large", "gpt2-xl",
          "tinyllama", "llama3-8b",   "llama3-70b", "llama3-405b"};
}

std::string applyPreset(ZooOptions &o, std::string_view name) {
  struct Preset {
    const char *name;
    Family family;
    int64_t layers, hidden, heads, kvHeads, ffnHidden, vocab, seq;
    double ropeTheta;
  };
  static const Preset presets[] = {
      {"gpt2", Family::Gpt, 12, 768, 12, 0, 0, 50257, 1024, 0},
      {"gpt2-medium", Family::Gpt, 24, 1024, 16, 0, 0, 50257, 1024, 0},
      {"gpt2-large", Family::Gpt, 36, 1280, 20, 0, 0, 50257, 1024, 0},
      {"gpt2-xl", Family::Gpt, 48, 1600, 25, 0, 0, 50257, 1024, 0},
      {"tinyllama", Family::Llama, 22, 2048, 32, 4, 5632, 32000, 0, 10000},
      {"llama3-8b", Family::Llama, 32, 4096, 32, 8, 14336, 128256, 0, 500000},
      {"llama3-70b", Family::Llama, 80, 8192, 64, 8, 28672, 128256, 0, 500000},
      {"llama3-405b", Family::Llama, 126, 16384, 128, 8, 53248, 128256, 0,
       500000},
  };
  for (const Preset &p : presets) {
    if (name != p.name)
      continue;
    if (p.family != o.family)
      return "--preset " + std::string(name) + " is a " + familyName(p.family) +
             " model, not " + familyName(o.family);
    auto fill = [](int64_t &v, int64_t d) {
      if (v == 0)
        v = d;
    };
    fill(o.layers, p.layers);
    fill(o.hidden, p.hidden);
    fill(o.heads, p.heads);
    fill(o.kvHeads, p.kvHeads);
    fill(o.ffnHidden, p.ffnHidden);
    fill(o.vocab, p.vocab);
    fill(o.seq, p.seq);
    if (o.ropeTheta == 0)
      o.ropeTheta = p.ropeTheta;
    return "";
  }
  std::string known;
  for (const std::string &n : presetNames())
    known += (known.empty() ? "" : ", ") + n;
  return "unknown --preset '" + std::string(name) + "' (known: " + known + ")";
}

std::string describe(const ZooOptions &o) {
  std::string s = familyName(o.family);
  auto add = [&](const char *key, const std::string &value) {
    s += std::string(" ") + key + "=" + value;
  };
  add("layers", str(o.layers));
  add("hidden", str(o.hidden));
  if (o.family == Family::Mlp) {
    add("inputs", str(o.inputs));
    add("classes", str(o.classes));
  } else {
    add("heads", str(o.heads));
    if (o.family == Family::Llama)
      add("kv-heads", str(o.kvHeads));
    add("ffn-hidden", str(o.ffnHidden));
    add("vocab", str(o.vocab));
    add("seq", str(o.seq));
  }
  add("batch", str(o.batch));
  if (o.family == Family::Llama)
    add("rope-theta", str(o.ropeTheta));
  if (o.family != Family::Mlp) {
    add("norm-eps", str(o.normEps));
    add("tied-embeddings", o.tiedEmbeddings ? "1" : "0");
  }
  if (o.alibi)
    add("alibi", "1");
  if (o.dropout != 0)
    add("dropout", str(o.dropout));
  add("opset", str(o.opset));
  add("seed", std::to_string(o.seed));
  add("weights", o.weights ? "1" : "0");
  return s;
}

int64_t parameterCount(const ZooOptions &options) {
  ZooOptions o = options;
  if (!validate(o).empty())
    return -1;
  int64_t h = o.hidden, f = o.ffnHidden, v = o.vocab;
  switch (o.family) {
  case Family::Gpt: {
    // Per block: two LayerNorms (4h), qkv (3h^2 + 3h), proj (h^2 + h),
    // fc1 (hf + f), fc2 (fh + h).
    int64_t block =
        4 * h + 3 * h * h + 3 * h + h * h + h + h * f + f + f * h + h;
    return v * h + (o.alibi ? 0 : o.seq * h) + o.layers * block + 2 * h +
           (o.tiedEmbeddings ? 0 : h * v);
  }
  case Family::Llama: {
    // Per block: two RMSNorms (2h), q and o (2h^2), k and v (2 h kvd),
    // gate, up and down (3hf).
    int64_t kvDim = o.kvHeads * (h / o.heads);
    int64_t block = 2 * h + 2 * h * h + 2 * h * kvDim + 3 * h * f;
    return v * h + o.layers * block + h + (o.tiedEmbeddings ? 0 : h * v);
  }
  case Family::Mlp: {
    int64_t n = 0, width = o.inputs;
    for (int64_t l = 0; l < o.layers; ++l, width = o.hidden)
      n += width * o.hidden + o.hidden;
    return n + width * o.classes + o.classes;
  }
  }
  return -1;
}

//===----------------------------------------------------------------------===//
// Building and writing
//===----------------------------------------------------------------------===//

onnx::ModelProto buildModel(const ZooOptions &options) {
  ZooOptions o = options;
  if (!validate(o).empty())
    return onnx::ModelProto();
  std::vector<ParamSpec> params;
  onnx::ModelProto model = buildSkeleton(o, params);
  if (!o.weights) {
    markNoWeights(model, "model.onnx.no-weights", kDefaultAlignment);
    return model;
  }
  auto &inits = *model.mutable_graph()->mutable_initializer();
  for (size_t i = 0; i < params.size(); ++i)
    inits[int(i)].set_raw_data(rawData(params[i], o.seed));
  return model;
}

std::string writeModel(onnx::ModelProto model, const std::string &path,
                       const WriteOptions &options) {
  if (!isPowerOfTwo(options.alignment))
    return "the external data alignment must be a power of two, got " +
           str(options.alignment);
  auto &inits = *model.mutable_graph()->mutable_initializer();
  bool noWeights = false;
  for (const auto &entry : model.metadata_props())
    noWeights |= entry.key() == kNoWeightsKey && entry.value() == "1";
  if (noWeights) {
    // Stubs name the file beside this model, which stays unwritten.
    for (onnx::TensorProto &t : inits)
      for (auto &entry : *t.mutable_external_data())
        if (entry.key() == "location")
          entry.set_value(baseName(path) + ".no-weights");
    return writeProto(model, path);
  }
  int64_t total = 0;
  for (const onnx::TensorProto &t : inits)
    total += int64_t(t.raw_data().size());
  if (total > options.externalThreshold) {
    std::string dataPath = path + ".data";
    std::ofstream out;
    if (std::string e = openData(out, dataPath); !e.empty())
      return e;
    int64_t offset = 0;
    for (onnx::TensorProto &t : inits) {
      if (t.raw_data().empty())
        continue;
      offset = pad(out, offset, options.alignment);
      int64_t length = int64_t(t.raw_data().size());
      out.write(t.raw_data().data(), length);
      setExternal(t, baseName(dataPath), offset, length);
      offset += length;
    }
    if (!out.flush())
      return "cannot write '" + dataPath + "': " + std::strerror(errno);
  }
  return writeProto(model, path);
}

std::string buildAndWriteModel(const ZooOptions &options,
                               const std::string &path,
                               const WriteOptions &writeOptions) {
  ZooOptions o = options;
  if (std::string e = validate(o); !e.empty())
    return e;
  if (!isPowerOfTwo(writeOptions.alignment))
    return "the external data alignment must be a power of two, got " +
           str(writeOptions.alignment);
  if (!o.weights || parameterCount(o) * int64_t(sizeof(float)) <=
                        writeOptions.externalThreshold)
    return writeModel(buildModel(o), path, writeOptions);

  // Stream: generate each tensor in chunks straight into the data file.
  std::vector<ParamSpec> params;
  onnx::ModelProto model = buildSkeleton(o, params);
  std::string dataPath = path + ".data";
  std::ofstream out;
  if (std::string e = openData(out, dataPath); !e.empty())
    return e;
  std::vector<float> chunk(kChunk);
  auto &inits = *model.mutable_graph()->mutable_initializer();
  int64_t offset = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    offset = pad(out, offset, writeOptions.alignment);
    int64_t n = params[i].elements();
    for (int64_t begin = 0; begin < n && out; begin += kChunk) {
      int64_t count = std::min(kChunk, n - begin);
      generate(params[i], o.seed, begin, count, chunk.data());
      out.write(reinterpret_cast<const char *>(chunk.data()),
                count * int64_t(sizeof(float)));
    }
    int64_t length = n * int64_t(sizeof(float));
    setExternal(inits[int(i)], baseName(dataPath), offset, length);
    offset += length;
  }
  if (!out.flush())
    return "cannot write '" + dataPath + "': " + std::strerror(errno);
  return writeProto(model, path);
}

} // namespace dtcc::zoo
