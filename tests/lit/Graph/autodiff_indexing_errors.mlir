// RUN: dtcc-opt %s -split-input-file -dtcc-graph-autodiff -verify-diagnostics

// Tests that scatters with a multiplying, max or min reduction have no VJP
// rule and say which reductions do.
dgraph.variable @w : tensor<4xf32> {trainable}
func.func @main() -> (tensor<f32> {dgraph.name = "loss"}) {
  %w = dgraph.load @w : tensor<4xf32>
  %i = dgraph.constant dense<[[1]]> : tensor<1x1xi64>
  %u = dgraph.constant dense<[2.0]> : tensor<1xf32>
  // expected-error @+1 {{'dgraph.scatter_nd' op has no VJP rule for reduction "mul" (only "none" and "add")}}
  %s = dgraph.scatter_nd %w, %i, %u batch_dims = 0 {reduction = "mul"} : (tensor<4xf32>, tensor<1x1xi64>, tensor<1xf32>) -> tensor<4xf32>
  %l = dgraph.reduce_sum %s, dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

dgraph.variable @w : tensor<2x3xf32> {trainable}
func.func @main() -> (tensor<f32> {dgraph.name = "loss"}) {
  %w = dgraph.load @w : tensor<2x3xf32>
  %i = dgraph.constant dense<[[1], [0]]> : tensor<2x1xi64>
  %u = dgraph.constant dense<[[2.0], [1.0]]> : tensor<2x1xf32>
  // expected-error @+1 {{'dgraph.scatter_elements' op has no VJP rule for reduction "max" (only "none" and "add")}}
  %s = dgraph.scatter_elements %w, %i, %u axis = 1 {reduction = "max"} : (tensor<2x3xf32>, tensor<2x1xi64>, tensor<2x1xf32>) -> tensor<2x3xf32>
  %l = dgraph.reduce_sum %s, dims = [0, 1] : (tensor<2x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
