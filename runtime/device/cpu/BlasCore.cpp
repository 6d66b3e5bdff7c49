//===- BlasCore.cpp - OpenBLAS's kernel family for this CPU ---------------===//

#include "runtime/device/cpu/BlasCore.h"
#include "runtime/device/cpu/ThreadPool.h"

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

} // namespace

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
  int best = isa.avx512Bf16 ? 4 : isa.avx512 ? 3 : isa.avx2Fma ? 2 : 1;
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
  // One thread: the kernels' and OpenBLAS's work runs on the caller's core,
  // which libgomp's workers do not take; nothing to quiet.
  if (!std::getenv("OMP_WAIT_POLICY") && cpuThreads() > 1) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    changed = true;
  }
  if (changed)
    execv("/proc/self/exe", argv);
  // The program still runs, on the libraries' own choices.
}

} // namespace dtcc::runtime::cpu
