//===- CastKernels.cpp - elementwise dtype conversion ---------------------===//
//
// cast between every pair of dtypes. Floats to integers truncate toward zero
// and saturate (NaN -> 0), so that no conversion is undefined behaviour.
// bindInF32: half-precision kernels computed in f32 copies.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/CpuKernelUtils.h"
#include "runtime/device/cpu/ElementwiseLoops.h"

namespace dtcc::runtime {
namespace {

using namespace cpu;

/// Converts a compute value F to the compute type T.
template <typename T> struct ConvertTo {
  template <typename F> T operator()(F v) const {
    if constexpr (std::is_same_v<T, bool>) {
      return v != F(0);
    } else if constexpr (std::is_integral_v<T> && std::is_floating_point_v<F>) {
      if (v != v)
        return T(0);
      if (v <= F(std::numeric_limits<T>::min()))
        return std::numeric_limits<T>::min();
      if (v >= F(std::numeric_limits<T>::max()))
        return std::numeric_limits<T>::max();
      return T(v);
    } else {
      return T(v);
    }
  }
};

StatusOr<KernelFn> buildCast(const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(StridedLayout<2> layout, elementwiseLayout<2>(ctx));
  const TensorView &in = ctx.inputs[0], &out = ctx.outputs[0];
  KernelFn fn;
  bool outOk = false;
  bool inOk = visitDType<kSetAll>(in.dtype, [&](auto inTag) {
    using IS = typename decltype(inTag)::type;
    outOk = visitDType<kSetAll>(out.dtype, [&](auto outTag) {
      using OS = typename decltype(outTag)::type;
      fn = makeUnaryLoop<OS, IS>(layout, in, out, ConvertTo<ComputeT<OS>>());
    });
  });
  if (!inOk)
    return unsupportedDType(ctx, in.dtype, kSetAll, "input element type");
  if (!outOk)
    return unsupportedDType(ctx, out.dtype, kSetAll, "output element type");
  return fn;
}

} // namespace

void registerCpuCastKernels(KernelRegistry &registry) {
  registry.add("cast", buildCast);
}

namespace cpu {

StatusOr<RunScratch> RunScratch::make(const KernelContext &ctx,
                                      const std::vector<int64_t> &bytes) {
  RunScratch r;
  if (ctx.scratch && !ctx.scratch->bound()) {
    ScratchSet set;
    for (int64_t b : bytes)
      set.push_back({ScratchUse::kCompute, b});
    DTCC_ASSIGN_OR_RETURN(r.slots_, ctx.scratch->request(std::move(set)));
    return r;
  }
  for (int64_t b : bytes)
    r.own_.emplace_back(new char[size_t(std::max<int64_t>(b, 1))]);
  return r;
}

Status RunScratch::whenReady(const KernelContext &ctx,
                             std::function<Status()> fn) {
  if (ctx.scratch && !ctx.scratch->bound()) {
    ctx.scratch->whenReserved(std::move(fn));
    return Status::ok();
  }
  return fn();
}

template <typename S>
StatusOr<KernelFn> bindInF32(const KernelContext &ctx, size_t inputs,
                             F32Binder bindF32) {
  if (inputs > ctx.inputs.size())
    return internalError(errorPrefix(ctx), "converts ", inputs, " inputs of ",
                         ctx.inputs.size());
  struct Staging {
    std::vector<TensorView> halves; // the inputs, then the outputs
    RunScratch copies;
    // Bound once the copies' addresses are known: the inputs' widening,
    // the f32 kernel, the outputs' rounding (the cast kernel's loops).
    std::vector<KernelFn> widen, narrow;
    KernelFn inner;
  };
  auto st = std::make_shared<Staging>();
  st->halves.assign(ctx.inputs.begin(), ctx.inputs.begin() + inputs);
  st->halves.insert(st->halves.end(), ctx.outputs.begin(), ctx.outputs.end());
  std::vector<int64_t> bytes;
  for (const TensorView &h : st->halves)
    bytes.push_back(h.numel() * int64_t(sizeof(float)));
  DTCC_ASSIGN_OR_RETURN(st->copies, RunScratch::make(ctx, bytes));
  DTCC_RETURN_IF_ERROR(RunScratch::whenReady(
      ctx, [st, inputs, bindF32 = std::move(bindF32)]() -> Status {
        std::vector<float *> copies;
        for (size_t i = 0; i < st->halves.size(); ++i) {
          const TensorView &h = st->halves[i];
          const std::vector<int64_t> linear = {h.numel()}, unit = {1};
          StridedLayout<2> layout;
          buildLayout<2>(linear, {&unit, &unit}, layout);
          TensorView half = makeView(h.data, h.dtype, linear);
          TensorView f32 = makeView(st->copies.get(i), DType::kF32, linear);
          copies.push_back(f32.as<float>());
          if (i < inputs)
            st->widen.push_back(
                makeUnaryLoop<float, S>(layout, half, f32, ConvertTo<float>()));
          else
            st->narrow.push_back(
                makeUnaryLoop<S, float>(layout, f32, half, ConvertTo<float>()));
        }
        DTCC_ASSIGN_OR_RETURN(st->inner, bindF32(copies));
        return Status::ok();
      }));
  return KernelFn([st]() -> Status {
    for (const KernelFn &widen : st->widen)
      DTCC_RETURN_IF_ERROR(widen());
    DTCC_RETURN_IF_ERROR(st->inner());
    for (const KernelFn &narrow : st->narrow)
      DTCC_RETURN_IF_ERROR(narrow());
    return Status::ok();
  });
}

template StatusOr<KernelFn> bindInF32<Half>(const KernelContext &, size_t,
                                            F32Binder);
template StatusOr<KernelFn> bindInF32<BFloat16>(const KernelContext &, size_t,
                                                F32Binder);

} // namespace cpu

} // namespace dtcc::runtime
