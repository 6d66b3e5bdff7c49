//===- CudaCheck.h - Status from CUDA, cuBLASLt and NCCL errors -*- C++ -*-===//
//
// Check macros that keep the file, the line, the failing call and the
// library's own error string, as nccl-tests' CUDACHECK/NCCLCHECK do.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CUDA_CUDACHECK_H
#define DTCC_RUNTIME_DEVICE_CUDA_CUDACHECK_H

#include "runtime/base/Status.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

namespace dtcc::runtime::cuda {

/// "CUDA error cudaErrorMemoryAllocation (out of memory) in <call> at
/// file:line".
Status cudaStatus(cudaError_t err, const char *call, const char *file,
                  int line);
Status cublasStatus(cublasStatus_t err, const char *call, const char *file,
                    int line);
/// Includes ncclGetLastError(comm) (NCCL's detailed message) when given.
Status ncclStatus(ncclResult_t err, ncclComm_t comm, const char *call,
                  const char *file, int line);

} // namespace dtcc::runtime::cuda

#define DTCC_CUDA_CHECK(call)                                                  \
  do {                                                                         \
    cudaError_t _dtcc_err = (call);                                            \
    if (_dtcc_err != cudaSuccess)                                              \
      return ::dtcc::runtime::cuda::cudaStatus(_dtcc_err, #call, __FILE__,     \
                                               __LINE__);                      \
  } while (0)

#define DTCC_CUBLAS_CHECK(call)                                                \
  do {                                                                         \
    cublasStatus_t _dtcc_err = (call);                                         \
    if (_dtcc_err != CUBLAS_STATUS_SUCCESS)                                    \
      return ::dtcc::runtime::cuda::cublasStatus(_dtcc_err, #call, __FILE__,   \
                                                 __LINE__);                    \
  } while (0)

#define DTCC_NCCL_CHECK(comm, call)                                            \
  do {                                                                         \
    ncclResult_t _dtcc_err = (call);                                           \
    if (_dtcc_err != ncclSuccess && _dtcc_err != ncclInProgress)               \
      return ::dtcc::runtime::cuda::ncclStatus(_dtcc_err, (comm), #call,       \
                                               __FILE__, __LINE__);            \
  } while (0)

#endif // DTCC_RUNTIME_DEVICE_CUDA_CUDACHECK_H
