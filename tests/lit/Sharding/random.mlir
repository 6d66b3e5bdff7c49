// RUN: dtcc-opt %s -split-input-file -dtcc-shard-propagate -dtcc-shard-partition -verify-diagnostics | FileCheck %s

// Tests that a random draw whose result is split (by its user's layout)
// draws the single-device tensor's block: its offsets along each dimension
// (the rank's coordinates on the dimension's axes times the block's size)
// and the whole tensor's shape go to the op.
// CHECK-LABEL: func.func @split
// CHECK: %[[DP:.*]] = dshard.axis_index "dp"
// CHECK: %[[TWO:.*]] = dgraph.constant dense<2> : tensor<i64>
// CHECK: %[[O0:.*]] = dgraph.mul %[[DP]], %[[TWO]]
// CHECK: %[[R0:.*]] = dgraph.reshape %[[O0]] : (tensor<i64>) -> tensor<1xi64>
// CHECK: %[[TP:.*]] = dshard.axis_index "tp"
// CHECK: %[[FOUR:.*]] = dgraph.constant dense<4> : tensor<i64>
// CHECK: %[[O1:.*]] = dgraph.mul %[[TP]], %[[FOUR]]
// CHECK: %[[R1:.*]] = dgraph.reshape %[[O1]] : (tensor<i64>) -> tensor<1xi64>
// CHECK: %[[OFF:.*]] = dgraph.concat %[[R0]], %[[R1]] dim = 0
// CHECK: %[[Z:.*]] = dgraph.random %{{.*}}, %[[OFF]] {distribution = "normal", global_shape = array<i64: 4, 8>, scale = 1.000000e+00 : f64, seed = 3 : i64, shift = 0.000000e+00 : f64} : (tensor<i64>, tensor<2xi64>) -> tensor<2x4xf32>
// CHECK: dgraph.mul %{{.*}}, %[[Z]] : tensor<2x4xf32>
module attributes {dshard.mesh = #dshard.mesh<[dp = 2, tp = 2]>} {
  func.func @split(%x: tensor<4x8xf32>, %step: tensor<i64>) -> tensor<4x8xf32> {
    %xc = dshard.constraint %x, <[{dp}, {tp}]> : tensor<4x8xf32>
    %z = dgraph.random %step {distribution = "normal", shift = 0.0, scale = 1.0, seed = 3} : (tensor<i64>) -> tensor<4x8xf32>
    %y = dgraph.mul %xc, %z : tensor<4x8xf32>
    return %y : tensor<4x8xf32>
  }
}

// -----

// Tests that a draw whose result stays whole draws the whole tensor: no
// offsets.
// CHECK-LABEL: func.func @whole
// CHECK-NOT: dshard.axis_index
// CHECK: dgraph.random %{{.*}} {distribution = "uniform", scale = 1.000000e+00 : f64, seed = 5 : i64, shift = 0.000000e+00 : f64} : (tensor<i64>) -> tensor<4x8xf32>
module attributes {dshard.mesh = #dshard.mesh<[dp = 2]>} {
  func.func @whole(%x: tensor<4x8xf32>, %step: tensor<i64>) -> tensor<4x8xf32> {
    %u = dgraph.random %step {distribution = "uniform", shift = 0.0, scale = 1.0, seed = 5} : (tensor<i64>) -> tensor<4x8xf32>
    %y = dgraph.add %x, %u : tensor<4x8xf32>
    return %y : tensor<4x8xf32>
  }
}

// -----

// Tests that a dimension split in groups (blocks that are not contiguous)
// draws the whole tensor and slices it: the single device's values still.
// CHECK-LABEL: func.func @groups
// CHECK: %[[Z:.*]] = dgraph.random %{{.*}} {distribution = "uniform", scale = 1.000000e+00 : f64, seed = 3 : i64, shift = 0.000000e+00 : f64} : (tensor<i64>) -> tensor<4x8xf32>
// CHECK: dshard.shard_slice %[[Z]] "tp" dim = 1 {groups = 2 : i64
module attributes {dshard.mesh = #dshard.mesh<[tp = 2]>} {
  func.func @groups(%x: tensor<4x8xf32>, %step: tensor<i64>) -> tensor<4x8xf32> {
    %xc = dshard.constraint %x, <[{}, {tp}x2]> : tensor<4x8xf32>
    %z = dgraph.random %step {distribution = "uniform", shift = 0.0, scale = 1.0, seed = 3} : (tensor<i64>) -> tensor<4x8xf32>
    %y = dgraph.mul %xc, %z : tensor<4x8xf32>
    return %y : tensor<4x8xf32>
  }
}

// -----

// Tests that a draw whose users want it split differently is drawn whole
// and sliced for each.
// CHECK-LABEL: func.func @disagree
// CHECK: %[[Z:.*]] = dgraph.random %{{.*}} : (tensor<i64>) -> tensor<4x8xf32>
// CHECK-DAG: dshard.shard_slice %[[Z]] "tp" dim = 0
// CHECK-DAG: dshard.shard_slice %[[Z]] "tp" dim = 1
module attributes {dshard.mesh = #dshard.mesh<[tp = 2]>} {
  func.func @disagree(%x: tensor<4x8xf32>, %w: tensor<4x8xf32>, %step: tensor<i64>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
    %xc = dshard.constraint %x, <[{tp}, {}]> : tensor<4x8xf32>
    %wc = dshard.constraint %w, <[{}, {tp}]> : tensor<4x8xf32>
    %z = dgraph.random %step {distribution = "normal", shift = 0.0, scale = 1.0, seed = 3} : (tensor<i64>) -> tensor<4x8xf32>
    %a = dgraph.mul %xc, %z : tensor<4x8xf32>
    %b = dgraph.mul %wc, %z : tensor<4x8xf32>
    return %a, %b : tensor<4x8xf32>, tensor<4x8xf32>
  }
}
