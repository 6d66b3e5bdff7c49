//===- Calibration.cpp - a cluster spec from measurements -----------------===//

#include "planner/Calibration.h"
#include "planner/CostPrimitives.h"

#include "runtime/base/Format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <set>

namespace dtcc::planner {

using runtime::invalidArgument;
using runtime::strCat;

namespace {

/// Steps and bus volume of a collective sample, as the cost primitives
/// count them (planner/CostPrimitives.h): an all-reduce, or an all-gather
/// for any other kind.
void collectiveShape(const CollectiveSample &s, double &steps,
                     double &volume) {
  const Collective kind =
      s.kind == "all-reduce" ? Collective::kAllReduce : Collective::kAllGather;
  const int64_t n = std::max<int64_t>(2, s.ranks);
  steps = latencySteps(kind, n);
  volume = busVolume(kind, s.payloadBytes, n);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string measuredSource(const std::string &how,
                           const CalibrationData &data) {
  return strCat("measured by dtcc calibrate on ", data.host, " at ",
                data.date, ": ", how);
}

Figure measured(double value, const std::string &how,
                const CalibrationData &data) {
  return Figure{value, measuredSource(how, data)};
}

/// "312 us", "1.25 ms", "0.15 s": a time for people.
std::string formatSeconds(double seconds) {
  char buf[32];
  if (seconds >= 0.1)
    std::snprintf(buf, sizeof(buf), "%.3g s", seconds);
  else if (seconds >= 1e-3)
    std::snprintf(buf, sizeof(buf), "%.3g ms", seconds * 1e3);
  else if (seconds >= 1e-6)
    std::snprintf(buf, sizeof(buf), "%.3g us", seconds * 1e6);
  else
    std::snprintf(buf, sizeof(buf), "%.3g ns", seconds * 1e9);
  return buf;
}

std::string formatRate(double flopsPerSecond) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f GFLOP/s", flopsPerSecond / 1e9);
  return buf;
}

/// How a sustained rate was taken (as the tool times it).
std::string sustainedHow(double windowSeconds) {
  return strCat("sustained (median of three windows of >= ",
                formatSeconds(windowSeconds), ")");
}

Figure notMeasured(const Figure &base, const std::string &why) {
  return Figure{base.value, strCat(why, "; kept from the base: ", base.source)};
}

void linkNotMeasured(LinkSpec &link, const std::string &why) {
  link.bandwidth = notMeasured(link.bandwidth, why);
  link.latency = notMeasured(link.latency, why);
  link.efficiency = notMeasured(link.efficiency, why);
}

/// A figure's value and how it was measured -> the figure with its source.
using Measure = std::function<Figure(double, const std::string &)>;

/// `link` from a sweep (fitLink): `name` is the transport, `sweep` says
/// which collectives ran over what.
Status linkFromSweep(LinkSpec &link,
                     const std::vector<CollectiveSample> &samples,
                     const std::string &name, const std::string &sweep,
                     const Measure &measure) {
  StatusOr<LinkFit> fit = fitLink(samples);
  if (!fit.isOk())
    return fit.status();
  link.name = name;
  link.bandwidth =
      measure(fit.value().busBandwidth,
              strCat("nccl-tests bus bandwidth of ", sweep,
                     ", best message >= 1 MiB"));
  link.latency = measure(
      fit.value().latency,
      strCat("median time per ring/tree step of messages <= 4 KiB, ", sweep));
  link.efficiency = measure(
      1.0, "1: the bandwidth figure is already the achieved bus bandwidth");
  return Status::ok();
}

Json collectivesToJson(const std::vector<CollectiveSample> &samples) {
  Json coll = Json::array();
  for (const CollectiveSample &c : samples) {
    Json s = Json::object();
    s.set("kind", c.kind);
    s.set("ranks", c.ranks);
    s.set("payloadBytes", c.payloadBytes);
    s.set("seconds", c.seconds);
    coll.push(s);
  }
  return coll;
}

Json kernelsToJson(const std::vector<KernelSample> &samples) {
  Json kernels = Json::array();
  for (const KernelSample &k : samples) {
    Json s = Json::object();
    s.set("kernel", k.kernel);
    s.set("workload", k.workload);
    s.set("elements", k.elements);
    s.set("seconds", k.seconds);
    if (k.bytes > 0)
      s.set("bytes", k.bytes);
    kernels.push(s);
  }
  return kernels;
}

/// Checks kernel samples as calibratedCluster and calibratedGpuCluster
/// take them: named once each, positive elements and seconds.
Status checkKernelSamples(const std::vector<KernelSample> &samples) {
  std::set<std::string> seen;
  for (const KernelSample &k : samples) {
    if (k.kernel.empty())
      return invalidArgument("a kernel sample has no kernel name");
    if (!seen.insert(k.kernel).second)
      return invalidArgument("kernel ", k.kernel, " measured twice");
    if (k.elements <= 0 || !(k.seconds > 0) || !std::isfinite(k.seconds))
      return invalidArgument("kernel ", k.kernel, ": expected positive "
                             "elements and seconds, got ",
                             k.elements, " elements in ", k.seconds, " s");
  }
  return Status::ok();
}

} // namespace

StatusOr<LinkFit> fitLink(const std::vector<CollectiveSample> &samples) {
  LinkFit fit;
  for (const CollectiveSample &s : samples) {
    fit.smallSamples += s.payloadBytes <= 4096 && s.seconds > 0;
    fit.largeSamples += s.payloadBytes >= (1 << 20) && s.seconds > 0;
  }
  if (fit.smallSamples == 0)
    return invalidArgument("no collective of at most 4 KiB was measured");
  if (fit.largeSamples == 0)
    return invalidArgument("no collective of at least 1 MiB was measured");
  // Latency from the small messages less their (tiny) transfer, bandwidth
  // from the large ones less their latency; two rounds settle both.
  for (int round = 0; round < 3; ++round) {
    std::vector<double> latencies;
    for (const CollectiveSample &s : samples) {
      if (s.payloadBytes > 4096 || s.seconds <= 0)
        continue;
      double steps = 1, volume = 0;
      collectiveShape(s, steps, volume);
      double transfer = fit.busBandwidth > 0 ? volume / fit.busBandwidth : 0;
      latencies.push_back(std::max(0.0, s.seconds - transfer) / steps);
    }
    fit.latency = median(latencies);
    // The best large-message rate: slower ones were disturbed by other work
    // on the host, not limited by the link.
    double best = 0;
    for (const CollectiveSample &s : samples) {
      if (s.payloadBytes < (1 << 20) || s.seconds <= 0)
        continue;
      double steps = 1, volume = 0;
      collectiveShape(s, steps, volume);
      double transfer = s.seconds - fit.latency * steps;
      if (transfer > 0)
        best = std::max(best, volume / transfer);
    }
    if (best <= 0)
      return invalidArgument("the large collectives took no longer than "
                             "their latency");
    fit.busBandwidth = best;
  }
  return fit;
}

const MatmulSample *bestMatmul(const CalibrationData &data) {
  const MatmulSample *best = nullptr;
  for (const MatmulSample &m : data.matmul)
    if (!best || m.flopsPerSecond > best->flopsPerSecond)
      best = &m;
  return best;
}

const MatmulSample *matmulAt(const CalibrationData &data, int64_t n) {
  for (const MatmulSample &m : data.matmul)
    if (m.n == n)
      return &m;
  return nullptr;
}

StatusOr<ClusterSpec> calibratedCluster(const CalibrationData &data,
                                        ClusterSpec base) {
  const MatmulSample *peak = bestMatmul(data);
  if (!peak || !(peak->flopsPerSecond > 0))
    return invalidArgument("no matmul kernel rate was measured");
  const StreamSample *stream1 = nullptr, *streamAll = nullptr;
  for (const StreamSample &s : data.stream) {
    if (s.threads == 1 && (!stream1 || s.arrayBytes > stream1->arrayBytes))
      stream1 = &s;
    if (s.threads > 1 && (!streamAll || s.threads > streamAll->threads))
      streamAll = &s;
  }
  if (!stream1)
    return invalidArgument("no single-thread memory bandwidth was measured");

  ClusterSpec c = std::move(base);
  const std::string on =
      data.concurrent
          ? strCat(", on all ", data.ranks, " ranks at once (slowest rank)")
          : std::string(", one process");
  c.name = "calibrated-" + data.host;
  c.description = strCat("measured by dtcc calibrate on ", data.host, " (",
                         data.cpuModel, ", ", data.cores, " cores) at ",
                         data.date, "; one device = one core (one rank)");
  c.nodes = 1;
  c.device.name = data.cpuModel + " (1 core)";
  c.device.kind = "cpu";

  // The matmul kernel: its best rate is the peak, every size's rate over
  // the peak the efficiency curve (ascending n).
  const std::string sustained = sustainedHow(data.matmulWindowSeconds);
  const std::string matmulKernel =
      "dtcc's CPU matmul kernel (OpenBLAS sgemm) on f32 ";
  std::vector<MatmulSample> curve = data.matmul;
  std::sort(curve.begin(), curve.end(),
            [](const MatmulSample &a, const MatmulSample &b) {
              return a.n < b.n;
            });
  std::string sizes;
  c.device.gemmEfficiency.clear();
  for (size_t i = 0; i < curve.size(); ++i) {
    if (i > 0 && curve[i].n == curve[i - 1].n)
      return invalidArgument("matmul kernel: size ", curve[i].n,
                             " measured twice");
    if (curve[i].n <= 0 || !(curve[i].flopsPerSecond > 0))
      return invalidArgument("matmul kernel: no rate at n = ", curve[i].n);
    c.device.gemmEfficiency.push_back(
        {double(curve[i].n),
         std::min(1.0, curve[i].flopsPerSecond / peak->flopsPerSecond)});
    sizes += strCat(i ? ", " : "", curve[i].n);
  }
  c.device.gemmEfficiencySource = measuredSource(
      strCat(matmulKernel, "n x n x n products, n = ", sizes, ", 1 thread", on,
             ", ", sustained, ", over the peak (n = ", peak->n, ": ",
             formatRate(peak->flopsPerSecond), ")"),
      data);
  const std::string peakHow =
      strCat(matmulKernel, peak->n, "x", peak->n, "x", peak->n,
             " products, 1 thread", on, ", ", sustained,
             ", the best of n = ", sizes);
  c.device.peakFp32 = measured(peak->flopsPerSecond, peakHow, data);
  for (Figure *f : {&c.device.peakTf32, &c.device.peakBf16,
                    &c.device.peakFp16})
    *f = measured(peak->flopsPerSecond,
                  peakHow + " (the CPU backend computes every dtype in fp32)",
                  data);
  auto efficiencyAt = [&](int64_t n, const char *what, Figure &out) {
    const MatmulSample *m = matmulAt(data, n);
    if (!m)
      return;
    out = measured(std::min(1.0, m->flopsPerSecond / peak->flopsPerSecond),
                   strCat(matmulKernel, n, "^3 over ", peak->n, "^3, 1 thread",
                          on, " (", what, ")"),
                   data);
  };
  efficiencyAt(256, "the size of the CPU models' matrix products",
               c.device.matmulEfficiency);
  efficiencyAt(64, "the size of per-head attention products",
               c.device.attentionEfficiency);

  // Per-kernel rates: seconds per element of the largest operand or result.
  c.device.kernelSeconds.clear();
  const std::string kernelSustained = sustainedHow(data.kernelWindowSeconds);
  DTCC_RETURN_IF_ERROR(checkKernelSamples(data.kernels));
  for (const KernelSample &k : data.kernels) {
    c.device.kernelSeconds[k.kernel] = measured(
        k.seconds / double(k.elements),
        strCat("dtcc's CPU ", k.kernel, " kernel on ", k.workload,
               ", 1 thread", on, ", ", kernelSustained, ": ",
               formatSeconds(k.seconds), " per call over ", k.elements,
               " elements (its largest operand or result)"),
        data);
  }

  c.device.memoryBandwidth = measured(
      stream1->bytesPerSecond,
      strCat("triad over 3 x ", runtime::formatBytes(stream1->arrayBytes),
             ", 1 thread", on),
      data);
  c.device.memoryEfficiency =
      measured(1.0, "1: the bandwidth figure is already the achieved triad "
                    "rate",
               data);
  if (data.callOverheadSeconds > 0)
    c.device.kernelOverhead = measured(
        data.callOverheadSeconds, "one 8^3 OpenBLAS sgemm call", data);
  if (data.memTotalBytes > 0) {
    c.device.memoryBytes =
        measured(data.memTotalBytes / double(data.cores),
                 strCat("MemTotal of /proc/meminfo over ", data.cores,
                        " cores"),
                 data);
    c.hostMemoryBytes =
        measured(data.memTotalBytes, "MemTotal of /proc/meminfo", data);
  }
  c.devicesPerNode =
      measured(double(data.cores), "online CPUs: one rank per core", data);
  if (streamAll)
    c.hostMemoryBandwidth = measured(
        streamAll->bytesPerSecond,
        strCat("triad over 3 x ", runtime::formatBytes(streamAll->arrayBytes),
               ", ", streamAll->threads, " threads"),
        data);
  c.pcieBandwidth = measured(
      stream1->bytesPerSecond,
      "no PCIe: device memory is host memory; = the single-thread triad",
      data);

  if (data.collectives.empty() || data.ranks < 2) {
    std::string why = "not measured (one process: run dtcc calibrate under "
                      "mpirun -np N to measure collectives)";
    linkNotMeasured(c.intraNode, why);
    linkNotMeasured(c.interNode, why);
  } else {
    bool inter = data.hosts > 1;
    LinkSpec &link = inter ? c.interNode : c.intraNode;
    LinkSpec &other = inter ? c.intraNode : c.interNode;
    std::string sweep = strCat(
        "all-reduce and all-gather over ", data.ranks, " ranks on ",
        data.hosts, inter ? " hosts" : " host", " (", data.transport,
        "), the runtime's communicators");
    DTCC_RETURN_IF_ERROR(
        linkFromSweep(link, data.collectives, data.transport, sweep,
                      [&](double v, const std::string &how) {
                        return measured(v, how, data);
                      })
            .withContext("collectives"));
    linkNotMeasured(other,
                    inter ? "not measured (no host ran two ranks)"
                          : strCat("not measured (all ", data.ranks,
                                   " ranks on ", data.host, ")"));
  }
  c.calibration = calibrationToJson(data);
  DTCC_RETURN_IF_ERROR(c.validate());
  return c;
}

Json calibrationToJson(const CalibrationData &data) {
  Json j = Json::object();
  j.set("tool", "dtcc calibrate");
  j.set("host", data.host);
  j.set("date", data.date);
  j.set("cpu", data.cpuModel);
  j.set("blas", data.blas);
  j.set("cores", data.cores);
  j.set("memTotalBytes", data.memTotalBytes);
  j.set("launcher", data.launcher);
  j.set("ranks", data.ranks);
  j.set("hosts", data.hosts);
  j.set("concurrent", data.concurrent);
  Json gemm = Json::array();
  for (const GemmSample &g : data.gemm) {
    Json s = Json::object();
    s.set("n", g.n);
    s.set("threads", g.threads);
    s.set("flopsPerSecond", g.flopsPerSecond);
    gemm.push(s);
  }
  j.set("sgemm", gemm);
  Json matmul = Json::array();
  for (const MatmulSample &m : data.matmul) {
    Json s = Json::object();
    s.set("n", m.n);
    s.set("flopsPerSecond", m.flopsPerSecond);
    matmul.push(s);
  }
  j.set("matmulKernel", matmul);
  j.set("matmulWindowSeconds", data.matmulWindowSeconds);
  j.set("kernels", kernelsToJson(data.kernels));
  j.set("kernelWindowSeconds", data.kernelWindowSeconds);
  Json stream = Json::array();
  for (const StreamSample &t : data.stream) {
    Json s = Json::object();
    s.set("threads", t.threads);
    s.set("arrayBytes", t.arrayBytes);
    s.set("bytesPerSecond", t.bytesPerSecond);
    stream.push(s);
  }
  j.set("triad", stream);
  j.set("callOverheadSeconds", data.callOverheadSeconds);
  if (!data.collectives.empty()) {
    j.set("transport", data.transport);
    j.set("collectives", collectivesToJson(data.collectives));
  }
  return j;
}

//===----------------------------------------------------------------------===//
// GPUs
//===----------------------------------------------------------------------===//

namespace {

std::string gpuSource(const std::string &how, const GpuCalibrationData &data) {
  return strCat("measured by dtcc calibrate --device cuda on ", data.host,
                " (", data.gpu, ") at ", data.date, ": ", how);
}

Figure gpuMeasured(double value, const std::string &how,
                   const GpuCalibrationData &data) {
  return Figure{value, gpuSource(how, data)};
}

/// "712.3 TFLOP/s", "45.1 GFLOP/s".
std::string formatFlops(double flopsPerSecond) {
  char buf[32];
  if (flopsPerSecond >= 1e12)
    std::snprintf(buf, sizeof(buf), "%.1f TFLOP/s", flopsPerSecond / 1e12);
  else
    std::snprintf(buf, sizeof(buf), "%.1f GFLOP/s", flopsPerSecond / 1e9);
  return buf;
}

std::string formatBandwidth(double bytesPerSecond) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f GB/s", bytesPerSecond / 1e9);
  return buf;
}

/// What the runtime multiplies for each planner dtype.
std::string gpuMatmulOperands(DType dtype) {
  switch (dtype) {
  case DType::kFp32:
    return "f32 operands, CUBLAS_COMPUTE_32F (DTCC_CUDA_ALLOW_TF32 unset, as "
           "programs run by default)";
  case DType::kTf32:
    return "f32 operands bound with DTCC_CUDA_ALLOW_TF32 "
           "(CUBLAS_COMPUTE_32F_FAST_TF32)";
  case DType::kBf16:
    return "bf16 operands, fp32 accumulation";
  case DType::kFp16:
    return "f16 operands, fp32 accumulation";
  }
  return "";
}

/// ", on all 8 GPUs at once (slowest rank)" or ", one GPU".
std::string gpuOn(const GpuCalibrationData &data) {
  return data.concurrent
             ? strCat(", on all ", data.ranks, " GPUs at once (slowest rank)")
             : std::string(", one GPU");
}

/// The samples of one dtype, ascending n; errors on a size measured twice
/// or without a rate.
StatusOr<std::vector<GpuMatmulSample>>
gpuMatmulCurve(const GpuCalibrationData &data, DType dtype) {
  std::vector<GpuMatmulSample> curve;
  for (const GpuMatmulSample &m : data.matmul)
    if (m.dtype == dtype)
      curve.push_back(m);
  std::sort(curve.begin(), curve.end(),
            [](const GpuMatmulSample &a, const GpuMatmulSample &b) {
              return a.n < b.n;
            });
  for (size_t i = 0; i < curve.size(); ++i) {
    if (i > 0 && curve[i].n == curve[i - 1].n)
      return invalidArgument("matmul kernel: ", dtypeName(dtype), " size ",
                             curve[i].n, " measured twice");
    if (curve[i].n <= 0 || !(curve[i].flopsPerSecond > 0) ||
        !std::isfinite(curve[i].flopsPerSecond))
      return invalidArgument("matmul kernel: no ", dtypeName(dtype),
                             " rate at n = ", curve[i].n);
  }
  return curve;
}

std::string sizeList(const std::vector<GpuMatmulSample> &curve) {
  std::string sizes;
  for (size_t i = 0; i < curve.size(); ++i)
    sizes += strCat(i ? ", " : "", curve[i].n);
  return sizes;
}

const GpuMatmulSample &bestOf(const std::vector<GpuMatmulSample> &curve) {
  const GpuMatmulSample *best = &curve.front();
  for (const GpuMatmulSample &m : curve)
    if (m.flopsPerSecond > best->flopsPerSecond)
      best = &m;
  return *best;
}

/// The largest sample of `kind`, or null.
const CopySample *largestCopy(const GpuCalibrationData &data,
                              const std::string &kind) {
  const CopySample *best = nullptr;
  for (const CopySample &c : data.copies)
    if (c.kind == kind && c.bytesPerSecond > 0 &&
        (!best || c.bytes > best->bytes))
      best = &c;
  return best;
}

Figure gpuMatmulEfficiency(const GpuCalibrationData &data, DType dtype,
                           const GpuMatmulSample &at,
                           const GpuMatmulSample &best, const std::string &on) {
  return gpuMeasured(
      std::min(1.0, at.flopsPerSecond / best.flopsPerSecond),
      strCat("dtcc's CUDA matmul kernel (cuBLASLt) on ", dtypeName(dtype), " ",
             at.n, "^3 over its best (", best.n, "^3)", on,
             " (large GEMMs: a 7B-class layer, hidden 4096, 4096 tokens); "
             "windows of ",
             formatSeconds(data.matmulWindowSeconds),
             " do not show the clocks a long run settles at under the power "
             "cap"),
      data);
}

} // namespace

std::string gpuBasePreset(const std::string &gpuName) {
  if (gpuName.find("H200") != std::string::npos)
    return "h200";
  if (gpuName.find("A100") != std::string::npos)
    return "dgx-a100-80g";
  return "dgx-h100";
}

StatusOr<DType> gpuCurveDType(const GpuCalibrationData &data) {
  for (DType dtype : {DType::kBf16, DType::kFp16, DType::kTf32, DType::kFp32})
    for (const GpuMatmulSample &m : data.matmul)
      if (m.dtype == dtype)
        return dtype;
  return invalidArgument("no matmul kernel rate was measured");
}

StatusOr<ClusterSpec> calibratedGpuCluster(const GpuCalibrationData &data,
                                           ClusterSpec base) {
  DTCC_ASSIGN_OR_RETURN(DType curveType, gpuCurveDType(data));
  const CopySample *d2d = largestCopy(data, "device-to-device");
  if (!d2d)
    return invalidArgument("no device-to-device copy was measured");
  DTCC_RETURN_IF_ERROR(checkKernelSamples(data.kernels));

  ClusterSpec c = std::move(base);
  const std::string on = gpuOn(data);
  c.name = "calibrated-" + data.host;
  c.description = strCat(
      "measured by dtcc calibrate --device cuda on ", data.host, " (", data.gpu,
      ", compute capability ", data.computeCapability, ", ",
      data.multiprocessors, " SMs; ", data.software, ") at ", data.date, "; ",
      data.ranks, data.ranks == 1 ? " rank" : " ranks", " on ", data.hosts,
      data.hosts == 1 ? " host" : " hosts", "; one device = one GPU");
  c.nodes = std::max<int64_t>(1, data.hosts);
  c.device.name = data.gpu;
  c.device.kind = "gpu";

  // Matrix products: each dtype's best size is its peak.
  const std::string sustained = sustainedHow(data.matmulWindowSeconds);
  const std::string matmulKernel = "dtcc's CUDA matmul kernel (cuBLASLt) on ";
  for (DType dtype : {DType::kFp32, DType::kTf32, DType::kBf16, DType::kFp16}) {
    Figure &peak = dtype == DType::kFp32   ? c.device.peakFp32
                   : dtype == DType::kTf32 ? c.device.peakTf32
                   : dtype == DType::kBf16 ? c.device.peakBf16
                                           : c.device.peakFp16;
    DTCC_ASSIGN_OR_RETURN(std::vector<GpuMatmulSample> curve,
                          gpuMatmulCurve(data, dtype));
    if (curve.empty()) {
      peak = notMeasured(
          peak, strCat("not measured (no ", dtypeName(dtype),
                       " matmul on this GPU, compute capability ",
                       data.computeCapability, ")"));
      continue;
    }
    const GpuMatmulSample &best = bestOf(curve);
    peak = gpuMeasured(
        best.flopsPerSecond,
        strCat(matmulKernel, best.n, "x", best.n, "x", best.n,
               " products of ", gpuMatmulOperands(dtype), on, ", ", sustained,
               ", the best of n = ", sizeList(curve)),
        data);
  }

  // The efficiency curve: one dtype's rates over its own peak.
  DTCC_ASSIGN_OR_RETURN(std::vector<GpuMatmulSample> curve,
                        gpuMatmulCurve(data, curveType));
  const GpuMatmulSample &best = bestOf(curve);
  c.device.gemmEfficiency.clear();
  for (const GpuMatmulSample &m : curve)
    c.device.gemmEfficiency.push_back(
        {double(m.n), std::min(1.0, m.flopsPerSecond / best.flopsPerSecond)});
  const std::string why =
      curveType == DType::kBf16
          ? std::string("bf16, what mixed-precision training multiplies in")
          : strCat(dtypeName(curveType), ", no bf16 products were measured");
  c.device.gemmEfficiencySource = gpuSource(
      strCat(matmulKernel, "n x n x n products of ",
             gpuMatmulOperands(curveType), ", n = ", sizeList(curve), on, ", ",
             sustained, ", over the best (n = ", best.n, ": ",
             formatFlops(best.flopsPerSecond), "); the curve of ", why,
             ", applied to every dtype's peak"),
      data);
  const GpuMatmulSample *reference = &curve.front();
  for (const GpuMatmulSample &m : curve)
    if (m.n <= kGpuMatmulReferenceN)
      reference = &m;
  c.device.matmulEfficiency = gpuMatmulEfficiency(data, curveType, *reference,
                                                  best, on);
  if (data.attentionFlopsPerSecond > 0 && c.device.peakBf16.value > 0)
    c.device.attentionEfficiency = gpuMeasured(
        data.attentionFlopsPerSecond / c.device.peakBf16.value,
        strCat("dtcc's attention kernels, ", data.attentionWorkload, on, ", ",
               sustainedHow(data.kernelWindowSeconds), ": ",
               formatFlops(data.attentionFlopsPerSecond),
               " (runtime::attentionFlops of both) over the bf16 peak"),
        data);
  else
    c.device.attentionEfficiency =
        notMeasured(c.device.attentionEfficiency,
                    "not measured (no bf16 attention was timed)");

  // Per-kernel rates.
  c.device.kernelSeconds.clear();
  c.device.kernelByteSeconds.clear();
  const std::string kernelSustained = sustainedHow(data.kernelWindowSeconds);
  for (const KernelSample &k : data.kernels) {
    // The sample's seconds per call over `count` of `what`.
    auto rate = [&](int64_t count, const char *what) {
      return gpuMeasured(
          k.seconds / double(count),
          strCat("dtcc's CUDA ", k.kernel, " kernel on ", k.workload, on, ", ",
                 kernelSustained, ": ", formatSeconds(k.seconds),
                 " per call over ", count, what),
          data);
    };
    c.device.kernelSeconds[k.kernel] =
        rate(k.elements, " elements (its largest operand or result)");
    if (k.bytes > 0)
      c.device.kernelByteSeconds[k.kernel] =
          rate(k.bytes, " bytes (its operands and results)");
  }

  // Memory.
  c.device.memoryBandwidth = gpuMeasured(
      d2d->bytesPerSecond,
      strCat("device-to-device cudaMemcpyAsync of ",
             runtime::formatBytes(d2d->bytes),
             " (bytes read + bytes written per second, as STREAM's copy)", on,
             ", ", sustainedHow(data.kernelWindowSeconds)),
      data);
  c.device.memoryEfficiency = gpuMeasured(
      1.0, "1: the bandwidth figure is already the achieved copy rate", data);
  if (data.launchSeconds > 0)
    c.device.kernelOverhead = gpuMeasured(
        data.launchSeconds,
        strCat("dtcc's CUDA ", data.launchWorkload,
               " launched back to back through the registry", on, ", ",
               kernelSustained, ", per call"),
        data);
  if (data.deviceMemoryBytes > 0)
    c.device.memoryBytes = gpuMeasured(
        data.deviceMemoryBytes,
        strCat("cudaMemGetInfo total", data.concurrent ? " (smallest rank)" : ""),
        data);
  if (data.deviceMemoryFreeBytes > 0 && data.deviceMemoryBytes > 0)
    c.device.reservedBytes = notMeasured(
        c.device.reservedBytes,
        strCat("not measured (once the runtime's CUDA context, cuBLASLt "
               "workspace and NCCL communicators existed, ",
               runtime::formatBytes(int64_t(data.deviceMemoryBytes -
                                            data.deviceMemoryFreeBytes)),
               " of the GPU's memory were in use; the reserve also covers "
               "allocator fragmentation and NCCL's buffers under load)"));
  if (data.gpusPerHost > 0)
    c.devicesPerNode = gpuMeasured(double(data.gpusPerHost),
                                   "cudaGetDeviceCount: one rank per GPU", data);
  if (data.hostMemTotalBytes > 0)
    c.hostMemoryBytes =
        gpuMeasured(data.hostMemTotalBytes, "MemTotal of /proc/meminfo", data);
  c.hostMemoryBandwidth = notMeasured(
      c.hostMemoryBandwidth, "not measured by --device cuda (dtcc calibrate "
                             "on the CPU times a triad on all cores)");
  const CopySample *h2d = largestCopy(data, "host-to-device");
  const CopySample *d2h = largestCopy(data, "device-to-host");
  if (h2d && d2h) {
    const CopySample &slower =
        h2d->bytesPerSecond <= d2h->bytesPerSecond ? *h2d : *d2h;
    c.pcieBandwidth = gpuMeasured(
        slower.bytesPerSecond,
        strCat("pinned host-to-device and device-to-host cudaMemcpyAsync of ",
               runtime::formatBytes(slower.bytes), ", the slower direction (",
               formatBandwidth(h2d->bytesPerSecond), " to the GPU, ",
               formatBandwidth(d2h->bytesPerSecond), " from it)", on),
        data);
  } else {
    c.pcieBandwidth = notMeasured(c.pcieBandwidth,
                                  "not measured (no host copies were timed)");
  }

  // Links.
  auto measure = [&](double v, const std::string &how) {
    return gpuMeasured(v, how, data);
  };
  if (data.collectives.empty() || data.ranks < 2) {
    std::string why =
        "not measured (one process: run dtcc calibrate --device cuda under "
        "mpirun -np N, one rank per GPU, to measure NCCL collectives)";
    linkNotMeasured(c.intraNode, why);
    linkNotMeasured(c.interNode, why);
  } else {
    const bool inter = data.hosts > 1;
    const std::string sweep = strCat(
        "all-reduce and all-gather over ", data.ranks, " GPUs on ", data.hosts,
        inter ? " hosts" : " host", " (", data.transport,
        "), the runtime's NCCL communicators");
    DTCC_RETURN_IF_ERROR(linkFromSweep(inter ? c.interNode : c.intraNode,
                                       data.collectives, data.transport, sweep,
                                       measure)
                             .withContext("collectives"));
    if (!inter) {
      linkNotMeasured(c.interNode, strCat("not measured (all ", data.ranks,
                                          " ranks on ", data.host, ")"));
    } else if (data.hostCollectives.empty()) {
      linkNotMeasured(c.intraNode, "not measured (no host ran two ranks)");
    } else {
      const std::string hostSweep = strCat(
          "all-reduce and all-gather over each host's ", data.ranksPerHost,
          " GPUs at once (", data.hosts, " hosts, ", data.transport,
          "), the runtime's NCCL communicators split by host, slowest host");
      DTCC_RETURN_IF_ERROR(linkFromSweep(c.intraNode, data.hostCollectives,
                                         data.transport, hostSweep, measure)
                               .withContext("collectives inside each host"));
    }
  }
  c.calibration = gpuCalibrationToJson(data);
  DTCC_RETURN_IF_ERROR(c.validate());
  return c;
}

Json gpuCalibrationToJson(const GpuCalibrationData &data) {
  Json j = Json::object();
  j.set("tool", "dtcc calibrate --device cuda");
  j.set("host", data.host);
  j.set("date", data.date);
  j.set("gpu", data.gpu);
  j.set("computeCapability", data.computeCapability);
  j.set("multiprocessors", data.multiprocessors);
  j.set("software", data.software);
  j.set("cpu", data.cpuModel);
  j.set("gpusPerHost", data.gpusPerHost);
  j.set("deviceMemoryBytes", data.deviceMemoryBytes);
  j.set("deviceMemoryFreeBytes", data.deviceMemoryFreeBytes);
  j.set("hostMemTotalBytes", data.hostMemTotalBytes);
  j.set("launcher", data.launcher);
  j.set("ranks", data.ranks);
  j.set("hosts", data.hosts);
  j.set("concurrent", data.concurrent);
  Json matmul = Json::array();
  for (const GpuMatmulSample &m : data.matmul) {
    Json s = Json::object();
    s.set("dtype", dtypeName(m.dtype));
    s.set("n", m.n);
    s.set("flopsPerSecond", m.flopsPerSecond);
    matmul.push(s);
  }
  j.set("matmulKernel", matmul);
  j.set("matmulWindowSeconds", data.matmulWindowSeconds);
  j.set("kernels", kernelsToJson(data.kernels));
  j.set("kernelWindowSeconds", data.kernelWindowSeconds);
  if (!data.unboundKernels.empty()) {
    Json unbound = Json::array();
    for (const std::string &k : data.unboundKernels)
      unbound.push(k);
    j.set("unboundKernels", unbound);
  }
  Json copies = Json::array();
  for (const CopySample &c : data.copies) {
    Json s = Json::object();
    s.set("kind", c.kind);
    s.set("bytes", c.bytes);
    s.set("bytesPerSecond", c.bytesPerSecond);
    copies.push(s);
  }
  j.set("copies", copies);
  j.set("launchSeconds", data.launchSeconds);
  j.set("launchWorkload", data.launchWorkload);
  if (!data.collectives.empty()) {
    j.set("transport", data.transport);
    j.set("collectives", collectivesToJson(data.collectives));
  }
  if (!data.hostCollectives.empty()) {
    j.set("ranksPerHost", data.ranksPerHost);
    j.set("hostCollectives", collectivesToJson(data.hostCollectives));
  }
  return j;
}

} // namespace dtcc::planner
