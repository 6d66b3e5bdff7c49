//===- dtcc-gpu-codegen.cpp - PTX and cubin for fused regions -------------===//
//
// Runs compiler/codegen/GpuCodegen.h on a module of fused-region functions
// and prints a stage: the loops mapped onto blocks and threads, the final
// module (launches and gpu.binary), the kernel table, the PTX, or writes the
// serialized kernel module the CUDA runtime loads.
//
//===----------------------------------------------------------------------===//

#include "compiler/InternalErrors.h"
#include "compiler/codegen/GpuCodegen.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
namespace cl = llvm::cl;

static cl::opt<std::string> inputFile(cl::Positional, cl::desc("<input.mlir>"),
                                      cl::init("-"));
static cl::opt<std::string> outputFile("o", cl::desc("output file"),
                                       cl::init("-"));
enum class Emit { Mapped, Final, Table, Ptx, Module };
static cl::opt<Emit> emit(
    "emit", cl::desc("what to print"), cl::init(Emit::Table),
    cl::values(
        clEnumValN(Emit::Mapped, "mapped",
                   "the regions as scf.parallel loops mapped onto the GPU"),
        clEnumValN(Emit::Final, "final",
                   "the module after code generation (launches, gpu.binary)"),
        clEnumValN(Emit::Table, "table",
                   "each region's launches: kernel, grid, block, parameters"),
        clEnumValN(Emit::Ptx, "ptx", "the table, then the PTX of each chip"),
        clEnumValN(Emit::Module, "module",
                   "the serialized kernel module the CUDA runtime loads")));
static cl::list<std::string> chips("chip", cl::desc("GPU architectures"),
                                   cl::CommaSeparated);
static cl::opt<int> threadsPerBlock("threads-per-block", cl::init(256));
static cl::opt<std::string> cudaToolkit(
    "cuda-toolkit",
    cl::desc("the CUDA toolkit whose libdevice is linked (default: the one "
             "found at configure time)"));
static cl::opt<bool> noPtxas("no-ptxas",
                             cl::desc("do not run ptxas (PTX only)"));

static void printTable(const dtcc::runtime::GpuKernelModule &module,
                       llvm::raw_ostream &os) {
  for (const auto &region : module.regions) {
    os << "region @" << region.symbol << " buffers " << region.numBuffers
       << " scratch [" << llvm::join(llvm::map_range(region.scratchBytes,
                                                      [](uint64_t b) {
                                                        return std::to_string(b);
                                                      }),
                                     ", ")
       << "]\n";
    for (const auto &launch : region.launches) {
      os << "  launch " << launch.kernel << " grid (" << launch.grid[0] << ", "
         << launch.grid[1] << ", " << launch.grid[2] << ") block ("
         << launch.block[0] << ", " << launch.block[1] << ", "
         << launch.block[2] << ") shared " << launch.sharedBytes
         << " params [";
      llvm::interleaveComma(launch.params, os);
      os << "]\n";
    }
  }
  for (const auto &image : module.images)
    os << "image " << image.chip << " ptx " << image.ptx.size() << " bytes"
       << (image.cubin.empty() ? ", no cubin" : ", cubin") << "\n";
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  dtcc::installInternalErrorHandlers("dtcc-gpu-codegen");
  cl::ParseCommandLineOptions(argc, argv,
                              "dtcc GPU code generation of fused regions\n");
  DialectRegistry registry;
  dtcc::codegen::registerGpuCodegenDialects(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();

  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler handler(sourceMgr, &context);
  std::string error;
  auto input = openInputFile(inputFile, &error);
  if (!input) {
    llvm::errs() << "dtcc-gpu-codegen: " << error << "\n";
    return 1;
  }
  sourceMgr.AddNewSourceBuffer(std::move(input), llvm::SMLoc());
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sourceMgr, &context);
  if (!module)
    return 1;

  dtcc::codegen::GpuCodegenOptions options;
  if (!chips.empty())
    options.chips.assign(chips.begin(), chips.end());
  options.threadsPerBlock = threadsPerBlock;
  if (noPtxas)
    options.ptxasPath.clear();
  if (cudaToolkit.getNumOccurrences())
    options.cudaToolkitDir = cudaToolkit;

  auto output = openOutputFile(outputFile, &error);
  if (!output) {
    llvm::errs() << "dtcc-gpu-codegen: " << error << "\n";
    return 1;
  }
  llvm::raw_ostream &os = output->os();
  if (emit == Emit::Mapped) {
    if (failed(dtcc::codegen::mapRegionsToGpuLoops(*module, options)))
      return 1;
    module->print(os);
  } else {
    auto kernels = dtcc::codegen::generateGpuKernels(*module, options);
    if (failed(kernels))
      return 1;
    switch (emit) {
    case Emit::Final:
      module->print(os);
      break;
    case Emit::Table:
      printTable(*kernels, os);
      break;
    case Emit::Ptx:
      printTable(*kernels, os);
      for (const auto &image : kernels->images)
        os << "// ----- PTX " << image.chip << "\n" << image.ptx << "\n";
      break;
    case Emit::Module:
      os << dtcc::runtime::serializeGpuKernelModule(*kernels);
      break;
    case Emit::Mapped:
      break;
    }
  }
  output->keep();
  return 0;
}
