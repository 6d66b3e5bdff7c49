//===- SearchLayoutsTest.cpp - dtcc-plan-search-layouts on small models --===//
//
// Training steps built from hand-written forward passes: the search's
// choice where the optimum is known by hand, the search against every
// combination of layouts (each propagated and priced), and its price
// against the partitioner's real collectives.
//
//===----------------------------------------------------------------------===//

#include "passes/Graph/Passes.h"
#include "passes/Planning/Plan.h"
#include "passes/Planning/SearchLayouts.h"
#include "passes/Sharding/Passes.h"
#include "passes/Sharding/ShardingUtils.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

using namespace mlir;
using namespace dtcc;
using namespace dtcc::shard;

namespace {

/// A forward pass: x[batch, widths[0]] through matmuls by `fc<i>` (with a
/// bias and relu between layers), loss = mean of the output's squares.
std::string mlp(int64_t batch, std::vector<int64_t> widths, bool bias) {
  std::string s = "module {\n";
  auto t = [](int64_t a, int64_t b) {
    return "tensor<" + std::to_string(a) + "x" + std::to_string(b) + "xf32>";
  };
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    s += "  dgraph.variable @fc" + std::to_string(i) + " : " +
         t(widths[i], widths[i + 1]) + " = dense<0.01> {trainable}\n";
    if (bias)
      s += "  dgraph.variable @b" + std::to_string(i) + " : tensor<" +
           std::to_string(widths[i + 1]) + "xf32> = dense<0.0> {trainable}\n";
  }
  int64_t out = widths.back();
  s += "  func.func @main(%x: " + t(batch, widths[0]) +
       " {dgraph.name = \"x\"}) -> (tensor<f32> {dgraph.name = \"loss\"}) {\n";
  std::string h = "%x";
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    std::string n = std::to_string(i);
    s += "    %w" + n + " = dgraph.load @fc" + n + " : " +
         t(widths[i], widths[i + 1]) + "\n";
    s += "    %m" + n + " = dgraph.matmul " + h + ", %w" + n + " : (" +
         t(batch, widths[i]) + ", " + t(widths[i], widths[i + 1]) + ") -> " +
         t(batch, widths[i + 1]) + "\n";
    h = "%m" + n;
    if (bias) {
      s += "    %bl" + n + " = dgraph.load @b" + n + " : tensor<" +
           std::to_string(widths[i + 1]) + "xf32>\n";
      s += "    %bb" + n + " = dgraph.broadcast_in_dim %bl" + n +
           ", dims = [1] : (tensor<" + std::to_string(widths[i + 1]) +
           "xf32>) -> " + t(batch, widths[i + 1]) + "\n";
      s += "    %a" + n + " = dgraph.add " + h + ", %bb" + n + " : " +
           t(batch, widths[i + 1]) + "\n";
      h = "%a" + n;
    }
    if (i + 2 < widths.size()) {
      s += "    %r" + n + " = dgraph.relu " + h + " : " +
           t(batch, widths[i + 1]) + "\n";
      h = "%r" + n;
    }
  }
  s += "    %sq = dgraph.mul " + h + ", " + h + " : " + t(batch, out) + "\n";
  s += "    %sum = dgraph.reduce_sum %sq, dims = [0, 1] : (" + t(batch, out) +
       ") -> tensor<f32>\n";
  s += "    %n = dgraph.constant dense<" + std::to_string(batch * out) +
       ".0> : tensor<f32>\n";
  s += "    %loss = dgraph.div %sum, %n : tensor<f32>\n";
  s += "    return %loss : tensor<f32>\n  }\n}\n";
  return s;
}

/// Two branches of x joined by a sum, then one more layer:
/// loss = mean((relu(x A) + relu(x B)) C)^2.
std::string branchy(int64_t batch, int64_t in, int64_t hidden, int64_t out) {
  auto t = [](int64_t a, int64_t b) {
    return "tensor<" + std::to_string(a) + "x" + std::to_string(b) + "xf32>";
  };
  std::string X = t(batch, in), H = t(batch, hidden), O = t(batch, out);
  std::string A = t(in, hidden), C = t(hidden, out);
  return "module {\n"
         "  dgraph.variable @A : " +
         A +
         " = dense<0.01> {trainable}\n"
         "  dgraph.variable @B : " +
         A +
         " = dense<0.01> {trainable}\n"
         "  dgraph.variable @C : " +
         C +
         " = dense<0.01> {trainable}\n"
         "  func.func @main(%x: " +
         X +
         " {dgraph.name = \"x\"}) -> (tensor<f32> {dgraph.name = \"loss\"}) {\n"
         "    %a = dgraph.load @A : " +
         A +
         "\n"
         "    %b = dgraph.load @B : " +
         A +
         "\n"
         "    %c = dgraph.load @C : " +
         C +
         "\n"
         "    %xa = dgraph.matmul %x, %a : (" +
         X + ", " + A + ") -> " + H +
         "\n"
         "    %xb = dgraph.matmul %x, %b : (" +
         X + ", " + A + ") -> " + H +
         "\n"
         "    %ra = dgraph.relu %xa : " +
         H +
         "\n"
         "    %rb = dgraph.relu %xb : " +
         H +
         "\n"
         "    %s = dgraph.add %ra, %rb : " +
         H +
         "\n"
         "    %y = dgraph.matmul %s, %c : (" +
         H + ", " + C + ") -> " + O +
         "\n"
         "    %sq = dgraph.mul %y, %y : " +
         O +
         "\n"
         "    %sum = dgraph.reduce_sum %sq, dims = [0, 1] : (" +
         O +
         ") -> tensor<f32>\n"
         "    %n = dgraph.constant dense<" +
         std::to_string(batch * out) +
         ".0> : tensor<f32>\n"
         "    %loss = dgraph.div %sum, %n : tensor<f32>\n"
         "    return %loss : tensor<f32>\n  }\n}\n";
}

class SearchLayoutsTest : public ::testing::Test {
protected:
  SearchLayoutsTest() {
    DialectRegistry registry;
    registry.insert<graph::GraphDialect, ShardDialect, func::FuncDialect>();
    ctx.appendDialectRegistry(registry);
    ctx.loadAllAvailableDialects();
  }

  /// The training step (AdamW) of a forward pass.
  OwningOpRef<ModuleOp> step(const std::string &forward) {
    OwningOpRef<ModuleOp> m = parseSourceString<ModuleOp>(forward, &ctx);
    EXPECT_TRUE(m) << forward;
    if (!m)
      return m;
    PassManager pm(&ctx);
    pm.addPass(createCanonicalizerPass());
    pm.addPass(graph::createAutodiff());
    pm.addPass(graph::createOptimizer());
    pm.addPass(createCanonicalizerPass());
    pm.addPass(createCSEPass());
    EXPECT_TRUE(succeeded(pm.run(*m)));
    return m;
  }

  /// Gives `m` a plan on `mesh` with ZeRO `zero`, keeping the layouts a
  /// search wrote into its plan.
  static void setPlan(ModuleOp m, const std::string &mesh, int zero = 0) {
    PlanAttr old = getPlan(m);
    planning::Plan plan = planning::planFromAttr(old);
    plan.mesh = runtime::MeshShape::parse(mesh).value();
    plan.zero = zero;
    std::string error;
    auto attr = planning::planToAttr(m.getContext(), plan, error);
    ASSERT_TRUE(succeeded(attr)) << error;
    m->setAttr(kPlanAttr, old ? attr->withLayouts(old.getLayouts()) : *attr);
  }

  /// Annotates and propagates `m` on `mesh` (in place), optionally
  /// partitioning it too.
  LogicalResult place(ModuleOp m, const std::string &mesh,
                      bool partition = false, int zero = 0) {
    setPlan(m, mesh, zero);
    PassManager pm(&ctx);
    pm.addPass(createShardAnnotate());
    pm.addPass(createShardPropagate());
    if (partition)
      pm.addPass(createShardPartition());
    return pm.run(m);
  }

  /// The search's price of `m` placed on `mesh` as it is annotated.
  double price(ModuleOp m, const std::string &mesh) {
    OwningOpRef<ModuleOp> clone(m.clone());
    if (failed(place(*clone, mesh)))
      return -1;
    auto p = priceShardedStep(*clone, costs);
    return succeeded(p) ? p->seconds : -1;
  }

  LayoutSearchResult search(ModuleOp m, const std::string &mesh,
                            bool constraints = true) {
    setPlan(m, mesh);
    LayoutSearchOptions o;
    o.costs = costs;
    o.constraints = constraints;
    auto r = searchLayouts(m, o);
    EXPECT_TRUE(succeeded(r));
    if (failed(r))
      return {};
    EXPECT_TRUE(r->solved) << r->error;
    EXPECT_TRUE(r->optimal);
    return *r;
  }

  static std::string layoutOf(const LayoutSearchResult &r, StringRef name) {
    for (auto &[n, l] : r.layouts)
      if (n == name)
        return l;
    return "(not searched)";
  }

  /// The sum of the ring costs of the collectives a partitioned module
  /// runs (what dtcc-shard-partition really inserted).
  double collectiveSeconds(ModuleOp m) {
    auto mesh = m->getAttrOfType<MeshAttr>(kMeshAttr);
    double s = 0;
    m.walk([&](Operation *op) {
      auto bytesOf = [](Value v) {
        auto t = cast<RankedTensorType>(v.getType());
        return (double)t.getNumElements() *
               (double)(t.getElementTypeBitWidth() / 8);
      };
      auto axis = op->getAttrOfType<StringAttr>("axis");
      if (!axis)
        return;
      int64_t n = mesh.getSize(axis.getValue());
      if (isa<AllReduceOp>(op))
        s += costs.allReduce(bytesOf(op->getResult(0)), n, axis.str());
      else if (isa<AllGatherOp>(op))
        s += costs.allGather(bytesOf(op->getResult(0)), n, axis.str());
      else if (isa<ReduceScatterOp>(op))
        s += costs.reduceScatter(bytesOf(op->getOperand(0)), n, axis.str());
    });
    return s;
  }

  MLIRContext ctx;
  StepCostModel costs;
};

constexpr double kRel = 1e-9;

/// Compute-bound figures: splitting a wide matmul pays for a collective.
StepCostModel computeBound() {
  StepCostModel c;
  c.flops = 1e9;
  c.busBandwidth = 1e10;
  c.latency = 1e-6;
  return c;
}

TEST_F(SearchLayoutsTest, TwoLayerMlpIsMegatron) {
  // x[16, 64] -> 64x512 -> relu -> 512x64: column-parallel then
  // row-parallel needs one all-reduce of the [16, 64] output forward (and
  // scalars for the gradient norm); every other split moves more.
  costs = computeBound();
  auto m = step(mlp(16, {64, 512, 64}, /*bias=*/false));
  double megatron = price(*m, "tp=2");
  LayoutSearchResult r = search(*m, "tp=2");
  EXPECT_EQ(layoutOf(r, "fc0"), "cols");
  EXPECT_EQ(layoutOf(r, "fc1"), "rows");
  EXPECT_EQ(r.constraints, 0);
  // Megatron's own layouts: the same price.
  EXPECT_NEAR(r.seconds, megatron, kRel * megatron);
  // And what the search wrote is what propagation builds.
  EXPECT_NEAR(price(*m, "tp=2"), r.seconds, kRel * r.seconds);
}

TEST_F(SearchLayoutsTest, TinyLayerStaysWhole) {
  // A 4-wide bottleneck: splitting its 16x4x64 product saves 4 us of
  // compute but costs a collective's latency (100 us per ring step), so
  // it stays whole; Megatron's rule splits it.
  costs = computeBound();
  costs.latency = 1e-4;
  auto m = step(mlp(16, {64, 512, 4, 64}, /*bias=*/false));
  double megatron = price(*m, "tp=2");
  LayoutSearchResult r = search(*m, "tp=2");
  EXPECT_EQ(layoutOf(r, "fc2"), "whole");
  EXPECT_LT(r.seconds, megatron);
  EXPECT_NEAR(price(*m, "tp=2"), r.seconds, kRel * r.seconds);
}

TEST_F(SearchLayoutsTest, BranchesSplitTogether) {
  // Both branches column-parallel, their sum split like them, the last
  // layer row-parallel: one all-reduce of the [16, 32] output.
  costs = computeBound();
  auto m = step(branchy(16, 64, 512, 32));
  LayoutSearchResult r = search(*m, "tp=2");
  EXPECT_EQ(layoutOf(r, "A"), "cols");
  EXPECT_EQ(layoutOf(r, "B"), "cols");
  EXPECT_EQ(layoutOf(r, "C"), "rows");
  EXPECT_NEAR(price(*m, "tp=2"), r.seconds, kRel * r.seconds);
}

/// Every combination of the variables' layouts, each annotated, propagated
/// and priced: the search restricted to layouts finds the least price; with
/// constraints it does at least as well.
TEST_F(SearchLayoutsTest, MatchesBruteForceOverLayouts) {
  for (int figures = 0; figures < 4; ++figures) {
    costs = computeBound();
    if (figures == 1)
      costs.latency = 1e-4; // latency-bound
    if (figures == 2)
      costs.busBandwidth = 1e7; // bandwidth-bound
    if (figures == 3)
      costs.memoryBandwidth = 1e8; // elementwise ops matter
    auto base = step(mlp(8, {32, 64, 16}, /*bias=*/true));
    // The parameters and their optimizer state, by parameter.
    std::map<std::string, SmallVector<graph::VariableOp>> groups;
    for (auto var : base->getOps<graph::VariableOp>()) {
      StringRef name = var.getSymName();
      if (var.getTensorType().getRank() == 0)
        continue;
      groups[name.split('/').first.str()].push_back(var);
    }
    std::vector<std::string> names;
    std::vector<std::vector<ShardingAttr>> options;
    for (auto &[name, vars] : groups) {
      auto type = vars.front().getTensorType();
      std::vector<ShardingAttr> layouts{
          ShardingAttr::replicated(&ctx, type.getRank())};
      for (int64_t d = 0; d < type.getRank(); ++d) {
        SmallVector<DimShardingAttr> dims(type.getRank(),
                                          DimShardingAttr::get(&ctx, {}, 1));
        dims[d] = DimShardingAttr::get(&ctx, {StringAttr::get(&ctx, "tp")}, 1);
        layouts.push_back(ShardingAttr::get(&ctx, dims, {}));
      }
      names.push_back(name);
      options.push_back(layouts);
    }
    double best = INFINITY;
    int64_t combos = 0;
    std::vector<size_t> pick(names.size(), 0);
    while (true) {
      OwningOpRef<ModuleOp> m(base->clone());
      for (size_t g = 0; g < names.size(); ++g)
        for (auto var : m->getOps<graph::VariableOp>())
          if (var.getSymName().split('/').first == names[g])
            var->setAttr(kShardingAttr, options[g][pick[g]]);
      best = std::min(best, price(*m, "tp=2"));
      ++combos;
      size_t g = 0;
      while (g < pick.size() && ++pick[g] == options[g].size())
        pick[g++] = 0;
      if (g == pick.size())
        break;
    }
    EXPECT_EQ(combos, 3 * 2 * 3 * 2);

    OwningOpRef<ModuleOp> layoutsOnly(base->clone());
    LayoutSearchResult r = search(*layoutsOnly, "tp=2", /*constraints=*/false);
    EXPECT_NEAR(r.seconds, best, kRel * best) << "figures " << figures;
    EXPECT_EQ(r.constraints, 0);
    EXPECT_NEAR(price(*layoutsOnly, "tp=2"), r.seconds, kRel * r.seconds);

    OwningOpRef<ModuleOp> withConstraints(base->clone());
    LayoutSearchResult c = search(*withConstraints, "tp=2");
    EXPECT_LE(c.seconds, best * (1 + kRel)) << "figures " << figures;
    EXPECT_NEAR(price(*withConstraints, "tp=2"), c.seconds, kRel * c.seconds);
  }
}

/// The price of reshards is what the partitioner inserts: on Megatron's
/// layouts and on the search's, on tp and on dp x tp meshes.
TEST_F(SearchLayoutsTest, PricesThePartitionersCollectives) {
  for (std::string mesh : {"tp=2", "tp=4", "dp=2,tp=2"})
    for (bool searched : {false, true}) {
      costs = computeBound();
      // tp inside a node, dp across nodes.
      costs.links = {{"tp", 4e10, 5e-7}, {"dp", 2e9, 3e-5}};
      auto m = step(mlp(16, {64, 128, 32, 64}, /*bias=*/true));
      if (searched)
        search(*m, mesh);
      OwningOpRef<ModuleOp> placed(m->clone());
      ASSERT_TRUE(succeeded(place(*placed, mesh)));
      auto p = priceShardedStep(*placed, costs);
      ASSERT_TRUE(succeeded(p));
      ASSERT_TRUE(succeeded(place(*m, mesh, /*partition=*/true)));
      double real = collectiveSeconds(*m);
      EXPECT_NEAR(p->commSeconds, real, kRel * real)
          << mesh << (searched ? " searched" : " megatron");
    }
}

TEST_F(SearchLayoutsTest, DataParallelMeshPricesWhatItWrites) {
  costs = computeBound();
  auto m = step(mlp(16, {64, 256, 64}, /*bias=*/true));
  LayoutSearchResult r = search(*m, "dp=2,tp=2");
  EXPECT_NEAR(price(*m, "dp=2,tp=2"), r.seconds, kRel * r.seconds);
}

/// With ZeRO, annotate gives a search's constraint on a gradient the dp
/// split instead of adding a second one (one reduce-scatter, not an
/// all-reduce and a slice); parameters and their state stay loads.
TEST_F(SearchLayoutsTest, ZeroExtendsTheSearchsGradientConstraints) {
  costs = computeBound();
  costs.latency = 1e-4;
  for (int zero : {1, 3}) {
    auto m = step(mlp(16, {64, 512, 4, 64}, /*bias=*/true));
    LayoutSearchResult r = search(*m, "dp=2,tp=2");
    int onGradients = 0;
    m->walk([&](graph::AdamwOp op) {
      onGradients += (bool)op.getOperand(1).getDefiningOp<ConstraintOp>();
    });
    EXPECT_GT(onGradients, 0);
    EXPECT_GE(r.constraints, onGradients);
    OwningOpRef<ModuleOp> annotated(m->clone());
    setPlan(*annotated, "dp=2,tp=2", zero);
    PassManager pm(&ctx);
    pm.addPass(createShardAnnotate());
    ASSERT_TRUE(succeeded(pm.run(*annotated)));
    int optimizers = 0;
    annotated->walk([&](graph::AdamwOp op) {
      ++optimizers;
      EXPECT_TRUE(op.getOperand(0).getDefiningOp<graph::LoadOp>());
      if (auto c = op.getOperand(1).getDefiningOp<ConstraintOp>())
        EXPECT_FALSE(c.getOperand().getDefiningOp<ConstraintOp>())
            << "zero " << zero;
    });
    EXPECT_EQ(optimizers, 6);
    ASSERT_TRUE(succeeded(place(*m, "dp=2,tp=2", /*partition=*/true, zero)));
  }
}

TEST_F(SearchLayoutsTest, NoTensorParallelismChangesNothing) {
  auto m = step(mlp(16, {64, 256, 64}, /*bias=*/false));
  LayoutSearchResult r = search(*m, "dp=4");
  EXPECT_TRUE(r.layouts.empty());
  for (auto var : m->getOps<graph::VariableOp>())
    EXPECT_FALSE(var->hasAttr(kShardingAttr));
}

} // namespace
