//===- CpuKernelUtils.h - helpers shared by the CPU kernels -----*- C++ -*-===//
//
// Element storage traits (f16/bf16 computed in float), dtype dispatch over
// chosen type sets, the N-d strided walker and the checks factories share.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CPU_CPUKERNELUTILS_H
#define DTCC_RUNTIME_DEVICE_CPU_CPUKERNELUTILS_H

#include "runtime/base/RowReduction.h"
#include "runtime/base/ScatterReduction.h"
#include "runtime/device/cpu/IsaDispatch.h"
#include "runtime/device/cpu/ThreadPool.h"
#include "runtime/device/cpu/VectorMath.h"
#include "runtime/exec/Kernel.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace dtcc::runtime {

class Communicator;

/// One register function per kernel family (called by registerCpuKernels).
void registerCpuUnaryKernels(KernelRegistry &registry);
void registerCpuFusedKernels(KernelRegistry &registry);
void registerCpuBinaryKernels(KernelRegistry &registry);
void registerCpuCastKernels(KernelRegistry &registry);
void registerCpuMovementKernels(KernelRegistry &registry);
void registerCpuIndexingKernels(KernelRegistry &registry);
/// resize, pad_grad, gather_nd, scatter_nd, scatter_elements, top_k
/// (TensorOpKernels.cpp).
void registerCpuTensorOpKernels(KernelRegistry &registry);
void registerCpuReductionKernels(KernelRegistry &registry);
void registerCpuMatmulKernels(KernelRegistry &registry);
void registerCpuNNKernels(KernelRegistry &registry);
void registerCpuTrainingKernels(KernelRegistry &registry);
void registerCpuAttentionKernels(KernelRegistry &registry);
/// conv, conv_input_grad, conv_filter_grad (ConvKernels.cpp).
void registerCpuConvKernels(KernelRegistry &registry);
void registerCpuNormPoolKernels(KernelRegistry &registry);
void registerCpuGridSampleKernels(KernelRegistry &registry);
void registerCpuRoiAlignKernels(KernelRegistry &registry);
/// Collectives over the mesh (CollectiveKernels.cpp); need KernelContext::comm.
void registerCpuCollectiveKernels(KernelRegistry &registry);

namespace cpu {

//===----------------------------------------------------------------------===//
// fp16 / bf16 conversions
//===----------------------------------------------------------------------===//

inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// half -> float, exact; selects instead of branches so that loops
/// vectorize (same results as halfToFloat).
inline float loadHalf(uint16_t h) {
  const uint32_t shiftedExp = 0x7c00u << 13;
  uint32_t o = uint32_t(h & 0x7fff) << 13;
  const uint32_t exp = shiftedExp & o;
  o += (127 - 15) << 23;
  const uint32_t infNan = o + ((128 - 16) << 23);
  // Zero and subnormals: renormalize through the FPU.
  const uint32_t small =
      floatBits(bitsFloat(o + (1u << 23)) - bitsFloat(113u << 23));
  o = exp == shiftedExp ? infNan : o;
  o = exp == 0 ? small : o;
  return bitsFloat(o | uint32_t(h & 0x8000) << 16);
}

/// float -> half, round to nearest even, NaN stays NaN; selects instead of
/// branches (same results as floatToHalf).
inline uint16_t storeHalf(float value) {
  const uint32_t bits = floatBits(value);
  const uint32_t sign = bits & 0x80000000u;
  const uint32_t u = bits ^ sign;
  const uint32_t magic = ((127 - 15) + (23 - 10) + 1) << 23;
  const uint32_t infNan = u > 0x7f800000u ? 0x7e00 : 0x7c00;
  const uint32_t small = floatBits(bitsFloat(u) + bitsFloat(magic)) - magic;
  const uint32_t normal =
      (u + (uint32_t(15 - 127) << 23) + 0xfff + ((u >> 13) & 1)) >> 13;
  uint32_t o = u < (113u << 23) ? small : normal;
  o = u >= ((127u + 16) << 23) ? infNan : o;
  return uint16_t(o | sign >> 16);
}

/// The bfloat16 bits (in the low half) of a float's bits `u`, a uint32_t
/// or a vector of them lane by lane (bf16Lanes): round to nearest even,
/// NaN stays NaN (same results as floatToBf16, without its branch).
template <typename U> DTCC_ALWAYS_INLINE U bf16RoundedBits(U u) {
  const U rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const U nan = (u >> 16) | 0x40u;
  return (u & 0x7fffffffu) > 0x7f800000u ? nan : rounded;
}

/// float -> bfloat16 by bf16RoundedBits.
inline uint16_t storeBf16(float value) {
  return uint16_t(bf16RoundedBits(floatBits(value)));
}

//===----------------------------------------------------------------------===//
// Element traits
//===----------------------------------------------------------------------===//

/// How an element is stored (S) and computed (Compute): identity for every
/// type but Half and BFloat16, which compute in float.
template <typename S> struct Elem {
  using Compute = S;
  static Compute load(S v) { return v; }
  static S store(Compute v) { return v; }
};
template <> struct Elem<Half> {
  using Compute = float;
  static float load(Half v) { return loadHalf(v.bits); }
  static Half store(float v) { return Half{storeHalf(v)}; }
};
template <> struct Elem<BFloat16> {
  using Compute = float;
  static float load(BFloat16 v) { return bf16ToFloat(v.bits); }
  static BFloat16 store(float v) { return BFloat16{storeBf16(v)}; }
};

template <typename S> using ComputeT = typename Elem<S>::Compute;

template <typename T>
constexpr bool kIsFloat =
    std::is_floating_point_v<T> || std::is_same_v<T, Half> ||
    std::is_same_v<T, BFloat16>;
template <typename T>
constexpr bool kIsInt = std::is_integral_v<T> && !std::is_same_v<T, bool>;

/// An unsigned type at least as wide as int, for wrapping integer arithmetic
/// without the signed-overflow UB of the promoted types.
template <typename T>
using WrapT = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned,
                                 std::make_unsigned_t<T>>;

template <typename T> inline T wrapAdd(T a, T b) {
  if constexpr (kIsInt<T>)
    return T(WrapT<T>(a) + WrapT<T>(b));
  else
    return a + b;
}
template <typename T> inline T wrapSub(T a, T b) {
  if constexpr (kIsInt<T>)
    return T(WrapT<T>(a) - WrapT<T>(b));
  else
    return a - b;
}
template <typename T> inline T wrapMul(T a, T b) {
  if constexpr (kIsInt<T>)
    return T(WrapT<T>(a) * WrapT<T>(b));
  else
    return a * b;
}
template <typename T> inline T wrapNeg(T a) {
  if constexpr (kIsInt<T>)
    return T(WrapT<T>(0) - WrapT<T>(a));
  else
    return -a;
}

template <typename T> inline bool isNan(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return v != v;
  else
    return false;
}

//===----------------------------------------------------------------------===//
// Dtype dispatch over type sets
//===----------------------------------------------------------------------===//

enum TypeSet : unsigned {
  kSetF32F64 = 1, ///< f32, f64
  kSetHalfs = 2,  ///< f16, bf16 (as Half, BFloat16)
  kSetInts = 4,   ///< signed and unsigned integers
  kSetBool = 8,   ///< i1 (as bool)
  kSetFloats = kSetF32F64 | kSetHalfs,
  kSetNumeric = kSetFloats | kSetInts,
  kSetAll = kSetNumeric | kSetBool,
};

/// "f32, f64, f16, bf16, integers": what a type set holds, for errors.
std::string typeSetName(unsigned set);

/// Calls `fn(TypeTag<S>{})` with the storage type S of `dtype` when `dtype`
/// is in `Set`; returns false (and calls nothing) otherwise. Only the types
/// of `Set` are instantiated.
template <unsigned Set, typename Fn> bool visitDType(DType dtype, Fn &&fn) {
#define DTCC_VISIT(ENUM, TYPE, BIT)                                            \
  case DType::ENUM:                                                            \
    if constexpr ((Set & (BIT)) != 0) {                                        \
      fn(TypeTag<TYPE>{});                                                     \
      return true;                                                             \
    } else {                                                                   \
      return false;                                                            \
    }
  switch (dtype) {
    DTCC_VISIT(kF32, float, kSetF32F64)
    DTCC_VISIT(kF64, double, kSetF32F64)
    DTCC_VISIT(kF16, Half, kSetHalfs)
    DTCC_VISIT(kBF16, BFloat16, kSetHalfs)
    DTCC_VISIT(kI8, int8_t, kSetInts)
    DTCC_VISIT(kI16, int16_t, kSetInts)
    DTCC_VISIT(kI32, int32_t, kSetInts)
    DTCC_VISIT(kI64, int64_t, kSetInts)
    DTCC_VISIT(kU8, uint8_t, kSetInts)
    DTCC_VISIT(kU16, uint16_t, kSetInts)
    DTCC_VISIT(kU32, uint32_t, kSetInts)
    DTCC_VISIT(kU64, uint64_t, kSetInts)
    DTCC_VISIT(kBool, bool, kSetBool)
  default:
    return false;
  }
#undef DTCC_VISIT
}

/// Calls `fn(TypeTag<U>{})` with an unsigned integer of `bytes` bytes (1, 2,
/// 4 or 8), for kernels that only move elements; false for other sizes.
template <typename Fn> bool visitElementSize(int64_t bytes, Fn &&fn) {
  switch (bytes) {
  case 1:
    fn(TypeTag<uint8_t>{});
    return true;
  case 2:
    fn(TypeTag<uint16_t>{});
    return true;
  case 4:
    fn(TypeTag<uint32_t>{});
    return true;
  case 8:
    fn(TypeTag<uint64_t>{});
    return true;
  default:
    return false;
  }
}

//===----------------------------------------------------------------------===//
// Checks for factories
//===----------------------------------------------------------------------===//

/// "kernel at 'location': ", the prefix of errors returned at run time.
inline std::string errorPrefix(const KernelContext &ctx) {
  return ctx.kernel + " at '" + ctx.location + "': ";
}

std::string shapeString(const std::vector<int64_t> &shape);
int64_t product(const std::vector<int64_t> &shape, size_t begin = 0,
                size_t end = std::string::npos);

/// Errors unless `view` has a data pointer (or no elements) and is
/// contiguous; `what` names it ("input 0", "output 0").
Status checkContiguous(const KernelContext &ctx, const TensorView &view,
                       const std::string &what);
/// Errors unless `view`'s strides have one entry per dimension.
Status checkStrides(const KernelContext &ctx, const TensorView &view,
                    const std::string &what);
/// Errors unless `view` has `dtype`.
Status checkDType(const KernelContext &ctx, const TensorView &view, DType dtype,
                  const std::string &what);
Status checkShape(const KernelContext &ctx, const TensorView &view,
                  const std::vector<int64_t> &shape, const std::string &what);
/// Normalizes a dimension attribute (negative counts from the end) and
/// checks it is in [0, rank).
StatusOr<int64_t> getDimAttr(const KernelContext &ctx, const std::string &name,
                             int64_t rank);
/// How a data-movement kernel (one input, one contiguous output of its
/// dtype) reads its input: for each output dimension (`shape`) a stride
/// into the input, starting `offset` elements in. Every backend copies by
/// it; the functions below check the kernel's arity, dtypes, attributes
/// and output shape, and say what they expected.
struct StridedRead {
  std::vector<int64_t> shape, strides;
  int64_t offset = 0;
};
StatusOr<StridedRead> broadcastInDimRead(const KernelContext &ctx);
StatusOr<StridedRead> transposeRead(const KernelContext &ctx);
StatusOr<StridedRead> sliceRead(const KernelContext &ctx);
StatusOr<StridedRead> reverseRead(const KernelContext &ctx);

/// The communicator of a collective kernel's `axes` attribute on the
/// program's mesh; an error when the kernel was loaded without one.
StatusOr<Communicator *> meshGroup(const KernelContext &ctx);
/// An integer-array attribute; a missing one reads as empty (a program
/// file may leave out empty arrays), so the shape checks decide.
StatusOr<std::vector<int64_t>> getIntsAttr(const KernelContext &ctx,
                                           const std::string &name);
/// getIntsAttr with exactly `size` entries.
StatusOr<std::vector<int64_t>>
getIntsAttr(const KernelContext &ctx, const std::string &name, size_t size);
/// The error for a dtype outside a kernel's type set.
Status unsupportedDType(const KernelContext &ctx, DType dtype, unsigned set,
                        const std::string &what = "element type");

/// Checks the inputs and outputs of a non-elementwise kernel: strides valid,
/// all contiguous.
Status checkAllContiguous(const KernelContext &ctx);

/// global_sum_squares' operands and result, as both backends take them:
/// contiguous, at least one operand, a scalar f32 result of f32, bf16 and
/// f16 operands or a scalar f64 one of f64 operands. Returns whether the
/// result is f64.
StatusOr<bool> checkGlobalSumSquares(const KernelContext &ctx);

/// matmul_bias's bias, as both backends take it: `[n]`, n the result's
/// last dimension.
Status checkMatmulBias(const KernelContext &ctx);

/// matmul_bias_grad's `summed` (0: the lhs, 1: the rhs) and that operand,
/// as both backends take them: a matrix whose rows the product contracts
/// (a transposed lhs, a rhs not transposed) and whose columns the sums
/// (output 1) are. Returns `summed`.
StatusOr<int64_t> checkMatmulBiasGrad(const KernelContext &ctx);

/// Buffers a kernel needs only while it runs (CastKernels.cpp): compute
/// scratch when the kernel is bound as part of a program
/// (runtime/exec/Scratch.h: one arena that every instruction shares, sized
/// by the largest; the buffers of one kernel never overlap), else the
/// kernel's own memory. Addresses are known from the reservation on:
/// read them when the kernel runs, or in ScratchPlan::whenReserved.
class RunScratch {
public:
  static StatusOr<RunScratch> make(const KernelContext &ctx,
                                   const std::vector<int64_t> &bytes);
  /// Runs `fn` once the addresses are known: at the reservation, or now
  /// for a kernel bound on its own.
  static Status whenReady(const KernelContext &ctx, std::function<Status()> fn);
  void *get(size_t i) const {
    return slots_.empty() ? static_cast<void *>(own_[i].get())
                          : slots_[i].get();
  }
  template <typename T> T *as(size_t i) const {
    return static_cast<T *>(get(i));
  }

private:
  std::vector<ScratchSlot> slots_;
  std::vector<std::shared_ptr<char[]>> own_;
};

/// Binds an f32 kernel on f32 copies of the operands (inputs, then
/// outputs): called with the copies' addresses, it must not keep a
/// reference to the KernelContext (it may run after the factory returns).
using F32Binder =
    std::function<StatusOr<KernelFn>(const std::vector<float *> &copies)>;

/// A half-precision (f16/bf16) kernel computed in f32 (CastKernels.cpp):
/// inputs 0 .. `inputs`-1 widened into f32 copies (RunScratch), the f32
/// kernel `bindF32` binds on them, its results rounded once into every
/// output. The conversions are the cast kernel's loops (ElementwiseLoops.h:
/// over the kernels' threads, in AVX-512 where the CPU has it).
template <typename S>
StatusOr<KernelFn> bindInF32(const KernelContext &ctx, size_t inputs,
                             F32Binder bindF32);

/// The instruction's `reduction` attribute (scatter_nd, scatter_elements):
/// "none" (the default), "add", "mul", "max" or "min".
StatusOr<ScatterReduction> readScatterReduction(const KernelContext &ctx);

//===----------------------------------------------------------------------===//
// The N-d strided walker
//===----------------------------------------------------------------------===//

constexpr int kMaxDims = 16;

/// Shape and per-operand strides (in elements) of an N-operand loop nest,
/// with size-1 dimensions dropped and mergeable neighbours merged, so that a
/// contiguous loop becomes one run. Fixed size: capture it by value.
template <int N> struct StridedLayout {
  int rank = 1;
  int64_t numel = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims][N] = {};

  /// Whether everything is a single unit-stride run.
  bool isLinear() const {
    if (rank != 1)
      return false;
    for (int k = 0; k < N; ++k)
      if (strides[0][k] != 1)
        return false;
    return true;
  }
};

/// Builds the layout of `shape` walked with each operand's strides; false
/// when more than kMaxDims dimensions remain after merging.
template <int N>
bool buildLayout(const std::vector<int64_t> &shape,
                 const std::array<const std::vector<int64_t> *, N> &strides,
                 StridedLayout<N> &layout) {
  layout = StridedLayout<N>();
  layout.numel = product(shape);
  int r = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1)
      continue;
    if (r > 0) {
      bool mergeable = true;
      for (int k = 0; k < N; ++k)
        if (layout.strides[r - 1][k] != (*strides[k])[d] * shape[d])
          mergeable = false;
      if (mergeable) {
        layout.shape[r - 1] *= shape[d];
        for (int k = 0; k < N; ++k)
          layout.strides[r - 1][k] = (*strides[k])[d];
        continue;
      }
    }
    if (r == kMaxDims)
      return false;
    layout.shape[r] = shape[d];
    for (int k = 0; k < N; ++k)
      layout.strides[r][k] = (*strides[k])[d];
    ++r;
  }
  if (r == 0) { // every dimension is 1 (or rank 0): one element
    layout.shape[0] = 1;
    for (int k = 0; k < N; ++k)
      layout.strides[0][k] = 1;
    r = 1;
  }
  layout.rank = r;
  return true;
}

/// Steps the run index `idx` over dimensions 0..rank-2 (the last fastest)
/// and every operand's element offset `off` to the next run of `layout`.
template <int N>
inline void nextRun(const StridedLayout<N> &layout, int64_t *idx,
                    int64_t *off) {
  for (int d = layout.rank - 2; d >= 0; --d) {
    for (int k = 0; k < N; ++k)
      off[k] += layout.strides[d][k];
    if (++idx[d] < layout.shape[d])
      return;
    idx[d] = 0;
    for (int k = 0; k < N; ++k)
      off[k] -= layout.strides[d][k] * layout.shape[d];
  }
}

/// Calls `fn(offsets, n, innerStrides)` for every run of the innermost
/// dimension: `offsets[k]` is operand k's element offset of the run's first
/// element and `innerStrides[k]` its stride along the run.
template <int N, typename Fn>
inline void forEachRun(const StridedLayout<N> &layout, Fn &&fn) {
  if (layout.numel == 0)
    return;
  const int r = layout.rank;
  const int64_t inner = layout.shape[r - 1];
  int64_t off[N] = {};
  if (r == 1) {
    fn(static_cast<const int64_t *>(off), inner, layout.strides[0]);
    return;
  }
  int64_t idx[kMaxDims] = {};
  const int64_t outer = layout.numel / inner;
  for (int64_t o = 0; o < outer; ++o) {
    fn(static_cast<const int64_t *>(off), inner, layout.strides[r - 1]);
    nextRun(layout, idx, off);
  }
}

/// forEachRun with the runs split over the kernels' threads (ThreadPool.h)
/// when the layout has enough work: `weight` elements' worth per position
/// of the layout (1 for an elementwise loop; a row's length when each
/// position reduces a row, a tile's size when it copies one). `fn` may be
/// called concurrently and must write only what its run addresses.
template <int N, typename Fn>
inline void forEachRunParallel(const StridedLayout<N> &layout, Fn &&fn,
                               int64_t weight = 1) {
  weight = std::max<int64_t>(1, weight);
  if (layout.numel * weight < 2 * kParallelGrain) {
    forEachRun(layout, fn);
    return;
  }
  const int r = layout.rank;
  const int64_t inner = layout.shape[r - 1];
  if (r == 1) {
    parallelFor(inner, parallelGrain(weight),
                [&](int64_t begin, int64_t end, int) {
      int64_t off[N];
      for (int k = 0; k < N; ++k)
        off[k] = begin * layout.strides[0][k];
      fn(static_cast<const int64_t *>(off), end - begin, layout.strides[0]);
    });
    return;
  }
  const int64_t outer = layout.numel / inner;
  const int64_t grain = parallelGrain(inner * weight);
  parallelFor(outer, grain, [&](int64_t begin, int64_t end, int) {
    // Run `begin`'s index over dimensions 0..r-2, then the walk of
    // forEachRun.
    int64_t idx[kMaxDims] = {};
    int64_t off[N] = {};
    int64_t rest = begin;
    for (int d = r - 2; d >= 0; --d) {
      idx[d] = rest % layout.shape[d];
      rest /= layout.shape[d];
      for (int k = 0; k < N; ++k)
        off[k] += idx[d] * layout.strides[d][k];
    }
    for (int64_t o = begin; o < end; ++o) {
      fn(static_cast<const int64_t *>(off), inner, layout.strides[r - 1]);
      nextRun(layout, idx, off);
    }
  });
}

/// The layout of an elementwise kernel: operand 0 is the (contiguous) output
/// and operands 1.. are the inputs, which must have the output's shape and
/// may have any strides (0 included).
template <int N>
StatusOr<StridedLayout<N>> elementwiseLayout(const KernelContext &ctx) {
  static_assert(N >= 2, "an output and at least one input");
  if (ctx.inputs.size() != N - 1 || ctx.outputs.size() != 1)
    return ctx.error("expected ", N - 1, " inputs and 1 outputs, got ",
                     ctx.inputs.size(), " and ", ctx.outputs.size());
  const TensorView &out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkContiguous(ctx, out, "output 0"));
  std::array<const std::vector<int64_t> *, N> strides;
  std::vector<int64_t> outStrides = contiguousStrides(out.shape);
  strides[0] = &outStrides;
  for (int k = 0; k < N - 1; ++k) {
    const TensorView &in = ctx.inputs[k];
    std::string what = "input " + std::to_string(k);
    DTCC_RETURN_IF_ERROR(checkStrides(ctx, in, what));
    if (in.shape != out.shape)
      return ctx.error("expected ", what, " of shape ", shapeString(out.shape),
                       " (the output's), got ", shapeString(in.shape));
    if (!in.data && in.numel() > 0)
      return ctx.error(what, " has no data");
    strides[k + 1] = &in.strides;
  }
  StridedLayout<N> layout;
  if (!buildLayout<N>(out.shape, strides, layout))
    return ctx.error("more than ", kMaxDims, " non-mergeable dimensions");
  return layout;
}

//===-- Row reductions shared by the normalization and softmax kernels
//-----===//
//
// A row is reduced in kRowLanes = 32 lanes (runtime/base/RowReduction.h):
// lane l takes the elements at l, l + 32, ... of each block, the tail past
// the last whole 32 goes to lane 0 in order, and the lanes are combined as
// a tree (lane l with lane l + w, w = 16, 8, 4, 2, 1). The lanes are two
// vectors of 16 in GCC's vector extensions, so the order is the code's,
// not the vectorizer's: one AVX-512 register of f32 each in the AVX-512
// clones, four SSE2 registers in the baseline, the same IEEE operations
// lane by lane either way (and the fused regions' code repeats them:
// FuseRegions.cpp, emitRowReduce). Left to the vectorizer, explicit lanes
// were split into 4-lane pieces with masked loads.

/// 16 lanes of T.
template <typename T>
using Lanes16 = T __attribute__((vector_size(16 * sizeof(T))));

/// p[0..16) widened to the compute type of S.
template <typename S>
DTCC_ALWAYS_INLINE Lanes16<ComputeT<S>> loadLanes(const S *p) {
  using C = ComputeT<S>;
  Lanes16<C> v;
  if constexpr (std::is_same_v<S, BFloat16>) {
    // bf16ToFloat: the bits in the upper half of a float's.
    using U16 = uint16_t __attribute__((vector_size(32)));
    using U32 = uint32_t __attribute__((vector_size(64)));
    U16 bits;
    std::memcpy(&bits, p, sizeof(bits));
    const U32 wide = __builtin_convertvector(bits, U32) << 16;
    std::memcpy(&v, &wide, sizeof(v));
  } else if constexpr (std::is_same_v<S, C>) {
    std::memcpy(&v, p, sizeof(v));
  } else {
    for (int l = 0; l < 16; ++l)
      v[l] = Elem<S>::load(p[l]);
  }
  return v;
}

/// The bf16 bits of 16 floats, each as storeBf16 rounds it.
DTCC_ALWAYS_INLINE Lanes16<uint16_t> bf16Lanes(Lanes16<float> v) {
  Lanes16<uint32_t> u;
  std::memcpy(&u, &v, sizeof(u));
  return __builtin_convertvector(bf16RoundedBits(u), Lanes16<uint16_t>);
}

namespace detail {
/// Lane e of the rows' transposition step that swaps blocks of B lanes
/// between rows i and i + B (`upper`: row i + B's lane), as an index into
/// the two rows side by side.
constexpr int swapBlockLane(int b, int e, bool upper) {
  return (e & b) == 0 ? (upper ? e + b : e) : (upper ? 16 + e : 16 + e - b);
}
template <int B, int... E>
DTCC_ALWAYS_INLINE void swapBlocks(Lanes16<uint32_t> *rows,
                                   std::integer_sequence<int, E...>) {
  for (int i = 0; i < 16; ++i) {
    if (i & B)
      continue;
    const Lanes16<uint32_t> a = rows[i], c = rows[i + B];
    rows[i] = __builtin_shufflevector(a, c, swapBlockLane(B, E, false)...);
    rows[i + B] = __builtin_shufflevector(a, c, swapBlockLane(B, E, true)...);
  }
}
} // namespace detail

/// Transposes a 16 x 16 block of 32-bit words held as 16 rows of lanes:
/// rows[i][j] becomes rows[j][i]. Four steps of block swaps (8, 4, 2 and 1
/// lanes), each a two-register permute per row on AVX-512.
DTCC_ALWAYS_INLINE void transpose16(Lanes16<uint32_t> *rows) {
  using Lanes = std::make_integer_sequence<int, 16>;
  detail::swapBlocks<8>(rows, Lanes{});
  detail::swapBlocks<4>(rows, Lanes{});
  detail::swapBlocks<2>(rows, Lanes{});
  detail::swapBlocks<1>(rows, Lanes{});
}

/// How the functions of blockedSum read their operands at an index i:
/// `at(p)` is p[i] in the compute type (ScalarAt) or p[i .. i + 16) as
/// Lanes16 (VectorAt). A function written once for both (a generic
/// lambda, `[&](auto at) { return at(g) * at(h); }`) computes each lane as
/// it computes one value.
struct ScalarAt {
  int64_t i;
  template <typename S>
  DTCC_ALWAYS_INLINE ComputeT<S> operator()(const S *p) const {
    return Elem<S>::load(p[i]);
  }
};
struct VectorAt {
  int64_t i;
  template <typename S>
  DTCC_ALWAYS_INLINE Lanes16<ComputeT<S>> operator()(const S *p) const {
    return loadLanes(p + i);
  }
};

/// 16 lanes from `lo` and `hi` as the lanes' tree combines 32, `combine`
/// taking lane l and lane l + w.
template <typename T, typename F>
DTCC_ALWAYS_INLINE T laneTree(Lanes16<T> lo, Lanes16<T> hi, F combine) {
  static_assert(kRowLanes == 32, "the row lanes are two vectors of 16");
  const Lanes16<T> s16 = combine(lo, hi);
  const auto s8 =
      combine(__builtin_shufflevector(s16, s16, 0, 1, 2, 3, 4, 5, 6, 7),
              __builtin_shufflevector(s16, s16, 8, 9, 10, 11, 12, 13, 14, 15));
  const auto s4 = combine(__builtin_shufflevector(s8, s8, 0, 1, 2, 3),
                          __builtin_shufflevector(s8, s8, 4, 5, 6, 7));
  const auto s2 = combine(__builtin_shufflevector(s4, s4, 0, 1),
                          __builtin_shufflevector(s4, s4, 2, 3));
  return combine(s2, __builtin_shufflevector(s2, s2, 1, 0))[0];
}

/// Sum of f(at) over the indices i < n (f as ScalarAt and VectorAt say):
/// blocks of kBlockedSumBlock summed in kRowLanes lanes of C, the block
/// sums added in double.
template <typename C, typename F>
DTCC_ALWAYS_INLINE double blockedSum(int64_t n, F f) {
  double total = 0;
  for (int64_t b = 0; b < n; b += kBlockedSumBlock) {
    const int64_t e = std::min(n, b + kBlockedSumBlock);
    Lanes16<C> lo = {}, hi = {};
    int64_t i = b;
    for (; i + kRowLanes <= e; i += kRowLanes) {
      lo += f(VectorAt{i});
      hi += f(VectorAt{i + 16});
    }
    for (; i < e; ++i)
      lo[0] += f(ScalarAt{i});
    total += double(laneTree<C>(
        lo, hi, [](auto a, auto c) DTCC_INLINE_LAMBDA { return a + c; }));
  }
  return total;
}

/// Sum of f(x[i]) in the compute type of S, as blockedSum; f takes a value
/// or Lanes16 of them (a generic lambda).
template <typename S, typename F>
DTCC_ALWAYS_INLINE double rowSum(const S *x, int64_t n, F f) {
  return blockedSum<ComputeT<S>>(
      n, [&](auto at) DTCC_INLINE_LAMBDA { return f(at(x)); });
}

/// a, or v where it is greater or NaN: the running maximum's step of
/// rowMax (and of the attention softmax's rows); of values or of Lanes16.
constexpr auto kTakeGreaterOrNan = [](auto a, auto v) DTCC_INLINE_LAMBDA {
  return ((v > a) | (v != v)) ? v : a;
};

/// Maximum of x[0..n) (n >= 1), NaN if any is NaN: kRowLanes lanes from
/// x[0], each taking an element greater than it or NaN, combined as a tree
/// the same way.
template <typename S>
DTCC_ALWAYS_INLINE ComputeT<S> rowMax(const S *x, int64_t n) {
  using C = ComputeT<S>;
  constexpr auto take = kTakeGreaterOrNan;
  Lanes16<C> lo;
  for (int l = 0; l < 16; ++l)
    lo[l] = Elem<S>::load(x[0]);
  Lanes16<C> hi = lo;
  int64_t i = 0;
  for (; i + kRowLanes <= n; i += kRowLanes) {
    lo = take(lo, loadLanes(x + i));
    hi = take(hi, loadLanes(x + i + 16));
  }
  for (; i < n; ++i)
    lo[0] = take(C(lo[0]), Elem<S>::load(x[i]));
  return laneTree<C>(lo, hi, take);
}

/// t[i] = exp(x[i] - m) for i < n, returning the sum in double.
template <typename S>
DTCC_ALWAYS_INLINE double expShifted(const S *x, ComputeT<S> m, ComputeT<S> *t, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    t[i] = Elem<S>::load(x[i]) - m;
  vectorMath(MathFn::kExp, t, n);
  return rowSum(t, n, [](auto v) DTCC_INLINE_LAMBDA { return v; });
}

} // namespace cpu
} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_DEVICE_CPU_CPUKERNELUTILS_H
