//===- GraphIndexingOps.td - resampling, N-d indexing, top-k -*- tablegen -*-===//
//
// The tensor ops of vision, audio and recommender training graphs that read
// or write at computed positions: resize (and its adjoint), grid_sample
// (and its gradient), roi_align (and its gradient), the adjoint of pad's
// edge/reflect/wrap modes,
// gather_nd/scatter_nd, scatter_elements and top_k. Verifiers, type
// inference, VJP and sharding rules are in GraphIndexingOps.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_DIALECTS_GRAPH_IR_GRAPHINDEXINGOPS_TD
#define DTCC_DIALECTS_GRAPH_IR_GRAPHINDEXINGOPS_TD

//===----------------------------------------------------------------------===//
// Resampling
//===----------------------------------------------------------------------===//

/// The interpolation attributes of resize and resize_grad (ONNX Resize-19).
defvar Graph_ResizeAttrs = (ins
    DefaultValuedStrAttr<StrAttr, "nearest">:$mode,
    DefaultValuedStrAttr<StrAttr, "half_pixel">:$coordinate_transformation_mode,
    DefaultValuedStrAttr<StrAttr, "round_prefer_floor">:$nearest_mode,
    DefaultValuedAttr<F64Attr, "-0.75">:$cubic_coeff_a,
    UnitAttr:$exclude_outside,
    DefaultValuedAttr<F64Attr, "0.0">:$extrapolation_value,
    UnitAttr:$antialias,
    DenseF64ArrayAttr:$scales,
    OptionalAttr<DenseF64ArrayAttr>:$roi);

def Graph_ResizeOp : Graph_Op<"resize",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure,
     DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>]> {
  let summary = "Resamples a tensor by nearest, linear or cubic interpolation";
  let description = [{
    ONNX Resize (opsets 10 to 19) on every dimension at once. Each
    dimension `d` is resampled on its own (the interpolation is separable):
    result index `x` maps to the operand coordinate
    `x_original = f(x, scales[d], dim(d), result dim(d))` by
    `coordinate_transformation_mode` (`half_pixel`, `half_pixel_symmetric`,
    `pytorch_half_pixel`, `align_corners`, `asymmetric`,
    `tf_half_pixel_for_nn`, `tf_crop_and_resize` with `roi`), where, as in
    ONNX's reference, the resized length is `scales[d] * dim(d)`. Then:

    - `nearest`: the operand element that `nearest_mode`
      (`round_prefer_floor`, `round_prefer_ceil`, `floor`, `ceil`) picks;
    - `linear`: the two nearest operand elements weighted by distance
      (bilinear, trilinear, ... over several dimensions);
    - `cubic`: the four nearest with Keys' kernel of parameter
      `cubic_coeff_a`.

    Positions outside the operand repeat its edge; with `exclude_outside`
    they get no weight and the others are renormalized. With `antialias`
    (linear and cubic) a dimension that shrinks (`scales[d] < 1`) uses the
    kernel stretched by `1 / scales[d]`. With `tf_crop_and_resize`, a result
    element whose coordinate falls outside the operand in any dimension is
    `extrapolation_value`. A dimension whose scale is 1 and whose size does
    not change is untouched.

    Example:
    ```mlir
    %y = dgraph.resize %x scales = [1.0, 1.0, 2.0, 2.0] {mode = "linear"}
        : (tensor<1x3x8x8xf32>) -> tensor<1x3x16x16xf32>
    ```

    **Constraints:**
    - the result has the operand's rank and element type;
    - `scales` has one positive entry per dimension;
    - `mode` is "nearest", "linear" or "cubic"; "linear" and "cubic" need a
      floating-point element type;
    - `coordinate_transformation_mode` and `nearest_mode` are one of the
      values above;
    - `roi` is present exactly with `tf_crop_and_resize` and has
      `2 * rank` entries (starts, then ends);
    - a result dimension is empty exactly where the operand's is.
  }];
  let arguments = !con((ins Graph_Tensor:$operand), Graph_ResizeAttrs);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = [{
    $operand `scales` `=` $scales attr-dict `:` functional-type($operand, $result)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Whether dimension `d` is untouched (same size, identity coordinates).
    bool isIdentityDim(int64_t d);
  }];
}

def Graph_ResizeGradOp : Graph_Op<"resize_grad",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure,
     DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>]> {
  let summary = "The adjoint of resize: accumulates into the source positions";
  let description = [{
    The transpose of `dgraph.resize` with the same attributes: `grad` has
    the resize's result shape and the result its operand's shape. Every
    element of `grad` adds, with its interpolation weight, into each
    operand position the resize read it from; elements that took
    `extrapolation_value` add nothing. Each result element is computed by
    one thread from the list of positions that read it, so the sums do not
    depend on scheduling.

    Example:
    ```mlir
    %dx = dgraph.resize_grad %dy scales = [1.0, 1.0, 2.0, 2.0] {mode = "linear"}
        : (tensor<1x3x16x16xf32>) -> tensor<1x3x8x8xf32>
    ```

    **Constraints:**
    - the same as `dgraph.resize` with `grad` as its result and the result
      as its operand;
    - the element type is floating point.
  }];
  let arguments = !con((ins Graph_FloatTensor:$grad), Graph_ResizeAttrs);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `scales` `=` $scales attr-dict `:` functional-type($grad, $result)
  }];
  let hasVerifier = 1;
}

/// The attributes of grid_sample and grid_sample_grad (ONNX GridSample-16).
defvar Graph_GridSampleAttrs = (ins
    DefaultValuedStrAttr<StrAttr, "bilinear">:$mode,
    DefaultValuedStrAttr<StrAttr, "zeros">:$padding_mode,
    DefaultValuedAttr<BoolAttr, "false">:$align_corners);

def Graph_GridSampleOp : Graph_Op<"grid_sample",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure,
     DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>]> {
  let summary = "Samples an image at the positions of a grid";
  let description = [{
    ONNX GridSample (opsets 16 and 20) and PyTorch's `grid_sample`, in 1
    to 3 spatial dimensions: `operand` is [N, C, H, W] (2-D; [N, C, W]
    1-D, [N, C, D, H, W] 3-D), `grid` [N, H_out, W_out, 2] ([N, W_out, 1],
    [N, D_out, H_out, W_out, 3]) holds (x, y (, z)) positions normalized
    to [-1, 1] (x along the last dimension; -1 the first pixel's centre
    with `align_corners`, its outer edge without), and the result
    [N, C, H_out, W_out] (the grid's output positions) holds every channel
    of sample n at each grid position. A position is unnormalized to pixel
    coordinates, then `padding_mode` places it: `zeros` reads 0 outside
    the image, `border` clamps it to the image, `reflection` reflects it at
    the borders (the pixel centres with `align_corners`, the outer edges
    without) and clamps. `mode` then reads:

    - `bilinear`: the 2 neighbours per axis weighted by distance (the 4 of
      bilinear, the 8 of trilinear sampling);
    - `nearest`: the nearest pixel (halves round to even);
    - `bicubic`: the 4 neighbours per axis with Keys' kernel (A = -0.75),
      each tap placed by `padding_mode` on its own (4x4 in 2-D; 1-D and
      3-D as ONNX's reference extends it).

    Both operands are differentiable: the gradient of the grid is that of
    the interpolation weights (zero for `nearest`).

    Example:
    ```mlir
    %y = dgraph.grid_sample %x, %grid {padding_mode = "border"}
        : (tensor<2x3x8x8xf32>, tensor<2x4x4x2xf32>) -> tensor<2x3x4x4xf32>
    ```

    **Constraints:**
    - `operand` has rank r + 2 for r = 1, 2 or 3 spatial dimensions, and
      `grid` has rank r + 2 with last dimension r;
    - `operand`, `grid` and the result have one floating-point element
      type;
    - `grid`'s first dimension is `operand`'s (N);
    - the result is [N, C, out...] with C from `operand` and the output
      positions from `grid`;
    - `mode` is "bilinear", "nearest" or "bicubic"; `padding_mode` is
      "zeros", "border" or "reflection".
  }];
  let arguments = !con((ins Graph_FloatTensor:$operand,
                            Graph_FloatTensor:$grid),
                       Graph_GridSampleAttrs);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $operand `,` $grid attr-dict `:` functional-type(operands, $result)
  }];
  let hasVerifier = 1;
}

def Graph_GridSampleGradOp : Graph_Op<"grid_sample_grad",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure]> {
  let summary = "Gradient of grid_sample for its operand and its grid";
  let description = [{
    From the result's gradient `dy` [N, C, out...], the forward `operand`
    [N, C, spatial...] and `grid` [N, out..., r] (same
    attributes as `dgraph.grid_sample`): `doperand` adds each element of
    `dy` into the pixels it was read from, with their interpolation
    weights; `dgrid` is the derivative of the weights (bilinear, bicubic)
    times the pixels read, summed over the channels, chained through the
    unnormalization and the border clamp or reflection (zero for
    `nearest`, and where a clamp is active). As PyTorch's
    grid_sampler_2d_backward and grid_sampler_3d_backward.

    Example:
    ```mlir
    %dx, %dgrid = dgraph.grid_sample_grad %dy, %x, %grid {mode = "bicubic"}
        : (tensor<2x3x4x4xf32>, tensor<2x3x8x8xf32>, tensor<2x4x4x2xf32>)
        -> (tensor<2x3x8x8xf32>, tensor<2x4x4x2xf32>)
    ```

    **Constraints:**
    - `operand`, `grid` and `dy` as the operands and result of
      `dgraph.grid_sample`;
    - `doperand` has the type of `operand`, `dgrid` that of `grid`.
  }];
  let arguments = !con((ins Graph_FloatTensor:$dy, Graph_FloatTensor:$operand,
                            Graph_FloatTensor:$grid),
                       Graph_GridSampleAttrs);
  let results = (outs Graph_FloatTensor:$doperand, Graph_FloatTensor:$dgrid);
  let assemblyFormat = [{
    $dy `,` $operand `,` $grid attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

/// The attributes of roi_align and roi_align_grad (ONNX RoiAlign-16).
defvar Graph_RoiAlignAttrs = (ins
    DefaultValuedStrAttr<StrAttr, "avg">:$mode,
    I64Attr:$output_height,
    I64Attr:$output_width,
    I64Attr:$sampling_ratio,
    F64Attr:$spatial_scale,
    DefaultValuedAttr<BoolAttr, "true">:$half_pixel);

def Graph_RoiAlignOp : Graph_Op<"roi_align",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure,
     DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>]> {
  let summary = "Pools regions of interest of an image by bilinear samples";
  let description = [{
    ONNX RoiAlign (opsets 10 and 16; torchvision's `roi_align`): region r
    of `rois` [R, 4] (x1, y1, x2, y2, scaled by `spatial_scale`; shifted by
    half a pixel with `half_pixel`, else at least one pixel wide and high)
    of image `batch_indices`[r] of `operand` [N, C, H, W] is cut into
    `output_height` x `output_width` bins; each bin is sampled on a grid
    of `sampling_ratio`^2 points (0: ceil(region size / bins) per axis,
    decided at run time), each point read bilinearly from its 4 neighbours
    (nothing beyond a pixel outside the image, clamped to the border
    inside that), and the bin holds their average (`avg`) or the largest
    weighted neighbour of any of them (`max`, as ONNX's reference and ONNX
    Runtime compute it). The result is [R, C, output_height, output_width].

    Only `operand` is differentiable: the regions and their indices get no
    gradient (torchvision's neither).

    Example:
    ```mlir
    %y = dgraph.roi_align %x, %rois, %idx {output_height = 2 : i64,
        output_width = 2 : i64, sampling_ratio = 0 : i64,
        spatial_scale = 0.25 : f64}
        : (tensor<2x3x8x8xf32>, tensor<5x4xf32>, tensor<5xi64>)
        -> tensor<5x3x2x2xf32>
    ```

    **Constraints:**
    - `operand` has rank 4, `rois` is [R, 4] of its element type and
      `batch_indices` [R] of i64;
    - the result is [R, C, output_height, output_width];
    - `output_height`, `output_width` >= 1, `sampling_ratio` >= 0; `mode`
      is "avg" or "max".
  }];
  let arguments = !con((ins Graph_FloatTensor:$operand,
                            Graph_FloatTensor:$rois,
                            StaticShapeTensorOf<[I64]>:$batch_indices),
                       Graph_RoiAlignAttrs);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $operand `,` $rois `,` $batch_indices attr-dict `:`
    functional-type(operands, $result)
  }];
  let hasVerifier = 1;
}

def Graph_RoiAlignGradOp : Graph_Op<"roi_align_grad",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure]> {
  let summary = "Gradient of roi_align for its operand";
  let description = [{
    From the result's gradient `dy` [R, C, output_height, output_width],
    the forward `operand`, `rois` and `batch_indices` (same attributes as
    `dgraph.roi_align`): `doperand` adds each element of `dy` into the
    pixels its bin read, with their bilinear weights over the bin's sample
    count (`avg`), or into the one pixel whose weighted value won (`max`).

    Example:
    ```mlir
    %dx = dgraph.roi_align_grad %dy, %x, %rois, %idx {output_height = 2 : i64,
        output_width = 2 : i64, sampling_ratio = 2 : i64,
        spatial_scale = 1.0 : f64}
        : (tensor<5x3x2x2xf32>, tensor<2x3x8x8xf32>, tensor<5x4xf32>,
           tensor<5xi64>) -> tensor<2x3x8x8xf32>
    ```

    **Constraints:**
    - `operand`, `rois`, `batch_indices` and `dy` as the operands and
      result of `dgraph.roi_align`;
    - `doperand` has the type of `operand`.
  }];
  let arguments = !con((ins Graph_FloatTensor:$dy, Graph_FloatTensor:$operand,
                            Graph_FloatTensor:$rois,
                            StaticShapeTensorOf<[I64]>:$batch_indices),
                       Graph_RoiAlignAttrs);
  let results = (outs Graph_FloatTensor:$doperand);
  let assemblyFormat = [{
    $dy `,` $operand `,` $rois `,` $batch_indices attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Graph_PadGradOp : Graph_Op<"pad_grad",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure,
     DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>]> {
  let summary = "The adjoint of an edge, reflect or wrap pad";
  let description = [{
    The transpose of `dgraph.pad` in mode `edge`, `reflect` or `wrap`:
    every element of `grad` (the pad's result shape) adds into the operand
    position it was copied from, so border positions collect the replicated,
    mirrored or wrapped copies. Each result element sums its copies in a
    fixed order.

    Example:
    ```mlir
    %dx = dgraph.pad_grad %dy, low = [0, 2], high = [0, 2] {mode = "reflect"}
        : (tensor<2x7xf32>) -> tensor<2x3xf32>
    ```

    **Constraints:**
    - `mode` is "edge", "reflect" or "wrap";
    - `low` and `high` have one entry per dimension;
    - `grad` has the element type of the result and the shape
      `low[d] + dim(d) + high[d]` in every dimension `d`;
    - a dimension that is padded (`low[d] > 0` or `high[d] > 0`) is not
      empty;
    - the element type is floating point.
  }];
  let arguments = (ins Graph_FloatTensor:$grad, DenseI64ArrayAttr:$low,
                       DenseI64ArrayAttr:$high, StrAttr:$mode);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `,` `low` `=` $low `,` `high` `=` $high attr-dict `:`
    functional-type($grad, $result)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// N-d indexing
//===----------------------------------------------------------------------===//

def Graph_GatherNdOp : Graph_Op<"gather_nd",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure,
     DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>,
     DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "Gathers slices at N-d index tuples (ONNX GatherND)";
  let description = [{
    With `b = batch_dims` and `k` the last dimension of `indices`:
    `result[B.., I..] = operand[B.., indices[B.., I.., 0..k-1], ...]`: the
    first `b` dimensions of operand and indices are batch dimensions, each
    index tuple selects a slice of the operand's dimensions from `b + k`.
    Negative indices count from the end; one out of range is a run-time
    error naming the node.

    Example:
    ```mlir
    %g = dgraph.gather_nd %x, %idx batch_dims = 0
        : (tensor<4x5x6xf32>, tensor<3x2xi64>) -> tensor<3x6xf32>
    ```

    **Constraints:**
    - `indices` has rank >= 1 and `1 <= k <= rank(operand) - b`;
    - `0 <= b < rank(indices)` and the first `b` dimensions of operand and
      indices agree;
    - the result has shape `indices[:-1] + operand[b+k:]` and the operand's
      element type.
  }];
  let arguments = (ins Graph_Tensor:$operand, Graph_IndexTensor:$indices,
                       DefaultValuedAttr<I64Attr, "0">:$batch_dims);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = [{
    $operand `,` $indices `batch_dims` `=` $batch_dims attr-dict `:`
    functional-type(operands, $result)
  }];
}

def Graph_ScatterNdOp : Graph_Op<"scatter_nd",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure,
     DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>,
     AllTypesMatch<["operand", "result"]>]> {
  let summary = "Writes slices at N-d index tuples (ONNX ScatterND)";
  let description = [{
    The result is `operand` with each slice
    `result[B.., indices[B.., I.., :], ...]` replaced by (`reduction` =
    "none") or combined with ("add", "mul", "max", "min")
    `updates[B.., I.., ...]`, in the order of the index tuples: with
    duplicate tuples and "none" the last one wins. `batch_dims` works as in
    `dgraph.gather_nd` (ONNX ScatterND has none; gather_nd's gradient uses
    it). Negative indices count from the end; one out of range is a
    run-time error. The CUDA kernel applies each position's updates in
    index order, so results are reproducible.

    Example:
    ```mlir
    %s = dgraph.scatter_nd %x, %idx, %upd batch_dims = 0 {reduction = "add"}
        : (tensor<4x5xf32>, tensor<3x1xi64>, tensor<3x5xf32>) -> tensor<4x5xf32>
    ```

    **Constraints:**
    - `indices` has rank >= 1, `1 <= k <= rank(operand) - b` with `k` its
      last dimension, `0 <= b < rank(indices)`;
    - the first `b` dimensions of operand and indices agree;
    - `updates` has shape `indices[:-1] + operand[b+k:]` and the operand's
      element type; the result has the operand's type;
    - `reduction` is "none", "add", "mul", "max" or "min"; all but "none"
      need a numeric element type.
  }];
  let arguments = (ins Graph_Tensor:$operand, Graph_IndexTensor:$indices,
                       Graph_Tensor:$updates,
                       DefaultValuedAttr<I64Attr, "0">:$batch_dims,
                       DefaultValuedStrAttr<StrAttr, "none">:$reduction);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = [{
    $operand `,` $indices `,` $updates `batch_dims` `=` $batch_dims attr-dict
    `:` functional-type(operands, $result)
  }];
  let hasVerifier = 1;
}

def Graph_ScatterElementsOp : Graph_Op<"scatter_elements",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure,
     DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>,
     AllTypesMatch<["operand", "result"]>,
     AllShapesMatch<["indices", "updates"]>]> {
  let summary = "Writes single elements along an axis (ONNX ScatterElements)";
  let description = [{
    The transpose of `dgraph.gather_elements`: the result is `operand` with
    `result[..., indices[i..], ...] = updates[i..]` along `axis` (the other
    coordinates those of `i..`), replaced (`reduction` = "none") or
    combined ("add", "mul", "max", "min") in the order of the elements of
    `indices`. Negative indices count from the end; one out of range is a
    run-time error. The CUDA kernel applies each position's updates in
    index order, so results are reproducible.

    Example:
    ```mlir
    %s = dgraph.scatter_elements %x, %idx, %upd axis = 1 {reduction = "add"}
        : (tensor<3x5xf32>, tensor<3x2xi64>, tensor<3x2xf32>) -> tensor<3x5xf32>
    ```

    **Constraints:**
    - operand, indices and updates have the same rank and
      `0 <= axis < rank`;
    - indices and updates have the same shape, at most the operand's in
      every dimension but `axis`;
    - updates and the result have the operand's element type;
    - `reduction` is "none", "add", "mul", "max" or "min"; all but "none"
      need a numeric element type.
  }];
  let arguments = (ins Graph_Tensor:$operand, Graph_IndexTensor:$indices,
                       Graph_Tensor:$updates, I64Attr:$axis,
                       DefaultValuedStrAttr<StrAttr, "none">:$reduction);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = [{
    $operand `,` $indices `,` $updates `axis` `=` $axis attr-dict `:`
    functional-type(operands, $result)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Selection
//===----------------------------------------------------------------------===//

def Graph_TopKOp : Graph_Op<"top_k",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure,
     DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>,
     DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "The k largest (or smallest) elements along an axis";
  let description = [{
    ONNX TopK: `values` holds the `k` largest (`largest`, the default) or
    smallest elements along `axis`, `indices` (i64) their positions. The
    order is by value, the largest (smallest) first; equal values keep
    their order in the operand (the lower index first), as ONNX's
    reference does; NaN is larger than every number. The order is the same
    with `sorted = false`, which ONNX leaves unspecified.

    Example:
    ```mlir
    %v, %i = dgraph.top_k %x, k = 2, axis = 1
        : (tensor<3x4xf32>) -> (tensor<3x2xf32>, tensor<3x2xi64>)
    ```

    **Constraints:**
    - `0 <= axis < rank` and `0 <= k <= dim(axis)`;
    - `values` has the operand's shape with `k` at `axis` and its element
      type; `indices` has that shape and element type i64.
  }];
  let arguments = (ins Graph_NumericTensor:$operand, I64Attr:$k, I64Attr:$axis,
                       DefaultValuedAttr<BoolAttr, "true">:$largest,
                       DefaultValuedAttr<BoolAttr, "true">:$sorted);
  let results = (outs Graph_NumericTensor:$values,
                      StaticShapeTensorOf<[I64]>:$indices);
  let assemblyFormat = [{
    $operand `,` `k` `=` $k `,` `axis` `=` $axis attr-dict `:`
    functional-type($operand, results)
  }];
}

#endif // DTCC_DIALECTS_GRAPH_IR_GRAPHINDEXINGOPS_TD
