//===- PlanByCompiling.h - choose a plan by compiling candidates -*- C++ -*-===//
//
// For any model, including ones the planner's transformer model does not
// describe: compile the training step under each candidate mesh and ZeRO
// stage, and weigh what the compiled programs do — each rank's
// multiply-adds, its collectives and its memory plan — with a device's
// figures. Slower than the planner's search (one compilation per
// candidate) but exact about what will run.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_COMPILER_PLANBYCOMPILING_H
#define DTCC_COMPILER_PLANBYCOMPILING_H

#include "compiler/Driver.h"
#include "planner/ProgramModel.h"

#include "mlir/IR/BuiltinOps.h"

#include <memory>
#include <string>
#include <vector>

namespace dtcc {

/// What the candidates are weighed with.
struct DeviceFigures {
  double flops = 1e11;          ///< sustained FLOP/s for matrix products
  double memoryBytes = 8e9;     ///< capacity per rank
  double busBandwidth = 1e9;    ///< bytes/s of a collective's ring
  double latency = 20e-6;       ///< seconds per ring step
  /// The cluster whose figures price each compiled program
  /// (planner::simulateProgram); the fields above are its summary.
  planner::ClusterSpec cluster;
};

/// The figures of `cluster` (its device, and the link between nodes when
/// there are several, else inside one).
DeviceFigures deviceFigures(const planner::ClusterSpec &cluster);

/// A plan compiled and priced: the program every rank loads, its static
/// memory plan tensor by tensor, and its step simulated on a cluster.
struct PricedProgram {
  runtime::format::Program program;
  planner::ProgramMemory memory;
  planner::ProgramTime time;
};

/// Compiles `module` (as imported; it is cloned, not changed) with
/// `options` down to the program and prices it on `cluster`, its memory
/// for `options.target` (the CUDA backend's scratch on cuda), both with
/// the kernels `run` executes. Errors carry the compiler's first
/// diagnostic (a split that does not divide). With `lowered`, the
/// compiled clone (dexec, Phase::Exec) is moved there.
runtime::StatusOr<PricedProgram>
compileAndPrice(mlir::ModuleOp module, CompileOptions options,
                const planner::ClusterSpec &cluster,
                const planner::RunKernels &run = {},
                mlir::OwningOpRef<mlir::ModuleOp> *lowered = nullptr);

struct CompiledCandidate {
  runtime::MeshShape mesh;
  int zero = 0;
  int64_t peakBytes = 0;   ///< the memory plan's peak per rank
  double flops = 0;        ///< matrix-product FLOPs per rank and step
  double commBytes = 0;    ///< bytes each rank sends per step (ring)
  int64_t collectives = 0;
  double seconds = 0;      ///< compute + communication, not overlapped
  std::string rejected;    ///< why it cannot run; empty when it can
  /// Per-weight tensor-parallel layouts found better than the
  /// Megatron-style choice (NAME=rows|cols|whole).
  std::vector<std::string> layouts;
  /// How the tp layouts were chosen: empty for the Megatron-style rule,
  /// "descent" (coordinate descent over 2-D weights, each try compiled) or
  /// "ilp" (dtcc-plan-search-layouts; `layouts` lists its 2-D choices).
  std::string search;
  /// The layout search the candidate compiles with (enabled for "ilp").
  TrainOptions::LayoutSearch layoutSearch;
  /// Micro-batches per step and, with pp > 1, the pipeline schedule
  /// ("1f1b", "gpipe", "interleaved" over `virtualStages` chunks per
  /// stage, "zb-h1"; empty without a pipeline).
  int64_t microBatches = 1;
  std::string schedule;
  int64_t virtualStages = 1;
  /// "1f1b", "interleaved V=2": the schedule for people.
  std::string scheduleLabel() const {
    return virtualStages > 1 ? schedule + " V=" + std::to_string(virtualStages)
                             : schedule;
  }
  /// Megatron's sequence parallelism (with tp > 1 and the Megatron-style
  /// layouts).
  bool sequenceParallel = false;
  /// tp > 1, but no variable of the compiled program is split over tp:
  /// every tp rank computes the whole step (the model has no weight the
  /// layouts divide), so the plan does the work of dp x pp ranks.
  bool tpIdle = false;
  /// The compiled program and its price, for reports; null when it does
  /// not compile.
  std::shared_ptr<const PricedProgram> priced;
  /// The module compiled to dexec (Phase::Exec) that `priced` serializes,
  /// in the context of the module planned: `dtcc compile --plan auto`
  /// writes the chosen one instead of compiling its plan again.
  /// planByCompiling keeps it for the first candidate only.
  std::shared_ptr<mlir::OwningOpRef<mlir::ModuleOp>> lowered;
};

/// `options`' plan (mesh, ZeRO stage, micro-batches, schedule, layouts)
/// compiled and weighed: its simulated step, its memory plan against the
/// device; `rejected` says why it cannot run.
CompiledCandidate compileCandidate(mlir::ModuleOp module,
                                   CompileOptions options,
                                   const DeviceFigures &device);

/// The figures dtcc-plan-search-layouts prices a mesh dp x tp with on
/// `device`'s cluster: matrix products at `device.flops`, each axis's
/// groups on the link rank 0's group spans at the mesh's real axis order
/// (planner::groupLink, as the program model prices a program's groups), and ops other than matrix products at the
/// device's sustained memory bandwidth. Without a cluster: `device`'s
/// summary figures for every axis.
TrainOptions::LayoutSearch
layoutSearchFigures(const DeviceFigures &device,
                    const runtime::MeshShape &mesh);

/// How planByCompiling chooses tensor-parallel layouts beyond the
/// Megatron-style rule.
enum class LayoutSearchMode {
  /// dtcc-plan-search-layouts for every mesh with tp > 1 (and each ZeRO
  /// stage); coordinate descent where CBC fails.
  kIlp,
  /// One pass of coordinate descent for the best Megatron-style plan.
  kDescent,
  /// Both, each candidate listed (to compare them).
  kBoth,
  /// The Megatron-style layouts only.
  kNone,
};

/// How much slower a simpler plan may be and still come first
/// (planByCompiling's order): 0.5%.
constexpr double kSimplerPlanWithin = 0.005;

/// Compiles `module` (as imported) for every mesh dp x pp x tp of `ranks`
/// ranks (ZeRO 0-3 where dp > 1; with pp > 1, `base`'s micro-batches in
/// the 1F1B and GPipe orders) with `base`'s training options and the
/// Megatron-style layouts, and prices each program on `device.cluster`;
/// then, by `search`, compiles each mesh with tp > 1 and no pipeline again
/// with every op's sharding chosen by dtcc-plan-search-layouts (an ILP
/// priced with `device`'s figures), and/or, for the best plan with tp > 1,
/// tries each 2-D parameter split by rows, by columns and whole (one pass
/// of coordinate descent, each try compiled). Returns the candidates,
/// fastest fitting first (within 0.5%, the lower ZeRO stage, then the
/// fewer pipeline stages and tensor-parallel ranks); the first keeps its
/// compiled module (`lowered`). With pp > 1 and micro-batches, every
/// schedule is tried unless `searchSchedules` is false (the user named
/// one: `base`'s alone).
std::vector<CompiledCandidate>
planByCompiling(mlir::ModuleOp module, const CompileOptions &base,
                int64_t ranks, const DeviceFigures &device,
                LayoutSearchMode search = LayoutSearchMode::kIlp,
                bool searchSchedules = true);

} // namespace dtcc

#endif // DTCC_COMPILER_PLANBYCOMPILING_H
