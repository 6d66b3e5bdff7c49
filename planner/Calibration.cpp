//===- Calibration.cpp - a cluster spec from measurements -----------------===//

#include "planner/Calibration.h"

#include "runtime/base/Format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace dtcc::planner {

using runtime::invalidArgument;
using runtime::strCat;

namespace {

/// Steps and bus volume of a collective, exactly as
/// TimeModel::collectiveTime counts them.
void collectiveShape(const CollectiveSample &s, double &steps,
                     double &volume) {
  double n = double(std::max<int64_t>(2, s.ranks));
  double logSteps = std::ceil(std::log2(n));
  if (s.kind == "all-reduce") {
    steps = std::min(2 * (n - 1), 2 * logSteps);
    volume = 2 * (n - 1) / n * s.payloadBytes;
  } else {
    steps = std::min(n - 1, logSteps);
    volume = (n - 1) / n * s.payloadBytes;
  }
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
  for (const KernelSample &k : data.kernels) {
    if (k.kernel.empty())
      return invalidArgument("a kernel sample has no kernel name");
    if (c.device.kernelSeconds.count(k.kernel))
      return invalidArgument("kernel ", k.kernel, " measured twice");
    if (k.elements <= 0 || !(k.seconds > 0) || !std::isfinite(k.seconds))
      return invalidArgument("kernel ", k.kernel, ": expected positive "
                             "elements and seconds, got ",
                             k.elements, " elements in ", k.seconds, " s");
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
    for (LinkSpec *link : {&c.intraNode, &c.interNode}) {
      link->bandwidth = notMeasured(link->bandwidth, why);
      link->latency = notMeasured(link->latency, why);
      link->efficiency = notMeasured(link->efficiency, why);
    }
  } else {
    auto fit = fitLink(data.collectives);
    if (!fit.isOk())
      return fit.status().withContext("collectives");
    bool inter = data.hosts > 1;
    LinkSpec &link = inter ? c.interNode : c.intraNode;
    LinkSpec &other = inter ? c.intraNode : c.interNode;
    std::string sweep = strCat(
        "all-reduce and all-gather over ", data.ranks, " ranks on ",
        data.hosts, inter ? " hosts" : " host", " (", data.transport,
        "), the runtime's communicators");
    link.name = data.transport;
    link.bandwidth = measured(
        fit.value().busBandwidth,
        strCat("nccl-tests bus bandwidth of ", sweep,
               ", best message >= 1 MiB"),
        data);
    link.latency = measured(
        fit.value().latency,
        strCat("median time per ring/tree step of messages <= 4 KiB, ", sweep),
        data);
    link.efficiency = measured(
        1.0, "1: the bandwidth figure is already the achieved bus bandwidth",
        data);
    std::string why =
        inter ? "not measured (no host ran two ranks)"
              : strCat("not measured (all ", data.ranks, " ranks on ",
                       data.host, ")");
    other.bandwidth = notMeasured(other.bandwidth, why);
    other.latency = notMeasured(other.latency, why);
    other.efficiency = notMeasured(other.efficiency, why);
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
  Json kernels = Json::array();
  for (const KernelSample &k : data.kernels) {
    Json s = Json::object();
    s.set("kernel", k.kernel);
    s.set("workload", k.workload);
    s.set("elements", k.elements);
    s.set("seconds", k.seconds);
    kernels.push(s);
  }
  j.set("kernels", kernels);
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
    Json coll = Json::array();
    for (const CollectiveSample &c : data.collectives) {
      Json s = Json::object();
      s.set("kind", c.kind);
      s.set("ranks", c.ranks);
      s.set("payloadBytes", c.payloadBytes);
      s.set("seconds", c.seconds);
      coll.push(s);
    }
    j.set("collectives", coll);
  }
  return j;
}

} // namespace dtcc::planner
