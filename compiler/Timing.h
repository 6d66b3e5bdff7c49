//===- Timing.h - where a compile's time goes -------------------*- C++ -*-===//
//
// With DTCC_TIME_PASSES=1 in the environment, every pass of every compile a
// process runs (a `dtcc plan` compiles several programs) and the stages
// around them (importing, serializing, pricing) are timed, summed by name
// over the process and printed to stderr as one list when it exits, the
// most expensive first (MLIR's --mlir-timing=list for dtcc's own tools).
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_COMPILER_TIMING_H
#define DTCC_COMPILER_TIMING_H

#include "mlir/Support/Timing.h"

namespace dtcc {

/// Whether DTCC_TIME_PASSES asks for the report.
bool timingRequested();

/// The scope compiles and stages nest their timers in: the process's when
/// timingRequested(), else one that records nothing (and costs nothing).
mlir::TimingScope &compilerTiming();

} // namespace dtcc

#endif // DTCC_COMPILER_TIMING_H
