//===- AttentionOps.cpp - ONNX's transformer ops (opset 23) ---------------===//
//
// RMSNormalization (dgraph.rms_norm), Attention (decomposed into the
// matmul -> scale -> mask -> softmax -> matmul chain that
// dtcc-graph-fuse-attention makes one dgraph.attention where it can) and
// RotaryEmbedding (slices, products and concatenations). PyTorch 2's
// exporter writes F.rms_norm and F.scaled_dot_product_attention as the
// first two from opset 23 on. Semantics as ONNX's reference
// implementation (onnx/reference/ops/op_attention.py and friends).
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/NodeImporter.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace dtcc::graph;

namespace dtcc::onnx_frontend {
namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

//===-- RMSNormalization -------------------------------------------------===//

/// y = x / sqrt(mean(x^2 over axis..) + epsilon) * scale. stash_type 1 (the
/// only one ONNX defines) computes the statistics in f32 for half inputs:
/// rms_norm's statistics are f32 there.
LogicalResult importRmsNormalization(NodeImporter &n) {
  Value x = n.input(0);
  if (failed(requireFloat(n, x)))
    return failure();
  auto type = typeOf(x);
  auto axis = n.normalizeAxis(n.attrInt("axis", -1), type.getRank());
  if (failed(axis))
    return failure();
  int64_t stash = n.attrInt("stash_type", 1);
  if (stash != 1)
    return n.error() << "expected stash_type 1 (float), the one ONNX "
                        "defines, got "
                     << stash;
  ArrayRef<int64_t> normalized = type.getShape().drop_front(*axis);
  Value scale = n.input(1);
  auto st = typeOf(scale);
  // The scale multiplies the normalized x as numpy broadcasts: the op's
  // own where it spans the normalized dimensions only, else (PyTorch 2's
  // export of F.rms_norm without a weight: ones of x's whole shape) a
  // product after it.
  bool perFeature = NodeImporter::isBroadcastable(st.getShape(), normalized);
  if ((!perFeature &&
       !NodeImporter::isBroadcastable(st.getShape(), type.getShape())) ||
      st.getElementType() != type.getElementType())
    return n.error() << "expected a scale of the input's type broadcastable "
                        "to the input, got "
                     << scale.getType();
  float eps = n.attrFloat("epsilon", 1e-5f);
  if (!(eps >= 0))
    return n.error() << "expected epsilon >= 0, got " << eps;
  Value g =
      perFeature
          ? n.broadcastTo(scale, normalized)
          : n.splat(RankedTensorType::get(normalized, type.getElementType()),
                    1.0);
  Value y = n.create<RmsNormOp>(x, g, *axis, APFloat(eps)).getResult();
  if (!perFeature)
    y = n.fold<MulOp>(y, n.broadcastTo(scale, type.getShape()));
  n.setOutput(0, y);
  return success();
}

//===-- Attention --------------------------------------------------------===//

/// [B, S, H * D] -> [B, H, S, D].
Value splitHeads(NodeImporter &n, Value v, int64_t heads) {
  auto shape = typeOf(v).getShape();
  Value r = n.reshape(v, {shape[0], shape[1], heads, shape[2] / heads});
  return n.transpose(r, {0, 2, 1, 3});
}

/// 0 where `ok` holds, -inf elsewhere: a mask as an additive bias of
/// `element` type.
Value additiveBias(NodeImporter &n, Value ok, Type element) {
  auto t = RankedTensorType::get(typeOf(ok).getShape(), element);
  return n.fold<SelectOp>(ok, n.splat(t, 0.0),
                          n.splat(t, -std::numeric_limits<double>::infinity()));
}

/// `ok` (or, where null, nothing) and-ed with where the query at position
/// `p` (its index plus the cache's length) sees key `kj`: at or before it
/// (`causal`), at most `left` before and `right` after it (-1: unbounded).
Value keysInView(NodeImporter &n, Value ok, Value kj, Value p, bool causal,
                 int64_t left, int64_t right) {
  auto type = typeOf(kj);
  auto both = [&](Value c) { ok = ok ? n.fold<AndOp>(ok, c) : c; };
  if (causal)
    both(n.fold<LeOp>(kj, p));
  if (left >= 0)
    both(n.fold<LeOp>(n.fold<SubOp>(p, kj), n.splat(type, double(left))));
  if (right >= 0)
    both(n.fold<LeOp>(n.fold<SubOp>(kj, p), n.splat(type, double(right))));
  return ok;
}

/// Attention (opsets 23 to 25) as ONNX's reference computes it: Q, K, V in
/// 4-D [B, heads, S, D] or 3-D [B, S, heads * D] (q_num_heads,
/// kv_num_heads); key and value heads repeated for grouped queries; the
/// bias from attn_mask (boolean: where it is false, -inf; float: added;
/// padded with -inf to the keys), is_causal (key j for query i where j <= i
/// + the cache's length) and the windows; softcap; a query row that every
/// key is masked from gives zeros (its softmax reads zeros, so that no NaN
/// reaches the gradient). past_key and past_value are concatenated before
/// K and V (present_key, present_value); nonpad_kv_seqlen (an external
/// cache) masks each batch's padding keys and places its queries after its
/// real ones.
LogicalResult importAttention(NodeImporter &n) {
  Value q = n.input(0), k = n.input(1), v = n.input(2);
  for (auto [value, what] :
       {std::pair<Value, StringRef>{q, "Q"}, {k, "K"}, {v, "V"}})
    if (failed(requireFloat(n, value, what)))
      return failure();
  auto qt = typeOf(q);
  Type element = qt.getElementType();
  if (typeOf(k).getElementType() != element ||
      typeOf(v).getElementType() != element)
    return n.error() << "expected Q, K and V of one element type, got "
                     << q.getType() << ", " << k.getType() << " and "
                     << v.getType();
  int64_t rank = qt.getRank();
  if ((rank != 3 && rank != 4) || typeOf(k).getRank() != rank ||
      typeOf(v).getRank() != rank)
    return n.error() << "expected Q, K and V all of rank 3 or all of rank 4, "
                        "got "
                     << q.getType() << ", " << k.getType() << " and "
                     << v.getType();
  if (n.hasInput(4) != n.hasInput(5))
    return n.error() << "expected past_key and past_value together";
  if (n.hasInput(6) && n.hasInput(4))
    return n.error() << "expected nonpad_kv_seqlen or past_key and "
                        "past_value, not both";
  int64_t batch = qt.getDimSize(0);
  if (rank == 3) {
    int64_t qHeads = n.attrInt("q_num_heads", 0),
            kvHeads = n.attrInt("kv_num_heads", 0);
    if (qHeads < 1 || kvHeads < 1)
      return n.error() << "expected q_num_heads and kv_num_heads >= 1 with "
                          "3-D inputs, got "
                       << qHeads << " and " << kvHeads;
    auto divides = [&](Value t, int64_t heads) {
      return typeOf(t).getDimSize(2) % heads == 0;
    };
    if (!divides(q, qHeads) || !divides(k, kvHeads) || !divides(v, kvHeads))
      return n.error() << "expected hidden sizes divisible by the heads ("
                       << qHeads << " for Q, " << kvHeads << " for K and V), "
                       << "got " << q.getType() << ", " << k.getType()
                       << " and " << v.getType();
    q = splitHeads(n, q, qHeads);
    k = splitHeads(n, k, kvHeads);
    v = splitHeads(n, v, kvHeads);
  }
  auto shapeOf = [](Value t) { return typeOf(t).getShape(); };
  int64_t qHeads = shapeOf(q)[1], sq = shapeOf(q)[2], d = shapeOf(q)[3];
  int64_t kvHeads = shapeOf(k)[1], dv = shapeOf(v)[3];
  if (shapeOf(k)[0] != batch || shapeOf(v)[0] != batch || shapeOf(k)[3] != d ||
      shapeOf(v)[1] != kvHeads || shapeOf(v)[2] != shapeOf(k)[2] ||
      kvHeads < 1 || qHeads % kvHeads != 0)
    return n.error() << "expected Q [B, Hq, Sq, D], K [B, Hkv, Skv, D] and V "
                        "[B, Hkv, Skv, Dv] with Hq a multiple of Hkv, got "
                     << q.getType() << ", " << k.getType() << " and "
                     << v.getType();
  int64_t offset = 0;
  if (n.hasInput(4)) {
    Value pk = n.input(4), pv = n.input(5);
    auto ps = shapeOf(pk);
    if (typeOf(pk).getRank() != 4 || typeOf(pv).getRank() != 4 ||
        ps[0] != batch || ps[1] != kvHeads || ps[3] != d ||
        shapeOf(pv)[0] != batch || shapeOf(pv)[1] != kvHeads ||
        shapeOf(pv)[2] != ps[2] || shapeOf(pv)[3] != dv ||
        typeOf(pk).getElementType() != element ||
        typeOf(pv).getElementType() != element)
      return n.error() << "expected past_key [B, Hkv, P, D] and past_value "
                          "[B, Hkv, P, Dv] of Q's type, got "
                       << pk.getType() << " and " << pv.getType();
    offset = ps[2];
    k = n.fold<ConcatOp>(ValueRange{pk, k}, 2);
    v = n.fold<ConcatOp>(ValueRange{pv, v}, 2);
  }
  n.setOutput(1, k);
  n.setOutput(2, v);
  int64_t skv = shapeOf(k)[2];

  // Grouped queries: key/value head h / (Hq / Hkv) for query head h.
  auto repeatHeads = [&](Value t) {
    if (kvHeads == qHeads)
      return t;
    int64_t group = qHeads / kvHeads;
    auto s = shapeOf(t);
    auto wide = RankedTensorType::get({s[0], s[1], group, s[2], s[3]}, element);
    Value b = n.fold<BroadcastInDimOp>(
        wide, n.reshape(t, {s[0], s[1], 1, s[2], s[3]}),
        ArrayRef<int64_t>{0, 1, 2, 3, 4});
    return n.reshape(b, {s[0], qHeads, s[2], s[3]});
  };
  Value kr = repeatHeads(k), vr = repeatHeads(v);

  auto scoresType = RankedTensorType::get({batch, qHeads, sq, skv}, element);
  Value scores = n.create<MatmulOp>(q, kr, false, true).getResult();
  double scale = n.hasAttr("scale") ? n.attrFloat("scale", 1.0f)
                                    : 1.0 / std::sqrt(double(d));
  if (scale != 1.0)
    scores = n.fold<MulOp>(scores, n.splat(scoresType, scale));
  Value raw = scores;
  float softcap = n.attrFloat("softcap", 0.0f);
  if (softcap > 0) {
    Value cap = n.splat(scoresType, softcap);
    scores = n.fold<MulOp>(cap, n.fold<TanhOp>(n.fold<DivOp>(scores, cap)));
  }
  Value capped = scores;

  // The bias: the mask and the positions no query may see, each at its
  // own shape ([.., Sq or 1, Skv]), summed at their common (small) shape
  // and broadcast to the scores once: the guard below reads the small sum,
  // which dtcc-graph-fuse-attention evaluates.
  const double inf = std::numeric_limits<double>::infinity();
  SmallVector<Value> parts;
  bool runtimeBias = false;
  if (n.hasInput(3)) {
    Value mask = n.input(3);
    auto mt = typeOf(mask);
    bool isBool = mt.getElementType().isInteger(1);
    if (!isBool && mt.getElementType() != element)
      return n.error() << "expected a boolean attn_mask or one of Q's type, "
                          "got "
                       << mask.getType();
    if (mt.getRank() < 1 || mt.getShape().back() > skv)
      return n.error() << "expected attn_mask [.., " << sq << ", <= " << skv
                       << "], got " << mask.getType();
    if (isBool)
      mask = additiveBias(n, mask, element);
    int64_t pad = skv - mt.getShape().back();
    if (pad > 0) {
      SmallVector<int64_t> padShape(mt.getShape());
      padShape.back() = pad;
      mask = n.fold<ConcatOp>(
          ValueRange{mask,
                     n.splat(RankedTensorType::get(padShape, element), -inf)},
          int64_t(padShape.size() - 1));
    }
    if (!NodeImporter::isBroadcastable(typeOf(mask).getShape(),
                                       scoresType.getShape()))
      return n.error() << "expected attn_mask broadcastable to " << scoresType
                       << ", got " << n.input(3).getType();
    parts.push_back(mask);
    runtimeBias = true;
  }
  bool causal = n.attrInt("is_causal", 0) != 0;
  int64_t left = n.attrInt("left_window_size", -1),
          right = n.attrInt("right_window_size", -1);
  if (left < -1 || right < -1)
    return n.error() << "expected window sizes of -1 or more, got " << left
                     << " and " << right;
  bool constrained = causal || left >= 0 || right >= 0;
  auto allowed = [&](int64_t i, int64_t j) {
    int64_t p = i + offset;
    return (!causal || j <= p) && (left < 0 || p - j <= left) &&
           (right < 0 || j - p <= right);
  };
  // Whether some query row of `planes` planes of Sq rows loses every one
  // of its `width` keys (`open(plane, i, j)`: query i sees key j).
  auto someRowEmpty = [&](int64_t planes, int64_t width, auto open) {
    for (int64_t plane = 0; plane < planes; ++plane)
      for (int64_t i = 0; i < sq; ++i) {
        bool any = false;
        for (int64_t j = 0; j < width && !any; ++j)
          any = open(plane, i, j);
        if (!any)
          return true;
      }
    return false;
  };
  // A mask known at compile time (HuggingFace's causal masks fold) needs
  // no guard where no query row loses every key: the chain stays one that
  // dtcc-graph-fuse-attention can fuse.
  if (runtimeBias && !n.hasInput(6))
    if (std::optional<DenseElementsAttr> known = n.knownInput(3)) {
      auto mt = typeOf(n.input(3));
      int64_t width = mt.getShape().back();
      int64_t mq = mt.getRank() >= 2 ? mt.getDimSize(mt.getRank() - 2) : 1;
      int64_t planes = mt.getNumElements() / std::max<int64_t>(1, mq * width);
      SmallVector<bool> open;
      open.reserve(size_t(mt.getNumElements()));
      if (mt.getElementType().isInteger(1))
        for (bool b : known->getValues<bool>())
          open.push_back(b);
      else
        for (APFloat f : known->getValues<APFloat>())
          open.push_back(!(f.isInfinity() && f.isNegative()));
      runtimeBias =
          someRowEmpty(planes, width, [&](int64_t plane, int64_t i, int64_t j) {
            int64_t row = (plane * mq + (mq == 1 ? 0 : i)) * width;
            return open[size_t(row + j)] && (!constrained || allowed(i, j));
          });
    }
  bool positionsEmptyARow = false;
  if (n.hasInput(6)) {
    // An external cache: batch b's keys j < nonpad[b] are real, and its
    // queries sit at positions i + nonpad[b] - Sq.
    Value nonpad = n.input(6);
    auto nt = typeOf(nonpad);
    if (nt.getRank() != 1 || nt.getDimSize(0) != batch ||
        !isa<IntegerType>(nt.getElementType()) ||
        nt.getElementType().isInteger(1))
      return n.error() << "expected nonpad_kv_seqlen of integers [" << batch
                       << "], got " << nonpad.getType();
    auto i64 = n.builder().getI64Type();
    auto posType = RankedTensorType::get({batch, sq, skv}, i64);
    Value length = n.fold<BroadcastInDimOp>(posType, n.castTo(nonpad, i64),
                                            ArrayRef<int64_t>{0});
    Value qi = n.create<IotaOp>(posType, 1).getResult();
    Value kj = n.create<IotaOp>(posType, 2).getResult();
    Value p =
        n.fold<SubOp>(n.fold<AddOp>(qi, length), n.splat(posType, double(sq)));
    Value ok =
        keysInView(n, n.fold<LtOp>(kj, length), kj, p, causal, left, right);
    parts.push_back(
        n.reshape(additiveBias(n, ok, element), {batch, 1, sq, skv}));
    runtimeBias = true;
  } else if (constrained) {
    // The same positions for every batch and head: [Sq, Skv] from iotas
    // (dtcc-graph-fuse-attention evaluates them: a causal one becomes the
    // fused op's attribute), broadcast.
    positionsEmptyARow = someRowEmpty(
        1, skv, [&](int64_t, int64_t i, int64_t j) { return allowed(i, j); });
    auto posType = RankedTensorType::get({sq, skv}, n.builder().getI64Type());
    Value kj = n.create<IotaOp>(posType, 1).getResult();
    Value p = n.create<IotaOp>(posType, 0).getResult();
    if (offset != 0)
      p = n.fold<AddOp>(p, n.splat(posType, double(offset)));
    parts.push_back(additiveBias(
        n, keysInView(n, Value(), kj, p, causal, left, right), element));
  }
  Value small;
  if (!parts.empty()) {
    SmallVector<ArrayRef<int64_t>> shapes;
    for (Value v : parts)
      shapes.push_back(typeOf(v).getShape());
    auto common = n.broadcastShape(shapes);
    if (failed(common))
      return failure();
    // Rank 4, as the scores, for the guard's reduction.
    SmallVector<int64_t> shape(*common);
    while (shape.size() < 4)
      shape.insert(shape.begin(), 1);
    for (Value v : parts) {
      Value b = n.reshape(n.broadcastTo(v, *common), shape);
      small = small ? n.fold<AddOp>(small, b) : b;
    }
  }
  Value bias = small ? n.broadcastTo(small, scoresType.getShape()) : Value();
  if (bias)
    scores = n.fold<AddOp>(scores, bias);
  Value withBias = scores;

  // A row every key is masked from: its softmax reads zeros instead of
  // -inf (no NaN), its probabilities are zeros.
  Value emptyRow;
  if (runtimeBias || positionsEmptyARow) {
    Value rowMax = n.fold<ReduceMaxOp>(small, ArrayRef<int64_t>{3});
    Value empty = n.fold<EqOp>(rowMax, n.splat(typeOf(rowMax), -inf));
    emptyRow = n.fold<BroadcastInDimOp>(
        RankedTensorType::get(scoresType.getShape(), n.builder().getI1Type()),
        empty, ArrayRef<int64_t>{0, 1, 2});
    scores = n.fold<SelectOp>(emptyRow, n.splat(scoresType, 0.0), scores);
  }
  Type softmaxType = element;
  if (n.hasAttr("softmax_precision")) {
    int64_t p = n.attrInt("softmax_precision", 1);
    softmaxType = convertElementType(p, n.getContext());
    if (!softmaxType || !isa<FloatType>(softmaxType))
      return n.error() << "expected softmax_precision 1, 10, 11 or 16, got "
                       << p;
  }
  Value probs =
      n.create<SoftmaxOp>(n.castTo(scores, softmaxType), 3).getResult();
  probs = n.castTo(probs, element);
  if (emptyRow)
    probs = n.fold<SelectOp>(emptyRow, n.splat(scoresType, 0.0), probs);

  Value y = n.create<MatmulOp>(probs, vr, false, false).getResult();
  if (rank == 3)
    y = n.reshape(n.transpose(y, {0, 2, 1, 3}), {batch, sq, qHeads * dv});
  n.setOutput(0, y);
  if (n.wantsOutput(3)) {
    int64_t mode = n.attrInt("qk_matmul_output_mode", 0);
    Value out = mode == 0   ? raw
                : mode == 1 ? capped
                : mode == 2 ? withBias
                : mode == 3 ? probs
                            : Value();
    if (!out)
      return n.error() << "expected qk_matmul_output_mode 0 to 3, got " << mode;
    n.setOutput(3, out);
  }
  return success();
}

//===-- RotaryEmbedding --------------------------------------------------===//

/// Rotates the first rotary_embedding_dim features of each head of X ([B,
/// H, S, D], or [B, S, H * D] with num_heads) by the angles of cos_cache
/// and sin_cache (their rows at position_ids [B, S] where given, else
/// [B, S, rot / 2]): pairs (x1, x2) are the halves or, interleaved, the
/// even and odd features.
LogicalResult importRotaryEmbedding(NodeImporter &n) {
  Value x = n.input(0), cosCache = n.input(1), sinCache = n.input(2);
  if (failed(requireFloat(n, x)))
    return failure();
  auto xt = typeOf(x);
  Type element = xt.getElementType();
  if (typeOf(cosCache).getElementType() != element ||
      typeOf(sinCache).getElementType() != element ||
      typeOf(cosCache) != typeOf(sinCache))
    return n.error() << "expected cos_cache and sin_cache of one shape and the "
                        "input's type, got "
                     << cosCache.getType() << " and " << sinCache.getType();
  int64_t rank = xt.getRank();
  if (rank != 3 && rank != 4)
    return n.error() << "expected an input of rank 3 or 4, got " << xt;
  // To [B, S, H, D].
  Value h;
  if (rank == 4) {
    h = n.transpose(x, {0, 2, 1, 3});
  } else {
    int64_t heads = n.attrInt("num_heads", 0);
    if (heads < 1 || xt.getDimSize(2) % heads != 0)
      return n.error() << "expected num_heads >= 1 dividing the hidden size "
                          "of a 3-D input, got "
                       << heads << " for " << xt;
    h = n.reshape(x, {xt.getDimSize(0), xt.getDimSize(1), heads,
                      xt.getDimSize(2) / heads});
  }
  auto hs = typeOf(h).getShape();
  int64_t b = hs[0], s = hs[1], heads = hs[2], d = hs[3];
  int64_t rot = n.attrInt("rotary_embedding_dim", 0);
  if (rot == 0)
    rot = d;
  if (rot < 2 || rot > d || rot % 2 != 0)
    return n.error() << "expected an even rotary_embedding_dim within the "
                        "head size "
                     << d << ", got " << rot;
  int64_t half = rot / 2;
  if (n.hasInput(3)) {
    Value pos = n.input(3);
    auto pt = typeOf(pos);
    if (pt.getRank() != 2 || pt.getDimSize(0) != b || pt.getDimSize(1) != s ||
        !pt.getElementType().isInteger(64))
      return n.error() << "expected position_ids of int64 [" << b << ", " << s
                       << "], got " << pos.getType();
    if (typeOf(cosCache).getRank() != 2)
      return n.error() << "expected caches [positions, rot / 2] with "
                          "position_ids, got "
                       << cosCache.getType();
    cosCache = n.fold<GatherOp>(cosCache, pos, 0);
    sinCache = n.fold<GatherOp>(sinCache, pos, 0);
  }
  auto ct = typeOf(cosCache);
  if (ct.getRank() != 3 || ct.getDimSize(0) != b || ct.getDimSize(1) != s ||
      ct.getDimSize(2) != half)
    return n.error() << "expected caches (after position_ids) [" << b << ", "
                     << s << ", " << half << "], got " << ct;
  auto pairType = RankedTensorType::get({b, s, heads, half}, element);
  auto angle = [&](Value c) {
    return n.fold<BroadcastInDimOp>(pairType, c, ArrayRef<int64_t>{0, 1, 3});
  };
  Value cosv = angle(cosCache), sinv = angle(sinCache);
  bool interleaved = n.attrInt("interleaved", 0) != 0;
  auto slice = [&](int64_t start, int64_t limit, int64_t stride) {
    return n.fold<SliceOp>(h, ArrayRef<int64_t>{0, 0, 0, start},
                           ArrayRef<int64_t>{b, s, heads, limit},
                           ArrayRef<int64_t>{1, 1, 1, stride});
  };
  Value x1 = interleaved ? slice(0, rot, 2) : slice(0, half, 1);
  Value x2 = interleaved ? slice(1, rot, 2) : slice(half, rot, 1);
  Value real = n.fold<SubOp>(n.fold<MulOp>(cosv, x1), n.fold<MulOp>(sinv, x2));
  Value imag = n.fold<AddOp>(n.fold<MulOp>(sinv, x1), n.fold<MulOp>(cosv, x2));
  Value rotated;
  if (interleaved) {
    Value r = n.reshape(real, {b, s, heads, half, 1});
    Value i = n.reshape(imag, {b, s, heads, half, 1});
    rotated =
        n.reshape(n.fold<ConcatOp>(ValueRange{r, i}, 4), {b, s, heads, rot});
  } else {
    rotated = n.fold<ConcatOp>(ValueRange{real, imag}, 3);
  }
  if (rot < d)
    rotated = n.fold<ConcatOp>(ValueRange{rotated, slice(rot, d, 1)}, 3);
  Value y = rank == 4 ? n.transpose(rotated, {0, 2, 1, 3})
                      : n.reshape(rotated, xt.getShape());
  n.setOutput(0, y);
  return success();
}

} // namespace

void appendAttentionOps(std::vector<OpEntry> &ops) {
  ops.insert(ops.end(), {
                            {"RMSNormalization", 23, importRmsNormalization},
                            {"Attention", 23, importAttention},
                            {"RotaryEmbedding", 23, importRotaryEmbedding},
                        });
}

} // namespace dtcc::onnx_frontend
