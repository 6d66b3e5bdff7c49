//===- CollectiveKernels.cpp - collectives over the device mesh -----------===//
//
// Kernels of a program compiled for a mesh (format::Program::mesh). They run
// on the communication thread of the World (runtime/comm), blocking or
// asynchronously, and bind to KernelContext::comm: without a mesh they fail
// to load. Every rank of a group must run the same collectives in the same
// order; one stuck past the collective timeout ends the job (CommQueue).
//
// Kernels and attributes (one input x, one output y unless said otherwise;
// every buffer contiguous, y of x's element type):
//
//   all_reduce     axes, reduce        y = reduce over the group of x; y may
//                                      be x (in place)
//   all_gather     axes, dim           y = the group's x concatenated along
//                                      `dim` in group-rank order
//                                      (y.shape[dim] = x.shape[dim] * n)
//   reduce_scatter axes, dim, reduce   y = block r (this rank's) along `dim`
//                                      of the reduction of x
//                                      (x.shape[dim] = y.shape[dim] * n)
//   all_to_all     axes, split_dim,    block j of x along split_dim goes to
//                  concat_dim          group rank j; received blocks are
//                                      concatenated along concat_dim
//   broadcast      axes, root          y = x of group rank `root`
//   send           axes, offset, tag   x only (no output): to the rank whose
//                                      coordinate on the (single) axis is
//                                      this rank's + offset. Never holds
//                                      the communication thread until the
//                                      peer receives: it goes on with later
//                                      operations and the send completes
//                                      when x is no longer read
//   recv           axes, offset, tag   y only (no input): from that rank
//   wait           handle              blocks until the collective started
//                                      with `handle` is done; inputs, if any,
//                                      are that collective's buffers (listed
//                                      to keep them alive), not touched
//   axis_index     axes                y only: an i64 (or i32) scalar, this
//                                      rank's index in the group
//
//   axes       string list of mesh axis names in mesh order ("dp", or
//              "dp","tp" for the group of both: the row-major index over
//              the listed coordinates is the group rank). A single string is
//              read as a comma-separated list ("dp,tp").
//   reduce     "sum" (default), "max", "min" or "prod"
//   dim, split_dim, concat_dim   tensor dimensions (negative counts from
//              the end)
//   root       a group rank
//   offset     non-zero; the peer must exist (no wrap-around)
//   tag        >= 0; messages of one (peer, tag) arrive in order, tags
//              need not be received in the order sent by these kernels;
//              a program must receive in its peers' send order all the
//              same (runtime/exec/P2POrder.h, checked at load), since the
//              CUDA backend's NCCL matches by order
//   async      1: start the collective on the communication thread and
//              return; `handle` (an int id unique within the program) names
//              it for the `wait` that finishes it. Compute between the two
//              overlaps the communication; the buffers must not be touched
//              in between. A function may not end with one unwaited.
//   handle     the id tying an async collective to its wait
//
// Also shard_slice (axes, dim, groups: y = this rank's block of x along
// dim, locally).
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/CommContext.h"
#include "runtime/device/cpu/CpuKernelUtils.h"

#include <cstring>

namespace dtcc::runtime {
namespace {

using namespace cpu;

/// A collective's communicator, bound at load time.
struct Axis {
  CommContext *cc;
  Communicator *comm;
  std::string name; ///< "dp", or "dp,tp"
};

StatusOr<Axis> bindAxis(const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(Communicator * comm, meshGroup(ctx));
  return Axis{ctx.comm, comm, comm->name()};
}

StatusOr<ReduceKind> kindAttr(const KernelContext &ctx) {
  auto kind = parseReduceKind(ctx.attrs.getString("reduce", "sum"));
  if (!kind.isOk())
    return ctx.error(kind.status().message());
  return kind.value();
}

StatusOr<int64_t> intAttr(const KernelContext &ctx, const std::string &name) {
  auto v = ctx.attrs.getInt(name);
  if (!v.isOk())
    return ctx.error(v.status().message());
  return v.value();
}

/// `all_reduce over axis dp (node "/h.0/mlp/fc1/MatMul", 4096 bytes)`:
/// what timeouts and errors report.
std::string describe(const KernelContext &ctx, const std::string &what,
                     const Axis &axis, const TensorView &data) {
  const bool several = axis.name.find(',') != std::string::npos;
  return strCat(what, " over axis", several ? "es " : " ", axis.name,
                " (node \"", ctx.location, "\", ", data.sizeInBytes(),
                " bytes)");
}

/// dst[q][p] = src[p][q] for blocks of `block` bytes: src is P x Q blocks.
void swapBlocks(void *dst, const void *src, int64_t p, int64_t q,
                int64_t block) {
  char *d = static_cast<char *>(dst);
  const char *s = static_cast<const char *>(src);
  for (int64_t i = 0; i < p; ++i)
    for (int64_t j = 0; j < q; ++j)
      std::memcpy(d + (j * p + i) * block, s + (i * q + j) * block, block);
}

/// Starts an operation on the communication thread; a null Poll when it is
/// done, else what it left in flight (CommQueue::submitStarted).
using StartFn = std::function<StatusOr<CommQueue::Poll>()>;

/// The kernel of a collective started by `start` on the communication
/// thread: blocking, or with `async = 1` started under its `handle` for a
/// later `wait`. Tensors without elements communicate nothing (alike on
/// every rank).
StatusOr<KernelFn> finishStarted(const KernelContext &ctx, const Axis &axis,
                                 std::string description, bool empty,
                                 StartFn start) {
  if (empty)
    start = [] { return StatusOr<CommQueue::Poll>(CommQueue::Poll()); };
  CommQueue *queue = &axis.cc->queue();
  if (!ctx.attrs.getBool("async")) {
    if (ctx.attrs.has("handle"))
      return ctx.error("a 'handle' without 'async = 1'");
    return KernelFn([queue, description, start] {
      return queue->wait(queue->submitStarted(description, start));
    });
  }
  DTCC_ASSIGN_OR_RETURN(int64_t id, intAttr(ctx, "handle"));
  if (axis.cc->findAsync(id))
    return ctx.error("handle ", id, " is already used by another collective");
  CommContext::AsyncSlot *slot = &axis.cc->declareAsync(id);
  slot->description = description;
  std::string prefix = errorPrefix(ctx);
  return KernelFn([slot, queue, description, start, prefix, id] {
    if (slot->handle)
      return internalError(prefix, "asynchronous collective ", id,
                           " started again before its wait");
    slot->handle = queue->submitStarted(description, start);
    return Status::ok();
  });
}

/// finishStarted for a `body` that is done when it returns.
StatusOr<KernelFn> finish(const KernelContext &ctx, const Axis &axis,
                          std::string description, bool empty,
                          std::function<Status()> body) {
  return finishStarted(ctx, axis, std::move(description), empty,
                       [body]() -> StatusOr<CommQueue::Poll> {
                         DTCC_RETURN_IF_ERROR(body());
                         return CommQueue::Poll();
                       });
}

/// One input and one output of the same element type, all contiguous.
Status checkUnary(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  return checkDType(ctx, ctx.outputs[0], ctx.inputs[0].dtype, "output 0");
}

StatusOr<KernelFn> allReduce(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkUnary(ctx));
  const TensorView x = ctx.inputs[0], y = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkShape(ctx, y, x.shape, "output 0"));
  DTCC_ASSIGN_OR_RETURN(ReduceKind kind, kindAttr(ctx));
  DTCC_ASSIGN_OR_RETURN(Axis axis, bindAxis(ctx));
  Communicator *comm = axis.comm;
  return finish(ctx, axis, describe(ctx, "all_reduce", axis, x), x.numel() == 0,
                [comm, x, y, kind] {
                  return comm->allReduce(x.data, y.data, x.numel(), x.dtype,
                                         kind);
                });
}

StatusOr<KernelFn> allGather(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkUnary(ctx));
  const TensorView x = ctx.inputs[0], y = ctx.outputs[0];
  DTCC_ASSIGN_OR_RETURN(Axis axis, bindAxis(ctx));
  DTCC_ASSIGN_OR_RETURN(int64_t dim, getDimAttr(ctx, "dim", x.rank()));
  const int64_t n = axis.comm->size();
  std::vector<int64_t> expected = x.shape;
  expected[dim] *= n;
  DTCC_RETURN_IF_ERROR(checkShape(ctx, y, expected, "output 0"));
  // y is [outer][n][inner] with x as [outer][inner]: gathered blocks land
  // contiguously only when nothing precedes `dim`.
  const int64_t outer = product(x.shape, 0, dim), inner = product(x.shape, dim);
  const int64_t esz = dtypeSize(x.dtype);
  Communicator *comm = axis.comm;
  CommContext *cc = axis.cc;
  return finish(ctx, axis, describe(ctx, "all_gather", axis, y), x.numel() == 0,
                [=]() -> Status {
                  if (outer == 1)
                    return comm->allGather(x.data, y.data, inner, x.dtype);
                  void *tmp = cc->scratch(n * outer * inner * esz);
                  DTCC_RETURN_IF_ERROR(
                      comm->allGather(x.data, tmp, outer * inner, x.dtype));
                  swapBlocks(y.data, tmp, n, outer, inner * esz);
                  return Status::ok();
                });
}

StatusOr<KernelFn> reduceScatter(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkUnary(ctx));
  const TensorView x = ctx.inputs[0], y = ctx.outputs[0];
  DTCC_ASSIGN_OR_RETURN(ReduceKind kind, kindAttr(ctx));
  DTCC_ASSIGN_OR_RETURN(Axis axis, bindAxis(ctx));
  DTCC_ASSIGN_OR_RETURN(int64_t dim, getDimAttr(ctx, "dim", x.rank()));
  const int64_t n = axis.comm->size();
  if (x.shape[dim] % n != 0)
    return ctx.error("expected dim ", dim, " of input 0 (", x.shape[dim],
                     ") divisible by mesh axis '", axis.name, "' (", n, ")");
  std::vector<int64_t> expected = x.shape;
  expected[dim] /= n;
  DTCC_RETURN_IF_ERROR(checkShape(ctx, y, expected, "output 0"));
  const int64_t outer = product(y.shape, 0, dim), inner = product(y.shape, dim);
  const int64_t esz = dtypeSize(x.dtype);
  Communicator *comm = axis.comm;
  CommContext *cc = axis.cc;
  return finish(
      ctx, axis, describe(ctx, "reduce_scatter", axis, x), x.numel() == 0,
      [=]() -> Status {
        if (outer == 1)
          return comm->reduceScatter(x.data, y.data, inner, x.dtype, kind);
        // Gather each rank's block of every outer index together.
        void *tmp = cc->scratch(n * outer * inner * esz);
        swapBlocks(tmp, x.data, outer, n, inner * esz);
        return comm->reduceScatter(tmp, y.data, outer * inner, x.dtype, kind);
      });
}

StatusOr<KernelFn> allToAll(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkUnary(ctx));
  const TensorView x = ctx.inputs[0], y = ctx.outputs[0];
  DTCC_ASSIGN_OR_RETURN(Axis axis, bindAxis(ctx));
  DTCC_ASSIGN_OR_RETURN(int64_t split, getDimAttr(ctx, "split_dim", x.rank()));
  DTCC_ASSIGN_OR_RETURN(int64_t concat,
                        getDimAttr(ctx, "concat_dim", x.rank()));
  const int64_t n = axis.comm->size();
  if (x.shape[split] % n != 0)
    return ctx.error("expected split_dim ", split, " of input 0 (",
                     x.shape[split], ") divisible by mesh axis '", axis.name,
                     "' (", n, ")");
  // The chunk each rank sends to each other: x with split_dim divided.
  std::vector<int64_t> chunk = x.shape;
  chunk[split] /= n;
  std::vector<int64_t> expected = chunk;
  expected[concat] *= n;
  DTCC_RETURN_IF_ERROR(checkShape(ctx, y, expected, "output 0"));
  const int64_t esz = dtypeSize(x.dtype);
  const int64_t chunkCount = product(chunk);
  // x is [sendOuter][n][sendInner]; the received chunks are [n][recvOuter]
  // [recvInner] and y is [recvOuter][n][recvInner].
  const int64_t sendOuter = product(x.shape, 0, split),
                sendInner = product(chunk, split);
  const int64_t recvOuter = product(chunk, 0, concat),
                recvInner = product(chunk, concat);
  Communicator *comm = axis.comm;
  CommContext *cc = axis.cc;
  return finish(
      ctx, axis, describe(ctx, "all_to_all", axis, x), x.numel() == 0,
      [=]() -> Status {
        const int64_t bytes = n * chunkCount * esz;
        char *scratch = static_cast<char *>(cc->scratch(
            (sendOuter > 1 ? bytes : 0) + (recvOuter > 1 ? bytes : 0)));
        const void *send = x.data;
        if (sendOuter > 1) {
          swapBlocks(scratch, x.data, sendOuter, n, sendInner * esz);
          send = scratch;
          scratch += bytes;
        }
        void *recv = recvOuter > 1 ? static_cast<void *>(scratch) : y.data;
        DTCC_RETURN_IF_ERROR(comm->allToAll(send, recv, chunkCount, x.dtype));
        if (recvOuter > 1)
          swapBlocks(y.data, recv, n, recvOuter, recvInner * esz);
        return Status::ok();
      });
}

StatusOr<KernelFn> broadcast(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkUnary(ctx));
  const TensorView x = ctx.inputs[0], y = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(checkShape(ctx, y, x.shape, "output 0"));
  DTCC_ASSIGN_OR_RETURN(Axis axis, bindAxis(ctx));
  DTCC_ASSIGN_OR_RETURN(int64_t root, intAttr(ctx, "root"));
  if (root < 0 || root >= axis.comm->size())
    return ctx.error("expected root in [0, ", axis.comm->size(),
                     ") (the size of the group of axes '", axis.name,
                     "'), got ", root);
  Communicator *comm = axis.comm;
  const int r = static_cast<int>(root);
  return finish(ctx, axis, describe(ctx, "broadcast", axis, x), x.numel() == 0,
                [comm, x, y, r] {
                  if (comm->rank() == r && x.data != y.data)
                    std::memcpy(y.data, x.data, x.sizeInBytes());
                  return comm->broadcast(y.data, y.numel(), y.dtype, r);
                });
}

/// The group rank of the peer of send and recv, and the tag: the peer's
/// coordinate on the axis is this rank's + `offset`.
StatusOr<std::pair<int, int64_t>> peerAndTag(const KernelContext &ctx,
                                             const Axis &axis) {
  DTCC_ASSIGN_OR_RETURN(int64_t offset, intAttr(ctx, "offset"));
  DTCC_ASSIGN_OR_RETURN(int64_t tag, intAttr(ctx, "tag"));
  if (axis.name.find(',') != std::string::npos)
    return ctx.error("expected one mesh axis, got '", axis.name, "'");
  const int64_t peer = axis.comm->rank() + offset;
  if (offset == 0)
    return ctx.error("offset 0 is this rank itself on mesh axis '", axis.name,
                     "'");
  if (peer < 0 || peer >= axis.comm->size())
    return ctx.error("offset ", offset, " from coordinate ", axis.comm->rank(),
                     " leaves mesh axis '", axis.name, "' of size ",
                     axis.comm->size());
  if (tag < 0)
    return ctx.error("expected a non-negative tag, got ", tag);
  return std::make_pair(static_cast<int>(peer), tag);
}

StatusOr<KernelFn> send(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView x = ctx.inputs[0];
  DTCC_ASSIGN_OR_RETURN(Axis axis, bindAxis(ctx));
  DTCC_ASSIGN_OR_RETURN(auto peerTag, peerAndTag(ctx, axis));
  auto [peer, tag] = peerTag;
  Communicator *comm = axis.comm;
  // The send is handed to the transport and the communication thread goes
  // on: a peer may be sending to this rank before it receives (1F1B
  // pipeline stages do), and must get this rank's receive meanwhile. The
  // send's handle completes once x is no longer read; x stays alive until
  // its wait (the memory plan keeps the operands of wait).
  return finishStarted(
      ctx, axis,
      describe(ctx, strCat("send(to ", peer, ", tag ", tag, ")"), axis, x),
      false, [comm, x, peer = peer, tag = tag]() -> StatusOr<CommQueue::Poll> {
        DTCC_ASSIGN_OR_RETURN(
            std::unique_ptr<PendingSend> pending,
            comm->startSend(x.data, x.sizeInBytes(), peer, tag));
        if (!pending)
          return CommQueue::Poll();
        std::shared_ptr<PendingSend> p = std::move(pending);
        return CommQueue::Poll([p] { return p->test(); });
      });
}

StatusOr<KernelFn> recv(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  const TensorView y = ctx.outputs[0];
  DTCC_ASSIGN_OR_RETURN(Axis axis, bindAxis(ctx));
  DTCC_ASSIGN_OR_RETURN(auto peerTag, peerAndTag(ctx, axis));
  auto [peer, tag] = peerTag;
  Communicator *comm = axis.comm;
  return finish(
      ctx, axis,
      describe(ctx, strCat("recv(from ", peer, ", tag ", tag, ")"), axis, y),
      false, [comm, y, peer = peer, tag = tag] {
        return comm->recv(y.data, y.sizeInBytes(), peer, tag);
      });
}

StatusOr<KernelFn> wait(const KernelContext &ctx) {
  // Operands, if any, are the started collective's buffers, listed so that
  // the memory plan keeps them alive until here; they are not touched.
  if (!ctx.comm)
    return ctx.error("needs the communicators of a device mesh, but none "
                     "were given");
  DTCC_ASSIGN_OR_RETURN(int64_t id, intAttr(ctx, "handle"));
  CommContext::AsyncSlot *slot = ctx.comm->findAsync(id);
  if (!slot)
    return ctx.error("no collective with async = 1, handle = ", id,
                     " starts before this wait");
  CommQueue *queue = &ctx.comm->queue();
  std::string prefix = errorPrefix(ctx), location = ctx.location;
  return KernelFn([slot, queue, prefix, location, id]() -> Status {
    if (!slot->handle)
      return internalError(prefix, "asynchronous collective ", id,
                           " was not started, or was waited already");
    CommQueue::Handle handle = *slot->handle;
    slot->handle.reset();
    Status s = queue->wait(handle);
    if (s.isOk())
      return s;
    return Status(s.code(), strCat(s.message(), " (waited for at node \"",
                                   location, "\")"));
  });
}

StatusOr<KernelFn> axisIndex(const KernelContext &ctx) {
  const TensorView y = ctx.outputs[0];
  if (y.numel() != 1 || (y.dtype != DType::kI64 && y.dtype != DType::kI32))
    return ctx.error("expected a one-element i64 or i32 output, got ",
                     y.typeString());
  DTCC_ASSIGN_OR_RETURN(Axis axis, bindAxis(ctx));
  const int64_t coord = axis.comm->rank();
  return KernelFn([y, coord] {
    if (y.dtype == DType::kI64)
      *y.as<int64_t>() = coord;
    else
      *y.as<int32_t>() = static_cast<int32_t>(coord);
    return Status::ok();
  });
}

StatusOr<KernelFn> shardSlice(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkUnary(ctx));
  const TensorView x = ctx.inputs[0], y = ctx.outputs[0];
  DTCC_ASSIGN_OR_RETURN(Axis axis, bindAxis(ctx));
  DTCC_ASSIGN_OR_RETURN(int64_t dim, getDimAttr(ctx, "dim", x.rank()));
  const int64_t groups = ctx.attrs.getInt("groups", 1);
  const int64_t n = axis.comm->size();
  if (x.shape[dim] % n != 0)
    return ctx.error("expected dim ", dim, " of input 0 (", x.shape[dim],
                     ") divisible by mesh axis '", axis.name, "' (", n, ")");
  std::vector<int64_t> expected = x.shape;
  expected[dim] /= n;
  DTCC_RETURN_IF_ERROR(checkShape(ctx, y, expected, "output 0"));
  if (groups < 1 || expected[dim] % groups != 0)
    return ctx.error("expected groups >= 1 dividing ", expected[dim], ", got ",
                     groups);
  // x is [outer][groups][n][part] and y is [outer][groups][part]: this rank
  // keeps its part of every group.
  const int64_t esz = dtypeSize(x.dtype);
  const int64_t outer = product(x.shape, 0, dim) * groups;
  const int64_t part = expected[dim] / groups * product(x.shape, dim + 1) * esz;
  const int64_t r = axis.comm->rank();
  return KernelFn([x, y, outer, part, n, r] {
    const char *src = static_cast<const char *>(x.data);
    char *dst = static_cast<char *>(y.data);
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(dst + o * part, src + (o * n + r) * part, part);
    return Status::ok();
  });
}

} // namespace

void registerCpuCollectiveKernels(KernelRegistry &registry) {
  registry.add("all_reduce", allReduce);
  registry.add("all_gather", allGather);
  registry.add("reduce_scatter", reduceScatter);
  registry.add("all_to_all", allToAll);
  registry.add("broadcast", broadcast);
  registry.add("send", send);
  registry.add("recv", recv);
  registry.add("wait", wait);
  registry.add("axis_index", axisIndex);
  registry.add("shard_slice", shardSlice);
}

} // namespace dtcc::runtime
