//===- DataFuzzer.cpp - libFuzzer target for training data readers --------===//
//
// dtcc-fuzz-data: the first byte of an input chooses the reader.
// - Even: a token file (`--data`; uint16 when byte & 2 is clear, else
//   uint32) for the zoo GPT's training program, trained two steps with the
//   seed byte >> 2.
// - Odd: a `--batches` directory for the zoo MLP's training program, as
//   files separated by kPartSeparator, each "STEP/NAME.pb\n" followed by a
//   TensorProto; trained two steps.
// Seeds: valid token files of both types, and valid batch folders.
//
//===----------------------------------------------------------------------===//

#include "tests/fuzz/FuzzSupport.h"

#include "runtime/exec/Runner.h"

#include <cstdint>
#include <string>

using namespace dtcc;

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  fuzz::initialize("data");
  fuzz::trainingFixture("gpt");
  fuzz::trainingFixture("mlp");
  if (fuzz::seedsDir().empty())
    return 0;
  // Tokens below the vocabulary (16), long enough for a sequence of 4.
  std::string u16, u32;
  for (uint32_t i = 0; i < 40; ++i) {
    uint16_t a = (i * 7) % 16;
    uint32_t b = (i * 5) % 16;
    u16.append(reinterpret_cast<const char *>(&a), 2);
    u32.append(reinterpret_cast<const char *>(&b), 4);
  }
  fuzz::writeSeed("tokens-u16", std::string(1, '\x00') + u16);
  fuzz::writeSeed("tokens-u32", std::string(1, '\x06') + u32);
  std::vector<std::string> parts;
  for (const char *step : {"0", "1"}) {
    parts.push_back(std::string(step) + "/x.pb\n" +
                    fuzz::tensorFileBytes("x", 1, {2, 4}, {0.5, -1.0, 2.0}));
    parts.push_back(std::string(step) + "/labels.pb\n" +
                    fuzz::tensorFileBytes("labels", 7, {2}, {1, 2}));
  }
  fuzz::writeSeed("batches", std::string(1, '\x01') + fuzz::joinParts(parts));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  uint8_t mode = data[0];
  std::string_view rest(reinterpret_cast<const char *>(data + 1), size - 1);
  if (mode % 2 == 0) {
    std::string path = fuzz::scratchDir() + "/tokens.bin";
    fuzz::writeFile(path, rest);
    fuzz::callMain(runtime::runnerMain,
                   {"dtcc-runner", "--program", fuzz::trainingFixture("gpt"),
                    "--data", path, "--data-dtype",
                    mode & 2 ? "uint32" : "uint16", "--steps", "2", "--seed",
                    std::to_string(mode >> 2)});
    return 0;
  }
  std::string dir = fuzz::scratchDir() + "/batches";
  fuzz::writeInputFiles(dir, rest);
  fuzz::callMain(runtime::runnerMain,
                 {"dtcc-runner", "--program", fuzz::trainingFixture("mlp"),
                  "--batches", dir, "--steps", "2"});
  return 0;
}
