//===- TileProduct.cpp - small f32 products on AVX-512 --------------------===//
//
// TileProduct.h. The product walks C in panels of up to 64 columns (four
// registers a row, the last one masked) and, within a panel, in blocks of
// R rows held in R x NV accumulators (R x NV <= 24 of the 32 registers;
// the rest hold B's row and the broadcast). Rows past the last whole
// block go in blocks of 4, 2 and 1.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/TileProduct.h"

#include "runtime/device/cpu/CpuKernelUtils.h"
#include "runtime/device/cpu/IsaDispatch.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#if DTCC_HAVE_AVX512_CLONES
#include <immintrin.h>
#endif

namespace dtcc::runtime::cpu {

bool cpuHasTileProducts() {
  // The CPU itself, as OpenBLAS's kernel choice follows it: not
  // DTCC_CPU_ISA, which compares dtcc's own loops' two versions on the
  // same products (tests/e2e/isa_checks.py).
  static const bool has = [] {
    const char *v = std::getenv("DTCC_CPU_ATTENTION");
    return !(v && std::strcmp(v, "blas") == 0) && cpuSupportsAvx512();
  }();
  return has;
}

#if DTCC_HAVE_AVX512_CLONES
namespace {

/// Rows [0, R) of C's panel of NV registers (`tail` masks the last one's
/// columns): R x NV chains of fused multiply-adds over e < k.
template <int R, int NV>
DTCC_AVX512_TARGET DTCC_ALWAYS_INLINE void
rowBlock(int64_t k, float alpha, const float *a, int64_t rowStep,
         int64_t sumStep, const float *b, int64_t ldb, __mmask16 tail,
         bool accumulate, float *c, int64_t ldc) {
  __m512 acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v)
      acc[r][v] = _mm512_setzero_ps();
  for (int64_t e = 0; e < k; ++e) {
    const float *row = b + e * ldb;
    __m512 bv[NV];
    for (int v = 0; v + 1 < NV; ++v)
      bv[v] = _mm512_loadu_ps(row + 16 * v);
    bv[NV - 1] = _mm512_maskz_loadu_ps(tail, row + 16 * (NV - 1));
    const float *ae = a + e * sumStep;
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(ae[r * rowStep]);
      for (int v = 0; v < NV; ++v)
        acc[r][v] = _mm512_fmadd_ps(x, bv[v], acc[r][v]);
    }
  }
  const __m512 scale = _mm512_set1_ps(alpha);
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) {
      float *out = c + r * ldc + 16 * v;
      const __mmask16 lanes = v + 1 < NV ? __mmask16(0xFFFF) : tail;
      __m512 y = _mm512_mul_ps(acc[r][v], scale);
      if (accumulate)
        y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(lanes, out));
      _mm512_mask_storeu_ps(out, lanes, y);
    }
}

/// Rows [r, m) in blocks of R while whole ones remain; r moves past them.
template <int R, int NV>
DTCC_AVX512_TARGET DTCC_ALWAYS_INLINE void
rowBlocks(int64_t &r, int64_t m, int64_t k, float alpha, const float *a,
          int64_t rowStep, int64_t sumStep, const float *b, int64_t ldb,
          __mmask16 tail, bool accumulate, float *c, int64_t ldc) {
  for (; r + R <= m; r += R)
    rowBlock<R, NV>(k, alpha, a + r * rowStep, rowStep, sumStep, b, ldb, tail,
                    accumulate, c + r * ldc, ldc);
}

/// Every row of one panel of NV registers.
template <int NV>
DTCC_AVX512_TARGET void panel(int64_t m, int64_t k, float alpha, const float *a,
                              int64_t rowStep, int64_t sumStep, const float *b,
                              int64_t ldb, __mmask16 tail, bool accumulate,
                              float *c, int64_t ldc) {
  constexpr int kRows = NV == 1 ? 16 : NV == 2 ? 12 : NV == 3 ? 8 : 6;
  int64_t r = 0;
  rowBlocks<kRows, NV>(r, m, k, alpha, a, rowStep, sumStep, b, ldb, tail,
                       accumulate, c, ldc);
  rowBlocks<4, NV>(r, m, k, alpha, a, rowStep, sumStep, b, ldb, tail,
                   accumulate, c, ldc);
  rowBlocks<2, NV>(r, m, k, alpha, a, rowStep, sumStep, b, ldb, tail,
                   accumulate, c, ldc);
  rowBlocks<1, NV>(r, m, k, alpha, a, rowStep, sumStep, b, ldb, tail,
                   accumulate, c, ldc);
}

DTCC_AVX512_TARGET void
tileProductAvx512(bool transA, int64_t m, int64_t n, int64_t k, float alpha,
                  const float *a, int64_t lda, const float *b, int64_t ldb,
                  bool accumulate, float *c, int64_t ldc) {
  const int64_t rowStep = transA ? 1 : lda, sumStep = transA ? lda : 1;
  for (int64_t c0 = 0; c0 < n; c0 += 64) {
    const int64_t width = std::min<int64_t>(64, n - c0);
    const int registers = int((width + 15) / 16);
    const __mmask16 tail =
        width % 16 ? __mmask16((1u << (width % 16)) - 1) : __mmask16(0xFFFF);
    const float *bp = b + c0;
    float *cp = c + c0;
    switch (registers) {
    case 1:
      panel<1>(m, k, alpha, a, rowStep, sumStep, bp, ldb, tail, accumulate, cp,
               ldc);
      break;
    case 2:
      panel<2>(m, k, alpha, a, rowStep, sumStep, bp, ldb, tail, accumulate, cp,
               ldc);
      break;
    case 3:
      panel<3>(m, k, alpha, a, rowStep, sumStep, bp, ldb, tail, accumulate, cp,
               ldc);
      break;
    default:
      panel<4>(m, k, alpha, a, rowStep, sumStep, bp, ldb, tail, accumulate, cp,
               ldc);
      break;
    }
  }
}

DTCC_AVX512_TARGET void transposeTileAvx512(const float *x, int64_t rows,
                                            int64_t cols, int64_t ldx,
                                            float *out, int64_t ldo) {
  const int64_t fullRows = rows / 16 * 16, fullCols = cols / 16 * 16;
  for (int64_t r0 = 0; r0 < fullRows; r0 += 16)
    for (int64_t c0 = 0; c0 < fullCols; c0 += 16) {
      Lanes16<uint32_t> lanes[16];
      for (int i = 0; i < 16; ++i)
        std::memcpy(&lanes[i], x + (r0 + i) * ldx + c0, sizeof(lanes[i]));
      transpose16(lanes);
      for (int i = 0; i < 16; ++i)
        std::memcpy(out + (c0 + i) * ldo + r0, &lanes[i], sizeof(lanes[i]));
    }
  // The edges: columns past the whole blocks for every row, then rows
  // past them for the whole blocks' columns.
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = fullCols; c < cols; ++c)
      out[c * ldo + r] = x[r * ldx + c];
  for (int64_t c = 0; c < fullCols; ++c)
    for (int64_t r = fullRows; r < rows; ++r)
      out[c * ldo + r] = x[r * ldx + c];
}

} // namespace
#endif

void tileProduct(bool transA, int64_t m, int64_t n, int64_t k, float alpha,
                 const float *a, int64_t lda, const float *b, int64_t ldb,
                 bool accumulate, float *c, int64_t ldc, Triangle triangle) {
#if DTCC_HAVE_AVX512_CLONES
  if (triangle.kind == Triangle::kFull) {
    tileProductAvx512(transA, m, n, k, alpha, a, lda, b, ldb, accumulate, c,
                      ldc);
    return;
  }
  const int64_t rowStep = transA ? 1 : lda, sumStep = transA ? lda : 1;
  for (int64_t r0 = 0; r0 < m; r0 += kTriangleRows) {
    const int64_t rows = std::min(kTriangleRows, m - r0);
    const float *ar = a + r0 * rowStep;
    float *cr = c + r0 * ldc;
    // The strip's last row's extent (kLowerC, kLowerA) or its first row's
    // start (kUpperA).
    const int64_t last = r0 + rows + triangle.offset;
    switch (triangle.kind) {
    case Triangle::kLowerC:
      if (const int64_t cols = std::clamp<int64_t>(last, 0, n); cols > 0)
        tileProductAvx512(transA, rows, cols, k, alpha, ar, lda, b, ldb,
                          accumulate, cr, ldc);
      break;
    case Triangle::kLowerA:
      tileProductAvx512(transA, rows, n, std::clamp<int64_t>(last, 0, k), alpha,
                        ar, lda, b, ldb, accumulate, cr, ldc);
      break;
    case Triangle::kUpperA: {
      const int64_t first = std::clamp<int64_t>(r0 - triangle.offset, 0, k);
      tileProductAvx512(transA, rows, n, k - first, alpha, ar + first * sumStep,
                        lda, b + first * ldb, ldb, accumulate, cr, ldc);
      break;
    }
    case Triangle::kFull:
      break;
    }
  }
#else
  (void)transA, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda,
      (void)b, (void)ldb, (void)accumulate, (void)c, (void)ldc, (void)triangle;
  std::abort(); // cpuHasTileProducts() is false: never called
#endif
}

void transposeTile(const float *x, int64_t rows, int64_t cols, int64_t ldx,
                   float *out, int64_t ldo) {
#if DTCC_HAVE_AVX512_CLONES
  transposeTileAvx512(x, rows, cols, ldx, out, ldo);
#else
  (void)x, (void)rows, (void)cols, (void)ldx, (void)out, (void)ldo;
  std::abort(); // cpuHasTileProducts() is false: never called
#endif
}

} // namespace dtcc::runtime::cpu
