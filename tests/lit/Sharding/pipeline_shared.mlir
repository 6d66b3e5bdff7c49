// RUN: dtcc-opt %s -dtcc-plan-set="mesh=pp=2 micro-batches=3 schedule=1f1b" -dtcc-graph-autodiff -dtcc-shard-microbatch -dtcc-graph-optimizer -canonicalize -dtcc-shard-pipeline | FileCheck %s
// RUN: dtcc-opt %s -dtcc-plan-set="mesh=pp=2 micro-batches=3 schedule=1f1b" -dtcc-graph-autodiff -dtcc-graph-mixed-precision=dtype=bf16 -dtcc-shard-microbatch -dtcc-graph-optimizer -canonicalize -dtcc-shard-pipeline | FileCheck %s --check-prefix=BF16

// @w is read by layer 0 (stage 0) and by the head (stage 1), as a tied
// embedding is: each stage accumulates its own gradient terms as soon as a
// micro-batch's backward made them, the sum is completed over pp once a step,
// and both stages apply the same update to their copy of @w (no stage).
module {
  dgraph.variable @w : tensor<4x4xf32> = dense<0.5> {trainable}
  dgraph.variable @v : tensor<4x4xf32> = dense<0.25> {trainable}
  func.func @main(%x: tensor<2x4xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
    %w = dgraph.load @w {dgraph.layer = #dgraph.layer<index = 0>} : tensor<4x4xf32> loc("layers.0/load")
    %v = dgraph.load @v {dgraph.layer = #dgraph.layer<index = 1>} : tensor<4x4xf32> loc("layers.1/load")
    %h = dgraph.matmul %x, %w {dgraph.layer = #dgraph.layer<index = 0>} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("layers.0/MatMul")
    %a = dgraph.tanh %h {dgraph.layer = #dgraph.layer<index = 0>} : tensor<2x4xf32> loc("layers.0/Tanh")
    %b = dgraph.matmul %a, %v {dgraph.layer = #dgraph.layer<index = 1>} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("layers.1/MatMul")
    %y = dgraph.matmul %b, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("head/MatMul")
    %s = dgraph.reduce_sum %y, dims = [0, 1] : (tensor<2x4xf32>) -> tensor<f32> loc("loss/Sum")
    return %s : tensor<f32>
  }
}
// CHECK: dgraph.variable @w : tensor<4x4xf32> = dense<5.000000e-01> {trainable}
// CHECK: dgraph.variable @v : {{.*}}dshard.stage = 1
// CHECK-LABEL: func.func @train_step_pp0(
// Micro-batch 0's gradient of @w is added up before micro-batch 2 starts.
// CHECK: dgraph.matmul {{.*}}"backward mb0", transpose_lhs}
// CHECK: dgraph.add
// CHECK: "forward mb2"
// CHECK: %[[SUM0:.*]] = dshard.all_reduce %{{.*}} "pp" {phase = "optimizer"} : tensor<4x4xf32>
// CHECK: %[[G0:.*]] = dgraph.mul %[[SUM0]]
// CHECK: dgraph.adamw %{{.*}}, %[[G0]]
// CHECK: dgraph.store %new_param, @w
// CHECK-NOT: @v
// CHECK-LABEL: func.func @train_step_pp1(
// CHECK: %[[SUM1:.*]] = dshard.all_reduce %{{.*}} "pp" {phase = "optimizer"} : tensor<4x4xf32>
// CHECK: %[[G1:.*]] = dgraph.mul %[[SUM1]]
// CHECK: dgraph.adamw %{{.*}}, %[[G1]]
// CHECK: dgraph.store %new_param, @w
// CHECK: dgraph.store %{{.*}}, @v

// Mixed precision: the bf16 copies of the weights are made once a step,
// before the micro-batches (not per micro-batch, each in-flight micro-batch
// keeping its own); the first micro-batch's bf16 terms of @w's gradient are
// widened in their task (the accumulator), the later ones with their sum,
// after the task that made them (until 2026-11-28 inside it, where every
// fp32 term of a backward task stayed alive to its end), and summed over
// pp in fp32.
// BF16-LABEL: func.func @train_step_pp1(
// BF16: dgraph.cast %{{.*}} : tensor<4x4xf32> to tensor<4x4xbf16>
// BF16: dgraph.cast %{{.*}} : tensor<4x4xf32> to tensor<4x4xbf16>
// BF16: "forward mb0"
// BF16-NOT: tensor<4x4xf32> to tensor<4x4xbf16>
// BF16: dgraph.cast %{{.*}} {dshard.task = "backward mb0"} : tensor<4x4xbf16> to tensor<4x4xf32>
// BF16: dshard.task = "backward mb1", transpose_lhs
// BF16: dgraph.cast %{{.*}} {dgraph.layer = #dgraph.layer<index = 1>} : tensor<4x4xbf16> to tensor<4x4xf32>
// BF16: dgraph.cast %{{.*}} {dgraph.layer = #dgraph.layer<index = 1>} : tensor<4x4xbf16> to tensor<4x4xf32>
// BF16: dshard.all_reduce %{{.*}} "pp" {phase = "optimizer"} : tensor<4x4xf32>
