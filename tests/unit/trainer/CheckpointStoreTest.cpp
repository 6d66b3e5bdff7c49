//===- CheckpointStoreTest.cpp - checksums, verification, the writer ------===//
//
// CRC-32C against published check values and a bit-by-bit reference loop;
// a checkpoint root's listing, verification (truncated and corrupt files
// are skipped, naming the file), retention, and the background writer of
// one and of two ranks, including a rank whose part fails.
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/Checkpoint.h"
#include "runtime/io/CheckpointStore.h"
#include "runtime/io/Crc32c.h"
#include "tests/unit/trainer/TrainerTestUtils.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

using namespace dtcc::runtime;
using namespace dtcc::runtime::testing;

namespace {

/// CRC-32C one bit at a time, straight from the definition.
uint32_t bitwiseCrc32c(const std::string &bytes) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : bytes) {
    c ^= b;
    for (int i = 0; i < 8; ++i)
      c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}

TEST(Crc32cTest, MatchesCheckValuesAndTheBitwiseDefinition) {
  // The CRC catalogue's check value and RFC 3720's test vectors (B.4).
  EXPECT_EQ(crc32c(0, "123456789", 9), 0xE3069283u);
  std::string zeros(32, '\0'), ones(32, '\xFF'), inc(32, 0);
  for (int i = 0; i < 32; ++i)
    inc[i] = char(i);
  EXPECT_EQ(crc32c(0, zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c(0, ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c(0, inc.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(crc32cHex(0xE3069283u), "e3069283");

  std::mt19937 rng(5);
  for (size_t n : {0, 1, 7, 8, 9, 63, 64, 1000, 4099}) {
    std::string data(n, 0);
    for (char &c : data)
      c = char(rng());
    const uint32_t want = bitwiseCrc32c(data);
    EXPECT_EQ(crc32cPortable(0, data.data(), n), want) << n;
    EXPECT_EQ(crc32c(0, data.data(), n), want) << n;
    // Unaligned starts and chunked updates give the same value.
    if (n > 3) {
      uint32_t c = crc32c(0, data.data(), 3);
      EXPECT_EQ(crc32c(c, data.data() + 3, n - 3), want) << n;
    }
  }
}

/// A checkpoint of two small variables written by the background writer.
CheckpointSnapshot snapshotOf(int64_t step, float value) {
  CheckpointSnapshot s;
  s.manifest.set_step(step);
  s.manifest.set_seed(3);
  s.manifest.set_data_position(step * 4);
  auto add = [&](const std::string &name, std::vector<int64_t> shape,
                 const std::string &file) {
    auto *v = s.manifest.add_variables();
    v->set_name(name);
    v->set_dtype(static_cast<int32_t>(DType::kF32));
    for (int64_t d : shape)
      v->add_shape(d);
    v->set_file(file);
    CheckpointSnapshot::Tensor t;
    t.file = file;
    t.dtype = DType::kF32;
    t.globalShape = shape;
    CheckpointPiece p;
    p.box = TensorBox::whole(shape);
    p.bytes.resize(p.box.numel() * 4);
    for (int64_t i = 0; i < p.box.numel(); ++i) {
      float f = value + float(i);
      std::memcpy(p.bytes.data() + 4 * i, &f, 4);
    }
    t.pieces.push_back(std::move(p));
    s.tensors.push_back(std::move(t));
  };
  add("w", {4, 8}, "0.bin");
  add("b", {8}, "1.bin");
  return s;
}

std::unique_ptr<AsyncCheckpointWriter> makeWriter(const std::string &root,
                                                  int keep,
                                                  std::vector<std::string> *warnings,
                                                  int rank = 0, int size = 1) {
  CheckpointWriterOptions o;
  o.root = root;
  o.keep = keep;
  o.rank = rank;
  o.worldSize = size;
  o.runId = "test";
  // Long enough for a peer's fsyncs on a disk that the rest of the suite
  // keeps busy (ctest -j2: 5 s failed TwoRanksCommitOnceBothPartsAreWritten
  // now and then); no test here waits for the timeout to expire.
  o.peerTimeoutSeconds = 60;
  o.warn = [warnings](const std::string &w) {
    if (warnings)
      warnings->push_back(w);
  };
  auto w = AsyncCheckpointWriter::create(o);
  EXPECT_TRUE(w.isOk()) << w.status().toString();
  return w.isOk() ? std::move(w.value()) : nullptr;
}

TEST(CheckpointStoreTest, WritesVerifiableCheckpointsAndKeepsTheLastN) {
  TempDir dir;
  const std::string root = dir / "ckpts";
  std::vector<std::string> warnings;
  {
    auto w = makeWriter(root, 2, &warnings);
    for (int64_t step : {10, 20, 30})
      w->submit(snapshotOf(step, float(step)));
    w->drain();
    EXPECT_EQ(w->written(), 3);
    EXPECT_EQ(w->failed(), 0);
  }
  EXPECT_TRUE(warnings.empty());
  auto list = listCheckpoints(root);
  ASSERT_TRUE(list.isOk());
  ASSERT_EQ(list.value().size(), 2u); // step 10 removed by retention
  EXPECT_EQ(list.value()[0].step, 30);
  EXPECT_EQ(list.value()[1].step, 20);
  EXPECT_EQ(list.value()[0].dir, root + "/step_00000030");
  // Nothing else is left: no temporaries, no markers.
  int entries = 0;
  for (auto &e : std::filesystem::directory_iterator(root)) {
    ++entries;
    EXPECT_EQ(e.path().filename().string().rfind("step_", 0), 0u) << e.path();
  }
  EXPECT_EQ(entries, 2);
  auto manifest = verifyCheckpoint(root + "/step_00000030");
  ASSERT_TRUE(manifest.isOk()) << manifest.status().toString();
  EXPECT_EQ(manifest.value().data_position(), 120);
  // The manifest's checksum is the file's, computed independently.
  std::ifstream f(root + "/step_00000030/0.bin", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), {});
  EXPECT_EQ(manifest.value().variables(0).crc32c(),
            crc32cHex(bitwiseCrc32c(bytes)));
  float first;
  std::memcpy(&first, bytes.data(), 4);
  EXPECT_EQ(first, 30.0f);
}

TEST(CheckpointStoreTest, SkipsTruncatedAndCorruptCheckpointsNamingTheFile) {
  TempDir dir;
  const std::string root = dir / "ckpts";
  {
    auto w = makeWriter(root, 0, nullptr);
    for (int64_t step : {5, 10, 15})
      w->submit(snapshotOf(step, 1.0f));
  }
  // Step 15: a file cut short; step 10: one flipped byte.
  std::filesystem::resize_file(root + "/step_00000015/1.bin", 20);
  {
    std::fstream f(root + "/step_00000010/0.bin",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(17);
    f.put('\x5A');
  }
  std::vector<std::string> skipped;
  auto latest = findLatestCheckpoint(
      root, [&](const std::string &m) { skipped.push_back(m); });
  ASSERT_TRUE(latest.isOk());
  ASSERT_TRUE(latest.value().has_value());
  EXPECT_EQ(latest.value()->step, 5);
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_EQ(skipped[0], "skipping checkpoint '" + root +
                            "/step_00000015': '" + root +
                            "/step_00000015/1.bin' (variable 'b') has 20 "
                            "bytes, expected 32 for tensor<8xf32> (truncated)");
  EXPECT_NE(skipped[1].find("'" + root + "/step_00000010/0.bin' (variable 'w') "
                            "has CRC-32C "),
            std::string::npos)
      << skipped[1];
  EXPECT_NE(skipped[1].find("(corrupt)"), std::string::npos);

  // A directory without a manifest is not a checkpoint at all.
  std::filesystem::create_directories(root + "/step_00000099");
  auto again = findLatestCheckpoint(root, nullptr);
  ASSERT_TRUE(again.isOk());
  EXPECT_EQ(again.value()->step, 5);
  // No valid checkpoint: nothing, not an error.
  auto none = findLatestCheckpoint(dir / "absent", nullptr);
  ASSERT_TRUE(none.isOk());
  EXPECT_FALSE(none.value().has_value());
}

TEST(CheckpointStoreTest, TwoRanksCommitOnceBothPartsAreWritten) {
  TempDir dir;
  const std::string root = dir / "ckpts";
  // Rank 0 writes w, rank 1 writes b: the manifest waits for both.
  CheckpointSnapshot all = snapshotOf(8, 2.0f);
  CheckpointSnapshot part0 = all, part1 = all;
  part0.tensors.erase(part0.tensors.begin() + 1);
  part1.tensors.erase(part1.tensors.begin());
  auto w0 = makeWriter(root, 0, nullptr, 0, 2);
  auto w1 = makeWriter(root, 0, nullptr, 1, 2);
  w0->submit(std::move(part0));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(pathExists(root + "/step_00000008")) << "committed early";
  w1->submit(std::move(part1));
  w1->drain();
  w0->drain();
  EXPECT_EQ(w0->written(), 1);
  auto manifest = verifyCheckpoint(root + "/step_00000008");
  ASSERT_TRUE(manifest.isOk()) << manifest.status().toString();
  EXPECT_FALSE(pathExists(root + "/step_00000008/.rank-1.ok"));

  // A rank whose part fails: no checkpoint, a warning on rank 0 naming it.
  std::vector<std::string> warnings;
  auto v0 = makeWriter(root, 0, &warnings, 0, 2);
  CheckpointSnapshot bad = snapshotOf(9, 0.0f);
  bad.tensors[0].pieces[0].box.size = {9, 9}; // outside the tensor
  CheckpointSnapshot good = snapshotOf(9, 0.0f);
  v0->submit(std::move(good));
  auto v1 = makeWriter(root, 0, nullptr, 1, 2);
  v1->submit(std::move(bad));
  v1->drain();
  v0->drain();
  EXPECT_EQ(v0->failed(), 1);
  EXPECT_FALSE(pathExists(root + "/step_00000009"));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("checkpoint of step 9 not saved: rank 1 could "
                             "not write its blocks: tensor file"),
            std::string::npos)
      << warnings[0];
  // Its temporary is gone; the step-8 checkpoint is still the newest.
  for (auto &e : std::filesystem::directory_iterator(root))
    EXPECT_EQ(e.path().filename().string(), "step_00000008");
}

TEST(CheckpointStoreTest, RemovesUnfinishedSavesOfEarlierRuns) {
  TempDir dir;
  const std::string root = dir / "ckpts";
  std::filesystem::create_directories(root + "/.step_00000004.tmp-dead");
  std::ofstream(root + "/.step_00000004.tmp-dead/0.bin") << "partial";
  std::filesystem::create_directories(root + "/notes");
  auto w = makeWriter(root, 1, nullptr);
  EXPECT_FALSE(pathExists(root + "/.step_00000004.tmp-dead"));
  EXPECT_TRUE(pathExists(root + "/notes")); // not the writer's
}

TEST(CheckpointStoreTest, LoadRejectsACorruptFile) {
  Loaded a(singleMicroBatchProgram(2));
  TempDir dir;
  format::Checkpoint info;
  info.set_step(3);
  ASSERT_TRUE(saveCheckpoint(*a.exe, dir / "ckpt", info).isOk());
  auto manifest = readCheckpointManifest(dir / "ckpt");
  ASSERT_TRUE(manifest.isOk());
  EXPECT_EQ(manifest.value().variables(0).crc32c().size(), 8u);
  {
    std::fstream f(dir / "ckpt/0.bin",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1);
    f.put('\x7F');
  }
  auto loaded = loadCheckpoint(*a.exe, dir / "ckpt");
  ASSERT_FALSE(loaded.isOk());
  EXPECT_EQ(loaded.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(loaded.status().message().find("'" + (dir / "ckpt") +
                                           "/0.bin' (variable 'w') has "
                                           "CRC-32C"),
            std::string::npos)
      << loaded.status().message();
}

} // namespace
