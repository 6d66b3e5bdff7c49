//===- CalibrateCommon.h - what both calibrate tools ask the host -*- C++
//-*-===//
//
// The host, the date and the job as dtcc-calibrate (CPU) and
// dtcc-calibrate-cuda (GPU) record them, and the cross-rank reductions both
// use: ranks measure at once and every figure is the slowest rank's.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_TOOLS_DTCC_CALIBRATE_CALIBRATECOMMON_H
#define DTCC_TOOLS_DTCC_CALIBRATE_CALIBRATECOMMON_H

#include "runtime/comm/Communicator.h"

#include <functional>
#include <string>
#include <vector>

namespace dtcc::calibrate {

/// gethostname(), or "unknown-host".
std::string hostName();
/// Now, UTC, ISO 8601 ("2026-11-22T08:30:42Z").
std::string utcNow();
/// /proc/cpuinfo's first "model name", or "unknown CPU".
std::string cpuModel();
/// MemTotal of /proc/meminfo in bytes, or 0.
double memTotalBytes();

/// Every rank's `value` (at most 255 bytes kept) in rank order; collective
/// over `comm`.
runtime::StatusOr<std::vector<std::string>>
gatherStrings(runtime::Communicator &comm, const std::string &value);

/// The number of distinct strings in `values`.
int64_t countDistinct(const std::vector<std::string> &values);

/// `value` reduced over the ranks of `comm` (kMin for rates, kMax for
/// times: the slowest rank's); nothing without a communicator of 2+ ranks.
runtime::Status reduceAcross(runtime::Communicator *comm, double &value,
                             runtime::ReduceKind kind);
/// Element-wise over the ranks, once for a whole list (ranks then time their
/// lists side by side, no rank waiting, and so spinning, in a collective
/// while the others still time a kernel).
runtime::Status reduceAcross(runtime::Communicator *comm,
                             std::vector<double> &values,
                             runtime::ReduceKind kind);

/// The options every calibrate tool takes.
struct CommonArgs {
  std::string out = "-";   ///< -o FILE (default: stdout)
  std::string base;        ///< --base PRESET|FILE ("": the tool's default)
  bool collectives = true; ///< --no-collectives
  bool help = false;       ///< -h, --help
};

/// Parses `argv` into `args`; `extra(arg)` takes the tool's own flags
/// (true when it did). Returns an error message, or "" (also after --help,
/// which stops the parse).
std::string parseCommonArgs(int argc, char **argv, CommonArgs &args,
                            const std::function<bool(const std::string &)> &extra,
                            const std::string &helpCommand);

} // namespace dtcc::calibrate

#endif // DTCC_TOOLS_DTCC_CALIBRATE_CALIBRATECOMMON_H
