//===- Explain.h - what a compiled program does on its mesh ------*- C++ -*-===//
//
// `dtcc explain`: a compiled program's mesh, each parameter's sharding and
// every collective it runs per step, read from the program itself (so it
// describes exactly what will run).
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_COMPILER_EXPLAIN_H
#define DTCC_COMPILER_EXPLAIN_H

#include "runtime/format/Program.pb.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dtcc {

/// One collective of a function, in program order.
struct CollectiveInfo {
  std::string function, kind, axes, phase, node;
  int64_t groupSize = 1;
  /// The whole tensor it communicates (the larger of input and output).
  int64_t tensorBytes = 0;
  /// What each rank sends with ring algorithms (nccl-tests' bus volume).
  int64_t sentBytes = 0;
};

/// The collectives of every function of `program`.
std::vector<CollectiveInfo> listCollectives(const runtime::format::Program &program);

/// A report for people: the mesh, the parameters and their shardings, the
/// collectives per step and their totals by phase and kind.
std::string explainProgram(const runtime::format::Program &program);

} // namespace dtcc

#endif // DTCC_COMPILER_EXPLAIN_H
