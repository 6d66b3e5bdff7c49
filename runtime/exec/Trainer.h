//===- Trainer.h - the training loop of compiled programs -------*- C++ -*-===//
//
// Runs the functions of a training program (docs/training-abi.md) step by
// step: feeds micro-batches from a token file or explicit batch folders,
// logs, and saves and resumes checkpoints.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_EXEC_TRAINER_H
#define DTCC_RUNTIME_EXEC_TRAINER_H

#include "runtime/base/HostTensor.h"
#include "runtime/base/Status.h"
#include "runtime/exec/Executable.h"
#include "runtime/io/CheckpointStore.h"
#include "runtime/format/Program.pb.h"

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dtcc::runtime {

class TokenData;

/// How a training run is driven; the flags of `./train` (see Runner.cpp).
struct TrainerOptions {
  std::string dataPath;             ///< --data: a token file
  std::string dataDType = "uint16"; ///< --data-dtype: uint16 | uint32
  std::string batchesDir;           ///< --batches: one folder per step
  int64_t steps = -1;               ///< --steps: the run's total length
  std::optional<uint64_t> seed;     ///< --seed; default 0, or a resumed one's
  int64_t logEvery = 10;            ///< --log-every; the first and last steps always log
  std::string saveDir;              ///< --save
  int64_t saveEvery = 0;            ///< --save-every; 0: only at the end
  /// --stop-after: end (and save) after this step, though the schedule
  /// spans --steps; a later --resume continues. 0: run to --steps.
  int64_t stopAfter = 0;
  std::string resumeDir;            ///< --resume
  /// --checkpoint-dir: a root of step checkpoints (CheckpointStore.h),
  /// saved every --save-every steps and at the end by a background
  /// writer; a run starts from its newest valid checkpoint.
  std::string checkpointDir;
  int64_t keepCheckpoints = 3;      ///< --keep-checkpoints; 0 keeps all
  /// Progress for a supervisor (Supervisor.h): ("step", n) after step n on
  /// every rank, ("resume", n) when a run starts from step n, ("saved", n)
  /// on rank 0 once the checkpoint of step n is complete (from the writer
  /// thread). Null: none.
  std::function<void(const char *event, int64_t step)> progress;
  std::string dumpOutputsDir;       ///< --dump-outputs
  /// Where log lines go (stdout in `./train`); null for none.
  std::FILE *log = stdout;
};

/// What one step produced.
struct StepRecord {
  int64_t step = 0; ///< 1-based: the step's number in the logs
  double loss = 0;  ///< the mean of the micro-batch losses
  std::optional<double> lr, gradNorm;
  double seconds = 0;
};

/// Whether `program` is a training program (metadata dtcc.train == "1").
bool isTrainingProgram(const format::Program &program);

/// The file name (without ".pb") under which a tensor named `name` is read
/// or written: characters other than [A-Za-z0-9._-] become '_'.
std::string tensorFileName(const std::string &name);

/// Drives one training run of a loaded training program. Step n (0-based)
/// calls train_step once per micro-batch, then apply_step when the program
/// has micro-batches; its inputs depend only on the seed and n, so a resumed
/// run repeats an uninterrupted one exactly.
class Trainer {
public:
  ~Trainer();
  Trainer(const Trainer &) = delete;
  Trainer &operator=(const Trainer &) = delete;

  /// Checks `options` against the program (train_step and apply_step
  /// present, data inputs of the right types, the token file or batch
  /// folders usable) without running anything. `program` and `exe` must
  /// outlive the trainer.
  static StatusOr<std::unique_ptr<Trainer>>
  create(const format::Program &program, Executable &exe,
         TrainerOptions options);

  /// Resumes if asked, then runs the steps from there to --steps, logging
  /// and saving as asked. Stops at the first error.
  Status run();

  /// The steps this run executed, in order.
  const std::vector<StepRecord> &history() const { return history_; }
  /// The step the run started from (0, or the resumed checkpoint's).
  int64_t startStep() const { return startStep_; }

private:
  struct Input;
  Trainer(const format::Program &program, Executable &exe,
          TrainerOptions options);
  Status prepare();
  Status resume(const std::string &dir, const char *flag);
  Status openCheckpointDir();
  Status submitCheckpoint(int64_t stepsDone);
  format::Checkpoint checkpointManifest(int64_t stepsDone) const;
  Status prepareTokenData();
  Status prepareBatches();
  Status checkBatchFolder(const std::string &folder) const;
  Status loadBatchFolder(int64_t step);
  Status fillMicroBatch(int64_t micro);
  Status writeTotalSteps();
  Status dumpOutputs(const std::string &dir,
                     const std::vector<IoBinding> &bindings,
                     const std::vector<HostTensor> &outputs);
  Status save(int64_t stepsDone);
  void printHeader();
  void printStep(const StepRecord &record, double intervalSeconds,
                 int64_t intervalSteps);

  const format::Program &program_;
  Executable &exe_;
  TrainerOptions options_;
  const Executable::Function *trainStep_ = nullptr, *applyStep_ = nullptr;
  /// Output indices of loss, lr and grad_norm (-1: absent); lr and grad_norm
  /// come from apply_step when there is one.
  int lossOutput_ = -1, lrOutput_ = -1, gradNormOutput_ = -1;
  uint64_t seed_ = 0;
  int64_t microBatches_ = 1;
  int64_t startStep_ = 0;
  /// The inputs of train_step, in binding order.
  std::vector<Input> inputs_;
  /// Indices into inputs_ of the token loader's ids and labels; -1: none.
  int idsInput_ = -1, labelsInput_ = -1;
  std::unique_ptr<TokenData> tokens_;
  /// --batches: the step folders, in name order.
  std::vector<std::string> batchFolders_;
  int64_t tokensPerStep_ = 0;
  /// The token loader's next sample (format::Checkpoint::data_position).
  int64_t dataPosition_ = 0;
  /// --checkpoint-dir: the writer, and the checkpoint the run started from.
  std::unique_ptr<AsyncCheckpointWriter> writer_;
  std::string startCheckpoint_;
  double checkpointWaitSeconds_ = 0;
  std::vector<StepRecord> history_;
};

/// The process's peak resident memory in bytes (Linux VmHWM); 0 if unknown.
int64_t processPeakRss();
/// processPeakRss() when the runner started, before loading its program.
int64_t &startupPeakRss();

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_EXEC_TRAINER_H
