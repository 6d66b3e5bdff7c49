//===- IndexingKernels.cpp - gather, gather_elements, scatter_add ---------===//
//
// Kernels that read or write at positions given by an index tensor. Indices
// may be negative (counted from the end); one out of range is reported, with
// its position, as an out-of-range Status when the kernel runs.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/CpuKernelUtils.h"

#include <memory>

namespace dtcc::runtime {
namespace {

using namespace cpu;

Status badIndex(const std::string &prefix, int64_t index, int64_t position,
                int64_t size) {
  return outOfRange(prefix, "index ", index, " at position ", position,
                    " of the indices is out of range [", -size, ", ", size,
                    ")");
}

/// Splits `shape` around `axis`: the product before it and after it.
void splitAt(const std::vector<int64_t> &shape, int64_t axis, int64_t &outer,
             int64_t &inner) {
  outer = product(shape, 0, axis);
  inner = product(shape, axis + 1);
}

template <typename E, typename I>
KernelFn makeGather(const TensorView &data, const TensorView &indices,
                    const TensorView &out, int64_t axis, std::string prefix) {
  int64_t outer, inner;
  splitAt(data.shape, axis, outer, inner);
  const int64_t size = data.shape[axis];
  const int64_t count = indices.numel();
  const E *src = data.as<const E>();
  const I *ind = indices.as<const I>();
  E *dst = out.as<E>();
  return [=]() -> Status {
    if (inner == 0)
      return Status::ok();
    E *o = dst;
    for (int64_t i = 0; i < outer; ++i) {
      const E *row = src + i * size * inner;
      for (int64_t j = 0; j < count; ++j) {
        int64_t idx = int64_t(ind[j]);
        if (idx < 0)
          idx += size;
        if (idx < 0 || idx >= size)
          return badIndex(prefix, int64_t(ind[j]), j, size);
        if (inner == 1)
          *o = row[idx];
        else
          std::memcpy(o, row + idx * inner, size_t(inner) * sizeof(E));
        o += inner;
      }
    }
    return Status::ok();
  };
}

StatusOr<KernelFn> buildGather(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView &data = ctx.inputs[0], &indices = ctx.inputs[1],
                   &out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, data.dtype, "output 0"));
  DTCC_ASSIGN_OR_RETURN(int64_t axis, getDimAttr(ctx, "axis", data.rank()));
  std::vector<int64_t> shape(data.shape.begin(), data.shape.begin() + axis);
  shape.insert(shape.end(), indices.shape.begin(), indices.shape.end());
  shape.insert(shape.end(), data.shape.begin() + axis + 1, data.shape.end());
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, shape, "output 0"));
  KernelFn fn;
  bool indexOk = false;
  bool sizeOk = visitElementSize(dtypeSize(data.dtype), [&](auto etag) {
    using E = typename decltype(etag)::type;
    indexOk = visitDType<kSetInts>(indices.dtype, [&](auto itag) {
      using I = typename decltype(itag)::type;
      if constexpr (std::is_same_v<I, int32_t> || std::is_same_v<I, int64_t>)
        fn = makeGather<E, I>(data, indices, out, axis, errorPrefix(ctx));
    });
  });
  if (!sizeOk)
    return unsupportedDType(ctx, data.dtype, kSetAll);
  if (!indexOk || !fn)
    return ctx.error("expected i32 or i64 indices, got ",
                     dtypeName(indices.dtype));
  return fn;
}

template <typename E, typename I>
KernelFn makeGatherElements(const StridedLayout<3> &layout, const E *data,
                            const I *indices, E *out, int64_t axisStride,
                            int64_t size, std::string prefix) {
  return [=]() -> Status {
    int64_t badValue = 0, badPos = -1;
    forEachRun(layout, [&](const int64_t *off, int64_t n, const int64_t *st) {
      if (badPos >= 0)
        return;
      E *o = out + off[0];
      const I *ix = indices + off[1];
      const E *base = data + off[2];
      for (int64_t j = 0; j < n; ++j) {
        int64_t idx = int64_t(ix[j * st[1]]);
        if (idx < 0)
          idx += size;
        if (idx < 0 || idx >= size) {
          badValue = int64_t(ix[j * st[1]]);
          badPos = off[1] + j * st[1];
          return;
        }
        o[j * st[0]] = base[j * st[2] + idx * axisStride];
      }
    });
    if (badPos >= 0)
      return badIndex(prefix, badValue, badPos, size);
    return Status::ok();
  };
}

StatusOr<KernelFn> buildGatherElements(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView &data = ctx.inputs[0], &indices = ctx.inputs[1],
                   &out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, data.dtype, "output 0"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, indices.shape, "output 0"));
  if (data.rank() != indices.rank())
    return ctx.error("expected indices of rank ", data.rank(),
                     " (the data's), got ", indices.rank());
  DTCC_ASSIGN_OR_RETURN(int64_t axis, getDimAttr(ctx, "axis", data.rank()));
  for (int64_t d = 0; d < data.rank(); ++d)
    if (d != axis && indices.shape[d] > data.shape[d])
      return ctx.error("indices dimension ", d, " (", indices.shape[d],
                       ") exceeds the data's (", data.shape[d], ")");
  std::vector<int64_t> outStrides = contiguousStrides(out.shape);
  std::vector<int64_t> dataStrides = contiguousStrides(data.shape);
  const int64_t axisStride = dataStrides[axis];
  dataStrides[axis] = 0; // the index supplies this coordinate
  StridedLayout<3> layout;
  if (!buildLayout<3>(out.shape, {&outStrides, &outStrides, &dataStrides},
                      layout))
    return ctx.error("more than ", kMaxDims, " non-mergeable dimensions");
  const int64_t size = data.shape[axis];
  KernelFn fn;
  bool indexOk = false;
  bool sizeOk = visitElementSize(dtypeSize(data.dtype), [&](auto etag) {
    using E = typename decltype(etag)::type;
    indexOk = visitDType<kSetInts>(indices.dtype, [&](auto itag) {
      using I = typename decltype(itag)::type;
      if constexpr (std::is_same_v<I, int32_t> || std::is_same_v<I, int64_t>)
        fn = makeGatherElements<E, I>(layout, data.as<const E>(),
                                      indices.as<const I>(), out.as<E>(),
                                      axisStride, size, errorPrefix(ctx));
    });
  });
  if (!sizeOk)
    return unsupportedDType(ctx, data.dtype, kSetAll);
  if (!indexOk || !fn)
    return ctx.error("expected i32 or i64 indices, got ",
                     dtypeName(indices.dtype));
  return fn;
}

/// Accumulates in the compute type: f16/bf16 in a float buffer (RunScratch,
/// `acc`'s one buffer) that is rounded once at the end.
template <typename S, typename I>
KernelFn makeScatterAdd(const TensorView &updates, const TensorView &indices,
                        const TensorView &out, int64_t axis, std::string prefix,
                        RunScratch accumulator) {
  using C = ComputeT<S>;
  int64_t outer, inner;
  splitAt(out.shape, axis, outer, inner);
  const int64_t size = out.shape[axis];
  const int64_t count = indices.numel();
  const int64_t total = out.numel();
  const S *upd = updates.as<const S>();
  const I *ind = indices.as<const I>();
  S *dst = out.as<S>();
  constexpr bool kScratch = !std::is_same_v<C, S>;
  return [=]() -> Status {
    C *acc;
    if constexpr (kScratch)
      acc = accumulator.as<C>(0);
    else
      acc = dst;
    for (int64_t i = 0; i < total; ++i)
      acc[i] = C(0);
    for (int64_t i = 0; i < outer; ++i) {
      for (int64_t j = 0; j < count; ++j) {
        int64_t idx = int64_t(ind[j]);
        if (idx < 0)
          idx += size;
        if (idx < 0 || idx >= size)
          return badIndex(prefix, int64_t(ind[j]), j, size);
        C *o = acc + (i * size + idx) * inner;
        const S *u = upd + (i * count + j) * inner;
        for (int64_t k = 0; k < inner; ++k)
          o[k] = wrapAdd(o[k], Elem<S>::load(u[k]));
      }
    }
    if constexpr (kScratch)
      for (int64_t i = 0; i < total; ++i)
        dst[i] = Elem<S>::store(acc[i]);
    return Status::ok();
  };
}

StatusOr<KernelFn> buildScatterAdd(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView &updates = ctx.inputs[0], &indices = ctx.inputs[1],
                   &out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, updates.dtype, "output 0"));
  DTCC_ASSIGN_OR_RETURN(int64_t axis, getDimAttr(ctx, "axis", out.rank()));
  StatusOr<int64_t> dimSize = ctx.attrs.getInt("dim_size");
  if (!dimSize.isOk())
    return ctx.error(dimSize.status().message());
  if (out.shape[axis] != *dimSize)
    return ctx.error("expected output dimension ", axis, " to be dim_size (",
                     *dimSize, "), got ", out.shape[axis]);
  std::vector<int64_t> shape(out.shape.begin(), out.shape.begin() + axis);
  shape.insert(shape.end(), indices.shape.begin(), indices.shape.end());
  shape.insert(shape.end(), out.shape.begin() + axis + 1, out.shape.end());
  DTCC_RETURN_IF_ERROR(checkShape(ctx, updates, shape, "input 0"));
  RunScratch accumulator;
  if (isHalfDType(updates.dtype)) {
    DTCC_ASSIGN_OR_RETURN(
        accumulator,
        RunScratch::make(ctx, {out.numel() * int64_t(sizeof(float))}));
  }
  KernelFn fn;
  bool indexOk = false;
  bool typeOk = visitDType<kSetNumeric>(updates.dtype, [&](auto stag) {
    using S = typename decltype(stag)::type;
    indexOk = visitDType<kSetInts>(indices.dtype, [&](auto itag) {
      using I = typename decltype(itag)::type;
      if constexpr (std::is_same_v<I, int32_t> || std::is_same_v<I, int64_t>)
        fn = makeScatterAdd<S, I>(updates, indices, out, axis, errorPrefix(ctx),
                                  accumulator);
    });
  });
  if (!typeOk)
    return unsupportedDType(ctx, updates.dtype, kSetNumeric);
  if (!indexOk || !fn)
    return ctx.error("expected i32 or i64 indices, got ",
                     dtypeName(indices.dtype));
  return fn;
}

} // namespace

void registerCpuIndexingKernels(KernelRegistry &registry) {
  registry.add("gather", buildGather);
  registry.add("gather_elements", buildGatherElements);
  registry.add("scatter_add", buildScatterAdd);
}

} // namespace dtcc::runtime
