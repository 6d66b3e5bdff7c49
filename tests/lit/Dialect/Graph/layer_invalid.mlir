// RUN: dtcc-opt %s -split-input-file -verify-diagnostics

// Tests that a layer says at least one thing.
func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{expected a module, a layer index or both}}
  %0 = dgraph.tanh %x {dgraph.layer = #dgraph.layer<>} : tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

// Tests that a layer index is not negative.
func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{expected a layer index >= 0, got -1}}
  %0 = dgraph.tanh %x {dgraph.layer = #dgraph.layer<index = -1>} : tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

// Tests that dgraph.layer holds a #dgraph.layer.
func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{expected 'dgraph.layer' to be a #dgraph.layer, got "layers.3"}}
  %0 = dgraph.tanh %x {dgraph.layer = "layers.3"} : tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

// Tests that dgraph.layer belongs on ops, not on the module.
// expected-error @+1 {{'dgraph.layer' belongs on the ops of a function, not on the module}}
module attributes {dgraph.layer = #dgraph.layer<index = 0>} {
}

// -----

// Tests that a module and a layer index may come together or alone.
func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = dgraph.tanh %x {dgraph.layer = #dgraph.layer<module = "transformer", index = 3>} : tensor<2xf32>
  %1 = dgraph.tanh %0 {dgraph.layer = #dgraph.layer<module = "enc1">} : tensor<2xf32>
  %2 = dgraph.tanh %1 {dgraph.layer = #dgraph.layer<index = 0>} : tensor<2xf32>
  return %2 : tensor<2xf32>
}

// -----

// The training step's module attributes are typed and belong on the module.
// expected-error @+1 {{expected 'dgraph.optimizer' to be "adamw" or "sgd", got "lamb"}}
module attributes {dgraph.optimizer = "lamb"} {
}

// -----

// expected-error @+1 {{expected 'dgraph.data_inputs' to be an array of input names, got "ids,labels"}}
module attributes {dgraph.data_inputs = "ids,labels"} {
}

// -----

// expected-error @+1 {{expected 'dgraph.vocab_size' to be a positive integer, got 0}}
module attributes {dgraph.vocab_size = 0} {
}

// -----

// expected-error @+1 {{expected 'dgraph.dtype' to be "bf16" or "fp16", got "fp8"}}
module attributes {dgraph.dtype = "fp8"} {
}

// -----

module {
  // expected-error @+1 {{'dgraph.optimizer' belongs on the module}}
  func.func @f() attributes {dgraph.optimizer = "sgd"} {
    return
  }
}

// -----

// Tests that a weight copy (dgraph.rounded_from) is a 16-bit float variable.
module {
  dgraph.variable @w : tensor<4xf32> {trainable}
  // expected-error @+1 {{'dgraph.rounded_from' makes a bf16 or f16 copy, but the variable is 'tensor<4xf32>'}}
  dgraph.variable @"w/half" : tensor<4xf32> {dgraph.rounded_from = @w}
}

// -----

// Tests that dgraph.rounded_from names the master by a symbol, on a variable.
module {
  // expected-error @+1 {{expected 'dgraph.rounded_from' to be a symbol reference on a dgraph.variable, got "w"}}
  dgraph.variable @"w/half" : tensor<4xbf16> {dgraph.rounded_from = "w"}
}
