// RUN: dtcc-opt %s -split-input-file -dtcc-graph-autodiff -verify-diagnostics

// Tests that an op without a VJP rule on the gradient path is named
// (sum_squares, which the optimizer's clipping makes, has none).
dgraph.variable @w : tensor<4xf32> {trainable}
func.func @main() -> (tensor<f32> {dgraph.name = "loss"}) {
  %w = dgraph.load @w : tensor<4xf32>
  // expected-error @+1 {{'dgraph.sum_squares' op has no VJP rule, but lies between a parameter and the loss}}
  %l = dgraph.sum_squares %w, dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests that the loss must be unambiguous.
dgraph.variable @w : tensor<4xf32> {trainable}
// expected-error @+1 {{cannot tell the loss: expected one scalar float output, got 2}}
func.func @main() -> (tensor<f32> {dgraph.name = "a"}, tensor<f32> {dgraph.name = "b"}) {
  %w = dgraph.load @w : tensor<4xf32>
  %l = dgraph.reduce_sum %w, dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l, %l : tensor<f32>, tensor<f32>
}

// -----

// Tests that the loss must depend on a parameter.
dgraph.variable @w : tensor<4xf32>
// expected-error @+1 {{the loss does not depend on any trainable parameter}}
func.func @main() -> (tensor<f32> {dgraph.name = "loss"}) {
  %w = dgraph.load @w : tensor<4xf32>
  %l = dgraph.reduce_sum %w, dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests that a missing @main is reported.
// expected-error @+1 {{expected a function @main (the forward pass and loss)}}
module {
  func.func @other() {
    return
  }
}

// -----

// Tests that @main's inputs and outputs must be dgraph tensors (an i32 used
// to crash the pass).
// expected-error @+1 {{'func.func' op expected statically shaped tensors as the inputs and outputs of @main, got 'i32' (input 0)}}
func.func @main(%x: i32) -> i32 {
  return %x : i32
}
