//===- CostPrimitives.cpp - the one alpha-beta model of collectives -------===//

#include "planner/CostPrimitives.h"

#include <algorithm>
#include <cmath>

namespace dtcc::planner {

const char *collectiveName(Collective kind) {
  switch (kind) {
  case Collective::kAllReduce:
    return "all-reduce";
  case Collective::kAllGather:
    return "all-gather";
  case Collective::kReduceScatter:
    return "reduce-scatter";
  case Collective::kSendRecv:
    return "send/recv";
  case Collective::kCopy:
    return "copy";
  }
  return "unknown";
}

std::optional<Collective> collectiveOfKernel(std::string_view kernel) {
  if (kernel == "all_reduce")
    return Collective::kAllReduce;
  if (kernel == "reduce_scatter")
    return Collective::kReduceScatter;
  if (kernel == "all_gather" || kernel == "all_to_all" ||
      kernel == "broadcast")
    return Collective::kAllGather;
  if (kernel == "send" || kernel == "recv")
    return Collective::kSendRecv;
  return std::nullopt;
}

double busVolume(Collective kind, double payloadBytes, int64_t groupSize) {
  const double n = double(groupSize);
  switch (kind) {
  case Collective::kAllReduce:
    return n > 1 ? 2 * (n - 1) / n * payloadBytes : 0;
  case Collective::kAllGather:
  case Collective::kReduceScatter:
    return n > 1 ? (n - 1) / n * payloadBytes : 0;
  case Collective::kSendRecv:
    return n > 1 ? payloadBytes : 0;
  case Collective::kCopy:
    return payloadBytes;
  }
  return 0;
}

double sentBytes(std::string_view kernel, double payloadBytes,
                 int64_t groupSize) {
  if (kernel == "recv")
    return 0;
  std::optional<Collective> kind = collectiveOfKernel(kernel);
  return kind ? busVolume(*kind, payloadBytes, groupSize) : 0;
}

double latencySteps(Collective kind, int64_t groupSize) {
  const double n = double(groupSize);
  if (kind == Collective::kCopy)
    return 1;
  if (n <= 1)
    return 0;
  const double logSteps = std::ceil(std::log2(n));
  switch (kind) {
  case Collective::kAllReduce:
    return std::min(2 * (n - 1), 2 * logSteps);
  case Collective::kAllGather:
  case Collective::kReduceScatter:
    // NCCL runs all-gather and reduce-scatter as rings only (its tree
    // algorithm implements all-reduce alone; NCCL_ALGO in the NCCL
    // environment-variable documentation): n - 1 steps however many ranks.
    return n - 1;
  case Collective::kSendRecv:
  case Collective::kCopy:
    return 1;
  }
  return 0;
}

double collectiveLatency(Collective kind, int64_t groupSize, int64_t nodes,
                         double intraLatency, double interLatency) {
  if (nodes <= 1 || groupSize <= 1 || kind == Collective::kSendRecv ||
      kind == Collective::kCopy)
    return (nodes > 1 ? interLatency : intraLatency) *
           latencySteps(kind, groupSize);
  const double n = double(groupSize);
  const double m = double(std::min(nodes, groupSize));
  const bool allReduce = kind == Collective::kAllReduce;
  const double steps = allReduce ? 2 * (n - 1) : n - 1;
  const double interSteps = allReduce ? 2 * (m - 1) : m - 1;
  const double ring =
      (steps - interSteps) * intraLatency + interSteps * interLatency;
  if (!allReduce)
    return ring;
  const double tree = 2 * ((n / m - 1) * intraLatency +
                           std::ceil(std::log2(m)) * interLatency);
  return std::min(ring, tree);
}

double collectiveSeconds(Collective kind, double payloadBytes,
                         int64_t groupSize, double busBandwidth,
                         double latency) {
  if (payloadBytes <= 0)
    return 0;
  if (groupSize <= 1 && kind != Collective::kCopy)
    return 0;
  return latency * latencySteps(kind, groupSize) +
         busVolume(kind, payloadBytes, groupSize) / busBandwidth;
}

} // namespace dtcc::planner
