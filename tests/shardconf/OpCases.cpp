//===- OpCases.cpp - one small case per dgraph op -------------------------===//
//
// Each case's body ends with the op under test. Dimensions that a split is
// meant to reach are multiples of 4 (2 and 4 ranks, 2 x 2); the harness
// derives everything else (shardings, loss, gradients) from the op's
// sharding rule and VJP. A new op needs one entry here.
//
//===----------------------------------------------------------------------===//

#include "tests/shardconf/ShardConformance.h"

using namespace dtcc::shardconf;

namespace {

std::string tensorType(const std::vector<int64_t> &shape,
                       const std::string &dtype = "f64") {
  std::string s = "tensor<";
  for (int64_t d : shape)
    s += std::to_string(d) + "x";
  return s + dtype + ">";
}

} // namespace

std::vector<OpCase> dtcc::shardconf::opCases() {
  std::vector<OpCase> out;
  const std::string t = "tensor<4x8xf64>";
  auto add = [&](std::string name, std::vector<Param> params, std::string body) {
    out.push_back({std::move(name), std::move(params), std::move(body)});
  };

  // Elementwise: one factor per dimension.
  auto unary = [&](const std::string &op, double lo, double hi,
                   const std::string &attrs = "", const std::string &name = "") {
    add(name.empty() ? op : name, {{"a", {4, 8}, "f64", lo, hi}},
        "%y = dgraph." + op + " %a" + attrs + " : " + t);
  };
  unary("neg", -1, 1);
  unary("abs", -1, 1);
  unary("exp", -1, 1);
  unary("log", 0.5, 2);
  unary("sqrt", 0.5, 2);
  unary("rsqrt", 0.5, 2);
  unary("reciprocal", 0.5, 2);
  unary("tanh", -2, 2);
  unary("sigmoid", -2, 2);
  unary("relu", -1, 1);
  unary("silu", -2, 2);
  unary("erf", -2, 2);
  unary("gelu", -2, 2);
  unary("gelu", -2, 2, " {approximate = \"tanh\"}", "gelu_tanh");
  unary("sin", -2, 2);
  unary("cos", -2, 2);
  unary("tan", -1, 1);
  unary("asin", -0.8, 0.8);
  unary("acos", -0.8, 0.8);
  unary("atan", -2, 2);
  unary("sinh", -2, 2);
  unary("cosh", -2, 2);
  unary("asinh", -2, 2);
  unary("acosh", 1.5, 3);
  unary("atanh", -0.8, 0.8);
  unary("floor", -3, 3);
  unary("ceil", -3, 3);
  unary("round", -3, 3);
  unary("sign", -1, 1);
  add("is_nan", {{"a", {4, 8}}}, "%y = dgraph.is_nan %a : " + t);
  add("is_inf", {{"a", {4, 8}}}, "%y = dgraph.is_inf %a : " + t);
  add("not", {{"a", {4, 8}, "i1"}}, "%y = dgraph.not %a : tensor<4x8xi1>");

  auto binary = [&](const std::string &op, const std::string &dtype, double lo,
                    double hi) {
    add(op, {{"a", {4, 8}, dtype, lo, hi}, {"b", {4, 8}, dtype, lo, hi}},
        "%y = dgraph." + op + " %a, %b : " + tensorType({4, 8}, dtype));
  };
  binary("add", "f64", -1, 1);
  binary("sub", "f64", -1, 1);
  binary("mul", "f64", -1, 1);
  binary("div", "f64", 0.5, 2);
  binary("pow", "f64", 0.5, 2);
  binary("max", "f64", -1, 1);
  binary("min", "f64", -1, 1);
  binary("rem", "f64", 0.5, 3);
  binary("and", "i1", 0, 1);
  binary("or", "i1", 0, 1);
  binary("xor", "i1", 0, 1);
  add("shift_left", {{"a", {4, 8}, "i64", 0, 100}, {"b", {4, 8}, "i64", 0, 3}},
      "%y = dgraph.shift_left %a, %b : tensor<4x8xi64>");
  add("shift_right", {{"a", {4, 8}, "i64", 0, 100}, {"b", {4, 8}, "i64", 0, 3}},
      "%y = dgraph.shift_right %a, %b : tensor<4x8xi64>");
  binary("eq", "i64", 0, 2);
  binary("lt", "f64", -1, 1);
  binary("le", "i64", 0, 2);
  binary("gt", "f64", -1, 1);
  binary("ge", "i64", 0, 2);
  add("select", {{"a", {4, 8}}, {"b", {4, 8}}},
      "%c = dgraph.gt %a, %b : " + t + "\n%y = dgraph.select %c, %a, %b : " + t);
  add("cast", {{"a", {4, 8}}},
      "%y = dgraph.cast %a : " + t + " to tensor<4x8xf32>");
  add("gelu_grad", {{"a", {4, 8}, "f64", -2, 2}, {"b", {4, 8}}},
      "%y = dgraph.gelu_grad %a, %b : " + t);
  add("silu_grad", {{"a", {4, 8}, "f64", -2, 2}, {"b", {4, 8}}},
      "%y = dgraph.silu_grad %a, %b : " + t);

  // Sources.
  add("iota", {}, "%y = dgraph.iota dim = 1 : tensor<4x8xi64>");
  {
    std::string values = "[";
    for (int i = 0; i < 4; ++i) {
      values += i ? ", [" : "[";
      for (int j = 0; j < 8; ++j)
        values += (j ? ", " : "") + std::to_string(i * 8 + j) + ".5";
      values += "]";
    }
    add("constant", {}, "%y = dgraph.constant dense<" + values + "]> : " + t);
  }

  // Data movement.
  add("broadcast_in_dim", {{"a", {8}}},
      "%y = dgraph.broadcast_in_dim %a, dims = [1] : (tensor<8xf64>) -> " + t);
  add("broadcast_in_dim_rows", {{"a", {4}}},
      "%y = dgraph.broadcast_in_dim %a, dims = [0] : (tensor<4xf64>) -> " + t);
  add("broadcast_expand", {{"a", {4, 1}}},
      "%y = dgraph.broadcast_in_dim %a, dims = [0, 1] : (tensor<4x1xf64>) -> " + t);
  add("reshape_split", {{"a", {32}}},
      "%y = dgraph.reshape %a : (tensor<32xf64>) -> " + t);
  add("reshape_merge", {{"a", {4, 8}}},
      "%y = dgraph.reshape %a : (" + t + ") -> tensor<32xf64>");
  add("reshape_heads", {{"a", {4, 8}}},
      "%y = dgraph.reshape %a : (" + t + ") -> tensor<4x2x4xf64>");
  add("reshape_regroup", {{"a", {4, 8}}},
      "%y = dgraph.reshape %a : (" + t + ") -> tensor<8x4xf64>");
  add("transpose", {{"a", {8, 4}}},
      "%y = dgraph.transpose %a, perm = [1, 0] : (tensor<8x4xf64>) -> " + t);
  add("transpose3d", {{"a", {4, 8, 4}}},
      "%y = dgraph.transpose %a, perm = [2, 0, 1] : (tensor<4x8x4xf64>) -> "
      "tensor<4x4x8xf64>");
  add("slice_block", {{"a", {4, 16}}},
      "%y = dgraph.slice %a, start = [0, 8], limit = [4, 16], stride = [1, 1] "
      ": (tensor<4x16xf64>) -> " + t);
  add("slice_offset", {{"a", {8, 8}}},
      "%y = dgraph.slice %a, start = [1, 0], limit = [5, 8], stride = [1, 1] "
      ": (tensor<8x8xf64>) -> " + t);
  add("slice_strided", {{"a", {4, 16}}},
      "%y = dgraph.slice %a, start = [0, 0], limit = [4, 16], stride = [1, 2] "
      ": (tensor<4x16xf64>) -> " + t);
  add("reverse", {{"a", {4, 8}}}, "%y = dgraph.reverse %a, dims = [1] : " + t);
  add("concat_equal", {{"a", {4, 4}}, {"b", {4, 4}}},
      "%y = dgraph.concat %a, %b dim = 1 : (tensor<4x4xf64>, tensor<4x4xf64>) -> " + t);
  add("concat_unequal", {{"a", {4, 4}}, {"b", {4, 8}}},
      "%y = dgraph.concat %a, %b dim = 1 : (tensor<4x4xf64>, tensor<4x8xf64>) -> "
      "tensor<4x12xf64>");
  add("pad_block", {{"a", {4, 4}}},
      "%z = dgraph.constant dense<0.5> : tensor<f64>\n"
      "%y = dgraph.pad %a, %z, low = [0, 4], high = [0, 0] : "
      "(tensor<4x4xf64>, tensor<f64>) -> " + t);
  add("pad", {{"a", {4, 5}}},
      "%z = dgraph.constant dense<0.5> : tensor<f64>\n"
      "%y = dgraph.pad %a, %z, low = [0, 1], high = [0, 2] : "
      "(tensor<4x5xf64>, tensor<f64>) -> " + t);
  add("gather", {{"a", {8, 4}}, {"i", {4}, "i64", 0, 7}},
      "%y = dgraph.gather %a, %i axis = 0 : (tensor<8x4xf64>, tensor<4xi64>) -> "
      "tensor<4x4xf64>");
  add("gather_axis1", {{"a", {4, 8}}, {"i", {4}, "i64", 0, 7}},
      "%y = dgraph.gather %a, %i axis = 1 : (" + t + ", tensor<4xi64>) -> "
      "tensor<4x4xf64>");
  // Indices counted from the end (-8..-1) too, as PyTorch's negative
  // indexing exports them (Falcon's fused_qkv[..., [-2], :]).
  add("gather_negative", {{"a", {8, 4}}, {"i", {4}, "i64", -8, 7}},
      "%y = dgraph.gather %a, %i axis = 0 : (tensor<8x4xf64>, tensor<4xi64>) "
      "-> "
      "tensor<4x4xf64>");
  add("gather_elements", {{"a", {4, 8}}, {"i", {4, 4}, "i64", 0, 7}},
      "%y = dgraph.gather_elements %a, %i axis = 1 : (" + t +
          ", tensor<4x4xi64>) -> tensor<4x4xf64>");
  add("scatter_add", {{"a", {4, 4}}, {"i", {4}, "i64", 0, 7}},
      "%y = dgraph.scatter_add %a, %i axis = 0, dim_size = 8 : "
      "(tensor<4x4xf64>, tensor<4xi64>) -> tensor<8x4xf64>");
  add("scatter_add_negative", {{"a", {4, 4}}, {"i", {4}, "i64", -8, 7}},
      "%y = dgraph.scatter_add %a, %i axis = 0, dim_size = 8 : "
      "(tensor<4x4xf64>, tensor<4xi64>) -> tensor<8x4xf64>");

  // Reductions.
  for (const char *op : {"reduce_sum", "reduce_max", "reduce_min"})
    add(op, {{"a", {4, 8, 4}}},
        std::string("%y = dgraph.") + op +
            " %a, dims = [1] : (tensor<4x8x4xf64>) -> tensor<4x4xf64>");
  add("reduce_sum_all", {{"a", {4, 8}}},
      "%y = dgraph.reduce_sum %a, dims = [0, 1] : (" + t + ") -> tensor<f64>");
  add("reduce_prod", {{"a", {4, 4, 4}, "f64", 0.5, 1.5}},
      "%y = dgraph.reduce_prod %a, dims = [1] : (tensor<4x4x4xf64>) -> "
      "tensor<4x4xf64>");
  add("argmax", {{"a", {4, 8}}},
      "%y = dgraph.argmax %a, dim = 1 : (" + t + ") -> tensor<4xi64>");
  add("argmin", {{"a", {4, 8}}},
      "%y = dgraph.argmin %a, dim = 0 : (" + t + ") -> tensor<8xi64>");
  add("cumsum", {{"a", {4, 8}}}, "%y = dgraph.cumsum %a, dim = 1 : " + t);
  add("cumsum_exclusive_reverse", {{"a", {4, 8}}},
      "%y = dgraph.cumsum %a, dim = 0 {exclusive, reverse} : " + t);

  // Matrix products: every combination of batch, transposes and a shared
  // right-hand side.
  add("matmul", {{"a", {4, 8}}, {"b", {8, 4}}},
      "%y = dgraph.matmul %a, %b : (" + t + ", tensor<8x4xf64>) -> tensor<4x4xf64>");
  add("matmul_batched", {{"a", {4, 4, 8}}, {"b", {4, 8, 4}}},
      "%y = dgraph.matmul %a, %b : (tensor<4x4x8xf64>, tensor<4x8x4xf64>) -> "
      "tensor<4x4x4xf64>");
  add("matmul_transposed", {{"a", {4, 8, 4}}, {"b", {4, 4, 8}}},
      "%y = dgraph.matmul %a, %b {transpose_lhs, transpose_rhs} : "
      "(tensor<4x8x4xf64>, tensor<4x4x8xf64>) -> tensor<4x4x4xf64>");
  add("matmul_shared_rhs", {{"a", {4, 4, 8}}, {"b", {4, 8}}},
      "%y = dgraph.matmul %a, %b {transpose_rhs} : (tensor<4x4x8xf64>, "
      "tensor<4x8xf64>) -> tensor<4x4x4xf64>");

  // Normalizations and losses.
  add("softmax", {{"a", {4, 8}}}, "%y = dgraph.softmax %a, dim = 1 : " + t);
  add("softmax_dim0", {{"a", {4, 8}}}, "%y = dgraph.softmax %a, dim = 0 : " + t);
  add("log_softmax", {{"a", {4, 8}}}, "%y = dgraph.log_softmax %a, dim = 1 : " + t);
  add("softmax_grad", {{"a", {4, 8}, "f64", 0.05, 0.2}, {"b", {4, 8}}},
      "%y = dgraph.softmax_grad %a, %b, dim = 1 : " + t);
  add("log_softmax_grad", {{"a", {4, 8}, "f64", -3, -1}, {"b", {4, 8}}},
      "%y = dgraph.log_softmax_grad %a, %b, dim = 1 : " + t);
  // Fused attention: [batch 4, heads 4, seq 8, head 4] (the sequence of the
  // queries splits in the forward unless causal; keys stay whole); f64
  // operands have an f64 log-sum-exp.
  const std::string qt = "tensor<4x4x8x4xf64>", lt = "tensor<4x4x8xf64>";
  const std::string qkv = "(" + qt + ", " + qt + ", " + qt;
  add("attention", {{"q", {4, 4, 8, 4}}, {"k", {4, 4, 8, 4}}, {"v", {4, 4, 8, 4}}},
      "%y0, %y1 = dgraph.attention %q, %k, %v {scale = 0.5 : f64} : " + qkv +
          ") -> (" + qt + ", " + lt + ")");
  add("attention_causal",
      {{"q", {4, 4, 8, 4}}, {"k", {4, 4, 8, 4}}, {"v", {4, 4, 8, 4}}},
      "%y0, %y1 = dgraph.attention %q, %k, %v {causal, scale = 0.5 : f64} : " +
          qkv + ") -> (" + qt + ", " + lt + ")");
  add("attention_mask",
      {{"q", {4, 4, 8, 4}}, {"k", {4, 4, 8, 4}}, {"v", {4, 4, 8, 4}},
       {"m", {4, 1, 8, 8}, "f64", -3, 0}},
      "%y0, %y1 = dgraph.attention %q, %k, %v mask %m {scale = 0.5 : f64} : " +
          qkv + ", tensor<4x1x8x8xf64>) -> (" + qt + ", " + lt + ")");
  add("attention_grad",
      {{"q", {4, 4, 8, 4}}, {"k", {4, 4, 8, 4}}, {"v", {4, 4, 8, 4}},
       {"o", {4, 4, 8, 4}}, {"l", {4, 4, 8}, "f64", 1, 2}, {"d", {4, 4, 8, 4}}},
      "%y0, %y1, %y2 = dgraph.attention_grad %q, %k, %v, %o, %l, %d {causal, "
      "scale = 0.5 : f64} : " + qkv + ", " + qt + ", " + lt + ", " + qt +
          ") -> (" + qt + ", " + qt + ", " + qt + ")");
  add("layer_norm", {{"a", {4, 4, 8}}, {"g", {8}}, {"b", {8}}},
      "%y, %m, %r = dgraph.layer_norm %a, %g, %b axis = 2, epsilon = 1.0e-05 : "
      "(tensor<4x4x8xf64>, tensor<8xf64>, tensor<8xf64>) -> (tensor<4x4x8xf64>, "
      "tensor<4x4xf64>, tensor<4x4xf64>)");
  add("rms_norm", {{"a", {4, 8}}, {"g", {8}}},
      "%y, %r = dgraph.rms_norm %a, %g axis = 1, epsilon = 1.0e-05 : (" + t +
          ", tensor<8xf64>) -> (" + t + ", tensor<4xf64>)");
  add("layer_norm_grad",
      {{"x", {4, 8}}, {"g", {8}}, {"m", {4}}, {"r", {4}, "f64", 0.5, 2}, {"d", {4, 8}}},
      "%y, %dg, %db = dgraph.layer_norm_grad %x, %g, %m, %r, %d axis = 1 : (" + t +
          ", tensor<8xf64>, tensor<4xf64>, tensor<4xf64>, " + t + ") -> (" + t +
          ", tensor<8xf64>, tensor<8xf64>)");
  add("rms_norm_grad",
      {{"x", {4, 8}}, {"g", {8}}, {"r", {4}, "f64", 0.5, 2}, {"d", {4, 8}}},
      "%y, %dg = dgraph.rms_norm_grad %x, %g, %r, %d axis = 1 : (" + t +
          ", tensor<8xf64>, tensor<4xf64>, " + t + ") -> (" + t + ", tensor<8xf64>)");
  add("cross_entropy", {{"a", {4, 8}, "f64", -2, 2}},
      "%t = dgraph.constant dense<[3, -100, 0, 7]> : tensor<4xi64>\n"
      "%y = dgraph.cross_entropy %a, %t : (" + t + ", tensor<4xi64>) -> tensor<4xf64>");
  add("cross_entropy_grad", {{"a", {4, 8}, "f64", -2, 2}, {"d", {4}}},
      "%t = dgraph.constant dense<[3, -100, 0, 7]> : tensor<4xi64>\n"
      "%y = dgraph.cross_entropy_grad %a, %t, %d : (" + t +
          ", tensor<4xi64>, tensor<4xf64>) -> " + t);
  add("dropout", {{"a", {4, 8}}},
      "%s = dgraph.constant dense<3> : tensor<i64>\n"
      "%y, %mask = dgraph.dropout %a, %s {ratio = 0.5 : f32, seed = 11} : (" + t +
          ", tensor<i64>) -> (" + t + ", tensor<4x8xi1>)");
  // A generator: every split of its result draws the whole tensor's block.
  for (const char *distribution : {"uniform", "normal"})
    add(std::string("random_") + distribution, {},
        "%s = dgraph.constant dense<3> : tensor<i64>\n"
        "%y = dgraph.random %s {distribution = \"" + std::string(distribution) +
            "\", shift = 0.5, scale = 2.0, seed = 11} : (tensor<i64>) -> " + t);

  // Optimizer steps.
  add("lr_schedule", {},
      "%s = dgraph.constant dense<3> : tensor<i64>\n"
      "%n = dgraph.constant dense<10> : tensor<i64>\n"
      "%y = dgraph.lr_schedule %s, %n {base_lr = 1.0e-02, min_lr = 0.0, warmup "
      "= 2, kind = \"cosine\"} : tensor<f32>");
  const std::string scalars =
      "%lr = dgraph.constant dense<0.01> : tensor<f32>\n"
      "%s = dgraph.constant dense<3> : tensor<i64>\n"
      "%k = dgraph.constant dense<0.5> : tensor<f32>\n";
  add("adamw",
      {{"p", {4, 8}}, {"g", {4, 8}}, {"m", {4, 8}}, {"v", {4, 8}, "f64", 0, 1}},
      scalars + "%y, %m2, %v2 = dgraph.adamw %p, %g, %m, %v, %lr, %s, %k {beta1 = "
                "0.9, beta2 = 0.999, epsilon = 1.0e-08, weight_decay = 0.1} : " + t);
  add("sgd", {{"p", {4, 8}}, {"g", {4, 8}}, {"b", {4, 8}}},
      scalars + "%y, %b2 = dgraph.sgd %p, %g, %b, %lr, %s, %k {momentum = 0.9, "
                "dampening = 0.0, weight_decay = 0.01, nesterov} : " + t);

  // Convolutions: batch, groups, channels per group; windows replicated.
  auto conv = [&](const std::string &name, const std::string &op,
                  std::vector<int64_t> a, std::vector<int64_t> b,
                  std::vector<int64_t> y, const std::string &window) {
    add(name, {{"a", a}, {"b", b}},
        "%y = dgraph." + op + " %a, %b " + window + " : (" + tensorType(a) +
            ", " + tensorType(b) + ") -> " + tensorType(y));
  };
  const std::string w1 = "strides = [1], dilations = [1], pad_low = [1], "
                         "pad_high = [1], groups = 1";
  const std::string w2 = "strides = [2, 1], dilations = [1, 1], pad_low = [1, "
                         "0], pad_high = [0, 1], groups = 2";
  conv("conv1d", "conv", {4, 4, 6}, {8, 4, 3}, {4, 8, 6}, w1);
  conv("conv2d_groups", "conv", {4, 8, 5, 4}, {8, 4, 2, 2}, {4, 8, 3, 4}, w2);
  conv("conv_input_grad1d", "conv_input_grad", {4, 8, 6}, {8, 4, 3}, {4, 4, 6}, w1);
  conv("conv_input_grad2d_groups", "conv_input_grad", {4, 8, 3, 4},
       {8, 4, 2, 2}, {4, 8, 5, 4}, w2);
  conv("conv_filter_grad1d", "conv_filter_grad", {4, 4, 6}, {4, 8, 6},
       {8, 4, 3}, w1);
  conv("conv_filter_grad2d_groups", "conv_filter_grad", {4, 8, 5, 4},
       {4, 8, 3, 4}, {8, 4, 2, 2}, w2);
  // Batch, group and instance normalization, pooling, resampling, pad
  // modes, N-d and elementwise indexing, top-k. A build without one of
  // these ops skips its case.
  const std::string x4 = "tensor<4x4x4xf64>", c4 = "tensor<4xf64>",
                    s4 = "tensor<2x4xf64>";
  auto statsRow = [&](const std::string &out, const std::string &stats,
                      int row) {
    return "%" + out + "_r = dgraph.slice %" + stats + ", start = [" +
           std::to_string(row) + ", 0], limit = [" + std::to_string(row + 1) +
           ", 4], stride = [1, 1] : (" + s4 + ") -> tensor<1x4xf64>\n%" + out +
           " = dgraph.reshape %" + out + "_r : (tensor<1x4xf64>) -> " + c4 + "\n";
  };
  const std::string bnArgs =
      "(" + x4 + ", " + c4 + ", " + c4 + ", " + c4 + ", " + c4 + ") -> " + x4;
  add("batch_norm_stats", {{"a", {4, 4, 4}}, {"s", {4}}},
      "%y = dgraph.batch_norm_stats %a, %s : (" + x4 + ", " + c4 + ") -> " + s4);
  add("batch_norm_inference",
      {{"a", {4, 4, 4}}, {"g", {4}}, {"b", {4}}, {"m", {4}}, {"v", {4}, "f64", 0.5, 1.5}},
      "%y = dgraph.batch_norm %a, %g, %b, %m, %v epsilon = 1.0e-03 : " + bnArgs);
  // Training: the statistics as the importer builds them (two passes).
  add("batch_norm_training",
      {{"a", {4, 4, 4}, "f64", -1, 2}, {"g", {4}, "f64", 0.5, 1.5}, {"b", {4}}},
      "%zero = dgraph.constant dense<0.0> : " + c4 + "\n" +
          "%inv = dgraph.constant dense<0.0625> : " + c4 + "\n" +
          "%s1 = dgraph.batch_norm_stats %a, %zero : (" + x4 + ", " + c4 +
          ") -> " + s4 + "\n" + statsRow("sum", "s1", 0) +
          "%mean = dgraph.mul %sum, %inv : " + c4 + "\n" +
          "%s2 = dgraph.batch_norm_stats %a, %mean : (" + x4 + ", " + c4 +
          ") -> " + s4 + "\n" + statsRow("m2", "s2", 1) +
          "%var = dgraph.mul %m2, %inv : " + c4 + "\n" +
          "%y = dgraph.batch_norm %a, %g, %b, %mean, %var epsilon = 1.0e-05 "
          "{training} : " + bnArgs);
  add("batch_norm_update", {{"rm", {4}}, {"rv", {4}}, {"m", {4}}, {"v", {4}}},
      "%y, %nv = dgraph.batch_norm_update %rm, %rv, %m, %v {momentum = 0.75, "
      "var_scale = 1.25} : " + c4);
  add("batch_norm_grad_stats", {{"a", {4, 4, 4}}, {"m", {4}}, {"d", {4, 4, 4}}},
      "%y = dgraph.batch_norm_grad_stats %a, %m, %d : (" + x4 + ", " + c4 +
          ", " + x4 + ") -> " + s4);
  add("batch_norm_grad",
      {{"a", {4, 4, 4}}, {"d", {4, 4, 4}}, {"g", {4}}, {"m", {4}},
       {"v", {4}, "f64", 0.5, 1.5}, {"s", {2, 4}}},
      "%y = dgraph.batch_norm_grad %a, %d, %g, %m, %v, %s epsilon = 1.0e-05, "
      "count = 16 : (" + x4 + ", " + x4 + ", " + c4 + ", " + c4 + ", " + c4 +
          ", " + s4 + ") -> " + x4);
  const std::string g8 = "tensor<4x8x4xf64>", p8 = "tensor<8xf64>";
  add("group_norm", {{"a", {4, 8, 4}}, {"g", {8}}, {"b", {8}}},
      "%y, %m, %r = dgraph.group_norm %a, %g, %b channels_per_group = 2, "
      "epsilon = 1.0e-05 : (" + g8 + ", " + p8 + ", " + p8 + ") -> (" + g8 +
          ", tensor<4x4xf64>, tensor<4x4xf64>)");
  add("instance_norm", {{"a", {4, 8, 4}}, {"g", {8}}, {"b", {8}}},
      "%y, %m, %r = dgraph.group_norm %a, %g, %b channels_per_group = 1, "
      "epsilon = 1.0e-05 : (" + g8 + ", " + p8 + ", " + p8 + ") -> (" + g8 +
          ", tensor<4x8xf64>, tensor<4x8xf64>)");
  add("group_norm_grad",
      {{"a", {4, 8, 4}}, {"g", {8}}, {"m", {4, 4}}, {"r", {4, 4}, "f64", 0.5, 2},
       {"d", {4, 8, 4}}},
      "%y, %dg, %db = dgraph.group_norm_grad %a, %g, %m, %r, %d "
      "channels_per_group = 2 : (" + g8 + ", " + p8 +
          ", tensor<4x4xf64>, tensor<4x4xf64>, " + g8 + ") -> (" + g8 + ", " +
          p8 + ", " + p8 + ")");
  const std::string window = "kernel = [3, 3], strides = [2, 2], dilations = "
                             "[1, 1], pad_low = [1, 1], pad_high = [1, 1]";
  const std::string px = "tensor<4x4x6x6xf64>", py = "tensor<4x4x3x3xf64>";
  add("max_pool", {{"a", {4, 4, 6, 6}}},
      "%y, %i = dgraph.max_pool %a " + window + " : (" + px + ") -> (" + py +
          ", tensor<4x4x3x3xi64>)");
  add("max_pool_1d", {{"a", {4, 8, 6}}},
      "%y, %i = dgraph.max_pool %a kernel = [2], strides = [2], dilations = "
      "[1], pad_low = [0], pad_high = [0] : (tensor<4x8x6xf64>) -> "
      "(tensor<4x8x3xf64>, tensor<4x8x3xi64>)");
  add("max_pool_grad", {{"d", {4, 4, 3, 3}}, {"i", {4, 4, 3, 3}, "i64", 0, 35}},
      "%y = dgraph.max_pool_grad %d, %i : (" + py +
          ", tensor<4x4x3x3xi64>) -> " + px);
  add("avg_pool", {{"a", {4, 4, 6, 6}}},
      "%y = dgraph.avg_pool %a " + window + " {count_include_pad} : (" + px +
          ") -> " + py);
  add("avg_pool_grad", {{"d", {4, 4, 3, 3}}},
      "%y = dgraph.avg_pool_grad %d " + window + " : (" + py + ") -> " + px);
  add("resize_linear", {{"a", {4, 4, 3}}},
      "%y = dgraph.resize %a scales = [1.0, 1.0, 2.0] {mode = \"linear\"} : "
      "(tensor<4x4x3xf64>) -> tensor<4x4x6xf64>");
  add("resize_nearest_down", {{"a", {4, 8, 4}}},
      "%y = dgraph.resize %a scales = [1.0, 0.5, 1.0] : (tensor<4x8x4xf64>) -> "
      "tensor<4x4x4xf64>");
  add("resize_grad", {{"a", {4, 4, 6}}},
      "%y = dgraph.resize_grad %a scales = [1.0, 1.0, 2.0] {mode = \"linear\"} "
      ": (tensor<4x4x6xf64>) -> tensor<4x4x3xf64>");
  // Grid points reach past the borders ([-1.2, 1.2]): every padding rule
  // and the clamps' zero gradients are exercised.
  const std::string gx = "tensor<4x4x3x5xf64>", gg = "tensor<4x4x4x2xf64>",
                    gy = "tensor<4x4x4x4xf64>";
  add("grid_sample_bilinear",
      {{"a", {4, 4, 3, 5}}, {"g", {4, 4, 4, 2}, "f64", -1.2, 1.2}},
      "%y = dgraph.grid_sample %a, %g : (" + gx + ", " + gg + ") -> " + gy);
  add("grid_sample_bicubic_reflection",
      {{"a", {4, 4, 3, 5}}, {"g", {4, 4, 4, 2}, "f64", -1.2, 1.2}},
      "%y = dgraph.grid_sample %a, %g {mode = \"bicubic\", padding_mode = "
      "\"reflection\", align_corners = true} : (" +
          gx + ", " + gg + ") -> " + gy);
  add("grid_sample_nearest_border",
      {{"a", {4, 4, 3, 5}}, {"g", {4, 4, 4, 2}, "f64", -1.2, 1.2}},
      "%y = dgraph.grid_sample %a, %g {mode = \"nearest\", padding_mode = "
      "\"border\"} : (" +
          gx + ", " + gg + ") -> " + gy);
  add("grid_sample_grad",
      {{"d", {4, 4, 4, 4}},
       {"a", {4, 4, 3, 5}},
       {"g", {4, 4, 4, 2}, "f64", -1.2, 1.2}},
      "%dx, %dg = dgraph.grid_sample_grad %d, %a, %g {padding_mode = "
      "\"border\"} : (" +
          gy + ", " + gx + ", " + gg + ") -> (" + gx + ", " + gg + ")");
  // A volume: trilinear, and its gradient.
  const std::string vx = "tensor<4x4x3x4x5xf64>", vg = "tensor<4x2x3x4x3xf64>",
                    vy = "tensor<4x4x2x3x4xf64>";
  add("grid_sample_3d",
      {{"a", {4, 4, 3, 4, 5}}, {"g", {4, 2, 3, 4, 3}, "f64", -1.2, 1.2}},
      "%y = dgraph.grid_sample %a, %g {padding_mode = \"reflection\"} : (" +
          vx + ", " + vg + ") -> " + vy);
  add("grid_sample_grad_3d",
      {{"d", {4, 4, 2, 3, 4}},
       {"a", {4, 4, 3, 4, 5}},
       {"g", {4, 2, 3, 4, 3}, "f64", -1.2, 1.2}},
      "%dx, %dg = dgraph.grid_sample_grad %d, %a, %g : (" + vy + ", " + vx +
          ", " + vg + ") -> (" + vx + ", " + vg + ")");
  // Regions anywhere in and past a 6x6 image (some of negative size),
  // their images drawn from the 4.
  const std::string rx = "tensor<4x4x6x6xf64>", rr = "tensor<4x4xf64>",
                    rb = "tensor<4xi64>", ry = "tensor<4x4x2x2xf64>";
  const std::string roiAttrs =
      "output_height = 2 : i64, output_width = 2 : i64, spatial_scale = "
      "1.0 : f64";
  add("roi_align_avg",
      {{"a", {4, 4, 6, 6}},
       {"r", {4, 4}, "f64", -1, 7},
       {"b", {4}, "i64", 0, 3}},
      "%y = dgraph.roi_align %a, %r, %b {" + roiAttrs +
          ", sampling_ratio = 0 : i64} : (" + rx + ", " + rr + ", " + rb +
          ") -> " + ry);
  add("roi_align_max",
      {{"a", {4, 4, 6, 6}},
       {"r", {4, 4}, "f64", -1, 7},
       {"b", {4}, "i64", 0, 3}},
      "%y = dgraph.roi_align %a, %r, %b {mode = \"max\", half_pixel = false, " +
          roiAttrs + ", sampling_ratio = 2 : i64} : (" + rx + ", " + rr + ", " +
          rb + ") -> " + ry);
  add("roi_align_grad",
      {{"d", {4, 4, 2, 2}},
       {"a", {4, 4, 6, 6}},
       {"r", {4, 4}, "f64", -1, 7},
       {"b", {4}, "i64", 0, 3}},
      "%dx = dgraph.roi_align_grad %d, %a, %r, %b {" + roiAttrs +
          ", sampling_ratio = 0 : i64} : (" + ry + ", " + rx + ", " + rr +
          ", " + rb + ") -> " + rx);
  for (const char *mode : {"edge", "reflect", "wrap"})
    add(std::string("pad_") + mode, {{"a", {4, 5}}},
        "%z = dgraph.constant dense<0.0> : tensor<f64>\n"
        "%y = dgraph.pad %a, %z, low = [0, 1], high = [0, 2] {mode = \"" +
            std::string(mode) + "\"} : (tensor<4x5xf64>, tensor<f64>) -> " + t);
  add("pad_grad", {{"a", {4, 8}}},
      "%y = dgraph.pad_grad %a, low = [0, 2], high = [0, 2] {mode = "
      "\"reflect\"} : (" + t + ") -> tensor<4x4xf64>");
  add("gather_nd", {{"a", {8, 4, 4}}, {"i", {4, 1}, "i64", 0, 7}},
      "%y = dgraph.gather_nd %a, %i batch_dims = 0 : (tensor<8x4x4xf64>, "
      "tensor<4x1xi64>) -> tensor<4x4x4xf64>");
  add("gather_nd_batch", {{"a", {4, 4, 8}}, {"i", {4, 4, 1}, "i64", 0, 3}},
      "%y = dgraph.gather_nd %a, %i batch_dims = 1 : (tensor<4x4x8xf64>, "
      "tensor<4x4x1xi64>) -> tensor<4x4x8xf64>");
  add("scatter_nd_add", {{"a", {8, 4}}, {"i", {4, 1}, "i64", 0, 7}, {"b", {4, 4}}},
      "%y = dgraph.scatter_nd %a, %i, %b batch_dims = 0 {reduction = \"add\"} : "
      "(tensor<8x4xf64>, tensor<4x1xi64>, tensor<4x4xf64>) -> tensor<8x4xf64>");
  add("scatter_nd_none", {{"a", {8, 4}}, {"b", {4, 4}}},
      "%i = dgraph.constant dense<[[1], [6], [3], [0]]> : tensor<4x1xi64>\n"
      "%y = dgraph.scatter_nd %a, %i, %b batch_dims = 0 {reduction = \"none\"} : "
      "(tensor<8x4xf64>, tensor<4x1xi64>, tensor<4x4xf64>) -> tensor<8x4xf64>");
  add("scatter_elements_add",
      {{"a", {4, 8}}, {"i", {4, 4}, "i64", 0, 7}, {"b", {4, 4}}},
      "%y = dgraph.scatter_elements %a, %i, %b axis = 1 {reduction = \"add\"} : (" +
          t + ", tensor<4x4xi64>, tensor<4x4xf64>) -> " + t);
  add("scatter_elements_none", {{"a", {4, 8}}, {"b", {4, 4}}},
      "%i = dgraph.constant dense<[[0, 1, 2, 3], [7, 6, 5, 4], [1, 3, 5, 7], "
      "[0, 2, 4, 6]]> : tensor<4x4xi64>\n"
      "%y = dgraph.scatter_elements %a, %i, %b axis = 1 {reduction = \"none\"} : (" +
          t + ", tensor<4x4xi64>, tensor<4x4xf64>) -> " + t);
  add("top_k", {{"a", {4, 8}}},
      "%y, %i = dgraph.top_k %a, k = 4, axis = 1 : (" + t +
          ") -> (tensor<4x4xf64>, tensor<4x4xi64>)");
  add("top_k_smallest", {{"a", {8, 4}}},
      "%y, %i = dgraph.top_k %a, k = 4, axis = 0 {largest = false} : "
      "(tensor<8x4xf64>) -> (tensor<4x4xf64>, tensor<4x4xi64>)");
  return out;
}
