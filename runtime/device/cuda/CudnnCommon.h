//===- CudnnCommon.h - cuDNN errors and the device's handle ----*- C++ -*-===//
//
// What the cuDNN kernels (CudaConv.cpp, CudnnAttention.cpp) share: a Status
// from a failing call with cuDNN's own last error string, and the handle a
// family of kernels makes at its first bind, on the device's compute stream.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CUDA_CUDNNCOMMON_H
#define DTCC_RUNTIME_DEVICE_CUDA_CUDNNCOMMON_H

#include "runtime/base/Status.h"

#include <cuda_runtime_api.h>
#include <cudnn.h>

namespace dtcc::runtime::cuda {

/// "cuDNN error CUDNN_STATUS_... in <call> at file:line: <last error>".
inline Status cudnnError(cudnnStatus_t s, const char *call, const char *file,
                         int line) {
  char detail[512] = {};
  cudnnGetLastErrorString(detail, sizeof(detail));
  return internalError("cuDNN error ", cudnnGetErrorString(s), " in ", call,
                       " at ", file, ":", line,
                       detail[0] ? strCat(": ", detail) : std::string());
}

/// A cuDNN handle on `stream`, made when first asked for.
struct CudnnHandle {
  cudnnHandle_t handle = nullptr;
  CudnnHandle() = default;
  CudnnHandle(const CudnnHandle &) = delete;
  CudnnHandle &operator=(const CudnnHandle &) = delete;
  ~CudnnHandle() {
    if (handle)
      cudnnDestroy(handle);
  }
  Status ensure(cudaStream_t stream);
};

} // namespace dtcc::runtime::cuda

#define DTCC_CUDNN_CHECK(call)                                                 \
  do {                                                                         \
    cudnnStatus_t _dtcc_s = (call);                                            \
    if (_dtcc_s != CUDNN_STATUS_SUCCESS)                                       \
      return ::dtcc::runtime::cuda::cudnnError(_dtcc_s, #call, __FILE__,       \
                                               __LINE__);                      \
  } while (0)

inline dtcc::runtime::Status
dtcc::runtime::cuda::CudnnHandle::ensure(cudaStream_t stream) {
  if (handle)
    return Status::ok();
  DTCC_CUDNN_CHECK(cudnnCreate(&handle));
  cudnnStatus_t s = cudnnSetStream(handle, stream);
  if (s != CUDNN_STATUS_SUCCESS) {
    // A handle kept without its stream would pass the next ensure and run
    // on the legacy default stream, unordered with the compute stream.
    Status error = ::dtcc::runtime::cuda::cudnnError(s, "cudnnSetStream",
                                                     __FILE__, __LINE__);
    cudnnDestroy(handle);
    handle = nullptr;
    return error;
  }
  return Status::ok();
}

#endif // DTCC_RUNTIME_DEVICE_CUDA_CUDNNCOMMON_H
