//===- OpFlops.cpp - floating-point operations of the compute-bound ops ---===//

#include "runtime/base/OpFlops.h"

#include "runtime/base/MatmulShape.h"

namespace dtcc::runtime {

double matmulFlops(const std::vector<int64_t> &lhs,
                   const std::vector<int64_t> &rhs, bool transLhs,
                   bool transRhs) {
  if (lhs.size() < 2 || rhs.size() < 2)
    return 0;
  StatusOr<MatmulShape> shape = planMatmul(lhs, rhs, transLhs, transRhs);
  if (!shape.isOk())
    return 0;
  const MatmulShape &p = shape.value();
  return 2.0 * double(p.gemms()) * double(p.m) * double(p.n) * double(p.k);
}

double convFlops(const std::vector<int64_t> &filter,
                 const std::vector<int64_t> &output) {
  if (filter.size() < 3 || filter.size() != output.size())
    return 0;
  double flops = 2.0 * double(output[0]) * double(filter[0]) *
                 double(filter[1]);
  for (size_t d = 2; d < filter.size(); ++d)
    flops *= double(filter[d]) * double(output[d]);
  return flops;
}

double attentionFlops(const std::vector<int64_t> &query,
                      const std::vector<int64_t> &value, bool causal,
                      bool backward) {
  const size_t rank = query.size();
  if (rank < 2 || value.size() != rank)
    return 0;
  double batch = 1;
  for (size_t d = 0; d + 2 < rank; ++d)
    batch *= double(query[d]);
  const double sq = double(query[rank - 2]), d = double(query[rank - 1]),
               sk = double(value[rank - 2]), dv = double(value[rank - 1]);
  const double pairs = causal ? sq * (sq + 1) / 2 : sq * sk;
  return 2.0 * batch * pairs * (backward ? 3 * d + 2 * dv : d + dv);
}

} // namespace dtcc::runtime
