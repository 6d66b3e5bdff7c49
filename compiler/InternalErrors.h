//===- InternalErrors.h - internal errors as diagnostics, never an abort -*- C++ -*-===//
//
// dtcc's tools end with exit status 1 and a message that names the pass,
// the op and its ONNX node, never with "LLVM ERROR" and a stack dump: an
// error the verifier finds after a pass reads "dtcc: internal error: pass
// 'X' produced invalid IR: ...", and a fatal error of MLIR or LLVM (or a
// crash) prints what was running when it happened.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_COMPILER_INTERNALERRORS_H
#define DTCC_COMPILER_INTERNALERRORS_H

#include "llvm/ADT/StringRef.h"

namespace mlir {
class PassManager;
class TimingScope;
} // namespace mlir

namespace dtcc {

/// Installs, for the process, a handler of LLVM's fatal errors
/// (report_fatal_error, which MLIR's builders call when they cannot infer a
/// result type) and of the crash signals (SIGSEGV, SIGBUS, SIGFPE, SIGILL,
/// SIGABRT, SIGTRAP) that prints
///   <tool>: internal error: <the error or signal>
///   <tool>: while
///     running pass 'dtcc-graph-autodiff' on 'builtin.module' (model.onnx)
///     applying a rewrite to 'dgraph.matmul' at ONNX node '/fc1/MatMul'
///     importing ONNX node '/fc1/MatMul' (MatMul)
/// removes the files LLVM was told to remove on a crash and exits with
/// status 1. With DTCC_CRASH_BACKTRACE=1 in the environment, LLVM's stack
/// dump follows (and the process ends by the signal). Call once from main,
/// after llvm::InitLLVM.
void installInternalErrorHandlers(llvm::StringRef tool);

/// Makes `pm` record, for those handlers, which pass runs on which op and
/// which op a rewrite is applied to; and reports an error that the verifier
/// finds after a pass as "<tool>: internal error: pass '<pass>' produced
/// invalid IR: <the verifier's message>" at the invalid op, so that the
/// message names its ONNX node. Takes the context's action handler while
/// `pm` lives when `useActions` (the verifier's errors are told from the
/// pass's own by when they are emitted); without it, both read as usual.
/// With DTCC_TIME_PASSES=1, also times its passes (compiler/Timing.h), in
/// `timing` where given, else in compilerTiming().
void instrumentPassManager(mlir::PassManager &pm, bool useActions = true,
                           mlir::TimingScope *timing = nullptr);

} // namespace dtcc

#endif // DTCC_COMPILER_INTERNALERRORS_H
