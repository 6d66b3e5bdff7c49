//===- IsaDispatch.h - hot loops compiled for AVX-512 as well ---*- C++ -*-===//
//
// The runtime is built for baseline x86-64 (it runs on the cluster's nodes,
// whatever their CPU), so the loops the compiler vectorizes use SSE2's four
// float lanes. The hottest elementwise loops are compiled a second time for
// AVX-512 (F, VL, BW, DQ) and chosen at run time when the CPU has it: the
// loop is an always-inline body, and a DTCC_AVX512_TARGET function that
// only calls it gets the body compiled for AVX-512:
//
//   template <...> DTCC_ALWAYS_INLINE void loopBody(...) { ... }
//   template <...> DTCC_AVX512_TARGET void loopAvx512(...) { loopBody(...); }
//   ... if (cpuHasAvx512()) loopAvx512(...); else loopBody(...);
//
// Both versions compute each element with the same IEEE operations in the
// same order: bodies must not let the compiler contract a * b + c into a
// fused multiply-add (DTCC_NO_CONTRACT at the top of the body), which
// AVX-512 would allow and SSE2 does not, so results do not depend on the
// CPU's vector width.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CPU_ISADISPATCH_H
#define DTCC_RUNTIME_DEVICE_CPU_ISADISPATCH_H

#if defined(__x86_64__) && defined(__clang__)
#define DTCC_HAVE_AVX512_CLONES 1
#else
#define DTCC_HAVE_AVX512_CLONES 0
#endif

#define DTCC_ALWAYS_INLINE inline __attribute__((always_inline))
#if defined(__clang__)
#define DTCC_NO_CONTRACT _Pragma("clang fp contract(off)")
#else
#define DTCC_NO_CONTRACT
#endif

/// Before an elementwise loop whose iteration j reads its inputs at j and
/// writes its output at j: the memory plan gives an output either a buffer
/// of its own or exactly the buffer of a dying input of its type
/// (dtcc-lower-to-exec's in-place reuse), never a partial overlap, so the
/// iterations are independent. Without it the vectorizer checks overlap at
/// run time, and an exact alias fails that check and runs the scalar loop
/// (a bf16 bias add in place 3x slower).
#if defined(__clang__)
#define DTCC_INDEPENDENT_ITERATIONS _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define DTCC_INDEPENDENT_ITERATIONS _Pragma("GCC ivdep")
#else
#define DTCC_INDEPENDENT_ITERATIONS
#endif

namespace dtcc::runtime::cpu {

/// Whether the CPU runs the AVX-512 clones (read once; false off x86-64,
/// and with DTCC_CPU_ISA=baseline, for tests and comparisons).
bool cpuHasAvx512();

/// Whether the CPU itself has the AVX-512 subsets the clones are compiled
/// for (F, VL, BW, DQ), whatever DTCC_CPU_ISA says: for kernels whose
/// choice follows the CPU, as a library's does (false off x86-64).
bool cpuSupportsAvx512();

} // namespace dtcc::runtime::cpu

#if DTCC_HAVE_AVX512_CLONES
#define DTCC_AVX512_TARGET                                                     \
  __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq")))
#endif

/// After a lambda's parameter list: the lambda is inlined into every
/// caller, so that withAvx512 compiles its body for each instruction set.
#define DTCC_INLINE_LAMBDA __attribute__((always_inline))

namespace dtcc::runtime::cpu {

#if DTCC_HAVE_AVX512_CLONES
template <typename F> DTCC_AVX512_TARGET void runAvx512(const F &body) {
  body();
}
#endif

/// Runs `body`, a lambda marked DTCC_INLINE_LAMBDA, compiled for AVX-512
/// where the CPU has it and for the baseline elsewhere: a whole kernel's
/// loop nest in one clone. The CPU runtime is compiled with
/// -ffp-contract=off, so neither version fuses a * b + c and both compute
/// every value with the same IEEE operations in the same order (the
/// kernels' reductions keep their lanes explicit).
template <typename F> void withAvx512(const F &body) {
#if DTCC_HAVE_AVX512_CLONES
  if (cpuHasAvx512()) {
    runAvx512(body);
    return;
  }
#endif
  body();
}

} // namespace dtcc::runtime::cpu

#endif // DTCC_RUNTIME_DEVICE_CPU_ISADISPATCH_H
