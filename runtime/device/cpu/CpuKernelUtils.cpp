//===- CpuKernelUtils.cpp - checks shared by the CPU kernel factories -----===//

#include "runtime/device/cpu/CpuKernelUtils.h"
#include "runtime/device/cpu/IsaDispatch.h"

#include "runtime/comm/CommContext.h"

#include <cstdlib>
#include <cstring>

namespace dtcc::runtime::cpu {

bool cpuSupportsAvx512() {
  static const bool has = [] {
#if DTCC_HAVE_AVX512_CLONES
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq");
#else
    return false;
#endif
  }();
  return has;
}

bool cpuHasAvx512() {
  static const bool has = [] {
    if (const char *isa = std::getenv("DTCC_CPU_ISA");
        isa && std::strcmp(isa, "baseline") == 0)
      return false;
    return cpuSupportsAvx512();
  }();
  return has;
}

std::string typeSetName(unsigned set) {
  std::string s;
  auto add = [&](const char *name) {
    if (!s.empty())
      s += ", ";
    s += name;
  };
  if (set & kSetF32F64)
    add("f32, f64");
  if (set & kSetHalfs)
    add("f16, bf16");
  if (set & kSetInts)
    add("integers");
  if (set & kSetBool)
    add("i1");
  return s;
}

std::string shapeString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

int64_t product(const std::vector<int64_t> &shape, size_t begin, size_t end) {
  if (end > shape.size())
    end = shape.size();
  int64_t n = 1;
  for (size_t i = begin; i < end; ++i)
    n *= shape[i];
  return n;
}

Status checkStrides(const KernelContext &ctx, const TensorView &view,
                    const std::string &what) {
  if (view.strides.size() != view.shape.size())
    return ctx.error(what, " has ", view.strides.size(), " strides for rank ",
                     view.rank());
  for (int64_t d : view.shape)
    if (d < 0)
      return ctx.error(what, " has a negative dimension in ",
                       shapeString(view.shape));
  return Status::ok();
}

Status checkContiguous(const KernelContext &ctx, const TensorView &view,
                       const std::string &what) {
  DTCC_RETURN_IF_ERROR(checkStrides(ctx, view, what));
  if (!view.isContiguous())
    return ctx.error("expected ", what, " to be contiguous, got strides ",
                     shapeString(view.strides), " for shape ",
                     shapeString(view.shape));
  if (!view.data && view.numel() > 0)
    return ctx.error(what, " has no data");
  return Status::ok();
}

Status checkDType(const KernelContext &ctx, const TensorView &view, DType dtype,
                  const std::string &what) {
  if (view.dtype != dtype)
    return ctx.error("expected ", what, " of element type ", dtypeName(dtype),
                     ", got ", dtypeName(view.dtype));
  return Status::ok();
}

Status checkShape(const KernelContext &ctx, const TensorView &view,
                  const std::vector<int64_t> &shape, const std::string &what) {
  if (view.shape != shape)
    return ctx.error("expected ", what, " of shape ", shapeString(shape),
                     ", got ", shapeString(view.shape));
  return Status::ok();
}

/// One input and one output, contiguous, of the same dtype.
static Status checkMove(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(expectArity(ctx, 1, 1));
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  return checkDType(ctx, ctx.outputs[0], ctx.inputs[0].dtype, "output 0");
}

StatusOr<StridedRead> broadcastInDimRead(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkMove(ctx));
  const TensorView &in = ctx.inputs[0], &out = ctx.outputs[0];
  DTCC_ASSIGN_OR_RETURN(std::vector<int64_t> dims,
                        getIntsAttr(ctx, "dims", in.shape.size()));
  StridedRead r{out.shape, std::vector<int64_t>(out.shape.size(), 0), 0};
  std::vector<int64_t> inStrides = contiguousStrides(in.shape);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = dims[i];
    if (d < 0 || d >= out.rank() || (i > 0 && d <= dims[i - 1]))
      return ctx.error("expected dims strictly increasing in [0, ", out.rank(),
                       "), got ", shapeString(dims));
    if (in.shape[i] != 1 && in.shape[i] != out.shape[d])
      return ctx.error("input dimension ", i, " (", in.shape[i],
                       ") is neither 1 nor output dimension ", d, " (",
                       out.shape[d], ")");
    r.strides[d] = in.shape[i] == 1 ? 0 : inStrides[i];
  }
  return r;
}

StatusOr<StridedRead> transposeRead(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkMove(ctx));
  const TensorView &in = ctx.inputs[0], &out = ctx.outputs[0];
  DTCC_ASSIGN_OR_RETURN(std::vector<int64_t> perm,
                        getIntsAttr(ctx, "perm", in.shape.size()));
  std::vector<bool> seen(perm.size(), false);
  StridedRead r;
  std::vector<int64_t> inStrides = contiguousStrides(in.shape);
  for (int64_t p : perm) {
    if (p < 0 || p >= in.rank() || seen[p])
      return ctx.error("expected perm to be a permutation of [0, ", in.rank(),
                       "), got ", shapeString(perm));
    seen[p] = true;
    r.shape.push_back(in.shape[p]);
    r.strides.push_back(inStrides[p]);
  }
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, r.shape, "output 0"));
  return r;
}

StatusOr<StridedRead> sliceRead(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkMove(ctx));
  const TensorView &in = ctx.inputs[0], &out = ctx.outputs[0];
  size_t rank = in.shape.size();
  DTCC_ASSIGN_OR_RETURN(std::vector<int64_t> start,
                        getIntsAttr(ctx, "start", rank));
  DTCC_ASSIGN_OR_RETURN(std::vector<int64_t> limit,
                        getIntsAttr(ctx, "limit", rank));
  DTCC_ASSIGN_OR_RETURN(std::vector<int64_t> stride,
                        getIntsAttr(ctx, "stride", rank));
  std::vector<int64_t> inStrides = contiguousStrides(in.shape);
  StridedRead r{std::vector<int64_t>(rank), std::vector<int64_t>(rank), 0};
  for (size_t d = 0; d < rank; ++d) {
    if (stride[d] < 1 || start[d] < 0 || start[d] > limit[d] ||
        limit[d] > in.shape[d])
      return ctx.error("dimension ", d, ": expected 0 <= start (", start[d],
                       ") <= limit (", limit[d], ") <= ", in.shape[d],
                       " and stride (", stride[d], ") >= 1");
    r.shape[d] = (limit[d] - start[d] + stride[d] - 1) / stride[d];
    r.strides[d] = inStrides[d] * stride[d];
    r.offset += start[d] * inStrides[d];
  }
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, r.shape, "output 0"));
  if (out.numel() == 0)
    r.offset = 0;
  return r;
}

StatusOr<StridedRead> reverseRead(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkMove(ctx));
  const TensorView &in = ctx.inputs[0], &out = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, in.shape, "output 0"));
  DTCC_ASSIGN_OR_RETURN(std::vector<int64_t> dims, getIntsAttr(ctx, "dims"));
  StridedRead r{in.shape, contiguousStrides(in.shape), 0};
  std::vector<bool> seen(in.shape.size(), false);
  for (int64_t d : dims) {
    if (d < 0 || d >= in.rank() || seen[d])
      return ctx.error("expected distinct dims in [0, ", in.rank(), "), got ",
                       shapeString(dims));
    seen[d] = true;
    if (in.shape[d] > 0)
      r.offset += (in.shape[d] - 1) * r.strides[d];
    r.strides[d] = -r.strides[d];
  }
  if (in.numel() == 0)
    r.offset = 0;
  return r;
}

StatusOr<Communicator *> meshGroup(const KernelContext &ctx) {
  if (!ctx.comm)
    return ctx.error("collective kernels need the communicators of a device "
                     "mesh, but none were given: the program has no mesh, or "
                     "was loaded without a CommContext");
  auto axes = ctx.attrs.getStrings("axes");
  if (!axes.isOk())
    return ctx.error(axes.status().message());
  auto comm = ctx.comm->group(axes.value());
  if (!comm.isOk())
    return ctx.error(comm.status().message());
  return comm.value();
}

StatusOr<int64_t> getDimAttr(const KernelContext &ctx, const std::string &name,
                             int64_t rank) {
  StatusOr<int64_t> dim = ctx.attrs.getInt(name);
  if (!dim.isOk())
    return ctx.error(dim.status().message());
  int64_t d = dim.value();
  if (d < -rank || d >= rank)
    return ctx.error("expected ", name, " in [", -rank, ", ", rank, "), got ",
                     d);
  return d < 0 ? d + rank : d;
}

StatusOr<std::vector<int64_t>> getIntsAttr(const KernelContext &ctx,
                                           const std::string &name) {
  if (!ctx.attrs.has(name))
    return std::vector<int64_t>();
  StatusOr<std::vector<int64_t>> v = ctx.attrs.getInts(name);
  if (!v.isOk())
    return ctx.error(v.status().message());
  return v;
}

StatusOr<std::vector<int64_t>>
getIntsAttr(const KernelContext &ctx, const std::string &name, size_t size) {
  DTCC_ASSIGN_OR_RETURN(std::vector<int64_t> v, getIntsAttr(ctx, name));
  if (v.size() != size)
    return ctx.error("expected ", size, " entries in ", name, ", got ",
                     v.size());
  return v;
}

Status unsupportedDType(const KernelContext &ctx, DType dtype, unsigned set,
                        const std::string &what) {
  return ctx.error("unsupported ", what, " ", dtypeName(dtype), " (expected ",
                   typeSetName(set), ")");
}

Status checkAllContiguous(const KernelContext &ctx) {
  for (size_t i = 0; i < ctx.inputs.size(); ++i)
    DTCC_RETURN_IF_ERROR(
        checkContiguous(ctx, ctx.inputs[i], "input " + std::to_string(i)));
  for (size_t i = 0; i < ctx.outputs.size(); ++i)
    DTCC_RETURN_IF_ERROR(
        checkContiguous(ctx, ctx.outputs[i], "output " + std::to_string(i)));
  return Status::ok();
}

StatusOr<bool> checkGlobalSumSquares(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView &out = ctx.outputs[0];
  if (ctx.inputs.empty())
    return ctx.error("expected at least one operand");
  DTCC_RETURN_IF_ERROR(checkShape(ctx, out, {}, "output 0"));
  const bool wide = out.dtype == DType::kF64;
  if (!wide)
    DTCC_RETURN_IF_ERROR(checkDType(ctx, out, DType::kF32, "output 0"));
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    const DType t = ctx.inputs[i].dtype;
    if (wide ? t != DType::kF64 : t != DType::kF32 && !isHalfDType(t))
      return ctx.error("input ", i, ": expected ",
                       wide ? "f64" : "f32, bf16 or f16", " for a result of ",
                       dtypeName(out.dtype), ", got ", dtypeName(t));
  }
  return wide;
}

Status checkMatmulBias(const KernelContext &ctx) {
  const TensorView &out = ctx.outputs[0], &bias = ctx.inputs[2];
  if (out.rank() < 1 || bias.rank() != 1 || bias.shape[0] != out.shape.back())
    return ctx.error("expected a bias of [", out.rank() ? out.shape.back() : 0,
                     "] elements, got ", bias.typeString());
  return Status::ok();
}

StatusOr<int64_t> checkMatmulBiasGrad(const KernelContext &ctx) {
  const int64_t summed = ctx.attrs.getInt("summed", -1);
  if (summed != 0 && summed != 1)
    return ctx.error("expected summed 0 (lhs) or 1 (rhs), got ", summed);
  const TensorView &rows = ctx.inputs[size_t(summed)];
  const bool contracted = summed ? !ctx.attrs.getBool("transpose_rhs")
                                 : ctx.attrs.getBool("transpose_lhs");
  if (rows.rank() != 2 || !contracted)
    return ctx.error("expected the summed ",
                     summed ? "rhs a matrix, not transposed"
                            : "lhs a matrix, transposed",
                     " (its rows contracted), got ", rows.typeString(),
                     contracted ? ""
                     : summed   ? " transposed"
                                : " not transposed");
  DTCC_RETURN_IF_ERROR(
      checkShape(ctx, ctx.outputs[1], {rows.shape[1]}, "output 1"));
  return summed;
}

StatusOr<ScatterReduction> readScatterReduction(const KernelContext &ctx) {
  const std::string r = ctx.attrs.getString("reduction", "none");
  if (r == "none")
    return ScatterReduction::kNone;
  if (r == "add")
    return ScatterReduction::kAdd;
  if (r == "mul")
    return ScatterReduction::kMul;
  if (r == "max")
    return ScatterReduction::kMax;
  if (r == "min")
    return ScatterReduction::kMin;
  return ctx.error("expected reduction \"none\", \"add\", \"mul\", \"max\" or "
                   "\"min\", got \"",
                   r, "\"");
}

} // namespace dtcc::runtime::cpu
