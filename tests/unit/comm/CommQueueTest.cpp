//===- CommQueueTest.cpp - the communication thread -----------------------===//
//
// Ordering, results, error context and timeout messages of a CommQueue of
// its own (no communication), and asynchronous collectives on the world's.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/comm/CommTestUtils.h"

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
