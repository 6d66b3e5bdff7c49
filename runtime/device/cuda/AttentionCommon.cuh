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

/// The element offset of batch index b for `strides` over the merged
/// leading dimensions. The outermost one takes no remainder (b is below
/// the sizes' product), so contiguous operands, which have one leading
/// dimension, cost the old b * stride. b is below a launch's block count,
/// as is every leading size, so 32-bit division takes it apart (64-bit
/// division is a long subroutine).
__device__ __forceinline__ int64_t
attentionOffset(const AttentionDims &a,
                const int64_t (&strides)[kAttentionMaxLead], int64_t b) {
  uint32_t rest = uint32_t(b);
  int64_t off = 0;
  for (int i = a.lead - 1; i > 0; --i) {
    const uint32_t size = uint32_t(a.leadSize[i]);
    const uint32_t outer = rest / size;
    off += int64_t(rest - outer * size) * strides[i];
    rest = outer;
  }
  return a.lead > 0 ? off + int64_t(rest) * strides[0] : off;
}

/// The mask's element offset of batch index b (its leading dimensions
/// broadcast by zero strides).
__device__ __forceinline__ int64_t attentionMaskBase(const AttentionDims &a,
                                                     int64_t b) {
  return attentionOffset(a, a.maskLead, b);
}

/// Sets base[i] to batch index b's offset in the operand laid out as
/// *rows[i] (the block's first thread computes them) and waits for the
/// block (every thread calls it). The kernels read an operand's offset
/// from there where they address it: held in registers through their
/// loops, the offsets made the SIMT forward spill and cost some tensor-core
/// gradients a block per multiprocessor.
template <int N>
__device__ __forceinline__ void
attentionBases(const AttentionDims &a,
               const AttentionLayout *const (&rows)[N], int64_t b,
               int64_t (&base)[N]) {
  if (threadIdx.x == 0) {
#pragma unroll
    for (int i = 0; i < N; ++i)
      base[i] = attentionOffset(a, rows[i]->lead, b);
  }
  __syncthreads();
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
