// RUN: dtcc-opt %s -dtcc-plan-set="recompute=full recompute-layers=1" -dtcc-graph-autodiff | FileCheck %s --check-prefix=ONE
// RUN: dtcc-opt %s -dtcc-plan-set="recompute=full recompute-layers=2" -dtcc-graph-autodiff | FileCheck %s --check-prefix=TWO
// RUN: dtcc-opt %s -dtcc-plan-set="recompute=full recompute-layers=9" -dtcc-graph-autodiff | FileCheck %s --check-prefix=ALL
// RUN: dtcc-opt %s -dtcc-plan-set="recompute=full" -dtcc-graph-autodiff | FileCheck %s --check-prefix=ALL
// RUN: dtcc-opt %s -dtcc-plan-set="recompute=full recompute-layers=1 mesh=pp=2 micro-batches=2" -dtcc-graph-autodiff -dtcc-shard-microbatch -dtcc-graph-optimizer -canonicalize -dtcc-shard-pipeline -dtcc-graph-recompute-layers | FileCheck %s --check-prefix=PP

// Four layers (#dgraph.layer index). recompute=full recomputes every
// layer's segment but the last (whose backward follows its forward);
// recompute_layers=K only the first K layers' segments, the others keep
// their activations. Ops outside layers (the loss) are never recomputed
// with K > 0.
dgraph.variable @w0 : tensor<4x4xf32> = dense<0.5> {trainable}
dgraph.variable @w1 : tensor<4x4xf32> = dense<0.25> {trainable}
dgraph.variable @w2 : tensor<4x4xf32> = dense<0.125> {trainable}
dgraph.variable @w3 : tensor<4x4xf32> = dense<0.0625> {trainable}
func.func @main(%x: tensor<2x4xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
  %w0 = dgraph.load @w0 {dgraph.layer = #dgraph.layer<index = 0>} : tensor<4x4xf32>
  %w1 = dgraph.load @w1 {dgraph.layer = #dgraph.layer<index = 1>} : tensor<4x4xf32>
  %w2 = dgraph.load @w2 {dgraph.layer = #dgraph.layer<index = 2>} : tensor<4x4xf32>
  %w3 = dgraph.load @w3 {dgraph.layer = #dgraph.layer<index = 3>} : tensor<4x4xf32>
  %h0 = dgraph.matmul %x, %w0 {dgraph.layer = #dgraph.layer<index = 0>} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %a0 = dgraph.tanh %h0 {dgraph.layer = #dgraph.layer<index = 0>} : tensor<2x4xf32>
  %h1 = dgraph.matmul %a0, %w1 {dgraph.layer = #dgraph.layer<index = 1>} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %a1 = dgraph.tanh %h1 {dgraph.layer = #dgraph.layer<index = 1>} : tensor<2x4xf32>
  %h2 = dgraph.matmul %a1, %w2 {dgraph.layer = #dgraph.layer<index = 2>} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %a2 = dgraph.tanh %h2 {dgraph.layer = #dgraph.layer<index = 2>} : tensor<2x4xf32>
  %h3 = dgraph.matmul %a2, %w3 {dgraph.layer = #dgraph.layer<index = 3>} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %a3 = dgraph.tanh %h3 {dgraph.layer = #dgraph.layer<index = 3>} : tensor<2x4xf32>
  %l = dgraph.reduce_sum %a3, dims = [0, 1] : (tensor<2x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// Tests that recompute_layers=1 clones layer 0 only, just before its
// backward, and that layers 1 to 3 keep their activations.
// ONE: dgraph.recomputed = "full (the first 1 layers of each stage); train_step: 2 ops in layers 0 (matmul 1, tanh 1)"
// ONE-LABEL: func.func @train_step
// ONE-NOT: dgraph.recompute}
// ONE: dgraph.matmul %arg0, %{{.*}} {dgraph.layer = #dgraph.layer<index = 0>, dgraph.recompute}
// ONE: dgraph.tanh %{{.*}} {dgraph.layer = #dgraph.layer<index = 0>, dgraph.recompute}
// ONE-NOT: dgraph.recompute}
// ONE: return

// Tests that recompute_layers=2 clones layers 0 and 1, layer 1 first (its
// backward comes first).
// TWO: dgraph.recomputed = "full (the first 2 layers of each stage); train_step: 4 ops in layers 0-1 (matmul 2, tanh 2)"
// TWO-LABEL: func.func @train_step
// TWO: dgraph.matmul {{.*}} {dgraph.layer = #dgraph.layer<index = 1>, dgraph.recompute}
// TWO: dgraph.matmul %arg0, {{.*}} {dgraph.layer = #dgraph.layer<index = 0>, dgraph.recompute}
// TWO: return

// Tests that K beyond the layers, and plain full, recompute layers 0 to 2
// (layer 3's segment, with the loss, is the last).
// ALL: train_step: 6 ops in layers 0-2 (matmul 3, tanh 3)
// ALL-NOT: {dgraph.layer = #dgraph.layer<index = 3>, dgraph.recompute}

// Tests that with two pipeline stages (layers 0-1 and 2-3, cut after
// autodiff) the first layer of each stage is recomputed, in both
// micro-batches: layer 0 on stage 0 and layer 2 on stage 1; the clones of
// layer 1 were replaced by its forward ops (layer 3 is the last segment).
// PP: dgraph.recomputed = "full (the first 1 layers of each stage); train_step_pp0: 4 ops in layers 0 (matmul 2, tanh 2); train_step_pp1: 4 ops in layers 2 (matmul 2, tanh 2)"
// PP-LABEL: func.func @train_step_pp0
// PP-NOT: {dgraph.layer = #dgraph.layer<index = 1>, dgraph.recompute, dshard.task
// PP: {dgraph.layer = #dgraph.layer<index = 0>, dgraph.recompute, dshard.task
// PP-NOT: {dgraph.layer = #dgraph.layer<index = 1>, dgraph.recompute, dshard.task
// PP-LABEL: func.func @train_step_pp1
// PP-NOT: {dgraph.layer = #dgraph.layer<index = 3>, dgraph.recompute, dshard.task
// PP: {dgraph.layer = #dgraph.layer<index = 2>, dgraph.recompute, dshard.task
// PP-NOT: {dgraph.layer = #dgraph.layer<index = 3>, dgraph.recompute, dshard.task
// PP: return
