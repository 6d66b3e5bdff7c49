//===- Runner.cpp - the command line of compiled programs -----------------===//
//
// Parses flags, loads the embedded program, and either runs one function
// (inputs and outputs as TensorProto files) or, for training programs, the
// training loop of Trainer.h. A program compiled for a mesh runs as one rank
// of a job: output and logs come from rank 0, errors from any rank.
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/Runner.h"

#include "runtime/base/FlagArg.h"
#include "runtime/base/Format.h"

#include "runtime/comm/CommContext.h"
#include "runtime/device/cpu/BlasCore.h"
#if DTCC_HAVE_CUDA
#include "runtime/device/cuda/CudaDevice.h"
#endif
#include "runtime/exec/Executable.h"
#include "runtime/exec/Supervisor.h"
#include "runtime/exec/Trainer.h"
#include "runtime/format/Container.h"
#include "runtime/io/TensorFile.h"
#include "runtime/format/ProgramMetadata.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <sys/stat.h>
#include <unistd.h>

namespace dtcc::runtime {
namespace {

struct Options {
  std::string program;
  std::map<std::string, std::string> inputs; // name -> file
  std::string outputDir;
  std::string function = "main";
  bool print = false;
  bool help = false;
  bool stats = false;
  bool profile = false;
  /// --trace: a Chrome trace of every kernel run ("%r": the rank).
  std::string tracePath;
  int repeat = 1;
  /// --random-init S: variables without data drawn from seed S.
  std::optional<uint64_t> randomInit;
  /// --collective-timeout: seconds; 0: DTCC_COLLECTIVE_TIMEOUT or 300.
  double collectiveTimeout = 0;
  /// Flags that choose inference mode on a training program.
  bool functionGiven = false, inferenceFlags = false;
  /// The last training flag given, for messages; empty: none.
  std::string trainFlag;
  TrainerOptions train;
};

std::string selfPath() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0)
    return "";
  buf[n] = '\0';
  return buf;
}


StatusOr<int64_t> parseCount(const std::string &flag, const std::string &v,
                             int64_t min) {
  char *end = nullptr;
  errno = 0;
  long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0 || n < min)
    return invalidArgument(flag, " expects ", min > 0 ? "a positive" : "a",
                           " integer, got '", v, "'");
  return static_cast<int64_t>(n);
}

StatusOr<Options> parseFlags(int argc, char **argv) {
  Options opts;
  for (int i = 1; i < argc; ++i) {
    FlagArg flag(argc, argv, i);
    const std::string &arg = flag.arg;
    auto value = [&](const char *name) { return flag.value(name); };
    auto is = [&](const char *name) { return flag.is(name); };
    if (arg == "--help" || arg == "-h") {
      opts.help = true;
    } else if (is("--input")) {
      DTCC_ASSIGN_OR_RETURN(std::string v, value("--input"));
      size_t eq = v.find('=');
      if (eq == std::string::npos || eq == 0)
        return invalidArgument("--input expects NAME=FILE.pb, got '", v, "'");
      opts.inputs[v.substr(0, eq)] = v.substr(eq + 1);
      opts.inferenceFlags = true;
    } else if (is("--output-dir")) {
      DTCC_ASSIGN_OR_RETURN(opts.outputDir, value("--output-dir"));
      opts.inferenceFlags = true;
    } else if (is("--function")) {
      DTCC_ASSIGN_OR_RETURN(opts.function, value("--function"));
      opts.functionGiven = opts.inferenceFlags = true;
    } else if (is("--data")) {
      DTCC_ASSIGN_OR_RETURN(opts.train.dataPath, value("--data"));
      opts.trainFlag = "--data";
    } else if (is("--data-dtype")) {
      DTCC_ASSIGN_OR_RETURN(opts.train.dataDType, value("--data-dtype"));
      opts.trainFlag = "--data-dtype";
    } else if (is("--batches")) {
      DTCC_ASSIGN_OR_RETURN(opts.train.batchesDir, value("--batches"));
      opts.trainFlag = "--batches";
    } else if (is("--steps")) {
      DTCC_ASSIGN_OR_RETURN(std::string v, value("--steps"));
      DTCC_ASSIGN_OR_RETURN(opts.train.steps, parseCount("--steps", v, 1));
      opts.trainFlag = "--steps";
    } else if (is("--seed") || is("--random-init")) {
      const char *flag = is("--seed") ? "--seed" : "--random-init";
      DTCC_ASSIGN_OR_RETURN(std::string v, value(flag));
      char *end = nullptr;
      errno = 0;
      unsigned long long seed = std::strtoull(v.c_str(), &end, 10);
      if (v.empty() || v[0] == '-' || *end != '\0' || errno != 0)
        return invalidArgument(flag, " expects an unsigned integer, got '", v,
                               "'");
      if (is("--seed")) {
        opts.train.seed = seed;
        opts.trainFlag = "--seed";
      } else {
        opts.randomInit = seed;
      }
    } else if (is("--log-every")) {
      DTCC_ASSIGN_OR_RETURN(std::string v, value("--log-every"));
      DTCC_ASSIGN_OR_RETURN(opts.train.logEvery,
                            parseCount("--log-every", v, 1));
      opts.trainFlag = "--log-every";
    } else if (is("--save")) {
      DTCC_ASSIGN_OR_RETURN(opts.train.saveDir, value("--save"));
      opts.trainFlag = "--save";
    } else if (is("--save-every")) {
      DTCC_ASSIGN_OR_RETURN(std::string v, value("--save-every"));
      DTCC_ASSIGN_OR_RETURN(opts.train.saveEvery,
                            parseCount("--save-every", v, 1));
      opts.trainFlag = "--save-every";
    } else if (is("--stop-after")) {
      DTCC_ASSIGN_OR_RETURN(std::string v, value("--stop-after"));
      DTCC_ASSIGN_OR_RETURN(opts.train.stopAfter,
                            parseCount("--stop-after", v, 1));
      opts.trainFlag = "--stop-after";
    } else if (is("--resume")) {
      DTCC_ASSIGN_OR_RETURN(opts.train.resumeDir, value("--resume"));
      opts.trainFlag = "--resume";
    } else if (is("--checkpoint-dir")) {
      DTCC_ASSIGN_OR_RETURN(opts.train.checkpointDir, value("--checkpoint-dir"));
      opts.trainFlag = "--checkpoint-dir";
    } else if (is("--keep-checkpoints")) {
      DTCC_ASSIGN_OR_RETURN(std::string v, value("--keep-checkpoints"));
      DTCC_ASSIGN_OR_RETURN(opts.train.keepCheckpoints,
                            parseCount("--keep-checkpoints", v, 0));
      opts.trainFlag = "--keep-checkpoints";
    } else if (is("--dump-outputs")) {
      DTCC_ASSIGN_OR_RETURN(opts.train.dumpOutputsDir, value("--dump-outputs"));
      opts.trainFlag = "--dump-outputs";
    } else if (is("--program")) {
      DTCC_ASSIGN_OR_RETURN(opts.program, value("--program"));
    } else if (is("--repeat")) {
      DTCC_ASSIGN_OR_RETURN(std::string v, value("--repeat"));
      opts.repeat = std::atoi(v.c_str());
      if (opts.repeat < 1)
        return invalidArgument("--repeat expects a positive count, got '", v,
                               "'");
      opts.inferenceFlags = true;
    } else if (arg == "--print") {
      opts.print = opts.inferenceFlags = true;
    } else if (is("--collective-timeout")) {
      DTCC_ASSIGN_OR_RETURN(std::string v, value("--collective-timeout"));
      char *end = nullptr;
      double t = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(t > 0) || t > 1e9)
        return invalidArgument("--collective-timeout expects a positive "
                               "number of seconds, got '",
                               v, "'");
      opts.collectiveTimeout = t;
    } else if (arg == "--stats") {
      opts.stats = true;
    } else if (arg == "--profile") {
      opts.profile = true;
    } else if (is("--trace")) {
      DTCC_ASSIGN_OR_RETURN(opts.tracePath, value("--trace"));
    } else {
      return invalidArgument("unknown flag '", arg, "' (see --help)");
    }
  }
  return opts;
}

/// "tensor<2x3xf32>" of a program's buffer, read from the program alone (help
/// needs no device).
std::string bufferType(const format::Program &program, int32_t id) {
  if (id < 0 || id >= program.buffers_size() ||
      !isValidDType(program.buffers(id).dtype()))
    return "?";
  const format::Buffer &b = program.buffers(id);
  return makeView(nullptr, static_cast<DType>(b.dtype()),
                  {b.shape().begin(), b.shape().end()})
      .typeString();
}

/// `training`: the program is a training program, or unknown (bare runner,
/// `program` null).
void printHelp(const char *argv0, const format::Program *program,
               bool training) {
  if (training)
    std::printf("usage: %s --data FILE --steps N [training options]\n"
                "       %s --batches DIR --steps N [training options]\n"
                "       %s --function NAME [--input NAME=FILE.pb]... "
                "[--output-dir DIR] [--print]\n",
                argv0, argv0, argv0);
  else
    std::printf("usage: %s [--input NAME=FILE.pb]... [--output-dir DIR] "
                "[--print]\n",
                argv0);
  std::printf(
      "\n"
      "Runs a program compiled by dtcc on the CPU or, compiled with --target\n"
      "cuda, on a GPU. Inputs and outputs are ONNX TensorProto files (.pb).\n"
      "\n"
      "options:\n"
      "  --input NAME=FILE.pb  the value of input NAME (once per input)\n"
      "  --output-dir DIR      write each output to DIR/<name>.pb\n"
      "  --print               print each output's type and values\n"
      "  --function NAME       the function to run (default: main)\n"
      "  --repeat N            run N times and report the mean time\n"
      "  --profile             report the time spent per kernel (training:\n"
      "                        over the steps after the first): on a GPU\n"
      "                        the device's time between events around\n"
      "                        each kernel, on the CPU each kernel's run\n"
      "                        to its end\n"
      "  --trace FILE          write a Chrome trace (chrome://tracing,\n"
      "                        Perfetto) of every kernel run to FILE; '%%r'\n"
      "                        in FILE is the rank (several ranks without\n"
      "                        it: FILE.rank<N>)\n"
      "  --stats               report the memory plan\n"
      "  --random-init S       a program compiled without weights (dtcc\n"
      "                        zoo --no-weights) starts from N(0, 0.02)\n"
      "                        draws of seed S instead of zeros (to time\n"
      "                        models too large to carry their weights)\n"
      "  --program FILE        run the program in FILE (bare runner only)\n"
      "  --collective-timeout S  seconds a collective may wait for its peers\n"
      "                        before the job ends (mesh programs; default\n"
      "                        DTCC_COLLECTIVE_TIMEOUT, or 300)\n"
      "  --help                this text\n");
  if (training)
    std::printf(
        "\n"
        "training (programs compiled with `dtcc compile --train`; any of\n"
        "these flags, or no --input/--function, runs the training loop):\n"
        "  --data FILE           token file: little-endian uint16 or uint32\n"
        "  --data-dtype TYPE     uint16 (default) or uint32\n"
        "  --batches DIR         explicit inputs instead of --data: one\n"
        "                        folder per step (name order) holding\n"
        "                        <input>.pb per train_step input\n"
        "  --steps N             total steps of the run (required; a resumed\n"
        "                        run continues up to N)\n"
        "  --seed S              sampling seed (default 0; a resumed run\n"
        "                        keeps its checkpoint's)\n"
        "  --log-every K         log every K steps, the first and the last\n"
        "                        (default 10)\n"
        "  --save DIR            save a checkpoint to DIR at the end\n"
        "  --save-every K        also save every K steps\n"
        "  --stop-after K        stop (and save) after step K; the schedule\n"
        "                        still spans --steps, --resume continues\n"
        "  --resume DIR          restore the checkpoint in DIR and continue\n"
        "  --checkpoint-dir DIR  keep checkpoints in DIR/step_<n>, saved\n"
        "                        every --save-every steps and at the end in\n"
        "                        the background (atomic, with checksums);\n"
        "                        the run starts from the newest valid one\n"
        "  --keep-checkpoints N  keep the newest N of them (default 3; 0: all)\n"
        "  --dump-outputs DIR    write each step's outputs to\n"
        "                        DIR/step_<n>/<name>.pb (n from 1; with\n"
        "                        micro-batches, train_step's go to\n"
        "                        DIR/step_<n>/micro_<m>/)\n");
  if (training)
    std::printf(
        "\n"
        "supervised (docs/operations.md): --supervise starts the ranks, and\n"
        "restarts the whole job from the newest checkpoint of\n"
        "--checkpoint-dir when one fails; the other flags go to the ranks:\n"
        "  --supervise           run as the supervisor (of this node's ranks\n"
        "                        under srun, mpirun or NNODES/NODE_RANK)\n"
        "  --ranks N             ranks to start here (default: the mesh's\n"
        "                        ranks divided by the nodes)\n"
        "  --nnodes N --node-rank R  the nodes, when no launcher says\n"
        "  --master-addr A --master-port P  rank 0's address (default\n"
        "                        MASTER_ADDR, MASTER_PORT; one node: local);\n"
        "                        node supervisors agree on restarts at P+1\n"
        "  --max-restarts N      restarts before giving up (default 3)\n"
        "  --restart-backoff S   first wait before a restart, doubled after\n"
        "                        each (default 1, at most 60)\n"
        "  --hang-timeout S      restart when no rank finishes a step for S\n"
        "                        seconds once training runs (default: off;\n"
        "                        the collective timeout still ends a hung job)\n"
        "  --min-ranks N --max-ranks N  accepted counts; restarts keep the\n"
        "                        compiled count (dtcc run MODEL ... -- replans\n"
        "                        for the ranks available: dtcc run --help)\n"
        "  --supervisor-report FILE  the restarts as JSON at the end\n");
  if (!program)
    return;
  for (const format::Function &fn : program->functions()) {
    std::printf("\nfunction %s\n  inputs:\n", fn.name().c_str());
    for (const format::Binding &b : fn.inputs())
      std::printf("    %-24s %s\n", b.name().c_str(),
                  bufferType(*program, b.buffer()).c_str());
    if (fn.inputs().empty())
      std::printf("    (none)\n");
    std::printf("  outputs:\n");
    for (const format::Binding &b : fn.outputs())
      std::printf("    %-24s %s\n", b.name().c_str(),
                  bufferType(*program, b.buffer()).c_str());
  }
}

/// Prints up to `limit` values of `t`.
void printTensor(const std::string &name, const HostTensor &t) {
  std::printf("%s: %s\n  [", name.c_str(), t.typeString().c_str());
  const int64_t limit = 16;
  int64_t n = std::min(t.numel(), limit);
  for (int64_t i = 0; i < n; ++i) {
    if (i)
      std::printf(", ");
    switch (t.dtype) {
    case DType::kF32: std::printf("%.6g", t.data<float>()[i]); break;
    case DType::kF64: std::printf("%.9g", t.data<double>()[i]); break;
    case DType::kF16: std::printf("%.4g", halfToFloat(t.data<uint16_t>()[i])); break;
    case DType::kBF16: std::printf("%.4g", bf16ToFloat(t.data<uint16_t>()[i])); break;
    case DType::kBool: std::printf("%s", t.data<uint8_t>()[i] ? "true" : "false"); break;
    case DType::kI8: std::printf("%d", t.data<int8_t>()[i]); break;
    case DType::kI16: std::printf("%d", t.data<int16_t>()[i]); break;
    case DType::kI32: std::printf("%d", t.data<int32_t>()[i]); break;
    case DType::kI64: std::printf("%" PRId64, t.data<int64_t>()[i]); break;
    case DType::kU8: std::printf("%u", t.data<uint8_t>()[i]); break;
    case DType::kU16: std::printf("%u", t.data<uint16_t>()[i]); break;
    case DType::kU32: std::printf("%u", t.data<uint32_t>()[i]); break;
    case DType::kU64: std::printf("%" PRIu64, t.data<uint64_t>()[i]); break;
    case DType::kInvalid: break;
    }
  }
  std::printf("%s]\n", t.numel() > limit ? ", ..." : "");
}

/// The job this process is a rank of, while the runner runs; null for a
/// single-device program.
World *activeWorld = nullptr;

/// Whether this process prints output and logs: rank 0, or the only one.
bool isRoot() { return !activeWorld || activeWorld->rank() == 0; }

int fail(const Status &status) {
  std::string rank = activeWorld && activeWorld->size() > 1
                         ? strCat("rank ", activeWorld->rank(), ": ")
                         : "";
  std::fprintf(stderr, "%serror: %s\n", rank.c_str(),
               status.toString().c_str());
  // A supervisor looks for the cause of a lost peer elsewhere.
  const int code =
      status.code() == StatusCode::kPeerLost ? CommQueue::kPeerLostExitCode : 1;
  // The other ranks cannot go on without this one: end the job rather than
  // leave them waiting in a collective until it times out.
  if (activeWorld && activeWorld->size() > 1)
    activeWorld->abort(code);
  return code;
}

/// Sets activeWorld for the runner's scope.
struct ActiveWorldScope {
  explicit ActiveWorldScope(World *world) { activeWorld = world; }
  ~ActiveWorldScope() { activeWorld = nullptr; }
};

/// Every rank's closing line on a mesh, measured beside predicted: "rank 1:
/// peak memory 3.2 MiB planned (process 20.1 MiB above start), bytes sent
/// 1.5 MiB (predicted 1.5 MiB); measured: written to sockets 1.5 MiB =
/// payload 1572864 B + headers 4096 B (predicted payload 1572864 B)".
/// Planned: the static memory plan. Bytes sent: the communicators' ring
/// formulas; predicted: the compiler's per-call figure of each function
/// (metadata dtcc.bytes_sent.<function>) times its calls. Measured: what
/// the transport took (Communicator::transportBytes: TCP's socket writes,
/// MPI's and NCCL's send buffers; for MPI and NCCL beside the compiler's
/// dtcc.bytes_handed.<function>).
/// Bytes the ranks sent and handed on before running (the load-time checks).
int64_t bytesBeforeRun = 0, transportBeforeRun = 0, headersBeforeRun = 0;
int64_t ncclBeforeRun = 0;

/// The predicted per-rank figure of metadata `prefix`<function> over the
/// run: each function's per-call figure times its calls.
int64_t predictedOverRun(const Executable &exe, const format::Program &program,
                         const char *prefix) {
  int64_t predicted = 0;
  for (const std::string &name : exe.functionNames()) {
    auto it = program.metadata().find(prefix + name);
    if (it != program.metadata().end())
      predicted += std::atoll(it->second.c_str()) * exe.findFunction(name)->calls;
  }
  return predicted;
}

/// The host's share of an offloaded optimizer step: its arenas and the
/// bytes the transfers moved, beside the compiler's figures
/// (dtcc.bytes_to_host.<function>, dtcc.bytes_to_device.<function>).
void printHostSummary(const Executable &exe, const format::Program &program) {
  if (exe.hostBytes() == 0)
    return;
  const int64_t toHost =
      predictedOverRun(exe, program, metadata::kBytesToHostPrefix);
  const int64_t toDevice =
      predictedOverRun(exe, program, metadata::kBytesToDevicePrefix);
  std::string who = activeWorld && exe.comm()
                        ? strCat("rank ", activeWorld->rank(), ": ")
                        : std::string();
  std::string line = strCat(
      who, "host memory ", formatBytes(exe.hostBytes()), " planned (workspace ",
      formatBytes(exe.hostWorkspaceBytes()), " + state ",
      formatBytes(exe.hostStateBytes()), "), transfers ",
      formatBytes(exe.bytesToHost()), " to host (predicted ",
      formatBytes(toHost), "), ", formatBytes(exe.bytesToDevice()),
      " to device (predicted ", formatBytes(toDevice), ")\n");
  std::fflush(stdout);
  std::fputs(line.c_str(), stdout);
  std::fflush(stdout);
}

/// Bytes handed to NCCL so far by a CUDA device's mesh; -1 without one.
int64_t ncclHandedBytes(Device *device) {
#if DTCC_HAVE_CUDA
  if (auto *gpu = dynamic_cast<cuda::CudaDevice *>(device))
    if (gpu->nccl())
      return gpu->nccl()->handedBytes();
#endif
  (void)device;
  return -1;
}

/// The runner's device, once created (for the NCCL counters).
Device *activeDevice = nullptr;

/// The process's resident high-water mark (VmHWM) after each phase of the
/// runner, for the closing "memory measured" line.
struct ResidentPhases {
  int64_t communicators = 0; ///< after the world and mesh communicators
  int64_t loaded = 0;        ///< after loading the program (arenas made)
};
ResidentPhases residentPhases;

/// Every rank's (or the one process's) measured resident memory:
/// "rank 1: memory measured: VmHWM 64339968 B (at start 31457280 B, after
/// communicators 39845888 B, after loading 45088768 B); planned arenas
/// 2228224 B, program data 1323008 B". Exact bytes, for the plan checks
/// (tests/e2e/plan_checks.py) to hold against the predicted total.
void printResident(const Executable &exe, int64_t dataBytes) {
  std::string who =
      activeWorld && activeWorld->size() > 1
          ? strCat("rank ", activeWorld->rank(), ": ")
          : std::string();
  std::string line = strCat(
      who, "memory measured: VmHWM ", processPeakRss(), " B (at start ",
      startupPeakRss(), " B, after communicators ",
      residentPhases.communicators, " B, after loading ", residentPhases.loaded,
      " B); planned arenas ", exe.peakBytes(), " B, program data ", dataBytes,
      " B\n");
#if DTCC_HAVE_CUDA
  // On a GPU, device memory as the CUDA runtime reports it.
  if (auto *gpu = dynamic_cast<cuda::CudaDevice *>(activeDevice)) {
    cuda::CudaDevice::MemoryUse m = gpu->memoryUse();
    line += strCat(who, "device memory measured: in use ", m.usedNow,
                   " B of ", m.total, " B (cudaMemGetInfo; ", m.usedAtCreate,
                   " B once the context existed), cudaMalloc peak ",
                   m.mallocPeak, " B; planned arenas ", exe.peakBytes(),
                   " B\n");
  }
#endif
  std::fflush(stdout);
  std::fputs(line.c_str(), stdout);
  std::fflush(stdout);
}

void printRankSummary(const Executable &exe, const format::Program &program) {
  printHostSummary(exe, program);
  Device *device = activeDevice;
  if (!activeWorld || !exe.comm())
    return;
  const MeshComms &mesh = exe.comm()->mesh();
  const int64_t predicted =
      predictedOverRun(exe, program, metadata::kBytesSentPrefix);
  const int64_t predictedHanded =
      predictedOverRun(exe, program, metadata::kBytesHandedPrefix);
  std::string line = strCat(
      "rank ", activeWorld->rank(), ": peak memory ", formatBytes(exe.peakBytes()),
      " planned (process ", formatBytes(processPeakRss() - startupPeakRss()),
      " above start), bytes sent ",
      formatBytes(mesh.bytesSent() - bytesBeforeRun), " (predicted ",
      formatBytes(predicted), ")");
  const int64_t nccl = ncclHandedBytes(device);
  const int64_t moved = mesh.transportBytes() - transportBeforeRun;
  const int64_t headers = mesh.transportHeaderBytes() - headersBeforeRun;
  const std::vector<Communicator *> comms = mesh.communicators();
  const std::string transport =
      comms.empty() ? "none" : comms.front()->transportName();
  if (nccl >= 0) {
    line += strCat("; measured: handed to NCCL ", formatBytes(nccl - ncclBeforeRun),
                   " = ", nccl - ncclBeforeRun, " B (predicted ",
                   predictedHanded, " B)");
  } else if (transport == "tcp") {
    line += strCat("; measured: written to sockets ", formatBytes(moved),
                   " = payload ", moved - headers, " B + headers ", headers,
                   " B (predicted payload ", predicted, " B)");
  } else if (transport == "mpi") {
    line += strCat("; measured: handed to MPI ", formatBytes(moved), " = ",
                   moved, " B (predicted ", predictedHanded, " B)");
  }
  line += "\n";
  std::fflush(stdout);
  std::fputs(line.c_str(), stdout);
  std::fflush(stdout);
}

void printStats(const Executable &exe) {
  std::printf("memory: peak %s = workspace %s + state %s + constants %s",
              formatBytes(exe.peakBytes()).c_str(),
              formatBytes(exe.workspaceBytes()).c_str(),
              formatBytes(exe.stateBytes()).c_str(),
              formatBytes(exe.constantBytes()).c_str());
  // Kernels' scratch (a GPU's cuBLASLt workspace, collective staging).
  if (exe.scratchBytes() > 0)
    std::printf(" + kernel scratch %s", formatBytes(exe.scratchBytes()).c_str());
  // An offloaded optimizer's memory, in the host's arenas.
  if (exe.hostBytes() > 0)
    std::printf("; host %s = workspace %s + state %s",
                formatBytes(exe.hostBytes()).c_str(),
                formatBytes(exe.hostWorkspaceBytes()).c_str(),
                formatBytes(exe.hostStateBytes()).c_str());
  std::printf("\n");
}

/// The kernels that communicate (their time is waiting for peers as much as
/// work).
bool isCommunication(const std::string &kernel) {
  static const char *const names[] = {"all_reduce", "all_gather",
                                      "reduce_scatter", "all_to_all",
                                      "broadcast",  "send",
                                      "recv",       "wait"};
  return std::find(std::begin(names), std::end(names), kernel) !=
         std::end(names);
}

std::string jsonString(const std::string &s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

/// Writes the executable's kernel runs as a Chrome trace: one complete event
/// ("ph": "X") per run, pid the rank, timestamps in microseconds of the
/// host's monotonic clock (alike across the ranks of one host); args name
/// the function, its call (the step), the thread CPU time it took (cpu_us),
/// the ONNX node, and the kernel's pipeline task, axes, tag and phase where
/// it has them.
Status writeTrace(const Executable &exe, std::string path) {
  const int rank = activeWorld ? activeWorld->rank() : 0;
  if (size_t at = path.find("%r"); at != std::string::npos)
    path.replace(at, 2, std::to_string(rank));
  else if (activeWorld && activeWorld->size() > 1)
    path += ".rank" + std::to_string(rank);
  std::FILE *f = std::fopen(path.c_str(), "w");
  if (!f)
    return invalidArgument("--trace: cannot write '", path, "': ",
                           std::strerror(errno));
  std::fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
  bool first = true;
  for (const KernelRun &run : exe.trace()) {
    const format::Instruction &inst = *run.instruction;
    char cpu[32];
    std::snprintf(cpu, sizeof(cpu), "%.3f", run.cpu * 1e6);
    std::string args = "\"function\": " + jsonString(*run.function) +
                       ", \"call\": " + std::to_string(run.call) +
                       ", \"cpu_us\": " + cpu +
                       ", \"node\": " + jsonString(inst.location());
    for (const char *name : {"dshard.task", "phase", "axes", "tag", "offset"}) {
      auto it = inst.attrs().find(name);
      if (it == inst.attrs().end())
        continue;
      const format::AttrValue &v = it->second;
      std::string key = std::strcmp(name, "dshard.task") == 0 ? "task" : name;
      if (v.has_strings()) {
        std::string joined;
        for (const std::string &a : v.strings().values())
          joined += (joined.empty() ? "" : ",") + a;
        args += ", \"" + key + "\": " + jsonString(joined);
      } else if (!v.s().empty()) {
        args += ", \"" + key + "\": " + jsonString(v.s());
      } else {
        args += ", \"" + key + "\": " + std::to_string(v.i());
      }
    }
    std::fprintf(f,
                 "%s{\"name\": %s, \"cat\": \"%s\", \"ph\": \"X\", \"pid\": "
                 "%d, \"tid\": 0, \"ts\": %.3f, \"dur\": %.3f, \"args\": {%s}}",
                 first ? "" : ",\n", jsonString(inst.kernel()).c_str(),
                 isCommunication(inst.kernel()) ? "communication" : "compute",
                 rank, run.start * 1e6, (run.end - run.start) * 1e6,
                 args.c_str());
    first = false;
  }
  std::fprintf(f, "\n]}\n");
  if (std::fclose(f) != 0)
    return invalidArgument("--trace: cannot write '", path, "'");
  return Status::ok();
}

/// Kernel times, slowest first, divided by `runs`.
void printProfile(Executable &exe, int runs) {
  const std::string scope = runs > 1 ? " per run"
                            : exe.profileScope().empty()
                                ? " over the run"
                                : " over " + exe.profileScope();
  std::printf("kernel time%s (%s):\n", scope.c_str(),
              exe.device().timesOnDevice()
                  ? "device time between events around each kernel"
                  : "each kernel run to its end");
  std::vector<std::pair<double, std::string>> rows;
  for (const auto &[name, p] : exe.profile())
    rows.push_back({p.seconds, name});
  std::sort(rows.rbegin(), rows.rend());
  for (const auto &[seconds, name] : rows)
    std::printf("  %-20s %8.3f ms  %6" PRId64 " calls\n", name.c_str(),
                1e3 * seconds / runs, exe.profile().at(name).calls);
}

int runTraining(const Options &opts, const format::Program &program,
                Executable &exe, int64_t dataBytes) {
  if (!opts.trainFlag.empty() && opts.inferenceFlags)
    return fail(invalidArgument(
        opts.trainFlag, " trains; --input, --function, --output-dir, --print "
        "and --repeat run one function instead, and do not combine with it"));
  if (opts.trainFlag.empty())
    return fail(invalidArgument(
        "this is a training program: train it with --data FILE --steps N (or "
        "--batches DIR --steps N), or run one function with --function NAME "
        "--input NAME=FILE.pb (see --help)"));
  if (!exe.hasInitialValues() && opts.train.resumeDir.empty() && isRoot())
    std::fprintf(stderr, "warning: the program was compiled without weights; "
                         "variables start at zero\n");
  exe.setProfiling(opts.profile);
  exe.setTracing(!opts.tracePath.empty());
  TrainerOptions train = opts.train;
  train.progress = supervisorProgress(activeWorld ? activeWorld->rank() : 0);
  if (!isRoot()) {
    train.log = nullptr;         // the log lines come from rank 0
    train.dumpOutputsDir.clear(); // and so do the dumped outputs
  }
  auto trainer = Trainer::create(program, exe, train);
  if (!trainer.isOk())
    return fail(trainer.status());
  Status s = trainer.value()->run();
  if (!s.isOk())
    return fail(s);
  if (!opts.tracePath.empty())
    if (Status t = writeTrace(exe, opts.tracePath); !t.isOk())
      return fail(t);
  if (!isRoot()) {
    printRankSummary(exe, program);
    printResident(exe, dataBytes);
    return 0;
  }
  if (opts.stats)
    printStats(exe);
  if (opts.profile)
    printProfile(exe, 1);
  printRankSummary(exe, program);
  printResident(exe, dataBytes);
  return 0;
}

} // namespace

/// --supervise: this process starts and watches the ranks (Supervisor.h).
int superviseMain(int argc, char **argv) {
  std::string self = selfPath();
  auto parsed = parseSupervisorFlags(argc, argv, self);
  if (!parsed.isOk())
    return fail(parsed.status().withContext("--supervise"));
  // The ranks' program: this executable's, or --program's on the bare runner.
  std::string programPath = self;
  const std::vector<std::string> &args = parsed.value().rankArgs;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--program" && i + 1 < args.size())
      programPath = args[i + 1];
    else if (args[i].rfind("--program=", 0) == 0)
      programPath = args[i].substr(10);
  }
  if (programPath == self && !LoadedProgram::hasProgram(self))
    return fail(invalidArgument(
        "--supervise: no program in this executable: it is the bare dtcc "
        "runner (pass --program FILE)"));
  auto loaded = LoadedProgram::open(programPath);
  if (!loaded.isOk())
    return fail(loaded.status());
  const format::Program &program = loaded.value()->program();
  if (!isTrainingProgram(program))
    return fail(invalidArgument("--supervise runs training programs "
                                "(compiled with `dtcc compile --train`)"));
  int64_t ranks = 1;
  if (program.has_mesh())
    for (int64_t n : program.mesh().sizes())
      ranks *= n;
  return runSupervisor(parsed.value(), static_cast<int>(ranks));
}

int runnerMain(int argc, char **argv) {
  startupPeakRss() = processPeakRss();
  if (wantsSupervisor(argc, argv))
    return superviseMain(argc, argv);
  auto parsed = parseFlags(argc, argv);
  if (!parsed.isOk())
    return fail(parsed.status());
  Options opts = std::move(parsed.value());

  std::string programPath = opts.program;
  std::string self = selfPath();
  if (programPath.empty()) {
    if (!LoadedProgram::hasProgram(self)) {
      if (opts.help) {
        printHelp(argv[0], nullptr, true);
        return 0;
      }
      return fail(invalidArgument(
          "no program in this executable: it is the bare dtcc runner (pass "
          "--program FILE), or a compiled program whose end was cut off"));
    }
    programPath = self;
  }
  auto loaded = LoadedProgram::open(programPath);
  if (!loaded.isOk())
    return fail(loaded.status());
  const format::Program &program = loaded.value()->program();
  const bool training = isTrainingProgram(program);
  // Help comes from the program alone: no ranks, no device (a CUDA program's
  // help works on a machine without a GPU).
  if (opts.help) {
    printHelp(argv[0], &program, training);
    if (program.has_mesh()) {
      int64_t ranks = 1;
      for (int64_t n : program.mesh().sizes())
        ranks *= n;
      std::printf("\nthis program runs on a device mesh of %lld ranks: start "
                  "it with mpirun -np %lld, srun -n %lld or torchrun-style "
                  "variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)\n",
                  (long long)ranks, (long long)ranks, (long long)ranks);
    }
    return 0;
  }

  // A program compiled for a mesh: join the job and build the mesh's
  // communicators before loading (its collective kernels bind to them).
  // Declared before the executable, so destroyed after it.
  std::unique_ptr<World> world;
  MeshComms mesh;
  std::unique_ptr<CommContext> comm;
  if (program.has_mesh()) {
    std::vector<std::string> axes(program.mesh().axes().begin(),
                                  program.mesh().axes().end());
    std::vector<int64_t> sizes(program.mesh().sizes().begin(),
                               program.mesh().sizes().end());
    auto started = World::init();
    if (!started.isOk())
      return fail(started.status().withContext("starting the ranks"));
    world = std::move(started.value());
    if (opts.collectiveTimeout > 0)
      world->queue().setTimeout(opts.collectiveTimeout);
    auto comms = createMeshComms(*world, axes, sizes);
    if (!comms.isOk()) {
      // A mesh that does not fit the job is found alike on every rank,
      // before any communication: rank 0 says so and all exit normally.
      if (comms.status().code() == StatusCode::kInvalidArgument) {
        if (world->rank() == 0)
          std::fprintf(stderr, "error: %s\n",
                       comms.status().message().c_str());
        return 1;
      }
      ActiveWorldScope scope(world.get());
      return fail(comms.status());
    }
    mesh = std::move(comms.value());
    comm = std::make_unique<CommContext>(mesh, world->queue());
  }
  ActiveWorldScope scope(world.get());
  residentPhases.communicators = processPeakRss();

  // The device: metadata "dtcc.target" (dtcc compile --target) says which.
  std::unique_ptr<Device> device;
  auto target = program.metadata().find(metadata::kTarget);
  if (target != program.metadata().end() && target->second == "cuda") {
#if DTCC_HAVE_CUDA
    LaunchInfo launch = world ? world->launch() : LaunchInfo();
    if (!world) {
      auto detected = detectLaunch();
      if (detected.isOk())
        launch = detected.value();
    }
    // Among the GPUs this process sees (cuda::chooseCudaDevice).
    auto gpu = cuda::CudaDevice::create(launch.localRank, launch.localSize);
    if (!gpu.isOk())
      return fail(gpu.status());
    if (program.has_mesh()) {
      Status attached = gpu.value()->attachMesh(mesh, *world,
                                                world->queue().timeout());
      if (!attached.isOk())
        return fail(attached.withContext("creating the NCCL communicators"));
    }
    device = std::move(gpu.value());
#else
    return fail(unimplemented(
        "this program was compiled for --target cuda, but this runner was "
        "built without the CUDA backend (no CUDA toolkit when dtcc was "
        "built); rebuild dtcc where the toolkit is installed, or compile "
        "with --target cpu"));
#endif
  } else if (target != program.metadata().end() && target->second != "cpu") {
    return fail(invalidArgument("unknown target '", target->second,
                                "' in the program (expected cpu or cuda)"));
  } else {
    device = createCpuDevice();
    if (!world || world->rank() == 0) {
      std::fputs(cpu::narrowBlasCoreNote(std::getenv("OPENBLAS_CORETYPE"),
                                         cpu::hostVectorIsa())
                     .c_str(),
                 stderr);
      auto dtype = program.metadata().find(metadata::kDtype);
      if (dtype != program.metadata().end())
        std::fputs(cpu::halfProductsNote(dtype->second).c_str(), stderr);
    }
  }
  auto created =
      Executable::create(program, loaded.value()->data(),
                         loaded.value()->dataSize(), *device, comm.get());
  if (!created.isOk())
    return fail(created.status().withContext("loading the program"));
  Executable &exe = *created.value();
  if (opts.randomInit) {
    if (exe.hasInitialValues())
      return fail(invalidArgument("--random-init: the program holds its "
                                  "weights (it is for programs compiled "
                                  "without them, e.g. dtcc zoo --no-weights)"));
    // GPT-2's initialisation scale; for timing and smoke runs.
    if (Status s = exe.randomizeVariablesWithoutData(*opts.randomInit, 0.02);
        !s.isOk())
      return fail(s.withContext("--random-init"));
  }
  residentPhases.loaded = processPeakRss();
  activeDevice = device.get();
  if (Status order = exe.verifyCollectiveOrder(); !order.isOk())
    return fail(order.withContext("checking the ranks' collectives"));
  if (exe.comm()) {
    bytesBeforeRun = exe.comm()->mesh().bytesSent();
    transportBeforeRun = exe.comm()->mesh().transportBytes();
    headersBeforeRun = exe.comm()->mesh().transportHeaderBytes();
    ncclBeforeRun = std::max<int64_t>(0, ncclHandedBytes(device.get()));
  }
  if (!opts.trainFlag.empty() && !training)
    return fail(invalidArgument(opts.trainFlag, " needs a training program "
                                "(compiled with `dtcc compile --train`)"));
  if (training && (!opts.trainFlag.empty() || !opts.inferenceFlags))
    return runTraining(opts, program, exe, int64_t(loaded.value()->dataSize()));

  const Executable::Function *fn = exe.findFunction(opts.function);
  if (!fn)
    return fail(notFound("no function '", opts.function, "' in this program"));

  // Read every input; report all missing ones at once.
  std::vector<HostTensor> inputs;
  std::string missing;
  for (const IoBinding &b : fn->inputs)
    if (!opts.inputs.count(b.name))
      missing += strCat("\n  --input ", b.name, "=FILE.pb   (",
                        b.view.typeString(), ")");
  if (!missing.empty())
    return fail(invalidArgument("missing inputs:", missing));
  for (const auto &[name, file] : opts.inputs) {
    bool known = false;
    for (const IoBinding &b : fn->inputs)
      known |= b.name == name;
    if (!known)
      return fail(invalidArgument("function '", fn->name,
                                  "' has no input named '", name, "'"));
  }
  for (const IoBinding &b : fn->inputs) {
    auto t = readTensorFile(opts.inputs[b.name]);
    if (!t.isOk())
      return fail(t.status().withContext("input '" + b.name + "'"));
    inputs.push_back(std::move(t.value()));
  }
  std::vector<const HostTensor *> inputPtrs;
  for (const HostTensor &t : inputs)
    inputPtrs.push_back(&t);

  if (!exe.hasInitialValues() && isRoot())
    std::fprintf(stderr, "warning: the program was compiled without weights; "
                         "variables start at zero\n");
  exe.setTracing(!opts.tracePath.empty());
  exe.setProfiling(opts.profile);
  std::vector<HostTensor> outputs;
  auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < opts.repeat; ++r) {
    Status s = exe.run(*fn, inputPtrs, &outputs);
    if (!s.isOk())
      return fail(s);
  }
  std::chrono::duration<double> elapsed =
      std::chrono::steady_clock::now() - start;

  // Rank 0 writes and prints the outputs (every rank has its own shards of
  // them; a program that needs others' gathers them first).
  if (!isRoot()) {
    printRankSummary(exe, program);
    return 0;
  }
  if (!opts.outputDir.empty()) {
    mkdir(opts.outputDir.c_str(), 0755);
    for (size_t i = 0; i < outputs.size(); ++i) {
      const std::string &name = fn->outputs[i].name;
      Status s =
          writeTensorFile(opts.outputDir + "/" + tensorFileName(name) + ".pb",
                          name, outputs[i]);
      if (!s.isOk())
        return fail(s);
    }
  }
  if (opts.print)
    for (size_t i = 0; i < outputs.size(); ++i)
      printTensor(fn->outputs[i].name, outputs[i]);
  if (opts.repeat > 1 || opts.profile)
    std::printf("time: %.3f ms per run (%d runs)\n",
                1e3 * elapsed.count() / opts.repeat, opts.repeat);
  if (opts.stats)
    printStats(exe);
  if (opts.profile)
    printProfile(exe, opts.repeat);
  if (!opts.tracePath.empty())
    if (Status t = writeTrace(exe, opts.tracePath); !t.isOk())
      return fail(t);
  printRankSummary(exe, program);
  return 0;
}

} // namespace dtcc::runtime
