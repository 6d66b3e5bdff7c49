//===- LayerNamesTest.cpp - layers and modules from ONNX node names -------===//
//
// Every spelling the importer reads a layer or module from (and the ones it
// must not), against hand-written expectations.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/LayerNames.h"

#include <gtest/gtest.h>

using dtcc::onnx_frontend::placeOfName;

namespace {

struct Case {
  const char *name;
  const char *module;
  const char *layer;
};

TEST(LayerNames, ReadsLayersAndModules) {
  const Case cases[] = {
      // PyTorch nodes: the module is the first of two or more components.
      {"/transformer/h.3/attn/MatMul", "transformer", "transformer/h/3"},
      {"/blocks.0/ln1/LayerNormalization", "blocks.0", "blocks/0"},
      {"/model/layers.11/self_attn/q_proj/MatMul", "model", "model/layers/11"},
      {"/enc1/enc1.0/Conv", "enc1", ""},
      {"/MaxPool", "", ""},
      // PyTorch parameters: one layer with the nodes above.
      {"transformer.h.3.attn.c_attn.weight", "", "transformer/h/3"},
      {"model.layers.11.mlp.up_proj.weight", "", "model/layers/11"},
      // A layer in an nn.Sequential (ConvNeXt's stages.0.layers): PyTorch
      // scopes the child under the container's name too.
      {"/m/convnext/encoder/stages.0/layers/layers.0/dwconv/Conv", "m",
       "m/convnext/encoder/stages/0/layers/0"},
      {"m.convnext.encoder.stages.0.layers.0.dwconv.weight", "",
       "m/convnext/encoder/stages/0/layers/0"},
      {"/features/features.3/Conv", "features", ""},
      // dtcc's zoo.
      {"layers.0/attn/MatMul_qkv", "layers.0", "layers/0"},
      {"layers.0.attn.qkv.weight", "", "layers/0"},
      // Separators '.', '_' or none between the word and its number.
      {"layer_2/fc/Gemm", "layer_2", "layer/2"},
      {"blocks3/Conv", "blocks3", "blocks3"},
      {"/encoder/layer.1/Add", "encoder", "encoder/layer/1"},
      // An encoder's and a decoder's layer 0 are two layers.
      {"/encoder/layers.0/Add", "encoder", "encoder/layers/0"},
      {"/decoder/layers.0/Add", "decoder", "decoder/layers/0"},
      // Not layers: no number, a number glued to more, a longer word, a
      // layer word inside another component.
      {"layers.Tanh", "", ""},
      {"/net/layers.3x/Add", "net", ""},
      {"/net/hidden.3/Add", "net", ""},
      {"graph.3.Tanh", "", ""},
      {"/mlp/fch.3/Relu", "mlp", ""},
      {"MatMul_3", "", ""},
      {"", "", ""},
  };
  for (const Case &c : cases) {
    auto place = placeOfName(c.name);
    EXPECT_EQ(place.module, c.module) << c.name;
    EXPECT_EQ(place.layer, c.layer) << c.name;
  }
}

} // namespace
