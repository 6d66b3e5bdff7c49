//===- HostTensor.h - a tensor owned in host memory -------------*- C++ -*-===//

#ifndef DTCC_RUNTIME_BASE_HOSTTENSOR_H
#define DTCC_RUNTIME_BASE_HOSTTENSOR_H

#include "runtime/base/DType.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dtcc::runtime {

/// A contiguous row-major tensor in host memory: what files are read into
/// and outputs are copied to.
struct HostTensor {
  DType dtype = DType::kInvalid;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  HostTensor() = default;
  HostTensor(DType dtype, std::vector<int64_t> shape)
      : dtype(dtype), shape(std::move(shape)) {
    bytes.resize(numel() * dtypeSize(dtype));
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
  template <typename T> T *data() { return reinterpret_cast<T *>(bytes.data()); }
  template <typename T> const T *data() const {
    return reinterpret_cast<const T *>(bytes.data());
  }
  /// "tensor<2x3xf32>".
  std::string typeString() const { return typeString(dtype, shape); }
  static std::string typeString(DType dtype, const std::vector<int64_t> &shape) {
    std::string s = "tensor<";
    for (int64_t d : shape)
      s += std::to_string(d) + "x";
    return s + dtypeName(dtype) + ">";
  }
};

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_BASE_HOSTTENSOR_H
