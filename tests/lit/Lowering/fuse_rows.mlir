// RUN: dtcc-opt %s -split-input-file -dtcc-lower-fuse-regions="rows=true" | FileCheck %s
// RUN: dtcc-opt %s -split-input-file -dtcc-lower-fuse-regions | FileCheck %s --check-prefix=NOROWS
// The row form parses back (dumps of it are dtcc-opt inputs).
// RUN: dtcc-opt %s -split-input-file -dtcc-lower-fuse-regions="rows=true" | dtcc-opt -split-input-file | FileCheck %s --check-prefix=REPARSE
// REPARSE-LABEL: func.func @rms_norm_fused_0
// REPARSE: scf.for

// Tests that an RMS norm as PyTorch exports it (pow, a sum along the last
// axis, its reshape, the scalar chain per row, the broadcast back and the
// products) becomes one row region: a loop per row dimension, a pass that
// squares into a row buffer, the kernels' 32-lane sum (32 = one block, no
// tail) and a pass that scales; the per-row value is also an output,
// written at column 0. Without `rows` the reduction splits the chain.
// CHECK-LABEL: func.func @rms_norm
// CHECK-NOT: dgraph.reduce_sum
// CHECK: %[[F:.*]]:2 = dgraph.fused @dtcc_kernels::@rms_norm_fused_0(%arg0, %arg1) : (tensor<2x8x32xf32>, tensor<32xf32>) -> (tensor<2x8x1xf32>, tensor<2x8x32xf32>)
// CHECK-NEXT: return %[[F]]#1, %[[F]]#0
// CHECK: func.func @rms_norm_fused_0(%[[X:.*]]: memref<2x8x32xf32>, %[[W:.*]]: memref<32xf32>, %[[R:.*]]: memref<2x8x1xf32>, %[[Y:.*]]: memref<2x8x32xf32>)
// CHECK-SAME: dtcc.fused_ops = ["dgraph.pow", "dgraph.reduce_sum", "dgraph.reshape", "dgraph.div", "dgraph.add", "dgraph.sqrt", "dgraph.div", "dgraph.broadcast_in_dim", "dgraph.mul", "dgraph.mul"]
// CHECK: %[[BUF:.*]] = memref.alloca() : memref<32xf32>
// CHECK: scf.for %[[I:.*]] =
// CHECK: scf.for %[[J:.*]] =
// CHECK: scf.for %[[C:.*]] =
// CHECK: memref.load %[[X]][%[[I]], %[[J]], %[[C]]]
// CHECK: math.powf
// CHECK: memref.store %{{.*}}, %[[BUF]][%[[C]]]
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args({{.*}}) -> (f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32)
// CHECK-COUNT-32: arith.addf
// CHECK: scf.yield
// CHECK-COUNT-31: arith.addf
// CHECK: arith.divf
// CHECK: arith.addf
// CHECK: math.sqrt
// CHECK: %[[RSTD:.*]] = arith.divf
// CHECK: memref.store %[[RSTD]], %[[R]][%[[I]], %[[J]], %{{.*}}]
// CHECK: scf.for %[[C2:.*]] =
// CHECK: memref.load %[[X]][%[[I]], %[[J]], %[[C2]]]
// CHECK: arith.mulf %{{.*}}, %[[RSTD]]
// CHECK: memref.load %[[W]][%[[C2]]]
// CHECK: arith.mulf
// CHECK: memref.store %{{.*}}, %[[Y]][%[[I]], %[[J]], %[[C2]]]
// NOROWS-LABEL: func.func @rms_norm
// NOROWS: dgraph.reduce_sum
// NOROWS: dgraph.fused
func.func @rms_norm(%x: tensor<2x8x32xf32> {dgraph.name = "x"}, %w: tensor<32xf32> {dgraph.name = "w"})
    -> (tensor<2x8x32xf32> {dgraph.name = "y"}, tensor<2x8x1xf32> {dgraph.name = "rstd"}) {
  %two = dgraph.constant dense<2.0> : tensor<2x8x32xf32>
  %sq = dgraph.pow %x, %two : tensor<2x8x32xf32>
  %ss = dgraph.reduce_sum %sq, dims = [2] : (tensor<2x8x32xf32>) -> tensor<2x8xf32>
  %ss1 = dgraph.reshape %ss : (tensor<2x8xf32>) -> tensor<2x8x1xf32>
  %n = dgraph.constant dense<32.0> : tensor<2x8x1xf32>
  %ms = dgraph.div %ss1, %n : tensor<2x8x1xf32>
  %eps = dgraph.constant dense<1.0e-5> : tensor<2x8x1xf32>
  %ve = dgraph.add %ms, %eps : tensor<2x8x1xf32>
  %rt = dgraph.sqrt %ve : tensor<2x8x1xf32>
  %one = dgraph.constant dense<1.0> : tensor<2x8x1xf32>
  %rstd = dgraph.div %one, %rt : tensor<2x8x1xf32>
  %rb = dgraph.broadcast_in_dim %rstd, dims = [0, 1, 2] : (tensor<2x8x1xf32>) -> tensor<2x8x32xf32>
  %xn = dgraph.mul %x, %rb : tensor<2x8x32xf32>
  %wb = dgraph.broadcast_in_dim %w, dims = [2] : (tensor<32xf32>) -> tensor<2x8x32xf32>
  %y = dgraph.mul %xn, %wb : tensor<2x8x32xf32>
  return %y, %rstd : tensor<2x8x32xf32>, tensor<2x8x1xf32>
}

// -----

// Tests that a maximum over the last axis of an input (read where it is:
// the only row buffer holds the exponentials), its broadcast and a
// softmax's exponentials form one region; the maximum is the kernels'
// select lanes with a NaN flag; rows of 45 leave a tail of 13 after one
// block of 32.
// CHECK-LABEL: func.func @softmax
// CHECK: dgraph.fused @dtcc_kernels::@softmax_fused_0(%arg0) : (tensor<4x45xf32>) -> tensor<4x45xf32>
// CHECK: func.func @softmax_fused_0
// CHECK-SAME: dtcc.fused_ops = ["dgraph.reduce_max", "dgraph.broadcast_in_dim", "dgraph.sub", "dgraph.exp", "dgraph.reduce_sum", "dgraph.broadcast_in_dim", "dgraph.div"]
// CHECK: memref.alloca() : memref<45xf32>
// CHECK-NOT: memref.alloca
// CHECK: scf.for
// CHECK: iter_args({{.*}}) -> (f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, i1)
// CHECK: memref.load %arg0
// CHECK: arith.cmpf uno
// CHECK: arith.cmpf ogt
// CHECK: arith.select
// CHECK: math.exp
func.func @softmax(%x: tensor<4x45xf32> {dgraph.name = "x"}) -> (tensor<4x45xf32> {dgraph.name = "y"}) {
  %m = dgraph.reduce_max %x, dims = [1] : (tensor<4x45xf32>) -> tensor<4xf32>
  %mb = dgraph.broadcast_in_dim %m, dims = [0] : (tensor<4xf32>) -> tensor<4x45xf32>
  %s = dgraph.sub %x, %mb : tensor<4x45xf32>
  %e = dgraph.exp %s : tensor<4x45xf32>
  %z = dgraph.reduce_sum %e, dims = [1] : (tensor<4x45xf32>) -> tensor<4xf32>
  %zb = dgraph.broadcast_in_dim %z, dims = [0] : (tensor<4xf32>) -> tensor<4x45xf32>
  %y = dgraph.div %e, %zb : tensor<4x45xf32>
  return %y : tensor<4x45xf32>
}

// -----

// Tests what stays out of row regions: a sum over a leading axis (a column
// reduction: rows are not independent), and a sum over the last axis whose
// row buffers would pass 256 KiB (two buffers of 40000 f32 values), whose
// elementwise ops still fuse around it.
// CHECK-LABEL: func.func @not_rows
// CHECK: dgraph.reduce_sum %{{.*}}, dims = [0]
// CHECK-LABEL: func.func @too_long
// CHECK: %[[E:.*]] = dgraph.exp
// CHECK: %[[S:.*]] = dgraph.reduce_sum %[[E]]
// CHECK: dgraph.fused @dtcc_kernels::@too_long_fused_{{.*}}(%[[E]], %[[S]])
func.func @not_rows(%x: tensor<4x16xf32> {dgraph.name = "x"}) -> (tensor<16xf32> {dgraph.name = "y"}) {
  %e = dgraph.exp %x : tensor<4x16xf32>
  %t = dgraph.tanh %e : tensor<4x16xf32>
  %s = dgraph.reduce_sum %t, dims = [0] : (tensor<4x16xf32>) -> tensor<16xf32>
  return %s : tensor<16xf32>
}
func.func @too_long(%x: tensor<2x40000xf32> {dgraph.name = "x"}) -> (tensor<2x40000xf32> {dgraph.name = "y"}) {
  %e = dgraph.exp %x : tensor<2x40000xf32>
  %s = dgraph.reduce_sum %e, dims = [1] : (tensor<2x40000xf32>) -> tensor<2xf32>
  %sb = dgraph.broadcast_in_dim %s, dims = [0] : (tensor<2xf32>) -> tensor<2x40000xf32>
  %t = dgraph.tanh %e : tensor<2x40000xf32>
  %y = dgraph.div %t, %sb : tensor<2x40000xf32>
  return %y : tensor<2x40000xf32>
}

// -----

// Tests that a softmax with a neighbour (a scale and a mask before it) is
// decomposed into the ops a row region computes, in the softmax kernel's
// order (maximum from the first element, exponentials, their sum in double
// blocks, one reciprocal per row), and that the whole chain is one region,
// which names the softmax as the op it was;
// a softmax with no fusable neighbour stays the op, with none of the
// pass's own attributes left behind.
// CHECK-LABEL: func.func @masked_softmax
// CHECK-NOT: dgraph.softmax
// CHECK: dgraph.fused @dtcc_kernels::@masked_softmax_fused_0(%arg0, %arg1) : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
// CHECK-LABEL: func.func @lone_softmax
// CHECK-NEXT: %[[P:.*]] = dgraph.softmax %arg0, dim = 1 : tensor<4x16xf32>
// CHECK-NOT: dtcc.row
// CHECK-NEXT: return %[[P]]
// CHECK: func.func @masked_softmax_fused_0
// CHECK-SAME: dtcc.fused_ops = ["dgraph.mul", "dgraph.add", "dgraph.softmax"]
// CHECK: arith.cmpf uno
// CHECK: math.exp
// CHECK: arith.extf %{{.*}} : f32 to f64
// CHECK: arith.truncf %{{.*}} : f64 to f32
func.func @masked_softmax(%x: tensor<4x16xf32> {dgraph.name = "x"}, %mask: tensor<16xf32> {dgraph.name = "mask"}) -> (tensor<4x16xf32> {dgraph.name = "y"}) {
  %s = dgraph.constant dense<0.25> : tensor<4x16xf32>
  %xs = dgraph.mul %x, %s : tensor<4x16xf32>
  %mb = dgraph.broadcast_in_dim %mask, dims = [1] : (tensor<16xf32>) -> tensor<4x16xf32>
  %xm = dgraph.add %xs, %mb : tensor<4x16xf32>
  %y = dgraph.softmax %xm, dim = 1 : tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}
func.func @lone_softmax(%x: tensor<4x16xf32> {dgraph.name = "x"}) -> (tensor<4x16xf32> {dgraph.name = "y"}) {
  %y = dgraph.softmax %x, dim = 1 : tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// -----

// Tests that a decomposed softmax no region takes is written back as the
// op: here its region would need four row buffers of 20000 f32 values
// (312.5 KiB, above 256 KiB), so it is not formed, and the function is
// grouped again without it: the elementwise ops around the softmax still
// fuse.
// CHECK-LABEL: func.func @written_back
// CHECK-NOT: dgraph.reduce_max
// CHECK: %[[P:.*]] = dgraph.softmax %{{.*}}, dim = 1 : tensor<2x20000xf32>
// CHECK-NOT: dtcc.row
// CHECK: dgraph.fused @dtcc_kernels::@written_back_fused_0(%arg0, %[[P]])
// CHECK: dtcc.fused_ops = ["dgraph.tanh", "dgraph.neg", "dgraph.mul", "dgraph.add"]
func.func @written_back(%x: tensor<2x20000xf32> {dgraph.name = "x"}) -> (tensor<2x20000xf32> {dgraph.name = "y"}) {
  %b = dgraph.tanh %x : tensor<2x20000xf32>
  %c = dgraph.neg %x : tensor<2x20000xf32>
  %a = dgraph.exp %x : tensor<2x20000xf32>
  %p = dgraph.softmax %a, dim = 1 : tensor<2x20000xf32>
  %o = dgraph.mul %p, %b : tensor<2x20000xf32>
  %y = dgraph.add %o, %c : tensor<2x20000xf32>
  return %y : tensor<2x20000xf32>
}

// -----

// Tests that a broadcast of a value per row read outside the region (as
// the backward pass reads a norm's broadcast scale) is made again after
// the call from the region's per-row output, not written out whole.
// CHECK-LABEL: func.func @view_outside
// CHECK: %[[F:.*]]:2 = dgraph.fused @dtcc_kernels::@view_outside_fused_0(%arg0) : (tensor<4x16xf32>) -> (tensor<4xf32>, tensor<4x16xf32>)
// CHECK-NEXT: %[[B:.*]] = dgraph.broadcast_in_dim %[[F]]#0, dims = [0] : (tensor<4xf32>) -> tensor<4x16xf32>
// CHECK-NEXT: return %[[F]]#1, %[[B]]
func.func @view_outside(%x: tensor<4x16xf32> {dgraph.name = "x"}) -> (tensor<4x16xf32> {dgraph.name = "y"}, tensor<4x16xf32> {dgraph.name = "s"}) {
  %e = dgraph.exp %x : tensor<4x16xf32>
  %m = dgraph.reduce_sum %e, dims = [1] : (tensor<4x16xf32>) -> tensor<4xf32>
  %r = dgraph.reciprocal %m : tensor<4xf32>
  %rb = dgraph.broadcast_in_dim %r, dims = [0] : (tensor<4xf32>) -> tensor<4x16xf32>
  %y = dgraph.mul %e, %rb : tensor<4x16xf32>
  return %y, %rb : tensor<4x16xf32>, tensor<4x16xf32>
}

// -----

// Tests that regions computing the same thing share one function (its code
// is generated once): two identical norms of two inputs call one kernel.
// CHECK-LABEL: func.func @twice
// CHECK: dgraph.fused @dtcc_kernels::@twice_fused_0(%arg0)
// CHECK: dgraph.fused @dtcc_kernels::@twice_fused_0(%arg1)
// CHECK: module @dtcc_kernels
// CHECK: func.func @twice_fused_0
// CHECK-NOT: func.func
func.func @twice(%x: tensor<4x16xf32> {dgraph.name = "x"}, %y: tensor<4x16xf32> {dgraph.name = "y"}) -> (tensor<4x16xf32> {dgraph.name = "a"}, tensor<4x16xf32> {dgraph.name = "b"}) {
  %ex = dgraph.exp %x : tensor<4x16xf32>
  %sx = dgraph.reduce_sum %ex, dims = [1] : (tensor<4x16xf32>) -> tensor<4xf32>
  %bx = dgraph.broadcast_in_dim %sx, dims = [0] : (tensor<4xf32>) -> tensor<4x16xf32>
  %a = dgraph.div %ex, %bx : tensor<4x16xf32>
  %ey = dgraph.exp %y : tensor<4x16xf32>
  %sy = dgraph.reduce_sum %ey, dims = [1] : (tensor<4x16xf32>) -> tensor<4xf32>
  %by = dgraph.broadcast_in_dim %sy, dims = [0] : (tensor<4xf32>) -> tensor<4x16xf32>
  %b = dgraph.div %ey, %by : tensor<4x16xf32>
  return %a, %b : tensor<4x16xf32>, tensor<4x16xf32>
}
