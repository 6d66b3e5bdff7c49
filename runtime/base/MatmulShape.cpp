//===- MatmulShape.cpp - a broadcast batched matmul as GEMM calls ---------===//

#include "runtime/base/MatmulShape.h"

#include <algorithm>

namespace dtcc::runtime {

namespace {
std::string shapeText(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}
} // namespace

StatusOr<MatmulShape> planMatmul(const std::vector<int64_t> &lhs,
                                 const std::vector<int64_t> &rhs,
                                 bool transLhs, bool transRhs) {
  const size_t lr = lhs.size(), rr = rhs.size();
  if (lr < 2 || rr < 2)
    return invalidArgument("expected operands of rank >= 2, got ",
                           shapeText(lhs), " and ", shapeText(rhs));
  MatmulShape p;
  p.transLhs = transLhs;
  p.transRhs = transRhs;
  p.m = lhs[lr - (transLhs ? 1 : 2)];
  p.k = lhs[lr - (transLhs ? 2 : 1)];
  const int64_t kr = rhs[rr - (transRhs ? 1 : 2)];
  p.n = rhs[rr - (transRhs ? 2 : 1)];
  if (p.k != kr)
    return invalidArgument("contracted dimensions differ: ", p.k, " (lhs ",
                           shapeText(lhs), ") vs ", kr, " (rhs ",
                           shapeText(rhs), ")");

  // Batch dimensions of the result, aligned from the right, with each
  // operand's element stride along them (0 where it is broadcast).
  const size_t lb = lr - 2, rb = rr - 2, rank = std::max(lb, rb);
  struct Dim {
    int64_t size, lhs, rhs, out;
  };
  std::vector<Dim> dims(rank);
  int64_t ls = p.m * p.k, rs = p.k * p.n, os = p.m * p.n;
  for (size_t i = rank; i-- > 0;) {
    int64_t l = i + lb >= rank ? lhs[i + lb - rank] : 1;
    int64_t r = i + rb >= rank ? rhs[i + rb - rank] : 1;
    if (l != r && l != 1 && r != 1)
      return invalidArgument(
          "batch dimensions do not broadcast: ",
          shapeText(std::vector<int64_t>(lhs.begin(), lhs.end() - 2)), " vs ",
          shapeText(std::vector<int64_t>(rhs.begin(), rhs.end() - 2)));
    int64_t size = l == 1 ? r : l;
    dims[i] = {size, l == 1 ? 0 : ls, r == 1 ? 0 : rs, os};
    ls *= l;
    rs *= r;
    os *= size;
  }
  for (const Dim &d : dims)
    p.resultShape.push_back(d.size);
  p.resultShape.push_back(p.m);
  p.resultShape.push_back(p.n);

  // Merge each dimension into the one inside it when all three strides
  // continue it; size-1 dimensions vanish. What remains, innermost first.
  std::vector<Dim> merged;
  for (size_t i = rank; i-- > 0;) {
    const Dim &d = dims[i];
    if (d.size == 1)
      continue;
    if (!merged.empty()) {
      Dim &in = merged.back();
      if (d.lhs == in.lhs * in.size && d.rhs == in.rhs * in.size &&
          d.out == in.out * in.size) {
        in.size *= d.size;
        continue;
      }
    }
    merged.push_back(d);
  }
  if (!merged.empty()) {
    const Dim inner = merged.front();
    p.count = inner.size;
    p.lhsStride = inner.lhs;
    p.rhsStride = inner.rhs;
    p.outStride = inner.out;
    // The outer dimensions, enumerated in row-major order.
    for (size_t g = 1; g < merged.size(); ++g) {
      const Dim &d = merged[g];
      std::vector<int64_t> l, r, o;
      for (int64_t j = 0; j < d.size; ++j)
        for (size_t e = 0; e < p.outOffsets.size(); ++e) {
          l.push_back(j * d.lhs + p.lhsOffsets[e]);
          r.push_back(j * d.rhs + p.rhsOffsets[e]);
          o.push_back(j * d.out + p.outOffsets[e]);
        }
      p.lhsOffsets = std::move(l);
      p.rhsOffsets = std::move(r);
      p.outOffsets = std::move(o);
    }
  }
  // A shared rhs and a contiguous, untransposed lhs: the batch is rows.
  if (p.count > 1 && p.rhsStride == 0 && !transLhs &&
      p.lhsStride == p.m * p.k && p.outStride == p.m * p.n) {
    p.m *= p.count;
    p.count = 1;
    p.lhsStride = p.m * p.k;
    p.outStride = p.m * p.n;
  }
  return p;
}

} // namespace dtcc::runtime
