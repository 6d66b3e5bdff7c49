//===- TrainerTest.cpp - the training loop and its command line -----------===//
//
// Runs the hand-built training programs of TrainerTestUtils.h through the
// trainer and compares every step with a reference written from the ABI:
// token data, explicit batches, micro-batches, resume, output dumps, errors.
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/Trainer.h"
#include "runtime/exec/Checkpoint.h"
#include "runtime/io/CheckpointStore.h"
#include "runtime/exec/Runner.h"
#include "runtime/io/TensorFile.h"
#include "tests/unit/trainer/TrainerTestUtils.h"

#include <gtest/gtest.h>

using namespace dtcc::runtime;
using namespace dtcc::runtime::testing;

namespace {

/// One step of a reference run.
struct RefStep {
  double loss, lr, gradNorm;
};

/// The batches of a run: per step, per row, ids and labels.
using Batches = std::vector<
    std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>>;

Batches sampleBatches(const std::vector<uint32_t> &tokens, uint64_t seed,
                      int64_t steps, int64_t rowsPerStep) {
  Batches batches(steps);
  for (int64_t step = 0; step < steps; ++step)
    for (int64_t r = 0; r < rowsPerStep; ++r) {
      std::vector<int64_t> ids, labels;
      referenceSample(tokens, seed, step * rowsPerStep + r, kSeq, ids, labels);
      batches[step].push_back({ids, labels});
    }
  return batches;
}

/// singleMicroBatchProgram(rows) in plain C++, with --steps `total`.
std::vector<RefStep> referenceSingle(const Batches &batches, int64_t rows,
                                     int64_t total) {
  std::vector<float> w = initialW(rows);
  std::vector<RefStep> out;
  for (size_t step = 0; step < batches.size(); ++step) {
    double loss = 0, norm = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < kSeq; ++j) {
        loss += double(float(batches[step][r].first[j]) * w[r * kSeq + j]);
        norm += double(batches[step][r].second[j]);
      }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < kSeq; ++j)
        w[r * kSeq + j] -= float(batches[step][r].second[j]) * kRate;
    out.push_back({loss, double(total - int64_t(step)), norm});
  }
  return out;
}

/// twoMicroBatchProgram() in plain C++: rows are micro-batches.
std::vector<RefStep> referenceTwoMicro(const Batches &batches, int64_t total) {
  std::vector<float> w = initialW(1);
  std::vector<RefStep> out;
  for (size_t step = 0; step < batches.size(); ++step) {
    std::vector<float> acc(kSeq, 0.0f);
    double loss = 0;
    for (int m = 0; m < 2; ++m)
      for (int64_t j = 0; j < kSeq; ++j) {
        loss += double(float(batches[step][m].first[j]) * w[j]);
        acc[j] += float(batches[step][m].second[j]);
      }
    double norm = 0;
    for (int64_t j = 0; j < kSeq; ++j) {
      norm += acc[j];
      w[j] -= acc[j] * kRate;
    }
    out.push_back({loss / 2, double(total - int64_t(step)), norm});
  }
  return out;
}

void expectMatches(const std::vector<StepRecord> &got,
                   const std::vector<RefStep> &want, size_t from = 0) {
  ASSERT_EQ(got.size() + from, want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const RefStep &r = want[from + i];
    EXPECT_EQ(got[i].step, int64_t(from + i + 1));
    EXPECT_NEAR(got[i].loss, r.loss, 1e-5 * std::abs(r.loss) + 1e-6)
        << "step " << got[i].step;
    ASSERT_TRUE(got[i].lr && got[i].gradNorm);
    EXPECT_EQ(*got[i].lr, r.lr) << "step " << got[i].step;
    EXPECT_EQ(*got[i].gradNorm, r.gradNorm) << "step " << got[i].step;
  }
}

int64_t variableI64(const Loaded &l, const std::string &name) {
  const TensorView *v = l.exe->variable(name);
  EXPECT_NE(v, nullptr) << name;
  return v ? *v->as<int64_t>() : -1;
}

StatusOr<std::vector<StepRecord>> train(Loaded &l, TrainerOptions options) {
  options.log = nullptr;
  DTCC_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer,
                        Trainer::create(l.builder.program(), *l.exe, options));
  DTCC_RETURN_IF_ERROR(trainer->run());
  return trainer->history();
}

TrainerOptions tokenOptions(const std::string &data, int64_t steps,
                            uint64_t seed) {
  TrainerOptions o;
  o.dataPath = data;
  o.steps = steps;
  o.seed = seed;
  return o;
}

/// Writes `batches` (rows of [1, kSeq] i64) as a --batches folder, `rows`
/// rows per step file.
void writeBatches(const std::string &dir, const Batches &batches) {
  std::filesystem::create_directories(dir);
  for (size_t step = 0; step < batches.size(); ++step) {
    char name[32];
    std::snprintf(name, sizeof(name), "%04zu", step);
    std::string folder = dir + "/" + name;
    std::filesystem::create_directories(folder);
    int64_t rows = batches[step].size();
    HostTensor ids(DType::kI64, {rows, kSeq}),
        labels(DType::kI64, {rows, kSeq});
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < kSeq; ++j) {
        ids.data<int64_t>()[r * kSeq + j] = batches[step][r].first[j];
        labels.data<int64_t>()[r * kSeq + j] = batches[step][r].second[j];
      }
    ASSERT_TRUE(writeTensorFile(folder + "/ids.pb", "ids", ids).isOk());
    ASSERT_TRUE(
        writeTensorFile(folder + "/labels.pb", "labels", labels).isOk());
  }
}

class TrainerTest : public ::testing::Test {
protected:
  void SetUp() override {
    tokens = makeTokens(3000, 100);
    writeTokens(dir / "tokens.bin", tokens, 2);
  }
  TempDir dir;
  std::vector<uint32_t> tokens;
};

TEST_F(TrainerTest, TrainsOnTokenDataLikeTheReference) {
  for (DType idsType : {DType::kI64, DType::kI32}) {
    Loaded l(singleMicroBatchProgram(2, idsType));
    auto history = train(l, tokenOptions(dir / "tokens.bin", 7, 11));
    ASSERT_TRUE(history.isOk()) << history.status().toString();
    expectMatches(history.value(),
                  referenceSingle(sampleBatches(tokens, 11, 7, 2), 2, 7));
    EXPECT_EQ(variableI64(l, "__step"), 7);
    EXPECT_EQ(variableI64(l, "__total_steps"), 7);
  }
}

TEST_F(TrainerTest, AcceptsUint32Tokens) {
  writeTokens(dir / "tokens32.bin", tokens, 4);
  Loaded l(singleMicroBatchProgram(2));
  TrainerOptions o = tokenOptions(dir / "tokens32.bin", 3, 0);
  o.dataDType = "uint32";
  auto history = train(l, o);
  ASSERT_TRUE(history.isOk()) << history.status().toString();
  expectMatches(history.value(),
                referenceSingle(sampleBatches(tokens, 0, 3, 2), 2, 3));
}

TEST_F(TrainerTest, MicroBatchesCallTrainStepThenApplyStep) {
  Loaded l(twoMicroBatchProgram());
  auto history = train(l, tokenOptions(dir / "tokens.bin", 5, 3));
  ASSERT_TRUE(history.isOk()) << history.status().toString();
  // k = (step * M + micro) * b + row with b = 1: two rows per step.
  expectMatches(history.value(),
                referenceTwoMicro(sampleBatches(tokens, 3, 5, 2), 5));
  EXPECT_EQ(variableI64(l, "calls"), 10);
  EXPECT_EQ(variableI64(l, "applies"), 5);
  EXPECT_EQ(variableI64(l, "__step"), 5);
}

TEST_F(TrainerTest, ResumedRunRepeatsTheUninterruptedOne) {
  for (bool micro : {false, true}) {
    auto build = [&] {
      return micro ? twoMicroBatchProgram() : singleMicroBatchProgram(2);
    };
    Loaded whole(build());
    auto full = train(whole, tokenOptions(dir / "tokens.bin", 8, 21));
    ASSERT_TRUE(full.isOk()) << full.status().toString();

    // The first run saves every 3 steps and stops at step 5.
    Loaded first(build());
    TrainerOptions o = tokenOptions(dir / "tokens.bin", 5, 21);
    o.saveDir = dir / "ckpt";
    o.saveEvery = 3;
    auto part1 = train(first, o);
    ASSERT_TRUE(part1.isOk()) << part1.status().toString();
    // The save at step 3, then the one at the end.
    auto manifest = readCheckpointManifest(dir / "ckpt");
    ASSERT_TRUE(manifest.isOk());
    EXPECT_EQ(manifest.value().step(), 5);
    EXPECT_EQ(manifest.value().seed(), 21u);
    EXPECT_EQ(manifest.value().tokens_consumed(), 5 * 2 * kSeq);

    // The second resumes (seed from the checkpoint) and runs to step 8.
    Loaded second(build());
    TrainerOptions r;
    r.dataPath = dir / "tokens.bin";
    r.steps = 8;
    r.resumeDir = dir / "ckpt";
    auto part2 = train(second, r);
    ASSERT_TRUE(part2.isOk()) << part2.status().toString();
    ASSERT_EQ(part1.value().size(), 5u);
    ASSERT_EQ(part2.value().size(), 3u);
    for (size_t i = 0; i < 8; ++i) {
      const StepRecord &got = i < 5 ? part1.value()[i] : part2.value()[i - 5];
      EXPECT_EQ(got.step, full.value()[i].step);
      EXPECT_EQ(got.loss, full.value()[i].loss) << "step " << i + 1;
      // --steps differs before the resume, so the schedule does too.
      if (i >= 5)
        EXPECT_EQ(*got.lr, *full.value()[i].lr) << "step " << i + 1;
    }
    // Every variable ends as in the uninterrupted run.
    for (size_t v = 0; v < whole.exe->variables().size(); ++v)
      EXPECT_EQ(whole.snapshot()[v], second.snapshot()[v])
          << whole.exe->variables()[v].first;
    std::filesystem::remove_all(dir / "ckpt");
  }
}

TEST_F(TrainerTest, CheckpointDirResumesFromTheNewestValidCheckpoint) {
  for (bool micro : {false, true}) {
    auto build = [&] {
      return micro ? twoMicroBatchProgram() : singleMicroBatchProgram(2);
    };
    Loaded whole(build());
    auto full = train(whole, tokenOptions(dir / "tokens.bin", 9, 4));
    ASSERT_TRUE(full.isOk()) << full.status().toString();

    // Saves at steps 3 and 6 (background) and at the stop, step 7.
    const std::string root = dir / "ckpts";
    Loaded first(build());
    TrainerOptions o = tokenOptions(dir / "tokens.bin", 9, 4);
    o.checkpointDir = root;
    o.saveEvery = 3;
    o.stopAfter = 7;
    o.keepCheckpoints = 2;
    std::vector<std::pair<std::string, int64_t>> events;
    o.progress = [&](const char *e, int64_t s) { events.push_back({e, s}); };
    auto part1 = train(first, o);
    ASSERT_TRUE(part1.isOk()) << part1.status().toString();
    auto list = listCheckpoints(root);
    ASSERT_TRUE(list.isOk());
    ASSERT_EQ(list.value().size(), 2u); // step 3 removed (keep 2)
    EXPECT_EQ(list.value()[0].step, 7);
    auto m7 = verifyCheckpoint(list.value()[0].dir);
    ASSERT_TRUE(m7.isOk()) << m7.status().toString();
    // 7 steps of 2 samples, whatever the micro-batching.
    EXPECT_EQ(m7.value().data_position(), 14);
    EXPECT_EQ(events.front(), (std::pair<std::string, int64_t>{"resume", 0}));
    int saved = 0;
    for (auto &[e, s] : events)
      saved += e == "saved";
    EXPECT_EQ(saved, 3);

    // Step 7's checkpoint is torn: the next run starts from step 6.
    std::filesystem::resize_file(list.value()[0].dir + "/0.bin", 3);
    Loaded second(build());
    TrainerOptions r;
    r.dataPath = dir / "tokens.bin";
    r.steps = 9;
    r.checkpointDir = root;
    r.saveEvery = 3;
    auto part2 = train(second, r);
    ASSERT_TRUE(part2.isOk()) << part2.status().toString();
    ASSERT_EQ(part2.value().size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(part2.value()[i].step, 7 + int64_t(i));
      EXPECT_EQ(part2.value()[i].loss, full.value()[6 + i].loss);
      EXPECT_EQ(*part2.value()[i].lr, *full.value()[6 + i].lr);
    }
    for (size_t v = 0; v < whole.exe->variables().size(); ++v)
      EXPECT_EQ(whole.snapshot()[v], second.snapshot()[v])
          << whole.exe->variables()[v].first;
    std::filesystem::remove_all(root);
  }
}

TEST_F(TrainerTest, ResumesAfterACrashMidRun) {
  // Step 5's batch is broken, so the run stops after saving at step 4.
  Batches batches = sampleBatches(tokens, 1, 6, 2);
  writeBatches(dir / "good", batches);
  std::filesystem::copy(dir / "good", dir / "bad",
                        std::filesystem::copy_options::recursive);
  HostTensor wrong(DType::kI32, {2, kSeq});
  ASSERT_TRUE(writeTensorFile(dir / "bad/0004/ids.pb", "ids", wrong).isOk());

  Loaded crashed(singleMicroBatchProgram(2));
  TrainerOptions o;
  o.batchesDir = dir / "bad";
  o.steps = 6;
  o.saveDir = dir / "ckpt";
  o.saveEvery = 2;
  o.log = nullptr;
  auto trainer = Trainer::create(crashed.builder.program(), *crashed.exe, o);
  ASSERT_TRUE(trainer.isOk()) << trainer.status().toString();
  Status s = trainer.value()->run();
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.message(),
            "'" + (dir / "bad/0004/ids.pb") +
                "' holds tensor<2x4xi32>, expected tensor<2x4xi64>");
  EXPECT_EQ(trainer.value()->history().size(), 4u);

  Loaded resumed(singleMicroBatchProgram(2));
  o.batchesDir = dir / "good";
  o.resumeDir = dir / "ckpt";
  o.saveEvery = 0;
  auto rest = train(resumed, o);
  ASSERT_TRUE(rest.isOk()) << rest.status().toString();
  ASSERT_EQ(rest.value().size(), 2u);
  std::vector<RefStep> want = referenceSingle(batches, 2, 6);
  expectMatches(trainer.value()->history(), {want.begin(), want.begin() + 4});
  expectMatches(rest.value(), want, 4);
}

TEST_F(TrainerTest, BatchesFolderFeedsEachStepAndSplitsMicroBatches) {
  Batches batches = sampleBatches(tokens, 9, 3, 2);
  writeBatches(dir / "batches", batches);
  {
    Loaded l(singleMicroBatchProgram(2));
    TrainerOptions o;
    o.batchesDir = dir / "batches";
    o.steps = 3;
    auto history = train(l, o);
    ASSERT_TRUE(history.isOk()) << history.status().toString();
    expectMatches(history.value(), referenceSingle(batches, 2, 3));
  }
  {
    // [2, 4] per step = two micro-batches of [1, 4].
    Loaded l(twoMicroBatchProgram());
    TrainerOptions o;
    o.batchesDir = dir / "batches";
    o.steps = 3;
    auto history = train(l, o);
    ASSERT_TRUE(history.isOk()) << history.status().toString();
    expectMatches(history.value(), referenceTwoMicro(batches, 3));
    EXPECT_EQ(variableI64(l, "calls"), 6);
  }
}

TEST_F(TrainerTest, BatchesFolderErrors) {
  writeBatches(dir / "batches", sampleBatches(tokens, 0, 2, 2));
  Loaded l(singleMicroBatchProgram(2));
  TrainerOptions o;
  o.batchesDir = dir / "batches";
  o.steps = 3;
  auto tooFew = train(l, o);
  ASSERT_FALSE(tooFew.isOk());
  EXPECT_EQ(tooFew.status().message(),
            "--batches '" + (dir / "batches") +
                "' has 2 step folders; --steps 3 needs one per step");

  o.steps = 2;
  std::filesystem::rename(dir / "batches/0001/ids.pb",
                          dir / "batches/0001/idz.pb");
  auto wrongName = train(l, o);
  ASSERT_FALSE(wrongName.isOk());
  EXPECT_EQ(wrongName.status().message(),
            "batch folder '" + (dir / "batches/0001") +
                "': unexpected idz.pb; missing ids.pb; 'train_step' expects "
                "one file per input:\n"
                "  ids.pb (ids: tensor<2x4xi64>)\n"
                "  labels.pb (labels: tensor<2x4xi64>)");

  std::filesystem::rename(dir / "batches/0001/idz.pb",
                          dir / "batches/0001/ids.pb");
  Loaded m2(twoMicroBatchProgram());
  HostTensor three(DType::kI64, {3, kSeq});
  ASSERT_TRUE(
      writeTensorFile(dir / "batches/0000/labels.pb", "labels", three).isOk());
  auto wrongShape = train(m2, o);
  ASSERT_FALSE(wrongShape.isOk());
  EXPECT_EQ(wrongShape.status().message(),
            "'" + (dir / "batches/0000/labels.pb") +
                "' holds tensor<3x4xi64>, expected tensor<2x4xi64> (2 "
                "micro-batches of tensor<1x4xi64> along dimension 0)");
}

TEST_F(TrainerTest, DumpsEachStepsOutputs) {
  {
    Loaded l(singleMicroBatchProgram(2));
    TrainerOptions o = tokenOptions(dir / "tokens.bin", 2, 0);
    o.dumpOutputsDir = dir / "dump1";
    auto history = train(l, o);
    ASSERT_TRUE(history.isOk()) << history.status().toString();
    for (int step : {1, 2}) {
      std::string name;
      auto loss = readTensorFile(
          dir / ("dump1/step_" + std::to_string(step) + "/loss.pb"), &name);
      ASSERT_TRUE(loss.isOk()) << loss.status().toString();
      EXPECT_EQ(name, "loss");
      EXPECT_EQ(loss.value().data<float>()[0],
                float(history.value()[step - 1].loss));
      EXPECT_TRUE(std::filesystem::exists(
          dir / ("dump1/step_" + std::to_string(step) + "/grad_norm.pb")));
    }
  }
  {
    Loaded l(twoMicroBatchProgram());
    TrainerOptions o = tokenOptions(dir / "tokens.bin", 1, 0);
    o.dumpOutputsDir = dir / "dump2";
    auto history = train(l, o);
    ASSERT_TRUE(history.isOk()) << history.status().toString();
    auto l0 = readTensorFile(dir / "dump2/step_1/micro_0/loss.pb");
    auto l1 = readTensorFile(dir / "dump2/step_1/micro_1/loss.pb");
    auto mean = readTensorFile(dir / "dump2/step_1/loss.pb");
    auto lr = readTensorFile(dir / "dump2/step_1/lr.pb");
    ASSERT_TRUE(l0.isOk() && l1.isOk() && mean.isOk() && lr.isOk());
    EXPECT_FLOAT_EQ(
        mean.value().data<float>()[0],
        (l0.value().data<float>()[0] + l1.value().data<float>()[0]) / 2);
    EXPECT_EQ(lr.value().data<float>()[0], 1.0f);
  }
}

TEST_F(TrainerTest, ReportsUsageErrors) {
  Loaded l(singleMicroBatchProgram(2));
  auto message = [&](TrainerOptions o) {
    auto r = train(l, o);
    return r.isOk() ? std::string("ok") : r.status().message();
  };
  TrainerOptions o = tokenOptions(dir / "missing.bin", 3, 0);
  EXPECT_EQ(message(o), "token file '" + (dir / "missing.bin") + "' not found");
  o = tokenOptions(dir / "tokens.bin", 3, 0);
  o.steps = -1;
  EXPECT_EQ(message(o),
            "--steps N is required (the run's total number of steps)");
  o = tokenOptions(dir / "tokens.bin", 3, 0);
  o.batchesDir = dir.path();
  EXPECT_EQ(message(o), "--data and --batches exclude each other");
  o = tokenOptions("", 3, 0);
  EXPECT_EQ(message(o), "pass --data FILE (a token file) or --batches DIR "
                        "(explicit inputs per step)");
  o = tokenOptions(dir / "tokens.bin", 3, 0);
  o.dataDType = "int8";
  EXPECT_EQ(message(o), "--data-dtype expects uint16 or uint32, got 'int8'");
  o = tokenOptions(dir / "tokens.bin", 3, 0);
  o.saveEvery = 2;
  EXPECT_EQ(message(o), "--save-every needs --save DIR or --checkpoint-dir DIR");
  o.checkpointDir = dir / "ckpts";
  o.saveDir = dir / "ckpt";
  EXPECT_EQ(message(o), "--checkpoint-dir and --save exclude each other "
                        "(--checkpoint-dir keeps one checkpoint per saved "
                        "step, --save one checkpoint)");
  o.saveDir.clear();
  o.resumeDir = dir / "ckpt";
  EXPECT_EQ(message(o), "--checkpoint-dir and --resume exclude each other (a "
                        "run with --checkpoint-dir resumes from its newest "
                        "valid checkpoint)");

  // A checkpoint of another model.
  Loaded other(twoMicroBatchProgram());
  ASSERT_TRUE(saveCheckpoint(*other.exe, dir / "other", {}).isOk());
  o = tokenOptions(dir / "tokens.bin", 3, 0);
  o.resumeDir = dir / "other";
  std::string m = message(o);
  EXPECT_EQ(m.rfind("--resume: the checkpoint in '" + (dir / "other") +
                        "' does not match this program:",
                    0),
            0u)
      << m;
  EXPECT_NE(m.find("not in the program: 'calls'"), std::string::npos) << m;

  // Resuming past --steps.
  Loaded done(singleMicroBatchProgram(2));
  TrainerOptions s = tokenOptions(dir / "tokens.bin", 4, 0);
  s.saveDir = dir / "ckpt4";
  ASSERT_TRUE(train(done, s).isOk());
  o = tokenOptions(dir / "tokens.bin", 3, 0);
  o.resumeDir = dir / "ckpt4";
  EXPECT_EQ(message(o), "the checkpoint in '" + (dir / "ckpt4") +
                            "' is at step 4, beyond --steps 3");
  o.steps = 4;
  auto nothing = train(l, o);
  ASSERT_TRUE(nothing.isOk());
  EXPECT_TRUE(nothing.value().empty());

  // A program without token inputs.
  ProgramBuilder b = singleMicroBatchProgram(2);
  b.setMetadata("dtcc.data_inputs", "");
  Loaded plain(std::move(b));
  auto r = train(plain, tokenOptions(dir / "tokens.bin", 3, 0));
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find("pass explicit inputs with --batches"),
            std::string::npos);
}

/// Runs the runner's main on `args`, capturing stdout and stderr.
int runRunner(std::vector<std::string> args, std::string *out,
              std::string *err) {
  args.insert(args.begin(), "train");
  std::vector<char *> argv;
  for (std::string &a : args)
    argv.push_back(a.data());
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  int rc = runnerMain(static_cast<int>(argv.size()), argv.data());
  std::fflush(stdout);
  *out = ::testing::internal::GetCapturedStdout();
  *err = ::testing::internal::GetCapturedStderr();
  return rc;
}

TEST_F(TrainerTest, CommandLine) {
  ProgramBuilder b = singleMicroBatchProgram(2);
  std::string program = dir / "toy.dtcc";
  ASSERT_TRUE(writeContainer(program, "", b.program(), b.data()).isOk());
  std::string out, err;

  int rc = runRunner({"--program", program, "--data", dir / "tokens.bin",
                      "--steps", "12", "--seed=4", "--log-every", "5"},
                     &out, &err);
  ASSERT_EQ(rc, 0) << err;
  EXPECT_NE(out.find("train toy: 8 parameters in 1 tensor, optimizer sgd\n"
                     "  1 micro-batch of 2 sequences x 4 tokens (8 tokens "
                     "per step); data " +
                     (dir / "tokens.bin") + " (3,000 uint16 tokens, seed 4)\n"),
            std::string::npos)
      << out;
  std::vector<RefStep> want =
      referenceSingle(sampleBatches(tokens, 4, 12, 2), 2, 12);
  char expected[128];
  std::snprintf(expected, sizeof(expected),
                "step  5/12  loss %.5f  lr %.3e  grad-norm %.4f  tokens/s ",
                want[4].loss, want[4].lr, want[4].gradNorm);
  EXPECT_NE(out.find(expected), std::string::npos) << out;
  EXPECT_NE(out.find("step 10/12"), std::string::npos) << out;
  EXPECT_NE(out.find("step 12/12"), std::string::npos) << out;
  EXPECT_EQ(out.find("step  3/12"), std::string::npos) << out;
  EXPECT_NE(out.find("peak "), std::string::npos);

  // Inference on a training program.
  HostTensor ids(DType::kI64, {2, kSeq});
  for (int i = 0; i < 2 * kSeq; ++i)
    ids.data<int64_t>()[i] = i;
  ASSERT_TRUE(writeTensorFile(dir / "ids.pb", "ids", ids).isOk());
  rc = runRunner({"--program", program, "--function", "main", "--input",
                  "ids=" + (dir / "ids.pb"), "--print"},
                 &out, &err);
  ASSERT_EQ(rc, 0) << err;
  EXPECT_NE(out.find("scores: tensor<2x4xf32>\n  [0, 0.75, 2, 3.75"),
            std::string::npos)
      << out;

  // Mixed modes and missing flags.
  rc = runRunner({"--program", program, "--steps", "2", "--input",
                  "ids=" + (dir / "ids.pb")},
                 &out, &err);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(err.find("error: invalid argument: --steps trains; --input"),
            std::string::npos)
      << err;
  rc = runRunner({"--program", program}, &out, &err);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(err.find("this is a training program: train it with --data"),
            std::string::npos)
      << err;
  rc = runRunner({"--program", program, "--steps", "0"}, &out, &err);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(err.find("--steps expects a positive integer, got '0'"),
            std::string::npos)
      << err;
  rc = runRunner(
      {"--program", program, "--steps", "3", "--data", dir / "nope.bin"}, &out,
      &err);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(err.find("not found"), std::string::npos) << err;

  // Save, then resume to a longer run.
  rc = runRunner({"--program", program, "--data", dir / "tokens.bin", "--steps",
                  "3", "--save", dir / "ck"},
                 &out, &err);
  ASSERT_EQ(rc, 0) << err;
  EXPECT_NE(out.find("saved checkpoint " + (dir / "ck") + " (step 3)"),
            std::string::npos)
      << out;
  rc = runRunner({"--program", program, "--data", dir / "tokens.bin", "--steps",
                  "5", "--resume", dir / "ck", "--log-every", "1"},
                 &out, &err);
  ASSERT_EQ(rc, 0) << err;
  EXPECT_NE(out.find("resumed from " + (dir / "ck") + " at step 3"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("step 3/5"), std::string::npos) << out;
  EXPECT_NE(out.find("step 4/5"), std::string::npos) << out;

  // Help lists the training flags for training programs only.
  rc = runRunner({"--program", program, "--help"}, &out, &err);
  ASSERT_EQ(rc, 0);
  EXPECT_NE(out.find("--resume DIR"), std::string::npos);
  EXPECT_NE(out.find("function train_step"), std::string::npos);
  ProgramBuilder inference = singleMicroBatchProgram(2);
  inference.setMetadata("dtcc.train", "0");
  std::string plain = dir / "plain.dtcc";
  ASSERT_TRUE(
      writeContainer(plain, "", inference.program(), inference.data()).isOk());
  rc = runRunner({"--program", plain, "--help"}, &out, &err);
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(out.find("--resume DIR"), std::string::npos);
  rc =
      runRunner({"--program", plain, "--data", dir / "tokens.bin"}, &out, &err);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(err.find("--data needs a training program"), std::string::npos)
      << err;
}

} // namespace
