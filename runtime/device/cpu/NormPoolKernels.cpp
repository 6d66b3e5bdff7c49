//===- NormPoolKernels.cpp - batch/group norm and pooling on the CPU ------===//
//
// The kernels of GraphNormPoolOps.td, and the plans (NormPoolPlans.h) that
// every backend's factories check instructions with. Statistics and the
// sums of the gradients accumulate in double; f16/bf16 compute in float.
// Pooling walks each (sample, channel) plane window by window.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/CpuKernelUtils.h"
#include "runtime/device/cpu/NormPoolPlans.h"
#include "runtime/device/cpu/ThreadPool.h"

#include <algorithm>
#include <memory>

namespace dtcc::runtime {
namespace cpu {

//===----------------------------------------------------------------------===//
// Plans
//===----------------------------------------------------------------------===//

namespace {

StatusOr<double> floatAttr(const KernelContext &ctx, const std::string &name) {
  StatusOr<double> v = ctx.attrs.getFloat(name);
  if (!v.isOk())
    return ctx.error(v.status().message());
  return v;
}

StatusOr<int64_t> intAttr(const KernelContext &ctx, const std::string &name) {
  StatusOr<int64_t> v = ctx.attrs.getInt(name);
  if (!v.isOk())
    return ctx.error(v.status().message());
  return v;
}

/// x: a float [N, C, d...] tensor; fills the plan's sizes and dtype.
Status planChannels(const KernelContext &ctx, const TensorView &x,
                    const std::string &what, ChannelPlan &p) {
  if (x.rank() < 2)
    return ctx.error("expected ", what, " of rank >= 2 ([N, C, ...]), got ",
                     x.typeString());
  if (!isFloatDType(x.dtype))
    return unsupportedDType(ctx, x.dtype, kSetFloats);
  p.batch = x.shape[0];
  p.channels = x.shape[1];
  p.spatial = product(x.shape, 2);
  p.dtype = x.dtype;
  return Status::ok();
}

/// `view` has `shape` and the plan's dtype.
Status expectLike(const KernelContext &ctx, const ChannelPlan &p,
                  const TensorView &view, const std::vector<int64_t> &shape,
                  const std::string &what) {
  DTCC_RETURN_IF_ERROR(checkDType(ctx, view, p.dtype, what));
  return checkShape(ctx, view, shape, what);
}

Status planEpsilon(const KernelContext &ctx, ChannelPlan &p) {
  DTCC_ASSIGN_OR_RETURN(p.epsilon, floatAttr(ctx, "epsilon"));
  if (!(p.epsilon >= 0))
    return ctx.error("expected epsilon >= 0, got ", p.epsilon);
  return Status::ok();
}

Status planGroups(const KernelContext &ctx, ChannelPlan &p) {
  DTCC_ASSIGN_OR_RETURN(p.perGroup, intAttr(ctx, "channels_per_group"));
  if (p.perGroup < 1 || p.channels % p.perGroup != 0)
    return ctx.error("expected channels_per_group >= 1 dividing ", p.channels,
                     " channels, got ", p.perGroup);
  return Status::ok();
}

} // namespace

StatusOr<ChannelPlan> planBatchNormStats(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(expectArity(ctx, 2, 1));
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  ChannelPlan p;
  DTCC_RETURN_IF_ERROR(planChannels(ctx, ctx.inputs[0], "x", p));
  DTCC_RETURN_IF_ERROR(expectLike(ctx, p, ctx.inputs[1], {p.channels}, "shift"));
  DTCC_RETURN_IF_ERROR(
      expectLike(ctx, p, ctx.outputs[0], {2, p.channels}, "output 0"));
  return p;
}

StatusOr<ChannelPlan> planBatchNorm(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(expectArity(ctx, 5, 1));
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  ChannelPlan p;
  const TensorView &x = ctx.inputs[0];
  DTCC_RETURN_IF_ERROR(planChannels(ctx, x, "x", p));
  const char *names[] = {"scale", "bias", "mean", "var"};
  for (int i = 0; i < 4; ++i)
    DTCC_RETURN_IF_ERROR(
        expectLike(ctx, p, ctx.inputs[i + 1], {p.channels}, names[i]));
  DTCC_RETURN_IF_ERROR(expectLike(ctx, p, ctx.outputs[0], x.shape, "output 0"));
  DTCC_RETURN_IF_ERROR(planEpsilon(ctx, p));
  return p;
}

StatusOr<ChannelPlan> planBatchNormUpdate(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(expectArity(ctx, 4, 2));
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView &first = ctx.inputs[0];
  if (first.rank() != 1)
    return ctx.error("expected rank-1 statistics, got ", first.typeString());
  if (!isFloatDType(first.dtype))
    return unsupportedDType(ctx, first.dtype, kSetFloats);
  ChannelPlan p;
  p.channels = first.shape[0];
  p.dtype = first.dtype;
  for (size_t i = 1; i < 4; ++i)
    DTCC_RETURN_IF_ERROR(expectLike(ctx, p, ctx.inputs[i], first.shape,
                                    "input " + std::to_string(i)));
  for (size_t i = 0; i < 2; ++i)
    DTCC_RETURN_IF_ERROR(expectLike(ctx, p, ctx.outputs[i], first.shape,
                                    "output " + std::to_string(i)));
  DTCC_ASSIGN_OR_RETURN(p.momentum, floatAttr(ctx, "momentum"));
  DTCC_ASSIGN_OR_RETURN(p.varScale, floatAttr(ctx, "var_scale"));
  if (!(p.momentum >= 0 && p.momentum <= 1))
    return ctx.error("expected 0 <= momentum <= 1, got ", p.momentum);
  if (!(p.varScale > 0))
    return ctx.error("expected var_scale > 0, got ", p.varScale);
  return p;
}

StatusOr<ChannelPlan> planBatchNormGradStats(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(expectArity(ctx, 3, 1));
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  ChannelPlan p;
  const TensorView &x = ctx.inputs[0];
  DTCC_RETURN_IF_ERROR(planChannels(ctx, x, "x", p));
  DTCC_RETURN_IF_ERROR(expectLike(ctx, p, ctx.inputs[1], {p.channels}, "mean"));
  DTCC_RETURN_IF_ERROR(expectLike(ctx, p, ctx.inputs[2], x.shape, "dy"));
  DTCC_RETURN_IF_ERROR(
      expectLike(ctx, p, ctx.outputs[0], {2, p.channels}, "output 0"));
  return p;
}

StatusOr<ChannelPlan> planBatchNormGrad(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(expectArity(ctx, 6, 1));
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  ChannelPlan p;
  const TensorView &x = ctx.inputs[0];
  DTCC_RETURN_IF_ERROR(planChannels(ctx, x, "x", p));
  DTCC_RETURN_IF_ERROR(expectLike(ctx, p, ctx.inputs[1], x.shape, "dy"));
  const char *names[] = {"scale", "mean", "var"};
  for (int i = 0; i < 3; ++i)
    DTCC_RETURN_IF_ERROR(
        expectLike(ctx, p, ctx.inputs[i + 2], {p.channels}, names[i]));
  DTCC_RETURN_IF_ERROR(
      expectLike(ctx, p, ctx.inputs[5], {2, p.channels}, "stats"));
  DTCC_RETURN_IF_ERROR(expectLike(ctx, p, ctx.outputs[0], x.shape, "output 0"));
  DTCC_RETURN_IF_ERROR(planEpsilon(ctx, p));
  DTCC_ASSIGN_OR_RETURN(p.count, intAttr(ctx, "count"));
  if (p.count < 1)
    return ctx.error("expected count >= 1, got ", p.count);
  return p;
}

StatusOr<ChannelPlan> planGroupNorm(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(expectArity(ctx, 3, 3));
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  ChannelPlan p;
  const TensorView &x = ctx.inputs[0];
  DTCC_RETURN_IF_ERROR(planChannels(ctx, x, "x", p));
  DTCC_RETURN_IF_ERROR(planGroups(ctx, p));
  DTCC_RETURN_IF_ERROR(planEpsilon(ctx, p));
  DTCC_RETURN_IF_ERROR(expectLike(ctx, p, ctx.inputs[1], {p.channels}, "scale"));
  DTCC_RETURN_IF_ERROR(expectLike(ctx, p, ctx.inputs[2], {p.channels}, "bias"));
  DTCC_RETURN_IF_ERROR(expectLike(ctx, p, ctx.outputs[0], x.shape, "output 0"));
  for (size_t i = 1; i < 3; ++i)
    DTCC_RETURN_IF_ERROR(expectLike(ctx, p, ctx.outputs[i],
                                    {p.batch, p.groups()},
                                    "output " + std::to_string(i)));
  return p;
}

StatusOr<ChannelPlan> planGroupNormGrad(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(expectArity(ctx, 5, 3));
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  ChannelPlan p;
  const TensorView &x = ctx.inputs[0];
  DTCC_RETURN_IF_ERROR(planChannels(ctx, x, "x", p));
  DTCC_RETURN_IF_ERROR(planGroups(ctx, p));
  DTCC_RETURN_IF_ERROR(expectLike(ctx, p, ctx.inputs[1], {p.channels}, "scale"));
  DTCC_RETURN_IF_ERROR(
      expectLike(ctx, p, ctx.inputs[2], {p.batch, p.groups()}, "mean"));
  DTCC_RETURN_IF_ERROR(
      expectLike(ctx, p, ctx.inputs[3], {p.batch, p.groups()}, "rstd"));
  DTCC_RETURN_IF_ERROR(expectLike(ctx, p, ctx.inputs[4], x.shape, "dy"));
  DTCC_RETURN_IF_ERROR(expectLike(ctx, p, ctx.outputs[0], x.shape, "output 0"));
  for (size_t i = 1; i < 3; ++i)
    DTCC_RETURN_IF_ERROR(expectLike(ctx, p, ctx.outputs[i], {p.channels},
                                    "output " + std::to_string(i)));
  return p;
}

int64_t poolOutputSize(int64_t size, int64_t kernel, int64_t stride,
                       int64_t dilation, int64_t low, int64_t high,
                       bool ceilMode) {
  int64_t span = size + low + high - (kernel - 1) * dilation - 1;
  if (span < 0)
    return 0;
  int64_t out = (ceilMode ? (span + stride - 1) / stride : span / stride) + 1;
  if (ceilMode && (out - 1) * stride >= size + low)
    --out;
  return out;
}

int64_t PoolPlan::divisor(int64_t o0, int64_t o1, int64_t o2) const {
  const int64_t o[kMaxPoolDims] = {o0, o1, o2};
  int64_t count = 1;
  for (int d = 0; d < kMaxPoolDims; ++d) {
    // Taps on the input, or on the input with its explicit padding.
    const int64_t lo = countIncludePad ? -low[d] : 0;
    const int64_t hi = countIncludePad ? in[d] + high[d] : in[d];
    const int64_t start = o[d] * stride[d] - low[d];
    int64_t taps = 0;
    for (int64_t k = 0; k < kernel[d]; ++k) {
      const int64_t i = start + k * dilation[d];
      taps += i >= lo && i < hi;
    }
    count *= taps;
  }
  return count;
}

namespace {

/// Planes and spatial sizes of `in` and `out` ([N, C, d...], up to three
/// spatial dimensions) into `p`, padded at the front.
Status planPlanes(const KernelContext &ctx, const TensorView &in,
                  const TensorView &out, const std::string &inWhat,
                  PoolPlan &p) {
  if (in.rank() < 3 || in.rank() > 2 + kMaxPoolDims)
    return ctx.error("expected ", inWhat, " of rank 3 to ", 2 + kMaxPoolDims,
                     " ([N, C, d...]), got ", in.typeString());
  if (out.rank() != in.rank() || out.shape[0] != in.shape[0] ||
      out.shape[1] != in.shape[1])
    return ctx.error("expected ", inWhat, " and the pooled tensor to share "
                     "rank and [N, C], got ",
                     in.typeString(), " and ", out.typeString());
  p.planes = in.shape[0] * in.shape[1];
  const int64_t spatial = in.rank() - 2, offset = kMaxPoolDims - spatial;
  for (int64_t d = 0; d < spatial; ++d) {
    p.in[offset + d] = in.shape[d + 2];
    p.out[offset + d] = out.shape[d + 2];
  }
  return Status::ok();
}

/// The window attributes; `x` the pooled input, `y` the pooled output.
Status planWindow(const KernelContext &ctx, const TensorView &x,
                  const TensorView &y, PoolPlan &p) {
  const size_t spatial = x.rank() - 2;
  const int offset = kMaxPoolDims - int(spatial);
  const char *names[] = {"kernel", "strides", "dilations", "pad_low",
                         "pad_high"};
  int64_t *fields[] = {p.kernel, p.stride, p.dilation, p.low, p.high};
  for (int a = 0; a < 5; ++a) {
    DTCC_ASSIGN_OR_RETURN(std::vector<int64_t> v,
                          getIntsAttr(ctx, names[a], spatial));
    const int64_t least = a >= 3 ? 0 : 1;
    for (size_t d = 0; d < spatial; ++d) {
      if (v[d] < least)
        return ctx.error("expected ", names[a], " entries >= ", least, ", got ",
                         shapeString(v));
      fields[a][offset + d] = v[d];
    }
  }
  const bool ceilMode = ctx.attrs.getBool("ceil_mode");
  p.countIncludePad = ctx.attrs.getBool("count_include_pad");
  std::vector<int64_t> expected(y.shape.begin(), y.shape.begin() + 2);
  for (size_t d = 0; d < spatial; ++d) {
    const int i = offset + int(d);
    expected.push_back(poolOutputSize(p.in[i], p.kernel[i], p.stride[i],
                                      p.dilation[i], p.low[i], p.high[i],
                                      ceilMode));
  }
  if (y.shape != expected)
    return ctx.error("expected the pooled tensor of shape ",
                     shapeString(expected), " for input ",
                     shapeString(x.shape), ", got ", shapeString(y.shape));
  return Status::ok();
}

} // namespace

StatusOr<PoolPlan> planMaxPool(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(expectArity(ctx, 1, 2));
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView &x = ctx.inputs[0], &y = ctx.outputs[0];
  PoolPlan p;
  DTCC_RETURN_IF_ERROR(planPlanes(ctx, x, y, "x", p));
  DTCC_RETURN_IF_ERROR(planWindow(ctx, x, y, p));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, y, x.dtype, "output 0"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, ctx.outputs[1], DType::kI64, "output 1"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, ctx.outputs[1], y.shape, "output 1"));
  p.dtype = x.dtype;
  return p;
}

StatusOr<PoolPlan> planAvgPool(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(expectArity(ctx, 1, 1));
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView &x = ctx.inputs[0], &y = ctx.outputs[0];
  PoolPlan p;
  DTCC_RETURN_IF_ERROR(planPlanes(ctx, x, y, "x", p));
  DTCC_RETURN_IF_ERROR(planWindow(ctx, x, y, p));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, y, x.dtype, "output 0"));
  if (!isFloatDType(x.dtype))
    return unsupportedDType(ctx, x.dtype, kSetFloats);
  p.dtype = x.dtype;
  return p;
}

StatusOr<PoolPlan> planMaxPoolGrad(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(expectArity(ctx, 2, 1));
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView &dy = ctx.inputs[0], &dx = ctx.outputs[0];
  PoolPlan p;
  DTCC_RETURN_IF_ERROR(planPlanes(ctx, dx, dy, "output 0", p));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, ctx.inputs[1], DType::kI64, "indices"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, ctx.inputs[1], dy.shape, "indices"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, dx, dy.dtype, "output 0"));
  if (!isFloatDType(dy.dtype))
    return unsupportedDType(ctx, dy.dtype, kSetFloats);
  p.dtype = dy.dtype;
  return p;
}

StatusOr<PoolPlan> planAvgPoolGrad(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(expectArity(ctx, 1, 1));
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView &dy = ctx.inputs[0], &dx = ctx.outputs[0];
  PoolPlan p;
  DTCC_RETURN_IF_ERROR(planPlanes(ctx, dx, dy, "output 0", p));
  DTCC_RETURN_IF_ERROR(planWindow(ctx, dx, dy, p));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, dx, dy.dtype, "output 0"));
  if (!isFloatDType(dy.dtype))
    return unsupportedDType(ctx, dy.dtype, kSetFloats);
  p.dtype = dy.dtype;
  return p;
}

} // namespace cpu

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

namespace {

using namespace cpu;

template <typename S> double loadD(const S &v) {
  return double(Elem<S>::load(v));
}

/// s1 += sum of terms(i).first, s2 += sum of terms(i).second over i in
/// [0, n), in four double lanes (element i in lane i % 4, the tail in lane
/// 0), then the lanes pairwise.
template <typename Terms>
inline void blockMoments(int64_t n, Terms terms, double &s1, double &s2) {
  double a[4] = {0, 0, 0, 0}, b[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int l = 0; l < 4; ++l) {
      const auto [u, v] = terms(i + l);
      a[l] += u;
      b[l] += v;
    }
  for (; i < n; ++i) {
    const auto [u, v] = terms(i);
    a[0] += u;
    b[0] += v;
  }
  s1 += (a[0] + a[1]) + (a[2] + a[3]);
  s2 += (b[0] + b[1]) + (b[2] + b[3]);
}

/// Element i's terms of the moments about k: (x - k, (x - k)^2).
template <typename S>
inline std::pair<double, double> shiftedTerms(const S *x, int64_t i, double k) {
  const double d = loadD(x[i]) - k;
  return {d, d * d};
}

/// Element i's terms of a norm's gradient sums about k: (dy, dy (x - k)).
template <typename S>
inline std::pair<double, double> gradTerms(const S *x, const S *dy, int64_t i,
                                           double k) {
  const double g = loadD(dy[i]);
  return {g, g * (loadD(x[i]) - k)};
}

/// s1 += sum(x - k), s2 += sum((x - k)^2) over x[0..n).
template <typename S>
inline void shiftedMoments(const S *x, int64_t n, double k, double &s1,
                           double &s2) {
  blockMoments(
      n, [&](int64_t i) { return shiftedTerms(x, i, k); }, s1, s2);
}

/// s1 += sum(dy), s2 += sum(dy * (x - k)) over [0..n).
template <typename S>
inline void gradMoments(const S *x, const S *dy, int64_t n, double k,
                        double &s1, double &s2) {
  blockMoments(
      n, [&](int64_t i) { return gradTerms(x, dy, i, k); }, s1, s2);
}

//===-- batch norm --------------------------------------------------------===//

// The batch-norm kernels split their work over the CPU threads without
// changing a result: the statistics by channel (each channel's sums run
// over the batch in order on one thread), the elementwise passes by
// (sample, channel) plane.

/// Calls `fn(n, c)` for every (sample, channel) plane of `spatial`
/// elements, the planes split over the threads.
template <typename F> void forPlanes(const ChannelPlan &p, F fn) {
  cpu::parallelForEach(p.batch * p.channels, p.spatial, [&](int64_t i, int) {
    fn(i / p.channels, i % p.channels);
  });
}

/// Inputs of one element per (sample, channel) plane ([N, C], batch norm of
/// a linear layer's output): `fn(n, c0, c1)` for every row n and the
/// channels [c0, c1) of one thread's block, rows in order. The channel
/// statistics see the samples in the order forPlanes gives them (a plane's
/// block sums of one element add that element), so their sums are the same
/// bits, read along rows instead of down columns.
template <typename F> void forRowBlocks(const ChannelPlan &p, F fn) {
  cpu::parallelFor(p.channels, cpu::parallelGrain(p.batch),
                   [&](int64_t c0, int64_t c1, int) {
                     for (int64_t n = 0; n < p.batch; ++n)
                       fn(n, c0, c1);
                   });
}

/// out[c] and out[C + c]: the sums over channel c's elements of
/// terms(e, k[c]).first and .second, e an element's offset and k[c] =
/// shift[c] (in double). Planes of several elements go through
/// blockMoments, a channel's planes in sample order on one thread; planes
/// of one element (forRowBlocks) add each term as blockMoments does its
/// one element: the same sums either way.
template <typename S, typename Terms>
KernelFn makeChannelSums(const ChannelPlan p, const S *shift, S *out,
                         Terms terms) {
  auto acc = std::make_shared<std::vector<double>>(3 * p.channels);
  return [=]() -> Status {
    double *s1 = acc->data(), *s2 = s1 + p.channels, *k = s2 + p.channels;
    std::fill(s1, s1 + 2 * p.channels, 0.0);
    for (int64_t c = 0; c < p.channels; ++c)
      k[c] = loadD(shift[c]);
    if (p.spatial == 1) {
      forRowBlocks(p, [&](int64_t n, int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) {
          const auto [u, v] = terms(n * p.channels + c, k[c]);
          s1[c] += u;
          s2[c] += v;
        }
      });
    } else {
      cpu::parallelForEach(
          p.channels, p.batch * p.spatial, [&](int64_t c, int) {
            for (int64_t n = 0; n < p.batch; ++n) {
              const int64_t base = (n * p.channels + c) * p.spatial;
              blockMoments(
                  p.spatial, [&](int64_t i) { return terms(base + i, k[c]); },
                  s1[c], s2[c]);
            }
          });
    }
    for (int64_t c = 0; c < p.channels; ++c) {
      out[c] = Elem<S>::store(ComputeT<S>(s1[c]));
      out[p.channels + c] = Elem<S>::store(ComputeT<S>(s2[c]));
    }
    return Status::ok();
  };
}

/// sum(x - shift) and sum((x - shift)^2) per channel.
template <typename S>
KernelFn makeBatchNormStats(const ChannelPlan p, const S *x, const S *shift,
                            S *out) {
  return makeChannelSums(p, shift, out, [x](int64_t e, double k) {
    return shiftedTerms(x, e, k);
  });
}

/// y = (x - mean[c]) * a[c] + bias[c] with a = scale / sqrt(var + eps).
/// (PyTorch folds the mean into the bias, x * a + (bias - mean * a), which
/// cancels when |mean| is large against the spread.)
template <typename S>
KernelFn makeBatchNorm(const ChannelPlan p, const S *x, const S *scale,
                       const S *bias, const S *mean, const S *var, S *y) {
  using C = ComputeT<S>;
  auto coef = std::make_shared<std::vector<C>>(3 * p.channels);
  return [=]() -> Status {
    C *a = coef->data(), *b = a + p.channels, *m = b + p.channels;
    for (int64_t c = 0; c < p.channels; ++c) {
      const double r = 1.0 / std::sqrt(loadD(var[c]) + p.epsilon);
      a[c] = C(loadD(scale[c]) * r);
      b[c] = Elem<S>::load(bias[c]);
      m[c] = Elem<S>::load(mean[c]);
    }
    if (p.spatial == 1) {
      forRowBlocks(p, [&](int64_t n, int64_t c0, int64_t c1) {
        const S *xr = x + n * p.channels;
        S *yr = y + n * p.channels;
        for (int64_t c = c0; c < c1; ++c)
          yr[c] = Elem<S>::store((Elem<S>::load(xr[c]) - m[c]) * a[c] + b[c]);
      });
      return Status::ok();
    }
    forPlanes(p, [&](int64_t n, int64_t c) {
      const int64_t base = (n * p.channels + c) * p.spatial;
      const S *xr = x + base;
      S *yr = y + base;
      const C ac = a[c], bc = b[c], mc = m[c];
      for (int64_t i = 0; i < p.spatial; ++i)
        yr[i] = Elem<S>::store((Elem<S>::load(xr[i]) - mc) * ac + bc);
    });
    return Status::ok();
  };
}

template <typename S>
KernelFn makeBatchNormUpdate(const ChannelPlan p, const S *rm, const S *rv,
                             const S *mean, const S *var, S *newMean,
                             S *newVar) {
  using C = ComputeT<S>;
  return [=]() -> Status {
    const double m = p.momentum, keep = 1 - p.momentum;
    for (int64_t c = 0; c < p.channels; ++c) {
      const double nm = loadD(rm[c]) * m + loadD(mean[c]) * keep;
      const double nv = loadD(rv[c]) * m + loadD(var[c]) * p.varScale * keep;
      newMean[c] = Elem<S>::store(C(nm));
      newVar[c] = Elem<S>::store(C(nv));
    }
    return Status::ok();
  };
}

/// sum(dy) and sum(dy * (x - mean)) per channel.
template <typename S>
KernelFn makeBatchNormGradStats(const ChannelPlan p, const S *x, const S *mean,
                                const S *dy, S *out) {
  return makeChannelSums(p, mean, out, [x, dy](int64_t e, double k) {
    return gradTerms(x, dy, e, k);
  });
}

/// dx = (dy - k1 - (x - mean) * k2) * a with k1 = sum(dy) / count,
/// k2 = r^2 sum(dy (x - mean)) / count, a = scale * r (PyTorch's form).
template <typename S>
KernelFn makeBatchNormGrad(const ChannelPlan p, const S *x, const S *dy,
                           const S *scale, const S *mean, const S *var,
                           const S *stats, S *dx) {
  using C = ComputeT<S>;
  auto coef = std::make_shared<std::vector<C>>(4 * p.channels);
  return [=]() -> Status {
    C *k1 = coef->data(), *k2 = k1 + p.channels, *a = k2 + p.channels,
      *mu = a + p.channels;
    for (int64_t c = 0; c < p.channels; ++c) {
      const double r = 1.0 / std::sqrt(loadD(var[c]) + p.epsilon);
      k1[c] = C(loadD(stats[c]) / double(p.count));
      k2[c] = C(r * r * loadD(stats[p.channels + c]) / double(p.count));
      a[c] = C(loadD(scale[c]) * r);
      mu[c] = Elem<S>::load(mean[c]);
    }
    if (p.spatial == 1) {
      forRowBlocks(p, [&](int64_t n, int64_t c0, int64_t c1) {
        const S *xr = x + n * p.channels, *gr = dy + n * p.channels;
        S *out = dx + n * p.channels;
        for (int64_t c = c0; c < c1; ++c)
          out[c] = Elem<S>::store((Elem<S>::load(gr[c]) - k1[c] -
                                   (Elem<S>::load(xr[c]) - mu[c]) * k2[c]) *
                                  a[c]);
      });
      return Status::ok();
    }
    forPlanes(p, [&](int64_t n, int64_t c) {
      const int64_t base = (n * p.channels + c) * p.spatial;
      const S *xr = x + base, *gr = dy + base;
      S *out = dx + base;
      const C kc1 = k1[c], kc2 = k2[c], ac = a[c], mc = mu[c];
      for (int64_t i = 0; i < p.spatial; ++i)
        out[i] = Elem<S>::store((Elem<S>::load(gr[i]) - kc1 -
                                 (Elem<S>::load(xr[i]) - mc) * kc2) *
                                ac);
    });
    return Status::ok();
  };
}

//===-- group norm ---------------------------------------------------------===//

template <typename S>
KernelFn makeGroupNorm(const ChannelPlan p, const S *x, const S *scale,
                       const S *bias, S *y, S *meanOut, S *rstdOut) {
  using C = ComputeT<S>;
  return [=]() -> Status {
    const int64_t groups = p.groups(), block = p.perGroup * p.spatial;
    // Each (sample, group) on one thread.
    cpu::parallelForEach(p.batch * groups, block, [&](int64_t i, int) {
      const int64_t n = i / groups, g = i % groups;
      const int64_t base = (n * p.channels + g * p.perGroup) * p.spatial;
      double s1 = 0, s2 = 0;
      shiftedMoments(x + base, block, 0.0, s1, s2);
      const double mean = block ? s1 / double(block) : 0.0;
      double d1 = 0, d2 = 0;
      shiftedMoments(x + base, block, mean, d1, d2);
      const double var =
          block ? std::max(0.0, (d2 - d1 * d1 / double(block)) / double(block))
                : 0.0;
      const double r = 1.0 / std::sqrt(var + p.epsilon);
      meanOut[n * groups + g] = Elem<S>::store(C(mean));
      rstdOut[n * groups + g] = Elem<S>::store(C(r));
      const C m = C(mean);
      for (int64_t k = 0; k < p.perGroup; ++k) {
        const int64_t c = g * p.perGroup + k;
        const C a = C(loadD(scale[c]) * r), b = Elem<S>::load(bias[c]);
        const S *xr = x + base + k * p.spatial;
        S *yr = y + base + k * p.spatial;
        for (int64_t j = 0; j < p.spatial; ++j)
          yr[j] = Elem<S>::store((Elem<S>::load(xr[j]) - m) * a + b);
      }
    });
    return Status::ok();
  };
}

template <typename S>
KernelFn makeGroupNormGrad(const ChannelPlan p, const S *x, const S *scale,
                           const S *mean, const S *rstd, const S *dy, S *dx,
                           S *dscale, S *dbias) {
  using C = ComputeT<S>;
  auto acc = std::make_shared<std::vector<double>>(2 * p.channels);
  return [=]() -> Status {
    double *ds = acc->data(), *db = ds + p.channels;
    std::fill(acc->begin(), acc->end(), 0.0);
    const int64_t groups = p.groups(), block = p.perGroup * p.spatial;
    // Split by group, the samples in order inside: a channel's dscale and
    // dbias sum over the batch in order on one thread.
    cpu::parallelForEach(groups, p.batch * block, [&](int64_t g, int) {
      for (int64_t n = 0; n < p.batch; ++n) {
        const double mu = loadD(mean[n * groups + g]);
        const double r = loadD(rstd[n * groups + g]);
        // sum(g) and sum(g h) with g = dy * scale, h = (x - mu) r.
        double sumG = 0, sumGH = 0;
        for (int64_t k = 0; k < p.perGroup; ++k) {
          const int64_t c = g * p.perGroup + k;
          const int64_t base = (n * p.channels + c) * p.spatial;
          double sdy = 0, sdyx = 0;
          gradMoments(x + base, dy + base, p.spatial, mu, sdy, sdyx);
          const double w = loadD(scale[c]);
          sumG += w * sdy;
          sumGH += w * sdyx * r;
          db[c] += sdy;
          ds[c] += sdyx * r;
        }
        const C meanG = C(block ? sumG / double(block) : 0.0);
        const C meanGH = C(block ? sumGH / double(block) : 0.0);
        const C rc = C(r), mc = C(mu);
        for (int64_t k = 0; k < p.perGroup; ++k) {
          const int64_t c = g * p.perGroup + k;
          const int64_t base = (n * p.channels + c) * p.spatial;
          const C w = Elem<S>::load(scale[c]);
          const S *xr = x + base, *gr = dy + base;
          S *out = dx + base;
          for (int64_t i = 0; i < p.spatial; ++i) {
            const C h = (Elem<S>::load(xr[i]) - mc) * rc;
            out[i] = Elem<S>::store(
                rc * (Elem<S>::load(gr[i]) * w - meanG - h * meanGH));
          }
        }
      }
    });
    for (int64_t c = 0; c < p.channels; ++c) {
      dscale[c] = Elem<S>::store(C(ds[c]));
      dbias[c] = Elem<S>::store(C(db[c]));
    }
    return Status::ok();
  };
}

//===-- pooling ------------------------------------------------------------===//

// Pooling splits its planes (a sample's channel) over the CPU threads; a
// gradient accumulates each plane in its thread's own scratch plane.

/// Calls fn(o0, o1, o2, outIndex) for every output position of a plane and
/// visit(i, inIndex) for every tap of its window on the input, through
/// `window`.
template <typename Fn>
inline void forEachOutput(const PoolPlan &p, Fn &&fn) {
  int64_t o = 0;
  for (int64_t o0 = 0; o0 < p.out[0]; ++o0)
    for (int64_t o1 = 0; o1 < p.out[1]; ++o1)
      for (int64_t o2 = 0; o2 < p.out[2]; ++o2)
        fn(o0, o1, o2, o++);
}

/// Calls tap(inIndex) for the window's taps that fall on the input, in
/// window (row-major) order.
template <typename Fn>
inline void forEachTap(const PoolPlan &p, int64_t o0, int64_t o1, int64_t o2,
                       Fn &&tap) {
  const int64_t s0 = o0 * p.stride[0] - p.low[0];
  const int64_t s1 = o1 * p.stride[1] - p.low[1];
  const int64_t s2 = o2 * p.stride[2] - p.low[2];
  for (int64_t k0 = 0; k0 < p.kernel[0]; ++k0) {
    const int64_t i0 = s0 + k0 * p.dilation[0];
    if (i0 < 0 || i0 >= p.in[0])
      continue;
    for (int64_t k1 = 0; k1 < p.kernel[1]; ++k1) {
      const int64_t i1 = s1 + k1 * p.dilation[1];
      if (i1 < 0 || i1 >= p.in[1])
        continue;
      const int64_t row = (i0 * p.in[1] + i1) * p.in[2];
      for (int64_t k2 = 0; k2 < p.kernel[2]; ++k2) {
        const int64_t i2 = s2 + k2 * p.dilation[2];
        if (i2 < 0 || i2 >= p.in[2])
          continue;
        tap(row + i2);
      }
    }
  }
}

/// The first maximum in window order, or the last NaN (PyTorch's rule);
/// position -1 for a window of padding only.
template <typename S>
KernelFn makeMaxPool(const PoolPlan p, const S *x, S *y, int64_t *indices) {
  using C = ComputeT<S>;
  return [=]() -> Status {
    const int64_t inPlane = p.inPlane(), outPlane = p.outPlane();
    cpu::parallelForEach(p.planes, inPlane + outPlane, [&](int64_t plane, int) {
      const S *xp = x + plane * inPlane;
      S *yp = y + plane * outPlane;
      int64_t *ip = indices + plane * outPlane;
      forEachOutput(p, [&](int64_t o0, int64_t o1, int64_t o2, int64_t o) {
        C best;
        if constexpr (std::is_floating_point_v<C>)
          best = -std::numeric_limits<C>::infinity();
        else
          best = std::numeric_limits<C>::lowest();
        int64_t at = -1;
        forEachTap(p, o0, o1, o2, [&](int64_t i) {
          const C v = Elem<S>::load(xp[i]);
          if (at < 0 || v > best || isNan(v)) {
            best = v;
            at = i;
          }
        });
        yp[o] = Elem<S>::store(best);
        ip[o] = at;
      });
    });
    return Status::ok();
  };
}

/// Accumulates in the compute type, through a float plane for f16/bf16.
template <typename S>
KernelFn makeMaxPoolGrad(const PoolPlan p, const S *dy, const int64_t *indices,
                         S *dx, std::string prefix) {
  using C = ComputeT<S>;
  auto scratch = std::make_shared<std::vector<std::vector<C>>>(
      cpu::cpuThreads(), std::vector<C>(p.inPlane()));
  return [=]() -> Status {
    const int64_t inPlane = p.inPlane(), outPlane = p.outPlane();
    // The first bad index of each thread; the lowest plane's is reported.
    std::vector<std::pair<int64_t, int64_t>> bad(scratch->size(), {-1, 0});
    cpu::parallelForEach(p.planes, inPlane + outPlane, [&](int64_t plane, int worker) {
      if (bad[worker].first >= 0)
        return;
      C *acc = (*scratch)[worker].data();
      std::fill(acc, acc + inPlane, C(0));
      const S *gp = dy + plane * outPlane;
      const int64_t *ip = indices + plane * outPlane;
      for (int64_t o = 0; o < outPlane; ++o) {
        const int64_t i = ip[o];
        if (i < 0)
          continue;
        if (i >= inPlane) {
          bad[worker] = {plane * outPlane + o, i};
          return;
        }
        acc[i] += Elem<S>::load(gp[o]);
      }
      S *out = dx + plane * inPlane;
      for (int64_t i = 0; i < inPlane; ++i)
        out[i] = Elem<S>::store(acc[i]);
    });
    for (auto [at, index] : bad)
      if (at >= 0)
        return outOfRange(prefix, "index ", index, " at output ", at,
                          " is outside its plane of ", inPlane, " elements");
    return Status::ok();
  };
}

template <typename S>
KernelFn makeAvgPool(const PoolPlan p, const S *x, S *y) {
  using C = ComputeT<S>;
  return [=]() -> Status {
    const int64_t inPlane = p.inPlane(), outPlane = p.outPlane();
    cpu::parallelForEach(p.planes, inPlane + outPlane, [&](int64_t plane, int) {
      const S *xp = x + plane * inPlane;
      S *yp = y + plane * outPlane;
      forEachOutput(p, [&](int64_t o0, int64_t o1, int64_t o2, int64_t o) {
        C sum = 0;
        forEachTap(p, o0, o1, o2, [&](int64_t i) { sum += Elem<S>::load(xp[i]); });
        const int64_t div = p.divisor(o0, o1, o2);
        yp[o] = Elem<S>::store(div ? sum / C(div) : C(0));
      });
    });
    return Status::ok();
  };
}

template <typename S>
KernelFn makeAvgPoolGrad(const PoolPlan p, const S *dy, S *dx) {
  using C = ComputeT<S>;
  auto scratch = std::make_shared<std::vector<std::vector<C>>>(
      cpu::cpuThreads(), std::vector<C>(p.inPlane()));
  return [=]() -> Status {
    const int64_t inPlane = p.inPlane(), outPlane = p.outPlane();
    cpu::parallelForEach(p.planes, inPlane + outPlane, [&](int64_t plane, int worker) {
      C *acc = (*scratch)[worker].data();
      std::fill(acc, acc + inPlane, C(0));
      const S *gp = dy + plane * outPlane;
      forEachOutput(p, [&](int64_t o0, int64_t o1, int64_t o2, int64_t o) {
        const int64_t div = p.divisor(o0, o1, o2);
        if (!div)
          return;
        const C g = Elem<S>::load(gp[o]) / C(div);
        forEachTap(p, o0, o1, o2, [&](int64_t i) { acc[i] += g; });
      });
      S *out = dx + plane * inPlane;
      for (int64_t i = 0; i < inPlane; ++i)
        out[i] = Elem<S>::store(acc[i]);
    });
    return Status::ok();
  };
}

//===-- factories ----------------------------------------------------------===//

/// Binds `make` for the float storage type of `dtype`.
template <typename Make>
StatusOr<KernelFn> forFloat(const KernelContext &ctx, DType dtype,
                            Make &&make) {
  KernelFn fn;
  if (!visitDType<kSetFloats>(dtype, [&](auto tag) {
        using S = typename decltype(tag)::type;
        fn = make(tag, static_cast<S *>(nullptr));
      }))
    return unsupportedDType(ctx, dtype, kSetFloats);
  return fn;
}

#define DTCC_IN(i) ctx.inputs[i].as<const S>()
#define DTCC_OUT(i) ctx.outputs[i].as<S>()

StatusOr<KernelFn> buildBatchNormStats(const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(ChannelPlan p, planBatchNormStats(ctx));
  return forFloat(ctx, p.dtype, [&](auto, auto *tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    return makeBatchNormStats<S>(p, DTCC_IN(0), DTCC_IN(1), DTCC_OUT(0));
  });
}

StatusOr<KernelFn> buildBatchNorm(const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(ChannelPlan p, planBatchNorm(ctx));
  return forFloat(ctx, p.dtype, [&](auto, auto *tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    return makeBatchNorm<S>(p, DTCC_IN(0), DTCC_IN(1), DTCC_IN(2), DTCC_IN(3),
                            DTCC_IN(4), DTCC_OUT(0));
  });
}

StatusOr<KernelFn> buildBatchNormUpdate(const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(ChannelPlan p, planBatchNormUpdate(ctx));
  return forFloat(ctx, p.dtype, [&](auto, auto *tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    return makeBatchNormUpdate<S>(p, DTCC_IN(0), DTCC_IN(1), DTCC_IN(2),
                                  DTCC_IN(3), DTCC_OUT(0), DTCC_OUT(1));
  });
}

StatusOr<KernelFn> buildBatchNormGradStats(const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(ChannelPlan p, planBatchNormGradStats(ctx));
  return forFloat(ctx, p.dtype, [&](auto, auto *tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    return makeBatchNormGradStats<S>(p, DTCC_IN(0), DTCC_IN(1), DTCC_IN(2),
                                     DTCC_OUT(0));
  });
}

StatusOr<KernelFn> buildBatchNormGrad(const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(ChannelPlan p, planBatchNormGrad(ctx));
  return forFloat(ctx, p.dtype, [&](auto, auto *tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    return makeBatchNormGrad<S>(p, DTCC_IN(0), DTCC_IN(1), DTCC_IN(2),
                                DTCC_IN(3), DTCC_IN(4), DTCC_IN(5),
                                DTCC_OUT(0));
  });
}

StatusOr<KernelFn> buildGroupNorm(const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(ChannelPlan p, planGroupNorm(ctx));
  return forFloat(ctx, p.dtype, [&](auto, auto *tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    return makeGroupNorm<S>(p, DTCC_IN(0), DTCC_IN(1), DTCC_IN(2), DTCC_OUT(0),
                            DTCC_OUT(1), DTCC_OUT(2));
  });
}

StatusOr<KernelFn> buildGroupNormGrad(const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(ChannelPlan p, planGroupNormGrad(ctx));
  return forFloat(ctx, p.dtype, [&](auto, auto *tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    return makeGroupNormGrad<S>(p, DTCC_IN(0), DTCC_IN(1), DTCC_IN(2),
                                DTCC_IN(3), DTCC_IN(4), DTCC_OUT(0),
                                DTCC_OUT(1), DTCC_OUT(2));
  });
}

StatusOr<KernelFn> buildMaxPool(const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(PoolPlan p, planMaxPool(ctx));
  KernelFn fn;
  if (!visitDType<kSetFloats | kSetInts>(p.dtype, [&](auto tag) {
        using S = typename decltype(tag)::type;
        fn = makeMaxPool<S>(p, DTCC_IN(0), DTCC_OUT(0),
                            ctx.outputs[1].as<int64_t>());
      }))
    return unsupportedDType(ctx, p.dtype, kSetFloats | kSetInts);
  return fn;
}

StatusOr<KernelFn> buildMaxPoolGrad(const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(PoolPlan p, planMaxPoolGrad(ctx));
  return forFloat(ctx, p.dtype, [&](auto, auto *tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    return makeMaxPoolGrad<S>(p, DTCC_IN(0), ctx.inputs[1].as<const int64_t>(),
                              DTCC_OUT(0), errorPrefix(ctx));
  });
}

StatusOr<KernelFn> buildAvgPool(const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(PoolPlan p, planAvgPool(ctx));
  return forFloat(ctx, p.dtype, [&](auto, auto *tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    return makeAvgPool<S>(p, DTCC_IN(0), DTCC_OUT(0));
  });
}

StatusOr<KernelFn> buildAvgPoolGrad(const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(PoolPlan p, planAvgPoolGrad(ctx));
  return forFloat(ctx, p.dtype, [&](auto, auto *tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    return makeAvgPoolGrad<S>(p, DTCC_IN(0), DTCC_OUT(0));
  });
}

#undef DTCC_IN
#undef DTCC_OUT

} // namespace

void registerCpuNormPoolKernels(KernelRegistry &registry) {
  registry.add("batch_norm_stats", buildBatchNormStats);
  registry.add("batch_norm", buildBatchNorm);
  registry.add("batch_norm_update", buildBatchNormUpdate);
  registry.add("batch_norm_grad_stats", buildBatchNormGradStats);
  registry.add("batch_norm_grad", buildBatchNormGrad);
  registry.add("group_norm", buildGroupNorm);
  registry.add("group_norm_grad", buildGroupNormGrad);
  registry.add("max_pool", buildMaxPool);
  registry.add("max_pool_grad", buildMaxPoolGrad);
  registry.add("avg_pool", buildAvgPool);
  registry.add("avg_pool_grad", buildAvgPoolGrad);
}

} // namespace dtcc::runtime
