//===- GraphFusionOps.td - fused regions --------------------*- tablegen -*-===//
//
// The op dtcc-lower-fuse-regions leaves where it took a chain of elementwise
// ops out of a function: a call of the region's generated kernel.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_DIALECTS_GRAPH_IR_GRAPHFUSIONOPS_TD
#define DTCC_DIALECTS_GRAPH_IR_GRAPHFUSIONOPS_TD

def Graph_FusedOp : Graph_Op<"fused",
    [Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Runs a fused region's generated kernel";
  let description = [{
    Computes `results` from `operands` with the region function `kernel`, a
    `func.func` of the module's nested `dtcc_kernels` module (the region
    form of docs/architecture.md, "Fused regions"): one `linalg.generic` on
    memrefs whose arguments are the operands' buffers, then the results'.
    Made by `dtcc-lower-fuse-regions` right before the lowering to dexec,
    which emits it as the kernel `fused`; no pass before it sees one.

    Example:
    ```mlir
    %y = dgraph.fused @dtcc_kernels::@fused_0(%x, %b)
        : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
    ```

    **Constraints:**
    - `kernel` names a function with one argument per operand then one per
      result, each a memref of that tensor's shape and element type;
    - there is at least one operand and one result.
  }];
  let arguments = (ins SymbolRefAttr:$kernel,
                       Variadic<Graph_Tensor>:$operands);
  let results = (outs Variadic<Graph_Tensor>:$results);
  let assemblyFormat = [{
    $kernel `(` $operands `)` attr-dict `:` functional-type($operands, $results)
  }];
}

#endif // DTCC_DIALECTS_GRAPH_IR_GRAPHFUSIONOPS_TD
