//===- MpiComm.cpp - the MPI backend --------------------------------------===//
//
// Communicators wrap a duplicate of MPI_COMM_WORLD (or a split of it) with
// MPI_ERRORS_RETURN, so that MPI failures become Statuses that keep the
// call, file, line and MPI's error string.
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/mpi/MpiComm.h"

#include "runtime/comm/CommQueue.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <mpi.h>
#include <thread>

namespace dtcc::runtime {
namespace {

Status mpiError(const char *call, int code, const char *file, int line) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    length = std::snprintf(text, sizeof(text), "MPI error %d", code);
  std::string name(call);
  name = name.substr(0, name.find('('));
  return unavailable(name, " failed (", file, ":", line,
                     "): ", std::string(text, length));
}

#define DTCC_MPI_CHECK(call)                                                   \
  do {                                                                         \
    int _dtcc_mpi_rc = (call);                                                 \
    if (_dtcc_mpi_rc != MPI_SUCCESS)                                           \
      return mpiError(#call, _dtcc_mpi_rc, __FILE__, __LINE__);                \
  } while (0)

/// MPI counts are ints: larger operations go in pieces of this many.
constexpr int64_t kMaxCount = INT_MAX;

/// The datatype reductions use; bool is bytes reduced with max (or) and min
/// (and), which holds for any non-zero encoding of true.
MPI_Datatype reduceType(DType dtype) {
  switch (dtype) {
  case DType::kF32: return MPI_FLOAT;
  case DType::kF64: return MPI_DOUBLE;
  case DType::kI8: return MPI_INT8_T;
  case DType::kI16: return MPI_INT16_T;
  case DType::kI32: return MPI_INT32_T;
  case DType::kI64: return MPI_INT64_T;
  case DType::kU16: return MPI_UINT16_T;
  case DType::kU32: return MPI_UINT32_T;
  case DType::kU64: return MPI_UINT64_T;
  case DType::kU8:
  case DType::kBool: return MPI_UINT8_T;
  default: return MPI_DATATYPE_NULL;
  }
}

MPI_Op reduceOp(DType dtype, ReduceKind kind) {
  if (dtype == DType::kBool)
    return (kind == ReduceKind::kSum || kind == ReduceKind::kMax) ? MPI_MAX
                                                                  : MPI_MIN;
  switch (kind) {
  case ReduceKind::kSum: return MPI_SUM;
  case ReduceKind::kMax: return MPI_MAX;
  case ReduceKind::kMin: return MPI_MIN;
  case ReduceKind::kProd: return MPI_PROD;
  }
  return MPI_OP_NULL;
}

/// The datatype of element moves: an unsigned integer of the element's size.
MPI_Datatype moveType(DType dtype) {
  switch (dtypeSize(dtype)) {
  case 1: return MPI_UINT8_T;
  case 2: return MPI_UINT16_T;
  case 4: return MPI_UINT32_T;
  case 8: return MPI_UINT64_T;
  default: return MPI_DATATYPE_NULL;
  }
}

/// The requests of one send (one per piece of at most kMaxCount bytes).
/// MPI progresses them inside any later call on this thread; test() is one
/// such call.
struct MpiPendingSend final : PendingSend {
  std::vector<MPI_Request> requests;

  StatusOr<bool> test() override {
    int flag = 0;
    DTCC_MPI_CHECK(MPI_Testall(static_cast<int>(requests.size()),
                               requests.data(), &flag, MPI_STATUSES_IGNORE));
    return flag != 0;
  }
  Status wait() override {
    DTCC_MPI_CHECK(MPI_Waitall(static_cast<int>(requests.size()),
                               requests.data(), MPI_STATUSES_IGNORE));
    return Status::ok();
  }
};

class MpiWorld;

class MpiCommunicator final : public Communicator {
public:
  MpiCommunicator(std::string name, MPI_Comm comm, int rank,
                  std::vector<int> worldRanks, MpiWorld &world, int tagUb)
      : Communicator(std::move(name), rank, std::move(worldRanks)), comm_(comm),
        world_(world), tagUb_(tagUb) {}
  ~MpiCommunicator() override;

  const char *transportName() const override { return "mpi"; }

protected:
  Status doAllReduce(const void *in, void *out, int64_t count, DType dtype,
                     ReduceKind kind) override {
    MPI_Datatype type = reduceType(dtype);
    const int64_t size = dtypeSize(dtype);
    for (int64_t off = 0; off < count; off += kMaxCount) {
      int n = static_cast<int>(std::min(kMaxCount, count - off));
      const void *src =
          in == out ? MPI_IN_PLACE : static_cast<const char *>(in) + off * size;
      DTCC_MPI_CHECK(MPI_Allreduce(src, static_cast<char *>(out) + off * size,
                                   n, type, reduceOp(dtype, kind), comm_));
      handed(n, type);
    }
    return Status::ok();
  }

  Status doAllGather(const void *in, void *out, int64_t countPerRank,
                     DType dtype) override {
    DTCC_RETURN_IF_ERROR(checkCount(countPerRank));
    MPI_Datatype type = moveType(dtype);
    int n = static_cast<int>(countPerRank);
    const void *own =
        static_cast<char *>(out) + rank() * countPerRank * dtypeSize(dtype);
    DTCC_MPI_CHECK(MPI_Allgather(in == own ? MPI_IN_PLACE : in, n, type, out, n,
                                 type, comm_));
    handed(n, type);
    return Status::ok();
  }

  Status doReduceScatter(const void *in, void *out, int64_t countPerRank,
                         DType dtype, ReduceKind kind) override {
    DTCC_RETURN_IF_ERROR(checkCount(countPerRank));
    DTCC_MPI_CHECK(MPI_Reduce_scatter_block(
        in == out ? MPI_IN_PLACE : in, out, static_cast<int>(countPerRank),
        reduceType(dtype), reduceOp(dtype, kind), comm_));
    // The send buffer holds every rank's block.
    handed(int64_t(countPerRank) * size(), reduceType(dtype));
    return Status::ok();
  }

  Status doAllToAll(const void *in, void *out, int64_t countPerRank,
                    DType dtype) override {
    DTCC_RETURN_IF_ERROR(checkCount(countPerRank));
    MPI_Datatype type = moveType(dtype);
    int n = static_cast<int>(countPerRank);
    DTCC_MPI_CHECK(MPI_Alltoall(in == out ? MPI_IN_PLACE : in, n, type, out, n,
                                type, comm_));
    handed(int64_t(n) * size(), type);
    return Status::ok();
  }

  Status doBroadcast(void *data, int64_t count, DType dtype,
                     int root) override {
    const int64_t size = dtypeSize(dtype);
    for (int64_t off = 0; off < count; off += kMaxCount) {
      int n = static_cast<int>(std::min(kMaxCount, count - off));
      DTCC_MPI_CHECK(MPI_Bcast(static_cast<char *>(data) + off * size, n,
                               moveType(dtype), root, comm_));
      if (rank() == root) // the others hand MPI a buffer to receive into
        handed(n, moveType(dtype));
    }
    return Status::ok();
  }

  StatusOr<std::unique_ptr<PendingSend>>
  doStartSend(const void *data, int64_t bytes, int peer, int64_t tag) override {
    DTCC_RETURN_IF_ERROR(checkTag(tag));
    // MPI_Isend, never MPI_Send: above the eager limit (64 KiB over TCP) a
    // blocking send waits for the matching receive, and a peer that sends
    // to this rank before receiving would wait for this thread forever.
    // Pieces of one message share the tag; MPI keeps them in order.
    auto pending = std::make_unique<MpiPendingSend>();
    int64_t off = 0;
    do {
      int n = static_cast<int>(std::min(kMaxCount, bytes - off));
      MPI_Request request = MPI_REQUEST_NULL;
      DTCC_MPI_CHECK(MPI_Isend(static_cast<const char *>(data) + off, n,
                               MPI_BYTE, peer, static_cast<int>(tag), comm_,
                               &request));
      handed(n, MPI_BYTE);
      pending->requests.push_back(request);
      off += n;
    } while (off < bytes);
    return std::unique_ptr<PendingSend>(std::move(pending));
  }

  Status doRecv(void *data, int64_t bytes, int peer, int64_t tag) override {
    DTCC_RETURN_IF_ERROR(checkTag(tag));
    int64_t off = 0;
    do {
      int n = static_cast<int>(std::min(kMaxCount, bytes - off));
      MPI_Status status;
      DTCC_MPI_CHECK(MPI_Recv(static_cast<char *>(data) + off, n, MPI_BYTE,
                              peer, static_cast<int>(tag), comm_, &status));
      int got = 0;
      DTCC_MPI_CHECK(MPI_Get_count(&status, MPI_BYTE, &got));
      if (got != n)
        return error("received ", got, " bytes from rank ", peer, " with tag ",
                     tag, ", expected ", n);
      off += n;
    } while (off < bytes);
    return Status::ok();
  }

  Status doBarrier() override {
    DTCC_MPI_CHECK(MPI_Barrier(comm_));
    return Status::ok();
  }

private:
  /// Counts a call's send buffer: `count` elements of `type`, at the size
  /// MPI gives the type.
  void handed(int64_t count, MPI_Datatype type) {
    int bytes = 0;
    if (MPI_Type_size(type, &bytes) == MPI_SUCCESS)
      countTransport(count * bytes);
  }

  Status checkCount(int64_t countPerRank) const {
    if (countPerRank > kMaxCount)
      return unimplemented("communicator '", name(), "': ", countPerRank,
                           " elements per rank exceed MPI's limit of ",
                           kMaxCount, " per collective");
    return Status::ok();
  }
  Status checkTag(int64_t tag) const {
    if (tag > tagUb_)
      return error("message tag ", tag, " exceeds MPI_TAG_UB (", tagUb_, ")");
    return Status::ok();
  }

  MPI_Comm comm_;
  MpiWorld &world_;
  int tagUb_;
};

class MpiWorld final : public World {
public:
  static StatusOr<std::unique_ptr<World>> create(const LaunchInfo &launch);

  ~MpiWorld() override {
    if (queue().stuck()) {
      // A collective is stuck on the world communicator or a split of it:
      // freeing it or finalizing would hang; leave it to the process's end.
      (void)world_.release();
      stopQueue();
      return;
    }
    (void)onMpiThread("MPI_Finalize", [this] {
      world_.reset();
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (ownsMpi_ && !finalized)
        MPI_Finalize();
      return Status::ok();
    });
    stopQueue();
  }

  Communicator &world() override { return *world_; }

  StatusOr<std::unique_ptr<Communicator>> split(const std::string &name,
                                                int color, int key) override {
    std::unique_ptr<Communicator> result;
    DTCC_RETURN_IF_ERROR(onMpiThread("MPI_Comm_split for '" + name + "'", [&] {
      return splitHere(name, color, key, result);
    }));
    return result;
  }

  [[noreturn]] void abort(int exitCode) override {
    std::fflush(stdout);
    std::fflush(stderr);
    // MPI_Abort ends every rank; it may run beside a blocked collective only
    // under MPI_THREAD_MULTIPLE. Otherwise this rank's exit without
    // MPI_Finalize makes mpirun end the others.
    if (threadLevel_ >= MPI_THREAD_MULTIPLE)
      MPI_Abort(MPI_COMM_WORLD, exitCode);
    std::_Exit(exitCode);
  }

  /// Whether communicators may still be freed (no collective stuck).
  bool healthy() { return !queue().stuck(); }

  /// Runs `fn` on the thread that initialized MPI (the communication
  /// thread), so that MPI_THREAD_FUNNELED suffices; directly when already
  /// there or when the thread has stopped.
  Status onMpiThread(const std::string &what, std::function<Status()> fn) {
    if (std::this_thread::get_id() == mpiThread_ || queueStopped())
      return fn();
    return queue().run(what, std::move(fn));
  }

private:
  explicit MpiWorld(const LaunchInfo &launch) : World(launch) {}
  /// MPI_Init_thread and the world communicator (on the comm thread).
  Status init();
  Status splitHere(const std::string &name, int color, int key,
                   std::unique_ptr<Communicator> &result);

  std::unique_ptr<MpiCommunicator> world_;
  MPI_Comm worldComm_ = MPI_COMM_NULL;
  bool ownsMpi_ = false;
  int threadLevel_ = MPI_THREAD_SINGLE;
  int tagUb_ = 32767;
  std::thread::id mpiThread_;
};

MpiCommunicator::~MpiCommunicator() {
  if (!world_.healthy())
    return;
  (void)world_.onMpiThread("MPI_Comm_free", [this] {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized)
      MPI_Comm_free(&comm_);
    return Status::ok();
  });
}

const char *threadLevelName(int level) {
  switch (level) {
  case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
  case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
  case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
  case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  default: return "an unknown thread level";
  }
}

Status MpiWorld::splitHere(const std::string &name, int color, int key,
                           std::unique_ptr<Communicator> &result) {
  MPI_Comm comm = MPI_COMM_NULL;
  DTCC_MPI_CHECK(MPI_Comm_split(worldComm_, color < 0 ? MPI_UNDEFINED : color,
                                key, &comm));
  if (comm == MPI_COMM_NULL)
    return Status::ok();
  int rank = 0, size = 0;
  DTCC_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  DTCC_MPI_CHECK(MPI_Comm_size(comm, &size));
  MPI_Group group, worldGroup;
  DTCC_MPI_CHECK(MPI_Comm_group(comm, &group));
  DTCC_MPI_CHECK(MPI_Comm_group(worldComm_, &worldGroup));
  std::vector<int> local(size), global(size);
  for (int i = 0; i < size; ++i)
    local[i] = i;
  DTCC_MPI_CHECK(MPI_Group_translate_ranks(group, size, local.data(),
                                           worldGroup, global.data()));
  MPI_Group_free(&group);
  MPI_Group_free(&worldGroup);
  result = std::make_unique<MpiCommunicator>(name, comm, rank,
                                             std::move(global), *this, tagUb_);
  return Status::ok();
}

Status MpiWorld::init() {
  mpiThread_ = std::this_thread::get_id();
  int initialized = 0;
  DTCC_MPI_CHECK(MPI_Initialized(&initialized));
  if (!initialized) {
    // The communication thread waits in MPI beside the rank's compute
    // thread: on CPU ranks that share cores, a busy-polling wait takes the
    // core the computation needs. Yield when idle unless the user chose.
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", /*overwrite=*/0);
    // FUNNELED is enough: every MPI call runs on this (the communication)
    // thread. MULTIPLE also lets the watchdog call MPI_Abort beside a
    // blocked collective.
    DTCC_MPI_CHECK(
        MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &threadLevel_));
    ownsMpi_ = true;
  } else {
    DTCC_MPI_CHECK(MPI_Query_thread(&threadLevel_));
    if (threadLevel_ < MPI_THREAD_SERIALIZED)
      return unimplemented(
          "MPI was initialized by someone else with only ",
          threadLevelName(threadLevel_),
          "; dtcc runs collectives on a communication thread and needs "
          "MPI_THREAD_SERIALIZED at least there");
  }
  if (threadLevel_ < MPI_THREAD_FUNNELED)
    return unimplemented(
        "MPI provides only ", threadLevelName(threadLevel_),
        "; dtcc runs collectives on a communication thread and needs "
        "MPI_THREAD_FUNNELED at least (MPI_THREAD_MULTIPLE preferred): use "
        "an MPI built with thread support");
  MPI_Comm comm = MPI_COMM_NULL;
  DTCC_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
  DTCC_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  worldComm_ = comm;
  int rank = 0, size = 0;
  DTCC_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  DTCC_MPI_CHECK(MPI_Comm_size(comm, &size));
  int *tagUb = nullptr, flag = 0;
  DTCC_MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tagUb, &flag));
  if (flag && tagUb)
    tagUb_ = *tagUb;
  std::vector<int> ranks(size);
  for (int i = 0; i < size; ++i)
    ranks[i] = i;
  world_ = std::make_unique<MpiCommunicator>("world", comm, rank,
                                             std::move(ranks), *this, tagUb_);
  const LaunchInfo &l = launch();
  if (size != l.size || rank != l.rank) {
    if (l.launcher == "slurm")
      return unavailable(
          "srun started ", l.size, " tasks (this is task ", l.rank,
          ") but MPI sees rank ", rank, " of ", size,
          ": this MPI is not connected to Slurm's process manager (try srun "
          "--mpi=pmix, or start the job with mpirun)");
    return unavailable("the launcher (", l.launcher, ") says rank ", l.rank,
                       " of ", l.size, " but MPI says rank ", rank, " of ",
                       size);
  }
  return Status::ok();
}

StatusOr<std::unique_ptr<World>> MpiWorld::create(const LaunchInfo &launch) {
  std::unique_ptr<MpiWorld> world(new MpiWorld(launch));
  MpiWorld *w = world.get();
  DTCC_RETURN_IF_ERROR(
      world->queue().run("MPI initialization", [w] { return w->init(); }));
  return std::unique_ptr<World>(std::move(world));
}

} // namespace

StatusOr<std::unique_ptr<World>> createMpiWorld(const LaunchInfo &launch) {
  return MpiWorld::create(launch);
}

} // namespace dtcc::runtime
