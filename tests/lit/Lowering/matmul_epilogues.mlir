// RUN: dtcc-opt %s -split-input-file -dtcc-lower-matmul-epilogues | FileCheck %s

// Tests that a dense layer's weight gradient (x^T dy over the flattened
// rows) and bias gradient (dy summed over every dimension but the last)
// become one matmul_bias_grad, where the reduction stood (the product's
// operands are defined there), keeping the product's layer.
// CHECK-LABEL: func.func @dense
// CHECK: %[[RX:.*]] = dgraph.reshape %arg0
// CHECK: %[[RDY:.*]] = dgraph.reshape %arg1
// CHECK: %[[DW:.*]], %[[DB:.*]] = dgraph.matmul_bias_grad %[[RX]], %[[RDY]]
// CHECK-SAME: dgraph.layer = #dgraph.layer<module = "fc", index = 0>
// CHECK-SAME: transpose_lhs} summed = 1
// CHECK-SAME: (tensor<8x16xbf16>, tensor<8x32xbf16>) -> (tensor<16x32xbf16>, tensor<32xbf16>)
// CHECK-NOT: dgraph.reduce_sum
// CHECK-NOT: dgraph.matmul
// CHECK: return %[[DW]], %[[DB]]
func.func @dense(%x: tensor<2x4x16xbf16>, %dy: tensor<2x4x32xbf16>)
    -> (tensor<16x32xbf16>, tensor<32xbf16>) {
  %rx = dgraph.reshape %x : (tensor<2x4x16xbf16>) -> tensor<8x16xbf16>
  %rdy = dgraph.reshape %dy : (tensor<2x4x32xbf16>) -> tensor<8x32xbf16>
  %db = dgraph.reduce_sum %dy, dims = [0, 1] : (tensor<2x4x32xbf16>) -> tensor<32xbf16>
  %dw = dgraph.matmul %rx, %rdy {transpose_lhs, dgraph.layer = #dgraph.layer<module = "fc", index = 0>}
      : (tensor<8x16xbf16>, tensor<8x32xbf16>) -> tensor<16x32xbf16>
  return %dw, %db : tensor<16x32xbf16>, tensor<32xbf16>
}

// -----

// Tests a weight stored [out, in] (PyTorch's Linear): dW = dy^T x sums
// the transposed lhs's rows (summed = 0).
// CHECK-LABEL: func.func @weight_out_in
// CHECK: %[[DW:.*]], %[[DB:.*]] = dgraph.matmul_bias_grad %{{.*}}, %{{.*}} {transpose_lhs} summed = 0
// CHECK-SAME: (tensor<8x32xf32>, tensor<8x16xf32>) -> (tensor<32x16xf32>, tensor<32xf32>)
// CHECK-NOT: dgraph.reduce_sum
// CHECK: return %[[DW]], %[[DB]]
func.func @weight_out_in(%x: tensor<2x4x16xf32>, %dy: tensor<2x4x32xf32>)
    -> (tensor<32x16xf32>, tensor<32xf32>) {
  %db = dgraph.reduce_sum %dy, dims = [0, 1] : (tensor<2x4x32xf32>) -> tensor<32xf32>
  %rdy = dgraph.reshape %dy : (tensor<2x4x32xf32>) -> tensor<8x32xf32>
  %rx = dgraph.reshape %x : (tensor<2x4x16xf32>) -> tensor<8x16xf32>
  %dw = dgraph.matmul %rdy, %rx {transpose_lhs} : (tensor<8x32xf32>, tensor<8x16xf32>) -> tensor<32x16xf32>
  return %dw, %db : tensor<32x16xf32>, tensor<32xf32>
}

// -----

// Tests that the pair stands where the product stood when its operands
// come after the reduction and nothing in between reads the sums; and
// that the rows may be reshaped in steps (the same rows of 32).
// CHECK-LABEL: func.func @late_operands
// CHECK: dgraph.exp
// CHECK: %[[DW:.*]], %[[DB:.*]] = dgraph.matmul_bias_grad
// CHECK-NEXT: dgraph.mul %[[DB]]
// CHECK-NOT: dgraph.reduce_sum
func.func @late_operands(%x: tensor<8x16xf32>, %dy: tensor<2x4x32xf32>)
    -> (tensor<16x32xf32>, tensor<32xf32>) {
  %db = dgraph.reduce_sum %dy, dims = [0, 1] : (tensor<2x4x32xf32>) -> tensor<32xf32>
  %ex = dgraph.exp %x : tensor<8x16xf32>
  %flat = dgraph.reshape %dy : (tensor<2x4x32xf32>) -> tensor<2x128xf32>
  %rdy = dgraph.reshape %flat : (tensor<2x128xf32>) -> tensor<8x32xf32>
  %dw = dgraph.matmul %ex, %rdy {transpose_lhs} : (tensor<8x16xf32>, tensor<8x32xf32>) -> tensor<16x32xf32>
  %twice = dgraph.mul %db, %db : tensor<32xf32>
  return %dw, %twice : tensor<16x32xf32>, tensor<32xf32>
}

// -----

// Tests that the pair stays where neither place serves: the product's
// operand is defined after the reduction, whose sums are read before the
// product.
// CHECK-LABEL: func.func @no_place
// CHECK: dgraph.reduce_sum
// CHECK: dgraph.matmul
// CHECK-NOT: dgraph.matmul_bias_grad
func.func @no_place(%x: tensor<8x16xf32>, %dy: tensor<8x32xf32>)
    -> (tensor<16x32xf32>, tensor<32xf32>) {
  %db = dgraph.reduce_sum %dy, dims = [0] : (tensor<8x32xf32>) -> tensor<32xf32>
  %twice = dgraph.mul %db, %db : tensor<32xf32>
  %ex = dgraph.exp %x : tensor<8x16xf32>
  %dw = dgraph.matmul %ex, %dy {transpose_lhs} : (tensor<8x16xf32>, tensor<8x32xf32>) -> tensor<16x32xf32>
  return %dw, %twice : tensor<16x32xf32>, tensor<32xf32>
}

// -----

// Tests what does not pair: a transposed rhs (the sums would run over its
// columns), a reduction that keeps a row dimension, a batched product,
// rows of another length, and a lhs not transposed (its rows are the
// product's).
// CHECK-LABEL: func.func @not_pairs
// CHECK-NOT: dgraph.matmul_bias_grad
// CHECK: return
func.func @not_pairs(%x: tensor<8x16xf32>, %w: tensor<32x8xf32>, %dy: tensor<8x32xf32>,
                     %x3: tensor<2x4x16xf32>, %dy3: tensor<2x4x32xf32>,
                     %xo: tensor<32x16xf32>, %v: tensor<32x4xf32>)
    -> (tensor<16x32xf32>, tensor<32xf32>, tensor<2x16x32xf32>, tensor<4x32xf32>,
        tensor<16x8xf32>, tensor<8xf32>, tensor<32xf32>, tensor<8x4xf32>) {
  %dwt = dgraph.matmul %x, %w {transpose_lhs, transpose_rhs} : (tensor<8x16xf32>, tensor<32x8xf32>) -> tensor<16x32xf32>
  %ws = dgraph.reduce_sum %w, dims = [0] : (tensor<32x8xf32>) -> tensor<8xf32>
  %keep = dgraph.reduce_sum %dy3, dims = [0] : (tensor<2x4x32xf32>) -> tensor<4x32xf32>
  %db = dgraph.reduce_sum %dy3, dims = [0, 1] : (tensor<2x4x32xf32>) -> tensor<32xf32>
  %batched = dgraph.matmul %x3, %dy3 {transpose_lhs} : (tensor<2x4x16xf32>, tensor<2x4x32xf32>) -> tensor<2x16x32xf32>
  %other = dgraph.reshape %dy : (tensor<8x32xf32>) -> tensor<32x8xf32>
  %dwo = dgraph.matmul %xo, %other {transpose_lhs} : (tensor<32x16xf32>, tensor<32x8xf32>) -> tensor<16x8xf32>
  %dbo = dgraph.reduce_sum %dy, dims = [0] : (tensor<8x32xf32>) -> tensor<32xf32>
  %dyt = dgraph.matmul %dy, %v : (tensor<8x32xf32>, tensor<32x4xf32>) -> tensor<8x4xf32>
  return %dwt, %dbo, %batched, %keep, %dwo, %ws, %db, %dyt
      : tensor<16x32xf32>, tensor<32xf32>, tensor<2x16x32xf32>, tensor<4x32xf32>,
        tensor<16x8xf32>, tensor<8xf32>, tensor<32xf32>, tensor<8x4xf32>
}

// -----

// Tests that a product read only by an add of a bias broadcast over its
// rows becomes matmul_bias where the add stood, the transposes and the
// layer kept, the broadcast gone; a product read elsewhere too, a bias
// broadcast along another dimension, and an add of a whole tensor stay.
// CHECK-LABEL: func.func @forward
// CHECK: %[[Y:.*]] = dgraph.matmul_bias %arg0, %arg1, %arg2 {dgraph.layer = #dgraph.layer<module = "qkv">, transpose_rhs}
// CHECK-SAME: (tensor<2x4x16xf32>, tensor<48x16xf32>, tensor<48xf32>) -> tensor<2x4x48xf32>
// CHECK-NEXT: %[[G:.*]] = dgraph.gelu %[[Y]]
// CHECK: %[[P:.*]] = dgraph.matmul %arg0, %arg1 {transpose_rhs}
// CHECK: dgraph.add %[[P]]
// CHECK: dgraph.broadcast_in_dim %arg3, dims = [1]
// CHECK: dgraph.add
// CHECK: dgraph.add
// CHECK-NOT: dgraph.matmul_bias
// CHECK: return
func.func @forward(%x: tensor<2x4x16xf32>, %w: tensor<48x16xf32>, %b: tensor<48xf32>,
                   %c: tensor<4xf32>, %t: tensor<2x4x48xf32>)
    -> (tensor<2x4x48xf32>, tensor<2x4x48xf32>, tensor<2x4x48xf32>, tensor<2x4x48xf32>,
        tensor<2x4x48xf32>) {
  %p = dgraph.matmul %x, %w {transpose_rhs, dgraph.layer = #dgraph.layer<module = "qkv">}
      : (tensor<2x4x16xf32>, tensor<48x16xf32>) -> tensor<2x4x48xf32>
  %bb = dgraph.broadcast_in_dim %b, dims = [2] : (tensor<48xf32>) -> tensor<2x4x48xf32>
  %y = dgraph.add %bb, %p : tensor<2x4x48xf32>
  %g = dgraph.gelu %y : tensor<2x4x48xf32>
  %q = dgraph.matmul %x, %w {transpose_rhs} : (tensor<2x4x16xf32>, tensor<48x16xf32>) -> tensor<2x4x48xf32>
  %qb = dgraph.add %q, %bb : tensor<2x4x48xf32>
  %r = dgraph.matmul %x, %w {transpose_rhs} : (tensor<2x4x16xf32>, tensor<48x16xf32>) -> tensor<2x4x48xf32>
  %cb = dgraph.broadcast_in_dim %c, dims = [1] : (tensor<4xf32>) -> tensor<2x4x48xf32>
  %rc = dgraph.add %r, %cb : tensor<2x4x48xf32>
  %s = dgraph.matmul %x, %w {transpose_rhs} : (tensor<2x4x16xf32>, tensor<48x16xf32>) -> tensor<2x4x48xf32>
  %st = dgraph.add %s, %t : tensor<2x4x48xf32>
  return %g, %qb, %q, %rc, %st : tensor<2x4x48xf32>, tensor<2x4x48xf32>, tensor<2x4x48xf32>,
      tensor<2x4x48xf32>, tensor<2x4x48xf32>
}
