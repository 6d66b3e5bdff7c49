//===- GraphTrainingOps.td - gradient and optimizer ops ----*- tablegen -*-===//
//
// Ops that autodiff and the optimizer passes create: fused gradients of the
// forward ops whose VJP would otherwise be many ops, dropout, random draws,
// learning-rate schedules and optimizer updates.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_DIALECTS_GRAPH_IR_GRAPHTRAININGOPS_TD
#define DTCC_DIALECTS_GRAPH_IR_GRAPHTRAININGOPS_TD

def Graph_ScalarF32 : 0DTensorOf<[F32]> {
  let builderCall = "::mlir::RankedTensorType::get({}, $_builder.getF32Type())";
}
def Graph_ScalarI64 : 0DTensorOf<[I64]> {
  let builderCall =
      "::mlir::RankedTensorType::get({}, $_builder.getIntegerType(64))";
}

def Graph_StopGradientOp : Graph_Op<"stop_gradient",
    [Pure, SameOperandsAndResultType, InferTypeOpInterface]> {
  let summary = "Its operand, through which no gradient flows";
  let description = [{
    The operand itself; reverse-mode autodiff treats the result as a
    constant (PyTorch's `detach()`): nothing behind it is differentiated
    through it, and a parameter reached only through it has no gradient
    path (it is not trained). The ONNX importer writes it in training
    imports where a gradient rule is not ONNX's arithmetic: quantization's
    straight-through estimator, its scales and zero points.
    dtcc-graph-autodiff replaces every stop_gradient by its operand once
    the backward pass is built, so no later pass meets it.

    Example:
    ```mlir
    %c = dgraph.stop_gradient %x : tensor<4x8xf32>
    ```

    **Constraints:**
    - operand and result have the same type.
  }];
  let arguments = (ins Graph_Tensor:$operand);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$operand attr-dict `:` type($result)";
}

class Graph_ActivationGradOp<string mnemonic, string doc>
    : Graph_Op<mnemonic, [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure, Elementwise, SameOperandsAndResultType,
                          InferTypeOpInterface]> {
  let summary = "Gradient of " # doc;
  let description = [{
    `dx = dy * f'(x)` for f = }] # doc # [{, element by element.

    Example:
    ```mlir
    %dx = dgraph.}] # mnemonic # [{ %x, %dy : tensor<4x8xf32>
    ```

    **Constraints:**
    - `x`, `dy` and the result have the same type.
  }];
  let arguments = (ins Graph_FloatTensor:$x, Graph_FloatTensor:$dy);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$x `,` $dy attr-dict `:` type($result)";
}

def Graph_GeluGradOp : Graph_ActivationGradOp<"gelu_grad", "GELU"> {
  let arguments = (ins Graph_FloatTensor:$x, Graph_FloatTensor:$dy,
                       DefaultValuedStrAttr<StrAttr, "none">:$approximate);
}
def Graph_SiluGradOp : Graph_ActivationGradOp<"silu_grad", "SiLU">;

class Graph_SoftmaxGradBase<string mnemonic, string doc>
    : Graph_Op<mnemonic, [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure, SameOperandsAndResultType, InferTypeOpInterface]> {
  let summary = "Gradient of " # doc # " from its output";
  let description = [{
    Given the forward output `y` and its gradient `dy` along `dim`:
    }] # doc # [{.

    Example:
    ```mlir
    %dx = dgraph.}] # mnemonic # [{ %y, %dy, dim = 1 : tensor<4x8xf32>
    ```

    **Constraints:**
    - `y`, `dy` and the result have the same type; `0 <= dim < rank`.
  }];
  let arguments = (ins Graph_FloatTensor:$y, Graph_FloatTensor:$dy, I64Attr:$dim);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$y `,` $dy `,` `dim` `=` $dim attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Graph_SoftmaxGradOp : Graph_SoftmaxGradBase<"softmax_grad",
    "softmax: `dx = y * (dy - sum(dy * y))`">;
def Graph_LogSoftmaxGradOp : Graph_SoftmaxGradBase<"log_softmax_grad",
    "log-softmax: `dx = dy - exp(y) * sum(dy)`">;

def Graph_AttentionOp : Graph_Op<"attention", [
    DeclareOpInterfaceMethods<Graph_ShardableOpInterface>,
    DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>,
    DeclareOpInterfaceMethods<Graph_CostOpInterface>, Pure]> {
  let summary = "Scaled dot-product attention without the score matrix";
  let description = [{
    `softmax(scale * Q·Kᵀ + mask) · V` along the keys, computed tile by tile
    (FlashAttention's online softmax): the `[..., Sq, Sk]` scores and
    probabilities are never materialized. With `causal`, query `i` sees
    keys `j <= i` only (the kernels skip the tiles above the diagonal).
    `mask`, when present, is added to the scaled scores; each of its
    dimensions is 1 (broadcast) or the scores'. Besides the output, the op
    returns each query row's log-sum-exp of its (scaled, masked) scores,
    in the kernels' accumulator type (f32, or f64 for f64 operands: the
    probabilities recomputed from an f32 one would carry f32's rounding,
    amplified by the scores' size, into an f64 gradient), which is all
    dgraph.attention_grad needs to recompute the probabilities. dtcc-graph-fuse-attention creates it from the exported
    MatMul -> scale -> mask -> Softmax -> MatMul core.

    Example:
    ```mlir
    %o, %lse = dgraph.attention %q, %k, %v {causal, scale = 0.25 : f64}
        : (tensor<2x4x64x16xf32>, tensor<2x4x64x16xf32>, tensor<2x4x64x16xf32>)
        -> (tensor<2x4x64x16xf32>, tensor<2x4x64xf32>)
    ```

    **Constraints:**
    - `query` is `[B..., Sq, D]`, `key` `[B..., Sk, D]`, `value`
      `[B..., Sk, Dv]` (rank >= 2, the same B... and element type);
    - `mask` has the scores' rank `[B..., Sq, Sk]`, each dimension 1 or the
      scores', and a float element type;
    - `causal` needs `Sq == Sk`;
    - `result` is `[B..., Sq, Dv]` of the query's element type, `logsumexp`
      `[B..., Sq]` of f32 (f64 for an f64 query).
  }];
  let arguments = (ins Graph_FloatTensor:$query, Graph_FloatTensor:$key,
                       Graph_FloatTensor:$value,
                       Optional<Graph_FloatTensor>:$mask, F64Attr:$scale,
                       UnitAttr:$causal);
  let results = (outs Graph_FloatTensor:$result, Graph_FloatTensor:$logsumexp);
  let assemblyFormat = [{
    $query `,` $key `,` $value (`mask` $mask^)? attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The logsumexp's type for a query of type `query` ([B..., Sq, D]):
    /// [B..., Sq] of f32, or f64 for an f64 query.
    static mlir::RankedTensorType logsumexpType(mlir::RankedTensorType query);
  }];
}

def Graph_AttentionGradOp : Graph_Op<"attention_grad", [
    DeclareOpInterfaceMethods<Graph_ShardableOpInterface>,
    DeclareOpInterfaceMethods<Graph_CostOpInterface>, Pure]> {
  let summary = "Gradient of dgraph.attention, recomputing the scores";
  let description = [{
    From the forward operands, its output `out`, the per-row `logsumexp`
    and the output gradient `dout`: `dquery`, `dkey` and `dvalue`.
    The probabilities are recomputed tile by tile as
    `exp(scale * Q·Kᵀ + mask - logsumexp)` (FlashAttention-2's backward);
    `dS = P * (dP - rowsum(dout * out))`. `scale`, `causal` and `mask` are
    the forward's; the mask gets no gradient.

    Example:
    ```mlir
    %dq, %dk, %dv = dgraph.attention_grad %q, %k, %v, %o, %lse, %do
        {causal, scale = 0.25 : f64}
        : (tensor<2x64x16xf32>, tensor<2x64x16xf32>, tensor<2x64x16xf32>,
           tensor<2x64x16xf32>, tensor<2x64xf32>, tensor<2x64x16xf32>)
        -> (tensor<2x64x16xf32>, tensor<2x64x16xf32>, tensor<2x64x16xf32>)
    ```

    **Constraints:**
    - `query`, `key`, `value`, `mask` and `causal` as dgraph.attention's;
      `out` and `dout` have its result's type, `logsumexp` its
      logsumexp's;
    - `dquery`, `dkey`, `dvalue` have the types of `query`, `key`, `value`.
  }];
  let arguments = (ins Graph_FloatTensor:$query, Graph_FloatTensor:$key,
                       Graph_FloatTensor:$value, Graph_FloatTensor:$out,
                       Graph_FloatTensor:$logsumexp, Graph_FloatTensor:$dout,
                       Optional<Graph_FloatTensor>:$mask, F64Attr:$scale,
                       UnitAttr:$causal);
  let results = (outs Graph_FloatTensor:$dquery, Graph_FloatTensor:$dkey,
                      Graph_FloatTensor:$dvalue);
  let assemblyFormat = [{
    $query `,` $key `,` $value `,` $out `,` $logsumexp `,` $dout
    (`mask` $mask^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Graph_LayerNormGradOp : Graph_Op<"layer_norm_grad", [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure]> {
  let summary = "Gradient of layer normalization";
  let description = [{
    From the forward input `x`, `scale` and the saved `mean` and `rstd`,
    computes `dx`, `dscale` and `dbias` for the output gradient `dy`.

    Example:
    ```mlir
    %dx, %dg, %db = dgraph.layer_norm_grad %x, %g, %mean, %rstd, %dy axis = 2
        : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<2x8xf32>, tensor<2x8xf32>,
           tensor<2x8x16xf32>) -> (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>)
    ```

    **Constraints:**
    - `dy` and `dx` have x's type; `dscale` and `dbias` have scale's type,
      which is `x[axis:]`; `mean` and `rstd` have shape `x[:axis]`.
  }];
  let arguments = (ins Graph_FloatTensor:$x, Graph_FloatTensor:$scale,
                       Graph_FloatTensor:$mean, Graph_FloatTensor:$rstd,
                       Graph_FloatTensor:$dy, I64Attr:$axis);
  let results = (outs Graph_FloatTensor:$dx, Graph_FloatTensor:$dscale,
                      Graph_FloatTensor:$dbias);
  let assemblyFormat = [{
    $x `,` $scale `,` $mean `,` $rstd `,` $dy `axis` `=` $axis attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Graph_RmsNormGradOp : Graph_Op<"rms_norm_grad", [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure]> {
  let summary = "Gradient of RMS normalization";
  let description = [{
    From the forward input `x`, `scale` and the saved `rstd`, computes `dx`
    and `dscale` for the output gradient `dy`.

    Example:
    ```mlir
    %dx, %dg = dgraph.rms_norm_grad %x, %g, %rstd, %dy axis = 2
        : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<2x8xf32>, tensor<2x8x16xf32>)
        -> (tensor<2x8x16xf32>, tensor<16xf32>)
    ```

    **Constraints:**
    - `dy` and `dx` have x's type; `dscale` has scale's type, which is
      `x[axis:]`; `rstd` has shape `x[:axis]`.
  }];
  let arguments = (ins Graph_FloatTensor:$x, Graph_FloatTensor:$scale,
                       Graph_FloatTensor:$rstd, Graph_FloatTensor:$dy,
                       I64Attr:$axis);
  let results = (outs Graph_FloatTensor:$dx, Graph_FloatTensor:$dscale);
  let assemblyFormat = [{
    $x `,` $scale `,` $rstd `,` $dy `axis` `=` $axis attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Graph_LayerNormParamGradOp : Graph_Op<"layer_norm_param_grad", [Pure]> {
  let summary = "Scale and bias gradients of layer normalization";
  let description = [{
    The `dscale` and `dbias` of `dgraph.layer_norm_grad`, without `dx`:
    `dscale = sum over the rows of dy * (x - mean) * rstd`, `dbias = sum
    over the rows of dy`. `dtcc-lower-fuse-regions` writes a
    layer_norm_grad as this op and the row region that computes `dx`; it
    exists only after the partitioning (no sharding rule).

    Example:
    ```mlir
    %dg, %db = dgraph.layer_norm_param_grad %x, %mean, %rstd, %dy axis = 2
        : (tensor<2x8x16xf32>, tensor<2x8xf32>, tensor<2x8xf32>,
           tensor<2x8x16xf32>) -> (tensor<16xf32>, tensor<16xf32>)
    ```

    **Constraints:**
    - `dy` has x's type; `dscale` and `dbias` have shape `x[axis:]` and
      x's element type; `mean` and `rstd` have shape `x[:axis]`.
  }];
  let arguments = (ins Graph_FloatTensor:$x, Graph_FloatTensor:$mean,
                       Graph_FloatTensor:$rstd, Graph_FloatTensor:$dy,
                       I64Attr:$axis);
  let results = (outs Graph_FloatTensor:$dscale, Graph_FloatTensor:$dbias);
  let assemblyFormat = [{
    $x `,` $mean `,` $rstd `,` $dy `axis` `=` $axis attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Graph_MatmulBiasOp : Graph_Op<"matmul_bias", [Pure]> {
  let summary = "A matrix product plus a bias along its last dimension";
  let description = [{
    `dgraph.matmul` of `lhs` and `rhs` plus `bias` (`[n]`, the product's
    last dimension) broadcast over every other dimension: a dense layer's
    `x W + b`, which a backend may add in the product's epilogue
    (cuBLASLt's BIAS). `dtcc-lower-matmul-epilogues` makes it from a
    `dgraph.matmul` whose one reader is a `dgraph.add` of the broadcast
    bias; it exists only after the partitioning (no sharding rule, no VJP).

    Example:
    ```mlir
    %y = dgraph.matmul_bias %x, %w, %b
        : (tensor<4x16x64xbf16>, tensor<64x192xbf16>, tensor<192xbf16>)
        -> tensor<4x16x192xbf16>
    ```

    **Constraints:**
    - the result is `dgraph.matmul`'s of `lhs` and `rhs` (with the same
      transpose flags), of float elements;
    - `bias` is `[n]` of the result's element type, `n` its last
      dimension.
  }];
  let arguments = (ins Graph_FloatTensor:$lhs, Graph_FloatTensor:$rhs,
                       Graph_FloatTensor:$bias, UnitAttr:$transpose_lhs,
                       UnitAttr:$transpose_rhs);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs `,` $bias attr-dict `:` functional-type(operands, $result)
  }];
  let hasVerifier = 1;
}

def Graph_MatmulBiasGradOp : Graph_Op<"matmul_bias_grad", [Pure]> {
  let summary = "A dense layer's weight gradient and its bias gradient";
  let description = [{
    `dgraph.matmul` of two matrices and the sums of one operand over its
    rows, which the product contracts: a dense layer's weight gradient
    `x^T dy` (`summed = 1`: `dy` is the rhs; `dy^T x` for a weight stored
    `[out, in]`, `summed = 0`: `dy` is the transposed lhs) and its bias
    gradient, the sum of `dy` over its rows, both read from `dy` at once.
    A backend may compute the sums in the product's epilogue (cuBLASLt's
    BGRADA/BGRADB). `dtcc-lower-matmul-epilogues` makes it from a
    `dgraph.matmul` and a `dgraph.reduce_sum` of the same `dy`; it exists
    only after the partitioning (no sharding rule, no VJP).

    Example:
    ```mlir
    %dw, %db = dgraph.matmul_bias_grad %x, %dy {transpose_lhs} summed = 1
        : (tensor<64x16xbf16>, tensor<64x32xbf16>)
        -> (tensor<16x32xbf16>, tensor<32xbf16>)
    ```

    **Constraints:**
    - `lhs` and `rhs` are matrices of one element type, the product
      `[m, n]` and the sums the summed operand's columns (`[m]` or `[n]`),
      of that element type;
    - `summed` is 0 or 1, and that operand's rows are the contracted
      dimension: a summed lhs is transposed (`[k, m]`), a summed rhs not
      (`[k, n]`).
  }];
  let arguments = (ins Graph_FloatTensor:$lhs, Graph_FloatTensor:$rhs,
                       UnitAttr:$transpose_lhs, UnitAttr:$transpose_rhs,
                       I64Attr:$summed);
  let results = (outs Graph_FloatTensor:$product, Graph_FloatTensor:$sums);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `summed` `=` $summed `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Graph_RmsNormParamGradOp : Graph_Op<"rms_norm_param_grad", [Pure]> {
  let summary = "Scale gradient of RMS normalization";
  let description = [{
    The `dscale` of `dgraph.rms_norm_grad`, without `dx`: `dscale = sum
    over the rows of dy * x * rstd`. Made by `dtcc-lower-fuse-regions` as
    `dgraph.layer_norm_param_grad` is.

    Example:
    ```mlir
    %dg = dgraph.rms_norm_param_grad %x, %rstd, %dy axis = 2
        : (tensor<2x8x16xf32>, tensor<2x8xf32>, tensor<2x8x16xf32>)
        -> tensor<16xf32>
    ```

    **Constraints:**
    - `dy` has x's type; `dscale` has shape `x[axis:]` and x's element
      type; `rstd` has shape `x[:axis]`.
  }];
  let arguments = (ins Graph_FloatTensor:$x, Graph_FloatTensor:$rstd,
                       Graph_FloatTensor:$dy, I64Attr:$axis);
  let results = (outs Graph_FloatTensor:$dscale);
  let assemblyFormat = [{
    $x `,` $rstd `,` $dy `axis` `=` $axis attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Graph_CrossEntropyGradOp : Graph_Op<"cross_entropy_grad", [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure]> {
  let summary = "Gradient of per-sample softmax cross-entropy";
  let description = [{
    `dlogits[i] = (softmax(logits[i]) - onehot(labels[i])) * dloss[i]`, and
    zero for rows whose label is `ignore_index`.

    Example:
    ```mlir
    %d = dgraph.cross_entropy_grad %logits, %labels, %dloss
        : (tensor<16x100xf32>, tensor<16xi64>, tensor<16xf32>) -> tensor<16x100xf32>
    ```

    Half-precision logits may take an f32 `dloss`: the result is then the
    f32 gradient of their f32 cast rounded once to the logits' type
    (dtcc-fold-narrow-reads folds those two casts into the op).

    **Constraints:**
    - the result has the logits' type; `dloss` is `[n]` of that element type
      (or f32 for f16 and bf16 logits).
  }];
  let arguments = (ins Graph_FloatTensor:$logits, Graph_IndexTensor:$labels,
                       Graph_FloatTensor:$dloss,
                       DefaultValuedAttr<I64Attr, "-100">:$ignore_index);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $logits `,` $labels `,` $dloss attr-dict `:` functional-type(operands, $result)
  }];
  let hasVerifier = 1;
}

def Graph_DropoutOp : Graph_Op<"dropout",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure, DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>]> {
  let summary = "Zeroes elements at random and rescales the rest";
  let description = [{
    Keeps element `i` when `u(seed, step, i) >= ratio` and scales it by
    `1 / (1 - ratio)`; `mask` says which were kept. `u` is a counter-based
    uniform variate (splitmix64 of the seed, the step and the element's
    index), so masks are reproducible and need no state.

    On a block of a split tensor (dtcc-shard-partition), `offsets` holds
    the block's first index along each dimension of the whole tensor, of
    shape `global_shape`: `i` is then the element's index in the whole
    tensor, and every rank draws the mask one device would.

    Example:
    ```mlir
    %y, %mask = dgraph.dropout %x, %step {ratio = 1.000000e-01 : f32, seed = 7 : i64}
        : (tensor<4x8xf32>, tensor<i64>) -> (tensor<4x8xf32>, tensor<4x8xi1>)
    %b, %bmask = dgraph.dropout %block, %step, %offsets
        {global_shape = array<i64: 4, 8>, ratio = 1.000000e-01 : f32, seed = 7 : i64}
        : (tensor<2x8xf32>, tensor<i64>, tensor<2xi64>) -> (tensor<2x8xf32>, tensor<2x8xi1>)
    ```

    **Constraints:**
    - `0 <= ratio < 1`; `y` has x's type and `mask` is i1 of x's shape.
    - `offsets` and `global_shape` come together: `offsets` is an i64
      vector with one entry per dimension of x, and `global_shape` has as
      many entries, none smaller than x's dimension.
  }];
  let arguments = (ins Graph_FloatTensor:$operand, Graph_ScalarI64:$step,
                       Optional<1DTensorOf<[I64]>>:$offsets,
                       F32Attr:$ratio, I64Attr:$seed,
                       OptionalAttr<DenseI64ArrayAttr>:$global_shape);
  let results = (outs Graph_FloatTensor:$result, Graph_BoolTensor:$mask);
  let assemblyFormat = [{
    $operand `,` $step (`,` $offsets^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Graph_RandomOp : Graph_Op<"random",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure]> {
  let summary = "A tensor of random numbers, uniform or normal";
  let description = [{
    `result[i] = shift + scale * x_i`, computed in f64 and rounded to the
    result's type, where `x_i` is drawn from the stream of (seed, step),
    `key = streamKey(seed, step)` (runtime/base/Random.h), as dropout's
    masks are:

    - "uniform": `x_i` in [0, 1), the top p bits of
      `splitmix64(key + i)` over 2^p, p the result type's significand
      (53 f64, 24 f32, 11 f16, 8 bf16), so that a [0, 1) draw stays
      below 1 in every type.
    - "normal": Box-Muller of two 53-bit uniforms u1, u2 of the counters
      `2i` and `2i + 1`: `x_i = sqrt(-2 ln(1 - u1)) cos(2 pi u2)`
      (1 - u1 >= 2^-53: no log of 0).

    `i` is the element's row-major index. Each element depends on (seed,
    step, i) alone: the op is pure, a recomputation draws the same tensor,
    and on a block of a split tensor (dtcc-shard-partition) `offsets`
    holds the block's first index along each dimension of the whole
    tensor, of shape `global_shape`: `i` is then the element's index in
    the whole tensor, and every rank draws what one device would.
    ONNX's RandomUniform(Like) and RandomNormal(Like) import to it
    (uniform: shift = low, scale = high - low; normal: shift = mean), and
    Bernoulli to a uniform draw compared with its probabilities.

    Example:
    ```mlir
    %z = dgraph.random %step {distribution = "normal", shift = 0.0,
        scale = 1.0, seed = 7} : (tensor<i64>) -> tensor<4x8xf32>
    %b = dgraph.random %step, %offsets {distribution = "uniform",
        global_shape = array<i64: 4, 8>, shift = -1.0, scale = 2.0, seed = 7}
        : (tensor<i64>, tensor<2xi64>) -> tensor<2x8xf32>
    ```

    **Constraints:**
    - `distribution` is "uniform" or "normal"; `shift` and `scale` are
      finite.
    - `offsets` and `global_shape` come together: `offsets` is an i64
      vector with one entry per dimension of the result, and
      `global_shape` has as many entries, none smaller than the result's
      dimension.
  }];
  let arguments = (ins Graph_ScalarI64:$step,
                       Optional<1DTensorOf<[I64]>>:$offsets,
                       StrAttr:$distribution, F64Attr:$shift, F64Attr:$scale,
                       I64Attr:$seed,
                       OptionalAttr<DenseI64ArrayAttr>:$global_shape);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $step (`,` $offsets^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Graph_LrScheduleOp : Graph_Op<"lr_schedule", [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure]> {
  let summary = "The learning rate at a step";
  let description = [{
    For the 0-based update count `step` of a run of `total` steps:
    during warmup (`step < warmup`) `base_lr * (step + 1) / warmup`; after
    it, with `p = (step - warmup) / max(1, total - warmup)`,
    "constant": `base_lr`; "linear": `min_lr + (base_lr - min_lr) * (1 - p)`;
    "cosine": `min_lr + (base_lr - min_lr) * (1 + cos(pi * p)) / 2`.

    Example:
    ```mlir
    %lr = dgraph.lr_schedule %step, %total {base_lr = 3.0e-04, min_lr = 0.0,
        warmup = 100, kind = "cosine"} : tensor<f32>
    ```

    **Constraints:**
    - `kind` is "constant", "linear" or "cosine"; `warmup >= 0`.
  }];
  let arguments = (ins Graph_ScalarI64:$step, Graph_ScalarI64:$total,
                       F64Attr:$base_lr, F64Attr:$min_lr, I64Attr:$warmup,
                       StrAttr:$kind);
  let results = (outs Graph_ScalarF32:$result);
  let assemblyFormat = "$step `,` $total attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Graph_GlobalSumSquaresOp : Graph_Op<"global_sum_squares", [Pure]> {
  let summary = "The sum of the squares of every element of its operands (a global norm's square)";
  let description = [{
    Each operand's `dgraph.sum_squares` over all its dimensions, the
    operands' sums added in operand order, in one op: the squared global
    norm that gradient clipping takes over every gradient.
    `dtcc-fold-global-norm` makes it from a chain of scalar adds of such
    sums, after sharding (it has no sharding rule and no VJP), so that a
    backend sums every gradient in one launch instead of a reduction and an
    add per gradient.

    Example:
    ```mlir
    %s = dgraph.global_sum_squares %g0, %g1
        : (tensor<4x8xbf16>, tensor<8xbf16>) -> tensor<f32>
    ```

    **Constraints:**
    - at least one operand; f16, bf16 and f32 operands give an f32 result,
      f64 operands (all of them) an f64 one; the result has rank 0.
  }];
  let arguments = (ins Variadic<Graph_FloatTensor>:$operands);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $operands attr-dict `:` functional-type($operands, $result)
  }];
  let hasVerifier = 1;
}

def Graph_AdamwOp : Graph_Op<"adamw", [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure,
    AllTypesMatch<["param", "m", "v", "new_param", "new_m", "new_v"]>,
    AllShapesMatch<["param", "grad"]>]> {
  let summary = "One AdamW update of a parameter";
  let description = [{
    PyTorch's AdamW, with the gradient scaled by `grad_scale` (global-norm
    clipping) and `step` the 1-based update count:
    ```
    g = grad * grad_scale
    param *= 1 - lr * weight_decay
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    param -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + epsilon)
    ```
    The runtime updates in place when the results are stored back to the
    variables they were loaded from. The gradient may be narrower than the
    parameter (a bf16 or f16 gradient of an f32 parameter: mixed precision,
    where dtcc-fold-narrow-reads reads it without its cast); it is
    widened exactly as it is read.

    Example:
    ```mlir
    %p2, %m2, %v2 = dgraph.adamw %p, %g, %m, %v, %lr, %step, %scale
        {beta1 = 0.9, beta2 = 0.999, epsilon = 1.0e-08, weight_decay = 0.1}
        : tensor<16x8xf32>
    %p3, %m3, %v3 = dgraph.adamw %p, %g16, %m, %v, %lr, %step, %scale
        {beta1 = 0.9, beta2 = 0.999, epsilon = 1.0e-08, weight_decay = 0.1}
        : tensor<16x8xf32>, tensor<16x8xbf16>
    ```

    **Constraints:**
    - `param`, `m`, `v` and the results have one type;
    - `grad` has their shape, and their element type or a narrower float
      type (bf16 or f16 for f32).
  }];
  let arguments = (ins Graph_FloatTensor:$param, Graph_FloatTensor:$grad,
                       Graph_FloatTensor:$m, Graph_FloatTensor:$v,
                       Graph_ScalarF32:$lr, Graph_ScalarI64:$step,
                       Graph_ScalarF32:$grad_scale,
                       F64Attr:$beta1, F64Attr:$beta2, F64Attr:$epsilon,
                       F64Attr:$weight_decay);
  let results = (outs Graph_FloatTensor:$new_param, Graph_FloatTensor:$new_m,
                      Graph_FloatTensor:$new_v);
  let assemblyFormat = [{
    $param `,` $grad `,` $m `,` $v `,` $lr `,` $step `,` $grad_scale attr-dict
    `:` type($param) `` custom<NarrowGradType>(type($grad), ref(type($param)))
  }];
  let hasVerifier = 1;
}

def Graph_SgdOp : Graph_Op<"sgd", [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure,
    AllTypesMatch<["param", "grad", "buf", "new_param", "new_buf"]>]> {
  let summary = "One SGD update of a parameter, with momentum";
  let description = [{
    PyTorch's SGD, with the gradient scaled by `grad_scale` and `step` the
    1-based update count:
    ```
    d = grad * grad_scale + weight_decay * param
    buf = step == 1 ? d : momentum * buf + (1 - dampening) * d
    d = nesterov ? d + momentum * buf : buf      (d itself when momentum = 0)
    param -= lr * d
    ```

    Example:
    ```mlir
    %p2, %b2 = dgraph.sgd %p, %g, %b, %lr, %step, %scale
        {momentum = 0.9, dampening = 0.0, weight_decay = 0.0} : tensor<16x8xf32>
    ```

    **Constraints:**
    - `param`, `grad`, `buf` and the results have one type.
  }];
  let arguments = (ins Graph_FloatTensor:$param, Graph_FloatTensor:$grad,
                       Graph_FloatTensor:$buf, Graph_ScalarF32:$lr,
                       Graph_ScalarI64:$step, Graph_ScalarF32:$grad_scale,
                       F64Attr:$momentum, F64Attr:$dampening,
                       F64Attr:$weight_decay, UnitAttr:$nesterov);
  let results = (outs Graph_FloatTensor:$new_param, Graph_FloatTensor:$new_buf);
  let assemblyFormat = [{
    $param `,` $grad `,` $buf `,` $lr `,` $step `,` $grad_scale attr-dict
    `:` type($param)
  }];
}

#endif // DTCC_DIALECTS_GRAPH_IR_GRAPHTRAININGOPS_TD
