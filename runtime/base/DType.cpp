//===- DType.cpp ----------------------------------------------------------===//

#include "runtime/base/DType.h"

#include <cmath>

namespace dtcc::runtime {

int64_t dtypeSize(DType dtype) {
  switch (dtype) {
  case DType::kBool:
  case DType::kI8:
  case DType::kU8:
    return 1;
  case DType::kI16:
  case DType::kU16:
  case DType::kF16:
  case DType::kBF16:
    return 2;
  case DType::kF32:
  case DType::kI32:
  case DType::kU32:
    return 4;
  case DType::kF64:
  case DType::kI64:
  case DType::kU64:
    return 8;
  case DType::kInvalid:
    return 0;
  }
  return 0;
}

const char *dtypeName(DType dtype) {
  switch (dtype) {
  case DType::kF32: return "f32";
  case DType::kF64: return "f64";
  case DType::kF16: return "f16";
  case DType::kBF16: return "bf16";
  case DType::kBool: return "i1";
  case DType::kI8: return "i8";
  case DType::kI16: return "i16";
  case DType::kI32: return "i32";
  case DType::kI64: return "i64";
  case DType::kU8: return "ui8";
  case DType::kU16: return "ui16";
  case DType::kU32: return "ui32";
  case DType::kU64: return "ui64";
  case DType::kInvalid: return "invalid";
  }
  return "invalid";
}

DType dtypeFromName(const std::string &name) {
  for (DType d : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16,
                  DType::kBool, DType::kI8, DType::kI16, DType::kI32,
                  DType::kI64, DType::kU8, DType::kU16, DType::kU32,
                  DType::kU64})
    if (name == dtypeName(d))
      return d;
  return DType::kInvalid;
}

bool isValidDType(int32_t value) {
  switch (static_cast<DType>(value)) {
  case DType::kF32: case DType::kF64: case DType::kF16: case DType::kBF16:
  case DType::kBool: case DType::kI8: case DType::kI16: case DType::kI32:
  case DType::kI64: case DType::kU8: case DType::kU16: case DType::kU32:
  case DType::kU64:
    return true;
  default:
    return false;
  }
}

bool isFloatDType(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF64 ||
         dtype == DType::kF16 || dtype == DType::kBF16;
}

float halfToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else { // subnormal: normalize
      int shift = 0;
      while (!(mant & 0x400)) {
        mant <<= 1;
        ++shift;
      }
      mant &= 0x3ff;
      bits = sign | uint32_t(127 - 15 + 1 - shift) << 23 | mant << 13;
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t floatToHalf(float value) {
  uint32_t u;
  std::memcpy(&u, &value, 4);
  uint16_t sign = uint16_t((u >> 16) & 0x8000);
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) // NaN
    return sign | 0x7e00;
  if (absu >= 0x477ff000u) // rounds to >= 65520: infinity
    return sign | 0x7c00;
  if (absu < 0x38800000u) { // below the smallest normal half: subnormal or 0
    float f;
    std::memcpy(&f, &absu, 4);
    // Scale so the subnormal's integer mantissa is the rounded value.
    float scaled = f * 16777216.0f; // 2^24
    uint32_t m = uint32_t(std::nearbyint(scaled));
    return sign | uint16_t(m);
  }
  uint32_t mant = absu & 0x7fffff;
  uint32_t exp = (absu >> 23) - 127 + 15;
  uint32_t h = exp << 10 | mant >> 13;
  uint32_t rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
    ++h; // may carry into the exponent, which is the correct rounding
  return sign | uint16_t(h);
}

void storeFloats(const float *in, int64_t n, DType dtype, void *out) {
  switch (dtype) {
  case DType::kF32:
    std::memcpy(out, in, size_t(n) * sizeof(float));
    break;
  case DType::kF64:
    for (int64_t k = 0; k < n; ++k)
      static_cast<double *>(out)[k] = in[k];
    break;
  case DType::kBF16:
    for (int64_t k = 0; k < n; ++k)
      static_cast<uint16_t *>(out)[k] = floatToBf16(in[k]);
    break;
  case DType::kF16:
    for (int64_t k = 0; k < n; ++k)
      static_cast<uint16_t *>(out)[k] = floatToHalf(in[k]);
    break;
  default:
    break;
  }
}

} // namespace dtcc::runtime
