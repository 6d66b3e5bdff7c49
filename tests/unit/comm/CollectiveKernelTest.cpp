//===- CollectiveKernelTest.cpp - the CPU collective kernels --------------===//
//
// Each kernel over the mesh's axes (dp, tp and both) in f32, f64, i64 and
// bf16, against a reference every rank computes alone from the same
// (world rank, index) formula; then async + wait, send/recv by tag,
// axis_index and binding errors.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/comm/CommTestUtils.h"

#include "runtime/exec/Kernel.h"

#include <algorithm>
#include <functional>

namespace dtcc::runtime::testing {
namespace {

const std::vector<DType> kDTypes = {DType::kF32, DType::kF64, DType::kI64,
                                    DType::kBF16};
const std::vector<std::vector<std::string>> kGroups = {
    {"dp"}, {"tp"}, {"dp", "tp"}};
const char *kLoc = "/h.0/mlp/fc1/MatMul";

/// Small integers (exact in bf16 and their sums over 4 ranks too).
double valueAt(int worldRank, int64_t i, int salt = 0) {
  return double((worldRank * 13 + i * 7 + salt) % 17) - 8;
}

std::vector<double> valuesOf(int worldRank, int64_t count, int salt = 0) {
  std::vector<double> v(count);
  for (int64_t i = 0; i < count; ++i)
    v[i] = valueAt(worldRank, i, salt);
  return v;
}

const KernelRegistry &registry() { return cpuKernels(); }

/// A tensor in host memory and its view.
struct Tensor {
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  Tensor(DType d, std::vector<int64_t> s, const std::vector<double> &v)
      : dtype(d), shape(std::move(s)), bytes(pack(d, v)) {}
  Tensor(DType d, std::vector<int64_t> s) : dtype(d), shape(std::move(s)) {
    int64_t n = 1;
    for (int64_t x : shape)
      n *= x;
    bytes.assign(n * dtypeSize(d), 0xcd);
  }
  TensorView view() { return makeView(bytes.data(), dtype, shape); }
  std::vector<double> values() const {
    return unpack(dtype, bytes.data(), bytes.size() / dtypeSize(dtype));
  }
};

StatusOr<KernelFn> bind(const std::string &kernel, std::vector<Tensor *> in,
                        std::vector<Tensor *> out, Attrs attrs,
                        CommContext *cc) {
  KernelContext ctx;
  ctx.kernel = kernel;
  ctx.location = kLoc;
  for (Tensor *t : in)
    ctx.inputs.push_back(t->view());
  for (Tensor *t : out)
    ctx.outputs.push_back(t->view());
  ctx.attrs = std::move(attrs);
  ctx.comm = cc;
  const KernelFactory *f = registry().find(kernel);
  if (!f)
    return notFound("no kernel ", kernel);
  return (*f)(ctx);
}

/// Binds and runs; fails the test on error.
void run(const std::string &kernel, std::vector<Tensor *> in,
         std::vector<Tensor *> out, Attrs attrs,
         CommContext *cc = &testComm()) {
  auto fn = bind(kernel, in, out, std::move(attrs), cc);
  ASSERT_TRUE(fn.isOk()) << fn.status().toString();
  Status s = fn.value()();
  ASSERT_TRUE(s.isOk()) << s.toString();
}

Attrs attrsOf(
    const std::vector<std::string> &axes,
    std::initializer_list<std::pair<const char *, Attrs::Value>> kv = {}) {
  Attrs a;
  a.set("axes", axes);
  for (const auto &[k, v] : kv)
    a.set(k, v);
  return a;
}

Communicator &groupOf(const std::vector<std::string> &axes) {
  auto c = testMesh().group(axes);
  EXPECT_TRUE(c.isOk()) << c.status().toString();
  return *c.value();
}

std::string label(DType d, const std::vector<std::string> &axes) {
  std::string s = dtypeName(d);
  for (const std::string &a : axes)
    s += " " + a;
  return s;
}

double reduceRef(const std::string &kind, double a, double b) {
  if (kind == "max")
    return std::max(a, b);
  if (kind == "min")
    return std::min(a, b);
  return a + b;
}

/// out[r][c] of the row-major `rows` x `cols` concatenation along `dim` of
/// the group's [rows/n or rows] x [cols/n or cols] blocks, from `block(g)`.
std::vector<double> concat(const std::vector<std::vector<double>> &blocks,
                           int64_t rows, int64_t cols, int dim) {
  const int64_t n = blocks.size();
  std::vector<double> out;
  if (dim == 0) {
    for (const auto &b : blocks)
      out.insert(out.end(), b.begin(), b.end());
    return out;
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < n; ++g)
      for (int64_t c = 0; c < cols; ++c)
        out.push_back(blocks[g][r * cols + c]);
  return out;
}

/// Block `j` of `n` along `dim` of a rows x cols tensor.
std::vector<double> blockOf(const std::vector<double> &t, int64_t rows,
                            int64_t cols, int dim, int64_t n, int64_t j) {
  std::vector<double> out;
  if (dim == 0) {
    int64_t r0 = rows / n * j;
    out.assign(t.begin() + r0 * cols, t.begin() + (r0 + rows / n) * cols);
    return out;
  }
  const int64_t w = cols / n;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < w; ++c)
      out.push_back(t[r * cols + j * w + c]);
  return out;
}

TEST(CollectiveKernels, AllReduce) {
  for (const auto &axes : kGroups)
    for (DType d : kDTypes)
      for (const char *kind : {"sum", "max", "min"}) {
        Communicator &g = groupOf(axes);
        const int64_t count = 13;
        Tensor x(d, {count}, valuesOf(testWorld().rank(), count));
        Tensor y(d, {count});
        run("all_reduce", {&x}, {&y}, attrsOf(axes, {{"reduce", kind}}));
        std::vector<double> expected(count);
        for (int64_t i = 0; i < count; ++i) {
          expected[i] = valueAt(g.worldRanks()[0], i);
          for (size_t k = 1; k < g.worldRanks().size(); ++k)
            expected[i] =
                reduceRef(kind, expected[i], valueAt(g.worldRanks()[k], i));
        }
        expectValues(expected, y.values(), label(d, axes) + " " + kind);
        // In place: the input is the output.
        run("all_reduce", {&x}, {&x}, attrsOf(axes, {{"reduce", kind}}));
        expectValues(expected, x.values(),
                     label(d, axes) + " " + kind + " in place");
      }
}

TEST(CollectiveKernels, AllGatherAlongDim0And1) {
  const int64_t rows = 3, cols = 2;
  for (const auto &axes : kGroups)
    for (DType d : kDTypes)
      for (int dim : {0, 1}) {
        Communicator &g = groupOf(axes);
        const int64_t n = g.size();
        Tensor x(d, {rows, cols}, valuesOf(testWorld().rank(), rows * cols));
        Tensor y(d, {dim == 0 ? rows * n : rows, dim == 1 ? cols * n : cols});
        run("all_gather", {&x}, {&y}, attrsOf(axes, {{"dim", int64_t(dim)}}));
        std::vector<std::vector<double>> blocks;
        for (int w : g.worldRanks())
          blocks.push_back(valuesOf(w, rows * cols));
        expectValues(concat(blocks, rows, cols, dim), y.values(),
                     strCat(label(d, axes), " dim ", dim));
      }
}

TEST(CollectiveKernels, ReduceScatterAlongDim0And1) {
  const int64_t rows = 2, cols = 3;
  for (const auto &axes : kGroups)
    for (DType d : kDTypes)
      for (int dim : {0, 1}) {
        Communicator &g = groupOf(axes);
        const int64_t n = g.size();
        const int64_t R = dim == 0 ? rows * n : rows,
                      C = dim == 1 ? cols * n : cols;
        Tensor x(d, {R, C}, valuesOf(testWorld().rank(), R * C, 3));
        Tensor y(d, {rows, cols});
        run("reduce_scatter", {&x}, {&y},
            attrsOf(axes, {{"dim", int64_t(dim)}, {"reduce", "sum"}}));
        std::vector<double> expected(rows * cols, 0);
        for (int w : g.worldRanks()) {
          auto b = blockOf(valuesOf(w, R * C, 3), R, C, dim, n, g.rank());
          for (int64_t i = 0; i < rows * cols; ++i)
            expected[i] += b[i];
        }
        expectValues(expected, y.values(),
                     strCat(label(d, axes), " dim ", dim));
      }
}

TEST(CollectiveKernels, AllToAll) {
  for (const auto &axes : kGroups)
    for (DType d : kDTypes)
      for (auto [split, cat] :
           {std::pair{1, 0}, std::pair{0, 1}, std::pair{1, 1}}) {
        Communicator &g = groupOf(axes);
        const int64_t n = g.size(), rows = 2, cols = 2;
        // x: rows x cols*n (split 1) or rows*n x cols (split 0).
        const int64_t R = split == 0 ? rows * n : rows,
                      C = split == 1 ? cols * n : cols;
        Tensor x(d, {R, C}, valuesOf(testWorld().rank(), R * C, 5));
        Tensor y(d, {cat == 0 ? rows * n : rows, cat == 1 ? cols * n : cols});
        run("all_to_all", {&x}, {&y},
            attrsOf(axes, {{"split_dim", int64_t(split)},
                           {"concat_dim", int64_t(cat)}}));
        // Rank i's block for this rank, concatenated in group order.
        std::vector<std::vector<double>> blocks;
        for (int w : g.worldRanks())
          blocks.push_back(
              blockOf(valuesOf(w, R * C, 5), R, C, split, n, g.rank()));
        expectValues(concat(blocks, rows, cols, cat), y.values(),
                     strCat(label(d, axes), " split ", split, " concat ", cat));
      }
}

TEST(CollectiveKernels, BroadcastFromEveryRoot) {
  for (const auto &axes : kGroups)
    for (DType d : kDTypes) {
      Communicator &g = groupOf(axes);
      for (int64_t root = 0; root < g.size(); ++root) {
        Tensor x(d, {7}, valuesOf(testWorld().rank(), 7));
        Tensor y(d, {7});
        run("broadcast", {&x}, {&y}, attrsOf(axes, {{"root", root}}));
        expectValues(valuesOf(g.worldRanks()[root], 7), y.values(),
                     strCat(label(d, axes), " root ", root));
      }
    }
}

TEST(CollectiveKernels, AxisIndex) {
  for (const auto &axes : kGroups) {
    Tensor y(DType::kI64, {});
    run("axis_index", {}, {&y}, attrsOf(axes));
    int64_t expected = 0;
    for (size_t i = 0; i < testMesh().axisNames().size(); ++i)
      if (std::find(axes.begin(), axes.end(), testMesh().axisNames()[i]) !=
          axes.end())
        expected =
            expected * testMesh().axisSizes()[i] + testMesh().coords()[i];
    EXPECT_EQ(y.values()[0], double(expected)) << label(DType::kI64, axes);
  }
}

TEST(CollectiveKernels, SendRecvMatchByTag) {
  // Along tp: coordinate 0 sends tags 5, 6, 7; coordinate 1 receives 7, 5, 6.
  Communicator &tp = groupOf({"tp"});
  if (tp.size() < 2)
    GTEST_SKIP() << "needs tp >= 2";
  const int me = testWorld().rank();
  if (tp.rank() == 0) {
    for (int64_t tag : {5, 6, 7}) {
      Tensor x(DType::kF32, {4}, valuesOf(me, 4, int(tag)));
      run("send", {&x}, {},
          attrsOf({"tp"}, {{"offset", int64_t(1)}, {"tag", tag}}));
    }
  } else if (tp.rank() == 1) {
    const int from = tp.worldRanks()[0];
    for (int64_t tag : {7, 5, 6}) {
      Tensor y(DType::kF32, {4});
      run("recv", {}, {&y},
          attrsOf({"tp"}, {{"offset", int64_t(-1)}, {"tag", tag}}));
      expectValues(valuesOf(from, 4, int(tag)), y.values(),
                   strCat("tag ", tag));
    }
  }
  ASSERT_TRUE(testWorld().world().barrier().isOk());
}

TEST(CollectiveKernels, AsyncOverlapsAndWaits) {
  CommContext cc(testMesh(), testWorld().queue());
  Communicator &dp = groupOf({"dp"});
  Communicator &all = groupOf({"dp", "tp"});
  const int me = testWorld().rank();
  const int64_t count = 1 << 16;
  Tensor a(DType::kF32, {count}, valuesOf(me, count));
  Tensor b(DType::kF32, {2, 3}, valuesOf(me, 6, 1));
  Tensor gathered(DType::kF32, {2, 3 * all.size()});
  auto start1 = bind(
      "all_reduce", {&a}, {&a},
      attrsOf({"dp"}, {{"async", int64_t(1)}, {"handle", int64_t(1)}}), &cc);
  auto start2 = bind("all_gather", {&b}, {&gathered},
                     attrsOf({"dp", "tp"}, {{"async", int64_t(1)},
                                            {"handle", int64_t(2)},
                                            {"dim", int64_t(1)}}),
                     &cc);
  Attrs w1, w2;
  w1.set("handle", int64_t(1));
  w2.set("handle", int64_t(2));
  auto wait1 = bind("wait", {}, {}, w1, &cc);
  auto wait2 = bind("wait", {&b}, {}, w2, &cc);
  ASSERT_TRUE(start1.isOk()) << start1.status().toString();
  ASSERT_TRUE(start2.isOk()) << start2.status().toString();
  ASSERT_TRUE(wait1.isOk()) << wait1.status().toString();
  ASSERT_TRUE(wait2.isOk()) << wait2.status().toString();
  for (int step = 0; step < 2; ++step) {
    Tensor fresh(DType::kF32, {count}, valuesOf(me, count));
    std::copy(fresh.bytes.begin(), fresh.bytes.end(), a.bytes.begin());
    ASSERT_TRUE(start1.value()().isOk());
    ASSERT_TRUE(start2.value()().isOk());
    EXPECT_EQ(cc.pendingAsync(), (std::vector<int64_t>{1, 2}));
    // Compute meanwhile.
    double local = 0;
    for (int64_t i = 0; i < 100000; ++i)
      local += i % 7;
    EXPECT_GT(local, 0);
    ASSERT_TRUE(wait2.value()().isOk());
    ASSERT_TRUE(wait1.value()().isOk());
    EXPECT_TRUE(cc.pendingAsync().empty());
    std::vector<double> expected(count, 0);
    for (int w : dp.worldRanks())
      for (int64_t i = 0; i < count; ++i)
        expected[i] += valueAt(w, i);
    expectValues(expected, a.values(), "async all_reduce");
    std::vector<std::vector<double>> blocks;
    for (int w : all.worldRanks())
      blocks.push_back(valuesOf(w, 6, 1));
    expectValues(concat(blocks, 2, 3, 1), gathered.values(),
                 "async all_gather");
  }
  // A second wait without a start is an error.
  EXPECT_EQ(wait1.value()().code(), StatusCode::kInternal);
}

/// A device that runs collectives on streams of its own (CUDA) keeps its
/// asynchronous collectives in the program's CommContext too: the
/// end-of-function check sees them, and their device state (the CUDA end
/// event) goes with the context.
TEST(CollectiveKernels, DeviceSlotsArePendingAndOwnedByTheContext) {
  bool released = false;
  {
    CommContext cc(testMesh(), testWorld().queue());
    CommContext::AsyncSlot &slot = cc.declareAsync(7);
    slot.device = std::shared_ptr<void>(new int(0), [&](void *p) {
      delete static_cast<int *>(p);
      released = true;
    });
    EXPECT_TRUE(cc.pendingAsync().empty());
    slot.deviceStarted = true; // started: in flight until its wait
    EXPECT_EQ(cc.pendingAsync(), (std::vector<int64_t>{7}));
    EXPECT_EQ(cc.findAsync(7), &slot);
    slot.deviceStarted = false; // waited
    EXPECT_TRUE(cc.pendingAsync().empty());
    EXPECT_FALSE(released);
  }
  EXPECT_TRUE(released);
}

TEST(CollectiveKernels, BytesSentAreCounted) {
  Communicator &tp = groupOf({"tp"});
  const int64_t before = tp.bytesSent();
  Tensor x(DType::kF32, {1024}, valuesOf(0, 1024));
  run("all_reduce", {&x}, {&x}, attrsOf({"tp"}));
  const int64_t n = tp.size();
  EXPECT_EQ(tp.bytesSent() - before, 2 * (n - 1) * 4096 / n);
  EXPECT_GE(testMesh().bytesSent(), tp.bytesSent());
}

TEST(CollectiveKernels, BindingErrors) {
  Tensor x(DType::kF32, {4}), y(DType::kF32, {4});
  auto noMesh = bind("all_reduce", {&x}, {&y}, attrsOf({"dp"}), nullptr);
  ASSERT_FALSE(noMesh.isOk());
  EXPECT_NE(noMesh.status().message().find(
                "all_reduce at '/h.0/mlp/fc1/MatMul': collective kernels need "
                "the communicators of a device mesh"),
            std::string::npos)
      << noMesh.status().message();
  auto badAxis = bind("all_reduce", {&x}, {&y}, attrsOf({"pp"}), &testComm());
  ASSERT_FALSE(badAxis.isOk());
  EXPECT_NE(badAxis.status().message().find("no mesh axis 'pp' in the mesh "),
            std::string::npos)
      << badAxis.status().message();
  auto order =
      bind("all_reduce", {&x}, {&y}, attrsOf({"tp", "dp"}), &testComm());
  ASSERT_FALSE(order.isOk());
  EXPECT_NE(order.status().message().find("in mesh order"), std::string::npos)
      << order.status().message();
  auto kind = bind("all_reduce", {&x}, {&y},
                   attrsOf({"dp"}, {{"reduce", "mean"}}), &testComm());
  EXPECT_FALSE(kind.isOk());
  Attrs comma;
  comma.set("axes", std::string("dp,tp"));
  EXPECT_TRUE(bind("all_reduce", {&x}, {&y}, comma, &testComm()).isOk());
  Tensor z(DType::kF32, {});
  auto self =
      bind("send", {&z}, {},
           attrsOf({"tp"}, {{"offset", int64_t(0)}, {"tag", int64_t(0)}}),
           &testComm());
  EXPECT_FALSE(self.isOk());
  auto far =
      bind("recv", {}, {&z},
           attrsOf({"tp"}, {{"offset", int64_t(9)}, {"tag", int64_t(0)}}),
           &testComm());
  ASSERT_FALSE(far.isOk());
  EXPECT_NE(far.status().message().find("leaves mesh axis 'tp'"),
            std::string::npos)
      << far.status().message();
  Attrs w;
  w.set("handle", int64_t(42));
  EXPECT_FALSE(bind("wait", {}, {}, w, &testComm()).isOk());
}

} // namespace
} // namespace dtcc::runtime::testing
