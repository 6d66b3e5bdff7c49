//===- CpuDevice.cpp - the host CPU as a device ----------------------------===//

#include "runtime/device/Device.h"
#include "runtime/device/cpu/CpuAdamw.h"

#include <cstdlib>
#include <cstring>

namespace dtcc::runtime {
namespace {

class CpuDevice final : public Device {
public:
  /// The CPU's kernels, with runs of consecutive adamw instructions bound
  /// as one update (cpu/CpuAdamw.h): binding any other kernel, or starting
  /// a function, ends the run being bound.
  CpuDevice() {
    KernelRegistry kernels;
    registerCpuKernels(kernels);
    for (const std::string &name : kernels.names()) {
      KernelFactory factory = *kernels.find(name);
      if (name == "adamw") {
        registry_.add(name, [this](const KernelContext &ctx) {
          return cpu::bindAdamwInRun(ctx, openAdamw_);
        });
        continue;
      }
      registry_.add(name, [this, factory](const KernelContext &ctx) {
        openAdamw_.reset();
        return factory(ctx);
      });
    }
  }
  void beginFunction() override { openAdamw_.reset(); }
  std::string name() const override { return "cpu"; }
  StatusOr<void *> allocate(int64_t bytes) override {
    size_t size = static_cast<size_t>((std::max<int64_t>(bytes, 1) + 63) / 64 * 64);
    void *ptr = std::aligned_alloc(64, size);
    if (!ptr)
      return unavailable("out of host memory allocating ", bytes, " bytes");
    return ptr;
  }
  void deallocate(void *ptr) override { std::free(ptr); }
  Status copyHostToDevice(void *dst, const void *src, int64_t bytes) override {
    std::memcpy(dst, src, bytes);
    return Status::ok();
  }
  Status copyDeviceToHost(void *dst, const void *src, int64_t bytes) override {
    std::memcpy(dst, src, bytes);
    return Status::ok();
  }
  Status fillZero(void *dst, int64_t bytes) override {
    std::memset(dst, 0, bytes);
    return Status::ok();
  }
  Status synchronize() override { return Status::ok(); }
  const KernelRegistry &kernels() const override { return registry_; }

private:
  KernelRegistry registry_;
  std::shared_ptr<cpu::AdamwRun> openAdamw_;
};

} // namespace

std::unique_ptr<Device> createCpuDevice() { return std::make_unique<CpuDevice>(); }

} // namespace dtcc::runtime
