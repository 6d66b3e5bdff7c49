//===- Sensitivity.h - how a plan choice holds when the figures are off -*- C++ -*-===//
//
// `dtcc plan --sensitivity`: re-plans with each bandwidth and the compute
// rate scaled by 0.8 and 1.2 (one at a time, and all at 0.8), says whether
// the choice changes and how much the chosen plan loses in each such world
// against that world's best, and among the plans within 2% of the fastest
// prefers the one that loses least when the world is worse than modelled.
// Every plan is priced in every world by one cost model: the one the plan
// is chosen with (the analytic model, or on GPU clusters each plan's
// compiled program, compiled once and simulated again per world).
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_PLANNER_SENSITIVITY_H
#define DTCC_PLANNER_SENSITIVITY_H

#include "planner/Search.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace dtcc::planner {

/// A world the cluster's figures might describe: each factor multiplies a
/// group of figures (1 = as modelled).
struct WorldScale {
  std::string name; ///< "inter-node bandwidth x0.8"
  /// intraNode.bandwidth, interNode.bandwidth.
  double intraNode = 1, interNode = 1;
  /// device.memoryBandwidth, and device.kernelSeconds divided by it (a
  /// calibration's measured kernels are memory-bound).
  double memory = 1;
  /// The dense peaks (peakFp32 .. peakFp16): GEMM and attention rates at
  /// their efficiencies, which cannot exceed 1 and so are not scaled.
  double compute = 1;
  /// Some figure below 1 and none above: a world worse than modelled.
  bool worse() const;
};

/// The worlds `dtcc plan --sensitivity` plans in: each of the four figures
/// at 1 - `delta` and 1 + `delta` alone, then all at 1 - `delta`.
std::vector<WorldScale> sensitivityWorlds(double delta = 0.2);

/// `cluster` with `world`'s factors applied.
ClusterSpec scaleCluster(const ClusterSpec &cluster, const WorldScale &world);

/// The cost model that prices a plan on a cluster (a world's scaled
/// figures). An error means the model cannot price the plan (the compiler
/// refuses it): the plan is left out of the comparison.
using PlanPricer =
    std::function<StatusOr<Candidate>(const Plan &, const ClusterSpec &)>;

/// How analyzeSensitivity prices and which plans it compares.
struct SensitivityPricing {
  /// Empty: the analytic model (evaluatePlan).
  PlanPricer price;
  /// The cost model in words, for the report.
  std::string model = "the analytic model";
  /// Besides the analytic search's plans within the margin and each
  /// world's analytic best: up to `extraSlower` of its best slower plans
  /// (one per mesh and ZeRO stage) within `extraWithin` of its best, as
  /// `dtcc plan` compiles them when the compiled program decides.
  double extraWithin = 0;
  size_t extraSlower = 0;
};

/// One world: its best plan and what the chosen plan costs there.
struct WorldOutcome {
  WorldScale world;
  Candidate best;        ///< the search's best in this world
  double chosenTime = 0; ///< the chosen plan's step time in this world
  /// chosenTime / best step time - 1 (>= 0).
  double loss = 0;
  bool choiceChanges = false; ///< best.plan differs from the chosen plan
};

/// A plan within the margin of the fastest, with its losses.
struct NearBestPlan {
  Candidate candidate;   ///< as modelled
  double worstLoss = 0;  ///< over the worse worlds
  std::string worstWorld;
};

struct SensitivityResult {
  /// The analytic search as modelled (it proposes the plans compared).
  SearchResult search;
  /// The fastest plan as modelled by the pricing's cost model.
  std::optional<Candidate> fastest;
  /// Plans compared (priced in every world), and those the pricing's cost
  /// model could not price (left out).
  size_t compared = 0, unpriced = 0;
  /// Each plan left out, and why ("plan summary: reason").
  std::vector<std::string> leftOut;
  /// SensitivityPricing::model.
  std::string pricedBy;
  /// The plan chosen: of the near-best plans, the one with the least
  /// worst-world loss (the fastest on a tie); empty when nothing fits.
  std::optional<Candidate> chosen;
  /// The chosen plan is not the fastest as modelled.
  bool preferenceChanged = false;
  double within = 0.02;
  /// Every near-best plan, fastest first.
  std::vector<NearBestPlan> nearBest;
  /// Each world of sensitivityWorlds(), for the chosen plan.
  std::vector<WorldOutcome> worlds;
};

/// Searches as searchPlans(model, cluster, options) does, then in each of
/// sensitivityWorlds(delta); prices the plans those searches propose (the
/// nominal search's plans within `within`, each world's best, and the
/// pricing's extra plans) with `pricing` in every world, and chooses among
/// the plans within `within` of the fastest so priced. Each world's best is
/// the fastest of the compared plans there. Errors: those of searchPlans
/// and of the analytic model; nothing fitting is not an error (then
/// `chosen` and `worlds` are empty).
StatusOr<SensitivityResult>
analyzeSensitivity(const ModelDesc &model, const ClusterSpec &cluster,
                   SearchOptions options, double within = 0.02,
                   double delta = 0.2, const SensitivityPricing &pricing = {});

/// The text section `dtcc plan --sensitivity` prints after the report.
std::string formatSensitivity(const SensitivityResult &result);
/// Its JSON form (the report's "sensitivity" member, docs/planner.md).
Json sensitivityToJson(const SensitivityResult &result);

} // namespace dtcc::planner

#endif // DTCC_PLANNER_SENSITIVITY_H
