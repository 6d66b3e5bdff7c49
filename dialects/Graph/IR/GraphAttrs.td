//===- GraphAttrs.td - dgraph attributes -------------------*- tablegen -*-===//
//
// Attributes of the dgraph dialect: where an op sits in the model's layer
// structure (#dgraph.layer), which pipeline cutting, recomputation and
// prefetching read instead of node names.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_DIALECTS_GRAPH_IR_GRAPHATTRS_TD
#define DTCC_DIALECTS_GRAPH_IR_GRAPHATTRS_TD

include "dialects/Graph/IR/GraphDialect.td"
include "mlir/IR/AttrTypeBase.td"

class Graph_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Graph_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def Graph_LayerAttr : Graph_Attr<"Layer", "layer"> {
  let summary = "The part of the model an op belongs to";
  let description = [{
    Attached to an op as `dgraph.layer` (`dtcc::graph::kLayerAttr`). It says
    two things, either or both:

    - `module`: the model's top-level module the op belongs to (`"enc1"` for
      the PyTorch node `/enc1/enc1.0/Conv`, `"transformer"` for
      `/transformer/h.3/attn/MatMul`). dtcc-shard-pipeline cuts a model that
      numbers no layers (a CNN, a U-Net) between its top-level modules.
    - `index`: the repeated block (transformer layer) the op belongs to,
      numbered from 0 in the order the forward pass meets them, over the
      whole model (an encoder's layers, then a decoder's). Pipeline stages,
      recomputation segments (`recompute=full`) and ZeRO prefetching go
      layer by layer.

    The ONNX importer sets it from the node names (the one place that reads
    them); dtcc-graph-mark-layers finds it in the graph's structure for IR
    without it. Autodiff gives each backward op the layer of the forward op
    it differentiates; passes that clone or rewrite an op keep it.

    Example: `{dgraph.layer = #dgraph.layer<module = "transformer", index = 3>}`,
    `{dgraph.layer = #dgraph.layer<module = "enc1">}`,
    `{dgraph.layer = #dgraph.layer<index = 0>}`.

    **Constraints:** at least one of `module` and `index`; `module`, when
    given, is not empty; `index` >= 0.
  }];
  let parameters = (ins
      StringRefParameter<"the top-level module", [{""}]>:$module,
      OptionalParameter<"std::optional<int64_t>", "the layer">:$index);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

#endif // DTCC_DIALECTS_GRAPH_IR_GRAPHATTRS_TD
