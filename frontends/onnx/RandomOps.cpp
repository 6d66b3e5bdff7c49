//===- RandomOps.cpp - ONNX random-number ops to dgraph -------------------===//
//
// RandomUniform, RandomNormal, their *Like forms and Bernoulli, as
// dgraph.random: counter-based draws of (seed, step, element), so that a
// step's draws are reproducible, recomputation draws them again and a
// split tensor's blocks draw what one device would.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/NodeImporter.h"

#include "llvm/ADT/bit.h"
#include "llvm/Support/xxhash.h"

#include <cmath>

using namespace mlir;
using namespace dtcc::graph;

namespace dtcc::onnx_frontend {
namespace {

/// The floating-point types dgraph.random has kernels for.
bool isDrawType(Type t) { return t.isF16() || t.isBF16() || t.isF32() || t.isF64(); }

/// The node's result element type: its `dtype` attribute, else `fallback`
/// (the *Like ops' input type; FLOAT for RandomUniform and RandomNormal).
/// An error unless it is a float type dgraph.random draws.
FailureOr<Type> drawType(NodeImporter &n, Type fallback) {
  Type element = fallback;
  if (n.hasAttr("dtype")) {
    int64_t dtype = n.attrInt("dtype", 1);
    element = convertElementType(int32_t(dtype), n.getContext());
    if (!element || !isDrawType(element))
      return n.error() << "expected a dtype of FLOAT16, BFLOAT16, FLOAT or "
                          "DOUBLE (the types dtcc draws random numbers in), "
                          "got "
                       << onnxTypeName(int32_t(dtype));
  } else if (!isDrawType(element)) {
    return n.error() << "expected a float input or a dtype attribute (FLOAT16, "
                        "BFLOAT16, FLOAT or DOUBLE) for the output, got an "
                        "input of element type "
                     << element;
  }
  return element;
}

/// The node's seed: its `seed` attribute (a float in ONNX: its bits, so
/// that any two seeds differ), else a hash of its name and output, as
/// Dropout's (NNOps.cpp), so that each node draws its own stream.
int64_t seedOf(NodeImporter &n) {
  if (n.hasAttr("seed"))
    return int64_t(llvm::bit_cast<uint32_t>(n.attrFloat("seed", 0)));
  return int64_t(llvm::xxh3_64bits(n.getNode().name() + n.getNode().output(0)));
}

/// A dgraph.random of `type` drawing from the node's stream.
Value draw(NodeImporter &n, RankedTensorType type, StringRef distribution,
           double shift, double scale) {
  OpBuilder &b = n.builder();
  return n
      .create<RandomOp>(type, n.stepCounter(), Value(),
                        b.getStringAttr(distribution), b.getF64FloatAttr(shift),
                        b.getF64FloatAttr(scale), b.getI64IntegerAttr(seedOf(n)),
                        DenseI64ArrayAttr())
      .getResult();
}

/// RandomUniform / RandomNormal (`like` false: the shape attribute) and
/// their *Like forms (the input's shape; the input itself is not read, and
/// no gradient flows into it).
template <bool normal, bool like> LogicalResult importRandom(NodeImporter &n) {
  SmallVector<int64_t> shape;
  Type fallback = n.builder().getF32Type();
  if (like) {
    RankedTensorType input = n.inputType(0);
    shape.assign(input.getShape().begin(), input.getShape().end());
    fallback = input.getElementType();
  } else {
    std::optional<SmallVector<int64_t>> attr = n.attrInts("shape");
    if (!attr)
      return n.error() << "expected a 'shape' attribute (the output's shape)";
    shape = *attr;
  }
  if (failed(n.checkShape(shape, "shape")))
    return failure();
  FailureOr<Type> element = drawType(n, fallback);
  if (failed(element))
    return failure();
  auto type = RankedTensorType::get(shape, *element);
  // ONNX's two attributes: mean and scale, or low and high.
  const char *names[2] = {normal ? "mean" : "low", normal ? "scale" : "high"};
  const double a = n.attrFloat(names[0], 0.0f),
               b = n.attrFloat(names[1], 1.0f);
  if (!std::isfinite(a) || !std::isfinite(b))
    return n.error() << "expected finite '" << names[0] << "' and '"
                     << names[1] << "' attributes, got " << a << " and " << b;
  const double shift = a, scale = normal ? b : b - a;
  n.setOutput(0, draw(n, type, normal ? "normal" : "uniform", shift, scale));
  return success();
}

/// Bernoulli: 1 where a uniform draw u of p's type is below p (so with
/// probability p), as the output's dtype (p's type by default; ONNX allows
/// integers and bool too).
LogicalResult importBernoulli(NodeImporter &n) {
  Value p = n.input(0);
  RankedTensorType pType = n.inputType(0);
  if (!isDrawType(pType.getElementType()))
    return n.error() << "expected probabilities of type FLOAT16, BFLOAT16, "
                        "FLOAT or DOUBLE, got "
                     << pType.getElementType();
  Type element = pType.getElementType();
  if (n.hasAttr("dtype")) {
    int64_t dtype = n.attrInt("dtype", 1);
    element = convertElementType(int32_t(dtype), n.getContext());
    if (!element)
      return n.error() << "unsupported dtype " << onnxTypeName(int32_t(dtype));
  }
  Value u = draw(n, pType, "uniform", 0.0, 1.0);
  n.setOutput(0, n.castTo(n.fold<LtOp>(u, p), element));
  return success();
}

} // namespace

void appendRandomOps(std::vector<OpEntry> &ops) {
  ops.insert(ops.end(), {
      {"RandomUniform", 1, importRandom<false, false>},
      {"RandomNormal", 1, importRandom<true, false>},
      {"RandomUniformLike", 1, importRandom<false, true>},
      {"RandomNormalLike", 1, importRandom<true, true>},
      {"Bernoulli", 15, importBernoulli},
  });
}

} // namespace dtcc::onnx_frontend
