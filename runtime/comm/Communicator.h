//===- Communicator.h - ranks, groups and their collectives -----*- C++ -*-===//
//
// The communication layer of the runtime: the World (this process's place in
// a job, read from the launcher's environment), Communicators over groups of
// ranks with blocking collectives on CPU memory, and the mesh's communicators.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_COMM_COMMUNICATOR_H
#define DTCC_RUNTIME_COMM_COMMUNICATOR_H

#include "runtime/base/DType.h"
#include "runtime/base/Status.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dtcc::runtime {

class CommQueue;

/// A send handed to the transport (Communicator::startSend), finished on
/// the thread that started it. Its buffer must stay untouched until it is
/// complete; one abandoned before that keeps the buffer in use until the
/// process ends.
class PendingSend {
public:
  virtual ~PendingSend();
  /// Advances the send without blocking: true once it is complete (the
  /// transport no longer reads the buffer), an error if it failed.
  virtual StatusOr<bool> test() = 0;
  /// Blocks until the send is complete.
  virtual Status wait() = 0;
};

enum class ReduceKind { kSum, kMax, kMin, kProd };

/// "sum", "max", "min", "prod".
const char *reduceKindName(ReduceKind kind);
/// Parses reduceKindName's spelling.
StatusOr<ReduceKind> parseReduceKind(const std::string &name);

/// A group of ranks and its collectives. All calls block until this rank's
/// part is done; every rank of the group must make the same calls in the same
/// order. Buffers are CPU memory; counts are elements of `dtype`. Every
/// DType is supported: f16 and bf16 reduce through f32 (one rounding at the
/// end), bool reduces as logical or (sum, max) and and (min, prod), integers
/// wrap. One thread at a time may use a communicator.
class Communicator {
public:
  virtual ~Communicator();
  Communicator(const Communicator &) = delete;
  Communicator &operator=(const Communicator &) = delete;

  /// This rank's index in the group, in [0, size()).
  int rank() const { return rank_; }
  int size() const { return static_cast<int>(worldRanks_.size()); }
  /// The group's name in messages: "world", or a mesh axis ("tp").
  const std::string &name() const { return name_; }
  /// The world rank of each group rank.
  const std::vector<int> &worldRanks() const { return worldRanks_; }

  /// out = the reduction of every rank's `in`; `in` == `out` is allowed.
  Status allReduce(const void *in, void *out, int64_t count, DType dtype,
                   ReduceKind kind);
  /// out (size() * countPerRank) = every rank's `in` in group-rank order;
  /// `in` may be this rank's block of `out`.
  Status allGather(const void *in, void *out, int64_t countPerRank,
                   DType dtype);
  /// `in` holds size() blocks of countPerRank; rank r's `out` is block r
  /// reduced over the group. `in` == `out` is allowed (the result is the
  /// first block).
  Status reduceScatter(const void *in, void *out, int64_t countPerRank,
                       DType dtype, ReduceKind kind);
  /// Block j of `in` goes to rank j; block i of `out` comes from rank i.
  /// `in` == `out` is allowed.
  Status allToAll(const void *in, void *out, int64_t countPerRank, DType dtype);
  /// Every rank's `data` becomes the `root`'s.
  Status broadcast(void *data, int64_t count, DType dtype, int root);
  /// Sends `bytes` to group rank `peer`, matched by a recv with `tag` there;
  /// messages of one (peer, tag) arrive in order. `tag` >= 0. Returns once
  /// the message is delivered or on its way (it may wait for the peer's
  /// receive); startSend, then wait().
  Status send(const void *data, int64_t bytes, int peer, int64_t tag);
  /// Starts a send and returns without waiting for the peer: the message
  /// goes out while this thread makes later calls on any communicator of
  /// the world (receives and collectives keep sends in flight moving) or
  /// tests the result. Null when the send is already complete. Messages of
  /// one (peer, tag) arrive in the order their sends started.
  StatusOr<std::unique_ptr<PendingSend>>
  startSend(const void *data, int64_t bytes, int peer, int64_t tag);
  Status recv(void *data, int64_t bytes, int peer, int64_t tag);
  /// Returns once every rank of the group has entered it.
  Status barrier();

  /// Bytes this rank has sent through this communicator by the ring
  /// formulas (all_reduce 2(n-1)/n of the buffer, all_gather,
  /// reduce_scatter and all_to_all (n-1) blocks, broadcast the buffer from
  /// the root, send its bytes), at the element type that travels (f16 and
  /// bf16 reductions travel as f32), whatever the backend does: a formula,
  /// not a measurement (transportBytes() is that). Thread-safe.
  int64_t bytesSent() const { return bytesSent_.load(); }

  /// What the backend itself handed on, counted where it calls its
  /// transport: the TCP backend, the bytes its socket writes returned
  /// (message headers included, transportHeaderBytes() of them); MPI, the
  /// send buffer of each MPI call made (count x datatype size: all_reduce's
  /// buffer, all_gather's block, reduce_scatter's and all_to_all's n
  /// blocks, broadcast's buffer at the root, a send's bytes). Thread-safe.
  int64_t transportBytes() const { return transport_->bytes.load(); }
  /// Of transportBytes(), the TCP backend's message headers.
  int64_t transportHeaderBytes() const { return transport_->headers.load(); }
  /// "tcp" (bytes written to sockets), "mpi" (bytes handed to MPI), or
  /// "none" (one process: nothing leaves it).
  virtual const char *transportName() const { return "none"; }

  /// transportBytes()'s counters; shared, so that a message still queued
  /// when its communicator goes away counts into valid memory.
  struct TransportCounters {
    std::atomic<int64_t> bytes{0}, headers{0};
  };

protected:
  Communicator(std::string name, int rank, std::vector<int> worldRanks);

  // The backend's operations, called with checked arguments, count > 0 and
  // size() > 1; reductions never see f16 or bf16 (the wrappers above stage
  // them through f32).
  virtual Status doAllReduce(const void *in, void *out, int64_t count,
                             DType dtype, ReduceKind kind) = 0;
  virtual Status doAllGather(const void *in, void *out, int64_t countPerRank,
                             DType dtype) = 0;
  virtual Status doReduceScatter(const void *in, void *out,
                                 int64_t countPerRank, DType dtype,
                                 ReduceKind kind) = 0;
  virtual Status doAllToAll(const void *in, void *out, int64_t countPerRank,
                            DType dtype) = 0;
  virtual Status doBroadcast(void *data, int64_t count, DType dtype,
                             int root) = 0;
  /// Also called for size() == 1 (a rank may message itself); must not
  /// wait for the peer.
  virtual StatusOr<std::unique_ptr<PendingSend>>
  doStartSend(const void *data, int64_t bytes, int peer, int64_t tag) = 0;
  virtual Status doRecv(void *data, int64_t bytes, int peer, int64_t tag) = 0;
  virtual Status doBarrier() = 0;

  /// An error naming the communicator: "communicator 'tp': ...".
  template <typename... Args> Status error(const Args &...args) const {
    return invalidArgument("communicator '", name_, "': ", args...);
  }

private:
  Status checkArgs(const void *in, const void *out, int64_t count,
                   DType dtype) const;
  Status checkPeer(int peer, const char *what) const;

  void countSent(int64_t bytes) { bytesSent_.fetch_add(bytes); }

  std::string name_;
  int rank_;
  std::vector<int> worldRanks_;
  std::atomic<int64_t> bytesSent_{0};

protected:
  /// For the backends: count what they hand their transport.
  void countTransport(int64_t bytes) { transport_->bytes.fetch_add(bytes); }
  const std::shared_ptr<TransportCounters> &transportCounters() const {
    return transport_;
  }

private:
  std::shared_ptr<TransportCounters> transport_ =
      std::make_shared<TransportCounters>();
};

//===----------------------------------------------------------------------===//
// The job
//===----------------------------------------------------------------------===//

/// How this process was started, from the environment.
struct LaunchInfo {
  /// "mpirun" (Open MPI's OMPI_COMM_WORLD_*), "slurm" (srun's SLURM_PROCID,
  /// SLURM_NTASKS, SLURM_LOCALID; MPI under srun), "torchrun" (RANK,
  /// WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; the TCP backend) or
  /// "single" (no launcher: one process).
  std::string launcher = "single";
  int rank = 0;
  int size = 1;
  int localRank = 0;
  /// Ranks on this node (OMPI_COMM_WORLD_LOCAL_SIZE, LOCAL_WORLD_SIZE, or
  /// this node's entry of SLURM_STEP_TASKS_PER_NODE); 0 when the launcher
  /// does not say. Used to pick a GPU (cuda::chooseCudaDevice).
  int localSize = 0;
  std::string masterAddr; ///< torchrun only
  int masterPort = 0;     ///< torchrun only
};

/// Reads an environment variable; null when unset.
using EnvLookup = std::function<const char *(const char *)>;

/// Detects the launcher from `env` (std::getenv by default). Precedence:
/// Open MPI, torchrun-style (which may run inside a Slurm allocation), Slurm,
/// single. Errors on partial or malformed variables.
StatusOr<LaunchInfo> detectLaunch(const EnvLookup &env = {});

/// How to start `size` ranks with `launcher`, for messages: "mpirun -np 4".
std::string launchCommand(const std::string &launcher, int size);

/// The process's place in the job and its communication thread. Create one
/// per process (it initializes MPI under mpirun and srun) and destroy it
/// after every communicator made from it.
class World {
public:
  virtual ~World();
  World(const World &) = delete;
  World &operator=(const World &) = delete;

  /// The world of this process, from detectLaunch(). The collective timeout
  /// comes from DTCC_COLLECTIVE_TIMEOUT (seconds; default 300).
  static StatusOr<std::unique_ptr<World>> init();
  /// The world for an explicit launch (tests).
  static StatusOr<std::unique_ptr<World>> init(const LaunchInfo &launch);

  int rank() const { return launch_.rank; }
  int size() const { return launch_.size; }
  int localRank() const { return launch_.localRank; }
  /// "mpirun", "slurm", "torchrun" or "single".
  const std::string &launcher() const { return launch_.launcher; }
  const LaunchInfo &launch() const { return launch_; }
  /// "rank 2": who speaks in messages.
  std::string describe() const;

  /// Every rank of the job, in world-rank order.
  virtual Communicator &world() = 0;
  /// Collective over every world rank: ranks passing the same `color` form a
  /// group ordered by (`key`, world rank). A negative color joins no group
  /// (the result is null). `name` names the group in messages.
  virtual StatusOr<std::unique_ptr<Communicator>> split(const std::string &name,
                                                        int color, int key) = 0;

  /// The communication thread on which kernels run collectives.
  CommQueue &queue() { return *queue_; }

  /// Ends the whole job now with `exitCode` (MPI_Abort under MPI, _exit
  /// otherwise: the peers of the TCP backend see the connection close).
  /// For timeouts and errors after which ranks can no longer agree.
  [[noreturn]] virtual void abort(int exitCode);

protected:
  explicit World(LaunchInfo launch);
  /// Stops the communication thread; false when an operation is stuck in it
  /// (the backend must then not shut down its library). Backends call it
  /// first in their destructors.
  bool stopQueue();
  /// Whether stopQueue() has run.
  bool queueStopped() const { return queueStopped_; }

private:
  LaunchInfo launch_;
  std::unique_ptr<CommQueue> queue_;
  bool queueStopped_ = false, queueClean_ = true;
};

//===----------------------------------------------------------------------===//
// Meshes
//===----------------------------------------------------------------------===//

/// The communicators of a device mesh: one per axis, over the ranks that
/// share every other coordinate; the group rank is the coordinate on the
/// axis. The mesh is row-major over world ranks (the last axis fastest).
/// Meshes of up to kMaxComboAxes axes also get a communicator for every
/// combination of axes (listed in mesh order): its group is the ranks that
/// share the other coordinates, its group rank the row-major index of this
/// rank's coordinates on the listed axes.
class MeshComms {
public:
  MeshComms() = default;
  MeshComms(MeshComms &&) = default;
  MeshComms &operator=(MeshComms &&) = default;

  const std::vector<std::string> &axisNames() const { return names_; }
  const std::vector<int64_t> &axisSizes() const { return sizes_; }
  /// This rank's coordinate on each axis.
  const std::vector<int64_t> &coords() const { return coords_; }
  /// Meshes with at most this many axes get every axis combination.
  static constexpr size_t kMaxComboAxes = 4;

  /// The axis's communicator; null when the mesh has no such axis.
  Communicator *axis(const std::string &name) const;
  /// The communicator of one or more axes (in mesh order, e.g. {"dp", "tp"}),
  /// or an error naming the mesh's axes.
  StatusOr<Communicator *> group(const std::vector<std::string> &axes) const;
  /// Every communicator of the mesh, one per combination created.
  std::vector<Communicator *> communicators() const;
  /// The sum of bytesSent() over communicators().
  int64_t bytesSent() const;
  /// The sums of transportBytes() and transportHeaderBytes() over
  /// communicators().
  int64_t transportBytes() const;
  int64_t transportHeaderBytes() const;
  /// This rank's coordinate on the axis; -1 when there is no such axis.
  int64_t coord(const std::string &name) const;
  /// "dp=2 x tp=2".
  std::string describe() const;
  World &world() const { return *world_; }

private:
  friend StatusOr<MeshComms>
  createMeshComms(World &world, const std::vector<std::string> &axisNames,
                  const std::vector<int64_t> &axisSizes);
  World *world_ = nullptr;
  std::vector<std::string> names_;
  std::vector<int64_t> sizes_, coords_;
  /// By axis bit mask (bit i: axis i): one per axis, and one per
  /// combination for small meshes.
  std::map<uint64_t, std::unique_ptr<Communicator>> comms_;
};

/// Creates the communicators of the mesh `axisNames` x `axisSizes`
/// (collective over the world). A world whose size is not the mesh's
/// product is an error, before any communication: "the program was compiled
/// for a mesh dp=2 x tp=2 (4 ranks) but the job has 3 ranks (mpirun -np 3);
/// start it with mpirun -np 4".
StatusOr<MeshComms> createMeshComms(World &world,
                                    const std::vector<std::string> &axisNames,
                                    const std::vector<int64_t> &axisSizes);

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_COMM_COMMUNICATOR_H
