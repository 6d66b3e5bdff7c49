//===- CudnnAttention.h - attention on cuDNN's fused flash kernels -*- C++ -*-===//
//
// attention and attention_grad as cuDNN 9's graph API takes them: the
// scaled dot-product attention graph cuDNN's frontend builds (matmul,
// scale, causal mask, softmax with its statistics, matmul; and the
// backward graph of its deterministic dP-workspace kernel), made through
// the backend API, which cuDNN's heuristics match to its fused flash
// attention engines. Shapes are cuDNN's [b, h, S, D]: b x h heads of Sq x D
// queries, Sk x D keys and values, each operand with its own strides (the
// heads' transposes and slices of a packed projection are views); the
// statistics are contiguous, the natural-log logsumexp of the scaled
// scores, as dtcc's own kernels write them, so either kernel's forward
// feeds either backward.
//
// Which calls come here is runtime/exec/CudaScratch.h's
// cudnnAttentionWorkspace (CudaAttention.cpp asks); a graph no engine takes,
// or whose workspace exceeds the scratch reserved for it, is an
// unimplemented error and the call runs dtcc's own kernels.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CUDA_CUDNNATTENTION_H
#define DTCC_RUNTIME_DEVICE_CUDA_CUDNNATTENTION_H

#include "runtime/base/DType.h"
#include "runtime/base/Status.h"

#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <string>

namespace dtcc::runtime::cuda {

/// An operand's element strides along cuDNN's b, h and S (D's is 1).
struct CudnnAttentionStrides {
  int64_t b = 0, h = 0, s = 0;
};

struct CudnnAttentionCall {
  DType dtype = DType::kBF16; ///< f16 or bf16
  int64_t batch = 0, heads = 1, sq = 0, sk = 0, d = 0;
  double scale = 1;
  bool causal = false;
  bool backward = false;
  /// Query, key, value and the output (the gradient's `out`); the
  /// gradient's also dout and dq, dk, dv.
  CudnnAttentionStrides q, k, v, o, dout, dq, dk, dv;
};

/// A finalized execution plan of one call's graph.
class CudnnAttentionPlan;

/// Builds and finalizes `call`'s graph on `handle` with the first engine
/// cuDNN's heuristics rank whose workspace is at most `workspaceCap` bytes
/// (the backward: one whose numerical notes do not say nondeterministic).
/// Unimplemented when there is none.
StatusOr<std::shared_ptr<CudnnAttentionPlan>>
planCudnnAttention(cudnnHandle_t handle, const CudnnAttentionCall &call,
                   int64_t workspaceCap);

/// The plan's workspace in bytes.
int64_t workspaceBytes(const CudnnAttentionPlan &plan);

/// q, k, v -> out, lse on the handle's stream.
Status runCudnnAttention(cudnnHandle_t handle, const CudnnAttentionPlan &plan,
                         const void *q, const void *k, const void *v,
                         void *out, float *lse, void *workspace);
/// q, k, v, out, lse, dout -> dq, dk, dv; `softmaxSum` (batch * sq floats)
/// receives rowsum(dout * out).
Status runCudnnAttentionGrad(cudnnHandle_t handle,
                             const CudnnAttentionPlan &plan, const void *q,
                             const void *k, const void *v, const void *out,
                             const float *lse, const void *dout, void *dq,
                             void *dk, void *dv, float *softmaxSum,
                             void *workspace);

} // namespace dtcc::runtime::cuda

#endif // DTCC_RUNTIME_DEVICE_CUDA_CUDNNATTENTION_H
