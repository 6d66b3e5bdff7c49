// RUN: dtcc-opt %s -split-input-file -dtcc-graph-autodiff -dtcc-graph-optimizer -verify-diagnostics

// Tests that a model variable named like the optimizer's state must have the
// state's type (it used to leave a load of the wrong type: invalid IR).
dgraph.variable @w : tensor<4xf32> = dense<1.0> {trainable}
// expected-error @+1 {{'dgraph.variable' op has the name of the optimizer's state '__step', which is of type 'tensor<i64>', but is of type 'tensor<4xf32>'}}
dgraph.variable @__step : tensor<4xf32> = dense<1.0>
func.func @main() -> (tensor<f32> {dgraph.name = "loss"}) {
  %w = dgraph.load @w : tensor<4xf32>
  %s = dgraph.reduce_sum %w, dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// Likewise for a parameter's moment.
dgraph.variable @w : tensor<4xf32> = dense<1.0> {trainable}
// expected-error @+1 {{'dgraph.variable' op has the name of the optimizer's state 'w/adam_m', which is of type 'tensor<4xf32>', but is of type 'tensor<2xf32>'}}
dgraph.variable @"w/adam_m" : tensor<2xf32> = dense<0.0>
func.func @main() -> (tensor<f32> {dgraph.name = "loss"}) {
  %w = dgraph.load @w : tensor<4xf32>
  %s = dgraph.reduce_sum %w, dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %s : tensor<f32>
}
