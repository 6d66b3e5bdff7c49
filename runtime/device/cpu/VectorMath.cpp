//===- VectorMath.cpp - libmvec dispatch with a libm fallback -------------===//
//
// libmvec's functions take and return SIMD registers (x86-64 vector ABI):
// the AVX2 wrappers are compiled for AVX2 only, and chosen at run time when
// the CPU has it, so the library itself still runs on any x86-64.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/VectorMath.h"

#include <algorithm>
#include <cmath>

#if DTCC_HAVE_LIBMVEC
#include <immintrin.h>

extern "C" {
#define DTCC_DECLARE(E, NAME)                                                  \
  __m128 _ZGVbN4v_##NAME##f(__m128);                                           \
  __m128d _ZGVbN2v_##NAME(__m128d);                                            \
  __m256 _ZGVdN8v_##NAME##f(__m256);                                           \
  __m256d _ZGVdN4v_##NAME(__m256d);
DTCC_VECTOR_MATH_FNS(DTCC_DECLARE)
#undef DTCC_DECLARE
__m512 _ZGVeN16v_expf(__m512);
__m512 _ZGVeN16v_logf(__m512);
}
#endif

namespace dtcc::runtime::cpu {
namespace {

using FloatFn = void (*)(float *, int64_t);
using DoubleFn = void (*)(double *, int64_t);

template <float (*F)(float)> void scalarFloat(float *x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    x[i] = F(x[i]);
}
template <double (*F)(double)> void scalarDouble(double *x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    x[i] = F(x[i]);
}

#if DTCC_HAVE_LIBMVEC
// The tail is padded with copies of the last element, so that no lane sees
// a value outside the function's domain that the caller did not pass.
template <__m128 (*F)(__m128)> void sseFloat(float *x, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    _mm_storeu_ps(x + i, F(_mm_loadu_ps(x + i)));
  if (i < n) {
    alignas(16) float t[4];
    for (int64_t k = 0; k < 4; ++k)
      t[k] = x[std::min(i + k, n - 1)];
    _mm_store_ps(t, F(_mm_load_ps(t)));
    for (int64_t k = 0; i + k < n; ++k)
      x[i + k] = t[k];
  }
}
template <__m128d (*F)(__m128d)> void sseDouble(double *x, int64_t n) {
  int64_t i = 0;
  for (; i + 2 <= n; i += 2)
    _mm_storeu_pd(x + i, F(_mm_loadu_pd(x + i)));
  if (i < n) {
    alignas(16) double t[2] = {x[i], x[i]};
    _mm_store_pd(t, F(_mm_load_pd(t)));
    x[i] = t[0];
  }
}
template <__m256 (*F)(__m256)>
__attribute__((target("avx2"))) void avx2Float(float *x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(x + i, F(_mm256_loadu_ps(x + i)));
  if (i < n) {
    alignas(32) float t[8];
    for (int64_t k = 0; k < 8; ++k)
      t[k] = x[std::min(i + k, n - 1)];
    _mm256_store_ps(t, F(_mm256_load_ps(t)));
    for (int64_t k = 0; i + k < n; ++k)
      x[i + k] = t[k];
  }
}
template <__m256d (*F)(__m256d)>
__attribute__((target("avx2"))) void avx2Double(double *x, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    _mm256_storeu_pd(x + i, F(_mm256_loadu_pd(x + i)));
  if (i < n) {
    alignas(32) double t[4];
    for (int64_t k = 0; k < 4; ++k)
      t[k] = x[std::min(i + k, n - 1)];
    _mm256_store_pd(t, F(_mm256_load_pd(t)));
    for (int64_t k = 0; i + k < n; ++k)
      x[i + k] = t[k];
  }
}
#endif

constexpr int kFns = int(MathFn::kCount);

const FloatFn kScalarFloat[kFns] = {
#define DTCC_ENTRY(E, NAME) scalarFloat<::NAME##f>,
    DTCC_VECTOR_MATH_FNS(DTCC_ENTRY)
#undef DTCC_ENTRY
};
const DoubleFn kScalarDouble[kFns] = {
#define DTCC_ENTRY(E, NAME) scalarDouble<::NAME>,
    DTCC_VECTOR_MATH_FNS(DTCC_ENTRY)
#undef DTCC_ENTRY
};

#if DTCC_HAVE_LIBMVEC
const FloatFn kSseFloat[kFns] = {
#define DTCC_ENTRY(E, NAME) sseFloat<_ZGVbN4v_##NAME##f>,
    DTCC_VECTOR_MATH_FNS(DTCC_ENTRY)
#undef DTCC_ENTRY
};
const DoubleFn kSseDouble[kFns] = {
#define DTCC_ENTRY(E, NAME) sseDouble<_ZGVbN2v_##NAME>,
    DTCC_VECTOR_MATH_FNS(DTCC_ENTRY)
#undef DTCC_ENTRY
};
const FloatFn kAvx2Float[kFns] = {
#define DTCC_ENTRY(E, NAME) avx2Float<_ZGVdN8v_##NAME##f>,
    DTCC_VECTOR_MATH_FNS(DTCC_ENTRY)
#undef DTCC_ENTRY
};
const DoubleFn kAvx2Double[kFns] = {
#define DTCC_ENTRY(E, NAME) avx2Double<_ZGVdN4v_##NAME>,
    DTCC_VECTOR_MATH_FNS(DTCC_ENTRY)
#undef DTCC_ENTRY
};
#endif

bool isaAvailable(int isa) {
  if (isa == kMathScalar)
    return true;
#if DTCC_HAVE_LIBMVEC
  if (isa == kMathSse)
    return true;
  if (isa == kMathAvx2) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
  }
#endif
  return false;
}

const FloatFn *floatTable(int isa) {
#if DTCC_HAVE_LIBMVEC
  if (isa == kMathAvx2)
    return kAvx2Float;
  if (isa == kMathSse)
    return kSseFloat;
#endif
  return kScalarFloat;
}
const DoubleFn *doubleTable(int isa) {
#if DTCC_HAVE_LIBMVEC
  if (isa == kMathAvx2)
    return kAvx2Double;
  if (isa == kMathSse)
    return kSseDouble;
#endif
  return kScalarDouble;
}

} // namespace

int vectorMathIsa() {
  static const int isa = isaAvailable(kMathAvx2)  ? int(kMathAvx2)
                         : isaAvailable(kMathSse) ? int(kMathSse)
                                                  : int(kMathScalar);
  return isa;
}

/// exp of inputs far below zero (masked attention scores of -1e9) sends
/// libmvec to its scalar special-case path, ten times slower. Below the
/// normal range, exp(x) = exp(x / 2)^2 computed from x clamped to -174 (where
/// the square underflows to 0 anyway) stays on the vector path and gives the
/// same result: 0, or the subnormal it rounds to.
static void expWithUnderflow(const FloatFn *table, float *x, int64_t n) {
  constexpr float kLowest = -87.3f, kFloor = -174.0f;
  uint8_t low[kMathChunk];
  for (int64_t start = 0; start < n; start += kMathChunk) {
    int64_t len = std::min<int64_t>(kMathChunk, n - start);
    float *c = x + start;
    bool any = false;
    for (int64_t i = 0; i < len; ++i) {
      low[i] = c[i] < kLowest;
      any |= low[i];
      c[i] = low[i] ? std::max(c[i], kFloor) * 0.5f : c[i];
    }
    table[int(MathFn::kExp)](c, len);
    if (any)
      for (int64_t i = 0; i < len; ++i)
        c[i] = low[i] ? c[i] * c[i] : c[i];
  }
}

#if DTCC_HAVE_LIBMVEC
/// expWithUnderflow's lanes on AVX2, the halving and squaring in registers
/// (the same operations on each element), for avx2Float. F is libmvec's
/// expf (called through the parameter, as avx2Float calls it).
template <__m256 (*F)(__m256)>
__attribute__((target("avx2"))) __m256 avx2ExpLanes(__m256 v) {
  const __m256 low = _mm256_cmp_ps(v, _mm256_set1_ps(-87.3f), _CMP_LT_OQ);
  if (_mm256_movemask_ps(low) == 0)
    return F(v);
  const __m256 halved = _mm256_mul_ps(
      _mm256_max_ps(v, _mm256_set1_ps(-174.0f)), _mm256_set1_ps(0.5f));
  const __m256 r = F(_mm256_blendv_ps(v, halved, low));
  return _mm256_blendv_ps(r, _mm256_mul_ps(r, r), low);
}

/// avx2Float on sixteen lanes, for libmvec's AVX-512 expf and logf, whose
/// results are bitwise its AVX2 ones' for every float (glibc 2.36; checked
/// over all 2^32 inputs, and CpuVectorMath.WideExpAndLogAreTheAvx2Bits
/// samples it), 1.5x faster for expf: the kernels' exp and log follow
/// the CPU's widest registers without changing a bit. (tanhf, erff,
/// expm1f, atanf and others differ: they stay on AVX2.)
template <__m512 (*F)(__m512)>
__attribute__((target("avx512f"))) void avx512Float(float *x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(x + i, F(_mm512_loadu_ps(x + i)));
  if (i < n) {
    alignas(64) float t[16];
    for (int64_t k = 0; k < 16; ++k)
      t[k] = x[std::min(i + k, n - 1)];
    _mm512_store_ps(t, F(_mm512_load_ps(t)));
    for (int64_t k = 0; i + k < n; ++k)
      x[i + k] = t[k];
  }
}
/// avx2ExpLanes on sixteen lanes (the same operations on each element).
template <__m512 (*F)(__m512)>
__attribute__((target("avx512f"))) __m512 avx512ExpLanes(__m512 v) {
  const __mmask16 low =
      _mm512_cmp_ps_mask(v, _mm512_set1_ps(-87.3f), _CMP_LT_OQ);
  if (low == 0)
    return F(v);
  const __m512 halved = _mm512_mul_ps(_mm512_max_ps(v, _mm512_set1_ps(-174.0f)),
                                      _mm512_set1_ps(0.5f));
  const __m512 r = F(_mm512_mask_blend_ps(low, v, halved));
  return _mm512_mask_blend_ps(low, r, _mm512_mul_ps(r, r));
}

#endif

namespace {
#if defined(__x86_64__)
/// Whether the CPU has AVX-512F: libmvec's AVX-512 expf and logf and
/// ErfRational's AVX-512 clone follow the CPU itself, not DTCC_CPU_ISA.
[[maybe_unused]] bool cpuHasAvx512F() {
  static const bool has = [] {
    __builtin_cpu_init();
    return bool(__builtin_cpu_supports("avx512f"));
  }();
  return has;
}
#endif

inline __attribute__((always_inline)) void erfRationalLoop(float *x,
                                                           int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    x[i] = ErfRational::eval(x[i]);
}
#if defined(__x86_64__) && defined(__clang__)
__attribute__((target("avx512f,avx512vl,avx512bw,avx512dq"))) void
erfRationalAvx512(float *x, int64_t n) {
  erfRationalLoop(x, n);
}
__attribute__((target("avx2,fma"))) void erfRationalAvx2(float *x, int64_t n) {
  erfRationalLoop(x, n);
}
#endif
} // namespace

void erfRational(float *x, int64_t n) {
#if defined(__x86_64__) && defined(__clang__)
  // The clones' vfmadd rounds once, as libm's fmaf does: every version
  // computes the same bits, so the choice follows the CPU itself.
  static const int isa = [] {
    __builtin_cpu_init();
    return cpuHasAvx512F() ? 2
           : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
               ? 1
               : 0;
  }();
  if (isa == 2)
    return erfRationalAvx512(x, n);
  if (isa == 1)
    return erfRationalAvx2(x, n);
#endif
  erfRationalLoop(x, n);
}

void vectorMath(MathFn fn, float *x, int64_t n) {
  if (fn == MathFn::kErf)
    return erfRational(x, n);
  static const FloatFn *table = floatTable(vectorMathIsa());
#if DTCC_HAVE_LIBMVEC
  if (table == kAvx2Float && cpuHasAvx512F()) {
    if (fn == MathFn::kExp)
      return avx512Float<avx512ExpLanes<_ZGVeN16v_expf>>(x, n);
    if (fn == MathFn::kLog)
      return avx512Float<_ZGVeN16v_logf>(x, n);
  }
  if (fn == MathFn::kExp && table == kAvx2Float)
    return avx2Float<avx2ExpLanes<_ZGVdN8v_expf>>(x, n);
#endif
  if (fn == MathFn::kExp && table != kScalarFloat)
    return expWithUnderflow(table, x, n);
  table[int(fn)](x, n);
}

void vectorMath(MathFn fn, double *x, int64_t n) {
  static const DoubleFn *table = doubleTable(vectorMathIsa());
  table[int(fn)](x, n);
}

bool vectorMathWide(MathFn fn, float *x, int64_t n) {
#if DTCC_HAVE_LIBMVEC
  if (!cpuHasAvx512F() || (fn != MathFn::kExp && fn != MathFn::kLog))
    return false;
  if (fn == MathFn::kExp)
    avx512Float<_ZGVeN16v_expf>(x, n);
  else
    avx512Float<_ZGVeN16v_logf>(x, n);
  return true;
#else
  (void)fn, (void)x, (void)n;
  return false;
#endif
}

bool vectorMathWithIsa(int isa, MathFn fn, float *x, int64_t n) {
  if (!isaAvailable(isa))
    return false;
  floatTable(isa)[int(fn)](x, n);
  return true;
}

bool vectorMathWithIsa(int isa, MathFn fn, double *x, int64_t n) {
  if (!isaAvailable(isa))
    return false;
  doubleTable(isa)[int(fn)](x, n);
  return true;
}

} // namespace dtcc::runtime::cpu
