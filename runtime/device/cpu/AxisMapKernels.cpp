//===- AxisMapKernels.cpp - the CPU kernels applying resize and pad maps --===//
//
// The CPU kernels of resize, pad (edge, reflect, wrap) and their
// gradients: the maps of AxisMap.cpp applied as element copies (copy maps)
// or weighted sums accumulated in double, by rows.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/AxisMap.h"

#include "runtime/device/cpu/CpuKernelUtils.h"

#include <algorithm>
#include <cstring>

namespace dtcc::runtime::cpu {

//===----------------------------------------------------------------------===//
// Applying maps
//===----------------------------------------------------------------------===//

namespace {

/// The per-dimension tables a kernel walks: for output position o of
/// dimension d, taps [offsets[o], offsets[o+1]) with input element offsets
/// (index * the input's stride) and weights.
struct BoundMaps {
  int rank = 0;
  std::vector<int64_t> outShape;
  std::vector<std::vector<int64_t>> offsets, elementOffsets;
  std::vector<std::vector<double>> weights;
  std::vector<std::vector<uint8_t>> fill;
};

BoundMaps bindMaps(const std::vector<AxisMap> &maps,
               const std::vector<int64_t> &inShape) {
  BoundMaps b;
  b.rank = int(maps.size());
  std::vector<int64_t> strides = contiguousStrides(inShape);
  for (size_t d = 0; d < maps.size(); ++d) {
    const AxisMap &m = maps[d];
    b.outShape.push_back(m.outSize);
    b.offsets.push_back(m.offsets);
    std::vector<int64_t> eo;
    for (int64_t i : m.index)
      eo.push_back(i * strides[d]);
    b.elementOffsets.push_back(std::move(eo));
    b.weights.push_back(m.weight);
    b.fill.push_back(m.fill);
  }
  return b;
}

/// Calls fn(row, positions) for every row of `shape` (all dimensions but
/// the last), `positions[d]` its index along d < rank - 1, in row-major
/// order.
template <typename Fn>
void forEachRow(const std::vector<int64_t> &shape, Fn &&fn) {
  const int64_t rank = int64_t(shape.size());
  const int64_t rows = product(shape, 0, rank - 1);
  if (rows == 0 || shape.back() == 0)
    return;
  std::vector<int64_t> pos(rank - 1, 0);
  for (int64_t r = 0; r < rows; ++r) {
    fn(r, pos);
    for (int64_t d = rank - 2; d >= 0; --d) {
      if (++pos[d] < shape[d])
        break;
      pos[d] = 0;
    }
  }
}

/// Whether a map of a dimension before the last fills the row at `pos`.
bool rowFilled(const BoundMaps &b, const std::vector<int64_t> &pos) {
  for (int d = 0; d + 1 < b.rank; ++d)
    if (!b.fill[d].empty() && b.fill[d][pos[d]])
      return true;
  return false;
}

/// Copies: every output reads one input element (or is filled). A row's
/// source offset comes from the leading dimensions, each element's from the
/// last dimension's table.
template <typename E>
KernelFn copyKernel(BoundMaps b, const E *in, E *out, E fillValue) {
  return [b = std::move(b), in, out, fillValue]() -> Status {
    const int last = b.rank - 1;
    const int64_t cols = b.outShape[last];
    const int64_t *firstTap = b.offsets[last].data();
    const int64_t *tapOffset = b.elementOffsets[last].data();
    const uint8_t *fill = b.fill[last].empty() ? nullptr : b.fill[last].data();
    forEachRow(b.outShape, [&](int64_t r, const std::vector<int64_t> &pos) {
      E *o = out + r * cols;
      if (rowFilled(b, pos)) {
        std::fill(o, o + cols, fillValue);
        return;
      }
      int64_t base = 0;
      for (int d = 0; d < last; ++d)
        base += b.elementOffsets[d][b.offsets[d][pos[d]]];
      const E *src = in + base;
      for (int64_t c = 0; c < cols; ++c)
        o[c] = fill && fill[c] ? fillValue : src[tapOffset[firstTap[c]]];
    });
    return Status::ok();
  };
}

/// Weighted sums over the tensor product of each dimension's taps, in
/// double. The leading dimensions' taps of a row are combined once (an
/// odometer, dimension 0 outermost); each element then sums its last
/// dimension's taps against every combination, so the products and the
/// order of the sum are those of a plain odometer over all dimensions (the
/// CUDA kernel's).
template <typename S>
KernelFn sumKernel(BoundMaps b, const S *in, S *out, double fillValue) {
  return [b = std::move(b), in, out, fillValue]() -> Status {
    const int last = b.rank - 1;
    const int64_t cols = b.outShape[last];
    const int64_t *first = b.offsets[last].data();
    const int64_t *tapOffset = b.elementOffsets[last].data();
    const double *tapWeight = b.weights[last].data();
    const uint8_t *fill = b.fill[last].empty() ? nullptr : b.fill[last].data();
    const S filled = Elem<S>::store(ComputeT<S>(fillValue));
    const S zero = Elem<S>::store(ComputeT<S>(0));
    std::vector<int64_t> comboOffset, tap(std::max(last, 1));
    std::vector<double> comboWeight;
    forEachRow(b.outShape, [&](int64_t r, const std::vector<int64_t> &pos) {
      S *o = out + r * cols;
      if (rowFilled(b, pos)) {
        std::fill(o, o + cols, filled);
        return;
      }
      // The row's combinations of leading taps: offsets and weights.
      comboOffset.clear();
      comboWeight.clear();
      bool empty = false;
      for (int d = 0; d < last; ++d) {
        tap[d] = b.offsets[d][pos[d]];
        empty = empty || tap[d] == b.offsets[d][pos[d] + 1];
      }
      if (empty) {
        std::fill(o, o + cols, zero);
        return;
      }
      for (;;) {
        int64_t off = 0;
        double w = 1;
        for (int d = 0; d < last; ++d) {
          off += b.elementOffsets[d][tap[d]];
          w *= b.weights[d][tap[d]];
        }
        comboOffset.push_back(off);
        comboWeight.push_back(w);
        int d = last - 1;
        while (d >= 0 && ++tap[d] == b.offsets[d][pos[d] + 1]) {
          tap[d] = b.offsets[d][pos[d]];
          --d;
        }
        if (d < 0)
          break;
      }
      const size_t combos = comboOffset.size();
      for (int64_t c = 0; c < cols; ++c) {
        if (fill && fill[c]) {
          o[c] = filled;
          continue;
        }
        double acc = 0;
        for (size_t k = 0; k < combos; ++k) {
          const S *src = in + comboOffset[k];
          const double wk = comboWeight[k];
          for (int64_t t = first[c]; t < first[c + 1]; ++t)
            acc += wk * tapWeight[t] * double(Elem<S>::load(src[tapOffset[t]]));
        }
        o[c] = Elem<S>::store(ComputeT<S>(acc));
      }
    });
    return Status::ok();
  };
}

} // namespace

StatusOr<KernelFn> bindAxisMaps(const KernelContext &ctx,
                                std::vector<AxisMap> maps, const TensorView &in,
                                const TensorView &out, double fillValue) {
  if (maps.size() != in.shape.size())
    return ctx.error("expected one map per dimension");
  std::vector<int64_t> outShape;
  for (const AxisMap &m : maps)
    outShape.push_back(m.outSize);
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, outShape, "output 0"));
  if (out.numel() == 0)
    return KernelFn([] { return Status::ok(); });
  if (in.rank() == 0) { // a scalar: one copy
    const size_t bytes = size_t(dtypeSize(in.dtype));
    void *dst = out.data;
    const void *src = in.data;
    return KernelFn([=] {
      std::memcpy(dst, src, bytes);
      return Status::ok();
    });
  }
  bool copy = std::all_of(maps.begin(), maps.end(),
                          [](const AxisMap &m) { return m.isCopy(); });
  BoundMaps b = bindMaps(maps, in.shape);
  KernelFn fn;
  if (copy) {
    bool ok = false;
    if (in.dtype == DType::kBool) {
      fn = copyKernel<bool>(std::move(b), in.as<const bool>(), out.as<bool>(),
                            fillValue != 0);
      ok = true;
    } else {
      ok = visitDType<kSetNumeric>(in.dtype, [&](auto tag) {
        using S = typename decltype(tag)::type;
        fn = copyKernel<S>(std::move(b), in.as<const S>(), out.as<S>(),
                           Elem<S>::store(ComputeT<S>(fillValue)));
      });
    }
    if (!ok)
      return unsupportedDType(ctx, in.dtype, kSetAll);
    return fn;
  }
  if (!visitDType<kSetFloats>(in.dtype, [&](auto tag) {
        using S = typename decltype(tag)::type;
        fn = sumKernel<S>(std::move(b), in.as<const S>(), out.as<S>(),
                          fillValue);
      }))
    return unsupportedDType(ctx, in.dtype, kSetFloats,
                            "element type (interpolation)");
  return fn;
}

StatusOr<KernelFn> buildModePad(const KernelContext &ctx,
                                const std::string &mode) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView &in = ctx.inputs[0], &out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, in.dtype, "output 0"));
  size_t rank = in.shape.size();
  DTCC_ASSIGN_OR_RETURN(std::vector<int64_t> low, getIntsAttr(ctx, "low", rank));
  DTCC_ASSIGN_OR_RETURN(std::vector<int64_t> high,
                        getIntsAttr(ctx, "high", rank));
  StatusOr<std::vector<AxisMap>> maps = padAxisMaps(mode, in.shape, low, high);
  if (!maps.isOk())
    return ctx.error(maps.status().message());
  return bindAxisMaps(ctx, std::move(*maps), in, out, 0.0);
}

} // namespace dtcc::runtime::cpu
