//===- CudaAttention.cpp - factories of attention and its gradient --------===//
//
// attention and attention_grad are checked by the CPU backend's plan
// (cpu/AttentionPlan.h: same checks, same messages); the gradient requests
// its rowsum(dout * out) buffer as the compute scratch runtime/exec/
// CudaScratch.h assigns it. The closures only launch on the compute stream
// (AttentionKernels.cu).
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/AttentionPlan.h"
#include "runtime/device/cuda/CudaDevice.h"
#include "runtime/device/cuda/CudaFactory.h"

namespace dtcc::runtime::cuda {
namespace {

using cpu::AttentionShape;
using cpu::errorPrefix;

static_assert(kAttentionMaxHeadDim == cpu::kCudaAttentionMaxHeadDim,
              "the compiler fuses what the kernels take");
static_assert(kAttentionTensorCoreMaxHeadDim ==
                  cpu::kCudaAttentionTensorCoreMaxHeadDim,
              "the planner prices the kernels that run");

/// The plan as the kernels take it; errors for what they do not take.
StatusOr<AttentionDims> dimsOf(const KernelContext &ctx,
                               const AttentionShape &p) {
  DTCC_RETURN_IF_ERROR(requireCudaFloat(ctx, p.dtype));
  if (std::max(p.d, p.dv) > kAttentionMaxHeadDim)
    return unimplemented(errorPrefix(ctx),
                         "the CUDA attention kernels take head dimensions of "
                         "up to ", kAttentionMaxHeadDim, ", got ",
                         std::max(p.d, p.dv));
  AttentionDims a;
  a.batch = p.batch;
  a.sq = p.sq;
  a.sk = p.sk;
  a.d = p.d;
  a.dv = p.dv;
  a.scale = p.scale;
  a.causal = p.causal;
  if (!p.hasMask)
    return a;
  if (p.lead.size() > size_t(kAttentionMaxLead))
    return unimplemented(errorPrefix(ctx), "the CUDA attention kernels take "
                         "masks of up to ", kAttentionMaxLead,
                         " leading dimensions, got ", p.lead.size());
  a.lead = int(p.lead.size());
  for (size_t i = 0; i < p.lead.size(); ++i) {
    a.leadSize[i] = p.lead[i];
    a.maskLead[i] = p.maskLead[i];
  }
  a.maskRow = p.maskRow;
  a.maskCol = p.maskCol;
  return a;
}

StatusOr<KernelFn> buildAttention(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(AttentionShape p, cpu::planAttention(ctx));
  DTCC_ASSIGN_OR_RETURN(AttentionDims a, dimsOf(ctx, p));
  const void *q = ctx.inputs[0].data, *k = ctx.inputs[1].data,
             *v = ctx.inputs[2].data;
  const void *mask = p.hasMask ? ctx.inputs[3].data : nullptr;
  void *out = ctx.outputs[0].data;
  float *lse = ctx.outputs[1].as<float>();
  const DType dtype = p.dtype;
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    return launched(prefix,
                    launchAttention(dtype, a, q, k, v, mask, out, lse, st));
  });
}

StatusOr<KernelFn> buildAttentionGrad(CudaDevice &dev,
                                      const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(AttentionShape p, cpu::planAttentionGrad(ctx));
  DTCC_ASSIGN_OR_RETURN(AttentionDims a, dimsOf(ctx, p));
  // rowsum(dout * out) per query row, in the accumulator type.
  const int64_t acc = p.dtype == DType::kF64 ? 8 : 4;
  DTCC_ASSIGN_OR_RETURN(
      ScratchSlot rowDot,
      requestScratchOf(ctx, ScratchUse::kCompute, p.batch * p.sq * acc));
  const void *q = ctx.inputs[0].data, *k = ctx.inputs[1].data,
             *v = ctx.inputs[2].data, *o = ctx.inputs[3].data,
             *dout = ctx.inputs[5].data;
  const float *lse = ctx.inputs[4].as<const float>();
  const void *mask = p.hasMask ? ctx.inputs[6].data : nullptr;
  void *dq = ctx.outputs[0].data, *dk = ctx.outputs[1].data,
       *dv = ctx.outputs[2].data;
  const DType dtype = p.dtype;
  const bool needsScratch = p.batch * p.sq > 0;
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    if (needsScratch && !rowDot.get())
      return unreserved(prefix);
    return launched(prefix, launchAttentionGrad(dtype, a, q, k, v, o, lse,
                                                dout, mask, dq, dk, dv,
                                                rowDot.get(), st));
  });
}

} // namespace

void registerCudaAttentionKernels(KernelRegistry &registry,
                                  CudaDevice &device) {
  CudaDevice *d = &device;
  registry.add("attention", [d](const KernelContext &ctx) {
    return buildAttention(*d, ctx);
  });
  registry.add("attention_grad", [d](const KernelContext &ctx) {
    return buildAttentionGrad(*d, ctx);
  });
}

} // namespace dtcc::runtime::cuda
