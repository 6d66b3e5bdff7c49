//===- CommQueue.cpp - the communication thread and its watchdog ----------===//
//
// The state lives in a shared block that both threads co-own, so that a
// queue whose thread is stuck in a collective can be detached safely.
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/CommQueue.h"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

namespace dtcc::runtime {

using Clock = std::chrono::steady_clock;

namespace {
std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", s);
  return buf;
}
Clock::duration toDuration(double s) {
  return std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(s));
}
} // namespace

struct CommQueue::State {
  struct Op {
    Handle handle;
    std::function<StatusOr<Poll>()> start;
  };
  /// An operation in flight; only the worker touches these.
  struct Started {
    Handle handle;
    Poll poll;
  };

  std::string who;
  AbortFn abort;
  mutable std::mutex mu;
  std::condition_variable workCv, doneCv, dogCv;
  std::deque<Op> pending;
  /// Descriptions of the operations not yet waited for.
  std::map<Handle, std::string> descriptions;
  std::map<Handle, Status> done;
  /// When each operation in flight started (for the watchdog).
  std::map<Handle, Clock::time_point> inFlight;
  Handle next = 1;
  Handle running = 0;
  Clock::time_point runningSince;
  bool stopping = false, exited = false, stopped = false;
  double timeout = kDefaultTimeoutSeconds;
  double grace = kDefaultWatchdogGraceSeconds;
  std::thread worker, watchdog;

  void work();
  void watch();
  /// Polls every operation in `started` once (without mu), records those
  /// that finished and drops them; whether any did.
  bool pollStarted(std::vector<Started> &started,
                   std::unique_lock<std::mutex> &lock);
  /// Records the result of `handle` (with mu held).
  void finish(Handle handle, Status status);
  /// The operation running or in flight for the longest time, and since
  /// when; 0 when none (with mu held).
  std::pair<Handle, Clock::time_point> oldest() const;
  /// The timeout message for `handle` (with mu held).
  Status timedOut(Handle handle, double waited) const;
};

/// How long the worker sleeps between polls of operations in flight when
/// it has nothing else to do, after `idle` polls that finished nothing:
/// from 20 us (a peer that is about to receive) up to 1 ms (one that
/// computes for a while).
static Clock::duration pollInterval(int idle) {
  return std::chrono::microseconds(std::min(1000, 20 << std::min(idle, 6)));
}

void CommQueue::State::finish(Handle handle, Status status) {
  if (!status.isOk())
    status = status.withContext(who + ": " + descriptions[handle]);
  done[handle] = std::move(status);
  doneCv.notify_all();
}

bool CommQueue::State::pollStarted(std::vector<Started> &started,
                                   std::unique_lock<std::mutex> &lock) {
  if (started.empty())
    return false;
  lock.unlock();
  std::vector<std::pair<Handle, Status>> finished;
  for (size_t i = 0; i < started.size();) {
    StatusOr<bool> r = started[i].poll();
    if (r.isOk() && !r.value()) {
      ++i;
      continue;
    }
    finished.push_back(
        {started[i].handle, r.isOk() ? Status::ok() : r.status()});
    started.erase(started.begin() + i); // releases the poll's captures
  }
  lock.lock();
  for (auto &[handle, status] : finished) {
    inFlight.erase(handle);
    finish(handle, std::move(status));
  }
  if (!finished.empty())
    dogCv.notify_all();
  return !finished.empty();
}

void CommQueue::State::work() {
  std::vector<Started> started;
  int idle = 0; // polls in a row that finished nothing
  std::unique_lock<std::mutex> lock(mu);
  for (;;) {
    if (pending.empty() && !started.empty()) {
      // Only operations in flight: poll them, then sleep a little unless
      // new work comes.
      idle = pollStarted(started, lock) ? 0 : idle + 1;
      if (!started.empty())
        workCv.wait_for(lock, pollInterval(idle),
                        [&] { return !pending.empty(); });
      continue;
    }
    workCv.wait(lock, [&] { return !pending.empty() || stopping; });
    if (pending.empty()) {
      exited = true;
      doneCv.notify_all();
      dogCv.notify_all();
      return;
    }
    Op op = std::move(pending.front());
    pending.pop_front();
    running = op.handle;
    runningSince = Clock::now();
    dogCv.notify_all();
    lock.unlock();
    StatusOr<Poll> poll = op.start();
    op.start = nullptr; // release the captures before taking the lock
    lock.lock();
    running = 0;
    if (poll.isOk() && poll.value()) {
      inFlight[op.handle] = runningSince;
      started.push_back({op.handle, std::move(poll.value())});
      dogCv.notify_all();
    } else {
      finish(op.handle, poll.isOk() ? Status::ok() : poll.status());
    }
    // What was in flight may have progressed inside this operation.
    if (pollStarted(started, lock))
      idle = 0;
  }
}

std::pair<CommQueue::Handle, Clock::time_point>
CommQueue::State::oldest() const {
  Handle handle = running;
  Clock::time_point since = runningSince;
  for (const auto &[h, t] : inFlight)
    if (handle == 0 || t < since) {
      handle = h;
      since = t;
    }
  return {handle, since};
}

void CommQueue::State::watch() {
  std::unique_lock<std::mutex> lock(mu);
  while (!exited) {
    auto [watched, since] = oldest();
    if (watched == 0 || grace < 0) {
      dogCv.wait(lock);
      continue;
    }
    const Clock::time_point deadline =
        since + toDuration(timeout) + toDuration(grace);
    if (Clock::now() < deadline) {
      dogCv.wait_until(lock, deadline);
      continue;
    }
    if (oldest().first != watched)
      continue;
    // Stuck past the timeout: the peers will not come; end the job
    // rather than hang it.
    const bool sent = inFlight.count(watched) != 0;
    std::string message =
        "dtcc: " + who + ": collective " + descriptions[watched] +
        " timed out after " + seconds(timeout) + " s\n" + "dtcc: " + who +
        (sent ? ": its peer never received it (every rank must run the same "
                "sends and receives in the same order)"
              : ": a rank of its group never joined it (every rank must run "
                "the same collectives in the same order)") +
        "; ending the job (DTCC_COLLECTIVE_TIMEOUT=<seconds> or "
        "--collective-timeout change the limit)\n";
    lock.unlock();
    std::fputs(message.c_str(), stderr);
    std::fflush(stderr);
    std::fflush(stdout);
    if (abort)
      abort(kWatchdogExitCode);
    std::_Exit(kWatchdogExitCode);
  }
}

Status CommQueue::State::timedOut(Handle handle, double waited) const {
  std::string detail;
  auto it = descriptions.find(handle);
  const std::string &what = it->second;
  if (auto sent = inFlight.find(handle); sent != inFlight.end()) {
    double ran =
        std::chrono::duration<double>(Clock::now() - sent->second).count();
    detail = " (it started " + seconds(ran) +
             " s ago and is in flight: its peer has not received it)";
  } else if (running == handle) {
    double ran =
        std::chrono::duration<double>(Clock::now() - runningSince).count();
    detail = " (it has been running for " + seconds(ran) +
             " s: a rank of its group has not joined it)";
  } else if (running != 0) {
    double ran =
        std::chrono::duration<double>(Clock::now() - runningSince).count();
    auto prev = descriptions.find(running);
    detail = " (it has not started: the communication thread is still in " +
             (prev == descriptions.end() ? std::string("an earlier operation")
                                         : prev->second) +
             ", running for " + seconds(ran) + " s)";
  }
  return deadlineExceeded(
      who, ": collective ", what, " timed out after ", seconds(waited), " s",
      detail,
      ". Every rank of the group must run the same collectives in the same "
      "order; a rank that exited, crashed or is busy elsewhere keeps the "
      "others waiting (DTCC_COLLECTIVE_TIMEOUT=<seconds> changes the limit)");
}

CommQueue::CommQueue(std::string who, AbortFn abort)
    : state_(std::make_shared<State>()) {
  state_->who = std::move(who);
  state_->abort = std::move(abort);
  // The threads co-own the state: a detached, stuck thread stays valid.
  std::shared_ptr<State> s = state_;
  state_->worker = std::thread([s] { s->work(); });
  state_->watchdog = std::thread([s] { s->watch(); });
}

CommQueue::~CommQueue() { stop(); }

CommQueue::Handle CommQueue::submit(std::string description,
                                    std::function<Status()> fn) {
  return submitStarted(std::move(description),
                       [fn = std::move(fn)]() -> StatusOr<Poll> {
                         DTCC_RETURN_IF_ERROR(fn());
                         return Poll();
                       });
}

CommQueue::Handle
CommQueue::submitStarted(std::string description,
                         std::function<StatusOr<Poll>()> start) {
  std::lock_guard<std::mutex> lock(state_->mu);
  assert(!state_->stopping && "submit after stop");
  Handle h = state_->next++;
  state_->descriptions[h] = std::move(description);
  state_->pending.push_back({h, std::move(start)});
  state_->workCv.notify_one();
  return h;
}

Status CommQueue::wait(Handle handle) {
  // With the watchdog on, it reports a stuck operation and ends the job;
  // the wait only backs it up.
  double grace = watchdogGrace();
  return waitFor(handle,
                 grace < 0 ? timeout() : timeout() + grace + kWaitSlackSeconds);
}

Status CommQueue::waitFor(Handle handle, double timeoutSeconds) {
  State &s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  if (!s.descriptions.count(handle))
    return internalError(s.who, ": waiting for unknown collective handle ",
                         handle, " (never submitted, or already waited)");
  auto ready = [&] { return s.done.count(handle) != 0; };
  if (!s.doneCv.wait_for(lock, toDuration(timeoutSeconds), ready))
    return s.timedOut(handle, timeoutSeconds);
  Status status = std::move(s.done[handle]);
  s.done.erase(handle);
  s.descriptions.erase(handle);
  return status;
}

Status CommQueue::run(std::string description, std::function<Status()> fn) {
  return wait(submit(std::move(description), std::move(fn)));
}

void CommQueue::setTimeout(double seconds) {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (seconds > 0)
    state_->timeout = seconds;
  state_->dogCv.notify_all();
}

double CommQueue::timeout() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->timeout;
}

void CommQueue::setWatchdogGrace(double seconds) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->grace = seconds;
  state_->dogCv.notify_all();
}

double CommQueue::watchdogGrace() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->grace;
}

bool CommQueue::stuck() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  auto [handle, since] = state_->oldest();
  return handle != 0 && Clock::now() - since > toDuration(state_->timeout);
}

bool CommQueue::stop() {
  State &s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  if (s.stopped)
    return s.exited;
  s.stopped = s.stopping = true;
  s.workCv.notify_all();
  bool exited =
      s.doneCv.wait_for(lock, toDuration(s.timeout), [&] { return s.exited; });
  s.dogCv.notify_all();
  lock.unlock();
  if (!exited) {
    // Stuck in a collective: leave both threads to the process's end (the
    // watchdog still fires if the process lingers).
    s.worker.detach();
    s.watchdog.detach();
    return false;
  }
  s.worker.join();
  s.watchdog.join();
  return true;
}

StatusOr<double> CommQueue::timeoutFromEnvironment(double fallback) {
  const char *v = std::getenv("DTCC_COLLECTIVE_TIMEOUT");
  if (!v || !*v)
    return fallback;
  char *end = nullptr;
  double t = std::strtod(v, &end);
  if (*end != '\0' || !(t > 0) || t > 1e9)
    return invalidArgument("DTCC_COLLECTIVE_TIMEOUT expects a positive number "
                           "of seconds, got '",
                           v, "'");
  return t;
}

} // namespace dtcc::runtime
