//===- TileProduct.h - small f32 products on AVX-512 -----------*- C++ -*-===//
//
// C (+)= alpha op(A) B for the blocks of the attention kernels (a tile of
// 64 queries or keys against a head's width), in registers: each call
// keeps a block of C's rows (6 to 16, by the width) in AVX-512 registers
// across the whole sum and reads A's elements as broadcasts and B's rows as
// they lie, so nothing is packed and nothing is zeroed first. OpenBLAS's
// GEMM packs both operands on every call and zeroes C before it
// accumulates (a 64 x 64 x 32 product ran at 92 GFLOP/s there, at 136
// here: bench/attention_cpu.cpp measures the kernels that use it). Each
// element of C is one chain of fused multiply-adds in k's order, so a
// result depends neither on the thread count nor on where the operands
// lie; like OpenBLAS's AVX-512 kernels, and unlike dtcc's own elementwise
// loops, it fuses the multiply-adds, so the baseline build (SSE2, no FMA)
// does not run it: the products there stay on OpenBLAS.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CPU_TILEPRODUCT_H
#define DTCC_RUNTIME_DEVICE_CPU_TILEPRODUCT_H

#include <cstdint>

namespace dtcc::runtime::cpu {

/// Whether tileProduct runs here: the CPU has AVX-512 (F, VL, BW, DQ; the
/// CPU itself, as OpenBLAS's own kernel choice, whatever DTCC_CPU_ISA says)
/// and DTCC_CPU_ATTENTION=blas (OpenBLAS's products, for comparisons) is
/// not set.
bool cpuHasTileProducts();

/// The part of a product a causal attention block needs, row r's keys
/// being those up to r + offset (the block's diagonal): C's elements past
/// them (kLowerC: C[r][c] only for c <= r + offset; the rest may be left
/// as they were), or A's zeros past them, which the sums skip (kLowerA:
/// A(r, e) = 0 for e > r + offset; kUpperA: A(r, e) = 0 for e < r -
/// offset). The products go in strips of kTriangleRows rows, each to the
/// extent its last (kLowerC, kLowerA) or first (kUpperA) row needs: about
/// 5/8 of a 64 x 64 diagonal block's multiply-adds.
struct Triangle {
  enum Kind { kFull, kLowerC, kLowerA, kUpperA };
  Kind kind = kFull;
  int64_t offset = 0;
};
constexpr int64_t kTriangleRows = 16;

/// C[r][c] = alpha * (sum over e < k of A(r, e) * b[e * ldb + c])
///           (+ C[r][c] when `accumulate`),
/// for r < m, c < n, with A(r, e) = a[r * lda + e], or a[e * lda + r] when
/// `transA`; of the `triangle` that part. Only where cpuHasTileProducts().
void tileProduct(bool transA, int64_t m, int64_t n, int64_t k, float alpha,
                 const float *a, int64_t lda, const float *b, int64_t ldb,
                 bool accumulate, float *c, int64_t ldc,
                 Triangle triangle = {});

/// out[c * ldo + r] = x[r * ldx + c] for r < rows, c < cols: a block's
/// transpose, the B of a product with a transposed right operand. Only
/// where cpuHasTileProducts().
void transposeTile(const float *x, int64_t rows, int64_t cols, int64_t ldx,
                   float *out, int64_t ldo);

} // namespace dtcc::runtime::cpu

#endif // DTCC_RUNTIME_DEVICE_CPU_TILEPRODUCT_H
