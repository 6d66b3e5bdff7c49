//===- GraphConvOps.td - convolutions and their gradients --*- tablegen -*-===//
//
// N-d convolution (1, 2 or 3 spatial dimensions) in ONNX's NC[D]HW layout,
// and the two gradients its backward pass needs: the data gradient, which is
// also ONNX's ConvTranspose, and the filter gradient. The three ops share
// one window (strides, dilations, per-side padding, groups); each one's VJP
// is built from the other two.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_DIALECTS_GRAPH_IR_GRAPHCONVOPS_TD
#define DTCC_DIALECTS_GRAPH_IR_GRAPHCONVOPS_TD

/// The window attributes every convolution op carries, one entry per spatial
/// dimension (pad_low/pad_high: before/after it).
defvar Graph_ConvWindow = (ins DenseI64ArrayAttr:$strides,
                               DenseI64ArrayAttr:$dilations,
                               DenseI64ArrayAttr:$pad_low,
                               DenseI64ArrayAttr:$pad_high,
                               I64Attr:$groups);

/// A convolution op whose two operands are named `a` and `b`.
class Graph_ConvBase<string mnemonic, string a, string b,
                     list<Trait> traits = []>
    : Graph_Op<mnemonic, !listconcat(traits,
          [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure,
           DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>,
           DeclareOpInterfaceMethods<Graph_CostOpInterface>])> {
  let assemblyFormat = "$" # a # " `,` $" # b # [{
    `strides` `=` $strides `,` `dilations` `=` $dilations `,`
    `pad_low` `=` $pad_low `,` `pad_high` `=` $pad_high `,` `groups` `=` $groups
    attr-dict `:` functional-type(operands, $result)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The number of spatial dimensions (1, 2 or 3).
    int64_t getNumSpatialDims() {
      return ::llvm::cast<::mlir::RankedTensorType>(getResult().getType())
                 .getRank() - 2;
    }
  }];
}

def Graph_ConvOp : Graph_ConvBase<"conv", "input", "filter",
    [DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "N-d convolution (cross-correlation) with groups";
  let description = [{
    ONNX Conv without its bias: for an input `[N, C, X1..Xd]` and a filter
    `[O, C/groups, K1..Kd]` (d = 1, 2 or 3), channels are split into
    `groups` equal groups and output channel `o` of group `g = o / (O /
    groups)` reads only input channels `g * C/groups ..`:
    ```
    result[n, o, y] = sum over c < C/groups and k < K of
        filter[o, c, k] * input[n, g * C/groups + c, y * strides + k * dilations - pad_low]
    ```
    with input positions outside `[0, X)` reading zero. Spatial sizes are
    `Y = (X + pad_low + pad_high - ((K - 1) * dilations + 1)) / strides + 1`
    (rounded down: input elements past the last window are not read).
    `groups = C = O` is a depthwise convolution. Padding is per side, so
    ONNX's asymmetric pads and SAME auto-padding need no extra op.

    Sharding: the batch, the groups and the output channels of a group are
    parallel; the input channels of a group are a reduction (a split leaves
    partial sums); the spatial dimensions are replicated (there is no halo
    exchange, so a spatially split activation is gathered first).

    Example:
    ```mlir
    %y = dgraph.conv %x, %w strides = [2, 2], dilations = [1, 1],
        pad_low = [1, 1], pad_high = [0, 0], groups = 1
        : (tensor<8x3x32x32xf32>, tensor<16x3x3x3xf32>) -> tensor<8x16x16x16xf32>
    ```

    **Constraints:**
    - input and filter have the same float element type and rank 3, 4 or 5;
    - `strides`, `dilations`, `pad_low` and `pad_high` have one entry per
      spatial dimension; strides and dilations are >= 1, pads >= 0;
    - `groups >= 1` divides C and O, and the filter's dimension 1 is
      `C / groups`; every kernel dimension is >= 1;
    - each padded input dimension holds at least one dilated window:
      `X + pad_low + pad_high >= (K - 1) * dilations + 1`;
    - the result is `[N, O, Y1..Yd]` of the input's element type.
  }];
  let arguments = !con((ins Graph_FloatTensor:$input, Graph_FloatTensor:$filter),
                       Graph_ConvWindow);
  let results = (outs Graph_FloatTensor:$result);
  // Type inference checks everything.
  let hasVerifier = 0;
}

def Graph_ConvInputGradOp : Graph_ConvBase<"conv_input_grad", "grad", "filter"> {
  let summary = "Gradient of a convolution with respect to its input "
                "(transposed convolution)";
  let description = [{
    The adjoint of `dgraph.conv` in its input: given the gradient `grad`
    `[N, O, Y1..Yd]` of a convolution's result and its filter `[O, C/groups,
    K1..Kd]`, the gradient `[N, C, X1..Xd]` of its input, with the same
    window attributes as the forward op:
    ```
    result[n, g * C/groups + c, x] = sum over o of group g, k, y with
        x = y * strides + k * dilations - pad_low of grad[n, o, y] * filter[o, c, k]
    ```
    Input positions that no window reads (the leftover past the last window
    when `strides > 1`) get zero. The input's spatial sizes come from the
    result type, since several sizes give the same convolution output. This
    is ONNX ConvTranspose (whose filter `[C_in, C_out/groups, K..]` is this
    op's `filter`, and whose output_padding is leftover of the result).

    Sharding: batch and groups parallel, input channels of a group parallel,
    the output channels of a group a reduction, spatial dimensions
    replicated (no halo exchange).

    Example:
    ```mlir
    %dx = dgraph.conv_input_grad %dy, %w strides = [2, 2], dilations = [1, 1],
        pad_low = [1, 1], pad_high = [0, 0], groups = 1
        : (tensor<8x16x16x16xf32>, tensor<16x3x3x3xf32>) -> tensor<8x3x32x32xf32>
    ```

    **Constraints:**
    - `grad`, `filter` and the result have the same float element type and
      rank 3, 4 or 5;
    - the window attributes satisfy `dgraph.conv`'s constraints for an input
      of the result's type and this filter;
    - `dgraph.conv` of the result's type by this filter gives grad's type.
  }];
  let arguments = !con((ins Graph_FloatTensor:$grad, Graph_FloatTensor:$filter),
                       Graph_ConvWindow);
  let results = (outs Graph_FloatTensor:$result);
}

def Graph_ConvFilterGradOp : Graph_ConvBase<"conv_filter_grad", "input", "grad"> {
  let summary = "Gradient of a convolution with respect to its filter";
  let description = [{
    The adjoint of `dgraph.conv` in its filter: given the convolution's input
    `[N, C, X1..Xd]` and the gradient `grad` `[N, O, Y1..Yd]` of its result,
    the gradient `[O, C/groups, K1..Kd]` of its filter, with the same window
    attributes as the forward op:
    ```
    result[o, c, k] = sum over n, y of
        grad[n, o, y] * input[n, g * C/groups + c, y * strides + k * dilations - pad_low]
    ```
    (zero outside the input). The kernel sizes come from the result type.

    Sharding: the batch is a reduction (each rank's part of the batch gives
    a partial sum), groups and the channels on both sides parallel, spatial
    dimensions replicated (no halo exchange).

    Example:
    ```mlir
    %dw = dgraph.conv_filter_grad %x, %dy strides = [2, 2], dilations = [1, 1],
        pad_low = [1, 1], pad_high = [0, 0], groups = 1
        : (tensor<8x3x32x32xf32>, tensor<8x16x16x16xf32>) -> tensor<16x3x3x3xf32>
    ```

    **Constraints:**
    - `input`, `grad` and the result have the same float element type and
      rank 3, 4 or 5;
    - the window attributes satisfy `dgraph.conv`'s constraints for this
      input and a filter of the result's type;
    - `dgraph.conv` of the input by a filter of the result's type gives
      grad's type.
  }];
  let arguments = !con((ins Graph_FloatTensor:$input, Graph_FloatTensor:$grad),
                       Graph_ConvWindow);
  let results = (outs Graph_FloatTensor:$result);
}

#endif // DTCC_DIALECTS_GRAPH_IR_GRAPHCONVOPS_TD
