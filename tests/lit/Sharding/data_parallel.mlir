// RUN: dtcc-opt %s -dtcc-plan-set="mesh=dp=2" -dtcc-shard-annotate -dtcc-shard-propagate | FileCheck %s --check-prefix=PROP
// RUN: dtcc-opt %s -dtcc-plan-set="mesh=dp=2" -dtcc-shard-annotate -dtcc-shard-propagate -dtcc-shard-partition | FileCheck %s --check-prefix=DP
// RUN: dtcc-opt %s -dtcc-plan-set="mesh=dp=2 zero=1" -dtcc-shard-annotate -dtcc-shard-propagate -dtcc-shard-partition | FileCheck %s --check-prefix=Z1
// RUN: dtcc-opt %s -dtcc-plan-set="mesh=dp=2 zero=2" -dtcc-shard-annotate -dtcc-shard-propagate -dtcc-shard-partition | FileCheck %s --check-prefix=Z2
// RUN: dtcc-opt %s -dtcc-plan-set="mesh=dp=2 zero=3" -dtcc-shard-annotate -dtcc-shard-propagate -dtcc-shard-partition | FileCheck %s --check-prefix=Z3
// RUN: dtcc-opt %s -dtcc-plan-set="mesh=dp=2 zero=3" -dtcc-shard-annotate -dtcc-shard-propagate -dtcc-shard-partition -dtcc-shard-overlap | FileCheck %s --check-prefix=OVERLAP

// A linear model's training step (as dtcc-graph-optimizer leaves it) on two
// data-parallel ranks, with each ZeRO stage.
module {
  dgraph.variable @w : tensor<4x2xf32> = dense<0.5> {trainable}
  dgraph.variable @"w/adam_m" : tensor<4x2xf32> = dense<0.0>
  dgraph.variable @"w/adam_v" : tensor<4x2xf32> = dense<0.0>
  dgraph.variable @__step : tensor<i64> = dense<0>
  func.func @main(%x: tensor<8x4xf32>) -> tensor<8x2xf32> {
    %w = dgraph.load @w : tensor<4x2xf32>
    %y = dgraph.matmul %x, %w : (tensor<8x4xf32>, tensor<4x2xf32>) -> tensor<8x2xf32>
    return %y : tensor<8x2xf32>
  }
  func.func @train_step(%x: tensor<8x4xf32> {dgraph.name = "x"}, %t: tensor<8x2xf32> {dgraph.name = "t"}) -> (tensor<f32> {dgraph.name = "loss"}) {
    %n = dgraph.constant dense<8.0> : tensor<f32>
    %one = dgraph.constant dense<1.0> : tensor<f32>
    %lr = dgraph.constant dense<0.1> : tensor<f32>
    %w = dgraph.load @w : tensor<4x2xf32>
    %y = dgraph.matmul %x, %w : (tensor<8x4xf32>, tensor<4x2xf32>) -> tensor<8x2xf32>
    %d = dgraph.sub %y, %t : tensor<8x2xf32>
    %sq = dgraph.mul %d, %d : tensor<8x2xf32>
    %s = dgraph.reduce_sum %sq, dims = [0, 1] : (tensor<8x2xf32>) -> tensor<f32>
    %loss = dgraph.div %s, %n : tensor<f32>
    %g = dgraph.matmul %x, %d {transpose_lhs} : (tensor<8x4xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>
    %step = dgraph.load @__step : tensor<i64>
    %w2 = dgraph.load @w : tensor<4x2xf32>
    %m = dgraph.load @"w/adam_m" : tensor<4x2xf32>
    %v = dgraph.load @"w/adam_v" : tensor<4x2xf32>
    %p1, %m1, %v1 = dgraph.adamw %w2, %g, %m, %v, %lr, %step, %one {beta1 = 0.9, beta2 = 0.999, epsilon = 1.0e-8, weight_decay = 0.0} : tensor<4x2xf32>
    dgraph.store %p1, @w : tensor<4x2xf32>
    dgraph.store %m1, @"w/adam_m" : tensor<4x2xf32>
    dgraph.store %v1, @"w/adam_v" : tensor<4x2xf32>
    return %loss : tensor<f32>
  }
}

// Propagation: the batch split flows forward; contracting it leaves partial
// sums, which pass through the linear division and meet the return.
// PROP: module attributes {dshard.mesh = #dshard.mesh<[dp = 2]>, dshard.plan = #dshard.plan<{{.*}}>}
// PROP-NOT: func.func @main
// PROP: func.func @train_step(%{{.*}}: tensor<8x4xf32> {dgraph.name = "x", dshard.sharding = #dshard.sharding<[{dp}, {}]>}
// PROP: dgraph.matmul {{.*}}dshard.shardings = [#dshard.sharding<[{dp}, {}]>]
// PROP: dgraph.reduce_sum {{.*}}dshard.shardings = [#dshard.sharding<[], partial = {dp}>]
// PROP: dgraph.div {{.*}}dshard.in_shardings = [#dshard.sharding<[], partial = {dp}>, #dshard.sharding<[]>]
// PROP: dgraph.matmul {{.*}}dshard.shardings = [#dshard.sharding<[{}, {}], partial = {dp}>], transpose_lhs
// PROP: return {{.*}}dshard.in_shardings = [#dshard.sharding<[]>]

// Plain data parallelism: local batches, one all-reduce for the gradient
// (where it is made) and one for the loss.
// DP: func.func @train_step(%{{.*}}: tensor<4x4xf32> {{.*}}, %{{.*}}: tensor<4x2xf32>
// DP: %[[L:.*]] = dgraph.div
// DP-NEXT: %[[LOSS:.*]] = dshard.all_reduce %[[L]] "dp" {phase = "forward"} : tensor<f32>
// DP: %[[G:.*]] = dgraph.matmul {{.*}}transpose_lhs
// DP-NEXT: %[[GS:.*]] = dshard.all_reduce %[[G]] "dp" {phase = "backward"} : tensor<4x2xf32>
// DP: dgraph.adamw %{{.*}}, %[[GS]]
// DP: return %[[LOSS]]

// ZeRO-1: Adam's moments are split, and so is the parameter (its master
// copy, with the state it is updated with): the step gathers it once, at
// its first use, and the update of this rank's rows is stored without
// communication.
// Z1-DAG: dgraph.variable @"w/adam_m" : tensor<2x2xf32> = (tensor<4x2xf32>) dense<0.000000e+00> {dshard.global_type = tensor<4x2xf32>, dshard.sharding = #dshard.sharding<[{dp}, {}]>, dshard.zero}
// Z1-DAG: dgraph.variable @w : tensor<2x2xf32> = (tensor<4x2xf32>) dense<5.000000e-01> {dshard.gather_once, dshard.global_type = tensor<4x2xf32>, dshard.sharding = #dshard.sharding<[{dp}, {}]>, dshard.zero, trainable}
// Z1: %[[W:.*]] = dgraph.load @w : tensor<2x2xf32>
// Z1-NEXT: dshard.all_gather %[[W]] "dp" dim = 0 {phase = "forward"} : (tensor<2x2xf32>) -> tensor<4x2xf32>
// Z1: %[[G:.*]] = dgraph.matmul {{.*}}transpose_lhs
// Z1: dshard.reduce_scatter %[[G]] "dp" dim = 0 {{.*}}: (tensor<4x2xf32>) -> tensor<2x2xf32>
// Z1-NOT: all_gather
// Z1: %[[P:.*]], %{{.*}}, %{{.*}} = dgraph.adamw
// Z1-NEXT: dgraph.store %[[P]], @w : tensor<2x2xf32>

// ZeRO-2: the gradient is reduce-scattered where it is made.
// Z2: %[[G:.*]] = dgraph.matmul {{.*}}transpose_lhs
// Z2-NEXT: %[[GS:.*]] = dshard.reduce_scatter %[[G]] "dp" dim = 0 {{.*}}: (tensor<4x2xf32>) -> tensor<2x2xf32>
// Z2: dgraph.adamw %{{.*}}, %[[GS]]

// ZeRO-3: the parameter is split too, gathered for its use and stored as
// the local update without communication.
// Z3-DAG: dgraph.variable @w : tensor<2x2xf32> = (tensor<4x2xf32>) dense<5.000000e-01> {dshard.global_type = tensor<4x2xf32>, dshard.sharding = #dshard.sharding<[{dp}, {}]>, dshard.zero, trainable}
// Z3: %[[W:.*]] = dgraph.load @w : tensor<2x2xf32>
// Z3-NEXT: %[[WF:.*]] = dshard.all_gather %[[W]] "dp" dim = 0 {{.*}}: (tensor<2x2xf32>) -> tensor<4x2xf32>
// Z3-NEXT: dgraph.matmul %{{.*}}, %[[WF]]
// Z3: %[[P:.*]], %{{.*}}, %{{.*}} = dgraph.adamw
// Z3-NEXT: dgraph.store %[[P]], @w : tensor<2x2xf32>

// Overlap: the parameter gather and the gradient reduce-scatter run on the
// communication thread; each is waited for just before its result is used,
// and the reduce-scatter's wait comes after the optimizer's other loads.
// OVERLAP: %[[G:.*]] = dshard.all_gather %[[W:.*]] "dp" dim = 0 {async = 1 : i64, handle = 0 : i64
// OVERLAP-NEXT: dshard.wait 0, %[[W]], %[[G]]
// OVERLAP-NEXT: dgraph.matmul %{{.*}}, %[[G]]
// OVERLAP: %[[RS:.*]] = dshard.reduce_scatter %[[GRAD:.*]] "dp" dim = 0 {async = 1 : i64, handle = 1 : i64, phase = "backward"}
// OVERLAP-NEXT: dgraph.load
// OVERLAP: dshard.wait 1, %[[GRAD]], %[[RS]]
// OVERLAP-NEXT: dgraph.adamw %{{.*}}, %[[RS]]
