//===- CudaGeneratedKernels.h - Launching the compiler's GPU kernels -*- C++ -*-===//
//
// The kernels the compiler generated for fused regions (runtime/format/
// GpuKernelModule.h), loaded with the CUDA driver API: cuModuleLoadData on
// the cubin of the device's architecture, else the newest PTX not above it
// compiled by the driver (cuModuleLoadDataEx, its log in the error),
// cuModuleGetFunction per kernel, cuLaunchKernel per launch on the stream
// the caller gives (the device's compute stream). The driver's entry points
// come through cudart (cudaGetDriverEntryPointByVersion), so nothing links
// libcuda and executables still start where there is no driver.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CUDA_CUDAGENERATEDKERNELS_H
#define DTCC_RUNTIME_DEVICE_CUDA_CUDAGENERATEDKERNELS_H

#include "runtime/base/Status.h"
#include "runtime/exec/Kernel.h"
#include "runtime/format/GpuKernelModule.h"

#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <string>

namespace dtcc::runtime::cuda {

class CudaDevice;

class CudaGeneratedKernels {
public:
  /// Loads `module` on the current device and resolves every kernel its
  /// regions launch; checks every region's launches against the device's
  /// limits first.
  static StatusOr<std::unique_ptr<CudaGeneratedKernels>>
  load(GpuKernelModule module);
  ~CudaGeneratedKernels();
  CudaGeneratedKernels(const CudaGeneratedKernels &) = delete;
  CudaGeneratedKernels &operator=(const CudaGeneratedKernels &) = delete;

  const GpuKernelModule &module() const { return module_; }
  /// "cubin sm_90" or "PTX sm_80 (JIT)": what was loaded.
  const std::string &loadedImage() const { return loaded_; }

  /// Launches `region`'s kernels in order on `stream`. `buffers` are the
  /// region's buffers in operand order (device pointers); `scratch` holds
  /// gpuScratchOffsets(region).back() bytes (null when that is 0).
  Status launch(const GpuFusedRegion &region, void *const *buffers,
                void *scratch, cudaStream_t stream) const;

private:
  CudaGeneratedKernels() = default;
  GpuKernelModule module_;
  std::string loaded_;
  void *cuModule_ = nullptr;
  std::map<std::string, void *> functions_;
};

/// Binds a fused instruction (kernel `fused`, attribute `symbol`: the
/// region-function form of docs/architecture.md, "Fused regions") to that
/// region of `kernels`: the instruction's inputs then outputs are the
/// region's buffers in operand order (contiguous), its temporaries one
/// compute-scratch request; the closure launches on the compute stream.
StatusOr<KernelFn> bindCudaFusedRegion(CudaDevice &device,
                                       const CudaGeneratedKernels &kernels,
                                       const KernelContext &ctx);

/// The CUDA factory of the kernel `fused`: binds each instruction to the
/// generated kernels the device loaded for the program being bound
/// (CudaDevice::loadGpuKernels).
KernelFactory cudaFusedKernelFactory(CudaDevice &device);

} // namespace dtcc::runtime::cuda

#endif // DTCC_RUNTIME_DEVICE_CUDA_CUDAGENERATEDKERNELS_H
