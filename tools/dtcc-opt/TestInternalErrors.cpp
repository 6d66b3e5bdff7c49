//===- TestInternalErrors.cpp - a pass that fails the way a bug would ----===//
//
// dtcc-test-internal-error, registered by dtcc-opt only: lit tests of the
// internal-error reporting (compiler/InternalErrors.h) need a pass that
// leaves invalid IR, hits MLIR's fatal error, or crashes, on purpose.
//
//===----------------------------------------------------------------------===//

#include "dialects/Graph/IR/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassRegistry.h"

#include <csignal>

using namespace mlir;

namespace {

struct TestInternalErrorPass
    : public PassWrapper<TestInternalErrorPass, OperationPass<ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(TestInternalErrorPass)

  TestInternalErrorPass() = default;
  TestInternalErrorPass(const TestInternalErrorPass &other)
      : PassWrapper(other) {}

  StringRef getArgument() const final { return "dtcc-test-internal-error"; }
  StringRef getDescription() const final {
    return "Test only: at the first dgraph.matmul, leave invalid IR "
           "(mode=invalid-ir), build a matmul whose type cannot be inferred "
           "(mode=fatal) or crash (mode=crash)";
  }

  Option<std::string> mode{*this, "mode",
                           llvm::cl::desc("invalid-ir, fatal or crash"),
                           llvm::cl::init("invalid-ir")};

  void runOnOperation() final {
    dtcc::graph::MatmulOp matmul;
    getOperation().walk([&](dtcc::graph::MatmulOp op) {
      if (!matmul)
        matmul = op;
    });
    if (!matmul)
      return;
    OpBuilder b(matmul);
    if (mode == "invalid-ir") {
      // A result type the op's inference disagrees with.
      auto type = cast<RankedTensorType>(matmul.getType());
      SmallVector<int64_t> shape(type.getShape());
      shape.back() += 1;
      matmul.getResult().setType(RankedTensorType::get(shape, type.getElementType()));
    } else if (mode == "fatal") {
      // The lhs twice: its contracted dimensions disagree unless square.
      dtcc::graph::MatmulOp::create(b, matmul.getLoc(), matmul.getLhs(),
                                    matmul.getLhs(), false, false);
    } else if (mode == "crash") {
      std::raise(SIGSEGV);
    }
  }
};

} // namespace

namespace dtcc {
void registerTestInternalErrorPass() {
  PassRegistration<TestInternalErrorPass>();
}
} // namespace dtcc
