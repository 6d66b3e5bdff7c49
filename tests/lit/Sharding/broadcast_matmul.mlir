// RUN: dtcc-opt %s -split-input-file -dtcc-graph-autodiff -dtcc-graph-optimizer="optimizer=sgd" -canonicalize -cse -dtcc-plan-set="mesh=dp=2" -dtcc-shard-annotate -dtcc-shard-propagate | FileCheck %s --check-prefix=PROP
// RUN: dtcc-opt %s -split-input-file -dtcc-graph-autodiff -dtcc-graph-optimizer="optimizer=sgd" -canonicalize -cse -dtcc-plan-set="mesh=dp=2" -dtcc-shard-annotate -dtcc-shard-propagate -dtcc-shard-partition -canonicalize | FileCheck %s --check-prefix=DP

// Tests that a matmul whose batch dimension one operand lacks (a weight on
// the left of a 3-D activation, as MLP-Mixer's token mixing) splits that
// dimension in the activation and the result only: the weight stays whole,
// and its gradient, a batched product summed over the batch, is partial
// over dp and all-reduced.
// PROP-LABEL: func.func @train_step
// PROP: dgraph.matmul %{{.*}}, %{{.*}} {dshard.in_shardings = [#dshard.sharding<[{}, {}]>, #dshard.sharding<[{dp}, {}, {}]>], dshard.shardings = [#dshard.sharding<[{dp}, {}, {}]>]} : (tensor<4x3xf32>, tensor<8x3x5xf32>) -> tensor<8x4x5xf32>
// PROP: dgraph.matmul %{{.*}}, %{{.*}} {{{.*}}dshard.shardings = [#dshard.sharding<[{dp}, {}, {}]>], transpose_rhs} : (tensor<8x4x5xf32>, tensor<8x3x5xf32>) -> tensor<8x4x3xf32>
// PROP: dgraph.reduce_sum %{{.*}}, dims = [0] {{{.*}}dshard.shardings = [#dshard.sharding<[{}, {}], partial = {dp}>]} : (tensor<8x4x3xf32>) -> tensor<4x3xf32>
// DP-LABEL: func.func @train_step
// DP-SAME: (%[[X:.*]]: tensor<4x3x5xf32>
// DP: dgraph.matmul %{{.*}}, %[[X]] : (tensor<4x3xf32>, tensor<4x3x5xf32>) -> tensor<4x4x5xf32>
// DP: %[[DWB:.*]] = dgraph.matmul %{{.*}}, %[[X]] {transpose_rhs} : (tensor<4x4x5xf32>, tensor<4x3x5xf32>) -> tensor<4x4x3xf32>
// DP-NEXT: %[[DW:.*]] = dgraph.reduce_sum %[[DWB]], dims = [0] : (tensor<4x4x3xf32>) -> tensor<4x3xf32>
// DP-NEXT: dshard.all_reduce %[[DW]] "dp" {phase = "backward"} : tensor<4x3xf32>
module {
  dgraph.variable @w : tensor<4x3xf32> = dense<0.5> {trainable}
  func.func @main(%x: tensor<8x3x5xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
    %w = dgraph.load @w : tensor<4x3xf32>
    %y = dgraph.matmul %w, %x : (tensor<4x3xf32>, tensor<8x3x5xf32>) -> tensor<8x4x5xf32>
    %s = dgraph.reduce_sum %y, dims = [0, 1, 2] : (tensor<8x4x5xf32>) -> tensor<f32>
    return %s : tensor<f32>
  }
}

// -----

// Tests that a batch dimension of size 1 broadcast against a weight's
// batch (result dimension 1, size 6) maps no factor in the activation: the
// split batch (dimension 0) stays split, the weight whole, and the
// weight's gradient is summed over dimension 0 (partial over dp).
// PROP-LABEL: func.func @train_step
// PROP: dgraph.matmul %{{.*}}, %{{.*}} {dshard.in_shardings = [#dshard.sharding<[{dp}, {}, {}, {}]>, #dshard.sharding<[{}, {}, {}]>], dshard.shardings = [#dshard.sharding<[{dp}, {}, {}, {}]>]} : (tensor<8x1x4x3xf32>, tensor<6x3x5xf32>) -> tensor<8x6x4x5xf32>
// PROP: dgraph.reduce_sum %{{.*}}, dims = [0] {{{.*}}dshard.shardings = [#dshard.sharding<[{}, {}, {}], partial = {dp}>]} : (tensor<8x6x3x5xf32>) -> tensor<6x3x5xf32>
// DP-LABEL: func.func @train_step
// DP: dgraph.matmul %{{.*}}, %{{.*}} : (tensor<4x1x4x3xf32>, tensor<6x3x5xf32>) -> tensor<4x6x4x5xf32>
// DP: %[[DW:.*]] = dgraph.reduce_sum %{{.*}}, dims = [0] : (tensor<4x6x3x5xf32>) -> tensor<6x3x5xf32>
// DP-NEXT: dshard.all_reduce %[[DW]] "dp" {phase = "backward"} : tensor<6x3x5xf32>
module {
  dgraph.variable @w : tensor<6x3x5xf32> = dense<0.5> {trainable}
  func.func @main(%x: tensor<8x1x4x3xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
    %w = dgraph.load @w : tensor<6x3x5xf32>
    %y = dgraph.matmul %x, %w : (tensor<8x1x4x3xf32>, tensor<6x3x5xf32>) -> tensor<8x6x4x5xf32>
    %s = dgraph.reduce_sum %y, dims = [0, 1, 2, 3] : (tensor<8x6x4x5xf32>) -> tensor<f32>
    return %s : tensor<f32>
  }
}
