// RUN: dtcc-gpu-codegen %s --emit=mapped | FileCheck %s --check-prefix=MAP
// RUN: dtcc-gpu-codegen %s --no-ptxas | FileCheck %s --check-prefix=TABLE
// Tests the GPU lowering of row regions in the parallel row form (the
// functions are dtcc-lower-fuse-regions="rows=true parallel-rows=true"'s
// output for a residual add with a layer norm over rows [2, 3] of 40, a
// residual add with an RMS norm over 5 rows of 1024, a scaled, masked
// softmax over 4 rows of 300, and a layer norm's gradient with the residual
// gradient added to its dx over 6 rows of 100): a block per row, the row dimensions
// collapsed; about four columns a thread, whole warps (32, 256, 128
// threads); thread t's k-th column t + k * threads in loops of constant
// trips, guarded where the threads do not divide the row; the row buffers
// the thread's own columns; each reduction a thread's partial result, then
// a gpu.all_reduce of the block (f64 for the norms' sums, maximumf for the
// softmax's maximum). tests/unit/cuda/CudaGeneratedKernelTest.cpp runs them.

// MAP-LABEL: func.func @residual_layer_norm
// MAP-DAG: %[[C6:.*]] = arith.constant 6 : index
// MAP-DAG: %[[C32:.*]] = arith.constant 32 : index
// MAP-DAG: %[[C2:.*]] = arith.constant 2 : index
// MAP: scf.parallel (%[[ROW:.*]]) = (%{{.*}}) to (%[[C6]])
// MAP: scf.parallel (%[[T:.*]]) = (%{{.*}}) to (%[[C32]])
// MAP: %[[BUF:.*]] = memref.alloca() : memref<2xf32>
// MAP: scf.for %[[K:.*]] = %{{.*}} to %[[C2]]
// MAP: %[[KT:.*]] = arith.muli %[[K]], %[[C32]]
// MAP: %[[COL:.*]] = arith.addi %[[T]], %[[KT]]
// MAP: arith.cmpi ult, %[[COL]], %{{.*}}
// MAP: scf.if
// MAP: memref.store %{{.*}}, %[[BUF]][%[[K]]]
// MAP: scf.for {{.*}} iter_args({{.*}}) -> (f64)
// MAP: gpu.all_reduce add %{{.*}} uniform
// MAP-NEXT: } : (f64) -> f64
// MAP: {mapping = [#gpu.loop_dim_map<processor = thread_x
// MAP: {mapping = [#gpu.loop_dim_map<processor = block_x
// MAP-LABEL: func.func @residual_rms_norm
// MAP: scf.parallel
// MAP: scf.parallel (%{{.*}}) = (%{{.*}}) to (%c256)
// MAP-NOT: scf.if
// MAP: gpu.all_reduce add
// MAP-LABEL: func.func @masked_softmax
// MAP: gpu.all_reduce maximumf %{{.*}} uniform
// MAP: gpu.all_reduce add %{{.*}} uniform
// MAP-LABEL: func.func @residual_layer_norm_grad
// MAP: gpu.all_reduce add %{{.*}} uniform
// MAP-NEXT: } : (f64) -> f64
// MAP: gpu.all_reduce add %{{.*}} uniform
// MAP-NEXT: } : (f64) -> f64

// TABLE: region @residual_layer_norm buffers 8 scratch []
// TABLE-NEXT: launch residual_layer_norm_kernel grid (6, 1, 1) block (32, 1, 1) shared 0
// TABLE: region @residual_rms_norm buffers 5 scratch []
// TABLE-NEXT: launch residual_rms_norm_kernel grid (5, 1, 1) block (256, 1, 1) shared 0
// TABLE: region @masked_softmax buffers 3 scratch []
// TABLE-NEXT: launch masked_softmax_kernel grid (4, 1, 1) block (128, 1, 1) shared 0
// TABLE: region @residual_layer_norm_grad buffers 7 scratch []
// TABLE-NEXT: launch residual_layer_norm_grad_kernel grid (6, 1, 1) block (32, 1, 1) shared 0
// TABLE: image sm_80 ptx
// TABLE: image sm_90 ptx

func.func @residual_layer_norm(%arg0: memref<2x3x40xf32>, %arg1: memref<2x3x40xf32>, %arg2: memref<40xf32>, %arg3: memref<40xf32>, %arg4: memref<2x3x40xf32>, %arg5: memref<2x3x40xf32>, %arg6: memref<2x3xf32>, %arg7: memref<2x3xf32>) attributes {dtcc.fused_ops = ["dgraph.add", "dgraph.layer_norm"], dtcc.saved_bytes = 4224 : i64} {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c1 = arith.constant 1 : index
  %c0_0 = arith.constant 0 : index
  %c3 = arith.constant 3 : index
  %c1_1 = arith.constant 1 : index
  scf.parallel (%arg8, %arg9) = (%c0, %c0_0) to (%c2, %c3) step (%c1, %c1_1) {
    %alloca = memref.alloca() : memref<40xf32>
    %alloca_2 = memref.alloca() : memref<40xf32>
    %alloca_3 = memref.alloca() : memref<40xf32>
    %c0_4 = arith.constant 0 : index
    %c40 = arith.constant 40 : index
    %c1_5 = arith.constant 1 : index
    scf.parallel (%arg10) = (%c0_4) to (%c40) step (%c1_5) {
      %11 = memref.load %arg0[%arg8, %arg9, %arg10] : memref<2x3x40xf32>
      %12 = memref.load %arg1[%arg8, %arg9, %arg10] : memref<2x3x40xf32>
      %13 = arith.addf %11, %12 : f32
      memref.store %13, %arg4[%arg8, %arg9, %arg10] : memref<2x3x40xf32>
      memref.store %13, %alloca[%arg10] : memref<40xf32>
      scf.reduce 
    }
    %cst = arith.constant 0.000000e+00 : f64
    %c0_6 = arith.constant 0 : index
    %c40_7 = arith.constant 40 : index
    %c1_8 = arith.constant 1 : index
    %0 = scf.parallel (%arg10) = (%c0_6) to (%c40_7) step (%c1_8) init (%cst) -> f64 {
      %11 = memref.load %alloca[%arg10] : memref<40xf32>
      %12 = arith.extf %11 : f32 to f64
      scf.reduce(%12 : f64) {
      ^bb0(%arg11: f64, %arg12: f64):
        %13 = arith.addf %arg11, %arg12 : f64
        scf.reduce.return %13 : f64
      }
    }
    %cst_9 = arith.constant 4.000000e+01 : f64
    %1 = arith.divf %0, %cst_9 : f64
    %2 = arith.truncf %1 : f64 to f32
    %3 = arith.truncf %1 : f64 to f32
    memref.store %3, %arg6[%arg8, %arg9] : memref<2x3xf32>
    %c0_10 = arith.constant 0 : index
    %c40_11 = arith.constant 40 : index
    %c1_12 = arith.constant 1 : index
    scf.parallel (%arg10) = (%c0_10) to (%c40_11) step (%c1_12) {
      %11 = memref.load %alloca[%arg10] : memref<40xf32>
      %12 = arith.subf %11, %2 : f32
      memref.store %12, %alloca_3[%arg10] : memref<40xf32>
      %13 = arith.mulf %12, %12 : f32
      memref.store %13, %alloca_2[%arg10] : memref<40xf32>
      scf.reduce 
    }
    %cst_13 = arith.constant 0.000000e+00 : f64
    %c0_14 = arith.constant 0 : index
    %c40_15 = arith.constant 40 : index
    %c1_16 = arith.constant 1 : index
    %4 = scf.parallel (%arg10) = (%c0_14) to (%c40_15) step (%c1_16) init (%cst_13) -> f64 {
      %11 = memref.load %alloca_2[%arg10] : memref<40xf32>
      %12 = arith.extf %11 : f32 to f64
      scf.reduce(%12 : f64) {
      ^bb0(%arg11: f64, %arg12: f64):
        %13 = arith.addf %arg11, %arg12 : f64
        scf.reduce.return %13 : f64
      }
    }
    %cst_17 = arith.constant 4.000000e+01 : f64
    %5 = arith.divf %4, %cst_17 : f64
    %cst_18 = arith.constant 9.9999997473787516E-6 : f64
    %6 = arith.addf %5, %cst_18 : f64
    %7 = math.sqrt %6 : f64
    %cst_19 = arith.constant 1.000000e+00 : f64
    %8 = arith.divf %cst_19, %7 : f64
    %9 = arith.truncf %8 : f64 to f32
    %10 = arith.truncf %8 : f64 to f32
    memref.store %10, %arg7[%arg8, %arg9] : memref<2x3xf32>
    %c0_20 = arith.constant 0 : index
    %c40_21 = arith.constant 40 : index
    %c1_22 = arith.constant 1 : index
    scf.parallel (%arg10) = (%c0_20) to (%c40_21) step (%c1_22) {
      %11 = memref.load %alloca_3[%arg10] : memref<40xf32>
      %12 = arith.mulf %11, %9 : f32
      %13 = memref.load %arg2[%arg10] : memref<40xf32>
      %14 = arith.mulf %12, %13 : f32
      %15 = memref.load %arg3[%arg10] : memref<40xf32>
      %16 = arith.addf %14, %15 : f32
      memref.store %16, %arg5[%arg8, %arg9, %arg10] : memref<2x3x40xf32>
      scf.reduce 
    }
    scf.reduce 
  }
  return
}
func.func @residual_rms_norm(%arg0: memref<5x1024xf32>, %arg1: memref<5x1024xf32>, %arg2: memref<1024xf32>, %arg3: memref<5x1024xf32>, %arg4: memref<5xf32>) attributes {dtcc.fused_ops = ["dgraph.add", "dgraph.rms_norm"], dtcc.saved_bytes = 61660 : i64} {
  %c0 = arith.constant 0 : index
  %c5 = arith.constant 5 : index
  %c1 = arith.constant 1 : index
  scf.parallel (%arg5) = (%c0) to (%c5) step (%c1) {
    %alloca = memref.alloca() : memref<1024xf32>
    %alloca_0 = memref.alloca() : memref<1024xf32>
    %c0_1 = arith.constant 0 : index
    %c1024 = arith.constant 1024 : index
    %c1_2 = arith.constant 1 : index
    scf.parallel (%arg6) = (%c0_1) to (%c1024) step (%c1_2) {
      %7 = memref.load %arg0[%arg5, %arg6] : memref<5x1024xf32>
      %8 = memref.load %arg1[%arg5, %arg6] : memref<5x1024xf32>
      %9 = arith.addf %7, %8 : f32
      memref.store %9, %alloca_0[%arg6] : memref<1024xf32>
      %10 = arith.mulf %9, %9 : f32
      memref.store %10, %alloca[%arg6] : memref<1024xf32>
      scf.reduce 
    }
    %cst = arith.constant 0.000000e+00 : f64
    %c0_3 = arith.constant 0 : index
    %c1024_4 = arith.constant 1024 : index
    %c1_5 = arith.constant 1 : index
    %0 = scf.parallel (%arg6) = (%c0_3) to (%c1024_4) step (%c1_5) init (%cst) -> f64 {
      %7 = memref.load %alloca[%arg6] : memref<1024xf32>
      %8 = arith.extf %7 : f32 to f64
      scf.reduce(%8 : f64) {
      ^bb0(%arg7: f64, %arg8: f64):
        %9 = arith.addf %arg7, %arg8 : f64
        scf.reduce.return %9 : f64
      }
    }
    %cst_6 = arith.constant 1.024000e+03 : f64
    %1 = arith.divf %0, %cst_6 : f64
    %cst_7 = arith.constant 9.9999999747524271E-7 : f64
    %2 = arith.addf %1, %cst_7 : f64
    %3 = math.sqrt %2 : f64
    %cst_8 = arith.constant 1.000000e+00 : f64
    %4 = arith.divf %cst_8, %3 : f64
    %5 = arith.truncf %4 : f64 to f32
    %6 = arith.truncf %4 : f64 to f32
    memref.store %6, %arg4[%arg5] : memref<5xf32>
    %c0_9 = arith.constant 0 : index
    %c1024_10 = arith.constant 1024 : index
    %c1_11 = arith.constant 1 : index
    scf.parallel (%arg6) = (%c0_9) to (%c1024_10) step (%c1_11) {
      %7 = memref.load %alloca_0[%arg6] : memref<1024xf32>
      %8 = arith.mulf %7, %5 : f32
      %9 = memref.load %arg2[%arg6] : memref<1024xf32>
      %10 = arith.mulf %8, %9 : f32
      memref.store %10, %arg3[%arg5, %arg6] : memref<5x1024xf32>
      scf.reduce 
    }
    scf.reduce 
  }
  return
}
func.func @masked_softmax(%arg0: memref<4x300xf32>, %arg1: memref<300xf32>, %arg2: memref<4x300xf32>) attributes {dtcc.fused_ops = ["dgraph.mul", "dgraph.add", "dgraph.softmax"], dtcc.saved_bytes = 19248 : i64} {
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c1 = arith.constant 1 : index
  scf.parallel (%arg3) = (%c0) to (%c4) step (%c1) {
    %alloca = memref.alloca() : memref<300xf32>
    %alloca_0 = memref.alloca() : memref<300xf32>
    %c0_1 = arith.constant 0 : index
    %c300 = arith.constant 300 : index
    %c1_2 = arith.constant 1 : index
    scf.parallel (%arg4) = (%c0_1) to (%c300) step (%c1_2) {
      %3 = memref.load %arg0[%arg3, %arg4] : memref<4x300xf32>
      %cst_17 = arith.constant 2.500000e-01 : f32
      %4 = arith.mulf %3, %cst_17 : f32
      %5 = memref.load %arg1[%arg4] : memref<300xf32>
      %6 = arith.addf %4, %5 : f32
      memref.store %6, %alloca[%arg4] : memref<300xf32>
      scf.reduce 
    }
    %cst = arith.constant 0xFF800000 : f32
    %c0_3 = arith.constant 0 : index
    %c300_4 = arith.constant 300 : index
    %c1_5 = arith.constant 1 : index
    %0 = scf.parallel (%arg4) = (%c0_3) to (%c300_4) step (%c1_5) init (%cst) -> f32 {
      %3 = memref.load %alloca[%arg4] : memref<300xf32>
      scf.reduce(%3 : f32) {
      ^bb0(%arg5: f32, %arg6: f32):
        %4 = arith.maximumf %arg5, %arg6 : f32
        scf.reduce.return %4 : f32
      }
    }
    %c0_6 = arith.constant 0 : index
    %c300_7 = arith.constant 300 : index
    %c1_8 = arith.constant 1 : index
    scf.parallel (%arg4) = (%c0_6) to (%c300_7) step (%c1_8) {
      %3 = memref.load %alloca[%arg4] : memref<300xf32>
      %4 = arith.subf %3, %0 : f32
      %5 = math.exp %4 : f32
      memref.store %5, %alloca_0[%arg4] : memref<300xf32>
      scf.reduce 
    }
    %cst_9 = arith.constant 0.000000e+00 : f32
    %c0_10 = arith.constant 0 : index
    %c300_11 = arith.constant 300 : index
    %c1_12 = arith.constant 1 : index
    %1 = scf.parallel (%arg4) = (%c0_10) to (%c300_11) step (%c1_12) init (%cst_9) -> f32 {
      %3 = memref.load %alloca_0[%arg4] : memref<300xf32>
      scf.reduce(%3 : f32) {
      ^bb0(%arg5: f32, %arg6: f32):
        %4 = arith.addf %arg5, %arg6 : f32
        scf.reduce.return %4 : f32
      }
    }
    %cst_13 = arith.constant 1.000000e+00 : f32
    %2 = arith.divf %cst_13, %1 : f32
    %c0_14 = arith.constant 0 : index
    %c300_15 = arith.constant 300 : index
    %c1_16 = arith.constant 1 : index
    scf.parallel (%arg4) = (%c0_14) to (%c300_15) step (%c1_16) {
      %3 = memref.load %alloca_0[%arg4] : memref<300xf32>
      %4 = arith.mulf %3, %2 : f32
      memref.store %4, %arg2[%arg3, %arg4] : memref<4x300xf32>
      scf.reduce 
    }
    scf.reduce 
  }
  return
}
func.func @residual_layer_norm_grad(%arg0: memref<6x100xf32>, %arg1: memref<6xf32>, %arg2: memref<6xf32>, %arg3: memref<6x100xf32>, %arg4: memref<100xf32>, %arg5: memref<6x100xf32>, %arg6: memref<6x100xf32>) attributes {dtcc.fused_ops = ["dgraph.layer_norm_grad", "dgraph.add"], dtcc.saved_bytes = 19440 : i64} {
  %c0 = arith.constant 0 : index
  %c6 = arith.constant 6 : index
  %c1 = arith.constant 1 : index
  scf.parallel (%arg7) = (%c0) to (%c6) step (%c1) {
    %alloca = memref.alloca() : memref<100xf32>
    %alloca_0 = memref.alloca() : memref<100xf32>
    %alloca_1 = memref.alloca() : memref<100xf32>
    %c0_2 = arith.constant 0 : index
    %c100 = arith.constant 100 : index
    %c1_3 = arith.constant 1 : index
    scf.parallel (%arg8) = (%c0_2) to (%c100) step (%c1_3) {
      %6 = memref.load %arg0[%arg7, %arg8] : memref<6x100xf32>
      %7 = memref.load %arg1[%arg7] : memref<6xf32>
      %8 = arith.subf %6, %7 : f32
      %9 = memref.load %arg2[%arg7] : memref<6xf32>
      %10 = arith.mulf %8, %9 : f32
      memref.store %10, %alloca_1[%arg8] : memref<100xf32>
      %11 = memref.load %arg3[%arg7, %arg8] : memref<6x100xf32>
      %12 = memref.load %arg4[%arg8] : memref<100xf32>
      %13 = arith.mulf %11, %12 : f32
      memref.store %13, %alloca_0[%arg8] : memref<100xf32>
      %14 = arith.mulf %13, %10 : f32
      memref.store %14, %alloca[%arg8] : memref<100xf32>
      scf.reduce 
    }
    %cst = arith.constant 0.000000e+00 : f64
    %c0_4 = arith.constant 0 : index
    %c100_5 = arith.constant 100 : index
    %c1_6 = arith.constant 1 : index
    %0 = scf.parallel (%arg8) = (%c0_4) to (%c100_5) step (%c1_6) init (%cst) -> f64 {
      %6 = memref.load %alloca[%arg8] : memref<100xf32>
      %7 = arith.extf %6 : f32 to f64
      scf.reduce(%7 : f64) {
      ^bb0(%arg9: f64, %arg10: f64):
        %8 = arith.addf %arg9, %arg10 : f64
        scf.reduce.return %8 : f64
      }
    }
    %cst_7 = arith.constant 0.000000e+00 : f64
    %c0_8 = arith.constant 0 : index
    %c100_9 = arith.constant 100 : index
    %c1_10 = arith.constant 1 : index
    %1 = scf.parallel (%arg8) = (%c0_8) to (%c100_9) step (%c1_10) init (%cst_7) -> f64 {
      %6 = memref.load %alloca_0[%arg8] : memref<100xf32>
      %7 = arith.extf %6 : f32 to f64
      scf.reduce(%7 : f64) {
      ^bb0(%arg9: f64, %arg10: f64):
        %8 = arith.addf %arg9, %arg10 : f64
        scf.reduce.return %8 : f64
      }
    }
    %cst_11 = arith.constant 1.000000e-02 : f64
    %2 = arith.mulf %0, %cst_11 : f64
    %3 = arith.truncf %2 : f64 to f32
    %cst_12 = arith.constant 1.000000e-02 : f64
    %4 = arith.mulf %1, %cst_12 : f64
    %5 = arith.truncf %4 : f64 to f32
    %c0_13 = arith.constant 0 : index
    %c100_14 = arith.constant 100 : index
    %c1_15 = arith.constant 1 : index
    scf.parallel (%arg8) = (%c0_13) to (%c100_14) step (%c1_15) {
      %6 = memref.load %alloca_0[%arg8] : memref<100xf32>
      %7 = arith.subf %6, %5 : f32
      %8 = memref.load %alloca_1[%arg8] : memref<100xf32>
      %9 = arith.mulf %8, %3 : f32
      %10 = arith.subf %7, %9 : f32
      %11 = memref.load %arg2[%arg7] : memref<6xf32>
      %12 = arith.mulf %11, %10 : f32
      %13 = memref.load %arg5[%arg7, %arg8] : memref<6x100xf32>
      %14 = arith.addf %13, %12 : f32
      memref.store %14, %arg6[%arg7, %arg8] : memref<6x100xf32>
      scf.reduce 
    }
    scf.reduce 
  }
  return
}
