//===- CheckpointTest.cpp - saving and loading training state -------------===//
//
// Round trips through checkpoint directories, tensor boxes of files, the
// replacement of an existing checkpoint, and mismatches with the program.
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/Checkpoint.h"
#include "runtime/device/Device.h"
#include "runtime/exec/Executable.h"
#include "tests/unit/trainer/TrainerTestUtils.h"

#include <gtest/gtest.h>

#include <numeric>

using namespace dtcc::runtime;
using namespace dtcc::runtime::testing;

namespace {

TEST(CheckpointTest, RoundTripsEveryVariable) {
  Loaded a(twoMicroBatchProgram());
  // Give the variables distinct non-initial values.
  for (const auto &[name, view] : a.exe->variables())
    for (int64_t i = 0; i < view.sizeInBytes(); ++i)
      static_cast<uint8_t *>(view.data)[i] = uint8_t(i * 7 + name.size());
  auto before = a.snapshot();
  TempDir dir;
  format::Checkpoint info;
  info.set_step(17);
  info.set_seed(0xFFFFFFFFFFFFFFF0ull);
  info.set_data_path("tokens.bin");
  ASSERT_TRUE(saveCheckpoint(*a.exe, dir / "ckpt", info).isOk());
  EXPECT_FALSE(std::filesystem::exists(dir / "ckpt.tmp"));

  a.scribble();
  ASSERT_NE(a.snapshot(), before);
  auto loaded = loadCheckpoint(*a.exe, dir / "ckpt/");
  ASSERT_TRUE(loaded.isOk()) << loaded.status().toString();
  EXPECT_EQ(a.snapshot(), before);
  EXPECT_EQ(loaded.value().step(), 17);
  EXPECT_EQ(loaded.value().seed(), 0xFFFFFFFFFFFFFFF0ull);
  EXPECT_EQ(loaded.value().format_version(), kCheckpointFormatVersion);

  // The manifest is JSON with the ABI's fields; files hold raw tensors.
  std::string json = readFile(dir / "ckpt/checkpoint.json");
  EXPECT_NE(json.find("\"format_version\": 1"), std::string::npos) << json;
  EXPECT_NE(json.find("\"name\": \"w/grad_acc\""), std::string::npos);
  ASSERT_EQ(loaded.value().variables_size(), 6);
  const auto &w = loaded.value().variables(0);
  EXPECT_EQ(w.name(), "w");
  EXPECT_EQ(w.dtype(), static_cast<int32_t>(DType::kF32));
  EXPECT_EQ(std::vector<int64_t>(w.shape().begin(), w.shape().end()),
            (std::vector<int64_t>{1, kSeq}));
  EXPECT_EQ(w.file(), "0.bin");
  std::string wBytes = readFile(dir / "ckpt/0.bin");
  EXPECT_EQ(std::vector<uint8_t>(wBytes.begin(), wBytes.end()), before[0]);

  // A second load into a fresh executable gives the same state.
  Loaded b(twoMicroBatchProgram());
  ASSERT_TRUE(loadCheckpoint(*b.exe, dir / "ckpt").isOk());
  EXPECT_EQ(b.snapshot(), before);
}

TEST(CheckpointTest, ReplacesAnExistingCheckpointOnlyWhenComplete) {
  Loaded a(singleMicroBatchProgram(2));
  TempDir dir;
  format::Checkpoint info;
  info.set_step(1);
  ASSERT_TRUE(saveCheckpoint(*a.exe, dir / "ckpt", info).isOk());
  // A leftover of an interrupted save is cleared, the old one replaced.
  std::filesystem::create_directory(dir / "ckpt.tmp");
  std::ofstream(dir / "ckpt.tmp/0.bin") << "partial";
  a.scribble();
  auto state = a.snapshot();
  info.set_step(2);
  ASSERT_TRUE(saveCheckpoint(*a.exe, dir / "ckpt", info).isOk());
  EXPECT_FALSE(std::filesystem::exists(dir / "ckpt.tmp"));
  EXPECT_FALSE(std::filesystem::exists(dir / "ckpt.old"));
  auto manifest = readCheckpointManifest(dir / "ckpt");
  ASSERT_TRUE(manifest.isOk());
  EXPECT_EQ(manifest.value().step(), 2);
  Loaded b(singleMicroBatchProgram(2));
  ASSERT_TRUE(loadCheckpoint(*b.exe, dir / "ckpt").isOk());
  EXPECT_EQ(b.snapshot(), state);

  // A directory of other things is never replaced.
  std::filesystem::create_directory(dir / "notes");
  std::ofstream(dir / "notes/todo.txt") << "keep me";
  Status s = saveCheckpoint(*a.exe, dir / "notes", info);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("not a checkpoint, so it is not replaced"),
            std::string::npos);
  EXPECT_EQ(readFile(dir / "notes/todo.txt"), "keep me");
}

TEST(CheckpointTest, ListsEveryMismatchAtOnce) {
  Loaded small(singleMicroBatchProgram(2));
  TempDir dir;
  ASSERT_TRUE(saveCheckpoint(*small.exe, dir / "ckpt", {}).isOk());
  // Another model: w has 3 rows, and grad_acc, calls, applies are new.
  Loaded other(twoMicroBatchProgram());
  auto before = other.snapshot();
  auto loaded = loadCheckpoint(*other.exe, dir / "ckpt");
  ASSERT_FALSE(loaded.isOk());
  EXPECT_EQ(loaded.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(loaded.status().message(),
            "the checkpoint in '" + (dir / "ckpt") +
                "' does not match this program:\n"
                "  'w': the program has tensor<1x4xf32>, the checkpoint "
                "tensor<2x4xf32>\n"
                "  missing: 'w/grad_acc' (tensor<1x4xf32>)\n"
                "  missing: 'calls' (tensor<i64>)\n"
                "  missing: 'applies' (tensor<i64>)");
  EXPECT_EQ(other.snapshot(), before) << "a failed load changed variables";

  // A truncated variable file is caught before anything is read.
  std::filesystem::resize_file(dir / "ckpt/0.bin", 8);
  Loaded same(singleMicroBatchProgram(2));
  loaded = loadCheckpoint(*same.exe, dir / "ckpt");
  ASSERT_FALSE(loaded.isOk());
  EXPECT_NE(loaded.status().message().find(
                "'w': its file 0.bin has 8 bytes, expected 32"),
            std::string::npos)
      << loaded.status().message();

  auto none = loadCheckpoint(*same.exe, dir / "nothing");
  ASSERT_FALSE(none.isOk());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(none.status().message(), "no checkpoint at '" + (dir / "nothing") +
                                         "': the directory does not exist");
}

TEST(CheckpointTest, RejectsBadManifests) {
  TempDir dir;
  std::filesystem::create_directory(dir / "c");
  auto write = [&](const std::string &json) {
    std::ofstream(dir / "c/checkpoint.json", std::ios::trunc) << json;
    return readCheckpointManifest(dir / "c");
  };
  auto m = write("{ not json");
  ASSERT_FALSE(m.isOk());
  EXPECT_EQ(m.status().code(), StatusCode::kDataLoss);
  m = write(R"({"format_version": 9})");
  ASSERT_FALSE(m.isOk());
  EXPECT_NE(m.status().message().find("format version 9"), std::string::npos);
  m = write(R"({"format_version": 1, "variables": [
      {"name": "w", "dtype": 1, "shape": [2], "file": "../../etc/passwd"}]})");
  ASSERT_FALSE(m.isOk());
  EXPECT_NE(m.status().message().find("invalid file name"), std::string::npos);
  m = write(R"({"format_version": 1, "step": "5", "variables": [
      {"name": "w", "dtype": 1, "shape": [2], "file": "0.bin"}]})");
  ASSERT_TRUE(m.isOk()) << m.status().toString();
  EXPECT_EQ(m.value().step(), 5);
}

TEST(CheckpointTest, BoxesOfATensorFile) {
  TempDir dir;
  const std::vector<int64_t> shape = {3, 4, 5};
  std::vector<int32_t> whole(60);
  std::iota(whole.begin(), whole.end(), 0);
  // Written as four boxes (as four ranks would), read back whole.
  std::string path = dir / "t.bin";
  for (int64_t i0 : {0, 2})
    for (int64_t j0 : {0, 3}) {
      TensorBox box{{i0, j0, 0}, {i0 == 0 ? 2 : 1, j0 == 0 ? 3 : 1, 5}};
      std::vector<int32_t> part;
      for (int64_t i = 0; i < box.size[0]; ++i)
        for (int64_t j = 0; j < box.size[1]; ++j)
          for (int64_t k = 0; k < 5; ++k)
            part.push_back(whole[((i0 + i) * 4 + j0 + j) * 5 + k]);
      ASSERT_TRUE(
          writeTensorBox(path, DType::kI32, shape, box, part.data()).isOk());
    }
  std::vector<int32_t> back(60, -1);
  ASSERT_TRUE(readTensorBox(path, DType::kI32, shape, TensorBox::whole(shape),
                            back.data())
                  .isOk());
  EXPECT_EQ(back, whole);
  // An inner box: rows 1..2, columns 1..2, elements 2..4.
  TensorBox inner{{1, 1, 2}, {2, 2, 3}};
  std::vector<int32_t> got(inner.numel());
  ASSERT_TRUE(
      readTensorBox(path, DType::kI32, shape, inner, got.data()).isOk());
  std::vector<int32_t> want;
  for (int64_t i = 1; i < 3; ++i)
    for (int64_t j = 1; j < 3; ++j)
      for (int64_t k = 2; k < 5; ++k)
        want.push_back(whole[(i * 4 + j) * 5 + k]);
  EXPECT_EQ(got, want);
  // Scalars, and boxes outside the tensor.
  int64_t scalar = 42, read = 0;
  ASSERT_TRUE(writeTensorBox(dir / "s.bin", DType::kI64, {},
                             TensorBox::whole({}), &scalar)
                  .isOk());
  ASSERT_TRUE(
      readTensorBox(dir / "s.bin", DType::kI64, {}, TensorBox::whole({}), &read)
          .isOk());
  EXPECT_EQ(read, 42);
  TensorBox outside{{2, 0, 0}, {2, 4, 5}};
  EXPECT_FALSE(
      readTensorBox(path, DType::kI32, shape, outside, got.data()).isOk());
  Status s = readTensorBox(path, DType::kI64, shape, TensorBox::whole(shape),
                           back.data());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
}

} // namespace
