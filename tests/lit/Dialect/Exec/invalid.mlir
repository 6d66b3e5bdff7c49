// RUN: dtcc-opt %s -split-input-file -verify-diagnostics

func.func @f() {
  // expected-error @+1 {{expected arena "workspace", "state", "constant", "host_workspace" or "host_state", got "heap"}}
  %0 = dexec.buffer "heap"[0] : memref<4xf32>
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{expected a non-negative offset that is a multiple of 4, got 6}}
  %0 = dexec.buffer "workspace"[6] : memref<4xf32>
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{expected `live` only on a workspace buffer, got one in "state"}}
  %0 = dexec.buffer "state"[0] {live = array<i64: 0, 1>} : memref<4xf32>
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{expected `live` to be two kernel indices, 0 <= first <= last}}
  %0 = dexec.buffer "workspace"[0] {live = array<i64: 3, 1>} : memref<4xf32>
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{expected a value for a constant buffer}}
  %0 = dexec.buffer "constant"[0] : memref<4xf32>
  return
}

// -----

// A broadcast view of a constant stores the 3 elements it spans, not 6.
func.func @f() {
  // expected-error @+1 {{expected a value of shape and type matching 'memref<2x3xi64, strided<[0, 1]>>', got 'tensor<6xi64>'}}
  %0 = dexec.buffer "constant"[0] {value = dense<1> : tensor<6xi64>} : memref<2x3xi64, strided<[0, 1]>>
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{expected a value of shape and type matching 'memref<4xf32>', got 'tensor<4xi32>'}}
  %0 = dexec.buffer "constant"[0] {value = dense<1> : tensor<4xi32>} : memref<4xf32>
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{expected a value of shape and type matching 'memref<2x3xf32>', got 'tensor<4xf32>'}}
  %0 = dexec.buffer "constant"[0] {value = dense<1.0> : tensor<4xf32>} : memref<2x3xf32>
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{expected a value of shape and type matching 'memref<3x2xf32, strided<[0, 1]>>', got 'tensor<3xf32>'}}
  %0 = dexec.buffer "constant"[0] {value = dense<1.0> : tensor<3xf32>} : memref<3x2xf32, strided<[0, 1]>>
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{expected a strided layout with zero offset and non-negative strides}}
  %0 = dexec.buffer "workspace"[0] : memref<4xf32, strided<[-1]>>
  return
}

// -----

func.func @f() {
  %0 = dexec.buffer "workspace"[0] : memref<4xf32>
  // expected-error @+1 {{expected a kernel name}}
  dexec.kernel "" ins(%0 : memref<4xf32>) outs(%0 : memref<4xf32>) attrs {}
  return
}

// -----

func.func @f() {
  %0 = dexec.buffer "workspace"[0] : memref<4xf32>
  %1 = dexec.buffer "workspace"[0] : memref<4x2xf32, strided<[0, 1]>>
  // expected-error @+1 {{expected outputs that reach each element once, got 'memref<4x2xf32, strided<[0, 1]>>'}}
  dexec.kernel "copy" ins(%0 : memref<4xf32>) outs(%1 : memref<4x2xf32, strided<[0, 1]>>) attrs {}
  return
}

// -----

// A host kernel (an offloaded optimizer step) reads the host's arenas only.
func.func @f() {
  %0 = dexec.buffer "workspace"[0] : memref<4xf32>
  %1 = dexec.buffer "host_workspace"[0] : memref<4xf32>
  // expected-error @+1 {{expected inputs in host arenas, got a buffer of "workspace"}}
  dexec.kernel "exp" ins(%0 : memref<4xf32>) outs(%1 : memref<4xf32>) attrs {} {host}
  return
}

// -----

// A device kernel writes the device's arenas only.
func.func @f() {
  %0 = dexec.buffer "workspace"[0] : memref<4xf32>
  %1 = dexec.buffer "host_state"[0] : memref<4xf32>
  // expected-error @+1 {{expected outputs in device arenas, got a buffer of "host_state"}}
  dexec.kernel "exp" ins(%0 : memref<4xf32>) outs(%1 : memref<4xf32>) attrs {}
  return
}

// -----

// copy_to_host goes from the device's memory to the host's.
func.func @f() {
  %0 = dexec.buffer "host_workspace"[0] : memref<4xf32>
  %1 = dexec.buffer "host_workspace"[64] : memref<4xf32>
  // expected-error @+1 {{expected inputs in device arenas, got a buffer of "host_workspace"}}
  dexec.kernel "copy_to_host" ins(%0 : memref<4xf32>) outs(%1 : memref<4xf32>) attrs {}
  return
}

// -----

// copy_to_device goes from the host's memory to the device's.
func.func @f() {
  %0 = dexec.buffer "host_workspace"[0] : memref<4xf32>
  %1 = dexec.buffer "host_workspace"[64] : memref<4xf32>
  // expected-error @+1 {{expected outputs in device arenas, got a buffer of "host_workspace"}}
  dexec.kernel "copy_to_device" ins(%0 : memref<4xf32>) outs(%1 : memref<4xf32>) attrs {}
  return
}

// -----

// Transfers are the device's (its copy routines), not host kernels.
func.func @f() {
  %0 = dexec.buffer "workspace"[0] : memref<4xf32>
  %1 = dexec.buffer "host_workspace"[0] : memref<4xf32>
  // expected-error @+1 {{expected a transfer to run on the device, not on the host}}
  dexec.kernel "copy_to_host" ins(%0 : memref<4xf32>) outs(%1 : memref<4xf32>) attrs {} {host}
  return
}
