// REQUIRES: valgrind
// RUN: dtcc-opt %s -dtcc-graph-autodiff -dtcc-graph-optimizer -canonicalize -cse -o %t.mlir
// RUN: %valgrind dtcc-opt %t.mlir -dtcc-plan-set="mesh=tp=2" -dtcc-plan-search-layouts="flops=1e9 bandwidth=1e10 latency=1e-6" | FileCheck %s

// Tests that grouping variables with their optimizer state reads no freed
// memory: naming a parameter's Adam moment grows the map of groups past
// its first buckets (12 names of 16) and used to leave the leader's entry
// dangling (--plan auto crashed on a U-Net this way). Six layers, each a
// weight with two moments: 18 names before the step counter.

// CHECK-LABEL: module @many
// CHECK-SAME: dshard.plan = #dshard.plan<{{.*}}layouts =
// CHECK-SAME: {{[{ ]}}fc0 = #dshard.sharding
// CHECK-SAME: {{[{ ]}}"fc5/adam_v" = #dshard.sharding

module @many {
  dgraph.variable @fc0 : tensor<32x64xf32> = dense<0.01> {trainable}
  dgraph.variable @fc1 : tensor<64x32xf32> = dense<0.01> {trainable}
  dgraph.variable @fc2 : tensor<32x64xf32> = dense<0.01> {trainable}
  dgraph.variable @fc3 : tensor<64x32xf32> = dense<0.01> {trainable}
  dgraph.variable @fc4 : tensor<32x64xf32> = dense<0.01> {trainable}
  dgraph.variable @fc5 : tensor<64x32xf32> = dense<0.01> {trainable}
  func.func @main(%x: tensor<8x32xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
    %w0 = dgraph.load @fc0 : tensor<32x64xf32>
    %m0 = dgraph.matmul %x, %w0 : (tensor<8x32xf32>, tensor<32x64xf32>) -> tensor<8x64xf32>
    %r0 = dgraph.relu %m0 : tensor<8x64xf32>
    %w1 = dgraph.load @fc1 : tensor<64x32xf32>
    %m1 = dgraph.matmul %r0, %w1 : (tensor<8x64xf32>, tensor<64x32xf32>) -> tensor<8x32xf32>
    %w2 = dgraph.load @fc2 : tensor<32x64xf32>
    %m2 = dgraph.matmul %m1, %w2 : (tensor<8x32xf32>, tensor<32x64xf32>) -> tensor<8x64xf32>
    %r2 = dgraph.relu %m2 : tensor<8x64xf32>
    %w3 = dgraph.load @fc3 : tensor<64x32xf32>
    %m3 = dgraph.matmul %r2, %w3 : (tensor<8x64xf32>, tensor<64x32xf32>) -> tensor<8x32xf32>
    %w4 = dgraph.load @fc4 : tensor<32x64xf32>
    %m4 = dgraph.matmul %m3, %w4 : (tensor<8x32xf32>, tensor<32x64xf32>) -> tensor<8x64xf32>
    %r4 = dgraph.relu %m4 : tensor<8x64xf32>
    %w5 = dgraph.load @fc5 : tensor<64x32xf32>
    %m5 = dgraph.matmul %r4, %w5 : (tensor<8x64xf32>, tensor<64x32xf32>) -> tensor<8x32xf32>
    %sq = dgraph.mul %m5, %m5 : tensor<8x32xf32>
    %sum = dgraph.reduce_sum %sq, dims = [0, 1] : (tensor<8x32xf32>) -> tensor<f32>
    return %sum : tensor<f32>
  }
}
