//===- CudaAttention.cpp - factories of attention and its gradient --------===//
//
// attention and attention_grad are checked by the CPU backend's plan
// (cpu/AttentionPlan.h: same checks, same messages) and request the compute
// scratch runtime/exec/CudaScratch.h assigns them: the gradient's
// rowsum(dout * out) buffer, then cuDNN's workspace where cuDNN takes the
// call. Such a call runs on cuDNN's fused flash attention
// (CudnnAttention.cpp) when cuDNN finds an engine within that workspace,
// otherwise on dtcc's own kernels (AttentionKernels.cu,
// AttentionTensorCores.cu). DTCC_CUDA_ATTENTION=own keeps every call on
// dtcc's kernels; DTCC_CUDA_ATTENTION=cudnn makes a call cuDNN should take
// but cannot an error instead of a fallback. The closures only launch on
// the compute stream.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/AttentionPlan.h"
#include "runtime/device/cuda/CudaDevice.h"
#include "runtime/device/cuda/CudaFactory.h"
#ifdef DTCC_HAVE_CUDNN
#include "runtime/device/cuda/CudnnAttention.h"
#include "runtime/device/cuda/CudnnCommon.h"
#endif

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <tuple>

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

/// The scratch runtime/exec/CudaScratch.h assigns `ctx`: the gradient's
/// rowsum(dout * out) buffer (`rowBytes`, 0 for the forward), then cuDNN's
/// workspace if any.
struct AttentionScratch {
  ScratchSlot rowDot, workspace;
  int64_t workspaceBytes = 0;
};
StatusOr<AttentionScratch> requestAttentionScratch(const KernelContext &ctx,
                                                   int64_t rowBytes) {
  DTCC_ASSIGN_OR_RETURN(ScratchSet set, cudaKernelScratch(ctx));
  const size_t rows = rowBytes > 0 ? 1 : 0;
  const bool agree =
      set.size() >= rows && set.size() <= rows + 1 &&
      (rows == 0 || set[0].bytes == rowBytes);
  if (!agree)
    return internalError(cpu::errorPrefix(ctx),
                         "runtime/exec/CudaScratch.h and the kernel disagree "
                         "on its scratch (", rowBytes, " bytes of rows)");
  AttentionScratch out;
  if (set.empty())
    return out;
  out.workspaceBytes = set.size() > rows ? set.back().bytes : 0;
  DTCC_ASSIGN_OR_RETURN(std::vector<ScratchSlot> slots,
                        ctx.requestScratch(std::move(set)));
  if (rows)
    out.rowDot = slots[0];
  if (out.workspaceBytes > 0)
    out.workspace = slots.back();
  return out;
}

#ifdef DTCC_HAVE_CUDNN
/// The device's cuDNN attention: its handle, made at the first call cuDNN
/// takes, and the plans made so far, one per distinct call and workspace
/// (a model's layers share theirs; a plan holds no buffers), cuDNN's
/// refusals included.
struct CudnnAttentionState {
  using Key = std::tuple<DType, int64_t, int64_t, int64_t, int64_t, double,
                         bool, bool, int64_t>;
  struct Made {
    std::shared_ptr<CudnnAttentionPlan> plan;
    Status refused = Status::ok();
  };
  CudnnHandle handle;
  std::map<Key, Made> plans;
};

/// cuDNN's plan of the call, or null where dtcc's own kernels run it
/// (DTCC_CUDA_ATTENTION=own, a call cuDNN is not asked for, or one it
/// refuses; DTCC_CUDA_ATTENTION=cudnn makes a refusal an error).
StatusOr<std::shared_ptr<CudnnAttentionPlan>>
cudnnPlanFor(CudaDevice &dev, CudnnAttentionState &state,
             const KernelContext &ctx, const AttentionShape &p,
             const AttentionScratch &scratch, bool backward) {
  const char *env = std::getenv("DTCC_CUDA_ATTENTION");
  const bool own = env && std::strcmp(env, "own") == 0;
  const bool required = env && std::strcmp(env, "cudnn") == 0;
  if (own || scratch.workspaceBytes == 0)
    return std::shared_ptr<CudnnAttentionPlan>();
  DTCC_RETURN_IF_ERROR(state.handle.ensure(dev.computeStream()));
  CudnnAttentionCall call;
  call.dtype = p.dtype;
  call.batch = p.batch;
  call.sq = p.sq;
  call.sk = p.sk;
  call.d = p.d;
  call.scale = p.scale;
  call.causal = p.causal;
  call.backward = backward;
  const CudnnAttentionState::Key key{call.dtype,   call.batch, call.sq,
                                     call.sk,      call.d,     call.scale,
                                     call.causal,  backward,
                                     scratch.workspaceBytes};
  auto found = state.plans.find(key);
  if (found == state.plans.end()) {
    CudnnAttentionState::Made made;
    auto plan = planCudnnAttention(state.handle.handle, call,
                                   scratch.workspaceBytes);
    if (plan.isOk())
      made.plan = plan.value();
    else
      made.refused = plan.status();
    found = state.plans.emplace(key, std::move(made)).first;
  }
  if (found->second.plan)
    return found->second.plan;
  if (required)
    return found->second.refused.withContext(errorPrefix(ctx) +
                                             "DTCC_CUDA_ATTENTION=cudnn");
  return std::shared_ptr<CudnnAttentionPlan>();
}
#endif

StatusOr<KernelFn> buildAttention(CudaDevice &dev,
                                  const std::shared_ptr<void> &cudnn,
                                  const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(AttentionShape p, cpu::planAttention(ctx));
  DTCC_ASSIGN_OR_RETURN(AttentionDims a, dimsOf(ctx, p));
  DTCC_ASSIGN_OR_RETURN(AttentionScratch scratch,
                        requestAttentionScratch(ctx, 0));
  const void *q = ctx.inputs[0].data, *k = ctx.inputs[1].data,
             *v = ctx.inputs[2].data;
  const void *mask = p.hasMask ? ctx.inputs[3].data : nullptr;
  void *out = ctx.outputs[0].data;
  float *lse = ctx.outputs[1].as<float>();
  const DType dtype = p.dtype;
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
#ifdef DTCC_HAVE_CUDNN
  auto state = std::static_pointer_cast<CudnnAttentionState>(cudnn);
  DTCC_ASSIGN_OR_RETURN(auto plan,
                        cudnnPlanFor(dev, *state, ctx, p, scratch, false));
  if (plan) {
    const ScratchSlot ws = scratch.workspace;
    return KernelFn([=]() -> Status {
      if (workspaceBytes(*plan) > 0 && !ws.get())
        return unreserved(prefix);
      return runCudnnAttention(state->handle.handle, *plan, q, k, v, out, lse,
                               ws.get())
          .withContext(prefix);
    });
  }
#else
  (void)cudnn;
#endif
  return KernelFn([=] {
    return launched(prefix,
                    launchAttention(dtype, a, q, k, v, mask, out, lse, st));
  });
}

StatusOr<KernelFn> buildAttentionGrad(CudaDevice &dev,
                                      const std::shared_ptr<void> &cudnn,
                                      const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(AttentionShape p, cpu::planAttentionGrad(ctx));
  DTCC_ASSIGN_OR_RETURN(AttentionDims a, dimsOf(ctx, p));
  // rowsum(dout * out) per query row, in the accumulator type.
  const int64_t acc = p.dtype == DType::kF64 ? 8 : 4;
  DTCC_ASSIGN_OR_RETURN(AttentionScratch scratch,
                        requestAttentionScratch(ctx, p.batch * p.sq * acc));
  const ScratchSlot rowDot = scratch.rowDot;
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
#ifdef DTCC_HAVE_CUDNN
  auto state = std::static_pointer_cast<CudnnAttentionState>(cudnn);
  DTCC_ASSIGN_OR_RETURN(auto plan,
                        cudnnPlanFor(dev, *state, ctx, p, scratch, true));
  if (plan) {
    const ScratchSlot ws = scratch.workspace;
    return KernelFn([=]() -> Status {
      if (!rowDot.get() || (workspaceBytes(*plan) > 0 && !ws.get()))
        return unreserved(prefix);
      return runCudnnAttentionGrad(state->handle.handle, *plan, q, k, v, o,
                                   lse,
                                   dout, dq, dk, dv, rowDot.as<float>(),
                                   ws.get())
          .withContext(prefix);
    });
  }
#else
  (void)cudnn;
#endif
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
  // The device's cuDNN attention (handle and plans), shared by the calls.
#ifdef DTCC_HAVE_CUDNN
  std::shared_ptr<void> cudnn = std::make_shared<CudnnAttentionState>();
#else
  std::shared_ptr<void> cudnn;
#endif
  registry.add("attention", [d, cudnn](const KernelContext &ctx) {
    return buildAttention(*d, cudnn, ctx);
  });
  registry.add("attention_grad", [d, cudnn](const KernelContext &ctx) {
    return buildAttentionGrad(*d, cudnn, ctx);
  });
}

} // namespace dtcc::runtime::cuda
