//===- TensorOpKernels.cpp - resize, pad_grad, N-d indexing, top_k --------===//
//
// The CPU kernels of the ops in dialects/Graph/IR/GraphIndexingOps.td:
// resize and resize_grad (AxisMap.h), pad_grad, gather_nd, scatter_nd,
// scatter_elements and top_k. Indices may be negative (counted from the
// end); one out of range is reported with its position in the indices as an
// out-of-range Status naming the kernel and its ONNX node. Scatters apply
// their updates in index order, so duplicates behave as ONNX's reference.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/AxisMap.h"
#include "runtime/device/cpu/CpuKernelUtils.h"

#include <algorithm>
#include <memory>
#include <numeric>

namespace dtcc::runtime {
namespace {

using namespace cpu;

Status badIndex(const std::string &prefix, int64_t index, int64_t position,
                int64_t size) {
  return outOfRange(prefix, "index ", index, " at position ", position,
                    " of the indices is out of range [", -size, ", ", size,
                    ")");
}

/// Reads index `i` of an i32/i64 tensor.
int64_t indexAt(const void *data, DType dtype, int64_t i) {
  return dtype == DType::kI32 ? int64_t(static_cast<const int32_t *>(data)[i])
                              : static_cast<const int64_t *>(data)[i];
}

Status checkIndexType(const KernelContext &ctx, const TensorView &indices) {
  if (indices.dtype != DType::kI32 && indices.dtype != DType::kI64)
    return ctx.error("expected i32 or i64 indices, got ",
                     dtypeName(indices.dtype));
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// resize, resize_grad, pad_grad
//===----------------------------------------------------------------------===//

StatusOr<KernelFn> buildResize(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView &in = ctx.inputs[0], &out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, in.dtype, "output 0"));
  if (out.rank() != in.rank())
    return ctx.error("expected an output of rank ", in.rank(), ", got ",
                     out.typeString());
  DTCC_ASSIGN_OR_RETURN(ResizeSpec spec, readResizeSpec(ctx, in.shape.size()));
  StatusOr<std::vector<AxisMap>> maps =
      resizeAxisMaps(spec, in.shape, out.shape);
  if (!maps.isOk())
    return ctx.error(maps.status().message());
  return bindAxisMaps(ctx, std::move(*maps), in, out, spec.extrapolation);
}

StatusOr<KernelFn> buildResizeGrad(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView &dy = ctx.inputs[0], &dx = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, dx, dy.dtype, "output 0"));
  if (dx.rank() != dy.rank())
    return ctx.error("expected an output of rank ", dy.rank(), ", got ",
                     dx.typeString());
  DTCC_ASSIGN_OR_RETURN(ResizeSpec spec, readResizeSpec(ctx, dy.shape.size()));
  StatusOr<std::vector<AxisMap>> maps =
      resizeAxisMaps(spec, dx.shape, dy.shape);
  if (!maps.isOk())
    return ctx.error(maps.status().message());
  if (!visitDType<kSetFloats>(dy.dtype, [](auto) {}))
    return unsupportedDType(ctx, dy.dtype, kSetFloats);
  return bindAxisMaps(ctx, transposeAxisMaps(*maps), dy, dx, 0.0);
}

StatusOr<KernelFn> buildPadGrad(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView &dy = ctx.inputs[0], &dx = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, dx, dy.dtype, "output 0"));
  size_t rank = dx.shape.size();
  DTCC_ASSIGN_OR_RETURN(std::vector<int64_t> low, getIntsAttr(ctx, "low", rank));
  DTCC_ASSIGN_OR_RETURN(std::vector<int64_t> high,
                        getIntsAttr(ctx, "high", rank));
  StatusOr<std::string> mode = ctx.attrs.getString("mode");
  if (!mode.isOk())
    return ctx.error(mode.status().message());
  StatusOr<std::vector<AxisMap>> maps = padAxisMaps(*mode, dx.shape, low, high);
  if (!maps.isOk())
    return ctx.error(maps.status().message());
  std::vector<int64_t> padded;
  for (const AxisMap &m : *maps)
    padded.push_back(m.outSize);
  DTCC_RETURN_IF_ERROR(checkShape(ctx, dy, padded, "input 0"));
  if (!visitDType<kSetFloats>(dy.dtype, [](auto) {}))
    return unsupportedDType(ctx, dy.dtype, kSetFloats);
  return bindAxisMaps(ctx, transposeAxisMaps(*maps), dy, dx, 0.0);
}

//===----------------------------------------------------------------------===//
// Reductions of the scatters
//===----------------------------------------------------------------------===//

/// dst[i] = combine(dst[i], src[i]) for i < n. max/min keep NaN, as
/// numpy.maximum/minimum do.
template <typename S, ScatterReduction R>
void combine(S *dst, const S *src, int64_t n) {
  using C = ComputeT<S>;
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (R == ScatterReduction::kNone) {
      dst[i] = src[i];
    } else {
      C a = Elem<S>::load(dst[i]), b = Elem<S>::load(src[i]);
      C r;
      if constexpr (R == ScatterReduction::kAdd)
        r = wrapAdd(a, b);
      else if constexpr (R == ScatterReduction::kMul)
        r = wrapMul(a, b);
      else if constexpr (R == ScatterReduction::kMax)
        r = isNan(a) ? a : ((b > a || isNan(b)) ? b : a);
      else
        r = isNan(a) ? a : ((b < a || isNan(b)) ? b : a);
      dst[i] = Elem<S>::store(r);
    }
  }
}

using CombineFn = void (*)(void *dst, const void *src, int64_t n);

/// The combine function of `reduction` for `dtype`: any dtype (moved as
/// bytes) for "none", numeric ones for the rest.
StatusOr<CombineFn> combineFor(const KernelContext &ctx, DType dtype,
                               ScatterReduction reduction) {
  CombineFn fn = nullptr;
  if (reduction == ScatterReduction::kNone) {
    visitElementSize(dtypeSize(dtype), [&](auto tag) {
      using E = typename decltype(tag)::type;
      fn = [](void *d, const void *s, int64_t n) {
        std::memcpy(d, s, size_t(n) * sizeof(E));
      };
    });
    if (!fn)
      return unsupportedDType(ctx, dtype, kSetAll);
    return fn;
  }
  visitDType<kSetNumeric>(dtype, [&](auto tag) {
    using S = typename decltype(tag)::type;
    auto make = [](auto r) -> CombineFn {
      constexpr ScatterReduction R = decltype(r)::value;
      return [](void *d, const void *s, int64_t n) {
        combine<S, R>(static_cast<S *>(d), static_cast<const S *>(s), n);
      };
    };
    switch (reduction) {
    case ScatterReduction::kAdd:
      fn = make(std::integral_constant<ScatterReduction, ScatterReduction::kAdd>{});
      break;
    case ScatterReduction::kMul:
      fn = make(std::integral_constant<ScatterReduction, ScatterReduction::kMul>{});
      break;
    case ScatterReduction::kMax:
      fn = make(std::integral_constant<ScatterReduction, ScatterReduction::kMax>{});
      break;
    case ScatterReduction::kMin:
      fn = make(std::integral_constant<ScatterReduction, ScatterReduction::kMin>{});
      break;
    case ScatterReduction::kNone:
      break;
    }
  });
  if (!fn)
    return unsupportedDType(ctx, dtype, kSetNumeric,
                            "element type (a reduction)");
  return fn;
}

//===----------------------------------------------------------------------===//
// gather_nd, scatter_nd
//===----------------------------------------------------------------------===//

/// The layout of an N-d indexing: data [B.., K.., T..], indices [B.., I.., k].
struct NdLayout {
  int64_t batches = 1;    ///< prod(B..)
  int64_t tuples = 1;     ///< prod(I..) per batch
  int64_t k = 0;          ///< tuple length
  int64_t slice = 1;      ///< prod(T..)
  int64_t batchStride = 0; ///< data elements per batch
  std::vector<int64_t> dims, strides; ///< K.. sizes and element strides
  std::vector<int64_t> sliceShape;    ///< indices[:-1] + T..
};

StatusOr<NdLayout> ndLayout(const KernelContext &ctx, const TensorView &data,
                            const TensorView &indices) {
  DTCC_RETURN_IF_ERROR(checkIndexType(ctx, indices));
  const int64_t b = ctx.attrs.getInt("batch_dims", 0);
  if (indices.rank() < 1 || b < 0 || b >= indices.rank())
    return ctx.error("expected indices of rank > batch_dims (", b, "), got ",
                     indices.typeString());
  NdLayout l;
  l.k = indices.shape.back();
  if (l.k < 1 || l.k > data.rank() - b)
    return ctx.error("expected index tuples of length in [1, ",
                     data.rank() - b, "], got ", l.k);
  for (int64_t d = 0; d < b; ++d)
    if (data.shape[d] != indices.shape[d])
      return ctx.error("expected the first ", b,
                       " dims of data and indices to agree, got ",
                       shapeString(data.shape), " and ",
                       shapeString(indices.shape));
  std::vector<int64_t> strides = contiguousStrides(data.shape);
  l.batches = product(data.shape, 0, b);
  l.batchStride = product(data.shape, b);
  l.tuples = product(indices.shape, b, indices.shape.size() - 1);
  l.slice = product(data.shape, b + l.k);
  for (int64_t d = b; d < b + l.k; ++d) {
    l.dims.push_back(data.shape[d]);
    l.strides.push_back(strides[d]);
  }
  l.sliceShape.assign(indices.shape.begin(), indices.shape.end() - 1);
  l.sliceShape.insert(l.sliceShape.end(), data.shape.begin() + b + l.k,
                      data.shape.end());
  return l;
}

/// Calls fn(dataOffset, sliceIndex) for every index tuple in order; the
/// first out-of-range index stops it with an error.
template <typename Fn>
Status forEachTuple(const NdLayout &l, const void *indices, DType indexType,
                    const std::string &prefix, Fn &&fn) {
  for (int64_t bi = 0; bi < l.batches; ++bi)
    for (int64_t t = 0; t < l.tuples; ++t) {
      const int64_t tuple = bi * l.tuples + t;
      int64_t offset = bi * l.batchStride;
      for (int64_t j = 0; j < l.k; ++j) {
        const int64_t pos = tuple * l.k + j;
        int64_t i = indexAt(indices, indexType, pos);
        const int64_t v = i;
        if (i < 0)
          i += l.dims[j];
        if (i < 0 || i >= l.dims[j])
          return badIndex(prefix, v, pos, l.dims[j]);
        offset += i * l.strides[j];
      }
      fn(offset, tuple);
    }
  return Status::ok();
}

StatusOr<KernelFn> buildGatherNd(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView &data = ctx.inputs[0], &indices = ctx.inputs[1],
                   &out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, data.dtype, "output 0"));
  DTCC_ASSIGN_OR_RETURN(NdLayout l, ndLayout(ctx, data, indices));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, l.sliceShape, "output 0"));
  const size_t esize = size_t(dtypeSize(data.dtype));
  const char *src = static_cast<const char *>(data.data);
  char *dst = static_cast<char *>(out.data);
  const void *idx = indices.data;
  const DType it = indices.dtype;
  const std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    if (l.slice == 0)
      return Status::ok();
    return forEachTuple(l, idx, it, prefix, [&](int64_t offset, int64_t tuple) {
      std::memcpy(dst + tuple * l.slice * esize, src + offset * esize,
                  l.slice * esize);
    });
  });
}

StatusOr<KernelFn> buildScatterNd(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView &data = ctx.inputs[0], &indices = ctx.inputs[1],
                   &updates = ctx.inputs[2], &out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, data.dtype, "output 0"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, data.shape, "output 0"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, updates, data.dtype, "input 2"));
  DTCC_ASSIGN_OR_RETURN(NdLayout l, ndLayout(ctx, data, indices));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, updates, l.sliceShape, "input 2"));
  DTCC_ASSIGN_OR_RETURN(ScatterReduction reduction, readScatterReduction(ctx));
  DTCC_ASSIGN_OR_RETURN(CombineFn combineFn,
                        combineFor(ctx, data.dtype, reduction));
  const size_t esize = size_t(dtypeSize(data.dtype));
  const size_t bytes = size_t(data.sizeInBytes());
  const char *src = static_cast<const char *>(data.data);
  const char *upd = static_cast<const char *>(updates.data);
  char *dst = static_cast<char *>(out.data);
  const void *idx = indices.data;
  const DType it = indices.dtype;
  const std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    if (dst != src && bytes)
      std::memmove(dst, src, bytes);
    if (l.slice == 0)
      return Status::ok();
    return forEachTuple(l, idx, it, prefix, [&](int64_t offset, int64_t tuple) {
      combineFn(dst + offset * esize, upd + tuple * l.slice * esize, l.slice);
    });
  });
}

//===----------------------------------------------------------------------===//
// scatter_elements
//===----------------------------------------------------------------------===//

StatusOr<KernelFn> buildScatterElements(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView &data = ctx.inputs[0], &indices = ctx.inputs[1],
                   &updates = ctx.inputs[2], &out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, data.dtype, "output 0"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, data.shape, "output 0"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, updates, data.dtype, "input 2"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, updates, indices.shape, "input 2"));
  DTCC_RETURN_IF_ERROR(checkIndexType(ctx, indices));
  if (data.rank() != indices.rank())
    return ctx.error("expected indices of rank ", data.rank(),
                     " (the data's), got ", indices.rank());
  DTCC_ASSIGN_OR_RETURN(int64_t axis, getDimAttr(ctx, "axis", data.rank()));
  for (int64_t d = 0; d < data.rank(); ++d)
    if (d != axis && indices.shape[d] > data.shape[d])
      return ctx.error("indices dimension ", d, " (", indices.shape[d],
                       ") exceeds the data's (", data.shape[d], ")");
  DTCC_ASSIGN_OR_RETURN(ScatterReduction reduction, readScatterReduction(ctx));
  DTCC_ASSIGN_OR_RETURN(CombineFn combineFn,
                        combineFor(ctx, data.dtype, reduction));
  const size_t esize = size_t(dtypeSize(data.dtype));
  const size_t bytes = size_t(data.sizeInBytes());
  std::vector<int64_t> outStrides = contiguousStrides(data.shape);
  const std::vector<int64_t> shape = indices.shape;
  const int64_t size = data.shape[axis];
  const char *src = static_cast<const char *>(data.data);
  const char *upd = static_cast<const char *>(updates.data);
  char *dst = static_cast<char *>(out.data);
  const void *idx = indices.data;
  const DType it = indices.dtype;
  const std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    if (dst != src && bytes)
      std::memmove(dst, src, bytes);
    const int64_t n = product(shape);
    std::vector<int64_t> pos(shape.size(), 0);
    int64_t base = 0; // offset of pos in the output, axis coordinate 0
    for (int64_t e = 0; e < n; ++e) {
      int64_t i = indexAt(idx, it, e);
      const int64_t v = i;
      if (i < 0)
        i += size;
      if (i < 0 || i >= size)
        return badIndex(prefix, v, e, size);
      combineFn(dst + (base + i * outStrides[axis]) * esize, upd + e * esize,
                1);
      for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) {
        if (d != axis)
          base += outStrides[d];
        if (++pos[d] < shape[d])
          break;
        if (d != axis)
          base -= outStrides[d] * shape[d];
        pos[d] = 0;
      }
    }
    return Status::ok();
  });
}

//===----------------------------------------------------------------------===//
// top_k
//===----------------------------------------------------------------------===//

/// Whether a comes before b: by value (NaN largest), then by lower index.
template <typename C> struct TopKOrder {
  bool largest;
  bool operator()(const std::pair<C, int64_t> &a,
                  const std::pair<C, int64_t> &b) const {
    const bool an = isNan(a.first), bn = isNan(b.first);
    if (an || bn) {
      if (an && bn)
        return a.second < b.second;
      return largest ? an : bn;
    }
    if (a.first != b.first)
      return largest ? a.first > b.first : a.first < b.first;
    return a.second < b.second;
  }
};

template <typename S>
KernelFn makeTopK(const S *in, S *values, int64_t *indices, int64_t outer,
                  int64_t size, int64_t inner, int64_t k, bool largest) {
  using C = ComputeT<S>;
  auto row = std::make_shared<std::vector<std::pair<C, int64_t>>>(size);
  return [=]() -> Status {
    std::vector<std::pair<C, int64_t>> &r = *row;
    TopKOrder<C> order{largest};
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < inner; ++j) {
        const S *x = in + o * size * inner + j;
        for (int64_t i = 0; i < size; ++i)
          r[i] = {Elem<S>::load(x[i * inner]), i};
        std::partial_sort(r.begin(), r.begin() + k, r.end(), order);
        S *v = values + o * k * inner + j;
        int64_t *ix = indices + o * k * inner + j;
        for (int64_t i = 0; i < k; ++i) {
          v[i * inner] = x[r[i].second * inner];
          ix[i * inner] = r[i].second;
        }
      }
    return Status::ok();
  };
}

StatusOr<KernelFn> buildTopK(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView &in = ctx.inputs[0], &values = ctx.outputs[0],
                   &indices = ctx.outputs[1];
  DTCC_ASSIGN_OR_RETURN(int64_t axis, getDimAttr(ctx, "axis", in.rank()));
  StatusOr<int64_t> k = ctx.attrs.getInt("k");
  if (!k.isOk())
    return ctx.error(k.status().message());
  if (*k < 0 || *k > in.shape[axis])
    return ctx.error("expected k in [0, ", in.shape[axis], "], got ", *k);
  std::vector<int64_t> shape = in.shape;
  shape[axis] = *k;
  DTCC_RETURN_IF_ERROR(checkDType(ctx, values, in.dtype, "output 0"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, values, shape, "output 0"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, indices, DType::kI64, "output 1"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, indices, shape, "output 1"));
  const bool largest = ctx.attrs.getBool("largest", true);
  const int64_t outer = product(in.shape, 0, axis), size = in.shape[axis],
                inner = product(in.shape, axis + 1);
  KernelFn fn;
  if (!visitDType<kSetNumeric>(in.dtype, [&](auto tag) {
        using S = typename decltype(tag)::type;
        fn = makeTopK<S>(in.as<const S>(), values.as<S>(),
                         indices.as<int64_t>(), outer, size, inner, *k,
                         largest);
      }))
    return unsupportedDType(ctx, in.dtype, kSetNumeric);
  return fn;
}

} // namespace

void registerCpuTensorOpKernels(KernelRegistry &registry) {
  registry.add("resize", buildResize);
  registry.add("resize_grad", buildResizeGrad);
  registry.add("pad_grad", buildPadGrad);
  registry.add("gather_nd", buildGatherNd);
  registry.add("scatter_nd", buildScatterNd);
  registry.add("scatter_elements", buildScatterElements);
  registry.add("top_k", buildTopK);
}

} // namespace dtcc::runtime
