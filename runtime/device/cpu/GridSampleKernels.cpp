//===- GridSampleKernels.cpp - grid_sample and its gradient ---------------===//
//
// dgraph.grid_sample (1 to 3 spatial dimensions) reads each grid point's
// taps (runtime/base/GridSample.h) for every channel; the gradient scatters dy
// into each (sample, channel) plane on one thread, in the order of the grid
// points, so its sums do not depend on the thread count, and sums the grid's
// gradient over the channels per grid point. f16 and bf16 compute in float.
//
//===----------------------------------------------------------------------===//

#include "runtime/base/GridSample.h"
#include "runtime/device/cpu/CpuKernelUtils.h"
#include "runtime/device/cpu/GridSamplePlan.h"

#include <algorithm>
#include <vector>

namespace dtcc::runtime::cpu {

/// Reads the attributes and checks the shapes: x [N, C, s_1, ..., s_r],
/// grid [N, o_1, ..., o_r, r], y (or dy) [N, C, o_1, ..., o_r], r from 1 to
/// grid::kMaxDims.
static StatusOr<grid::Geometry>
geometryOf(const KernelContext &ctx, const TensorView &x, const TensorView &g,
           const TensorView &y, const char *yName) {
  const int64_t dims = x.rank() - 2;
  if (dims < 1 || dims > grid::kMaxDims)
    return ctx.error("expected an operand of rank 3 to ", grid::kMaxDims + 2,
                     " [N, C, spatial...], got ", shapeString(x.shape));
  if (g.rank() != x.rank() || g.shape[dims + 1] != dims ||
      g.shape[0] != x.shape[0])
    return ctx.error("expected a grid of shape [", x.shape[0], ", ",
                     dims == 1   ? "W_out"
                     : dims == 2 ? "H_out, W_out"
                                 : "D_out, H_out, W_out",
                     ", ", dims, "], got ", shapeString(g.shape));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, g, x.dtype, "grid"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, y, x.dtype, yName));
  std::vector<int64_t> yShape{x.shape[0], x.shape[1]};
  yShape.insert(yShape.end(), g.shape.begin() + 1, g.shape.end() - 1);
  DTCC_RETURN_IF_ERROR(checkShape(ctx, y, yShape, yName));
  grid::Geometry geo;
  geo.n = x.shape[0];
  geo.c = x.shape[1];
  geo.dims = int(dims);
  // Grid coordinate i (x first) samples the operand's dimension
  // rank - 1 - i.
  for (int64_t i = 0; i < dims; ++i) {
    geo.size[i] = x.shape[x.rank() - 1 - i];
    geo.outSize[i] = g.shape[dims - i];
  }
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

template <int Dims, int PerAxis, typename S>
grid::Taps<ComputeT<S>, Dims, PerAxis>
tapsAt(const grid::Geometry &geo, const S *g, int64_t n, int64_t p) {
  using C = ComputeT<S>;
  const S *point = g + (n * geo.points() + p) * Dims;
  C coords[Dims];
  for (int i = 0; i < Dims; ++i)
    coords[i] = C(Elem<S>::load(point[i]));
  grid::Taps<C, Dims, PerAxis> t;
  grid::tapsOf(geo, coords, t);
  return t;
}

template <int Dims, int PerAxis, typename S>
KernelFn makeGridSample(const grid::Geometry &geo, const S *x, const S *g,
                        S *y) {
  using C = ComputeT<S>;
  return [=]() -> Status {
    const int64_t points = geo.points(), plane = geo.plane();
    const int64_t width = geo.outSize[0],
                  rows = points / std::max<int64_t>(width, 1);
    // One task per (sample, output row): every channel of its points.
    parallelForEach(geo.n * rows, width * geo.c * 4, [&](int64_t row, int) {
      const int64_t n = row / rows;
      for (int64_t p = (row % rows) * width, end = p + width; p < end; ++p) {
        grid::Taps<C, Dims, PerAxis> t = tapsAt<Dims, PerAxis>(geo, g, n, p);
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
        grid::visitTaps(geo, [&](auto dims, auto perAxis) {
          fn = makeGridSample<decltype(dims)::value, decltype(perAxis)::value,
                              S>(
              geo, x.as<const S>(), g.as<const S>(), y.as<S>());
        });
      }))
    return unsupportedDType(ctx, x.dtype, kSetFloats);
  return fn;
}

template <int Dims, int PerAxis, typename S>
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
        grid::Taps<C, Dims, PerAxis> t = tapsAt<Dims, PerAxis>(geo, g, n, p);
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
      C sums[Dims];
      for (int i = 0; i < Dims; ++i)
        sums[i] = C(0);
      if (geo.mode != grid::Mode::kNearest) {
        grid::Taps<C, Dims, PerAxis> t = tapsAt<Dims, PerAxis>(geo, g, n, p);
        for (int64_t c = 0; c < geo.c; ++c) {
          const S *in = x + (n * geo.c + c) * plane;
          const C v = Elem<S>::load(dy[(n * geo.c + c) * points + p]);
          for (int k = 0; k < t.count; ++k) {
            if (t.at[k] < 0)
              continue;
            const C pixel = Elem<S>::load(in[t.at[k]]);
            for (int i = 0; i < Dims; ++i)
              sums[i] += pixel * t.d[i][k] * v;
          }
        }
        for (int i = 0; i < Dims; ++i)
          sums[i] *= t.grad[i];
      }
      for (int i = 0; i < Dims; ++i)
        dgrid[np * Dims + i] = Elem<S>::store(sums[i]);
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
        grid::visitTaps(geo, [&](auto dims, auto perAxis) {
          fn = makeGridSampleGrad<decltype(dims)::value,
                                  decltype(perAxis)::value, S>(
              geo, dy.as<const S>(), x.as<const S>(), g.as<const S>(),
              dx.as<S>(), dgrid.as<S>());
        });
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
