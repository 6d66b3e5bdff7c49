//===- TokenDataTest.cpp - token files and the ABI's batch sampling -------===//
//
// Checks sampling against a reference written from docs/training-abi.md, its
// determinism, both token widths and id types, and the file checks.
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/TokenData.h"
#include "runtime/base/Random.h"
#include "tests/unit/trainer/TrainerTestUtils.h"

#include <gtest/gtest.h>

using namespace dtcc::runtime;
using namespace dtcc::runtime::testing;

namespace {

TEST(TokenDataTest, Splitmix64MatchesTheAbi) {
  // Known values of splitmix64 (its reference generator's first outputs
  // from state 0 are splitmix64(0), splitmix64(0x9E37...)).
  EXPECT_EQ(splitmix64(0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(splitmix64(0x9E3779B97F4A7C15ull), 0x6E789E6AA1B965F4ull);
  for (uint64_t x : {1ull, 42ull, 0xFFFFFFFFFFFFFFFFull, 123456789ull})
    EXPECT_EQ(splitmix64(x), referenceSplitmix64(x));
}

TEST(TokenDataTest, SamplesMatchTheReference) {
  TempDir dir;
  std::vector<uint32_t> tokens = makeTokens(1000, 50000);
  for (int width : {2, 4}) {
    for (DType idsType : {DType::kI32, DType::kI64}) {
      std::string path = dir / ("tokens" + std::to_string(width) + ".bin");
      writeTokens(path, tokens, width);
      auto data = TokenData::open(
          path, width == 2 ? TokenDType::kU16 : TokenDType::kU32, 7);
      ASSERT_TRUE(data.isOk()) << data.status().toString();
      EXPECT_EQ(data.value()->numTokens(), 1000);
      HostTensor ids(idsType, {3, 7}), labels(idsType, {3, 7});
      const uint64_t seed = 99, first = 12;
      ASSERT_TRUE(data.value()->fill(seed, first, ids, labels).isOk());
      for (int64_t r = 0; r < 3; ++r) {
        std::vector<int64_t> refIds, refLabels;
        referenceSample(tokens, seed, first + r, 7, refIds, refLabels);
        for (int64_t j = 0; j < 7; ++j) {
          int64_t id = idsType == DType::kI32 ? ids.data<int32_t>()[r * 7 + j]
                                              : ids.data<int64_t>()[r * 7 + j];
          int64_t label = idsType == DType::kI32
                              ? labels.data<int32_t>()[r * 7 + j]
                              : labels.data<int64_t>()[r * 7 + j];
          EXPECT_EQ(id, refIds[j]) << "row " << r << " column " << j;
          EXPECT_EQ(label, refLabels[j]) << "row " << r << " column " << j;
        }
      }
    }
  }
}

TEST(TokenDataTest, SamplingIsDeterministicAndSeeded) {
  TempDir dir;
  writeTokens(dir / "t.bin", makeTokens(5000, 60000), 2);
  auto a = TokenData::open(dir / "t.bin", TokenDType::kU16, 16);
  auto b = TokenData::open(dir / "t.bin", TokenDType::kU16, 16);
  ASSERT_TRUE(a.isOk() && b.isOk());
  HostTensor ids1(DType::kI64, {4, 16}), labels1(DType::kI64, {4, 16});
  HostTensor ids2(DType::kI64, {4, 16}), labels2(DType::kI64, {4, 16});
  ASSERT_TRUE(a.value()->fill(7, 100, ids1, labels1).isOk());
  ASSERT_TRUE(b.value()->fill(7, 100, ids2, labels2).isOk());
  EXPECT_EQ(ids1.bytes, ids2.bytes);
  EXPECT_EQ(labels1.bytes, labels2.bytes);
  // Labels are the ids shifted by one token.
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t j = 0; j + 1 < 16; ++j)
      EXPECT_EQ(labels1.data<int64_t>()[r * 16 + j],
                ids1.data<int64_t>()[r * 16 + j + 1]);
  ASSERT_TRUE(b.value()->fill(8, 100, ids2, labels2).isOk());
  EXPECT_NE(ids1.bytes, ids2.bytes);
  // Offsets stay in range and reach both ends of the file.
  int64_t lo = 1 << 30, hi = -1;
  for (uint64_t k = 0; k < 20000; ++k) {
    int64_t off = tokenSampleOffset(3, k, 40, 8);
    ASSERT_GE(off, 0);
    ASSERT_LT(off, 32);
    lo = std::min(lo, off);
    hi = std::max(hi, off);
  }
  EXPECT_EQ(lo, 0);
  EXPECT_EQ(hi, 31);
}

TEST(TokenDataTest, SmallestFileHasOneWindow) {
  TempDir dir;
  writeTokens(dir / "t.bin", {5, 6, 7, 8, 9}, 4);
  auto data = TokenData::open(dir / "t.bin", TokenDType::kU32, 4);
  ASSERT_TRUE(data.isOk()) << data.status().toString();
  HostTensor ids(DType::kI32, {2, 4}), labels(DType::kI32, {2, 4});
  ASSERT_TRUE(data.value()->fill(0, 0, ids, labels).isOk());
  std::vector<int32_t> gotIds(ids.data<int32_t>(), ids.data<int32_t>() + 8);
  std::vector<int32_t> gotLabels(labels.data<int32_t>(),
                                 labels.data<int32_t>() + 8);
  EXPECT_EQ(gotIds, (std::vector<int32_t>{5, 6, 7, 8, 5, 6, 7, 8}));
  EXPECT_EQ(gotLabels, (std::vector<int32_t>{6, 7, 8, 9, 6, 7, 8, 9}));
}

TEST(TokenDataTest, RejectsBadFiles) {
  TempDir dir;
  auto missing = TokenData::open(dir / "none.bin", TokenDType::kU16, 4);
  ASSERT_FALSE(missing.isOk());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(),
            "token file '" + (dir / "none.bin") + "' not found");

  writeTokens(dir / "short.bin", {1, 2, 3, 4}, 2);
  auto small = TokenData::open(dir / "short.bin", TokenDType::kU16, 4);
  ASSERT_FALSE(small.isOk());
  EXPECT_EQ(small.status().message(),
            "token file '" + (dir / "short.bin") +
                "' has 4 uint16 tokens; a sequence of 4 needs at least 5");

  {
    std::ofstream out(dir / "odd.bin", std::ios::binary);
    out << "abcdefg"; // 7 bytes
  }
  auto odd = TokenData::open(dir / "odd.bin", TokenDType::kU16, 2);
  ASSERT_FALSE(odd.isOk());
  EXPECT_EQ(odd.status().message(),
            "token file '" + (dir / "odd.bin") +
                "' has 7 bytes, not a whole number of uint16 tokens (is "
                "--data-dtype right?)");
  {
    std::ofstream out(dir / "six.bin", std::ios::binary);
    out << "abcdef"; // 6 bytes: three uint16 tokens, not whole uint32 ones
  }
  auto six = TokenData::open(dir / "six.bin", TokenDType::kU32, 1);
  ASSERT_FALSE(six.isOk());
  EXPECT_NE(six.status().message().find("not a whole number of uint32"),
            std::string::npos);

  EXPECT_FALSE(parseTokenDType("int16").isOk());
  EXPECT_EQ(parseTokenDType("uint32").value(), TokenDType::kU32);
}

TEST(TokenDataTest, RejectsTokensOutsideTheVocabulary) {
  TempDir dir;
  writeTokens(dir / "t.bin", {1, 2, 3, 70, 4, 5}, 2);
  auto data = TokenData::open(dir / "t.bin", TokenDType::kU16, 5, 64);
  ASSERT_TRUE(data.isOk());
  HostTensor ids(DType::kI64, {1, 5}), labels(DType::kI64, {1, 5});
  Status s = data.value()->fill(0, 0, ids, labels);
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.message(), "token file '" + (dir / "t.bin") +
                             "' holds token 70 at position 3, outside the "
                             "model's vocabulary of 64 (is --data-dtype "
                             "right?)");
  HostTensor f(DType::kF32, {1, 5});
  EXPECT_FALSE(data.value()->fill(0, 0, f, f).isOk());
}

} // namespace
