// RUN: dtcc-opt %s -split-input-file -dtcc-shard-propagate | FileCheck %s
// RUN: dtcc-opt %s -split-input-file -dtcc-shard-propagate -dtcc-shard-partition | FileCheck %s --check-prefix=PART

// Regressions found by the sharding conformance suite (tests/shardconf):
// shardings an op's rule allows that propagation did not take, or took in a
// form the partitioner computes wrongly.

// Tests that a factor sharing a dimension with a split factor stays whole:
// the input gradient's channels are [groups, channels per group]; with the
// groups over dp (from dy) the filter's channels per group are not also
// split over tp (from the filter), which would leave each rank computing
// its half group of channels as two groups of its own. The filter is
// gathered over tp instead.
// CHECK-LABEL: func.func @grouped_channels
// CHECK: dgraph.conv_input_grad {{.*}}dshard.in_shardings = [#dshard.sharding<[{}, {dp}, {}, {}]>, #dshard.sharding<[{dp}, {}, {}, {}]>], dshard.shardings = [#dshard.sharding<[{}, {dp}, {}, {}]>]
// PART-LABEL: func.func @grouped_channels
// PART: %[[W:.*]] = dshard.all_gather %{{.*}} "tp" dim = 1 {{.*}} -> tensor<4x4x2x2xf32>
// PART: dgraph.conv_input_grad %{{.*}}, %[[W]] {{.*}} groups = 1 : (tensor<4x4x3x4xf32>, tensor<4x4x2x2xf32>) -> tensor<4x4x5x4xf32>
module attributes {dshard.mesh = #dshard.mesh<[dp = 2, tp = 2]>} {
  func.func @grouped_channels(%dy: tensor<4x8x3x4xf32>, %w: tensor<8x4x2x2xf32>) -> tensor<4x8x5x4xf32> {
    %a = dshard.constraint %dy, <[{}, {dp}, {}, {}]> : tensor<4x8x3x4xf32>
    %b = dshard.constraint %w, <[{dp}, {tp}, {}, {}]> : tensor<8x4x2x2xf32>
    %dx = dgraph.conv_input_grad %a, %b strides = [2, 1], dilations = [1, 1], pad_low = [1, 0], pad_high = [0, 1], groups = 2 : (tensor<4x8x3x4xf32>, tensor<8x4x2x2xf32>) -> tensor<4x8x5x4xf32>
    return %dx : tensor<4x8x5x4xf32>
  }
}

// -----

// Tests that a dimension expanded from size 1 counts as new: the broadcast
// produces it split as its user wants instead of whole and then sliced.
// CHECK-LABEL: func.func @expand
// CHECK: dgraph.broadcast_in_dim {{.*}}dshard.in_shardings = [#dshard.sharding<[{dp}, {}]>], dshard.shardings = [#dshard.sharding<[{dp}, {tp}]>]
// PART-LABEL: func.func @expand
// PART: dgraph.broadcast_in_dim %{{.*}}, dims = [0, 1] : (tensor<2x1xf32>) -> tensor<2x4xf32>
// PART-NOT: dshard.shard_slice
module attributes {dshard.mesh = #dshard.mesh<[dp = 2, tp = 2]>} {
  func.func @expand(%x: tensor<4x1xf32>) -> tensor<4x8xf32> {
    %xc = dshard.constraint %x, <[{dp}, {}]> : tensor<4x1xf32>
    %b = dgraph.broadcast_in_dim %xc, dims = [0, 1] : (tensor<4x1xf32>) -> tensor<4x8xf32>
    %c = dshard.constraint %b, <[{dp}, {tp}]> : tensor<4x8xf32>
    return %c : tensor<4x8xf32>
  }
}

// -----

// Tests that a scatter_add whose updates are split (a partial sum over tp)
// still makes only this rank's rows when its user wants them split over
// dp: the rows stay partial over tp, and the all-reduce completes half of
// the table instead of all of it.
// CHECK-LABEL: func.func @scatter
// CHECK: dgraph.scatter_add {{.*}}dshard.shardings = [#dshard.sharding<[{dp}, {}], partial = {tp}>]
// PART-LABEL: func.func @scatter
// PART: %[[S:.*]] = dgraph.scatter_add {{.*}} : (tensor<2x4xf32>, tensor<2xi64>) -> tensor<4x4xf32>
// PART-NEXT: dshard.all_reduce %[[S]] "tp" {{.*}} : tensor<4x4xf32>
module attributes {dshard.mesh = #dshard.mesh<[dp = 2, tp = 2]>} {
  func.func @scatter(%u: tensor<4x4xf32>, %i: tensor<4xi64>) -> tensor<8x4xf32> {
    %uc = dshard.constraint %u, <[{tp}, {}]> : tensor<4x4xf32>
    %ic = dshard.constraint %i, <[{tp}]> : tensor<4xi64>
    %s = dgraph.scatter_add %uc, %ic axis = 0, dim_size = 8 : (tensor<4x4xf32>, tensor<4xi64>) -> tensor<8x4xf32>
    %c = dshard.constraint %s, <[{dp}, {}]> : tensor<8x4xf32>
    return %c : tensor<8x4xf32>
  }
}
