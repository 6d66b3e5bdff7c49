//===- Runner.h - the command line of compiled programs ---------*- C++ -*-===//

#ifndef DTCC_RUNTIME_EXEC_RUNNER_H
#define DTCC_RUNTIME_EXEC_RUNNER_H

namespace dtcc::runtime {

/// The main of every compiled program: finds the embedded program (or
/// `--program FILE` on the bare runner), parses the flags, runs, and returns
/// the process exit code. Errors go to stderr as "error: ...".
int runnerMain(int argc, char **argv);

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_EXEC_RUNNER_H
