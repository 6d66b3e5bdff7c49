// RUN: dtcc-opt %s | dtcc-opt | FileCheck %s

// Every dshard op and attribute round-trips.
module attributes {dshard.mesh = #dshard.mesh<[dp = 2, pp = 1, tp = 2]>} {
  // CHECK: dgraph.variable @w : tensor<4x8xf32> = (tensor<8x8xf32>) dense<1.000000e+00> {dshard.sharding = #dshard.sharding<[{dp}, {}]>}
  dgraph.variable @w : tensor<4x8xf32> = (tensor<8x8xf32>) dense<1.0> {dshard.sharding = #dshard.sharding<[{dp}, {}]>}
  // CHECK-LABEL: func.func @collectives
  func.func @collectives(%x: tensor<8x12xf32>, %p: tensor<f32>) -> tensor<8x12xf32> {
    // CHECK: dshard.constraint %{{.*}}, <[{dp}, {tp}x3]>
    %c = dshard.constraint %x, <[{dp}, {tp}x3]> : tensor<8x12xf32>
    // CHECK: dshard.all_reduce %{{.*}} "tp" {kind = "max"} : tensor<f32>
    %m = dshard.all_reduce %p "tp" {kind = "max"} : tensor<f32>
    // CHECK: dshard.all_gather %{{.*}} "dp" dim = 0 : (tensor<8x12xf32>) -> tensor<16x12xf32>
    %g = dshard.all_gather %c "dp" dim = 0 : (tensor<8x12xf32>) -> tensor<16x12xf32>
    // CHECK: dshard.reduce_scatter %{{.*}} "dp" dim = 0 : (tensor<16x12xf32>) -> tensor<8x12xf32>
    %r = dshard.reduce_scatter %g "dp" dim = 0 : (tensor<16x12xf32>) -> tensor<8x12xf32>
    // CHECK: dshard.all_to_all %{{.*}} "tp" split_dim = 1, concat_dim = 0 : (tensor<8x12xf32>) -> tensor<16x6xf32>
    %a = dshard.all_to_all %r "tp" split_dim = 1, concat_dim = 0 : (tensor<8x12xf32>) -> tensor<16x6xf32>
    // CHECK: dshard.broadcast %{{.*}} "dp" root = 1 : tensor<8x12xf32>
    %b = dshard.broadcast %r "dp" root = 1 : tensor<8x12xf32>
    // CHECK: dshard.shard_slice %{{.*}} "tp" dim = 1 {groups = 3 : i64} : (tensor<8x12xf32>) -> tensor<8x6xf32>
    %s = dshard.shard_slice %b "tp" dim = 1 {groups = 3} : (tensor<8x12xf32>) -> tensor<8x6xf32>
    // CHECK: dshard.axis_index "tp" : tensor<i64>
    %i = dshard.axis_index "tp" : tensor<i64>
    // CHECK: dshard.send %{{.*}} "pp" peer = 1 tag = 3 {async = 1 : i64, handle = 7 : i64} : tensor<8x6xf32>
    dshard.send %s "pp" peer = 1 tag = 3 {async = 1 : i64, handle = 7 : i64} : tensor<8x6xf32>
    // CHECK: dshard.recv "pp" peer = -1 tag = 3 : tensor<8x6xf32>
    %v = dshard.recv "pp" peer = -1 tag = 3 : tensor<8x6xf32>
    // CHECK: dshard.wait 7, %{{.*}} : tensor<8x6xf32>
    dshard.wait 7, %s : tensor<8x6xf32>
    return %b : tensor<8x12xf32>
  }
}
