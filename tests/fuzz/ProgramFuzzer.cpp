//===- ProgramFuzzer.cpp - libFuzzer target for the program loader -------===//
//
// dtcc-fuzz-program: an input is a program file (runtime/format/Container.h:
// the program, its data section and the trailer). It is handed to the
// runner as is (`--program FILE --help`, a plain run, two training steps on
// a token file), which exercises the trailer's checks against truncated and
// corrupted files; when its checksum is what stops it, the checksum is
// recomputed and the runner and the loader get the program itself: buffers,
// arenas, variables, constants, every kernel's checks of its instruction,
// the trainer's reading of the program's metadata and inputs, and small
// programs run once on zero inputs. Seeds: programs compiled at start-up
// (inference and training, single device and mesh).
//
//===----------------------------------------------------------------------===//

#include "tests/fuzz/FuzzSupport.h"

#include "frontends/onnx/OnnxImporter.h"
#include "runtime/exec/Runner.h"
#include "runtime/format/Container.h"

#include <cstdint>
#include <cstring>
#include <string>

using namespace dtcc;

namespace {

constexpr size_t kTrailerSize = 48;

uint64_t fnv1a(const uint8_t *bytes, size_t size) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < size; ++i) {
    h ^= bytes[i];
    h *= 1099511628211ull;
  }
  return h;
}

/// Recomputes the trailer's program checksum when the trailer's program
/// range lies in the file; false when there is nothing to fix.
bool fixChecksum(std::string &bytes) {
  if (bytes.size() < kTrailerSize)
    return false;
  uint64_t fields[5];
  std::memcpy(fields, bytes.data() + bytes.size() - kTrailerSize + 8,
              sizeof fields);
  uint64_t end = bytes.size() - kTrailerSize;
  uint64_t offset = fields[0], size = fields[1];
  if (offset > end || size > end - offset)
    return false;
  uint64_t hash =
      fnv1a(reinterpret_cast<const uint8_t *>(bytes.data()) + offset, size);
  if (hash == fields[4])
    return false;
  std::memcpy(bytes.data() + bytes.size() - 8, &hash, 8);
  return true;
}

std::string tokensPath;

/// The runner on the program file: its help, a plain run, and two training
/// steps on a token file (training programs: the trainer reads the
/// program's metadata and token inputs).
void runRunner(const std::string &path) {
  fuzz::callMain(runtime::runnerMain,
                 {"dtcc-runner", "--program", path, "--help"});
  fuzz::callMain(runtime::runnerMain, {"dtcc-runner", "--program", path});
  fuzz::callMain(runtime::runnerMain, {"dtcc-runner", "--program", path,
                                       "--data", tokensPath, "--steps", "2"});
}

const char *const kModels[][2] = {
    {"mlp-relu", R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[2,4] X) => (float[2,3] Y) <float[4,3] W = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, -0.1, -0.2, -0.3, -0.4, -0.5, -0.6}, float[3] B = {0.0, 0.1, 0.2}> {
  M = MatMul(X, W)
  A = Add(M, B)
  Y = Relu(A)
}
)"},
    {"conv-pool", R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[1,1,4,4] X) => (float[1,2,2,2] Y, int64[3] S) <float[2,1,3,3] W = {0.1, -0.2, 0.3, 0.1, 0.2, -0.1, 0.0, 0.1, 0.2, -0.3, 0.1, 0.2, 0.1, 0.0, -0.1, 0.2, 0.1, 0.3}> {
  C = Conv <pads = [1, 1, 1, 1]> (X, W)
  Y = MaxPool <kernel_shape = [2, 2], strides = [2, 2]> (C)
  S = Shape <start = 1> (Y)
}
)"},
    {"softmax-gather", R"(<ir_version: 8, opset_import: ["" : 17]>
g (int64[2,3] I) => (float[2,3,4] Y) <float[5,4] E = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, -0.1, -0.2, -0.3, -0.4, -0.5, -0.6, -0.7, -0.8, -0.9, -1.0}> {
  X = Gather <axis = 0> (E, I)
  Y = Softmax <axis = -1> (X)
}
)"},
};

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  fuzz::initialize("program");
  // 64 uint16 tokens below 16 (the zoo GPT's vocabulary).
  std::string tokens;
  for (uint16_t i = 0; i < 64; ++i) {
    uint16_t t = (i * 7) % 16;
    tokens.append(reinterpret_cast<const char *>(&t), 2);
  }
  tokensPath = fuzz::scratchDir() + "/tokens.bin";
  fuzz::writeFile(tokensPath, tokens);
  if (fuzz::seedsDir().empty())
    return 0;
  for (const auto &model : kModels) {
    fuzz::FuzzContext context;
    onnx_frontend::ImportOptions import;
    auto module = onnx_frontend::importOnnxBytes(model[1], "seed.onnx", ".",
                                                 &context.get(), import);
    if (mlir::failed(module))
      fuzz::finding(std::string("seed model ") + model[0] +
                    " does not import:\n" + context.errors());
    CompileOptions options;
    options.compileTo = Phase::Exec;
    if (mlir::failed(runPhases(**module, options)))
      fuzz::finding(std::string("seed model ") + model[0] +
                    " does not compile:\n" + context.errors());
    fuzz::writeSeed(model[0], fuzz::containerBytes(**module));
  }
  fuzz::writeSeed("train-mlp", fuzz::readFile(fuzz::trainingFixture("mlp")));
  fuzz::writeSeed("train-gpt", fuzz::readFile(fuzz::trainingFixture("gpt")));
  // A training program on a mesh of two ranks (ZeRO-3: sharded variables).
  CompileOptions mesh;
  mesh.train.enabled = true;
  mesh.train.optimizer = "adamw";
  mesh.train.plan.mesh = runtime::MeshShape::parse("dp=2").value();
  mesh.train.plan.zero = 3;
  std::string path = fuzz::scratchDir() + "/seed-mesh.program";
  fuzz::compileFixture(fuzz::zooModel("mlp"), mesh, path);
  fuzz::writeSeed("train-mlp-dp2-zero3", fuzz::readFile(path));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string bytes(reinterpret_cast<const char *>(data), size);
  std::string path = fuzz::scratchDir() + "/input.program";
  fuzz::writeFile(path, bytes);
  runRunner(path);
  if (fixChecksum(bytes)) {
    fuzz::writeFile(path, bytes);
    runRunner(path);
  }
  auto loaded = runtime::LoadedProgram::open(path);
  if (loaded.isOk())
    (void)fuzz::loadAndRun(loaded.value()->program(), loaded.value()->data(),
                           loaded.value()->dataSize(), int64_t(16) << 20);
  return 0;
}
