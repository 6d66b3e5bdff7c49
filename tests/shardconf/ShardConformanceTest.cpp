//===- ShardConformanceTest.cpp - the suite's enumeration and comparison --===//
//
// The sharding conformance suite is only as good as the shardings it
// enumerates and the comparison that judges them: both against hand counts
// and hand-made differences.
//
//===----------------------------------------------------------------------===//

#include "tests/shardconf/ShardConformance.h"

#include "compiler/Driver.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace mlir;
using namespace dtcc;
using namespace dtcc::shardconf;
using runtime::DType;
using runtime::HostTensor;

namespace {

class EnumerateTest : public ::testing::Test {
protected:
  EnumerateTest() {
    registerDtccDialects(registry_);
    ctx_ = std::make_unique<MLIRContext>(registry_);
    ctx_->loadAllAvailableDialects();
  }

  /// The rule of the last op of `body` (a function body over %a and %b).
  graph::ShardingRule ruleOf(const std::string &args, const std::string &body) {
    std::string text = "func.func @f(" + args + ") {\n" + body + "\n  return\n}\n";
    module_ = parseSourceString<ModuleOp>(text, ctx_.get());
    EXPECT_TRUE(module_) << text;
    auto fn = *module_->getOps<func::FuncOp>().begin();
    Operation *op = fn.front().getTerminator()->getPrevNode();
    return cast<graph::ShardableOpInterface>(op).getShardingRule();
  }

  MeshSpec mesh(const std::string &name) {
    for (const MeshSpec &m : suiteMeshes())
      if (m.name == name)
        return m;
    ADD_FAILURE() << "no mesh " << name;
    return {};
  }

  std::vector<std::string> describe(const graph::ShardingRule &rule,
                                    const Enumeration &e) {
    std::vector<std::string> out;
    for (const auto &axes : e.shardings)
      out.push_back(describeSharding(rule, axes, ctx_.get()));
    return out;
  }

  DialectRegistry registry_;
  std::unique_ptr<MLIRContext> ctx_;
  OwningOpRef<ModuleOp> module_;
};

TEST_F(EnumerateTest, MatmulEveryFactorAndPair) {
  auto rule = ruleOf("%a: tensor<4x8xf64>, %b: tensor<8x4xf64>",
                     "%y = dgraph.matmul %a, %b : (tensor<4x8xf64>, "
                     "tensor<8x4xf64>) -> tensor<4x4xf64>");
  // m, n and k (a reduction: a partial result).
  Enumeration two = enumerateShardings(rule, mesh("tp=2"), ctx_.get());
  EXPECT_EQ(two.allowed, 3);
  EXPECT_EQ(describe(rule, two),
            (std::vector<std::string>{
                "(<[{tp}, {}]>, <[{}, {}]>) -> <[{tp}, {}]>",
                "(<[{}, {}]>, <[{}, {tp}]>) -> <[{}, {tp}]>",
                "(<[{}, {tp}]>, <[{tp}, {}]>) -> <[{}, {}], partial = {tp}>"}));
  EXPECT_EQ(enumerateShardings(rule, mesh("tp=4"), ctx_.get()).allowed, 3);
  // Three pairs over (dp, tp) and each factor over both axes.
  Enumeration grid = enumerateShardings(rule, mesh("dp=2,tp=2"), ctx_.get());
  EXPECT_EQ(grid.allowed, 6);
  EXPECT_EQ(describe(rule, grid)[0], "(<[{dp}, {}]>, <[{}, {tp}]>) -> <[{dp}, {tp}]>");
  EXPECT_EQ(describe(rule, grid)[3], "(<[{dp, tp}, {}]>, <[{}, {}]>) -> <[{dp, tp}, {}]>");
}

TEST_F(EnumerateTest, ReplicatedFactorsStayWhole) {
  auto rule = ruleOf("%a: tensor<4x8xf64>",
                     "%y = dgraph.softmax %a, dim = 1 : tensor<4x8xf64>");
  Enumeration e = enumerateShardings(rule, mesh("tp=2"), ctx_.get());
  EXPECT_EQ(describe(rule, e),
            (std::vector<std::string>{"(<[{tp}, {}]>) -> <[{tp}, {}]>"}));
  // A pair needs two splittable factors; one remains over both axes.
  EXPECT_EQ(enumerateShardings(rule, mesh("dp=2,tp=2"), ctx_.get()).allowed, 1);
}

TEST_F(EnumerateTest, TwoFactorsOfOneDimensionAreNotAPair) {
  // [32] -> [4, 8]: both factors live in the operand's only dimension.
  auto rule = ruleOf("%a: tensor<32xf64>",
                     "%y = dgraph.reshape %a : (tensor<32xf64>) -> tensor<4x8xf64>");
  Enumeration grid = enumerateShardings(rule, mesh("dp=2,tp=2"), ctx_.get());
  EXPECT_EQ(describe(rule, grid),
            (std::vector<std::string>{"(<[{dp, tp}]>) -> <[{dp, tp}, {}]>",
                                      "(<[{dp, tp}x4]>) -> <[{}, {dp, tp}]>"}));
}

TEST_F(EnumerateTest, BoundKeepsAnEvenSubset) {
  const std::string t = "tensor<4x4x4x4x4xf64>";
  auto rule = ruleOf("%a: " + t + ", %b: " + t, "%y = dgraph.add %a, %b : " + t);
  // C(5, 2) pairs and 5 factors over both axes.
  Enumeration all = enumerateShardings(rule, mesh("dp=2,tp=2"), ctx_.get(), 100);
  EXPECT_EQ(all.allowed, 15);
  EXPECT_EQ(all.shardings.size(), 15u);
  Enumeration bounded = enumerateShardings(rule, mesh("dp=2,tp=2"), ctx_.get());
  EXPECT_EQ(bounded.allowed, 15);
  ASSERT_EQ(bounded.shardings.size(), kMaxShardingsPerMesh);
  EXPECT_EQ(describe(rule, bounded).front(), describe(rule, all).front());
  EXPECT_EQ(describe(rule, bounded).back(), describe(rule, all).back());
}

TEST_F(EnumerateTest, NothingToSplitSaysWhy) {
  auto odd = ruleOf("%a: tensor<3x5xf64>", "%y = dgraph.neg %a : tensor<3x5xf64>");
  EXPECT_EQ(enumerateShardings(odd, mesh("tp=2"), ctx_.get()).none,
            "no factor that the mesh divides");
  // Along the gathered axis nothing splits; a 1-D gather has no other.
  auto whole = ruleOf("%a: tensor<8xf64>, %b: tensor<4xi64>",
                      "%y = dgraph.gather_elements %a, %b axis = 0 : "
                      "(tensor<8xf64>, tensor<4xi64>) -> tensor<4xf64>");
  EXPECT_EQ(enumerateShardings(whole, mesh("tp=4"), ctx_.get()).none,
            "no factor can be split (every one is whole)");
}

HostTensor f64(std::vector<int64_t> shape, std::vector<double> values) {
  HostTensor t(DType::kF64, std::move(shape));
  std::copy(values.begin(), values.end(), t.data<double>());
  return t;
}

TEST(CompareTest, ToleranceIsRelativeToTheLargestValue) {
  HostTensor want = f64({2, 2}, {1, -2, 100, 4});
  EXPECT_EQ(compareOutputs({want}, {want}, {"y"}), "");
  // 1e-12 of the largest magnitude (100): 1e-11 passes, 1e-9 does not.
  HostTensor close = f64({2, 2}, {1 + 1e-11, -2, 100, 4});
  EXPECT_EQ(compareOutputs({close}, {want}, {"y"}), "");
  HostTensor off = f64({2, 2}, {1, -2, 100, 4 + 1e-9});
  std::string m = compareOutputs({off}, {want}, {"y"});
  EXPECT_NE(m.find("y: differs by"), std::string::npos) << m;
  EXPECT_NE(m.find("at [1, 1]"), std::string::npos) << m;
}

TEST(CompareTest, NaNsIntegersAndShapes) {
  HostTensor want = f64({2}, {1, NAN});
  EXPECT_EQ(compareOutputs({want}, {want}, {"y"}), "");
  EXPECT_NE(compareOutputs({f64({2}, {1, 0})}, {want}, {"y"}), "");
  EXPECT_NE(compareOutputs({f64({2}, {NAN, NAN})}, {want}, {"y"}), "");
  HostTensor a(DType::kI64, {3}), b(DType::kI64, {3});
  for (int i = 0; i < 3; ++i)
    a.data<int64_t>()[i] = b.data<int64_t>()[i] = i;
  EXPECT_EQ(compareOutputs({a}, {b}, {"i"}), "");
  b.data<int64_t>()[2] = 3;
  EXPECT_NE(compareOutputs({a}, {b}, {"i"}), "");
  EXPECT_NE(compareOutputs({f64({1, 2}, {1, 2})}, {f64({2}, {1, 2})}, {"y"})
                .find("tensor<1x2xf64>, expected tensor<2xf64>"),
            std::string::npos);
  EXPECT_NE(compareOutputs({}, {want}, {"y"}), "");
}

} // namespace
