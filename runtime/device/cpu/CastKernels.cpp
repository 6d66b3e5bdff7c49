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
    std::vector<ScratchSlot> slots;
    std::vector<std::vector<float>> own;
    KernelFn inner;
    float *copy(size_t i) {
      return slots.empty() ? own[i].data() : slots[i].as<float>();
    }
  };
  auto st = std::make_shared<Staging>();
  for (size_t i = 0; i < inputs; ++i) {
    st->in.push_back(ctx.inputs[i].as<const S>());
    st->sizes.push_back(ctx.inputs[i].numel());
  }
  for (const TensorView &o : ctx.outputs) {
    st->out.push_back(o.as<S>());
    st->sizes.push_back(o.numel());
  }
  auto bind = [st, bindF32 = std::move(bindF32)]() -> Status {
    std::vector<float *> copies;
    for (size_t i = 0; i < st->sizes.size(); ++i)
      copies.push_back(st->copy(i));
    DTCC_ASSIGN_OR_RETURN(st->inner, bindF32(copies));
    return Status::ok();
  };
  if (ctx.scratch && !ctx.scratch->bound()) {
    ScratchSet set;
    for (int64_t n : st->sizes)
      set.push_back({ScratchUse::kCompute, n * int64_t(sizeof(float))});
    DTCC_ASSIGN_OR_RETURN(st->slots, ctx.scratch->request(std::move(set)));
    ctx.scratch->whenReserved(std::move(bind));
  } else {
    for (int64_t n : st->sizes)
      st->own.emplace_back(size_t(n));
    DTCC_RETURN_IF_ERROR(bind());
  }
  return KernelFn([st]() -> Status {
    const size_t ins = st->in.size();
    for (size_t i = 0; i < ins; ++i)
      convertContiguous<float, S>(st->in[i], st->copy(i), st->sizes[i]);
    DTCC_RETURN_IF_ERROR(st->inner());
    for (size_t j = 0; j < st->out.size(); ++j)
      convertContiguous<S, float>(st->copy(ins + j), st->out[j],
                                  st->sizes[ins + j]);
    return Status::ok();
  });
}

template StatusOr<KernelFn> bindInF32<Half>(const KernelContext &, size_t,
                                            F32Binder);
template StatusOr<KernelFn> bindInF32<BFloat16>(const KernelContext &, size_t,
                                                F32Binder);

} // namespace cpu

} // namespace dtcc::runtime
