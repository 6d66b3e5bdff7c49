// RUN: dtcc-opt %s -split-input-file -dtcc-fold-narrow-reads | FileCheck %s
// RUN: dtcc-opt %s -split-input-file -dtcc-fold-narrow-reads -dtcc-lower-to-exec | FileCheck %s --check-prefix=EXEC

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

// -----

// Tests that the cross-entropy reads the bf16 logits (its loss still f32)
// and that its gradient, cast back to bf16, is computed from the bf16
// logits into bf16: both casts of the logits and the cast back are gone,
// the gradient's layer stays.
// CHECK-LABEL: func.func @loss
// CHECK-SAME: %[[X:[^:]*]]: tensor<8x50xbf16>
// CHECK-NOT: dgraph.cast
// CHECK: dgraph.cross_entropy %[[X]], %{{.*}} : (tensor<8x50xbf16>, tensor<8xi64>) -> tensor<8xf32>
// CHECK-NOT: dgraph.cast
// CHECK: %[[D:.*]] = dgraph.cross_entropy_grad %[[X]], %{{.*}}, %{{.*}} {dgraph.layer = #dgraph.layer<module = "head">} : (tensor<8x50xbf16>, tensor<8xi64>, tensor<8xf32>) -> tensor<8x50xbf16>
// CHECK-NOT: dgraph.cast
// CHECK: return %{{.*}}, %[[D]]
// EXEC-LABEL: func.func @loss
// EXEC: dexec.kernel "cross_entropy" ins(%{{.*}}, %{{.*}} : memref<8x50xbf16>, memref<8xi64>) outs(%{{.*}} : memref<8xf32>)
// EXEC: dexec.kernel "cross_entropy_grad" ins(%{{.*}}, %{{.*}}, %{{.*}} : memref<8x50xbf16>, memref<8xi64>, memref<8xf32>) outs(%{{.*}} : memref<8x50xbf16>)
func.func @loss(%x: tensor<8x50xbf16>, %labels: tensor<8xi64>, %dl: tensor<8xf32>) -> (tensor<8xf32>, tensor<8x50xbf16>) {
  %w = dgraph.cast %x : tensor<8x50xbf16> to tensor<8x50xf32>
  %l = dgraph.cross_entropy %w, %labels : (tensor<8x50xf32>, tensor<8xi64>) -> tensor<8xf32>
  %g = dgraph.cross_entropy_grad %w, %labels, %dl {dgraph.layer = #dgraph.layer<module = "head">} : (tensor<8x50xf32>, tensor<8xi64>, tensor<8xf32>) -> tensor<8x50xf32>
  %n = dgraph.cast %g : tensor<8x50xf32> to tensor<8x50xbf16>
  return %l, %n : tensor<8xf32>, tensor<8x50xbf16>
}

// -----

// Tests what stays: a gradient also read in f32 keeps its cast back (and
// reads the f32 logits, which keep their cast); a gradient cast to another
// type than the logits' (f16 logits, cast to bf16) is not folded.
// CHECK-LABEL: func.func @kept
// CHECK: %[[W:.*]] = dgraph.cast %arg0 : tensor<8x50xbf16> to tensor<8x50xf32>
// CHECK: dgraph.cross_entropy %arg0
// CHECK: %[[G:.*]] = dgraph.cross_entropy_grad %[[W]]
// CHECK: dgraph.cast %[[G]] : tensor<8x50xf32> to tensor<8x50xbf16>
// CHECK: %[[W2:.*]] = dgraph.cast %arg3 : tensor<8x50xf16> to tensor<8x50xf32>
// CHECK: %[[G2:.*]] = dgraph.cross_entropy_grad %[[W2]]
// CHECK: dgraph.cast %[[G2]] : tensor<8x50xf32> to tensor<8x50xbf16>
func.func @kept(%x: tensor<8x50xbf16>, %labels: tensor<8xi64>, %dl: tensor<8xf32>, %h: tensor<8x50xf16>) -> (tensor<8xf32>, tensor<8x50xbf16>, tensor<8x50xf32>, tensor<8x50xbf16>) {
  %w = dgraph.cast %x : tensor<8x50xbf16> to tensor<8x50xf32>
  %l = dgraph.cross_entropy %w, %labels : (tensor<8x50xf32>, tensor<8xi64>) -> tensor<8xf32>
  %g = dgraph.cross_entropy_grad %w, %labels, %dl : (tensor<8x50xf32>, tensor<8xi64>, tensor<8xf32>) -> tensor<8x50xf32>
  %n = dgraph.cast %g : tensor<8x50xf32> to tensor<8x50xbf16>
  %w2 = dgraph.cast %h : tensor<8x50xf16> to tensor<8x50xf32>
  %g2 = dgraph.cross_entropy_grad %w2, %labels, %dl : (tensor<8x50xf32>, tensor<8xi64>, tensor<8xf32>) -> tensor<8x50xf32>
  %n2 = dgraph.cast %g2 : tensor<8x50xf32> to tensor<8x50xbf16>
  return %l, %n, %g, %n2 : tensor<8xf32>, tensor<8x50xbf16>, tensor<8x50xf32>, tensor<8x50xbf16>
}
