//===- CudaDevice.cpp - an NVIDIA GPU as a runtime device -----------------===//

#include "runtime/device/cuda/CudaDevice.h"

#include "runtime/comm/Communicator.h"
#include "runtime/device/cuda/CudaCheck.h"
#include "runtime/device/cuda/CudaGeneratedKernels.h"
#include "runtime/device/cuda/DeviceChoice.h"
#include "runtime/device/cuda/LaunchConfig.h"

#include <cstdio>
#include <cstdlib>

namespace dtcc::runtime {
namespace cuda {

Status cudaStatus(cudaError_t err, const char *call, const char *file,
                  int line) {
  const StatusCode code = err == cudaErrorMemoryAllocation
                              ? StatusCode::kUnavailable
                              : StatusCode::kInternal;
  return Status(code, strCat("CUDA error ", cudaGetErrorName(err), " (",
                             cudaGetErrorString(err), ") in ", call, " at ",
                             file, ":", line));
}

Status cublasStatus(cublasStatus_t err, const char *call, const char *file,
                    int line) {
  return internalError("cuBLAS error ", cublasGetStatusName(err), " (",
                       cublasGetStatusString(err), ") in ", call, " at ", file,
                       ":", line);
}

Status ncclStatus(ncclResult_t err, ncclComm_t comm, const char *call,
                  const char *file, int line) {
  const char *detail = ncclGetLastError(comm);
  // ncclRemoteError: a peer failed (exited, or its network went down).
  return Status(err == ncclRemoteError   ? StatusCode::kPeerLost
                : err == ncclSystemError ? StatusCode::kUnavailable
                                         : StatusCode::kInternal,
                strCat("NCCL error ", int(err), " (", ncclGetErrorString(err),
                       detail && *detail ? std::string(": ") + detail : "",
                       ") in ", call, " at ", file, ":", line));
}

namespace {
void registerEveryCudaKernel(KernelRegistry &registry, CudaDevice &device) {
  registerCudaKernels(registry, device);
  registerCudaMatmulKernels(registry, device);
  registerCudaCollectiveKernels(registry, device);
  registry.add("fused", cudaFusedKernelFactory(device));
}
} // namespace

StatusOr<std::unique_ptr<CudaDevice>> CudaDevice::create(int localRank,
                                                         int localRanks) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::string why = err != cudaSuccess
                          ? strCat(cudaGetErrorName(err), " (",
                                   cudaGetErrorString(err), ")")
                          : std::string("0 devices");
    if (err == cudaErrorInsufficientDriver)
      why += "; the NVIDIA driver is older than this CUDA runtime needs";
    return unavailable("no CUDA device: cudaGetDeviceCount returned ", why,
                       "; this program was compiled for --target cuda (run "
                       "it on a machine with an NVIDIA GPU, or compile it "
                       "with --target cpu)");
  }
  DTCC_ASSIGN_OR_RETURN(
      int ordinal, chooseCudaDevice(count, localRank, localRanks,
                                    std::getenv("CUDA_VISIBLE_DEVICES")));
  std::unique_ptr<CudaDevice> d(new CudaDevice());
  d->ordinal_ = ordinal;
  DTCC_CUDA_CHECK(cudaSetDevice(ordinal));
  DTCC_CUDA_CHECK(cudaFree(nullptr)); // the context, now
  {
    size_t free = 0, total = 0;
    DTCC_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    d->memTotal_ = int64_t(total);
    d->usedAtCreate_ = int64_t(total - free);
  }
  DTCC_CUDA_CHECK(cudaGetDeviceProperties(&d->props_, ordinal));
  d->name_ = strCat("cuda:", ordinal, " (", d->props_.name, ", sm_",
                    d->props_.major, d->props_.minor, ")");
  setLaunchSmCount(d->props_.multiProcessorCount);
  DTCC_CUDA_CHECK(cudaStreamCreateWithFlags(&d->compute_, cudaStreamNonBlocking));
  DTCC_CUDA_CHECK(cudaStreamCreateWithFlags(&d->comm_, cudaStreamNonBlocking));
  DTCC_CUDA_CHECK(
      cudaStreamCreateWithFlags(&d->p2pUp_, cudaStreamNonBlocking));
  DTCC_CUDA_CHECK(
      cudaStreamCreateWithFlags(&d->p2pDown_, cudaStreamNonBlocking));
  DTCC_CUDA_CHECK(cudaStreamCreateWithFlags(&d->copy_, cudaStreamNonBlocking));
  DTCC_CUDA_CHECK(
      cudaEventCreateWithFlags(&d->computeDone_, cudaEventDisableTiming));
  DTCC_CUDA_CHECK(
      cudaEventCreateWithFlags(&d->transfersDone_, cudaEventDisableTiming));
  registerCpuKernels(d->hostRegistry_);
  DTCC_CUDA_CHECK(cudaMalloc(reinterpret_cast<void **>(&d->error_),
                             sizeof(DeviceError)));
  d->mallocBytes_ = d->mallocPeak_ = int64_t(sizeof(DeviceError));
  // On the compute stream, which the kernels that write it use: a plain
  // cudaMemset goes to the legacy stream, unordered with non-blocking ones.
  DTCC_CUDA_CHECK(
      cudaMemsetAsync(d->error_, 0, sizeof(DeviceError), d->compute_));
  DTCC_CUDA_CHECK(cudaStreamSynchronize(d->compute_));
  d->sites_.push_back(""); // site 0: no error
  DTCC_CUBLAS_CHECK(cublasLtCreate(&d->lt_));
  registerEveryCudaKernel(d->registry_, *d);
  // Queued send/recv go out as one NCCL group before any other kernel, and
  // binding any kernel but adamw ends the adamw group being bound.
  KernelRegistry wrapped;
  for (const std::string &name : d->registry_.names()) {
    KernelFactory factory = *d->registry_.find(name);
    CudaDevice *dev = d.get();
    const bool p2p = name == "send" || name == "recv";
    const bool adamw = name == "adamw";
    wrapped.add(name, [dev, factory, p2p, adamw](const KernelContext &ctx)
                          -> StatusOr<KernelFn> {
      if (!adamw)
        dev->openAdamw_.reset();
      DTCC_ASSIGN_OR_RETURN(KernelFn fn, factory(ctx));
      if (p2p)
        return fn;
      return KernelFn([dev, fn]() -> Status {
        DTCC_RETURN_IF_ERROR(dev->flushP2P());
        return fn();
      });
    });
  }
  d->registry_ = std::move(wrapped);
  return d;
}

Status CudaDevice::loadGpuKernels(std::string_view module) {
  DTCC_ASSIGN_OR_RETURN(GpuKernelModule parsed, parseGpuKernelModule(module));
  DTCC_ASSIGN_OR_RETURN(std::unique_ptr<CudaGeneratedKernels> loaded,
                        CudaGeneratedKernels::load(std::move(parsed)));
  generated_ = std::move(loaded);
  return Status::ok();
}

std::vector<std::string> CudaDevice::kernelNames() {
  // A device with no streams or handles: its factories are never called.
  CudaDevice unopened;
  KernelRegistry registry;
  registerEveryCudaKernel(registry, unopened);
  return registry.names();
}

CudaDevice::~CudaDevice() {
  if (compute_)
    cudaStreamSynchronize(compute_);
  if (comm_)
    cudaStreamSynchronize(comm_);
  for (cudaStream_t s : {p2pUp_, p2pDown_, copy_})
    if (s)
      cudaStreamSynchronize(s);
  nccl_.reset();
  for (auto &[base, _] : slabs_)
    cudaFree(base);
  if (lt_)
    cublasLtDestroy(lt_);
  if (error_)
    cudaFree(error_);
  if (computeDone_)
    cudaEventDestroy(computeDone_);
  if (transfersDone_)
    cudaEventDestroy(transfersDone_);
  for (cudaEvent_t e : timeMarks_)
    cudaEventDestroy(e);
  if (copy_)
    cudaStreamDestroy(copy_);
  if (compute_)
    cudaStreamDestroy(compute_);
  if (comm_)
    cudaStreamDestroy(comm_);
  for (cudaStream_t s : {p2pUp_, p2pDown_})
    if (s)
      cudaStreamDestroy(s);
}

CudaDevice::MemoryUse CudaDevice::memoryUse() const {
  MemoryUse m;
  m.total = memTotal_;
  m.usedAtCreate = usedAtCreate_;
  m.mallocPeak = mallocPeak_;
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) == cudaSuccess)
    m.usedNow = int64_t(total - free);
  return m;
}

StatusOr<void *> CudaDevice::allocate(int64_t bytes) {
  DTCC_ASSIGN_OR_RETURN(std::vector<void *> p, allocateArenas({bytes}));
  return p[0];
}

StatusOr<std::vector<void *>>
CudaDevice::allocateArenas(const std::vector<int64_t> &bytes) {
  ArenaLayout layout = carveArenas(bytes);
  // An arena of 0 bytes at the end (a program without constants) starts
  // where the slab ends, an address a later cudaMalloc may return: slabOf_
  // would then send its deallocate to that slab, freeing it early and
  // leaking this one. Every arena's address stays inside its slab.
  for (int64_t off : layout.offsets)
    if (off >= layout.totalBytes)
      layout.totalBytes = off + kArenaAlignment;
  void *base = nullptr;
  cudaError_t err = cudaMalloc(&base, size_t(layout.totalBytes));
  if (err != cudaSuccess) {
    size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    return unavailable("out of GPU memory on ", name_, ": the program needs ",
                       layout.totalBytes, " bytes, ", free, " of ", total,
                       " are free (", cudaGetErrorString(err), ")");
  }
  std::vector<void *> out;
  for (int64_t off : layout.offsets) {
    void *p = static_cast<char *>(base) + off;
    out.push_back(p);
  }
  slabs_[base] = int(out.size());
  slabBytes_[base] = layout.totalBytes;
  mallocBytes_ += layout.totalBytes;
  mallocPeak_ = std::max(mallocPeak_, mallocBytes_);
  for (void *p : out)
    slabOf_[p] = base; // arenas of size 0 may share an address: refcounted
  return out;
}

void CudaDevice::deallocate(void *ptr) {
  auto it = slabOf_.find(ptr);
  if (it == slabOf_.end())
    return;
  void *base = it->second;
  if (--slabs_[base] == 0) {
    cudaStreamSynchronize(compute_);
    cudaFree(base);
    slabs_.erase(base);
    mallocBytes_ -= slabBytes_[base];
    slabBytes_.erase(base);
    for (auto i = slabOf_.begin(); i != slabOf_.end();)
      i = i->second == base ? slabOf_.erase(i) : std::next(i);
  }
}

Status CudaDevice::copyHostToDevice(void *dst, const void *src, int64_t bytes) {
  if (bytes == 0)
    return Status::ok();
  DTCC_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(bytes),
                                  cudaMemcpyHostToDevice, compute_));
  DTCC_CUDA_CHECK(cudaStreamSynchronize(compute_));
  return Status::ok();
}

Status CudaDevice::copyDeviceToHost(void *dst, const void *src, int64_t bytes) {
  if (bytes == 0)
    return Status::ok();
  DTCC_RETURN_IF_ERROR(flushP2P());
  DTCC_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(bytes),
                                  cudaMemcpyDeviceToHost, compute_));
  DTCC_CUDA_CHECK(cudaStreamSynchronize(compute_));
  return Status::ok();
}

StatusOr<void *> CudaDevice::allocateHost(int64_t bytes) {
  void *p = nullptr;
  cudaError_t err = cudaHostAlloc(&p, size_t(std::max<int64_t>(bytes, 1)),
                                  cudaHostAllocDefault);
  if (err != cudaSuccess)
    return unavailable("cudaHostAlloc of ", bytes, " bytes of pinned "
                             "host memory failed: ", cudaGetErrorString(err));
  return p;
}

void CudaDevice::deallocateHost(void *ptr) { cudaFreeHost(ptr); }

Status CudaDevice::waitForTransfers() {
  // Queued send/recv go out first: a host instruction may block (a host
  // collective) until a peer that waits for them goes on.
  DTCC_RETURN_IF_ERROR(flushP2P());
  DTCC_CUDA_CHECK(cudaStreamSynchronize(copy_));
  return Status::ok();
}

Status CudaDevice::computeWaitsForTransfers() {
  DTCC_CUDA_CHECK(cudaEventRecord(transfersDone_, copy_));
  DTCC_CUDA_CHECK(cudaStreamWaitEvent(compute_, transfersDone_, 0));
  return Status::ok();
}

Status CudaDevice::fillZero(void *dst, int64_t bytes) {
  if (bytes == 0)
    return Status::ok();
  DTCC_CUDA_CHECK(cudaMemsetAsync(dst, 0, size_t(bytes), compute_));
  return Status::ok();
}

int32_t CudaDevice::registerSite(std::string description) {
  sites_.push_back(std::move(description));
  return int32_t(sites_.size() - 1);
}

Status CudaDevice::waitsForCompute(cudaStream_t stream) {
  DTCC_CUDA_CHECK(cudaEventRecord(computeDone_, compute_));
  DTCC_CUDA_CHECK(cudaStreamWaitEvent(stream, computeDone_, 0));
  return Status::ok();
}

Status CudaDevice::flushP2P() {
  if (pendingP2P_.empty())
    return Status::ok();
  std::vector<P2POp> ops;
  ops.swap(pendingP2P_);
  // One group per direction, each on its own communicator and stream: a
  // send still waiting for its receiver holds up only later traffic in its
  // direction, never this rank's receives from that receiver. Both groups
  // wait for the compute work queued before them and both are issued before
  // the compute stream waits for any blocking receive: a send queued after a
  // receive from the other direction goes out before that receive arrives,
  // as on the CPU, whose sends go out before it blocks in a later receive.
  for (bool up : {true, false}) {
    const cudaStream_t stream = p2pStream(up);
    bool any = false;
    for (const P2POp &op : ops)
      any |= op.up == up;
    if (!any)
      continue;
    DTCC_RETURN_IF_ERROR(waitsForCompute(stream));
    DTCC_RETURN_IF_ERROR(ncclGroupBegin());
    Status status;
    for (const P2POp &op : ops) {
      if (op.up != up)
        continue;
      status = op.send ? op.comm->send(op.data, op.bytes, op.peer, stream)
                       : op.comm->recv(op.data, op.bytes, op.peer, stream);
      if (!status.isOk())
        break;
    }
    Status end = ncclGroupFinish();
    DTCC_RETURN_IF_ERROR(status);
    DTCC_RETURN_IF_ERROR(end);
    for (const P2POp &op : ops) {
      if (op.up != up)
        continue;
      DTCC_CUDA_CHECK(cudaEventRecord(op.done, stream));
      if (nccl_)
        nccl_->watch(op.done, op.description);
    }
  }
  for (const P2POp &op : ops)
    if (op.blocking)
      DTCC_CUDA_CHECK(cudaStreamWaitEvent(compute_, op.done, 0));
  return Status::ok();
}

Status CudaDevice::markTime() {
  if (marks_ == timeMarks_.size()) {
    cudaEvent_t e = nullptr;
    DTCC_CUDA_CHECK(cudaEventCreate(&e));
    timeMarks_.push_back(e);
  }
  // Sends and receives grouped so far go out first, as the next kernel
  // would issue them.
  DTCC_RETURN_IF_ERROR(flushP2P());
  DTCC_CUDA_CHECK(cudaEventRecord(timeMarks_[marks_], compute_));
  ++marks_;
  return Status::ok();
}

StatusOr<std::vector<double>> CudaDevice::takeMarkIntervals() {
  std::vector<double> seconds;
  for (size_t i = 1; i < marks_; ++i) {
    float ms = 0;
    DTCC_CUDA_CHECK(cudaEventSynchronize(timeMarks_[i]));
    DTCC_CUDA_CHECK(
        cudaEventElapsedTime(&ms, timeMarks_[i - 1], timeMarks_[i]));
    seconds.push_back(1e-3 * double(ms));
  }
  marks_ = 0;
  return seconds;
}

Status CudaDevice::synchronize() { return synchronizeStreams(true); }

Status CudaDevice::synchronizeForTiming() { return synchronizeStreams(false); }

Status CudaDevice::synchronizeStreams(bool p2p) {
  DTCC_RETURN_IF_ERROR(flushP2P());
  DTCC_CUDA_CHECK(cudaStreamSynchronize(comm_));
  if (p2p) {
    DTCC_CUDA_CHECK(cudaStreamSynchronize(p2pUp_));
    DTCC_CUDA_CHECK(cudaStreamSynchronize(p2pDown_));
  }
  DTCC_CUDA_CHECK(cudaStreamSynchronize(copy_));
  DTCC_CUDA_CHECK(cudaStreamSynchronize(compute_));
  // Read and cleared on the compute stream: the legacy default stream is
  // not ordered with the non-blocking ones, so a clear there could land
  // after the next kernel's error, or before this read.
  DeviceError e;
  DTCC_CUDA_CHECK(cudaMemcpyAsync(&e, error_, sizeof(e),
                                  cudaMemcpyDeviceToHost, compute_));
  DTCC_CUDA_CHECK(cudaStreamSynchronize(compute_));
  if (e.site == 0)
    return Status::ok();
  DTCC_CUDA_CHECK(cudaMemsetAsync(error_, 0, sizeof(DeviceError), compute_));
  DTCC_CUDA_CHECK(cudaStreamSynchronize(compute_));
  const std::string where =
      e.site > 0 && size_t(e.site) < sites_.size() ? sites_[e.site] : "kernel";
  switch (e.kind) {
  case kBadIndex:
    return outOfRange(where, ": index ", e.value, " at position ", e.position,
                      " of the indices is out of range [", -e.bound, ", ",
                      e.bound, ")");
  case kBadLabel:
    return outOfRange(where, ": label ", e.value, " of sample ", e.position,
                      " is outside [0, ", e.bound,
                      ") and is not ignore_index");
  case kBadStep:
    return invalidArgument(where, ": expected step >= 1 (the 1-based update "
                                  "count), got ",
                           e.value);
  case kBadBatchIndex:
    // As the CPU backend's roi_align.
    return invalidArgument(where, ": batch index ", e.value, " of region ",
                           e.position, " is outside [0, ", e.bound, ")");
  case kDivisionByZero:
    // As the CPU backend: "div at 'node': integer division by zero".
    return invalidArgument(where, ": integer division by zero");
  default:
    return internalError(where, ": device error kind ", e.kind);
  }
}

Status CudaDevice::attachMesh(const MeshComms &mesh, World &world,
                              double timeoutSeconds) {
  DTCC_CUDA_CHECK(cudaSetDevice(ordinal_));
  DTCC_ASSIGN_OR_RETURN(std::unique_ptr<NcclMesh> nccl,
                        NcclMesh::create(mesh, world, ordinal_));
  nccl_ = std::move(nccl);
  nccl_->setTimeout(timeoutSeconds);
  return Status::ok();
}

} // namespace cuda

StatusOr<std::unique_ptr<Device>> createCudaDevice(int localRank,
                                                   int localRanks) {
  DTCC_ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaDevice> d,
                        cuda::CudaDevice::create(localRank, localRanks));
  return std::unique_ptr<Device>(std::move(d));
}

} // namespace dtcc::runtime
