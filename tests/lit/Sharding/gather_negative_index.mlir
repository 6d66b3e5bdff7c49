// RUN: dtcc-opt %s -dtcc-plan-set="mesh=tp=2" -dtcc-shard-annotate -dtcc-shard-propagate -dtcc-shard-partition | FileCheck %s

// A lookup along a split dimension with indices counted from its end
// (Falcon's `fused_qkv[..., [-2], :]`, a gather of index -2 along the heads):
// each rank wraps the indices by the dimension's global size (6) before it
// subtracts its block's offset, so rank 1 finds head 4 among its heads 3-5
// (without the wrap -2 fell in no rank's block and the lookup summed to zero).
module {
  dgraph.variable @w : tensor<6x4xf32> = dense<0.5> {trainable}
  func.func @train_step(%x: tensor<3x4xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
    %w = dgraph.load @w : tensor<6x4xf32>
    %ids = dgraph.constant dense<[-2]> : tensor<1xi64>
    %row = dgraph.gather %w, %ids axis = 0 : (tensor<6x4xf32>, tensor<1xi64>) -> tensor<1x4xf32>
    %y = dgraph.matmul %x, %row {transpose_rhs} : (tensor<3x4xf32>, tensor<1x4xf32>) -> tensor<3x1xf32>
    %loss = dgraph.reduce_sum %y, dims = [0, 1] : (tensor<3x1xf32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
// CHECK: dgraph.variable @w : tensor<3x4xf32> = (tensor<6x4xf32>) {{.*}}dshard.sharding = #dshard.sharding<[{tp}, {}]>
// CHECK: %[[IDS:.*]] = dgraph.constant dense<-2> : tensor<1xi64>
// CHECK: %[[NEG:.*]] = dgraph.lt %[[IDS]], %{{.*}} : tensor<1xi64>
// CHECK: %[[SIX:.*]] = dgraph.constant dense<6> : tensor<1xi64>
// CHECK: %[[UP:.*]] = dgraph.add %[[IDS]], %[[SIX]] : tensor<1xi64>
// CHECK: %[[WRAPPED:.*]] = dgraph.select %[[NEG]], %[[UP]], %[[IDS]] : tensor<1xi64>
// CHECK: dshard.axis_index "tp"
// CHECK: dgraph.sub %[[WRAPPED]]
// CHECK: dgraph.gather
// CHECK: dshard.all_reduce
