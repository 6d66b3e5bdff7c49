//===- CpuKernelsTest.cpp - CPU kernel registry, movement and indexing ----===//
//
// The registry's kernel list, the data-movement kernels (copy, broadcast,
// transpose, slice, reverse, concat, pad, iota) and the indexing kernels
// (gather, gather_elements, scatter_add) against naive references.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/runtime/CpuKernelTestUtils.h"

#include <algorithm>
#include <set>

namespace dtcc::runtime::test {

const KernelRegistry &cpuRegistry() { return cpuKernels(); }

} // namespace dtcc::runtime::test

using namespace dtcc::runtime;
using namespace dtcc::runtime::test;

namespace {

/// Copies one element's bytes.
void copyElem(const Tensor &src, int64_t si, Tensor &dst, int64_t di) {
  int64_t size = dtypeSize(src.dtype);
  std::memcpy(dst.bytes() + di * size, src.bytes() + si * size, size);
}

/// One dtype per element size (1, 2, 4, 8 bytes), floats and integers.
const std::vector<DType> &moveDTypes() {
  static const std::vector<DType> v = {DType::kBool, DType::kI8,  DType::kF16,
                                       DType::kU16,  DType::kF32, DType::kI32,
                                       DType::kF64,  DType::kI64};
  return v;
}

Tensor randomFor(std::mt19937 &rng, DType dt, std::vector<int64_t> shape) {
  auto [lo, hi] = defaultRange(dt);
  if (dt == DType::kBool)
    lo = 0, hi = 1;
  return randomTensor(rng, dt, std::move(shape), lo, hi);
}

Attrs intsAttr(const std::string &name, std::vector<int64_t> v) {
  Attrs a;
  a.set(name, std::move(v));
  return a;
}

TEST(CpuKernelRegistry, HasEveryKernel) {
  std::set<std::string> names;
  for (const std::string &n : cpuRegistry().names())
    names.insert(n);
  const char *expected[] = {"neg",
                            "abs",
                            "sign",
                            "relu",
                            "exp",
                            "log",
                            "sqrt",
                            "rsqrt",
                            "reciprocal",
                            "tanh",
                            "sigmoid",
                            "silu",
                            "erf",
                            "sin",
                            "cos",
                            "tan",
                            "asin",
                            "acos",
                            "atan",
                            "sinh",
                            "cosh",
                            "asinh",
                            "acosh",
                            "atanh",
                            "floor",
                            "ceil",
                            "round",
                            "gelu",
                            "not",
                            "is_nan",
                            "is_inf",
                            "add",
                            "sub",
                            "mul",
                            "div",
                            "rem",
                            "pow",
                            "max",
                            "min",
                            "and",
                            "or",
                            "xor",
                            "shift_left",
                            "shift_right",
                            "eq",
                            "lt",
                            "le",
                            "gt",
                            "ge",
                            "select",
                            "cast",
                            "iota",
                            "copy",
                            "broadcast_in_dim",
                            "transpose",
                            "slice",
                            "reverse",
                            "concat",
                            "pad",
                            "gather",
                            "gather_elements",
                            "scatter_add",
                            "reduce_sum",
                            "reduce_max",
                            "reduce_min",
                            "reduce_prod",
                            "argmax",
                            "argmin",
                            "cumsum",
                            "matmul",
                            "softmax",
                            "log_softmax",
                            "layer_norm",
                            "rms_norm",
                            "cross_entropy"};
  for (const char *name : expected)
    EXPECT_TRUE(names.count(name)) << name;
}

//===----------------------------------------------------------------------===//
// Movement
//===----------------------------------------------------------------------===//

TEST(CpuMovementKernels, CopyMaterializesStridedViews) {
  std::mt19937 rng(20);
  for (DType dt : moveDTypes())
    for (const auto &shape : elementwiseShapes()) {
      auto [lo, hi] = defaultRange(dt);
      if (dt == DType::kBool)
        lo = 0, hi = 1;
      for (Operand &in : operandVariants(rng, dt, shape, lo, hi)) {
        Tensor out = Tensor::output(dt, shape);
        ASSERT_TRUE(runKernel("copy", {in.view()}, {out.view()}).isOk());
        Tensor expected(dt, shape);
        forEachIndex(shape, [&](const std::vector<int64_t> &idx) {
          copyElem(in.base, in.position(idx), expected,
                   linearIndex(idx, shape));
        });
        EXPECT_TRUE(tensorsClose(out, expected, 0, 0))
            << dtypeName(dt) << " " << shapeStr(shape) << " " << in.layout;
      }
    }
}

TEST(CpuMovementKernels, BroadcastInDim) {
  std::mt19937 rng(21);
  struct Case {
    std::vector<int64_t> in, out, dims;
  } cases[] = {
      {{3}, {2, 3}, {1}},
      {{3}, {3, 2}, {0}},
      {{3, 1}, {3, 4}, {0, 1}},
      {{}, {2, 2}, {}},
      {{1}, {5}, {0}},
      {{2, 1, 4}, {5, 2, 3, 4}, {1, 2, 3}},
      {{2, 4}, {2, 3, 4}, {0, 2}},
      {{2, 3}, {2, 3}, {0, 1}},
      {{4}, {0, 4}, {1}},
  };
  for (const Case &c : cases)
    for (DType dt : moveDTypes()) {
      Tensor in = randomFor(rng, dt, c.in);
      Tensor out = Tensor::output(dt, c.out);
      Status s = runKernel("broadcast_in_dim", {in.view()}, {out.view()},
                           intsAttr("dims", c.dims));
      ASSERT_TRUE(s.isOk()) << s.toString();
      Tensor expected(dt, c.out);
      forEachIndex(c.out, [&](const std::vector<int64_t> &idx) {
        std::vector<int64_t> src(c.in.size());
        for (size_t i = 0; i < c.in.size(); ++i)
          src[i] = c.in[i] == 1 ? 0 : idx[c.dims[i]];
        copyElem(in, linearIndex(src, c.in), expected, linearIndex(idx, c.out));
      });
      EXPECT_TRUE(tensorsClose(out, expected, 0, 0))
          << shapeStr(c.in) << " -> " << shapeStr(c.out);
    }
  Tensor in(DType::kF32, {3}), out(DType::kF32, {2, 3});
  EXPECT_FALSE(runKernel("broadcast_in_dim", {in.view()}, {out.view()},
                         intsAttr("dims", {0}))
                   .isOk());
  EXPECT_FALSE(runKernel("broadcast_in_dim", {in.view()}, {out.view()},
                         intsAttr("dims", {2}))
                   .isOk());
}

TEST(CpuMovementKernels, MissingArrayAttributesReadAsEmpty) {
  // Program files leave out empty integer arrays (dims = [] of a scalar).
  Tensor scalar(DType::kF32, {});
  scalar.set(0, 2.5);
  Tensor out = Tensor::output(DType::kF32, {2, 3});
  ASSERT_TRUE(
      runKernel("broadcast_in_dim", {scalar.view()}, {out.view()}).isOk());
  for (int64_t i = 0; i < 6; ++i)
    EXPECT_EQ(out.get(i), 2.5);
  Tensor sum = Tensor::output(DType::kF32, {});
  ASSERT_TRUE(runKernel("reduce_sum", {scalar.view()}, {sum.view()}).isOk());
  EXPECT_EQ(sum.get(0), 2.5);
  Tensor vec(DType::kF32, {3});
  Status s = runKernel("broadcast_in_dim", {vec.view()}, {out.view()});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("expected 1 entries in dims"), std::string::npos)
      << s.message();
}

TEST(CpuMovementKernels, Transpose) {
  std::mt19937 rng(22);
  struct Case {
    std::vector<int64_t> shape, perm;
  } cases[] = {
      {{5, 7}, {1, 0}},
      {{33, 65}, {1, 0}},
      {{64, 128}, {1, 0}},
      {{3, 40, 50}, {0, 2, 1}},
      {{3, 4, 5}, {2, 0, 1}},
      {{3, 4, 5}, {1, 0, 2}},
      {{2, 3, 4, 5}, {3, 1, 0, 2}},
      {{2, 3, 4, 5}, {0, 1, 3, 2}},
      {{2, 9, 3, 17}, {0, 3, 2, 1}},
      {{}, {}},
      {{1, 6}, {1, 0}},
      {{6, 1}, {1, 0}},
      {{0, 3}, {1, 0}},
      {{4, 5, 6}, {0, 1, 2}},
  };
  for (const Case &c : cases)
    for (DType dt : moveDTypes()) {
      std::vector<int64_t> outShape;
      for (int64_t p : c.perm)
        outShape.push_back(c.shape[p]);
      Tensor in = randomFor(rng, dt, c.shape);
      Tensor out = Tensor::output(dt, outShape);
      Status s = runKernel("transpose", {in.view()}, {out.view()},
                           intsAttr("perm", c.perm));
      ASSERT_TRUE(s.isOk()) << s.toString();
      Tensor expected(dt, outShape);
      forEachIndex(outShape, [&](const std::vector<int64_t> &idx) {
        std::vector<int64_t> src(c.shape.size());
        for (size_t i = 0; i < c.perm.size(); ++i)
          src[c.perm[i]] = idx[i];
        copyElem(in, linearIndex(src, c.shape), expected,
                 linearIndex(idx, outShape));
      });
      EXPECT_TRUE(tensorsClose(out, expected, 0, 0))
          << dtypeName(dt) << " " << shapeStr(c.shape) << " perm "
          << shapeStr(c.perm);
    }
  Tensor in(DType::kF32, {2, 3}), out(DType::kF32, {3, 2});
  Status s = runKernel("transpose", {in.view()}, {out.view()},
                       intsAttr("perm", {0, 0}));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("permutation"), std::string::npos);
  s = runKernel("transpose", {in.view()}, {out.view()},
                intsAttr("perm", {0, 1}));
  EXPECT_FALSE(s.isOk()) << "output shape mismatch";
}

TEST(CpuMovementKernels, Slice) {
  std::mt19937 rng(23);
  struct Case {
    std::vector<int64_t> shape, start, limit, stride;
  } cases[] = {
      {{10}, {2}, {9}, {3}},
      {{4, 6}, {1, 0}, {3, 6}, {1, 2}},
      {{4, 6}, {0, 1}, {4, 5}, {1, 1}},
      {{3, 4, 5}, {0, 1, 2}, {3, 4, 5}, {2, 2, 2}},
      {{3, 4, 5}, {1, 1, 1}, {1, 3, 4}, {1, 1, 1}},
      {{}, {}, {}, {}},
      {{5, 1}, {4, 0}, {5, 1}, {1, 1}},
  };
  for (const Case &c : cases)
    for (DType dt : moveDTypes()) {
      std::vector<int64_t> outShape;
      for (size_t d = 0; d < c.shape.size(); ++d)
        outShape.push_back((c.limit[d] - c.start[d] + c.stride[d] - 1) /
                           c.stride[d]);
      Tensor in = randomFor(rng, dt, c.shape);
      Tensor out = Tensor::output(dt, outShape);
      Attrs attrs;
      attrs.set("start", c.start);
      attrs.set("limit", c.limit);
      attrs.set("stride", c.stride);
      Status s = runKernel("slice", {in.view()}, {out.view()}, attrs);
      ASSERT_TRUE(s.isOk()) << s.toString();
      Tensor expected(dt, outShape);
      forEachIndex(outShape, [&](const std::vector<int64_t> &idx) {
        std::vector<int64_t> src(idx.size());
        for (size_t d = 0; d < idx.size(); ++d)
          src[d] = c.start[d] + idx[d] * c.stride[d];
        copyElem(in, linearIndex(src, c.shape), expected,
                 linearIndex(idx, outShape));
      });
      EXPECT_TRUE(tensorsClose(out, expected, 0, 0)) << shapeStr(c.shape);
    }
  Tensor in(DType::kF32, {4}), out(DType::kF32, {2});
  Attrs attrs;
  attrs.set("start", std::vector<int64_t>{3});
  attrs.set("limit", std::vector<int64_t>{5});
  attrs.set("stride", std::vector<int64_t>{1});
  EXPECT_EQ(runKernel("slice", {in.view()}, {out.view()}, attrs).code(),
            StatusCode::kInvalidArgument);
}

TEST(CpuMovementKernels, Reverse) {
  std::mt19937 rng(24);
  struct Case {
    std::vector<int64_t> shape, dims;
  } cases[] = {
      {{7}, {0}},          {{3, 4}, {0}},       {{3, 4}, {1}},
      {{3, 4}, {0, 1}},    {{2, 3, 4}, {0, 2}}, {{2, 3, 4}, {}},
      {{2, 1, 5}, {1, 2}}, {{40, 33}, {1}},
  };
  for (const Case &c : cases)
    for (DType dt : moveDTypes()) {
      Tensor in = randomFor(rng, dt, c.shape);
      Tensor out = Tensor::output(dt, c.shape);
      ASSERT_TRUE(runKernel("reverse", {in.view()}, {out.view()},
                            intsAttr("dims", c.dims))
                      .isOk());
      Tensor expected(dt, c.shape);
      forEachIndex(c.shape, [&](const std::vector<int64_t> &idx) {
        std::vector<int64_t> src = idx;
        for (int64_t d : c.dims)
          src[d] = c.shape[d] - 1 - idx[d];
        copyElem(in, linearIndex(src, c.shape), expected,
                 linearIndex(idx, c.shape));
      });
      EXPECT_TRUE(tensorsClose(out, expected, 0, 0)) << shapeStr(c.shape);
    }
}

TEST(CpuMovementKernels, Concat) {
  std::mt19937 rng(25);
  struct Case {
    std::vector<std::vector<int64_t>> inputs;
    int64_t dim;
  } cases[] = {
      {{{2, 3}, {1, 3}, {4, 3}}, 0},
      {{{2, 3}, {2, 1}, {2, 5}}, 1},
      {{{2, 3, 4}, {2, 2, 4}}, 1},
      {{{2, 3, 4}, {2, 3, 1}, {2, 3, 0}, {2, 3, 2}}, -1},
      {{{5}}, 0},
  };
  for (const Case &c : cases)
    for (DType dt : moveDTypes()) {
      const size_t rank = c.inputs[0].size();
      const int64_t dim = c.dim < 0 ? c.dim + int64_t(rank) : c.dim;
      std::vector<int64_t> outShape = c.inputs[0];
      outShape[dim] = 0;
      std::vector<Tensor> ins;
      std::vector<TensorView> views;
      for (const auto &s : c.inputs) {
        outShape[dim] += s[dim];
        ins.push_back(randomFor(rng, dt, s));
      }
      for (Tensor &t : ins)
        views.push_back(t.view());
      Tensor out = Tensor::output(dt, outShape);
      Attrs attrs;
      attrs.set("dim", c.dim);
      Status s = runKernel("concat", views, {out.view()}, attrs);
      ASSERT_TRUE(s.isOk()) << s.toString();
      Tensor expected(dt, outShape);
      forEachIndex(outShape, [&](const std::vector<int64_t> &idx) {
        std::vector<int64_t> src = idx;
        size_t k = 0;
        while (src[dim] >= c.inputs[k][dim])
          src[dim] -= c.inputs[k++][dim];
        copyElem(ins[k], linearIndex(src, c.inputs[k]), expected,
                 linearIndex(idx, outShape));
      });
      EXPECT_TRUE(tensorsClose(out, expected, 0, 0)) << shapeStr(outShape);
    }
  Tensor a(DType::kF32, {2, 3}), b(DType::kF32, {2, 4}),
      out(DType::kF32, {4, 3});
  Attrs attrs;
  attrs.set("dim", int64_t(0));
  EXPECT_EQ(
      runKernel("concat", {a.view(), b.view()}, {out.view()}, attrs).code(),
      StatusCode::kInvalidArgument);
}

TEST(CpuMovementKernels, Pad) {
  std::mt19937 rng(26);
  struct Case {
    std::vector<int64_t> shape, low, high;
  } cases[] = {
      {{3}, {2}, {1}},
      {{2, 3}, {0, 1}, {0, 2}},
      {{4, 5}, {-1, 2}, {1, -2}},
      {{3, 4, 5}, {1, -1, 0}, {-2, 1, 3}},
      {{4}, {-2}, {-2}},
      {{2, 2}, {-2, 1}, {0, 1}},
      {{}, {}, {}},
  };
  for (const Case &c : cases)
    for (DType dt : moveDTypes()) {
      std::vector<int64_t> outShape;
      for (size_t d = 0; d < c.shape.size(); ++d)
        outShape.push_back(c.shape[d] + c.low[d] + c.high[d]);
      Tensor in = randomFor(rng, dt, c.shape);
      Tensor value = randomFor(rng, dt, {});
      Tensor out = Tensor::output(dt, outShape);
      Attrs attrs;
      attrs.set("low", c.low);
      attrs.set("high", c.high);
      Status s =
          runKernel("pad", {in.view(), value.view()}, {out.view()}, attrs);
      ASSERT_TRUE(s.isOk()) << s.toString();
      Tensor expected(dt, outShape);
      forEachIndex(outShape, [&](const std::vector<int64_t> &idx) {
        std::vector<int64_t> src(idx.size());
        bool inside = true;
        for (size_t d = 0; d < idx.size(); ++d) {
          src[d] = idx[d] - c.low[d];
          inside &= src[d] >= 0 && src[d] < c.shape[d];
        }
        if (inside)
          copyElem(in, linearIndex(src, c.shape), expected,
                   linearIndex(idx, outShape));
        else
          copyElem(value, 0, expected, linearIndex(idx, outShape));
      });
      EXPECT_TRUE(tensorsClose(out, expected, 0, 0)) << shapeStr(c.shape);
    }
}

TEST(CpuMovementKernels, Iota) {
  struct Case {
    std::vector<int64_t> shape;
    int64_t dim;
  } cases[] = {{{5}, 0}, {{2, 3}, 1}, {{2, 3}, 0}, {{2, 3, 4}, 1}};
  for (const Case &c : cases)
    for (DType dt : numericDTypes()) {
      Tensor out = Tensor::output(dt, c.shape);
      Attrs attrs;
      attrs.set("dim", c.dim);
      ASSERT_TRUE(runKernel("iota", {}, {out.view()}, attrs).isOk());
      Tensor expected(dt, c.shape);
      forEachIndex(c.shape, [&](const std::vector<int64_t> &idx) {
        expected.set(linearIndex(idx, c.shape), double(idx[c.dim]));
      });
      EXPECT_TRUE(tensorsClose(out, expected, 0, 0)) << dtypeName(dt);
    }
}

//===----------------------------------------------------------------------===//
// Indexing
//===----------------------------------------------------------------------===//

Tensor randomIndices(std::mt19937 &rng, DType dt, std::vector<int64_t> shape,
                     int64_t size) {
  return randomTensor(rng, dt, std::move(shape), double(-size),
                      double(size - 1));
}

TEST(CpuIndexingKernels, Gather) {
  std::mt19937 rng(30);
  struct Case {
    std::vector<int64_t> data, indices;
    int64_t axis;
  } cases[] = {
      {{10, 4}, {3}, 0},    {{10, 4}, {2, 3}, 0}, {{10, 4}, {}, 0},
      {{3, 10, 4}, {5}, 1}, {{3, 10}, {2, 2}, 1}, {{3, 10}, {2, 2}, -1},
      {{6}, {8}, 0},        {{4, 5}, {0}, 1},
  };
  for (const Case &c : cases)
    for (DType dt : {DType::kF32, DType::kF16, DType::kI64, DType::kI8})
      for (DType it : {DType::kI32, DType::kI64}) {
        const int64_t axis =
            c.axis < 0 ? c.axis + int64_t(c.data.size()) : c.axis;
        std::vector<int64_t> outShape(c.data.begin(), c.data.begin() + axis);
        outShape.insert(outShape.end(), c.indices.begin(), c.indices.end());
        outShape.insert(outShape.end(), c.data.begin() + axis + 1,
                        c.data.end());
        Tensor data = randomFor(rng, dt, c.data);
        Tensor ind = randomIndices(rng, it, c.indices, c.data[axis]);
        Tensor out = Tensor::output(dt, outShape);
        Attrs attrs;
        attrs.set("axis", c.axis);
        Status s =
            runKernel("gather", {data.view(), ind.view()}, {out.view()}, attrs);
        ASSERT_TRUE(s.isOk()) << s.toString();
        Tensor expected(dt, outShape);
        const size_t ir = c.indices.size();
        forEachIndex(outShape, [&](const std::vector<int64_t> &idx) {
          std::vector<int64_t> j(idx.begin() + axis, idx.begin() + axis + ir);
          int64_t k = ind.getInt(linearIndex(j, c.indices));
          if (k < 0)
            k += c.data[axis];
          std::vector<int64_t> src(idx.begin(), idx.begin() + axis);
          src.push_back(k);
          src.insert(src.end(), idx.begin() + axis + ir, idx.end());
          copyElem(data, linearIndex(src, c.data), expected,
                   linearIndex(idx, outShape));
        });
        EXPECT_TRUE(tensorsClose(out, expected, 0, 0))
            << shapeStr(c.data) << " " << shapeStr(c.indices);
      }
}

TEST(CpuIndexingKernels, GatherIndexOutOfRangeIsAnError) {
  Tensor data(DType::kF32, {5, 2}), ind(DType::kI64, {3});
  ind.setInt(0, 1);
  ind.setInt(1, 5);
  ind.setInt(2, 0);
  Tensor out(DType::kF32, {3, 2});
  Attrs attrs;
  attrs.set("axis", int64_t(0));
  Status s =
      runKernel("gather", {data.view(), ind.view()}, {out.view()}, attrs);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("index 5"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("[-5, 5)"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("node_gather"), std::string::npos);
  ind.setInt(1, -6);
  s = runKernel("gather", {data.view(), ind.view()}, {out.view()}, attrs);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  ind.setInt(1, -5);
  EXPECT_TRUE(
      runKernel("gather", {data.view(), ind.view()}, {out.view()}, attrs)
          .isOk());
  Tensor f(DType::kF32, {3});
  s = runKernel("gather", {data.view(), f.view()}, {out.view()}, attrs);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
}

TEST(CpuIndexingKernels, GatherElements) {
  std::mt19937 rng(31);
  struct Case {
    std::vector<int64_t> data, indices;
    int64_t axis;
  } cases[] = {
      {{4, 10}, {4, 1}, 1},       {{4, 10}, {4, 7}, 1},
      {{4, 10}, {6, 10}, 0},      {{3, 4, 5}, {3, 4, 2}, 2},
      {{3, 4, 5}, {2, 6, 3}, 1},  {{5}, {9}, 0},
      {{3, 4, 5}, {3, 2, 5}, -2},
  };
  for (const Case &c : cases)
    for (DType dt : {DType::kF32, DType::kF64, DType::kU8})
      for (DType it : {DType::kI32, DType::kI64}) {
        const int64_t axis =
            c.axis < 0 ? c.axis + int64_t(c.data.size()) : c.axis;
        Tensor data = randomFor(rng, dt, c.data);
        Tensor ind = randomIndices(rng, it, c.indices, c.data[axis]);
        Tensor out = Tensor::output(dt, c.indices);
        Attrs attrs;
        attrs.set("axis", c.axis);
        Status s = runKernel("gather_elements", {data.view(), ind.view()},
                             {out.view()}, attrs);
        ASSERT_TRUE(s.isOk()) << s.toString();
        Tensor expected(dt, c.indices);
        forEachIndex(c.indices, [&](const std::vector<int64_t> &idx) {
          int64_t i = linearIndex(idx, c.indices);
          std::vector<int64_t> src = idx;
          src[axis] = ind.getInt(i);
          if (src[axis] < 0)
            src[axis] += c.data[axis];
          copyElem(data, linearIndex(src, c.data), expected, i);
        });
        EXPECT_TRUE(tensorsClose(out, expected, 0, 0))
            << shapeStr(c.data) << " " << shapeStr(c.indices);
      }
  Tensor data(DType::kF32, {2, 3}), ind(DType::kI32, {2, 1});
  ind.setInt(1, 3);
  Tensor out(DType::kF32, {2, 1});
  Attrs attrs;
  attrs.set("axis", int64_t(1));
  Status s = runKernel("gather_elements", {data.view(), ind.view()},
                       {out.view()}, attrs);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("index 3 at position 1"), std::string::npos)
      << s.message();
}

TEST(CpuIndexingKernels, ScatterAdd) {
  std::mt19937 rng(32);
  struct Case {
    std::vector<int64_t> out, indices;
    int64_t axis;
  } cases[] = {
      {{10, 4}, {30}, 0},  {{10, 4}, {2, 3}, 0}, {{3, 6, 4}, {7}, 1},
      {{3, 6}, {2, 5}, 1}, {{5}, {}, 0},         {{4, 3}, {0}, 0},
  };
  for (const Case &c : cases)
    for (DType dt : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16,
                     DType::kI32, DType::kU8})
      for (DType it : {DType::kI32, DType::kI64}) {
        const int64_t axis = c.axis;
        std::vector<int64_t> updShape(c.out.begin(), c.out.begin() + axis);
        updShape.insert(updShape.end(), c.indices.begin(), c.indices.end());
        updShape.insert(updShape.end(), c.out.begin() + axis + 1, c.out.end());
        Tensor upd = randomFor(rng, dt, updShape);
        Tensor ind = randomIndices(rng, it, c.indices, c.out[axis]);
        Tensor out = Tensor::output(dt, c.out);
        Attrs attrs;
        attrs.set("axis", axis);
        attrs.set("dim_size", c.out[axis]);
        Status s = runKernel("scatter_add", {upd.view(), ind.view()},
                             {out.view()}, attrs);
        ASSERT_TRUE(s.isOk()) << s.toString();
        std::vector<double> acc(size_t(out.numel()), 0.0);
        const size_t ir = c.indices.size();
        forEachIndex(updShape, [&](const std::vector<int64_t> &idx) {
          std::vector<int64_t> j(idx.begin() + axis, idx.begin() + axis + ir);
          int64_t k = ind.getInt(linearIndex(j, c.indices));
          if (k < 0)
            k += c.out[axis];
          std::vector<int64_t> dst(idx.begin(), idx.begin() + axis);
          dst.push_back(k);
          dst.insert(dst.end(), idx.begin() + axis + ir, idx.end());
          acc[linearIndex(dst, c.out)] += upd.get(linearIndex(idx, updShape));
        });
        Tensor expected(dt, c.out);
        for (int64_t i = 0; i < expected.numel(); ++i)
          expected.set(i, acc[i]);
        EXPECT_TRUE(tensorsClose(out, expected))
            << dtypeName(dt) << " " << shapeStr(c.out) << " "
            << shapeStr(c.indices);
      }
  Tensor upd(DType::kF32, {2}), ind(DType::kI64, {2}), out(DType::kF32, {3});
  ind.setInt(0, 7);
  Attrs attrs;
  attrs.set("axis", int64_t(0));
  attrs.set("dim_size", int64_t(3));
  Status s =
      runKernel("scatter_add", {upd.view(), ind.view()}, {out.view()}, attrs);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("index 7"), std::string::npos) << s.message();
  attrs.set("dim_size", int64_t(4));
  EXPECT_EQ(
      runKernel("scatter_add", {upd.view(), ind.view()}, {out.view()}, attrs)
          .code(),
      StatusCode::kInvalidArgument);
}

TEST(CpuKernels, NonContiguousInputsOfNonElementwiseKernelsAreRejected) {
  Tensor in(DType::kF32, {2, 3}), out(DType::kF32, {3, 2});
  TensorView v = in.view();
  v.shape = {3, 2};
  v.strides = {1, 3};
  Status s =
      runKernel("transpose", {v}, {out.view()}, intsAttr("perm", {1, 0}));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("contiguous"), std::string::npos) << s.message();
}

} // namespace
