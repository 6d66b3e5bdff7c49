// RUN: dtcc-opt %s -split-input-file -dtcc-graph-autodiff -dtcc-graph-optimizer -canonicalize -cse -dtcc-plan-set="mesh=tp=2" -dtcc-plan-search-layouts="flops=1e9 bandwidth=1e10 latency=1e-6" | FileCheck %s
// RUN: dtcc-opt %s -split-input-file -dtcc-graph-autodiff -dtcc-graph-optimizer -canonicalize -cse -dtcc-plan-set="mesh=tp=2" -dtcc-plan-search-layouts="flops=1e9 bandwidth=1e10 latency=1e-6 constraints=0" | FileCheck %s --check-prefix=LAYOUTS

// Each case is a forward pass whose training step (AdamW) the RUN line
// builds; figures: 1 GFLOP/s, 10 GB/s, 1 us per ring step (compute-bound).

// Tests that two wide layers are split column-parallel then row-parallel
// (Megatron): one all-reduce of the [16, 64] output forward, none backward,
// half the multiply-adds; the optimizer state shares each layout.

// CHECK-LABEL: module @megatron
// CHECK-SAME: dshard.plan = #dshard.plan<{{.*}}layouts =
// CHECK-SAME: {{[{ ]}}fc0 = #dshard.sharding<[{}, {tp}]>
// CHECK-SAME: {{[{ ]}}"fc0/adam_m" = #dshard.sharding<[{}, {tp}]>
// CHECK-SAME: {{[{ ]}}fc1 = #dshard.sharding<[{tp}, {}]>
// CHECK-NOT: dshard.constraint
// LAYOUTS-LABEL: module @megatron
// LAYOUTS-SAME: dshard.plan = #dshard.plan<{{.*}}layouts =
// LAYOUTS-SAME: {{[{ ]}}fc0 = #dshard.sharding<[{}, {tp}]>
// LAYOUTS-SAME: {{[{ ]}}fc1 = #dshard.sharding<[{tp}, {}]>

module @megatron {
  dgraph.variable @fc0 : tensor<64x512xf32> = dense<0.01> {trainable}
  dgraph.variable @fc1 : tensor<512x64xf32> = dense<0.01> {trainable}
  func.func @main(%x: tensor<16x64xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
    %w0 = dgraph.load @fc0 : tensor<64x512xf32>
    %m0 = dgraph.matmul %x, %w0 : (tensor<16x64xf32>, tensor<64x512xf32>) -> tensor<16x512xf32>
    %r0 = dgraph.relu %m0 : tensor<16x512xf32>
    %w1 = dgraph.load @fc1 : tensor<512x64xf32>
    %m1 = dgraph.matmul %r0, %w1 : (tensor<16x512xf32>, tensor<512x64xf32>) -> tensor<16x64xf32>
    %sq = dgraph.mul %m1, %m1 : tensor<16x64xf32>
    %sum = dgraph.reduce_sum %sq, dims = [0, 1] : (tensor<16x64xf32>) -> tensor<f32>
    %n = dgraph.constant dense<1024.0> : tensor<f32>
    %loss = dgraph.div %sum, %n : tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// Tests that a narrow bottleneck between wide layers makes the search
// reshard its small activations (constraints) rather than gather the wide
// ones, and that without constraints only layouts change.

// CHECK-LABEL: module @bottleneck
// CHECK-SAME: dshard.plan = #dshard.plan<{{.*}}layouts =
// CHECK-SAME: {{[{ ]}}fc0 = #dshard.sharding<[{}, {tp}]>
// CHECK: dshard.constraint {{.*}} : tensor<16x4xf32>
// LAYOUTS-LABEL: module @bottleneck
// LAYOUTS-NOT: dshard.constraint

module @bottleneck {
  dgraph.variable @fc0 : tensor<64x512xf32> = dense<0.01> {trainable}
  dgraph.variable @fc1 : tensor<512x4xf32> = dense<0.01> {trainable}
  dgraph.variable @fc2 : tensor<4x64xf32> = dense<0.01> {trainable}
  func.func @main(%x: tensor<16x64xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
    %w0 = dgraph.load @fc0 : tensor<64x512xf32>
    %m0 = dgraph.matmul %x, %w0 : (tensor<16x64xf32>, tensor<64x512xf32>) -> tensor<16x512xf32>
    %r0 = dgraph.relu %m0 : tensor<16x512xf32>
    %w1 = dgraph.load @fc1 : tensor<512x4xf32>
    %m1 = dgraph.matmul %r0, %w1 : (tensor<16x512xf32>, tensor<512x4xf32>) -> tensor<16x4xf32>
    %r1 = dgraph.relu %m1 : tensor<16x4xf32>
    %w2 = dgraph.load @fc2 : tensor<4x64xf32>
    %m2 = dgraph.matmul %r1, %w2 : (tensor<16x4xf32>, tensor<4x64xf32>) -> tensor<16x64xf32>
    %sq = dgraph.mul %m2, %m2 : tensor<16x64xf32>
    %sum = dgraph.reduce_sum %sq, dims = [0, 1] : (tensor<16x64xf32>) -> tensor<f32>
    %n = dgraph.constant dense<1024.0> : tensor<f32>
    %loss = dgraph.div %sum, %n : tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// Tests that a weight too small to split stays whole and its product is
// split by rows of the batch instead: a constraint the forward walk of
// propagation would not make; restricted to layouts, the search can only
// split the weight.

// CHECK-LABEL: module @batch_split
// CHECK-SAME: dshard.plan = #dshard.plan<{{.*}}layouts =
// CHECK-SAME: {{[{ ]}}fc0 = #dshard.sharding<[{}, {}]>
// CHECK: func.func @train_step(%[[X:[a-z0-9]+]]:
// CHECK: %[[C:.*]] = dshard.constraint %[[X]], <[{tp}, {}]> : tensor<1024x4xf32>
// CHECK-NEXT: dgraph.matmul %[[C]],
// LAYOUTS-LABEL: module @batch_split
// LAYOUTS-SAME: dshard.plan = #dshard.plan<{{.*}}layouts =
// LAYOUTS-SAME: {{[{ ]}}fc0 = #dshard.sharding<[{}, {tp}]>
// LAYOUTS-NOT: dshard.constraint

module @batch_split {
  dgraph.variable @fc0 : tensor<4x4xf32> = dense<0.01> {trainable}
  func.func @main(%x: tensor<1024x4xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
    %w0 = dgraph.load @fc0 : tensor<4x4xf32>
    %m0 = dgraph.matmul %x, %w0 : (tensor<1024x4xf32>, tensor<4x4xf32>) -> tensor<1024x4xf32>
    %sq = dgraph.mul %m0, %m0 : tensor<1024x4xf32>
    %sum = dgraph.reduce_sum %sq, dims = [0, 1] : (tensor<1024x4xf32>) -> tensor<f32>
    %n = dgraph.constant dense<4096.0> : tensor<f32>
    %loss = dgraph.div %sum, %n : tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// Tests that two branches of one input are both split by columns and
// their sum stays split, so the joining layer is row-parallel.

// CHECK-LABEL: module @branchy
// CHECK-SAME: dshard.plan = #dshard.plan<{{.*}}layouts =
// CHECK-SAME: {{[{ ]}}A = #dshard.sharding<[{}, {tp}]>
// CHECK-SAME: {{[{ ]}}B = #dshard.sharding<[{}, {tp}]>
// CHECK-SAME: {{[{ ]}}C = #dshard.sharding<[{tp}, {}]>
// CHECK-NOT: dshard.constraint
// LAYOUTS-LABEL: module @branchy
// LAYOUTS-SAME: dshard.plan = #dshard.plan<{{.*}}layouts =
// LAYOUTS-SAME: {{[{ ]}}A = #dshard.sharding<[{}, {tp}]>
// LAYOUTS-SAME: {{[{ ]}}B = #dshard.sharding<[{}, {tp}]>
// LAYOUTS-SAME: {{[{ ]}}C = #dshard.sharding<[{tp}, {}]>

module @branchy {
  dgraph.variable @A : tensor<64x512xf32> = dense<0.01> {trainable}
  dgraph.variable @B : tensor<64x512xf32> = dense<0.01> {trainable}
  dgraph.variable @C : tensor<512x32xf32> = dense<0.01> {trainable}
  func.func @main(%x: tensor<16x64xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
    %a = dgraph.load @A : tensor<64x512xf32>
    %b = dgraph.load @B : tensor<64x512xf32>
    %c = dgraph.load @C : tensor<512x32xf32>
    %xa = dgraph.matmul %x, %a : (tensor<16x64xf32>, tensor<64x512xf32>) -> tensor<16x512xf32>
    %xb = dgraph.matmul %x, %b : (tensor<16x64xf32>, tensor<64x512xf32>) -> tensor<16x512xf32>
    %ra = dgraph.relu %xa : tensor<16x512xf32>
    %rb = dgraph.relu %xb : tensor<16x512xf32>
    %s = dgraph.add %ra, %rb : tensor<16x512xf32>
    %y = dgraph.matmul %s, %c : (tensor<16x512xf32>, tensor<512x32xf32>) -> tensor<16x32xf32>
    %sq = dgraph.mul %y, %y : tensor<16x32xf32>
    %sum = dgraph.reduce_sum %sq, dims = [0, 1] : (tensor<16x32xf32>) -> tensor<f32>
    %n = dgraph.constant dense<512.0> : tensor<f32>
    %loss = dgraph.div %sum, %n : tensor<f32>
    return %loss : tensor<f32>
  }
}
