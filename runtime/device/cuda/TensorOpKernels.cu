//===- TensorOpKernels.cu - resize, N-d indexing, scatters, top_k ---------===//
//
// The CUDA kernels of the ops of GraphIndexingOps.td (TensorOpLaunch.h).
// Resampling walks the per-dimension tap tables of cpu::AxisMap in the same
// order as the CPU kernel, accumulating in double, so both backends round
// the same sums. Scatters sort their targets and let one thread per target
// apply its updates in index order: results do not depend on scheduling.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cuda/KernelCommon.cuh"
#include "runtime/device/cuda/TensorOpLaunch.h"

namespace dtcc::runtime::cuda {
namespace {

template <typename Fn> cudaError_t launch(int64_t n, cudaStream_t s, Fn &&fn) {
  LaunchConfig c = elementwiseLaunch(n, launchLimits());
  if (c.blocks == 0)
    return cudaSuccess;
  fn(blocksOf(c), threadsOf(c), s);
  return cudaGetLastError();
}

template <typename T> __device__ __forceinline__ bool isNanValue(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return v != v;
  else
    return false;
}

//===----------------------------------------------------------------------===//
// Resampling maps
//===----------------------------------------------------------------------===//

/// Output element i's position per dimension; whether a map fills it.
__device__ __forceinline__ bool decodeFilled(const DeviceAxisMaps &m, int64_t i,
                                             int64_t (&pos)[kMaxMapDims]) {
  for (int d = m.rank - 1; d >= 0; --d) {
    pos[d] = i % m.outShape[d];
    i /= m.outShape[d];
  }
  for (int d = 0; d < m.rank; ++d)
    if (m.fill[d] && m.fill[d][pos[d]])
      return true;
  return false;
}

template <typename E>
__global__ void copyMapsKernel(DeviceAxisMaps m, const E *in, E *out, E fill) {
  DTCC_GRID_LOOP(i, m.outNumel) {
    int64_t pos[kMaxMapDims];
    if (decodeFilled(m, i, pos)) {
      out[i] = fill;
      continue;
    }
    int64_t src = 0;
    for (int d = 0; d < m.rank; ++d)
      src += m.taps[d][m.offsets[d][pos[d]]];
    out[i] = in[src];
  }
}

/// Weighted sums over the tensor product of the taps, dimension 0
/// outermost (the CPU kernel's order).
template <typename S>
__global__ void sumMapsKernel(DeviceAxisMaps m, const S *in, S *out,
                              double fill) {
  DTCC_GRID_LOOP(i, m.outNumel) {
    int64_t pos[kMaxMapDims];
    if (decodeFilled(m, i, pos)) {
      out[i] = Elem<S>::store(ComputeT<S>(fill));
      continue;
    }
    int64_t begin[kMaxMapDims], end[kMaxMapDims], tap[kMaxMapDims];
    bool empty = false;
    for (int d = 0; d < m.rank; ++d) {
      begin[d] = m.offsets[d][pos[d]];
      end[d] = m.offsets[d][pos[d] + 1];
      tap[d] = begin[d];
      empty = empty || begin[d] == end[d];
    }
    double acc = 0;
    while (!empty) {
      int64_t off = 0;
      double w = 1;
      for (int d = 0; d < m.rank; ++d) {
        off += m.taps[d][tap[d]];
        w *= m.weights[d][tap[d]];
      }
      // Rounded twice, as the CPU's -ffp-contract=off code rounds it: nvcc
      // would otherwise fuse the product and the sum into one DFMA.
      acc = __dadd_rn(acc, __dmul_rn(w, double(Elem<S>::load(in[off]))));
      int d = m.rank - 1;
      while (d >= 0 && ++tap[d] == end[d]) {
        tap[d] = begin[d];
        --d;
      }
      if (d < 0)
        break;
    }
    out[i] = Elem<S>::store(ComputeT<S>(acc));
  }
}

//===----------------------------------------------------------------------===//
// N-d indexing
//===----------------------------------------------------------------------===//

/// The element offset of tuple `tuple`'s slice in the data, or -1 (with the
/// error recorded) when an index is out of range.
template <typename I>
__device__ __forceinline__ int64_t tupleOffset(const NdParams &p, const I *idx,
                                               int64_t tuple, DeviceError *error,
                                               int32_t site) {
  int64_t off = (tuple / p.tuples) * p.batchStride;
  for (int64_t q = 0; q < p.k; ++q) {
    const int64_t pos = tuple * p.k + q;
    const int64_t v = int64_t(idx[pos]);
    const int64_t x = v < 0 ? v + p.dims[q] : v;
    if (x < 0 || x >= p.dims[q]) {
      recordError(error, site, kBadIndex, v, pos, p.dims[q]);
      return -1;
    }
    off += x * p.strides[q];
  }
  return off;
}

template <typename E, typename I>
__global__ void gatherNdKernel(NdParams p, const E *data, const I *idx, E *out,
                               DeviceError *error, int32_t site) {
  const int64_t n = p.batches * p.tuples * p.slice;
  DTCC_GRID_LOOP(i, n) {
    const int64_t off = tupleOffset(p, idx, i / p.slice, error, site);
    out[i] = off < 0 ? E(0) : data[off + i % p.slice];
  }
}

/// Sort keys of scatter_nd: the data slice each tuple targets (its
/// offset over the slice size; `invalid` when out of range, which sorts
/// last and is skipped).
template <typename I>
__global__ void ndKeysKernel(NdParams p, const I *idx, uint32_t *keys,
                             uint32_t *order, uint32_t invalid,
                             DeviceError *error, int32_t site) {
  DTCC_GRID_LOOP(u, p.batches * p.tuples) {
    const int64_t off = tupleOffset(p, idx, u, error, site);
    keys[u] = off < 0 ? invalid : uint32_t(off / p.slice);
    order[u] = uint32_t(u);
  }
}

/// Sort keys of scatter_elements: each index element's target offset.
template <typename I>
__global__ void elementsKeysKernel(ElementsParams p, const I *idx,
                                   uint32_t *keys, uint32_t *order,
                                   uint32_t invalid, DeviceError *error,
                                   int32_t site) {
  DTCC_GRID_LOOP(e, p.numel) {
    int64_t rest = e, off = 0;
    for (int d = p.rank - 1; d >= 0; --d) {
      const int64_t pos = rest % p.shape[d];
      rest /= p.shape[d];
      if (d != p.axis)
        off += pos * p.dataStrides[d];
    }
    const int64_t v = int64_t(idx[e]);
    const int64_t x = v < 0 ? v + p.axisSize : v;
    if (x < 0 || x >= p.axisSize) {
      recordError(error, site, kBadIndex, v, e, p.axisSize);
      keys[e] = invalid;
    } else {
      keys[e] = uint32_t(off + x * p.dataStrides[p.axis]);
    }
    order[e] = uint32_t(e);
  }
}

template <typename S, ScatterReduction R>
__device__ __forceinline__ S combine(S a, S b) {
  if constexpr (R == ScatterReduction::kNone) {
    return b;
  } else {
    using C = ComputeT<S>;
    C x = Elem<S>::load(a), y = Elem<S>::load(b), r;
    // Integers wrap, as the CPU's wrapAdd/wrapMul (signed overflow is
    // undefined): i32 and i64 here, no narrower than unsigned int.
    using W = std::conditional_t<
        std::is_integral_v<C>,
        std::make_unsigned_t<std::conditional_t<std::is_integral_v<C>, C, int>>,
        C>;
    if constexpr (R == ScatterReduction::kAdd)
      r = C(W(x) + W(y));
    else if constexpr (R == ScatterReduction::kMul)
      r = C(W(x) * W(y));
    else if constexpr (R == ScatterReduction::kMax)
      r = isNanValue(x) ? x : ((y > x || isNanValue(y)) ? y : x);
    else
      r = isNanValue(x) ? x : ((y < x || isNanValue(y)) ? y : x);
    return Elem<S>::store(r);
  }
}

/// One thread per (distinct target, element of the unit): applies the
/// target's updates in index order (the stable sort kept it). Target `key`
/// is elements [key * unit, (key + 1) * unit) of out.
template <typename S, ScatterReduction R>
__global__ void applyScatterKernel(const uint32_t *keys, const uint32_t *order,
                                   int64_t units, int64_t unit,
                                   const S *updates, S *out, uint32_t invalid) {
  DTCC_GRID_LOOP(i, units * unit) {
    const int64_t s = i / unit, j = i % unit;
    const uint32_t key = keys[s];
    if (key == invalid || (s > 0 && keys[s - 1] == key))
      continue;
    const int64_t at = int64_t(key) * unit + j;
    S acc = out[at];
    for (int64_t t = s; t < units && keys[t] == key; ++t)
      acc = combine<S, R>(acc, updates[int64_t(order[t]) * unit + j]);
    out[at] = acc;
  }
}

/// Sorts the keys (with their positions) and applies the updates.
template <typename S>
cudaError_t sortAndApply(ScatterReduction reduction, int64_t units,
                         int64_t unit, const S *updates, S *out,
                         uint32_t invalid, const ScatterScratch &sc,
                         cudaStream_t s) {
  cudaError_t err = launchRadixSortPairs(sc, units, s);
  if (err != cudaSuccess)
    return err;
  const uint32_t *keys = sc.keys[sc.passes % 2];
  const uint32_t *order = sc.positions[sc.passes % 2];
  auto run = [&](auto r) {
    constexpr ScatterReduction R = decltype(r)::value;
    if constexpr (R == ScatterReduction::kNone || !std::is_unsigned_v<S>)
      return launch(units * unit, s, [&](dim3 g, dim3 b, cudaStream_t st) {
        applyScatterKernel<S, R><<<g, b, 0, st>>>(keys, order, units, unit,
                                                  updates, out, invalid);
      });
    return cudaErrorInvalidValue;
  };
  switch (reduction) {
  case ScatterReduction::kNone:
    return run(std::integral_constant<ScatterReduction, ScatterReduction::kNone>{});
  case ScatterReduction::kAdd:
    return run(std::integral_constant<ScatterReduction, ScatterReduction::kAdd>{});
  case ScatterReduction::kMul:
    return run(std::integral_constant<ScatterReduction, ScatterReduction::kMul>{});
  case ScatterReduction::kMax:
    return run(std::integral_constant<ScatterReduction, ScatterReduction::kMax>{});
  case ScatterReduction::kMin:
    return run(std::integral_constant<ScatterReduction, ScatterReduction::kMin>{});
  }
  return cudaErrorInvalidValue;
}

/// Applies with the storage type of `dtype`: bytes for "none", the
/// arithmetic types otherwise.
cudaError_t dispatchApply(DType dtype, int elemSize, ScatterReduction reduction,
                          int64_t units, int64_t unit, const void *updates,
                          void *out, uint32_t invalid,
                          const ScatterScratch &sc, cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  if (reduction == ScatterReduction::kNone) {
    visitBytes(elemSize, [&](auto tag) {
      using E = decltype(tag);
      err = sortAndApply<E>(reduction, units, unit,
                            static_cast<const E *>(updates),
                            static_cast<E *>(out), invalid, sc, s);
    });
    return err;
  }
  visitArithmetic(dtype, [&](auto tag) {
    using S = decltype(tag);
    err = sortAndApply<S>(reduction, units, unit,
                          static_cast<const S *>(updates),
                          static_cast<S *>(out), invalid, sc, s);
  });
  return err;
}

//===----------------------------------------------------------------------===//
// top_k
//===----------------------------------------------------------------------===//

/// Whether (a, ia) comes before (b, ib): by value, NaN largest, then index.
template <typename C>
__device__ __forceinline__ bool before(C a, int64_t ia, C b, int64_t ib,
                                       bool largest) {
  const bool an = isNanValue(a), bn = isNanValue(b);
  if (an || bn) {
    if (an && bn)
      return ia < ib;
    return largest ? an : bn;
  }
  if (a != b)
    return largest ? a > b : a < b;
  return ia < ib;
}

template <typename S>
__global__ void topKKernel(const S *in, S *values, int64_t *indices,
                           int64_t outer, int64_t size, int64_t inner,
                           int64_t k, bool largest) {
  DTCC_GRID_LOOP(i, outer * size * inner) {
    const int64_t c = i % inner, j = (i / inner) % size,
                  o = i / (inner * size);
    const S *row = in + o * size * inner + c;
    const auto v = Elem<S>::load(row[j * inner]);
    int64_t rank = 0;
    for (int64_t q = 0; q < size && rank < k; ++q)
      if (q != j && before(Elem<S>::load(row[q * inner]), q, v, j, largest))
        ++rank;
    if (rank < k) {
      values[(o * k + rank) * inner + c] = row[j * inner];
      indices[(o * k + rank) * inner + c] = j;
    }
  }
}

} // namespace

//===----------------------------------------------------------------------===//
// Launches
//===----------------------------------------------------------------------===//

cudaError_t launchAxisMaps(bool copy, DType dtype, const DeviceAxisMaps &maps,
                           const void *in, void *out, double fill,
                           uint64_t fillBits, cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  if (copy) {
    visitBytes(int(dtypeSize(dtype)), [&](auto tag) {
      using E = decltype(tag);
      err = launch(maps.outNumel, s, [&](dim3 g, dim3 b, cudaStream_t st) {
        copyMapsKernel<E><<<g, b, 0, st>>>(maps, static_cast<const E *>(in),
                                           static_cast<E *>(out), E(fillBits));
      });
    });
    return err;
  }
  visitFloat(dtype, [&](auto tag) {
    using S = decltype(tag);
    err = launch(maps.outNumel, s, [&](dim3 g, dim3 b, cudaStream_t st) {
      sumMapsKernel<S><<<g, b, 0, st>>>(maps, static_cast<const S *>(in),
                                        static_cast<S *>(out), fill);
    });
  });
  return err;
}

cudaError_t launchGatherNd(int elemSize, DType indexType, const NdParams &p,
                           const void *data, const void *indices, void *out,
                           DeviceError *error, int32_t site, cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  visitBytes(elemSize, [&](auto etag) {
    using E = decltype(etag);
    auto run = [&](auto itag) {
      using I = decltype(itag);
      err = launch(p.batches * p.tuples * p.slice, s,
                   [&](dim3 g, dim3 b, cudaStream_t st) {
                     gatherNdKernel<E, I><<<g, b, 0, st>>>(
                         p, static_cast<const E *>(data),
                         static_cast<const I *>(indices), static_cast<E *>(out),
                         error, site);
                   });
    };
    if (indexType == DType::kI32)
      run(int32_t{});
    else if (indexType == DType::kI64)
      run(int64_t{});
  });
  return err;
}

cudaError_t launchScatterNd(DType dtype, int elemSize, DType indexType,
                            ScatterReduction reduction, const NdParams &p,
                            const void *data, const void *indices,
                            const void *updates, void *out, int64_t dataNumel,
                            const ScatterScratch &sc, DeviceError *error,
                            int32_t site, cudaStream_t s) {
  cudaError_t err = cudaSuccess;
  if (out != data && dataNumel > 0)
    err = cudaMemcpyAsync(out, data, size_t(dataNumel) * elemSize,
                          cudaMemcpyDeviceToDevice, s);
  const int64_t units = p.batches * p.tuples;
  if (err != cudaSuccess || units == 0 || p.slice == 0)
    return err;
  // The data's slices, which the factory checked fit 32 bits.
  const uint32_t invalid = uint32_t(dataNumel / p.slice);
  auto keys = [&](auto itag) {
    using I = decltype(itag);
    err = launch(units, s, [&](dim3 g, dim3 b, cudaStream_t st) {
      ndKeysKernel<I><<<g, b, 0, st>>>(p, static_cast<const I *>(indices),
                                       sc.keys[0], sc.positions[0], invalid,
                                       error, site);
    });
  };
  if (indexType == DType::kI32)
    keys(int32_t{});
  else
    keys(int64_t{});
  if (err != cudaSuccess)
    return err;
  return dispatchApply(dtype, elemSize, reduction, units, p.slice, updates,
                       out, invalid, sc, s);
}

cudaError_t launchScatterElements(DType dtype, int elemSize, DType indexType,
                                  ScatterReduction reduction,
                                  const ElementsParams &p, const void *data,
                                  const void *indices, const void *updates,
                                  void *out, int64_t dataNumel,
                                  const ScatterScratch &sc, DeviceError *error,
                                  int32_t site, cudaStream_t s) {
  cudaError_t err = cudaSuccess;
  if (out != data && dataNumel > 0)
    err = cudaMemcpyAsync(out, data, size_t(dataNumel) * elemSize,
                          cudaMemcpyDeviceToDevice, s);
  if (err != cudaSuccess || p.numel == 0)
    return err;
  const uint32_t invalid = uint32_t(dataNumel);
  auto keys = [&](auto itag) {
    using I = decltype(itag);
    err = launch(p.numel, s, [&](dim3 g, dim3 b, cudaStream_t st) {
      elementsKeysKernel<I><<<g, b, 0, st>>>(
          p, static_cast<const I *>(indices), sc.keys[0], sc.positions[0],
          invalid, error, site);
    });
  };
  if (indexType == DType::kI32)
    keys(int32_t{});
  else
    keys(int64_t{});
  if (err != cudaSuccess)
    return err;
  return dispatchApply(dtype, elemSize, reduction, p.numel, 1, updates, out,
                       invalid, sc, s);
}

cudaError_t launchTopK(DType dtype, bool largest, const void *in, void *values,
                       int64_t *indices, int64_t outer, int64_t size,
                       int64_t inner, int64_t k, cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  visitArithmetic(dtype, [&](auto tag) {
    using S = decltype(tag);
    err = launch(outer * size * inner, s, [&](dim3 g, dim3 b, cudaStream_t st) {
      topKKernel<S><<<g, b, 0, st>>>(static_cast<const S *>(in),
                                     static_cast<S *>(values), indices, outer,
                                     size, inner, k, largest);
    });
  });
  return err;
}

} // namespace dtcc::runtime::cuda
