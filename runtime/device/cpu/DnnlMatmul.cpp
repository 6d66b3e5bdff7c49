//===- DnnlMatmul.cpp - strided batched GEMMs on oneDNN's matmul ----------===//

#include "runtime/device/cpu/DnnlMatmul.h"
#include "runtime/device/cpu/DnnlContext.h"
#include "runtime/device/cpu/ThreadPool.h"

#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

extern "C" void omp_set_num_threads(int);

namespace dtcc::runtime::cpu {
namespace {

/// The descriptor of one operand: `rows x cols` per GEMM, stored
/// transposed (column-major) or not with leading dimension `ld` (0: dense),
/// `batch` of them `stride` apart (0: one matrix every GEMM reads, a batch
/// dimension of 1 that broadcasts).
Status operandDesc(dnnl_memory_desc_t &md, int64_t batch, int64_t stride,
                   int64_t rows, int64_t cols, bool transposed, int64_t ld,
                   dnnl_data_type_t type) {
  const int64_t lead = ld > 0 ? ld : transposed ? rows : cols;
  const int64_t rowStride = transposed ? 1 : lead;
  const int64_t colStride = transposed ? lead : 1;
  if (batch == 1) {
    dnnl_dims_t dims = {rows, cols}, strides = {rowStride, colStride};
    DTCC_DNNL_CHECK(dnnl_memory_desc_init_by_strides(&md, 2, dims, type, strides));
    return Status::ok();
  }
  dnnl_dims_t dims = {stride == 0 ? 1 : batch, rows, cols};
  dnnl_dims_t strides = {stride == 0 ? rows * lead : stride, rowStride,
                         colStride};
  DTCC_DNNL_CHECK(dnnl_memory_desc_init_by_strides(&md, 3, dims, type, strides));
  return Status::ok();
}

/// The calling thread's scratchpad for single-threaded primitives: one
/// buffer per thread, as large as the largest primitive it ran needs (a
/// thread runs one primitive at a time, so every primitive shares it, as
/// oneDNN's own library scratchpad is shared). Page-aligned, as oneDNN
/// aligns the parts it carves out of it relative to its start.
void *threadScratchpad(size_t bytes) {
  struct Buffer {
    void *data = nullptr;
    size_t capacity = 0;
    ~Buffer() { std::free(data); }
  };
  thread_local Buffer buffer;
  if (bytes > buffer.capacity) {
    constexpr size_t kPage = 4096;
    std::free(buffer.data);
    buffer.capacity = (bytes + kPage - 1) / kPage * kPage;
    buffer.data = std::aligned_alloc(kPage, buffer.capacity);
    if (!buffer.data)
      buffer.capacity = 0;
  }
  return buffer.data;
}

} // namespace

bool dnnlHasNativeBf16() {
  const unsigned isa = unsigned(dnnl_get_effective_cpu_isa());
  return (isa & unsigned(dnnl_cpu_isa_avx512_core_bf16)) ==
         unsigned(dnnl_cpu_isa_avx512_core_bf16);
}

bool dnnlHasAvx512Core() {
  const unsigned isa = unsigned(dnnl_get_effective_cpu_isa());
  return (isa & unsigned(dnnl_cpu_isa_avx512_core)) ==
         unsigned(dnnl_cpu_isa_avx512_core);
}

/// Memory objects bound to one caller's buffers; in the single-threaded
/// mode also its own stream and a scratchpad object, so that the kernels'
/// threads can run the primitive at once (oneDNN's library scratchpad is
/// shared by every primitive and may not migrate between threads).
struct DnnlMatmul::Slot {
  dnnl_memory_t a = nullptr, b = nullptr, c = nullptr, scratch = nullptr;
  dnnl_stream_t stream = nullptr;
  bool ownStream = false;
  ~Slot() {
    for (dnnl_memory_t m : {a, b, c, scratch})
      if (m)
        dnnl_memory_destroy(m);
    if (ownStream && stream)
      dnnl_stream_destroy(stream);
  }
};

struct DnnlMatmul::State {
  dnnl_primitive_t primitive = nullptr;
  /// 1 in the single-threaded mode, else the kernels' thread count.
  int ompThreads = 1;
  std::vector<Slot> slots;
  /// Bytes of scratchpad a call needs (single-threaded mode).
  size_t scratchBytes = 0;
  ~State() {
    slots.clear();
    if (primitive)
      dnnl_primitive_destroy(primitive);
  }
};

DnnlMatmul::~DnnlMatmul() = default;

StatusOr<std::unique_ptr<DnnlMatmul>>
DnnlMatmul::create(const GemmBatch &g, DnnlGemmType type, const void *a,
                   const void *b, void *c, int workers, bool brgemmOnly) {
  if (g.batch < 1 || g.m < 1 || g.n < 1 || g.k < 1)
    return invalidArgument("oneDNN matmul of an empty product (", g.batch,
                           " x ", g.m, " x ", g.n, " x ", g.k, ")");
  if (g.batch > 1 && g.strideA == 0 && g.strideB == 0)
    return unimplemented("oneDNN matmul with both operands broadcast");
  const DnnlContext &ctx = dnnlContext();
  DTCC_RETURN_IF_ERROR(ctx.status);
  auto mm = std::unique_ptr<DnnlMatmul>(new DnnlMatmul());
  mm->state_ = std::make_unique<State>();
  State &s = *mm->state_;
  // oneDNN fixes the threads a primitive partitions over when it is made.
  s.ompThreads = workers > 0 ? 1 : cpuThreads();
  omp_set_num_threads(s.ompThreads);
  struct RestoreThreads {
    ~RestoreThreads() { omp_set_num_threads(cpuThreads()); }
  } restore;
  const dnnl_data_type_t in = type == DnnlGemmType::kF32 ? dnnl_f32 : dnnl_bf16;
  const dnnl_data_type_t out = type == DnnlGemmType::kBF16 ? dnnl_bf16 : dnnl_f32;
  dnnl_memory_desc_t ma, mb, mc;
  DTCC_RETURN_IF_ERROR(
      operandDesc(ma, g.batch, g.strideA, g.m, g.k, g.transA, g.ldA, in));
  DTCC_RETURN_IF_ERROR(
      operandDesc(mb, g.batch, g.strideB, g.k, g.n, g.transB, 0, in));
  DTCC_RETURN_IF_ERROR(
      operandDesc(mc, g.batch, g.strideC == 0 ? g.m * g.n : g.strideC, g.m,
                  g.n, false, 0, out));
  dnnl_matmul_desc_t desc;
  DTCC_DNNL_CHECK(dnnl_matmul_desc_init(&desc, &ma, &mb, nullptr, &mc));
  dnnl_primitive_attr_t attr = nullptr;
  DTCC_DNNL_CHECK(dnnl_primitive_attr_create(&attr));
  dnnl_status_t st = workers > 0 ? dnnl_primitive_attr_set_scratchpad_mode(
                                       attr, dnnl_scratchpad_mode_user)
                                 : dnnl_success;
  dnnl_primitive_desc_t pd = nullptr;
  if (st == dnnl_success)
    st = dnnl_primitive_desc_create(&pd, &desc, attr, ctx.engine, nullptr);
  dnnl_primitive_attr_destroy(attr);
  if (st != dnnl_success)
    return dnnlError(st, "dnnl_primitive_desc_create");
  const char *impl = nullptr;
  if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) ==
          dnnl_success &&
      impl)
    mm->impl_ = impl;
  const bool reference = mm->impl_.rfind("ref", 0) == 0;
  if (reference || (brgemmOnly && mm->impl_.rfind("brg", 0) != 0)) {
    dnnl_primitive_desc_destroy(pd);
    return unimplemented("oneDNN matmul of ", g.batch, " x ", g.m, " x ", g.n,
                         " x ", g.k, " by ", mm->impl_,
                         reference ? ", its reference code"
                                   : ", not its brgemm kernels");
  }
  dnnl_memory_desc_t scratchMd{};
  if (workers > 0)
    if (const dnnl_memory_desc_t *q =
            dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0))
      scratchMd = *q;
  st = dnnl_primitive_create(&s.primitive, pd);
  dnnl_primitive_desc_destroy(pd);
  if (st != dnnl_success)
    return dnnlError(st, "dnnl_primitive_create");
  s.scratchBytes = workers > 0 ? dnnl_memory_desc_get_size(&scratchMd) : 0;
  s.slots = std::vector<Slot>(std::max(1, workers));
  for (Slot &slot : s.slots) {
    DTCC_DNNL_CHECK(dnnl_memory_create(&slot.a, &ma, ctx.engine, const_cast<void *>(a)));
    DTCC_DNNL_CHECK(dnnl_memory_create(&slot.b, &mb, ctx.engine, const_cast<void *>(b)));
    DTCC_DNNL_CHECK(dnnl_memory_create(&slot.c, &mc, ctx.engine, c));
    if (workers == 0) {
      slot.stream = ctx.stream;
      continue;
    }
    DTCC_DNNL_CHECK(dnnl_stream_create(&slot.stream, ctx.engine,
                                       dnnl_stream_default_flags));
    slot.ownStream = true;
    if (s.scratchBytes > 0)
      DTCC_DNNL_CHECK(dnnl_memory_create(&slot.scratch, &scratchMd, ctx.engine,
                                         DNNL_MEMORY_NONE));
  }
  return mm;
}

Status DnnlMatmul::execute(Slot &slot) {
  omp_set_num_threads(state_->ompThreads);
  if (slot.scratch) {
    void *scratch = threadScratchpad(state_->scratchBytes);
    if (!scratch)
      return internalError("cannot allocate ", state_->scratchBytes,
                           " bytes of oneDNN matmul scratchpad");
    DTCC_DNNL_CHECK(dnnl_memory_set_data_handle(slot.scratch, scratch));
  }
  dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, slot.a},
                            {DNNL_ARG_WEIGHTS, slot.b},
                            {DNNL_ARG_DST, slot.c},
                            {DNNL_ARG_SCRATCHPAD, slot.scratch}};
  DTCC_DNNL_CHECK(dnnl_primitive_execute(state_->primitive, slot.stream,
                                         slot.scratch ? 4 : 3, args));
  DTCC_DNNL_CHECK(dnnl_stream_wait(slot.stream));
  return Status::ok();
}

Status DnnlMatmul::run() { return execute(state_->slots[0]); }

Status DnnlMatmul::run(const void *a, const void *b, void *c, int worker) {
  std::vector<Slot> &slots = state_->slots;
  if (worker < 0 || size_t(worker) >= slots.size())
    return internalError("oneDNN matmul run by worker ", worker, " of ",
                         slots.size(), " it was made for");
  Slot &slot = slots[size_t(worker)];
  DTCC_DNNL_CHECK(dnnl_memory_set_data_handle(slot.a, const_cast<void *>(a)));
  DTCC_DNNL_CHECK(dnnl_memory_set_data_handle(slot.b, const_cast<void *>(b)));
  DTCC_DNNL_CHECK(dnnl_memory_set_data_handle(slot.c, c));
  return execute(slot);
}

} // namespace dtcc::runtime::cpu
