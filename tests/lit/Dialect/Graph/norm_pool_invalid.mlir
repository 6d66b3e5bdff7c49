// RUN: dtcc-opt %s -split-input-file -verify-diagnostics

// Tests that batch_norm_stats wants [N, C, ...].
func.func @f(%x: tensor<8xf32>, %s: tensor<8xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected x of rank >= 2 ([N, C, ...]), got 'tensor<8xf32>'}}
  %0 = dgraph.batch_norm_stats %x, %s : (tensor<8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  return
}

// -----

// Tests that batch_norm_stats wants a [C] shift.
func.func @f(%x: tensor<8x3x4xf32>, %s: tensor<4xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected shift of type 'tensor<3xf32>', got 'tensor<4xf32>'}}
  %0 = dgraph.batch_norm_stats %x, %s : (tensor<8x3x4xf32>, tensor<4xf32>) -> tensor<2x3xf32>
  return
}

// -----

// Tests that batch_norm_stats returns [2, C].
func.func @f(%x: tensor<8x3x4xf32>, %s: tensor<3xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{inferred type(s) 'tensor<2x3xf32>' are incompatible with return type(s) of operation 'tensor<3xf32>'}}
  %0 = dgraph.batch_norm_stats %x, %s : (tensor<8x3x4xf32>, tensor<3xf32>) -> tensor<3xf32>
  return
}

// -----

// Tests that batch_norm's parameters have x's element type.
func.func @f(%x: tensor<8x3x4xf32>, %g: tensor<3xf16>, %v: tensor<3xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected scale of type 'tensor<3xf32>', got 'tensor<3xf16>'}}
  %0 = dgraph.batch_norm %x, %g, %v, %v, %v epsilon = 1.0e-05
      : (tensor<8x3x4xf32>, tensor<3xf16>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<8x3x4xf32>
  return
}

// -----

// Tests that batch_norm's variance is [C].
func.func @f(%x: tensor<8x3x4xf32>, %v: tensor<3xf32>, %w: tensor<4xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected var of type 'tensor<3xf32>', got 'tensor<4xf32>'}}
  %0 = dgraph.batch_norm %x, %v, %v, %v, %w epsilon = 1.0e-05
      : (tensor<8x3x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<4xf32>) -> tensor<8x3x4xf32>
  return
}

// -----

// Tests that batch_norm's epsilon is not negative.
func.func @f(%x: tensor<8x3x4xf32>, %v: tensor<3xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected epsilon >= 0, got -1}}
  %0 = dgraph.batch_norm %x, %v, %v, %v, %v epsilon = -1.0
      : (tensor<8x3x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<8x3x4xf32>
  return
}

// -----

// Tests that batch_norm_update's momentum is in [0, 1].
func.func @f(%v: tensor<3xf32>) {
  // expected-error @+1 {{expected 0 <= momentum <= 1, got 1.5}}
  %0, %1 = dgraph.batch_norm_update %v, %v, %v, %v {momentum = 1.5, var_scale = 1.0} : tensor<3xf32>
  return
}

// -----

// Tests that batch_norm_update's variance scale is positive.
func.func @f(%v: tensor<3xf32>) {
  // expected-error @+1 {{expected var_scale > 0, got 0}}
  %0, %1 = dgraph.batch_norm_update %v, %v, %v, %v {momentum = 0.9, var_scale = 0.0} : tensor<3xf32>
  return
}

// -----

// Tests that batch_norm_update works on [C] statistics.
func.func @f(%v: tensor<2x3xf32>) {
  // expected-error @+1 {{expected rank-1 statistics, got 'tensor<2x3xf32>'}}
  %0, %1 = dgraph.batch_norm_update %v, %v, %v, %v {momentum = 0.9, var_scale = 1.0} : tensor<2x3xf32>
  return
}

// -----

// Tests that batch_norm_grad_stats wants dy of x's type.
func.func @f(%x: tensor<8x3x4xf32>, %m: tensor<3xf32>, %dy: tensor<8x3x5xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected dy of type 'tensor<8x3x4xf32>', got 'tensor<8x3x5xf32>'}}
  %0 = dgraph.batch_norm_grad_stats %x, %m, %dy
      : (tensor<8x3x4xf32>, tensor<3xf32>, tensor<8x3x5xf32>) -> tensor<2x3xf32>
  return
}

// -----

// Tests that batch_norm_grad wants [2, C] statistics.
func.func @f(%x: tensor<8x3x4xf32>, %v: tensor<3xf32>, %s: tensor<3x2xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected stats of type 'tensor<2x3xf32>', got 'tensor<3x2xf32>'}}
  %0 = dgraph.batch_norm_grad %x, %x, %v, %v, %v, %s epsilon = 1.0e-05, count = 32
      : (tensor<8x3x4xf32>, tensor<8x3x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>,
         tensor<3x2xf32>) -> tensor<8x3x4xf32>
  return
}

// -----

// Tests that batch_norm_grad's count is positive.
func.func @f(%x: tensor<8x3x4xf32>, %v: tensor<3xf32>, %s: tensor<2x3xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected count >= 1, got 0}}
  %0 = dgraph.batch_norm_grad %x, %x, %v, %v, %v, %s epsilon = 1.0e-05, count = 0
      : (tensor<8x3x4xf32>, tensor<8x3x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>,
         tensor<2x3xf32>) -> tensor<8x3x4xf32>
  return
}

// -----

// Tests that group_norm's group size divides the channels.
func.func @f(%x: tensor<2x6x4xf32>, %g: tensor<6xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected channels_per_group >= 1 dividing 6 channels, got 4}}
  %0, %1, %2 = dgraph.group_norm %x, %g, %g channels_per_group = 4, epsilon = 1.0e-05
      : (tensor<2x6x4xf32>, tensor<6xf32>, tensor<6xf32>) -> (tensor<2x6x4xf32>, tensor<2x1xf32>, tensor<2x1xf32>)
  return
}

// -----

// Tests that group_norm's statistics are [N, groups].
func.func @f(%x: tensor<2x6x4xf32>, %g: tensor<6xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{inferred type(s) 'tensor<2x6x4xf32>', 'tensor<2x2xf32>', 'tensor<2x2xf32>' are incompatible with return type(s) of operation 'tensor<2x6x4xf32>', 'tensor<2x6xf32>', 'tensor<2x6xf32>'}}
  %0, %1, %2 = dgraph.group_norm %x, %g, %g channels_per_group = 3, epsilon = 1.0e-05
      : (tensor<2x6x4xf32>, tensor<6xf32>, tensor<6xf32>) -> (tensor<2x6x4xf32>, tensor<2x6xf32>, tensor<2x6xf32>)
  return
}

// -----

// Tests that group_norm_grad checks its saved statistics.
func.func @f(%x: tensor<2x6x4xf32>, %g: tensor<6xf32>, %m: tensor<2x3xf32>) {
  // expected-error @+1 {{expected mean and rstd of type 'tensor<2x2xf32>'}}
  %0, %1, %2 = dgraph.group_norm_grad %x, %g, %m, %m, %x channels_per_group = 3
      : (tensor<2x6x4xf32>, tensor<6xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x6x4xf32>)
      -> (tensor<2x6x4xf32>, tensor<6xf32>, tensor<6xf32>)
  return
}

// -----

// Tests that pooling wants spatial dimensions.
func.func @f(%x: tensor<2x6xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected an input of rank >= 3 ([N, C, d...]), got 'tensor<2x6xf32>'}}
  %0, %1 = dgraph.max_pool %x kernel = [], strides = [], dilations = [], pad_low = [], pad_high = []
      : (tensor<2x6xf32>) -> (tensor<2x6xf32>, tensor<2x6xi64>)
  return
}

// -----

// Tests that a window has one entry per spatial dimension.
func.func @f(%x: tensor<1x1x8x8xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected strides with 2 entries (one per spatial dimension), got 1}}
  %0, %1 = dgraph.max_pool %x kernel = [2, 2], strides = [2], dilations = [1, 1], pad_low = [0, 0],
      pad_high = [0, 0] : (tensor<1x1x8x8xf32>) -> (tensor<1x1x4x4xf32>, tensor<1x1x4x4xi64>)
  return
}

// -----

// Tests that strides are positive.
func.func @f(%x: tensor<1x1x8x8xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected strides entries >= 1, got 0}}
  %0 = dgraph.avg_pool %x kernel = [2, 2], strides = [2, 0], dilations = [1, 1], pad_low = [0, 0],
      pad_high = [0, 0] : (tensor<1x1x8x8xf32>) -> tensor<1x1x4x4xf32>
  return
}

// -----

// Tests that paddings are not negative.
func.func @f(%x: tensor<1x1x8x8xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected pad_low entries >= 0, got -1}}
  %0 = dgraph.avg_pool %x kernel = [2, 2], strides = [2, 2], dilations = [1, 1], pad_low = [0, -1],
      pad_high = [0, 0] : (tensor<1x1x8x8xf32>) -> tensor<1x1x4x4xf32>
  return
}

// -----

// Tests that the window fits the padded input.
func.func @f(%x: tensor<1x1x4x4xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected a window that fits spatial dimension 1 (4 elements, 0+0 padding), got kernel 3 with dilation 2}}
  %0 = dgraph.avg_pool %x kernel = [2, 3], strides = [1, 1], dilations = [1, 2], pad_low = [0, 0],
      pad_high = [0, 0] : (tensor<1x1x4x4xf32>) -> tensor<1x1x3x1xf32>
  return
}

// -----

// Tests that max_pool_grad keeps dy's samples and channels.
func.func @f(%dy: tensor<1x3x4x4xf32>, %i: tensor<1x3x4x4xi64>) {
  // expected-error @+1 {{expected a result of dy's rank, element type and first two dimensions, got 'tensor<1x2x8x8xf32>'}}
  %0 = dgraph.max_pool_grad %dy, %i : (tensor<1x3x4x4xf32>, tensor<1x3x4x4xi64>) -> tensor<1x2x8x8xf32>
  return
}

// -----

// Tests that max_pool_grad's indices have dy's shape.
func.func @f(%dy: tensor<1x3x4x4xf32>, %i: tensor<1x3x4x2xi64>) {
  // expected-error @+1 {{all of {dy, indices} have same shape}}
  %0 = dgraph.max_pool_grad %dy, %i : (tensor<1x3x4x4xf32>, tensor<1x3x4x2xi64>) -> tensor<1x3x8x8xf32>
  return
}

// -----

// Tests that avg_pool_grad's dy has the pooled shape of its result.
func.func @f(%dy: tensor<1x3x3x3xf32>) {
  // expected-error @+1 {{expected dy of type 'tensor<1x3x4x4xf32>' (the pooled shape of the result), got 'tensor<1x3x3x3xf32>'}}
  %0 = dgraph.avg_pool_grad %dy kernel = [2, 2], strides = [2, 2], dilations = [1, 1],
      pad_low = [0, 0], pad_high = [0, 0] : (tensor<1x3x3x3xf32>) -> tensor<1x3x8x8xf32>
  return
}
