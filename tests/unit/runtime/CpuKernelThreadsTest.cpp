//===- CpuKernelThreadsTest.cpp - dtcc's own kernels on several threads ---===//
//
// The kernels split large loops over the threads OpenBLAS is given
// (runtime/device/cpu/ThreadPool.h): every index exactly once, and results
// bitwise equal to the same work done on one thread (each element or row is
// computed by one thread, the same way). Its own executable with
// OPENBLAS_NUM_THREADS=3 (CMakeLists.txt): the thread count is read once
// per process.
//
//===----------------------------------------------------------------------===//

#include "runtime/base/RowReduction.h"
#include "runtime/device/cpu/BlasCore.h"
#include "runtime/device/cpu/DnnlMatmul.h"
#include "runtime/device/cpu/ThreadPool.h"
#include "tests/unit/runtime/CpuKernelTestUtils.h"

#include <cblas.h>

#include <atomic>
#include <thread>

namespace dtcc::runtime::test {
const KernelRegistry &cpuRegistry() { return cpuKernels(); }
} // namespace dtcc::runtime::test

using namespace dtcc::runtime;
using namespace dtcc::runtime::test;

namespace {

Tensor random(std::vector<int64_t> shape, unsigned seed) {
  Tensor t(DType::kF32, std::move(shape));
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 2.f);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.setRaw<float>(i, d(rng));
  return t;
}

/// `rows` rows of `t` starting at `row`, as a tensor of their own.
Tensor rowsOf(const Tensor &t, int64_t row, int64_t rows) {
  int64_t cols = t.numel() / t.shape[0];
  Tensor out(t.dtype, {rows, cols});
  std::memcpy(out.bytes(), t.bytes() + row * cols * 4, size_t(rows * cols) * 4);
  return out;
}

void expectSameBits(const Tensor &whole, const Tensor &part, int64_t at,
                    const char *what) {
  ASSERT_EQ(std::memcmp(whole.bytes() + at * 4, part.bytes(),
                        size_t(part.numel()) * 4),
            0)
      << what << " differs from its one-thread result at element " << at;
}

TEST(CpuKernelThreads, ParallelForCoversEveryIndexOnce) {
  ASSERT_EQ(cpu::cpuThreads(), 3) << "the test runs with OPENBLAS_NUM_THREADS=3";
  for (int64_t n : {1, 5, 99, 100, 101, 1000, 100003}) {
    for (int64_t grain : {1, 10, 100, 40000}) {
      std::vector<std::atomic<int>> hits(n);
      std::atomic<int> maxWorker{0};
      cpu::parallelFor(n, grain, [&](int64_t b, int64_t e, int w) {
        EXPECT_LE(b, e);
        for (int64_t i = b; i < e; ++i)
          hits[i]++;
        int m = maxWorker.load();
        while (w > m && !maxWorker.compare_exchange_weak(m, w)) {
        }
      });
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(hits[i].load(), 1) << "n " << n << " grain " << grain;
      // No more parts than threads, none shorter than the grain.
      EXPECT_LT(maxWorker.load(), std::max<int64_t>(1, std::min<int64_t>(3, n / grain)))
          << "n " << n << " grain " << grain;
    }
  }
  // The pool's two workers run beside the caller.
  EXPECT_GE(processThreadCount(), 3);
}

TEST(CpuKernelThreads, LoopsFromTwoThreadsAtOnce) {
  // A second caller while the pool is busy runs its loop alone.
  std::atomic<int64_t> sum{0};
  auto work = [&] {
    for (int k = 0; k < 50; ++k)
      cpu::parallelFor(3000, 100, [&](int64_t b, int64_t e, int) {
        sum += e - b;
      });
  };
  std::thread other(work);
  work();
  other.join();
  EXPECT_EQ(sum.load(), 2 * 50 * 3000);
}

TEST(CpuKernelThreads, SoftmaxAndLayerNormRowsAsOnOneThread) {
  // 256 rows of 300: enough for three parts; each row alone is one thread's.
  const int64_t rows = 256, cols = 300;
  Tensor x = random({rows, cols}, 1);
  Tensor y = Tensor::output(DType::kF32, {rows, cols});
  Attrs dim;
  dim.set("dim", int64_t(1));
  ASSERT_TRUE(runKernel("softmax", {x.view()}, {y.view()}, dim).isOk());
  Tensor scale = random({cols}, 2), bias = random({cols}, 3);
  Tensor ln = Tensor::output(DType::kF32, {rows, cols});
  Tensor mean = Tensor::output(DType::kF32, {rows}),
         rstd = Tensor::output(DType::kF32, {rows});
  Attrs norm;
  norm.set("axis", int64_t(1));
  norm.set("epsilon", 1e-5);
  ASSERT_TRUE(runKernel("layer_norm", {x.view(), scale.view(), bias.view()},
                        {ln.view(), mean.view(), rstd.view()}, norm)
                  .isOk());
  for (int64_t r = 0; r < rows; r += 37) {
    Tensor xr = rowsOf(x, r, 1);
    Tensor yr = Tensor::output(DType::kF32, {1, cols});
    ASSERT_TRUE(runKernel("softmax", {xr.view()}, {yr.view()}, dim).isOk());
    expectSameBits(y, yr, r * cols, "softmax");
    Tensor lr = Tensor::output(DType::kF32, {1, cols});
    Tensor mr = Tensor::output(DType::kF32, {1}), sr = Tensor::output(DType::kF32, {1});
    ASSERT_TRUE(runKernel("layer_norm", {xr.view(), scale.view(), bias.view()},
                          {lr.view(), mr.view(), sr.view()}, norm)
                    .isOk());
    expectSameBits(ln, lr, r * cols, "layer_norm");
    expectSameBits(rstd, sr, r, "layer_norm's rstd");
  }
}

TEST(CpuKernelThreads, ElementwiseAndCopiesAsOnOneThread) {
  // gelu and add over 3 x 40000 (split), against each row alone (one
  // thread: below the grain); a transpose (strided copy) against the
  // definition.
  const int64_t rows = 3, cols = 40000;
  Tensor a = random({rows, cols}, 4), b = random({rows, cols}, 5);
  Tensor sum = Tensor::output(DType::kF32, {rows, cols});
  Tensor g = Tensor::output(DType::kF32, {rows, cols});
  ASSERT_TRUE(runKernel("add", {a.view(), b.view()}, {sum.view()}).isOk());
  ASSERT_TRUE(runKernel("gelu", {a.view()}, {g.view()}).isOk());
  for (int64_t r = 0; r < rows; ++r) {
    Tensor ar = rowsOf(a, r, 1), br = rowsOf(b, r, 1);
    Tensor sr = Tensor::output(DType::kF32, {1, cols});
    Tensor gr = Tensor::output(DType::kF32, {1, cols});
    ASSERT_TRUE(runKernel("add", {ar.view(), br.view()}, {sr.view()}).isOk());
    ASSERT_TRUE(runKernel("gelu", {ar.view()}, {gr.view()}).isOk());
    expectSameBits(sum, sr, r * cols, "add");
    expectSameBits(g, gr, r * cols, "gelu");
  }
  Tensor m = random({300, 400}, 6);
  Tensor t = Tensor::output(DType::kF32, {400, 300});
  Attrs perm;
  perm.set("perm", std::vector<int64_t>{1, 0});
  ASSERT_TRUE(runKernel("transpose", {m.view()}, {t.view()}, perm).isOk());
  for (int64_t i = 0; i < 300; ++i)
    for (int64_t j = 0; j < 400; ++j)
      ASSERT_EQ(t.raw<float>(j * 300 + i), m.raw<float>(i * 400 + j));
}

TEST(CpuKernelThreads, MatmulSplitsAsOneProduct) {
  // Products split by rows (tall, wide, transposed operands), one with too
  // few rows to split, and a batch of products split whole: bitwise what
  // one cblas call computes, on every OpenBLAS kernel (the rows' blocks are
  // whole micro-tiles of the kernels OpenBLAS runs: sgemmRowAlign). ctest
  // runs it again under OPENBLAS_CORETYPE=Haswell and SkylakeX, where the
  // CPU has their instructions. DTCC_CPU_MATMUL=blas: f32 products would
  // go to oneDNN on an AVX-512 CPU (f32 on oneDNN: the next test).
  setenv("DTCC_CPU_MATMUL", "blas", 1);
  struct Unset {
    ~Unset() { unsetenv("DTCC_CPU_MATMUL"); }
  } unset;
  const char *core = openblas_get_corename();
  const std::string name = core ? core : "";
  if (!cpu::cpuRunsBlasCore(name, cpu::hostVectorIsa()))
    GTEST_SKIP() << "OpenBLAS's " << name << " kernels need instructions "
                 << "this CPU lacks";
  struct Case {
    int64_t batch, m, k, n;
    bool ta, tb;
  };
  for (Case c :
       {Case{1, 300, 96, 130, false, false},
        Case{1, 200, 200, 333, false, true}, Case{1, 70, 200, 333, false, true},
        Case{1, 1024, 64, 96, false, false}, Case{1, 257, 64, 200, true, false},
        Case{5, 64, 48, 96, false, false}}) {
    Tensor a = random(c.ta ? std::vector<int64_t>{c.batch, c.k, c.m}
                           : std::vector<int64_t>{c.batch, c.m, c.k},
                      7);
    Tensor b = random(c.tb ? std::vector<int64_t>{c.batch, c.n, c.k}
                           : std::vector<int64_t>{c.batch, c.k, c.n},
                      8);
    Tensor out = Tensor::output(DType::kF32, {c.batch, c.m, c.n});
    Attrs attrs;
    attrs.set("transpose_lhs", c.ta);
    attrs.set("transpose_rhs", c.tb);
    ASSERT_TRUE(runKernel("matmul", {a.view(), b.view()}, {out.view()}, attrs).isOk());
    Tensor ref = Tensor::output(DType::kF32, {c.batch, c.m, c.n});
    for (int64_t i = 0; i < c.batch; ++i)
      cblas_sgemm(CblasRowMajor, c.ta ? CblasTrans : CblasNoTrans,
                  c.tb ? CblasTrans : CblasNoTrans, int(c.m), int(c.n), int(c.k), 1.0f,
                  reinterpret_cast<const float *>(a.bytes()) + i * c.m * c.k, int(c.ta ? c.m : c.k),
                  reinterpret_cast<const float *>(b.bytes()) + i * c.k * c.n, int(c.tb ? c.k : c.n), 0.0f,
                  reinterpret_cast<float *>(ref.bytes()) + i * c.m * c.n, int(c.n));
    ASSERT_EQ(std::memcmp(out.bytes(), ref.bytes(), size_t(out.numel()) * 4), 0)
        << "matmul " << c.batch << " x " << c.m << " x " << c.k << " x " << c.n;
  }
}

/// oneDNN's products are cut into pieces by their shape alone
/// (MatmulKernels.cpp) and the pieces run on the kernels' threads: each
/// piece's rows (or batch items) computed alone, as a product of its own,
/// are bitwise those of the whole product. Pieces: rows 256 + 256 + 188;
/// transposed lhs, rows 256 + 244; a batch of 40 in 6 x 6 + 4.
void checkOneDnnPiecesAlone(DType dtype) {
  const size_t elem = dtypeSize(dtype);
  std::mt19937 rng(11);
  struct Case {
    int64_t batch, m, k, n;
    bool ta;
    std::vector<std::pair<int64_t, int64_t>> pieces; // [begin, size)
  };
  const Case cases[] = {
      {1, 700, 384, 512, false, {{0, 256}, {256, 256}, {512, 188}}},
      {1, 500, 256, 512, true, {{0, 256}, {256, 244}}},
      {40, 64, 96, 128, false, {{0, 6}, {30, 6}, {36, 4}}},
  };
  for (const Case &c : cases) {
    const bool byBatch = c.batch > 1;
    std::vector<int64_t> as = c.ta ? std::vector<int64_t>{c.k, c.m}
                                   : std::vector<int64_t>{c.m, c.k};
    if (byBatch)
      as.insert(as.begin(), c.batch);
    Tensor a = randomTensor(rng, dtype, as, -1, 1);
    Tensor b = randomTensor(rng, dtype, {c.k, c.n}, -1, 1);
    std::vector<int64_t> os{c.m, c.n};
    if (byBatch)
      os.insert(os.begin(), c.batch);
    Tensor out = Tensor::output(dtype, os);
    Attrs attrs;
    attrs.set("transpose_lhs", c.ta);
    ASSERT_TRUE(runKernel("matmul", {a.view(), b.view()}, {out.view()}, attrs).isOk());
    for (auto [begin, size] : c.pieces) {
      // The piece's operand: its batch items, its rows, or (transposed) the
      // columns of the stored lhs.
      std::vector<int64_t> ps = as;
      ps[c.ta ? 1 : 0] = size;
      Tensor part(dtype, ps);
      const int64_t cols = c.ta ? c.m : c.k * (byBatch ? c.m : 1);
      const int64_t lines = c.ta ? c.k : 1;
      for (int64_t r = 0; r < lines; ++r)
        std::memcpy(part.bytes() + r * size * elem * (c.ta ? 1 : cols),
                    a.bytes() + (r * cols + begin * (c.ta ? 1 : cols)) * elem,
                    size_t(size * (c.ta ? 1 : cols)) * elem);
      std::vector<int64_t> pos = os;
      pos[0] = size;
      Tensor alone = Tensor::output(dtype, pos);
      ASSERT_TRUE(runKernel("matmul", {part.view(), b.view()}, {alone.view()}, attrs).isOk());
      const int64_t perItem = byBatch ? c.m * c.n : c.n;
      ASSERT_EQ(std::memcmp(out.bytes() + begin * perItem * elem, alone.bytes(),
                            size_t(alone.numel()) * elem),
                0)
          << dtypeName(dtype) << " matmul " << c.batch << " x " << c.m << " x "
          << c.k << " x " << c.n << " (lhs transposed " << c.ta
          << "): the piece at " << begin << " differs from its product alone";
    }
  }
}

TEST(CpuKernelThreads, Bf16ProductsOnOneDnnAsTheirPiecesAlone) {
  if (!cpu::dnnlHasNativeBf16())
    GTEST_SKIP() << "oneDNN has no native bf16 matmul on this CPU";
  checkOneDnnPiecesAlone(DType::kBF16);
}

TEST(CpuKernelThreads, F32ProductsOnOneDnnAsTheirPiecesAlone) {
  // f32 products run on oneDNN's brgemm kernels by default where it has
  // AVX-512 ones; DTCC_CPU_MATMUL=dnnl puts every one there (the
  // transposed lhs's pieces on its gemm:jit kernels), on any CPU.
  setenv("DTCC_CPU_MATMUL", "dnnl", 1);
  checkOneDnnPiecesAlone(DType::kF32);
  unsetenv("DTCC_CPU_MATMUL");
}

TEST(CpuKernelThreads, OneDnnBrgemmOnlyRefusesStridedTransposedLhs) {
  // A piece of a transposed lhs (rows of op(A), stored with a leading
  // dimension beyond them) goes to oneDNN's gemm:jit kernels, which
  // allocate their packing buffers on every call: the default f32 path
  // (brgemmOnly) refuses it, and OpenBLAS takes the product; the whole,
  // dense product is brgemm's.
  if (!cpu::dnnlHasAvx512Core())
    GTEST_SKIP() << "oneDNN has no AVX-512 kernels on this CPU";
  std::vector<float> a(512 * 256), b(512 * 128), c(512 * 128);
  cpu::GemmBatch piece;
  piece.m = 256, piece.n = 128, piece.k = 512, piece.transA = true;
  piece.ldA = 512;
  auto strided = cpu::DnnlMatmul::create(piece, cpu::DnnlGemmType::kF32,
                                         a.data(), b.data(), c.data(), 1,
                                         /*brgemmOnly=*/true);
  ASSERT_FALSE(strided.isOk());
  EXPECT_EQ(strided.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(strided.status().message().find("gemm:jit"), std::string::npos)
      << strided.status().toString();
  EXPECT_TRUE(cpu::DnnlMatmul::create(piece, cpu::DnnlGemmType::kF32, a.data(),
                                      b.data(), c.data(), 1)
                  .isOk());
  cpu::GemmBatch dense = piece;
  dense.ldA = 0;
  auto whole = cpu::DnnlMatmul::create(dense, cpu::DnnlGemmType::kF32, a.data(),
                                       b.data(), c.data(), 1,
                                       /*brgemmOnly=*/true);
  ASSERT_TRUE(whole.isOk()) << whole.status().toString();
  EXPECT_EQ(whole.value()->impl().rfind("brg", 0), 0u) << whole.value()->impl();
}

TEST(CpuKernelThreads, ReductionsAsOnOneThread) {
  // Row sums (rows split) against each row alone; column sums (column
  // tiles split) against a block of columns alone.
  const int64_t rows = 700, cols = 260;
  Tensor x = random({rows, cols}, 9);
  Attrs lastAxis, firstAxis;
  lastAxis.set("dims", std::vector<int64_t>{1});
  firstAxis.set("dims", std::vector<int64_t>{0});
  Tensor rowSums = Tensor::output(DType::kF32, {rows});
  Tensor colSums = Tensor::output(DType::kF32, {cols});
  ASSERT_TRUE(runKernel("reduce_sum", {x.view()}, {rowSums.view()}, lastAxis).isOk());
  ASSERT_TRUE(runKernel("reduce_sum", {x.view()}, {colSums.view()}, firstAxis).isOk());
  for (int64_t r = 0; r < rows; r += 53) {
    Tensor one = Tensor::output(DType::kF32, {1});
    ASSERT_TRUE(runKernel("reduce_sum", {rowsOf(x, r, 1).view()}, {one.view()}, lastAxis).isOk());
    expectSameBits(rowSums, one, r, "reduce_sum over rows");
  }
  // Columns [64, 128): a tile-aligned block, reduced alone on one thread.
  Tensor block(DType::kF32, {rows, 64});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < 64; ++c)
      block.setRaw<float>(r * 64 + c, x.raw<float>(r * cols + 64 + c));
  Tensor blockSums = Tensor::output(DType::kF32, {64});
  ASSERT_TRUE(runKernel("reduce_sum", {block.view()}, {blockSums.view()}, firstAxis).isOk());
  expectSameBits(colSums, blockSums, 64, "reduce_sum over columns");
}

/// ReductionKernels.cpp's order for a row of floats: above kRowBlock
/// elements the sums of two halves (the first a multiple of kRowLanes
/// long), else kRowLanes lanes added in pairs (runtime/base/RowReduction.h).
float treeSum(const float *x, int64_t n) {
  if (n > kRowBlock) {
    const int64_t half = (n / 2) / kRowLanes * kRowLanes;
    return treeSum(x, half) + treeSum(x + half, n - half);
  }
  float lanes[kRowLanes] = {};
  int64_t j = 0;
  for (; j + kRowLanes <= n; j += kRowLanes)
    for (int64_t l = 0; l < kRowLanes; ++l)
      lanes[l] += x[j + l];
  for (int64_t l = 0; j < n; ++j, ++l)
    lanes[l] += x[j];
  for (int64_t w = kRowLanes / 2; w > 0; w /= 2)
    for (int64_t l = 0; l < w; ++l)
      lanes[l] += lanes[l + w];
  return lanes[0];
}

TEST(CpuKernelThreads, FullSumsSplitTheirTreeAsOnOneThread) {
  // A reduction of every element (a gradient's squared norm) splits the
  // top of its tree over the threads: bitwise the one-thread tree.
  for (std::vector<int64_t> shape :
       {std::vector<int64_t>{100003}, std::vector<int64_t>{300, 701},
        std::vector<int64_t>{2, 3, 50000}}) {
    Tensor x = random(shape, 14);
    Attrs all;
    std::vector<int64_t> dims;
    for (size_t d = 0; d < shape.size(); ++d)
      dims.push_back(int64_t(d));
    all.set("dims", dims);
    Tensor sum = Tensor::output(DType::kF32, {});
    ASSERT_TRUE(runKernel("reduce_sum", {x.view()}, {sum.view()}, all).isOk());
    const float expected =
        treeSum(reinterpret_cast<const float *>(x.bytes()), x.numel());
    EXPECT_EQ(sum.raw<float>(0), expected) << "reduce_sum of " << x.numel()
                                           << " elements";
  }
}

TEST(CpuKernelThreads, LayerNormGradAsOnOneThread) {
  // dx rows (split) against each row alone (too small to split: the
  // one-pass loop); dscale and dbias (columns split) against their
  // definition: double sums over rows in order.
  const int64_t rows = 800, cols = 200;
  Tensor x = random({rows, cols}, 10), dy = random({rows, cols}, 11);
  Tensor scale = random({cols}, 12), bias = random({cols}, 13);
  Tensor y = Tensor::output(DType::kF32, {rows, cols});
  Tensor mean = Tensor::output(DType::kF32, {rows}), rstd = Tensor::output(DType::kF32, {rows});
  Attrs norm;
  norm.set("axis", int64_t(1));
  norm.set("epsilon", 1e-5);
  ASSERT_TRUE(runKernel("layer_norm", {x.view(), scale.view(), bias.view()},
                        {y.view(), mean.view(), rstd.view()}, norm)
                  .isOk());
  Tensor dx = Tensor::output(DType::kF32, {rows, cols});
  Tensor dscale = Tensor::output(DType::kF32, {cols}), dbias = Tensor::output(DType::kF32, {cols});
  Attrs axis;
  axis.set("axis", int64_t(1));
  ASSERT_TRUE(runKernel("layer_norm_grad",
                        {x.view(), scale.view(), mean.view(), rstd.view(), dy.view()},
                        {dx.view(), dscale.view(), dbias.view()}, axis)
                  .isOk());
  for (int64_t r = 0; r < rows; r += 41) {
    Tensor m1 = rowsOf(mean, r, 1), s1 = rowsOf(rstd, r, 1);
    Tensor dx1 = Tensor::output(DType::kF32, {1, cols});
    Tensor ds1 = Tensor::output(DType::kF32, {cols}), db1 = Tensor::output(DType::kF32, {cols});
    ASSERT_TRUE(runKernel("layer_norm_grad",
                          {rowsOf(x, r, 1).view(), scale.view(), m1.view(), s1.view(),
                           rowsOf(dy, r, 1).view()},
                          {dx1.view(), ds1.view(), db1.view()}, axis)
                    .isOk());
    expectSameBits(dx, dx1, r * cols, "layer_norm_grad's dx");
  }
  for (int64_t c = 0; c < cols; ++c) {
    double s = 0, b = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const float h = (x.raw<float>(r * cols + c) - mean.raw<float>(r)) * rstd.raw<float>(r);
      const float d = dy.raw<float>(r * cols + c);
      s += double(d) * double(h);
      b += double(d);
    }
    ASSERT_EQ(dscale.raw<float>(c), float(s)) << "dscale " << c;
    ASSERT_EQ(dbias.raw<float>(c), float(b)) << "dbias " << c;
  }
}

/// Channels [c, c + count) of an [n, channels, ...] f32 or i64 tensor as
/// [n, count, ...].
Tensor channelsOf(const Tensor &t, int64_t c, int64_t count = 1) {
  const int64_t n = t.shape[0], channels = t.shape[1],
                spatial = t.numel() / (n * channels);
  const int64_t size = t.dtype == DType::kI64 ? 8 : 4;
  std::vector<int64_t> shape = t.shape;
  shape[1] = count;
  Tensor out(t.dtype, shape);
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(out.bytes() + i * count * spatial * size,
                t.bytes() + (i * channels + c) * spatial * size,
                size_t(count * spatial * size));
  return out;
}

Tensor channelOf(const Tensor &t, int64_t c) { return channelsOf(t, c); }

/// Element `c` of each of the `rows` rows of a [rows, channels] tensor.
Tensor columnOf(const Tensor &t, int64_t c) {
  const int64_t rows = t.shape[0], channels = t.shape[1];
  Tensor out(t.dtype, {rows, 1});
  for (int64_t r = 0; r < rows; ++r)
    out.setRaw<float>(r, t.raw<float>(r * channels + c));
  return out;
}

TEST(CpuKernelThreads, BatchNormAsOnOneThread) {
  // [8, 12, 4096]: the statistics split by channel (each reads 32768
  // values), the passes over x by (sample, channel) plane; each channel
  // alone ([8, 1, 4096]) is too small to split.
  const int64_t n = 8, channels = 12, spatial = 4096;
  Tensor x = random({n, channels, spatial}, 20), dy = random({n, channels, spatial}, 21);
  Tensor shift = random({channels}, 22), scale = random({channels}, 23),
         bias = random({channels}, 24), mean = random({channels}, 25);
  Tensor var(DType::kF32, {channels});
  for (int64_t c = 0; c < channels; ++c)
    var.setRaw<float>(c, 0.5f + float(c));
  Attrs none, eps, grad;
  eps.set("epsilon", 1e-5);
  eps.set("training", true);
  grad.set("epsilon", 1e-5);
  grad.set("count", n * spatial);
  Tensor stats = Tensor::output(DType::kF32, {2, channels});
  Tensor gstats = Tensor::output(DType::kF32, {2, channels});
  Tensor y = Tensor::output(DType::kF32, {n, channels, spatial});
  Tensor dx = Tensor::output(DType::kF32, {n, channels, spatial});
  ASSERT_TRUE(runKernel("batch_norm_stats", {x.view(), shift.view()}, {stats.view()}, none).isOk());
  ASSERT_TRUE(runKernel("batch_norm_grad_stats", {x.view(), mean.view(), dy.view()},
                        {gstats.view()}, none).isOk());
  ASSERT_TRUE(runKernel("batch_norm", {x.view(), scale.view(), bias.view(), mean.view(),
                                       var.view()}, {y.view()}, eps).isOk());
  ASSERT_TRUE(runKernel("batch_norm_grad", {x.view(), dy.view(), scale.view(), mean.view(),
                                            var.view(), gstats.view()}, {dx.view()}, grad)
                  .isOk());
  for (int64_t c = 0; c < channels; ++c) {
    Tensor xc = channelOf(x, c), dyc = channelOf(dy, c);
    auto one = [&](const Tensor &t) {
      Tensor out(DType::kF32, {1});
      out.setRaw<float>(0, t.raw<float>(c));
      return out;
    };
    Tensor sc = one(shift), kc = one(scale), bc = one(bias), mc = one(mean), vc = one(var);
    Tensor s1 = Tensor::output(DType::kF32, {2, 1}), g1 = Tensor::output(DType::kF32, {2, 1});
    Tensor y1 = Tensor::output(DType::kF32, {n, 1, spatial});
    Tensor dx1 = Tensor::output(DType::kF32, {n, 1, spatial});
    ASSERT_TRUE(runKernel("batch_norm_stats", {xc.view(), sc.view()}, {s1.view()}, none).isOk());
    ASSERT_TRUE(runKernel("batch_norm_grad_stats", {xc.view(), mc.view(), dyc.view()},
                          {g1.view()}, none).isOk());
    Tensor gc = columnOf(gstats, c);
    ASSERT_TRUE(runKernel("batch_norm", {xc.view(), kc.view(), bc.view(), mc.view(),
                                         vc.view()}, {y1.view()}, eps).isOk());
    ASSERT_TRUE(runKernel("batch_norm_grad", {xc.view(), dyc.view(), kc.view(), mc.view(),
                                              vc.view(), gc.view()}, {dx1.view()}, grad)
                    .isOk());
    Tensor sw = columnOf(stats, c), gw = columnOf(gstats, c);
    expectSameBits(sw, s1, 0, "batch_norm_stats");
    expectSameBits(gw, g1, 0, "batch_norm_grad_stats");
    expectSameBits(channelOf(y, c), y1, 0, "batch_norm");
    expectSameBits(channelOf(dx, c), dx1, 0, "batch_norm_grad");
  }
}

TEST(CpuKernelThreads, GroupNormAsOnOneThread) {
  // [4, 16, 4096] in 4 groups of 4 channels: the forward pass split by
  // (sample, group), the gradient by group (a channel's dscale and dbias
  // summed over the batch in order); against each group alone.
  const int64_t n = 4, channels = 16, perGroup = 4, spatial = 4096;
  const int64_t groups = channels / perGroup;
  Tensor x = random({n, channels, spatial}, 30), dy = random({n, channels, spatial}, 31);
  Tensor scale = random({channels}, 32), bias = random({channels}, 33);
  Attrs attrs;
  attrs.set("channels_per_group", perGroup);
  attrs.set("epsilon", 1e-5);
  Attrs gradAttrs;
  gradAttrs.set("channels_per_group", perGroup);
  Tensor y = Tensor::output(DType::kF32, {n, channels, spatial});
  Tensor mean = Tensor::output(DType::kF32, {n, groups}),
         rstd = Tensor::output(DType::kF32, {n, groups});
  ASSERT_TRUE(runKernel("group_norm", {x.view(), scale.view(), bias.view()},
                        {y.view(), mean.view(), rstd.view()}, attrs).isOk());
  Tensor dx = Tensor::output(DType::kF32, {n, channels, spatial});
  Tensor ds = Tensor::output(DType::kF32, {channels}), db = Tensor::output(DType::kF32, {channels});
  ASSERT_TRUE(runKernel("group_norm_grad",
                        {x.view(), scale.view(), mean.view(), rstd.view(), dy.view()},
                        {dx.view(), ds.view(), db.view()}, gradAttrs).isOk());
  auto part = [&](const Tensor &t, int64_t c) {
    Tensor out(DType::kF32, {perGroup});
    std::memcpy(out.bytes(), t.bytes() + c * 4, size_t(perGroup) * 4);
    return out;
  };
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t c = g * perGroup;
    Tensor xg = channelsOf(x, c, perGroup), dyg = channelsOf(dy, c, perGroup);
    Tensor sg = part(scale, c), bg = part(bias, c);
    Tensor y1 = Tensor::output(DType::kF32, {n, perGroup, spatial});
    Tensor m1 = Tensor::output(DType::kF32, {n, 1}), r1 = Tensor::output(DType::kF32, {n, 1});
    ASSERT_TRUE(runKernel("group_norm", {xg.view(), sg.view(), bg.view()},
                          {y1.view(), m1.view(), r1.view()}, attrs).isOk());
    expectSameBits(channelsOf(y, c, perGroup), y1, 0, "group_norm");
    expectSameBits(columnOf(rstd, g), r1, 0, "group_norm's rstd");
    Tensor mg = columnOf(mean, g), rg = columnOf(rstd, g);
    Tensor dx1 = Tensor::output(DType::kF32, {n, perGroup, spatial});
    Tensor ds1 = Tensor::output(DType::kF32, {perGroup}), db1 = Tensor::output(DType::kF32, {perGroup});
    ASSERT_TRUE(runKernel("group_norm_grad",
                          {xg.view(), sg.view(), mg.view(), rg.view(), dyg.view()},
                          {dx1.view(), ds1.view(), db1.view()}, gradAttrs).isOk());
    expectSameBits(channelsOf(dx, c, perGroup), dx1, 0, "group_norm_grad's dx");
    expectSameBits(part(ds, c), ds1, 0, "group_norm_grad's dscale");
    expectSameBits(part(db, c), db1, 0, "group_norm_grad's dbias");
  }
}

TEST(CpuKernelThreads, PoolingAsOnOneThread) {
  // [8, 8, 32, 32], 3x3 windows, stride 2, padding 1: 64 planes split over
  // the threads; against each plane alone.
  const int64_t n = 8, channels = 8, side = 32, out = 16;
  Tensor x = random({n, channels, side, side}, 40);
  Tensor dy = random({n, channels, out, out}, 41);
  Attrs attrs;
  attrs.set("kernel", std::vector<int64_t>{3, 3});
  attrs.set("strides", std::vector<int64_t>{2, 2});
  attrs.set("dilations", std::vector<int64_t>{1, 1});
  attrs.set("pad_low", std::vector<int64_t>{1, 1});
  attrs.set("pad_high", std::vector<int64_t>{1, 1});
  Tensor maxY = Tensor::output(DType::kF32, {n, channels, out, out});
  Tensor idx = Tensor::output(DType::kI64, {n, channels, out, out});
  Tensor avgY = Tensor::output(DType::kF32, {n, channels, out, out});
  Tensor maxDx = Tensor::output(DType::kF32, {n, channels, side, side});
  Tensor avgDx = Tensor::output(DType::kF32, {n, channels, side, side});
  ASSERT_TRUE(runKernel("max_pool", {x.view()}, {maxY.view(), idx.view()}, attrs).isOk());
  ASSERT_TRUE(runKernel("avg_pool", {x.view()}, {avgY.view()}, attrs).isOk());
  ASSERT_TRUE(runKernel("max_pool_grad", {dy.view(), idx.view()}, {maxDx.view()}).isOk());
  ASSERT_TRUE(runKernel("avg_pool_grad", {dy.view()}, {avgDx.view()}, attrs).isOk());
  for (int64_t i = 0; i < n; i += 3)
    for (int64_t c = 0; c < channels; ++c) {
      const int64_t plane = i * channels + c;
      auto planeOf = [&](const Tensor &t) {
        const int64_t size = t.numel() / (n * channels);
        const int64_t bytes = t.dtype == DType::kI64 ? 8 : 4;
        std::vector<int64_t> shape = t.shape;
        shape[0] = shape[1] = 1;
        Tensor p(t.dtype, shape);
        std::memcpy(p.bytes(), t.bytes() + plane * size * bytes, size_t(size * bytes));
        return p;
      };
      Tensor x1 = planeOf(x), dy1 = planeOf(dy);
      Tensor my = Tensor::output(DType::kF32, {1, 1, out, out});
      Tensor mi = Tensor::output(DType::kI64, {1, 1, out, out});
      Tensor ay = Tensor::output(DType::kF32, {1, 1, out, out});
      Tensor mdx = Tensor::output(DType::kF32, {1, 1, side, side});
      Tensor adx = Tensor::output(DType::kF32, {1, 1, side, side});
      ASSERT_TRUE(runKernel("max_pool", {x1.view()}, {my.view(), mi.view()}, attrs).isOk());
      ASSERT_TRUE(runKernel("avg_pool", {x1.view()}, {ay.view()}, attrs).isOk());
      ASSERT_TRUE(runKernel("max_pool_grad", {dy1.view(), mi.view()}, {mdx.view()}).isOk());
      ASSERT_TRUE(runKernel("avg_pool_grad", {dy1.view()}, {adx.view()}, attrs).isOk());
      expectSameBits(planeOf(maxY), my, 0, "max_pool");
      ASSERT_EQ(std::memcmp(planeOf(idx).bytes(), mi.bytes(), size_t(out * out) * 8), 0)
          << "max_pool's indices differ from one thread's in plane " << plane;
      expectSameBits(planeOf(avgY), ay, 0, "avg_pool");
      expectSameBits(planeOf(maxDx), mdx, 0, "max_pool_grad");
      expectSameBits(planeOf(avgDx), adx, 0, "avg_pool_grad");
    }
}

} // namespace
