//===- attention_cpu.cpp - dtcc's CPU attention kernels, timed ------------===//
//
// GFLOP/s of dgraph.attention and dgraph.attention_grad (causal, f32) as the
// CPU registry binds them, at the attention shapes of the two benchmark
// GPTs (bench/train_gpt_cpu.py: 4 x 128 with 4 heads of 32 over 64 tokens,
// 6 x 384 with 6 heads of 64 over 128 tokens, batch 8) and any given one.
// FLOPs count the products a causal kernel needs (half the score matrix
// and the diagonal): 2 in the forward (S = QK^T, O = PV), 5 in the
// backward (S again, dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q).
// The thread count is the kernels' one setting (OMP_NUM_THREADS, else
// OPENBLAS_NUM_THREADS, else every core); each figure is the best of
// `--trials` timings of at least 50 ms each.
//
//   OMP_NUM_THREADS=1 build/bin/dtcc-bench-attention-cpu [--trials 5]
//       [--shape BH,S,D]   (batch x heads, sequence, head width instead)
//       [--forward | --backward]   (time one kernel only: for profilers)
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/Kernel.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

using namespace dtcc::runtime;

namespace {

struct Shape {
  std::string name;
  int64_t bh, s, d;
};

/// Best seconds per call of `fn` over `trials` timings of >= 50 ms each.
double bestSeconds(const std::function<void()> &fn, int trials) {
  fn(); // warm up: first touches, lazily made state
  double best = 1e30;
  for (int t = 0; t < trials; ++t) {
    int64_t calls = 0;
    auto start = std::chrono::steady_clock::now();
    double elapsed = 0;
    do {
      fn();
      ++calls;
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                              start)
                    .count();
    } while (elapsed < 0.05);
    best = std::min(best, elapsed / double(calls));
  }
  return best;
}

KernelFn bind(const std::string &name, std::vector<TensorView> ins,
              std::vector<TensorView> outs, const Attrs &attrs) {
  KernelContext ctx;
  ctx.kernel = name;
  ctx.location = "bench";
  ctx.inputs = std::move(ins);
  ctx.outputs = std::move(outs);
  ctx.attrs = attrs;
  const KernelFactory *factory = cpuKernels().find(name);
  if (!factory) {
    std::fprintf(stderr, "no CPU kernel %s\n", name.c_str());
    std::exit(1);
  }
  StatusOr<KernelFn> fn = (*factory)(ctx);
  if (!fn.isOk()) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(),
                 fn.status().message().c_str());
    std::exit(1);
  }
  return std::move(fn).value();
}

void run(const Shape &sh, int trials, bool forward, bool backward) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  auto tensor = [&](int64_t rows, int64_t width) {
    std::vector<float> t(size_t(sh.bh * rows * width));
    for (float &x : t)
      x = u(rng);
    return t;
  };
  std::vector<float> q = tensor(sh.s, sh.d), k = tensor(sh.s, sh.d),
                     v = tensor(sh.s, sh.d), o = tensor(sh.s, sh.d),
                     dout = tensor(sh.s, sh.d), lse = tensor(sh.s, 1),
                     dq = tensor(sh.s, sh.d), dk = tensor(sh.s, sh.d),
                     dv = tensor(sh.s, sh.d);
  const std::vector<int64_t> rows = {sh.bh, sh.s, sh.d};
  auto view = [&](std::vector<float> &t, std::vector<int64_t> shape) {
    return makeView(t.data(), DType::kF32, std::move(shape));
  };
  Attrs attrs;
  attrs.set("scale", 1.0 / std::sqrt(double(sh.d)));
  attrs.set("causal", int64_t(1));
  KernelFn fwd =
      bind("attention", {view(q, rows), view(k, rows), view(v, rows)},
           {view(o, rows), view(lse, {sh.bh, sh.s})}, attrs);
  if (!fwd().isOk())
    std::exit(1);
  KernelFn bwd =
      bind("attention_grad",
           {view(q, rows), view(k, rows), view(v, rows), view(o, rows),
            view(lse, {sh.bh, sh.s}), view(dout, rows)},
           {view(dq, rows), view(dk, rows), view(dv, rows)}, attrs);
  // One product of the causal half: s (s + 1) / 2 scores of d terms.
  const double product =
      2.0 * double(sh.bh) * double(sh.s) * double(sh.s + 1) / 2 * double(sh.d);
  const double f = forward ? bestSeconds([&] { (void)fwd(); }, trials) : 0;
  const double b = backward ? bestSeconds([&] { (void)bwd(); }, trials) : 0;
  std::printf("%-24s %10.1f us %8.1f GFLOP/s %10.1f us %8.1f GFLOP/s\n",
              sh.name.c_str(), f * 1e6, 2 * product / f / 1e9, b * 1e6,
              5 * product / b / 1e9);
}

} // namespace

int main(int argc, char **argv) {
  int trials = 5;
  bool forward = true, backward = true;
  std::vector<Shape> shapes = {{"4x128 (32 x 64 x 32)", 32, 64, 32},
                               {"6x384 (48 x 128 x 64)", 48, 128, 64}};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--trials" && i + 1 < argc) {
      trials = std::atoi(argv[++i]);
    } else if (a == "--shape" && i + 1 < argc) {
      Shape s;
      if (std::sscanf(argv[++i], "%ld,%ld,%ld", &s.bh, &s.s, &s.d) != 3) {
        std::fprintf(stderr, "--shape BH,S,D\n");
        return 2;
      }
      s.name = std::string(argv[i]);
      shapes = {s};
    } else if (a == "--forward") {
      backward = false;
    } else if (a == "--backward") {
      forward = false;
    } else {
      std::fprintf(stderr, "usage: dtcc-bench-attention-cpu [--trials N] "
                           "[--shape BH,S,D] [--forward | --backward]\n");
      return 2;
    }
  }
  std::printf("%-24s %13s %16s %13s %16s\n", "shape (bh x s x d)", "attention",
              "", "attention_grad", "");
  for (const Shape &s : shapes)
    run(s, trials, forward, backward);
  return 0;
}
