//===- RoiAlignKernels.cpp - roi_align and its gradient -------------------===//
//
// dgraph.roi_align reads each region's samples (runtime/base/RoiAlign.h)
// for every channel: their average ("avg") or, as ONNX's reference and ONNX
// Runtime compute "max", the largest weighted neighbour of any sample. The
// gradient adds dy back into the neighbours read (for "max": into the one
// that won), each channel on one thread, regions in order, so its sums do
// not depend on the thread count. f16 and bf16 compute in float.
//
//===----------------------------------------------------------------------===//

#include "runtime/base/RoiAlign.h"
#include "runtime/device/cpu/CpuKernelUtils.h"
#include "runtime/device/cpu/RoiAlignPlan.h"

#include <vector>

namespace dtcc::runtime::cpu {

StatusOr<roi::Geometry> planRoiAlign(const KernelContext &ctx, bool grad) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const size_t inputs = grad ? 4 : 3;
  if (ctx.inputs.size() != inputs || ctx.outputs.size() != 1)
    return ctx.error("expected ", inputs, " inputs and 1 output, got ",
                     ctx.inputs.size(), " and ", ctx.outputs.size());
  const size_t first = grad ? 1 : 0;
  const TensorView &x = ctx.inputs[first], &rois = ctx.inputs[first + 1],
                   &batch = ctx.inputs[first + 2];
  const TensorView &y = grad ? ctx.inputs[0] : ctx.outputs[0];
  const char *yName = grad ? "input 0 (dy)" : "output 0";
  if (x.rank() != 4)
    return ctx.error("expected an operand of rank 4 [N, C, H, W], got ",
                     shapeString(x.shape));
  if (rois.rank() != 2 || rois.shape[1] != 4)
    return ctx.error("expected rois of shape [R, 4], got ",
                     shapeString(rois.shape));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, rois, x.dtype, "rois"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, batch, DType::kI64, "batch_indices"));
  DTCC_RETURN_IF_ERROR(
      checkShape(ctx, batch, {rois.shape[0]}, "batch_indices"));
  roi::Geometry g;
  g.n = x.shape[0];
  g.c = x.shape[1];
  g.h = x.shape[2];
  g.w = x.shape[3];
  g.rois = rois.shape[0];
  DTCC_ASSIGN_OR_RETURN(g.outH, ctx.attrs.getInt("output_height"));
  DTCC_ASSIGN_OR_RETURN(g.outW, ctx.attrs.getInt("output_width"));
  DTCC_ASSIGN_OR_RETURN(g.samplingRatio, ctx.attrs.getInt("sampling_ratio"));
  DTCC_ASSIGN_OR_RETURN(g.spatialScale, ctx.attrs.getFloat("spatial_scale"));
  if (g.outH < 1 || g.outW < 1 || g.samplingRatio < 0)
    return ctx.error("expected output_height, output_width >= 1 and "
                     "sampling_ratio >= 0, got ",
                     g.outH, ", ", g.outW, " and ", g.samplingRatio);
  const std::string mode = ctx.attrs.getString("mode", "avg");
  if (mode != "avg" && mode != "max")
    return ctx.error("expected mode \"avg\" or \"max\", got \"", mode, "\"");
  g.max = mode == "max";
  g.halfPixel = ctx.attrs.getBool("half_pixel");
  DTCC_RETURN_IF_ERROR(checkDType(ctx, y, x.dtype, yName));
  DTCC_RETURN_IF_ERROR(
      checkShape(ctx, y, {g.rois, g.c, g.outH, g.outW}, yName));
  if (grad) {
    DTCC_RETURN_IF_ERROR(checkDType(ctx, ctx.outputs[0], x.dtype, "output 0"));
    DTCC_RETURN_IF_ERROR(checkShape(ctx, ctx.outputs[0], x.shape, "output 0"));
  }
  return g;
}

} // namespace dtcc::runtime::cpu

namespace dtcc::runtime {
namespace {

using namespace cpu;

/// Every region's batch index in [0, n), or an error naming the first that
/// is not.
Status checkBatchIndices(const std::string &where, const roi::Geometry &g,
                         const int64_t *batch) {
  for (int64_t r = 0; r < g.rois; ++r)
    if (batch[r] < 0 || batch[r] >= g.n)
      return invalidArgument(where, ": batch index ", batch[r], " of region ",
                             r, " is outside [0, ", g.n, ")");
  return Status::ok();
}

/// Region r's bins, from its box in `rois`.
template <typename S>
roi::Region<ComputeT<S>> regionAt(const roi::Geometry &g, const S *rois,
                                  int64_t r) {
  ComputeT<S> box[4];
  for (int k = 0; k < 4; ++k)
    box[k] = ComputeT<S>(Elem<S>::load(rois[r * 4 + k]));
  return roi::regionOf(g, box);
}

template <typename S>
KernelFn makeRoiAlign(std::string where, const roi::Geometry &g, const S *x,
                      const S *rois, const int64_t *batch, S *y) {
  using C = ComputeT<S>;
  return [=]() -> Status {
    DTCC_RETURN_IF_ERROR(checkBatchIndices(where, g, batch));
    parallelForEach(g.rois * g.c, g.bins() * 16, [&](int64_t rc, int) {
      const int64_t r = rc / g.c, c = rc % g.c;
      const roi::Region<C> region = regionAt(g, rois, r);
      const S *in = x + (batch[r] * g.c + c) * g.plane();
      S *out = y + rc * g.bins();
      for (int64_t ph = 0; ph < g.outH; ++ph)
        for (int64_t pw = 0; pw < g.outW; ++pw) {
          int64_t winner;
          C weight;
          out[ph * g.outW + pw] = Elem<S>::store(roi::poolOf(
              g, region, [&](int64_t i) { return C(Elem<S>::load(in[i])); }, ph,
              pw, winner, weight));
        }
    });
    return Status::ok();
  };
}

StatusOr<KernelFn> buildRoiAlign(const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(roi::Geometry g, planRoiAlign(ctx, false));
  const TensorView &x = ctx.inputs[0], &rois = ctx.inputs[1],
                   &batch = ctx.inputs[2], &y = ctx.outputs[0];
  const std::string where = strCat("roi_align at '", ctx.location, "'");
  KernelFn fn;
  if (!visitDType<kSetFloats>(x.dtype, [&](auto tag) {
        using S = typename decltype(tag)::type;
        fn = makeRoiAlign<S>(where, g, x.as<const S>(), rois.as<const S>(),
                             batch.as<const int64_t>(), y.as<S>());
      }))
    return unsupportedDType(ctx, x.dtype, kSetFloats);
  return fn;
}

template <typename S>
KernelFn makeRoiAlignGrad(std::string where, const roi::Geometry &g,
                          const S *dy, const S *x, const S *rois,
                          const int64_t *batch, S *dx) {
  using C = ComputeT<S>;
  return [=]() -> Status {
    DTCC_RETURN_IF_ERROR(checkBatchIndices(where, g, batch));
    // Each channel on one thread: every region's bins, in order.
    parallelForEach(
        g.c, g.rois * g.bins() * 16 + g.n * g.plane(), [&](int64_t c, int) {
          std::vector<C> acc(size_t(g.n * g.plane()), C(0));
          for (int64_t r = 0; r < g.rois; ++r) {
            const roi::Region<C> region = regionAt(g, rois, r);
            const int64_t base = batch[r] * g.plane();
            const S *in = x + (batch[r] * g.c + c) * g.plane();
            const S *d = dy + (r * g.c + c) * g.bins();
            for (int64_t ph = 0; ph < g.outH; ++ph)
              for (int64_t pw = 0; pw < g.outW; ++pw) {
                roi::spreadOf(
                    g, region,
                    [&](int64_t i) { return C(Elem<S>::load(in[i])); }, ph, pw,
                    C(Elem<S>::load(d[ph * g.outW + pw])),
                    [&](int64_t i, C value) {
                      acc[size_t(base + i)] += value;
                    });
              }
          }
          for (int64_t n = 0; n < g.n; ++n)
            for (int64_t i = 0; i < g.plane(); ++i)
              dx[(n * g.c + c) * g.plane() + i] =
                  Elem<S>::store(acc[size_t(n * g.plane() + i)]);
        });
    return Status::ok();
  };
}

StatusOr<KernelFn> buildRoiAlignGrad(const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(roi::Geometry g, planRoiAlign(ctx, true));
  const TensorView &dy = ctx.inputs[0], &x = ctx.inputs[1],
                   &rois = ctx.inputs[2], &batch = ctx.inputs[3],
                   &dx = ctx.outputs[0];
  const std::string where = strCat("roi_align_grad at '", ctx.location, "'");
  KernelFn fn;
  if (!visitDType<kSetFloats>(x.dtype, [&](auto tag) {
        using S = typename decltype(tag)::type;
        fn = makeRoiAlignGrad<S>(where, g, dy.as<const S>(), x.as<const S>(),
                                 rois.as<const S>(), batch.as<const int64_t>(),
                                 dx.as<S>());
      }))
    return unsupportedDType(ctx, x.dtype, kSetFloats);
  return fn;
}

} // namespace

void registerCpuRoiAlignKernels(KernelRegistry &registry) {
  registry.add("roi_align", buildRoiAlign);
  registry.add("roi_align_grad", buildRoiAlignGrad);
}

} // namespace dtcc::runtime
