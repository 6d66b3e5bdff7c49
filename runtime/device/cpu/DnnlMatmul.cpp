//===- DnnlMatmul.cpp - strided batched GEMMs on oneDNN's matmul ----------===//

#include "runtime/device/cpu/DnnlMatmul.h"
#include "runtime/device/cpu/DnnlContext.h"
#include "runtime/device/cpu/ThreadPool.h"

#include <oneapi/dnnl/dnnl.h>

extern "C" void omp_set_num_threads(int);

namespace dtcc::runtime::cpu {
namespace {

/// The descriptor of one operand: `rows x cols` per GEMM, stored
/// transposed (column-major) or not, `batch` of them `stride` apart (0: one
/// matrix every GEMM reads, a batch dimension of 1 that broadcasts).
Status operandDesc(dnnl_memory_desc_t &md, int64_t batch, int64_t stride,
                   int64_t rows, int64_t cols, bool transposed,
                   dnnl_data_type_t type) {
  const int64_t rowStride = transposed ? 1 : cols;
  const int64_t colStride = transposed ? rows : 1;
  if (batch == 1) {
    dnnl_dims_t dims = {rows, cols}, strides = {rowStride, colStride};
    DTCC_DNNL_CHECK(dnnl_memory_desc_init_by_strides(&md, 2, dims, type, strides));
    return Status::ok();
  }
  dnnl_dims_t dims = {stride == 0 ? 1 : batch, rows, cols};
  dnnl_dims_t strides = {stride == 0 ? rows * cols : stride, rowStride,
                         colStride};
  DTCC_DNNL_CHECK(dnnl_memory_desc_init_by_strides(&md, 3, dims, type, strides));
  return Status::ok();
}

} // namespace

bool dnnlHasNativeBf16() {
  const unsigned isa = unsigned(dnnl_get_effective_cpu_isa());
  return (isa & unsigned(dnnl_cpu_isa_avx512_core_bf16)) ==
         unsigned(dnnl_cpu_isa_avx512_core_bf16);
}

struct DnnlMatmul::State {
  dnnl_primitive_t primitive = nullptr;
  dnnl_memory_t a = nullptr, b = nullptr, c = nullptr;
  dnnl_stream_t stream = nullptr;
  ~State() {
    for (dnnl_memory_t m : {a, b, c})
      if (m)
        dnnl_memory_destroy(m);
    if (primitive)
      dnnl_primitive_destroy(primitive);
  }
};

DnnlMatmul::~DnnlMatmul() = default;

StatusOr<std::unique_ptr<DnnlMatmul>>
DnnlMatmul::create(const GemmBatch &g, DnnlGemmType type, const void *a,
                   const void *b, void *c) {
  if (g.batch < 1 || g.m < 1 || g.n < 1 || g.k < 1)
    return invalidArgument("oneDNN matmul of an empty product (", g.batch,
                           " x ", g.m, " x ", g.n, " x ", g.k, ")");
  if (g.batch > 1 && g.strideA == 0 && g.strideB == 0)
    return unimplemented("oneDNN matmul with both operands broadcast");
  const DnnlContext &ctx = dnnlContext();
  DTCC_RETURN_IF_ERROR(ctx.status);
  // oneDNN fixes the threads a primitive partitions over when it is made.
  omp_set_num_threads(cpuThreads());
  const dnnl_data_type_t in = type == DnnlGemmType::kF32 ? dnnl_f32 : dnnl_bf16;
  const dnnl_data_type_t out = type == DnnlGemmType::kBF16 ? dnnl_bf16 : dnnl_f32;
  dnnl_memory_desc_t ma, mb, mc;
  DTCC_RETURN_IF_ERROR(
      operandDesc(ma, g.batch, g.strideA, g.m, g.k, g.transA, in));
  DTCC_RETURN_IF_ERROR(
      operandDesc(mb, g.batch, g.strideB, g.k, g.n, g.transB, in));
  DTCC_RETURN_IF_ERROR(
      operandDesc(mc, g.batch, g.strideC == 0 ? g.m * g.n : g.strideC, g.m,
                  g.n, false, out));
  dnnl_matmul_desc_t desc;
  DTCC_DNNL_CHECK(dnnl_matmul_desc_init(&desc, &ma, &mb, nullptr, &mc));
  dnnl_primitive_desc_t pd = nullptr;
  DTCC_DNNL_CHECK(
      dnnl_primitive_desc_create(&pd, &desc, nullptr, ctx.engine, nullptr));
  auto mm = std::unique_ptr<DnnlMatmul>(new DnnlMatmul());
  mm->state_ = std::make_unique<State>();
  State &s = *mm->state_;
  s.stream = ctx.stream;
  const char *impl = nullptr;
  if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) ==
          dnnl_success &&
      impl)
    mm->impl_ = impl;
  dnnl_status_t st = dnnl_primitive_create(&s.primitive, pd);
  dnnl_primitive_desc_destroy(pd);
  if (st != dnnl_success)
    return dnnlError(st, "dnnl_primitive_create");
  DTCC_DNNL_CHECK(dnnl_memory_create(&s.a, &ma, ctx.engine, const_cast<void *>(a)));
  DTCC_DNNL_CHECK(dnnl_memory_create(&s.b, &mb, ctx.engine, const_cast<void *>(b)));
  DTCC_DNNL_CHECK(dnnl_memory_create(&s.c, &mc, ctx.engine, c));
  return mm;
}

Status DnnlMatmul::run() {
  omp_set_num_threads(cpuThreads());
  State &s = *state_;
  dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, s.a},
                            {DNNL_ARG_WEIGHTS, s.b},
                            {DNNL_ARG_DST, s.c}};
  DTCC_DNNL_CHECK(dnnl_primitive_execute(s.primitive, s.stream, 3, args));
  DTCC_DNNL_CHECK(dnnl_stream_wait(s.stream));
  return Status::ok();
}

Status DnnlMatmul::run(const void *a, const void *b, void *c) {
  State &s = *state_;
  DTCC_DNNL_CHECK(dnnl_memory_set_data_handle(s.a, const_cast<void *>(a)));
  DTCC_DNNL_CHECK(dnnl_memory_set_data_handle(s.b, const_cast<void *>(b)));
  DTCC_DNNL_CHECK(dnnl_memory_set_data_handle(s.c, c));
  return run();
}

} // namespace dtcc::runtime::cpu
