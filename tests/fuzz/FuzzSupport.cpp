//===- FuzzSupport.cpp - what every dtcc fuzz target shares ---------------===//

#include "tests/fuzz/FuzzSupport.h"

#include "compiler/Serialize.h"
#include "frontends/onnx/OnnxImporter.h"
#include "frontends/zoo/Zoo.h"
#include "runtime/device/Device.h"
#include "runtime/exec/Executable.h"
#include "runtime/format/Container.h"

#include "mlir/IR/Diagnostics.h"

#include "onnx/onnx_pb.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <map>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

// Why allow_user_poisoning=0. In the fuzz build dtcc's code is compiled with
// AddressSanitizer, while MLIR and LLVM come as Debian's static libraries
// (libMLIRIR.a, ...), compiled without it, and are linked into the same
// executable. LLVM's headers behave differently under ASan
// (LLVM_ADDRESS_SANITIZER_BUILD in llvm/Support/Compiler.h): BumpPtrAllocator
// poisons each new slab in its out-of-line AllocateSlow/StartNewSlab and
// unpoisons every allocation in the inline Allocate. Those member functions
// are inline (linkonce_odr), so the linker keeps one copy of each for the
// whole program, here dtcc's instrumented one, while MLIR's objects keep
// their own uninstrumented inlined fast path. In MLIRContext's constructor
// (BuiltinDialect::initialize -> Dialect::addType, in libMLIRIR.a) the first
// AbstractType of a slab comes from the instrumented AllocateSlow, which
// poisons the slab and unpoisons that one object; the next ones come from
// the uninstrumented fast path, which unpoisons nothing, and the memcpy into
// the second one is reported as use-after-poison (ASan: "184 bytes inside of
// 4096-byte region allocated by ... llvm::allocate_buffer ... in
// mlir::Dialect::addType"). The same header-level poisoning is in Recycler.h,
// ArrayRecycler.h and FunctionExtras.h. This manual poisoning cannot be
// right with one side uninstrumented, so it is switched off; ASan's own
// checks (heap, stack and global redzones, use after free) are unaffected.
//
// allocator_may_return_null=1: an allocation the system cannot satisfy
// returns null as it does without ASan, so the runtime's "out of host
// memory" errors are what the fuzzers see.
extern "C" const char *__asan_default_options() {
  return "allow_user_poisoning=0:allocator_may_return_null=1";
}

namespace dtcc::fuzz {

namespace {
int reportFd = 2;
std::string targetName = "fuzz";
std::string scratch;

void cleanupScratch() {
  if (!scratch.empty())
    removeTree(scratch);
}
} // namespace

const char *const kPartSeparator = "\n==== dtcc-fuzz-file ====\n";

void initialize(const char *target) {
  targetName = target;
  int fd = dup(2);
  if (fd >= 0)
    reportFd = fd;
  const char *tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/dtcc-" +
                        target + "-XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (!mkdtemp(buffer.data())) {
    std::perror("dtcc fuzz: mkdtemp");
    std::abort();
  }
  scratch = buffer.data();
  std::atexit(cleanupScratch);
}

void note(const std::string &line) {
  std::string text = "dtcc-fuzz-" + targetName + ": " + line + "\n";
  ssize_t ignored = write(reportFd, text.data(), text.size());
  (void)ignored;
}

void finding(const std::string &what) {
  note("FINDING: " + what);
  std::abort();
}

const std::string &scratchDir() { return scratch; }

static void makeParents(const std::string &path) {
  for (size_t slash = path.find('/', 1); slash != std::string::npos;
       slash = path.find('/', slash + 1))
    mkdir(path.substr(0, slash).c_str(), 0755);
}

void writeFile(const std::string &path, std::string_view bytes) {
  makeParents(path);
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f)
    finding("cannot write scratch file '" + path + "': " + std::strerror(errno));
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size())
    finding("cannot write scratch file '" + path + "'");
  std::fclose(f);
}

bool writeInputFile(const std::string &dir, std::string_view name,
                    std::string_view bytes) {
  size_t slash = name.find('/');
  if (name.empty() || name.size() > 64 || name[0] == '.' || name[0] == '/' ||
      name.back() == '/' || name.find("/.") != std::string_view::npos ||
      (slash != std::string_view::npos &&
       name.find('/', slash + 1) != std::string_view::npos))
    return false;
  for (char c : name)
    if (static_cast<unsigned char>(c) < 0x20 || c == '\\')
      return false;
  mkdir(dir.c_str(), 0755);
  std::string path = dir + "/" + std::string(name);
  if (slash != std::string_view::npos)
    mkdir((dir + "/" + std::string(name.substr(0, slash))).c_str(), 0755);
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f)
    return false;
  bool ok = bytes.empty() ||
            std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return std::fclose(f) == 0 && ok;
}

void writeInputFiles(const std::string &dir, std::string_view data) {
  removeTree(dir);
  mkdir(dir.c_str(), 0755);
  for (std::string_view part : splitParts(data)) {
    size_t newline = part.find('\n');
    if (newline != std::string_view::npos)
      writeInputFile(dir, part.substr(0, newline), part.substr(newline + 1));
  }
}

std::string readFile(const std::string &path) {
  std::string out;
  FILE *f = std::fopen(path.c_str(), "rb");
  if (!f)
    return out;
  char buffer[65536];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, f)) > 0)
    out.append(buffer, n);
  std::fclose(f);
  return out;
}

void removeTree(const std::string &path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0)
    return;
  if (S_ISDIR(st.st_mode)) {
    if (DIR *d = opendir(path.c_str())) {
      std::vector<std::string> names;
      while (dirent *e = readdir(d))
        if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, ".."))
          names.push_back(e->d_name);
      closedir(d);
      for (const std::string &name : names)
        removeTree(path + "/" + name);
    }
    rmdir(path.c_str());
  } else {
    unlink(path.c_str());
  }
}

std::vector<std::string_view> splitParts(std::string_view data) {
  std::vector<std::string_view> parts;
  const std::string_view sep(kPartSeparator);
  while (true) {
    size_t at = data.find(sep);
    if (at == std::string_view::npos) {
      parts.push_back(data);
      return parts;
    }
    parts.push_back(data.substr(0, at));
    data.remove_prefix(at + sep.size());
  }
}

std::string joinParts(const std::vector<std::string> &parts) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i)
    out += (i ? kPartSeparator : "") + parts[i];
  return out;
}

std::string seedsDir() {
  const char *dir = std::getenv("DTCC_FUZZ_SEEDS");
  if (!dir || !*dir)
    return "";
  mkdir(dir, 0755);
  return dir;
}

void writeSeed(const std::string &name, std::string_view bytes) {
  std::string dir = seedsDir();
  if (!dir.empty())
    writeFile(dir + "/" + targetName + "-" + name, bytes);
}

//===----------------------------------------------------------------------===//
// MLIR
//===----------------------------------------------------------------------===//

FuzzContext::FuzzContext() {
  mlir::DialectRegistry registry;
  registerDtccDialects(registry);
  context_ = std::make_unique<mlir::MLIRContext>(
      registry, mlir::MLIRContext::Threading::DISABLED);
  context_->loadAllAvailableDialects();
  handler_ = context_->getDiagEngine().registerHandler(
      [this](mlir::Diagnostic &diag) {
        if (diag.getSeverity() != mlir::DiagnosticSeverity::Error)
          return mlir::success();
        std::string text;
        llvm::raw_string_ostream os(text);
        os << diag.getLocation() << ": " << diag;
        for (const mlir::Diagnostic &n : diag.getNotes())
          os << "\n  note: " << n;
        // A pass that produced invalid IR ("dtcc: internal error: pass 'X'
        // produced invalid IR: ...", compiler/InternalErrors.h): the
        // compiler's bug, whatever the input. Only at the message's start:
        // other errors may quote the input, which may say anything.
        std::string message = diag.str();
        size_t colon = message.find(':');
        if (colon != std::string::npos &&
            message.compare(colon, 18, ": internal error: ") == 0 &&
            message.find(' ') > colon)
          finding(text);
        errors_ += text + "\n";
        return mlir::success();
      });
}

FuzzContext::~FuzzContext() { context_->getDiagEngine().eraseHandler(handler_); }

void compileFixture(const std::string &onnxBytes, CompileOptions options,
                    const std::string &path) {
  FuzzContext context;
  onnx_frontend::ImportOptions import;
  import.training = options.train.enabled;
  auto module = onnx_frontend::importOnnxBytes(onnxBytes, "fixture.onnx", ".",
                                               &context.get(), import);
  if (failed(module))
    finding("the fixture does not import:\n" + context.errors());
  options.compileTo = Phase::Exec;
  if (failed(runPhases(**module, options)))
    finding("the fixture does not compile:\n" + context.errors());
  auto serialized = serializeProgram(**module);
  if (failed(serialized))
    finding("the fixture does not serialize:\n" + context.errors());
  runtime::Status s = runtime::writeContainer(path, "", serialized->program,
                                              serialized->data);
  if (!s.isOk())
    finding("cannot write the fixture: " + s.toString());
}

std::string zooModel(const std::string &family) {
  zoo::ZooOptions o;
  if (family == "gpt") {
    o.family = zoo::Family::Gpt;
    o.layers = 1;
    o.hidden = 8;
    o.heads = 2;
    o.vocab = 16;
    o.seq = 4;
    o.batch = 2;
  } else {
    o.family = zoo::Family::Mlp;
    o.layers = 1;
    o.hidden = 8;
    o.inputs = 4;
    o.classes = 3;
    o.batch = 2;
  }
  std::string problem = zoo::validate(o);
  if (!problem.empty())
    finding("zoo options: " + problem);
  return zoo::buildModel(o).SerializeAsString();
}

const std::string &trainingFixture(const std::string &family) {
  static std::map<std::string, std::string> paths;
  auto it = paths.find(family);
  if (it != paths.end())
    return it->second;
  CompileOptions options;
  options.train.enabled = true;
  options.train.optimizer = "sgd";
  options.train.lr = 0.1;
  std::string path = scratchDir() + "/fixture-" + family + ".program";
  compileFixture(zooModel(family), options, path);
  return paths[family] = path;
}

std::string tensorFileBytes(const std::string &name, int32_t dtype,
                            const std::vector<int64_t> &shape,
                            const std::vector<double> &values) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(dtype);
  int64_t n = 1;
  for (int64_t d : shape) {
    t.add_dims(d);
    n *= d;
  }
  std::string raw;
  for (int64_t i = 0; i < n; ++i) {
    double v = values.empty() ? 0.0 : values[i % values.size()];
    auto append = [&](auto x) {
      raw.append(reinterpret_cast<const char *>(&x), sizeof x);
    };
    switch (static_cast<runtime::DType>(dtype)) {
    case runtime::DType::kF32: append(static_cast<float>(v)); break;
    case runtime::DType::kF64: append(v); break;
    case runtime::DType::kI32: append(static_cast<int32_t>(v)); break;
    case runtime::DType::kI64: append(static_cast<int64_t>(v)); break;
    default: finding("tensorFileBytes: unsupported dtype " + std::to_string(dtype));
    }
  }
  t.set_raw_data(raw);
  return t.SerializeAsString();
}

const std::vector<std::string> &textModels() {
  static const std::vector<std::string> models = {
    // A Linear on a transposed activation (a 2-D x 3-D matmul backward).
    R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[2,3,4] X) => (float L) <float[3,2] W = {1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, float[4] S = {1.0, 0.5, 2.0, 1.5}> {
  XS = Mul(X, S)
  T = Transpose <perm = [0, 2, 1]> (XS)
  Y = MatMul(T, W)
  L = ReduceSum <keepdims = 0> (Y)
}
)",
    // Convolution, batch norm, pooling and a softmax cross-entropy.
    R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[2,1,4,4] X, int64[2] T) => (float L) <float[2,1,3,3] W = {0.1, -0.2, 0.3, 0.1, 0.2, -0.1, 0.0, 0.1, 0.2, -0.3, 0.1, 0.2, 0.1, 0.0, -0.1, 0.2, 0.1, 0.3}, float[2] B = {0.0, 0.1}, float[2] G = {1.0, 1.0}, float[2] Bb = {0.0, 0.0}, float[2] M = {0.0, 0.0}, float[2] V = {1.0, 1.0}, float[2,3] F = {0.1, 0.2, 0.3, -0.1, -0.2, -0.3}> {
  C = Conv <pads = [1, 1, 1, 1]> (X, W, B)
  N, Nm, Nv = BatchNormalization <training_mode = 1> (C, G, Bb, M, V)
  R = Relu(N)
  P = GlobalAveragePool(R)
  Q = Flatten(P)
  Z = MatMul(Q, F)
  L = SoftmaxCrossEntropyLoss(Z, T)
}
)",
    // Layer norm, attention-like matmuls, gather and a mean loss.
    R"(<ir_version: 8, opset_import: ["" : 17]>
g (int64[2,3] I) => (float L) <float[5,4] E = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, -0.1, -0.2, -0.3, -0.4, -0.5, -0.6, -0.7, -0.8, -0.9, -1.0}, float[4] G = {1.0, 1.0, 1.0, 1.0}, float[4] B = {0.0, 0.0, 0.0, 0.0}, float[4,4] Wq = {1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0}> {
  X = Gather <axis = 0> (E, I)
  N = LayerNormalization <axis = -1> (X, G, B)
  Q = MatMul(N, Wq)
  K = Transpose <perm = [0, 2, 1]> (N)
  S = MatMul(Q, K)
  A = Softmax <axis = -1> (S)
  O = MatMul(A, N)
  T = Tanh(O)
  L = ReduceMean <keepdims = 0> (T)
}
)",
};
  return models;
}

std::string containerBytes(mlir::ModuleOp module) {
  auto serialized = serializeProgram(module);
  if (failed(serialized))
    return "";
  std::string path = scratchDir() + "/seed.program";
  if (!runtime::writeContainer(path, "", serialized->program, serialized->data)
           .isOk())
    return "";
  std::string bytes = readFile(path);
  unlink(path.c_str());
  return bytes;
}

runtime::Status loadAndRun(const runtime::format::Program &program,
                           const uint8_t *data, uint64_t dataSize,
                           int64_t runLimitBytes) {
  int64_t arenas[] = {program.workspace_bytes(), program.state_bytes(),
                      program.constant_bytes()};
  int64_t total = 0;
  for (int64_t a : arenas) {
    if (a < 0 || a > runLimitBytes)
      return runtime::Status::ok();
    total += a;
  }
  if (total > runLimitBytes)
    return runtime::Status::ok();
  std::unique_ptr<runtime::Device> device = runtime::createCpuDevice();
  auto exe = runtime::Executable::create(program, data, dataSize, *device);
  if (!exe.isOk())
    return exe.status();
  if (program.has_mesh())
    return runtime::Status::ok(); // its collectives need the other ranks
  for (const std::string &name : exe.value()->functionNames()) {
    const runtime::Executable::Function *fn = exe.value()->findFunction(name);
    std::vector<runtime::HostTensor> inputs;
    for (const runtime::IoBinding &b : fn->inputs)
      inputs.emplace_back(b.view.dtype, b.view.shape);
    std::vector<const runtime::HostTensor *> pointers;
    for (const runtime::HostTensor &t : inputs)
      pointers.push_back(&t);
    std::vector<runtime::HostTensor> outputs;
    (void)exe.value()->run(*fn, pointers, &outputs);
  }
  return runtime::Status::ok();
}

void checkLoadsAndRuns(mlir::ModuleOp module, int64_t runLimitBytes) {
  auto serialized = serializeProgram(module);
  // The serializer reports what it cannot encode (a diagnostic, not a crash).
  if (failed(serialized))
    return;
  if (serialized->program.has_mesh())
    return; // loading binds its collectives to the other ranks
  runtime::Status s = loadAndRun(
      serialized->program,
      reinterpret_cast<const uint8_t *>(serialized->data.data()),
      serialized->data.size(), runLimitBytes);
  if (!s.isOk())
    finding("the runtime refuses a program the compiler emitted: " +
            s.toString());
}

int callMain(int (*mainFn)(int, char **), const std::vector<std::string> &args,
             std::initializer_list<int> documented) {
  std::vector<std::string> copies(args);
  std::vector<char *> argv;
  for (std::string &a : copies)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  int code = mainFn(static_cast<int>(copies.size()), argv.data());
  std::fflush(stdout);
  bool expected = code == 0 || code == 1;
  for (int d : documented)
    expected |= code == d;
  if (!expected) {
    std::string line;
    for (const std::string &a : args)
      line += " " + a;
    finding("exit status " + std::to_string(code) + " from" + line);
  }
  return code;
}

} // namespace dtcc::fuzz
