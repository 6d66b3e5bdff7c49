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

/// A generated kernel: `void <symbol>(void *const *buffers, int64_t begin,
/// int64_t end)`, the region's buffers (inputs, then outputs) in operand
/// order; shapes are baked in. It computes the elements whose outermost
/// index lies in [begin, end), so disjoint ranges run on different threads
/// (a region of rank 0 ignores the range).
using GeneratedKernelFn = void (*)(void *const *buffers, int64_t begin,
                                   int64_t end);

/// The shared object's `int32_t dtcc_kernel_abi`: the version of the entry
/// points' form above, which load() checks (1, without the range, had no
/// such symbol).
inline constexpr const char *kCpuKernelAbiSymbol = "dtcc_kernel_abi";
inline constexpr int32_t kCpuKernelAbiVersion = 2;

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
