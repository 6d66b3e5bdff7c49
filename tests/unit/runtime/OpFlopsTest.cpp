//===- OpFlopsTest.cpp - FLOPs of matrix products and convolutions --------===//
//
// Against the textbook counts: 2 m n k per product, and a convolution's
// 2 x (output elements) x (filter elements per output channel).
//
//===----------------------------------------------------------------------===//

#include "runtime/base/OpFlops.h"

#include <gtest/gtest.h>

using namespace dtcc::runtime;

namespace {

TEST(OpFlops, MatmulCountsEveryProduct) {
  EXPECT_DOUBLE_EQ(matmulFlops({4, 3}, {3, 5}, false, false), 2.0 * 4 * 5 * 3);
  // Transposed operands contract the other dimension.
  EXPECT_DOUBLE_EQ(matmulFlops({3, 4}, {5, 3}, true, true), 2.0 * 4 * 5 * 3);
  // Batches, broadcast on either side: every result's product counts once.
  EXPECT_DOUBLE_EQ(matmulFlops({8, 4, 3}, {3, 5}, false, false),
                   2.0 * 8 * 4 * 5 * 3);
  EXPECT_DOUBLE_EQ(matmulFlops({4, 3}, {8, 4, 3, 7}, false, false),
                   2.0 * 8 * 4 * 4 * 7 * 3);
  EXPECT_DOUBLE_EQ(matmulFlops({2, 1, 4, 3}, {1, 6, 3, 5}, false, false),
                   2.0 * 2 * 6 * 4 * 5 * 3);
  // Shapes that do not fit count nothing (the verifier refuses them).
  EXPECT_DOUBLE_EQ(matmulFlops({4, 3}, {4, 5}, false, false), 0);
  EXPECT_DOUBLE_EQ(matmulFlops({4}, {4, 5}, false, false), 0);
}

TEST(OpFlops, ConvolutionCountsItsWindows) {
  // [N=2, O=8, 6x6] from a filter [8, C/groups=3, 3x3]: 2 N O Y^2 C K^2.
  EXPECT_DOUBLE_EQ(convFlops({8, 3, 3, 3}, {2, 8, 6, 6}),
                   2.0 * 2 * 8 * 36 * 3 * 9);
  // Depthwise 1-D: one input channel per output channel.
  EXPECT_DOUBLE_EQ(convFlops({16, 1, 5}, {4, 16, 100}), 2.0 * 4 * 16 * 100 * 5);
  // 3-D.
  EXPECT_DOUBLE_EQ(convFlops({2, 2, 1, 2, 3}, {1, 2, 4, 5, 6}),
                   2.0 * 1 * 2 * 2 * (1 * 2 * 3) * (4 * 5 * 6));
  EXPECT_DOUBLE_EQ(convFlops({8, 3, 3}, {2, 8, 6, 6}), 0);
}

} // namespace
