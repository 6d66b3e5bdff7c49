//===- ClusterTest.cpp - presets, cluster files, model presets ------------===//

#include "planner/Cluster.h"
#include "planner/Model.h"

#include <gtest/gtest.h>

namespace dtcc::planner {
namespace {

/// A cluster file `text` (named `name`) is refused, the message naming
/// `needle`.
void expectRefused(const std::string &text, const std::string &name,
                   const std::string &needle) {
  auto parsed = parseClusterText(text, name);
  ASSERT_FALSE(parsed.isOk()) << name;
  EXPECT_NE(parsed.status().message().find(needle), std::string::npos)
      << parsed.status().message();
}

TEST(Cluster, PresetsAreValidAndCarrySources) {
  for (const std::string &name : clusterPresetNames()) {
    auto c = clusterPreset(name);
    ASSERT_TRUE(c.isOk()) << name;
    EXPECT_TRUE(c.value().validate().isOk()) << name;
    EXPECT_FALSE(c.value().device.peakBf16.source.empty()) << name;
    EXPECT_EQ(c.value().nodes, 1);
  }
  EXPECT_EQ(clusterPresetNames().size(), 5u);
  // REFERENCES.md's hardware figures.
  ClusterSpec h100 = clusterPreset("dgx-h100").value();
  EXPECT_DOUBLE_EQ(h100.device.peakBf16.value, 989.4e12);
  EXPECT_DOUBLE_EQ(h100.device.memoryBandwidth.value, 3.35e12);
  EXPECT_DOUBLE_EQ(h100.intraNode.bandwidth.value * 2, 900e9);
  EXPECT_DOUBLE_EQ(h100.interNode.bandwidth.value * 8, 400e9);
  EXPECT_DOUBLE_EQ(clusterPreset("dgx-a100-80g").value().device.peakBf16.value,
                   312e12);
  EXPECT_GT(clusterPreset("h200").value().device.memoryBytes.value, 140e9);
  // The 40 GB A100 differs from the 80 GB one only in its memory.
  ClusterSpec a40 = clusterPreset("dgx-a100-40g").value();
  ClusterSpec a80 = clusterPreset("dgx-a100-80g").value();
  EXPECT_DOUBLE_EQ(a40.device.memoryBytes.value, 40960.0 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(a40.device.memoryBandwidth.value, 1.555e12);
  EXPECT_DOUBLE_EQ(a40.device.peakBf16.value, a80.device.peakBf16.value);
  EXPECT_DOUBLE_EQ(a40.interNode.bandwidth.value, a80.interNode.bandwidth.value);
  EXPECT_NE(a40.device.peakBf16.source.find("dgx-a100-40g"), std::string::npos);
  auto unknown = clusterPreset("tpu-v5");
  ASSERT_FALSE(unknown.isOk());
  EXPECT_NE(unknown.status().message().find("dgx-h100"), std::string::npos);
}

TEST(Cluster, JsonRoundTripAndBaseOverride) {
  ClusterSpec c = clusterPreset("dgx-h100").value();
  c.nodes = 4;
  auto back = clusterFromJson(clusterToJson(c), "test");
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  EXPECT_EQ(back.value().nodes, 4);
  EXPECT_EQ(back.value().device.peakBf16.value, c.device.peakBf16.value);
  EXPECT_EQ(back.value().interNode.bandwidth.source,
            c.interNode.bandwidth.source);

  auto file = parseClusterText(
      R"({"base": "dgx-h100", "device": {"memoryBytes": 96e9}})",
      "my.json");
  ASSERT_TRUE(file.isOk()) << file.status().toString();
  EXPECT_EQ(file.value().device.memoryBytes.value, 96e9);
  EXPECT_NE(file.value().device.memoryBytes.source.find("my.json"),
            std::string::npos);
  EXPECT_EQ(file.value().device.peakBf16.value, 989.4e12);

  auto yaml = parseClusterText("base: dgx-a100-80g\n"
                               "# a comment\n"
                               "interNode:\n"
                               "  bandwidth: 50e9\n",
                               "c.yaml");
  ASSERT_TRUE(yaml.isOk()) << yaml.status().toString();
  EXPECT_EQ(yaml.value().interNode.bandwidth.value, 50e9);

  expectRefused(R"({"base": "dgx-h100", "device": {"memoryBytes": "lots"}})",
                "x.json", "device.memoryBytes");
  expectRefused(R"({"name": "x"})", "y.json", "missing field");

  // device.collectiveShare round-trips, may be left out of a whole file
  // (0: collectives take no compute), and may not be negative.
  EXPECT_NEAR(back.value().device.collectiveShare.value, 24.0 / 132, 1e-15);
  Json whole = clusterToJson(c);
  ASSERT_NE(whole.find("device")->find("collectiveShare"), nullptr);
  Json device = Json::object();
  for (const auto &[key, value] : whole.find("device")->members())
    if (key != "collectiveShare")
      device.set(key, value);
  whole.set("device", device);
  auto without = clusterFromJson(whole, "test");
  ASSERT_TRUE(without.isOk()) << without.status().toString();
  EXPECT_EQ(without.value().device.collectiveShare.value, 0);
  expectRefused(
      R"({"base": "dgx-h100", "device": {"collectiveShare": -0.1}})",
      "z.json", "device.collectiveShare");
}

TEST(Cluster, MeasuredGemmCurveAndKernelRates) {
  ClusterSpec c = clusterPreset("cpu-local").value();
  // Without a curve every product gets the one efficiency.
  EXPECT_DOUBLE_EQ(c.device.matmulEfficiencyAt(8, 8, 8), 0.6);
  c.device.gemmEfficiency = {{64, 0.4}, {256, 0.8}, {1024, 0.9}};
  c.device.gemmEfficiencySource = "measured";
  c.device.kernelSeconds["gelu"] = {2e-9, "measured gelu"};
  c.device.kernelByteSeconds["gelu"] = {3e-10, "measured gelu bytes"};
  // Clamped at the ends, exact at the points, log-interpolated between.
  EXPECT_DOUBLE_EQ(c.device.matmulEfficiencyAt(2, 2, 2), 0.4);
  EXPECT_DOUBLE_EQ(c.device.matmulEfficiencyAt(4096, 4096, 4096), 0.9);
  EXPECT_NEAR(c.device.matmulEfficiencyAt(256, 256, 256), 0.8, 1e-12);
  EXPECT_NEAR(c.device.matmulEfficiencyAt(128, 128, 128), 0.6, 1e-12);
  // 64 x 256 x 1024: cbrt = 256.
  EXPECT_NEAR(c.device.matmulEfficiencyAt(64, 256, 1024), 0.8, 1e-12);

  auto back = clusterFromJson(clusterToJson(c), "test");
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  ASSERT_EQ(back.value().device.gemmEfficiency.size(), 3u);
  EXPECT_EQ(back.value().device.gemmEfficiency[1].n, 256);
  EXPECT_EQ(back.value().device.gemmEfficiency[1].efficiency, 0.8);
  EXPECT_EQ(back.value().device.gemmEfficiencySource, "measured");
  EXPECT_EQ(back.value().device.kernelSeconds.at("gelu").value, 2e-9);
  EXPECT_EQ(back.value().device.kernelSeconds.at("gelu").source,
            "measured gelu");
  EXPECT_EQ(back.value().device.kernelByteSeconds.at("gelu").value, 3e-10);
  EXPECT_EQ(back.value().device.kernelByteSeconds.at("gelu").source,
            "measured gelu bytes");
  // A file's kernel rates replace its base's, per byte with them.
  auto over = parseClusterText(R"({"base": "cpu-local", "device":
      {"kernelBytes": {"add": 1e-10}, "kernels": {"add": 1e-9}}})",
                               "k.json");
  ASSERT_TRUE(over.isOk()) << over.status().toString();
  EXPECT_EQ(over.value().device.kernelByteSeconds.at("add").value, 1e-10);
  EXPECT_EQ(over.value().device.kernelSeconds.at("add").value, 1e-9);

  expectRefused(R"({"base": "cpu-local", "device": {"gemmEfficiency":
          {"points": [[256, 0.8], [64, 0.4]]}}})",
                "u.json", "ascending");
  expectRefused(R"({"base": "cpu-local", "device": {"kernels": {"add": -1}}})",
                "n.json", "device.kernels.add");
  expectRefused(
      R"({"base": "cpu-local", "device": {"kernelBytes": {"add": 0}}})",
      "b.json", "device.kernelBytes.add");
}

TEST(Model, PresetsAndJson) {
  EXPECT_NEAR(double(ModelDesc::gpt2Small().totalParams()), 124.44e6, 0.01e6);
  EXPECT_NEAR(double(ModelDesc::llama3_8b().totalParams()), 8.03e9, 0.01e9);
  EXPECT_NEAR(double(ModelDesc::llama3_70b().totalParams()), 70.55e9, 0.01e9);
  EXPECT_NEAR(double(ModelDesc::llama3_405b().totalParams()), 405.85e9,
              0.01e9);
  for (const std::string &name : ModelDesc::presetNames()) {
    ModelDesc m = ModelDesc::preset(name).value();
    auto back = modelFromJson(modelToJson(m));
    ASSERT_TRUE(back.isOk()) << back.status().toString();
    EXPECT_EQ(back.value().totalParams(), m.totalParams());
  }
  ModelDesc bad = ModelDesc::gpt2Small();
  bad.heads = 7;
  EXPECT_FALSE(bad.validate().isOk());
}

// What an IR shows (compiler/DescribeModel.h) is saved with a plan and read
// back: the "graph" object, written only when there is one.
TEST(Model, GraphFiguresJson) {
  ModelDesc m = ModelDesc::gpt2Small();
  EXPECT_EQ(modelToJson(m).find("graph"), nullptr);
  m.graph.batch = 4;
  m.graph.parameters = 124439808;
  m.graph.parameterBytes = 4 * 124439808.0;
  m.graph.forwardFlops = 1.5e12;
  m.graph.layerForwardFlops = {1.0e11, 1.25e11};
  m.graph.activationBytes = 3.5e9;
  auto back = modelFromJson(modelToJson(m));
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  const ModelDesc::GraphFigures &g = back.value().graph;
  EXPECT_EQ(g.batch, 4);
  EXPECT_EQ(g.parameters, m.graph.parameters);
  EXPECT_EQ(g.parameterBytes, m.graph.parameterBytes);
  EXPECT_EQ(g.forwardFlops, m.graph.forwardFlops);
  EXPECT_EQ(g.layerForwardFlops, m.graph.layerForwardFlops);
  EXPECT_EQ(g.activationBytes, m.graph.activationBytes);

  Json j = modelToJson(m);
  Json graph = *j.find("graph");
  graph.set("flops", 1.0);
  j.set("graph", graph);
  auto unknown = modelFromJson(j);
  ASSERT_FALSE(unknown.isOk());
  EXPECT_NE(unknown.status().message().find("model.graph: unknown field 'flops'"),
            std::string::npos)
      << unknown.status().message();
}

// A model names the fused attention kernel its run used; the cluster prices
// it at that kernel's figure (device.attentionKernels), from its preset or a
// cluster file, and nothing else of the cluster changes.
TEST(Model, AttentionKernelPricedAtItsFigure) {
  ClusterSpec a100 = clusterPreset("dgx-a100-80g").value();
  ClusterSpec h100 = clusterPreset("dgx-h100").value();
  ClusterSpec a100_40 = clusterPreset("dgx-a100-40g").value();
  ASSERT_EQ(a100.device.attentionKernels.count("flash-attn-triton"), 1u);
  ASSERT_EQ(h100.device.attentionKernels.count("flash-attn-triton"), 1u);
  EXPECT_DOUBLE_EQ(a100_40.device.attentionKernels.at("flash-attn-triton")
                       .value,
                   a100.device.attentionKernels.at("flash-attn-triton").value);
  EXPECT_NE(a100_40.device.attentionKernels.at("flash-attn-triton")
                .source.find("as dgx-a100-80g"),
            std::string::npos);
  // The Triton kernel is slower than FlashAttention-2 on both kinds.
  EXPECT_LT(h100.device.attentionKernels.at("flash-attn-triton").value,
            h100.device.attentionEfficiency.value);

  ModelDesc m = ModelDesc::gpt2Small();
  m.flashAttention = true;
  ClusterSpec unchanged = h100;
  ASSERT_TRUE(useModelAttentionKernel(m, unchanged).isOk());
  EXPECT_EQ(unchanged.device.attentionEfficiency.value,
            h100.device.attentionEfficiency.value);

  m.attentionKernel = "flash-attn-triton";
  auto back = modelFromJson(modelToJson(m));
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  EXPECT_EQ(back.value().attentionKernel, "flash-attn-triton");
  ClusterSpec priced = h100;
  ASSERT_TRUE(useModelAttentionKernel(back.value(), priced).isOk());
  EXPECT_EQ(priced.device.attentionEfficiency.value,
            h100.device.attentionKernels.at("flash-attn-triton").value);
  EXPECT_NE(priced.device.attentionEfficiency.source.find(
                "the model's attentionKernel 'flash-attn-triton'"),
            std::string::npos)
      << priced.device.attentionEfficiency.source;
  EXPECT_EQ(priced.device.matmulEfficiency.value,
            h100.device.matmulEfficiency.value);

  // A kernel the cluster does not list: the error names those it does.
  m.attentionKernel = "xformers";
  ClusterSpec unknown = h100;
  Status s = useModelAttentionKernel(m, unknown);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("'xformers'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("it lists flash-attn-triton"), std::string::npos)
      << s.message();
  // ... which a cluster file adds; it keeps its base's entries.
  auto file = parseClusterText(
      R"({"base": "dgx-h100",
          "device": {"attentionKernels": {"xformers": 0.3}}})",
      "x.json");
  ASSERT_TRUE(file.isOk()) << file.status().toString();
  EXPECT_EQ(file.value().device.attentionKernels.size(), 2u);
  ClusterSpec added = file.value();
  ASSERT_TRUE(useModelAttentionKernel(m, added).isOk());
  EXPECT_DOUBLE_EQ(added.device.attentionEfficiency.value, 0.3);
  auto again = clusterFromJson(clusterToJson(file.value()), "test");
  ASSERT_TRUE(again.isOk()) << again.status().toString();
  EXPECT_DOUBLE_EQ(again.value().device.attentionKernels.at("xformers").value,
                   0.3);

  expectRefused(
      R"({"base": "dgx-h100", "device": {"attentionKernels": {"k": 1.5}}})",
      "h.json", "device.attentionKernels.k");

  // Only a fused kernel has a name.
  ModelDesc unfused = ModelDesc::gpt2Small();
  unfused.attentionKernel = "flash-attn-triton";
  EXPECT_FALSE(unfused.validate().isOk());
  Json j = modelToJson(unfused);
  EXPECT_FALSE(modelFromJson(j).isOk());
  // A name is a non-empty string.
  Json numbered = modelToJson(back.value());
  numbered.set("attentionKernel", 3.0);
  auto notName = modelFromJson(numbered);
  ASSERT_FALSE(notName.isOk());
  EXPECT_NE(notName.status().message().find("model.attentionKernel"),
            std::string::npos)
      << notName.status().message();
  numbered.set("attentionKernel", "");
  EXPECT_FALSE(modelFromJson(numbered).isOk());
}

} // namespace
} // namespace dtcc::planner
