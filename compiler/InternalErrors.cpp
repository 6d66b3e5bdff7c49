//===- InternalErrors.cpp - internal errors as diagnostics, never an abort ===//
//
// Two parts. Diagnostics: a pass instrumentation and an action handler mark
// the moment between a pass's end and the verifier's run after it, and a
// diagnostic handler rewrites the errors of that moment into internal
// errors. Fatal paths: LLVM's pretty stack (a frame per running pass, per
// applied rewrite, per ONNX node being imported) is printed by dtcc's own
// fatal error and crash-signal handlers, which exit with status 1.
//
//===----------------------------------------------------------------------===//

#include "compiler/InternalErrors.h"
#include "compiler/Timing.h"

#include "dialects/Graph/IR/GraphOps.h"

#include "mlir/IR/Action.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Operation.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/PrettyStackTrace.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Signals.h"
#include "llvm/Support/raw_ostream.h"

#include <atomic>
#include <csetjmp>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

using namespace mlir;

namespace {

std::string &toolName() {
  static std::string name = "dtcc";
  return name;
}

bool backtraceRequested() {
  const char *v = std::getenv("DTCC_CRASH_BACKTRACE");
  return v && *v && std::strcmp(v, "0") != 0;
}

std::string passName(const Pass &pass) {
  return pass.getArgument().empty() ? pass.getName().str()
                                    : pass.getArgument().str();
}

/// 'dgraph.matmul' at ONNX node '/fc1/MatMul', or the op's file position.
void describeOp(llvm::raw_ostream &os, Operation *op) {
  os << "'" << op->getName() << "'";
  Location loc = op->getLoc();
  std::string node = dtcc::graph::nodeName(loc);
  if (!node.empty()) {
    os << " at ONNX node '" << node << "'";
    return;
  }
  if (auto file = dyn_cast<FileLineColLoc>(loc)) {
    os << " (" << file.getFilename().getValue();
    if (file.getLine() != 0)
      os << ":" << file.getLine() << ":" << file.getColumn();
    os << ")";
  }
}

/// A pass running on an op: a frame of LLVM's pretty stack while it runs.
struct PassFrame : llvm::PrettyStackTraceEntry {
  PassFrame(const Pass &pass, Operation *op) : pass(pass), op(op) {}
  void print(llvm::raw_ostream &os) const override {
    os << "running pass '" << passName(pass) << "' on ";
    describeOp(os, op);
    os << "\n";
  }
  const Pass &pass;
  Operation *op;
};

/// Any other action (a rewrite pattern applied to an op, ...).
struct ActionFrame : llvm::PrettyStackTraceEntry {
  explicit ActionFrame(const tracing::Action &action) : action(action) {}
  void print(llvm::raw_ostream &os) const override {
    os << "applying '" << action.getTag() << "'";
    for (IRUnit unit : action.getContextIRUnits())
      if (auto *op = llvm::dyn_cast_if_present<Operation *>(unit)) {
        os << " to ";
        describeOp(os, op);
        break;
      }
    os << "\n";
  }
  const tracing::Action &action;
};

/// This thread's running passes, innermost last.
thread_local std::vector<std::unique_ptr<PassFrame>> passFrames;
/// The pass whose result the verifier is checking: set when the pass's body
/// returns, cleared by the instrumentation after it. Not per thread: the
/// verifier checks functions on the context's worker threads.
std::atomic<const Pass *> verifying{nullptr};

class Tracker : public PassInstrumentation {
public:
  Tracker(MLIRContext *ctx, bool useActions) : ctx(ctx), useActions(useActions) {
    handler = ctx->getDiagEngine().registerHandler(rewriteVerifierError);
    if (useActions)
      ctx->registerActionHandler(
          [](llvm::function_ref<void()> transform, const tracing::Action &action) {
            if (auto *run = llvm::dyn_cast<PassExecutionAction>(&action)) {
              transform();
              verifying = &run->getPass();
              return;
            }
            ActionFrame frame(action);
            transform();
          });
  }
  ~Tracker() override {
    ctx->getDiagEngine().eraseHandler(handler);
    if (useActions)
      ctx->registerActionHandler(nullptr);
  }

  void runBeforePass(Pass *pass, Operation *op) override {
    verifying = nullptr;
    passFrames.push_back(std::make_unique<PassFrame>(*pass, op));
  }
  void runAfterPass(Pass *, Operation *) override { done(); }
  void runAfterPassFailed(Pass *, Operation *) override { done(); }

private:
  static void done() {
    verifying = nullptr;
    if (!passFrames.empty())
      passFrames.pop_back();
  }

  /// An error the verifier emits after a pass: the pass's bug.
  static LogicalResult rewriteVerifierError(Diagnostic &diag) {
    const Pass *pass = verifying.load();
    if (!pass || diag.getSeverity() != DiagnosticSeverity::Error)
      return failure();
    Diagnostic internal(diag.getLocation(), DiagnosticSeverity::Error);
    internal << toolName() << ": internal error: pass '" << passName(*pass)
             << "' produced invalid IR: " << diag.str();
    for (Diagnostic &note : diag.getNotes())
      internal.attachNote(note.getLocation()) << note.str();
    diag = std::move(internal);
    return failure(); // printed by the tool's handler
  }

  MLIRContext *ctx;
  bool useActions;
  DiagnosticEngine::HandlerID handler;
};

//===----------------------------------------------------------------------===//
// Fatal paths
//===----------------------------------------------------------------------===//

std::atomic<bool> reporting{false};
/// A crash while printing a frame (a frame of freed IR) returns here, to
/// go on with the next frame.
thread_local sigjmp_buf frameRecovery;
thread_local volatile sig_atomic_t printingFrame = 0;

/// Prints the internal error and what was running; false when another
/// report is already under way (a crash while reporting).
bool report(llvm::StringRef what) {
  if (reporting.exchange(true))
    return false;
  llvm::outs().flush();
  llvm::raw_ostream &os = llvm::errs();
  os << toolName() << ": internal error: " << what << "\n";
  auto *entry =
      static_cast<const llvm::PrettyStackTraceEntry *>(llvm::SavePrettyStackState());
  if (entry)
    os << toolName() << ": while\n";
  for (; entry; entry = entry->getNextEntry()) {
    // `text` changes only after the frame printed (siglongjmp leaves it as
    // it was); what a crash interrupts is left behind.
    std::string text = "(a frame that could not be printed)";
    if (sigsetjmp(frameRecovery, 1) == 0) {
      printingFrame = 1;
      std::string line;
      llvm::raw_string_ostream s(line);
      entry->print(s);
      s.flush();
      printingFrame = 0;
      text = std::move(line);
    }
    printingFrame = 0;
    os << "  " << llvm::StringRef(text).rtrim() << "\n";
  }
  os << toolName() << ": this is a bug in dtcc"
     << (backtraceRequested() ? "" : "; DTCC_CRASH_BACKTRACE=1 adds a stack trace")
     << "\n";
  return true;
}

[[noreturn]] void finish() {
  llvm::sys::RunInterruptHandlers(); // removes partial outputs
  _exit(1);
}

void onFatalError(void *, const char *reason, bool) {
  std::string message = reason;
  // Say what it is, not where LLVM prints it ("LLVM ERROR: ...").
  if (!report(message))
    _exit(1);
  if (backtraceRequested())
    std::abort(); // LLVM's handler prints the stack
  finish();
}

void onBadAlloc(void *, const char *, bool) {
  // Nothing may allocate here.
  static const char message[] = ": internal error: out of memory\n";
  ssize_t ignored = write(2, toolName().data(), toolName().size());
  ignored = write(2, message, sizeof(message) - 1);
  (void)ignored;
  _exit(1);
}

const char *signalName(int sig) {
  switch (sig) {
  case SIGSEGV: return "SIGSEGV (an invalid memory access)";
  case SIGBUS: return "SIGBUS (an invalid memory access)";
  case SIGFPE: return "SIGFPE (an arithmetic error, such as a division by zero)";
  case SIGILL: return "SIGILL (an illegal instruction)";
  case SIGABRT: return "SIGABRT (an abort)";
  case SIGTRAP: return "SIGTRAP (a trap)";
  default: return "a signal";
  }
}

extern "C" void onCrashSignal(int sig) {
  if (printingFrame) {
    printingFrame = 0;
    siglongjmp(frameRecovery, 1);
  }
  if (report(std::string("crashed with ") + signalName(sig)))
    finish();
  _exit(1);
}

void printContextInLLVMDump(void *) {
  // DTCC_CRASH_BACKTRACE: LLVM prints the stack; add what was running.
  report("crashed (stack trace above)");
}

} // namespace

void dtcc::installInternalErrorHandlers(llvm::StringRef tool) {
  toolName() = tool.str();
  llvm::install_fatal_error_handler(onFatalError, nullptr);
  llvm::install_bad_alloc_error_handler(onBadAlloc, nullptr);
  if (backtraceRequested()) {
    llvm::sys::AddSignalHandler(printContextInLLVMDump, nullptr);
    return;
  }
  // Replace LLVM's crash handlers (stack dump, re-raised signal). The
  // alternate stack InitLLVM set up serves a stack overflow.
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = onCrashSignal;
  action.sa_flags = SA_ONSTACK | SA_NODEFER;
  sigemptyset(&action.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP})
    sigaction(sig, &action, nullptr);
}

void dtcc::instrumentPassManager(PassManager &pm, bool useActions,
                                 mlir::TimingScope *timing) {
  pm.addInstrumentation(std::make_unique<Tracker>(pm.getContext(), useActions));
  if (timingRequested())
    pm.enableTiming(timing ? *timing : compilerTiming());
}
