//===- CudnnAttention.cpp - attention on cuDNN's fused flash kernels ------===//
//
// The graphs are those cuDNN's frontend (cudnn-frontend, node/
// scaled_dot_product_flash_attention.h, softmax.h, diagonal_band_mask.h)
// builds for scaled dot-product attention, written against the backend
// API: every intermediate is a virtual tensor in float (P and dS in the
// inputs' type where a matmul reads them), scalars are passed by value, and
// cuDNN's engines recognise the pattern as their flash attention kernels.
// dtcc's leading dimensions B... are cuDNN's b and h (CudaAttention.cpp
// merges them into at most two); the operands keep their strides, and Kᵀ
// and Vᵀ are K and V with their last two strides swapped. The virtual
// tensors and the statistics are packed [b, h, ...], as cuDNN's frontend
// makes them.
//
// Each bound call keeps its finalized plan; a run makes the variant pack
// (the buffers' unique ids and pointers) and executes on the handle's
// stream.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cuda/CudnnAttention.h"

#include "runtime/device/cuda/CudnnCommon.h"

#include <algorithm>
#include <array>
#include <limits>
#include <vector>

namespace dtcc::runtime::cuda {
namespace {

/// A backend descriptor, destroyed with its last owner.
using Desc = std::shared_ptr<void>;

/// The unique ids of the buffers a run binds (the graph's other tensors are
/// virtual or scalars passed by value, numbered from kFirstInternal).
enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kStats,
  kDOut,
  kDQ,
  kDK,
  kDV,
  kSoftmaxSum,
  kScale,
  kNegInf,
  kOne,
  kFirstInternal = 100,
};

using Dims = std::array<int64_t, 4>;

/// A tensor of the graph: its descriptor and what it is.
struct Tensor {
  cudnnBackendDescriptor_t desc = nullptr;
  Dims dims{}, strides{};
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
};

/// Makes the descriptors of one graph. The first failing call is kept and
/// every later one skipped, so the graph reads as its operations and the
/// status is checked once at the end.
class GraphBuilder {
public:
  explicit GraphBuilder(cudnnHandle_t handle) : handle(handle) {}

  const Status &status() const { return first; }

  Tensor tensor(int64_t uid, cudnnDataType_t type, Dims dims, Dims strides,
                bool isVirtual, bool byValue = false) {
    Tensor t{nullptr, dims, strides, type};
    Desc d = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    if (!d)
      return t;
    const int64_t alignment = 16;
    set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
    set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
    set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    set(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &isVirtual);
    if (byValue)
      set(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &byValue);
    finalize(d);
    t.desc = d.get();
    return t;
  }
  /// A virtual tensor numbered by the builder.
  Tensor temp(cudnnDataType_t type, Dims dims, Dims strides) {
    return tensor(nextUid++, type, dims, strides, /*isVirtual=*/true);
  }
  /// A float scalar passed by value (its value bound at each run).
  Tensor scalar(int64_t uid) {
    return tensor(uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1},
                  /*isVirtual=*/false, /*byValue=*/true);
  }

  /// y = mode(x[, b[, t]]) with the given math precision.
  void pointwise(cudnnPointwiseMode_t mode, const Tensor &x, const Tensor *b,
                 const Tensor *t, const Tensor &y,
                 cudnnDataType_t math = CUDNN_DATA_FLOAT, int64_t axis = -1) {
    Desc pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    if (!pw)
      return;
    set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math);
    if (mode == CUDNN_POINTWISE_GEN_INDEX)
      set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    finalize(pw);
    Desc op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    if (!op)
      return;
    setDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw.get());
    setDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x.desc);
    if (b)
      setDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b->desc);
    if (t)
      setDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t->desc);
    setDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y.desc);
    const float one = 1.f;
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one);
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
    addOperation(op);
  }
  /// A float temporary of x's shape: mode(x[, b]).
  Tensor pointwise(cudnnPointwiseMode_t mode, const Tensor &x,
                   const Tensor *b = nullptr) {
    Tensor y = temp(CUDNN_DATA_FLOAT, x.dims, x.strides);
    pointwise(mode, x, b, nullptr, y);
    return y;
  }

  /// y = reduce(x) over the dimensions where y is 1.
  void reduction(cudnnReduceTensorOp_t mode, const Tensor &x,
                 const Tensor &y) {
    Desc rd = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    if (!rd)
      return;
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    set(rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    set(rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE,
        1, &mode);
    finalize(rd);
    Desc op = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    if (!op)
      return;
    setDesc(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, rd.get());
    setDesc(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x.desc);
    setDesc(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y.desc);
    addOperation(op);
  }

  /// c = a b (batched over the first two dimensions), in float.
  void matmul(const Tensor &a, const Tensor &b, const Tensor &c) {
    Desc md = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    if (!md)
      return;
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    set(md, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    finalize(md);
    Desc op = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    if (!op)
      return;
    setDesc(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a.desc);
    setDesc(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b.desc);
    setDesc(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c.desc);
    setDesc(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, md.get());
    addOperation(op);
  }

  /// y: x seen with other dimensions and strides (a transpose).
  void reshape(const Tensor &x, const Tensor &y) {
    Desc op = make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    if (!op)
      return;
    setDesc(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x.desc);
    setDesc(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y.desc);
    addOperation(op);
  }

  /// The causal mask (keys after the query hidden, the top-left diagonal):
  /// x where row >= column, else -inf; as cuDNN's diagonal band mask with
  /// a right bound of 0.
  Tensor causalMask(const Tensor &x, const Tensor &negInf) {
    Tensor row = temp(CUDNN_DATA_INT32, x.dims, x.strides);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, nullptr, row,
              CUDNN_DATA_FLOAT, 2);
    Tensor col = temp(CUDNN_DATA_INT32, x.dims, x.strides);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, nullptr, col,
              CUDNN_DATA_FLOAT, 3);
    Tensor keep = temp(CUDNN_DATA_BOOLEAN, x.dims, x.strides);
    pointwise(CUDNN_POINTWISE_CMP_GE, row, &col, nullptr, keep,
              CUDNN_DATA_BOOLEAN);
    Tensor y = temp(CUDNN_DATA_FLOAT, x.dims, x.strides);
    pointwise(CUDNN_POINTWISE_BINARY_SELECT, x, &negInf, &keep, y);
    return y;
  }

  /// The operation graph of everything added.
  Desc graph() {
    Desc g = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    if (!g)
      return g;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (const Desc &op : ops)
      raw.push_back(op.get());
    set(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
        int64_t(raw.size()), raw.data());
    set(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    finalize(g);
    return first.isOk() ? g : Desc();
  }

  /// Every descriptor made, kept alive with the plan.
  std::vector<Desc> kept;

private:
  Desc make(cudnnBackendDescriptorType_t type) {
    if (!first.isOk())
      return Desc();
    cudnnBackendDescriptor_t raw = nullptr;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(type, &raw);
    if (s != CUDNN_STATUS_SUCCESS) {
      first = cudnnError(s, "cudnnBackendCreateDescriptor", __FILE__, __LINE__);
      return Desc();
    }
    Desc d(raw, [](void *p) { cudnnBackendDestroyDescriptor(p); });
    kept.push_back(d);
    return d;
  }
  void set(const Desc &d, cudnnBackendAttributeName_t name,
           cudnnBackendAttributeType_t type, int64_t count,
           const void *value) {
    if (!first.isOk() || !d)
      return;
    cudnnStatus_t s = cudnnBackendSetAttribute(d.get(), name, type, count,
                                               const_cast<void *>(value));
    if (s != CUDNN_STATUS_SUCCESS)
      first = cudnnError(s, "cudnnBackendSetAttribute", __FILE__, __LINE__)
                  .withContext(strCat("attribute ", int(name)));
  }
  void setDesc(const Desc &d, cudnnBackendAttributeName_t name,
               cudnnBackendDescriptor_t value) {
    set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value);
  }
  void finalize(const Desc &d) {
    if (!first.isOk() || !d)
      return;
    cudnnStatus_t s = cudnnBackendFinalize(d.get());
    if (s != CUDNN_STATUS_SUCCESS)
      first = cudnnError(s, "cudnnBackendFinalize", __FILE__, __LINE__);
  }
  void addOperation(const Desc &op) {
    finalize(op);
    if (first.isOk())
      ops.push_back(op);
  }

  cudnnHandle_t handle;
  Status first = Status::ok();
  std::vector<Desc> ops;
  int64_t nextUid = kFirstInternal;
};

/// Row-major strides of [b, h, r, c].
Dims packed(int64_t h, int64_t r, int64_t c) { return {h * r * c, r * c, c, 1}; }

/// The strides of an operand [b, h, S, D] and of its transpose [b, h, D, S].
Dims stridesOf(const CudnnAttentionStrides &x) { return {x.b, x.h, x.s, 1}; }
Dims transposed(const CudnnAttentionStrides &x) { return {x.b, x.h, 1, x.s}; }

/// The forward graph (cuDNN frontend's CompositeSDPANode with stats).
void forwardGraph(GraphBuilder &g, const CudnnAttentionCall &c,
                  cudnnDataType_t io) {
  const int64_t b = c.batch, h = c.heads, sq = c.sq, sk = c.sk, d = c.d;
  Tensor q = g.tensor(kQ, io, {b, h, sq, d}, stridesOf(c.q), false);
  // Kᵀ: K [b, h, sk, d] with its last two dimensions swapped.
  Tensor kt = g.tensor(kK, io, {b, h, d, sk}, transposed(c.k), false);
  Tensor v = g.tensor(kV, io, {b, h, sk, d}, stridesOf(c.v), false);
  Tensor o = g.tensor(kO, io, {b, h, sq, d}, stridesOf(c.o), false);
  Tensor stats = g.tensor(kStats, CUDNN_DATA_FLOAT, {b, h, sq, 1},
                          packed(h, sq, 1), false);
  Tensor scale = g.scalar(kScale);

  Tensor s = g.temp(CUDNN_DATA_FLOAT, {b, h, sq, sk}, packed(h, sq, sk));
  g.matmul(q, kt, s);
  Tensor scaled = g.pointwise(CUDNN_POINTWISE_MUL, s, &scale);
  if (c.causal)
    scaled = g.causalMask(scaled, g.scalar(kNegInf));
  // Softmax with its statistics: stats = max + log(sum(exp(x - max))).
  const Dims rowDims{b, h, sq, 1}, rowStrides = packed(h, sq, 1);
  Tensor max = g.temp(CUDNN_DATA_FLOAT, rowDims, rowStrides);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, scaled, max);
  Tensor shifted = g.pointwise(CUDNN_POINTWISE_SUB, scaled, &max);
  Tensor e = g.pointwise(CUDNN_POINTWISE_EXP, shifted);
  Tensor sum = g.temp(CUDNN_DATA_FLOAT, rowDims, rowStrides);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
  Tensor logSum = g.pointwise(CUDNN_POINTWISE_LOG, sum);
  g.pointwise(CUDNN_POINTWISE_ADD, max, &logSum, nullptr, stats);
  // P in the inputs' type, as the second matmul reads it.
  Tensor p = g.temp(io, e.dims, e.strides);
  g.pointwise(CUDNN_POINTWISE_DIV, e, &sum, nullptr, p);
  g.matmul(p, v, o);
}

/// The backward graph (cuDNN frontend's CompositeSDPABackwardNode with the
/// dP workspace, its deterministic form: dq written by its own matmul, not
/// accumulated).
void backwardGraph(GraphBuilder &g, const CudnnAttentionCall &c,
                   cudnnDataType_t io) {
  const int64_t b = c.batch, h = c.heads, sq = c.sq, sk = c.sk, d = c.d;
  const Dims qDims{b, h, sq, d}, kDims{b, h, sk, d}, tkDims{b, h, d, sk};
  Tensor q = g.tensor(kQ, io, qDims, stridesOf(c.q), false);
  Tensor kt = g.tensor(kK, io, tkDims, transposed(c.k), false);
  Tensor vt = g.tensor(kV, io, tkDims, transposed(c.v), false);
  Tensor o = g.tensor(kO, io, qDims, stridesOf(c.o), false);
  Tensor dout = g.tensor(kDOut, io, qDims, stridesOf(c.dout), false);
  const Dims rowDims{b, h, sq, 1}, rowStrides = packed(h, sq, 1);
  Tensor stats = g.tensor(kStats, CUDNN_DATA_FLOAT, rowDims, rowStrides,
                          false);
  Tensor dq = g.tensor(kDQ, io, qDims, stridesOf(c.dq), false);
  Tensor dk = g.tensor(kDK, io, kDims, stridesOf(c.dk), false);
  Tensor dv = g.tensor(kDV, io, kDims, stridesOf(c.dv), false);
  Tensor scale = g.scalar(kScale);
  Tensor one = g.scalar(kOne);

  // softmaxSum = rowsum(dout * out), a buffer of its own. The product's
  // strides are the frontend's (its mul_dO_O), whatever dout's and out's.
  Tensor dOO = g.temp(CUDNN_DATA_FLOAT, qDims, {h * sq * d, sq * d, h * d, 1});
  g.pointwise(CUDNN_POINTWISE_MUL, dout, &o, nullptr, dOO);
  Tensor rowDot = g.temp(CUDNN_DATA_FLOAT, rowDims, rowStrides);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, dOO, rowDot);
  Tensor softmaxSum = g.tensor(kSoftmaxSum, CUDNN_DATA_FLOAT, rowDims,
                               rowStrides, false);
  g.pointwise(CUDNN_POINTWISE_MUL, rowDot, &one, nullptr, softmaxSum);

  // P = exp(scale * Q Kᵀ - stats), masked; dV = Pᵀ dO.
  const Dims sDims{b, h, sq, sk}, sStrides = packed(h, sq, sk);
  Tensor s = g.temp(CUDNN_DATA_FLOAT, sDims, sStrides);
  g.matmul(q, kt, s);
  Tensor scaled = g.pointwise(CUDNN_POINTWISE_MUL, s, &scale);
  Tensor shifted = g.pointwise(CUDNN_POINTWISE_SUB, scaled, &stats);
  if (c.causal)
    shifted = g.causalMask(shifted, g.scalar(kNegInf));
  Tensor p = g.pointwise(CUDNN_POINTWISE_EXP, shifted);
  const Dims tDims{b, h, sk, sq}, tStrides{h * sq * sk, sq * sk, 1, sk};
  Tensor pt = g.temp(io, tDims, tStrides);
  g.reshape(p, pt);
  g.matmul(pt, dout, dv);

  // dS = P * (dO Vᵀ - softmaxSum) * scale; dK = dSᵀ Q, dQ = dS K.
  Tensor dp = g.temp(CUDNN_DATA_FLOAT, sDims, sStrides);
  g.matmul(dout, vt, dp);
  Tensor centred = g.pointwise(CUDNN_POINTWISE_SUB, dp, &softmaxSum);
  Tensor ds = g.pointwise(CUDNN_POINTWISE_MUL, centred, &p);
  Tensor dsScaled = g.pointwise(CUDNN_POINTWISE_MUL, ds, &scale);
  Tensor dst = g.temp(io, tDims, tStrides);
  g.reshape(dsScaled, dst);
  g.matmul(dst, q, dk);
  // K as Kᵀ's reshape, with K's own strides (as cuDNN's frontend does).
  Tensor k = g.temp(io, kDims, stridesOf(c.k));
  g.reshape(kt, k);
  g.matmul(dsScaled, k, dq);
}

cudnnDataType_t cudnnType(DType t) {
  return t == DType::kF16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
}

/// Whether `cfg`'s engine says it is nondeterministic.
StatusOr<bool> nondeterministic(cudnnBackendDescriptor_t cfg) {
  cudnnBackendDescriptor_t engine = nullptr;
  DTCC_CUDNN_CHECK(
      cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine));
  Desc keep(engine, [](void *p) { cudnnBackendDestroyDescriptor(p); });
  int64_t n = 0;
  DTCC_CUDNN_CHECK(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                            &n, &engine));
  std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT>
      notes{};
  n = 0;
  DTCC_CUDNN_CHECK(cudnnBackendGetAttribute(
      engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
      int64_t(notes.size()), &n, notes.data()));
  for (int64_t i = 0; i < n; ++i)
    if (notes[size_t(i)] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC)
      return true;
  return false;
}

} // namespace

class CudnnAttentionPlan {
public:
  CudnnAttentionCall call;
  std::vector<Desc> descriptors; ///< the graph's, alive with the plan
  Desc plan;
  int64_t workspace = 0;
};

StatusOr<std::shared_ptr<CudnnAttentionPlan>>
planCudnnAttention(cudnnHandle_t handle, const CudnnAttentionCall &call,
                   int64_t workspaceCap) {
  if (call.dtype != DType::kF16 && call.dtype != DType::kBF16)
    return unimplemented("cuDNN's fused attention takes f16 and bf16, not ",
                         dtypeName(call.dtype));
  GraphBuilder g(handle);
  if (call.backward)
    backwardGraph(g, call, cudnnType(call.dtype));
  else
    forwardGraph(g, call, cudnnType(call.dtype));
  Desc graph = g.graph();
  DTCC_RETURN_IF_ERROR(g.status().withContext(
      "describing the attention graph to cuDNN"));

  std::string tried;
  for (cudnnBackendHeurMode_t mode :
       {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    cudnnBackendDescriptor_t rawHeur = nullptr;
    DTCC_CUDNN_CHECK(cudnnBackendCreateDescriptor(
        CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &rawHeur));
    Desc heur(rawHeur, [](void *p) { cudnnBackendDestroyDescriptor(p); });
    cudnnBackendDescriptor_t rawGraph = graph.get();
    DTCC_CUDNN_CHECK(cudnnBackendSetAttribute(
        rawHeur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rawGraph));
    DTCC_CUDNN_CHECK(cudnnBackendSetAttribute(
        rawHeur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
    if (cudnnBackendFinalize(rawHeur) != CUDNN_STATUS_SUCCESS)
      continue;
    int64_t count = 0;
    if (cudnnBackendGetAttribute(rawHeur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                 nullptr) != CUDNN_STATUS_SUCCESS ||
        count <= 0)
      continue;
    std::vector<Desc> cfgs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < count; ++i) {
      cudnnBackendDescriptor_t cfg = nullptr;
      DTCC_CUDNN_CHECK(cudnnBackendCreateDescriptor(
          CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg));
      cfgs.emplace_back(cfg,
                        [](void *p) { cudnnBackendDestroyDescriptor(p); });
      raw.push_back(cfg);
    }
    int64_t got = 0;
    DTCC_CUDNN_CHECK(cudnnBackendGetAttribute(
        rawHeur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
        count, &got, raw.data()));
    for (int64_t i = 0; i < got; ++i) {
      if (call.backward) {
        StatusOr<bool> nondet = nondeterministic(raw[size_t(i)]);
        if (!nondet.isOk() || nondet.value()) {
          tried += " (a nondeterministic engine passed over)";
          continue;
        }
      }
      cudnnBackendDescriptor_t rawPlan = nullptr;
      DTCC_CUDNN_CHECK(cudnnBackendCreateDescriptor(
          CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &rawPlan));
      Desc plan(rawPlan, [](void *p) { cudnnBackendDestroyDescriptor(p); });
      cudnnBackendDescriptor_t cfg = raw[size_t(i)];
      DTCC_CUDNN_CHECK(cudnnBackendSetAttribute(
          rawPlan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1,
          &handle));
      DTCC_CUDNN_CHECK(cudnnBackendSetAttribute(
          rawPlan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg));
      cudnnStatus_t s = cudnnBackendFinalize(rawPlan);
      if (s != CUDNN_STATUS_SUCCESS) {
        tried += strCat(" (an engine: ", cudnnGetErrorString(s), ")");
        continue;
      }
      int64_t workspace = 0, n = 0;
      DTCC_CUDNN_CHECK(cudnnBackendGetAttribute(
          rawPlan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
          1, &n, &workspace));
      if (workspace > workspaceCap) {
        tried += strCat(" (an engine wanting ", workspace,
                        " bytes of workspace)");
        continue;
      }
      auto out = std::make_shared<CudnnAttentionPlan>();
      out->call = call;
      out->descriptors = std::move(g.kept);
      out->descriptors.push_back(graph);
      out->descriptors.insert(out->descriptors.end(), cfgs.begin(),
                              cfgs.end());
      out->plan = plan;
      out->workspace = workspace;
      return out;
    }
  }
  return unimplemented("cuDNN has no engine for this attention",
                       call.backward ? " gradient" : "", " (", call.batch,
                       " x ", call.heads, " heads of ", call.sq, " x ", call.sk,
                       ", D ", call.d,
                       ", ", dtypeName(call.dtype),
                       call.causal ? ", causal" : "", ")", tried);
}

int64_t workspaceBytes(const CudnnAttentionPlan &plan) {
  return plan.workspace;
}

namespace {

/// Executes `plan` with the buffers `uids` name and the scalars of the call.
Status execute(cudnnHandle_t handle, const CudnnAttentionPlan &plan,
               std::vector<int64_t> uids, std::vector<void *> pointers,
               void *workspace) {
  // The scalars passed by value: host floats alive through the call.
  float scale = float(plan.call.scale), one = 1.f,
        negInf = -std::numeric_limits<float>::infinity();
  uids.push_back(kScale);
  pointers.push_back(&scale);
  if (plan.call.backward) {
    uids.push_back(kOne);
    pointers.push_back(&one);
  }
  if (plan.call.causal) {
    uids.push_back(kNegInf);
    pointers.push_back(&negInf);
  }
  cudnnBackendDescriptor_t pack = nullptr;
  DTCC_CUDNN_CHECK(
      cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR,
                                   &pack));
  Desc keep(pack, [](void *p) { cudnnBackendDestroyDescriptor(p); });
  DTCC_CUDNN_CHECK(cudnnBackendSetAttribute(
      pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
      int64_t(uids.size()), uids.data()));
  DTCC_CUDNN_CHECK(cudnnBackendSetAttribute(
      pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
      int64_t(pointers.size()), pointers.data()));
  DTCC_CUDNN_CHECK(cudnnBackendSetAttribute(
      pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
      &workspace));
  DTCC_CUDNN_CHECK(cudnnBackendFinalize(pack));
  DTCC_CUDNN_CHECK(cudnnBackendExecute(handle, plan.plan.get(), pack));
  return Status::ok();
}

} // namespace

Status runCudnnAttention(cudnnHandle_t handle, const CudnnAttentionPlan &plan,
                         const void *q, const void *k, const void *v,
                         void *out, float *lse, void *workspace) {
  return execute(handle, plan, {kQ, kK, kV, kO, kStats},
                 {const_cast<void *>(q), const_cast<void *>(k),
                  const_cast<void *>(v), out, lse},
                 workspace);
}

Status runCudnnAttentionGrad(cudnnHandle_t handle,
                             const CudnnAttentionPlan &plan, const void *q,
                             const void *k, const void *v, const void *out,
                             const float *lse, const void *dout, void *dq,
                             void *dk, void *dv, float *softmaxSum,
                             void *workspace) {
  return execute(handle, plan,
                 {kQ, kK, kV, kO, kStats, kDOut, kDQ, kDK, kDV, kSoftmaxSum},
                 {const_cast<void *>(q), const_cast<void *>(k),
                  const_cast<void *>(v), const_cast<void *>(out),
                  const_cast<float *>(lse), const_cast<void *>(dout), dq, dk,
                  dv, softmaxSum},
                 workspace);
}

} // namespace dtcc::runtime::cuda
