//===- GridSampleKernels.cu - grid_sample and its gradient ----------------===//
//
// A thread per (sample, grid point), over every channel, with the taps of
// runtime/base/GridSample.h (the CPU kernels' own; 1 to 3 spatial
// dimensions). The gradient adds into doperand atomically (a float copy
// for f16/bf16, rounded once at the end) and writes the grid's gradient,
// summed over the channels, itself.
//
//===----------------------------------------------------------------------===//

#include "runtime/base/GridSample.h"
#include "runtime/device/cuda/KernelCommon.cuh"

namespace dtcc::runtime::cuda {
namespace {

dim3 pointBlocks(int64_t n) {
  return blocksOf(elementwiseLaunch(n, launchLimits()));
}

template <int Dims, int PerAxis, typename S>
__device__ __forceinline__ void
tapsAt(const grid::Geometry &g, const S *xy, int64_t np,
       grid::Taps<ComputeT<S>, Dims, PerAxis> &t) {
  using C = ComputeT<S>;
  C coords[Dims];
  for (int i = 0; i < Dims; ++i)
    coords[i] = C(Elem<S>::load(xy[np * Dims + i]));
  grid::tapsOf(g, coords, t);
}

template <int Dims, int PerAxis, typename S>
__global__ void gridSampleKernel(const S *x, const S *xy, S *y,
                                 grid::Geometry g) {
  using C = ComputeT<S>;
  const int64_t points = g.points(), plane = g.plane();
  DTCC_GRID_LOOP(np, g.n * points) {
    const int64_t n = np / points, p = np - n * points;
    grid::Taps<C, Dims, PerAxis> t;
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
template <int Dims, int PerAxis, typename S, typename A>
__global__ void gridSampleGradKernel(const S *dy, const S *x, const S *xy,
                                     A *dx, S *dgrid, grid::Geometry g) {
  using C = ComputeT<S>;
  const int64_t points = g.points(), plane = g.plane();
  DTCC_GRID_LOOP(np, g.n * points) {
    const int64_t n = np / points, p = np - n * points;
    grid::Taps<C, Dims, PerAxis> t;
    tapsAt(g, xy, np, t);
    C sums[Dims];
    for (int i = 0; i < Dims; ++i)
      sums[i] = C(0);
    for (int64_t c = 0; c < g.c; ++c) {
      const int64_t base = (n * g.c + c) * plane;
      const C v = Elem<S>::load(dy[(n * g.c + c) * points + p]);
      for (int k = 0; k < t.count; ++k) {
        if (t.at[k] < 0)
          continue;
        atomicAdd(dx + base + t.at[k], A(t.weight[k] * v));
        if (g.mode != grid::Mode::kNearest) {
          const C pixel = Elem<S>::load(x[base + t.at[k]]);
          for (int i = 0; i < Dims; ++i)
            sums[i] += pixel * t.d[i][k] * v;
        }
      }
    }
    for (int i = 0; i < Dims; ++i)
      dgrid[np * Dims + i] = Elem<S>::store(sums[i] * t.grad[i]);
  }
}

} // namespace

cudaError_t launchGridSample(DType dtype, const void *x, const void *grid,
                             void *y, const grid::Geometry &g, cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  visitFloat(dtype, [&](auto tag) {
    using S = decltype(tag);
    err = cudaSuccess;
    const int64_t n = g.n * g.points();
    if (n == 0 || g.c == 0)
      return;
    grid::visitTaps(g, [&](auto dims, auto perAxis) {
      gridSampleKernel<decltype(dims)::value, decltype(perAxis)::value, S>
          <<<pointBlocks(n), kElementwiseThreads, 0, s>>>(
              static_cast<const S *>(x), static_cast<const S *>(grid),
              static_cast<S *>(y), g);
    });
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
    const int64_t points = g.n * g.points();
    // With no channels the grid's gradient is 0 as well.
    err = cudaMemsetAsync(dgrid, 0, size_t(points) * g.dims * sizeof(S), s);
    if (err != cudaSuccess)
      return;
    err = accumulateAtomically<S>(
        dx, scratch, g.n * g.c * g.plane(), s, [&](ComputeT<S> *acc) {
          if (points > 0 && g.c > 0)
            grid::visitTaps(g, [&](auto dims, auto perAxis) {
              gridSampleGradKernel<decltype(dims)::value,
                                   decltype(perAxis)::value, S, ComputeT<S>>
                  <<<pointBlocks(points), kElementwiseThreads, 0, s>>>(
                      static_cast<const S *>(dy), static_cast<const S *>(x),
                      static_cast<const S *>(grid), acc,
                      static_cast<S *>(dgrid), g);
            });
        });
  });
  return err;
}

} // namespace dtcc::runtime::cuda
