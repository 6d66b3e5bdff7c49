//===- LayerNames.h - layers and modules from ONNX node names ---*- C++ -*-===//
//
// The one place dtcc reads the layer structure out of exporters' node names
// ("/transformer/h.3/attn/MatMul", "layers.0.attn.qkv.weight"); everything
// after the importer reads the #dgraph.layer attributes set from them.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_FRONTENDS_ONNX_LAYERNAMES_H
#define DTCC_FRONTENDS_ONNX_LAYERNAMES_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringRef.h"

#include <string>

namespace dtcc::onnx_frontend {

/// What a node or initializer name says about where it sits in the model.
struct NamePlace {
  /// The top-level module: the first of at least two '/'-separated
  /// components ("enc1" in "/enc1/enc1.0/Conv"); empty for a node of the
  /// root module ("/MaxPool") or a name without '/'.
  std::string module;
  /// The numbered layer: the name up to its first component "layers", "blocks",
  /// "layer" or "h" followed by a number ("layers.3", "h_3", "blocks3"),
  /// its components joined by '/' so that a node
  /// ("/transformer/h.3/attn/MatMul") and an initializer
  /// ("transformer.h.3.attn.weight") of one layer agree
  /// ("transformer/h/3"); empty when the name numbers none. The scope
  /// PyTorch writes for an nn.Sequential's child is read as its parameters
  /// name it: "/stages.0/layers/layers.0/Conv" is layer "stages/0/layers/0",
  /// with "stages.0.layers.0.weight".
  std::string layer;
};

/// Reads `name` (no regular expression: a scan of its components).
NamePlace placeOfName(llvm::StringRef name);

/// Sets #dgraph.layer on every op of `module`'s functions that reads a
/// variable (a load, or an op computed from one) and whose location names
/// an ONNX node or initializer that says where it sits: the module of its
/// name and, for a numbered layer, that layer's index in the order the
/// nodes meet them. Ops computed from constants and inputs only (a causal
/// mask, reshaped labels) belong to no layer: CSE merges the copies that
/// layers make of them, as it did before they were marked.
void markLayersFromNames(mlir::ModuleOp module);

} // namespace dtcc::onnx_frontend

#endif // DTCC_FRONTENDS_ONNX_LAYERNAMES_H
