//===- AttentionPlan.cpp - checked shapes of the attention kernels --------===//

#include "runtime/device/cpu/AttentionPlan.h"

#include "runtime/device/cpu/CpuKernelUtils.h"

#include <algorithm>

namespace dtcc::runtime::cpu {
namespace {

/// The rows of `view` [B..., rows, width]: its last dimension's stride must
/// be 1 (any stride where the width is 1); the others may be any. A written
/// view (`output`) must not reach one element twice.
StatusOr<AttentionRows> rowsOf(const KernelContext &ctx, const TensorView &view,
                               const std::string &what, bool output) {
  DTCC_RETURN_IF_ERROR(checkStrides(ctx, view, what));
  if (!view.data && view.numel() > 0)
    return ctx.error(what, " has no data");
  const int64_t rank = view.rank();
  AttentionRows r;
  r.contiguous = view.isContiguous();
  const std::vector<int64_t> strides =
      r.contiguous ? contiguousStrides(view.shape) : view.strides;
  if (rank >= 2 && view.shape[rank - 1] > 1 && strides[rank - 1] != 1)
    return ctx.error("expected ", what,
                     "'s last dimension to be contiguous (stride 1), got "
                     "strides ",
                     shapeString(view.strides), " for shape ",
                     shapeString(view.shape));
  if (output && !r.contiguous) {
    // Sorted by stride, each dimension must step past everything the
    // smaller ones reach.
    std::vector<int64_t> dims;
    for (int64_t d = 0; d < rank; ++d)
      if (view.shape[d] > 1)
        dims.push_back(d);
    std::sort(dims.begin(), dims.end(),
              [&](int64_t a, int64_t b) { return strides[a] < strides[b]; });
    int64_t reach = 0; // the furthest element offset the smaller dims reach
    for (int64_t d : dims) {
      if (strides[d] <= reach)
        return ctx.error("expected ", what,
                         " to reach each element once, got strides ",
                         shapeString(view.strides), " for shape ",
                         shapeString(view.shape));
      reach += (view.shape[d] - 1) * strides[d];
    }
  }
  if (rank < 2)
    return r; // planOperands reports the rank
  // A single row's stride is never stepped, so a view may say any (0, say):
  // the width then, which every backend takes as a leading dimension.
  r.row = view.shape[rank - 2] <= 1 ? view.shape[rank - 1] : strides[rank - 2];
  r.lead.assign(strides.begin(), strides.end() - 2);
  const int64_t batch = product(view.shape, 0, rank - 2);
  r.base.assign(batch, 0);
  for (int64_t b = 0; b < batch; ++b) {
    int64_t rest = b, offset = 0;
    for (int64_t i = rank - 3; i >= 0; --i) {
      offset += (rest % view.shape[i]) * strides[i];
      rest /= view.shape[i];
    }
    r.base[b] = offset;
  }
  return r;
}

/// Checks query, key, value (and mask) as dgraph.attention's verifier does.
StatusOr<AttentionShape> planOperands(const KernelContext &ctx,
                                      const TensorView &q, const TensorView &k,
                                      const TensorView &v,
                                      const TensorView *mask) {
  AttentionShape s;
  s.dtype = q.dtype;
  DTCC_ASSIGN_OR_RETURN(s.rows.q, rowsOf(ctx, q, "query", false));
  DTCC_ASSIGN_OR_RETURN(s.rows.k, rowsOf(ctx, k, "key", false));
  DTCC_ASSIGN_OR_RETURN(s.rows.v, rowsOf(ctx, v, "value", false));
  const int64_t rank = q.rank();
  if (rank < 2 || k.rank() != rank || v.rank() != rank)
    return ctx.error("expected query, key and value of one rank >= 2, got ",
                     shapeString(q.shape), ", ", shapeString(k.shape), " and ",
                     shapeString(v.shape));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, k, q.dtype, "key"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, v, q.dtype, "value"));
  for (int64_t i = 0; i + 2 < rank; ++i)
    if (k.shape[i] != q.shape[i] || v.shape[i] != q.shape[i])
      return ctx.error("expected query, key and value with the same leading "
                       "dimensions, got ",
                       shapeString(q.shape), ", ", shapeString(k.shape),
                       " and ", shapeString(v.shape));
  s.batch = product(q.shape, 0, rank - 2);
  s.sq = q.shape[rank - 2];
  s.d = q.shape[rank - 1];
  s.sk = k.shape[rank - 2];
  s.dv = v.shape[rank - 1];
  s.lead.assign(q.shape.begin(), q.shape.end() - 2);
  s.maskLead.assign(s.lead.size(), 0);
  if (k.shape[rank - 1] != s.d || v.shape[rank - 2] != s.sk)
    return ctx.error("expected key [..., Sk, ", s.d, "] and value [..., ",
                     s.sk, ", Dv], got ", shapeString(k.shape), " and ",
                     shapeString(v.shape));
  DTCC_ASSIGN_OR_RETURN(s.scale, ctx.attrs.getFloat("scale"));
  s.causal = ctx.attrs.getBool("causal", false);
  if (s.causal && s.sq != s.sk)
    return ctx.error("causal attention expects as many queries as keys, got ",
                     s.sq, " and ", s.sk);
  s.maskBase.assign(s.batch, 0);
  if (!mask)
    return s;
  DTCC_RETURN_IF_ERROR(checkDType(ctx, *mask, q.dtype, "mask"));
  if (mask->rank() != rank)
    return ctx.error("expected a mask of rank ", rank, ", got ",
                     shapeString(mask->shape));
  std::vector<int64_t> scores(q.shape.begin(), q.shape.end() - 1);
  scores.push_back(s.sk);
  std::vector<int64_t> strides = contiguousStrides(mask->shape);
  for (int64_t i = 0; i < rank; ++i) {
    if (mask->shape[i] != 1 && mask->shape[i] != scores[i])
      return ctx.error("expected mask dimension ", i, " to be 1 or ",
                       scores[i], ", got ", shapeString(mask->shape));
    if (mask->shape[i] == 1)
      strides[i] = 0;
  }
  for (int64_t i = 0; i + 2 < rank; ++i)
    s.maskLead[i] = strides[i];
  for (int64_t b = 0; b < s.batch; ++b) {
    int64_t rest = b, offset = 0;
    for (int64_t i = rank - 3; i >= 0; --i) {
      offset += (rest % scores[i]) * strides[i];
      rest /= scores[i];
    }
    s.maskBase[b] = offset;
  }
  s.maskRow = strides[rank - 2];
  s.maskCol = strides[rank - 1];
  s.hasMask = true;
  return s;
}

/// The shapes of the output [B..., Sq, Dv] and the log-sum-exp [B..., Sq].
void resultShapes(const TensorView &q, const AttentionShape &p,
                  std::vector<int64_t> &out, std::vector<int64_t> &lse) {
  lse.assign(q.shape.begin(), q.shape.end() - 1);
  out = lse;
  out.push_back(p.dv);
}

} // namespace

StatusOr<AttentionShape> planAttention(const KernelContext &ctx) {
  if (ctx.inputs.size() < 3 || ctx.inputs.size() > 4 || ctx.outputs.size() != 2)
    return ctx.error("expected 3 or 4 inputs and 2 outputs, got ",
                     ctx.inputs.size(), " and ", ctx.outputs.size());
  const TensorView &q = ctx.inputs[0], &k = ctx.inputs[1], &v = ctx.inputs[2];
  const TensorView *mask = ctx.inputs.size() == 4 ? &ctx.inputs[3] : nullptr;
  if (mask)
    DTCC_RETURN_IF_ERROR(checkContiguous(ctx, *mask, "mask"));
  DTCC_RETURN_IF_ERROR(checkContiguous(ctx, ctx.outputs[1], "output 1"));
  DTCC_ASSIGN_OR_RETURN(AttentionShape p, planOperands(ctx, q, k, v, mask));
  DTCC_ASSIGN_OR_RETURN(p.rows.o, rowsOf(ctx, ctx.outputs[0], "output 0", true));
  std::vector<int64_t> outShape, lseShape;
  resultShapes(q, p, outShape, lseShape);
  const TensorView &out = ctx.outputs[0], &lse = ctx.outputs[1];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, q.dtype, "output 0"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, outShape, "output 0"));
  DTCC_RETURN_IF_ERROR(
      checkDType(ctx, lse, logsumexpDType(q.dtype), "output 1"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, lse, lseShape, "output 1"));
  return p;
}

StatusOr<AttentionShape> planAttentionGrad(const KernelContext &ctx) {
  if (ctx.inputs.size() < 6 || ctx.inputs.size() > 7 || ctx.outputs.size() != 3)
    return ctx.error("expected 6 or 7 inputs and 3 outputs, got ",
                     ctx.inputs.size(), " and ", ctx.outputs.size());
  const TensorView &q = ctx.inputs[0], &k = ctx.inputs[1], &v = ctx.inputs[2],
                   &o = ctx.inputs[3], &lse = ctx.inputs[4],
                   &dout = ctx.inputs[5];
  const TensorView *mask = ctx.inputs.size() == 7 ? &ctx.inputs[6] : nullptr;
  if (mask)
    DTCC_RETURN_IF_ERROR(checkContiguous(ctx, *mask, "mask"));
  DTCC_RETURN_IF_ERROR(checkContiguous(ctx, lse, "logsumexp"));
  DTCC_ASSIGN_OR_RETURN(AttentionShape p, planOperands(ctx, q, k, v, mask));
  DTCC_ASSIGN_OR_RETURN(p.rows.o, rowsOf(ctx, o, "out", false));
  DTCC_ASSIGN_OR_RETURN(p.rows.dout, rowsOf(ctx, dout, "dout", false));
  DTCC_ASSIGN_OR_RETURN(p.rows.dq, rowsOf(ctx, ctx.outputs[0], "output 0", true));
  DTCC_ASSIGN_OR_RETURN(p.rows.dk, rowsOf(ctx, ctx.outputs[1], "output 1", true));
  DTCC_ASSIGN_OR_RETURN(p.rows.dv, rowsOf(ctx, ctx.outputs[2], "output 2", true));
  std::vector<int64_t> outShape, lseShape;
  resultShapes(q, p, outShape, lseShape);
  DTCC_RETURN_IF_ERROR(checkDType(ctx, o, q.dtype, "out"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, o, outShape, "out"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, dout, q.dtype, "dout"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, dout, outShape, "dout"));
  DTCC_RETURN_IF_ERROR(
      checkDType(ctx, lse, logsumexpDType(q.dtype), "logsumexp"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, lse, lseShape, "logsumexp"));
  const TensorView *ins[3] = {&q, &k, &v};
  for (int i = 0; i < 3; ++i) {
    DTCC_RETURN_IF_ERROR(checkDType(ctx, ctx.outputs[i], q.dtype,
                                    "output " + std::to_string(i)));
    DTCC_RETURN_IF_ERROR(checkShape(ctx, ctx.outputs[i], ins[i]->shape,
                                    "output " + std::to_string(i)));
  }
  return p;
}

} // namespace dtcc::runtime::cpu
