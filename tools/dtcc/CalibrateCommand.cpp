//===- CalibrateCommand.cpp - `dtcc calibrate`: run dtcc-calibrate --------===//
//
// The measuring is done by dtcc-calibrate (tools/dtcc-calibrate), which links
// OpenBLAS and MPI, or with --device cuda by dtcc-calibrate-cuda, which links
// the CUDA backend, cuBLASLt and NCCL; the compiler links none of them.
// `dtcc calibrate ARGS` execs the tool in place, so under mpirun every rank
// becomes a calibrate process with the launcher's environment and the same
// pid.
//
// The device is chosen, never detected: a cluster file describes one
// backend's device, the CPU backend runs on machines that have GPUs too, and
// what `dtcc calibrate -o cluster.json` measures must not change with the
// hardware it happens to find.
//
//===----------------------------------------------------------------------===//

#include "tools/dtcc/Commands.h"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace dtcc {

llvm::cl::SubCommand calibrateCommand(
    "calibrate",
    "Measure this machine for the planner and write a cluster file: dtcc "
    "calibrate [--device cpu|cuda] [-o cluster.json] ... (dtcc calibrate "
    "--help lists the measuring tool's options)");

namespace {

int calibrateError(const std::string &message) {
  std::fprintf(stderr, "dtcc calibrate: error: %s\n", message.c_str());
  return 1;
}

} // namespace

int runCalibrateCommand(int argc, char **argv) {
  std::string device = "cpu";
  std::vector<char *> rest;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--device") {
      if (i + 1 >= argc)
        return calibrateError("--device: expected cpu or cuda");
      device = argv[++i];
    } else if (arg.rfind("--device=", 0) == 0) {
      device = arg.substr(9);
    } else {
      rest.push_back(argv[i]);
    }
  }
  if (device != "cpu" && device != "cuda")
    return calibrateError("--device: expected cpu or cuda, got '" + device +
                          "'");
  const bool cuda = device == "cuda";
  const char *toolName = cuda ? "dtcc-calibrate-cuda" : "dtcc-calibrate";
  const char *override =
      std::getenv(cuda ? "DTCC_CALIBRATE_CUDA" : "DTCC_CALIBRATE");
  std::string tool;
  if (override) {
    tool = override;
  } else {
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
      return calibrateError(std::string("cannot find the dtcc executable "
                                        "(set ") +
                            (cuda ? "DTCC_CALIBRATE_CUDA" : "DTCC_CALIBRATE") +
                            ")");
    self[n] = '\0';
    tool = self;
    tool = tool.substr(0, tool.find_last_of('/') + 1) + toolName;
    if (cuda && access(tool.c_str(), X_OK) != 0)
      return calibrateError(
          "--device cuda: " + tool +
          " is missing: this dtcc was built without the CUDA backend (no CUDA "
          "toolkit with cuBLASLt and NCCL when it was built); rebuild dtcc "
          "where the toolkit is installed, or set DTCC_CALIBRATE_CUDA");
  }
  std::vector<char *> args;
  args.push_back(const_cast<char *>(tool.c_str()));
  args.insert(args.end(), rest.begin(), rest.end());
  args.push_back(nullptr);
  execv(tool.c_str(), args.data());
  return calibrateError(
      std::string("cannot run '") + tool + "': " + std::strerror(errno) +
      " (build the " + toolName + " target, or set " +
      (cuda ? "DTCC_CALIBRATE_CUDA" : "DTCC_CALIBRATE") + ")");
}

} // namespace dtcc
