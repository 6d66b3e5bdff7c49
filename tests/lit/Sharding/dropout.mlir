// RUN: dtcc-opt %s -split-input-file -dtcc-shard-propagate -dtcc-shard-partition -verify-diagnostics | FileCheck %s

// Tests that a dropout on a split tensor draws the single-device mask: its
// block's offsets along each dimension (the rank's coordinates on the
// dimension's axes times the block's size) and the whole tensor's shape
// go to the op.
// CHECK-LABEL: func.func @split
// CHECK: %[[X:.*]] = dshard.shard_slice %{{.*}} "tp" dim = 1
// CHECK: %[[DP:.*]] = dshard.axis_index "dp"
// CHECK: %[[TWO:.*]] = dgraph.constant dense<2> : tensor<i64>
// CHECK: %[[O0:.*]] = dgraph.mul %[[DP]], %[[TWO]]
// CHECK: %[[R0:.*]] = dgraph.reshape %[[O0]] : (tensor<i64>) -> tensor<1xi64>
// CHECK: %[[TP:.*]] = dshard.axis_index "tp"
// CHECK: %[[FOUR:.*]] = dgraph.constant dense<4> : tensor<i64>
// CHECK: %[[O1:.*]] = dgraph.mul %[[TP]], %[[FOUR]]
// CHECK: %[[R1:.*]] = dgraph.reshape %[[O1]] : (tensor<i64>) -> tensor<1xi64>
// CHECK: %[[OFF:.*]] = dgraph.concat %[[R0]], %[[R1]] dim = 0
// CHECK: dgraph.dropout %[[X]], %{{.*}}, %[[OFF]] {global_shape = array<i64: 4, 8>, ratio = 5.000000e-01 : f32, seed = 3 : i64} : (tensor<2x4xf32>, tensor<i64>, tensor<2xi64>) -> (tensor<2x4xf32>, tensor<2x4xi1>)
module attributes {dshard.mesh = #dshard.mesh<[dp = 2, tp = 2]>} {
  func.func @split(%x: tensor<4x8xf32>, %step: tensor<i64>) -> (tensor<4x8xf32>, tensor<4x8xi1>) {
    %xc = dshard.constraint %x, <[{dp}, {tp}]> : tensor<4x8xf32>
    %y, %m = dgraph.dropout %xc, %step {ratio = 0.5 : f32, seed = 3} : (tensor<4x8xf32>, tensor<i64>) -> (tensor<4x8xf32>, tensor<4x8xi1>)
    return %y, %m : tensor<4x8xf32>, tensor<4x8xi1>
  }
}

// -----

// Tests that a dimension split over two axes takes their coordinates
// row-major (dp major).
// CHECK-LABEL: func.func @two_axes
// CHECK: %[[DP:.*]] = dshard.axis_index "dp"
// CHECK: %[[TP:.*]] = dshard.axis_index "tp"
// CHECK: %[[M:.*]] = dgraph.mul %[[DP]], %{{.*}}
// CHECK: %[[C:.*]] = dgraph.add %[[M]], %[[TP]]
// CHECK: %[[O:.*]] = dgraph.mul %[[C]], %{{.*}}
// CHECK: %[[R:.*]] = dgraph.reshape %[[O]] : (tensor<i64>) -> tensor<1xi64>
// CHECK: dgraph.dropout %{{.*}}, %{{.*}}, %[[R]] {global_shape = array<i64: 8>
module attributes {dshard.mesh = #dshard.mesh<[dp = 2, tp = 2]>} {
  func.func @two_axes(%x: tensor<8xf32>, %step: tensor<i64>) -> tensor<8xf32> {
    %xc = dshard.constraint %x, <[{dp, tp}]> : tensor<8xf32>
    %y, %m = dgraph.dropout %xc, %step {ratio = 0.5 : f32, seed = 3} : (tensor<8xf32>, tensor<i64>) -> (tensor<8xf32>, tensor<8xi1>)
    return %y : tensor<8xf32>
  }
}

// -----

// Tests that a dimension split in groups (blocks that are not contiguous)
// is an error rather than a mask that differs from one device's.
module attributes {dshard.mesh = #dshard.mesh<[tp = 2]>} {
  func.func @groups(%x: tensor<4x8xf32>, %step: tensor<i64>) -> tensor<4x8xf32> {
    %xc = dshard.constraint %x, <[{}, {tp}x2]> : tensor<4x8xf32>
    // expected-error @+1 {{on a tensor whose dimension 1 is split in 2 groups is not supported: its blocks are not contiguous}}
    %y, %m = dgraph.dropout %xc, %step {ratio = 0.5 : f32, seed = 3} : (tensor<4x8xf32>, tensor<i64>) -> (tensor<4x8xf32>, tensor<4x8xi1>)
    return %y : tensor<4x8xf32>
  }
}
