// RUN: dtcc-opt %s -split-input-file | dtcc-opt -split-input-file | FileCheck %s

// Tests that resize and resize_grad round-trip with their attributes, and
// that default attributes are not printed.
// CHECK-LABEL: func.func @resize
func.func @resize(%x: tensor<1x3x4x4xf32>, %i: tensor<2x2xi8>, %dy: tensor<1x3x8x6xf32>) {
  // CHECK: dgraph.resize %{{.*}} scales = [1.000000e+00, 1.000000e+00, 2.000000e+00, 1.500000e+00] {mode = "linear"} : (tensor<1x3x4x4xf32>) -> tensor<1x3x8x6xf32>
  %0 = dgraph.resize %x scales = [1.0, 1.0, 2.0, 1.5] {mode = "linear"} : (tensor<1x3x4x4xf32>) -> tensor<1x3x8x6xf32>
  // CHECK: dgraph.resize %{{.*}} scales = [1.000000e+00, 1.000000e+00, 5.000000e-01, 5.000000e-01] {antialias, coordinate_transformation_mode = "pytorch_half_pixel", cubic_coeff_a = -5.000000e-01 : f64, exclude_outside, mode = "cubic"}
  %1 = dgraph.resize %x scales = [1.0, 1.0, 0.5, 0.5] {mode = "cubic", cubic_coeff_a = -0.5, exclude_outside, antialias, coordinate_transformation_mode = "pytorch_half_pixel"} : (tensor<1x3x4x4xf32>) -> tensor<1x3x2x2xf32>
  // CHECK: dgraph.resize %{{.*}} scales = [2.000000e+00, 3.000000e+00] {coordinate_transformation_mode = "asymmetric", nearest_mode = "floor"} : (tensor<2x2xi8>) -> tensor<4x6xi8>
  %2 = dgraph.resize %i scales = [2.0, 3.0] {coordinate_transformation_mode = "asymmetric", nearest_mode = "floor"} : (tensor<2x2xi8>) -> tensor<4x6xi8>
  // CHECK: dgraph.resize %{{.*}} scales = [{{.*}}] {coordinate_transformation_mode = "tf_crop_and_resize", extrapolation_value = 1.000000e+01 : f64, mode = "linear", roi = array<f64: 0.000000e+00, 0.000000e+00, 4.000000e-01, 6.000000e-01, 1.000000e+00, 1.000000e+00, 1.200000e+00, 1.700000e+00>}
  %3 = dgraph.resize %x scales = [1.0, 1.0, 0.75, 0.75] {mode = "linear", coordinate_transformation_mode = "tf_crop_and_resize", extrapolation_value = 10.0 : f64, roi = array<f64: 0.0, 0.0, 0.4, 0.6, 1.0, 1.0, 1.2, 1.7>} : (tensor<1x3x4x4xf32>) -> tensor<1x3x3x3xf32>
  // CHECK: dgraph.resize_grad %{{.*}} scales = [1.000000e+00, 1.000000e+00, 2.000000e+00, 1.500000e+00] {mode = "linear"} : (tensor<1x3x8x6xf32>) -> tensor<1x3x4x4xf32>
  %4 = dgraph.resize_grad %dy scales = [1.0, 1.0, 2.0, 1.5] {mode = "linear"} : (tensor<1x3x8x6xf32>) -> tensor<1x3x4x4xf32>
  return
}

// -----

// Tests that pad modes and pad_grad round-trip; mode "constant" is the
// default and is not printed.
// CHECK-LABEL: func.func @pad_modes
func.func @pad_modes(%x: tensor<2x3xf32>, %v: tensor<f32>, %dy: tensor<2x7xf32>) {
  // CHECK: dgraph.pad %{{.*}}, %{{.*}}, low = [0, 1], high = [0, 1] : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x5xf32>
  %0 = dgraph.pad %x, %v, low = [0, 1], high = [0, 1] {mode = "constant"} : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x5xf32>
  // CHECK: dgraph.pad %{{.*}}, %{{.*}}, low = [0, 2], high = [0, 2] {mode = "reflect"} : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x7xf32>
  %1 = dgraph.pad %x, %v, low = [0, 2], high = [0, 2] {mode = "reflect"} : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x7xf32>
  // CHECK: dgraph.pad %{{.*}}, %{{.*}}, low = [1, 0], high = [2, 0] {mode = "edge"}
  %2 = dgraph.pad %x, %v, low = [1, 0], high = [2, 0] {mode = "edge"} : (tensor<2x3xf32>, tensor<f32>) -> tensor<5x3xf32>
  // CHECK: dgraph.pad %{{.*}}, %{{.*}}, low = [0, 4], high = [0, 0] {mode = "wrap"}
  %3 = dgraph.pad %x, %v, low = [0, 4], high = [0, 0] {mode = "wrap"} : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x7xf32>
  // CHECK: dgraph.pad_grad %{{.*}}, low = [0, 2], high = [0, 2] {mode = "reflect"} : (tensor<2x7xf32>) -> tensor<2x3xf32>
  %4 = dgraph.pad_grad %dy, low = [0, 2], high = [0, 2] {mode = "reflect"} : (tensor<2x7xf32>) -> tensor<2x3xf32>
  return
}

// -----

// Tests that gather_nd infers its type and that scatter_nd and
// scatter_elements round-trip with their reductions.
// CHECK-LABEL: func.func @nd
func.func @nd(%x: tensor<4x5x6xf32>, %idx: tensor<3x2xi64>, %upd: tensor<3x6xf32>, %b: tensor<2x3x4xi32>, %bi: tensor<2x5x1xi32>) {
  // CHECK: dgraph.gather_nd %{{.*}}, %{{.*}} batch_dims = 0 : (tensor<4x5x6xf32>, tensor<3x2xi64>) -> tensor<3x6xf32>
  %0 = dgraph.gather_nd %x, %idx batch_dims = 0 : (tensor<4x5x6xf32>, tensor<3x2xi64>) -> tensor<3x6xf32>
  // CHECK: dgraph.gather_nd %{{.*}}, %{{.*}} batch_dims = 1 : (tensor<2x3x4xi32>, tensor<2x5x1xi32>) -> tensor<2x5x4xi32>
  %1 = dgraph.gather_nd %b, %bi batch_dims = 1 : (tensor<2x3x4xi32>, tensor<2x5x1xi32>) -> tensor<2x5x4xi32>
  // CHECK: dgraph.scatter_nd %{{.*}}, %{{.*}}, %{{.*}} batch_dims = 0 {reduction = "add"} : (tensor<4x5x6xf32>, tensor<3x2xi64>, tensor<3x6xf32>) -> tensor<4x5x6xf32>
  %2 = dgraph.scatter_nd %x, %idx, %upd batch_dims = 0 {reduction = "add"} : (tensor<4x5x6xf32>, tensor<3x2xi64>, tensor<3x6xf32>) -> tensor<4x5x6xf32>
  // CHECK: dgraph.scatter_nd %{{.*}}, %{{.*}}, %{{.*}} batch_dims = 0 : (tensor<4x5x6xf32>
  %3 = dgraph.scatter_nd %x, %idx, %upd batch_dims = 0 : (tensor<4x5x6xf32>, tensor<3x2xi64>, tensor<3x6xf32>) -> tensor<4x5x6xf32>
  return
}

// CHECK-LABEL: func.func @elements
func.func @elements(%x: tensor<3x5xf32>, %idx: tensor<3x2xi64>, %upd: tensor<3x2xf32>) {
  // CHECK: dgraph.scatter_elements %{{.*}}, %{{.*}}, %{{.*}} axis = 1 {reduction = "max"} : (tensor<3x5xf32>, tensor<3x2xi64>, tensor<3x2xf32>) -> tensor<3x5xf32>
  %0 = dgraph.scatter_elements %x, %idx, %upd axis = 1 {reduction = "max"} : (tensor<3x5xf32>, tensor<3x2xi64>, tensor<3x2xf32>) -> tensor<3x5xf32>
  return
}

// -----

// Tests that top_k infers its two results and prints non-default flags.
// CHECK-LABEL: func.func @top_k
func.func @top_k(%x: tensor<3x4xf32>) {
  // CHECK: dgraph.top_k %{{.*}}, k = 2, axis = 1 : (tensor<3x4xf32>) -> (tensor<3x2xf32>, tensor<3x2xi64>)
  %v, %i = dgraph.top_k %x, k = 2, axis = 1 : (tensor<3x4xf32>) -> (tensor<3x2xf32>, tensor<3x2xi64>)
  // CHECK: dgraph.top_k %{{.*}}, k = 3, axis = 0 {largest = false} : (tensor<3x4xf32>) -> (tensor<3x4xf32>, tensor<3x4xi64>)
  %v2, %i2 = dgraph.top_k %x, k = 3, axis = 0 {largest = false} : (tensor<3x4xf32>) -> (tensor<3x4xf32>, tensor<3x4xi64>)
  return
}

// -----

// Tests that grid_sample and grid_sample_grad round-trip with their
// attributes, and that default attributes (bilinear, zeros, no
// align_corners) are not printed.
// CHECK-LABEL: func.func @grid_sample
func.func @grid_sample(%x: tensor<2x3x5x6xf32>, %g: tensor<2x4x7x2xf32>, %dy: tensor<2x3x4x7xf32>) {
  // CHECK: dgraph.grid_sample %{{.*}}, %{{.*}} : (tensor<2x3x5x6xf32>, tensor<2x4x7x2xf32>) -> tensor<2x3x4x7xf32>
  %0 = dgraph.grid_sample %x, %g {mode = "bilinear", padding_mode = "zeros", align_corners = false} : (tensor<2x3x5x6xf32>, tensor<2x4x7x2xf32>) -> tensor<2x3x4x7xf32>
  // CHECK: dgraph.grid_sample %{{.*}}, %{{.*}} {align_corners = true, mode = "bicubic", padding_mode = "reflection"}
  %1 = dgraph.grid_sample %x, %g {mode = "bicubic", padding_mode = "reflection", align_corners = true} : (tensor<2x3x5x6xf32>, tensor<2x4x7x2xf32>) -> tensor<2x3x4x7xf32>
  // CHECK: dgraph.grid_sample_grad %{{.*}}, %{{.*}}, %{{.*}} {mode = "nearest", padding_mode = "border"} : (tensor<2x3x4x7xf32>, tensor<2x3x5x6xf32>, tensor<2x4x7x2xf32>) -> (tensor<2x3x5x6xf32>, tensor<2x4x7x2xf32>)
  %2:2 = dgraph.grid_sample_grad %dy, %x, %g {mode = "nearest", padding_mode = "border"} : (tensor<2x3x4x7xf32>, tensor<2x3x5x6xf32>, tensor<2x4x7x2xf32>) -> (tensor<2x3x5x6xf32>, tensor<2x4x7x2xf32>)
  return
}
