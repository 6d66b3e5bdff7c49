// RUN: dtcc-opt %s -split-input-file | dtcc-opt -split-input-file | FileCheck %s

// Tests that variables, loads and stores round-trip.
// CHECK-LABEL: dgraph.variable @w : tensor<2x3xf32> = dense<5.000000e-01> {trainable}
// CHECK: dgraph.variable @shapes_only : tensor<1024x1024xbf16>
// CHECK-LABEL: func.func @state
// CHECK: %[[W:.*]] = dgraph.load @w : tensor<2x3xf32>
// CHECK: dgraph.store %[[W]], @w : tensor<2x3xf32>
dgraph.variable @w : tensor<2x3xf32> = dense<0.5> {trainable}
dgraph.variable @shapes_only : tensor<1024x1024xbf16>
func.func @state() {
  %w = dgraph.load @w : tensor<2x3xf32>
  dgraph.store %w, @w : tensor<2x3xf32>
  return
}

// -----

// Tests that every elementwise op round-trips.
// CHECK-LABEL: func.func @elementwise
func.func @elementwise(%x: tensor<4xf32>, %y: tensor<4xf32>, %i: tensor<4xi32>, %b: tensor<4xi1>) {
  // CHECK: dgraph.neg %{{.*}} : tensor<4xf32>
  %0 = dgraph.neg %x : tensor<4xf32>
  // CHECK: dgraph.abs
  %1 = dgraph.abs %i : tensor<4xi32>
  // CHECK: dgraph.sign
  %2 = dgraph.sign %x : tensor<4xf32>
  // CHECK: dgraph.exp
  %3 = dgraph.exp %x : tensor<4xf32>
  // CHECK: dgraph.log
  %4 = dgraph.log %x : tensor<4xf32>
  // CHECK: dgraph.sqrt
  %5 = dgraph.sqrt %x : tensor<4xf32>
  // CHECK: dgraph.rsqrt
  %6 = dgraph.rsqrt %x : tensor<4xf32>
  // CHECK: dgraph.reciprocal
  %7 = dgraph.reciprocal %x : tensor<4xf32>
  // CHECK: dgraph.tanh
  %8 = dgraph.tanh %x : tensor<4xf32>
  // CHECK: dgraph.sigmoid
  %9 = dgraph.sigmoid %x : tensor<4xf32>
  // CHECK: dgraph.relu
  %10 = dgraph.relu %x : tensor<4xf32>
  // CHECK: dgraph.silu
  %11 = dgraph.silu %x : tensor<4xf32>
  // CHECK: dgraph.erf
  %12 = dgraph.erf %x : tensor<4xf32>
  // CHECK: dgraph.gelu %{{.*}} {approximate = "tanh"} : tensor<4xf32>
  %13 = dgraph.gelu %x {approximate = "tanh"} : tensor<4xf32>
  // CHECK: dgraph.sin
  %14 = dgraph.sin %x : tensor<4xf32>
  // CHECK: dgraph.cos
  %15 = dgraph.cos %x : tensor<4xf32>
  // CHECK: dgraph.floor
  %16 = dgraph.floor %x : tensor<4xf32>
  // CHECK: dgraph.round
  %17 = dgraph.round %x : tensor<4xf32>
  // CHECK: dgraph.not
  %18 = dgraph.not %b : tensor<4xi1>
  // CHECK: dgraph.is_nan %{{.*}} : tensor<4xf32>
  %19 = dgraph.is_nan %x : tensor<4xf32>
  // CHECK: dgraph.is_inf %{{.*}} {detect_negative = false} : tensor<4xf32>
  %20 = dgraph.is_inf %x {detect_negative = false} : tensor<4xf32>
  // CHECK: dgraph.add %{{.*}}, %{{.*}} : tensor<4xf32>
  %21 = dgraph.add %x, %y : tensor<4xf32>
  // CHECK: dgraph.sub
  %22 = dgraph.sub %x, %y : tensor<4xf32>
  // CHECK: dgraph.mul
  %23 = dgraph.mul %x, %y : tensor<4xf32>
  // CHECK: dgraph.div
  %24 = dgraph.div %i, %i : tensor<4xi32>
  // CHECK: dgraph.rem
  %25 = dgraph.rem %x, %y : tensor<4xf32>
  // CHECK: dgraph.pow
  %26 = dgraph.pow %x, %y : tensor<4xf32>
  // CHECK: dgraph.max
  %27 = dgraph.max %x, %y : tensor<4xf32>
  // CHECK: dgraph.min
  %28 = dgraph.min %x, %y : tensor<4xf32>
  // CHECK: dgraph.and
  %29 = dgraph.and %b, %b : tensor<4xi1>
  // CHECK: dgraph.or
  %30 = dgraph.or %i, %i : tensor<4xi32>
  // CHECK: dgraph.xor
  %31 = dgraph.xor %b, %b : tensor<4xi1>
  // CHECK: dgraph.shift_left
  %32 = dgraph.shift_left %i, %i : tensor<4xi32>
  // CHECK: dgraph.eq %{{.*}}, %{{.*}} : tensor<4xf32>
  %33 = dgraph.eq %x, %y : tensor<4xf32>
  // CHECK: dgraph.lt
  %34 = dgraph.lt %x, %y : tensor<4xf32>
  // CHECK: dgraph.ge
  %35 = dgraph.ge %i, %i : tensor<4xi32>
  // CHECK: dgraph.select %{{.*}}, %{{.*}}, %{{.*}} : tensor<4xf32>
  %36 = dgraph.select %b, %x, %y : tensor<4xf32>
  // CHECK: dgraph.cast %{{.*}} : tensor<4xf32> to tensor<4xbf16>
  %37 = dgraph.cast %x : tensor<4xf32> to tensor<4xbf16>
  return
}

// -----

// Tests that data-movement ops round-trip.
// CHECK-LABEL: func.func @movement
func.func @movement(%x: tensor<2x3xf32>, %ids: tensor<5xi64>, %e: tensor<10x4xf32>) {
  // CHECK: dgraph.iota dim = 1 : tensor<2x3xi64>
  %0 = dgraph.iota dim = 1 : tensor<2x3xi64>
  // CHECK: dgraph.broadcast_in_dim %{{.*}}, dims = [1, 2] : (tensor<2x3xf32>) -> tensor<4x2x3xf32>
  %1 = dgraph.broadcast_in_dim %x, dims = [1, 2] : (tensor<2x3xf32>) -> tensor<4x2x3xf32>
  // CHECK: dgraph.reshape %{{.*}} : (tensor<2x3xf32>) -> tensor<6xf32>
  %2 = dgraph.reshape %x : (tensor<2x3xf32>) -> tensor<6xf32>
  // CHECK: dgraph.transpose %{{.*}}, perm = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %3 = dgraph.transpose %x, perm = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>
  // CHECK: dgraph.slice %{{.*}}, start = [0, 1], limit = [2, 3], stride = [1, 2] : (tensor<2x3xf32>) -> tensor<2x1xf32>
  %4 = dgraph.slice %x, start = [0, 1], limit = [2, 3], stride = [1, 2] : (tensor<2x3xf32>) -> tensor<2x1xf32>
  // CHECK: dgraph.reverse %{{.*}}, dims = [0] : tensor<2x3xf32>
  %5 = dgraph.reverse %x, dims = [0] : tensor<2x3xf32>
  // CHECK: dgraph.concat %{{.*}}, %{{.*}} dim = 0 : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  %6 = dgraph.concat %x, %x dim = 0 : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  %zero = dgraph.constant dense<0.0> : tensor<f32>
  // CHECK: dgraph.pad %{{.*}}, %{{.*}}, low = [0, 1], high = [1, 0] : (tensor<2x3xf32>, tensor<f32>) -> tensor<3x4xf32>
  %7 = dgraph.pad %x, %zero, low = [0, 1], high = [1, 0] : (tensor<2x3xf32>, tensor<f32>) -> tensor<3x4xf32>
  // CHECK: dgraph.gather %{{.*}}, %{{.*}} axis = 0 : (tensor<10x4xf32>, tensor<5xi64>) -> tensor<5x4xf32>
  %8 = dgraph.gather %e, %ids axis = 0 : (tensor<10x4xf32>, tensor<5xi64>) -> tensor<5x4xf32>
  // CHECK: dgraph.scatter_add %{{.*}}, %{{.*}} axis = 0, dim_size = 10 : (tensor<5x4xf32>, tensor<5xi64>) -> tensor<10x4xf32>
  %9 = dgraph.scatter_add %8, %ids axis = 0, dim_size = 10 : (tensor<5x4xf32>, tensor<5xi64>) -> tensor<10x4xf32>
  %idx = dgraph.constant dense<0> : tensor<2x1xi64>
  // CHECK: dgraph.gather_elements %{{.*}}, %{{.*}} axis = 1 : (tensor<2x3xf32>, tensor<2x1xi64>) -> tensor<2x1xf32>
  %10 = dgraph.gather_elements %x, %idx axis = 1 : (tensor<2x3xf32>, tensor<2x1xi64>) -> tensor<2x1xf32>
  return
}

// -----

// Tests that reductions and neural-network ops round-trip.
// CHECK-LABEL: func.func @nn
func.func @nn(%x: tensor<2x8x16xf32>, %w: tensor<16x32xf32>, %g: tensor<16xf32>, %l: tensor<16x100xf32>, %t: tensor<16xi64>, %v: tensor<4x8xf32>, %b: tensor<3x1x16x8xf32>, %x2: tensor<2x16x32xf32>) {
  // CHECK: dgraph.reduce_sum %{{.*}}, dims = [0, 2] : (tensor<2x8x16xf32>) -> tensor<8xf32>
  %0 = dgraph.reduce_sum %x, dims = [0, 2] : (tensor<2x8x16xf32>) -> tensor<8xf32>
  // CHECK: dgraph.reduce_max
  %1 = dgraph.reduce_max %x, dims = [2] : (tensor<2x8x16xf32>) -> tensor<2x8xf32>
  // CHECK: dgraph.reduce_min
  %2 = dgraph.reduce_min %x, dims = [2] : (tensor<2x8x16xf32>) -> tensor<2x8xf32>
  // CHECK: dgraph.reduce_prod
  %3 = dgraph.reduce_prod %x, dims = [2] : (tensor<2x8x16xf32>) -> tensor<2x8xf32>
  // CHECK: dgraph.argmax %{{.*}}, dim = 2 {select_last_index} : (tensor<2x8x16xf32>) -> tensor<2x8xi64>
  %4 = dgraph.argmax %x, dim = 2 {select_last_index} : (tensor<2x8x16xf32>) -> tensor<2x8xi64>
  // CHECK: dgraph.argmin
  %5 = dgraph.argmin %x, dim = 0 : (tensor<2x8x16xf32>) -> tensor<8x16xi64>
  // CHECK: dgraph.cumsum %{{.*}}, dim = 1 {exclusive} : tensor<2x8x16xf32>
  %6 = dgraph.cumsum %x, dim = 1 {exclusive} : tensor<2x8x16xf32>
  // CHECK: dgraph.matmul %{{.*}}, %{{.*}} : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
  %7 = dgraph.matmul %x, %w : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
  // CHECK: dgraph.matmul %{{.*}}, %{{.*}} {transpose_rhs} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x8xf32>
  %8 = dgraph.matmul %x, %x {transpose_rhs} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x8xf32>
  // CHECK: dgraph.matmul %{{.*}}, %{{.*}} : (tensor<4x8xf32>, tensor<2x8x16xf32>) -> tensor<2x4x16xf32>
  %m0 = dgraph.matmul %v, %x : (tensor<4x8xf32>, tensor<2x8x16xf32>) -> tensor<2x4x16xf32>
  // CHECK: dgraph.matmul %{{.*}}, %{{.*}} {transpose_lhs} : (tensor<3x1x16x8xf32>, tensor<2x16x32xf32>) -> tensor<3x2x8x32xf32>
  %m1 = dgraph.matmul %b, %x2 {transpose_lhs} : (tensor<3x1x16x8xf32>, tensor<2x16x32xf32>) -> tensor<3x2x8x32xf32>
  // CHECK: dgraph.softmax %{{.*}}, dim = 2 : tensor<2x8x16xf32>
  %9 = dgraph.softmax %x, dim = 2 : tensor<2x8x16xf32>
  // CHECK: dgraph.log_softmax
  %10 = dgraph.log_softmax %x, dim = 2 : tensor<2x8x16xf32>
  // CHECK: dgraph.layer_norm %{{.*}}, %{{.*}}, %{{.*}} axis = 2, epsilon = 9.99999974E-6
  %11:3 = dgraph.layer_norm %x, %g, %g axis = 2, epsilon = 1.0e-05 : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8xf32>, tensor<2x8xf32>)
  // CHECK: dgraph.layer_norm %{{.*}}, %{{.*}} axis = 2
  %12:3 = dgraph.layer_norm %x, %g axis = 2, epsilon = 1.0e-05 : (tensor<2x8x16xf32>, tensor<16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8xf32>, tensor<2x8xf32>)
  // CHECK: dgraph.rms_norm %{{.*}}, %{{.*}} axis = 2
  %13:2 = dgraph.rms_norm %x, %g axis = 2, epsilon = 1.0e-05 : (tensor<2x8x16xf32>, tensor<16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8xf32>)
  // CHECK: dgraph.cross_entropy %{{.*}}, %{{.*}} {ignore_index = 0 : i64} : (tensor<16x100xf32>, tensor<16xi64>) -> tensor<16xf32>
  %14 = dgraph.cross_entropy %l, %t {ignore_index = 0} : (tensor<16x100xf32>, tensor<16xi64>) -> tensor<16xf32>
  return
}

// -----

// Tests that dropout round-trips whole and as a block of a split tensor.
// CHECK-LABEL: func.func @dropout
func.func @dropout(%x: tensor<2x8xf32>, %s: tensor<i64>, %o: tensor<2xi64>) {
  // CHECK: dgraph.dropout %{{.*}}, %{{.*}} {ratio = 5.000000e-01 : f32, seed = 1 : i64} : (tensor<2x8xf32>, tensor<i64>) -> (tensor<2x8xf32>, tensor<2x8xi1>)
  %y, %m = dgraph.dropout %x, %s {ratio = 0.5 : f32, seed = 1} : (tensor<2x8xf32>, tensor<i64>) -> (tensor<2x8xf32>, tensor<2x8xi1>)
  // CHECK: dgraph.dropout %{{.*}}, %{{.*}}, %{{.*}} {global_shape = array<i64: 4, 8>, ratio = 5.000000e-01 : f32, seed = 1 : i64} : (tensor<2x8xf32>, tensor<i64>, tensor<2xi64>) -> (tensor<2x8xf32>, tensor<2x8xi1>)
  %b, %bm = dgraph.dropout %x, %s, %o {global_shape = array<i64: 4, 8>, ratio = 0.5 : f32, seed = 1} : (tensor<2x8xf32>, tensor<i64>, tensor<2xi64>) -> (tensor<2x8xf32>, tensor<2x8xi1>)
  return
}

// -----

// Tests that random round-trips whole and as a block of a split tensor.
// CHECK-LABEL: func.func @random
func.func @random(%s: tensor<i64>, %o: tensor<2xi64>) {
  // CHECK: dgraph.random %{{.*}} {distribution = "normal", scale = 2.000000e+00 : f64, seed = 7 : i64, shift = 5.000000e-01 : f64} : (tensor<i64>) -> tensor<4x8xf32>
  %a = dgraph.random %s {distribution = "normal", shift = 0.5, scale = 2.0, seed = 7} : (tensor<i64>) -> tensor<4x8xf32>
  // CHECK: dgraph.random %{{.*}}, %{{.*}} {distribution = "uniform", global_shape = array<i64: 4, 8>, scale = 2.000000e+00 : f64, seed = 7 : i64, shift = -1.000000e+00 : f64} : (tensor<i64>, tensor<2xi64>) -> tensor<2x8xbf16>
  %b = dgraph.random %s, %o {distribution = "uniform", global_shape = array<i64: 4, 8>, shift = -1.0, scale = 2.0, seed = 7} : (tensor<i64>, tensor<2xi64>) -> tensor<2x8xbf16>
  return
}

// -----

// Tests that adamw prints a narrow gradient's type (and only then) and that
// sum_squares round-trips, f32 from bf16 too.
// CHECK-LABEL: func.func @optimizer_inputs
func.func @optimizer_inputs(%p: tensor<4xf32>, %g: tensor<4xf32>, %h: tensor<4xbf16>, %lr: tensor<f32>, %s: tensor<i64>) {
  // CHECK: dgraph.adamw {{.*}} : tensor<4xf32>{{$}}
  %a:3 = dgraph.adamw %p, %g, %p, %p, %lr, %s, %lr {beta1 = 0.9, beta2 = 0.999, epsilon = 1.0e-08, weight_decay = 0.0} : tensor<4xf32>
  // CHECK: dgraph.adamw {{.*}} : tensor<4xf32>, tensor<4xbf16>{{$}}
  %b:3 = dgraph.adamw %p, %h, %p, %p, %lr, %s, %lr {beta1 = 0.9, beta2 = 0.999, epsilon = 1.0e-08, weight_decay = 0.0} : tensor<4xf32>, tensor<4xbf16>
  // CHECK: dgraph.sum_squares %{{.*}}, dims = [0] : (tensor<4xbf16>) -> tensor<f32>
  %q = dgraph.sum_squares %h, dims = [0] : (tensor<4xbf16>) -> tensor<f32>
  // CHECK: dgraph.sum_squares %{{.*}}, dims = [0] : (tensor<4xbf16>) -> tensor<bf16>
  %r = dgraph.sum_squares %h, dims = [0] : (tensor<4xbf16>) -> tensor<bf16>
  // CHECK: dgraph.global_sum_squares %{{.*}}, %{{.*}} : (tensor<4xbf16>, tensor<4xf32>) -> tensor<f32>
  %n = dgraph.global_sum_squares %h, %g : (tensor<4xbf16>, tensor<4xf32>) -> tensor<f32>
  return
}

// -----

// Tests that half logits take an f32 loss and dloss (their cast's, read
// without the cast: dtcc-fold-narrow-reads).
// CHECK-LABEL: func.func @half_logits
func.func @half_logits(%x: tensor<2x3xbf16>, %t: tensor<2xi64>, %d: tensor<2xf32>) {
  // CHECK: dgraph.cross_entropy %{{.*}}, %{{.*}} : (tensor<2x3xbf16>, tensor<2xi64>) -> tensor<2xf32>
  %l = dgraph.cross_entropy %x, %t : (tensor<2x3xbf16>, tensor<2xi64>) -> tensor<2xf32>
  // CHECK: dgraph.cross_entropy_grad %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x3xbf16>, tensor<2xi64>, tensor<2xf32>) -> tensor<2x3xbf16>
  %g = dgraph.cross_entropy_grad %x, %t, %d : (tensor<2x3xbf16>, tensor<2xi64>, tensor<2xf32>) -> tensor<2x3xbf16>
  return
}
