//===- WatchList.h - what the NCCL watchdog follows -------------*- C++ -*-===//
//
// The bookkeeping of the NCCL watchdog (NcclMesh): for each communication
// it follows, the event recorded after it and the time by which that event
// must have completed. Pure (the watchdog thread supplies the event query
// and the clock), so it is tested without a GPU.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_COMM_NCCL_WATCHLIST_H
#define DTCC_RUNTIME_COMM_NCCL_WATCHLIST_H

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace dtcc::runtime {

class WatchList {
public:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    const void *event = nullptr;
    std::string description;
    Clock::time_point deadline;
  };

  /// Follows `event` until `deadline`. An event already followed (an
  /// instruction's event recorded again by its next run) takes the new
  /// description and deadline: its completion is now the new operation's.
  void add(const void *event, std::string description,
           Clock::time_point deadline);
  /// Stops following `event` (it is about to be destroyed: the watchdog
  /// must never query it again).
  void forget(const void *event);
  /// Drops every entry `done` reports complete (an event in error counts
  /// as complete: the error surfaces where the stream is synchronized),
  /// then returns the entry with the earliest deadline if that has passed
  /// at `now`.
  std::optional<Entry> sweep(const std::function<bool(const void *)> &done,
                             Clock::time_point now);
  bool empty() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }

private:
  std::vector<Entry> entries_;
};

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_COMM_NCCL_WATCHLIST_H
