// RUN: dtcc-opt %s -split-input-file | dtcc-opt -split-input-file | FileCheck %s

// Tests that a 2-D convolution with strides and asymmetric padding
// round-trips and that its result type is inferred.
// CHECK-LABEL: func.func @conv2d
// CHECK: dgraph.conv %arg0, %arg1 strides = [2, 2], dilations = [1, 1], pad_low = [1, 1], pad_high = [0, 0], groups = 1 : (tensor<8x3x32x32xf32>, tensor<16x3x3x3xf32>) -> tensor<8x16x16x16xf32>
func.func @conv2d(%x: tensor<8x3x32x32xf32>, %w: tensor<16x3x3x3xf32>) -> tensor<8x16x16x16xf32> {
  %y = dgraph.conv %x, %w strides = [2, 2], dilations = [1, 1], pad_low = [1, 1], pad_high = [0, 0], groups = 1
      : (tensor<8x3x32x32xf32>, tensor<16x3x3x3xf32>) -> tensor<8x16x16x16xf32>
  return %y : tensor<8x16x16x16xf32>
}

// -----

// Tests 1-D and 3-D convolutions, dilations, and a depthwise one (groups =
// channels, two filters per channel).
// CHECK-LABEL: func.func @shapes
// CHECK: dgraph.conv {{.*}} -> tensor<2x4x13xf64>
// CHECK: dgraph.conv {{.*}} groups = 4 : (tensor<2x4x9x9xf32>, tensor<8x1x3x3xf32>) -> tensor<2x8x9x9xf32>
// CHECK: dgraph.conv {{.*}} -> tensor<1x2x3x2x1xbf16>
func.func @shapes(%a: tensor<2x3x17xf64>, %wa: tensor<4x3x3xf64>,
                  %b: tensor<2x4x9x9xf32>, %wb: tensor<8x1x3x3xf32>,
                  %c: tensor<1x2x5x4x3xbf16>, %wc: tensor<2x2x3x3x3xbf16>) {
  %0 = dgraph.conv %a, %wa strides = [1], dilations = [2], pad_low = [0], pad_high = [0], groups = 1
      : (tensor<2x3x17xf64>, tensor<4x3x3xf64>) -> tensor<2x4x13xf64>
  %1 = dgraph.conv %b, %wb strides = [1, 1], dilations = [1, 1], pad_low = [1, 1], pad_high = [1, 1], groups = 4
      : (tensor<2x4x9x9xf32>, tensor<8x1x3x3xf32>) -> tensor<2x8x9x9xf32>
  %2 = dgraph.conv %c, %wc strides = [1, 1, 2], dilations = [1, 1, 1], pad_low = [0, 0, 1], pad_high = [0, 0, 0], groups = 1
      : (tensor<1x2x5x4x3xbf16>, tensor<2x2x3x3x3xbf16>) -> tensor<1x2x3x2x1xbf16>
  return
}

// -----

// Tests the two gradients: the input gradient's result type keeps the
// leftover input (7, where 6 would give the same output with stride 2).
// CHECK-LABEL: func.func @gradients
// CHECK: dgraph.conv_input_grad %arg1, %arg2 strides = [2, 1], dilations = [1, 2], pad_low = [0, 1], pad_high = [0, 1], groups = 2 : (tensor<2x4x3x5xf32>, tensor<4x3x2x2xf32>) -> tensor<2x6x7x5xf32>
// CHECK: dgraph.conv_filter_grad %arg0, %arg1 strides = [2, 1], dilations = [1, 2], pad_low = [0, 1], pad_high = [0, 1], groups = 2 : (tensor<2x6x7x5xf32>, tensor<2x4x3x5xf32>) -> tensor<4x3x2x2xf32>
func.func @gradients(%x: tensor<2x6x7x5xf32>, %dy: tensor<2x4x3x5xf32>, %w: tensor<4x3x2x2xf32>) {
  %dx = dgraph.conv_input_grad %dy, %w strides = [2, 1], dilations = [1, 2], pad_low = [0, 1], pad_high = [0, 1], groups = 2
      : (tensor<2x4x3x5xf32>, tensor<4x3x2x2xf32>) -> tensor<2x6x7x5xf32>
  %dw = dgraph.conv_filter_grad %x, %dy strides = [2, 1], dilations = [1, 2], pad_low = [0, 1], pad_high = [0, 1], groups = 2
      : (tensor<2x6x7x5xf32>, tensor<2x4x3x5xf32>) -> tensor<4x3x2x2xf32>
  return
}
