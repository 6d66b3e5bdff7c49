//===- CudaMatmul.cpp - matmul through cuBLASLt ---------------------------===//
//
// The CPU "matmul" semantics (NumPy-broadcast batches, transpose_lhs /
// transpose_rhs; runtime/base/MatmulShape.h) on cuBLASLt: row-major C = A B
// is computed as the column-major C^T = B^T A^T, one strided-batch call per
// group of the plan (a broadcast operand has batch stride 0), fp32
// accumulation for f16/bf16 (CudaTables.h). The heuristic's algorithm is
// chosen at load time, told the operands' real alignment; the workspace is
// the program's compute scratch (runtime/exec/CudaScratch.h).
// matmul_bias and matmul_bias_grad add cuBLASLt's epilogues: BIAS (a
// dense layer's bias added by the product's kernel) and BGRADA/BGRADB (the
// sums of an operand's contracted rows, its bias gradient, written by it).
//
//===----------------------------------------------------------------------===//

#include "runtime/base/MatmulShape.h"
#include "runtime/device/cpu/CpuKernelUtils.h"
#include "runtime/device/cuda/CudaCheck.h"
#include "runtime/device/cuda/CudaDevice.h"
#include "runtime/device/cuda/CudaFactory.h"
#include "runtime/device/cuda/CudaTables.h"
#include "runtime/exec/CudaScratch.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <set>
#include <string>

namespace dtcc::runtime::cuda {
namespace {

struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool hasAlgo = false;
  ~LtPlan() {
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
  }
};

/// A column-major [rows, cols] layout with `batch` matrices `stride` apart.
Status layout(cublasLtMatrixLayout_t *out, cudaDataType_t type, int64_t rows,
              int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
  DTCC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(out, type, uint64_t(rows),
                                               uint64_t(cols), ld));
  int32_t count = int32_t(batch);
  DTCC_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
      *out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
  DTCC_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
      *out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
      sizeof(stride)));
  return Status::ok();
}

/// One product of the "matmul" semantics on cuBLASLt, bound to its
/// buffers and the workspace; with `bias`, cuBLASLt's BIAS epilogue adds
/// it along the product's last dimension; with `sums`, its bias-gradient
/// epilogue also writes there the sums over the contracted rows of the
/// rhs (`summed` 1: BGRADA, cuBLASLt's A being the rhs) or of the
/// transposed lhs (0: BGRADB).
struct MatmulCall {
  TensorView lhs, rhs, out;
  bool transposeLhs = false, transposeRhs = false;
  const TensorView *bias = nullptr;
  const TensorView *sums = nullptr;
  int64_t summed = 1;
  ScratchSlot workspace;
  size_t workspaceBytes = 0;
};

/// Binds `call`. With an epilogue (`call.bias` or `call.sums`), an empty
/// KernelFn when cuBLASLt has no algorithm for the product with it (the
/// caller then adds or sums itself); without, that is an error.
StatusOr<KernelFn> bindMatmul(CudaDevice &dev, const KernelContext &ctx,
                              const MatmulCall &call) {
  const TensorView &lhs = call.lhs, &rhs = call.rhs, &out = call.out;
  const bool tl = call.transposeLhs, tr = call.transposeRhs;
  auto planned = planMatmul(lhs.shape, rhs.shape, tl, tr);
  if (!planned.isOk())
    return ctx.error(planned.status().message(), " (", lhs.typeString(),
                     " x ", rhs.typeString(), ")");
  const MatmulShape shape = planned.value();
  DTCC_RETURN_IF_ERROR(cpu::checkShape(ctx, out, shape.resultShape, "output 0"));
  const int64_t m = shape.m, n = shape.n, k = shape.k, batch = shape.count;
  const int64_t lhsStep = shape.lhsStride, rhsStep = shape.rhsStride,
                outStep = shape.outStride;
  const bool tf32 = std::getenv("DTCC_CUDA_ALLOW_TF32") != nullptr;
  auto types = matmulTypes(lhs.dtype, tf32);
  if (!types.isOk())
    return unimplemented(cpu::errorPrefix(ctx), types.status().message());
  const MatmulTypes t = types.value();
  auto plan = std::make_shared<LtPlan>();
  // Column-major: C^T [n, m] = op(B)^T [n, k] x op(A)^T [k, m].
  DTCC_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, t.computeType, t.scaleType));
  cublasOperation_t opB = tr ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opA = tl ? CUBLAS_OP_T : CUBLAS_OP_N;
  DTCC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
      plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opB, sizeof(opB)));
  DTCC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
      plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opA, sizeof(opA)));
  const bool epilogue = call.bias || call.sums;
  if (epilogue) {
    // cuBLASLt's A is the rhs, B the lhs, and D = C^T [n, m]. BIAS adds a
    // vector along D's rows (the product's last dimension), the same for
    // every batch (stride 0, the default); BGRADA sums A over the GEMM's k
    // into a vector of D's row count n, BGRADB sums B into one of D's
    // column count m. The vector has the output's type (cuBLASLt's
    // default for it).
    const cublasLtEpilogue_t kind = call.bias     ? CUBLASLT_EPILOGUE_BIAS
                                    : call.summed ? CUBLASLT_EPILOGUE_BGRADA
                                                  : CUBLASLT_EPILOGUE_BGRADB;
    const void *vector = call.bias ? call.bias->data : call.sums->data;
    DTCC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &kind, sizeof(kind)));
    DTCC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vector,
        sizeof(vector)));
  }
  // Row-major rhs [k, n] is column-major [n, k] (ld n); transposed: [k, n].
  DTCC_RETURN_IF_ERROR(layout(&plan->a, t.dataType, tr ? k : n, tr ? n : k,
                              tr ? k : n, batch, rhsStep));
  DTCC_RETURN_IF_ERROR(layout(&plan->b, t.dataType, tl ? m : k, tl ? k : m,
                              tl ? m : k, batch, lhsStep));
  DTCC_RETURN_IF_ERROR(layout(&plan->c, t.dataType, n, m, n, batch, outStep));
  size_t ws = call.workspaceBytes;
  std::unique_ptr<cublasLtMatmulPreferenceOpaque_t,
                  decltype(&cublasLtMatmulPreferenceDestroy)>
      pref(nullptr, cublasLtMatmulPreferenceDestroy);
  {
    cublasLtMatmulPreference_t p = nullptr;
    DTCC_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&p));
    pref.reset(p);
  }
  DTCC_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  // The operands' real alignment (the heuristic assumes 256 bytes unless
  // told, and may pick a kernel a view's address breaks). cuBLASLt's A is
  // the rhs, B the lhs (column-major C^T = B^T A^T). The one algorithm
  // runs every group, whose first matrix lies at the group's offset (an
  // outer batch dimension that did not merge, e.g. lhs [2, 1, 1, 3] x rhs
  // [1, 3, 3, 5]: lhs groups 3 elements apart), so all of them count.
  const int64_t esz = dtypeSize(lhs.dtype);
  auto alignmentOf = [&](const void *data, const std::vector<int64_t> &offsets,
                         int64_t step) {
    uint32_t alignment = 256;
    for (int64_t offset : offsets)
      alignment = std::min(
          alignment,
          cublasLtAlignment(static_cast<const char *>(data) + offset * esz,
                            step * esz, batch));
    return alignment;
  };
  const uint32_t alignA = alignmentOf(rhs.data, shape.rhsOffsets, rhsStep),
                 alignB = alignmentOf(lhs.data, shape.lhsOffsets, lhsStep),
                 alignC = alignmentOf(out.data, shape.outOffsets, outStep);
  for (auto [attr, value] :
       {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignA},
        std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignB},
        std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignC},
        std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignC}})
    DTCC_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.get(), attr, &value, sizeof(value)));
  if (m > 0 && n > 0 && k > 0) {
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    cublasStatus_t h = cublasLtMatmulAlgoGetHeuristic(
        dev.cublasLt(), plan->desc, plan->a, plan->b, plan->c, plan->c,
        pref.get(), 1, &result, &found);
    if ((h != CUBLAS_STATUS_SUCCESS || found == 0) && epilogue)
      return KernelFn();
    if (h != CUBLAS_STATUS_SUCCESS || found == 0)
      return unimplemented(
          cpu::errorPrefix(ctx), "cuBLASLt has no algorithm for a ",
          dtypeName(lhs.dtype), " matmul of ", batch, " x [", m, ", ", k,
          "] x [", k, ", ", n, "] with operands aligned to ", alignB, ", ",
          alignA, " and ", alignC, " bytes (", cublasGetStatusName(h), ")");
    plan->algo = result.algo;
    plan->hasAlgo = true;
  } else if (epilogue) {
    return KernelFn(); // nothing to multiply: the caller's bias or sums
  }
  const bool isDouble = lhs.dtype == DType::kF64;
  const bool empty = m == 0 || n == 0;
  const bool zeroK = k == 0;
  const int64_t outBytes = out.sizeInBytes();
  const size_t elementBytes = size_t(dtypeSize(lhs.dtype));
  const char *a = static_cast<const char *>(lhs.data);
  const char *b = static_cast<const char *>(rhs.data);
  char *c = static_cast<char *>(out.data);
  const std::vector<int64_t> lhsOffsets = shape.lhsOffsets,
                             rhsOffsets = shape.rhsOffsets,
                             outOffsets = shape.outOffsets;
  cudaStream_t st = dev.computeStream();
  cublasLtHandle_t lt = dev.cublasLt();
  const ScratchSlot workspaceSlot = call.workspace;
  std::string prefix = cpu::errorPrefix(ctx);
  return KernelFn([=]() -> Status {
    if (empty)
      return Status::ok();
    if (zeroK) {
      DTCC_CUDA_CHECK(cudaMemsetAsync(c, 0, size_t(outBytes), st));
      return Status::ok();
    }
    const float alphaF = 1.f, betaF = 0.f;
    const double alphaD = 1.0, betaD = 0.0;
    const void *alpha = isDouble ? static_cast<const void *>(&alphaD) : &alphaF;
    const void *beta = isDouble ? static_cast<const void *>(&betaD) : &betaF;
    // One strided-batch call per group of the plan (usually one).
    for (size_t g = 0; g < outOffsets.size(); ++g) {
      const void *ga = a + size_t(lhsOffsets[g]) * elementBytes;
      const void *gb = b + size_t(rhsOffsets[g]) * elementBytes;
      void *gc = c + size_t(outOffsets[g]) * elementBytes;
      cublasStatus_t s = cublasLtMatmul(
          lt, plan->desc, alpha, gb, plan->a, ga, plan->b, beta, gc, plan->c,
          gc, plan->c, plan->hasAlgo ? &plan->algo : nullptr, workspaceSlot.get(), ws, st);
      if (s != CUBLAS_STATUS_SUCCESS)
        return internalError(prefix, "cublasLtMatmul failed: ",
                             cublasGetStatusName(s), " (",
                             cublasGetStatusString(s), ")");
    }
    return Status::ok();
  });
}

/// The operands' checks both products share.
Status checkOperands(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(cpu::checkAllContiguous(ctx));
  const TensorView &lhs = ctx.inputs[0];
  DTCC_RETURN_IF_ERROR(
      cpu::checkDType(ctx, ctx.inputs[1], lhs.dtype, "input 1"));
  for (size_t i = 0; i < ctx.outputs.size(); ++i)
    DTCC_RETURN_IF_ERROR(cpu::checkDType(ctx, ctx.outputs[i], lhs.dtype,
                                         i ? "output 1" : "output 0"));
  return Status::ok();
}

/// The product an instruction of the three matmul kernels asks for: its
/// checked operands and transposes, without an epilogue or workspace.
StatusOr<MatmulCall> productOf(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkOperands(ctx));
  MatmulCall call;
  call.lhs = ctx.inputs[0];
  call.rhs = ctx.inputs[1];
  call.out = ctx.outputs[0];
  call.transposeLhs = ctx.attrs.getBool("transpose_lhs");
  call.transposeRhs = ctx.attrs.getBool("transpose_rhs");
  return call;
}

/// Requests `call`'s workspace: the compute-stream scratch that
/// runtime/exec/CudaScratch.h assigns the instruction (for matmul and
/// matmul_bias, the workspace alone).
Status requestWorkspace(const KernelContext &ctx, MatmulCall &call) {
  DTCC_ASSIGN_OR_RETURN(ScratchSet set, cudaKernelScratch(ctx));
  if (set.empty())
    return Status::ok();
  call.workspaceBytes = size_t(set[0].bytes);
  DTCC_ASSIGN_OR_RETURN(std::vector<ScratchSlot> slots,
                        ctx.requestScratch(std::move(set)));
  call.workspace = slots.at(0);
  return Status::ok();
}

StatusOr<KernelFn> buildMatmul(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(MatmulCall call, productOf(ctx));
  DTCC_RETURN_IF_ERROR(requestWorkspace(ctx, call));
  return bindMatmul(dev, ctx, call);
}

/// Said once a process for each epilogue cuBLASLt lacks where dtcc asked
/// for it: the step is slower than planned, not wrong.
void noteNoEpilogue(const KernelContext &ctx, const std::string &epilogue,
                    const TensorView &out) {
  static std::mutex mutex;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(mutex);
  if (!said.insert(epilogue).second)
    return;
  std::fprintf(stderr,
               "note: %scuBLASLt has no %s epilogue for a %s product of %s; "
               "it runs as a kernel of its own (said once)\n",
               cpu::errorPrefix(ctx).c_str(), epilogue.c_str(),
               dtypeName(out.dtype), out.typeString().c_str());
}

/// matmul_bias: the product with cuBLASLt's BIAS epilogue; where cuBLASLt
/// has no algorithm for it, the product and then the bias added in place
/// (an add of the bias broadcast over the rows), as matmul and add run.
StatusOr<KernelFn> buildMatmulBias(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(MatmulCall call, productOf(ctx));
  const TensorView &bias = ctx.inputs[2], &out = call.out;
  DTCC_RETURN_IF_ERROR(cpu::checkMatmulBias(ctx));
  call.bias = &bias;
  DTCC_RETURN_IF_ERROR(requestWorkspace(ctx, call));
  DTCC_ASSIGN_OR_RETURN(KernelFn fused, bindMatmul(dev, ctx, call));
  if (fused)
    return fused;
  if (out.numel() > 0)
    noteNoEpilogue(ctx, "BIAS", out);
  call.bias = nullptr;
  DTCC_ASSIGN_OR_RETURN(KernelFn product, bindMatmul(dev, ctx, call));
  // out[r, j] += bias[j] over the rows r of the product.
  const int64_t n = out.shape.back();
  Layout l;
  l.rank = 2;
  l.operands = 3;
  l.numel = out.numel();
  l.shape[0] = n > 0 ? l.numel / n : 0;
  l.shape[1] = n;
  const int64_t strides[2][3] = {{n, n, 0}, {1, 1, 1}};
  for (int d = 0; d < 2; ++d)
    for (int k = 0; k < 3; ++k)
      l.strides[d][k] = strides[d][k];
  prepareLayout(l);
  const DType dtype = out.dtype;
  void *data = out.data;
  const void *b = bias.data;
  const bool empty = l.numel == 0;
  cudaStream_t st = dev.computeStream();
  std::string prefix = cpu::errorPrefix(ctx);
  return KernelFn([=]() -> Status {
    DTCC_RETURN_IF_ERROR(product());
    if (empty)
      return Status::ok();
    return launched(prefix,
                    launchBinary(BinaryOp::kAdd, dtype, l, data, data, b, st));
  });
}

/// matmul_bias_grad: the product with cuBLASLt's bias-gradient epilogue;
/// where cuBLASLt has no algorithm for it (a type, a shape or an alignment
/// its epilogue kernels lack), the product and then a reduction of the
/// summed operand's rows, as matmul and reduce_sum would run.
StatusOr<KernelFn> buildMatmulBiasGrad(CudaDevice &dev,
                                       const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(MatmulCall call, productOf(ctx));
  DTCC_ASSIGN_OR_RETURN(call.summed, cpu::checkMatmulBiasGrad(ctx));
  const TensorView &rows = call.summed ? call.rhs : call.lhs;
  const TensorView &sums = ctx.outputs[1];
  call.sums = &sums;
  // One set (runtime/exec/CudaScratch.h): the workspace where the product
  // has elements, then the reduction's partial sums where it needs them.
  auto reduce = planCudaReduce(rows.shape, {0});
  if (!reduce.isOk())
    return ctx.error(reduce.status().message());
  DTCC_ASSIGN_OR_RETURN(ScratchSet set, cudaKernelScratch(ctx));
  const bool hasWorkspace = call.out.numel() > 0;
  if (set.size() != size_t(hasWorkspace) + size_t(reduce->scratchBytes > 0))
    return internalError(cpu::errorPrefix(ctx),
                         "runtime/exec/CudaScratch.h and the kernel disagree "
                         "on its scratch");
  ScratchSlot partials;
  if (!set.empty()) {
    if (hasWorkspace)
      call.workspaceBytes = size_t(set[0].bytes);
    DTCC_ASSIGN_OR_RETURN(std::vector<ScratchSlot> slots,
                          ctx.requestScratch(std::move(set)));
    if (hasWorkspace)
      call.workspace = slots.at(0);
    if (reduce->scratchBytes > 0)
      partials = slots.back();
  }
  DTCC_ASSIGN_OR_RETURN(KernelFn fused, bindMatmul(dev, ctx, call));
  if (fused)
    return fused;
  if (call.out.numel() > 0 && rows.shape[0] > 0)
    noteNoEpilogue(ctx, call.summed ? "BGRADA" : "BGRADB", call.out);
  call.sums = nullptr;
  DTCC_ASSIGN_OR_RETURN(KernelFn product, bindMatmul(dev, ctx, call));
  DTCC_ASSIGN_OR_RETURN(ReducePlan p, reduceLaunchPlan(*reduce));
  const DType dtype = rows.dtype;
  const void *in = rows.data;
  void *out = sums.data;
  const size_t sumsBytes = size_t(sums.sizeInBytes());
  const bool noRows = rows.shape[0] == 0;
  cudaStream_t st = dev.computeStream();
  std::string prefix = cpu::errorPrefix(ctx);
  return KernelFn([=]() -> Status {
    DTCC_RETURN_IF_ERROR(product());
    if (sumsBytes == 0)
      return Status::ok();
    if (noRows) {
      DTCC_CUDA_CHECK(cudaMemsetAsync(out, 0, sumsBytes, st));
      return Status::ok();
    }
    return launched(prefix, launchReduce(ReduceOp::kSum, dtype, dtype, p, in,
                                         out, partials.get(), st));
  });
}

} // namespace

void registerCudaMatmulKernels(KernelRegistry &registry, CudaDevice &device) {
  CudaDevice *d = &device;
  registry.add("matmul", [d](const KernelContext &ctx) {
    return buildMatmul(*d, ctx);
  });
  registry.add("matmul_bias", [d](const KernelContext &ctx) {
    return buildMatmulBias(*d, ctx);
  });
  registry.add("matmul_bias_grad", [d](const KernelContext &ctx) {
    return buildMatmulBiasGrad(*d, ctx);
  });
}

} // namespace dtcc::runtime::cuda
