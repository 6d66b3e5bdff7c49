// RUN: dtcc-gpu-codegen %s --emit=mapped | FileCheck %s --check-prefix=MAP
// RUN: dtcc-gpu-codegen %s --emit=ptx --no-ptxas --chip=sm_80 | FileCheck %s --check-prefix=PTX
// Tests the GPU lowering of an AdamW-like update with three outputs
// (parameter, first and second moments) in place and a rank-0 learning rate
// read by every element; 1000 elements is not a multiple of the block.

#e = affine_map<(i) -> (i)>
#s = affine_map<(i) -> ()>
func.func @adamw_update(%p: memref<1000xf32>, %g: memref<1000xf32>, %m: memref<1000xf32>,
                        %v: memref<1000xf32>, %lr: memref<f32>) {
  linalg.generic {indexing_maps = [#e, #e, #e, #e, #s, #e, #e, #e],
                  iterator_types = ["parallel"]}
      ins(%p, %g, %m, %v, %lr : memref<1000xf32>, memref<1000xf32>, memref<1000xf32>, memref<1000xf32>, memref<f32>)
      outs(%p, %m, %v : memref<1000xf32>, memref<1000xf32>, memref<1000xf32>) {
  ^bb0(%pi: f32, %gi: f32, %mi: f32, %vi: f32, %lri: f32, %po: f32, %mo: f32, %vo: f32):
    %b1 = arith.constant 0.9 : f32
    %b1c = arith.constant 0.1 : f32
    %b2 = arith.constant 0.999 : f32
    %b2c = arith.constant 0.001 : f32
    %eps = arith.constant 1.0e-8 : f32
    %wd = arith.constant 0.01 : f32
    %m1 = arith.mulf %mi, %b1 : f32
    %m2 = arith.mulf %gi, %b1c : f32
    %mn = arith.addf %m1, %m2 : f32
    %g2 = arith.mulf %gi, %gi : f32
    %v1 = arith.mulf %vi, %b2 : f32
    %v2 = arith.mulf %g2, %b2c : f32
    %vn = arith.addf %v1, %v2 : f32
    %sq = math.sqrt %vn : f32
    %den = arith.addf %sq, %eps : f32
    %upd = arith.divf %mn, %den : f32
    %dec = arith.mulf %pi, %wd : f32
    %step = arith.addf %upd, %dec : f32
    %scaled = arith.mulf %step, %lri : f32
    %pn = arith.subf %pi, %scaled : f32
    linalg.yield %pn, %mn, %vn : f32, f32, f32
  }
  return
}

// MAP-LABEL: func.func @adamw_update(
// MAP:         scf.parallel
// MAP:           scf.parallel
// MAP:             %[[I:.*]] = arith.addi
// MAP:             arith.cmpi ult, %{{.*}}, %[[C1000:.*]] : index
// MAP:             scf.if
// MAP:               memref.load %{{.*}}[] : memref<f32>
// MAP:               math.sqrt
// MAP:               memref.store %{{.*}}, %arg0[%[[I]]]
// MAP:               memref.store %{{.*}}, %arg2[%[[I]]]
// MAP:               memref.store %{{.*}}, %arg3[%[[I]]]

// One kernel, one pointer per buffer in operand order, 4 blocks of 256.
// PTX:      region @adamw_update buffers 5 scratch []
// PTX-NEXT:   launch adamw_update_kernel grid (4, 1, 1) block (256, 1, 1) shared 0 params [0, 1, 2, 3, 4]
// PTX:      .visible .entry adamw_update_kernel(
// PTX-COUNT-4: .param .u64 .ptr .align 1 adamw_update_kernel_param_{{[0-3]}},
// PTX-NEXT:   .param .u64 .ptr .align 1 adamw_update_kernel_param_4
// PTX-NEXT: )
// PTX:      sqrt.rn.f32
