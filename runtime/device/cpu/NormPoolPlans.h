//===- NormPoolPlans.h - checked shapes of the norm and pool kernels -*- C++ -*-===//
//
// The factories of batch/group normalization and pooling on every backend
// check an instruction with these functions (same messages on the CPU and
// CUDA) and get back the loop bounds the kernels run.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CPU_NORMPOOLPLANS_H
#define DTCC_RUNTIME_DEVICE_CPU_NORMPOOLPLANS_H

#include "runtime/exec/Kernel.h"

#include <cstdint>

namespace dtcc::runtime::cpu {

/// An `[N, C, d...]` tensor seen as `[batch, channels, spatial]`.
struct ChannelPlan {
  int64_t batch = 0, channels = 0, spatial = 0;
  DType dtype = DType::kInvalid;
  double epsilon = 0;
  /// batch_norm_grad: the per-channel count of the whole batch.
  int64_t count = 1;
  /// batch_norm_update.
  double momentum = 0, varScale = 1;
  /// group_norm(_grad): channels per group.
  int64_t perGroup = 1;

  int64_t groups() const { return channels / perGroup; }
};

/// batch_norm_stats: x [N, C, d...], shift [C] -> [2, C].
StatusOr<ChannelPlan> planBatchNormStats(const KernelContext &ctx);
/// batch_norm: x, scale, bias, mean, var -> y; epsilon.
StatusOr<ChannelPlan> planBatchNorm(const KernelContext &ctx);
/// batch_norm_update: running mean and var, mean, var -> new mean, new var
/// (all [C]); momentum, var_scale.
StatusOr<ChannelPlan> planBatchNormUpdate(const KernelContext &ctx);
/// batch_norm_grad_stats: x, mean [C], dy -> [2, C].
StatusOr<ChannelPlan> planBatchNormGradStats(const KernelContext &ctx);
/// batch_norm_grad: x, dy, scale, mean, var, stats [2, C] -> dx; epsilon,
/// count.
StatusOr<ChannelPlan> planBatchNormGrad(const KernelContext &ctx);
/// group_norm: x, scale, bias -> y, mean [N, G], rstd [N, G];
/// channels_per_group, epsilon.
StatusOr<ChannelPlan> planGroupNorm(const KernelContext &ctx);
/// group_norm_grad: x, scale, mean, rstd, dy -> dx, dscale, dbias.
StatusOr<ChannelPlan> planGroupNormGrad(const KernelContext &ctx);

constexpr int kMaxPoolDims = 3;

/// A pooling window over up to three spatial dimensions; fewer are padded
/// at the front with dimensions of size 1 (kernel 1, no padding).
struct PoolPlan {
  int64_t planes = 0; ///< N * C
  int64_t in[kMaxPoolDims] = {1, 1, 1}, out[kMaxPoolDims] = {1, 1, 1};
  int64_t kernel[kMaxPoolDims] = {1, 1, 1}, stride[kMaxPoolDims] = {1, 1, 1};
  int64_t dilation[kMaxPoolDims] = {1, 1, 1};
  int64_t low[kMaxPoolDims] = {0, 0, 0}, high[kMaxPoolDims] = {0, 0, 0};
  bool countIncludePad = false;
  DType dtype = DType::kInvalid;

  int64_t inPlane() const { return in[0] * in[1] * in[2]; }
  int64_t outPlane() const { return out[0] * out[1] * out[2]; }
  /// avg_pool's divisor of output (o0, o1, o2).
  int64_t divisor(int64_t o0, int64_t o1, int64_t o2) const;
};

/// The output size along one dimension (dgraph.max_pool's formula, ceil
/// mode with PyTorch's rule for a window starting in the high padding).
int64_t poolOutputSize(int64_t size, int64_t kernel, int64_t stride,
                       int64_t dilation, int64_t low, int64_t high,
                       bool ceilMode);

/// max_pool: x -> y, indices (i64); avg_pool: x -> y.
StatusOr<PoolPlan> planMaxPool(const KernelContext &ctx);
StatusOr<PoolPlan> planAvgPool(const KernelContext &ctx);
/// max_pool_grad: dy, indices -> dx (no window attributes: the plan has the
/// plane sizes only).
StatusOr<PoolPlan> planMaxPoolGrad(const KernelContext &ctx);
/// avg_pool_grad: dy -> dx.
StatusOr<PoolPlan> planAvgPoolGrad(const KernelContext &ctx);

} // namespace dtcc::runtime::cpu

#endif // DTCC_RUNTIME_DEVICE_CPU_NORMPOOLPLANS_H
