//===- gemm_cpu.cpp - the GPT steps' GEMMs: OpenBLAS vs oneDNN f32/bf16 ---===//
//
// GFLOP/s of every matrix product shape in the training steps of the two
// benchmark GPTs (bench/train_gpt_cpu.py: 4 x 128, batch 8 x 64; 6 x 384,
// batch 8 x 128; shapes as `dtcc compile --dump-dir` shows them: the dense
// layers' forward x W^T, input gradient dY W, weight gradient dY^T X, and
// the attention products batched over batch x heads) through
//   blas: OpenBLAS cblas_sgemm, one call per GEMM (dtcc's f32 kernels), on
//         the kernel family the runner gives it (BlasCore.h: OpenBLAS
//         0.3.21 takes some newer CPUs for SSE3 ones),
//   f32:  oneDNN's f32 matmul primitive (one call per batch),
//   bf16: oneDNN's matmul on bf16 operands, f32 accumulation and result,
//   tile: the attention kernels' register-blocked products on AVX-512
//         (TileProduct.h; a transposed B transposed first, in the time),
//         one thread, so only with a thread count of 1.
// The thread count is the kernels' one setting (OMP_NUM_THREADS, else
// OPENBLAS_NUM_THREADS, else every core); each figure is the best of
// `--trials` timings of at least 50 ms each, as the host may be loaded.
//
//   OMP_NUM_THREADS=1 build/bin/dtcc-bench-gemm-cpu [--trials 5]
//       [--shape M,N,K]   (one untransposed GEMM of that size instead)
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/BlasCore.h"
#include "runtime/device/cpu/DnnlMatmul.h"
#include "runtime/device/cpu/ThreadPool.h"
#include "runtime/device/cpu/TileProduct.h"

#include <cblas.h>

extern "C" char *openblas_get_corename(void);

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

extern "C" void openblas_set_num_threads(int);

using namespace dtcc::runtime;
using namespace dtcc::runtime::cpu;

namespace {

struct Shape {
  std::string name;
  GemmBatch g;
};

/// The GEMMs of one GPT step: tokens T, width h, vocabulary v, batch x
/// heads bh, sequence s, head width d.
std::vector<Shape> gptShapes(const std::string &tag, int64_t t, int64_t h,
                             int64_t v, int64_t bh, int64_t s, int64_t d) {
  std::vector<Shape> out;
  auto dense = [&](const char *what, int64_t k, int64_t n) {
    auto add = [&](const char *kind, int64_t m, int64_t nn, int64_t kk,
                   bool ta, bool tb) {
      GemmBatch g;
      g.m = m, g.n = nn, g.k = kk, g.transA = ta, g.transB = tb;
      out.push_back({tag + " " + what + " " + kind, g});
    };
    add("fwd x.W^T", t, n, k, false, true);
    add("dX dY.W", t, k, n, false, false);
    add("dW dY^T.X", n, k, t, true, false);
  };
  dense("qkv", h, 3 * h);
  dense("proj", h, h);
  dense("fc1", h, 4 * h);
  dense("fc2", 4 * h, h);
  dense("head", h, v);
  auto att = [&](const char *what, int64_t m, int64_t n, int64_t k, bool ta,
                 bool tb) {
    GemmBatch g;
    g.batch = bh, g.m = m, g.n = n, g.k = k, g.transA = ta, g.transB = tb;
    g.strideA = m * k, g.strideB = k * n, g.strideC = m * n;
    out.push_back({tag + " att " + what, g});
  };
  att("q.k^T NN", s, s, d, false, false);
  att("p.v NN", s, d, s, false, false);
  att("dP dY.v^T", s, s, d, false, true);
  att("dV p^T.dY", s, d, s, true, false);
  att("dK dS^T.q", d, s, s, true, false);
  return out;
}

double seconds(const std::function<void()> &fn, int trials) {
  using Clock = std::chrono::steady_clock;
  fn(); // warm up (and primitive caches)
  double best = 1e30;
  for (int tr = 0; tr < trials; ++tr) {
    int iters = 0;
    auto start = Clock::now();
    double elapsed = 0;
    do {
      fn();
      ++iters;
      elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    } while (elapsed < 0.05);
    best = std::min(best, elapsed / iters);
  }
  return best;
}

uint16_t toBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

} // namespace

int main(int argc, char **argv) {
  // As the runner does: may execute the benchmark again with the settings
  // OpenBLAS and OpenMP read when they load.
  dtcc::runtime::cpu::applyLoadTimeSettings(argv);
  int trials = 5;
  long long m = 0, n = 0, k = 0;
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--trials") && i + 1 < argc)
      trials = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--shape") && i + 1 < argc &&
             std::sscanf(argv[++i], "%lld,%lld,%lld", &m, &n, &k) == 3 &&
             m > 0 && n > 0 && k > 0)
      continue;
    else {
      std::fprintf(stderr, "usage: %s [--trials N] [--shape M,N,K]\n",
                   argv[0]);
      return 2;
    }
  const int threads = cpuThreads();
  openblas_set_num_threads(threads);
  std::vector<Shape> shapes;
  if (m > 0) {
    GemmBatch g;
    g.m = m, g.n = n, g.k = k;
    shapes.push_back({"--shape", g});
  } else {
    shapes = gptShapes("4x128", 512, 128, 256, 32, 64, 32);
    for (Shape &s : gptShapes("6x384", 1024, 384, 512, 48, 128, 64))
      shapes.push_back(s);
  }
  const char *core = openblas_get_corename();
  std::printf("threads %d, best of %d trials, native bf16: %s, OpenBLAS "
              "core %s\n",
              threads, trials, dnnlHasNativeBf16() ? "yes" : "no",
              core ? core : "?");
  std::printf("%-24s %5s %5s %5s %5s %8s %8s %8s %8s  %s\n", "product", "batch",
              "m", "n", "k", "blas", "f32", "bf16", "tile",
              "(GFLOP/s; oneDNN impls)");
  std::set<std::string> reported;
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (const Shape &s : shapes) {
    const GemmBatch &g = s.g;
    const int64_t na = g.batch * g.m * g.k, nb = g.batch * g.n * g.k,
                  nc = g.batch * g.m * g.n;
    std::vector<float> a(na), b(nb), c(nc);
    for (float &x : a)
      x = dist(rng);
    for (float &x : b)
      x = dist(rng);
    std::vector<uint16_t> a16(na), b16(nb);
    for (int64_t i = 0; i < na; ++i)
      a16[i] = toBf16(a[i]);
    for (int64_t i = 0; i < nb; ++i)
      b16[i] = toBf16(b[i]);
    const double flops = 2.0 * g.batch * g.m * g.n * g.k;
    double blas = seconds(
        [&] {
          for (int64_t i = 0; i < g.batch; ++i)
            cblas_sgemm(CblasRowMajor, g.transA ? CblasTrans : CblasNoTrans,
                        g.transB ? CblasTrans : CblasNoTrans, int(g.m),
                        int(g.n), int(g.k), 1.0f, a.data() + i * g.strideA,
                        int(g.transA ? g.m : g.k), b.data() + i * g.strideB,
                        int(g.transB ? g.k : g.n), 0.0f,
                        c.data() + i * g.strideC, int(g.n));
        },
        trials);
    auto f32 = DnnlMatmul::create(g, DnnlGemmType::kF32, a.data(), b.data(),
                                  c.data());
    auto bf16 = DnnlMatmul::create(g, DnnlGemmType::kBF16ToF32, a16.data(),
                                   b16.data(), c.data());
    // oneDNN 2.6 has no bf16 matmul on CPUs without AVX512-BF16/AMX
    // (e.g. AMD Zen 3): that column reads '-' and names the reason once.
    auto rate = [&](auto &made, std::string &impl) -> std::string {
      if (!made.isOk()) {
        impl = "none";
        if (reported.insert(made.status().toString()).second)
          std::fprintf(stderr, "%s: %s\n", s.name.c_str(),
                       made.status().toString().c_str());
        return "-";
      }
      impl = made.value()->impl();
      double t = seconds([&] { (void)made.value()->run(); }, trials);
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.1f", flops / t * 1e-9);
      return buf;
    };
    std::string f32Impl, bf16Impl;
    std::string f32Rate = rate(f32, f32Impl), bf16Rate = rate(bf16, bf16Impl);
    std::string tileRate = "-";
    if (threads == 1 && cpuHasTileProducts()) {
      std::vector<float> bt(g.transB ? g.k * g.n : 0);
      const double t = seconds(
          [&] {
            for (int64_t i = 0; i < g.batch; ++i) {
              const float *bi = b.data() + i * g.strideB;
              if (g.transB) {
                transposeTile(bi, g.n, g.k, g.k, bt.data(), g.n);
                bi = bt.data();
              }
              tileProduct(g.transA, g.m, g.n, g.k, 1.0f,
                          a.data() + i * g.strideA, g.transA ? g.m : g.k, bi,
                          g.n, false, c.data() + i * g.strideC, g.n);
            }
          },
          trials);
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.1f", flops / t * 1e-9);
      tileRate = buf;
    }
    std::printf("%-24s %5lld %5lld %5lld %5lld %8.1f %8s %8s %8s  %s; %s\n",
                s.name.c_str(), (long long)g.batch, (long long)g.m,
                (long long)g.n, (long long)g.k, flops / blas * 1e-9,
                f32Rate.c_str(), bf16Rate.c_str(), tileRate.c_str(),
                f32Impl.c_str(), bf16Impl.c_str());
  }
  return 0;
}
