// RUN: dtcc-opt %s -split-input-file -dtcc-graph-autodiff -dtcc-graph-optimizer="lr=0.1 grad-clip=1.0 warmup=10 schedule=cosine" | FileCheck %s
// RUN: dtcc-opt %s -split-input-file -dtcc-plan-set="micro-batches=4" -dtcc-graph-autodiff -dtcc-graph-optimizer="optimizer=sgd momentum=0.9" | FileCheck %s --check-prefix=ACC

// Tests the optimizer step: the counter, the schedule, clipping and AdamW
// state variables.
// CHECK: module attributes {dgraph.optimizer = "adamw"
// CHECK-DAG: dgraph.variable @__step : tensor<i64> = dense<0>
// CHECK-DAG: dgraph.variable @__total_steps : tensor<i64> = dense<1>
// CHECK-DAG: dgraph.variable @"w/adam_m" : tensor<4xf32> = dense<0.000000e+00>
// CHECK-DAG: dgraph.variable @"w/adam_v" : tensor<4xf32> = dense<0.000000e+00>
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<f32> {dgraph.name = "loss"}, tensor<f32> {dgraph.name = "lr"}, tensor<f32> {dgraph.name = "grad_norm"})
// CHECK: %[[STEP:.*]] = dgraph.load @__step
// CHECK: %[[LR:.*]] = dgraph.lr_schedule %[[STEP]], %{{.*}} {base_lr = 1.000000e-01 : f64, kind = "cosine", min_lr = 0.000000e+00 : f64, warmup = 10 : i64}
// CHECK: %[[NEXT:.*]] = dgraph.add %[[STEP]]
// CHECK: dgraph.store %[[NEXT]], @__step
// CHECK: %[[NORM:.*]] = dgraph.sqrt
// CHECK: %[[SCALE:.*]] = dgraph.min
// CHECK: %[[P:.*]], %[[M:.*]], %[[V:.*]] = dgraph.adamw %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[LR]], %[[NEXT]], %[[SCALE]]
// CHECK: dgraph.store %[[P]], @w
// CHECK: dgraph.store %[[M]], @"w/adam_m"
// CHECK: return %{{.*}}, %[[LR]], %[[NORM]]

// With micro-batches, @train_step accumulates and @apply_step updates.
// ACC-DAG: dgraph.variable @"w/grad_acc" : tensor<4xf32> = dense<0.000000e+00>
// ACC-DAG: dgraph.variable @"w/momentum"
// ACC-LABEL: func.func @train_step
// ACC-SAME: -> (tensor<f32> {dgraph.name = "loss"})
// ACC: %[[ACC:.*]] = dgraph.load @"w/grad_acc"
// ACC: %[[SUM:.*]] = dgraph.add %[[ACC]]
// ACC: dgraph.store %[[SUM]], @"w/grad_acc"
// ACC-LABEL: func.func @apply_step() -> (tensor<f32> {dgraph.name = "lr"}, tensor<f32> {dgraph.name = "grad_norm"})
// ACC: %[[MEAN:.*]] = dgraph.mul %{{.*}}, %{{.*}} : tensor<4xf32>
// ACC: dgraph.sgd %{{.*}}, %[[MEAN]]
// ACC: dgraph.store %{{.*}}, @"w/grad_acc"
dgraph.variable @w : tensor<4xf32> = dense<1.0> {trainable}
func.func @main(%x: tensor<4xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
  %w = dgraph.load @w : tensor<4xf32>
  %y = dgraph.mul %w, %x : tensor<4xf32>
  %l = dgraph.reduce_sum %y, dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
