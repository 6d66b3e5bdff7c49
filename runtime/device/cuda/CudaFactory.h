//===- CudaFactory.h - what the CUDA kernel factories share -----*- C++ -*-===//
//
// A launch's cudaError_t as a Status, the error for an element type a
// kernel lacks, and the request of the scratch runtime/exec/CudaScratch.h
// assigns an instruction (the factory's own arithmetic must agree with it).
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CUDA_CUDAFACTORY_H
#define DTCC_RUNTIME_DEVICE_CUDA_CUDAFACTORY_H

#include "runtime/device/cpu/CpuKernelUtils.h"
#include "runtime/device/cuda/CudaLaunch.h"
#include "runtime/exec/CudaScratch.h"

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

namespace dtcc::runtime::cuda {

/// A cudaError_t from a launch as a Status naming the instruction.
inline Status launched(const std::string &prefix, cudaError_t err) {
  if (err == cudaSuccess)
    return Status::ok();
  return internalError(prefix, "CUDA launch failed: ", cudaGetErrorName(err),
                       " (", cudaGetErrorString(err), ")");
}

inline Status unsupported(const KernelContext &ctx, DType dtype) {
  return unimplemented(cpu::errorPrefix(ctx),
                       "no CUDA kernel for element type ", dtypeName(dtype));
}

/// f32, f16, bf16 or f64, else unsupported().
inline Status requireCudaFloat(const KernelContext &ctx, DType dtype) {
  if (isCudaFloatType(dtype) || dtype == DType::kF64)
    return Status::ok();
  return unsupported(ctx, dtype);
}

/// Requests what runtime/exec/CudaScratch.h says `ctx` needs, which must
/// be one region of `bytes` of `use` (the factory's own plan), or nothing
/// when `bytes` is 0. The slot is null until the reservation.
inline StatusOr<ScratchSlot> requestScratchOf(const KernelContext &ctx,
                                              ScratchUse use, int64_t bytes) {
  DTCC_ASSIGN_OR_RETURN(ScratchSet set, cudaKernelScratch(ctx));
  const bool agree = bytes == 0 ? set.empty()
                                : set.size() == 1 && set[0].use == use &&
                                      set[0].bytes == bytes;
  if (!agree)
    return internalError(cpu::errorPrefix(ctx),
                         "runtime/exec/CudaScratch.h and the kernel disagree "
                         "on its scratch (", bytes, " bytes)");
  if (set.empty())
    return ScratchSlot();
  DTCC_ASSIGN_OR_RETURN(std::vector<ScratchSlot> slots,
                        ctx.requestScratch(std::move(set)));
  return slots.at(0);
}

/// The float copy of output 0 that a gradient of `dtype` adds into
/// atomically when `dtype` is f16 or bf16 (atomics on the half types lose
/// sums; the launch rounds the copy into output 0 at the end): its scratch
/// slot, and whether the launch needs it (a half type and a non-empty
/// output).
struct FloatAccumulator {
  ScratchSlot slot;
  bool needed = false;
};
inline StatusOr<FloatAccumulator> floatAccumulatorOf(const KernelContext &ctx,
                                                     DType dtype) {
  const bool viaFloat = dtype == DType::kF16 || dtype == DType::kBF16;
  const int64_t elements = ctx.outputs.at(0).numel();
  FloatAccumulator acc;
  DTCC_ASSIGN_OR_RETURN(
      acc.slot,
      requestScratchOf(ctx, ScratchUse::kCompute,
                       viaFloat ? elements * int64_t(sizeof(float)) : 0));
  acc.needed = viaFloat && elements > 0;
  return acc;
}

/// The launch plan of a reduction planCudaReduce planned (CudaKernels.cpp).
StatusOr<ReducePlan> reduceLaunchPlan(const CudaReducePlan &plan);

/// A run before the reservation (kernels bound outside a program) is an
/// error, not a launch on a null pointer.
inline Status unreserved(const std::string &prefix) {
  return internalError(prefix, "the kernel's scratch was never reserved");
}

} // namespace dtcc::runtime::cuda

#endif // DTCC_RUNTIME_DEVICE_CUDA_CUDAFACTORY_H
