//===- CudaNormPoolKernels.cpp - factories of the norm and pool kernels ---===//
//
// Each factory checks its instruction with the CPU backend's plan
// (cpu/NormPoolPlans.h: same checks, same messages), requests the compute
// scratch runtime/exec/CudaScratch.h says it needs (the batch-norm sums'
// partials, max_pool_grad's float accumulator for halves), and returns a
// closure that only launches on the compute stream.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/CpuKernelUtils.h"
#include "runtime/device/cpu/NormPoolPlans.h"
#include "runtime/device/cuda/CudaDevice.h"
#include "runtime/device/cuda/CudaFactory.h"
#include "runtime/device/cuda/NormPoolLaunch.h"
#include "runtime/exec/CudaScratch.h"

namespace dtcc::runtime::cuda {
namespace {

using cpu::ChannelPlan;
using cpu::errorPrefix;
using cpu::PoolPlan;

ChannelDims dimsOf(const ChannelPlan &p) {
  return {p.batch, p.channels, p.spatial};
}

PoolWindow windowOf(const PoolPlan &p) {
  PoolWindow w;
  w.planes = p.planes;
  for (int d = 0; d < 3; ++d) {
    w.in[d] = p.in[d];
    w.out[d] = p.out[d];
    w.kernel[d] = p.kernel[d];
    w.stride[d] = p.stride[d];
    w.dilation[d] = p.dilation[d];
    w.low[d] = p.low[d];
    w.high[d] = p.high[d];
  }
  w.countIncludePad = p.countIncludePad;
  return w;
}

/// batch_norm_stats and batch_norm_grad_stats: double partial sums per
/// (channel, slice) in scratch, then a per-channel finish.
template <bool Grad>
StatusOr<KernelFn> buildBatchNormSums(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(ChannelPlan p, Grad ? cpu::planBatchNormGradStats(ctx)
                                            : cpu::planBatchNormStats(ctx));
  DTCC_RETURN_IF_ERROR(requireCudaFloat(ctx, p.dtype));
  const int64_t slices = cudaBatchNormSlices(p.channels, p.batch * p.spatial);
  DTCC_ASSIGN_OR_RETURN(
      ScratchSlot scratch,
      requestScratchOf(ctx, ScratchUse::kCompute,
                       p.channels > 0
                           ? 2 * p.channels * slices * int64_t(sizeof(double))
                           : 0));
  const void *x = ctx.inputs[0].data, *center = ctx.inputs[1].data;
  const void *dy = Grad ? ctx.inputs[2].data : nullptr;
  void *out = ctx.outputs[0].data;
  const DType dtype = p.dtype;
  const ChannelDims d = dimsOf(p);
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  const bool needsScratch = p.channels > 0;
  return KernelFn([=] {
    if (needsScratch && !scratch.get())
      return unreserved(prefix);
    return launched(prefix, launchBatchNormSums(Grad, dtype, x, center, dy, out,
                                                d, scratch.as<double>(), slices,
                                                st));
  });
}

StatusOr<KernelFn> buildBatchNorm(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(ChannelPlan p, cpu::planBatchNorm(ctx));
  DTCC_RETURN_IF_ERROR(requireCudaFloat(ctx, p.dtype));
  std::vector<const void *> in;
  for (const TensorView &v : ctx.inputs)
    in.push_back(v.data);
  void *y = ctx.outputs[0].data;
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    return launched(prefix, launchBatchNorm(p.dtype, in[0], in[1], in[2], in[3],
                                            in[4], y, dimsOf(p), p.epsilon, st));
  });
}

StatusOr<KernelFn> buildBatchNormGrad(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(ChannelPlan p, cpu::planBatchNormGrad(ctx));
  DTCC_RETURN_IF_ERROR(requireCudaFloat(ctx, p.dtype));
  std::vector<const void *> in;
  for (const TensorView &v : ctx.inputs)
    in.push_back(v.data);
  void *dx = ctx.outputs[0].data;
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    return launched(prefix,
                    launchBatchNormGrad(p.dtype, in[0], in[1], in[2], in[3],
                                        in[4], in[5], dx, dimsOf(p), p.epsilon,
                                        p.count, st));
  });
}

StatusOr<KernelFn> buildBatchNormUpdate(CudaDevice &dev,
                                        const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(ChannelPlan p, cpu::planBatchNormUpdate(ctx));
  DTCC_RETURN_IF_ERROR(requireCudaFloat(ctx, p.dtype));
  std::vector<const void *> in;
  for (const TensorView &v : ctx.inputs)
    in.push_back(v.data);
  void *nm = ctx.outputs[0].data, *nv = ctx.outputs[1].data;
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    return launched(prefix, launchBatchNormUpdate(p.dtype, in[0], in[1], in[2],
                                                  in[3], nm, nv, p.channels,
                                                  p.momentum, p.varScale, st));
  });
}

StatusOr<KernelFn> buildGroupNorm(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(ChannelPlan p, cpu::planGroupNorm(ctx));
  DTCC_RETURN_IF_ERROR(requireCudaFloat(ctx, p.dtype));
  const void *x = ctx.inputs[0].data, *scale = ctx.inputs[1].data,
             *bias = ctx.inputs[2].data;
  void *y = ctx.outputs[0].data, *mean = ctx.outputs[1].data,
       *rstd = ctx.outputs[2].data;
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    return launched(prefix, launchGroupNorm(p.dtype, x, scale, bias, y, mean,
                                            rstd, dimsOf(p), p.perGroup,
                                            p.epsilon, st));
  });
}

StatusOr<KernelFn> buildGroupNormGrad(CudaDevice &dev,
                                      const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(ChannelPlan p, cpu::planGroupNormGrad(ctx));
  DTCC_RETURN_IF_ERROR(requireCudaFloat(ctx, p.dtype));
  std::vector<const void *> in;
  for (const TensorView &v : ctx.inputs)
    in.push_back(v.data);
  void *dx = ctx.outputs[0].data, *ds = ctx.outputs[1].data,
       *db = ctx.outputs[2].data;
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    return launched(prefix,
                    launchGroupNormGrad(p.dtype, in[0], in[1], in[2], in[3],
                                        in[4], dx, ds, db, dimsOf(p),
                                        p.perGroup, st));
  });
}

StatusOr<KernelFn> buildMaxPool(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(PoolPlan p, cpu::planMaxPool(ctx));
  if (p.dtype != DType::kI8 && p.dtype != DType::kU8)
    DTCC_RETURN_IF_ERROR(requireCudaFloat(ctx, p.dtype));
  const void *x = ctx.inputs[0].data;
  void *y = ctx.outputs[0].data;
  int64_t *indices = ctx.outputs[1].as<int64_t>();
  const PoolWindow w = windowOf(p);
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    return launched(prefix, launchMaxPool(p.dtype, x, y, indices, w, st));
  });
}

StatusOr<KernelFn> buildMaxPoolGrad(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(PoolPlan p, cpu::planMaxPoolGrad(ctx));
  DTCC_RETURN_IF_ERROR(requireCudaFloat(ctx, p.dtype));
  DTCC_ASSIGN_OR_RETURN(FloatAccumulator acc, floatAccumulatorOf(ctx, p.dtype));
  const void *dy = ctx.inputs[0].data;
  const int64_t *indices = ctx.inputs[1].as<const int64_t>();
  void *dx = ctx.outputs[0].data;
  const int64_t planes = p.planes, inPlane = p.inPlane(),
                outPlane = p.outPlane();
  const int32_t site =
      dev.registerSite("max_pool_grad at '" + ctx.location + "'");
  DeviceError *error = dev.errorSlot();
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    if (acc.needed && !acc.slot.get())
      return unreserved(prefix);
    return launched(prefix, launchMaxPoolGrad(
                                p.dtype, dy, indices, dx, acc.slot.as<float>(),
                                planes, inPlane, outPlane, error, site, st));
  });
}

template <bool Grad>
StatusOr<KernelFn> buildAvgPool(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(PoolPlan p,
                        Grad ? cpu::planAvgPoolGrad(ctx) : cpu::planAvgPool(ctx));
  DTCC_RETURN_IF_ERROR(requireCudaFloat(ctx, p.dtype));
  const void *in = ctx.inputs[0].data;
  void *out = ctx.outputs[0].data;
  const PoolWindow w = windowOf(p);
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    return launched(prefix, Grad ? launchAvgPoolGrad(p.dtype, in, out, w, st)
                                 : launchAvgPool(p.dtype, in, out, w, st));
  });
}

} // namespace

void registerCudaNormPoolKernels(KernelRegistry &registry, CudaDevice &device) {
  CudaDevice *d = &device;
  auto add = [&](const char *name, auto build) {
    registry.add(name, [d, build](const KernelContext &ctx) {
      return build(*d, ctx);
    });
  };
  add("batch_norm_stats", buildBatchNormSums<false>);
  add("batch_norm_grad_stats", buildBatchNormSums<true>);
  add("batch_norm", buildBatchNorm);
  add("batch_norm_grad", buildBatchNormGrad);
  add("batch_norm_update", buildBatchNormUpdate);
  add("group_norm", buildGroupNorm);
  add("group_norm_grad", buildGroupNormGrad);
  add("max_pool", buildMaxPool);
  add("max_pool_grad", buildMaxPoolGrad);
  add("avg_pool", buildAvgPool<false>);
  add("avg_pool_grad", buildAvgPool<true>);
}

} // namespace dtcc::runtime::cuda
