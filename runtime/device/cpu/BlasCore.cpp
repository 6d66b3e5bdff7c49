//===- BlasCore.cpp - OpenBLAS's kernel family for this CPU ---------------===//

#include "runtime/device/cpu/BlasCore.h"
#include "runtime/device/cpu/ThreadPool.h"

#include <algorithm>
#include <cstdlib>
#include <unistd.h>

extern "C" char *openblas_get_corename(void);

namespace dtcc::runtime::cpu {
namespace {

/// How wide the vectors of an OpenBLAS kernel family are: 1 SSE, 2 AVX2,
/// 3 AVX-512, 4 AVX-512 with BF16; 0 for a family not listed here.
int familyWidth(const std::string &name) {
  static const char *const sse[] = {"Prescott", "Core2", "Penryn", "Dunnington",
                                    "Nehalem", "Atom", "Katmai", "Coppermine",
                                    "Northwood", "Banias", "Sandybridge"};
  for (const char *n : sse)
    if (name == n)
      return 1;
  if (name == "Haswell" || name == "Zen")
    return 2;
  if (name == "SkylakeX")
    return 3;
  if (name == "Cooperlake" || name == "SapphireRapids")
    return 4;
  return 0;
}

/// The widest family `isa` runs, as familyWidth numbers them.
int isaWidth(const CpuVectorIsa &isa) {
  return isa.avx512Bf16 ? 4 : isa.avx512 ? 3 : isa.avx2Fma ? 2 : 1;
}

} // namespace

bool cpuRunsBlasCore(const std::string &core, const CpuVectorIsa &isa) {
  return familyWidth(core) <= isaWidth(isa);
}

int64_t sgemmRowAlign(const std::string &core) {
  switch (familyWidth(core)) {
  case 3:
  case 4:
    return 32;
  case 2:
    return 12;
  default:
    return 96;
  }
}

CpuVectorIsa hostVectorIsa() {
  CpuVectorIsa isa;
  __builtin_cpu_init();
  isa.avx2Fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  isa.avx512 = __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512dq");
  isa.avx512Bf16 = isa.avx512 && __builtin_cpu_supports("avx512bf16");
  return isa;
}

std::string betterBlasCoreType(const std::string &detected,
                               const CpuVectorIsa &isa) {
  int have = familyWidth(detected);
  if (have == 0)
    return "";
  int best = isaWidth(isa);
  if (best <= have)
    return "";
  switch (best) {
  case 4:
    return "Cooperlake";
  case 3:
    return "SkylakeX";
  default:
    return "Haswell";
  }
}

std::string narrowBlasCoreNote(const char *given, const CpuVectorIsa &isa) {
  if (!given || !*given)
    return "";
  // Vector width only: SkylakeX's f32 kernels are Cooperlake's.
  const int width = familyWidth(given);
  if (width == 0 || std::min(width, 3) >= std::min(isaWidth(isa), 3))
    return "";
  // The family this CPU runs at its widest (betterBlasCoreType of the
  // family given: it is narrower than the CPU's, so never "").
  std::string widest = betterBlasCoreType(given, isa);
  return std::string("note: OPENBLAS_CORETYPE=") + given + " runs OpenBLAS's " +
         (width == 1 ? "SSE" : "AVX2") + " kernels for the matrix products; " +
         "this CPU runs its " + widest + " kernels (" +
         (isa.avx512 ? "AVX-512" : "AVX2") +
         "): unset OPENBLAS_CORETYPE and dtcc chooses them\n";
}

void applyLoadTimeSettings(char **argv) {
  bool changed = false;
  if (!std::getenv("OPENBLAS_CORETYPE")) {
    const char *detected = openblas_get_corename();
    std::string better =
        betterBlasCoreType(detected ? detected : "", hostVectorIsa());
    if (!better.empty()) {
      setenv("OPENBLAS_CORETYPE", better.c_str(), 1);
      changed = true;
    }
  }
  // oneDNN's convolutions run on libgomp's threads. Between its parallel
  // regions they poll, then sleep: by default for about 3 ms (300000
  // spins), holding the cores the kernels' own threads need next; asleep
  // (OMP_WAIT_POLICY=passive, until 2026-11-28) each region waits for them
  // to wake, tens to hundreds of microseconds on a virtual machine (a small
  // U-Net's step 2.2 ms on 1 thread, 16.5 on 2); polling forever (active)
  // takes a core from the kernels' threads for good. They poll as long as
  // the kernels' own idle threads, about 0.1 ms (ThreadPool.cpp; libgomp
  // counts about 100000 spins a millisecond). One thread: the work runs on
  // the caller's core, which libgomp's workers do not take; nothing to set.
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT") &&
      cpuThreads() > 1) {
    setenv("GOMP_SPINCOUNT", "10000", 1);
    changed = true;
  }
  if (changed)
    execv("/proc/self/exe", argv);
  // The program still runs, on the libraries' own choices.
}

} // namespace dtcc::runtime::cpu
