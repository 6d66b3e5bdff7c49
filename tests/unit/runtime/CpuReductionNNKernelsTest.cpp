//===- CpuReductionNNKernelsTest.cpp - reductions, matmul, NN kernels -----===//
//
// reduce_*, argmax/argmin, cumsum, matmul, softmax, layer_norm, rms_norm and
// cross_entropy against naive double-precision references.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/runtime/CpuKernelTestUtils.h"

#include <algorithm>
#include <limits>

using namespace dtcc::runtime;
using namespace dtcc::runtime::test;

namespace {

const double kNan = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

//===----------------------------------------------------------------------===//
// reduce_*
//===----------------------------------------------------------------------===//

enum class ReduceKind { kSum, kProd, kMax, kMin };

/// The naive reduction: doubles for floats (NaN propagates through max and
/// min), wrapping 64-bit integers for integers.
Tensor reduceRef(const Tensor &in, const std::vector<int64_t> &dims,
                 ReduceKind kind) {
  std::vector<bool> reduced(in.shape.size(), false);
  for (int64_t d : dims)
    reduced[d] = true;
  std::vector<int64_t> outShape;
  for (size_t d = 0; d < in.shape.size(); ++d)
    if (!reduced[d])
      outShape.push_back(in.shape[d]);
  const int64_t n = numelOf(outShape);
  const bool isInt = isIntDType(in.dtype);
  std::vector<double> f(n);
  std::vector<int64_t> iv(n);
  for (int64_t i = 0; i < n; ++i) {
    switch (kind) {
    case ReduceKind::kSum:
      f[i] = 0, iv[i] = 0;
      break;
    case ReduceKind::kProd:
      f[i] = 1, iv[i] = 1;
      break;
    case ReduceKind::kMax:
      f[i] = -kInf;
      iv[i] = std::numeric_limits<int64_t>::min();
      break;
    case ReduceKind::kMin:
      f[i] = kInf;
      iv[i] = std::numeric_limits<int64_t>::max();
      break;
    }
  }
  forEachIndex(in.shape, [&](const std::vector<int64_t> &idx) {
    std::vector<int64_t> o;
    for (size_t d = 0; d < idx.size(); ++d)
      if (!reduced[d])
        o.push_back(idx[d]);
    int64_t oi = linearIndex(o, outShape), ii = linearIndex(idx, in.shape);
    double x = in.get(ii);
    int64_t xi = in.getInt(ii);
    switch (kind) {
    case ReduceKind::kSum:
      f[oi] += x;
      iv[oi] = int64_t(uint64_t(iv[oi]) + uint64_t(xi));
      break;
    case ReduceKind::kProd:
      f[oi] *= x;
      iv[oi] = int64_t(uint64_t(iv[oi]) * uint64_t(xi));
      break;
    case ReduceKind::kMax:
      f[oi] = std::isnan(f[oi]) || std::isnan(x) ? kNan : std::max(f[oi], x);
      iv[oi] = std::max(iv[oi], xi);
      break;
    case ReduceKind::kMin:
      f[oi] = std::isnan(f[oi]) || std::isnan(x) ? kNan : std::min(f[oi], x);
      iv[oi] = std::min(iv[oi], xi);
      break;
    }
  });
  Tensor out(in.dtype, outShape);
  for (int64_t i = 0; i < n; ++i) {
    if (!isInt)
      out.set(i, f[i]);
    else
      out.setInt(i, iv[i]);
  }
  return out;
}

TEST(CpuReductionKernels, MatchReference) {
  std::mt19937 rng(40);
  struct Case {
    std::vector<int64_t> shape, dims;
    bool big;
  } cases[] = {
      {{2, 3, 4, 5}, {}, false},
      {{2, 3, 4, 5}, {0}, false},
      {{2, 3, 4, 5}, {1}, false},
      {{2, 3, 4, 5}, {3}, false},
      {{2, 3, 4, 5}, {0, 2}, false},
      {{2, 3, 4, 5}, {1, 3}, false},
      {{2, 3, 4, 5}, {0, 1, 2, 3}, false},
      {{2, 3, 4, 5}, {0, 3}, false},
      {{2, 3, 4, 5}, {2, 1}, false},
      {{}, {}, false},
      {{1, 5, 1}, {0, 2}, false},
      {{7}, {0}, false},
      {{3000}, {0}, true},
      {{100, 70}, {0}, true},
      {{70, 100}, {1}, true},
      {{5, 300, 3}, {1}, true},
      {{3, 5000}, {1}, true},
  };
  struct Op {
    const char *name;
    ReduceKind kind;
  } ops[] = {{"reduce_sum", ReduceKind::kSum},
             {"reduce_prod", ReduceKind::kProd},
             {"reduce_max", ReduceKind::kMax},
             {"reduce_min", ReduceKind::kMin}};
  const DType dtypes[] = {DType::kF32,  DType::kF64, DType::kF16,
                          DType::kBF16, DType::kI32, DType::kI8,
                          DType::kU8,   DType::kI64, DType::kU64};
  for (const Op &op : ops)
    for (const Case &c : cases) {
      if (c.big && op.kind == ReduceKind::kProd)
        continue;
      for (DType dt : dtypes) {
        double lo = -3, hi = 3;
        if (op.kind == ReduceKind::kSum && isFloatDType(dt))
          lo = 0, hi = 1; // no cancellation: relative tolerances hold
        if (op.kind == ReduceKind::kProd && isFloatDType(dt))
          lo = 0.5, hi = 1.5;
        if (isIntDType(dt)) {
          auto [l, h] = defaultRange(dt);
          lo = l, hi = h;
          if (op.kind == ReduceKind::kProd)
            lo = isUnsignedDType(dt) ? 0 : -3, hi = 3;
        }
        Tensor in = randomTensor(rng, dt, c.shape, lo, hi);
        Tensor expected = reduceRef(in, c.dims, op.kind);
        Tensor out = Tensor::output(dt, expected.shape);
        Attrs attrs;
        attrs.set("dims", c.dims);
        Status s = runKernel(op.name, {in.view()}, {out.view()}, attrs);
        ASSERT_TRUE(s.isOk()) << s.toString();
        EXPECT_TRUE(tensorsClose(out, expected))
            << op.name << " " << dtypeName(dt) << " " << shapeStr(c.shape)
            << " dims " << shapeStr(c.dims);
      }
    }
}

TEST(CpuReductionKernels, EmptyReductionsGiveTheIdentity) {
  for (DType dt : {DType::kF32, DType::kF16, DType::kI32, DType::kU8}) {
    Tensor in(dt, {0, 3});
    Attrs attrs;
    attrs.set("dims", std::vector<int64_t>{0});
    auto run = [&](const char *name) {
      Tensor out = Tensor::output(dt, {3});
      EXPECT_TRUE(runKernel(name, {in.view()}, {out.view()}, attrs).isOk());
      return out;
    };
    EXPECT_EQ(run("reduce_sum").get(0), 0);
    EXPECT_EQ(run("reduce_prod").get(2), 1);
    double lowest = isFloatDType(dt)    ? -kInf
                    : dt == DType::kI32 ? double(INT32_MIN)
                                        : 0.0;
    double highest = isFloatDType(dt)    ? kInf
                     : dt == DType::kI32 ? double(INT32_MAX)
                                         : 255.0;
    EXPECT_EQ(run("reduce_max").get(1), lowest) << dtypeName(dt);
    EXPECT_EQ(run("reduce_min").get(1), highest) << dtypeName(dt);
  }
}

TEST(CpuReductionKernels, MaxAndMinPropagateNaN) {
  for (DType dt : floatDTypes())
    for (std::vector<int64_t> dims :
         {std::vector<int64_t>{1}, std::vector<int64_t>{0}}) {
      Tensor in(dt, {20, 20});
      for (int64_t i = 0; i < in.numel(); ++i)
        in.set(i, double(i % 7));
      in.set(5 * 20 + 5, kNan);
      Attrs attrs;
      attrs.set("dims", dims);
      for (const char *name : {"reduce_max", "reduce_min", "reduce_sum"}) {
        Tensor out = Tensor::output(dt, {20});
        ASSERT_TRUE(runKernel(name, {in.view()}, {out.view()}, attrs).isOk());
        for (int64_t i = 0; i < 20; ++i)
          EXPECT_EQ(std::isnan(out.get(i)), i == 5)
              << name << " " << dtypeName(dt) << " " << i;
      }
    }
}

TEST(CpuReductionKernels, SumIsAccurateOnLongRows) {
  // 2^22 elements of 0.1f: naive f32 accumulation drifts by percents.
  const int64_t n = int64_t(1) << 22;
  for (std::vector<int64_t> shape :
       {std::vector<int64_t>{n}, std::vector<int64_t>{n / 8, 8}}) {
    Tensor in(DType::kF32, shape);
    for (int64_t i = 0; i < n; ++i)
      in.set(i, 0.1);
    Attrs attrs;
    attrs.set("dims", std::vector<int64_t>{0});
    std::vector<int64_t> outShape(shape.begin() + 1, shape.end());
    Tensor out = Tensor::output(DType::kF32, outShape);
    ASSERT_TRUE(
        runKernel("reduce_sum", {in.view()}, {out.view()}, attrs).isOk());
    double expected = double(0.1f) * double(n) / double(out.numel());
    for (int64_t i = 0; i < out.numel(); ++i)
      EXPECT_NEAR(out.get(i), expected, expected * 1e-5) << shapeStr(shape);
  }
}

TEST(CpuReductionKernels, RejectBadDims) {
  Tensor in(DType::kF32, {2, 3}), out(DType::kF32, {2});
  Attrs attrs;
  attrs.set("dims", std::vector<int64_t>{2});
  EXPECT_EQ(runKernel("reduce_sum", {in.view()}, {out.view()}, attrs).code(),
            StatusCode::kInvalidArgument);
  attrs.set("dims", std::vector<int64_t>{0});
  EXPECT_EQ(runKernel("reduce_sum", {in.view()}, {out.view()}, attrs).code(),
            StatusCode::kInvalidArgument)
      << "output shape must be [3]";
  Tensor b(DType::kBool, {2, 3}), bo(DType::kBool, {3});
  EXPECT_FALSE(runKernel("reduce_sum", {b.view()}, {bo.view()}, attrs).isOk());
}

//===----------------------------------------------------------------------===//
// argmax / argmin / cumsum
//===----------------------------------------------------------------------===//

TEST(CpuReductionKernels, ArgMaxArgMin) {
  std::mt19937 rng(41);
  struct Case {
    std::vector<int64_t> shape;
    int64_t dim;
  } cases[] = {{{5, 7}, 0}, {{5, 7}, 1}, {{3, 4, 5}, 1}, {{9}, 0},
               {{1}, 0},    {{4, 1}, 1}, {{2, 3, 4}, -1}};
  for (const Case &c : cases)
    for (DType dt : {DType::kF32, DType::kF64, DType::kF16, DType::kI32,
                     DType::kU8, DType::kI64})
      for (bool isMax : {true, false})
        for (bool last : {false, true}) {
          // Small integers: ties are frequent.
          Tensor in = randomTensor(rng, dt, c.shape, 0, 3, true);
          const int64_t dim =
              c.dim < 0 ? c.dim + int64_t(c.shape.size()) : c.dim;
          std::vector<int64_t> outShape = c.shape;
          outShape.erase(outShape.begin() + dim);
          Tensor out = Tensor::output(DType::kI64, outShape);
          Attrs attrs;
          attrs.set("dim", c.dim);
          if (last)
            attrs.set("select_last_index", int64_t(1));
          const char *name = isMax ? "argmax" : "argmin";
          ASSERT_TRUE(runKernel(name, {in.view()}, {out.view()}, attrs).isOk());
          Tensor expected(DType::kI64, outShape);
          forEachIndex(outShape, [&](const std::vector<int64_t> &idx) {
            std::vector<int64_t> src = idx;
            src.insert(src.begin() + dim, 0);
            int64_t best = 0;
            double bv = in.get(linearIndex(src, c.shape));
            for (int64_t d = 1; d < c.shape[dim]; ++d) {
              src[dim] = d;
              double v = in.get(linearIndex(src, c.shape));
              bool better =
                  isMax ? (last ? v >= bv : v > bv) : (last ? v <= bv : v < bv);
              if (better)
                best = d, bv = v;
            }
            expected.setInt(linearIndex(idx, outShape), best);
          });
          EXPECT_TRUE(tensorsClose(out, expected))
              << name << " last " << last << " " << dtypeName(dt) << " "
              << shapeStr(c.shape) << " dim " << c.dim;
        }
}

TEST(CpuReductionKernels, ArgMaxTreatsNaNAsExtreme) {
  Tensor in(DType::kF32, {5});
  double values[] = {1, kNan, 3, kNan, -1};
  for (int i = 0; i < 5; ++i)
    in.set(i, values[i]);
  auto run = [&](const char *name, bool last) {
    Tensor out = Tensor::output(DType::kI64, {});
    Attrs attrs;
    attrs.set("dim", int64_t(0));
    if (last)
      attrs.set("select_last_index", int64_t(1));
    EXPECT_TRUE(runKernel(name, {in.view()}, {out.view()}, attrs).isOk());
    return out.getInt(0);
  };
  EXPECT_EQ(run("argmax", false), 1);
  EXPECT_EQ(run("argmax", true), 3);
  EXPECT_EQ(run("argmin", false), 1);
  EXPECT_EQ(run("argmin", true), 3);
}

TEST(CpuReductionKernels, Cumsum) {
  std::mt19937 rng(42);
  struct Case {
    std::vector<int64_t> shape;
    int64_t dim;
  } cases[] = {{{7}, 0},       {{3, 4}, 0},     {{3, 4}, 1},
               {{2, 3, 4}, 1}, {{2, 3, 4}, -1}, {{1, 5}, 0}};
  for (const Case &c : cases)
    for (DType dt : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16,
                     DType::kI32, DType::kU8, DType::kI64})
      for (bool exclusive : {false, true})
        for (bool reverse : {false, true}) {
          auto [lo, hi] = defaultRange(dt);
          Tensor in = randomTensor(rng, dt, c.shape, lo, hi);
          const int64_t dim =
              c.dim < 0 ? c.dim + int64_t(c.shape.size()) : c.dim;
          Tensor out = Tensor::output(dt, c.shape);
          Attrs attrs;
          attrs.set("dim", c.dim);
          if (exclusive)
            attrs.set("exclusive", int64_t(1));
          if (reverse)
            attrs.set("reverse", int64_t(1));
          ASSERT_TRUE(
              runKernel("cumsum", {in.view()}, {out.view()}, attrs).isOk());
          Tensor expected(dt, c.shape);
          forEachIndex(c.shape, [&](const std::vector<int64_t> &idx) {
            double sum = 0;
            std::vector<int64_t> src = idx;
            for (int64_t d = 0; d < c.shape[dim]; ++d) {
              bool take = reverse ? d > idx[dim] : d < idx[dim];
              if (!exclusive && d == idx[dim])
                take = true;
              src[dim] = d;
              if (take)
                sum += in.get(linearIndex(src, c.shape));
            }
            expected.set(linearIndex(idx, c.shape), sum);
          });
          EXPECT_TRUE(tensorsClose(out, expected))
              << dtypeName(dt) << " " << shapeStr(c.shape) << " dim " << c.dim
              << " exclusive " << exclusive << " reverse " << reverse;
        }
}

//===----------------------------------------------------------------------===//
// matmul
//===----------------------------------------------------------------------===//

/// Broadcast batch index: the element offset of result batch `b` (row-major
/// over `out`) in an operand with batch dimensions `in` (aligned from the
/// right, size-1 dimensions repeated), in units of matrices.
int64_t broadcastBatchIndex(int64_t b, const std::vector<int64_t> &out,
                            const std::vector<int64_t> &in) {
  int64_t index = 0, stride = 1;
  for (int64_t d = int64_t(out.size()) - 1; d >= 0; --d) {
    int64_t coord = b % out[d];
    b /= out[d];
    int64_t di = d - int64_t(out.size() - in.size());
    if (di < 0)
      continue;
    if (in[di] != 1)
      index += coord * stride;
    stride *= in[di];
  }
  return index;
}

/// Every layout (transposed or not on each side), batched, broadcast and
/// empty form, for every dtype, against a naive f64 loop. f32 and bf16
/// products run on `backend` (DTCC_CPU_MATMUL: "dnnl" puts f32 on oneDNN's
/// matmul, "blas" keeps f32 on OpenBLAS and bf16 off oneDNN's native bf16
/// matmul, "" is the default: f32 on oneDNN's brgemm kernels where it runs
/// AVX-512 ones, the rest on OpenBLAS; bf16 on oneDNN where the CPU has
/// native bf16).
void checkMatmulAgainstReference(const char *backend) {
  bool blas = std::string(backend) == "blas";
  if (*backend)
    setenv("DTCC_CPU_MATMUL", backend, 1);
  else
    unsetenv("DTCC_CPU_MATMUL");
  std::mt19937 rng(50);
  // Batch dimensions of each operand, broadcast NumPy-style.
  struct Case {
    std::vector<int64_t> lhsBatch, rhsBatch, outBatch;
    int64_t m, k, n;
  } cases[] = {
      {{}, {}, {}, 4, 5, 3},
      {{}, {}, {}, 65, 130, 33},
      {{2, 3}, {2, 3}, {2, 3}, 4, 5, 6},
      {{2}, {}, {2}, 3, 4, 5},             // N-D x 2-D: a shared rhs
      {{2, 2}, {}, {2, 2}, 7, 3, 2},
      {{}, {3}, {3}, 4, 5, 2},             // 2-D x N-D: a shared lhs
      {{}, {2, 3}, {2, 3}, 3, 2, 4},
      {{2, 1}, {3}, {2, 3}, 3, 4, 2},      // size 1 against 3, ranks differ
      {{1, 3}, {2, 1}, {2, 3}, 2, 3, 4},   // broadcast on both sides
      {{2, 1, 3}, {1, 4, 1}, {2, 4, 3}, 2, 2, 3}, // several strided groups
      {{1}, {1, 1}, {1, 1}, 3, 4, 5},      // only size-1 batch dimensions
      {{4}, {1}, {4}, 2, 3, 2},            // a size-1 rhs batch: shared
      {{}, {}, {}, 3, 0, 4},
      {{}, {}, {}, 0, 3, 4},
      {{2}, {2}, {2}, 1, 1, 1},
      {{0}, {3, 1}, {3, 0}, 2, 2, 2},      // an empty batch
      {{3}, {}, {3}, 2, 0, 2},             // empty contraction, shared rhs
      {{2}, {}, {2}, 64, 128, 96},         // a dense layer's sizes
      {{2, 3}, {2, 3}, {2, 3}, 64, 32, 64}, // attention's batched products
  };
  for (const Case &c : cases)
    for (DType dt : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16,
                     DType::kI32, DType::kI64, DType::kU8, DType::kI8})
      for (bool tl : {false, true})
        for (bool tr : {false, true}) {
          std::vector<int64_t> ls = c.lhsBatch, rs = c.rhsBatch, os = c.outBatch;
          ls.push_back(tl ? c.k : c.m);
          ls.push_back(tl ? c.m : c.k);
          rs.push_back(tr ? c.n : c.k);
          rs.push_back(tr ? c.k : c.n);
          os.push_back(c.m);
          os.push_back(c.n);
          double lo = -1, hi = 1;
          if (isIntDType(dt))
            lo = isUnsignedDType(dt) ? 0 : -5, hi = 5;
          Tensor lhs = randomTensor(rng, dt, ls, lo, hi);
          Tensor rhs = randomTensor(rng, dt, rs, lo, hi);
          Tensor out = Tensor::output(dt, os);
          Attrs attrs;
          if (tl)
            attrs.set("transpose_lhs", int64_t(1));
          if (tr)
            attrs.set("transpose_rhs", int64_t(1));
          Status s = runKernel("matmul", {lhs.view(), rhs.view()}, {out.view()},
                               attrs);
          ASSERT_TRUE(s.isOk()) << s.toString();
          Tensor expected(dt, os);
          const int64_t batch = numelOf(c.outBatch);
          for (int64_t b = 0; b < batch; ++b) {
            int64_t lb = broadcastBatchIndex(b, c.outBatch, c.lhsBatch);
            int64_t rb = broadcastBatchIndex(b, c.outBatch, c.rhsBatch);
            for (int64_t i = 0; i < c.m; ++i)
              for (int64_t j = 0; j < c.n; ++j) {
                double acc = 0;
                for (int64_t kk = 0; kk < c.k; ++kk) {
                  int64_t li =
                      lb * c.m * c.k + (tl ? kk * c.m + i : i * c.k + kk);
                  int64_t ri =
                      rb * c.k * c.n + (tr ? j * c.k + kk : kk * c.n + j);
                  acc += lhs.get(li) * rhs.get(ri);
                }
                expected.set((b * c.m + i) * c.n + j, acc);
              }
          }
          double rtol = tolerance(dt).first, atol = tolerance(dt).second;
          if (dt == DType::kF32)
            atol = 1e-5;
          EXPECT_TRUE(tensorsClose(out, expected, rtol, atol))
              << dtypeName(dt) << " batches " << shapeStr(c.lhsBatch) << " x "
              << shapeStr(c.rhsBatch) << " m" << c.m << " k" << c.k << " n"
              << c.n << " tl " << tl << " tr " << tr << " blas " << blas;
        }
  unsetenv("DTCC_CPU_MATMUL");
}

TEST(CpuMatmulKernel, MatchesReference) { checkMatmulAgainstReference(""); }

TEST(CpuMatmulKernel, MatchesReferenceOnOneDnn) {
  checkMatmulAgainstReference("dnnl");
}

TEST(CpuMatmulKernel, MatchesReferenceOnOpenBlas) {
  checkMatmulAgainstReference("blas");
}

TEST(CpuMatmulKernel, RejectsBadShapes) {
  Tensor a(DType::kF32, {2, 3}), b(DType::kF32, {4, 5}), o(DType::kF32, {2, 5});
  Status s = runKernel("matmul", {a.view(), b.view()}, {o.view()});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("contracted"), std::string::npos) << s.message();
  // Batch dimensions 2 and 3 do not broadcast.
  Tensor c(DType::kF32, {2, 2, 3}), d(DType::kF32, {3, 3, 5}),
      e(DType::kF32, {2, 2, 5});
  s = runKernel("matmul", {c.view(), d.view()}, {e.view()});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("do not broadcast"), std::string::npos)
      << s.message();
  // A 2-D x 3-D product is [2, 2, 5], not [2, 5].
  Tensor f(DType::kF32, {2, 3, 5});
  EXPECT_FALSE(runKernel("matmul", {a.view(), f.view()}, {o.view()}).isOk());
  Tensor v(DType::kF32, {3});
  EXPECT_FALSE(runKernel("matmul", {a.view(), v.view()}, {o.view()}).isOk());
}

// The matmul epilogues' fused ops (dtcc-lower-matmul-epilogues) run their
// two kernels on the CPU: the same bits as matmul then add / reduce_sum.
TEST(CpuMatmulKernel, EpilogueOpsAreTheirTwoKernels) {
  auto fill = [](Tensor &t, float scale) {
    for (int64_t i = 0; i < t.numel(); ++i)
      t.setRaw<float>(i, scale * float((i * 37) % 23 - 11));
  };
  Tensor x(DType::kF32, {2, 5, 4}), w(DType::kF32, {4, 6}), b(DType::kF32, {6});
  fill(x, 0.1f), fill(w, 0.05f), fill(b, 0.3f);
  // matmul_bias = matmul, then the bias broadcast over the rows added.
  Tensor fused = Tensor::output(DType::kF32, {2, 5, 6});
  ASSERT_TRUE(
      runKernel("matmul_bias", {x.view(), w.view(), b.view()}, {fused.view()})
          .isOk());
  Tensor product = Tensor::output(DType::kF32, {2, 5, 6});
  ASSERT_TRUE(
      runKernel("matmul", {x.view(), w.view()}, {product.view()}).isOk());
  for (int64_t i = 0; i < product.numel(); ++i)
    EXPECT_EQ(fused.raw<float>(i), product.raw<float>(i) + b.raw<float>(i % 6))
        << i;
  // matmul_bias_grad: x^T dy with dy's column sums (summed = 1), and
  // dy^T x with the same sums (summed = 0, dy the transposed lhs).
  Tensor x2(DType::kF32, {10, 4}), dy(DType::kF32, {10, 6});
  fill(x2, 0.2f), fill(dy, 0.07f);
  std::vector<float> sums(6, 0.f);
  for (int64_t r = 0; r < 10; ++r)
    for (int64_t c = 0; c < 6; ++c)
      sums[c] += dy.raw<float>(r * 6 + c);
  for (int64_t summed : {1, 0}) {
    Attrs a;
    a.set("transpose_lhs", int64_t(1));
    a.set("summed", summed);
    Tensor lhs = summed ? x2 : dy, rhs = summed ? dy : x2;
    std::vector<int64_t> dwShape =
        summed ? std::vector<int64_t>{4, 6} : std::vector<int64_t>{6, 4};
    Tensor dw = Tensor::output(DType::kF32, dwShape);
    Tensor db = Tensor::output(DType::kF32, {6});
    ASSERT_TRUE(runKernel("matmul_bias_grad", {lhs.view(), rhs.view()},
                          {dw.view(), db.view()}, a)
                    .isOk());
    Attrs t;
    t.set("transpose_lhs", int64_t(1));
    Tensor ref = Tensor::output(DType::kF32, dwShape);
    ASSERT_TRUE(
        runKernel("matmul", {lhs.view(), rhs.view()}, {ref.view()}, t).isOk());
    for (int64_t i = 0; i < ref.numel(); ++i)
      EXPECT_EQ(dw.raw<float>(i), ref.raw<float>(i)) << summed << " " << i;
    for (int64_t c = 0; c < 6; ++c)
      EXPECT_NEAR(db.raw<float>(c), sums[c], 1e-5) << summed << " " << c;
  }
  // The summed operand's rows must be the contracted ones; the bias runs
  // along the last dimension.
  Attrs notContracted;
  notContracted.set("summed", int64_t(0));
  Tensor y = Tensor::output(DType::kF32, {10, 6}), ys(DType::kF32, {10});
  Tensor w6(DType::kF32, {4, 6});
  Status s = runKernel("matmul_bias_grad", {x2.view(), w6.view()},
                       {y.view(), ys.view()}, notContracted);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("expected the summed lhs a matrix, transposed"),
            std::string::npos)
      << s.message();
  Tensor b5(DType::kF32, {5});
  s = runKernel("matmul_bias", {x.view(), w.view(), b5.view()}, {fused.view()});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("expected a bias of [6] elements"),
            std::string::npos)
      << s.message();
}

// Half-precision kernels that the CPU computes in f32 (products: f16
// always, bf16 without native bf16, forced here with DTCC_CPU_MATMUL=blas;
// scatter_add's f32 accumulator) keep their f32 buffers in the program's
// compute scratch when bound as part of a program: one arena as large as the
// largest instruction's buffers, not buffers per instruction (the 6 x 384
// GPT's bf16 step held ~600 MiB of them). Their results are the bits of the
// kernel bound on its own.
TEST(CpuHalfKernels, KeepTheirF32BuffersInTheProgramsComputeScratch) {
  setenv("DTCC_CPU_MATMUL", "blas", 1);
  std::mt19937 rng(7);
  struct Instruction {
    std::string kernel;
    std::vector<Tensor> inputs;
    Tensor fromPlan, alone;
    Attrs attrs;
    std::vector<int64_t> f32Elements; // the kernel's f32 buffers
  };
  auto product = [&](DType dt, std::vector<int64_t> lhs,
                     std::vector<int64_t> rhs, std::vector<int64_t> out) {
    Instruction in{
        "matmul",
        {randomTensor(rng, dt, lhs, -1, 1), randomTensor(rng, dt, rhs, -1, 1)},
        Tensor::output(dt, out),
        Tensor::output(dt, out),
        {},
        {numelOf(lhs), numelOf(rhs), numelOf(out)}};
    return in;
  };
  std::vector<Instruction> program = {
      product(DType::kBF16, {3, 40, 24}, {24, 56}, {3, 40, 56}),
      product(DType::kF16, {8, 16}, {16, 12}, {8, 12}),
      product(DType::kBF16, {100, 64}, {64, 300}, {100, 300}),
  };
  // An embedding's gradient: 50 rows of 64 summed into a [1000, 64] table,
  // the largest f32 buffer of the program.
  Instruction scatter{"scatter_add",
                      {randomTensor(rng, DType::kBF16, {50, 64}, -1, 1),
                       Tensor(DType::kI64, {50})},
                      Tensor::output(DType::kBF16, {1000, 64}),
                      Tensor::output(DType::kBF16, {1000, 64}),
                      {},
                      {1000 * 64}};
  for (int64_t i = 0; i < 50; ++i)
    scatter.inputs[1].setRaw<int64_t>(i, (i * 7) % 20);
  scatter.attrs.set("axis", int64_t(0));
  scatter.attrs.set("dim_size", int64_t(1000));
  program.push_back(std::move(scatter));
  auto views = [](std::vector<Tensor> &ts) {
    std::vector<TensorView> v;
    for (Tensor &t : ts)
      v.push_back(t.view());
    return v;
  };
  ScratchPlan plan;
  std::vector<KernelFn> bound;
  int64_t largest = 0;
  for (Instruction &in : program) {
    KernelContext ctx;
    ctx.kernel = in.kernel;
    ctx.location = "node_" + in.kernel;
    ctx.inputs = views(in.inputs);
    ctx.outputs = {in.fromPlan.view()};
    ctx.attrs = in.attrs;
    ctx.scratch = &plan;
    StatusOr<KernelFn> fn = (*cpuRegistry().find(in.kernel))(ctx);
    ASSERT_TRUE(fn.isOk()) << fn.status().toString();
    bound.push_back(std::move(fn).value());
    int64_t bytes = 0;
    for (int64_t n : in.f32Elements)
      bytes = (bytes + kScratchAlignment - 1) / kScratchAlignment *
                  kScratchAlignment +
              n * int64_t(sizeof(float));
    largest = std::max(largest, bytes);
  }
  StatusOr<ScratchLayout> layout = plan.layout();
  ASSERT_TRUE(layout.isOk());
  EXPECT_EQ(layout.value().computeBytes, largest);
  EXPECT_EQ(layout.value().persistentBytes, 0);
  std::vector<char> memory(size_t(layout.value().totalBytes) +
                           kScratchAlignment);
  void *base = memory.data() +
               (kScratchAlignment -
                reinterpret_cast<uintptr_t>(memory.data()) % kScratchAlignment);
  ASSERT_TRUE(plan.bind(base).isOk());
  for (size_t i = 0; i < program.size(); ++i) {
    Instruction &in = program[i];
    ASSERT_TRUE(bound[i]().isOk());
    ASSERT_TRUE(
        runKernel(in.kernel, views(in.inputs), {in.alone.view()}, in.attrs)
            .isOk());
    EXPECT_EQ(std::memcmp(in.fromPlan.data(), in.alone.data(),
                          size_t(in.alone.numel()) * dtypeSize(in.alone.dtype)),
              0)
        << in.kernel << " " << i;
  }
  unsetenv("DTCC_CPU_MATMUL");
}

//===----------------------------------------------------------------------===//
// softmax / log_softmax
//===----------------------------------------------------------------------===//

TEST(CpuNNKernels, SoftmaxAndLogSoftmax) {
  std::mt19937 rng(60);
  struct Case {
    std::vector<int64_t> shape;
    int64_t dim;
  } cases[] = {{{5, 7}, 1}, {{5, 7}, 0},     {{2, 3, 4}, 1}, {{10}, 0},
               {{3, 1}, 1}, {{2, 3, 4}, -1}, {{4, 300}, 1}};
  for (const Case &c : cases)
    for (DType dt : floatDTypes())
      for (bool log : {false, true}) {
        Tensor in = randomTensor(rng, dt, c.shape, -5, 5);
        const int64_t dim = c.dim < 0 ? c.dim + int64_t(c.shape.size()) : c.dim;
        Tensor out = Tensor::output(dt, c.shape);
        Attrs attrs;
        attrs.set("dim", c.dim);
        const char *name = log ? "log_softmax" : "softmax";
        ASSERT_TRUE(runKernel(name, {in.view()}, {out.view()}, attrs).isOk());
        Tensor expected(dt, c.shape);
        forEachIndex(c.shape, [&](const std::vector<int64_t> &idx) {
          std::vector<int64_t> src = idx;
          double sum = 0;
          for (int64_t d = 0; d < c.shape[dim]; ++d) {
            src[dim] = d;
            sum += std::exp(in.get(linearIndex(src, c.shape)));
          }
          double x = in.get(linearIndex(idx, c.shape));
          expected.set(linearIndex(idx, c.shape),
                       log ? x - std::log(sum) : std::exp(x) / sum);
        });
        EXPECT_TRUE(tensorsClose(out, expected))
            << name << " " << dtypeName(dt) << " " << shapeStr(c.shape)
            << " dim " << c.dim;
      }
}

TEST(CpuNNKernels, SoftmaxIsStableForLargeValues) {
  Tensor in(DType::kF32, {2, 3});
  double values[] = {1000, 1001, 1002, -1000, -1001, -1002};
  for (int i = 0; i < 6; ++i)
    in.set(i, values[i]);
  for (int64_t dim : {0, 1}) {
    Tensor out = Tensor::output(DType::kF32, {2, 3});
    Tensor logOut = Tensor::output(DType::kF32, {2, 3});
    Attrs attrs;
    attrs.set("dim", dim);
    ASSERT_TRUE(runKernel("softmax", {in.view()}, {out.view()}, attrs).isOk());
    ASSERT_TRUE(
        runKernel("log_softmax", {in.view()}, {logOut.view()}, attrs).isOk());
    for (int i = 0; i < 6; ++i) {
      EXPECT_TRUE(std::isfinite(out.get(i))) << i;
      EXPECT_TRUE(std::isfinite(logOut.get(i))) << i;
    }
    if (dim == 1) {
      EXPECT_NEAR(out.get(2), 1 / (1 + std::exp(-1) + std::exp(-2)), 1e-6);
      EXPECT_NEAR(logOut.get(3), -std::log(1 + std::exp(-1) + std::exp(-2)),
                  1e-5);
    }
  }
}

//===----------------------------------------------------------------------===//
// layer_norm / rms_norm
//===----------------------------------------------------------------------===//

TEST(CpuNNKernels, LayerNormAndRmsNorm) {
  std::mt19937 rng(61);
  struct Case {
    std::vector<int64_t> shape;
    int64_t axis;
  } cases[] = {
      {{4, 6}, 1}, {{2, 3, 8}, 2}, {{2, 3, 8}, 1}, {{5, 1}, 1}, {{3, 300}, -1}};
  for (const Case &c : cases)
    for (DType dt : floatDTypes())
      for (DType statType : {DType::kF32, dt})
        for (int variant = 0; variant < 3; ++variant) {
          // 0: layer_norm with bias, 1: without, 2: rms_norm.
          const int64_t axis =
              c.axis < 0 ? c.axis + int64_t(c.shape.size()) : c.axis;
          std::vector<int64_t> norm(c.shape.begin() + axis, c.shape.end());
          std::vector<int64_t> rowsShape(c.shape.begin(),
                                         c.shape.begin() + axis);
          const int64_t rows = numelOf(rowsShape), cols = numelOf(norm);
          Tensor x = randomTensor(rng, dt, c.shape, -2, 3);
          Tensor scale = randomTensor(rng, dt, norm, 0.5, 1.5);
          Tensor bias = randomTensor(rng, dt, norm, -1, 1);
          Tensor y = Tensor::output(dt, c.shape);
          Tensor mean = Tensor::output(statType, rowsShape);
          Tensor rstd = Tensor::output(statType, rowsShape);
          Attrs attrs;
          attrs.set("axis", c.axis);
          attrs.set("epsilon", 1e-5);
          Status s;
          if (variant == 0)
            s = runKernel("layer_norm", {x.view(), scale.view(), bias.view()},
                          {y.view(), mean.view(), rstd.view()}, attrs);
          else if (variant == 1)
            s = runKernel("layer_norm", {x.view(), scale.view()},
                          {y.view(), mean.view(), rstd.view()}, attrs);
          else
            s = runKernel("rms_norm", {x.view(), scale.view()},
                          {y.view(), rstd.view()}, attrs);
          ASSERT_TRUE(s.isOk()) << s.toString();
          Tensor ey(dt, c.shape), em(statType, rowsShape),
              er(statType, rowsShape);
          for (int64_t r = 0; r < rows; ++r) {
            double mu = 0, var = 0, ms = 0;
            for (int64_t j = 0; j < cols; ++j) {
              mu += x.get(r * cols + j);
              ms += x.get(r * cols + j) * x.get(r * cols + j);
            }
            mu /= double(cols);
            ms /= double(cols);
            for (int64_t j = 0; j < cols; ++j)
              var += (x.get(r * cols + j) - mu) * (x.get(r * cols + j) - mu);
            var /= double(cols);
            double rs = variant == 2 ? 1 / std::sqrt(ms + 1e-5)
                                     : 1 / std::sqrt(var + 1e-5);
            em.set(r, mu);
            er.set(r, rs);
            for (int64_t j = 0; j < cols; ++j) {
              double v = x.get(r * cols + j);
              double out = variant == 2 ? v * rs * scale.get(j)
                                        : (v - mu) * rs * scale.get(j);
              if (variant == 0)
                out += bias.get(j);
              ey.set(r * cols + j, out);
            }
          }
          std::string what =
              std::string(variant == 2 ? "rms_norm" : "layer_norm") + " " +
              dtypeName(dt) + " stats " + dtypeName(statType) + " " +
              shapeStr(c.shape);
          // y rounds (x - mean) * rstd in the compute type: allow a few ulps.
          double rtol = 4 * tolerance(dt).first,
                 atol = 4 * tolerance(dt).second;
          EXPECT_TRUE(tensorsClose(y, ey, rtol, atol)) << what;
          EXPECT_TRUE(tensorsClose(rstd, er)) << what;
          if (variant != 2) {
            EXPECT_TRUE(tensorsClose(mean, em)) << what;
          }
        }
}

TEST(CpuNNKernels, NormsRejectBadOperands) {
  Tensor x(DType::kF32, {2, 4}), scale(DType::kF32, {3}),
      y(DType::kF32, {2, 4}), m(DType::kF32, {2}), r(DType::kF32, {2});
  Attrs attrs;
  attrs.set("axis", int64_t(1));
  attrs.set("epsilon", 1e-5);
  EXPECT_EQ(runKernel("layer_norm", {x.view(), scale.view()},
                      {y.view(), m.view(), r.view()}, attrs)
                .code(),
            StatusCode::kInvalidArgument);
  Tensor goodScale(DType::kF32, {4});
  Attrs noEps;
  noEps.set("axis", int64_t(1));
  EXPECT_FALSE(runKernel("rms_norm", {x.view(), goodScale.view()},
                         {y.view(), r.view()}, noEps)
                   .isOk());
  EXPECT_FALSE(runKernel("rms_norm", {x.view(), goodScale.view()},
                         {y.view(), m.view(), r.view()}, attrs)
                   .isOk());
}

//===----------------------------------------------------------------------===//
// cross_entropy
//===----------------------------------------------------------------------===//

TEST(CpuNNKernels, CrossEntropy) {
  std::mt19937 rng(62);
  for (DType dt : floatDTypes())
    for (DType lt : {DType::kI32, DType::kI64})
      for (int64_t ignore : {int64_t(-100), int64_t(3)}) {
        const int64_t n = 9, c = 10;
        Tensor logits = randomTensor(rng, dt, {n, c}, -4, 4);
        Tensor labels = randomTensor(rng, lt, {n}, 0, c - 1);
        labels.setInt(2, -100);
        labels.setInt(5, 3);
        Tensor out = Tensor::output(dt, {n});
        Attrs attrs;
        if (ignore != -100)
          attrs.set("ignore_index", ignore);
        else
          labels.setInt(7, -100);
        Status s = runKernel("cross_entropy", {logits.view(), labels.view()},
                             {out.view()}, attrs);
        if (ignore != -100) { // -100 is now an invalid label
          EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
          EXPECT_NE(s.message().find("label -100 of sample 2"),
                    std::string::npos)
              << s.message();
          labels.setInt(2, 0);
          s = runKernel("cross_entropy", {logits.view(), labels.view()},
                        {out.view()}, attrs);
        }
        ASSERT_TRUE(s.isOk()) << s.toString();
        Tensor expected(dt, {n});
        for (int64_t i = 0; i < n; ++i) {
          int64_t label = labels.getInt(i);
          if (label == ignore) {
            expected.set(i, 0);
            continue;
          }
          double sum = 0;
          for (int64_t j = 0; j < c; ++j)
            sum += std::exp(logits.get(i * c + j));
          expected.set(i, std::log(sum) - logits.get(i * c + label));
        }
        EXPECT_TRUE(tensorsClose(out, expected))
            << dtypeName(dt) << " " << dtypeName(lt) << " ignore " << ignore;
      }
  Tensor logits(DType::kF32, {2, 3}), labels(DType::kI64, {2}),
      out(DType::kF32, {2});
  labels.setInt(1, 3);
  Status s =
      runKernel("cross_entropy", {logits.view(), labels.view()}, {out.view()});
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("[0, 3)"), std::string::npos) << s.message();
  Tensor badLabels(DType::kI64, {3});
  EXPECT_EQ(runKernel("cross_entropy", {logits.view(), badLabels.view()},
                      {out.view()})
                .code(),
            StatusCode::kInvalidArgument);
}

} // namespace
