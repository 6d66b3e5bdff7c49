//===- Bf16Dot.cpp - small bf16 products on AVX512-BF16 -------------------===//

#include "runtime/device/cpu/Bf16Dot.h"

#include "runtime/device/cpu/IsaDispatch.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#if DTCC_HAVE_AVX512_CLONES
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace dtcc::runtime::cpu {

bool cpuHasAvx512Bf16() {
  static const bool has = [] {
    // f32: the widened path's f32 products; blas: those on OpenBLAS.
    if (const char *v = std::getenv("DTCC_CPU_ATTENTION");
        v && (std::strcmp(v, "f32") == 0 || std::strcmp(v, "blas") == 0))
      return false;
#if DTCC_HAVE_AVX512_CLONES
    return cpuSupportsAvx512() && __builtin_cpu_supports("avx512bf16");
#else
    return false;
#endif
  }();
  return has;
}

bool cpuHasAmxBf16() {
  static const bool has = [] {
    if (!cpuHasAvx512Bf16())
      return false;
    if (const char *v = std::getenv("DTCC_CPU_AMX");
        v && std::strcmp(v, "0") == 0)
      return false;
#if DTCC_HAVE_AVX512_CLONES
    // CPUID leaf 7: EDX bit 22 AMX-BF16, bit 24 AMX-TILE.
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) || !(edx >> 22 & 1) ||
        !(edx >> 24 & 1))
      return false;
    // Linux hands a process the tile registers' 8 KiB of state only when
    // asked (ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA); once granted it
    // holds for every thread. A kernel or hypervisor that refuses it
    // leaves the vector path.
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
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

void bf16DotVector(int64_t rows, int64_t cols, int64_t kp, const uint32_t *a,
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

namespace {

#define DTCC_AMX_TARGET __attribute__((target("amx-tile,amx-bf16")))

/// The tile configuration (LDTILECFG's 64-byte operand): palette 1, every
/// tile 16 rows of 64 bytes (16 f32 of C, 16 words of A or B).
struct alignas(64) TileConfig {
  uint8_t palette = 1, startRow = 0;
  uint8_t reserved[14] = {};
  uint16_t colsBytes[16] = {};
  uint8_t rows[16] = {};
  TileConfig() {
    for (int t = 0; t < 8; ++t) {
      colsBytes[t] = 64;
      rows[t] = 16;
    }
  }
};

/// Calls f(tile, row, column) for each C tile of an R x NC block (tmm0-3:
/// a 2 x 2 block of 16 x 16, rows then columns), `tile` an
/// std::integral_constant (the tile instructions take the register as an
/// immediate).
template <int R, int NC, typename F> DTCC_ALWAYS_INLINE void forEachCTile(F f) {
  f(std::integral_constant<int, 0>{}, 0, 0);
  if constexpr (NC == 2)
    f(std::integral_constant<int, 1>{}, 0, 16);
  if constexpr (R == 2) {
    f(std::integral_constant<int, 2>{}, 16, 0);
    if constexpr (NC == 2)
      f(std::integral_constant<int, 3>{}, 16, 16);
  }
}

/// C tiles (tmm0-3, R row blocks by NC column blocks of 16 x 16, each 1 or
/// 2) += A tiles (tmm4-5, row blocks of 16 x 16 words) x B tiles (tmm6-7,
/// column blocks of 16 words x 16).
template <int R, int NC>
DTCC_AMX_TARGET void amxBlock(int64_t kp, const uint32_t *a, int64_t lda,
                              const uint32_t *b, int64_t ldb, float *c,
                              int64_t ldc, bool accumulate) {
  const int64_t sa = lda * 4, sb = ldb * 4, sc = ldc * 4;
  forEachCTile<R, NC>([&](auto tile, int row, int col) DTCC_AMX_TARGET {
    if (accumulate)
      _tile_loadd(decltype(tile)::value, c + row * ldc + col, sc);
    else
      _tile_zero(decltype(tile)::value);
  });
  for (int64_t p = 0; p < kp; p += 16) {
    _tile_loadd(4, a + p, sa);
    _tile_loadd(6, b + p * ldb, sb);
    if constexpr (NC == 2)
      _tile_loadd(7, b + p * ldb + 16, sb);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NC == 2)
      _tile_dpbf16ps(1, 4, 7);
    if constexpr (R == 2) {
      _tile_loadd(5, a + 16 * lda + p, sa);
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (NC == 2)
        _tile_dpbf16ps(3, 5, 7);
    }
  }
  forEachCTile<R, NC>([&](auto tile, int row, int col) DTCC_AMX_TARGET {
    _tile_stored(decltype(tile)::value, c + row * ldc + col, sc);
  });
}

/// The part of C whose rows, columns and words fill whole 16 x 16 tiles,
/// on AMX. The tiles are configured on entry and released on return, so
/// the thread carries no tile state between calls.
DTCC_AMX_TARGET void amxWholeTiles(int64_t rows, int64_t cols, int64_t kp,
                                   const uint32_t *a, int64_t lda,
                                   const uint32_t *b, int64_t ldb, float *c,
                                   int64_t ldc, bool accumulate) {
  static const TileConfig config;
  _tile_loadconfig(&config);
  for (int64_t r0 = 0; r0 < rows; r0 += 32) {
    const bool twoRows = rows - r0 >= 32;
    for (int64_t c0 = 0; c0 < cols; c0 += 32) {
      const bool twoCols = cols - c0 >= 32;
      const uint32_t *ab = a + r0 * lda, *bb = b + c0;
      float *cb = c + r0 * ldc + c0;
      if (twoRows && twoCols)
        amxBlock<2, 2>(kp, ab, lda, bb, ldb, cb, ldc, accumulate);
      else if (twoRows)
        amxBlock<2, 1>(kp, ab, lda, bb, ldb, cb, ldc, accumulate);
      else if (twoCols)
        amxBlock<1, 2>(kp, ab, lda, bb, ldb, cb, ldc, accumulate);
      else
        amxBlock<1, 1>(kp, ab, lda, bb, ldb, cb, ldc, accumulate);
    }
  }
  _tile_release();
}

} // namespace

void bf16Dot(int64_t rows, int64_t cols, int64_t kp, const uint32_t *a,
             int64_t lda, const uint32_t *b, int64_t ldb, float *c,
             int64_t ldc, bool accumulate) {
  // AMX takes the rows, columns and words that fill whole tiles; the
  // vector instruction the rest: the words past them (added to AMX's
  // sums), then the rows and the columns past them.
  const int64_t tr = rows & ~int64_t(15), tc = cols & ~int64_t(15),
                tk = kp & ~int64_t(15);
  if (tr == 0 || tc == 0 || tk == 0 || !cpuHasAmxBf16()) {
    bf16DotVector(rows, cols, kp, a, lda, b, ldb, c, ldc, accumulate);
    return;
  }
  amxWholeTiles(tr, tc, tk, a, lda, b, ldb, c, ldc, accumulate);
  if (tk < kp)
    bf16DotVector(tr, tc, kp - tk, a + tk, lda, b + tk * ldb, ldb, c, ldc,
                  true);
  if (tc < cols)
    bf16DotVector(tr, cols - tc, kp, a, lda, b + tc, ldb, c + tc, ldc,
                  accumulate);
  if (tr < rows)
    bf16DotVector(rows - tr, cols, kp, a + tr * lda, lda, b, ldb,
                  c + tr * ldc, ldc, accumulate);
}

#else

bool cpuHasAmxBf16() { return false; }

void bf16DotVector(int64_t rows, int64_t cols, int64_t kp, const uint32_t *a,
                   int64_t lda, const uint32_t *b, int64_t ldb, float *c,
                   int64_t ldc, bool accumulate) {
  bf16DotReference(rows, cols, kp, a, lda, b, ldb, c, ldc, accumulate);
}

void bf16Dot(int64_t rows, int64_t cols, int64_t kp, const uint32_t *a,
             int64_t lda, const uint32_t *b, int64_t ldb, float *c,
             int64_t ldc, bool accumulate) {
  bf16DotVector(rows, cols, kp, a, lda, b, ldb, c, ldc, accumulate);
}

#endif

} // namespace dtcc::runtime::cpu
