//===- Reduce.cpp - element reductions for the backends -------------------===//

#include "runtime/comm/Reduce.h"

#include <type_traits>

namespace dtcc::runtime::comm {
namespace {

template <typename T> inline T reduceOne(T a, T b, ReduceKind kind) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned,
                                 std::make_unsigned_t<T>>;
    switch (kind) {
    case ReduceKind::kSum: return T(U(a) + U(b));
    case ReduceKind::kProd: return T(U(a) * U(b));
    case ReduceKind::kMax: return a < b ? b : a;
    case ReduceKind::kMin: return b < a ? b : a;
    }
    return a;
  } else {
    switch (kind) {
    case ReduceKind::kSum: return a + b;
    case ReduceKind::kProd: return a * b;
    case ReduceKind::kMax: return (b > a || b != b) ? b : a;
    case ReduceKind::kMin: return (b < a || b != b) ? b : a;
    }
    return a;
  }
}

template <typename T>
void combineAs(void *acc, const void *in, int64_t count, ReduceKind kind) {
  T *a = static_cast<T *>(acc);
  const T *b = static_cast<const T *>(in);
  // One loop per kind so that each vectorizes.
  switch (kind) {
  case ReduceKind::kSum:
    for (int64_t i = 0; i < count; ++i)
      a[i] = reduceOne(a[i], b[i], ReduceKind::kSum);
    break;
  case ReduceKind::kProd:
    for (int64_t i = 0; i < count; ++i)
      a[i] = reduceOne(a[i], b[i], ReduceKind::kProd);
    break;
  case ReduceKind::kMax:
    for (int64_t i = 0; i < count; ++i)
      a[i] = reduceOne(a[i], b[i], ReduceKind::kMax);
    break;
  case ReduceKind::kMin:
    for (int64_t i = 0; i < count; ++i)
      a[i] = reduceOne(a[i], b[i], ReduceKind::kMin);
    break;
  }
}

} // namespace

Status combine(void *acc, const void *in, int64_t count, DType dtype,
               ReduceKind kind) {
  switch (dtype) {
  case DType::kF32: combineAs<float>(acc, in, count, kind); break;
  case DType::kF64: combineAs<double>(acc, in, count, kind); break;
  case DType::kI8: combineAs<int8_t>(acc, in, count, kind); break;
  case DType::kI16: combineAs<int16_t>(acc, in, count, kind); break;
  case DType::kI32: combineAs<int32_t>(acc, in, count, kind); break;
  case DType::kI64: combineAs<int64_t>(acc, in, count, kind); break;
  case DType::kU8: combineAs<uint8_t>(acc, in, count, kind); break;
  case DType::kU16: combineAs<uint16_t>(acc, in, count, kind); break;
  case DType::kU32: combineAs<uint32_t>(acc, in, count, kind); break;
  case DType::kU64: combineAs<uint64_t>(acc, in, count, kind); break;
  case DType::kBool: {
    // Stored as bytes; any non-zero byte is true.
    uint8_t *a = static_cast<uint8_t *>(acc);
    const uint8_t *b = static_cast<const uint8_t *>(in);
    if (kind == ReduceKind::kSum || kind == ReduceKind::kMax)
      for (int64_t i = 0; i < count; ++i)
        a[i] = (a[i] | b[i]) != 0;
    else
      for (int64_t i = 0; i < count; ++i)
        a[i] = a[i] != 0 && b[i] != 0;
    break;
  }
  default:
    return internalError("no host reduction for element type ",
                         dtypeName(dtype));
  }
  return Status::ok();
}

void widenHalf(const void *in, float *out, int64_t count, DType dtype) {
  const uint16_t *h = static_cast<const uint16_t *>(in);
  if (dtype == DType::kF16)
    for (int64_t i = 0; i < count; ++i)
      out[i] = halfToFloat(h[i]);
  else
    for (int64_t i = 0; i < count; ++i)
      out[i] = bf16ToFloat(h[i]);
}

void narrowHalf(const float *in, void *out, int64_t count, DType dtype) {
  uint16_t *h = static_cast<uint16_t *>(out);
  if (dtype == DType::kF16)
    for (int64_t i = 0; i < count; ++i)
      h[i] = floatToHalf(in[i]);
  else
    for (int64_t i = 0; i < count; ++i)
      h[i] = floatToBf16(in[i]);
}

} // namespace dtcc::runtime::comm
