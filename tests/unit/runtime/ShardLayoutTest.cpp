//===- ShardLayoutTest.cpp - blocks of split tensors ----------------------===//

#include "runtime/exec/ShardLayout.h"

#include <gtest/gtest.h>

#include <numeric>

using namespace dtcc::runtime;

namespace {

format::Mesh mesh(std::vector<std::pair<std::string, int64_t>> axes) {
  format::Mesh m;
  for (auto &[a, n] : axes) {
    m.add_axes(a);
    m.add_sizes(n);
  }
  return m;
}

format::Sharding sharding(std::vector<int64_t> shape,
                          std::vector<std::vector<std::string>> axes,
                          std::vector<int64_t> groups = {}) {
  format::Sharding s;
  for (size_t d = 0; d < shape.size(); ++d) {
    s.add_global_shape(shape[d]);
    auto *dim = s.add_dims();
    for (auto &a : axes[d])
      dim->add_axes(a);
    dim->set_groups(d < groups.size() ? groups[d] : 1);
  }
  return s;
}

TEST(ShardLayout, RanksAreRowMajorOverTheMesh) {
  auto c = MeshCoords::of(mesh({{"dp", 2}, {"tp", 3}}), 4);
  ASSERT_TRUE(c.isOk());
  EXPECT_EQ(c.value().coord("dp"), 1);
  EXPECT_EQ(c.value().coord("tp"), 1);
  EXPECT_EQ(c.value().coord("pp"), 0);
  EXPECT_EQ(c.value().index({"dp", "tp"}), 4);
  EXPECT_EQ(c.value().index({"tp", "dp"}), 3);
  EXPECT_EQ(c.value().size(std::vector<std::string>{"dp", "tp"}), 6);
  EXPECT_EQ(c.value().describe(), "dp=2 x tp=3");
  auto bad = MeshCoords::of(mesh({{"dp", 2}}), 2);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("outside the mesh dp=2"), std::string::npos);
}

// Every rank's block, put back at its pieces' global coordinates, rebuilds
// the whole tensor exactly once.
void expectBlocksTile(const format::Mesh &m, const format::Sharding &s) {
  std::vector<int64_t> shape(s.global_shape().begin(), s.global_shape().end());
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  std::vector<float> global(n), rebuilt(n, -1.0f);
  std::iota(global.begin(), global.end(), 0.0f);
  std::vector<int> covered(n, 0);
  auto c0 = MeshCoords::of(m, 0);
  ASSERT_TRUE(c0.isOk());
  for (int64_t r = 0; r < c0.value().numRanks(); ++r) {
    auto c = MeshCoords::of(m, r).value();
    auto local = localShape(s, c);
    ASSERT_TRUE(local.isOk()) << local.status().message();
    int64_t ln = 1;
    for (int64_t d : local.value())
      ln *= d;
    std::vector<float> block(ln);
    ASSERT_TRUE(extractBlock(s, c, sizeof(float), global.data(), block.data()).isOk());
    auto pieces = blockPieces(s, c).value();
    for (const BlockPiece &p : pieces)
      copyBox(block.data(), local.value(), p.localStart, rebuilt.data(), shape,
              p.globalStart, p.size, sizeof(float));
  }
  EXPECT_EQ(global, rebuilt);
}

TEST(ShardLayout, BlocksTileTheTensor) {
  auto m = mesh({{"dp", 2}, {"tp", 2}});
  expectBlocksTile(m, sharding({8, 6}, {{"dp"}, {}}));
  expectBlocksTile(m, sharding({8, 6}, {{"dp"}, {"tp"}}));
  expectBlocksTile(m, sharding({4, 12}, {{}, {"tp", "dp"}}));
  expectBlocksTile(m, sharding({4, 12}, {{}, {"tp"}}, {1, 3}));   // fused QKV
  expectBlocksTile(m, sharding({4, 12}, {{"dp"}, {"tp"}}, {1, 3}));
  expectBlocksTile(m, sharding({}, {}));
}

TEST(ShardLayout, GroupedDimensionsTakeTheirPartOfEachGroup) {
  auto m = mesh({{"tp", 2}});
  auto s = sharding({12}, {{"tp"}}, {3});
  std::vector<float> global(12), block(6);
  std::iota(global.begin(), global.end(), 0.0f);
  ASSERT_TRUE(extractBlock(s, MeshCoords::of(m, 1).value(), sizeof(float),
                           global.data(), block.data())
                  .isOk());
  EXPECT_EQ(block, (std::vector<float>{2, 3, 6, 7, 10, 11}));
}

TEST(ShardLayout, UnevenSplitsAreErrors) {
  auto m = mesh({{"dp", 4}});
  auto local = localShape(sharding({6}, {{"dp"}}), MeshCoords::of(m, 0).value());
  ASSERT_FALSE(local.isOk());
  EXPECT_NE(local.status().message().find("dimension 0 of size 6 does not split"),
            std::string::npos);
}

} // namespace
