// RUN: dtcc-opt %s -split-input-file -canonicalize | FileCheck %s

// Tests that PyTorch's export of nn.GroupNorm(2, 6) (an instance norm over
// the input reshaped to [N, 2, -1], reshaped back, times the weight, plus the
// bias) becomes one group_norm with the affine.
// CHECK-LABEL: func.func @torch_group_norm
// CHECK-SAME: (%[[X:.*]]: tensor<2x6x4xf32>, %[[W:.*]]: tensor<6xf32>, %[[B:.*]]: tensor<6xf32>)
// CHECK-NEXT: %[[Y:.*]], %{{.*}}, %{{.*}} = dgraph.group_norm %[[X]], %[[W]], %[[B]] channels_per_group = 3, epsilon = 9.99999974E-6
// CHECK-NEXT: return %[[Y]]
func.func @torch_group_norm(%x: tensor<2x6x4xf32>, %w: tensor<6xf32>, %b: tensor<6xf32>) -> tensor<2x6x4xf32> {
  %ones = dgraph.constant dense<1.0> : tensor<2xf32>
  %zeros = dgraph.constant dense<0.0> : tensor<2xf32>
  %r = dgraph.reshape %x : (tensor<2x6x4xf32>) -> tensor<2x2x12xf32>
  %n, %m, %s = dgraph.group_norm %r, %ones, %zeros channels_per_group = 1, epsilon = 1.0e-05
      : (tensor<2x2x12xf32>, tensor<2xf32>, tensor<2xf32>) -> (tensor<2x2x12xf32>, tensor<2x2xf32>, tensor<2x2xf32>)
  %back = dgraph.reshape %n : (tensor<2x2x12xf32>) -> tensor<2x6x4xf32>
  %w1 = dgraph.reshape %w : (tensor<6xf32>) -> tensor<6x1xf32>
  %wb = dgraph.broadcast_in_dim %w1, dims = [1, 2] : (tensor<6x1xf32>) -> tensor<2x6x4xf32>
  %scaled = dgraph.mul %back, %wb : tensor<2x6x4xf32>
  %bb = dgraph.broadcast_in_dim %b, dims = [1] : (tensor<6xf32>) -> tensor<2x6x4xf32>
  %y = dgraph.add %bb, %scaled : tensor<2x6x4xf32>
  return %y : tensor<2x6x4xf32>
}

// -----

// Tests that an instance norm with its own parameters is not fused: the
// affine after it is not group norm's.
// CHECK-LABEL: func.func @own_scale
// CHECK: dgraph.group_norm %{{.*}} channels_per_group = 1
// CHECK: dgraph.mul
// CHECK: dgraph.add
func.func @own_scale(%x: tensor<2x6x4xf32>, %w: tensor<6xf32>, %b: tensor<6xf32>, %g: tensor<2xf32>) -> tensor<2x6x4xf32> {
  %zeros = dgraph.constant dense<0.0> : tensor<2xf32>
  %r = dgraph.reshape %x : (tensor<2x6x4xf32>) -> tensor<2x2x12xf32>
  %n, %m, %s = dgraph.group_norm %r, %g, %zeros channels_per_group = 1, epsilon = 1.0e-05
      : (tensor<2x2x12xf32>, tensor<2xf32>, tensor<2xf32>) -> (tensor<2x2x12xf32>, tensor<2x2xf32>, tensor<2x2xf32>)
  %back = dgraph.reshape %n : (tensor<2x2x12xf32>) -> tensor<2x6x4xf32>
  %wb = dgraph.broadcast_in_dim %w, dims = [1] : (tensor<6xf32>) -> tensor<2x6x4xf32>
  %scaled = dgraph.mul %back, %wb : tensor<2x6x4xf32>
  %bb = dgraph.broadcast_in_dim %b, dims = [1] : (tensor<6xf32>) -> tensor<2x6x4xf32>
  %y = dgraph.add %scaled, %bb : tensor<2x6x4xf32>
  return %y : tensor<2x6x4xf32>
}

// -----

// Tests that a weight broadcast along another dimension is not fused.
// CHECK-LABEL: func.func @not_per_channel
// CHECK: dgraph.group_norm %{{.*}} channels_per_group = 1
// CHECK: dgraph.mul
func.func @not_per_channel(%x: tensor<2x6x4xf32>, %w: tensor<4xf32>, %b: tensor<6xf32>) -> tensor<2x6x4xf32> {
  %ones = dgraph.constant dense<1.0> : tensor<2xf32>
  %zeros = dgraph.constant dense<0.0> : tensor<2xf32>
  %r = dgraph.reshape %x : (tensor<2x6x4xf32>) -> tensor<2x2x12xf32>
  %n, %m, %s = dgraph.group_norm %r, %ones, %zeros channels_per_group = 1, epsilon = 1.0e-05
      : (tensor<2x2x12xf32>, tensor<2xf32>, tensor<2xf32>) -> (tensor<2x2x12xf32>, tensor<2x2xf32>, tensor<2x2xf32>)
  %back = dgraph.reshape %n : (tensor<2x2x12xf32>) -> tensor<2x6x4xf32>
  %wb = dgraph.broadcast_in_dim %w, dims = [2] : (tensor<4xf32>) -> tensor<2x6x4xf32>
  %scaled = dgraph.mul %back, %wb : tensor<2x6x4xf32>
  %bb = dgraph.broadcast_in_dim %b, dims = [1] : (tensor<6xf32>) -> tensor<2x6x4xf32>
  %y = dgraph.add %scaled, %bb : tensor<2x6x4xf32>
  return %y : tensor<2x6x4xf32>
}
