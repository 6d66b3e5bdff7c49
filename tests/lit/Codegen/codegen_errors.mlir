// Tests that functions outside the fused-region contract are refused at the
// op, naming the region and what was expected.

// RUN: not dtcc-gpu-codegen %S/Inputs/region_dynamic.mlir --no-ptxas 2>&1 | FileCheck %s --check-prefix=DYN
// DYN: error: fused region '@dyn': expected argument 1 to be a memref of static shape with the identity layout, got memref<?xf32>

// RUN: not dtcc-gpu-codegen %S/Inputs/region_tensor.mlir --no-ptxas 2>&1 | FileCheck %s --check-prefix=TENSOR
// TENSOR: error: fused region '@on_tensors': expected argument 0 to be a memref of static shape with the identity layout, got tensor<4xf32>

// RUN: not dtcc-gpu-codegen %S/Inputs/region_foreign_op.mlir --no-ptxas 2>&1 | FileCheck %s --check-prefix=OP
// OP: error: fused region '@foreign': expected linalg ops, the row loop of the parallel row form, static memref.alloc/dealloc and constants, got 'memref.copy'

// RUN: not dtcc-gpu-codegen %S/Inputs/region_result.mlir --no-ptxas 2>&1 | FileCheck %s --check-prefix=RES
// RES: error: fused region '@result': expected no results (outputs are buffers), got 1

// RUN: not dtcc-gpu-codegen %S/Inputs/region_dynamic.mlir --threads-per-block=2048 2>&1 | FileCheck %s --check-prefix=TPB
// TPB: error: expected 1..1024 threads per block, got 2048

// RUN: not dtcc-gpu-codegen %S/bias_gelu.mlir --cuda-toolkit=%t.missing 2>&1 | FileCheck %s --check-prefix=LIBDEVICE
// LIBDEVICE: error: GPU code generation links libdevice (the CUDA toolkit's math functions), but there is no {{.*}}.missing/nvvm/libdevice/libdevice.10.bc
