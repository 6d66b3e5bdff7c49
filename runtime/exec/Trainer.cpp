//===- Trainer.cpp - the training loop of compiled programs ---------------===//

#include "runtime/exec/Trainer.h"

#include "runtime/base/Format.h"

#include "runtime/comm/CommContext.h"
#include "runtime/exec/Checkpoint.h"
#include "runtime/exec/TokenData.h"
#include "runtime/io/TensorFile.h"
#include "runtime/format/ProgramMetadata.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstring>
#include <dirent.h>
#include <map>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

namespace dtcc::runtime {

/// One input of train_step: its binding's type, and the host tensors that
/// feed it.
struct Trainer::Input {
  std::string name;
  DType dtype = DType::kInvalid;
  std::vector<int64_t> shape; ///< one micro-batch's (global on a mesh)
  HostTensor micro;           ///< the value of the current micro-batch
  HostTensor step;            ///< --batches: the whole step's value
  /// On a mesh: how the input is split, and this rank's block of `micro`,
  /// which is what the program reads.
  const format::Sharding *sharding = nullptr;
  HostTensor local;
};

namespace {

const char *const kTrainStep = "train_step";
const char *const kApplyStep = "apply_step";
const char *const kStepVariable = "__step";
const char *const kTotalStepsVariable = "__total_steps";

std::string metadataOf(const format::Program &program, const std::string &key) {
  auto it = program.metadata().find(key);
  return it == program.metadata().end() ? "" : it->second;
}

/// The model's name for logs and checkpoints: metadata dtcc.model or model.
std::string modelName(const format::Program &program) {
  std::string name = metadataOf(program, metadata::kModel);
  return name.empty() ? metadataOf(program, "model") : name;
}

std::vector<std::string> splitList(const std::string &list) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos)
      comma = list.size();
    std::string item = list.substr(start, comma - start);
    if (!item.empty())
      items.push_back(item);
    start = comma + 1;
  }
  return items;
}

StatusOr<int64_t> parsePositive(const std::string &what,
                                const std::string &text) {
  char *end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < 1)
    return invalidArgument(what, " must be a positive integer, got '", text,
                           "'");
  return static_cast<int64_t>(v);
}



std::string joinNames(const std::vector<std::string> &names) {
  std::string s;
  for (const std::string &n : names)
    s += (s.empty() ? "" : ", ") + n;
  return s;
}

/// The value of a one-element tensor of any numeric type.
StatusOr<double> scalarValue(const std::string &name, const HostTensor &t) {
  if (t.numel() != 1)
    return invalidArgument("output '", name, "' must be a scalar, got ",
                           t.typeString());
  switch (t.dtype) {
  case DType::kF16:
    return double(halfToFloat(t.data<uint16_t>()[0]));
  case DType::kBF16:
    return double(bf16ToFloat(t.data<uint16_t>()[0]));
  default:
    break;
  }
  double v = 0;
  Status s = dispatchNumeric(t.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    v = static_cast<double>(t.data<T>()[0]);
  });
  if (!s.isOk())
    return invalidArgument("output '", name, "' has unsupported type ",
                           t.typeString());
  return v;
}

bool isScalarType(const TensorView &v) { return v.numel() == 1; }

int findBinding(const std::vector<IoBinding> &bindings,
                const std::string &name) {
  for (size_t i = 0; i < bindings.size(); ++i)
    if (bindings[i].name == name)
      return static_cast<int>(i);
  return -1;
}

/// mkdir that accepts an existing directory.
Status makeDir(const std::string &path) {
  if (mkdir(path.c_str(), 0755) == 0 || errno == EEXIST)
    return Status::ok();
  return unavailable("cannot create directory '", path,
                     "': ", std::strerror(errno));
}

/// The entries of `dir` that are directories (or files), sorted by name.
StatusOr<std::vector<std::string>> listEntries(const std::string &dir,
                                               bool directories) {
  DIR *d = opendir(dir.c_str());
  if (!d)
    return errno == ENOENT ? notFound("'", dir, "' does not exist")
                           : unavailable("cannot read directory '", dir,
                                         "': ", std::strerror(errno));
  std::vector<std::string> names;
  while (dirent *e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == ".." || name[0] == '.')
      continue;
    struct stat st;
    if (stat((dir + "/" + name).c_str(), &st) != 0)
      continue;
    if (directories ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode))
      names.push_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

} // namespace

bool isTrainingProgram(const format::Program &program) {
  return metadataOf(program, metadata::kTrain) == "1";
}

std::string tensorFileName(const std::string &name) {
  std::string out;
  for (char c : name)
    out += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' ||
            c == '_' || c == '-')
               ? c
               : '_';
  return out.empty() ? "output" : out;
}

Trainer::Trainer(const format::Program &program, Executable &exe,
                 TrainerOptions options)
    : program_(program), exe_(exe), options_(std::move(options)) {}

Trainer::~Trainer() = default;

StatusOr<std::unique_ptr<Trainer>>
Trainer::create(const format::Program &program, Executable &exe,
                TrainerOptions options) {
  std::unique_ptr<Trainer> trainer(
      new Trainer(program, exe, std::move(options)));
  DTCC_RETURN_IF_ERROR(trainer->prepare());
  return trainer;
}

Status Trainer::prepare() {
  const TrainerOptions &o = options_;
  if (!isTrainingProgram(program_))
    return invalidArgument("this is not a training program (compile with "
                           "`dtcc compile --train`)");
  if (o.steps < 1)
    return invalidArgument("--steps N is required (the run's total number of "
                           "steps)");
  if (o.dataPath.empty() == o.batchesDir.empty())
    return invalidArgument(o.dataPath.empty()
                               ? "pass --data FILE (a token file) or --batches "
                                 "DIR (explicit inputs per step)"
                               : "--data and --batches exclude each other");
  if (o.logEvery < 1)
    return invalidArgument("--log-every must be positive");
  if (o.saveEvery < 0)
    return invalidArgument("--save-every must be positive");
  if (o.saveEvery > 0 && o.saveDir.empty() && o.checkpointDir.empty())
    return invalidArgument("--save-every needs --save DIR or "
                           "--checkpoint-dir DIR");
  if (!o.checkpointDir.empty() && !o.saveDir.empty())
    return invalidArgument("--checkpoint-dir and --save exclude each other "
                           "(--checkpoint-dir keeps one checkpoint per saved "
                           "step, --save one checkpoint)");
  if (!o.checkpointDir.empty() && !o.resumeDir.empty())
    return invalidArgument("--checkpoint-dir and --resume exclude each other "
                           "(a run with --checkpoint-dir resumes from its "
                           "newest valid checkpoint)");
  if (o.keepCheckpoints < 0)
    return invalidArgument("--keep-checkpoints must be 0 (keep all) or "
                           "positive");
  seed_ = o.seed.value_or(0);

  trainStep_ = exe_.findFunction(kTrainStep);
  // A pipeline: each stage has its own step.
  std::string stepName = kTrainStep;
  if (!trainStep_ && exe_.comm()) {
    stepName = strCat(kTrainStep, "_pp", exe_.meshCoords().coord("pp"));
    trainStep_ = exe_.findFunction(stepName);
  }
  if (!trainStep_)
    return invalidArgument("the program has no function '", kTrainStep, "'");
  std::string m = metadataOf(program_, metadata::kMicroBatches);
  if (!m.empty()) {
    DTCC_ASSIGN_OR_RETURN(microBatches_,
                          parsePositive("metadata dtcc.micro_batches", m));
  }
  if (microBatches_ > 1) {
    applyStep_ = exe_.findFunction(kApplyStep);
    if (!applyStep_)
      return invalidArgument("the program has ", microBatches_,
                             " micro-batches but no function '", kApplyStep,
                             "'");
    if (!applyStep_->inputs.empty())
      return invalidArgument("'", kApplyStep,
                             "' must take no inputs, it takes ",
                             applyStep_->inputs.size());
  }
  lossOutput_ = findBinding(trainStep_->outputs, "loss");
  if (lossOutput_ < 0)
    return invalidArgument("'", kTrainStep, "' has no output 'loss'");
  const std::vector<IoBinding> &updateOutputs =
      applyStep_ ? applyStep_->outputs : trainStep_->outputs;
  lrOutput_ = findBinding(updateOutputs, "lr");
  gradNormOutput_ = findBinding(updateOutputs, "grad_norm");
  if (!isScalarType(trainStep_->outputs[lossOutput_].view))
    return invalidArgument("output 'loss' of '", kTrainStep,
                           "' must be a scalar, got ",
                           trainStep_->outputs[lossOutput_].view.typeString());
  for (int i : {lrOutput_, gradNormOutput_})
    if (i >= 0 && !isScalarType(updateOutputs[i].view))
      return invalidArgument("output '", updateOutputs[i].name,
                             "' must be a scalar, got ",
                             updateOutputs[i].view.typeString());
  if (const TensorView *total = exe_.variable(kTotalStepsVariable))
    if (!isScalarType(*total) ||
        (total->dtype != DType::kI64 && total->dtype != DType::kI32))
      return invalidArgument("variable '", kTotalStepsVariable,
                             "' must be an integer scalar, got ",
                             total->typeString());
  if (const TensorView *step = exe_.variable(kStepVariable))
    if (!isScalarType(*step) ||
        (step->dtype != DType::kI64 && step->dtype != DType::kI32))
      return invalidArgument("variable '", kStepVariable,
                             "' must be an integer scalar, got ",
                             step->typeString());

  const format::Function *trainProto = nullptr;
  for (const format::Function &f : program_.functions())
    if (f.name() == stepName)
      trainProto = &f;
  for (const IoBinding &b : trainStep_->inputs) {
    Input in;
    in.name = b.name;
    in.dtype = b.view.dtype;
    in.shape = b.view.shape;
    if (trainProto)
      for (const format::Binding &pb : trainProto->inputs())
        if (pb.name() == b.name && pb.has_sharding()) {
          // Every rank draws the whole batch (the same data as one device)
          // and feeds its block of it.
          in.sharding = &pb.sharding();
          in.shape.assign(pb.sharding().global_shape().begin(),
                          pb.sharding().global_shape().end());
          in.local = HostTensor(in.dtype, b.view.shape);
          DTCC_ASSIGN_OR_RETURN(std::vector<int64_t> local,
                                localShape(pb.sharding(), exe_.meshCoords()));
          if (local != b.view.shape)
            return invalidArgument(
                "input '", b.name, "' is split over the mesh, but this process "
                "is not a rank of it (run it with mpirun -np N)");
        }
    in.micro = HostTensor(in.dtype, in.shape);
    inputs_.push_back(std::move(in));
  }
  // The token inputs, also for --batches (tokens/s).
  std::vector<std::string> dataInputs =
      splitList(metadataOf(program_, metadata::kDataInputs));
  if (dataInputs.size() == 2) {
    idsInput_ = findBinding(trainStep_->inputs, dataInputs[0]);
    labelsInput_ = findBinding(trainStep_->inputs, dataInputs[1]);
  }
  if (idsInput_ >= 0)
    tokensPerStep_ = inputs_[idsInput_].micro.numel() * microBatches_;
  return o.dataPath.empty() ? prepareBatches() : prepareTokenData();
}

Status Trainer::prepareTokenData() {
  std::string declared = metadataOf(program_, metadata::kDataInputs);
  std::vector<std::string> names = splitList(declared);
  if (names.size() != 2)
    return invalidArgument(
        "--data needs a language model whose program names its token inputs "
        "(metadata dtcc.data_inputs = \"ids,labels\"), this one has '",
        declared, "'; pass explicit inputs with --batches DIR");
  std::vector<std::string> all;
  for (const Input &in : inputs_)
    all.push_back(in.name);
  for (const std::string &n : names)
    if (findBinding(trainStep_->inputs, n) < 0)
      return invalidArgument(
          "token input '", n, "' (dtcc.data_inputs) is not an input of '",
          kTrainStep, "', whose inputs are: ", joinNames(all));
  for (const Input &in : inputs_)
    if (in.name != names[0] && in.name != names[1])
      return invalidArgument("'", kTrainStep, "' input '", in.name,
                             "' is not filled from token data (only ",
                             joinNames(names),
                             " are); pass every input with --batches DIR");
  const Input &ids = inputs_[idsInput_], &labels = inputs_[labelsInput_];
  if (ids.shape.size() != 2 || labels.shape != ids.shape ||
      labels.dtype != ids.dtype ||
      (ids.dtype != DType::kI32 && ids.dtype != DType::kI64))
    return invalidArgument(
        "token inputs must be i32 or i64 of one shape [batch, sequence], got ",
        ids.name, ": ", ids.micro.typeString(), " and ", labels.name, ": ",
        labels.micro.typeString());
  DTCC_ASSIGN_OR_RETURN(TokenDType dtype, parseTokenDType(options_.dataDType));
  int64_t vocab = 0;
  std::string v = metadataOf(program_, metadata::kVocabSize);
  if (!v.empty()) {
    DTCC_ASSIGN_OR_RETURN(vocab, parsePositive("metadata dtcc.vocab_size", v));
  }
  DTCC_ASSIGN_OR_RETURN(
      tokens_, TokenData::open(options_.dataPath, dtype, ids.shape[1], vocab));
  return Status::ok();
}

Status Trainer::prepareBatches() {
  auto folders = listEntries(options_.batchesDir, true);
  if (!folders.isOk())
    return folders.status().withContext("--batches");
  batchFolders_ = std::move(folders.value());
  if (static_cast<int64_t>(batchFolders_.size()) < options_.steps)
    return invalidArgument("--batches '", options_.batchesDir, "' has ",
                           batchFolders_.size(), " step folders; --steps ",
                           options_.steps, " needs one per step");
  for (int64_t i = 0; i < options_.steps; ++i)
    DTCC_RETURN_IF_ERROR(checkBatchFolder(batchFolders_[i]));
  return Status::ok();
}

Status Trainer::checkBatchFolder(const std::string &folder) const {
  std::string dir = options_.batchesDir + "/" + folder;
  DTCC_ASSIGN_OR_RETURN(std::vector<std::string> files,
                        listEntries(dir, false));
  std::set<std::string> present;
  for (const std::string &f : files)
    if (f.size() > 3 && f.compare(f.size() - 3, 3, ".pb") == 0)
      present.insert(f);
  std::vector<std::string> expected;
  std::string missing, unknown;
  std::set<std::string> expectedSet;
  for (const Input &in : inputs_) {
    std::string file = tensorFileName(in.name) + ".pb";
    expectedSet.insert(file);
    expected.push_back(
        strCat(file, " (", in.name, ": ",
               microBatches_ > 1 ? strCat(microBatches_, " x ") : "",
               in.micro.typeString(), ")"));
    if (!present.count(file))
      missing += (missing.empty() ? "" : ", ") + file;
  }
  for (const std::string &f : present)
    if (!expectedSet.count(f))
      unknown += (unknown.empty() ? "" : ", ") + f;
  if (missing.empty() && unknown.empty())
    return Status::ok();
  std::string list;
  for (const std::string &e : expected)
    list += "\n  " + e;
  return invalidArgument(
      "batch folder '", dir,
      "': ", unknown.empty() ? "" : strCat("unexpected ", unknown),
      !unknown.empty() && !missing.empty() ? "; " : "",
      missing.empty() ? "" : strCat("missing ", missing), "; '", kTrainStep,
      "' expects one file per input:", list);
}

Status Trainer::loadBatchFolder(int64_t step) {
  std::string dir = options_.batchesDir + "/" + batchFolders_[step];
  for (Input &in : inputs_) {
    std::string path = dir + "/" + tensorFileName(in.name) + ".pb";
    auto t = readTensorFile(path);
    if (!t.isOk())
      return t.status().withContext("input '" + in.name + "'");
    std::vector<int64_t> expected = in.shape;
    if (!expected.empty())
      expected[0] *= microBatches_;
    if (t.value().dtype != in.dtype || t.value().shape != expected)
      return invalidArgument(
          "'", path, "' holds ", t.value().typeString(), ", expected ",
          HostTensor::typeString(in.dtype, expected),
          microBatches_ > 1 && !in.shape.empty()
              ? strCat(" (", microBatches_, " micro-batches of ",
                       in.micro.typeString(), " along dimension 0)")
              : "");
    in.step = std::move(t.value());
  }
  return Status::ok();
}

Status Trainer::fillMicroBatch(int64_t micro) {
  if (tokens_) {
    // Samples are numbered across the run; the step's start at the loader's
    // position, which a checkpoint carries.
    Input &ids = inputs_[idsInput_];
    uint64_t first = static_cast<uint64_t>(dataPosition_ + micro * ids.shape[0]);
    DTCC_RETURN_IF_ERROR(
        tokens_->fill(seed_, first, ids.micro, inputs_[labelsInput_].micro));
  } else {
    for (Input &in : inputs_) {
      // A scalar input is the same for every micro-batch.
      size_t chunk = in.micro.bytes.size();
      size_t offset = in.shape.empty() ? 0 : micro * chunk;
      std::memcpy(in.micro.bytes.data(), in.step.bytes.data() + offset, chunk);
    }
  }
  for (Input &in : inputs_)
    if (in.sharding)
      DTCC_RETURN_IF_ERROR(extractBlock(*in.sharding, exe_.meshCoords(),
                                        dtypeSize(in.dtype),
                                        in.micro.bytes.data(),
                                        in.local.bytes.data()));
  return Status::ok();
}

Status Trainer::writeTotalSteps() {
  const TensorView *total = exe_.variable(kTotalStepsVariable);
  if (!total)
    return Status::ok();
  HostTensor value(total->dtype, total->shape);
  if (total->dtype == DType::kI64)
    value.data<int64_t>()[0] = options_.steps;
  else
    value.data<int32_t>()[0] = static_cast<int32_t>(options_.steps);
  return exe_.device().copyHostToDevice(total->data, value.bytes.data(),
                                        value.bytes.size());
}

Status Trainer::resume(const std::string &dir, const char *flag) {
  auto loaded = loadCheckpoint(exe_, dir);
  if (!loaded.isOk())
    return loaded.status().withContext(flag);
  const format::Checkpoint &ckpt = loaded.value();
  startStep_ = ckpt.step();
  if (const TensorView *step = exe_.variable(kStepVariable)) {
    HostTensor value(step->dtype, step->shape);
    DTCC_RETURN_IF_ERROR(exe_.device().copyDeviceToHost(
        value.bytes.data(), step->data, value.bytes.size()));
    int64_t s = step->dtype == DType::kI64 ? value.data<int64_t>()[0]
                                           : value.data<int32_t>()[0];
    if (s != startStep_)
      std::fprintf(stderr,
                   "warning: the checkpoint's %s is %" PRId64
                   " but its manifest says step %" PRId64 "; continuing "
                   "from %" PRId64 "\n",
                   kStepVariable, s, startStep_, s);
    startStep_ = s;
  }
  if (startStep_ < 0)
    return dataLoss("the checkpoint in '", dir, "' is at step ", startStep_);
  if (!options_.seed) {
    seed_ = ckpt.seed();
  } else if (*options_.seed != ckpt.seed()) {
    std::fprintf(stderr,
                 "warning: resuming with --seed %" PRIu64 ", the checkpoint "
                 "was written with seed %" PRIu64 ": the batches differ from "
                 "an uninterrupted run's\n",
                 *options_.seed, static_cast<uint64_t>(ckpt.seed()));
  }
  std::string dataPath =
      options_.dataPath.empty() ? options_.batchesDir : options_.dataPath;
  if (!ckpt.data_path().empty() && ckpt.data_path() != dataPath)
    std::fprintf(stderr,
                 "warning: the checkpoint was trained on '%s', this run reads "
                 "'%s'\n",
                 ckpt.data_path().c_str(), dataPath.c_str());
  if (tokens_ && !ckpt.data_dtype().empty() &&
      ckpt.data_dtype() != tokenDTypeName(tokens_->dtype()))
    std::fprintf(stderr,
                 "warning: the checkpoint was trained on %s tokens, this run "
                 "reads %s ones\n",
                 ckpt.data_dtype().c_str(), tokenDTypeName(tokens_->dtype()));
  if (startStep_ > options_.steps)
    return invalidArgument("the checkpoint in '", dir, "' is at step ",
                           startStep_, ", beyond --steps ", options_.steps);
  // Where the token loader stands; checkpoints from before the field have
  // drawn a whole number of steps' samples.
  const int64_t rows = idsInput_ >= 0 && !inputs_[idsInput_].shape.empty()
                           ? inputs_[idsInput_].shape[0]
                           : 0;
  dataPosition_ = ckpt.data_position() > 0 || ckpt.step() == 0
                      ? ckpt.data_position()
                      : startStep_ * microBatches_ * rows;
  startCheckpoint_ = dir;
  if (options_.progress)
    options_.progress("resume", startStep_);
  return Status::ok();
}

Status Trainer::openCheckpointDir() {
  // Rank 0 picks the checkpoint (and the run's id, which names its
  // temporaries) and tells the others, so that all start from one step even
  // if a checkpoint is being committed by a dying earlier run.
  Communicator *all = nullptr;
  int rank = 0, size = 1;
  if (exe_.comm()) {
    DTCC_ASSIGN_OR_RETURN(all,
                          exe_.comm()->group(exe_.comm()->mesh().axisNames()));
    rank = exe_.comm()->mesh().world().rank();
    size = exe_.comm()->mesh().world().size();
  }
  std::string root = options_.checkpointDir;
  while (root.size() > 1 && root.back() == '/')
    root.pop_back();
  // [step or -1 (none) or -2 (rank 0 failed), run id]
  int64_t chosen[2] = {-1, 0};
  if (rank == 0) {
    auto now = std::chrono::system_clock::now().time_since_epoch();
    chosen[1] = static_cast<int64_t>(
        (std::chrono::duration_cast<std::chrono::microseconds>(now).count() ^
         (int64_t(getpid()) << 40)) & 0x7FFFFFFFFFFFFFFF);
  }
  auto runId = [&] {
    char id[32];
    std::snprintf(id, sizeof(id), "%016" PRIx64,
                  static_cast<uint64_t>(chosen[1]));
    return std::string(id);
  };
  CheckpointWriterOptions w;
  w.root = root;
  w.rank = rank;
  w.worldSize = size;
  w.keep = static_cast<int>(options_.keepCheckpoints);
  w.runId = runId();
  if (exe_.comm())
    w.peerTimeoutSeconds = exe_.comm()->mesh().world().queue().timeout();
  std::FILE *log = options_.log;
  if (log)
    w.log = [log](const std::string &line) {
      std::fprintf(log, "%s\n", line.c_str());
      std::fflush(log);
    };
  const std::string who = size > 1 ? strCat("rank ", rank, ": ") : "";
  w.warn = [who](const std::string &line) {
    std::fprintf(stderr, "%swarning: %s\n", who.c_str(), line.c_str());
  };
  if (rank == 0 && options_.progress) {
    auto progress = options_.progress;
    w.committed = [progress](int64_t step) { progress("saved", step); };
  }
  // Rank 0 makes the root (clearing unfinished saves) and picks the
  // checkpoint, then tells the others; an error there reaches every rank.
  Status picked = Status::ok();
  if (rank == 0) {
    auto created = AsyncCheckpointWriter::create(w);
    if (created.isOk()) {
      writer_ = std::move(created.value());
      auto latest = findLatestCheckpoint(root, [](const std::string &msg) {
        std::fprintf(stderr, "warning: %s\n", msg.c_str());
      });
      if (!latest.isOk())
        picked = latest.status().withContext("--checkpoint-dir");
      else if (latest.value())
        chosen[0] = latest.value()->step;
    } else {
      picked = created.status();
    }
    if (!picked.isOk())
      chosen[0] = -2;
  }
  if (all)
    DTCC_RETURN_IF_ERROR(all->broadcast(chosen, 2, DType::kI64, 0));
  DTCC_RETURN_IF_ERROR(picked);
  if (chosen[0] == -2)
    return unavailable("rank 0 could not use --checkpoint-dir '", root,
                       "' (its message says why)");
  if (rank != 0) {
    w.runId = runId();
    DTCC_ASSIGN_OR_RETURN(writer_, AsyncCheckpointWriter::create(w));
  }
  if (chosen[0] >= 0)
    DTCC_RETURN_IF_ERROR(
        resume(checkpointStepDir(root, chosen[0]), "--checkpoint-dir"));
  else if (options_.progress)
    options_.progress("resume", 0);
  return Status::ok();
}

format::Checkpoint Trainer::checkpointManifest(int64_t stepsDone) const {
  format::Checkpoint manifest;
  manifest.set_step(stepsDone);
  manifest.set_seed(seed_);
  manifest.set_data_path(options_.dataPath.empty() ? options_.batchesDir
                                                   : options_.dataPath);
  if (tokens_)
    manifest.set_data_dtype(tokenDTypeName(tokens_->dtype()));
  manifest.set_tokens_consumed(stepsDone * tokensPerStep_);
  manifest.set_data_position(dataPosition_);
  manifest.set_model(modelName(program_));
  return manifest;
}

Status Trainer::submitCheckpoint(int64_t stepsDone) {
  DTCC_ASSIGN_OR_RETURN(CheckpointSnapshot snapshot,
                        snapshotCheckpoint(exe_, checkpointManifest(stepsDone)));
  checkpointWaitSeconds_ += writer_->submit(std::move(snapshot));
  return Status::ok();
}

Status Trainer::dumpOutputs(const std::string &dir,
                            const std::vector<IoBinding> &bindings,
                            const std::vector<HostTensor> &outputs) {
  DTCC_RETURN_IF_ERROR(makeDir(dir));
  for (size_t i = 0; i < outputs.size(); ++i)
    DTCC_RETURN_IF_ERROR(
        writeTensorFile(dir + "/" + tensorFileName(bindings[i].name) + ".pb",
                        bindings[i].name, outputs[i]));
  return Status::ok();
}

Status Trainer::save(int64_t stepsDone) {
  if (writer_)
    return submitCheckpoint(stepsDone);
  format::Checkpoint manifest = checkpointManifest(stepsDone);
  DTCC_RETURN_IF_ERROR(
      saveCheckpoint(exe_, options_.saveDir, manifest).withContext("--save"));
  if (options_.log)
    std::fprintf(options_.log, "saved checkpoint %s (step %" PRId64 ")\n",
                 options_.saveDir.c_str(), stepsDone);
  return Status::ok();
}

void Trainer::printHeader() {
  if (!options_.log)
    return;
  int64_t params = 0, tensors = 0;
  for (const format::Variable &v : program_.variables()) {
    if (!v.trainable())
      continue;
    // The whole model: every stage's parameters, whole (not this rank's
    // blocks).
    int64_t n = 1;
    if (v.has_sharding())
      for (int64_t d : v.sharding().global_shape())
        n *= d;
    else
      for (int64_t d : program_.buffers(v.buffer()).shape())
        n *= d;
    params += n;
    ++tensors;
  }
  std::string model = modelName(program_);
  std::string optimizer = metadataOf(program_, metadata::kOptimizer);
  std::fprintf(options_.log, "%s\n",
               strCat("train", model.empty() ? "" : " " + model, ": ",
                      formatCount(params), " parameters in ", tensors,
                      tensors == 1 ? " tensor" : " tensors",
                      optimizer.empty() ? "" : ", optimizer " + optimizer)
                   .c_str());
  std::string batch;
  if (idsInput_ >= 0) {
    const Input &ids = inputs_[idsInput_];
    batch =
        strCat(microBatches_, " micro-batch", microBatches_ > 1 ? "es" : "",
               " of ", ids.shape.size() > 0 ? ids.shape[0] : 1, " sequences x ",
               ids.shape.size() > 1 ? ids.shape[1] : 1, " tokens (",
               formatCount(tokensPerStep_), " tokens per step)");
  } else {
    batch = strCat(microBatches_, " micro-batch", microBatches_ > 1 ? "es" : "",
                   " per step");
  }
  std::string data =
      tokens_ ? strCat(tokens_->path(), " (", formatCount(tokens_->numTokens()),
                       " ", tokenDTypeName(tokens_->dtype()), " tokens, seed ",
                       seed_, ")")
              : strCat("batches from ", options_.batchesDir);
  std::fprintf(options_.log, "  %s; data %s\n", batch.c_str(), data.c_str());
  if (!startCheckpoint_.empty())
    std::fprintf(options_.log, "  resumed from %s at step %" PRId64 "\n",
                 startCheckpoint_.c_str(), startStep_);
  if (writer_)
    std::fprintf(options_.log,
                 "  checkpoints in %s every %" PRId64 " steps, keeping %s\n",
                 options_.checkpointDir.c_str(), options_.saveEvery,
                 options_.keepCheckpoints == 0
                     ? "all"
                     : strCat("the last ", options_.keepCheckpoints).c_str());
  std::fprintf(
      options_.log, "  steps %" PRId64 " to %" PRId64 "; peak memory %s\n",
      startStep_ + 1, options_.steps, formatBytes(exe_.peakBytes()).c_str());
}

void Trainer::printStep(const StepRecord &r, double intervalSeconds,
                        int64_t intervalSteps) {
  if (!options_.log)
    return;
  int width = static_cast<int>(std::to_string(options_.steps).size());
  std::string line = strCat("step ");
  char buf[128];
  std::snprintf(buf, sizeof(buf), "%*" PRId64 "/%" PRId64 "  loss %.5f", width,
                r.step, options_.steps, r.loss);
  line += buf;
  if (r.lr) {
    std::snprintf(buf, sizeof(buf), "  lr %.3e", *r.lr);
    line += buf;
  }
  if (r.gradNorm) {
    std::snprintf(buf, sizeof(buf), "  grad-norm %.4f", *r.gradNorm);
    line += buf;
  }
  double perStep = intervalSeconds / std::max<int64_t>(intervalSteps, 1);
  if (tokensPerStep_ > 0 && perStep > 0) {
    std::snprintf(buf, sizeof(buf), "  tokens/s %.0f",
                  tokensPerStep_ / perStep);
    line += buf;
  }
  // Small models take well under a millisecond per step.
  std::snprintf(buf, sizeof(buf),
                perStep < 0.01 ? "  step %.2f ms  peak %s"
                               : "  step %.1f ms  peak %s",
                1e3 * perStep, formatBytes(exe_.peakBytes()).c_str());
  line += buf;
  std::fprintf(options_.log, "%s\n", line.c_str());
  std::fflush(options_.log);
}

Status Trainer::run() {
  history_.clear();
  if (!options_.resumeDir.empty())
    DTCC_RETURN_IF_ERROR(resume(options_.resumeDir, "--resume"));
  if (!options_.checkpointDir.empty())
    DTCC_RETURN_IF_ERROR(openCheckpointDir());
  DTCC_RETURN_IF_ERROR(writeTotalSteps());
  printHeader();
  if (startStep_ == options_.steps) {
    if (options_.log)
      std::fprintf(options_.log,
                   "nothing to do: the checkpoint is at step "
                   "%" PRId64 " of %" PRId64 "\n",
                   startStep_, options_.steps);
    return Status::ok();
  }

  auto runStart = std::chrono::steady_clock::now();
  std::vector<const HostTensor *> inputPtrs;
  for (const Input &in : inputs_)
    inputPtrs.push_back(in.sharding ? &in.local : &in.micro);
  std::vector<HostTensor> outputs;
  double intervalSeconds = 0;
  int64_t intervalSteps = 0, lastSaved = -1;
  const int64_t lastStep = options_.stopAfter > 0
                               ? std::min(options_.stopAfter, options_.steps)
                               : options_.steps;
  for (int64_t step = startStep_; step < lastStep; ++step) {
    const int64_t number = step + 1;
    auto start = std::chrono::steady_clock::now();
    if (!tokens_)
      DTCC_RETURN_IF_ERROR(loadBatchFolder(step));
    StepRecord record;
    record.step = number;
    std::string dumpDir;
    if (!options_.dumpOutputsDir.empty()) {
      DTCC_RETURN_IF_ERROR(makeDir(options_.dumpOutputsDir));
      dumpDir = options_.dumpOutputsDir + "/step_" + std::to_string(number);
    }
    auto readUpdate = [&](const std::vector<IoBinding> &bindings) -> Status {
      if (lrOutput_ >= 0) {
        DTCC_ASSIGN_OR_RETURN(record.lr, scalarValue(bindings[lrOutput_].name,
                                                     outputs[lrOutput_]));
      }
      if (gradNormOutput_ >= 0) {
        DTCC_ASSIGN_OR_RETURN(record.gradNorm,
                              scalarValue(bindings[gradNormOutput_].name,
                                          outputs[gradNormOutput_]));
      }
      return Status::ok();
    };
    double lossSum = 0;
    for (int64_t micro = 0; micro < microBatches_; ++micro) {
      DTCC_RETURN_IF_ERROR(fillMicroBatch(micro));
      Status s = exe_.run(*trainStep_, inputPtrs, &outputs);
      if (!s.isOk())
        return s.withContext(strCat("step ", number, ": ", kTrainStep));
      DTCC_ASSIGN_OR_RETURN(double loss,
                            scalarValue("loss", outputs[lossOutput_]));
      lossSum += loss;
      if (!applyStep_)
        DTCC_RETURN_IF_ERROR(readUpdate(trainStep_->outputs));
      if (!dumpDir.empty()) {
        std::string dir = dumpDir;
        if (applyStep_) {
          DTCC_RETURN_IF_ERROR(makeDir(dumpDir));
          dir += "/micro_" + std::to_string(micro);
        }
        DTCC_RETURN_IF_ERROR(dumpOutputs(dir, trainStep_->outputs, outputs));
      }
    }
    record.loss = lossSum / microBatches_;
    if (applyStep_) {
      Status s = exe_.run(*applyStep_, {}, &outputs);
      if (!s.isOk())
        return s.withContext(strCat("step ", number, ": ", kApplyStep));
      DTCC_RETURN_IF_ERROR(readUpdate(applyStep_->outputs));
      if (!dumpDir.empty()) {
        DTCC_RETURN_IF_ERROR(
            dumpOutputs(dumpDir, applyStep_->outputs, outputs));
        // The step's loss beside lr and grad_norm, as with one micro-batch.
        HostTensor loss(DType::kF32, {});
        loss.data<float>()[0] = static_cast<float>(record.loss);
        DTCC_RETURN_IF_ERROR(
            writeTensorFile(dumpDir + "/loss.pb", "loss", loss));
      }
    }
    std::chrono::duration<double> elapsed =
        std::chrono::steady_clock::now() - start;
    record.seconds = elapsed.count();
    intervalSeconds += record.seconds;
    ++intervalSteps;
    history_.push_back(record);
    // --profile leaves out the run's first step where there are more: as
    // kernels first run, a GPU loads their modules and cuDNN builds its
    // plans (a 350M GPT's first step took 67 ms on an H200, the next ones
    // 47), and the CPU touches its arenas' pages for the first time.
    if (exe_.profiling() && step == startStep_ && number < lastStep)
      exe_.restartProfile(strCat("steps ", number + 1, " to ", lastStep));
    if (tokens_)
      dataPosition_ += microBatches_ * inputs_[idsInput_].shape[0];
    if (options_.progress)
      options_.progress("step", number);
    if (number % options_.logEvery == 0 || number == lastStep || number == 1) {
      printStep(record, intervalSeconds, intervalSteps);
      intervalSeconds = 0;
      intervalSteps = 0;
    }
    if (options_.saveEvery > 0 && number % options_.saveEvery == 0 &&
        number < lastStep) {
      DTCC_RETURN_IF_ERROR(save(number));
      lastSaved = number;
    }
  }
  if ((!options_.saveDir.empty() || writer_) && lastSaved != lastStep &&
      lastStep > startStep_)
    DTCC_RETURN_IF_ERROR(save(lastStep));
  if (writer_) {
    writer_->drain();
    if (options_.log)
      std::fprintf(options_.log,
                   "checkpoints: %" PRId64 " written, %" PRId64
                   " failed; %.2f s writing in the background, training "
                   "waited %.2f s for the writer\n",
                   writer_->written(), writer_->failed(),
                   writer_->busySeconds(), checkpointWaitSeconds_);
  }
  std::chrono::duration<double> total =
      std::chrono::steady_clock::now() - runStart;
  if (options_.log)
    std::fprintf(options_.log, "done: %" PRId64 " steps in %.2f s; process peak "
                               "RSS %s (%s before loading the program)\n",
                 std::max<int64_t>(0, lastStep - startStep_), total.count(),
                 formatBytes(processPeakRss()).c_str(),
                 formatBytes(startupPeakRss()).c_str());
  return Status::ok();
}

/// The process's peak resident memory (VmHWM), which unlike getrusage's
/// maximum does not carry over from the process that exec'd this one.
int64_t &startupPeakRss() {
  static int64_t bytes = 0;
  return bytes;
}

int64_t processPeakRss() {
  std::FILE *f = std::fopen("/proc/self/status", "r");
  if (!f)
    return 0;
  char line[256];
  int64_t kib = 0;
  while (std::fgets(line, sizeof(line), f))
    if (std::sscanf(line, "VmHWM: %" SCNd64 " kB", &kib) == 1)
      break;
  std::fclose(f);
  return kib * 1024;
}

} // namespace dtcc::runtime
