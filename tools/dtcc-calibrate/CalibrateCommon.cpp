//===- CalibrateCommon.cpp - what both calibrate tools ask the host -------===//

#include "tools/dtcc-calibrate/CalibrateCommon.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <fstream>
#include <set>

namespace dtcc::calibrate {

using runtime::Communicator;
using runtime::ReduceKind;
using runtime::Status;
using runtime::StatusOr;

std::string hostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0)
    return "unknown-host";
  return buf;
}

std::string utcNow() {
  std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string cpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      size_t colon = line.find(':');
      if (colon != std::string::npos)
        return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  return "unknown CPU";
}

double memTotalBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  double kib = 0;
  while (in >> key >> kib >> unit)
    if (key == "MemTotal:")
      return kib * 1024;
  return 0;
}

StatusOr<std::vector<std::string>> gatherStrings(Communicator &comm,
                                                 const std::string &value) {
  const int64_t width = 256;
  std::vector<uint8_t> mine(width, 0), all(width * comm.size(), 0);
  std::memcpy(mine.data(), value.data(),
              std::min<size_t>(value.size(), width - 1));
  DTCC_RETURN_IF_ERROR(
      comm.allGather(mine.data(), all.data(), width, runtime::DType::kU8));
  std::vector<std::string> out;
  for (int r = 0; r < comm.size(); ++r)
    out.emplace_back(reinterpret_cast<char *>(&all[r * width]));
  return out;
}

int64_t countDistinct(const std::vector<std::string> &values) {
  return int64_t(std::set<std::string>(values.begin(), values.end()).size());
}

Status reduceAcross(Communicator *comm, double &value, ReduceKind kind) {
  if (!comm || comm->size() < 2)
    return Status::ok();
  return comm->allReduce(&value, &value, 1, runtime::DType::kF64, kind);
}

Status reduceAcross(Communicator *comm, std::vector<double> &values,
                    ReduceKind kind) {
  if (!comm || comm->size() < 2 || values.empty())
    return Status::ok();
  return comm->allReduce(values.data(), values.data(), int64_t(values.size()),
                         runtime::DType::kF64, kind);
}

std::string parseCommonArgs(int argc, char **argv, CommonArgs &args,
                            const std::function<bool(const std::string &)> &extra,
                            const std::string &helpCommand) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](std::string &into) {
      if (i + 1 >= argc)
        return false;
      into = argv[++i];
      return true;
    };
    if (arg == "-h" || arg == "--help") {
      args.help = true;
      return "";
    }
    if (arg == "-o") {
      if (!value(args.out))
        return "-o: expected a file";
    } else if (arg == "--base") {
      if (!value(args.base))
        return "--base: expected a preset or a cluster file";
    } else if (arg == "--no-collectives") {
      args.collectives = false;
    } else if (!extra(arg)) {
      return "unknown argument '" + arg + "' (" + helpCommand + " --help)";
    }
  }
  return "";
}

} // namespace dtcc::calibrate
