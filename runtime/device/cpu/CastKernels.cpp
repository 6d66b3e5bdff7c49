//===- CastKernels.cpp - elementwise dtype conversion ---------------------===//
//
// cast between every pair of dtypes. Floats to integers truncate toward zero
// and saturate (NaN -> 0), so that no conversion is undefined behaviour.
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

} // namespace dtcc::runtime
