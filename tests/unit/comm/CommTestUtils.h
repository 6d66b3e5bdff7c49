//===- CommTestUtils.h - the job the communication tests run in -*- C++ -*-===//
//
// The World and mesh that CommTestMain.cpp creates for every test, and
// typed fills and reads that compare numbers exactly in every dtype.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_TESTS_UNIT_COMM_COMMTESTUTILS_H
#define DTCC_TESTS_UNIT_COMM_COMMTESTUTILS_H

#include "runtime/comm/CommContext.h"
#include "runtime/comm/Communicator.h"

#include <cstdint>
#include <cstring>
#include <gtest/gtest.h>
#include <vector>

namespace dtcc::runtime::testing {

/// The job's world (every test runs on every rank, in the same order).
World &testWorld();
/// The mesh dp x tp of the job: 2 x 2 on 4 ranks, 1 x size otherwise.
const MeshComms &testMesh();
/// A CommContext over testMesh() and the world's queue.
CommContext &testComm();

/// Every dtype of runtime/base/DType.h.
inline const std::vector<DType> &allDTypes() {
  static const std::vector<DType> v = {
      DType::kF32, DType::kF64, DType::kF16, DType::kBF16, DType::kI8,
      DType::kI16, DType::kI32, DType::kI64, DType::kU8,   DType::kU16,
      DType::kU32, DType::kU64, DType::kBool};
  return v;
}

inline bool isUnsigned(DType d) {
  return d == DType::kU8 || d == DType::kU16 || d == DType::kU32 ||
         d == DType::kU64 || d == DType::kBool;
}

/// Stores small integers (exact in every dtype) as `dtype`'s bytes.
inline std::vector<uint8_t> pack(DType dtype, const std::vector<double> &v) {
  std::vector<uint8_t> out(v.size() * dtypeSize(dtype));
  for (size_t i = 0; i < v.size(); ++i) {
    void *p = out.data() + i * dtypeSize(dtype);
    double x = v[i];
    switch (dtype) {
    case DType::kF32: { float f = float(x); std::memcpy(p, &f, 4); break; }
    case DType::kF64: std::memcpy(p, &x, 8); break;
    case DType::kF16: { uint16_t h = floatToHalf(float(x)); std::memcpy(p, &h, 2); break; }
    case DType::kBF16: { uint16_t h = floatToBf16(float(x)); std::memcpy(p, &h, 2); break; }
    case DType::kI8: { int8_t t = int8_t(x); std::memcpy(p, &t, 1); break; }
    case DType::kI16: { int16_t t = int16_t(x); std::memcpy(p, &t, 2); break; }
    case DType::kI32: { int32_t t = int32_t(x); std::memcpy(p, &t, 4); break; }
    case DType::kI64: { int64_t t = int64_t(x); std::memcpy(p, &t, 8); break; }
    case DType::kU8: { uint8_t t = uint8_t(x); std::memcpy(p, &t, 1); break; }
    case DType::kU16: { uint16_t t = uint16_t(x); std::memcpy(p, &t, 2); break; }
    case DType::kU32: { uint32_t t = uint32_t(x); std::memcpy(p, &t, 4); break; }
    case DType::kU64: { uint64_t t = uint64_t(x); std::memcpy(p, &t, 8); break; }
    case DType::kBool: { uint8_t t = x != 0; std::memcpy(p, &t, 1); break; }
    default: break;
    }
  }
  return out;
}

/// The inverse of pack (bool reads as 0 or 1).
inline std::vector<double> unpack(DType dtype, const void *data,
                                  int64_t count) {
  std::vector<double> out(count);
  const uint8_t *b = static_cast<const uint8_t *>(data);
  for (int64_t i = 0; i < count; ++i) {
    const void *p = b + i * dtypeSize(dtype);
    auto get = [&](auto t) {
      decltype(t) v;
      std::memcpy(&v, p, sizeof(v));
      return v;
    };
    switch (dtype) {
    case DType::kF32: out[i] = get(float()); break;
    case DType::kF64: out[i] = get(double()); break;
    case DType::kF16: out[i] = halfToFloat(get(uint16_t())); break;
    case DType::kBF16: out[i] = bf16ToFloat(get(uint16_t())); break;
    case DType::kI8: out[i] = get(int8_t()); break;
    case DType::kI16: out[i] = get(int16_t()); break;
    case DType::kI32: out[i] = get(int32_t()); break;
    case DType::kI64: out[i] = double(get(int64_t())); break;
    case DType::kU8: out[i] = get(uint8_t()); break;
    case DType::kU16: out[i] = get(uint16_t()); break;
    case DType::kU32: out[i] = get(uint32_t()); break;
    case DType::kU64: out[i] = double(get(uint64_t())); break;
    case DType::kBool: out[i] = get(uint8_t()) != 0; break;
    default: break;
    }
  }
  return out;
}

/// Compares element by element, naming the first few mismatches.
inline void expectValues(const std::vector<double> &expected,
                         const std::vector<double> &actual,
                         const std::string &what) {
  ASSERT_EQ(expected.size(), actual.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < expected.size() && reported < 5; ++i)
    if (expected[i] != actual[i]) {
      ADD_FAILURE() << what << ": element " << i << " is " << actual[i]
                    << ", expected " << expected[i];
      ++reported;
    }
}

} // namespace dtcc::runtime::testing

#endif // DTCC_TESTS_UNIT_COMM_COMMTESTUTILS_H
