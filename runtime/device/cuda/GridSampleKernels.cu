//===- GridSampleKernels.cu - grid_sample and its gradient ----------------===//
//
// A thread per (sample, grid point), over every channel, with the taps of
// runtime/base/GridSample.h (the CPU kernels' own). The gradient adds into
// doperand atomically (a float copy for f16/bf16, rounded once at the end)
// and writes the grid's gradient, summed over the channels, itself.
//
//===----------------------------------------------------------------------===//

#include "runtime/base/GridSample.h"
#include "runtime/device/cuda/KernelCommon.cuh"

namespace dtcc::runtime::cuda {
namespace {

dim3 pointBlocks(int64_t n) {
  return blocksOf(elementwiseLaunch(n, launchLimits()));
}

template <typename S>
__device__ __forceinline__ void tapsAt(const grid::Geometry &g, const S *xy,
                                       int64_t np, grid::Taps<ComputeT<S>> &t) {
  using C = ComputeT<S>;
  grid::tapsOf(g, C(Elem<S>::load(xy[np * 2])),
               C(Elem<S>::load(xy[np * 2 + 1])), t);
}

template <typename S>
__global__ void gridSampleKernel(const S *x, const S *xy, S *y,
                                 grid::Geometry g) {
  using C = ComputeT<S>;
  const int64_t points = g.points(), plane = g.plane();
  DTCC_GRID_LOOP(np, g.n * points) {
    const int64_t n = np / points, p = np - n * points;
    grid::Taps<C> t;
    tapsAt(g, xy, np, t);
    for (int64_t c = 0; c < g.c; ++c) {
      const S *in = x + (n * g.c + c) * plane;
      C sum = C(0);
      for (int k = 0; k < t.count; ++k)
        if (t.at[k] >= 0)
          sum += Elem<S>::load(in[t.at[k]]) * t.weight[k];
      y[(n * g.c + c) * points + p] = Elem<S>::store(sum);
    }
  }
}

/// A: the type doperand accumulates in (S, or float for f16/bf16).
template <typename S, typename A>
__global__ void gridSampleGradKernel(const S *dy, const S *x, const S *xy,
                                     A *dx, S *dgrid, grid::Geometry g) {
  using C = ComputeT<S>;
  const int64_t points = g.points(), plane = g.plane();
  DTCC_GRID_LOOP(np, g.n * points) {
    const int64_t n = np / points, p = np - n * points;
    grid::Taps<C> t;
    tapsAt(g, xy, np, t);
    C gx = C(0), gy = C(0);
    for (int64_t c = 0; c < g.c; ++c) {
      const int64_t base = (n * g.c + c) * plane;
      const C v = Elem<S>::load(dy[(n * g.c + c) * points + p]);
      for (int k = 0; k < t.count; ++k) {
        if (t.at[k] < 0)
          continue;
        atomicAdd(dx + base + t.at[k], A(t.weight[k] * v));
        if (g.mode != grid::Mode::kNearest) {
          const C pixel = Elem<S>::load(x[base + t.at[k]]);
          gx += pixel * t.dx[k] * v;
          gy += pixel * t.dy[k] * v;
        }
      }
    }
    dgrid[np * 2] = Elem<S>::store(gx * t.gradX);
    dgrid[np * 2 + 1] = Elem<S>::store(gy * t.gradY);
  }
}

} // namespace

cudaError_t launchGridSample(DType dtype, const void *x, const void *grid,
                             void *y, const grid::Geometry &g, cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  visitFloat(dtype, [&](auto tag) {
    using S = decltype(tag);
    err = cudaSuccess;
    const int64_t n = g.n * g.outH * g.outW;
    if (n == 0 || g.c == 0)
      return;
    gridSampleKernel<S><<<pointBlocks(n), kElementwiseThreads, 0, s>>>(
        static_cast<const S *>(x), static_cast<const S *>(grid),
        static_cast<S *>(y), g);
    err = cudaGetLastError();
  });
  return err;
}

cudaError_t launchGridSampleGrad(DType dtype, const void *dy, const void *x,
                                 const void *grid, void *dx, void *dgrid,
                                 float *scratch, const grid::Geometry &g,
                                 cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  visitFloat(dtype, [&](auto tag) {
    using S = decltype(tag);
    using C = ComputeT<S>;
    constexpr bool viaFloat = !std::is_same_v<S, C>;
    const int64_t in = g.n * g.c * g.h * g.w, points = g.n * g.outH * g.outW;
    C *acc = viaFloat ? reinterpret_cast<C *>(scratch) : static_cast<C *>(dx);
    err = cudaMemsetAsync(acc, 0, size_t(in) * sizeof(C), s);
    if (err != cudaSuccess)
      return;
    // With no channels the grid's gradient is 0 as well.
    err = cudaMemsetAsync(dgrid, 0, size_t(points) * 2 * sizeof(S), s);
    if (err != cudaSuccess)
      return;
    if (points > 0 && g.c > 0)
      gridSampleGradKernel<S, C>
          <<<pointBlocks(points), kElementwiseThreads, 0, s>>>(
              static_cast<const S *>(dy), static_cast<const S *>(x),
              static_cast<const S *>(grid), acc, static_cast<S *>(dgrid), g);
    if constexpr (viaFloat)
      if (in > 0)
        storeFromFloatKernel<S><<<pointBlocks(in), kElementwiseThreads, 0, s>>>(
            scratch, static_cast<S *>(dx), in);
    err = cudaGetLastError();
  });
  return err;
}

} // namespace dtcc::runtime::cuda
