//===- VectorMath.h - vectorized math for the CPU kernels -------*- C++ -*-===//
//
// exp, log, tanh, ... over arrays, through glibc's libmvec (its AVX2 or
// SSE variants, chosen once at run time; expf and logf on AVX-512, whose
// bits are AVX2's) where the build found it, else libm one element at a
// time; erf of floats by dtcc's own rational function (ErfRational),
// which the fused regions' code computes too.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CPU_VECTORMATH_H
#define DTCC_RUNTIME_DEVICE_CPU_VECTORMATH_H

#include <cmath>
#include <cstdint>

namespace dtcc::runtime::cpu {

/// The functions, as (enumerator, libm name) pairs.
#define DTCC_VECTOR_MATH_FNS(X)                                                \
  X(kExp, exp)                                                                 \
  X(kExpm1, expm1)                                                             \
  X(kLog, log)                                                                 \
  X(kLog1p, log1p)                                                             \
  X(kTanh, tanh)                                                               \
  X(kErf, erf)                                                                 \
  X(kSin, sin)                                                                 \
  X(kCos, cos)                                                                 \
  X(kTan, tan)                                                                 \
  X(kAsin, asin)                                                               \
  X(kAcos, acos)                                                               \
  X(kAtan, atan)                                                               \
  X(kSinh, sinh)                                                               \
  X(kCosh, cosh)                                                               \
  X(kAsinh, asinh)                                                             \
  X(kAcosh, acosh)                                                             \
  X(kAtanh, atanh)

enum class MathFn : int {
#define DTCC_ENUM(E, NAME) E,
  DTCC_VECTOR_MATH_FNS(DTCC_ENUM)
#undef DTCC_ENUM
      kCount
};

/// Elements per call that kernels use for their stack buffers.
constexpr int64_t kMathChunk = 256;

/// erf of a float as dtcc computes it, in the kernels (vectorMath) and in
/// the fused regions (compiler/codegen/CpuCodegen.cpp emits the same
/// operations in the same order): c P(c^2) / Q(c^2) for c = x clamped to
/// +-kSaturation (past which erf rounds to +-1), P and Q by Horner's rule
/// with fused multiply-adds, the quotient clamped to [-1, 1]. A NaN stays a
/// NaN. Within 7 ulp of erf, 4e-7 relative (the largest errors near +-1;
/// CpuVectorMath.ErfRational* checks every 61st float; every 5th measured
/// 5.9 ulp at worst), where libmvec's erff is within 4 ulp at twice the
/// time. scripts/fit_erf_rational.py
/// fitted the coefficients (least squares weighted towards the largest
/// relative error, rounded to float one at a time).
struct ErfRational {
  static constexpr float kSaturation = 3.92f;
  static constexpr int kPDegree = 6, kQDegree = 5;
  static constexpr float kP[kPDegree + 1] = {
      1.1283791065216064f,     0.18513530492782593f,   0.05424336716532707f,
      0.0038385393563658f,     0.0003767321177292615f, 4.6085210669843946e-06f,
      -1.2796093962208488e-08f};
  static constexpr float kQ[kQDegree + 1] = {1.0f,
                                             0.4974052906036377f,
                                             0.11387322098016739f,
                                             0.015429789200425148f,
                                             0.001301471726037562f,
                                             6.239241338334978e-05f};

  static inline __attribute__((always_inline)) float eval(float x) {
    const float c = x < -kSaturation  ? -kSaturation
                    : x > kSaturation ? kSaturation
                                      : x;
    const float t = c * c;
    float p = kP[kPDegree], q = kQ[kQDegree];
    for (int k = kPDegree - 1; k >= 0; --k)
      p = std::fma(p, t, kP[k]);
    for (int k = kQDegree - 1; k >= 0; --k)
      q = std::fma(q, t, kQ[k]);
    const float y = (c * p) / q;
    return y > 1.0f ? 1.0f : y < -1.0f ? -1.0f : y;
  }
};

/// x[i] = erf(x[i]) for i < n by ErfRational, with the CPU's fused
/// multiply-add where it has one (AVX-512 or AVX2 clones, bitwise the
/// baseline's, which calls libm's fmaf).
void erfRational(float *x, int64_t n);

/// x[i] = fn(x[i]) for i < n (libmvec: within 4 ulp of libm; erf of floats
/// by erfRational).
void vectorMath(MathFn fn, float *x, int64_t n);
void vectorMath(MathFn fn, double *x, int64_t n);

/// Instruction sets: 0 scalar libm, 1 SSE libmvec, 2 AVX2 libmvec.
enum MathIsa : int { kMathScalar = 0, kMathSse = 1, kMathAvx2 = 2 };
/// The instruction set vectorMath uses on this machine.
int vectorMathIsa();
/// vectorMath with a given instruction set, for tests; false (and nothing
/// computed) when this build or machine lacks it.
bool vectorMathWithIsa(int isa, MathFn fn, float *x, int64_t n);
bool vectorMathWithIsa(int isa, MathFn fn, double *x, int64_t n);
/// libmvec's AVX-512 expf or logf (fn kExp or kLog), which vectorMath
/// takes on CPUs with AVX-512 for their AVX2 bits, for tests; false (and
/// nothing computed) for another function or without AVX-512.
bool vectorMathWide(MathFn fn, float *x, int64_t n);

} // namespace dtcc::runtime::cpu

#endif // DTCC_RUNTIME_DEVICE_CPU_VECTORMATH_H
