//===- Executable.cpp - loading and running programs ----------------------===//

#include "runtime/exec/Executable.h"

#include "runtime/base/Random.h"
#include "runtime/comm/CommContext.h"
#include "runtime/device/cpu/CpuKernelUtils.h"
#include "runtime/device/cpu/ThreadPool.h"
#include "runtime/exec/CudaScratch.h"
#include "runtime/format/Container.h"
#include "runtime/exec/P2POrder.h"
#include "runtime/exec/ShardLayout.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <set>

namespace dtcc::runtime {

Executable::~Executable() {
  for (void *p : {workspace_, state_, constants_, scratchBase_})
    if (p)
      device_.deallocate(p);
  for (void *p : {hostWorkspace_, hostState_, hostScratchBase_})
    if (p)
      device_.deallocateHost(p);
}

StatusOr<std::unique_ptr<Executable>>
Executable::create(const format::Program &program, const uint8_t *data,
                   uint64_t dataSize, Device &device, CommContext *comm) {
  std::unique_ptr<Executable> exe(new Executable(device));
  if (program.has_mesh() && comm) {
    // The communicators must be those of the program's mesh.
    const format::Mesh &mesh = program.mesh();
    const MeshComms &comms = comm->mesh();
    bool same = mesh.axes_size() == static_cast<int>(comms.axisNames().size()) &&
                mesh.sizes_size() == mesh.axes_size();
    for (int i = 0; same && i < mesh.axes_size(); ++i)
      same = mesh.axes(i) == comms.axisNames()[i] &&
             mesh.sizes(i) == comms.axisSizes()[i];
    if (!same)
      return invalidArgument("the program's mesh differs from the "
                             "communicators' (",
                             comms.describe(), ")");
    exe->comm_ = comm;
    DTCC_ASSIGN_OR_RETURN(exe->coords_,
                          MeshCoords::of(mesh, comm->mesh().world().rank()));
    // Both backends match sends and receives alike only when they come in
    // the same order on both sides (P2POrder.h).
    DTCC_RETURN_IF_ERROR(checkP2POrder(program));
  }
  DTCC_RETURN_IF_ERROR(exe->prepare(program, data, dataSize));
  return exe;
}

StatusOr<TensorView> Executable::viewOf(const format::Program &program,
                                        int32_t id) {
  if (id < 0 || id >= program.buffers_size())
    return dataLoss("program refers to buffer ", id, " of ",
                    program.buffers_size());
  const format::Buffer &b = program.buffers(id);
  if (!isValidDType(b.dtype()))
    return dataLoss("buffer ", id, " has unknown element type ", b.dtype());
  TensorView v;
  v.dtype = static_cast<DType>(b.dtype());
  v.shape.assign(b.shape().begin(), b.shape().end());
  for (int64_t d : v.shape)
    if (d < 0)
      return dataLoss("buffer ", id, " has a negative dimension");
  if (b.strides_size() == 0) {
    v.strides = contiguousStrides(v.shape);
  } else if (b.strides_size() != b.shape_size()) {
    return dataLoss("buffer ", id, " has ", b.strides_size(),
                    " strides for rank ", b.shape_size());
  } else {
    v.strides.assign(b.strides().begin(), b.strides().end());
  }
  // The furthest element the view touches must lie inside its arena.
  int64_t extent = 0;
  if (v.numel() > 0) {
    extent = 1;
    for (size_t d = 0; d < v.shape.size(); ++d) {
      if (v.strides[d] < 0)
        return dataLoss("buffer ", id, " has a negative stride");
      extent += (v.shape[d] - 1) * v.strides[d];
    }
  }
  int64_t elementSize = dtypeSize(v.dtype);
  int64_t arenaBytes;
  char *base;
  switch (b.arena()) {
  case format::ARENA_WORKSPACE:
    arenaBytes = workspaceBytes_;
    base = static_cast<char *>(workspace_);
    break;
  case format::ARENA_STATE:
    arenaBytes = stateBytes_;
    base = static_cast<char *>(state_);
    break;
  case format::ARENA_CONSTANT:
    arenaBytes = constantBytes_;
    base = static_cast<char *>(constants_);
    break;
  case format::ARENA_HOST_WORKSPACE:
    arenaBytes = hostWorkspaceBytes_;
    base = static_cast<char *>(hostWorkspace_);
    break;
  case format::ARENA_HOST_STATE:
    arenaBytes = hostStateBytes_;
    base = static_cast<char *>(hostState_);
    break;
  default:
    return dataLoss("buffer ", id, " is in an unknown arena");
  }
  if (b.offset() < 0 || b.offset() % elementSize != 0 ||
      b.offset() + extent * elementSize > arenaBytes)
    return dataLoss("buffer ", id, " (", b.name(), ") at offset ", b.offset(),
                    " does not fit its arena of ", arenaBytes, " bytes");
  v.data = base + b.offset();
  return v;
}

/// Bytes from a view's first element to its last (a stride-0 view of a
/// splat covers one element).
static int64_t extentBytes(const TensorView &v) {
  if (v.numel() == 0)
    return 0;
  int64_t extent = 1;
  for (size_t d = 0; d < v.shape.size(); ++d)
    extent += (v.shape[d] - 1) * v.strides[d];
  return extent * dtypeSize(v.dtype);
}

Status Executable::prepare(const format::Program &program, const uint8_t *data,
                           uint64_t dataSize) {
  program_ = &program;
  workspaceBytes_ = program.workspace_bytes();
  stateBytes_ = program.state_bytes();
  constantBytes_ = program.constant_bytes();
  if (workspaceBytes_ < 0 || stateBytes_ < 0 || constantBytes_ < 0)
    return dataLoss("program has negative arena sizes");
  DTCC_ASSIGN_OR_RETURN(
      std::vector<void *> arenas,
      device_.allocateArenas({workspaceBytes_, stateBytes_, constantBytes_}));
  workspace_ = arenas[0];
  state_ = arenas[1];
  constants_ = arenas[2];
  hostWorkspaceBytes_ = program.host_workspace_bytes();
  hostStateBytes_ = program.host_state_bytes();
  if (hostWorkspaceBytes_ < 0 || hostStateBytes_ < 0)
    return dataLoss("program has negative host arena sizes");
  if (hostWorkspaceBytes_ > 0) {
    DTCC_ASSIGN_OR_RETURN(hostWorkspace_, device_.allocateHost(hostWorkspaceBytes_));
  }
  if (hostStateBytes_ > 0) {
    DTCC_ASSIGN_OR_RETURN(hostState_, device_.allocateHost(hostStateBytes_));
  }

  auto checkData = [&](const format::DataRef &ref, const TensorView &view,
                       const std::string &what) -> Status {
    if (!insideDataSection(ref, dataSize))
      return dataLoss(what, " data lies outside the data section (truncated "
                            "file?)");
    if (ref.size() != extentBytes(view))
      return dataLoss(what, " has ", ref.size(), " bytes of data, expected ",
                      extentBytes(view));
    return Status::ok();
  };

  std::map<std::string, const format::Variable *> byName;
  for (const format::Variable &var : program.variables())
    byName[var.name()] = &var;
  for (const format::Variable &var : program.variables()) {
    // Another pipeline stage's variable shares this rank's memory with its
    // own: it is not this rank's.
    if (var.has_stage() && comm_ && coords_.coord("pp") != var.stage())
      continue;
    DTCC_ASSIGN_OR_RETURN(TensorView view, viewOf(program, var.buffer()));
    std::string what = "variable '" + var.name() + "'";
    const format::Variable *from = nullptr;
    if (!var.rounded_from().empty()) {
      auto it = byName.find(var.rounded_from());
      if (it == byName.end())
        return dataLoss(what, " starts as variable '", var.rounded_from(),
                        "' rounded, which the program lacks");
      from = it->second;
    }
    // The elements of the whole tensor (a split variable's data is whole).
    int64_t globalCount = view.numel();
    if (var.has_sharding()) {
      globalCount = 1;
      for (int64_t d : var.sharding().global_shape())
        globalCount *= d;
    }
    // The whole initial tensor: the variable's data, or for a half copy of
    // an fp32 master weight the master's data rounded.
    std::vector<uint8_t> rounded;
    const uint8_t *whole = nullptr;
    if (from && from->has_init()) {
      DTCC_ASSIGN_OR_RETURN(TensorView source, viewOf(program, from->buffer()));
      if (source.dtype != DType::kF32 ||
          (view.dtype != DType::kBF16 && view.dtype != DType::kF16))
        return dataLoss(what, " is ", dtypeName(view.dtype), " rounded from ",
                        dtypeName(source.dtype), " '", from->name(),
                        "': expected bf16 or f16 from f32");
      if (from->init().size() != globalCount * 4 ||
          !insideDataSection(from->init(), dataSize))
        return dataLoss(what, ": '", from->name(), "' has ",
                        from->init().size(), " bytes of data, expected ",
                        globalCount * 4, " (the whole tensor, f32)");
      rounded.resize(size_t(globalCount) * 2);
      const uint8_t *in = data + from->init().offset();
      cpu::parallelFor(globalCount, 1 << 16,
                       [&](int64_t begin, int64_t end, int) {
                         // The data section is byte-aligned: its floats are
                         // copied out.
                         std::vector<float> chunk(size_t(end - begin));
                         std::memcpy(chunk.data(), in + begin * 4,
                                     chunk.size() * 4);
                         storeFloats(chunk.data(), end - begin, view.dtype,
                                     rounded.data() + begin * 2);
                       });
      whole = rounded.data();
    } else if (var.has_init() && var.has_sharding()) {
      const int64_t globalBytes = globalCount * dtypeSize(view.dtype);
      if (var.init().size() != globalBytes ||
          !insideDataSection(var.init(), dataSize))
        return dataLoss(what, " has ", var.init().size(),
                        " bytes of data, expected ", globalBytes,
                        " (the whole tensor)");
      whole = data + var.init().offset();
    } else if (var.has_init()) {
      DTCC_RETURN_IF_ERROR(checkData(var.init(), view, what));
      whole = data + var.init().offset();
    }
    if (whole && var.has_sharding()) {
      // A split variable: this rank's block of the whole tensor.
      DTCC_ASSIGN_OR_RETURN(std::vector<int64_t> local,
                            localShape(var.sharding(), coords_));
      if (local != view.shape)
        return invalidArgument(what, " is split over the mesh, but this "
                               "process is not a rank of it (run it with "
                               "mpirun -np N)");
      std::vector<uint8_t> block(view.sizeInBytes());
      DTCC_RETURN_IF_ERROR(extractBlock(var.sharding(), coords_,
                                        dtypeSize(view.dtype), whole,
                                        block.data())
                               .withContext(what));
      DTCC_RETURN_IF_ERROR(writeBuffer(view, block.data()));
    } else if (whole) {
      DTCC_RETURN_IF_ERROR(writeBuffer(view, whole));
    } else {
      // Zeros by design: optimizer state, and the half copy of a master
      // weight that starts at zero (a bias); anything else lacks its data.
      if (!var.zero_init() && !(from && from->zero_init()))
        withoutData_.push_back(variables_.size());
      if (isHostMemory(view.data))
        std::memset(view.data, 0, size_t(view.sizeInBytes()));
      else
        DTCC_RETURN_IF_ERROR(device_.fillZero(view.data, view.sizeInBytes()));
    }
    variables_.push_back({var.name(), view});
    if (var.has_sharding() && comm_)
      variableShardings_[var.name()] = var.sharding();
    if (var.has_stage() && comm_)
      variableStages_[var.name()] = var.stage();
  }
  for (const format::Constant &c : program.constants()) {
    DTCC_ASSIGN_OR_RETURN(TensorView view, viewOf(program, c.buffer()));
    DTCC_RETURN_IF_ERROR(checkData(c.data(), view, "constant"));
    DTCC_RETURN_IF_ERROR(device_.copyHostToDevice(
        view.data, data + c.data().offset(), c.data().size()));
  }

  // The fused regions' kernels the compiler generated, for `fused`: a
  // shared object for the CPU, a GPU kernel module for the device.
  auto kernelBytes = [&](const format::DataRef &ref,
                         const char *what) -> StatusOr<std::string_view> {
    if (ref.size() <= 0 || !insideDataSection(ref, dataSize))
      return dataLoss("the generated ", what, " kernels lie outside the data "
                      "section (truncated file?)");
    return std::string_view(reinterpret_cast<const char *>(data + ref.offset()),
                            ref.size());
  };
  if (program.has_cpu_kernels()) {
    DTCC_ASSIGN_OR_RETURN(std::string_view bytes,
                          kernelBytes(program.cpu_kernels(), "CPU"));
    DTCC_ASSIGN_OR_RETURN(
        generated_,
        GeneratedKernels::load(reinterpret_cast<const uint8_t *>(bytes.data()),
                               bytes.size()));
  }
  if (program.has_gpu_kernels()) {
    DTCC_ASSIGN_OR_RETURN(std::string_view bytes,
                          kernelBytes(program.gpu_kernels(), "GPU"));
    DTCC_RETURN_IF_ERROR(device_.loadGpuKernels(bytes));
  }

  // Every unknown kernel at once, so one load lists them all.
  // Host instructions (an offloaded optimizer step) run the CPU's kernels.
  auto registryOf = [&](const format::Instruction &inst) -> const KernelRegistry & {
    return inst.host() ? device_.hostKernels() : device_.kernels();
  };
  std::set<std::string> unknown;
  for (const format::Function &f : program.functions())
    for (const format::Instruction &inst : f.instructions())
      if (!registryOf(inst).find(inst.kernel()))
        unknown.insert(inst.kernel() + (inst.host() ? " (host)" : ""));
  if (!unknown.empty()) {
    std::string list;
    for (const std::string &k : unknown)
      list += (list.empty() ? "" : ", ") + k;
    return unimplemented("device '", device_.name(), "' has no kernel for: ",
                         list);
  }

  for (const format::Function &f : program.functions()) {
    Function fn;
    fn.name = f.name();
    fn.workspaceBytes = f.workspace_bytes();
    auto bindAll = [&](const auto &bindings,
                       std::vector<IoBinding> &out) -> Status {
      for (const format::Binding &b : bindings) {
        DTCC_ASSIGN_OR_RETURN(TensorView view, viewOf(program, b.buffer()));
        if (!view.isContiguous())
          return dataLoss("binding '", b.name(), "' is not contiguous");
        out.push_back({b.name(), view});
      }
      return Status::ok();
    };
    DTCC_RETURN_IF_ERROR(bindAll(f.inputs(), fn.inputs));
    DTCC_RETURN_IF_ERROR(bindAll(f.outputs(), fn.outputs));
    // Another pipeline stage's function: its transfers are not this rank's
    // to bind (nor run).
    bool otherStage = f.has_stage() && comm_ && coords_.coord("pp") != f.stage();
    device_.beginFunction();
    for (const format::Instruction &inst : f.instructions()) {
      if (otherStage)
        break;
      KernelContext ctx;
      ctx.kernel = inst.kernel();
      ctx.location = inst.location();
      for (int32_t id : inst.inputs()) {
        DTCC_ASSIGN_OR_RETURN(TensorView v, viewOf(program, id));
        ctx.inputs.push_back(v);
      }
      for (int32_t id : inst.outputs()) {
        DTCC_ASSIGN_OR_RETURN(TensorView v, viewOf(program, id));
        ctx.outputs.push_back(v);
      }
      ctx.attrs = instructionAttrs(inst);
      ctx.comm = comm_;
      ctx.scratch = inst.host() ? &hostScratch_ : &scratch_;
      ctx.generated = generated_.get();
      DTCC_ASSIGN_OR_RETURN(KernelFn kernel,
                            (*registryOf(inst).find(inst.kernel()))(ctx));
      for (const TensorView &v : ctx.inputs)
        if (isHostMemory(v.data) != (inst.host() || inst.kernel() == "copy_to_device"))
          return dataLoss("instruction '", inst.kernel(), "' at '",
                          inst.location(), "' reads a buffer of the other "
                          "memory space (host or device)");
      for (const TensorView &v : ctx.outputs)
        if (isHostMemory(v.data) != (inst.host() || inst.kernel() == "copy_to_host"))
          return dataLoss("instruction '", inst.kernel(), "' at '",
                          inst.location(), "' writes a buffer of the other "
                          "memory space (host or device)");
      if (inst.host()) {
        // A host kernel reads what the transfers before it bring in, and
        // may overwrite what the ones before it take out.
        Device *device = &device_;
        kernel = [device, kernel = std::move(kernel)]() -> Status {
          DTCC_RETURN_IF_ERROR(device->waitForTransfers());
          return kernel();
        };
      } else if (inst.kernel() == "copy_to_host" ||
                 inst.kernel() == "copy_to_device") {
        int64_t *counter = inst.kernel() == "copy_to_host" ? &bytesToHost_
                                                           : &bytesToDevice_;
        const int64_t bytes = ctx.inputs[0].sizeInBytes();
        kernel = [counter, bytes, kernel = std::move(kernel)]() -> Status {
          *counter += bytes;
          return kernel();
        };
      }
      fn.kernels.push_back(std::move(kernel));
      fn.instructions.push_back(&inst);
    }
    functions_.push_back(std::move(fn));
  }
  // The kernels' scratch, in one reservation before anything runs.
  DTCC_ASSIGN_OR_RETURN(ScratchLayout scratch, scratch_.layout());
  // The CUDA kernels request what runtime/exec/CudaScratch.h says, which is
  // what the planner counts for the program: keep the two from drifting.
  if (device_.name().rfind("cuda", 0) == 0) {
    DTCC_ASSIGN_OR_RETURN(
        ScratchLayout expected,
        cudaProgramScratch(program, comm_ ? coords_.coord("pp") : -1));
    if (expected.totalBytes != scratch.totalBytes)
      return internalError("the kernels requested ", scratch.totalBytes,
                           " bytes of scratch, but runtime/exec/"
                           "CudaScratch.h accounts for ",
                           expected.totalBytes);
  }
  DTCC_ASSIGN_OR_RETURN(scratchBase_, device_.reserveScratch(scratch_));
  scratchBytes_ = scratch.totalBytes;
  // The host kernels' scratch, in host memory.
  DTCC_ASSIGN_OR_RETURN(ScratchLayout hostScratch, hostScratch_.layout());
  if (hostScratch.totalBytes > 0) {
    DTCC_ASSIGN_OR_RETURN(hostScratchBase_,
                          device_.allocateHost(hostScratch.totalBytes));
  }
  DTCC_RETURN_IF_ERROR(hostScratch_.bind(hostScratchBase_));
  hostScratchBytes_ = hostScratch.totalBytes;
  return Status::ok();
}

bool Executable::isHostMemory(const void *data) const {
  auto in = [&](const void *base, int64_t bytes) {
    const char *p = static_cast<const char *>(data);
    const char *b = static_cast<const char *>(base);
    return base && p >= b && p < b + bytes;
  };
  return in(hostWorkspace_, hostWorkspaceBytes_) ||
         in(hostState_, hostStateBytes_);
}

Status Executable::readBuffer(const TensorView &view, void *dst) const {
  if (isHostMemory(view.data)) {
    // The host's arenas: written by host kernels and by the transfers in
    // flight, which finish first.
    DTCC_RETURN_IF_ERROR(device_.waitForTransfers());
    std::memcpy(dst, view.data, size_t(view.sizeInBytes()));
    return Status::ok();
  }
  return device_.copyDeviceToHost(dst, view.data, view.sizeInBytes());
}

namespace {

/// Elements drawn from one generator: the unit of the work split, fixed so
/// that the values do not depend on the thread count; small enough that a
/// 1024 x 4096 matrix still keeps 64 threads busy.
constexpr int64_t kRandomChunk = int64_t(1) << 16;

/// FNV-1a of a variable's name: the same on every host and standard library
/// (std::hash is neither), so every rank of a job draws the same values.
uint64_t nameHash(const std::string &name) {
  return fnv1a(reinterpret_cast<const unsigned char *>(name.data()),
               name.size());
}

/// ln(x) for x in (0, 1], within 1e-6: Cephes' logf, branch-free so that
/// the loop calling it vectorizes (libm's logf does not, and the result is
/// the same on every host, where libm may pick an FMA variant at run time).
float logUnit(float x) {
  uint32_t bits = cpu::floatBits(x);
  int32_t e = int32_t(bits >> 23) - 127;
  float m = cpu::bitsFloat((bits & 0x7FFFFFu) | 0x3F800000u); // [1, 2)
  bool above = m > 1.41421356f;
  m = above ? m * 0.5f : m;
  float ef = float(e + int32_t(above));
  float f = m - 1.0f;
  float z = f * f;
  float p = 7.0376836292e-2f;
  p = p * f - 1.1514610310e-1f;
  p = p * f + 1.1676998740e-1f;
  p = p * f - 1.2420140846e-1f;
  p = p * f + 1.4249322787e-1f;
  p = p * f - 1.6668057665e-1f;
  p = p * f + 2.0000714765e-1f;
  p = p * f - 2.4999993993e-1f;
  p = p * f + 3.3333331174e-1f;
  float y = f * z * p - 2.12194440e-4f * ef - 0.5f * z;
  return f + y + 0.693359375f * ef;
}

/// x[0, 2 * ceil(n / 2)) = normal draws of standard deviation `stddev` from
/// the stream `key`: Box-Muller on SplitMix64's k-th output, whose high 31
/// bits give the radius (|draw| up to 6.7 stddev) and low 32 bits the angle
/// (a quadrant and a point in it, where polynomials give cos and sin). Pair
/// k fills x[k] and x[k + ceil(n / 2)]. About 3 ns a draw on one core (SSE2),
/// against 20-50 for std::normal_distribution over std::mt19937_64.
void drawNormal(uint64_t key, float stddev, float *x, int64_t n) {
  const int64_t pairs = (n + 1) / 2;
  float *cosPart = x, *sinPart = x + pairs;
  for (int64_t k = 0; k < pairs; ++k) {
    uint64_t bits = splitmix64(key + uint64_t(k) * kGoldenGamma);
    uint32_t hi = uint32_t(bits >> 32), lo = uint32_t(bits);
    float u = (float(int32_t(hi >> 1)) + 0.5f) * 0x1p-31f; // (0, 1]
    float r2 = -2.0f * logUnit(u);
#if __has_builtin(__builtin_elementwise_sqrt)
    // std::sqrt may set errno, which keeps the loop scalar.
    float r = stddev * __builtin_elementwise_sqrt(r2);
#else
    float r = stddev * std::sqrt(r2);
#endif
    float phi =
        ((float(int32_t((lo >> 8) & 0x3FFFFFu)) + 0.5f) * 0x1p-22f - 0.5f) *
        1.57079632679f; // [-pi/4, pi/4)
    float z = phi * phi;
    float c = ((2.443315711809948e-5f * z - 1.388731625493765e-3f) * z +
               4.166664568298827e-2f) *
                  z * z -
              0.5f * z + 1.0f;
    float s =
        ((-1.9515295891e-4f * z + 8.3321608736e-3f) * z - 1.6666654611e-1f) *
            z * phi +
        phi;
    // Quadrant q turns (c, s) by q quarter turns: an odd q swaps the two
    // (negating the new cos), q >= 2 negates both; as bit operations, so
    // there is no branch in the loop.
    uint32_t quadrant = lo >> 30;
    uint32_t swap = 0u - (quadrant & 1u);
    uint32_t cb = cpu::floatBits(c), sb = cpu::floatBits(s);
    float rs = cpu::bitsFloat(cpu::floatBits(r) ^ ((quadrant & 2u) << 30));
    cosPart[k] = rs * cpu::bitsFloat((cb & ~swap) | ((sb ^ 0x80000000u) & swap));
    sinPart[k] = rs * cpu::bitsFloat((sb & ~swap) | (cb & swap));
  }
}

} // namespace

Status Executable::randomizeVariablesWithoutData(uint64_t seed, double stddev) {
  // One staging buffer, of the largest variable: a fresh one per variable
  // would fault its pages in again every time.
  int64_t largest = 0;
  for (size_t i : withoutData_)
    largest = std::max(largest, variables_[i].second.sizeInBytes());
  std::vector<uint8_t> host(static_cast<size_t>(largest));
  const uint64_t seedKey = splitmixMix(seed);
  for (size_t i : withoutData_) {
    const auto &[name, view] = variables_[i];
    const DType dtype = view.dtype;
    if (dtype != DType::kF32 && dtype != DType::kF64 && dtype != DType::kBF16 &&
        dtype != DType::kF16)
      continue; // integer variables (step counters) keep zero
    const uint64_t varKey = splitmixMix(seedKey ^ nameHash(name));
    const int64_t n = view.numel();
    // Each chunk is drawn from its own stream (seed, name, chunk index), so
    // the threads may take any chunks; the draws happen on the host for
    // every device, so the CPU and CUDA runners start from the same values.
    cpu::parallelFor((n + kRandomChunk - 1) / kRandomChunk, 1,
                     [&](int64_t begin, int64_t end, int) {
                       std::vector<float> draws(size_t(kRandomChunk) + 1);
                       for (int64_t chunk = begin; chunk < end; ++chunk) {
                         const int64_t first = chunk * kRandomChunk;
                         const int64_t count =
                             std::min(kRandomChunk, n - first);
                         drawNormal(splitmixMix(varKey ^ uint64_t(chunk)),
                                    float(stddev), draws.data(), count);
                         storeFloats(draws.data(), count, dtype,
                                     host.data() + first * dtypeSize(dtype));
                       }
                     });
    DTCC_RETURN_IF_ERROR(
        writeBuffer(view, host.data()).withContext("variable '" + name + "'"));
  }
  // Half copies of masters this rank holds alike: the masters' draws
  // rounded, as the program's load would have made them.
  std::map<std::string, const format::Variable *> copies;
  for (const format::Variable &v : program_->variables())
    if (!v.rounded_from().empty())
      copies[v.name()] = &v;
  for (size_t i : withoutData_) {
    const auto &[name, view] = variables_[i];
    auto it = copies.find(name);
    if (it == copies.end())
      continue;
    const TensorView *master = variable(it->second->rounded_from());
    const format::Sharding *ms = variableSharding(it->second->rounded_from());
    const format::Sharding *cs = variableSharding(name);
    const bool sameLayout =
        master && master->dtype == DType::kF32 && master->shape == view.shape &&
        (ms == nullptr) == (cs == nullptr) &&
        (!ms || ms->SerializeAsString() == cs->SerializeAsString());
    if (!sameLayout ||
        (view.dtype != DType::kBF16 && view.dtype != DType::kF16))
      continue;
    std::vector<float> values(size_t(master->numel()));
    DTCC_RETURN_IF_ERROR(readBuffer(*master, values.data()));
    std::vector<uint16_t> rounded(values.size());
    storeFloats(values.data(), int64_t(values.size()), view.dtype,
                rounded.data());
    DTCC_RETURN_IF_ERROR(writeBuffer(view, rounded.data())
                             .withContext("variable '" + name + "'"));
  }
  withoutData_.clear();
  return Status::ok();
}

Status Executable::writeBuffer(const TensorView &view, const void *src) {
  if (isHostMemory(view.data)) {
    DTCC_RETURN_IF_ERROR(device_.waitForTransfers());
    std::memcpy(view.data, src, size_t(view.sizeInBytes()));
    return Status::ok();
  }
  return device_.copyHostToDevice(view.data, src, view.sizeInBytes());
}

const Executable::Function *
Executable::findFunction(const std::string &name) const {
  for (const Function &f : functions_)
    if (f.name == name)
      return &f;
  return nullptr;
}

std::vector<std::string> Executable::functionNames() const {
  std::vector<std::string> names;
  for (const Function &f : functions_)
    names.push_back(f.name);
  return names;
}

const TensorView *Executable::variable(const std::string &name) const {
  for (const auto &[n, v] : variables_)
    if (n == name)
      return &v;
  return nullptr;
}

/// The error of a function that ended with collectives still in flight.
static Status checkNoPendingCollectives(const CommContext *comm,
                                        const std::string &function) {
  if (!comm || comm->pendingAsync().empty())
    return Status::ok();
  std::string ids;
  for (int64_t id : comm->pendingAsync())
    ids += (ids.empty() ? "" : ", ") + std::to_string(id);
  return internalError("function '", function,
                       "' ends with asynchronous collectives not waited for "
                       "(async ",
                       ids, ")");
}

Status Executable::verifyCollectiveOrder() const {
  if (!comm_)
    return Status::ok();
  // One fingerprint per group (its axes) over every function's collectives
  // on that group, in program order.
  std::map<std::string, uint64_t> prints;
  auto mix = [](uint64_t h, const std::string &s) {
    for (unsigned char c : s)
      h = (h ^ c) * 1099511628211ull; // FNV-1a
    return (h ^ 0xff) * 1099511628211ull;
  };
  // Over the whole program, so ranks of different pipeline stages (which
  // bind different functions) compare the same sequence.
  for (const format::Function &fn : program_->functions())
    for (const format::Instruction &instRef : fn.instructions()) {
      const format::Instruction *inst = &instRef;
      static const std::set<std::string> collectives = {
          "all_reduce", "all_gather", "reduce_scatter", "all_to_all",
          "broadcast", "send", "recv"};
      if (!collectives.count(inst->kernel()))
        continue;
      std::string axes;
      if (auto it = inst->attrs().find("axes"); it != inst->attrs().end())
        axes = it->second.has_strings()
                   ? [&] {
                       std::string joined;
                       for (const std::string &a : it->second.strings().values())
                         joined += (joined.empty() ? "" : ",") + a;
                       return joined;
                     }()
                   : it->second.s();
      std::string key = fn.name() + "/" + inst->kernel();
      // (A protobuf map's order differs between processes: look up by name.)
      for (const char *name : {"dim", "reduce", "tag"})
        if (auto it = inst->attrs().find(name); it != inst->attrs().end())
          key += std::string("/") + name + "=" + it->second.ShortDebugString();
      uint64_t &h = prints.try_emplace(axes, 14695981039346656037ull).first->second;
      h = mix(h, key);
    }
  for (const auto &[axes, print] : prints) {
    std::vector<std::string> names;
    std::stringstream ss(axes);
    for (std::string a; std::getline(ss, a, ',');)
      names.push_back(a);
    DTCC_ASSIGN_OR_RETURN(Communicator * group, comm_->group(names));
    std::vector<uint64_t> all(group->size());
    DTCC_RETURN_IF_ERROR(group->allGather(&print, all.data(), 1, DType::kI64));
    for (int r = 0; r < group->size(); ++r)
      if (all[r] != print)
        return invalidArgument(
            "group rank ", r, " of axes '", axes,
            "' runs a different sequence of collectives than this rank: "
            "were the ranks started with different programs?");
  }
  return Status::ok();
}

Status Executable::execute(const Function &fn) {
  ++fn.calls;
  // --profile on a device that times kernels itself: marks between the
  // kernels, read once the function is done, so that the device runs them
  // back to back as it does unprofiled.
  const bool marked = !tracing_ && profiling_ && device_.timesOnDevice();
  if (tracing_) {
    auto seconds = [] {
      return std::chrono::duration<double>(
                 std::chrono::steady_clock::now().time_since_epoch())
          .count();
    };
    auto cpuSeconds = [] {
      timespec t{};
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
      return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
    };
    for (size_t i = 0; i < fn.kernels.size(); ++i) {
      KernelRun run;
      run.instruction = fn.instructions[i];
      run.function = &fn.name;
      run.call = fn.calls;
      run.start = seconds();
      double cpu = cpuSeconds();
      DTCC_RETURN_IF_ERROR(fn.kernels[i]());
      DTCC_RETURN_IF_ERROR(device_.synchronizeForTiming());
      run.cpu = cpuSeconds() - cpu;
      run.end = seconds();
      trace_.push_back(run);
    }
  } else if (marked) {
    DTCC_RETURN_IF_ERROR(device_.markTime());
    for (const KernelFn &k : fn.kernels) {
      DTCC_RETURN_IF_ERROR(k());
      DTCC_RETURN_IF_ERROR(device_.markTime());
    }
  } else if (profiling_) {
    for (size_t i = 0; i < fn.kernels.size(); ++i) {
      auto start = std::chrono::steady_clock::now();
      DTCC_RETURN_IF_ERROR(fn.kernels[i]());
      DTCC_RETURN_IF_ERROR(device_.synchronizeForTiming());
      std::chrono::duration<double> elapsed =
          std::chrono::steady_clock::now() - start;
      KernelProfile &p = profile_[fn.instructions[i]->kernel()];
      ++p.calls;
      p.seconds += elapsed.count();
    }
  } else {
    for (const KernelFn &k : fn.kernels)
      DTCC_RETURN_IF_ERROR(k());
  }
  DTCC_RETURN_IF_ERROR(checkNoPendingCollectives(comm_, fn.name));
  DTCC_RETURN_IF_ERROR(device_.synchronize());
  if (!marked)
    return Status::ok();
  DTCC_ASSIGN_OR_RETURN(std::vector<double> seconds,
                        device_.takeMarkIntervals());
  if (seconds.size() != fn.kernels.size())
    return internalError("--profile: ", seconds.size(), " intervals timed for ",
                         fn.kernels.size(), " kernels of '", fn.name, "'");
  for (size_t i = 0; i < seconds.size(); ++i) {
    KernelProfile &p = profile_[fn.instructions[i]->kernel()];
    ++p.calls;
    p.seconds += seconds[i];
  }
  return Status::ok();
}

Status Executable::run(const Function &fn,
                       const std::vector<const HostTensor *> &inputs,
                       std::vector<HostTensor> *outputs) {
  if (inputs.size() != fn.inputs.size())
    return invalidArgument("function '", fn.name, "' takes ", fn.inputs.size(),
                           " inputs, got ", inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const IoBinding &b = fn.inputs[i];
    const HostTensor &t = *inputs[i];
    if (t.dtype != b.view.dtype || t.shape != b.view.shape)
      return invalidArgument("input '", b.name, "': expected ",
                             b.view.typeString(), ", got ", t.typeString());
    DTCC_RETURN_IF_ERROR(device_.copyHostToDevice(b.view.data, t.bytes.data(),
                                                  t.bytes.size()));
  }
  DTCC_RETURN_IF_ERROR(execute(fn));
  outputs->clear();
  for (const IoBinding &b : fn.outputs) {
    HostTensor t(b.view.dtype, b.view.shape);
    DTCC_RETURN_IF_ERROR(
        device_.copyDeviceToHost(t.bytes.data(), b.view.data, t.bytes.size()));
    outputs->push_back(std::move(t));
  }
  return Status::ok();
}

} // namespace dtcc::runtime
