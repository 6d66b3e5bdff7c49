//===- OpFlops.h - floating-point operations of the compute-bound ops -*- C++ -*-===//
//
// The one count of the FLOPs of the ops whose time is their arithmetic:
// matrix products, convolutions and fused attention. The dgraph cost interface (the layout
// ILP, pipeline stage balancing) and the planner's program model both call
// these, on global or per-rank shapes.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_BASE_OPFLOPS_H
#define DTCC_RUNTIME_BASE_OPFLOPS_H

#include <cstdint>
#include <vector>

namespace dtcc::runtime {

/// 2 m n k for every GEMM of `lhs x rhs` (dgraph.matmul: NumPy batch
/// broadcasting, optional transposes), as the matmul kernel issues them
/// (runtime/base/MatmulShape.h); 0 when the shapes do not fit together.
double matmulFlops(const std::vector<int64_t> &lhs,
                   const std::vector<int64_t> &rhs, bool transLhs,
                   bool transRhs);

/// The multiply-adds (times 2) of a convolution with filter
/// [O, C/groups, K1..Kd] whose forward output is [N, O, Y1..Yd]:
/// 2 N O (C/groups) prod(K) prod(Y). The data and filter gradients do the
/// same arithmetic, so conv, conv_input_grad and conv_filter_grad all count
/// this. 0 when the ranks do not match (at least 3, equal).
double convFlops(const std::vector<int64_t> &filter,
                 const std::vector<int64_t> &output);

/// dgraph.attention's (backward = false) or dgraph.attention_grad's FLOPs
/// for query [B..., Sq, D] and value [B..., Sk, Dv]: the forward's two
/// products, 2 B Sq Sk (D + Dv); the backward's five (the scores
/// recomputed, dV, dP, dQ, dK), 2 B Sq Sk (3 D + 2 Dv). Causal attention
/// counts the pairs it computes, Sq (Sq + 1) / 2 in place of Sq Sk. 0 when
/// the ranks do not fit.
double attentionFlops(const std::vector<int64_t> &query,
                      const std::vector<int64_t> &value, bool causal,
                      bool backward);

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_BASE_OPFLOPS_H
