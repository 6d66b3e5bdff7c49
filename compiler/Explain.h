//===- Explain.h - what a compiled program does on its mesh ------*- C++ -*-===//
//
// `dtcc explain`: a compiled program's mesh, each parameter's sharding and
// every collective it runs per step, read from the program itself (so it
// describes exactly what will run).
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_COMPILER_EXPLAIN_H
#define DTCC_COMPILER_EXPLAIN_H

#include "planner/ProgramModel.h"
#include "runtime/base/Status.h"
#include "runtime/format/Program.pb.h"

#include "mlir/IR/BuiltinOps.h"

#include <string>
#include <string_view>

namespace dtcc {

using planner::CollectiveInfo;
using planner::listCollectives;

/// A report for people: the mesh, the parameters and their shardings, the
/// collectives per step and their totals by phase and kind. `data` is the
/// program's data section (empty where there is none, as for a program
/// compiled from .mlir here), which holds its generated kernels.
std::string explainProgram(const runtime::format::Program &program,
                           std::string_view data = {});

/// The program priced on `cluster` (a preset or a cluster file), sized to
/// the program's ranks: its memory plan tensor by tensor and its step
/// simulated instruction by instruction (`dtcc explain --cluster`).
runtime::StatusOr<std::string>
explainProgramCost(const runtime::format::Program &program,
                   const std::string &cluster);

/// The program `dtcc explain model.mlir` reports on: `module` compiled to
/// dexec as `dtcc compile` compiles it (fused regions included) and
/// serialized. Weights printed elided (dense_resource without
/// data) are explained too: the report needs shapes, not values. Errors
/// are emitted as diagnostics.
mlir::FailureOr<runtime::format::Program>
programToExplain(mlir::ModuleOp module);

} // namespace dtcc

#endif // DTCC_COMPILER_EXPLAIN_H
