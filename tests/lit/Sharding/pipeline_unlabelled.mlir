// RUN: dtcc-opt %s -dtcc-plan-set="mesh=pp=2 micro-batches=2 schedule=1f1b" -dtcc-graph-autodiff -dtcc-shard-microbatch -dtcc-graph-optimizer -canonicalize -dtcc-shard-pipeline | FileCheck %s

// Tests that the backward ops of an op outside the layers run on its stage.
// "/Mul" is written in the model's own forward (no #dgraph.layer, as a
// Swin window attention's relative bias, a CLIP logit scale or a
// positional parameter added at the top level): it reads the first stage's
// activation and follows it to stage 0. Its VJP reads that activation and
// the gradient sent back by stage 1; placed by its operands' last stage it
// went to stage 1, which then updated @scale while stage 0 read it
// ("reads parameter 'scale' in pipeline stage 0 but stage 1 updates it").
module {
  dgraph.variable @enc_w : tensor<4x4xf32> = dense<0.5> {trainable}
  dgraph.variable @scale : tensor<4xf32> = dense<2.0> {trainable}
  dgraph.variable @dec_w : tensor<4x4xf32> = dense<0.25> {trainable}
  func.func @main(%x: tensor<2x4xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
    %w0 = dgraph.load @enc_w {dgraph.layer = #dgraph.layer<module = "enc">} : tensor<4x4xf32> loc("/enc/load")
    %s = dgraph.load @scale : tensor<4xf32> loc("scale")
    %w1 = dgraph.load @dec_w {dgraph.layer = #dgraph.layer<module = "dec">} : tensor<4x4xf32> loc("/dec/load")
    %h = dgraph.matmul %x, %w0 {dgraph.layer = #dgraph.layer<module = "enc">} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("/enc/MatMul")
    %a = dgraph.tanh %h {dgraph.layer = #dgraph.layer<module = "enc">} : tensor<2x4xf32> loc("/enc/Tanh")
    %sb = dgraph.broadcast_in_dim %s, dims = [1] : (tensor<4xf32>) -> tensor<2x4xf32> loc("/Mul")
    %z = dgraph.mul %a, %sb : tensor<2x4xf32> loc("/Mul")
    %y = dgraph.matmul %z, %w1 {dgraph.layer = #dgraph.layer<module = "dec">} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("/dec/MatMul")
    %l = dgraph.reduce_sum %y, dims = [0, 1] : (tensor<2x4xf32>) -> tensor<f32> loc("/Sum")
    return %l : tensor<f32>
  }
}
// CHECK-DAG: dgraph.variable @enc_w {{.*}}dshard.stage = 0
// CHECK-DAG: dgraph.variable @scale {{.*}}dshard.stage = 0
// CHECK-DAG: dgraph.variable @dec_w {{.*}}dshard.stage = 1
// CHECK-LABEL: func.func @train_step_pp0
// CHECK: dgraph.store %{{.*}}, @scale
// CHECK-LABEL: func.func @train_step_pp1
// CHECK-NOT: @scale
// CHECK: return
