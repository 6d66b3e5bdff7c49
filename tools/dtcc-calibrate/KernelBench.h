//===- KernelBench.h - the kernels dtcc calibrate times ---------*- C++ -*-===//
//
// The backends' own kernels as `dtcc calibrate` times them: every
// non-collective kernel of the zoo's training programs on a workload shaped
// like the programs' own (bound through a kernel registry, as a program
// binds its instructions: the CPU registry on host memory, or a Device's
// registry on its memory, e.g. the CUDA backend's), and the matmul kernel on
// n x n x n products. The tools and their tests share this list, so that a
// renamed kernel or a changed attribute breaks a test rather than a user's
// calibrate run.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_TOOLS_DTCC_CALIBRATE_KERNELBENCH_H
#define DTCC_TOOLS_DTCC_CALIBRATE_KERNELBENCH_H

#include "runtime/device/Device.h"
#include "runtime/exec/Kernel.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dtcc::calibrate {

/// Sizes of the workloads. The defaults give every workload 2^18 elements
/// in its largest operand or result (lr_schedule: its one element).
struct KernelBenchSizes {
  /// [rows, cols]: elementwise kernels, normalizations and reductions
  /// (over the last axis: rows of `cols`), optimizer updates.
  int64_t rows = 512, cols = 512;
  /// Attention: scores [batch, heads, seq, seq] (softmax over the last
  /// axis); heads [batch, seq, heads, headDim] for the head transpose;
  /// grouped-query key/values with heads / 2 heads.
  int64_t batch = 16, heads = 4, seq = 64, headDim = 64;
  /// Cross-entropy: logits [tokens, vocab], int64 labels.
  int64_t tokens = 256, vocab = 1024;
  /// Embedding gather and its gradient's scatter_add: `lookups` int64
  /// indices into a [vocab, embed] table.
  int64_t lookups = 1024, embed = 256;

  /// Small sizes of the same shapes, for tests.
  static KernelBenchSizes tiny();
  /// The same shapes with 2^24 elements in every workload's largest operand
  /// or result (64 MiB of f32, beyond a GPU's L2 cache): a GPU runs a
  /// 2^18-element kernel in about the time it takes to launch one, so at
  /// the default sizes its rate per element would be launch overhead.
  static KernelBenchSizes gpu();
};

/// One operand of a kernel call; bind() allocates and fills it.
struct OperandSpec {
  enum class Fill {
    kZero,     ///< zeros (outputs)
    kUniform,  ///< pseudo-random in [-1, 1]
    kPositive, ///< pseudo-random in [0.5, 1.5] (log, sqrt, divisors, rstd)
    kIndices,  ///< pseudo-random integers in [0, bound)
    kMask,     ///< pseudo-random booleans
    kValue,    ///< every element `value`
  };
  runtime::DType dtype = runtime::DType::kF32;
  std::vector<int64_t> shape;
  Fill fill = Fill::kZero;
  double value = 0; ///< kValue: the value; kIndices: the bound
  /// Outputs only: the input whose memory this output is (in-place
  /// updates, as the programs' optimizer steps), or -1.
  int aliasOf = -1;
};

/// One instruction: operands and attributes as the programs have them.
struct KernelCall {
  std::vector<OperandSpec> inputs, outputs;
  runtime::Attrs attrs;
};

/// A kernel as calibrate times it: one call, or several run one after the
/// other whose elements add up (cast: f32 -> bf16 and back).
struct KernelCase {
  std::string kernel; ///< the registry's name, as instructions name it
  std::vector<KernelCall> calls;

  /// "512x512xf32 -> 512x512xf32 {approximate = none}", calls joined by
  /// " and ": what figure sources say was measured.
  std::string workload() const;
  /// Elements of each call's largest operand or result, summed.
  int64_t elements() const;
  /// Bytes of every call's operands and results (an in-place result
  /// counted again, as the program cost model counts an instruction's).
  int64_t bytes() const;
};

/// The cases calibrate times, one per kernel name, in a fixed order.
std::vector<KernelCase> kernelBenchCases(const KernelBenchSizes &sizes = {});

/// dtcc's matmul kernel on an n x n by n x n product of `dtype`.
KernelCase matmulCase(int64_t n, runtime::DType dtype = runtime::DType::kF32);

/// dtcc's attention kernel, then its gradient, on `heads` causal heads of
/// seq x headDim (scale 1/sqrt(headDim)) of `dtype`: {attention,
/// attention_grad}. The gradient's logsumexp is log(seq), which keeps every
/// recomputed probability finite.
std::vector<KernelCase> attentionCases(int64_t heads, int64_t seq,
                                       int64_t headDim, runtime::DType dtype);

/// A kernel that does next to nothing (neg on one f32 element): launched
/// back to back, its time per call is a kernel launch's.
KernelCase launchCase();

/// A case bound through a registry, owning its buffers.
class BoundKernelCase {
public:
  /// Allocates and fills the operands in host memory and binds every call
  /// through `registry` (a host backend's: the CPU's); errors name the
  /// kernel and the workload.
  static runtime::StatusOr<std::unique_ptr<BoundKernelCase>>
  bind(const KernelCase &kase, const runtime::KernelRegistry &registry);
  /// The same on `device`: operands in its memory (Device::allocate), filled
  /// with the same values through host copies, outputs zeroed, bound
  /// through device.kernels() in a function of their own
  /// (Device::beginFunction). `device` must outlive the case. Kernels of an
  /// asynchronous device (a GPU's) only enqueue work: time them with
  /// device.synchronize() as timeSustained's `sync`.
  static runtime::StatusOr<std::unique_ptr<BoundKernelCase>>
  bind(const KernelCase &kase, runtime::Device &device);

  /// Runs every call once.
  runtime::Status run();
  /// Whether every f32, f64 and bf16 output holds finite values only (a
  /// workload that produced NaN or infinity would time a different path);
  /// false too when a device's outputs cannot be copied back.
  bool outputsFinite() const;
  /// The outputs' types and shapes, in call order (in-place outputs are
  /// views of their inputs).
  const std::vector<runtime::TensorView> &outputs() const { return outputs_; }
  /// Output `i`'s bytes, copied to the host (after the device's work is
  /// done: a device binding synchronizes first).
  runtime::StatusOr<std::vector<uint8_t>> outputBytes(size_t i) const;

  ~BoundKernelCase();

private:
  BoundKernelCase() = default;
  static runtime::StatusOr<std::unique_ptr<BoundKernelCase>>
  bindWith(const KernelCase &kase, const runtime::KernelRegistry &registry,
           runtime::Device *device);
  struct Buffer {
    void *data = nullptr;
    bool owned = false;
  };
  runtime::Device *device_ = nullptr; ///< null: host memory
  std::vector<Buffer> buffers_;
  /// The calls' scratch (a GPU's cuBLASLt workspace), reserved once bound.
  std::unique_ptr<runtime::ScratchPlan> scratch_ =
      std::make_unique<runtime::ScratchPlan>();
  std::vector<runtime::TensorView> outputs_;
  std::vector<runtime::KernelFn> fns_;
};

/// Seconds per call of `fn`, sustained: after a warm-up call, the median of
/// `rounds` windows of at least `windowSeconds` each (calls batched so that
/// reading the clock costs nothing next to them).
runtime::StatusOr<double>
timeSustained(const std::function<runtime::Status()> &fn, double windowSeconds,
              int rounds = 3);

/// The same for work that runs asynchronously (a GPU's kernels): `sync`
/// waits for the work issued so far and runs before every clock read, and
/// batches grow until each takes at least `batchSeconds`, so that a
/// synchronization costs little next to the work it waits for.
runtime::StatusOr<double>
timeSustained(const std::function<runtime::Status()> &fn,
              const std::function<runtime::Status()> &sync,
              double windowSeconds, double batchSeconds, int rounds = 3);

} // namespace dtcc::calibrate

#endif // DTCC_TOOLS_DTCC_CALIBRATE_KERNELBENCH_H
