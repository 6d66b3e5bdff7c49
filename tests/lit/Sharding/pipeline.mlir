// RUN: dtcc-opt %s -dtcc-plan-set="mesh=pp=2 micro-batches=2 schedule=1f1b" -dtcc-graph-autodiff -dtcc-shard-microbatch -dtcc-graph-optimizer -canonicalize -dtcc-shard-pipeline | FileCheck %s
// RUN: dtcc-opt %s -dtcc-plan-set="mesh=pp=2 micro-batches=2 schedule=gpipe" -dtcc-graph-autodiff -dtcc-shard-microbatch -dtcc-graph-optimizer -canonicalize -dtcc-shard-pipeline | FileCheck %s --check-prefix=GPIPE
// RUN: not dtcc-opt %s -dtcc-plan-set="mesh=pp=3 micro-batches=2" -dtcc-graph-autodiff -dtcc-shard-microbatch -dtcc-graph-optimizer -dtcc-shard-pipeline 2>&1 | FileCheck %s --check-prefix=STAGES
// RUN: not dtcc-opt %s -dtcc-plan-set="mesh=pp=2 micro-batches=2" -dtcc-graph-autodiff -dtcc-shard-microbatch -dtcc-graph-optimizer -canonicalize -dtcc-shard-pipeline -dtcc-plan-set="mesh=pp=3" -dtcc-shard-annotate 2>&1 | FileCheck %s --check-prefix=DEGREE
// RUN: not dtcc-opt %s -dtcc-plan-set="mesh=pp=2 micro-batches=2" -dtcc-graph-autodiff -dtcc-shard-microbatch -dtcc-graph-optimizer -canonicalize -dtcc-shard-pipeline -dtcc-plan-set="mesh=dp=2" -dtcc-shard-annotate 2>&1 | FileCheck %s --check-prefix=NOPP

// Two layers (#dgraph.layer index, as the importer reads it from the node
// names) on two stages, two micro-batches.
module {
  dgraph.variable @w0 : tensor<4x4xf32> = dense<0.5> {trainable}
  dgraph.variable @w1 : tensor<4x4xf32> = dense<0.25> {trainable}
  func.func @main(%x: tensor<2x4xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
    %w0 = dgraph.load @w0 {dgraph.layer = #dgraph.layer<index = 0>} : tensor<4x4xf32> loc("layers.0/load")
    %w1 = dgraph.load @w1 {dgraph.layer = #dgraph.layer<index = 1>} : tensor<4x4xf32> loc("layers.1/load")
    %h = dgraph.matmul %x, %w0 {dgraph.layer = #dgraph.layer<index = 0>} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("layers.0/MatMul")
    %a = dgraph.tanh %h {dgraph.layer = #dgraph.layer<index = 0>} : tensor<2x4xf32> loc("layers.0/Tanh")
    %y = dgraph.matmul %a, %w1 {dgraph.layer = #dgraph.layer<index = 1>} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("layers.1/MatMul")
    %s = dgraph.reduce_sum %y, dims = [0, 1] : (tensor<2x4xf32>) -> tensor<f32> loc("loss/Sum")
    return %s : tensor<f32>
  }
}
// The inputs hold both micro-batches; each stage runs its layer's forward
// and backward per micro-batch, sends what the other stage reads, and
// receives what it needs; the gradient norm and the loss are summed over pp.
// CHECK-DAG: dgraph.variable @w0 {{.*}}dshard.stage = 0
// CHECK-DAG: dgraph.variable @w1 {{.*}}dshard.stage = 1
// CHECK-LABEL: func.func @train_step_pp0(%{{.*}}: tensor<4x4xf32>
// CHECK-SAME: dshard.stage = 0
// CHECK: dgraph.slice %{{.*}}, start = [0, 0], limit = [2, 4]
// CHECK: dgraph.tanh
// CHECK-NEXT: dshard.send %[[A0:.*]] "pp" peer = 1 tag = 0 {async = 1 : i64, handle = [[H0:[0-9]+]]
// 1F1B on the first of two stages: the second forward before the first
// backward.
// CHECK: dgraph.tanh
// CHECK-NEXT: dshard.send %[[A1:.*]] "pp" peer = 1 tag = 2 {async = 1 : i64, handle = [[H1:[0-9]+]]
// A send is waited for once the peer's answer to it has arrived (stage 1
// sends tag 1 after receiving tag 0): the activation dies there.
// CHECK: dshard.recv "pp" peer = 1 tag = 1
// CHECK-NEXT: dshard.wait [[H0]], %[[A0]]
// CHECK: dshard.recv "pp" peer = 1 tag = 3
// CHECK-NEXT: dshard.wait [[H1]], %[[A1]]
// CHECK: dshard.all_reduce %{{.*}} "pp"
// CHECK: dgraph.adamw
// CHECK-NOT: dshard.wait
// CHECK-LABEL: func.func @train_step_pp1
// CHECK: dshard.recv "pp" peer = -1 tag = 0
// CHECK: dshard.send %{{.*}} "pp" peer = -1 tag = 1
// CHECK: dshard.recv "pp" peer = -1 tag = 2
// CHECK: dshard.send %{{.*}} "pp" peer = -1 tag = 3
// The first stage answers neither gradient: their waits end the step.
// CHECK: dgraph.adamw
// CHECK: dshard.wait
// CHECK-NEXT: dshard.wait
// CHECK-NEXT: return
// CHECK-NOT: func.func @train_step(

// GPipe: the same transfers; both forwards first on the last stage too.
// GPIPE-LABEL: func.func @train_step_pp1
// GPIPE: dshard.recv "pp" peer = -1 tag = 0
// GPIPE: dshard.recv "pp" peer = -1 tag = 2
// GPIPE: dshard.send %{{.*}} "pp" peer = -1 tag = 1
// GPIPE: dshard.send %{{.*}} "pp" peer = -1 tag = 3

// STAGES: error: pipeline parallelism over 3 stages needs at least as many layers; the model has 2

// The pipeline degree travels in the pass's stages and in the mesh's pp
// axis; annotation refuses a mesh that disagrees with the stages cut.
// DEGREE: error: the plan's mesh has pp=3 but dtcc-shard-pipeline cut the step into 2 stages
// NOPP: error: the plan's mesh has pp=1 but dtcc-shard-pipeline cut the step into 2 stages
