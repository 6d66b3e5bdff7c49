// RUN: dtcc-opt %s -split-input-file -verify-diagnostics

// Tests that linear resize needs a floating-point element type.
func.func @f(%x: tensor<2x2xi32>) {
  // expected-error @+1 {{expected a floating-point element type for mode "linear", got 'i32'}}
  %0 = dgraph.resize %x scales = [2.0, 2.0] {mode = "linear"} : (tensor<2x2xi32>) -> tensor<4x4xi32>
  return
}

// -----

// Tests that a resize has one scale per dimension.
func.func @f(%x: tensor<2x2xf32>) {
  // expected-error @+1 {{expected 2 scales (one per dimension), got 1}}
  %0 = dgraph.resize %x scales = [2.0] : (tensor<2x2xf32>) -> tensor<4x4xf32>
  return
}

// -----

// Tests that scales are positive.
func.func @f(%x: tensor<2x2xf32>) {
  // expected-error @+1 {{expected positive scales, got 0.000000e+00 in dim 1}}
  %0 = dgraph.resize %x scales = [1.0, 0.0] : (tensor<2x2xf32>) -> tensor<2x1xf32>
  return
}

// -----

// Tests that modes are checked.
func.func @f(%x: tensor<2x2xf32>) {
  // expected-error @+1 {{expected mode "nearest", "linear" or "cubic", got "bilinear"}}
  %0 = dgraph.resize %x scales = [1.0, 2.0] {mode = "bilinear"} : (tensor<2x2xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @f(%x: tensor<2x2xf32>) {
  // expected-error @+1 {{expected coordinate_transformation_mode "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn" or "tf_crop_and_resize", got "center"}}
  %0 = dgraph.resize %x scales = [1.0, 2.0] {coordinate_transformation_mode = "center"} : (tensor<2x2xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @f(%x: tensor<2x2xf32>) {
  // expected-error @+1 {{expected nearest_mode "round_prefer_floor", "round_prefer_ceil", "floor" or "ceil", got "round"}}
  %0 = dgraph.resize %x scales = [1.0, 2.0] {nearest_mode = "round"} : (tensor<2x2xf32>) -> tensor<2x4xf32>
  return
}

// -----

// Tests that roi comes exactly with tf_crop_and_resize, with 2 * rank entries.
func.func @f(%x: tensor<2x2xf32>) {
  // expected-error @+1 {{expected roi with tf_crop_and_resize}}
  %0 = dgraph.resize %x scales = [1.0, 2.0] {coordinate_transformation_mode = "tf_crop_and_resize"} : (tensor<2x2xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @f(%x: tensor<2x2xf32>) {
  // expected-error @+1 {{expected no roi outside tf_crop_and_resize}}
  %0 = dgraph.resize %x scales = [1.0, 2.0] {roi = array<f64: 0.0, 0.0, 1.0, 1.0>} : (tensor<2x2xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @f(%x: tensor<2x2xf32>) {
  // expected-error @+1 {{expected 4 roi entries (starts, then ends), got 2}}
  %0 = dgraph.resize %x scales = [1.0, 2.0] {coordinate_transformation_mode = "tf_crop_and_resize", roi = array<f64: 0.0, 1.0>} : (tensor<2x2xf32>) -> tensor<2x4xf32>
  return
}

// -----

// Tests that result and operand agree in rank and element type.
func.func @f(%x: tensor<2x2xf32>) {
  // expected-error @+1 {{expected operand and result of one rank and element type, got 'tensor<2x2xf32>' and 'tensor<4x4xf16>'}}
  %0 = dgraph.resize %x scales = [2.0, 2.0] : (tensor<2x2xf32>) -> tensor<4x4xf16>
  return
}

// -----

// Tests that a resize cannot create elements from an empty dimension.
func.func @f(%x: tensor<0x2xf32>) {
  // expected-error @+1 {{expected result dim 0 to be empty exactly where the operand's is, got 0x2 -> 3x2}}
  %0 = dgraph.resize %x scales = [2.0, 1.0] : (tensor<0x2xf32>) -> tensor<3x2xf32>
  return
}

// -----

// Tests that resize_grad checks like resize, with its shapes swapped.
func.func @f(%dy: tensor<4x4xf32>) {
  // expected-error @+1 {{expected 2 scales (one per dimension), got 3}}
  %0 = dgraph.resize_grad %dy scales = [2.0, 2.0, 1.0] : (tensor<4x4xf32>) -> tensor<2x2xf32>
  return
}

// -----

// Tests that pad modes are checked.
func.func @f(%x: tensor<2xf32>, %v: tensor<f32>) {
  // expected-error @+1 {{expected mode "constant", "edge", "reflect" or "wrap", got "symmetric"}}
  %0 = dgraph.pad %x, %v, low = [1], high = [1] {mode = "symmetric"} : (tensor<2xf32>, tensor<f32>) -> tensor<4xf32>
  return
}

// -----

// Tests that an empty dimension cannot be padded by copying.
func.func @f(%x: tensor<0xf32>, %v: tensor<f32>) {
  // expected-error @+1 {{cannot pad empty dimension 0 in mode "edge"}}
  %0 = dgraph.pad %x, %v, low = [1], high = [1] {mode = "edge"} : (tensor<0xf32>, tensor<f32>) -> tensor<2xf32>
  return
}

// -----

// Tests pad_grad's constraints.
func.func @f(%dy: tensor<6xf32>) {
  // expected-error @+1 {{expected mode "edge", "reflect" or "wrap", got "constant"}}
  %0 = dgraph.pad_grad %dy, low = [1], high = [1] {mode = "constant"} : (tensor<6xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @f(%dy: tensor<6xf32>) {
  // expected-error @+1 {{expected grad dim 0 to be 7, got 6}}
  %0 = dgraph.pad_grad %dy, low = [1], high = [2] {mode = "edge"} : (tensor<6xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @f(%dy: tensor<6xf32>) {
  // expected-error @+1 {{expected low and high of size 1}}
  %0 = dgraph.pad_grad %dy, low = [1, 0], high = [1] {mode = "edge"} : (tensor<6xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @f(%dy: tensor<2xf32>) {
  // expected-error @+1 {{cannot pad empty dimension 0}}
  %0 = dgraph.pad_grad %dy, low = [1], high = [1] {mode = "wrap"} : (tensor<2xf32>) -> tensor<0xf32>
  return
}

// -----

// Tests gather_nd's constraints.
func.func @f(%x: tensor<4x5xf32>, %i: tensor<3x3xi64>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected the last indices dim in [1, 2], got 3}}
  %0 = dgraph.gather_nd %x, %i batch_dims = 0 : (tensor<4x5xf32>, tensor<3x3xi64>) -> tensor<3xf32>
  return
}

// -----

func.func @f(%x: tensor<4x5xf32>, %i: tensor<3x1xi64>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected the first 1 dims of operand and indices to agree, got 4x5 and 3x1}}
  %0 = dgraph.gather_nd %x, %i batch_dims = 1 : (tensor<4x5xf32>, tensor<3x1xi64>) -> tensor<3xf32>
  return
}

// -----

func.func @f(%x: tensor<4x5xf32>, %i: tensor<3x1xi64>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected batch_dims in [0, 2), got 2}}
  %0 = dgraph.gather_nd %x, %i batch_dims = 2 : (tensor<4x5xf32>, tensor<3x1xi64>) -> tensor<3xf32>
  return
}

// -----

func.func @f(%x: tensor<4x5xf32>, %i: tensor<3x1xi64>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{'dgraph.gather_nd' op inferred type(s) 'tensor<3x5xf32>' are incompatible with return type(s) of operation 'tensor<3xf32>'}}
  %0 = dgraph.gather_nd %x, %i batch_dims = 0 : (tensor<4x5xf32>, tensor<3x1xi64>) -> tensor<3xf32>
  return
}

// -----

// Tests scatter_nd's constraints.
func.func @f(%x: tensor<4x5xf32>, %i: tensor<3x1xi64>, %u: tensor<3x4xf32>) {
  // expected-error @+1 {{expected updates of type 'tensor<3x5xf32>', got 'tensor<3x4xf32>'}}
  %0 = dgraph.scatter_nd %x, %i, %u batch_dims = 0 : (tensor<4x5xf32>, tensor<3x1xi64>, tensor<3x4xf32>) -> tensor<4x5xf32>
  return
}

// -----

func.func @f(%x: tensor<4x5xf32>, %i: tensor<3x1xi64>, %u: tensor<3x5xf32>) {
  // expected-error @+1 {{expected reduction "none", "add", "mul", "max" or "min", got "sum"}}
  %0 = dgraph.scatter_nd %x, %i, %u batch_dims = 0 {reduction = "sum"} : (tensor<4x5xf32>, tensor<3x1xi64>, tensor<3x5xf32>) -> tensor<4x5xf32>
  return
}

// -----

func.func @f(%x: tensor<4xi1>, %i: tensor<3x1xi64>, %u: tensor<3xi1>) {
  // expected-error @+1 {{expected a numeric element type for reduction "add", got i1}}
  %0 = dgraph.scatter_nd %x, %i, %u batch_dims = 0 {reduction = "add"} : (tensor<4xi1>, tensor<3x1xi64>, tensor<3xi1>) -> tensor<4xi1>
  return
}

// -----

// Tests scatter_elements' constraints.
func.func @f(%x: tensor<3x5xf32>, %i: tensor<3x2x1xi64>, %u: tensor<3x2x1xf32>) {
  // expected-error @+1 {{expected indices and updates of rank 2, got 3}}
  %0 = dgraph.scatter_elements %x, %i, %u axis = 1 : (tensor<3x5xf32>, tensor<3x2x1xi64>, tensor<3x2x1xf32>) -> tensor<3x5xf32>
  return
}

// -----

func.func @f(%x: tensor<3x5xf32>, %i: tensor<4x2xi64>, %u: tensor<4x2xf32>) {
  // expected-error @+1 {{expected indices dim 0 at most 3, got 4}}
  %0 = dgraph.scatter_elements %x, %i, %u axis = 1 : (tensor<3x5xf32>, tensor<4x2xi64>, tensor<4x2xf32>) -> tensor<3x5xf32>
  return
}

// -----

func.func @f(%x: tensor<3x5xf32>, %i: tensor<3x2xi64>, %u: tensor<3x2xf32>) {
  // expected-error @+1 {{expected axis in [0, 2), got 2}}
  %0 = dgraph.scatter_elements %x, %i, %u axis = 2 : (tensor<3x5xf32>, tensor<3x2xi64>, tensor<3x2xf32>) -> tensor<3x5xf32>
  return
}

// -----

func.func @f(%x: tensor<3x5xf32>, %i: tensor<3x2xi64>, %u: tensor<3x3xf32>) {
  // expected-error @+1 {{all of {indices, updates} have same shape}}
  %0 = dgraph.scatter_elements %x, %i, %u axis = 1 : (tensor<3x5xf32>, tensor<3x2xi64>, tensor<3x3xf32>) -> tensor<3x5xf32>
  return
}

// -----

// Tests top_k's constraints.
func.func @f(%x: tensor<3x4xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected k in [0, 4], got 5}}
  %v, %i = dgraph.top_k %x, k = 5, axis = 1 : (tensor<3x4xf32>) -> (tensor<3x5xf32>, tensor<3x5xi64>)
  return
}

// -----

func.func @f(%x: tensor<3x4xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected axis in [0, 2), got 2}}
  %v, %i = dgraph.top_k %x, k = 1, axis = 2 : (tensor<3x4xf32>) -> (tensor<3x1xf32>, tensor<3x1xi64>)
  return
}

// -----

// Tests that grid_sample samples 1 to 3 spatial dimensions.
func.func @f(%x: tensor<1x2x3x4x5x6xf32>, %g: tensor<1x2x2x2x2x4xf32>) {
  // expected-error @+1 {{expected an operand of rank 3 to 5 [N, C, spatial...] (1 to 3 spatial dimensions), got 'tensor<1x2x3x4x5x6xf32>'}}
  %0 = dgraph.grid_sample %x, %g : (tensor<1x2x3x4x5x6xf32>, tensor<1x2x2x2x2x4xf32>) -> tensor<1x2x2x2x2x2xf32>
  return
}

// -----

// Tests that a volumetric grid holds (x, y, z).
func.func @f(%x: tensor<1x2x3x4x5xf32>, %g: tensor<1x2x2x2x2xf32>) {
  // expected-error @+1 {{expected a grid of rank 5 [N, output positions..., 3] for an operand of rank 5, got 'tensor<1x2x2x2x2xf32>'}}
  %0 = dgraph.grid_sample %x, %g : (tensor<1x2x3x4x5xf32>, tensor<1x2x2x2x2xf32>) -> tensor<1x2x2x2x2xf32>
  return
}

// -----

// Tests that the grid's last dimension holds (x, y).
func.func @f(%x: tensor<1x2x3x4xf32>, %g: tensor<1x2x2x3xf32>) {
  // expected-error @+1 {{expected a grid of rank 4 [N, output positions..., 2] for an operand of rank 4, got 'tensor<1x2x2x3xf32>'}}
  %0 = dgraph.grid_sample %x, %g : (tensor<1x2x3x4xf32>, tensor<1x2x2x3xf32>) -> tensor<1x2x2x2xf32>
  return
}

// -----

// Tests that the grid has the operand's batch.
func.func @f(%x: tensor<2x2x3x4xf32>, %g: tensor<1x2x2x2xf32>) {
  // expected-error @+1 {{expected grid dim 0 to be the operand's batch (2), got 1}}
  %0 = dgraph.grid_sample %x, %g : (tensor<2x2x3x4xf32>, tensor<1x2x2x2xf32>) -> tensor<2x2x2x2xf32>
  return
}

// -----

// Tests that the result is [N, C, H_out, W_out].
func.func @f(%x: tensor<1x2x3x4xf32>, %g: tensor<1x5x6x2xf32>) {
  // expected-error @+1 {{expected a result of shape 1x2x5x6, got 1x2x3x4}}
  %0 = dgraph.grid_sample %x, %g : (tensor<1x2x3x4xf32>, tensor<1x5x6x2xf32>) -> tensor<1x2x3x4xf32>
  return
}

// -----

// Tests that operand and grid have one element type.
func.func @f(%x: tensor<1x2x3x4xf32>, %g: tensor<1x5x6x2xf64>) {
  // expected-error @+1 {{expected operand, grid and result of one element type, got 'f32', 'f64' and 'f32'}}
  %0 = dgraph.grid_sample %x, %g : (tensor<1x2x3x4xf32>, tensor<1x5x6x2xf64>) -> tensor<1x2x5x6xf32>
  return
}

// -----

// Tests that grid_sample's mode is checked.
func.func @f(%x: tensor<1x2x3x4xf32>, %g: tensor<1x5x6x2xf32>) {
  // expected-error @+1 {{expected mode "bilinear", "nearest" or "bicubic", got "linear"}}
  %0 = dgraph.grid_sample %x, %g {mode = "linear"} : (tensor<1x2x3x4xf32>, tensor<1x5x6x2xf32>) -> tensor<1x2x5x6xf32>
  return
}

// -----

// Tests that grid_sample's padding_mode is checked.
func.func @f(%x: tensor<1x2x3x4xf32>, %g: tensor<1x5x6x2xf32>) {
  // expected-error @+1 {{expected padding_mode "zeros", "border" or "reflection", got "reflect"}}
  %0 = dgraph.grid_sample %x, %g {padding_mode = "reflect"} : (tensor<1x2x3x4xf32>, tensor<1x5x6x2xf32>) -> tensor<1x2x5x6xf32>
  return
}

// -----

// Tests that grid_sample_grad's results have the operand's and the grid's
// types.
func.func @f(%dy: tensor<1x2x5x6xf32>, %x: tensor<1x2x3x4xf32>, %g: tensor<1x5x6x2xf32>) {
  // expected-error @+1 {{expected doperand of type 'tensor<1x2x3x4xf32>' and dgrid of type 'tensor<1x5x6x2xf32>', got 'tensor<1x2x3x4xf32>' and 'tensor<1x6x5x2xf32>'}}
  %0:2 = dgraph.grid_sample_grad %dy, %x, %g : (tensor<1x2x5x6xf32>, tensor<1x2x3x4xf32>, tensor<1x5x6x2xf32>) -> (tensor<1x2x3x4xf32>, tensor<1x6x5x2xf32>)
  return
}

// -----

// Tests that grid_sample_grad checks dy against the forward's result.
func.func @f(%dy: tensor<1x2x6x5xf32>, %x: tensor<1x2x3x4xf32>, %g: tensor<1x5x6x2xf32>) {
  // expected-error @+1 {{expected a result of shape 1x2x5x6, got 1x2x6x5}}
  %0:2 = dgraph.grid_sample_grad %dy, %x, %g : (tensor<1x2x6x5xf32>, tensor<1x2x3x4xf32>, tensor<1x5x6x2xf32>) -> (tensor<1x2x3x4xf32>, tensor<1x5x6x2xf32>)
  return
}

// -----

// Tests that roi_align's regions are [R, 4].
func.func @f(%x: tensor<1x2x8x8xf32>, %r: tensor<3x5xf32>, %b: tensor<3xi64>) {
  // expected-error @+1 {{expected rois of shape [R, 4], got 'tensor<3x5xf32>'}}
  %0 = dgraph.roi_align %x, %r, %b {output_height = 2 : i64, output_width = 2 : i64, sampling_ratio = 0 : i64, spatial_scale = 1.0 : f64} : (tensor<1x2x8x8xf32>, tensor<3x5xf32>, tensor<3xi64>) -> tensor<3x2x2x2xf32>
  return
}

// -----

// Tests that roi_align has a batch index per region.
func.func @f(%x: tensor<1x2x8x8xf32>, %r: tensor<3x4xf32>, %b: tensor<2xi64>) {
  // expected-error @+1 {{expected batch_indices of shape [3], got 'tensor<2xi64>'}}
  %0 = dgraph.roi_align %x, %r, %b {output_height = 2 : i64, output_width = 2 : i64, sampling_ratio = 0 : i64, spatial_scale = 1.0 : f64} : (tensor<1x2x8x8xf32>, tensor<3x4xf32>, tensor<2xi64>) -> tensor<3x2x2x2xf32>
  return
}

// -----

// Tests that roi_align's result is [R, C, output_height, output_width].
func.func @f(%x: tensor<1x2x8x8xf32>, %r: tensor<3x4xf32>, %b: tensor<3xi64>) {
  // expected-error @+1 {{expected a result of shape 3x2x2x3, got 3x2x2x2}}
  %0 = dgraph.roi_align %x, %r, %b {output_height = 2 : i64, output_width = 3 : i64, sampling_ratio = 0 : i64, spatial_scale = 1.0 : f64} : (tensor<1x2x8x8xf32>, tensor<3x4xf32>, tensor<3xi64>) -> tensor<3x2x2x2xf32>
  return
}

// -----

// Tests that roi_align's mode and sampling ratio are checked.
func.func @f(%x: tensor<1x2x8x8xf32>, %r: tensor<3x4xf32>, %b: tensor<3xi64>) {
  // expected-error @+1 {{expected mode "avg" or "max", got "min"}}
  %0 = dgraph.roi_align %x, %r, %b {mode = "min", output_height = 2 : i64, output_width = 2 : i64, sampling_ratio = 0 : i64, spatial_scale = 1.0 : f64} : (tensor<1x2x8x8xf32>, tensor<3x4xf32>, tensor<3xi64>) -> tensor<3x2x2x2xf32>
  return
}

// -----

func.func @f(%x: tensor<1x2x8x8xf32>, %r: tensor<3x4xf32>, %b: tensor<3xi64>) {
  // expected-error @+1 {{expected output_height, output_width >= 1 and 0 <= sampling_ratio <= 1048576, got 2, 2 and -1}}
  %0 = dgraph.roi_align %x, %r, %b {output_height = 2 : i64, output_width = 2 : i64, sampling_ratio = -1 : i64, spatial_scale = 1.0 : f64} : (tensor<1x2x8x8xf32>, tensor<3x4xf32>, tensor<3xi64>) -> tensor<3x2x2x2xf32>
  return
}
