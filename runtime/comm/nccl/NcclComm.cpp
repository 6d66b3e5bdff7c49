//===- NcclComm.cpp - NCCL communicators over the launcher's world --------===//

#include "runtime/comm/nccl/NcclComm.h"

#include "runtime/device/cuda/CudaCheck.h"
#include "runtime/device/cuda/CudaTables.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>

namespace dtcc::runtime {

using cuda::ncclMoveType;
using cuda::ncclReduction;

NcclComm::NcclComm(ncclComm_t comm, std::string name)
    : comm_(comm), name_(std::move(name)) {
  ncclCommUserRank(comm_, &rank_);
  ncclCommCount(comm_, &size_);
}

NcclComm::~NcclComm() {
  if (comm_ && !aborted_.load())
    ncclCommDestroy(comm_);
}

StatusOr<std::unique_ptr<NcclComm>> NcclComm::create(Communicator &bootstrap) {
  ncclUniqueId id{};
  if (bootstrap.rank() == 0)
    DTCC_NCCL_CHECK(nullptr, ncclGetUniqueId(&id));
  DTCC_RETURN_IF_ERROR(
      bootstrap.broadcast(&id, sizeof(id), DType::kU8, 0)
          .withContext("sharing the NCCL unique id over the bootstrap"));
  ncclComm_t comm = nullptr;
  DTCC_NCCL_CHECK(nullptr, ncclCommInitRank(&comm, bootstrap.size(), id,
                                            bootstrap.rank()));
  return std::unique_ptr<NcclComm>(new NcclComm(comm, bootstrap.name()));
}

StatusOr<std::unique_ptr<NcclComm>> NcclComm::split(int color, int key,
                                                    std::string name) {
  ncclComm_t out = nullptr;
  DTCC_NCCL_CHECK(comm_, ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR
                                                        : color,
                                       key, &out, nullptr));
  if (!out)
    return std::unique_ptr<NcclComm>();
  return std::unique_ptr<NcclComm>(new NcclComm(out, std::move(name)));
}

Status NcclComm::allReduce(const void *in, void *out, int64_t count,
                           DType dtype, ReduceKind kind, cudaStream_t stream) {
  DTCC_ASSIGN_OR_RETURN(cuda::NcclReduction r, ncclReduction(dtype, kind));
  DTCC_NCCL_CHECK(comm_, ncclAllReduce(in, out, size_t(count), r.dataType,
                                       r.op, comm_, stream));
  handed_ += count * dtypeSize(dtype);
  return Status::ok();
}

Status NcclComm::allGather(const void *in, void *out, int64_t countPerRank,
                           DType dtype, cudaStream_t stream) {
  int64_t scale = 1;
  ncclDataType_t type = ncclMoveType(dtype, &scale);
  DTCC_NCCL_CHECK(comm_, ncclAllGather(in, out, size_t(countPerRank * scale),
                                       type, comm_, stream));
  handed_ += countPerRank * dtypeSize(dtype);
  return Status::ok();
}

Status NcclComm::reduceScatter(const void *in, void *out, int64_t countPerRank,
                               DType dtype, ReduceKind kind,
                               cudaStream_t stream) {
  DTCC_ASSIGN_OR_RETURN(cuda::NcclReduction r, ncclReduction(dtype, kind));
  DTCC_NCCL_CHECK(comm_, ncclReduceScatter(in, out, size_t(countPerRank),
                                           r.dataType, r.op, comm_, stream));
  handed_ += countPerRank * size_ * dtypeSize(dtype);
  return Status::ok();
}

Status NcclComm::allToAll(const void *in, void *out, int64_t countPerRank,
                          DType dtype, cudaStream_t stream) {
  int64_t scale = 1;
  ncclDataType_t type = ncclMoveType(dtype, &scale);
  const int64_t bytes = countPerRank * dtypeSize(dtype);
  const size_t count = size_t(countPerRank * scale);
  DTCC_RETURN_IF_ERROR(ncclGroupBegin());
  for (int peer = 0; peer < size_; ++peer) {
    ncclResult_t s = ncclSend(static_cast<const char *>(in) + peer * bytes,
                              count, type, peer, comm_, stream);
    ncclResult_t r = ncclRecv(static_cast<char *>(out) + peer * bytes, count,
                              type, peer, comm_, stream);
    if (s != ncclSuccess || r != ncclSuccess) {
      ncclGroupEnd();
      DTCC_NCCL_CHECK(comm_, s != ncclSuccess ? s : r);
    }
  }
  handed_ += bytes * size_;
  return ncclGroupFinish();
}

Status NcclComm::broadcast(const void *in, void *out, int64_t count,
                           DType dtype, int root, cudaStream_t stream) {
  int64_t scale = 1;
  ncclDataType_t type = ncclMoveType(dtype, &scale);
  DTCC_NCCL_CHECK(comm_, ncclBroadcast(in, out, size_t(count * scale), type,
                                       root, comm_, stream));
  if (rank_ == root)
    handed_ += count * dtypeSize(dtype);
  return Status::ok();
}

Status NcclComm::send(const void *data, int64_t bytes, int peer,
                      cudaStream_t stream) {
  DTCC_NCCL_CHECK(comm_,
                  ncclSend(data, size_t(bytes), ncclUint8, peer, comm_, stream));
  handed_ += bytes;
  return Status::ok();
}

Status NcclComm::recv(void *data, int64_t bytes, int peer,
                      cudaStream_t stream) {
  DTCC_NCCL_CHECK(comm_,
                  ncclRecv(data, size_t(bytes), ncclUint8, peer, comm_, stream));
  return Status::ok();
}

void NcclComm::abort() {
  bool expected = false;
  if (aborted_.compare_exchange_strong(expected, true))
    ncclCommAbort(comm_);
}

Status NcclComm::asyncError() {
  ncclResult_t result = ncclSuccess;
  DTCC_NCCL_CHECK(comm_, ncclCommGetAsyncError(comm_, &result));
  DTCC_NCCL_CHECK(comm_, result);
  return Status::ok();
}

Status ncclGroupBegin() {
  DTCC_NCCL_CHECK(nullptr, ncclGroupStart());
  return Status::ok();
}
Status ncclGroupFinish() {
  DTCC_NCCL_CHECK(nullptr, ncclGroupEnd());
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// NcclMesh and its watchdog
//===----------------------------------------------------------------------===//

struct WatchState {
  std::mutex mutex;
  std::condition_variable wake;
  WatchList list;
  bool stop = false;
};

StatusOr<std::unique_ptr<NcclMesh>>
NcclMesh::create(const MeshComms &mesh, World &world, int device) {
  std::unique_ptr<NcclMesh> m(new NcclMesh());
  m->world_ = &world;
  m->device_ = device;
  DTCC_ASSIGN_OR_RETURN(m->worldComm_, NcclComm::create(world.world()));
  // Every rank splits in the same order (MeshComms' communicators are
  // ordered by axis mask); a group's color is its smallest world rank.
  for (Communicator *c : mesh.communicators()) {
    int color = c->worldRanks()[0];
    for (int r : c->worldRanks())
      color = std::min(color, r);
    DTCC_ASSIGN_OR_RETURN(std::unique_ptr<NcclComm> nc,
                          m->worldComm_->split(color, c->rank(), c->name()));
    if (!nc || nc->size() != c->size() || nc->rank() != c->rank())
      return internalError("NCCL communicator for '", c->name(),
                           "' does not match the mesh group (size ",
                           nc ? nc->size() : 0, " vs ", c->size(), ")");
    m->comms_[c] = std::move(nc);
    // Point-to-point traffic, one communicator per direction (send and
    // recv kernels take a single axis).
    if (c->name().find(',') != std::string::npos)
      continue;
    DTCC_ASSIGN_OR_RETURN(
        std::unique_ptr<NcclComm> up,
        m->worldComm_->split(color, c->rank(), c->name() + " (sends up)"));
    DTCC_ASSIGN_OR_RETURN(
        std::unique_ptr<NcclComm> down,
        m->worldComm_->split(color, c->rank(), c->name() + " (sends down)"));
    if (!up || !down || up->rank() != c->rank() || down->rank() != c->rank())
      return internalError("NCCL point-to-point communicators for '",
                           c->name(), "' do not match the mesh group");
    m->p2p_[c] = {std::move(up), std::move(down)};
  }
  m->state_ = std::make_shared<WatchState>();
  m->watchdog_ = std::thread([mp = m.get()] { mp->watchdogLoop(); });
  return m;
}

NcclMesh::~NcclMesh() {
  if (state_) {
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->stop = true;
    }
    state_->wake.notify_all();
  }
  if (watchdog_.joinable())
    watchdog_.join();
}

int64_t NcclMesh::handedBytes() const {
  int64_t sum = worldComm_ ? worldComm_->handedBytes() : 0;
  for (const auto &[c, nccl] : comms_)
    sum += nccl->handedBytes();
  for (const auto &[c, pair] : p2p_)
    sum += (pair.first ? pair.first->handedBytes() : 0) +
           (pair.second ? pair.second->handedBytes() : 0);
  return sum;
}

NcclComm *NcclMesh::find(const Communicator *comm) const {
  auto it = comms_.find(comm);
  return it == comms_.end() ? nullptr : it->second.get();
}

NcclComm *NcclMesh::findP2P(const Communicator *comm, bool up) const {
  auto it = p2p_.find(comm);
  if (it == p2p_.end())
    return nullptr;
  return up ? it->second.first.get() : it->second.second.get();
}

Status NcclMesh::firstAsyncError() {
  auto check = [](NcclComm *c) -> Status {
    if (!c)
      return Status::ok();
    return c->asyncError().withContext("communicator '" + c->name() + "'");
  };
  for (auto &[_, c] : comms_)
    DTCC_RETURN_IF_ERROR(check(c.get()));
  for (auto &[_, pair] : p2p_) {
    DTCC_RETURN_IF_ERROR(check(pair.first.get()));
    DTCC_RETURN_IF_ERROR(check(pair.second.get()));
  }
  return check(worldComm_.get());
}

void NcclMesh::abortAll() {
  for (auto &[_, c] : comms_)
    c->abort();
  for (auto &[_, pair] : p2p_) {
    pair.first->abort();
    pair.second->abort();
  }
  if (worldComm_)
    worldComm_->abort();
}

void NcclMesh::watch(cudaEvent_t done, std::string description) {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->list.add(
        done, std::move(description),
        WatchList::Clock::now() +
            std::chrono::duration_cast<WatchList::Clock::duration>(
                std::chrono::duration<double>(timeout_)));
  }
  state_->wake.notify_all();
}

void NcclMesh::unwatch(cudaEvent_t done) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->list.forget(done);
}

void NcclMesh::watchdogLoop() {
  // This thread queries events of the rank's GPU: that GPU must be current
  // here too, or the first CUDA call would make a context on GPU 0.
  if (cudaError_t err = cudaSetDevice(device_); err != cudaSuccess) {
    std::fprintf(stderr,
                 "dtcc: %s: the NCCL watchdog cannot use GPU %d (%s): "
                 "collectives run without a timeout\n",
                 world_->describe().c_str(), device_, cudaGetErrorString(err));
    return;
  }
  std::unique_lock<std::mutex> lock(state_->mutex);
  while (!state_->stop) {
    std::optional<WatchList::Entry> late = state_->list.sweep(
        [](const void *event) {
          return cudaEventQuery(static_cast<cudaEvent_t>(
                     const_cast<void *>(event))) != cudaErrorNotReady;
        },
        WatchList::Clock::now());
    if (late) {
      std::fprintf(stderr, "dtcc: %s: collective %s timed out after %g s\n",
                   world_->describe().c_str(), late->description.c_str(),
                   timeout_);
      std::fflush(stderr);
      abortAll();
      world_->abort(124);
    }
    // An NCCL error of a communicator (a peer gone, a network failure)
    // leaves its operations stuck: end the job now rather than at the
    // timeout, with NCCL's message.
    if (!state_->list.empty())
      if (Status error = firstAsyncError(); !error.isOk()) {
        std::fprintf(stderr, "dtcc: %s: %s\n", world_->describe().c_str(),
                     error.message().c_str());
        std::fflush(stderr);
        abortAll();
        world_->abort(1);
      }
    state_->wake.wait_for(lock, std::chrono::milliseconds(
                                    state_->list.empty() ? 1000 : 50));
  }
}

} // namespace dtcc::runtime
