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
  struct Figure {
    const char *name;
    double WorldScale::*factor;
  };
  const Figure figures[] = {{"intra-node bandwidth", &WorldScale::intraNode},
                            {"inter-node bandwidth", &WorldScale::interNode},
                            {"memory bandwidth", &WorldScale::memory},
                            {"compute rate", &WorldScale::compute}};
  std::vector<WorldScale> worlds;
  for (double f : {1 - delta, 1 + delta})
    for (const Figure &figure : figures) {
      WorldScale w;
      w.name = std::string(figure.name) + " " + factorText(f);
      w.*figure.factor = f;
      worlds.push_back(w);
    }
  WorldScale corner;
  corner.name = "all four " + factorText(1 - delta);
  for (const Figure &figure : figures)
    corner.*figure.factor = 1 - delta;
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
  for (auto &[kernel, seconds] : c.device.kernelByteSeconds)
    seconds.value /= world.memory;
  for (Figure *peak : {&c.device.peakFp32, &c.device.peakTf32,
                       &c.device.peakBf16, &c.device.peakFp16})
    peak->value *= world.compute;
  return c;
}

StatusOr<SensitivityResult>
analyzeSensitivity(const ModelDesc &model, const ClusterSpec &cluster,
                   SearchOptions options, double within, double delta,
                   const SensitivityPricing &pricing) {
  SensitivityResult out;
  out.within = within;
  out.pricedBy = pricing.model;
  SearchOptions nominal = options;
  nominal.keepWithin = within;
  DTCC_ASSIGN_OR_RETURN(out.search, searchPlans(model, cluster, nominal));
  if (!out.search.best)
    return out;

  // The plans compared: the nominal search's near-best ones, its closest
  // slower ones where the pricing asks, and each world's best.
  std::vector<Plan> plans;
  auto propose = [&plans](const Plan &plan) {
    if (std::find(plans.begin(), plans.end(), plan) == plans.end())
      plans.push_back(plan);
  };
  propose(out.search.best->plan);
  for (const Candidate &c : out.search.nearBest)
    propose(c.plan);
  size_t extra = 0;
  for (const Rejection &r : out.search.alternatives)
    if (r.kind == Rejection::Kind::kSlower &&
        r.slowerFraction <= pricing.extraWithin &&
        extra < pricing.extraSlower) {
      propose(r.plan);
      ++extra;
    }
  const std::vector<WorldScale> worlds = sensitivityWorlds(delta);
  std::vector<ClusterSpec> clusters = {cluster}; // [0]: as modelled
  for (const WorldScale &world : worlds) {
    clusters.push_back(scaleCluster(cluster, world));
    DTCC_ASSIGN_OR_RETURN(SearchResult there,
                          searchPlans(model, clusters.back(), options));
    if (there.best)
      propose(there.best->plan);
  }

  // Every plan in every world, by the one cost model; a plan it cannot
  // price (or that does not fit as it prices it) is left out.
  auto price = [&](const Plan &plan,
                   const ClusterSpec &c) -> StatusOr<Candidate> {
    if (pricing.price)
      return pricing.price(plan, c);
    return evaluatePlan(model, c, plan);
  };
  std::vector<std::vector<Candidate>> priced; // [plan][world + 1]
  for (const Plan &plan : plans) {
    std::vector<Candidate> row;
    std::string why;
    for (const ClusterSpec &c : clusters) {
      StatusOr<Candidate> p = price(plan, c);
      if (!p.isOk()) {
        if (!pricing.price)
          return p.status();
        why = p.status().message();
        why = why.substr(0, why.find('\n'));
        break;
      }
      row.push_back(std::move(p.value()));
    }
    if (why.empty() && !row.front().fits)
      why = "does not fit as priced (" +
            formatBytes(row.front().memory.total()) + " per device)";
    if (!why.empty()) {
      ++out.unpriced;
      out.leftOut.push_back(plan.summary() + ": " + why);
      continue;
    }
    priced.push_back(std::move(row));
  }
  out.compared = priced.size();
  if (priced.empty())
    return out;
  // Fastest as modelled first; on a tie, in the order proposed.
  std::vector<size_t> order(priced.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    double ta = priced[a][0].time.stepTime, tb = priced[b][0].time.stepTime;
    return ta != tb ? ta < tb : a < b;
  });
  std::vector<std::vector<Candidate>> sorted;
  for (size_t i : order)
    sorted.push_back(std::move(priced[i]));
  priced = std::move(sorted);
  out.fastest = priced.front()[0];
  const double limit = out.fastest->time.stepTime * (1 + within);
  size_t near = 0;
  while (near < priced.size() && priced[near][0].time.stepTime <= limit)
    out.nearBest.push_back({priced[near++][0], 0, ""});

  for (size_t w = 0; w < worlds.size(); ++w) {
    WorldOutcome outcome;
    outcome.world = worlds[w];
    const Candidate *best = &priced[0][w + 1];
    for (const std::vector<Candidate> &row : priced)
      if (row[w + 1].time.stepTime < best->time.stepTime)
        best = &row[w + 1];
    outcome.best = *best;
    out.worlds.push_back(outcome);
    if (!worlds[w].worse())
      continue;
    for (size_t i = 0; i < near; ++i) {
      double loss = priced[i][w + 1].time.stepTime / best->time.stepTime - 1;
      NearBestPlan &p = out.nearBest[i];
      if (p.worstWorld.empty() || loss > p.worstLoss) {
        p.worstLoss = std::max(0.0, loss);
        p.worstWorld = worlds[w].name;
      }
    }
  }
  // The least worst-world loss; the fastest as modelled on a tie (losses
  // closer than 0.05% are a tie: the search's own rounding).
  size_t pick = 0;
  for (size_t i = 1; i < near; ++i)
    if (out.nearBest[i].worstLoss < out.nearBest[pick].worstLoss - 5e-4)
      pick = i;
  out.chosen = out.nearBest[pick].candidate;
  out.preferenceChanged = pick != 0;
  for (size_t w = 0; w < out.worlds.size(); ++w) {
    WorldOutcome &o = out.worlds[w];
    o.chosenTime = priced[pick][w + 1].time.stepTime;
    o.loss = std::max(0.0, o.chosenTime / o.best.time.stepTime - 1);
    o.choiceChanges = !(o.best.plan == out.chosen->plan);
  }
  return out;
}

std::string formatSensitivity(const SensitivityResult &result) {
  std::string s = "\nSensitivity: each figure scaled by 0.8 and 1.2 alone, "
                  "then all four by 0.8; the chosen plan's step in each "
                  "world against that world's best plan; every plan priced "
                  "by " + result.pricedBy + "\n";
  if (!result.chosen)
    return s + "  no plan fits: nothing to compare\n";
  const Candidate &chosen = *result.chosen;
  char line[512];
  std::snprintf(line, sizeof(line), "  %-30s %10s %10s %7s  %s\n", "world",
                "chosen", "best", "loss", "best plan there");
  s += line;
  std::snprintf(line, sizeof(line), "  %-30s %10s %10s %7s  %s\n",
                "as modelled", formatSeconds(chosen.time.stepTime).c_str(),
                formatSeconds(result.fastest->time.stepTime).c_str(),
                formatPercent(chosen.time.stepTime /
                                  result.fastest->time.stepTime -
                              1)
                    .c_str(),
                result.preferenceChanged
                    ? result.fastest->plan.summary().c_str()
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
              " of the fastest as modelled: ", result.nearBest.size(), " (of ",
              result.compared, " compared");
  if (result.unpriced > 0)
    s += strCat("; ", result.unpriced, " proposed plans left out");
  s += ")\n";
  for (const std::string &why : result.leftOut)
    s += "    left out: " + why + "\n";
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
  j.set("pricedBy", result.pricedBy);
  j.set("compared", int64_t(result.compared));
  j.set("unpriced", int64_t(result.unpriced));
  Json leftOut = Json::array();
  for (const std::string &why : result.leftOut)
    leftOut.push(why);
  j.set("leftOut", leftOut);
  if (result.chosen) {
    j.set("chosen", planToJson(result.chosen->plan));
    j.set("fastest", planToJson(result.fastest->plan));
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
