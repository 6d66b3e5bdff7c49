// RUN: dtcc-gpu-codegen %s --emit=mapped | FileCheck %s --check-prefix=MAP
// RUN: dtcc-gpu-codegen %s --emit=ptx --no-ptxas | FileCheck %s --check-prefix=PTX
// Tests the GPU lowering of an elementwise chain with broadcasts and a
// temporary: t = x * b (b broadcast along rows), y = max(t, 0) + x.

#row = affine_map<(i, j) -> (i, j)>
#col = affine_map<(i, j) -> (j)>
func.func @ew_chain(%x: memref<8x33xf32>, %b: memref<33xf32>, %y: memref<8x33xf32>) {
  %t = memref.alloc() : memref<8x33xf32>
  linalg.generic {indexing_maps = [#row, #col, #row], iterator_types = ["parallel", "parallel"]}
      ins(%x, %b : memref<8x33xf32>, memref<33xf32>) outs(%t : memref<8x33xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  }
  linalg.generic {indexing_maps = [#row, #row, #row], iterator_types = ["parallel", "parallel"]}
      ins(%t, %x : memref<8x33xf32>, memref<8x33xf32>) outs(%y : memref<8x33xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %zero = arith.constant 0.0 : f32
    %r = arith.maximumf %a, %zero : f32
    %s = arith.addf %r, %c : f32
    linalg.yield %s : f32
  }
  memref.dealloc %t : memref<8x33xf32>
  return
}

// The 8 x 33 elements are one dimension of 264 (row j = i mod 33 reads the
// bias), in tiles of 256 on blocks, a guard for the last tile's 8 threads;
// the temporary is a trailing argument (scratch).
// MAP-LABEL: func.func @ew_chain(
// MAP-SAME:    %[[X:.*]]: memref<8x33xf32>, %[[B:.*]]: memref<33xf32>, %[[Y:.*]]: memref<8x33xf32>, %[[T:.*]]: memref<8x33xf32>)
// MAP-NOT:     memref.alloc
// MAP:         scf.parallel (%[[TILE:.*]]) = (%{{.*}}) to (%[[N:.*]]) step
// MAP:           scf.parallel (%[[LANE:.*]]) =
// MAP:             %[[I:.*]] = arith.addi %[[LANE]], %[[TILE]]
// MAP:             arith.cmpi ult, %{{.*}}, %[[N]]
// MAP:             scf.if
// MAP:               %[[COL:.*]] = arith.remsi %[[I]], %[[C33:.*]] : index
// MAP:               %[[ROW:.*]] = arith.divsi %[[I]], %[[C33]] : index
// MAP:               memref.load %[[X]][%[[ROW]], %[[COL]]]
// MAP:               memref.load %[[B]][%[[COL]]]
// MAP:               memref.store %{{.*}}, %[[T]][%[[ROW]], %[[COL]]]
// MAP:           } {mapping = [#gpu.loop_dim_map<processor = thread_x
// MAP:         } {mapping = [#gpu.loop_dim_map<processor = block_x
// MAP:         scf.parallel
// MAP-NOT:     memref.dealloc
// MAP:         return

// Fusion's region form: one generic, a size-1 broadcast dimension read at
// index 0 (affine constant), tanh.
func.func @tanh_bias(%x: memref<4x8xf32>, %b: memref<1x8xf32>, %y: memref<4x8xf32>) attributes {dtcc.fused_ops = ["dgraph.add", "dgraph.tanh"]} {
  linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (0, j)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]}
      ins(%x, %b : memref<4x8xf32>, memref<1x8xf32>) outs(%y : memref<4x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %s = arith.addf %a, %c : f32
    %t = math.tanh %s : f32
    linalg.yield %t : f32
  }
  return
}
// MAP-LABEL: func.func @tanh_bias(
// MAP:         %[[COL:.*]] = arith.remsi %{{.*}}, %[[C8:.*]] : index
// MAP:         memref.load %{{.*}}[%{{.*}}, %[[COL]]] : memref<4x8xf32>
// MAP:         memref.load %{{.*}}[%[[ZERO:.*]], %[[COL]]] : memref<1x8xf32>
// MAP:         math.tanh

// PTX:      region @ew_chain buffers 3 scratch [1056]
// PTX-NEXT:   launch ew_chain_kernel grid (2, 1, 1) block (256, 1, 1) shared 0 params [0, 1, 3]
// PTX-NEXT:   launch ew_chain_kernel_0 grid (2, 1, 1) block (256, 1, 1) shared 0 params [3, 0, 2]
// PTX-NEXT: region @tanh_bias buffers 3 scratch []
// PTX-NEXT:   launch tanh_bias_kernel grid (1, 1, 1) block (32, 1, 1) shared 0 params [0, 1, 2]
// PTX-NEXT: image sm_80 ptx {{[0-9]+}} bytes, no cubin
// PTX-NEXT: image sm_90 ptx {{[0-9]+}} bytes, no cubin
// PTX-LABEL: PTX sm_80
// PTX:       .target sm_80
// PTX:       .visible .entry ew_chain_kernel(
// PTX-NEXT:    .param .u64 .ptr .align 1 ew_chain_kernel_param_0,
// PTX-NEXT:    .param .u64 .ptr .align 1 ew_chain_kernel_param_1,
// PTX-NEXT:    .param .u64 .ptr .align 1 ew_chain_kernel_param_2
// PTX-NEXT:  )
// PTX-NEXT:  .maxntid 256, 1, 1
// PTX:       %ctaid.x
// PTX:       %tid.x
// PTX:       .visible .entry ew_chain_kernel_0(
// PTX-LABEL: PTX sm_90
// PTX:       .target sm_90
// PTX:       .visible .entry ew_chain_kernel(
// PTX:       .visible .entry ew_chain_kernel_0(
