//===- CudaTables.h - dtype and reduction tables for cuBLASLt and NCCL ---===//
//
// How a runtime DType maps onto the libraries of the CUDA backend: the
// cuBLASLt matrix types, compute type and scale type of a matmul, and the
// NCCL data type and reduction of a collective. Host-only (library headers,
// no CUDA runtime calls), so the tables are tested without a GPU.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CUDA_CUDATABLES_H
#define DTCC_RUNTIME_DEVICE_CUDA_CUDATABLES_H

#include "runtime/base/DType.h"
#include "runtime/comm/Communicator.h"

#include <cublas_api.h>
#include <library_types.h>
#include <nccl.h>

namespace dtcc::runtime::cuda {

/// The types of a cuBLASLt matmul on one element type: A, B and C/D are
/// `dataType`, products accumulate in `computeType`, alpha/beta are
/// `scaleType`.
struct MatmulTypes {
  cudaDataType_t dataType;
  cublasComputeType_t computeType;
  cudaDataType_t scaleType;
};

/// f32 (fp32 accumulate; with `allowTf32`, TF32 tensor cores), f16 and bf16
/// (fp32 accumulate and scale), f64. Other dtypes: unimplemented, naming
/// the dtype.
StatusOr<MatmulTypes> matmulTypes(DType dtype, bool allowTf32 = false);

/// The alignment in bytes cuBLASLt's heuristic may assume of a matrix
/// operand (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_{A,B,C,D}_BYTES): the
/// largest power of two up to 256 (cuBLASLt's default assumption) dividing
/// the address of every one of its `batch` matrices, `base` and `base +
/// i * batchStrideBytes`. Buffers of the memory plan are 64-byte aligned
/// and arenas 256-byte aligned, but a view can start anywhere.
uint32_t cublasLtAlignment(const void *base, int64_t batchStrideBytes,
                           int64_t batch);

/// The CUDA data type of a dtype's storage (f32, f16, bf16, f64, i8, u8,
/// i32, u32, i64, u64); unimplemented for the others.
StatusOr<cudaDataType_t> cudaDataType(DType dtype);

/// The NCCL type and operation of a reduction of `dtype` by `kind`. f16,
/// bf16, f32, f64 and the 8/32/64-bit integers reduce natively; bool
/// (stored as one byte 0/1) reduces as logical or for sum and max (ncclMax
/// on uint8) and logical and for min and prod (ncclMin). 16-bit integers
/// have no NCCL type: unimplemented.
struct NcclReduction {
  ncclDataType_t dataType;
  ncclRedOp_t op;
};
StatusOr<NcclReduction> ncclReduction(DType dtype, ReduceKind kind);

/// The NCCL type for moving `dtype` (all_gather, broadcast, all_to_all,
/// send/recv): its native type when it has one, else bytes (ncclUint8) with
/// the count multiplied by `*countScale` (the element size).
ncclDataType_t ncclMoveType(DType dtype, int64_t *countScale);

/// "ncclBfloat16", ... for messages.
const char *ncclDataTypeName(ncclDataType_t type);

} // namespace dtcc::runtime::cuda

#endif // DTCC_RUNTIME_DEVICE_CUDA_CUDATABLES_H
