//===- GraphFusionOps.cpp - the fused region call -------------------------===//

#include "dialects/Graph/IR/GraphOps.h"

#include "mlir/Interfaces/FunctionInterfaces.h"

using namespace mlir;
using namespace dtcc::graph;

LogicalResult FusedOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  if (getOperands().empty() || getResults().empty())
    return emitOpError("expected at least one operand and one result");
  Operation *target = symbolTable.lookupNearestSymbolFrom(*this, getKernelAttr());
  auto fn = dyn_cast_or_null<FunctionOpInterface>(target);
  if (!fn)
    return emitOpError("kernel ") << getKernelAttr() << " is not a function";
  ArrayRef<Type> args = fn.getArgumentTypes();
  SmallVector<Type> expected(getOperandTypes());
  llvm::append_range(expected, getResultTypes());
  if (args.size() != expected.size())
    return emitOpError("kernel ")
           << getKernelAttr() << " takes " << args.size()
           << " buffers, expected " << expected.size()
           << " (the operands, then the results)";
  for (auto [i, pair] : llvm::enumerate(llvm::zip(args, expected))) {
    auto [arg, tensor] = pair;
    auto memref = dyn_cast<MemRefType>(arg);
    auto t = cast<RankedTensorType>(tensor);
    if (!memref || memref.getShape() != t.getShape() ||
        memref.getElementType() != t.getElementType() ||
        !memref.getLayout().isIdentity())
      return emitOpError("kernel ")
             << getKernelAttr() << " argument " << i << " is " << arg
             << ", expected a contiguous memref of " << tensor;
  }
  return success();
}
