//===- AdamwGroup.cpp - consecutive adamw instructions run as one --------===//

#include "runtime/device/AdamwGroup.h"

namespace dtcc::runtime {
namespace {

bool anyOverlap(const std::vector<ByteRange> &a,
                const std::vector<ByteRange> &b) {
  for (const ByteRange &x : a)
    for (const ByteRange &y : b)
      if (x.overlaps(y))
        return true;
  return false;
}

} // namespace

ByteRange byteRange(const void *p, int64_t bytes) {
  const uintptr_t b = reinterpret_cast<uintptr_t>(p);
  return {b, b + uintptr_t(bytes > 0 ? bytes : 0)};
}

bool canJoinAdamwGroup(const std::vector<AdamwAccess> &group,
                       const AdamwAccess &next) {
  if (group.empty())
    return true;
  const AdamwAccess &first = group.front();
  if (next.paramType != first.paramType || next.gradType != first.gradType ||
      next.roundedType != first.roundedType || next.beta1 != first.beta1 ||
      next.beta2 != first.beta2 || next.eps != first.eps ||
      next.weightDecay != first.weightDecay || next.lr != first.lr ||
      next.step != first.step || next.gradScale != first.gradScale)
    return false;
  for (const AdamwAccess &m : group)
    if (anyOverlap(m.writes, next.reads) || anyOverlap(m.writes, next.writes) ||
        anyOverlap(m.reads, next.writes))
      return false;
  return true;
}

} // namespace dtcc::runtime
