//===- GeneratedKernels.h - kernels the compiler generated ------*- C++ -*-===//
//
// The fused regions' kernels (dtcc compile --fuse) travel in the executable
// as a shared object (the program's `cpu_kernels` data range). This loads
// it without MLIR or LLVM (memfd_create, dlopen of /proc/self/fd/N) and
// finds each region's entry point by its symbol.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_EXEC_GENERATEDKERNELS_H
#define DTCC_RUNTIME_EXEC_GENERATEDKERNELS_H

#include "runtime/base/Status.h"

#include <cstdint>
#include <memory>
#include <string>

namespace dtcc::runtime {

/// A generated kernel: `void <symbol>(void *const *buffers)`, the region's
/// buffers (inputs, then outputs) in operand order; shapes are baked in.
using GeneratedKernelFn = void (*)(void *const *buffers);

/// A loaded shared object of generated kernels; unloads it when destroyed.
class GeneratedKernels {
public:
  /// Loads the shared object `bytes[0, size)`. Errors say why (not an ELF
  /// shared object, an unresolved symbol, no memfd).
  static StatusOr<std::unique_ptr<GeneratedKernels>> load(const uint8_t *bytes,
                                                          uint64_t size);
  ~GeneratedKernels();
  GeneratedKernels(const GeneratedKernels &) = delete;
  GeneratedKernels &operator=(const GeneratedKernels &) = delete;

  /// The entry point of `symbol`, or an error naming it.
  StatusOr<GeneratedKernelFn> find(const std::string &symbol) const;

private:
  GeneratedKernels(void *handle, int fd) : handle_(handle), fd_(fd) {}
  void *handle_;
  int fd_;
};

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_EXEC_GENERATEDKERNELS_H
