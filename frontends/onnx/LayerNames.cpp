//===- LayerNames.cpp - layers and modules from ONNX node names -----------===//

#include "frontends/onnx/LayerNames.h"

#include "dialects/Graph/IR/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"

using namespace mlir;

namespace dtcc::onnx_frontend {

namespace {

bool isSeparator(char c) { return c == '/' || c == '.' || c == '_'; }

/// The length of the layer word ("layers", "blocks", "layer", "h") at the
/// start of `s` followed by an optional '.' or '_' and a number, up to the
/// number's end; 0 when there is none.
size_t layerWordAt(StringRef s) {
  for (StringRef word : {"layers", "blocks", "layer", "h"}) {
    if (!s.starts_with(word))
      continue;
    size_t n = word.size();
    if (n < s.size() && (s[n] == '.' || s[n] == '_'))
      ++n;
    size_t digits = n;
    while (digits < s.size() && llvm::isDigit(s[digits]))
      ++digits;
    if (digits == n)
      continue; // "layer" may still match where "layers" did not
    if (digits < s.size() && !isSeparator(s[digits]))
      continue;
    return digits;
  }
  return 0;
}

} // namespace

/// `name` without the scopes PyTorch's exporter writes for an
/// nn.Sequential or nn.ModuleList child: "/stages.0/layers/layers.0/Conv" is
/// "/stages.0/layers.0/Conv", as the child's parameters
/// ("stages.0.layers.0.weight") name it. A '/'-component followed by one
/// that starts with it and a '.' is dropped.
static std::string withoutContainerScopes(StringRef name) {
  SmallVector<StringRef> parts;
  name.split(parts, '/');
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    StringRef part = parts[i];
    if (!part.empty() && i + 1 < parts.size() &&
        parts[i + 1].starts_with(part) &&
        parts[i + 1].drop_front(part.size()).starts_with("."))
      continue;
    if (i > 0)
      out += '/';
    out += part.str();
  }
  return out;
}

NamePlace placeOfName(StringRef original) {
  NamePlace place;
  StringRef path = original;
  path.consume_front("/");
  if (auto [first, rest] = path.split('/'); !rest.empty())
    place.module = first.str();
  // The first layer word at the start of the name or after '/' or '.'.
  const std::string normalized = withoutContainerScopes(original);
  StringRef name = normalized;
  for (size_t i = 0; i < name.size(); ++i) {
    if (i > 0 && name[i - 1] != '/' && name[i - 1] != '.')
      continue;
    size_t n = layerWordAt(name.substr(i));
    if (!n)
      continue;
    // Its components, joined by '/'.
    for (char c : name.take_front(i + n)) {
      if (!isSeparator(c))
        place.layer += c;
      else if (!place.layer.empty() && place.layer.back() != '/')
        place.layer += '/';
    }
    break;
  }
  return place;
}

void markLayersFromNames(ModuleOp module) {
  MLIRContext *ctx = module.getContext();
  SmallVector<std::pair<Operation *, NamePlace>> named;
  for (auto fn : module.getOps<func::FuncOp>()) {
    llvm::DenseSet<Operation *> readsVariable;
    fn.walk([&](Operation *op) {
      if (!isa<graph::GraphDialect>(op->getDialect()))
        return;
      if (!isa<graph::LoadOp>(op) &&
          llvm::none_of(op->getOperands(), [&](Value v) {
            return readsVariable.contains(v.getDefiningOp());
          }))
        return;
      readsVariable.insert(op);
      if (std::string node = graph::nodeName(op->getLoc()); !node.empty())
        named.push_back({op, placeOfName(node)});
    });
  }
  // Layers are numbered in the order the nodes meet them; the loads of
  // their initializers (imported first) take their numbers.
  llvm::StringMap<int64_t> layers;
  for (bool loads : {false, true})
    for (auto &[op, place] : named) {
      if (isa<graph::LoadOp>(op) != loads || place.layer.empty())
        continue;
      layers.try_emplace(place.layer, layers.size());
    }
  for (auto &[op, place] : named) {
    std::optional<int64_t> index;
    if (!place.layer.empty())
      index = layers.lookup(place.layer);
    if (place.module.empty() && !index)
      continue;
    op->setAttr(graph::kLayerAttr,
                graph::LayerAttr::get(ctx, place.module, index));
  }
}

} // namespace dtcc::onnx_frontend
