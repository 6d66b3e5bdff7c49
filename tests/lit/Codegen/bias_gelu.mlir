// RUN: dtcc-gpu-codegen %s --emit=mapped | FileCheck %s --check-prefix=MAP
// RUN: dtcc-gpu-codegen %s --emit=ptx --no-ptxas --chip=sm_90 | FileCheck %s --check-prefix=PTX
// RUN: dtcc-gpu-codegen %s --threads-per-block=64 --no-ptxas | FileCheck %s --check-prefix=T64
// Tests the GPU lowering of bias + GELU (erf form) on a 3-D activation:
// y = 0.5 * z * (1 + erf(z / sqrt(2))), z = x + b.

#act = affine_map<(i, j, k) -> (i, j, k)>
#bias = affine_map<(i, j, k) -> (k)>
func.func @bias_gelu(%x: memref<2x5x37xf32>, %b: memref<37xf32>, %y: memref<2x5x37xf32>) {
  linalg.generic {indexing_maps = [#act, #bias, #act], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x, %b : memref<2x5x37xf32>, memref<37xf32>) outs(%y : memref<2x5x37xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %half = arith.constant 0.5 : f32
    %one = arith.constant 1.0 : f32
    %rsqrt2 = arith.constant 0.707106781 : f32
    %z = arith.addf %a, %c : f32
    %u = arith.mulf %z, %rsqrt2 : f32
    %e = math.erf %u : f32
    %p = arith.addf %e, %one : f32
    %h = arith.mulf %z, %half : f32
    %r = arith.mulf %h, %p : f32
    linalg.yield %r : f32
  }
  return
}

// Three dimensions collapse into one of 370: k = i mod 37,
// j = (i div 37) mod 5, the batch (i div 37) div 5.
// MAP-LABEL: func.func @bias_gelu(
// MAP:         scf.parallel
// MAP:           scf.parallel
// MAP:             scf.if
// MAP:               %[[K:.*]] = arith.remsi %[[I:.*]], %[[C37:.*]] : index
// MAP:               %[[Q:.*]] = arith.divsi %[[I]], %[[C37]] : index
// MAP:               %[[J:.*]] = arith.remsi %[[Q]], %[[C5:.*]] : index
// MAP:               %[[B:.*]] = arith.divsi %[[Q]], %[[C5]] : index
// MAP:               memref.load %{{.*}}[%[[B]], %[[J]], %[[K]]] : memref<2x5x37xf32>
// MAP:               memref.load %{{.*}}[%[[K]]] : memref<37xf32>
// MAP:               math.erf
// MAP:           } {mapping = [#gpu.loop_dim_map<processor = thread_x
// MAP:         } {mapping = [#gpu.loop_dim_map<processor = block_x

// erf comes from libdevice, linked and inlined: no call is left.
// PTX:      region @bias_gelu buffers 3 scratch []
// PTX-NEXT:   launch bias_gelu_kernel grid (2, 1, 1) block (256, 1, 1) shared 0 params [0, 1, 2]
// PTX-NEXT: image sm_90 ptx
// PTX:      .target sm_90
// PTX:      .visible .entry bias_gelu_kernel(
// PTX-NOT:  call
// PTX-NOT:  __nv_erff
// PTX:      ret;

// T64:      launch bias_gelu_kernel grid (6, 1, 1) block (64, 1, 1) shared 0 params [0, 1, 2]
