//===- AttentionCommon.cuh - what the attention kernels share ---*- CUDA -*-===//
//
// Shared by the two families of attention kernels: the SIMT ones of
// AttentionKernels.cu (every float type, head dimensions up to 512) and the
// tensor-core ones of AttentionTensorCores.cu (f16 and bf16, head
// dimensions up to kAttentionTensorCoreMaxHeadDim), which launchAttention and
// launchAttentionGrad pick between.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CUDA_ATTENTIONCOMMON_CUH
#define DTCC_RUNTIME_DEVICE_CUDA_ATTENTIONCOMMON_CUH

#include "runtime/device/cuda/CudaLaunch.h"

namespace dtcc::runtime::cuda {

/// The mask's element offset of batch index b (its leading dimensions
/// broadcast by zero strides).
__device__ __forceinline__ int64_t attentionMaskBase(const AttentionDims &a,
                                                     int64_t b) {
  int64_t off = 0;
  for (int i = a.lead - 1; i >= 0; --i) {
    off += (b % a.leadSize[i]) * a.maskLead[i];
    b /= a.leadSize[i];
  }
  return off;
}

/// Whether attention of `dtype` and these shapes runs on the tensor cores:
/// f16 and bf16 operands, head dimensions up to
/// kAttentionTensorCoreMaxHeadDim.
bool attentionOnTensorCores(DType dtype, const AttentionDims &dims);

/// attention on the tensor cores (attentionOnTensorCores must hold): as
/// launchAttention.
cudaError_t launchAttentionTensorCores(DType dtype, const AttentionDims &dims,
                                       const void *q, const void *k,
                                       const void *v, const void *mask,
                                       void *out, float *lse,
                                       cudaStream_t stream);

/// attention_grad's dq, dk and dv on the tensor cores, given rowDot
/// (rowsum(dout * out) per query row, floats) as launchAttentionGrad makes
/// it.
cudaError_t launchAttentionGradTensorCores(
    DType dtype, const AttentionDims &dims, const void *q, const void *k,
    const void *v, const float *lse, const void *dout, const void *mask,
    const float *rowDot, void *dq, void *dk, void *dv, cudaStream_t stream);

} // namespace dtcc::runtime::cuda

#endif // DTCC_RUNTIME_DEVICE_CUDA_ATTENTIONCOMMON_CUH
