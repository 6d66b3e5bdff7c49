// RUN: dtcc-opt %s -split-input-file -dtcc-lower-fuse-regions | FileCheck %s
// RUN: dtcc-opt %s -split-input-file -dtcc-lower-fuse-regions -dtcc-lower-to-exec | FileCheck %s --check-prefix=EXEC

// Tests that a bias add and its GELU become one region that reads the bias
// through a broadcast indexing map, and that the lowering emits one `fused`
// kernel whose output has a buffer of its own.
// CHECK-DAG: #[[ID:.*]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-DAG: #[[ROW:.*]] = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: func.func @bias_gelu
// CHECK-NOT: dgraph.broadcast_in_dim
// CHECK-NOT: dgraph.add
// CHECK: %[[Y:.*]] = dgraph.fused @dtcc_kernels::@bias_gelu_fused_0(%arg0, %arg1) : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
// CHECK-NEXT: return %[[Y]]
// CHECK: module @dtcc_kernels
// CHECK: func.func @bias_gelu_fused_0(%{{.*}}: memref<8x16xf32>, %{{.*}}: memref<16xf32>, %{{.*}}: memref<8x16xf32>)
// CHECK-SAME: dtcc.fused_ops = ["dgraph.add", "dgraph.gelu"], dtcc.saved_bytes = 512
// CHECK: linalg.generic {indexing_maps = [#[[ID]], #[[ROW]], #[[ID]]], iterator_types = ["parallel", "parallel"]}
// CHECK: arith.addf
// CHECK: math.erf
// CHECK: linalg.yield
// EXEC-LABEL: func.func @bias_gelu()
// EXEC-SAME: dexec.workspace_bytes = 1088
// EXEC-DAG: %[[X:.*]] = dexec.buffer "workspace"[0] {{.*}}: memref<8x16xf32>
// EXEC-DAG: %[[B:.*]] = dexec.buffer "workspace"[1024] {{.*}}: memref<16xf32>
// EXEC-DAG: %[[Y:.*]] = dexec.buffer "workspace"[512] {{.*}}: memref<8x16xf32>
// EXEC: dexec.kernel "fused" ins(%[[X]], %[[B]] : memref<8x16xf32>, memref<16xf32>) outs(%[[Y]] : memref<8x16xf32>) attrs {dtcc.fused_ops = "dgraph.add,dgraph.gelu", dtcc.saved_bytes = 512 : i64, symbol = "bias_gelu_fused_0"}
func.func @bias_gelu(%x: tensor<8x16xf32> {dgraph.name = "x"}, %b: tensor<16xf32> {dgraph.name = "b"}) -> (tensor<8x16xf32> {dgraph.name = "y"}) {
  %bb = dgraph.broadcast_in_dim %b, dims = [1] : (tensor<16xf32>) -> tensor<8x16xf32>
  %a = dgraph.add %x, %bb : tensor<8x16xf32>
  %y = dgraph.gelu %a : tensor<8x16xf32>
  return %y : tensor<8x16xf32>
}

// -----

// Tests that a value with a consumer outside the region (a matrix product)
// is a region output, computed once and not recomputed, and that nothing
// fuses across the matrix product.
// CHECK-LABEL: func.func @multi_consumer
// CHECK: %[[R:.*]]:2 = dgraph.fused @dtcc_kernels::@multi_consumer_fused_0(%arg0, %arg1) : (tensor<4x4xf32>, tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>)
// CHECK-NEXT: %[[M:.*]] = dgraph.matmul %[[R]]#0, %arg1
// CHECK-NEXT: %[[E:.*]] = dgraph.exp %[[M]]
// CHECK-NEXT: return %[[R]]#1, %[[E]]
// CHECK: func.func @multi_consumer_fused_0
// CHECK-SAME: dtcc.fused_ops = ["dgraph.add", "dgraph.tanh"], dtcc.saved_bytes = 0
// CHECK: linalg.yield %{{.*}}, %{{.*}} : f32, f32
func.func @multi_consumer(%x: tensor<4x4xf32>, %w: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>) {
  %a = dgraph.add %x, %w : tensor<4x4xf32>
  %t = dgraph.tanh %a : tensor<4x4xf32>
  %m = dgraph.matmul %a, %w : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %e = dgraph.exp %m : tensor<4x4xf32>
  return %t, %e : tensor<4x4xf32>, tensor<4x4xf32>
}

// -----

// Tests that an op does not join a region whose member an outside op reads
// before it (the region would have to run before that reader and after
// it): the matmul reads the exp before the add, so the exp stays alone and
// the add starts a region of its own with the neg.
// CHECK-LABEL: func.func @reader_in_between
// CHECK: %[[E:.*]] = dgraph.exp %arg0
// CHECK-NEXT: %[[M:.*]] = dgraph.matmul %[[E]], %arg0
// CHECK-NEXT: dgraph.fused @dtcc_kernels::@reader_in_between_fused_0(%[[E]], %[[M]])
// CHECK: func.func @reader_in_between_fused_0
// CHECK-SAME: dtcc.fused_ops = ["dgraph.add", "dgraph.neg"]
func.func @reader_in_between(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %e = dgraph.exp %x : tensor<4x4xf32>
  %m = dgraph.matmul %e, %x : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %a = dgraph.add %e, %m : tensor<4x4xf32>
  %n = dgraph.neg %a : tensor<4x4xf32>
  return %n : tensor<4x4xf32>
}

// -----

// Tests that a splat constant is a scalar of the region's body, and that a
// broadcast another op also reads stays in the function for it.
// CHECK-LABEL: func.func @splat_and_shared_broadcast
// CHECK: %[[B:.*]] = dgraph.broadcast_in_dim %arg1
// CHECK: dgraph.fused @dtcc_kernels::@splat_and_shared_broadcast_fused_0(%arg0, %arg1)
// CHECK: dgraph.matmul %[[B]]
// CHECK: func.func @splat_and_shared_broadcast_fused_0
// CHECK: arith.constant 1.250000e-01 : f32
// CHECK: arith.mulf
// CHECK: arith.addf
func.func @splat_and_shared_broadcast(%x: tensor<4x4xf32>, %b: tensor<4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>) {
  %c = dgraph.constant dense<0.125> : tensor<4x4xf32>
  %bb = dgraph.broadcast_in_dim %b, dims = [0] : (tensor<4xf32>) -> tensor<4x4xf32>
  %s = dgraph.mul %x, %c : tensor<4x4xf32>
  %y = dgraph.add %s, %bb : tensor<4x4xf32>
  %m = dgraph.matmul %bb, %x : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %y, %m : tensor<4x4xf32>, tensor<4x4xf32>
}

// -----

// Tests that lone elementwise ops, integer ops and chains of different
// shapes stay as they are: a region needs two float ops of one type.
// CHECK-LABEL: func.func @nothing_to_fuse
// CHECK-NOT: dgraph.fused
// CHECK: dgraph.add %arg0, %arg0 : tensor<4xi64>
// CHECK: dgraph.mul
// CHECK: dgraph.exp %arg1 : tensor<4xf32>
// CHECK: dgraph.reduce_sum
// CHECK: dgraph.neg
// CHECK-NOT: module @dtcc_kernels
func.func @nothing_to_fuse(%i: tensor<4xi64>, %x: tensor<4xf32>) -> (tensor<4xi64>, tensor<f32>) {
  %a = dgraph.add %i, %i : tensor<4xi64>
  %b = dgraph.mul %a, %i : tensor<4xi64>
  %e = dgraph.exp %x : tensor<4xf32>
  %r = dgraph.reduce_sum %e, dims = [0] : (tensor<4xf32>) -> tensor<f32>
  %n = dgraph.neg %r : tensor<f32>
  return %b, %n : tensor<4xi64>, tensor<f32>
}

// -----

// Tests the backward of a bias + GELU: the gradient of the activation and
// the residual gradient's sum are one region, two outputs kept apart.
// CHECK-LABEL: func.func @gelu_backward
// CHECK: dgraph.fused @dtcc_kernels::@gelu_backward_fused_0(%arg0, %arg1, %arg2)
// CHECK: func.func @gelu_backward_fused_0
// CHECK-SAME: dtcc.fused_ops = ["dgraph.gelu_grad", "dgraph.add"]
// CHECK: math.tanh
func.func @gelu_backward(%x: tensor<2x8xf32>, %dy: tensor<2x8xf32>, %res: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %dx = dgraph.gelu_grad %x, %dy {approximate = "tanh"} : tensor<2x8xf32>
  %g = dgraph.add %dx, %res : tensor<2x8xf32>
  return %g : tensor<2x8xf32>
}

// -----

// Tests a half-precision region: it reads its bf16 inputs into f32, computes
// in f32 (a splat constant too) and rounds only what it writes, where the
// unfused kernels round every op's result.
// CHECK-LABEL: func.func @bf16_chain
// CHECK: dgraph.fused @dtcc_kernels::@bf16_chain_fused_0(%arg0, %arg1) : (tensor<4x8xbf16>, tensor<8xbf16>) -> tensor<4x8xbf16>
// CHECK: func.func @bf16_chain_fused_0(%{{.*}}: memref<4x8xbf16>, %{{.*}}: memref<8xbf16>, %{{.*}}: memref<4x8xbf16>)
// CHECK: ^bb0(%[[X:.*]]: bf16, %[[B:.*]]: bf16, %{{.*}}: bf16):
// CHECK-DAG: %[[XF:.*]] = arith.extf %[[X]] : bf16 to f32
// CHECK-DAG: %[[BF:.*]] = arith.extf %[[B]] : bf16 to f32
// CHECK: %[[S:.*]] = arith.addf %[[XF]], %[[BF]] : f32
// CHECK: %[[C:.*]] = arith.constant 1.250000e-01 : f32
// CHECK: %[[M:.*]] = arith.mulf %[[S]], %[[C]] : f32
// CHECK: %[[T:.*]] = math.tanh %[[M]] : f32
// CHECK: %[[R:.*]] = arith.truncf %[[T]] : f32 to bf16
// CHECK: linalg.yield %[[R]] : bf16
func.func @bf16_chain(%x: tensor<4x8xbf16>, %b: tensor<8xbf16>) -> tensor<4x8xbf16> {
  %bb = dgraph.broadcast_in_dim %b, dims = [1] : (tensor<8xbf16>) -> tensor<4x8xbf16>
  %s = dgraph.add %x, %bb : tensor<4x8xbf16>
  %c = dgraph.constant dense<1.250000e-01> : tensor<4x8xbf16>
  %m = dgraph.mul %s, %c : tensor<4x8xbf16>
  %t = dgraph.tanh %m : tensor<4x8xbf16>
  return %t : tensor<4x8xbf16>
}

// -----

// Tests that a chain of constants only (tanh and erf of a splat, which the
// canonicalizer folds) forms no region: a call takes an input (the fuzzer
// found one without operands, which the verifier refuses).
// CHECK-LABEL: func.func @constants_only
// CHECK-NOT: dgraph.fused
// CHECK: dgraph.erf
func.func @constants_only(%x: tensor<4x8xf64> {dgraph.name = "x"}) -> (tensor<4x8xf64> {dgraph.name = "y"}) {
  %c = dgraph.constant dense<1.694> : tensor<4x8xf64>
  %t = dgraph.tanh %c : tensor<4x8xf64>
  %e = dgraph.erf %t : tensor<4x8xf64>
  return %e : tensor<4x8xf64>
}

// -----

// Tests that Clip as imported (max, min, two comparisons, an and, a select)
// and a mask read in are one region: the comparisons and the logical ops
// compute i1 scalars (cmpf ordered, andi, xori for not), the mask that is
// read outside the region is an i1 output, and a mask input is read as i1.
// CHECK-LABEL: func.func @clip_masks
// CHECK-NOT: dgraph.ge
// CHECK-NOT: dgraph.select
// CHECK: %[[R:.*]]:2 = dgraph.fused @dtcc_kernels::@clip_masks_fused_0(%arg0, %arg1) : (tensor<4x8xf32>, tensor<4x8xi1>) -> (tensor<4x8xi1>, tensor<4x8xf32>)
// CHECK-NEXT: return %[[R]]#1, %[[R]]#0
// CHECK: func.func @clip_masks_fused_0(%{{.*}}: memref<4x8xf32>, %{{.*}}: memref<4x8xi1>, %{{.*}}: memref<4x8xi1>, %{{.*}}: memref<4x8xf32>)
// CHECK-SAME: dtcc.fused_ops = ["dgraph.max", "dgraph.min", "dgraph.ge", "dgraph.le", "dgraph.and", "dgraph.select", "dgraph.not", "dgraph.or", "dgraph.select"]
// CHECK: ^bb0(%[[X:.*]]: f32, %[[K:.*]]: i1, %{{.*}}: i1, %{{.*}}: f32):
// CHECK-DAG: arith.cmpf oge, %[[X]]
// CHECK-DAG: arith.cmpf ole, %[[X]]
// CHECK: %[[IN:.*]] = arith.andi
// CHECK: %[[CLIP:.*]] = arith.select %[[IN]], %[[X]]
// CHECK: %[[NOT:.*]] = arith.xori %[[IN]], %true
// CHECK: %[[OR:.*]] = arith.ori %[[NOT]], %[[K]]
// CHECK: %[[Y:.*]] = arith.select %[[OR]], %[[CLIP]]
// CHECK: linalg.yield %[[IN]], %[[Y]] : i1, f32
// EXEC-LABEL: func.func @clip_masks()
// EXEC: dexec.kernel "fused" ins(%{{.*}}, %{{.*}} : memref<4x8xf32>, memref<4x8xi1>) outs(%{{.*}}, %{{.*}} : memref<4x8xi1>, memref<4x8xf32>)
func.func @clip_masks(%x: tensor<4x8xf32> {dgraph.name = "x"}, %keep: tensor<4x8xi1> {dgraph.name = "keep"}) -> (tensor<4x8xf32> {dgraph.name = "y"}, tensor<4x8xi1> {dgraph.name = "inside"}) {
  %lo = dgraph.constant dense<-1.0> : tensor<4x8xf32>
  %hi = dgraph.constant dense<1.5> : tensor<4x8xf32>
  %zero = dgraph.constant dense<0.0> : tensor<4x8xf32>
  %mx = dgraph.max %x, %lo : tensor<4x8xf32>
  %mn = dgraph.min %mx, %hi : tensor<4x8xf32>
  %ge = dgraph.ge %x, %lo : tensor<4x8xf32>
  %le = dgraph.le %x, %hi : tensor<4x8xf32>
  %in = dgraph.and %ge, %le : tensor<4x8xi1>
  %clip = dgraph.select %in, %x, %mn : tensor<4x8xf32>
  %out = dgraph.not %in : tensor<4x8xi1>
  %m = dgraph.or %out, %keep : tensor<4x8xi1>
  %y = dgraph.select %m, %clip, %zero : tensor<4x8xf32>
  return %y, %in : tensor<4x8xf32>, tensor<4x8xi1>
}
