// RUN: dtcc-opt %s -split-input-file -verify-diagnostics

// Tests that an input of rank 2 is rejected.
func.func @f(%x: tensor<2x3xf32>, %w: tensor<4x3xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected an input of rank 3, 4 or 5 (batch, channels and 1 to 3 spatial dimensions), got 'tensor<2x3xf32>'}}
  %0 = dgraph.conv %x, %w strides = [], dilations = [], pad_low = [], pad_high = [], groups = 1 : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<2x4xf32>
  return
}

// -----

// Tests that the filter must have the input's rank.
func.func @f(%x: tensor<2x3x8xf32>, %w: tensor<4x3x3x3xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected a filter of rank 3 (the input's), got 'tensor<4x3x3x3xf32>'}}
  %0 = dgraph.conv %x, %w strides = [1], dilations = [1], pad_low = [0], pad_high = [0], groups = 1 : (tensor<2x3x8xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x6xf32>
  return
}

// -----

// Tests that input and filter must have one element type.
func.func @f(%x: tensor<2x3x8xf32>, %w: tensor<4x3x3xf64>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected input and filter of one element type, got 'f32' and 'f64'}}
  %0 = dgraph.conv %x, %w strides = [1], dilations = [1], pad_low = [0], pad_high = [0], groups = 1 : (tensor<2x3x8xf32>, tensor<4x3x3xf64>) -> tensor<2x4x6xf32>
  return
}

// -----

// Tests that the window attributes need one entry per spatial dimension.
func.func @f(%x: tensor<2x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected strides of size 2 (one per spatial dimension), got 1}}
  %0 = dgraph.conv %x, %w strides = [1], dilations = [1, 1], pad_low = [0, 0], pad_high = [0, 0], groups = 1 : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x6x6xf32>
  return
}

// -----

// Tests that strides must be positive.
func.func @f(%x: tensor<2x3x8xf32>, %w: tensor<4x3x3xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected strides >= 1, got 0 in spatial dimension 0}}
  %0 = dgraph.conv %x, %w strides = [0], dilations = [1], pad_low = [0], pad_high = [0], groups = 1 : (tensor<2x3x8xf32>, tensor<4x3x3xf32>) -> tensor<2x4x6xf32>
  return
}

// -----

// Tests that dilations must be positive.
func.func @f(%x: tensor<2x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected dilations >= 1, got 0 in spatial dimension 1}}
  %0 = dgraph.conv %x, %w strides = [1, 1], dilations = [1, 0], pad_low = [0, 0], pad_high = [0, 0], groups = 1 : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x6x6xf32>
  return
}

// -----

// Tests that pads must not be negative.
func.func @f(%x: tensor<2x3x8xf32>, %w: tensor<4x3x3xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected pad_high >= 0, got -1 in spatial dimension 0}}
  %0 = dgraph.conv %x, %w strides = [1], dilations = [1], pad_low = [0], pad_high = [-1], groups = 1 : (tensor<2x3x8xf32>, tensor<4x3x3xf32>) -> tensor<2x4x5xf32>
  return
}

// -----

// Tests that groups must be positive.
func.func @f(%x: tensor<2x3x8xf32>, %w: tensor<4x3x3xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected groups >= 1, got 0}}
  %0 = dgraph.conv %x, %w strides = [1], dilations = [1], pad_low = [0], pad_high = [0], groups = 0 : (tensor<2x3x8xf32>, tensor<4x3x3xf32>) -> tensor<2x4x6xf32>
  return
}

// -----

// Tests that groups must divide the input channels.
func.func @f(%x: tensor<2x3x8xf32>, %w: tensor<4x1x3xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected groups (2) to divide the input channels (3)}}
  %0 = dgraph.conv %x, %w strides = [1], dilations = [1], pad_low = [0], pad_high = [0], groups = 2 : (tensor<2x3x8xf32>, tensor<4x1x3xf32>) -> tensor<2x4x6xf32>
  return
}

// -----

// Tests that groups must divide the output channels.
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<3x2x3xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected groups (2) to divide the filter's output channels (3)}}
  %0 = dgraph.conv %x, %w strides = [1], dilations = [1], pad_low = [0], pad_high = [0], groups = 2 : (tensor<2x4x8xf32>, tensor<3x2x3xf32>) -> tensor<2x3x6xf32>
  return
}

// -----

// Tests that the filter's dimension 1 is the channels of a group.
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<4x4x3xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected filter dimension 1 to be C / groups = 2, got 4}}
  %0 = dgraph.conv %x, %w strides = [1], dilations = [1], pad_low = [0], pad_high = [0], groups = 2 : (tensor<2x4x8xf32>, tensor<4x4x3xf32>) -> tensor<2x4x6xf32>
  return
}

// -----

// Tests that kernel sizes must be positive.
func.func @f(%x: tensor<2x3x8xf32>, %w: tensor<4x3x0xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected kernel sizes >= 1, got 0 in spatial dimension 0}}
  %0 = dgraph.conv %x, %w strides = [1], dilations = [1], pad_low = [0], pad_high = [0], groups = 1 : (tensor<2x3x8xf32>, tensor<4x3x0xf32>) -> tensor<2x4x9xf32>
  return
}

// -----

// Tests that the padded input must hold one dilated window.
func.func @f(%x: tensor<2x3x4xf32>, %w: tensor<4x3x3xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected the padded input (4) to hold a dilated window (5) in spatial dimension 0}}
  %0 = dgraph.conv %x, %w strides = [1], dilations = [2], pad_low = [0], pad_high = [0], groups = 1 : (tensor<2x3x4xf32>, tensor<4x3x3xf32>) -> tensor<2x4x1xf32>
  return
}

// -----

// Tests that a result type other than the inferred one is rejected.
func.func @f(%x: tensor<2x3x8xf32>, %w: tensor<4x3x3xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{inferred type(s) 'tensor<2x4x3xf32>' are incompatible with return type(s) of operation 'tensor<2x4x4xf32>'}}
  %0 = dgraph.conv %x, %w strides = [2], dilations = [1], pad_low = [0], pad_high = [0], groups = 1 : (tensor<2x3x8xf32>, tensor<4x3x3xf32>) -> tensor<2x4x4xf32>
  return
}

// -----

// Tests that the input gradient's grad must be the convolution of its result type.
func.func @f(%dy: tensor<2x4x4xf32>, %w: tensor<4x3x3xf32>) {
  // expected-error @+1 {{expected grad of type 'tensor<2x4x3xf32>' (the convolution of the result by the filter), got 'tensor<2x4x4xf32>'}}
  %0 = dgraph.conv_input_grad %dy, %w strides = [2], dilations = [1], pad_low = [0], pad_high = [0], groups = 1 : (tensor<2x4x4xf32>, tensor<4x3x3xf32>) -> tensor<2x3x8xf32>
  return
}

// -----

// Tests that the input gradient checks the window against its result type.
func.func @f(%dy: tensor<2x4x3xf32>, %w: tensor<4x2x3xf32>) {
  // expected-error @+1 {{expected filter dimension 1 to be C / groups = 3, got 2}}
  %0 = dgraph.conv_input_grad %dy, %w strides = [2], dilations = [1], pad_low = [0], pad_high = [0], groups = 1 : (tensor<2x4x3xf32>, tensor<4x2x3xf32>) -> tensor<2x3x8xf32>
  return
}

// -----

// Tests that the filter gradient's grad must be the convolution of its input.
func.func @f(%x: tensor<2x3x8xf32>, %dy: tensor<3x4x6xf32>) {
  // expected-error @+1 {{expected grad of type 'tensor<2x4x6xf32>' (the convolution of the input by the result), got 'tensor<3x4x6xf32>'}}
  %0 = dgraph.conv_filter_grad %x, %dy strides = [1], dilations = [1], pad_low = [0], pad_high = [0], groups = 1 : (tensor<2x3x8xf32>, tensor<3x4x6xf32>) -> tensor<4x3x3xf32>
  return
}

// -----

// Tests that the filter gradient's element types must agree.
func.func @f(%x: tensor<2x3x8xf32>, %dy: tensor<2x4x6xf32>) {
  // expected-error @+1 {{expected input and filter of one element type, got 'f32' and 'f16'}}
  %0 = dgraph.conv_filter_grad %x, %dy strides = [1], dilations = [1], pad_low = [0], pad_high = [0], groups = 1 : (tensor<2x3x8xf32>, tensor<2x4x6xf32>) -> tensor<4x3x3xf16>
  return
}
