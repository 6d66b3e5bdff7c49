//===- MemoryModelTest.cpp - memory model against published tables --------===//
//
// The seeds' table (GPT-2 124M, Llama 3 8B/70B/405B under 12 B/param), the
// ZeRO paper's Table 1 (7.5B, 128B, 1T x DP 1..1024 x three stages) and
// Korthikanti et al.'s activation formulas, each within 1% (or the table's
// own rounding).
//
//===----------------------------------------------------------------------===//

#include "planner/MemoryModel.h"
#include "planner/Model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace dtcc::planner {
namespace {

/// Within 1% of the published value, or within half a unit of its last
/// printed digit (the table rounds 0.1172 to "0.12").
void expectMatchesTable(double predicted, const std::string &published,
                        const std::string &what) {
  double value = std::strtod(published.c_str(), nullptr);
  size_t dot = published.find('.');
  int decimals = dot == std::string::npos ? 0 : int(published.size() - dot - 1);
  double rounding = 0.5 * std::pow(10.0, -decimals);
  double tolerance = std::max(0.01 * value, rounding);
  EXPECT_NEAR(predicted, value, tolerance)
      << what << ": predicted " << predicted << ", published " << published;
}

//===----------------------------------------------------------------------===//
// The seeds' table: fp16 weights and grads, fp32 Adam m and v, no master.
//===----------------------------------------------------------------------===//

struct SeedRow {
  const char *name;
  ModelDesc model;
  double nominal; ///< the table's parameter count
  const char *weights, *adam, *grads, *total; ///< GB
};

TEST(MemoryModel, SeedsTableModelState) {
  const SeedRow rows[] = {
      {"GPT-2 Small", ModelDesc::gpt2Small(), 124e6, "0.248", "0.992",
       "0.248", "1.5"},
      {"Llama 3 8B", ModelDesc::llama3_8b(), 8e9, "16", "64", "16", "96"},
      {"Llama 3 70B", ModelDesc::llama3_70b(), 70e9, "140", "560", "140",
       "840"},
      {"Llama 3 405B", ModelDesc::llama3_405b(), 405e9, "810", "3240", "810",
       "4860"},
  };
  DTypePolicy policy = DTypePolicy::halfWithoutMaster(DType::kFp16);
  EXPECT_EQ(policy.bytesPerParam(), 12);
  std::printf("\nSeeds' table (GB, 12 B/param; ours counts every tensor of "
              "the model)\n%-13s %10s %9s %9s %9s %9s\n", "model", "params",
              "weights", "Adam", "grads", "total");
  for (const SeedRow &row : rows) {
    // The model's own parameter count agrees with the nominal one...
    double params = double(row.model.totalParams());
    EXPECT_NEAR(params / row.nominal, 1.0, 0.01) << row.name;
    // ... and the accounting reproduces the table, for both counts.
    for (double p : {row.nominal, params}) {
      MemoryBreakdown m = MemoryModel::modelState(p, policy, 0, 1);
      expectMatchesTable(m.parameters / 1e9, row.weights,
                         std::string(row.name) + " weights");
      expectMatchesTable(m.optimizerState / 1e9, row.adam,
                         std::string(row.name) + " Adam");
      expectMatchesTable(m.gradients / 1e9, row.grads,
                         std::string(row.name) + " gradients");
      expectMatchesTable(m.modelState() / 1e9, row.total,
                         std::string(row.name) + " total");
    }
    MemoryBreakdown m = MemoryModel::modelState(params, policy, 0, 1);
    std::printf("%-13s %10.4g %9.3f %9.3f %9.3f %9.3f   (published %s %s "
                "%s %s)\n",
                row.name, params, m.parameters / 1e9, m.optimizerState / 1e9,
                m.gradients / 1e9, m.modelState() / 1e9, row.weights,
                row.adam, row.grads, row.total);
  }
}

TEST(MemoryModel, SeedsTableShardingAndPrecision) {
  DTypePolicy policy = DTypePolicy::halfWithoutMaster(DType::kFp16);
  // 70B fully sharded over 8 GPUs: 17.5 + 70 + 17.5 = 105 GB each.
  MemoryBreakdown eight = MemoryModel::modelState(70e9, policy, 3, 8);
  EXPECT_NEAR(eight.parameters / 1e9, 17.5, 1e-9);
  EXPECT_NEAR(eight.optimizerState / 1e9, 70, 1e-9);
  EXPECT_NEAR(eight.gradients / 1e9, 17.5, 1e-9);
  EXPECT_NEAR(eight.modelState() / 1e9, 105, 1e-9);
  EXPECT_GT(eight.modelState(), 80e9);
  EXPECT_LT(MemoryModel::modelState(70e9, policy, 3, 16).modelState(), 80e9);
  // 7B: fp32 everywhere 112 GB; 16-bit weights/grads with fp32 m, v 84 GB;
  // with an fp32 master copy (the usual mixed precision) 112 GB again.
  EXPECT_NEAR(MemoryModel::modelState(7e9, DTypePolicy::fp32(), 0, 1)
                      .modelState() /
                  1e9,
              112, 1e-9);
  EXPECT_NEAR(MemoryModel::modelState(7e9, policy, 0, 1).modelState() / 1e9,
              84, 1e-9);
  EXPECT_NEAR(MemoryModel::modelState(7e9, DTypePolicy::mixed(DType::kBf16),
                                      0, 1)
                      .modelState() /
                  1e9,
              112, 1e-9);
  EXPECT_EQ(DTypePolicy::mixed(DType::kBf16).optimizerBytes(), 12); // ZeRO K
  EXPECT_TRUE(DTypePolicy::mixed(DType::kFp16).lossScaling);
  EXPECT_FALSE(DTypePolicy::mixed(DType::kBf16).lossScaling);
}

//===----------------------------------------------------------------------===//
// ZeRO Table 1: mixed precision Adam (K = 12), GB per device.
//===----------------------------------------------------------------------===//

TEST(MemoryModel, ZeroPaperTable1) {
  const int64_t dps[] = {1, 4, 16, 64, 256, 1024};
  const double sizes[] = {7.5e9, 128e9, 1e12};
  // [dp][model * 3 + stage - 1]
  const char *table[6][9] = {
      {"120", "120", "120", "2048", "2048", "2048", "16000", "16000",
       "16000"},
      {"52.5", "41.3", "30", "896", "704", "512", "7000", "5500", "4000"},
      {"35.6", "21.6", "7.5", "608", "368", "128", "4750", "2875", "1000"},
      {"31.4", "16.6", "1.88", "536", "284", "32", "4187", "2218", "250"},
      {"30.4", "15.4", "0.47", "518", "263", "8", "4046", "2054", "62.5"},
      {"30.1", "15.1", "0.12", "513", "257", "2", "4011", "2013", "15.6"},
  };
  DTypePolicy policy = DTypePolicy::mixed(DType::kFp16);
  std::printf("\nZeRO Table 1, predicted GB per device (os / os+g / os+g+p)"
              "\n%6s %26s %26s %26s\n", "DP", "7.5B", "128B", "1T");
  for (int i = 0; i < 6; ++i) {
    std::printf("%6lld", (long long)dps[i]);
    for (int model = 0; model < 3; ++model) {
      std::string cell;
      for (int stage = 1; stage <= 3; ++stage) {
        double gb = MemoryModel::modelState(sizes[model], policy, stage,
                                            dps[i])
                        .modelState() /
                    1e9;
        expectMatchesTable(gb, table[i][model * 3 + stage - 1],
                           "ZeRO Table 1, " + std::to_string(sizes[model]) +
                               " params, DP " + std::to_string(dps[i]) +
                               ", stage " + std::to_string(stage));
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%s%.6g", stage > 1 ? " / " : "", gb);
        cell += buf;
      }
      std::printf(" %26s", cell.c_str());
    }
    std::printf("\n");
  }
}

TEST(MemoryModel, ZeroStagesInsideThePlanModel) {
  // The per-stage model uses the same accounting: a one-stage, one-TP plan
  // of Llama 3 8B holds exactly the ZeRO formula's model state.
  ModelDesc model = ModelDesc::llama3_8b();
  ClusterSpec cluster = clusterPreset("dgx-h100").value();
  cluster.nodes = 8;
  MemoryModel memory(model, cluster);
  double params = double(model.totalParams());
  for (int stage = 0; stage <= 3; ++stage) {
    Plan plan;
    plan.dp = 64;
    plan.zeroStage = stage;
    MemoryBreakdown m = memory.stage(plan, 0);
    MemoryBreakdown expected =
        MemoryModel::modelState(params, plan.dtype, stage, 64);
    EXPECT_NEAR(m.modelState() / expected.modelState(), 1.0, 1e-9) << stage;
  }
}

//===----------------------------------------------------------------------===//
// Activations, offload, pipeline in-flight counts.
//===----------------------------------------------------------------------===//

TEST(MemoryModel, ActivationsFollowKorthikanti) {
  // Korthikanti et al. 2022, 16-bit activations of one GPT layer:
  // s b h (34 + 5 a s / h) without recomputation, 34 s b h with selective
  // recomputation, 2 s b h with full; tensor parallelism divides all but
  // 10 s b h, and sequence parallelism that too.
  ModelDesc m = ModelDesc::megatronGpt(12288, 80, 96);
  double s = double(m.seq), h = double(m.hidden), a = double(m.heads);
  for (int64_t b : {1, 4})
    for (int64_t t : {1, 8}) {
      double sbh = s * double(b) * h;
      double none = sbh * (10 + 24.0 / t + 5 * a * s / (h * t));
      double selective = sbh * (10 + 24.0 / t);
      EXPECT_NEAR(m.activationBytesPerLayer(b, t, false, Recompute::kNone, 2),
                  none, none * 1e-12);
      EXPECT_NEAR(
          m.activationBytesPerLayer(b, t, false, Recompute::kSelective, 2),
          selective, selective * 1e-12);
      EXPECT_NEAR(m.activationBytesPerLayer(b, t, true, Recompute::kSelective,
                                            2),
                  sbh * 34 / t, sbh * 34 / t * 1e-12);
      EXPECT_NEAR(m.activationBytesPerLayer(b, t, false, Recompute::kFull, 2),
                  2 * sbh, 1e-3);
    }
}

TEST(MemoryModel, OffloadMovesStateToTheHost) {
  DTypePolicy policy = DTypePolicy::mixed(DType::kBf16);
  MemoryBreakdown device = MemoryModel::modelState(70e9, policy, 2, 4);
  MemoryBreakdown off =
      MemoryModel::modelState(70e9, policy, 2, 4, Offload::kOptimizer);
  // Adam's moments go to the host; the fp32 master weights, which the
  // forward pass reads, stay on the device, sharded over dp as the state
  // is (dtcc compile --offload optimizer).
  EXPECT_NEAR(off.optimizerState, 4 * 70e9 / 4, 1);
  EXPECT_NEAR(off.hostOptimizerState, 8 * 70e9 / 4, 1);
  EXPECT_NEAR(off.optimizerState + off.hostOptimizerState,
              device.optimizerState, 1);
  // The device keeps its gradients until the step (the global norm is
  // computed there) and the host gets a copy.
  EXPECT_EQ(off.gradients, device.gradients);
  EXPECT_EQ(off.parameters, device.parameters);
  EXPECT_EQ(off.hostGradients, device.gradients);
  MemoryBreakdown all = MemoryModel::modelState(70e9, policy, 3, 4,
                                                Offload::kOptimizerAndParams);
  EXPECT_EQ(all.modelState(), 0);
  EXPECT_NEAR(all.hostTotal(), 16 * 70e9 / 4, 1);
}

TEST(MemoryModel, ChunksInFlightBySchedule) {
  Plan plan;
  plan.pp = 4;
  plan.microBatches = 16;
  plan.schedule = Schedule::kGPipe;
  EXPECT_EQ(chunksInFlight(plan, 0), 16);
  plan.schedule = Schedule::k1F1B;
  EXPECT_EQ(chunksInFlight(plan, 0), 4);
  EXPECT_EQ(chunksInFlight(plan, 3), 1);
  plan.schedule = Schedule::kInterleaved;
  plan.virtualStages = 2;
  // Megatron's warm-up 2(p - 1) + (v - 1) p = 10 chunks, plus one.
  EXPECT_EQ(chunksInFlight(plan, 0), 11);
  plan.pp = 1;
  EXPECT_EQ(chunksInFlight(plan, 0), 1);
}

TEST(MemoryModel, PeakIsTheFullestStageAndBoundIsBelowIt) {
  ModelDesc model = ModelDesc::llama3_70b();
  ClusterSpec cluster = clusterPreset("dgx-h100").value();
  cluster.nodes = 8;
  MemoryModel memory(model, cluster);
  Plan plan;
  plan.dp = 2;
  plan.pp = 4;
  plan.tp = 8;
  plan.zeroStage = 1;
  plan.microBatches = 32;
  plan.recompute = Recompute::kFull;
  MemoryBreakdown peak = memory.peak(plan);
  for (int64_t s = 0; s < plan.pp; ++s)
    EXPECT_LE(memory.stage(plan, s).total(), peak.total());
  // 1F1B: the first stage keeps p micro-batches, so it is the fullest.
  EXPECT_EQ(peak.stage, 0);
  EXPECT_LE(memory.lowerBound(plan), peak.total());
  // Every layer's parameters live on exactly one stage.
  double layers = 0;
  for (int64_t s = 0; s < plan.pp; ++s)
    layers += double(stageLayers(model, plan.pp, s));
  EXPECT_EQ(layers, double(model.layers));
}

TEST(MemoryModel, RecomputeLayersPerStage) {
  // Llama 3 70B on pp=4 (20 layers a stage), 1F1B: recomputing the first K
  // layers of each stage keeps K layer inputs and 20 - K whole layers per
  // micro-batch in flight; K = 0 and K >= 20 are full recomputation.
  ModelDesc model = ModelDesc::llama3_70b();
  ClusterSpec cluster = clusterPreset("dgx-h100").value();
  cluster.nodes = 8;
  MemoryModel memory(model, cluster);
  Plan plan;
  plan.dp = 2;
  plan.pp = 4;
  plan.tp = 8;
  plan.zeroStage = 1;
  plan.microBatches = 32;
  const int64_t stage = 1, layers = stageLayers(model, plan.pp, stage);
  ASSERT_EQ(layers, 20);
  plan.recompute = Recompute::kNone;
  const MemoryBreakdown none = memory.stage(plan, stage);
  plan.recompute = Recompute::kFull;
  const MemoryBreakdown full = memory.stage(plan, stage);
  const double chunks = double(chunksInFlight(plan, stage));
  const double keptLayer = none.activations / chunks / double(layers);
  const double inputOnly = full.activations / chunks / double(layers);
  for (int64_t k : {1, 5, 19}) {
    plan.recomputeLayers = k;
    MemoryBreakdown m = memory.stage(plan, stage);
    double want = chunks * (double(k) * inputOnly + double(layers - k) * keptLayer);
    EXPECT_NEAR(m.activations, want, want * 1e-12) << "K = " << k;
    EXPECT_GT(m.activations, full.activations);
    EXPECT_LT(m.activations, none.activations);
  }
  plan.recomputeLayers = 20;
  EXPECT_NEAR(memory.stage(plan, stage).activations, full.activations,
              full.activations * 1e-12);
  plan.recomputeLayers = 50;
  EXPECT_NEAR(memory.stage(plan, stage).activations, full.activations,
              full.activations * 1e-12);
  // K > 0 without full recomputation is no plan.
  plan.recompute = Recompute::kSelective;
  plan.recomputeLayers = 2;
  EXPECT_TRUE(planProblem(plan, model, cluster).has_value());
}

TEST(MemoryModel, ZeroNeedsDpToDivideTheHiddenSize) {
  // Megatron-LM's 310B (hidden 16384): the compiler splits its parameters
  // over dp=64 but not over dp=60, where ZeRO would leave them whole.
  ModelDesc model = ModelDesc::megatronGpt(16384, 96, 128);
  Plan plan;
  plan.dp = 60;
  plan.tp = 4;
  plan.pp = 8;
  plan.zeroStage = 1;
  std::optional<std::string> why = zeroSplitProblem(plan, model);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("dp=60"), std::string::npos) << *why;
  plan.zeroStage = 0;
  EXPECT_FALSE(zeroSplitProblem(plan, model).has_value());
  plan.zeroStage = 3;
  plan.dp = 64;
  EXPECT_FALSE(zeroSplitProblem(plan, model).has_value());
}

TEST(MemoryModel, PositionTableLongerThanTheSequence) {
  // HuggingFace's GPT-2 small has 124,439,808 parameters at any sequence
  // length: its position table keeps n_positions = 1024 rows.
  ModelDesc m = ModelDesc::gpt2Small();
  EXPECT_EQ(m.totalParams(), 124439808);
  m.seq = 512;
  EXPECT_EQ(m.totalParams(), 124439808 - 512 * 768);
  m.positionRows = 1024;
  EXPECT_EQ(m.totalParams(), 124439808);
  EXPECT_DOUBLE_EQ(embeddingParamsPerRank(m, 1), double(m.embeddingParams()));
  // The plan file keeps it; a model without it reads back without.
  auto back = modelFromJson(modelToJson(m));
  ASSERT_TRUE(back.isOk());
  EXPECT_EQ(back->positionRows, 1024);
  EXPECT_EQ(back->totalParams(), 124439808);
  m.positionRows = 0;
  EXPECT_EQ(modelToJson(m).find("positionRows"), nullptr);
}

TEST(MemoryModel, ParametersOutsideTheLayersGoWithTheirSide) {
  // BERT-base (HuggingFace's BertForMaskedLM, 512 positions, tied head):
  // token types [2, 768] and the embedding LayerNorm before the layers;
  // the masked-LM transform (768 x 768 + bias, then a LayerNorm, which the
  // formulas count as the final norm) and the logits' bias (30522) after
  // them. 109,514,298 parameters in all.
  ModelDesc m = ModelDesc::gpt2Small();
  m.vocab = 30522;
  m.seq = 512;
  m.tiedEmbeddings = true;
  m.embeddingExtraParams = 2 * 768 + 2 * 768;
  m.headExtraParams = 768 * 768 + 768 + 30522;
  EXPECT_EQ(m.totalParams(), 109514298);
  // Held whole by every tp rank of the first and the last stage.
  EXPECT_DOUBLE_EQ(embeddingParamsPerRank(m, 2) - embeddingParamsPerRank(m, 1),
                   double(m.paddedVocab(2)) * 768 / 2 -
                       double(m.paddedVocab(1)) * 768);
  EXPECT_DOUBLE_EQ(headParamsPerRank(m, 4), double(m.headParams()));
  auto back = modelFromJson(modelToJson(m));
  ASSERT_TRUE(back.isOk());
  EXPECT_EQ(back->embeddingExtraParams, 3072);
  EXPECT_EQ(back->headExtraParams, m.headExtraParams);
  EXPECT_EQ(back->totalParams(), 109514298);
  m.embeddingExtraParams = m.headExtraParams = 0;
  EXPECT_EQ(modelToJson(m).find("embeddingExtraParams"), nullptr);
  EXPECT_EQ(modelToJson(m).find("layerVectorParams"), nullptr);
  // GPT-J's layer: one LayerNorm, the MLP's two biases, no attention
  // biases: its vectors replace the formulas' two norms and six biases,
  // whole on every tp rank.
  const int64_t formulaLayer = m.layerParams();
  m.layerVectorParams = 2 * 768 + 3072 + 768;
  // The formulas': two LayerNorms (4 x 768) and qkv, projection, fc1 and
  // fc2 biases (2304 + 768 + 3072 + 768 = 9 x 768).
  EXPECT_EQ(m.layerParams(),
            formulaLayer - (4 * 768 + 9 * 768) + m.layerVectorParams);
  EXPECT_DOUBLE_EQ(layerParamsPerRank(m, 4),
                   double(m.layerMatrixParams()) / 4 + m.layerVectorParams);
  auto parallel = modelFromJson(modelToJson(m));
  ASSERT_TRUE(parallel.isOk());
  EXPECT_EQ(parallel->layerVectorParams, m.layerVectorParams);
  EXPECT_EQ(modelToJson(m).find("headExtraParams"), nullptr);
}

} // namespace
} // namespace dtcc::planner
