// RUN: dtcc-opt %s -split-input-file -dtcc-lower-fuse-regions="rows=true" | FileCheck %s
// RUN: dtcc-opt %s -split-input-file -dtcc-lower-fuse-regions | FileCheck %s --check-prefix=NOROWS
// RUN: dtcc-opt %s -split-input-file -dtcc-lower-fuse-regions="rows=true parallel-rows=true" | FileCheck %s --check-prefix=PAR

// Tests that a layer norm with a neighbour (the residual add before it) is
// decomposed into the ops a row region computes, in its kernel's order
// (NNKernels.cpp): the row's sum kept in double and divided by the row's
// length in double, the mean rounded to f32 for the differences, the sum of
// their squares, rstd = 1 / sqrt(var + eps) in double; the region writes the
// residual, the result and both statistics, and is named as the ops it was.
// Without row regions the norm stays the op.
// CHECK-LABEL: func.func @residual_layer_norm
// CHECK: %[[F:.*]]:4 = dgraph.fused @dtcc_kernels::@residual_layer_norm_fused_0(%arg0, %arg1, %arg2, %arg3)
// CHECK-SAME: -> (tensor<4x40xf32>, tensor<4x40xf32>, tensor<4xf32>, tensor<4xf32>)
// CHECK-NOT: dgraph.layer_norm
// CHECK: func.func @residual_layer_norm_fused_0
// CHECK-SAME: dtcc.fused_ops = ["dgraph.add", "dgraph.layer_norm"]
// CHECK: arith.extf %{{.*}} : f32 to f64
// CHECK: %[[MEAN:.*]] = arith.divf %{{.*}}, %{{.*}} : f64
// CHECK: %[[MEAN32:.*]] = arith.truncf %[[MEAN]] : f64 to f32
// CHECK: scf.for
// CHECK: arith.subf %{{.*}}, %[[MEAN32]] : f32
// CHECK: arith.divf %{{.*}}, %{{.*}} : f64
// CHECK: arith.addf %{{.*}}, %{{.*}} : f64
// CHECK: math.sqrt %{{.*}} : f64
// CHECK: arith.divf %{{.*}}, %{{.*}} : f64
// CHECK: arith.truncf %{{.*}} : f64 to f32
// NOROWS-LABEL: func.func @residual_layer_norm
// NOROWS: dgraph.layer_norm
// The parallel row form (the CUDA target's) takes the same region: one
// scf.parallel over the rows with the row buffers in it, the passes over
// the columns as scf.parallel loops, the sums as reductions in f64 of the
// f32 elements, the statistics computed as before.
// PAR-LABEL: func.func @residual_layer_norm
// PAR: %[[F:.*]]:4 = dgraph.fused @dtcc_kernels::@residual_layer_norm_fused_0(%arg0, %arg1, %arg2, %arg3)
// PAR: func.func @residual_layer_norm_fused_0
// PAR-SAME: dtcc.fused_ops = ["dgraph.add", "dgraph.layer_norm"]
// PAR-NOT: scf.for
// PAR: scf.parallel (%[[ROW:.*]]) =
// PAR-NEXT: %[[X:.*]] = memref.alloca() : memref<40xf32>
// PAR: scf.parallel (%[[COL:.*]]) =
// PAR: arith.addf %{{.*}}, %{{.*}} : f32
// PAR: memref.store %{{.*}}, %[[X]][%[[COL]]]
// PAR: %[[SUM:.*]] = scf.parallel (%{{.*}}) = {{.*}} init (%{{.*}}) -> f64
// PAR: arith.extf %{{.*}} : f32 to f64
// PAR: scf.reduce(%{{.*}} : f64)
// PAR: arith.addf %{{.*}}, %{{.*}} : f64
// PAR: arith.divf %[[SUM]], %{{.*}} : f64
// PAR-NOT: scf.for
func.func @residual_layer_norm(%a: tensor<4x40xf32>, %b: tensor<4x40xf32>, %g: tensor<40xf32>, %be: tensor<40xf32>)
    -> (tensor<4x40xf32>, tensor<4x40xf32>, tensor<4xf32>, tensor<4xf32>) {
  %x = dgraph.add %a, %b : tensor<4x40xf32>
  %y, %m, %r = dgraph.layer_norm %x, %g, %be axis = 1, epsilon = 1.0e-05
      : (tensor<4x40xf32>, tensor<40xf32>, tensor<40xf32>) -> (tensor<4x40xf32>, tensor<4xf32>, tensor<4xf32>)
  return %x, %y, %m, %r : tensor<4x40xf32>, tensor<4x40xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// Tests that a bf16 RMS norm with f32 statistics (as mixed precision makes
// it) computes in f32 and writes its rstd as f32, its result as bf16.
// CHECK-LABEL: func.func @rms_bf16
// CHECK: dgraph.fused @dtcc_kernels::@rms_bf16_fused_0
// CHECK-SAME: -> (tensor<2x3x40xbf16>, tensor<2x3xf32>)
// CHECK: func.func @rms_bf16_fused_0
// CHECK-SAME: dtcc.fused_ops = ["dgraph.add", "dgraph.rms_norm"]
// CHECK: math.sqrt %{{.*}} : f64
// CHECK: arith.truncf %{{.*}} : f64 to f32
// CHECK: %[[R:.*]] = arith.truncf %{{.*}} : f64 to f32
// CHECK: memref.store %[[R]], %arg4
// CHECK: arith.truncf %{{.*}} : f32 to bf16
func.func @rms_bf16(%a: tensor<2x3x40xbf16>, %b: tensor<2x3x40xbf16>, %g: tensor<40xbf16>)
    -> (tensor<2x3x40xbf16>, tensor<2x3xf32>) {
  %x = dgraph.add %a, %b : tensor<2x3x40xbf16>
  %y, %r = dgraph.rms_norm %x, %g axis = 2, epsilon = 1.0e-06
      : (tensor<2x3x40xbf16>, tensor<40xbf16>) -> (tensor<2x3x40xbf16>, tensor<2x3xf32>)
  return %y, %r : tensor<2x3x40xbf16>, tensor<2x3xf32>
}

// -----

// Tests that a norm with no fusable neighbour, and one over more than the
// last axis, stay the ops (their kernels are already one pass).
// CHECK-LABEL: func.func @alone
// CHECK: dgraph.layer_norm
// CHECK: dgraph.layer_norm
// CHECK-NOT: dgraph.fused
func.func @alone(%x: tensor<4x40xf32>, %g: tensor<40xf32>, %z: tensor<2x4x5xf32>, %h: tensor<4x5xf32>)
    -> (tensor<4x40xf32>, tensor<2x4x5xf32>) {
  %y, %m, %r = dgraph.layer_norm %x, %g axis = 1, epsilon = 1.0e-05
      : (tensor<4x40xf32>, tensor<40xf32>) -> (tensor<4x40xf32>, tensor<4xf32>, tensor<4xf32>)
  %zz = dgraph.neg %z : tensor<2x4x5xf32>
  %w, %wm, %wr = dgraph.layer_norm %zz, %h axis = 1, epsilon = 1.0e-05
      : (tensor<2x4x5xf32>, tensor<4x5xf32>) -> (tensor<2x4x5xf32>, tensor<2xf32>, tensor<2xf32>)
  return %y, %w : tensor<4x40xf32>, tensor<2x4x5xf32>
}

// -----

// Tests that a norm whose region's row buffers would not fit (rows of 16384
// f32: the residual, the differences, their squares and two more products
// read in a later pass, 320 KiB) is written back as the op with all its
// results, and the elementwise ops around it still fuse.
// CHECK-LABEL: func.func @unfit
// CHECK: %[[X:.*]] = dgraph.add %arg0, %arg1
// CHECK: %[[Y:.*]], %{{.*}}, %[[R:.*]] = dgraph.layer_norm %[[X]], %arg3 axis = 1
// CHECK: %[[W:.*]] = dgraph.fused @dtcc_kernels::@unfit_fused_0(%arg0, %arg2, %arg1, %[[Y]])
// CHECK: return %[[W]], %[[R]]
func.func @unfit(%a: tensor<2x16384xf32>, %b: tensor<2x16384xf32>, %c: tensor<2x16384xf32>, %g: tensor<16384xf32>)
    -> (tensor<2x16384xf32>, tensor<2xf32>) {
  %x = dgraph.add %a, %b : tensor<2x16384xf32>
  %y, %m, %r = dgraph.layer_norm %x, %g axis = 1, epsilon = 1.0e-05
      : (tensor<2x16384xf32>, tensor<16384xf32>) -> (tensor<2x16384xf32>, tensor<2xf32>, tensor<2xf32>)
  %p = dgraph.mul %a, %c : tensor<2x16384xf32>
  %q = dgraph.mul %b, %c : tensor<2x16384xf32>
  %w = dgraph.add %y, %p : tensor<2x16384xf32>
  %w2 = dgraph.add %w, %q : tensor<2x16384xf32>
  return %w2, %r : tensor<2x16384xf32>, tensor<2xf32>
}

// -----

// Tests that a norm a region took stays taken when another region of the
// function does not fit and the function is grouped again (the second
// grouping wrote the outlined norm back from its erased ops: a crash).
// CHECK-LABEL: func.func @norm_and_too_long
// CHECK: dgraph.fused @dtcc_kernels::@norm_and_too_long_fused_0(%arg0, %arg1, %arg2)
// CHECK-NOT: dgraph.layer_norm
// CHECK: %[[E:.*]] = dgraph.exp %arg3
// CHECK: %[[S:.*]] = dgraph.reduce_sum %[[E]]
// CHECK: dgraph.fused @dtcc_kernels::@norm_and_too_long_fused_{{.*}}(%[[E]], %[[S]])
func.func @norm_and_too_long(%a: tensor<4x40xf32>, %b: tensor<4x40xf32>, %g: tensor<40xf32>,
                             %x: tensor<2x40000xf32>) -> (tensor<4x40xf32>, tensor<2x40000xf32>) {
  %r = dgraph.add %a, %b : tensor<4x40xf32>
  %n, %m, %s0 = dgraph.layer_norm %r, %g axis = 1, epsilon = 1.0e-05
      : (tensor<4x40xf32>, tensor<40xf32>) -> (tensor<4x40xf32>, tensor<4xf32>, tensor<4xf32>)
  %e = dgraph.exp %x : tensor<2x40000xf32>
  %s = dgraph.reduce_sum %e, dims = [1] : (tensor<2x40000xf32>) -> tensor<2xf32>
  %sb = dgraph.broadcast_in_dim %s, dims = [0] : (tensor<2xf32>) -> tensor<2x40000xf32>
  %t = dgraph.tanh %e : tensor<2x40000xf32>
  %y = dgraph.div %t, %sb : tensor<2x40000xf32>
  return %n, %y : tensor<4x40xf32>, tensor<2x40000xf32>
}
