//===- World.cpp - choosing the backend of the job ------------------------===//
//
// World::init: MPI under mpirun and srun, TCP under torchrun-style launches,
// and a world of one process without a launcher.
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/CommQueue.h"
#include "runtime/comm/Communicator.h"
#include "runtime/comm/mpi/MpiComm.h"
#include "runtime/comm/tcp/TcpComm.h"

#include <cstring>
#include <deque>
#include <map>
#include <mutex>

namespace dtcc::runtime {
namespace {

/// The group of one process: every collective is a copy (done by
/// Communicator), messages to itself wait in a mailbox.
class LocalCommunicator final : public Communicator {
public:
  explicit LocalCommunicator(std::string name)
      : Communicator(std::move(name), 0, {0}) {}

protected:
  Status doAllReduce(const void *, void *, int64_t, DType,
                     ReduceKind) override {
    return unreachable();
  }
  Status doAllGather(const void *, void *, int64_t, DType) override {
    return unreachable();
  }
  Status doReduceScatter(const void *, void *, int64_t, DType,
                         ReduceKind) override {
    return unreachable();
  }
  Status doAllToAll(const void *, void *, int64_t, DType) override {
    return unreachable();
  }
  Status doBroadcast(void *, int64_t, DType, int) override {
    return unreachable();
  }
  StatusOr<std::unique_ptr<PendingSend>>
  doStartSend(const void *data, int64_t bytes, int, int64_t tag) override {
    std::lock_guard<std::mutex> lock(mu_);
    const uint8_t *p = static_cast<const uint8_t *>(data);
    mailbox_[tag].emplace_back(p, p + bytes);
    return std::unique_ptr<PendingSend>();
  }
  Status doRecv(void *data, int64_t bytes, int, int64_t tag) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = mailbox_.find(tag);
    if (it == mailbox_.end() || it->second.empty())
      return error("receiving from this rank itself with tag ", tag,
                   " before sending it");
    std::vector<uint8_t> &m = it->second.front();
    if (static_cast<int64_t>(m.size()) != bytes)
      return error("received ", m.size(), " bytes with tag ", tag,
                   ", expected ", bytes);
    std::memcpy(data, m.data(), bytes);
    it->second.pop_front();
    return Status::ok();
  }
  Status doBarrier() override { return Status::ok(); }

private:
  Status unreachable() const {
    return internalError("communicator '", name(),
                         "': a group of one has nothing to exchange");
  }
  std::mutex mu_;
  std::map<int64_t, std::deque<std::vector<uint8_t>>> mailbox_;
};

class LocalWorld final : public World {
public:
  explicit LocalWorld(const LaunchInfo &launch)
      : World(launch), world_("world") {}
  ~LocalWorld() override { stopQueue(); }
  Communicator &world() override { return world_; }
  StatusOr<std::unique_ptr<Communicator>> split(const std::string &name,
                                                int color, int) override {
    if (color < 0)
      return std::unique_ptr<Communicator>();
    return std::unique_ptr<Communicator>(
        std::make_unique<LocalCommunicator>(name));
  }

private:
  LocalCommunicator world_;
};

} // namespace

StatusOr<std::unique_ptr<World>> World::init() {
  DTCC_ASSIGN_OR_RETURN(LaunchInfo launch, detectLaunch());
  return init(launch);
}

StatusOr<std::unique_ptr<World>> World::init(const LaunchInfo &launch) {
  DTCC_ASSIGN_OR_RETURN(double timeout, CommQueue::timeoutFromEnvironment(
                                            CommQueue::kDefaultTimeoutSeconds));
  std::unique_ptr<World> world;
  if (launch.launcher == "mpirun" || launch.launcher == "slurm") {
    DTCC_ASSIGN_OR_RETURN(world, createMpiWorld(launch));
  } else if (launch.launcher == "torchrun") {
    DTCC_ASSIGN_OR_RETURN(world, createTcpWorld(launch, timeout));
  } else if (launch.launcher == "single" && launch.size == 1) {
    world = std::make_unique<LocalWorld>(launch);
  } else {
    return invalidArgument("unknown launcher '", launch.launcher, "' with ",
                           launch.size, " ranks");
  }
  world->queue().setTimeout(timeout);
  return world;
}

} // namespace dtcc::runtime
