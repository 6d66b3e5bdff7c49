//===- dtcc-calibrate-cuda.cpp - measure this job's GPUs for the planner --===//
//
// `dtcc calibrate --device cuda` (dtcc execs this tool): on the GPU that
// the local rank picks (cuda::chooseCudaDevice), times the CUDA backend's own kernels as a program binds
// them (matmul through cuBLASLt by size and dtype, and KernelBench's list),
// copies inside the GPU and over PCIe, kernel launches, and, under a
// launcher, NCCL all-reduce and all-gather over the runtime's NCCL
// communicators; then writes a planner cluster file
// (planner/Calibration.h, calibratedGpuCluster). Built only with the CUDA
// backend, so that dtcc-calibrate never needs the CUDA libraries.
//
//===----------------------------------------------------------------------===//

#include "planner/Calibration.h"
#include "runtime/base/Format.h"
#include "runtime/base/OpFlops.h"
#include "runtime/comm/CommQueue.h"
#include "runtime/comm/Communicator.h"
#include "runtime/comm/nccl/NcclComm.h"
#include "runtime/device/cuda/CudaCheck.h"
#include "runtime/device/cuda/CudaDevice.h"
#include "tools/dtcc-calibrate/CalibrateCommon.h"
#include "tools/dtcc-calibrate/KernelBench.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace dtcc;
using namespace dtcc::planner;

using calibrate::reduceAcross;
using runtime::Communicator;
using runtime::ReduceKind;
using runtime::Status;
using runtime::StatusOr;
using runtime::strCat;
using runtime::cuda::CudaDevice;

namespace {

const char *kUsage =
    R"(usage: dtcc calibrate --device cuda [-o cluster.json] [--base PRESET|FILE]
                      [--no-collectives] [--quick]

Measures the NVIDIA GPUs of the job it runs in, one rank per GPU (under
mpirun, srun or torchrun-style variables the local rank picks it among the
visible GPUs, or a rank that sees one GPU takes it; alone, GPU 0), and
writes a cluster file for `dtcc plan --cluster FILE`:
  - matrix products: dtcc's CUDA matmul kernel (cuBLASLt) on n x n x n
    products, n = 128..16384, in fp32, tf32 (DTCC_CUDA_ALLOW_TF32), bf16 and
    fp16 as the GPU supports them: each dtype's peak (its best size) and the
    bf16 efficiency by size (device.gemmEfficiency)
  - kernels: every other kernel of dtcc's training programs (dtcc calibrate's
    list, on 2^24 elements each) bound through the CUDA kernel registry:
    seconds per element (device.kernels)
  - attention: dtcc's bf16 attention kernel and its gradient on 16 causal
    heads of 2048 x 128: FLOP/s over the bf16 peak
    (device.attentionEfficiency; sm_80 and later)
  - device-to-device copy bandwidth, pinned host copies (PCIe), kernel launch
    overhead, device memory (cudaMemGetInfo)
  - under a launcher with N ranks: NCCL all-reduce and all-gather, 8 B to
    256 MiB, over the runtime's NCCL communicators: bus bandwidth and latency
    of the link the ranks share (inside a host, or across hosts; with several
    hosts of several ranks each, both); the device figures are measured on
    all GPUs at once and each is the slowest rank's
Every figure records how, where, on which GPU and when it was measured; what
is not measured comes from --base (default: the preset of the GPU: dgx-h100,
h200 or dgx-a100-80g) and says so.

  -o FILE            the cluster file (default: stdout)
  --base NAME|FILE   preset or cluster file for the figures not measured
  --no-collectives   skip the NCCL sweep
  --quick            fewer sizes and shorter windows: a smoke test of the
                     tool, not a calibration
)";

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int fail(const std::string &message) {
  std::fprintf(stderr, "dtcc calibrate --device cuda: error: %s\n",
               message.c_str());
  return 1;
}

/// What one run measures and how long it looks.
struct Settings {
  std::vector<int64_t> matmulSizes = {128,  256,  512,  1024,
                                      2048, 4096, 8192, 16384};
  double matmulWindowSeconds = 0.1;
  double kernelWindowSeconds = 0.05;
  int64_t attentionSeq = 2048; ///< queries and keys of the attention timed
  /// Work between synchronizations when timing asynchronous calls.
  double batchSeconds = 2e-3;
  int64_t maxCopyBytes = int64_t(1) << 30;
  int64_t maxCollectiveBytes = int64_t(256) << 20;
  int64_t collectiveStep = 2; ///< payload ratio between sweep points
  int collectiveRounds = 5;

  static Settings quick() {
    Settings s;
    s.matmulSizes = {256, 1024, 4096};
    s.matmulWindowSeconds = 0.02;
    s.kernelWindowSeconds = 0.005;
    s.attentionSeq = 1024;
    s.maxCopyBytes = int64_t(64) << 20;
    s.maxCollectiveBytes = int64_t(16) << 20;
    s.collectiveStep = 8;
    s.collectiveRounds = 3;
    return s;
  }
};

/// Sets (or, with null, unsets) an environment variable for a scope.
class ScopedEnv {
public:
  ScopedEnv(const char *name, const char *value) : name_(name) {
    if (const char *old = std::getenv(name)) {
      had_ = true;
      old_ = old;
    }
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_, old_.c_str(), 1);
    else
      unsetenv(name_);
  }

private:
  const char *name_;
  bool had_ = false;
  std::string old_;
};

/// Device memory of the tool's own (copies, collective buffers).
class DeviceBuffer {
public:
  ~DeviceBuffer() {
    if (ptr_)
      cudaFree(ptr_);
  }
  Status allocate(int64_t bytes) {
    DTCC_CUDA_CHECK(cudaMalloc(&ptr_, size_t(bytes)));
    // cudaMemset runs on the legacy default stream, which the device's
    // non-blocking streams do not wait for: finish it before they use it.
    DTCC_CUDA_CHECK(cudaMemset(ptr_, 0, size_t(bytes)));
    DTCC_CUDA_CHECK(cudaDeviceSynchronize());
    return Status::ok();
  }
  void *get() const { return ptr_; }

private:
  void *ptr_ = nullptr;
};

class PinnedBuffer {
public:
  ~PinnedBuffer() {
    if (ptr_)
      cudaFreeHost(ptr_);
  }
  Status allocate(int64_t bytes) {
    DTCC_CUDA_CHECK(cudaMallocHost(&ptr_, size_t(bytes)));
    std::fill_n(static_cast<char *>(ptr_), bytes, char(1));
    return Status::ok();
  }
  void *get() const { return ptr_; }

private:
  void *ptr_ = nullptr;
};

std::string versionString(int v, int majorScale, int minorScale) {
  return strCat(v / majorScale, ".", (v % majorScale) / minorScale);
}

/// "CUDA runtime 13.0, driver 13.0, cuBLASLt 13.0.1, NCCL 2.27.3".
std::string softwareVersions() {
  int runtimeVersion = 0, driverVersion = 0, ncclVersion = 0;
  cudaRuntimeGetVersion(&runtimeVersion);
  cudaDriverGetVersion(&driverVersion);
  ncclGetVersion(&ncclVersion);
  const size_t lt = cublasLtGetVersion();
  return strCat("CUDA runtime ", versionString(runtimeVersion, 1000, 10),
                ", driver ", versionString(driverVersion, 1000, 10),
                ", cuBLASLt ", lt / 10000, ".", (lt / 100) % 100, ".", lt % 100,
                ", NCCL ", ncclVersion / 10000, ".", (ncclVersion / 100) % 100,
                ".", ncclVersion % 100);
}

std::string ncclName() {
  int v = 0;
  ncclGetVersion(&v);
  return strCat("NCCL ", v / 10000, ".", (v / 100) % 100, ".", v % 100);
}

//===----------------------------------------------------------------------===//
// The device
//===----------------------------------------------------------------------===//

/// The runtime's matmul kernel on n x n x n products of each dtype the GPU
/// multiplies, slowest rank.
Status measureMatmul(GpuCalibrationData &data, CudaDevice &dev,
                     Communicator *comm, const Settings &settings) {
  struct Kind {
    DType planner;
    runtime::DType runtime;
    bool tf32;
  };
  std::vector<Kind> kinds = {{DType::kFp32, runtime::DType::kF32, false}};
  // tf32 and bf16 tensor cores arrived with Ampere (sm_80).
  if (dev.properties().major >= 8) {
    kinds.push_back({DType::kTf32, runtime::DType::kF32, true});
    kinds.push_back({DType::kBf16, runtime::DType::kBF16, false});
  }
  kinds.push_back({DType::kFp16, runtime::DType::kF16, false});
  std::vector<double> rates;
  for (const Kind &kind : kinds) {
    for (int64_t n : settings.matmulSizes) {
      std::unique_ptr<calibrate::BoundKernelCase> bound;
      {
        // The kernel reads the variable when it is bound (CudaMatmul.cpp).
        ScopedEnv tf32("DTCC_CUDA_ALLOW_TF32", kind.tf32 ? "1" : nullptr);
        DTCC_ASSIGN_OR_RETURN(bound,
                              calibrate::BoundKernelCase::bind(
                                  calibrate::matmulCase(n, kind.runtime), dev));
      }
      DTCC_ASSIGN_OR_RETURN(
          double seconds,
          calibrate::timeSustained(
              [&] { return bound->run(); }, [&] { return dev.synchronize(); },
              settings.matmulWindowSeconds, settings.batchSeconds));
      rates.push_back(2.0 * double(n) * double(n) * double(n) / seconds);
    }
  }
  DTCC_RETURN_IF_ERROR(reduceAcross(comm, rates, ReduceKind::kMin));
  size_t i = 0;
  for (const Kind &kind : kinds)
    for (int64_t n : settings.matmulSizes)
      data.matmul.push_back({kind.planner, n, rates[i++]});
  return Status::ok();
}

/// Every kernel of calibrate's list at GPU sizes, bound through the CUDA
/// registry, slowest rank. A kernel the registry cannot bind is left out
/// and reported (a program using it would not load either); the same on
/// every rank, since every rank has the same GPU.
Status measureKernels(GpuCalibrationData &data, CudaDevice &dev,
                      Communicator *comm, const Settings &settings,
                      bool speak) {
  std::vector<calibrate::KernelCase> timed;
  std::vector<double> seconds;
  for (const calibrate::KernelCase &kase :
       calibrate::kernelBenchCases(calibrate::KernelBenchSizes::gpu())) {
    auto bound = calibrate::BoundKernelCase::bind(kase, dev);
    if (!bound.isOk()) {
      data.unboundKernels.push_back(
          strCat(kase.kernel, ": ", bound.status().message()));
      if (speak)
        std::fprintf(stderr,
                     "dtcc calibrate --device cuda: warning: %s not timed: "
                     "%s\n",
                     kase.kernel.c_str(), bound.status().message().c_str());
      continue;
    }
    DTCC_ASSIGN_OR_RETURN(
        double s, calibrate::timeSustained([&] { return bound.value()->run(); },
                                           [&] { return dev.synchronize(); },
                                           settings.kernelWindowSeconds,
                                           settings.batchSeconds));
    timed.push_back(kase);
    seconds.push_back(s);
  }
  DTCC_RETURN_IF_ERROR(reduceAcross(comm, seconds, ReduceKind::kMax));
  for (size_t i = 0; i < timed.size(); ++i)
    data.kernels.push_back({timed[i].kernel, timed[i].workload(),
                            timed[i].elements(), seconds[i],
                            timed[i].bytes()});
  return Status::ok();
}

/// dtcc's bf16 attention and its gradient as a GPT layer runs them (16
/// causal heads of 2048 x 128, or 1024 with --quick), one after the other,
/// slowest rank: runtime::attentionFlops of both per second. Left out
/// before sm_80 (no bf16).
Status measureAttention(GpuCalibrationData &data, CudaDevice &dev,
                        Communicator *comm, const Settings &settings) {
  if (dev.properties().major < 8)
    return Status::ok();
  const int64_t heads = 16, headDim = 128;
  const std::vector<calibrate::KernelCase> cases = calibrate::attentionCases(
      heads, settings.attentionSeq, headDim, runtime::DType::kBF16);
  std::vector<std::unique_ptr<calibrate::BoundKernelCase>> bound;
  for (const calibrate::KernelCase &kase : cases) {
    DTCC_ASSIGN_OR_RETURN(auto b, calibrate::BoundKernelCase::bind(kase, dev));
    bound.push_back(std::move(b));
  }
  DTCC_ASSIGN_OR_RETURN(
      double seconds,
      calibrate::timeSustained(
          [&] {
            for (auto &b : bound)
              DTCC_RETURN_IF_ERROR(b->run());
            return Status::ok();
          },
          [&] { return dev.synchronize(); }, settings.kernelWindowSeconds,
          settings.batchSeconds));
  DTCC_RETURN_IF_ERROR(reduceAcross(comm, seconds, ReduceKind::kMax));
  const std::vector<int64_t> rows = {heads, settings.attentionSeq, headDim};
  data.attentionFlopsPerSecond =
      (runtime::attentionFlops(rows, rows, true, false) +
       runtime::attentionFlops(rows, rows, true, true)) /
      seconds;
  data.attentionWorkload = strCat("attention on ", cases[0].workload(),
                                  " and attention_grad on ",
                                  cases[1].workload());
  return Status::ok();
}

/// Copies inside the GPU (its memory bandwidth) and to and from pinned host
/// memory (PCIe), on the compute stream, slowest rank.
Status measureCopies(GpuCalibrationData &data, CudaDevice &dev,
                     Communicator *comm, const Settings &settings) {
  size_t free = 0, total = 0;
  DTCC_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  // Two buffers; leave room for whatever else the GPU holds.
  int64_t largest = settings.maxCopyBytes;
  while (largest > (int64_t(1) << 20) && 2 * largest > int64_t(free / 2))
    largest /= 2;
  const cudaStream_t stream = dev.computeStream();
  auto sync = [&]() -> Status {
    DTCC_CUDA_CHECK(cudaStreamSynchronize(stream));
    return Status::ok();
  };
  std::vector<CopySample> samples;
  std::vector<double> rates;
  DeviceBuffer a, b;
  DTCC_RETURN_IF_ERROR(a.allocate(largest));
  DTCC_RETURN_IF_ERROR(b.allocate(largest));
  for (int64_t bytes : {largest / 4, largest}) {
    DTCC_ASSIGN_OR_RETURN(
        double s,
        calibrate::timeSustained(
            [&]() -> Status {
              DTCC_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), size_t(bytes),
                                              cudaMemcpyDeviceToDevice,
                                              stream));
              return Status::ok();
            },
            sync, settings.kernelWindowSeconds, settings.batchSeconds));
    samples.push_back({"device-to-device", bytes, 0});
    rates.push_back(2.0 * double(bytes) / s); // read + write
  }
  const int64_t hostBytes = std::min<int64_t>(largest, int64_t(256) << 20);
  PinnedBuffer host;
  DTCC_RETURN_IF_ERROR(host.allocate(hostBytes));
  for (bool toDevice : {true, false}) {
    DTCC_ASSIGN_OR_RETURN(
        double s,
        calibrate::timeSustained(
            [&]() -> Status {
              DTCC_CUDA_CHECK(cudaMemcpyAsync(
                  toDevice ? a.get() : host.get(),
                  toDevice ? host.get() : a.get(), size_t(hostBytes),
                  toDevice ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                  stream));
              return Status::ok();
            },
            sync, settings.kernelWindowSeconds, settings.batchSeconds));
    samples.push_back(
        {toDevice ? "host-to-device" : "device-to-host", hostBytes, 0});
    rates.push_back(double(hostBytes) / s);
  }
  DTCC_RETURN_IF_ERROR(reduceAcross(comm, rates, ReduceKind::kMin));
  for (size_t i = 0; i < samples.size(); ++i) {
    samples[i].bytesPerSecond = rates[i];
    data.copies.push_back(samples[i]);
  }
  return Status::ok();
}

/// A kernel that does next to nothing, launched back to back through the
/// registry (the wrapper every program's kernel goes through), slowest rank.
Status measureLaunch(GpuCalibrationData &data, CudaDevice &dev,
                     Communicator *comm, const Settings &settings) {
  const calibrate::KernelCase kase = calibrate::launchCase();
  DTCC_ASSIGN_OR_RETURN(auto bound,
                        calibrate::BoundKernelCase::bind(kase, dev));
  DTCC_ASSIGN_OR_RETURN(
      double s, calibrate::timeSustained([&] { return bound->run(); },
                                         [&] { return dev.synchronize(); },
                                         settings.kernelWindowSeconds,
                                         settings.batchSeconds));
  DTCC_RETURN_IF_ERROR(reduceAcross(comm, s, ReduceKind::kMax));
  data.launchSeconds = s;
  data.launchWorkload = strCat(kase.kernel, " kernel on ", kase.workload());
  return Status::ok();
}

Status measureDevice(GpuCalibrationData &data, CudaDevice &dev,
                     Communicator *comm, const Settings &settings, bool speak) {
  if (comm)
    DTCC_RETURN_IF_ERROR(comm->barrier());
  DTCC_RETURN_IF_ERROR(measureMatmul(data, dev, comm, settings));
  DTCC_RETURN_IF_ERROR(measureKernels(data, dev, comm, settings, speak));
  DTCC_RETURN_IF_ERROR(measureAttention(data, dev, comm, settings));
  DTCC_RETURN_IF_ERROR(measureCopies(data, dev, comm, settings));
  DTCC_RETURN_IF_ERROR(measureLaunch(data, dev, comm, settings));
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// NCCL
//===----------------------------------------------------------------------===//

/// Waits for `stream` like the runtime's watchdog does: past `timeout`
/// seconds the communicator is aborted and the job ended (exit 124); an
/// asynchronous NCCL error is returned.
Status waitFor(cudaStream_t stream, runtime::NcclComm &nccl,
               runtime::World &world, double timeout, const std::string &what) {
  const auto t0 = Clock::now();
  for (int64_t polls = 0;; ++polls) {
    cudaError_t err = cudaStreamQuery(stream);
    if (err == cudaSuccess)
      return Status::ok();
    if (err != cudaErrorNotReady)
      DTCC_CUDA_CHECK(err);
    if (polls % 4096 == 4095) {
      DTCC_RETURN_IF_ERROR(nccl.asyncError().withContext(what));
      if (since(t0) > timeout) {
        std::fprintf(stderr, "dtcc calibrate: %s: %s timed out after %g s\n",
                     world.describe().c_str(), what.c_str(), timeout);
        std::fflush(stderr);
        nccl.abort();
        world.abort(124);
      }
    }
    std::this_thread::yield();
  }
}

/// All-reduce and all-gather over `nccl` from 8 B to the settings' largest
/// payload; every rank of `world` takes part at once (several communicators
/// of one split run side by side) and each time is the slowest rank's, the
/// second best of the rounds.
Status measureCollectives(std::vector<CollectiveSample> &out,
                          runtime::NcclComm &nccl, runtime::World &world,
                          cudaStream_t stream, const Settings &settings) {
  Communicator &cpu = world.world();
  const int n = nccl.size();
  const double timeout = world.queue().timeout();
  DeviceBuffer in, result;
  DTCC_RETURN_IF_ERROR(in.allocate(settings.maxCollectiveBytes));
  DTCC_RETURN_IF_ERROR(result.allocate(settings.maxCollectiveBytes));
  for (const char *kind : {"all-reduce", "all-gather"}) {
    const bool allReduce = std::string(kind) == "all-reduce";
    for (int64_t bytes = 8; bytes <= settings.maxCollectiveBytes;
         bytes *= settings.collectiveStep) {
      // All-gather: `bytes` is the output; each rank brings 1/n of it.
      int64_t count = std::max<int64_t>(1, bytes / 4);
      if (!allReduce)
        count = std::max<int64_t>(1, count / n);
      const int64_t payload = allReduce ? count * 4 : count * 4 * n;
      const std::string what =
          strCat("NCCL ", kind, " of ", payload, " bytes over ", n, " ranks ('",
                 nccl.name(), "')");
      auto once = [&]() -> Status {
        return allReduce ? nccl.allReduce(in.get(), result.get(), count,
                                          runtime::DType::kF32,
                                          ReduceKind::kSum, stream)
                         : nccl.allGather(in.get(), result.get(), count,
                                          runtime::DType::kF32, stream);
      };
      const int reps = payload <= (1 << 20)    ? 50
                       : payload <= (32 << 20) ? 20
                                               : 5;
      DTCC_RETURN_IF_ERROR(once().withContext(what));
      DTCC_RETURN_IF_ERROR(waitFor(stream, nccl, world, timeout, what));
      std::vector<double> times;
      for (int round = 0; round < settings.collectiveRounds; ++round) {
        DTCC_RETURN_IF_ERROR(cpu.barrier());
        const auto t0 = Clock::now();
        for (int r = 0; r < reps; ++r)
          DTCC_RETURN_IF_ERROR(once().withContext(what));
        DTCC_RETURN_IF_ERROR(waitFor(stream, nccl, world, timeout, what));
        double t = since(t0) / reps;
        DTCC_RETURN_IF_ERROR(reduceAcross(&cpu, t, ReduceKind::kMax));
        times.push_back(t);
      }
      // The second best: one lucky round does not make the link.
      std::sort(times.begin(), times.end());
      out.push_back({kind, n, double(payload),
                     times[std::min<size_t>(1, times.size() - 1)]});
    }
  }
  return Status::ok();
}

/// Writes `text` to `out` ("-": stdout).
Status writeOut(const std::string &out, const std::string &text) {
  if (out == "-") {
    std::fputs(text.c_str(), stdout);
    return Status::ok();
  }
  std::ofstream file(out);
  file << text;
  if (!file)
    return runtime::invalidArgument("cannot write '", out, "'");
  return Status::ok();
}

} // namespace

int main(int argc, char **argv) {
  Settings settings;
  // Arguments first: --help must work without a GPU.
  calibrate::CommonArgs args;
  std::string error = calibrate::parseCommonArgs(
      argc, argv, args,
      [&](const std::string &arg) {
        if (arg != "--quick")
          return false;
        settings = Settings::quick();
        return true;
      },
      "dtcc calibrate --device cuda");
  if (!error.empty())
    return fail(error);
  if (args.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const std::string &out = args.out, &base = args.base;
  const bool collectives = args.collectives;
  if (!base.empty()) {
    auto check = loadClusterSpec(base);
    if (!check.isOk())
      return fail(check.status().withContext("--base").message());
  }

  int gpus = 0;
  cudaError_t err = cudaGetDeviceCount(&gpus);
  if (err != cudaSuccess || gpus == 0)
    return fail(strCat(
        "no CUDA device: cudaGetDeviceCount returned ",
        err != cudaSuccess
            ? strCat(cudaGetErrorName(err), " (", cudaGetErrorString(err), ")")
            : std::string("0 devices"),
        "; run it on a machine with an NVIDIA GPU (one rank per GPU), or "
        "measure the CPU backend with dtcc calibrate without --device cuda"));

  auto world = runtime::World::init();
  if (!world.isOk())
    return fail(world.status().message());
  runtime::World &w = *world.value();
  // A rank that fails ends the job: the others would wait for it in their
  // next collective.
  auto failAll = [&w](const std::string &message) {
    fail(message);
    if (w.size() > 1)
      w.abort(1);
    return 1;
  };
  Communicator *comm = w.size() > 1 ? &w.world() : nullptr;
  const bool speak = w.rank() == 0;

  auto created = CudaDevice::create(w.localRank(), w.launch().localSize);
  if (!created.isOk())
    return failAll(created.status().message());
  CudaDevice &dev = *created.value();
  const cudaDeviceProp &props = dev.properties();

  GpuCalibrationData data;
  data.host = calibrate::hostName();
  data.date = calibrate::utcNow();
  data.gpu = props.name;
  data.computeCapability = strCat(props.major, ".", props.minor);
  data.multiprocessors = props.multiProcessorCount;
  data.software = softwareVersions();
  data.cpuModel = calibrate::cpuModel();
  data.gpusPerHost = gpus;
  data.hostMemTotalBytes = calibrate::memTotalBytes();
  data.launcher = w.launcher();
  data.ranks = w.size();
  data.concurrent = comm != nullptr;
  data.matmulWindowSeconds = settings.matmulWindowSeconds;
  data.kernelWindowSeconds = settings.kernelWindowSeconds;

  // The job: one kind of GPU (a cluster file describes one), which hosts.
  std::vector<std::string> hostOfRank = {data.host};
  if (comm) {
    auto names = calibrate::gatherStrings(*comm, data.gpu);
    auto hosts = calibrate::gatherStrings(*comm, data.host);
    if (!names.isOk() || !hosts.isOk())
      return failAll(
          (names.isOk() ? hosts.status() : names.status()).message());
    for (int r = 1; r < w.size(); ++r)
      if (names.value()[r] != names.value()[0])
        return failAll(strCat("the ranks drive different GPUs (",
                              names.value()[0], " on rank 0, ",
                              names.value()[r], " on rank ", r,
                              "): a cluster file describes one kind; calibrate "
                              "each kind in a job of its own"));
    hostOfRank = hosts.value();
    data.hosts = calibrate::countDistinct(hostOfRank);
  }

  // NCCL first, so that the free memory recorded is what a program keeps.
  std::unique_ptr<runtime::NcclComm> worldNccl, hostNccl;
  if (comm && collectives) {
    auto nccl = runtime::NcclComm::create(w.world());
    if (!nccl.isOk())
      return failAll(nccl.status()
                         .withContext("creating the NCCL world "
                                      "communicator")
                         .message());
    worldNccl = std::move(nccl.value());
    // Several hosts with several ranks each: the link inside a host too.
    std::map<std::string, int> ranksOn;
    for (const std::string &h : hostOfRank)
      ++ranksOn[h];
    int fewest = w.size();
    for (const auto &[h, count] : ranksOn)
      fewest = std::min(fewest, count);
    if (data.hosts > 1 && fewest > 1) {
      int color = 0;
      for (const auto &[h, count] : ranksOn) {
        if (h == data.host)
          break;
        ++color;
      }
      auto split = worldNccl->split(color, w.rank(), "host");
      if (!split.isOk() || !split.value())
        return failAll(split.isOk()
                           ? "ncclCommSplit by host made no communicator"
                           : split.status().message());
      hostNccl = std::move(split.value());
      data.ranksPerHost = fewest;
    }
  }
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess)
    return failAll("cudaMemGetInfo failed");
  data.deviceMemoryBytes = double(total);
  data.deviceMemoryFreeBytes = double(free);
  for (double *v : {&data.deviceMemoryBytes, &data.deviceMemoryFreeBytes})
    if (Status s = reduceAcross(comm, *v, ReduceKind::kMin); !s.isOk())
      return failAll(s.message());

  if (speak)
    std::fprintf(stderr,
                 "dtcc calibrate --device cuda: %s (sm_%d%d) on %lld rank%s, "
                 "%lld host%s: matmuls, kernels, copies%s ...\n",
                 data.gpu.c_str(), props.major, props.minor,
                 (long long)data.ranks, data.ranks == 1 ? "" : "s",
                 (long long)data.hosts, data.hosts == 1 ? "" : "s",
                 worldNccl ? ", NCCL collectives" : "");
  if (Status s = measureDevice(data, dev, comm, settings, speak); !s.isOk())
    return failAll(s.message());
  if (worldNccl) {
    data.transport = ncclName();
    if (Status s = measureCollectives(data.collectives, *worldNccl, w,
                                      dev.commStream(), settings);
        !s.isOk())
      return failAll(s.message());
    // Every host's communicator at once (ranks of other hosts run theirs).
    if (hostNccl)
      if (Status s = measureCollectives(data.hostCollectives, *hostNccl, w,
                                        dev.commStream(), settings);
          !s.isOk())
        return failAll(s.withContext("inside each host").message());
  }
  if (w.rank() != 0)
    return 0;

  auto baseCluster = loadClusterSpec(base.empty() ? gpuBasePreset(data.gpu) : base);
  if (!baseCluster.isOk())
    return fail(baseCluster.status().message());
  auto cluster = calibratedGpuCluster(data, baseCluster.value());
  if (!cluster.isOk())
    return fail(cluster.status().message());
  if (Status s = writeOut(out, clusterToJson(cluster.value()).dump(2) + "\n");
      !s.isOk())
    return fail(s.message());

  // A summary for people on stderr (stdout may be the file).
  const ClusterSpec &c = cluster.value();
  std::fprintf(
      stderr,
      "dtcc calibrate --device cuda: %s: bf16 %.0f, fp16 %.0f, tf32 "
      "%.0f, fp32 %.1f TFLOP/s (bf16 at 1024^3: %.0f%%); %zu "
      "kernels; copy %.0f GB/s, PCIe %.1f GB/s, launch %.1f us",
      data.gpu.c_str(), c.device.peakBf16.value / 1e12,
      c.device.peakFp16.value / 1e12, c.device.peakTf32.value / 1e12,
      c.device.peakFp32.value / 1e12,
      100 * c.device.matmulEfficiencyAt(1024, 1024, 1024),
      c.device.kernelSeconds.size(), c.device.memoryBandwidth.value / 1e9,
      c.pcieBandwidth.value / 1e9, c.device.kernelOverhead.value * 1e6);
  if (data.concurrent)
    std::fprintf(stderr, " (%lld GPUs at once)", (long long)data.ranks);
  if (!data.collectives.empty()) {
    const LinkSpec &l = data.hosts > 1 ? c.interNode : c.intraNode;
    std::fprintf(stderr,
                 "; NCCL over %lld ranks: bus bandwidth %.1f GB/s, "
                 "latency %.1f us",
                 (long long)data.ranks, l.bandwidth.value / 1e9,
                 l.latency.value * 1e6);
  }
  if (!data.unboundKernels.empty())
    std::fprintf(stderr, "; %zu kernels not timed (see the warnings)",
                 data.unboundKernels.size());
  std::fprintf(stderr, "%s%s\n", out == "-" ? "" : " -> ",
               out == "-" ? "" : out.c_str());
  return 0;
}
