//===- AttentionPlan.h - checked shapes of the attention kernels -*- C++ -*-===//
//
// attention and attention_grad on every backend check an instruction with
// these functions (the same messages on the CPU and CUDA) and get back the
// shapes the kernels loop over.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CPU_ATTENTIONPLAN_H
#define DTCC_RUNTIME_DEVICE_CPU_ATTENTIONPLAN_H

#include "runtime/exec/Kernel.h"

#include <cstdint>
#include <vector>

namespace dtcc::runtime::cpu {

/// The largest head dimension (max(D, Dv)) the CUDA backend's attention
/// kernels take (runtime/device/cuda/AttentionKernels.cu); the compiler
/// leaves larger attention cores unfused for --target cuda.
constexpr int64_t kCudaAttentionMaxHeadDim = 512;
/// The largest head dimension the CUDA backend runs on the tensor cores
/// (f16 and bf16, runtime/device/cuda/AttentionTensorCores.cu); larger
/// heads and other types run on the vector units. The planner prices them
/// so.
constexpr int64_t kCudaAttentionTensorCoreMaxHeadDim = 128;

/// One call: `batch` (the product of the leading dimensions B...) blocks of
/// Sq x D queries, Sk x D keys and Sk x Dv values, contiguous.
struct AttentionShape {
  int64_t batch = 1, sq = 0, sk = 0, d = 0, dv = 0;
  bool causal = false;
  double scale = 1;
  DType dtype = DType::kInvalid;
  bool hasMask = false;
  /// The mask's element offset of each batch index, and its strides along
  /// the query and key dimensions (0 where it broadcasts).
  std::vector<int64_t> maskBase;
  int64_t maskRow = 0, maskCol = 0;
  /// The leading dimensions B... and the mask's strides along them (0
  /// where it broadcasts): maskBase[b] is b's multi-index times these.
  std::vector<int64_t> lead, maskLead;
};

/// attention: query, key, value[, mask] -> result [B..., Sq, Dv] (the
/// query's type), logsumexp [B..., Sq] (f32); attributes scale, causal.
StatusOr<AttentionShape> planAttention(const KernelContext &ctx);
/// attention_grad: query, key, value, out, logsumexp, dout[, mask] ->
/// dquery, dkey, dvalue (the types of query, key, value).
StatusOr<AttentionShape> planAttentionGrad(const KernelContext &ctx);

} // namespace dtcc::runtime::cpu

#endif // DTCC_RUNTIME_DEVICE_CPU_ATTENTIONPLAN_H
