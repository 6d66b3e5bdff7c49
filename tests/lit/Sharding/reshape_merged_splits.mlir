// RUN: dtcc-opt %s -dtcc-shard-propagate | FileCheck %s --check-prefix=PROP
// RUN: dtcc-opt %s -dtcc-shard-propagate -dtcc-shard-partition | FileCheck %s --check-prefix=PART

// Tests that a reshape merging two dimensions split over different axes
// ([3, 6, 6] split {tp} and {dp} -> [108]) keeps only the split its merged
// dimension can show (tp, the outer one) on both sides: the operand is
// gathered over dp first, so operand and result hold the same elements.
// (Before, the operand kept both splits, 27 local elements against the
// result's 54: an invalid reshape after partitioning.)
// PROP-LABEL: func.func @train_step
// PROP: dgraph.reshape %{{.*}} {dshard.in_shardings = [#dshard.sharding<[{}, {tp}, {}]>], dshard.shardings = [#dshard.sharding<[{tp}x3]>]} : (tensor<3x6x6xf32>) -> tensor<108xf32>
// PART-LABEL: func.func @train_step
// PART: %[[X:.*]] = dgraph.load @x : tensor<3x3x3xf32>
// PART: %[[G:.*]] = dshard.all_gather %[[X]] "dp" dim = 2 {{.*}} : (tensor<3x3x3xf32>) -> tensor<3x3x6xf32>
// PART: dgraph.reshape %[[G]] : (tensor<3x3x6xf32>) -> tensor<54xf32>
module attributes {dshard.mesh = #dshard.mesh<[dp = 2, tp = 2]>} {
  dgraph.variable @x : tensor<3x6x6xf32> = dense<1.0> {dshard.sharding = #dshard.sharding<[{}, {tp}, {dp}]>}
  func.func @train_step() -> (tensor<f32> {dgraph.name = "loss"}) {
    %x = dgraph.load @x : tensor<3x6x6xf32>
    %r = dgraph.reshape %x : (tensor<3x6x6xf32>) -> tensor<108xf32>
    %e = dgraph.exp %r : tensor<108xf32>
    %s = dgraph.reduce_sum %e, dims = [0] : (tensor<108xf32>) -> tensor<f32>
    return %s : tensor<f32>
  }
}
