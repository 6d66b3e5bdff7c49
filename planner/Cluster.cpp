//===- Cluster.cpp - cluster presets and cluster files --------------------===//

#include "planner/Cluster.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

namespace dtcc::planner {

using runtime::invalidArgument;
using runtime::notFound;

const char *dtypeName(DType dtype) {
  switch (dtype) {
  case DType::kFp32:
    return "fp32";
  case DType::kTf32:
    return "tf32";
  case DType::kBf16:
    return "bf16";
  case DType::kFp16:
    return "fp16";
  }
  return "unknown";
}

std::optional<DType> parseDType(const std::string &name) {
  for (DType d : {DType::kFp32, DType::kTf32, DType::kBf16, DType::kFp16})
    if (name == dtypeName(d))
      return d;
  return std::nullopt;
}

int dtypeBytes(DType dtype) {
  return dtype == DType::kBf16 || dtype == DType::kFp16 ? 2 : 4;
}

const Figure &DeviceSpec::peak(DType dtype) const {
  switch (dtype) {
  case DType::kFp32:
    return peakFp32;
  case DType::kTf32:
    return peakTf32;
  case DType::kBf16:
    return peakBf16;
  case DType::kFp16:
    return peakFp16;
  }
  return peakFp32;
}

double DeviceSpec::matmulEfficiencyAt(double m, double k, double n) const {
  if (gemmEfficiency.empty())
    return matmulEfficiency.value;
  double size = std::cbrt(std::max(1.0, m) * std::max(1.0, k) *
                          std::max(1.0, n));
  const GemmPoint &first = gemmEfficiency.front();
  const GemmPoint &last = gemmEfficiency.back();
  if (size <= first.n)
    return first.efficiency;
  if (size >= last.n)
    return last.efficiency;
  for (size_t i = 1; i < gemmEfficiency.size(); ++i) {
    const GemmPoint &lo = gemmEfficiency[i - 1], &hi = gemmEfficiency[i];
    if (size > hi.n)
      continue;
    double t = std::log(size / lo.n) / std::log(hi.n / lo.n);
    return lo.efficiency + t * (hi.efficiency - lo.efficiency);
  }
  return last.efficiency;
}

//===----------------------------------------------------------------------===//
// Fields, shared by validation, JSON reading and writing
//===----------------------------------------------------------------------===//

namespace {

/// One leaf of the JSON form: exactly one of the pointers is set.
struct FieldRef {
  const char *path;
  Figure *figure = nullptr;
  std::string *text = nullptr;
  int64_t *integer = nullptr;
  /// For figures: 0 = a positive number, 1 = a fraction in (0, 1],
  /// 2 = a number >= 0.
  int range = 0;
  /// May be left out of a cluster file without "base" (keeps its default).
  bool optional = false;
};

std::vector<FieldRef> clusterFields(ClusterSpec &c) {
  auto fig = [](const char *path, Figure &f, int range = 0) {
    FieldRef r{path};
    r.figure = &f;
    r.range = range;
    return r;
  };
  auto optional = [](FieldRef r) {
    r.optional = true;
    return r;
  };
  auto text = [](const char *path, std::string &s) {
    FieldRef r{path};
    r.text = &s;
    return r;
  };
  FieldRef nodes{"nodes"};
  nodes.integer = &c.nodes;
  return {
      text("name", c.name),
      text("description", c.description),
      nodes,
      text("device.name", c.device.name),
      text("device.kind", c.device.kind),
      fig("device.peakFlops.fp32", c.device.peakFp32),
      fig("device.peakFlops.tf32", c.device.peakTf32),
      fig("device.peakFlops.bf16", c.device.peakBf16),
      fig("device.peakFlops.fp16", c.device.peakFp16),
      fig("device.memoryBytes", c.device.memoryBytes),
      fig("device.memoryBandwidth", c.device.memoryBandwidth),
      fig("device.matmulEfficiency", c.device.matmulEfficiency, 1),
      fig("device.memoryEfficiency", c.device.memoryEfficiency, 1),
      fig("device.attentionEfficiency", c.device.attentionEfficiency, 1),
      fig("device.kernelOverhead", c.device.kernelOverhead, 2),
      optional(fig("device.collectiveShare", c.device.collectiveShare, 2)),
      fig("device.reservedBytes", c.device.reservedBytes, 2),
      fig("node.devicesPerNode", c.devicesPerNode),
      fig("node.pcieBandwidth", c.pcieBandwidth),
      fig("node.hostMemoryBytes", c.hostMemoryBytes, 2),
      fig("node.hostMemoryBandwidth", c.hostMemoryBandwidth),
      text("intraNode.name", c.intraNode.name),
      fig("intraNode.bandwidth", c.intraNode.bandwidth),
      fig("intraNode.latency", c.intraNode.latency, 2),
      fig("intraNode.efficiency", c.intraNode.efficiency, 1),
      text("interNode.name", c.interNode.name),
      fig("interNode.bandwidth", c.interNode.bandwidth),
      fig("interNode.latency", c.interNode.latency, 2),
      optional(fig("interNode.postOverhead", c.interNode.postOverhead, 2)),
      fig("interNode.efficiency", c.interNode.efficiency, 1),
  };
}

Status checkFigure(const FieldRef &field) {
  double v = field.figure->value;
  if (!std::isfinite(v))
    return invalidArgument(field.path, ": expected a finite number");
  if (field.range == 2) {
    if (v < 0)
      return invalidArgument(field.path, ": expected a number >= 0, got ", v);
    return Status::ok();
  }
  if (v <= 0)
    return invalidArgument(field.path, ": expected a positive number, got ",
                           v);
  if (field.range == 1 && v > 1)
    return invalidArgument(field.path,
                           ": expected a fraction in (0, 1], got ", v);
  return Status::ok();
}

} // namespace

Status ClusterSpec::validate() const {
  ClusterSpec copy = *this;
  for (const FieldRef &field : clusterFields(copy))
    if (field.figure)
      DTCC_RETURN_IF_ERROR(checkFigure(field));
  if (nodes < 1)
    return invalidArgument("nodes: expected at least 1, got ", nodes);
  double perNodeValue = devicesPerNode.value;
  if (perNodeValue != std::floor(perNodeValue))
    return invalidArgument("node.devicesPerNode: expected an integer, got ",
                           perNodeValue);
  if (device.kind != "gpu" && device.kind != "cpu")
    return invalidArgument("device.kind: expected \"gpu\" or \"cpu\", got '",
                           device.kind, "'");
  double previous = 0;
  for (const DeviceSpec::GemmPoint &point : device.gemmEfficiency) {
    if (!(point.n > previous))
      return invalidArgument("device.gemmEfficiency: expected sizes "
                             "ascending from above 0, got ",
                             point.n, " after ", previous);
    if (!(point.efficiency > 0 && point.efficiency <= 1))
      return invalidArgument("device.gemmEfficiency: expected efficiencies "
                             "in (0, 1], got ",
                             point.efficiency, " at n = ", point.n);
    previous = point.n;
  }
  for (const auto &[kernel, efficiency] : device.attentionKernels)
    if (!(efficiency.value > 0 && efficiency.value <= 1))
      return invalidArgument("device.attentionKernels.", kernel,
                             ": expected a fraction of the peak in (0, 1], "
                             "got ",
                             efficiency.value);
  for (const auto &[kernel, seconds] : device.kernelSeconds)
    if (!(seconds.value > 0) || !std::isfinite(seconds.value))
      return invalidArgument("device.kernels.", kernel,
                             ": expected a positive number of seconds per "
                             "element, got ",
                             seconds.value);
  for (const auto &[kernel, seconds] : device.kernelByteSeconds)
    if (!(seconds.value > 0) || !std::isfinite(seconds.value))
      return invalidArgument("device.kernelBytes.", kernel,
                             ": expected a positive number of seconds per "
                             "byte, got ",
                             seconds.value);
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Presets
//===----------------------------------------------------------------------===//

namespace {

Figure fig(double value, const std::string &preset, const std::string &why) {
  return Figure{value, "preset " + preset + ": " + why};
}

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kMiB = 1024.0 * 1024.0;

// Shared achieved-efficiency constants of NVIDIA data-center GPUs. They are
// properties of the kind of kernel, the same for every model and every row
// of every table (see docs/planner.md, "Constants").
//
// Sustained GEMM throughput in a training job is the GPU kind's maximum
// achievable matmul FLOP/s (MAMF: the best isolated bf16 matmul, brute-forced
// over shapes; S. Bekman, ml-engineering, compute/accelerator, "Maximum
// Achievable Matmul FLOPS comparison table": A100 SXM 267.9 of 312 TFLOP/s,
// 85.9%; H100 SXM 792.1 of 989, 80.1%) times one factor for every kind,
// kSustainedOfMamf: a training job's GEMMs run at shapes other than the best
// one, for hours, with clocks lowered under the board power cap. It keeps
// the A100 at 0.70 of its datasheet peak, the figure this model has used
// since its first preset (0.815).
constexpr double kMamfA100 = 267.9 / 312.0;
constexpr double kMamfH100 = 792.1 / 989.4;
constexpr double kSustainedOfMamf = 0.70 / kMamfA100;
std::string gemmWhy(const char *kind, const char *mamf) {
  return std::string("sustained dense GEMM throughput in a training job: ") +
         kind + " maximum achievable matmul FLOP/s " + mamf +
         " of the datasheet peak (Bekman, ml-engineering, MAMF table) x 0.815 "
         "for off-best shapes and clocks under the power cap over hours";
}
constexpr double kMemEfficiency = 0.80;
const char *kMemWhy = "memory-bound kernels (copies, elementwise, norms, "
                      "softmax) reach ~80% of HBM bandwidth";

// MPT's Triton FlashAttention (llm-foundry's attn_impl: triton), the kernel
// MosaicML's benchmark tables ran: its fraction of the bf16 peak is the
// median over those tables' pairs of sequence lengths of one model, where
// the time per token grows by attention alone
// (tests/planner_validation/attention_kernel_rates.py derives it and checks
// these figures).
Figure tritonAttention(double fraction, const std::string &p,
                       const char *kind) {
  return fig(fraction, p,
             std::string("MPT's Triton FlashAttention (attn_impl: triton) on ") +
                 kind + ": the median over MosaicML's benchmark tables (llm-"
                 "foundry, scripts/train/benchmarking) of the attention "
                 "FLOP/s that the growth of the time per token with the "
                 "sequence length gives (tests/planner_validation/"
                 "attention_kernel_rates.py)");
}

void nvidiaGpuCommon(ClusterSpec &c, const std::string &p) {
  c.device.memoryEfficiency = fig(kMemEfficiency, p, kMemWhy);
  c.device.kernelOverhead =
      fig(2e-6, p, "gap between back-to-back CUDA kernels, ~2 us");
  c.device.reservedBytes =
      fig(2 * kGiB, p,
          "CUDA context (~0.5 GiB), cuBLAS/NCCL workspaces and allocator "
          "fragmentation, ~2 GiB");
  c.devicesPerNode = fig(8, p, "8 GPUs per node (DGX/HGX baseboard)");
  c.intraNode.latency =
      fig(1e-6, p, "NVLink/NVSwitch hop latency as NCCL sees it, ~1 us");
  c.interNode.latency =
      fig(5e-6, p, "InfiniBand hop latency through NCCL's network proxy, "
                   "~5 us");
  c.interNode.efficiency =
      fig(0.92, p, "nccl-tests all_reduce across nodes reaches ~92% of the "
                   "aggregate NIC bandwidth");
}

ClusterSpec dgxA100() {
  const std::string p = "dgx-a100-80g";
  ClusterSpec c;
  c.name = p;
  c.description = "NVIDIA DGX A100 640GB: 8x A100-SXM4-80GB, NVSwitch, "
                  "8x HDR InfiniBand";
  c.device.name = "A100-SXM4-80GB";
  nvidiaGpuCommon(c, p);
  c.device.matmulEfficiency =
      fig(kSustainedOfMamf * kMamfA100, p, gemmWhy("A100 SXM", "85.9%"));
  c.device.collectiveShare =
      fig(24.0 / 108, p, "NCCL runs a DGX A100 all-reduce on 24 thread blocks "
                         "(NVIDIA/nccl#1225), each holding one of the 108 SMs "
                         "to itself (NVIDIA/nccl#689)");
  c.device.peakFp32 = fig(19.5e12, p, "NVIDIA A100 datasheet, FP32");
  c.device.peakTf32 = fig(156e12, p, "NVIDIA A100 datasheet, TF32 dense");
  c.device.peakBf16 = fig(312e12, p, "NVIDIA A100 datasheet, BF16 dense");
  c.device.peakFp16 = fig(312e12, p, "NVIDIA A100 datasheet, FP16 dense");
  c.device.memoryBytes =
      fig(81920 * kMiB, p, "nvidia-smi total memory, 81920 MiB");
  c.device.memoryBandwidth =
      fig(2.039e12, p, "NVIDIA A100 80GB SXM datasheet, HBM2e 2,039 GB/s");
  c.device.attentionEfficiency =
      fig(0.50, p, "FlashAttention-2 reaches 50-70% of A100 peak forward, "
                   "less backward");
  c.device.attentionKernels["flash-attn-triton"] =
      tritonAttention(0.309, p, "the A100");
  c.intraNode.name = "NVLink 3 (NVSwitch)";
  c.intraNode.bandwidth =
      fig(300e9, p, "600 GB/s bidirectional NVLink per GPU, 300 per "
                    "direction (datasheet)");
  c.intraNode.efficiency =
      fig(0.77, p, "nccl-tests all_reduce_perf bus bandwidth ~230 GB/s on "
                   "8x A100");
  c.interNode.name = "InfiniBand HDR";
  c.interNode.bandwidth =
      fig(25e9, p, "one 200 Gb/s HDR HCA per GPU (DGX A100 datasheet)");
  c.interNode.postOverhead =
      fig(2e-6, p, "NCCL's network post overhead on AMD hosts (2x EPYC "
                   "7742), 2 us (src/graph/tuning.cc, getNetOverhead)");
  c.pcieBandwidth =
      fig(25e9, p, "PCIe Gen4 x16, pinned cudaMemcpy ~25 GB/s per GPU");
  c.hostMemoryBytes = fig(2e12, p, "DGX A100 640GB datasheet, 2 TB system "
                                   "memory");
  c.hostMemoryBandwidth =
      fig(300e9, p, "2x AMD EPYC 7742, 16 channels DDR4-3200 (410 GB/s "
                    "theoretical, ~300 GB/s STREAM)");
  return c;
}

/// The DGX A100 320GB node: the same NVSwitch, HDR InfiniBand, PCIe and host
/// as dgx-a100-80g; 40 GB of HBM2 per GPU at 1,555 GB/s.
ClusterSpec dgxA100_40g() {
  const std::string p = "dgx-a100-40g";
  ClusterSpec c = dgxA100();
  c.name = p;
  c.description = "NVIDIA DGX A100 320GB: 8x A100-SXM4-40GB, NVSwitch, "
                  "8x HDR InfiniBand";
  c.device.name = "A100-SXM4-40GB";
  // Every figure but the memory is the 80 GB node's; relabel their source.
  auto relabel = [&](Figure &f) {
    f.source = "preset " + p + ": as dgx-a100-80g (" +
               f.source.substr(f.source.find(": ") + 2) + ")";
  };
  for (Figure *f :
       {&c.device.peakFp32, &c.device.peakTf32, &c.device.peakBf16,
        &c.device.peakFp16, &c.device.matmulEfficiency,
        &c.device.memoryEfficiency, &c.device.attentionEfficiency,
        &c.device.kernelOverhead, &c.device.collectiveShare,
        &c.device.reservedBytes, &c.devicesPerNode,
        &c.intraNode.bandwidth, &c.intraNode.latency, &c.intraNode.efficiency,
        &c.interNode.bandwidth, &c.interNode.latency, &c.interNode.efficiency,
        &c.interNode.postOverhead,
        &c.pcieBandwidth, &c.hostMemoryBandwidth})
    relabel(*f);
  for (auto &[kernel, f] : c.device.attentionKernels)
    relabel(f);
  c.device.memoryBytes =
      fig(40960 * kMiB, p, "nvidia-smi total memory, 40960 MiB");
  c.device.memoryBandwidth =
      fig(1.555e12, p, "NVIDIA A100 40GB SXM datasheet, HBM2 1,555 GB/s");
  c.hostMemoryBytes = fig(1e12, p, "DGX A100 320GB datasheet, 1 TB system "
                                   "memory");
  return c;
}

void hopperCommon(ClusterSpec &c, const std::string &p) {
  c.device.matmulEfficiency =
      fig(kSustainedOfMamf * kMamfH100, p, gemmWhy("H100 SXM", "80.1%"));
  c.device.collectiveShare =
      fig(24.0 / 132, p, "NCCL's all-gather on an H100 runs on 24 thread "
                         "blocks (an nsys trace of FSDP's prefetch, NVIDIA "
                         "developer forum 337991), each holding one of the "
                         "132 SMs to itself (NVIDIA/nccl#689)");
  c.device.peakFp32 = fig(66.9e12, p, "NVIDIA H100 SXM datasheet, FP32");
  c.device.peakTf32 = fig(494.7e12, p, "NVIDIA H100 SXM datasheet, TF32 "
                                       "dense");
  c.device.peakBf16 = fig(989.4e12, p, "NVIDIA H100 SXM datasheet, BF16 "
                                       "dense");
  c.device.peakFp16 = fig(989.4e12, p, "NVIDIA H100 SXM datasheet, FP16 "
                                       "dense");
  c.device.attentionEfficiency =
      fig(0.35, p, "FlashAttention-2, the fused attention of PyTorch SDPA "
                   "and of the published H100 runs, reaches ~35% of the "
                   "H100 peak (Shah et al., FlashAttention-3, 2024, "
                   "abstract); FlashAttention-3's 60-75% needs Hopper's "
                   "TMA/WGMMA kernels");
  c.device.attentionKernels["flash-attn-triton"] =
      tritonAttention(0.177, p, "the H100");
  c.intraNode.name = "NVLink 4 (NVSwitch)";
  c.intraNode.bandwidth =
      fig(450e9, p, "900 GB/s bidirectional NVLink per GPU, 450 per "
                    "direction (datasheet)");
  c.intraNode.efficiency =
      fig(370.0 / 450.0, p, "nccl-tests ring all_reduce bus bandwidth ~370 "
                            "GB/s on 8x H100");
  c.interNode.name = "InfiniBand NDR";
  c.interNode.bandwidth =
      fig(50e9, p, "one 400 Gb/s NDR ConnectX-7 port per GPU");
  c.interNode.postOverhead =
      fig(1e-6, p, "NCCL's network post overhead on Intel hosts (2x Xeon "
                   "8480C), 1 us (src/graph/tuning.cc, getNetOverhead)");
  c.pcieBandwidth =
      fig(50e9, p, "PCIe Gen5 x16, pinned cudaMemcpy ~50 GB/s per GPU");
  c.hostMemoryBytes = fig(2e12, p, "DGX H100 datasheet, 2 TB system memory");
  c.hostMemoryBandwidth =
      fig(450e9, p, "2x Xeon 8480C, 16 channels DDR5-4800 (614 GB/s "
                    "theoretical, ~450 GB/s STREAM)");
}

ClusterSpec dgxH100() {
  const std::string p = "dgx-h100";
  ClusterSpec c;
  c.name = p;
  c.description = "NVIDIA DGX H100: 8x H100-SXM5-80GB, NVSwitch, 8x NDR "
                  "InfiniBand";
  c.device.name = "H100-SXM5-80GB";
  nvidiaGpuCommon(c, p);
  hopperCommon(c, p);
  c.device.memoryBytes =
      fig(81559 * kMiB, p, "nvidia-smi total memory, 81559 MiB");
  c.device.memoryBandwidth =
      fig(3.35e12, p, "NVIDIA H100 SXM datasheet, HBM3 3.35 TB/s");
  return c;
}

ClusterSpec h200() {
  const std::string p = "h200";
  ClusterSpec c;
  c.name = p;
  c.description = "one HGX/DGX H200 node: 8x H200-SXM-141GB, NVSwitch, 8x NDR "
                  "InfiniBand";
  c.device.name = "H200-SXM-141GB";
  nvidiaGpuCommon(c, p);
  hopperCommon(c, p);
  c.device.memoryBytes =
      fig(141e9, p, "NVIDIA H200 datasheet, 141 GB HBM3e");
  c.device.memoryBandwidth =
      fig(4.8e12, p, "NVIDIA H200 datasheet, HBM3e 4.8 TB/s");
  return c;
}

ClusterSpec cpuLocal() {
  const std::string p = "cpu-local";
  ClusterSpec c;
  c.name = p;
  c.description = "the CPU backend: MPI ranks on one x86-64 host, one core "
                  "per rank; nominal figures, calibrate for real ones";
  c.device.name = "x86-64 core (AVX2)";
  c.device.kind = "cpu";
  const char *peakWhy =
      "nominal: 2 FMA ports x 8 fp32 lanes x 2 FLOP x 2 GHz";
  c.device.peakFp32 = fig(64e9, p, peakWhy);
  c.device.peakTf32 = fig(64e9, p, "no tf32 units: computes in fp32");
  c.device.peakBf16 = fig(64e9, p, "no bf16 units: computes in fp32");
  c.device.peakFp16 = fig(64e9, p, "no fp16 units: computes in fp32");
  c.device.memoryBytes = fig(8 * kGiB, p, "nominal share of host memory per "
                                          "rank");
  c.device.memoryBandwidth =
      fig(10e9, p, "nominal single-core DRAM bandwidth");
  c.device.matmulEfficiency = fig(0.6, p, "OpenBLAS sgemm on one core");
  c.device.memoryEfficiency = fig(0.7, p, "streaming kernels on one core");
  c.device.attentionEfficiency = fig(0.3, p, "unfused attention on CPU");
  c.device.kernelOverhead = fig(1e-6, p, "function call and dispatch");
  c.device.collectiveShare =
      fig(0, p, "a CPU rank's collective takes its core while it runs, "
                "which the program simulator models apart");
  c.device.reservedBytes = fig(0.25 * kGiB, p, "runtime and MPI buffers");
  c.devicesPerNode = fig(2, p, "2 ranks, like the project's 2-core CI host");
  c.intraNode.name = "shared memory (MPI)";
  c.intraNode.bandwidth = fig(5e9, p, "MPI shared-memory transport");
  c.intraNode.latency = fig(1e-6, p, "MPI shared-memory latency");
  c.intraNode.efficiency = fig(0.7, p, "MPI collectives over shared memory");
  c.interNode.name = "Ethernet 10 Gb/s";
  c.interNode.bandwidth = fig(1.25e9, p, "10 GbE");
  c.interNode.latency = fig(20e-6, p, "TCP latency");
  c.interNode.efficiency = fig(0.8, p, "MPI over TCP");
  c.pcieBandwidth = fig(10e9, p, "host memory copy (no PCIe: device memory "
                                 "is host memory)");
  c.hostMemoryBytes = fig(16 * kGiB, p, "nominal host memory");
  c.hostMemoryBandwidth = fig(20e9, p, "nominal host DRAM bandwidth");
  return c;
}

} // namespace

std::vector<std::string> clusterPresetNames() {
  return {"dgx-a100-80g", "dgx-a100-40g", "dgx-h100", "h200", "cpu-local"};
}

StatusOr<ClusterSpec> clusterPreset(const std::string &name) {
  if (name == "dgx-a100-80g")
    return dgxA100();
  if (name == "dgx-a100-40g")
    return dgxA100_40g();
  if (name == "dgx-h100")
    return dgxH100();
  if (name == "h200")
    return h200();
  if (name == "cpu-local")
    return cpuLocal();
  std::string known;
  for (const std::string &n : clusterPresetNames())
    known += (known.empty() ? "" : ", ") + n;
  return notFound("unknown cluster preset '", name, "' (presets: ", known,
                  "; or give a cluster file)");
}

//===----------------------------------------------------------------------===//
// JSON
//===----------------------------------------------------------------------===//

namespace {

/// Sets `value` at a dotted path inside `root`, creating objects.
void setPath(Json &root, const std::string &path, Json value) {
  Json *node = &root;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string key = path.substr(start, dot - start);
    if (dot == std::string::npos) {
      node->set(key, std::move(value));
      return;
    }
    const Json *existing = node->find(key);
    if (!existing)
      node = &node->set(key, Json::object());
    else
      node = const_cast<Json *>(existing);
    start = dot + 1;
  }
}

Json figureJson(const Figure &f) {
  Json j = Json::object();
  j.set("value", f.value);
  j.set("source", f.source);
  return j;
}

Status readFigure(const Json &value, const std::string &path,
                  const std::string &defaultSource, Figure &out) {
  if (value.isNumber()) {
    out = Figure{value.asNumber(), defaultSource};
    return Status::ok();
  }
  if (!value.isObject())
    return invalidArgument(path, ": expected a number or {\"value\", "
                                 "\"source\"}, got ",
                           Json::kindName(value.kind()));
  const Json *v = value.find("value");
  if (!v || !v->isNumber())
    return invalidArgument(path, ".value: expected a number, got ",
                           v ? Json::kindName(v->kind()) : "nothing");
  Figure f{v->asNumber(), defaultSource};
  for (const auto &[key, member] : value.members()) {
    if (key == "value")
      continue;
    if (key != "source")
      return invalidArgument(path, ": unknown field '", key,
                             "' (a figure has 'value' and 'source')");
    if (!member.isString())
      return invalidArgument(path, ".source: expected a string, got ",
                             Json::kindName(member.kind()));
    f.source = member.asString();
  }
  out = f;
  return Status::ok();
}

} // namespace

Json clusterToJson(const ClusterSpec &cluster) {
  ClusterSpec copy = cluster;
  Json root = Json::object();
  for (const FieldRef &field : clusterFields(copy)) {
    if (field.figure)
      setPath(root, field.path, figureJson(*field.figure));
    else if (field.text)
      setPath(root, field.path, Json(*field.text));
    else
      setPath(root, field.path, Json(*field.integer));
  }
  Json &device = const_cast<Json &>(*root.find("device"));
  if (!cluster.device.gemmEfficiency.empty()) {
    Json points = Json::array();
    for (const DeviceSpec::GemmPoint &p : cluster.device.gemmEfficiency) {
      Json point = Json::array();
      point.push(p.n);
      point.push(p.efficiency);
      points.push(std::move(point));
    }
    Json curve = Json::object();
    curve.set("points", std::move(points));
    curve.set("source", cluster.device.gemmEfficiencySource);
    device.set("gemmEfficiency", std::move(curve));
  }
  if (!cluster.device.attentionKernels.empty()) {
    Json kernels = Json::object();
    for (const auto &[kernel, efficiency] : cluster.device.attentionKernels)
      kernels.set(kernel, figureJson(efficiency));
    device.set("attentionKernels", std::move(kernels));
  }
  if (!cluster.device.kernelSeconds.empty()) {
    Json kernels = Json::object();
    for (const auto &[kernel, seconds] : cluster.device.kernelSeconds)
      kernels.set(kernel, figureJson(seconds));
    device.set("kernels", std::move(kernels));
  }
  if (!cluster.device.kernelByteSeconds.empty()) {
    Json kernels = Json::object();
    for (const auto &[kernel, seconds] : cluster.device.kernelByteSeconds)
      kernels.set(kernel, figureJson(seconds));
    device.set("kernelBytes", std::move(kernels));
  }
  if (!cluster.calibration.isNull())
    root.set("calibration", cluster.calibration);
  return root;
}

namespace {

/// `device.gemmEfficiency`: {"points": [[n, efficiency], ...], "source"}.
Status readGemmCurve(const Json &value, const std::string &defaultSource,
                     DeviceSpec &device) {
  const char *path = "device.gemmEfficiency";
  if (!value.isObject())
    return invalidArgument(path, ": expected {\"points\": [[n, efficiency], "
                                 "...], \"source\": ...}, got ",
                           Json::kindName(value.kind()));
  device.gemmEfficiency.clear();
  device.gemmEfficiencySource = defaultSource;
  for (const auto &[key, member] : value.members()) {
    if (key == "source") {
      if (!member.isString())
        return invalidArgument(path, ".source: expected a string, got ",
                               Json::kindName(member.kind()));
      device.gemmEfficiencySource = member.asString();
      continue;
    }
    if (key != "points")
      return invalidArgument(path, ": unknown field '", key,
                             "' (expected points and source)");
    if (!member.isArray())
      return invalidArgument(path, ".points: expected an array, got ",
                             Json::kindName(member.kind()));
    for (const Json &point : member.items()) {
      if (!point.isArray() || point.items().size() != 2 ||
          !point.items()[0].isNumber() || !point.items()[1].isNumber())
        return invalidArgument(path, ".points: expected [n, efficiency] "
                                     "pairs of numbers");
      device.gemmEfficiency.push_back(
          {point.items()[0].asNumber(), point.items()[1].asNumber()});
    }
  }
  return Status::ok();
}

/// An object of named figures at `path` ({"gelu": figure, ...}), added to
/// `figures` (a name already there is replaced).
Status readNamedFigures(const Json &value, const std::string &path,
                        const std::string &defaultSource,
                        std::map<std::string, Figure> &figures) {
  if (!value.isObject())
    return invalidArgument(path, ": expected an object of kernel names, got ",
                           Json::kindName(value.kind()));
  for (const auto &[kernel, member] : value.members())
    DTCC_RETURN_IF_ERROR(readFigure(member, path + "." + kernel, defaultSource,
                                    figures[kernel]));
  return Status::ok();
}

Status readObject(const Json &object, const std::string &prefix,
                  std::vector<FieldRef> &fields, std::vector<bool> &seen,
                  const std::string &defaultSource, ClusterSpec &cluster) {
  for (const auto &member : object.members()) {
    const std::string &key = member.first;
    const Json &value = member.second;
    std::string path = prefix.empty() ? key : prefix + "." + key;
    if (prefix.empty() && (key == "base" || key == "calibration"))
      continue;
    if (path == "device.gemmEfficiency") {
      DTCC_RETURN_IF_ERROR(readGemmCurve(value, defaultSource, cluster.device));
      continue;
    }
    if (path == "device.kernels") {
      // Measured rates of the backend's kernels: the file's set replaces
      // its base's.
      // Its rates per byte too, unless the file gives those (in either
      // order).
      cluster.device.kernelSeconds.clear();
      bool hasBytes = false;
      for (const auto &other : object.members())
        hasBytes |= other.first == "kernelBytes";
      if (!hasBytes)
        cluster.device.kernelByteSeconds.clear();
      DTCC_RETURN_IF_ERROR(readNamedFigures(value, path, defaultSource,
                                            cluster.device.kernelSeconds));
      continue;
    }
    if (path == "device.kernelBytes") {
      cluster.device.kernelByteSeconds.clear();
      DTCC_RETURN_IF_ERROR(readNamedFigures(value, path, defaultSource,
                                            cluster.device.kernelByteSeconds));
      continue;
    }
    if (path == "device.attentionKernels") {
      DTCC_RETURN_IF_ERROR(readNamedFigures(value, path, defaultSource,
                                            cluster.device.attentionKernels));
      continue;
    }
    bool matched = false, isParent = false;
    for (size_t i = 0; i < fields.size(); ++i) {
      FieldRef &field = fields[i];
      if (path == field.path) {
        matched = true;
        seen[i] = true;
        if (field.figure) {
          DTCC_RETURN_IF_ERROR(
              readFigure(value, path, defaultSource, *field.figure));
        } else if (field.text) {
          if (!value.isString())
            return invalidArgument(path, ": expected a string, got ",
                                   Json::kindName(value.kind()));
          *field.text = value.asString();
        } else {
          if (!value.isNumber() ||
              value.asNumber() != std::floor(value.asNumber()))
            return invalidArgument(path, ": expected an integer, got ",
                                   Json::kindName(value.kind()));
          *field.integer = int64_t(value.asNumber());
        }
        break;
      }
      if (std::string(field.path).rfind(path + ".", 0) == 0)
        isParent = true;
    }
    if (matched)
      continue;
    if (!isParent)
      return invalidArgument("unknown field '", path, "'");
    if (!value.isObject())
      return invalidArgument(path, ": expected an object, got ",
                             Json::kindName(value.kind()));
    DTCC_RETURN_IF_ERROR(
        readObject(value, path, fields, seen, defaultSource, cluster));
  }
  return Status::ok();
}

} // namespace

StatusOr<ClusterSpec> clusterFromJson(const Json &json,
                                      const std::string &defaultSource) {
  if (!json.isObject())
    return invalidArgument("expected an object at the top level, got ",
                           Json::kindName(json.kind()));
  ClusterSpec cluster;
  bool fromBase = false;
  if (const Json *base = json.find("base")) {
    if (!base->isString())
      return invalidArgument("base: expected a preset name, got ",
                             Json::kindName(base->kind()));
    auto preset = clusterPreset(base->asString());
    if (!preset.isOk())
      return preset.status().withContext("base");
    cluster = std::move(preset.value());
    fromBase = true;
  }
  std::vector<FieldRef> fields = clusterFields(cluster);
  std::vector<bool> seen(fields.size(), false);
  DTCC_RETURN_IF_ERROR(
      readObject(json, "", fields, seen, defaultSource, cluster));
  if (const Json *calibration = json.find("calibration"))
    cluster.calibration = *calibration;
  if (!fromBase) {
    for (size_t i = 0; i < fields.size(); ++i) {
      if (seen[i] || fields[i].integer || fields[i].text || fields[i].optional)
        continue;
      return invalidArgument("missing field '", fields[i].path,
                             "' (or start from a preset with \"base\")");
    }
  }
  DTCC_RETURN_IF_ERROR(cluster.validate());
  return cluster;
}

StatusOr<ClusterSpec> parseClusterText(const std::string &text,
                                       const std::string &fileName) {
  auto endsWith = [&](const std::string &suffix) {
    return fileName.size() >= suffix.size() &&
           fileName.compare(fileName.size() - suffix.size(), suffix.size(),
                            suffix) == 0;
  };
  StatusOr<Json> json = endsWith(".yaml") || endsWith(".yml")
                            ? parseYamlSubset(text)
                            : Json::parse(text);
  if (!json.isOk())
    return json.status().withContext(fileName);
  auto cluster = clusterFromJson(json.value(), "cluster file " + fileName);
  if (!cluster.isOk())
    return cluster.status().withContext(fileName);
  return cluster;
}

StatusOr<ClusterSpec> loadClusterSpec(const std::string &presetOrFile) {
  bool file = presetOrFile.find('.') != std::string::npos ||
              presetOrFile.find('/') != std::string::npos;
  return file ? loadClusterFile(presetOrFile) : clusterPreset(presetOrFile);
}

StatusOr<ClusterSpec> loadClusterFile(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    return notFound("cannot open cluster file '", path, "'");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return parseClusterText(buffer.str(), path);
}

} // namespace dtcc::planner
