// RUN: dtcc-opt %s -split-input-file -dtcc-lower-to-exec -verify-diagnostics

// The lowering checks every kernel call it emits against the kernel-signature
// table (runtime/kernels/Kernels.td), the one both backends check programs
// against when they load them: a call they would refuse is refused here, at
// the op.

// Tests that an attribute the kernel does not take is an error naming the op,
// the kernel and what it takes.
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'dgraph.softmax' op has attribute 'scale', which its kernel 'softmax' does not take (runtime/kernels/Kernels.td: it takes dim)}}
  %y = "dgraph.softmax"(%x) {dim = 0 : i64, scale = 2.0 : f64} : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// Tests that a discardable attribute of the wrong kind (a pass that wrote a
// string where the runtime reads a 0/1 flag) is refused at its collective.
module attributes {dshard.mesh = #dshard.mesh<[dp = 2]>} {
  func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
    // expected-error @+1 {{kernel 'all_reduce' emitted for 'dshard.all_reduce' does not match its signature: attribute 'async': expected a bool (0 or 1), got a string}}
    %y = dshard.all_reduce %x "dp" {async = "yes"} : tensor<4xf32>
    return %y : tensor<4xf32>
  }
}

// -----

// Tests that the collectives' attributes are checked under the kernel's
// names: `axis` is read as the kernel's `axes`, so an unknown one is named as
// the op spells it.
module attributes {dshard.mesh = #dshard.mesh<[dp = 2]>} {
  func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
    // expected-error @+1 {{'dshard.all_reduce' op has attribute 'group', which its kernel 'all_reduce' does not take (runtime/kernels/Kernels.td: it takes axis, kind, phase, async, handle)}}
    %y = dshard.all_reduce %x "dp" {group = 1 : i64} : tensor<4xf32>
    return %y : tensor<4xf32>
  }
}

// -----

// Tests that a handle that is not an integer is refused.
module attributes {dshard.mesh = #dshard.mesh<[dp = 2]>} {
  func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
    // expected-error @+1 {{kernel 'all_reduce' emitted for 'dshard.all_reduce' does not match its signature: attribute 'handle': expected an integer, got a float}}
    %y = dshard.all_reduce %x "dp" {async = 1 : i64, handle = 1.5 : f64} : tensor<4xf32>
    return %y : tensor<4xf32>
  }
}
