//===- Calibration.h - a cluster spec from measurements ---------*- C++ -*-===//
//
// What `dtcc calibrate` measures on the machine it runs on (matrix products,
// memory bandwidth, collectives over the runtime's communicators) and how
// those samples become a ClusterSpec whose every figure says how it was
// measured. The measuring itself lives in tools/dtcc-calibrate (it needs
// OpenBLAS and MPI); this part is plain arithmetic, unit-tested.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_PLANNER_CALIBRATION_H
#define DTCC_PLANNER_CALIBRATION_H

#include "planner/Cluster.h"

#include <string>
#include <vector>

namespace dtcc::planner {

/// OpenBLAS sgemm C(n x n) = A(n x n) B(n x n): single-thread samples are
/// sustained rates (the median of 0.15 s windows), all-core ones the best
/// of short rounds.
struct GemmSample {
  int64_t n = 0;
  int threads = 1;
  double flopsPerSecond = 0;
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

/// The best single-thread (or `threads`-thread) sgemm rate and its size.
const GemmSample *bestGemm(const CalibrationData &data, int threads);
/// The sample of size `n` on `threads` threads, or null.
const GemmSample *gemmAt(const CalibrationData &data, int64_t n, int threads);

/// The cluster the measurements describe, starting from `base` for what was
/// not measured (whose sources then say so). One device is one core (the
/// CPU backend runs one rank per core with OPENBLAS_NUM_THREADS=1):
/// - peak FLOP/s (every dtype: the backend computes in fp32) = the best
///   single-thread sgemm; matmul efficiency = sgemm at n = 256 over it (the
///   size of the CPU models' products); attention efficiency = sgemm at
///   n = 64 over it (per-head products);
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
