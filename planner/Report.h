//===- Report.h - what `dtcc plan` prints: text, JSON, trace ----*- C++ -*-===//
//
// Turns a searched or evaluated plan into the report people read (a text
// table), the stable JSON documented in docs/planner.md, and a Chrome-trace
// timeline of one predicted step. Also the cost of a whole training run.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_PLANNER_REPORT_H
#define DTCC_PLANNER_REPORT_H

#include "planner/ProgramModel.h"
#include "planner/Search.h"

#include <optional>
#include <string>
#include <vector>

namespace dtcc::planner {

/// Version of the report JSON; bumped when a field changes meaning or goes.
constexpr int kReportSchemaVersion = 1;

/// Wall-clock time, GPU-hours and money of training on `tokens` tokens with
/// the chosen plan.
struct RunCost {
  double tokens = 0;
  double steps = 0;
  double seconds = 0;
  double gpuHours = 0;
  double pricePerGpuHour = 0; ///< 0 when not given
  double price = 0;
};

/// `tokens` tokens at the plan's predicted step time on `devices` devices.
RunCost runCost(const TimeBreakdown &time, int64_t devices, double tokens,
                double pricePerGpuHour);

/// Everything a report shows.
struct PlanReport {
  ModelDesc model;
  ClusterSpec cluster;
  int64_t globalBatch = 0;
  /// The plan: chosen by the search, or given (--mesh, --plan-in).
  std::optional<Candidate> chosen;
  /// How the plan came about: "search", "given".
  std::string origin = "search";
  /// The search's statistics and alternatives (empty for a given plan).
  std::optional<SearchResult> search;
  std::optional<RunCost> cost;
  /// Where the model description came from ("zoo metadata of model.onnx").
  std::string modelSource;
  /// Caveats for the reader (a model known only by its parameter count).
  std::vector<std::string> notes;
  /// Which model priced the chosen plan: "compiled program" (its program
  /// simulated instruction by instruction) or "analytic" (the transformer
  /// formula of TimeModel/MemoryModel), with why in `pricedByReason`.
  std::string pricedBy = "analytic";
  std::string pricedByReason;
};

/// The report for people: plan, memory against capacity, time, throughput,
/// communication, rejected alternatives, run cost.
std::string formatReport(const PlanReport &report);
/// The same as JSON (docs/planner.md, "Report JSON").
Json reportToJson(const PlanReport &report);

/// A Chrome trace (the JSON Object Format that Perfetto and chrome://tracing
/// open): one process per representative rank, one thread per stream, times
/// in microseconds.
Json traceToJson(const Timeline &timeline, const std::string &title);

/// A compiled program's cost for people: its memory plan by category with
/// the largest tensors, against the device's capacity (less the runtime's
/// reserve), and, with `time`, its simulated step by stage, kernel and
/// collective.
std::string formatProgramCost(const ProgramMemory &memory,
                              const ProgramTime *time,
                              const ClusterSpec &cluster);
/// The same as JSON (docs/planner.md, "Compiled program").
Json programCostToJson(const ProgramMemory &memory, const ProgramTime *time);

/// "2T", "1.5e12", "300B", "10M" -> a count; errors name the text.
StatusOr<double> parseCount(const std::string &text);
/// "10s", "500ms", "2m", "10" (seconds) -> seconds.
StatusOr<double> parseDuration(const std::string &text);

} // namespace dtcc::planner

#endif // DTCC_PLANNER_REPORT_H
