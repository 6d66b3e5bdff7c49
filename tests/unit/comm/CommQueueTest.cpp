//===- CommQueueTest.cpp - the communication thread -----------------------===//
//
// Ordering, results, error context and timeout messages of a CommQueue of
// its own (no communication), and asynchronous collectives on the world's.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/comm/CommTestUtils.h"

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

namespace dtcc::runtime::testing {
namespace {

TEST(CommQueue, RunsInSubmissionOrder) {
  CommQueue queue("rank 0");
  std::vector<int> order;
  std::vector<CommQueue::Handle> handles;
  for (int i = 0; i < 100; ++i)
    handles.push_back(queue.submit("op " + std::to_string(i), [&order, i] {
      order.push_back(i);
      return Status::ok();
    }));
  // Waiting out of order is fine.
  for (int i = 99; i >= 0; --i)
    ASSERT_TRUE(queue.wait(handles[i]).isOk());
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(order[i], i);
  EXPECT_TRUE(queue.stop());
}

TEST(CommQueue, ErrorsNameTheRankAndOperation) {
  CommQueue queue("rank 2");
  Status s = queue.run("all_reduce over axis tp (node \"n\", 8 bytes)",
                       [] { return unavailable("peer gone"); });
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message(),
            "rank 2: all_reduce over axis tp (node \"n\", 8 bytes): peer gone");
  // A handle is waited once.
  CommQueue::Handle h = queue.submit("x", [] { return Status::ok(); });
  EXPECT_TRUE(queue.wait(h).isOk());
  EXPECT_EQ(queue.wait(h).code(), StatusCode::kInternal);
}

TEST(CommQueue, TimeoutNamesWhatIsStuck) {
  CommQueue queue("rank 1");
  queue.setWatchdogGrace(-1);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  CommQueue::Handle first = queue.submit(
      "all_gather over axis dp (node \"A\", 64 bytes)", [released] {
        released.wait();
        return Status::ok();
      });
  CommQueue::Handle second =
      queue.submit("broadcast over axis dp (node \"B\", 4 bytes)",
                   [] { return Status::ok(); });
  auto start = std::chrono::steady_clock::now();
  Status s = queue.waitFor(first, 0.2);
  std::chrono::duration<double> waited =
      std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited.count(), 0.19);
  EXPECT_LT(waited.count(), 5.0);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("rank 1: collective all_gather over axis dp "
                             "(node \"A\", 64 bytes) timed out after 0.2 s "
                             "(it has been running for"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("DTCC_COLLECTIVE_TIMEOUT"), std::string::npos);
  EXPECT_FALSE(queue.stuck()); // the queue's own timeout is 300 s
  s = queue.waitFor(second, 0.1);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("broadcast over axis dp (node \"B\", 4 bytes) "
                             "timed out after 0.1 s (it has not started: "
                             "the communication thread is still in "
                             "all_gather over axis dp"),
            std::string::npos)
      << s.message();
  // The operations finish once released; the timed-out waits can repeat.
  release.set_value();
  EXPECT_TRUE(queue.wait(first).isOk());
  EXPECT_TRUE(queue.wait(second).isOk());
}

TEST(CommQueue, StuckAfterTheTimeout) {
  CommQueue queue("rank 0");
  queue.setWatchdogGrace(-1);
  queue.setTimeout(0.1);
  EXPECT_EQ(queue.timeout(), 0.1);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  CommQueue::Handle h = queue.submit("op", [released] {
    released.wait();
    return Status::ok();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(queue.stuck());
  release.set_value();
  EXPECT_TRUE(queue.wait(h).isOk());
  EXPECT_FALSE(queue.stuck());
}

TEST(CommQueue, LaterOperationsRunWhileOneIsInFlight) {
  // A started operation (a send) stays in flight until its poll says done;
  // the operation after it runs meanwhile (the receive its peer waits for
  // before it receives the send).
  CommQueue queue("rank 0");
  auto received = std::make_shared<std::atomic<bool>>(false);
  std::vector<std::string> order;
  CommQueue::Handle send = queue.submitStarted(
      "send(to 1, tag 3)", [&order, received]() -> StatusOr<CommQueue::Poll> {
        order.push_back("send started");
        return CommQueue::Poll(
            [received]() -> StatusOr<bool> { return received->load(); });
      });
  CommQueue::Handle recv = queue.submit("recv(from 1, tag 3)", [&] {
    order.push_back("recv");
    return Status::ok();
  });
  ASSERT_TRUE(queue.wait(recv).isOk());
  EXPECT_EQ(queue.waitFor(send, 0.05).code(), StatusCode::kDeadlineExceeded);
  received->store(true);
  ASSERT_TRUE(queue.wait(send).isOk());
  EXPECT_EQ(order, (std::vector<std::string>{"send started", "recv"}));
  // A start that is done at once (a null poll) completes like submit().
  CommQueue::Handle now = queue.submitStarted("send(to 0, tag 1)", [] {
    return StatusOr<CommQueue::Poll>(CommQueue::Poll());
  });
  EXPECT_TRUE(queue.wait(now).isOk());
  EXPECT_TRUE(queue.stop());
}

TEST(CommQueue, InFlightErrorsAndTimeoutsNameTheOperation) {
  CommQueue queue("rank 1");
  queue.setWatchdogGrace(-1);
  int polls = 0;
  CommQueue::Handle failing = queue.submitStarted(
      "send(to 0, tag 2) over axis pp (node \"S\", 8 bytes)",
      [&polls]() -> StatusOr<CommQueue::Poll> {
        return CommQueue::Poll([&polls]() -> StatusOr<bool> {
          if (++polls < 3)
            return false;
          return unavailable("rank 0 closed its connection");
        });
      });
  Status s = queue.wait(failing);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "rank 1: send(to 0, tag 2) over axis pp (node "
                         "\"S\", 8 bytes): rank 0 closed its connection");

  auto delivered = std::make_shared<std::atomic<bool>>(false);
  CommQueue::Handle stuck = queue.submitStarted(
      "send(to 0, tag 5) over axis pp (node \"T\", 1048576 bytes)",
      [delivered]() -> StatusOr<CommQueue::Poll> {
        return CommQueue::Poll(
            [delivered]() -> StatusOr<bool> { return delivered->load(); });
      });
  s = queue.waitFor(stuck, 0.2);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("rank 1: collective send(to 0, tag 5) over axis "
                             "pp (node \"T\", 1048576 bytes) timed out after "
                             "0.2 s (it started "),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("is in flight: its peer has not received it"),
            std::string::npos)
      << s.message();
  // In flight past the queue's timeout counts as stuck, and stop() waits
  // for it.
  EXPECT_FALSE(queue.stuck());
  queue.setTimeout(0.1);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_TRUE(queue.stuck());
  std::thread later([delivered] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    delivered->store(true);
  });
  queue.setTimeout(30);
  EXPECT_TRUE(queue.stop());
  later.join();
  EXPECT_FALSE(queue.stuck());
}

TEST(CommQueue, TimeoutFromTheEnvironment) {
  unsetenv("DTCC_COLLECTIVE_TIMEOUT");
  EXPECT_EQ(CommQueue::timeoutFromEnvironment(300).value(), 300);
  setenv("DTCC_COLLECTIVE_TIMEOUT", "12.5", 1);
  EXPECT_EQ(CommQueue::timeoutFromEnvironment(300).value(), 12.5);
  for (const char *bad : {"0", "-3", "ten", "5s"}) {
    setenv("DTCC_COLLECTIVE_TIMEOUT", bad, 1);
    auto t = CommQueue::timeoutFromEnvironment(300);
    ASSERT_FALSE(t.isOk()) << bad;
    EXPECT_NE(t.status().message().find("DTCC_COLLECTIVE_TIMEOUT"),
              std::string::npos);
  }
  unsetenv("DTCC_COLLECTIVE_TIMEOUT");
}

TEST(CommQueue, AsyncCollectivesOnTheWorldQueue) {
  World &w = testWorld();
  Communicator &c = w.world();
  CommQueue &q = w.queue();
  const int n = c.size();
  std::vector<int64_t> a(1000, w.rank() + 1), b(n);
  int64_t mine = w.rank() * 3;
  // Two collectives in flight, waited in reverse order.
  CommQueue::Handle h1 = q.submit("all_reduce a", [&] {
    return c.allReduce(a.data(), a.data(), 1000, DType::kI64, ReduceKind::kSum);
  });
  CommQueue::Handle h2 = q.submit("all_gather b", [&] {
    return c.allGather(&mine, b.data(), 1, DType::kI64);
  });
  ASSERT_TRUE(q.wait(h2).isOk());
  ASSERT_TRUE(q.wait(h1).isOk());
  for (int64_t v : a)
    ASSERT_EQ(v, n * (n + 1) / 2);
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(b[r], r * 3);
}

} // namespace
} // namespace dtcc::runtime::testing
