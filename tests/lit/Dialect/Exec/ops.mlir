// RUN: dtcc-opt %s | dtcc-opt | FileCheck %s

// Tests that buffers, kernels and bindings round-trip.
// CHECK-LABEL: func.func @main
// CHECK: %[[X:.*]] = dexec.buffer "workspace"[0] : memref<2x4xf32>
// CHECK: %[[W:.*]] = dexec.buffer "state"[0] {variable = @w} : memref<4x3xf32>
// CHECK: %[[B:.*]] = dexec.buffer "state"[64] {variable = @b} : memref<2x3xf32, strided<[0, 1]>>
// CHECK: %[[C:.*]] = dexec.buffer "constant"[0] {value = dense<1.000000e+00> : tensor<2x3xf32>} : memref<2x3xf32>
// CHECK: dexec.buffer "constant"[64] {value = dense<[1, 2, 3]> : tensor<3xi64>} : memref<2x3xi64, strided<[0, 1]>>
// CHECK: dexec.input "x", %[[X]] : memref<2x4xf32>
// CHECK: dexec.kernel "matmul" ins(%[[X]], %[[W]] : memref<2x4xf32>, memref<4x3xf32>) outs(%[[Y:.*]] : memref<2x3xf32>) attrs {transpose_rhs}
// CHECK: dexec.kernel "add" ins(%[[Y]], %[[B]] : memref<2x3xf32>, memref<2x3xf32, strided<[0, 1]>>) outs(%[[Y]] : memref<2x3xf32>) attrs {}
// CHECK: dexec.output "y", %[[Y]] : memref<2x3xf32>
func.func @main() {
  %x = dexec.buffer "workspace"[0] : memref<2x4xf32>
  %w = dexec.buffer "state"[0] {variable = @w} : memref<4x3xf32>
  %b = dexec.buffer "state"[64] {variable = @b} : memref<2x3xf32, strided<[0, 1]>>
  %c = dexec.buffer "constant"[0] {value = dense<1.0> : tensor<2x3xf32>} : memref<2x3xf32>
  %l = dexec.buffer "constant"[64] {value = dense<[1, 2, 3]> : tensor<3xi64>} : memref<2x3xi64, strided<[0, 1]>>
  %y = dexec.buffer "workspace"[64] : memref<2x3xf32>
  dexec.input "x", %x : memref<2x4xf32>
  dexec.kernel "matmul" ins(%x, %w : memref<2x4xf32>, memref<4x3xf32>) outs(%y : memref<2x3xf32>) attrs {transpose_rhs}
  dexec.kernel "add" ins(%y, %b : memref<2x3xf32>, memref<2x3xf32, strided<[0, 1]>>) outs(%y : memref<2x3xf32>) attrs {}
  dexec.output "y", %y : memref<2x3xf32>
  return
}
