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

/// C[r][c] = alpha * (sum over e < k of A(r, e) * b[e * ldb + c])
///           (+ C[r][c] when `accumulate`),
/// for r < m, c < n, with A(r, e) = a[r * lda + e], or a[e * lda + r] when
/// `transA`. Only where cpuHasTileProducts().
void tileProduct(bool transA, int64_t m, int64_t n, int64_t k, float alpha,
                 const float *a, int64_t lda, const float *b, int64_t ldb,
                 bool accumulate, float *c, int64_t ldc);

/// out[c * ldo + r] = x[r * ldx + c] for r < rows, c < cols: a block's
/// transpose, the B of a product with a transposed right operand. Only
/// where cpuHasTileProducts().
void transposeTile(const float *x, int64_t rows, int64_t cols, int64_t ldx,
                   float *out, int64_t ldo);

} // namespace dtcc::runtime::cpu

#endif // DTCC_RUNTIME_DEVICE_CPU_TILEPRODUCT_H
