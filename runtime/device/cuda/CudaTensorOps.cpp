//===- CudaTensorOps.cpp - factories of resize, N-d indexing, top_k -------===//
//
// The CUDA factories of the ops of GraphIndexingOps.td, checking each
// instruction as the CPU factories do. Their device memory besides the
// operands is scratch that runtime/exec/CudaScratch.h sizes and the
// factories request: the tap tables of resize and pad (cpu::AxisMap),
// persistent, uploaded once when the reservation is made; a scatter's sort,
// compute scratch. A step only launches.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/AxisMap.h"
#include "runtime/device/cpu/CpuKernelUtils.h"
#include "runtime/device/cuda/CudaDevice.h"
#include "runtime/device/cuda/CudaFactory.h"
#include "runtime/device/cuda/TensorOpLaunch.h"
#include "runtime/exec/CudaScratch.h"

#include <cstring>
#include <memory>

namespace dtcc::runtime::cuda {
namespace {

using cpu::AxisMap;
using cpu::checkAllContiguous;
using cpu::checkDType;
using cpu::checkShape;
using cpu::errorPrefix;
using cpu::product;

bool isCudaSumType(DType d) {
  return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16 ||
         d == DType::kF64;
}

Status checkIndexType(const KernelContext &ctx, const TensorView &indices) {
  if (indices.dtype != DType::kI32 && indices.dtype != DType::kI64)
    return ctx.error("expected i32 or i64 indices, got ",
                     dtypeName(indices.dtype));
  return Status::ok();
}

/// The tables of `maps` (read by an input of shape `inShape`) as they lie
/// in device memory (planCudaAxisMapTables): offsets, taps as element
/// offsets, weights, fill flags.
std::vector<uint8_t> axisMapTableImage(const std::vector<AxisMap> &maps,
                                       const std::vector<int64_t> &inShape,
                                       const CudaAxisMapTables &t) {
  std::vector<uint8_t> image(size_t(t.totalBytes), 0);
  auto put = [&](int64_t at, const void *data, size_t bytes) {
    if (bytes)
      std::memcpy(image.data() + at, data, bytes);
  };
  std::vector<int64_t> strides = contiguousStrides(inShape);
  for (size_t k = 0; k < maps.size(); ++k) {
    const AxisMap &m = maps[k];
    std::vector<int64_t> taps;
    for (int64_t i : m.index)
      taps.push_back(i * strides[k]);
    put(t.offsets[k], m.offsets.data(), m.offsets.size() * sizeof(int64_t));
    put(t.taps[k], taps.data(), taps.size() * sizeof(int64_t));
    put(t.weights[k], m.weight.data(), m.weight.size() * sizeof(double));
    if (t.fill[k] >= 0)
      put(t.fill[k], m.fill.data(), m.fill.size());
  }
  return image;
}

/// The bits of `value` stored as `dtype` (for copy kernels' fill).
uint64_t fillBitsOf(DType dtype, double value) {
  uint64_t bits = 0;
  auto put = [&](auto v) { std::memcpy(&bits, &v, sizeof(v)); };
  switch (dtype) {
  case DType::kF32: put(float(value)); break;
  case DType::kF64: put(value); break;
  case DType::kF16: put(cpu::storeHalf(float(value))); break;
  case DType::kBF16: put(cpu::storeBf16(float(value))); break;
  case DType::kBool: put(uint8_t(value != 0)); break;
  case DType::kI8: put(int8_t(value)); break;
  case DType::kI16: put(int16_t(value)); break;
  case DType::kI32: put(int32_t(value)); break;
  case DType::kI64: put(int64_t(value)); break;
  case DType::kU8: put(uint8_t(value)); break;
  case DType::kU16: put(uint16_t(value)); break;
  case DType::kU32: put(uint32_t(value)); break;
  case DType::kU64: put(uint64_t(value)); break;
  default: break;
  }
  return bits;
}

/// Binds a kernel applying `maps` to `in` into `out`; the maps' tables are
/// persistent scratch, uploaded when the reservation is made.
StatusOr<KernelFn> bindMaps(CudaDevice &dev, const KernelContext &ctx,
                            const std::vector<AxisMap> &maps,
                            const TensorView &in, const TensorView &out,
                            double fill) {
  if (maps.size() != in.shape.size())
    return ctx.error("expected one map per dimension");
  if (maps.size() > size_t(kMaxMapDims))
    return ctx.error("more than ", kMaxMapDims,
                     " dimensions for the CUDA backend");
  std::vector<int64_t> outShape;
  for (const AxisMap &m : maps)
    outShape.push_back(m.outSize);
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, outShape, "output 0"));
  const bool copy = std::all_of(maps.begin(), maps.end(),
                                [](const AxisMap &m) { return m.isCopy(); });
  if (!copy && !isCudaSumType(in.dtype))
    return unsupported(ctx, in.dtype);
  const int esz = int(dtypeSize(in.dtype));
  if (esz != 1 && esz != 2 && esz != 4 && esz != 8)
    return unsupported(ctx, in.dtype);
  const CudaAxisMapTables tables = planCudaAxisMapTables(maps);
  DTCC_ASSIGN_OR_RETURN(
      ScratchSlot slot,
      requestScratchOf(ctx, ScratchUse::kPersistent,
                       maps.empty() ? 0 : tables.totalBytes));
  if (!maps.empty()) {
    auto image = std::make_shared<std::vector<uint8_t>>(
        axisMapTableImage(maps, in.shape, tables));
    // On the compute stream, synchronized: before any run.
    CudaDevice *d = &dev;
    ctx.scratch->whenReserved([d, slot, image]() -> Status {
      DTCC_RETURN_IF_ERROR(d->copyHostToDevice(slot.get(), image->data(),
                                               int64_t(image->size())));
      std::vector<uint8_t>().swap(*image);
      return Status::ok();
    });
  }
  DeviceAxisMaps layout;
  layout.rank = int(maps.size());
  layout.outNumel = out.numel();
  for (size_t k = 0; k < maps.size(); ++k)
    layout.outShape[k] = maps[k].outSize;
  const DType dtype = in.dtype;
  const uint64_t bits = fillBitsOf(dtype, fill);
  const void *src = in.data;
  void *dst = out.data;
  const size_t scalarBytes = size_t(esz);
  const bool scalar = maps.empty();
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    if (scalar)
      return launched(prefix, cudaMemcpyAsync(dst, src, scalarBytes,
                                              cudaMemcpyDeviceToDevice, st));
    const char *base = slot.as<const char>();
    if (!base)
      return unreserved(prefix);
    DeviceAxisMaps d = layout;
    for (int k = 0; k < d.rank; ++k) {
      d.offsets[k] = reinterpret_cast<const int64_t *>(base + tables.offsets[k]);
      d.taps[k] = reinterpret_cast<const int64_t *>(base + tables.taps[k]);
      d.weights[k] = reinterpret_cast<const double *>(base + tables.weights[k]);
      d.fill[k] = tables.fill[k] < 0
                      ? nullptr
                      : reinterpret_cast<const uint8_t *>(base + tables.fill[k]);
    }
    return launched(prefix,
                    launchAxisMaps(copy, dtype, d, src, dst, fill, bits, st));
  });
}

StatusOr<KernelFn> buildResize(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView in = ctx.inputs[0], out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, in.dtype, "output 0"));
  if (out.rank() != in.rank())
    return ctx.error("expected an output of rank ", in.rank(), ", got ",
                     out.typeString());
  DTCC_ASSIGN_OR_RETURN(cpu::ResizeSpec spec,
                        cpu::readResizeSpec(ctx, in.shape.size()));
  DTCC_ASSIGN_OR_RETURN(std::vector<AxisMap> maps, cudaAxisMaps(ctx));
  return bindMaps(dev, ctx, maps, in, out, spec.extrapolation);
}

StatusOr<KernelFn> buildResizeGrad(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView dy = ctx.inputs[0], dx = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, dx, dy.dtype, "output 0"));
  if (dx.rank() != dy.rank())
    return ctx.error("expected an output of rank ", dy.rank(), ", got ",
                     dx.typeString());
  if (!isCudaSumType(dy.dtype))
    return unsupported(ctx, dy.dtype);
  // The transposes of the forward maps.
  DTCC_ASSIGN_OR_RETURN(std::vector<AxisMap> maps, cudaAxisMaps(ctx));
  return bindMaps(dev, ctx, maps, dy, dx, 0.0);
}

/// pad in modes edge/reflect/wrap (Grad false) and pad_grad (Grad true),
/// the mode read from the instruction's attribute.
template <bool Grad>
StatusOr<KernelFn> buildModePad(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView in = ctx.inputs[0], out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, in.dtype, "output 0"));
  // pad_grad: the transposes of the forward maps, whose inputs are dy's.
  DTCC_ASSIGN_OR_RETURN(std::vector<AxisMap> maps, cudaAxisMaps(ctx));
  if (!Grad)
    return bindMaps(dev, ctx, maps, in, out, 0.0);
  std::vector<int64_t> padded;
  for (const AxisMap &m : maps)
    padded.push_back(m.inSize);
  DTCC_RETURN_IF_ERROR(checkShape(ctx, in, padded, "input 0"));
  if (!isCudaSumType(in.dtype))
    return unsupported(ctx, in.dtype);
  return bindMaps(dev, ctx, maps, in, out, 0.0);
}

/// The N-d layout of data [B.., K.., T..] and indices [B.., I.., k].
StatusOr<NdParams> ndParams(const KernelContext &ctx, const TensorView &data,
                            const TensorView &indices,
                            std::vector<int64_t> &sliceShape) {
  DTCC_RETURN_IF_ERROR(checkIndexType(ctx, indices));
  const int64_t b = ctx.attrs.getInt("batch_dims", 0);
  if (indices.rank() < 1 || b < 0 || b >= indices.rank())
    return ctx.error("expected indices of rank > batch_dims (", b, "), got ",
                     indices.typeString());
  NdParams p;
  p.k = indices.shape.back();
  if (p.k < 1 || p.k > data.rank() - b || p.k > kMaxMapDims)
    return ctx.error("expected index tuples of length in [1, ",
                     std::min<int64_t>(data.rank() - b, kMaxMapDims), "], got ",
                     p.k);
  for (int64_t d = 0; d < b; ++d)
    if (data.shape[d] != indices.shape[d])
      return ctx.error("expected the first ", b,
                       " dims of data and indices to agree, got ",
                       cpu::shapeString(data.shape), " and ",
                       cpu::shapeString(indices.shape));
  std::vector<int64_t> strides = contiguousStrides(data.shape);
  p.batches = product(data.shape, 0, b);
  p.batchStride = product(data.shape, b);
  p.tuples = product(indices.shape, b, indices.shape.size() - 1);
  p.slice = product(data.shape, b + p.k);
  for (int64_t q = 0; q < p.k; ++q) {
    p.dims[q] = data.shape[b + q];
    p.strides[q] = strides[b + q];
  }
  sliceShape.assign(indices.shape.begin(), indices.shape.end() - 1);
  sliceShape.insert(sliceShape.end(), data.shape.begin() + b + p.k,
                    data.shape.end());
  return p;
}

StatusOr<KernelFn> buildGatherNd(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView data = ctx.inputs[0], idx = ctx.inputs[1],
                   out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, data.dtype, "output 0"));
  std::vector<int64_t> sliceShape;
  DTCC_ASSIGN_OR_RETURN(NdParams p, ndParams(ctx, data, idx, sliceShape));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, sliceShape, "output 0"));
  const int esz = int(dtypeSize(data.dtype));
  if (esz != 1 && esz != 2 && esz != 4 && esz != 8)
    return unsupported(ctx, data.dtype);
  const int32_t site = dev.registerSite("gather_nd at '" + ctx.location + "'");
  DeviceError *error = dev.errorSlot();
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    return launched(prefix, launchGatherNd(esz, idx.dtype, p, data.data,
                                           idx.data, out.data, error, site, st));
  });
}

/// The sort of a scatter of `units` updates onto `targets` targets, in
/// compute scratch (planCudaScatterSort); nothing when there is nothing to
/// sort.
struct ScatterSort {
  CudaRadixSortPlan plan;
  ScratchSlot slot;
  bool needed = false;

  /// The regions once reserved (null pointers before).
  ScatterScratch at() const {
    ScatterScratch s;
    if (char *base = slot.as<char>()) {
      for (int b = 0; b < 2; ++b) {
        s.keys[b] = reinterpret_cast<uint32_t *>(base + plan.keys[b]);
        s.positions[b] = reinterpret_cast<uint32_t *>(base + plan.positions[b]);
      }
      s.counts = reinterpret_cast<uint32_t *>(base + plan.counts);
    }
    s.tiles = plan.tiles;
    s.passes = plan.passes;
    return s;
  }
};
StatusOr<ScatterSort> requestScatterSort(const KernelContext &ctx,
                                         int64_t units, int64_t targets,
                                         bool needed) {
  ScatterSort s;
  s.needed = needed && units > 0;
  if (s.needed) {
    auto plan = planCudaScatterSort(units, targets);
    if (!plan.isOk())
      return unimplemented(errorPrefix(ctx), plan.status().message());
    s.plan = plan.value();
  }
  DTCC_ASSIGN_OR_RETURN(s.slot,
                        requestScratchOf(ctx, ScratchUse::kCompute,
                                         s.needed ? s.plan.totalBytes : 0));
  return s;
}

/// The element types a scatter's reduction takes on the CUDA backend.
Status checkScatterType(const KernelContext &ctx, DType dtype,
                        ScatterReduction reduction) {
  const int esz = int(dtypeSize(dtype));
  bool ok = reduction == ScatterReduction::kNone
                ? (esz == 1 || esz == 2 || esz == 4 || esz == 8)
                : isCudaArithmeticType(dtype);
  return ok ? Status::ok() : unsupported(ctx, dtype);
}

StatusOr<KernelFn> buildScatterNd(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView data = ctx.inputs[0], idx = ctx.inputs[1],
                   upd = ctx.inputs[2], out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, data.dtype, "output 0"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, data.shape, "output 0"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, upd, data.dtype, "input 2"));
  std::vector<int64_t> sliceShape;
  DTCC_ASSIGN_OR_RETURN(NdParams p, ndParams(ctx, data, idx, sliceShape));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, upd, sliceShape, "input 2"));
  DTCC_ASSIGN_OR_RETURN(ScatterReduction r, cpu::readScatterReduction(ctx));
  DTCC_RETURN_IF_ERROR(checkScatterType(ctx, data.dtype, r));
  // Targets: the data's [B.., K..] slices, of p.slice elements each.
  DTCC_ASSIGN_OR_RETURN(
      ScatterSort sort,
      requestScatterSort(ctx, p.batches * p.tuples,
                         p.slice > 0 ? data.numel() / p.slice : 0,
                         p.slice > 0));
  const DType dtype = data.dtype;
  const int esz = int(dtypeSize(dtype));
  const int64_t numel = data.numel();
  const int32_t site = dev.registerSite("scatter_nd at '" + ctx.location + "'");
  DeviceError *error = dev.errorSlot();
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    if (sort.needed && !sort.slot.get())
      return unreserved(prefix);
    return launched(prefix, launchScatterNd(dtype, esz, idx.dtype, r, p,
                                            data.data, idx.data, upd.data,
                                            out.data, numel, sort.at(), error,
                                            site, st));
  });
}

StatusOr<KernelFn> buildScatterElements(CudaDevice &dev,
                                        const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView data = ctx.inputs[0], idx = ctx.inputs[1],
                   upd = ctx.inputs[2], out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, data.dtype, "output 0"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, data.shape, "output 0"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, upd, data.dtype, "input 2"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, upd, idx.shape, "input 2"));
  DTCC_RETURN_IF_ERROR(checkIndexType(ctx, idx));
  if (data.rank() != idx.rank())
    return ctx.error("expected indices of rank ", data.rank(),
                     " (the data's), got ", idx.rank());
  if (data.rank() > kMaxMapDims)
    return ctx.error("more than ", kMaxMapDims,
                     " dimensions for the CUDA backend");
  DTCC_ASSIGN_OR_RETURN(int64_t axis, cpu::getDimAttr(ctx, "axis", data.rank()));
  for (int64_t d = 0; d < data.rank(); ++d)
    if (d != axis && idx.shape[d] > data.shape[d])
      return ctx.error("indices dimension ", d, " (", idx.shape[d],
                       ") exceeds the data's (", data.shape[d], ")");
  DTCC_ASSIGN_OR_RETURN(ScatterReduction r, cpu::readScatterReduction(ctx));
  DTCC_RETURN_IF_ERROR(checkScatterType(ctx, data.dtype, r));
  ElementsParams p;
  p.rank = int(data.rank());
  p.axis = int(axis);
  p.numel = idx.numel();
  p.axisSize = data.shape[axis];
  std::vector<int64_t> strides = contiguousStrides(data.shape);
  for (int d = 0; d < p.rank; ++d) {
    p.shape[d] = idx.shape[d];
    p.dataStrides[d] = strides[d];
  }
  DTCC_ASSIGN_OR_RETURN(ScatterSort sort,
                        requestScatterSort(ctx, p.numel, data.numel(), true));
  const DType dtype = data.dtype;
  const int esz = int(dtypeSize(dtype));
  const int64_t numel = data.numel();
  const int32_t site =
      dev.registerSite("scatter_elements at '" + ctx.location + "'");
  DeviceError *error = dev.errorSlot();
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    if (sort.needed && !sort.slot.get())
      return unreserved(prefix);
    return launched(prefix, launchScatterElements(dtype, esz, idx.dtype, r, p,
                                                  data.data, idx.data, upd.data,
                                                  out.data, numel, sort.at(),
                                                  error, site, st));
  });
}

StatusOr<KernelFn> buildTopK(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView in = ctx.inputs[0], values = ctx.outputs[0],
                   indices = ctx.outputs[1];
  DTCC_ASSIGN_OR_RETURN(int64_t axis, cpu::getDimAttr(ctx, "axis", in.rank()));
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
  if (!isCudaArithmeticType(in.dtype))
    return unsupported(ctx, in.dtype);
  const bool largest = ctx.attrs.getBool("largest", true);
  const int64_t outer = product(in.shape, 0, axis), size = in.shape[axis],
                inner = product(in.shape, axis + 1), kk = *k;
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    return launched(prefix, launchTopK(in.dtype, largest, in.data, values.data,
                                       indices.as<int64_t>(), outer, size,
                                       inner, kk, st));
  });
}

} // namespace

void registerCudaTensorOpKernels(KernelRegistry &registry, CudaDevice &device) {
  CudaDevice *d = &device;
  auto add = [&](const char *name, auto build) {
    registry.add(name, [d, build](const KernelContext &ctx) {
      return build(*d, ctx);
    });
  };
  add("resize", buildResize);
  add("resize_grad", buildResizeGrad);
  add("pad_grad", buildModePad<true>);
  add("gather_nd", buildGatherNd);
  add("scatter_nd", buildScatterNd);
  add("scatter_elements", buildScatterElements);
  add("top_k", buildTopK);
}

StatusOr<KernelFn> buildCudaModePad(CudaDevice &device,
                                    const KernelContext &ctx) {
  return buildModePad<false>(device, ctx);
}

} // namespace dtcc::runtime::cuda
