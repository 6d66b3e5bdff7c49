// RUN: dtcc-opt %s -split-input-file -dtcc-fold-global-norm | FileCheck %s
// RUN: dtcc-opt %s -split-input-file -dtcc-fold-global-norm -dtcc-lower-to-exec | FileCheck %s --check-prefix=EXEC

// Tests that a clipping norm's chain of adds of whole-gradient sums of
// squares becomes one global_sum_squares of the gradients, in the chain's
// order (a leaf on either side of an add), and that what reads the sum
// reads the new op.
// CHECK-LABEL: func.func @norm
// CHECK-NOT: dgraph.sum_squares
// CHECK-NOT: dgraph.add
// CHECK: %[[S:.*]] = dgraph.global_sum_squares %arg0, %arg1, %arg2, %arg3 : (tensor<4x8xbf16>, tensor<8xbf16>, tensor<3xf32>, tensor<bf16>) -> tensor<f32>
// CHECK-NEXT: dgraph.sqrt %[[S]]
// EXEC-LABEL: func.func @norm
// EXEC: dexec.kernel "global_sum_squares" ins(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : memref<4x8xbf16>, memref<8xbf16>, memref<3xf32>, memref<bf16>) outs(%{{.*}} : memref<f32>)
func.func @norm(%a: tensor<4x8xbf16>, %b: tensor<8xbf16>, %c: tensor<3xf32>, %d: tensor<bf16>) -> tensor<f32> {
  %sa = dgraph.sum_squares %a, dims = [0, 1] : (tensor<4x8xbf16>) -> tensor<f32>
  %sb = dgraph.sum_squares %b, dims = [0] : (tensor<8xbf16>) -> tensor<f32>
  %ab = dgraph.add %sa, %sb : tensor<f32>
  %sc = dgraph.sum_squares %c, dims = [0] : (tensor<3xf32>) -> tensor<f32>
  %abc = dgraph.add %sc, %ab : tensor<f32>
  %sd = dgraph.sum_squares %d, dims = [] : (tensor<bf16>) -> tensor<f32>
  %abcd = dgraph.add %abc, %sd : tensor<f32>
  %n = dgraph.sqrt %abcd : tensor<f32>
  return %n : tensor<f32>
}

// -----

// Tests what stays: a sum read twice (the chain folds on each side of it),
// a sum over some dimensions, an f16 sum kept in f16, and a chain broken
// by another op (each side with two or more sums folds; a lone sum stays).
// CHECK-LABEL: func.func @kept
// CHECK: %[[G1:.*]] = dgraph.global_sum_squares %arg0, %arg1 : (tensor<4xf32>, tensor<4xf32>) -> tensor<f32>
// CHECK: %[[S2:.*]] = dgraph.sum_squares %arg2, dims = [0]
// CHECK: %[[A2:.*]] = dgraph.add %[[G1]], %[[S2]]
// CHECK: dgraph.sum_squares %arg3, dims = [1]
// CHECK: dgraph.sum_squares %arg4, dims = [0] : (tensor<4xf16>) -> tensor<f16>
// CHECK: %[[NEG:.*]] = dgraph.neg %[[A2]]
// CHECK: %[[G2:.*]] = dgraph.global_sum_squares %arg0, %arg1 : (tensor<4xf32>, tensor<4xf32>) -> tensor<f32>
// CHECK: dgraph.add %[[NEG]], %[[G2]]
func.func @kept(%a: tensor<4xf32>, %b: tensor<4xf32>, %c: tensor<4xf32>, %r: tensor<2x4xf32>, %h: tensor<4xf16>) -> (tensor<f32>, tensor<f32>, tensor<2xf32>, tensor<f16>, tensor<f32>) {
  %sa = dgraph.sum_squares %a, dims = [0] : (tensor<4xf32>) -> tensor<f32>
  %sb = dgraph.sum_squares %b, dims = [0] : (tensor<4xf32>) -> tensor<f32>
  %ab = dgraph.add %sa, %sb : tensor<f32>
  %sc = dgraph.sum_squares %c, dims = [0] : (tensor<4xf32>) -> tensor<f32>
  %abc = dgraph.add %ab, %sc : tensor<f32>
  %rows = dgraph.sum_squares %r, dims = [1] : (tensor<2x4xf32>) -> tensor<2xf32>
  %sh = dgraph.sum_squares %h, dims = [0] : (tensor<4xf16>) -> tensor<f16>
  %neg = dgraph.neg %abc : tensor<f32>
  %sa2 = dgraph.sum_squares %a, dims = [0] : (tensor<4xf32>) -> tensor<f32>
  %sb2 = dgraph.sum_squares %b, dims = [0] : (tensor<4xf32>) -> tensor<f32>
  %ab2 = dgraph.add %sa2, %sb2 : tensor<f32>
  %tail = dgraph.add %neg, %ab2 : tensor<f32>
  return %abc, %sc, %rows, %sh, %tail : tensor<f32>, tensor<f32>, tensor<2xf32>, tensor<f16>, tensor<f32>
}
