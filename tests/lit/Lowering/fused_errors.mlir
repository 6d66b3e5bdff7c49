// RUN: dtcc-opt %s -split-input-file -verify-diagnostics

// Tests that a fused call names a function.
func.func @not_a_function(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{kernel @dtcc_kernels::@missing is not a function}}
  %y = dgraph.fused @dtcc_kernels::@missing(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}
module @dtcc_kernels {
}

// -----

// Tests that the region function takes the operands' then the results'
// buffers.
func.func @wrong_count(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{takes 1 buffers, expected 2 (the operands, then the results)}}
  %y = dgraph.fused @dtcc_kernels::@k(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}
module @dtcc_kernels {
  func.func @k(%a: memref<4xf32>) {
    return
  }
}

// -----

// Tests that each buffer has its tensor's shape and element type.
func.func @wrong_type(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{argument 1 is 'memref<4xf64>', expected a contiguous memref of 'tensor<4xf32>'}}
  %y = dgraph.fused @dtcc_kernels::@k(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}
module @dtcc_kernels {
  func.func @k(%a: memref<4xf32>, %b: memref<4xf64>) {
    return
  }
}
