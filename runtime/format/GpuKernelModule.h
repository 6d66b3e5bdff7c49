//===- GpuKernelModule.h - Generated GPU kernels of fused regions -*- C++ -*-===//
//
// What the compiler's GPU code generation (compiler/codegen/GpuCodegen.h)
// hands the CUDA runtime: per fused region the kernels to launch in order,
// each with its grid, block, shared memory and parameter list, and per GPU
// architecture the PTX and (where ptxas ran) the cubin of all kernels. Plain
// C++: the runtime reads it without MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_FORMAT_GPUKERNELMODULE_H
#define DTCC_RUNTIME_FORMAT_GPUKERNELMODULE_H

#include "runtime/base/Status.h"

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dtcc::runtime {

/// One kernel launch of a region. Every kernel parameter is one device
/// pointer (the bare-pointer memref convention): `params[k]` is the index
/// of the buffer passed as parameter k. Indices below the region's
/// `numBuffers` are the region's buffers in operand order; index
/// `numBuffers + s` is the region's scratch buffer s.
struct GpuKernelLaunch {
  std::string kernel;
  std::array<uint32_t, 3> grid{1, 1, 1};
  std::array<uint32_t, 3> block{1, 1, 1};
  uint32_t sharedBytes = 0;
  std::vector<uint32_t> params;
};

/// A fused region: the symbol the CPU side exports for it, how many buffers
/// it takes, the scratch it needs (bytes of each temporary, laid out back to
/// back at 256-byte alignment, see `gpuScratchOffsets`) and its launches, run
/// in order on one stream.
struct GpuFusedRegion {
  std::string symbol;
  uint32_t numBuffers = 0;
  std::vector<uint64_t> scratchBytes;
  std::vector<GpuKernelLaunch> launches;
};

/// The code of every kernel for one architecture (`sm_80`): PTX always, the
/// cubin ptxas made of it where ptxas was found at compile time.
struct GpuKernelImage {
  std::string chip;
  std::string ptx;
  std::string cubin;
};

struct GpuKernelModule {
  std::vector<GpuFusedRegion> regions;
  std::vector<GpuKernelImage> images;

  const GpuFusedRegion *findRegion(std::string_view symbol) const;
};

/// Device limits a launch is checked against (CUDA's for sm_80 and sm_90).
struct GpuLaunchLimits {
  uint32_t maxThreadsPerBlock = 1024;
  std::array<uint32_t, 3> maxBlock{1024, 1024, 64};
  std::array<uint32_t, 3> maxGrid{0x7fffffffu, 65535u, 65535u};
  uint32_t maxSharedBytes = 48 * 1024;
};

/// Checks every launch of `region` against `limits` and its parameters
/// against the region's buffers and scratch; the error names the region and
/// the kernel.
Status checkGpuRegion(const GpuFusedRegion &region,
                      const GpuLaunchLimits &limits = {});

/// Offsets of the region's scratch buffers in one allocation (256-byte
/// aligned, as cudaMalloc's) and, last, the allocation's total size.
std::vector<uint64_t> gpuScratchOffsets(const GpuFusedRegion &region);

/// The parameter pointers of `launch` as cuLaunchKernel's `kernelParams`
/// wants them: `values` receives the device pointers (buffers[i] for a
/// region buffer, scratch + offset for a scratch one) and the result points
/// at each of them. `values` must outlive the launch.
std::vector<void *> packGpuKernelParams(const GpuFusedRegion &region,
                                        const GpuKernelLaunch &launch,
                                        void *const *buffers, void *scratch,
                                        std::vector<void *> &values);

/// The image to load on a device of compute capability major.minor: the
/// cubin for exactly that architecture if there is one, else the PTX of the
/// newest architecture not above it (the driver compiles it). Null when
/// every image is for a newer architecture. `useCubin` says which.
const GpuKernelImage *chooseGpuImage(const GpuKernelModule &module, int major,
                                     int minor, bool &useCubin);

/// A byte string of the module (little-endian lengths and counts) and its
/// parser, which refuses truncated or inconsistent input by name.
std::string serializeGpuKernelModule(const GpuKernelModule &module);
StatusOr<GpuKernelModule> parseGpuKernelModule(std::string_view bytes);

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_FORMAT_GPUKERNELMODULE_H
