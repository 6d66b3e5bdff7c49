//===- GraphInterfaces.td - dgraph op interfaces -----------*- tablegen -*-===//

#ifndef DTCC_DIALECTS_GRAPH_IR_GRAPHINTERFACES_TD
#define DTCC_DIALECTS_GRAPH_IR_GRAPHINTERFACES_TD

include "mlir/IR/OpBase.td"

def Graph_DifferentiableOpInterface : OpInterface<"DifferentiableOpInterface"> {
  let cppNamespace = "::dtcc::graph";
  let description = [{
    An op with a vector-Jacobian product rule: given the gradients of its
    results, it builds the gradients of its operands. Reverse-mode autodiff
    (dtcc-graph-autodiff) calls it op by op, in reverse order. An op on the
    path from a parameter to the loss that lacks this interface is an error
    naming the op and its ONNX node.
  }];
  let methods = [
    InterfaceMethod<[{
      Builds the gradients of the operands at the builder's insertion point.
      `resultGrads` has one entry per result: its gradient, or null when no
      gradient flows into that result. On success `operandGrads` has one
      entry per operand: its gradient (of the operand's type), or null when
      none flows (an index, a constant, a non-differentiable operand).
    }], "::llvm::LogicalResult", "buildVJP",
    (ins "::mlir::OpBuilder &":$builder,
         "::mlir::ArrayRef<::mlir::Value>":$resultGrads,
         "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>,
  ];
}

def Graph_ShardableOpInterface : OpInterface<"ShardableOpInterface"> {
  let cppNamespace = "::dtcc::graph";
  let description = [{
    An op whose dimensions may be split over a device mesh. Its sharding
    rule (ShardingRule.h) names the op's factors and how each operand and
    result dimension decomposes into them; propagation and partitioning
    (passes/Sharding) read nothing else about the op. An op without a rule
    is an error in a sharded program, not a silent replication.
  }];
  let methods = [
    InterfaceMethod<"The op's factors and their mapping to dimensions.",
                    "::dtcc::graph::ShardingRule", "getShardingRule", (ins)>,
  ];
}

def Graph_CostOpInterface : OpInterface<"CostOpInterface"> {
  let cppNamespace = "::dtcc::graph";
  let description = [{
    An op whose time is its arithmetic (matrix products, convolutions): its
    floating-point operations, counted by runtime/base/OpFlops.h as the
    planner's program model counts the kernel's. The layout ILP
    (dtcc-plan-search-layouts) asks with each rank's shapes under a
    sharding, pipeline stage balancing with the op's own; ops without the
    interface are priced by the bytes they move.
  }];
  let methods = [
    InterfaceMethod<[{
      The op's FLOPs for operands and results of these shapes (the op's own
      or one rank's block of them; same ranks as the op's types).
    }], "double", "getFlops",
    (ins "::llvm::ArrayRef<::llvm::SmallVector<int64_t>>":$operandShapes,
         "::llvm::ArrayRef<::llvm::SmallVector<int64_t>>":$resultShapes)>,
  ];
}

#endif // DTCC_DIALECTS_GRAPH_IR_GRAPHINTERFACES_TD
