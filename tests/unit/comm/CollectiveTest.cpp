//===- CollectiveTest.cpp - every collective in every dtype ---------------===//
//
// Each rank fills data from (rank, index) and checks the exact result it
// computes on its own from the same formula.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/comm/CommTestUtils.h"

#include <algorithm>
#include <numeric>

namespace dtcc::runtime::testing {
namespace {

/// A small integer from (rank, index): exact in every dtype, and no sum or
/// product over up to 8 ranks leaves i8's range.
double valueOf(DType dtype, ReduceKind kind, int rank, int64_t i) {
  if (dtype == DType::kBool)
    return (rank + i) % 3 == 0;
  if (kind == ReduceKind::kProd) {
    double v = (rank + i) % 2 + 1;
    return !isUnsigned(dtype) && (rank + i) % 5 == 0 ? -v : v;
  }
  double v = double((rank * 7 + i * 3) % 11);
  return isUnsigned(dtype) ? v : v - 5;
}

double reduce(DType dtype, ReduceKind kind, double a, double b) {
  if (dtype == DType::kBool)
    return (kind == ReduceKind::kSum || kind == ReduceKind::kMax)
               ? double(a != 0 || b != 0)
               : double(a != 0 && b != 0);
  switch (kind) {
  case ReduceKind::kSum: return a + b;
  case ReduceKind::kProd: return a * b;
  case ReduceKind::kMax: return std::max(a, b);
  case ReduceKind::kMin: return std::min(a, b);
  }
  return 0;
}

std::vector<double> valuesOf(DType dtype, ReduceKind kind, int rank,
                             int64_t count, int64_t offset = 0) {
  std::vector<double> v(count);
  for (int64_t i = 0; i < count; ++i)
    v[i] = valueOf(dtype, kind, rank, offset + i);
  return v;
}

/// The reduction over the world ranks `ranks` of element `i`.
double expectedReduction(DType dtype, ReduceKind kind,
                         const std::vector<int> &ranks, int64_t i) {
  double acc = valueOf(dtype, kind, ranks[0], i);
  for (size_t r = 1; r < ranks.size(); ++r)
    acc = reduce(dtype, kind, acc, valueOf(dtype, kind, ranks[r], i));
  return acc;
}

const ReduceKind kKinds[] = {ReduceKind::kSum, ReduceKind::kMax,
                             ReduceKind::kMin, ReduceKind::kProd};

std::string label(DType dtype, ReduceKind kind) {
  return strCat(dtypeName(dtype), " ", reduceKindName(kind));
}

TEST(Collectives, WorldMatchesLauncher) {
  World &w = testWorld();
  Communicator &c = w.world();
  EXPECT_EQ(c.rank(), w.rank());
  EXPECT_EQ(c.size(), w.size());
  EXPECT_EQ(c.name(), "world");
  std::vector<int> ranks(w.size());
  std::iota(ranks.begin(), ranks.end(), 0);
  EXPECT_EQ(c.worldRanks(), ranks);
  auto launch = detectLaunch();
  ASSERT_TRUE(launch.isOk()) << launch.status().toString();
  EXPECT_EQ(launch.value().launcher, w.launcher());
  EXPECT_EQ(w.describe(), strCat("rank ", w.rank()));
  EXPECT_TRUE(c.barrier().isOk());
}

// An odd count: the ring's blocks are uneven.
TEST(Collectives, AllReduceEveryDTypeAndKind) {
  Communicator &c = testWorld().world();
  const int64_t count = 37;
  for (DType dtype : allDTypes())
    for (ReduceKind kind : kKinds) {
      auto in = pack(dtype, valuesOf(dtype, kind, c.rank(), count));
      std::vector<uint8_t> out(in.size(), 0xcd);
      Status s = c.allReduce(in.data(), out.data(), count, dtype, kind);
      ASSERT_TRUE(s.isOk()) << s.toString();
      std::vector<double> expected(count);
      for (int64_t i = 0; i < count; ++i)
        expected[i] = expectedReduction(dtype, kind, c.worldRanks(), i);
      expectValues(expected, unpack(dtype, out.data(), count),
                   label(dtype, kind));
      // In place.
      ASSERT_TRUE(c.allReduce(in.data(), in.data(), count, dtype, kind).isOk());
      expectValues(expected, unpack(dtype, in.data(), count),
                   label(dtype, kind) + " in place");
    }
}

TEST(Collectives, AllReduceLargeMessage) {
  Communicator &c = testWorld().world();
  const int64_t count = (int64_t(1) << 21) + 3; // 8 MiB of f32
  std::vector<float> data(count);
  for (int64_t i = 0; i < count; ++i)
    data[i] = float((c.rank() + i) % 1000);
  ASSERT_TRUE(c.allReduce(data.data(), data.data(), count, DType::kF32,
                          ReduceKind::kSum)
                  .isOk());
  int64_t bad = 0;
  for (int64_t i = 0; i < count; ++i) {
    double e = 0;
    for (int r = 0; r < c.size(); ++r)
      e += (r + i) % 1000;
    bad += data[i] != float(e);
  }
  EXPECT_EQ(bad, 0);
}

TEST(Collectives, AllGatherEveryDType) {
  Communicator &c = testWorld().world();
  const int64_t count = 5;
  const int n = c.size();
  for (DType dtype : allDTypes()) {
    auto in = pack(dtype, valuesOf(dtype, ReduceKind::kSum, c.rank(), count));
    std::vector<uint8_t> out(in.size() * n);
    ASSERT_TRUE(c.allGather(in.data(), out.data(), count, dtype).isOk());
    std::vector<double> expected;
    for (int r = 0; r < n; ++r) {
      auto v = valuesOf(dtype, ReduceKind::kSum, r, count);
      expected.insert(expected.end(), v.begin(), v.end());
    }
    expectValues(expected, unpack(dtype, out.data(), count * n),
                 dtypeName(dtype));
    // In place: this rank's block already sits in the output.
    std::vector<uint8_t> inPlace(out.size(), 0);
    std::memcpy(inPlace.data() + c.rank() * in.size(), in.data(), in.size());
    ASSERT_TRUE(c.allGather(inPlace.data() + c.rank() * in.size(),
                            inPlace.data(), count, dtype)
                    .isOk());
    EXPECT_EQ(inPlace, out) << dtypeName(dtype) << " in place";
  }
}

TEST(Collectives, ReduceScatterEveryDTypeAndKind) {
  Communicator &c = testWorld().world();
  const int64_t count = 6;
  const int n = c.size();
  for (DType dtype : allDTypes())
    for (ReduceKind kind : kKinds) {
      auto in = pack(dtype, valuesOf(dtype, kind, c.rank(), count * n));
      std::vector<uint8_t> out(count * dtypeSize(dtype));
      Status s = c.reduceScatter(in.data(), out.data(), count, dtype, kind);
      ASSERT_TRUE(s.isOk()) << s.toString();
      std::vector<double> expected(count);
      for (int64_t i = 0; i < count; ++i)
        expected[i] = expectedReduction(dtype, kind, c.worldRanks(),
                                        c.rank() * count + i);
      expectValues(expected, unpack(dtype, out.data(), count),
                   label(dtype, kind));
      // In place: the result is the first block.
      ASSERT_TRUE(
          c.reduceScatter(in.data(), in.data(), count, dtype, kind).isOk());
      expectValues(expected, unpack(dtype, in.data(), count),
                   label(dtype, kind) + " in place");
    }
}

/// Element k of the block rank `from` sends to rank `to`.
double a2aValue(int from, int to, int64_t k) {
  return from * 16 + to * 4 + k % 4;
}

TEST(Collectives, AllToAllEveryDType) {
  Communicator &c = testWorld().world();
  const int64_t count = 3;
  const int n = c.size();
  for (DType dtype : allDTypes()) {
    std::vector<double> send, expected;
    for (int to = 0; to < n; ++to)
      for (int64_t k = 0; k < count; ++k) {
        double v = a2aValue(c.rank(), to, k);
        send.push_back(dtype == DType::kBool ? (int64_t(v) % 2) : v);
      }
    for (int from = 0; from < n; ++from)
      for (int64_t k = 0; k < count; ++k) {
        double v = a2aValue(from, c.rank(), k);
        expected.push_back(dtype == DType::kBool ? (int64_t(v) % 2) : v);
      }
    auto in = pack(dtype, send);
    std::vector<uint8_t> out(in.size());
    ASSERT_TRUE(c.allToAll(in.data(), out.data(), count, dtype).isOk());
    expectValues(expected, unpack(dtype, out.data(), count * n),
                 dtypeName(dtype));
    ASSERT_TRUE(c.allToAll(in.data(), in.data(), count, dtype).isOk());
    expectValues(expected, unpack(dtype, in.data(), count * n),
                 std::string(dtypeName(dtype)) + " in place");
  }
}

TEST(Collectives, BroadcastFromEveryRoot) {
  Communicator &c = testWorld().world();
  const int64_t count = 9;
  for (DType dtype : allDTypes())
    for (int root = 0; root < c.size(); ++root) {
      auto data =
          pack(dtype, valuesOf(dtype, ReduceKind::kSum, c.rank(), count));
      ASSERT_TRUE(c.broadcast(data.data(), count, dtype, root).isOk());
      expectValues(valuesOf(dtype, ReduceKind::kSum, root, count),
                   unpack(dtype, data.data(), count),
                   strCat(dtypeName(dtype), " root ", root));
    }
}

TEST(Collectives, SendRecvRing) {
  Communicator &c = testWorld().world();
  const int n = c.size(), r = c.rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  // Large enough for MPI's rendezvous protocol: odd ranks receive first.
  for (int64_t count : {int64_t(4), int64_t(1) << 18}) {
    std::vector<int32_t> out(count), in(count, -1);
    for (int64_t i = 0; i < count; ++i)
      out[i] = int32_t(r * 1000003 + i);
    auto doSend = [&] { return c.send(out.data(), count * 4, next, 7); };
    auto doRecv = [&] { return c.recv(in.data(), count * 4, prev, 7); };
    if (r % 2 == 0) {
      ASSERT_TRUE(doSend().isOk());
      ASSERT_TRUE(doRecv().isOk());
    } else {
      ASSERT_TRUE(doRecv().isOk());
      ASSERT_TRUE(doSend().isOk());
    }
    int64_t bad = 0;
    for (int64_t i = 0; i < count; ++i)
      bad += in[i] != int32_t(prev * 1000003 + i);
    EXPECT_EQ(bad, 0) << count << " elements";
  }
}

TEST(Collectives, SendsStartBeforeTheirReceiversReceive) {
  // Every rank starts its send to the next before receiving from the
  // previous: above MPI's eager limit and the socket buffers, a send that
  // waited for its receiver would deadlock the ring.
  Communicator &c = testWorld().world();
  const int n = c.size(), r = c.rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  for (int64_t count : {int64_t(1) << 16, int64_t(1) << 21}) {
    std::vector<int32_t> out(count), in(count, -1);
    for (int64_t i = 0; i < count; ++i)
      out[i] = int32_t(r * 1000003 + i);
    auto pending = c.startSend(out.data(), count * 4, next, 9);
    ASSERT_TRUE(pending.isOk()) << pending.status().toString();
    ASSERT_TRUE(c.recv(in.data(), count * 4, prev, 9).isOk());
    if (pending.value()) {
      // Done, or finished by wait(); test() then says so too.
      ASSERT_TRUE(pending.value()->wait().isOk());
      auto done = pending.value()->test();
      ASSERT_TRUE(done.isOk()) << done.status().toString();
      EXPECT_TRUE(done.value());
    }
    int64_t bad = 0;
    for (int64_t i = 0; i < count; ++i)
      bad += in[i] != int32_t(prev * 1000003 + i);
    EXPECT_EQ(bad, 0) << count * 4 << " bytes";
  }
}

TEST(Collectives, SendsInFlightKeepTheirOrder) {
  // Three sends of one tag in flight at once (each above the eager limit)
  // arrive in the order they started.
  Communicator &c = testWorld().world();
  const int n = c.size(), r = c.rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  const int64_t count = int64_t(1) << 16;
  std::vector<std::vector<int32_t>> out(3, std::vector<int32_t>(count));
  std::vector<std::unique_ptr<PendingSend>> pending;
  for (int k = 0; k < 3; ++k) {
    for (int64_t i = 0; i < count; ++i)
      out[k][i] = int32_t(r * 1000003 + k * 100 + i);
    auto p = c.startSend(out[k].data(), count * 4, next, 11);
    ASSERT_TRUE(p.isOk()) << p.status().toString();
    pending.push_back(std::move(p.value()));
  }
  for (int k = 0; k < 3; ++k) {
    std::vector<int32_t> in(count, -1);
    ASSERT_TRUE(c.recv(in.data(), count * 4, prev, 11).isOk());
    EXPECT_EQ(in[0], int32_t(prev * 1000003 + k * 100)) << "message " << k;
    EXPECT_EQ(in[count - 1], int32_t(prev * 1000003 + k * 100 + count - 1))
        << "message " << k;
  }
  for (auto &p : pending)
    if (p)
      ASSERT_TRUE(p->wait().isOk());
}

TEST(Collectives, RecvMatchesTagsOutOfOrder) {
  Communicator &c = testWorld().world();
  if (c.size() < 2)
    GTEST_SKIP() << "needs two ranks";
  // Rank 0 sends tags 1, 2, 3; rank 1 receives 3, 1, 2 (small messages).
  if (c.rank() == 0) {
    for (int64_t tag : {1, 2, 3}) {
      int64_t v = tag * 11;
      ASSERT_TRUE(c.send(&v, 8, 1, tag).isOk());
    }
  } else if (c.rank() == 1) {
    for (int64_t tag : {3, 1, 2}) {
      int64_t v = 0;
      ASSERT_TRUE(c.recv(&v, 8, 0, tag).isOk());
      EXPECT_EQ(v, tag * 11);
    }
  }
  EXPECT_TRUE(c.barrier().isOk());
}

TEST(Collectives, ArgumentErrorsNameTheCommunicator) {
  Communicator &c = testWorld().world();
  float x = 0;
  Status s = c.broadcast(&x, 1, DType::kF32, c.size());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("communicator 'world': broadcast root"),
            std::string::npos)
      << s.message();
  s = c.allReduce(&x, &x, -1, DType::kF32, ReduceKind::kSum);
  EXPECT_FALSE(s.isOk());
  s = c.send(&x, 4, 0, -3);
  EXPECT_NE(s.message().find("negative message tag"), std::string::npos);
  s = c.recv(&x, 4, -1, 0);
  EXPECT_NE(s.message().find("recv peer -1 is outside"), std::string::npos);
  s = c.allGather(nullptr, &x, 1, DType::kF32);
  EXPECT_NE(s.message().find("null buffer"), std::string::npos);
  EXPECT_TRUE(
      c.allReduce(nullptr, nullptr, 0, DType::kF32, ReduceKind::kSum).isOk());
}

TEST(Collectives, ReduceKindNames) {
  for (ReduceKind k : kKinds) {
    auto parsed = parseReduceKind(reduceKindName(k));
    ASSERT_TRUE(parsed.isOk());
    EXPECT_EQ(parsed.value(), k);
  }
  EXPECT_FALSE(parseReduceKind("mean").isOk());
}

} // namespace
} // namespace dtcc::runtime::testing
