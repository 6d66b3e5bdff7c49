//===- attention_cpu.cpp - dtcc's CPU attention kernels, timed ------------===//
//
// GFLOP/s of dgraph.attention and dgraph.attention_grad (causal, f32) as the
// CPU registry binds them, at the attention shapes of the two benchmark
// GPTs (bench/train_gpt_cpu.py: 4 x 128 with 4 heads of 32 over 64 tokens,
// 6 x 384 with 6 heads of 64 over 128 tokens, batch 8) and any given one.
// The workloads, their binding and their timing are dtcc calibrate's
// (tools/dtcc-calibrate/KernelBench.h: attentionCases, BoundKernelCase,
// timeSustained: the median of `--trials` windows of at least 50 ms).
// FLOPs count the products a causal kernel needs (half the score matrix
// and the diagonal): 2 in the forward (S = QK^T, O = PV), 5 in the
// backward (S again, dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q).
// The thread count is the kernels' one setting (OMP_NUM_THREADS, else
// OPENBLAS_NUM_THREADS, else every core).
//
//   OMP_NUM_THREADS=1 build/bin/dtcc-bench-attention-cpu [--trials 5]
//       [--shape BH,S,D]   (batch x heads, sequence, head width instead)
//       [--forward | --backward]   (time one kernel only: for profilers)
//
//===----------------------------------------------------------------------===//

#include "tools/dtcc-calibrate/KernelBench.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace dtcc;

namespace {

struct Shape {
  std::string name;
  int64_t bh, s, d;
};

/// Seconds per call of `kase` bound through the CPU registry; exits with
/// the error where binding or a run fails.
double seconds(const calibrate::KernelCase &kase, int trials) {
  auto bound = calibrate::BoundKernelCase::bind(kase, runtime::cpuKernels());
  if (!bound.isOk()) {
    std::fprintf(stderr, "%s\n", bound.status().message().c_str());
    std::exit(1);
  }
  calibrate::BoundKernelCase &run = *bound.value();
  auto t = calibrate::timeSustained([&] { return run.run(); }, 0.05, trials);
  if (!t.isOk()) {
    std::fprintf(stderr, "%s\n", t.status().message().c_str());
    std::exit(1);
  }
  return t.value();
}

void run(const Shape &sh, int trials, bool forward, bool backward) {
  const std::vector<calibrate::KernelCase> cases =
      calibrate::attentionCases(sh.bh, sh.s, sh.d, runtime::DType::kF32);
  // One product of the causal half: s (s + 1) / 2 scores of d terms.
  const double product =
      2.0 * double(sh.bh) * double(sh.s) * double(sh.s + 1) / 2 * double(sh.d);
  const double f = forward ? seconds(cases[0], trials) : 0;
  const double b = backward ? seconds(cases[1], trials) : 0;
  std::printf("%-24s %10.1f us %8.1f GFLOP/s %10.1f us %8.1f GFLOP/s\n",
              sh.name.c_str(), f * 1e6, f > 0 ? 2 * product / f / 1e9 : 0.0,
              b * 1e6, b > 0 ? 5 * product / b / 1e9 : 0.0);
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
