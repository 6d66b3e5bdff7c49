// RUN: dtcc-opt %s -split-input-file -dtcc-lower-fuse-regions="rows=true" | FileCheck %s
// RUN: dtcc-opt %s -split-input-file -dtcc-lower-fuse-regions | FileCheck %s --check-prefix=NOROWS
// RUN: dtcc-opt %s -split-input-file -dtcc-lower-fuse-regions="rows=true parallel-rows=true" | FileCheck %s --check-prefix=PAR

// Tests that a layer norm's gradient whose dx the residual gradient is
// added to is written as a row region and a parameter-gradient op: the
// region computes xhat = (x - mean) * rstd and g = dy * scale per row
// (kept in row buffers), the blocked sums of g * xhat and of g in double
// times 1 / C in double, rounded to f32, then dx and the sum;
// dgraph.layer_norm_param_grad reads x, the statistics and dy for dscale
// and dbias. Without row regions the op stays.
// CHECK-LABEL: func.func @layer_norm_grad_residual
// CHECK: %[[DS:.*]], %[[DB:.*]] = dgraph.layer_norm_param_grad %arg0, %arg2, %arg3, %arg4 axis = 1
// CHECK: %[[F:.*]] = dgraph.fused @dtcc_kernels::@layer_norm_grad_residual_fused_0(%arg0, %arg2, %arg3, %arg4, %arg1, %arg5)
// CHECK-SAME: -> tensor<4x40xf32>
// CHECK-NOT: dgraph.layer_norm_grad
// CHECK: return %[[F]], %[[DS]], %[[DB]]
// CHECK: func.func @layer_norm_grad_residual_fused_0
// CHECK-SAME: dtcc.fused_ops = ["dgraph.layer_norm_grad", "dgraph.add"]
// CHECK: scf.for %[[ROW:.*]] =
// CHECK: scf.for %[[COL:.*]] =
// CHECK: %[[X:.*]] = memref.load %arg0[%[[ROW]], %[[COL]]]
// CHECK: %[[MEAN:.*]] = memref.load %arg1[%[[ROW]]]
// CHECK: %[[D:.*]] = arith.subf %[[X]], %[[MEAN]] : f32
// CHECK: %[[RSTD:.*]] = memref.load %arg2[%[[ROW]]]
// CHECK: arith.mulf %[[D]], %[[RSTD]] : f32
// CHECK: arith.extf %{{.*}} : f32 to f64
// CHECK: arith.extf %{{.*}} : f32 to f64
// CHECK: %[[INV:.*]] = arith.constant 2.500000e-02 : f64
// CHECK: arith.mulf %{{.*}}, %[[INV]] : f64
// CHECK: arith.truncf %{{.*}} : f64 to f32
// CHECK: arith.mulf %{{.*}}, %{{.*}} : f64
// CHECK: arith.truncf %{{.*}} : f64 to f32
// CHECK: scf.for
// NOROWS-LABEL: func.func @layer_norm_grad_residual
// NOROWS: dgraph.layer_norm_grad
// NOROWS-NOT: dgraph.layer_norm_param_grad
// The parallel row form takes the same region: its sums are reductions in
// f64 of the f32 products.
// PAR-LABEL: func.func @layer_norm_grad_residual
// PAR: dgraph.layer_norm_param_grad
// PAR: dgraph.fused @dtcc_kernels::@layer_norm_grad_residual_fused_0
// PAR: func.func @layer_norm_grad_residual_fused_0
// PAR-SAME: dtcc.fused_ops = ["dgraph.layer_norm_grad", "dgraph.add"]
// PAR-NOT: scf.for
// PAR: scf.parallel
// PAR: scf.parallel (%{{.*}}) = {{.*}} init (%{{.*}}) -> f64
// PAR: scf.reduce(%{{.*}} : f64)
// PAR: scf.parallel (%{{.*}}) = {{.*}} init (%{{.*}}) -> f64
// PAR-NOT: scf.for
func.func @layer_norm_grad_residual(%x: tensor<4x40xf32>, %g: tensor<40xf32>, %m: tensor<4xf32>, %r: tensor<4xf32>, %dy: tensor<4x40xf32>, %res: tensor<4x40xf32>)
    -> (tensor<4x40xf32>, tensor<40xf32>, tensor<40xf32>) {
  %dx, %dg, %db = dgraph.layer_norm_grad %x, %g, %m, %r, %dy axis = 1
      : (tensor<4x40xf32>, tensor<40xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4x40xf32>) -> (tensor<4x40xf32>, tensor<40xf32>, tensor<40xf32>)
  %s = dgraph.add %res, %dx : tensor<4x40xf32>
  return %s, %dg, %db : tensor<4x40xf32>, tensor<40xf32>, tensor<40xf32>
}

// -----

// Tests that a bf16 RMS norm's gradient with f32 statistics (mixed
// precision's) and a product making its dy is one region with that
// product: the statistic's cast to the rows' type starts the region (f32
// inside it), the region writes dy (the parameter gradient reads it) and
// dx; dgraph.rms_norm_param_grad takes x, rstd and the region's dy.
// CHECK-LABEL: func.func @rms_norm_grad_bf16
// CHECK: %[[F:.*]]:2 = dgraph.fused @dtcc_kernels::@rms_norm_grad_bf16_fused_0(%arg3, %arg4, %arg2, %arg0, %arg1)
// CHECK-SAME: -> (tensor<4x40xbf16>, tensor<4x40xbf16>)
// CHECK: %[[DS:.*]] = dgraph.rms_norm_param_grad %arg0, %arg2, %[[F]]#0 axis = 1
// CHECK: return %[[F]]#1, %[[DS]]
// CHECK: func.func @rms_norm_grad_bf16_fused_0
// CHECK-SAME: dtcc.fused_ops = ["dgraph.mul", "dgraph.rms_norm_grad"]
// CHECK-NOT: arith.truncf %{{.*}} : f32 to f32
// CHECK: arith.truncf %{{.*}} : f32 to bf16
// NOROWS-LABEL: func.func @rms_norm_grad_bf16
// NOROWS: dgraph.rms_norm_grad
// PAR-LABEL: func.func @rms_norm_grad_bf16
// PAR: dgraph.fused @dtcc_kernels::@rms_norm_grad_bf16_fused_0
// PAR: dgraph.rms_norm_param_grad
func.func @rms_norm_grad_bf16(%x: tensor<4x40xbf16>, %g: tensor<40xbf16>, %r: tensor<4xf32>, %a: tensor<4x40xbf16>, %b: tensor<4x40xbf16>)
    -> (tensor<4x40xbf16>, tensor<40xbf16>) {
  %dy = dgraph.mul %a, %b : tensor<4x40xbf16>
  %dx, %dg = dgraph.rms_norm_grad %x, %g, %r, %dy axis = 1
      : (tensor<4x40xbf16>, tensor<40xbf16>, tensor<4xf32>, tensor<4x40xbf16>) -> (tensor<4x40xbf16>, tensor<40xbf16>)
  return %dx, %dg : tensor<4x40xbf16>, tensor<40xbf16>
}

// -----

// Tests that a norm's gradient whose neighbour cannot join (dx is read by a
// product before the add) stays the op on the CPU (its kernel makes dx and
// the parameter gradients in one pass over x and dy; a region alone and the
// parameter-gradient kernel would read them twice), while the parallel row
// form (CUDA's, whose kernel takes two passes too) takes it alone.
// CHECK-LABEL: func.func @layer_norm_grad_alone
// CHECK: dgraph.layer_norm_grad
// CHECK-NOT: dgraph.fused
// CHECK-NOT: dgraph.layer_norm_param_grad
// CHECK: return
// PAR-LABEL: func.func @layer_norm_grad_alone
// PAR: dgraph.fused @dtcc_kernels::@layer_norm_grad_alone_fused_0
// PAR: dgraph.layer_norm_param_grad
// PAR: dgraph.matmul
// PAR: func.func @layer_norm_grad_alone_fused_0
// PAR-SAME: dtcc.fused_ops = ["dgraph.layer_norm_grad"]
func.func @layer_norm_grad_alone(%x: tensor<4x40xf32>, %g: tensor<40xf32>, %m: tensor<4xf32>, %r: tensor<4xf32>, %dy: tensor<4x40xf32>, %w: tensor<40x8xf32>)
    -> (tensor<4x8xf32>, tensor<4x40xf32>, tensor<40xf32>, tensor<40xf32>) {
  %dx, %dg, %db = dgraph.layer_norm_grad %x, %g, %m, %r, %dy axis = 1
      : (tensor<4x40xf32>, tensor<40xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4x40xf32>) -> (tensor<4x40xf32>, tensor<40xf32>, tensor<40xf32>)
  %p = dgraph.matmul %dx, %w : (tensor<4x40xf32>, tensor<40x8xf32>) -> tensor<4x8xf32>
  %s = dgraph.add %dx, %dy : tensor<4x40xf32>
  return %p, %s, %dg, %db : tensor<4x8xf32>, tensor<4x40xf32>, tensor<40xf32>, tensor<40xf32>
}

// -----

// Tests that a bf16 layer norm's gradient fuses with the add of its dx when
// its f32 statistics come from the forward norm's own region (mixed
// precision's GPT layers): the statistics' casts, which cannot join that
// region (a product lies between), start the gradient's row region. They
// were left out of every region, which wrote the gradient back as its op
// in every bf16 GPT.
// CHECK-LABEL: func.func @layer_norm_grad_of_a_fused_norm
// CHECK: %[[FWD:.*]]:4 = dgraph.fused @dtcc_kernels::@layer_norm_grad_of_a_fused_norm_fused_0(
// CHECK: %[[DY:.*]] = dgraph.matmul %[[FWD]]#1
// CHECK: dgraph.layer_norm_param_grad %[[FWD]]#0, %[[FWD]]#2, %[[FWD]]#3, %[[DY]] axis = 1
// CHECK: dgraph.fused @dtcc_kernels::@layer_norm_grad_of_a_fused_norm_fused_1(%[[FWD]]#3, %[[FWD]]#2, %[[FWD]]#0, %[[DY]], %arg2, %arg5)
// CHECK-NOT: dgraph.layer_norm_grad
// CHECK: func.func @layer_norm_grad_of_a_fused_norm_fused_1
// CHECK-SAME: dtcc.fused_ops = ["dgraph.layer_norm_grad", "dgraph.add"]
// PAR-LABEL: func.func @layer_norm_grad_of_a_fused_norm
// PAR: dgraph.layer_norm_param_grad
// PAR: dgraph.fused @dtcc_kernels::@layer_norm_grad_of_a_fused_norm_fused_1(
// PAR-NOT: dgraph.layer_norm_grad
// PAR: func.func @layer_norm_grad_of_a_fused_norm_fused_1
func.func @layer_norm_grad_of_a_fused_norm(%a: tensor<4x40xbf16>, %b: tensor<4x40xbf16>, %g: tensor<40xbf16>, %bias: tensor<40xbf16>, %w: tensor<40x40xbf16>, %res: tensor<4x40xbf16>)
    -> (tensor<4x40xbf16>, tensor<4x40xbf16>, tensor<40xbf16>, tensor<40xbf16>) {
  %x = dgraph.add %a, %b : tensor<4x40xbf16>
  %y, %m, %r = dgraph.layer_norm %x, %g, %bias axis = 1, epsilon = 1.0E-5
      : (tensor<4x40xbf16>, tensor<40xbf16>, tensor<40xbf16>) -> (tensor<4x40xbf16>, tensor<4xf32>, tensor<4xf32>)
  %dy = dgraph.matmul %y, %w : (tensor<4x40xbf16>, tensor<40x40xbf16>) -> tensor<4x40xbf16>
  %dx, %dg, %db = dgraph.layer_norm_grad %x, %g, %m, %r, %dy axis = 1
      : (tensor<4x40xbf16>, tensor<40xbf16>, tensor<4xf32>, tensor<4xf32>, tensor<4x40xbf16>) -> (tensor<4x40xbf16>, tensor<40xbf16>, tensor<40xbf16>)
  %s = dgraph.add %res, %dx : tensor<4x40xbf16>
  return %y, %s, %dg, %db : tensor<4x40xbf16>, tensor<4x40xbf16>, tensor<40xbf16>, tensor<40xbf16>
}
