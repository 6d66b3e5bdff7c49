//===- CudaLaunch.h - the launch functions of dtcc's CUDA kernels -*- C++ -*-===//
//
// The boundary between the kernel factories (CudaKernels.cpp, host C++) and
// the kernels (*.cu, nvcc). Factories check shapes, dtypes and attributes
// once at load time; these functions only launch on a stream and return the
// launch's cudaError_t. Pointers are device memory; scalar operands (lr,
// step, grad_scale) are read on the device.
//
// Data-dependent errors (an index or label out of range) cannot return a
// Status from a kernel: the kernel records the first one in a DeviceError in
// device memory, tagged with the instruction's `site`, and the device
// reports it at the next synchronize.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CUDA_CUDALAUNCH_H
#define DTCC_RUNTIME_DEVICE_CUDA_CUDALAUNCH_H

#include "runtime/base/DType.h"
#include "runtime/base/GridSample.h"
#include "runtime/base/RoiAlign.h"
#include "runtime/device/cuda/FastDivision.h"

#include <cuda_runtime_api.h>

#include <cstdint>

namespace dtcc::runtime::cuda {

/// Dimensions of an elementwise loop nest after merging (more is an error at
/// load time).
constexpr int kMaxLayoutDims = 8;
/// Operands of an elementwise layout: the output and up to 3 inputs.
constexpr int kMaxOperands = 4;

/// An N-d loop over the output's elements; operand 0 is the contiguous
/// output, operands 1.. the inputs with any strides (0: broadcast).
struct Layout {
  int rank = 1;
  int operands = 2;
  int64_t numel = 0;
  int64_t shape[kMaxLayoutDims] = {};
  int64_t strides[kMaxLayoutDims][kMaxOperands] = {};
  /// Every operand is one unit-stride run: index i is element i everywhere.
  bool linear = false;
  /// Fewer than 2^31 elements: the kernels split indices with 32-bit
  /// multiply-high divisions by `divisors` (FastDivision.h) instead of
  /// 64-bit divisions. Set by prepareLayout.
  bool fastDivision = false;
  FastDivisor divisors[kMaxLayoutDims] = {};
};

/// Sets `linear`'s companions once rank, numel and shape are filled in: the
/// fast divisions where the element count allows them.
void prepareLayout(Layout &l);

/// The first data-dependent error of a run, written by kernels.
struct DeviceError {
  int32_t site;      ///< 0: none; else the instruction's site id
  int32_t kind;      ///< DeviceErrorKind
  int64_t value;     ///< the bad index or label
  int64_t position;  ///< where in the indices or labels
  int64_t bound;     ///< the size it had to be below
};
enum DeviceErrorKind : int32_t {
  kBadIndex = 1,
  kBadLabel = 2,
  kBadStep = 3,
  kDivisionByZero = 4, ///< integer div or rem; value: the dividend
  kBadBatchIndex = 5,  ///< roi_align's; position: the region, bound: N
};

enum class UnaryOp : int32_t {
  kNeg, kAbs, kSign, kRelu, kExp, kLog, kSqrt, kRsqrt, kReciprocal, kTanh,
  kSigmoid, kSilu, kErf, kSin, kCos, kFloor, kCeil, kRound, kGeluErf,
  kGeluTanh, kNot, kTan, kAsin, kAcos, kAtan, kSinh, kCosh, kAsinh, kAcosh,
  kAtanh,
};

enum class BinaryOp : int32_t {
  kAdd, kSub, kMul, kDiv, kPow, kMax, kMin,
  // Activation gradients: a = x, b = dy.
  kGeluErfGrad, kGeluTanhGrad, kSiluGrad,
  // Logical on bool, bitwise on integers.
  kAnd, kOr, kXor,
  // Truncated remainder (the dividend's sign); shifts on integers only, the
  // count read as unsigned (too large: everything shifted out).
  kRem, kShiftLeft, kShiftRight,
};

enum class CompareOp : int32_t { kEq, kNe, kLt, kLe, kGt, kGe };

/// Float tests with a bool result (is_nan; is_inf and its one-sided forms;
/// kNone: is_inf detecting neither sign, always false).
enum class PredicateOp : int32_t { kIsNan, kIsInf, kIsPosInf, kIsNegInf, kNone };

/// kSumSquares: a sum of each element's square (sum_squares), the product
/// rounded before the sum as a mul kernel rounds it.
enum class ReduceOp : int32_t { kSum, kProd, kMax, kMin, kSumSquares };

/// The element types the arithmetic kernels are instantiated for.
bool isCudaArithmeticType(DType dtype); // f32 f16 bf16 f64 i32 i64
bool isCudaFloatType(DType dtype);      // f32 f16 bf16

cudaError_t launchUnary(UnaryOp op, DType dtype, const Layout &layout,
                        void *out, const void *in, cudaStream_t stream);
/// Integer div and rem by zero record kDivisionByZero in `error` (when
/// given) and write 0, so that synchronize reports it as the CPU backend
/// does; integer pow wraps, and a negative exponent gives 0 (1 for base 1,
/// +-1 for base -1), as the CPU backend.
cudaError_t launchBinary(BinaryOp op, DType dtype, const Layout &layout,
                         void *out, const void *a, const void *b,
                         cudaStream_t stream, DeviceError *error = nullptr,
                         int32_t site = 0);
/// out is bool.
cudaError_t launchCompare(CompareOp op, DType dtype, const Layout &layout,
                          void *out, const void *a, const void *b,
                          cudaStream_t stream);
/// out = op(in), out is bool; dtype is f32, f16, bf16 or f64.
cudaError_t launchPredicate(PredicateOp op, DType dtype, const Layout &layout,
                            void *out, const void *in, cudaStream_t stream);
/// out = cond ? t : f, elements of `elemSize` bytes.
cudaError_t launchSelect(int elemSize, const Layout &layout, void *out,
                         const void *cond, const void *t, const void *f,
                         cudaStream_t stream);
cudaError_t launchCast(DType to, DType from, const Layout &layout, void *out,
                       const void *in, cudaStream_t stream);
/// A strided copy (layout of 2 operands, the destination's strides need
/// not be contiguous) of `elemSize`-byte elements.
cudaError_t launchCopy(int elemSize, const Layout &layout, void *out,
                       const void *in, cudaStream_t stream);
/// out[i] = start + i * delta... ONNX Range / dgraph iota along `dim`:
/// out index along dim, as `dtype`; outer/size/inner split the shape.
cudaError_t launchIota(DType dtype, void *out, int64_t outer, int64_t size,
                       int64_t inner, cudaStream_t stream);
/// Fills `count` elements of `elemSize` bytes with the bit pattern `bits`.
cudaError_t launchFill(int elemSize, void *out, int64_t count, uint64_t bits,
                       cudaStream_t stream);

/// softmax / log_softmax over the middle of [outer, size, inner]; f32,
/// f16, bf16 (float sums) and f64 (double sums).
cudaError_t launchSoftmax(DType dtype, bool log, const void *x, void *y,
                          int64_t outer, int64_t size, int64_t inner,
                          cudaStream_t stream);
/// softmax_grad (dx = y (dy - sum(dy y))) / log_softmax_grad (dx = dy -
/// exp(y) sum(dy)).
cudaError_t launchSoftmaxGrad(DType dtype, bool log, const void *y,
                              const void *dy, void *dx, int64_t outer,
                              int64_t size, int64_t inner,
                              cudaStream_t stream);
/// layer_norm (bias and mean may be null for rms_norm: `layer` false); x
/// f32, f16, bf16 (statistics f32, f16 or bf16, float sums) or f64
/// (statistics f64 or f32, double sums).
cudaError_t launchNorm(bool layer, DType dtype, DType statType, const void *x,
                       const void *scale, const void *bias, void *y,
                       void *mean, void *rstd, int64_t rows, int64_t cols,
                       double eps, cudaStream_t stream);
/// layer_norm_grad / rms_norm_grad; dscale/dbias are summed over `slices`
/// row slices into `partials`, scratch of (layer ? 2 : 1) * cols * slices
/// floats (doubles for f64), then over the slices (runtime/exec/
/// CudaScratch.h sizes both). Without dx (null; scale unread) only dscale
/// and dbias: layer_norm_param_grad / rms_norm_param_grad.
cudaError_t launchNormGrad(bool layer, DType dtype, DType statType,
                           const void *x, const void *scale, const void *mean,
                           const void *rstd, const void *dy, void *dx,
                           void *dscale, void *dbias, int64_t rows,
                           int64_t cols, int64_t slices, void *partials,
                           cudaStream_t stream);

/// loss[i] = logsumexp(logits[i]) - logits[i][label]; 0 for ignore_index.
/// `lossType` is the logits' `dtype`, or f32 for half logits (the loss of
/// their f32 cast); the gradient's dloss is of `lossType`, its dlogits of
/// `dtype` (computed in f32 for half logits, rounded once).
cudaError_t launchCrossEntropy(DType dtype, DType lossType, DType labelType,
                               const void *logits, const void *labels,
                               void *loss, int64_t n, int64_t c,
                               int64_t ignore, DeviceError *error,
                               int32_t site, cudaStream_t stream);
cudaError_t launchCrossEntropyGrad(DType dtype, DType lossType,
                                   DType labelType, const void *logits,
                                   const void *labels, const void *dloss,
                                   void *dlogits, int64_t n, int64_t c,
                                   int64_t ignore, DeviceError *error,
                                   int32_t site, cudaStream_t stream);

/// grid_sample: x [N, C, spatial...] read at grid [N, out..., r] into y
/// [N, C, out...], r = 1 to 3 (runtime/base/GridSample.h).
cudaError_t launchGridSample(DType dtype, const void *x, const void *grid,
                             void *y, const grid::Geometry &g,
                             cudaStream_t stream);
/// grid_sample_grad: dy, x, grid -> dx (added atomically; f16/bf16 through
/// `scratch`, a float copy of dx, else null), dgrid.
cudaError_t launchGridSampleGrad(DType dtype, const void *dy, const void *x,
                                 const void *grid, void *dx, void *dgrid,
                                 float *scratch, const grid::Geometry &g,
                                 cudaStream_t stream);
/// roi_align: x [N, C, H, W] pooled over rois [R, 4] of samples
/// batch [R] into y [R, C, outH, outW] (runtime/base/RoiAlign.h); a batch
/// index out of range is recorded in `error`.
cudaError_t launchRoiAlign(DType dtype, const void *x, const void *rois,
                           const int64_t *batch, void *y,
                           const roi::Geometry &g, DeviceError *error,
                           int32_t site, cudaStream_t stream);
/// roi_align_grad: dy, x, rois, batch -> dx (added atomically; f16/bf16
/// through `scratch`, a float copy of dx, else null).
cudaError_t launchRoiAlignGrad(DType dtype, const void *dy, const void *x,
                               const void *rois, const int64_t *batch, void *dx,
                               float *scratch, const roi::Geometry &g,
                               DeviceError *error, int32_t site,
                               cudaStream_t stream);
/// out[o][j][k] = data[o][idx[j]][k] (negative indices from the end).
cudaError_t launchGather(int elemSize, DType indexType, const void *data,
                         const void *indices, void *out, int64_t outer,
                         int64_t size, int64_t inner, int64_t count,
                         DeviceError *error, int32_t site,
                         cudaStream_t stream);
/// gather_elements: `layout` has 3 operands over the output's shape (the
/// output, the indices, the data with stride 0 on the axis); element i reads
/// data[off2 + idx * axisStride] (negative indices from the end).
cudaError_t launchGatherElements(int elemSize, DType indexType,
                                 const Layout &layout, void *out,
                                 const void *indices, const void *data,
                                 int64_t axisStride, int64_t size,
                                 DeviceError *error, int32_t site,
                                 cudaStream_t stream);
/// The deterministic scatters' sort: tiles of kScatterTileItems keys,
/// 8-bit digits (runtime/exec/CudaScratch.h's CudaRadixSortPlan has the
/// same constants and lays the regions out).
constexpr int kScatterTileThreads = 256;
constexpr int kScatterItemsPerThread = 4;
constexpr int64_t kScatterTileItems =
    int64_t(kScatterTileThreads) * kScatterItemsPerThread;
constexpr int kScatterRadix = 256;
struct ScatterAddScratch {
  uint32_t *keys[2] = {nullptr, nullptr};      ///< count each
  uint32_t *positions[2] = {nullptr, nullptr}; ///< count each
  uint32_t *counts = nullptr; ///< kScatterRadix * tiles, digit-major
  uint32_t *starts = nullptr; ///< size + 1 (scatter_add only)
  int64_t tiles = 0;
  int passes = 0;
};
/// Sorts the `count` pairs (keys[0], positions[0]) by key, stably: one pass
/// per 8-bit digit (`passes`), so the sorted pairs end in keys[passes % 2]
/// and positions[passes % 2]. Used by scatter_add and by scatter_nd and
/// scatter_elements (TensorOpKernels.cu).
cudaError_t launchRadixSortPairs(const ScatterAddScratch &scratch,
                                 int64_t count, cudaStream_t stream);
/// out[o][r][k] = the sum over j with idx[j] == r (negative indices from
/// the end) of upd[o][j][k], in increasing j: the CPU backend's order, so
/// the result is the same on every run and on both backends (f16/bf16 sum
/// in float, integers wrap). No atomics: the (index, j) pairs are sorted
/// by a stable radix sort in `scratch`. A bad index is recorded in `error`
/// and adds nothing.
cudaError_t launchScatterAdd(DType dtype, DType indexType, const void *updates,
                             const void *indices, void *out,
                             const ScatterAddScratch &scratch, int64_t outer,
                             int64_t size, int64_t inner, int64_t count,
                             DeviceError *error, int32_t site,
                             cudaStream_t stream);

/// A reduction: `layout` has 2 operands over the input's shape (operand 0:
/// the output element of each input element, stride 0 on reduced dims;
/// operand 1: the input). `rowLen` > 0: the innermost `rowLen` elements of
/// each output are contiguous in the input (a warp per output); otherwise
/// one thread per output walks the reduced dims described by `reduced`
/// (strides of the input only) from the output's base offset `keptLayout`.
struct ReducePlan {
  int64_t outNumel = 0;
  /// Kept dims (output order): sizes and input strides.
  int keptRank = 0;
  int64_t keptShape[kMaxLayoutDims] = {};
  int64_t keptStrides[kMaxLayoutDims] = {};
  /// Reduced dims: sizes and input strides.
  int reducedRank = 0;
  int64_t reducedShape[kMaxLayoutDims] = {};
  int64_t reducedStrides[kMaxLayoutDims] = {};
  int64_t reducedNumel = 1;
  /// The reduced dims are one unit-stride run at the end (rows).
  bool rowTail = false;
  /// Slices of the reduced elements (runtime/exec/CudaScratch.h
  /// planCudaReduce); more than one: their partial results go to
  /// `partials` (outNumel * slices * 8 bytes) and a second pass combines.
  int64_t slices = 1;
};
/// `outType`: `dtype`, or f32 for an f16 or bf16 kSumSquares (the sum of
/// the squares of its cast).
cudaError_t launchReduce(ReduceOp op, DType dtype, DType outType,
                         const ReducePlan &plan, const void *in, void *out,
                         void *partials, cudaStream_t stream);

/// argmax / argmin along the middle of [outer, size, inner] into i64 (NaN is
/// the extreme; the first, or with `last` the last, extreme position).
cudaError_t launchArgExtreme(bool isMax, bool last, DType dtype, const void *in,
                             int64_t *out, int64_t outer, int64_t size,
                             int64_t inner, cudaStream_t stream);
/// cumsum along the middle of [outer, size, inner] (integers wrap; f16/bf16
/// accumulate in float).
cudaError_t launchCumsum(DType dtype, const void *in, void *out, int64_t outer,
                         int64_t size, int64_t inner, bool exclusive,
                         bool reverse, cudaStream_t stream);

/// Where the block of a counter-based draw (dropout, random) lies in the
/// whole tensor (a split tensor's): element i's counter is its index in
/// the whole tensor.
struct CounterBlock {
  const int64_t *offsets = nullptr; ///< device memory; null: whole tensor
  int rank = 0;
  int64_t shape[kMaxLayoutDims] = {};   ///< of the block
  int64_t strides[kMaxLayoutDims] = {}; ///< row-major, of the whole tensor
};
/// dropout with the CPU backend's stream: element i kept when
/// splitmix64(streamKey(seed, *step) + i) >> 11 >= threshold (i in the
/// whole tensor when `block.offsets` is set).
cudaError_t launchDropout(DType dtype, const void *x, const int64_t *step,
                          void *y, bool *mask, int64_t n, uint64_t seed,
                          uint64_t threshold, double scale,
                          const CounterBlock &block, cudaStream_t stream);
/// dgraph.random with the CPU backend's stream and formula, computed in
/// double: shift + scale * x_i, x_i uniform from the top `digits` bits of
/// counter i or normal (Box-Muller) from counters 2i and 2i + 1.
cudaError_t launchRandom(DType dtype, const int64_t *step, void *y, int64_t n,
                         uint64_t seed, bool normal, double shift,
                         double scale, int digits, const CounterBlock &block,
                         cudaStream_t stream);
/// lr = schedule(*step, *total) (kind 0 constant, 1 linear, 2 cosine).
cudaError_t launchLrSchedule(int kind, double base, double min, int64_t warmup,
                             const int64_t *step, const int64_t *total,
                             float *lr, cudaStream_t stream);

/// One operand of a global_sum_squares launch (runtime/exec/CudaScratch.h
/// sizes its entries: kCudaSumSquaresEntryBytes).
struct SumSquaresTensor {
  const void *data;
  int64_t n;
  int64_t firstChunk; ///< the prefix sum of the operands' chunks
  int32_t dtype;      ///< DType: f32, bf16, f16 (f32 sum) or f64 (f64 sum)
  int32_t pad = 0;
};
/// The sum of the squares of every element of the `count` operands of
/// `table` (a device copy made when the kernel is bound) into *out (f32,
/// or f64 for f64 operands): `chunks` blocks of `chunkElems` elements each
/// write a partial sum into `partials` (8 bytes for each chunk, then for
/// each operand), then one block adds each operand's partials and the
/// operands' sums in order. Every run adds in the same order.
cudaError_t launchGlobalSumSquares(const SumSquaresTensor *table, int count,
                                   int64_t chunks, int64_t chunkElems,
                                   DType outType, void *partials, void *out,
                                   cudaStream_t stream);

/// One tensor of a (multi-tensor) AdamW update, all f32 (master weights and
/// state) except the gradient, which may be f32, bf16 or f16, and the
/// rounded copy of the new parameter (the launch's rounded type, bf16 or
/// f16; null where the launch writes none).
struct AdamwTensor {
  const float *param;
  const void *grad;
  const float *m, *v;
  float *newParam, *newM, *newV;
  void *rounded;
  int64_t n;
  int64_t firstChunk; ///< set by planAdamwChunks
};
/// (runtime/exec/CudaScratch.h sizes its entries: kCudaAdamwEntryBytes.)
/// Elements per block of the AdamW kernel, and its threads: four rounds of
/// two 4-element accesses per thread, so that a block's prologue (finding
/// its tensor, the step's scalars) is a small part of it.
constexpr int64_t kAdamwChunk = 8192;
constexpr int kAdamwThreads = 256;
/// Numbers the chunks of every tensor (firstChunk: the prefix sum of
/// ceil(n / kAdamwChunk)); returns the total, the launch's block count.
int64_t planAdamwChunks(AdamwTensor *tensors, int count);
struct AdamwHyper {
  double beta1, beta2, eps, weightDecay;
  const float *lr;
  const int64_t *step;
  const float *gradScale;
};
/// Every tensor of `tensors` (a device copy of the planned table, made once
/// when the kernel is bound) in one launch of `totalChunks` blocks; with
/// `roundedType` bf16 or f16 each tensor's `rounded` gets its new parameter
/// rounded to that type as the cast kernel rounds it (kF32: no copies).
cudaError_t launchAdamw(const AdamwTensor *tensors, int count,
                        int64_t totalChunks, DType gradType, DType roundedType,
                        const AdamwHyper &hyper, DeviceError *error,
                        int32_t site, cudaStream_t stream);
/// SGD with momentum over f32 or f64 (`dtype`) param, grad and buffer,
/// computed in that type as the CPU's kernel computes it.
cudaError_t launchSgd(DType dtype, const void *param, const void *grad,
                      const void *buf, void *newParam, void *newBuf, int64_t n,
                      double momentum, double dampening, double weightDecay,
                      bool nesterov, const float *lr, const int64_t *step,
                      const float *gradScale, DeviceError *error, int32_t site,
                      cudaStream_t stream);

/// Leading dimensions B... the attention kernels take once neighbouring
/// ones that every operand steps over alike are merged (more is an error
/// when the instruction is bound).
constexpr int kAttentionMaxLead = 8;
/// Head dimensions (max(D, Dv)) the attention kernels take: a query row's
/// dimensions are spread over up to 32 threads of 16 each (the compiler's
/// limit, cpu::kCudaAttentionMaxHeadDim, must agree: CudaAttention.cpp).
constexpr int64_t kAttentionMaxHeadDim = 512;
/// Head dimensions f16 and bf16 attention runs on the tensor cores up to (a
/// warp keeps a 16-row slice of the output's or a gradient's columns in
/// registers; cpu::kCudaAttentionTensorCoreMaxHeadDim must agree).
constexpr int64_t kAttentionTensorCoreMaxHeadDim = 128;
/// Where one operand's rows lie (runtime/device/cpu/AttentionPlan.h's
/// AttentionRows over AttentionDims's merged leading dimensions): row r of
/// batch index b starts at element `b's multi-index . lead + r * row`, its
/// elements adjacent. A contiguous operand has one leading dimension (or
/// none) of stride rows * width and row = width.
struct AttentionLayout {
  int64_t lead[kAttentionMaxLead] = {};
  int64_t row = 0;
};
/// The shapes of an attention call (runtime/device/cpu/AttentionPlan.h's
/// AttentionShape): the leading dimensions B... with neighbours merged
/// where the mask and every operand allow, the mask's broadcast as strides
/// over them and each operand's rows.
struct AttentionDims {
  int64_t batch = 0, sq = 0, sk = 0, d = 0, dv = 0;
  double scale = 1;
  bool causal = false;
  int lead = 0; ///< merged leading dimensions (0: all of size 1)
  int64_t leadSize[kAttentionMaxLead] = {};
  int64_t maskLead[kAttentionMaxLead] = {};
  int64_t maskRow = 0, maskCol = 0;
  /// The forward's q, k, v and out; the gradient's also dout, dq, dk, dv
  /// (out: the gradient's input `out`).
  struct {
    AttentionLayout q, k, v, o, dout, dq, dk, dv;
  } rows;
};
/// attention (FlashAttention's online softmax over tiles of keys; f16 and
/// bf16 up to head dimension 128 on the tensor cores, otherwise one group
/// of threads per query row): q [batch, sq, d], k [batch, sk, d],
/// v [batch, sk, dv], mask (or null) -> out [batch, sq, dv] (each laid out
/// as dims.rows says), lse [batch, sq] (contiguous, in the accumulator
/// type: floats, doubles for f64). f32, f16, bf16 (float accumulation) and
/// f64 (double).
cudaError_t launchAttention(DType dtype, const AttentionDims &dims,
                            const void *q, const void *k, const void *v,
                            const void *mask, void *out, void *lse,
                            cudaStream_t stream);
/// attention_grad, recomputing the probabilities from lse: rowsum(dout *
/// out) per query row into `rowDot` (scratch: batch * sq floats, doubles
/// for f64, contiguous like lse), then dq (by query rows) and dk, dv (by
/// key rows), the operands laid out as dims.rows says. Every element is
/// summed by one thread (or one warp's fragments) in one order.
cudaError_t launchAttentionGrad(DType dtype, const AttentionDims &dims,
                                const void *q, const void *k, const void *v,
                                const void *out, const void *lse,
                                const void *dout, const void *mask, void *dq,
                                void *dk, void *dv, void *rowDot,
                                cudaStream_t stream);

/// Blocks of a rank's all_gather/reduce_scatter/all_to_all staging:
/// dst[q][p] = src[p][q] for blocks of `block` bytes, src P x Q blocks.
cudaError_t launchSwapBlocks(void *dst, const void *src, int64_t p, int64_t q,
                             int64_t block, cudaStream_t stream);

/// Sets the multiprocessor count the launch arithmetic uses (CudaDevice,
/// once per process).
void setLaunchSmCount(int smCount);

} // namespace dtcc::runtime::cuda

#endif // DTCC_RUNTIME_DEVICE_CUDA_CUDALAUNCH_H
