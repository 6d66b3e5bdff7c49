//===- Search.cpp - automatic plan search ---------------------------------===//

#include "planner/Search.h"

#include "planner/Units.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

namespace dtcc::planner {

using runtime::invalidArgument;
using runtime::strCat;

const char *rejectionKindName(Rejection::Kind kind) {
  switch (kind) {
  case Rejection::Kind::kSlower:
    return "slower";
  case Rejection::Kind::kOutOfMemory:
    return "out-of-memory";
  case Rejection::Kind::kInvalid:
    return "invalid";
  }
  return "unknown";
}

namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> small, large;
  for (int64_t d = 1; d * d <= n; ++d) {
    if (n % d != 0)
      continue;
    small.push_back(d);
    if (d != n / d)
      large.push_back(n / d);
  }
  small.insert(small.end(), large.rbegin(), large.rend());
  return small;
}

/// Empty when `memory` fits, else the reason.
std::string memoryProblem(const MemoryBreakdown &memory,
                          const MemoryModel &model, double &excess) {
  excess = 0;
  double capacity = model.capacity();
  if (memory.total() > capacity) {
    excess = memory.total() - capacity;
    return strCat("out of memory by ", formatBytes(excess), " (stage ",
                  memory.stage, " needs ", formatBytes(memory.total()),
                  " of ", formatBytes(capacity), ")");
  }
  double host = model.hostCapacityPerRank();
  if (memory.hostTotal() > host) {
    excess = memory.hostTotal() - host;
    return strCat("out of host memory by ", formatBytes(excess),
                  " per device (needs ", formatBytes(memory.hostTotal()),
                  " of ", formatBytes(host), ")");
  }
  return "";
}

using GroupKey = std::tuple<int64_t, int64_t, int, int>; // tp, pp, zero, offload

GroupKey groupOf(const Plan &p) {
  return {p.tp, p.pp, p.zeroStage, int(p.offload)};
}

class Searcher {
public:
  Searcher(const ModelDesc &model, const ClusterSpec &cluster,
           const SearchOptions &options)
      : model_(model), cluster_(cluster), options_(options),
        memory_(model, cluster), time_(model, cluster),
        start_(std::chrono::steady_clock::now()) {}

  SearchResult run() {
    const int64_t cp = std::max<int64_t>(1, options_.fixCp);
    if (cluster_.numDevices() % cp != 0) {
      invalid(skeleton(1, 1, 1),
              strCat("cp=", cp, " does not divide the cluster's ",
                     cluster_.numDevices(), " devices"));
      return finish();
    }
    const int64_t n = cluster_.numDevices() / cp;
    const int64_t perNode = cluster_.perNode();
    bool reportedWideTp = false;
    for (int64_t tp : divisors(n)) {
      if (options_.fixTp && tp != options_.fixTp)
        continue;
      if (tp > perNode) {
        // One line is enough for every tp beyond a node.
        if (!reportedWideTp)
          invalid(skeleton(n / tp, 1, tp),
                  strCat("tp=", tp, " exceeds ", perNode,
                         " devices per node"));
        reportedWideTp = true;
        continue;
      }
      for (int64_t pp : divisors(n / tp)) {
        if (options_.fixPp && pp != options_.fixPp)
          continue;
        int64_t dp = n / tp / pp;
        if (options_.fixDp && dp != options_.fixDp)
          continue;
        if (pp > model_.layers)
          break;
        searchMesh(dp, pp, tp);
        if (stopped_)
          break;
      }
      if (stopped_)
        break;
    }
    return finish();
  }

private:
  Plan skeleton(int64_t dp, int64_t pp, int64_t tp) const {
    Plan plan;
    plan.dp = dp;
    plan.pp = pp;
    plan.tp = tp;
    plan.cp = std::max<int64_t>(1, options_.fixCp);
    plan.dtype = options_.dtype;
    if (!options_.order.empty())
      plan.order = options_.order;
    return plan;
  }

  bool outOfTime() {
    if (stopped_)
      return true;
    if ((++ticks_ & 63) != 0)
      return false;
    if (elapsed() > options_.budgetSeconds) {
      stopped_ = true;
      budgetExhausted_ = true;
    }
    return stopped_;
  }

  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         start_)
        .count();
  }

  void invalid(const Plan &plan, const std::string &reason) {
    if (invalidReasons_.count(reason))
      return;
    invalidReasons_.insert(reason);
    Rejection r;
    r.kind = Rejection::Kind::kInvalid;
    r.plan = plan;
    r.reason = reason;
    invalid_.push_back(r);
  }

  void outOfMemory(const Plan &plan, const std::string &reason,
                   double excess) {
    TimeBreakdown t = time_.estimate(plan);
    // Per mesh and ZeRO stage, the plan closest to fitting.
    GroupKey key = groupOf(plan);
    auto it = oom_.find(key);
    if (it != oom_.end() && it->second.excessBytes <= excess)
      return;
    Rejection r;
    r.kind = Rejection::Kind::kOutOfMemory;
    r.plan = plan;
    r.reason = reason;
    r.stepTime = t.stepTime;
    r.excessBytes = excess;
    oom_[key] = r;
  }

  void searchMesh(int64_t dp, int64_t pp, int64_t tp) {
    Plan base = skeleton(dp, pp, tp);
    if (auto problem = planProblem(base, model_, cluster_)) {
      invalid(base, *problem);
      return;
    }
    if (options_.globalBatch % dp != 0) {
      invalid(base, strCat("global batch ", options_.globalBatch,
                           " not divisible by dp=", dp));
      return;
    }
    int64_t perReplica = options_.globalBatch / dp;
    int64_t fixedMicroBatch = options_.fixMicroBatchSize;
    if (options_.dataBatch) {
      if (options_.dataBatch % dp != 0) {
        invalid(base, strCat("batch ", options_.dataBatch,
                             " not divisible by dp=", dp));
        return;
      }
      fixedMicroBatch = options_.dataBatch / dp;
    }

    struct Sharding {
      int zero;
      Offload offload;
    };
    std::vector<Sharding> shardings;
    // ZeRO shards over the data-parallel ranks: with one, a stage is only
    // searched when pinned (--zero), and then shards nothing.
    for (int zero = 0; zero <= 3; ++zero) {
      if (zero == 0 || dp > 1 || zero == options_.fixZero)
        shardings.push_back({zero, Offload::kNone});
    }
    if (options_.allowOffload) {
      shardings.push_back({2, Offload::kOptimizer});
      shardings.push_back({3, Offload::kOptimizer});
      shardings.push_back({3, Offload::kOptimizerAndParams});
    }

    for (const Sharding &sharding : shardings) {
      if (options_.fixZero >= 0 && sharding.zero != options_.fixZero)
        continue;
      Plan plan = base;
      plan.zeroStage = sharding.zero;
      plan.offload = sharding.offload;
      if (auto problem = planProblem(plan, model_, cluster_)) {
        invalid(plan, *problem);
        continue;
      }
      // Model state alone decides many meshes: prune them whole.
      double bound = memory_.lowerBound(plan);
      if (bound > memory_.capacity()) {
        Plan leanest = plan;
        leanest.microBatchSize = 1;
        leanest.microBatches = perReplica;
        leanest.recompute = Recompute::kFull;
        leanest.sequenceParallel = tp > 1 && options_.allowSequenceParallel;
        MemoryBreakdown m = memory_.peak(leanest);
        double excess = 0;
        std::string why = memoryProblem(m, memory_, excess);
        if (why.empty()) // cannot happen: the bound is below the total
          why = "out of memory";
        outOfMemory(leanest, why, excess);
        ++pruned_;
        continue;
      }
      for (bool sp : {false, true}) {
        if (sp && (tp == 1 || !options_.allowSequenceParallel))
          continue;
        plan.sequenceParallel = sp;
        for (int64_t b : divisors(perReplica)) {
          if (b > options_.maxMicroBatchSize && !options_.dataBatch)
            break;
          if (fixedMicroBatch && b != fixedMicroBatch)
            continue;
          plan.microBatchSize = b;
          plan.microBatches = perReplica / b;
          searchSchedules(plan);
          if (stopped_)
            return;
        }
      }
    }
  }

  void searchSchedules(Plan plan) {
    struct ScheduleChoice {
      Schedule schedule;
      int64_t v;
    };
    std::vector<ScheduleChoice> schedules;
    if (plan.pp == 1) {
      schedules.push_back({Schedule::k1F1B, 1});
    } else {
      schedules.push_back({Schedule::k1F1B, 1});
      schedules.push_back({Schedule::kGPipe, 1});
      schedules.push_back({Schedule::kZeroBubbleH1, 1});
      if (model_.layers % plan.pp == 0 &&
          plan.microBatches % plan.pp == 0)
        for (int64_t v : divisors(model_.layers / plan.pp))
          if (v >= 2)
            schedules.push_back({Schedule::kInterleaved, v});
    }
    for (const ScheduleChoice &choice : schedules) {
      if (options_.fixSchedule && plan.pp > 1 &&
          choice.schedule != *options_.fixSchedule)
        continue;
      plan.schedule = choice.schedule;
      plan.virtualStages = choice.v;
      // Recomputation only adds time: once a mode fits, the later (leaner,
      // slower) ones are dominated. Between selective and full, full
      // recomputation of the first K layers of each stage, K a quarter,
      // half and three quarters of the fullest stage's layers: a few
      // choices, not one per K.
      for (const RecomputeChoice &choice : recomputeChoices(plan)) {
        if (options_.fixRecompute && choice.mode != *options_.fixRecompute)
          continue;
        // A pinned mode without a pinned K is that mode on every layer.
        int64_t fixLayers = options_.fixRecomputeLayers >= 0 ? options_.fixRecomputeLayers
                            : options_.fixRecompute          ? 0
                                                             : -1;
        if (fixLayers >= 0 && choice.layers != fixLayers)
          continue;
        if (choice.mode == Recompute::kSelective && model_.flashAttention)
          continue; // nothing of the attention core is stored anyway
        plan.recompute = choice.mode;
        plan.recomputeLayers = choice.layers;
        if (outOfTime())
          return;
        if (evaluate(plan))
          break;
      }
      plan.recomputeLayers = 0;
    }
  }

  struct RecomputeChoice {
    Recompute mode;
    int64_t layers; ///< Plan::recomputeLayers
  };
  /// The recomputation modes in order of time: none, selective, the first
  /// K layers of each stage (K ascending), every layer.
  std::vector<RecomputeChoice> recomputeChoices(const Plan &plan) const {
    if (options_.fixRecompute && options_.fixRecomputeLayers > 0)
      return {{*options_.fixRecompute, options_.fixRecomputeLayers}};
    std::vector<RecomputeChoice> out = {{Recompute::kNone, 0},
                                        {Recompute::kSelective, 0}};
    int64_t most = 0;
    for (int64_t s = 0; s < plan.pp; ++s)
      most = std::max(most, stageLayers(model_, plan.pp, s));
    for (int64_t quarter : {1, 2, 3}) {
      int64_t k = (most * quarter + 3) / 4;
      if (k > 0 && k < most && out.back().layers != k)
        out.push_back({Recompute::kFull, k});
    }
    out.push_back({Recompute::kFull, 0});
    return out;
  }

  /// Returns whether the plan fits.
  bool evaluate(Plan plan) {
    plan.halfGradReduce = options_.halfGradReduce;
    if (options_.buildable) {
      std::optional<std::string> why = options_.buildable(plan);
      // Half gradient sums where the consumer builds them, else fp32.
      if (why && plan.halfGradReduce) {
        plan.halfGradReduce = false;
        why = options_.buildable(plan);
      }
      if (why) {
        invalid(plan, *why);
        return false;
      }
    }
    MemoryBreakdown memory = memory_.peak(plan);
    double excess = 0;
    std::string problem = memoryProblem(memory, memory_, excess);
    if (!problem.empty()) {
      outOfMemory(plan, problem, excess);
      return false;
    }
    ++evaluated_;
    TimeBreakdown time = time_.estimate(plan);
    GroupKey key = groupOf(plan);
    auto it = groupBest_.find(key);
    if (it == groupBest_.end() ||
        time.stepTime < it->second.time.stepTime * (1 - 1e-12))
      groupBest_[key] = Candidate{plan, memory, time, true, ""};
    if (!best_ || time.stepTime < best_->time.stepTime * (1 - 1e-12))
      best_ = Candidate{plan, memory, time, true, ""};
    // Near-best plans: within the margin of the best so far (the final
    // best can only be faster, so finish() filters again).
    if (options_.keepWithin > 0 &&
        time.stepTime <= best_->time.stepTime * (1 + options_.keepWithin))
      near_.push_back(Candidate{plan, memory, time, true, ""});
    if (near_.size() > 4096) { // drop those the best has since left behind
      const double limit = best_->time.stepTime * (1 + options_.keepWithin);
      near_.erase(std::remove_if(near_.begin(), near_.end(),
                                 [&](const Candidate &c) {
                                   return c.time.stepTime > limit;
                                 }),
                  near_.end());
    }
    return true;
  }

  SearchResult finish() {
    SearchResult result;
    result.best = best_;
    result.evaluated = evaluated_;
    result.pruned = pruned_;
    result.budgetExhausted = budgetExhausted_;
    const size_t keep = size_t(std::max(0, options_.alternativesPerKind));

    if (best_ && options_.keepWithin > 0) {
      const double limit = best_->time.stepTime * (1 + options_.keepWithin);
      for (const Candidate &c : near_)
        if (c.time.stepTime <= limit)
          result.nearBest.push_back(c);
      std::sort(result.nearBest.begin(), result.nearBest.end(),
                       [](const Candidate &a, const Candidate &b) {
                         return a.time.stepTime < b.time.stepTime;
                       });
      if (result.nearBest.size() > size_t(std::max(1, options_.maxNearBest)))
        result.nearBest.resize(size_t(std::max(1, options_.maxNearBest)));
    }

    std::vector<Rejection> slower;
    if (best_) {
      GroupKey chosen = groupOf(best_->plan);
      for (const auto &[key, candidate] : groupBest_) {
        if (key == chosen)
          continue;
        Rejection r;
        r.kind = Rejection::Kind::kSlower;
        r.plan = candidate.plan;
        r.stepTime = candidate.time.stepTime;
        r.slowerFraction =
            candidate.time.stepTime / best_->time.stepTime - 1;
        r.reason = "slower by " + formatPercent(r.slowerFraction);
        slower.push_back(r);
      }
      std::sort(slower.begin(), slower.end(), [](const auto &a, const auto &b) {
        return a.stepTime < b.stepTime;
      });
    }
    // The misses that would have been faster than the chosen plan come
    // first, closest to fitting first.
    std::vector<Rejection> oom;
    for (const auto &entry : oom_) {
      Rejection r = entry.second;
      if (best_ && r.stepTime < best_->time.stepTime) {
        r.slowerFraction = r.stepTime / best_->time.stepTime - 1;
        r.reason += ", would be " + formatPercent(-r.slowerFraction) +
                    " faster";
      }
      oom.push_back(r);
    }
    std::sort(oom.begin(), oom.end(), [&](const auto &a, const auto &b) {
      bool fasterA = a.slowerFraction < 0, fasterB = b.slowerFraction < 0;
      if (fasterA != fasterB)
        return fasterA;
      return a.excessBytes < b.excessBytes;
    });
    result.slowerPlans = slower;
    if (slower.size() > keep)
      slower.resize(keep);
    if (oom.size() > keep)
      oom.resize(keep);
    std::vector<Rejection> invalids = invalid_;
    if (invalids.size() > keep)
      invalids.resize(keep);
    for (auto *list : {&slower, &oom, &invalids})
      result.alternatives.insert(result.alternatives.end(), list->begin(),
                                 list->end());

    // Does one device suffice? The leanest unsplit plan: one sequence,
    // full recomputation, no sharding.
    Plan single;
    single.dtype = options_.dtype;
    single.microBatchSize = 1;
    single.microBatches = 1;
    single.recompute = Recompute::kFull;
    MemoryBreakdown singleMemory = memory_.peak(single);
    result.fitsOnOneDevice = singleMemory.total() <= memory_.capacity();
    const int64_t n = cluster_.numDevices();
    if (n == 1) {
      result.note = result.best
                        ? "no distribution: the plan runs on one device"
                        : "the model does not fit on the one device";
    } else if (result.fitsOnOneDevice && best_) {
      const Plan &p = best_->plan;
      bool plainDp = p.tp == 1 && p.pp == 1 && p.zeroStage == 0 &&
                     p.offload == Offload::kNone;
      if (plainDp) {
        result.note = strCat(model_.name, " fits on one device (",
                             formatBytes(singleMemory.total()), " of ",
                             formatBytes(memory_.capacity()),
                             " at micro-batch 1): plain data parallelism "
                             "over ",
                             n, " devices, no model split");
      } else {
        double plainTime = 0;
        for (const auto &[key, candidate] : groupBest_)
          if (std::get<0>(key) == 1 && std::get<1>(key) == 1 &&
              std::get<2>(key) == 0 && std::get<3>(key) == 0)
            plainTime = candidate.time.stepTime;
        result.note =
            plainTime > 0
                ? strCat(model_.name, " fits on one device, but this plan "
                                      "is predicted ",
                         formatPercent(plainTime / best_->time.stepTime - 1),
                         " faster than plain data parallelism")
                : pinsOutPlainDp()
                ? strCat(model_.name,
                         " fits on one device at micro-batch 1; the given "
                         "mesh/ZeRO stage leaves out plain data parallelism")
                : strCat(model_.name,
                         " fits on one device at micro-batch 1, but plain "
                         "data parallelism does not fit this global batch's "
                         "micro-batching");
      }
    } else if (!result.best) {
      result.note = budgetExhausted_
                        ? "the search budget ran out before any plan that "
                          "fits was found"
                        : result.everyPlanInvalid()
                        ? "no plan is valid for this model on this cluster; "
                          "see the alternatives"
                        : "no plan fits in memory; see the alternatives";
    }
    result.seconds = elapsed();
    return result;
  }

  /// Whether the pinned dimensions exclude plain data parallelism (no
  /// model split, no ZeRO) over every device.
  bool pinsOutPlainDp() const {
    const SearchOptions &o = options_;
    return o.fixTp > 1 || o.fixPp > 1 || o.fixCp > 1 || o.fixZero > 0 ||
           (o.fixDp > 0 && o.fixDp != cluster_.numDevices());
  }

  const ModelDesc &model_;
  const ClusterSpec &cluster_;
  const SearchOptions &options_;
  MemoryModel memory_;
  TimeModel time_;
  std::chrono::steady_clock::time_point start_;
  std::optional<Candidate> best_;
  std::vector<Candidate> near_;
  std::map<GroupKey, Candidate> groupBest_;
  std::map<GroupKey, Rejection> oom_;
  std::vector<Rejection> invalid_;
  std::set<std::string> invalidReasons_;
  int64_t evaluated_ = 0, pruned_ = 0;
  uint64_t ticks_ = 0;
  bool stopped_ = false, budgetExhausted_ = false;
};

} // namespace

StatusOr<SearchResult> searchPlans(const ModelDesc &model,
                                   const ClusterSpec &cluster,
                                   const SearchOptions &options) {
  DTCC_RETURN_IF_ERROR(model.validate());
  DTCC_RETURN_IF_ERROR(cluster.validate());
  if (options.globalBatch < 1)
    return invalidArgument("global batch must be at least 1, got ",
                           options.globalBatch);
  if (options.budgetSeconds < 0)
    return invalidArgument("search budget must be >= 0 seconds");
  return Searcher(model, cluster, options).run();
}

StatusOr<Candidate> evaluatePlan(const ModelDesc &model,
                                 const ClusterSpec &cluster,
                                 const Plan &plan) {
  DTCC_RETURN_IF_ERROR(model.validate());
  DTCC_RETURN_IF_ERROR(cluster.validate());
  if (auto problem = planProblem(plan, model, cluster))
    return invalidArgument("plan cannot run: ", *problem);
  MemoryModel memory(model, cluster);
  TimeModel time(model, cluster);
  Candidate c;
  c.plan = plan;
  c.memory = memory.peak(plan);
  c.time = time.estimate(plan);
  double excess = 0;
  c.problem = memoryProblem(c.memory, memory, excess);
  c.fits = c.problem.empty();
  return c;
}

} // namespace dtcc::planner
