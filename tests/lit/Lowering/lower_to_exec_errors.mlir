// RUN: dtcc-opt %s -split-input-file -dtcc-lower-to-exec -verify-diagnostics

// Tests that a function without a body is an error (it used to crash the
// serializer after being skipped).
// expected-error @+1 {{'func.func' op is a declaration without a body: a program's functions are defined in it}}
func.func private @main(tensor<2xf32>) -> tensor<f32>
