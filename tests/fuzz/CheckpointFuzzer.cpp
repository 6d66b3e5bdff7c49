//===- CheckpointFuzzer.cpp - libFuzzer target for checkpoint restore -----===//
//
// dtcc-fuzz-checkpoint: an input is a checkpoint directory, written as
// files separated by kPartSeparator, each "NAME\n" followed by its bytes
// (checkpoint.json, the manifest, and the variables' tensor blocks). The
// runner resumes the zoo MLP's training program from it for one more step
// (`--resume DIR --batches B --steps 2`). Seeds: the checkpoint that program
// saves after one step, and variants of it.
//
//===----------------------------------------------------------------------===//

#include "tests/fuzz/FuzzSupport.h"

#include "runtime/exec/Runner.h"

#include <algorithm>
#include <cstdint>
#include <dirent.h>
#include <string>

using namespace dtcc;

namespace {

std::string batchesDir;

/// Two steps of inputs for the zoo MLP: x [2, 4] f32, labels [2] i64.
void writeBatches(const std::string &dir) {
  for (const char *step : {"0", "1"}) {
    fuzz::writeFile(dir + "/" + step + "/x.pb",
                    fuzz::tensorFileBytes("x", 1, {2, 4}, {0.5, -1.0, 2.0}));
    fuzz::writeFile(dir + "/" + step + "/labels.pb",
                    fuzz::tensorFileBytes("labels", 7, {2}, {1, 2}));
  }
}

std::vector<std::string> listFiles(const std::string &dir) {
  std::vector<std::string> names;
  if (DIR *d = opendir(dir.c_str())) {
    while (dirent *e = readdir(d))
      if (e->d_name[0] != '.')
        names.push_back(e->d_name);
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  fuzz::initialize("checkpoint");
  const std::string &program = fuzz::trainingFixture("mlp");
  batchesDir = fuzz::scratchDir() + "/batches";
  writeBatches(batchesDir);
  if (fuzz::seedsDir().empty())
    return 0;
  // The checkpoint of one step, saved by the runner itself.
  std::string saved = fuzz::scratchDir() + "/saved";
  if (fuzz::callMain(runtime::runnerMain,
                     {"dtcc-runner", "--program", program, "--batches",
                      batchesDir, "--steps", "1", "--save", saved}) != 0)
    fuzz::finding("the fixture does not train one step");
  std::vector<std::string> parts;
  for (const std::string &name : listFiles(saved))
    parts.push_back(name + "\n" + fuzz::readFile(saved + "/" + name));
  if (parts.empty())
    fuzz::finding("the fixture saved no checkpoint");
  fuzz::writeSeed("saved", fuzz::joinParts(parts));
  // The manifest alone, and without its last file.
  fuzz::writeSeed("manifest-only", "checkpoint.json\n" +
                                       fuzz::readFile(saved + "/checkpoint.json"));
  parts.pop_back();
  fuzz::writeSeed("one-file-missing", fuzz::joinParts(parts));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string dir = fuzz::scratchDir() + "/checkpoint";
  fuzz::writeInputFiles(
      dir, std::string_view(reinterpret_cast<const char *>(data), size));
  fuzz::callMain(runtime::runnerMain,
                 {"dtcc-runner", "--program", fuzz::trainingFixture("mlp"),
                  "--batches", batchesDir, "--steps", "2", "--resume", dir,
                  "--log-every", "1"});
  return 0;
}
