//===- NormPoolLaunch.h - launches of the norm and pool CUDA kernels -*- C++ -*-===//
//
// The boundary between the factories of batch/group normalization and
// pooling (CudaNormPoolKernels.cpp) and their kernels (NormPoolKernels.cu),
// plus the host-side arithmetic they share. Pointers are device memory; the
// factories check everything (cpu/NormPoolPlans.h) at load time.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CUDA_NORMPOOLLAUNCH_H
#define DTCC_RUNTIME_DEVICE_CUDA_NORMPOOLLAUNCH_H

#include "runtime/device/cuda/CudaLaunch.h"

#include <cstdint>

namespace dtcc::runtime {
class KernelRegistry;
} // namespace dtcc::runtime

namespace dtcc::runtime::cuda {

class CudaDevice;

/// Registers the kernels below into `registry` (called by
/// registerCudaKernels).
void registerCudaNormPoolKernels(KernelRegistry &registry, CudaDevice &device);

/// An [N, C, d...] tensor as [batch, channels, spatial].
struct ChannelDims {
  int64_t batch = 0, channels = 0, spatial = 0;
};

/// batch_norm_stats (`grad` false: sums of x - center and its square) or
/// batch_norm_grad_stats (`grad` true: sums of dy and dy (x - center)) into
/// out [2, C]. `partials` is double scratch of 2 * C * slices elements
/// (slices: cudaBatchNormSlices, runtime/exec/CudaScratch.h).
cudaError_t launchBatchNormSums(bool grad, DType dtype, const void *x,
                                const void *center, const void *dy, void *out,
                                ChannelDims d, double *partials, int64_t slices,
                                cudaStream_t stream);
/// batch_norm: y = (x - mean) * scale / sqrt(var + eps) + bias.
cudaError_t launchBatchNorm(DType dtype, const void *x, const void *scale,
                            const void *bias, const void *mean, const void *var,
                            void *y, ChannelDims d, double eps,
                            cudaStream_t stream);
/// batch_norm_grad: dx = (dy - s0 / count - (x - mean) r^2 s1 / count) scale r.
cudaError_t launchBatchNormGrad(DType dtype, const void *x, const void *dy,
                                const void *scale, const void *mean,
                                const void *var, const void *stats, void *dx,
                                ChannelDims d, double eps, int64_t count,
                                cudaStream_t stream);
/// batch_norm_update over `n` channels.
cudaError_t launchBatchNormUpdate(DType dtype, const void *runningMean,
                                  const void *runningVar, const void *mean,
                                  const void *var, void *newMean, void *newVar,
                                  int64_t n, double momentum, double varScale,
                                  cudaStream_t stream);
/// group_norm: y, mean [N, G], rstd [N, G].
cudaError_t launchGroupNorm(DType dtype, const void *x, const void *scale,
                            const void *bias, void *y, void *mean, void *rstd,
                            ChannelDims d, int64_t perGroup, double eps,
                            cudaStream_t stream);
/// group_norm_grad: dx, dscale, dbias.
cudaError_t launchGroupNormGrad(DType dtype, const void *x, const void *scale,
                                const void *mean, const void *rstd,
                                const void *dy, void *dx, void *dscale,
                                void *dbias, ChannelDims d, int64_t perGroup,
                                cudaStream_t stream);

/// A pooling window over three spatial dimensions (fewer are padded at the
/// front with size-1 dimensions), as cpu::PoolPlan.
struct PoolWindow {
  int64_t planes = 0;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  int64_t kernel[3] = {1, 1, 1}, stride[3] = {1, 1, 1},
          dilation[3] = {1, 1, 1};
  int64_t low[3] = {0, 0, 0}, high[3] = {0, 0, 0};
  bool countIncludePad = false;
};

/// max_pool: y and the plane position of each maximum (f32, f16, bf16,
/// f64, i8, u8).
cudaError_t launchMaxPool(DType dtype, const void *x, void *y,
                          int64_t *indices, const PoolWindow &w,
                          cudaStream_t stream);
/// max_pool_grad: dx = 0, then dy added at the indices (atomically; f16 and
/// bf16 through `scratch`, float of dx's numel). An index past its plane
/// is recorded in `error` at `site`.
cudaError_t launchMaxPoolGrad(DType dtype, const void *dy,
                              const int64_t *indices, void *dx, float *scratch,
                              int64_t planes, int64_t inPlane, int64_t outPlane,
                              DeviceError *error, int32_t site,
                              cudaStream_t stream);
/// avg_pool, and its gradient gathered per input element (deterministic).
cudaError_t launchAvgPool(DType dtype, const void *x, void *y,
                          const PoolWindow &w, cudaStream_t stream);
cudaError_t launchAvgPoolGrad(DType dtype, const void *dy, void *dx,
                              const PoolWindow &w, cudaStream_t stream);

} // namespace dtcc::runtime::cuda

#endif // DTCC_RUNTIME_DEVICE_CUDA_NORMPOOLLAUNCH_H
