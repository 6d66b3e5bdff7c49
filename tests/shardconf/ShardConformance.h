//===- ShardConformance.h - every op under every sharding its rule allows -*- C++ -*-===//
//
// The pieces of the sharding conformance suite (DtccShardConformance): the
// op cases, the enumeration of the shardings a rule allows on a mesh, and
// the comparison of a sharded run's outputs with the single-device run's.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_TESTS_SHARDCONF_SHARDCONFORMANCE_H
#define DTCC_TESTS_SHARDCONF_SHARDCONFORMANCE_H

#include "passes/Sharding/ShardingUtils.h"
#include "runtime/base/HostTensor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dtcc::shardconf {

//===----------------------------------------------------------------------===//
// Cases
//===----------------------------------------------------------------------===//

/// An input of a case: a variable `@name` loaded as `%name` (trainable when
/// float), with uniform values in [lo, hi] (integers: whole numbers in it,
/// i1: random booleans).
struct Param {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype = "f64";
  double lo = -1.0, hi = 1.0;
};

/// One op under test: `body` (dgraph in MLIR syntax, reading the params)
/// ends with the op under test; the lines before it make helper values.
/// Dimensions a split is meant to reach are multiples of 4.
struct OpCase {
  std::string name;
  std::vector<Param> params;
  std::string body;
};

/// Every case, in a fixed order. One entry per op at least; an op of the
/// dgraph dialect with a sharding rule and no case is reported as skipped.
std::vector<OpCase> opCases();

//===----------------------------------------------------------------------===//
// Shardings
//===----------------------------------------------------------------------===//

/// A device mesh the suite runs on.
struct MeshSpec {
  std::string name; ///< "tp=2", "tp=4", "dp=2,tp=2"
  std::vector<std::string> axes;
  std::vector<int64_t> sizes;
  int64_t ranks() const {
    int64_t n = 1;
    for (int64_t s : sizes)
      n *= s;
    return n;
  }
};

/// The meshes: one axis of 2 ranks, one axis of 4, and 2 x 2.
std::vector<MeshSpec> suiteMeshes();

/// The shardings of one rule on one mesh.
struct Enumeration {
  /// Factor assignments (FactorAxes::axes per factor; groups all 1).
  std::vector<shard::FactorAxes> shardings;
  /// How many the rule allows before the bound.
  int64_t allowed = 0;
  /// Why there is none (empty when there is at least one).
  std::string none;
};

/// The most shardings run per op and mesh; beyond it an evenly spaced
/// subset of the allowed ones (in enumeration order) is run.
constexpr size_t kMaxShardingsPerMesh = 12;

/// Every sharding of `rule` the suite runs on `mesh`. A factor may be split
/// when it is not kReplicated, is larger than 1 and the axes' product
/// divides it. On a one-axis mesh: each such factor over the axis. On a
/// two-axis mesh: each pair of factors, the first over the first axis and
/// the second over the second, and each factor over both axes. Assignments
/// that split two factors of one tensor dimension are left out (a
/// ShardingAttr splits a dimension once). Special factors and max/min
/// reductions are included: propagation decides whether their split is
/// taken, and the suite skips those it refuses.
Enumeration enumerateShardings(const graph::ShardingRule &rule,
                               const MeshSpec &mesh, mlir::MLIRContext *ctx,
                               size_t bound = kMaxShardingsPerMesh);

/// The shardings of an op's operands and results under `axes`, as the
/// partitioner sees them: "(<[{tp}, {}]>, <[{}, {}]>) -> <[{tp}, {}]>".
std::string describeSharding(const graph::ShardingRule &rule,
                             const shard::FactorAxes &axes,
                             mlir::MLIRContext *ctx);

//===----------------------------------------------------------------------===//
// Comparison
//===----------------------------------------------------------------------===//

/// Relative tolerance of float outputs: |got - want| <= tol * max(1,
/// max |want|) element by element. f64: 1e-12 (the sharded run sums in
/// another order; a wrong collective is off by O(1)); f32: 1e-5; halves
/// 1e-2. Integers and booleans must be equal.
double toleranceOf(runtime::DType dtype);

/// Compares a sharded run's outputs with the single-device run's; empty
/// when every output matches, else what differs first: the output's name,
/// the largest difference and where.
std::string compareOutputs(const std::vector<runtime::HostTensor> &got,
                           const std::vector<runtime::HostTensor> &want,
                           const std::vector<std::string> &names);

} // namespace dtcc::shardconf

#endif // DTCC_TESTS_SHARDCONF_SHARDCONFORMANCE_H
