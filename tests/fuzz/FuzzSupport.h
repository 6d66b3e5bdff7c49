//===- FuzzSupport.h - what every dtcc fuzz target shares -------*- C++ -*-===//
//
// Scratch files, splitting one input into several files, MLIR contexts whose
// internal errors are findings, the small programs (fixtures) that the
// runtime targets feed their inputs to, and the oracle that the runtime
// accepts what the compiler emits. See tests/fuzz/README.md.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_TESTS_FUZZ_FUZZSUPPORT_H
#define DTCC_TESTS_FUZZ_FUZZSUPPORT_H

#include "compiler/Driver.h"
#include "runtime/base/Status.h"
#include "runtime/format/Program.pb.h"

#include "mlir/IR/MLIRContext.h"

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dtcc::fuzz {

/// Called from LLVMFuzzerInitialize (before libFuzzer closes stdout and
/// stderr with -close_fd_mask): keeps a descriptor of stderr for findings
/// and creates this process's scratch directory. `target` names the target
/// in messages and seed files.
void initialize(const char *target);

/// Reports a finding (a bug, not a bad input) on the real stderr and
/// aborts, which libFuzzer records as a crash with the input that caused it.
[[noreturn]] void finding(const std::string &what);

/// Writes a line to the real stderr (also under -close_fd_mask).
void note(const std::string &line);

/// This process's scratch directory (removed at exit).
const std::string &scratchDir();
/// Writes `bytes` to `path`, creating parent directories.
void writeFile(const std::string &path, std::string_view bytes);
/// Writes one of an input's files, `name` (a plain relative name, at most
/// one '/' to a subdirectory; anything else is skipped) under `dir`, which
/// is created. False when skipped or when it cannot be written (a name that
/// is also a directory): inputs may say anything.
bool writeInputFile(const std::string &dir, std::string_view name,
                    std::string_view bytes);
/// Writes the files of an input made of parts "NAME\n" + bytes (see
/// kPartSeparator) under `dir`, emptied first.
void writeInputFiles(const std::string &dir, std::string_view data);
/// Reads a whole file; empty when it cannot be read.
std::string readFile(const std::string &path);
/// Removes `path` and everything below it (no error if absent).
void removeTree(const std::string &path);

/// Inputs that stand for several files hold them separated by this line.
extern const char *const kPartSeparator;
/// Splits `data` at kPartSeparator.
std::vector<std::string_view> splitParts(std::string_view data);
/// Joins files into one input (for seeds).
std::string joinParts(const std::vector<std::string> &parts);

/// Where the target writes fresh seeds at startup: $DTCC_FUZZ_SEEDS (created),
/// or empty when unset. Seeds are derived from the current compiler and
/// runtime, so the corpus cannot drift from the formats (fuzz.sh passes the
/// directory as a corpus).
std::string seedsDir();
/// Writes seed `name` into seedsDir() when it is set.
void writeSeed(const std::string &name, std::string_view bytes);

/// An MLIR context with dtcc's dialects, multithreading off, whose
/// diagnostics are swallowed except internal errors (an importer or pass
/// that produced invalid IR, InternalErrors.h): those are findings.
class FuzzContext {
public:
  FuzzContext();
  ~FuzzContext();
  mlir::MLIRContext &get() { return *context_; }
  /// The error diagnostics seen so far, one per line.
  const std::string &errors() const { return errors_; }

private:
  std::unique_ptr<mlir::MLIRContext> context_;
  std::string errors_;
  uint64_t handler_ = 0;
};

/// Imports ONNX (binary or text) and compiles it with `options` into a
/// program file at `path` (no runner). Any failure is a finding: fixtures
/// are models the compiler must accept.
void compileFixture(const std::string &onnxBytes, CompileOptions options,
                    const std::string &path);

/// The ONNX bytes of a small zoo model (always the same): "gpt" (1 layer,
/// width 8, 2 heads, vocabulary 16, sequence 4, batch 2; token inputs ids
/// and labels) or "mlp" (4 inputs, one hidden layer of 8, 3 classes, batch
/// 2; inputs x and labels).
std::string zooModel(const std::string &family);

/// Small training graphs in ONNX text, each with a scalar loss output: a
/// Linear on a transposed activation; convolution, batch norm, pooling and
/// a softmax cross-entropy; embedding, layer norm and attention-like
/// matmuls.
const std::vector<std::string> &textModels();

/// Compiles the training program of zoo model `family` (SGD) once per
/// process into the scratch directory; returns its path.
const std::string &trainingFixture(const std::string &family);

/// Writes a TensorProto file of `dtype` and `shape` holding `values`
/// (cycled); for batch folders and seeds.
std::string tensorFileBytes(const std::string &name, int32_t dtype,
                            const std::vector<int64_t> &shape,
                            const std::vector<double> &values);

/// The bytes of a container written from a compiled module (for seeds).
std::string containerBytes(mlir::ModuleOp module);

/// Loads `program` (its data section: `data`, `dataSize` bytes) into a CPU
/// executable and, when it has no mesh, runs every function once on zero
/// inputs (run-time errors, such as an integer division by zero, are fine;
/// crashes are not). A program whose arenas together exceed `runLimitBytes`
/// is not loaded (ok). Returns the load's status.
runtime::Status loadAndRun(const runtime::format::Program &program,
                           const uint8_t *data, uint64_t dataSize,
                           int64_t runLimitBytes);

/// Serializes a module lowered to dexec and, when it has no mesh, checks with
/// loadAndRun that the runtime accepts it: a program the compiler emitted
/// that the runtime refuses to load is a finding.
void checkLoadsAndRuns(mlir::ModuleOp module, int64_t runLimitBytes);

/// Calls a command's main (the runner's runnerMain) with `args` (argv[0]
/// first); returns its exit code. Anything but 0, 1 (a clear error) or
/// another status in `documented` is a finding.
int callMain(int (*mainFn)(int, char **), const std::vector<std::string> &args,
             std::initializer_list<int> documented = {});

} // namespace dtcc::fuzz

#endif // DTCC_TESTS_FUZZ_FUZZSUPPORT_H
