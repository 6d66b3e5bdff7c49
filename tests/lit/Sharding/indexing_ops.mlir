// RUN: dtcc-opt %s -dtcc-plan-set="mesh=dp=2" -dtcc-shard-annotate -dtcc-shard-propagate | FileCheck %s --check-prefix=PROP
// RUN: dtcc-opt %s -dtcc-plan-set="mesh=dp=2" -dtcc-shard-annotate -dtcc-shard-propagate -dtcc-shard-partition | FileCheck %s --check-prefix=DP

// Tests that resize, pad (reflect), top_k and gather_nd with a batch
// dimension split the batch over dp and keep their resampled, padded,
// selected and indexed dimensions whole: each rank computes its half with
// no collective until the loss.
// PROP: dgraph.resize {{.*}}dshard.shardings = [#dshard.sharding<[{dp}, {}, {}]>]
// PROP: dgraph.pad {{.*}}dshard.shardings = [#dshard.sharding<[{dp}, {}, {}]>]
// PROP: dgraph.top_k {{.*}}dshard.shardings = [#dshard.sharding<[{dp}, {}, {}]>, #dshard.sharding<[{dp}, {}, {}]>]
// PROP: dgraph.gather_nd {{.*}}dshard.shardings = [#dshard.sharding<[{dp}, {}, {}]>]
// DP-LABEL: func.func @train_step
// DP-NOT: dshard.all_gather
// DP: dgraph.resize %arg0 {{.*}} : (tensor<4x3x6xf32>) -> tensor<4x3x12xf32>
// DP: dgraph.pad {{.*}} : (tensor<4x3x12xf32>, tensor<f32>) -> tensor<4x3x16xf32>
// DP: dgraph.top_k {{.*}} : (tensor<4x3x16xf32>) -> (tensor<4x3x4xf32>, tensor<4x3x4xi64>)
// DP: dgraph.gather_nd {{.*}} : (tensor<4x3x4xf32>, tensor<4x5x1xi64>) -> tensor<4x5x4xf32>
// DP-NOT: dshard.all_gather
// DP: dshard.all_reduce
module {
  dgraph.variable @w : tensor<4xf32> = dense<0.5> {trainable}
  func.func @train_step(%x: tensor<8x3x6xf32> {dgraph.name = "x"}, %i: tensor<8x5x1xi64> {dgraph.name = "i"}) -> (tensor<f32> {dgraph.name = "loss"}) {
    %r = dgraph.resize %x scales = [1.0, 1.0, 2.0] {mode = "linear"} : (tensor<8x3x6xf32>) -> tensor<8x3x12xf32>
    %z = dgraph.constant dense<0.0> : tensor<f32>
    %p = dgraph.pad %r, %z, low = [0, 0, 2], high = [0, 0, 2] {mode = "reflect"} : (tensor<8x3x12xf32>, tensor<f32>) -> tensor<8x3x16xf32>
    %v, %k = dgraph.top_k %p, k = 4, axis = 2 : (tensor<8x3x16xf32>) -> (tensor<8x3x4xf32>, tensor<8x3x4xi64>)
    %g = dgraph.gather_nd %v, %i batch_dims = 1 : (tensor<8x3x4xf32>, tensor<8x5x1xi64>) -> tensor<8x5x4xf32>
    %s = dgraph.reduce_sum %g, dims = [0, 1, 2] : (tensor<8x5x4xf32>) -> tensor<f32>
    return %s : tensor<f32>
  }
}
