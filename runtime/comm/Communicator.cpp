//===- Communicator.cpp - argument checks, launchers and meshes -----------===//
//
// What every backend shares: the collectives' argument checks and f16/bf16
// staging, launcher detection, the World's communication thread and the
// mesh helper. The backends live in mpi/ and tcp/; World::init in World.cpp.
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/Communicator.h"

#include "runtime/comm/CommQueue.h"
#include "runtime/comm/Reduce.h"

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

namespace dtcc::runtime {

using comm::narrowHalf;
using comm::widenHalf;

const char *reduceKindName(ReduceKind kind) {
  switch (kind) {
  case ReduceKind::kSum: return "sum";
  case ReduceKind::kMax: return "max";
  case ReduceKind::kMin: return "min";
  case ReduceKind::kProd: return "prod";
  }
  return "?";
}

StatusOr<ReduceKind> parseReduceKind(const std::string &name) {
  for (ReduceKind k : {ReduceKind::kSum, ReduceKind::kMax, ReduceKind::kMin,
                       ReduceKind::kProd})
    if (name == reduceKindName(k))
      return k;
  return invalidArgument("unknown reduction '", name,
                         "' (expected sum, max, min or prod)");
}

//===----------------------------------------------------------------------===//
// Communicator
//===----------------------------------------------------------------------===//

Communicator::Communicator(std::string name, int rank,
                           std::vector<int> worldRanks)
    : name_(std::move(name)), rank_(rank), worldRanks_(std::move(worldRanks)) {}

Communicator::~Communicator() = default;

PendingSend::~PendingSend() = default;

Status Communicator::checkArgs(const void *in, const void *out, int64_t count,
                               DType dtype) const {
  if (count < 0)
    return error("negative element count ", count);
  if (dtype == DType::kInvalid || !isValidDType(static_cast<int32_t>(dtype)))
    return error("invalid element type ", static_cast<int32_t>(dtype));
  if (count > 0 && (!in || !out))
    return error("null buffer for ", count, " elements");
  return Status::ok();
}

Status Communicator::checkPeer(int peer, const char *what) const {
  if (peer < 0 || peer >= size())
    return error(what, " ", peer, " is outside the group of ", size(),
                 " ranks");
  return Status::ok();
}

Status Communicator::allReduce(const void *in, void *out, int64_t count,
                               DType dtype, ReduceKind kind) {
  DTCC_RETURN_IF_ERROR(checkArgs(in, out, count, dtype));
  const int64_t bytes = count * dtypeSize(dtype);
  if (count == 0)
    return Status::ok();
  if (size() == 1) {
    if (in != out)
      std::memmove(out, in, bytes);
    return Status::ok();
  }
  // Halves reduce through f32, and travel so: count what travels.
  const int64_t wireBytes = isHalfDType(dtype) ? count * 4 : bytes;
  countSent(2 * (size() - 1) * wireBytes / size());
  if (isHalfDType(dtype)) {
    std::vector<float> wide(count);
    widenHalf(in, wide.data(), count, dtype);
    DTCC_RETURN_IF_ERROR(
        doAllReduce(wide.data(), wide.data(), count, DType::kF32, kind));
    narrowHalf(wide.data(), out, count, dtype);
    return Status::ok();
  }
  return doAllReduce(in, out, count, dtype, kind);
}

Status Communicator::allGather(const void *in, void *out, int64_t countPerRank,
                               DType dtype) {
  DTCC_RETURN_IF_ERROR(checkArgs(in, out, countPerRank, dtype));
  if (countPerRank == 0)
    return Status::ok();
  if (size() == 1) {
    if (in != out)
      std::memmove(out, in, countPerRank * dtypeSize(dtype));
    return Status::ok();
  }
  countSent((size() - 1) * countPerRank * dtypeSize(dtype));
  return doAllGather(in, out, countPerRank, dtype);
}

Status Communicator::reduceScatter(const void *in, void *out,
                                   int64_t countPerRank, DType dtype,
                                   ReduceKind kind) {
  DTCC_RETURN_IF_ERROR(checkArgs(in, out, countPerRank, dtype));
  if (countPerRank == 0)
    return Status::ok();
  if (size() == 1) {
    if (in != out)
      std::memmove(out, in, countPerRank * dtypeSize(dtype));
    return Status::ok();
  }
  countSent((size() - 1) * countPerRank *
            (isHalfDType(dtype) ? 4 : dtypeSize(dtype)));
  if (isHalfDType(dtype)) {
    const int64_t total = countPerRank * size();
    std::vector<float> wide(total + countPerRank);
    widenHalf(in, wide.data(), total, dtype);
    DTCC_RETURN_IF_ERROR(doReduceScatter(wide.data(), wide.data() + total,
                                         countPerRank, DType::kF32, kind));
    narrowHalf(wide.data() + total, out, countPerRank, dtype);
    return Status::ok();
  }
  return doReduceScatter(in, out, countPerRank, dtype, kind);
}

Status Communicator::allToAll(const void *in, void *out, int64_t countPerRank,
                              DType dtype) {
  DTCC_RETURN_IF_ERROR(checkArgs(in, out, countPerRank, dtype));
  if (countPerRank == 0)
    return Status::ok();
  if (size() == 1) {
    if (in != out)
      std::memmove(out, in, countPerRank * dtypeSize(dtype));
    return Status::ok();
  }
  countSent((size() - 1) * countPerRank * dtypeSize(dtype));
  return doAllToAll(in, out, countPerRank, dtype);
}

Status Communicator::broadcast(void *data, int64_t count, DType dtype,
                               int root) {
  DTCC_RETURN_IF_ERROR(checkArgs(data, data, count, dtype));
  DTCC_RETURN_IF_ERROR(checkPeer(root, "broadcast root"));
  if (count == 0 || size() == 1)
    return Status::ok();
  if (rank() == root)
    countSent(count * dtypeSize(dtype));
  return doBroadcast(data, count, dtype, root);
}

Status Communicator::send(const void *data, int64_t bytes, int peer,
                          int64_t tag) {
  DTCC_ASSIGN_OR_RETURN(std::unique_ptr<PendingSend> pending,
                        startSend(data, bytes, peer, tag));
  return pending ? pending->wait() : Status::ok();
}

StatusOr<std::unique_ptr<PendingSend>>
Communicator::startSend(const void *data, int64_t bytes, int peer,
                        int64_t tag) {
  DTCC_RETURN_IF_ERROR(checkArgs(data, data, bytes, DType::kU8));
  DTCC_RETURN_IF_ERROR(checkPeer(peer, "send peer"));
  if (tag < 0)
    return error("negative message tag ", tag);
  countSent(bytes);
  return doStartSend(data, bytes, peer, tag);
}

Status Communicator::recv(void *data, int64_t bytes, int peer, int64_t tag) {
  DTCC_RETURN_IF_ERROR(checkArgs(data, data, bytes, DType::kU8));
  DTCC_RETURN_IF_ERROR(checkPeer(peer, "recv peer"));
  if (tag < 0)
    return error("negative message tag ", tag);
  return doRecv(data, bytes, peer, tag);
}

Status Communicator::barrier() {
  if (size() == 1)
    return Status::ok();
  return doBarrier();
}

//===----------------------------------------------------------------------===//
// Launchers
//===----------------------------------------------------------------------===//

namespace {

/// This node's count in a Slurm task list such as "4(x2),3" (node 2 runs
/// 3 tasks); 0 when `node` is past its end or the list is malformed.
int slurmTasksOnNode(const char *list, int node) {
  int at = 0;
  for (const char *p = list; p && *p;) {
    char *end = nullptr;
    const long tasks = std::strtol(p, &end, 10);
    if (end == p || tasks < 1 || tasks > INT_MAX)
      return 0;
    long repeat = 1;
    p = end;
    if (*p == '(') {
      if (p[1] != 'x')
        return 0;
      repeat = std::strtol(p + 2, &end, 10);
      if (end == p + 2 || *end != ')' || repeat < 1)
        return 0;
      p = end + 1;
    }
    if (node < at + repeat)
      return int(tasks);
    at += int(repeat);
    if (*p == ',')
      ++p;
    else if (*p)
      return 0;
  }
  return 0;
}

StatusOr<int> parseEnvInt(const char *name, const char *value, int min) {
  if (!value)
    return invalidArgument(name, " is not set");
  char *end = nullptr;
  errno = 0;
  long v = std::strtol(value, &end, 10);
  if (!*value || *end != '\0' || errno != 0 || v < min || v > INT_MAX)
    return invalidArgument(name, " must be an integer >= ", min, ", got '",
                           value, "'");
  return static_cast<int>(v);
}

} // namespace

StatusOr<LaunchInfo> detectLaunch(const EnvLookup &lookup) {
  EnvLookup env = lookup ? lookup : EnvLookup([](const char *name) {
    return static_cast<const char *>(std::getenv(name));
  });
  LaunchInfo info;
  auto readInts = [&](const char *rankVar, const char *sizeVar,
                      const char *localVar) -> Status {
    DTCC_ASSIGN_OR_RETURN(info.size, parseEnvInt(sizeVar, env(sizeVar), 1));
    DTCC_ASSIGN_OR_RETURN(info.rank, parseEnvInt(rankVar, env(rankVar), 0));
    if (info.rank >= info.size)
      return invalidArgument(rankVar, "=", info.rank, " is not below ", sizeVar,
                             "=", info.size);
    info.localRank = 0;
    if (env(localVar)) {
      DTCC_ASSIGN_OR_RETURN(info.localRank,
                            parseEnvInt(localVar, env(localVar), 0));
    }
    return Status::ok();
  };
  // Optional; when given it must be a count that holds the local rank.
  auto readLocalSize = [&](const char *var) -> Status {
    if (!env(var))
      return Status::ok();
    DTCC_ASSIGN_OR_RETURN(info.localSize, parseEnvInt(var, env(var), 1));
    if (info.localRank >= info.localSize)
      return invalidArgument("local rank ", info.localRank, " is not below ",
                             var, "=", info.localSize);
    return Status::ok();
  };

  if (env("OMPI_COMM_WORLD_SIZE") || env("OMPI_COMM_WORLD_RANK")) {
    info.launcher = "mpirun";
    DTCC_RETURN_IF_ERROR(readInts("OMPI_COMM_WORLD_RANK",
                                  "OMPI_COMM_WORLD_SIZE",
                                  "OMPI_COMM_WORLD_LOCAL_RANK")
                             .withContext("Open MPI launch"));
    DTCC_RETURN_IF_ERROR(readLocalSize("OMPI_COMM_WORLD_LOCAL_SIZE")
                             .withContext("Open MPI launch"));
    return info;
  }
  if (env("RANK") && env("WORLD_SIZE")) {
    info.launcher = "torchrun";
    DTCC_RETURN_IF_ERROR(readInts("RANK", "WORLD_SIZE", "LOCAL_RANK")
                             .withContext("torchrun-style launch"));
    DTCC_RETURN_IF_ERROR(readLocalSize("LOCAL_WORLD_SIZE")
                             .withContext("torchrun-style launch"));
    const char *addr = env("MASTER_ADDR");
    if (!addr || !*addr)
      return invalidArgument("torchrun-style launch: RANK and WORLD_SIZE are "
                             "set but MASTER_ADDR is not (the address of "
                             "rank 0)");
    info.masterAddr = addr;
    const char *port = env("MASTER_PORT");
    if (!port)
      return invalidArgument("torchrun-style launch: MASTER_PORT is not set");
    auto p = parseEnvInt("MASTER_PORT", port, 1);
    if (!p.isOk() || p.value() > 65535)
      return invalidArgument("torchrun-style launch: MASTER_PORT must be a "
                             "port number, got '",
                             port, "'");
    info.masterPort = p.value();
    return info;
  }
  // srun sets the SLURM_STEP_* variables; a batch script run directly has
  // SLURM_PROCID and SLURM_NTASKS too, but is one process.
  if (env("SLURM_PROCID") &&
      (env("SLURM_STEP_NUM_TASKS") || env("SLURM_STEP_ID"))) {
    info.launcher = "slurm";
    const char *sizeVar =
        env("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
    DTCC_RETURN_IF_ERROR(readInts("SLURM_PROCID", sizeVar, "SLURM_LOCALID")
                             .withContext("Slurm launch"));
    if (const char *list = env("SLURM_STEP_TASKS_PER_NODE")) {
      auto node = parseEnvInt("SLURM_NODEID", env("SLURM_NODEID"), 0);
      if (node.isOk())
        info.localSize = slurmTasksOnNode(list, node.value());
    }
    return info;
  }
  return info;
}

std::string launchCommand(const std::string &launcher, int size) {
  if (launcher == "mpirun")
    return strCat("mpirun -np ", size);
  if (launcher == "slurm")
    return strCat("srun -n ", size);
  if (launcher == "torchrun")
    return strCat("torchrun, WORLD_SIZE=", size);
  return size == 1 ? "a single process" : "a single process, no launcher";
}

//===----------------------------------------------------------------------===//
// World
//===----------------------------------------------------------------------===//

World::World(LaunchInfo launch) : launch_(std::move(launch)) {
  queue_ = std::make_unique<CommQueue>(
      describe(), [this](int exitCode) { abort(exitCode); });
}

World::~World() { stopQueue(); }

bool World::stopQueue() {
  if (!queueStopped_) {
    queueStopped_ = true;
    queueClean_ = queue_->stop();
  }
  return queueClean_;
}

std::string World::describe() const { return strCat("rank ", launch_.rank); }

void World::abort(int exitCode) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(exitCode);
}

//===----------------------------------------------------------------------===//
// Meshes
//===----------------------------------------------------------------------===//

Communicator *MeshComms::axis(const std::string &name) const {
  for (size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) {
      auto it = comms_.find(uint64_t(1) << i);
      return it == comms_.end() ? nullptr : it->second.get();
    }
  return nullptr;
}

StatusOr<Communicator *>
MeshComms::group(const std::vector<std::string> &axes) const {
  auto listed = [&] {
    std::string s;
    for (const std::string &a : names_)
      s += (s.empty() ? "'" : ", '") + a + "'";
    return s.empty() ? std::string("none") : s;
  };
  if (axes.empty())
    return invalidArgument("expected at least one mesh axis (the mesh ",
                           describe(), " has axes ", listed(), ")");
  uint64_t mask = 0;
  int64_t last = -1;
  for (const std::string &a : axes) {
    int64_t i = -1;
    for (size_t j = 0; j < names_.size(); ++j)
      if (names_[j] == a)
        i = static_cast<int64_t>(j);
    if (i < 0)
      return invalidArgument("no mesh axis '", a, "' in the mesh ", describe(),
                             " (axes: ", listed(), ")");
    if (i <= last)
      return invalidArgument("mesh axes must be listed once each, in mesh "
                             "order (",
                             listed(), "), got '", a, "' after '", names_[last],
                             "'");
    last = i;
    mask |= uint64_t(1) << i;
  }
  auto it = comms_.find(mask);
  if (it == comms_.end())
    return unimplemented("no communicator for several axes of the mesh ",
                         describe(), ": only meshes of up to ", kMaxComboAxes,
                         " axes have them");
  return it->second.get();
}

std::vector<Communicator *> MeshComms::communicators() const {
  std::vector<Communicator *> all;
  for (const auto &[mask, c] : comms_)
    all.push_back(c.get());
  return all;
}

int64_t MeshComms::bytesSent() const {
  int64_t sum = 0;
  for (const auto &[mask, c] : comms_)
    sum += c->bytesSent();
  return sum;
}

int64_t MeshComms::transportBytes() const {
  int64_t sum = 0;
  for (const auto &[mask, c] : comms_)
    sum += c->transportBytes();
  return sum;
}

int64_t MeshComms::transportHeaderBytes() const {
  int64_t sum = 0;
  for (const auto &[mask, c] : comms_)
    sum += c->transportHeaderBytes();
  return sum;
}

int64_t MeshComms::coord(const std::string &name) const {
  for (size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name)
      return coords_[i];
  return -1;
}

static std::string describeMesh(const std::vector<std::string> &names,
                                const std::vector<int64_t> &sizes) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i)
    s += strCat(i ? " x " : "", names[i], "=", sizes[i]);
  return s.empty() ? "of no axes" : s;
}

std::string MeshComms::describe() const { return describeMesh(names_, sizes_); }

StatusOr<MeshComms> createMeshComms(World &world,
                                    const std::vector<std::string> &axisNames,
                                    const std::vector<int64_t> &axisSizes) {
  if (axisNames.size() != axisSizes.size())
    return invalidArgument("mesh has ", axisNames.size(), " axis names but ",
                           axisSizes.size(), " sizes");
  std::set<std::string> seen;
  int64_t product = 1;
  for (size_t i = 0; i < axisNames.size(); ++i) {
    if (axisNames[i].empty())
      return invalidArgument("mesh axis ", i, " has no name");
    if (!seen.insert(axisNames[i]).second)
      return invalidArgument("mesh axis '", axisNames[i], "' appears twice");
    if (axisSizes[i] < 1 || axisSizes[i] > INT_MAX)
      return invalidArgument("mesh axis '", axisNames[i], "' has size ",
                             axisSizes[i]);
    product *= axisSizes[i];
    if (product > INT_MAX)
      return invalidArgument("mesh ", describeMesh(axisNames, axisSizes),
                             " has more ranks than a job can have");
  }
  // Checked before any communication, so that no rank waits.
  if (product != world.size()) {
    auto ranks = [](int64_t n) {
      return strCat(n, n == 1 ? " rank" : " ranks");
    };
    const std::string launcher =
        world.launcher() == "single" ? "mpirun" : world.launcher();
    return invalidArgument(
        "the program was compiled for a mesh ",
        describeMesh(axisNames, axisSizes), " (", ranks(product),
        ") but the job has ", ranks(world.size()), " (",
        launchCommand(world.launcher(), world.size()), "); start it with ",
        launchCommand(launcher, static_cast<int>(product)));
  }

  MeshComms mesh;
  mesh.world_ = &world;
  mesh.names_ = axisNames;
  mesh.sizes_ = axisSizes;
  const size_t n = axisSizes.size();
  std::vector<int64_t> strides(n, 1);
  for (size_t i = n; i-- > 1;)
    strides[i - 1] = strides[i] * axisSizes[i];
  mesh.coords_.resize(n);
  for (size_t i = 0; i < n; ++i)
    mesh.coords_[i] = (world.rank() / strides[i]) % axisSizes[i];
  // One split per axis combination (bit i: axis i), in the same order on
  // every rank: the group is the ranks equal to this one off the masked
  // axes (color: this rank with those coordinates zeroed), ordered by the
  // row-major index over the masked axes (key).
  const uint64_t full = (uint64_t(1) << n) - 1;
  for (uint64_t mask = 1; mask <= full; ++mask) {
    const bool single = (mask & (mask - 1)) == 0;
    if (!single && n > MeshComms::kMaxComboAxes)
      continue;
    int64_t color = world.rank(), key = 0, size = 1;
    std::string name;
    for (size_t i = 0; i < n; ++i) {
      if (!(mask & (uint64_t(1) << i)))
        continue;
      color -= mesh.coords_[i] * strides[i];
      key = key * axisSizes[i] + mesh.coords_[i];
      size *= axisSizes[i];
      name += (name.empty() ? "" : ",") + axisNames[i];
    }
    DTCC_ASSIGN_OR_RETURN(
        std::unique_ptr<Communicator> c,
        world.split(name, static_cast<int>(color), static_cast<int>(key)));
    if (!c || c->size() != size || c->rank() != key)
      return internalError("mesh axes '", name, "': expected a group of ", size,
                           " with this rank at ", key, ", got ",
                           c ? c->size() : 0, " and ", c ? c->rank() : -1);
    mesh.comms_[mask] = std::move(c);
  }
  return mesh;
}

} // namespace dtcc::runtime
