// RUN: dtcc-opt %s -split-input-file -dtcc-shard-overlap | FileCheck %s

// dtcc-shard-overlap on one rank's program (as dtcc-shard-partition leaves
// it): collectives become asynchronous where work can run beside them.

// Tests that a backward gradient reduction starts where it is and is waited
// for just before its first user, with the ops between running beside it.
// CHECK-LABEL: func.func @gradient
// CHECK: %[[R:.*]] = dshard.all_reduce %[[G:.*]] "dp" {async = 1 : i64, handle = 0 : i64, phase = "backward"}
// CHECK-NEXT: dgraph.mul
// CHECK-NEXT: dshard.wait 0, %[[G]], %[[R]]
// CHECK-NEXT: dgraph.add %[[R]]
func.func @gradient(%g: tensor<8xf32>, %x: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %r = dshard.all_reduce %g "dp" {phase = "backward"} : tensor<8xf32>
  %y = dgraph.mul %x, %x : tensor<8xf32>
  %z = dgraph.add %r, %y : tensor<8xf32>
  return %y, %z : tensor<8xf32>, tensor<8xf32>
}

// -----

// Tests that a reduction needed at once, and one outside the backward
// pass, stay synchronous.
// CHECK-LABEL: func.func @at_once
// CHECK: dshard.all_reduce %{{.*}} "dp" {phase = "backward"} : tensor<8xf32>
// CHECK: dshard.all_reduce %{{.*}} "tp" {phase = "optimizer"} : tensor<8xf32>
// CHECK-NOT: dshard.wait
func.func @at_once(%g: tensor<8xf32>, %x: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %r = dshard.all_reduce %g "dp" {phase = "backward"} : tensor<8xf32>
  %z = dgraph.add %r, %x : tensor<8xf32>
  %o = dshard.all_reduce %x "tp" {phase = "optimizer"} : tensor<8xf32>
  %y = dgraph.mul %x, %x : tensor<8xf32>
  %w = dgraph.add %o, %y : tensor<8xf32>
  return %z, %w : tensor<8xf32>, tensor<8xf32>
}

// -----

// Tests that ZeRO-3 parameter gathers are prefetched one layer ahead: the
// second layer's gather (and its load, read by nothing else) starts where
// the first layer waits for its own.
// CHECK-LABEL: func.func @train_step
// CHECK: dgraph.load @w0
// CHECK-NEXT: dshard.all_gather {{.*}} "dp" dim = 0 {async = 1 : i64, handle = 0 : i64}
// CHECK-NEXT: dgraph.load @w1
// CHECK-NEXT: dshard.all_gather {{.*}} "dp" dim = 0 {async = 1 : i64, handle = 1 : i64}
// CHECK-NEXT: dshard.wait 0
// CHECK-NEXT: dgraph.matmul
// CHECK: dshard.wait 1
// CHECK-NEXT: dgraph.matmul
module {
  dgraph.variable @w0 : tensor<2x4xf32> = dense<0.5> {trainable, dshard.zero}
  dgraph.variable @w1 : tensor<2x4xf32> = dense<0.5> {trainable, dshard.zero}
  func.func @train_step(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
    %l0 = dgraph.load @w0 : tensor<2x4xf32>
    %g0 = dshard.all_gather %l0 "dp" dim = 0 : (tensor<2x4xf32>) -> tensor<4x4xf32>
    %h = dgraph.matmul %x, %g0 {dgraph.layer = #dgraph.layer<index = 0>} : (tensor<8x4xf32>, tensor<4x4xf32>) -> tensor<8x4xf32>
    %l1 = dgraph.load @w1 : tensor<2x4xf32>
    %g1 = dshard.all_gather %l1 "dp" dim = 0 : (tensor<2x4xf32>) -> tensor<4x4xf32>
    %y = dgraph.matmul %h, %g1 {dgraph.layer = #dgraph.layer<index = 1>} : (tensor<8x4xf32>, tensor<4x4xf32>) -> tensor<8x4xf32>
    return %y : tensor<8x4xf32>
  }
}
