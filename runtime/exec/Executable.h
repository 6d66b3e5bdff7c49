//===- Executable.h - a loaded program ready to run -------------*- C++ -*-===//
//
// Allocates the program's three arenas on a device (sizes from the compiler's
// static memory plan) and, for an offloaded optimizer step, its two host
// arenas; fills variables and constants from the data section, binds every
// instruction to a kernel (host instructions to the CPU's), and runs
// functions.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_EXEC_EXECUTABLE_H
#define DTCC_RUNTIME_EXEC_EXECUTABLE_H

#include "runtime/base/HostTensor.h"
#include "runtime/device/Device.h"
#include "runtime/exec/GeneratedKernels.h"
#include "runtime/exec/ShardLayout.h"
#include "runtime/format/Program.pb.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dtcc::runtime {

/// A named input or output of a function and the buffer that holds it.
struct IoBinding {
  std::string name;
  TensorView view;
};

/// Time spent per kernel name, when profiling.
struct KernelProfile {
  int64_t calls = 0;
  double seconds = 0;
};

/// One kernel's run, when tracing: its instruction, the call of its
/// function (1 for the first), and when it ran, in seconds of
/// std::chrono::steady_clock (CLOCK_MONOTONIC on Linux, which every process
/// of a host shares, so the ranks' traces line up).
struct KernelRun {
  const format::Instruction *instruction = nullptr;
  const std::string *function = nullptr;
  int64_t call = 0;
  double start = 0, end = 0;
  /// CPU time of the thread that ran it, in seconds: its work, which a
  /// loaded host's descheduling does not inflate (a blocking collective
  /// waits on the communication thread and counts ~0 here). Only the
  /// calling thread's: with more than one kernel thread (OMP_NUM_THREADS,
  /// OPENBLAS_NUM_THREADS) the others' share is not in it.
  double cpu = 0;
};

class Executable {
public:
  struct Function {
    std::string name;
    std::vector<IoBinding> inputs, outputs;
    std::vector<KernelFn> kernels;
    std::vector<const format::Instruction *> instructions;
    int64_t workspaceBytes = 0;
    /// How many times execute() ran it.
    mutable int64_t calls = 0;
  };

  ~Executable();
  Executable(const Executable &) = delete;
  Executable &operator=(const Executable &) = delete;

  /// Validates `program` (buffers inside their arenas, data ranges inside
  /// the data section, every kernel known: all unknown ones are listed) and
  /// prepares it on `device`. `program` must outlive the executable.
  /// A program with a mesh takes `comm`, the communicators of that mesh
  /// (see runtime/comm; it must outlive the executable); its collective
  /// kernels fail to bind without it.
  static StatusOr<std::unique_ptr<Executable>>
  create(const format::Program &program, const uint8_t *data,
         uint64_t dataSize, Device &device, CommContext *comm = nullptr);

  const Function *findFunction(const std::string &name) const;
  std::vector<std::string> functionNames() const;

  /// Checks `inputs` (in binding order) against the function's bindings,
  /// copies them in, runs, and copies the outputs out.
  Status run(const Function &fn, const std::vector<const HostTensor *> &inputs,
             std::vector<HostTensor> *outputs);
  /// Runs the kernels only: inputs must already be in their buffers. A
  /// function that leaves an asynchronous collective unwaited is an error.
  Status execute(const Function &fn);

  /// Bytes of each arena, and of the kernels' scratch the device reserved
  /// when the program was bound (runtime/exec/Scratch.h); their sum is the
  /// program's peak device memory, all of it allocated before the first run.
  int64_t workspaceBytes() const { return workspaceBytes_; }
  int64_t stateBytes() const { return stateBytes_; }
  int64_t constantBytes() const { return constantBytes_; }
  int64_t scratchBytes() const { return scratchBytes_; }
  int64_t peakBytes() const {
    return workspaceBytes_ + stateBytes_ + constantBytes_ + scratchBytes_;
  }
  /// The host's arenas (--offload optimizer: the optimizer state and the
  /// step that updates it), allocated with Device::allocateHost; their sum
  /// (with the host kernels' scratch) is the program's host memory.
  int64_t hostWorkspaceBytes() const { return hostWorkspaceBytes_; }
  int64_t hostStateBytes() const { return hostStateBytes_; }
  int64_t hostBytes() const {
    return hostWorkspaceBytes_ + hostStateBytes_ + hostScratchBytes_;
  }
  /// Bytes the transfers (copy_to_host, copy_to_device) moved so far.
  int64_t bytesToHost() const { return bytesToHost_; }
  int64_t bytesToDevice() const { return bytesToDevice_; }
  /// Whether `data` lies in one of the host arenas.
  bool isHostMemory(const void *data) const;
  /// Copies a buffer of the program out to host memory and in from it,
  /// whichever memory space the buffer is in (a checkpoint's variables).
  Status readBuffer(const TensorView &view, void *dst) const;
  Status writeBuffer(const TensorView &view, const void *src);

  /// The view of a variable's buffer, by name; null if unknown.
  const TensorView *variable(const std::string &name) const;
  const std::vector<std::pair<std::string, TensorView>> &variables() const {
    return variables_;
  }
  /// Whether every variable starts from data or, by definition, zero.
  bool hasInitialValues() const { return withoutData_.empty(); }
  /// Fills every variable the program holds no data for (compiled from a
  /// model without weights, `dtcc zoo --no-weights`) with normal draws of
  /// standard deviation `stddev`, seeded by `seed` and the variable's name
  /// (so replicas on every rank agree); variables that start at zero by
  /// definition (optimizer state) stay zero. For running models too large
  /// to carry their weights, e.g. to time them. A half copy of a master
  /// weight (`rounded_from`) is the master's draws rounded where this rank
  /// holds the same part of both; where ZeRO split the master over dp it
  /// is drawn on its own until the first update rounds the master into it.
  Status randomizeVariablesWithoutData(uint64_t seed, double stddev);
  /// How a variable is split over the mesh; null when every rank holds it
  /// whole.
  const format::Sharding *variableSharding(const std::string &name) const {
    auto it = variableShardings_.find(name);
    return it == variableShardings_.end() ? nullptr : &it->second;
  }
  /// The program it runs (every variable of every stage).
  const format::Program &program() const { return *program_; }
  /// The pipeline stage that owns a variable; -1 when every stage does.
  int64_t variableStage(const std::string &name) const {
    auto it = variableStages_.find(name);
    return it == variableStages_.end() ? -1 : it->second;
  }

  void setProfiling(bool enabled) { profiling_ = enabled; }
  bool profiling() const { return profiling_; }
  const std::map<std::string, KernelProfile> &profile() const {
    return profile_;
  }
  /// Forgets the kernel times so far; `scope` says what the next ones
  /// cover ("steps 2 to 6"), for the report.
  void restartProfile(std::string scope) {
    profile_.clear();
    profileScope_ = std::move(scope);
  }
  /// restartProfile's scope; empty before.
  const std::string &profileScope() const { return profileScope_; }
  /// Records every kernel's start and end (trace()); kernels then run one at
  /// a time, each synchronized, as when profiling.
  void setTracing(bool enabled) { tracing_ = enabled; }
  const std::vector<KernelRun> &trace() const { return trace_; }
  Device &device() { return device_; }
  /// The mesh's communicators; null for a single-device program.
  CommContext *comm() const { return comm_; }
  /// Checks with the other ranks that every group of the mesh issues the
  /// same collectives in the same order in every function (kind, axes,
  /// dimension, reduction, tag), so a rank started with another program is an
  /// error at load time rather than a hang. Collective: every rank calls it.
  Status verifyCollectiveOrder() const;
  /// This rank's place on the program's mesh (no axes on one device).
  const MeshCoords &meshCoords() const { return coords_; }

private:
  explicit Executable(Device &device) : device_(device) {}
  Status prepare(const format::Program &program, const uint8_t *data,
                 uint64_t dataSize);
  StatusOr<TensorView> viewOf(const format::Program &program, int32_t id);

  Device &device_;
  CommContext *comm_ = nullptr;
  MeshCoords coords_;
  std::map<std::string, format::Sharding> variableShardings_;
  std::map<std::string, int64_t> variableStages_;
  const format::Program *program_ = nullptr;
  /// The fused regions' kernels; outlives the closures that call them.
  std::unique_ptr<GeneratedKernels> generated_;
  void *workspace_ = nullptr, *state_ = nullptr, *constants_ = nullptr;
  int64_t workspaceBytes_ = 0, stateBytes_ = 0, constantBytes_ = 0;
  void *hostWorkspace_ = nullptr, *hostState_ = nullptr;
  int64_t hostWorkspaceBytes_ = 0, hostStateBytes_ = 0;
  ScratchPlan hostScratch_;
  void *hostScratchBase_ = nullptr;
  int64_t hostScratchBytes_ = 0;
  int64_t bytesToHost_ = 0, bytesToDevice_ = 0;
  ScratchPlan scratch_;
  void *scratchBase_ = nullptr;
  int64_t scratchBytes_ = 0;
  std::vector<Function> functions_;
  std::vector<std::pair<std::string, TensorView>> variables_;
  /// Indices into variables_ of those with neither data nor zero_init.
  std::vector<size_t> withoutData_;
  bool profiling_ = false;
  std::map<std::string, KernelProfile> profile_;
  std::string profileScope_;
  bool tracing_ = false;
  std::vector<KernelRun> trace_;
};

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_EXEC_EXECUTABLE_H
