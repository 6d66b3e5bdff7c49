//===- CudaCollectives.cpp - mesh collectives on NCCL ---------------------===//
//
// The collective kernels of CollectiveKernels.cpp (same attributes and
// checks) on the device's NCCL communicators: the communication stream waits
// for the compute work issued so far, the collective is enqueued on it, and
// an event marks its end. Blocking collectives make the compute stream wait
// for that event; async ones (async = 1) leave it to their `wait`, so the
// compute between them overlaps the communication; their state is the
// program's (CommContext's async slots), so a function that ends with one
// unwaited is an error as on the CPU. Each end event is watched against the
// collective timeout (NcclMesh::watch) and destroyed with its kernel.
// Blocks that are not contiguous in a buffer are staged in the
// communication stream's scratch (runtime/exec/CudaScratch.h), reserved
// with the program. send/recv are queued and issued before the next other
// kernel, one NCCL group per direction on that direction's communicator and
// stream (NcclMesh).
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/CommContext.h"
#include "runtime/device/cpu/CpuKernelUtils.h"
#include "runtime/device/cuda/CudaCheck.h"
#include "runtime/device/cuda/CudaDevice.h"
#include "runtime/exec/CudaScratch.h"

#include <memory>

namespace dtcc::runtime::cuda {
namespace {

struct Bound {
  Communicator *comm;
  NcclComm *nccl;
  std::string name;
};

StatusOr<Bound> bind(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_ASSIGN_OR_RETURN(Communicator * comm, cpu::meshGroup(ctx));
  if (!dev.nccl())
    return ctx.error("collective kernels need the NCCL communicators of a "
                     "device mesh, but none were given");
  NcclComm *nccl = dev.nccl()->find(comm);
  if (!nccl)
    return ctx.error("no NCCL communicator for axes '", comm->name(), "'");
  return Bound{comm, nccl, comm->name()};
}

std::string describe(const KernelContext &ctx, const std::string &what,
                     const Bound &b, int64_t bytes) {
  const bool several = b.name.find(',') != std::string::npos;
  return strCat(what, " over axis", several ? "es " : " ", b.name, " (node \"",
                ctx.location, "\", ", bytes, " bytes)");
}

/// A collective's end event, made when it is bound and destroyed with its
/// kernel, or with the program's CommContext for an asynchronous one (after
/// the watchdog has stopped following it; the context may outlive the
/// device, hence the weak reference).
struct Slot {
  cudaEvent_t done = nullptr;
  std::string description;
  std::weak_ptr<NcclMesh> mesh;
  ~Slot() {
    if (!done)
      return;
    if (std::shared_ptr<NcclMesh> m = mesh.lock())
      m->unwatch(done);
    cudaEventDestroy(done);
  }
};

StatusOr<std::shared_ptr<Slot>> newSlot(CudaDevice &dev,
                                        std::string description) {
  auto slot = std::make_shared<Slot>();
  DTCC_CUDA_CHECK(cudaEventCreateWithFlags(&slot->done, cudaEventDisableTiming));
  slot->description = std::move(description);
  slot->mesh = dev.ncclWeak();
  return slot;
}

/// With async = 1: the program's slot of `handle` (CommContext, one per
/// loaded program), holding `slot` for the `wait` that finishes it.
StatusOr<CommContext::AsyncSlot *>
declareAsync(const KernelContext &ctx, const std::shared_ptr<Slot> &slot) {
  if (!ctx.attrs.getBool("async")) {
    if (ctx.attrs.has("handle"))
      return ctx.error("a 'handle' without 'async = 1'");
    return nullptr;
  }
  StatusOr<int64_t> id = ctx.attrs.getInt("handle");
  if (!id.isOk())
    return ctx.error(id.status().message());
  if (ctx.comm->findAsync(*id))
    return ctx.error("handle ", *id, " is already used by another collective");
  CommContext::AsyncSlot *async = &ctx.comm->declareAsync(*id);
  async->description = slot->description;
  async->device = slot;
  return async;
}

/// Wraps `body` (enqueues on the comm stream) as blocking or async.
StatusOr<KernelFn> finish(CudaDevice &dev, const KernelContext &ctx,
                          std::string description, bool empty,
                          std::function<Status(cudaStream_t)> body) {
  DTCC_ASSIGN_OR_RETURN(std::shared_ptr<Slot> slot, newSlot(dev, description));
  DTCC_ASSIGN_OR_RETURN(CommContext::AsyncSlot * async,
                        declareAsync(ctx, slot));
  CudaDevice *d = &dev;
  std::string prefix = cpu::errorPrefix(ctx);
  return KernelFn([d, slot, body, async, empty, prefix]() -> Status {
    if (async && async->deviceStarted)
      return internalError(prefix, "asynchronous collective started again "
                                   "before its wait");
    if (!empty) {
      DTCC_RETURN_IF_ERROR(d->commWaitsForCompute());
      DTCC_RETURN_IF_ERROR(body(d->commStream()).withContext(slot->description));
    }
    DTCC_CUDA_CHECK(cudaEventRecord(slot->done, d->commStream()));
    d->nccl()->watch(slot->done, slot->description);
    if (async) {
      async->deviceStarted = true;
      return Status::ok();
    }
    DTCC_CUDA_CHECK(cudaStreamWaitEvent(d->computeStream(), slot->done, 0));
    return Status::ok();
  });
}

/// The staging `ctx`'s collective needs (runtime/exec/CudaScratch.h).
StatusOr<std::vector<ScratchSlot>> staging(const KernelContext &ctx,
                                           int64_t groupSize) {
  DTCC_ASSIGN_OR_RETURN(ScratchSet set, cudaKernelScratch(ctx, groupSize));
  if (set.empty())
    return std::vector<ScratchSlot>();
  return ctx.requestScratch(std::move(set));
}

Status checkUnary(const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(cpu::checkAllContiguous(ctx));
  return cpu::checkDType(ctx, ctx.outputs[0], ctx.inputs[0].dtype, "output 0");
}

StatusOr<ReduceKind> kindAttr(const KernelContext &ctx) {
  auto kind = parseReduceKind(ctx.attrs.getString("reduce", "sum"));
  if (!kind.isOk())
    return ctx.error(kind.status().message());
  return kind.value();
}

StatusOr<KernelFn> allReduce(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkUnary(ctx));
  const TensorView x = ctx.inputs[0], y = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(cpu::checkShape(ctx, y, x.shape, "output 0"));
  DTCC_ASSIGN_OR_RETURN(ReduceKind kind, kindAttr(ctx));
  DTCC_ASSIGN_OR_RETURN(Bound b, bind(dev, ctx));
  NcclComm *nc = b.nccl;
  return finish(dev, ctx, describe(ctx, "all_reduce", b, x.sizeInBytes()),
                x.numel() == 0, [=](cudaStream_t s) {
                  return nc->allReduce(x.data, y.data, x.numel(), x.dtype,
                                       kind, s);
                });
}

StatusOr<KernelFn> allGather(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkUnary(ctx));
  const TensorView x = ctx.inputs[0], y = ctx.outputs[0];
  DTCC_ASSIGN_OR_RETURN(Bound b, bind(dev, ctx));
  DTCC_ASSIGN_OR_RETURN(int64_t dim, cpu::getDimAttr(ctx, "dim", x.rank()));
  const int64_t n = b.comm->size();
  std::vector<int64_t> expected = x.shape;
  expected[dim] *= n;
  DTCC_RETURN_IF_ERROR(cpu::checkShape(ctx, y, expected, "output 0"));
  const int64_t outer = cpu::product(x.shape, 0, dim),
                inner = cpu::product(x.shape, dim);
  const int64_t esz = dtypeSize(x.dtype);
  DTCC_ASSIGN_OR_RETURN(std::vector<ScratchSlot> tmpSlot, staging(ctx, n));
  if (outer > 1 && x.numel() > 0 && tmpSlot.size() != 1)
    return ctx.error("no staging buffer for a gather along dim ", dim);
  NcclComm *nc = b.nccl;
  return finish(dev, ctx, describe(ctx, "all_gather", b, y.sizeInBytes()),
                x.numel() == 0, [=](cudaStream_t s) -> Status {
                  if (outer == 1)
                    return nc->allGather(x.data, y.data, inner, x.dtype, s);
                  void *tmp = tmpSlot[0].get();
                  DTCC_RETURN_IF_ERROR(
                      nc->allGather(x.data, tmp, outer * inner, x.dtype, s));
                  DTCC_CUDA_CHECK(launchSwapBlocks(y.data, tmp, n, outer,
                                                   inner * esz, s));
                  return Status::ok();
                });
}

StatusOr<KernelFn> reduceScatter(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkUnary(ctx));
  const TensorView x = ctx.inputs[0], y = ctx.outputs[0];
  DTCC_ASSIGN_OR_RETURN(ReduceKind kind, kindAttr(ctx));
  DTCC_ASSIGN_OR_RETURN(Bound b, bind(dev, ctx));
  DTCC_ASSIGN_OR_RETURN(int64_t dim, cpu::getDimAttr(ctx, "dim", x.rank()));
  const int64_t n = b.comm->size();
  if (x.shape[dim] % n != 0)
    return ctx.error("expected dim ", dim, " of input 0 (", x.shape[dim],
                     ") divisible by mesh axis '", b.name, "' (", n, ")");
  std::vector<int64_t> expected = x.shape;
  expected[dim] /= n;
  DTCC_RETURN_IF_ERROR(cpu::checkShape(ctx, y, expected, "output 0"));
  const int64_t outer = cpu::product(y.shape, 0, dim),
                inner = cpu::product(y.shape, dim);
  const int64_t esz = dtypeSize(x.dtype);
  DTCC_ASSIGN_OR_RETURN(std::vector<ScratchSlot> tmpSlot, staging(ctx, n));
  if (outer > 1 && x.numel() > 0 && tmpSlot.size() != 1)
    return ctx.error("no staging buffer for a scatter along dim ", dim);
  NcclComm *nc = b.nccl;
  return finish(dev, ctx, describe(ctx, "reduce_scatter", b, x.sizeInBytes()),
                x.numel() == 0, [=](cudaStream_t s) -> Status {
                  if (outer == 1)
                    return nc->reduceScatter(x.data, y.data, inner, x.dtype,
                                             kind, s);
                  void *tmp = tmpSlot[0].get();
                  DTCC_CUDA_CHECK(launchSwapBlocks(tmp, x.data, outer, n,
                                                   inner * esz, s));
                  return nc->reduceScatter(tmp, y.data, outer * inner, x.dtype,
                                           kind, s);
                });
}

StatusOr<KernelFn> allToAll(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkUnary(ctx));
  const TensorView x = ctx.inputs[0], y = ctx.outputs[0];
  DTCC_ASSIGN_OR_RETURN(Bound b, bind(dev, ctx));
  DTCC_ASSIGN_OR_RETURN(int64_t split,
                        cpu::getDimAttr(ctx, "split_dim", x.rank()));
  DTCC_ASSIGN_OR_RETURN(int64_t concat,
                        cpu::getDimAttr(ctx, "concat_dim", x.rank()));
  const int64_t n = b.comm->size();
  if (x.shape[split] % n != 0)
    return ctx.error("expected split_dim ", split, " of input 0 (",
                     x.shape[split], ") divisible by mesh axis '", b.name,
                     "' (", n, ")");
  // The chunk each rank sends to each other: x with split_dim divided.
  std::vector<int64_t> chunk = x.shape;
  chunk[split] /= n;
  std::vector<int64_t> expected = chunk;
  expected[concat] *= n;
  DTCC_RETURN_IF_ERROR(cpu::checkShape(ctx, y, expected, "output 0"));
  const int64_t esz = dtypeSize(x.dtype);
  const int64_t chunkCount = cpu::product(chunk);
  // x is [sendOuter][n][sendInner]; the received chunks are [n][recvOuter]
  // [recvInner] and y is [recvOuter][n][recvInner]. The staging is the
  // communication stream's scratch: the next collective there runs after
  // this one is done with it.
  const int64_t sendOuter = cpu::product(x.shape, 0, split),
                sendInner = cpu::product(chunk, split);
  const int64_t recvOuter = cpu::product(chunk, 0, concat),
                recvInner = cpu::product(chunk, concat);
  DTCC_ASSIGN_OR_RETURN(std::vector<ScratchSlot> tmp, staging(ctx, n));
  const bool stageSend = sendOuter > 1 && x.numel() > 0,
             stageRecv = recvOuter > 1 && x.numel() > 0;
  if (tmp.size() != size_t(stageSend) + size_t(stageRecv))
    return ctx.error("expected ", int(stageSend) + int(stageRecv),
                     " staging buffers, got ", tmp.size());
  NcclComm *nc = b.nccl;
  return finish(
      dev, ctx, describe(ctx, "all_to_all", b, x.sizeInBytes()),
      x.numel() == 0, [=](cudaStream_t s) -> Status {
        void *sendTmp = stageSend ? tmp[0].get() : nullptr;
        void *recvTmp = stageRecv ? tmp[stageSend ? 1 : 0].get() : nullptr;
        const void *send = x.data;
        if (sendTmp) {
          DTCC_CUDA_CHECK(
              launchSwapBlocks(sendTmp, x.data, sendOuter, n, sendInner * esz, s));
          send = sendTmp;
        }
        void *recv = recvTmp ? recvTmp : y.data;
        DTCC_RETURN_IF_ERROR(nc->allToAll(send, recv, chunkCount, x.dtype, s));
        if (recvTmp)
          DTCC_CUDA_CHECK(
              launchSwapBlocks(y.data, recvTmp, n, recvOuter, recvInner * esz, s));
        return Status::ok();
      });
}

/// shard_slice: this rank's block of a replicated tensor, a strided copy on
/// the compute stream (no communication: only the rank's coordinate on the
/// axes).
StatusOr<KernelFn> shardSlice(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkUnary(ctx));
  const TensorView x = ctx.inputs[0], y = ctx.outputs[0];
  DTCC_ASSIGN_OR_RETURN(Communicator * comm, cpu::meshGroup(ctx));
  DTCC_ASSIGN_OR_RETURN(int64_t dim, cpu::getDimAttr(ctx, "dim", x.rank()));
  const int64_t groups = ctx.attrs.getInt("groups", 1);
  const int64_t n = comm->size();
  if (x.shape[dim] % n != 0)
    return ctx.error("expected dim ", dim, " of input 0 (", x.shape[dim],
                     ") divisible by mesh axis '", comm->name(), "' (", n,
                     ")");
  std::vector<int64_t> expected = x.shape;
  expected[dim] /= n;
  DTCC_RETURN_IF_ERROR(cpu::checkShape(ctx, y, expected, "output 0"));
  if (groups < 1 || expected[dim] % groups != 0)
    return ctx.error("expected groups >= 1 dividing ", expected[dim], ", got ",
                     groups);
  // x is [outer][groups][n][part] and y is [outer][groups][part]: this rank
  // keeps its part of every group.
  const int64_t esz = dtypeSize(x.dtype);
  const int64_t outer = cpu::product(x.shape, 0, dim) * groups;
  const int64_t part =
      expected[dim] / groups * cpu::product(x.shape, dim + 1) * esz;
  const int64_t r = comm->rank();
  cudaStream_t st = dev.computeStream();
  // cudaMemcpy2DAsync refuses a pitch above the device's memPitch (2^31 - 1
  // bytes): blocks that far apart are copied one by one (then few: each
  // group of n blocks is larger than memPitch).
  const bool byBlock = size_t(n * part) > dev.properties().memPitch;
  return KernelFn([=]() -> Status {
    if (outer == 0 || part == 0)
      return Status::ok();
    if (byBlock) {
      for (int64_t o = 0; o < outer; ++o)
        DTCC_CUDA_CHECK(cudaMemcpyAsync(
            static_cast<char *>(y.data) + o * part,
            static_cast<const char *>(x.data) + (o * n + r) * part,
            size_t(part), cudaMemcpyDeviceToDevice, st));
      return Status::ok();
    }
    DTCC_CUDA_CHECK(cudaMemcpy2DAsync(
        y.data, size_t(part), static_cast<const char *>(x.data) + r * part,
        size_t(n * part), size_t(part), size_t(outer),
        cudaMemcpyDeviceToDevice, st));
    return Status::ok();
  });
}

StatusOr<KernelFn> broadcast(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(checkUnary(ctx));
  const TensorView x = ctx.inputs[0], y = ctx.outputs[0];
  DTCC_RETURN_IF_ERROR(cpu::checkShape(ctx, y, x.shape, "output 0"));
  DTCC_ASSIGN_OR_RETURN(Bound b, bind(dev, ctx));
  StatusOr<int64_t> root = ctx.attrs.getInt("root");
  if (!root.isOk() || *root < 0 || *root >= b.comm->size())
    return ctx.error("expected root in [0, ", b.comm->size(), ")");
  NcclComm *nc = b.nccl;
  const int r = int(*root);
  return finish(dev, ctx, describe(ctx, "broadcast", b, x.sizeInBytes()),
                x.numel() == 0, [=](cudaStream_t s) {
                  return nc->broadcast(x.data, y.data, x.numel(), x.dtype, r, s);
                });
}

/// send / recv. NCCL matches the messages between two ranks in the order
/// they are posted, not by tag: Executable checks at load time that every
/// receive comes in the order of its peer's sends (runtime/exec/
/// P2POrder.h), so the tag only names the message here.
template <bool Send>
StatusOr<KernelFn> pointToPoint(CudaDevice &dev, const KernelContext &ctx) {
  DTCC_RETURN_IF_ERROR(cpu::checkAllContiguous(ctx));
  const TensorView v = Send ? ctx.inputs[0] : ctx.outputs[0];
  DTCC_ASSIGN_OR_RETURN(Bound b, bind(dev, ctx));
  StatusOr<int64_t> offset = ctx.attrs.getInt("offset");
  StatusOr<int64_t> tag = ctx.attrs.getInt("tag");
  if (!offset.isOk() || *offset == 0)
    return ctx.error("expected a non-zero offset");
  if (!tag.isOk() || *tag < 0)
    return ctx.error("expected a non-negative tag");
  const int64_t peer = b.comm->rank() + *offset;
  if (peer < 0 || peer >= b.comm->size())
    return ctx.error("offset ", *offset, " from coordinate ", b.comm->rank(),
                     " leaves mesh axis '", b.name, "' of size ",
                     b.comm->size());
  DTCC_ASSIGN_OR_RETURN(
      std::shared_ptr<Slot> slot,
      newSlot(dev, describe(ctx,
                            strCat(Send ? "send(to " : "recv(from ", peer,
                                   ", tag ", *tag, ")"),
                            b, v.sizeInBytes())));
  DTCC_ASSIGN_OR_RETURN(CommContext::AsyncSlot * async,
                        declareAsync(ctx, slot));
  const bool up = NcclMesh::goesUp(Send, b.comm->rank(), int(peer));
  NcclComm *nc = dev.nccl()->findP2P(b.comm, up);
  if (!nc)
    return ctx.error("no NCCL point-to-point communicator for axes '",
                     b.name, "' (send and recv take one mesh axis)");
  CudaDevice *d = &dev;
  const int p = int(peer);
  std::string prefix = cpu::errorPrefix(ctx);
  return KernelFn([=]() -> Status {
    if (async && async->deviceStarted)
      return internalError(prefix, "asynchronous ", Send ? "send" : "recv",
                           " started again before its wait");
    d->queueP2P({Send, up, nc, v.data, v.sizeInBytes(), p, slot->done,
                 !async, slot->description});
    if (async)
      async->deviceStarted = true;
    return Status::ok();
  });
}

StatusOr<KernelFn> wait(CudaDevice &dev, const KernelContext &ctx) {
  StatusOr<int64_t> id = ctx.attrs.getInt("handle");
  if (!ctx.comm || !id.isOk())
    return ctx.error("needs a mesh and a handle");
  CommContext::AsyncSlot *async = ctx.comm->findAsync(*id);
  if (!async || !async->device)
    return ctx.error("no collective with async = 1, handle = ", *id,
                     " starts before this wait");
  std::shared_ptr<Slot> slot = std::static_pointer_cast<Slot>(async->device);
  CudaDevice *d = &dev;
  std::string prefix = cpu::errorPrefix(ctx);
  const int64_t h = *id;
  return KernelFn([=]() -> Status {
    DTCC_RETURN_IF_ERROR(d->flushP2P());
    if (!async->deviceStarted)
      return internalError(prefix, "asynchronous collective ", h,
                           " was not started, or was waited already");
    async->deviceStarted = false;
    DTCC_CUDA_CHECK(cudaStreamWaitEvent(d->computeStream(), slot->done, 0));
    return Status::ok();
  });
}

StatusOr<KernelFn> axisIndex(CudaDevice &dev, const KernelContext &ctx) {
  const TensorView y = ctx.outputs[0];
  if (y.numel() != 1 || (y.dtype != DType::kI64 && y.dtype != DType::kI32))
    return ctx.error("expected a one-element i64 or i32 output");
  DTCC_ASSIGN_OR_RETURN(Bound b, bind(dev, ctx));
  const uint64_t coord = uint64_t(b.comm->rank());
  const int size = int(dtypeSize(y.dtype));
  cudaStream_t st = dev.computeStream();
  return KernelFn([=]() -> Status {
    DTCC_CUDA_CHECK(launchFill(size, y.data, 1, coord, st));
    return Status::ok();
  });
}

} // namespace

void registerCudaCollectiveKernels(KernelRegistry &registry,
                                   CudaDevice &device) {
  CudaDevice *d = &device;
  auto add = [&](const char *name, auto build) {
    registry.add(name, [d, build](const KernelContext &ctx) {
      return build(*d, ctx);
    });
  };
  add("all_reduce", allReduce);
  add("all_gather", allGather);
  add("reduce_scatter", reduceScatter);
  add("all_to_all", allToAll);
  add("broadcast", broadcast);
  add("send", pointToPoint<true>);
  add("recv", pointToPoint<false>);
  add("wait", wait);
  add("axis_index", axisIndex);
  add("shard_slice", shardSlice);
}

} // namespace dtcc::runtime::cuda
