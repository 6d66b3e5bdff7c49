// RUN: dtcc-opt %s -split-input-file -dtcc-sink-transposes | FileCheck %s

// Tests that the heads' transpose moves below a rotary embedding (slices
// of the head dimension, a negation, a concat, products with a broadcast
// table, an add) to right before attention, which reads it as a view: the
// ops run in the [B, S, H, D] layout, the broadcast's dimensions permuted.
// CHECK-LABEL: func.func @rope
// CHECK-NOT: dgraph.transpose
// CHECK: %[[A:.*]] = dgraph.slice %arg0, start = [0, 0, 0, 0], limit = [1, 4, 2, 4]
// CHECK: %[[B:.*]] = dgraph.slice %arg0, start = [0, 0, 0, 4], limit = [1, 4, 2, 8]
// CHECK: %[[N:.*]] = dgraph.neg %[[B]] : tensor<1x4x2x4xf32>
// CHECK: %[[R:.*]] = dgraph.concat %[[N]], %[[A]] dim = 3
// CHECK: dgraph.broadcast_in_dim %arg1, dims = [1, 3] : (tensor<4x8xf32>) -> tensor<1x4x2x8xf32>
// CHECK-NOT: dims = [2, 3]
// CHECK: %[[Q:.*]] = dgraph.add %{{.*}}, %{{.*}} : tensor<1x4x2x8xf32>
// CHECK-NEXT: %[[T:.*]] = dgraph.transpose %[[Q]], perm = [0, 2, 1, 3]
// CHECK-NEXT: dgraph.attention %[[T]], %arg2, %arg2
func.func @rope(%x: tensor<1x4x2x8xf32>, %cos: tensor<4x8xf32>, %k: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %t = dgraph.transpose %x, perm = [0, 2, 1, 3] : (tensor<1x4x2x8xf32>) -> tensor<1x2x4x8xf32>
  %a = dgraph.slice %t, start = [0, 0, 0, 0], limit = [1, 2, 4, 4], stride = [1, 1, 1, 1] : (tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %b = dgraph.slice %t, start = [0, 0, 0, 4], limit = [1, 2, 4, 8], stride = [1, 1, 1, 1] : (tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %nb = dgraph.neg %b : tensor<1x2x4x4xf32>
  %r = dgraph.concat %nb, %a dim = 3 : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x8xf32>
  %c = dgraph.broadcast_in_dim %cos, dims = [2, 3] : (tensor<4x8xf32>) -> tensor<1x2x4x8xf32>
  %m1 = dgraph.mul %t, %c : tensor<1x2x4x8xf32>
  %m2 = dgraph.mul %r, %c : tensor<1x2x4x8xf32>
  %q = dgraph.add %m1, %m2 : tensor<1x2x4x8xf32>
  %o, %lse = dgraph.attention %q, %k, %k {causal, scale = 0.5 : f64} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4xf32>)
  return %o : tensor<1x2x4x8xf32>
}

// -----

// Tests that a function is left as it is where moving copies more: the
// transpose's two readers end apart (a result and a matmul), so one
// transpose would become two.
// CHECK-LABEL: func.func @apart
// CHECK-NEXT: %[[T:.*]] = dgraph.transpose %arg0, perm = [1, 0]
// CHECK-NEXT: dgraph.exp %[[T]]
// CHECK-NEXT: dgraph.neg %[[T]]
func.func @apart(%x: tensor<4x8xf32>, %w: tensor<4x4xf32>) -> (tensor<8x4xf32>, tensor<8x4xf32>) {
  %t = dgraph.transpose %x, perm = [1, 0] : (tensor<4x8xf32>) -> tensor<8x4xf32>
  %e = dgraph.exp %t : tensor<8x4xf32>
  %n = dgraph.neg %t : tensor<8x4xf32>
  %m = dgraph.matmul %n, %w : (tensor<8x4xf32>, tensor<4x4xf32>) -> tensor<8x4xf32>
  return %e, %m : tensor<8x4xf32>, tensor<8x4xf32>
}

// -----

// Tests that an elementwise op whose other operand has no value in the
// untransposed layout (an argument) keeps the transpose above it.
// CHECK-LABEL: func.func @blocked
// CHECK-NEXT: dgraph.transpose %arg0
// CHECK-NEXT: dgraph.add
func.func @blocked(%x: tensor<1x4x2x8xf32>, %y: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %t = dgraph.transpose %x, perm = [0, 2, 1, 3] : (tensor<1x4x2x8xf32>) -> tensor<1x2x4x8xf32>
  %s = dgraph.add %t, %y : tensor<1x2x4x8xf32>
  %o, %lse = dgraph.attention %s, %y, %y {scale = 0.5 : f64} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4xf32>)
  return %o : tensor<1x2x4x8xf32>
}

// -----

// Tests that a transpose after the rotary embedding's gradient moves up to
// the key gradient attention_grad makes (which the lowering writes through
// a view), the gradient then computed in the [B, S, H, D] layout: the
// broadcast table's dimensions permuted, the pad and slice with it.
// CHECK-LABEL: func.func @rope_grad
// CHECK: %{{.*}}, %[[DK:.*]], %{{.*}} = dgraph.attention_grad
// CHECK-NEXT: %[[T:.*]] = dgraph.transpose %[[DK]], perm = [0, 2, 1, 3]
// CHECK-NOT: dgraph.transpose
// CHECK: dgraph.broadcast_in_dim %arg1, dims = [1, 3] : (tensor<4x8xf32>) -> tensor<1x4x2x8xf32>
// CHECK: dgraph.mul %[[T]], %{{.*}} : tensor<1x4x2x8xf32>
// CHECK: dgraph.slice %{{.*}}, start = [0, 0, 0, 4], limit = [1, 4, 2, 8]
// CHECK: dgraph.pad %{{.*}}, %{{.*}}, low = [0, 0, 0, 0], high = [0, 0, 0, 4] : (tensor<1x4x2x4xf32>, tensor<f32>) -> tensor<1x4x2x8xf32>
// CHECK: %[[S:.*]] = dgraph.add
// CHECK-NEXT: dgraph.reshape %[[S]] : (tensor<1x4x2x8xf32>) -> tensor<1x4x16xf32>
func.func @rope_grad(%q: tensor<1x2x4x8xf32>, %cos: tensor<4x8xf32>, %o: tensor<1x2x4x8xf32>, %lse: tensor<1x2x4xf32>, %zero: tensor<f32>) -> tensor<1x4x16xf32> {
  %dq, %dk, %dv = dgraph.attention_grad %q, %q, %q, %o, %lse, %o {causal, scale = 0.5 : f64} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4xf32>, tensor<1x2x4x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>)
  %c = dgraph.broadcast_in_dim %cos, dims = [2, 3] : (tensor<4x8xf32>) -> tensor<1x2x4x8xf32>
  %m = dgraph.mul %dk, %c : tensor<1x2x4x8xf32>
  %b = dgraph.slice %m, start = [0, 0, 0, 4], limit = [1, 2, 4, 8], stride = [1, 1, 1, 1] : (tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %p = dgraph.pad %b, %zero, low = [0, 0, 0, 0], high = [0, 0, 0, 4] : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x8xf32>
  %s = dgraph.add %m, %p : tensor<1x2x4x8xf32>
  %t = dgraph.transpose %s, perm = [0, 2, 1, 3] : (tensor<1x2x4x8xf32>) -> tensor<1x4x2x8xf32>
  %r = dgraph.reshape %t : (tensor<1x4x2x8xf32>) -> tensor<1x4x16xf32>
  return %r : tensor<1x4x16xf32>
}
