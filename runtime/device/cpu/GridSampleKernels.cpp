//===- GridSampleKernels.cpp - grid_sample and its gradient ---------------===//
//
// dgraph.grid_sample reads each grid point's taps (runtime/base/GridSample.h)
// for every channel; the gradient scatters dy into each (sample, channel)
// plane on one thread, in the order of the grid points, so its sums do not
// depend on the thread count, and sums the grid's gradient over the
// channels per grid point. f16 and bf16 compute in float.
//
//===----------------------------------------------------------------------===//

#include "runtime/base/GridSample.h"
#include "runtime/device/cpu/CpuKernelUtils.h"
#include "runtime/device/cpu/GridSamplePlan.h"

#include <vector>

namespace dtcc::runtime::cpu {

/// Reads the attributes and checks the shapes: x [N, C, H, W], grid
/// [N, Ho, Wo, 2], y (or dy) [N, C, Ho, Wo].
static StatusOr<grid::Geometry>
geometryOf(const KernelContext &ctx, const TensorView &x, const TensorView &g,
           const TensorView &y, const char *yName) {
  if (x.rank() != 4)
    return ctx.error("expected an operand of rank 4 [N, C, H, W], got ",
                     shapeString(x.shape));
  if (g.rank() != 4 || g.shape[3] != 2 || g.shape[0] != x.shape[0])
    return ctx.error("expected a grid of shape [", x.shape[0],
                     ", H_out, W_out, 2], got ", shapeString(g.shape));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, g, x.dtype, "grid"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, y, x.dtype, yName));
  DTCC_RETURN_IF_ERROR(checkShape(
      ctx, y, {x.shape[0], x.shape[1], g.shape[1], g.shape[2]}, yName));
  grid::Geometry geo;
  geo.n = x.shape[0];
  geo.c = x.shape[1];
  geo.h = x.shape[2];
  geo.w = x.shape[3];
  geo.outH = g.shape[1];
  geo.outW = g.shape[2];
  const std::string mode = ctx.attrs.getString("mode", "bilinear");
  if (mode == "bilinear")
    geo.mode = grid::Mode::kBilinear;
  else if (mode == "nearest")
    geo.mode = grid::Mode::kNearest;
  else if (mode == "bicubic")
    geo.mode = grid::Mode::kBicubic;
  else
    return ctx.error("expected mode \"bilinear\", \"nearest\" or \"bicubic\", "
                     "got \"",
                     mode, "\"");
  const std::string padding = ctx.attrs.getString("padding_mode", "zeros");
  if (padding == "zeros")
    geo.padding = grid::Padding::kZeros;
  else if (padding == "border")
    geo.padding = grid::Padding::kBorder;
  else if (padding == "reflection")
    geo.padding = grid::Padding::kReflection;
  else
    return ctx.error("expected padding_mode \"zeros\", \"border\" or "
                     "\"reflection\", got \"",
                     padding, "\"");
  geo.alignCorners = ctx.attrs.getBool("align_corners");
  return geo;
}

StatusOr<grid::Geometry> planGridSample(const KernelContext &ctx, bool grad) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const size_t inputs = grad ? 3 : 2, outputs = grad ? 2 : 1;
  if (ctx.inputs.size() != inputs || ctx.outputs.size() != outputs)
    return ctx.error("expected ", inputs, " inputs and ", outputs,
                     " outputs, got ", ctx.inputs.size(), " and ",
                     ctx.outputs.size());
  if (!grad)
    return geometryOf(ctx, ctx.inputs[0], ctx.inputs[1], ctx.outputs[0],
                      "output 0");
  const TensorView &x = ctx.inputs[1], &g = ctx.inputs[2];
  DTCC_ASSIGN_OR_RETURN(grid::Geometry geo,
                        geometryOf(ctx, x, g, ctx.inputs[0], "input 0"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, ctx.outputs[0], x.dtype, "output 0"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, ctx.outputs[0], x.shape, "output 0"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, ctx.outputs[1], x.dtype, "output 1"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, ctx.outputs[1], g.shape, "output 1"));
  return geo;
}

} // namespace dtcc::runtime::cpu

namespace dtcc::runtime {
namespace {

using namespace cpu;

template <typename S>
grid::Taps<ComputeT<S>> tapsAt(const grid::Geometry &geo, const S *g, int64_t n,
                               int64_t p) {
  using C = ComputeT<S>;
  const S *xy = g + (n * geo.points() + p) * 2;
  grid::Taps<C> t;
  grid::tapsOf(geo, C(Elem<S>::load(xy[0])), C(Elem<S>::load(xy[1])), t);
  return t;
}

template <typename S>
KernelFn makeGridSample(const grid::Geometry &geo, const S *x, const S *g,
                        S *y) {
  using C = ComputeT<S>;
  return [=]() -> Status {
    const int64_t points = geo.points(), plane = geo.plane();
    // One task per (sample, output row): every channel of its points.
    parallelForEach(
        geo.n * geo.outH, geo.outW * geo.c * 4, [&](int64_t row, int) {
          const int64_t n = row / geo.outH;
          for (int64_t p = (row % geo.outH) * geo.outW, end = p + geo.outW;
               p < end; ++p) {
            grid::Taps<C> t = tapsAt(geo, g, n, p);
            for (int64_t c = 0; c < geo.c; ++c) {
              const S *in = x + (n * geo.c + c) * plane;
              C sum = C(0);
              for (int k = 0; k < t.count; ++k)
                if (t.at[k] >= 0)
                  sum += Elem<S>::load(in[t.at[k]]) * t.weight[k];
              y[(n * geo.c + c) * points + p] = Elem<S>::store(sum);
            }
          }
        });
    return Status::ok();
  };
}

StatusOr<KernelFn> buildGridSample(const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(grid::Geometry geo, planGridSample(ctx, false));
  const TensorView &x = ctx.inputs[0], &g = ctx.inputs[1], &y = ctx.outputs[0];
  KernelFn fn;
  if (!visitDType<kSetFloats>(x.dtype, [&](auto tag) {
        using S = typename decltype(tag)::type;
        fn =
            makeGridSample<S>(geo, x.as<const S>(), g.as<const S>(), y.as<S>());
      }))
    return unsupportedDType(ctx, x.dtype, kSetFloats);
  return fn;
}

template <typename S>
KernelFn makeGridSampleGrad(const grid::Geometry &geo, const S *dy, const S *x,
                            const S *g, S *dx, S *dgrid) {
  using C = ComputeT<S>;
  return [=]() -> Status {
    const int64_t points = geo.points(), plane = geo.plane();
    // doperand: each plane on one thread, dy's points in order.
    parallelForEach(geo.n * geo.c, points * 8 + plane, [&](int64_t nc, int) {
      const int64_t n = nc / geo.c;
      std::vector<C> acc(size_t(plane), C(0));
      const S *d = dy + nc * points;
      for (int64_t p = 0; p < points; ++p) {
        grid::Taps<C> t = tapsAt(geo, g, n, p);
        const C v = Elem<S>::load(d[p]);
        for (int k = 0; k < t.count; ++k)
          if (t.at[k] >= 0)
            acc[size_t(t.at[k])] += t.weight[k] * v;
      }
      S *out = dx + nc * plane;
      for (int64_t i = 0; i < plane; ++i)
        out[i] = Elem<S>::store(acc[size_t(i)]);
    });
    // dgrid: each grid point sums over the channels.
    parallelForEach(geo.n * points, geo.c * 16, [&](int64_t np, int) {
      const int64_t n = np / points, p = np % points;
      C gx = C(0), gy = C(0);
      if (geo.mode != grid::Mode::kNearest) {
        grid::Taps<C> t = tapsAt(geo, g, n, p);
        for (int64_t c = 0; c < geo.c; ++c) {
          const S *in = x + (n * geo.c + c) * plane;
          const C v = Elem<S>::load(dy[(n * geo.c + c) * points + p]);
          for (int k = 0; k < t.count; ++k) {
            if (t.at[k] < 0)
              continue;
            const C pixel = Elem<S>::load(in[t.at[k]]);
            gx += pixel * t.dx[k] * v;
            gy += pixel * t.dy[k] * v;
          }
        }
        gx *= t.gradX;
        gy *= t.gradY;
      }
      dgrid[np * 2] = Elem<S>::store(gx);
      dgrid[np * 2 + 1] = Elem<S>::store(gy);
    });
    return Status::ok();
  };
}

StatusOr<KernelFn> buildGridSampleGrad(const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(grid::Geometry geo, planGridSample(ctx, true));
  const TensorView &dy = ctx.inputs[0], &x = ctx.inputs[1], &g = ctx.inputs[2];
  const TensorView &dx = ctx.outputs[0], &dgrid = ctx.outputs[1];
  KernelFn fn;
  if (!visitDType<kSetFloats>(x.dtype, [&](auto tag) {
        using S = typename decltype(tag)::type;
        fn = makeGridSampleGrad<S>(geo, dy.as<const S>(), x.as<const S>(),
                                   g.as<const S>(), dx.as<S>(), dgrid.as<S>());
      }))
    return unsupportedDType(ctx, x.dtype, kSetFloats);
  return fn;
}

} // namespace

void registerCpuGridSampleKernels(KernelRegistry &registry) {
  registry.add("grid_sample", buildGridSample);
  registry.add("grid_sample_grad", buildGridSampleGrad);
}

} // namespace dtcc::runtime
