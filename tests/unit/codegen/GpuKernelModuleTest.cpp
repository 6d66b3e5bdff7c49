//===- GpuKernelModuleTest.cpp - The GPU kernel table the runtime reads ---===//
//
// Host-side logic of launching generated kernels, without a GPU: the
// serialized module round-trips and refuses damage, launches are checked
// against device limits and the region's buffers, parameters are packed as
// cuLaunchKernel wants them (scratch at 256-byte offsets), and the image a
// device loads is its own cubin, else the newest PTX not above it.
//
//===----------------------------------------------------------------------===//

#include "runtime/format/GpuKernelModule.h"

#include <gtest/gtest.h>

using namespace dtcc::runtime;

namespace {

GpuFusedRegion softmaxLikeRegion() {
  GpuFusedRegion region;
  region.symbol = "softmax_row";
  region.numBuffers = 2;
  region.scratchBytes = {24, 300};
  GpuKernelLaunch rows;
  rows.kernel = "softmax_row_kernel";
  rows.grid = {1, 1, 1};
  rows.block = {6, 1, 1};
  rows.params = {0, 2};
  GpuKernelLaunch elements;
  elements.kernel = "softmax_row_kernel_0";
  elements.grid = {8, 1, 1};
  elements.block = {256, 1, 1};
  elements.params = {3, 2, 0, 1};
  region.launches = {rows, elements};
  return region;
}

GpuKernelModule sampleModule() {
  GpuKernelModule module;
  module.regions = {softmaxLikeRegion()};
  module.images = {{"sm_80", ".target sm_80", std::string("\x7f" "ELF\0\1", 6)},
                   {"sm_90", ".target sm_90", ""}};
  return module;
}

TEST(GpuKernelModule, RoundTrips) {
  GpuKernelModule module = sampleModule();
  std::string bytes = serializeGpuKernelModule(module);
  auto parsed = parseGpuKernelModule(bytes);
  ASSERT_TRUE(parsed.isOk()) << parsed.status().toString();
  ASSERT_EQ(parsed->regions.size(), 1u);
  const GpuFusedRegion &r = parsed->regions[0];
  EXPECT_EQ(r.symbol, "softmax_row");
  EXPECT_EQ(r.numBuffers, 2u);
  EXPECT_EQ(r.scratchBytes, (std::vector<uint64_t>{24, 300}));
  ASSERT_EQ(r.launches.size(), 2u);
  EXPECT_EQ(r.launches[1].kernel, "softmax_row_kernel_0");
  EXPECT_EQ(r.launches[1].grid, (std::array<uint32_t, 3>{8, 1, 1}));
  EXPECT_EQ(r.launches[1].block, (std::array<uint32_t, 3>{256, 1, 1}));
  EXPECT_EQ(r.launches[1].params, (std::vector<uint32_t>{3, 2, 0, 1}));
  ASSERT_EQ(parsed->images.size(), 2u);
  EXPECT_EQ(parsed->images[0].cubin, module.images[0].cubin); // binary, NULs
  EXPECT_EQ(parsed->images[1].ptx, ".target sm_90");
  EXPECT_EQ(parsed->findRegion("softmax_row"), &parsed->regions[0]);
  EXPECT_EQ(parsed->findRegion("other"), nullptr);
}

TEST(GpuKernelModule, RefusesDamage) {
  std::string bytes = serializeGpuKernelModule(sampleModule());
  EXPECT_NE(parseGpuKernelModule("").status().message().find("DTCCGPU1"),
            std::string::npos);
  // Every truncation is refused, none crashes.
  for (size_t n = 0; n < bytes.size(); ++n)
    EXPECT_FALSE(parseGpuKernelModule(bytes.substr(0, n)).isOk()) << n;
  auto trailing = parseGpuKernelModule(bytes + "x");
  EXPECT_NE(trailing.status().message().find("1 bytes after the last image"),
            std::string::npos)
      << trailing.status().message();
  // A parameter naming a buffer the region does not have.
  GpuKernelModule bad = sampleModule();
  bad.regions[0].launches[0].params = {0, 4};
  auto refused = parseGpuKernelModule(serializeGpuKernelModule(bad));
  ASSERT_FALSE(refused.isOk());
  EXPECT_NE(refused.status().message().find(
                "kernel 'softmax_row_kernel': parameter names buffer 4, but "
                "the region has 2 buffers and 2 scratch buffers"),
            std::string::npos)
      << refused.status().message();
}

TEST(GpuKernelModule, ChecksLaunchesAgainstLimits) {
  GpuFusedRegion region = softmaxLikeRegion();
  EXPECT_TRUE(checkGpuRegion(region).isOk());
  region.launches[1].block = {1024, 2, 1};
  auto tooMany = checkGpuRegion(region);
  EXPECT_NE(tooMany.message().find("2048 threads per block, expected at most "
                                   "1024"),
            std::string::npos)
      << tooMany.message();
  region = softmaxLikeRegion();
  region.launches[0].grid = {1, 70000, 1};
  EXPECT_NE(checkGpuRegion(region).message().find(
                "grid dimension 1 is 70000, expected 1..65535"),
            std::string::npos);
  region = softmaxLikeRegion();
  region.launches[0].block = {0, 1, 1};
  EXPECT_FALSE(checkGpuRegion(region).isOk());
  region = softmaxLikeRegion();
  region.launches[0].sharedBytes = 64 * 1024;
  GpuLaunchLimits h100;
  h100.maxSharedBytes = 227 * 1024;
  EXPECT_FALSE(checkGpuRegion(region).isOk());
  EXPECT_TRUE(checkGpuRegion(region, h100).isOk());
  region.launches.clear();
  EXPECT_FALSE(checkGpuRegion(region).isOk());
}

TEST(GpuKernelModule, PacksParametersInKernelOrder) {
  GpuFusedRegion region = softmaxLikeRegion();
  EXPECT_EQ(gpuScratchOffsets(region),
            (std::vector<uint64_t>{0, 256, 256 + 512}));
  char x[4], y[4], scratch[768];
  void *buffers[] = {x, y};
  std::vector<void *> values;
  std::vector<void *> params =
      packGpuKernelParams(region, region.launches[1], buffers, scratch, values);
  ASSERT_EQ(params.size(), 4u);
  // params[k] points at the device pointer of parameter k.
  EXPECT_EQ(*static_cast<void **>(params[0]), scratch + 256); // scratch 1
  EXPECT_EQ(*static_cast<void **>(params[1]), scratch + 0);   // scratch 0
  EXPECT_EQ(*static_cast<void **>(params[2]), static_cast<void *>(x));
  EXPECT_EQ(*static_cast<void **>(params[3]), static_cast<void *>(y));
}

TEST(GpuKernelModule, ChoosesTheDevicesCubinElsePtx) {
  GpuKernelModule module = sampleModule();
  bool cubin = false;
  // A100: its own cubin.
  const GpuKernelImage *image = chooseGpuImage(module, 8, 0, cubin);
  ASSERT_NE(image, nullptr);
  EXPECT_EQ(image->chip, "sm_80");
  EXPECT_TRUE(cubin);
  // H100: no sm_90 cubin here, so its PTX, JIT-compiled by the driver.
  image = chooseGpuImage(module, 9, 0, cubin);
  ASSERT_NE(image, nullptr);
  EXPECT_EQ(image->chip, "sm_90");
  EXPECT_FALSE(cubin);
  // sm_86 runs sm_80 PTX (a cubin is for its exact architecture only).
  image = chooseGpuImage(module, 8, 6, cubin);
  ASSERT_NE(image, nullptr);
  EXPECT_EQ(image->chip, "sm_80");
  EXPECT_FALSE(cubin);
  // Blackwell runs the newest PTX.
  image = chooseGpuImage(module, 10, 0, cubin);
  ASSERT_NE(image, nullptr);
  EXPECT_EQ(image->chip, "sm_90");
  // Volta has nothing to run.
  EXPECT_EQ(chooseGpuImage(module, 7, 0, cubin), nullptr);
}

} // namespace
