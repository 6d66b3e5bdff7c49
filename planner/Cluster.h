//===- Cluster.h - devices, nodes and links the planner plans for -*- C++ -*-===//
//
// A cluster spec describes one kind of node (its devices, links inside and
// between nodes, host memory) and how many such nodes there are. Every figure
// carries the source it came from, so a report can say why it believes a
// number.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_PLANNER_CLUSTER_H
#define DTCC_PLANNER_CLUSTER_H

#include "planner/Json.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dtcc::planner {

/// Numeric formats the planner knows; kTf32 is fp32 storage computed on
/// tensor cores.
enum class DType { kFp32, kTf32, kBf16, kFp16 };

/// "fp32", "tf32", "bf16", "fp16".
const char *dtypeName(DType dtype);
std::optional<DType> parseDType(const std::string &name);
/// Storage bytes of one element (tf32 is stored as fp32).
int dtypeBytes(DType dtype);

/// A number and where it came from ("preset dgx-h100: NVIDIA datasheet",
/// "calibrated 2026-11-22 on host X", "cluster file my.json").
struct Figure {
  double value = 0;
  std::string source;
};

/// One accelerator (or, for cpu-local, one CPU rank).
struct DeviceSpec {
  std::string name;
  /// "gpu" or "cpu": which dtcc backend runs on it. The CPU backend computes
  /// in fp32 (and fuses attention), which the planner then models.
  std::string kind = "gpu";
  bool isCpu() const { return kind == "cpu"; }
  /// Dense peak FLOP/s per compute type.
  Figure peakFp32, peakTf32, peakBf16, peakFp16;
  Figure memoryBytes;     ///< device memory capacity
  Figure memoryBandwidth; ///< bytes/s
  /// Fraction of peak FLOP/s that large GEMMs sustain in a training job.
  Figure matmulEfficiency;
  /// Fraction of memory bandwidth that memory-bound kernels (elementwise,
  /// norms, softmax) reach.
  Figure memoryEfficiency;
  /// Fraction of peak FLOP/s that fused (flash) attention kernels reach:
  /// FlashAttention-2 in the presets, dtcc's own kernels once calibrated.
  Figure attentionEfficiency;
  /// Other fused attention kernels by name ("flash-attn-triton"), with the
  /// fraction of the peak each reaches, for pricing a run that used one: a
  /// plan file's model names its run's kernel (ModelDesc::attentionKernel)
  /// and that run's attention is priced at the kernel's figure instead of
  /// attentionEfficiency (planner/Model.h, useModelAttentionKernel). A cluster file's
  /// `device.attentionKernels` adds or replaces entries.
  std::map<std::string, Figure> attentionKernels;
  /// Gap between consecutive kernels (launch and tail), seconds.
  Figure kernelOverhead;
  /// Fraction of the device's compute that a running collective holds: each
  /// NCCL channel is a thread block that keeps an SM to itself, so work
  /// overlapped with a collective runs that much slower. GPUs only (a CPU
  /// rank's collective takes its core, which the simulator models apart);
  /// optional in a cluster file (0 when not given).
  Figure collectiveShare{0, "not given: collectives take no compute"};
  /// Memory the runtime holds that the model cannot use: CUDA context,
  /// cuBLAS and NCCL workspaces, allocator fragmentation.
  Figure reservedBytes;

  /// Matmul efficiency by size (dtcc calibrate measures it; presets leave
  /// it empty): points (n, fraction of the peak) of n x n x n products,
  /// ascending n; one curve for every dtype, applied to the peak of the
  /// product's dtype (a GPU calibration measures it on bf16). A product of
  /// m x k by k x n is read at n' = cbrt(m k n), interpolated in log n' and
  /// clamped at the ends.
  /// Empty: matmulEfficiency for every product.
  struct GemmPoint {
    double n = 0;
    double efficiency = 0;
  };
  std::vector<GemmPoint> gemmEfficiency;
  std::string gemmEfficiencySource;
  /// Measured seconds per element of the backend's own kernels, by kernel
  /// name as a compiled program's instructions name them ("gelu",
  /// "layer_norm_grad"); an instruction's elements are those of its
  /// largest operand or result. Kernels not listed fall back to the
  /// roofline (bytes over memory bandwidth).
  std::map<std::string, Figure> kernelSeconds;
  /// Measured seconds per byte of the same kernels on GPUs, where every
  /// kernel but a matrix product is bound by memory: an instruction is
  /// priced by its operands' and results' bytes (a bf16 instruction moves
  /// half what the f32 sample did), except the lookups and top_k, which
  /// keep their own element counts. Written by `dtcc calibrate --device
  /// cuda`; kernels without one keep kernelSeconds.
  std::map<std::string, Figure> kernelByteSeconds;

  const Figure &peak(DType dtype) const;
  /// The matmul efficiency of an m x k by k x n product: gemmEfficiency
  /// at cbrt(m k n), or matmulEfficiency when there is no curve.
  double matmulEfficiencyAt(double m, double k, double n) const;
  double peakFlops(DType dtype) const { return peak(dtype).value; }
};

/// A link class: bandwidth per device and direction, per-hop latency, and the
/// fraction of the bandwidth that NCCL collectives reach (nccl-tests bus
/// bandwidth / link bandwidth).
struct LinkSpec {
  std::string name; ///< "NVLink 4", "InfiniBand NDR"
  Figure bandwidth; ///< bytes/s per device, one direction
  Figure latency;   ///< seconds per hop
  Figure efficiency;
  /// The network's post overhead (interNode only): NCCL charges each ring
  /// step of a collective across nodes at least 3x it for the bandwidth
  /// protocol (src/graph/tuning.cc: getNetOverhead, 1 us on Intel hosts,
  /// 2 us on AMD); 0: not counted.
  Figure postOverhead{0, "not given: not counted"};
  /// Achieved bus bandwidth: bandwidth * efficiency.
  double busBandwidth() const { return bandwidth.value * efficiency.value; }
};

/// A cluster: `nodes` identical nodes of `devicesPerNode` devices.
struct ClusterSpec {
  std::string name;
  std::string description;
  DeviceSpec device;
  Figure devicesPerNode;
  LinkSpec intraNode; ///< device to device inside a node (NVLink)
  LinkSpec interNode; ///< per device (one NIC per device) between nodes
  Figure pcieBandwidth;       ///< host <-> device, bytes/s per device
  Figure hostMemoryBytes;     ///< per node
  Figure hostMemoryBandwidth; ///< per node, bytes/s (CPU optimizer step)
  int64_t nodes = 1;
  /// What `dtcc calibrate` measured (its raw samples and how), kept verbatim
  /// in the file's "calibration" object; null for presets.
  Json calibration;

  int64_t perNode() const { return int64_t(devicesPerNode.value); }
  int64_t numDevices() const { return nodes * perNode(); }

  /// Checks that every figure is positive and efficiencies are in (0, 1];
  /// the error names the field.
  Status validate() const;
};

/// Names of the built-in presets: dgx-a100-80g, dgx-a100-40g, dgx-h100, h200,
/// cpu-local.
std::vector<std::string> clusterPresetNames();
/// A preset with `nodes` = 1; unknown names are an error listing the presets.
StatusOr<ClusterSpec> clusterPreset(const std::string &name);

/// JSON form (documented in docs/planner.md). Figures are written as
/// {"value": v, "source": s}; when reading, a bare number is accepted and its
/// source becomes `defaultSource`.
Json clusterToJson(const ClusterSpec &cluster);
StatusOr<ClusterSpec> clusterFromJson(const Json &json,
                                      const std::string &defaultSource);

/// A preset by name, or a cluster file: a name with '.' or '/' in it is a
/// file (loadClusterFile), else a preset (clusterPreset).
StatusOr<ClusterSpec> loadClusterSpec(const std::string &presetOrFile);

/// Reads a cluster file: JSON, or the YAML subset for `.yaml`/`.yml`. A file
/// may start from a preset (`"base": "dgx-h100"`) and override fields.
/// Errors name the file and the field ("cluster.json: device.memoryBytes:
/// expected a number, got a string").
StatusOr<ClusterSpec> loadClusterFile(const std::string &path);
/// Parses file contents; `fileName` picks the format and labels errors.
StatusOr<ClusterSpec> parseClusterText(const std::string &text,
                                       const std::string &fileName);

} // namespace dtcc::planner

#endif // DTCC_PLANNER_CLUSTER_H
