//===- CommContext.h - what collective kernels see of the mesh --*- C++ -*-===//
//
// Given to kernel factories through KernelContext::comm when a program runs
// on a mesh: the axis communicators, the communication thread, the handles
// of asynchronous collectives by id, and scratch memory for the comm thread.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_COMM_COMMCONTEXT_H
#define DTCC_RUNTIME_COMM_COMMCONTEXT_H

#include "runtime/comm/CommQueue.h"
#include "runtime/comm/Communicator.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dtcc::runtime {

/// The communication state of one loaded program. Used from the thread that
/// runs the program, except scratch() (see there). `mesh` and `queue` must
/// outlive it; it must outlive the Executable that uses it.
class CommContext {
public:
  CommContext(const MeshComms &mesh, CommQueue &queue)
      : mesh_(mesh), queue_(queue) {}
  CommContext(const CommContext &) = delete;
  CommContext &operator=(const CommContext &) = delete;

  const MeshComms &mesh() const { return mesh_; }
  CommQueue &queue() const { return queue_; }
  /// The communicator of `axes` (mesh order), or an error listing the
  /// mesh's axes.
  StatusOr<Communicator *> group(const std::vector<std::string> &axes) const {
    return mesh_.group(axes);
  }

  /// An asynchronous collective in flight, by its `handle` id. The CPU
  /// backend keeps the communication thread's handle; a device that runs
  /// collectives on streams of its own (CUDA) keeps what it needs in
  /// `device` (its end event, destroyed with the context) and marks the
  /// slot `deviceStarted` from start to wait. Either way the end-of-function
  /// check (pendingAsync) sees it.
  struct AsyncSlot {
    std::optional<CommQueue::Handle> handle; ///< set from start to wait
    bool deviceStarted = false;              ///< the device's, likewise
    std::string description;                 ///< of the starting kernel
    std::shared_ptr<void> device;
    bool pending() const { return handle.has_value() || deviceStarted; }
  };
  /// The slot of `id`, created by the factory of the starting kernel.
  AsyncSlot &declareAsync(int64_t id) { return async_[id]; }
  /// The slot of `id`; null when no starting kernel declared it.
  AsyncSlot *findAsync(int64_t id);
  /// The ids started and not yet waited for (pending()).
  std::vector<int64_t> pendingAsync() const;

  /// At least `bytes` of 64-byte-aligned memory, reused across calls: only
  /// for functions running on the communication thread (which runs one at a
  /// time), valid until the next call.
  void *scratch(int64_t bytes);

private:
  const MeshComms &mesh_;
  CommQueue &queue_;
  std::map<int64_t, AsyncSlot> async_;
  std::vector<uint64_t> scratch_;
};

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_COMM_COMMCONTEXT_H
