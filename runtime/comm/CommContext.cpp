//===- CommContext.cpp ----------------------------------------------------===//

#include "runtime/comm/CommContext.h"

namespace dtcc::runtime {

CommContext::AsyncSlot *CommContext::findAsync(int64_t id) {
  auto it = async_.find(id);
  return it == async_.end() ? nullptr : &it->second;
}

std::vector<int64_t> CommContext::pendingAsync() const {
  std::vector<int64_t> ids;
  for (const auto &[id, slot] : async_)
    if (slot.pending())
      ids.push_back(id);
  return ids;
}

void *CommContext::scratch(int64_t bytes) {
  // uint64_t elements of a vector: 8-byte alignment from the allocator,
  // 64 by offsetting into one spare cache line.
  size_t words = static_cast<size_t>((bytes + 7) / 8 + 8);
  if (scratch_.size() < words)
    scratch_.assign(words, 0);
  uintptr_t p = reinterpret_cast<uintptr_t>(scratch_.data());
  return reinterpret_cast<void *>((p + 63) & ~uintptr_t(63));
}

} // namespace dtcc::runtime
