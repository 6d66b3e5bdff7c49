//===- Scratch.h - device memory kernels need besides their operands -*- C++ -*-===//
//
// Memory outside the compiler's static plan that a kernel needs (staging of
// a collective, partial sums, a library's workspace, a table the kernel
// reads) is declared by the kernel's factory when it is bound, and reserved
// by the device once, after every instruction of the program is bound and
// before anything runs: no allocation happens while a program runs (on a
// GPU a cudaMalloc can deadlock with NCCL communicators in flight).
// Requests that cannot be live at once share memory: a kernel's scratch on
// the compute stream is used only while that kernel runs, and the compute
// stream runs one kernel at a time, so one compute arena sized by the
// largest instruction serves them all; the same holds for the staging of
// collectives on the communication stream. The arithmetic is pure, so the
// planner reserves exactly what the runtime does (planner/ProgramModel).
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_EXEC_SCRATCH_H
#define DTCC_RUNTIME_EXEC_SCRATCH_H

#include "runtime/base/Status.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dtcc::runtime {

/// Who uses a scratch region, which decides what it may share.
enum class ScratchUse {
  /// Inside one kernel on the compute stream: every instruction's compute
  /// requests share one arena.
  kCompute,
  /// A collective's staging on the communication stream (collectives run
  /// there one at a time, in order): one arena shared likewise.
  kComm,
  /// Read by every run of the kernel (a table written once when the
  /// reservation is made): bytes of its own, for the program's lifetime.
  kPersistent,
};

/// The alignment of the arenas and the default of a request: cudaMalloc's.
constexpr int64_t kScratchAlignment = 256;

struct ScratchRequest {
  ScratchUse use = ScratchUse::kCompute;
  int64_t bytes = 0;
  /// A power of two; persistent requests of a small alignment made one
  /// after the other lie back to back (a table split over instructions).
  int64_t alignment = kScratchAlignment;
};

/// The requests of one instruction: used together, so they never overlap.
using ScratchSet = std::vector<ScratchRequest>;

/// Where every request lies in one reservation of `totalBytes`: the compute
/// arena at 0, then the communication arena, then the persistent regions in
/// request order, each arena at a multiple of kScratchAlignment.
struct ScratchLayout {
  int64_t computeBytes = 0, commBytes = 0, persistentBytes = 0;
  int64_t commOffset = 0, persistentOffset = 0;
  /// 0 when nothing is requested.
  int64_t totalBytes = 0;
  /// Byte offset of each request from the reservation's start, by set.
  std::vector<std::vector<int64_t>> offsets;
};

/// Lays out `sets` (in binding order): within a set, its compute requests
/// back to back (each at its alignment) from the compute arena's start, the
/// same for its communication requests; an arena is as large as its
/// largest set. Persistent requests follow each other over all sets.
/// Errors on a negative size or an alignment that is not a power of two.
StatusOr<ScratchLayout> layoutScratch(const std::vector<ScratchSet> &sets);

/// A request's memory: null until the device has made the reservation.
class ScratchSlot {
public:
  ScratchSlot() = default;
  void *get() const { return address_ ? *address_ : nullptr; }
  template <typename T> T *as() const { return static_cast<T *>(get()); }

private:
  friend class ScratchPlan;
  std::shared_ptr<void *> address_;
};

/// The scratch requests of one loaded program (Executable owns one; a
/// kernel finds it in KernelContext::scratch).
class ScratchPlan {
public:
  ScratchPlan() = default;
  ScratchPlan(const ScratchPlan &) = delete;
  ScratchPlan &operator=(const ScratchPlan &) = delete;

  /// Declares the requests of one instruction (one slot each, in order);
  /// an error once the plan is bound.
  StatusOr<std::vector<ScratchSlot>> request(ScratchSet set);
  /// Runs `fn` when the reservation is made, after every slot points into
  /// it (in registration order): a kernel writes its persistent table here,
  /// before any run.
  void whenReserved(std::function<Status()> fn);

  const std::vector<ScratchSet> &sets() const { return sets_; }
  StatusOr<ScratchLayout> layout() const { return layoutScratch(sets_); }
  /// Points every slot into memory at `base` (layout().totalBytes bytes;
  /// null when that is 0), then runs the whenReserved functions. Once.
  Status bind(void *base);
  bool bound() const { return bound_; }

private:
  std::vector<ScratchSet> sets_;
  std::vector<std::vector<std::shared_ptr<void *>>> slots_;
  std::vector<std::function<Status()>> reserved_;
  bool bound_ = false;
};

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_EXEC_SCRATCH_H
