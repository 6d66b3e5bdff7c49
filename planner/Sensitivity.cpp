//===- Sensitivity.cpp - how a plan choice holds when the figures are off -===//

#include "planner/Sensitivity.h"

#include "planner/Units.h"

#include <algorithm>
#include <cstdio>

namespace dtcc::planner {

using runtime::strCat;

bool WorldScale::worse() const {
  bool below = false;
  for (double f : {intraNode, interNode, memory, compute}) {
    if (f > 1)
      return false;
    below |= f < 1;
  }
  return below;
}

namespace {

std::string factorText(double f) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "x%.2g", f);
  return buf;
}

} // namespace

std::vector<WorldScale> sensitivityWorlds(double delta) {
  std::vector<WorldScale> worlds;
  for (double f : {1 - delta, 1 + delta}) {
    WorldScale w;
    w.name = "intra-node bandwidth " + factorText(f);
    w.intraNode = f;
    worlds.push_back(w);
    w = WorldScale();
    w.name = "inter-node bandwidth " + factorText(f);
    w.interNode = f;
    worlds.push_back(w);
    w = WorldScale();
    w.name = "memory bandwidth " + factorText(f);
    w.memory = f;
    worlds.push_back(w);
    w = WorldScale();
    w.name = "compute rate " + factorText(f);
    w.compute = f;
    worlds.push_back(w);
  }
  WorldScale corner;
  corner.name = "all four " + factorText(1 - delta);
  corner.intraNode = corner.interNode = corner.memory = corner.compute =
      1 - delta;
  worlds.push_back(corner);
  return worlds;
}

ClusterSpec scaleCluster(const ClusterSpec &cluster, const WorldScale &world) {
  ClusterSpec c = cluster;
  c.intraNode.bandwidth.value *= world.intraNode;
  c.interNode.bandwidth.value *= world.interNode;
  c.device.memoryBandwidth.value *= world.memory;
  for (auto &[kernel, seconds] : c.device.kernelSeconds)
    seconds.value /= world.memory;
  for (Figure *peak : {&c.device.peakFp32, &c.device.peakTf32,
                       &c.device.peakBf16, &c.device.peakFp16})
    peak->value *= world.compute;
  return c;
}

StatusOr<SensitivityResult> analyzeSensitivity(const ModelDesc &model,
                                               const ClusterSpec &cluster,
                                               SearchOptions options,
                                               double within, double delta) {
  SensitivityResult out;
  out.within = within;
  SearchOptions nominal = options;
  nominal.keepWithin = within;
  DTCC_ASSIGN_OR_RETURN(out.search, searchPlans(model, cluster, nominal));
  if (!out.search.best)
    return out;
  if (out.search.nearBest.empty())
    out.search.nearBest.push_back(*out.search.best);

  for (const Candidate &c : out.search.nearBest)
    out.nearBest.push_back({c, 0, ""});
  // Each world: its own best, and every near-best plan's time there.
  std::vector<std::vector<double>> times; // [world][near-best plan]
  for (const WorldScale &world : sensitivityWorlds(delta)) {
    ClusterSpec scaled = scaleCluster(cluster, world);
    DTCC_ASSIGN_OR_RETURN(SearchResult there,
                          searchPlans(model, scaled, options));
    WorldOutcome outcome;
    outcome.world = world;
    std::vector<double> row;
    double best = there.best ? there.best->time.stepTime : 0;
    for (const NearBestPlan &p : out.nearBest) {
      DTCC_ASSIGN_OR_RETURN(Candidate c,
                            evaluatePlan(model, scaled, p.candidate.plan));
      row.push_back(c.time.stepTime);
      // A budget-limited search may miss a plan we already know.
      if (best <= 0 || c.time.stepTime < best) {
        best = c.time.stepTime;
        if (!there.best || c.time.stepTime < there.best->time.stepTime)
          there.best = c;
      }
    }
    outcome.best = *there.best;
    times.push_back(row);
    out.worlds.push_back(outcome);
    if (!world.worse())
      continue;
    for (size_t i = 0; i < row.size(); ++i) {
      double loss = row[i] / best - 1;
      if (loss > out.nearBest[i].worstLoss || out.nearBest[i].worstWorld.empty()) {
        out.nearBest[i].worstLoss = std::max(0.0, loss);
        out.nearBest[i].worstWorld = world.name;
      }
    }
  }
  // The least worst-world loss; the fastest as modelled on a tie (losses
  // closer than 0.05% are a tie: the search's own rounding).
  size_t pick = 0;
  for (size_t i = 1; i < out.nearBest.size(); ++i)
    if (out.nearBest[i].worstLoss < out.nearBest[pick].worstLoss - 5e-4)
      pick = i;
  out.chosen = out.nearBest[pick].candidate;
  out.preferenceChanged = pick != 0;
  for (size_t w = 0; w < out.worlds.size(); ++w) {
    WorldOutcome &o = out.worlds[w];
    o.chosenTime = times[w][pick];
    o.loss = std::max(0.0, o.chosenTime / o.best.time.stepTime - 1);
    o.choiceChanges = !(o.best.plan == out.chosen->plan);
  }
  return out;
}

std::string formatSensitivity(const SensitivityResult &result) {
  std::string s = "\nSensitivity: each figure scaled by 0.8 and 1.2 alone, "
                  "then all four by 0.8; the chosen plan's step in each "
                  "world against that world's best plan\n";
  if (!result.chosen)
    return s + "  no plan fits: nothing to compare\n";
  const Candidate &chosen = *result.chosen;
  char line[512];
  std::snprintf(line, sizeof(line), "  %-30s %10s %10s %7s  %s\n", "world",
                "chosen", "best", "loss", "best plan there");
  s += line;
  std::snprintf(line, sizeof(line), "  %-30s %10s %10s %7s  %s\n",
                "as modelled", formatSeconds(chosen.time.stepTime).c_str(),
                formatSeconds(result.search.best->time.stepTime).c_str(),
                formatPercent(chosen.time.stepTime /
                                  result.search.best->time.stepTime -
                              1)
                    .c_str(),
                result.preferenceChanged
                    ? result.search.best->plan.summary().c_str()
                    : "the chosen plan");
  s += line;
  const WorldOutcome *worst = nullptr;
  int changes = 0;
  for (const WorldOutcome &o : result.worlds) {
    std::snprintf(line, sizeof(line), "  %-30s %10s %10s %7s  %s\n",
                  o.world.name.c_str(), formatSeconds(o.chosenTime).c_str(),
                  formatSeconds(o.best.time.stepTime).c_str(),
                  formatPercent(o.loss).c_str(),
                  o.choiceChanges ? o.best.plan.summary().c_str()
                                  : "the chosen plan");
    s += line;
    changes += o.choiceChanges;
    if (o.world.worse() && (!worst || o.loss > worst->loss))
      worst = &o;
  }
  s += strCat("  the choice changes in ", changes, " of ",
              result.worlds.size(), " worlds");
  if (worst)
    s += strCat("; in a worse world the chosen plan loses at most ",
                formatPercent(worst->loss), " (", worst->world.name, ")");
  s += "\n";
  s += strCat("  plans within ", formatPercent(result.within),
              " of the fastest as modelled: ", result.nearBest.size(), "\n");
  if (result.preferenceChanged) {
    const NearBestPlan &fastest = result.nearBest.front();
    double worstChosen = 0;
    for (const NearBestPlan &p : result.nearBest)
      if (p.candidate.plan == chosen.plan)
        worstChosen = p.worstLoss;
    s += strCat("  preferred over the fastest (", fastest.candidate.plan.summary(),
                ", ", formatPercent(1 - fastest.candidate.time.stepTime /
                                            chosen.time.stepTime),
                " faster as modelled, loses up to ",
                formatPercent(fastest.worstLoss), " in ", fastest.worstWorld,
                "): this plan loses at most ", formatPercent(worstChosen),
                "\n");
  } else {
    s += "  the fastest plan also loses least in the worse worlds\n";
  }
  return s;
}

Json sensitivityToJson(const SensitivityResult &result) {
  Json j = Json::object();
  j.set("within", result.within);
  j.set("preferenceChanged", result.preferenceChanged);
  if (result.chosen) {
    j.set("chosen", planToJson(result.chosen->plan));
    j.set("fastest", planToJson(result.search.best->plan));
  }
  Json near = Json::array();
  for (const NearBestPlan &p : result.nearBest) {
    Json n = Json::object();
    n.set("plan", planToJson(p.candidate.plan));
    n.set("stepTime", p.candidate.time.stepTime);
    n.set("worstLoss", p.worstLoss);
    n.set("worstWorld", p.worstWorld);
    near.push(n);
  }
  j.set("nearBest", near);
  Json worlds = Json::array();
  for (const WorldOutcome &o : result.worlds) {
    Json w = Json::object();
    w.set("world", o.world.name);
    Json f = Json::object();
    f.set("intraNodeBandwidth", o.world.intraNode);
    f.set("interNodeBandwidth", o.world.interNode);
    f.set("memoryBandwidth", o.world.memory);
    f.set("compute", o.world.compute);
    w.set("factors", f);
    w.set("worse", o.world.worse());
    w.set("chosenStepTime", o.chosenTime);
    w.set("bestStepTime", o.best.time.stepTime);
    w.set("loss", o.loss);
    w.set("choiceChanges", o.choiceChanges);
    w.set("bestPlan", planToJson(o.best.plan));
    worlds.push(w);
  }
  j.set("worlds", worlds);
  return j;
}

} // namespace dtcc::planner
