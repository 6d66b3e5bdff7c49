// RUN: dtcc-opt %s -dtcc-graph-autodiff -dtcc-graph-mixed-precision=dtype=bf16 | FileCheck %s

// Tests that convolutions and their gradients run in bf16, like matmuls,
// and that the filter's gradient leaves @train_step in fp32.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: tensor<4x2x3xf32> {dgraph.grad_of = @w
// CHECK: %[[X:.*]] = dgraph.cast %arg0 : tensor<2x2x7xf32> to tensor<2x2x7xbf16>
// CHECK: %[[W:.*]] = dgraph.load @w : tensor<4x2x3xf32>
// CHECK-NEXT: %[[WH:.*]] = dgraph.cast %[[W]] : tensor<4x2x3xf32> to tensor<4x2x3xbf16>
// CHECK: dgraph.conv %[[X]], %[[WH]] {{.*}} : (tensor<2x2x7xbf16>, tensor<4x2x3xbf16>) -> tensor<2x4x7xbf16>
// CHECK: %[[DW:.*]] = dgraph.conv_filter_grad %[[X]], %{{.*}} : (tensor<2x2x7xbf16>, tensor<2x4x7xbf16>) -> tensor<4x2x3xbf16>
// CHECK: dgraph.cast %[[DW]] : tensor<4x2x3xbf16> to tensor<4x2x3xf32>
dgraph.variable @w : tensor<4x2x3xf32> {trainable}
func.func @main(%x: tensor<2x2x7xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
  %w = dgraph.load @w : tensor<4x2x3xf32>
  %y = dgraph.conv %x, %w strides = [1], dilations = [1], pad_low = [1], pad_high = [1], groups = 1
      : (tensor<2x2x7xf32>, tensor<4x2x3xf32>) -> tensor<2x4x7xf32>
  %s = dgraph.mul %y, %y : tensor<2x4x7xf32>
  %l = dgraph.reduce_sum %s, dims = [0, 1, 2] : (tensor<2x4x7xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
