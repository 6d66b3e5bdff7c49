//===- TextOps.cpp - ONNX's text featurization ops to dgraph --------------===//
//
// TfIdfVectorizer over integer tokens: the counts of a pool of n-grams in
// each row, with skips, as comparisons of shifted views of the tokens with
// the pool (every shape known at compile time), then TF, IDF or TF-IDF.
// Strings are refused: dtcc has no string tensors.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/NodeImporter.h"

#include <map>

using namespace mlir;
using namespace dtcc::graph;

namespace dtcc::onnx_frontend {
namespace {

/// The counts [B, k] of the k n-grams `grams` (each `size` tokens) in the
/// rows of `x` [B, C] (int64), at every skip distance from 1 to `distances`
/// (one for unigrams: skips do not change them), as ONNX Runtime counts
/// them: each start position and distance whose tokens equal the n-gram's.
Value countGrams(NodeImporter &n, Value x, ArrayRef<int64_t> grams,
                 int64_t size, int64_t distances) {
  auto xType = cast<RankedTensorType>(x.getType());
  int64_t rows = xType.getDimSize(0), length = xType.getDimSize(1);
  int64_t k = int64_t(grams.size()) / size;
  Type f32 = n.builder().getF32Type(), i64 = n.builder().getI64Type();
  auto countType = RankedTensorType::get({rows, k}, f32);
  Value total;
  for (int64_t d = 1; d <= (size == 1 ? 1 : distances); ++d) {
    int64_t starts = length - d * (size - 1);
    if (starts <= 0)
      break;
    SmallVector<int64_t> shape{rows, k, starts};
    Value match;
    for (int64_t j = 0; j < size; ++j) {
      Value tokens = n.fold<SliceOp>(x, ArrayRef<int64_t>{0, j * d},
                                     ArrayRef<int64_t>{rows, j * d + starts},
                                     ArrayRef<int64_t>{1, 1});
      tokens = n.broadcastTo(n.reshape(tokens, {rows, 1, starts}), shape);
      SmallVector<int64_t> column;
      for (int64_t g = 0; g < k; ++g)
        column.push_back(grams[g * size + j]);
      Value pool = n.constant(DenseElementsAttr::get(
          RankedTensorType::get({1, k, 1}, i64), ArrayRef<int64_t>(column)));
      Value equal = n.fold<EqOp>(tokens, n.broadcastTo(pool, shape));
      match = match ? n.fold<AndOp>(match, equal) : equal;
    }
    Value counts =
        n.fold<ReduceSumOp>(n.castTo(match, f32), ArrayRef<int64_t>{2});
    total = total ? n.fold<AddOp>(total, counts) : counts;
  }
  return total ? total : n.splat(countType, 0.0);
}

/// TfIdfVectorizer (opset 9) over int32 or int64 tokens [C] or [B, C]: the
/// pool's n-grams (pool_int64s, level by level from ngram_counts) counted
/// for sizes min_gram_length to max_gram_length with up to max_skip_count
/// skipped tokens between their items; n-gram i's value goes to position
/// ngram_indexes[i] of an output [max index + 1] per row: mode TF (its
/// count), IDF (weights[i] where its count is not 0) or TFIDF (count times
/// weights[i]); weights are per n-gram, as ONNX's specification and ONNX
/// Runtime have them (onnx.reference reads them per output position, which
/// differs where ngram_indexes is not the identity), all 1 when absent.
/// Positions that several n-grams share add their values, except in IDF
/// mode with weights, where ONNX Runtime keeps the weight of the n-gram it
/// met last in the row: refused. A repeated n-gram is refused, as ONNX
/// Runtime refuses it.
LogicalResult importTfIdfVectorizer(NodeImporter &n) {
  if (n.hasAttr("pool_strings"))
    return n.error() << "expected pool_int64s: string pools are not "
                        "supported (dtcc has no string tensors)";
  auto xType = n.inputType(0);
  if (!xType.getElementType().isInteger(32) &&
      !xType.getElementType().isInteger(64))
    return n.error() << "expected int32 or int64 tokens, got " << xType;
  if (xType.getRank() != 1 && xType.getRank() != 2)
    return n.error() << "expected tokens [C] or [N, C], got " << xType;
  if (failed(n.requireAttrs({"pool_int64s", "ngram_counts", "ngram_indexes",
                             "min_gram_length", "max_gram_length",
                             "max_skip_count", "mode"})))
    return failure();
  auto pool = n.attrInts("pool_int64s"), levels = n.attrInts("ngram_counts"),
       indexes = n.attrInts("ngram_indexes");
  int64_t minSize = n.attrInt("min_gram_length", 1);
  int64_t maxSize = n.attrInt("max_gram_length", 1);
  int64_t maxSkip = n.attrInt("max_skip_count", 0);
  std::string mode = n.attrString("mode", "");
  if (minSize < 1 || maxSize < minSize)
    return n.error() << "expected 1 <= min_gram_length <= max_gram_length, "
                        "got "
                     << minSize << " and " << maxSize;
  if (maxSkip < 0)
    return n.error() << "expected max_skip_count >= 0, got " << maxSkip;
  if (mode != "TF" && mode != "IDF" && mode != "TFIDF")
    return n.error() << "expected mode TF, IDF or TFIDF, got '" << mode << "'";

  // The pool's levels: level L holds n-grams of L + 1 tokens.
  int64_t poolSize = int64_t(pool->size());
  SmallVector<std::pair<int64_t, int64_t>> ranges; // [begin, end) per level
  for (size_t l = 0; l < levels->size(); ++l) {
    int64_t begin = (*levels)[l];
    int64_t end = l + 1 < levels->size() ? (*levels)[l + 1] : poolSize;
    int64_t size = int64_t(l) + 1;
    if (begin < 0 || end < begin || end > poolSize)
      return n.error() << "expected ngram_counts to rise within the pool of "
                       << poolSize << ", got " << formatList(*levels);
    if ((end - begin) % size)
      return n.error() << "expected the pool's " << size << "-grams (items "
                       << begin << " to " << end << ") to be whole " << size
                       << "-grams";
    ranges.push_back({begin, end});
  }
  int64_t grams = 0;
  for (auto [l, range] : llvm::enumerate(ranges))
    grams += (range.second - range.first) / int64_t(l + 1);
  if (int64_t(indexes->size()) != grams)
    return n.error() << "expected one ngram_indexes entry per n-gram of the "
                        "pool ("
                     << grams << "), got " << indexes->size();
  int64_t outSize = 0;
  for (int64_t i : *indexes) {
    if (i < 0)
      return n.error() << "expected ngram_indexes >= 0, got " << i;
    outSize = std::max(outSize, i + 1);
  }
  SmallVector<float> weights;
  if (const onnx::AttributeProto *w = n.attr("weights")) {
    weights.assign(w->floats().begin(), w->floats().end());
    if (int64_t(weights.size()) != grams)
      return n.error() << "expected one weight per n-gram of the pool ("
                       << grams << "), got " << weights.size();
  }
  // Where each n-gram's value goes; a repeated n-gram (of a size that
  // counts) is refused.
  SmallVector<SmallVector<int64_t>> sources(outSize);
  std::map<std::vector<int64_t>, int64_t> seen;
  for (int64_t l = 0, g = 0; l < int64_t(ranges.size()); ++l) {
    int64_t size = l + 1;
    for (int64_t at = ranges[l].first; at < ranges[l].second; at += size, ++g) {
      if (size < minSize || size > maxSize)
        continue;
      std::vector<int64_t> key(pool->begin() + at, pool->begin() + at + size);
      if (auto [it, fresh] = seen.try_emplace(key, g); !fresh)
        return n.error() << "expected distinct n-grams, got n-grams "
                         << it->second << " and " << g << " both "
                         << formatList(key);
      sources[(*indexes)[g]].push_back(g);
    }
  }
  size_t depth = 0;
  for (const auto &s : sources)
    depth = std::max(depth, s.size());
  if (mode == "IDF" && !weights.empty() && depth > 1) {
    auto shared =
        llvm::find_if(sources, [](const auto &s) { return s.size() > 1; });
    return n.error() << "expected one n-gram per output position in IDF mode "
                        "with weights (ONNX Runtime keeps the weight of the "
                        "one it meets last), got n-grams "
                     << formatList(*shared) << " at position "
                     << (shared - sources.begin());
  }

  Type f32 = n.builder().getF32Type(), i64 = n.builder().getI64Type();
  int64_t rows = xType.getRank() == 2 ? xType.getDimSize(0) : 1;
  Value x =
      n.castTo(n.reshape(n.input(0), {rows, xType.getShape().back()}), i64);
  SmallVector<Value> parts;
  for (int64_t l = 0; l < int64_t(ranges.size()); ++l) {
    int64_t size = l + 1, k = (ranges[l].second - ranges[l].first) / size;
    if (!k)
      continue;
    if (size < minSize || size > maxSize) {
      parts.push_back(n.splat(RankedTensorType::get({rows, k}, f32), 0.0));
      continue;
    }
    ArrayRef<int64_t> levelGrams(pool->data() + ranges[l].first,
                                 ranges[l].second - ranges[l].first);
    parts.push_back(countGrams(n, x, levelGrams, size, maxSkip + 1));
  }

  // Each n-gram's value (TF: its count; IDF: weights[i], or 1, where the
  // count is positive; TFIDF: count times weights[i]), then each output
  // position the sum of its n-grams' values: one gather per n-gram at a
  // position (usually one), from the values and a zero column for
  // positions with fewer.
  auto all = concatenate(n, parts, 1);
  if (failed(all))
    return failure();
  auto valueType = RankedTensorType::get({rows, grams}, f32);
  Value values = *all;
  if (mode == "IDF")
    values = n.castTo(n.fold<GtOp>(values, n.splat(valueType, 0.0)), f32);
  if (mode != "TF" && !weights.empty())
    values = n.fold<MulOp>(
        values, n.broadcastTo(n.constant(DenseElementsAttr::get(
                                  RankedTensorType::get({grams}, f32),
                                  ArrayRef<float>(weights))),
                              {rows, grams}));
  auto padded = concatenate(
      n, {values, n.splat(RankedTensorType::get({rows, 1}, f32), 0.0)}, 1);
  if (failed(padded))
    return failure();
  auto outType = RankedTensorType::get({rows, outSize}, f32);
  Value y = n.splat(outType, 0.0);
  for (size_t r = 0; r < depth; ++r) {
    SmallVector<int64_t> at;
    for (const auto &s : sources)
      at.push_back(r < s.size() ? s[r] : grams);
    Value index = n.constant(DenseElementsAttr::get(
        RankedTensorType::get({outSize}, i64), ArrayRef<int64_t>(at)));
    Value gathered = n.fold<GatherOp>(*padded, index, 1);
    y = r ? n.fold<AddOp>(y, gathered) : gathered;
  }
  // IDF without weights: whether any n-gram at the position occurs.
  if (mode == "IDF" && depth > 1)
    y = n.castTo(n.fold<GtOp>(y, n.splat(outType, 0.0)), f32);
  if (xType.getRank() == 1)
    y = n.reshape(y, {outSize});
  n.setOutput(0, y);
  return success();
}

} // namespace

void appendTextOps(std::vector<OpEntry> &ops) {
  ops.insert(ops.end(), {
                            {"TfIdfVectorizer", 9, importTfIdfVectorizer},
                        });
}

} // namespace dtcc::onnx_frontend
