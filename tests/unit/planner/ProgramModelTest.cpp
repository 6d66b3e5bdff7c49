//===- ProgramModelTest.cpp - compiled programs priced and simulated -----===//
//
// Hand-built programs whose step time and memory plan can be worked out on
// paper: the simulator and the memory accounting must give exactly that.
//
//===----------------------------------------------------------------------===//

#include "planner/ProgramModel.h"
#include "runtime/base/DType.h"
#include "runtime/format/ProgramMetadata.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace dtcc::planner {
namespace {

using runtime::format::Buffer;
using runtime::format::Function;
using runtime::format::Instruction;
using runtime::format::Program;

constexpr int kF32 = 1;

/// A program under construction.
struct Builder {
  Program p;
  int64_t workspace = 0;

  int buffer(std::vector<int64_t> shape,
             runtime::format::Arena arena = runtime::format::ARENA_WORKSPACE,
             int64_t offset = -1) {
    Buffer *b = p.add_buffers();
    b->set_id(p.buffers_size() - 1);
    b->set_dtype(kF32);
    int64_t bytes = 4;
    for (int64_t d : shape) {
      b->add_shape(d);
      bytes *= d;
    }
    b->set_arena(arena);
    if (offset < 0) {
      offset = workspace;
      workspace += bytes;
    }
    b->set_offset(offset);
    return b->id();
  }
  Function *function(const std::string &name) {
    Function *f = p.add_functions();
    f->set_name(name);
    return f;
  }
  Instruction *kernel(Function *f, const std::string &kernel,
                      std::vector<int> ins, std::vector<int> outs,
                      const std::string &node = "") {
    Instruction *i = f->add_instructions();
    i->set_kernel(kernel);
    for (int id : ins)
      i->add_inputs(id);
    for (int id : outs)
      i->add_outputs(id);
    i->set_location(node);
    return i;
  }
  static void attr(Instruction *i, const std::string &name, int64_t v) {
    (*i->mutable_attrs())[name].set_i(v);
  }
  static void attr(Instruction *i, const std::string &name,
                   const std::string &v) {
    (*i->mutable_attrs())[name].set_s(v);
  }
  static void attr(Instruction *i, const std::string &name,
                   const std::vector<int64_t> &v) {
    for (int64_t x : v)
      (*i->mutable_attrs())[name].mutable_ints()->add_values(x);
  }
  static void attr(Instruction *i, const std::string &name,
                   const std::vector<double> &v) {
    for (double x : v)
      (*i->mutable_attrs())[name].mutable_floats()->add_values(x);
  }
  void mesh(std::vector<std::pair<std::string, int64_t>> axes) {
    for (auto &[name, size] : axes) {
      p.mutable_mesh()->add_axes(name);
      p.mutable_mesh()->add_sizes(size);
    }
  }
};

/// A device with round numbers: 1e12 FLOP/s at efficiency 0.5, 1e11 B/s at
/// efficiency 1, 1 us per kernel; links of 1e10 B/s bus bandwidth and
/// 1e-5 s per step.
ClusterSpec roundCluster(const std::string &kind) {
  ClusterSpec c = clusterPreset("cpu-local").value();
  c.device.kind = kind;
  c.device.peakFp32.value = 1e12;
  c.device.matmulEfficiency.value = 0.5;
  c.device.memoryBandwidth.value = 1e11;
  c.device.memoryEfficiency.value = 1;
  c.device.kernelOverhead.value = 1e-6;
  c.devicesPerNode.value = 8;
  c.intraNode.bandwidth.value = 1e10;
  c.intraNode.efficiency.value = 1;
  c.intraNode.latency.value = 1e-5;
  return c;
}

TEST(ProgramModel, KernelsAtRooflineMeasuredRateAndGemmCurve) {
  Builder b;
  Function *f = b.function("train_step");
  int x = b.buffer({64, 128}), w = b.buffer({128, 256}), y = b.buffer({64, 256});
  int z = b.buffer({64, 256});
  b.kernel(f, "matmul", {x, w}, {y});
  b.kernel(f, "gelu", {y}, {z});
  ClusterSpec c = roundCluster("cpu");
  double flops = 2.0 * 64 * 128 * 256;
  double counted = 0;
  EXPECT_NEAR(instructionSeconds(b.p, f->instructions(0), c.device, &counted),
              flops / 0.5e12 + 1e-6, 1e-15);
  EXPECT_EQ(counted, flops);
  // Without a measured rate: bytes read and written over bandwidth.
  double bytes = 2 * 64 * 256 * 4.0;
  EXPECT_NEAR(instructionSeconds(b.p, f->instructions(1), c.device),
              bytes / 1e11 + 1e-6, 1e-15);
  // With one: elements times seconds per element.
  c.device.kernelSeconds["gelu"] = {3e-9, "test"};
  EXPECT_NEAR(instructionSeconds(b.p, f->instructions(1), c.device),
              64 * 256 * 3e-9 + 1e-6, 1e-15);
  // With a rate per byte too (a GPU's calibration): its bytes read and
  // written times it, which prices a bf16 gelu at half an f32 one; a lookup
  // keeps its rate per looked-up element.
  c.device.kernelByteSeconds["gelu"] = {0.5e-9, "test"};
  EXPECT_NEAR(instructionSeconds(b.p, f->instructions(1), c.device),
              bytes * 0.5e-9 + 1e-6, 1e-15);
  {
    Builder h;
    Function *g = h.function("train_step");
    int yh = h.buffer({64, 256}), zh = h.buffer({64, 256});
    for (int id : {yh, zh})
      h.p.mutable_buffers(id)->set_dtype(int(runtime::DType::kBF16));
    h.kernel(g, "gelu", {yh}, {zh});
    EXPECT_NEAR(instructionSeconds(h.p, g->instructions(0), c.device),
                bytes / 2 * 0.5e-9 + 1e-6, 1e-15);
  }
  c.device.kernelByteSeconds.erase("gelu");
  // A matmul efficiency curve is read at cbrt(m k n) = cbrt(64 128 256) =
  // 128.
  c.device.gemmEfficiency = {{64, 0.25}, {128, 0.4}, {256, 0.8}};
  EXPECT_NEAR(instructionSeconds(b.p, f->instructions(0), c.device),
              flops / 0.4e12 + 1e-6, 1e-15);

  auto time = simulateProgram(b.p, c);
  ASSERT_TRUE(time.isOk()) << time.status().toString();
  EXPECT_NEAR(time.value().stepTime,
              flops / 0.4e12 + 64 * 256 * 3e-9 + 2e-6, 1e-15);
  EXPECT_EQ(time.value().flops, flops);
  ASSERT_EQ(time.value().kernels.size(), 2u);
}

TEST(ProgramModel, ConvolutionsAtTheirFlopsOrTheirBytes) {
  Builder b;
  Function *f = b.function("train_step");
  int x = b.buffer({8, 16, 32, 32}), w = b.buffer({32, 16, 3, 3});
  int y = b.buffer({8, 32, 32, 32});
  b.kernel(f, "conv", {x, w}, {y});
  b.kernel(f, "conv_input_grad", {y, w}, {x});
  b.kernel(f, "conv_filter_grad", {x, y}, {w});
  int dw = b.buffer({32, 1, 3, 3}), dx = b.buffer({8, 32, 32, 32});
  Builder::attr(b.kernel(f, "conv", {y, dw}, {dx}), "groups", 32);
  ClusterSpec c = roundCluster("cpu");
  // Compute bound: 2 N O (C/groups) K Y = 2 * 8 * 32 * 16 * 9 * 1024.
  double flops = 2.0 * 8 * 32 * 16 * 9 * 1024;
  for (int i = 0; i < 3; ++i) {
    double counted = 0;
    EXPECT_NEAR(instructionSeconds(b.p, f->instructions(i), c.device, &counted),
                flops / 0.5e12 + 1e-6, 1e-15)
        << f->instructions(i).kernel();
    EXPECT_EQ(counted, flops) << f->instructions(i).kernel();
  }
  // Depthwise: a ninth of a FLOP per byte, bound by memory.
  double counted = 0;
  double bytes = (2.0 * 8 * 32 * 32 * 32 + 32 * 9) * 4;
  EXPECT_NEAR(instructionSeconds(b.p, f->instructions(3), c.device, &counted),
              bytes / 1e11 + 1e-6, 1e-15);
  EXPECT_EQ(counted, 2.0 * 8 * 32 * 9 * 1024);
  // The efficiency curve is read at the implicit GEMM of a group,
  // [O/groups, C/groups K] x [C/groups K, N Y]: cbrt(32 * 144 * 8192).
  c.device.gemmEfficiency = {{300, 0.2}, {400, 0.3}};
  double size = std::cbrt(32.0 * 144 * 8192);
  double efficiency = 0.2 + 0.1 * std::log(size / 300) / std::log(400.0 / 300);
  EXPECT_NEAR(instructionSeconds(b.p, f->instructions(0), c.device),
              flops / (1e12 * efficiency) + 1e-6, 1e-15);
}

TEST(ProgramModel, RandomDrawsArePricedLikeDropout) {
  // dgraph.random reads a step and writes its result: memory-bound, or at
  // dropout's measured rate per element when it has none of its own.
  Builder b;
  Function *f = b.function("train_step");
  int step = b.buffer({}), y = b.buffer({64, 256});
  b.p.mutable_buffers(step)->set_dtype(int(runtime::DType::kI64));
  Instruction *k = b.kernel(f, "random", {step}, {y});
  ClusterSpec c = roundCluster("cpu");
  EXPECT_NEAR(instructionSeconds(b.p, *k, c.device),
              (8 + 64 * 256 * 4.0) / 1e11 + 1e-6, 1e-15);
  c.device.kernelSeconds["dropout"] = {3e-9, "test"};
  EXPECT_NEAR(instructionSeconds(b.p, *k, c.device), 64 * 256 * 3e-9 + 1e-6,
              1e-15);
  c.device.kernelSeconds["random"] = {5e-9, "test"};
  EXPECT_NEAR(instructionSeconds(b.p, *k, c.device), 64 * 256 * 5e-9 + 1e-6,
              1e-15);
}

TEST(ProgramModel, GridSampleIsPricedByItsTaps) {
  // grid_sample gathers 4 taps (bilinear, the default), 1 (nearest) or 16
  // (bicubic) per sampled element of an image, 8 or 64 of a volume, on top
  // of its operands' bytes; its
  // gradient as many per element of dy. Memory-bound, measured per-byte
  // rates aside.
  Builder b;
  Function *f = b.function("train_step");
  int x = b.buffer({2, 8, 16, 16}), g = b.buffer({2, 12, 12, 2}),
      y = b.buffer({2, 8, 12, 12});
  const double operands = (2 * 8 * 16 * 16 + 2 * 12 * 12 * 2) * 4.0;
  const double sampled = 2 * 8 * 12 * 12;
  Instruction *k = b.kernel(f, "grid_sample", {x, g}, {y});
  ClusterSpec c = roundCluster("cpu");
  EXPECT_NEAR(instructionSeconds(b.p, *k, c.device),
              (operands + sampled * 4 + sampled * 4 * 4) / 1e11 + 1e-6, 1e-15);
  Builder::attr(k, "mode", std::string("bicubic"));
  EXPECT_NEAR(instructionSeconds(b.p, *k, c.device),
              (operands + sampled * 4 + sampled * 16 * 4) / 1e11 + 1e-6, 1e-15);
  int dx = b.buffer({2, 8, 16, 16}), dg = b.buffer({2, 12, 12, 2});
  Instruction *grad = b.kernel(f, "grid_sample_grad", {y, x, g}, {dx, dg});
  Builder::attr(grad, "mode", std::string("nearest"));
  EXPECT_NEAR(instructionSeconds(b.p, *grad, c.device),
              (2 * operands + sampled * 4 + sampled * 1 * 4) / 1e11 + 1e-6,
              1e-15);
  // A volume: 8 taps trilinear, 64 bicubic.
  int vx = b.buffer({1, 2, 6, 6, 6}), vg = b.buffer({1, 4, 4, 4, 3}),
      vy = b.buffer({1, 2, 4, 4, 4});
  const double volume = (1 * 2 * 6 * 6 * 6 + 1 * 4 * 4 * 4 * 3) * 4.0;
  const double voxels = 1 * 2 * 4 * 4 * 4;
  Instruction *v = b.kernel(f, "grid_sample", {vx, vg}, {vy});
  EXPECT_NEAR(instructionSeconds(b.p, *v, c.device),
              (volume + voxels * 4 + voxels * 8 * 4) / 1e11 + 1e-6, 1e-15);
  Builder::attr(v, "mode", std::string("bicubic"));
  EXPECT_NEAR(instructionSeconds(b.p, *v, c.device),
              (volume + voxels * 4 + voxels * 64 * 4) / 1e11 + 1e-6, 1e-15);
}

TEST(ProgramModel, RoiAlignIsPricedByItsSamples) {
  // roi_align reads 4 neighbours of each bin's samples: sampling_ratio^2
  // of them, 2 x 2 counted when the regions decide at run time (0).
  Builder b;
  Function *f = b.function("train_step");
  int x = b.buffer({2, 8, 16, 16}), r = b.buffer({5, 4}), i = b.buffer({5}),
      y = b.buffer({5, 8, 3, 3});
  const double operands = (2 * 8 * 16 * 16 + 5 * 4 + 5 + 5 * 8 * 3 * 3) * 4.0;
  const double pooled = 5 * 8 * 3 * 3;
  Instruction *k = b.kernel(f, "roi_align", {x, r, i}, {y});
  Builder::attr(k, "sampling_ratio", int64_t(0));
  ClusterSpec c = roundCluster("cpu");
  EXPECT_NEAR(instructionSeconds(b.p, *k, c.device),
              (operands + pooled * 4 * 4 * 4) / 1e11 + 1e-6, 1e-15);
  Builder::attr(k, "sampling_ratio", int64_t(3));
  EXPECT_NEAR(instructionSeconds(b.p, *k, c.device),
              (operands + pooled * 9 * 4 * 4) / 1e11 + 1e-6, 1e-15);
}

TEST(ProgramModel, TopKComparesWholeRowsOnGpus) {
  // The CUDA kernel compares each element with its whole row; the CPU one
  // sorts partially: memory-bound there.
  Builder b;
  Function *f = b.function("train_step");
  int x = b.buffer({8, 4096}), v = b.buffer({8, 16}), i = b.buffer({8, 16});
  Instruction *k = b.kernel(f, "top_k", {x}, {v, i});
  Builder::attr(k, "axis", int64_t(1));
  Builder::attr(k, "k", int64_t(16));
  double bytes = (8 * 4096 + 2 * 8 * 16) * 4.0;
  EXPECT_NEAR(instructionSeconds(b.p, *k, roundCluster("gpu").device),
              8.0 * 4096 * 4096 / 1e12 + 1e-6, 1e-15);
  EXPECT_NEAR(instructionSeconds(b.p, *k, roundCluster("cpu").device),
              bytes / 1e11 + 1e-6, 1e-15);
}

TEST(ProgramModel, BroadcastMatmulsCountTheirResultsProducts) {
  // As the kernel runs them (runtime/base/MatmulShape.h): a weight on the
  // left of a 3-D activation is 6 GEMMs of 32x16x8 reading it with stride
  // 0; a shared weight on the right folds the batch into one 192x16x8 GEMM;
  // size-1 batch dimensions against larger ones give 2x3 GEMMs.
  Builder b;
  Function *f = b.function("train_step");
  int w = b.buffer({32, 16}), x = b.buffer({6, 16, 8}), y = b.buffer({6, 32, 8});
  int a = b.buffer({6, 32, 16}), v = b.buffer({16, 8}), z = b.buffer({6, 32, 8});
  int p = b.buffer({2, 1, 32, 16}), q = b.buffer({3, 16, 8}),
      r = b.buffer({2, 3, 32, 8});
  b.kernel(f, "matmul", {w, x}, {y});
  b.kernel(f, "matmul", {a, v}, {z});
  b.kernel(f, "matmul", {p, q}, {r});
  ClusterSpec c = roundCluster("cpu");
  c.device.gemmEfficiency = {{8, 0.1}, {16, 0.2}, {32, 0.4}, {64, 0.8}};
  struct Want {
    double gemms, m;
  } want[] = {{6, 32}, {1, 192}, {6, 32}};
  for (int i = 0; i < 3; ++i) {
    double counted = 0;
    double seconds = instructionSeconds(b.p, f->instructions(i), c.device, &counted);
    double flops = 2.0 * want[i].gemms * want[i].m * 16 * 8;
    EXPECT_EQ(counted, flops) << "matmul " << i;
    // The curve at cbrt(m k n) of one GEMM: 16 for 32x16x8, 29.1 for 192x16x8.
    double e = c.device.matmulEfficiencyAt(want[i].m, 16, 8);
    EXPECT_NEAR(seconds, flops / (1e12 * e) + want[i].gemms * 1e-6, 1e-15)
        << "matmul " << i;
  }
}

TEST(ProgramModel, MicroBatchesRunTrainStepThenApplyStep) {
  Builder b;
  Function *step = b.function("train_step");
  Function *apply = b.function("apply_step");
  int x = b.buffer({1000}), y = b.buffer({1000});
  b.kernel(step, "add", {x, x}, {y});
  b.kernel(apply, "adamw", {x, y}, {y});
  (*b.p.mutable_metadata())["dtcc.micro_batches"] = "3";
  ClusterSpec c = roundCluster("cpu");
  c.device.kernelSeconds["add"] = {1e-9, "test"};
  c.device.kernelSeconds["adamw"] = {5e-9, "test"};
  auto time = simulateProgram(b.p, c);
  ASSERT_TRUE(time.isOk());
  EXPECT_NEAR(time.value().stepTime, 3 * (1e-6 + 1e-6) + (5e-6 + 1e-6),
              1e-15);
  EXPECT_NEAR(time.value().stages[0].optimizer, 6e-6, 1e-15);
}

/// A data-parallel gradient all-reduce, blocking or started early and
/// waited for later, with compute in between.
Program dataParallel(bool async) {
  Builder b;
  b.mesh({{"dp", 4}});
  Function *f = b.function("train_step");
  int g = b.buffer({250000}), a = b.buffer({1000}), o = b.buffer({1000});
  Instruction *ar = b.kernel(f, "all_reduce", {g}, {g}, "grad");
  Builder::attr(ar, "axes", "dp");
  if (async) {
    Builder::attr(ar, "async", 1);
    Builder::attr(ar, "handle", 7);
  }
  b.kernel(f, "add", {a, a}, {o}); // 1e-3 s with the rate below
  if (async) {
    Instruction *w = b.kernel(f, "wait", {g}, {});
    Builder::attr(w, "handle", 7);
  }
  return b.p;
}

TEST(ProgramModel, CollectivesOverlapOnGpusNotOnCpuRanks) {
  // all-reduce of 1 MB over 4 ranks: 2 (3/4) 1e6 / 1e10 + latency x
  // min(2 (n-1), 2 log2 n) = 1.5e-4 + 4e-5.
  double allReduce = 1.5e-4 + 4e-5;
  double add = 1e-3 + 1e-6;
  for (const char *kind : {"cpu", "gpu"}) {
    ClusterSpec c = roundCluster(kind);
    c.device.kernelSeconds["add"] = {1e-6, "test"};
    auto blocking = simulateProgram(dataParallel(false), c);
    ASSERT_TRUE(blocking.isOk()) << blocking.status().toString();
    EXPECT_NEAR(blocking.value().stepTime, allReduce + add, 1e-12) << kind;
    ASSERT_EQ(blocking.value().comm.size(), 1u);
    EXPECT_EQ(blocking.value().comm[0].groupSize, 4);
    EXPECT_NEAR(blocking.value().comm[0].busBytes, 1.5e6, 1e-6);
    auto async = simulateProgram(dataParallel(true), c);
    ASSERT_TRUE(async.isOk());
    // A GPU's communication stream hides the all-reduce behind the add; a
    // CPU rank's collective takes the core the add runs on.
    EXPECT_NEAR(async.value().stepTime,
                std::string(kind) == "gpu" ? add : add + allReduce, 1e-12)
        << kind;
  }
  // A GPU whose collectives hold a quarter of its SMs: the add, which ran
  // beside the whole all-reduce, finishes a quarter of its time later, and
  // that wait is the collective's exposed time.
  ClusterSpec c = roundCluster("gpu");
  c.device.kernelSeconds["add"] = {1e-6, "test"};
  c.device.collectiveShare.value = 0.25;
  auto shared = simulateProgram(dataParallel(true), c);
  ASSERT_TRUE(shared.isOk());
  EXPECT_NEAR(shared.value().stepTime, add + 0.25 * allReduce, 1e-12);
  ASSERT_EQ(shared.value().comm.size(), 1u);
  EXPECT_NEAR(shared.value().comm[0].exposed, 0.25 * allReduce, 1e-12);
}

/// The weight gradients of a bf16 step: one widened to f32 and
/// reduce-scattered over dp in the backward pass, one joined (concat) with
/// another first, one all-reduced over tp and the optimizer's dp
/// all-reduce: FSDP1's passes come before the backward dp sums only.
TEST(ProgramModel, Fsdp1GradientPassesBeforeEachBackwardDpSum) {
  Builder b;
  b.mesh({{"dp", 4}, {"tp", 2}});
  (*b.p.mutable_metadata())[runtime::metadata::kDtype] = "bf16";
  Function *f = b.function("train_step");
  int g = b.buffer({1000000}), s = b.buffer({250000});
  int p1 = b.buffer({400}), p2 = b.buffer({600}), j = b.buffer({1000}),
      js = b.buffer({250});
  int t = b.buffer({1000}), n = b.buffer({1});
  for (int id : {p1, p2, j, js, t})
    b.p.mutable_buffers(id)->set_dtype(int(runtime::DType::kBF16));
  auto collective = [&](const char *kernel, std::vector<int> ins,
                        std::vector<int> outs, const char *axes,
                        const char *phase) {
    Instruction *i = b.kernel(f, kernel, ins, outs, "n");
    Builder::attr(i, "axes", axes);
    Builder::attr(i, "phase", phase);
  };
  collective("reduce_scatter", {g}, {s}, "dp", "backward");
  b.kernel(f, "concat", {p1, p2}, {j});
  collective("reduce_scatter", {j}, {js}, "dp", "backward");
  collective("all_reduce", {t}, {t}, "tp", "backward");
  collective("all_reduce", {n}, {n}, "dp", "optimizer");
  ClusterSpec c = roundCluster("gpu");
  auto compiled = simulateProgram(b.p, c);
  auto fsdp = simulateProgram(b.p, c, false,
                              RunKernels(AttentionKernels::kAsCompiled,
                                         GradientPasses::kFsdp1));
  ASSERT_TRUE(compiled.isOk() && fsdp.isOk());
  // The f32 gradient: its flat copy at bf16 (2 x 2 B) and its division at
  // f32 (2 x 4 B) a parameter, at 1e11 B/s and 1 us a kernel; the joined
  // bf16 one its division only (2 x 2 B).
  double copy = 2 * 1e6 * 2 / 1e11 + 1e-6;
  double divide = 2 * 1e6 * 4 / 1e11 + 1e-6;
  double joined = 2 * 1000 * 2 / 1e11 + 1e-6;
  EXPECT_NEAR(fsdp.value().stepTime - compiled.value().stepTime,
              copy + divide + joined, 1e-12);
  double copies = 0, divisions = 0;
  for (const KernelTime &k : fsdp.value().kernels) {
    if (k.kernel == "fsdp_flat_grad") {
      EXPECT_EQ(k.calls, 1);
      copies = k.seconds;
    }
    if (k.kernel == "fsdp_predivide") {
      EXPECT_EQ(k.calls, 2);
      divisions = k.seconds;
    }
  }
  EXPECT_NEAR(copies, copy, 1e-12);
  EXPECT_NEAR(divisions, divide + joined, 1e-12);
}

/// A pp send (async, waited for with `handle`) or receive in `f`.
Instruction *pipelineMessage(Builder &b, Function *f, const char *kernel,
                             int buffer, int64_t offset, int64_t tag,
                             int64_t handle = 0) {
  bool send = std::string(kernel) == "send";
  Instruction *i = send ? b.kernel(f, kernel, {buffer}, {})
                        : b.kernel(f, kernel, {}, {buffer});
  Builder::attr(i, "axes", "pp");
  Builder::attr(i, "offset", offset);
  Builder::attr(i, "tag", tag);
  if (send) {
    Builder::attr(i, "async", 1);
    Builder::attr(i, "handle", handle);
  }
  return i;
}

/// Two pipeline stages' functions in `b`, over a mesh of pp = 2.
std::pair<Function *, Function *> twoStages(Builder &b) {
  b.mesh({{"pp", 2}});
  Function *s0 = b.function("train_step_pp0");
  s0->set_stage(0);
  Function *s1 = b.function("train_step_pp1");
  s1->set_stage(1);
  return {s0, s1};
}

TEST(ProgramModel, PipelineStagesMeetAtSendAndRecv) {
  // Two stages: stage 0 computes A (1 ms) and sends it; stage 1 receives it
  // and computes B (2 ms); both then all-reduce a scalar over pp.
  Builder b;
  auto [s0, s1] = twoStages(b);
  int a = b.buffer({1000}), t = b.buffer({250000}), r = b.buffer({250000});
  int l = b.buffer({1});
  b.kernel(s0, "add", {a, a}, {a});
  pipelineMessage(b, s0, "send", t, 1, 0, 1);
  Builder::attr(b.kernel(s0, "wait", {t}, {}), "handle", 1);
  pipelineMessage(b, s1, "recv", r, -1, 0);
  b.kernel(s1, "mul", {a, a}, {a});
  for (Function *f : {s0, s1}) {
    Instruction *ar = b.kernel(f, "all_reduce", {l}, {l});
    Builder::attr(ar, "axes", "pp");
  }
  ClusterSpec c = roundCluster("gpu");
  c.device.kernelSeconds["add"] = {1e-6, "test"};
  c.device.kernelSeconds["mul"] = {2e-6, "test"};
  auto time = simulateProgram(b.p, c);
  ASSERT_TRUE(time.isOk()) << time.status().toString();
  double addT = 1e-3 + 1e-6, mulT = 2e-3 + 1e-6;
  double transfer = 1e-5 + 1e6 / 1e10;       // latency + bytes / bandwidth
  double scalar = 2e-5 + 2 * (1.0 / 2) * 4 / 1e10; // 2 steps of latency
  double end = addT + transfer + mulT + scalar;
  ASSERT_EQ(time.value().stages.size(), 2u);
  EXPECT_NEAR(time.value().stepTime, end, 1e-12);
  EXPECT_NEAR(time.value().stages[0].end, end, 1e-12);
  // Stage 0 idles while stage 1 computes; stage 1 while stage 0 does.
  EXPECT_NEAR(time.value().stages[0].idle, mulT, 1e-9);
  EXPECT_NEAR(time.value().stages[1].idle, addT, 1e-9);
  EXPECT_EQ(time.value().criticalStage, 0);
  EXPECT_TRUE(time.value().timeline.events.empty());

  // The timeline: each stage's kernels and transfers where the simulation
  // put them, one representative rank per stage.
  auto traced = simulateProgram(b.p, c, /*recordTimeline=*/true);
  ASSERT_TRUE(traced.isOk());
  const Timeline &timeline = traced.value().timeline;
  EXPECT_EQ(timeline.ranks, (std::vector<int64_t>{0, 1}));
  EXPECT_NEAR(timeline.stepTime, end, 1e-12);
  ASSERT_EQ(timeline.events.size(), 6u); // add, mul, send, recv, 2 all-reduce
  for (const TraceEvent &e : timeline.events) {
    if (e.name.rfind("mul", 0) == 0) {
      EXPECT_EQ(e.rank, 1);
      EXPECT_EQ(e.stream, 0);
      EXPECT_NEAR(e.start, addT + transfer, 1e-12); // after its receive
      EXPECT_NEAR(e.duration, mulT, 1e-12);
    }
    if (e.name.rfind("send", 0) == 0) {
      EXPECT_EQ(e.stream, 2); // pp
      EXPECT_NEAR(e.start, addT, 1e-12);
    }
  }

  // A receive whose send never comes is an error, not a hang.
  Builder lonely;
  lonely.mesh({{"pp", 2}});
  Function *l0 = lonely.function("train_step_pp0");
  Function *l1 = lonely.function("train_step_pp1");
  (void)l0;
  int x = lonely.buffer({4});
  Instruction *never = lonely.kernel(l1, "recv", {}, {x}, "h.3/out");
  Builder::attr(never, "axes", "pp");
  Builder::attr(never, "offset", -1);
  Builder::attr(never, "tag", 5);
  auto stuck = simulateProgram(lonely.p, c);
  ASSERT_FALSE(stuck.isOk());
  EXPECT_NE(stuck.status().message().find("h.3/out"), std::string::npos)
      << stuck.status().message();

  // An axis the mesh lacks is named.
  Builder bad;
  bad.mesh({{"dp", 2}});
  Function *f = bad.function("train_step");
  int y = bad.buffer({4});
  Instruction *ar = bad.kernel(f, "all_reduce", {y}, {y});
  Builder::attr(ar, "axes", "tp");
  auto unknown = simulateProgram(bad.p, c);
  ASSERT_FALSE(unknown.isOk());
  EXPECT_NE(unknown.status().message().find("'tp'"), std::string::npos);
}

TEST(ProgramModel, GroupsAcrossNodesUseTheNetwork) {
  // dp=2 x tp=4 on nodes of 4 devices: tp stays in a node, dp spans two.
  Builder b;
  b.mesh({{"dp", 2}, {"tp", 4}});
  Function *f = b.function("train_step");
  int g = b.buffer({1000});
  for (const char *axes : {"tp", "dp"}) {
    Instruction *ar = b.kernel(f, "all_reduce", {g}, {g});
    Builder::attr(ar, "axes", axes);
  }
  ClusterSpec c = roundCluster("gpu");
  c.devicesPerNode.value = 4;
  c.nodes = 2;
  auto time = simulateProgram(b.p, c);
  ASSERT_TRUE(time.isOk());
  ASSERT_EQ(time.value().comm.size(), 2u);
  for (const CommItem &item : time.value().comm)
    EXPECT_EQ(item.link, std::string(item.group) == "tp" ? Link::kIntraNode
                                                         : Link::kInterNode)
        << item.group;
}

TEST(ProgramModel, MemoryIsTheMemoryPlanTensorByTensor) {
  Builder b;
  Function *f = b.function("train_step");
  // State: a parameter, its Adam moment, a step counter.
  int w = b.buffer({100}, runtime::format::ARENA_STATE, 0);
  int m = b.buffer({100}, runtime::format::ARENA_STATE, 400);
  int step = b.buffer({2}, runtime::format::ARENA_STATE, 800);
  for (auto [name, id, trainable] :
       {std::tuple<const char *, int, bool>{"w", w, true},
        {"w/adam_m", m, false},
        {"__step", step, false}}) {
    auto *v = b.p.add_variables();
    v->set_name(name);
    v->set_buffer(id);
    v->set_trainable(trainable);
  }
  // Workspace: x (input, 4 KB) -> h (8 KB, kept for backward) -> loss;
  // then a gradient g (8 KB) at offset 4096 reusing x's space plus more,
  // and a view of h (the same bytes: an alias).
  b.workspace = 0;
  int x = b.buffer({1024}, runtime::format::ARENA_WORKSPACE, 0);
  int h = b.buffer({2048}, runtime::format::ARENA_WORKSPACE, 8192);
  int hv = b.buffer({2, 1024}, runtime::format::ARENA_WORKSPACE, 8192);
  int loss = b.buffer({1}, runtime::format::ARENA_WORKSPACE, 16384);
  int g = b.buffer({2048}, runtime::format::ARENA_WORKSPACE, 0);
  auto *in = f->add_inputs();
  in->set_name("x");
  in->set_buffer(x);
  b.kernel(f, "matmul", {x, w}, {h}, "fc");
  b.kernel(f, "reduce_sum", {hv}, {loss}, "loss");
  b.kernel(f, "mul", {hv, loss}, {g}, "fc_grad");
  b.kernel(f, "adamw", {w, g, m}, {w}, "opt");
  auto *out = f->add_outputs();
  out->set_name("loss");
  out->set_buffer(loss);
  b.p.set_workspace_bytes(16448);
  b.p.set_state_bytes(832);
  b.p.set_constant_bytes(64);

  ProgramMemory mem = programMemory(b.p);
  EXPECT_EQ(mem.total, 16448 + 832 + 64);
  EXPECT_EQ(mem.parameters, 400);
  EXPECT_EQ(mem.optimizerState, 400);
  EXPECT_EQ(mem.otherState, 8);
  EXPECT_EQ(mem.stateAlignment, 832 - 808);
  // Fullest at the gradient (instruction 2): h (8 KB, an activation: made
  // before the loss, counted once with its view), the loss (4 B) and g
  // (8 KB).
  EXPECT_EQ(mem.peakInstruction, 2);
  EXPECT_EQ(mem.peakNode, "fc_grad");
  EXPECT_EQ(mem.activations, 8192 + 4);
  EXPECT_EQ(mem.gradients, 8192);
  EXPECT_EQ(mem.fragmentation, 16448 - (8192 + 4 + 8192));
  ASSERT_FALSE(mem.largest.empty());
  EXPECT_EQ(mem.largest[0].bytes, 8192);
}

/// A program compiled for the GPU reserves its kernels' scratch when it
/// loads (runtime/exec/CudaScratch.h): the memory counts it, per stage.
TEST(ProgramModel, CudaProgramsCountTheKernelsScratch) {
  Builder b;
  Function *f = b.function("train_step");
  int x = b.buffer({64, 128}), w = b.buffer({128, 256}), y = b.buffer({64, 256});
  b.kernel(f, "matmul", {x, w}, {y}, "fc");
  b.kernel(f, "adamw", {}, {}, "opt");
  b.kernel(f, "adamw", {}, {}, "opt2");
  b.p.set_workspace_bytes(b.workspace);
  ProgramMemory cpu = programMemory(b.p);
  EXPECT_EQ(cpu.scratch, 0);
  EXPECT_EQ(cpu.total, b.workspace);
  (*b.p.mutable_metadata())["dtcc.target"] = "cuda";
  ProgramMemory gpu = programMemory(b.p);
  // cuBLASLt's 32 MiB workspace, then two 72-byte AdamW table entries.
  const int64_t scratch = (int64_t(32) << 20) + 256;
  EXPECT_EQ(gpu.scratch, scratch);
  EXPECT_EQ(gpu.total, b.workspace + scratch);
  // The stage that reserves most: stage 1 gathers along dim 1 (staging of
  // its [4, 12] output, 192 bytes) on top of the same table.
  Builder s;
  s.mesh({{"pp", 2}, {"dp", 2}});
  Function *s0 = s.function("train_step_pp0");
  s0->set_stage(0);
  s.kernel(s0, "adamw", {}, {});
  Function *s1 = s.function("train_step_pp1");
  s1->set_stage(1);
  int a = s.buffer({4, 6}), g = s.buffer({4, 12});
  Instruction *gather = s.kernel(s1, "all_gather", {a}, {g});
  Builder::attr(gather, "dim", 1);
  Builder::attr(gather, "axes", "dp");
  s.kernel(s1, "adamw", {}, {});
  (*s.p.mutable_metadata())["dtcc.target"] = "cuda";
  EXPECT_EQ(programMemory(s.p).scratch, 256 + 256);
}

/// A small CNN's step for the GPU: the convolutions' capped cuDNN
/// workspace and padded copy set the compute arena, the upsampling's tap
/// tables are persistent.
TEST(ProgramModel, CudaProgramsCountConvolutionAndResizeScratch) {
  Builder b;
  Function *f = b.function("train_step");
  // conv of [2, 3, 7, 5] by [4, 3, 3, 3], stride 2, pads (1, 0) and (1, 2):
  // cuDNN convolves the input padded to [2, 3, 9, 7], 378 floats.
  int x = b.buffer({2, 3, 7, 5}), w = b.buffer({4, 3, 3, 3}),
      y = b.buffer({2, 4, 4, 3});
  Instruction *conv = b.kernel(f, "conv", {x, w}, {y}, "conv1");
  Builder::attr(conv, "strides", std::vector<int64_t>{2, 2});
  Builder::attr(conv, "dilations", std::vector<int64_t>{1, 1});
  Builder::attr(conv, "pad_low", std::vector<int64_t>{1, 0});
  Builder::attr(conv, "pad_high", std::vector<int64_t>{1, 2});
  Builder::attr(conv, "groups", 1);
  // Batch-norm sums of y: 4 channels of 24, one slice each: 64 bytes.
  int shift = b.buffer({4}), sums = b.buffer({2, 4});
  b.kernel(f, "batch_norm_stats", {y, shift}, {sums}, "bn1");
  // Edge pad of y [2, 4, 4, 3] to [2, 4, 9, 6]: per dimension offsets
  // (out + 1), taps and weights (out each), 8 bytes apiece: (3 + 2 + 2),
  // (5 + 4 + 4), (10 + 9 + 9) and (7 + 6 + 6) entries, 536 bytes.
  int padded = b.buffer({2, 4, 9, 6}), zero = b.buffer({});
  Instruction *pad = b.kernel(f, "pad", {y, zero}, {padded}, "pad1");
  Builder::attr(pad, "mode", std::string("edge"));
  Builder::attr(pad, "low", std::vector<int64_t>{0, 0, 2, 1});
  Builder::attr(pad, "high", std::vector<int64_t>{0, 0, 3, 2});
  b.kernel(f, "adamw", {}, {}, "opt");
  b.p.set_workspace_bytes(b.workspace);
  (*b.p.mutable_metadata())["dtcc.target"] = "cuda";
  ProgramMemory gpu = programMemory(b.p);
  // Compute arena: 64 MiB, then 1512 bytes of padded input at 64 MiB;
  // rounded to 256. Persistent: the 536-byte table, the 72-byte AdamW
  // entry after it (608), rounded to 256.
  const int64_t compute = (int64_t(64) << 20) + 1536;
  EXPECT_EQ(gpu.scratch, compute + 768);
  EXPECT_EQ(gpu.total, b.workspace + compute + 768);
  // The CPU backend reserves none of it.
  (*b.p.mutable_metadata())["dtcc.target"] = "cpu";
  EXPECT_EQ(programMemory(b.p).scratch, 0);
}


/// A train_step of `layers` identical layers (a matmul and a gelu each,
/// named as the zoo names its nodes), an embedding-like copy before them
/// and a head matmul after.
Program layeredProgram(int layers) {
  Builder b;
  Function *f = b.function("train_step");
  int x = b.buffer({64, 128});
  int y = b.buffer({64, 128});
  b.kernel(f, "copy", {x}, {y}, "embed/Gather_tok");
  for (int l = 0; l < layers; ++l) {
    std::string p = "layers." + std::to_string(l);
    int w = b.buffer({128, 128}, runtime::format::ARENA_STATE);
    int h = b.buffer({64, 128}), g = b.buffer({64, 128});
    b.kernel(f, "matmul", {y, w}, {h}, p + "/mlp/MatMul_fc1");
    b.kernel(f, "gelu", {h}, {g}, p + "/mlp/Gelu");
    y = g;
  }
  int head = b.buffer({128, 512}, runtime::format::ARENA_STATE);
  int logits = b.buffer({64, 512});
  b.kernel(f, "matmul", {y, head}, {logits}, "head/MatMul_logits");
  return b.p;
}

TEST(ProgramModel, ExtrapolatedFiguresStayPhysical) {
  // A collective whose exposed time falls from the smaller compile to the
  // larger one (more compute to hide it behind) extrapolates far out to
  // zero exposed, not a negative time; a kernel whose time falls stops at
  // zero too.
  ProgramTime a, b;
  CommItem ca;
  ca.group = "pp";
  ca.kind = Collective::kSendRecv;
  ca.count = 8, ca.busBytes = 8e6, ca.time = 0.010, ca.exposed = 0.008;
  CommItem cb = ca;
  cb.count = 12, cb.busBytes = 12e6, cb.time = 0.015, cb.exposed = 0.004;
  a.comm = {ca};
  b.comm = {cb};
  KernelTime ka;
  ka.kernel = "copy", ka.calls = 4, ka.seconds = 0.002;
  KernelTime kb = ka;
  kb.calls = 2, kb.seconds = 0.001;
  a.kernels = {ka};
  b.kernels = {kb};
  InstructionTime ia;
  ia.kernel = "send", ia.node = "layers.0/x", ia.calls = 8, ia.seconds = 0.010,
  ia.exposed = 0.008;
  InstructionTime ib = ia;
  ib.calls = 12, ib.seconds = 0.015, ib.exposed = 0.004;
  a.instructions = {ia};
  b.instructions = {ib};
  ProgramTime x = extrapolateProgramTime(a, b, 10);
  ASSERT_EQ(x.comm.size(), 1u);
  EXPECT_NEAR(x.comm[0].count, 48, 1e-9);
  EXPECT_NEAR(x.comm[0].time, 0.060, 1e-12);
  EXPECT_EQ(x.comm[0].exposed, 0);
  ASSERT_EQ(x.instructions.size(), 1u);
  EXPECT_EQ(x.instructions[0].exposed, 0);
  EXPECT_TRUE(x.kernels.empty()); // 0 s: dropped like any kernel of no time
  // Within the two compiles the figures are interpolated as they are.
  ProgramTime mid = extrapolateProgramTime(a, b, 0.5);
  EXPECT_NEAR(mid.comm[0].exposed, 0.006, 1e-12);
  EXPECT_NEAR(mid.kernels[0].seconds, 0.0015, 1e-12);
}

TEST(ProgramModel, ExtrapolatedPipelineStepIsTheSlowestStagesEnd) {
  // Two stages: in the smaller compile stage 1 (the head's) is the slowest
  // and stage 0 waits for it; stage 0's own work grows faster, so further
  // out stage 0 is the slowest. The step is the largest extrapolated end,
  // each end the sum of its stage's parts (stage 0's shrinking wait stops
  // at 0), and the lists are stage 0's, from both programs.
  auto stage = [](int64_t s, double compute, double comm, double idle) {
    ProgramStageTime t;
    t.stage = s, t.compute = compute, t.comm = comm, t.idle = idle;
    t.end = compute + comm + idle;
    return t;
  };
  auto lists = [](int64_t s, const char *kernel, double seconds) {
    StageLists l;
    l.stage = s;
    KernelTime k;
    k.kernel = kernel, k.calls = 1, k.seconds = seconds;
    l.kernels = {k};
    return l;
  };
  ProgramTime a, b;
  a.stages = {stage(0, 2, 1, 7), stage(1, 8, 1, 1)};
  b.stages = {stage(0, 4, 2, 5), stage(1, 9, 1, 1)};
  a.stepTime = 10, b.stepTime = 11;
  a.criticalStage = b.criticalStage = 1;
  a.stageLists = {lists(0, "matmul", 2), lists(1, "softmax", 8)};
  b.stageLists = {lists(0, "matmul", 4), lists(1, "softmax", 9)};
  a.kernels = a.stageLists[1].kernels;
  b.kernels = b.stageLists[1].kernels;
  ProgramTime x = extrapolateProgramTime(a, b, 10);
  // Stage 0: compute 22, comm 11, idle max(0, 7 - 20) = 0: ends at 33.
  // Stage 1: 18 + 1 + 1 = 20. (A line through the steps: 20.)
  EXPECT_EQ(x.criticalStage, 0);
  EXPECT_NEAR(x.stepTime, 33, 1e-12);
  EXPECT_NEAR(x.stages[0].end, 33, 1e-12);
  EXPECT_NEAR(x.stages[1].end, 20, 1e-12);
  ASSERT_EQ(x.kernels.size(), 1u);
  EXPECT_EQ(x.kernels[0].kernel, "matmul");
  EXPECT_NEAR(x.kernels[0].seconds, 22, 1e-12);
  ASSERT_EQ(x.stageLists.size(), 2u);
}

TEST(ProgramModel, PipelineSendsAndReceivesAreOneRow) {
  // Stage 0 sends t and receives r; stage 1 receives t and sends r. Each
  // stage's sends and receives over pp are one "send/recv" row of its
  // communication (extrapolation matches rows by group and kind, so two
  // rows of one kind would be merged with the wrong partner).
  Builder b;
  auto [s0, s1] = twoStages(b);
  int t = b.buffer({1000}), r = b.buffer({1000});
  pipelineMessage(b, s0, "send", t, 1, 0, 1);
  pipelineMessage(b, s0, "recv", r, 1, 1);
  Builder::attr(b.kernel(s0, "wait", {t}, {}), "handle", 1);
  pipelineMessage(b, s1, "recv", t, -1, 0);
  pipelineMessage(b, s1, "send", r, -1, 1, 2);
  Builder::attr(b.kernel(s1, "wait", {r}, {}), "handle", 2);
  auto time = simulateProgram(b.p, roundCluster("gpu"));
  ASSERT_TRUE(time.isOk()) << time.status().toString();
  int rows = 0;
  for (const CommItem &item : time.value().comm)
    if (item.kind == Collective::kSendRecv) {
      ++rows;
      EXPECT_EQ(item.count, 2);
    }
  EXPECT_EQ(rows, 1);
}

TEST(ProgramModel, LayersCompiledOnceExtrapolateToTheWholeModel) {
  // The step of 7 layers from those of 2 and 3 (T(2) + 5 (T(3) - T(2)),
  // what dtcc plan does on GPU clusters), against 7 layers simulated.
  ClusterSpec c = roundCluster("gpu");
  auto t2 = simulateProgram(layeredProgram(2), c);
  auto t3 = simulateProgram(layeredProgram(3), c);
  auto t7 = simulateProgram(layeredProgram(7), c);
  ASSERT_TRUE(t2.isOk() && t3.isOk() && t7.isOk());
  ProgramTime x = extrapolateProgramTime(t2.value(), t3.value(), 5);
  EXPECT_NEAR(x.stepTime, t7.value().stepTime, 1e-12);
  EXPECT_NEAR(x.flops, t7.value().flops, 1e-3);
  ASSERT_EQ(x.kernels.size(), t7.value().kernels.size());
  for (const KernelTime &k : t7.value().kernels) {
    auto it = std::find_if(x.kernels.begin(), x.kernels.end(),
                           [&](const KernelTime &y) { return y.kernel == k.kernel; });
    ASSERT_NE(it, x.kernels.end()) << k.kernel;
    EXPECT_EQ(it->calls, k.calls) << k.kernel;
    EXPECT_NEAR(it->seconds, k.seconds, 1e-12) << k.kernel;
  }
  // Instructions by ONNX node: every layer's sum is the 7-layer program's
  // (layers.2 of the 3-layer program stands for layers 2..6).
  double layerSeconds = 0, wholeSeconds = 0;
  int64_t layerCalls = 0;
  for (const InstructionTime &i : x.instructions)
    if (i.node.rfind("layers.", 0) == 0 && i.kernel == "matmul") {
      layerSeconds += i.seconds;
      layerCalls += i.calls;
    }
  for (const InstructionTime &i : t7.value().instructions)
    if (i.node.rfind("layers.", 0) == 0 && i.kernel == "matmul")
      wholeSeconds += i.seconds;
  EXPECT_EQ(layerCalls, 7);
  EXPECT_NEAR(layerSeconds, wholeSeconds, 1e-12);
  // The instructions account for the whole compute of the step.
  double sum = 0;
  for (const InstructionTime &i : t7.value().instructions)
    sum += i.seconds;
  EXPECT_NEAR(sum, t7.value().stages[0].compute, 1e-12);

  ProgramMemory m2 = programMemory(layeredProgram(2));
  ProgramMemory m3 = programMemory(layeredProgram(3));
  ProgramMemory m7 = programMemory(layeredProgram(7));
  ProgramMemory mx = extrapolateProgramMemory(m2, m3, 5);
  EXPECT_EQ(mx.total, m7.total);
  EXPECT_EQ(mx.workspace, m7.workspace);
  EXPECT_EQ(mx.state, m7.state);
}

TEST(ProgramModel, ExtrapolatedMemoryPartsAddUpToItsTotal) {
  // The peak's tensors change kind between the two compiles (here the
  // activations fall and the gradients grow while the total grows): each
  // part's line alone, clamped at zero, would not add up to the total's.
  ProgramMemory a, b;
  a.parameters = b.parameters = 100;
  a.optimizerState = b.optimizerState = 200;
  a.total = 1300, b.total = 1500; // +200 a layer
  a.activations = 600, b.activations = 300;
  a.gradients = 300, b.gradients = 700;
  a.commBuffers = 100, b.commBuffers = 200;
  ProgramMemory x = extrapolateProgramMemory(a, b, 4);
  EXPECT_EQ(x.total, 2100);
  EXPECT_GE(x.activations, 0);
  EXPECT_GE(x.commBuffers, 0);
  EXPECT_GE(x.gradients, 0);
  EXPECT_EQ(x.parameters + x.optimizerState + x.activations + x.gradients +
                x.commBuffers,
            x.total);
}

TEST(ProgramModel, ExtrapolatedMemoryPeaksInTheFunctionThatOutgrowsTheOthers) {
  // Compiled with 4 and 5 layers the program peaks in @apply_step (a copy
  // of the embeddings' gradients, +10 a layer); @train_step's activations
  // grow by 100 a layer and pass it: with 20 layers the program peaks there.
  ProgramMemory a, b;
  a.parameters = 1000, b.parameters = 1100;
  a.workspace = 900, b.workspace = 910;
  a.total = 1900, b.total = 2010;
  for (ProgramMemory *m : {&a, &b}) {
    m->peakFunction = "apply_step";
    m->gradients = m->workspace;
  }
  auto fn = [](std::string name, int64_t workspace, int64_t activations,
               int64_t gradients) {
    FunctionMemory f;
    f.function = std::move(name);
    f.workspace = workspace;
    f.activations = activations;
    f.gradients = gradients;
    return f;
  };
  a.functions = {fn("train_step", 600, 500, 100), fn("apply_step", 900, 0, 900)};
  b.functions = {fn("train_step", 700, 600, 100), fn("apply_step", 910, 0, 910)};
  ProgramMemory x = extrapolateProgramMemory(a, b, 16); // 5 + 15 layers
  EXPECT_EQ(x.peakFunction, "train_step");
  EXPECT_EQ(x.workspace, 600 + 16 * 100);
  EXPECT_EQ(x.parameters, 1000 + 16 * 100);
  EXPECT_EQ(x.total, x.parameters + x.workspace);
  EXPECT_EQ(x.activations, 500 + 16 * 100);
  EXPECT_EQ(x.gradients, 100);
  // Near the compiled sizes the function `b` peaks in stays.
  ProgramMemory y = extrapolateProgramMemory(a, b, 2);
  EXPECT_EQ(y.peakFunction, "apply_step");
  EXPECT_EQ(y.workspace, 920);
  EXPECT_EQ(y.total, 2120);
  // Where the peak function's own line falls below zero (programs of too
  // few layers), no other function's is taken for the program's.
  b.functions[1].workspace = 800;
  b.peakFunction = "apply_step";
  ProgramMemory z = extrapolateProgramMemory(a, b, 16);
  EXPECT_EQ(z.peakFunction, "apply_step");
}

TEST(ProgramModel, FusedAttentionPricesTheCoreAsOneKernel) {
  // scores = q k^T, probs = softmax(scores), ctx = probs v; the loss's
  // gradient; then the backward of the scores' matmul.
  Builder b;
  Function *f = b.function("train_step");
  int q = b.buffer({8, 256, 64}), k = b.buffer({8, 64, 256});
  int s = b.buffer({8, 256, 256}), p = b.buffer({8, 256, 256});
  int v = b.buffer({8, 256, 64}), ctx = b.buffer({8, 256, 64});
  int dq = b.buffer({8, 256, 64});
  int l = b.buffer({4}), dl = b.buffer({4});
  b.kernel(f, "matmul", {q, k}, {s}, "layers.0/attn/MatMul_scores");
  b.kernel(f, "softmax", {s}, {p}, "layers.0/attn/Softmax_probs");
  b.kernel(f, "matmul", {p, v}, {ctx}, "layers.0/attn/MatMul_context");
  b.kernel(f, "cross_entropy_grad", {l}, {dl}, "loss/CrossEntropy");
  b.kernel(f, "matmul", {s, v}, {dq}, "layers.0/attn/MatMul_scores");
  ClusterSpec c = roundCluster("gpu");
  c.device.attentionEfficiency.value = 0.25;
  double flopsScores = 2.0 * 8 * 256 * 64 * 256;
  double flopsContext = 2.0 * 8 * 256 * 256 * 64;
  double flopsBackward = 2.0 * 8 * 256 * 256 * 64;
  double attention = 0.25e12, overhead = 1e-6;
  double lossSeconds = instructionSeconds(b.p, f->instructions(3), c.device);
  auto fused = simulateProgram(b.p, c, false, AttentionKernels::kFlash);
  ASSERT_TRUE(fused.isOk());
  // Causal blocks skipped (half the FLOPs), the backward x 5/4, the
  // softmax inside the kernel; the loss's gradient as before.
  double expected = (flopsScores / 2 + flopsContext / 2 +
                     flopsBackward / 2 * 1.25) / attention +
                    3 * overhead + lossSeconds;
  EXPECT_NEAR(fused.value().stepTime, expected, 1e-12);
  auto unfused = simulateProgram(b.p, c);
  ASSERT_TRUE(unfused.isOk());
  double plain = 0;
  for (int i = 0; i < f->instructions_size(); ++i)
    plain += instructionSeconds(b.p, f->instructions(i), c.device);
  EXPECT_NEAR(unfused.value().stepTime, plain, 1e-12);
  EXPECT_TRUE(isAttentionCoreNode("layers.3/attn/Softmax_probs"));
  EXPECT_FALSE(isAttentionCoreNode("layers.3/attn/MatMul_qkv"));
  EXPECT_FALSE(isAttentionCoreNode("layers.3/mlp/MatMul_scores"));
}

TEST(ProgramModel, FusedSoftmaxPricesScaleMaskSoftmaxAsOneKernelEachWay) {
  // A bf16 core as dtcc compiles it: the scores scaled and masked, cast to
  // fp32 for the softmax and back, dropped; backward: the dropout's scale
  // and mask, a cast, softmax's gradient, a cast and the scale.
  Builder b;
  (*b.p.mutable_metadata())["dtcc.dtype"] = "bf16";
  Function *f = b.function("train_step");
  const int64_t n = 8 * 256 * 256;
  auto bf16 = [&](std::vector<int64_t> shape) {
    int id = b.buffer(shape);
    b.p.mutable_buffers(id)->set_dtype(int(runtime::DType::kBF16));
    return id;
  };
  int q = bf16({8, 256, 64}), k = bf16({8, 64, 256}), v = bf16({8, 256, 64});
  int s = bf16({8, 256, 256}), scale = bf16({8, 256, 256});
  int s32 = b.buffer({8, 256, 256}), p32 = b.buffer({8, 256, 256});
  int p = bf16({8, 256, 256}), d = bf16({8, 256, 256});
  int mask = b.buffer({8, 256, 256});
  b.p.mutable_buffers(mask)->set_dtype(int(runtime::DType::kBool));
  int ctx = bf16({8, 256, 64}), l = b.buffer({4}), dl = b.buffer({4});
  int g = bf16({8, 256, 256}), g32 = b.buffer({8, 256, 256});
  int ds32 = b.buffer({8, 256, 256}), ds = bf16({8, 256, 256});
  const std::string core = "layers.0/attn/";
  b.kernel(f, "matmul", {q, k}, {s}, core + "MatMul_scores");
  b.kernel(f, "div", {s, scale}, {s}, core + "Div_scale");
  b.kernel(f, "add", {s, scale}, {s}, core + "Add_causal_mask");
  b.kernel(f, "cast", {s}, {s32}, core + "Add_causal_mask");
  b.kernel(f, "softmax", {s32}, {p32}, core + "Softmax_probs");
  b.kernel(f, "cast", {p32}, {p}, core + "Softmax_probs");
  b.kernel(f, "dropout", {p}, {d, mask}, core + "Dropout_probs");
  b.kernel(f, "matmul", {d, v}, {ctx}, core + "MatMul_context");
  b.kernel(f, "cross_entropy_grad", {l}, {dl}, "loss/CrossEntropy");
  b.kernel(f, "mul", {g, scale}, {g}, core + "Dropout_probs");
  b.kernel(f, "select", {mask, g, scale}, {g}, core + "Dropout_probs");
  b.kernel(f, "cast", {g}, {g32}, core + "Dropout_probs");
  b.kernel(f, "softmax_grad", {p32, g32}, {ds32}, core + "Softmax_probs");
  b.kernel(f, "cast", {ds32}, {ds}, core + "Softmax_probs");
  b.kernel(f, "div", {ds, scale}, {ds}, core + "Div_scale");
  ClusterSpec c = roundCluster("gpu");
  const DeviceSpec &dev = c.device;
  auto seconds = [&](int i) {
    return instructionSeconds(b.p, f->instructions(i), dev);
  };
  double bandwidth = dev.memoryBandwidth.value * dev.memoryEfficiency.value;
  // The GEMMs, the dropout kernels and the loss as compiled; the softmax
  // and its gradient at 2 and 3 bf16 score tensors; the rest inside them.
  double expected = seconds(0) + seconds(6) + seconds(7) + seconds(8) +
                    seconds(10) + 2.0 * 2 * n / bandwidth +
                    3.0 * 2 * n / bandwidth + 2 * dev.kernelOverhead.value;
  auto fused = simulateProgram(b.p, c, false, AttentionKernels::kFusedSoftmax);
  ASSERT_TRUE(fused.isOk());
  EXPECT_NEAR(fused.value().stepTime, expected, 1e-12);
  // As compiled, every instruction costs its own: fused, the memory-bound
  // part of the core costs under 30% of that.
  auto compiled = simulateProgram(b.p, c);
  ASSERT_TRUE(compiled.isOk());
  double plain = 0;
  for (int i = 0; i < f->instructions_size(); ++i)
    plain += seconds(i);
  EXPECT_NEAR(compiled.value().stepTime, plain, 1e-12);
  double gemms = seconds(0) + seconds(7);
  EXPECT_LT(fused.value().stepTime - gemms, 0.3 * (plain - gemms));
}

} // namespace
} // namespace dtcc::planner
