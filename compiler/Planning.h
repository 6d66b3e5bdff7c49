//===- Planning.h - `dtcc plan` and `dtcc compile --plan auto` -*- C++ -*-===//
//
// What the dtcc command line asks of the planner, as functions: the report
// of `dtcc plan` (a model from its IR, a zoo spec or a saved plan, on a
// cluster; searched or evaluated with the planner's models, or on CPU
// clusters each plan compiled and its program priced), the plan `dtcc
// compile --plan auto` compiles, and the device figures that price it.
// tools/dtcc parses the flags into these requests and prints the results.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_COMPILER_PLANNING_H
#define DTCC_COMPILER_PLANNING_H

#include "compiler/PlanByCompiling.h"
#include "frontends/zoo/Zoo.h"
#include "passes/Planning/Plan.h"
#include "planner/Plan.h"
#include "planner/Model.h"
#include "runtime/base/MeshShape.h"
#include "runtime/base/Status.h"

#include "mlir/IR/BuiltinOps.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dtcc {

/// What `dtcc plan` is asked; each field is the flag of the same name
/// (docs/cli.md, docs/planner.md).
struct PlanRequest {
  /// The model: a file (ONNX or .mlir, described from its IR), a zoo spec
  /// (`zooFamily` "gpt" or "llama", a preset and sizes: "layers",
  /// "hidden", "heads", "kv-heads", "ffn", "vocab"), or only a saved plan.
  std::string modelPath;
  std::string zooFamily, zooPreset;
  std::map<std::string, int64_t> zooSizes;
  bool tiedEmbeddings = false;
  /// Initializers that are not parameters (an export's masks and rotary
  /// tables), as for `dtcc compile --train --frozen`.
  std::vector<std::string> frozen;
  /// Sizes of a model file's symbolic dimensions, as for `dtcc compile
  /// --input-shape` (by input) and `--dim` (by dimension name).
  std::map<std::string, std::vector<int64_t>> inputShapes;
  std::map<std::string, int64_t> dimSizes;
  std::string cluster = "dgx-h100";
  int64_t nodes = 1;
  /// --nodes was given (--ranks must fit in those nodes).
  bool nodesGiven = false;
  /// --cluster or --nodes was given (a saved plan's cluster is not used).
  bool clusterGiven = false;
  int64_t ranks = 0; ///< 0: the cluster's devices
  int64_t globalBatch = 0;
  int64_t seq = 0; ///< overrides the model's
  std::string dtype = "bf16";
  bool dtypeGiven = false;
  double budgetSeconds = 10;
  runtime::MeshShape mesh; ///< --mesh, parsed; empty when not given
  int zero = -1;           ///< -1: searched
  int64_t microBatch = 0;
  /// CPU clusters: micro-batches per step and the pipeline schedule of the
  /// compiled plans. `analytic`: price with the formula model instead of
  /// compiling the plan (CPU and GPU clusters).
  int64_t microBatches = 1;
  std::string schedule;
  bool analytic = false;
  bool offload = true;
  /// --grad-reduce half: the searched plans sum their gradients in the
  /// compute type where the compiler can (SearchOptions::halfGradReduce).
  bool halfGradReduce = false;
  int alternatives = 5;
  bool compiled = false;
  /// List the chosen plan's most expensive instructions and collectives
  /// (needs a plan priced from its compiled program).
  bool explainCost = false;
  /// Price GPU plans from programs compiled as `dtcc compile
  /// --no-strided-views` does (attention's heads copied around it).
  bool stridedViews = true;
  /// Price GPU plans from programs compiled as `dtcc compile
  /// --no-half-weight-copies` does (ZeRO-1/2's fp32 masters whole).
  bool halfWeightCopies = true;
  /// Price GPU plans from programs compiled as `dtcc compile
  /// --no-matmul-epilogues` does (biases as adds, their gradients as
  /// reductions).
  bool matmulEpilogues = true;
  /// Price programs with fused regions, as `dtcc compile` builds them by
  /// default; false: as `dtcc compile --no-fuse` (every op a kernel). A
  /// saved plan's model that describes a run with its own kernels (flash
  /// attention, fused softmax, FSDP1's gradient passes) is priced unfused.
  bool fuse = true;
  bool json = false;
  /// Re-plan with the figures scaled by 0.8 and 1.2 and prefer, among the
  /// plans within 2% of the fastest, the one that loses least in the worse
  /// worlds (planner/Sensitivity.h).
  bool sensitivity = false;
  std::string tracePath, planOut, planIn;
  /// With planIn: search a plan for its model, cluster and global batch
  /// (and dtype, unless given) instead of pricing its plan.
  bool replan = false;
  double tokens = 0, price = 0;
  /// Told before each compile for pricing that unrolls many layer
  /// instances (a deep pipeline's takes tens of seconds): `dtcc plan`
  /// prints it on stderr. Unset: silent.
  std::function<void(const std::string &)> progress;
};

/// The report of `dtcc plan` and whether its plan fits.
struct PlanOutput {
  std::string report; ///< text or JSON, for stdout
  /// A plan fits in memory (`dtcc plan` exits with 2 when none does).
  bool fits = false;
};

/// Plans for `request` (see PlanRequest); writes the trace and plan files
/// it names. Errors are the request's (a bad flag value, a model that does
/// not import, a plan that cannot run).
runtime::StatusOr<PlanOutput> planModel(const PlanRequest &request);

/// The planner's description of a validated zoo model (`dtcc plan --zoo`).
planner::ModelDesc describeZooOptions(const zoo::ZooOptions &options,
                                      const std::string &name);

/// The cluster `dtcc compile --plan auto` plans for: `cluster` (a preset or
/// file; "" = cpu-local) with `nodes` nodes, sized to `ranks` ranks when
/// given.
runtime::StatusOr<planner::ClusterSpec>
clusterForCompile(const std::string &cluster, int64_t nodes, int64_t ranks);

/// "4 x Xeon (cpu-local)": how the compile's messages name a cluster.
std::string clusterLabel(const planner::ClusterSpec &cluster);

/// What `dtcc compile --plan auto` does for a model.
/// The planner's `plan` as the compiler's: mesh in its rank order, ZeRO,
/// micro-batches, schedule and virtual stages, recomputation, sequence
/// parallelism, offload.
planning::Plan compilerPlanOf(const planner::Plan &plan);

/// The plan of a file `dtcc plan --plan-out` wrote, as the compiler's
/// (`dtcc compile --plan-in`): its structure; the compiled model's batch is
/// one micro-batch over dp, whatever the plan's micro-batch size. Errors
/// name the file and the field.
runtime::StatusOr<planning::Plan>
compilerPlanFromFile(const std::string &path);

/// Why the compiler cannot build the planner's `plan` (its fields as
/// dtcc-plan-set checks them; offloaded parameters), or nullopt.
std::optional<std::string> compilerRefuses(mlir::MLIRContext *ctx,
                                           const planner::Plan &plan);

struct CompilePlanChoice {
  /// Compile every candidate plan and price its program (planByCompiling):
  /// the model is not a transformer the planner describes, or the ranks are
  /// CPUs. Otherwise `plan` is the one chosen for the GPU cluster.
  bool compileCandidates = false;
  planning::Plan plan;
  /// Lines for stderr ("plan auto: ... on dgx-h100, priced by ...").
  std::string summary;
};

/// For `dtcc compile --plan auto`: the plan for `module` (as imported from
/// `modelPath`, described from its IR; `train.frozen` are not parameters)
/// on a GPU `cluster`, restricted to what the compiler builds with
/// `train`'s micro-batches, recomputation and precision. The planner's
/// search is the pre-filter; its choice and its closest slower plans are
/// compiled for cuda and priced from their programs, which decide (as `dtcc
/// plan` prices a model file on a GPU cluster). CPU ranks, or a model the
/// planner does not describe: `compileCandidates`.
runtime::StatusOr<CompilePlanChoice>
choosePlanForCompile(mlir::ModuleOp module, const planner::ClusterSpec &cluster,
                     const TrainOptions &train, const std::string &modelPath);

/// What `dtcc compile --plan auto` planned.
struct CompilePlan {
  /// Lines for stderr: the planner's choice, or every compiled candidate
  /// and the chosen one.
  std::string messages;
  /// A plan was chosen (false: no candidate fits; `messages` lists them).
  bool chosen = false;
  /// When candidates were compiled: the chosen one compiled to dexec
  /// (Phase::Exec), in `module`'s context, to be written instead of
  /// compiling its plan again.
  mlir::OwningOpRef<mlir::ModuleOp> lowered;
};

/// `dtcc compile --plan auto` for `module` (as imported from `modelPath`)
/// on `cluster` with `ranks` ranks: for a transformer on GPU ranks the plan
/// choosePlanForCompile chooses, or else every candidate plan compiled and
/// priced (planByCompiling, tp layouts by `layoutSearch`: "ilp" or "",
/// "descent", "both", "none"). The chosen plan is written into
/// `options.train`.
runtime::StatusOr<CompilePlan>
planForCompile(mlir::ModuleOp module, CompileOptions &options,
               const planner::ClusterSpec &cluster, int64_t ranks,
               const std::string &layoutSearch, const std::string &modelPath);

} // namespace dtcc

#endif // DTCC_COMPILER_PLANNING_H
