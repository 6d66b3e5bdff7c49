//===- ElementwiseKernels.cu - elementwise, movement, indexing, optimizers ===//
//
// Unary/binary/compare/predicate/select/cast over strided layouts (stride 0
// is a broadcast), strided copies (copy, transpose, slice, reverse,
// broadcast_in_dim, concat, pad), iota, fill, gather / gather_elements /
// scatter_add (sorted, deterministic), dropout, random, lr_schedule and the
// AdamW / SGD updates. One kernel per storage type with the operation
// chosen by a switch, uniform over a launch, which keeps nvcc's
// instantiations (and the build) small; the 16-byte vector kernels switch
// once per launch into a loop of their own for the operations training
// runs most (unaryVectorKernel), the rest once per element.
//
//===----------------------------------------------------------------------===//

#include "runtime/base/Random.h"
#include "runtime/device/cuda/KernelCommon.cuh"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace dtcc::runtime::cuda {

DeviceLimits &launchLimits() {
  static DeviceLimits limits;
  return limits;
}
void setLaunchSmCount(int smCount) { launchLimits().smCount = smCount; }

bool isCudaArithmeticType(DType d) {
  return d == DType::kI32 || d == DType::kI64 || isCudaFloatType(d) ||
         d == DType::kF64;
}
bool isCudaFloatType(DType d) {
  return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16;
}

namespace {

constexpr double kSqrtHalf = 0.70710678118654752440;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

//===----------------------------------------------------------------------===//
// Unary and binary
//===----------------------------------------------------------------------===//

template <typename C> __device__ C applyUnary(UnaryOp op, C x) {
  if constexpr (std::is_same_v<C, bool>) {
    return !x;
  } else if constexpr (std::is_integral_v<C>) {
    switch (op) {
    case UnaryOp::kNeg: return C(0) - x;
    case UnaryOp::kAbs: return x < 0 ? C(0) - x : x;
    case UnaryOp::kSign: return C((x > 0) - (x < 0));
    case UnaryOp::kRelu: return x < 0 ? C(0) : x;
    default: return x;
    }
  } else {
    switch (op) {
    case UnaryOp::kNeg: return -x;
    case UnaryOp::kAbs: return fabs(x);
    case UnaryOp::kSign: return x != x ? x : C((x > C(0)) - (x < C(0)));
    case UnaryOp::kRelu: return x < C(0) ? C(0) : x;
    case UnaryOp::kExp: return exp(x);
    case UnaryOp::kLog: return log(x);
    case UnaryOp::kSqrt: return sqrt(x);
    case UnaryOp::kRsqrt: return C(1) / sqrt(x);
    case UnaryOp::kReciprocal: return C(1) / x;
    case UnaryOp::kTanh: return tanh(x);
    case UnaryOp::kSigmoid: return C(1) / (C(1) + exp(-x));
    case UnaryOp::kSilu: return x / (C(1) + exp(-x));
    case UnaryOp::kErf: return erf(x);
    case UnaryOp::kSin: return sin(x);
    case UnaryOp::kCos: return cos(x);
    case UnaryOp::kTan: return tan(x);
    case UnaryOp::kAsin: return asin(x);
    case UnaryOp::kAcos: return acos(x);
    case UnaryOp::kAtan: return atan(x);
    case UnaryOp::kSinh: return sinh(x);
    case UnaryOp::kCosh: return cosh(x);
    case UnaryOp::kAsinh: return asinh(x);
    case UnaryOp::kAcosh: return acosh(x);
    case UnaryOp::kAtanh: return atanh(x);
    case UnaryOp::kFloor: return floor(x);
    case UnaryOp::kCeil: return ceil(x);
    case UnaryOp::kRound: return nearbyint(x);
    case UnaryOp::kGeluErf:
      return C(0.5) * x * (C(1) + erf(x * C(kSqrtHalf)));
    case UnaryOp::kGeluTanh:
      return C(0.5) * x *
             (C(1) + tanh(C(kSqrt2OverPi) * (x + C(0.044715) * x * x * x)));
    default: return x;
    }
  }
}

template <typename C> __device__ C applyBinary(BinaryOp op, C a, C b) {
  if constexpr (std::is_same_v<C, bool>) {
    switch (op) {
    case BinaryOp::kAnd: return a && b;
    case BinaryOp::kOr: return a || b;
    case BinaryOp::kXor: return a != b;
    default: return a;
    }
  } else if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    // Wrapping arithmetic in an unsigned type no narrower than unsigned
    // int (8- and 16-bit operands would promote to a signed int, whose
    // overflow is undefined), truncated to C.
    using W = std::conditional_t<(sizeof(C) < sizeof(unsigned)), unsigned, U>;
    switch (op) {
    case BinaryOp::kAdd: return C(W(U(a)) + W(U(b)));
    case BinaryOp::kSub: return C(W(U(a)) - W(U(b)));
    case BinaryOp::kMul: return C(W(U(a)) * W(U(b)));
    // A zero divisor gives 0 here; binaryKernel records the error, which
    // synchronize reports as the CPU backend does.
    case BinaryOp::kDiv:
      if (b == 0)
        return C(0);
      if constexpr (std::is_signed_v<C>)
        if (b == C(-1))
          return C(W(0) - W(U(a))); // INT_MIN / -1 wraps
      return C(a / b);
    case BinaryOp::kPow: {
      // Exponentiation by squaring, wrapping; a negative exponent gives 0
      // but for the bases 1 and -1 (the CPU backend's rule).
      if constexpr (std::is_signed_v<C>) {
        if (b < 0) {
          if (a == C(1))
            return C(1);
          if (a == C(-1))
            return (b & 1) ? C(-1) : C(1);
          return C(0);
        }
      }
      W result = 1, base = W(U(a));
      U e = U(b);
      while (e) {
        if (e & 1)
          result *= base;
        e >>= 1;
        if (e)
          base *= base;
      }
      return C(result);
    }
    case BinaryOp::kMax: return a > b ? a : b;
    case BinaryOp::kMin: return a < b ? a : b;
    case BinaryOp::kAnd: return a & b;
    case BinaryOp::kOr: return a | b;
    case BinaryOp::kXor: return a ^ b;
    case BinaryOp::kRem:
      return b == 0 || (std::is_signed_v<C> && b == C(-1)) ? C(0) : C(a % b);
    case BinaryOp::kShiftLeft: {
      const U count = U(b);
      return count >= U(sizeof(C) * 8) ? C(0) : C(U(a) << count);
    }
    case BinaryOp::kShiftRight: {
      const U count = U(b);
      if (count >= U(sizeof(C) * 8))
        return std::is_signed_v<C> && a < 0 ? C(-1) : C(0);
      return C(a >> count); // arithmetic for signed, as the CPU backend
    }
    default: return a;
    }
  } else {
    switch (op) {
    case BinaryOp::kAdd: return a + b;
    case BinaryOp::kSub: return a - b;
    case BinaryOp::kMul: return a * b;
    case BinaryOp::kDiv: return a / b;
    case BinaryOp::kPow: return pow(a, b);
    case BinaryOp::kRem: return fmod(a, b);
    case BinaryOp::kMax: return (a > b || a != a) ? a : b;
    case BinaryOp::kMin: return (a < b || a != a) ? a : b;
    case BinaryOp::kGeluErfGrad: {
      const C cdf = C(0.5) * (C(1) + erf(a * C(kSqrtHalf)));
      const C pdf = C(kInvSqrt2Pi) * exp(C(-0.5) * a * a);
      return b * (cdf + a * pdf);
    }
    case BinaryOp::kGeluTanhGrad: {
      const C k = C(kSqrt2OverPi), c = C(0.044715);
      const C t = tanh(k * (a + c * a * a * a));
      const C du = k * (C(1) + C(3) * c * a * a);
      return b * (C(0.5) * (C(1) + t) + C(0.5) * a * (C(1) - t * t) * du);
    }
    case BinaryOp::kSiluGrad: {
      const C s = C(1) / (C(1) + exp(-a));
      return b * s * (C(1) + a * (C(1) - s));
    }
    default: return a;
    }
  }
}

//===----------------------------------------------------------------------===//
// 16-byte accesses. Where every operand's innermost dimension is a
// unit-stride run (or a stride-0 broadcast of one element) whose elements
// a thread can take V at a time, aligned, a thread moves V = 16 / sizeof
// elements with one load per operand and one store, and splits its index
// once per V elements: 2-byte elements one at a time reach a fraction of
// the memory's bandwidth. vectorPlan decides on the host, per launch.
//===----------------------------------------------------------------------===//

template <typename S, int V>
__device__ __forceinline__ Pack<S, V> loadPack(const S *p, bool broadcast) {
  if (broadcast) {
    Pack<S, V> r;
    const S x = *p;
#pragma unroll
    for (int j = 0; j < V; ++j)
      r.v[j] = x;
    return r;
  }
  return *reinterpret_cast<const Pack<S, V> *>(p);
}

/// The vector kernels' loops, for one operation known at compile time
/// (kAnyOp: the launch's, switched on per element). A switch inside the
/// loop is an indirect branch per element around code for every operation
/// (22,000 instructions for bf16's unary kernel, 30 BRX): the bf16 GELU of
/// a 350M GPT's [8192, 4096] took about 100 us a call, 56 with a loop of
/// its own (--profile; 2.4 TB/s, 33 instructions an element). The
/// activations, their gradients and the arithmetic of training programs
/// get loops of their own; the rest share the switched one.
constexpr int kAnyOp = -1;

template <int Op, typename S, int V>
__device__ __forceinline__ void unaryVectorLoop(UnaryOp op, const Layout &l,
                                                const VectorPlan &plan, S *out,
                                                const S *in) {
  if constexpr (Op != kAnyOp)
    op = UnaryOp(Op);
  const int64_t vectors = l.numel / V;
  DTCC_GRID_LOOP(t, vectors) {
    int64_t off[2];
    layoutOffsets<2>(l, t * V, off);
    const Pack<S, V> x = loadPack<S, V>(in + off[1], plan.broadcast[1]);
    Pack<S, V> r;
#pragma unroll
    for (int j = 0; j < V; ++j)
      r.v[j] = Elem<S>::store(applyUnary(op, Elem<S>::load(x.v[j])));
    *reinterpret_cast<Pack<S, V> *>(out + off[0]) = r;
  }
  // A linear layout's last numel % V elements.
  DTCC_GRID_LOOP(t, l.numel - vectors * V) {
    const int64_t i = vectors * V + t;
    out[i] = Elem<S>::store(applyUnary(op, Elem<S>::load(in[i])));
  }
}

template <typename S, int V>
__global__ void unaryVectorKernel(UnaryOp op, Layout l, VectorPlan plan, S *out,
                                  const S *in) {
#define DTCC_UNARY_LOOP(OP)                                                    \
  case UnaryOp::OP:                                                            \
    return unaryVectorLoop<int(UnaryOp::OP), S, V>(op, l, plan, out, in);
  switch (op) {
    DTCC_UNARY_LOOP(kNeg)
    DTCC_UNARY_LOOP(kRelu)
    DTCC_UNARY_LOOP(kExp)
    DTCC_UNARY_LOOP(kLog)
    DTCC_UNARY_LOOP(kSqrt)
    DTCC_UNARY_LOOP(kRsqrt)
    DTCC_UNARY_LOOP(kReciprocal)
    DTCC_UNARY_LOOP(kTanh)
    DTCC_UNARY_LOOP(kSigmoid)
    DTCC_UNARY_LOOP(kSilu)
    DTCC_UNARY_LOOP(kGeluErf)
    DTCC_UNARY_LOOP(kGeluTanh)
  default:
    return unaryVectorLoop<kAnyOp, S, V>(op, l, plan, out, in);
  }
#undef DTCC_UNARY_LOOP
}

template <int Op, typename S, int V>
__device__ __forceinline__ void binaryVectorLoop(BinaryOp op, const Layout &l,
                                                 const VectorPlan &plan, S *out,
                                                 const S *a, const S *b) {
  if constexpr (Op != kAnyOp)
    op = BinaryOp(Op);
  const int64_t vectors = l.numel / V;
  DTCC_GRID_LOOP(t, vectors) {
    int64_t off[3];
    layoutOffsets<3>(l, t * V, off);
    const Pack<S, V> x = loadPack<S, V>(a + off[1], plan.broadcast[1]);
    const Pack<S, V> y = loadPack<S, V>(b + off[2], plan.broadcast[2]);
    Pack<S, V> r;
#pragma unroll
    for (int j = 0; j < V; ++j)
      r.v[j] = Elem<S>::store(
          applyBinary(op, Elem<S>::load(x.v[j]), Elem<S>::load(y.v[j])));
    *reinterpret_cast<Pack<S, V> *>(out + off[0]) = r;
  }
  DTCC_GRID_LOOP(t, l.numel - vectors * V) {
    const int64_t i = vectors * V + t;
    out[i] = Elem<S>::store(
        applyBinary(op, Elem<S>::load(a[i]), Elem<S>::load(b[i])));
  }
}

template <typename S, int V>
__global__ void binaryVectorKernel(BinaryOp op, Layout l, VectorPlan plan,
                                   S *out, const S *a, const S *b) {
#define DTCC_BINARY_LOOP(OP)                                                   \
  case BinaryOp::OP:                                                           \
    return binaryVectorLoop<int(BinaryOp::OP), S, V>(op, l, plan, out, a, b);
  switch (op) {
    DTCC_BINARY_LOOP(kAdd)
    DTCC_BINARY_LOOP(kSub)
    DTCC_BINARY_LOOP(kMul)
    DTCC_BINARY_LOOP(kDiv)
    DTCC_BINARY_LOOP(kMax)
    DTCC_BINARY_LOOP(kMin)
    DTCC_BINARY_LOOP(kGeluErfGrad)
    DTCC_BINARY_LOOP(kGeluTanhGrad)
    DTCC_BINARY_LOOP(kSiluGrad)
  default:
    return binaryVectorLoop<kAnyOp, S, V>(op, l, plan, out, a, b);
  }
#undef DTCC_BINARY_LOOP
}

template <typename E, int V>
__global__ void copyVectorKernel(Layout l, VectorPlan plan, E *out,
                                 const E *in) {
  const int64_t vectors = l.numel / V;
  DTCC_GRID_LOOP(t, vectors) {
    int64_t off[2];
    layoutOffsets<2>(l, t * V, off);
    *reinterpret_cast<Pack<E, V> *>(out + off[0]) =
        loadPack<E, V>(in + off[1], plan.broadcast[1]);
  }
  DTCC_GRID_LOOP(t, l.numel - vectors * V) {
    const int64_t i = vectors * V + t;
    out[i] = in[i];
  }
}

/// Whether the vector kernels take S: the float storage types (integer
/// binaries record division errors element by element).
template <typename S>
constexpr bool kVectorFloat =
    std::is_same_v<S, float> || std::is_same_v<S, __half> ||
    std::is_same_v<S, __nv_bfloat16>;

template <typename S>
__global__ void unaryKernel(UnaryOp op, Layout l, S *out, const S *in) {
  DTCC_GRID_LOOP(i, l.numel) {
    int64_t off[2];
    layoutOffsets<2>(l, i, off);
    out[off[0]] = Elem<S>::store(applyUnary(op, Elem<S>::load(in[off[1]])));
  }
}

template <typename S>
__global__ void binaryKernel(BinaryOp op, Layout l, S *out, const S *a,
                             const S *b, DeviceError *error, int32_t site) {
  DTCC_GRID_LOOP(i, l.numel) {
    int64_t off[3];
    layoutOffsets<3>(l, i, off);
    const auto x = Elem<S>::load(a[off[1]]), y = Elem<S>::load(b[off[2]]);
    if constexpr (std::is_integral_v<S> && !std::is_same_v<S, bool>) {
      if ((op == BinaryOp::kDiv || op == BinaryOp::kRem) && y == 0)
        recordError(error, site, kDivisionByZero, int64_t(x), i, 0);
    }
    out[off[0]] = Elem<S>::store(applyBinary(op, x, y));
  }
}

template <typename S>
__global__ void compareKernel(CompareOp op, Layout l, bool *out, const S *a,
                              const S *b) {
  DTCC_GRID_LOOP(i, l.numel) {
    int64_t off[3];
    layoutOffsets<3>(l, i, off);
    const auto x = Elem<S>::load(a[off[1]]), y = Elem<S>::load(b[off[2]]);
    bool r = false;
    switch (op) {
    case CompareOp::kEq: r = x == y; break;
    case CompareOp::kNe: r = x != y; break;
    case CompareOp::kLt: r = x < y; break;
    case CompareOp::kLe: r = x <= y; break;
    case CompareOp::kGt: r = x > y; break;
    case CompareOp::kGe: r = x >= y; break;
    }
    out[off[0]] = r;
  }
}

template <typename S>
__global__ void predicateKernel(PredicateOp op, Layout l, bool *out,
                                const S *in) {
  DTCC_GRID_LOOP(i, l.numel) {
    int64_t off[2];
    layoutOffsets<2>(l, i, off);
    const auto x = Elem<S>::load(in[off[1]]);
    using C = decltype(x);
    const C inf = C(INFINITY);
    bool r = false;
    switch (op) {
    case PredicateOp::kIsNan: r = x != x; break;
    case PredicateOp::kIsInf: r = x == inf || x == -inf; break;
    case PredicateOp::kIsPosInf: r = x == inf; break;
    case PredicateOp::kIsNegInf: r = x == -inf; break;
    case PredicateOp::kNone: break;
    }
    out[off[0]] = r;
  }
}

template <typename E>
__global__ void selectKernel(Layout l, E *out, const bool *c, const E *t,
                             const E *f) {
  DTCC_GRID_LOOP(i, l.numel) {
    int64_t off[4];
    layoutOffsets<4>(l, i, off);
    out[off[0]] = c[off[1]] ? t[off[2]] : f[off[3]];
  }
}

template <typename E>
__global__ void copyKernel(Layout l, E *out, const E *in) {
  DTCC_GRID_LOOP(i, l.numel) {
    int64_t off[2];
    layoutOffsets<2>(l, i, off);
    out[off[0]] = in[off[1]];
  }
}

template <typename E> __global__ void fillKernel(E *out, int64_t n, E value) {
  DTCC_GRID_LOOP(i, n) { out[i] = value; }
}

//===----------------------------------------------------------------------===//
// Cast: the source is read through a switch on its dtype into double (or
// int64 for integers, exact), then converted to the destination.
//===----------------------------------------------------------------------===//

struct Value {
  double f;
  int64_t i;
  bool isInt;
};

__device__ Value loadAny(DType from, const void *p, int64_t k) {
  switch (from) {
  case DType::kF32: return {double(static_cast<const float *>(p)[k]), 0, false};
  case DType::kF64: return {static_cast<const double *>(p)[k], 0, false};
  case DType::kF16:
    return {double(__half2float(static_cast<const __half *>(p)[k])), 0, false};
  case DType::kBF16:
    return {double(__bfloat162float(static_cast<const __nv_bfloat16 *>(p)[k])),
            0, false};
  case DType::kI8: return {0, static_cast<const int8_t *>(p)[k], true};
  case DType::kI16: return {0, static_cast<const int16_t *>(p)[k], true};
  case DType::kI32: return {0, static_cast<const int32_t *>(p)[k], true};
  case DType::kI64: return {0, static_cast<const int64_t *>(p)[k], true};
  case DType::kU8: return {0, static_cast<const uint8_t *>(p)[k], true};
  case DType::kU16: return {0, static_cast<const uint16_t *>(p)[k], true};
  case DType::kU32: return {0, static_cast<const uint32_t *>(p)[k], true};
  case DType::kU64:
    return {0, int64_t(static_cast<const uint64_t *>(p)[k]), true};
  case DType::kBool: return {0, static_cast<const bool *>(p)[k] ? 1 : 0, true};
  default: return {0, 0, true};
  }
}

/// Floats to integers truncate toward zero and saturate (NaN -> 0), as the
/// CPU backend.
template <typename T> __device__ T convert(Value v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v.isInt ? v.i != 0 : v.f != 0;
  } else if constexpr (std::is_integral_v<T>) {
    if (v.isInt)
      return T(v.i);
    if (v.f != v.f)
      return T(0);
    const double lo = double(std::numeric_limits<T>::lowest());
    const double hi = double(std::numeric_limits<T>::max());
    if (v.f <= lo)
      return std::numeric_limits<T>::lowest();
    if (v.f >= hi)
      return std::numeric_limits<T>::max();
    return T(v.f);
  } else {
    const double d = v.isInt ? double(v.i) : v.f;
    if constexpr (std::is_same_v<T, __half>)
      return __float2half_rn(float(d));
    else if constexpr (std::is_same_v<T, __nv_bfloat16>)
      return __float2bfloat16_rn(float(d));
    else
      return T(d);
  }
}

template <typename T>
__global__ void castKernel(Layout l, T *out, DType from, const void *in) {
  DTCC_GRID_LOOP(i, l.numel) {
    int64_t off[2];
    layoutOffsets<2>(l, i, off);
    out[off[0]] = convert<T>(loadAny(from, in, off[1]));
  }
}

/// A cast between float types over linear operands: the types are known at
/// compile time, so each element is one load, one or two conversions and a
/// store, where castKernel reads through a run-time dtype switch into
/// double. The same results as castKernel: through float to a half type,
/// through the wider type otherwise.
template <typename To, typename From>
__global__ void castFloatKernel(int64_t n, To *out, const From *in) {
  DTCC_GRID_LOOP(i, n) {
    out[i] =
        Elem<To>::store(static_cast<ComputeT<To>>(Elem<From>::load(in[i])));
  }
}

/// castFloatKernel four elements at a time (both operands 16-byte
/// aligned), the last numel % 4 one at a time.
template <typename To, typename From>
__global__ void castFloatVectorKernel(int64_t n, To *out, const From *in) {
  const int64_t vectors = n / 4;
  DTCC_GRID_LOOP(t, vectors) {
    const Pack<From, 4> x = reinterpret_cast<const Pack<From, 4> *>(in)[t];
    Pack<To, 4> r;
#pragma unroll
    for (int j = 0; j < 4; ++j)
      r.v[j] =
          Elem<To>::store(static_cast<ComputeT<To>>(Elem<From>::load(x.v[j])));
    reinterpret_cast<Pack<To, 4> *>(out)[t] = r;
  }
  DTCC_GRID_LOOP(t, n - vectors * 4) {
    const int64_t i = vectors * 4 + t;
    out[i] =
        Elem<To>::store(static_cast<ComputeT<To>>(Elem<From>::load(in[i])));
  }
}

template <typename T>
__global__ void iotaKernel(T *out, int64_t n, int64_t size, int64_t inner) {
  DTCC_GRID_LOOP(i, n) {
    Value v{0, (i / inner) % size, true};
    out[i] = convert<T>(v);
  }
}

//===----------------------------------------------------------------------===//
// gather / scatter_add
//===----------------------------------------------------------------------===//

template <typename E, typename I>
__global__ void gatherKernel(const E *data, const I *indices, E *out,
                             int64_t outer, int64_t size, int64_t inner,
                             int64_t count, DeviceError *error, int32_t site) {
  const int64_t n = outer * count * inner;
  DTCC_GRID_LOOP(i, n) {
    const int64_t k = i % inner, j = (i / inner) % count, o = i / (inner * count);
    int64_t idx = int64_t(indices[j]);
    if (idx < 0)
      idx += size;
    if (idx < 0 || idx >= size) {
      recordError(error, site, kBadIndex, int64_t(indices[j]), j, size);
      out[i] = E(0);
      continue;
    }
    out[i] = data[(o * size + idx) * inner + k];
  }
}

/// gather of whole rows of `inner` elements (an embedding lookup): a block
/// per row, its index read once and the row copied V elements at a time.
/// (gatherKernel spends three 64-bit divisions and an access of one
/// element on every element.)
template <typename E, typename I, int V>
__global__ void gatherRowsKernel(const E *data, const I *indices, E *out,
                                 int64_t outer, int64_t size, int64_t inner,
                                 int64_t count, DeviceError *error,
                                 int32_t site) {
  using P = Pack<E, V>;
  const int64_t rows = outer * count, packs = inner / V;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t j = r % count, o = r / count;
    const int64_t raw = int64_t(indices[j]);
    const int64_t idx = raw < 0 ? raw + size : raw;
    P *dst = reinterpret_cast<P *>(out + r * inner);
    if (idx < 0 || idx >= size) {
      if (threadIdx.x == 0)
        recordError(error, site, kBadIndex, raw, j, size);
      const P zero{};
      for (int64_t t = threadIdx.x; t < packs; t += blockDim.x)
        dst[t] = zero;
      continue;
    }
    const P *src = reinterpret_cast<const P *>(data + (o * size + idx) * inner);
    for (int64_t t = threadIdx.x; t < packs; t += blockDim.x)
      dst[t] = src[t];
  }
}

/// Calls fn(width, config) for a kernel that takes rows of `inner` elements
/// of E a block per row, V = width at a time: 16 bytes where `inner` is
/// whole 16-byte packs and the rows' base is aligned (`aligned`), one
/// element where the rows are long (>= 32); false otherwise, for the
/// element-a-thread kernel.
template <typename E, typename Fn>
bool byRows(int64_t rows, int64_t inner, bool aligned, Fn &&fn) {
  constexpr int kWide = 16 / int(sizeof(E));
  auto at = [&](auto width) {
    fn(width,
       packRowLaunch(rows, inner / decltype(width)::value, launchLimits()));
  };
  if (rows > 0 && inner % kWide == 0 && aligned)
    at(std::integral_constant<int, kWide>{});
  else if (rows > 0 && inner >= 32)
    at(std::integral_constant<int, 1>{});
  else
    return false;
  return true;
}

template <typename E, typename I>
__global__ void gatherElementsKernel(Layout l, E *out, const I *indices,
                                     const E *data, int64_t axisStride,
                                     int64_t size, DeviceError *error,
                                     int32_t site) {
  DTCC_GRID_LOOP(i, l.numel) {
    int64_t off[3];
    layoutOffsets<3>(l, i, off);
    const int64_t raw = int64_t(indices[off[1]]);
    const int64_t idx = raw < 0 ? raw + size : raw;
    if (idx < 0 || idx >= size) {
      recordError(error, site, kBadIndex, raw, off[1], size);
      out[off[0]] = E(0);
      continue;
    }
    out[off[0]] = data[off[2] + idx * axisStride];
  }
}

//===----------------------------------------------------------------------===//
// scatter_add without atomics: the (index, position) pairs are sorted by
// index with a stable LSD radix sort (8-bit digits, tiles of
// kScatterTileItems), and each output element sums its updates in position
// order, as the CPU backend does.
//===----------------------------------------------------------------------===//

/// Keys: the index (from the end when negative), `size` when bad.
template <typename I>
__global__ void scatterKeysKernel(const I *indices, int64_t count, int64_t size,
                                  uint32_t *keys, uint32_t *positions,
                                  DeviceError *error, int32_t site) {
  DTCC_GRID_LOOP(j, count) {
    const int64_t raw = int64_t(indices[j]);
    const int64_t idx = raw < 0 ? raw + size : raw;
    const bool bad = idx < 0 || idx >= size;
    if (bad)
      recordError(error, site, kBadIndex, raw, j, size);
    keys[j] = uint32_t(bad ? size : idx);
    positions[j] = uint32_t(j);
  }
}

/// counts[digit * tiles + tile]: how many keys of the tile have the digit.
__global__ void radixCountKernel(const uint32_t *keys, int64_t count, int shift,
                                 uint32_t *counts, int64_t tiles) {
  __shared__ uint32_t hist[kScatterRadix];
  const int t = threadIdx.x;
  for (int d = t; d < kScatterRadix; d += blockDim.x)
    hist[d] = 0;
  __syncthreads();
  const int64_t base = int64_t(blockIdx.x) * kScatterTileItems;
  for (int r = 0; r < kScatterItemsPerThread; ++r) {
    const int64_t i = base + r * kScatterTileThreads + t;
    if (i < count)
      atomicAdd(&hist[(keys[i] >> shift) & (kScatterRadix - 1)], 1u);
  }
  __syncthreads();
  for (int d = t; d < kScatterRadix; d += blockDim.x)
    counts[int64_t(d) * tiles + blockIdx.x] = hist[d];
}

/// Exclusive prefix sum of `n` counts in place, by one block of 1024
/// threads.
__global__ void exclusiveScanKernel(uint32_t *counts, int64_t n) {
  __shared__ uint32_t warpSums[32];
  __shared__ uint32_t carry;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  if (t == 0)
    carry = 0;
  __syncthreads();
  for (int64_t base = 0; base < n; base += blockDim.x) {
    const int64_t i = base + t;
    const uint32_t v = i < n ? counts[i] : 0;
    uint32_t x = v; // inclusive scan within the warp
#pragma unroll
    for (int o = 1; o < 32; o *= 2) {
      const uint32_t y = __shfl_up_sync(0xffffffffu, x, o);
      if (lane >= o)
        x += y;
    }
    if (lane == 31)
      warpSums[warp] = x;
    __syncthreads();
    if (warp == 0) {
      const int warps = int(blockDim.x >> 5);
      uint32_t w = lane < warps ? warpSums[lane] : 0;
#pragma unroll
      for (int o = 1; o < 32; o *= 2) {
        const uint32_t y = __shfl_up_sync(0xffffffffu, w, o);
        if (lane >= o)
          w += y;
      }
      if (lane < warps)
        warpSums[lane] = w; // inclusive over warps
    }
    __syncthreads();
    const uint32_t before = carry + (warp > 0 ? warpSums[warp - 1] : 0);
    if (i < n)
      counts[i] = before + x - v;
    __syncthreads();
    if (t == int(blockDim.x) - 1)
      carry = before + x;
    __syncthreads();
  }
}

/// One stable pass: every key of the tile goes to offsets[digit * tiles +
/// tile] plus the number of earlier keys of the tile with its digit.
/// Items are taken in tile order (round, warp, lane); a warp ranks equal
/// digits among its lanes with __match_any_sync.
__global__ void radixScatterKernel(const uint32_t *keys,
                                   const uint32_t *positions, uint32_t *keysOut,
                                   uint32_t *positionsOut, int64_t count,
                                   int shift, const uint32_t *offsets,
                                   int64_t tiles) {
  constexpr int kWarps = kScatterTileThreads / 32;
  __shared__ uint32_t running[kScatterRadix];
  __shared__ uint32_t warpCounts[kWarps][kScatterRadix];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  for (int d = t; d < kScatterRadix; d += blockDim.x)
    running[d] = 0;
  const int64_t base = int64_t(blockIdx.x) * kScatterTileItems;
  for (int r = 0; r < kScatterItemsPerThread; ++r) {
    for (int k = t; k < kWarps * kScatterRadix; k += blockDim.x)
      warpCounts[k / kScatterRadix][k % kScatterRadix] = 0;
    __syncthreads();
    const int64_t i = base + r * kScatterTileThreads + t;
    const bool valid = i < count;
    const uint32_t key = valid ? keys[i] : 0;
    // Lanes past the end share a digit no key has.
    const uint32_t digit =
        valid ? (key >> shift) & (kScatterRadix - 1) : kScatterRadix;
    const unsigned peers = __match_any_sync(0xffffffffu, digit);
    const int rank = __popc(peers & ((1u << lane) - 1u));
    if (valid && lane == __ffs(peers) - 1)
      warpCounts[warp][digit] = uint32_t(__popc(peers));
    __syncthreads();
    if (valid) {
      uint32_t before = running[digit] + uint32_t(rank);
      for (int w = 0; w < warp; ++w)
        before += warpCounts[w][digit];
      const uint32_t dest = offsets[int64_t(digit) * tiles + blockIdx.x] + before;
      keysOut[dest] = key;
      positionsOut[dest] = positions[i];
    }
    __syncthreads();
    for (int d = t; d < kScatterRadix; d += blockDim.x) {
      uint32_t total = 0;
      for (int w = 0; w < kWarps; ++w)
        total += warpCounts[w][d];
      running[d] += total;
    }
    __syncthreads();
  }
}

/// starts[r] = the first sorted position whose key is >= r, r in [0, size].
__global__ void segmentStartsKernel(const uint32_t *keys, int64_t count,
                                    int64_t size, uint32_t *starts) {
  DTCC_GRID_LOOP(r, size + 1) {
    int64_t lo = 0, hi = count;
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (int64_t(keys[mid]) < r)
        lo = mid + 1;
      else
        hi = mid;
    }
    starts[r] = uint32_t(lo);
  }
}

template <typename C> __device__ __forceinline__ C addWrapping(C a, C b) {
  if constexpr (std::is_integral_v<C>)
    return C(std::make_unsigned_t<C>(a) + std::make_unsigned_t<C>(b));
  else
    return a + b;
}

/// out[o][r][k] = the updates of index r summed in position order.
template <typename S>
__global__ void segmentSumKernel(const S *updates, const uint32_t *positions,
                                 const uint32_t *starts, S *out, int64_t outer,
                                 int64_t size, int64_t inner, int64_t count) {
  using C = ComputeT<S>;
  DTCC_GRID_LOOP(i, outer * size * inner) {
    const int64_t k = i % inner, r = (i / inner) % size, o = i / (inner * size);
    C acc = C(0);
    const S *u = updates + o * count * inner + k;
    for (uint32_t p = starts[r]; p < starts[r + 1]; ++p)
      acc = addWrapping(acc, C(Elem<S>::load(u[int64_t(positions[p]) * inner])));
    out[i] = Elem<S>::store(acc);
  }
}

/// segmentSumKernel by rows of `inner` elements (an embedding's gradient):
/// a block per output row reads its segment's bounds once and sums V
/// elements at a time, in the same position order (the sums are
/// segmentSumKernel's to the bit). segmentSumKernel spends three 64-bit
/// divisions on every element of a table that mostly receives nothing (a
/// 350M GPT's 50304 x 1024 scatter_add: 1.6 ms over six steps under
/// --profile, 0.5 with this kernel).
template <typename S, int V>
__global__ void
segmentSumRowsKernel(const S *updates, const uint32_t *positions,
                     const uint32_t *starts, S *out, int64_t outer,
                     int64_t size, int64_t inner, int64_t count) {
  using C = ComputeT<S>;
  using P = Pack<S, V>;
  const int64_t packs = inner / V;
  for (int64_t row = blockIdx.x; row < outer * size; row += gridDim.x) {
    const int64_t o = row / size, r = row % size;
    const uint32_t first = starts[r], last = starts[r + 1];
    const S *u = updates + o * count * inner;
    P *dst = reinterpret_cast<P *>(out + row * inner);
    for (int64_t t = threadIdx.x; t < packs; t += blockDim.x) {
      C acc[V];
#pragma unroll
      for (int j = 0; j < V; ++j)
        acc[j] = C(0);
      for (uint32_t p = first; p < last; ++p) {
        const P x =
            reinterpret_cast<const P *>(u + int64_t(positions[p]) * inner)[t];
#pragma unroll
        for (int j = 0; j < V; ++j)
          acc[j] = addWrapping(acc[j], C(Elem<S>::load(x.v[j])));
      }
      P result;
#pragma unroll
      for (int j = 0; j < V; ++j)
        result.v[j] = Elem<S>::store(acc[j]);
      dst[t] = result;
    }
  }
}

//===----------------------------------------------------------------------===//
// Training: dropout, random, lr_schedule, adamw, sgd
//===----------------------------------------------------------------------===//

/// Element i's counter: its index in the whole tensor on a block.
__device__ __forceinline__ uint64_t blockCounter(int64_t i,
                                                 const CounterBlock &block) {
  if (!block.offsets)
    return uint64_t(i);
  int64_t rest = i, global = 0;
  for (int d = block.rank - 1; d >= 0; --d) {
    const int64_t l = rest % block.shape[d];
    rest /= block.shape[d];
    global += (block.offsets[d] + l) * block.strides[d];
  }
  return uint64_t(global);
}

/// As the CPU backend: x * scale in the compute type (double for f64).
template <typename S>
__global__ void dropoutKernel(const S *x, const int64_t *step, S *y, bool *mask,
                              int64_t n, uint64_t seed, uint64_t threshold,
                              ComputeT<S> scale, CounterBlock block) {
  using C = ComputeT<S>;
  const uint64_t key = streamKey(seed, uint64_t(*step));
  DTCC_GRID_LOOP(i, n) {
    const uint64_t counter = blockCounter(i, block);
    const bool keep = (splitmix64(key + counter) >> 11) >= threshold;
    const C v = Elem<S>::load(x[i]) * scale;
    y[i] = Elem<S>::store(keep ? v : C(0));
    mask[i] = keep;
  }
}

/// As the CPU backend: the draw in double, stored through the compute type
/// (shift + scale * x rounded twice, as the CPU's -ffp-contract=off code
/// rounds it: not one FMA).
template <typename S>
__global__ void randomKernel(const int64_t *step, S *y, int64_t n,
                             uint64_t seed, bool normal, double shift,
                             double scale, int digits, CounterBlock block) {
  using C = ComputeT<S>;
  const uint64_t key = streamKey(seed, uint64_t(*step));
  DTCC_GRID_LOOP(i, n) {
    const double x = standardDraw(key, blockCounter(i, block), normal, digits);
    y[i] = Elem<S>::store(C(__dadd_rn(shift, __dmul_rn(scale, x))));
  }
}

__global__ void lrKernel(int kind, double base, double min, int64_t warmup,
                         const int64_t *stepPtr, const int64_t *totalPtr,
                         float *lr) {
  const int64_t step = *stepPtr, total = *totalPtr;
  double r;
  if (step < warmup) {
    r = base * double(step + 1) / double(warmup);
  } else {
    const int64_t span = total - warmup > 1 ? total - warmup : 1;
    const double p = double(step - warmup) / double(span);
    if (kind == 1)
      r = min + (base - min) * (1 - p);
    else if (kind == 2)
      r = min + (base - min) * (1 + cos(3.14159265358979323846 * p)) / 2;
    else
      r = base;
  }
  *lr = float(r);
}

/// The rounded type of an AdamW launch that writes no rounded copies.
struct NoRoundedCopy {};

/// What every thread of an AdamW block shares: its tensor and the update's
/// scalars, which the block's first thread works out once (the table
/// search and the double-precision powers are the block's prologue; every
/// thread repeating them cost as much issue time as its elements).
struct AdamwBlock {
  int owner;
  bool bad;
  float decay, beta1, omb1, beta2, omb2, negStep, bc2Sqrt, eps, gradScale;
};

/// One element's update, as PyTorch and the CPU backend compute it (the
/// scalars in double, rounded once to float).
struct AdamwResult {
  float param, m, v;
};
__device__ __forceinline__ AdamwResult adamwElement(const AdamwBlock &s,
                                                    float g, float p, float m,
                                                    float v) {
  g = g * s.gradScale;
  p = p * s.decay;
  const float mi = m * s.beta1 + s.omb1 * g;
  const float vi = v * s.beta2 + s.omb2 * g * g;
  const float denom = sqrtf(vi) / s.bc2Sqrt + s.eps;
  return {p + s.negStep * mi / denom, mi, vi};
}

/// kAdamwVector elements of every operand per access (16 bytes of the f32
/// parameter and moments), kAdamwUnroll accesses loaded before any is
/// stored: the reads of a thread's next elements cannot pass the writes of
/// its last (an update may be in place), so each thread keeps that many
/// bytes in flight instead of one element's.
constexpr int kAdamwVector = 4;
constexpr int kAdamwUnroll = 2;

template <typename G, typename R>
__global__ void __launch_bounds__(kAdamwThreads)
    adamwKernel(const AdamwTensor *tensors, int count, AdamwHyper h,
                DeviceError *error, int32_t site) {
  __shared__ AdamwBlock s;
  if (threadIdx.x == 0) {
    s.owner = chunkOwner(tensors, count);
    const int64_t step = *h.step;
    s.bad = step < 1;
    if (s.bad) {
      recordError(error, site, kBadStep, step, 0, 1);
    } else {
      const double lr = *h.lr;
      const double bc1 = 1 - pow(h.beta1, double(step));
      const double bc2 = 1 - pow(h.beta2, double(step));
      s.decay = float(1 - lr * h.weightDecay);
      s.beta1 = float(h.beta1);
      s.omb1 = float(1 - h.beta1);
      s.beta2 = float(h.beta2);
      s.omb2 = float(1 - h.beta2);
      s.negStep = float(-(lr / bc1));
      s.bc2Sqrt = float(sqrt(bc2));
      s.eps = float(h.eps);
      s.gradScale = *h.gradScale;
    }
  }
  __syncthreads();
  if (s.bad)
    return;
  const AdamwTensor t = tensors[s.owner];
  const G *grad = static_cast<const G *>(t.grad);
  constexpr bool kRounded = !std::is_same_v<R, NoRoundedCopy>;
  // (The rounded copy's type when there is one, else the gradient's, so
  // that Pack below is always a type.)
  using RT = std::conditional_t<kRounded, R, G>;
  const int64_t begin = (int64_t(blockIdx.x) - t.firstChunk) * kAdamwChunk;
  const int64_t end = begin + kAdamwChunk < t.n ? begin + kAdamwChunk : t.n;
  auto one = [&](int64_t i) {
    const AdamwResult r =
        adamwElement(s, Elem<G>::load(grad[i]), t.param[i], t.m[i], t.v[i]);
    t.newParam[i] = r.param;
    t.newM[i] = r.m;
    t.newV[i] = r.v;
    // The cast kernel's rounding of the new parameter (castFloatKernel).
    if constexpr (kRounded)
      static_cast<R *>(t.rounded)[i] = Elem<R>::store(r.param);
  };
  constexpr int V = kAdamwVector, U = kAdamwUnroll;
  // Chunks begin at multiples of V: whole vectors wherever every base is
  // aligned to one (always, in an arena), element by element otherwise.
  const bool vectors = alignedTo(t.param, 16) && alignedTo(t.m, 16) &&
                       alignedTo(t.v, 16) && alignedTo(t.newParam, 16) &&
                       alignedTo(t.newM, 16) && alignedTo(t.newV, 16) &&
                       alignedTo(grad, V * sizeof(G)) &&
                       (!kRounded || alignedTo(t.rounded, V * sizeof(RT)));
  int64_t tail = begin;
  if (vectors) {
    using F = Pack<float, V>;
    const int64_t whole = begin + (end - begin) / V * V;
    const int64_t stride = int64_t(blockDim.x) * V;
    int64_t i = begin + int64_t(threadIdx.x) * V;
    for (; i + (U - 1) * stride < whole; i += U * stride) {
      Pack<G, V> g[U];
      F p[U], m[U], v[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t at = i + u * stride;
        g[u] = *reinterpret_cast<const Pack<G, V> *>(grad + at);
        p[u] = *reinterpret_cast<const F *>(t.param + at);
        m[u] = *reinterpret_cast<const F *>(t.m + at);
        v[u] = *reinterpret_cast<const F *>(t.v + at);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        F np, nm, nv;
        Pack<RT, V> rounded;
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const AdamwResult r = adamwElement(s, Elem<G>::load(g[u].v[j]),
                                             p[u].v[j], m[u].v[j], v[u].v[j]);
          np.v[j] = r.param;
          nm.v[j] = r.m;
          nv.v[j] = r.v;
          if constexpr (kRounded)
            rounded.v[j] = Elem<R>::store(r.param);
        }
        const int64_t at = i + u * stride;
        *reinterpret_cast<F *>(t.newParam + at) = np;
        *reinterpret_cast<F *>(t.newM + at) = nm;
        *reinterpret_cast<F *>(t.newV + at) = nv;
        if constexpr (kRounded)
          *reinterpret_cast<Pack<RT, V> *>(static_cast<R *>(t.rounded) + at) =
              rounded;
      }
    }
    // Fewer than U vectors left for this thread: one at a time.
    for (; i < whole; i += stride)
      for (int j = 0; j < V; ++j)
        one(i + j);
    tail = whole;
  }
  for (int64_t i = tail + threadIdx.x; i < end; i += blockDim.x)
    one(i);
}

template <typename C>
__global__ void
sgdKernel(const C *param, const C *grad, const C *buf, C *newParam, C *newBuf,
          int64_t n, C momentum, C oneMinusDampening, C weightDecay,
          bool nesterov, const float *lrPtr, const int64_t *stepPtr,
          const float *gradScalePtr, DeviceError *error, int32_t site) {
  const int64_t step = *stepPtr;
  if (step < 1) {
    if (blockIdx.x == 0 && threadIdx.x == 0)
      recordError(error, site, kBadStep, step, 0, 1);
    return;
  }
  // As the CPU's kernel: the f32 scalars widened to the parameter's type.
  const C negLr = -C(*lrPtr), gradScale = C(*gradScalePtr);
  const bool first = step == 1;
  DTCC_GRID_LOOP(i, n) {
    const C p = param[i];
    C d = grad[i] * gradScale;
    d = weightDecay != C(0) ? d + weightDecay * p : d;
    const C b = first ? d : buf[i] * momentum + oneMinusDampening * d;
    const C u = nesterov ? d + momentum * b : momentum != C(0) ? b : d;
    newParam[i] = p + negLr * u;
    newBuf[i] = b;
  }
}

__global__ void swapBlocksKernel(uint8_t *dst, const uint8_t *src, int64_t p,
                                 int64_t q, int64_t block) {
  const int64_t n = p * q * block;
  DTCC_GRID_LOOP(i, n) {
    const int64_t b = i % block, blk = i / block;
    const int64_t pi = blk / q, qi = blk % q;
    dst[(qi * p + pi) * block + b] = src[i];
  }
}

template <typename Fn> cudaError_t launch(int64_t n, cudaStream_t s, Fn &&fn) {
  LaunchConfig c = elementwiseLaunch(n, launchLimits());
  if (c.blocks == 0)
    return cudaSuccess;
  fn(blocksOf(c), threadsOf(c), s);
  return cudaGetLastError();
}

} // namespace

cudaError_t launchUnary(UnaryOp op, DType dtype, const Layout &l, void *out,
                        const void *in, cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  auto run = [&](auto tag) {
    using S = decltype(tag);
    if constexpr (kVectorFloat<S>) {
      const void *data[] = {out, in};
      const VectorPlan plan = vectorPlan(l, sizeof(S), data, 2);
      if (plan.width > 1) {
        constexpr int V = 16 / sizeof(S);
        err = launch(l.numel / V, s, [&](dim3 g, dim3 b, cudaStream_t st) {
          unaryVectorKernel<S, V><<<g, b, 0, st>>>(
              op, l, plan, static_cast<S *>(out), static_cast<const S *>(in));
        });
        return;
      }
    }
    err = launch(l.numel, s, [&](dim3 g, dim3 b, cudaStream_t st) {
      unaryKernel<S><<<g, b, 0, st>>>(op, l, static_cast<S *>(out),
                                      static_cast<const S *>(in));
    });
  };
  if (dtype == DType::kBool)
    run(bool{});
  else
    visitArithmetic(dtype, run);
  return err;
}

cudaError_t launchBinary(BinaryOp op, DType dtype, const Layout &l, void *out,
                         const void *a, const void *b, cudaStream_t s,
                         DeviceError *error, int32_t site) {
  cudaError_t err = cudaErrorInvalidValue;
  auto run = [&](auto tag) {
    using S = decltype(tag);
    if constexpr (kVectorFloat<S>) {
      const void *data[] = {out, a, b};
      const VectorPlan plan = vectorPlan(l, sizeof(S), data, 3);
      if (plan.width > 1) {
        constexpr int V = 16 / sizeof(S);
        err = launch(l.numel / V, s, [&](dim3 g, dim3 bl, cudaStream_t st) {
          binaryVectorKernel<S, V><<<g, bl, 0, st>>>(
              op, l, plan, static_cast<S *>(out), static_cast<const S *>(a),
              static_cast<const S *>(b));
        });
        return;
      }
    }
    err = launch(l.numel, s, [&](dim3 g, dim3 bl, cudaStream_t st) {
      binaryKernel<S><<<g, bl, 0, st>>>(op, l, static_cast<S *>(out),
                                        static_cast<const S *>(a),
                                        static_cast<const S *>(b), error,
                                        site);
    });
  };
  if (dtype == DType::kBool)
    run(bool{});
  else
    visitNumeric(dtype, run);
  return err;
}

cudaError_t launchCompare(CompareOp op, DType dtype, const Layout &l,
                          void *out, const void *a, const void *b,
                          cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  auto run = [&](auto tag) {
    using S = decltype(tag);
    err = launch(l.numel, s, [&](dim3 g, dim3 bl, cudaStream_t st) {
      compareKernel<S><<<g, bl, 0, st>>>(op, l, static_cast<bool *>(out),
                                         static_cast<const S *>(a),
                                         static_cast<const S *>(b));
    });
  };
  if (dtype == DType::kBool)
    run(bool{});
  else
    visitNumeric(dtype, run);
  return err;
}

cudaError_t launchPredicate(PredicateOp op, DType dtype, const Layout &l,
                            void *out, const void *in, cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  visitFloat(dtype, [&](auto tag) {
    using S = decltype(tag);
    err = launch(l.numel, s, [&](dim3 g, dim3 b, cudaStream_t st) {
      predicateKernel<S><<<g, b, 0, st>>>(op, l, static_cast<bool *>(out),
                                          static_cast<const S *>(in));
    });
  });
  return err;
}

cudaError_t launchSelect(int elemSize, const Layout &l, void *out,
                         const void *cond, const void *t, const void *f,
                         cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  visitBytes(elemSize, [&](auto tag) {
    using E = decltype(tag);
    err = launch(l.numel, s, [&](dim3 g, dim3 b, cudaStream_t st) {
      selectKernel<E><<<g, b, 0, st>>>(l, static_cast<E *>(out),
                                       static_cast<const bool *>(cond),
                                       static_cast<const E *>(t),
                                       static_cast<const E *>(f));
    });
  });
  return err;
}

cudaError_t launchCast(DType to, DType from, const Layout &l, void *out,
                       const void *in, cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  if (l.linear) {
    bool floats = false;
    visitFloat(to, [&](auto toTag) {
      visitFloat(from, [&](auto fromTag) {
        using To = decltype(toTag);
        using From = decltype(fromTag);
        floats = true;
        if constexpr (sizeof(To) <= 4 && sizeof(From) <= 4)
          if (l.numel >= 4 && alignedTo(out, 16) && alignedTo(in, 16)) {
            err = launch(l.numel / 4, s, [&](dim3 g, dim3 b, cudaStream_t st) {
              castFloatVectorKernel<To, From><<<g, b, 0, st>>>(
                  l.numel, static_cast<To *>(out),
                  static_cast<const From *>(in));
            });
            return;
          }
        err = launch(l.numel, s, [&](dim3 g, dim3 b, cudaStream_t st) {
          castFloatKernel<To, From><<<g, b, 0, st>>>(
              l.numel, static_cast<To *>(out), static_cast<const From *>(in));
        });
      });
    });
    if (floats)
      return err;
  }
  auto run = [&](auto tag) {
    using T = decltype(tag);
    err = launch(l.numel, s, [&](dim3 g, dim3 b, cudaStream_t st) {
      castKernel<T><<<g, b, 0, st>>>(l, static_cast<T *>(out), from, in);
    });
  };
  switch (to) {
  case DType::kI8: run(int8_t{}); break;
  case DType::kI16: run(int16_t{}); break;
  case DType::kU8: run(uint8_t{}); break;
  case DType::kU16: run(uint16_t{}); break;
  case DType::kU32: run(uint32_t{}); break;
  case DType::kU64: run(uint64_t{}); break;
  case DType::kBool: run(bool{}); break;
  default: visitArithmetic(to, run); break;
  }
  return err;
}

cudaError_t launchCopy(int elemSize, const Layout &l, void *out, const void *in,
                       cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  visitBytes(elemSize, [&](auto tag) {
    using E = decltype(tag);
    const void *data[] = {out, in};
    const VectorPlan plan = vectorPlan(l, sizeof(E), data, 2);
    if (plan.width > 1) {
      constexpr int V = 16 / sizeof(E);
      err = launch(l.numel / V, s, [&](dim3 g, dim3 b, cudaStream_t st) {
        copyVectorKernel<E, V><<<g, b, 0, st>>>(l, plan, static_cast<E *>(out),
                                                static_cast<const E *>(in));
      });
      return;
    }
    err = launch(l.numel, s, [&](dim3 g, dim3 b, cudaStream_t st) {
      copyKernel<E><<<g, b, 0, st>>>(l, static_cast<E *>(out),
                                     static_cast<const E *>(in));
    });
  });
  return err;
}

cudaError_t launchIota(DType dtype, void *out, int64_t outer, int64_t size,
                       int64_t inner, cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  const int64_t n = outer * size * inner;
  visitArithmetic(dtype, [&](auto tag) {
    using T = decltype(tag);
    err = launch(n, s, [&](dim3 g, dim3 b, cudaStream_t st) {
      iotaKernel<T><<<g, b, 0, st>>>(static_cast<T *>(out), n, size, inner);
    });
  });
  return err;
}

cudaError_t launchFill(int elemSize, void *out, int64_t count, uint64_t bits,
                       cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  visitBytes(elemSize, [&](auto tag) {
    using E = decltype(tag);
    err = launch(count, s, [&](dim3 g, dim3 b, cudaStream_t st) {
      fillKernel<E><<<g, b, 0, st>>>(static_cast<E *>(out), count, E(bits));
    });
  });
  return err;
}

cudaError_t launchGather(int elemSize, DType indexType, const void *data,
                         const void *indices, void *out, int64_t outer,
                         int64_t size, int64_t inner, int64_t count,
                         DeviceError *error, int32_t site, cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  visitBytes(elemSize, [&](auto etag) {
    using E = decltype(etag);
    auto run = [&](auto itag) {
      using I = decltype(itag);
      const int64_t rows = outer * count;
      auto rowsOf = [&](auto width, const LaunchConfig &c) {
        gatherRowsKernel<E, I, decltype(width)::value>
            <<<blocksOf(c), threadsOf(c), 0, s>>>(
                static_cast<const E *>(data), static_cast<const I *>(indices),
                static_cast<E *>(out), outer, size, inner, count, error, site);
        err = cudaGetLastError();
      };
      if (!byRows<E>(rows, inner, alignedTo(data, 16) && alignedTo(out, 16),
                     rowsOf))
        err = launch(rows * inner, s, [&](dim3 g, dim3 b, cudaStream_t st) {
          gatherKernel<E, I><<<g, b, 0, st>>>(
              static_cast<const E *>(data), static_cast<const I *>(indices),
              static_cast<E *>(out), outer, size, inner, count, error, site);
        });
    };
    if (indexType == DType::kI32)
      run(int32_t{});
    else if (indexType == DType::kI64)
      run(int64_t{});
  });
  return err;
}

cudaError_t launchGatherElements(int elemSize, DType indexType,
                                 const Layout &l, void *out,
                                 const void *indices, const void *data,
                                 int64_t axisStride, int64_t size,
                                 DeviceError *error, int32_t site,
                                 cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  visitBytes(elemSize, [&](auto etag) {
    using E = decltype(etag);
    auto run = [&](auto itag) {
      using I = decltype(itag);
      err = launch(l.numel, s, [&](dim3 g, dim3 b, cudaStream_t st) {
        gatherElementsKernel<E, I><<<g, b, 0, st>>>(
            l, static_cast<E *>(out), static_cast<const I *>(indices),
            static_cast<const E *>(data), axisStride, size, error, site);
      });
    };
    if (indexType == DType::kI32)
      run(int32_t{});
    else if (indexType == DType::kI64)
      run(int64_t{});
  });
  return err;
}

cudaError_t launchRadixSortPairs(const ScatterAddScratch &scratch,
                                 int64_t count, cudaStream_t s) {
  if (count == 0)
    return cudaSuccess;
  const unsigned tiles = unsigned(scratch.tiles);
  for (int pass = 0; pass < scratch.passes; ++pass) {
    const int from = pass % 2, to = 1 - from, shift = 8 * pass;
    radixCountKernel<<<tiles, kScatterTileThreads, 0, s>>>(
        scratch.keys[from], count, shift, scratch.counts, scratch.tiles);
    exclusiveScanKernel<<<1, 1024, 0, s>>>(scratch.counts,
                                           kScatterRadix * scratch.tiles);
    radixScatterKernel<<<tiles, kScatterTileThreads, 0, s>>>(
        scratch.keys[from], scratch.positions[from], scratch.keys[to],
        scratch.positions[to], count, shift, scratch.counts, scratch.tiles);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
      return err;
  }
  return cudaSuccess;
}

cudaError_t launchScatterAdd(DType dtype, DType indexType, const void *updates,
                             const void *indices, void *out,
                             const ScatterAddScratch &scratch, int64_t outer,
                             int64_t size, int64_t inner, int64_t count,
                             DeviceError *error, int32_t site, cudaStream_t s) {
  const int64_t total = outer * size * inner;
  if (total == 0)
    return cudaSuccess;
  if (count == 0 || outer * inner == 0)
    return cudaMemsetAsync(out, 0, size_t(total * dtypeSize(dtype)), s);
  cudaError_t err = cudaErrorInvalidValue;
  // Keys and positions, then one stable pass per digit.
  auto keys = [&](auto itag) {
    using I = decltype(itag);
    err = launch(count, s, [&](dim3 g, dim3 b, cudaStream_t st) {
      scatterKeysKernel<I><<<g, b, 0, st>>>(static_cast<const I *>(indices),
                                            count, size, scratch.keys[0],
                                            scratch.positions[0], error, site);
    });
  };
  if (indexType == DType::kI32)
    keys(int32_t{});
  else if (indexType == DType::kI64)
    keys(int64_t{});
  if (err != cudaSuccess)
    return err;
  if ((err = launchRadixSortPairs(scratch, count, s)) != cudaSuccess)
    return err;
  const int sorted = scratch.passes % 2;
  err = launch(size + 1, s, [&](dim3 g, dim3 b, cudaStream_t st) {
    segmentStartsKernel<<<g, b, 0, st>>>(scratch.keys[sorted], count, size,
                                         scratch.starts);
  });
  if (err != cudaSuccess)
    return err;
  err = cudaErrorInvalidValue;
  visitArithmetic(dtype, [&](auto stag) {
    using S = decltype(stag);
    auto rowsOf = [&](auto width, const LaunchConfig &c) {
      segmentSumRowsKernel<S, decltype(width)::value>
          <<<blocksOf(c), threadsOf(c), 0, s>>>(
              static_cast<const S *>(updates), scratch.positions[sorted],
              scratch.starts, static_cast<S *>(out), outer, size, inner, count);
      err = cudaGetLastError();
    };
    if (!byRows<S>(outer * size, inner,
                   alignedTo(updates, 16) && alignedTo(out, 16), rowsOf))
      err = launch(total, s, [&](dim3 g, dim3 b, cudaStream_t st) {
        segmentSumKernel<S><<<g, b, 0, st>>>(
            static_cast<const S *>(updates), scratch.positions[sorted],
            scratch.starts, static_cast<S *>(out), outer, size, inner, count);
      });
  });
  return err;
}

cudaError_t launchDropout(DType dtype, const void *x, const int64_t *step,
                          void *y, bool *mask, int64_t n, uint64_t seed,
                          uint64_t threshold, double scale,
                          const CounterBlock &block, cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  visitFloat(dtype, [&](auto tag) {
    using S = decltype(tag);
    err = launch(n, s, [&](dim3 g, dim3 b, cudaStream_t st) {
      dropoutKernel<S><<<g, b, 0, st>>>(static_cast<const S *>(x), step,
                                        static_cast<S *>(y), mask, n, seed,
                                        threshold, ComputeT<S>(scale), block);
    });
  });
  return err;
}

cudaError_t launchRandom(DType dtype, const int64_t *step, void *y, int64_t n,
                         uint64_t seed, bool normal, double shift,
                         double scale, int digits, const CounterBlock &block,
                         cudaStream_t s) {
  cudaError_t err = cudaErrorInvalidValue;
  visitFloat(dtype, [&](auto tag) {
    using S = decltype(tag);
    err = launch(n, s, [&](dim3 g, dim3 b, cudaStream_t st) {
      randomKernel<S><<<g, b, 0, st>>>(step, static_cast<S *>(y), n, seed,
                                       normal, shift, scale, digits, block);
    });
  });
  return err;
}

cudaError_t launchLrSchedule(int kind, double base, double min, int64_t warmup,
                             const int64_t *step, const int64_t *total,
                             float *lr, cudaStream_t s) {
  lrKernel<<<1, 1, 0, s>>>(kind, base, min, warmup, step, total, lr);
  return cudaGetLastError();
}

cudaError_t launchAdamw(const AdamwTensor *tensors, int count,
                        int64_t totalChunks, DType gradType, DType roundedType,
                        const AdamwHyper &hyper, DeviceError *error,
                        int32_t site, cudaStream_t s) {
  if (totalChunks == 0)
    return cudaSuccess;
  const dim3 grid{unsigned(totalChunks)}, block{kAdamwThreads};
  // The gradient's type, then the rounded copies'.
  auto withRounded = [&](auto gtag) -> cudaError_t {
    using G = decltype(gtag);
    switch (roundedType) {
    case DType::kF32:
      adamwKernel<G, NoRoundedCopy>
          <<<grid, block, 0, s>>>(tensors, count, hyper, error, site);
      break;
    case DType::kBF16:
      adamwKernel<G, __nv_bfloat16>
          <<<grid, block, 0, s>>>(tensors, count, hyper, error, site);
      break;
    case DType::kF16:
      adamwKernel<G, __half>
          <<<grid, block, 0, s>>>(tensors, count, hyper, error, site);
      break;
    default:
      return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
  };
  switch (gradType) {
  case DType::kF32:
    return withRounded(float{});
  case DType::kBF16:
    return withRounded(__nv_bfloat16{});
  case DType::kF16:
    return withRounded(__half{});
  default:
    return cudaErrorInvalidValue;
  }
}

cudaError_t launchSgd(DType dtype, const void *param, const void *grad,
                      const void *buf, void *newParam, void *newBuf, int64_t n,
                      double momentum, double dampening, double weightDecay,
                      bool nesterov, const float *lr, const int64_t *step,
                      const float *gradScale, DeviceError *error, int32_t site,
                      cudaStream_t s) {
  auto run = [&](auto tag) {
    using C = decltype(tag);
    return launch(n, s, [&](dim3 g, dim3 b, cudaStream_t st) {
      sgdKernel<C><<<g, b, 0, st>>>(
          static_cast<const C *>(param), static_cast<const C *>(grad),
          static_cast<const C *>(buf), static_cast<C *>(newParam),
          static_cast<C *>(newBuf), n, C(momentum), C(1 - dampening),
          C(weightDecay), nesterov, lr, step, gradScale, error, site);
    });
  };
  if (dtype == DType::kF32)
    return run(float{});
  if (dtype == DType::kF64)
    return run(double{});
  return cudaErrorInvalidValue;
}

cudaError_t launchSwapBlocks(void *dst, const void *src, int64_t p, int64_t q,
                             int64_t block, cudaStream_t s) {
  return launch(p * q * block, s, [&](dim3 g, dim3 b, cudaStream_t st) {
    swapBlocksKernel<<<g, b, 0, st>>>(static_cast<uint8_t *>(dst),
                                      static_cast<const uint8_t *>(src), p, q,
                                      block);
  });
}

} // namespace dtcc::runtime::cuda
