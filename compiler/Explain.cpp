//===- Explain.cpp - what a compiled program does on its mesh -------------===//

#include "compiler/Explain.h"

#include "compiler/Driver.h"
#include "compiler/Serialize.h"
#include "dialects/Graph/IR/GraphOps.h"
#include "planner/AutoPlan.h"
#include "planner/Report.h"

#include "mlir/IR/BuiltinDialect.h"
#include "mlir/IR/DialectResourceBlobManager.h"

#include "runtime/base/DType.h"
#include "runtime/base/Format.h"
#include "runtime/format/Container.h"
#include "runtime/format/GpuKernelModule.h"
#include "runtime/format/ProgramMetadata.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

namespace dtcc {

namespace {

using runtime::format::Buffer;
using runtime::format::Program;

int64_t bufferBytes(const Buffer &b) {
  int64_t n = runtime::dtypeSize(static_cast<runtime::DType>(b.dtype()));
  for (int64_t d : b.shape())
    n *= d;
  return n;
}

std::string shapeText(const std::vector<int64_t> &shape) {
  if (shape.empty())
    return "scalar";
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "x" : "") + std::to_string(shape[i]);
  return s;
}

std::string shardingText(const runtime::format::Sharding &s) {
  std::string out = "[";
  for (int d = 0; d < s.dims_size(); ++d) {
    out += d ? ", {" : "{";
    for (int a = 0; a < s.dims(d).axes_size(); ++a)
      out += (a ? ", " : "") + s.dims(d).axes(a);
    out += "}";
    if (s.dims(d).groups() > 1)
      out += "x" + std::to_string(s.dims(d).groups());
  }
  return out + "]";
}

std::string meshText(const Program &program) {
  if (program.mesh().axes_size() == 0)
    return "a single device";
  std::string s;
  int64_t ranks = 1;
  for (int i = 0; i < program.mesh().axes_size(); ++i) {
    s += (i ? " x " : "") + program.mesh().axes(i) + "=" +
         std::to_string(program.mesh().sizes(i));
    ranks *= program.mesh().sizes(i);
  }
  return s + " (" + std::to_string(ranks) + " ranks)";
}

std::string pad(std::string s, size_t width) {
  if (s.size() < width)
    s.append(width - s.size(), ' ');
  return s;
}

} // namespace

/// Whether the program has per-stage functions (pipeline parallelism).
static bool hasPipelineStages(const Program &program) {
  for (const auto &fn : program.functions())
    if (fn.has_stage())
      return true;
  return false;
}

/// An offloaded optimizer step (--offload optimizer): which variables live
/// in the host's memory, and every transfer between it and the device's,
/// in program order. Empty for a program without host arenas.
static std::string explainMemorySpaces(const Program &program) {
  if (program.host_state_bytes() + program.host_workspace_bytes() == 0)
    return "";
  std::ostringstream os;
  int64_t hostVars = 0;
  std::ostringstream vars;
  for (const auto &v : program.variables()) {
    const Buffer &b = program.buffers(v.buffer());
    if (b.arena() != runtime::format::ARENA_HOST_STATE)
      continue;
    ++hostVars;
    vars << "  " << pad(v.name(), 44) << pad("host", 8)
         << runtime::formatBytes(bufferBytes(b)) << "\n";
  }
  os << "memory spaces (--offload optimizer): the optimizer step runs on the "
        "host with the CPU kernels\n"
     << "  device: state " << runtime::formatBytes(program.state_bytes())
     << ", workspace " << runtime::formatBytes(program.workspace_bytes())
     << ", constants " << runtime::formatBytes(program.constant_bytes())
     << "\n  host: state " << runtime::formatBytes(program.host_state_bytes())
     << " (" << hostVars << " variables), workspace "
     << runtime::formatBytes(program.host_workspace_bytes())
     << "\n  every other variable is in device memory\n"
     << "  " << pad("variable", 44) << pad("space", 8) << "per rank\n"
     << vars.str();
  os << "transfers, in program order (gradients to the host once final, "
        "updated parameters back):\n"
     << "  " << pad("#", 5) << pad("function", 12) << pad("kind", 16)
     << pad("tensor", 12) << "ONNX node\n";
  int i = 0;
  std::map<std::string, std::pair<int64_t, int64_t>> totals;
  for (const auto &fn : program.functions())
    for (const auto &inst : fn.instructions()) {
      if (inst.kernel() != "copy_to_host" && inst.kernel() != "copy_to_device")
        continue;
      int64_t bytes = bufferBytes(program.buffers(inst.inputs(0)));
      os << "  " << pad(std::to_string(++i), 5) << pad(fn.name(), 12)
         << pad(inst.kernel(), 16) << pad(runtime::formatBytes(bytes), 12)
         << (inst.location().empty() ? "(no node)" : inst.location()) << "\n";
      auto &t = totals[fn.name() + " " + inst.kernel()];
      t.first += 1;
      t.second += bytes;
    }
  for (const auto &[key, t] : totals)
    os << "  " << pad(key, 30) << pad(std::to_string(t.first) + " x", 8)
       << runtime::formatBytes(t.second) << " per call\n";
  os << "\n";
  return os.str();
}

/// The pipeline of a staged program: its schedule, and per stage its layer
/// chunks (the ONNX nodes' leading name parts, "layers.4", of the first
/// micro-batch's forward in each chunk) and its tasks in the order it runs
/// them (the kernels' dshard.task).
static std::string explainPipeline(const Program &program) {
  if (!hasPipelineStages(program))
    return "";
  std::ostringstream os;
  auto it = program.metadata().find(runtime::metadata::kPipelineSchedule);
  std::string schedule =
      it == program.metadata().end() ? "(not recorded)" : it->second;
  if (size_t space = schedule.find(' '); space != std::string::npos)
    schedule = schedule.substr(0, space) + ", " + schedule.substr(space + 1) +
               " chunks per stage";
  os << "pipeline: schedule " << schedule << "\n";
  for (const auto &fn : program.functions()) {
    if (!fn.has_stage())
      continue;
    std::vector<std::string> tasks;
    std::map<std::string, std::vector<std::string>> chunkParts;
    for (const auto &inst : fn.instructions()) {
      auto t = inst.attrs().find("dshard.task");
      if (t == inst.attrs().end())
        continue;
      const std::string &task = t->second.s();
      if (tasks.empty() || tasks.back() != task)
        tasks.push_back(task);
      // "forward mb0 chunk1": the chunk's layers from micro-batch 0.
      if (task.rfind("forward mb0", 0) != 0)
        continue;
      std::string chunk = task.size() > 11 ? task.substr(12) : "chunk0";
      // A fused region names each of its ops' nodes: "a/x, b/y".
      auto &parts = chunkParts[chunk];
      std::istringstream nodes(inst.location());
      for (std::string node; std::getline(nodes, node, ',');) {
        node.erase(0, node.find_first_not_of(' '));
        std::string part = node.substr(0, node.find('/'));
        if (!part.empty() &&
            std::find(parts.begin(), parts.end(), part) == parts.end())
          parts.push_back(part);
      }
    }
    os << "  stage " << fn.stage() << " (" << fn.name() << "):";
    for (const auto &[chunk, parts] : chunkParts) {
      os << " " << chunk << " [";
      for (size_t i = 0; i < parts.size(); ++i)
        os << (i ? " " : "") << parts[i];
      os << "]";
    }
    os << "\n    order:";
    for (const std::string &task : tasks) {
      // "F0", "B1", "W2", "F0c1": one short token per task.
      char kind = task.rfind("forward", 0) == 0   ? 'F'
                  : task.rfind("weight", 0) == 0 ? 'W'
                                                  : 'B';
      size_t mb = task.find("mb");
      std::string micro = task.substr(mb + 2, task.find(' ', mb) - mb - 2);
      size_t c = task.find("chunk");
      os << " " << kind << micro
         << (c == std::string::npos ? "" : "c" + task.substr(c + 5));
    }
    os << "\n";
  }
  os << "    (F forward, B backward (input gradient under zb-h1), W weight "
        "gradients; mb, then chunk)\n\n";
  return os.str();
}

/// What code the program carries for its fused regions: "kernels generated
/// for the CPU, 21.4 KiB of code", or for CUDA with the architectures and
/// whether ptxas assembled them.
static std::string describeGeneratedKernels(const Program &program,
                                            std::string_view data) {
  if (program.has_cpu_kernels())
    return "kernels generated for the CPU, " +
           runtime::formatBytes(program.cpu_kernels().size()) + " of code";
  if (!program.has_gpu_kernels())
    return "no generated kernels: the executable lacks its kernels section";
  const runtime::format::DataRef &ref = program.gpu_kernels();
  std::string what =
      "kernels generated for CUDA, " + runtime::formatBytes(ref.size());
  if (!runtime::insideDataSection(ref, data.size()))
    return what + " (outside the data section: truncated file?)";
  runtime::StatusOr<runtime::GpuKernelModule> module =
      runtime::parseGpuKernelModule(data.substr(ref.offset(), ref.size()));
  if (!module.isOk())
    return what + " (unreadable: " + module.status().message() + ")";
  std::string images;
  for (const runtime::GpuKernelImage &image : module.value().images)
    images += (images.empty() ? "" : ", ") + image.chip +
              (image.cubin.empty() ? " PTX" : " PTX + cubin");
  return what + ": " + images;
}

/// The fused regions (dtcc compile --fuse): per function, each region's
/// kernel, its ops and the bytes of the values that never reach memory.
static std::string explainFusion(const Program &program,
                                 std::string_view data) {
  std::ostringstream os;
  int64_t regions = 0;
  for (const auto &fn : program.functions()) {
    int64_t count = 0, ops = 0, saved = 0;
    std::ostringstream rows;
    for (const auto &inst : fn.instructions()) {
      if (inst.kernel() != "fused")
        continue;
      ++count;
      std::string symbol, names;
      int64_t bytes = 0, n = 0;
      if (auto it = inst.attrs().find("symbol"); it != inst.attrs().end())
        symbol = it->second.s();
      if (auto it = inst.attrs().find("dtcc.saved_bytes");
          it != inst.attrs().end())
        bytes = it->second.i();
      if (auto it = inst.attrs().find("dtcc.fused_ops");
          it != inst.attrs().end()) {
        std::istringstream list(it->second.s());
        for (std::string op; std::getline(list, op, ',');) {
          names += (names.empty() ? "" : " ") +
                   (op.rfind("dgraph.", 0) == 0 ? op.substr(7) : op);
          ++n;
        }
      }
      ops += n;
      saved += bytes;
      rows << "    " << pad(symbol, 28) << pad(std::to_string(n) + " ops", 8)
           << pad(runtime::formatBytes(bytes), 12) << names << "\n";
    }
    if (count == 0)
      continue;
    regions += count;
    os << "  " << fn.name() << ": " << count << " regions of " << ops
       << " ops, " << runtime::formatBytes(saved)
       << " of intermediates kept out of memory per call\n"
       << "    " << pad("kernel", 28) << pad("ops", 8) << pad("kept out", 12)
       << "fused ops\n"
       << rows.str();
  }
  if (regions == 0)
    return "";
  return "fused regions (" + describeGeneratedKernels(program, data) + "):\n" +
         os.str() + "\n";
}

std::string explainProgram(const Program &program, std::string_view data) {
  std::ostringstream os;
  auto meta = [&](const std::string &key) {
    auto it = program.metadata().find(key);
    return it == program.metadata().end() ? std::string() : it->second;
  };
  std::string model = meta(runtime::metadata::kModel);
  os << "program: " << (model.empty() ? "(unnamed model)" : model)
     << (meta(runtime::metadata::kTrain) == "1" ? ", training" : ", inference")
     << ", mesh " << meshText(program) << "\n\n";

  // Parameters first, then the other state.
  int64_t paramCount = 0, stateBytes = 0, splitState = 0, otherState = 0;
  int64_t copies = 0, copyBytes = 0;
  std::string copyType;
  std::ostringstream params;
  params << "  " << pad("parameter", 34) << pad("global shape", 16)
         << pad("sharding", 22) << "per rank\n";
  for (const auto &v : program.variables()) {
    const Buffer &b = program.buffers(v.buffer());
    std::vector<int64_t> local(b.shape().begin(), b.shape().end());
    std::vector<int64_t> global =
        v.has_sharding() ? std::vector<int64_t>(v.sharding().global_shape().begin(),
                                                v.sharding().global_shape().end())
                         : local;
    stateBytes += bufferBytes(b);
    if (!v.rounded_from().empty()) {
      ++copies;
      copyBytes += bufferBytes(b);
      copyType = runtime::dtypeName(static_cast<runtime::DType>(b.dtype()));
      continue;
    }
    if (!v.trainable()) {
      (v.has_sharding() ? splitState : otherState) += 1;
      continue;
    }
    int64_t n = 1;
    for (int64_t d : global)
      n *= d;
    paramCount += n;
    params << "  " << pad(v.name(), 34) << pad(shapeText(global), 16)
           << pad(v.has_sharding() ? shardingText(v.sharding()) : "replicated", 22)
           << shapeText(local) << "  " << runtime::formatBytes(bufferBytes(b))
           << "\n";
  }
  os << "parameters: " << runtime::formatCount(paramCount) << "\n"
     << params.str();
  if (std::string untrained = meta(runtime::metadata::kUntrained);
      !untrained.empty())
    os << "not trained (no gradient path to the loss; as PyTorch's optimizers "
          "skip a parameter whose .grad is None, no update, weight decay or "
          "optimizer state): "
       << untrained << "\n";
  if (copies > 0)
    os << "weight copies: " << copies << " " << copyType
       << " copies of the fp32 master weights above, which the step reads "
          "(the update rounds and gathers into them), "
       << runtime::formatBytes(copyBytes) << " per rank\n";
  os << "other state: " << splitState << " split and "
     << otherState
     << " whole tensors (optimizer moments, accumulators, counters); all "
        "state per rank "
     << runtime::formatBytes(stateBytes) << "\n\n";
  if (meta(runtime::metadata::kTrain) == "1") {
    std::string recompute = meta(runtime::metadata::kRecompute);
    os << "recomputation: " << (recompute.empty() ? "none" : recompute)
       << "\n";
    std::string fused = meta(runtime::metadata::kFusedAttention);
    os << "fused attention: "
       << (fused.empty() ? "none (no attention core, --no-fused-attention, "
                           "or not a CPU program in fp32)"
                         : fused)
       << "\n";
    int64_t biases = 0, biasGrads = 0;
    for (const runtime::format::Function &fn : program.functions())
      for (const runtime::format::Instruction &inst : fn.instructions()) {
        biases += inst.kernel() == "matmul_bias";
        biasGrads += inst.kernel() == "matmul_bias_grad";
      }
    os << "matmul epilogues: ";
    if (biases + biasGrads == 0)
      os << "none (no dense layer with a bias, or compiled without "
            "--matmul-epilogues)";
    else
      os << biases << " biases added in their product, " << biasGrads
         << " bias gradients computed with their weight gradient's product "
         << (meta(runtime::metadata::kTarget) == "cuda"
                 ? "(cuBLASLt's BIAS and BGRADA/BGRADB epilogues)"
                 : "(on the CPU as the product and an add or a reduction)");
    os << "\n\n";
  }

  os << explainMemorySpaces(program);

  os << explainFusion(program, data);

  os << explainPipeline(program);

  std::vector<CollectiveInfo> all = listCollectives(program);
  if (all.empty()) {
    os << "collectives: none\n";
    return os.str();
  }
  os << "collectives, in program order (sent: bytes each rank sends with "
        "ring algorithms):\n";
  // The function column fits the longest name (a pipeline stage's
  // "train_step_pp0").
  size_t fnWidth = std::string("function").size();
  for (const CollectiveInfo &c : all)
    fnWidth = std::max(fnWidth, c.function.size());
  fnWidth += 2;
  os << "  " << pad("#", 5) << pad("function", fnWidth) << pad("kind", 16)
     << pad("axis", 8) << pad("phase", 11) << pad("tensor", 12)
     << pad("sent", 12) << "ONNX node\n";
  int i = 0;
  std::map<std::string, std::pair<int64_t, int64_t>> byKey;
  int64_t totalSent = 0;
  for (const CollectiveInfo &c : all) {
    os << "  " << pad(std::to_string(++i), 5) << pad(c.function, fnWidth)
       << pad(c.kind, 16) << pad(c.axes, 8) << pad(c.phase, 11)
       << pad(runtime::formatBytes(c.tensorBytes), 12)
       << pad(runtime::formatBytes(c.sentBytes), 12)
       << (c.node.empty() ? "(no node)" : c.node) << "\n";
    auto &slot = byKey[c.function + "  " + pad(c.phase, 10) + " " +
                       pad(c.kind, 15) + " " + c.axes];
    slot.first += 1;
    slot.second += c.sentBytes;
    totalSent += c.sentBytes;
  }
  os << "\ntotals by function, phase, kind and axis:\n";
  for (const auto &[key, v] : byKey)
    os << "  " << pad(key, 50) << pad(std::to_string(v.first) + " x", 8)
       << runtime::formatBytes(v.second) << " sent\n";
  bool staged = hasPipelineStages(program);
  os << "  all: " << all.size() << " collectives, "
     << runtime::formatBytes(totalSent)
     << (staged ? " sent over all pipeline stages' functions (a rank runs its "
                  "stage's)\n"
                : " sent per rank per call\n");
  return os.str();
}

runtime::StatusOr<std::string>
explainProgramCost(const runtime::format::Program &program,
                   const std::string &clusterName) {
  auto cluster = planner::loadClusterSpec(clusterName);
  int64_t ranks = 1;
  for (int64_t size : program.mesh().sizes())
    ranks *= size;
  if (cluster.isOk())
    cluster = planner::clusterForRanks(cluster.value(), ranks);
  if (!cluster.isOk())
    return cluster.status().withContext("--cluster");
  planner::ProgramMemory memory = planner::programMemory(program);
  auto time = planner::simulateProgram(program, cluster.value());
  if (!time.isOk())
    return time.status();
  return planner::formatProgramCost(memory, &time.value(), cluster.value());
}

mlir::FailureOr<runtime::format::Program>
programToExplain(mlir::ModuleOp module) {
  module.walk([](mlir::Operation *op) {
    auto dropMissing = [](mlir::Attribute a) {
      auto r = llvm::dyn_cast_or_null<mlir::DenseResourceElementsAttr>(a);
      return r && !r.getRawHandle().getBlob();
    };
    if (auto var = llvm::dyn_cast<graph::VariableOp>(op)) {
      if (dropMissing(var.getInitialValueAttr()))
        var.removeInitialValueAttr();
    } else if (auto c = llvm::dyn_cast<graph::ConstantOp>(op)) {
      if (dropMissing(c.getValue()))
        c.setValueAttr(graph::splatOf(
            llvm::cast<mlir::RankedTensorType>(c.getType()), 0.0));
    }
  });
  CompileOptions options;
  options.compileTo = Phase::Exec;
  // What `dtcc compile` builds of it (its regions' kernels are not needed
  // to explain them).
  options.fuse = fusionUnavailable(options.target).empty();
  if (mlir::failed(runPhases(module, options)))
    return mlir::failure();
  auto serialized = serializeProgram(module);
  if (mlir::failed(serialized))
    return mlir::failure();
  return std::move(serialized->program);
}

} // namespace dtcc
