//===- CudaScratch.cpp - the scratch of the CUDA backend's kernels --------===//

#include "runtime/exec/CudaScratch.h"

#include "runtime/device/cpu/AxisMap.h"
#include "runtime/device/cpu/ConvGeometry.h"
#include "runtime/device/cpu/CpuKernelUtils.h"
#include "runtime/device/cuda/CudnnConvPlan.h"
#include "runtime/format/Program.pb.h"

#include <algorithm>
#include <climits>

namespace dtcc::runtime {
namespace {

int64_t product(const std::vector<int64_t> &shape, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < std::min(end, shape.size()); ++i)
    p *= shape[i];
  return p;
}

StatusOr<int64_t> dimAttr(const KernelContext &ctx, const char *name,
                          int64_t rank) {
  StatusOr<int64_t> dim = ctx.attrs.getInt(name);
  if (!dim.isOk())
    return ctx.error(dim.status().message());
  const int64_t d = dim.value();
  if (d < -rank || d >= rank)
    return ctx.error("expected ", name, " in [", -rank, ", ", rank, "), got ",
                     d);
  return d < 0 ? d + rank : d;
}

int64_t alignUp(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

ScratchSet compute(int64_t bytes) {
  return {ScratchRequest{ScratchUse::kCompute, bytes, kScratchAlignment}};
}

} // namespace

int64_t cudnnAttentionWorkspace(bool backward, DType dtype, bool hasMask,
                                int64_t batch, int64_t sq, int64_t sk,
                                int64_t d, int64_t dv) {
  if ((dtype != DType::kF16 && dtype != DType::kBF16) || hasMask || d != dv ||
      d % 8 != 0 || d <= 0 || d > kCudnnAttentionMaxHeadDim || batch <= 0 ||
      sq <= 0 || sk <= 0)
    return 0;
  if (!backward)
    return kCudaMatmulWorkspaceBytes;
  // Beyond the cap before any product could overflow.
  const int64_t rows = alignUp(sq, 64), keys = alignUp(sk, 64);
  if (rows > kCudnnAttentionMaxWorkspaceBytes / keys / 2 / batch)
    return 0;
  const int64_t bytes =
      batch * rows * keys * 2 + batch * sq * d * 4 + (int64_t(1) << 20);
  if (bytes > kCudnnAttentionMaxWorkspaceBytes)
    return 0;
  return std::max(bytes, kCudaMatmulWorkspaceBytes);
}

int64_t cudaNormGradSlices(int64_t rows) {
  const int64_t slices = (rows + 255) / 256;
  return std::clamp<int64_t>(slices, 1, 64);
}

StatusOr<CudaReducePlan> planCudaReduce(const std::vector<int64_t> &shape,
                                        const std::vector<int64_t> &dims) {
  const int64_t rank = int64_t(shape.size());
  std::vector<bool> isReduced(shape.size(), false);
  for (int64_t d : dims) {
    if (d < 0 || d >= rank || isReduced[size_t(d)])
      return invalidArgument("expected distinct dims in [0, ", rank, ")");
    isReduced[size_t(d)] = true;
  }
  CudaReducePlan p;
  const std::vector<int64_t> strides = contiguousStrides(shape);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1)
      continue;
    auto &list = isReduced[d] ? p.reduced : p.kept;
    if (!list.empty() && list.back().second == shape[d] * strides[d] &&
        (d == 0 || isReduced[d - 1] == isReduced[d]))
      list.back() = {list.back().first * shape[d], strides[d]};
    else
      list.push_back({shape[d], strides[d]});
  }
  p.outNumel = 1;
  for (const auto &[size, stride] : p.kept)
    p.outNumel *= size;
  // An empty input has an empty run: no outputs, or none to reduce.
  for (const auto &[size, stride] : p.reduced)
    p.reducedNumel *= size;
  p.rowTail = p.reduced.size() == 1 && p.reduced[0].second == 1;
  // Blocks of one slice: a row (256 threads) per output, or a tile of 32
  // outputs (32 x 8 threads). Slice until about 1024 blocks, each slice
  // keeping 4096 elements of a row or 64 of a column (at most 256 slices).
  if (p.outNumel > 0 && p.reducedNumel > 0) {
    const int64_t blocks = p.rowTail ? p.outNumel : (p.outNumel + 31) / 32;
    int64_t slices = std::max<int64_t>(1, 1024 / blocks);
    slices = std::min(slices, std::max<int64_t>(1, p.reducedNumel /
                                                       (p.rowTail ? 4096 : 64)));
    p.slices = std::min<int64_t>(slices, 256);
  }
  if (p.slices > 1)
    p.scratchBytes = p.outNumel * p.slices * 8;
  return p;
}

StatusOr<CudaRadixSortPlan> planCudaRadixSort(int64_t count, int64_t maxKey,
                                              bool starts) {
  if (count < 0 || maxKey < 0)
    return invalidArgument("a sort of ", count, " keys up to ", maxKey);
  // Keys (maxKey included) and positions are uint32.
  if (maxKey >= int64_t(UINT32_MAX) || count > int64_t(INT32_MAX))
    return unimplemented("the CUDA backend sorts 32-bit keys and positions: ",
                         count, " items with keys up to ", maxKey,
                         " do not fit");
  CudaRadixSortPlan p;
  p.count = count;
  p.maxKey = maxKey;
  p.tiles = (count + CudaRadixSortPlan::kTileItems - 1) /
            CudaRadixSortPlan::kTileItems;
  int bits = 0;
  while (bits < 32 && (uint64_t(maxKey) >> bits) != 0)
    ++bits;
  p.passes = std::max(1, (bits + 7) / 8);
  int64_t at = 0;
  auto region = [&](int64_t bytes) {
    const int64_t offset = alignUp(at, kScratchAlignment);
    at = offset + bytes;
    return offset;
  };
  const int64_t words = count * 4;
  p.keys[0] = region(words);
  p.keys[1] = region(words);
  p.positions[0] = region(words);
  p.positions[1] = region(words);
  p.counts = region(CudaRadixSortPlan::kRadix * p.tiles * 4);
  if (starts)
    p.starts = region((maxKey + 1) * 4);
  p.totalBytes = at;
  return p;
}

StatusOr<CudaScatterAddPlan> planCudaScatterAdd(int64_t count, int64_t size) {
  return planCudaRadixSort(count, size, /*starts=*/true);
}

StatusOr<CudaRadixSortPlan> planCudaScatterSort(int64_t units,
                                                int64_t targets) {
  return planCudaRadixSort(units, targets, /*starts=*/false);
}

int64_t cudaBatchNormSlices(int64_t channels, int64_t perChannel) {
  if (channels < 1 || perChannel < 1)
    return 1;
  const int64_t want = (kCudaBatchNormBlocks + channels - 1) / channels;
  const int64_t most =
      (perChannel + kCudaBatchNormSliceMin - 1) / kCudaBatchNormSliceMin;
  return std::max<int64_t>(1, std::min(want, most));
}

CudaAxisMapTables planCudaAxisMapTables(const std::vector<cpu::AxisMap> &maps) {
  CudaAxisMapTables t;
  int64_t at = 0;
  auto region = [&](int64_t bytes, int64_t alignment) {
    const int64_t offset = alignUp(at, alignment);
    at = offset + bytes;
    return offset;
  };
  for (const cpu::AxisMap &m : maps) {
    t.offsets.push_back(region((m.outSize + 1) * 8, 8));
    t.taps.push_back(region(m.taps() * 8, 8));
    t.weights.push_back(region(m.taps() * 8, 8));
  }
  // The byte-wide fill flags last, so the 8-byte tables need no padding.
  for (const cpu::AxisMap &m : maps)
    t.fill.push_back(m.hasFill() ? region(m.outSize, 1) : -1);
  t.totalBytes = at;
  return t;
}

StatusOr<std::vector<cpu::AxisMap>> cudaAxisMaps(const KernelContext &ctx) {
  const std::string &k = ctx.kernel;
  if (ctx.inputs.empty() || ctx.outputs.empty())
    return ctx.error("expected an input and an output");
  const TensorView &in = ctx.inputs[0], &out = ctx.outputs[0];
  StatusOr<std::vector<cpu::AxisMap>> maps =
      internalError("no resampling maps for kernel ", k);
  if (k == "resize" || k == "resize_grad") {
    // resize_grad reads dy (the resized shape) into dx.
    const TensorView &small = k == "resize" ? in : out;
    const TensorView &large = k == "resize" ? out : in;
    DTCC_ASSIGN_OR_RETURN(cpu::ResizeSpec spec,
                          cpu::readResizeSpec(ctx, small.shape.size()));
    maps = cpu::resizeAxisMaps(spec, small.shape, large.shape);
  } else if (k == "pad" || k == "pad_grad") {
    StatusOr<std::string> mode = ctx.attrs.getString("mode");
    if (!mode.isOk())
      return ctx.error(mode.status().message());
    const TensorView &unpadded = k == "pad" ? in : out;
    const size_t rank = unpadded.shape.size();
    DTCC_ASSIGN_OR_RETURN(std::vector<int64_t> low,
                          cpu::getIntsAttr(ctx, "low", rank));
    DTCC_ASSIGN_OR_RETURN(std::vector<int64_t> high,
                          cpu::getIntsAttr(ctx, "high", rank));
    maps = cpu::padAxisMaps(*mode, unpadded.shape, low, high);
  }
  if (!maps.isOk())
    return ctx.error(maps.status().message());
  if (k == "resize_grad" || k == "pad_grad")
    return cpu::transposeAxisMaps(*maps);
  return maps;
}

StatusOr<ScratchSet> cudaKernelScratch(const KernelContext &ctx,
                                       int64_t groupSize) {
  const std::string &k = ctx.kernel;
  auto in = [&](size_t i) -> const TensorView & { return ctx.inputs[i]; };
  auto out = [&](size_t i) -> const TensorView & { return ctx.outputs[i]; };
  if (k == "matmul" || k == "matmul_bias") {
    if (ctx.outputs.empty() || out(0).numel() == 0)
      return ScratchSet{};
    return compute(kCudaMatmulWorkspaceBytes);
  }
  if (k == "matmul_bias_grad") {
    // cuBLASLt's workspace, then the partial sums of the summed operand's
    // rows where the sums run as a reduction of their own (a product whose
    // epilogue cuBLASLt lacks): one set, whichever runs.
    const int64_t summed = ctx.attrs.getInt("summed", -1);
    if (ctx.inputs.size() < 2 || ctx.outputs.empty() ||
        (summed != 0 && summed != 1))
      return ScratchSet{};
    ScratchSet set;
    if (out(0).numel() > 0)
      set = compute(kCudaMatmulWorkspaceBytes);
    auto plan = planCudaReduce(in(size_t(summed)).shape, {0});
    if (!plan.isOk())
      return ctx.error(plan.status().message());
    if (plan->scratchBytes > 0)
      set.push_back(
          {ScratchUse::kCompute, plan->scratchBytes, kScratchAlignment});
    return set;
  }
  if (k == "reduce_sum" || k == "sum_squares" || k == "reduce_prod" ||
      k == "reduce_max" || k == "reduce_min") {
    if (ctx.inputs.empty())
      return ScratchSet{};
    auto dims = ctx.attrs.getInts("dims");
    if (!dims.isOk())
      return ctx.error(dims.status().message());
    auto plan = planCudaReduce(in(0).shape, *dims);
    if (!plan.isOk())
      return ctx.error(plan.status().message());
    return plan->scratchBytes > 0 ? compute(plan->scratchBytes) : ScratchSet{};
  }
  if (k == "global_sum_squares") {
    int64_t chunks = 0;
    for (const TensorView &t : ctx.inputs)
      chunks += cudaSumSquaresChunks(t.numel());
    const int64_t tensors = int64_t(ctx.inputs.size());
    return ScratchSet{
        ScratchRequest{ScratchUse::kPersistent,
                       tensors * kCudaSumSquaresEntryBytes,
                       kCudaSumSquaresEntryAlignment},
        ScratchRequest{ScratchUse::kCompute, 8 * (chunks + tensors)}};
  }
  if (k == "adamw")
    return ScratchSet{ScratchRequest{ScratchUse::kPersistent,
                                     kCudaAdamwEntryBytes,
                                     kCudaAdamwEntryAlignment}};
  if (k == "attention" || k == "attention_grad") {
    // attention_grad: rowsum(dout * out) per query row (one per logsumexp
    // element), in float; in double for f64. Then cuDNN's workspace where
    // cuDNN takes the call.
    const bool grad = k == "attention_grad";
    if (ctx.inputs.size() < (grad ? 6u : 3u))
      return ScratchSet{};
    const TensorView &q = in(0), &key = in(1), &v = in(2);
    if (q.rank() < 2 || key.rank() < 2 || v.rank() < 2)
      return ScratchSet{};
    const int64_t sq = q.shape[q.rank() - 2], sk = key.shape[key.rank() - 2];
    // (From the shape: a head dimension of 0 still has its rows.)
    const int64_t rows = product(q.shape, 0, size_t(q.rank() - 1));
    ScratchSet set;
    if (grad && rows > 0)
      set = compute(rows * (q.dtype == DType::kF64 ? 8 : 4));
    const bool hasMask = ctx.inputs.size() > (grad ? 6u : 3u);
    const int64_t ws = cudnnAttentionWorkspace(
        grad, q.dtype, hasMask, sq > 0 ? rows / sq : 0, sq, sk,
        q.shape.back(), v.shape.back());
    if (ws > 0)
      set.push_back({ScratchUse::kCompute, ws, kScratchAlignment});
    return set;
  }
  if (k == "layer_norm_grad" || k == "rms_norm_grad" ||
      k == "layer_norm_param_grad" || k == "rms_norm_param_grad") {
    if (ctx.inputs.empty())
      return ScratchSet{};
    const TensorView &x = in(0);
    DTCC_ASSIGN_OR_RETURN(int64_t axis, dimAttr(ctx, "axis", x.rank()));
    const int64_t rows = product(x.shape, 0, size_t(axis)),
                  cols = product(x.shape, size_t(axis), x.shape.size());
    const int64_t stats =
        k == "layer_norm_grad" || k == "layer_norm_param_grad" ? 2 : 1;
    // Partial sums in float; in double for f64 rows.
    const int64_t partial = x.dtype == DType::kF64 ? 8 : 4;
    return compute(stats * cudaNormGradSlices(rows) *
                   std::max<int64_t>(cols, 1) * partial);
  }
  if (k == "scatter_add") {
    if (ctx.inputs.size() < 2 || ctx.outputs.empty())
      return ScratchSet{};
    DTCC_ASSIGN_OR_RETURN(int64_t axis, dimAttr(ctx, "axis", out(0).rank()));
    DTCC_ASSIGN_OR_RETURN(
        CudaScatterAddPlan p,
        planCudaScatterAdd(in(1).numel(), out(0).shape[size_t(axis)]));
    if (p.count == 0 || out(0).numel() == 0)
      return ScratchSet{};
    return compute(p.totalBytes);
  }
  cpu::ConvKind conv;
  if (cpu::convKindOf(k, conv)) {
    // cuDNN's workspace (capped), then the zero-padded copy of the input of
    // an asymmetric window. An empty operand makes no cuDNN call.
    if (ctx.inputs.size() < 2 || ctx.outputs.empty() || in(0).numel() == 0 ||
        in(1).numel() == 0 || out(0).numel() == 0)
      return ScratchSet{};
    DTCC_ASSIGN_OR_RETURN(cpu::ConvGeometry g,
                          cpu::convGeometryOfShapes(ctx, conv));
    StatusOr<cuda::CudnnConvPlan> plan = cuda::planCudnnConv(g);
    if (!plan.isOk())
      return ctx.error(plan.status().message());
    ScratchSet set = compute(kCudaConvWorkspaceBytes);
    if (plan->explicitPad)
      set.push_back({ScratchUse::kCompute,
                     plan->inputElements() * dtypeSize(out(0).dtype),
                     kScratchAlignment});
    return set;
  }
  if (k == "batch_norm_stats" || k == "batch_norm_grad_stats") {
    // x [N, C, d...]: double partials per (channel, slice), two sums each.
    if (ctx.inputs.empty() || in(0).rank() < 2 || in(0).shape[1] == 0)
      return ScratchSet{};
    const int64_t channels = in(0).shape[1];
    const int64_t slices =
        cudaBatchNormSlices(channels, in(0).numel() / channels);
    return compute(2 * channels * slices * int64_t(sizeof(double)));
  }
  if (k == "max_pool_grad" || k == "grid_sample_grad" ||
      k == "roi_align_grad") {
    // f16 and bf16 gradients accumulate in a float copy of dx.
    if (ctx.outputs.empty() || out(0).numel() == 0 ||
        (out(0).dtype != DType::kF16 && out(0).dtype != DType::kBF16))
      return ScratchSet{};
    return compute(out(0).numel() * int64_t(sizeof(float)));
  }
  if (k == "resize" || k == "resize_grad" || k == "pad_grad" ||
      (k == "pad" && ctx.attrs.getString("mode", "constant") != "constant")) {
    // The tap tables, written once.
    DTCC_ASSIGN_OR_RETURN(std::vector<cpu::AxisMap> maps, cudaAxisMaps(ctx));
    if (maps.empty())
      return ScratchSet{};
    return ScratchSet{ScratchRequest{ScratchUse::kPersistent,
                                     planCudaAxisMapTables(maps).totalBytes,
                                     kCudaAxisMapTableAlignment}};
  }
  if (k == "scatter_nd" || k == "scatter_elements") {
    // data, indices, updates -> out: the sort of the updates' targets.
    if (ctx.inputs.size() < 3 || ctx.outputs.empty())
      return ScratchSet{};
    const TensorView &data = in(0), &indices = in(1);
    int64_t units = 0, targets = 0;
    if (k == "scatter_nd") {
      // data [B.., K.., T..], indices [B.., I.., k]: a unit is one tuple's
      // slice [T..], a target one of the data's [B.., K..] slices.
      if (indices.rank() < 1)
        return ScratchSet{};
      const int64_t b = ctx.attrs.getInt("batch_dims", 0);
      const int64_t tuple = indices.shape.back();
      if (product(data.shape, size_t(b + tuple), data.shape.size()) == 0)
        return ScratchSet{};
      units = product(indices.shape, 0, indices.shape.size() - 1);
      targets = product(data.shape, 0, size_t(b + tuple));
    } else {
      units = indices.numel();
      targets = data.numel();
    }
    if (units == 0)
      return ScratchSet{};
    auto plan = planCudaScatterSort(units, targets);
    if (!plan.isOk())
      return unimplemented(cpu::errorPrefix(ctx), plan.status().message());
    return compute(plan->totalBytes);
  }
  // Collectives whose blocks are not contiguous in their buffers stage them
  // on the communication stream (CudaCollectives.cpp).
  if (k == "all_gather" || k == "reduce_scatter") {
    if (ctx.inputs.empty() || ctx.outputs.empty() || in(0).numel() == 0)
      return ScratchSet{};
    DTCC_ASSIGN_OR_RETURN(int64_t dim, dimAttr(ctx, "dim", in(0).rank()));
    // all_gather: x [outer][inner] -> y [outer][n][inner]; reduce_scatter:
    // x [outer][n][inner] -> y [outer][inner]. The staging holds the
    // larger of the two.
    const int64_t outer = product(in(0).shape, 0, size_t(dim));
    if (outer <= 1)
      return ScratchSet{};
    const int64_t bytes = k == "all_gather" ? out(0).sizeInBytes()
                                            : in(0).sizeInBytes();
    return ScratchSet{ScratchRequest{ScratchUse::kComm, bytes,
                                     kScratchAlignment}};
  }
  if (k == "all_to_all") {
    if (ctx.inputs.empty() || in(0).numel() == 0 || groupSize < 1)
      return ScratchSet{};
    const TensorView &x = in(0);
    DTCC_ASSIGN_OR_RETURN(int64_t split, dimAttr(ctx, "split_dim", x.rank()));
    DTCC_ASSIGN_OR_RETURN(int64_t concat,
                          dimAttr(ctx, "concat_dim", x.rank()));
    std::vector<int64_t> chunk = x.shape;
    chunk[size_t(split)] /= groupSize;
    ScratchSet set;
    if (product(x.shape, 0, size_t(split)) > 1)
      set.push_back({ScratchUse::kComm, x.sizeInBytes(), kScratchAlignment});
    if (product(chunk, 0, size_t(concat)) > 1)
      set.push_back({ScratchUse::kComm, x.sizeInBytes(), kScratchAlignment});
    return set;
  }
  return ScratchSet{};
}

StatusOr<ScratchLayout> cudaProgramScratch(const format::Program &program,
                                           int64_t stage) {
  auto view = [&](int32_t id) -> StatusOr<TensorView> {
    if (id < 0 || id >= program.buffers_size())
      return dataLoss("program refers to buffer ", id, " of ",
                      program.buffers_size());
    const format::Buffer &b = program.buffers(id);
    TensorView v;
    v.dtype = static_cast<DType>(b.dtype());
    v.shape.assign(b.shape().begin(), b.shape().end());
    v.strides = b.strides_size() == int(v.shape.size())
                    ? std::vector<int64_t>(b.strides().begin(),
                                           b.strides().end())
                    : contiguousStrides(v.shape);
    return v;
  };
  // The size of the group of a collective's axes.
  auto groupSize = [&](const Attrs &attrs) -> int64_t {
    StatusOr<std::vector<std::string>> axes = attrs.getStrings("axes");
    if (!axes.isOk())
      return 1;
    int64_t n = 1;
    for (const std::string &a : axes.value())
      for (int i = 0; i < program.mesh().axes_size(); ++i)
        if (program.mesh().axes(i) == a && i < program.mesh().sizes_size())
          n *= program.mesh().sizes(i);
    return n;
  };
  std::vector<ScratchSet> sets;
  for (const format::Function &fn : program.functions()) {
    if (stage >= 0 && fn.has_stage() && fn.stage() != stage)
      continue;
    for (const format::Instruction &inst : fn.instructions()) {
      // Host instructions run the CPU's kernels, with host scratch.
      if (inst.host())
        continue;
      KernelContext ctx;
      ctx.kernel = inst.kernel();
      ctx.location = inst.location();
      for (int32_t id : inst.inputs()) {
        DTCC_ASSIGN_OR_RETURN(TensorView v, view(id));
        ctx.inputs.push_back(std::move(v));
      }
      for (int32_t id : inst.outputs()) {
        DTCC_ASSIGN_OR_RETURN(TensorView v, view(id));
        ctx.outputs.push_back(std::move(v));
      }
      ctx.attrs = instructionAttrs(inst);
      DTCC_ASSIGN_OR_RETURN(ScratchSet set,
                            cudaKernelScratch(ctx, groupSize(ctx.attrs)));
      if (!set.empty())
        sets.push_back(std::move(set));
    }
  }
  return layoutScratch(sets);
}

} // namespace dtcc::runtime
