// RUN: dtcc-opt %s -split-input-file -dtcc-plan-set="recompute=selective" -dtcc-graph-autodiff -verify-diagnostics | FileCheck %s

// Tests that selective recomputation clones the attention core only: the
// scores matmul of two activations (Q·Kᵀ), its scale, its mask, the softmax
// and the matmul with V, just before their backward. The Q, K, V and output
// projections and the MLP (matmuls with a parameter) keep their
// activations; the module says what was recomputed.
// CHECK-LABEL: module attributes
// CHECK-SAME: dgraph.recomputed = "selective (attention cores); train_step: 5 ops in layers 0 (add 1, div 1, matmul 2, softmax 1)"
// CHECK-LABEL: func.func @train_step
// CHECK: %[[Q:.*]] = dgraph.matmul %arg0, %{{.*}} {dgraph.layer
// CHECK: %[[K:.*]] = dgraph.matmul %arg0, %{{.*}} {dgraph.layer
// CHECK: %[[V:.*]] = dgraph.matmul %arg0, %{{.*}} {dgraph.layer
// CHECK: %[[S:.*]] = dgraph.matmul %[[Q]], %[[K]] {dgraph.layer = #dgraph.layer<index = 0>, transpose_rhs}
// CHECK: %[[P:.*]] = dgraph.softmax
// CHECK: %[[O:.*]] = dgraph.matmul %[[P]], %[[V]]
// CHECK: %[[Y:.*]] = dgraph.matmul %[[O]], %{{.*}} {dgraph.layer
// CHECK: %[[T:.*]] = dgraph.tanh %[[Y]]
// The backward of the output projection and the tanh reads the kept
// activations, then the core is cloned from Q, K and V.
// CHECK: dgraph.mul %[[T]], %[[T]]
// CHECK-NOT: dgraph.recompute
// CHECK: dgraph.matmul %[[O]], %{{.*}} {{{.*}}transpose_lhs{{.*}}}
// CHECK: %[[RS:.*]] = dgraph.matmul %[[Q]], %[[K]] {dgraph.layer = #dgraph.layer<index = 0>, dgraph.recompute, transpose_rhs}
// CHECK: %[[RD:.*]] = dgraph.div %[[RS]], %{{.*}} {dgraph.layer = #dgraph.layer<index = 0>, dgraph.recompute}
// CHECK: %[[RA:.*]] = dgraph.add %[[RD]], %{{.*}} {dgraph.layer = #dgraph.layer<index = 0>, dgraph.recompute}
// CHECK: %[[RP:.*]] = dgraph.softmax %[[RA]], dim = 1 {dgraph.layer = #dgraph.layer<index = 0>, dgraph.recompute}
// CHECK: %[[RO:.*]] = dgraph.matmul %[[RP]], %[[V]] {dgraph.layer = #dgraph.layer<index = 0>, dgraph.recompute}
// The core's backward reads the clones, not the forward's.
// CHECK: dgraph.matmul %[[RP]], %{{.*}} {{{.*}}transpose_lhs{{.*}}}
// CHECK-NOT: dgraph.recompute
// CHECK: return
dgraph.variable @wq : tensor<4x4xf32> {trainable}
dgraph.variable @wk : tensor<4x4xf32> {trainable}
dgraph.variable @wv : tensor<4x4xf32> {trainable}
dgraph.variable @wo : tensor<4x4xf32> {trainable}
func.func @main(%x: tensor<3x4xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
  %scale = dgraph.constant dense<2.0> : tensor<3x3xf32>
  %mask = dgraph.constant dense<0.0> : tensor<3x3xf32>
  %wq = dgraph.load @wq {dgraph.layer = #dgraph.layer<index = 0>} : tensor<4x4xf32>
  %wk = dgraph.load @wk {dgraph.layer = #dgraph.layer<index = 0>} : tensor<4x4xf32>
  %wv = dgraph.load @wv {dgraph.layer = #dgraph.layer<index = 0>} : tensor<4x4xf32>
  %wo = dgraph.load @wo {dgraph.layer = #dgraph.layer<index = 0>} : tensor<4x4xf32>
  %q = dgraph.matmul %x, %wq {dgraph.layer = #dgraph.layer<index = 0>} : (tensor<3x4xf32>, tensor<4x4xf32>) -> tensor<3x4xf32>
  %k = dgraph.matmul %x, %wk {dgraph.layer = #dgraph.layer<index = 0>} : (tensor<3x4xf32>, tensor<4x4xf32>) -> tensor<3x4xf32>
  %v = dgraph.matmul %x, %wv {dgraph.layer = #dgraph.layer<index = 0>} : (tensor<3x4xf32>, tensor<4x4xf32>) -> tensor<3x4xf32>
  %s = dgraph.matmul %q, %k {dgraph.layer = #dgraph.layer<index = 0>, transpose_rhs} : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x3xf32>
  %d = dgraph.div %s, %scale {dgraph.layer = #dgraph.layer<index = 0>} : tensor<3x3xf32>
  %m = dgraph.add %d, %mask {dgraph.layer = #dgraph.layer<index = 0>} : tensor<3x3xf32>
  %p = dgraph.softmax %m, dim = 1 {dgraph.layer = #dgraph.layer<index = 0>} : tensor<3x3xf32>
  %o = dgraph.matmul %p, %v {dgraph.layer = #dgraph.layer<index = 0>} : (tensor<3x3xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %y = dgraph.matmul %o, %wo {dgraph.layer = #dgraph.layer<index = 0>} : (tensor<3x4xf32>, tensor<4x4xf32>) -> tensor<3x4xf32>
  %t = dgraph.tanh %y {dgraph.layer = #dgraph.layer<index = 0>} : tensor<3x4xf32>
  %l = dgraph.reduce_sum %t, dims = [0, 1] : (tensor<3x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests that a softmax over a dense layer's output (a classifier: a matmul
// with a parameter, not of two activations) is no attention core: nothing
// is recomputed, with a warning, and the module says so.
// CHECK-LABEL: module attributes
// CHECK-SAME: dgraph.recomputed = "selective (attention cores); nothing recomputed (no attention core: a softmax between a matmul of two activations and one with a third)"
// CHECK-LABEL: func.func @train_step
// CHECK-NOT: dgraph.recompute
// CHECK: return
dgraph.variable @w : tensor<4x4xf32> {trainable}
// expected-warning @+1 {{selective recomputation found no attention core (a softmax between a matmul of two activations and a matmul with a third); nothing is recomputed}}
func.func @main(%x: tensor<3x4xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
  %w = dgraph.load @w : tensor<4x4xf32>
  %h = dgraph.matmul %x, %w : (tensor<3x4xf32>, tensor<4x4xf32>) -> tensor<3x4xf32>
  %p = dgraph.softmax %h, dim = 1 : tensor<3x4xf32>
  %y = dgraph.matmul %p, %w : (tensor<3x4xf32>, tensor<4x4xf32>) -> tensor<3x4xf32>
  %l = dgraph.reduce_sum %y, dims = [0, 1] : (tensor<3x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
