//===- Driver.h - the phases behind the dtcc command ------------*- C++ -*-===//
//
// Loads a model (ONNX or .mlir), runs the compiler's phases on it and writes
// the artifact. tools/dtcc is a thin command line over these functions.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_COMPILER_DRIVER_H
#define DTCC_COMPILER_DRIVER_H

#include "frontends/onnx/OnnxImporter.h"
#include "passes/Planning/Plan.h"

#include "mlir/IR/BuiltinOps.h"
#include "dialects/Registration.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/OwningOpRef.h"

#include <optional>
#include <string>

namespace dtcc {

/// Where compilation stops. Each phase's output is the next one's input.
enum class Phase {
  Import,     ///< dgraph as imported
  Graph,      ///< dgraph after folding and cleanup
  Train,      ///< dgraph with the backward pass and optimizer (--train)
  Shard,      ///< one rank's dgraph and dshard program (--mesh)
  Exec,       ///< dexec: buffers, offsets and kernel calls
  Program,    ///< the serialized program, without the runner
  Executable, ///< the runner with the program appended
};

/// Parses "import", "dgraph", "train", "shard", "dexec", "program",
/// "executable".
std::optional<Phase> parsePhase(llvm::StringRef name);

/// How `dtcc compile --train` builds the training step (the options of
/// dtcc-graph-autodiff and dtcc-graph-optimizer; see passes/Graph/Passes.td).
struct TrainOptions {
  bool enabled = false;
  std::string loss;
  std::vector<std::string> frozen;
  std::string optimizer = "adamw";
  double lr = 3e-4, minLr = 0.0, beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8;
  double weightDecay = 0.01, momentum = 0.0, dampening = 0.0;
  bool nesterov = false;
  double gradClip = 0.0;
  int64_t warmup = 0;
  std::string schedule = "constant";
  bool exportGradients = false;
  /// Compute type of forward and backward: "fp32", "bf16" or "fp16" (fp32
  /// master weights and optimizer state; dtcc-graph-mixed-precision).
  std::string dtype = "fp32";
  /// Under bf16/fp16: norms and softmax read and write the half type (f32
  /// inside their kernels; false: f32 between casts, as PyTorch autocast).
  bool halfNorms = true;
  /// Replace the attention cores by dgraph.attention
  /// (dtcc-graph-fuse-attention; --no-fused-attention turns it off), which
  /// both targets run as their attention kernels.
  bool fusedAttention = true;
  /// The plan, once: the device mesh (axes in rank order, parsed once at
  /// the CLI from "dp=4,tp=2"; empty: one device), ZeRO stage,
  /// micro-batches, pipeline schedule, recomputation and per-weight
  /// layouts. The phases write it as the module's `dshard.plan`
  /// (passes/Planning) and every pass reads it from there.
  planning::Plan plan;
  /// Choose every op's tp sharding by dtcc-plan-search-layouts (an ILP)
  /// instead of the Megatron-style rule, pricing with these figures.
  struct LayoutSearch {
    bool enabled = false;
    double flops = 1e11, busBandwidth = 1e9, latency = 20e-6;
    double memoryBandwidth = 0; ///< ops other than matmuls; 0: not priced
    /// The links of tp and dp groups where they differ (0: the above).
    double tpBusBandwidth = 0, tpLatency = 0, dpBusBandwidth = 0, dpLatency = 0;
    double timeLimit = 30; ///< CBC's, seconds
  };
  LayoutSearch layoutSearch;
};

struct CompileOptions {
  Phase compileTo = Phase::Executable;
  /// The phase the module has already been through: runPhases continues
  /// after it (Train: a training step compiled once, sharded by each of a
  /// plan search's candidates). Import: from the start.
  Phase startAfter = Phase::Import;
  bool printIrAfterAll = false;
  /// When set, each phase's IR is written to DIR/NN-<phase>.mlir.
  std::string dumpDir;
  /// The runner to embed; empty: `dtcc-runner` (or, for the cuda target,
  /// `dtcc-runner-cuda`) beside the dtcc executable.
  std::string runnerPath;
  /// The device the program runs on: "cpu" or "cuda" (program metadata
  /// dtcc.target; the runner creates that device).
  std::string target = "cpu";
  /// Fused regions (dtcc-lower-fuse-regions before the lowering) with
  /// kernels generated for the target and carried in the executable
  /// (compiler/codegen); row regions on the CPU target only. `dtcc compile`
  /// and the planner turn it on (see fusionUnavailable); off here, for the
  /// callers that run the program in their own process, where no kernels
  /// are generated (writeArtifact generates them).
  bool fuse = false;
  /// With fuse: row regions too (reductions along the last axis with the
  /// ops around them; norms and softmaxes), on either target.
  bool rowRegions = true;
  /// Attention reads and writes its heads through strided views
  /// (dtcc-lower-to-exec's strided-views); false: the transposes, slices
  /// and concats around it copy, as imported.
  bool stridedViews = true;
  /// ZeRO-1/2 with micro-batches or a pipeline under mixed precision keep
  /// compute-type copies of the weights and split the fp32 masters over dp
  /// (dtcc-shard-annotate's half-weight-copies); false: the masters stay
  /// whole and each micro-batch casts them.
  bool halfWeightCopies = true;
  /// A dense layer's bias added in its product's epilogue and its bias
  /// gradient computed in its weight gradient's product's
  /// (dtcc-lower-matmul-epilogues); unset: where the target's library has
  /// such epilogues (cuBLASLt: --target cuda). The CPU runs the fused ops
  /// as their two kernels (for tests).
  std::optional<bool> matmulEpilogues;
  /// Verify the module after every pass (MLIR's default); false: once,
  /// after the last phase. The planner's pricing compiles of zoo models
  /// (programs of up to millions of ops, whose IR the tests verify pass by
  /// pass) spent a quarter of their time in the verifier.
  bool verifyEachPass = true;
  TrainOptions train;
};

/// Loads `path`: an ONNX model (.onnx, ONNX text) through the importer, or
/// MLIR (.mlir) in any of dtcc's dialects.
mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>>
loadModel(const std::string &path, mlir::MLIRContext &context,
          const onnx_frontend::ImportOptions &options);

/// Runs the phases up to `options.compileTo` (Graph or Exec) in place.
mlir::LogicalResult runPhases(mlir::ModuleOp module,
                              const CompileOptions &options);

/// Serializes a dexec module; writes a bare program file (Phase::Program) or
/// an executable (Phase::Executable) to `outPath`.
mlir::LogicalResult writeArtifact(mlir::ModuleOp module,
                                  const std::string &outPath,
                                  const CompileOptions &options);

/// The runner beside the running dtcc (`dtcc-runner`, or
/// `dtcc-runner-cuda` for the cuda target), or the path in $DTCC_RUNNER.
std::string defaultRunnerPath(llvm::StringRef target = "cpu");

/// Why the fused regions' kernels cannot be generated for `target` on this
/// machine (the CPU's shared object needs ld.lld), or "" when they can.
/// dtcc compiles and prices unfused programs there unless --fuse is given.
std::string fusionUnavailable(llvm::StringRef target);

} // namespace dtcc

#endif // DTCC_COMPILER_DRIVER_H
