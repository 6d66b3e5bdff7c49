//===- BlasCore.h - OpenBLAS's kernel family for this CPU -------*- C++ -*-===//
//
// Debian's OpenBLAS (0.3.21, DYNAMIC_ARCH) picks its kernels by CPU model
// and does not know newer Intel models: on a Xeon of family 6, model 207
// (Emerald Rapids) it falls back to its SSE3 "Prescott" kernels, about 5x
// slower than its AVX-512 ones on the same machine (bench/RESULTS.md). It
// reads OPENBLAS_CORETYPE once, when the library loads, so the only way to
// correct the choice is to set it and execute the program again.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CPU_BLASCORE_H
#define DTCC_RUNTIME_DEVICE_CPU_BLASCORE_H

#include "runtime/base/DType.h"

#include <cstdint>
#include <string>

namespace dtcc::runtime::cpu {

/// What the CPU's instruction set supports, as OpenBLAS's kernel families
/// need it.
struct CpuVectorIsa {
  bool avx2Fma = false;
  bool avx512 = false;     // F, VL, BW and DQ
  bool avx512Bf16 = false;
};

/// This CPU's instruction set (cpuid).
CpuVectorIsa hostVectorIsa();

/// The OpenBLAS kernel family to ask for instead of `detected` (OpenBLAS's
/// own choice, openblas_get_corename()), or "" when `detected` already uses
/// the widest vectors `isa` has (or is a family this function does not
/// know, which it leaves alone).
std::string betterBlasCoreType(const std::string &detected,
                               const CpuVectorIsa &isa);

/// Whether a CPU with `isa` has the instructions of OpenBLAS's kernel
/// family `core` (true for a family this file does not know).
bool cpuRunsBlasCore(const std::string &core, const CpuVectorIsa &isa);

/// The rows of a single-precision product that OpenBLAS's kernels for
/// `core` (openblas_get_corename()) compute as one call computes them
/// whatever the split, when split at multiples of this: 32 on the AVX-512
/// families (SkylakeX, Cooperlake, SapphireRapids), 12 on Haswell and Zen,
/// and 96 (both) for the others. Measured on OpenBLAS 0.3.21 against
/// whole calls: the Haswell and Zen kernels change a row's bits at splits
/// off multiples of 12 (32, 64, 500), the AVX-512 ones at none tried.
int64_t sgemmRowAlign(const std::string &core);

/// A note for the user when `given`, their OPENBLAS_CORETYPE (or their
/// environment's: some images set Haswell), names OpenBLAS kernels of
/// narrower vectors than a CPU with `isa` runs, which dtcc leaves as given:
/// on a Zen 5 the Haswell kernels multiply f32 at half the Cooperlake
/// kernels' rate (bench/RESULTS.md). "" otherwise (null or empty `given`,
/// a family of the CPU's width, one this file does not know).
std::string narrowBlasCoreNote(const char *given, const CpuVectorIsa &isa);

/// Whether the CPU's matmul and convolution kernels compute `dtype`'s
/// products in f32 copies of their operands (MatmulKernels.cpp): f16
/// always, bf16 where oneDNN has no native bf16 kernels on this CPU
/// (neither AVX512-BF16 nor AMX) or DTCC_CPU_MATMUL=blas.
bool halfProductsInF32(DType dtype);

/// A note for the user when a program of compute type `dtype` ("bf16",
/// "fp16": the program's dtcc.dtype) multiplies in f32 copies on this CPU,
/// so that it runs at about fp32's speed; "" otherwise.
std::string halfProductsNote(const std::string &dtype);

/// Called first in main(), for the settings libraries read once, when they
/// load (before main), where the user did not give them:
/// - OPENBLAS_CORETYPE, when OpenBLAS chose kernels narrower than the CPU
///   supports;
/// - GOMP_SPINCOUNT=10000 (about 0.1 ms of polling), when the kernels run
///   on more than one thread (cpuThreads()) and the user set neither it
///   nor OMP_WAIT_POLICY: oneDNN's convolutions run on libgomp's OpenMP
///   threads, which by default poll for about 3 ms after each call and
///   hold the cores dtcc's own kernel threads need next (a bf16 GPT step on
///   2 cores took twice as long on 2 threads as on 1), while asleep they
///   are slow to wake for the next convolution (a small U-Net's step 7.5x
///   its 1-thread time under OMP_WAIT_POLICY=passive, which the runner set
///   until 2026-11-28: bench/RESULTS.md).
/// Sets them and executes /proc/self/exe again with the same arguments (it
/// does not return then; the second time nothing is left to set).
/// Otherwise, or if the re-execution fails, returns.
void applyLoadTimeSettings(char **argv);

} // namespace dtcc::runtime::cpu

#endif // DTCC_RUNTIME_DEVICE_CPU_BLASCORE_H
