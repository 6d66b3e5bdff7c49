//===- ShardingIlp.cpp - the per-op sharding choice as an ILP -------------===//
//
// The formulation (as in Alpa's intra-op pass, with shared reshards):
//   x[n][c]     binary, node n picks choice c;     sum_c x[n][c] = 1
//   e[u][s][t]  in [0, 1], use u of value v sees v in state s and needs t:
//               sum_t e[u][s][t] = X(v, s), sum_s e[u][s][t] = Y(u, t),
//               where X(v, s) sums the producer's choices leaving v in s
//               and Y(u, t) the user's choices needing t (integral when
//               the x are); e = 0 for a forbidden reshard
//   z[v][s][t]  in [0, 1], v is resharded from s to t, paid once however
//               many uses need it: z[v][s][t] >= e[u][s][t]
//   rules: sum_i X(v_i, s_i) - sum_{c allowed} x[n][c] <= k - 1
//   minimize sum x * cost + sum z * transition
//
//===----------------------------------------------------------------------===//

#include "passes/Planning/ShardingIlp.h"

#include <coin/Cbc_C_Interface.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

namespace dtcc::shard {

namespace {

/// The functions of CBC's C interface the solve calls, as X(name) for
/// Cbc_name.
#define DTCC_CBC_FUNCTIONS(X)                                                  \
  X(newModel)                                                                  \
  X(loadProblem)                                                               \
  X(setInteger)                                                                \
  X(setObjSense)                                                               \
  X(setLogLevel)                                                               \
  X(setParameter)                                                              \
  X(setMaximumSeconds)                                                         \
  X(setAllowableGap)                                                           \
  X(setAllowableFractionGap)                                                   \
  X(solve)                                                                     \
  X(bestSolution)                                                              \
  X(isProvenInfeasible)                                                        \
  X(isProvenOptimal)                                                           \
  X(deleteModel)

/// CBC's C interface, loaded when the first ILP is solved. Linked, CBC
/// brought CLP, LAPACK and OpenBLAS into every dtcc process, and
/// OpenBLAS's thread pool, started as it loads, spun on the other core
/// for a tenth of a second of each compile (most compiles solve no ILP;
/// the ONNX test suites run thousands of them).
struct CbcApi {
#define DTCC_CBC_MEMBER(name) decltype(&Cbc_##name) name = nullptr;
  DTCC_CBC_FUNCTIONS(DTCC_CBC_MEMBER)
#undef DTCC_CBC_MEMBER
  std::string error; ///< why it did not load; empty when it did
};

/// The API, loaded once: from $DTCC_CBC_LIBRARY where it is set (a path or
/// a soname; the only one tried), else by CBC's soname, else the library
/// CMake found.
const CbcApi &cbc() {
  static const CbcApi api = [] {
    CbcApi a;
    std::vector<const char *> names = {"libCbcSolver.so.3",
                                       DTCC_CBC_SOLVER_LIBRARY};
    if (const char *chosen = std::getenv("DTCC_CBC_LIBRARY"))
      names = {chosen};
    void *lib = nullptr;
    std::string tried;
    for (const char *name : names) {
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)))
        break;
      const char *why = dlerror();
      tried += std::string(tried.empty() ? "" : "; ") + (why ? why : name);
    }
    if (!lib) {
      a.error = "cannot load the CBC solver the ILP layout search needs "
                "(Debian's coinor-libcbc3.1): " +
                tried;
      return a;
    }
    auto get = [&](auto &fn, const char *symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(
          dlsym(lib, symbol));
      if (!fn && a.error.empty())
        a.error = std::string("the CBC solver library has no ") + symbol;
    };
#define DTCC_CBC_LOAD(name) get(a.name, "Cbc_" #name);
    DTCC_CBC_FUNCTIONS(DTCC_CBC_LOAD)
#undef DTCC_CBC_LOAD
    return a;
  }();
  return api;
}

#undef DTCC_CBC_FUNCTIONS

} // namespace

double StepCostModel::compute(double f) const { return f / flops; }

double StepCostModel::memory(double bytes) const {
  return memoryBandwidth > 0 ? bytes / memoryBandwidth : 0;
}

double StepCostModel::priced(planner::Collective kind, double bytes,
                             int64_t n, const std::string &axis) const {
  double bandwidth = busBandwidth, perStep = latency;
  for (const Link &l : links)
    if (l.axis == axis) {
      bandwidth = l.busBandwidth;
      perStep = l.latency;
    }
  return planner::collectiveSeconds(kind, bytes, n, bandwidth, perStep);
}

double StepCostModel::allReduce(double bytes, int64_t n,
                                const std::string &axis) const {
  return priced(planner::Collective::kAllReduce, bytes, n, axis);
}

double StepCostModel::allGather(double bytes, int64_t n,
                                const std::string &axis) const {
  return priced(planner::Collective::kAllGather, bytes, n, axis);
}

double StepCostModel::reduceScatter(double bytes, int64_t n,
                                    const std::string &axis) const {
  return priced(planner::Collective::kReduceScatter, bytes, n, axis);
}

int ShardingProblem::addNode(std::string name, std::vector<double> costs) {
  nodes_.push_back({std::move(name), std::move(costs)});
  return (int)nodes_.size() - 1;
}

int ShardingProblem::addValue(int node, std::vector<int> stateOf,
                              std::vector<std::vector<double>> transitions) {
  values_.push_back({node, std::move(stateOf), std::move(transitions)});
  return (int)values_.size() - 1;
}

void ShardingProblem::addUse(int value, int node, std::vector<int> needs) {
  uses_.push_back({value, node, std::move(needs)});
}

void ShardingProblem::addRule(std::vector<std::pair<int, int>> when, int node,
                              std::vector<int> allowed) {
  rules_.push_back({std::move(when), node, std::move(allowed)});
}

double ShardingProblem::cost(const std::vector<int> &choice) const {
  double total = 0;
  for (size_t n = 0; n < nodes_.size(); ++n)
    total += nodes_[n].costs[choice[n]];
  std::vector<std::set<int>> targets(values_.size());
  for (const Use &u : uses_)
    targets[u.value].insert(u.needs[choice[u.node]]);
  for (size_t v = 0; v < values_.size(); ++v) {
    const Value &value = values_[v];
    int s = value.stateOf[choice[value.node]];
    for (int t : targets[v])
      if (t != s)
        total += value.transitions[s][t];
  }
  for (const Rule &r : rules_) {
    bool holds = std::all_of(r.when.begin(), r.when.end(), [&](auto vs) {
      const Value &value = values_[vs.first];
      return value.stateOf[choice[value.node]] == vs.second;
    });
    if (holds && std::find(r.allowed.begin(), r.allowed.end(),
                           choice[r.node]) == r.allowed.end())
      return kForbidden;
  }
  return total;
}

ShardingProblem::Solution ShardingProblem::bruteForce() const {
  Solution best;
  best.optimal = true;
  std::vector<int> choice(nodes_.size(), 0);
  while (true) {
    double c = cost(choice);
    if (c < best.cost) {
      best.cost = c;
      best.choice = choice;
    }
    size_t n = 0;
    while (n < choice.size() && ++choice[n] == numChoices((int)n))
      choice[n++] = 0;
    if (n == choice.size())
      break;
  }
  return best;
}

namespace {

std::string seconds(double s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

/// Rows of a 0-1 program, built sparse and handed to CBC column-wise.
struct Program {
  std::vector<double> objective, colLower, colUpper;
  std::vector<bool> integer;
  std::vector<std::map<int, double>> rows;
  std::vector<double> rowLower, rowUpper;

  int addColumn(double cost, bool isInteger) {
    objective.push_back(cost);
    colLower.push_back(0);
    colUpper.push_back(1);
    integer.push_back(isInteger);
    return (int)objective.size() - 1;
  }
  std::map<int, double> &addRow(double lower, double upper) {
    rows.emplace_back();
    rowLower.push_back(lower);
    rowUpper.push_back(upper);
    return rows.back();
  }
};

} // namespace

std::optional<ShardingProblem::Solution>
ShardingProblem::solve(double timeLimit, std::string &error) const {
  auto start = std::chrono::steady_clock::now();
  // Seconds are tiny numbers for a solver's tolerances: work in
  // microseconds.
  constexpr double kScale = 1e6;
  Program p;
  std::vector<std::vector<int>> x(nodes_.size());
  for (size_t n = 0; n < nodes_.size(); ++n) {
    if (nodes_[n].costs.empty()) {
      error = "node '" + nodes_[n].name + "' has no choice";
      return std::nullopt;
    }
    auto &row = p.addRow(1, 1);
    for (double c : nodes_[n].costs) {
      bool forbidden = std::isinf(c);
      int col = p.addColumn(forbidden ? 0 : c * kScale, true);
      if (forbidden)
        p.colUpper[col] = 0;
      x[n].push_back(col);
      row[col] = 1;
    }
  }
  // X(v, s) and Y(u, t) as coefficient lists.
  auto addX = [&](std::map<int, double> &row, int v, int s, double coef) {
    const Value &value = values_[v];
    for (size_t c = 0; c < value.stateOf.size(); ++c)
      if (value.stateOf[c] == s)
        row[x[value.node][c]] += coef;
  };
  // Each use gets edge variables e[s][t] (the producer leaves state s,
  // the user needs t) whose marginals are the two nodes' choices: the
  // local polytope, much tighter than z >= X + Y - 1 alone. A reshard
  // z[v][s][t] is paid when any use's edge needs it.
  std::map<std::tuple<int, int, int>, int> z;
  for (const Use &u : uses_) {
    const Value &value = values_[u.value];
    std::set<int> sources(value.stateOf.begin(), value.stateOf.end());
    std::set<int> targets(u.needs.begin(), u.needs.end());
    if (sources.size() == 1 && targets.size() == 1) {
      // Both ends fixed: a constant cost (or an impossible use).
      int s = *sources.begin(), t = *targets.begin();
      if (s != t && std::isinf(value.transitions[s][t])) {
        error = "the problem is infeasible: node '" + nodes_[u.node].name +
                "' always needs a reshard no collective makes";
        return std::nullopt;
      }
      if (s != t && value.transitions[s][t] != 0) {
        auto key = std::make_tuple(u.value, s, t);
        auto it = z.find(key);
        if (it == z.end())
          it = z.emplace(key,
                         p.addColumn(value.transitions[s][t] * kScale, false))
                   .first;
        p.colLower[it->second] = 1;
      }
      continue;
    }
    std::map<std::pair<int, int>, int> e;
    for (int s : sources)
      for (int t : targets) {
        int col = p.addColumn(0, false);
        double cost = s == t ? 0 : value.transitions[s][t];
        if (std::isinf(cost))
          p.colUpper[col] = 0;
        e[{s, t}] = col;
        if (s == t || cost == 0 || std::isinf(cost))
          continue;
        auto key = std::make_tuple(u.value, s, t);
        auto it = z.find(key);
        if (it == z.end())
          it = z.emplace(key, p.addColumn(cost * kScale, false)).first;
        auto &link = p.addRow(-ShardingProblem::kForbidden, 0);
        link[col] = 1;
        link[it->second] = -1;
      }
    for (int s : sources) {
      auto &row = p.addRow(0, 0);
      addX(row, u.value, s, -1);
      for (int t : targets)
        row[e[{s, t}]] += 1;
    }
    for (int t : targets) {
      auto &row = p.addRow(0, 0);
      for (size_t c = 0; c < u.needs.size(); ++c)
        if (u.needs[c] == t)
          row[x[u.node][c]] -= 1;
      for (int s : sources)
        row[e[{s, t}]] += 1;
    }
  }
  for (const Rule &r : rules_) {
    auto &row =
        p.addRow(-ShardingProblem::kForbidden, (double)r.when.size() - 1);
    for (auto [v, s] : r.when)
      addX(row, v, s, 1);
    for (int c : r.allowed)
      row[x[r.node][c]] -= 1;
  }

  // Column-wise for Cbc_loadProblem.
  int numCols = (int)p.objective.size(), numRows = (int)p.rows.size();
  std::vector<std::vector<std::pair<int, double>>> cols(numCols);
  for (int r = 0; r < numRows; ++r)
    for (auto [c, coef] : p.rows[r])
      if (coef != 0)
        cols[c].push_back({r, coef});
  std::vector<CoinBigIndex> starts{0};
  std::vector<int> index;
  std::vector<double> value;
  for (const auto &col : cols) {
    for (auto [r, coef] : col) {
      index.push_back(r);
      value.push_back(coef);
    }
    starts.push_back((CoinBigIndex)index.size());
  }
  std::vector<double> rowLower(p.rowLower), rowUpper(p.rowUpper);
  for (double &l : rowLower)
    if (std::isinf(l))
      l = -1e30;

  const CbcApi &api = cbc();
  if (!api.error.empty()) {
    error = api.error;
    return std::nullopt;
  }
  Cbc_Model *model = api.newModel();
  api.loadProblem(model, numCols, numRows, starts.data(), index.data(),
                  value.data(), p.colLower.data(), p.colUpper.data(),
                  p.objective.data(), rowLower.data(), rowUpper.data());
  for (int c = 0; c < numCols; ++c)
    if (p.integer[c])
      api.setInteger(model, c);
  api.setObjSense(model, 1);
  api.setLogLevel(model, 0);
  api.setParameter(model, "log", "0");
  api.setParameter(model, "slog", "0");
  api.setMaximumSeconds(model, timeLimit);
  api.setAllowableGap(model, 0);
  api.setAllowableFractionGap(model, 0);
  api.solve(model);

  Solution out;
  out.columns = numCols;
  out.rows = numRows;
  const double *best = api.bestSolution(model);
  if (!best || api.isProvenInfeasible(model)) {
    error = api.isProvenInfeasible(model)
                ? "the problem is infeasible"
                : "no feasible assignment within the time limit of " +
                      seconds(timeLimit) + " s";
    api.deleteModel(model);
    return std::nullopt;
  }
  out.optimal = api.isProvenOptimal(model);
  out.choice.resize(nodes_.size());
  for (size_t n = 0; n < nodes_.size(); ++n) {
    int pick = 0;
    for (size_t c = 0; c < x[n].size(); ++c)
      if (best[x[n][c]] > best[x[n][pick]])
        pick = (int)c;
    out.choice[n] = pick;
  }
  api.deleteModel(model);
  // The assignment's own cost: exact, where the solver's objective has its
  // tolerances.
  out.cost = cost(out.choice);
  out.solveSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  if (std::isinf(out.cost)) {
    error = "the solver's assignment breaks a constraint (numerical trouble)";
    return std::nullopt;
  }
  return out;
}

} // namespace dtcc::shard
