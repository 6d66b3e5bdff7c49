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

namespace {

/// out[i] = in[i] for i < n, converted (widened or rounded once), over the
/// kernels' threads in AVX-512 where the CPU has it.
template <typename OS, typename IS>
void convertContiguous(const IS *in, OS *out, int64_t n) {
  if (n <= 0)
    return;
  StridedLayout<2> layout;
  layout.numel = layout.shape[0] = n;
  layout.strides[0][0] = layout.strides[0][1] = 1;
  forEachRunParallel(layout,
                     [&](const int64_t *off, int64_t m, const int64_t *) {
                       OS *po = out + off[0];
                       const IS *pi = in + off[1];
                       withAvx512([&]() DTCC_INLINE_LAMBDA {
                         DTCC_INDEPENDENT_ITERATIONS
                         for (int64_t j = 0; j < m; ++j)
                           po[j] = Elem<OS>::store(Elem<IS>::load(pi[j]));
                       });
                     });
}

} // namespace

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
    std::vector<const S *> in;
    std::vector<S *> out;
    std::vector<int64_t> sizes; // in elements: the inputs', then the outputs'
    RunScratch copies;
    KernelFn inner;
  };
  auto st = std::make_shared<Staging>();
  std::vector<int64_t> bytes;
  for (size_t i = 0; i < inputs; ++i) {
    st->in.push_back(ctx.inputs[i].as<const S>());
    st->sizes.push_back(ctx.inputs[i].numel());
  }
  for (const TensorView &o : ctx.outputs) {
    st->out.push_back(o.as<S>());
    st->sizes.push_back(o.numel());
  }
  for (int64_t n : st->sizes)
    bytes.push_back(n * int64_t(sizeof(float)));
  DTCC_ASSIGN_OR_RETURN(st->copies, RunScratch::make(ctx, bytes));
  DTCC_RETURN_IF_ERROR(RunScratch::whenReady(
      ctx, [st, bindF32 = std::move(bindF32)]() -> Status {
        std::vector<float *> copies;
        for (size_t i = 0; i < st->sizes.size(); ++i)
          copies.push_back(static_cast<float *>(st->copies.get(i)));
        DTCC_ASSIGN_OR_RETURN(st->inner, bindF32(copies));
        return Status::ok();
      }));
  return KernelFn([st]() -> Status {
    const size_t ins = st->in.size();
    for (size_t i = 0; i < ins; ++i)
      convertContiguous<float, S>(
          st->in[i], static_cast<float *>(st->copies.get(i)), st->sizes[i]);
    DTCC_RETURN_IF_ERROR(st->inner());
    for (size_t j = 0; j < st->out.size(); ++j)
      convertContiguous<S, float>(static_cast<float *>(st->copies.get(ins + j)),
                                  st->out[j], st->sizes[ins + j]);
    return Status::ok();
  });
}

template StatusOr<KernelFn> bindInF32<Half>(const KernelContext &, size_t,
                                            F32Binder);
template StatusOr<KernelFn> bindInF32<BFloat16>(const KernelContext &, size_t,
                                                F32Binder);

} // namespace cpu

} // namespace dtcc::runtime
