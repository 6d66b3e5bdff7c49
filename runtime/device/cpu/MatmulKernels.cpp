//===- MatmulKernels.cpp - batched matrix products ------------------------===//
//
// dgraph.matmul with broadcast batch dimensions (runtime/base/MatmulShape.h:
// broadcast operands read with batch stride 0; one GEMM when a shared rhs
// lets the lhs batch fold into m).
//
// f32: oneDNN's matmul primitive (DnnlMatmul.h: one per kernel, created
// when the kernel is bound, transposes and batch strides as the operands'
// strides) where oneDNN runs its AVX-512 kernels and its brgemm kernels
// take the product, else OpenBLAS's cblas_sgemm. On one core of the two
// AVX-512 CPUs measured (`dtcc-bench-gemm-cpu`, bench/RESULTS.md)
// oneDNN's f32 matmul ran the benchmark GPTs' dense products at
// 0.98-1.26x the rate of OpenBLAS 0.3.21's AVX-512 kernels on an Emerald
// Rapids (1.04-1.26x the 4 x 128's, 0.98-1.08x the 6 x 384's; OpenBLAS
// zeroes each result in a pass of its own for beta = 0) and at 220-254
// GFLOP/s against 228-248 on a Zen 5. Its gemm:jit kernels, which take
// the pieces of a transposed lhs (read with a stride), allocate packing
// buffers on every call, outside the program's memory plan (6 MiB more
// resident for a 4-layer GPT of width 256): those products stay on
// OpenBLAS, and oneDNN costs about 3 MiB of JIT code per rank. Without
// AVX-512, where nothing was measured, OpenBLAS. DTCC_CPU_MATMUL=blas
// keeps every product on OpenBLAS (bf16 through f32 conversions; tests,
// comparisons), DTCC_CPU_MATMUL=dnnl puts every f32 product that oneDNN
// has vector kernels for on oneDNN, on any CPU.
// bf16: on CPUs with native bf16 (AVX512-BF16, AMX) oneDNN's bf16 matmul,
// bf16 operands and result with f32 accumulation; elsewhere, and for f16,
// the operands are converted to f32 scratch and multiplied as f32. Without
// AMX (this project's Emerald Rapids VM hides it) oneDNN 2.6's bf16 matmul
// runs at 0.5-0.75x its f32 matmul (vdpbf16ps has the f32 FMAs' peak and
// the operands are reformatted per call), but converting to f32 costs more:
// the 4 x 128 GPT's bf16 step spent 10-20% less in matrix products on the
// native bf16 matmul than on conversions + oneDNN f32, and 86 MiB less
// memory (the conversions' f32 copies, then one set per product; now
// they share the program's compute scratch: bindInF32).
// f64 through OpenBLAS; integers with a naive loop that accumulates in
// int64.
//
//===----------------------------------------------------------------------===//

#include "runtime/base/MatmulShape.h"
#include "runtime/device/cpu/BlasCore.h"
#include "runtime/device/cpu/CpuKernelUtils.h"
#include "runtime/device/cpu/DnnlMatmul.h"
#include "runtime/device/cpu/ThreadPool.h"

#include <cblas.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

namespace dtcc::runtime {
namespace {

using namespace cpu;

using MatmulPlan = MatmulShape;

/// Rows [i0, i1) of one product C = op(A) op(B) of
/// the plan, through cblas (T is float or double).
template <typename T>
void gemmBlock(const MatmulPlan &p, const T *a, const T *b, T *c, int64_t i0,
               int64_t i1) {
  const int lda = int(std::max<int64_t>(1, p.transLhs ? p.m : p.k));
  const int ldb = int(std::max<int64_t>(1, p.transRhs ? p.k : p.n));
  const int ldc = int(std::max<int64_t>(1, p.n));
  // Row i of op(A): A[i, :] (row-major m x k) or A[:, i] (stored k x m).
  const T *pa = a + (p.transLhs ? i0 : i0 * p.k);
  T *pc = c + i0 * p.n;
  const auto ta = p.transLhs ? CblasTrans : CblasNoTrans;
  const auto tb = p.transRhs ? CblasTrans : CblasNoTrans;
  const int m = int(i1 - i0), n = int(p.n), k = int(p.k);
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, pa, lda, b, ldb, 0.0f,
                pc, ldc);
  else
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, pa, lda, b, ldb, 0.0,
                pc, ldc);
}

/// Products below this many multiply-adds run on one thread (waking the
/// other threads would cost more than their share saves).
constexpr int64_t kSplitMacs = int64_t(1) << 18;
/// Row blocks are multiples of this: whole micro-tiles of OpenBLAS's
/// kernels, so that each row is computed as in one call: for sgemm the
/// kernels' own (sgemmRowAlign: 32 rows on the AVX-512 families, 12 on
/// Haswell/Zen), so that 1024 rows split evenly over two threads (in
/// 96-row blocks one of them took 576); 96 (both) for dgemm and other
/// kernels. Columns are never split: on the Zen kernels an element's bits
/// depend on where its column falls in the call (measured on an AMD EPYC:
/// no alignment of a column split reproduces the whole call).
template <typename T> int64_t blockAlign() {
  if constexpr (std::is_same_v<T, float>) {
    static const int64_t align = [] {
      const char *core = openblas_get_corename();
      return sgemmRowAlign(core ? core : "");
    }();
    return align;
  }
  return 96;
}

/// OpenBLAS on the calling thread only: the products are split over the
/// kernels' threads (ThreadPool.h) here, so that one set of threads runs
/// the whole step. OpenBLAS's own workers would otherwise poll beside the
/// pool's after every product and take the cores the elementwise kernels
/// need. Called when a product is bound.
void blasOnCallingThread() {
  static const bool once = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)once;
}

/// Every GEMM of the plan through BLAS (T is float or double), split over
/// the kernels' threads: whole products when there are at least as many
/// as threads, else each product's rows in aligned blocks (a product of
/// fewer than two blocks of rows runs on one thread). Every element is
/// computed as one cblas call computes it whatever the split, so results
/// do not depend on the thread count (DtccKernelThreadsTests).
template <typename T>
void blasBatch(const MatmulPlan &p, const T *a, const T *b, T *c) {
  if (p.m == 0 || p.n == 0)
    return;
  const int64_t products = p.groups() * p.count;
  auto one = [&](int64_t index, int64_t i0, int64_t i1) {
    const int64_t g = index / p.count, i = index % p.count;
    T *out = c + p.outOffsets[g] + i * p.outStride;
    if (p.k == 0) {
      for (int64_t r = i0; r < i1; ++r)
        std::fill(out + r * p.n, out + (r + 1) * p.n, T(0));
      return;
    }
    gemmBlock(p, a + p.lhsOffsets[g] + i * p.lhsStride,
              b + p.rhsOffsets[g] + i * p.rhsStride, out, i0, i1);
  };
  const int64_t macs = p.m * p.n * std::max<int64_t>(1, p.k);
  const int threads = cpuThreads();
  const int64_t align = blockAlign<T>();
  const int64_t blocks = (p.m + align - 1) / align;
  if (threads < 2 || products * macs < 2 * kSplitMacs ||
      (products < threads && blocks < 2)) {
    for (int64_t x = 0; x < products; ++x)
      one(x, 0, p.m);
    return;
  }
  if (products >= threads) {
    parallelFor(products, std::max<int64_t>(1, kSplitMacs / macs),
                [&](int64_t begin, int64_t end, int) {
                  for (int64_t x = begin; x < end; ++x)
                    one(x, 0, p.m);
                });
    return;
  }
  for (int64_t x = 0; x < products; ++x)
    parallelFor(blocks, 1, [&](int64_t begin, int64_t end, int) {
      one(x, begin * align, std::min(p.m, end * align));
    });
}

/// DTCC_CPU_MATMUL: "blas" keeps every product on OpenBLAS (bf16 through
/// f32 conversions), "dnnl" puts f32 products on oneDNN on any CPU.
bool matmulEnvIs(const char *backend) {
  const char *v = std::getenv("DTCC_CPU_MATMUL");
  return v && std::strcmp(v, backend) == 0;
}
bool forceBlas() { return matmulEnvIs("blas"); }

/// The f32 products that go to oneDNN: by default, where it runs its
/// AVX-512 kernels, those its brgemm kernels take; with
/// DTCC_CPU_MATMUL=dnnl every one it has vector kernels for; none with
/// DTCC_CPU_MATMUL=blas. Like OpenBLAS's kernel family, the choice
/// follows the CPU itself, not DTCC_CPU_ISA.
enum class F32OnDnnl { kNone, kBrgemm, kAll };
F32OnDnnl f32OnDnnl() {
  if (forceBlas())
    return F32OnDnnl::kNone;
  if (matmulEnvIs("dnnl"))
    return F32OnDnnl::kAll;
  static const bool avx512 = dnnlHasAvx512Core();
  return avx512 ? F32OnDnnl::kBrgemm : F32OnDnnl::kNone;
}

/// One strided batch of the plan as oneDNN sees it.
GemmBatch gemmBatch(const MatmulPlan &p) {
  GemmBatch g;
  g.batch = p.count, g.m = p.m, g.n = p.n, g.k = p.k;
  g.transA = p.transLhs, g.transB = p.transRhs;
  g.strideA = p.lhsStride, g.strideB = p.rhsStride, g.strideC = p.outStride;
  return g;
}

/// oneDNN products are cut into pieces that the kernels' threads run side
/// by side, each on a single-threaded primitive (DnnlMatmul.h): along the
/// batch where there is one, else along the rows in multiples of
/// kPieceRowAlign. The cut depends on the product's shape only (about
/// kParallelMacs multiply-adds and at least kPieceRows rows a piece, at most
/// kMaxPieces pieces, their number a power of two so that 2, 4, 8 or 16
/// threads share them evenly: a 1024-row product cut in five pieces of 224
/// rows kept one of two threads on three), never on the thread count, so
/// results do not either. oneDNN's own OpenMP partition of a product did poorly
/// on small ones: the 4 x 128 GPT's bf16 products took 12.4 ms a step on one
/// thread and 11.4 on two (7.6 in pieces). Each piece packs the right-hand
/// operand again: pieces of at least 128 rows cost the 6 x 384 GPT's
/// products 2-3% on one thread, of 192 rows about 1% (bench/RESULTS.md).
constexpr int64_t kPieceRows = 192;
constexpr int64_t kMaxPieces = 16;
constexpr int64_t kPieceRowAlign = 32;

/// The plan on oneDNN (operands of element size `elem` bytes, result of
/// `outElem`), in pieces as above: one primitive for the pieces' size and
/// one for the last piece where it is shorter, bound to the first group's
/// buffers; every group and piece runs on them with its own pointers. Null
/// where oneDNN cannot take the plan (an empty product, no
/// implementation): the caller falls back.
KernelFn makeDnnl(const MatmulPlan &p, DnnlGemmType type, size_t elem,
                  size_t outElem, const void *a, const void *b, void *c,
                  bool brgemmOnly = false) {
  if (p.m == 0 || p.n == 0 || p.k == 0)
    return nullptr;
  const char *ca = static_cast<const char *>(a);
  const char *cb = static_cast<const char *>(b);
  char *cc = static_cast<char *>(c);
  const bool byBatch = p.count > 1;
  const int64_t extent = byBatch ? p.count : p.m;
  const int64_t align = byBatch ? 1 : kPieceRowAlign;
  const int64_t macs = p.count * p.m * p.n * p.k;
  const int64_t fit = std::clamp<int64_t>(
      std::min(macs / kParallelMacs, byBatch ? extent : extent / kPieceRows), 1,
      kMaxPieces);
  int64_t wanted = 1;
  while (wanted * 2 <= fit)
    wanted *= 2;
  const int64_t share = ((extent + wanted - 1) / wanted + align - 1) / align;
  const int64_t pieceSize = std::min(extent, share * align);
  const int64_t pieces = (extent + pieceSize - 1) / pieceSize;
  const int64_t last = extent - (pieces - 1) * pieceSize;
  // Where piece j starts, in elements of A, B and C.
  const int64_t stepA = byBatch ? pieceSize * p.lhsStride
                        : p.transLhs ? pieceSize
                                     : pieceSize * p.k;
  const int64_t stepB = byBatch ? pieceSize * p.rhsStride : 0;
  const int64_t stepC = byBatch ? pieceSize * p.outStride : pieceSize * p.n;
  // parallelFor below gives its units to workers 0 .. min(threads, units)
  // - 1: only those need memory objects and a stream of their own.
  const int64_t units = p.groups() * pieces;
  const int workers = int(std::clamp<int64_t>(units, 1, cpuThreads()));
  auto make = [&](int64_t n) -> std::shared_ptr<DnnlMatmul> {
    GemmBatch g = gemmBatch(p);
    (byBatch ? g.batch : g.m) = n;
    if (!byBatch && p.transLhs)
      g.ldA = p.m;
    auto mm = DnnlMatmul::create(
        g, type, ca + p.lhsOffsets[0] * elem, cb + p.rhsOffsets[0] * elem,
        cc + p.outOffsets[0] * outElem, workers, brgemmOnly);
    if (!mm.isOk())
      return nullptr;
    return std::move(mm).value();
  };
  std::shared_ptr<DnnlMatmul> whole = make(pieceSize);
  std::shared_ptr<DnnlMatmul> tail = last == pieceSize ? whole : make(last);
  if (!whole || !tail)
    return nullptr;
  return [=]() -> Status {
    Status failed;
    std::mutex mutex;
    parallelFor(units, 1, [&](int64_t begin, int64_t end, int worker) {
      for (int64_t u = begin; u < end; ++u) {
        const int64_t g = u / pieces, j = u % pieces;
        DnnlMatmul &prim = j == pieces - 1 ? *tail : *whole;
        Status st = prim.run(ca + (p.lhsOffsets[g] + j * stepA) * elem,
                             cb + (p.rhsOffsets[g] + j * stepB) * elem,
                             cc + (p.outOffsets[g] + j * stepC) * outElem,
                             worker);
        if (!st.isOk()) {
          std::lock_guard<std::mutex> lock(mutex);
          failed = std::move(st);
          return;
        }
      }
    });
    return failed;
  };
}

/// f32 products: oneDNN where f32OnDnnl() takes the plan, else OpenBLAS.
KernelFn makeF32(const MatmulPlan &p, const float *a, const float *b,
                 float *c) {
  const F32OnDnnl onDnnl = f32OnDnnl();
  if (onDnnl != F32OnDnnl::kNone)
    if (KernelFn fn =
            makeDnnl(p, DnnlGemmType::kF32, sizeof(float), sizeof(float), a, b,
                     c, onDnnl == F32OnDnnl::kBrgemm))
      return fn;
  blasOnCallingThread();
  return [p, a, b, c]() -> Status {
    blasBatch<float>(p, a, b, c);
    return Status::ok();
  };
}

/// The naive product for the other dtypes: int64 (or double) accumulators
/// over one output row, preallocated.
template <typename S>
KernelFn makeNaive(const MatmulPlan &p, const S *a, const S *b, S *c) {
  using Acc = std::conditional_t<
      kIsFloat<S>, double,
      std::conditional_t<std::is_signed_v<S>, int64_t, uint64_t>>;
  auto row = std::make_shared<std::vector<Acc>>(p.n);
  return [p, a, b, c, row]() -> Status {
    Acc *acc = row->data();
    for (int64_t g = 0; g < p.groups(); ++g)
      for (int64_t bi = 0; bi < p.count; ++bi) {
        const S *lhs = a + p.lhsOffsets[g] + bi * p.lhsStride;
        const S *rhs = b + p.rhsOffsets[g] + bi * p.rhsStride;
        S *out = c + p.outOffsets[g] + bi * p.outStride;
        for (int64_t i = 0; i < p.m; ++i) {
          std::fill(acc, acc + p.n, Acc(0));
          for (int64_t kk = 0; kk < p.k; ++kk) {
            const Acc x = Acc(Elem<S>::load(p.transLhs ? lhs[kk * p.m + i]
                                                       : lhs[i * p.k + kk]));
            if (p.transRhs) {
              for (int64_t j = 0; j < p.n; ++j)
                acc[j] = wrapAdd(
                    acc[j], wrapMul(x, Acc(Elem<S>::load(rhs[j * p.k + kk]))));
            } else {
              const S *r = rhs + kk * p.n;
              for (int64_t j = 0; j < p.n; ++j)
                acc[j] = wrapAdd(acc[j], wrapMul(x, Acc(Elem<S>::load(r[j]))));
            }
          }
          for (int64_t j = 0; j < p.n; ++j)
            out[i * p.n + j] = Elem<S>::store(ComputeT<S>(acc[j]));
        }
      }
    return Status::ok();
  };
}

/// f16/bf16: bf16 on oneDNN's native bf16 matmul where the CPU has one;
/// else both operands widened to f32 copies, multiplied as f32, rounded
/// back (bindInF32).
template <typename S>
StatusOr<KernelFn> makeHalfGemm(const KernelContext &ctx, const MatmulPlan &p,
                                const S *a, const S *b, S *c) {
  if (!halfProductsInF32(std::is_same_v<S, BFloat16> ? DType::kBF16
                                                     : DType::kF16))
    if (KernelFn fn =
            makeDnnl(p, DnnlGemmType::kBF16, sizeof(S), sizeof(S), a, b, c))
      return fn;
  return bindInF32<S>(ctx, 2, [p](const std::vector<float *> &f) {
    return StatusOr<KernelFn>(makeF32(p, f[0], f[1], f[2]));
  });
}

StatusOr<KernelFn> buildMatmul(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView &lhs = ctx.inputs[0], &rhs = ctx.inputs[1],
                   &out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, rhs, lhs.dtype, "input 1"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, lhs.dtype, "output 0"));
  auto plan = planMatmul(lhs.shape, rhs.shape, ctx.attrs.getBool("transpose_lhs"),
                         ctx.attrs.getBool("transpose_rhs"));
  if (!plan.isOk())
    return ctx.error(plan.status().message(), " (", lhs.typeString(), " x ",
                     rhs.typeString(), ")");
  const MatmulPlan p = plan.value();
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, p.resultShape, "output 0"));
  if (std::max({p.m, p.n, p.k}) > INT32_MAX)
    return ctx.error("matrix dimensions exceed the BLAS 32-bit limit");
  StatusOr<KernelFn> fn = KernelFn();
  const void *a = lhs.data, *b = rhs.data;
  void *c = out.data;
  if (!visitDType<kSetNumeric>(lhs.dtype, [&](auto tag) {
        using S = typename decltype(tag)::type;
        const S *sa = static_cast<const S *>(a);
        const S *sb = static_cast<const S *>(b);
        S *sc = static_cast<S *>(c);
        if constexpr (std::is_same_v<S, float>)
          fn = makeF32(p, sa, sb, sc);
        else if constexpr (std::is_floating_point_v<S>)
          fn = KernelFn([p, sa, sb, sc]() -> Status {
            blasOnCallingThread();
            blasBatch<S>(p, sa, sb, sc);
            return Status::ok();
          });
        else if constexpr (kIsFloat<S>)
          fn = makeHalfGemm<S>(ctx, p, sa, sb, sc);
        else
          fn = makeNaive<S>(p, sa, sb, sc);
      }))
    return unsupportedDType(ctx, lhs.dtype, kSetNumeric);
  return fn;
}

/// A kernel of the CPU registry bound to `inputs` and `outputs` for `ctx`'s
/// instruction: a part of a fused op the CPU runs unfused.
StatusOr<KernelFn> bindPart(const KernelContext &ctx, const std::string &kernel,
                            std::vector<TensorView> inputs,
                            std::vector<TensorView> outputs, Attrs attrs) {
  const KernelFactory *factory = cpuKernels().find(kernel);
  if (!factory)
    return internalError(cpu::errorPrefix(ctx), "no ", kernel, " kernel");
  KernelContext part = ctx;
  part.kernel = kernel;
  part.inputs = std::move(inputs);
  part.outputs = std::move(outputs);
  part.attrs = std::move(attrs);
  return (*factory)(part);
}

/// The fused op's product: the matmul kernel on its lhs, rhs and first
/// output, with its transposes.
StatusOr<KernelFn> bindProduct(const KernelContext &ctx) {
  Attrs transposes;
  for (const char *flag : {"transpose_lhs", "transpose_rhs"})
    transposes.set(flag, int64_t(ctx.attrs.getBool(flag)));
  return bindPart(ctx, "matmul", {ctx.inputs[0], ctx.inputs[1]},
                  {ctx.outputs[0]}, std::move(transposes));
}

/// `first`, then `second`.
KernelFn inOrder(KernelFn first, KernelFn second) {
  return [first = std::move(first), second = std::move(second)]() -> Status {
    DTCC_RETURN_IF_ERROR(first());
    return second();
  };
}

/// matmul_bias_grad as the unfused program runs it: the matmul kernel,
/// then reduce_sum over the summed operand's rows (so its results to the
/// bit; on the CPU the product and the sums are two passes either way).
StatusOr<KernelFn> buildMatmulBiasGrad(const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(int64_t summed, checkMatmulBiasGrad(ctx));
  DTCC_ASSIGN_OR_RETURN(KernelFn multiply, bindProduct(ctx));
  Attrs rows;
  rows.set("dims", std::vector<int64_t>{0});
  DTCC_ASSIGN_OR_RETURN(
      KernelFn sum, bindPart(ctx, "reduce_sum", {ctx.inputs[size_t(summed)]},
                             {ctx.outputs[1]}, std::move(rows)));
  return inOrder(std::move(multiply), std::move(sum));
}

/// matmul_bias as the unfused program runs it: the matmul kernel, then the
/// add kernel of the bias broadcast over the rows, in place.
StatusOr<KernelFn> buildMatmulBias(const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(KernelFn multiply, bindProduct(ctx));
  DTCC_RETURN_IF_ERROR(checkMatmulBias(ctx));
  const TensorView &out = ctx.outputs[0], &bias = ctx.inputs[2];
  TensorView rows = bias;
  rows.shape = out.shape;
  rows.strides.assign(out.shape.size(), 0);
  rows.strides.back() = bias.strides.empty() ? 1 : bias.strides[0];
  DTCC_ASSIGN_OR_RETURN(KernelFn addBias,
                        bindPart(ctx, "add", {out, rows}, {out}, Attrs()));
  return inOrder(std::move(multiply), std::move(addBias));
}

} // namespace

void registerCpuMatmulKernels(KernelRegistry &registry) {
  registry.add("matmul_bias", buildMatmulBias);
  registry.add("matmul", buildMatmul);
  registry.add("matmul_bias_grad", buildMatmulBiasGrad);
}

bool cpu::halfProductsInF32(DType dtype) {
  return dtype == DType::kF16 ||
         (dtype == DType::kBF16 && (forceBlas() || !dnnlHasNativeBf16()));
}

std::string cpu::halfProductsNote(const std::string &dtype) {
  const DType d = dtype == "bf16"   ? DType::kBF16
                  : dtype == "fp16" ? DType::kF16
                                    : DType::kF32;
  if (d == DType::kF32 || !halfProductsInF32(d))
    return "";
  return "note: --dtype " + dtype + ": " +
         (d == DType::kF16
              ? std::string("the CPU computes fp16 matrix products and "
                            "convolutions")
              : std::string("this CPU has neither AVX512-BF16 nor AMX (or "
                            "DTCC_CPU_MATMUL=blas), so bf16 matrix products "
                            "and convolutions are computed")) +
         " in f32 copies of their operands, at about fp32's speed\n";
}

} // namespace dtcc::runtime
