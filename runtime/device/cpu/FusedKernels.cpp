//===- FusedKernels.cpp - the fused regions' generated kernels ------------===//
//
// `fused` runs a region's kernel from the shared object the compiler
// generated (runtime/exec/GeneratedKernels.h): the closure passes the
// region's buffers, inputs then outputs, in operand order.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/CpuKernelUtils.h"
#include "runtime/exec/GeneratedKernels.h"

namespace dtcc::runtime {
namespace {

StatusOr<KernelFn> buildFused(const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(std::string symbol, ctx.attrs.getString("symbol"));
  if (!ctx.generated)
    return ctx.error("the program has no generated kernels for '", symbol,
                     "' (an executable without its kernels section: compile "
                     "it again)");
  DTCC_ASSIGN_OR_RETURN(GeneratedKernelFn fn, ctx.generated->find(symbol));
  // The kernel indexes every buffer row-major, as its memrefs' identity
  // layouts say.
  std::vector<void *> buffers;
  for (const auto *list : {&ctx.inputs, &ctx.outputs})
    for (const TensorView &v : *list) {
      if (!v.isContiguous())
        return ctx.error("buffer ", buffers.size(), " (", v.typeString(),
                         ") is not contiguous");
      buffers.push_back(v.data);
    }
  return KernelFn([fn, buffers = std::move(buffers)]() -> Status {
    fn(buffers.data());
    return Status::ok();
  });
}

} // namespace

void registerCpuFusedKernels(KernelRegistry &registry) {
  registry.add("fused", buildFused);
}

} // namespace dtcc::runtime
