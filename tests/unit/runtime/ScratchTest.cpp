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

/// The CPU device with one more kernel, "copy": y = x through
/// compute scratch (x's bytes) and a persistent 8-byte table it fills when
/// the reservation is made.
class ScratchDevice final : public Device {
public:
  ScratchDevice() : cpu_(createCpuDevice()), registry_(cpuKernels()) {
    registry_.add("copy", [this](const KernelContext &ctx)
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
    inst->set_kernel("copy");
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
Attrs dims(std::vector<int64_t> values) {
  Attrs a;
  a.set("dims", values);
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
  // One 80-byte entry of the AdamW launch table.
  auto adamw = cudaKernelScratch(instruction("adamw", {}, {}));
  ASSERT_TRUE(adamw.isOk());
  ASSERT_EQ(adamw->size(), 1u);
  EXPECT_EQ((*adamw)[0].use, kPersistent);
  EXPECT_EQ((*adamw)[0].bytes, 80);
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
  // Reductions with few outputs are cut into slices whose partial results
  // (8 bytes each) a second pass combines. A whole 4M-element tensor to a
  // scalar (a gradient norm's sum of squares): 256 slices (the cap).
  EXPECT_EQ(requests(instruction("reduce_sum", {{f32, {4096, 1024}}},
                                 {{f32, {}}}, dims({0, 1}))),
            (Req{{kCompute, 1 * 256 * 8}}));
  // A bias gradient, [8192 tokens, 1024] over the tokens: 32 tiles of 32
  // outputs, 32 slices of 256 tokens -> 1024 blocks.
  EXPECT_EQ(requests(instruction("reduce_sum", {{f32, {8, 1024, 1024}}},
                                 {{f32, {1024}}}, dims({0, 1}))),
            (Req{{kCompute, 1024 * 32 * 8}}));
  // A product with its bias epilogue: the product's workspace.
  EXPECT_EQ(requests(instruction("matmul_bias",
                                 {{f32, {2, 3}}, {f32, {3, 4}}, {f32, {4}}},
                                 {{f32, {2, 4}}})),
            (Req{{kCompute, 32 << 20}}));
  // A bias gradient with its weight gradient's product: cuBLASLt's
  // workspace, then the partial sums its reduction needs where cuBLASLt
  // lacks the epilogue (the same bias gradient as above, of a summed rhs
  // or a summed transposed lhs); none for rows too few to slice.
  Attrs rhsSummed = ints({{"transpose_lhs", 1}, {"summed", 1}});
  Attrs lhsSummed = ints({{"transpose_lhs", 1}, {"summed", 0}});
  EXPECT_EQ(requests(instruction(
                "matmul_bias_grad", {{f32, {8192, 512}}, {f32, {8192, 1024}}},
                {{f32, {512, 1024}}, {f32, {1024}}}, rhsSummed)),
            (Req{{kCompute, 32 << 20}, {kCompute, 1024 * 32 * 8}}));
  EXPECT_EQ(requests(instruction(
                "matmul_bias_grad", {{f32, {8192, 1024}}, {f32, {8192, 512}}},
                {{f32, {1024, 512}}, {f32, {1024}}}, lhsSummed)),
            (Req{{kCompute, 32 << 20}, {kCompute, 1024 * 32 * 8}}));
  EXPECT_EQ(
      requests(instruction("matmul_bias_grad", {{f32, {8, 4}}, {f32, {8, 100}}},
                           {{f32, {4, 100}}, {f32, {100}}}, rhsSummed)),
      (Req{{kCompute, 32 << 20}}));
  // Enough outputs, or too few elements to slice: one pass, no scratch.
  EXPECT_EQ(requests(instruction("reduce_max", {{f32, {4096, 1024}}},
                                 {{f32, {4096}}}, dims({1}))),
            Req{});
  EXPECT_EQ(requests(instruction("reduce_sum", {{f32, {8, 100}}},
                                 {{f32, {100}}}, dims({0}))),
            Req{});
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

TEST(CudaScratch, AttentionTakesCudnnWorkspaceWhereCudnnTakesTheCall) {
  const DType bf16 = DType::kBF16, f16 = DType::kF16;
  // 2 x 3 heads of 130 x 130, D 64, bf16: the forward asks for cuDNN's
  // workspace cap, the backward for its rows (6 * 130 floats) and the dP
  // workspace (rows and keys rounded to 192), above the 32 MiB floor here.
  const std::vector<int64_t> q = {2, 3, 130, 64}, lse = {2, 3, 130};
  EXPECT_EQ(requests(instruction("attention",
                                 {{bf16, q}, {bf16, q}, {bf16, q}},
                                 {{bf16, q}, {f32, lse}})),
            (Req{{kCompute, 32 << 20}}));
  const std::vector<std::pair<DType, std::vector<int64_t>>> grad = {
      {bf16, q}, {bf16, q}, {bf16, q}, {bf16, q}, {f32, lse}, {bf16, q}};
  EXPECT_EQ(requests(instruction("attention_grad", grad,
                                 {{bf16, q}, {bf16, q}, {bf16, q}})),
            (Req{{kCompute, 6 * 130 * 4}, {kCompute, 32 << 20}}));
  // GPT 350M's heads, 128 of 1024 x 1024, D 64: the dP workspace rules.
  EXPECT_EQ(cudnnAttentionWorkspace(true, f16, false, 128, 1024, 1024, 64, 64),
            128 * 1024 * 1024 * 2 + 128 * 1024 * 64 * 4 + (1 << 20));
  // What cuDNN does not take runs dtcc's kernels: f32, a mask, D != Dv,
  // D not a multiple of 8 or above 128, a dP workspace beyond 512 MiB.
  EXPECT_EQ(cudnnAttentionWorkspace(false, f32, false, 6, 130, 130, 64, 64),
            0);
  EXPECT_EQ(cudnnAttentionWorkspace(false, bf16, true, 6, 130, 130, 64, 64),
            0);
  EXPECT_EQ(cudnnAttentionWorkspace(false, bf16, false, 6, 130, 130, 64, 32),
            0);
  EXPECT_EQ(cudnnAttentionWorkspace(false, bf16, false, 6, 130, 130, 60, 60),
            0);
  EXPECT_EQ(cudnnAttentionWorkspace(false, bf16, false, 6, 130, 130, 256,
                                    256),
            0);
  EXPECT_EQ(cudnnAttentionWorkspace(true, bf16, false, 128, 2048, 2048, 64, 64),
            0);
  EXPECT_GT(cudnnAttentionWorkspace(false, bf16, false, 128, 2048, 2048, 64,
                                    64),
            0);
  // f32 attention_grad keeps to its rows.
  EXPECT_EQ(requests(instruction("attention_grad",
                                 {{f32, q}, {f32, q}, {f32, q}, {f32, q},
                                  {f32, lse}, {f32, q}},
                                 {{f32, q}, {f32, q}, {f32, q}})),
            (Req{{kCompute, 6 * 130 * 4}}));
  // A head dimension of 0 still has its 6 x 130 rows (the kernel writes
  // their sums; counted as numel / D they were none).
  const std::vector<int64_t> empty = {2, 3, 130, 0};
  EXPECT_EQ(requests(instruction("attention_grad",
                                 {{f32, empty},
                                  {f32, empty},
                                  {f32, empty},
                                  {f32, empty},
                                  {f32, lse},
                                  {f32, empty}},
                                 {{f32, empty}, {f32, empty}, {f32, empty}})),
            (Req{{kCompute, 6 * 130 * 4}}));
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

/// conv, conv_input_grad, conv_filter_grad: `x` [N, C, X..], `w`, `y`.
Attrs convAttrs(std::vector<int64_t> strides, std::vector<int64_t> low,
                std::vector<int64_t> high) {
  Attrs a;
  a.set("strides", strides);
  a.set("dilations", std::vector<int64_t>(strides.size(), 1));
  a.set("pad_low", low);
  a.set("pad_high", high);
  a.set("groups", int64_t(1));
  return a;
}

TEST(CudaScratch, ConvolutionsTakeTheWorkspaceCapAndAPaddedCopy) {
  const int64_t cap = int64_t(64) << 20;
  EXPECT_EQ(kCudaConvWorkspaceBytes, cap);
  // [2, 3, 7, 5] by [4, 3, 3, 3], stride 2: symmetric pads need only the
  // workspace, for all three kernels.
  const Attrs sym = convAttrs({2, 2}, {1, 1}, {1, 1});
  EXPECT_EQ(requests(instruction("conv", {{f32, {2, 3, 7, 5}}, {f32, {4, 3, 3, 3}}},
                                 {{f32, {2, 4, 4, 3}}}, sym)),
            (Req{{kCompute, cap}}));
  // Pads (1, 0) low and (1, 2) high: the input padded to [2, 3, 9, 7]
  // (378 elements) follows the workspace.
  const Attrs asym = convAttrs({2, 2}, {1, 0}, {1, 2});
  EXPECT_EQ(requests(instruction("conv", {{f32, {2, 3, 7, 5}}, {f32, {4, 3, 3, 3}}},
                                 {{f32, {2, 4, 4, 3}}}, asym)),
            (Req{{kCompute, cap}, {kCompute, 378 * 4}}));
  EXPECT_EQ(requests(instruction("conv_input_grad",
                                 {{f32, {2, 4, 4, 3}}, {f32, {4, 3, 3, 3}}},
                                 {{f32, {2, 3, 7, 5}}}, asym)),
            (Req{{kCompute, cap}, {kCompute, 378 * 4}}));
  const DType f16 = DType::kF16;
  EXPECT_EQ(requests(instruction("conv_filter_grad",
                                 {{f16, {2, 3, 7, 5}}, {f16, {2, 4, 4, 3}}},
                                 {{f16, {4, 3, 3, 3}}}, asym)),
            (Req{{kCompute, cap}, {kCompute, 378 * 2}}));
  // 1-D, pads 2 and 1: cuDNN's [1, 2, 1, 13] input, 26 elements.
  EXPECT_EQ(requests(instruction("conv", {{f32, {1, 2, 10}}, {f32, {2, 2, 3}}},
                                 {{f32, {1, 2, 11}}},
                                 convAttrs({1}, {2}, {1}))),
            (Req{{kCompute, cap}, {kCompute, 26 * 4}}));
  // No cuDNN call for an empty batch.
  EXPECT_EQ(requests(instruction("conv", {{f32, {0, 3, 7, 5}}, {f32, {4, 3, 3, 3}}},
                                 {{f32, {0, 4, 4, 3}}}, sym)),
            Req{});
  // A geometry that does not hold is the instruction's error.
  auto bad = cudaKernelScratch(instruction(
      "conv", {{f32, {2, 3, 7, 5}}, {f32, {4, 3, 3, 3}}}, {{f32, {2, 4, 5, 3}}},
      sym));
  EXPECT_FALSE(bad.isOk());
}

TEST(CudaScratch, BatchNormSumsAndHalfMaxPoolGradients) {
  // Slices per channel: about 1024 blocks in all, none shorter than 4096.
  EXPECT_EQ(cudaBatchNormSlices(2, 1 << 24), 512);
  EXPECT_EQ(cudaBatchNormSlices(16, 8192), 2);
  EXPECT_EQ(cudaBatchNormSlices(1024, 1 << 20), 1);
  EXPECT_EQ(cudaBatchNormSlices(3, 4), 1);
  EXPECT_EQ(cudaBatchNormSlices(0, 0), 1);
  // [8, 16, 32, 32]: 16 channels x 2 slices x 2 sums x 8 bytes.
  EXPECT_EQ(requests(instruction("batch_norm_stats",
                                 {{f32, {8, 16, 32, 32}}, {f32, {16}}},
                                 {{f32, {2, 16}}})),
            (Req{{kCompute, 16 * 2 * 2 * 8}}));
  // [256, 2, 64, 64]: 2 channels of 2^20 elements, 256 slices each.
  EXPECT_EQ(requests(instruction("batch_norm_grad_stats",
                                 {{f32, {256, 2, 64, 64}}, {f32, {2}},
                                  {f32, {256, 2, 64, 64}}},
                                 {{f32, {2, 2}}})),
            (Req{{kCompute, 2 * 256 * 2 * 8}}));
  // BatchNorm1d's [4, 3]: one slice per channel.
  EXPECT_EQ(requests(instruction("batch_norm_stats", {{f32, {4, 3}}, {f32, {3}}},
                                 {{f32, {2, 3}}})),
            (Req{{kCompute, 3 * 2 * 8}}));
  // The normalization itself needs none.
  EXPECT_EQ(requests(instruction("batch_norm", {{f32, {4, 3}}}, {{f32, {4, 3}}})),
            Req{});
  // max_pool_grad accumulates halves in a float copy of dx.
  const Attrs none;
  EXPECT_EQ(requests(instruction("max_pool_grad",
                                 {{DType::kF16, {2, 3, 4, 4}},
                                  {DType::kI64, {2, 3, 4, 4}}},
                                 {{DType::kF16, {2, 3, 8, 8}}}, none)),
            (Req{{kCompute, 2 * 3 * 8 * 8 * 4}}));
  EXPECT_EQ(requests(instruction("max_pool_grad",
                                 {{DType::kBF16, {1, 1, 2}},
                                  {DType::kI64, {1, 1, 2}}},
                                 {{DType::kBF16, {1, 1, 4}}}, none)),
            (Req{{kCompute, 16}}));
  EXPECT_EQ(requests(instruction("max_pool_grad",
                                 {{f32, {2, 3, 4, 4}}, {DType::kI64, {2, 3, 4, 4}}},
                                 {{f32, {2, 3, 8, 8}}}, none)),
            Req{});
}

TEST(CudaScratch, ResizeAndPadTablesArePersistent) {
  // Edge pad of [3, 4] by (1, 0) low and (1, 2) high: one tap per output.
  // Per dimension: offsets (out + 1), taps and weights, 8 bytes each:
  // (6 + 5 + 5) * 8 + (7 + 6 + 6) * 8.
  Attrs pad;
  pad.set("mode", std::string("edge"));
  pad.set("low", std::vector<int64_t>{1, 0});
  pad.set("high", std::vector<int64_t>{1, 2});
  auto set = cudaKernelScratch(instruction(
      "pad", {{f32, {3, 4}}, {f32, {}}}, {{f32, {5, 6}}}, pad));
  ASSERT_TRUE(set.isOk()) << set.status().toString();
  ASSERT_EQ(set->size(), 1u);
  EXPECT_EQ((*set)[0].use, kPersistent);
  EXPECT_EQ((*set)[0].bytes, 128 + 152);
  EXPECT_EQ((*set)[0].alignment, 8);
  // Its gradient reads the transposes: 3 and 4 outputs of 5 and 6 taps:
  // (4 + 5 + 5) * 8 + (5 + 6 + 6) * 8.
  EXPECT_EQ(requests(instruction("pad_grad", {{f32, {5, 6}}}, {{f32, {3, 4}}},
                                 pad)),
            (Req{{kPersistent, 112 + 136}}));
  // A constant pad is a copy: no table.
  Attrs constant = pad;
  constant.set("mode", std::string("constant"));
  EXPECT_EQ(requests(instruction("pad", {{f32, {3, 4}}, {f32, {}}},
                                 {{f32, {5, 6}}}, constant)),
            Req{});
  // tf_crop_and_resize of [1, 4] to [1, 4] over roi [-0.5, 1.5] in
  // dimension 1 (nearest): outputs 0 and 3 fall outside and are filled,
  // 1 and 2 read one input each. Dimension 0: offsets, tap and weight
  // (2 + 1 + 1) * 8 = 32; dimension 1: (5 + 2 + 2) * 8 = 72 from 32; then
  // dimension 1's four fill flags at 104.
  Attrs resize;
  resize.set("mode", std::string("nearest"));
  resize.set("coordinate_transformation_mode",
             std::string("tf_crop_and_resize"));
  resize.set("scales", std::vector<double>{1, 1});
  resize.set("roi", std::vector<double>{0, -0.5, 1, 1.5});
  KernelContext crop =
      instruction("resize", {{f32, {1, 4}}}, {{f32, {1, 4}}}, resize);
  EXPECT_EQ(requests(crop), (Req{{kPersistent, 108}}));
  auto maps = cudaAxisMaps(crop);
  ASSERT_TRUE(maps.isOk()) << maps.status().toString();
  const CudaAxisMapTables t = planCudaAxisMapTables(*maps);
  EXPECT_EQ(t.offsets, (std::vector<int64_t>{0, 32}));
  EXPECT_EQ(t.taps, (std::vector<int64_t>{16, 72}));
  EXPECT_EQ(t.weights, (std::vector<int64_t>{24, 88}));
  EXPECT_EQ(t.fill, (std::vector<int64_t>{-1, 104}));
  EXPECT_EQ(t.totalBytes, 108);
  // Bilinear 2x upsampling of [1, 1, 4, 4] (half_pixel): the two leading
  // dimensions one tap each, the last two 8 outputs of 2 taps, but the
  // edge outputs clamp both taps onto one input: 14 taps. (2+1+1) * 8 * 2
  // + (9 + 14 + 14) * 8 * 2.
  Attrs linear;
  linear.set("mode", std::string("linear"));
  linear.set("scales", std::vector<double>{1, 1, 2, 2});
  EXPECT_EQ(requests(instruction("resize", {{f32, {1, 1, 4, 4}}},
                                 {{f32, {1, 1, 8, 8}}}, linear)),
            (Req{{kPersistent, 64 + 592}}));
  // Bad attributes are the instruction's error.
  Attrs badMode = linear;
  badMode.set("mode", std::string("bicubic"));
  EXPECT_FALSE(cudaKernelScratch(instruction("resize", {{f32, {1, 1, 4, 4}}},
                                             {{f32, {1, 1, 8, 8}}}, badMode))
                   .isOk());
}

TEST(CudaScratch, ScattersSortTheirTargets) {
  const DType i64 = DType::kI64;
  // scatter_nd of 3 tuples of length 2 into [4, 5, 6]: 20 target slices
  // of 6 elements; one 8-bit pass over one tile. Keys and positions (12
  // bytes each) at 256-byte steps, then 256 digit counts.
  auto p = planCudaScatterSort(3, 20);
  ASSERT_TRUE(p.isOk()) << p.status().toString();
  EXPECT_EQ(p->tiles, 1);
  EXPECT_EQ(p->passes, 1);
  EXPECT_EQ(p->keys[1], 256);
  EXPECT_EQ(p->positions[1], 768);
  EXPECT_EQ(p->counts, 1024);
  EXPECT_EQ(p->starts, -1);
  EXPECT_EQ(p->totalBytes, 2048);
  EXPECT_EQ(requests(instruction("scatter_nd",
                                 {{f32, {4, 5, 6}}, {i64, {3, 2}}, {f32, {3, 6}}},
                                 {{f32, {4, 5, 6}}})),
            (Req{{kCompute, 2048}}));
  // batch_dims 1: [4, 2, 1] indices, 8 tuples onto the same 20 slices.
  EXPECT_EQ(requests(instruction("scatter_nd",
                                 {{f32, {4, 5, 6}}, {i64, {4, 2, 1}},
                                  {f32, {4, 2, 6}}},
                                 {{f32, {4, 5, 6}}}, ints({{"batch_dims", 1}}))),
            (Req{{kCompute, 2048}}));
  // scatter_elements of [5000, 3] indices into [1000, 3]: 15000 updates
  // onto 3000 elements (12 bits: 2 passes), 15 tiles; 60000-byte regions.
  EXPECT_EQ(requests(instruction("scatter_elements",
                                 {{f32, {1000, 3}}, {i64, {5000, 3}},
                                  {f32, {5000, 3}}},
                                 {{f32, {1000, 3}}}, ints({{"axis", 0}}))),
            (Req{{kCompute, 4 * 60160 + 15 * 256 * 4}}));
  EXPECT_EQ(planCudaScatterSort(15000, 3000)->passes, 2);
  // Nothing to apply, nothing to sort.
  EXPECT_EQ(requests(instruction("scatter_elements",
                                 {{f32, {1000, 3}}, {i64, {0, 3}},
                                  {f32, {0, 3}}},
                                 {{f32, {1000, 3}}}, ints({{"axis", 0}}))),
            Req{});
  // Targets beyond 32-bit keys are refused, naming the node.
  KernelContext huge = instruction(
      "scatter_elements",
      {{f32, {int64_t(1) << 32}}, {i64, {4}}, {f32, {4}}},
      {{f32, {int64_t(1) << 32}}}, ints({{"axis", 0}}));
  huge.location = "big_scatter";
  auto refused = cudaKernelScratch(huge);
  ASSERT_FALSE(refused.isOk());
  EXPECT_NE(refused.status().message().find("big_scatter"), std::string::npos)
      << refused.status().message();
  // gather_nd and top_k need none.
  EXPECT_EQ(requests(instruction("gather_nd", {{f32, {4, 5, 6}}, {i64, {3, 2}}},
                                 {{f32, {3, 6}}})),
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
  // entries: 256 + 160 -> 512.
  auto l1 = cudaProgramScratch(p, 1);
  ASSERT_TRUE(l1.isOk());
  EXPECT_EQ(l1->commBytes, 192);
  EXPECT_EQ(l1->persistentBytes, 160);
  EXPECT_EQ(l1->totalBytes, 512);
  // Every function at once (one device, no pipeline).
  auto all = cudaProgramScratch(p);
  ASSERT_TRUE(all.isOk());
  EXPECT_EQ(all->totalBytes, (32 << 20) + 512);
}

} // namespace
} // namespace dtcc::runtime
