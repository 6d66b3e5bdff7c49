//===- RoiAlignKernels.cu - roi_align and its gradient --------------------===//
//
// A thread per output element (region, channel, bin) with the samples of
// runtime/base/RoiAlign.h (the CPU kernels' own). The gradient adds into
// doperand atomically (a float copy for f16/bf16, rounded once at the
// end). A batch index outside [0, N) is recorded as a device error and its
// region reads, and adds, nothing.
//
//===----------------------------------------------------------------------===//

#include "runtime/base/RoiAlign.h"
#include "runtime/device/cuda/KernelCommon.cuh"

namespace dtcc::runtime::cuda {
namespace {

dim3 binBlocks(int64_t n) {
  return blocksOf(elementwiseLaunch(n, launchLimits()));
}

/// Region r's bins and batch index; false (error recorded) for a batch
/// index out of range.
template <typename S>
__device__ __forceinline__ bool
regionAt(const roi::Geometry &g, const S *rois, const int64_t *batch, int64_t r,
         roi::Region<ComputeT<S>> &region, int64_t &b, DeviceError *error,
         int32_t site) {
  using C = ComputeT<S>;
  b = batch[r];
  if (b < 0 || b >= g.n) {
    recordError(error, site, kBadBatchIndex, b, r, g.n);
    return false;
  }
  C box[4];
  for (int k = 0; k < 4; ++k)
    box[k] = C(Elem<S>::load(rois[r * 4 + k]));
  region = roi::regionOf(g, box);
  return true;
}

template <typename S>
__global__ void roiAlignKernel(const S *x, const S *rois, const int64_t *batch,
                               S *y, roi::Geometry g, DeviceError *error,
                               int32_t site) {
  using C = ComputeT<S>;
  const int64_t bins = g.bins();
  DTCC_GRID_LOOP(i, g.rois * g.c * bins) {
    const int64_t rc = i / bins, bin = i - rc * bins;
    const int64_t r = rc / g.c, c = rc - r * g.c;
    roi::Region<C> region;
    int64_t b;
    C value = C(0);
    if (regionAt(g, rois, batch, r, region, b, error, site)) {
      const S *in = x + (b * g.c + c) * g.plane();
      int64_t winner;
      C weight;
      value = roi::poolOf(
          g, region, [&](int64_t j) { return C(Elem<S>::load(in[j])); },
          bin / g.outW, bin % g.outW, winner, weight);
    }
    y[i] = Elem<S>::store(value);
  }
}

/// A: the type doperand accumulates in (S, or float for f16/bf16).
template <typename S, typename A>
__global__ void roiAlignGradKernel(const S *dy, const S *x, const S *rois,
                                   const int64_t *batch, A *dx, roi::Geometry g,
                                   DeviceError *error, int32_t site) {
  using C = ComputeT<S>;
  const int64_t bins = g.bins();
  DTCC_GRID_LOOP(i, g.rois * g.c * bins) {
    const int64_t rc = i / bins, bin = i - rc * bins;
    const int64_t r = rc / g.c, c = rc - r * g.c;
    roi::Region<C> region;
    int64_t b;
    if (!regionAt(g, rois, batch, r, region, b, error, site))
      continue;
    const int64_t base = (b * g.c + c) * g.plane();
    const int64_t ph = bin / g.outW, pw = bin % g.outW;
    const S *in = x + base;
    roi::spreadOf(
        g, region, [&](int64_t j) { return C(Elem<S>::load(in[j])); }, ph, pw,
        C(Elem<S>::load(dy[i])),
        [&](int64_t j, C value) { atomicAdd(dx + base + j, A(value)); });
  }
}

} // namespace

cudaError_t launchRoiAlign(DType dtype, const void *x, const void *rois,
                           const int64_t *batch, void *y,
                           const roi::Geometry &g, DeviceError *error,
                           int32_t site, cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  visitFloat(dtype, [&](auto tag) {
    using S = decltype(tag);
    err = cudaSuccess;
    const int64_t n = g.rois * g.c * g.bins();
    if (n == 0)
      return;
    roiAlignKernel<S><<<binBlocks(n), kElementwiseThreads, 0, s>>>(
        static_cast<const S *>(x), static_cast<const S *>(rois), batch,
        static_cast<S *>(y), g, error, site);
    err = cudaGetLastError();
  });
  return err;
}

cudaError_t launchRoiAlignGrad(DType dtype, const void *dy, const void *x,
                               const void *rois, const int64_t *batch, void *dx,
                               float *scratch, const roi::Geometry &g,
                               DeviceError *error, int32_t site,
                               cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  visitFloat(dtype, [&](auto tag) {
    using S = decltype(tag);
    const int64_t n = g.rois * g.c * g.bins();
    err = accumulateAtomically<S>(
        dx, scratch, g.n * g.c * g.plane(), s, [&](ComputeT<S> *acc) {
          if (n > 0)
            roiAlignGradKernel<S, ComputeT<S>>
                <<<binBlocks(n), kElementwiseThreads, 0, s>>>(
                    static_cast<const S *>(dy), static_cast<const S *>(x),
                    static_cast<const S *>(rois), batch, acc, g, error, site);
        });
  });
  return err;
}

} // namespace dtcc::runtime::cuda
