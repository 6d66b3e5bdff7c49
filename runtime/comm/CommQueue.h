//===- CommQueue.h - the communication thread and its watchdog --*- C++ -*-===//
//
// Like a CUDA communication stream: collectives run on one thread per
// process in submission order, callers wait on handles with a timeout, and a
// watchdog ends the job when an operation stays stuck past it. Sends start
// in that order but finish later, so that they never hold the thread.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_COMM_COMMQUEUE_H
#define DTCC_RUNTIME_COMM_COMMQUEUE_H

#include "runtime/base/Status.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace dtcc::runtime {

/// Runs operations (collectives) on a thread of its own, one at a time, in
/// the order submitted. An operation may also leave work in flight (a send
/// handed to the transport, see submitStarted): the thread goes on with the
/// next operations and polls it while idle and after each operation, and
/// its handle completes when the poll says so. When an operation runs (or
/// stays in flight) longer than timeout +
/// watchdog grace (default 0), the watchdog prints
///   dtcc: rank 2: collective <description> timed out after 5 s
/// and calls the abort function (the job ends non-zero), whether or not
/// anyone waits: a blocked MPI call cannot be cancelled. With the watchdog
/// off (negative grace), wait() gives up after the timeout with a
/// deadlineExceeded Status naming the operation and this rank instead.
class CommQueue {
public:
  using Handle = uint64_t;
  /// Ends the process (or the job) with an exit code; must not return.
  using AbortFn = std::function<void(int exitCode)>;

  static constexpr double kDefaultTimeoutSeconds = 300;
  static constexpr double kDefaultWatchdogGraceSeconds = 0;
  /// How much longer than the watchdog wait() waits before giving up.
  static constexpr double kWaitSlackSeconds = 10;
  /// The exit code of a job ended by the watchdog (as timeout(1)'s).
  static constexpr int kWatchdogExitCode = 124;
  /// The exit code of a rank that failed because another rank of the job
  /// did (a kPeerLost error): the cause is elsewhere. EX_TEMPFAIL's.
  static constexpr int kPeerLostExitCode = 75;

  /// `who` names this process in messages ("rank 2").
  explicit CommQueue(std::string who, AbortFn abort = {});
  /// stop(), then detaches a stuck thread rather than blocking.
  ~CommQueue();
  CommQueue(const CommQueue &) = delete;
  CommQueue &operator=(const CommQueue &) = delete;

  /// What a started operation left in flight: called on the communication
  /// thread, never blocking; true once the operation is complete, an error
  /// to fail it.
  using Poll = std::function<StatusOr<bool>()>;

  /// Queues `fn`; `description` says what it is in messages: the collective,
  /// its group, its ONNX node and size, as in
  /// `all_reduce over axis dp (node "/h.0/mlp/fc1/MatMul", 4096 bytes)`.
  Handle submit(std::string description, std::function<Status()> fn);
  /// Queues an operation that starts on the communication thread and may
  /// finish later: `start` returns the Poll of what it left in flight, or a
  /// null Poll when it is done. The operations after it run meanwhile. The
  /// handle completes when the Poll returns true (or an error); until then
  /// the operation counts as running for the watchdog, stuck() and
  /// timeouts, from the moment it started.
  Handle submitStarted(std::string description,
                       std::function<StatusOr<Poll>()> start);
  /// Waits for `handle` (see the class comment for how long); returns fn's
  /// Status (prefixed with who and the description), or deadlineExceeded. Each
  /// handle may be waited once it has completed; a timed-out wait may be
  /// repeated.
  Status wait(Handle handle);
  Status waitFor(Handle handle, double timeoutSeconds);
  /// submit() then wait().
  Status run(std::string description, std::function<Status()> fn);

  /// The wait timeout in seconds (positive; default 300, or
  /// DTCC_COLLECTIVE_TIMEOUT through World::init).
  void setTimeout(double seconds);
  double timeout() const;
  /// Seconds past the timeout before the watchdog aborts (default 0);
  /// negative: no watchdog.
  void setWatchdogGrace(double seconds);
  double watchdogGrace() const;

  /// Whether an operation has been running (or in flight) longer than the
  /// timeout.
  bool stuck() const;
  /// Finishes the queued operations and those in flight and ends the
  /// thread; false (the thread is left running, detached) when they do not
  /// finish within the timeout.
  /// Submitting after stop() is a bug.
  bool stop();

  /// The timeout of DTCC_COLLECTIVE_TIMEOUT (seconds, > 0); `fallback`
  /// when unset, an error when malformed.
  static StatusOr<double> timeoutFromEnvironment(double fallback);

  struct State;

private:
  std::shared_ptr<State> state_;
};

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_COMM_COMMQUEUE_H
