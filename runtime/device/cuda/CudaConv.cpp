//===- CudaConv.cpp - conv, conv_input_grad, conv_filter_grad on cuDNN ----===//
//
// Each factory checks its instruction with the CPU kernels' geometry
// (ConvGeometry), makes cuDNN's descriptors, picks an algorithm with
// cuDNN's heuristics (the fastest deterministic one whose workspace fits
// kCudaConvWorkspaceBytes), and requests its compute scratch as
// runtime/exec/CudaScratch.h says (the capped workspace, and the padded
// copy of an asymmetric window's input); the closure then only launches on
// the compute stream, into scratch reserved before the first run. The
// device's cuDNN handle is made at the first bind.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cuda/CudaConv.h"

#include "runtime/device/cpu/CpuKernelUtils.h"
#include "runtime/device/cuda/CudaCheck.h"
#include "runtime/device/cuda/CudaDevice.h"
#include "runtime/device/cuda/CudaLaunch.h"
#include "runtime/device/cuda/CudnnCommon.h"
#include "runtime/exec/CudaScratch.h"

#include <cstdlib>
#include <memory>

namespace dtcc::runtime::cuda {
namespace {

using cpu::ConvGeometry;
using cpu::ConvKind;

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

Status useMath(Descriptors &d, const CudnnConvTypes &t, cudnnMathType_t m) {
  if (t.math != CUDNN_FMA_MATH)
    DTCC_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, m));
  return Status::ok();
}

/// cuDNN's workspace of algorithm `algo` of `kind` on the descriptors as
/// they are (math mode included).
Status workspaceOf(cudnnHandle_t h, const Descriptors &d, ConvKind kind,
                   int algo, size_t *bytes) {
  switch (kind) {
  case ConvKind::kForward:
    DTCC_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(
        h, d.input, d.filter, d.conv, d.output, cudnnConvolutionFwdAlgo_t(algo),
        bytes));
    break;
  case ConvKind::kInputGrad:
    DTCC_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(
        h, d.filter, d.output, d.conv, d.input,
        cudnnConvolutionBwdDataAlgo_t(algo), bytes));
    break;
  case ConvKind::kFilterGrad:
    DTCC_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(
        h, d.input, d.output, d.conv, d.filter,
        cudnnConvolutionBwdFilterAlgo_t(algo), bytes));
    break;
  }
  return Status::ok();
}

/// The algorithm of a convolution and its workspace.
struct Algorithm {
  int algo = 0;
  size_t workspace = 0;
};

/// Among cuDNN's heuristic results (fastest first): the first that
/// succeeded, keeps to the allowed math (f32 without TF32 passes over
/// tensor-core algorithms), is deterministic and whose workspace, as cuDNN
/// sizes it for these descriptors, fits kCudaConvWorkspaceBytes; failing
/// that, the first such of any determinism (the list has every algorithm
/// cuDNN supports here, those that need no workspace included). The
/// descriptor's math mode is left at the chosen algorithm's. -1 when none
/// fits.
template <typename Perf>
StatusOr<Algorithm> pickAlgorithm(cudnnHandle_t h, Descriptors &d,
                                  ConvKind kind, const Perf *perf, int count,
                                  const CudnnConvTypes &t) {
  for (bool deterministic : {true, false})
    for (int i = 0; i < count; ++i) {
      const Perf &p = perf[i];
      if (p.status != CUDNN_STATUS_SUCCESS ||
          p.memory > size_t(kCudaConvWorkspaceBytes))
        continue;
      if (t.math == CUDNN_FMA_MATH &&
          (p.mathType == CUDNN_TENSOR_OP_MATH ||
           p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION))
        continue;
      // ALLOW_CONVERSION rounds f32 data to f16 for the tensor cores:
      // below the TF32 that DTCC_CUDA_ALLOW_TF32 opts into.
      if (t.data == CUDNN_DATA_FLOAT &&
          p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)
        continue;
      if (deterministic && p.determinism != CUDNN_DETERMINISTIC)
        continue;
      DTCC_RETURN_IF_ERROR(useMath(d, t, p.mathType));
      Algorithm a;
      a.algo = int(p.algo);
      DTCC_RETURN_IF_ERROR(workspaceOf(h, d, kind, a.algo, &a.workspace));
      if (a.workspace <= size_t(kCudaConvWorkspaceBytes))
        return a;
    }
  return Algorithm{-1, 0};
}

/// The algorithm of `kind` (pickAlgorithm over cuDNN's heuristics).
StatusOr<Algorithm> chooseAlgorithm(cudnnHandle_t h, Descriptors &d,
                                    ConvKind kind, const CudnnConvTypes &t,
                                    const KernelContext &ctx) {
  int found = 0;
  Algorithm a;
  switch (kind) {
  case ConvKind::kForward: {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    DTCC_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
        h, d.input, d.filter, d.conv, d.output,
        CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf));
    DTCC_ASSIGN_OR_RETURN(a, pickAlgorithm(h, d, kind, perf, found, t));
    break;
  }
  case ConvKind::kInputGrad: {
    cudnnConvolutionBwdDataAlgoPerf_t
        perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    DTCC_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
        h, d.filter, d.output, d.conv, d.input,
        CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &found, perf));
    DTCC_ASSIGN_OR_RETURN(a, pickAlgorithm(h, d, kind, perf, found, t));
    break;
  }
  case ConvKind::kFilterGrad: {
    cudnnConvolutionBwdFilterAlgoPerf_t
        perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    DTCC_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        h, d.input, d.output, d.conv, d.filter,
        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &found, perf));
    DTCC_ASSIGN_OR_RETURN(a, pickAlgorithm(h, d, kind, perf, found, t));
    break;
  }
  }
  if (a.algo < 0)
    return unimplemented(cpu::errorPrefix(ctx),
                         "cuDNN offers no algorithm for this convolution "
                         "within a workspace of ",
                         kCudaConvWorkspaceBytes >> 20,
                         " MiB (runtime/exec/CudaScratch.h)");
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
  prepareLayout(l);
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
  // The capped workspace and the padded copy (CudaScratch.h); nothing for
  // the empty convolutions below.
  DTCC_ASSIGN_OR_RETURN(ScratchSet set, cudaKernelScratch(ctx));
  std::vector<ScratchSlot> slots;
  if (!set.empty()) {
    DTCC_ASSIGN_OR_RETURN(slots, ctx.requestScratch(set));
  }
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
  const int elemSize = int(dtypeSize(dtype));
  const int64_t paddedBytes =
      plan.explicitPad ? plan.inputElements() * elemSize : 0;
  if (slots.size() != (plan.explicitPad ? 2u : 1u) ||
      set[0].bytes != kCudaConvWorkspaceBytes ||
      (plan.explicitPad && set[1].bytes != paddedBytes))
    return internalError(cpu::errorPrefix(ctx),
                         "runtime/exec/CudaScratch.h and the convolution's "
                         "plan disagree on its scratch");
  DTCC_RETURN_IF_ERROR(handle->ensure(dev.computeStream()));
  auto desc = std::make_shared<Descriptors>();
  DTCC_RETURN_IF_ERROR(describe(*desc, plan, t).withContext(
      cpu::errorPrefix(ctx) + "describing the convolution"));
  DTCC_ASSIGN_OR_RETURN(Algorithm algo,
                        chooseAlgorithm(handle->handle, *desc, kind, t, ctx));

  // The buffers in the convolution's roles: input (x, or dx written),
  // filter (w, or dw written), output (y written, or dy).
  void *input = kind == ConvKind::kInputGrad ? out : ctx.inputs[0].data;
  const void *filter = kind == ConvKind::kFilterGrad ? nullptr
                                                     : ctx.inputs[1].data;
  void *dfilter = kind == ConvKind::kFilterGrad ? out : nullptr;
  const void *dy = kind == ConvKind::kInputGrad    ? ctx.inputs[0].data
                   : kind == ConvKind::kFilterGrad ? ctx.inputs[1].data
                                                   : nullptr;
  void *y = kind == ConvKind::kForward ? out : nullptr;
  // An asymmetric window convolves a zero-padded copy of the input, in
  // compute scratch that other kernels use between runs: zeroed and the
  // input copied into its interior before each run (conv,
  // conv_filter_grad), or the input gradient read out of its interior after
  // (conv_input_grad: cuDNN writes all of it).
  Layout copy;
  int64_t interiorOffset = 0;
  if (plan.explicitPad) {
    DTCC_ASSIGN_OR_RETURN(copy, interiorLayout(ctx, plan,
                                               kind != ConvKind::kInputGrad,
                                               interiorOffset));
  }
  const bool explicitPad = plan.explicitPad;
  const ScratchSlot workspaceSlot = slots[0];
  const ScratchSlot paddedSlot = explicitPad ? slots[1] : ScratchSlot();
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
    void *workspace = wsBytes > 0 ? workspaceSlot.get() : nullptr;
    char *padded = paddedSlot.as<char>();
    if ((wsBytes > 0 && !workspace) || (explicitPad && !padded))
      return internalError(prefix, "the convolution's scratch was never "
                                   "reserved");
    void *x = explicitPad ? static_cast<void *>(padded) : input;
    char *interior = explicitPad ? padded + interiorOffset * elemSize : nullptr;
    auto launchCopyOrFail = [&](void *to, const void *from) -> Status {
      cudaError_t err = launchCopy(elemSize, copy, to, from, stream);
      if (err != cudaSuccess)
        return internalError(prefix, "padded copy failed: ",
                             cudaGetErrorString(err));
      return Status::ok();
    };
    auto fillPadded = [&]() -> Status {
      DTCC_CUDA_CHECK(
          cudaMemsetAsync(padded, 0, size_t(paddedBytes), stream));
      return launchCopyOrFail(interior, input);
    };
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    switch (kind) {
    case ConvKind::kForward:
      if (explicitPad)
        DTCC_RETURN_IF_ERROR(fillPadded());
      s = cudnnConvolutionForward(
          h->handle, alpha, desc->input, x, desc->filter, filter, desc->conv,
          cudnnConvolutionFwdAlgo_t(cudnnAlgo), workspace, wsBytes, beta,
          desc->output, y);
      break;
    case ConvKind::kInputGrad:
      s = cudnnConvolutionBackwardData(
          h->handle, alpha, desc->filter, filter, desc->output, dy,
          desc->conv, cudnnConvolutionBwdDataAlgo_t(cudnnAlgo), workspace,
          wsBytes, beta, desc->input, x);
      if (s == CUDNN_STATUS_SUCCESS && explicitPad)
        DTCC_RETURN_IF_ERROR(launchCopyOrFail(input, interior));
      break;
    case ConvKind::kFilterGrad:
      if (explicitPad)
        DTCC_RETURN_IF_ERROR(fillPadded());
      s = cudnnConvolutionBackwardFilter(
          h->handle, alpha, desc->input, x, desc->output, dy, desc->conv,
          cudnnConvolutionBwdFilterAlgo_t(cudnnAlgo), workspace, wsBytes,
          beta, desc->filter, dfilter);
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
