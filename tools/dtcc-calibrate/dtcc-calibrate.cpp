//===- dtcc-calibrate.cpp - measure this machine for the planner ----------===//
//
// `dtcc calibrate` (dtcc execs this tool): times the CPU backend's own
// kernels (matmul by size, and every other kernel of the training programs,
// KernelBench.h), a STREAM triad and, under a launcher with N ranks,
// all-reduce and all-gather over the runtime's communicators, then writes a
// planner cluster file (planner/Calibration.h) whose every figure says how
// it was measured. A separate executable so that the compiler links neither
// MPI, OpenBLAS nor the runtime's kernels.
//
//===----------------------------------------------------------------------===//

#include "planner/Calibration.h"
#include "runtime/base/Format.h"
#include "runtime/comm/Communicator.h"
#include "runtime/device/cpu/BlasCore.h"
#include "runtime/exec/Kernel.h"
#include "tools/dtcc-calibrate/CalibrateCommon.h"
#include "tools/dtcc-calibrate/KernelBench.h"

#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

using namespace dtcc;
using namespace dtcc::planner;

using runtime::ReduceKind;
using runtime::Status;
using runtime::StatusOr;
using runtime::strCat;
using calibrate::reduceAcross;

namespace {

const char *kUsage = R"(usage: dtcc calibrate [-o cluster.json] [--base PRESET|FILE]
                      [--no-collectives]

Measures the machine it runs on and writes a cluster file for `dtcc plan
--cluster FILE` and `dtcc compile --cluster FILE`:
  - matrix products: dtcc's matmul kernel (OpenBLAS sgemm) on n x n x n f32
    products, n = 32..1024, 1 thread: the peak (the best size) and the
    efficiency by size (device.gemmEfficiency); OpenBLAS on all cores
  - kernels: every other kernel of dtcc's training programs (gelu, softmax,
    layer_norm, adamw, cast, ...; no collectives) bound as a program binds
    it, on 2^18 elements shaped like the programs' operands (f32 data,
    int64 indices), 1 thread: seconds per element of its largest operand
    or result (device.kernels)
  - memory bandwidth: a STREAM triad, 1 thread and all cores
  - under mpirun/srun/torchrun with N ranks: all-reduce and all-gather bus
    bandwidth and latency over the runtime's communicators (8 B to 16 MiB);
    the device figures are then measured on all ranks at once
Every figure records how, where and when it was measured; what is not
measured comes from --base (default cpu-local) and says so.

  -o FILE            the cluster file (default: stdout)
  --base NAME|FILE   preset or cluster file for the figures not measured
  --no-collectives   skip the collective sweep

dtcc calibrate --device cuda measures NVIDIA GPUs instead (cuBLASLt
matmuls, the CUDA kernels, NCCL collectives): dtcc calibrate --device cuda
--help.
)";

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

/// FLOP/s of OpenBLAS sgemm n^3 on the current thread count, the best of
/// five short rounds (the all-core figures, for information; the device's
/// figures time dtcc's matmul kernel, sustained: KernelBench.h).
double timeGemm(int64_t n) {
  std::vector<float> a(n * n), b(n * n), c(n * n);
  for (int64_t i = 0; i < n * n; ++i) {
    a[i] = float(i % 7) * 0.1f;
    b[i] = float(i % 5) * 0.1f;
  }
  double flops = 2.0 * double(n) * double(n) * double(n);
  auto gemm = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(n), int(n),
                int(n), 1.0f, a.data(), int(n), b.data(), int(n), 0.0f,
                c.data(), int(n));
  };
  gemm(); // warm-up: pages, thread pool
  double best = 0;
  int reps = int(std::max(1.0, std::ceil(0.2e9 / flops)));
  for (int round = 0; round < 5; ++round) {
    auto t0 = Clock::now();
    for (int r = 0; r < reps; ++r)
      gemm();
    best = std::max(best, flops * reps / seconds(t0, Clock::now()));
  }
  return best;
}

double timeCallOverhead() {
  float a[64], b[64], c[64];
  for (int i = 0; i < 64; ++i)
    a[i] = b[i] = c[i] = 0.5f;
  const int calls = 20000;
  double best = 1e30;
  for (int round = 0; round < 3; ++round) {
    auto t0 = Clock::now();
    for (int r = 0; r < calls; ++r)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 8, 8, 8, 1.0f,
                  a, 8, b, 8, 0.0f, c, 8);
    best = std::min(best, seconds(t0, Clock::now()) / calls);
  }
  return best;
}

/// Triad bytes/s over three arrays of `arrayBytes`, on `threads` threads
/// each owning (and first touching) a slice.
double timeTriad(int64_t arrayBytes, int threads) {
  int64_t n = arrayBytes / 4;
  std::vector<float> a, b, c;
  a.reserve(n);
  b.reserve(n);
  c.reserve(n);
  float *pa = a.data(), *pb = b.data(), *pc = c.data();
  auto slice = [&](int t, int64_t &lo, int64_t &hi) {
    lo = n * t / threads;
    hi = n * (t + 1) / threads;
  };
  auto parallel = [&](auto body) {
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t)
      pool.emplace_back([&, t] {
        int64_t lo, hi;
        slice(t, lo, hi);
        body(lo, hi);
      });
    int64_t lo, hi;
    slice(0, lo, hi);
    body(lo, hi);
    for (std::thread &th : pool)
      th.join();
  };
  parallel([&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      pa[i] = 0;
      pb[i] = 1.0f;
      pc[i] = 2.0f;
    }
  });
  const float s = 3.0f;
  int reps = int(std::max<int64_t>(3, (int64_t(256) << 20) / (3 * arrayBytes)));
  double best = 0;
  for (int round = 0; round < 3; ++round) {
    auto t0 = Clock::now();
    parallel([&](int64_t lo, int64_t hi) {
      for (int r = 0; r < reps; ++r)
        for (int64_t i = lo; i < hi; ++i)
          pa[i] = pb[i] + s * pc[i];
    });
    best = std::max(best, 3.0 * double(arrayBytes) * reps /
                              seconds(t0, Clock::now()));
  }
  // Keep the stores.
  volatile float sink = pa[n / 2];
  (void)sink;
  return best;
}

/// The matmul kernel on n x n x n products, bound through the registry as
/// a program's instruction is (so whatever the kernel adds around sgemm is
/// in the figure), slowest rank.
Status measureMatmulKernel(CalibrationData &data,
                           const runtime::KernelRegistry &registry,
                           runtime::Communicator *comm) {
  const std::vector<int64_t> sizes = {32, 64, 128, 256, 512, 1024};
  std::vector<double> rates;
  for (int64_t n : sizes) {
    DTCC_ASSIGN_OR_RETURN(
        auto bound, calibrate::BoundKernelCase::bind(calibrate::matmulCase(n),
                                                     registry));
    DTCC_ASSIGN_OR_RETURN(double seconds,
                          calibrate::timeSustained([&] { return bound->run(); },
                                                   data.matmulWindowSeconds));
    rates.push_back(2.0 * double(n) * double(n) * double(n) / seconds);
  }
  DTCC_RETURN_IF_ERROR(reduceAcross(comm, rates, ReduceKind::kMin));
  for (size_t i = 0; i < sizes.size(); ++i)
    data.matmul.push_back({sizes[i], rates[i]});
  return Status::ok();
}

/// Every kernel of calibrate's list (KernelBench.h), one at a time (each
/// bound on fresh buffers, freed before the next), slowest rank.
Status measureKernels(CalibrationData &data,
                      const runtime::KernelRegistry &registry,
                      runtime::Communicator *comm) {
  const std::vector<calibrate::KernelCase> cases =
      calibrate::kernelBenchCases();
  std::vector<double> seconds;
  for (const calibrate::KernelCase &kase : cases) {
    DTCC_ASSIGN_OR_RETURN(auto bound,
                          calibrate::BoundKernelCase::bind(kase, registry));
    DTCC_ASSIGN_OR_RETURN(double s,
                          calibrate::timeSustained([&] { return bound->run(); },
                                                   data.kernelWindowSeconds));
    seconds.push_back(s);
  }
  DTCC_RETURN_IF_ERROR(reduceAcross(comm, seconds, ReduceKind::kMax));
  for (size_t i = 0; i < cases.size(); ++i)
    data.kernels.push_back({cases[i].kernel, cases[i].workload(),
                            cases[i].elements(), seconds[i]});
  return Status::ok();
}

Status measureDevice(CalibrationData &data, runtime::Communicator *comm,
                     bool allCores) {
  if (comm)
    DTCC_RETURN_IF_ERROR(comm->barrier());
  openblas_set_num_threads(1);
  const runtime::KernelRegistry &registry = runtime::cpuKernels();
  DTCC_RETURN_IF_ERROR(measureMatmulKernel(data, registry, comm));
  DTCC_RETURN_IF_ERROR(measureKernels(data, registry, comm));
  double overhead = timeCallOverhead();
  DTCC_RETURN_IF_ERROR(reduceAcross(comm, overhead, ReduceKind::kMax));
  data.callOverheadSeconds = overhead;
  for (int64_t bytes : {int64_t(1) << 20, int64_t(64) << 20}) {
    double bw = timeTriad(bytes, 1);
    DTCC_RETURN_IF_ERROR(reduceAcross(comm, bw, ReduceKind::kMin));
    data.stream.push_back({1, bytes, bw});
  }
  if (!allCores || data.cores < 2)
    return Status::ok();
  openblas_set_num_threads(int(data.cores));
  int threads = openblas_get_num_threads();
  for (int64_t n : {256, 1024})
    data.gemm.push_back({n, threads, timeGemm(n)});
  openblas_set_num_threads(1);
  data.stream.push_back({int(data.cores), int64_t(64) << 20,
                         timeTriad(int64_t(64) << 20, int(data.cores))});
  return Status::ok();
}

Status measureCollectives(CalibrationData &data, runtime::Communicator &comm) {
  int n = comm.size();
  for (const char *kind : {"all-reduce", "all-gather"}) {
    bool allReduce = std::string(kind) == "all-reduce";
    for (int64_t bytes = 8; bytes <= (int64_t(16) << 20); bytes *= 8) {
      // All-gather: `bytes` is the output; each rank brings 1/n of it.
      int64_t count = std::max<int64_t>(1, bytes / 4);
      if (!allReduce)
        count = std::max<int64_t>(1, count / n);
      int64_t payload = allReduce ? count * 4 : count * 4 * n;
      std::vector<float> in(count, 1.0f), out(allReduce ? count : count * n);
      auto once = [&]() -> Status {
        return allReduce ? comm.allReduce(in.data(), out.data(), count,
                                          runtime::DType::kF32, ReduceKind::kSum)
                         : comm.allGather(in.data(), out.data(), count,
                                          runtime::DType::kF32);
      };
      int reps = payload <= 65536 ? 50 : payload <= (1 << 20) ? 10 : 4;
      DTCC_RETURN_IF_ERROR(once());
      std::vector<double> times;
      for (int round = 0; round < 5; ++round) {
        DTCC_RETURN_IF_ERROR(comm.barrier());
        auto t0 = Clock::now();
        for (int r = 0; r < reps; ++r)
          DTCC_RETURN_IF_ERROR(once());
        double t = seconds(t0, Clock::now()) / reps;
        DTCC_RETURN_IF_ERROR(reduceAcross(&comm, t, ReduceKind::kMax));
        times.push_back(t);
      }
      // The second best of five: one lucky round does not make the link.
      std::sort(times.begin(), times.end());
      data.collectives.push_back({kind, n, double(payload), times[1]});
    }
  }
  return Status::ok();
}

std::string transportName(const std::string &launcher) {
  if (launcher == "torchrun")
    return "TCP (dtcc runtime)";
  std::string name = "MPI";
  if (const char *btl = std::getenv("OMPI_MCA_btl"))
    name += strCat(" (Open MPI, btl ", btl, ")");
  else if (launcher == "mpirun")
    name += " (Open MPI)";
  return name;
}

int fail(const std::string &message) {
  std::fprintf(stderr, "dtcc calibrate: error: %s\n", message.c_str());
  return 1;
}

} // namespace

int main(int argc, char **argv) {
  // The kernels the compiled programs' runner selects (BlasCore.h): the
  // figures must be those the programs will see.
  dtcc::runtime::cpu::applyLoadTimeSettings(argv);
  calibrate::CommonArgs args;
  std::string error = calibrate::parseCommonArgs(
      argc, argv, args, [](const std::string &) { return false; },
      "dtcc calibrate");
  if (!error.empty())
    return fail(error);
  if (args.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const std::string &out = args.out;
  const std::string base = args.base.empty() ? "cpu-local" : args.base;
  const bool collectives = args.collectives;

  StatusOr<ClusterSpec> baseCluster = loadClusterSpec(base);
  if (!baseCluster.isOk())
    return fail(baseCluster.status().withContext("--base").message());

  auto world = runtime::World::init();
  if (!world.isOk())
    return fail(world.status().message());
  runtime::World &w = *world.value();
  runtime::Communicator *comm = w.size() > 1 ? &w.world() : nullptr;

  CalibrationData data;
  data.host = calibrate::hostName();
  data.date = calibrate::utcNow();
  data.cpuModel = calibrate::cpuModel();
  data.blas = openblas_get_config();
  data.cores = std::max<long>(1, sysconf(_SC_NPROCESSORS_ONLN));
  data.memTotalBytes = calibrate::memTotalBytes();
  data.launcher = w.launcher();
  data.ranks = w.size();
  data.concurrent = comm != nullptr;
  if (comm) {
    auto hosts = calibrate::gatherStrings(*comm, data.host);
    if (!hosts.isOk())
      return fail(hosts.status().message());
    data.hosts = calibrate::countDistinct(hosts.value());
  }
  if (Status s = measureDevice(data, comm, /*allCores=*/comm == nullptr);
      !s.isOk())
    return fail(s.message());
  if (comm && collectives) {
    data.transport = transportName(w.launcher());
    if (Status s = measureCollectives(data, *comm); !s.isOk())
      return fail(s.message());
  }
  if (w.rank() != 0)
    return 0;

  auto cluster = calibratedCluster(data, baseCluster.value());
  if (!cluster.isOk())
    return fail(cluster.status().message());
  std::string text = clusterToJson(cluster.value()).dump(2) + "\n";
  if (out == "-") {
    std::fputs(text.c_str(), stdout);
  } else {
    std::ofstream file(out);
    file << text;
    if (!file)
      return fail("cannot write '" + out + "'");
  }
  // A summary for people on stderr (stdout may be the file).
  const ClusterSpec &c = cluster.value();
  std::fprintf(stderr,
               "dtcc calibrate: %s, %lld cores; matmul %.1f GFLOP/s per core "
               "(of it at n=32: %.0f%%, n=256: %.0f%%); %zu kernels; triad "
               "%.1f GB/s per core",
               data.cpuModel.c_str(), (long long)data.cores,
               c.device.peakFp32.value / 1e9,
               100 * c.device.matmulEfficiencyAt(32, 32, 32),
               100 * c.device.matmulEfficiencyAt(256, 256, 256),
               c.device.kernelSeconds.size(),
               c.device.memoryBandwidth.value / 1e9);
  if (data.concurrent)
    std::fprintf(stderr, " (%lld ranks at once)", (long long)data.ranks);
  else
    std::fprintf(stderr, ", %.1f GB/s all cores",
                 c.hostMemoryBandwidth.value / 1e9);
  if (!data.collectives.empty()) {
    const LinkSpec &l = data.hosts > 1 ? c.interNode : c.intraNode;
    std::fprintf(stderr, "; %lld ranks: bus bandwidth %.2f GB/s, latency %.1f us",
                 (long long)data.ranks, l.bandwidth.value / 1e9,
                 l.latency.value * 1e6);
  }
  std::fprintf(stderr, "%s%s\n", out == "-" ? "" : " -> ",
               out == "-" ? "" : out.c_str());
  return 0;
}
