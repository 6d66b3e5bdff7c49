//===- CudaConv.cpp - conv, conv_input_grad, conv_filter_grad on cuDNN ----===//
//
// Each factory checks its instruction with the CPU kernels' geometry
// (ConvGeometry), makes cuDNN's descriptors, picks an algorithm with
// cuDNN's heuristics (the fastest deterministic one whose workspace fits
// kMaxCudnnWorkspaceBytes), and reserves the workspace and any padded copy
// of the input; the closure then only launches on the compute stream. The
// device's cuDNN handle is made at the first bind.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cuda/CudaConv.h"

#include "runtime/device/cpu/CpuKernelUtils.h"
#include "runtime/device/cuda/CudaCheck.h"
#include "runtime/device/cuda/CudaDevice.h"
#include "runtime/device/cuda/CudaLaunch.h"

#include <cstdlib>
#include <memory>

namespace dtcc::runtime::cuda {
namespace {

using cpu::ConvGeometry;
using cpu::ConvKind;

Status cudnnError(cudnnStatus_t s, const char *call, const char *file,
                  int line) {
  char detail[512] = {};
  cudnnGetLastErrorString(detail, sizeof(detail));
  return internalError("cuDNN error ", cudnnGetErrorString(s), " in ", call,
                       " at ", file, ":", line,
                       detail[0] ? strCat(": ", detail) : std::string());
}

#define DTCC_CUDNN_CHECK(call)                                                 \
  do {                                                                         \
    cudnnStatus_t _dtcc_s = (call);                                            \
    if (_dtcc_s != CUDNN_STATUS_SUCCESS)                                       \
      return cudnnError(_dtcc_s, #call, __FILE__, __LINE__);                   \
  } while (0)

/// Device memory a convolution kernel keeps from binding on: cuDNN's
/// workspace and the padded copies of asymmetric windows. Every device
/// allocation of this file goes through here, so that the device's counted
/// scratch reservation can replace it in one place. Null for no bytes.
StatusOr<void *> reserveConvScratch(CudaDevice &dev, int64_t bytes) {
  if (bytes <= 0)
    return static_cast<void *>(nullptr);
  return dev.allocatePersistent(bytes);
}

/// The device's cuDNN handle, on its compute stream; made at the first bind.
struct CudnnHandle {
  cudnnHandle_t handle = nullptr;
  ~CudnnHandle() {
    if (handle)
      cudnnDestroy(handle);
  }
  Status ensure(CudaDevice &dev) {
    if (handle)
      return Status::ok();
    DTCC_CUDNN_CHECK(cudnnCreate(&handle));
    DTCC_CUDNN_CHECK(cudnnSetStream(handle, dev.computeStream()));
    return Status::ok();
  }
};

/// The descriptors of one bound convolution.
struct Descriptors {
  cudnnTensorDescriptor_t input = nullptr, output = nullptr;
  cudnnFilterDescriptor_t filter = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  ~Descriptors() {
    if (input)
      cudnnDestroyTensorDescriptor(input);
    if (output)
      cudnnDestroyTensorDescriptor(output);
    if (filter)
      cudnnDestroyFilterDescriptor(filter);
    if (conv)
      cudnnDestroyConvolutionDescriptor(conv);
  }
};

Status describe(Descriptors &d, const CudnnConvPlan &p,
                const CudnnConvTypes &t) {
  const int dims = p.spatial + 2;
  DTCC_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d.input));
  DTCC_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d.output));
  DTCC_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d.filter));
  DTCC_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d.conv));
  DTCC_CUDNN_CHECK(cudnnSetTensorNdDescriptorEx(d.input, CUDNN_TENSOR_NCHW,
                                                t.data, dims, p.input.data()));
  DTCC_CUDNN_CHECK(cudnnSetTensorNdDescriptorEx(d.output, CUDNN_TENSOR_NCHW,
                                                t.data, dims, p.output.data()));
  DTCC_CUDNN_CHECK(cudnnSetFilterNdDescriptor(d.filter, t.data,
                                              CUDNN_TENSOR_NCHW, dims,
                                              p.filter.data()));
  DTCC_CUDNN_CHECK(cudnnSetConvolutionNdDescriptor(
      d.conv, p.spatial, p.pad.data(), p.stride.data(), p.dilation.data(),
      CUDNN_CROSS_CORRELATION, t.compute));
  DTCC_CUDNN_CHECK(cudnnSetConvolutionGroupCount(d.conv, p.groups));
  DTCC_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, t.math));
  // cuDNN's own arithmetic must agree with the geometry checked at bind.
  std::vector<int> out(dims);
  DTCC_CUDNN_CHECK(cudnnGetConvolutionNdForwardOutputDim(
      d.conv, d.input, d.filter, dims, out.data()));
  if (out != p.output)
    return internalError("cuDNN's convolution output shape differs from "
                         "dtcc's");
  return Status::ok();
}

/// The first (fastest) deterministic result that succeeded within the
/// workspace limit and the allowed math, else the first such result of any
/// determinism; -1 when none.
template <typename Perf>
int pickAlgorithm(const Perf *perf, int count, const CudnnConvTypes &t) {
  int fallback = -1;
  for (int i = 0; i < count; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS ||
        perf[i].memory > size_t(kMaxCudnnWorkspaceBytes))
      continue;
    // f32 without TF32 passes over algorithms that need tensor cores.
    if (t.math == CUDNN_FMA_MATH &&
        (perf[i].mathType == CUDNN_TENSOR_OP_MATH ||
         perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION))
      continue;
    if (perf[i].determinism == CUDNN_DETERMINISTIC)
      return i;
    if (fallback < 0)
      fallback = i;
  }
  return fallback;
}

Status useMath(Descriptors &d, const CudnnConvTypes &t, cudnnMathType_t m) {
  if (t.math != CUDNN_FMA_MATH)
    DTCC_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, m));
  return Status::ok();
}

/// The algorithm of `kind` and its workspace size, with the descriptor's
/// math mode set to the algorithm's (kept at FMA for f32 without TF32).
struct Algorithm {
  int algo = 0;
  size_t workspace = 0;
};
StatusOr<Algorithm> chooseAlgorithm(cudnnHandle_t h, Descriptors &d,
                                    ConvKind kind, const CudnnConvTypes &t,
                                    const KernelContext &ctx) {
  Algorithm a;
  int found = 0;
  auto none = [&]() {
    return unimplemented(cpu::errorPrefix(ctx),
                         "cuDNN offers no algorithm for this convolution "
                         "within a workspace of ",
                         kMaxCudnnWorkspaceBytes >> 20, " MiB");
  };
  switch (kind) {
  case ConvKind::kForward: {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    DTCC_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
        h, d.input, d.filter, d.conv, d.output,
        CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf));
    int i = pickAlgorithm(perf, found, t);
    if (i < 0)
      return none();
    DTCC_RETURN_IF_ERROR(useMath(d, t, perf[i].mathType));
    a.algo = perf[i].algo;
    DTCC_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(
        h, d.input, d.filter, d.conv, d.output, perf[i].algo, &a.workspace));
    break;
  }
  case ConvKind::kInputGrad: {
    cudnnConvolutionBwdDataAlgoPerf_t
        perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    DTCC_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
        h, d.filter, d.output, d.conv, d.input,
        CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &found, perf));
    int i = pickAlgorithm(perf, found, t);
    if (i < 0)
      return none();
    DTCC_RETURN_IF_ERROR(useMath(d, t, perf[i].mathType));
    a.algo = perf[i].algo;
    DTCC_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(
        h, d.filter, d.output, d.conv, d.input, perf[i].algo, &a.workspace));
    break;
  }
  case ConvKind::kFilterGrad: {
    cudnnConvolutionBwdFilterAlgoPerf_t
        perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    DTCC_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        h, d.input, d.output, d.conv, d.filter,
        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &found, perf));
    int i = pickAlgorithm(perf, found, t);
    if (i < 0)
      return none();
    DTCC_RETURN_IF_ERROR(useMath(d, t, perf[i].mathType));
    a.algo = perf[i].algo;
    DTCC_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(
        h, d.input, d.output, d.conv, d.filter, perf[i].algo, &a.workspace));
    break;
  }
  }
  return a;
}

/// A strided copy between the unpadded input and its place inside the
/// padded copy: `toPadded` writes the interior, otherwise it is read out.
StatusOr<Layout> interiorLayout(const KernelContext &ctx,
                                const CudnnConvPlan &p, bool toPadded,
                                int64_t &paddedOffset) {
  std::vector<int64_t> padded(p.input.begin(), p.input.end());
  std::vector<int64_t> paddedStrides = contiguousStrides(padded);
  std::vector<int64_t> plainStrides = contiguousStrides(p.unpadded);
  paddedOffset = 0;
  for (size_t d = 0; d < p.padLow.size(); ++d)
    paddedOffset += p.padLow[d] * paddedStrides[d + 2];
  // A 1-D window was planned as 2-D: the unpadded shape has the leading
  // size-1 dimension too, so both shapes have the same rank.
  const std::vector<int64_t> &dst = toPadded ? paddedStrides : plainStrides;
  const std::vector<int64_t> &src = toPadded ? plainStrides : paddedStrides;
  cpu::StridedLayout<2> s;
  if (!cpu::buildLayout<2>(p.unpadded, {&dst, &src}, s) ||
      s.rank > kMaxLayoutDims)
    return ctx.error("padded copy of more than ", kMaxLayoutDims,
                     " dimensions");
  Layout l;
  l.rank = s.rank;
  l.operands = 2;
  l.numel = s.numel;
  for (int d = 0; d < s.rank; ++d) {
    l.shape[d] = s.shape[d];
    for (int k = 0; k < 2; ++k)
      l.strides[d][k] = s.strides[d][k];
  }
  l.linear = s.isLinear();
  return l;
}

StatusOr<KernelFn> buildConv(CudaDevice &dev,
                             const std::shared_ptr<CudnnHandle> &handle,
                             const KernelContext &ctx, ConvKind kind) {
  DTCC_ASSIGN_OR_RETURN(ConvGeometry g, cpu::convGeometry(ctx, kind));
  const DType dtype = ctx.outputs[0].dtype;
  const bool tf32 = std::getenv("DTCC_CUDA_ALLOW_TF32") != nullptr;
  auto types = cudnnConvTypes(dtype, tf32);
  if (!types.isOk())
    return unimplemented(cpu::errorPrefix(ctx), types.status().message());
  const CudnnConvTypes t = types.value();
  cudaStream_t stream = dev.computeStream();
  void *out = ctx.outputs[0].data;
  const int64_t outBytes = ctx.outputs[0].sizeInBytes();
  if (ctx.inputs[0].numel() == 0 || ctx.inputs[1].numel() == 0)
    return KernelFn([out, outBytes, stream]() -> Status {
      if (outBytes > 0)
        DTCC_CUDA_CHECK(cudaMemsetAsync(out, 0, size_t(outBytes), stream));
      return Status::ok();
    });
  if (outBytes == 0)
    return KernelFn([]() -> Status { return Status::ok(); });
  auto planned = planCudnnConv(g);
  if (!planned.isOk())
    return ctx.error(planned.status().message());
  const CudnnConvPlan plan = planned.value();
  DTCC_RETURN_IF_ERROR(handle->ensure(dev));
  auto desc = std::make_shared<Descriptors>();
  DTCC_RETURN_IF_ERROR(describe(*desc, plan, t).withContext(
      cpu::errorPrefix(ctx) + "describing the convolution"));
  DTCC_ASSIGN_OR_RETURN(Algorithm algo,
                        chooseAlgorithm(handle->handle, *desc, kind, t, ctx));
  DTCC_ASSIGN_OR_RETURN(void *workspace,
                        reserveConvScratch(dev, int64_t(algo.workspace)));

  // The buffers in the convolution's roles: input (x, or dx written),
  // filter (w, or dw written), output (y written, or dy).
  const int elemSize = int(dtypeSize(dtype));
  void *input = kind == ConvKind::kInputGrad ? out : ctx.inputs[0].data;
  const void *filter = kind == ConvKind::kFilterGrad ? nullptr
                                                     : ctx.inputs[1].data;
  void *dfilter = kind == ConvKind::kFilterGrad ? out : nullptr;
  const void *dy = kind == ConvKind::kInputGrad    ? ctx.inputs[0].data
                   : kind == ConvKind::kFilterGrad ? ctx.inputs[1].data
                                                   : nullptr;
  void *y = kind == ConvKind::kForward ? out : nullptr;
  // An asymmetric window convolves a zero-padded copy of the input: the
  // input is copied into its interior before (conv, conv_filter_grad), or
  // the input gradient read out of it after (conv_input_grad). Its border
  // stays zero from here on, as steps write only the interior (the input
  // gradient's cuDNN writes the whole buffer, but only its interior is read).
  void *copyTo = nullptr;
  const void *copyFrom = nullptr;
  Layout copy;
  if (plan.explicitPad) {
    const int64_t bytes = plan.inputElements() * elemSize;
    DTCC_ASSIGN_OR_RETURN(void *padded, reserveConvScratch(dev, bytes));
    DTCC_CUDA_CHECK(cudaMemsetAsync(padded, 0, size_t(bytes), stream));
    int64_t offset = 0;
    DTCC_ASSIGN_OR_RETURN(
        copy, interiorLayout(ctx, plan, kind != ConvKind::kInputGrad, offset));
    void *interior = static_cast<char *>(padded) + offset * elemSize;
    if (kind == ConvKind::kInputGrad) {
      copyTo = input;
      copyFrom = interior;
    } else {
      copyTo = interior;
      copyFrom = input;
    }
    input = padded;
  }
  const int cudnnAlgo = algo.algo;
  const size_t wsBytes = algo.workspace;
  const bool isDouble = t.doubleScale;
  std::string prefix = cpu::errorPrefix(ctx);
  std::shared_ptr<CudnnHandle> h = handle;
  return KernelFn([=]() -> Status {
    const float oneF = 1.f, zeroF = 0.f;
    const double oneD = 1.0, zeroD = 0.0;
    const void *alpha = isDouble ? static_cast<const void *>(&oneD) : &oneF;
    const void *beta = isDouble ? static_cast<const void *>(&zeroD) : &zeroF;
    auto launchCopyOrFail = [&]() -> Status {
      cudaError_t err = launchCopy(elemSize, copy, copyTo, copyFrom, stream);
      if (err != cudaSuccess)
        return internalError(prefix, "padded copy failed: ",
                             cudaGetErrorString(err));
      return Status::ok();
    };
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    switch (kind) {
    case ConvKind::kForward:
      if (copyTo)
        DTCC_RETURN_IF_ERROR(launchCopyOrFail());
      s = cudnnConvolutionForward(
          h->handle, alpha, desc->input, input, desc->filter, filter,
          desc->conv, cudnnConvolutionFwdAlgo_t(cudnnAlgo), workspace, wsBytes,
          beta, desc->output, y);
      break;
    case ConvKind::kInputGrad:
      s = cudnnConvolutionBackwardData(
          h->handle, alpha, desc->filter, filter, desc->output, dy,
          desc->conv, cudnnConvolutionBwdDataAlgo_t(cudnnAlgo), workspace,
          wsBytes, beta, desc->input, input);
      if (s == CUDNN_STATUS_SUCCESS && copyTo)
        DTCC_RETURN_IF_ERROR(launchCopyOrFail());
      break;
    case ConvKind::kFilterGrad:
      if (copyTo)
        DTCC_RETURN_IF_ERROR(launchCopyOrFail());
      s = cudnnConvolutionBackwardFilter(
          h->handle, alpha, desc->input, input, desc->output, dy,
          desc->conv, cudnnConvolutionBwdFilterAlgo_t(cudnnAlgo), workspace,
          wsBytes, beta, desc->filter, dfilter);
      break;
    }
    if (s != CUDNN_STATUS_SUCCESS)
      return internalError(prefix, "cuDNN: ", cudnnGetErrorString(s));
    return Status::ok();
  });
}

} // namespace

void registerCudaConvKernels(KernelRegistry &registry, CudaDevice &device) {
  auto handle = std::make_shared<CudnnHandle>();
  CudaDevice *d = &device;
  for (const char *name : {"conv", "conv_input_grad", "conv_filter_grad"}) {
    ConvKind kind;
    cpu::convKindOf(name, kind);
    registry.add(name, [d, handle, kind](const KernelContext &ctx) {
      return buildConv(*d, handle, ctx, kind);
    });
  }
}

} // namespace dtcc::runtime::cuda
