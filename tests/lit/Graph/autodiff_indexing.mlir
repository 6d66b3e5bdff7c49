// RUN: dtcc-opt %s -split-input-file -dtcc-graph-autodiff -canonicalize -cse | FileCheck %s

// Tests that resize's gradient is resize_grad with the same attributes.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[W:.*]] = dgraph.load @w
// CHECK: dgraph.resize %[[W]] scales = [2.000000e+00, 1.500000e+00] {mode = "linear"}
// CHECK: dgraph.resize_grad %{{.*}} scales = [2.000000e+00, 1.500000e+00] {mode = "linear"} : (tensor<4x3xf32>) -> tensor<2x2xf32>
dgraph.variable @w : tensor<2x2xf32> {trainable}
func.func @main() -> (tensor<f32> {dgraph.name = "loss"}) {
  %w = dgraph.load @w : tensor<2x2xf32>
  %y = dgraph.resize %w scales = [2.0, 1.5] {mode = "linear"} : (tensor<2x2xf32>) -> tensor<4x3xf32>
  %l = dgraph.reduce_sum %y, dims = [0, 1] : (tensor<4x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests that a reflect pad's gradient is pad_grad, a constant pad's a slice.
// CHECK-LABEL: func.func @train_step
// CHECK: dgraph.pad_grad %{{.*}}, low = [2], high = [1] {mode = "reflect"} : (tensor<7xf32>) -> tensor<4xf32>
dgraph.variable @w : tensor<4xf32> {trainable}
func.func @main() -> (tensor<f32> {dgraph.name = "loss"}) {
  %w = dgraph.load @w : tensor<4xf32>
  %z = dgraph.constant dense<0.0> : tensor<f32>
  %p = dgraph.pad %w, %z, low = [2], high = [1] {mode = "reflect"} : (tensor<4xf32>, tensor<f32>) -> tensor<7xf32>
  %q = dgraph.mul %p, %p : tensor<7xf32>
  %l = dgraph.reduce_sum %q, dims = [0] : (tensor<7xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests that a constant pad with negative amounts (a crop before, a pad
// after: ZeroPad2d((0, 0, 1, -1)) shifting a sequence) has the pad of its
// gradient by the opposite amounts as its gradient: zeros where it cut.
// CHECK-LABEL: func.func @train_step
// CHECK: dgraph.pad %{{.*}}, %{{.*}}, low = [-1, 0], high = [1, 0] : (tensor<4x3xf32>, tensor<f32>) -> tensor<4x3xf32>
dgraph.variable @w : tensor<4x3xf32> {trainable}
func.func @main() -> (tensor<f32> {dgraph.name = "loss"}) {
  %w = dgraph.load @w : tensor<4x3xf32>
  %z = dgraph.constant dense<0.0> : tensor<f32>
  %p = dgraph.pad %w, %z, low = [1, 0], high = [-1, 0] : (tensor<4x3xf32>, tensor<f32>) -> tensor<4x3xf32>
  %q = dgraph.mul %p, %p : tensor<4x3xf32>
  %l = dgraph.reduce_sum %q, dims = [0, 1] : (tensor<4x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests that gather_nd's gradient scatter-adds into zeros, and top_k's and
// gather_elements' scatter_elements-add into zeros.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[Z:.*]] = dgraph.constant dense<0.000000e+00> : tensor<4x3xf32>
// CHECK: dgraph.scatter_elements %[[Z]], %{{.*}}, %{{.*}} axis = 1 {reduction = "add"} : (tensor<4x3xf32>, tensor<4x2xi64>, tensor<4x2xf32>) -> tensor<4x3xf32>
// CHECK: dgraph.scatter_nd %[[Z]], %{{.*}}, %{{.*}} batch_dims = 0 {reduction = "add"} : (tensor<4x3xf32>, tensor<2x1xi64>, tensor<2x3xf32>) -> tensor<4x3xf32>
dgraph.variable @w : tensor<4x3xf32> {trainable}
func.func @main() -> (tensor<f32> {dgraph.name = "loss"}) {
  %w = dgraph.load @w : tensor<4x3xf32>
  %i = dgraph.constant dense<[[1], [3]]> : tensor<2x1xi64>
  %g = dgraph.gather_nd %w, %i batch_dims = 0 : (tensor<4x3xf32>, tensor<2x1xi64>) -> tensor<2x3xf32>
  %v, %k = dgraph.top_k %w, k = 2, axis = 1 : (tensor<4x3xf32>) -> (tensor<4x2xf32>, tensor<4x2xi64>)
  %a = dgraph.reduce_sum %g, dims = [0, 1] : (tensor<2x3xf32>) -> tensor<f32>
  %b = dgraph.reduce_sum %v, dims = [0, 1] : (tensor<4x2xf32>) -> tensor<f32>
  %l = dgraph.add %a, %b : tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests that grid_sample's gradient is one grid_sample_grad with the same
// attributes, whose results are the gradients of the image and the grid.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: dgraph.name = "grad/x"
// CHECK-SAME: dgraph.name = "grad/g"
// CHECK: %[[X:.*]] = dgraph.load @x
// CHECK: %[[G:.*]] = dgraph.load @g
// CHECK: %[[DX:.*]], %[[DG:.*]] = dgraph.grid_sample_grad %{{.*}}, %[[X]], %[[G]] {mode = "bicubic", padding_mode = "border"} : (tensor<2x3x6x7xf32>, tensor<2x3x4x5xf32>, tensor<2x6x7x2xf32>) -> (tensor<2x3x4x5xf32>, tensor<2x6x7x2xf32>)
// CHECK: return %{{.*}}, %[[DX]], %[[DG]]
dgraph.variable @x : tensor<2x3x4x5xf32> {trainable}
dgraph.variable @g : tensor<2x6x7x2xf32> {trainable}
func.func @main() -> (tensor<f32> {dgraph.name = "loss"}) {
  %x = dgraph.load @x : tensor<2x3x4x5xf32>
  %g = dgraph.load @g : tensor<2x6x7x2xf32>
  %y = dgraph.grid_sample %x, %g {mode = "bicubic", padding_mode = "border"} : (tensor<2x3x4x5xf32>, tensor<2x6x7x2xf32>) -> tensor<2x3x6x7xf32>
  %l = dgraph.reduce_sum %y, dims = [0, 1, 2, 3] : (tensor<2x3x6x7xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
