//===- GpuPtxasTest.cpp - ptxas accepts the generated PTX -----------------===//
//
// Every hand-written region of tests/lit/Codegen through the whole CUDA code
// generation for sm_80 and sm_90; ptxas (found at configure time) must
// accept each PTX and write a cubin (an ELF file for that architecture).
// Skipped, saying so, where no ptxas was found.
//
//===----------------------------------------------------------------------===//

#include "compiler/codegen/GpuCodegen.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

using namespace mlir;

namespace {

class GpuPtxas : public ::testing::TestWithParam<const char *> {};

FailureOr<dtcc::runtime::GpuKernelModule>
generate(const std::string &file, MLIRContext &context, std::string &errors) {
  context.getDiagEngine().registerHandler([&](Diagnostic &diag) {
    errors += diag.str() + "\n";
    return success();
  });
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(
      std::string(DTCC_CODEGEN_INPUTS) + "/" + file, &context);
  if (!module)
    return failure();
  dtcc::codegen::GpuCodegenOptions options; // sm_80 and sm_90, ptxas
  return dtcc::codegen::generateGpuKernels(*module, options);
}

MLIRContext *newContext() {
  DialectRegistry registry;
  dtcc::codegen::registerGpuCodegenDialects(registry);
  auto *context = new MLIRContext(registry);
  context->loadAllAvailableDialects();
  return context;
}

TEST_P(GpuPtxas, AcceptsThePtxOfEveryArchitecture) {
  if (std::string(dtcc::codegen::configuredPtxasPath()).empty())
    GTEST_SKIP() << "ptxas was not found when dtcc was configured";
  std::unique_ptr<MLIRContext> context(newContext());
  std::string errors;
  auto kernels = generate(GetParam(), *context, errors);
  ASSERT_TRUE(succeeded(kernels)) << errors;
  ASSERT_EQ(kernels->images.size(), 2u);
  EXPECT_EQ(kernels->images[0].chip, "sm_80");
  EXPECT_EQ(kernels->images[1].chip, "sm_90");
  for (const auto &image : kernels->images) {
    EXPECT_NE(image.ptx.find(".target " + image.chip), std::string::npos);
    ASSERT_GE(image.cubin.size(), 64u) << image.chip;
    EXPECT_EQ(image.cubin.substr(0, 4), "\x7f" "ELF") << image.chip;
    // Every launched kernel is an entry of the image.
    for (const auto &region : kernels->regions)
      for (const auto &launch : region.launches) {
        EXPECT_NE(image.ptx.find(".entry " + launch.kernel + "("),
                  std::string::npos)
            << launch.kernel;
        EXPECT_NE(image.cubin.find(launch.kernel), std::string::npos)
            << launch.kernel << " in the " << image.chip << " cubin";
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Regions, GpuPtxas,
                         ::testing::Values("elementwise_broadcast.mlir",
                                           "bias_gelu.mlir", "softmax_row.mlir",
                                           "norm_rows.mlir",
                                           "adamw_update.mlir"));

// The check can fail: ptxas's rejection is an error with its message.
TEST(GpuPtxasRejection, ReportsPtxasMessage) {
  if (std::string(dtcc::codegen::configuredPtxasPath()).empty())
    GTEST_SKIP() << "ptxas was not found when dtcc was configured";
  std::unique_ptr<MLIRContext> context(newContext());
  std::string errors;
  context->getDiagEngine().registerHandler([&](Diagnostic &diag) {
    errors += diag.str();
    return success();
  });
  const char *bad = ".version 8.0\n.target sm_80\n.address_size 64\n"
                    ".visible .entry k() {\n  add.f32 %r1, %r2, %r3;\n  ret;\n}\n";
  auto cubin = dtcc::codegen::assembleWithPtxas(
      dtcc::codegen::configuredPtxasPath(), bad, "sm_80",
      UnknownLoc::get(context.get()));
  EXPECT_TRUE(failed(cubin));
  EXPECT_NE(errors.find("rejected the PTX for sm_80"), std::string::npos)
      << errors;
  EXPECT_NE(errors.find("%r1"), std::string::npos) << errors;
}

} // namespace
