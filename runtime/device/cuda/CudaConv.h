//===- CudaConv.h - convolutions on cuDNN ----------------------*- C++ -*-===//
//
// conv, conv_input_grad and conv_filter_grad (GraphConvOps.td) on cuDNN 9's
// convolution API: descriptors and algorithms (cuDNN's heuristics,
// preferring deterministic ones, within the workspace cap of
// runtime/exec/CudaScratch.h) are chosen when a kernel is bound, so a step
// only launches. The host-side part (the descriptors' plan in
// CudnnConvPlan.h, the dtype table here) is testable without a GPU; the
// kernels are in CudaConv.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CUDA_CUDACONV_H
#define DTCC_RUNTIME_DEVICE_CUDA_CUDACONV_H

#include "runtime/base/DType.h"
#include "runtime/base/Status.h"
#include "runtime/device/cuda/CudnnConvPlan.h"

#include <cudnn.h>

namespace dtcc::runtime {
class KernelRegistry;

namespace cuda {
class CudaDevice;

/// The cuDNN types of a convolution on `dtype`: the tensors' data type, the
/// accumulation type and the math mode. f32 accumulates in f32 without TF32
/// (CUDNN_FMA_MATH) unless `allowTf32`; f16 and bf16 accumulate in f32 on
/// tensor cores; f64 in f64. Other dtypes: unimplemented, naming the dtype.
struct CudnnConvTypes {
  cudnnDataType_t data;
  cudnnDataType_t compute;
  cudnnMathType_t math;
  bool doubleScale; ///< alpha and beta are double (f64), else float
};
StatusOr<CudnnConvTypes> cudnnConvTypes(DType dtype, bool allowTf32 = false);

/// Registers conv, conv_input_grad and conv_filter_grad for `device`
/// (CudaConv.cpp); called by registerCudaKernels when cuDNN was found.
void registerCudaConvKernels(KernelRegistry &registry, CudaDevice &device);

} // namespace cuda
} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_DEVICE_CUDA_CUDACONV_H
