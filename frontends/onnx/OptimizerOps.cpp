//===- OptimizerOps.cpp - ONNX's training operators to dgraph -------------===//
//
// Adagrad, Adam and Momentum of the ai.onnx.preview.training domain: one
// optimizer step over n tensors, as a graph that holds its optimizer in
// the graph writes it (ONNX's own training tests; a model exported with its
// update). Each is elementwise arithmetic over dgraph's ops, the
// step-dependent scalars (the decayed rate, Adam's bias correction,
// Momentum's first step) computed from the step count T at run time.
// dtcc's own training derives its optimizer itself (--optimizer); these
// import what a graph says, as any other op.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/NodeImporter.h"

#include "llvm/ADT/StringExtras.h"

using namespace mlir;
using namespace dtcc::graph;

namespace dtcc::onnx_frontend {
namespace {

/// The training operators' domain.
constexpr llvm::StringLiteral kTrainingDomain = "ai.onnx.preview.training";

/// A training operator's inputs: the rate R and step count T (scalars),
/// then `groups` lists (X, G and the op's state) of one tensor each per
/// optimized tensor.
struct StepInputs {
  Value rate, step;
  SmallVector<SmallVector<Value>> groups;
};

/// Reads and checks the inputs of a training operator whose inputs after R
/// and T are the lists `names` ("X", "G", "V", "H"), and checks that its
/// outputs are the updated lists (every list but G).
FailureOr<StepInputs> readStep(NodeImporter &n, ArrayRef<StringRef> names) {
  int64_t lists = int64_t(names.size());
  int64_t tensors = (n.numInputs() - 2) / lists;
  std::string spelled = llvm::join(names, ", ");
  if (n.numInputs() < 2 + lists || (n.numInputs() - 2) % lists)
    return n.error() << "expected inputs R, T and then " << lists
                     << " lists of one tensor per optimized tensor (" << spelled
                     << "), got " << n.numInputs() << " inputs";
  if (n.numOutputs() != (lists - 1) * tensors)
    return n.error() << "expected " << (lists - 1) * tensors
                     << " outputs (the updated " << spelled
                     << " but G, one per optimized tensor), got "
                     << n.numOutputs();
  for (int i = 0; i < n.numInputs(); ++i)
    if (!n.hasInput(i))
      return n.error() << "expected input " << i << ", which is empty";
  StepInputs in;
  in.rate = n.input(0);
  in.step = n.input(1);
  auto rateType = n.inputType(0), stepType = n.inputType(1);
  if (rateType.getNumElements() != 1 ||
      !isa<FloatType>(rateType.getElementType()))
    return n.error() << "expected a floating-point scalar rate R (input 0), "
                        "got "
                     << rateType;
  if (stepType.getNumElements() != 1 ||
      !stepType.getElementType().isInteger(64))
    return n.error() << "expected an int64 scalar step count T (input 1), got "
                     << stepType;
  in.rate = n.reshape(in.rate, {});
  in.step = n.reshape(in.step, {});
  for (int64_t list = 0; list < lists; ++list) {
    in.groups.emplace_back();
    for (int64_t t = 0; t < tensors; ++t) {
      int index = int(2 + list * tensors + t);
      Value v = n.input(index);
      auto type = n.inputType(index);
      auto x = list ? n.inputType(int(2 + t)) : type;
      if (!isa<FloatType>(type.getElementType()) || type != x)
        return n.error() << "expected " << names[list] << (t + 1) << " (input "
                         << index << ") of " << names[0] << (t + 1)
                         << "'s type " << x
                         << (isa<FloatType>(x.getElementType())
                                 ? ""
                                 : " (a floating-point tensor)")
                         << ", got " << type;
      in.groups.back().push_back(v);
    }
  }
  return in;
}

/// `s` (a scalar) broadcast to `like`'s shape in its element type.
Value spread(NodeImporter &n, Value s, Value like) {
  auto type = cast<RankedTensorType>(like.getType());
  return n.broadcastTo(n.castTo(s, type.getElementType()), type.getShape());
}

/// `c` * `x` for a constant `c` (`x` itself when `c` is 1).
Value times(NodeImporter &n, double c, Value x) {
  if (c == 1.0)
    return x;
  return n.fold<MulOp>(n.splat(cast<RankedTensorType>(x.getType()), c), x);
}

/// G + norm_coefficient * X: the gradient with its L2 regularization.
Value regularized(NodeImporter &n, Value x, Value g, double norm) {
  return norm == 0.0 ? g : n.fold<AddOp>(times(n, norm, x), g);
}

/// sqrt(`h`) + `epsilon`: the adaptive methods' denominator.
Value rootPlus(NodeImporter &n, Value h, double epsilon) {
  return n.fold<AddOp>(n.fold<SqrtOp>(h),
                       n.splat(cast<RankedTensorType>(h.getType()), epsilon));
}

/// Whether the step count is past the first step (T > 0), as a scalar i1.
Value pastFirstStep(NodeImporter &n, Value step) {
  return n.fold<GtOp>(step, n.scalar(n.builder().getI64Type(), 0));
}

/// Sets outputs list by list: `updated`[k][t] is output k * tensors + t.
void setLists(NodeImporter &n, ArrayRef<SmallVector<Value>> updated) {
  int o = 0;
  for (const auto &list : updated)
    for (Value v : list)
      n.setOutput(o++, v);
}

/// Adagrad: r = R / (1 + T * decay_factor), G' = G + norm_coefficient * X,
/// H_new = H + G'^2, X_new = X - r * G' / (sqrt(H_new) + epsilon).
LogicalResult importAdagrad(NodeImporter &n) {
  auto in = readStep(n, {"X", "G", "H"});
  if (failed(in))
    return failure();
  double decay = n.attrFloat("decay_factor", 0.0f);
  double epsilon = n.attrFloat("epsilon", 1e-6f);
  double norm = n.attrFloat("norm_coefficient", 0.0f);
  Type rt = cast<RankedTensorType>(in->rate.getType()).getElementType();
  Value decayed =
      n.fold<AddOp>(n.scalar(rt, 1.0), times(n, decay, n.castTo(in->step, rt)));
  Value rate = n.fold<DivOp>(in->rate, decayed);
  SmallVector<SmallVector<Value>> updated(2);
  for (auto [x, g, h] :
       llvm::zip(in->groups[0], in->groups[1], in->groups[2])) {
    Value gr = regularized(n, x, g, norm);
    Value hNew = n.fold<AddOp>(h, n.fold<MulOp>(gr, gr));
    Value denominator = rootPlus(n, hNew, epsilon);
    Value step =
        n.fold<DivOp>(n.fold<MulOp>(spread(n, rate, x), gr), denominator);
    updated[0].push_back(n.fold<SubOp>(x, step));
    updated[1].push_back(hNew);
  }
  setLists(n, updated);
  return success();
}

/// Momentum: G' = G + norm_coefficient * X, V_new = alpha * V + b * G'
/// (b = beta, or 1 at the first step, T = 0), X_new = X - R * V_new
/// (standard) or X - R * (G' + alpha * V_new) (nesterov).
LogicalResult importMomentum(NodeImporter &n) {
  auto in = readStep(n, {"X", "G", "V"});
  if (failed(in))
    return failure();
  if (failed(n.requireAttrs({"alpha", "beta", "mode", "norm_coefficient"})))
    return failure();
  const double alpha = n.attrFloat("alpha", 0.0f),
               beta = n.attrFloat("beta", 0.0f),
               norm = n.attrFloat("norm_coefficient", 0.0f);
  std::string mode = n.attrString("mode", "");
  if (mode != "standard" && mode != "nesterov")
    return n.error() << "expected mode 'standard' or 'nesterov', got '" << mode
                     << "'";
  Type rt = cast<RankedTensorType>(in->rate.getType()).getElementType();
  Value gradientScale = n.fold<SelectOp>(pastFirstStep(n, in->step),
                                         n.scalar(rt, beta), n.scalar(rt, 1.0));
  SmallVector<SmallVector<Value>> updated(2);
  for (auto [x, g, v] :
       llvm::zip(in->groups[0], in->groups[1], in->groups[2])) {
    Value gr = regularized(n, x, g, norm);
    Value vNew = n.fold<AddOp>(times(n, alpha, v),
                               n.fold<MulOp>(spread(n, gradientScale, x), gr));
    Value direction =
        mode == "standard" ? vNew : n.fold<AddOp>(gr, times(n, alpha, vNew));
    updated[0].push_back(
        n.fold<SubOp>(x, n.fold<MulOp>(spread(n, in->rate, x), direction)));
    updated[1].push_back(vNew);
  }
  setLists(n, updated);
  return success();
}

/// Adam: G' = G + norm_coefficient * X, V_new = alpha * V + (1 - alpha) G',
/// H_new = beta * H + (1 - beta) G'^2, r = R sqrt(1 - beta^T) /
/// (1 - alpha^T) (R at T = 0), X_new = (1 - norm_coefficient_post) *
/// (X - r V_new / (sqrt(H_new) + epsilon)).
LogicalResult importAdam(NodeImporter &n) {
  auto in = readStep(n, {"X", "G", "V", "H"});
  if (failed(in))
    return failure();
  double alpha = n.attrFloat("alpha", 0.9f);
  double beta = n.attrFloat("beta", 0.999f);
  double epsilon = n.attrFloat("epsilon", 1e-6f);
  double norm = n.attrFloat("norm_coefficient", 0.0f);
  double post = n.attrFloat("norm_coefficient_post", 0.0f);
  Type rt = cast<RankedTensorType>(in->rate.getType()).getElementType();
  // The correction at max(T, 1), so that the branch not taken at T = 0
  // (0 / 0) is finite: a select's gradient multiplies it by 0.
  Type i64 = n.builder().getI64Type();
  Value t = n.castTo(n.fold<MaxOp>(in->step, n.scalar(i64, 1)), rt);
  auto oneMinusPower = [&](double base) {
    return n.fold<SubOp>(n.scalar(rt, 1.0),
                         n.fold<PowOp>(n.scalar(rt, base), t));
  };
  Value corrected = n.fold<DivOp>(
      n.fold<MulOp>(in->rate, n.fold<SqrtOp>(oneMinusPower(beta))),
      oneMinusPower(alpha));
  Value rate =
      n.fold<SelectOp>(pastFirstStep(n, in->step), corrected, in->rate);
  SmallVector<SmallVector<Value>> updated(3);
  for (auto [x, g, v, h] :
       llvm::zip(in->groups[0], in->groups[1], in->groups[2], in->groups[3])) {
    Value gr = regularized(n, x, g, norm);
    Value vNew = n.fold<AddOp>(times(n, alpha, v), times(n, 1.0 - alpha, gr));
    Value hNew = n.fold<AddOp>(times(n, beta, h),
                               times(n, 1.0 - beta, n.fold<MulOp>(gr, gr)));
    Value denominator = rootPlus(n, hNew, epsilon);
    Value xNew = n.fold<SubOp>(
        x, n.fold<MulOp>(spread(n, rate, x), n.fold<DivOp>(vNew, denominator)));
    updated[0].push_back(times(n, 1.0 - post, xNew));
    updated[1].push_back(vNew);
    updated[2].push_back(hNew);
  }
  setLists(n, updated);
  return success();
}

} // namespace

void appendOptimizerOps(std::vector<OpEntry> &ops) {
  ops.insert(ops.end(),
             {
                 {"Adagrad", 1, importAdagrad, kTrainingDomain.data()},
                 {"Adam", 1, importAdam, kTrainingDomain.data()},
                 {"Momentum", 1, importMomentum, kTrainingDomain.data()},
             });
}

} // namespace dtcc::onnx_frontend
