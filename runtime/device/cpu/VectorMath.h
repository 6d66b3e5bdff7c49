//===- VectorMath.h - vectorized math for the CPU kernels -------*- C++ -*-===//
//
// exp, log, tanh, erf, ... over arrays, through glibc's libmvec (its AVX2 or
// SSE variants, chosen once at run time) where the build found it, else
// libm one element at a time.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CPU_VECTORMATH_H
#define DTCC_RUNTIME_DEVICE_CPU_VECTORMATH_H

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

/// x[i] = fn(x[i]) for i < n (libmvec: within 4 ulp of libm).
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

} // namespace dtcc::runtime::cpu

#endif // DTCC_RUNTIME_DEVICE_CPU_VECTORMATH_H
