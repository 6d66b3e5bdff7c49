//===- SequenceParallelMemoryTest.cpp - SP's activations, model vs program ===//
//
// Sequence parallelism's point is activation memory: the tensors outside the
// tensor-parallel regions (the norms' inputs, the column-parallel matmuls'
// inputs, dropout masks) are kept for the backward pass on 1/tp of the
// sequence instead of whole on every tp rank (Korthikanti et al. 2022:
// 10sbh + 24sbh/t -> 34sbh/t per layer). The planner's memory model
// (planner::MemoryModel) predicts that saving; this test compiles a zoo GPT
// with tp=2 with and without sequence parallelism and measures it in the
// compiled programs' static memory plans.
//
// Compared: the bytes of workspace tensors made before the loss and still
// read after it (kept for the backward pass), per rank, without minus with
// sequence parallelism, against the MemoryModel's activations for the same
// two plans, whose difference is (4L + 1) * T * h * a * (1 - 1/t) for L
// layers, T tokens per rank, width h, a = 4 bytes (per layer the two
// norms' inputs and the two column-parallel matmuls' inputs, and the final
// norm's input; no dropout). The program also keeps, on 1/t of the
// sequence, two things the model does not count: the final norm's output
// (the head's input, T * h * a) and each norm's per-token mean and rstd
// (2 * T * 4 bytes for each of the 2L + 1 norms). The saving must be
// exactly the model's plus those (here 278528 + 16384 + 4608 = 299520 B,
// 7.5% above the model's), and within 10% of the model's. Keeping the
// gathered norm outputs whole (no re-gather in the backward pass) would
// save 2L + 1 units fewer, about half.
//
//===----------------------------------------------------------------------===//

#include "compiler/DescribeModel.h"
#include "compiler/Driver.h"
#include "compiler/PlanByCompiling.h"
#include "frontends/onnx/OnnxImporter.h"
#include "frontends/zoo/Zoo.h"
#include "planner/MemoryModel.h"
#include "runtime/base/DType.h"

#include "mlir/IR/MLIRContext.h"
#include "tests/unit/compiler/CompilerTestContext.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <vector>

using namespace dtcc;

namespace {

/// Bytes of @train_step's workspace that hold a value written up to the
/// loss's instruction and read after it: what the forward pass keeps for
/// the backward pass. A region is identified by its offset and size (a
/// reshape is a view of its operand: the same region); it holds one value
/// from a write to the next, so a later tensor planned into the same place
/// is not counted. Overlapping regions count once.
int64_t keptForBackward(const runtime::format::Program &program) {
  for (const auto &fn : program.functions()) {
    if (fn.name() != "train_step")
      continue;
    int lossAt = -1;
    for (const auto &out : fn.outputs())
      if (out.name() == "loss")
        for (int i = 0; i < fn.instructions_size() && lossAt < 0; ++i)
          for (int id : fn.instructions(i).outputs())
            if (id == out.buffer())
              lossAt = i;
    EXPECT_GE(lossAt, 0) << "no instruction writes the loss";
    // (offset, bytes) -> (instruction, is a write), in program order.
    std::map<std::pair<int64_t, int64_t>, std::vector<std::pair<int, bool>>> uses;
    auto touch = [&](int id, int at, bool write) {
      const auto &b = program.buffers(id);
      if (b.arena() != runtime::format::ARENA_WORKSPACE)
        return;
      int64_t bytes = runtime::dtypeSize(static_cast<runtime::DType>(b.dtype()));
      for (int64_t d : b.shape())
        bytes *= d;
      uses[{b.offset(), bytes}].push_back({at, write});
    };
    for (const auto &in : fn.inputs())
      touch(in.buffer(), -1, true);
    for (int i = 0; i < fn.instructions_size(); ++i) {
      for (int id : fn.instructions(i).inputs())
        touch(id, i, false);
      for (int id : fn.instructions(i).outputs())
        touch(id, i, true);
    }
    std::vector<std::pair<int64_t, int64_t>> kept;
    for (auto &[region, list] : uses) {
      int lastWrite = INT32_MIN;
      for (auto [at, write] : list) {
        if (!write && at > lossAt && lastWrite != INT32_MIN &&
            lastWrite <= lossAt) {
          kept.push_back({region.first, region.first + region.second});
          break;
        }
        if (write)
          lastWrite = at;
      }
    }
    std::sort(kept.begin(), kept.end());
    int64_t bytes = 0, end = INT64_MIN;
    for (auto [lo, hi] : kept) {
      lo = std::max(lo, end);
      if (hi > lo)
        bytes += hi - lo;
      end = std::max(end, hi);
    }
    return bytes;
  }
  ADD_FAILURE() << "no @train_step";
  return 0;
}

TEST(SequenceParallelMemory, SavingMatchesTheMemoryModel) {
  zoo::ZooOptions o;
  o.family = zoo::Family::Gpt;
  o.layers = 4;
  o.hidden = 64;
  o.heads = 4;
  o.vocab = 64;
  o.seq = 32;
  o.batch = 4;
  ASSERT_EQ(zoo::validate(o), "");
  std::string bytes;
  ASSERT_TRUE(zoo::buildModel(o).SerializeToString(&bytes));
  mlir::MLIRContext &ctx = test::compilerContext();
  auto module = onnx_frontend::importOnnxBytes(bytes, "gpt.onnx", "", &ctx,
                                               onnx_frontend::ImportOptions());
  ASSERT_TRUE(mlir::succeeded(module));
  DescribedModel described = describeModel(**module, "gpt.onnx");
  auto cluster = planner::clusterPreset("cpu-local");
  ASSERT_TRUE(cluster.isOk());

  const int64_t tp = 2;
  int64_t kept[2];
  double modelled[2];
  for (bool sp : {false, true}) {
    CompileOptions options;
    options.compileTo = Phase::Program;
    options.train.enabled = true;
    options.train.plan.mesh = runtime::MeshShape::parse("tp=2").value();
    options.train.plan.sequenceParallel = sp;
    auto priced = compileAndPrice(**module, options, cluster.value());
    ASSERT_TRUE(priced.isOk()) << priced.status().message();
    kept[sp] = keptForBackward(priced.value().program);

    planner::Plan plan;
    plan.tp = tp;
    plan.microBatchSize = o.batch;
    plan.sequenceParallel = sp;
    plan.dtype = planner::DTypePolicy::fp32(); // the CPU backend's
    planner::MemoryModel memory(described.model, cluster.value());
    modelled[sp] = memory.stage(plan, 0).activations;
  }
  double tokens = double(o.batch * o.seq), h = double(o.hidden);
  double unit = tokens * h * 4 * (1 - 1.0 / double(tp));
  // The model's saving is the formula of the header.
  EXPECT_DOUBLE_EQ(modelled[0] - modelled[1], double(4 * o.layers + 1) * unit);
  double saved = double(kept[0] - kept[1]);
  double model = modelled[0] - modelled[1];
  double unitFinalNorm = tokens * h * 4 * (1 - 1.0 / double(tp));
  double statistics = double(2 * o.layers + 1) * 2 * tokens * 4 *
                      (1 - 1.0 / double(tp));
  EXPECT_DOUBLE_EQ(double(kept[0] - kept[1]),
                   modelled[0] - modelled[1] + unitFinalNorm + statistics);
  std::cout << "kept for the backward pass per rank: " << kept[0]
            << " B (tp=2), " << kept[1] << " B (tp=2, sequence parallel): "
            << saved << " B saved; memory model: " << modelled[0] << " B, "
            << modelled[1] << " B: " << model << " B saved\n";
  EXPECT_NEAR(saved / model, 1.0, 0.10)
      << "kept for the backward pass: " << kept[0] << " B with tp=2, "
      << kept[1] << " B with sequence parallelism; the memory model saves "
      << model << " B";
  // And less is kept at all.
  EXPECT_LT(kept[1], kept[0]);
}

} // namespace
