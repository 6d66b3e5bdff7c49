//===- WatchList.cpp - what the NCCL watchdog follows ---------------------===//

#include "runtime/comm/nccl/WatchList.h"

#include <algorithm>

namespace dtcc::runtime {

void WatchList::add(const void *event, std::string description,
                    Clock::time_point deadline) {
  for (Entry &e : entries_)
    if (e.event == event) {
      e.description = std::move(description);
      e.deadline = deadline;
      return;
    }
  entries_.push_back({event, std::move(description), deadline});
}

void WatchList::forget(const void *event) {
  entries_.erase(std::remove_if(entries_.begin(), entries_.end(),
                                [&](const Entry &e) { return e.event == event; }),
                 entries_.end());
}

std::optional<WatchList::Entry>
WatchList::sweep(const std::function<bool(const void *)> &done,
                 Clock::time_point now) {
  entries_.erase(std::remove_if(entries_.begin(), entries_.end(),
                                [&](const Entry &e) { return done(e.event); }),
                 entries_.end());
  auto oldest = std::min_element(
      entries_.begin(), entries_.end(),
      [](const Entry &a, const Entry &b) { return a.deadline < b.deadline; });
  if (oldest == entries_.end() || oldest->deadline >= now)
    return std::nullopt;
  return *oldest;
}

} // namespace dtcc::runtime
