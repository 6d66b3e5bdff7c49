//===- CudaGeneratedKernels.cpp - Launching the compiler's GPU kernels ----===//

#include "runtime/device/cuda/CudaGeneratedKernels.h"

#include "runtime/device/cuda/CudaCheck.h"
#include "runtime/device/cuda/CudaDevice.h"

#include <cuda.h>

#include <mutex>

namespace dtcc::runtime::cuda {
namespace {

/// The driver functions used here, resolved once through cudart.
struct Driver {
  CUresult (*getErrorString)(CUresult, const char **) = nullptr;
  CUresult (*moduleLoadData)(CUmodule *, const void *) = nullptr;
  CUresult (*moduleLoadDataEx)(CUmodule *, const void *, unsigned int,
                               CUjit_option *, void **) = nullptr;
  CUresult (*moduleGetFunction)(CUfunction *, CUmodule, const char *) = nullptr;
  CUresult (*moduleUnload)(CUmodule) = nullptr;
  CUresult (*launchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                           unsigned, unsigned, unsigned, CUstream, void **,
                           void **) = nullptr;
  Status status;
};

template <typename Fn> Status resolve(const char *symbol, Fn &fn) {
  void *address = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  DTCC_CUDA_CHECK(cudaGetDriverEntryPointByVersion(
      symbol, &address, 12000, cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || !address)
    return unavailable("the CUDA driver has no ", symbol,
                       " (a driver for CUDA 12.0 or newer is needed)");
  fn = reinterpret_cast<Fn>(address);
  return Status::ok();
}

const Driver &driver() {
  static Driver d;
  static std::once_flag once;
  std::call_once(once, [] {
    Status s = resolve("cuGetErrorString", d.getErrorString);
    if (s.isOk())
      s = resolve("cuModuleLoadData", d.moduleLoadData);
    if (s.isOk())
      s = resolve("cuModuleLoadDataEx", d.moduleLoadDataEx);
    if (s.isOk())
      s = resolve("cuModuleGetFunction", d.moduleGetFunction);
    if (s.isOk())
      s = resolve("cuModuleUnload", d.moduleUnload);
    if (s.isOk())
      s = resolve("cuLaunchKernel", d.launchKernel);
    d.status = s;
  });
  return d;
}

Status driverStatus(CUresult err, const char *call, const std::string &what) {
  const char *text = nullptr;
  if (driver().getErrorString)
    driver().getErrorString(err, &text);
  return internalError("CUDA driver error ", static_cast<int>(err), " (",
                       text ? text : "unknown", ") in ", call, " ", what);
}

} // namespace

StatusOr<std::unique_ptr<CudaGeneratedKernels>>
CudaGeneratedKernels::load(GpuKernelModule module) {
  const Driver &d = driver();
  DTCC_RETURN_IF_ERROR(d.status);
  int device = 0, major = 0, minor = 0, maxThreads = 0, maxShared = 0;
  DTCC_CUDA_CHECK(cudaGetDevice(&device));
  DTCC_CUDA_CHECK(cudaFree(nullptr)); // the primary context, current
  DTCC_CUDA_CHECK(cudaDeviceGetAttribute(
      &major, cudaDevAttrComputeCapabilityMajor, device));
  DTCC_CUDA_CHECK(cudaDeviceGetAttribute(
      &minor, cudaDevAttrComputeCapabilityMinor, device));
  DTCC_CUDA_CHECK(cudaDeviceGetAttribute(
      &maxThreads, cudaDevAttrMaxThreadsPerBlock, device));
  DTCC_CUDA_CHECK(cudaDeviceGetAttribute(
      &maxShared, cudaDevAttrMaxSharedMemoryPerBlock, device));
  GpuLaunchLimits limits;
  limits.maxThreadsPerBlock = static_cast<uint32_t>(maxThreads);
  limits.maxSharedBytes = static_cast<uint32_t>(maxShared);
  for (const GpuFusedRegion &region : module.regions)
    DTCC_RETURN_IF_ERROR(checkGpuRegion(region, limits));

  bool useCubin = false;
  const GpuKernelImage *image = chooseGpuImage(module, major, minor, useCubin);
  if (!image) {
    std::string chips;
    for (const GpuKernelImage &i : module.images)
      chips += (chips.empty() ? "" : ", ") + i.chip;
    return unavailable("no generated kernel image runs on this GPU (sm_",
                       major, minor, "): the program has ", chips,
                       "; compile for an architecture not above it");
  }

  std::unique_ptr<CudaGeneratedKernels> kernels(new CudaGeneratedKernels());
  CUmodule cuModule = nullptr;
  if (useCubin) {
    CUresult err = d.moduleLoadData(&cuModule, image->cubin.data());
    if (err != CUDA_SUCCESS)
      return driverStatus(err, "cuModuleLoadData",
                          "loading the " + image->chip + " cubin");
    kernels->loaded_ = "cubin " + image->chip;
  } else {
    char log[8192] = {0};
    CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER,
                              CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *values[] = {log, reinterpret_cast<void *>(sizeof(log))};
    CUresult err =
        d.moduleLoadDataEx(&cuModule, image->ptx.c_str(), 2, options, values);
    if (err != CUDA_SUCCESS)
      return driverStatus(err, "cuModuleLoadDataEx",
                          "compiling the " + image->chip + " PTX: " + log);
    kernels->loaded_ = "PTX " + image->chip + " (JIT)";
  }
  kernels->cuModule_ = cuModule;
  for (const GpuFusedRegion &region : module.regions)
    for (const GpuKernelLaunch &launch : region.launches) {
      if (kernels->functions_.count(launch.kernel))
        continue;
      CUfunction fn = nullptr;
      CUresult err =
          d.moduleGetFunction(&fn, cuModule, launch.kernel.c_str());
      if (err != CUDA_SUCCESS)
        return driverStatus(err, "cuModuleGetFunction",
                            "for kernel '" + launch.kernel + "' of region '" +
                                region.symbol + "'");
      kernels->functions_[launch.kernel] = reinterpret_cast<void *>(fn);
    }
  kernels->module_ = std::move(module);
  return kernels;
}

CudaGeneratedKernels::~CudaGeneratedKernels() {
  if (cuModule_ && driver().moduleUnload)
    driver().moduleUnload(static_cast<CUmodule>(cuModule_));
}

Status CudaGeneratedKernels::launch(const GpuFusedRegion &region,
                                    void *const *buffers, void *scratch,
                                    cudaStream_t stream) const {
  std::vector<void *> values;
  for (const GpuKernelLaunch &launch : region.launches) {
    auto fn = functions_.find(launch.kernel);
    if (fn == functions_.end())
      return internalError("fused region '", region.symbol, "': kernel '",
                           launch.kernel, "' was not loaded");
    std::vector<void *> params =
        packGpuKernelParams(region, launch, buffers, scratch, values);
    CUresult err = driver().launchKernel(
        static_cast<CUfunction>(fn->second), launch.grid[0], launch.grid[1],
        launch.grid[2], launch.block[0], launch.block[1], launch.block[2],
        launch.sharedBytes, stream, params.data(), nullptr);
    if (err != CUDA_SUCCESS)
      return driverStatus(err, "cuLaunchKernel",
                          "of kernel '" + launch.kernel + "' of region '" +
                              region.symbol + "'");
  }
  return Status::ok();
}

StatusOr<KernelFn> bindCudaFusedRegion(CudaDevice &device,
                                       const CudaGeneratedKernels &kernels,
                                       const KernelContext &ctx) {
  auto symbolAttr = ctx.attrs.getString("symbol");
  if (!symbolAttr.isOk())
    return ctx.error(symbolAttr.status().message());
  const std::string symbol = symbolAttr.value();
  const GpuFusedRegion *region = kernels.module().findRegion(symbol);
  if (!region)
    return ctx.error("no generated GPU kernel for fused region '", symbol,
                     "'");
  std::vector<const TensorView *> views;
  for (const TensorView &v : ctx.inputs)
    views.push_back(&v);
  for (const TensorView &v : ctx.outputs)
    views.push_back(&v);
  if (views.size() != region->numBuffers)
    return ctx.error("fused region '", symbol, "' takes ", region->numBuffers,
                     " buffers, the instruction has ", views.size());
  std::vector<void *> buffers;
  for (const TensorView *v : views) {
    if (!v->isContiguous())
      return ctx.error("fused region '", symbol,
                       "' takes contiguous buffers, got ", v->typeString(),
                       " with strides");
    buffers.push_back(v->data);
  }
  std::vector<ScratchSlot> slots;
  uint64_t scratchBytes = gpuScratchOffsets(*region).back();
  if (scratchBytes > 0) {
    ScratchRequest request;
    request.use = ScratchUse::kCompute;
    request.bytes = static_cast<int64_t>(scratchBytes);
    auto requested = ctx.requestScratch({request});
    if (!requested.isOk())
      return requested.status();
    slots = std::move(requested).value();
  }
  cudaStream_t stream = device.computeStream();
  return KernelFn([&kernels, region, buffers, slots, stream]() {
    void *scratch = slots.empty() ? nullptr : slots.front().get();
    return kernels.launch(*region, buffers.data(), scratch, stream);
  });
}

KernelFactory cudaFusedKernelFactory(CudaDevice &device) {
  return [&device](const KernelContext &ctx) -> StatusOr<KernelFn> {
    std::shared_ptr<const CudaGeneratedKernels> kernels =
        device.generatedKernels();
    if (!kernels)
      return ctx.error("the program has no generated GPU kernels (an "
                       "executable without its kernels section: compile it "
                       "again with --target cuda)");
    DTCC_ASSIGN_OR_RETURN(KernelFn fn,
                          bindCudaFusedRegion(device, *kernels, ctx));
    // The closure keeps the module loaded.
    return KernelFn([kernels, fn = std::move(fn)] { return fn(); });
  };
}

} // namespace dtcc::runtime::cuda
