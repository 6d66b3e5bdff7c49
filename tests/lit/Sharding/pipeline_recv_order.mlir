// RUN: dtcc-opt %s -dtcc-plan-set="mesh=pp=2 micro-batches=2 schedule=1f1b" -dtcc-graph-autodiff -dtcc-shard-microbatch -dtcc-graph-optimizer -canonicalize -dtcc-shard-pipeline | FileCheck %s

// Tests that a stage receives the values another stage sends it in the
// order they are sent, not the order it reads them: NCCL matches the
// messages between two ranks by order. Layer 1 reads %b (sent second)
// before %a (sent first), so the receive of %a moves up before it.
module {
  dgraph.variable @w0 : tensor<4x4xf32> = dense<0.5> {trainable}
  dgraph.variable @w1 : tensor<4x4xf32> = dense<0.25> {trainable}
  func.func @main(%x: tensor<2x4xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
    %w0 = dgraph.load @w0 {dgraph.layer = #dgraph.layer<index = 0>} : tensor<4x4xf32> loc("layers.0/load")
    %w1 = dgraph.load @w1 {dgraph.layer = #dgraph.layer<index = 1>} : tensor<4x4xf32> loc("layers.1/load")
    %h = dgraph.matmul %x, %w0 {dgraph.layer = #dgraph.layer<index = 0>} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("layers.0/MatMul")
    %a = dgraph.tanh %h {dgraph.layer = #dgraph.layer<index = 0>} : tensor<2x4xf32> loc("layers.0/Tanh")
    %b = dgraph.sigmoid %h {dgraph.layer = #dgraph.layer<index = 0>} : tensor<2x4xf32> loc("layers.0/Sigmoid")
    %y = dgraph.matmul %b, %w1 {dgraph.layer = #dgraph.layer<index = 1>} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("layers.1/MatMul")
    %z = dgraph.add %y, %a {dgraph.layer = #dgraph.layer<index = 1>} : tensor<2x4xf32> loc("layers.1/Add")
    %s = dgraph.reduce_sum %z, dims = [0, 1] : (tensor<2x4xf32>) -> tensor<f32> loc("loss/Sum")
    return %s : tensor<f32>
  }
}
// Stage 0 sends %a, then %b, for each micro-batch.
// CHECK-LABEL: func.func @train_step_pp0
// CHECK: dgraph.tanh
// CHECK-NEXT: dshard.send %{{.*}} "pp" peer = 1 tag = [[A0:[0-9]+]]
// CHECK-NEXT: dgraph.sigmoid
// CHECK-NEXT: dshard.send %{{.*}} "pp" peer = 1 tag = [[B0:[0-9]+]]
// CHECK: dgraph.tanh
// CHECK-NEXT: dshard.send %{{.*}} "pp" peer = 1 tag = [[A1:[0-9]+]]
// CHECK-NEXT: dgraph.sigmoid
// CHECK-NEXT: dshard.send %{{.*}} "pp" peer = 1 tag = [[B1:[0-9]+]]
// Stage 1 receives them in that order, both before the matmul reads %b.
// CHECK-LABEL: func.func @train_step_pp1
// CHECK: %[[RA0:.*]] = dshard.recv "pp" peer = -1 tag = [[A0]]
// CHECK-NEXT: %[[RB0:.*]] = dshard.recv "pp" peer = -1 tag = [[B0]]
// CHECK-NEXT: dgraph.matmul %[[RB0]]
// CHECK-NEXT: dgraph.add %{{.*}}, %[[RA0]]
// CHECK: %[[RA1:.*]] = dshard.recv "pp" peer = -1 tag = [[A1]]
// CHECK-NEXT: %[[RB1:.*]] = dshard.recv "pp" peer = -1 tag = [[B1]]
// CHECK-NEXT: dgraph.matmul %[[RB1]]
