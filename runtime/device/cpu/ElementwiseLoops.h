//===- ElementwiseLoops.h - loops of the elementwise kernels ----*- C++ -*-===//
//
// Unary, binary and ternary loops over a StridedLayout: unit-stride runs get
// plain loops the compiler vectorizes, other strides (0 included) a strided
// loop. The output may be the memory of a contiguous input (in place).
// Large loops are split over the kernels' threads (ThreadPool.h): each
// element is computed by one thread, the same way, whatever the split. The
// loops run compiled for AVX-512 where the CPU has it (IsaDispatch.h).
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CPU_ELEMENTWISELOOPS_H
#define DTCC_RUNTIME_DEVICE_CPU_ELEMENTWISELOOPS_H

#include "runtime/device/cpu/CpuKernelUtils.h"
#include "runtime/device/cpu/IsaDispatch.h"
#include "runtime/device/cpu/VectorMath.h"

#include <algorithm>

namespace dtcc::runtime::cpu {

/// out = op(in), with `op` on compute types (float for f16/bf16).
template <typename OS, typename IS, typename Op>
KernelFn makeUnaryLoop(const StridedLayout<2> &layout, const TensorView &in,
                       const TensorView &out, Op op) {
  OS *o = static_cast<OS *>(out.data);
  const IS *i = static_cast<const IS *>(in.data);
  return [layout, o, i, op]() -> Status {
    forEachRunParallel(layout, [&](const int64_t *off, int64_t n,
                                   const int64_t *st) {
      OS *po = o + off[0];
      const IS *pi = i + off[1];
      const int64_t s = st[1];
      withAvx512([&]() DTCC_INLINE_LAMBDA {
        if (s == 1) {
          DTCC_INDEPENDENT_ITERATIONS
          for (int64_t j = 0; j < n; ++j)
            po[j] = Elem<OS>::store(op(Elem<IS>::load(pi[j])));
        } else if (s == 0) {
          const OS v = Elem<OS>::store(op(Elem<IS>::load(pi[0])));
          for (int64_t j = 0; j < n; ++j)
            po[j] = v;
        } else {
          for (int64_t j = 0; j < n; ++j)
            po[j] = Elem<OS>::store(op(Elem<IS>::load(pi[j * s])));
        }
      });
    });
    return Status::ok();
  };
}

/// out = op(in) for ops that work on whole buffers: `op.batch(x, y, n)`
/// computes y[0..n) from x[0..n) in the compute type (y may be x, n <=
/// kMathChunk). Runs are converted through a stack buffer unless input and
/// output are contiguous and already of the compute type.
template <typename OS, typename IS, typename Op>
KernelFn makeBatchUnaryLoop(const StridedLayout<2> &layout,
                            const TensorView &in, const TensorView &out,
                            Op op) {
  using C = ComputeT<IS>;
  static_assert(std::is_same_v<C, ComputeT<OS>>, "one compute type");
  OS *o = static_cast<OS *>(out.data);
  const IS *i = static_cast<const IS *>(in.data);
  return [layout, o, i, op]() -> Status {
    forEachRunParallel(layout, [&](const int64_t *off, int64_t n,
                                   const int64_t *st) {
      OS *po = o + off[0];
      const IS *pi = i + off[1];
      const int64_t s = st[1];
      withAvx512([&]() DTCC_INLINE_LAMBDA {
        for (int64_t j0 = 0; j0 < n; j0 += kMathChunk) {
          const int64_t m = std::min(kMathChunk, n - j0);
          if constexpr (std::is_same_v<IS, C> && std::is_same_v<OS, C>) {
            if (s == 1) {
              op.batch(pi + j0, po + j0, m);
              continue;
            }
          }
          C buf[kMathChunk];
          for (int64_t j = 0; j < m; ++j)
            buf[j] = Elem<IS>::load(pi[(j0 + j) * s]);
          op.batch(buf, buf, m);
          for (int64_t j = 0; j < m; ++j)
            po[j0 + j] = Elem<OS>::store(buf[j]);
        }
      });
    });
    return Status::ok();
  };
}

/// Runs `fn(a, b)` over one run; the cases let the compiler vectorize the
/// common contiguous and scalar-broadcast shapes.
template <typename OS, typename AS, typename BS, typename Op>
DTCC_ALWAYS_INLINE void binaryRunBody(OS *po, const AS *pa, const BS *pb,
                                      int64_t n, int64_t sa, int64_t sb,
                                      const Op &op) {
  DTCC_NO_CONTRACT
  auto f = [&](auto a, auto b) {
    return Elem<OS>::store(op(Elem<AS>::load(a), Elem<BS>::load(b)));
  };
  if (sa == 1 && sb == 1) {
    DTCC_INDEPENDENT_ITERATIONS
    for (int64_t j = 0; j < n; ++j)
      po[j] = f(pa[j], pb[j]);
  } else if (sa == 1 && sb == 0) {
    const BS b = pb[0];
    DTCC_INDEPENDENT_ITERATIONS
    for (int64_t j = 0; j < n; ++j)
      po[j] = f(pa[j], b);
  } else if (sa == 0 && sb == 1) {
    const AS a = pa[0];
    DTCC_INDEPENDENT_ITERATIONS
    for (int64_t j = 0; j < n; ++j)
      po[j] = f(a, pb[j]);
  } else {
    for (int64_t j = 0; j < n; ++j)
      po[j] = f(pa[j * sa], pb[j * sb]);
  }
}

/// binaryRun's loops, runs of one float type (f32, bf16, f16: the half
/// types' conversions are integer and f32 operations, exact either way) on
/// AVX-512 where the CPU has it (IsaDispatch.h).
template <typename OS, typename AS, typename BS, typename Op>
inline void binaryRun(OS *po, const AS *pa, const BS *pb, int64_t n, int64_t sa,
                      int64_t sb, const Op &op) {
  if constexpr (std::is_same_v<OS, AS> && std::is_same_v<AS, BS> &&
                (std::is_same_v<OS, float> || std::is_same_v<OS, BFloat16> ||
                 std::is_same_v<OS, Half>)) {
    if (n >= 64) {
      withAvx512([&]() DTCC_INLINE_LAMBDA {
        binaryRunBody(po, pa, pb, n, sa, sb, op);
      });
      return;
    }
  }
  binaryRunBody(po, pa, pb, n, sa, sb, op);
}

/// out = op(a, b).
template <typename OS, typename AS, typename BS, typename Op>
KernelFn makeBinaryLoop(const StridedLayout<3> &layout, const TensorView &a,
                        const TensorView &b, const TensorView &out, Op op) {
  OS *o = static_cast<OS *>(out.data);
  const AS *pa = static_cast<const AS *>(a.data);
  const BS *pb = static_cast<const BS *>(b.data);
  return [layout, o, pa, pb, op]() -> Status {
    forEachRunParallel(layout, [&](const int64_t *off, int64_t n,
                                   const int64_t *st) {
      binaryRun(o + off[0], pa + off[1], pb + off[2], n, st[1], st[2], op);
    });
    return Status::ok();
  };
}

/// Whether any element of operand `k` of `layout` at `base` is zero (the
/// integer division check, run before computing anything).
template <typename T, int N>
bool anyZero(const StridedLayout<N> &layout, int k, const T *base) {
  bool found = false;
  forEachRun(layout, [&](const int64_t *off, int64_t n, const int64_t *st) {
    const T *p = base + off[k];
    const int64_t s = st[k];
    bool z = false;
    for (int64_t j = 0; j < n; ++j)
      z |= p[j * s] == T(0);
    found |= z;
  });
  return found;
}

} // namespace dtcc::runtime::cpu

#endif // DTCC_RUNTIME_DEVICE_CPU_ELEMENTWISELOOPS_H
