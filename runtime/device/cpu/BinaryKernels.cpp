//===- BinaryKernels.cpp - elementwise kernels of two or three operands ---===//
//
// Arithmetic, logical and shift kernels, comparisons (-> i1) and select.
// Integer arithmetic wraps; integer division by zero is a run-time error.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/CpuKernelUtils.h"
#include "runtime/device/cpu/ElementwiseLoops.h"

namespace dtcc::runtime {
namespace {

using namespace cpu;

struct AddOp {
  template <typename T> T operator()(T a, T b) const { return wrapAdd(a, b); }
};
struct SubOp {
  template <typename T> T operator()(T a, T b) const { return wrapSub(a, b); }
};
struct MulOp {
  template <typename T> T operator()(T a, T b) const { return wrapMul(a, b); }
};
/// Integers truncate toward zero; the caller has excluded b == 0, and
/// INT_MIN / -1 wraps.
struct DivOp {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_signed_v<T> && kIsInt<T>)
      return b == T(-1) ? wrapNeg(a) : T(a / b);
    else
      return T(a / b);
  }
};
/// Truncated remainder: the sign of the dividend (C fmod, C++ %).
struct RemOp {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>)
      return std::fmod(a, b);
    else if constexpr (std::is_signed_v<T>)
      return b == T(-1) ? T(0) : T(a % b);
    else
      return T(a % b);
  }
};
/// Floats: std::pow. Integers: exponentiation by squaring (wrapping); a
/// negative exponent gives 0, except for the bases 1 (-> 1) and -1 (-> +-1).
struct PowOp {
  template <typename T> T operator()(T base, T exp) const {
    if constexpr (std::is_floating_point_v<T>) {
      return std::pow(base, exp);
    } else {
      if constexpr (std::is_signed_v<T>) {
        if (exp < 0) {
          if (base == T(1))
            return T(1);
          if (base == T(-1))
            return (exp & 1) ? T(-1) : T(1);
          return T(0);
        }
      }
      T result = T(1);
      auto e = std::make_unsigned_t<T>(exp);
      while (e) {
        if (e & 1)
          result = wrapMul(result, base);
        e >>= 1;
        if (e)
          base = wrapMul(base, base);
      }
      return result;
    }
  }
};
/// NaN when either operand is NaN.
struct MaxOp {
  template <typename T> T operator()(T a, T b) const {
    return (a > b || isNan(a)) ? a : b;
  }
};
struct MinOp {
  template <typename T> T operator()(T a, T b) const {
    return (a < b || isNan(a)) ? a : b;
  }
};
struct AndOp {
  template <typename T> T operator()(T a, T b) const { return T(a & b); }
};
struct OrOp {
  template <typename T> T operator()(T a, T b) const { return T(a | b); }
};
struct XorOp {
  template <typename T> T operator()(T a, T b) const { return T(a ^ b); }
};
/// Shift counts are read as unsigned: a negative or too large count shifts
/// everything out (0, or -1 for a negative signed value shifted right).
struct ShiftLeftOp {
  template <typename T> T operator()(T a, T b) const {
    auto count = std::make_unsigned_t<T>(b);
    if (count >= sizeof(T) * 8)
      return T(0);
    return T(WrapT<T>(a) << count);
  }
};
struct ShiftRightOp {
  template <typename T> T operator()(T a, T b) const {
    auto count = std::make_unsigned_t<T>(b);
    if (count >= sizeof(T) * 8) {
      if constexpr (std::is_signed_v<T>)
        return a < 0 ? T(-1) : T(0);
      else
        return T(0);
    }
    return T(a >> count); // arithmetic for signed, logical for unsigned
  }
};

#define DTCC_COMPARE(NAME, EXPR)                                               \
  struct NAME {                                                                \
    template <typename T> bool operator()(T a, T b) const { return EXPR; }     \
  };
DTCC_COMPARE(EqOp, a == b)
DTCC_COMPARE(NeOp, a != b)
DTCC_COMPARE(LtOp, a < b)
DTCC_COMPARE(LeOp, a <= b)
DTCC_COMPARE(GtOp, a > b)
DTCC_COMPARE(GeOp, a >= b)
#undef DTCC_COMPARE

/// Wraps an integer division so that a zero divisor is reported before
/// anything is written.
template <typename S>
KernelFn withZeroCheck(const KernelContext &ctx, const StridedLayout<3> &layout,
                       KernelFn loop) {
  const S *divisor = static_cast<const S *>(ctx.inputs[1].data);
  std::string prefix = errorPrefix(ctx);
  return [layout, divisor, prefix, loop]() -> Status {
    if (anyZero<S, 3>(layout, 2, divisor))
      return invalidArgument(prefix, "integer division by zero");
    return loop();
  };
}

/// A kernel whose operands and result have one dtype of `Set`.
template <unsigned Set, bool ZeroCheck = false, typename Op>
StatusOr<KernelFn> buildBinary(const KernelContext &ctx, Op op) {
  DTCC_ASSIGN_OR_RETURN(StridedLayout<3> layout, elementwiseLayout<3>(ctx));
  const TensorView &a = ctx.inputs[0], &b = ctx.inputs[1],
                   &out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, b, a.dtype, "input 1"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, a.dtype, "output 0"));
  KernelFn fn;
  if (!visitDType<Set>(a.dtype, [&](auto tag) {
        using S = typename decltype(tag)::type;
        fn = makeBinaryLoop<S, S, S>(layout, a, b, out, op);
        if constexpr (ZeroCheck && kIsInt<S>)
          fn = withZeroCheck<S>(ctx, layout, std::move(fn));
      }))
    return unsupportedDType(ctx, a.dtype, Set);
  return fn;
}

/// A comparison: operands of one dtype, i1 result.
template <typename Op>
StatusOr<KernelFn> buildCompare(const KernelContext &ctx, Op op) {
  DTCC_ASSIGN_OR_RETURN(StridedLayout<3> layout, elementwiseLayout<3>(ctx));
  const TensorView &a = ctx.inputs[0], &b = ctx.inputs[1],
                   &out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, b, a.dtype, "input 1"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, DType::kBool, "output 0"));
  KernelFn fn;
  if (!visitDType<kSetAll>(a.dtype, [&](auto tag) {
        using S = typename decltype(tag)::type;
        fn = makeBinaryLoop<bool, S, S>(layout, a, b, out, op);
      }))
    return unsupportedDType(ctx, a.dtype, kSetAll);
  return fn;
}

template <typename E>
KernelFn makeSelectLoop(const StridedLayout<4> &layout, const bool *cond,
                        const E *onTrue, const E *onFalse, E *out) {
  return [=]() -> Status {
    forEachRunParallel(layout, [&](const int64_t *off, int64_t n,
                                   const int64_t *st) {
      E *o = out + off[0];
      const bool *c = cond + off[1];
      const E *t = onTrue + off[2];
      const E *f = onFalse + off[3];
      if (st[1] == 1 && st[2] == 1 && st[3] == 1) {
        for (int64_t j = 0; j < n; ++j)
          o[j] = c[j] ? t[j] : f[j];
      } else {
        for (int64_t j = 0; j < n; ++j)
          o[j] = c[j * st[1]] ? t[j * st[2]] : f[j * st[3]];
      }
    });
    return Status::ok();
  };
}

StatusOr<KernelFn> buildSelect(const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(StridedLayout<4> layout, elementwiseLayout<4>(ctx));
  const TensorView &c = ctx.inputs[0], &t = ctx.inputs[1], &f = ctx.inputs[2],
                   &out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, c, DType::kBool, "input 0"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, f, t.dtype, "input 2"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, t.dtype, "output 0"));
  KernelFn fn;
  if (!visitElementSize(dtypeSize(t.dtype), [&](auto tag) {
        using E = typename decltype(tag)::type;
        fn = makeSelectLoop<E>(layout, c.as<const bool>(), t.as<const E>(),
                               f.as<const E>(), out.as<E>());
      }))
    return unsupportedDType(ctx, t.dtype, kSetAll);
  return fn;
}

template <unsigned Set, typename Op, bool ZeroCheck = false>
void addBinary(KernelRegistry &registry, const char *name) {
  registry.add(name, [](const KernelContext &ctx) {
    return buildBinary<Set, ZeroCheck>(ctx, Op());
  });
}

template <typename Op>
void addCompare(KernelRegistry &registry, const char *name) {
  registry.add(
      name, [](const KernelContext &ctx) { return buildCompare(ctx, Op()); });
}

} // namespace

void registerCpuBinaryKernels(KernelRegistry &registry) {
  addBinary<kSetNumeric, AddOp>(registry, "add");
  addBinary<kSetNumeric, SubOp>(registry, "sub");
  addBinary<kSetNumeric, MulOp>(registry, "mul");
  addBinary<kSetNumeric, DivOp, true>(registry, "div");
  addBinary<kSetNumeric, RemOp, true>(registry, "rem");
  addBinary<kSetNumeric, PowOp>(registry, "pow");
  addBinary<kSetNumeric, MaxOp>(registry, "max");
  addBinary<kSetNumeric, MinOp>(registry, "min");
  addBinary<kSetInts | kSetBool, AndOp>(registry, "and");
  addBinary<kSetInts | kSetBool, OrOp>(registry, "or");
  addBinary<kSetInts | kSetBool, XorOp>(registry, "xor");
  addBinary<kSetInts, ShiftLeftOp>(registry, "shift_left");
  addBinary<kSetInts, ShiftRightOp>(registry, "shift_right");
  addCompare<EqOp>(registry, "eq");
  addCompare<NeOp>(registry, "ne");
  addCompare<LtOp>(registry, "lt");
  addCompare<LeOp>(registry, "le");
  addCompare<GtOp>(registry, "gt");
  addCompare<GeOp>(registry, "ge");
  registry.add("select", buildSelect);
}

} // namespace dtcc::runtime
