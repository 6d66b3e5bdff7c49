//===- ReductionKernels.cpp - reduce_*, argmax/argmin, cumsum -------------===//
//
// Reductions collapse into kept/reduced runs ending in a row kernel (lanes,
// pairwise) or a column-block kernel (vectorized over the kept innermost
// dimension, pairwise over rows). f16/bf16 accumulate in float.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/CpuKernelUtils.h"
#include "runtime/device/cpu/IsaDispatch.h"
#include "runtime/device/cpu/ThreadPool.h"

#include <algorithm>
#include <memory>

namespace dtcc::runtime {
namespace {

using namespace cpu;

//===----------------------------------------------------------------------===//
// Combiners
//===----------------------------------------------------------------------===//

struct SumR {
  template <typename A> static A identity() { return A(0); }
  template <typename A> static A combine(A a, A b) { return wrapAdd(a, b); }
};
/// sum_squares: a sum of each element's square, in the same order.
struct SumSquaresR : SumR {
  static constexpr bool kSquares = true;
};
struct ProdR {
  template <typename A> static A identity() { return A(1); }
  template <typename A> static A combine(A a, A b) { return wrapMul(a, b); }
};
/// Max and min propagate NaN; reducing nothing gives -inf/+inf for floats
/// and the type's lowest/highest value for integers.
struct MaxR {
  static constexpr bool kSelect = true;
  /// combine without the NaN test (x86 maxps), for the vectorized rows.
  template <typename A> static A select(A a, A b) { return b > a ? b : a; }
  template <typename A> static A identity() {
    if constexpr (std::is_floating_point_v<A>)
      return -std::numeric_limits<A>::infinity();
    else
      return std::numeric_limits<A>::lowest();
  }
  template <typename A> static A combine(A a, A b) {
    return (a > b || isNan(a)) ? a : b;
  }
};
struct MinR {
  static constexpr bool kSelect = true;
  template <typename A> static A select(A a, A b) { return b < a ? b : a; }
  template <typename A> static A identity() {
    if constexpr (std::is_floating_point_v<A>)
      return std::numeric_limits<A>::infinity();
    else
      return std::numeric_limits<A>::max();
  }
  template <typename A> static A combine(A a, A b) {
    return (a < b || isNan(a)) ? a : b;
  }
};

constexpr int64_t kLanes = kRowLanes;
constexpr int64_t kColTile = 64;
constexpr int64_t kColBlock = 32;

/// What an element contributes: itself, or its square (SumSquaresR; with
/// -ffp-contract=off the product is rounded as a mul kernel rounds it).
template <typename R, typename = void> struct IsSquares : std::false_type {};
template <typename R>
struct IsSquares<R, std::void_t<decltype(R::kSquares)>> : std::true_type {};
template <typename R, typename S, typename A>
DTCC_ALWAYS_INLINE A element(S x) {
  const A v = A(Elem<S>::load(x));
  if constexpr (IsSquares<R>::value)
    return v * v;
  else
    return v;
}

template <typename R, typename = void> struct IsSelect : std::false_type {};
template <typename R>
struct IsSelect<R, std::void_t<decltype(R::kSelect)>> : std::true_type {};

/// Max/min of a float row: lanes of plain selects and a separate NaN flag,
/// which vectorize where the NaN-propagating select does not.
template <typename R, typename S, typename A>
DTCC_ALWAYS_INLINE A selectRowBody(const S *x, int64_t n) {
  A lanes[kLanes];
  for (int64_t l = 0; l < kLanes; ++l)
    lanes[l] = R::template identity<A>();
  int nan = 0;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) {
      A v = A(Elem<S>::load(x[j + l]));
      nan |= v != v;
      lanes[l] = R::select(lanes[l], v);
    }
  for (; j < n; ++j) {
    A v = A(Elem<S>::load(x[j]));
    nan |= v != v;
    lanes[0] = R::select(lanes[0], v);
  }
  if (nan)
    return std::numeric_limits<A>::quiet_NaN();
  for (int64_t l = 1; l < kLanes; ++l)
    lanes[0] = R::select(lanes[0], lanes[l]);
  return lanes[0];
}

/// Sums (and sums of squares) of floats read in their accumulation type:
/// these run in Lanes16 vectors (CpuKernelUtils.h), the same operations in
/// the same order as the lanes below.
template <typename R, typename S, typename A>
constexpr bool kVectorSum = std::is_base_of_v<SumR, R> &&
                            std::is_floating_point_v<A> &&
                            std::is_same_v<ComputeT<S>, A>;

template <typename R, typename S, typename A>
DTCC_ALWAYS_INLINE Lanes16<A> elementLanes(const S *x) {
  const Lanes16<A> v = loadLanes(x);
  if constexpr (IsSquares<R>::value)
    return v * v;
  else
    return v;
}

/// A row of at most kRowBlock elements in kLanes lanes.
template <typename R, typename S, typename A>
DTCC_ALWAYS_INLINE A reduceLeaf(const S *x, int64_t n) {
  if constexpr (kVectorSum<R, S, A>) {
    static_assert(kLanes == 32, "the lanes are two vectors of 16");
    Lanes16<A> lo = {}, hi = {};
    int64_t j = 0;
    for (; j + kLanes <= n; j += kLanes) {
      lo += elementLanes<R, S, A>(x + j);
      hi += elementLanes<R, S, A>(x + j + 16);
    }
    // The tail spread over the lanes.
    for (int64_t l = 0; j < n; ++j, ++l) {
      const A v = element<R, S, A>(x[j]);
      if (l < 16)
        lo[l] += v;
      else
        hi[l - 16] += v;
    }
    return laneTree<A>(
        lo, hi, [](auto a, auto b) DTCC_INLINE_LAMBDA { return a + b; });
  }
  A lanes[kLanes];
  for (int64_t l = 0; l < kLanes; ++l)
    lanes[l] = R::template identity<A>();
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int64_t l = 0; l < kLanes; ++l)
      lanes[l] = R::combine(lanes[l], element<R, S, A>(x[j + l]));
  for (int64_t l = 0; j < n; ++j, ++l)
    lanes[l] = R::combine(lanes[l], element<R, S, A>(x[j]));
  for (int64_t w = kLanes / 2; w > 0; w /= 2)
    for (int64_t l = 0; l < w; ++l)
      lanes[l] = R::combine(lanes[l], lanes[l + w]);
  return lanes[0];
}

/// Where a row of n > kRowBlock elements splits into the halves it is
/// reduced as.
inline int64_t rowHalf(int64_t n) { return (n / 2) / kLanes * kLanes; }

template <typename R, typename S, typename A>
A reduceTree(const S *x, int64_t n) {
  if (n > kRowBlock) {
    const int64_t half = rowHalf(n);
    return R::combine(reduceTree<R, S, A>(x, half),
                      reduceTree<R, S, A>(x + half, n - half));
  }
  return reduceLeaf<R, S, A>(x, n);
}

#if DTCC_HAVE_AVX512_CLONES
// The same functions compiled for AVX-512 (IsaDispatch.h).
template <typename R, typename S, typename A>
DTCC_AVX512_TARGET A selectRowAvx512(const S *x, int64_t n) {
  return selectRowBody<R, S, A>(x, n);
}
template <typename R, typename S, typename A>
DTCC_AVX512_TARGET A reduceTreeAvx512(const S *x, int64_t n) {
  if (n > kRowBlock) {
    const int64_t half = rowHalf(n);
    return R::combine(reduceTreeAvx512<R, S, A>(x, half),
                      reduceTreeAvx512<R, S, A>(x + half, n - half));
  }
  return reduceLeaf<R, S, A>(x, n);
}
#endif

/// Reduces x[0..n): kLanes independent lanes (vectorizable, and for sums a
/// kLanes times shorter dependency chain), pairwise above kRowBlock
/// elements (runtime/base/RowReduction.h); float
/// maxima and minima as selectRowBody. On AVX-512 where the CPU has it.
template <typename R, typename S, typename A>
A reduceRow(const S *x, int64_t n) {
  constexpr bool kSelect = IsSelect<R>::value && std::is_floating_point_v<A>;
#if DTCC_HAVE_AVX512_CLONES
  if (cpuHasAvx512()) {
    if constexpr (kSelect)
      return selectRowAvx512<R, S, A>(x, n);
    else
      return reduceTreeAvx512<R, S, A>(x, n);
  }
#endif
  if constexpr (kSelect)
    return selectRowBody<R, S, A>(x, n);
  else
    return reduceTree<R, S, A>(x, n);
}

/// reduceRow of one long row with the subtrees of its top kSplitDepth
/// halvings reduced on the kernels' threads: the same tree, so the same
/// value for any thread count. Sums and products only (a float maximum's
/// lanes are not a tree). Not from inside a split loop.
template <typename R, typename S, typename A>
A reduceRowSplit(const S *x, int64_t n) {
  constexpr int kSplitDepth = 3;
  if constexpr (IsSelect<R>::value && std::is_floating_point_v<A>)
    return reduceRow<R, S, A>(x, n);
  // Subtrees of at least 16K elements: smaller ones cost less than waking
  // the threads.
  if (n < (int64_t(1) << (14 + kSplitDepth)) || cpuThreads() < 2)
    return reduceRow<R, S, A>(x, n);
  // The subtrees at depth kSplitDepth, left to right.
  const S *starts[1 << kSplitDepth];
  int64_t sizes[1 << kSplitDepth];
  int count = 0;
  auto collect = [&](auto &self, const S *p, int64_t m, int depth) -> void {
    if (depth == kSplitDepth || m <= kRowBlock) {
      starts[count] = p, sizes[count] = m, ++count;
      return;
    }
    const int64_t half = rowHalf(m);
    self(self, p, half, depth + 1);
    self(self, p + half, m - half, depth + 1);
  };
  collect(collect, x, n, 0);
  A partial[1 << kSplitDepth];
  parallelFor(count, 1, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i)
      partial[i] = reduceRow<R, S, A>(starts[i], sizes[i]);
  });
  // Combined as the recursion combines them.
  int next = 0;
  auto combine = [&](auto &self, int64_t m, int depth) -> A {
    if (depth == kSplitDepth || m <= kRowBlock)
      return partial[next++];
    const int64_t half = rowHalf(m);
    const A left = self(self, half, depth + 1);
    const A right = self(self, m - half, depth + 1);
    return R::combine(left, right);
  };
  return combine(combine, n, 0);
}

/// out[0..w) = reduction over rows r < rows of x[r * ld + k]: sequential
/// within blocks of kColBlock rows, pairwise across blocks.
template <typename R, typename S, typename A>
void reduceColTile(const S *x, int64_t rows, int64_t ld, int64_t w, A *out) {
  if (rows > kColBlock) {
    int64_t half = rows / 2;
    A tmp[kColTile];
    reduceColTile<R, S, A>(x, half, ld, w, out);
    reduceColTile<R, S, A>(x + half * ld, rows - half, ld, w, tmp);
    for (int64_t k = 0; k < w; ++k)
      out[k] = R::combine(out[k], tmp[k]);
    return;
  }
  // The block's loop nest in an AVX-512 clone (lanes across the columns:
  // each column's sum is the same sequence of operations).
  withAvx512([&]() DTCC_INLINE_LAMBDA {
    if constexpr (kVectorSum<R, S, A>) {
      if (w == kColTile) {
        // A whole tile's sums in registers (four vectors of 16 columns).
        static_assert(kColTile == 64, "a tile is four vectors of 16");
        Lanes16<A> sums[4] = {};
        for (int64_t r = 0; r < rows; ++r)
          for (int v = 0; v < 4; ++v)
            sums[v] += elementLanes<R, S, A>(x + r * ld + 16 * v);
        std::memcpy(out, sums, sizeof(sums));
        return;
      }
    }
    for (int64_t k = 0; k < w; ++k)
      out[k] = R::template identity<A>();
    for (int64_t r = 0; r < rows; ++r) {
      const S *row = x + r * ld;
      for (int64_t k = 0; k < w; ++k)
        out[k] = R::combine(out[k], element<R, S, A>(row[k]));
    }
  });
}

/// acc[k] = combine(acc[k], reduction over r of x[r * cols + k]).
template <typename R, typename S, typename A>
void reduceCols(const S *x, int64_t rows, int64_t cols, A *acc) {
  if (rows == 1) {
    for (int64_t k = 0; k < cols; ++k)
      acc[k] = R::combine(acc[k], element<R, S, A>(x[k]));
    return;
  }
  // Column tiles are independent: large blocks split them over the
  // kernels' threads, each tile reduced the same way.
  const int64_t tiles = (cols + kColTile - 1) / kColTile;
  parallelFor(tiles, parallelGrain(rows * kColTile),
              [&](int64_t begin, int64_t end, int) {
                A tile[kColTile];
                for (int64_t t = begin; t < end; ++t) {
                  const int64_t k0 = t * kColTile;
                  const int64_t w = std::min(kColTile, cols - k0);
                  reduceColTile<R, S, A>(x + k0, rows, cols, w, tile);
                  for (int64_t k = 0; k < w; ++k)
                    acc[k0 + k] = R::combine(acc[k0 + k], tile[k]);
                }
              });
}

//===----------------------------------------------------------------------===//
// reduce_sum / max / min / prod
//===----------------------------------------------------------------------===//

/// The loop nest of a reduction: `prefix` walks the collapsed dimensions in
/// front of the tail (operand 0: accumulator, 1: input), and the tail is a
/// row of `rowLen` reduced elements or a [tailRows, tailCols] column block.
struct ReducePlan {
  StridedLayout<2> prefix;
  bool rowTail = false;
  /// Every prefix position has its own output (no reduced dimension in
  /// the prefix).
  bool prefixDistinct = false;
  int64_t rowLen = 0, tailRows = 1, tailCols = 1;
  int64_t inNumel = 0, outNumel = 0;
};

StatusOr<ReducePlan> planReduce(const KernelContext &ctx,
                                const std::vector<int64_t> &inShape,
                                const std::vector<bool> &reduced) {
  // Collapse: drop size-1 dimensions, merge neighbours of the same kind.
  std::vector<int64_t> sizes;
  std::vector<bool> kinds;
  for (size_t d = 0; d < inShape.size(); ++d) {
    if (inShape[d] == 1)
      continue;
    if (!sizes.empty() && kinds.back() == reduced[d]) {
      sizes.back() *= inShape[d];
      continue;
    }
    sizes.push_back(inShape[d]);
    kinds.push_back(reduced[d]);
  }
  ReducePlan plan;
  plan.inNumel = product(inShape);
  size_t prefixEnd = sizes.size();
  if (!sizes.empty() && kinds.back()) {
    plan.rowTail = true;
    plan.rowLen = sizes.back();
    prefixEnd -= 1;
  } else if (!sizes.empty()) {
    plan.tailCols = sizes.back();
    prefixEnd -= 1;
    if (prefixEnd > 0) {
      plan.tailRows = sizes[prefixEnd - 1];
      prefixEnd -= 1;
    }
  }
  const int64_t tailSize =
      plan.rowTail ? plan.rowLen : plan.tailRows * plan.tailCols;
  const int64_t accTail = plan.rowTail ? 1 : plan.tailCols;
  // Prefix strides, innermost first.
  std::vector<int64_t> shape(sizes.begin(), sizes.begin() + prefixEnd);
  std::vector<int64_t> inStrides(prefixEnd), accStrides(prefixEnd);
  int64_t inStride = tailSize, accStride = accTail;
  for (size_t i = prefixEnd; i-- > 0;) {
    inStrides[i] = inStride;
    inStride *= sizes[i];
    accStrides[i] = kinds[i] ? 0 : accStride;
    if (!kinds[i])
      accStride *= sizes[i];
  }
  plan.outNumel = accStride;
  plan.prefixDistinct =
      std::none_of(kinds.begin(), kinds.begin() + prefixEnd, [](bool k) { return k; });
  if (!buildLayout<2>(shape, {&accStrides, &inStrides}, plan.prefix))
    return ctx.error("more than ", kMaxDims, " non-mergeable dimensions");
  return plan;
}

template <typename R, typename S, typename O = S>
KernelFn makeReduce(const ReducePlan &plan, const S *in, O *out) {
  using A = ComputeT<S>;
  constexpr bool kScratch = !std::is_same_v<A, O>;
  auto scratch = std::make_shared<std::vector<A>>(kScratch ? plan.outNumel : 0);
  return [plan, in, out, scratch]() -> Status {
    A *acc;
    if constexpr (kScratch)
      acc = scratch->data();
    else
      acc = out;
    for (int64_t i = 0; i < plan.outNumel; ++i)
      acc[i] = R::template identity<A>();
    if (plan.inNumel > 0) {
      auto runs = [&](const int64_t *off, int64_t n, const int64_t *st) {
        for (int64_t j = 0; j < n; ++j) {
          A *a = acc + off[0] + j * st[0];
          const S *x = in + off[1] + j * st[1];
          if (plan.rowTail)
            *a = R::combine(*a, reduceRow<R, S, A>(x, plan.rowLen));
          else
            reduceCols<R, S, A>(x, plan.tailRows, plan.tailCols, a);
        }
      };
      // Rows into distinct outputs split over the threads (a thread reduces
      // whole rows, in the same order); a column block splits its columns
      // (reduceCols). Positions that accumulate into one output (a reduced
      // dimension in the prefix) stay on one thread.
      // A whole input that is one row (a full reduction: a gradient's
      // squared norm) splits the row's tree instead.
      if (plan.rowTail && plan.rowLen == plan.inNumel)
        acc[0] = R::combine(acc[0], reduceRowSplit<R, S, A>(in, plan.rowLen));
      else if (plan.rowTail && plan.prefixDistinct)
        forEachRunParallel(plan.prefix, runs, plan.rowLen);
      else
        forEachRun(plan.prefix, runs);
    }
    if constexpr (kScratch)
      for (int64_t i = 0; i < plan.outNumel; ++i)
        out[i] = Elem<O>::store(acc[i]);
    return Status::ok();
  };
}

template <typename R> StatusOr<KernelFn> buildReduce(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView &in = ctx.inputs[0], &out = ctx.outputs[0];
  // sum_squares of f16 or bf16 may give f32 (the sum of its cast's squares).
  const bool widened =
      IsSquares<R>::value && isF32OfHalf(in.dtype, out.dtype);
  if (!widened)
    DTCC_RETURN_IF_ERROR(checkDType(ctx, out, in.dtype, "output 0"));
  DTCC_ASSIGN_OR_RETURN(std::vector<int64_t> dims, getIntsAttr(ctx, "dims"));
  std::vector<bool> reduced(in.shape.size(), false);
  for (int64_t d : dims) {
    if (d < 0 || d >= in.rank() || reduced[d])
      return ctx.error("expected distinct dims in [0, ", in.rank(), "), got ",
                       shapeString(dims));
    reduced[d] = true;
  }
  std::vector<int64_t> shape;
  for (size_t d = 0; d < in.shape.size(); ++d)
    if (!reduced[d])
      shape.push_back(in.shape[d]);
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, shape, "output 0"));
  DTCC_ASSIGN_OR_RETURN(ReducePlan plan, planReduce(ctx, in.shape, reduced));
  // Squares of floats only.
  constexpr TypeSet kTypes = IsSquares<R>::value ? kSetFloats : kSetNumeric;
  KernelFn fn;
  if (!visitDType<kTypes>(in.dtype, [&](auto tag) {
        using S = typename decltype(tag)::type;
        if constexpr (IsSquares<R>::value && (std::is_same_v<S, Half> ||
                                              std::is_same_v<S, BFloat16>))
          if (widened) {
            fn = makeReduce<R, S, float>(plan, in.as<const S>(),
                                         out.as<float>());
            return;
          }
        fn = makeReduce<R, S>(plan, in.as<const S>(), out.as<S>());
      }))
    return unsupportedDType(ctx, in.dtype, kTypes);
  return fn;
}

/// global_sum_squares into a result of type O (float, or double for f64
/// operands): each operand's sum_squares over every dimension (the same
/// kernel, so the same sum) into its slot, then the slots added in operand
/// order in O: what a chain of scalar adds of those sums gives, to the bit.
template <typename O>
StatusOr<KernelFn> makeGlobalSumSquares(const KernelContext &ctx) {
  auto sums = std::make_shared<std::vector<O>>(ctx.inputs.size());
  std::vector<KernelFn> parts;
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    const TensorView &in = ctx.inputs[i];
    DTCC_ASSIGN_OR_RETURN(
        ReducePlan plan,
        planReduce(ctx, in.shape, std::vector<bool>(in.shape.size(), true)));
    if (!visitDType<kSetFloats>(in.dtype, [&](auto tag) {
          using S = typename decltype(tag)::type;
          parts.push_back(makeReduce<SumSquaresR, S, O>(
              plan, in.as<const S>(), sums->data() + i));
        }))
      return unsupportedDType(ctx, in.dtype, kSetFloats);
  }
  O *result = ctx.outputs[0].as<O>();
  return KernelFn([parts, sums, result]() -> Status {
    for (const KernelFn &f : parts)
      DTCC_RETURN_IF_ERROR(f());
    O total = (*sums)[0];
    for (size_t i = 1; i < sums->size(); ++i)
      total = total + (*sums)[i];
    *result = total;
    return Status::ok();
  });
}

StatusOr<KernelFn> buildGlobalSumSquares(const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(bool wide, checkGlobalSumSquares(ctx));
  return wide ? makeGlobalSumSquares<double>(ctx)
              : makeGlobalSumSquares<float>(ctx);
}

//===----------------------------------------------------------------------===//
// argmax / argmin
//===----------------------------------------------------------------------===//

/// Whether v replaces best. NaN counts as the extreme value: the first NaN
/// wins (the last one with select_last_index).
template <bool IsMax, bool Last, typename C> inline bool better(C v, C best) {
  if (isNan(best))
    return Last && isNan(v);
  if (isNan(v))
    return true;
  if constexpr (IsMax)
    return Last ? v >= best : v > best;
  else
    return Last ? v <= best : v < best;
}

template <bool IsMax, bool Last, typename S>
KernelFn makeArg(const S *in, int64_t *out, int64_t outer, int64_t size,
                 int64_t inner) {
  using C = ComputeT<S>;
  auto scratch = std::make_shared<std::vector<C>>(inner > 1 ? inner : 0);
  return [=]() -> Status {
    for (int64_t o = 0; o < outer; ++o) {
      const S *x = in + o * size * inner;
      int64_t *idx = out + o * inner;
      if (inner == 1) {
        // The extreme value with a vectorized reduction, then its first (or
        // last) position.
        using R = std::conditional_t<IsMax, MaxR, MinR>;
        const C best = reduceRow<R, S, C>(x, size);
        const bool nan = isNan(best);
        int64_t bi = 0;
        if constexpr (Last) {
          for (int64_t d = size - 1; d >= 0; --d) {
            C v = Elem<S>::load(x[d]);
            if (nan ? isNan(v) : v == best) {
              bi = d;
              break;
            }
          }
        } else {
          for (int64_t d = 0; d < size; ++d) {
            C v = Elem<S>::load(x[d]);
            if (nan ? isNan(v) : v == best) {
              bi = d;
              break;
            }
          }
        }
        *idx = bi;
        continue;
      }
      C *best = scratch->data();
      for (int64_t i = 0; i < inner; ++i) {
        best[i] = Elem<S>::load(x[i]);
        idx[i] = 0;
      }
      for (int64_t d = 1; d < size; ++d) {
        const S *row = x + d * inner;
        for (int64_t i = 0; i < inner; ++i) {
          C v = Elem<S>::load(row[i]);
          if (better<IsMax, Last>(v, best[i])) {
            best[i] = v;
            idx[i] = d;
          }
        }
      }
    }
    return Status::ok();
  };
}

template <bool IsMax> StatusOr<KernelFn> buildArg(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView &in = ctx.inputs[0], &out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, DType::kI64, "output 0"));
  DTCC_ASSIGN_OR_RETURN(int64_t dim, getDimAttr(ctx, "dim", in.rank()));
  std::vector<int64_t> shape = in.shape;
  shape.erase(shape.begin() + dim);
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, shape, "output 0"));
  const int64_t outer = product(in.shape, 0, dim), size = in.shape[dim],
                inner = product(in.shape, dim + 1);
  if (size == 0 && out.numel() > 0)
    return ctx.error("cannot take the index of an extreme over an empty "
                     "dimension ",
                     dim);
  bool last = ctx.attrs.getBool("select_last_index");
  KernelFn fn;
  if (!visitDType<kSetNumeric>(in.dtype, [&](auto tag) {
        using S = typename decltype(tag)::type;
        const S *x = in.as<const S>();
        int64_t *o = out.as<int64_t>();
        fn = last ? makeArg<IsMax, true, S>(x, o, outer, size, inner)
                  : makeArg<IsMax, false, S>(x, o, outer, size, inner);
      }))
    return unsupportedDType(ctx, in.dtype, kSetNumeric);
  return fn;
}

//===----------------------------------------------------------------------===//
// cumsum
//===----------------------------------------------------------------------===//

template <typename S>
KernelFn makeCumsum(const S *in, S *out, int64_t outer, int64_t size,
                    int64_t inner, bool exclusive, bool reverse) {
  using C = ComputeT<S>;
  auto scratch = std::make_shared<std::vector<C>>(inner);
  return [=]() -> Status {
    C *acc = scratch->data();
    for (int64_t o = 0; o < outer; ++o) {
      const S *x = in + o * size * inner;
      S *y = out + o * size * inner;
      for (int64_t i = 0; i < inner; ++i)
        acc[i] = C(0);
      for (int64_t t = 0; t < size; ++t) {
        const int64_t d = reverse ? size - 1 - t : t;
        const S *xr = x + d * inner;
        S *yr = y + d * inner;
        if (exclusive) {
          for (int64_t i = 0; i < inner; ++i) {
            C v = Elem<S>::load(xr[i]);
            yr[i] = Elem<S>::store(acc[i]);
            acc[i] = wrapAdd(acc[i], v);
          }
        } else {
          for (int64_t i = 0; i < inner; ++i) {
            acc[i] = wrapAdd(acc[i], C(Elem<S>::load(xr[i])));
            yr[i] = Elem<S>::store(acc[i]);
          }
        }
      }
    }
    return Status::ok();
  };
}

StatusOr<KernelFn> buildCumsum(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView &in = ctx.inputs[0], &out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkDType(ctx, out, in.dtype, "output 0"));
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, in.shape, "output 0"));
  DTCC_ASSIGN_OR_RETURN(int64_t dim, getDimAttr(ctx, "dim", in.rank()));
  const int64_t outer = product(in.shape, 0, dim), size = in.shape[dim],
                inner = product(in.shape, dim + 1);
  bool exclusive = ctx.attrs.getBool("exclusive");
  bool reverse = ctx.attrs.getBool("reverse");
  KernelFn fn;
  if (!visitDType<kSetNumeric>(in.dtype, [&](auto tag) {
        using S = typename decltype(tag)::type;
        fn = makeCumsum<S>(in.as<const S>(), out.as<S>(), outer, size, inner,
                           exclusive, reverse);
      }))
    return unsupportedDType(ctx, in.dtype, kSetNumeric);
  return fn;
}

} // namespace

void registerCpuReductionKernels(KernelRegistry &registry) {
  registry.add("reduce_sum", buildReduce<SumR>);
  registry.add("sum_squares", buildReduce<SumSquaresR>);
  registry.add("global_sum_squares", buildGlobalSumSquares);
  registry.add("reduce_prod", buildReduce<ProdR>);
  registry.add("reduce_max", buildReduce<MaxR>);
  registry.add("reduce_min", buildReduce<MinR>);
  registry.add("argmax", buildArg<true>);
  registry.add("argmin", buildArg<false>);
  registry.add("cumsum", buildCumsum);
}

} // namespace dtcc::runtime
