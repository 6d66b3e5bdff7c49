// RUN: dtcc-opt %s -split-input-file -dtcc-graph-autodiff -canonicalize -cse | FileCheck %s

// Tests that a linear model's gradient is the VJP of matmul, and that @main
// stays as it was.
// CHECK-LABEL: func.func @main
// CHECK: dgraph.matmul
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<f32> {dgraph.name = "loss"}, tensor<4x3xf32> {dgraph.grad_of = @w, dgraph.name = "grad/w"})
// CHECK: %[[W:.*]] = dgraph.load @w
// CHECK: %[[Y:.*]] = dgraph.matmul %[[X:.*]], %[[W]]
// CHECK: %[[L:.*]] = dgraph.reduce_sum %[[Y]]
// CHECK: %[[DW:.*]] = dgraph.matmul %[[X]], %[[ONES:.*]] {transpose_lhs} : (tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
// CHECK: return %[[L]], %[[DW]]
dgraph.variable @w : tensor<4x3xf32> {trainable}
func.func @main(%x: tensor<2x4xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
  %w = dgraph.load @w : tensor<4x3xf32>
  %y = dgraph.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %l = dgraph.reduce_sum %y, dims = [0, 1] : (tensor<2x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests that a value used twice gets the sum of its gradients, and that
// variables that are not trainable get none.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<f32> {dgraph.name = "loss"}, tensor<3xf32> {dgraph.grad_of = @a, dgraph.name = "grad/a"})
// CHECK: %[[A:.*]] = dgraph.load @a
// CHECK: %[[B:.*]] = dgraph.load @b
// CHECK: %[[SQ:.*]] = dgraph.mul %[[A]], %[[A]]
// CHECK: %[[T:.*]] = dgraph.mul %[[B]], %[[A]]
// CHECK: %[[G:.*]] = dgraph.add %[[T]], %[[T]]
// CHECK: return %{{.*}}, %[[G]] :
dgraph.variable @a : tensor<3xf32> {trainable}
dgraph.variable @b : tensor<3xf32>
func.func @main() -> (tensor<f32> {dgraph.name = "loss"}) {
  %a = dgraph.load @a : tensor<3xf32>
  %b = dgraph.load @b : tensor<3xf32>
  %sq = dgraph.mul %a, %a : tensor<3xf32>
  %t = dgraph.mul %sq, %b : tensor<3xf32>
  %l = dgraph.reduce_sum %t, dims = [0] : (tensor<3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests the VJP of a 2-D x 3-D matmul (a weight shared by every batch on the
// left): the weight's gradient is a batched product summed over the batch,
// the activation's a 2-D x 3-D product of the same kind.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<f32> {dgraph.name = "loss"}, tensor<4x3xf32> {dgraph.grad_of = @w, dgraph.name = "grad/w"}, tensor<2x3x5xf32> {dgraph.grad_of = @x, dgraph.name = "grad/x"})
// CHECK-DAG: %[[W:.*]] = dgraph.load @w
// CHECK-DAG: %[[X:.*]] = dgraph.load @x
// CHECK-DAG: %[[G:.*]] = dgraph.constant dense<1.000000e+00> : tensor<2x4x5xf32>
// CHECK: %[[DWB:.*]] = dgraph.matmul %[[G]], %[[X]] {transpose_rhs} : (tensor<2x4x5xf32>, tensor<2x3x5xf32>) -> tensor<2x4x3xf32>
// CHECK: %[[DW:.*]] = dgraph.reduce_sum %[[DWB]], dims = [0] : (tensor<2x4x3xf32>) -> tensor<4x3xf32>
// CHECK: %[[DX:.*]] = dgraph.matmul %[[W]], %[[G]] {transpose_lhs} : (tensor<4x3xf32>, tensor<2x4x5xf32>) -> tensor<2x3x5xf32>
// CHECK: return %{{.*}}, %[[DW]], %[[DX]]
dgraph.variable @w : tensor<4x3xf32> {trainable}
dgraph.variable @x : tensor<2x3x5xf32> {trainable}
func.func @main() -> (tensor<f32> {dgraph.name = "loss"}) {
  %w = dgraph.load @w : tensor<4x3xf32>
  %x = dgraph.load @x : tensor<2x3x5xf32>
  %y = dgraph.matmul %w, %x : (tensor<4x3xf32>, tensor<2x3x5xf32>) -> tensor<2x4x5xf32>
  %l = dgraph.reduce_sum %y, dims = [0, 1, 2] : (tensor<2x4x5xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests the VJP of a 3-D x 2-D matmul with a transposed activation (a
// Linear on a transposed input): the weight's gradient folds the batch into
// one product's rows only when the lhs is not transposed, so here it is a
// batched product and a sum, and the activation's a 2-D x 3-D product.
// CHECK-LABEL: func.func @train_step
// CHECK-DAG: %[[W:.*]] = dgraph.load @w
// CHECK-DAG: %[[X:.*]] = dgraph.load @x
// CHECK: %[[DX:.*]] = dgraph.matmul %[[W]], %{{.*}} {transpose_rhs} : (tensor<3x4xf32>, tensor<2x5x4xf32>) -> tensor<2x3x5xf32>
// CHECK: %[[DWB:.*]] = dgraph.matmul %[[X]], %{{.*}} : (tensor<2x3x5xf32>, tensor<2x5x4xf32>) -> tensor<2x3x4xf32>
// CHECK: %[[DW:.*]] = dgraph.reduce_sum %[[DWB]], dims = [0] : (tensor<2x3x4xf32>) -> tensor<3x4xf32>
// CHECK: return %{{.*}}, %[[DW]], %[[DX]]
dgraph.variable @w : tensor<3x4xf32> {trainable}
dgraph.variable @x : tensor<2x3x5xf32> {trainable}
func.func @main() -> (tensor<f32> {dgraph.name = "loss"}) {
  %w = dgraph.load @w : tensor<3x4xf32>
  %x = dgraph.load @x : tensor<2x3x5xf32>
  %y = dgraph.matmul %x, %w {transpose_lhs} : (tensor<2x3x5xf32>, tensor<3x4xf32>) -> tensor<2x5x4xf32>
  %l = dgraph.reduce_sum %y, dims = [0, 1, 2] : (tensor<2x5x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests the VJP of a matmul with a shared weight (3-D x 2-D, the dense
// layer): the weight's gradient is one product with the batch folded into
// its rows, no sum.
// CHECK-LABEL: func.func @train_step
// CHECK-DAG: %[[X:.*]] = dgraph.load @x
// CHECK: %[[X2:.*]] = dgraph.reshape %[[X]] : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
// CHECK: %[[DW:.*]] = dgraph.matmul %[[X2]], %{{.*}} {transpose_lhs} : (tensor<6x4xf32>, tensor<6x5xf32>) -> tensor<4x5xf32>
// CHECK-NOT: dgraph.reduce_sum %{{.*}} -> tensor<4x5xf32>
// CHECK: return %{{.*}}, %[[DW]]
dgraph.variable @w : tensor<4x5xf32> {trainable}
dgraph.variable @x : tensor<2x3x4xf32>
func.func @main() -> (tensor<f32> {dgraph.name = "loss"}) {
  %w = dgraph.load @w : tensor<4x5xf32>
  %x = dgraph.load @x : tensor<2x3x4xf32>
  %y = dgraph.matmul %x, %w : (tensor<2x3x4xf32>, tensor<4x5xf32>) -> tensor<2x3x5xf32>
  %l = dgraph.reduce_sum %y, dims = [0, 1, 2] : (tensor<2x3x5xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests the same dense layer with one batch ([1, s, k], micro-batches of
// one sequence): the batch folds into the rows too, not a batch of one
// product and a sum over its size-1 dimension (a copy of the gradient).
// CHECK-LABEL: func.func @train_step
// CHECK-DAG: %[[X:.*]] = dgraph.load @x
// CHECK: %[[X2:.*]] = dgraph.reshape %[[X]] : (tensor<1x3x4xf32>) -> tensor<3x4xf32>
// CHECK: %[[DW:.*]] = dgraph.matmul %[[X2]], %{{.*}} {transpose_lhs} : (tensor<3x4xf32>, tensor<3x5xf32>) -> tensor<4x5xf32>
// CHECK-NOT: dgraph.reduce_sum %{{.*}} -> tensor<4x5xf32>
// CHECK: return %{{.*}}, %[[DW]]
dgraph.variable @w : tensor<4x5xf32> {trainable}
dgraph.variable @x : tensor<1x3x4xf32>
func.func @main() -> (tensor<f32> {dgraph.name = "loss"}) {
  %w = dgraph.load @w : tensor<4x5xf32>
  %x = dgraph.load @x : tensor<1x3x4xf32>
  %y = dgraph.matmul %x, %w : (tensor<1x3x4xf32>, tensor<4x5xf32>) -> tensor<1x3x5xf32>
  %l = dgraph.reduce_sum %y, dims = [0, 1, 2] : (tensor<1x3x5xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests the VJP of size-1 batch dimensions broadcast against larger ones:
// each gradient is summed over the dimensions its operand was broadcast
// along and reshaped back to the operand's size-1 dimensions.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: tensor<3x1x2x4xf32> {dgraph.grad_of = @a, dgraph.name = "grad/a"}, tensor<5x4x6xf32> {dgraph.grad_of = @b, dgraph.name = "grad/b"}
// CHECK: %[[DAB:.*]] = dgraph.matmul %{{.*}}, %{{.*}} {transpose_rhs} : (tensor<3x5x2x6xf32>, tensor<5x4x6xf32>) -> tensor<3x5x2x4xf32>
// CHECK: %[[DAS:.*]] = dgraph.reduce_sum %[[DAB]], dims = [1] : (tensor<3x5x2x4xf32>) -> tensor<3x2x4xf32>
// CHECK: %[[DA:.*]] = dgraph.reshape %[[DAS]] : (tensor<3x2x4xf32>) -> tensor<3x1x2x4xf32>
// CHECK: %[[DBB:.*]] = dgraph.matmul %{{.*}}, %{{.*}} {transpose_lhs} : (tensor<3x1x2x4xf32>, tensor<3x5x2x6xf32>) -> tensor<3x5x4x6xf32>
// CHECK: %[[DB:.*]] = dgraph.reduce_sum %[[DBB]], dims = [0] : (tensor<3x5x4x6xf32>) -> tensor<5x4x6xf32>
// CHECK: return %{{.*}}, %[[DA]], %[[DB]]
dgraph.variable @a : tensor<3x1x2x4xf32> {trainable}
dgraph.variable @b : tensor<5x4x6xf32> {trainable}
func.func @main() -> (tensor<f32> {dgraph.name = "loss"}) {
  %a = dgraph.load @a : tensor<3x1x2x4xf32>
  %b = dgraph.load @b : tensor<5x4x6xf32>
  %y = dgraph.matmul %a, %b : (tensor<3x1x2x4xf32>, tensor<5x4x6xf32>) -> tensor<3x5x2x6xf32>
  %l = dgraph.reduce_sum %y, dims = [0, 1, 2, 3] : (tensor<3x5x2x6xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
