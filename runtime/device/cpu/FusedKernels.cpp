//===- FusedKernels.cpp - the fused regions' generated kernels ------------===//
//
// `fused` runs a region's kernel from the shared object the compiler
// generated (runtime/exec/GeneratedKernels.h): the closure passes the
// region's buffers, inputs then outputs, in operand order, and splits the
// region's rows over the CPU threads.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/CpuKernelUtils.h"
#include "runtime/device/cpu/ThreadPool.h"
#include "runtime/exec/GeneratedKernels.h"

#include <algorithm>

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
  // The region's rows (the outermost index of its outputs, which share
  // it) go to the threads, at least kParallelGrain elements each: a row's
  // elements are those of its largest buffer (a row region's outputs may
  // hold one value per row of inputs it reduces).
  const std::vector<int64_t> &shape =
      ctx.outputs.empty() ? std::vector<int64_t>() : ctx.outputs[0].shape;
  const int64_t rows = shape.empty() ? 1 : shape[0];
  int64_t perRow = 1;
  for (const auto *list : {&ctx.inputs, &ctx.outputs})
    for (const TensorView &v : *list)
      if (!v.shape.empty() && v.shape[0] == rows)
        perRow = std::max(perRow, cpu::product(v.shape, 1));
  const int64_t grain = cpu::parallelGrain(perRow);
  return KernelFn([fn, rows, grain, buffers = std::move(buffers)]() -> Status {
    cpu::parallelFor(rows, grain, [&](int64_t begin, int64_t end, int) {
      fn(buffers.data(), begin, end);
    });
    return Status::ok();
  });
}

} // namespace

void registerCpuFusedKernels(KernelRegistry &registry) {
  registry.add("fused", buildFused);
}

} // namespace dtcc::runtime
