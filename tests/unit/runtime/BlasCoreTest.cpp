//===- BlasCoreTest.cpp - OpenBLAS's kernel family for this CPU -----------===//

#include "runtime/device/cpu/BlasCore.h"

#include <gtest/gtest.h>

using namespace dtcc::runtime::cpu;

namespace {

CpuVectorIsa isa(bool avx2, bool avx512, bool bf16) {
  CpuVectorIsa result;
  result.avx2Fma = avx2;
  result.avx512 = avx512;
  result.avx512Bf16 = bf16;
  return result;
}

} // namespace

TEST(BlasCore, SseFallbackOnAnAvx512Bf16CpuAsksForCooperlake) {
  // Debian's OpenBLAS 0.3.21 on an Emerald Rapids Xeon (family 6, model 207).
  EXPECT_EQ(betterBlasCoreType("Prescott", isa(true, true, true)), "Cooperlake");
  EXPECT_EQ(betterBlasCoreType("Sandybridge", isa(true, true, false)), "SkylakeX");
  EXPECT_EQ(betterBlasCoreType("Nehalem", isa(true, false, false)), "Haswell");
  EXPECT_EQ(betterBlasCoreType("Haswell", isa(true, true, false)), "SkylakeX");
}

TEST(BlasCore, AFittingOrUnknownChoiceIsLeftAlone) {
  EXPECT_EQ(betterBlasCoreType("Cooperlake", isa(true, true, true)), "");
  EXPECT_EQ(betterBlasCoreType("SapphireRapids", isa(true, true, true)), "");
  EXPECT_EQ(betterBlasCoreType("SkylakeX", isa(true, true, false)), "");
  EXPECT_EQ(betterBlasCoreType("Zen", isa(true, false, false)), "");
  EXPECT_EQ(betterBlasCoreType("Prescott", isa(false, false, false)), "");
  // Families this list does not know (ARM, POWER, future x86): no guess.
  EXPECT_EQ(betterBlasCoreType("NeoverseN1", isa(true, true, true)), "");
  EXPECT_EQ(betterBlasCoreType("", isa(true, true, true)), "");
}

TEST(BlasCore, AFamilyRunsWhereTheCpuHasItsInstructions) {
  EXPECT_TRUE(cpuRunsBlasCore("SkylakeX", isa(true, true, false)));
  EXPECT_FALSE(cpuRunsBlasCore("SkylakeX", isa(true, false, false)));
  EXPECT_FALSE(cpuRunsBlasCore("Cooperlake", isa(true, true, false)));
  EXPECT_TRUE(cpuRunsBlasCore("Haswell", isa(true, false, false)));
  EXPECT_FALSE(cpuRunsBlasCore("Zen", isa(false, false, false)));
  EXPECT_TRUE(cpuRunsBlasCore("Prescott", isa(false, false, false)));
  EXPECT_TRUE(cpuRunsBlasCore("NeoverseN1", isa(false, false, false)));
}

TEST(BlasCore, SgemmRowBlocksFollowTheKernelFamily) {
  EXPECT_EQ(sgemmRowAlign("SkylakeX"), 32);
  EXPECT_EQ(sgemmRowAlign("Cooperlake"), 32);
  EXPECT_EQ(sgemmRowAlign("Haswell"), 12);
  EXPECT_EQ(sgemmRowAlign("Zen"), 12);
  EXPECT_EQ(sgemmRowAlign("Prescott"), 96);
  EXPECT_EQ(sgemmRowAlign(""), 96);
}

TEST(BlasCore, ANarrowerGivenFamilyIsNamedWithTheCpusOwn) {
  // Some images set OPENBLAS_CORETYPE=Haswell; on an AVX-512 CPU with BF16
  // (a Zen 5) those kernels multiply f32 at half the Cooperlake kernels'
  // rate.
  std::string note = narrowBlasCoreNote("Haswell", isa(true, true, true));
  EXPECT_NE(note.find("OPENBLAS_CORETYPE=Haswell"), std::string::npos) << note;
  EXPECT_NE(note.find("AVX2 kernels"), std::string::npos) << note;
  EXPECT_NE(note.find("Cooperlake kernels (AVX-512)"), std::string::npos)
      << note;
  EXPECT_NE(narrowBlasCoreNote("Prescott", isa(true, false, false))
                .find("SSE kernels"),
            std::string::npos);
}

TEST(BlasCore, AGivenFamilyOfTheCpusWidthHasNoNote) {
  EXPECT_EQ(narrowBlasCoreNote(nullptr, isa(true, true, true)), "");
  EXPECT_EQ(narrowBlasCoreNote("", isa(true, true, true)), "");
  EXPECT_EQ(narrowBlasCoreNote("Haswell", isa(true, false, false)), "");
  // SkylakeX's f32 kernels are Cooperlake's: the same vectors.
  EXPECT_EQ(narrowBlasCoreNote("SkylakeX", isa(true, true, true)), "");
  EXPECT_EQ(narrowBlasCoreNote("Cooperlake", isa(true, true, true)), "");
  EXPECT_EQ(narrowBlasCoreNote("NeoverseN1", isa(true, true, true)), "");
}

// The runner's note for a half-precision program on the CPU follows what the
// matmul kernel does: fp16 always in f32 copies, bf16 where oneDNN has no
// native bf16 kernels here or DTCC_CPU_MATMUL=blas keeps it off them; none
// for fp32.
TEST(BlasCore, HalfProductsNoteFollowsTheMatmulKernel) {
  EXPECT_EQ(halfProductsNote("fp32"), "");
  EXPECT_EQ(halfProductsNote(""), "");
  EXPECT_TRUE(halfProductsInF32(dtcc::runtime::DType::kF16));
  EXPECT_NE(halfProductsNote("fp16").find("f32 copies"), std::string::npos);
  setenv("DTCC_CPU_MATMUL", "blas", 1);
  EXPECT_TRUE(halfProductsInF32(dtcc::runtime::DType::kBF16));
  std::string note = halfProductsNote("bf16");
  EXPECT_NE(note.find("neither AVX512-BF16 nor AMX"), std::string::npos)
      << note;
  unsetenv("DTCC_CPU_MATMUL");
  EXPECT_EQ(halfProductsNote("bf16").empty(),
            !halfProductsInF32(dtcc::runtime::DType::kBF16));
}
