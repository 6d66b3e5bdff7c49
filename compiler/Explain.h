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
#include "runtime/format/Program.pb.h"

#include <string>

namespace dtcc {

using planner::CollectiveInfo;
using planner::listCollectives;

/// A report for people: the mesh, the parameters and their shardings, the
/// collectives per step and their totals by phase and kind.
std::string explainProgram(const runtime::format::Program &program);

} // namespace dtcc

#endif // DTCC_COMPILER_EXPLAIN_H
