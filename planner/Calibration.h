//===- Calibration.h - a cluster spec from measurements ---------*- C++ -*-===//
//
// What `dtcc calibrate` measures on the machine it runs on (the backend's
// matmul kernel by size and its other kernels, memory bandwidth, collectives
// over the runtime's communicators) and how those samples become a
// ClusterSpec whose every figure says how it was measured. The measuring
// itself lives in tools/dtcc-calibrate (it needs the runtime's kernels,
// OpenBLAS and MPI); this part is plain arithmetic, unit-tested.
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

} // namespace dtcc::planner

#endif // DTCC_PLANNER_CALIBRATION_H
