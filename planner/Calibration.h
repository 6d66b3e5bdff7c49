//===- Calibration.h - a cluster spec from measurements ---------*- C++ -*-===//
//
// What `dtcc calibrate` measures on the machine it runs on (the backend's
// matmul kernel by size and its other kernels, memory bandwidth, collectives
// over the runtime's communicators) and how those samples become a
// ClusterSpec whose every figure says how it was measured: the CPU backend's
// (CalibrationData) and the CUDA backend's (GpuCalibrationData). The
// measuring itself lives in tools/dtcc-calibrate (it needs the runtime's
// kernels, OpenBLAS, MPI, CUDA and NCCL); this part is plain arithmetic,
// unit-tested.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_PLANNER_CALIBRATION_H
#define DTCC_PLANNER_CALIBRATION_H

#include "planner/Cluster.h"

#include <string>
#include <vector>

namespace dtcc::planner {

/// OpenBLAS sgemm C(n x n) = A(n x n) B(n x n) called directly on all
/// cores, the best of short rounds (for information: the device figures
/// are one core's).
struct GemmSample {
  int64_t n = 0;
  int threads = 1;
  double flopsPerSecond = 0;
};

/// The CPU backend's own `matmul` kernel (OpenBLAS sgemm behind the kernel
/// interface, bound through the registry as a program binds it) on an f32
/// n x n by n x n product, 1 thread, sustained: the median of windows of
/// CalibrationData::matmulWindowSeconds.
struct MatmulSample {
  int64_t n = 0;
  double flopsPerSecond = 0;
};

/// One of the backend's kernels bound through its registry on a workload
/// shaped like the training programs' own, 1 thread, sustained: the median
/// of windows of CalibrationData::kernelWindowSeconds.
struct KernelSample {
  std::string kernel;   ///< as instructions name it ("gelu")
  std::string workload; ///< "512x512xf32 -> 512x512xf32 {approximate = none}"
  /// Elements of the workload's largest operand or result (summed over its
  /// calls when it has several), as the program cost model counts them.
  int64_t elements = 0;
  double seconds = 0; ///< per run of the workload
  /// Bytes of its operands and results (0: not counted); a GPU sample
  /// gives device.kernelByteSeconds.
  int64_t bytes = 0;
};

/// A STREAM-style triad a[i] = b[i] + s * c[i] over three arrays of
/// `arrayBytes` each; bytes moved per element: 3 x 4 (reads and the write,
/// no write-allocate counted, as STREAM).
struct StreamSample {
  int threads = 1;
  int64_t arrayBytes = 0;
  double bytesPerSecond = 0;
};

/// One collective on `ranks` ranks with a `payloadBytes` buffer (the
/// nccl-tests "size": the all-reduce buffer, the all-gather output), median
/// seconds over the repetitions, slowest rank.
struct CollectiveSample {
  std::string kind; ///< "all-reduce" or "all-gather"
  int64_t ranks = 0;
  double payloadBytes = 0;
  double seconds = 0;
};

/// Everything one calibration run measured and where.
struct CalibrationData {
  std::string host;     ///< hostname of rank 0
  std::string date;     ///< UTC, ISO 8601
  std::string cpuModel; ///< /proc/cpuinfo "model name"
  std::string blas;     ///< OpenBLAS's configuration string
  int64_t cores = 1;    ///< online CPUs
  double memTotalBytes = 0;
  /// Device figures were measured on every rank at once (under a launcher),
  /// and each figure is the slowest rank's.
  bool concurrent = false;
  std::vector<GemmSample> gemm;
  /// The matmul kernel by size (ascending n); its best rate is the peak.
  std::vector<MatmulSample> matmul;
  double matmulWindowSeconds = 0.15;
  std::vector<KernelSample> kernels;
  double kernelWindowSeconds = 0.01;
  std::vector<StreamSample> stream;
  /// Seconds of one tiny (8 x 8 x 8) sgemm call: the cost of a kernel that
  /// does next to nothing.
  double callOverheadSeconds = 0;
  /// The job: launcher ("single", "mpirun", ...), ranks, distinct hosts, the
  /// transport the collectives ran over ("Open MPI, btl self,tcp").
  std::string launcher = "single";
  int64_t ranks = 1;
  int64_t hosts = 1;
  std::string transport;
  std::vector<CollectiveSample> collectives;
};

/// A link's figures fitted from collective samples with the time model's
/// own formula t = latency x steps + bus volume / bus bandwidth (steps =
/// min(ring, tree), as TimeModel::collectiveTime): the latency from the
/// small messages (<= 4 KiB), the bandwidth from the large ones (>= 1 MiB)
/// after subtracting it.
struct LinkFit {
  double busBandwidth = 0; ///< bytes/s
  double latency = 0;      ///< seconds per step
  int smallSamples = 0, largeSamples = 0;
};
/// Errors when there are no samples of either size class.
StatusOr<LinkFit> fitLink(const std::vector<CollectiveSample> &samples);

/// The matmul kernel's best rate and its size, or null.
const MatmulSample *bestMatmul(const CalibrationData &data);
/// The matmul kernel's sample of size `n`, or null.
const MatmulSample *matmulAt(const CalibrationData &data, int64_t n);

/// The cluster the measurements describe, starting from `base` for what was
/// not measured (whose sources then say so). One device is one core (the
/// CPU backend runs one rank per core with OPENBLAS_NUM_THREADS=1):
/// - peak FLOP/s (every dtype: the backend computes in fp32) = the matmul
///   kernel's best rate; gemmEfficiency = every size's rate over it;
///   matmul efficiency = its n = 256 point (the size of the CPU models'
///   products); attention efficiency = its n = 64 point (per-head
///   products);
/// - kernelSeconds = each kernel sample's seconds over its elements;
/// - memory bandwidth = the single-thread triad on arrays larger than the
///   caches, efficiency 1 (the figure is already achieved bandwidth);
/// - kernel overhead = the tiny sgemm's time; memory = MemTotal / cores;
///   devices per node = cores; host bandwidth = the all-core triad;
/// - the intra-node link (ranks on one host) or the inter-node link (ranks
///   on several) from fitLink, efficiency 1.
/// Every figure's source names the measurement, the host and the date.
StatusOr<ClusterSpec> calibratedCluster(const CalibrationData &data,
                                        ClusterSpec base);

/// The raw samples as the cluster file's "calibration" object.
Json calibrationToJson(const CalibrationData &data);

//===----------------------------------------------------------------------===//
// GPUs: `dtcc calibrate --device cuda` (tools/dtcc-calibrate/dtcc-calibrate-cuda)
//===----------------------------------------------------------------------===//

/// The CUDA backend's own `matmul` kernel (cuBLASLt behind the kernel
/// interface, bound through the CUDA registry as a program binds it) on an
/// n x n by n x n product of `dtype`, sustained: the median of windows of
/// GpuCalibrationData::matmulWindowSeconds. kTf32 is f32 operands bound with
/// DTCC_CUDA_ALLOW_TF32 set (CUBLAS_COMPUTE_32F_FAST_TF32); kFp32 without it.
struct GpuMatmulSample {
  DType dtype = DType::kBf16;
  int64_t n = 0;
  double flopsPerSecond = 0;
};

/// A copy of `bytes`, sustained: "device-to-device" (cudaMemcpyAsync inside
/// the GPU; its rate counts the bytes read and the bytes written, as STREAM's
/// copy does), "host-to-device" or "device-to-host" (pinned host memory; the
/// bytes copied).
struct CopySample {
  std::string kind;
  int64_t bytes = 0;
  double bytesPerSecond = 0;
};

/// Everything one GPU calibration measured and where. Under a launcher every
/// rank drives its own GPU (LOCAL_RANK picks it), all ranks measure at once
/// and each figure is the slowest rank's.
struct GpuCalibrationData {
  std::string host; ///< hostname of rank 0
  std::string date; ///< UTC, ISO 8601
  std::string gpu;  ///< cudaGetDeviceProperties' name, the same on every rank
  std::string computeCapability; ///< "9.0"
  int64_t multiprocessors = 0;
  /// "CUDA runtime 13.0, driver 13.0, cuBLASLt 130000, NCCL 2.27.3".
  std::string software;
  std::string cpuModel;
  int64_t gpusPerHost = 0;       ///< cudaGetDeviceCount on rank 0's host
  double deviceMemoryBytes = 0;  ///< cudaMemGetInfo total, smallest rank
  /// cudaMemGetInfo free once the runtime's context, cuBLASLt workspace and
  /// NCCL communicators exist, smallest rank (for information).
  double deviceMemoryFreeBytes = 0;
  double hostMemTotalBytes = 0; ///< MemTotal of /proc/meminfo, rank 0
  std::string launcher = "single";
  int64_t ranks = 1;
  int64_t hosts = 1;
  /// Device figures were measured on every rank at once (under a launcher).
  bool concurrent = false;

  std::vector<GpuMatmulSample> matmul;
  double matmulWindowSeconds = 0.1;
  /// The CUDA registry's kernels on KernelBench's workloads
  /// (KernelBenchSizes::gpu()), sustained.
  std::vector<KernelSample> kernels;
  double kernelWindowSeconds = 0.05;
  /// Entries of the list the CUDA registry could not bind ("name: error"),
  /// left out of `kernels` (their instructions fall back to the roofline).
  std::vector<std::string> unboundKernels;
  std::vector<CopySample> copies;
  /// Seconds per call of a kernel that does next to nothing, launched back
  /// to back (`launchWorkload`, e.g. "neg on 1xf32 -> 1xf32").
  double launchSeconds = 0;
  std::string launchWorkload;
  /// dtcc's bf16 attention kernel and its gradient (runtime::attentionFlops
  /// of both per second of both), and on what ("attention on ... and
  /// attention_grad on ..."); 0 when not measured (no bf16 before sm_80).
  double attentionFlopsPerSecond = 0;
  std::string attentionWorkload;

  /// "NCCL 2.27.3": what the collectives ran over.
  std::string transport;
  /// All-reduce and all-gather over every rank (the runtime's NCCL world
  /// communicator).
  std::vector<CollectiveSample> collectives;
  /// The same sweep over each host's ranks at once (ncclCommSplit by host),
  /// when the job spans several hosts with several ranks on each.
  std::vector<CollectiveSample> hostCollectives;
  int64_t ranksPerHost = 0; ///< of hostCollectives
};

/// The built-in preset that describes the rest of a node around `gpuName`
/// (cudaGetDeviceProperties' name): "h200" for H200s, "dgx-a100-80g" for
/// A100s, otherwise "dgx-h100".
std::string gpuBasePreset(const std::string &gpuName);

/// The dtype whose curve is device.gemmEfficiency: bf16, what mixed-precision
/// training multiplies in, when it was measured; else fp16, tf32, fp32.
/// Errors when no matmul was measured.
StatusOr<DType> gpuCurveDType(const GpuCalibrationData &data);

/// The product size whose efficiency is device.matmulEfficiency (the
/// formula model's "large GEMMs"): a 7B-class layer, hidden 4096 and 4096
/// tokens per micro-batch.
constexpr int64_t kGpuMatmulReferenceN = 4096;

/// The cluster the GPU measurements describe, starting from `base` for what
/// was not measured (whose sources then say so):
/// - peak FLOP/s of each dtype = the best rate of its products (a dtype
///   without samples keeps the base's figure and says so);
/// - gemmEfficiency = the curve dtype's (gpuCurveDType) rates over its own
///   peak, by size; the program model applies this one curve to every
///   dtype's peak; matmulEfficiency = that curve at kGpuMatmulReferenceN
///   (or the largest size measured below it); attentionEfficiency = the
///   attention sample's FLOP/s (forward and gradient) over the bf16 peak,
///   the base's when there is none;
/// - kernelSeconds = each kernel sample's seconds over its elements, and
///   kernelByteSeconds over its bytes;
/// - memory bandwidth = the largest device-to-device copy, efficiency 1 (an
///   achieved rate); PCIe = the slower direction of the largest pinned
///   host copies; kernel overhead = launchSeconds;
/// - memory = cudaMemGetInfo's total; devices per node = gpusPerHost; host
///   memory = MemTotal; nodes = hosts;
/// - links by fitLink: `collectives` to the intra-node link when every rank
///   shares one host, else to the inter-node link, whose intra-node link
///   then comes from `hostCollectives` if there are any.
/// Every figure's source names the measurement, the host, the GPU and the
/// date.
StatusOr<ClusterSpec> calibratedGpuCluster(const GpuCalibrationData &data,
                                           ClusterSpec base);

/// The raw GPU samples as the cluster file's "calibration" object.
Json gpuCalibrationToJson(const GpuCalibrationData &data);

} // namespace dtcc::planner

#endif // DTCC_PLANNER_CALIBRATION_H
