//===- HalfCopyTest.cpp - weight copies rounded from their masters --------===//
//
// A variable with `rounded_from` (ZeRO-1/2's bf16/fp16 copy of an fp32
// master weight): the executable fills it with the master's data rounded to
// nearest even (from its random draws in a program without weights),
// checkpoints leave it out, and a restore rounds the restored master again;
// a copy of a variable the program lacks is an error.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/Device.h"
#include "runtime/exec/Checkpoint.h"
#include "runtime/exec/Executable.h"
#include "tests/unit/trainer/TrainerTestUtils.h"

#include <gtest/gtest.h>

#include <cstring>

using namespace dtcc::runtime;
using namespace dtcc::runtime::testing;

namespace {

/// Values whose bf16 and f16 roundings differ from truncation: ties to
/// even both ways, a carry into the exponent, a denormal, a negative.
const std::vector<float> kMaster = {1.0f + 0x1p-8f,   1.0f + 0x3p-8f,
                                    1.99999f,         -3.14159f,
                                    0x1p-20f,         65519.0f};

struct CopyProgram {
  format::Program program;
  std::vector<uint8_t> data;
};

/// An fp32 master "w" with data and its copies "w/half" (bf16) and "w/f16".
CopyProgram copyProgram(const std::string &source = "w") {
  CopyProgram c;
  format::Program &p = c.program;
  const int64_t n = int64_t(kMaster.size());
  int64_t offset = 0;
  auto variable = [&](const std::string &name, DType dtype) {
    format::Buffer *b = p.add_buffers();
    b->set_id(p.buffers_size() - 1);
    b->set_dtype(int(dtype));
    b->add_shape(n);
    b->set_arena(format::ARENA_STATE);
    b->set_offset(offset);
    offset += (n * dtypeSize(dtype) + 63) / 64 * 64;
    format::Variable *v = p.add_variables();
    v->set_name(name);
    v->set_buffer(b->id());
    return v;
  };
  format::Variable *w = variable("w", DType::kF32);
  w->set_trainable(true);
  w->mutable_init()->set_offset(0);
  w->mutable_init()->set_size(n * 4);
  c.data.resize(size_t(n) * 4);
  std::memcpy(c.data.data(), kMaster.data(), c.data.size());
  variable("w/half", DType::kBF16)->set_rounded_from(source);
  variable("w/f16", DType::kF16)->set_rounded_from(source);
  p.set_state_bytes(offset);
  p.set_workspace_bytes(64);
  return c;
}

std::vector<uint16_t> halfValues(const Executable &exe, const std::string &name) {
  const TensorView *view = exe.variable(name);
  EXPECT_NE(view, nullptr) << name;
  if (!view)
    return {};
  std::vector<uint16_t> out(size_t(view->numel()));
  EXPECT_TRUE(exe.readBuffer(*view, out.data()).isOk());
  return out;
}

std::vector<uint16_t> rounded(const std::vector<float> &x, bool bf16) {
  std::vector<uint16_t> out;
  for (float v : x)
    out.push_back(bf16 ? floatToBf16(v) : floatToHalf(v));
  return out;
}

TEST(HalfCopy, StartsAsTheMastersDataRounded) {
  CopyProgram c = copyProgram();
  std::unique_ptr<Device> cpu = createCpuDevice();
  auto exe = Executable::create(c.program, c.data.data(), c.data.size(), *cpu);
  ASSERT_TRUE(exe.isOk()) << exe.status().toString();
  EXPECT_TRUE(exe.value()->hasInitialValues());
  EXPECT_EQ(halfValues(*exe.value(), "w/half"), rounded(kMaster, true));
  EXPECT_EQ(halfValues(*exe.value(), "w/f16"), rounded(kMaster, false));
  // Rounded, not truncated: 1 + 3/256 is a tie that goes up to even.
  EXPECT_EQ(halfValues(*exe.value(), "w/half")[1], floatToBf16(1.0f + 0x4p-8f));
}

TEST(HalfCopy, CheckpointsLeaveItOutAndARestoreRoundsTheMasterAgain) {
  CopyProgram c = copyProgram();
  std::unique_ptr<Device> cpu = createCpuDevice();
  auto exe = Executable::create(c.program, c.data.data(), c.data.size(), *cpu);
  ASSERT_TRUE(exe.isOk()) << exe.status().toString();
  // A trained master, its copies as the update left them.
  std::vector<float> trained = {0.5f, -2.25f, 3.0f + 0x1p-9f, 7.0f, -0.1f, 1e4f};
  const TensorView *w = exe.value()->variable("w");
  ASSERT_TRUE(exe.value()->writeBuffer(*w, trained.data()).isOk());
  TempDir dir;
  ASSERT_TRUE(saveCheckpoint(*exe.value(), dir / "ckpt", {}).isOk());
  std::string json = readFile(dir / "ckpt/checkpoint.json");
  EXPECT_NE(json.find("\"name\": \"w\""), std::string::npos) << json;
  EXPECT_EQ(json.find("w/half"), std::string::npos) << json;

  auto fresh = Executable::create(c.program, c.data.data(), c.data.size(), *cpu);
  ASSERT_TRUE(fresh.isOk());
  auto loaded = loadCheckpoint(*fresh.value(), dir / "ckpt");
  ASSERT_TRUE(loaded.isOk()) << loaded.status().toString();
  EXPECT_EQ(halfValues(*fresh.value(), "w/half"), rounded(trained, true));
  EXPECT_EQ(halfValues(*fresh.value(), "w/f16"), rounded(trained, false));
}

TEST(HalfCopy, WithoutDataIsTheMastersDrawsRounded) {
  CopyProgram c = copyProgram();
  c.program.mutable_variables(0)->clear_init();
  std::unique_ptr<Device> cpu = createCpuDevice();
  auto exe = Executable::create(c.program, nullptr, 0, *cpu);
  ASSERT_TRUE(exe.isOk()) << exe.status().toString();
  EXPECT_FALSE(exe.value()->hasInitialValues());
  ASSERT_TRUE(exe.value()->randomizeVariablesWithoutData(5, 0.5).isOk());
  std::vector<float> master(kMaster.size());
  ASSERT_TRUE(exe.value()
                  ->readBuffer(*exe.value()->variable("w"), master.data())
                  .isOk());
  EXPECT_NE(master, std::vector<float>(kMaster.size(), 0.0f));
  EXPECT_EQ(halfValues(*exe.value(), "w/half"), rounded(master, true));
  EXPECT_EQ(halfValues(*exe.value(), "w/f16"), rounded(master, false));
}

TEST(HalfCopy, OfAMasterNotF32OrOfTheWrongSizeIsAnError) {
  std::unique_ptr<Device> cpu = createCpuDevice();
  // An f32 "copy" of an f32 master rounds nothing.
  CopyProgram c = copyProgram();
  c.program.mutable_buffers(1)->set_dtype(int(DType::kF32));
  auto exe = Executable::create(c.program, c.data.data(), c.data.size(), *cpu);
  ASSERT_FALSE(exe.isOk());
  EXPECT_NE(exe.status().message().find(
                "variable 'w/half' is f32 rounded from f32 'w': expected "
                "bf16 or f16 from f32"),
            std::string::npos)
      << exe.status().toString();
  // A master's data that is not its whole tensor in f32 (the copy listed
  // first: the master's own check would name it otherwise).
  c = copyProgram();
  c.program.mutable_variables(0)->mutable_init()->set_size(8);
  c.program.mutable_variables()->SwapElements(0, 1);
  exe = Executable::create(c.program, c.data.data(), c.data.size(), *cpu);
  ASSERT_FALSE(exe.isOk());
  EXPECT_NE(exe.status().message().find(
                "variable 'w/half': 'w' has 8 bytes of data, expected 24 "
                "(the whole tensor, f32)"),
            std::string::npos)
      << exe.status().toString();
}

TEST(HalfCopy, OfAVariableTheProgramLacksIsAnError) {
  CopyProgram c = copyProgram("v");
  std::unique_ptr<Device> cpu = createCpuDevice();
  auto exe = Executable::create(c.program, c.data.data(), c.data.size(), *cpu);
  ASSERT_FALSE(exe.isOk());
  EXPECT_NE(exe.status().message().find(
                "variable 'w/half' starts as variable 'v' rounded, which the "
                "program lacks"),
            std::string::npos)
      << exe.status().toString();
}

} // namespace
