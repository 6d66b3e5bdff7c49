//===- GeneratedKernels.cpp - loading the generated kernels ---------------===//

#include "runtime/exec/GeneratedKernels.h"

#include <cerrno>
#include <cstring>
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

namespace dtcc::runtime {

StatusOr<std::unique_ptr<GeneratedKernels>>
GeneratedKernels::load(const uint8_t *bytes, uint64_t size) {
  static const uint8_t kElf[4] = {0x7f, 'E', 'L', 'F'};
  if (size < 4 || std::memcmp(bytes, kElf, 4) != 0)
    return dataLoss("the generated kernels are not an ELF shared object "
                    "(damaged executable?)");
  int fd = memfd_create("dtcc-kernels", MFD_CLOEXEC);
  if (fd < 0)
    return internalError("cannot create a memory file for the generated kernels: ",
                    std::strerror(errno));
  for (uint64_t written = 0; written < size;) {
    ssize_t n = write(fd, bytes + written, size - written);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      int err = errno;
      close(fd);
      return internalError("cannot write the generated kernels to a memory file: ",
                      std::strerror(err));
    }
    written += uint64_t(n);
  }
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *why = dlerror();
    close(fd);
    return internalError("cannot load the generated kernels: ",
                    why ? why : "dlopen failed");
  }
  auto kernels =
      std::unique_ptr<GeneratedKernels>(new GeneratedKernels(handle, fd));
  const void *abi = dlsym(handle, kCpuKernelAbiSymbol);
  const int32_t version = abi ? *static_cast<const int32_t *>(abi) : 1;
  if (version != kCpuKernelAbiVersion)
    return invalidArgument(
        "the generated kernels have entry points of version ", version,
        ", this runtime calls version ", kCpuKernelAbiVersion,
        " (a program compiled by another dtcc: compile it again)");
  return kernels;
}

GeneratedKernels::~GeneratedKernels() {
  dlclose(handle_);
  close(fd_);
}

StatusOr<GeneratedKernelFn>
GeneratedKernels::find(const std::string &symbol) const {
  dlerror();
  void *fn = dlsym(handle_, symbol.c_str());
  if (!fn)
    return notFound("the generated kernels have no function '", symbol,
                    "' (a program and kernels of different compiles?)");
  return reinterpret_cast<GeneratedKernelFn>(fn);
}

} // namespace dtcc::runtime
