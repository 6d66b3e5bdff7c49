// RUN: dtcc-opt %s -split-input-file -dtcc-lower-to-exec | FileCheck %s

// Tests @apply_step's pattern: the mean of a gradient accumulator is taken
// in the accumulator's own buffer, summed over dp there (an all-reduce in
// place), read by the update, and the accumulator zeroed after: no
// workspace holds a copy of the gradient.
// CHECK-LABEL: func.func @apply()
// CHECK-SAME: dexec.workspace_bytes = 0
// CHECK-DAG: %[[A:.*]] = dexec.buffer "state"[{{[0-9]+}}] {variable = @"p/grad_acc"} : memref<4xf32>
// CHECK-DAG: %[[P:.*]] = dexec.buffer "state"[{{[0-9]+}}] {variable = @p} : memref<4xf32>
// CHECK: dexec.kernel "mul" ins(%[[A]], %{{.*}}) outs(%[[A]] : memref<4xf32>)
// CHECK-NEXT: dexec.kernel "all_reduce" ins(%[[A]] : memref<4xf32>) outs(%[[A]] : memref<4xf32>)
// CHECK-NEXT: dexec.kernel "sub" ins(%[[P]], %[[A]] : {{.*}}) outs(%[[P]] : memref<4xf32>)
// CHECK-NEXT: dexec.kernel "copy" ins(%{{.*}}) outs(%[[A]] : memref<4xf32>)
module attributes {dshard.plan = #dshard.plan<mesh = [dp = 2], zero = 0, micro_batches = 2, schedule = "1f1b", recompute = none, offload = none>} {
dgraph.variable @p : tensor<4xf32> = dense<1.0> {trainable}
dgraph.variable @"p/grad_acc" : tensor<4xf32>
func.func @apply() {
  %a = dgraph.load @"p/grad_acc" : tensor<4xf32>
  %half = dgraph.constant dense<0.5> : tensor<4xf32>
  %m = dgraph.mul %a, %half : tensor<4xf32>
  %r = dshard.all_reduce %m "dp" : tensor<4xf32>
  %p = dgraph.load @p : tensor<4xf32>
  %p1 = dgraph.sub %p, %r : tensor<4xf32>
  dgraph.store %p1, @p : tensor<4xf32>
  %zero = dgraph.constant dense<0.0> : tensor<4xf32>
  dgraph.store %zero, @"p/grad_acc" : tensor<4xf32>
  return
}
}

// -----

// Tests that a variable's buffer is not borrowed where its value is read
// again before the next store (the second load), nor where no store
// follows in the function (@b keeps its value between calls), nor for a
// value read after the store that follows: each product has a workspace
// buffer of its own. The all-reduce still sums in place, in its input's
// workspace.
// CHECK-LABEL: func.func @kept()
// CHECK-DAG: %[[A:.*]] = dexec.buffer "state"[{{[0-9]+}}] {variable = @a} : memref<4xf32>
// CHECK-DAG: %[[B:.*]] = dexec.buffer "state"[{{[0-9]+}}] {variable = @b} : memref<4xf32>
// CHECK-DAG: %[[C:.*]] = dexec.buffer "state"[{{[0-9]+}}] {variable = @c} : memref<4xf32>
// CHECK: dexec.kernel "mul" ins(%[[A]], %{{.*}}) outs(%[[MA:.*]] : memref<4xf32>)
// CHECK-NEXT: dexec.kernel "all_reduce" ins(%[[MA]] : memref<4xf32>) outs(%[[MA]] : memref<4xf32>)
// CHECK-NEXT: dexec.kernel "neg" ins(%[[A]] : memref<4xf32>) outs(%[[NA:.*]] : memref<4xf32>)
// CHECK-NEXT: dexec.kernel "mul" ins(%[[B]], %{{.*}}) outs(%[[MB:.*]] : memref<4xf32>)
// CHECK-NEXT: dexec.kernel "mul" ins(%[[C]], %{{.*}}) outs(%[[MC:.*]] : memref<4xf32>)
// CHECK-NEXT: dexec.kernel "copy" ins(%{{.*}}) outs(%[[C]] : memref<4xf32>)
// CHECK-NEXT: dexec.kernel "copy" ins(%{{.*}}) outs(%[[A]] : memref<4xf32>)
// CHECK-NOT: "state"
// CHECK: return
module attributes {dshard.plan = #dshard.plan<mesh = [dp = 2], zero = 0, micro_batches = 2, schedule = "1f1b", recompute = none, offload = none>} {
dgraph.variable @a : tensor<4xf32>
dgraph.variable @b : tensor<4xf32>
dgraph.variable @c : tensor<4xf32>
func.func @kept() -> (tensor<4xf32> {dgraph.name = "ra"}, tensor<4xf32> {dgraph.name = "na"}, tensor<4xf32> {dgraph.name = "mb"}, tensor<4xf32> {dgraph.name = "mc"}) {
  %half = dgraph.constant dense<0.5> : tensor<4xf32>
  %a = dgraph.load @a : tensor<4xf32>
  %ma = dgraph.mul %a, %half : tensor<4xf32>
  %ra = dshard.all_reduce %ma "dp" : tensor<4xf32>
  %a2 = dgraph.load @a : tensor<4xf32>
  %na = dgraph.neg %a2 : tensor<4xf32>
  %b = dgraph.load @b : tensor<4xf32>
  %mb = dgraph.mul %b, %half : tensor<4xf32>
  %c = dgraph.load @c : tensor<4xf32>
  %mc = dgraph.mul %c, %half : tensor<4xf32>
  %zero = dgraph.constant dense<0.0> : tensor<4xf32>
  dgraph.store %zero, @c : tensor<4xf32>
  dgraph.store %zero, @a : tensor<4xf32>
  return %ra, %na, %mb, %mc : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}
}

// -----

// Tests that an asynchronous all-reduce sums in place when only its own
// wait reads its input after it starts, and not when another op does.
// CHECK-LABEL: func.func @async()
// CHECK: dexec.kernel "exp" ins(%{{.*}}) outs(%[[G:.*]] : memref<4xf32>)
// CHECK-NEXT: dexec.kernel "all_reduce" ins(%[[G]] : memref<4xf32>) outs(%[[G]] : memref<4xf32>) attrs {async = 1
// CHECK-NEXT: dexec.kernel "neg"
// CHECK-NEXT: dexec.kernel "exp" ins(%{{.*}}) outs(%[[H:.*]] : memref<4xf32>)
// CHECK-NEXT: dexec.kernel "all_reduce" ins(%[[H]] : memref<4xf32>) outs(%[[S:.*]] : memref<4xf32>) attrs {async = 1
// CHECK-NEXT: dexec.kernel "neg" ins(%[[H]] : memref<4xf32>)
// CHECK: dexec.kernel "wait" ins(%[[G]], %[[G]] :
// CHECK-NEXT: dexec.kernel "wait" ins(%[[H]], %[[S]] :
module attributes {dshard.plan = #dshard.plan<mesh = [dp = 2], zero = 0, micro_batches = 1, schedule = "1f1b", recompute = none, offload = none>} {
func.func @async(%x: tensor<4xf32> {dgraph.name = "x"}) -> (tensor<4xf32> {dgraph.name = "r"}, tensor<4xf32> {dgraph.name = "s"}, tensor<4xf32> {dgraph.name = "n"}) {
  %g = dgraph.exp %x : tensor<4xf32>
  %r = dshard.all_reduce %g "dp" {async = 1 : i64, handle = 0 : i64} : tensor<4xf32>
  %y = dgraph.neg %x : tensor<4xf32>
  %h = dgraph.exp %y : tensor<4xf32>
  %s = dshard.all_reduce %h "dp" {async = 1 : i64, handle = 1 : i64} : tensor<4xf32>
  %n = dgraph.neg %h : tensor<4xf32>
  dshard.wait 0, %g, %r : tensor<4xf32>, tensor<4xf32>
  dshard.wait 1, %h, %s : tensor<4xf32>, tensor<4xf32>
  return %r, %s, %n : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}
}
