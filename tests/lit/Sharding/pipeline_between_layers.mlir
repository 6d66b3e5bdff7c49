// RUN: dtcc-opt %s -dtcc-plan-set="mesh=pp=2 micro-batches=2" -dtcc-graph-autodiff -dtcc-shard-microbatch -dtcc-graph-optimizer -canonicalize -dtcc-shard-pipeline | FileCheck %s

// An op outside the layers between two stages' layers with a parameter of
// its own (ConvNeXt's downsampling between its stages: here a bias add)
// runs in the stage of its operands, and so does its backward, which
// reads only gradients (the bias's is a sum of the gradient arriving from
// stage 1): its VJP carries the node's location ("down/Add"), and goes with
// the forward ops of that node. Stage 0 reads the bias and updates it
// (it was updated in stage 1, which the pass refused).
// CHECK: dgraph.variable @b : tensor<4xf32> = dense<1.000000e-01> {dshard.stage = 0 : i64, trainable}
// CHECK-LABEL: func.func @train_step_pp0
// CHECK: dgraph.store %{{.*}}, @b : tensor<4xf32>
// CHECK-LABEL: func.func @train_step_pp1
// CHECK-NOT: @b
// CHECK: return
module {
  dgraph.variable @w0 : tensor<4x4xf32> = dense<0.5> {trainable}
  dgraph.variable @b : tensor<4xf32> = dense<0.1> {trainable}
  dgraph.variable @w1 : tensor<4x4xf32> = dense<0.25> {trainable}
  func.func @main(%x: tensor<2x4xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
    %w0 = dgraph.load @w0 {dgraph.layer = #dgraph.layer<index = 0>} : tensor<4x4xf32>
    %b = dgraph.load @b : tensor<4xf32>
    %w1 = dgraph.load @w1 {dgraph.layer = #dgraph.layer<index = 1>} : tensor<4x4xf32>
    %h0 = dgraph.matmul %x, %w0 {dgraph.layer = #dgraph.layer<index = 0>} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("l0/MatMul")
    %a0 = dgraph.tanh %h0 {dgraph.layer = #dgraph.layer<index = 0>} : tensor<2x4xf32> loc("l0/Tanh")
    %bb = dgraph.broadcast_in_dim %b, dims = [1] : (tensor<4xf32>) -> tensor<2x4xf32> loc("down/Add")
    %d = dgraph.add %a0, %bb : tensor<2x4xf32> loc("down/Add")
    %h1 = dgraph.matmul %d, %w1 {dgraph.layer = #dgraph.layer<index = 1>} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("l1/MatMul")
    %a1 = dgraph.tanh %h1 {dgraph.layer = #dgraph.layer<index = 1>} : tensor<2x4xf32> loc("l1/Tanh")
    %s = dgraph.reduce_sum %a1, dims = [0, 1] : (tensor<2x4xf32>) -> tensor<f32>
    return %s : tensor<f32>
  }
}
