//===- MatmulShapeTest.cpp - a broadcast matmul as GEMM calls -------------===//
//
// runtime/base/MatmulShape.h, which the CPU and CUDA matmul kernels and the
// planner's program model share: the GEMMs it plans for each broadcasting
// form (strides of 0, folded batches, strided groups), checked by
// enumerating every GEMM's operand offsets against a direct walk of the
// broadcast batch indices.
//
//===----------------------------------------------------------------------===//

#include "runtime/base/MatmulShape.h"

#include <gtest/gtest.h>

#include <set>
#include <tuple>

using namespace dtcc::runtime;

namespace {

using Offsets = std::multiset<std::tuple<int64_t, int64_t, int64_t>>;

/// (lhs, rhs, out) offsets of every [m, k] x [k, n] product, by NumPy's
/// rules, row by row of the result.
Offsets direct(std::vector<int64_t> lhs, std::vector<int64_t> rhs, int64_t m,
               int64_t k, int64_t n) {
  size_t rank = std::max(lhs.size(), rhs.size());
  lhs.insert(lhs.begin(), rank - lhs.size(), 1);
  rhs.insert(rhs.begin(), rank - rhs.size(), 1);
  std::vector<int64_t> out(rank);
  int64_t count = 1;
  for (size_t d = 0; d < rank; ++d)
    count *= out[d] = std::max(lhs[d], rhs[d]);
  Offsets result;
  for (int64_t b = 0; b < count; ++b) {
    int64_t rest = b, li = 0, ri = 0, ls = 1, rs = 1;
    for (size_t d = rank; d-- > 0;) {
      int64_t c = rest % out[d];
      rest /= out[d];
      li += (lhs[d] == 1 ? 0 : c) * ls;
      ri += (rhs[d] == 1 ? 0 : c) * rs;
      ls *= lhs[d];
      rs *= rhs[d];
    }
    result.insert({li * m * k, ri * k * n, b * m * n});
  }
  return result;
}

/// The plan's GEMMs, unfolding a batch folded into m back into products of
/// `m` rows.
Offsets planned(const MatmulShape &p, int64_t m) {
  Offsets result;
  int64_t folds = p.m / std::max<int64_t>(1, m);
  for (int64_t g = 0; g < p.groups(); ++g)
    for (int64_t i = 0; i < p.count; ++i)
      for (int64_t f = 0; f < folds; ++f)
        result.insert({p.lhsOffsets[g] + i * p.lhsStride + f * m * p.k,
                       p.rhsOffsets[g] + i * p.rhsStride,
                       p.outOffsets[g] + i * p.outStride + f * m * p.n});
  return result;
}

std::vector<int64_t> with(std::vector<int64_t> batch, int64_t a, int64_t b) {
  batch.push_back(a);
  batch.push_back(b);
  return batch;
}

TEST(MatmulShape, EveryBroadcastFormMatchesNumPy) {
  const int64_t m = 3, k = 4, n = 5;
  std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> batches = {
      {{}, {}},         {{6}, {6}},       {{6}, {}},      {{}, {6}},
      {{2, 3}, {}},     {{}, {2, 3}},     {{2, 1}, {3}},  {{1, 3}, {2, 1}},
      {{2, 1, 3}, {1, 4, 1}}, {{1}, {1, 1}}, {{4}, {1}},  {{2, 3}, {2, 3}},
      {{1, 3}, {3}},    {{5, 1, 1}, {2, 3}},
  };
  for (auto &[lb, rb] : batches)
    for (bool tl : {false, true})
      for (bool tr : {false, true}) {
        auto p = planMatmul(with(lb, tl ? k : m, tl ? m : k),
                            with(rb, tr ? n : k, tr ? k : n), tl, tr);
        ASSERT_TRUE(p.isOk()) << p.status().toString();
        EXPECT_EQ(p.value().k, k);
        EXPECT_EQ(p.value().n, n);
        EXPECT_EQ(planned(p.value(), m), direct(lb, rb, m, k, n))
            << "batches " << lb.size() << "-D x " << rb.size() << "-D, tl "
            << tl << " tr " << tr;
      }
}

TEST(MatmulShape, SharedRhsIsOneGemm) {
  // The dense layer x[2, 3, 4] x w[4, 5]: one [6, 4] x [4, 5] product, also
  // with size-1 batch dimensions on the weight.
  for (auto rhs : {std::vector<int64_t>{4, 5}, std::vector<int64_t>{1, 1, 4, 5}}) {
    auto p = planMatmul({2, 3, 4}, rhs, false, false);
    ASSERT_TRUE(p.isOk());
    EXPECT_EQ(p.value().gemms(), 1);
    EXPECT_EQ(p.value().m, 6);
    EXPECT_EQ(p.value().resultShape,
              (rhs.size() == 2 ? std::vector<int64_t>{2, 3, 5}
                               : std::vector<int64_t>{1, 2, 3, 5}));
  }
  // A transposed lhs cannot fold: one strided batch of 6.
  auto t = planMatmul({2, 3, 4, 7}, {4, 5}, true, false);
  ASSERT_TRUE(t.isOk());
  EXPECT_EQ(t.value().groups(), 1);
  EXPECT_EQ(t.value().count, 6);
  EXPECT_EQ(t.value().rhsStride, 0);
}

TEST(MatmulShape, SharedLhsIsOneStridedBatch) {
  // w[4, 3] x x[2, 5, 3, 6]: ten products reading w with stride 0.
  auto p = planMatmul({4, 3}, {2, 5, 3, 6}, false, false);
  ASSERT_TRUE(p.isOk());
  EXPECT_EQ(p.value().groups(), 1);
  EXPECT_EQ(p.value().count, 10);
  EXPECT_EQ(p.value().lhsStride, 0);
  EXPECT_EQ(p.value().rhsStride, 18);
  EXPECT_EQ(p.value().resultShape, (std::vector<int64_t>{2, 5, 4, 6}));
}

TEST(MatmulShape, RejectsShapesThatDoNotFit) {
  auto k = planMatmul({2, 3}, {4, 5}, false, false);
  EXPECT_EQ(k.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(k.status().message().find("contracted dimensions differ"),
            std::string::npos);
  auto b = planMatmul({2, 3, 4}, {3, 4, 5}, false, false);
  EXPECT_NE(b.status().message().find("do not broadcast"), std::string::npos);
  EXPECT_FALSE(planMatmul({3}, {3, 4}, false, false).isOk());
}

} // namespace
