//===- ProgramModel.cpp - a compiled program priced with a cluster --------===//

#include "planner/ProgramModel.h"

#include "planner/TimeModel.h"
#include "planner/Units.h"
#include "runtime/base/DType.h"
#include "runtime/base/MatmulShape.h"
#include "runtime/base/MeshShape.h"
#include "runtime/base/OpFlops.h"
#include "runtime/device/cpu/AttentionPlan.h"
#include "runtime/exec/CudaScratch.h"
#include "runtime/kernels/KernelSignature.h"
#include "runtime/format/ProgramMetadata.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

namespace dtcc::planner {

using runtime::format::Buffer;
using runtime::format::Function;
using runtime::format::Instruction;
using runtime::format::Program;
using runtime::invalidArgument;
using runtime::internalError;
using runtime::strCat;

namespace {

bool isCommKernel(const std::string &kernel) {
  return collectiveOfKernel(kernel).has_value();
}

bool isOptimizerKernel(const std::string &kernel) {
  return kernel == "adamw" || kernel == "sgd";
}

int64_t numel(const Buffer &b) {
  int64_t n = 1;
  for (int64_t d : b.shape())
    n *= d;
  return n;
}

int64_t elementBytes(const Buffer &b) {
  return runtime::dtypeSize(static_cast<runtime::DType>(b.dtype()));
}

int64_t bufferBytes(const Buffer &b) { return numel(b) * elementBytes(b); }

/// Bytes of memory a buffer's view spans (a broadcast view, stride 0,
/// spans less than its shape).
int64_t extentBytes(const Buffer &b) {
  if (b.strides_size() == 0)
    return bufferBytes(b);
  int64_t last = 0;
  for (int d = 0; d < b.shape_size(); ++d) {
    if (b.shape(d) == 0)
      return 0;
    if (d < b.strides_size() && b.strides(d) > 0)
      last += (b.shape(d) - 1) * b.strides(d);
  }
  return (last + 1) * elementBytes(b);
}

/// Bytes a kernel moves reading or writing a buffer's view: its extent
/// for a broadcast view (each element read once, then from cache), its
/// elements for one that spans more than them (a strided view into a
/// larger buffer: attention's heads).
int64_t movedBytes(const Buffer &b) {
  return std::min(bufferBytes(b), extentBytes(b));
}

/// The signature of `name` in `inst`'s kernel (runtime/kernels/Kernels.td);
/// null for attributes the table does not know.
const runtime::KernelAttrSignature *tableAttr(const Instruction &inst,
                                              const std::string &name) {
  const runtime::KernelSignature *sig =
      runtime::findKernelSignature(inst.kernel());
  return sig ? sig->findAttr(name) : nullptr;
}

/// A string attribute as its kernel reads it: the program's value (a string
/// list joined by commas), else the kernel-signature table's default, else
/// "".
std::string attrString(const Instruction &inst, const std::string &name) {
  auto it = inst.attrs().find(name);
  if (it == inst.attrs().end()) {
    const runtime::KernelAttrSignature *a = tableAttr(inst, name);
    return a && a->hasDefault ? a->stringDefault : "";
  }
  if (it->second.has_strings()) {
    std::string s;
    for (const std::string &part : it->second.strings().values())
      s += (s.empty() ? "" : ",") + part;
    return s;
  }
  return it->second.s();
}

/// An integer (or flag) attribute as its kernel reads it: the program's
/// value, else the kernel-signature table's default; nullopt when there is
/// neither (an optional attribute left out, as `handle` of a collective that
/// is not asynchronous). The lowering emits every required one.
std::optional<int64_t> attrInt(const Instruction &inst,
                               const std::string &name) {
  auto it = inst.attrs().find(name);
  if (it != inst.attrs().end() &&
      it->second.value_case() == runtime::format::AttrValue::kI)
    return it->second.i();
  const runtime::KernelAttrSignature *a = tableAttr(inst, name);
  if (a && a->hasDefault)
    return a->intDefault;
  return std::nullopt;
}

std::vector<std::string> splitAxes(const std::string &axes) {
  std::vector<std::string> out;
  std::stringstream in(axes);
  for (std::string a; std::getline(in, a, ',');)
    if (!a.empty())
      out.push_back(a);
  return out;
}

/// Stable storage for the names CommItem points to.
const char *intern(const std::string &name) {
  static std::set<std::string> names;
  return names.insert(name).first->c_str();
}

/// A group of ranks one collective spans, seen from rank 0.
struct Group {
  int64_t size = 1;
  Link link = Link::kIntraNode;
  int64_t perNode = 1; ///< members in each node it spans
  bool pipeline = false; ///< spans the pp axis: the stages meet
};

StatusOr<Group> groupOf(const Program &program, const std::string &axes,
                        const ClusterSpec &cluster) {
  std::vector<runtime::MeshShape::Axis> meshAxes;
  for (int i = 0; i < program.mesh().axes_size(); ++i)
    meshAxes.push_back({program.mesh().axes(i), program.mesh().sizes(i)});
  runtime::MeshShape mesh;
  if (!meshAxes.empty()) {
    auto shape = runtime::MeshShape::of(std::move(meshAxes));
    if (!shape.isOk())
      return shape.status().withContext("the program's mesh");
    mesh = std::move(shape.value());
  }
  Group g;
  const std::vector<std::string> groupAxes = splitAxes(axes);
  for (const std::string &axis : groupAxes) {
    if (!mesh.has(axis))
      return invalidArgument("a collective over mesh axis '", axis,
                             "', which the program's mesh does not have");
    g.size *= mesh.size(axis);
    if (axis == "pp")
      g.pipeline = true;
  }
  // The members of rank 0's group, at the mesh's real strides.
  const std::vector<int64_t> members = mesh.group(groupAxes);
  GroupLink link = groupLink(cluster, members);
  g.link = link.link;
  g.perNode = link.perNode;
  return g;
}

int64_t commTensorBytes(const Program &program, const Instruction &inst) {
  int64_t bytes = 0;
  for (int id : inst.inputs())
    bytes = std::max(bytes, bufferBytes(program.buffers(id)));
  for (int id : inst.outputs())
    bytes = std::max(bytes, bufferBytes(program.buffers(id)));
  return bytes;
}

/// Most time first, each list.
void sortLists(StageLists &lists) {
  std::sort(lists.kernels.begin(), lists.kernels.end(),
            [](const KernelTime &x, const KernelTime &y) {
              return x.seconds > y.seconds;
            });
  std::sort(lists.comm.begin(), lists.comm.end(),
            [](const CommItem &x, const CommItem &y) { return x.time > y.time; });
  std::sort(lists.instructions.begin(), lists.instructions.end(),
            [](const InstructionTime &x, const InstructionTime &y) {
              return x.seconds > y.seconds;
            });
}

} // namespace

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

bool cpuStagesInF32(const Program &program, const Instruction &inst) {
  if (inst.kernel() != "all_reduce" && inst.kernel() != "reduce_scatter")
    return false;
  if (inst.inputs_size() == 0)
    return false;
  const auto dtype =
      static_cast<runtime::DType>(program.buffers(inst.inputs(0)).dtype());
  return dtype == runtime::DType::kF16 || dtype == runtime::DType::kBF16;
}

bool CollectiveInfo::overAxis(const std::string &axis) const {
  const std::vector<std::string> split = splitAxes(axes);
  return std::find(split.begin(), split.end(), axis) != split.end();
}

std::vector<CollectiveInfo> listCollectives(const Program &program) {
  std::map<std::string, int64_t> axisSize;
  for (int i = 0; i < program.mesh().axes_size(); ++i)
    axisSize[program.mesh().axes(i)] = program.mesh().sizes(i);
  std::vector<CollectiveInfo> out;
  for (const auto &fn : program.functions())
    for (const auto &inst : fn.instructions()) {
      if (!isCommKernel(inst.kernel()))
        continue;
      CollectiveInfo c;
      c.function = fn.name();
      c.kind = inst.kernel();
      c.axes = attrString(inst, "axes");
      c.phase = attrString(inst, "phase");
      c.node = inst.location();
      for (const std::string &a : splitAxes(c.axes))
        c.groupSize *= axisSize.count(a) ? axisSize[a] : 1;
      c.tensorBytes = commTensorBytes(program, inst);
      c.sentBytes = int64_t(
          sentBytes(c.kind, double(c.tensorBytes), c.groupSize));
      c.stagedInF32OnCpu = cpuStagesInF32(program, inst);
      out.push_back(std::move(c));
    }
  return out;
}

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

double instructionSeconds(const Program &program, const Instruction &inst,
                          const DeviceSpec &device, double *flopsOut) {
  if (flopsOut)
    *flopsOut = 0;
  const std::string &kernel = inst.kernel();
  double overhead = device.kernelOverhead.value;
  // matmul_bias and matmul_bias_grad: the bias added or its gradient
  // summed in the product's epilogue, priced as the product alone.
  if ((kernel == "matmul" || kernel == "matmul_bias" ||
       kernel == "matmul_bias_grad") &&
      inst.inputs_size() >= 2 && inst.outputs_size() >= 1) {
    const Buffer &lhs = program.buffers(inst.inputs(0));
    const Buffer &rhs = program.buffers(inst.inputs(1));
    const Buffer &out = program.buffers(inst.outputs(0));
    std::vector<int64_t> ls(lhs.shape().begin(), lhs.shape().end());
    std::vector<int64_t> rs(rhs.shape().begin(), rhs.shape().end());
    const bool tl = attrInt(inst, "transpose_lhs").value_or(0) != 0;
    const bool tr = attrInt(inst, "transpose_rhs").value_or(0) != 0;
    auto shape = runtime::planMatmul(ls, rs, tl, tr);
    if (shape.isOk() && out.shape_size() >= 2) {
      // The kernel's own GEMMs (runtime/base/MatmulShape.h): broadcast
      // batches cost their result's products, a shared rhs folds the batch
      // into the rows of one GEMM.
      const runtime::MatmulShape &p = shape.value();
      double m = double(p.m), n = double(p.n), k = double(p.k);
      double calls = double(p.gemms());
      double flops = runtime::matmulFlops(ls, rs, tl, tr);
      if (flopsOut)
        *flopsOut = flops;
      double efficiency = device.matmulEfficiencyAt(m, k, n);
      DType compute = DType::kFp32;
      auto dtype = static_cast<runtime::DType>(out.dtype());
      if (dtype == runtime::DType::kBF16)
        compute = DType::kBf16;
      else if (dtype == runtime::DType::kF16)
        compute = DType::kFp16;
      return flops / (device.peakFlops(compute) * efficiency) +
             calls * overhead;
    }
  }
  if ((kernel == "conv" || kernel == "conv_input_grad" ||
       kernel == "conv_filter_grad") &&
      inst.inputs_size() == 2 && inst.outputs_size() == 1) {
    // All three do the forward convolution's multiply-adds: for the filter
    // [O, C/groups, K..] and the forward output [N, O, Y..] (the gradient
    // operand of the backward kernels), 2 N O (C/groups) prod(K) prod(Y).
    const Buffer &filter = program.buffers(kernel == "conv_filter_grad"
                                               ? inst.outputs(0)
                                               : inst.inputs(1));
    const Buffer &output = program.buffers(kernel == "conv"
                                               ? inst.outputs(0)
                                           : kernel == "conv_input_grad"
                                               ? inst.inputs(0)
                                               : inst.inputs(1));
    if (filter.shape_size() >= 3 && output.shape_size() == filter.shape_size()) {
      double kernelSize = 1, pixels = 1;
      for (int d = 2; d < filter.shape_size(); ++d) {
        kernelSize *= double(filter.shape(d));
        pixels *= double(output.shape(d));
      }
      double batch = double(output.shape(0)), outChannels = double(filter.shape(0));
      double inPerGroup = double(filter.shape(1));
      double groups = double(std::max<int64_t>(1, attrInt(inst, "groups").value_or(1)));
      double flops = runtime::convFlops(
          std::vector<int64_t>(filter.shape().begin(), filter.shape().end()),
          std::vector<int64_t>(output.shape().begin(), output.shape().end()));
      if (flops > 0) {
        if (flopsOut)
          *flopsOut = flops;
        // As the implicit GEMM of one group: [O/groups, C/groups * K] x
        // [C/groups * K, N * Y].
        double efficiency = device.matmulEfficiencyAt(
            outChannels / groups, inPerGroup * kernelSize, batch * pixels);
        DType compute = DType::kFp32;
        auto dtype = static_cast<runtime::DType>(output.dtype());
        if (dtype == runtime::DType::kBF16)
          compute = DType::kBf16;
        else if (dtype == runtime::DType::kF16)
          compute = DType::kFp16;
        // Depthwise and small convolutions are bound by memory: every
        // operand is read and the result written at least once.
        int64_t bytes = 0;
        for (int id : inst.inputs())
          bytes += movedBytes(program.buffers(id));
        bytes += movedBytes(program.buffers(inst.outputs(0)));
        double memory = double(bytes) / (device.memoryBandwidth.value *
                                          device.memoryEfficiency.value);
        return std::max(flops / (device.peakFlops(compute) * efficiency),
                        memory) +
               overhead;
      }
    }
  }
  if ((kernel == "attention" || kernel == "attention_grad") &&
      inst.inputs_size() >= 3) {
    // dgraph.attention (and its gradient, which recomputes the scores):
    // runtime::attentionFlops at the device's attention efficiency of the
    // peak the kernels run at, or the bytes of its operands when that is
    // longer; no [Sq, Sk] buffer. On GPUs, f16 and bf16 heads up to
    // kCudaAttentionTensorCoreMaxHeadDim run on the tensor cores (the
    // type's peak); the rest, and the CPU's kernels, multiply in fp32 on
    // the vector units.
    const Buffer &q = program.buffers(inst.inputs(0));
    const Buffer &v = program.buffers(inst.inputs(2));
    DType compute = DType::kFp32;
    const auto dtype = static_cast<runtime::DType>(q.dtype());
    const bool half =
        dtype == runtime::DType::kBF16 || dtype == runtime::DType::kF16;
    if (!device.isCpu() && half && q.shape_size() > 0 && v.shape_size() > 0 &&
        std::max(q.shape(q.shape_size() - 1), v.shape(v.shape_size() - 1)) <=
            runtime::cpu::kCudaAttentionTensorCoreMaxHeadDim)
      compute = dtype == runtime::DType::kBF16 ? DType::kBf16 : DType::kFp16;
    double flops = runtime::attentionFlops(
        std::vector<int64_t>(q.shape().begin(), q.shape().end()),
        std::vector<int64_t>(v.shape().begin(), v.shape().end()),
        attrInt(inst, "causal").value_or(0) != 0, kernel == "attention_grad");
    if (flops > 0) {
      if (flopsOut)
        *flopsOut = flops;
      int64_t bytes = 0;
      for (int id : inst.inputs())
        bytes += movedBytes(program.buffers(id));
      for (int id : inst.outputs())
        bytes += movedBytes(program.buffers(id));
      double memory = double(bytes) / (device.memoryBandwidth.value *
                                        device.memoryEfficiency.value);
      return std::max(flops / (device.peakFlops(compute) *
                               device.attentionEfficiency.value),
                      memory) +
             overhead;
    }
  }
  int64_t elements = 0, bytes = 0;
  for (int id : inst.inputs()) {
    const Buffer &b = program.buffers(id);
    elements = std::max(elements, numel(b));
    bytes += movedBytes(b);
  }
  for (int id : inst.outputs()) {
    const Buffer &b = program.buffers(id);
    elements = std::max(elements, numel(b));
    bytes += movedBytes(b);
  }
  // Lookups work per looked-up element, not per element of the table they
  // read (gather) or add into (scatter_add: its updates).
  const bool gather = kernel == "gather" || kernel == "gather_elements" ||
                      kernel == "gather_nd";
  if (gather && inst.outputs_size() == 1)
    elements = numel(program.buffers(inst.outputs(0)));
  if (kernel == "scatter_add" && inst.inputs_size() >= 2) {
    elements = 0;
    for (int i = 1; i < inst.inputs_size(); ++i)
      elements = std::max(elements, numel(program.buffers(inst.inputs(i))));
  }
  // grid_sample gathers its taps (per spatial dimension: 1 nearest, 2
  // bilinear, 4 bicubic; 4 bilinear of an image, 8 of a volume) of every
  // channel per output element; roi_align 4 neighbours of each of a bin's
  // samples (sampling_ratio squared of them; 0 decides at run time from
  // the regions' sizes: 2 x 2 counted). Their gradients scatter as many
  // per element of dy. Bound by memory: those reads are counted on top of
  // the operands' bytes.
  const bool gridSample =
      kernel == "grid_sample" || kernel == "grid_sample_grad";
  const bool roiAlign = kernel == "roi_align" || kernel == "roi_align_grad";
  int64_t taps = 0;
  const int gridInput = kernel == "grid_sample" ? 1 : 2;
  if (gridSample && inst.inputs_size() > gridInput) {
    const std::string mode = attrString(inst, "mode");
    const Buffer &points = program.buffers(inst.inputs(gridInput));
    const int64_t dims = std::clamp<int64_t>(
        points.shape_size() > 0 ? points.shape(points.shape_size() - 1) : 2, 1,
        3);
    const int64_t perAxis = mode == "nearest" ? 1 : mode == "bicubic" ? 4 : 2;
    taps = 1;
    for (int64_t i = 0; i < dims; ++i)
      taps *= perAxis;
  }
  if (roiAlign) {
    const int64_t ratio = attrInt(inst, "sampling_ratio").value_or(0);
    taps = (ratio > 0 ? ratio * ratio : 4) * 4;
  }
  if (taps > 0 && inst.inputs_size() >= 1 && inst.outputs_size() >= 1) {
    // The forward's result, or the gradient's dy: the sampled elements.
    const bool forward = kernel == "grid_sample" || kernel == "roi_align";
    const Buffer &sampled = forward ? program.buffers(inst.outputs(0))
                                    : program.buffers(inst.inputs(0));
    elements = numel(sampled) * taps;
    bytes += elements * elementBytes(sampled);
  }
  // top_k compares: on a GPU every element with its whole row (size^2 per
  // row), on the CPU a partial sort (about log2(k) per element).
  double compareSeconds = 0;
  if (kernel == "top_k" && inst.inputs_size() == 1 && inst.outputs_size() >= 1) {
    const Buffer &in = program.buffers(inst.inputs(0));
    int64_t axis = attrInt(inst, "axis").value_or(0);
    if (axis >= 0 && axis < in.shape_size()) {
      double size = double(in.shape(axis));
      double k = double(attrInt(inst, "k").value_or(1));
      double compares = double(numel(in)) *
                        (device.isCpu() ? std::log2(k + 1) + 1 : size);
      compareSeconds = compares / device.peakFlops(DType::kFp32);
    }
  }
  // No kernel moves its bytes faster than memory bandwidth (the measured
  // rate is of operands that fit in cache; a step's tensors mostly do not).
  double memory =
      double(bytes) /
      (device.memoryBandwidth.value * device.memoryEfficiency.value);
  // A GPU kernel's measured rate per byte where it has one (every kernel
  // but the products is bound by memory there, so a bf16 instruction takes
  // about half an f32 one's time), else its rate per element; the lookups
  // and top_k keep their own counts (above).
  const bool ownElements = gather || kernel == "scatter_add" ||
                           kernel == "top_k" || gridSample || roiAlign;
  auto perByte = device.kernelByteSeconds.find(kernel);
  auto measured = device.kernelSeconds.find(kernel);
  // dgraph.random hashes a counter per element as dropout does and writes
  // its result: without rates of its own, dropout's per element (dropout's
  // per byte would count its operand and mask too).
  if (kernel == "random" && perByte == device.kernelByteSeconds.end() &&
      measured == device.kernelSeconds.end())
    measured = device.kernelSeconds.find("dropout");
  if (!ownElements && perByte != device.kernelByteSeconds.end())
    return std::max(memory, double(bytes) * perByte->second.value) + overhead;
  if (measured != device.kernelSeconds.end())
    return std::max(memory, double(elements) * measured->second.value) +
           overhead;
  return std::max(memory, compareSeconds) + overhead;
}

//===----------------------------------------------------------------------===//
// Simulation
//===----------------------------------------------------------------------===//

namespace {

/// A collective, send or receive on a rank's communication thread.
struct CommOp {
  int rank = 0; ///< simulated rank (pipeline stage)
  const Instruction *inst = nullptr;
  double duration = 0; ///< on the link, once started
  double issue = 0;    ///< the compute thread's clock when issued
  bool async = false;
  bool resolved = false;
  double start = 0, end = 0;
  Group group;
  int64_t bytes = 0;
  int64_t peer = -1;   ///< send/recv: the other stage
  int64_t tag = 0;
  int64_t ppIndex = -1; ///< the rank's n-th collective over pp
  CommItem *item = nullptr;
  InstructionTime *instruction = nullptr;
};

struct SimRank {
  int64_t stage = 0;
  std::vector<const Instruction *> stream;
  /// Per instruction of `stream`: after its function's loss (the backward
  /// and the optimizer).
  std::vector<bool> backward;
  size_t pc = 0;
  double tc = 0; ///< compute thread
  double tq = 0; ///< communication thread: end of the last resolved op
  std::deque<CommOp *> queue;
  std::map<int64_t, CommOp *> byHandle;
  CommOp *blockedOn = nullptr;
  int64_t ppIssued = 0;
  ProgramStageTime time;
  std::map<std::string, KernelTime> kernels;
  std::map<std::pair<std::string, std::string>, CommItem> comm;
  /// By (kernel, ONNX node).
  std::map<std::pair<std::string, std::string>, InstructionTime> insts;
  double flops = 0;

  bool done() const {
    return pc == stream.size() && queue.empty() && !blockedOn;
  }
};

class Simulator {
public:
  Simulator(const Program &program, const ClusterSpec &cluster, bool record,
            const RunKernels &run)
      : program_(program), cluster_(cluster),
        overlap_(!cluster.device.isCpu()), record_(record),
        attention_(run.attention), gradients_(run.gradients) {
    // A fused softmax keeps the scores at the compute type, FSDP1 its flat
    // gradient.
    auto dtype = program.metadata().find(runtime::metadata::kDtype);
    computeBytes_ = dtype != program.metadata().end() &&
                            (dtype->second == "bf16" || dtype->second == "fp16")
                        ? 2
                        : 4;
    if (gradients_ != GradientPasses::kAsCompiled)
      for (const Function &f : program.functions())
        for (const Instruction &inst : f.instructions())
          if (inst.kernel() == "concat")
            for (int id : inst.outputs())
              joined_.insert(id);
  }

  StatusOr<ProgramTime> run() {
    DTCC_RETURN_IF_ERROR(buildStreams());
    while (true) {
      bool progress = false;
      for (SimRank &r : ranks_) {
        while (r.pc < r.stream.size() || r.blockedOn) {
          auto advanced = advance(r);
          if (!advanced.isOk())
            return advanced.status();
          if (!advanced.value())
            break;
          progress = true;
        }
      }
      if (resolve())
        progress = true;
      bool done = std::all_of(ranks_.begin(), ranks_.end(),
                              [](const SimRank &r) { return r.done(); });
      if (done)
        break;
      if (!progress)
        return stalled();
    }
    return result();
  }

private:
  /// A step: micro-batches x train_step then apply_step, or each stage's
  /// train_step_pp<k>, or main.
  Status buildStreams() {
    std::map<std::string, const Function *> byName;
    for (const Function &f : program_.functions())
      byName[f.name()] = &f;
    auto append = [](SimRank &r, const Function &f) {
      // Backward: after the loss's gradient (a pipeline stage without the
      // loss counts as forward; only fused attention pricing reads it).
      bool backward = false;
      for (const Instruction &inst : f.instructions()) {
        if (inst.kernel() == "cross_entropy_grad")
          backward = true;
        r.stream.push_back(&inst);
        r.backward.push_back(backward);
      }
    };
    if (byName.count("train_step_pp0")) {
      for (int64_t s = 0;; ++s) {
        auto it = byName.find("train_step_pp" + std::to_string(s));
        if (it == byName.end())
          break;
        SimRank r;
        r.stage = s;
        append(r, *it->second);
        ranks_.push_back(std::move(r));
      }
      return Status::ok();
    }
    SimRank r;
    if (auto it = byName.find("train_step"); it != byName.end()) {
      int64_t micro = 1;
      auto meta = program_.metadata().find(runtime::metadata::kMicroBatches);
      if (meta != program_.metadata().end())
        micro = std::max<int64_t>(1, std::atoll(meta->second.c_str()));
      for (int64_t i = 0; i < micro; ++i)
        append(r, *it->second);
      if (auto apply = byName.find("apply_step"); apply != byName.end())
        append(r, *apply->second);
    } else if (auto main = byName.find("main"); main != byName.end()) {
      append(r, *main->second);
    } else if (!program_.functions().empty()) {
      append(r, program_.functions(0));
    }
    ranks_.push_back(std::move(r));
    return Status::ok();
  }

  /// Moves rank `r`'s compute thread one instruction on, or reports that
  /// it waits for communication that has not happened yet.
  StatusOr<bool> advance(SimRank &r) {
    if (r.blockedOn) {
      CommOp *op = r.blockedOn;
      if (!op->resolved)
        return false;
      finish(r, *op, /*blocking=*/true);
      r.blockedOn = nullptr;
      return true;
    }
    const Instruction &inst = *r.stream[r.pc];
    const std::string &kernel = inst.kernel();
    if (kernel == "wait") {
      auto it = r.byHandle.find(attrInt(inst, "handle").value_or(-1));
      if (it != r.byHandle.end()) {
        if (!it->second->resolved)
          return false;
        finish(r, *it->second, /*blocking=*/false);
        r.byHandle.erase(it);
      }
      ++r.pc;
      return true;
    }
    if (isCommKernel(kernel)) {
      gradientPasses(r, inst);
      DTCC_ASSIGN_OR_RETURN(CommOp * op, issue(r, inst));
      ++r.pc;
      if (!op->async)
        r.blockedOn = op;
      return true;
    }
    double flops = 0;
    double seconds = instructionSeconds(program_, inst, cluster_.device, &flops);
    if (attention_ == AttentionKernels::kFlash &&
        isAttentionCoreNode(inst.location())) {
      // One fused causal kernel (see AttentionKernels): the core matmuls'
      // FLOPs at the attention efficiency, the rest inside the kernel.
      const DeviceSpec &d = cluster_.device;
      DType compute = DType::kBf16;
      if (!inst.outputs().empty()) {
        auto dt = static_cast<runtime::DType>(
            program_.buffers(inst.outputs(0)).dtype());
        compute = dt == runtime::DType::kF32   ? DType::kFp32
                  : dt == runtime::DType::kF16 ? DType::kFp16
                                               : DType::kBf16;
      }
      seconds = kernel == "matmul"
                    ? flops / 2 * (r.backward[r.pc] ? 1.25 : 1.0) /
                          (d.peakFlops(compute) * d.attentionEfficiency.value)
                    : 0;
      if (kernel == "matmul")
        seconds += d.kernelOverhead.value;
    } else if (attention_ == AttentionKernels::kFusedSoftmax &&
               isAttentionCoreNode(inst.location()) && kernel != "matmul" &&
               kernel != "dropout" && kernel != "select") {
      // Fused scale-mask-softmax (see AttentionKernels): the softmax and
      // its gradient read and write the scores once at the compute type;
      // the casts, scales and masks around them run inside those kernels.
      seconds = 0;
      if ((kernel == "softmax" || kernel == "softmax_grad") &&
          !inst.outputs().empty()) {
        const DeviceSpec &d = cluster_.device;
        double tensors = kernel == "softmax" ? 2 : 3;
        double bytes = tensors * double(computeBytes_) *
                       double(numel(program_.buffers(inst.outputs(0))));
        seconds = bytes / (d.memoryBandwidth.value * d.memoryEfficiency.value) +
                  d.kernelOverhead.value;
      }
    }
    compute(r, kernel, inst.location(), seconds, flops);
    ++r.pc;
    return true;
  }

  /// `r`'s compute thread runs `kernel` (at ONNX node `node`) for
  /// `seconds`: its timeline, time and per-kernel and per-instruction
  /// costs.
  void compute(SimRank &r, const std::string &kernel, const std::string &node,
               double seconds, double flops = 0) {
    trace(r, 0, kernel, node, "compute", r.tc, seconds);
    r.tc += seconds;
    r.time.compute += seconds;
    if (isOptimizerKernel(kernel))
      r.time.optimizer += seconds;
    KernelTime &k = r.kernels[kernel];
    k.kernel = kernel;
    ++k.calls;
    k.seconds += seconds;
    k.flops += flops;
    r.flops += flops;
    InstructionTime &it = r.insts[{kernel, node}];
    it.kernel = kernel;
    it.node = node;
    ++it.calls;
    it.seconds += seconds;
  }

  /// What the run does to a weight gradient before `inst` sums it over dp
  /// (GradientPasses), as kernels on `r`'s compute stream.
  void gradientPasses(SimRank &r, const Instruction &inst) {
    if (gradients_ != GradientPasses::kFsdp1 ||
        (inst.kernel() != "reduce_scatter" && inst.kernel() != "all_reduce") ||
        attrString(inst, "phase") != "backward" || inst.inputs_size() == 0)
      return;
    std::vector<std::string> axes = splitAxes(attrString(inst, "axes"));
    if (std::find(axes.begin(), axes.end(), "dp") == axes.end())
      return;
    const auto &input = program_.buffers(inst.inputs(0));
    const double elements = double(numel(input));
    const DeviceSpec &d = cluster_.device;
    const double rate = d.memoryBandwidth.value * d.memoryEfficiency.value;
    auto pass = [&](const char *kernel, double bytes) {
      compute(r, kernel, inst.location(),
              bytes / rate + d.kernelOverhead.value);
    };
    // The flat gradient, unless the program joined it already.
    if (!joined_.count(inst.inputs(0)))
      pass("fsdp_flat_grad", 2 * elements * double(computeBytes_));
    pass("fsdp_predivide",
         2 * elements * double(runtime::dtypeSize(
                            static_cast<runtime::DType>(input.dtype()))));
  }

  StatusOr<CommOp *> issue(SimRank &r, const Instruction &inst) {
    auto op = std::make_unique<CommOp>();
    op->rank = int(&r - ranks_.data());
    op->inst = &inst;
    op->issue = r.tc;
    op->async = attrInt(inst, "async").value_or(0) != 0;
    op->bytes = commTensorBytes(program_, inst);
    // CPU ranks sum half values as f32 (cpuStagesInF32).
    if (cluster_.device.isCpu() && cpuStagesInF32(program_, inst))
      op->bytes *= 2;
    std::string axes = attrString(inst, "axes");
    auto group = groupOf(program_, axes, cluster_);
    if (!group.isOk())
      return group.status().withContext(
          strCat(inst.kernel(), " at '", inst.location(), "'"));
    op->group = group.value();
    const std::string &kernel = inst.kernel();
    if (kernel == "send" || kernel == "recv") {
      op->peer = r.stage + attrInt(inst, "offset").value_or(0);
      op->tag = attrInt(inst, "tag").value_or(0);
      op->duration = collectiveSeconds(cluster_, Collective::kSendRecv,
                                       double(op->bytes), 2, op->group.link,
                                       op->group.perNode);
    } else {
      op->duration = collectiveSeconds(cluster_, *collectiveOfKernel(kernel),
                                       double(op->bytes), op->group.size,
                                       op->group.link, op->group.perNode);
      if (op->group.pipeline)
        op->ppIndex = r.ppIssued++;
    }
    if (op->async)
      r.byHandle[attrInt(inst, "handle").value_or(-1)] = op.get();
    // Per-step communication by group and kind.
    std::string purpose = attrString(inst, "phase");
    // One row per group and kind (a pipeline's sends and receives are
    // one "send/recv" row, as extrapolateProgramTime matches rows).
    const Collective kind = *collectiveOfKernel(kernel);
    CommItem &item = r.comm[{axes.empty() ? "-" : axes, collectiveName(kind)}];
    item.group = intern(axes.empty() ? "-" : axes);
    item.purpose = intern(purpose);
    item.kind = kind;
    item.link = op->group.link;
    item.groupSize = kernel == "send" || kernel == "recv" ? 2 : op->group.size;
    item.count += 1;
    item.busBytes += sentBytes(kernel, double(op->bytes),
                               kernel == "send" ? 2 : op->group.size);
    item.payloadBytes = std::max(item.payloadBytes, double(op->bytes));
    item.time += op->duration;
    op->item = &item;
    InstructionTime &it = r.insts[{kernel, inst.location()}];
    it.kernel = kernel;
    it.node = inst.location();
    it.collective = true;
    ++it.calls;
    it.seconds += op->duration;
    it.bytes += double(op->bytes);
    op->instruction = &it;
    CommOp *raw = op.get();
    r.queue.push_back(raw);
    ops_.push_back(std::move(op));
    return raw;
  }

  /// The compute thread of `r` takes `op`'s result: it waits for it, and
  /// the collective took compute while it ran beside it: on CPU ranks the
  /// core, on GPUs the SMs its thread blocks hold (the compute that ran
  /// beside it lost that share and finishes that much later).
  void finish(SimRank &r, CommOp &op, bool blocking) {
    double before = r.tc;
    if (overlap_) {
      double beside = std::max(0.0, std::min(op.end, r.tc) - op.start);
      r.tc = std::max(r.tc + cluster_.device.collectiveShare.value * beside,
                      op.end);
    } else if (blocking || r.tc <= op.start) {
      r.tc = std::max(r.tc, op.end);
    } else {
      r.tc = std::max(op.end, r.tc + op.duration);
    }
    // Waiting beyond the operation's own time is idle when another
    // pipeline stage is late; without stages it is communication still
    // (queued behind earlier operations on the thread).
    double waited = r.tc - before;
    double comm = ranks_.size() == 1 ? waited : std::min(waited, op.duration);
    r.time.comm += comm;
    op.item->exposed += comm;
    op.instruction->exposed += comm;
  }

  /// Starts what the communication threads can start; true if any did.
  bool resolve() {
    bool any = false;
    bool again = true;
    while (again) {
      again = false;
      for (SimRank &r : ranks_) {
        while (!r.queue.empty()) {
          CommOp &op = *r.queue.front();
          if (!tryResolve(r, op))
            break;
          again = any = true;
        }
      }
    }
    return any;
  }

  double ready(const SimRank &r, const CommOp &op) const {
    return std::max(op.issue, r.tq);
  }

  void complete(SimRank &r, CommOp &op, double start, double end) {
    op.start = start;
    op.end = end;
    op.resolved = true;
    r.tq = end;
    r.queue.pop_front();
    std::string axes = op.item ? op.item->group : "";
    int stream = axes.find("tp") != std::string::npos   ? 1
                 : axes.find("pp") != std::string::npos ? 2
                                                         : 3;
    trace(r, stream, op.inst->kernel(), op.inst->location(), "communication",
          start, end - start);
  }

  /// Records an event of `r`'s timeline.
  void trace(const SimRank &r, int stream, const std::string &kernel,
             const std::string &node, const char *category, double start,
             double duration) {
    if (!record_)
      return;
    if (timeline_.events.size() >= kMaxEvents) {
      timeline_.truncated = true;
      return;
    }
    TraceEvent e;
    e.rank = r.stage;
    e.stream = stream;
    e.name = node.empty() ? kernel : kernel + " " + node;
    e.category = category;
    e.start = start;
    e.duration = duration;
    timeline_.events.push_back(std::move(e));
  }

  /// The head of `r`'s queue, if its peers are ready too.
  bool tryResolve(SimRank &r, CommOp &op) {
    const std::string &kernel = op.inst->kernel();
    if (kernel == "send") {
      // A send completes on its own (the transport buffers it: the
      // runtime's pipelines send ahead of the peer's receive); its message
      // waits in a mailbox.
      double start = ready(r, op);
      complete(r, op, start, start + op.duration);
      mailbox_[{r.stage, op.peer, op.tag}].push_back(op.end);
      return true;
    }
    if (kernel == "recv") {
      auto box = mailbox_.find({op.peer, r.stage, op.tag});
      if (box == mailbox_.end() || box->second.empty())
        return false;
      double arrival = box->second.front();
      box->second.pop_front();
      double start = ready(r, op);
      complete(r, op, start, std::max(start, arrival));
      return true;
    }
    if (op.ppIndex >= 0 && ranks_.size() > 1) {
      // Every stage must be at its same collective over pp.
      double start = 0;
      for (SimRank &s : ranks_) {
        if (s.queue.empty() || s.queue.front()->ppIndex != op.ppIndex)
          return false;
        start = std::max(start, ready(s, *s.queue.front()));
      }
      for (SimRank &s : ranks_) {
        CommOp &mine = *s.queue.front();
        complete(s, mine, start, start + mine.duration);
      }
      return true;
    }
    // The other members of a data- or tensor-parallel group run the same
    // program at the same time.
    double start = ready(r, op);
    complete(r, op, start, start + op.duration);
    return true;
  }

  Status stalled() const {
    std::string where;
    auto describe = [](const CommOp &op) {
      return strCat(op.inst->kernel(), " (tag ", op.tag, ") at '",
                    op.inst->location(), "'");
    };
    for (const SimRank &r : ranks_) {
      if (r.done())
        continue;
      where += strCat("; stage ", r.stage);
      if (r.blockedOn)
        where += strCat(" waits for ", describe(*r.blockedOn));
      if (!r.queue.empty())
        where += strCat(", its communication thread is at ",
                        describe(*r.queue.front()));
      if (!r.blockedOn && r.pc < r.stream.size())
        where += strCat(" is at ", r.stream[r.pc]->kernel(), " at '",
                        r.stream[r.pc]->location(), "'");
    }
    return internalError("the program's stages never meet (a send without "
                         "its receive?)",
                         where);
  }

  ProgramTime result() {
    ProgramTime out;
    for (SimRank &r : ranks_) {
      r.time.stage = r.stage;
      r.time.end = std::max(r.tc, r.tq);
      r.time.idle =
          std::max(0.0, r.time.end - r.time.compute - r.time.comm);
      out.stages.push_back(r.time);
    }
    size_t critical = 0;
    for (size_t i = 1; i < ranks_.size(); ++i)
      if (out.stages[i].end > out.stages[critical].end)
        critical = i;
    // A pipeline's step ends when its last stage does.
    out.stepTime = out.stages[critical].end;
    out.criticalStage = ranks_[critical].stage;
    for (size_t i = 0; i < ranks_.size(); ++i) {
      SimRank &r = ranks_[i];
      StageLists lists;
      lists.stage = r.stage;
      for (auto &[name, k] : r.kernels)
        lists.kernels.push_back(k);
      for (auto &[key, item] : r.comm)
        lists.comm.push_back(item);
      lists.flops = r.flops;
      for (auto &[key, inst] : r.insts)
        lists.instructions.push_back(inst);
      sortLists(lists);
      if (i == critical) {
        out.kernels = lists.kernels;
        out.comm = lists.comm;
        out.flops = lists.flops;
        out.instructions = lists.instructions;
      }
      if (ranks_.size() > 1)
        out.stageLists.push_back(std::move(lists));
    }
    if (record_) {
      // One representative rank per stage: coordinate 0 on every axis but
      // pp, whose ranks are row-major over the mesh.
      int64_t after = 1;
      bool seen = false;
      for (int i = 0; i < program_.mesh().axes_size(); ++i) {
        if (seen)
          after *= program_.mesh().sizes(i);
        if (program_.mesh().axes(i) == "pp")
          seen = true;
      }
      for (SimRank &s : ranks_)
        timeline_.ranks.push_back(s.stage * (seen ? after : 0));
      for (TraceEvent &e : timeline_.events)
        e.rank = timeline_.ranks[size_t(e.rank)];
      timeline_.stepTime = out.stepTime;
      out.timeline = std::move(timeline_);
    }
    return out;
  }

  static constexpr size_t kMaxEvents = 200000;

  const Program &program_;
  const ClusterSpec &cluster_;
  const bool overlap_;
  const bool record_;
  const AttentionKernels attention_;
  const GradientPasses gradients_;
  /// The compute type's bytes per element.
  int64_t computeBytes_ = 4;
  /// Buffers made by a concat (with gradient passes other than as compiled).
  std::set<int> joined_;
  Timeline timeline_;
  std::vector<SimRank> ranks_;
  std::vector<std::unique_ptr<CommOp>> ops_;
  /// Eager messages sent and not yet received: (from, to, tag) -> arrival.
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::deque<double>>
      mailbox_;
};

} // namespace

StatusOr<ProgramTime> simulateProgram(const Program &program,
                                      const ClusterSpec &cluster,
                                      bool recordTimeline,
                                      const RunKernels &run) {
  Simulator sim(program, cluster, recordTimeline, run);
  return sim.run();
}

const char *gradientPassesText(GradientPasses gradients) {
  switch (gradients) {
  case GradientPasses::kAsCompiled:
    return "";
  case GradientPasses::kFsdp1:
    return "FSDP1's flat-gradient copy and pre-division before each dp "
           "gradient sum";
  }
  return "";
}

const char *attentionKernelsText(AttentionKernels attention) {
  switch (attention) {
  case AttentionKernels::kAsCompiled:
    return "as compiled (dtcc's attention kernels where the compiler fused "
           "the core)";
  case AttentionKernels::kFusedSoftmax:
    return "with fused scale-mask-softmax kernels";
  case AttentionKernels::kFlash:
    return "as a fused kernel";
  }
  return "";
}

bool isAttentionCoreNode(const std::string &node) {
  if (node.find("/attn/") == std::string::npos)
    return false;
  for (const char *suffix : {"/MatMul_scores", "/Div_scale", "/Add_alibi",
                             "/Add_causal_mask", "/Softmax_probs",
                             "/Dropout_probs", "/MatMul_context"}) {
    size_t n = std::char_traits<char>::length(suffix);
    if (node.size() >= n && node.compare(node.size() - n, n, suffix) == 0)
      return true;
  }
  return false;
}

namespace {

/// `out` (b's entries) with each entry set by `set(entry, a's, b's)`,
/// entries matched by `key`; one side's missing entry is a default T.
template <typename T, typename Key, typename Set>
void mergeByKey(std::vector<T> &out, const std::vector<T> &a, Key key,
                Set set) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < out.size(); ++i)
    index[key(out[i])] = i;
  std::set<std::string> inA;
  std::vector<T> onlyA;
  for (const T &x : a) {
    inA.insert(key(x));
    auto it = index.find(key(x));
    if (it == index.end()) {
      T o = x;
      set(o, x, T());
      onlyA.push_back(o);
    } else {
      T y = out[it->second];
      set(out[it->second], x, y);
    }
  }
  for (T &o : out)
    if (!inA.count(key(o))) {
      T y = o;
      set(o, T(), y);
    }
  out.insert(out.end(), onlyA.begin(), onlyA.end());
}

} // namespace

StageLists ProgramTime::listsOf(int64_t stage) const {
  for (const StageLists &l : stageLists)
    if (l.stage == stage)
      return l;
  StageLists l;
  l.stage = stage;
  if (stage == criticalStage) {
    l.kernels = kernels;
    l.comm = comm;
    l.flops = flops;
    l.instructions = instructions;
  }
  return l;
}

ProgramTime extrapolateProgramTime(const ProgramTime &a, const ProgramTime &b,
                                   double factor) {
  // Every extrapolated figure is a time, a count or a size: a trend that
  // falls between the two compiles stops at zero instead of going negative.
  auto lerp = [factor](double x, double y) {
    return std::max(0.0, x + factor * (y - x));
  };
  // One stage's lists, `x`'s and `y`'s matched by name.
  auto lists = [&](StageLists x, StageLists out) {
    mergeByKey(
        out.kernels, x.kernels, [](const KernelTime &k) { return k.kernel; },
        [&](KernelTime &o, const KernelTime &p, const KernelTime &q) {
          o.calls =
              int64_t(std::llround(lerp(double(p.calls), double(q.calls))));
          o.seconds = lerp(p.seconds, q.seconds);
          o.flops = lerp(p.flops, q.flops);
        });
    mergeByKey(
        out.comm, x.comm,
        [](const CommItem &c) {
          return std::string(c.group) + "/" + collectiveName(c.kind);
        },
        [&](CommItem &o, const CommItem &p, const CommItem &q) {
          o.count = lerp(p.count, q.count);
          o.busBytes = lerp(p.busBytes, q.busBytes);
          o.time = lerp(p.time, q.time);
          o.exposed = std::min(o.time, lerp(p.exposed, q.exposed));
        });
    mergeByKey(
        out.instructions, x.instructions,
        [](const InstructionTime &i) { return i.kernel + "@" + i.node; },
        [&](InstructionTime &o, const InstructionTime &p,
            const InstructionTime &q) {
          o.calls =
              int64_t(std::llround(lerp(double(p.calls), double(q.calls))));
          o.seconds = lerp(p.seconds, q.seconds);
          o.exposed = std::min(o.seconds, lerp(p.exposed, q.exposed));
          o.bytes = lerp(p.bytes, q.bytes);
        });
    out.flops = lerp(x.flops, out.flops);
    auto drop = [](auto &list, auto empty) {
      list.erase(std::remove_if(list.begin(), list.end(), empty), list.end());
    };
    drop(out.kernels, [](const KernelTime &k) { return k.seconds <= 0; });
    drop(out.instructions,
         [](const InstructionTime &i) { return i.seconds <= 0; });
    sortLists(out);
    return out;
  };
  ProgramTime out = b;
  // Each stage's own parts are linear in its layers; its end is their sum
  // (a wait that shrinks as the stage's own work grows stops at 0, where a
  // line through the two ends would fall below the stage's work).
  for (ProgramStageTime &s : out.stages) {
    auto it = std::find_if(a.stages.begin(), a.stages.end(),
                           [&](const ProgramStageTime &x) {
                             return x.stage == s.stage;
                           });
    ProgramStageTime zero;
    const ProgramStageTime &from = it == a.stages.end() ? zero : *it;
    s.compute = lerp(from.compute, s.compute);
    s.optimizer = lerp(from.optimizer, s.optimizer);
    s.comm = lerp(from.comm, s.comm);
    s.idle = lerp(from.idle, s.idle);
    s.end = s.compute + s.comm + s.idle;
  }
  // The step is the slowest stage's end, which need not be the stage that
  // was slowest in either program.
  size_t critical = 0;
  for (size_t i = 1; i < out.stages.size(); ++i)
    if (out.stages[i].end > out.stages[critical].end)
      critical = i;
  if (!out.stages.empty()) {
    out.stepTime = out.stages[critical].end;
    out.criticalStage = out.stages[critical].stage;
  } else {
    out.stepTime = lerp(a.stepTime, b.stepTime);
  }
  // Every stage's lists where `b` has them (a pipeline); the critical
  // stage's are the result's own, taken from those when there.
  out.stageLists.clear();
  if (!b.stageLists.empty())
    for (const ProgramStageTime &s : out.stages)
      out.stageLists.push_back(lists(a.listsOf(s.stage), b.listsOf(s.stage)));
  StageLists critLists =
      out.stageLists.empty()
          ? lists(a.listsOf(out.criticalStage), b.listsOf(out.criticalStage))
          : out.listsOf(out.criticalStage);
  out.kernels = std::move(critLists.kernels);
  out.comm = std::move(critLists.comm);
  out.flops = critLists.flops;
  out.instructions = std::move(critLists.instructions);
  out.timeline = Timeline();
  return out;
}

namespace {
/// `m`'s peak is `f`'s: its function, place and the workspace's parts
/// there.
void takePeak(ProgramMemory &m, const FunctionMemory &f) {
  m.peakFunction = f.function;
  m.peakInstruction = f.peakInstruction;
  m.peakNode = f.peakNode;
  m.activations = f.activations;
  m.gradients = f.gradients;
  m.commBuffers = f.commBuffers;
  m.weightCopies = f.weightCopies;
}
} // namespace

ProgramMemory extrapolateProgramMemory(const ProgramMemory &a,
                                       const ProgramMemory &b, double factor) {
  auto lerp = [factor](int64_t x, int64_t y) {
    return int64_t(std::llround(double(x) + factor * double(y - x)));
  };
  ProgramMemory out = b;
  for (auto field :
       {&ProgramMemory::total, &ProgramMemory::workspace, &ProgramMemory::state,
        &ProgramMemory::constants, &ProgramMemory::scratch,
        &ProgramMemory::stage, &ProgramMemory::parameters,
        &ProgramMemory::optimizerState, &ProgramMemory::gradientAccumulators,
        &ProgramMemory::otherState, &ProgramMemory::stateAlignment,
        &ProgramMemory::activations, &ProgramMemory::gradients,
        &ProgramMemory::commBuffers, &ProgramMemory::weightCopies,
        &ProgramMemory::fragmentation})
    out.*field = std::max<int64_t>(0, lerp(a.*field, b.*field));
  // Each function's workspace on its own line: where another function's
  // outgrows the one `b` peaks in (an @apply_step holding a copy of every
  // gradient against a @train_step holding a few layers' activations), the
  // program peaks in that one.
  out.functions.clear();
  for (const FunctionMemory &fb : b.functions) {
    auto it = std::find_if(a.functions.begin(), a.functions.end(),
                           [&](const FunctionMemory &f) {
                             return f.function == fb.function;
                           });
    const FunctionMemory &fa = it != a.functions.end() ? *it : fb;
    FunctionMemory f = fb;
    for (auto field : {&FunctionMemory::workspace, &FunctionMemory::activations,
                       &FunctionMemory::gradients, &FunctionMemory::commBuffers,
                       &FunctionMemory::weightCopies,
                       &FunctionMemory::fragmentation})
      f.*field = std::max<int64_t>(0, lerp(fa.*field, fb.*field));
    out.functions.push_back(std::move(f));
  }
  // Compared with the peak function's own line; where that line falls
  // below zero the scaling holds for none (a program of too few layers),
  // and the peak stays `b`'s.
  int64_t peak = out.workspace;
  for (const FunctionMemory &f : out.functions)
    if (f.function == b.peakFunction)
      peak = f.workspace;
  const FunctionMemory *fullest = nullptr;
  if (peak > 0)
    for (const FunctionMemory &f : out.functions)
      if (f.function != b.peakFunction &&
          f.workspace > (fullest ? fullest->workspace : peak))
        fullest = &f;
  if (fullest) {
    out.total += fullest->workspace - out.workspace;
    out.workspace = fullest->workspace;
    out.fragmentation = fullest->fragmentation;
    takePeak(out, *fullest);
    // Its tensors are not `b`'s peak's: the state's alone are listed.
    out.largest.erase(std::remove_if(out.largest.begin(), out.largest.end(),
                                     [](const TensorBytes &t) {
                                       return t.kind == "activation" ||
                                              t.kind == "weight copy" ||
                                              t.kind == "comm buffer" ||
                                              t.kind == "gradient or temporary";
                                     }),
                      out.largest.end());
  }
  // The total is the static memory plan's peak, linear in the layers; its
  // parts at the peak need not be (the peak's tensors change kind from one
  // program to the next, and a part's trend stops at zero), so the
  // workspace's parts are scaled to add up to it again.
  const int64_t fixed = out.parameters + out.weightCopies +
                        out.optimizerState + out.otherState +
                        out.gradientAccumulators + out.constants +
                        out.fragmentation + out.stateAlignment + out.scratch;
  const int64_t parts = out.activations + out.gradients + out.commBuffers;
  const int64_t want = out.total - fixed;
  if (parts > 0 && want >= 0 && want != parts) {
    const double scale = double(want) / double(parts);
    out.activations = int64_t(std::llround(double(out.activations) * scale));
    out.commBuffers = int64_t(std::llround(double(out.commBuffers) * scale));
    out.gradients = want - out.activations - out.commBuffers;
  }
  return out;
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

namespace {

/// One region of the workspace and when it is live in a function.
struct Storage {
  int64_t offset = 0, bytes = 0;
  int first = 0, last = 0; ///< instruction indices; -1: a function input
  /// The instruction that first writes it (a view only read: the first
  /// that reads it); -1: a function input.
  int producer = -1;
  bool written = false;
};

/// The bytes covered by a changing set of [lo, hi) ranges of the workspace,
/// the ranges known in advance: a segment tree over their end points, each
/// node counting the ranges that cover it whole (the length of a union of
/// intervals, as in the area of a union of rectangles).
class CoverTree {
public:
  explicit CoverTree(std::vector<int64_t> points) : xs_(std::move(points)) {
    std::sort(xs_.begin(), xs_.end());
    xs_.erase(std::unique(xs_.begin(), xs_.end()), xs_.end());
    size_t n = std::max<size_t>(1, xs_.size());
    count_.assign(4 * n, 0);
    length_.assign(4 * n, 0);
  }
  /// Adds (`delta` 1) or removes (-1) the range [lo, hi).
  void update(int64_t lo, int64_t hi, int delta) {
    if (xs_.size() < 2 || hi <= lo)
      return;
    size_t a = std::lower_bound(xs_.begin(), xs_.end(), lo) - xs_.begin();
    size_t b = std::lower_bound(xs_.begin(), xs_.end(), hi) - xs_.begin();
    update(1, 0, xs_.size() - 1, a, b, delta);
  }
  int64_t covered() const { return xs_.size() < 2 ? 0 : length_[1]; }

private:
  /// Node `node` spans points [l, r] (elementary segments [l, r)).
  void update(size_t node, size_t l, size_t r, size_t a, size_t b,
              int delta) {
    if (b <= l || r <= a)
      return;
    if (a <= l && r <= b) {
      count_[node] += delta;
    } else {
      size_t mid = (l + r) / 2;
      update(2 * node, l, mid, a, b, delta);
      update(2 * node + 1, mid, r, a, b, delta);
    }
    if (count_[node] > 0)
      length_[node] = xs_[r] - xs_[l];
    else if (r - l == 1)
      length_[node] = 0;
    else
      length_[node] = length_[2 * node] + length_[2 * node + 1];
  }

  std::vector<int64_t> xs_;
  std::vector<int> count_;
  std::vector<int64_t> length_;
};

std::string variableKind(const runtime::format::Variable &v) {
  const std::string &name = v.name();
  if (v.trainable() || !v.rounded_from().empty())
    return "parameter"; // a master weight or its half copy
  if (name.find("/grad_acc") != std::string::npos)
    return "gradient accumulator";
  if (name.find('/') != std::string::npos)
    return "optimizer state";
  return "state";
}

} // namespace

ProgramMemory programMemory(const Program &program, int maxTensors,
                            AttentionKernels attention) {
  const bool fusedAttention = attention == AttentionKernels::kFlash;
  ProgramMemory m;
  m.workspace = program.workspace_bytes();
  m.state = program.state_bytes();
  m.constants = program.constant_bytes();
  // The kernels' scratch, reserved by the CUDA backend per rank: the
  // fullest pipeline stage's.
  auto target = program.metadata().find(runtime::metadata::kTarget);
  if (target != program.metadata().end() && target->second == "cuda") {
    std::set<int64_t> scratchStages = {-1};
    for (const Function &fn : program.functions())
      if (fn.has_stage())
        scratchStages.insert(fn.stage());
    if (scratchStages.size() > 1)
      scratchStages.erase(-1);
    for (int64_t s : scratchStages) {
      StatusOr<runtime::ScratchLayout> l = runtime::cudaProgramScratch(program, s);
      if (l.isOk())
        m.scratch = std::max(m.scratch, l.value().totalBytes);
    }
  }
  m.total = m.workspace + m.state + m.constants + m.scratch;
  m.hostState = program.host_state_bytes();
  m.hostWorkspace = program.host_workspace_bytes();
  for (const Function &fn : program.functions())
    for (const Instruction &inst : fn.instructions()) {
      bool toHost = inst.kernel() == "copy_to_host";
      if ((!toHost && inst.kernel() != "copy_to_device") ||
          inst.inputs_size() != 1)
        continue;
      (toHost ? m.bytesToHost : m.bytesToDevice) +=
          bufferBytes(program.buffers(inst.inputs(0)));
    }

  // The state arena: the fullest stage's variables.
  std::set<int64_t> stages = {-1};
  for (const auto &v : program.variables())
    if (v.has_stage())
      stages.insert(v.stage());
  if (stages.size() > 1)
    stages.erase(-1);
  int64_t fullest = -1;
  std::vector<TensorBytes> stateTensors;
  for (int64_t s : stages) {
    ProgramMemory c;
    std::vector<TensorBytes> tensors;
    for (const auto &v : program.variables()) {
      if (v.has_stage() && v.stage() != s)
        continue;
      // The host's state (an offloaded optimizer's) is not the device's.
      if (program.buffers(v.buffer()).arena() ==
          runtime::format::ARENA_HOST_STATE)
        continue;
      int64_t bytes = bufferBytes(program.buffers(v.buffer()));
      std::string kind = variableKind(v);
      (kind == "parameter"              ? c.parameters
       : kind == "gradient accumulator" ? c.gradientAccumulators
       : kind == "optimizer state"      ? c.optimizerState
                                        : c.otherState) += bytes;
      tensors.push_back({v.name(), kind, bytes});
    }
    int64_t sum = c.parameters + c.gradientAccumulators + c.optimizerState +
                  c.otherState;
    if (fullest == -1 ||
        sum > m.parameters + m.gradientAccumulators + m.optimizerState +
                  m.otherState) {
      fullest = s;
      m.parameters = c.parameters;
      m.gradientAccumulators = c.gradientAccumulators;
      m.optimizerState = c.optimizerState;
      m.otherState = c.otherState;
      stateTensors = std::move(tensors);
    }
  }
  m.stage = std::max<int64_t>(0, fullest);
  m.stateAlignment = std::max<int64_t>(
      0, m.state - m.parameters - m.gradientAccumulators - m.optimizerState -
             m.otherState);

  // The parameters' bytes in the state arena, by stage (the stages lay out
  // their variables over one arena): a cast reading them makes a weight
  // copy (a bf16 working copy of fp32 master weights).
  std::map<int64_t, std::vector<std::pair<int64_t, int64_t>>> parameterBytes;
  for (const auto &v : program.variables()) {
    const Buffer &b = program.buffers(v.buffer());
    if (b.arena() == runtime::format::ARENA_STATE &&
        variableKind(v) == "parameter")
      parameterBytes[v.has_stage() ? v.stage() : -1].push_back(
          {b.offset(), b.offset() + bufferBytes(b)});
  }
  auto readsParameter = [&](const Function &fn, const Instruction &inst) {
    if (inst.kernel() != "cast" || inst.inputs_size() != 1)
      return false;
    const Buffer &b = program.buffers(inst.inputs(0));
    if (b.arena() != runtime::format::ARENA_STATE)
      return false;
    auto inStage = [&](int64_t s) {
      auto it = parameterBytes.find(s);
      return it != parameterBytes.end() &&
             std::any_of(it->second.begin(), it->second.end(),
                         [&](std::pair<int64_t, int64_t> r) {
                           return r.first <= b.offset() &&
                                  b.offset() < r.second;
                         });
    };
    return inStage(-1) || (fn.has_stage() && inStage(fn.stage()));
  };

  // The workspace: the union of the live regions at each instruction.
  int64_t best = -1, bestAll = 0;
  std::vector<TensorBytes> peakTensors;
  for (const Function &fn : program.functions()) {
    // By buffer: regions the memory plan reuses hold other tensors at other
    // times (aliases of one tensor overlap, and count once below).
    std::map<int, Storage> storages;
    const int n = fn.instructions_size();
    auto touch = [&](int id, int at, bool writes) {
      const Buffer &b = program.buffers(id);
      if (b.arena() != runtime::format::ARENA_WORKSPACE)
        return;
      int64_t bytes = extentBytes(b);
      if (bytes == 0)
        return;
      auto [it, fresh] = storages.try_emplace(id);
      Storage &s = it->second;
      if (fresh) {
        s.offset = b.offset();
        s.bytes = bytes;
        s.first = s.last = at;
        s.producer = at;
      }
      if (writes && !s.written && s.producer >= 0) {
        s.producer = at;
        s.written = true;
      }
      s.first = std::min(s.first, at);
      s.last = std::max(s.last, at);
    };
    for (const auto &in : fn.inputs())
      touch(in.buffer(), -1, /*writes=*/false);
    int lossAt = -1;
    for (int i = 0; i < n; ++i) {
      const Instruction &inst = fn.instructions(i);
      for (int id : inst.outputs())
        touch(id, i, /*writes=*/true);
      for (int id : inst.inputs())
        touch(id, i, /*writes=*/false);
    }
    for (const auto &out : fn.outputs()) {
      touch(out.buffer(), n, /*writes=*/false);
      if (out.name() == "loss")
        for (int i = 0; i < n; ++i)
          for (int id : fn.instructions(i).outputs())
            if (id == out.buffer() && lossAt < 0)
              lossAt = i;
    }
    // The compiler's lifetimes where the program records them: the memory a
    // buffer views lives from the first write of any of its views to the
    // last read of any (a reshape read long after its producer wrote the
    // whole), which the instructions naming one view do not show.
    if (std::any_of(storages.begin(), storages.end(),
                    [&](const auto &entry) {
                      return program.buffers(entry.first).has_live();
                    }))
      for (auto it = storages.begin(); it != storages.end();) {
        const Buffer &b = program.buffers(it->first);
        if (!b.has_live()) { // live at no instruction
          it = storages.erase(it);
          continue;
        }
        it->second.first = b.live().first();
        it->second.last = b.live().last();
        ++it;
      }
    // A fused attention kernel never makes its core's score-shaped tensors.
    std::set<int> unmade;
    if (fusedAttention)
      for (const auto &[id, s] : storages) {
        if (s.producer < 0)
          continue;
        const Instruction &p = fn.instructions(s.producer);
        const Buffer &b = program.buffers(id);
        int rank = b.shape_size();
        if (isAttentionCoreNode(p.location()) && rank >= 2 &&
            b.shape(rank - 1) == b.shape(rank - 2))
          unmade.insert(id);
      }
    const bool staged = fn.has_stage();
    // The fullest instruction: a sweep over the instructions, each region
    // entering the trees at its first instruction and leaving after its
    // last (with fused attention, `all` also holds the unmade ones).
    std::vector<int64_t> points;
    std::vector<std::pair<int, const Storage *>> entering, leaving;
    for (const auto &[id, st] : storages) {
      points.push_back(st.offset);
      points.push_back(st.offset + st.bytes);
      entering.push_back({st.first, &st});
      leaving.push_back({st.last, &st});
    }
    auto byTime = [](const auto &a, const auto &b) { return a.first < b.first; };
    std::stable_sort(entering.begin(), entering.end(), byTime);
    std::stable_sort(leaving.begin(), leaving.end(), byTime);
    CoverTree made(points), all(points);
    std::set<const Storage *> unmadeStorages;
    for (int id : unmade)
      unmadeStorages.insert(&storages.at(id));
    size_t in = 0, out = 0;
    int peakAt = -1;
    int64_t peak = -1, withUnmade = 0;
    for (int i = 0; i < n; ++i) {
      for (; in < entering.size() && entering[in].first <= i; ++in) {
        const Storage *st = entering[in].second;
        all.update(st->offset, st->offset + st->bytes, 1);
        if (!unmadeStorages.count(st))
          made.update(st->offset, st->offset + st->bytes, 1);
      }
      for (; out < leaving.size() && leaving[out].first < i; ++out) {
        const Storage *st = leaving[out].second;
        all.update(st->offset, st->offset + st->bytes, -1);
        if (!unmadeStorages.count(st))
          made.update(st->offset, st->offset + st->bytes, -1);
      }
      if (!unmade.empty())
        withUnmade = std::max(withUnmade, all.covered());
      if (made.covered() > peak) {
        peak = made.covered();
        peakAt = i;
      }
    }
    bestAll = std::max(bestAll, withUnmade);
    // Its regions at its peak, by kind; the program's are the fullest
    // function's (the first where two are equal).
    if (peakAt >= 0) {
      const int i = peakAt;
      std::vector<const Storage *> live;
      for (const auto &[id, st] : storages)
        if (st.first <= i && i <= st.last && !unmade.count(id))
          live.push_back(&st);
      std::sort(live.begin(), live.end(),
                [](const Storage *a, const Storage *b) {
                  return a->offset < b->offset;
                });
      FunctionMemory f;
      f.function = fn.name();
      f.peakInstruction = i;
      f.peakNode = fn.instructions(i).location();
      std::vector<TensorBytes> tensors;
      // By kind, in offset order so that aliases count once.
      int64_t end = INT64_MIN;
      for (const Storage *s : live) {
        int64_t lo = std::max(s->offset, end), hi = s->offset + s->bytes;
        end = std::max(end, hi);
        if (hi <= lo)
          continue;
        std::string name, kind;
        if (s->producer < 0) {
          name = "input";
          kind = "activation";
        } else {
          const Instruction &p = fn.instructions(s->producer);
          name = p.kernel() + " at " +
                 (p.location().empty() ? "(no node)" : p.location());
          // A cast of a parameter is a weight copy (bf16 weights for
          // fp32 masters), live from its first use to its last. Forward
          // and backward micro-batches interleave in a pipeline stage:
          // there a forward task's result is an activation (its kernels'
          // dshard.task, "forward mb3"), a backward task's and the step's
          // own (the update) a gradient or temporary; elsewhere what is
          // made up to the loss.
          const bool forward =
              staged ? attrString(p, "dshard.task").rfind("forward", 0) == 0
                     : lossAt >= 0 && s->producer <= lossAt;
          kind = isCommKernel(p.kernel())  ? "comm buffer"
                 : readsParameter(fn, p) ? "weight copy"
                 : forward                 ? "activation"
                                           : "gradient or temporary";
        }
        (kind == "comm buffer"   ? f.commBuffers
         : kind == "weight copy" ? f.weightCopies
         : kind == "activation"  ? f.activations
                                 : f.gradients) += hi - lo;
        tensors.push_back({name, kind, s->bytes});
      }
      // Its own memory plan's peak (the program's where the function does
      // not record one), less a fused attention kernel's unmade tensors.
      int64_t planned = fn.workspace_bytes() > 0 ? fn.workspace_bytes()
                                                 : program.workspace_bytes();
      if (!unmade.empty() && withUnmade > peak)
        planned = peak + std::max<int64_t>(0, planned - withUnmade);
      f.workspace = std::max(planned, peak);
      f.fragmentation = f.workspace - peak;
      if (peak > best) {
        best = peak;
        takePeak(m, f);
        peakTensors = std::move(tensors);
      }
      m.functions.push_back(std::move(f));
    }
  }
  if (fusedAttention && bestAll > best) {
    // The plan's fragmentation stays; the unmade tensors' space goes.
    int64_t fused = std::max<int64_t>(0, best) + (m.workspace - bestAll);
    m.total -= m.workspace - fused;
    m.workspace = fused;
  }
  m.fragmentation = std::max<int64_t>(0, m.workspace - std::max<int64_t>(0, best));

  std::vector<TensorBytes> all = std::move(peakTensors);
  all.insert(all.end(), stateTensors.begin(), stateTensors.end());
  std::stable_sort(all.begin(), all.end(),
                   [](const TensorBytes &a, const TensorBytes &b) {
                     return a.bytes > b.bytes;
                   });
  if (int(all.size()) > maxTensors)
    all.resize(size_t(maxTensors));
  m.largest = std::move(all);
  return m;
}

Candidate candidateFromProgram(const Plan &plan, const ProgramMemory &memory,
                               const ProgramTime &time,
                               const ClusterSpec &cluster,
                               double tokensPerStep,
                               double modelFlopsPerStep) {
  Candidate c;
  c.plan = plan;
  MemoryBreakdown &m = c.memory;
  m.stage = memory.stage;
  m.parameters = double(memory.parameters + memory.weightCopies);
  m.optimizerState = double(memory.optimizerState + memory.otherState);
  m.gradients = double(memory.gradientAccumulators + memory.gradients);
  m.activations = double(memory.activations);
  m.commBuffers = double(memory.commBuffers);
  m.reserve = cluster.device.reservedBytes.value;
  m.temporaries = double(memory.constants + memory.fragmentation +
                         memory.stateAlignment + memory.scratch);
  m.hostOptimizerState = double(memory.hostState);
  m.hostGradients = double(memory.hostWorkspace);
  double capacity = cluster.device.memoryBytes.value;
  if (m.total() > capacity) {
    c.fits = false;
    c.problem = strCat("out of memory by ", formatBytes(m.total() - capacity),
                       " (the compiled program needs ",
                       formatBytes(m.total()), " of ", formatBytes(capacity),
                       ")");
  }

  TimeBreakdown &t = c.time;
  const ProgramStageTime &stage = time.stages[size_t(
      std::find_if(time.stages.begin(), time.stages.end(),
                   [&](const ProgramStageTime &s) {
                     return s.stage == time.criticalStage;
                   }) -
      time.stages.begin())];
  t.stepTime = time.stepTime;
  t.pipelineTime = time.stepTime;
  t.criticalStage = time.criticalStage;
  t.optimizerTime = stage.optimizer;
  t.computeTime = stage.compute - stage.optimizer;
  // Idle time of the critical stage; rounding leaves nanoseconds where
  // there is none.
  t.bubbleTime = stage.idle > 1e-6 * time.stepTime ? stage.idle : 0;
  for (const CommItem &item : time.comm) {
    std::string group = item.group;
    bool tensor = group.find("tp") != std::string::npos;
    bool pipeline = group.find("pp") != std::string::npos;
    (tensor ? t.tpCommTime : pipeline ? t.ppCommTime : t.dpCommExposed) +=
        item.exposed;
  }
  t.comm = time.comm;
  t.bubbleFraction =
      t.pipelineTime > 0 ? std::max(0.0, t.bubbleTime) / t.pipelineTime : 0;
  // The program's tasks are not split into forward and backward here: a
  // backward of twice the forward's time, as a matmul's two products take.
  t.idealBubbleFraction = idealBubbleFraction(plan, 1.0, 2.0);
  t.tokensPerStep = tokensPerStep;
  t.tokensPerSecond = time.stepTime > 0 ? tokensPerStep / time.stepTime : 0;
  double devices = double(plan.devices());
  t.modelFlopsPerStep = modelFlopsPerStep;
  t.hardwareFlopsPerStep = time.flops * devices;
  if (time.stepTime > 0) {
    t.modelTflopsPerGpu = modelFlopsPerStep / devices / time.stepTime / 1e12;
    t.hardwareTflopsPerGpu = time.flops / time.stepTime / 1e12;
    t.mfu = modelFlopsPerStep / devices / time.stepTime /
            cluster.device.peakFlops(plan.dtype.compute);
  }
  return c;
}

} // namespace dtcc::planner
