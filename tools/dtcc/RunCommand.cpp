//===- RunCommand.cpp - `dtcc run`: a supervised training job -------------===//
//
// Two forms (docs/operations.md, docs/cli.md):
//
// `dtcc run ./train [flags]` is `./train --supervise [flags]`: the compiled
// executable's supervisor (runtime/exec/Supervisor.h) starts its ranks,
// watches them and restarts the job from the newest complete checkpoint
// after a failure, always on the compiled rank count. dtcc execs the
// executable in place, so under srun or mpirun each node's agent is that
// process, with the launcher's environment.
//
// `dtcc run [--supervise] --min-ranks A --max-ranks B [--ranks-available
// FILE] [--work-dir DIR] MODEL [compile flags] -- [supervisor and training
// flags]` is an elastic job: dtcc compiles MODEL for the ranks available,
// supervises the executable in this process, and when a restart finds a
// different number of ranks available it compiles the plan again for that
// count (the given --mesh with dp rescaled, or --plan auto searched again;
// the model's global batch stays) and resumes from the newest checkpoint,
// which is plan-independent.
//
//===----------------------------------------------------------------------===//

#include "tools/dtcc/Commands.h"

#include "runtime/base/FlagArg.h"
#include "runtime/exec/Supervisor.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <algorithm>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace dtcc {

using runtime::invalidArgument;
using runtime::Status;
using runtime::StatusOr;
using runtime::strCat;

llvm::cl::SubCommand runCommand(
    "run",
    "Run a training job under a supervisor that restarts it from the newest "
    "checkpoint after a failure: dtcc run ./train [flags], or elastic, "
    "compiling for the ranks available: dtcc run --min-ranks A --max-ranks "
    "B [--ranks-available FILE] model.onnx [compile flags] -- [flags] "
    "(dtcc run --help; docs/operations.md)");

namespace {

void usage() {
  std::fprintf(
      stderr,
      "usage: dtcc run EXECUTABLE [supervisor and training flags]\n"
      "  runs EXECUTABLE --supervise [flags]: its ranks started, watched and\n"
      "  restarted from the newest complete checkpoint after a failure, on\n"
      "  the rank count it was compiled for; EXECUTABLE --help lists the "
      "flags\n"
      "\n"
      "usage: dtcc run [--supervise] --min-ranks A --max-ranks B\n"
      "                [--ranks-available FILE] [--work-dir DIR]\n"
      "                MODEL [dtcc compile flags] -- [supervisor and training "
      "flags]\n"
      "  an elastic job on one node: compiles MODEL (dtcc compile with the\n"
      "  given flags, which must include --mesh with a dp axis or --plan "
      "auto)\n"
      "  for the ranks available, supervises it, and when a restart finds\n"
      "  another number of ranks available compiles the plan again for it\n"
      "  (--mesh: dp rescaled, the other axes kept; --plan auto: searched\n"
      "  again with --ranks N) and resumes from the newest checkpoint of\n"
      "  --checkpoint-dir. The model's batch, the global batch, stays. When\n"
      "  no plan fits N ranks (the mesh's other axes or the batch do not\n"
      "  divide), the most ranks below N that one fits are used, down to A.\n"
      "  --min-ranks A          give up when fewer than A ranks are "
      "available\n"
      "  --max-ranks B          use at most B ranks\n"
      "  --ranks-available FILE the ranks available now: the first integer "
      "in\n"
      "                         FILE, read at the start and before each "
      "restart\n"
      "                         (without it: B)\n"
      "  --work-dir DIR         where the executables go (train-r<N>; default "
      "a\n"
      "                         new directory under $TMPDIR or /tmp)\n"
      "  after --: the supervisor's flags (--max-restarts, --restart-backoff,\n"
      "  --hang-timeout, --supervisor-report) and the training flags\n"
      "  (--data, --steps, --checkpoint-dir, --save-every, ...)\n");
}

/// The path of this dtcc executable, to run `dtcc compile`.
std::string selfPath() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0)
    return "dtcc";
  buf[n] = '\0';
  return buf;
}

/// The elastic job's compiler: one executable per rank count.
class Replanner {
public:
  Replanner(std::vector<std::string> compileArgs, std::string workDir)
      : args_(std::move(compileArgs)), workDir_(std::move(workDir)) {}

  /// Checks that the compile flags say how to plan for other counts.
  Status validate() {
    for (size_t i = 0; i < args_.size(); ++i) {
      const std::string &a = args_[i];
      auto valueAt = [&](const char *flag) -> std::string {
        std::string prefix = std::string(flag) + "=";
        if (a.rfind(prefix, 0) == 0)
          return a.substr(prefix.size());
        return i + 1 < args_.size() ? args_[i + 1] : "";
      };
      if (a == "--mesh" || a.rfind("--mesh=", 0) == 0 || a == "-mesh")
        mesh_ = valueAt("--mesh");
      else if (a == "--plan" || a.rfind("--plan=", 0) == 0)
        autoPlan_ = valueAt("--plan") == "auto";
      else if (a == "--plan-in" || a.rfind("--plan-in=", 0) == 0)
        return invalidArgument(
            "--plan-in: a saved plan is for one rank count; give --mesh "
            "(dp is rescaled) or --plan auto (searched again) so that the "
            "job can be replanned for the ranks available");
      else if (a == "-o" || a.rfind("-o=", 0) == 0)
        return invalidArgument(
            "-o: dtcc run names the executables (--work-dir)");
    }
    if (mesh_.empty() && !autoPlan_)
      return invalidArgument(
          "an elastic job needs --mesh with a dp axis (rescaled to the ranks "
          "available) or --plan auto (searched again for them) among the "
          "compile flags");
    if (!mesh_.empty() && autoPlan_)
      return invalidArgument("give --mesh or --plan auto, not both");
    return Status();
  }

  /// The compile flags for `ranks`, or why none fit.
  StatusOr<std::vector<std::string>> flagsFor(int ranks) const {
    std::vector<std::string> out;
    for (size_t i = 0; i < args_.size(); ++i) {
      const std::string &a = args_[i];
      bool withValue = a == "--mesh" || a == "-mesh" || a == "--ranks" ||
                       a == "-ranks";
      bool joined = a.rfind("--mesh=", 0) == 0 || a.rfind("--ranks=", 0) == 0;
      if (withValue) {
        ++i;
        continue;
      }
      if (joined)
        continue;
      out.push_back(a);
    }
    if (autoPlan_) {
      out.push_back("--ranks");
      out.push_back(std::to_string(ranks));
      return out;
    }
    // The mesh with dp rescaled; the other axes as given.
    std::vector<std::pair<std::string, long>> axes;
    std::stringstream ss(mesh_);
    std::string item;
    long others = 1;
    bool hasDp = false;
    while (std::getline(ss, item, ',')) {
      size_t eq = item.find('=');
      char *end = nullptr;
      long size = eq == std::string::npos
                      ? 0
                      : std::strtol(item.c_str() + eq + 1, &end, 10);
      if (eq == std::string::npos || size < 1 || *end != '\0')
        return invalidArgument("--mesh '", mesh_, "': expected axis=size,...");
      std::string axis = item.substr(0, eq);
      if (axis == "dp")
        hasDp = true;
      else
        others *= size;
      axes.push_back({axis, size});
    }
    std::string rest;
    for (const auto &[axis, size] : axes)
      if (axis != "dp")
        rest += strCat(rest.empty() ? "" : ",", axis, "=", size);
    if (!hasDp && others != ranks)
      return invalidArgument("no plan for ", ranks, " ranks: the mesh '", mesh_,
                             "' has no dp axis to rescale (it needs ", others,
                             " ranks)");
    if (ranks % others != 0)
      return invalidArgument("no plan for ", ranks, " ranks: the mesh's "
                             "axes other than dp (", rest, ") take ", others,
                             " ranks per data-parallel replica, which does "
                             "not divide ", ranks);
    const long dp = ranks / others;
    std::string mesh;
    for (const auto &[axis, size] : axes) {
      if (axis == "dp" && dp == 1)
        continue; // one replica: no dp axis
      mesh += strCat(mesh.empty() ? "" : ",", axis, "=",
                     axis == "dp" ? dp : size);
    }
    if (!mesh.empty()) {
      out.push_back("--mesh");
      out.push_back(mesh);
    }
    return out;
  }

  /// The executable for `ranks` (compiled once per count).
  StatusOr<std::string> executableFor(int ranks) {
    auto it = built_.find(ranks);
    if (it != built_.end())
      return it->second;
    DTCC_ASSIGN_OR_RETURN(std::vector<std::string> flags, flagsFor(ranks));
    const std::string exe = strCat(workDir_, "/train-r", ranks);
    const std::string log = exe + ".compile.log";
    std::vector<std::string> argv{selfPath(), "compile"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.push_back("-o");
    argv.push_back(exe);
    std::string shown;
    for (size_t i = 1; i < argv.size(); ++i)
      shown += (i > 1 ? " " : "") + argv[i];
    std::fprintf(stderr, "dtcc run: compiling for %d rank%s: dtcc %s\n", ranks,
                 ranks == 1 ? "" : "s", shown.c_str());
    std::fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                      0644);
      if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
      }
      std::vector<char *> cargv;
      for (std::string &a : argv)
        cargv.push_back(a.data());
      cargv.push_back(nullptr);
      execv(cargv[0], cargv.data());
      std::fprintf(stderr, "error: cannot run '%s': %s\n", cargv[0],
                   std::strerror(errno));
      _exit(127);
    }
    if (pid < 0)
      return invalidArgument("cannot start dtcc compile: ",
                             std::strerror(errno));
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      // The compiler's error line, else its last line.
      std::ifstream in(log);
      std::string line, error, last;
      while (std::getline(in, line)) {
        if (line.empty())
          continue;
        last = line;
        if (error.empty() && line.find("error") != std::string::npos)
          error = line;
      }
      return invalidArgument("no plan for ", ranks, " ranks: dtcc compile ",
                             runtime::describeExit(status), ": ",
                             error.empty() ? last : error, " (", log, ")");
    }
    built_[ranks] = exe;
    return exe;
  }

private:
  std::vector<std::string> args_;
  std::string workDir_;
  std::string mesh_;
  bool autoPlan_ = false;
  std::map<int, std::string> built_;
};

/// The ranks available: the first integer of `file`.
StatusOr<int> readAvailable(const std::string &file) {
  std::ifstream in(file);
  if (!in)
    return invalidArgument("cannot read --ranks-available '", file, "': ",
                           std::strerror(errno));
  long n = -1;
  if (!(in >> n) || n < 0 || n > INT_MAX)
    return invalidArgument("--ranks-available '", file,
                           "' does not start with a rank count");
  return static_cast<int>(n);
}

int parseCount(const std::string &flag, const std::string &v, int &out) {
  char *end = nullptr;
  long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < 1 || n > INT_MAX) {
    std::fprintf(stderr, "dtcc run: error: %s expects an integer >= 1, got "
                         "'%s'\n", flag.c_str(), v.c_str());
    return 1;
  }
  out = static_cast<int>(n);
  return 0;
}

int runElastic(int argc, char **argv, int dashes) {
  int minRanks = 0, maxRanks = 0;
  std::string availableFile, workDir;
  std::vector<std::string> compileArgs;
  for (int i = 1; i < dashes; ++i) {
    runtime::FlagArg flag(dashes, argv, i);
    auto value = [&](const char *name) -> std::string {
      auto v = flag.value(name);
      return v.isOk() ? v.value() : std::string();
    };
    if (flag.arg == "--supervise")
      continue;
    if (flag.is("--min-ranks")) {
      if (parseCount("--min-ranks", value("--min-ranks"), minRanks))
        return 1;
    } else if (flag.is("--max-ranks")) {
      if (parseCount("--max-ranks", value("--max-ranks"), maxRanks))
        return 1;
    } else if (flag.is("--ranks-available")) {
      availableFile = value("--ranks-available");
    } else if (flag.is("--work-dir")) {
      workDir = value("--work-dir");
    } else {
      compileArgs.push_back(flag.arg);
    }
  }
  // After --: the supervisor's flags and the ranks' (training) flags.
  std::vector<char *> rest{argv[0]};
  for (int i = dashes + 1; i < argc; ++i)
    rest.push_back(argv[i]);
  auto parsed = runtime::parseSupervisorFlags(static_cast<int>(rest.size()),
                                              rest.data(), "(replanned)");
  if (!parsed.isOk()) {
    std::fprintf(stderr, "dtcc run: error: %s\n",
                 parsed.status().message().c_str());
    return 1;
  }
  runtime::SupervisorOptions options = parsed.value();
  if (options.ranks > 0) {
    std::fprintf(stderr, "dtcc run: error: --ranks: an elastic job runs on "
                         "the ranks available (--ranks-available, "
                         "--min-ranks, --max-ranks)\n");
    return 1;
  }
  if (minRanks == 0)
    minRanks = options.minRanks;
  if (maxRanks == 0)
    maxRanks = options.maxRanks;
  options.minRanks = minRanks;
  options.maxRanks = maxRanks;
  if (maxRanks == 0 && availableFile.empty()) {
    std::fprintf(stderr, "dtcc run: error: an elastic job needs --max-ranks "
                         "or --ranks-available FILE\n");
    return 1;
  }
  if (minRanks > 0 && maxRanks > 0 && minRanks > maxRanks) {
    std::fprintf(stderr, "dtcc run: error: --min-ranks %d is above "
                         "--max-ranks %d\n", minRanks, maxRanks);
    return 1;
  }
  if (compileArgs.empty() || compileArgs[0].empty() ||
      compileArgs[0][0] == '-') {
    std::fprintf(stderr, "dtcc run: error: expected the model (.onnx, "
                         ".onnxtext or .mlir) before the compile flags\n");
    usage();
    return 1;
  }
  if (workDir.empty()) {
    const char *tmp = std::getenv("TMPDIR");
    std::string tmpl = strCat(tmp && *tmp ? tmp : "/tmp", "/dtcc-run.XXXXXX");
    if (!mkdtemp(tmpl.data())) {
      std::fprintf(stderr, "dtcc run: error: cannot make a work directory "
                           "'%s': %s\n", tmpl.c_str(), std::strerror(errno));
      return 1;
    }
    workDir = tmpl;
  }
  auto replanner = std::make_shared<Replanner>(compileArgs, workDir);
  if (Status s = replanner->validate(); !s.isOk()) {
    std::fprintf(stderr, "dtcc run: error: %s\n", s.message().c_str());
    return 1;
  }
  auto available = [availableFile, maxRanks]() -> StatusOr<int> {
    if (availableFile.empty())
      return maxRanks;
    return readAvailable(availableFile);
  };
  StatusOr<int> now = available();
  if (!now.isOk()) {
    std::fprintf(stderr, "dtcc run: error: %s\n",
                 now.status().message().c_str());
    return 1;
  }
  int ranks = maxRanks > 0 ? std::min(now.value(), maxRanks) : now.value();
  if (ranks < std::max(1, minRanks)) {
    std::fprintf(stderr, "dtcc run: error: %d rank%s available, fewer than "
                         "--min-ranks %d\n", now.value(),
                 now.value() == 1 ? "" : "s", std::max(1, minRanks));
    return 1;
  }
  // One node: the supervisors of several would have to agree on the count.
  {
    auto job = runtime::supervisedJob(options, ranks);
    if (job.isOk() && job.value().nnodes > 1) {
      std::fprintf(stderr,
                   "dtcc run: error: an elastic job runs on one node (this "
                   "is node %d of %d, %s): the node supervisors do not yet "
                   "agree on a new node set; run the compiled executable "
                   "with --supervise on every node instead "
                   "(docs/operations.md)\n",
                   job.value().nodeRank, job.value().nnodes,
                   job.value().launcher.c_str());
      return 1;
    }
  }
  std::fprintf(stderr, "dtcc run: elastic job, %d to %s ranks, %d available "
                       "now%s; executables in %s\n",
               std::max(1, minRanks),
               maxRanks > 0 ? std::to_string(maxRanks).c_str() : "any",
               now.value(),
               availableFile.empty()
                   ? " (--max-ranks)"
                   : strCat(" (", availableFile, ")").c_str(),
               workDir.c_str());
  // The most ranks available that some plan fits.
  StatusOr<std::string> exe = replanner->executableFor(ranks);
  while (!exe.isOk() && ranks > std::max(1, minRanks)) {
    std::fprintf(stderr, "dtcc run: %s; trying %d\n",
                 exe.status().message().c_str(), ranks - 1);
    exe = replanner->executableFor(--ranks);
  }
  if (!exe.isOk()) {
    std::fprintf(stderr, "dtcc run: error: %s\n",
                 exe.status().message().c_str());
    return 1;
  }
  options.rankArgs[0] = exe.value();
  options.availableRanks = available;
  options.replan = [replanner](int n) { return replanner->executableFor(n); };
  return runtime::runSupervisor(options, ranks);
}

} // namespace

int runRunCommand(int argc, char **argv) {
  if (argc < 2) {
    usage();
    return 1;
  }
  std::string first = argv[1];
  if (first == "--help" || first == "-help" || first == "-h") {
    usage();
    return 0;
  }
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--") == 0)
      return runElastic(argc, argv, i);
  if (!first.empty() && first[0] == '-') {
    std::fprintf(stderr,
                 "dtcc run: error: expected the executable first, got '%s' "
                 "(an elastic job separates the compile flags from the "
                 "training flags with --)\n",
                 first.c_str());
    usage();
    return 1;
  }
  std::vector<char *> args;
  args.push_back(argv[1]);
  std::string supervise = "--supervise";
  args.push_back(supervise.data());
  for (int i = 2; i < argc; ++i)
    args.push_back(argv[i]);
  args.push_back(nullptr);
  execv(argv[1], args.data());
  std::fprintf(stderr, "dtcc run: error: cannot run '%s': %s\n", argv[1],
               std::strerror(errno));
  return 1;
}

} // namespace dtcc
