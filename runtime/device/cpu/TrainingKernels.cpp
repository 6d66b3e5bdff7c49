//===- TrainingKernels.cpp - gradients, random draws, optimizer updates ---===//
//
// The kernels of the dgraph training ops (GraphTrainingOps.td): fused
// activation, softmax, normalization and cross-entropy gradients, dropout,
// random draws, learning-rate schedules and the AdamW and SGD updates. Sums
// use double.
//
//===----------------------------------------------------------------------===//

#include "runtime/base/Random.h"
#include "runtime/device/AdamwGroup.h"
#include "runtime/device/cpu/CpuAdamw.h"
#include "runtime/device/cpu/CpuKernelUtils.h"
#include "runtime/device/cpu/ElementwiseLoops.h"
#include "runtime/device/cpu/IsaDispatch.h"
#include "runtime/device/cpu/VectorMath.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>

// The optimizer loops touch only element i of every operand in iteration i,
// so iterations stay independent when an output is the memory of an input.
// Saying so lets the vectorizer skip its overlap checks, which would send the
// in-place case (the common one) to the scalar loop.
#if defined(__clang__)
#define DTCC_INDEPENDENT_ITERATIONS                                            \
  _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define DTCC_INDEPENDENT_ITERATIONS _Pragma("GCC ivdep")
#else
#define DTCC_INDEPENDENT_ITERATIONS
#endif

namespace dtcc::runtime {
namespace {

using namespace cpu;

//===----------------------------------------------------------------------===//
// Shared helpers
//===----------------------------------------------------------------------===//

StatusOr<double> requireFloat(const KernelContext &ctx,
                              const std::string &name) {
  StatusOr<double> v = ctx.attrs.getFloat(name);
  if (!v.isOk())
    return ctx.error(v.status().message());
  return v;
}

StatusOr<int64_t> requireInt(const KernelContext &ctx,
                             const std::string &name) {
  StatusOr<int64_t> v = ctx.attrs.getInt(name);
  if (!v.isOk())
    return ctx.error(v.status().message());
  return v;
}

StatusOr<std::string> requireString(const KernelContext &ctx,
                                    const std::string &name) {
  StatusOr<std::string> v = ctx.attrs.getString(name);
  if (!v.isOk())
    return ctx.error(v.status().message());
  return v;
}

/// Checks a scalar input: one element of `dtype`, any rank and strides; the
/// kernel reads the element at the view's data pointer when it runs.
Status checkScalarInput(const KernelContext &ctx, size_t index, DType dtype,
                        const char *name) {
  const TensorView &v = ctx.inputs[index];
  const std::string what = "input " + std::to_string(index) + " (" + name + ")";
  DTCC_RETURN_IF_ERROR(checkStrides(ctx, v, what));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, v, dtype, what));
  if (v.numel() != 1)
    return ctx.error("expected ", what, " to hold one element, got ",
                     v.typeString());
  if (!v.data)
    return ctx.error(what, " has no data");
  return Status::ok();
}

/// Checks that `views` (tensor operands of a fused update, `names[i]` for
/// errors) pairwise either are the same memory or do not overlap, and that
/// no two of the first `outputs` share memory: the update loops read and
/// write element i of every operand in iteration i.
Status checkExactOrDisjoint(const KernelContext &ctx,
                            const std::vector<const TensorView *> &views,
                            const std::vector<std::string> &names,
                            size_t outputs) {
  for (size_t i = 0; i < views.size(); ++i)
    for (size_t j = i + 1; j < views.size(); ++j) {
      const uintptr_t a = uintptr_t(views[i]->data),
                      b = uintptr_t(views[j]->data);
      const uintptr_t aEnd = a + uintptr_t(views[i]->sizeInBytes()),
                      bEnd = b + uintptr_t(views[j]->sizeInBytes());
      if (a == aEnd || b == bEnd || aEnd <= b || bEnd <= a)
        continue;
      if (a == b && aEnd == bEnd && !(i < outputs && j < outputs))
        continue;
      return ctx.error(names[i], " and ", names[j],
                       a == b && aEnd == bEnd
                           ? " are the same memory"
                           : " partially overlap (expected the same memory "
                             "or disjoint buffers)");
    }
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// gelu_grad / silu_grad
//===----------------------------------------------------------------------===//

// Each op's last loop may write dx over x or dy (the same element only):
// DTCC_INDEPENDENT_ITERATIONS lets the compiler vectorize it without the
// overlap check, whose scalar fallback ran whenever the memory plan put the
// gradient in place (gelu_grad of the 4 x 128 GPT: 1.8 -> 1.0 ns an element
// on one Emerald Rapids core). The same holds for UnaryKernels' batch ops.

/// dx = dy * (Phi(x) + x phi(x)), the derivative of x Phi(x).
struct GeluErfGradOp {
  template <typename C>
  DTCC_ALWAYS_INLINE void batch(const C *x, const C *dy, C *dx, int64_t n) const {
    C cdf[kMathChunk], pdf[kMathChunk];
    for (int64_t i = 0; i < n; ++i) {
      cdf[i] = x[i] * C(0.70710678118654752440);
      pdf[i] = C(-0.5) * x[i] * x[i];
    }
    vectorMath(MathFn::kErf, cdf, n);
    vectorMath(MathFn::kExp, pdf, n);
    DTCC_INDEPENDENT_ITERATIONS
    for (int64_t i = 0; i < n; ++i)
      dx[i] = dy[i] * (C(0.5) * (C(1) + cdf[i]) +
                       x[i] * (C(0.39894228040143267794) * pdf[i]));
  }
};

/// The derivative of 0.5 x (1 + tanh(k (x + a x^3))).
struct GeluTanhGradOp {
  template <typename C>
  DTCC_ALWAYS_INLINE void batch(const C *x, const C *dy, C *dx, int64_t n) const {
    const C k = C(0.79788456080286535588), a = C(0.044715);
    C t[kMathChunk];
    for (int64_t i = 0; i < n; ++i)
      t[i] = k * (x[i] + a * x[i] * x[i] * x[i]);
    vectorMath(MathFn::kTanh, t, n);
    DTCC_INDEPENDENT_ITERATIONS
    for (int64_t i = 0; i < n; ++i) {
      const C du = k * (C(1) + C(3) * a * x[i] * x[i]);
      dx[i] = dy[i] * (C(0.5) * (C(1) + t[i]) +
                       C(0.5) * x[i] * (C(1) - t[i] * t[i]) * du);
    }
  }
};

/// dx = dy * s * (1 + x (1 - s)), s = sigmoid(x).
struct SiluGradOp {
  template <typename C>
  DTCC_ALWAYS_INLINE void batch(const C *x, const C *dy, C *dx, int64_t n) const {
    C s[kMathChunk];
    for (int64_t i = 0; i < n; ++i)
      s[i] = -x[i];
    vectorMath(MathFn::kExp, s, n);
    DTCC_INDEPENDENT_ITERATIONS
    for (int64_t i = 0; i < n; ++i) {
      const C sig = C(1) / (C(1) + s[i]);
      dx[i] = dy[i] * sig * (C(1) + x[i] * (C(1) - sig));
    }
  }
};

/// out = op(a, b) for ops on whole buffers: `op.batch(a, b, out, n)` in the
/// compute type (out may be a or b, n <= kMathChunk). Runs go through stack
/// buffers unless all three are unit-stride and of the compute type. The
/// output may be the memory of a contiguous input: each chunk is read before
/// it is written.
template <typename S, typename Op>
KernelFn makeBatchBinaryLoop(const StridedLayout<3> &layout,
                             const TensorView &a, const TensorView &b,
                             const TensorView &out, Op op) {
  using C = ComputeT<S>;
  S *o = out.as<S>();
  const S *pa = a.as<const S>(), *pb = b.as<const S>();
  return [layout, o, pa, pb, op]() -> Status {
    forEachRunParallel(layout, [&](const int64_t *off, int64_t n,
                                   const int64_t *st) {
      S *qo = o + off[0];
      const S *qa = pa + off[1], *qb = pb + off[2];
      const int64_t sa = st[1], sb = st[2];
      withAvx512([&]() DTCC_INLINE_LAMBDA {
        for (int64_t j0 = 0; j0 < n; j0 += kMathChunk) {
          const int64_t m = std::min(kMathChunk, n - j0);
          if constexpr (std::is_same_v<S, C>) {
            if (sa == 1 && sb == 1) {
              op.batch(qa + j0, qb + j0, qo + j0, m);
              continue;
            }
          }
          C ba[kMathChunk], bb[kMathChunk];
          for (int64_t j = 0; j < m; ++j) {
            ba[j] = Elem<S>::load(qa[(j0 + j) * sa]);
            bb[j] = Elem<S>::load(qb[(j0 + j) * sb]);
          }
          op.batch(ba, bb, ba, m);
          for (int64_t j = 0; j < m; ++j)
            qo[j0 + j] = Elem<S>::store(ba[j]);
        }
      });
    });
    return Status::ok();
  };
}

template <typename Op>
StatusOr<KernelFn> buildActivationGrad(const KernelContext &ctx, Op op) {
  DTCC_ASSIGN_OR_RETURN(StridedLayout<3> layout, elementwiseLayout<3>(ctx));
  const TensorView &x = ctx.inputs[0], &dy = ctx.inputs[1],
                   &out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, dy, x.dtype, "input 1"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, x.dtype, "output 0"));
  KernelFn fn;
  if (!visitDType<kSetFloats>(x.dtype, [&](auto tag) {
        using S = typename decltype(tag)::type;
        fn = makeBatchBinaryLoop<S>(layout, x, dy, out, op);
      }))
    return unsupportedDType(ctx, x.dtype, kSetFloats);
  return fn;
}

StatusOr<KernelFn> buildGeluGrad(const KernelContext &ctx) {
  const std::string approximate = ctx.attrs.getString("approximate", "none");
  if (approximate == "none")
    return buildActivationGrad(ctx, GeluErfGradOp());
  if (approximate == "tanh")
    return buildActivationGrad(ctx, GeluTanhGradOp());
  return ctx.error("expected approximate \"none\" or \"tanh\", got \"",
                   approximate, "\"");
}

//===----------------------------------------------------------------------===//
// softmax_grad / log_softmax_grad
//===----------------------------------------------------------------------===//

/// softmax: dx = y (dy - sum(dy y)); log-softmax: dx = dy - exp(y) sum(dy).
/// Along the last dimension (inner == 1) a row at a time; otherwise a block
/// of `size` x `inner` with one double sum per column. S is the tensors'
/// element type; f16 and bf16 widen each element as they read it and
/// compute in f32, rounding each result once when stored.
template <typename S, bool Log>
KernelFn makeSoftmaxGrad(const S *y, const S *dy, S *dx, int64_t outer,
                         int64_t size, int64_t inner) {
  using C = ComputeT<S>;
  auto expScratch = std::make_shared<std::vector<C>>(!Log         ? 0
                                                     : inner == 1 ? size
                                                                  : inner);
  auto sumScratch =
      std::make_shared<std::vector<double>>(inner > 1 ? inner : 0);
  return [=]() -> Status {
    auto at = [](const S *p, int64_t i) { return Elem<S>::load(p[i]); };
    C *t = expScratch->data();
    for (int64_t o = 0; o < outer; ++o) {
      const S *yb = y + o * size * inner, *db = dy + o * size * inner;
      S *xb = dx + o * size * inner;
      if (inner == 1) {
        if constexpr (Log) {
          const C s = C(blockedSum<C>(size, [&](auto ld) { return ld(db); }));
          for (int64_t d = 0; d < size; ++d)
            t[d] = at(yb, d);
          vectorMath(MathFn::kExp, t, size);
          for (int64_t d = 0; d < size; ++d)
            xb[d] = Elem<S>::store(at(db, d) - t[d] * s);
        } else {
          const C s =
              C(blockedSum<C>(size, [&](auto ld) { return ld(db) * ld(yb); }));
          for (int64_t d = 0; d < size; ++d)
            xb[d] = Elem<S>::store(at(yb, d) * (at(db, d) - s));
        }
        continue;
      }
      double *sum = sumScratch->data();
      std::fill(sum, sum + inner, 0.0);
      for (int64_t d = 0; d < size; ++d) {
        const S *yr = yb + d * inner, *dr = db + d * inner;
        for (int64_t i = 0; i < inner; ++i)
          sum[i] += Log ? double(at(dr, i))
                        : double(at(dr, i)) * double(at(yr, i));
      }
      for (int64_t d = 0; d < size; ++d) {
        const S *yr = yb + d * inner, *dr = db + d * inner;
        S *xr = xb + d * inner;
        if constexpr (Log) {
          for (int64_t i = 0; i < inner; ++i)
            t[i] = at(yr, i);
          vectorMath(MathFn::kExp, t, inner);
          for (int64_t i = 0; i < inner; ++i)
            xr[i] = Elem<S>::store(at(dr, i) - t[i] * C(sum[i]));
        } else {
          for (int64_t i = 0; i < inner; ++i)
            xr[i] = Elem<S>::store(at(yr, i) * (at(dr, i) - C(sum[i])));
        }
      }
    }
    return Status::ok();
  };
}

template <bool Log>
StatusOr<KernelFn> buildSoftmaxGrad(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView &y = ctx.inputs[0], &dy = ctx.inputs[1],
                   &out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, dy, y.dtype, "input 1"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, dy, y.shape, "input 1"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, y.dtype, "output 0"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, y.shape, "output 0"));
  DTCC_ASSIGN_OR_RETURN(int64_t dim, getDimAttr(ctx, "dim", y.rank()));
  const int64_t outer = product(y.shape, 0, dim), size = y.shape[dim],
                inner = product(y.shape, dim + 1);
  KernelFn fn;
  if (!visitDType<kSetFloats>(y.dtype, [&](auto tag) {
        using S = typename decltype(tag)::type;
        fn = makeSoftmaxGrad<S, Log>(y.as<const S>(), dy.as<const S>(),
                                     out.as<S>(), outer, size, inner);
      }))
    return unsupportedDType(ctx, y.dtype, kSetFloats);
  return fn;
}

//===----------------------------------------------------------------------===//
// layer_norm_grad / rms_norm_grad
//===----------------------------------------------------------------------===//

/// Reads a per-row statistic of any float dtype (once per row, so a switch
/// is cheap).
inline double loadStat(DType dtype, const void *base, int64_t i) {
  switch (dtype) {
  case DType::kF64:
    return static_cast<const double *>(base)[i];
  case DType::kF16:
    return halfToFloat(static_cast<const uint16_t *>(base)[i]);
  case DType::kBF16:
    return bf16ToFloat(static_cast<const uint16_t *>(base)[i]);
  default:
    return static_cast<const float *>(base)[i];
  }
}

struct NormGradPlan {
  int64_t rows = 0, cols = 0;
  DType statType = DType::kF32;
  /// Where the operands are: the first statistic and dy among the inputs
  /// (after x and, with dx, scale), dscale among the outputs (after dx).
  size_t firstStat = 2, dyIndex = 4, firstParam = 1;
};

/// Checks layer_norm_grad (x, scale, mean, rstd, dy -> dx, dscale, dbias) or
/// rms_norm_grad (x, scale, rstd, dy -> dx, dscale); without dx (`withDx`
/// false), their parameter gradients layer_norm_param_grad (x, mean, rstd,
/// dy -> dscale, dbias) and rms_norm_param_grad (x, rstd, dy -> dscale).
StatusOr<NormGradPlan> planNormGrad(const KernelContext &ctx, bool layer,
                                    bool withDx) {
  const size_t stats = layer ? 2 : 1;
  // The inputs: x, [scale,] the statistics, dy; the outputs: [dx,] the
  // parameter gradients.
  const size_t firstStat = withDx ? 2 : 1, dyIndex = firstStat + stats;
  DTCC_RETURN_IF_ERROR(expectArity(ctx, dyIndex + 1, stats + (withDx ? 1 : 0)));
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView &x = ctx.inputs[0];
  DTCC_ASSIGN_OR_RETURN(int64_t axis, getDimAttr(ctx, "axis", x.rank()));
  const std::vector<int64_t> normShape(x.shape.begin() + axis, x.shape.end());
  NormGradPlan plan;
  plan.rows = product(x.shape, 0, axis);
  plan.cols = product(x.shape, axis);
  plan.statType = ctx.inputs[firstStat].dtype;
  plan.firstStat = firstStat;
  plan.dyIndex = dyIndex;
  plan.firstParam = withDx ? 1 : 0;
  if (withDx) {
    DTCC_RETURN_IF_ERROR(checkDType(ctx, ctx.inputs[1], x.dtype, "input 1"));
    DTCC_RETURN_IF_ERROR(checkShape(ctx, ctx.inputs[1], normShape, "input 1"));
  }
  for (size_t i = firstStat; i < dyIndex; ++i) {
    const TensorView &s = ctx.inputs[i];
    const std::string what = "input " + std::to_string(i);
    if (!isFloatDType(s.dtype))
      return unsupportedDType(ctx, s.dtype, kSetFloats, what + " element type");
    DTCC_RETURN_IF_ERROR(checkDType(ctx, s, plan.statType, what));
    if (s.numel() != plan.rows)
      return ctx.error("expected ", what, " with ", plan.rows,
                       " elements (the product of x's dimensions before axis), "
                       "got ",
                       s.typeString());
  }
  const std::string dyWhat = "input " + std::to_string(dyIndex);
  DTCC_RETURN_IF_ERROR(checkDType(ctx, ctx.inputs[dyIndex], x.dtype, dyWhat));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, ctx.inputs[dyIndex], x.shape, dyWhat));
  if (withDx) {
    DTCC_RETURN_IF_ERROR(checkDType(ctx, ctx.outputs[0], x.dtype, "output 0"));
    DTCC_RETURN_IF_ERROR(checkShape(ctx, ctx.outputs[0], x.shape, "output 0"));
  }
  for (size_t i = plan.firstParam; i < ctx.outputs.size(); ++i) {
    const std::string what = "output " + std::to_string(i);
    DTCC_RETURN_IF_ERROR(checkDType(ctx, ctx.outputs[i], x.dtype, what));
    DTCC_RETURN_IF_ERROR(checkShape(ctx, ctx.outputs[i], normShape, what));
  }
  return plan;
}

/// Per row: xhat = (x - mean) rstd (rms: x rstd), g = dy scale,
/// dx = rstd (g - mean(g) - xhat mean(g xhat)) (rms: without mean(g)).
/// One pass over x and dy: rows go in fixed chunks (their number and size
/// depend on the shape only), each chunk summing its rows' dscale and dbias
/// terms in double, row after row; the chunks' sums are then added in
/// chunk order. Chunks split over the kernels' threads, so every value is
/// computed the same way for any thread count. S is the tensors' element
/// type; f16 and bf16 widen each element as they read it and compute in
/// f32, rounding each result once when stored (the f32 island mixed
/// precision used to put around the op, without the casts' passes).
/// Without dx (`WithDx` false: the parameter gradients' kernels) only the
/// column sums, the same values in the same order.
template <typename S, bool Layer, bool WithDx>
KernelFn makeNormGrad(const NormGradPlan &p, const S *x, const S *scale,
                      const void *mean, const void *rstd, const S *dy, S *dx,
                      S *dscale, S *dbias) {
  using C = ComputeT<S>;
  // At most kMaxChunks chunks of at least kChunkRows rows.
  constexpr int64_t kMaxChunks = 64, kChunkRows = 16;
  const int64_t chunkRows = std::max<int64_t>(
      kChunkRows, (p.rows + kMaxChunks - 1) / kMaxChunks);
  const int64_t chunks = p.rows ? (p.rows + chunkRows - 1) / chunkRows : 0;
  const int64_t sums = Layer ? 2 : 1;
  // Per thread: a row's xhat and g; then the scale in the compute type.
  auto scratch =
      std::make_shared<std::vector<C>>(2 * p.cols * cpuThreads() + p.cols);
  auto partial =
      std::make_shared<std::vector<double>>(sums * p.cols * chunks);
  return [=]() -> Status {
    const int64_t cols = p.cols;
    const double invCols = cols ? 1.0 / double(cols) : 0.0;
    C *scaleC = scratch->data() + 2 * cols * cpuThreads();
    if constexpr (WithDx)
      for (int64_t c = 0; c < cols; ++c)
        scaleC[c] = Elem<S>::load(scale[c]);
    // dx of one row from its xhat and g.
    // Inlined into the AVX-512 clone below.
    auto rowGrad = [&](const C *xhat, const C *g, C rs,
                       S *dxr) DTCC_INLINE_LAMBDA {
      const C meanGH = C(blockedSum<C>(cols,
                                       [&](auto at) DTCC_INLINE_LAMBDA {
                                         return at(g) * at(xhat);
                                       }) *
                         invCols);
      C meanG = C(0);
      if constexpr (Layer)
        meanG = C(blockedSum<C>(
                      cols, [&](auto at) DTCC_INLINE_LAMBDA { return at(g); }) *
                  invCols);
      for (int64_t c = 0; c < cols; ++c)
        dxr[c] = Elem<S>::store(rs * (g[c] - meanG - xhat[c] * meanGH));
    };
    parallelFor(chunks, parallelGrain(chunkRows * cols),
                [&](int64_t begin, int64_t end, int w) {
                  C *xhat = scratch->data() + 2 * cols * w, *g = xhat + cols;
                  withAvx512([&]() DTCC_INLINE_LAMBDA {
                    for (int64_t k = begin; k < end; ++k) {
                      double *accScale = partial->data() + sums * cols * k;
                      double *accBias = accScale + cols;
                      std::fill(accScale, accScale + sums * cols, 0.0);
                      const int64_t r1 = std::min(p.rows, (k + 1) * chunkRows);
                      for (int64_t r = k * chunkRows; r < r1; ++r) {
                        const S *xr = x + r * cols, *dyr = dy + r * cols;
                        const C mu =
                            Layer ? C(loadStat(p.statType, mean, r)) : C(0);
                        const C rs = C(loadStat(p.statType, rstd, r));
                        for (int64_t c = 0; c < cols; ++c) {
                          const C h = (Elem<S>::load(xr[c]) - mu) * rs;
                          const C d = Elem<S>::load(dyr[c]);
                          if constexpr (WithDx) {
                            xhat[c] = h;
                            g[c] = d * scaleC[c];
                          }
                          accScale[c] += double(d) * double(h);
                          if constexpr (Layer)
                            accBias[c] += double(d);
                        }
                        if constexpr (WithDx)
                          rowGrad(xhat, g, rs, dx + r * cols);
                      }
                    }
                  });
                });
    // The chunks' sums, in chunk order; columns split over the threads.
    parallelFor(cols, parallelGrain(chunks), [&](int64_t c0, int64_t c1, int) {
      for (int64_t c = c0; c < c1; ++c) {
        double s = 0, b = 0;
        for (int64_t k = 0; k < chunks; ++k) {
          const double *acc = partial->data() + sums * cols * k;
          s += acc[c];
          if constexpr (Layer)
            b += acc[cols + c];
        }
        dscale[c] = Elem<S>::store(C(s));
        if constexpr (Layer)
          dbias[c] = Elem<S>::store(C(b));
      }
    });
    return Status::ok();
  };
}

/// layer_norm_grad and rms_norm_grad (`WithDx`), or their parameter
/// gradients alone (layer_norm_param_grad, rms_norm_param_grad).
template <bool Layer, bool WithDx>
StatusOr<KernelFn> buildNormGrad(const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(NormGradPlan plan, planNormGrad(ctx, Layer, WithDx));
  const TensorView &x = ctx.inputs[0];
  const size_t firstStat = plan.firstStat, dyIndex = plan.dyIndex,
               firstParam = plan.firstParam;
  KernelFn fn;
  if (!visitDType<kSetFloats>(x.dtype, [&](auto tag) {
        using S = typename decltype(tag)::type;
        fn = makeNormGrad<S, Layer, WithDx>(
            plan, x.as<const S>(),
            WithDx ? ctx.inputs[1].as<const S>() : nullptr,
            Layer ? ctx.inputs[firstStat].data : nullptr,
            ctx.inputs[dyIndex - 1].data, ctx.inputs[dyIndex].as<const S>(),
            WithDx ? ctx.outputs[0].as<S>() : nullptr,
            ctx.outputs[firstParam].as<S>(),
            Layer ? ctx.outputs[firstParam + 1].as<S>() : nullptr);
      }))
    return unsupportedDType(ctx, x.dtype, kSetFloats);
  return fn;
}

//===----------------------------------------------------------------------===//
// cross_entropy_grad
//===----------------------------------------------------------------------===//

/// dlogits[i] = (softmax(logits[i]) - onehot(labels[i])) * dloss[i]; zero
/// rows for ignore_index. Computed in S's compute type; dloss is of the
/// logits' type S, or D = float for half logits (the gradient of their f32
/// cast rounded once to S).
template <typename S, typename D, typename I>
KernelFn makeCrossEntropyGrad(const S *logits, const I *labels, const D *dloss,
                              S *out, int64_t n, int64_t c, int64_t ignore,
                              std::string prefix) {
  using C = ComputeT<S>;
  auto scratch = std::make_shared<std::vector<C>>(c);
  return [=]() -> Status {
    C *t = scratch->data();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t label = int64_t(labels[i]);
      S *o = out + i * c;
      if (label == ignore) {
        std::fill(o, o + c, Elem<S>::store(C(0)));
        continue;
      }
      if (label < 0 || label >= c)
        return outOfRange(prefix, "label ", label, " of row ", i,
                          " is outside [0, ", c, ") and is not ignore_index (",
                          ignore, ")");
      const S *x = logits + i * c;
      const C m = rowMax(x, c);
      const double sum = expShifted(x, m, t, c);
      const C dl = Elem<D>::load(dloss[i]), inv = C(1.0 / sum),
              scale = C(double(dl) / sum);
      for (int64_t j = 0; j < c; ++j)
        o[j] = Elem<S>::store(t[j] * scale);
      o[label] = Elem<S>::store((t[label] * inv - C(1)) * dl);
    }
    return Status::ok();
  };
}

StatusOr<KernelFn> buildCrossEntropyGrad(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView &logits = ctx.inputs[0], &labels = ctx.inputs[1],
                   &dloss = ctx.inputs[2], &out = ctx.outputs[0];
  if (logits.rank() != 2)
    return ctx.error("expected logits of rank 2, got ", logits.typeString());
  const int64_t n = logits.shape[0], c = logits.shape[1];
  DTCC_RETURN_IF_ERROR(checkShape(ctx, labels, {n}, "input 1"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, dloss, {n}, "input 2"));
  const bool wideDloss = isF32OfHalf(logits.dtype, dloss.dtype);
  if (!wideDloss)
    DTCC_RETURN_IF_ERROR(checkDType(ctx, dloss, logits.dtype, "input 2"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, logits.shape, "output 0"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, logits.dtype, "output 0"));
  const int64_t ignore = ctx.attrs.getInt("ignore_index", -100);
  KernelFn fn;
  bool typeOk = visitDType<kSetFloats>(logits.dtype, [&](auto stag) {
    using S = typename decltype(stag)::type;
    auto bind = [&](auto itag, auto dtag) {
      using I = typename decltype(itag)::type;
      using D = typename decltype(dtag)::type;
      fn = makeCrossEntropyGrad<S, D, I>(
          logits.as<const S>(), labels.as<const I>(), dloss.as<const D>(),
          out.as<S>(), n, c, ignore, errorPrefix(ctx));
    };
    auto bindLabels = [&](auto dtag) {
      if (labels.dtype == DType::kI32)
        bind(TypeTag<int32_t>{}, dtag);
      else if (labels.dtype == DType::kI64)
        bind(TypeTag<int64_t>{}, dtag);
    };
    if (wideDloss)
      bindLabels(TypeTag<float>{});
    else
      bindLabels(TypeTag<S>{});
  });
  if (!typeOk)
    return unsupportedDType(ctx, logits.dtype, kSetFloats);
  if (!fn)
    return ctx.error("expected i32 or i64 labels, got ",
                     dtypeName(labels.dtype));
  return fn;
}

//===----------------------------------------------------------------------===//
// Counter-based draws: dropout, random
//===----------------------------------------------------------------------===//

/// Where a block of a split tensor lies in the whole one: each element's
/// counter is its index in the whole tensor (global row-major strides),
/// from the block's offsets, read when the kernel runs.
struct CounterBlock {
  const int64_t *offsets = nullptr; ///< null: the tensor is whole
  std::vector<int64_t> shape;       ///< of the block
  std::vector<int64_t> strides;     ///< of the whole tensor
};

/// The block of a draw of shape `shape` whose offsets are input
/// `offsetsInput` when the kernel has it (with the global_shape attribute),
/// else the whole tensor.
StatusOr<CounterBlock> readCounterBlock(const KernelContext &ctx,
                                        size_t offsetsInput,
                                        const std::vector<int64_t> &shape) {
  CounterBlock block;
  if (ctx.inputs.size() <= offsetsInput)
    return block;
  const TensorView &offsets = ctx.inputs[offsetsInput];
  const size_t rank = shape.size();
  const std::string what =
      "input " + std::to_string(offsetsInput) + " (offsets)";
  DTCC_RETURN_IF_ERROR(checkContiguous(ctx, offsets, what.c_str()));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, offsets, DType::kI64, what.c_str()));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, offsets, {int64_t(rank)}, what.c_str()));
  DTCC_ASSIGN_OR_RETURN(std::vector<int64_t> global,
                        getIntsAttr(ctx, "global_shape", rank));
  block.offsets = offsets.as<const int64_t>();
  block.shape = shape;
  block.strides.assign(rank, 1);
  for (int64_t d = int64_t(rank) - 1; d >= 0; --d) {
    if (global[d] < shape[d])
      return ctx.error("expected global_shape[", d, "] of at least ",
                       shape[d], ", got ", global[d]);
    if (d + 1 < int64_t(rank))
      block.strides[d] = block.strides[d + 1] * global[d + 1];
  }
  return block;
}

/// Calls `one(i, counter)` for each of the `n` elements of `block`, counter
/// the element's index in the whole tensor.
template <typename F>
void forEachCounter(int64_t n, const CounterBlock &block, F &&one) {
  if (!block.offsets) {
    for (int64_t i = 0; i < n; ++i)
      one(i, uint64_t(i));
    return;
  }
  // Rows of the block's last dimension are contiguous in the whole
  // tensor too: one base index per row.
  const size_t rank = block.shape.size();
  if (n == 0)
    return;
  if (rank == 0) {
    one(0, 0);
    return;
  }
  std::vector<int64_t> index(rank, 0);
  const int64_t row = block.shape[rank - 1];
  for (int64_t start = 0; start < n; start += row) {
    int64_t base = 0;
    for (size_t d = 0; d < rank; ++d)
      base += (block.offsets[d] + index[d]) * block.strides[d];
    for (int64_t j = 0; j < row; ++j)
      one(start + j, uint64_t(base + j));
    for (int64_t d = int64_t(rank) - 2; d >= 0; --d) {
      if (++index[d] < block.shape[d])
        break;
      index[d] = 0;
    }
  }
}

/// Element i is kept when u_i = (splitmix64(key + i) >> 11) 2^-53 >= ratio,
/// i.e. when the 53-bit integer is >= ceil(ratio 2^53): `threshold`. On a
/// block, i is the element's index in the whole tensor.
template <typename S>
KernelFn makeDropout(const S *x, const int64_t *step, S *y, bool *mask,
                     int64_t n, uint64_t seed, uint64_t threshold,
                     ComputeT<S> scale, CounterBlock block) {
  using C = ComputeT<S>;
  return [=]() -> Status {
    const uint64_t key = streamKey(seed, uint64_t(*step));
    forEachCounter(n, block, [&](int64_t i, uint64_t counter) {
      const bool keep = (splitmix64(key + counter) >> 11) >= threshold;
      const C v = Elem<S>::load(x[i]) * scale;
      y[i] = Elem<S>::store(keep ? v : C(0));
      mask[i] = keep;
    });
    return Status::ok();
  };
}

StatusOr<KernelFn> buildDropout(const KernelContext &ctx) {
  const TensorView &x = ctx.inputs[0], &y = ctx.outputs[0],
                   &mask = ctx.outputs[1];
  DTCC_RETURN_IF_ERROR(checkContiguous(ctx, x, "input 0"));
  DTCC_RETURN_IF_ERROR(checkScalarInput(ctx, 1, DType::kI64, "step"));
  DTCC_RETURN_IF_ERROR(checkContiguous(ctx, y, "output 0"));
  DTCC_RETURN_IF_ERROR(checkContiguous(ctx, mask, "output 1"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, y, x.dtype, "output 0"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, y, x.shape, "output 0"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, mask, DType::kBool, "output 1"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, mask, x.shape, "output 1"));
  DTCC_ASSIGN_OR_RETURN(double ratio, requireFloat(ctx, "ratio"));
  DTCC_ASSIGN_OR_RETURN(int64_t seed, requireInt(ctx, "seed"));
  if (!(ratio >= 0 && ratio < 1))
    return ctx.error("expected ratio in [0, 1), got ", ratio);
  DTCC_ASSIGN_OR_RETURN(CounterBlock block, readCounterBlock(ctx, 2, x.shape));
  // ratio * 2^53 is exact (a power-of-two scaling) and below 2^53.
  const uint64_t threshold = uint64_t(std::ceil(ratio * 0x1.0p53));
  const double scale = 1.0 / (1.0 - ratio);
  KernelFn fn;
  if (!visitDType<kSetFloats>(x.dtype, [&](auto tag) {
        using S = typename decltype(tag)::type;
        fn = makeDropout<S>(x.as<const S>(), ctx.inputs[1].as<const int64_t>(),
                            y.as<S>(), mask.as<bool>(), x.numel(),
                            uint64_t(seed), threshold, ComputeT<S>(scale), block);
      }))
    return unsupportedDType(ctx, x.dtype, kSetFloats);
  return fn;
}

/// dgraph.random's formula (GraphTrainingOps.td) in double, stored in S:
/// uniform from counter i's top `digits` bits (the type's significand),
/// normal by Box-Muller of counters 2i and 2i + 1 (53 bits each).
template <typename S>
KernelFn makeRandom(const int64_t *step, S *y, int64_t n, uint64_t seed,
                    bool normal, double shift, double scale, int digits,
                    CounterBlock block) {
  using C = ComputeT<S>;
  return [=]() -> Status {
    const uint64_t key = streamKey(seed, uint64_t(*step));
    forEachCounter(n, block, [&](int64_t i, uint64_t counter) {
      const double x = standardDraw(key, counter, normal, digits);
      y[i] = Elem<S>::store(C(shift + scale * x));
    });
    return Status::ok();
  };
}

StatusOr<KernelFn> buildRandom(const KernelContext &ctx) {
  const TensorView &y = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkScalarInput(ctx, 0, DType::kI64, "step"));
  DTCC_RETURN_IF_ERROR(checkContiguous(ctx, y, "output 0"));
  DTCC_ASSIGN_OR_RETURN(std::string distribution,
                        requireString(ctx, "distribution"));
  DTCC_ASSIGN_OR_RETURN(double shift, requireFloat(ctx, "shift"));
  DTCC_ASSIGN_OR_RETURN(double scale, requireFloat(ctx, "scale"));
  DTCC_ASSIGN_OR_RETURN(int64_t seed, requireInt(ctx, "seed"));
  if (distribution != "uniform" && distribution != "normal")
    return ctx.error("expected distribution \"uniform\" or \"normal\", got \"",
                     distribution, "\"");
  if (!std::isfinite(shift) || !std::isfinite(scale))
    return ctx.error("expected a finite shift and scale, got ", shift, " and ",
                     scale);
  DTCC_ASSIGN_OR_RETURN(CounterBlock block, readCounterBlock(ctx, 1, y.shape));
  KernelFn fn;
  if (!visitDType<kSetFloats>(y.dtype, [&](auto tag) {
        using S = typename decltype(tag)::type;
        fn = makeRandom<S>(ctx.inputs[0].as<const int64_t>(), y.as<S>(),
                           y.numel(), uint64_t(seed), distribution == "normal",
                           shift, scale, significandBits(y.dtype), block);
      }))
    return unsupportedDType(ctx, y.dtype, kSetFloats);
  return fn;
}

//===----------------------------------------------------------------------===//
// lr_schedule
//===----------------------------------------------------------------------===//

enum class LrKind { kConstant, kLinear, kCosine };

constexpr double kPi = 3.14159265358979323846;

/// The formula of GraphTrainingOps.td, in double.
double learningRate(LrKind kind, double base, double min, int64_t warmup,
                    int64_t step, int64_t total) {
  if (step < warmup)
    return base * double(step + 1) / double(warmup);
  const double p =
      double(step - warmup) / double(std::max<int64_t>(1, total - warmup));
  switch (kind) {
  case LrKind::kConstant:
    return base;
  case LrKind::kLinear:
    return min + (base - min) * (1 - p);
  case LrKind::kCosine:
    return min + (base - min) * (1 + std::cos(kPi * p)) / 2;
  }
  return base;
}

StatusOr<KernelFn> buildLrSchedule(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkScalarInput(ctx, 0, DType::kI64, "step"));
  DTCC_RETURN_IF_ERROR(checkScalarInput(ctx, 1, DType::kI64, "total"));
  const TensorView &out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkContiguous(ctx, out, "output 0"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, DType::kF32, "output 0"));
  if (out.numel() != 1)
    return ctx.error("expected output 0 to hold one element, got ",
                     out.typeString());
  DTCC_ASSIGN_OR_RETURN(double base, requireFloat(ctx, "base_lr"));
  DTCC_ASSIGN_OR_RETURN(double min, requireFloat(ctx, "min_lr"));
  DTCC_ASSIGN_OR_RETURN(int64_t warmup, requireInt(ctx, "warmup"));
  if (warmup < 0)
    return ctx.error("expected warmup >= 0, got ", warmup);
  StatusOr<std::string> kindName = ctx.attrs.getString("kind");
  if (!kindName.isOk())
    return ctx.error(kindName.status().message());
  LrKind kind;
  if (*kindName == "constant")
    kind = LrKind::kConstant;
  else if (*kindName == "linear")
    kind = LrKind::kLinear;
  else if (*kindName == "cosine")
    kind = LrKind::kCosine;
  else
    return ctx.error("expected kind \"constant\", \"linear\" or \"cosine\", "
                     "got \"",
                     *kindName, "\"");
  const int64_t *step = ctx.inputs[0].as<const int64_t>();
  const int64_t *total = ctx.inputs[1].as<const int64_t>();
  float *lr = out.as<float>();
  return KernelFn([=]() -> Status {
    *lr = float(learningRate(kind, base, min, warmup, *step, *total));
    return Status::ok();
  });
}

//===----------------------------------------------------------------------===//
// adamw / sgd
//===----------------------------------------------------------------------===//

/// The tensor operands of an optimizer update: `tensors` inputs of one type
/// and shape (the first is param) at inputs 0.., then lr, step, grad_scale,
/// then `tensors - 1` outputs of that type; an output after them (adamw's
/// `rounded`, the signature table allowing it) is the new parameter rounded
/// to bf16 or f16 for an f32 parameter.
/// `narrowGrad`: input 1 (the gradient) may be bf16 or f16 for an f32
/// parameter.
Status checkOptimizer(const KernelContext &ctx, size_t tensors,
                      const std::vector<std::string> &inputNames,
                      const std::vector<std::string> &outputNames,
                      bool narrowGrad = false) {
  const TensorView &param = ctx.inputs[0];
  std::vector<const TensorView *> views;
  std::vector<std::string> names;
  for (size_t i = 0; i < ctx.outputs.size(); ++i) {
    const TensorView &out = ctx.outputs[i];
    const std::string what =
        "output " + std::to_string(i) + " (" + outputNames[i] + ")";
    DTCC_RETURN_IF_ERROR(checkContiguous(ctx, out, what));
    if (i + 1 < tensors)
      DTCC_RETURN_IF_ERROR(checkDType(ctx, out, param.dtype, what));
    else if (!isF32OfHalf(out.dtype, param.dtype))
      return ctx.error("expected ", what, " of bf16 or f16 for an f32 ",
                       "parameter, got ", out.typeString(), " for ",
                       param.typeString());
    DTCC_RETURN_IF_ERROR(checkShape(ctx, out, param.shape, what));
    views.push_back(&ctx.outputs[i]);
    names.push_back(what);
  }
  for (size_t i = 0; i < tensors; ++i) {
    const std::string what =
        "input " + std::to_string(i) + " (" + inputNames[i] + ")";
    DTCC_RETURN_IF_ERROR(checkContiguous(ctx, ctx.inputs[i], what));
    const DType t = ctx.inputs[i].dtype;
    if (!(narrowGrad && i == 1 && isF32OfHalf(t, param.dtype)))
      DTCC_RETURN_IF_ERROR(checkDType(ctx, ctx.inputs[i], param.dtype, what));
    DTCC_RETURN_IF_ERROR(checkShape(ctx, ctx.inputs[i], param.shape, what));
    views.push_back(&ctx.inputs[i]);
    names.push_back(what);
  }
  DTCC_RETURN_IF_ERROR(checkScalarInput(ctx, tensors, DType::kF32, "lr"));
  DTCC_RETURN_IF_ERROR(checkScalarInput(ctx, tensors + 1, DType::kI64, "step"));
  DTCC_RETURN_IF_ERROR(
      checkScalarInput(ctx, tensors + 2, DType::kF32, "grad_scale"));
  return checkExactOrDisjoint(ctx, views, names, ctx.outputs.size());
}

/// The scalars of an update, read when it runs.
struct OptimizerScalars {
  const float *lr;
  const int64_t *step;
  const float *gradScale;
};

Status badStep(const std::string &prefix, int64_t step) {
  return invalidArgument(prefix, "expected step >= 1 (the 1-based update ",
                         "count), got ", step);
}

template <typename C> struct AdamwCoefs {
  C decay, beta1, oneMinusBeta1, beta2, oneMinusBeta2, negStepSize, bc2Sqrt,
      eps, gradScale;
};

/// One fused pass; outputs may be the memory of any input (see
/// DTCC_INDEPENDENT_ITERATIONS), so every input is read before the writes.
/// The gradient is C or a narrower float G, widened exactly. H is void, or
/// the half type of `rounded`, which takes the new parameter rounded (the
/// compute-type copy of an f32 master: rounded-copies).
template <typename C, typename G, typename H>
DTCC_ALWAYS_INLINE void
adamwBody(const C *param, const G *grad, const C *m, const C *v, C *newP,
          C *newM, C *newV, H *rounded, int64_t n, const AdamwCoefs<C> &k) {
  DTCC_NO_CONTRACT
  DTCC_INDEPENDENT_ITERATIONS
  for (int64_t i = 0; i < n; ++i) {
    const C g = C(Elem<G>::load(grad[i])) * k.gradScale;
    const C p = param[i] * k.decay;
    const C mi = m[i] * k.beta1 + k.oneMinusBeta1 * g;
    const C vi = v[i] * k.beta2 + k.oneMinusBeta2 * g * g;
    const C denom = std::sqrt(vi) / k.bc2Sqrt + k.eps;
    const C pi = p + k.negStepSize * mi / denom;
    newP[i] = pi;
    newM[i] = mi;
    newV[i] = vi;
    if constexpr (!std::is_void_v<H>)
      rounded[i] = Elem<H>::store(pi);
  }
}

/// adamwBody, f32 on AVX-512 where the CPU has it (IsaDispatch.h).
template <typename C, typename G, typename H>
void adamwLoop(const C *param, const G *grad, const C *m, const C *v, C *newP,
               C *newM, C *newV, H *rounded, int64_t n, const AdamwCoefs<C> k) {
  if constexpr (std::is_same_v<C, float>)
    withAvx512([&]() DTCC_INLINE_LAMBDA {
      adamwBody(param, grad, m, v, newP, newM, newV, rounded, n, k);
    });
  else
    adamwBody(param, grad, m, v, newP, newM, newV, rounded, n, k);
}

/// An adamw instruction, bound: what a run of them shares and touches, and
/// its update of the elements [b, e) with a run's coefficients.
struct AdamwMember {
  AdamwAccess access;
  int64_t n = 0;
  std::function<void(int64_t, int64_t, const AdamwCoefs<double> &)> update;
};

/// The checked operands of an adamw instruction (param, grad, m, v, lr,
/// step, grad_scale -> new_param, new_m, new_v[, rounded]).
StatusOr<AdamwMember> planAdamw(const KernelContext &ctx) {
  // An f32 parameter's gradient may be bf16 or f16 (read without a cast);
  // a fourth output is the new parameter rounded to bf16 or f16 (an f32
  // master's compute-type copy).
  DTCC_RETURN_IF_ERROR(
      checkOptimizer(ctx, 4, {"param", "grad", "m", "v"},
                     {"new_param", "new_m", "new_v", "rounded"},
                     /*narrowGrad=*/true));
  AdamwMember member;
  AdamwAccess &a = member.access;
  a.paramType = ctx.inputs[0].dtype;
  a.gradType = ctx.inputs[1].dtype;
  const bool hasRounded = ctx.outputs.size() == 4;
  void *roundedData = hasRounded ? ctx.outputs[3].data : nullptr;
  a.roundedType = hasRounded ? ctx.outputs[3].dtype : DType::kF32;
  DTCC_ASSIGN_OR_RETURN(a.beta1, requireFloat(ctx, "beta1"));
  DTCC_ASSIGN_OR_RETURN(a.beta2, requireFloat(ctx, "beta2"));
  DTCC_ASSIGN_OR_RETURN(a.eps, requireFloat(ctx, "epsilon"));
  DTCC_ASSIGN_OR_RETURN(a.weightDecay, requireFloat(ctx, "weight_decay"));
  a.lr = ctx.inputs[4].data;
  a.step = ctx.inputs[5].data;
  a.gradScale = ctx.inputs[6].data;
  // Every operand is contiguous (checkOptimizer).
  auto bytesOf = [](const TensorView &t) {
    return byteRange(t.data, t.numel() * int64_t(dtypeSize(t.dtype)));
  };
  for (const TensorView &in : ctx.inputs)
    a.reads.push_back(bytesOf(in));
  for (const TensorView &out : ctx.outputs)
    a.writes.push_back(bytesOf(out));
  member.n = ctx.inputs[0].numel();
  const DType gradType = a.gradType, roundedType = a.roundedType;
  if (!visitDType<kSetF32F64>(a.paramType, [&](auto tag) {
        using C = typename decltype(tag)::type;
        const C *param = ctx.inputs[0].as<const C>(),
                *m = ctx.inputs[2].as<const C>(),
                *v = ctx.inputs[3].as<const C>();
        const void *grad = ctx.inputs[1].data;
        C *newP = ctx.outputs[0].as<C>(), *newM = ctx.outputs[1].as<C>(),
          *newV = ctx.outputs[2].as<C>();
        member.update = [=](int64_t b, int64_t e, const AdamwCoefs<double> &d) {
          // The coefficients computed in double, rounded once to C.
          const AdamwCoefs<C> k{
              C(d.decay),   C(d.beta1),         C(d.oneMinusBeta1),
              C(d.beta2),   C(d.oneMinusBeta2), C(d.negStepSize),
              C(d.bc2Sqrt), C(d.eps),           C(d.gradScale)};
          auto loop = [&](auto *g, auto *h) {
            auto *hb = h;
            if constexpr (!std::is_void_v<std::remove_pointer_t<decltype(h)>>)
              hb += b;
            adamwLoop(param + b, g + b, m + b, v + b, newP + b, newM + b,
                      newV + b, hb, e - b, k);
          };
          auto run = [&](auto *g) {
            if constexpr (std::is_same_v<C, float>) {
              if (roundedData && roundedType == DType::kBF16)
                return loop(g, static_cast<BFloat16 *>(roundedData));
              if (roundedData)
                return loop(g, static_cast<Half *>(roundedData));
            }
            loop(g, static_cast<void *>(nullptr));
          };
          if constexpr (std::is_same_v<C, float>) {
            if (gradType == DType::kBF16)
              run(static_cast<const BFloat16 *>(grad));
            else if (gradType == DType::kF16)
              run(static_cast<const Half *>(grad));
            else
              run(static_cast<const C *>(grad));
          } else {
            run(static_cast<const C *>(grad));
          }
        };
      }))
    return unsupportedDType(ctx, a.paramType, kSetF32F64);
  return member;
}

/// The coefficients of an update at its step (as PyTorch: scalars in
/// double, each rounded once to the tensor type where it is used).
StatusOr<AdamwCoefs<double>> adamwCoefs(const AdamwAccess &a,
                                        const std::string &prefix) {
  const int64_t step = *static_cast<const int64_t *>(a.step);
  if (step < 1)
    return badStep(prefix, step);
  const double lr = *static_cast<const float *>(a.lr);
  const double bc1 = 1 - std::pow(a.beta1, double(step));
  const double bc2 = 1 - std::pow(a.beta2, double(step));
  AdamwCoefs<double> k;
  k.decay = 1 - lr * a.weightDecay;
  k.beta1 = a.beta1;
  k.oneMinusBeta1 = 1 - a.beta1;
  k.beta2 = a.beta2;
  k.oneMinusBeta2 = 1 - a.beta2;
  k.negStepSize = -(lr / bc1);
  k.bc2Sqrt = std::sqrt(bc2);
  k.eps = a.eps;
  k.gradScale = *static_cast<const float *>(a.gradScale);
  return k;
}

} // namespace

/// Consecutive adamw instructions bound as one update (CpuAdamw.h).
struct cpu::AdamwRun {
  std::vector<AdamwMember> members;
  std::vector<AdamwAccess> accesses;
  /// Its kernel has run: nothing joins it any more (an instruction bound
  /// after that would never be updated).
  std::atomic<bool> started{false};
};

StatusOr<KernelFn> cpu::bindAdamwInRun(const KernelContext &ctx,
                                       std::shared_ptr<AdamwRun> &open) {
  DTCC_ASSIGN_OR_RETURN(AdamwMember member, planAdamw(ctx));
  if (open && !open->started &&
      canJoinAdamwGroup(open->accesses, member.access)) {
    open->accesses.push_back(member.access);
    open->members.push_back(std::move(member));
    return KernelFn([] { return Status::ok(); });
  }
  auto run = std::make_shared<AdamwRun>();
  run->accesses.push_back(member.access);
  run->members.push_back(std::move(member));
  open = run;
  const std::string prefix = errorPrefix(ctx);
  return KernelFn([run, prefix]() -> Status {
    run->started = true;
    const std::vector<AdamwMember> &members = run->members;
    DTCC_ASSIGN_OR_RETURN(AdamwCoefs<double> k,
                          adamwCoefs(members.front().access, prefix));
    // The members' elements back to back, split over the threads.
    std::vector<int64_t> begin{0};
    for (const AdamwMember &m : members)
      begin.push_back(begin.back() + m.n);
    parallelFor(begin.back(), kParallelGrain, [&](int64_t b, int64_t e, int) {
      size_t i =
          std::upper_bound(begin.begin(), begin.end(), b) - begin.begin() - 1;
      for (; i < members.size() && begin[i] < e; ++i) {
        const int64_t lo = std::max(b, begin[i]) - begin[i];
        const int64_t hi = std::min(e, begin[i + 1]) - begin[i];
        if (lo < hi)
          members[i].update(lo, hi, k);
      }
    });
    return Status::ok();
  });
}

namespace {

/// adamw bound on its own (the kernels' registry: a host instruction of
/// another device, a kernel test); the CPU device binds runs of them.
StatusOr<KernelFn> buildAdamw(const KernelContext &ctx) {
  std::shared_ptr<AdamwRun> none;
  return bindAdamwInRun(ctx, none);
}

template <typename C> struct SgdCoefs {
  C gradScale, weightDecay, momentum, oneMinusDampening, negLr;
  bool hasWeightDecay, first, useMomentum, nesterov;
};

/// One fused pass, in place or not, as adamwLoop.
template <typename C>
void sgdLoop(const C *param, const C *grad, const C *buf, C *newP, C *newBuf,
             int64_t n, const SgdCoefs<C> k) {
  DTCC_INDEPENDENT_ITERATIONS
  for (int64_t i = 0; i < n; ++i) {
    const C p = param[i];
    C d = grad[i] * k.gradScale;
    d = k.hasWeightDecay ? d + k.weightDecay * p : d;
    // On the first step the buffer may hold anything: select, not multiply.
    const C b = k.first ? d : buf[i] * k.momentum + k.oneMinusDampening * d;
    const C u = k.nesterov ? d + k.momentum * b : k.useMomentum ? b : d;
    newP[i] = p + k.negLr * u;
    newBuf[i] = b;
  }
}

StatusOr<KernelFn> buildSgd(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkOptimizer(ctx, 3, {"param", "grad", "buf"},
                                      {"new_param", "new_buf"}));
  DTCC_ASSIGN_OR_RETURN(double momentum, requireFloat(ctx, "momentum"));
  DTCC_ASSIGN_OR_RETURN(double dampening, requireFloat(ctx, "dampening"));
  DTCC_ASSIGN_OR_RETURN(double wd, requireFloat(ctx, "weight_decay"));
  const bool nesterov = ctx.attrs.getBool("nesterov");
  const OptimizerScalars s{ctx.inputs[3].as<const float>(),
                           ctx.inputs[4].as<const int64_t>(),
                           ctx.inputs[5].as<const float>()};
  const int64_t n = ctx.inputs[0].numel();
  const std::string prefix = errorPrefix(ctx);
  KernelFn fn;
  if (!visitDType<kSetF32F64>(ctx.inputs[0].dtype, [&](auto tag) {
        using C = typename decltype(tag)::type;
        const C *param = ctx.inputs[0].as<const C>(),
                *grad = ctx.inputs[1].as<const C>(),
                *buf = ctx.inputs[2].as<const C>();
        C *newP = ctx.outputs[0].as<C>(), *newBuf = ctx.outputs[1].as<C>();
        fn = [=]() -> Status {
          const int64_t step = *s.step;
          if (step < 1)
            return badStep(prefix, step);
          SgdCoefs<C> k;
          k.gradScale = C(*s.gradScale);
          k.weightDecay = C(wd);
          k.momentum = C(momentum);
          k.oneMinusDampening = C(1 - dampening);
          k.negLr = C(-double(*s.lr));
          k.hasWeightDecay = wd != 0;
          k.first = step == 1;
          k.useMomentum = momentum != 0;
          k.nesterov = nesterov;
          sgdLoop(param, grad, buf, newP, newBuf, n, k);
          return Status::ok();
        };
      }))
    return unsupportedDType(ctx, ctx.inputs[0].dtype, kSetF32F64);
  return fn;
}

} // namespace

void registerCpuTrainingKernels(KernelRegistry &registry) {
  registry.add("gelu_grad", buildGeluGrad);
  registry.add("silu_grad", [](const KernelContext &ctx) {
    return buildActivationGrad(ctx, SiluGradOp());
  });
  registry.add("softmax_grad", buildSoftmaxGrad<false>);
  registry.add("log_softmax_grad", buildSoftmaxGrad<true>);
  registry.add("layer_norm_grad", buildNormGrad<true, true>);
  registry.add("rms_norm_grad", buildNormGrad<false, true>);
  registry.add("layer_norm_param_grad", buildNormGrad<true, false>);
  registry.add("rms_norm_param_grad", buildNormGrad<false, false>);
  registry.add("cross_entropy_grad", buildCrossEntropyGrad);
  registry.add("dropout", buildDropout);
  registry.add("random", buildRandom);
  registry.add("lr_schedule", buildLrSchedule);
  registry.add("adamw", buildAdamw);
  registry.add("sgd", buildSgd);
}

} // namespace dtcc::runtime
