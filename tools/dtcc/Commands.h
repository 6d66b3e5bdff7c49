//===- Commands.h - the dtcc subcommands beside dtcc.cpp --------*- C++ -*-===//
//
// `dtcc plan` (PlanCommand.cpp), `dtcc calibrate` (CalibrateCommand.cpp)
// and `dtcc run` (RunCommand.cpp):
// their llvm::cl subcommands, registered with dtcc.cpp's, and what each runs
// once the command line is parsed.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_TOOLS_DTCC_COMMANDS_H
#define DTCC_TOOLS_DTCC_COMMANDS_H

#include "llvm/Support/CommandLine.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dtcc {

/// `dtcc plan`'s exit status when no plan fits in memory (docs/planner.md).
constexpr int kNoPlanFits = 2;

/// `dtcc plan [model] [options]`; its options are registered with it.
extern llvm::cl::SubCommand planCommand;
/// Hides from `dtcc plan --help` the options of the libraries dtcc links.
void hideOptionsUnrelatedToPlan();
/// Runs `dtcc plan` with the parsed options; the process exit status.
int runPlanCommand();

/// Reads the flags that size an ONNX model's symbolic dimensions (dtcc
/// import, compile and plan): each of `inputShapes` NAME=D0xD1x... (a
/// scalar: NAME=) into `shapes`, each of `dims` NAME=N into `dimSizes`.
/// The error for a malformed one, else empty.
std::string readShapeFlags(const std::vector<std::string> &inputShapes,
                           const std::vector<std::string> &dims,
                           std::map<std::string, std::vector<int64_t>> &shapes,
                           std::map<std::string, int64_t> &dimSizes);

/// `dtcc calibrate`: registered so that `dtcc --help` lists it. Its
/// arguments belong to the measuring tool (dtcc-calibrate, or with
/// --device cuda dtcc-calibrate-cuda), which parses them, --help included.
extern llvm::cl::SubCommand calibrateCommand;
/// Execs the measuring tool with `argv` (argv[0] is "calibrate"); returns
/// only on failure, with the exit status.
int runCalibrateCommand(int argc, char **argv);

/// `dtcc run EXECUTABLE [flags]` (RunCommand.cpp): registered so that `dtcc
/// --help` lists it; the flags belong to the executable's supervisor.
extern llvm::cl::SubCommand runCommand;
/// Execs `EXECUTABLE --supervise [flags]` (argv[0] is "run"); returns only
/// on failure or for --help, with the exit status.
int runRunCommand(int argc, char **argv);

} // namespace dtcc

#endif // DTCC_TOOLS_DTCC_COMMANDS_H
