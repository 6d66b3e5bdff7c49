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
#include "runtime/comm/nccl/WatchList.h"

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

  /// The send buffers handed to NCCL so far, in bytes (count x element
  /// size of each call: all_reduce's buffer, all_gather's block,
  /// reduce_scatter's n blocks, all_to_all's n sends, broadcast's buffer
  /// at the root, a send's bytes). Thread-safe.
  int64_t handedBytes() const { return handed_.load(); }

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
  std::atomic<int64_t> handed_{0};
};

/// ncclGroupStart / ncclGroupEnd as a scope, for grouped send/recv.
Status ncclGroupBegin();
Status ncclGroupFinish();

/// The NCCL communicators of a mesh: one per communicator of MeshComms,
/// found by the CPU communicator the kernels bind to, and the watchdog.
///
/// Sends and receives of a single-axis group go over two more
/// communicators of that group, one per direction: "up" carries every
/// message to a higher group rank, "down" every message to a lower one. A
/// rank issues its up and down traffic on two streams of their own, so a
/// send that waits for its receiver blocks only later traffic in the same
/// direction, never a receive from the rank it sends to (which one stream
/// or one communicator would serialize behind it: 1F1B stages each send to
/// the other before receiving). Within one direction messages flow from
/// lower to higher ranks (or back) only, so its stream cannot wait on
/// itself in a cycle.
class NcclMesh {
public:
  /// Collective over the world. Call with the rank's CUDA device current;
  /// `device` is its ordinal, which the watchdog thread makes current
  /// before it touches CUDA (otherwise it would create a context on GPU 0:
  /// memory there on every rank of the node, and an error under the
  /// exclusive-process compute mode).
  static StatusOr<std::unique_ptr<NcclMesh>>
  create(const MeshComms &mesh, World &world, int device);
  ~NcclMesh();

  /// The NCCL communicator of a mesh communicator; null if unknown.
  NcclComm *find(const Communicator *comm) const;
  /// The communicator of `comm`'s point-to-point traffic to higher group
  /// ranks (`up`) or to lower ones; null for groups of several axes.
  NcclComm *findP2P(const Communicator *comm, bool up) const;
  /// Whether a send from group rank `rank` to `peer` (or a receive of
  /// `rank` from `peer`) travels up. A send and the receive matching it
  /// always agree, so they meet on the same communicator.
  static bool goesUp(bool send, int rank, int peer) {
    return send ? peer > rank : peer < rank;
  }
  /// The sum of handedBytes() over every NCCL communicator of the mesh.
  int64_t handedBytes() const;
  /// Aborts every communicator (the watchdog's timeout path).
  void abortAll();
  /// The first asynchronous NCCL error of any communicator (the watchdog
  /// polls it while operations are in flight, as PyTorch's does).
  Status firstAsyncError();

  /// Watches `done` (recorded after a collective on one of the device's
  /// communication streams): if it has not completed `timeoutSeconds`
  /// after now, the watchdog prints
  ///   dtcc: rank R: collective <description> timed out after T s
  /// aborts every communicator and ends the job (World::abort, exit 124).
  /// An asynchronous NCCL error meanwhile ends it at once (exit 1).
  /// An event watched again (recorded by the next run of its instruction)
  /// gets a fresh deadline.
  void watch(cudaEvent_t done, std::string description);
  /// Stops watching `done`; call before destroying the event.
  void unwatch(cudaEvent_t done);
  void setTimeout(double seconds) { timeout_ = seconds; }

private:
  NcclMesh() = default;
  void watchdogLoop();

  World *world_ = nullptr;
  int device_ = 0;
  std::unique_ptr<NcclComm> worldComm_;
  std::map<const Communicator *, std::unique_ptr<NcclComm>> comms_;
  /// By mesh communicator of one axis: its up and down communicators.
  std::map<const Communicator *,
           std::pair<std::unique_ptr<NcclComm>, std::unique_ptr<NcclComm>>>
      p2p_;
  std::shared_ptr<struct WatchState> state_;
  std::thread watchdog_;
  double timeout_ = 300;
};

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_COMM_NCCL_NCCLCOMM_H
