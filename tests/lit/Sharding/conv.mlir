// RUN: dtcc-opt %s -dtcc-graph-autodiff -canonicalize -cse -dtcc-plan-set="mesh=dp=2" -dtcc-shard-annotate -dtcc-shard-propagate -dtcc-shard-partition -canonicalize | FileCheck %s --check-prefix=DP
// RUN: dtcc-opt %s -dtcc-graph-autodiff -canonicalize -cse -dtcc-plan-set="mesh=tp=2" -dtcc-shard-annotate -dtcc-shard-propagate -dtcc-shard-partition -canonicalize | FileCheck %s --check-prefix=TP

// A small CNN (3x3 convolution with bias, depthwise strided convolution,
// 1x1 convolution, flatten, linear head, cross-entropy) partitioned by its
// convolutions' sharding rules.
//
// Data parallel: every convolution takes half of the batch; the filter
// gradients (a sum over the batch) are all-reduced.
// DP: func.func @train_step(%[[X:.*]]: tensor<4x3x8x8xf32>
// DP: dgraph.conv %[[X]], %{{.*}} {{.*}} groups = 1 : (tensor<4x3x8x8xf32>, tensor<8x3x3x3xf32>) -> tensor<4x8x8x8xf32>
// DP: dgraph.conv %{{.*}} groups = 8 : (tensor<4x8x8x8xf32>, tensor<8x1x3x3xf32>) -> tensor<4x8x4x4xf32>
// DP: dgraph.conv %{{.*}} : (tensor<4x8x4x4xf32>, tensor<4x8x1x1xf32>) -> tensor<4x4x4x4xf32>
// DP: %[[G3:.*]] = dgraph.conv_filter_grad {{.*}} -> tensor<4x8x1x1xf32>
// DP-NEXT: dshard.all_reduce %[[G3]] "dp" {phase = "backward"} : tensor<4x8x1x1xf32>
// DP: %[[GD:.*]] = dgraph.conv_filter_grad {{.*}} groups = 8 : (tensor<4x8x8x8xf32>, tensor<4x8x4x4xf32>) -> tensor<8x1x3x3xf32>
// DP-NEXT: dshard.all_reduce %[[GD]] "dp"
// DP: %[[G1:.*]] = dgraph.conv_filter_grad %[[X]], {{.*}} -> tensor<8x3x3x3xf32>
// DP-NEXT: dshard.all_reduce %[[G1]] "dp"
//
// Tensor parallel over channels: the 3x3 convolution by output channels
// (its bias too), the depthwise one by groups (each rank keeps 4 of the 8,
// no communication), the 1x1 one by input channels (partial sums, one
// all-reduce in the forward pass), the head by classes (vocab-parallel).
// TP-DAG: dgraph.variable @w1 : tensor<4x3x3x3xf32> = (tensor<8x3x3x3xf32>) {{.*}}dshard.sharding = #dshard.sharding<[{tp}, {}, {}, {}]>
// TP-DAG: dgraph.variable @b1 : tensor<4xf32> = (tensor<8xf32>) {{.*}}dshard.sharding = #dshard.sharding<[{tp}]>
// TP-DAG: dgraph.variable @wd : tensor<4x1x3x3xf32> = (tensor<8x1x3x3xf32>) {{.*}}dshard.sharding = #dshard.sharding<[{tp}, {}, {}, {}]>
// TP-DAG: dgraph.variable @w3 : tensor<4x4x1x1xf32> = (tensor<4x8x1x1xf32>) {{.*}}dshard.sharding = #dshard.sharding<[{}, {tp}, {}, {}]>
// TP-DAG: dgraph.variable @head : tensor<64x5xf32> = (tensor<64x10xf32>) {{.*}}dshard.sharding = #dshard.sharding<[{}, {tp}]>
// TP: func.func @train_step(%[[X:.*]]: tensor<8x3x8x8xf32>
// TP-NOT: dshard.all_
// TP: dgraph.conv %[[X]], %{{.*}} groups = 1 : (tensor<8x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<8x4x8x8xf32>
// TP-NOT: dshard.all_
// TP: dgraph.conv %{{.*}} groups = 4 : (tensor<8x4x8x8xf32>, tensor<4x1x3x3xf32>) -> tensor<8x4x4x4xf32>
// TP-NOT: dshard.all_
// TP: %[[C3:.*]] = dgraph.conv %{{.*}} groups = 1 : (tensor<8x4x4x4xf32>, tensor<4x4x1x1xf32>) -> tensor<8x4x4x4xf32>
// TP-NEXT: %[[F:.*]] = dgraph.reshape %[[C3]]
// TP-NEXT: dshard.all_reduce %[[F]] "tp" {phase = "forward"} : tensor<8x64xf32>
// TP: dgraph.conv_input_grad %{{.*}} groups = 1 : (tensor<8x4x4x4xf32>, tensor<4x4x1x1xf32>) -> tensor<8x4x4x4xf32>
// TP: dgraph.conv_filter_grad %{{.*}} groups = 1 : (tensor<8x4x4x4xf32>, tensor<8x4x4x4xf32>) -> tensor<4x4x1x1xf32>
// TP-NOT: dshard.all_
// TP: dgraph.conv_input_grad %{{.*}} groups = 4 : (tensor<8x4x4x4xf32>, tensor<4x1x3x3xf32>) -> tensor<8x4x8x8xf32>
// TP: dgraph.conv_filter_grad %{{.*}} groups = 4 : (tensor<8x4x8x8xf32>, tensor<8x4x4x4xf32>) -> tensor<4x1x3x3xf32>
// TP-NOT: dshard.all_
// TP: dgraph.conv_filter_grad %[[X]], %{{.*}} -> tensor<4x3x3x3xf32>
module {
  dgraph.variable @w1 : tensor<8x3x3x3xf32> = dense<0.1> {trainable}
  dgraph.variable @b1 : tensor<8xf32> = dense<0.0> {trainable}
  dgraph.variable @wd : tensor<8x1x3x3xf32> = dense<0.2> {trainable}
  dgraph.variable @w3 : tensor<4x8x1x1xf32> = dense<0.3> {trainable}
  dgraph.variable @head : tensor<64x10xf32> = dense<0.01> {trainable}
  func.func @main(%x: tensor<8x3x8x8xf32> {dgraph.name = "x"}, %t: tensor<8xi64> {dgraph.name = "labels"}) -> (tensor<f32> {dgraph.name = "loss"}) {
    %w1 = dgraph.load @w1 : tensor<8x3x3x3xf32>
    %b1 = dgraph.load @b1 : tensor<8xf32>
    %wd = dgraph.load @wd : tensor<8x1x3x3xf32>
    %w3 = dgraph.load @w3 : tensor<4x8x1x1xf32>
    %head = dgraph.load @head : tensor<64x10xf32>
    %c1 = dgraph.conv %x, %w1 strides = [1, 1], dilations = [1, 1], pad_low = [1, 1], pad_high = [1, 1], groups = 1
        : (tensor<8x3x8x8xf32>, tensor<8x3x3x3xf32>) -> tensor<8x8x8x8xf32>
    %bb = dgraph.broadcast_in_dim %b1, dims = [1] : (tensor<8xf32>) -> tensor<8x8x8x8xf32>
    %a1 = dgraph.add %c1, %bb : tensor<8x8x8x8xf32>
    %r1 = dgraph.relu %a1 : tensor<8x8x8x8xf32>
    %c2 = dgraph.conv %r1, %wd strides = [2, 2], dilations = [1, 1], pad_low = [1, 1], pad_high = [1, 1], groups = 8
        : (tensor<8x8x8x8xf32>, tensor<8x1x3x3xf32>) -> tensor<8x8x4x4xf32>
    %r2 = dgraph.relu %c2 : tensor<8x8x4x4xf32>
    %c3 = dgraph.conv %r2, %w3 strides = [1, 1], dilations = [1, 1], pad_low = [0, 0], pad_high = [0, 0], groups = 1
        : (tensor<8x8x4x4xf32>, tensor<4x8x1x1xf32>) -> tensor<8x4x4x4xf32>
    %f = dgraph.reshape %c3 : (tensor<8x4x4x4xf32>) -> tensor<8x64xf32>
    %logits = dgraph.matmul %f, %head : (tensor<8x64xf32>, tensor<64x10xf32>) -> tensor<8x10xf32>
    %l = dgraph.cross_entropy %logits, %t : (tensor<8x10xf32>, tensor<8xi64>) -> tensor<8xf32>
    %s = dgraph.reduce_sum %l, dims = [0] : (tensor<8xf32>) -> tensor<f32>
    return %s : tensor<f32>
  }
}
