//===- dtcc-opt.cpp - run dtcc passes on .mlir files ----------------------===//
//
// Like mlir-opt, with dtcc's dialects and passes registered, and dtcc's
// internal-error reporting (compiler/InternalErrors.h): a verifier failure
// after a pass or a fatal error names the pass and the op, exit status 1.
//
//===----------------------------------------------------------------------===//

#include "compiler/InternalErrors.h"
#include "dialects/Registration.h"
#include "passes/Graph/Passes.h"
#include "passes/Lowering/Passes.h"
#include "passes/Planning/Passes.h"
#include "passes/Sharding/Passes.h"
#include "passes/Pipelines/Phases.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

namespace dtcc {
void registerTestInternalErrorPass(); // TestInternalErrors.cpp
} // namespace dtcc

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  dtcc::installInternalErrorHandlers("dtcc-opt");
  mlir::DialectRegistry registry;
  dtcc::registerDtccDialects(registry);
  dtcc::graph::registerGraphPasses();
  dtcc::lowering::registerLoweringPasses();
  dtcc::shard::registerShardingPasses();
  dtcc::planning::registerPlanningPasses();
  dtcc::pipelines::registerPhasePipelines();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  dtcc::registerTestInternalErrorPass();

  // mlir-opt's main (MlirOptMain(argc, argv, ...)), with the pass manager
  // instrumented after the command line built it.
  auto [inputFile, outputFile] = mlir::registerAndParseCLIOptions(
      argc, argv, "dtcc optimizer driver\n", registry);
  mlir::MlirOptMainConfig config = mlir::MlirOptMainConfig::createFromCLOptions();
  if (config.shouldShowDialects() || config.shouldListPasses())
    return mlir::asMainReturnCode(
        mlir::MlirOptMain(argc, argv, inputFile, outputFile, registry));
  mlir::MlirOptMainConfig fromCommandLine = config;
  // The action debugging options own the context's action handler.
  const mlir::tracing::DebugConfig &debug = config.getDebugConfig();
  bool useActions = debug.getLogActionsTo().empty() &&
                    !debug.isDebuggerActionHookEnabled() &&
                    debug.getProfileActionsTo().empty();
  config.setPassPipelineSetupFn([fromCommandLine, useActions](mlir::PassManager &pm) {
    if (mlir::failed(fromCommandLine.setupPassPipeline(pm)))
      return mlir::failure();
    dtcc::instrumentPassManager(pm, useActions);
    return mlir::success();
  });

  std::string error;
  auto input = mlir::openInputFile(inputFile, &error);
  if (!input) {
    llvm::errs() << error << "\n";
    return 1;
  }
  auto output = mlir::openOutputFile(outputFile, &error);
  if (!output) {
    llvm::errs() << error << "\n";
    return 1;
  }
  if (mlir::failed(mlir::MlirOptMain(output->os(), std::move(input), registry,
                                     config)))
    return 1;
  output->keep();
  return 0;
}
