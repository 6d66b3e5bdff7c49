//===- DTypeTest.cpp - dtype table and fp16/bf16 conversions --------------===//

#include "runtime/base/DType.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace dtcc::runtime;

namespace {

TEST(DTypeTest, EveryTypeHasSizeAndRoundTripsItsName) {
  struct Entry {
    DType dtype;
    int64_t size;
    const char *name;
  } table[] = {
      {DType::kF32, 4, "f32"},  {DType::kF64, 8, "f64"},
      {DType::kF16, 2, "f16"},  {DType::kBF16, 2, "bf16"},
      {DType::kBool, 1, "i1"},  {DType::kI8, 1, "i8"},
      {DType::kI16, 2, "i16"},  {DType::kI32, 4, "i32"},
      {DType::kI64, 8, "i64"},  {DType::kU8, 1, "ui8"},
      {DType::kU16, 2, "ui16"}, {DType::kU32, 4, "ui32"},
      {DType::kU64, 8, "ui64"},
  };
  for (const Entry &e : table) {
    EXPECT_EQ(dtypeSize(e.dtype), e.size) << e.name;
    EXPECT_STREQ(dtypeName(e.dtype), e.name);
    EXPECT_EQ(dtypeFromName(e.name), e.dtype);
    EXPECT_TRUE(isValidDType(static_cast<int32_t>(e.dtype)));
  }
  EXPECT_FALSE(isValidDType(8)); // ONNX string
  EXPECT_EQ(dtypeFromName("string"), DType::kInvalid);
}

TEST(DTypeTest, HalfRoundTripsEveryFiniteValue) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    uint16_t h = static_cast<uint16_t>(bits);
    float f = halfToFloat(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(f))));
      continue;
    }
    EXPECT_EQ(floatToHalf(f), h) << "bits " << bits;
  }
}

TEST(DTypeTest, HalfRoundsToNearestEven) {
  EXPECT_EQ(halfToFloat(floatToHalf(1.0f + 1.0f / 2048)), 1.0f); // tie: even
  EXPECT_EQ(halfToFloat(floatToHalf(1.0f + 3.0f / 2048)), 1.0f + 2.0f / 1024);
  EXPECT_EQ(halfToFloat(floatToHalf(70000.0f)), INFINITY);
  EXPECT_EQ(halfToFloat(floatToHalf(65504.0f)), 65504.0f);
  EXPECT_EQ(halfToFloat(floatToHalf(5.96046448e-08f)), 5.96046448e-08f);
}

TEST(DTypeTest, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(bf16ToFloat(floatToBf16(1.0f)), 1.0f);
  EXPECT_EQ(bf16ToFloat(floatToBf16(1.0f + 1.0f / 256)), 1.0f); // tie: even
  EXPECT_EQ(bf16ToFloat(floatToBf16(1.0f + 3.0f / 256)), 1.0f + 2.0f / 128);
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(NAN))));
}

} // namespace
