// RUN: dtcc-opt %s -split-input-file -dtcc-lower-to-exec | FileCheck %s

// Tests that with the plan's offload = optimizer the update runs on the
// host: Adam's moments are host variables, the gradient is copied to the
// host right after the op that makes it final (before the rest of the
// step), the parameter's copy is updated in place on the host and copied
// back into its device variable.
// CHECK-LABEL: module attributes
// CHECK-SAME: dexec.host_state_bytes = 128 : i64
// CHECK-SAME: dexec.host_workspace_bytes =
// CHECK: dgraph.variable @p : tensor<4xf32> {dexec.offset = 0 : i64}
// CHECK: dgraph.variable @m : tensor<4xf32> {dexec.arena = "host_state", dexec.offset = 0 : i64}
// CHECK: dgraph.variable @v : tensor<4xf32> {dexec.arena = "host_state", dexec.offset = 64 : i64}
// CHECK: dgraph.variable @s : tensor<i64> {dexec.offset = 64 : i64}
// CHECK-LABEL: func.func @step()
// CHECK-SAME: dexec.host_workspace_bytes
// CHECK-DAG: %[[P:.*]] = dexec.buffer "state"[0] {variable = @p} : memref<4xf32>
// CHECK-DAG: %[[M:.*]] = dexec.buffer "host_state"[0] {variable = @m} : memref<4xf32>
// CHECK-DAG: %[[V:.*]] = dexec.buffer "host_state"[64] {variable = @v} : memref<4xf32>
// CHECK: dexec.kernel "copy_to_host" ins(%[[P]] : memref<4xf32>) outs(%[[HP:.*]] : memref<4xf32>)
// CHECK: dexec.kernel "mul"
// CHECK-NEXT: dexec.kernel "exp" ins(%{{.*}} : memref<4xf32>) outs(%[[G:.*]] : memref<4xf32>)
// CHECK-NEXT: dexec.kernel "copy_to_host" ins(%[[G]] : memref<4xf32>) outs(%[[HG:.*]] : memref<4xf32>)
// CHECK-NEXT: dexec.kernel "add"
// CHECK: dexec.kernel "adamw" ins(%[[HP]], %[[HG]], %[[M]], %[[V]], %{{.*}}, %{{.*}}, %{{.*}} : {{.*}}) outs(%[[HP]], %[[M]], %[[V]] : {{.*}}) attrs {{{.*}}} {host}
// CHECK-NEXT: dexec.kernel "copy_to_device" ins(%[[HP]] : memref<4xf32>) outs(%[[P]] : memref<4xf32>)
// CHECK-NOT: dexec.kernel
// CHECK: dexec.output "loss"
module attributes {dshard.plan = #dshard.plan<mesh = [], zero = 0, micro_batches = 1, schedule = "1f1b", recompute = none, offload = optimizer>} {
dgraph.variable @p : tensor<4xf32>
dgraph.variable @m : tensor<4xf32>
dgraph.variable @v : tensor<4xf32>
dgraph.variable @s : tensor<i64>
func.func @step(%x: tensor<4xf32> {dgraph.name = "x"}) -> (tensor<4xf32> {dgraph.name = "loss"}) {
  %p = dgraph.load @p : tensor<4xf32>
  %y = dgraph.mul %x, %p : tensor<4xf32>
  %g = dgraph.exp %y : tensor<4xf32>
  %loss = dgraph.add %g, %x : tensor<4xf32>
  %m = dgraph.load @m : tensor<4xf32>
  %v = dgraph.load @v : tensor<4xf32>
  %s = dgraph.load @s : tensor<i64>
  %one = dgraph.constant dense<1> : tensor<i64>
  %s1 = dgraph.add %s, %one : tensor<i64>
  dgraph.store %s1, @s : tensor<i64>
  %lr = dgraph.constant dense<0.1> : tensor<f32>
  %scale = dgraph.constant dense<1.0> : tensor<f32>
  %p1, %m1, %v1 = dgraph.adamw %p, %g, %m, %v, %lr, %s1, %scale {beta1 = 0.9, beta2 = 0.999, epsilon = 1.0e-08, weight_decay = 0.0} : tensor<4xf32>
  dgraph.store %p1, @p : tensor<4xf32>
  dgraph.store %m1, @m : tensor<4xf32>
  dgraph.store %v1, @v : tensor<4xf32>
  return %loss : tensor<4xf32>
}
}

// -----

// Tests that a gradient reduced asynchronously is copied to the host right
// after its wait, not at the collective (its result is not there yet), and
// that the device gradient is not overwritten before the host kernel
// (a GPU copies it asynchronously, on a copy stream). The parameter is
// trainable: it stays on the device; the momentum goes to the host. (The
// sum is taken in place: G and R are one buffer.)
// CHECK-LABEL: func.func @async_grad()
// CHECK: dexec.kernel "all_reduce" ins(%[[G:.*]] : memref<4xf32>) outs(%[[R:.*]] : memref<4xf32>)
// CHECK-NOT: "copy_to_host" ins(%[[R]]
// CHECK: dexec.kernel "wait" ins(%[[G]], %[[R]] : memref<4xf32>, memref<4xf32>)
// CHECK-NEXT: dexec.kernel "copy_to_host" ins(%[[R]] : memref<4xf32>) outs(%[[HR:.*]] : memref<4xf32>)
// CHECK-NOT: outs(%[[R]] :
// CHECK-NOT: outs(%[[R]],
// CHECK: dexec.kernel "sgd" ins(%[[HP:.*]], %[[HR]], %[[B:.*]], %{{.*}}, %{{.*}}, %{{.*}} : {{.*}}) outs(%[[HP]], %[[B]] : {{.*}}) attrs {{{.*}}} {host}
// CHECK-NEXT: dexec.kernel "copy_to_device" ins(%[[HP]] : memref<4xf32>)
module attributes {dshard.plan = #dshard.plan<mesh = [dp = 2], zero = 0, micro_batches = 1, schedule = "1f1b", recompute = none, offload = optimizer>} {
dgraph.variable @p : tensor<4xf32> = dense<1.0> {trainable}
dgraph.variable @b : tensor<4xf32>
func.func @async_grad(%x: tensor<4xf32> {dgraph.name = "x"}) -> (tensor<4xf32> {dgraph.name = "y"}) {
  %g = dgraph.exp %x : tensor<4xf32>
  %r = dshard.all_reduce %g "dp" {async = 1 : i64, handle = 0 : i64} : tensor<4xf32>
  %y = dgraph.neg %x : tensor<4xf32>
  dshard.wait 0, %g, %r : tensor<4xf32>, tensor<4xf32>
  %n = dgraph.neg %y : tensor<4xf32>
  %p = dgraph.load @p : tensor<4xf32>
  %b = dgraph.load @b : tensor<4xf32>
  %lr = dgraph.constant dense<0.1> : tensor<f32>
  %t = dgraph.constant dense<1> : tensor<i64>
  %scale = dgraph.constant dense<1.0> : tensor<f32>
  %p1, %b1 = dgraph.sgd %p, %r, %b, %lr, %t, %scale {momentum = 0.9, dampening = 0.0, weight_decay = 0.0} : tensor<4xf32>
  dgraph.store %p1, @p : tensor<4xf32>
  dgraph.store %b1, @b : tensor<4xf32>
  return %n : tensor<4xf32>
}
}
