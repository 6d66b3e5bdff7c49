//===- MeshShapeTest.cpp - the one parser of --mesh and its rank order ----===//

#include "runtime/base/MeshShape.h"

#include <gtest/gtest.h>

using dtcc::runtime::MeshShape;

namespace {

MeshShape parsed(const char *spec) {
  auto m = MeshShape::parse(spec);
  EXPECT_TRUE(m.isOk()) << spec << ": " << m.status().message();
  return m.isOk() ? m.value() : MeshShape();
}

std::string error(const char *spec) {
  auto m = MeshShape::parse(spec);
  EXPECT_FALSE(m.isOk()) << spec << " parsed as " << m.value().str();
  return m.isOk() ? "" : m.status().message();
}

TEST(MeshShape, AxesInTheOrderWritten) {
  MeshShape m = parsed(" tp=2 , dp=4,pp=3");
  ASSERT_EQ(m.axes().size(), 3u);
  EXPECT_EQ(m.axes()[0].name, "tp");
  EXPECT_EQ(m.axes()[2].name, "pp");
  EXPECT_EQ(m.str(), "tp=2,dp=4,pp=3");
  EXPECT_EQ(parsed(m.str().c_str()), m);
  EXPECT_EQ(m.ranks(), 24);
  EXPECT_EQ(m.size("dp"), 4);
  EXPECT_EQ(m.size("sp"), 1);
  EXPECT_FALSE(m.has("sp"));
}

// Sizes are whole numbers, compared as numbers: pp=12 is not pp=1 (nor is
// tp=16 tp=1), whatever a substring search would say.
TEST(MeshShape, SizesAreNumbersNotPrefixes) {
  MeshShape m = parsed("dp=1,pp=12,tp=16");
  EXPECT_EQ(m.size("pp"), 12);
  EXPECT_EQ(m.size("tp"), 16);
  EXPECT_EQ(m.size("dp"), 1);
  EXPECT_EQ(m.ranks(), 192);
}

TEST(MeshShape, BadSpecsNameTheEntry) {
  EXPECT_NE(error("dp").find("'dp'"), std::string::npos);
  EXPECT_NE(error("dp=0").find("'dp=0'"), std::string::npos);
  EXPECT_NE(error("dp=-2").find("'dp=-2'"), std::string::npos);
  EXPECT_NE(error("dp=2x").find("'dp=2x'"), std::string::npos);
  EXPECT_NE(error("dp=99999999999999999999").find("AXIS=SIZE"),
            std::string::npos);
  EXPECT_NE(error("dp=2,dp=2").find("twice"), std::string::npos);
  EXPECT_NE(error("d p=2").find("not a name"), std::string::npos);
  EXPECT_NE(error("=2").find("not a name"), std::string::npos);
  EXPECT_NE(error("").find("expected a mesh"), std::string::npos);
  EXPECT_NE(error(" , ").find("expected a mesh"), std::string::npos);
  EXPECT_NE(error("a=65536,b=65536").find("2^31"), std::string::npos);
}

// Ranks lie row-major, the last axis fastest (runtime/exec/ShardLayout.h).
TEST(MeshShape, GroupsAtTheRealStrides) {
  MeshShape dpTp = parsed("dp=2,tp=2");
  EXPECT_EQ(dpTp.stride("tp"), 1);
  EXPECT_EQ(dpTp.stride("dp"), 2);
  EXPECT_EQ(dpTp.group("tp", 0), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(dpTp.group("dp", 0), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(dpTp.group("dp", 3), (std::vector<int64_t>{1, 3}));

  MeshShape tpDp = parsed("tp=2,dp=2");
  EXPECT_EQ(tpDp.group("tp", 0), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(tpDp.group("dp", 0), (std::vector<int64_t>{0, 1}));

  MeshShape three = parsed("pp=2,dp=3,tp=2");
  EXPECT_EQ(three.stride("pp"), 6);
  EXPECT_EQ(three.group("dp", 7), (std::vector<int64_t>{7, 9, 11}));
  EXPECT_EQ(three.group({"pp", "tp"}, 2),
            (std::vector<int64_t>{2, 3, 8, 9}));
  EXPECT_EQ(three.group("sp", 5), (std::vector<int64_t>{5}));
}

TEST(MeshShape, MegatronOrderLeavesOutUnitAxes) {
  EXPECT_EQ(MeshShape::megatron(2, 3, 4).str(), "pp=3,dp=2,tp=4");
  EXPECT_EQ(MeshShape::megatron(8, 1, 1).str(), "dp=8");
  EXPECT_TRUE(MeshShape::megatron(1, 1, 1).empty());
  // tp fastest, then dp, then pp: rank = (p * dp + d) * tp + t.
  MeshShape m = MeshShape::megatron(2, 2, 2);
  EXPECT_EQ(m.group("tp", 0), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(m.group("dp", 0), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(m.group("pp", 0), (std::vector<int64_t>{0, 4}));
}

} // namespace
