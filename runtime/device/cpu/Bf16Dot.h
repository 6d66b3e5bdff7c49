//===- Bf16Dot.h - small bf16 products on AVX512-BF16 ----------*- C++ -*-===//
//
// C (+)= A · B for the small blocks of the attention kernels, with bf16
// operands and f32 results, on the bf16 dot-product instruction of
// AVX512-BF16 (vdpbf16ps: Cooper Lake, Sapphire Rapids, Zen 4 and later),
// which multiplies twice as many elements a cycle as f32 fused
// multiply-adds, and where the CPU has AMX (Sapphire Rapids and later) on
// its tile instruction (tdpbf16ps: a 16 x 16 block of C from 16 words of
// A's rows and B's columns, 8192 multiply-adds in one). The operands are
// in the layout both take: pairs of bf16 along the summed dimension, each
// pair one 32-bit word (the lower half the even element). A is [rows x kp]
// words, B is [kp x cols] words; word p of a row of A meets row p of B.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CPU_BF16DOT_H
#define DTCC_RUNTIME_DEVICE_CPU_BF16DOT_H

#include "runtime/base/DType.h"

#include <cstdint>

namespace dtcc::runtime::cpu {

/// Whether this CPU runs bf16Dot (AVX-512 F/VL/BW/DQ and AVX512-BF16), and
/// whether DTCC_CPU_ATTENTION=f32 or =blas (the attention kernels' f32
/// products, on the tile products or OpenBLAS, for comparisons) left it
/// on.
bool cpuHasAvx512Bf16();

/// Whether bf16Dot runs on AMX: the CPU has AMX-TILE and AMX-BF16, Linux
/// granted the process the tile state, cpuHasAvx512Bf16(), and
/// DTCC_CPU_AMX=0 (the vector instruction alone, for comparisons) is not
/// set.
bool cpuHasAmxBf16();

/// C[r][c] = (accumulate ? C[r][c] : 0) + sum over p of the pair products
/// of a[r * lda + p] and b[p * ldb + c], for r < rows, c < cols. Only where
/// cpuHasAvx512Bf16(). Where cpuHasAmxBf16(), the rows, columns and words
/// that fill whole 16 x 16 tiles run on AMX, whose sums round in an order
/// of their own (within f32 rounding of the exact sum, not bitwise
/// bf16DotReference); the rest, and every block on other CPUs, on
/// bf16DotVector.
void bf16Dot(int64_t rows, int64_t cols, int64_t kp, const uint32_t *a,
             int64_t lda, const uint32_t *b, int64_t ldb, float *c,
             int64_t ldc, bool accumulate);

/// bf16Dot on the vector instruction alone: bitwise bf16DotReference.
void bf16DotVector(int64_t rows, int64_t cols, int64_t kp, const uint32_t *a,
                   int64_t lda, const uint32_t *b, int64_t ldb, float *c,
                   int64_t ldc, bool accumulate);

/// bf16Dot in scalar code, in the instruction's order of operations: for
/// each word, the odd elements' product added first, then the even ones';
/// each product exact, each sum rounded to nearest even; f32 subnormals
/// read as zero and rounded to zero. Bitwise bf16Dot's results (the unit
/// test checks it); runs anywhere.
void bf16DotReference(int64_t rows, int64_t cols, int64_t kp,
                      const uint32_t *a, int64_t lda, const uint32_t *b,
                      int64_t ldb, float *c, int64_t ldc, bool accumulate);

/// One word of two bf16: `lo` the even element.
inline uint32_t bf16Pair(uint16_t lo, uint16_t hi) {
  return uint32_t(lo) | uint32_t(hi) << 16;
}

} // namespace dtcc::runtime::cpu

#endif // DTCC_RUNTIME_DEVICE_CPU_BF16DOT_H
