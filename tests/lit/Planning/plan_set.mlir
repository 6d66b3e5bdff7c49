// RUN: dtcc-opt %s -split-input-file -dtcc-plan-set="mesh=tp=2,dp=2 zero=1 micro-batches=2 recompute=full layouts=w1=cols,w2=rows" | FileCheck %s
// RUN: dtcc-opt %s -split-input-file -dtcc-plan-set | FileCheck %s --check-prefix=DEFAULT
// RUN: dtcc-opt %s -split-input-file -dtcc-plan-set="mesh=pp=12,tp=2 micro-batches=12 schedule=gpipe" | FileCheck %s --check-prefix=PP12

// Tests that the plan given is written once, as the module's dshard.plan:
// the mesh in the order written (tp outer, dp inner), and each option; a
// plan not given is the defaults (one device); a 12-stage pipeline.

// CHECK-LABEL: module @given
// CHECK-SAME: dshard.plan = #dshard.plan<mesh = [tp = 2, dp = 2], zero = 1, micro_batches = 2, schedule = "1f1b", recompute = full, layouts = {w1 = cols, w2 = rows}>
// DEFAULT-LABEL: module @given
// DEFAULT-SAME: dshard.plan = #dshard.plan<mesh = [], zero = 0, micro_batches = 1, schedule = "1f1b", recompute = none>
// PP12-LABEL: module @given
// PP12-SAME: dshard.plan = #dshard.plan<mesh = [pp = 12, tp = 2], zero = 0, micro_batches = 12, schedule = gpipe, recompute = none>
module @given {
  dgraph.variable @w1 : tensor<4x8xf32> = dense<1.0> {trainable}
  dgraph.variable @w2 : tensor<8x4xf32> = dense<1.0> {trainable}
}

// -----

// Tests that what is not given keeps the module's plan: here the
// micro-batches and recomputation a train phase wrote, and a layout
// search's exact sharding (its layouts are replaced only when given).

// CHECK-LABEL: module @kept
// CHECK-SAME: dshard.plan = #dshard.plan<mesh = [tp = 2, dp = 2], zero = 1, micro_batches = 2, schedule = gpipe, recompute = full, layouts = {w1 = cols, w2 = rows}>
// DEFAULT-LABEL: module @kept
// DEFAULT-SAME: dshard.plan = #dshard.plan<mesh = [tp = 2], zero = 0, micro_batches = 3, schedule = gpipe, recompute = full, layouts = {w1 = #dshard.sharding<[{}, {tp}]>}>
// PP12-LABEL: module @kept
// PP12-SAME: dshard.plan = #dshard.plan<mesh = [pp = 12, tp = 2], zero = 0, micro_batches = 12, schedule = gpipe, recompute = full, layouts = {w1 = #dshard.sharding<[{}, {tp}]>}>
module @kept attributes {dshard.plan = #dshard.plan<mesh = [tp = 2], micro_batches = 3, schedule = gpipe, recompute = full, layouts = {w1 = #dshard.sharding<[{}, {tp}]>}>} {
  dgraph.variable @w1 : tensor<4x8xf32> = dense<1.0> {trainable}
  dgraph.variable @w2 : tensor<8x4xf32> = dense<1.0> {trainable}
}
