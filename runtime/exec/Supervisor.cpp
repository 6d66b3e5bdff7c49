//===- Supervisor.cpp - restarting a job from its last checkpoint ---------===//

#include "runtime/exec/Supervisor.h"

#include "runtime/base/FlagArg.h"
#include "runtime/comm/CommQueue.h"
#include "runtime/comm/TcpPort.h"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <optional>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char **environ;

namespace dtcc::runtime {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

StatusOr<int> parseInt(const std::string &flag, const std::string &v, int min) {
  char *end = nullptr;
  errno = 0;
  long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0 || n < min || n > INT_MAX)
    return invalidArgument(flag, " expects an integer >= ", min, ", got '", v,
                           "'");
  return static_cast<int>(n);
}

StatusOr<double> parseSeconds(const std::string &flag, const std::string &v,
                              bool zeroOk) {
  char *end = nullptr;
  double t = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(t >= 0) || (!zeroOk && t == 0) || t > 1e7)
    return invalidArgument(flag, " expects a ", zeroOk ? "" : "positive ",
                           "number of seconds, got '", v, "'");
  return t;
}

const char *getenvOrNull(const char *name) { return std::getenv(name); }

volatile std::sig_atomic_t stopSignal = 0;
void onStopSignal(int sig) { stopSignal = sig; }

/// One rank process of an attempt.
struct RankProcess {
  int rank = 0;
  pid_t pid = -1;
  bool exited = false;
  int status = 0;
  /// The read end of the rank's stderr, which the supervisor passes on
  /// line by line, keeping the last error for the failure's cause.
  int errFd = -1;
  std::string errBuffer, lastError;
  /// Whether stopAll() sent it SIGTERM, and whether it escalated to SIGKILL:
  /// any other signal it died of was not ours.
  bool terminated = false, killed = false;
};

/// One failure and what it cost.
struct Failure {
  int attempt = 0;
  std::string cause;
  int64_t lastStep = 0;     ///< the furthest step any rank had finished
  int64_t resumedFrom = -1; ///< the step the next attempt started from
  /// From the last step finished before the failure to the moment the
  /// restarted job finished that step again: the wall time the job made no
  /// new progress (detection, back-off, restart, the steps redone).
  double secondsLost = -1;
  Clock::time_point at; ///< when lastStep was finished
  bool recovered = false;
  /// The job's rank count when it failed and when it was restarted (they
  /// differ after an elastic restart, SupervisorOptions::replan).
  int ranks = 0, restartRanks = 0;
};

std::string jsonString(const std::string &s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\', out += c;
    else if (c == '\n')
      out += "\\n";
    else if (static_cast<unsigned char>(c) < 0x20)
      out += ' ';
    else
      out += c;
  }
  return out + "\"";
}

/// The environment of a rank: the launcher's variables replaced by the
/// torchrun-style ones of the TCP backend (Open MPI's and PMIx's removed,
/// or the rank would join an MPI job).
std::vector<std::string> rankEnvironment(const std::map<std::string, std::string> &set) {
  std::vector<std::string> env;
  for (char **e = environ; *e; ++e) {
    std::string kv = *e;
    std::string key = kv.substr(0, kv.find('='));
    if (key.rfind("OMPI_", 0) == 0 || key.rfind("PMIX_", 0) == 0 ||
        key.rfind("PMI_", 0) == 0 || set.count(key))
      continue;
    env.push_back(kv);
  }
  for (const auto &[k, v] : set)
    env.push_back(k + "=" + v);
  return env;
}

} // namespace

std::string describeExit(int status) {
  if (WIFEXITED(status))
    return strCat("exited with status ", WEXITSTATUS(status),
                  WEXITSTATUS(status) == CommQueue::kWatchdogExitCode
                      ? " (a collective timed out)"
                  : WEXITSTATUS(status) == CommQueue::kPeerLostExitCode
                      ? " (it lost a peer)"
                      : "");
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    const char *name = sigabbrev_np(sig);
    return strCat("killed by signal ", sig, name ? strCat(" (SIG", name, ")") : "");
  }
  return strCat("ended with wait status ", status);
}

bool wantsSupervisor(int argc, char **argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--supervise") == 0)
      return true;
  return false;
}

StatusOr<SupervisorOptions> parseSupervisorFlags(int argc, char **argv,
                                                 const std::string &self) {
  SupervisorOptions o;
  o.rankArgs.push_back(self);
  for (int i = 1; i < argc; ++i) {
    FlagArg flag(argc, argv, i);
    const std::string &arg = flag.arg;
    auto value = [&](const char *name) { return flag.value(name); };
    auto is = [&](const char *name) { return flag.is(name); };
    if (arg == "--supervise") {
    } else if (is("--ranks")) {
      DTCC_ASSIGN_OR_RETURN(std::string v, value("--ranks"));
      DTCC_ASSIGN_OR_RETURN(o.ranks, parseInt("--ranks", v, 1));
    } else if (is("--nnodes")) {
      DTCC_ASSIGN_OR_RETURN(std::string v, value("--nnodes"));
      DTCC_ASSIGN_OR_RETURN(o.nnodes, parseInt("--nnodes", v, 1));
    } else if (is("--node-rank")) {
      DTCC_ASSIGN_OR_RETURN(std::string v, value("--node-rank"));
      DTCC_ASSIGN_OR_RETURN(o.nodeRank, parseInt("--node-rank", v, 0));
    } else if (is("--max-restarts")) {
      DTCC_ASSIGN_OR_RETURN(std::string v, value("--max-restarts"));
      DTCC_ASSIGN_OR_RETURN(o.maxRestarts, parseInt("--max-restarts", v, 0));
    } else if (is("--restart-backoff")) {
      DTCC_ASSIGN_OR_RETURN(std::string v, value("--restart-backoff"));
      DTCC_ASSIGN_OR_RETURN(o.backoffSeconds,
                            parseSeconds("--restart-backoff", v, true));
    } else if (is("--hang-timeout")) {
      DTCC_ASSIGN_OR_RETURN(std::string v, value("--hang-timeout"));
      DTCC_ASSIGN_OR_RETURN(o.hangSeconds,
                            parseSeconds("--hang-timeout", v, true));
    } else if (is("--min-ranks")) {
      DTCC_ASSIGN_OR_RETURN(std::string v, value("--min-ranks"));
      DTCC_ASSIGN_OR_RETURN(o.minRanks, parseInt("--min-ranks", v, 1));
    } else if (is("--max-ranks")) {
      DTCC_ASSIGN_OR_RETURN(std::string v, value("--max-ranks"));
      DTCC_ASSIGN_OR_RETURN(o.maxRanks, parseInt("--max-ranks", v, 1));
    } else if (is("--supervisor-report")) {
      DTCC_ASSIGN_OR_RETURN(o.report, value("--supervisor-report"));
    } else if (is("--master-addr")) {
      DTCC_ASSIGN_OR_RETURN(o.masterAddr, value("--master-addr"));
    } else if (is("--master-port")) {
      DTCC_ASSIGN_OR_RETURN(std::string v, value("--master-port"));
      DTCC_ASSIGN_OR_RETURN(o.masterPort, parseInt("--master-port", v, 1));
      if (o.masterPort > 65535)
        return invalidArgument("--master-port expects a port number, got '",
                               v, "'");
    } else {
      o.rankArgs.push_back(arg);
    }
  }
  return o;
}

std::function<void(const char *, int64_t)> supervisorProgress(int rank) {
  const char *fdText = std::getenv("DTCC_SUPERVISOR_FD");
  if (!fdText || !*fdText)
    return nullptr;
  int fd = std::atoi(fdText);
  if (fd < 0 || fcntl(fd, F_GETFD) < 0)
    return nullptr;
  return [fd, rank](const char *event, int64_t step) {
    char line[96];
    int n = std::snprintf(line, sizeof(line), "%d %s %" PRId64 "\n", rank,
                          event, step);
    // One write of less than PIPE_BUF bytes: lines of ranks never mix.
    if (n > 0)
      (void)!::write(fd, line, static_cast<size_t>(n));
  };
}

namespace {

} // namespace

StatusOr<SupervisedJob>
supervisedJob(const SupervisorOptions &o, int programRanks,
              const std::function<const char *(const char *)> &lookup) {
  SupervisedJob j;
  auto env = [&](const char *name) {
    return lookup ? lookup(name) : getenvOrNull(name);
  };
  auto envInt = [&](const char *name, int min) -> StatusOr<int> {
    return parseInt(name, env(name), min);
  };
  // Who else supervises a share of this job: flags, then the launcher.
  if (o.nnodes > 0) {
    j.nnodes = o.nnodes;
    j.nodeRank = o.nodeRank < 0 ? 0 : o.nodeRank;
    j.launcher = "flags";
  } else if (env("NNODES") && env("NODE_RANK")) {
    DTCC_ASSIGN_OR_RETURN(j.nnodes, envInt("NNODES", 1));
    DTCC_ASSIGN_OR_RETURN(j.nodeRank, envInt("NODE_RANK", 0));
    j.launcher = "torchrun-style (NNODES, NODE_RANK)";
  } else if (env("RANK") && env("WORLD_SIZE") && env("LOCAL_RANK")) {
    return invalidArgument(
        "--supervise in a process that torchrun (or a launcher like it) "
        "started as rank ", env("RANK"), " of ", env("WORLD_SIZE"),
        ": the launcher already starts the ranks; run the program without "
        "--supervise there (with --checkpoint-dir, so that the launcher's "
        "restarts resume), or start one supervisor per node with NNODES and "
        "NODE_RANK (docs/operations.md)");
  } else if (env("SLURM_NNODES") && env("SLURM_NODEID") &&
             (env("SLURM_STEP_ID") || env("SLURM_STEP_NUM_TASKS"))) {
    DTCC_ASSIGN_OR_RETURN(j.nnodes, envInt("SLURM_NNODES", 1));
    DTCC_ASSIGN_OR_RETURN(j.nodeRank, envInt("SLURM_NODEID", 0));
    const char *tasks = env("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS"
                                                    : "SLURM_NTASKS";
    if (env(tasks) && std::string(env(tasks)) != env("SLURM_NNODES"))
      return invalidArgument(
          "--supervise under srun with ", tasks, "=", env(tasks), " on ",
          j.nnodes, " node(s): run one supervisor per node (srun "
          "--ntasks-per-node=1); it starts that node's ranks");
    j.launcher = "Slurm (SLURM_NNODES, SLURM_NODEID)";
  } else if (env("OMPI_COMM_WORLD_SIZE") && env("OMPI_COMM_WORLD_RANK")) {
    DTCC_ASSIGN_OR_RETURN(j.nnodes, envInt("OMPI_COMM_WORLD_SIZE", 1));
    DTCC_ASSIGN_OR_RETURN(j.nodeRank, envInt("OMPI_COMM_WORLD_RANK", 0));
    j.launcher = "Open MPI (one supervisor per node)";
  }
  if (o.nodeRank >= 0)
    j.nodeRank = o.nodeRank;
  if (j.nodeRank >= j.nnodes)
    return invalidArgument("node rank ", j.nodeRank, " is not below the ",
                           j.nnodes, " nodes");
  if (o.ranks > 0) {
    j.ranksPerNode = o.ranks;
  } else {
    if (programRanks % j.nnodes != 0)
      return invalidArgument("the program's mesh has ", programRanks,
                             " ranks, which ", j.nnodes,
                             " nodes cannot share equally; pass --ranks");
    j.ranksPerNode = programRanks / j.nnodes;
  }
  j.worldSize = j.nnodes * j.ranksPerNode;
  if (j.worldSize != programRanks)
    return invalidArgument(
        "the program was compiled for ", programRanks, " ranks but ",
        j.nnodes, " node(s) x --ranks ", j.ranksPerNode, " make ", j.worldSize,
        " (recompile with dtcc compile for that many ranks, or change "
        "--ranks)");
  if (o.minRanks > 0 && o.minRanks > programRanks)
    return invalidArgument("--min-ranks ", o.minRanks, " excludes the ",
                           "program's ", programRanks, " ranks");
  if (o.maxRanks > 0 && o.maxRanks < programRanks)
    return invalidArgument("--max-ranks ", o.maxRanks, " excludes the ",
                           "program's ", programRanks, " ranks");
  j.masterAddr = !o.masterAddr.empty()          ? o.masterAddr
                 : env("MASTER_ADDR")           ? env("MASTER_ADDR")
                                                : "";
  if (o.masterPort > 0)
    j.masterPort = o.masterPort;
  else if (env("MASTER_PORT")) {
    DTCC_ASSIGN_OR_RETURN(j.masterPort, envInt("MASTER_PORT", 1));
  }
  if (j.nnodes > 1 && j.masterAddr.empty())
    return invalidArgument(
        "a job of ", j.nnodes, " nodes needs rank 0's address: set "
        "MASTER_ADDR (the first node's, e.g. $(scontrol show hostnames "
        "$SLURM_JOB_NODELIST | head -n1)) or pass --master-addr");
  if (j.nnodes > 1 && j.masterPort == 0)
    j.masterPort = 29500;
  if (j.masterAddr.empty())
    j.masterAddr = "127.0.0.1";
  return j;
}

namespace {

class Supervisor {
public:
  Supervisor(const SupervisorOptions &o, SupervisedJob job) : o_(o), job_(std::move(job)) {
    elastic_ = o_.replan && o_.availableRanks && job_.nnodes == 1;
    for (size_t i = 1; i < o_.rankArgs.size(); ++i) {
      const std::string &a = o_.rankArgs[i];
      if (a == "--checkpoint-dir" || a.rfind("--checkpoint-dir=", 0) == 0)
        hasCheckpoints_ = true;
    }
  }

  int run();

private:
  /// Starts this node's ranks; false (with a message) if one cannot start.
  bool start(int attempt);
  /// Watches the ranks until all exit (true) or one fails (false, cause).
  bool watch(std::string &cause);
  void stopAll();
  /// After stopAll(): this node's ranks that died of a signal it did not
  /// send ("rank 3 killed by signal 9 (SIGKILL)", joined by "; ").
  std::string signalledRanks() const;
  void readProgress();
  void readErrors(RankProcess &r);
  void onProgress(int rank, const std::string &event, int64_t step);
  void say(const std::string &line) {
    std::fprintf(stderr, "supervisor%s: %s\n", nodeTag_.c_str(), line.c_str());
    std::fflush(stderr);
  }
  void report(const char *outcome, int restarts);
  /// Elastic jobs: the rank count of the next attempt (from the ranks
  /// available and the limits), replanned when it changed. False, with a
  /// message, when no count or plan fits.
  bool resize();

  // Several nodes: their supervisors agree on stops and restarts over TCP
  // at MASTER_ADDR:MASTER_PORT+1, node 0 coordinating. Lines:
  //   hello <node>               a node joins (to node 0)
  //   fail <attempt> <cause>     a node saw a failure (to node 0)
  //   stop <attempt> <cause>     stop your ranks (from node 0)
  //   stopped <attempt> <step>   a node's ranks are down; its furthest step
  //   restart <attempt>          start that attempt (from node 0)
  //   giveup                     the job failed (from node 0)
  //   done                       a node's ranks finished (to node 0)
  struct Peer {
    int fd = -1, node = -1, stopped = -1;
    bool done = false; ///< its ranks finished
    int64_t lastStep = 0;
    std::string buf;
  };
  void setupCoordination();
  bool coordinated() const { return coordListen_ >= 0 || coordFd_ >= 0; }
  void send(int fd, const std::string &line);
  /// Appends fd's whole lines to `lines`; false when it closed.
  bool readLines(int fd, std::string &buf, std::vector<std::string> &lines);
  /// In watch(): joins, and a failure elsewhere (its cause in `cause`).
  bool pollCoordination(std::string &cause);
  /// Records that `node`'s supervisor disconnected before its ranks
  /// finished.
  void lostSupervisor(const std::string &node) {
    lostSupervisors_ += strCat(lostSupervisors_.empty() ? "" : ", ", node,
                               "'s supervisor disconnected");
  }
  /// After a failure, before the ranks are stopped: tells the others.
  void announce(const std::string &cause, bool local);
  /// After the ranks are stopped: the next attempt (agreed), -1 to give
  /// up, -2 when there is no coordinator to ask (decide alone).
  int agree();
  int coordListen_ = -1, coordFd_ = -1;
  std::string coordBuf_;
  std::vector<Peer> peers_;
  int attempt_ = 0;
  bool remoteStop_ = false; ///< this attempt was stopped for another node
  bool coordDone_ = false;  ///< node 0's ranks finished
  /// The supervisors that disconnected during this attempt before their
  /// ranks finished ("node 1's supervisor disconnected"): a node lost
  /// whole, the cause of the peers lost here when no other shows.
  std::string lostSupervisors_;

  SupervisorOptions o_; ///< a copy: rankArgs[0] changes when replanned
  bool elastic_ = false;
  SupervisedJob job_;
  std::string nodeTag_;
  bool hasCheckpoints_ = false;
  std::vector<RankProcess> ranks_;
  int pipeRead_ = -1;
  std::string pipeBuffer_;
  int64_t lastStep_ = 0;      ///< furthest step reported in this attempt
  Clock::time_point lastStepAt_; ///< when it was reported
  int64_t attemptStart_ = -1; ///< the step this attempt resumed from
  bool started_ = false;      ///< some rank reported "resume" this attempt
  Clock::time_point lastProgress_;
  std::vector<Failure> failures_;
  int64_t savedSteps_ = 0, checkpointsSaved_ = 0;
  Clock::time_point jobStart_;
};

bool Supervisor::start(int attempt) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    say(strCat("cannot create a pipe: ", std::strerror(errno)));
    return false;
  }
  pipeRead_ = fds[0];
  fcntl(pipeRead_, F_SETFL, O_NONBLOCK);
  const int port = job_.masterPort > 0 ? job_.masterPort : pickFreeTcpPort();
  ranks_.clear();
  lastStep_ = 0;
  attemptStart_ = -1;
  started_ = false;
  lastProgress_ = lastStepAt_ = Clock::now();
  std::vector<char *> argv;
  for (const std::string &a : o_.rankArgs)
    argv.push_back(const_cast<char *>(a.c_str()));
  argv.push_back(nullptr);
  bool ok = true;
  for (int local = 0; local < job_.ranksPerNode; ++local) {
    const int rank = job_.nodeRank * job_.ranksPerNode + local;
    std::vector<std::string> env = rankEnvironment({
        {"RANK", std::to_string(rank)},
        {"WORLD_SIZE", std::to_string(job_.worldSize)},
        {"LOCAL_RANK", std::to_string(local)},
        {"LOCAL_WORLD_SIZE", std::to_string(job_.ranksPerNode)},
        {"GROUP_RANK", std::to_string(job_.nodeRank)},
        {"MASTER_ADDR", job_.masterAddr},
        {"MASTER_PORT", std::to_string(port)},
        {"DTCC_SUPERVISOR_FD", std::to_string(fds[1])},
        {"DTCC_RESTART_COUNT", std::to_string(attempt)},
    });
    std::vector<char *> envp;
    for (std::string &e : env)
      envp.push_back(e.data());
    envp.push_back(nullptr);
    int err[2] = {-1, -1};
    if (pipe2(err, O_CLOEXEC) != 0)
      err[0] = err[1] = -1;
    pid_t pid = fork();
    if (pid == 0) {
      // The write end stays open across exec; the read end does not.
      fcntl(fds[1], F_SETFD, 0);
      if (err[1] >= 0)
        dup2(err[1], STDERR_FILENO);
      signal(SIGTERM, SIG_DFL);
      signal(SIGINT, SIG_DFL);
      execve(argv[0], argv.data(), envp.data());
      std::fprintf(stderr, "supervisor: cannot run '%s': %s\n", argv[0],
                   std::strerror(errno));
      _exit(127);
    }
    if (pid < 0) {
      say(strCat("cannot start rank ", rank, ": ", std::strerror(errno)));
      ok = false;
      break;
    }
    if (err[1] >= 0)
      ::close(err[1]);
    if (err[0] >= 0)
      fcntl(err[0], F_SETFL, O_NONBLOCK);
    RankProcess r;
    r.rank = rank;
    r.pid = pid;
    r.errFd = err[0];
    ranks_.push_back(std::move(r));
  }
  ::close(fds[1]);
  return ok;
}

void Supervisor::onProgress(int rank, const std::string &event, int64_t step) {
  (void)rank;
  lastProgress_ = Clock::now();
  if (event == "resume") {
    started_ = true;
    if (attemptStart_ < 0 || step < attemptStart_)
      attemptStart_ = step;
    if (lastStep_ < step)
      lastStep_ = step;
    if (!failures_.empty() && failures_.back().resumedFrom < 0)
      failures_.back().resumedFrom = step;
  } else if (event == "step") {
    if (step > lastStep_) {
      lastStep_ = step;
      lastStepAt_ = lastProgress_;
    }
    if (!failures_.empty() && !failures_.back().recovered &&
        step >= failures_.back().lastStep) {
      failures_.back().recovered = true;
      failures_.back().secondsLost = since(failures_.back().at);
    }
  } else if (event == "saved") {
    ++checkpointsSaved_;
    savedSteps_ = step;
  }
}

void Supervisor::readProgress() {
  char buf[4096];
  while (true) {
    ssize_t n = ::read(pipeRead_, buf, sizeof(buf));
    if (n <= 0)
      break;
    pipeBuffer_.append(buf, static_cast<size_t>(n));
  }
  size_t nl;
  while ((nl = pipeBuffer_.find('\n')) != std::string::npos) {
    std::string line = pipeBuffer_.substr(0, nl);
    pipeBuffer_.erase(0, nl + 1);
    int rank = 0;
    char event[32];
    long long step = 0;
    if (std::sscanf(line.c_str(), "%d %31s %lld", &rank, event, &step) == 3)
      onProgress(rank, event, step);
  }
}

void Supervisor::readErrors(RankProcess &r) {
  if (r.errFd < 0)
    return;
  char buf[4096];
  while (true) {
    ssize_t n = ::read(r.errFd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      if (n == 0) { // the rank and its children closed it
        ::close(r.errFd);
        r.errFd = -1;
      }
      break;
    }
    r.errBuffer.append(buf, static_cast<size_t>(n));
  }
  // Whole lines go on to this process's stderr as they come.
  size_t start = 0, nl;
  while ((nl = r.errBuffer.find('\n', start)) != std::string::npos) {
    std::string line = r.errBuffer.substr(start, nl - start);
    std::fwrite(r.errBuffer.data() + start, 1, nl - start + 1, stderr);
    if (line.find("error") != std::string::npos ||
        line.find("timed out") != std::string::npos)
      r.lastError = line;
    start = nl + 1;
  }
  r.errBuffer.erase(0, start);
  if (r.errFd < 0 && !r.errBuffer.empty()) {
    std::fputs((r.errBuffer + "\n").c_str(), stderr);
    r.errBuffer.clear();
  }
  std::fflush(stderr);
}

void Supervisor::send(int fd, const std::string &line) {
  if (fd < 0)
    return;
  std::string text = line + "\n";
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::send(fd, text.data() + done, text.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return; // a node gone: its EOF is seen when reading
    done += static_cast<size_t>(n);
  }
}

bool Supervisor::readLines(int fd, std::string &buf,
                           std::vector<std::string> &lines) {
  char chunk[4096];
  bool open = true;
  while (true) {
    ssize_t n = ::recv(fd, chunk, sizeof(chunk), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR)
      continue;
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
      open = false;
    if (n <= 0)
      break;
    buf.append(chunk, static_cast<size_t>(n));
  }
  size_t nl;
  while ((nl = buf.find('\n')) != std::string::npos) {
    lines.push_back(buf.substr(0, nl));
    buf.erase(0, nl + 1);
  }
  return open;
}

void Supervisor::setupCoordination() {
  if (job_.nnodes <= 1 || job_.masterPort <= 0 || job_.masterPort >= 65535)
    return;
  const int port = job_.masterPort + 1;
  if (job_.nodeRank == 0) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) != 0 ||
        ::listen(fd, 64) != 0) {
      say(strCat("warning: cannot listen on port ", port, " (MASTER_PORT+1) "
                 "for the other nodes' supervisors: ", std::strerror(errno),
                 "; restarts are not coordinated"));
      if (fd >= 0)
        ::close(fd);
      return;
    }
    coordListen_ = fd;
    say(strCat("coordinating the nodes' restarts on port ", port));
    return;
  }
  // The other nodes join node 0's supervisor, which may start later.
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (::getaddrinfo(job_.masterAddr.c_str(), std::to_string(port).c_str(),
                    &hints, &res) != 0 || !res) {
    say(strCat("warning: cannot resolve MASTER_ADDR '", job_.masterAddr,
               "': restarts are not coordinated"));
    return;
  }
  auto deadline = Clock::now() + std::chrono::seconds(60);
  int fd = -1;
  while (Clock::now() < deadline && !stopSignal) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0)
      break;
    if (fd >= 0)
      ::close(fd);
    fd = -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ::freeaddrinfo(res);
  if (fd < 0) {
    say(strCat("warning: node 0's supervisor did not answer at ",
               job_.masterAddr, ":", port, " within 60 s: restarts are not "
               "coordinated"));
    return;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  coordFd_ = fd;
  send(coordFd_, strCat("hello ", job_.nodeRank));
}

bool Supervisor::pollCoordination(std::string &cause) {
  std::vector<std::string> lines;
  if (coordListen_ >= 0) {
    while (true) {
      int fd = ::accept4(coordListen_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0)
        break;
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      Peer p;
      p.fd = fd;
      peers_.push_back(p);
    }
    bool failed = false;
    for (Peer &p : peers_) {
      if (p.fd < 0)
        continue;
      lines.clear();
      bool open = readLines(p.fd, p.buf, lines);
      for (const std::string &l : lines) {
        int a = -1;
        int consumed = 0;
        if (l.rfind("hello ", 0) == 0) {
          p.node = std::atoi(l.c_str() + 6);
        } else if (l == "done") {
          p.done = true;
        } else if (std::sscanf(l.c_str(), "fail %d %n", &a, &consumed) == 1 &&
                   a == attempt_ && !failed) {
          cause = strCat("node ", p.node, ": ", l.substr(consumed));
          failed = true;
        } else if (std::sscanf(l.c_str(), "stopped %d %n", &a, &consumed) == 1) {
          p.stopped = a;
          p.lastStep = std::atoll(l.c_str() + consumed);
        }
      }
      if (!open) {
        ::close(p.fd);
        p.fd = -1;
        if (!p.done) {
          say(strCat("warning: node ", p.node, "'s supervisor disconnected"));
          lostSupervisor(strCat("node ", p.node));
        }
      }
    }
    return failed;
  }
  if (coordFd_ >= 0) {
    bool open = readLines(coordFd_, coordBuf_, lines);
    for (const std::string &l : lines) {
      int a = -1, consumed = 0;
      if (l == "done")
        coordDone_ = true;
      if (std::sscanf(l.c_str(), "stop %d %n", &a, &consumed) == 1 &&
          a == attempt_) {
        cause = l.substr(consumed);
        if (!open) {
          ::close(coordFd_);
          coordFd_ = -1;
        }
        return true;
      }
    }
    if (!open) {
      ::close(coordFd_);
      coordFd_ = -1;
      if (!coordDone_) {
        say("warning: lost node 0's supervisor: restarts are no longer "
            "coordinated");
        lostSupervisor("node 0");
      }
    }
  }
  return false;
}

void Supervisor::announce(const std::string &cause, bool local) {
  if (coordListen_ >= 0) {
    std::string c = local ? strCat("node 0: ", cause) : cause;
    for (Peer &p : peers_)
      send(p.fd, strCat("stop ", attempt_, " ", c));
  } else if (coordFd_ >= 0 && local) {
    send(coordFd_, strCat("fail ", attempt_, " ", cause));
  }
}

int Supervisor::agree() {
  auto deadline = Clock::now() + std::chrono::seconds(30);
  if (coordListen_ >= 0) {
    // Every node's ranks down (a node answers within stopAll's 3 s).
    std::string others;
    while (Clock::now() < deadline && !stopSignal) {
      std::vector<pollfd> fds;
      for (Peer &p : peers_)
        if (p.fd >= 0)
          fds.push_back({p.fd, POLLIN, 0});
      bool all = true;
      for (Peer &p : peers_)
        if (p.fd >= 0 && p.stopped != attempt_)
          all = false;
      if (all)
        break;
      ::poll(fds.data(), fds.size(), 100);
      for (Peer &p : peers_) {
        if (p.fd < 0)
          continue;
        std::vector<std::string> lines;
        bool open = readLines(p.fd, p.buf, lines);
        for (const std::string &l : lines) {
          int a = -1, consumed = 0;
          if (std::sscanf(l.c_str(), "stopped %d %n", &a, &consumed) == 1) {
            p.stopped = a;
            p.lastStep = std::atoll(l.c_str() + consumed);
          } else if (std::sscanf(l.c_str(), "fail %d %n", &a, &consumed) == 1 &&
                     a == attempt_) {
            std::string c = strCat("node ", p.node, ": ", l.substr(consumed));
            if (failures_.back().cause.find(c) == std::string::npos)
              others += "; " + c;
          }
        }
        if (!open) {
          ::close(p.fd);
          p.fd = -1;
          say(strCat("warning: node ", p.node, "'s supervisor disconnected"));
        }
      }
    }
    Failure &f = failures_.back();
    f.cause += others;
    for (Peer &p : peers_)
      if (p.stopped == attempt_)
        f.lastStep = std::max(f.lastStep, p.lastStep);
    if (!others.empty())
      say(strCat("the other nodes reported", others.substr(1)));
    const bool giveUp = attempt_ >= o_.maxRestarts;
    for (Peer &p : peers_)
      send(p.fd, giveUp ? std::string("giveup")
                        : strCat("restart ", attempt_ + 1));
    return giveUp ? -1 : attempt_ + 1;
  }
  if (coordFd_ < 0)
    return -2;
  // Node 0 waits up to 30 s for every node: wait longer for its answer.
  deadline = Clock::now() + std::chrono::seconds(60);
  send(coordFd_, strCat("stopped ", attempt_, " ", lastStep_));
  while (Clock::now() < deadline && !stopSignal) {
    pollfd pfd{coordFd_, POLLIN, 0};
    ::poll(&pfd, 1, 100);
    std::vector<std::string> lines;
    bool open = readLines(coordFd_, coordBuf_, lines);
    for (const std::string &l : lines) {
      int a = -1;
      if (l == "giveup")
        return -1;
      if (std::sscanf(l.c_str(), "restart %d", &a) == 1 && a > attempt_)
        return a;
    }
    if (!open)
      break;
  }
  ::close(coordFd_);
  coordFd_ = -1;
  say("warning: node 0's supervisor did not say whether to restart: "
      "deciding alone, restarts are no longer coordinated");
  return -2;
}

bool Supervisor::watch(std::string &cause) {
  // A rank that lost a peer (exit kPeerLostExitCode) failed because another
  // did: the first such failure waits up to this long for its cause, a rank
  // here that failed of its own or another node's report, and stands as
  // the cause only when neither comes.
  constexpr double kConsequenceGraceSeconds = 2;
  std::string consequence;
  Clock::time_point consequenceAt;
  while (true) {
    std::vector<pollfd> fds{{pipeRead_, POLLIN, 0}};
    for (RankProcess &r : ranks_)
      if (r.errFd >= 0)
        fds.push_back({r.errFd, POLLIN, 0});
    if (coordListen_ >= 0)
      fds.push_back({coordListen_, POLLIN, 0});
    for (Peer &p : peers_)
      if (p.fd >= 0)
        fds.push_back({p.fd, POLLIN, 0});
    if (coordFd_ >= 0)
      fds.push_back({coordFd_, POLLIN, 0});
    ::poll(fds.data(), fds.size(), 100);
    readProgress();
    for (RankProcess &r : ranks_)
      readErrors(r);
    int running = 0;
    for (RankProcess &r : ranks_) {
      if (r.exited)
        continue;
      int status = 0;
      pid_t got = waitpid(r.pid, &status, WNOHANG);
      if (got != r.pid) {
        ++running;
        continue;
      }
      r.exited = true;
      r.status = status;
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        continue;
      readProgress();
      readErrors(r);
      std::string failure = strCat("rank ", r.rank, " ", describeExit(status));
      if (!r.lastError.empty())
        failure += ": " + r.lastError;
      if (WIFEXITED(status) &&
          WEXITSTATUS(status) == CommQueue::kPeerLostExitCode) {
        if (consequence.empty()) {
          consequence = failure;
          consequenceAt = Clock::now();
        }
        continue;
      }
      cause = consequence.empty() ? failure
                                  : strCat(failure, "; then ", consequence);
      return false;
    }
    if (running == 0 && consequence.empty())
      return true;
    // After this node's own ranks: a rank that died here is this node's
    // failure to report, even when another node's came first.
    if (coordinated() && pollCoordination(cause)) {
      remoteStop_ = true;
      if (!consequence.empty())
        cause += strCat("; then node ", job_.nodeRank, "'s ", consequence);
      return false;
    }
    if (stopSignal) {
      cause = strCat("the supervisor got signal ", int(stopSignal));
      return false;
    }
    if (!consequence.empty()) {
      if (since(consequenceAt) > kConsequenceGraceSeconds) {
        // A whole node lost (its supervisor too) reports nothing: its
        // disconnection is the cause there is.
        cause = lostSupervisors_.empty()
                    ? consequence
                    : strCat(lostSupervisors_,
                             " before its ranks finished (its node or the "
                             "supervisor died); then ",
                             consequence);
        return false;
      }
      continue; // the ranks waiting for the lost one are not hung
    }
    // From the first report on: before it the ranks are loading and
    // meeting, which the collective timeout bounds.
    if (o_.hangSeconds > 0 && started_ && since(lastProgress_) > o_.hangSeconds) {
      cause = strCat("no rank made progress for ", o_.hangSeconds,
                     " s (--hang-timeout): hung");
      return false;
    }
  }
}

std::string Supervisor::signalledRanks() const {
  std::string out;
  for (const RankProcess &r : ranks_) {
    if (!r.exited || !WIFSIGNALED(r.status))
      continue;
    int sig = WTERMSIG(r.status);
    if ((r.terminated && sig == SIGTERM) || (r.killed && sig == SIGKILL))
      continue;
    out += strCat(out.empty() ? "" : "; ", "rank ", r.rank, " ",
                  describeExit(r.status));
  }
  return out;
}

void Supervisor::stopAll() {
  // SIGCONT too: a stopped rank (the hang it caused) must see the SIGTERM.
  for (RankProcess &r : ranks_)
    if (!r.exited) {
      ::kill(r.pid, SIGTERM);
      ::kill(r.pid, SIGCONT);
      r.terminated = true;
    }
  auto deadline = Clock::now() + std::chrono::seconds(3);
  while (true) {
    bool all = true;
    for (RankProcess &r : ranks_) {
      if (r.exited)
        continue;
      if (waitpid(r.pid, &r.status, WNOHANG) == r.pid)
        r.exited = true;
      else
        all = false;
    }
    if (all)
      break;
    if (Clock::now() > deadline) {
      for (RankProcess &r : ranks_)
        if (!r.exited) {
          ::kill(r.pid, SIGKILL);
          r.killed = true;
          waitpid(r.pid, &r.status, 0);
          r.exited = true;
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  readProgress();
  for (RankProcess &r : ranks_) {
    readErrors(r);
    if (r.errFd >= 0)
      ::close(r.errFd);
    r.errFd = -1;
  }
  if (pipeRead_ >= 0)
    ::close(pipeRead_);
  pipeRead_ = -1;
  pipeBuffer_.clear();
}

void Supervisor::report(const char *outcome, int restarts) {
  int64_t steps = 0;
  double seconds = 0;
  for (const Failure &f : failures_) {
    if (f.resumedFrom >= 0)
      steps += std::max<int64_t>(0, f.lastStep - f.resumedFrom);
    if (f.secondsLost >= 0)
      seconds += f.secondsLost;
  }
  std::string text = strCat("job ", outcome, " after ", restarts, " restart",
                            restarts == 1 ? "" : "s", " (at most ",
                            o_.maxRestarts, ") in ");
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.1f s", since(jobStart_));
  text += buf;
  std::snprintf(buf, sizeof(buf), "%.1f s", seconds);
  text += strCat("; ", steps, " step", steps == 1 ? "" : "s", " and ", buf,
                 " lost to failures");
  say(text);
  for (size_t i = 0; i < failures_.size(); ++i) {
    const Failure &f = failures_[i];
    std::string line = strCat("  failure ", i + 1, " (attempt ", f.attempt + 1,
                              "): ", f.cause, " at step ", f.lastStep);
    if (f.restartRanks > 0 && f.restartRanks != f.ranks)
      line += strCat("; restarted on ", f.restartRanks, " ranks (was ",
                     f.ranks, ")");
    if (f.resumedFrom >= 0)
      line += strCat("; restarted from step ", f.resumedFrom, ", ",
                     f.lastStep - f.resumedFrom, " steps lost");
    if (f.secondsLost >= 0) {
      std::snprintf(buf, sizeof(buf), "%.1f s", f.secondsLost);
      line += strCat(", ", buf, " until the job was back at step ", f.lastStep);
    }
    say(line);
  }
  if (o_.report.empty())
    return;
  std::string json = strCat("{\n  \"outcome\": ", jsonString(outcome),
                            ",\n  \"restarts\": ", restarts,
                            ",\n  \"max_restarts\": ", o_.maxRestarts,
                            ",\n  \"world_size\": ", job_.worldSize,
                            ",\n  \"executable\": ", jsonString(o_.rankArgs[0]),
                            ",\n  \"node_rank\": ", job_.nodeRank,
                            ",\n  \"steps_lost\": ", steps);
  std::snprintf(buf, sizeof(buf), "%.3f", seconds);
  json += strCat(",\n  \"seconds_lost\": ", buf);
  std::snprintf(buf, sizeof(buf), "%.3f", since(jobStart_));
  json += strCat(",\n  \"seconds\": ", buf,
                 ",\n  \"checkpoints_saved\": ", checkpointsSaved_,
                 ",\n  \"failures\": [");
  for (size_t i = 0; i < failures_.size(); ++i) {
    const Failure &f = failures_[i];
    std::snprintf(buf, sizeof(buf), "%.3f", f.secondsLost);
    json += strCat(i ? "," : "", "\n    {\"attempt\": ", f.attempt + 1,
                   ", \"cause\": ", jsonString(f.cause),
                   ", \"ranks\": ", f.ranks,
                   ", \"restart_ranks\": ", f.restartRanks,
                   ", \"last_step\": ", f.lastStep,
                   ", \"resumed_from\": ", f.resumedFrom,
                   ", \"steps_lost\": ",
                   f.resumedFrom >= 0 ? f.lastStep - f.resumedFrom : -1,
                   ", \"seconds_lost\": ", buf, "}");
  }
  json += "\n  ]\n}\n";
  if (std::FILE *f = std::fopen(o_.report.c_str(), "w")) {
    std::fputs(json.c_str(), f);
    std::fclose(f);
  } else {
    say(strCat("cannot write --supervisor-report '", o_.report,
               "': ", std::strerror(errno)));
  }
}

bool Supervisor::resize() {
  StatusOr<int> available = o_.availableRanks();
  if (!available.isOk()) {
    say(strCat("warning: cannot tell the ranks available (",
               available.status().message(), "); keeping ", job_.worldSize));
    return true;
  }
  int want = available.value();
  if (o_.maxRanks > 0)
    want = std::min(want, o_.maxRanks);
  if (want < std::max(1, o_.minRanks)) {
    say(strCat("giving up: ", available.value(), " rank",
               available.value() == 1 ? "" : "s", " available, fewer than "
               "--min-ranks ", std::max(1, o_.minRanks)));
    return false;
  }
  if (want == job_.worldSize)
    return true;
  say(strCat(available.value(), " ranks available (the job ran on ",
             job_.worldSize, "): replanning for ", want));
  // The most ranks, up to `want`, that some plan fits.
  for (int n = want; n >= std::max(1, o_.minRanks); --n) {
    StatusOr<std::string> exe =
        n == job_.worldSize ? o_.rankArgs[0] : o_.replan(n);
    if (exe.isOk()) {
      o_.rankArgs[0] = exe.value();
      job_.worldSize = job_.ranksPerNode = n;
      return true;
    }
    say(exe.status().message());
  }
  say(strCat("giving up: no plan fits between ", std::max(1, o_.minRanks),
             " (--min-ranks) and ", want, " ranks"));
  return false;
}

int Supervisor::run() {
  jobStart_ = Clock::now();
  if (job_.nnodes > 1)
    nodeTag_ = strCat(" (node ", job_.nodeRank, ")");
  struct sigaction sa {};
  sa.sa_handler = onStopSignal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  say(strCat("starting ", job_.ranksPerNode, " rank",
             job_.ranksPerNode == 1 ? "" : "s", " (ranks ",
             job_.nodeRank * job_.ranksPerNode, "-",
             (job_.nodeRank + 1) * job_.ranksPerNode - 1, " of ",
             job_.worldSize, job_.nnodes > 1 ? strCat(", node ", job_.nodeRank,
                                                      " of ", job_.nnodes, ", ",
                                                      job_.launcher)
                                            : std::string(),
             "); up to ", o_.maxRestarts, " restarts"));
  if (elastic_)
    say(strCat("elastic: restarts run on the ranks available, between ",
               std::max(1, o_.minRanks), " and ",
               o_.maxRanks > 0 ? std::to_string(o_.maxRanks) : "any",
               ", replanned for each new count"));
  else if ((o_.minRanks > 0 && o_.minRanks < job_.worldSize) ||
           o_.maxRanks > job_.worldSize)
    say(strCat("note: restarts keep the job at ", job_.worldSize,
               " ranks: a program runs on the rank count it was compiled for, "
               "and re-planning for another count needs the compiler (dtcc "
               "compile), which a compiled program does not contain"));
  if (!hasCheckpoints_)
    say("warning: no --checkpoint-dir: a restarted job starts again from "
        "step 0");
  setupCoordination();
  double backoff = o_.backoffSeconds;
  for (int attempt = 0;; ++attempt) {
    std::string cause;
    attempt_ = attempt;
    remoteStop_ = false;
    lostSupervisors_.clear();
    bool finished = start(attempt) && watch(cause);
    if (finished) {
      stopAll();
      send(coordFd_, "done");
      for (Peer &p : peers_)
        send(p.fd, "done");
      report("finished", attempt);
      return 0;
    }
    if (cause.empty())
      cause = "a rank could not be started";
    Failure f;
    f.attempt = attempt;
    f.cause = cause;
    f.lastStep = lastStep_;
    f.at = lastStepAt_;
    f.ranks = f.restartRanks = job_.worldSize;
    const bool everStarted = started_;
    if (remoteStop_)
      say(strCat("stopping this node's ranks for a failure elsewhere: ", cause,
                 " (attempt ", attempt + 1, ")"));
    else
      say(strCat(cause, " (attempt ", attempt + 1, ", furthest step ",
                 lastStep_, "); stopping the other ranks"));
    if (!stopSignal)
      announce(cause, !remoteStop_);
    stopAll();
    if (remoteStop_) {
      // A rank here that died of a signal the supervisor did not send was
      // a failure of its own, usually the first: a killed rank's peers on
      // other nodes see its connections close, and their report can reach
      // node 0 (and its stop this node) before this node reaps the rank.
      std::string own = signalledRanks();
      if (!own.empty()) {
        say(strCat("this node's ", own));
        f.cause = strCat(own, "; ", cause);
        if (coordFd_ >= 0)
          send(coordFd_, strCat("fail ", attempt_, " ", own));
      }
    }
    failures_.push_back(f);
    if (stopSignal) {
      report("stopped", attempt);
      return 128 + int(stopSignal);
    }
    const bool coordinator = coordListen_ >= 0;
    int agreed = coordinated() ? agree() : -2;
    if (agreed == -1 && !coordinator) {
      say("giving up: node 0's supervisor ended the job (--max-restarts)");
      report("failed", attempt);
      return 1;
    }
    // On one node a job that never started training is misconfigured; on
    // several, a node may just have come up late (the rendezvous timed out).
    if (attempt == 0 && !everStarted && job_.nnodes == 1) {
      say("the job failed before any rank started training (a configuration "
          "error, see the ranks' messages above): not restarting");
      report("failed", attempt);
      return 1;
    }
    if (agreed < 0 && attempt >= o_.maxRestarts) {
      say(strCat("giving up: ", o_.maxRestarts, " restart",
                 o_.maxRestarts == 1 ? "" : "s", " used (--max-restarts)"));
      report("failed", attempt);
      return 1;
    }
    if (elastic_) {
      if (!resize()) {
        report("failed", attempt);
        return 1;
      }
      failures_.back().restartRanks = job_.worldSize;
    }
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f s", backoff);
    say(strCat("restarting the job on ", job_.worldSize, " rank",
               job_.worldSize == 1 ? "" : "s", " in ", buf, " (restart ",
               attempt + 1, " of at most ", o_.maxRestarts, ")"));
    auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(backoff));
    while (Clock::now() < until && !stopSignal)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (stopSignal) {
      report("stopped", attempt);
      return 128 + int(stopSignal);
    }
    backoff = std::min(o_.maxBackoffSeconds, std::max(backoff * 2, 0.1));
    if (agreed > attempt + 1)
      attempt = agreed - 1; // node 0's count (a node that joined late)
  }
}

} // namespace

int runSupervisor(const SupervisorOptions &options, int programRanks) {
  auto job = supervisedJob(options, programRanks);
  if (!job.isOk()) {
    std::fprintf(stderr, "error: --supervise: %s\n",
                 job.status().message().c_str());
    return 1;
  }
  Supervisor s(options, job.value());
  return s.run();
}

} // namespace dtcc::runtime
