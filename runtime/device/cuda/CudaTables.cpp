//===- CudaTables.cpp - dtype and reduction tables for cuBLASLt and NCCL -===//

#include "runtime/device/cuda/CudaTables.h"

namespace dtcc::runtime::cuda {

StatusOr<MatmulTypes> matmulTypes(DType dtype, bool allowTf32) {
  switch (dtype) {
  case DType::kF32:
    return MatmulTypes{CUDA_R_32F,
                       allowTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                 : CUBLAS_COMPUTE_32F,
                       CUDA_R_32F};
  case DType::kF16:
    return MatmulTypes{CUDA_R_16F, CUBLAS_COMPUTE_32F, CUDA_R_32F};
  case DType::kBF16:
    return MatmulTypes{CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F};
  case DType::kF64:
    return MatmulTypes{CUDA_R_64F, CUBLAS_COMPUTE_64F, CUDA_R_64F};
  default:
    return unimplemented("no CUDA matmul for element type ", dtypeName(dtype),
                         " (expected f32, f16, bf16 or f64)");
  }
}

uint32_t cublasLtAlignment(const void *base, int64_t batchStrideBytes,
                           int64_t batch) {
  const uint64_t address = reinterpret_cast<uintptr_t>(base);
  const uint64_t stride =
      batch > 1 ? uint64_t(batchStrideBytes < 0 ? -batchStrideBytes
                                                : batchStrideBytes)
                : 0;
  uint32_t alignment = 256;
  while (alignment > 1 && (address % alignment != 0 || stride % alignment != 0))
    alignment /= 2;
  return alignment;
}

StatusOr<cudaDataType_t> cudaDataType(DType dtype) {
  switch (dtype) {
  case DType::kF32: return CUDA_R_32F;
  case DType::kF16: return CUDA_R_16F;
  case DType::kBF16: return CUDA_R_16BF;
  case DType::kF64: return CUDA_R_64F;
  case DType::kI8: return CUDA_R_8I;
  case DType::kU8: return CUDA_R_8U;
  case DType::kI32: return CUDA_R_32I;
  case DType::kU32: return CUDA_R_32U;
  case DType::kI64: return CUDA_R_64I;
  case DType::kU64: return CUDA_R_64U;
  default:
    return unimplemented("no CUDA data type for element type ",
                         dtypeName(dtype));
  }
}

/// The native NCCL type of `dtype`, or false.
static bool nativeNcclType(DType dtype, ncclDataType_t *type) {
  switch (dtype) {
  case DType::kI8: *type = ncclInt8; return true;
  case DType::kU8: *type = ncclUint8; return true;
  case DType::kBool: *type = ncclUint8; return true;
  case DType::kI32: *type = ncclInt32; return true;
  case DType::kU32: *type = ncclUint32; return true;
  case DType::kI64: *type = ncclInt64; return true;
  case DType::kU64: *type = ncclUint64; return true;
  case DType::kF16: *type = ncclFloat16; return true;
  case DType::kF32: *type = ncclFloat32; return true;
  case DType::kF64: *type = ncclFloat64; return true;
  case DType::kBF16: *type = ncclBfloat16; return true;
  default: return false;
  }
}

StatusOr<NcclReduction> ncclReduction(DType dtype, ReduceKind kind) {
  NcclReduction r;
  if (!nativeNcclType(dtype, &r.dataType))
    return unimplemented("NCCL cannot reduce element type ", dtypeName(dtype));
  if (dtype == DType::kBool) {
    r.op = (kind == ReduceKind::kSum || kind == ReduceKind::kMax) ? ncclMax
                                                                  : ncclMin;
    return r;
  }
  switch (kind) {
  case ReduceKind::kSum: r.op = ncclSum; break;
  case ReduceKind::kMax: r.op = ncclMax; break;
  case ReduceKind::kMin: r.op = ncclMin; break;
  case ReduceKind::kProd: r.op = ncclProd; break;
  }
  return r;
}

ncclDataType_t ncclMoveType(DType dtype, int64_t *countScale) {
  ncclDataType_t type;
  if (nativeNcclType(dtype, &type)) {
    *countScale = 1;
    return type;
  }
  *countScale = dtypeSize(dtype);
  return ncclUint8;
}

const char *ncclDataTypeName(ncclDataType_t type) {
  switch (type) {
  case ncclInt8: return "ncclInt8";
  case ncclUint8: return "ncclUint8";
  case ncclInt32: return "ncclInt32";
  case ncclUint32: return "ncclUint32";
  case ncclInt64: return "ncclInt64";
  case ncclUint64: return "ncclUint64";
  case ncclFloat16: return "ncclFloat16";
  case ncclFloat32: return "ncclFloat32";
  case ncclFloat64: return "ncclFloat64";
  case ncclBfloat16: return "ncclBfloat16";
  default: return "ncclDataType?";
  }
}

} // namespace dtcc::runtime::cuda
