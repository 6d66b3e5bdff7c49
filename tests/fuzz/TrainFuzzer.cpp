//===- TrainFuzzer.cpp - libFuzzer target for the training pipeline -------===//
//
// dtcc-fuzz-train: the first byte of an input chooses the training options
// (optimizer, mesh and ZeRO stage, micro-batches, recomputation, compute
// type; see kConfigs), the rest is an ONNX model (binary or text) whose
// graph output is the loss. The model is imported as a training graph and
// compiled through autodiff, the optimizer, sharding and lowering; a
// single-device program must then load into the runtime and, when small,
// run. Seeds: the zoo's GPT and MLP and a few hand-written graphs, each
// under every configuration; `make fuzz` adds ONNX's node tests rewritten
// as training graphs (tests/lit/Inputs/node_test_as_training.py).
//
//===----------------------------------------------------------------------===//

#include "tests/fuzz/FuzzSupport.h"

#include "frontends/onnx/OnnxImporter.h"

#include <cstdint>
#include <string>

using namespace dtcc;

namespace {

struct Config {
  const char *name;
  const char *mesh;
  int zero;
  const char *optimizer;
  int64_t microBatches;
  const char *recompute;
  const char *dtype;
  bool ilp;
};

// Indexed by the input's first byte modulo their number.
const Config kConfigs[] = {
    {"single", "", 0, "adamw", 1, "none", "fp32", false},
    {"sgd", "", 0, "sgd", 1, "none", "fp32", false},
    {"dp2", "dp=2", 0, "adamw", 1, "none", "fp32", false},
    {"tp2", "tp=2", 0, "adamw", 1, "none", "fp32", false},
    {"dp2-zero1", "dp=2", 1, "adamw", 1, "none", "fp32", false},
    {"dp2-zero3", "dp=2", 3, "adamw", 1, "none", "fp32", false},
    {"dp2-tp2", "dp=2,tp=2", 0, "sgd", 1, "none", "fp32", false},
    {"pp2", "pp=2", 0, "sgd", 2, "none", "fp32", false},
    {"micro2", "", 0, "adamw", 2, "none", "fp32", false},
    {"recompute", "", 0, "sgd", 1, "full", "fp32", false},
    {"bf16", "", 0, "adamw", 1, "none", "bf16", false},
    {"tp2-ilp", "tp=2", 0, "sgd", 1, "none", "fp32", true},
    {"dp2-tp2-zero3", "dp=2,tp=2", 3, "adamw", 1, "none", "fp32", false},
    {"fp16-micro2", "", 0, "adamw", 2, "none", "fp16", false},
};
constexpr size_t kNumConfigs = sizeof(kConfigs) / sizeof(kConfigs[0]);


} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  fuzz::initialize("train");
  if (fuzz::seedsDir().empty())
    return 0;
  std::vector<std::pair<std::string, std::string>> models = {
      {"gpt", fuzz::zooModel("gpt")}, {"mlp", fuzz::zooModel("mlp")}};
  const std::vector<std::string> &graphs = fuzz::textModels();
  for (size_t i = 0; i < graphs.size(); ++i)
    models.push_back({"graph" + std::to_string(i), graphs[i]});
  // Each model under three configurations, every configuration used.
  for (size_t m = 0; m < models.size(); ++m)
    for (size_t c = m; c < kNumConfigs + models.size(); c += models.size()) {
      size_t k = c % kNumConfigs;
      fuzz::writeSeed(models[m].first + "-" + kConfigs[k].name,
                      std::string(1, static_cast<char>(k)) + models[m].second);
    }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2)
    return 0;
  const Config &config = kConfigs[data[0] % kNumConfigs];
  std::string bytes(reinterpret_cast<const char *>(data + 1), size - 1);
  fuzz::FuzzContext context;
  onnx_frontend::ImportOptions import;
  import.training = true;
  auto module = onnx_frontend::importOnnxBytes(
      bytes, "fuzz.onnx", fuzz::scratchDir(), &context.get(), import);
  if (mlir::failed(module))
    return 0;
  CompileOptions options;
  options.compileTo = Phase::Exec;
  options.train.enabled = true;
  options.train.optimizer = config.optimizer;
  if (*config.mesh) {
    auto mesh = runtime::MeshShape::parse(config.mesh);
    if (!mesh.isOk())
      fuzz::finding("configuration mesh: " + mesh.status().toString());
    options.train.plan.mesh = mesh.value();
  }
  options.train.plan.zero = config.zero;
  options.train.plan.microBatches = config.microBatches;
  options.train.plan.recompute = config.recompute;
  options.train.dtype = config.dtype;
  options.train.gradClip = config.optimizer[0] == 'a' ? 1.0 : 0.0;
  if (config.ilp) {
    options.train.layoutSearch.enabled = true;
    options.train.layoutSearch.timeLimit = 2;
  }
  if (mlir::failed(runPhases(**module, options)))
    return 0;
  fuzz::checkLoadsAndRuns(**module, int64_t(16) << 20);
  return 0;
}
