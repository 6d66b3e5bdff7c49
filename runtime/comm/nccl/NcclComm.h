//===- NcclComm.h - NCCL communicators over the launcher's world -*- C++ -*-===//
//
// The GPU side of runtime/comm: an NCCL communicator per mesh communicator.
// The world communicator's unique id is made by rank 0 and shared over the
// launcher's bootstrap (the MPI or TCP world of runtime/comm); the axis
// communicators come from ncclCommSplit. Collectives are enqueued on a
// stream (the device's communication stream) and return at once; errors
// keep NCCL's message; abort() is what the collective timeout calls.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_COMM_NCCL_NCCLCOMM_H
#define DTCC_RUNTIME_COMM_NCCL_NCCLCOMM_H

#include "runtime/comm/Communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace dtcc::runtime {

class NcclComm {
public:
  ~NcclComm();
  NcclComm(const NcclComm &) = delete;
  NcclComm &operator=(const NcclComm &) = delete;

  /// Collective over `bootstrap`: rank 0 makes the unique id, the
  /// bootstrap broadcasts it, every rank joins on the current CUDA device.
  static StatusOr<std::unique_ptr<NcclComm>> create(Communicator &bootstrap);
  /// Collective over this communicator: ranks passing the same color form
  /// a communicator ordered by key (ncclCommSplit); a negative color joins
  /// none (null).
  StatusOr<std::unique_ptr<NcclComm>> split(int color, int key,
                                            std::string name);

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string &name() const { return name_; }
  ncclComm_t handle() const { return comm_; }

  // Enqueued on `stream`; counts are elements of `dtype`.
  Status allReduce(const void *in, void *out, int64_t count, DType dtype,
                   ReduceKind kind, cudaStream_t stream);
  Status allGather(const void *in, void *out, int64_t countPerRank,
                   DType dtype, cudaStream_t stream);
  Status reduceScatter(const void *in, void *out, int64_t countPerRank,
                       DType dtype, ReduceKind kind, cudaStream_t stream);
  /// Grouped sends and receives of one block per rank.
  Status allToAll(const void *in, void *out, int64_t countPerRank, DType dtype,
                  cudaStream_t stream);
  Status broadcast(const void *in, void *out, int64_t count, DType dtype,
                   int root, cudaStream_t stream);
  /// Bytes to/from group rank `peer`; call inside group() to pair them.
  Status send(const void *data, int64_t bytes, int peer, cudaStream_t stream);
  Status recv(void *data, int64_t bytes, int peer, cudaStream_t stream);

  /// ncclCommAbort: unblocks every operation in flight (the communicator is
  /// unusable afterwards). Safe from another thread.
  void abort();
  /// The asynchronous error NCCL reports for the communicator, if any.
  Status asyncError();

private:
  NcclComm(ncclComm_t comm, std::string name);
  ncclComm_t comm_ = nullptr;
  std::string name_;
  int rank_ = 0, size_ = 1;
  std::atomic<bool> aborted_{false};
};

/// ncclGroupStart / ncclGroupEnd as a scope, for grouped send/recv.
Status ncclGroupBegin();
Status ncclGroupFinish();

/// The NCCL communicators of a mesh: one per communicator of MeshComms,
/// found by the CPU communicator the kernels bind to, and the watchdog.
class NcclMesh {
public:
  /// Collective over the world. Call with the rank's CUDA device current.
  static StatusOr<std::unique_ptr<NcclMesh>> create(const MeshComms &mesh,
                                                    World &world);
  ~NcclMesh();

  /// The NCCL communicator of a mesh communicator; null if unknown.
  NcclComm *find(const Communicator *comm) const;
  /// Aborts every communicator (the watchdog's timeout path).
  void abortAll();

  /// Watches `done` (recorded after a collective on the comm stream): if
  /// it has not completed `timeoutSeconds` after now, the watchdog prints
  ///   dtcc: rank R: collective <description> timed out after T s
  /// aborts every communicator and ends the job (World::abort, exit 124).
  void watch(cudaEvent_t done, std::string description);
  void setTimeout(double seconds) { timeout_ = seconds; }

private:
  NcclMesh() = default;
  void watchdogLoop();

  World *world_ = nullptr;
  std::unique_ptr<NcclComm> worldComm_;
  std::map<const Communicator *, std::unique_ptr<NcclComm>> comms_;
  std::shared_ptr<struct WatchState> state_;
  std::thread watchdog_;
  double timeout_ = 300;
};

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_COMM_NCCL_NCCLCOMM_H
