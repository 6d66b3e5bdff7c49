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

// -----

// Tests that a parameter the runtime's optimizer kernels cannot update (f16,
// bf16) is an error at the variable (found by dtcc-fuzz-train: the program
// compiled, then the runtime refused its sgd and adamw instructions).
// expected-error @+1 {{parameter 'w' is 'f16': the optimizer updates f32 or f64 parameters; store the weights as float (f32) and compile with --dtype fp16 or bf16 for a lower-precision forward and backward pass, or freeze it (--frozen)}}
dgraph.variable @w : tensor<4xf16> = dense<1.0> {trainable}
func.func @main() -> (tensor<f32> {dgraph.name = "loss"}) {
  %w = dgraph.load @w : tensor<4xf16>
  %c = dgraph.cast %w : tensor<4xf16> to tensor<4xf32>
  %s = dgraph.reduce_sum %c, dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %s : tensor<f32>
}
