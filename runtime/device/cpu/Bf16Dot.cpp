//===- Bf16Dot.cpp - small bf16 products on AVX512-BF16 -------------------===//

#include "runtime/device/cpu/Bf16Dot.h"

#include "runtime/device/cpu/IsaDispatch.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#if DTCC_HAVE_AVX512_CLONES
#include <immintrin.h>
#endif

namespace dtcc::runtime::cpu {

bool cpuHasAvx512Bf16() {
  static const bool has = [] {
    if (const char *v = std::getenv("DTCC_CPU_ATTENTION");
        v && std::strcmp(v, "f32") == 0)
      return false;
#if DTCC_HAVE_AVX512_CLONES
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bf16");
#else
    return false;
#endif
  }();
  return has;
}

namespace {

/// f32 subnormals as the instruction treats them: zero (of the same sign).
inline float flushSubnormal(float x) {
  return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x;
}

inline float pairHalf(uint32_t word, int half) {
  return bf16ToFloat(uint16_t(word >> (16 * half)));
}

} // namespace

void bf16DotReference(int64_t rows, int64_t cols, int64_t kp,
                      const uint32_t *a, int64_t lda, const uint32_t *b,
                      int64_t ldb, float *c, int64_t ldc, bool accumulate) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) {
      float acc = accumulate ? c[r * ldc + j] : 0.0f;
      for (int64_t p = 0; p < kp; ++p) {
        const uint32_t x = a[r * lda + p], y = b[p * ldb + j];
        for (int half : {1, 0}) {
          // The product of two bf16 is exact in f32.
          const float prod = flushSubnormal(pairHalf(x, half)) *
                             flushSubnormal(pairHalf(y, half));
          acc = flushSubnormal(flushSubnormal(acc) + prod);
        }
      }
      c[r * ldc + j] = acc;
    }
}

#if DTCC_HAVE_AVX512_CLONES

#define DTCC_BF16_TARGET                                                       \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace {

/// Rows r0 .. r0 + R of C, columns c0 .. c0 + 16 NV (the last vector
/// masked by `tail`): the accumulators stay in registers over the whole
/// sum.
template <int R, int NV>
DTCC_BF16_TARGET void dotBlock(int64_t kp, const uint32_t *a, int64_t lda,
                               const uint32_t *b, int64_t ldb, float *c,
                               int64_t ldc, bool accumulate, __mmask16 tail) {
  __m512 acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) {
      const __mmask16 m = v == NV - 1 ? tail : __mmask16(0xffff);
      acc[r][v] = accumulate ? _mm512_maskz_loadu_ps(m, c + r * ldc + 16 * v)
                             : _mm512_setzero_ps();
    }
  for (int64_t p = 0; p < kp; ++p) {
    __m512i bv[NV];
    for (int v = 0; v < NV; ++v) {
      const __mmask16 m = v == NV - 1 ? tail : __mmask16(0xffff);
      bv[v] = _mm512_maskz_loadu_epi32(m, b + p * ldb + 16 * v);
    }
    for (int r = 0; r < R; ++r) {
      uint32_t word;
      std::memcpy(&word, a + r * lda + p, sizeof(word));
      const __m512i av = _mm512_set1_epi32(int(word));
      for (int v = 0; v < NV; ++v)
        acc[r][v] = _mm512_dpbf16_ps(acc[r][v], (__m512bh)av, (__m512bh)bv[v]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) {
      const __mmask16 m = v == NV - 1 ? tail : __mmask16(0xffff);
      _mm512_mask_storeu_ps(c + r * ldc + 16 * v, m, acc[r][v]);
    }
}

using DotBlockFn = void (*)(int64_t, const uint32_t *, int64_t,
                            const uint32_t *, int64_t, float *, int64_t, bool,
                            __mmask16);

template <int R> constexpr DotBlockFn kBlocks[4] = {
    dotBlock<R, 1>, dotBlock<R, 2>, dotBlock<R, 3>, dotBlock<R, 4>};
constexpr const DotBlockFn *kBlockTable[4] = {kBlocks<1>, kBlocks<2>,
                                              kBlocks<3>, kBlocks<4>};

} // namespace

void bf16Dot(int64_t rows, int64_t cols, int64_t kp, const uint32_t *a,
             int64_t lda, const uint32_t *b, int64_t ldb, float *c,
             int64_t ldc, bool accumulate) {
  // Column blocks of up to 64 (four vectors), rows four at a time: 16
  // accumulators and four vectors of B in registers.
  for (int64_t c0 = 0; c0 < cols; c0 += 64) {
    const int64_t w = std::min<int64_t>(64, cols - c0);
    const int nv = int((w + 15) / 16);
    const int last = int(w - 16 * (nv - 1));
    const __mmask16 tail = __mmask16((1u << last) - 1u);
    for (int64_t r0 = 0; r0 < rows; r0 += 4) {
      const int rr = int(std::min<int64_t>(4, rows - r0));
      kBlockTable[rr - 1][nv - 1](kp, a + r0 * lda, lda, b + c0, ldb,
                                  c + r0 * ldc + c0, ldc, accumulate, tail);
    }
  }
}

#else

void bf16Dot(int64_t rows, int64_t cols, int64_t kp, const uint32_t *a,
             int64_t lda, const uint32_t *b, int64_t ldb, float *c,
             int64_t ldc, bool accumulate) {
  bf16DotReference(rows, cols, kp, a, lda, b, ldb, c, ldc, accumulate);
}

#endif

} // namespace dtcc::runtime::cpu
