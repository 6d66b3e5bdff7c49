// RUN: dtcc-opt %s -dtcc-plan-set="micro-batches=4" -dtcc-graph-autodiff -dtcc-graph-mixed-precision=dtype=bf16 -dtcc-graph-optimizer | FileCheck %s

// With micro-batches each gradient is added to its accumulator where the
// backward pass makes it, not at @train_step's end: there every widened
// (fp32) gradient of the micro-batch would be live beside the accumulators.
// The backward pass makes w2's gradient first; w1's needs w2's input
// gradient, made after w2's sum.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[G2:.*]] = dgraph.cast %{{.*}} : tensor<4x4xbf16> to tensor<4x4xf32>
// CHECK-NEXT: %[[A2:.*]] = dgraph.load @"w2/grad_acc"
// CHECK-NEXT: %[[S2:.*]] = dgraph.add %[[A2]], %[[G2]]
// CHECK-NEXT: dgraph.store %[[S2]], @"w2/grad_acc"
// CHECK: dgraph.matmul
// CHECK: %[[G1:.*]] = dgraph.cast %{{.*}} : tensor<4x4xbf16> to tensor<4x4xf32>
// CHECK-NEXT: %[[A1:.*]] = dgraph.load @"w1/grad_acc"
// CHECK-NEXT: %[[S1:.*]] = dgraph.add %[[A1]], %[[G1]]
// CHECK-NEXT: dgraph.store %[[S1]], @"w1/grad_acc"
// CHECK: return
dgraph.variable @w1 : tensor<4x4xf32> = dense<0.5> {trainable}
dgraph.variable @w2 : tensor<4x4xf32> = dense<0.25> {trainable}
func.func @main(%x: tensor<4x4xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
  %w1 = dgraph.load @w1 : tensor<4x4xf32>
  %w2 = dgraph.load @w2 : tensor<4x4xf32>
  %h = dgraph.matmul %x, %w1 : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %y = dgraph.matmul %h, %w2 : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %l = dgraph.reduce_sum %y, dims = [0, 1] : (tensor<4x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
