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
// Query, key, value, the output and the gradients may be strided views
// (the plan's AttentionRows). Both kernels take them as strides over the
// leading dimensions, neighbours merged where every operand allows: one
// dimension for contiguous operands, whose addressing is the old one;
// cuDNN takes up to two (its b and h) whose strides are 16-byte multiples,
// and other layouts run on dtcc's kernels.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/AttentionPlan.h"
#include "runtime/device/cuda/CudaDevice.h"
#include "runtime/device/cuda/CudaFactory.h"
#ifdef DTCC_HAVE_CUDNN
#include "runtime/device/cuda/CudnnAttention.h"
#include "runtime/device/cuda/CudnnCommon.h"
#endif

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

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
  a.maskRow = p.maskRow;
  a.maskCol = p.maskCol;
  // The operands the call has: attention's plan leaves dout and the
  // gradients unset, without leading strides (at rank 2 they pass with
  // row 0, and no kernel of the call reads them).
  std::vector<std::pair<const cpu::AttentionRows *, AttentionLayout *>> ops;
  for (auto [rows, layout] :
       {std::pair(&p.rows.q, &a.rows.q), std::pair(&p.rows.k, &a.rows.k),
        std::pair(&p.rows.v, &a.rows.v), std::pair(&p.rows.o, &a.rows.o),
        std::pair(&p.rows.dout, &a.rows.dout),
        std::pair(&p.rows.dq, &a.rows.dq), std::pair(&p.rows.dk, &a.rows.dk),
        std::pair(&p.rows.dv, &a.rows.dv)})
    if (rows->lead.size() == p.lead.size()) {
      ops.emplace_back(rows, layout);
      layout->row = rows->row;
    }
  // Leading dimension i joins the one before when the mask and every
  // operand step over that one as over all of i (a dimension of size 1
  // reaches one index and drops out), so the kernels take a batch index
  // apart by as few dimensions as the layouts allow.
  int dims = 0;
  for (size_t i = 0; i < p.lead.size(); ++i) {
    const int64_t size = p.lead[i];
    if (size == 1)
      continue;
    bool joins = dims > 0 && a.maskLead[dims - 1] == size * p.maskLead[i];
    for (const auto &[rows, layout] : ops)
      joins = joins && layout->lead[dims - 1] == size * rows->lead[i];
    if (!joins && dims == kAttentionMaxLead)
      return unimplemented(errorPrefix(ctx), "the CUDA attention kernels "
                           "take up to ", kAttentionMaxLead,
                           " leading dimensions (once those the operands "
                           "step over alike are merged), got more");
    const int at = joins ? dims - 1 : dims++;
    a.leadSize[at] = joins ? a.leadSize[at] * size : size;
    a.maskLead[at] = p.maskLead[i];
    for (const auto &[rows, layout] : ops)
      layout->lead[at] = rows->lead[i];
  }
  a.lead = dims;
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
  /// The call's shape, its operands' strides (CudnnAttentionCall's heads,
  /// then b, h, s of each operand) and the workspace.
  using Key = std::tuple<DType, int64_t, int64_t, int64_t, int64_t, double,
                         bool, bool, std::vector<int64_t>, int64_t>;
  struct Made {
    std::shared_ptr<CudnnAttentionPlan> plan;
    Status refused = Status::ok();
  };
  CudnnHandle handle;
  std::map<Key, Made> plans;
};

/// The call as cuDNN's [b, h, S, D] takes it: the kernels' merged leading
/// dimensions (AttentionDims) as b and h, each operand's strides along
/// them and its rows. Unimplemented where cuDNN's kernels are not known to
/// take the layout: more than two leading dimensions left, a stride that
/// is not a positive multiple of 16 bytes (the alignment the graph's
/// tensors declare, which its flash kernels' 16-byte and TMA loads rely
/// on), rows that overlap, or a buffer (`buffers`) not 16-byte aligned.
StatusOr<CudnnAttentionCall>
cudnnCallOf(const AttentionShape &p, const AttentionDims &a, bool backward,
            std::initializer_list<const void *> buffers) {
  if (a.lead > 2)
    return unimplemented("cuDNN's attention takes two leading dimensions, "
                         "got ", a.lead, " whose strides do not merge");
  CudnnAttentionCall call;
  call.dtype = p.dtype;
  call.batch = a.lead > 0 ? a.leadSize[0] : 1;
  call.heads = a.lead > 1 ? a.leadSize[1] : 1;
  call.sq = p.sq;
  call.sk = p.sk;
  call.d = p.d;
  call.scale = p.scale;
  call.causal = p.causal;
  call.backward = backward;
  const int64_t align = 16 / dtypeSize(p.dtype); // elements in 16 bytes
  // The strides of `l`, an operand of `rows` rows. Dimensions of size 1
  // (b and h where fewer leading dimensions are left, S for one row) get
  // those of a contiguous operand, so that contiguous calls keep the graph
  // and plan they had.
  auto strides = [&](const AttentionLayout &l, int64_t rows,
                     const char *what) -> StatusOr<CudnnAttentionStrides> {
    CudnnAttentionStrides x;
    x.s = rows > 1 ? l.row : call.d;
    x.b = a.lead > 0 ? l.lead[0] : rows * x.s;
    x.h = a.lead > 1 ? l.lead[1] : x.b;
    for (int64_t stride : {x.b, x.h, x.s})
      if (stride <= 0 || stride % align != 0)
        return unimplemented("cuDNN's attention takes strides that are "
                             "positive multiples of 16 bytes, got ",
                             what, "'s ", x.b, ", ", x.h, ", ", x.s);
    if (x.s < call.d)
      return unimplemented("cuDNN's attention takes rows that do not "
                           "overlap, got ", what, "'s row stride ", x.s,
                           " for ", call.d, " elements");
    return x;
  };
  DTCC_ASSIGN_OR_RETURN(call.q, strides(a.rows.q, p.sq, "query"));
  DTCC_ASSIGN_OR_RETURN(call.k, strides(a.rows.k, p.sk, "key"));
  DTCC_ASSIGN_OR_RETURN(call.v, strides(a.rows.v, p.sk, "value"));
  DTCC_ASSIGN_OR_RETURN(call.o, strides(a.rows.o, p.sq, "out"));
  if (backward) {
    DTCC_ASSIGN_OR_RETURN(call.dout, strides(a.rows.dout, p.sq, "dout"));
    DTCC_ASSIGN_OR_RETURN(call.dq, strides(a.rows.dq, p.sq, "dquery"));
    DTCC_ASSIGN_OR_RETURN(call.dk, strides(a.rows.dk, p.sk, "dkey"));
    DTCC_ASSIGN_OR_RETURN(call.dv, strides(a.rows.dv, p.sk, "dvalue"));
    // cuDNN's backward read dO with O's strides before 9.5.1 (PyTorch
    // copied dO to O's strides for it).
    const CudnnAttentionStrides &o = call.o, &dout = call.dout;
    if (cudnnGetVersion() < 90501 &&
        (o.b != dout.b || o.h != dout.h || o.s != dout.s))
      return unimplemented("cuDNN before 9.5.1 takes dout only with out's "
                           "strides");
  }
  for (const void *buffer : buffers)
    if (reinterpret_cast<uintptr_t>(buffer) % 16 != 0)
      return unimplemented("cuDNN's attention takes 16-byte aligned "
                           "buffers, got one at ", buffer);
  return call;
}

/// cuDNN's plan of the call, or null where dtcc's own kernels run it
/// (DTCC_CUDA_ATTENTION=own, a call cuDNN is not asked for, or one it
/// refuses, its layout included; DTCC_CUDA_ATTENTION=cudnn makes a refusal
/// an error).
StatusOr<std::shared_ptr<CudnnAttentionPlan>>
cudnnPlanFor(CudaDevice &dev, CudnnAttentionState &state,
             const KernelContext &ctx, const AttentionShape &p,
             const AttentionDims &a, const AttentionScratch &scratch,
             bool backward, std::initializer_list<const void *> buffers) {
  const char *env = std::getenv("DTCC_CUDA_ATTENTION");
  const bool own = env && std::strcmp(env, "own") == 0;
  const bool required = env && std::strcmp(env, "cudnn") == 0;
  if (own || scratch.workspaceBytes == 0)
    return std::shared_ptr<CudnnAttentionPlan>();
  StatusOr<CudnnAttentionCall> taken = cudnnCallOf(p, a, backward, buffers);
  if (!taken.isOk()) {
    if (required)
      return taken.status().withContext(errorPrefix(ctx) +
                                        "DTCC_CUDA_ATTENTION=cudnn");
    return std::shared_ptr<CudnnAttentionPlan>();
  }
  const CudnnAttentionCall &call = taken.value();
  DTCC_RETURN_IF_ERROR(state.handle.ensure(dev.computeStream()));
  std::vector<int64_t> layout{call.heads};
  for (const CudnnAttentionStrides *x :
       {&call.q, &call.k, &call.v, &call.o, &call.dout, &call.dq, &call.dk,
        &call.dv})
    layout.insert(layout.end(), {x->b, x->h, x->s});
  const CudnnAttentionState::Key key{call.dtype,   call.batch, call.sq,
                                     call.sk,      call.d,     call.scale,
                                     call.causal,  backward,
                                     std::move(layout),
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
  // Floats, doubles for f64 (cuDNN's plans take half types only).
  void *lse = ctx.outputs[1].data;
  const DType dtype = p.dtype;
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
#ifdef DTCC_HAVE_CUDNN
  auto state = std::static_pointer_cast<CudnnAttentionState>(cudnn);
  DTCC_ASSIGN_OR_RETURN(auto plan, cudnnPlanFor(dev, *state, ctx, p, a,
                                                scratch, false,
                                                {q, k, v, out, lse}));
  if (plan) {
    const ScratchSlot ws = scratch.workspace;
    return KernelFn([=]() -> Status {
      if (workspaceBytes(*plan) > 0 && !ws.get())
        return unreserved(prefix);
      return runCudnnAttention(state->handle.handle, *plan, q, k, v, out,
                               static_cast<float *>(lse), ws.get())
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
  const void *lse = ctx.inputs[4].data;
  const void *mask = p.hasMask ? ctx.inputs[6].data : nullptr;
  void *dq = ctx.outputs[0].data, *dk = ctx.outputs[1].data,
       *dv = ctx.outputs[2].data;
  const DType dtype = p.dtype;
  const bool needsScratch = p.batch * p.sq > 0;
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
#ifdef DTCC_HAVE_CUDNN
  auto state = std::static_pointer_cast<CudnnAttentionState>(cudnn);
  DTCC_ASSIGN_OR_RETURN(
      auto plan, cudnnPlanFor(dev, *state, ctx, p, a, scratch, true,
                              {q, k, v, o, lse, dout, dq, dk, dv}));
  if (plan) {
    const ScratchSlot ws = scratch.workspace;
    return KernelFn([=]() -> Status {
      if (!rowDot.get() || (workspaceBytes(*plan) > 0 && !ws.get()))
        return unreserved(prefix);
      return runCudnnAttentionGrad(state->handle.handle, *plan, q, k, v, o,
                                   static_cast<const float *>(lse), dout, dq,
                                   dk, dv, rowDot.as<float>(), ws.get())
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
