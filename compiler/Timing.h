//===- Timing.h - where a compile's time goes -------------------*- C++ -*-===//
//
// With DTCC_TIME_PASSES=1 in the environment, every pass of every compile a
// process runs (a `dtcc plan` compiles several programs) and the stages
// around them (importing, serializing, pricing) are timed, summed by name
// over the process and printed to stderr as one list when it exits, the
// most expensive first (MLIR's --mlir-timing=list for dtcc's own tools).
// Each phase's passes nest in a scope of their own ("<phase> phase", the
// sum of its passes): MLIR keys a pass's timer by the pass's address,
// which a later phase's or compile's pass may reuse.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_COMPILER_TIMING_H
#define DTCC_COMPILER_TIMING_H

#include "mlir/Support/Timing.h"

#include <string>

namespace dtcc {

/// Whether DTCC_TIME_PASSES asks for the report.
bool timingRequested();

/// The scope compiles and stages nest their timers in: the process's when
/// timingRequested(), else one that records nothing (and costs nothing).
mlir::TimingScope &compilerTiming();

/// A scope of its own in compilerTiming(), named `name` in the report
/// (summed with the others of that name): one that no other nest() call
/// returns, for timers keyed by addresses a later scope may reuse.
mlir::TimingScope nestedCompilerTiming(const std::string &name);

} // namespace dtcc

#endif // DTCC_COMPILER_TIMING_H
