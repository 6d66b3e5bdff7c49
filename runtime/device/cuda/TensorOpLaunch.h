//===- TensorOpLaunch.h - launches of resize, N-d indexing, top_k -*- C++ -*-===//
//
// The boundary between CudaTensorOps.cpp (factories, host C++) and
// TensorOpKernels.cu (nvcc) for the ops of GraphIndexingOps.td. As in
// CudaLaunch.h, pointers are device memory bound at load time and launches
// only enqueue on a stream.
//
// Scatters are reproducible: the targets of all updates are sorted (the
// stable radix sort of CudaLaunch.h, so equal targets keep index order) and
// one thread per distinct target applies its updates in that order. No
// atomics.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CUDA_TENSOROPLAUNCH_H
#define DTCC_RUNTIME_DEVICE_CUDA_TENSOROPLAUNCH_H

#include "runtime/base/ScatterReduction.h"
#include "runtime/device/cuda/CudaLaunch.h"

#include <cstddef>
#include <cstdint>

namespace dtcc::runtime::cuda {

/// Dimensions of a resampling map or of an N-d index tuple.
constexpr int kMaxMapDims = 8;

/// Per-dimension tap tables of a resize or pad (cpu::AxisMap) in device
/// memory: output position o of dimension d reads taps [offsets[d][o],
/// offsets[d][o+1]) at element offsets `taps` (index times the input's
/// stride) with `weights`; `fill[d]` (or null) marks filled positions.
struct DeviceAxisMaps {
  int rank = 0;
  int64_t outNumel = 0;
  int64_t outShape[kMaxMapDims] = {};
  const int64_t *offsets[kMaxMapDims] = {};
  const int64_t *taps[kMaxMapDims] = {};
  const double *weights[kMaxMapDims] = {};
  const uint8_t *fill[kMaxMapDims] = {};
};

/// out = the maps applied to in: element copies (`copy`, any element size)
/// or weighted sums in double (f32, f16, bf16, f64). `fillBits` is the fill
/// value's bit pattern in the element type (copies), `fill` its value.
cudaError_t launchAxisMaps(bool copy, DType dtype, const DeviceAxisMaps &maps,
                           const void *in, void *out, double fill,
                           uint64_t fillBits, cudaStream_t stream);

/// The layout of an N-d indexing: data [B.., K.., T..], indices [B.., I.., k].
struct NdParams {
  int64_t batches = 1, tuples = 1, k = 0, slice = 1, batchStride = 0;
  int64_t dims[kMaxMapDims] = {}, strides[kMaxMapDims] = {};
};

cudaError_t launchGatherNd(int elemSize, DType indexType, const NdParams &p,
                           const void *data, const void *indices, void *out,
                           DeviceError *error, int32_t site,
                           cudaStream_t stream);

/// Compute scratch of a scatter of `units` updates: the sort of (target,
/// update) pairs, laid out by planCudaScatterSort (runtime/exec/
/// CudaScratch.h; no segment starts). A target is a slice of the data
/// (scatter_nd) or an element (scatter_elements); their count marks a bad
/// index.
using ScatterScratch = ScatterAddScratch;

/// scatter_nd: out = data; each tuple's slice combined in index order.
cudaError_t launchScatterNd(DType dtype, int elemSize, DType indexType,
                            ScatterReduction reduction, const NdParams &p,
                            const void *data, const void *indices,
                            const void *updates, void *out, int64_t dataNumel,
                            const ScatterScratch &scratch, DeviceError *error,
                            int32_t site, cudaStream_t stream);

/// scatter_elements over indices of shape `shape` (rank <= kMaxMapDims)
/// into data of strides `dataStrides` along `axis` of size `axisSize`.
struct ElementsParams {
  int rank = 0;
  int axis = 0;
  int64_t numel = 0, axisSize = 0;
  int64_t shape[kMaxMapDims] = {}, dataStrides[kMaxMapDims] = {};
};
cudaError_t launchScatterElements(DType dtype, int elemSize, DType indexType,
                                  ScatterReduction reduction,
                                  const ElementsParams &p, const void *data,
                                  const void *indices, const void *updates,
                                  void *out, int64_t dataNumel,
                                  const ScatterScratch &scratch,
                                  DeviceError *error, int32_t site,
                                  cudaStream_t stream);

/// top_k along the middle of [outer, size, inner]: each element counts the
/// elements that come before it (by value, NaN largest, then by index) and
/// writes itself at that rank if it is below k. O(size^2) per row.
cudaError_t launchTopK(DType dtype, bool largest, const void *in, void *values,
                       int64_t *indices, int64_t outer, int64_t size,
                       int64_t inner, int64_t k, cudaStream_t stream);

} // namespace dtcc::runtime::cuda

#endif // DTCC_RUNTIME_DEVICE_CUDA_TENSOROPLAUNCH_H
