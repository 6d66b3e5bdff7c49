//===- CudaDevice.h - an NVIDIA GPU as a runtime device ---------*- C++ -*-===//
//
// One rank drives one GPU (chooseCudaDevice picks it among the visible
// ones). The device owns a compute stream, a communication stream for
// collectives and two for sends and receives (one per direction; events
// order them all), the arenas of the static memory plan carved from one
// allocation, a cuBLASLt handle, the NCCL communicators of the mesh, and the
// kernel registry (CudaKernels.cpp, CudaMatmul.cpp, CudaCollectives.cpp).
// Kernels' scratch (cuBLASLt's workspace, collective staging, ...) is
// reserved per program when it is bound (runtime/exec/Scratch.h): nothing
// is allocated while a program runs.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CUDA_CUDADEVICE_H
#define DTCC_RUNTIME_DEVICE_CUDA_CUDADEVICE_H

#include "runtime/comm/nccl/NcclComm.h"
#include "runtime/device/Device.h"
#include "runtime/device/cuda/CudaLaunch.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dtcc::runtime {

class MeshComms;
class World;

namespace cuda {

/// Consecutive adamw instructions bound as one launch (CudaKernels.cpp).
struct AdamwGroup;
class CudaGeneratedKernels;

class CudaDevice final : public Device {
public:
  /// The GPU of local rank `localRank` of `localRanks` on this node (0:
  /// unknown), among the visible ones (chooseCudaDevice). Without a usable
  /// GPU: unavailable, "no CUDA device: cudaGetDeviceCount returned ...;
  /// this program was compiled for --target cuda".
  static StatusOr<std::unique_ptr<CudaDevice>> create(int localRank,
                                                      int localRanks = 0);
  /// The names of the kernels every CUDA device registers, known without a
  /// GPU (registering touches no CUDA API), to check them against the
  /// kernel-signature table.
  static std::vector<std::string> kernelNames();
  ~CudaDevice() override;

  std::string name() const override { return name_; }
  StatusOr<void *> allocate(int64_t bytes) override;
  void deallocate(void *ptr) override;
  /// One cudaMalloc, carved at 256-byte boundaries (carveArenas).
  StatusOr<std::vector<void *>>
  allocateArenas(const std::vector<int64_t> &bytes) override;
  Status copyHostToDevice(void *dst, const void *src, int64_t bytes) override;
  Status copyDeviceToHost(void *dst, const void *src, int64_t bytes) override;
  Status fillZero(void *dst, int64_t bytes) override;
  /// Pinned host memory (cudaHostAlloc), which cudaMemcpyAsync moves
  /// asynchronously at the link's full bandwidth.
  StatusOr<void *> allocateHost(int64_t bytes) override;
  void deallocateHost(void *ptr) override;
  /// Waits for the copy stream: the transfers queued so far are done.
  Status waitForTransfers() override;
  /// The CPU device's kernels, which host instructions run.
  const KernelRegistry &hostKernels() const override { return hostRegistry_; }
  /// Flushes grouped send/recv, waits for every stream, and reports the
  /// first data-dependent kernel error (DeviceError) with its instruction;
  /// the error slot is read and cleared on the compute stream, in order
  /// with the kernels that write it.
  Status synchronize() override;
  /// synchronize() but for the send/recv streams (their sends may wait for
  /// receives the peer posts later; the function's end waits for them).
  Status synchronizeForTiming() override;
  /// Events on the compute stream (collectives and transfers on their own
  /// streams overlap it and are not in the intervals).
  bool timesOnDevice() const override { return true; }
  Status markTime() override;
  StatusOr<std::vector<double>> takeMarkIntervals() override;
  const KernelRegistry &kernels() const override { return registry_; }
  /// Ends the adamw group being bound: fusion stays inside a function.
  void beginFunction() override { openAdamw_.reset(); }
  /// Loads the program's generated kernels (CudaGeneratedKernels), which the
  /// `fused` instructions bound after it launch.
  Status loadGpuKernels(std::string_view module) override;
  /// The generated kernels loaded last; null before.
  std::shared_ptr<const CudaGeneratedKernels> generatedKernels() const {
    return generated_;
  }

  cudaStream_t computeStream() const { return compute_; }
  cudaStream_t commStream() const { return comm_; }
  /// The stream of transfers between device and host memory
  /// (`copy_to_host`, `copy_to_device`), which overlap the compute stream.
  cudaStream_t copyStream() const { return copy_; }
  /// Orders the compute stream after the transfers issued so far.
  Status computeWaitsForTransfers();
  /// The stream of point-to-point traffic to higher group ranks (`up`) or
  /// to lower ones (NcclMesh::findP2P).
  cudaStream_t p2pStream(bool up) const { return up ? p2pUp_ : p2pDown_; }
  DeviceError *errorSlot() const { return error_; }
  /// Numbers an instruction for DeviceError ("gather at 'node'").
  int32_t registerSite(std::string description);
  cublasLtHandle_t cublasLt() const { return lt_; }
  int ordinal() const { return ordinal_; }
  /// cudaMalloc'd bytes held now and at most.
  int64_t mallocBytes() const { return mallocBytes_; }
  const cudaDeviceProp &properties() const { return props_; }

  /// Creates one NCCL communicator per communicator of `mesh` (the unique
  /// id shared over `world`'s bootstrap, ncclCommSplit per axis) and the
  /// watchdog that aborts them on the collective timeout.
  Status attachMesh(const MeshComms &mesh, World &world, double timeoutSeconds);
  NcclMesh *nccl() const { return nccl_.get(); }

  /// Device memory as measured by the CUDA runtime, for the runner's
  /// closing line: `total` and the bytes in use (total - free of
  /// cudaMemGetInfo, every process of the GPU counted) once the context
  /// existed at creation and now, and the bytes this device cudaMalloc'd
  /// (at most at once: the arenas, the error slot).
  struct MemoryUse {
    int64_t total = 0, usedAtCreate = 0, usedNow = 0;
    int64_t mallocPeak = 0;
  };
  MemoryUse memoryUse() const;
  /// The same, for state that may outlive the device (a program's
  /// asynchronous collectives, kept by its CommContext).
  std::weak_ptr<NcclMesh> ncclWeak() const { return nccl_; }

  /// Point-to-point operations queued by send/recv kernels, issued by the
  /// next non-p2p kernel or synchronize as one ncclGroupStart/End per
  /// direction, on that direction's communicator and stream.
  struct P2POp {
    bool send;
    bool up;        ///< traffic to a higher group rank (see NcclMesh)
    NcclComm *comm; ///< the direction's communicator
    void *data;
    int64_t bytes;
    int peer;
    cudaEvent_t done; ///< recorded on the comm stream after the group
    bool blocking;    ///< the compute stream waits for `done`
    std::string description;
  };
  void queueP2P(P2POp op) { pendingP2P_.push_back(std::move(op)); }
  Status flushP2P();

  /// Orders the comm stream after the compute work issued so far.
  Status commWaitsForCompute() { return waitsForCompute(comm_); }
  /// Orders `stream` after the compute work issued so far.
  Status waitsForCompute(cudaStream_t stream);

  /// The adamw group the next adamw instruction may join: the one the
  /// previous instruction bound started or joined; reset by binding any
  /// other kernel and by beginFunction.
  std::shared_ptr<AdamwGroup> &openAdamwGroup() { return openAdamw_; }

private:
  /// Flushes grouped send/recv, waits for the streams (the send/recv ones
  /// when `p2p`), and reports the first data-dependent kernel error.
  Status synchronizeStreams(bool p2p);
  CudaDevice() = default;

  std::string name_;
  int ordinal_ = 0;
  cudaDeviceProp props_{};
  cudaStream_t compute_ = nullptr, comm_ = nullptr;
  cudaStream_t p2pUp_ = nullptr, p2pDown_ = nullptr;
  cudaStream_t copy_ = nullptr;
  cudaEvent_t computeDone_ = nullptr, transfersDone_ = nullptr;
  /// markTime's events, created as needed and kept; the first `marks_`
  /// are recorded.
  std::vector<cudaEvent_t> timeMarks_;
  size_t marks_ = 0;
  /// The host's kernels (runtime/device/cpu).
  KernelRegistry hostRegistry_;
  DeviceError *error_ = nullptr;
  std::vector<std::string> sites_;
  cublasLtHandle_t lt_ = nullptr;
  /// Carved allocations: base -> pointers handed out not yet deallocated.
  std::map<void *, int> slabs_;
  std::map<void *, int64_t> slabBytes_;
  int64_t mallocBytes_ = 0, mallocPeak_ = 0;
  int64_t memTotal_ = 0, usedAtCreate_ = 0;
  std::map<void *, void *> slabOf_;
  std::vector<P2POp> pendingP2P_;
  std::shared_ptr<NcclMesh> nccl_;
  std::shared_ptr<AdamwGroup> openAdamw_;
  std::shared_ptr<const CudaGeneratedKernels> generated_;
  KernelRegistry registry_;
};

/// Registers the kernels of `device` (every family) into its registry.
void registerCudaKernels(KernelRegistry &registry, CudaDevice &device);
void registerCudaMatmulKernels(KernelRegistry &registry, CudaDevice &device);
void registerCudaCollectiveKernels(KernelRegistry &registry,
                                   CudaDevice &device);
/// resize, pad_grad, gather_nd, scatter_nd, scatter_elements, top_k
/// (CudaTensorOps.cpp).
void registerCudaTensorOpKernels(KernelRegistry &registry, CudaDevice &device);
/// attention, attention_grad (CudaAttention.cpp).
void registerCudaAttentionKernels(KernelRegistry &registry,
                                  CudaDevice &device);
/// The pad kernel of modes edge, reflect and wrap, as the instruction's
/// `mode` attribute says (CudaTensorOps.cpp).
StatusOr<KernelFn> buildCudaModePad(CudaDevice &device,
                                    const KernelContext &ctx);

} // namespace cuda

/// The GPU of `localRank`, as a Device; see CudaDevice::create.
StatusOr<std::unique_ptr<Device>> createCudaDevice(int localRank,
                                                   int localRanks = 0);

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_DEVICE_CUDA_CUDADEVICE_H
