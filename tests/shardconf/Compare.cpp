//===- Compare.cpp - a sharded run's outputs against one device's ---------===//

#include "tests/shardconf/ShardConformance.h"

#include <cmath>
#include <cstring>
#include <sstream>

using namespace dtcc;
using namespace dtcc::runtime;

double dtcc::shardconf::toleranceOf(DType dtype) {
  switch (dtype) {
  case DType::kF64:
    return 1e-12;
  case DType::kF32:
    return 1e-5;
  case DType::kF16:
  case DType::kBF16:
    return 1e-2;
  default:
    return 0;
  }
}

namespace {

/// Element i of a host tensor as a double.
double element(const HostTensor &t, int64_t i) {
  switch (t.dtype) {
  case DType::kF64: return t.data<double>()[i];
  case DType::kF32: return t.data<float>()[i];
  case DType::kF16: return halfToFloat(t.data<uint16_t>()[i]);
  case DType::kBF16: return bf16ToFloat(t.data<uint16_t>()[i]);
  case DType::kI64: return double(t.data<int64_t>()[i]);
  case DType::kI32: return t.data<int32_t>()[i];
  case DType::kI16: return t.data<int16_t>()[i];
  case DType::kI8: return t.data<int8_t>()[i];
  case DType::kU64: return double(t.data<uint64_t>()[i]);
  case DType::kU32: return t.data<uint32_t>()[i];
  case DType::kU16: return t.data<uint16_t>()[i];
  case DType::kU8: return t.data<uint8_t>()[i];
  case DType::kBool: return t.data<bool>()[i] ? 1 : 0;
  default: return NAN;
  }
}

std::string index(const std::vector<int64_t> &shape, int64_t flat) {
  std::vector<int64_t> idx(shape.size());
  for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  std::ostringstream os;
  os << "[";
  for (size_t d = 0; d < idx.size(); ++d)
    os << (d ? ", " : "") << idx[d];
  os << "]";
  return os.str();
}

} // namespace

std::string dtcc::shardconf::compareOutputs(const std::vector<HostTensor> &got,
                                            const std::vector<HostTensor> &want,
                                            const std::vector<std::string> &names) {
  std::ostringstream os;
  os.precision(17);
  if (got.size() != want.size()) {
    os << got.size() << " outputs, expected " << want.size();
    return os.str();
  }
  for (size_t k = 0; k < want.size(); ++k) {
    const HostTensor &g = got[k], &w = want[k];
    const std::string name = k < names.size() ? names[k] : "output " + std::to_string(k);
    if (g.dtype != w.dtype || g.shape != w.shape) {
      os << name << ": " << g.typeString() << ", expected " << w.typeString();
      return os.str();
    }
    double tol = toleranceOf(w.dtype);
    double scale = 1;
    for (int64_t i = 0; i < w.numel(); ++i)
      if (std::isfinite(element(w, i)))
        scale = std::max(scale, std::abs(element(w, i)));
    // The largest difference; NaN against a number counts as infinite.
    double worst = 0;
    int64_t at = -1;
    for (int64_t i = 0; i < w.numel(); ++i) {
      double a = element(g, i), b = element(w, i);
      double diff;
      if (std::isnan(a) || std::isnan(b))
        diff = std::isnan(a) && std::isnan(b) ? 0 : INFINITY;
      else if (a == b)
        diff = 0; // equal infinities too
      else
        diff = std::abs(a - b);
      if (diff > worst) {
        worst = diff;
        at = i;
      }
    }
    if (at >= 0 && worst > tol * scale) {
      os << name << ": differs by " << worst << " at " << index(w.shape, at)
         << " (got " << element(g, at) << ", expected " << element(w, at)
         << "; tolerance " << tol * scale << ")";
      return os.str();
    }
  }
  return "";
}
