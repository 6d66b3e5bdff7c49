//===- MatmulKernels.cpp - batched matrix products ------------------------===//
//
// f32/f64 through OpenBLAS (one GEMM when a shared rhs lets the lhs batch
// fold into m), f16/bf16 through f32 scratch buffers, integers with a naive
// loop that accumulates in int64.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/CpuKernelUtils.h"

#include <cblas.h>

#include <algorithm>
#include <memory>

namespace dtcc::runtime {
namespace {

using namespace cpu;

/// The shape of a (batched) product: `batch` GEMMs of [m, k] x [k, n], the
/// lhs advancing by lhsStep elements per batch and the rhs by rhsStep (0
/// when shared).
struct MatmulPlan {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  int64_t lhsStep = 0, rhsStep = 0, outStep = 0;
  bool transLhs = false, transRhs = false;
};

void gemm(const MatmulPlan &p, const float *a, const float *b, float *c) {
  cblas_sgemm(CblasRowMajor, p.transLhs ? CblasTrans : CblasNoTrans,
              p.transRhs ? CblasTrans : CblasNoTrans, int(p.m), int(p.n),
              int(p.k), 1.0f, a,
              int(std::max<int64_t>(1, p.transLhs ? p.m : p.k)), b,
              int(std::max<int64_t>(1, p.transRhs ? p.k : p.n)), 0.0f, c,
              int(std::max<int64_t>(1, p.n)));
}
void gemm(const MatmulPlan &p, const double *a, const double *b, double *c) {
  cblas_dgemm(CblasRowMajor, p.transLhs ? CblasTrans : CblasNoTrans,
              p.transRhs ? CblasTrans : CblasNoTrans, int(p.m), int(p.n),
              int(p.k), 1.0, a,
              int(std::max<int64_t>(1, p.transLhs ? p.m : p.k)), b,
              int(std::max<int64_t>(1, p.transRhs ? p.k : p.n)), 0.0, c,
              int(std::max<int64_t>(1, p.n)));
}

/// Every GEMM of the plan through BLAS (T is float or double).
template <typename T>
void blasBatch(const MatmulPlan &p, const T *a, const T *b, T *c) {
  if (p.m == 0 || p.n == 0)
    return;
  if (p.k == 0) {
    std::fill(c, c + p.batch * p.outStep, T(0));
    return;
  }
  for (int64_t i = 0; i < p.batch; ++i)
    gemm(p, a + i * p.lhsStep, b + i * p.rhsStep, c + i * p.outStep);
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
    for (int64_t bi = 0; bi < p.batch; ++bi) {
      const S *lhs = a + bi * p.lhsStep;
      const S *rhs = b + bi * p.rhsStep;
      S *out = c + bi * p.outStep;
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

/// f16/bf16: convert both operands to f32 scratch, sgemm, round back.
template <typename S>
KernelFn makeHalfGemm(const MatmulPlan &p, const S *a, const S *b, S *c,
                      int64_t lhsNumel, int64_t rhsNumel, int64_t outNumel) {
  auto sa = std::make_shared<std::vector<float>>(lhsNumel);
  auto sb = std::make_shared<std::vector<float>>(rhsNumel);
  auto sc = std::make_shared<std::vector<float>>(outNumel);
  return [=]() -> Status {
    float *fa = sa->data(), *fb = sb->data(), *fc = sc->data();
    for (int64_t i = 0; i < lhsNumel; ++i)
      fa[i] = Elem<S>::load(a[i]);
    for (int64_t i = 0; i < rhsNumel; ++i)
      fb[i] = Elem<S>::load(b[i]);
    blasBatch<float>(p, fa, fb, fc);
    for (int64_t i = 0; i < outNumel; ++i)
      c[i] = Elem<S>::store(fc[i]);
    return Status::ok();
  };
}

StatusOr<KernelFn> buildMatmul(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(expectArity(ctx, 2, 1));
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView &lhs = ctx.inputs[0], &rhs = ctx.inputs[1],
                   &out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, rhs, lhs.dtype, "input 1"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, lhs.dtype, "output 0"));
  if (lhs.rank() < 2 || rhs.rank() < 2)
    return ctx.error("expected operands of rank >= 2, got ", lhs.typeString(),
                     " and ", rhs.typeString());
  const bool shared = rhs.rank() == 2 && lhs.rank() > 2;
  if (!shared && lhs.rank() != rhs.rank())
    return ctx.error("expected operands of one rank or a rank-2 rhs, got ",
                     lhs.typeString(), " and ", rhs.typeString());
  MatmulPlan p;
  p.transLhs = ctx.attrs.getBool("transpose_lhs");
  p.transRhs = ctx.attrs.getBool("transpose_rhs");
  const int64_t lr = lhs.rank(), rr = rhs.rank();
  p.m = lhs.shape[lr - (p.transLhs ? 1 : 2)];
  int64_t kl = lhs.shape[lr - (p.transLhs ? 2 : 1)];
  int64_t kr = rhs.shape[rr - (p.transRhs ? 1 : 2)];
  p.n = rhs.shape[rr - (p.transRhs ? 2 : 1)];
  if (kl != kr)
    return ctx.error("contracted dimensions differ: ", kl, " (lhs ",
                     lhs.typeString(), ") vs ", kr, " (rhs ", rhs.typeString(),
                     ")");
  p.k = kl;
  std::vector<int64_t> batchDims(lhs.shape.begin(), lhs.shape.end() - 2);
  if (!shared) {
    std::vector<int64_t> rb(rhs.shape.begin(), rhs.shape.end() - 2);
    if (rb != batchDims)
      return ctx.error("batch dimensions differ: ", shapeString(batchDims),
                       " vs ", shapeString(rb));
  }
  std::vector<int64_t> shape = batchDims;
  shape.push_back(p.m);
  shape.push_back(p.n);
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, shape, "output 0"));
  p.batch = product(batchDims);
  p.lhsStep = p.m * p.k;
  p.rhsStep = shared ? 0 : p.k * p.n;
  p.outStep = p.m * p.n;
  if (shared && !p.transLhs) { // [b*m, k] x [k, n]: one GEMM
    p.m *= p.batch;
    p.batch = 1;
    p.lhsStep = p.m * p.k;
    p.outStep = p.m * p.n;
  }
  if (std::max({p.m, p.n, p.k, p.batch * p.m}) > INT32_MAX)
    return ctx.error("matrix dimensions exceed the BLAS 32-bit limit");
  KernelFn fn;
  const void *a = lhs.data, *b = rhs.data;
  void *c = out.data;
  if (!visitDType<kSetNumeric>(lhs.dtype, [&](auto tag) {
        using S = typename decltype(tag)::type;
        const S *sa = static_cast<const S *>(a);
        const S *sb = static_cast<const S *>(b);
        S *sc = static_cast<S *>(c);
        if constexpr (std::is_floating_point_v<S>)
          fn = [p, sa, sb, sc]() -> Status {
            blasBatch<S>(p, sa, sb, sc);
            return Status::ok();
          };
        else if constexpr (kIsFloat<S>)
          fn = makeHalfGemm<S>(p, sa, sb, sc, lhs.numel(), rhs.numel(),
                               out.numel());
        else
          fn = makeNaive<S>(p, sa, sb, sc);
      }))
    return unsupportedDType(ctx, lhs.dtype, kSetNumeric);
  return fn;
}

} // namespace

void registerCpuMatmulKernels(KernelRegistry &registry) {
  registry.add("matmul", buildMatmul);
}

} // namespace dtcc::runtime
