//===- Report.cpp - plan reports as text, JSON and Chrome trace -----------===//

#include "planner/Report.h"

#include "planner/Units.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace dtcc::planner {

using runtime::invalidArgument;
using runtime::strCat;

RunCost runCost(const TimeBreakdown &time, int64_t devices, double tokens,
                double pricePerGpuHour) {
  RunCost c;
  c.tokens = tokens;
  c.steps = time.tokensPerStep > 0 ? std::ceil(tokens / time.tokensPerStep)
                                   : 0;
  c.seconds = c.steps * time.stepTime;
  c.gpuHours = c.seconds / 3600 * double(devices);
  c.pricePerGpuHour = pricePerGpuHour;
  c.price = c.gpuHours * pricePerGpuHour;
  return c;
}

//===----------------------------------------------------------------------===//
// Parsing of quantities
//===----------------------------------------------------------------------===//

namespace {

/// Splits "2.5T" into 2.5 and "T"; false when no number leads.
bool splitNumber(const std::string &text, double &value, std::string &suffix) {
  const char *begin = text.c_str();
  char *end = nullptr;
  value = std::strtod(begin, &end);
  if (end == begin || !std::isfinite(value))
    return false;
  suffix = std::string(end);
  return true;
}

} // namespace

StatusOr<double> parseCount(const std::string &text) {
  double value = 0;
  std::string suffix;
  if (!splitNumber(text, value, suffix) || value < 0)
    return invalidArgument("expected a count like 2T, 300B or 1.5e12, got '",
                           text, "'");
  double scale = 1;
  if (suffix == "K" || suffix == "k")
    scale = 1e3;
  else if (suffix == "M")
    scale = 1e6;
  else if (suffix == "B" || suffix == "G")
    scale = 1e9;
  else if (suffix == "T")
    scale = 1e12;
  else if (!suffix.empty())
    return invalidArgument("unknown suffix '", suffix, "' in '", text,
                           "' (use K, M, B/G or T)");
  return value * scale;
}

StatusOr<double> parseDuration(const std::string &text) {
  double value = 0;
  std::string suffix;
  if (!splitNumber(text, value, suffix) || value < 0)
    return invalidArgument("expected a duration like 10s, 500ms or 2m, got '",
                           text, "'");
  if (suffix.empty() || suffix == "s")
    return value;
  if (suffix == "ms")
    return value / 1e3;
  if (suffix == "m" || suffix == "min")
    return value * 60;
  if (suffix == "h")
    return value * 3600;
  return invalidArgument("unknown unit '", suffix, "' in '", text,
                         "' (use ms, s, m or h)");
}

//===----------------------------------------------------------------------===//
// Text
//===----------------------------------------------------------------------===//

namespace {

std::string padRight(const std::string &s, size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

std::string padLeft(const std::string &s, size_t width) {
  return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}

/// A table with a header row; columns after the first are right-aligned.
class Table {
public:
  explicit Table(std::vector<std::string> header, bool leftAligned = false)
      : leftAligned_(leftAligned) {
    rows_.push_back(std::move(header));
  }
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string render(const std::string &indent) const {
    std::vector<size_t> width;
    for (const auto &row : rows_)
      for (size_t i = 0; i < row.size(); ++i) {
        if (width.size() <= i)
          width.push_back(0);
        width[i] = std::max(width[i], row[i].size());
      }
    std::string out;
    for (const auto &row : rows_) {
      std::string line = indent;
      for (size_t i = 0; i < row.size(); ++i) {
        if (i)
          line += "  ";
        line += i == 0 || leftAligned_ ? padRight(row[i], width[i])
                                       : padLeft(row[i], width[i]);
      }
      while (!line.empty() && line.back() == ' ')
        line.pop_back();
      out += line + "\n";
    }
    return out;
  }

private:
  std::vector<std::vector<std::string>> rows_;
  bool leftAligned_;
};

std::string fixed(double value, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, value);
  return buf;
}

std::string share(double part, double whole) {
  return whole > 0 ? formatPercent(part / whole) : "-";
}

std::string formatDuration(double seconds) {
  if (seconds >= 2 * 86400)
    return fixed(seconds / 86400, 1) + " days";
  if (seconds >= 2 * 3600)
    return fixed(seconds / 3600, 1) + " hours";
  return formatSeconds(seconds);
}

std::string formatMoney(double amount) {
  char buf[64];
  if (amount >= 1e6)
    std::snprintf(buf, sizeof(buf), "$%.2f M", amount / 1e6);
  else
    std::snprintf(buf, sizeof(buf), "$%.0f", amount);
  return buf;
}

/// The ZeRO stage and what it shards; nothing with one data-parallel rank
/// (ZeRO shards over the data-parallel ranks).
std::string zeroText(const Plan &p) {
  if (p.zeroStage == 0)
    return "none (plain data parallelism)";
  std::string stage = "stage " + std::to_string(p.zeroStage);
  if (p.dp == 1)
    return stage + " (nothing sharded: one data-parallel rank)";
  switch (p.zeroStage) {
  case 1:
    return stage + " (optimizer state sharded)";
  case 2:
    return stage + " (optimizer state and gradients sharded)";
  default:
    return stage + " (optimizer state, gradients and parameters sharded)";
  }
}

/// `unit` is what a batch counts: "sequence" (a transformer's), or
/// "sample" (a model known by its graph alone).
void describePlan(std::ostringstream &os, const Plan &p, const char *unit) {
  os << "  mesh            dp=" << p.dp << " x pp=" << p.pp << " x tp=" << p.tp;
  if (p.cp > 1)
    os << " x cp=" << p.cp;
  os << " (" << p.devices() << " devices)\n";
  os << "  ZeRO            " << zeroText(p) << "\n";
  os << "  micro-batches   " << p.microBatches << " of " << p.microBatchSize
     << " " << unit << (p.microBatchSize == 1 ? "" : "s")
     << " per data-parallel rank\n";
  if (p.pp > 1) {
    os << "  schedule        " << scheduleName(p.schedule);
    if (p.schedule == Schedule::kInterleaved)
      os << " (" << p.virtualStages << " chunks per device)";
    os << "\n";
  }
  os << "  recompute       " << recomputeName(p.recompute);
  if (p.recompute == Recompute::kFull && p.recomputeLayers > 0)
    os << " (the first " << p.recomputeLayers << " layers of each stage)";
  os << "\n";
  if (p.tp > 1)
    os << "  sequence par.   " << (p.sequenceParallel ? "yes" : "no") << "\n";
  os << "  offload         " << offloadName(p.offload) << "\n";
  os << "  precision       " << p.dtype.describe() << "\n";
}

} // namespace

std::string formatReport(const PlanReport &r) {
  std::ostringstream os;
  const ModelDesc &m = r.model;
  const ClusterSpec &c = r.cluster;
  // A model the transformer description does not cover (no heads) is
  // described by the notes (its compiled step), not by zeros.
  const bool described = m.heads > 0;
  os << "dtcc plan: " << m.name;
  if (described)
    os << " (" << formatCount(double(m.totalParams())) << " parameters)";
  os << " on " << c.numDevices() << " x " << c.device.name << " ("
     << c.nodes << " node" << (c.nodes == 1 ? "" : "s") << " of " << c.perNode()
     << ", " << c.name << ")\n";
  if (described) {
    os << "  model: " << m.layers << " layers, hidden " << m.hidden << ", "
       << m.heads << " heads";
    if (m.kvHeads != m.heads)
      os << " (" << m.kvHeads << " kv)";
    os << ", ffn " << m.ffnHidden << (m.gatedMlp ? " (SwiGLU)" : "")
       << ", vocab " << m.vocab << ", sequence " << m.seq << "\n";
  }
  if (!r.modelSource.empty())
    os << "  model from: " << r.modelSource << "\n";
  // A model known by its graph alone has no sequence: its batch counts
  // samples, and its "tokens" (tokensPerSecond, a run's tokens) are those.
  const bool sequences = m.seq > 0;
  const char *const unit = sequences ? "sequence" : "sample";
  const char *const counted = sequences ? "tokens" : "samples";
  if (sequences)
    os << "  global batch " << r.globalBatch
       << " sequences = " << formatCount(double(r.globalBatch) * double(m.seq))
       << " tokens per step\n";
  else
    os << "  global batch " << r.globalBatch << " samples per step\n";
  os << "  priced by: " << r.pricedBy
     << (r.pricedByReason.empty() ? "" : " (" + r.pricedByReason + ")")
     << "\n";
  for (const std::string &note : r.notes)
    os << "  note: " << note << "\n";
  if (r.search && !r.search->note.empty())
    os << "  note: " << r.search->note << "\n";
  os << "\n";

  if (!r.chosen) {
    os << (r.search && r.search->everyPlanInvalid() ? "No valid plan.\n"
                                                     : "No plan fits.\n");
  } else {
    const Candidate &cand = *r.chosen;
    const Plan &p = cand.plan;
    os << (r.origin == "search" ? "Chosen plan" : "Given plan") << ": "
       << p.summary() << "\n";
    describePlan(os, p, unit);
    if (!cand.fits)
      os << "  DOES NOT FIT: " << cand.problem << "\n";

    // Memory.
    const MemoryBreakdown &mem = cand.memory;
    double capacity = c.device.memoryBytes.value;
    os << "\nMemory per device (fullest pipeline stage: " << mem.stage
       << ")\n";
    Table mt({"category", "bytes", "of capacity"});
    auto row = [&](const char *name, double bytes) {
      mt.add({name, formatBytes(bytes), share(bytes, capacity)});
    };
    row("parameters", mem.parameters);
    row("gradients", mem.gradients);
    row("optimizer state", mem.optimizerState);
    row("activations", mem.activations);
    row("temporaries", mem.temporaries);
    row("comm buffers", mem.commBuffers);
    row("runtime reserve", mem.reserve);
    if (mem.reused > 0)
      mt.add({"reused (-)", formatBytes(mem.reused), share(mem.reused, capacity)});
    row("total", mem.total());
    mt.add({"capacity", formatBytes(capacity), ""});
    mt.add({"headroom", formatBytes(capacity - mem.total()),
            share(capacity - mem.total(), capacity)});
    os << mt.render("  ");
    if (mem.hostTotal() > 0)
      os << "  host memory per device (offload): "
         << formatBytes(mem.hostTotal()) << " (parameters "
         << formatBytes(mem.hostParameters) << ", gradients "
         << formatBytes(mem.hostGradients) << ", optimizer state "
         << formatBytes(mem.hostOptimizerState) << ") of "
         << formatBytes(c.hostMemoryBytes.value / double(c.perNode()))
         << "\n";

    // Time.
    const TimeBreakdown &t = cand.time;
    os << "\nTime per step (critical pipeline stage: " << t.criticalStage
       << ")\n";
    Table tt({"part", "time", "of step"});
    auto trow = [&](const char *name, double seconds) {
      if (seconds > 0 || std::string(name) == "step")
        tt.add({name, formatSeconds(seconds), share(seconds, t.stepTime)});
    };
    trow("compute", t.computeTime);
    trow("tensor-parallel comm", t.tpCommTime);
    trow("context-parallel comm (exposed)", t.cpCommExposed);
    trow("pipeline send/recv", t.ppCommTime);
    trow("pipeline bubble", t.bubbleTime);
    trow("data-parallel comm (exposed)", t.dpCommExposed);
    trow("optimizer step", t.optimizerTime);
    trow("offload transfers (exposed)", t.offloadExposed);
    trow("step", t.stepTime);
    os << tt.render("  ");
    os << "  throughput      " << formatCount(t.tokensPerSecond) << " "
       << counted << "/s, "
       << (t.modelTflopsPerGpu >= 1
               ? fixed(t.modelTflopsPerGpu, 1) + " model TFLOP/s"
               : fixed(t.modelTflopsPerGpu * 1e3, 1) + " model GFLOP/s")
       << " per device, MFU " << formatPercent(t.mfu) << "\n";
    if (p.pp > 1)
      os << "  bubble          " << formatPercent(t.bubbleFraction)
         << " of the pipeline; idle / busy = "
         << share(t.bubbleTime, t.pipelineTime - t.bubbleTime)
         << (p.schedule == Schedule::kZeroBubbleH1
                 ? " (ideal for zb-h1, (p-1)/m less the weight gradients' "
                   "share of the step, = "
                 : " (ideal (p-1)/(v m) = ")
         << formatPercent(t.idealBubbleFraction) << ")\n";

    // Communication.
    if (!t.comm.empty()) {
      os << "\nCommunication per device per step\n";
      Table ct({"group", "collective", "link", "ranks", "count", "payload",
                "bus volume", "time", "exposed"});
      for (const CommItem &item : t.comm)
        ct.add({std::string(item.group) + " " + item.purpose,
                collectiveName(item.kind), linkName(item.link),
                std::to_string(item.groupSize), fixed(item.count, 0),
                formatBytes(item.payloadBytes), formatBytes(item.busBytes),
                formatSeconds(item.time), formatSeconds(item.exposed)});
      os << ct.render("  ");
    }
  }

  if (r.search) {
    const SearchResult &s = *r.search;
    if (!s.alternatives.empty()) {
      os << "\nBest rejected alternatives\n";
      Table at({"plan", "why not"}, /*leftAligned=*/true);
      for (const Rejection &a : s.alternatives)
        at.add({a.plan.summary(), a.reason});
      os << at.render("  ");
    }
    os << "\nSearch: " << s.evaluated << " plans evaluated, " << s.pruned
       << " pruned by the memory bound, in " << formatSeconds(s.seconds);
    if (s.budgetExhausted)
      os << " (budget exhausted: best plan so far)";
    os << "\n";
  }

  if (r.cost && r.chosen) {
    const RunCost &k = *r.cost;
    os << "\nRun of " << formatCount(k.tokens) << " " << counted << ": "
       << fixed(k.steps, 0) << " steps, " << formatDuration(k.seconds)
       << " wall-clock, " << formatCount(k.gpuHours) << " GPU-hours";
    if (k.pricePerGpuHour > 0)
      os << ", " << formatMoney(k.price) << " at $"
         << fixed(k.pricePerGpuHour, 2) << " per GPU-hour";
    os << "\n";
  }
  return os.str();
}

//===----------------------------------------------------------------------===//
// JSON
//===----------------------------------------------------------------------===//

namespace {

Json memoryJson(const MemoryBreakdown &m, double capacity, double host) {
  Json j = Json::object();
  j.set("stage", m.stage);
  j.set("parameters", m.parameters);
  j.set("gradients", m.gradients);
  j.set("optimizerState", m.optimizerState);
  j.set("activations", m.activations);
  j.set("temporaries", m.temporaries);
  j.set("commBuffers", m.commBuffers);
  j.set("reserve", m.reserve);
  j.set("reused", m.reused);
  j.set("total", m.total());
  j.set("capacity", capacity);
  j.set("headroom", capacity - m.total());
  Json h = Json::object();
  h.set("parameters", m.hostParameters);
  h.set("gradients", m.hostGradients);
  h.set("optimizerState", m.hostOptimizerState);
  h.set("total", m.hostTotal());
  h.set("capacity", host);
  j.set("host", h);
  return j;
}

/// `time.communication[]`: per device per step, by group and kind.
Json commJson(const std::vector<CommItem> &items) {
  Json comm = Json::array();
  for (const CommItem &item : items) {
    Json c = Json::object();
    c.set("group", item.group);
    c.set("purpose", item.purpose);
    c.set("collective", collectiveName(item.kind));
    c.set("link", linkName(item.link));
    c.set("groupSize", item.groupSize);
    c.set("count", item.count);
    c.set("payloadBytes", item.payloadBytes);
    c.set("busBytes", item.busBytes);
    c.set("time", item.time);
    c.set("exposed", item.exposed);
    comm.push(c);
  }
  return comm;
}

Json timeJson(const TimeBreakdown &t) {
  Json j = Json::object();
  j.set("stepTime", t.stepTime);
  j.set("tokensPerStep", t.tokensPerStep);
  j.set("tokensPerSecond", t.tokensPerSecond);
  j.set("mfu", t.mfu);
  j.set("modelTflopsPerDevice", t.modelTflopsPerGpu);
  j.set("hardwareTflopsPerDevice", t.hardwareTflopsPerGpu);
  j.set("compute", t.computeTime);
  j.set("tpComm", t.tpCommTime);
  if (t.cpCommExposed > 0)
    j.set("cpCommExposed", t.cpCommExposed);
  j.set("ppComm", t.ppCommTime);
  j.set("pipelineTime", t.pipelineTime);
  j.set("bubble", t.bubbleTime);
  j.set("bubbleFraction", t.bubbleFraction);
  j.set("idealBubbleFraction", t.idealBubbleFraction);
  j.set("dpCommExposed", t.dpCommExposed);
  j.set("optimizer", t.optimizerTime);
  j.set("offloadExposed", t.offloadExposed);
  j.set("criticalStage", t.criticalStage);
  j.set("communication", commJson(t.comm));
  return j;
}

} // namespace

Json reportToJson(const PlanReport &r) {
  Json j = Json::object();
  j.set("schemaVersion", kReportSchemaVersion);
  j.set("model", modelToJson(r.model));
  j.set("modelSource", r.modelSource);
  j.set("pricedBy", r.pricedBy);
  j.set("pricedByReason", r.pricedByReason);
  Json cluster = Json::object();
  cluster.set("name", r.cluster.name);
  cluster.set("device", r.cluster.device.name);
  cluster.set("nodes", r.cluster.nodes);
  cluster.set("devicesPerNode", r.cluster.perNode());
  cluster.set("devices", r.cluster.numDevices());
  cluster.set("deviceMemory", r.cluster.device.memoryBytes.value);
  j.set("cluster", cluster);
  j.set("globalBatch", r.globalBatch);
  j.set("origin", r.origin);
  if (r.chosen) {
    const Candidate &c = *r.chosen;
    j.set("plan", planToJson(c.plan));
    j.set("summary", c.plan.summary());
    j.set("precision", c.plan.dtype.describe());
    j.set("fits", c.fits);
    j.set("problem", c.problem);
    j.set("memory",
          memoryJson(c.memory, r.cluster.device.memoryBytes.value,
                     r.cluster.hostMemoryBytes.value /
                         double(r.cluster.perNode())));
    j.set("time", timeJson(c.time));
  } else {
    j.set("plan", Json());
  }
  Json alternatives = Json::array();
  Json search = Json();
  if (r.search) {
    const SearchResult &s = *r.search;
    for (const Rejection &a : s.alternatives) {
      Json aj = Json::object();
      aj.set("kind", rejectionKindName(a.kind));
      aj.set("plan", planToJson(a.plan));
      aj.set("summary", a.plan.summary());
      aj.set("reason", a.reason);
      aj.set("stepTime", a.stepTime);
      aj.set("excessBytes", a.excessBytes);
      aj.set("slowerFraction", a.slowerFraction);
      aj.set("pricedBy", a.pricedBy);
      alternatives.push(aj);
    }
    search = Json::object();
    search.set("evaluated", s.evaluated);
    search.set("pruned", s.pruned);
    search.set("seconds", s.seconds);
    search.set("budgetExhausted", s.budgetExhausted);
    search.set("fitsOnOneDevice", s.fitsOnOneDevice);
    search.set("note", s.note);
  }
  j.set("alternatives", alternatives);
  j.set("search", search);
  if (r.cost && r.chosen) {
    Json k = Json::object();
    k.set("tokens", r.cost->tokens);
    k.set("steps", r.cost->steps);
    k.set("seconds", r.cost->seconds);
    k.set("days", r.cost->seconds / 86400);
    k.set("gpuHours", r.cost->gpuHours);
    k.set("pricePerGpuHour", r.cost->pricePerGpuHour);
    k.set("price", r.cost->price);
    j.set("runCost", k);
  } else {
    j.set("runCost", Json());
  }
  Json notes = Json::array();
  for (const std::string &n : r.notes)
    notes.push(n);
  j.set("notes", notes);
  return j;
}

//===----------------------------------------------------------------------===//
// Chrome trace
//===----------------------------------------------------------------------===//

std::string formatProgramCost(const ProgramMemory &m, const ProgramTime *time,
                              const ClusterSpec &cluster) {
  std::ostringstream os;
  double capacity = cluster.device.memoryBytes.value;
  double reserve = cluster.device.reservedBytes.value;
  os << "Memory per rank: the compiled program's static memory plan (what "
        "the runtime allocates)\n";
  Table mt({"part", "bytes", "of capacity"});
  auto row = [&](const std::string &name, double bytes, bool always = false) {
    if (bytes > 0 || always)
      mt.add({name, formatBytes(bytes), share(bytes, capacity)});
  };
  row("state (stage " + std::to_string(m.stage) + ")", double(m.state), true);
  row("  parameters", double(m.parameters));
  row("  optimizer state", double(m.optimizerState));
  row("  gradient accumulators", double(m.gradientAccumulators));
  row("  step counters, other", double(m.otherState));
  row("  alignment", double(m.stateAlignment));
  row("workspace (reused over the step)", double(m.workspace), true);
  row("  activations kept for backward", double(m.activations));
  row("  gradients and temporaries", double(m.gradients));
  row("  communication buffers", double(m.commBuffers));
  row("  weight copies (casts of the parameters)", double(m.weightCopies));
  row("  not reusable (fragmentation)", double(m.fragmentation));
  row("constants", double(m.constants));
  row("kernel scratch (reserved at load)", double(m.scratch));
  row("program total", double(m.total), true);
  row("runtime reserve", reserve);
  row("total", double(m.total) + reserve, true);
  mt.add({"capacity", formatBytes(capacity), ""});
  os << mt.render("  ");
  if (m.hostState + m.hostWorkspace > 0)
    os << "  host memory (--offload optimizer): "
       << formatBytes(double(m.hostState + m.hostWorkspace))
       << " = optimizer state " << formatBytes(double(m.hostState))
       << " + the step's workspace " << formatBytes(double(m.hostWorkspace))
       << "; transfers per step " << formatBytes(double(m.bytesToHost))
       << " to host, " << formatBytes(double(m.bytesToDevice))
       << " to device\n";
  if (m.peakInstruction >= 0)
    os << "  the workspace is fullest at instruction " << m.peakInstruction
       << " of " << m.peakFunction << " (ONNX node "
       << (m.peakNode.empty() ? "(none)" : "\"" + m.peakNode + "\"")
       << ")\n";
  if (!m.largest.empty()) {
    os << "\nLargest tensors (live at the workspace's peak, and state)\n";
    Table lt({"bytes", "kind", "tensor"}, /*leftAligned=*/true);
    for (const TensorBytes &t : m.largest)
      lt.add({formatBytes(double(t.bytes)), t.kind, t.name});
    os << lt.render("  ");
  }
  if (!time)
    return os.str();

  os << "\nPredicted step on " << cluster.name
     << " (the program simulated instruction by instruction)\n";
  Table st({"stage", "step", "compute", "of which optimizer", "communication",
            "idle"});
  for (const ProgramStageTime &s : time->stages)
    st.add({std::to_string(s.stage), formatSeconds(s.end),
            formatSeconds(s.compute), formatSeconds(s.optimizer),
            formatSeconds(s.comm), formatSeconds(s.idle)});
  os << st.render("  ");
  os << "\n  kernels of stage " << time->criticalStage << ", per step\n";
  Table kt({"kernel", "calls", "time", "of step", "GFLOP/s"});
  for (const KernelTime &k : time->kernels)
    kt.add({k.kernel, std::to_string(k.calls), formatSeconds(k.seconds),
            share(k.seconds, time->stepTime),
            k.flops > 0 ? fixed(k.flops / k.seconds / 1e9, 1) : ""});
  os << kt.render("  ");
  if (!time->comm.empty()) {
    os << "\n  communication of stage " << time->criticalStage
       << ", per step\n";
    Table ct({"axes", "collective", "link", "ranks", "count", "largest",
              "bus volume", "time", "waited"});
    for (const CommItem &item : time->comm)
      ct.add({item.group, collectiveName(item.kind), linkName(item.link),
              std::to_string(item.groupSize), fixed(item.count, 0),
              formatBytes(item.payloadBytes), formatBytes(item.busBytes),
              formatSeconds(item.time), formatSeconds(item.exposed)});
    os << ct.render("  ");
  }
  return os.str();
}

Json programCostToJson(const ProgramMemory &m, const ProgramTime *time) {
  Json memory = Json::object();
  memory.set("total", m.total);
  memory.set("workspace", m.workspace);
  memory.set("state", m.state);
  memory.set("constants", m.constants);
  memory.set("scratch", m.scratch);
  memory.set("stage", m.stage);
  memory.set("parameters", m.parameters);
  memory.set("optimizerState", m.optimizerState);
  memory.set("gradientAccumulators", m.gradientAccumulators);
  memory.set("otherState", m.otherState);
  memory.set("stateAlignment", m.stateAlignment);
  memory.set("peakFunction", m.peakFunction);
  memory.set("peakInstruction", m.peakInstruction);
  memory.set("peakNode", m.peakNode);
  memory.set("activations", m.activations);
  memory.set("gradients", m.gradients);
  memory.set("commBuffers", m.commBuffers);
  memory.set("weightCopies", m.weightCopies);
  memory.set("fragmentation", m.fragmentation);
  memory.set("hostState", m.hostState);
  memory.set("hostWorkspace", m.hostWorkspace);
  memory.set("bytesToHost", m.bytesToHost);
  memory.set("bytesToDevice", m.bytesToDevice);
  Json largest = Json::array();
  for (const TensorBytes &t : m.largest) {
    Json j = Json::object();
    j.set("name", t.name);
    j.set("kind", t.kind);
    j.set("bytes", t.bytes);
    largest.push(j);
  }
  memory.set("largest", largest);
  Json j = Json::object();
  j.set("memory", memory);
  if (!time)
    return j;
  Json t = Json::object();
  t.set("stepTime", time->stepTime);
  t.set("criticalStage", time->criticalStage);
  t.set("flops", time->flops);
  Json stages = Json::array();
  for (const ProgramStageTime &s : time->stages) {
    Json stage = Json::object();
    stage.set("stage", s.stage);
    stage.set("end", s.end);
    stage.set("compute", s.compute);
    stage.set("optimizer", s.optimizer);
    stage.set("communication", s.comm);
    stage.set("idle", s.idle);
    stages.push(stage);
  }
  t.set("stages", stages);
  Json kernels = Json::array();
  for (const KernelTime &k : time->kernels) {
    Json kernel = Json::object();
    kernel.set("kernel", k.kernel);
    kernel.set("calls", k.calls);
    kernel.set("seconds", k.seconds);
    kernel.set("flops", k.flops);
    kernels.push(kernel);
  }
  t.set("kernels", kernels);
  t.set("communication", commJson(time->comm));
  j.set("time", t);
  return j;
}

Json traceToJson(const Timeline &timeline, const std::string &title) {
  Json events = Json::array();
  auto meta = [&](const char *what, int64_t pid, int tid,
                  const std::string &name) {
    Json e = Json::object();
    e.set("name", what);
    e.set("ph", "M");
    e.set("pid", pid);
    e.set("tid", tid);
    Json args = Json::object();
    args.set("name", name);
    e.set("args", args);
    events.push(e);
  };
  for (size_t s = 0; s < timeline.ranks.size(); ++s) {
    int64_t rank = timeline.ranks[s];
    meta("process_name", rank, 0,
         strCat("rank ", rank, " (pipeline stage ", s, ")"));
    for (int stream = 0; stream < 5; ++stream)
      meta("thread_name", rank, stream, Timeline::streamName(stream));
  }
  for (const TraceEvent &event : timeline.events) {
    Json e = Json::object();
    e.set("name", event.name);
    e.set("cat", event.category);
    e.set("ph", "X");
    e.set("pid", event.rank);
    e.set("tid", event.stream);
    // Microseconds, rounded to nanoseconds so the text stays short.
    e.set("ts", std::round(event.start * 1e9) / 1e3);
    e.set("dur", std::round(event.duration * 1e9) / 1e3);
    events.push(e);
  }
  Json j = Json::object();
  j.set("traceEvents", events);
  j.set("displayTimeUnit", "ms");
  Json other = Json::object();
  other.set("title", title);
  other.set("stepTime", timeline.stepTime);
  other.set("truncated", timeline.truncated);
  j.set("otherData", other);
  return j;
}

} // namespace dtcc::planner
