//===- GraphDialect.td - dgraph dialect definition ---------*- tablegen -*-===//
//
// dgraph: coarse tensor ops on static-shaped builtin tensors, the IR that the
// ONNX frontend produces and that autodiff, planning and sharding work on.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_DIALECTS_GRAPH_IR_GRAPHDIALECT_TD
#define DTCC_DIALECTS_GRAPH_IR_GRAPHDIALECT_TD

include "mlir/IR/OpBase.td"

def Graph_Dialect : Dialect {
  let name = "dgraph";
  let cppNamespace = "::dtcc::graph";
  let summary = "Coarse tensor ops for training graphs";
  let description = [{
    dgraph holds a model's computation as a small, hand-written set of tensor
    ops on statically shaped builtin tensors: matrix products, elementwise
    arithmetic, normalizations, softmax, reductions, data movement, losses and
    (for training) optimizer updates. Broadcasting is explicit
    (`dgraph.broadcast_in_dim`), so every elementwise op sees operands of one
    shape. Model state (weights, optimizer moments) lives in module-level
    `dgraph.variable` symbols that functions read with `dgraph.load` and
    update with `dgraph.store`.

    Every op created by the ONNX frontend carries the ONNX node name as its
    location, so any later diagnostic points at the user's node.
  }];
  let hasConstantMaterializer = 1;
  let usePropertiesForAttributes = 1;
  // The dgraph.* attributes on modules, other ops, and function arguments
  // and results (GraphOps.h declares them) are checked like an op's own.
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let useDefaultAttributePrinterParser = 1;
}

class Graph_Op<string mnemonic, list<Trait> traits = []>
    : Op<Graph_Dialect, mnemonic, traits>;

#endif // DTCC_DIALECTS_GRAPH_IR_GRAPHDIALECT_TD
