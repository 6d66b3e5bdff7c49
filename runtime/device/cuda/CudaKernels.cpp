//===- CudaKernels.cpp - factories of the CUDA kernels --------------------===//
//
// Each factory checks an instruction as its CPU counterpart does (same
// helpers, same messages), computes the launch's layout once, and returns a
// closure that only launches on the compute stream. Kernels the CUDA
// backend lacks are absent from the registry, so a program using them fails
// to load with the list of missing kernels.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/CpuKernelUtils.h"
#include "runtime/device/cpu/GridSamplePlan.h"
#include "runtime/device/cpu/RoiAlignPlan.h"
#include "runtime/device/cuda/CudaCheck.h"
#include "runtime/device/cuda/CudaDevice.h"
#include "runtime/device/cuda/CudaFactory.h"
#include "runtime/device/cuda/LaunchConfig.h"
#ifdef DTCC_HAVE_CUDNN
#include "runtime/device/cuda/CudaConv.h"
#endif
#include "runtime/device/cuda/NormPoolLaunch.h"
#include "runtime/exec/CudaScratch.h"

#include <cmath>

namespace dtcc::runtime::cuda {
// The scratch sizes runtime/exec/CudaScratch.h computes without CUDA.
static_assert(sizeof(AdamwTensor) == kCudaAdamwEntryBytes &&
                  alignof(AdamwTensor) <= kCudaAdamwEntryAlignment,
              "CudaScratch.h sizes the AdamW table's entries");
static_assert(sizeof(SumSquaresTensor) == kCudaSumSquaresEntryBytes &&
                  alignof(SumSquaresTensor) <= kCudaSumSquaresEntryAlignment,
              "CudaScratch.h sizes the global_sum_squares table's entries");
static_assert(kScatterTileThreads == CudaScatterAddPlan::kTileThreads &&
                  kScatterItemsPerThread == CudaScatterAddPlan::kItemsPerThread &&
                  kScatterRadix == CudaScatterAddPlan::kRadix,
              "CudaScratch.h lays out the scatter_add sort");

StatusOr<ReducePlan> reduceLaunchPlan(const CudaReducePlan &r) {
  if (r.kept.size() > size_t(kMaxLayoutDims) ||
      r.reduced.size() > size_t(kMaxLayoutDims))
    return invalidArgument("too many dimensions for the CUDA reduction");
  ReducePlan p;
  p.outNumel = r.outNumel;
  p.keptRank = int(r.kept.size());
  for (size_t i = 0; i < r.kept.size(); ++i) {
    p.keptShape[i] = r.kept[i].first;
    p.keptStrides[i] = r.kept[i].second;
  }
  p.reducedRank = int(r.reduced.size());
  for (size_t i = 0; i < r.reduced.size(); ++i) {
    p.reducedShape[i] = r.reduced[i].first;
    p.reducedStrides[i] = r.reduced[i].second;
  }
  p.reducedNumel = r.reducedNumel;
  p.rowTail = r.rowTail;
  p.slices = r.slices;
  return p;
}
} // namespace dtcc::runtime::cuda

namespace dtcc::runtime::cuda {
namespace {

using cpu::checkAllContiguous;
using cpu::checkContiguous;
using cpu::checkDType;
using cpu::checkShape;
using cpu::errorPrefix;
using cpu::getDimAttr;
using cpu::getIntsAttr;
using cpu::product;
using cpu::shapeString;
using cpu::StridedRead;
using cpu::broadcastInDimRead;
using cpu::reverseRead;
using cpu::sliceRead;
using cpu::transposeRead;

/// A CPU-walker layout converted for the GPU (at most kMaxLayoutDims).
template <int N>
StatusOr<Layout> toLayout(const KernelContext &ctx,
                          const cpu::StridedLayout<N> &s) {
  static_assert(N <= kMaxOperands);
  if (s.rank > kMaxLayoutDims)
    return ctx.error("more than ", kMaxLayoutDims,
                     " non-mergeable dimensions for the CUDA backend");
  Layout l;
  l.rank = s.rank;
  l.operands = N;
  l.numel = s.numel;
  for (int d = 0; d < s.rank; ++d) {
    l.shape[d] = s.shape[d];
    for (int k = 0; k < N; ++k)
      l.strides[d][k] = s.strides[d][k];
  }
  l.linear = s.isLinear();
  prepareLayout(l);
  return l;
}

//===-- elementwise -------------------------------------------------------===//

StatusOr<KernelFn> buildUnary(CudaDevice &dev, const KernelContext &ctx,
                              UnaryOp op, bool floatOnly) {
  DTCC_ASSIGN_OR_RETURN(auto s, cpu::elementwiseLayout<2>(ctx));
  DTCC_ASSIGN_OR_RETURN(Layout l, toLayout<2>(ctx, s));
  const TensorView in = ctx.inputs[0], out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, in.dtype, "output 0"));
  const bool ok = op == UnaryOp::kNot
                      ? in.dtype == DType::kBool
                      : (floatOnly ? isCudaFloatType(in.dtype) ||
                                         in.dtype == DType::kF64
                                   : isCudaArithmeticType(in.dtype));
  if (!ok)
    return unsupported(ctx, in.dtype);
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    return launched(prefix, launchUnary(op, in.dtype, l, out.data, in.data, st));
  });
}

/// The element types a binary kernel takes, as the CPU backend's sets (less
/// the types the CUDA backend does not instantiate).
enum class BinaryTypes { kNumeric, kFloats, kIntsAndBool, kInts };

/// The integer types of the binary kernels: every width, signed and
/// unsigned, as on the CPU (ONNX's Add, Div, Mod, Max, BitShift... of uint8).
bool isCudaIntType(DType dtype) {
  switch (dtype) {
  case DType::kI8: case DType::kI16: case DType::kI32: case DType::kI64:
  case DType::kU8: case DType::kU16: case DType::kU32: case DType::kU64:
    return true;
  default:
    return false;
  }
}

/// The float types of softmax, norms, cross-entropy, dropout and random:
/// f32, f16 and bf16 (float sums) and f64 (double sums), as on the CPU.
bool isRowType(DType dtype) {
  return isCudaFloatType(dtype) || dtype == DType::kF64;
}

StatusOr<KernelFn> buildBinary(CudaDevice &dev, const KernelContext &ctx,
                               BinaryOp op, BinaryTypes types) {
  DTCC_ASSIGN_OR_RETURN(auto s, cpu::elementwiseLayout<3>(ctx));
  DTCC_ASSIGN_OR_RETURN(Layout l, toLayout<3>(ctx, s));
  const TensorView a = ctx.inputs[0], b = ctx.inputs[1], out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, b, a.dtype, "input 1"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, a.dtype, "output 0"));
  bool ok = false;
  switch (types) {
  case BinaryTypes::kNumeric:
    ok = isCudaArithmeticType(a.dtype) || isCudaIntType(a.dtype);
    break;
  case BinaryTypes::kFloats:
    ok = isCudaFloatType(a.dtype) || a.dtype == DType::kF64;
    break;
  case BinaryTypes::kIntsAndBool:
    ok = isCudaIntType(a.dtype) || a.dtype == DType::kBool;
    break;
  case BinaryTypes::kInts: ok = isCudaIntType(a.dtype); break;
  }
  if (!ok)
    return unsupported(ctx, a.dtype);
  // An integer division by zero is reported as the CPU backend does, at
  // the next synchronize (the kernel writes 0).
  DeviceError *error = nullptr;
  int32_t site = 0;
  if ((op == BinaryOp::kDiv || op == BinaryOp::kRem) &&
      isCudaIntType(a.dtype)) {
    error = dev.errorSlot();
    site = dev.registerSite(ctx.kernel + " at '" + ctx.location + "'");
  }
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    return launched(prefix, launchBinary(op, a.dtype, l, out.data, a.data,
                                         b.data, st, error, site));
  });
}

StatusOr<KernelFn> buildCompare(CudaDevice &dev, const KernelContext &ctx,
                                CompareOp op) {
  DTCC_ASSIGN_OR_RETURN(auto s, cpu::elementwiseLayout<3>(ctx));
  DTCC_ASSIGN_OR_RETURN(Layout l, toLayout<3>(ctx, s));
  const TensorView a = ctx.inputs[0], b = ctx.inputs[1], out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, b, a.dtype, "input 1"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, DType::kBool, "output 0"));
  if (!isCudaArithmeticType(a.dtype) && !isCudaIntType(a.dtype) &&
      a.dtype != DType::kBool)
    return unsupported(ctx, a.dtype);
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    return launched(prefix,
                    launchCompare(op, a.dtype, l, out.data, a.data, b.data, st));
  });
}

/// is_nan / is_inf: a float input, a bool output.
StatusOr<KernelFn> buildPredicate(CudaDevice &dev, const KernelContext &ctx,
                                  PredicateOp op) {
  DTCC_ASSIGN_OR_RETURN(auto s, cpu::elementwiseLayout<2>(ctx));
  DTCC_ASSIGN_OR_RETURN(Layout l, toLayout<2>(ctx, s));
  const TensorView in = ctx.inputs[0], out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, DType::kBool, "output 0"));
  if (!isCudaFloatType(in.dtype) && in.dtype != DType::kF64)
    return unsupported(ctx, in.dtype);
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    return launched(prefix,
                    launchPredicate(op, in.dtype, l, out.data, in.data, st));
  });
}

StatusOr<KernelFn> buildSelect(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(auto s, cpu::elementwiseLayout<4>(ctx));
  DTCC_ASSIGN_OR_RETURN(Layout l, toLayout<4>(ctx, s));
  const TensorView c = ctx.inputs[0], t = ctx.inputs[1], f = ctx.inputs[2],
                   out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, c, DType::kBool, "input 0"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, f, t.dtype, "input 2"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, t.dtype, "output 0"));
  const int size = int(dtypeSize(t.dtype));
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    return launched(prefix, launchSelect(size, l, out.data, c.data, t.data,
                                         f.data, st));
  });
}

StatusOr<KernelFn> buildCast(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(auto s, cpu::elementwiseLayout<2>(ctx));
  DTCC_ASSIGN_OR_RETURN(Layout l, toLayout<2>(ctx, s));
  const TensorView in = ctx.inputs[0], out = ctx.outputs[0];
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    return launched(prefix,
                    launchCast(out.dtype, in.dtype, l, out.data, in.data, st));
  });
}

/// A strided copy of `shape` from (src + srcOffset elements, srcStrides)
/// into dst with dstStrides.
StatusOr<KernelFn> buildCopy(CudaDevice &dev, const KernelContext &ctx,
                             const std::vector<int64_t> &shape, void *dst,
                             const std::vector<int64_t> &dstStrides,
                             const void *src, int64_t srcOffset,
                             const std::vector<int64_t> &srcStrides,
                             DType dtype) {
  cpu::StridedLayout<2> s;
  if (!cpu::buildLayout<2>(shape, {&dstStrides, &srcStrides}, s))
    return ctx.error("too many dimensions");
  DTCC_ASSIGN_OR_RETURN(Layout l, toLayout<2>(ctx, s));
  const int size = int(dtypeSize(dtype));
  const void *from = static_cast<const char *>(src) + srcOffset * size;
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn(
      [=] { return launched(prefix, launchCopy(size, l, dst, from, st)); });
}

/// `copy_to_host` and `copy_to_device` (an offloaded optimizer step): a
/// cudaMemcpyAsync on the copy stream between device memory and pinned host
/// memory. A gradient goes out once the compute stream has made it (the
/// copy stream waits for the compute work issued so far) while the backward
/// pass goes on; a parameter comes in before the compute work issued after
/// it (the compute stream waits for the copy stream). The host kernels wait
/// for the copy stream (Device::waitForTransfers) before they run.
StatusOr<KernelFn> buildTransfer(CudaDevice &dev, const KernelContext &ctx,
                                 bool toHost) {
  const TensorView in = ctx.inputs[0], out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkContiguous(ctx, in, "input 0"));
  DTCC_RETURN_IF_ERROR(checkContiguous(ctx, out, "output 0"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, in.dtype, "output 0"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, in.shape, "output 0"));
  CudaDevice *d = &dev;
  const size_t bytes = size_t(in.sizeInBytes());
  void *dst = out.data;
  const void *src = in.data;
  std::string prefix = errorPrefix(ctx);
  if (toHost)
    return KernelFn([d, dst, src, bytes, prefix]() -> Status {
      DTCC_RETURN_IF_ERROR(d->waitsForCompute(d->copyStream()));
      cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost,
                                        d->copyStream());
      if (err != cudaSuccess)
        return internalError(prefix, "cudaMemcpyAsync to the host: ",
                             cudaGetErrorString(err));
      return Status::ok();
    });
  return KernelFn([d, dst, src, bytes, prefix]() -> Status {
    // Device memory the compute stream may still read or write.
    DTCC_RETURN_IF_ERROR(d->waitsForCompute(d->copyStream()));
    cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice,
                                      d->copyStream());
    if (err != cudaSuccess)
      return internalError(prefix, "cudaMemcpyAsync to the device: ",
                           cudaGetErrorString(err));
    return d->computeWaitsForTransfers();
  });
}

StatusOr<KernelFn> buildCopyKernel(CudaDevice &dev, const KernelContext &ctx) {
  const TensorView in = ctx.inputs[0], out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(cpu::checkStrides(ctx, in, "input 0"));
  DTCC_RETURN_IF_ERROR(checkContiguous(ctx, out, "output 0"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, in.dtype, "output 0"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, in.shape, "output 0"));
  return buildCopy(dev, ctx, out.shape, out.data,
                   contiguousStrides(out.shape), in.data, 0, in.strides,
                   in.dtype);
}

/// The copy a StridedRead (CpuKernelUtils.h) describes, on the device.
StatusOr<KernelFn> buildStridedRead(CudaDevice &dev, const KernelContext &ctx,
                                    StatusOr<StridedRead> read) {
  if (!read.isOk())
    return read.status();
  const StridedRead &r = read.value();
  return buildCopy(dev, ctx, r.shape, ctx.outputs[0].data,
                   contiguousStrides(r.shape), ctx.inputs[0].data, r.offset,
                   r.strides, ctx.inputs[0].dtype);
}

StatusOr<KernelFn> buildBroadcastInDim(CudaDevice &dev,
                                       const KernelContext &ctx) {
  return buildStridedRead(dev, ctx, broadcastInDimRead(ctx));
}

StatusOr<KernelFn> buildTranspose(CudaDevice &dev, const KernelContext &ctx) {
  return buildStridedRead(dev, ctx, transposeRead(ctx));
}

StatusOr<KernelFn> buildSlice(CudaDevice &dev, const KernelContext &ctx) {
  return buildStridedRead(dev, ctx, sliceRead(ctx));
}

/// reverse: a copy reading the reversed dims with negative strides.
StatusOr<KernelFn> buildReverse(CudaDevice &dev, const KernelContext &ctx) {
  return buildStridedRead(dev, ctx, reverseRead(ctx));
}

/// pad (input, value -> output): the value broadcast over the output (a copy
/// with stride 0, so the value stays on the device), then the input's part.
StatusOr<KernelFn> buildPad(CudaDevice &dev, const KernelContext &ctx) {
  const std::string mode = ctx.attrs.getString("mode", "constant");
  if (mode != "constant")
    return buildCudaModePad(dev, ctx);
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView in = ctx.inputs[0], value = ctx.inputs[1],
                   out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, value, in.dtype, "input 1"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, in.dtype, "output 0"));
  if (value.numel() != 1)
    return ctx.error("expected a padding value of one element, got ",
                     value.typeString());
  const size_t rank = in.shape.size();
  DTCC_ASSIGN_OR_RETURN(auto low, getIntsAttr(ctx, "low", rank));
  DTCC_ASSIGN_OR_RETURN(auto high, getIntsAttr(ctx, "high", rank));
  std::vector<int64_t> shape(rank), region(rank);
  std::vector<int64_t> inStrides = contiguousStrides(in.shape);
  int64_t srcOffset = 0, dstOffset = 0;
  for (size_t d = 0; d < rank; ++d) {
    shape[d] = in.shape[d] + low[d] + high[d];
    if (shape[d] < 0)
      return ctx.error("dimension ", d, " pads to a negative size ", shape[d]);
  }
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, shape, "output 0"));
  std::vector<int64_t> outStrides = contiguousStrides(shape);
  for (size_t d = 0; d < rank; ++d) {
    const int64_t srcStart = std::max<int64_t>(0, -low[d]);
    const int64_t dstStart = std::max<int64_t>(0, low[d]);
    region[d] = std::max<int64_t>(
        0, std::min(in.shape[d] - srcStart, shape[d] - dstStart));
    srcOffset += srcStart * inStrides[d];
    dstOffset += dstStart * outStrides[d];
  }
  std::vector<KernelFn> parts;
  if (out.numel() > 0) {
    DTCC_ASSIGN_OR_RETURN(
        KernelFn fill,
        buildCopy(dev, ctx, shape, out.data, outStrides, value.data, 0,
                  std::vector<int64_t>(rank, 0), in.dtype));
    parts.push_back(std::move(fill));
  }
  if (product(region) > 0) {
    void *dst = static_cast<char *>(out.data) + dstOffset * dtypeSize(in.dtype);
    DTCC_ASSIGN_OR_RETURN(KernelFn copy,
                          buildCopy(dev, ctx, region, dst, outStrides, in.data,
                                    srcOffset, inStrides, in.dtype));
    parts.push_back(std::move(copy));
  }
  return KernelFn([parts] {
    for (const KernelFn &f : parts)
      DTCC_RETURN_IF_ERROR(f());
    return Status::ok();
  });
}

/// concat: one strided copy per input into its part of the output.
StatusOr<KernelFn> buildConcat(CudaDevice &dev, const KernelContext &ctx) {
  if (ctx.outputs.size() != 1 || ctx.inputs.empty())
    return ctx.error("expected inputs and 1 output");
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView out = ctx.outputs[0];
  DTCC_ASSIGN_OR_RETURN(int64_t dim, getDimAttr(ctx, "dim", out.rank()));
  std::vector<KernelFn> parts;
  std::vector<int64_t> outStrides = contiguousStrides(out.shape);
  int64_t at = 0;
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    const TensorView &in = ctx.inputs[i];
    DTCC_RETURN_IF_ERROR(checkDType(ctx, in, out.dtype, "input"));
    std::vector<int64_t> expect = out.shape;
    expect[dim] = in.rank() == out.rank() ? in.shape[dim] : -1;
    DTCC_RETURN_IF_ERROR(checkShape(ctx, in, expect, "input " + std::to_string(i)));
    if (in.numel() > 0) {
      void *dst = static_cast<char *>(out.data) +
                  at * outStrides[dim] * dtypeSize(out.dtype);
      DTCC_ASSIGN_OR_RETURN(KernelFn fn,
                            buildCopy(dev, ctx, in.shape, dst, outStrides,
                                      in.data, 0, contiguousStrides(in.shape),
                                      in.dtype));
      parts.push_back(std::move(fn));
    }
    at += in.shape[dim];
  }
  if (at != out.shape[dim])
    return ctx.error("inputs add up to ", at, " along dim ", dim, ", output has ",
                     out.shape[dim]);
  return KernelFn([parts] {
    for (const KernelFn &f : parts)
      DTCC_RETURN_IF_ERROR(f());
    return Status::ok();
  });
}

StatusOr<KernelFn> buildIota(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView out = ctx.outputs[0];
  DTCC_ASSIGN_OR_RETURN(int64_t dim, getDimAttr(ctx, "dim", out.rank()));
  if (!isCudaArithmeticType(out.dtype))
    return unsupported(ctx, out.dtype);
  const int64_t outer = product(out.shape, 0, dim), size = out.shape[dim],
                inner = product(out.shape, dim + 1);
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    return launched(prefix,
                    launchIota(out.dtype, out.data, outer, size, inner, st));
  });
}

//===-- reductions --------------------------------------------------------===//

template <ReduceOp Op>
StatusOr<KernelFn> buildReduce(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView in = ctx.inputs[0], out = ctx.outputs[0];
  // sum_squares of f16 or bf16 may give f32 (the sum of its cast's squares).
  constexpr bool kSquares = Op == ReduceOp::kSumSquares;
  const bool widened = kSquares && isF32OfHalf(in.dtype, out.dtype);
  if (!widened)
    DTCC_RETURN_IF_ERROR(checkDType(ctx, out, in.dtype, "output 0"));
  if (!isCudaArithmeticType(in.dtype) ||
      (kSquares && !isCudaFloatType(in.dtype) && in.dtype != DType::kF64))
    return unsupported(ctx, in.dtype);
  DTCC_ASSIGN_OR_RETURN(std::vector<int64_t> dims, getIntsAttr(ctx, "dims"));
  auto planned = planCudaReduce(in.shape, dims);
  if (!planned.isOk())
    return ctx.error(planned.status().message());
  const CudaReducePlan &r = *planned;
  std::vector<int64_t> shape;
  for (size_t d = 0; d < in.shape.size(); ++d)
    if (std::find(dims.begin(), dims.end(), int64_t(d)) == dims.end())
      shape.push_back(in.shape[d]);
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, shape, "output 0"));
  auto launchPlan = reduceLaunchPlan(r);
  if (!launchPlan.isOk())
    return ctx.error(launchPlan.status().message());
  const ReducePlan p = *launchPlan;
  // The slices' partial results: compute-stream scratch.
  ScratchSlot partials;
  if (r.scratchBytes > 0) {
    DTCC_ASSIGN_OR_RETURN(ScratchSet set, cudaKernelScratch(ctx));
    DTCC_ASSIGN_OR_RETURN(std::vector<ScratchSlot> scratch,
                          ctx.requestScratch(std::move(set)));
    partials = scratch.at(0);
  }
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    return launched(prefix, launchReduce(Op, in.dtype, out.dtype, p, in.data,
                                         out.data, partials.get(), st));
  });
}

/// global_sum_squares: every operand in one launch (launchGlobalSumSquares)
/// from a table of the operands, persistent scratch uploaded when the
/// reservation is made; the partial sums are compute scratch.
StatusOr<KernelFn> buildGlobalSumSquares(CudaDevice &dev,
                                         const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(cpu::checkGlobalSumSquares(ctx).status());
  const TensorView out = ctx.outputs[0];
  if (ctx.inputs.size() > size_t(std::numeric_limits<int>::max()))
    return ctx.error("too many operands for one launch");
  auto table = std::make_shared<std::vector<SumSquaresTensor>>();
  int64_t chunks = 0;
  for (const TensorView &in : ctx.inputs) {
    SumSquaresTensor t;
    t.data = in.data;
    t.n = in.numel();
    t.firstChunk = chunks;
    t.dtype = int32_t(in.dtype);
    table->push_back(t);
    chunks += cudaSumSquaresChunks(t.n);
  }
  if (chunks >= (int64_t(1) << 31))
    return ctx.error("too many elements for one launch");
  DTCC_ASSIGN_OR_RETURN(ScratchSet set, cudaKernelScratch(ctx));
  DTCC_ASSIGN_OR_RETURN(std::vector<ScratchSlot> scratch,
                        ctx.requestScratch(std::move(set)));
  const ScratchSlot entries = scratch.at(0), partials = scratch.at(1);
  // On the compute stream, synchronized: before any run.
  CudaDevice *d = &dev;
  ctx.scratch->whenReserved([d, entries, table]() -> Status {
    DTCC_RETURN_IF_ERROR(d->copyHostToDevice(
        entries.get(), table->data(),
        int64_t(table->size() * sizeof(SumSquaresTensor))));
    return Status::ok();
  });
  const int count = int(ctx.inputs.size());
  const DType outType = out.dtype;
  void *result = out.data;
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    if (!entries.get() || !partials.get())
      return unreserved(prefix);
    return launched(prefix,
                    launchGlobalSumSquares(entries.as<SumSquaresTensor>(),
                                           count, chunks, kCudaSumSquaresChunk,
                                           outType, partials.get(), result,
                                           st));
  });
}

template <bool IsMax>
StatusOr<KernelFn> buildArg(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView in = ctx.inputs[0], out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, DType::kI64, "output 0"));
  DTCC_ASSIGN_OR_RETURN(int64_t dim, getDimAttr(ctx, "dim", in.rank()));
  std::vector<int64_t> shape = in.shape;
  shape.erase(shape.begin() + dim);
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, shape, "output 0"));
  const int64_t outer = product(in.shape, 0, dim), size = in.shape[dim],
                inner = product(in.shape, dim + 1);
  if (size == 0 && out.numel() > 0)
    return ctx.error("cannot take the index of an extreme over an empty "
                     "dimension ",
                     dim);
  if (!isCudaArithmeticType(in.dtype))
    return unsupported(ctx, in.dtype);
  const bool last = ctx.attrs.getBool("select_last_index");
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    return launched(prefix, launchArgExtreme(IsMax, last, in.dtype, in.data,
                                             out.as<int64_t>(), outer, size,
                                             inner, st));
  });
}

StatusOr<KernelFn> buildCumsum(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView in = ctx.inputs[0], out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, in.dtype, "output 0"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, in.shape, "output 0"));
  DTCC_ASSIGN_OR_RETURN(int64_t dim, getDimAttr(ctx, "dim", in.rank()));
  if (!isCudaArithmeticType(in.dtype))
    return unsupported(ctx, in.dtype);
  const int64_t outer = product(in.shape, 0, dim), size = in.shape[dim],
                inner = product(in.shape, dim + 1);
  const bool exclusive = ctx.attrs.getBool("exclusive");
  const bool reverse = ctx.attrs.getBool("reverse");
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    return launched(prefix, launchCumsum(in.dtype, in.data, out.data, outer,
                                         size, inner, exclusive, reverse, st));
  });
}

//===-- NN: softmax, norms, cross-entropy ----------------------------------===//

template <bool Log, bool Grad>
StatusOr<KernelFn> buildSoftmax(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView x = ctx.inputs[0], out = ctx.outputs[0];
  for (size_t i = 1; i < ctx.inputs.size(); ++i) {
    DTCC_RETURN_IF_ERROR(checkDType(ctx, ctx.inputs[i], x.dtype, "input 1"));
    DTCC_RETURN_IF_ERROR(checkShape(ctx, ctx.inputs[i], x.shape, "input 1"));
  }
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, x.dtype, "output 0"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, x.shape, "output 0"));
  DTCC_ASSIGN_OR_RETURN(int64_t dim, getDimAttr(ctx, "dim", x.rank()));
  if (!isRowType(x.dtype))
    return unsupported(ctx, x.dtype);
  const int64_t outer = product(x.shape, 0, dim), size = x.shape[dim],
                inner = product(x.shape, dim + 1);
  const void *dy = Grad ? ctx.inputs[1].data : nullptr;
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    if constexpr (Grad)
      return launched(prefix, launchSoftmaxGrad(x.dtype, Log, x.data, dy,
                                                out.data, outer, size, inner,
                                                st));
    else
      return launched(prefix, launchSoftmax(x.dtype, Log, x.data, out.data,
                                            outer, size, inner, st));
  });
}

template <bool Layer>
StatusOr<KernelFn> buildNorm(CudaDevice &dev, const KernelContext &ctx) {
  const size_t outputs = Layer ? 3 : 2;
  if (ctx.inputs.size() < 2 || ctx.inputs.size() > (Layer ? 3u : 2u) ||
      ctx.outputs.size() != outputs)
    return ctx.error("expected x, scale", Layer ? "[, bias]" : "", " and ",
                     outputs, " outputs");
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView x = ctx.inputs[0];
  DTCC_ASSIGN_OR_RETURN(int64_t axis, getDimAttr(ctx, "axis", x.rank()));
  StatusOr<double> eps = ctx.attrs.getFloat("epsilon");
  if (!eps.isOk())
    return ctx.error(eps.status().message());
  std::vector<int64_t> normShape(x.shape.begin() + axis, x.shape.end());
  for (size_t i = 1; i < ctx.inputs.size(); ++i) {
    DTCC_RETURN_IF_ERROR(checkDType(ctx, ctx.inputs[i], x.dtype, "input"));
    DTCC_RETURN_IF_ERROR(checkShape(ctx, ctx.inputs[i], normShape, "input"));
  }
  DTCC_RETURN_IF_ERROR(checkDType(ctx, ctx.outputs[0], x.dtype, "output 0"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, ctx.outputs[0], x.shape, "output 0"));
  const int64_t rows = product(x.shape, 0, axis), cols = product(x.shape, axis);
  const DType statType = ctx.outputs[1].dtype;
  for (size_t i = 1; i < outputs; ++i) {
    if (!isRowType(ctx.outputs[i].dtype) ||
        ctx.outputs[i].dtype != statType || ctx.outputs[i].numel() != rows)
      return ctx.error("expected output ", i, " with ", rows,
                       " f32/f64/f16/bf16 elements, got ",
                       ctx.outputs[i].typeString());
  }
  if (!isRowType(x.dtype))
    return unsupported(ctx, x.dtype);
  const void *scale = ctx.inputs[1].data;
  const void *bias = ctx.inputs.size() == 3 ? ctx.inputs[2].data : nullptr;
  void *y = ctx.outputs[0].data;
  void *mean = Layer ? ctx.outputs[1].data : nullptr;
  void *rstd = ctx.outputs[Layer ? 2 : 1].data;
  const double e = *eps;
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    return launched(prefix, launchNorm(Layer, x.dtype, statType, x.data, scale,
                                       bias, y, mean, rstd, rows, cols, e, st));
  });
}

/// layer_norm_grad and rms_norm_grad (`WithDx`), or their parameter
/// gradients alone (layer_norm_param_grad, rms_norm_param_grad: no scale
/// input, no dx output).
template <bool Layer, bool WithDx>
StatusOr<KernelFn> buildNormGrad(CudaDevice &dev, const KernelContext &ctx) {
  const size_t stats = Layer ? 2 : 1;
  const size_t firstStat = WithDx ? 2 : 1, firstParam = WithDx ? 1 : 0;
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView x = ctx.inputs[0];
  DTCC_ASSIGN_OR_RETURN(int64_t axis, getDimAttr(ctx, "axis", x.rank()));
  const std::vector<int64_t> normShape(x.shape.begin() + axis, x.shape.end());
  const int64_t rows = product(x.shape, 0, axis), cols = product(x.shape, axis);
  const DType statType = ctx.inputs[firstStat].dtype;
  if (WithDx) {
    DTCC_RETURN_IF_ERROR(checkDType(ctx, ctx.inputs[1], x.dtype, "input 1"));
    DTCC_RETURN_IF_ERROR(checkShape(ctx, ctx.inputs[1], normShape, "input 1"));
  }
  for (size_t i = firstStat; i < firstStat + stats; ++i)
    if (!isRowType(ctx.inputs[i].dtype) ||
        ctx.inputs[i].dtype != statType || ctx.inputs[i].numel() != rows)
      return ctx.error("expected input ", i, " with ", rows,
                       " f32/f64/f16/bf16 elements, got ",
                       ctx.inputs[i].typeString());
  const TensorView dy = ctx.inputs[firstStat + stats];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, dy, x.dtype, "dy"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, dy, x.shape, "dy"));
  if (WithDx) {
    DTCC_RETURN_IF_ERROR(checkDType(ctx, ctx.outputs[0], x.dtype, "output 0"));
    DTCC_RETURN_IF_ERROR(checkShape(ctx, ctx.outputs[0], x.shape, "output 0"));
  }
  for (size_t i = firstParam; i < ctx.outputs.size(); ++i) {
    DTCC_RETURN_IF_ERROR(checkDType(ctx, ctx.outputs[i], x.dtype, "output"));
    DTCC_RETURN_IF_ERROR(checkShape(ctx, ctx.outputs[i], normShape, "output"));
  }
  if (!isRowType(x.dtype))
    return unsupported(ctx, x.dtype);
  // The dscale/dbias partial sums: compute-stream scratch.
  DTCC_ASSIGN_OR_RETURN(ScratchSet set, cudaKernelScratch(ctx));
  DTCC_ASSIGN_OR_RETURN(std::vector<ScratchSlot> scratch,
                        ctx.requestScratch(std::move(set)));
  const ScratchSlot partials = scratch.at(0);
  const int64_t slices = cudaNormGradSlices(rows);
  const void *scale = WithDx ? ctx.inputs[1].data : nullptr;
  const void *mean = Layer ? ctx.inputs[firstStat].data : nullptr;
  const void *rstd = ctx.inputs[firstStat + stats - 1].data;
  void *dx = WithDx ? ctx.outputs[0].data : nullptr;
  void *dscale = ctx.outputs[firstParam].data;
  void *dbias = Layer ? ctx.outputs[firstParam + 1].data : nullptr;
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    return launched(prefix, launchNormGrad(Layer, x.dtype, statType, x.data,
                                           scale, mean, rstd, dy.data, dx,
                                           dscale, dbias, rows, cols, slices,
                                           partials.get(), st));
  });
}

template <bool Grad>
StatusOr<KernelFn> buildCrossEntropy(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView logits = ctx.inputs[0], labels = ctx.inputs[1],
                   out = ctx.outputs[0];
  if (logits.rank() != 2)
    return ctx.error("expected logits of rank 2, got ", logits.typeString());
  const int64_t n = logits.shape[0], c = logits.shape[1];
  DTCC_RETURN_IF_ERROR(checkShape(ctx, labels, {n}, "input 1"));
  // The loss (forward) or dloss (gradient): the logits' type, or f32 for
  // half logits (the loss of their f32 cast: dtcc-fold-narrow-reads).
  const TensorView &loss = Grad ? ctx.inputs[2] : out;
  const char *lossName = Grad ? "input 2" : "output 0";
  DTCC_RETURN_IF_ERROR(checkShape(ctx, loss, {n}, lossName));
  if (!isF32OfHalf(logits.dtype, loss.dtype))
    DTCC_RETURN_IF_ERROR(checkDType(ctx, loss, logits.dtype, lossName));
  if (Grad) {
    DTCC_RETURN_IF_ERROR(checkShape(ctx, out, logits.shape, "output 0"));
    DTCC_RETURN_IF_ERROR(checkDType(ctx, out, logits.dtype, "output 0"));
  }
  const DType lossType = loss.dtype;
  if (labels.dtype != DType::kI32 && labels.dtype != DType::kI64)
    return ctx.error("expected i32 or i64 labels, got ",
                     dtypeName(labels.dtype));
  if (!isRowType(logits.dtype))
    return unsupported(ctx, logits.dtype);
  const int64_t ignore = ctx.attrs.getInt("ignore_index", -100);
  const void *dloss = Grad ? ctx.inputs[2].data : nullptr;
  const int32_t site =
      dev.registerSite(ctx.kernel + " at '" + ctx.location + "'");
  DeviceError *error = dev.errorSlot();
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    if constexpr (Grad)
      return launched(prefix, launchCrossEntropyGrad(
                                  logits.dtype, lossType, labels.dtype,
                                  logits.data, labels.data, dloss, out.data, n,
                                  c, ignore, error, site, st));
    else
      return launched(prefix, launchCrossEntropy(
                                  logits.dtype, lossType, labels.dtype,
                                  logits.data, labels.data, out.data, n, c,
                                  ignore, error, site, st));
  });
}

//===-- gather / scatter_add -----------------------------------------------===//

StatusOr<KernelFn> buildGather(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView data = ctx.inputs[0], idx = ctx.inputs[1], out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, data.dtype, "output 0"));
  DTCC_ASSIGN_OR_RETURN(int64_t axis, getDimAttr(ctx, "axis", data.rank()));
  std::vector<int64_t> shape(data.shape.begin(), data.shape.begin() + axis);
  shape.insert(shape.end(), idx.shape.begin(), idx.shape.end());
  shape.insert(shape.end(), data.shape.begin() + axis + 1, data.shape.end());
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, shape, "output 0"));
  if (idx.dtype != DType::kI32 && idx.dtype != DType::kI64)
    return ctx.error("expected i32 or i64 indices, got ", dtypeName(idx.dtype));
  const int64_t outer = product(data.shape, 0, axis), size = data.shape[axis],
                inner = product(data.shape, axis + 1), count = idx.numel();
  const int esz = int(dtypeSize(data.dtype));
  const int32_t site = dev.registerSite("gather at '" + ctx.location + "'");
  DeviceError *error = dev.errorSlot();
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    return launched(prefix, launchGather(esz, idx.dtype, data.data, idx.data,
                                         out.data, outer, size, inner, count,
                                         error, site, st));
  });
}

StatusOr<KernelFn> buildGatherElements(CudaDevice &dev,
                                       const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView data = ctx.inputs[0], idx = ctx.inputs[1],
                   out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, data.dtype, "output 0"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, idx.shape, "output 0"));
  if (data.rank() != idx.rank())
    return ctx.error("expected indices of rank ", data.rank(),
                     " (the data's), got ", idx.rank());
  DTCC_ASSIGN_OR_RETURN(int64_t axis, getDimAttr(ctx, "axis", data.rank()));
  for (int64_t d = 0; d < data.rank(); ++d)
    if (d != axis && idx.shape[d] > data.shape[d])
      return ctx.error("indices dimension ", d, " (", idx.shape[d],
                       ") exceeds the data's (", data.shape[d], ")");
  const int esz = int(dtypeSize(data.dtype));
  if (esz != 1 && esz != 2 && esz != 4 && esz != 8)
    return unsupported(ctx, data.dtype);
  if (idx.dtype != DType::kI32 && idx.dtype != DType::kI64)
    return ctx.error("expected i32 or i64 indices, got ", dtypeName(idx.dtype));
  std::vector<int64_t> outStrides = contiguousStrides(out.shape);
  std::vector<int64_t> dataStrides = contiguousStrides(data.shape);
  const int64_t axisStride = dataStrides[axis];
  dataStrides[axis] = 0; // the index supplies this coordinate
  cpu::StridedLayout<3> s;
  if (!cpu::buildLayout<3>(out.shape, {&outStrides, &outStrides, &dataStrides},
                           s))
    return ctx.error("too many dimensions");
  DTCC_ASSIGN_OR_RETURN(Layout l, toLayout<3>(ctx, s));
  const int64_t size = data.shape[axis];
  const int32_t site =
      dev.registerSite("gather_elements at '" + ctx.location + "'");
  DeviceError *error = dev.errorSlot();
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    return launched(prefix, launchGatherElements(esz, idx.dtype, l, out.data,
                                                 idx.data, data.data,
                                                 axisStride, size, error, site,
                                                 st));
  });
}

StatusOr<KernelFn> buildScatterAdd(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView upd = ctx.inputs[0], idx = ctx.inputs[1], out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, upd.dtype, "output 0"));
  DTCC_ASSIGN_OR_RETURN(int64_t axis, getDimAttr(ctx, "axis", out.rank()));
  StatusOr<int64_t> dimSize = ctx.attrs.getInt("dim_size");
  if (!dimSize.isOk())
    return ctx.error(dimSize.status().message());
  if (out.shape[axis] != *dimSize)
    return ctx.error("expected output dimension ", axis, " to be dim_size (",
                     *dimSize, "), got ", out.shape[axis]);
  std::vector<int64_t> shape(out.shape.begin(), out.shape.begin() + axis);
  shape.insert(shape.end(), idx.shape.begin(), idx.shape.end());
  shape.insert(shape.end(), out.shape.begin() + axis + 1, out.shape.end());
  DTCC_RETURN_IF_ERROR(checkShape(ctx, upd, shape, "input 0"));
  if (idx.dtype != DType::kI32 && idx.dtype != DType::kI64)
    return ctx.error("expected i32 or i64 indices, got ", dtypeName(idx.dtype));
  if (!isCudaArithmeticType(upd.dtype))
    return unsupported(ctx, upd.dtype);
  const int64_t outer = product(out.shape, 0, axis), size = out.shape[axis],
                inner = product(out.shape, axis + 1), count = idx.numel();
  // The sort of the indices: compute-stream scratch.
  auto planned = planCudaScatterAdd(count, size);
  if (!planned.isOk())
    return unimplemented(errorPrefix(ctx), planned.status().message());
  const CudaScatterAddPlan plan = planned.value();
  DTCC_ASSIGN_OR_RETURN(ScratchSet set, cudaKernelScratch(ctx));
  ScratchSlot sortSlot;
  if (!set.empty()) {
    DTCC_ASSIGN_OR_RETURN(std::vector<ScratchSlot> slots,
                          ctx.requestScratch(std::move(set)));
    sortSlot = slots.at(0);
  }
  const int32_t site = dev.registerSite("scatter_add at '" + ctx.location + "'");
  DeviceError *error = dev.errorSlot();
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    ScatterAddScratch sort;
    if (char *base = sortSlot.as<char>()) {
      for (int b = 0; b < 2; ++b) {
        sort.keys[b] = reinterpret_cast<uint32_t *>(base + plan.keys[b]);
        sort.positions[b] =
            reinterpret_cast<uint32_t *>(base + plan.positions[b]);
      }
      sort.counts = reinterpret_cast<uint32_t *>(base + plan.counts);
      sort.starts = reinterpret_cast<uint32_t *>(base + plan.starts);
    }
    sort.tiles = plan.tiles;
    sort.passes = plan.passes;
    return launched(prefix, launchScatterAdd(upd.dtype, idx.dtype, upd.data,
                                             idx.data, out.data, sort, outer,
                                             size, inner, count, error, site,
                                             st));
  });
}

//===-- training ----------------------------------------------------------===//

/// The block of a draw of shape `shape` whose offsets are input
/// `offsetsInput` when the kernel has it (with the global_shape attribute),
/// else the whole tensor.
StatusOr<CounterBlock> readCounterBlock(const KernelContext &ctx,
                                        size_t offsetsInput,
                                        const std::vector<int64_t> &shape) {
  CounterBlock block;
  if (ctx.inputs.size() <= offsetsInput)
    return block;
  const TensorView offsets = ctx.inputs[offsetsInput];
  const int rank = int(shape.size());
  const std::string what =
      "input " + std::to_string(offsetsInput) + " (offsets)";
  DTCC_RETURN_IF_ERROR(checkDType(ctx, offsets, DType::kI64, what.c_str()));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, offsets, {int64_t(rank)}, what.c_str()));
  StatusOr<std::vector<int64_t>> global = ctx.attrs.getInts("global_shape");
  if (!global.isOk() || int(global->size()) != rank)
    return ctx.error("expected global_shape with ", rank, " entries");
  if (rank > kMaxLayoutDims)
    return ctx.error("expected at most ", kMaxLayoutDims, " dimensions, got ", rank);
  block.offsets = offsets.as<int64_t>();
  block.rank = rank;
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if ((*global)[d] < shape[d])
      return ctx.error("expected global_shape[", d, "] of at least ",
                       shape[d], ", got ", (*global)[d]);
    block.shape[d] = shape[d];
    block.strides[d] = stride;
    stride *= (*global)[d];
  }
  return block;
}

StatusOr<KernelFn> buildDropout(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView x = ctx.inputs[0], step = ctx.inputs[1], y = ctx.outputs[0],
                   mask = ctx.outputs[1];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, step, DType::kI64, "input 1 (step)"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, y, x.dtype, "output 0"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, y, x.shape, "output 0"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, mask, DType::kBool, "output 1"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, mask, x.shape, "output 1"));
  StatusOr<double> ratio = ctx.attrs.getFloat("ratio");
  StatusOr<int64_t> seed = ctx.attrs.getInt("seed");
  if (!ratio.isOk() || !seed.isOk())
    return ctx.error("expected attributes ratio and seed");
  if (!(*ratio >= 0 && *ratio < 1))
    return ctx.error("expected ratio in [0, 1), got ", *ratio);
  if (!isRowType(x.dtype))
    return unsupported(ctx, x.dtype);
  // A block of a split tensor: its offsets and the whole tensor's shape.
  DTCC_ASSIGN_OR_RETURN(CounterBlock block, readCounterBlock(ctx, 2, x.shape));
  const uint64_t threshold = uint64_t(std::ceil(*ratio * 0x1.0p53));
  const double scale = 1.0 / (1.0 - *ratio);
  const uint64_t s = uint64_t(*seed);
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    return launched(prefix, launchDropout(x.dtype, x.data, step.as<int64_t>(),
                                          y.data, mask.as<bool>(), x.numel(), s,
                                          threshold, scale, block, st));
  });
}

//===-- grid_sample -------------------------------------------------------===//

StatusOr<KernelFn> buildGridSample(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(grid::Geometry g, cpu::planGridSample(ctx, false));
  const DType dtype = ctx.inputs[0].dtype;
  DTCC_RETURN_IF_ERROR(requireCudaFloat(ctx, dtype));
  const void *x = ctx.inputs[0].data, *xy = ctx.inputs[1].data;
  void *y = ctx.outputs[0].data;
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    return launched(prefix, launchGridSample(dtype, x, xy, y, g, st));
  });
}

StatusOr<KernelFn> buildGridSampleGrad(CudaDevice &dev,
                                       const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(grid::Geometry g, cpu::planGridSample(ctx, true));
  const DType dtype = ctx.inputs[0].dtype;
  DTCC_RETURN_IF_ERROR(requireCudaFloat(ctx, dtype));
  DTCC_ASSIGN_OR_RETURN(FloatAccumulator acc, floatAccumulatorOf(ctx, dtype));
  const void *dy = ctx.inputs[0].data, *x = ctx.inputs[1].data,
             *xy = ctx.inputs[2].data;
  void *dx = ctx.outputs[0].data, *dgrid = ctx.outputs[1].data;
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    if (acc.needed && !acc.slot.get())
      return unreserved(prefix);
    return launched(prefix, launchGridSampleGrad(dtype, dy, x, xy, dx, dgrid,
                                                 acc.slot.as<float>(), g, st));
  });
}

//===-- roi_align ---------------------------------------------------------===//

StatusOr<KernelFn> buildRoiAlign(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(roi::Geometry g, cpu::planRoiAlign(ctx, false));
  const DType dtype = ctx.inputs[0].dtype;
  DTCC_RETURN_IF_ERROR(requireCudaFloat(ctx, dtype));
  const void *x = ctx.inputs[0].data, *rois = ctx.inputs[1].data;
  const int64_t *batch = ctx.inputs[2].as<const int64_t>();
  void *y = ctx.outputs[0].data;
  const int32_t site =
      dev.registerSite("roi_align's batch_indices at '" + ctx.location + "'");
  DeviceError *error = dev.errorSlot();
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    return launched(
        prefix, launchRoiAlign(dtype, x, rois, batch, y, g, error, site, st));
  });
}

StatusOr<KernelFn> buildRoiAlignGrad(CudaDevice &dev,
                                     const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(roi::Geometry g, cpu::planRoiAlign(ctx, true));
  const DType dtype = ctx.inputs[0].dtype;
  DTCC_RETURN_IF_ERROR(requireCudaFloat(ctx, dtype));
  DTCC_ASSIGN_OR_RETURN(FloatAccumulator acc, floatAccumulatorOf(ctx, dtype));
  const void *dy = ctx.inputs[0].data, *x = ctx.inputs[1].data,
             *rois = ctx.inputs[2].data;
  const int64_t *batch = ctx.inputs[3].as<const int64_t>();
  void *dx = ctx.outputs[0].data;
  const int32_t site = dev.registerSite("roi_align_grad's batch_indices at '" +
                                        ctx.location + "'");
  DeviceError *error = dev.errorSlot();
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    if (acc.needed && !acc.slot.get())
      return unreserved(prefix);
    return launched(prefix, launchRoiAlignGrad(dtype, dy, x, rois, batch, dx,
                                               acc.slot.as<float>(), g, error,
                                               site, st));
  });
}

StatusOr<KernelFn> buildRandom(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView step = ctx.inputs[0], y = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, step, DType::kI64, "input 0 (step)"));
  StatusOr<std::string> distribution = ctx.attrs.getString("distribution");
  StatusOr<double> shift = ctx.attrs.getFloat("shift");
  StatusOr<double> scale = ctx.attrs.getFloat("scale");
  StatusOr<int64_t> seed = ctx.attrs.getInt("seed");
  if (!distribution.isOk() || !shift.isOk() || !scale.isOk() || !seed.isOk())
    return ctx.error("expected attributes distribution, shift, scale and seed");
  if (*distribution != "uniform" && *distribution != "normal")
    return ctx.error("expected distribution \"uniform\" or \"normal\", got \"",
                     *distribution, "\"");
  if (!std::isfinite(*shift) || !std::isfinite(*scale))
    return ctx.error("expected a finite shift and scale, got ", *shift, " and ",
                     *scale);
  if (!isRowType(y.dtype))
    return unsupported(ctx, y.dtype);
  DTCC_ASSIGN_OR_RETURN(CounterBlock block, readCounterBlock(ctx, 1, y.shape));
  const int digits = significandBits(y.dtype);
  const bool normal = *distribution == "normal";
  const double sh = *shift, sc = *scale;
  const uint64_t s = uint64_t(*seed);
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    return launched(prefix, launchRandom(y.dtype, step.as<int64_t>(), y.data,
                                         y.numel(), s, normal, sh, sc, digits,
                                         block, st));
  });
}

StatusOr<KernelFn> buildLrSchedule(CudaDevice &dev, const KernelContext &ctx) {
  const TensorView step = ctx.inputs[0], total = ctx.inputs[1],
                   out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, step, DType::kI64, "input 0 (step)"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, total, DType::kI64, "input 1 (total)"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, DType::kF32, "output 0"));
  StatusOr<double> base = ctx.attrs.getFloat("base_lr"),
                   min = ctx.attrs.getFloat("min_lr");
  StatusOr<int64_t> warmup = ctx.attrs.getInt("warmup");
  std::string kindName = ctx.attrs.getString("kind", "");
  if (!base.isOk() || !min.isOk() || !warmup.isOk() || *warmup < 0)
    return ctx.error("expected base_lr, min_lr and warmup >= 0");
  int kind = kindName == "constant" ? 0
             : kindName == "linear" ? 1
             : kindName == "cosine" ? 2
                                    : -1;
  if (kind < 0)
    return ctx.error("expected kind \"constant\", \"linear\" or \"cosine\", "
                     "got \"",
                     kindName, "\"");
  const double b = *base, m = *min;
  const int64_t w = *warmup;
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    return launched(prefix, launchLrSchedule(kind, b, m, w, step.as<int64_t>(),
                                             total.as<int64_t>(),
                                             out.as<float>(), st));
  });
}

} // namespace

/// Consecutive adamw instructions of a function that share a launch
/// (canJoinAdamwGroup): the first one's kernel launches every member, the
/// others' do nothing. Each member's entry of the launch's tensor table is
/// persistent scratch it requests when bound; the entries of a group lie
/// back to back, and the table is planned and uploaded once the program's
/// scratch is reserved, before any run.
struct AdamwGroup {
  std::vector<AdamwMember> members;
  std::vector<ScratchSlot> entries; ///< one per member, in order
  const AdamwTensor *deviceTable = nullptr;
  int64_t chunks = 0;
  /// Uploaded: no member may join any more.
  bool sealed = false;
};

namespace {

/// Plans `g`'s table (chunk numbering) and copies it into its entries.
Status uploadAdamwTable(AdamwGroup &g, cudaStream_t stream) {
  std::vector<AdamwTensor> table;
  for (const AdamwMember &m : g.members)
    table.push_back(m.tensor);
  g.chunks = planAdamwChunks(table.data(), int(table.size()));
  char *first = g.entries.front().as<char>();
  for (size_t i = 0; i < g.entries.size(); ++i)
    if (g.entries[i].as<char>() != first + i * sizeof(AdamwTensor))
      return internalError("adamw: the table entries of one launch are not "
                           "contiguous in the scratch reservation");
  DTCC_CUDA_CHECK(cudaMemcpyAsync(first, table.data(),
                                  table.size() * sizeof(AdamwTensor),
                                  cudaMemcpyHostToDevice, stream));
  DTCC_CUDA_CHECK(cudaStreamSynchronize(stream));
  g.deviceTable = reinterpret_cast<const AdamwTensor *>(first);
  g.sealed = true;
  return Status::ok();
}

/// adamw (param, grad, m, v, lr, step, grad_scale -> new_param, new_m,
/// new_v[, rounded]): f32 master weights and state, gradient f32, bf16 or
/// f16, and optionally the new parameter rounded to a bf16 or f16 copy (the
/// mixed-precision weights dtcc-lower-to-exec's rounded-copies folds into
/// the update). Runs of consecutive adamw instructions go out as one
/// multi-tensor launch (AdamwGroup).
StatusOr<KernelFn> buildAdamw(CudaDevice &dev, const KernelContext &ctx) {
  if (ctx.outputs.size() != 3 && ctx.outputs.size() != 4)
    return ctx.error("expected 3 or 4 outputs (new_param, new_m, new_v "
                     "[, rounded]), got ",
                     ctx.outputs.size());
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView &param = ctx.inputs[0], &grad = ctx.inputs[1];
  for (int i : {0, 2, 3}) {
    DTCC_RETURN_IF_ERROR(checkDType(ctx, ctx.inputs[i], DType::kF32,
                                    "input " + std::to_string(i)));
    DTCC_RETURN_IF_ERROR(checkShape(ctx, ctx.inputs[i], param.shape,
                                    "input " + std::to_string(i)));
  }
  for (int i = 0; i < 3; ++i) {
    DTCC_RETURN_IF_ERROR(checkDType(ctx, ctx.outputs[i], DType::kF32,
                                    "output " + std::to_string(i)));
    DTCC_RETURN_IF_ERROR(checkShape(ctx, ctx.outputs[i], param.shape,
                                    "output " + std::to_string(i)));
  }
  if (grad.dtype != DType::kF32 && grad.dtype != DType::kBF16 &&
      grad.dtype != DType::kF16)
    return unsupported(ctx, grad.dtype);
  DTCC_RETURN_IF_ERROR(checkShape(ctx, grad, param.shape, "input 1 (grad)"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, ctx.inputs[4], DType::kF32, "lr"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, ctx.inputs[5], DType::kI64, "step"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, ctx.inputs[6], DType::kF32, "grad_scale"));
  StatusOr<double> beta1 = ctx.attrs.getFloat("beta1"),
                   beta2 = ctx.attrs.getFloat("beta2"),
                   eps = ctx.attrs.getFloat("epsilon"),
                   wd = ctx.attrs.getFloat("weight_decay");
  if (!beta1.isOk() || !beta2.isOk() || !eps.isOk() || !wd.isOk())
    return ctx.error("expected beta1, beta2, epsilon and weight_decay");
  AdamwMember member;
  if (ctx.outputs.size() == 4) {
    const TensorView &rounded = ctx.outputs[3];
    if (rounded.dtype != DType::kBF16 && rounded.dtype != DType::kF16)
      return ctx.error("expected output 3 (rounded) of type bf16 or f16, got ",
                       dtypeName(rounded.dtype));
    DTCC_RETURN_IF_ERROR(
        checkShape(ctx, rounded, param.shape, "output 3 (rounded)"));
    // The kernel writes it beside reading the others: it must be apart.
    const ByteRange copy = byteRange(rounded.data, rounded.sizeInBytes());
    for (size_t i = 0; i < ctx.inputs.size() + 3; ++i) {
      const bool input = i < ctx.inputs.size();
      const TensorView &t =
          input ? ctx.inputs[i] : ctx.outputs[i - ctx.inputs.size()];
      if (copy.overlaps(byteRange(t.data, t.sizeInBytes())))
        return ctx.error("output 3 (rounded) overlaps ",
                         input ? "input " : "output ",
                         input ? i : i - ctx.inputs.size(),
                         " (expected a buffer of its own)");
    }
    member.roundedType = rounded.dtype;
  }
  member.tensor = {param.as<float>(),
                   grad.data,
                   ctx.inputs[2].as<float>(),
                   ctx.inputs[3].as<float>(),
                   ctx.outputs[0].as<float>(),
                   ctx.outputs[1].as<float>(),
                   ctx.outputs[2].as<float>(),
                   ctx.outputs.size() == 4 ? ctx.outputs[3].data : nullptr,
                   param.numel(),
                   0};
  member.gradType = grad.dtype;
  member.beta1 = *beta1;
  member.beta2 = *beta2;
  member.eps = *eps;
  member.weightDecay = *wd;
  member.lr = ctx.inputs[4].data;
  member.step = ctx.inputs[5].data;
  member.gradScale = ctx.inputs[6].data;
  // This instruction's entry of its launch's table.
  DTCC_ASSIGN_OR_RETURN(ScratchSet set, cudaKernelScratch(ctx));
  DTCC_ASSIGN_OR_RETURN(std::vector<ScratchSlot> entry,
                        ctx.requestScratch(std::move(set)));
  std::shared_ptr<AdamwGroup> &open = dev.openAdamwGroup();
  if (open && !open->sealed && canJoinAdamwGroup(open->members, member)) {
    open->members.push_back(member);
    open->entries.push_back(entry.at(0));
    return KernelFn([] { return Status::ok(); });
  }
  auto group = std::make_shared<AdamwGroup>();
  group->members.push_back(member);
  group->entries.push_back(entry.at(0));
  open = group;
  CudaDevice *d = &dev;
  ctx.scratch->whenReserved(
      [group, d] { return uploadAdamwTable(*group, d->computeStream()); });
  const AdamwHyper h{*beta1, *beta2, *eps, *wd, ctx.inputs[4].as<float>(),
                     ctx.inputs[5].as<int64_t>(), ctx.inputs[6].as<float>()};
  const DType gradType = grad.dtype, roundedType = member.roundedType;
  const int32_t site = dev.registerSite("adamw at '" + ctx.location + "'");
  DeviceError *error = dev.errorSlot();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=]() -> Status {
    const AdamwGroup &g = *group;
    if (!g.sealed)
      return internalError(prefix, "the AdamW table was never uploaded (the "
                                   "program's scratch was not reserved)");
    return launched(prefix, launchAdamw(g.deviceTable, int(g.members.size()),
                                        g.chunks, gradType, roundedType, h,
                                        error, site, d->computeStream()));
  });
}

/// sgd (param, grad, buf, lr, step, grad_scale -> new_param, new_buf): f32
/// or f64 tensors of one type, as the CPU's kernel.
StatusOr<KernelFn> buildSgd(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView &param = ctx.inputs[0];
  const DType type = param.dtype;
  if (type != DType::kF32 && type != DType::kF64)
    return unsupported(ctx, type);
  for (int i : {0, 1, 2})
    DTCC_RETURN_IF_ERROR(checkDType(ctx, ctx.inputs[i], type, "input"));
  for (int i : {0, 1}) {
    DTCC_RETURN_IF_ERROR(checkDType(ctx, ctx.outputs[i], type, "output"));
    DTCC_RETURN_IF_ERROR(checkShape(ctx, ctx.outputs[i], param.shape, "output"));
  }
  StatusOr<double> momentum = ctx.attrs.getFloat("momentum"),
                   dampening = ctx.attrs.getFloat("dampening"),
                   wd = ctx.attrs.getFloat("weight_decay");
  if (!momentum.isOk() || !dampening.isOk() || !wd.isOk())
    return ctx.error("expected momentum, dampening and weight_decay");
  const bool nesterov = ctx.attrs.getBool("nesterov");
  const double mo = *momentum, da = *dampening, w = *wd;
  const TensorView g = ctx.inputs[1], b = ctx.inputs[2], lr = ctx.inputs[3],
                   step = ctx.inputs[4], gs = ctx.inputs[5];
  const TensorView np = ctx.outputs[0], nb = ctx.outputs[1];
  const int32_t site = dev.registerSite("sgd at '" + ctx.location + "'");
  DeviceError *error = dev.errorSlot();
  cudaStream_t st = dev.computeStream();
  std::string prefix = errorPrefix(ctx);
  return KernelFn([=] {
    return launched(
        prefix, launchSgd(type, param.data, g.data, b.data, np.data, nb.data,
                          param.numel(), mo, da, w, nesterov, lr.as<float>(),
                          step.as<int64_t>(), gs.as<float>(), error, site, st));
  });
}

} // namespace

void registerCudaKernels(KernelRegistry &registry, CudaDevice &device) {
  CudaDevice *d = &device;
  auto add = [&](const char *name, auto build) {
    registry.add(name, [d, build](const KernelContext &ctx) {
      return build(*d, ctx);
    });
  };
  auto unary = [&](const char *name, UnaryOp op, bool floatOnly) {
    registry.add(name, [d, op, floatOnly](const KernelContext &ctx) {
      return buildUnary(*d, ctx, op, floatOnly);
    });
  };
  unary("neg", UnaryOp::kNeg, false);
  unary("abs", UnaryOp::kAbs, false);
  unary("sign", UnaryOp::kSign, false);
  unary("relu", UnaryOp::kRelu, false);
  unary("exp", UnaryOp::kExp, true);
  unary("log", UnaryOp::kLog, true);
  unary("sqrt", UnaryOp::kSqrt, true);
  unary("rsqrt", UnaryOp::kRsqrt, true);
  unary("reciprocal", UnaryOp::kReciprocal, true);
  unary("tanh", UnaryOp::kTanh, true);
  unary("sigmoid", UnaryOp::kSigmoid, true);
  unary("silu", UnaryOp::kSilu, true);
  unary("erf", UnaryOp::kErf, true);
  unary("sin", UnaryOp::kSin, true);
  unary("cos", UnaryOp::kCos, true);
  unary("floor", UnaryOp::kFloor, true);
  unary("ceil", UnaryOp::kCeil, true);
  unary("round", UnaryOp::kRound, true);
  unary("tan", UnaryOp::kTan, true);
  unary("asin", UnaryOp::kAsin, true);
  unary("acos", UnaryOp::kAcos, true);
  unary("atan", UnaryOp::kAtan, true);
  unary("sinh", UnaryOp::kSinh, true);
  unary("cosh", UnaryOp::kCosh, true);
  unary("asinh", UnaryOp::kAsinh, true);
  unary("acosh", UnaryOp::kAcosh, true);
  unary("atanh", UnaryOp::kAtanh, true);
  unary("not", UnaryOp::kNot, false);
  registry.add("is_nan", [d](const KernelContext &ctx) {
    return buildPredicate(*d, ctx, PredicateOp::kIsNan);
  });
  registry.add("is_inf", [d](const KernelContext &ctx) {
    const bool pos = ctx.attrs.getBool("detect_positive", true),
               neg = ctx.attrs.getBool("detect_negative", true);
    return buildPredicate(*d, ctx,
                          pos && neg ? PredicateOp::kIsInf
                          : pos      ? PredicateOp::kIsPosInf
                          : neg      ? PredicateOp::kIsNegInf
                                     : PredicateOp::kNone);
  });
  registry.add("gelu", [d](const KernelContext &ctx) -> StatusOr<KernelFn> {
    const std::string a = ctx.attrs.getString("approximate", "none");
    // "none" or "tanh": the kernel-signature table checked it.
    return buildUnary(*d, ctx, a == "none" ? UnaryOp::kGeluErf
                                           : UnaryOp::kGeluTanh, true);
  });
  auto binary = [&](const char *name, BinaryOp op, BinaryTypes types) {
    registry.add(name, [d, op, types](const KernelContext &ctx) {
      return buildBinary(*d, ctx, op, types);
    });
  };
  binary("add", BinaryOp::kAdd, BinaryTypes::kNumeric);
  binary("sub", BinaryOp::kSub, BinaryTypes::kNumeric);
  binary("mul", BinaryOp::kMul, BinaryTypes::kNumeric);
  binary("div", BinaryOp::kDiv, BinaryTypes::kNumeric);
  binary("rem", BinaryOp::kRem, BinaryTypes::kNumeric);
  binary("pow", BinaryOp::kPow, BinaryTypes::kNumeric);
  binary("max", BinaryOp::kMax, BinaryTypes::kNumeric);
  binary("min", BinaryOp::kMin, BinaryTypes::kNumeric);
  binary("and", BinaryOp::kAnd, BinaryTypes::kIntsAndBool);
  binary("or", BinaryOp::kOr, BinaryTypes::kIntsAndBool);
  binary("xor", BinaryOp::kXor, BinaryTypes::kIntsAndBool);
  binary("shift_left", BinaryOp::kShiftLeft, BinaryTypes::kInts);
  binary("shift_right", BinaryOp::kShiftRight, BinaryTypes::kInts);
  binary("silu_grad", BinaryOp::kSiluGrad, BinaryTypes::kFloats);
  registry.add("gelu_grad", [d](const KernelContext &ctx) -> StatusOr<KernelFn> {
    const std::string a = ctx.attrs.getString("approximate", "none");
    // "none" or "tanh": the kernel-signature table checked it.
    return buildBinary(*d, ctx,
                       a == "none" ? BinaryOp::kGeluErfGrad
                                   : BinaryOp::kGeluTanhGrad,
                       BinaryTypes::kFloats);
  });
  auto compare = [&](const char *name, CompareOp op) {
    registry.add(name, [d, op](const KernelContext &ctx) {
      return buildCompare(*d, ctx, op);
    });
  };
  compare("eq", CompareOp::kEq);
  compare("ne", CompareOp::kNe);
  compare("lt", CompareOp::kLt);
  compare("le", CompareOp::kLe);
  compare("gt", CompareOp::kGt);
  compare("ge", CompareOp::kGe);
  add("select", buildSelect);
  add("cast", buildCast);
  add("copy", buildCopyKernel);
  registry.add("copy_to_host", [d](const KernelContext &ctx) {
    return buildTransfer(*d, ctx, /*toHost=*/true);
  });
  registry.add("copy_to_device", [d](const KernelContext &ctx) {
    return buildTransfer(*d, ctx, /*toHost=*/false);
  });
  add("broadcast_in_dim", buildBroadcastInDim);
  add("transpose", buildTranspose);
  add("slice", buildSlice);
  add("reverse", buildReverse);
  add("pad", buildPad);
  add("concat", buildConcat);
  add("iota", buildIota);
  add("reduce_sum", buildReduce<ReduceOp::kSum>);
  add("sum_squares", buildReduce<ReduceOp::kSumSquares>);
  add("global_sum_squares", buildGlobalSumSquares);
  add("reduce_prod", buildReduce<ReduceOp::kProd>);
  add("reduce_max", buildReduce<ReduceOp::kMax>);
  add("reduce_min", buildReduce<ReduceOp::kMin>);
  add("argmax", buildArg<true>);
  add("argmin", buildArg<false>);
  add("cumsum", buildCumsum);
  add("softmax", buildSoftmax<false, false>);
  add("log_softmax", buildSoftmax<true, false>);
  add("softmax_grad", buildSoftmax<false, true>);
  add("log_softmax_grad", buildSoftmax<true, true>);
  add("layer_norm", buildNorm<true>);
  add("rms_norm", buildNorm<false>);
  add("layer_norm_grad", buildNormGrad<true, true>);
  add("rms_norm_grad", buildNormGrad<false, true>);
  add("layer_norm_param_grad", buildNormGrad<true, false>);
  add("rms_norm_param_grad", buildNormGrad<false, false>);
  add("cross_entropy", buildCrossEntropy<false>);
  add("cross_entropy_grad", buildCrossEntropy<true>);
  add("gather", buildGather);
  add("gather_elements", buildGatherElements);
  add("scatter_add", buildScatterAdd);
  add("dropout", buildDropout);
  add("random", buildRandom);
  add("grid_sample", buildGridSample);
  add("grid_sample_grad", buildGridSampleGrad);
  add("roi_align", buildRoiAlign);
  add("roi_align_grad", buildRoiAlignGrad);
  add("lr_schedule", buildLrSchedule);
  add("adamw", buildAdamw);
  add("sgd", buildSgd);
#ifdef DTCC_HAVE_CUDNN
  // conv, conv_input_grad, conv_filter_grad (CudaConv.cpp).
  registerCudaConvKernels(registry, device);
#endif
  registerCudaNormPoolKernels(registry, device);
  registerCudaTensorOpKernels(registry, device);
  registerCudaAttentionKernels(registry, device);
}

} // namespace dtcc::runtime::cuda
