// RUN: dtcc-opt %s -dtcc-plan-set="mesh=pp=2 micro-batches=2 schedule=1f1b" -dtcc-graph-autodiff -dtcc-shard-microbatch -dtcc-graph-optimizer -canonicalize -dtcc-shard-pipeline | FileCheck %s
// RUN: not dtcc-opt %s -dtcc-plan-set="mesh=pp=4 micro-batches=2" -dtcc-graph-autodiff -dtcc-shard-microbatch -dtcc-graph-optimizer -dtcc-shard-pipeline 2>&1 | FileCheck %s --check-prefix=STAGES

// A model whose every named op lies in one module ("/m/...", a wrapper
// as PyTorch exports one) and that has one layer (its repeated blocks
// restart their numbering in each of its stages, as timm's HRNet's
// "/m/stage2/stage2.0", "/m/stage3/stage3.0"): one layer and one
// top-level module are no sequence to cut, so the stages take the modules
// inside the wrapper (m/stem, m/stage2, m/head), by their ONNX node names.
// Before, pp=2 was refused ("the model has 1").
module {
  dgraph.variable @stem_w : tensor<4x4xf32> = dense<0.5> {trainable}
  dgraph.variable @stage_w : tensor<4x4xf32> = dense<0.25> {trainable}
  dgraph.variable @head_w : tensor<4x4xf32> = dense<0.125> {trainable}
  func.func @main(%x: tensor<2x4xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
    %w0 = dgraph.load @stem_w {dgraph.layer = #dgraph.layer<module = "m">} : tensor<4x4xf32> loc("/m/stem/load")
    %w1 = dgraph.load @stage_w {dgraph.layer = #dgraph.layer<module = "m", index = 0>} : tensor<4x4xf32> loc("/m/stage2/stage2.0/load")
    %w2 = dgraph.load @head_w {dgraph.layer = #dgraph.layer<module = "m">} : tensor<4x4xf32> loc("/m/head/load")
    %h = dgraph.matmul %x, %w0 {dgraph.layer = #dgraph.layer<module = "m">} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("/m/stem/MatMul")
    %a = dgraph.tanh %h {dgraph.layer = #dgraph.layer<module = "m">} : tensor<2x4xf32> loc("/m/stem/Tanh")
    %y = dgraph.matmul %a, %w1 {dgraph.layer = #dgraph.layer<module = "m", index = 0>} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("/m/stage2/stage2.0/MatMul")
    %b = dgraph.tanh %y {dgraph.layer = #dgraph.layer<module = "m", index = 0>} : tensor<2x4xf32> loc("/m/stage2/stage2.0/Tanh")
    %z = dgraph.matmul %b, %w2 {dgraph.layer = #dgraph.layer<module = "m">} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("/m/head/MatMul")
    %s = dgraph.reduce_sum %z, dims = [0, 1] : (tensor<2x4xf32>) -> tensor<f32> loc("/Sum")
    return %s : tensor<f32>
  }
}
// CHECK-DAG: dgraph.variable @stem_w {{.*}}dshard.stage = 0
// CHECK-DAG: dgraph.variable @head_w {{.*}}dshard.stage = 1
// CHECK-LABEL: func.func @train_step_pp0
// CHECK: dgraph.tanh
// CHECK: dshard.send %{{.*}} "pp" peer = 1 tag = 0
// CHECK-LABEL: func.func @train_step_pp1
// CHECK: dshard.recv "pp" peer = -1 tag = 0
// CHECK: dgraph.reduce_sum

// STAGES: error: pipeline parallelism over 4 stages needs at least as many layers; the model has 3 modules inside the module that wraps the rest (layers: 1, top-level modules: 1, modules inside the module that wraps the rest: 3)
