//===- PlanFuzzer.cpp - libFuzzer target for cluster files and saved plans ===//
//
// dtcc-fuzz-plan: the first byte of an input chooses what the rest is:
//   0: a JSON cluster file, 1: a YAML cluster file (`dtcc plan --cluster
//   FILE` on a small zoo GPT), 2: a saved plan (`dtcc plan --plan-in FILE`),
//   3: a saved plan evaluated on the dgx-a100-80g preset instead of its own
//   cluster.
// `dtcc plan` (compiler/Planning.h's planModel) runs with a 20 ms search
// budget and writes its JSON report and a Chrome trace; it must return a
// report or a clear error, never crash. Seeds: every preset as a JSON and a
// YAML file, and plans saved by `dtcc plan --plan-out` on them.
//
//===----------------------------------------------------------------------===//

#include "tests/fuzz/FuzzSupport.h"

#include "planner/Cluster.h"
#include "compiler/Planning.h"

#include <cstdint>
#include <string>
#include <vector>

using namespace dtcc;
using dtcc::PlanRequest;

namespace {

/// `dtcc plan --zoo gpt` of a small GPT (the --zoo sizes) on `cluster`.
PlanRequest zooGpt(const std::string &cluster) {
  PlanRequest r;
  r.zooFamily = "gpt";
  r.zooSizes = {{"layers", 2}, {"hidden", 64}, {"heads", 4}, {"vocab", 128}};
  r.seq = 32;
  r.globalBatch = 8;
  r.cluster = cluster;
  r.clusterGiven = true;
  return r;
}

/// Plans for `r` with the fuzzer's budget and outputs: 0 (a plan fits), 1
/// (a clear error) or 2 (no plan fits in memory).
int plan(PlanRequest r) {
  r.budgetSeconds = 0.02;
  r.json = true;
  r.alternatives = 2;
  r.tracePath = fuzz::scratchDir() + "/trace.json";
  auto out = planModel(r);
  if (!out.isOk())
    return 1;
  return out.value().fits ? 0 : 2;
}

/// Block-mapping YAML of a JSON object (the subset parseYamlSubset reads,
/// which has no sequences: arrays are left out).
void toYaml(const planner::Json &json, int indent, std::string &out) {
  for (const auto &[key, value] : json.members()) {
    if (value.isArray())
      continue;
    out += std::string(indent, ' ') + key + ":";
    if (value.isObject()) {
      out += "\n";
      toYaml(value, indent + 2, out);
    } else {
      out += " " + value.dump(-1) + "\n";
    }
  }
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  fuzz::initialize("plan");
  if (fuzz::seedsDir().empty())
    return 0;
  for (const std::string &preset : planner::clusterPresetNames()) {
    auto cluster = planner::clusterPreset(preset);
    if (!cluster.isOk())
      fuzz::finding("preset " + preset + ": " + cluster.status().toString());
    planner::Json json = planner::clusterToJson(cluster.value());
    fuzz::writeSeed(preset + ".json", std::string(1, '\0') + json.dump());
    std::string yaml = "base: " + preset + "\n";
    toYaml(json, 0, yaml);
    fuzz::writeSeed(preset + ".yaml", std::string(1, '\1') + yaml);
    std::string clusterPath = fuzz::scratchDir() + "/seed-cluster.json";
    fuzz::writeFile(clusterPath, json.dump());
    std::string planPath = fuzz::scratchDir() + "/seed-plan.json";
    PlanRequest r = zooGpt(clusterPath);
    r.planOut = planPath;
    if (plan(r) != 0)
      fuzz::finding("dtcc plan fails on preset " + preset);
    fuzz::writeSeed(preset + "-plan", std::string(1, '\2') +
                                          fuzz::readFile(planPath));
  }
  // A saved plan whose gradients are summed in bf16 (its `gradReduce`).
  {
    std::string planPath = fuzz::scratchDir() + "/seed-plan-half.json";
    PlanRequest r = zooGpt("dgx-h100");
    r.halfGradReduce = true;
    r.planOut = planPath;
    if (plan(r) != 0)
      fuzz::finding("dtcc plan --grad-reduce half fails on dgx-h100");
    fuzz::writeSeed("dgx-h100-plan-half-reduce",
                    std::string(1, '\2') + fuzz::readFile(planPath));
  }
  fuzz::writeSeed("base-override",
                  std::string(1, '\1') + "base: dgx-a100-80g\n# a comment\n"
                                         "interNode:\n  bandwidth: 50e9\n");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  std::string_view rest(reinterpret_cast<const char *>(data + 1), size - 1);
  switch (data[0] % 4) {
  case 0:
  case 1: {
    std::string path = fuzz::scratchDir() + "/cluster" +
                       (data[0] % 4 == 0 ? ".json" : ".yaml");
    fuzz::writeFile(path, rest);
    plan(zooGpt(path));
    break;
  }
  default: {
    std::string path = fuzz::scratchDir() + "/plan.json";
    fuzz::writeFile(path, rest);
    PlanRequest r;
    r.planIn = path;
    if (data[0] % 4 == 3) {
      r.cluster = "dgx-a100-80g";
      r.clusterGiven = true;
    }
    plan(r);
    break;
  }
  }
  return 0;
}
