//===- ImportFuzzer.cpp - libFuzzer target for the ONNX importer -----------===//
//
// Feeds arbitrary bytes to the importer (binary ONNX for dtcc-fuzz-onnx,
// ONNX text for dtcc-fuzz-onnxtext) and, when the import succeeds, through
// folding, lowering and serialization; a program it emits must then load
// into the runtime, and small ones run. A crash, a sanitizer report, an
// abort, an internal error or a program the runtime refuses is a bug: bad
// input must end in a diagnostic.
//
//===----------------------------------------------------------------------===//

#include "tests/fuzz/FuzzSupport.h"

#include "frontends/onnx/OnnxImporter.h"

#include <cstdint>
#include <string>

using namespace dtcc;

#ifdef DTCC_FUZZ_ONNX_TEXT
static const char *const kTarget = "onnxtext";
#else
static const char *const kTarget = "onnx";
#endif

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  fuzz::initialize(kTarget);
#ifdef DTCC_FUZZ_ONNX_TEXT
  const std::vector<std::string> &models = fuzz::textModels();
  for (size_t k = 0; k < models.size(); ++k)
    fuzz::writeSeed("graph" + std::to_string(k) + ".onnxtext", models[k]);
#else
  fuzz::writeSeed("gpt.onnx", fuzz::zooModel("gpt"));
  fuzz::writeSeed("mlp.onnx", fuzz::zooModel("mlp"));
#endif
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string bytes(reinterpret_cast<const char *>(data), size);
#ifdef DTCC_FUZZ_ONNX_TEXT
  // The text parser only: binary inputs are dtcc-fuzz-onnx's.
  size_t first = bytes.find_first_not_of(" \t\r\n");
  if (first == std::string::npos || (bytes[first] != '<' && bytes[first] != '#'))
    return 0;
#endif
  fuzz::FuzzContext context;
  onnx_frontend::ImportOptions options;
  // External data stays inside the scratch directory, which holds none.
  auto module = onnx_frontend::importOnnxBytes(
      bytes, "fuzz.onnx", fuzz::scratchDir(), &context.get(), options);
  if (mlir::failed(module))
    return 0;
  CompileOptions compile;
  compile.compileTo = Phase::Exec;
  if (mlir::failed(runPhases(**module, compile)))
    return 0;
  fuzz::checkLoadsAndRuns(**module, int64_t(16) << 20);
  return 0;
}
