//===- MatmulShape.h - a broadcast batched matmul as GEMM calls -*- C++ -*-===//
//
// The "matmul" kernel's semantics (dgraph.matmul: NumPy batch broadcasting,
// transpose_lhs / transpose_rhs) turned into GEMMs over contiguous
// operands, shared by the CPU and CUDA kernels and the planner's program
// model so that all three count the same calls.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_BASE_MATMULSHAPE_H
#define DTCC_RUNTIME_BASE_MATMULSHAPE_H

#include "runtime/base/Status.h"

#include <cstdint>
#include <vector>

namespace dtcc::runtime {

/// `groups()` strided batches of `count` GEMMs of op(A)[m, k] x op(B)[k, n]
/// in row-major element offsets. Batch dimensions that broadcast have
/// stride 0: a broadcast operand is read in place, never copied. Adjacent
/// batch dimensions merge into one strided batch where the strides allow;
/// a shared rhs with an untransposed lhs folds the batch into m (one GEMM
/// for the dense layer x[b, s, h] x w[h, f]).
struct MatmulShape {
  /// One GEMM's sizes (m includes a folded batch).
  int64_t m = 0, n = 0, k = 0;
  bool transLhs = false, transRhs = false;
  /// The result's shape: the broadcast batch dimensions, then m and n.
  std::vector<int64_t> resultShape;
  /// GEMMs per strided batch and their element strides (0: broadcast).
  int64_t count = 1;
  int64_t lhsStride = 0, rhsStride = 0, outStride = 0;
  /// The first element of each strided batch in lhs, rhs and the result.
  std::vector<int64_t> lhsOffsets = {0}, rhsOffsets = {0}, outOffsets = {0};

  int64_t groups() const { return int64_t(outOffsets.size()); }
  /// GEMM calls in all, as a loop of single GEMMs issues them.
  int64_t gemms() const { return groups() * count; }
};

/// Plans `lhs x rhs` (both of rank >= 2) or says why the shapes do not fit
/// together: contracted dimensions that differ, batch dimensions that do
/// not broadcast.
StatusOr<MatmulShape> planMatmul(const std::vector<int64_t> &lhs,
                                 const std::vector<int64_t> &rhs,
                                 bool transLhs, bool transRhs);

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_BASE_MATMULSHAPE_H
