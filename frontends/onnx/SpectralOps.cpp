//===- SpectralOps.cpp - ONNX DFT, STFT, MelWeightMatrix ------------------===//
//
// DFT (opsets 17 and 20) and STFT (17) as products with constant cosine
// and sine matrices: a transform of length N is two [N, bins] products per
// part of the signal, which the CPU and GPU products run at their matrix
// rate (an FFT's N log N would not pay for itself at the frame sizes of
// audio front-ends), and whose gradients are products too, so that a model
// trains through them. STFT cuts its frames with a gather of constant
// positions. MelWeightMatrix folds to a constant (ONNX's reference
// formula). PyTorch 2 exports torch.stft as STFT.
//
// Complex tensors are ONNX's: a last dimension of 2 (real, imaginary), or
// of 1 for a real signal.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/NodeImporter.h"

#include <cmath>
#include <functional>

using namespace mlir;
using namespace dtcc::graph;

namespace dtcc::onnx_frontend {
namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// A [rows, cols] constant of `ft` whose element (r, c) is `f(r, c)`.
Value matrix(NodeImporter &n, Type ft, int64_t rows, int64_t cols,
             llvm::function_ref<double(int64_t, int64_t)> f) {
  std::vector<double> values;
  values.reserve(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      values.push_back(f(r, c));
  return n.floatConstant(RankedTensorType::get({rows, cols}, ft), values);
}

/// cos and sin of 2 pi k m / length, the angle reduced exactly first.
double cosOf(int64_t k, int64_t m, int64_t length) {
  return std::cos(2 * M_PI * double((k * m) % length) / double(length));
}
double sinOf(int64_t k, int64_t m, int64_t length) {
  return std::sin(2 * M_PI * double((k * m) % length) / double(length));
}

/// A signal's real and imaginary parts (the imaginary null for a real one),
/// its transformed dimension last.
struct Parts {
  Value re, im;
};

/// The first `count` elements of `v` along its last dimension.
Value leading(NodeImporter &n, Value v, int64_t count) {
  auto type = typeOf(v);
  int64_t rank = type.getRank();
  if (type.getDimSize(rank - 1) == count)
    return v;
  SmallVector<int64_t> start(rank, 0), limit(type.getShape()), step(rank, 1);
  limit[rank - 1] = count;
  return n.fold<SliceOp>(v, start, limit, step);
}

/// `v` [..., m] times the constant [m, k] `f(row, column)`.
Value times(NodeImporter &n, Value v, int64_t cols,
            llvm::function_ref<double(int64_t, int64_t)> f) {
  auto type = typeOf(v);
  int64_t rows = type.getDimSize(type.getRank() - 1);
  Value w = matrix(n, type.getElementType(), rows, cols, f);
  if (type.getRank() == 1)
    return n.reshape(
        n.create<MatmulOp>(n.reshape(v, {1, rows}), w, false, false)
            .getResult(),
        {cols});
  return n.create<MatmulOp>(v, w, false, false).getResult();
}

/// The DFT of length `length` of `x` along its last dimension, whose first
/// `bins` frequencies it returns (the signal's samples past `length` are
/// dropped, those missing are zeros); divided by `length` and with the
/// opposite sign when `inverse`.
Parts transform(NodeImporter &n, Parts x, int64_t length, int64_t bins,
                bool inverse) {
  int64_t used =
      std::min(typeOf(x.re).getDimSize(typeOf(x.re).getRank() - 1), length);
  double scale = inverse ? 1.0 / double(length) : 1.0;
  double sign = inverse ? 1.0 : -1.0;
  auto c = [&](int64_t m, int64_t k) { return scale * cosOf(k, m, length); };
  auto s = [&](int64_t m, int64_t k) {
    return sign * scale * sinOf(k, m, length);
  };
  // (re + i im)(cos + i sign sin)
  Value re = leading(n, x.re, used);
  Parts y{times(n, re, bins, c), times(n, re, bins, s)};
  if (x.im) {
    Value im = leading(n, x.im, used);
    y.re = n.fold<SubOp>(y.re, times(n, im, bins, s));
    y.im = n.fold<AddOp>(y.im, times(n, im, bins, c));
  }
  return y;
}

/// The real signal of length `length` whose one-sided spectrum is `x`
/// (numpy's irfft): the missing half is the conjugate of the given one, and
/// the imaginary parts at frequency 0 and length / 2 are not read.
Value realInverse(NodeImporter &n, Parts x, int64_t length) {
  int64_t given = typeOf(x.re).getDimSize(typeOf(x.re).getRank() - 1);
  int64_t used = std::min(given, length / 2 + 1);
  auto weight = [&](int64_t k) {
    bool single = k == 0 || (length % 2 == 0 && k == length / 2);
    return (single ? 1.0 : 2.0) / double(length);
  };
  Value y = times(n, leading(n, x.re, used), length, [&](int64_t k, int64_t m) {
    return weight(k) * cosOf(k, m, length);
  });
  if (x.im)
    y = n.fold<SubOp>(
        y, times(n, leading(n, x.im, used), length, [&](int64_t k, int64_t m) {
          return weight(k) * sinOf(k, m, length);
        }));
  return y;
}

/// ONNX's complex layout [..., 1 | 2] -> parts along `axis` moved last.
FailureOr<Parts> splitComplex(NodeImporter &n, Value x, int64_t axis,
                              SmallVectorImpl<int64_t> &perm) {
  auto type = typeOf(x);
  int64_t rank = type.getRank();
  int64_t last = type.getDimSize(rank - 1);
  if (last != 1 && last != 2)
    return n.error() << "expected a last dimension of 1 (real) or 2 (real, "
                        "imaginary), got "
                     << type;
  SmallVector<int64_t> shape(type.getShape().drop_back());
  // The transformed axis last, the others in order.
  perm.clear();
  for (int64_t d = 0; d < rank - 1; ++d)
    if (d != axis)
      perm.push_back(d);
  perm.push_back(axis);
  auto part = [&](int64_t i) {
    SmallVector<int64_t> start(rank, 0), limit(type.getShape()), step(rank, 1);
    start[rank - 1] = i;
    limit[rank - 1] = i + 1;
    Value p = n.reshape(n.fold<SliceOp>(x, start, limit, step), shape);
    return n.transpose(p, perm);
  };
  Parts parts{part(0), last == 2 ? part(1) : Value()};
  return parts;
}

/// Parts with the transformed axis last -> ONNX's layout, the axis back in
/// its place ([..., 2], or [..., 1] without an imaginary part).
Value joinComplex(NodeImporter &n, Parts y, ArrayRef<int64_t> perm) {
  SmallVector<int64_t> inverse(perm.size());
  for (auto [i, p] : llvm::enumerate(perm))
    inverse[p] = i;
  auto back = [&](Value v) {
    Value t = n.transpose(v, inverse);
    SmallVector<int64_t> shape(typeOf(t).getShape());
    shape.push_back(1);
    return n.reshape(t, shape);
  };
  if (!y.im)
    return back(y.re);
  int64_t rank = int64_t(perm.size()) + 1;
  return *concatenate(n, {back(y.re), back(y.im)}, rank - 1);
}

/// A scalar length input (dft_length, frame_length) known at compile time.
FailureOr<int64_t> lengthInput(NodeImporter &n, int i, StringRef what) {
  auto v = n.constantInts(i, what);
  if (failed(v))
    return failure();
  if (v->size() != 1 || (*v)[0] < 1)
    return n.error() << "expected " << what << " to be one positive integer";
  return (*v)[0];
}

LogicalResult importDFT(NodeImporter &n) {
  Value x = n.input(0);
  if (failed(requireFloat(n, x)))
    return failure();
  int64_t rank = typeOf(x).getRank();
  if (rank < 2)
    return n.error() << "expected an input of rank >= 2 ([..., signal, 1 | "
                        "2]), got "
                     << typeOf(x);
  // The axis: an attribute until opset 20, then an optional input.
  int64_t axisValue = n.getOpset() >= 20 ? -2 : n.attrInt("axis", 1);
  if (n.getOpset() >= 20 && n.hasInput(2)) {
    auto a = n.constantInts(2, "axis");
    if (failed(a))
      return failure();
    if (a->size() != 1)
      return n.error() << "expected a scalar axis";
    axisValue = (*a)[0];
  }
  auto axis = n.normalizeAxis(axisValue, rank);
  if (failed(axis))
    return failure();
  if (*axis == rank - 1)
    return n.error() << "expected an axis other than the last (the real and "
                        "imaginary parts), got "
                     << axisValue;
  bool inverse = n.attrInt("inverse", 0) != 0;
  bool onesided = n.attrInt("onesided", 0) != 0;
  int64_t extent = typeOf(x).getDimSize(*axis);
  int64_t length = inverse && onesided ? 2 * (extent - 1) : extent;
  if (n.hasInput(1)) {
    auto given = lengthInput(n, 1, "dft_length");
    if (failed(given))
      return failure();
    length = *given;
  }
  if (length < 1)
    return n.error() << "expected a transform length >= 1, got " << length;
  SmallVector<int64_t> perm;
  auto parts = splitComplex(n, x, *axis, perm);
  if (failed(parts))
    return failure();
  Parts y;
  if (inverse && onesided)
    y = Parts{realInverse(n, *parts, length), Value()};
  else
    y = transform(n, *parts, length,
                  onesided && !inverse ? length / 2 + 1 : length, inverse);
  n.setOutput(0, joinComplex(n, y, perm));
  return success();
}

/// Frames of `frame_length` every `frame_step` samples, each times the
/// window, transformed: [batch, frames, bins, 2].
LogicalResult importSTFT(NodeImporter &n) {
  Value x = n.input(0);
  if (failed(requireFloat(n, x)))
    return failure();
  auto type = typeOf(x);
  if (type.getRank() != 3)
    return n.error() << "expected a signal [batch, length, 1 | 2], got "
                     << type;
  auto step = lengthInput(n, 1, "frame_step");
  if (failed(step))
    return failure();
  int64_t signal = type.getDimSize(1);
  Value window = n.input(2);
  int64_t frameLength = signal;
  if (window) {
    auto wt = typeOf(window);
    if (wt.getRank() != 1)
      return n.error() << "expected a 1-D window, got " << wt;
    frameLength = wt.getDimSize(0);
  }
  if (n.hasInput(3)) {
    auto given = lengthInput(n, 3, "frame_length");
    if (failed(given))
      return failure();
    if (window && *given != frameLength)
      return n.error() << "expected frame_length " << *given
                       << " to be the window's length " << frameLength;
    frameLength = *given;
  }
  if (frameLength > signal)
    return n.error() << "expected a frame length (" << frameLength
                     << ") no longer than the signal (" << signal << ")";
  int64_t frames = 1 + (signal - frameLength) / *step;
  SmallVector<int64_t> positions;
  for (int64_t f = 0; f < frames; ++f)
    for (int64_t i = 0; i < frameLength; ++i)
      positions.push_back(f * *step + i);
  auto indexType =
      RankedTensorType::get({frames, frameLength}, n.builder().getI64Type());
  Value framed = n.fold<GatherOp>(
      x, n.constant(DenseElementsAttr::get(indexType, ArrayRef(positions))), 1);
  // [batch, frames, frame, 1 | 2]
  if (window) {
    Value w = n.reshape(n.castTo(window, type.getElementType()),
                        {1, 1, frameLength, 1});
    framed = n.fold<MulOp>(framed, n.broadcastTo(w, typeOf(framed).getShape()));
  }
  SmallVector<int64_t> perm;
  auto parts = splitComplex(n, framed, 2, perm);
  if (failed(parts))
    return failure();
  bool onesided = n.attrInt("onesided", 1) != 0;
  Parts y = transform(n, *parts, frameLength,
                      onesided ? frameLength / 2 + 1 : frameLength,
                      /*inverse=*/false);
  n.setOutput(0, joinComplex(n, y, perm));
  return success();
}

/// Folded to a constant [dft_length / 2 + 1, num_mel_bins] of
/// output_datatype, as ONNX's reference computes it (triangles between
/// mel-spaced bins, frequencies truncated to bins).
LogicalResult importMelWeightMatrix(NodeImporter &n) {
  auto bins = lengthInput(n, 0, "num_mel_bins");
  auto dft = lengthInput(n, 1, "dft_length");
  auto rate = lengthInput(n, 2, "sample_rate");
  if (failed(bins) || failed(dft) || failed(rate))
    return failure();
  auto edge = [&](int i, StringRef what) -> FailureOr<double> {
    auto v = n.constantInput(i, what);
    if (failed(v))
      return failure();
    if (v->getNumElements() != 1 || !isa<FloatType>(v->getElementType()))
      return n.error() << "expected " << what << " to be one float";
    return (*v->getValues<APFloat>().begin()).convertToDouble();
  };
  auto lower = edge(3, "lower_edge_hertz");
  auto upper = edge(4, "upper_edge_hertz");
  if (failed(lower) || failed(upper))
    return failure();
  int64_t dtype = n.attrInt("output_datatype", 1);
  Type element = convertElementType(int32_t(dtype), n.getContext());
  if (!element || !isa<FloatType>(element))
    return n.error() << "expected a floating-point output_datatype, got "
                     << onnxTypeName(int32_t(dtype));
  int64_t spectrum = *dft / 2 + 1;
  auto mel = [](double hz) {
    return 2595 * std::log1p(hz / 700) / std::log(10);
  };
  double low = mel(*lower), high = mel(*upper);
  double step = (high - low) / double(*bins + 2);
  SmallVector<int64_t> points;
  for (int64_t i = 0; i < *bins + 2; ++i) {
    double hz =
        700 * std::expm1((double(i) * step + low) / 2595 * std::log(10));
    points.push_back(
        int64_t(std::floor(double(*dft + 1) * hz / double(*rate))));
  }
  std::vector<double> weights(spectrum * *bins, 0.0);
  for (int64_t i = 0; i < *bins; ++i) {
    int64_t left = points[i], center = points[i + 1], right = points[i + 2];
    auto at = [&](int64_t j) -> double & { return weights[j * *bins + i]; };
    if (center - left == 0) {
      if (center >= 0 && center < spectrum)
        at(center) = 1;
    } else {
      for (int64_t j = std::max<int64_t>(left, 0);
           j <= std::min(center, spectrum - 1); ++j)
        at(j) = double(j - left) / double(center - left);
    }
    if (right - center > 0)
      for (int64_t j = std::max<int64_t>(center, 0);
           j < std::min(right, spectrum); ++j)
        at(j) = double(right - j) / double(right - center);
  }
  n.setOutput(0, matrix(n, element, spectrum, *bins, [&](int64_t r, int64_t c) {
                return weights[r * *bins + c];
              }));
  return success();
}

} // namespace

void appendSpectralOps(std::vector<OpEntry> &ops) {
  ops.insert(ops.end(), {
                            {"DFT", 17, importDFT},
                            {"STFT", 17, importSTFT},
                            {"MelWeightMatrix", 17, importMelWeightMatrix},
                        });
}

} // namespace dtcc::onnx_frontend
