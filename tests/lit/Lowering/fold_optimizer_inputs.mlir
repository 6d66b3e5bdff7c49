// RUN: dtcc-opt %s -split-input-file -dtcc-fold-optimizer-inputs | FileCheck %s
// RUN: dtcc-opt %s -split-input-file -dtcc-fold-optimizer-inputs -dtcc-lower-to-exec | FileCheck %s --check-prefix=EXEC

// Tests that under mixed precision the clipping norm sums the squares of
// the bf16 gradient itself (no f32 copy, no squared copy) and that adamw
// reads the bf16 gradient: the cast is gone. The parameter's other uses
// are untouched.
// CHECK-LABEL: func.func @step
// CHECK-SAME: %[[G:[^:]*]]: tensor<4x8xbf16>
// CHECK-NOT: dgraph.cast
// CHECK-NOT: dgraph.mul
// CHECK: %[[SQ:.*]] = dgraph.sum_squares %[[G]], dims = [0, 1] : (tensor<4x8xbf16>) -> tensor<f32>
// CHECK: dgraph.sqrt %[[SQ]]
// CHECK: dgraph.adamw %{{.*}}, %[[G]], {{.*}} : tensor<4x8xf32>, tensor<4x8xbf16>
// EXEC-LABEL: func.func @step
// EXEC: dexec.kernel "sum_squares" ins(%{{.*}} : memref<4x8xbf16>) outs(%{{.*}} : memref<f32>) attrs {dims = array<i64: 0, 1>}
// EXEC: dexec.kernel "adamw" ins(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : memref<4x8xf32>, memref<4x8xbf16>,
dgraph.variable @p : tensor<4x8xf32>
dgraph.variable @m : tensor<4x8xf32>
dgraph.variable @v : tensor<4x8xf32>
func.func @step(%g16: tensor<4x8xbf16> {dgraph.name = "g"}) -> (tensor<f32> {dgraph.name = "norm"}) {
  %p = dgraph.load @p : tensor<4x8xf32>
  %g = dgraph.cast %g16 : tensor<4x8xbf16> to tensor<4x8xf32>
  %sq = dgraph.mul %g, %g : tensor<4x8xf32>
  %sum = dgraph.reduce_sum %sq, dims = [0, 1] : (tensor<4x8xf32>) -> tensor<f32>
  %norm = dgraph.sqrt %sum : tensor<f32>
  %m = dgraph.load @m : tensor<4x8xf32>
  %v = dgraph.load @v : tensor<4x8xf32>
  %s = dgraph.constant dense<1> : tensor<i64>
  %lr = dgraph.constant dense<0.1> : tensor<f32>
  %p1, %m1, %v1 = dgraph.adamw %p, %g, %m, %v, %lr, %s, %norm {beta1 = 0.9, beta2 = 0.999, epsilon = 1.0e-08, weight_decay = 0.0} : tensor<4x8xf32>
  dgraph.store %p1, @p : tensor<4x8xf32>
  dgraph.store %m1, @m : tensor<4x8xf32>
  dgraph.store %v1, @v : tensor<4x8xf32>
  return %norm : tensor<f32>
}

// -----

// Tests that an f32 gradient's squares are summed without their copy, and
// that what the pass does not take stays: a product read twice, a sum over
// some dimensions only, a cast read by another op too (it stays for that
// op; adamw reads the bf16 gradient).
// CHECK-LABEL: func.func @partial
// CHECK: %[[W:.*]] = dgraph.sum_squares %arg0, dims = [0, 1] : (tensor<4x8xf32>) -> tensor<f32>
// CHECK: %[[M2:.*]] = dgraph.mul %arg1, %arg1
// CHECK: dgraph.reduce_sum %[[M2]], dims = [0, 1]
// CHECK: dgraph.add %[[M2]]
// CHECK: %[[M3:.*]] = dgraph.mul %arg0, %arg0
// CHECK: dgraph.reduce_sum %[[M3]], dims = [1]
// CHECK: %[[C:.*]] = dgraph.cast %arg2
// CHECK: dgraph.adamw %{{.*}}, %arg2, {{.*}} : tensor<4x8xf32>, tensor<4x8xf16>
// CHECK: dgraph.exp %[[C]]
func.func @partial(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>, %h: tensor<4x8xf16>, %p: tensor<4x8xf32>) -> (tensor<f32>, tensor<f32>, tensor<4x8xf32>, tensor<4xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %sq = dgraph.mul %a, %a : tensor<4x8xf32>
  %s = dgraph.reduce_sum %sq, dims = [0, 1] : (tensor<4x8xf32>) -> tensor<f32>
  %sq2 = dgraph.mul %b, %b : tensor<4x8xf32>
  %s2 = dgraph.reduce_sum %sq2, dims = [0, 1] : (tensor<4x8xf32>) -> tensor<f32>
  %twice = dgraph.add %sq2, %a : tensor<4x8xf32>
  %sq3 = dgraph.mul %a, %a : tensor<4x8xf32>
  %rows = dgraph.reduce_sum %sq3, dims = [1] : (tensor<4x8xf32>) -> tensor<4xf32>
  %g = dgraph.cast %h : tensor<4x8xf16> to tensor<4x8xf32>
  %one = dgraph.constant dense<1> : tensor<i64>
  %lr = dgraph.constant dense<0.1> : tensor<f32>
  %p1, %m1, %v1 = dgraph.adamw %p, %g, %p, %p, %lr, %one, %s {beta1 = 0.9, beta2 = 0.999, epsilon = 1.0e-08, weight_decay = 0.0} : tensor<4x8xf32>
  %e = dgraph.exp %g : tensor<4x8xf32>
  return %s, %s2, %twice, %rows, %p1, %e : tensor<f32>, tensor<f32>, tensor<4x8xf32>, tensor<4xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}
