// Tests that a pass's bug is an internal error naming the pass, the op and
// its location, with exit status 1: no "LLVM ERROR", no stack dump.
// RUN: sh -c 'dtcc-opt %s -dtcc-test-internal-error=mode=invalid-ir; echo "exit status $?"' 2>&1 | FileCheck %s --check-prefix=INVALID
// RUN: sh -c 'dtcc-opt %s -dtcc-test-internal-error=mode=fatal -canonicalize; echo "exit status $?"' 2>&1 | FileCheck %s --check-prefix=FATAL
// RUN: sh -c 'dtcc-opt %s -dtcc-test-internal-error=mode=crash; echo "exit status $?"' 2>&1 | FileCheck %s --check-prefix=CRASH
// RUN: sh -c 'DTCC_CRASH_BACKTRACE=1 dtcc-opt %s -dtcc-test-internal-error=mode=crash; echo "exit status $?"' 2>&1 | FileCheck %s --check-prefix=BACKTRACE

// A verifier failure after a pass: the verifier's message, at the op.
// INVALID: internal_errors.mlir:[[# @LINE + 15]]:8: error: dtcc-opt: internal error: pass 'dtcc-test-internal-error' produced invalid IR: 'dgraph.matmul' op inferred type(s) 'tensor<2x4xf32>' are incompatible with return type(s) of operation 'tensor<2x5xf32>'
// INVALID-NOT: LLVM ERROR
// INVALID-NOT: Stack dump
// INVALID: exit status 1

// MLIR's fatal error (a result type it cannot infer): the op's own error,
// then what was running.
// FATAL: internal_errors.mlir:[[# @LINE + 8]]:8: error: expected contracted dimensions to agree, got 3 and 2
// FATAL: dtcc-opt: internal error: Failed to infer result type(s):
// FATAL: dtcc-opt: while
// FATAL-NEXT: running pass 'dtcc-test-internal-error' on 'builtin.module' ({{.*}}internal_errors.mlir)
// FATAL-NOT: LLVM ERROR
// FATAL-NOT: Stack dump
// FATAL: exit status 1
func.func @main(%x: tensor<2x3xf32>, %w: tensor<3x4xf32>) -> tensor<2x4xf32> {
  %y = dgraph.matmul %x, %w : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}

// A crash: the signal and what was running.
// CRASH: dtcc-opt: internal error: crashed with SIGSEGV (an invalid memory access)
// CRASH-NEXT: dtcc-opt: while
// CRASH-NEXT: running pass 'dtcc-test-internal-error' on 'builtin.module'
// CRASH-NOT: Stack dump
// CRASH: exit status 1

// DTCC_CRASH_BACKTRACE=1: LLVM's stack dump too, and the signal's status.
// BACKTRACE: Stack dump:
// BACKTRACE: dtcc-opt: internal error: crashed (stack trace above)
// BACKTRACE: exit status 139
