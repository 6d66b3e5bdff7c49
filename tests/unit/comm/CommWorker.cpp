//===- CommWorker.cpp - one rank of a scripted job for CommProcessTest ----===//
//
// Usage: DtccCommWorker SCENARIO, started as every rank of a job (mpirun or
// torchrun-style variables). Prints "rank R: ok ..." and exits 0 when its
// checks pass; errors go to stderr with exit 1, as the runner's do.
//   collectives  every kernel over a dp x tp mesh, checked exactly
//   timeout      the last rank skips an all_reduce (and sleeps); the
//                others' watchdog must end them
//   peer-dies    rank 1 exits at once; rank 0's all_reduce must fail
//   mismatch     a dp=2 x tp=2 mesh, whatever the job's size
//   exchange     pairs of ranks along dp each send 256 KiB and 8 MiB to the
//                other (async send) before receiving the other's, as 1F1B
//                pipeline stages do; sends must not hold the communication
//                thread until the peer receives
//   unreceived   rank 0 sends 8 MiB to rank 1, which never receives it
//                (and sleeps); rank 0's watchdog must end it naming the send
//   traffic      collectives of known sizes over the whole job, f32 and
//                f16; the communicator's ring-formula count (f16 reductions
//                at f32 size, as they travel) and its transport's own
//                count (TCP: socket writes; MPI: send buffers) checked
//                against sizes worked out here
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/CommContext.h"
#include "runtime/exec/Kernel.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

using namespace dtcc::runtime;

namespace {

/// Twice the largest send and receive buffers the kernel gives a TCP socket
/// (/proc/sys/net/ipv4/tcp_wmem and tcp_rmem), at least 8 MiB.
int64_t tcpBufferBytes() {
  int64_t total = 0;
  for (const char *path :
       {"/proc/sys/net/ipv4/tcp_wmem", "/proc/sys/net/ipv4/tcp_rmem"}) {
    std::ifstream in(path);
    int64_t low = 0, initial = 0, high = 0;
    if (in >> low >> initial >> high)
      total += high;
  }
  return std::max<int64_t>(int64_t(8) << 20, 2 * total);
}


const char *kLoc = "/h.0/mlp/fc1/MatMul";

int fail(const std::string &message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  std::fflush(stderr);
  return 1;
}

struct Job {
  std::unique_ptr<World> world;
  MeshComms mesh;
  std::unique_ptr<CommContext> cc;
  KernelRegistry registry;
};

/// Binds `kernel` on f32 tensors (run it later, as often as needed).
StatusOr<KernelFn>
bindKernel(Job &job, const std::string &kernel,
           std::vector<std::pair<std::vector<float> *, std::vector<int64_t>>> in,
           std::vector<std::pair<std::vector<float> *, std::vector<int64_t>>> out,
           Attrs attrs) {
  KernelContext ctx;
  ctx.kernel = kernel;
  ctx.location = kLoc;
  for (auto &[v, shape] : in)
    ctx.inputs.push_back(makeView(v->data(), DType::kF32, shape));
  for (auto &[v, shape] : out)
    ctx.outputs.push_back(makeView(v->data(), DType::kF32, shape));
  ctx.attrs = std::move(attrs);
  ctx.comm = job.cc.get();
  return (*job.registry.find(kernel))(ctx);
}

/// Binds and runs `kernel` on f32 tensors.
Status runKernel(
    Job &job, const std::string &kernel,
    std::vector<std::pair<std::vector<float> *, std::vector<int64_t>>> in,
    std::vector<std::pair<std::vector<float> *, std::vector<int64_t>>> out,
    Attrs attrs) {
  DTCC_ASSIGN_OR_RETURN(KernelFn fn, bindKernel(job, kernel, std::move(in),
                                                std::move(out),
                                                std::move(attrs)));
  return fn();
}

Attrs axesAttrs(std::vector<std::string> axes) {
  Attrs a;
  a.set("axes", std::move(axes));
  return a;
}

float valueAt(int rank, int64_t i) { return float((rank * 5 + i * 3) % 11); }

/// A value of element `i` from world rank `rank`, exact in f32.
float messageValue(int rank, int64_t i) {
  return float((i * 7 + rank * 13) % 65521);
}

/// Both ranks of each dp pair: async send to the other, blocking recv from
/// it, then the send's wait (the order of a 1F1B stage pair's steady
/// state), twice per size so that buffers and handles are reused.
int exchange(Job &job) {
  const int me = job.world->rank();
  Communicator *dp = job.mesh.group({"dp"}).value();
  if (dp->size() != 2)
    return fail(strCat("exchange needs dp = 2, got ", dp->size()));
  const int64_t offset = dp->rank() == 0 ? 1 : -1;
  const int peer = dp->worldRanks()[dp->rank() == 0 ? 1 : 0];
  int64_t handle = 0;
  for (int64_t bytes : {int64_t(256) << 10, int64_t(8) << 20}) {
    const int64_t count = bytes / 4;
    std::vector<float> out(count), in(count);
    for (int64_t i = 0; i < count; ++i)
      out[i] = messageValue(me, i);
    Attrs a = axesAttrs({"dp"});
    a.set("offset", offset);
    a.set("tag", int64_t(3));
    Attrs sendAttrs = a;
    sendAttrs.set("async", int64_t(1));
    sendAttrs.set("handle", ++handle);
    Attrs waitAttrs;
    waitAttrs.set("handle", handle);
    auto send = bindKernel(job, "send", {{&out, {count}}}, {}, sendAttrs);
    auto recv = bindKernel(job, "recv", {}, {{&in, {count}}}, a);
    auto wait = bindKernel(job, "wait", {{&out, {count}}}, {}, waitAttrs);
    for (const auto *k : {&send, &recv, &wait})
      if (!k->isOk())
        return fail(k->status().toString());
    for (int round = 0; round < 2; ++round) {
      std::fill(in.begin(), in.end(), -1.0f);
      Status s = send.value()();
      if (s.isOk())
        s = recv.value()();
      if (s.isOk())
        s = wait.value()();
      if (!s.isOk())
        return fail(s.toString());
      for (int64_t i = 0; i < count; ++i)
        if (in[i] != messageValue(peer, i))
          return fail(strCat("exchange of ", bytes, " bytes, round ", round,
                             ": element ", i, " is ", in[i], ", expected ",
                             messageValue(peer, i)));
    }
  }
  if (job.world->launcher() == "torchrun") {
    // TCP: a send abandoned unfinished goes out whole from a copy, so its
    // buffer may be reused at once. The message is larger than the kernel's
    // socket buffers can hold (twice their largest sizes), so the send is
    // still in flight when abandoned.
    const int64_t count = tcpBufferBytes() / 2;
    std::vector<float> buffer(count);
    if (dp->rank() == 0) {
      for (int64_t i = 0; i < count; ++i)
        buffer[i] = messageValue(me, i);
      auto pending = dp->startSend(buffer.data(), count * 4, 1, 4);
      if (!pending.isOk())
        return fail(pending.status().toString());
      if (!pending.value())
        return fail(strCat("a ", count * 4, "-byte send to a peer that is "
                           "not receiving yet completed at once"));
      pending.value().reset();
      std::fill(buffer.begin(), buffer.end(), -1.0f);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      Status s = dp->recv(buffer.data(), count * 4, 0, 4);
      if (!s.isOk())
        return fail(s.toString());
      for (int64_t i = 0; i < count; ++i)
        if (buffer[i] != messageValue(peer, i))
          return fail(strCat("abandoned send: element ", i, " is ", buffer[i],
                             ", expected ", messageValue(peer, i)));
    }
    Status s = job.world->world().barrier();
    if (!s.isOk())
      return fail(s.toString());
  }
  std::printf("rank %d: ok, exchanged with rank %d\n", me, peer);
  return 0;
}

/// Every collective over the mesh, checked against a local reference.
int collectives(Job &job) {
  const int me = job.world->rank();
  auto group = [&](std::vector<std::string> axes) {
    return job.mesh.group(axes).value();
  };
  // all_reduce over each axis and both.
  for (std::vector<std::string> axes :
       {std::vector<std::string>{"dp"}, {"tp"}, {"dp", "tp"}}) {
    std::vector<float> x(1000);
    for (int64_t i = 0; i < 1000; ++i)
      x[i] = valueAt(me, i);
    Status s = runKernel(job, "all_reduce", {{&x, {1000}}}, {{&x, {1000}}},
                         axesAttrs(axes));
    if (!s.isOk())
      return fail(s.toString());
    for (int64_t i = 0; i < 1000; ++i) {
      float e = 0;
      for (int w : group(axes)->worldRanks())
        e += valueAt(w, i);
      if (x[i] != e)
        return fail(strCat("all_reduce over ", group(axes)->name(),
                           ": element ", i, " is ", x[i], ", expected ", e));
    }
  }
  // all_gather along dim 1 over tp: [2,3] -> [2, 3 * tp].
  Communicator *tp = group({"tp"});
  const int64_t n = tp->size();
  std::vector<float> x(6), y(6 * n);
  for (int64_t i = 0; i < 6; ++i)
    x[i] = valueAt(me, i);
  Attrs gather = axesAttrs({"tp"});
  gather.set("dim", int64_t(1));
  Status s =
      runKernel(job, "all_gather", {{&x, {2, 3}}}, {{&y, {2, 3 * n}}}, gather);
  if (!s.isOk())
    return fail(s.toString());
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t g = 0; g < n; ++g)
      for (int64_t c = 0; c < 3; ++c)
        if (y[r * 3 * n + g * 3 + c] != valueAt(tp->worldRanks()[g], r * 3 + c))
          return fail(strCat("all_gather dim 1: wrong element (", r, ", ",
                             g * 3 + c, ")"));
  // reduce_scatter along dim 1 over both axes: [2, 2 * size] -> [2, 2].
  Communicator *all = group({"dp", "tp"});
  const int64_t m = all->size();
  std::vector<float> big(4 * m), part(4);
  for (int64_t i = 0; i < 4 * m; ++i)
    big[i] = valueAt(me, i);
  Attrs scatter = axesAttrs({"dp", "tp"});
  scatter.set("dim", int64_t(1));
  s = runKernel(job, "reduce_scatter", {{&big, {2, 2 * m}}}, {{&part, {2, 2}}},
                scatter);
  if (!s.isOk())
    return fail(s.toString());
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t c = 0; c < 2; ++c) {
      float e = 0;
      for (int w : all->worldRanks())
        e += valueAt(w, r * 2 * m + all->rank() * 2 + c);
      if (part[r * 2 + c] != e)
        return fail(
            strCat("reduce_scatter dim 1: wrong element (", r, ", ", c, ")"));
    }
  // send/recv along tp, received in the reverse order of the tags.
  if (n >= 2 && tp->rank() < 2) {
    for (int64_t k = 0; k < 3; ++k) {
      int64_t tag = tp->rank() == 0 ? k : 2 - k;
      std::vector<float> msg(8, float(tp->rank() == 0 ? tag * 10 + me : -1));
      Attrs a = axesAttrs({"tp"});
      a.set("offset", int64_t(tp->rank() == 0 ? 1 : -1));
      a.set("tag", tag);
      s = tp->rank() == 0 ? runKernel(job, "send", {{&msg, {8}}}, {}, a)
                          : runKernel(job, "recv", {}, {{&msg, {8}}}, a);
      if (!s.isOk())
        return fail(s.toString());
      if (tp->rank() == 1 && msg[7] != float(tag * 10 + tp->worldRanks()[0]))
        return fail(strCat("recv tag ", tag, " got ", msg[7]));
    }
  }
  std::printf("rank %d: ok, bytes sent %lld\n", me,
              (long long)job.mesh.bytesSent());
  return 0;
}

} // namespace

/// The "traffic" scenario: the ring formula's count and the transport's
/// own, each against the sizes of the calls made here.
int traffic(Job &job) {
  Communicator &c = job.world->world();
  const int64_t n = c.size(), me = c.rank();
  const bool tcp = std::string(c.transportName()) == "tcp";
  const int64_t count = 1200; // a multiple of every group size used: even blocks
  const int64_t sent0 = c.bytesSent(), moved0 = c.transportBytes(),
                headers0 = c.transportHeaderBytes();
  std::vector<float> f(count, 1.0f), gathered(count * n);
  std::vector<uint16_t> h(count, 0x3c00); // f16 1.0
  std::vector<uint16_t> hOut(count / n);
  Status s = c.allReduce(f.data(), f.data(), count, DType::kF32, ReduceKind::kSum);
  if (s.isOk())
    s = c.allReduce(h.data(), h.data(), count, DType::kF16, ReduceKind::kSum);
  if (s.isOk())
    s = c.allGather(f.data(), gathered.data(), count, DType::kF32);
  if (s.isOk())
    s = c.reduceScatter(h.data(), hOut.data(), count / n, DType::kF16,
                        ReduceKind::kSum);
  if (s.isOk() && n > 1)
    s = me == 0   ? c.send(f.data(), 4 * count, 1, 5)
        : me == 1 ? c.recv(f.data(), 4 * count, 0, 5)
                  : Status::ok();
  if (!s.isOk())
    return fail(s.toString());
  if (f[0] != float(n) || hOut[0] != (n == 2 ? 0x4400 : n == 4 ? 0x4c00 : 0x3c00))
    return fail(strCat("wrong results: ", f[0], ", f16 bits ", hOut[0]));
  // The ring: all_reduce sends 2(n-1)/n of the buffer, all_gather and
  // reduce_scatter n-1 blocks; f16 reductions travel as f32.
  const int64_t ring = 2 * (n - 1) * count * 4 / n      // f32 all_reduce
                       + 2 * (n - 1) * count * 4 / n    // f16 as f32
                       + (n - 1) * count * 4            // all_gather
                       + (n - 1) * (count / n) * 4      // reduce_scatter, f16 as f32
                       + (me == 0 && n > 1 ? 4 * count : 0);
  // TCP writes the ring's messages (2(n-1) + 2(n-1) + (n-1) + (n-1), and
  // the send) behind a header each; MPI is handed each call's send buffer.
  const int64_t messages = 6 * (n - 1) + (me == 0 && n > 1 ? 1 : 0);
  const int64_t handed = count * 4 + count * 4 + count * 4 + count * 4 +
                         (me == 0 && n > 1 ? 4 * count : 0);
  const int64_t sent = c.bytesSent() - sent0;
  const int64_t moved = c.transportBytes() - moved0;
  const int64_t headers = c.transportHeaderBytes() - headers0;
  if (sent != ring)
    return fail(strCat("ring formula counted ", sent, " bytes, expected ", ring));
  if (tcp) {
    if (moved - headers != ring || headers != messages * 32)
      return fail(strCat("sockets took ", moved, " bytes (", headers,
                         " of headers), expected ", ring, " + ", messages,
                         " x 32"));
  } else if (moved != handed) {
    return fail(strCat("MPI was handed ", moved, " bytes, expected ", handed));
  }
  std::printf("rank %d: ok traffic, formula %lld, %s %lld\n", int(me),
              (long long)sent, c.transportName(), (long long)moved);
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2)
    return fail("usage: DtccCommWorker "
                "collectives|timeout|peer-dies|mismatch|exchange|unreceived");
  const std::string scenario = argv[1];
  Job job;
  registerCpuKernels(job.registry);
  auto world = World::init();
  if (!world.isOk())
    return fail(world.status().toString());
  job.world = std::move(world.value());
  const int size = job.world->size(), me = job.world->rank();
  std::vector<int64_t> sizes = {size % 2 == 0 ? 2 : 1,
                                size % 2 == 0 ? size / 2 : size};
  if (scenario == "mismatch")
    sizes = {2, 2};
  if (scenario == "timeout" || scenario == "peer-dies" ||
      scenario == "unreceived")
    sizes = {size, 1}; // dp spans the job
  if (scenario == "exchange")
    sizes = {2, size / 2}; // pairs along dp
  auto mesh = createMeshComms(*job.world, {"dp", "tp"}, sizes);
  if (!mesh.isOk())
    return fail(mesh.status().toString());
  job.mesh = std::move(mesh.value());
  job.cc = std::make_unique<CommContext>(job.mesh, job.world->queue());

  if (scenario == "collectives" || scenario == "mismatch")
    return collectives(job);
  if (scenario == "traffic")
    return traffic(job);
  if (scenario == "exchange")
    return exchange(job);
  Attrs dp = axesAttrs({"dp"});
  std::vector<float> x(1024, 1.0f);
  if (scenario == "timeout") {
    if (me == size - 1) {
      // Skips the collective; stays alive so that the others time out.
      std::this_thread::sleep_for(std::chrono::seconds(6));
      std::printf("rank %d: skipped the all_reduce\n", me);
      return 0;
    }
    Status s = runKernel(job, "all_reduce", {{&x, {1024}}}, {{&x, {1024}}}, dp);
    return fail(strCat("the all_reduce returned instead of timing out: ",
                       s.toString()));
  }
  if (scenario == "unreceived") {
    if (me != 0) {
      std::this_thread::sleep_for(std::chrono::seconds(6));
      std::printf("rank %d: never received\n", me);
      return 0;
    }
    std::vector<float> big(int64_t(2) << 20, 1.0f);
    Attrs send = dp;
    send.set("offset", int64_t(1));
    send.set("tag", int64_t(3));
    send.set("async", int64_t(1));
    send.set("handle", int64_t(1));
    Attrs wait;
    wait.set("handle", int64_t(1));
    Status s = runKernel(job, "send", {{&big, {int64_t(big.size())}}}, {}, send);
    if (s.isOk())
      s = runKernel(job, "wait", {}, {}, wait);
    return fail(strCat("the send's wait returned instead of timing out: ",
                       s.toString()));
  }
  if (scenario == "peer-dies") {
    if (me == 1) {
      std::fflush(stdout);
      std::_Exit(7);
    }
    Status s = runKernel(job, "all_reduce", {{&x, {1024}}}, {{&x, {1024}}}, dp);
    if (s.isOk())
      return fail("the all_reduce succeeded without rank 1");
    return fail(s.toString());
  }
  return fail("unknown scenario " + scenario);
}
