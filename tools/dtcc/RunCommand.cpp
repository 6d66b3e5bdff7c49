//===- RunCommand.cpp - `dtcc run`: a supervised training job -------------===//
//
// `dtcc run ./train [flags]` is `./train --supervise [flags]`: the compiled
// executable's supervisor (runtime/exec/Supervisor.h, docs/operations.md)
// starts its ranks, watches them and restarts the job from the newest
// complete checkpoint after a failure. dtcc execs the executable in place,
// so under srun or mpirun each node's agent is that process, with the
// launcher's environment.
//
//===----------------------------------------------------------------------===//

#include "tools/dtcc/Commands.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace dtcc {

llvm::cl::SubCommand runCommand(
    "run",
    "Run a compiled training executable under its supervisor: dtcc run "
    "./train [--max-restarts N] [--ranks N] [training flags] (restarts from "
    "the newest checkpoint after a failure; docs/operations.md; ./train "
    "--help lists the flags)");

int runRunCommand(int argc, char **argv) {
  auto usage = [] {
    std::fprintf(stderr,
                 "usage: dtcc run EXECUTABLE [supervisor and training flags]\n"
                 "  runs EXECUTABLE --supervise [flags]: its ranks started, "
                 "watched and restarted\n  from the newest complete "
                 "checkpoint after a failure (docs/operations.md);\n"
                 "  EXECUTABLE --help lists the flags\n");
  };
  if (argc < 2) {
    usage();
    return 1;
  }
  std::string first = argv[1];
  if (first == "--help" || first == "-help" || first == "-h") {
    usage();
    return 0;
  }
  if (!first.empty() && first[0] == '-') {
    std::fprintf(stderr,
                 "dtcc run: error: expected the executable first, got '%s'\n",
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
