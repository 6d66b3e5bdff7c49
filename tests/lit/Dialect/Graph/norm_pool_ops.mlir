// RUN: dtcc-opt %s -split-input-file | dtcc-opt -split-input-file | FileCheck %s

// Tests that the batch-norm ops round-trip.
// CHECK-LABEL: func.func @batch_norm
func.func @batch_norm(%x: tensor<8x3x4x4xf32>, %g: tensor<3xf32>, %b: tensor<3xf32>,
                      %m: tensor<3xf32>, %v: tensor<3xf32>)
    -> (tensor<8x3x4x4xf32>, tensor<8x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>) {
  // CHECK: dgraph.batch_norm_stats %{{.*}}, %{{.*}} : (tensor<8x3x4x4xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %s = dgraph.batch_norm_stats %x, %m : (tensor<8x3x4x4xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: dgraph.batch_norm %{{.*}} epsilon = 9.99999974E-6 {training} :
  %y = dgraph.batch_norm %x, %g, %b, %m, %v epsilon = 1.0e-05 {training}
      : (tensor<8x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<8x3x4x4xf32>
  // CHECK: dgraph.batch_norm %{{.*}} epsilon = 1.000000e-03 :
  %e = dgraph.batch_norm %x, %g, %b, %m, %v epsilon = 1.0e-03
      : (tensor<8x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<8x3x4x4xf32>
  // CHECK: dgraph.batch_norm_update %{{.*}} {momentum = 9.000000e-01 : f64, var_scale = 1.0079365079365079 : f64} : tensor<3xf32>
  %m2, %v2 = dgraph.batch_norm_update %m, %v, %m, %v {momentum = 0.9, var_scale = 1.0079365079365079} : tensor<3xf32>
  // CHECK: dgraph.batch_norm_grad_stats %{{.*}} -> tensor<2x3xf32>
  %gs = dgraph.batch_norm_grad_stats %x, %m, %y
      : (tensor<8x3x4x4xf32>, tensor<3xf32>, tensor<8x3x4x4xf32>) -> tensor<2x3xf32>
  // CHECK: dgraph.batch_norm_grad %{{.*}} epsilon = 9.99999974E-6, count = 128 :
  %dx = dgraph.batch_norm_grad %x, %y, %g, %m, %v, %gs epsilon = 1.0e-05, count = 128
      : (tensor<8x3x4x4xf32>, tensor<8x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>,
         tensor<2x3xf32>) -> tensor<8x3x4x4xf32>
  return %dx, %e, %m2, %v2 : tensor<8x3x4x4xf32>, tensor<8x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>
}

// -----

// Tests that group_norm and its gradient round-trip, and that a rank-2
// input (no spatial dimensions) is accepted.
// CHECK-LABEL: func.func @group_norm
func.func @group_norm(%x: tensor<4x6x8x8xf32>, %g: tensor<6xf32>, %b: tensor<6xf32>,
                      %x2: tensor<4x6xbf16>, %g2: tensor<6xbf16>) -> tensor<4x6x8x8xf32> {
  // CHECK: dgraph.group_norm %{{.*}} channels_per_group = 3, epsilon = 9.99999974E-6 : {{.*}} -> (tensor<4x6x8x8xf32>, tensor<4x2xf32>, tensor<4x2xf32>)
  %y, %mean, %rstd = dgraph.group_norm %x, %g, %b channels_per_group = 3, epsilon = 1.0e-05
      : (tensor<4x6x8x8xf32>, tensor<6xf32>, tensor<6xf32>)
      -> (tensor<4x6x8x8xf32>, tensor<4x2xf32>, tensor<4x2xf32>)
  // CHECK: dgraph.group_norm_grad %{{.*}} channels_per_group = 3 :
  %dx, %dg, %db = dgraph.group_norm_grad %x, %g, %mean, %rstd, %y channels_per_group = 3
      : (tensor<4x6x8x8xf32>, tensor<6xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x6x8x8xf32>)
      -> (tensor<4x6x8x8xf32>, tensor<6xf32>, tensor<6xf32>)
  // CHECK: dgraph.group_norm %{{.*}} channels_per_group = 1, {{.*}} -> (tensor<4x6xbf16>, tensor<4x6xbf16>, tensor<4x6xbf16>)
  %i, %im, %ir = dgraph.group_norm %x2, %g2, %g2 channels_per_group = 1, epsilon = 1.0e-05
      : (tensor<4x6xbf16>, tensor<6xbf16>, tensor<6xbf16>)
      -> (tensor<4x6xbf16>, tensor<4x6xbf16>, tensor<4x6xbf16>)
  return %dx : tensor<4x6x8x8xf32>
}

// -----

// Tests that the pooling ops round-trip in 1-D, 2-D (ceil mode, padding,
// dilation) and 3-D, with integer max pooling.
// CHECK-LABEL: func.func @pool
func.func @pool(%x: tensor<1x3x8x8xf32>, %l: tensor<2x4x9xf16>, %v: tensor<1x2x4x4x4xf64>,
                %u: tensor<1x1x5x5xui8>) -> (tensor<1x3x8x8xf32>, tensor<1x3x8x8xf32>) {
  // CHECK: dgraph.max_pool %{{.*}} kernel = [2, 2], strides = [2, 2], dilations = [1, 1], pad_low = [0, 0], pad_high = [0, 0] : (tensor<1x3x8x8xf32>) -> (tensor<1x3x4x4xf32>, tensor<1x3x4x4xi64>)
  %y, %i = dgraph.max_pool %x kernel = [2, 2], strides = [2, 2], dilations = [1, 1],
      pad_low = [0, 0], pad_high = [0, 0]
      : (tensor<1x3x8x8xf32>) -> (tensor<1x3x4x4xf32>, tensor<1x3x4x4xi64>)
  // CHECK: dgraph.max_pool_grad %{{.*}} : (tensor<1x3x4x4xf32>, tensor<1x3x4x4xi64>) -> tensor<1x3x8x8xf32>
  %dx = dgraph.max_pool_grad %y, %i : (tensor<1x3x4x4xf32>, tensor<1x3x4x4xi64>) -> tensor<1x3x8x8xf32>
  // CHECK: dgraph.avg_pool {{.*}} {count_include_pad} : (tensor<1x3x8x8xf32>) -> tensor<1x3x4x4xf32>
  %a = dgraph.avg_pool %x kernel = [3, 3], strides = [2, 2], dilations = [1, 1],
      pad_low = [1, 1], pad_high = [1, 1] {count_include_pad}
      : (tensor<1x3x8x8xf32>) -> tensor<1x3x4x4xf32>
  // CHECK: dgraph.avg_pool_grad {{.*}} {count_include_pad} : (tensor<1x3x4x4xf32>) -> tensor<1x3x8x8xf32>
  %da = dgraph.avg_pool_grad %a kernel = [3, 3], strides = [2, 2], dilations = [1, 1],
      pad_low = [1, 1], pad_high = [1, 1] {count_include_pad}
      : (tensor<1x3x4x4xf32>) -> tensor<1x3x8x8xf32>
  // 8 - 3 = 5 over stride 2: 3 outputs, 4 in ceil mode.
  // CHECK: dgraph.max_pool {{.*}} {ceil_mode} : (tensor<1x3x8x8xf32>) -> (tensor<1x3x4x4xf32>, tensor<1x3x4x4xi64>)
  %c, %ci = dgraph.max_pool %x kernel = [3, 3], strides = [2, 2], dilations = [1, 1],
      pad_low = [0, 0], pad_high = [0, 0] {ceil_mode}
      : (tensor<1x3x8x8xf32>) -> (tensor<1x3x4x4xf32>, tensor<1x3x4x4xi64>)
  // A dilated window spans (3 - 1) * 2 + 1 = 5 taps: 9 - 5 + 1 = 5 outputs.
  // CHECK: dgraph.avg_pool {{.*}} : (tensor<2x4x9xf16>) -> tensor<2x4x5xf16>
  %l1 = dgraph.avg_pool %l kernel = [3], strides = [1], dilations = [2], pad_low = [0],
      pad_high = [0] : (tensor<2x4x9xf16>) -> tensor<2x4x5xf16>
  // CHECK: dgraph.max_pool {{.*}} : (tensor<1x2x4x4x4xf64>) -> (tensor<1x2x2x2x2xf64>, tensor<1x2x2x2x2xi64>)
  %v1, %vi = dgraph.max_pool %v kernel = [2, 2, 2], strides = [2, 2, 2], dilations = [1, 1, 1],
      pad_low = [0, 0, 0], pad_high = [0, 0, 0]
      : (tensor<1x2x4x4x4xf64>) -> (tensor<1x2x2x2x2xf64>, tensor<1x2x2x2x2xi64>)
  // CHECK: dgraph.max_pool {{.*}} : (tensor<1x1x5x5xui8>) -> (tensor<1x1x3x3xui8>, tensor<1x1x3x3xi64>)
  %u1, %ui = dgraph.max_pool %u kernel = [3, 3], strides = [1, 1], dilations = [1, 1],
      pad_low = [0, 0], pad_high = [0, 0]
      : (tensor<1x1x5x5xui8>) -> (tensor<1x1x3x3xui8>, tensor<1x1x3x3xi64>)
  return %dx, %da : tensor<1x3x8x8xf32>, tensor<1x3x8x8xf32>
}
