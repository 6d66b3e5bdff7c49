// RUN: dtcc-opt %s -split-input-file -dtcc-plan-set="mesh=dp=2" -dtcc-graph-autodiff -dtcc-graph-optimizer -dtcc-shard-annotate -dtcc-shard-propagate | FileCheck %s --check-prefix=DP
// RUN: dtcc-opt %s -split-input-file -dtcc-plan-set="mesh=pp=2 micro-batches=2" -dtcc-graph-autodiff -dtcc-shard-microbatch | FileCheck %s --check-prefix=MICRO

// Tests that a scalar input (a temperature) has no batch dimension: under
// dp it is replicated, every rank taking the whole value, while the batch
// is split; unrolled over micro-batches (a pipeline) each micro-batch reads
// the whole scalar and only the batch is sliced.
// DP-LABEL: func.func @train_step
// DP-SAME: tensor<8x4xf32> {dgraph.name = "x", dshard.sharding = #dshard.sharding<[{dp}, {}]>}
// DP-SAME: tensor<f32> {dgraph.name = "temp", dshard.sharding = #dshard.sharding<[]>}
// MICRO-LABEL: func.func @train_step
// MICRO-SAME: (%[[X:.*]]: tensor<16x4xf32> {dgraph.name = "x"}, %[[T:.*]]: tensor<f32> {dgraph.name = "temp"})
// MICRO: dgraph.slice %[[X]], start = [0, 0], limit = [8, 4]
// MICRO: dgraph.broadcast_in_dim %[[T]], dims = [] {dshard.micro = 0
// MICRO: dgraph.slice %[[X]], start = [8, 0], limit = [16, 4]
// MICRO: dgraph.broadcast_in_dim %[[T]], dims = [] {dshard.micro = 1
// MICRO-NOT: dgraph.slice %[[T]]
dgraph.variable @w : tensor<4x2xf32> = dense<0.5> {trainable}
func.func @main(%x: tensor<8x4xf32> {dgraph.name = "x"}, %temp: tensor<f32> {dgraph.name = "temp"}) -> (tensor<f32> {dgraph.name = "loss"}) {
  %w = dgraph.load @w : tensor<4x2xf32>
  %y = dgraph.matmul %x, %w : (tensor<8x4xf32>, tensor<4x2xf32>) -> tensor<8x2xf32>
  %tb = dgraph.broadcast_in_dim %temp, dims = [] : (tensor<f32>) -> tensor<8x2xf32>
  %z = dgraph.div %y, %tb : tensor<8x2xf32>
  %l = dgraph.reduce_sum %z, dims = [0, 1] : (tensor<8x2xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
