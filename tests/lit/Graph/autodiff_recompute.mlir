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
