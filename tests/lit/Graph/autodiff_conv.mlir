// RUN: dtcc-opt %s -split-input-file -dtcc-graph-autodiff -canonicalize -cse | FileCheck %s

// Tests that a convolution's VJP is its filter gradient (and, for a data
// input, no input gradient: canonicalization drops it), with the forward
// op's window.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: tensor<4x3x3x3xf32> {dgraph.grad_of = @w, dgraph.name = "grad/w"}
// CHECK: %[[W:.*]] = dgraph.load @w
// CHECK: %[[Y:.*]] = dgraph.conv %[[X:.*]], %[[W]] strides = [2, 2], dilations = [1, 1], pad_low = [1, 0], pad_high = [0, 1], groups = 1
// CHECK-NOT: dgraph.conv_input_grad
// CHECK: %[[DW:.*]] = dgraph.conv_filter_grad %[[X]], %{{.*}} strides = [2, 2], dilations = [1, 1], pad_low = [1, 0], pad_high = [0, 1], groups = 1 : (tensor<2x3x8x8xf32>, tensor<2x4x4x4xf32>) -> tensor<4x3x3x3xf32>
// CHECK: return %{{.*}}, %[[DW]]
dgraph.variable @w : tensor<4x3x3x3xf32> {trainable}
func.func @main(%x: tensor<2x3x8x8xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
  %w = dgraph.load @w : tensor<4x3x3x3xf32>
  %y = dgraph.conv %x, %w strides = [2, 2], dilations = [1, 1], pad_low = [1, 0], pad_high = [0, 1], groups = 1
      : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x4x4xf32>
  %l = dgraph.reduce_sum %y, dims = [0, 1, 2, 3] : (tensor<2x4x4x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests that two stacked convolutions pass the gradient of the second's
// input to the first through conv_input_grad, and that a transposed
// convolution (conv_input_grad in the forward pass) differentiates into
// conv (for its input) and conv_filter_grad (for its filter).
// CHECK-LABEL: func.func @train_step
// CHECK: %[[H:.*]] = dgraph.conv %{{.*}}, %[[W1:.*]] strides = [1]
// CHECK: %[[T:.*]] = dgraph.conv_input_grad %[[H]], %[[W2:.*]] strides = [2]
// CHECK-DAG: %[[DT:.*]] = dgraph.conv_filter_grad %{{.*}}, %[[H]] strides = [2], {{.*}} -> tensor<4x2x3xf32>
// CHECK-DAG: %[[DH:.*]] = dgraph.conv %{{.*}}, %[[W2]] strides = [2], {{.*}} : (tensor<2x2x11xf32>, tensor<4x2x3xf32>) -> tensor<2x4x5xf32>
// CHECK-DAG: dgraph.conv_filter_grad %{{.*}}, %[[DH]] strides = [1], {{.*}} -> tensor<4x2x3xf32>
dgraph.variable @w1 : tensor<4x2x3xf32> {trainable}
dgraph.variable @w2 : tensor<4x2x3xf32> {trainable}
func.func @main(%x: tensor<2x2x7xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
  %w1 = dgraph.load @w1 : tensor<4x2x3xf32>
  %w2 = dgraph.load @w2 : tensor<4x2x3xf32>
  %h = dgraph.conv %x, %w1 strides = [1], dilations = [1], pad_low = [0], pad_high = [0], groups = 1
      : (tensor<2x2x7xf32>, tensor<4x2x3xf32>) -> tensor<2x4x5xf32>
  %t = dgraph.conv_input_grad %h, %w2 strides = [2], dilations = [1], pad_low = [0], pad_high = [0], groups = 1
      : (tensor<2x4x5xf32>, tensor<4x2x3xf32>) -> tensor<2x2x11xf32>
  %s = dgraph.mul %t, %t : tensor<2x2x11xf32>
  %l = dgraph.reduce_sum %s, dims = [0, 1, 2] : (tensor<2x2x11xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
