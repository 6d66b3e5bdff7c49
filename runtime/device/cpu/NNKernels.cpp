//===- NNKernels.cpp - softmax, normalizations, cross-entropy -------------===//
//
// Row-wise neural-network kernels. Softmax subtracts the maximum; statistics
// and sums of exponentials accumulate in double. f16/bf16 compute in float.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/CpuKernelUtils.h"
#include "runtime/device/cpu/IsaDispatch.h"
#include "runtime/device/cpu/VectorMath.h"

#include <algorithm>
#include <memory>

namespace dtcc::runtime {
namespace {

using namespace cpu;

//===----------------------------------------------------------------------===//
// softmax / log_softmax
//===----------------------------------------------------------------------===//

/// Along the last dimension (inner == 1) a row at a time; otherwise a row
/// of `inner` columns at a time with running maxima and sums.
template <typename S, bool Log>
KernelFn makeSoftmax(const S *in, S *out, int64_t outer, int64_t size,
                     int64_t inner) {
  using C = ComputeT<S>;
  // Rows along the last dimension are split over the kernels' threads, each
  // with its own row of scratch.
  auto rowScratch = std::make_shared<std::vector<C>>(
      inner == 1 ? size * cpuThreads() : inner);
  auto maxScratch = std::make_shared<std::vector<C>>(inner > 1 ? inner : 0);
  auto sumScratch =
      std::make_shared<std::vector<double>>(inner > 1 ? inner : 0);
  return [=]() -> Status {
    if (size == 0)
      return Status::ok();
    if (inner == 1) {
      auto rows = [&](int64_t begin, int64_t end, int worker) {
        C *t = rowScratch->data() + worker * size;
        withAvx512([&]() DTCC_INLINE_LAMBDA {
          for (int64_t o = begin; o < end; ++o) {
            const S *x = in + o * size;
            S *y = out + o * size;
            const C m = rowMax(x, size);
            const double sum = expShifted(x, m, t, size);
            if constexpr (Log) {
              // (x - max) - log(sum) keeps the precision that x - lse loses
              // when |max| is large.
              const C logSum = C(std::log(sum));
              for (int64_t d = 0; d < size; ++d)
                y[d] = Elem<S>::store((Elem<S>::load(x[d]) - m) - logSum);
            } else {
              const C inv = C(1.0 / sum);
              for (int64_t d = 0; d < size; ++d)
                y[d] = Elem<S>::store(t[d] * inv);
            }
          }
        });
      };
      parallelFor(outer, parallelGrain(size), rows);
      return Status::ok();
    }
    C *t = rowScratch->data();
    for (int64_t o = 0; o < outer; ++o) {
      const S *x = in + o * size * inner;
      S *y = out + o * size * inner;
      C *mx = maxScratch->data();
      double *sum = sumScratch->data();
      for (int64_t i = 0; i < inner; ++i) {
        mx[i] = Elem<S>::load(x[i]);
        sum[i] = 0;
      }
      for (int64_t d = 1; d < size; ++d)
        for (int64_t i = 0; i < inner; ++i) {
          C v = Elem<S>::load(x[d * inner + i]);
          mx[i] = (v > mx[i] || isNan(v)) ? v : mx[i];
        }
      for (int64_t d = 0; d < size; ++d) {
        const S *xr = x + d * inner;
        for (int64_t i = 0; i < inner; ++i)
          t[i] = Elem<S>::load(xr[i]) - mx[i];
        vectorMath(MathFn::kExp, t, inner);
        for (int64_t i = 0; i < inner; ++i)
          sum[i] += double(t[i]);
      }
      if constexpr (Log) {
        for (int64_t i = 0; i < inner; ++i)
          sum[i] = std::log(sum[i]);
        for (int64_t d = 0; d < size; ++d)
          for (int64_t i = 0; i < inner; ++i)
            y[d * inner + i] = Elem<S>::store(
                (Elem<S>::load(x[d * inner + i]) - mx[i]) - C(sum[i]));
      } else {
        for (int64_t i = 0; i < inner; ++i)
          sum[i] = 1.0 / sum[i];
        for (int64_t d = 0; d < size; ++d) {
          const S *xr = x + d * inner;
          for (int64_t i = 0; i < inner; ++i)
            t[i] = Elem<S>::load(xr[i]) - mx[i];
          vectorMath(MathFn::kExp, t, inner);
          for (int64_t i = 0; i < inner; ++i)
            y[d * inner + i] = Elem<S>::store(t[i] * C(sum[i]));
        }
      }
    }
    return Status::ok();
  };
}

template <bool Log> StatusOr<KernelFn> buildSoftmax(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView &in = ctx.inputs[0], &out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, in.dtype, "output 0"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, in.shape, "output 0"));
  DTCC_ASSIGN_OR_RETURN(int64_t dim, getDimAttr(ctx, "dim", in.rank()));
  const int64_t outer = product(in.shape, 0, dim), size = in.shape[dim],
                inner = product(in.shape, dim + 1);
  KernelFn fn;
  if (!visitDType<kSetFloats>(in.dtype, [&](auto tag) {
        using S = typename decltype(tag)::type;
        fn = makeSoftmax<S, Log>(in.as<const S>(), out.as<S>(), outer, size,
                                 inner);
      }))
    return unsupportedDType(ctx, in.dtype, kSetFloats);
  return fn;
}

//===----------------------------------------------------------------------===//
// layer_norm / rms_norm
//===----------------------------------------------------------------------===//

/// Writes a per-row statistic into an output of any float dtype (once per
/// row, so a switch is cheap).
inline void storeStat(DType dtype, void *base, int64_t i, double v) {
  switch (dtype) {
  case DType::kF64:
    static_cast<double *>(base)[i] = v;
    break;
  case DType::kF16:
    static_cast<uint16_t *>(base)[i] = storeHalf(float(v));
    break;
  case DType::kBF16:
    static_cast<uint16_t *>(base)[i] = floatToBf16(float(v));
    break;
  default:
    static_cast<float *>(base)[i] = float(v);
    break;
  }
}

struct NormPlan {
  int64_t rows = 0, cols = 0;
  double eps = 0;
  DType statType = DType::kF32;
};

/// Checks the common part of layer_norm and rms_norm: x, scale, [bias] and
/// y plus `stats` per-row outputs.
StatusOr<NormPlan> planNorm(const KernelContext &ctx, size_t minInputs,
                            size_t maxInputs, size_t outputs) {
  if (ctx.inputs.size() < minInputs || ctx.inputs.size() > maxInputs ||
      ctx.outputs.size() != outputs)
    return ctx.error(
        "expected ", minInputs,
        minInputs == maxInputs ? "" : " or " + std::to_string(maxInputs),
        " inputs and ", outputs, " outputs, got ", ctx.inputs.size(), " and ",
        ctx.outputs.size());
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView &x = ctx.inputs[0];
  DTCC_ASSIGN_OR_RETURN(int64_t axis, getDimAttr(ctx, "axis", x.rank()));
  StatusOr<double> eps = ctx.attrs.getFloat("epsilon");
  if (!eps.isOk())
    return ctx.error(eps.status().message());
  std::vector<int64_t> normShape(x.shape.begin() + axis, x.shape.end());
  for (size_t i = 1; i < ctx.inputs.size(); ++i) {
    std::string what = "input " + std::to_string(i);
    DTCC_RETURN_IF_ERROR(checkDType(ctx, ctx.inputs[i], x.dtype, what));
    DTCC_RETURN_IF_ERROR(checkShape(ctx, ctx.inputs[i], normShape, what));
  }
  DTCC_RETURN_IF_ERROR(checkDType(ctx, ctx.outputs[0], x.dtype, "output 0"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, ctx.outputs[0], x.shape, "output 0"));
  NormPlan plan;
  plan.rows = product(x.shape, 0, axis);
  plan.cols = product(x.shape, axis);
  plan.eps = *eps;
  plan.statType = ctx.outputs[1].dtype;
  for (size_t i = 1; i < outputs; ++i) {
    const TensorView &s = ctx.outputs[i];
    std::string what = "output " + std::to_string(i);
    if (!isFloatDType(s.dtype))
      return unsupportedDType(ctx, s.dtype, kSetFloats, what + " element type");
    DTCC_RETURN_IF_ERROR(checkDType(ctx, s, plan.statType, what));
    if (s.numel() != plan.rows)
      return ctx.error("expected ", what, " with ", plan.rows,
                       " elements (the product of x's dimensions before axis), "
                       "got ",
                       s.typeString());
  }
  return plan;
}

/// Calls row(r) for every row of a norm: rows are independent, so they
/// split over the kernels' threads, each thread's rows in an AVX-512 clone
/// where the CPU has it. `row` is a lambda marked DTCC_INLINE_LAMBDA.
template <typename F> void forEachNormRow(const NormPlan &p, const F &row) {
  parallelFor(
      p.rows, parallelGrain(p.cols),
      [&](int64_t begin, int64_t end, int) {
        withAvx512([&]() DTCC_INLINE_LAMBDA {
          for (int64_t r = begin; r < end; ++r)
            row(r);
        });
      });
}

template <typename S>
KernelFn makeLayerNorm(const NormPlan &p, const S *x, const S *scale,
                       const S *bias, S *y, void *mean, void *rstd) {
  using C = ComputeT<S>;
  return [=]() -> Status {
    forEachNormRow(p, [&](int64_t r) DTCC_INLINE_LAMBDA {
      const S *xr = x + r * p.cols;
      S *yr = y + r * p.cols;
      double mu = p.cols ? rowSum(xr, p.cols,
                                  [](auto v) DTCC_INLINE_LAMBDA { return v; }) /
                               double(p.cols)
                         : 0.0;
      const C mc = C(mu);
      double var = p.cols ? rowSum(xr, p.cols,
                                   [mc](auto v) DTCC_INLINE_LAMBDA {
                                     auto d = v - mc;
                                     return d * d;
                                   }) /
                                double(p.cols)
                          : 0.0;
      double rs = 1.0 / std::sqrt(var + p.eps);
      storeStat(p.statType, mean, r, mu);
      storeStat(p.statType, rstd, r, rs);
      const C m = C(mu), s = C(rs);
      if (bias) {
        for (int64_t c = 0; c < p.cols; ++c)
          yr[c] = Elem<S>::store((Elem<S>::load(xr[c]) - m) * s *
                                     Elem<S>::load(scale[c]) +
                                 Elem<S>::load(bias[c]));
      } else {
        for (int64_t c = 0; c < p.cols; ++c)
          yr[c] = Elem<S>::store((Elem<S>::load(xr[c]) - m) * s *
                                 Elem<S>::load(scale[c]));
      }
    });
    return Status::ok();
  };
}

StatusOr<KernelFn> buildLayerNorm(const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(NormPlan plan, planNorm(ctx, 2, 3, 3));
  const TensorView &x = ctx.inputs[0];
  KernelFn fn;
  if (!visitDType<kSetFloats>(x.dtype, [&](auto tag) {
        using S = typename decltype(tag)::type;
        const S *bias =
            ctx.inputs.size() == 3 ? ctx.inputs[2].as<const S>() : nullptr;
        fn = makeLayerNorm<S>(
            plan, x.as<const S>(), ctx.inputs[1].as<const S>(), bias,
            ctx.outputs[0].as<S>(), ctx.outputs[1].data, ctx.outputs[2].data);
      }))
    return unsupportedDType(ctx, x.dtype, kSetFloats);
  return fn;
}

template <typename S>
KernelFn makeRmsNorm(const NormPlan &p, const S *x, const S *scale, S *y,
                     void *rstd) {
  using C = ComputeT<S>;
  return [=]() -> Status {
    forEachNormRow(p, [&](int64_t r) DTCC_INLINE_LAMBDA {
      const S *xr = x + r * p.cols;
      S *yr = y + r * p.cols;
      double ms =
          p.cols ? rowSum(xr, p.cols,
                          [](auto v) DTCC_INLINE_LAMBDA { return v * v; }) /
                       double(p.cols)
                 : 0.0;
      double rs = 1.0 / std::sqrt(ms + p.eps);
      storeStat(p.statType, rstd, r, rs);
      const C s = C(rs);
      for (int64_t c = 0; c < p.cols; ++c)
        yr[c] =
            Elem<S>::store(Elem<S>::load(xr[c]) * s * Elem<S>::load(scale[c]));
    });
    return Status::ok();
  };
}

StatusOr<KernelFn> buildRmsNorm(const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(NormPlan plan, planNorm(ctx, 2, 2, 2));
  const TensorView &x = ctx.inputs[0];
  KernelFn fn;
  if (!visitDType<kSetFloats>(x.dtype, [&](auto tag) {
        using S = typename decltype(tag)::type;
        fn = makeRmsNorm<S>(plan, x.as<const S>(), ctx.inputs[1].as<const S>(),
                            ctx.outputs[0].as<S>(), ctx.outputs[1].data);
      }))
    return unsupportedDType(ctx, x.dtype, kSetFloats);
  return fn;
}

//===----------------------------------------------------------------------===//
// cross_entropy
//===----------------------------------------------------------------------===//

/// The loss is of the logits' type S, or O = float for half logits (the
/// loss of their f32 cast, computed as for it).
template <typename S, typename I, typename O>
KernelFn makeCrossEntropy(const S *logits, const I *labels, O *loss, int64_t n,
                          int64_t c, int64_t ignore, std::string prefix) {
  using C = ComputeT<S>;
  auto scratch = std::make_shared<std::vector<C>>(c);
  return [=]() -> Status {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t label = int64_t(labels[i]);
      if (label == ignore) {
        loss[i] = Elem<O>::store(C(0));
        continue;
      }
      if (label < 0 || label >= c)
        return outOfRange(prefix, "label ", label, " of sample ", i,
                          " is outside [0, ", c, ") and is not ignore_index (",
                          ignore, ")");
      const S *x = logits + i * c;
      const C m = rowMax(x, c);
      double sum = expShifted(x, m, scratch->data(), c);
      // lse - x[label] = (max - x[label]) + log(sum), exact for large max.
      double diff = double(m) - double(Elem<S>::load(x[label]));
      loss[i] = Elem<O>::store(C(diff + std::log(sum)));
    }
    return Status::ok();
  };
}

StatusOr<KernelFn> buildCrossEntropy(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView &logits = ctx.inputs[0], &labels = ctx.inputs[1],
                   &out = ctx.outputs[0];
  if (logits.rank() != 2)
    return ctx.error("expected logits of rank 2, got ", logits.typeString());
  const int64_t n = logits.shape[0], c = logits.shape[1];
  DTCC_RETURN_IF_ERROR(checkShape(ctx, labels, {n}, "input 1"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, {n}, "output 0"));
  const bool widened = isF32OfHalf(logits.dtype, out.dtype);
  if (!widened)
    DTCC_RETURN_IF_ERROR(checkDType(ctx, out, logits.dtype, "output 0"));
  const int64_t ignore = ctx.attrs.getInt("ignore_index", -100);
  KernelFn fn;
  bool indexOk = false;
  bool typeOk = visitDType<kSetFloats>(logits.dtype, [&](auto stag) {
    using S = typename decltype(stag)::type;
    indexOk = visitDType<kSetInts>(labels.dtype, [&](auto itag) {
      using I = typename decltype(itag)::type;
      if constexpr (std::is_same_v<I, int32_t> || std::is_same_v<I, int64_t>) {
        if (widened)
          fn = makeCrossEntropy<S, I, float>(
              logits.as<const S>(), labels.as<const I>(), out.as<float>(), n,
              c, ignore, errorPrefix(ctx));
        else
          fn = makeCrossEntropy<S, I, S>(logits.as<const S>(),
                                         labels.as<const I>(), out.as<S>(), n,
                                         c, ignore, errorPrefix(ctx));
      }
    });
  });
  if (!typeOk)
    return unsupportedDType(ctx, logits.dtype, kSetFloats);
  if (!indexOk || !fn)
    return ctx.error("expected i32 or i64 labels, got ",
                     dtypeName(labels.dtype));
  return fn;
}

} // namespace

void registerCpuNNKernels(KernelRegistry &registry) {
  registry.add("softmax", buildSoftmax<false>);
  registry.add("log_softmax", buildSoftmax<true>);
  registry.add("layer_norm", buildLayerNorm);
  registry.add("rms_norm", buildRmsNorm);
  registry.add("cross_entropy", buildCrossEntropy);
}

} // namespace dtcc::runtime
