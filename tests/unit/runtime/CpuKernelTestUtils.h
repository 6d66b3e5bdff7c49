//===- CpuKernelTestUtils.h - tensors and references for kernel tests -----===//
//
// Host tensors of any dtype read and written as double/int64, strided
// operand views, a kernel runner through the registry and comparisons.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_TESTS_UNIT_RUNTIME_CPUKERNELTESTUTILS_H
#define DTCC_TESTS_UNIT_RUNTIME_CPUKERNELTESTUTILS_H

#include "runtime/base/DType.h"
#include "runtime/exec/Kernel.h"

#include <gtest/gtest.h>

#include <dirent.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace dtcc::runtime::test {

/// The threads of this process (/proc/self/task).
inline int processThreadCount() {
  DIR *dir = opendir("/proc/self/task");
  int n = 0;
  while (dirent *e = readdir(dir))
    if (e->d_name[0] != '.')
      ++n;
  closedir(dir);
  return n;
}

inline int64_t numelOf(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

inline bool isIntDType(DType d) {
  return !isFloatDType(d) && d != DType::kBool;
}
inline bool isUnsignedDType(DType d) {
  return d == DType::kU8 || d == DType::kU16 || d == DType::kU32 ||
         d == DType::kU64;
}

/// A host tensor; elements are read and written through double or int64.
struct Tensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint64_t> storage; // 8-byte aligned bytes

  Tensor() = default;
  Tensor(DType d, std::vector<int64_t> s, uint8_t fillByte = 0)
      : dtype(d), shape(std::move(s)) {
    storage.assign((numel() * dtypeSize(d) + 7) / 8 + 1, 0);
    std::memset(storage.data(), fillByte, storage.size() * 8);
  }
  /// An output buffer filled with a garbage pattern (kernels must not rely
  /// on zero-initialized outputs).
  static Tensor output(DType d, std::vector<int64_t> s) {
    return Tensor(d, std::move(s), 0xA5);
  }

  int64_t numel() const { return numelOf(shape); }
  void *data() { return storage.data(); }
  const void *data() const { return storage.data(); }
  char *bytes() { return reinterpret_cast<char *>(storage.data()); }
  const char *bytes() const {
    return reinterpret_cast<const char *>(storage.data());
  }
  TensorView view() { return makeView(data(), dtype, shape); }

  template <typename T> T raw(int64_t i) const {
    T v;
    std::memcpy(&v, bytes() + i * sizeof(T), sizeof(T));
    return v;
  }
  template <typename T> void setRaw(int64_t i, T v) {
    std::memcpy(bytes() + i * sizeof(T), &v, sizeof(T));
  }

  int64_t getInt(int64_t i) const {
    switch (dtype) {
    case DType::kBool:
      return raw<uint8_t>(i) != 0;
    case DType::kI8:
      return raw<int8_t>(i);
    case DType::kI16:
      return raw<int16_t>(i);
    case DType::kI32:
      return raw<int32_t>(i);
    case DType::kI64:
      return raw<int64_t>(i);
    case DType::kU8:
      return raw<uint8_t>(i);
    case DType::kU16:
      return raw<uint16_t>(i);
    case DType::kU32:
      return raw<uint32_t>(i);
    case DType::kU64:
      return int64_t(raw<uint64_t>(i));
    default:
      return int64_t(get(i));
    }
  }
  /// Stores v modulo the type's width (bool: v != 0).
  void setInt(int64_t i, int64_t v) {
    switch (dtype) {
    case DType::kBool:
      setRaw<uint8_t>(i, v != 0);
      break;
    case DType::kI8:
      setRaw<int8_t>(i, int8_t(v));
      break;
    case DType::kI16:
      setRaw<int16_t>(i, int16_t(v));
      break;
    case DType::kI32:
      setRaw<int32_t>(i, int32_t(v));
      break;
    case DType::kI64:
      setRaw<int64_t>(i, v);
      break;
    case DType::kU8:
      setRaw<uint8_t>(i, uint8_t(v));
      break;
    case DType::kU16:
      setRaw<uint16_t>(i, uint16_t(v));
      break;
    case DType::kU32:
      setRaw<uint32_t>(i, uint32_t(v));
      break;
    case DType::kU64:
      setRaw<uint64_t>(i, uint64_t(v));
      break;
    default:
      set(i, double(v));
      break;
    }
  }
  double get(int64_t i) const {
    switch (dtype) {
    case DType::kF32:
      return raw<float>(i);
    case DType::kF64:
      return raw<double>(i);
    case DType::kF16:
      return halfToFloat(raw<uint16_t>(i));
    case DType::kBF16:
      return bf16ToFloat(raw<uint16_t>(i));
    default:
      return double(getInt(i));
    }
  }
  /// Floats round to the dtype; integers must be integral and in int64.
  void set(int64_t i, double v) {
    switch (dtype) {
    case DType::kF32:
      setRaw<float>(i, float(v));
      break;
    case DType::kF64:
      setRaw<double>(i, v);
      break;
    case DType::kF16:
      setRaw<uint16_t>(i, floatToHalf(float(v)));
      break;
    case DType::kBF16:
      setRaw<uint16_t>(i, floatToBf16(float(v)));
      break;
    case DType::kBool:
      setRaw<uint8_t>(i, v != 0);
      break;
    default:
      setInt(i, int64_t(v));
      break;
    }
  }
};

/// Random values in [lo, hi]: uniform reals for floats (rounded to the
/// dtype), uniform integers otherwise, 0/1 for bool.
inline Tensor randomTensor(std::mt19937 &rng, DType dtype,
                           std::vector<int64_t> shape, double lo = -2,
                           double hi = 2, bool integral = false) {
  Tensor t(dtype, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (isFloatDType(dtype) && !integral) {
      t.set(i, std::uniform_real_distribution<double>(lo, hi)(rng));
    } else if (dtype == DType::kBool) {
      t.setInt(i, rng() & 1);
    } else {
      t.set(i, double(std::uniform_int_distribution<int64_t>(
                   int64_t(lo), int64_t(hi))(rng)));
    }
  }
  return t;
}

/// An operand of an elementwise kernel: a base tensor seen through strides.
struct Operand {
  Tensor base;
  std::vector<int64_t> shape, strides;
  int64_t offset = 0;
  std::string layout = "contiguous";

  TensorView view() {
    TensorView v;
    v.data = base.bytes() + offset * dtypeSize(base.dtype);
    v.dtype = base.dtype;
    v.shape = shape;
    v.strides = strides;
    return v;
  }
  int64_t position(const std::vector<int64_t> &idx) const {
    int64_t p = offset;
    for (size_t d = 0; d < idx.size(); ++d)
      p += idx[d] * strides[d];
    return p;
  }
  double at(const std::vector<int64_t> &idx) const {
    return base.get(position(idx));
  }
  int64_t atInt(const std::vector<int64_t> &idx) const {
    return base.getInt(position(idx));
  }
};

inline Operand contiguousOperand(Tensor t) {
  Operand op;
  op.shape = t.shape;
  op.strides = contiguousStrides(t.shape);
  op.base = std::move(t);
  return op;
}

/// Operands of `shape` in several layouts: contiguous, a stride-0 broadcast
/// of some dimensions, a transposed view (all dimensions reversed) and a
/// reversed-order view of the innermost dimension (negative stride).
inline std::vector<Operand> operandVariants(std::mt19937 &rng, DType dtype,
                                            const std::vector<int64_t> &shape,
                                            double lo, double hi,
                                            bool integral = false) {
  auto random = [&](const std::vector<int64_t> &s) {
    return randomTensor(rng, dtype, s, lo, hi, integral);
  };
  std::vector<Operand> out;
  out.push_back(contiguousOperand(random(shape)));
  const size_t rank = shape.size();
  if (rank == 0)
    return out;
  { // broadcast the even dimensions
    std::vector<int64_t> baseShape = shape;
    for (size_t d = 0; d < rank; d += 2)
      baseShape[d] = 1;
    Operand op = contiguousOperand(random(baseShape));
    op.shape = shape;
    for (size_t d = 0; d < rank; d += 2)
      op.strides[d] = 0;
    op.layout = "broadcast";
    out.push_back(std::move(op));
  }
  if (rank >= 2) { // transposed storage
    std::vector<int64_t> baseShape(shape.rbegin(), shape.rend());
    Operand op = contiguousOperand(random(baseShape));
    std::vector<int64_t> bs = contiguousStrides(baseShape);
    op.shape = shape;
    op.strides.assign(bs.rbegin(), bs.rend());
    op.layout = "transposed";
    out.push_back(std::move(op));
  }
  { // innermost dimension reversed
    Operand op = contiguousOperand(random(shape));
    if (shape.back() > 0) {
      op.offset = shape.back() - 1;
      op.strides.back() = -1;
      op.layout = "reversed";
      out.push_back(std::move(op));
    }
  }
  return out;
}

/// Calls fn(idx) for every multi-index of `shape` in row-major order.
inline void
forEachIndex(const std::vector<int64_t> &shape,
             const std::function<void(const std::vector<int64_t> &)> &fn) {
  const int64_t n = numelOf(shape);
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    fn(idx);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d])
        break;
      idx[d] = 0;
    }
  }
}

inline int64_t linearIndex(const std::vector<int64_t> &idx,
                           const std::vector<int64_t> &shape) {
  int64_t p = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    p = p * shape[d] + idx[d];
  return p;
}

/// The kernels under test.
const KernelRegistry &cpuRegistry();

/// Binds `name` to the operands and runs it once. The KernelContext is gone
/// before the closure runs, so closures must not keep references into it.
inline Status runKernel(const std::string &name, std::vector<TensorView> inputs,
                        std::vector<TensorView> outputs,
                        const Attrs &attrs = Attrs()) {
  KernelFn fn;
  {
    KernelContext ctx;
    ctx.kernel = name;
    ctx.location = "node_" + name;
    ctx.inputs = std::move(inputs);
    ctx.outputs = std::move(outputs);
    ctx.attrs = attrs;
    const KernelFactory *factory = cpuRegistry().find(name);
    if (!factory)
      return notFound("no kernel ", name);
    StatusOr<KernelFn> bound = (*factory)(ctx);
    if (!bound.isOk())
      return bound.status();
    fn = std::move(bound).value();
  }
  return fn();
}

/// Default tolerances of a float dtype (relative, absolute).
inline std::pair<double, double> tolerance(DType d) {
  switch (d) {
  case DType::kF64:
    return {1e-12, 1e-13};
  case DType::kF16:
    return {2.5e-3, 1e-3};
  case DType::kBF16:
    return {2e-2, 1e-2};
  default:
    return {1e-5, 1e-6};
  }
}

/// Compares every element: integers and bools exactly, floats within
/// rtol/atol (NaN matches NaN, infinities must be equal).
inline ::testing::AssertionResult tensorsClose(const Tensor &actual,
                                               const Tensor &expected,
                                               double rtol = -1,
                                               double atol = -1) {
  if (actual.shape != expected.shape || actual.dtype != expected.dtype)
    return ::testing::AssertionFailure() << "shape or dtype differs";
  if (rtol < 0) {
    rtol = tolerance(actual.dtype).first;
    atol = tolerance(actual.dtype).second;
  }
  int failures = 0;
  ::testing::AssertionResult result = ::testing::AssertionSuccess();
  std::ostringstream os;
  for (int64_t i = 0; i < actual.numel(); ++i) {
    bool ok;
    if (!isFloatDType(actual.dtype)) {
      ok = actual.getInt(i) == expected.getInt(i);
    } else {
      double a = actual.get(i), e = expected.get(i);
      if (std::isnan(e) || std::isnan(a))
        ok = std::isnan(a) && std::isnan(e);
      else if (std::isinf(e) || std::isinf(a))
        ok = a == e;
      else
        ok = std::fabs(a - e) <= atol + rtol * std::fabs(e);
    }
    if (!ok && failures++ < 8)
      os << "\n  element " << i << ": got "
         << (isFloatDType(actual.dtype) ? std::to_string(actual.get(i))
                                        : std::to_string(actual.getInt(i)))
         << ", expected "
         << (isFloatDType(actual.dtype) ? std::to_string(expected.get(i))
                                        : std::to_string(expected.getInt(i)));
  }
  if (failures)
    return ::testing::AssertionFailure()
           << failures << " of " << actual.numel() << " elements differ ("
           << dtypeName(actual.dtype) << "):" << os.str();
  return ::testing::AssertionSuccess();
}

inline std::string shapeStr(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

/// Every dtype, and subsets.
inline const std::vector<DType> &allDTypes() {
  static const std::vector<DType> v = {
      DType::kF32, DType::kF64, DType::kF16, DType::kBF16, DType::kBool,
      DType::kI8,  DType::kI16, DType::kI32, DType::kI64,  DType::kU8,
      DType::kU16, DType::kU32, DType::kU64};
  return v;
}
inline const std::vector<DType> &floatDTypes() {
  static const std::vector<DType> v = {DType::kF32, DType::kF64, DType::kF16,
                                       DType::kBF16};
  return v;
}
inline const std::vector<DType> &numericDTypes() {
  static const std::vector<DType> v = {DType::kF32,  DType::kF64, DType::kF16,
                                       DType::kBF16, DType::kI8,  DType::kI16,
                                       DType::kI32,  DType::kI64, DType::kU8,
                                       DType::kU16,  DType::kU32, DType::kU64};
  return v;
}
inline const std::vector<DType> &intDTypes() {
  static const std::vector<DType> v = {DType::kI8,  DType::kI16, DType::kI32,
                                       DType::kI64, DType::kU8,  DType::kU16,
                                       DType::kU32, DType::kU64};
  return v;
}

/// A value range for random data of `dtype` that stays inside it.
inline std::pair<double, double> defaultRange(DType d) {
  if (isUnsignedDType(d))
    return {0, 100};
  if (isIntDType(d))
    return {-100, 100};
  return {-3, 3};
}

/// The shapes elementwise tests run on: rank 0, size-1 dims, odd sizes.
inline const std::vector<std::vector<int64_t>> &elementwiseShapes() {
  static const std::vector<std::vector<int64_t>> v = {
      {}, {1}, {7}, {3, 1, 5}, {2, 3, 4}, {4, 17}, {2, 1, 3, 1, 6}};
  return v;
}

} // namespace dtcc::runtime::test

#endif // DTCC_TESTS_UNIT_RUNTIME_CPUKERNELTESTUTILS_H
