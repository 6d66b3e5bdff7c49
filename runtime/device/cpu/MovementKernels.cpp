//===- MovementKernels.cpp - kernels that only move elements --------------===//
//
// copy, broadcast_in_dim, transpose, slice, reverse, concat, pad (all by
// element size, dtype-agnostic) and iota. Most are a strided copy of a view
// of the input; transposes that move the unit-stride dimension are blocked.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/AxisMap.h"
#include "runtime/device/cpu/CpuKernelUtils.h"

#include <cstring>

#include <algorithm>

#ifdef __SSE2__
#include <immintrin.h>
#endif

namespace dtcc::runtime {
namespace {

using namespace cpu;

/// Copies the runs of a 2-operand layout (0: destination, 1: source).
template <typename E>
inline void copyRuns(const StridedLayout<2> &layout, E *dst, const E *src) {
  forEachRunParallel(layout, [&](const int64_t *off, int64_t n,
                                 const int64_t *st) {
    E *d = dst + off[0];
    const E *s = src + off[1];
    const int64_t sd = st[0], ss = st[1];
    if (sd == 1 && ss == 1) {
      std::memcpy(d, s, size_t(n) * sizeof(E));
    } else if (sd == 1 && ss == 0) {
      const E v = s[0];
      for (int64_t j = 0; j < n; ++j)
        d[j] = v;
    } else if (sd == 1) {
      for (int64_t j = 0; j < n; ++j)
        d[j] = s[j * ss];
    } else {
      for (int64_t j = 0; j < n; ++j)
        d[j * sd] = s[j * ss];
    }
  });
}

/// dst[i * dstRow + j] = src[i + j * srcCol] for a K x K micro tile; SSE
/// register transposes for 4- and 8-byte elements.
template <typename E> struct MicroTranspose {
  static constexpr int64_t kSize = 8;
  static void run(E *dst, const E *src, int64_t dstRow, int64_t srcCol) {
    for (int64_t i = 0; i < kSize; ++i)
      for (int64_t j = 0; j < kSize; ++j)
        dst[i * dstRow + j] = src[i + j * srcCol];
  }
};
#ifdef __SSE2__
template <> struct MicroTranspose<uint32_t> {
  static constexpr int64_t kSize = 4;
  static void run(uint32_t *dst, const uint32_t *src, int64_t dstRow,
                  int64_t srcCol) {
    auto load = [&](int64_t j) {
      return _mm_loadu_ps(reinterpret_cast<const float *>(src + j * srcCol));
    };
    __m128 r0 = load(0), r1 = load(1), r2 = load(2), r3 = load(3);
    _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
    _mm_storeu_ps(reinterpret_cast<float *>(dst), r0);
    _mm_storeu_ps(reinterpret_cast<float *>(dst + dstRow), r1);
    _mm_storeu_ps(reinterpret_cast<float *>(dst + 2 * dstRow), r2);
    _mm_storeu_ps(reinterpret_cast<float *>(dst + 3 * dstRow), r3);
  }
};
template <> struct MicroTranspose<uint64_t> {
  static constexpr int64_t kSize = 2;
  static void run(uint64_t *dst, const uint64_t *src, int64_t dstRow,
                  int64_t srcCol) {
    __m128d r0 = _mm_loadu_pd(reinterpret_cast<const double *>(src));
    __m128d r1 = _mm_loadu_pd(reinterpret_cast<const double *>(src + srcCol));
    _mm_storeu_pd(reinterpret_cast<double *>(dst), _mm_unpacklo_pd(r0, r1));
    _mm_storeu_pd(reinterpret_cast<double *>(dst + dstRow),
                  _mm_unpackhi_pd(r0, r1));
  }
};
#endif

constexpr int64_t kTransposeBlock = 16;

/// dst[i * dstRow + j] = src[i + j * srcCol] for i < rows, j < cols: blocks
/// that stay in cache, micro tiles in registers, scalar edges.
template <typename E>
inline void transposeTile(E *dst, const E *src, int64_t rows, int64_t cols,
                          int64_t dstRow, int64_t srcCol) {
  constexpr int64_t k = MicroTranspose<E>::kSize;
  for (int64_t i0 = 0; i0 < rows; i0 += kTransposeBlock) {
    const int64_t i1 = std::min(rows, i0 + kTransposeBlock);
    for (int64_t j0 = 0; j0 < cols; j0 += kTransposeBlock) {
      const int64_t j1 = std::min(cols, j0 + kTransposeBlock);
      int64_t i = i0;
      for (; i + k <= i1; i += k) {
        int64_t j = j0;
        for (; j + k <= j1; j += k)
          MicroTranspose<E>::run(dst + i * dstRow + j, src + i + j * srcCol,
                                 dstRow, srcCol);
        for (int64_t ii = i; ii < i + k; ++ii)
          for (int64_t jj = j; jj < j1; ++jj)
            dst[ii * dstRow + jj] = src[ii + jj * srcCol];
      }
      for (; i < i1; ++i)
        for (int64_t j = j0; j < j1; ++j)
          dst[i * dstRow + j] = src[i + j * srcCol];
    }
  }
}

/// A copy of a strided view into a (possibly strided) destination.
struct StridedCopy {
  StridedLayout<2> layout;
  // Blocked transpose: `outer` walks every dimension but `rowDim` (unit
  // source stride) and the innermost (unit destination stride).
  bool blocked = false;
  StridedLayout<2> outer;
  int64_t rows = 0, cols = 0, dstRow = 0, srcCol = 0;
};

StatusOr<StridedCopy> planCopy(const KernelContext &ctx,
                               const std::vector<int64_t> &shape,
                               const std::vector<int64_t> &dstStrides,
                               const std::vector<int64_t> &srcStrides) {
  StridedCopy plan;
  if (!buildLayout<2>(shape, {&dstStrides, &srcStrides}, plan.layout))
    return ctx.error("more than ", kMaxDims, " non-mergeable dimensions");
  const StridedLayout<2> &l = plan.layout;
  const int r = l.rank;
  if (r < 2 || l.strides[r - 1][0] != 1 || l.strides[r - 1][1] == 1 ||
      l.strides[r - 1][1] == 0 || l.shape[r - 1] < 4)
    return plan;
  int p = -1;
  for (int d = r - 2; d >= 0; --d)
    if (l.strides[d][1] == 1 && l.shape[d] >= 4)
      p = d;
  if (p < 0)
    return plan;
  plan.blocked = true;
  plan.rows = l.shape[p];
  plan.cols = l.shape[r - 1];
  plan.dstRow = l.strides[p][0];
  plan.srcCol = l.strides[r - 1][1];
  std::vector<int64_t> oShape, oDst, oSrc;
  for (int d = 0; d < r - 1; ++d) {
    if (d == p)
      continue;
    oShape.push_back(l.shape[d]);
    oDst.push_back(l.strides[d][0]);
    oSrc.push_back(l.strides[d][1]);
  }
  buildLayout<2>(oShape, {&oDst, &oSrc}, plan.outer);
  return plan;
}

template <typename E>
KernelFn makeCopyFn(const StridedCopy &plan, E *dst, const E *src) {
  if (!plan.blocked)
    return [plan, dst, src]() -> Status {
      copyRuns(plan.layout, dst, src);
      return Status::ok();
    };
  return [plan, dst, src]() -> Status {
    const int64_t tile = plan.rows * plan.cols;
    if (plan.outer.numel >= cpuThreads()) {
      forEachRunParallel(
          plan.outer,
          [&](const int64_t *off, int64_t n, const int64_t *st) {
            for (int64_t j = 0; j < n; ++j)
              transposeTile(dst + off[0] + j * st[0],
                            src + off[1] + j * st[1], plan.rows, plan.cols,
                            plan.dstRow, plan.srcCol);
          },
          tile);
      return Status::ok();
    }
    // Fewer tiles than threads (one large matrix): each tile's rows in
    // blocks over the threads.
    const int64_t blocks = (plan.rows + kTransposeBlock - 1) / kTransposeBlock;
    forEachRun(plan.outer, [&](const int64_t *off, int64_t n,
                               const int64_t *st) {
      for (int64_t j = 0; j < n; ++j) {
        E *d = dst + off[0] + j * st[0];
        const E *s = src + off[1] + j * st[1];
        parallelFor(blocks, parallelGrain(kTransposeBlock * plan.cols),
                    [&](int64_t begin, int64_t end, int) {
                      const int64_t r0 = begin * kTransposeBlock;
                      const int64_t r1 =
                          std::min(plan.rows, end * kTransposeBlock);
                      transposeTile(d + r0 * plan.dstRow, s + r0, r1 - r0,
                                    plan.cols, plan.dstRow, plan.srcCol);
                    });
      }
    });
    return Status::ok();
  };
}

/// A kernel copying the view (src + srcOffset elements, srcStrides) of
/// shape `shape` into `dst` with `dstStrides`.
StatusOr<KernelFn> buildCopy(const KernelContext &ctx,
                             const std::vector<int64_t> &shape, void *dst,
                             const std::vector<int64_t> &dstStrides,
                             const void *src, int64_t srcOffset,
                             const std::vector<int64_t> &srcStrides,
                             DType dtype) {
  DTCC_ASSIGN_OR_RETURN(StridedCopy plan,
                        planCopy(ctx, shape, dstStrides, srcStrides));
  KernelFn fn;
  if (!visitElementSize(dtypeSize(dtype), [&](auto tag) {
        using E = typename decltype(tag)::type;
        fn = makeCopyFn<E>(plan, static_cast<E *>(dst),
                           static_cast<const E *>(src) + srcOffset);
      }))
    return unsupportedDType(ctx, dtype, kSetAll);
  if (product(shape) == 0)
    return KernelFn([] { return Status::ok(); });
  return fn;
}

/// The copy a StridedRead describes, into the contiguous output.
StatusOr<KernelFn> buildStridedRead(const KernelContext &ctx,
                                    StatusOr<StridedRead> read) {
  if (!read.isOk())
    return read.status();
  const StridedRead &r = read.value();
  return buildCopy(ctx, r.shape, ctx.outputs[0].data, contiguousStrides(r.shape),
                   ctx.inputs[0].data, r.offset, r.strides, ctx.inputs[0].dtype);
}

StatusOr<KernelFn> buildCopyKernel(const KernelContext &ctx) {
  const TensorView &in = ctx.inputs[0], &out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkStrides(ctx, in, "input 0"));
  DTCC_RETURN_IF_ERROR(checkContiguous(ctx, out, "output 0"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, in.dtype, "output 0"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, in.shape, "output 0"));
  return buildCopy(ctx, out.shape, out.data, contiguousStrides(out.shape),
                   in.data, 0, in.strides, in.dtype);
}

/// `copy_to_host` and `copy_to_device`: on the CPU the host's arenas are
/// allocations of their own, so a transfer is a real copy of the bytes.
StatusOr<KernelFn> buildTransfer(const KernelContext &ctx) {
  const TensorView &in = ctx.inputs[0], &out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkContiguous(ctx, in, "input 0"));
  DTCC_RETURN_IF_ERROR(checkContiguous(ctx, out, "output 0"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, in.dtype, "output 0"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, in.shape, "output 0"));
  const void *src = in.data;
  void *dst = out.data;
  const size_t bytes = size_t(in.sizeInBytes());
  return KernelFn([dst, src, bytes]() -> Status {
    if (dst != src)
      std::memcpy(dst, src, bytes);
    return Status::ok();
  });
}

StatusOr<KernelFn> buildBroadcastInDim(const KernelContext &ctx) {
  return buildStridedRead(ctx, broadcastInDimRead(ctx));
}

StatusOr<KernelFn> buildTranspose(const KernelContext &ctx) {
  return buildStridedRead(ctx, transposeRead(ctx));
}

StatusOr<KernelFn> buildSlice(const KernelContext &ctx) {
  return buildStridedRead(ctx, sliceRead(ctx));
}

StatusOr<KernelFn> buildReverse(const KernelContext &ctx) {
  return buildStridedRead(ctx, reverseRead(ctx));
}

StatusOr<KernelFn> buildConcat(const KernelContext &ctx) {
  if (ctx.inputs.empty() || ctx.outputs.size() != 1)
    return ctx.error("expected at least 1 input and 1 output, got ",
                     ctx.inputs.size(), " and ", ctx.outputs.size());
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView &out = ctx.outputs[0];
  DTCC_ASSIGN_OR_RETURN(int64_t dim, getDimAttr(ctx, "dim", out.rank()));
  int64_t total = 0;
  std::vector<const char *> srcs;
  std::vector<int64_t> chunk; // bytes per outer row, per input
  const int64_t esize = dtypeSize(out.dtype);
  const int64_t inner = product(out.shape, dim + 1) * esize;
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    const TensorView &in = ctx.inputs[i];
    std::string what = "input " + std::to_string(i);
    DTCC_RETURN_IF_ERROR(checkDType(ctx, in, out.dtype, what));
    std::vector<int64_t> expected = out.shape;
    expected[dim] = in.rank() == out.rank() ? in.shape[dim] : -1;
    DTCC_RETURN_IF_ERROR(checkShape(ctx, in, expected, what));
    total += in.shape[dim];
    srcs.push_back(static_cast<const char *>(in.data));
    chunk.push_back(in.shape[dim] * inner);
  }
  if (total != out.shape[dim])
    return ctx.error("expected output dimension ", dim, " to be ", total,
                     " (the sum of the inputs'), got ", out.shape[dim]);
  const int64_t outer = product(out.shape, 0, dim);
  const int64_t rowBytes = out.shape[dim] * inner;
  char *dst = static_cast<char *>(out.data);
  // Output rows in order, each assembled from every input's chunk; rows
  // split over the kernels' threads (about kParallelGrain elements a part).
  const int64_t grain = parallelGrain(rowBytes / esize);
  return KernelFn([srcs, chunk, outer, rowBytes, dst, grain]() -> Status {
    parallelFor(outer, grain, [&](int64_t begin, int64_t end, int) {
      for (int64_t o = begin; o < end; ++o) {
        char *row = dst + o * rowBytes;
        for (size_t i = 0; i < srcs.size(); ++i) {
          const int64_t c = chunk[i];
          if (c != 0)
            std::memcpy(row, srcs[i] + o * c, size_t(c));
          row += c;
        }
      }
    });
    return Status::ok();
  });
}

template <typename E> void fill(E *dst, int64_t n, E value) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] = value;
}

StatusOr<KernelFn> buildPad(const KernelContext &ctx) {
  const std::string mode = ctx.attrs.getString("mode", "constant");
  if (mode != "constant")
    return buildModePad(ctx, mode);
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView &in = ctx.inputs[0], &value = ctx.inputs[1],
                   &out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, value, in.dtype, "input 1"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, in.dtype, "output 0"));
  if (value.numel() != 1)
    return ctx.error("expected a padding value of one element, got ",
                     value.typeString());
  size_t rank = in.shape.size();
  DTCC_ASSIGN_OR_RETURN(std::vector<int64_t> low,
                        getIntsAttr(ctx, "low", rank));
  DTCC_ASSIGN_OR_RETURN(std::vector<int64_t> high,
                        getIntsAttr(ctx, "high", rank));
  std::vector<int64_t> shape(rank), region(rank);
  std::vector<int64_t> inStrides = contiguousStrides(in.shape);
  int64_t srcOffset = 0, dstOffset = 0;
  for (size_t d = 0; d < rank; ++d) {
    shape[d] = in.shape[d] + low[d] + high[d];
    if (shape[d] < 0)
      return ctx.error("dimension ", d, " pads to a negative size ", shape[d]);
  }
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, shape, "output 0"));
  std::vector<int64_t> outStrides = contiguousStrides(shape);
  for (size_t d = 0; d < rank; ++d) {
    int64_t srcStart = std::max<int64_t>(0, -low[d]);
    int64_t dstStart = std::max<int64_t>(0, low[d]);
    region[d] = std::max<int64_t>(
        0, std::min(in.shape[d] - srcStart, shape[d] - dstStart));
    srcOffset += srcStart * inStrides[d];
    dstOffset += dstStart * outStrides[d];
  }
  const int64_t esize = dtypeSize(in.dtype);
  KernelFn copy = [] { return Status::ok(); };
  if (product(region) > 0) {
    DTCC_ASSIGN_OR_RETURN(
        copy, buildCopy(ctx, region,
                        static_cast<char *>(out.data) + dstOffset * esize,
                        outStrides, in.data, srcOffset, inStrides, in.dtype));
  }
  KernelFn fn;
  const int64_t n = out.numel();
  if (!visitElementSize(esize, [&](auto tag) {
        using E = typename decltype(tag)::type;
        E *dst = out.as<E>();
        const E *v = value.as<const E>();
        fn = [dst, v, n, copy]() -> Status {
          const E value = *v;
          parallelFor(n, kParallelGrain, [&](int64_t begin, int64_t end, int) {
            fill(dst + begin, end - begin, value);
          });
          return copy();
        };
      }))
    return unsupportedDType(ctx, in.dtype, kSetAll);
  return fn;
}

StatusOr<KernelFn> buildIota(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView &out = ctx.outputs[0];
  DTCC_ASSIGN_OR_RETURN(int64_t dim, getDimAttr(ctx, "dim", out.rank()));
  const int64_t outer = product(out.shape, 0, dim);
  const int64_t size = out.shape[dim];
  const int64_t inner = product(out.shape, dim + 1);
  KernelFn fn;
  if (!visitDType<kSetNumeric>(out.dtype, [&](auto tag) {
        using S = typename decltype(tag)::type;
        S *o = out.as<S>();
        fn = [o, outer, size, inner]() -> Status {
          // Outer rows split over the kernels' threads.
          parallelFor(outer, parallelGrain(size * inner),
                      [&](int64_t begin, int64_t end, int) {
                        S *p = o + begin * size * inner;
                        for (int64_t i = begin; i < end; ++i)
                          for (int64_t d = 0; d < size; ++d) {
                            const S v = Elem<S>::store(ComputeT<S>(d));
                            for (int64_t j = 0; j < inner; ++j)
                              *p++ = v;
                          }
                      });
          return Status::ok();
        };
      }))
    return unsupportedDType(ctx, out.dtype, kSetNumeric);
  return fn;
}

} // namespace

void registerCpuMovementKernels(KernelRegistry &registry) {
  registry.add("copy", buildCopyKernel);
  registry.add("copy_to_host", buildTransfer);
  registry.add("copy_to_device", buildTransfer);
  registry.add("broadcast_in_dim", buildBroadcastInDim);
  registry.add("transpose", buildTranspose);
  registry.add("slice", buildSlice);
  registry.add("reverse", buildReverse);
  registry.add("concat", buildConcat);
  registry.add("pad", buildPad);
  registry.add("iota", buildIota);
}

} // namespace dtcc::runtime
