// RUN: dtcc-opt %s -dtcc-plan-set="mesh=tp=2" -dtcc-shard-annotate -dtcc-shard-propagate -dtcc-shard-partition -canonicalize | FileCheck %s
// RUN: dtcc-opt %s -dtcc-plan-set="mesh=dp=2,tp=2 zero=1" -dtcc-shard-annotate -dtcc-shard-propagate -dtcc-shard-partition -canonicalize | FileCheck %s --check-prefix=Z1

// Megatron's MLP block: fc1 column parallel (bias too), fc2 row parallel,
// one all-reduce in the forward pass before fc2's bias; the fused output
// sliced in three parts is split part by part.
module {
  dgraph.variable @fc1 : tensor<4x12xf32> = dense<0.5> {trainable}
  dgraph.variable @b1 : tensor<12xf32> = dense<0.1> {trainable}
  dgraph.variable @fc2 : tensor<4x4xf32> = dense<0.25> {trainable}
  dgraph.variable @b2 : tensor<4xf32> = dense<0.0> {trainable}
  dgraph.variable @"fc1/adam_m" : tensor<4x12xf32> = dense<0.0>
  dgraph.variable @"fc1/adam_v" : tensor<4x12xf32> = dense<0.0>
  dgraph.variable @__step : tensor<i64> = dense<0>
  func.func @train_step(%x: tensor<8x4xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
    %one = dgraph.constant dense<1.0> : tensor<f32>
    %w1 = dgraph.load @fc1 : tensor<4x12xf32>
    %b1 = dgraph.load @b1 : tensor<12xf32>
    %w2 = dgraph.load @fc2 : tensor<4x4xf32>
    %b2 = dgraph.load @b2 : tensor<4xf32>
    %h = dgraph.matmul %x, %w1 : (tensor<8x4xf32>, tensor<4x12xf32>) -> tensor<8x12xf32>
    %bb = dgraph.broadcast_in_dim %b1, dims = [1] : (tensor<12xf32>) -> tensor<8x12xf32>
    %hb = dgraph.add %h, %bb : tensor<8x12xf32>
    %q = dgraph.slice %hb, start = [0, 0], limit = [8, 4], stride = [1, 1] : (tensor<8x12xf32>) -> tensor<8x4xf32>
    %k = dgraph.slice %hb, start = [0, 4], limit = [8, 8], stride = [1, 1] : (tensor<8x12xf32>) -> tensor<8x4xf32>
    %v = dgraph.slice %hb, start = [0, 8], limit = [8, 12], stride = [1, 1] : (tensor<8x12xf32>) -> tensor<8x4xf32>
    %qk = dgraph.mul %q, %k : tensor<8x4xf32>
    %a = dgraph.add %qk, %v : tensor<8x4xf32>
    %y = dgraph.matmul %a, %w2 : (tensor<8x4xf32>, tensor<4x4xf32>) -> tensor<8x4xf32>
    %b2b = dgraph.broadcast_in_dim %b2, dims = [1] : (tensor<4xf32>) -> tensor<8x4xf32>
    %yb = dgraph.add %y, %b2b : tensor<8x4xf32>
    %s = dgraph.reduce_sum %yb, dims = [0, 1] : (tensor<8x4xf32>) -> tensor<f32>
    %g1 = dgraph.matmul %x, %h {transpose_lhs} : (tensor<8x4xf32>, tensor<8x12xf32>) -> tensor<4x12xf32>
    %step = dgraph.load @__step : tensor<i64>
    %p = dgraph.load @fc1 : tensor<4x12xf32>
    %m = dgraph.load @"fc1/adam_m" : tensor<4x12xf32>
    %vv = dgraph.load @"fc1/adam_v" : tensor<4x12xf32>
    %p1, %m1, %v1 = dgraph.adamw %p, %g1, %m, %vv, %one, %step, %one {beta1 = 0.9, beta2 = 0.999, epsilon = 1.0e-8, weight_decay = 0.0} : tensor<4x12xf32>
    dgraph.store %p1, @fc1 : tensor<4x12xf32>
    dgraph.store %m1, @"fc1/adam_m" : tensor<4x12xf32>
    dgraph.store %v1, @"fc1/adam_v" : tensor<4x12xf32>
    return %s : tensor<f32>
  }
}
// CHECK-DAG: dgraph.variable @fc1 : tensor<4x6xf32> = (tensor<4x12xf32>) dense<5.000000e-01> {dshard.global_type = tensor<4x12xf32>, dshard.sharding = #dshard.sharding<[{}, {tp}x3]>, trainable}
// CHECK-DAG: dgraph.variable @b1 : tensor<6xf32> = (tensor<12xf32>) dense<1.000000e-01> {{.*}}dshard.sharding = #dshard.sharding<[{tp}x3]>
// CHECK-DAG: dgraph.variable @fc2 : tensor<2x4xf32> = (tensor<4x4xf32>) {{.*}}dshard.sharding = #dshard.sharding<[{tp}, {}]>
// CHECK-DAG: dgraph.variable @b2 : tensor<4xf32> = dense<0.000000e+00> {trainable}
// CHECK-DAG: dgraph.variable @"fc1/adam_m" : tensor<4x6xf32> {{.*}}dshard.sharding = #dshard.sharding<[{}, {tp}x3]>
// CHECK: func.func @train_step(%{{.*}}: tensor<8x4xf32>
// CHECK: dgraph.matmul %{{.*}} : (tensor<8x4xf32>, tensor<4x6xf32>) -> tensor<8x6xf32>
// CHECK: dgraph.slice %{{.*}}, start = [0, 0], limit = [8, 2]
// CHECK: dgraph.slice %{{.*}}, start = [0, 2], limit = [8, 4]
// CHECK: dgraph.slice %{{.*}}, start = [0, 4], limit = [8, 6]
// CHECK: %[[Y:.*]] = dgraph.matmul %{{.*}} : (tensor<8x2xf32>, tensor<2x4xf32>) -> tensor<8x4xf32>
// CHECK-NEXT: %[[YR:.*]] = dshard.all_reduce %[[Y]] "tp" {{.*}}: tensor<8x4xf32>
// CHECK: dgraph.add %[[YR]]
// CHECK-NOT: all_gather
// CHECK: dgraph.adamw {{.*}} : tensor<4x6xf32>
// CHECK-NOT: all_gather
// CHECK: return

// With dp and ZeRO-1, Adam's moments are split over dp inside each tp part.
// Z1-DAG: dgraph.variable @"fc1/adam_m" : tensor<2x6xf32> {{.*}}dshard.sharding = #dshard.sharding<[{dp}, {tp}x3]>, dshard.zero}
// Z1: func.func @train_step(%{{.*}}: tensor<4x4xf32>
// Z1: dshard.all_gather %{{.*}} "dp" dim = 0 {{.*}}: (tensor<2x6xf32>) -> tensor<4x6xf32>
