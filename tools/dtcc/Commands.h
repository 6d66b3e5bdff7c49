//===- Commands.h - the dtcc subcommands dtcc.cpp dispatches to -*- C++ -*-===//
//
// The entry points of `dtcc plan` and `dtcc calibrate`, and what `dtcc
// compile --plan auto` asks of the planner: declared once here, defined in
// PlanCommand.cpp and CalibrateCommand.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_TOOLS_DTCC_COMMANDS_H
#define DTCC_TOOLS_DTCC_COMMANDS_H

#include "compiler/PlanByCompiling.h"
#include "runtime/base/MeshShape.h"

#include <cstdint>
#include <string>

namespace dtcc {

/// `dtcc plan ARGS...` (argv[0] is "plan"); the process exit code.
int runPlanCommand(int argc, char **argv);
/// `dtcc calibrate ARGS...` (argv[0] is "calibrate"); the exit code.
int runCalibrateCommand(int argc, char **argv);

/// The figures `dtcc compile` prices candidate plans (and the layout ILP)
/// with: `clusterName` (a preset or file; "" = cpu-local) with `nodes`
/// nodes or `ranks` ranks. Prints the error and returns false on failure.
bool deviceFiguresForCompile(const std::string &clusterName, int64_t nodes,
                             int64_t ranks, DeviceFigures &figures,
                             std::string &clusterLabel);

/// What the planner did for `dtcc compile --plan auto`.
enum class PlanChoice {
  kChosen,            ///< `mesh` and `zero` are set: compile them
  kCompileCandidates, ///< not a zoo transformer, or CPU ranks: compile
                      ///< every candidate and price it (planByCompiling)
  kFailed,            ///< an error, already printed
};

/// For `dtcc compile --plan auto`: the mesh (empty for one device) and ZeRO
/// stage the planner chooses for the model at `modelPath` (its dtcc.zoo
/// metadata) on `cluster` (a preset or file; "" = cpu-local) with `nodes`
/// nodes or `ranks` ranks, restricted to what the compiler builds. Prints
/// the choice on stderr.
PlanChoice choosePlanForCompile(const std::string &modelPath,
                                const std::string &cluster, int64_t nodes,
                                int64_t ranks, int64_t microBatches,
                                const std::string &recompute,
                                runtime::MeshShape &mesh, int &zero);

} // namespace dtcc

#endif // DTCC_TOOLS_DTCC_COMMANDS_H
