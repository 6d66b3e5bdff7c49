//===- DnnlMatmul.h - strided batched GEMMs on oneDNN's matmul --*- C++ -*-===//
//
// One strided batch of GEMMs (MatmulShape's `count` GEMMs of one group) as
// a oneDNN matmul primitive, created once when a kernel is bound: the
// transposes and batch strides are the memory descriptors' strides (no
// copies), a broadcast operand (batch stride 0) a batch dimension of 1.
// f32 in and out, or bf16 in with f32 accumulation and a bf16 or f32
// result (on CPUs with AVX512-BF16 or AMX, oneDNN's native bf16 kernels).
//
// Threads: Debian's oneDNN runs on OpenMP (libgomp). A primitive made for
// no workers partitions each call over the kernels' one thread setting
// (cpuThreads: set as the OpenMP thread count when it is made, which fixes
// its partition, and again before each call). One made for `workers`
// runs each call on its calling thread alone, with that worker's own
// memory objects, stream and scratchpad: the kernels' threads (ThreadPool.h)
// run such primitives side by side on disjoint parts of a product, and no
// OpenMP thread wakes.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CPU_DNNLMATMUL_H
#define DTCC_RUNTIME_DEVICE_CPU_DNNLMATMUL_H

#include "runtime/base/Status.h"

#include <cstdint>
#include <memory>
#include <string>

namespace dtcc::runtime::cpu {

/// `batch` row-major GEMMs C[m, n] = op(A)[m, k] x op(B)[k, n], the i-th at
/// element offsets i * strideA, i * strideB, i * strideC (a stride of 0:
/// every GEMM reads the same operand). `ldA` is A's leading dimension where
/// it is not dense (some rows of a larger op(A), stored transposed).
struct GemmBatch {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool transA = false, transB = false;
  int64_t strideA = 0, strideB = 0, strideC = 0;
  int64_t ldA = 0;
};

/// The element types of a oneDNN matmul: f32 x f32 -> f32, or bf16 x bf16
/// -> bf16 or f32 (accumulated in f32).
enum class DnnlGemmType { kF32, kBF16, kBF16ToF32 };

/// Whether oneDNN has native bf16 matmul kernels on this CPU (it reports
/// AVX512-BF16 or AMX-BF16); without, oneDNN would emulate bf16 slowly.
bool dnnlHasNativeBf16();

/// Whether oneDNN runs its AVX-512 kernels on this CPU (it reports
/// avx512_core: AVX-512 F, BW, VL and DQ), where its f32 matmul is dtcc's
/// default for f32 products (MatmulKernels.cpp).
bool dnnlHasAvx512Core();

/// One oneDNN matmul primitive bound to buffers; the buffers can be
/// changed per call (the other groups of a MatmulShape).
class DnnlMatmul {
public:
  ~DnnlMatmul();
  DnnlMatmul(const DnnlMatmul &) = delete;
  DnnlMatmul &operator=(const DnnlMatmul &) = delete;

  /// Creates the primitive for `g` on `a`, `b`, `c`: OpenMP-threaded
  /// (`workers` 0), or single-threaded and runnable by `workers` threads
  /// at once (worker indices 0 .. workers-1). Fails with kUnimplemented
  /// where oneDNN has no implementation but its reference code (loops
  /// without vectors, many times slower than any other path) and, with
  /// `brgemmOnly`, where it has none of its brgemm kernels (which take
  /// their packing space from the scratchpad, sized when the primitive is
  /// made; its gemm:jit kernels, for operands its brgemm ones do not take,
  /// such as a transposed lhs read with a stride, allocate theirs on every
  /// call).
  static StatusOr<std::unique_ptr<DnnlMatmul>>
  create(const GemmBatch &g, DnnlGemmType type, const void *a, const void *b,
         void *c, int workers = 0, bool brgemmOnly = false);

  /// Runs on the bound buffers (as worker 0).
  Status run();
  /// Runs on other buffers of the same layout, as `worker`.
  Status run(const void *a, const void *b, void *c, int worker = 0);

  /// oneDNN's name of the implementation it chose (e.g.
  /// "brg:avx512_core_bf16").
  const std::string &impl() const { return impl_; }

private:
  DnnlMatmul() = default;
  struct Slot;
  struct State;
  Status execute(Slot &slot);
  std::unique_ptr<State> state_;
  std::string impl_;
};

} // namespace dtcc::runtime::cpu

#endif // DTCC_RUNTIME_DEVICE_CPU_DNNLMATMUL_H
