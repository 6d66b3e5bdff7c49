// RUN: dtcc-opt %s -split-input-file -dtcc-graph-mixed-precision=dtype=bf16 -verify-diagnostics
// RUN: not dtcc-opt %s -split-input-file -dtcc-graph-mixed-precision=dtype=int8 2>&1 | FileCheck %s --check-prefix=DTYPE

// Tests that an unknown dtype is named.
// DTYPE: error: expected dtype bf16, fp16 or fp32, got 'int8'

// Tests that the pass needs autodiff's @train_step.
// expected-error @+1 {{expected @train_step (run dtcc-graph-autodiff first)}}
module {
  dgraph.variable @w : tensor<4xf32> {trainable}
  func.func @main() -> tensor<f32> {
    %w = dgraph.load @w : tensor<4xf32>
    %l = dgraph.reduce_sum %w, dims = [0] : (tensor<4xf32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// Tests that the pass runs before the optimizer, not after it.
module attributes {dgraph.optimizer = "adamw"} {
  dgraph.variable @w : tensor<4xf32> {trainable}
  // expected-error @+1 {{expected @train_step before dtcc-graph-optimizer, got one that already updates the parameters}}
  func.func @train_step() -> tensor<f32> {
    %w = dgraph.load @w : tensor<4xf32>
    %l = dgraph.reduce_sum %w, dims = [0] : (tensor<4xf32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}
