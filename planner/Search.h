//===- Search.h - automatic plan search -------------------------*- C++ -*-===//
//
// Enumerates plans for a model on a cluster (mesh factorizations with tp
// inside a node, ZeRO stage, offload, micro-batching, schedule, recompute,
// sequence parallelism), keeps the fastest that fits in memory and the best
// rejected alternatives with their reasons, and stops within a time budget.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_PLANNER_SEARCH_H
#define DTCC_PLANNER_SEARCH_H

#include "planner/MemoryModel.h"
#include "planner/TimeModel.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace dtcc::planner {

struct SearchOptions {
  /// Sequences per step over all data-parallel ranks.
  int64_t globalBatch = 0;
  DTypePolicy dtype = DTypePolicy::mixed(DType::kBf16);
  /// Wall-clock budget; the search returns the best plan found when it runs
  /// out.
  double budgetSeconds = 10;
  /// Allow moving optimizer state (and parameters) to host memory.
  bool allowOffload = true;
  /// Consider sequence parallelism with tp > 1.
  bool allowSequenceParallel = true;
  /// Sum the gradients in the compute type (Plan::halfGradReduce) in every
  /// plan `buildable` accepts so (the compiler: one micro-batch, or
  /// ZeRO-2/3 without pp); the others sum in fp32, as their summaries say.
  bool halfGradReduce = false;
  /// Largest micro-batch size considered.
  int64_t maxMicroBatchSize = 64;
  /// Rejected alternatives kept per kind (slower, out of memory, invalid).
  int alternativesPerKind = 5;
  /// Pin dimensions (0 = free): the search then only varies the rest.
  int64_t fixDp = 0, fixPp = 0, fixTp = 0;
  /// Context parallelism: the cp of every plan considered (the search does
  /// not vary it: 0 or 1, none).
  int64_t fixCp = 0;
  /// The rank order of every plan considered (Plan::order); empty:
  /// Megatron-LM's.
  std::vector<std::string> order;
  /// Pin the ZeRO stage (-1 = free) and the micro-batch size (0 = free).
  int fixZero = -1;
  int64_t fixMicroBatchSize = 0;
  /// Pin the schedule and the recomputation mode.
  std::optional<Schedule> fixSchedule;
  std::optional<Recompute> fixRecompute;
  /// Pin Plan::recomputeLayers (-1 = free, unless fixRecompute is set:
  /// then 0, every layer).
  int64_t fixRecomputeLayers = -1;
  /// Sequences of one micro-batch over all data-parallel ranks (0: free):
  /// each mesh's micro-batch size is then dataBatch / dp, as when a
  /// compiled model's batch dimension is split over dp.
  int64_t dataBatch = 0;
  /// What the consumer of the plan cannot build (the compiler's check; the
  /// planner knows no compiler): a plan it names a reason for is rejected
  /// as invalid with that reason. Empty: every plan is built.
  std::function<std::optional<std::string>(const Plan &)> buildable;
  /// Keep every plan that fits within this fraction of the best step time
  /// (SearchResult::nearBest); 0 keeps none. `dtcc plan --sensitivity`
  /// chooses among them (planner/Sensitivity.h).
  double keepWithin = 0;
  /// The most near-best plans kept, fastest first.
  int maxNearBest = 32;
};

/// A plan with its predicted memory and time.
struct Candidate {
  Plan plan;
  MemoryBreakdown memory; ///< the fullest stage
  TimeBreakdown time;
  /// Fits device and host memory; otherwise `problem` says by how much not.
  bool fits = true;
  std::string problem;
};

/// A plan the search did not choose, and why.
struct Rejection {
  enum class Kind { kSlower, kOutOfMemory, kInvalid };
  Kind kind = Kind::kInvalid;
  Plan plan;
  /// "slower by 23.0%", "out of memory by 12.3 GB (stage 0: 92.3 of 80.0
  /// GB)", "heads 96 not divisible by tp=5".
  std::string reason;
  double stepTime = 0;      ///< predicted (0 for invalid plans)
  double excessBytes = 0;   ///< out of memory by
  double slowerFraction = 0;
  /// Which model priced stepTime: "analytic" or "compiled program" (a GPU
  /// plan the planner compiled to compare it with its choice).
  std::string pricedBy = "analytic";
};
const char *rejectionKindName(Rejection::Kind kind);

struct SearchResult {
  /// The fastest plan that fits; empty when nothing fits (then
  /// `alternatives` says why).
  std::optional<Candidate> best;
  /// Slower plans (the best per mesh and ZeRO stage), plans that would be
  /// faster but do not fit, and invalid factorizations, each with a reason.
  std::vector<Rejection> alternatives;
  /// Every mesh-and-ZeRO group's best plan slower than `best`, fastest
  /// first: the slower `alternatives` are the first alternativesPerKind of
  /// these.
  std::vector<Rejection> slowerPlans;
  int64_t evaluated = 0; ///< candidates whose memory and time were predicted
  int64_t pruned = 0;    ///< candidates skipped by the memory lower bound
  double seconds = 0;    ///< search wall time
  bool budgetExhausted = false;
  /// The model and one micro-batch fit on one device without any model
  /// split (tp = pp = 1, no ZeRO).
  bool fitsOnOneDevice = false;
  /// With SearchOptions::keepWithin > 0: the plans that fit within that
  /// fraction of the best, fastest first (the best included).
  std::vector<Candidate> nearBest;
  /// One line for people: "GPT-2 fits on one device: plain data
  /// parallelism", "no distribution: one device".
  std::string note;

  /// No plan was chosen and every rejected one is invalid for the model
  /// and cluster (none out of memory).
  bool everyPlanInvalid() const {
    return !best && !alternatives.empty() &&
           std::all_of(alternatives.begin(), alternatives.end(),
                       [](const Rejection &a) {
                         return a.kind == Rejection::Kind::kInvalid;
                       });
  }
};

/// Searches plans of `model` for every device of `cluster`
/// (cluster.numDevices()). Errors: an invalid model or cluster, a global
/// batch < 1.
StatusOr<SearchResult> searchPlans(const ModelDesc &model,
                                   const ClusterSpec &cluster,
                                   const SearchOptions &options);

/// Predicts one given plan (for --plan-in and for checking a published
/// configuration): its memory, time, and whether it fits.
StatusOr<Candidate> evaluatePlan(const ModelDesc &model,
                                 const ClusterSpec &cluster,
                                 const Plan &plan);

} // namespace dtcc::planner

#endif // DTCC_PLANNER_SEARCH_H
