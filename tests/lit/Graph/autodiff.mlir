// RUN: dtcc-opt %s -split-input-file -dtcc-graph-autodiff -canonicalize -cse | FileCheck %s

// Tests that a linear model's gradient is the VJP of matmul, and that @main
// stays as it was.
// CHECK-LABEL: func.func @main
// CHECK: dgraph.matmul
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<f32> {dgraph.name = "loss"}, tensor<4x3xf32> {dgraph.grad_of = @w, dgraph.name = "grad/w"})
// CHECK: %[[W:.*]] = dgraph.load @w
// CHECK: %[[Y:.*]] = dgraph.matmul %[[X:.*]], %[[W]]
// CHECK: %[[L:.*]] = dgraph.reduce_sum %[[Y]]
// CHECK: %[[DW:.*]] = dgraph.matmul %[[X]], %[[ONES:.*]] {transpose_lhs} : (tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
// CHECK: return %[[L]], %[[DW]]
dgraph.variable @w : tensor<4x3xf32> {trainable}
func.func @main(%x: tensor<2x4xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
  %w = dgraph.load @w : tensor<4x3xf32>
  %y = dgraph.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %l = dgraph.reduce_sum %y, dims = [0, 1] : (tensor<2x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests that a value used twice gets the sum of its gradients, and that
// variables that are not trainable get none.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<f32> {dgraph.name = "loss"}, tensor<3xf32> {dgraph.grad_of = @a, dgraph.name = "grad/a"})
// CHECK: %[[A:.*]] = dgraph.load @a
// CHECK: %[[B:.*]] = dgraph.load @b
// CHECK: %[[SQ:.*]] = dgraph.mul %[[A]], %[[A]]
// CHECK: %[[T:.*]] = dgraph.mul %[[B]], %[[A]]
// CHECK: %[[G:.*]] = dgraph.add %[[T]], %[[T]]
// CHECK: return %{{.*}}, %[[G]] :
dgraph.variable @a : tensor<3xf32> {trainable}
dgraph.variable @b : tensor<3xf32>
func.func @main() -> (tensor<f32> {dgraph.name = "loss"}) {
  %a = dgraph.load @a : tensor<3xf32>
  %b = dgraph.load @b : tensor<3xf32>
  %sq = dgraph.mul %a, %a : tensor<3xf32>
  %t = dgraph.mul %sq, %b : tensor<3xf32>
  %l = dgraph.reduce_sum %t, dims = [0] : (tensor<3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
