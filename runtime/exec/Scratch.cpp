//===- Scratch.cpp - device memory kernels need besides their operands ----===//

#include "runtime/exec/Scratch.h"

#include <algorithm>

namespace dtcc::runtime {

static int64_t alignUp(int64_t v, int64_t alignment) {
  return (v + alignment - 1) / alignment * alignment;
}

StatusOr<ScratchLayout> layoutScratch(const std::vector<ScratchSet> &sets) {
  ScratchLayout l;
  // Offsets inside each arena first; arenas are placed once sized.
  std::vector<std::vector<int64_t>> local;
  int64_t persistent = 0;
  for (const ScratchSet &set : sets) {
    int64_t compute = 0, comm = 0;
    std::vector<int64_t> offsets;
    for (const ScratchRequest &r : set) {
      if (r.bytes < 0)
        return invalidArgument("scratch request of ", r.bytes, " bytes");
      if (r.alignment <= 0 || (r.alignment & (r.alignment - 1)) != 0 ||
          r.alignment > kScratchAlignment)
        return invalidArgument("scratch alignment ", r.alignment,
                               " is not a power of two up to ",
                               kScratchAlignment);
      int64_t &cursor = r.use == ScratchUse::kCompute ? compute
                        : r.use == ScratchUse::kComm  ? comm
                                                      : persistent;
      cursor = alignUp(cursor, r.alignment);
      offsets.push_back(cursor);
      cursor += r.bytes;
    }
    l.computeBytes = std::max(l.computeBytes, compute);
    l.commBytes = std::max(l.commBytes, comm);
    local.push_back(std::move(offsets));
  }
  l.persistentBytes = persistent;
  l.commOffset = alignUp(l.computeBytes, kScratchAlignment);
  l.persistentOffset = alignUp(l.commOffset + l.commBytes, kScratchAlignment);
  l.totalBytes = alignUp(l.persistentOffset + l.persistentBytes,
                         kScratchAlignment);
  for (size_t s = 0; s < sets.size(); ++s) {
    for (size_t i = 0; i < sets[s].size(); ++i) {
      const ScratchUse use = sets[s][i].use;
      local[s][i] += use == ScratchUse::kCompute ? 0
                     : use == ScratchUse::kComm  ? l.commOffset
                                                 : l.persistentOffset;
    }
  }
  l.offsets = std::move(local);
  return l;
}

StatusOr<std::vector<ScratchSlot>> ScratchPlan::request(ScratchSet set) {
  if (bound_)
    return internalError("scratch requested after the reservation was made");
  std::vector<ScratchSlot> slots(set.size());
  std::vector<std::shared_ptr<void *>> addresses;
  for (ScratchSlot &slot : slots) {
    slot.address_ = std::make_shared<void *>(nullptr);
    addresses.push_back(slot.address_);
  }
  sets_.push_back(std::move(set));
  slots_.push_back(std::move(addresses));
  return slots;
}

void ScratchPlan::whenReserved(std::function<Status()> fn) {
  reserved_.push_back(std::move(fn));
}

Status ScratchPlan::bind(void *base) {
  if (bound_)
    return internalError("scratch reserved twice");
  DTCC_ASSIGN_OR_RETURN(ScratchLayout l, layout());
  if (l.totalBytes > 0 && !base)
    return internalError("no memory for ", l.totalBytes, " bytes of scratch");
  bound_ = true;
  for (size_t s = 0; s < slots_.size(); ++s)
    for (size_t i = 0; i < slots_[s].size(); ++i)
      *slots_[s][i] = l.totalBytes == 0
                          ? nullptr
                          : static_cast<char *>(base) + l.offsets[s][i];
  for (const std::function<Status()> &fn : reserved_)
    DTCC_RETURN_IF_ERROR(fn());
  return Status::ok();
}

} // namespace dtcc::runtime
