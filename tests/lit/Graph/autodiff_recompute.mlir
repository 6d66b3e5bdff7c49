// RUN: dtcc-opt %s -split-input-file -dtcc-plan-set="recompute=full" -dtcc-graph-autodiff | FileCheck %s
// RUN: dtcc-opt %s -split-input-file -dtcc-graph-autodiff | FileCheck %s --check-prefix=KEEP

// Tests that recomputation goes layer by layer (#dgraph.layer index): the
// first layer's forward ops are cloned, marked dgraph.recompute, just
// before its backward; the last layer's activations are still alive and
// are not. Every backward op takes its forward op's layer.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[H0:.*]] = dgraph.matmul %arg0, %{{.*}} {dgraph.layer = #dgraph.layer<index = 0>}
// CHECK: %[[A0:.*]] = dgraph.tanh %[[H0]] {dgraph.layer = #dgraph.layer<index = 0>}
// CHECK: %[[H1:.*]] = dgraph.matmul %[[A0]], %{{.*}} {dgraph.layer = #dgraph.layer<index = 1>}
// CHECK: %[[A1:.*]] = dgraph.tanh %[[H1]] {dgraph.layer = #dgraph.layer<index = 1>}
// CHECK: dgraph.reduce_sum %[[A1]]
// CHECK-NOT: dgraph.recompute
// CHECK: dgraph.mul %[[A1]], %[[A1]] {dgraph.layer = #dgraph.layer<index = 1>}
// CHECK: dgraph.matmul %{{.*}} {dgraph.layer = #dgraph.layer<index = 1>, transpose_{{.*}}}
// CHECK: %[[R0:.*]] = dgraph.matmul %arg0, %{{.*}} {dgraph.layer = #dgraph.layer<index = 0>, dgraph.recompute}
// CHECK: %[[RA0:.*]] = dgraph.tanh %[[R0]] {dgraph.layer = #dgraph.layer<index = 0>, dgraph.recompute}
// CHECK: dgraph.mul %[[RA0]], %[[RA0]] {dgraph.layer = #dgraph.layer<index = 0>}
// CHECK: return
//
// Without recomputation nothing is cloned.
// KEEP-LABEL: func.func @train_step
// KEEP-NOT: dgraph.recompute
// KEEP: return
dgraph.variable @w0 : tensor<4x4xf32> {trainable}
dgraph.variable @w1 : tensor<4x4xf32> {trainable}
func.func @main(%x: tensor<2x4xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
  %w0 = dgraph.load @w0 {dgraph.layer = #dgraph.layer<index = 0>} : tensor<4x4xf32>
  %w1 = dgraph.load @w1 {dgraph.layer = #dgraph.layer<index = 1>} : tensor<4x4xf32>
  %h0 = dgraph.matmul %x, %w0 {dgraph.layer = #dgraph.layer<index = 0>} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %a0 = dgraph.tanh %h0 {dgraph.layer = #dgraph.layer<index = 0>} : tensor<2x4xf32>
  %h1 = dgraph.matmul %a0, %w1 {dgraph.layer = #dgraph.layer<index = 1>} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %a1 = dgraph.tanh %h1 {dgraph.layer = #dgraph.layer<index = 1>} : tensor<2x4xf32>
  %l = dgraph.reduce_sum %a1, dims = [0, 1] : (tensor<2x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests that a random draw is recomputed like any pure op: its clone reads
// the same step and keeps the seed, so it draws the forward pass's values
// (dgraph.random depends on (seed, step, element) alone).
// CHECK-LABEL: func.func @train_step
// CHECK: %[[S:.*]] = dgraph.load @__step
// CHECK: %[[Z:.*]] = dgraph.random %[[S]] {dgraph.layer = #dgraph.layer<index = 0>, distribution = "normal", scale = 1.000000e+00 : f64, seed = 9 : i64, shift = 0.000000e+00 : f64}
// CHECK: dgraph.mul %{{.*}}, %[[Z]] {dgraph.layer = #dgraph.layer<index = 0>}
// CHECK: %[[RZ:.*]] = dgraph.random %[[S]] {dgraph.layer = #dgraph.layer<index = 0>, dgraph.recompute, distribution = "normal", scale = 1.000000e+00 : f64, seed = 9 : i64, shift = 0.000000e+00 : f64}
// CHECK: dgraph.mul %{{.*}}, %[[RZ]] {dgraph.layer = #dgraph.layer<index = 0>, dgraph.recompute}
// CHECK: return
dgraph.variable @__step : tensor<i64> = dense<0>
dgraph.variable @w0 : tensor<4x4xf32> {trainable}
dgraph.variable @w1 : tensor<4x4xf32> {trainable}
func.func @main(%x: tensor<2x4xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
  %s = dgraph.load @__step : tensor<i64>
  %w0 = dgraph.load @w0 {dgraph.layer = #dgraph.layer<index = 0>} : tensor<4x4xf32>
  %w1 = dgraph.load @w1 {dgraph.layer = #dgraph.layer<index = 1>} : tensor<4x4xf32>
  %h0 = dgraph.matmul %x, %w0 {dgraph.layer = #dgraph.layer<index = 0>} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %z = dgraph.random %s {distribution = "normal", shift = 0.0, scale = 1.0, seed = 9, dgraph.layer = #dgraph.layer<index = 0>} : (tensor<i64>) -> tensor<2x4xf32>
  %n0 = dgraph.mul %h0, %z {dgraph.layer = #dgraph.layer<index = 0>} : tensor<2x4xf32>
  %a0 = dgraph.tanh %n0 {dgraph.layer = #dgraph.layer<index = 0>} : tensor<2x4xf32>
  %h1 = dgraph.matmul %a0, %w1 {dgraph.layer = #dgraph.layer<index = 1>} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %a1 = dgraph.tanh %h1 {dgraph.layer = #dgraph.layer<index = 1>} : tensor<2x4xf32>
  %l = dgraph.reduce_sum %a1, dims = [0, 1] : (tensor<2x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
