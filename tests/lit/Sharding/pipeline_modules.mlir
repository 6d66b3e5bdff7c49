// RUN: dtcc-opt %s -dtcc-plan-set="mesh=pp=2 micro-batches=2 schedule=1f1b" -dtcc-graph-autodiff -dtcc-shard-microbatch -dtcc-graph-optimizer -canonicalize -dtcc-shard-pipeline | FileCheck %s
// RUN: not dtcc-opt %s -dtcc-plan-set="mesh=pp=3 micro-batches=2" -dtcc-graph-autodiff -dtcc-shard-microbatch -dtcc-graph-optimizer -dtcc-shard-pipeline 2>&1 | FileCheck %s --check-prefix=STAGES

// A model without layers, only top-level modules (#dgraph.layer<module>,
// as the importer reads them from a U-Net's "/enc/...", "/dec/..."): its
// stages are cut between its modules, in the order the forward pass meets
// them. "/Sum" belongs to the root module (no attribute) and follows its
// operand.
module {
  dgraph.variable @enc_w : tensor<4x4xf32> = dense<0.5> {trainable}
  dgraph.variable @dec_w : tensor<4x4xf32> = dense<0.25> {trainable}
  func.func @main(%x: tensor<2x4xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
    %w0 = dgraph.load @enc_w {dgraph.layer = #dgraph.layer<module = "enc">} : tensor<4x4xf32> loc("/enc/enc.0/load")
    %w1 = dgraph.load @dec_w {dgraph.layer = #dgraph.layer<module = "dec">} : tensor<4x4xf32> loc("/dec/dec.0/load")
    %h = dgraph.matmul %x, %w0 {dgraph.layer = #dgraph.layer<module = "enc">} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("/enc/enc.0/MatMul")
    %a = dgraph.tanh %h {dgraph.layer = #dgraph.layer<module = "enc">} : tensor<2x4xf32> loc("/enc/enc.1/Tanh")
    %y = dgraph.matmul %a, %w1 {dgraph.layer = #dgraph.layer<module = "dec">} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("/dec/dec.0/MatMul")
    %s = dgraph.reduce_sum %y, dims = [0, 1] : (tensor<2x4xf32>) -> tensor<f32> loc("/Sum")
    return %s : tensor<f32>
  }
}
// CHECK-DAG: dgraph.variable @enc_w {{.*}}dshard.stage = 0
// CHECK-DAG: dgraph.variable @dec_w {{.*}}dshard.stage = 1
// CHECK-LABEL: func.func @train_step_pp0
// CHECK: dgraph.tanh
// CHECK-NEXT: dshard.send %{{.*}} "pp" peer = 1 tag = 0
// CHECK-LABEL: func.func @train_step_pp1
// CHECK: dshard.recv "pp" peer = -1 tag = 0
// CHECK: dgraph.reduce_sum

// STAGES: error: pipeline parallelism over 3 stages needs at least as many layers; the model has 2 top-level modules and no layers (#dgraph.layer module and index)
