//===- CostPrimitives.h - the one alpha-beta model of collectives -*- C++ -*-===//
//
// What every cost model of dtcc counts for a collective, in one place: the
// bytes each rank puts on the link (the nccl-tests bus volume), the
// latency steps of the algorithm NCCL would pick (ring or tree, the
// fewer), and the alpha-beta time of the two on a link. The planner's time
// model, the program model, calibration and the tensor-parallel layout ILP
// (passes/Planning/ShardingIlp) all price collectives with these, so the
// ILP optimizes the objective the planner ranks plans by. Plain C++ with no
// dependencies: the MLIR passes link it without the rest of the planner.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_PLANNER_COSTPRIMITIVES_H
#define DTCC_PLANNER_COSTPRIMITIVES_H

#include <cstdint>
#include <optional>
#include <string_view>

namespace dtcc::planner {

enum class Collective { kAllReduce, kAllGather, kReduceScatter, kSendRecv,
                        kCopy };
/// "all-reduce", "all-gather", "reduce-scatter", "send/recv", "copy".
const char *collectiveName(Collective kind);

/// The collective a runtime kernel is priced as: "all_reduce",
/// "reduce_scatter", "all_gather" (also "all_to_all" and a pipelined
/// "broadcast", which move (n-1)/n of the tensor per rank), "send" and
/// "recv"; nullopt for other kernels.
std::optional<Collective> collectiveOfKernel(std::string_view kernel);

/// Bytes each of `groupSize` ranks puts on the link for one collective
/// with a `payloadBytes` buffer (nccl-tests' bus volume): 2(n-1)/n of it
/// for all-reduce, (n-1)/n for all-gather and reduce-scatter (the payload
/// being the gathered or scattered whole), all of it for a send or a copy.
/// 0 for a group of one (a copy still moves its bytes).
double busVolume(Collective kind, double payloadBytes, int64_t groupSize);

/// Bytes a rank running `kernel` sends: busVolume of its collective; a
/// receive sends nothing; 0 for kernels that are not collectives.
double sentBytes(std::string_view kernel, double payloadBytes,
                 int64_t groupSize);

/// Latency steps of one collective over `groupSize` ranks, by the
/// algorithms NCCL has for it: an all-reduce takes the fewer of a ring's
/// 2(n-1) and a tree's 2 ceil(log2 n) steps (NCCL picks ring or tree per
/// size and rank count); all-gather and reduce-scatter exist only as rings
/// in NCCL (NCCL_ALGO: the tree implements all-reduce alone), n - 1 steps;
/// 1 for a send or a copy; 0 for a group of one.
double latencySteps(Collective kind, int64_t groupSize);

/// Latency seconds of one collective over `groupSize` ranks spread evenly
/// over `nodes` nodes, as NCCL's tuning model counts it (src/graph/
/// tuning.cc): a ring pays `interLatency` on the steps that cross nodes
/// (nodes - 1 of an all-gather's or reduce-scatter's n - 1, 2 (nodes - 1)
/// of an all-reduce's 2 (n - 1)) and `intraLatency` on the others; a tree
/// all-reduce 2 ((n / nodes - 1) x intra + ceil(log2 nodes) x inter); an
/// all-reduce takes the fewer. Within one node (nodes <= 1) it is
/// `intraLatency` x latencySteps.
double collectiveLatency(Collective kind, int64_t groupSize, int64_t nodes,
                         double intraLatency, double interLatency);

/// Seconds for one collective on a link of `busBandwidth` bytes/s and
/// `latency` seconds per step: latency x latencySteps + busVolume /
/// busBandwidth (the alpha-beta model).
double collectiveSeconds(Collective kind, double payloadBytes,
                         int64_t groupSize, double busBandwidth,
                         double latency);

} // namespace dtcc::planner

#endif // DTCC_PLANNER_COSTPRIMITIVES_H
