// RUN: dtcc-opt %s -split-input-file -dtcc-graph-mark-layers="parts=true" | FileCheck %s
// RUN: dtcc-opt %s -split-input-file -dtcc-graph-mark-layers | FileCheck %s --check-prefix=LAYERS
// RUN: dtcc-opt %s -split-input-file -dtcc-graph-mark-layers="parts=true" -dtcc-plan-set="mesh=pp=2 micro-batches=2" -dtcc-graph-autodiff -dtcc-shard-microbatch -dtcc-graph-optimizer -canonicalize -dtcc-shard-pipeline | FileCheck %s --check-prefix=PIPE

// LAYERS-LABEL: func.func @main
// LAYERS: dgraph.tanh %{{.*}} {dgraph.layer = #dgraph.layer<index = 0>}
// LAYERS: dgraph.tanh %{{.*}} {dgraph.layer = #dgraph.layer<index = 1>}

// Tests that a model with anonymous names gets one layer per repetition of
// its repeated block (matmul, tanh, residual add), cut where one
// activation is alive; the ops before and after the blocks, the loads and
// what is computed from the input alone stay outside layers.
// CHECK-LABEL: func.func @main
// CHECK: dgraph.load @we :
// CHECK: dgraph.neg %arg0 : tensor<2x4xf32>
// CHECK: %[[E:.*]] = dgraph.matmul %arg0, %{{.*}} :
// CHECK: dgraph.matmul %[[E]], %{{.*}} {dgraph.layer = #dgraph.layer<index = 0>}
// CHECK-NEXT: dgraph.tanh %{{.*}} {dgraph.layer = #dgraph.layer<index = 0>}
// CHECK-NEXT: dgraph.add %{{.*}}, %{{.*}} {dgraph.layer = #dgraph.layer<index = 0>}
// CHECK-NEXT: dgraph.matmul %{{.*}}, %{{.*}} {dgraph.layer = #dgraph.layer<index = 1>}
// CHECK-NEXT: dgraph.tanh %{{.*}} {dgraph.layer = #dgraph.layer<index = 1>}
// CHECK-NEXT: dgraph.add %{{.*}}, %{{.*}} {dgraph.layer = #dgraph.layer<index = 1>}
// CHECK-NEXT: dgraph.mul %{{.*}}, %{{.*}} : tensor<2x4xf32>
// CHECK-NEXT: dgraph.reduce_sum %{{.*}}, dims = [0, 1] : (tensor<2x4xf32>) -> tensor<f32>
//
// Cut between its two layers, it pipelines over two stages: the first
// stage sends the residual stream.
// PIPE-LABEL: func.func @train_step_pp0
// PIPE: dgraph.add {{.*}}index = 0
// PIPE-NEXT: dshard.send %{{.*}} "pp" peer = 1 tag = 0
// PIPE-LABEL: func.func @train_step_pp1
// PIPE: dshard.recv "pp" peer = -1 tag = 0
module {
  dgraph.variable @we : tensor<4x4xf32> = dense<0.5> {trainable}
  dgraph.variable @w0 : tensor<4x4xf32> = dense<0.5> {trainable}
  dgraph.variable @w1 : tensor<4x4xf32> = dense<0.25> {trainable}
  func.func @main(%x: tensor<2x4xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
    %we = dgraph.load @we : tensor<4x4xf32>
    %w0 = dgraph.load @w0 : tensor<4x4xf32>
    %w1 = dgraph.load @w1 : tensor<4x4xf32>
    %m = dgraph.neg %x : tensor<2x4xf32>
    %e = dgraph.matmul %x, %we : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %h0 = dgraph.matmul %e, %w0 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %a0 = dgraph.tanh %h0 : tensor<2x4xf32>
    %r0 = dgraph.add %e, %a0 : tensor<2x4xf32>
    %h1 = dgraph.matmul %r0, %w1 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %a1 = dgraph.tanh %h1 : tensor<2x4xf32>
    %r1 = dgraph.add %r0, %a1 : tensor<2x4xf32>
    %y = dgraph.mul %r1, %m : tensor<2x4xf32>
    %s = dgraph.reduce_sum %y, dims = [0, 1] : (tensor<2x4xf32>) -> tensor<f32>
    return %s : tensor<f32>
  }
}

// -----

// Tests that a model without repeated blocks (a small CNN-like chain) has
// its pieces between single live activations marked as modules, which a
// pipeline cuts between, with `parts`; without, it has no layers.
// LAYERS-LABEL: func.func @main
// LAYERS-NOT: dgraph.layer
// LAYERS: return
// CHECK-LABEL: func.func @main
// CHECK: dgraph.matmul %arg0, %{{.*}} {dgraph.layer = #dgraph.layer<module = "part.0">}
// CHECK-NEXT: dgraph.tanh %{{.*}} {dgraph.layer = #dgraph.layer<module = "part.1">}
// CHECK-NEXT: dgraph.matmul %{{.*}}, %{{.*}} {dgraph.layer = #dgraph.layer<module = "part.2">}
// CHECK-NEXT: dgraph.sigmoid %{{.*}} {dgraph.layer = #dgraph.layer<module = "part.3">}
// CHECK-NEXT: dgraph.reduce_sum %{{.*}} {dgraph.layer = #dgraph.layer<module = "part.4">}
// PIPE-LABEL: func.func @train_step_pp0
// PIPE: dshard.send
// PIPE-LABEL: func.func @train_step_pp1
// PIPE: dshard.recv
module {
  dgraph.variable @w0 : tensor<4x4xf32> = dense<0.5> {trainable}
  dgraph.variable @w1 : tensor<4x4xf32> = dense<0.25> {trainable}
  func.func @main(%x: tensor<2x4xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
    %w0 = dgraph.load @w0 : tensor<4x4xf32>
    %w1 = dgraph.load @w1 : tensor<4x4xf32>
    %h = dgraph.matmul %x, %w0 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %a = dgraph.tanh %h : tensor<2x4xf32>
    %y = dgraph.matmul %a, %w1 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %b = dgraph.sigmoid %y : tensor<2x4xf32>
    %s = dgraph.reduce_sum %b, dims = [0, 1] : (tensor<2x4xf32>) -> tensor<f32>
    return %s : tensor<f32>
  }
}

// -----

// LAYERS-LABEL: func.func @main

// Tests that a model whose ops carry layers already (from the importer) is
// left as it is: the op without one stays without.
// CHECK-LABEL: func.func @main
// CHECK: dgraph.matmul %arg0, %{{.*}} {dgraph.layer = #dgraph.layer<module = "enc">}
// CHECK-NEXT: dgraph.tanh %{{.*}} : tensor<2x4xf32>
// CHECK-NEXT: dgraph.matmul %{{.*}}, %{{.*}} {dgraph.layer = #dgraph.layer<module = "dec">}
// PIPE-LABEL: func.func @train_step_pp0
// PIPE-LABEL: func.func @train_step_pp1
module {
  dgraph.variable @w0 : tensor<4x4xf32> = dense<0.5> {trainable}
  dgraph.variable @w1 : tensor<4x4xf32> = dense<0.25> {trainable}
  func.func @main(%x: tensor<2x4xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
    %w0 = dgraph.load @w0 : tensor<4x4xf32>
    %w1 = dgraph.load @w1 : tensor<4x4xf32>
    %h = dgraph.matmul %x, %w0 {dgraph.layer = #dgraph.layer<module = "enc">} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %a = dgraph.tanh %h : tensor<2x4xf32>
    %y = dgraph.matmul %a, %w1 {dgraph.layer = #dgraph.layer<module = "dec">} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %s = dgraph.reduce_sum %y, dims = [0, 1] : (tensor<2x4xf32>) -> tensor<f32>
    return %s : tensor<f32>
  }
}

// -----

// Tests that names giving one top-level module and no layers (a model held
// by a wrapper's attribute: every node under /m/) are kept without `parts`
// and, with it, replaced by the pieces of the structure, which a pipeline
// cuts between (with the module alone there would be nothing to cut).
// LAYERS-LABEL: func.func @main
// LAYERS: dgraph.matmul %arg0, %{{.*}} {dgraph.layer = #dgraph.layer<module = "m">}
// LAYERS-NEXT: dgraph.tanh %{{.*}} {dgraph.layer = #dgraph.layer<module = "m">}
// CHECK-LABEL: func.func @main
// CHECK-NOT: module = "m"
// CHECK: dgraph.matmul %arg0, %{{.*}} {dgraph.layer = #dgraph.layer<module = "part.0">}
// CHECK-NEXT: dgraph.tanh %{{.*}} {dgraph.layer = #dgraph.layer<module = "part.1">}
// CHECK-NEXT: dgraph.matmul %{{.*}}, %{{.*}} {dgraph.layer = #dgraph.layer<module = "part.2">}
// CHECK-NOT: module = "m"
// PIPE-LABEL: func.func @train_step_pp0
// PIPE: dshard.send
// PIPE-LABEL: func.func @train_step_pp1
// PIPE: dshard.recv
module {
  dgraph.variable @w0 : tensor<4x4xf32> = dense<0.5> {trainable}
  dgraph.variable @w1 : tensor<4x4xf32> = dense<0.25> {trainable}
  func.func @main(%x: tensor<2x4xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
    %w0 = dgraph.load @w0 {dgraph.layer = #dgraph.layer<module = "m">} : tensor<4x4xf32>
    %w1 = dgraph.load @w1 {dgraph.layer = #dgraph.layer<module = "m">} : tensor<4x4xf32>
    %h = dgraph.matmul %x, %w0 {dgraph.layer = #dgraph.layer<module = "m">} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %a = dgraph.tanh %h {dgraph.layer = #dgraph.layer<module = "m">} : tensor<2x4xf32>
    %y = dgraph.matmul %a, %w1 {dgraph.layer = #dgraph.layer<module = "m">} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %b = dgraph.sigmoid %y {dgraph.layer = #dgraph.layer<module = "m">} : tensor<2x4xf32>
    %s = dgraph.reduce_sum %b, dims = [0, 1] {dgraph.layer = #dgraph.layer<module = "m">} : (tensor<2x4xf32>) -> tensor<f32>
    return %s : tensor<f32>
  }
}
