//===- CalibrateCommand.cpp - `dtcc calibrate`: run dtcc-calibrate --------===//
//
// The measuring is done by dtcc-calibrate (tools/dtcc-calibrate), which links
// OpenBLAS and MPI; the compiler links neither. `dtcc calibrate ARGS` execs
// it in place, so under mpirun every rank becomes a dtcc-calibrate process
// with the launcher's environment and the same pid.
//
//===----------------------------------------------------------------------===//

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace dtcc {

/// `dtcc calibrate ARGS...` (argv[0] is "calibrate"); called by dtcc.cpp's
/// main. Returns only on failure.
int runCalibrateCommand(int argc, char **argv) {
  std::string tool;
  if (const char *env = std::getenv("DTCC_CALIBRATE")) {
    tool = env;
  } else {
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) {
      std::fprintf(stderr, "dtcc calibrate: error: cannot find the dtcc "
                           "executable (set DTCC_CALIBRATE)\n");
      return 1;
    }
    self[n] = '\0';
    tool = self;
    tool = tool.substr(0, tool.find_last_of('/') + 1) + "dtcc-calibrate";
  }
  std::vector<char *> args;
  args.push_back(const_cast<char *>(tool.c_str()));
  for (int i = 1; i < argc; ++i)
    args.push_back(argv[i]);
  args.push_back(nullptr);
  execv(tool.c_str(), args.data());
  std::fprintf(stderr,
               "dtcc calibrate: error: cannot run '%s': %s (build the "
               "dtcc-calibrate target, or set DTCC_CALIBRATE)\n",
               tool.c_str(), std::strerror(errno));
  return 1;
}

} // namespace dtcc
