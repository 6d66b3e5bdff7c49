//===- ShardingIlp.h - the per-op sharding choice as an ILP -----*- C++ -*-===//
//
// Plain C++ (no MLIR): the cost model of collectives and the assignment
// problem dtcc-plan-search-layouts solves with CBC. Each node (an op, or a
// variable with its loads and stores) picks one choice; each value a node
// makes is left in a state by that choice, and each use of it needs it in a
// state; bringing a value from one state to another costs a reshard, paid
// once per value and target however many uses need it (the partitioner
// reuses a reshard).
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_PASSES_PLANNING_SHARDINGILP_H
#define DTCC_PASSES_PLANNING_SHARDINGILP_H

#include "planner/CostPrimitives.h"

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dtcc::shard {

/// The figures a step is priced with: matrix products at a sustained rate,
/// other ops by the bytes they read and write, collectives over a ring
/// (nccl-tests' bus-bandwidth formulas) with a latency per ring step.
struct StepCostModel {
  double flops = 1e11; ///< sustained FLOP/s of matrix products
  /// Sustained bytes/s of ops other than matrix products; 0: not priced.
  double memoryBandwidth = 0;
  double busBandwidth = 1e9; ///< bytes/s a rank sends in a ring
  double latency = 20e-6;    ///< seconds per ring step
  /// The link of one mesh axis's groups where it differs from the figures
  /// above (tp inside a node, dp across nodes).
  struct Link {
    std::string axis;
    double busBandwidth = 0, latency = 0;
  };
  std::vector<Link> links;

  /// Seconds for `flops` floating-point operations.
  double compute(double flops) const;
  /// Seconds to read and write `bytes` (0 when memoryBandwidth is 0).
  double memory(double bytes) const;
  /// Collectives over `n` ranks of `axis`, priced by the cost primitives
  /// the planner ranks plans with (planner/CostPrimitives.h: bus volume
  /// over the axis's bandwidth plus its latency times the fewer of a
  /// ring's and a tree's steps). An all-reduce of `bytes`; an all-gather
  /// whose result has `bytes`; a reduce-scatter whose input has `bytes`.
  double allReduce(double bytes, int64_t n, const std::string &axis = "") const;
  double allGather(double bytes, int64_t n, const std::string &axis = "") const;
  double reduceScatter(double bytes, int64_t n,
                       const std::string &axis = "") const;

private:
  double priced(planner::Collective kind, double bytes, int64_t n,
                const std::string &axis) const;
};

/// Nodes pick one choice each, minimizing the sum of their choices' costs
/// and of the reshards the choices imply. Costs are seconds.
class ShardingProblem {
public:
  static constexpr double kForbidden = std::numeric_limits<double>::infinity();

  /// A node with one cost per choice; returns its id.
  int addNode(std::string name, std::vector<double> costs);
  /// A value made by `node`: its choice c leaves the value in state
  /// `stateOf[c]`. `transitions[s][t]` is the cost of bringing it from
  /// state s to state t (kForbidden where no reshard can); the diagonal is
  /// ignored. Returns the value's id.
  int addValue(int node, std::vector<int> stateOf,
               std::vector<std::vector<double>> transitions);
  /// A use of `value` by `node`, whose choice c needs the value in state
  /// `needs[c]`.
  void addUse(int value, int node, std::vector<int> needs);
  /// When every listed value is in its listed state, `node` picks one of
  /// `allowed` (what a deterministic pass would make of those inputs).
  void addRule(std::vector<std::pair<int, int>> when, int node,
               std::vector<int> allowed);

  int numNodes() const { return (int)nodes_.size(); }
  int numChoices(int node) const { return (int)nodes_[node].costs.size(); }
  const std::string &nodeName(int node) const { return nodes_[node].name; }

  /// The cost of an assignment (one choice per node): kForbidden when it
  /// needs a forbidden reshard or breaks a rule.
  double cost(const std::vector<int> &choice) const;

  struct Solution {
    std::vector<int> choice;
    double cost = kForbidden;
    /// Proven optimal (not stopped by the time limit).
    bool optimal = false;
    double solveSeconds = 0;
    int64_t columns = 0, rows = 0;
  };

  /// Solves the problem as a 0-1 ILP with CBC within `timeLimit` seconds.
  /// Fails (with `error`) when CBC finds no feasible assignment in time.
  std::optional<Solution> solve(double timeLimit, std::string &error) const;

  /// Tries every assignment (for tests: the choices' counts multiply).
  Solution bruteForce() const;

private:
  struct Node {
    std::string name;
    std::vector<double> costs;
  };
  struct Value {
    int node;
    std::vector<int> stateOf;
    std::vector<std::vector<double>> transitions;
  };
  struct Use {
    int value, node;
    std::vector<int> needs;
  };
  struct Rule {
    std::vector<std::pair<int, int>> when;
    int node;
    std::vector<int> allowed;
  };
  std::vector<Node> nodes_;
  std::vector<Value> values_;
  std::vector<Use> uses_;
  std::vector<Rule> rules_;
};

} // namespace dtcc::shard

#endif // DTCC_PASSES_PLANNING_SHARDINGILP_H
