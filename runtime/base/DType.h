//===- DType.h - element types of runtime tensors ---------------*- C++ -*-===//
//
// Element types, numbered as ONNX's TensorProto.DataType so that files and
// programs share one encoding, plus fp16/bf16 conversions and type dispatch.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_BASE_DTYPE_H
#define DTCC_RUNTIME_BASE_DTYPE_H

#include "runtime/base/Status.h"

#include <cstdint>
#include <cstring>
#include <string>

namespace dtcc::runtime {

enum class DType : int32_t {
  kInvalid = 0,
  kF32 = 1,
  kU8 = 2,
  kI8 = 3,
  kU16 = 4,
  kI16 = 5,
  kI32 = 6,
  kI64 = 7,
  kBool = 9,
  kF16 = 10,
  kF64 = 11,
  kU32 = 12,
  kU64 = 13,
  kBF16 = 16,
};

/// Bytes per element; 0 for kInvalid.
int64_t dtypeSize(DType dtype);
/// "f32", "i64", "bool", ... (MLIR's spelling, "i1" for bool).
const char *dtypeName(DType dtype);
/// Parses dtypeName's spelling; kInvalid when unknown.
DType dtypeFromName(const std::string &name);
/// Whether `value` is one of the enumerators above.
bool isValidDType(int32_t value);
bool isFloatDType(DType dtype);
/// Whether `dtype` is f16 or bf16.
inline bool isHalfDType(DType dtype) {
  return dtype == DType::kF16 || dtype == DType::kBF16;
}
/// The significand bits of a float type, the implicit one included: 53
/// f64, 24 f32, 11 f16, 8 bf16; 0 for the others.
inline int significandBits(DType dtype) {
  switch (dtype) {
  case DType::kF64: return 53;
  case DType::kF32: return 24;
  case DType::kF16: return 11;
  case DType::kBF16: return 8;
  default: return 0;
  }
}
/// Whether `wide` is f32 and `narrow` f16 or bf16: where a kernel reads a
/// half tensor as its exact f32 cast or gives an f32 result of one
/// (sum_squares' result, adamw's gradient, cross_entropy's loss and its
/// gradient's dloss: dtcc-fold-narrow-reads).
inline bool isF32OfHalf(DType narrow, DType wide) {
  return wide == DType::kF32 && isHalfDType(narrow);
}

/// IEEE half and bfloat16 storage types; arithmetic goes through float.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

float halfToFloat(uint16_t bits);
uint16_t floatToHalf(float value);
/// `n` floats stored as `dtype` (f32, f64, or bf16 and f16 rounded to
/// nearest even) at `out`; other types are not floating and are left alone.
void storeFloats(const float *in, int64_t n, DType dtype, void *out);
inline float bf16ToFloat(uint16_t bits) {
  uint32_t u = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
/// Round to nearest even; NaN stays NaN.
inline uint16_t floatToBf16(float value) {
  uint32_t u;
  std::memcpy(&u, &value, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

template <typename T> struct TypeTag {
  using type = T;
};

/// Calls `fn(TypeTag<T>{})` for the C++ type of a numeric dtype (no bool, no
/// 16-bit floats); an error for the others.
template <typename Fn> Status dispatchNumeric(DType dtype, Fn &&fn) {
  switch (dtype) {
  case DType::kF32: fn(TypeTag<float>{}); return Status::ok();
  case DType::kF64: fn(TypeTag<double>{}); return Status::ok();
  case DType::kI8: fn(TypeTag<int8_t>{}); return Status::ok();
  case DType::kI16: fn(TypeTag<int16_t>{}); return Status::ok();
  case DType::kI32: fn(TypeTag<int32_t>{}); return Status::ok();
  case DType::kI64: fn(TypeTag<int64_t>{}); return Status::ok();
  case DType::kU8: fn(TypeTag<uint8_t>{}); return Status::ok();
  case DType::kU16: fn(TypeTag<uint16_t>{}); return Status::ok();
  case DType::kU32: fn(TypeTag<uint32_t>{}); return Status::ok();
  case DType::kU64: fn(TypeTag<uint64_t>{}); return Status::ok();
  default:
    return unimplemented("no CPU kernel for element type ", dtypeName(dtype));
  }
}

/// Like dispatchNumeric, with bool (as bool) included.
template <typename Fn> Status dispatchNumericOrBool(DType dtype, Fn &&fn) {
  if (dtype == DType::kBool) {
    fn(TypeTag<bool>{});
    return Status::ok();
  }
  return dispatchNumeric(dtype, fn);
}

/// Float types computed in their own precision (f32, f64).
template <typename Fn> Status dispatchFloat(DType dtype, Fn &&fn) {
  switch (dtype) {
  case DType::kF32: fn(TypeTag<float>{}); return Status::ok();
  case DType::kF64: fn(TypeTag<double>{}); return Status::ok();
  default:
    return unimplemented("no CPU kernel for element type ", dtypeName(dtype),
                         " (expected f32 or f64)");
  }
}

/// Integer index types (i32, i64).
template <typename Fn> Status dispatchIndex(DType dtype, Fn &&fn) {
  switch (dtype) {
  case DType::kI32: fn(TypeTag<int32_t>{}); return Status::ok();
  case DType::kI64: fn(TypeTag<int64_t>{}); return Status::ok();
  default:
    return unimplemented("expected i32 or i64 indices, got ", dtypeName(dtype));
  }
}

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_BASE_DTYPE_H
