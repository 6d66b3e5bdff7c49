//===- AdamwGroup.h - consecutive adamw instructions run as one ----------===//
//
// A program's update is one adamw instruction per parameter tensor, bound
// one after another. Each backend runs such a run of instructions as one
// (the CUDA device as one multi-tensor launch, the CPU device as one pass
// split over its threads) when that cannot change a result: the rule here.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_ADAMWGROUP_H
#define DTCC_RUNTIME_DEVICE_ADAMWGROUP_H

#include "runtime/base/DType.h"

#include <cstdint>
#include <vector>

namespace dtcc::runtime {

/// The bytes [begin, end) of memory (host or device addresses).
struct ByteRange {
  uintptr_t begin = 0, end = 0;
  /// Whether both are non-empty and share a byte.
  bool overlaps(const ByteRange &o) const {
    return begin < end && o.begin < o.end && begin < o.end && o.begin < end;
  }
};

/// `bytes` (<= 0: none) from `p`.
ByteRange byteRange(const void *p, int64_t bytes);

/// One adamw instruction as the grouping of consecutive adamw instructions
/// sees it: what a joint run must share with it, and the memory it reads
/// and writes.
struct AdamwAccess {
  DType paramType = DType::kF32, gradType = DType::kF32;
  /// The rounded copy's type (kF32: none).
  DType roundedType = DType::kF32;
  double beta1 = 0, beta2 = 0, eps = 0, weightDecay = 0;
  /// The scalar operands (lr, step, grad_scale).
  const void *lr = nullptr, *step = nullptr, *gradScale = nullptr;
  std::vector<ByteRange> reads, writes;
};

/// Whether `next`, the adamw bound right after the members of `group`, can
/// run with them as one: the same types, hyperparameters and scalar
/// operands, and no memory that one member writes is read or written by
/// another (a joint run loses their order; a member updating its own
/// tensors in place is fine).
bool canJoinAdamwGroup(const std::vector<AdamwAccess> &group,
                       const AdamwAccess &next);

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_DEVICE_ADAMWGROUP_H
