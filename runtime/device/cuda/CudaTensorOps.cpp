//===- CudaTensorOps.cpp - factories of resize, N-d indexing, top_k -------===//
//
// The CUDA factories of the ops of GraphIndexingOps.td, checking each
// instruction as the CPU factories do. Tap tables (cpu::AxisMap) and a
// scatter's sort scratch are computed and allocated when the kernel is
// bound; a step only launches.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/AxisMap.h"
#include "runtime/device/cpu/CpuKernelUtils.h"
#include "runtime/device/cuda/CudaDevice.h"
#include "runtime/device/cuda/TensorOpLaunch.h"

#include <cstring>

namespace dtcc::runtime::cuda {
namespace {

using cpu::AxisMap;
using cpu::checkAllContiguous;
using cpu::checkDType;
using cpu::checkShape;
using cpu::errorPrefix;
using cpu::product;

Status launched(const std::string &prefix, cudaError_t err) {
  if (err == cudaSuccess)
    return Status::ok();
  return internalError(prefix, "CUDA launch failed: ", cudaGetErrorName(err),
                       " (", cudaGetErrorString(err), ")");
}

Status unsupported(const KernelContext &ctx, DType dtype) {
  return unimplemented(errorPrefix(ctx), "no CUDA kernel for element type ",
                       dtypeName(dtype));
}

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

/// Copies `bytes` of host data into persistent device memory.
StatusOr<void *> upload(CudaDevice &dev, const void *data, size_t bytes) {
  DTCC_ASSIGN_OR_RETURN(void *p,
                        dev.allocatePersistent(int64_t(std::max<size_t>(bytes, 8))));
  if (bytes)
    DTCC_RETURN_IF_ERROR(dev.copyHostToDevice(p, data, int64_t(bytes)));
  return p;
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

/// Uploads `maps` and binds a kernel applying them to `in` into `out`.
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
  DeviceAxisMaps d;
  d.rank = int(maps.size());
  d.outNumel = out.numel();
  std::vector<int64_t> strides = contiguousStrides(in.shape);
  for (size_t k = 0; k < maps.size(); ++k) {
    const AxisMap &m = maps[k];
    d.outShape[k] = m.outSize;
    std::vector<int64_t> taps;
    for (int64_t i : m.index)
      taps.push_back(i * strides[k]);
    DTCC_ASSIGN_OR_RETURN(void *offsets,
                          upload(dev, m.offsets.data(),
                                 m.offsets.size() * sizeof(int64_t)));
    DTCC_ASSIGN_OR_RETURN(void *t,
                          upload(dev, taps.data(), taps.size() * sizeof(int64_t)));
    DTCC_ASSIGN_OR_RETURN(void *w, upload(dev, m.weight.data(),
                                          m.weight.size() * sizeof(double)));
    d.offsets[k] = static_cast<const int64_t *>(offsets);
    d.taps[k] = static_cast<const int64_t *>(t);
    d.weights[k] = static_cast<const double *>(w);
    if (m.hasFill()) {
      DTCC_ASSIGN_OR_RETURN(void *f, upload(dev, m.fill.data(), m.fill.size()));
      d.fill[k] = static_cast<const uint8_t *>(f);
    }
  }
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
    return launched(prefix,
                    launchAxisMaps(copy, dtype, d, src, dst, fill, bits, st));
  });
}

StatusOr<KernelFn> buildResize(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(expectArity(ctx, 1, 1));
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView in = ctx.inputs[0], out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, in.dtype, "output 0"));
  if (out.rank() != in.rank())
    return ctx.error("expected an output of rank ", in.rank(), ", got ",
                     out.typeString());
  DTCC_ASSIGN_OR_RETURN(cpu::ResizeSpec spec,
                        cpu::readResizeSpec(ctx, in.shape.size()));
  auto maps = cpu::resizeAxisMaps(spec, in.shape, out.shape);
  if (!maps.isOk())
    return ctx.error(maps.status().message());
  return bindMaps(dev, ctx, *maps, in, out, spec.extrapolation);
}

StatusOr<KernelFn> buildResizeGrad(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(expectArity(ctx, 1, 1));
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView dy = ctx.inputs[0], dx = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, dx, dy.dtype, "output 0"));
  if (dx.rank() != dy.rank())
    return ctx.error("expected an output of rank ", dy.rank(), ", got ",
                     dx.typeString());
  if (!isCudaSumType(dy.dtype))
    return unsupported(ctx, dy.dtype);
  DTCC_ASSIGN_OR_RETURN(cpu::ResizeSpec spec,
                        cpu::readResizeSpec(ctx, dy.shape.size()));
  auto maps = cpu::resizeAxisMaps(spec, dx.shape, dy.shape);
  if (!maps.isOk())
    return ctx.error(maps.status().message());
  return bindMaps(dev, ctx, cpu::transposeAxisMaps(*maps), dy, dx, 0.0);
}

/// pad in modes edge/reflect/wrap (Grad false) and pad_grad (Grad true).
template <bool Grad>
StatusOr<KernelFn> buildModePad(CudaDevice &dev, const KernelContext &ctx,
                                const std::string &mode) {
  DTCC_RETURN_IF_ERROR(expectArity(ctx, Grad ? 1 : 2, 1));
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView in = ctx.inputs[0], out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, in.dtype, "output 0"));
  const TensorView &unpadded = Grad ? out : in;
  size_t rank = unpadded.shape.size();
  DTCC_ASSIGN_OR_RETURN(std::vector<int64_t> low,
                        cpu::getIntsAttr(ctx, "low", rank));
  DTCC_ASSIGN_OR_RETURN(std::vector<int64_t> high,
                        cpu::getIntsAttr(ctx, "high", rank));
  auto maps = cpu::padAxisMaps(mode, unpadded.shape, low, high);
  if (!maps.isOk())
    return ctx.error(maps.status().message());
  if (!Grad)
    return bindMaps(dev, ctx, *maps, in, out, 0.0);
  std::vector<int64_t> padded;
  for (const AxisMap &m : *maps)
    padded.push_back(m.outSize);
  DTCC_RETURN_IF_ERROR(checkShape(ctx, in, padded, "input 0"));
  if (!isCudaSumType(in.dtype))
    return unsupported(ctx, in.dtype);
  return bindMaps(dev, ctx, cpu::transposeAxisMaps(*maps), in, out, 0.0);
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
  DTCC_RETURN_IF_ERROR(expectArity(ctx, 2, 1));
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

StatusOr<ScatterReduction> readReduction(const KernelContext &ctx) {
  const std::string r = ctx.attrs.getString("reduction", "none");
  if (r == "none")
    return ScatterReduction::kNone;
  if (r == "add")
    return ScatterReduction::kAdd;
  if (r == "mul")
    return ScatterReduction::kMul;
  if (r == "max")
    return ScatterReduction::kMax;
  if (r == "min")
    return ScatterReduction::kMin;
  return ctx.error("expected reduction \"none\", \"add\", \"mul\", \"max\" or "
                   "\"min\", got \"",
                   r, "\"");
}

/// The sort scratch of a scatter of `units` updates.
StatusOr<ScatterScratch> scatterScratch(CudaDevice &dev, int64_t units) {
  ScatterScratch s;
  const int64_t n = std::max<int64_t>(units, 1);
  DTCC_ASSIGN_OR_RETURN(void *p, dev.allocatePersistent(4 * n * 8));
  s.keys = static_cast<int64_t *>(p);
  s.sortedKeys = s.keys + n;
  s.order = s.keys + 2 * n;
  s.sortedOrder = s.keys + 3 * n;
  s.tempBytes = scatterSortBytes(units);
  DTCC_ASSIGN_OR_RETURN(s.temp, dev.allocatePersistent(
                                    int64_t(std::max<size_t>(s.tempBytes, 8))));
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
  DTCC_RETURN_IF_ERROR(expectArity(ctx, 3, 1));
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView data = ctx.inputs[0], idx = ctx.inputs[1],
                   upd = ctx.inputs[2], out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, data.dtype, "output 0"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, data.shape, "output 0"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, upd, data.dtype, "input 2"));
  std::vector<int64_t> sliceShape;
  DTCC_ASSIGN_OR_RETURN(NdParams p, ndParams(ctx, data, idx, sliceShape));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, upd, sliceShape, "input 2"));
  DTCC_ASSIGN_OR_RETURN(ScatterReduction r, readReduction(ctx));
  DTCC_RETURN_IF_ERROR(checkScatterType(ctx, data.dtype, r));
  DTCC_ASSIGN_OR_RETURN(ScatterScratch sc,
                        scatterScratch(dev, p.batches * p.tuples));
  const DType dtype = data.dtype;
  const int esz = int(dtypeSize(dtype));
  const int64_t numel = data.numel();
  const int32_t site = dev.registerSite("scatter_nd at '" + ctx.location + "'");
  DeviceError *error = dev.errorSlot();
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    return launched(prefix, launchScatterNd(dtype, esz, idx.dtype, r, p,
                                            data.data, idx.data, upd.data,
                                            out.data, numel, sc, error, site,
                                            st));
  });
}

StatusOr<KernelFn> buildScatterElements(CudaDevice &dev,
                                        const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(expectArity(ctx, 3, 1));
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
  DTCC_ASSIGN_OR_RETURN(ScatterReduction r, readReduction(ctx));
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
  DTCC_ASSIGN_OR_RETURN(ScatterScratch sc, scatterScratch(dev, p.numel));
  const DType dtype = data.dtype;
  const int esz = int(dtypeSize(dtype));
  const int64_t numel = data.numel();
  const int32_t site =
      dev.registerSite("scatter_elements at '" + ctx.location + "'");
  DeviceError *error = dev.errorSlot();
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    return launched(prefix, launchScatterElements(dtype, esz, idx.dtype, r, p,
                                                  data.data, idx.data, upd.data,
                                                  out.data, numel, sc, error,
                                                  site, st));
  });
}

StatusOr<KernelFn> buildTopK(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(expectArity(ctx, 1, 2));
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
  registry.add("pad_grad", [d](const KernelContext &ctx) -> StatusOr<KernelFn> {
    StatusOr<std::string> mode = ctx.attrs.getString("mode");
    if (!mode.isOk())
      return ctx.error(mode.status().message());
    return buildModePad<true>(*d, ctx, *mode);
  });
  add("gather_nd", buildGatherNd);
  add("scatter_nd", buildScatterNd);
  add("scatter_elements", buildScatterElements);
  add("top_k", buildTopK);
}

StatusOr<KernelFn> buildCudaModePad(CudaDevice &device,
                                    const KernelContext &ctx,
                                    const std::string &mode) {
  return buildModePad<false>(device, ctx, mode);
}

} // namespace dtcc::runtime::cuda
