//===- GpuMappingTest.cpp - GPU-mapped regions executed on the CPU --------===//
//
// The GPU mapping (collapse, tile onto blocks and threads, guards, scratch
// arguments) decides every index a kernel computes. Here the mapped
// scf.parallel form, the one convert-parallel-loops-to-gpu turns into
// launches, is lowered to the host and run with MLIR's execution engine,
// and each region's outputs are compared with a naive loop in double over
// random inputs, at several block sizes (so tiles end inside and outside
// the data). A wrong index, bound or guard fails here, without a GPU.
//
//===----------------------------------------------------------------------===//

#include "compiler/codegen/GpuCodegen.h"

#include "mlir/Conversion/AffineToStandard/AffineToStandard.h"
#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MathToLibm/MathToLibm.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "llvm/Support/TargetSelect.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <random>

using namespace mlir;

namespace {

std::string inputPath(const std::string &name) {
  return std::string(DTCC_CODEGEN_INPUTS) + "/" + name;
}

/// A region's buffers (its arguments, scratch included), as f32 arrays.
using Buffers = std::vector<std::vector<float>>;
using Reference = std::function<void(const Buffers &in, Buffers &expected)>;

class MappedModule {
public:
  MappedModule(const std::string &file, int64_t threadsPerBlock) {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    DialectRegistry registry;
    dtcc::codegen::registerGpuCodegenDialects(registry);
    registerBuiltinDialectTranslation(registry);
    registerLLVMDialectTranslation(registry);
    context = std::make_unique<MLIRContext>(registry);
    context->loadAllAvailableDialects();
    module = parseSourceFile<ModuleOp>(inputPath(file), context.get());
    if (!module)
      return;
    dtcc::codegen::GpuCodegenOptions options;
    options.threadsPerBlock = threadsPerBlock;
    auto mapped = dtcc::codegen::mapRegionsToGpuLoops(*module, options);
    if (failed(mapped))
      return;
    regions = *mapped;
    for (auto func : module->getOps<func::FuncOp>())
      for (Type type : func.getArgumentTypes())
        shapes[func.getSymName().str()].push_back(
            cast<MemRefType>(type).getNumElements());

    // The mapped loops run sequentially on the host.
    PassManager pm(context.get());
    pm.addPass(createLowerAffinePass());
    pm.addPass(createSCFToControlFlowPass());
    pm.addPass(createConvertMathToLibmPass());
    pm.addPass(createConvertMathToLLVMPass());
    pm.addPass(createArithToLLVMConversionPass());
    pm.addPass(createConvertControlFlowToLLVMPass());
    pm.addPass(createFinalizeMemRefToLLVMConversionPass());
    ConvertFuncToLLVMPassOptions funcOptions;
    funcOptions.useBarePtrCallConv = true;
    pm.addPass(createConvertFuncToLLVMPass(funcOptions));
    pm.addPass(createReconcileUnrealizedCastsPass());
    if (failed(pm.run(*module)))
      return;
    ExecutionEngineOptions engineOptions;
    transformer = makeOptimizingTransformer(2, 0, nullptr);
    engineOptions.transformer = transformer;
    auto created = ExecutionEngine::create(*module, engineOptions);
    if (!created) {
      llvm::consumeError(created.takeError());
      return;
    }
    engine = std::move(*created);
  }

  bool ok() const { return engine != nullptr; }

  const dtcc::codegen::MappedRegion &region(const std::string &symbol) const {
    for (const auto &r : regions)
      if (r.symbol == symbol)
        return r;
    ADD_FAILURE() << "no region " << symbol;
    return regions.front();
  }

  /// Random buffers of the region's shapes (scratch filled with garbage).
  Buffers randomBuffers(const std::string &symbol, unsigned seed) const {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
    Buffers buffers;
    for (int64_t n : shapes.at(symbol)) {
      buffers.emplace_back(n);
      for (float &v : buffers.back())
        v = dist(rng);
    }
    return buffers;
  }

  void run(const std::string &symbol, Buffers &buffers) {
    std::vector<float *> pointers;
    for (auto &b : buffers)
      pointers.push_back(b.data());
    SmallVector<void *> args;
    for (float *&p : pointers)
      args.push_back(&p);
    llvm::Error err = engine->invokePacked(symbol, args);
    ASSERT_FALSE(bool(err)) << llvm::toString(std::move(err));
  }

private:
  std::unique_ptr<MLIRContext> context;
  OwningOpRef<ModuleOp> module;
  std::vector<dtcc::codegen::MappedRegion> regions;
  std::map<std::string, std::vector<int64_t>> shapes;
  std::function<llvm::Error(llvm::Module *)> transformer;
  std::unique_ptr<ExecutionEngine> engine;
};

/// Runs `symbol` and compares its first `numBuffers` buffers with the
/// reference (inputs the region does not write must come back unchanged).
void expectMatches(MappedModule &m, const std::string &symbol,
                   const Reference &reference, double tolerance,
                   unsigned seed) {
  Buffers buffers = m.randomBuffers(symbol, seed);
  Buffers expected = buffers;
  reference(buffers, expected);
  m.run(symbol, buffers);
  unsigned numBuffers = m.region(symbol).numBuffers;
  for (unsigned b = 0; b < numBuffers; ++b)
    for (size_t i = 0; i < buffers[b].size(); ++i) {
      double want = expected[b][i], got = buffers[b][i];
      ASSERT_NEAR(got, want, tolerance * (1.0 + std::fabs(want)))
          << symbol << " buffer " << b << " element " << i;
    }
}

const int64_t kBlockSizes[] = {1, 7, 64, 256, 1024};

TEST(GpuMapping, ElementwiseChainWithBroadcast) {
  for (int64_t tpb : kBlockSizes) {
    SCOPED_TRACE("threads per block " + std::to_string(tpb));
    MappedModule m("elementwise_broadcast.mlir", tpb);
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(m.region("ew_chain").numBuffers, 3u);
    EXPECT_EQ(m.region("ew_chain").scratchBytes,
              std::vector<uint64_t>{8 * 33 * 4});
    expectMatches(
        m, "ew_chain",
        [](const Buffers &in, Buffers &out) {
          for (int i = 0; i < 8; ++i)
            for (int j = 0; j < 33; ++j) {
              double x = in[0][i * 33 + j], b = in[1][j];
              out[2][i * 33 + j] = std::max(x * b, 0.0) + x;
            }
        },
        1e-6, 1);
  }
}

TEST(GpuMapping, ConstantIndexBroadcast) {
  for (int64_t tpb : kBlockSizes) {
    SCOPED_TRACE("threads per block " + std::to_string(tpb));
    MappedModule m("elementwise_broadcast.mlir", tpb);
    ASSERT_TRUE(m.ok());
    expectMatches(
        m, "tanh_bias",
        [](const Buffers &in, Buffers &out) {
          for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 8; ++j)
              out[2][i * 8 + j] = std::tanh(double(in[0][i * 8 + j]) + in[1][j]);
        },
        1e-6, 7);
  }
}

TEST(GpuMapping, BiasGelu3d) {
  for (int64_t tpb : kBlockSizes) {
    SCOPED_TRACE("threads per block " + std::to_string(tpb));
    MappedModule m("bias_gelu.mlir", tpb);
    ASSERT_TRUE(m.ok());
    expectMatches(
        m, "bias_gelu",
        [](const Buffers &in, Buffers &out) {
          for (int i = 0; i < 2; ++i)
            for (int j = 0; j < 5; ++j)
              for (int k = 0; k < 37; ++k) {
                int e = (i * 5 + j) * 37 + k;
                double z = double(in[0][e]) + in[1][k];
                out[2][e] = 0.5 * z * (1.0 + std::erf(z / std::sqrt(2.0)));
              }
        },
        1e-5, 2);
  }
}

TEST(GpuMapping, SoftmaxRows) {
  for (int64_t tpb : kBlockSizes) {
    SCOPED_TRACE("threads per block " + std::to_string(tpb));
    MappedModule m("softmax_row.mlir", tpb);
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(m.region("softmax_row").scratchBytes,
              (std::vector<uint64_t>{24, 24}));
    expectMatches(
        m, "softmax_row",
        [](const Buffers &in, Buffers &out) {
          for (int r = 0; r < 6; ++r) {
            double mx = -INFINITY, sum = 0;
            for (int c = 0; c < 300; ++c)
              mx = std::max(mx, double(in[0][r * 300 + c]));
            for (int c = 0; c < 300; ++c)
              sum += std::exp(in[0][r * 300 + c] - mx);
            for (int c = 0; c < 300; ++c)
              out[1][r * 300 + c] = std::exp(in[0][r * 300 + c] - mx) / sum;
          }
        },
        1e-5, 3);
  }
}

TEST(GpuMapping, SumOfSquaresOnOneThread) {
  for (int64_t tpb : {1, 256}) {
    MappedModule m("softmax_row.mlir", tpb);
    ASSERT_TRUE(m.ok());
    expectMatches(
        m, "sum_squares",
        [](const Buffers &in, Buffers &out) {
          double s = 0;
          for (float g : in[0])
            s += double(g) * g;
          out[1][0] = s;
        },
        1e-5, 4);
  }
}

TEST(GpuMapping, ColumnSumOneThreadPerColumn) {
  for (int64_t tpb : kBlockSizes) {
    SCOPED_TRACE("threads per block " + std::to_string(tpb));
    MappedModule m("softmax_row.mlir", tpb);
    ASSERT_TRUE(m.ok());
    expectMatches(
        m, "column_sum",
        [](const Buffers &in, Buffers &out) {
          for (int c = 0; c < 300; ++c) {
            double s = 0;
            for (int r = 0; r < 5; ++r)
              s += in[0][r * 300 + c];
            out[1][c] = s;
          }
        },
        1e-5, 6);
  }
}

TEST(GpuMapping, AdamWUpdateInPlace) {
  for (int64_t tpb : kBlockSizes) {
    SCOPED_TRACE("threads per block " + std::to_string(tpb));
    MappedModule m("adamw_update.mlir", tpb);
    ASSERT_TRUE(m.ok());
    auto reference = [](const Buffers &in, Buffers &out) {
      double lr = in[4][0];
      for (int i = 0; i < 1000; ++i) {
        double p = in[0][i], g = in[1][i], mo = in[2][i], v = std::fabs(in[3][i]);
        double mn = 0.9 * mo + 0.1 * g, vn = 0.999 * v + 0.001 * g * g;
        out[0][i] = p - lr * (mn / (std::sqrt(vn) + 1e-8) + 0.01 * p);
        out[2][i] = mn;
        out[3][i] = vn;
      }
    };
    Buffers buffers = m.randomBuffers("adamw_update", 5);
    for (float &v : buffers[3])
      v = std::fabs(v); // second moments are not negative
    Buffers expected = buffers;
    reference(buffers, expected);
    m.run("adamw_update", buffers);
    for (int b : {0, 1, 2, 3})
      for (int i = 0; i < 1000; ++i)
        ASSERT_NEAR(buffers[b][i], expected[b][i],
                    1e-5 * (1 + std::fabs(expected[b][i])))
            << "buffer " << b << " element " << i;
  }
}

} // namespace
