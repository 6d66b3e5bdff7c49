//===- GpuKernelModule.cpp - Generated GPU kernels of fused regions -------===//

#include "runtime/format/GpuKernelModule.h"

#include <cstring>

namespace dtcc::runtime {

const GpuFusedRegion *
GpuKernelModule::findRegion(std::string_view symbol) const {
  for (const GpuFusedRegion &region : regions)
    if (region.symbol == symbol)
      return &region;
  return nullptr;
}

Status checkGpuRegion(const GpuFusedRegion &region,
                      const GpuLaunchLimits &limits) {
  if (region.launches.empty())
    return invalidArgument("fused region '", region.symbol,
                           "' has no kernel launch");
  uint64_t numParams = region.numBuffers + region.scratchBytes.size();
  for (const GpuKernelLaunch &launch : region.launches) {
    auto where = [&] {
      return "fused region '" + region.symbol + "', kernel '" + launch.kernel +
             "': ";
    };
    uint64_t threads = 1;
    for (int d = 0; d < 3; ++d) {
      if (launch.grid[d] == 0 || launch.grid[d] > limits.maxGrid[d])
        return invalidArgument(where(), "grid dimension ", d, " is ",
                               launch.grid[d], ", expected 1..",
                               limits.maxGrid[d]);
      if (launch.block[d] == 0 || launch.block[d] > limits.maxBlock[d])
        return invalidArgument(where(), "block dimension ", d, " is ",
                               launch.block[d], ", expected 1..",
                               limits.maxBlock[d]);
      threads *= launch.block[d];
    }
    if (threads > limits.maxThreadsPerBlock)
      return invalidArgument(where(), threads,
                             " threads per block, expected at most ",
                             limits.maxThreadsPerBlock);
    if (launch.sharedBytes > limits.maxSharedBytes)
      return invalidArgument(where(), launch.sharedBytes,
                             " bytes of shared memory, expected at most ",
                             limits.maxSharedBytes);
    for (uint32_t param : launch.params)
      if (param >= numParams)
        return invalidArgument(where(), "parameter names buffer ", param,
                               ", but the region has ", region.numBuffers,
                               " buffers and ", region.scratchBytes.size(),
                               " scratch buffers");
  }
  return Status::ok();
}

std::vector<uint64_t> gpuScratchOffsets(const GpuFusedRegion &region) {
  constexpr uint64_t kAlign = 256;
  std::vector<uint64_t> offsets;
  uint64_t end = 0;
  for (uint64_t bytes : region.scratchBytes) {
    offsets.push_back(end);
    end += (bytes + kAlign - 1) / kAlign * kAlign;
  }
  offsets.push_back(end);
  return offsets;
}

std::vector<void *> packGpuKernelParams(const GpuFusedRegion &region,
                                        const GpuKernelLaunch &launch,
                                        void *const *buffers, void *scratch,
                                        std::vector<void *> &values) {
  std::vector<uint64_t> offsets = gpuScratchOffsets(region);
  values.assign(launch.params.size(), nullptr);
  std::vector<void *> params(launch.params.size());
  for (size_t k = 0; k < launch.params.size(); ++k) {
    uint32_t index = launch.params[k];
    if (index < region.numBuffers)
      values[k] = buffers[index];
    else
      values[k] = static_cast<char *>(scratch) +
                  offsets[index - region.numBuffers];
    params[k] = &values[k];
  }
  return params;
}

// "sm_90" -> 90, or -1.
static int chipNumber(const std::string &chip) {
  if (chip.size() < 4 || chip.compare(0, 3, "sm_") != 0)
    return -1;
  int value = 0;
  for (size_t i = 3; i < chip.size(); ++i) {
    if (chip[i] < '0' || chip[i] > '9')
      return -1;
    value = value * 10 + (chip[i] - '0');
  }
  return value;
}

const GpuKernelImage *chooseGpuImage(const GpuKernelModule &module, int major,
                                     int minor, bool &useCubin) {
  int device = major * 10 + minor;
  for (const GpuKernelImage &image : module.images)
    if (chipNumber(image.chip) == device && !image.cubin.empty()) {
      useCubin = true;
      return &image;
    }
  const GpuKernelImage *best = nullptr;
  for (const GpuKernelImage &image : module.images) {
    int chip = chipNumber(image.chip);
    if (chip < 0 || chip > device || image.ptx.empty())
      continue;
    if (!best || chip > chipNumber(best->chip))
      best = &image;
  }
  useCubin = false;
  return best;
}

//===-- Serialization -----------------------------------------------------===//

namespace {
constexpr char kMagic[8] = {'D', 'T', 'C', 'C', 'G', 'P', 'U', '1'};

class Writer {
public:
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i)
      out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i)
      out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void str(const std::string &s) {
    u64(s.size());
    out += s;
  }
  std::string out;
};

class Reader {
public:
  explicit Reader(std::string_view in) : in(in) {}
  bool u32(uint32_t &v) {
    if (in.size() - pos < 4)
      return false;
    v = 0;
    for (int i = 0; i < 4; ++i)
      v |= uint32_t(static_cast<unsigned char>(in[pos + i])) << (8 * i);
    pos += 4;
    return true;
  }
  bool u64(uint64_t &v) {
    if (in.size() - pos < 8)
      return false;
    v = 0;
    for (int i = 0; i < 8; ++i)
      v |= uint64_t(static_cast<unsigned char>(in[pos + i])) << (8 * i);
    pos += 8;
    return true;
  }
  bool str(std::string &s) {
    uint64_t n;
    if (!u64(n) || in.size() - pos < n)
      return false;
    s.assign(in.data() + pos, n);
    pos += n;
    return true;
  }
  // A count of items of at least `minBytes` each that the rest can hold.
  bool count(uint64_t &n, uint64_t minBytes) {
    return u64(n) && n <= (in.size() - pos) / minBytes;
  }
  bool atEnd() const { return pos == in.size(); }
  size_t position() const { return pos; }

private:
  std::string_view in;
  size_t pos = 0;
};
} // namespace

std::string serializeGpuKernelModule(const GpuKernelModule &module) {
  Writer w;
  w.out.append(kMagic, sizeof(kMagic));
  w.u64(module.regions.size());
  for (const GpuFusedRegion &region : module.regions) {
    w.str(region.symbol);
    w.u32(region.numBuffers);
    w.u64(region.scratchBytes.size());
    for (uint64_t bytes : region.scratchBytes)
      w.u64(bytes);
    w.u64(region.launches.size());
    for (const GpuKernelLaunch &launch : region.launches) {
      w.str(launch.kernel);
      for (uint32_t v : launch.grid)
        w.u32(v);
      for (uint32_t v : launch.block)
        w.u32(v);
      w.u32(launch.sharedBytes);
      w.u64(launch.params.size());
      for (uint32_t p : launch.params)
        w.u32(p);
    }
  }
  w.u64(module.images.size());
  for (const GpuKernelImage &image : module.images) {
    w.str(image.chip);
    w.str(image.ptx);
    w.str(image.cubin);
  }
  return std::move(w.out);
}

StatusOr<GpuKernelModule> parseGpuKernelModule(std::string_view bytes) {
  if (bytes.size() < sizeof(kMagic) ||
      std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0)
    return dataLoss("GPU kernel module: missing the DTCCGPU1 header");
  Reader r(bytes.substr(sizeof(kMagic)));
  auto truncated = [&](const char *what) {
    return dataLoss("GPU kernel module: truncated or corrupt ", what,
                    " at byte ", r.position() + sizeof(kMagic));
  };
  GpuKernelModule module;
  uint64_t numRegions;
  if (!r.count(numRegions, 8 + 4 + 8 + 8))
    return truncated("region count");
  module.regions.resize(numRegions);
  for (GpuFusedRegion &region : module.regions) {
    uint64_t numScratch, numLaunches;
    if (!r.str(region.symbol) || !r.u32(region.numBuffers) ||
        !r.count(numScratch, 8))
      return truncated("region");
    region.scratchBytes.resize(numScratch);
    for (uint64_t &b : region.scratchBytes)
      if (!r.u64(b))
        return truncated("scratch size");
    if (!r.count(numLaunches, 8 + 7 * 4 + 8))
      return truncated("launch count");
    region.launches.resize(numLaunches);
    for (GpuKernelLaunch &launch : region.launches) {
      uint64_t numParams;
      bool ok = r.str(launch.kernel);
      for (uint32_t &v : launch.grid)
        ok = ok && r.u32(v);
      for (uint32_t &v : launch.block)
        ok = ok && r.u32(v);
      ok = ok && r.u32(launch.sharedBytes) && r.count(numParams, 4);
      if (!ok)
        return truncated("launch");
      launch.params.resize(numParams);
      for (uint32_t &p : launch.params)
        if (!r.u32(p))
          return truncated("parameter");
    }
    DTCC_RETURN_IF_ERROR(checkGpuRegion(region).withContext("GPU kernel module"));
  }
  uint64_t numImages;
  if (!r.count(numImages, 24))
    return truncated("image count");
  module.images.resize(numImages);
  for (GpuKernelImage &image : module.images)
    if (!r.str(image.chip) || !r.str(image.ptx) || !r.str(image.cubin))
      return truncated("image");
  if (!r.atEnd())
    return dataLoss("GPU kernel module: ", bytes.size() - sizeof(kMagic) -
                                               r.position(),
                    " bytes after the last image");
  return module;
}

} // namespace dtcc::runtime
