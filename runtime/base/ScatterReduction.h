//===- ScatterReduction.h - how a scatter combines its updates --*- C++ -*-===//
//
// The `reduction` of dgraph.scatter_nd and dgraph.scatter_elements, shared by
// the CPU and CUDA kernels (plain C++: the CUDA kernels' .cu files use it).
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_BASE_SCATTERREDUCTION_H
#define DTCC_RUNTIME_BASE_SCATTERREDUCTION_H

#include <cstdint>

namespace dtcc::runtime {

enum class ScatterReduction : int32_t { kNone, kAdd, kMul, kMax, kMin };

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_BASE_SCATTERREDUCTION_H
