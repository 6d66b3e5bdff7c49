//===- UnaryKernels.cpp - elementwise kernels of one operand --------------===//
//
// neg, abs, sign, relu (numeric), the float math functions, gelu, not,
// is_nan and is_inf. f16/bf16 compute in float.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/CpuKernelUtils.h"
#include "runtime/device/cpu/ElementwiseLoops.h"
#include "runtime/device/cpu/VectorMath.h"

namespace dtcc::runtime {
namespace {

using namespace cpu;

// Each op is applied to compute types: float/double, and for the numeric
// ops the integers too. Ops with `batch` compute whole buffers through
// VectorMath (libmvec); the others are plain expressions that vectorize.
#define DTCC_FLOAT_UNARY(NAME, EXPR)                                           \
  struct NAME {                                                                \
    template <typename T> T operator()(T x) const { return EXPR; }             \
  };
DTCC_FLOAT_UNARY(SqrtOp, std::sqrt(x))
DTCC_FLOAT_UNARY(RsqrtOp, T(1) / std::sqrt(x))
DTCC_FLOAT_UNARY(ReciprocalOp, T(1) / x)
DTCC_FLOAT_UNARY(FloorOp, std::floor(x))
DTCC_FLOAT_UNARY(CeilOp, std::ceil(x))
DTCC_FLOAT_UNARY(RoundOp, std::nearbyint(x)) // ties to even
#undef DTCC_FLOAT_UNARY

/// y = fn(x) with a VectorMath function.
template <MathFn F> struct MathOp {
  static constexpr bool kBatch = true;
  template <typename C>
  DTCC_ALWAYS_INLINE void batch(const C *x, C *y, int64_t n) const {
    if (x != y)
      std::copy(x, x + n, y);
    vectorMath(F, y, n);
  }
};
using ExpOp = MathOp<MathFn::kExp>;
using LogOp = MathOp<MathFn::kLog>;
using TanhOp = MathOp<MathFn::kTanh>;
using ErfOp = MathOp<MathFn::kErf>;
using SinOp = MathOp<MathFn::kSin>;
using CosOp = MathOp<MathFn::kCos>;
using TanOp = MathOp<MathFn::kTan>;
using AsinOp = MathOp<MathFn::kAsin>;
using AcosOp = MathOp<MathFn::kAcos>;
using AtanOp = MathOp<MathFn::kAtan>;
using SinhOp = MathOp<MathFn::kSinh>;
using CoshOp = MathOp<MathFn::kCosh>;
using AsinhOp = MathOp<MathFn::kAsinh>;
using AcoshOp = MathOp<MathFn::kAcosh>;
using AtanhOp = MathOp<MathFn::kAtanh>;

/// 1 / (1 + exp(-x)).
struct SigmoidOp {
  static constexpr bool kBatch = true;
  template <typename C>
  DTCC_ALWAYS_INLINE void batch(const C *x, C *y, int64_t n) const {
    C t[kMathChunk];
    for (int64_t i = 0; i < n; ++i)
      t[i] = -x[i];
    vectorMath(MathFn::kExp, t, n);
    DTCC_INDEPENDENT_ITERATIONS
    for (int64_t i = 0; i < n; ++i)
      y[i] = C(1) / (C(1) + t[i]);
  }
};
/// x / (1 + exp(-x)).
struct SiluOp {
  static constexpr bool kBatch = true;
  template <typename C>
  DTCC_ALWAYS_INLINE void batch(const C *x, C *y, int64_t n) const {
    C t[kMathChunk];
    for (int64_t i = 0; i < n; ++i)
      t[i] = -x[i];
    vectorMath(MathFn::kExp, t, n);
    DTCC_INDEPENDENT_ITERATIONS
    for (int64_t i = 0; i < n; ++i)
      y[i] = x[i] / (C(1) + t[i]);
  }
};
/// 0.5 x (1 + erf(x / sqrt(2))).
struct GeluErfOp {
  static constexpr bool kBatch = true;
  template <typename C>
  DTCC_ALWAYS_INLINE void batch(const C *x, C *y, int64_t n) const {
    C t[kMathChunk];
    for (int64_t i = 0; i < n; ++i)
      t[i] = x[i] * C(0.70710678118654752440);
    vectorMath(MathFn::kErf, t, n);
    DTCC_INDEPENDENT_ITERATIONS
    for (int64_t i = 0; i < n; ++i)
      y[i] = C(0.5) * x[i] * (C(1) + t[i]);
  }
};
/// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
struct GeluTanhOp {
  static constexpr bool kBatch = true;
  template <typename C>
  DTCC_ALWAYS_INLINE void batch(const C *x, C *y, int64_t n) const {
    C t[kMathChunk];
    for (int64_t i = 0; i < n; ++i)
      t[i] =
          C(0.79788456080286535588) * (x[i] + C(0.044715) * x[i] * x[i] * x[i]);
    vectorMath(MathFn::kTanh, t, n);
    DTCC_INDEPENDENT_ITERATIONS
    for (int64_t i = 0; i < n; ++i)
      y[i] = C(0.5) * x[i] * (C(1) + t[i]);
  }
};

template <typename Op, typename = void> struct HasBatch : std::false_type {};
template <typename Op>
struct HasBatch<Op, std::void_t<decltype(Op::kBatch)>> : std::true_type {};

struct NegOp {
  template <typename T> T operator()(T x) const { return wrapNeg(x); }
};
struct AbsOp {
  template <typename T> T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>)
      return std::fabs(x);
    else if constexpr (std::is_signed_v<T>)
      return x < 0 ? wrapNeg(x) : x;
    else
      return x;
  }
};
/// -1, 0 or 1; NaN stays NaN.
struct SignOp {
  template <typename T> T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>)
      return x != x ? x : T((x > T(0)) - (x < T(0)));
    else if constexpr (std::is_signed_v<T>)
      return T((x > 0) - (x < 0));
    else
      return T(x > 0);
  }
};
/// max(x, 0); NaN stays NaN.
struct ReluOp {
  template <typename T> T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>)
      return x;
    else
      return x < T(0) ? T(0) : x;
  }
};
struct NotOp {
  bool operator()(bool x) const { return !x; }
};
struct IsNanOp {
  template <typename T> bool operator()(T x) const { return x != x; }
};
struct IsInfOp {
  bool positive, negative;
  template <typename T> bool operator()(T x) const {
    return (positive && x == std::numeric_limits<T>::infinity()) ||
           (negative && x == -std::numeric_limits<T>::infinity());
  }
};

/// A kernel whose output has the input's dtype, for the dtypes of `Set`.
template <unsigned Set, typename Op>
StatusOr<KernelFn> buildSameType(const KernelContext &ctx, Op op) {
  DTCC_ASSIGN_OR_RETURN(StridedLayout<2> layout, elementwiseLayout<2>(ctx));
  const TensorView &in = ctx.inputs[0], &out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, in.dtype, "output 0"));
  KernelFn fn;
  if (!visitDType<Set>(in.dtype, [&](auto tag) {
        using S = typename decltype(tag)::type;
        if constexpr (HasBatch<Op>::value)
          fn = makeBatchUnaryLoop<S, S>(layout, in, out, op);
        else
          fn = makeUnaryLoop<S, S>(layout, in, out, op);
      }))
    return unsupportedDType(ctx, in.dtype, Set);
  return fn;
}

/// A float -> i1 predicate kernel.
template <typename Op>
StatusOr<KernelFn> buildPredicate(const KernelContext &ctx, Op op) {
  DTCC_ASSIGN_OR_RETURN(StridedLayout<2> layout, elementwiseLayout<2>(ctx));
  const TensorView &in = ctx.inputs[0], &out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, DType::kBool, "output 0"));
  KernelFn fn;
  if (!visitDType<kSetFloats>(in.dtype, [&](auto tag) {
        using S = typename decltype(tag)::type;
        fn = makeUnaryLoop<bool, S>(layout, in, out, op);
      }))
    return unsupportedDType(ctx, in.dtype, kSetFloats);
  return fn;
}

template <unsigned Set, typename Op>
void addSameType(KernelRegistry &registry, const char *name) {
  registry.add(name, [](const KernelContext &ctx) {
    return buildSameType<Set>(ctx, Op());
  });
}

StatusOr<KernelFn> buildGelu(const KernelContext &ctx) {
  std::string approximate = ctx.attrs.getString("approximate", "none");
  if (approximate == "none")
    return buildSameType<kSetFloats>(ctx, GeluErfOp());
  if (approximate == "tanh")
    return buildSameType<kSetFloats>(ctx, GeluTanhOp());
  return ctx.error("expected approximate \"none\" or \"tanh\", got \"",
                   approximate, "\"");
}

} // namespace

void registerCpuUnaryKernels(KernelRegistry &registry) {
  addSameType<kSetNumeric, NegOp>(registry, "neg");
  addSameType<kSetNumeric, AbsOp>(registry, "abs");
  addSameType<kSetNumeric, SignOp>(registry, "sign");
  addSameType<kSetNumeric, ReluOp>(registry, "relu");
  addSameType<kSetFloats, ExpOp>(registry, "exp");
  addSameType<kSetFloats, LogOp>(registry, "log");
  addSameType<kSetFloats, SqrtOp>(registry, "sqrt");
  addSameType<kSetFloats, RsqrtOp>(registry, "rsqrt");
  addSameType<kSetFloats, ReciprocalOp>(registry, "reciprocal");
  addSameType<kSetFloats, TanhOp>(registry, "tanh");
  addSameType<kSetFloats, SigmoidOp>(registry, "sigmoid");
  addSameType<kSetFloats, SiluOp>(registry, "silu");
  addSameType<kSetFloats, ErfOp>(registry, "erf");
  addSameType<kSetFloats, SinOp>(registry, "sin");
  addSameType<kSetFloats, CosOp>(registry, "cos");
  addSameType<kSetFloats, TanOp>(registry, "tan");
  addSameType<kSetFloats, AsinOp>(registry, "asin");
  addSameType<kSetFloats, AcosOp>(registry, "acos");
  addSameType<kSetFloats, AtanOp>(registry, "atan");
  addSameType<kSetFloats, SinhOp>(registry, "sinh");
  addSameType<kSetFloats, CoshOp>(registry, "cosh");
  addSameType<kSetFloats, AsinhOp>(registry, "asinh");
  addSameType<kSetFloats, AcoshOp>(registry, "acosh");
  addSameType<kSetFloats, AtanhOp>(registry, "atanh");
  addSameType<kSetFloats, FloorOp>(registry, "floor");
  addSameType<kSetFloats, CeilOp>(registry, "ceil");
  addSameType<kSetFloats, RoundOp>(registry, "round");
  addSameType<kSetBool, NotOp>(registry, "not");
  registry.add("gelu", buildGelu);
  registry.add("is_nan", [](const KernelContext &ctx) {
    return buildPredicate(ctx, IsNanOp());
  });
  registry.add("is_inf", [](const KernelContext &ctx) {
    return buildPredicate(ctx,
                          IsInfOp{ctx.attrs.getBool("detect_positive", true),
                                  ctx.attrs.getBool("detect_negative", true)});
  });
}

} // namespace dtcc::runtime
