//===- GraphNormPoolOps.td - normalizations over channels, pooling -*- tablegen -*-===//
//
// Batch, group and instance normalization and max/average pooling over
// [N, C, spatial...] tensors, with their fused gradients.
//
// Batch normalization is split so that data parallelism needs no op of its
// own: the statistics ops sum over the batch and spatial dimensions (their
// sharding rules make those reductions, so a split batch leaves partial
// sums that the partitioner all-reduces), and the ops that normalize are
// per element. A training step computes the mean in one pass and the
// centred second moment about it in a second (both accumulated in double),
// so every device normalizes with the statistics of the whole batch.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_DIALECTS_GRAPH_IR_GRAPHNORMPOOLOPS_TD
#define DTCC_DIALECTS_GRAPH_IR_GRAPHNORMPOOLOPS_TD

//===----------------------------------------------------------------------===//
// Batch normalization
//===----------------------------------------------------------------------===//

def Graph_BatchNormStatsOp : Graph_Op<"batch_norm_stats",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure,
     DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "Per-channel sums of shifted values and of their squares";
  let description = [{
    For `x` of shape `[N, C, d...]` and a per-channel `shift`:
    `result[0, c] = sum(x[:, c, ...] - shift[c])` and
    `result[1, c] = sum((x[:, c, ...] - shift[c])^2)`, summed over the batch
    and spatial dimensions and accumulated in double. Batch normalization
    uses it twice: with a zero shift for the mean, then with the mean as the
    shift for the variance (the corrected two-pass algorithm:
    `var = (result[1] - result[0]^2 / n) / n`). Both sums are linear in the
    elements, so a batch split over devices leaves partial sums that one
    all-reduce of the `[2, C]` result completes.

    Example:
    ```mlir
    %s = dgraph.batch_norm_stats %x, %shift
        : (tensor<8x3x4x4xf32>, tensor<3xf32>) -> tensor<2x3xf32>
    ```

    **Constraints:**
    - `rank(x) >= 2`;
    - `shift` is `[C]` of x's element type;
    - the result is `[2, C]` of x's element type.
  }];
  let arguments = (ins Graph_FloatTensor:$operand, Graph_FloatTensor:$shift);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $operand `,` $shift attr-dict `:` functional-type(operands, $result)
  }];
}

def Graph_BatchNormOp : Graph_Op<"batch_norm",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure,
     DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>,
     DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "Normalizes each channel with given statistics";
  let description = [{
    For `x` of shape `[N, C, d...]`:
    `y = (x - mean[c]) / sqrt(var[c] + epsilon) * scale[c] + bias[c]`.

    Without `training`, `mean` and `var` are independent inputs (the
    running statistics of inference) and the VJP differentiates with
    respect to all five operands. With `training`, `mean` and `var` are x's
    own batch statistics (the biased variance, over every dimension but 1,
    from `dgraph.batch_norm_stats`): the op is then batch normalization in
    training mode, a function of `x`, `scale` and `bias` only, and its VJP is
    the full gradient through the statistics (PyTorch's
    `batch_norm_backward`); `mean` and `var` get no gradient.

    Example:
    ```mlir
    %y = dgraph.batch_norm %x, %g, %b, %mean, %var epsilon = 1.0e-05 {training}
        : (tensor<8x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>,
           tensor<3xf32>) -> tensor<8x3x4x4xf32>
    ```

    **Constraints:**
    - `rank(x) >= 2`; `epsilon >= 0`;
    - `scale`, `bias`, `mean` and `var` are `[C]` of x's element type;
    - `y` has x's type.
  }];
  let arguments = (ins Graph_FloatTensor:$operand, Graph_FloatTensor:$scale,
                       Graph_FloatTensor:$bias, Graph_FloatTensor:$mean,
                       Graph_FloatTensor:$var, F32Attr:$epsilon,
                       UnitAttr:$training);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $operand `,` $scale `,` $bias `,` $mean `,` $var `epsilon` `=` $epsilon
    attr-dict `:` functional-type(operands, $result)
  }];
}

def Graph_BatchNormUpdateOp : Graph_Op<"batch_norm_update",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure,
     DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>,
     AllTypesMatch<["running_mean", "running_var", "mean", "var",
                    "new_mean", "new_var"]>]> {
  let summary = "The running statistics of batch normalization after a batch";
  let description = [{
    ONNX's BatchNormalization update of the running statistics:
    ```
    new_mean = running_mean * momentum + mean * (1 - momentum)
    new_var  = running_var * momentum + var * var_scale * (1 - momentum)
    ```
    `var` is the batch's biased variance; `var_scale` is 1 for ONNX's
    definition and `n / (n - 1)` (the unbiased variance) for PyTorch's
    `BatchNorm`, which exports the same node (PyTorch's momentum `m` is
    ONNX's `1 - m`). Training stores the results back to the running
    statistics' variables; `dtcc-graph-autodiff` also uses this op to find
    them when it turns `@main` into inference (batch normalization with the
    running statistics).

    Example:
    ```mlir
    %m2, %v2 = dgraph.batch_norm_update %rm, %rv, %mean, %var
        {momentum = 0.9, var_scale = 1.0079365079365079} : tensor<3xf32>
    ```

    **Constraints:**
    - all operands and results have one rank-1 type;
    - `0 <= momentum <= 1`; `var_scale > 0`.
  }];
  let arguments = (ins Graph_FloatTensor:$running_mean,
                       Graph_FloatTensor:$running_var, Graph_FloatTensor:$mean,
                       Graph_FloatTensor:$var, F64Attr:$momentum,
                       F64Attr:$var_scale);
  let results = (outs Graph_FloatTensor:$new_mean, Graph_FloatTensor:$new_var);
  let assemblyFormat = [{
    $running_mean `,` $running_var `,` $mean `,` $var attr-dict `:`
    type($running_mean)
  }];
  let hasVerifier = 1;
}

def Graph_BatchNormGradStatsOp : Graph_Op<"batch_norm_grad_stats",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure,
     DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "Per-channel sums the gradient of batch normalization needs";
  let description = [{
    For `x` and `dy` of shape `[N, C, d...]`:
    `result[0, c] = sum(dy[:, c, ...])` and
    `result[1, c] = sum(dy[:, c, ...] * (x[:, c, ...] - mean[c]))`, over the
    batch and spatial dimensions, accumulated in double. They are the
    gradients of the bias and (times rstd) of the scale, and the two
    reductions in the gradient of x; like `batch_norm_stats`, a split batch
    leaves partial sums.

    Example:
    ```mlir
    %s = dgraph.batch_norm_grad_stats %x, %mean, %dy
        : (tensor<8x3x4x4xf32>, tensor<3xf32>, tensor<8x3x4x4xf32>) -> tensor<2x3xf32>
    ```

    **Constraints:**
    - `rank(x) >= 2`; `dy` has x's type;
    - `mean` is `[C]` of x's element type;
    - the result is `[2, C]` of x's element type.
  }];
  let arguments = (ins Graph_FloatTensor:$operand, Graph_FloatTensor:$mean,
                       Graph_FloatTensor:$dy);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $operand `,` $mean `,` $dy attr-dict `:` functional-type(operands, $result)
  }];
}

def Graph_BatchNormGradOp : Graph_Op<"batch_norm_grad",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure,
     DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "Gradient of training-mode batch normalization with respect to x";
  let description = [{
    With `r = 1 / sqrt(var + epsilon)` and `s` the (complete) result of
    `dgraph.batch_norm_grad_stats`:
    `dx = scale * r * (dy - s[0] / count - (x - mean) * r^2 * s[1] / count)`
    per element, `count` being the number of elements each channel's
    statistics summed (N times the spatial size of the whole batch, also
    when the batch is split over devices).

    Example:
    ```mlir
    %dx = dgraph.batch_norm_grad %x, %dy, %g, %mean, %var, %s
        epsilon = 1.0e-05, count = 128
        : (tensor<8x3x4x4xf32>, tensor<8x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>,
           tensor<3xf32>, tensor<2x3xf32>) -> tensor<8x3x4x4xf32>
    ```

    **Constraints:**
    - `rank(x) >= 2`; `dy` and `dx` have x's type; `epsilon >= 0`;
      `count >= 1`;
    - `scale`, `mean` and `var` are `[C]` and `stats` `[2, C]`, all of x's
      element type.
  }];
  let arguments = (ins Graph_FloatTensor:$operand, Graph_FloatTensor:$dy,
                       Graph_FloatTensor:$scale, Graph_FloatTensor:$mean,
                       Graph_FloatTensor:$var, Graph_FloatTensor:$stats,
                       F32Attr:$epsilon, I64Attr:$count);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $operand `,` $dy `,` $scale `,` $mean `,` $var `,` $stats `epsilon` `=`
    $epsilon `,` `count` `=` $count attr-dict `:`
    functional-type(operands, $result)
  }];
}

//===----------------------------------------------------------------------===//
// Group and instance normalization
//===----------------------------------------------------------------------===//

def Graph_GroupNormOp : Graph_Op<"group_norm",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure,
     DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>,
     DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "Normalizes groups of channels per sample, with a per-channel affine";
  let description = [{
    For `x` of shape `[N, C, d...]` with its `C` channels in consecutive
    groups of `channels_per_group` (`G = C / channels_per_group` groups):
    each (sample, group) block of `channels_per_group * d...` elements is
    normalized by its own mean and biased variance, then
    `y = (x - mean) * rstd * scale[c] + bias[c]` with
    `rstd = 1 / sqrt(var + epsilon)`. `channels_per_group = 1` is instance
    normalization, `channels_per_group = C` layer normalization over
    `[C, d...]` with per-channel parameters. Also returns `mean` and `rstd`
    (`[N, G]`), which the gradient reuses. Statistics accumulate in double.
    The group size, not the group count, is the attribute: it stays the same
    when the channels are split over devices by whole groups.

    Example:
    ```mlir
    %y, %mean, %rstd = dgraph.group_norm %x, %g, %b channels_per_group = 3,
        epsilon = 1.0e-05
        : (tensor<4x6x8x8xf32>, tensor<6xf32>, tensor<6xf32>)
        -> (tensor<4x6x8x8xf32>, tensor<4x2xf32>, tensor<4x2xf32>)
    ```

    **Constraints:**
    - `rank(x) >= 2`; `channels_per_group >= 1` divides `C`; `epsilon >= 0`;
    - `scale` and `bias` are `[C]` of x's element type;
    - `y` has x's type; `mean` and `rstd` are `[N, G]` of x's element type.
  }];
  let arguments = (ins Graph_FloatTensor:$operand, Graph_FloatTensor:$scale,
                       Graph_FloatTensor:$bias, I64Attr:$channels_per_group,
                       F32Attr:$epsilon);
  let results = (outs Graph_FloatTensor:$result, Graph_FloatTensor:$mean,
                      Graph_FloatTensor:$rstd);
  let assemblyFormat = [{
    $operand `,` $scale `,` $bias `channels_per_group` `=` $channels_per_group
    `,` `epsilon` `=` $epsilon
    attr-dict `:` functional-type(operands, results)
  }];  // PyTorch's export of nn.GroupNorm (an instance norm over [N, G, -1],
  // reshaped back, times the weight, plus the bias) fuses into one op.
  let hasCanonicalizer = 1;
}

def Graph_GroupNormGradOp : Graph_Op<"group_norm_grad",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure]> {
  let summary = "Gradient of group normalization";
  let description = [{
    From the forward input `x`, `scale` and the saved `mean` and `rstd`,
    computes `dx`, `dscale` and `dbias` for the output gradient `dy`. With
    `h = (x - mean) * rstd` and `g = dy * scale[c]` over a (sample, group)
    block: `dx = rstd * (g - avg(g) - h * avg(g * h))`;
    `dscale[c] = sum(dy * h)` and `dbias[c] = sum(dy)` over the batch and
    spatial dimensions.

    Example:
    ```mlir
    %dx, %dg, %db = dgraph.group_norm_grad %x, %g, %mean, %rstd, %dy
        channels_per_group = 3
        : (tensor<4x6x8x8xf32>, tensor<6xf32>, tensor<4x2xf32>, tensor<4x2xf32>,
           tensor<4x6x8x8xf32>) -> (tensor<4x6x8x8xf32>, tensor<6xf32>, tensor<6xf32>)
    ```

    **Constraints:**
    - `rank(x) >= 2`; `channels_per_group >= 1` divides `C`;
    - `dy` and `dx` have x's type; `scale`, `dscale` and `dbias` are `[C]`
      and `mean` and `rstd` `[N, C / channels_per_group]`, all of x's
      element type.
  }];
  let arguments = (ins Graph_FloatTensor:$operand, Graph_FloatTensor:$scale,
                       Graph_FloatTensor:$mean, Graph_FloatTensor:$rstd,
                       Graph_FloatTensor:$dy, I64Attr:$channels_per_group);
  let results = (outs Graph_FloatTensor:$dx, Graph_FloatTensor:$dscale,
                      Graph_FloatTensor:$dbias);
  let assemblyFormat = [{
    $operand `,` $scale `,` $mean `,` $rstd `,` $dy `channels_per_group` `=`
    $channels_per_group
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

defvar Graph_PoolWindowArgs = (ins DenseI64ArrayAttr:$kernel,
    DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$dilations,
    DenseI64ArrayAttr:$pad_low, DenseI64ArrayAttr:$pad_high,
    UnitAttr:$ceil_mode);

class Graph_PoolFormat<string operand> {
  string format = operand # [{
    `kernel` `=` $kernel `,` `strides` `=` $strides `,` `dilations` `=`
    $dilations `,` `pad_low` `=` $pad_low `,` `pad_high` `=` $pad_high
    attr-dict `:` functional-type(operands, results)
  }];
}

def Graph_MaxPoolOp : Graph_Op<"max_pool",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure,
     DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>,
     DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "Maximum over sliding windows, with the position of each maximum";
  let description = [{
    For `x` of shape `[N, C, d1, ..., dk]`, a window of `kernel[i]` taps
    `dilations[i]` apart along spatial dimension `i` slides `strides[i]` at
    a time over the input padded by `pad_low[i]` before and `pad_high[i]`
    after (padding never wins). Output size along dimension `i`:
    `floor((d + pad_low + pad_high - (kernel - 1) * dilation - 1) / stride) + 1`,
    or with `ceil_mode` the ceiling, less one when the last window would
    start in the high padding (PyTorch's rule). `indices` is the position of
    each maximum in its (sample, channel) plane, row-major over the spatial
    dimensions: the first maximum in window order, or the last NaN (as
    PyTorch); -1 for a window of padding only. The gradient adds each output
    gradient at its maximum's position, so overlapping windows sum.

    Example:
    ```mlir
    %y, %i = dgraph.max_pool %x kernel = [2, 2], strides = [2, 2],
        dilations = [1, 1], pad_low = [0, 0], pad_high = [0, 0]
        : (tensor<1x3x8x8xf32>) -> (tensor<1x3x4x4xf32>, tensor<1x3x4x4xi64>)
    ```

    **Constraints:**
    - `rank(x) >= 3`; `kernel`, `strides`, `dilations`, `pad_low` and
      `pad_high` have `rank(x) - 2` entries;
    - kernels, strides and dilations are >= 1, paddings >= 0;
    - every output size is >= 1;
    - `y` has x's element type and the output shape, `indices` is i64 of
      that shape.
  }];
  let arguments = !con((ins Graph_NumericTensor:$operand),
                       Graph_PoolWindowArgs);
  let results = (outs Graph_NumericTensor:$result,
                      StaticShapeTensorOf<[I64]>:$indices);
  let assemblyFormat = Graph_PoolFormat<"$operand">.format;
}

def Graph_MaxPoolGradOp : Graph_Op<"max_pool_grad",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure,
     AllShapesMatch<["dy", "indices"]>]> {
  let summary = "Gradient of max pooling: output gradients added at the maxima";
  let description = [{
    `dx` is zero except that `dy[n, c, o...]` is added at position
    `indices[n, c, o...]` of plane `(n, c)` (as `dgraph.max_pool` numbers
    it) for every output; negative indices (windows of padding only) add
    nothing, and an index past the plane is a run-time error.

    Example:
    ```mlir
    %dx = dgraph.max_pool_grad %dy, %i
        : (tensor<1x3x4x4xf32>, tensor<1x3x4x4xi64>) -> tensor<1x3x8x8xf32>
    ```

    **Constraints:**
    - `rank(dy) >= 3`; `indices` is i64 of dy's shape;
    - `dx` has dy's rank, element type and first two dimensions.
  }];
  let arguments = (ins Graph_FloatTensor:$dy, StaticShapeTensorOf<[I64]>:$indices);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $dy `,` $indices attr-dict `:` functional-type(operands, $result)
  }];
  let hasVerifier = 1;
}

def Graph_AvgPoolOp : Graph_Op<"avg_pool",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure,
     DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>,
     DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "Average over sliding windows";
  let description = [{
    The windows and output sizes of `dgraph.max_pool`; each output is the
    sum of its window's input elements divided by the number of taps that
    fall on the input, or with `count_include_pad` on the padded input
    (`pad_low`/`pad_high`, not the extra end that `ceil_mode` adds), as
    PyTorch's `avg_pool`.

    Example:
    ```mlir
    %y = dgraph.avg_pool %x kernel = [3, 3], strides = [2, 2],
        dilations = [1, 1], pad_low = [1, 1], pad_high = [1, 1] {count_include_pad}
        : (tensor<1x3x8x8xf32>) -> tensor<1x3x4x4xf32>
    ```

    **Constraints:**
    - the constraints of `dgraph.max_pool`;
    - `y` has x's element type and the output shape.
  }];
  let arguments = !con((ins Graph_FloatTensor:$operand),
                       Graph_PoolWindowArgs,
                       (ins UnitAttr:$count_include_pad));
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = Graph_PoolFormat<"$operand">.format;
}

def Graph_AvgPoolGradOp : Graph_Op<"avg_pool_grad",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure]> {
  let summary = "Gradient of average pooling";
  let description = [{
    Spreads each output gradient of `dgraph.avg_pool` (with the same window
    attributes) evenly over its window's taps on the input, divided by the
    same count; overlapping windows sum. The result type is the forward
    input's.

    Example:
    ```mlir
    %dx = dgraph.avg_pool_grad %dy kernel = [3, 3], strides = [2, 2],
        dilations = [1, 1], pad_low = [1, 1], pad_high = [1, 1] {count_include_pad}
        : (tensor<1x3x4x4xf32>) -> tensor<1x3x8x8xf32>
    ```

    **Constraints:**
    - the constraints of `dgraph.avg_pool` for an input of dx's type;
    - `dy` has the shape `dgraph.avg_pool` gives for that input.
  }];
  let arguments = !con((ins Graph_FloatTensor:$dy), Graph_PoolWindowArgs,
                       (ins UnitAttr:$count_include_pad));
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = Graph_PoolFormat<"$dy">.format;
  let hasVerifier = 1;
}

#endif // DTCC_DIALECTS_GRAPH_IR_GRAPHNORMPOOLOPS_TD
