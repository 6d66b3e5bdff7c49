//===- ScratchTest.cpp - kernels' scratch: layout, reservation, sizes -----===//
//
// The arithmetic of the scratch reservation worked out by hand (arenas
// shared across instructions, persistent tables back to back), the plan's
// binding, an Executable reserving its kernels' scratch before the first
// run and counting it in its peak, and what each CUDA kernel requests
// (runtime/exec/CudaScratch.h), which the planner counts for programs
// compiled with --target cuda.
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/CudaScratch.h"
#include "runtime/exec/Executable.h"
#include "runtime/exec/Scratch.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

namespace dtcc::runtime {
namespace {

ScratchRequest compute(int64_t bytes, int64_t alignment = kScratchAlignment) {
  return {ScratchUse::kCompute, bytes, alignment};
}
ScratchRequest comm(int64_t bytes) { return {ScratchUse::kComm, bytes}; }
ScratchRequest persistent(int64_t bytes, int64_t alignment) {
  return {ScratchUse::kPersistent, bytes, alignment};
}

TEST(ScratchLayout, ArenasAreSharedAcrossInstructions) {
  auto l = layoutScratch({{compute(1000)},
                          {compute(300), compute(10, 8)},
                          {comm(500), comm(600)},
                          {persistent(72, 8)},
                          {persistent(72, 8)},
                          {compute(2000)}});
  ASSERT_TRUE(l.isOk()) << l.status().toString();
  // The compute arena: the largest instruction (2000), not the sum; one
  // instruction's requests never overlap (300 at 0, 10 at 304).
  EXPECT_EQ(l->computeBytes, 2000);
  // The communication arena: 500 at 0, then 600 at 512.
  EXPECT_EQ(l->commBytes, 512 + 600);
  EXPECT_EQ(l->commOffset, 2048);
  // Persistent tables back to back at their own alignment.
  EXPECT_EQ(l->persistentBytes, 144);
  EXPECT_EQ(l->persistentOffset, 3328); // 2048 + 1112 = 3160, rounded up
  EXPECT_EQ(l->totalBytes, 3584);       // 3328 + 144 = 3472, rounded up
  const std::vector<std::vector<int64_t>> offsets = {
      {0}, {0, 304}, {2048, 2560}, {3328}, {3400}, {0}};
  EXPECT_EQ(l->offsets, offsets);
}

TEST(ScratchLayout, NothingRequestedTakesNothing) {
  auto l = layoutScratch({});
  ASSERT_TRUE(l.isOk());
  EXPECT_EQ(l->totalBytes, 0);
  auto empty = layoutScratch({{}, {}});
  ASSERT_TRUE(empty.isOk());
  EXPECT_EQ(empty->totalBytes, 0);
}

TEST(ScratchLayout, BadRequestsAreErrors) {
  EXPECT_FALSE(layoutScratch({{compute(-1)}}).isOk());
  EXPECT_FALSE(layoutScratch({{compute(8, 3)}}).isOk());
  EXPECT_FALSE(layoutScratch({{compute(8, 512)}}).isOk());
  EXPECT_FALSE(layoutScratch({{compute(8, 0)}}).isOk());
}

TEST(ScratchPlan, SlotsPointIntoTheReservationOnceBound) {
  ScratchPlan plan;
  auto a = plan.request({compute(100), comm(40)});
  auto b = plan.request({persistent(16, 8)});
  ASSERT_TRUE(a.isOk() && b.isOk());
  EXPECT_EQ(a->at(0).get(), nullptr);
  std::vector<std::string> order;
  plan.whenReserved([&]() -> Status {
    // Every slot is set before the callbacks run.
    EXPECT_NE(b->at(0).get(), nullptr);
    order.push_back("first");
    return Status::ok();
  });
  plan.whenReserved([&] {
    order.push_back("second");
    return Status::ok();
  });
  auto l = plan.layout();
  ASSERT_TRUE(l.isOk());
  // Compute 100 at 0, communication 40 at 256, the table at 512.
  EXPECT_EQ(l->commOffset, 256);
  EXPECT_EQ(l->persistentOffset, 512);
  EXPECT_EQ(l->totalBytes, 768);
  std::vector<char> memory(size_t(l->totalBytes));
  // Null memory for a non-empty plan is refused.
  EXPECT_FALSE(plan.bind(nullptr).isOk());
  ASSERT_TRUE(plan.bind(memory.data()).isOk());
  EXPECT_EQ(a->at(0).as<char>(), memory.data() + l->offsets[0][0]);
  EXPECT_EQ(a->at(1).as<char>(), memory.data() + l->offsets[0][1]);
  EXPECT_EQ(b->at(0).as<char>(), memory.data() + l->offsets[1][0]);
  EXPECT_EQ(order, (std::vector<std::string>{"first", "second"}));
  // Reserved once; no requests after.
  EXPECT_FALSE(plan.bind(memory.data()).isOk());
  EXPECT_FALSE(plan.request({compute(8)}).isOk());
}

/// The CPU device with one more kernel, "scratch_copy": y = x through
/// compute scratch (x's bytes) and a persistent 8-byte table it fills when
/// the reservation is made.
class ScratchDevice final : public Device {
public:
  ScratchDevice() : cpu_(createCpuDevice()), registry_(cpuKernels()) {
    registry_.add("scratch_copy", [this](const KernelContext &ctx)
                                      -> StatusOr<KernelFn> {
      const TensorView x = ctx.inputs[0], y = ctx.outputs[0];
      DTCC_ASSIGN_OR_RETURN(
          std::vector<ScratchSlot> slots,
          ctx.requestScratch({compute(x.sizeInBytes()), persistent(8, 8)}));
      ScratchSlot staging = slots[0], table = slots[1];
      ctx.scratch->whenReserved([table, this] {
        ++tablesWritten;
        std::memcpy(table.get(), "reserved", 8);
        return Status::ok();
      });
      return KernelFn([=]() -> Status {
        if (!staging.get() || std::memcmp(table.get(), "reserved", 8) != 0)
          return internalError("scratch not reserved before the run");
        std::memcpy(staging.get(), x.data, size_t(x.sizeInBytes()));
        std::memcpy(y.data, staging.get(), size_t(x.sizeInBytes()));
        return Status::ok();
      });
    });
  }
  std::string name() const override { return "scratch test"; }
  StatusOr<void *> allocate(int64_t bytes) override {
    allocated += bytes;
    return cpu_->allocate(bytes);
  }
  void deallocate(void *p) override { cpu_->deallocate(p); }
  Status copyHostToDevice(void *d, const void *s, int64_t n) override {
    return cpu_->copyHostToDevice(d, s, n);
  }
  Status copyDeviceToHost(void *d, const void *s, int64_t n) override {
    return cpu_->copyDeviceToHost(d, s, n);
  }
  Status fillZero(void *d, int64_t n) override { return cpu_->fillZero(d, n); }
  Status synchronize() override { return Status::ok(); }
  const KernelRegistry &kernels() const override { return registry_; }

  int64_t allocated = 0;
  int tablesWritten = 0;

private:
  std::unique_ptr<Device> cpu_;
  KernelRegistry registry_;
};

TEST(ScratchPlan, ExecutableReservesBeforeTheFirstRunAndCountsIt) {
  format::Program p;
  for (int i = 0; i < 2; ++i) {
    format::Buffer *b = p.add_buffers();
    b->set_id(i);
    b->set_dtype(int(DType::kF32));
    b->add_shape(100);
    b->set_arena(format::ARENA_WORKSPACE);
    b->set_offset(i * 512);
  }
  p.set_workspace_bytes(1024);
  format::Function *f = p.add_functions();
  f->set_name("main");
  f->add_inputs()->set_buffer(0);
  f->mutable_inputs(0)->set_name("x");
  f->add_outputs()->set_buffer(1);
  f->mutable_outputs(0)->set_name("y");
  for (int i = 0; i < 2; ++i) {
    format::Instruction *inst = f->add_instructions();
    inst->set_kernel("scratch_copy");
    inst->add_inputs(0);
    inst->add_outputs(1);
    inst->set_location("copy" + std::to_string(i));
  }
  ScratchDevice device;
  auto exe = Executable::create(p, nullptr, 0, device);
  ASSERT_TRUE(exe.isOk()) << exe.status().toString();
  // Two instructions of 400 compute bytes share one arena; their tables
  // lie back to back: 512 (compute) + 16 (tables) -> 768.
  EXPECT_EQ(exe.value()->scratchBytes(), 768);
  EXPECT_EQ(exe.value()->peakBytes(), 1024 + 768);
  EXPECT_EQ(device.tablesWritten, 2);
  // What the device allocated: the arenas (one allocation each) and the
  // reservation.
  EXPECT_EQ(device.allocated, 1024 + 768);
  HostTensor x(DType::kF32, {100});
  for (int i = 0; i < 100; ++i)
    reinterpret_cast<float *>(x.bytes.data())[i] = float(i) * 0.5f;
  std::vector<HostTensor> out;
  const Executable::Function *fn = exe.value()->findFunction("main");
  ASSERT_TRUE(exe.value()->run(*fn, {&x}, &out).isOk());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].bytes, x.bytes);
}

TEST(ScratchPlan, KernelsBoundWithoutAPlanCannotRequest) {
  KernelContext ctx;
  ctx.kernel = "matmul";
  ctx.location = "n";
  auto slots = ctx.requestScratch({compute(8)});
  ASSERT_FALSE(slots.isOk());
  EXPECT_NE(slots.status().message().find("without a scratch plan"),
            std::string::npos);
}

//===----------------------------------------------------------------------===//
// What the CUDA kernels request
//===----------------------------------------------------------------------===//

KernelContext instruction(std::string kernel,
                          std::vector<std::pair<DType, std::vector<int64_t>>> in,
                          std::vector<std::pair<DType, std::vector<int64_t>>> out,
                          Attrs attrs = {}) {
  KernelContext ctx;
  ctx.kernel = std::move(kernel);
  for (auto &[d, shape] : in)
    ctx.inputs.push_back(makeView(nullptr, d, shape));
  for (auto &[d, shape] : out)
    ctx.outputs.push_back(makeView(nullptr, d, shape));
  ctx.attrs = std::move(attrs);
  return ctx;
}

Attrs ints(std::vector<std::pair<std::string, int64_t>> values) {
  Attrs a;
  for (auto &[k, v] : values)
    a.set(k, v);
  return a;
}

/// The requests as (use, bytes) pairs.
std::vector<std::pair<ScratchUse, int64_t>> requests(const KernelContext &ctx,
                                                     int64_t group = 1) {
  auto set = cudaKernelScratch(ctx, group);
  EXPECT_TRUE(set.isOk()) << set.status().toString();
  std::vector<std::pair<ScratchUse, int64_t>> out;
  if (set.isOk())
    for (const ScratchRequest &r : set.value())
      out.push_back({r.use, r.bytes});
  return out;
}

using Req = std::vector<std::pair<ScratchUse, int64_t>>;
constexpr auto kCompute = ScratchUse::kCompute, kComm = ScratchUse::kComm,
               kPersistent = ScratchUse::kPersistent;
const DType f32 = DType::kF32;

TEST(CudaScratch, EveryKernelThatNeedsScratch) {
  // cuBLASLt's workspace; nothing for an empty product.
  EXPECT_EQ(requests(instruction("matmul", {{f32, {2, 3}}, {f32, {3, 4}}},
                                 {{f32, {2, 4}}})),
            (Req{{kCompute, 32 << 20}}));
  EXPECT_EQ(requests(instruction("matmul", {{f32, {0, 3}}, {f32, {3, 4}}},
                                 {{f32, {0, 4}}})),
            Req{});
  // One 72-byte entry of the AdamW launch table.
  auto adamw = cudaKernelScratch(instruction("adamw", {}, {}));
  ASSERT_TRUE(adamw.isOk());
  ASSERT_EQ(adamw->size(), 1u);
  EXPECT_EQ((*adamw)[0].use, kPersistent);
  EXPECT_EQ((*adamw)[0].bytes, 72);
  EXPECT_EQ((*adamw)[0].alignment, 8);
  // Norm gradients: dscale (and dbias) partials over row slices of about
  // 256 rows: 300 rows -> 2 slices, x 768 columns, x 4 bytes.
  const Attrs lastAxis = ints({{"axis", -1}});
  EXPECT_EQ(requests(instruction("layer_norm_grad", {{f32, {300, 768}}}, {},
                                 lastAxis)),
            (Req{{kCompute, 2 * 2 * 768 * 4}}));
  // f64 rows sum in double; one statistic for rms_norm.
  EXPECT_EQ(requests(instruction("rms_norm_grad", {{DType::kF64, {10, 5}}},
                                 {}, lastAxis)),
            (Req{{kCompute, 1 * 1 * 5 * 8}}));
  // 20000 rows: capped at 64 slices.
  EXPECT_EQ(requests(instruction("layer_norm_grad", {{f32, {20000, 3}}}, {},
                                 ints({{"axis", 1}}))),
            (Req{{kCompute, 2 * 64 * 3 * 4}}));
  // Collectives: staging only where blocks are not contiguous.
  EXPECT_EQ(requests(instruction("all_gather", {{f32, {4, 6}}},
                                 {{f32, {4, 12}}}, ints({{"dim", 1}})),
                     2),
            (Req{{kComm, 4 * 12 * 4}}));
  EXPECT_EQ(requests(instruction("all_gather", {{f32, {4, 6}}},
                                 {{f32, {8, 6}}}, ints({{"dim", 0}})),
                     2),
            Req{});
  EXPECT_EQ(requests(instruction("reduce_scatter", {{f32, {4, 12}}},
                                 {{f32, {4, 6}}}, ints({{"dim", -1}})),
                     2),
            (Req{{kComm, 4 * 12 * 4}}));
  // all_to_all of [4, 8] over 2: split 1 stages what is sent; split 0,
  // concat 1 stages what is received (chunks [2, 8], two rows each).
  EXPECT_EQ(requests(instruction("all_to_all", {{f32, {4, 8}}},
                                 {{f32, {8, 4}}},
                                 ints({{"split_dim", 1}, {"concat_dim", 0}})),
                     2),
            (Req{{kComm, 128}}));
  EXPECT_EQ(requests(instruction("all_to_all", {{f32, {4, 8}}},
                                 {{f32, {2, 16}}},
                                 ints({{"split_dim", 0}, {"concat_dim", 1}})),
                     2),
            (Req{{kComm, 128}}));
  EXPECT_EQ(requests(instruction("all_to_all", {{f32, {2, 4, 8}}},
                                 {{f32, {2, 8, 4}}},
                                 ints({{"split_dim", 2}, {"concat_dim", 1}})),
                     2),
            (Req{{kComm, 256}, {kComm, 256}}));
  // Elementwise kernels need none.
  EXPECT_EQ(requests(instruction("add", {{f32, {4}}, {f32, {4}}},
                                 {{f32, {4}}})),
            Req{});
}

TEST(CudaScratch, ScatterAddSortLayout) {
  auto p = planCudaScatterAdd(5000, 1000);
  ASSERT_TRUE(p.isOk()) << p.status().toString();
  EXPECT_EQ(p->tiles, 5);  // ceil(5000 / 1024)
  EXPECT_EQ(p->passes, 2); // 1000 needs 10 bits
  // 20000 bytes per key/position buffer, each region at 256 bytes.
  EXPECT_EQ(p->keys[0], 0);
  EXPECT_EQ(p->keys[1], 20224);
  EXPECT_EQ(p->positions[0], 40448);
  EXPECT_EQ(p->positions[1], 60672);
  EXPECT_EQ(p->counts, 80896); // 256 digits x 5 tiles x 4 bytes follow
  EXPECT_EQ(p->starts, 86016); // 1001 starts x 4 bytes follow
  EXPECT_EQ(p->totalBytes, 90020);
  EXPECT_EQ(requests(instruction("scatter_add",
                                 {{f32, {5000, 3}}, {DType::kI64, {5000}}},
                                 {{f32, {1000, 3}}}, ints({{"axis", 0}}))),
            (Req{{kCompute, 90020}}));
  // Digits: 255 fits one pass (its key of a bad index too), 256 does not.
  EXPECT_EQ(planCudaScatterAdd(10, 255)->passes, 1);
  EXPECT_EQ(planCudaScatterAdd(10, 256)->passes, 2);
  EXPECT_EQ(planCudaScatterAdd(10, 0)->passes, 1);
  EXPECT_EQ(planCudaScatterAdd(10, int64_t(1) << 24)->passes, 4);
  // 32-bit keys and positions.
  EXPECT_FALSE(planCudaScatterAdd(int64_t(1) << 31, 10).isOk());
  EXPECT_FALSE(planCudaScatterAdd(10, int64_t(UINT32_MAX)).isOk());
  // Nothing to sort: no request.
  EXPECT_EQ(requests(instruction("scatter_add",
                                 {{f32, {0, 3}}, {DType::kI64, {0}}},
                                 {{f32, {1000, 3}}}, ints({{"axis", 0}}))),
            Req{});
}

/// A two-stage program compiled for the GPU: what each stage's rank
/// reserves.
TEST(CudaScratch, ProgramScratchPerPipelineStage) {
  format::Program p;
  p.mutable_mesh()->add_axes("dp");
  p.mutable_mesh()->add_sizes(2);
  p.mutable_mesh()->add_axes("pp");
  p.mutable_mesh()->add_sizes(2);
  auto buffer = [&](std::vector<int64_t> shape) {
    format::Buffer *b = p.add_buffers();
    b->set_id(p.buffers_size() - 1);
    b->set_dtype(int(DType::kF32));
    for (int64_t d : shape)
      b->add_shape(d);
    return b->id();
  };
  auto kernel = [&](format::Function *f, const std::string &k,
                    std::vector<int> in, std::vector<int> out) {
    format::Instruction *i = f->add_instructions();
    i->set_kernel(k);
    for (int id : in)
      i->add_inputs(id);
    for (int id : out)
      i->add_outputs(id);
    return i;
  };
  format::Function *s0 = p.add_functions();
  s0->set_name("train_step_pp0");
  s0->set_stage(0);
  int x = buffer({300, 768}), w = buffer({768, 768}), y = buffer({300, 768});
  kernel(s0, "matmul", {x, w}, {y});
  int scale = buffer({768}), stat = buffer({300});
  format::Instruction *ng =
      kernel(s0, "layer_norm_grad", {x, scale, stat, stat, y}, {y, scale, scale});
  (*ng->mutable_attrs())["axis"].set_i(-1);
  format::Function *s1 = p.add_functions();
  s1->set_name("train_step_pp1");
  s1->set_stage(1);
  int a = buffer({4, 6}), g = buffer({4, 12});
  format::Instruction *ag = kernel(s1, "all_gather", {a}, {g});
  (*ag->mutable_attrs())["dim"].set_i(1);
  (*ag->mutable_attrs())["axes"].set_s("dp");
  for (int i = 0; i < 2; ++i)
    kernel(s1, "adamw", {}, {});
  // Stage 0: the matmul's 32 MiB and the norm gradient's 12288 bytes share
  // the compute arena.
  auto l0 = cudaProgramScratch(p, 0);
  ASSERT_TRUE(l0.isOk()) << l0.status().toString();
  EXPECT_EQ(l0->computeBytes, 32 << 20);
  EXPECT_EQ(l0->totalBytes, 32 << 20);
  // Stage 1: 192 bytes of gather staging (group of 2 along dp), two table
  // entries: 256 + 144 -> 512.
  auto l1 = cudaProgramScratch(p, 1);
  ASSERT_TRUE(l1.isOk());
  EXPECT_EQ(l1->commBytes, 192);
  EXPECT_EQ(l1->persistentBytes, 144);
  EXPECT_EQ(l1->totalBytes, 512);
  // Every function at once (one device, no pipeline).
  auto all = cudaProgramScratch(p);
  ASSERT_TRUE(all.isOk());
  EXPECT_EQ(all->totalBytes, (32 << 20) + 512);
}

} // namespace
} // namespace dtcc::runtime
