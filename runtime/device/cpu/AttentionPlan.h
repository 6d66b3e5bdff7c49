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

/// Where one operand's rows lie in its buffer. Query, key, value, the
/// output and the gradients may be strided views (the lowering passes the
/// heads' transposes and the slices of a packed projection as views instead
/// of copies): row r of batch index b (the leading dimensions B...
/// flattened) starts at element `base[b] + r * row` and its elements are
/// adjacent (the last dimension's stride is 1). A contiguous operand has
/// base[b] = b * rows * width and row = width.
struct AttentionRows {
  /// The element offset of each batch index's first row.
  std::vector<int64_t> base;
  /// The strides of the leading dimensions B... (base[b] is b's multi-index
  /// times these) and of the rows (the width where there is one row).
  std::vector<int64_t> lead;
  int64_t row = 0;
  /// base and row are those of a contiguous operand.
  bool contiguous = true;
};

/// One call: `batch` (the product of the leading dimensions B...) blocks of
/// Sq x D queries, Sk x D keys and Sk x Dv values, each laid out as its
/// AttentionRows say.
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
  /// The rows of query, key, value and the output (attention's result,
  /// attention_grad's `out`); attention_grad's also of dout and the three
  /// gradients (dq like query, ...). Unset ones are empty.
  struct {
    AttentionRows q, k, v, o, dout, dq, dk, dv;
  } rows;
  /// Every operand listed above is contiguous.
  bool allContiguous() const {
    for (const AttentionRows *r : {&rows.q, &rows.k, &rows.v, &rows.o,
                                   &rows.dout, &rows.dq, &rows.dk, &rows.dv})
      if (!r->contiguous)
        return false;
    return true;
  }
};

/// The logsumexp's type for a query of type `query`: the kernels'
/// accumulator type, f64 for f64 and f32 for every other float type.
inline DType logsumexpDType(DType query) {
  return query == DType::kF64 ? DType::kF64 : DType::kF32;
}

/// attention: query, key, value[, mask] -> result [B..., Sq, Dv] (the
/// query's type), logsumexp [B..., Sq] (logsumexpDType); attributes scale,
/// causal.
StatusOr<AttentionShape> planAttention(const KernelContext &ctx);
/// attention_grad: query, key, value, out, logsumexp, dout[, mask] ->
/// dquery, dkey, dvalue (the types of query, key, value).
StatusOr<AttentionShape> planAttentionGrad(const KernelContext &ctx);

} // namespace dtcc::runtime::cpu

#endif // DTCC_RUNTIME_DEVICE_CPU_ATTENTIONPLAN_H
