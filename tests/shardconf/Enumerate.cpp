//===- Enumerate.cpp - the shardings a rule allows on a mesh --------------===//

#include "tests/shardconf/ShardConformance.h"

#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace dtcc;
using namespace dtcc::shardconf;
using Kind = graph::ShardingRule::Kind;

std::vector<MeshSpec> dtcc::shardconf::suiteMeshes() {
  return {{"tp=2", {"tp"}, {2}},
          {"tp=4", {"tp"}, {4}},
          {"dp=2,tp=2", {"dp", "tp"}, {2, 2}}};
}

namespace {

/// Whether no dimension of any tensor has two split factors.
bool representable(const graph::ShardingRule &rule,
                   const shard::FactorAxes &axes) {
  auto check = [&](const graph::ShardingRule::TensorFactors &t) {
    for (const auto &dim : t) {
      int split = 0;
      for (int64_t f : dim)
        split += !axes.axes[f].empty();
      if (split > 1)
        return false;
    }
    return true;
  };
  for (const auto &t : rule.operands)
    if (!check(t))
      return false;
  for (const auto &t : rule.results)
    if (!check(t))
      return false;
  return true;
}

} // namespace

Enumeration dtcc::shardconf::enumerateShardings(const graph::ShardingRule &rule,
                                                const MeshSpec &mesh,
                                                MLIRContext *ctx, size_t bound) {
  Enumeration out;
  const size_t n = rule.factors.size();
  auto splittable = [&](size_t f, int64_t ranks) {
    const auto &factor = rule.factors[f];
    return factor.kind != Kind::kReplicated && factor.size > 1 &&
           factor.size % ranks == 0;
  };
  bool anySplittable = false;
  for (const auto &factor : rule.factors)
    anySplittable |= factor.kind != Kind::kReplicated && factor.size > 1;

  std::vector<StringAttr> axes;
  for (const std::string &a : mesh.axes)
    axes.push_back(StringAttr::get(ctx, a));
  std::vector<shard::FactorAxes> all;
  bool divisible = false;
  auto add = [&](std::initializer_list<std::pair<size_t, std::vector<StringAttr>>> splits) {
    shard::FactorAxes a;
    a.resize(n);
    for (const auto &[f, list] : splits)
      a.axes[f].assign(list.begin(), list.end());
    divisible = true;
    if (representable(rule, a))
      all.push_back(std::move(a));
  };
  if (axes.size() == 1) {
    for (size_t f = 0; f < n; ++f)
      if (splittable(f, mesh.sizes[0]))
        add({{f, {axes[0]}}});
  } else if (axes.size() == 2) {
    for (size_t f = 0; f < n; ++f)
      for (size_t g = f + 1; g < n; ++g)
        if (splittable(f, mesh.sizes[0]) && splittable(g, mesh.sizes[1]))
          add({{f, {axes[0]}}, {g, {axes[1]}}});
    for (size_t f = 0; f < n; ++f)
      if (splittable(f, mesh.ranks()))
        add({{f, {axes[0], axes[1]}}});
  }

  out.allowed = all.size();
  if (all.empty()) {
    if (n == 0)
      out.none = "no factor (scalars only)";
    else if (!anySplittable)
      out.none = "no factor can be split (every one is whole)";
    else if (!divisible)
      out.none = axes.size() == 2 ? "no factors that the axes divide"
                                  : "no factor that the mesh divides";
    else
      out.none = "every split puts two factors on one dimension";
    return out;
  }
  if (all.size() <= bound) {
    out.shardings = std::move(all);
    return out;
  }
  // An evenly spaced subset, first and last included.
  for (size_t i = 0; i < bound; ++i)
    out.shardings.push_back(all[bound == 1 ? 0 : i * (all.size() - 1) / (bound - 1)]);
  return out;
}

std::string dtcc::shardconf::describeSharding(const graph::ShardingRule &rule,
                                              const shard::FactorAxes &axes,
                                              MLIRContext *ctx) {
  std::string s;
  llvm::raw_string_ostream os(s);
  auto print = [&](const graph::ShardingRule::TensorFactors &t, bool result) {
    shard::ShardingAttr attr = shard::project(rule, t, axes, result, ctx);
    // "#dshard.sharding<[{tp}, {}]>" without the dialect prefix.
    std::string one;
    llvm::raw_string_ostream o(one);
    o << attr;
    llvm::StringRef r(one);
    r.consume_front("#dshard.sharding");
    os << r;
  };
  os << "(";
  for (auto [i, t] : llvm::enumerate(rule.operands)) {
    if (i)
      os << ", ";
    print(t, false);
  }
  os << ") -> ";
  if (rule.results.size() != 1)
    os << "(";
  for (auto [i, t] : llvm::enumerate(rule.results)) {
    if (i)
      os << ", ";
    print(t, true);
  }
  if (rule.results.size() != 1)
    os << ")";
  return s;
}
