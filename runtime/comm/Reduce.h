//===- Reduce.h - element reductions for the backends -----------*- C++ -*-===//
//
// The host-side reduction of backends that reduce themselves (TCP) and the
// dtype helpers that all backends share.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_COMM_REDUCE_H
#define DTCC_RUNTIME_COMM_REDUCE_H

#include "runtime/base/DType.h"
#include "runtime/comm/Communicator.h"

namespace dtcc::runtime::comm {

/// acc[i] = acc[i] (kind) in[i] for i < count. `dtype` is any DType but f16
/// and bf16 (reduced through f32 by Communicator); bool is or (sum, max) or
/// and (min, prod); integers wrap; max and min propagate NaN.
Status combine(void *acc, const void *in, int64_t count, DType dtype,
               ReduceKind kind);

/// f16/bf16 -> f32 and back (round to nearest even).
void widenHalf(const void *in, float *out, int64_t count, DType dtype);
void narrowHalf(const float *in, void *out, int64_t count, DType dtype);

} // namespace dtcc::runtime::comm

#endif // DTCC_RUNTIME_COMM_REDUCE_H
