//===- ProgramModel.h - a compiled program priced with a cluster --*- C++ -*-===//
//
// The planner's models of what the compiler really emits. A rank's
// serialized program (runtime/format/Program.proto) is simulated
// instruction by instruction: every kernel at the device's measured rate
// (or its roofline), every collective by the nccl-tests formulas over the
// link its group uses, on a communication thread that runs them one at a
// time as the runtime's does, and pipeline stages exchanging tensors with
// send/recv. Its memory is the static memory plan itself, tensor by tensor.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_PLANNER_PROGRAMMODEL_H
#define DTCC_PLANNER_PROGRAMMODEL_H

#include "planner/Search.h"
#include "runtime/format/Program.pb.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dtcc::planner {

/// One collective (or send/recv) instruction of a program.
struct CollectiveInfo {
  std::string function, kind, axes, phase, node;
  int64_t groupSize = 1;
  /// The whole tensor it communicates (the larger of input and output): the
  /// nccl-tests "size".
  int64_t tensorBytes = 0;
  /// What each rank sends with ring algorithms (nccl-tests' bus volume).
  int64_t sentBytes = 0;
  /// A sum of f16/bf16 values (cpuStagesInF32): on CPU ranks it travels
  /// as f32, twice tensorBytes and sentBytes.
  bool stagedInF32OnCpu = false;
  /// Whether its group spans mesh axis `axis` (one of `axes`).
  bool overAxis(const std::string &axis) const;
};

/// Whether the CPU communicators (MPI, which has no half types, and the
/// TCP backend alike) widen `inst`'s values to f32 before sending: a sum
/// (all-reduce, reduce-scatter) of f16 or bf16. NCCL reduces them as they
/// are.
bool cpuStagesInF32(const runtime::format::Program &program,
                    const runtime::format::Instruction &inst);

/// The collectives of every function of `program`, in program order.
std::vector<CollectiveInfo>
listCollectives(const runtime::format::Program &program);

/// Time spent in one kernel over a step (per rank of the critical stage).
struct KernelTime {
  std::string kernel;
  int64_t calls = 0;
  double seconds = 0;
  double flops = 0; ///< multiply-adds x 2 (matmuls, convolutions), else 0
};

/// One instruction of the critical stage over a step: a kernel or a
/// collective at one ONNX node, its calls summed (each micro-batch runs it
/// again). For `dtcc plan --explain-cost`.
struct InstructionTime {
  std::string kernel;
  std::string node; ///< the instruction's location: its ONNX node
  bool collective = false;
  int64_t calls = 0;
  /// Priced time: the kernel's, or the collective's on its link.
  double seconds = 0;
  /// Of a collective: the part its stage's compute thread waited for.
  double exposed = 0;
  double bytes = 0; ///< a collective's tensor, summed over calls
};

/// One pipeline stage's step (the only one without pipeline parallelism).
struct ProgramStageTime {
  int64_t stage = 0;
  double end = 0;       ///< when its step ends
  double compute = 0;   ///< its kernels
  double optimizer = 0; ///< of which optimizer updates (adamw, sgd)
  /// Its compute thread's time in communication: waiting for a collective,
  /// or (on CPU ranks, whose collectives share the cores that compute) the
  /// work of one that ran beside it. Waiting for another stage is idle.
  double comm = 0;
  double idle = 0; ///< end - compute - comm: pipeline fill, drain, waits
};

/// One stage's kernels, communication and instructions over a step, as
/// ProgramTime's lists of its critical stage.
struct StageLists {
  int64_t stage = 0;
  std::vector<KernelTime> kernels;
  std::vector<CommItem> comm;
  double flops = 0;
  std::vector<InstructionTime> instructions;
};

/// A step of the program, simulated.
struct ProgramTime {
  double stepTime = 0; ///< the slowest stage's end
  int64_t criticalStage = 0;
  std::vector<ProgramStageTime> stages;
  /// Of the critical stage, most time first.
  std::vector<KernelTime> kernels;
  /// Of the critical stage, per step: communication by group and kind
  /// (group = the mesh axes), with its time and the part the compute thread
  /// waited for (`exposed`).
  std::vector<CommItem> comm;
  double flops = 0; ///< matmul and convolution FLOPs of the critical stage per step
  /// Of the critical stage, by (kernel, ONNX node), most time first.
  std::vector<InstructionTime> instructions;
  /// Every stage's lists (a pipeline's), the critical one's included: a
  /// model with more layers can have another critical stage
  /// (extrapolateProgramTime).
  std::vector<StageLists> stageLists;
  /// The lists of `stage`: its entry of stageLists, or the critical stage's
  /// where there is none; empty lists for another stage without one.
  StageLists listsOf(int64_t stage) const;
  /// With `recordTimeline`: every kernel and communication of one
  /// representative rank per stage (streams as TimeModel's timeline:
  /// compute, tp, pp, dp), for a Chrome trace.
  Timeline timeline;
};

/// How the run being priced executes the attention core of the zoo's
/// transformer graphs: the instructions of ONNX nodes `*/attn/MatMul_scores`,
/// `Div_scale`, `Add_alibi`, `Add_causal_mask`, `Softmax_probs`, `Dropout_probs` and
/// `MatMul_context`, and their gradients (isAttentionCoreNode).
enum class AttentionKernels {
  /// Every instruction as dtcc's backend runs it (dtcc's own programs:
  /// cores compiled into dgraph.attention run dtcc's attention kernels,
  /// the others their ops one by one).
  kAsCompiled,
  /// Scale, mask and softmax in one kernel, and softmax's gradient with the
  /// scale in one (Megatron-LM's FusedScaleMaskSoftmax): each reads and
  /// writes the scores once at the compute type (2 and 3 tensors), the
  /// casts, scales and masks around them run inside it; dropout on the
  /// probabilities stays its own kernel each way (its gradient's scale
  /// inside the masking kernel). The matmuls stay GEMMs.
  kFusedSoftmax,
  /// One fused causal kernel (FlashAttention) at the device's
  /// attentionEfficiency: the core matmuls' FLOPs halved (the masked blocks
  /// are skipped), the backward ones x 5/4 (the backward recomputes the
  /// scores: 5 matmuls for the unfused 4), the elementwise instructions
  /// free (they run in the kernel's on-chip memory, dropout included).
  kFlash,
};

/// "unfused, as dtcc's CUDA backend runs it", "as fused scale-mask-softmax
/// kernels" or "as a fused kernel".
const char *attentionKernelsText(AttentionKernels attention);

/// What the run being priced does to a weight gradient before summing it
/// over data parallelism (a backward-phase reduce-scatter or all-reduce
/// over dp), beyond dtcc's program (which sums the gradient as its op made
/// it, widened first where the sum is fp32).
enum class GradientPasses {
  /// Nothing more: the program's instructions.
  kAsCompiled,
  /// PyTorch FSDP1's post-backward hook (torch.distributed.fsdp,
  /// `_post_backward_hook` / `_reduce_grad`): a wrapped unit's gradient is
  /// one flat tensor that autograd makes by concatenating its parameters'
  /// gradients (split_with_sizes' backward: a copy at the compute type),
  /// widened to reduce_dtype (as dtcc's program), then divided in place by
  /// gradient_predivide_factor (> 1 on every group of 2 or more ranks)
  /// before the reduce-scatter. Priced as two memory-bound kernels on the
  /// compute stream before each such collective: the copy reads and
  /// writes the gradient at the compute type, the division at the
  /// collective's type. A collective whose input the program already
  /// joined (dtcc-shard-bucket's concat) pays the division only.
  kFsdp1,
};

/// "" or "FSDP1's flat-gradient copy and pre-division before each dp
/// gradient sum".
const char *gradientPassesText(GradientPasses gradients);

/// How the run being priced executes what dtcc's program leaves to kernels
/// chosen by the run: the attention core and the gradient's way to its
/// data-parallel sum. The default prices the program as compiled.
struct RunKernels {
  RunKernels(AttentionKernels attention = AttentionKernels::kAsCompiled,
             GradientPasses gradients = GradientPasses::kAsCompiled)
      : attention(attention), gradients(gradients) {}
  AttentionKernels attention;
  GradientPasses gradients;
  /// dtcc compiles the program it prices with attention's heads as strided
  /// views (its default); false: as `dtcc compile --no-strided-views`
  /// (copies around attention), the program dtcc ran before it made views.
  bool stridedViews = true;
  /// ZeRO-1/2 plans with micro-batches or a pipeline under mixed precision
  /// keep compute-type copies of the weights, their masters split over dp
  /// (dtcc's default); false: as `dtcc compile --no-half-weight-copies`.
  bool halfWeightCopies = true;
  /// GPU programs add each dense layer's bias in its product and compute
  /// its bias gradient in its weight gradient's (dtcc's default on CUDA);
  /// false: as `dtcc compile --no-matmul-epilogues`, an add and a
  /// reduction of their own.
  bool matmulEpilogues = true;
  /// dtcc compiles the program it prices with fused regions (its default);
  /// false: as `dtcc compile --no-fuse`, every op a library kernel (the
  /// runs a plan file describes: their frameworks' kernels).
  bool fuse = true;
  bool asCompiled() const {
    return attention == AttentionKernels::kAsCompiled &&
           gradients == GradientPasses::kAsCompiled;
  }
};

/// Simulates one training step of `program` (micro-batches times
/// train_step and apply_step, or each pipeline stage's train_step_pp<k>;
/// a program without training functions runs `main` once) on `cluster`.
/// A timeline of more than 200,000 events is cut there (`truncated`).
/// Communication overlaps computation on GPUs (its own stream); on CPU
/// ranks a collective's work takes the core from computation. Errors: a
/// program that names an unknown mesh axis, or whose stages never meet
/// (a send without its recv).
///
/// With `run` other than as compiled, the attention core and the work
/// before each data-parallel gradient sum are priced as the run executes
/// them (see AttentionKernels, GradientPasses), not as dtcc compiled them.
StatusOr<ProgramTime> simulateProgram(const runtime::format::Program &program,
                                      const ClusterSpec &cluster,
                                      bool recordTimeline = false,
                                      const RunKernels &run = {});

/// Whether `node` (an instruction's location) is in the attention core of
/// the zoo's graphs (see AttentionKernels).
bool isAttentionCoreNode(const std::string &node);

/// `a` + `factor` x (`b` - `a`), field by field (kernels, collectives and
/// instructions matched by name; what only one has counts as 0 in the
/// other): the step of a model with more identical layers, from the
/// simulated steps of two compiled with fewer (docs/planner.md, "Layers
/// compiled once"). Each stage's compute, communication and idle time is
/// extrapolated and its end is their sum; the step is the slowest stage's
/// end, and that stage's lists (from both programs) are the result's: at
/// one layer per stage the head's stage can be the slowest, at ten a stage
/// of layers only. The timeline is dropped. Every field is a time, count or
/// size: a trend falling between `a` and `b` stops at 0, and a part exposed
/// never exceeds its whole.
ProgramTime extrapolateProgramTime(const ProgramTime &a, const ProgramTime &b,
                                   double factor);

/// The cost in seconds of one compute instruction of `program` on
/// `cluster`'s device: matmuls at the peak of their dtype times the
/// measured efficiency for their size; convolutions likewise (as their
/// implicit GEMM per group), or their bytes over memory bandwidth when that
/// is longer; other kernels at their measured rate per element, or bytes
/// over memory bandwidth; plus the kernel overhead.
double instructionSeconds(const runtime::format::Program &program,
                          const runtime::format::Instruction &inst,
                          const DeviceSpec &device, double *flops = nullptr);

/// A tensor of the memory report.
struct TensorBytes {
  std::string name; ///< a variable's name, or "kernel at ONNX node"
  std::string kind; ///< parameter, optimizer state, gradient accumulator,
                    ///< state, activation, weight copy, gradient or
                    ///< temporary, comm buffer
  int64_t bytes = 0;
};

/// One function's workspace at its own fullest point.
struct FunctionMemory {
  std::string function;
  /// Its memory plan's peak (with a fused attention kernel, without the
  /// tensors that kernel never makes), and where it is.
  int64_t workspace = 0;
  int64_t peakInstruction = -1;
  std::string peakNode;
  /// ProgramMemory's parts of the workspace, at this function's peak.
  int64_t activations = 0, gradients = 0, commBuffers = 0, weightCopies = 0,
          fragmentation = 0;
};

/// What each rank allocates: the program's static memory plan.
struct ProgramMemory {
  /// workspace + state + constants + scratch: what the runtime allocates
  /// (and reports as "peak memory ... planned").
  int64_t total = 0;
  int64_t workspace = 0, state = 0, constants = 0;
  /// The kernels' scratch a rank reserves when the program loads
  /// (runtime/exec/Scratch.h): on the CUDA backend (--target cuda)
  /// cuBLASLt's workspace, collective staging, norm-gradient partials, the
  /// scatter_add sort and the AdamW tables, exactly as the kernels request
  /// them (runtime/exec/CudaScratch.h); the largest over pipeline stages.
  /// 0 on the CPU backend.
  int64_t scratch = 0;
  /// The state arena by variable, for the fullest pipeline stage (the
  /// arena is shared by the stages, each laying out its own variables).
  int64_t stage = 0;
  int64_t parameters = 0, optimizerState = 0, gradientAccumulators = 0,
          otherState = 0, stateAlignment = 0;
  /// The host's arenas of an offloaded optimizer step (--offload optimizer),
  /// not part of `total`: the optimizer state there (host state) and the
  /// step's copies of gradients and parameters (host workspace); and the
  /// bytes the transfers move per step, to the host and back.
  int64_t hostState = 0, hostWorkspace = 0;
  int64_t bytesToHost = 0, bytesToDevice = 0;
  /// The workspace at its fullest point: which function, instruction and
  /// ONNX node, and the bytes the live tensors there cover, by kind.
  std::string peakFunction;
  int64_t peakInstruction = -1;
  std::string peakNode;
  int64_t activations = 0; ///< produced before the loss, kept for backward
  int64_t gradients = 0;   ///< gradients and temporaries of backward
  int64_t commBuffers = 0; ///< outputs of collectives and receives
  /// Casts of the parameters (a stage's or a step's bf16 working copies of
  /// fp32 master weights), in the workspace.
  int64_t weightCopies = 0;
  /// workspace - what the live tensors cover at the peak: space the memory
  /// planner could not reuse (alignment, lifetimes that do not nest).
  int64_t fragmentation = 0;
  /// The largest tensors: live workspace tensors at the peak, then state.
  std::vector<TensorBytes> largest;
  /// Each function's fullest point: the program of a few layers may peak
  /// in another function than the same program of many
  /// (extrapolateProgramMemory scales each).
  std::vector<FunctionMemory> functions;
};

/// The memory plan of `program`, with up to `maxTensors` of its largest
/// tensors. With `attention` kFlash, as a run with a fused (flash)
/// attention kernel holds it: the score-shaped tensors (last two dimensions
/// equal) of the attention cores (isAttentionCoreNode), forward and
/// backward, are never made, so the workspace is the fullest point without
/// them plus the memory plan's fragmentation. Fused scale-mask-softmax
/// kernels still make the scores: their memory is the program's.
ProgramMemory programMemory(
    const runtime::format::Program &program, int maxTensors = 12,
    AttentionKernels attention = AttentionKernels::kAsCompiled);

/// `a` + `factor` x (`b` - `a`) for every byte count (the largest tensors
/// and the peak's place are `b`'s), as extrapolateProgramTime. Each
/// function's workspace is scaled too: where another function's outgrows
/// the one `b` peaks in, the workspace, the total and the peak's parts and
/// place are that function's.
ProgramMemory extrapolateProgramMemory(const ProgramMemory &a,
                                       const ProgramMemory &b, double factor);

/// `plan` priced from its compiled program, in the report's terms. Memory:
/// parameters (with the weight copies live at the workspace's peak),
/// optimizer state (with step counters) and gradients (the accumulators,
/// plus the gradients and temporaries live at that peak) from the memory
/// plan; activations and communication buffers live at that peak;
/// temporaries = the constants, the kernels' scratch and what the memory
/// planner could not reuse; reserve = the cluster's runtime reserve. The
/// total is exactly what the runtime allocates, plus the reserve. Time: the
/// simulated step of the critical stage (kernels, exposed communication by
/// mesh axis, idle time as the pipeline bubble); MFU from
/// `modelFlopsPerStep` over all devices.
Candidate candidateFromProgram(const Plan &plan, const ProgramMemory &memory,
                               const ProgramTime &time,
                               const ClusterSpec &cluster,
                               double tokensPerStep, double modelFlopsPerStep);

} // namespace dtcc::planner

#endif // DTCC_PLANNER_PROGRAMMODEL_H
