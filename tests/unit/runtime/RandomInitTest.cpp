//===- RandomInitTest.cpp - --random-init's draws -------------------------===//
//
// Executable::randomizeVariablesWithoutData: the same values for a seed on
// every call and thread count (this file runs in the three-thread executable,
// and its pinned values were drawn on one thread), normal draws of the
// requested deviation, distinct streams per variable, seed and chunk, each
// floating type converted from the same draws, integers left at zero.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/Device.h"
#include "runtime/exec/Executable.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

using namespace dtcc::runtime;

namespace {

struct VarSpec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  bool zeroInit = false;
};

/// A program holding `vars` in its state arena, none of them with data.
format::Program programOf(const std::vector<VarSpec> &vars) {
  format::Program p;
  int64_t offset = 0;
  for (const VarSpec &v : vars) {
    format::Buffer *b = p.add_buffers();
    b->set_id(p.buffers_size() - 1);
    b->set_dtype(int(v.dtype));
    int64_t numel = 1;
    for (int64_t d : v.shape) {
      b->add_shape(d);
      numel *= d;
    }
    b->set_arena(format::ARENA_STATE);
    b->set_offset(offset);
    offset += (numel * dtypeSize(v.dtype) + 63) / 64 * 64;
    format::Variable *var = p.add_variables();
    var->set_name(v.name);
    var->set_buffer(b->id());
    var->set_zero_init(v.zeroInit);
  }
  p.set_state_bytes(std::max<int64_t>(offset, 64));
  p.set_workspace_bytes(64);
  return p;
}

/// Every variable of `program` after randomizeVariablesWithoutData(seed),
/// as float, by name.
std::map<std::string, std::vector<float>> draw(const format::Program &program,
                                               uint64_t seed) {
  std::unique_ptr<Device> cpu = createCpuDevice();
  auto exe = Executable::create(program, nullptr, 0, *cpu);
  EXPECT_TRUE(exe.isOk()) << exe.status().toString();
  if (!exe.isOk())
    return {};
  EXPECT_FALSE(exe.value()->hasInitialValues());
  Status s = exe.value()->randomizeVariablesWithoutData(seed, 0.02);
  EXPECT_TRUE(s.isOk()) << s.toString();
  EXPECT_TRUE(exe.value()->hasInitialValues());
  std::map<std::string, std::vector<float>> values;
  for (const auto &[name, view] : exe.value()->variables()) {
    std::vector<uint8_t> bytes(size_t(view.sizeInBytes()));
    EXPECT_TRUE(exe.value()->readBuffer(view, bytes.data()).isOk());
    std::vector<float> &out = values[name];
    for (int64_t k = 0; k < view.numel(); ++k) {
      const uint8_t *p = bytes.data() + k * dtypeSize(view.dtype);
      switch (view.dtype) {
      case DType::kF32:
        out.push_back(reinterpret_cast<const float *>(p)[0]);
        break;
      case DType::kF64:
        out.push_back(float(reinterpret_cast<const double *>(p)[0]));
        break;
      case DType::kBF16:
        out.push_back(bf16ToFloat(reinterpret_cast<const uint16_t *>(p)[0]));
        break;
      case DType::kF16:
        out.push_back(halfToFloat(reinterpret_cast<const uint16_t *>(p)[0]));
        break;
      case DType::kI64:
        out.push_back(float(reinterpret_cast<const int64_t *>(p)[0]));
        break;
      default:
        ADD_FAILURE() << "unexpected type";
      }
    }
  }
  return values;
}

double mean(const std::vector<float> &x) {
  double sum = 0;
  for (float v : x)
    sum += v;
  return sum / double(x.size());
}

double stddev(const std::vector<float> &x) {
  double m = mean(x), sum = 0;
  for (float v : x)
    sum += (v - m) * (v - m);
  return std::sqrt(sum / double(x.size()));
}

/// Elements equal at the same index.
int64_t equalCount(const std::vector<float> &a, const std::vector<float> &b) {
  int64_t equal = 0;
  for (size_t k = 0; k < std::min(a.size(), b.size()); ++k)
    equal += a[k] == b[k];
  return equal;
}

// 4M elements: 64 chunks, split over the three threads.
const std::vector<VarSpec> kWeights = {{"w", DType::kF32, {2048, 2048}},
                                       {"w2", DType::kF32, {2048, 2048}}};

TEST(RandomInit, SameSeedSameValuesOnEveryCallAndThreadCount) {
  format::Program p = programOf(kWeights);
  auto a = draw(p, 7), b = draw(p, 7);
  ASSERT_EQ(a["w"].size(), size_t(2048 * 2048));
  EXPECT_EQ(a["w"], b["w"]);
  EXPECT_EQ(a["w2"], b["w2"]);
  // Drawn on one thread (OMP_NUM_THREADS=1) when this test was written: the
  // first two elements of the first chunk, the first of the second, the
  // last. The arithmetic is plain IEEE float without libm, so the bits are
  // the same on every x86-64 host; the tolerance only admits a target that
  // fuses multiply-adds.
  const std::vector<std::pair<size_t, float>> pinned = {
      {0, 7.083667442e-4f},
      {1, 1.654162630e-2f},
      {65536, -1.659213006e-2f},
      {2048 * 2048 - 1, 2.591052838e-2f}};
  for (const auto &[index, value] : pinned)
    EXPECT_NEAR(a["w"][index], value, 1e-6) << "element " << index;
}

TEST(RandomInit, DrawsAreNormalOfTheRequestedDeviation) {
  auto values = draw(programOf(kWeights), 7);
  const std::vector<float> &w = values["w"];
  // The standard errors over 4M draws: 1e-5 for the mean, 7e-6 for the
  // deviation, 2.3e-4 for a fraction near 0.68.
  EXPECT_NEAR(mean(w), 0.0, 1e-4);
  EXPECT_NEAR(stddev(w), 0.02, 1e-4);
  int64_t withinOne = 0, withinTwo = 0;
  float largest = 0;
  for (float v : w) {
    withinOne += std::fabs(v) < 0.02f;
    withinTwo += std::fabs(v) < 0.04f;
    largest = std::max(largest, std::fabs(v));
  }
  EXPECT_NEAR(double(withinOne) / double(w.size()), 0.682689, 0.002);
  EXPECT_NEAR(double(withinTwo) / double(w.size()), 0.954500, 0.001);
  // The radius's 31 bits bound a draw at 6.7 deviations; 4M draws reach
  // about 5.
  EXPECT_GT(largest, 0.02f * 4.5f);
  EXPECT_LT(largest, 0.02f * 6.7f);
}

TEST(RandomInit, VariablesSeedsAndChunksDrawDifferentValues) {
  format::Program p = programOf(kWeights);
  auto a = draw(p, 7), b = draw(p, 8);
  EXPECT_LT(equalCount(a["w"], a["w2"]), 100);
  EXPECT_LT(equalCount(a["w"], b["w"]), 100);
  // Successive chunks of one variable are not the same stream again.
  std::vector<float> first(a["w"].begin(), a["w"].begin() + 65536);
  std::vector<float> second(a["w"].begin() + 65536, a["w"].begin() + 2 * 65536);
  EXPECT_LT(equalCount(first, second), 10);
  // Nor are the two halves of a chunk (the cosine and sine of each pair).
  std::vector<float> upper(a["w"].begin() + 32768, a["w"].begin() + 65536);
  EXPECT_LT(equalCount(first, upper), 10);
}

TEST(RandomInit, EveryFloatingTypeFromTheSameDrawsIntegersStayZero) {
  // An odd size over several chunks, so the last chunk ends mid-pair.
  const std::vector<int64_t> shape = {3, 100001};
  auto f32 = draw(programOf({{"x", DType::kF32, shape}}), 3)["x"];
  ASSERT_EQ(f32.size(), size_t(300003));
  EXPECT_NEAR(stddev(f32), 0.02, 2e-4);
  EXPECT_NE(f32.back(), 0.0f);
  for (DType dtype : {DType::kF64, DType::kBF16, DType::kF16}) {
    auto other = draw(programOf({{"x", dtype, shape}}), 3)["x"];
    ASSERT_EQ(other.size(), f32.size()) << dtypeName(dtype);
    int64_t mismatches = 0;
    for (size_t k = 0; k < f32.size(); ++k) {
      float expected = f32[k];
      if (dtype == DType::kBF16)
        expected = bf16ToFloat(floatToBf16(f32[k]));
      else if (dtype == DType::kF16)
        expected = halfToFloat(floatToHalf(f32[k]));
      mismatches += other[k] != expected;
    }
    EXPECT_EQ(mismatches, 0) << dtypeName(dtype);
  }
  auto mixed = draw(programOf({{"w", DType::kF32, {1000}},
                               {"step", DType::kI64, {1}},
                               {"m", DType::kF32, {1000}, true}}),
                    3);
  EXPECT_EQ(mixed["step"], std::vector<float>{0.0f});
  EXPECT_EQ(mixed["m"], std::vector<float>(1000, 0.0f));
  EXPECT_NEAR(stddev(mixed["w"]), 0.02, 2e-3);
}

} // namespace

namespace {

// A bf16 copy of a master weight that starts at zero (a bias: zero_init,
// no bytes in the data section) starts at zero too: the program is not
// "compiled without weights" (which the runner warned of for every bf16
// program with a zero bias), and --random-init leaves both at zero.
TEST(RandomInit, HalfCopyOfAZeroMasterIsInitialized) {
  format::Program program =
      programOf({{"b", DType::kF32, {4}, /*zeroInit=*/true},
                 {"b/half", DType::kBF16, {4}}});
  program.mutable_variables(1)->set_rounded_from("b");
  std::unique_ptr<Device> cpu = createCpuDevice();
  auto exe = Executable::create(program, nullptr, 0, *cpu);
  ASSERT_TRUE(exe.isOk()) << exe.status().toString();
  EXPECT_TRUE(exe.value()->hasInitialValues());
  // A copy of a master without data (a weight of a program compiled
  // without weights) is still without it.
  format::Program bare =
      programOf({{"w", DType::kF32, {4}}, {"w/half", DType::kBF16, {4}}});
  bare.mutable_variables(1)->set_rounded_from("w");
  auto noData = Executable::create(bare, nullptr, 0, *cpu);
  ASSERT_TRUE(noData.isOk()) << noData.status().toString();
  EXPECT_FALSE(noData.value()->hasInitialValues());
}

} // namespace
