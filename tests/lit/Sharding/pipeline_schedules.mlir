// RUN: dtcc-opt %s -dtcc-plan-set="mesh=pp=2 micro-batches=2 schedule=interleaved virtual-stages=2" -dtcc-graph-autodiff -dtcc-shard-microbatch -dtcc-graph-optimizer -canonicalize -dtcc-shard-pipeline | FileCheck %s --check-prefix=IL2
// RUN: dtcc-opt %s -dtcc-plan-set="mesh=pp=4 micro-batches=4 schedule=interleaved virtual-stages=2" -dtcc-graph-autodiff -dtcc-shard-microbatch -dtcc-graph-optimizer -canonicalize -dtcc-shard-pipeline | FileCheck %s --check-prefix=IL4
// RUN: dtcc-opt %s -dtcc-plan-set="mesh=pp=2 micro-batches=2 schedule=zb-h1" -dtcc-graph-autodiff -dtcc-shard-microbatch -dtcc-graph-optimizer -canonicalize -dtcc-shard-pipeline | FileCheck %s --check-prefix=ZB
// RUN: not dtcc-opt %s -dtcc-plan-set="mesh=pp=3 micro-batches=3 schedule=interleaved virtual-stages=2" -dtcc-graph-autodiff -dtcc-shard-microbatch -dtcc-graph-optimizer -dtcc-shard-pipeline 2>&1 | FileCheck %s --check-prefix=CHUNKS
// RUN: not dtcc-opt %s -dtcc-plan-set="mesh=pp=2 micro-batches=3 schedule=interleaved virtual-stages=2" -dtcc-graph-autodiff -dtcc-shard-microbatch -dtcc-graph-optimizer -dtcc-shard-pipeline 2>&1 | FileCheck %s --check-prefix=MICRO
// RUN: not dtcc-opt %s -dtcc-plan-set="mesh=pp=2 micro-batches=2 schedule=interleaved" -dtcc-graph-autodiff -dtcc-shard-microbatch -dtcc-graph-optimizer -dtcc-shard-pipeline 2>&1 | FileCheck %s --check-prefix=ONECHUNK

// Eight equal layers (#dgraph.layer index): chunks of layers, chunk k on
// stage k mod pp, and each stage's tasks in its schedule's order.
module {
  dgraph.variable @w0 : tensor<4x4xf32> = dense<0.5> {trainable}
  dgraph.variable @w1 : tensor<4x4xf32> = dense<0.5> {trainable}
  dgraph.variable @w2 : tensor<4x4xf32> = dense<0.5> {trainable}
  dgraph.variable @w3 : tensor<4x4xf32> = dense<0.5> {trainable}
  dgraph.variable @w4 : tensor<4x4xf32> = dense<0.5> {trainable}
  dgraph.variable @w5 : tensor<4x4xf32> = dense<0.5> {trainable}
  dgraph.variable @w6 : tensor<4x4xf32> = dense<0.5> {trainable}
  dgraph.variable @w7 : tensor<4x4xf32> = dense<0.5> {trainable}
  func.func @main(%x: tensor<2x4xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
    %w0 = dgraph.load @w0 {dgraph.layer = #dgraph.layer<index = 0>} : tensor<4x4xf32> loc("layers.0/load")
    %h0 = dgraph.matmul %x, %w0 {dgraph.layer = #dgraph.layer<index = 0>} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("layers.0/MatMul")
    %a0 = dgraph.tanh %h0 {dgraph.layer = #dgraph.layer<index = 0>} : tensor<2x4xf32> loc("layers.0/Tanh")
    %w1 = dgraph.load @w1 {dgraph.layer = #dgraph.layer<index = 1>} : tensor<4x4xf32> loc("layers.1/load")
    %h1 = dgraph.matmul %a0, %w1 {dgraph.layer = #dgraph.layer<index = 1>} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("layers.1/MatMul")
    %a1 = dgraph.tanh %h1 {dgraph.layer = #dgraph.layer<index = 1>} : tensor<2x4xf32> loc("layers.1/Tanh")
    %w2 = dgraph.load @w2 {dgraph.layer = #dgraph.layer<index = 2>} : tensor<4x4xf32> loc("layers.2/load")
    %h2 = dgraph.matmul %a1, %w2 {dgraph.layer = #dgraph.layer<index = 2>} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("layers.2/MatMul")
    %a2 = dgraph.tanh %h2 {dgraph.layer = #dgraph.layer<index = 2>} : tensor<2x4xf32> loc("layers.2/Tanh")
    %w3 = dgraph.load @w3 {dgraph.layer = #dgraph.layer<index = 3>} : tensor<4x4xf32> loc("layers.3/load")
    %h3 = dgraph.matmul %a2, %w3 {dgraph.layer = #dgraph.layer<index = 3>} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("layers.3/MatMul")
    %a3 = dgraph.tanh %h3 {dgraph.layer = #dgraph.layer<index = 3>} : tensor<2x4xf32> loc("layers.3/Tanh")
    %w4 = dgraph.load @w4 {dgraph.layer = #dgraph.layer<index = 4>} : tensor<4x4xf32> loc("layers.4/load")
    %h4 = dgraph.matmul %a3, %w4 {dgraph.layer = #dgraph.layer<index = 4>} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("layers.4/MatMul")
    %a4 = dgraph.tanh %h4 {dgraph.layer = #dgraph.layer<index = 4>} : tensor<2x4xf32> loc("layers.4/Tanh")
    %w5 = dgraph.load @w5 {dgraph.layer = #dgraph.layer<index = 5>} : tensor<4x4xf32> loc("layers.5/load")
    %h5 = dgraph.matmul %a4, %w5 {dgraph.layer = #dgraph.layer<index = 5>} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("layers.5/MatMul")
    %a5 = dgraph.tanh %h5 {dgraph.layer = #dgraph.layer<index = 5>} : tensor<2x4xf32> loc("layers.5/Tanh")
    %w6 = dgraph.load @w6 {dgraph.layer = #dgraph.layer<index = 6>} : tensor<4x4xf32> loc("layers.6/load")
    %h6 = dgraph.matmul %a5, %w6 {dgraph.layer = #dgraph.layer<index = 6>} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("layers.6/MatMul")
    %a6 = dgraph.tanh %h6 {dgraph.layer = #dgraph.layer<index = 6>} : tensor<2x4xf32> loc("layers.6/Tanh")
    %w7 = dgraph.load @w7 {dgraph.layer = #dgraph.layer<index = 7>} : tensor<4x4xf32> loc("layers.7/load")
    %h7 = dgraph.matmul %a6, %w7 {dgraph.layer = #dgraph.layer<index = 7>} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("layers.7/MatMul")
    %a7 = dgraph.tanh %h7 {dgraph.layer = #dgraph.layer<index = 7>} : tensor<2x4xf32> loc("layers.7/Tanh")
    %s = dgraph.reduce_sum %a7, dims = [0, 1] : (tensor<2x4xf32>) -> tensor<f32> loc("loss/Sum")
    return %s : tensor<f32>
  }
}

// Interleaved, pp=2 and 2 chunks per stage: chunks of two layers, chunk k
// on stage k mod 2 (stage 0: layers 0-1 and 4-5). With 2 micro-batches the
// warm-up of stage 0 (2(p-1) + (v-1)p = 4 forwards) is every forward, and
// backwards run the later chunk first; stage 1 (warm-up 2) alternates.
// IL2-DAG: dgraph.variable @w0 {{.*}}dshard.stage = 0
// IL2-DAG: dgraph.variable @w1 {{.*}}dshard.stage = 0
// IL2-DAG: dgraph.variable @w2 {{.*}}dshard.stage = 1
// IL2-DAG: dgraph.variable @w3 {{.*}}dshard.stage = 1
// IL2-DAG: dgraph.variable @w4 {{.*}}dshard.stage = 0
// IL2-DAG: dgraph.variable @w5 {{.*}}dshard.stage = 0
// IL2-DAG: dgraph.variable @w6 {{.*}}dshard.stage = 1
// IL2-DAG: dgraph.variable @w7 {{.*}}dshard.stage = 1
// IL2-LABEL: func.func @train_step_pp0
// IL2: dgraph.matmul {{.*}}index = 0>, dshard.task = "forward mb0 chunk0"
// IL2: dgraph.matmul {{.*}}index = 1>, dshard.task = "forward mb0 chunk0"
// IL2: dshard.send %{{.*}} "pp" peer = 1
// IL2: dshard.task = "forward mb1 chunk0"
// IL2: dshard.recv "pp" peer = 1
// IL2: dgraph.matmul {{.*}}index = 4>, dshard.task = "forward mb0 chunk1"
// IL2: dshard.task = "forward mb1 chunk1"
// IL2: dshard.task = "backward mb0 chunk1"
// IL2: dshard.task = "backward mb1 chunk1"
// IL2: dshard.task = "backward mb0 chunk0"
// IL2: dshard.task = "backward mb1 chunk0"
// IL2-NOT: dshard.task = "forward
// IL2-LABEL: func.func @train_step_pp1
// IL2: dshard.task = "forward mb0 chunk0"
// IL2: dshard.task = "forward mb1 chunk0"
// IL2: dgraph.matmul {{.*}}index = 6>, dshard.task = "forward mb0 chunk1"
// IL2: dshard.task = "backward mb0 chunk1"
// IL2: dshard.task = "forward mb1 chunk1"
// IL2: dshard.task = "backward mb1 chunk1"
// IL2: dshard.task = "backward mb0 chunk0"
// IL2: dshard.task = "backward mb1 chunk0"

// pp=4, 2 chunks of one layer per stage: stage 3 (layers 3 and 7) sends
// chunk 0's activations to stage 0 (peer -3), which sends their gradients
// back (peer 3); the last stage warms up with one forward per stage (4)
// and then alternates.
// IL4-LABEL: func.func @train_step_pp0
// IL4: dshard.recv "pp" peer = 3
// IL4: dgraph.matmul {{.*}}index = 4>, dshard.task = "forward mb0 chunk1"
// IL4: dshard.task = "backward mb0 chunk1"
// IL4: dshard.send %{{.*}} "pp" peer = 3
// IL4-LABEL: func.func @train_step_pp3
// IL4: dgraph.matmul {{.*}}index = 3>, dshard.task = "forward mb0 chunk0"
// IL4: dshard.send %{{.*}} "pp" peer = -3
// IL4: dshard.task = "forward mb3 chunk0"
// IL4: dgraph.matmul {{.*}}index = 7>, dshard.task = "forward mb0 chunk1"
// IL4: dshard.task = "backward mb0 chunk1"
// IL4: dshard.task = "forward mb1 chunk1"
// IL4: dshard.task = "backward mb1 chunk1"
// IL4: dshard.recv "pp" peer = -3
// IL4: dshard.task = "backward mb0 chunk0"

// ZB-H1, pp=2: on the last stage each backward is split into the input
// gradient (the elementwise backward and the dX matmuls the gradient sent
// to stage 0 needs), sent before the next forward, and the weight gradients
// (the dW matmuls, transposed activations times output gradients), of which
// stage 1 defers one: F0 B0 F1 B1 W0 W1. The first stage sends no
// gradient: its whole backward is W, after its forwards (F0 F1 W0 W1).
// ZB-LABEL: func.func @train_step_pp0
// ZB: dshard.task = "forward mb1"
// ZB-NOT: dshard.task = "input gradient
// ZB: dshard.task = "weight gradients mb0"
// ZB: dshard.task = "weight gradients mb1"
// ZB-LABEL: func.func @train_step_pp1
// ZB: dshard.task = "forward mb0"
// ZB: dgraph.matmul {{.*}}index = 7>, dshard.task = "input gradient mb0"
// ZB: dgraph.matmul {{.*}}index = 4>, dshard.task = "input gradient mb0"
// ZB-NEXT: dshard.send %{{.*}} "pp" peer = -1
// ZB: dshard.task = "forward mb1"
// ZB: dshard.task = "input gradient mb1"
// ZB: dshard.send %{{.*}} "pp" peer = -1
// ZB: dgraph.matmul {{.*}}index = 7>, dshard.task = "weight gradients mb0"
// ZB: dgraph.matmul {{.*}}index = 4>, dshard.task = "weight gradients mb0"
// ZB: dgraph.matmul {{.*}}index = 7>, dshard.task = "weight gradients mb1"
// ZB-NOT: dshard.task = "input gradient
// ZB: return

// Impossible interleaved plans: errors that name what was expected.
// CHUNKS: error: the interleaved schedule cuts the layers into pp x virtual_stages = 3 x 2 = 6 chunks of equal size: expected a number of layers divisible by 6, the model has 8 (#dgraph.layer index)
// MICRO: error: the interleaved schedule runs micro-batches in groups of pp: expected micro-batches a multiple of pp = 2, got 3
// ONECHUNK: error: the interleaved schedule needs virtual_stages >= 2 layer chunks per stage, got 1 (one chunk per stage: use 1f1b)
