//===- OffloadTest.cpp - host memory space of an offloaded optimizer ------===//
//
// A program whose SGD step runs on the host (--offload optimizer): the
// host's arenas are allocations of their own, the transfers move real
// bytes, the update matches an f64 reference, checkpoints read the host's
// state, and buffers of the wrong memory space are refused at load time.
//
//===----------------------------------------------------------------------===//

#include "TrainerTestUtils.h"

#include "runtime/exec/CudaScratch.h"

namespace dtcc::runtime::testing {
namespace {

/// w (device) -= SGD with momentum 0.9 of the input gradient; the momentum
/// lives in the host's state and the update runs on the host.
struct OffloadedSgd {
  ProgramBuilder b;
  int w, buf, g, t;
  format::Instruction *sgd;

  OffloadedSgd() {
    w = b.variable("w", DType::kF32, {4}, std::vector<float>{1, 2, 3, 4}, true);
    buf = b.buffer(format::ARENA_HOST_STATE, DType::kF32, {4});
    auto *v = b.program().add_variables();
    v->set_name("w/momentum");
    v->set_buffer(buf);
    v->set_zero_init(true);
    int lr = b.constant(DType::kF32, 0.1f);
    int scale = b.constant(DType::kF32, 1.0f);
    g = b.temp(DType::kF32, {4});
    t = b.temp(DType::kI64, {});
    auto host = [&](DType dtype, std::vector<int64_t> shape) {
      return b.buffer(format::ARENA_HOST_WORKSPACE, dtype, std::move(shape));
    };
    int hw = host(DType::kF32, {4}), hg = host(DType::kF32, {4});
    int hlr = host(DType::kF32, {}), ht = host(DType::kI64, {});
    int hs = host(DType::kF32, {});
    format::Function *f = b.function("train_step");
    ProgramBuilder::input(f, "g", g);
    ProgramBuilder::input(f, "t", t);
    ProgramBuilder::inst(f, "copy_to_host", {g}, {hg});
    ProgramBuilder::inst(f, "copy_to_host", {w}, {hw});
    ProgramBuilder::inst(f, "copy_to_host", {lr}, {hlr});
    ProgramBuilder::inst(f, "copy_to_host", {t}, {ht});
    ProgramBuilder::inst(f, "copy_to_host", {scale}, {hs});
    sgd = ProgramBuilder::inst(f, "sgd", {hw, hg, buf, hlr, ht, hs}, {hw, buf});
    sgd->set_host(true);
    (*sgd->mutable_attrs())["momentum"].set_f(0.9);
    (*sgd->mutable_attrs())["dampening"].set_f(0.0);
    (*sgd->mutable_attrs())["weight_decay"].set_f(0.0);
    ProgramBuilder::inst(f, "copy_to_device", {hw}, {w});
  }
};

HostTensor floats(std::vector<float> v) {
  HostTensor t(DType::kF32, {int64_t(v.size())});
  std::memcpy(t.bytes.data(), v.data(), v.size() * sizeof(float));
  return t;
}

HostTensor step(int64_t s) {
  HostTensor t(DType::kI64, {});
  std::memcpy(t.bytes.data(), &s, sizeof(s));
  return t;
}

TEST(Offload, SgdStepOnTheHostMatchesAnF64Reference) {
  OffloadedSgd p;
  format::Program &program = p.b.program();
  auto device = createCpuDevice();
  auto exe = Executable::create(
      program, reinterpret_cast<const uint8_t *>(p.b.data().data()),
      p.b.data().size(), *device);
  ASSERT_TRUE(exe.isOk()) << exe.status().toString();
  Executable &e = *exe.value();
  EXPECT_EQ(e.hostStateBytes(), 64);
  EXPECT_GT(e.hostWorkspaceBytes(), 0);
  const TensorView *w = e.variable("w"), *buf = e.variable("w/momentum");
  ASSERT_TRUE(w && buf);
  // The host's arenas are memory of their own, not the device's.
  EXPECT_TRUE(e.isHostMemory(buf->data));
  EXPECT_FALSE(e.isHostMemory(w->data));

  const std::vector<std::vector<double>> grads = {{0.5, -1, 2, 0.25},
                                                  {1, 1, -3, 0}};
  std::vector<double> refW = {1, 2, 3, 4}, refBuf(4, 0.0);
  const Executable::Function *fn = e.findFunction("train_step");
  ASSERT_NE(fn, nullptr);
  for (int64_t s = 1; s <= 2; ++s) {
    const std::vector<double> &g = grads[s - 1];
    HostTensor gt = floats({float(g[0]), float(g[1]), float(g[2]), float(g[3])});
    HostTensor st = step(s);
    std::vector<HostTensor> outs;
    ASSERT_TRUE(e.run(*fn, {&gt, &st}, &outs).isOk());
    for (int i = 0; i < 4; ++i) {
      refBuf[i] = s == 1 ? g[i] : 0.9 * refBuf[i] + g[i];
      refW[i] -= 0.1 * refBuf[i];
    }
  }
  std::vector<float> gotW(4), gotBuf(4);
  ASSERT_TRUE(e.readBuffer(*w, gotW.data()).isOk());
  ASSERT_TRUE(e.readBuffer(*buf, gotBuf.data()).isOk());
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(gotW[i], refW[i], 1e-6) << i;
    EXPECT_NEAR(gotBuf[i], refBuf[i], 1e-6) << i;
  }
  // Per step: g, w, lr, t and the scale out; w back.
  EXPECT_EQ(e.bytesToHost(), 2 * (16 + 16 + 4 + 8 + 4));
  EXPECT_EQ(e.bytesToDevice(), 2 * 16);
  // A checkpoint's write lands in the host's state.
  std::vector<float> restored = {7, 8, 9, 10};
  ASSERT_TRUE(e.writeBuffer(*buf, restored.data()).isOk());
  EXPECT_EQ(static_cast<const float *>(buf->data)[2], 9.0f);
}

TEST(Offload, AHostKernelOnDeviceMemoryIsRefused) {
  OffloadedSgd p;
  // The host step reading the device's gradient instead of its copy.
  p.sgd->set_inputs(1, p.g);
  format::Program &program = p.b.program();
  auto device = createCpuDevice();
  auto exe = Executable::create(
      program, reinterpret_cast<const uint8_t *>(p.b.data().data()),
      p.b.data().size(), *device);
  ASSERT_FALSE(exe.isOk());
  EXPECT_NE(exe.status().toString().find(
                "reads a buffer of the other memory space"),
            std::string::npos)
      << exe.status().toString();
}

TEST(Offload, ATransferIntoTheWrongSpaceIsRefused) {
  OffloadedSgd p;
  // copy_to_device writing a host buffer.
  format::Function *f = p.b.program().mutable_functions(0);
  f->mutable_instructions(f->instructions_size() - 1)->set_outputs(0, p.buf);
  format::Program &program = p.b.program();
  auto device = createCpuDevice();
  auto exe = Executable::create(
      program, reinterpret_cast<const uint8_t *>(p.b.data().data()),
      p.b.data().size(), *device);
  ASSERT_FALSE(exe.isOk());
  EXPECT_NE(exe.status().toString().find(
                "writes a buffer of the other memory space"),
            std::string::npos)
      << exe.status().toString();
}

TEST(Offload, CudaScratchLeavesHostKernelsToTheHost) {
  // The CUDA backend's adamw asks for a table entry; the same instruction
  // run on the host (CPU kernels) asks the device for nothing.
  ProgramBuilder b;
  std::vector<int> ins;
  for (int i = 0; i < 4; ++i)
    ins.push_back(b.temp(DType::kF32, {8}));
  ins.push_back(b.temp(DType::kF32, {}));
  ins.push_back(b.temp(DType::kI64, {}));
  ins.push_back(b.temp(DType::kF32, {}));
  format::Function *f = b.function("train_step");
  auto *adamw = ProgramBuilder::inst(f, "adamw", ins, {ins[0], ins[2], ins[3]});
  for (const char *a : {"beta1", "beta2", "epsilon", "weight_decay"})
    (*adamw->mutable_attrs())[a].set_f(0.5);
  auto device = cudaProgramScratch(b.program(), -1);
  ASSERT_TRUE(device.isOk()) << device.status().toString();
  EXPECT_GT(device.value().totalBytes, 0);
  adamw->set_host(true);
  auto host = cudaProgramScratch(b.program(), -1);
  ASSERT_TRUE(host.isOk()) << host.status().toString();
  EXPECT_EQ(host.value().totalBytes, 0);
}

} // namespace
} // namespace dtcc::runtime::testing
