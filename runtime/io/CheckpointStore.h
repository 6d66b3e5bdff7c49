//===- CheckpointStore.h - a run's checkpoints, written in the background -*- C++ -*-===//
//
// A checkpoint root (`--checkpoint-dir ROOT`) holds one checkpoint directory
// per saved step, ROOT/step_<8 digits>/, each complete or absent: a save is
// written under a temporary name (ROOT/.step_<n>.tmp-<run>), its files and
// the directory fsync'ed, a manifest with each file's CRC-32C written last,
// then renamed into place and the root fsync'ed. Saves run on a background
// thread from a snapshot in host memory while training goes on; the oldest
// checkpoints beyond a retention count are removed once a newer one is
// complete. On a mesh every rank writes its blocks and leaves a marker;
// rank 0 waits for all markers, checksums and commits.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_IO_CHECKPOINTSTORE_H
#define DTCC_RUNTIME_IO_CHECKPOINTSTORE_H

#include "runtime/io/CheckpointFiles.h"

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

namespace dtcc::runtime {

/// ROOT/step_00000120.
std::string checkpointStepDir(const std::string &root, int64_t step);

/// A checkpoint of a root.
struct CheckpointEntry {
  int64_t step = 0;
  std::string dir;
};

/// The step directories of `root` that have a manifest, newest first; an
/// empty list for a root that does not exist.
StatusOr<std::vector<CheckpointEntry>> listCheckpoints(const std::string &root);

/// The newest checkpoint of `root` that verifies (verifyCheckpoint: sizes
/// and checksums); each newer one that does not is reported to `skipped`
/// with the file and the reason, and the next older one is tried. Nothing
/// when the root holds no valid checkpoint.
StatusOr<std::optional<CheckpointEntry>>
findLatestCheckpoint(const std::string &root,
                     const std::function<void(const std::string &)> &skipped);

/// Removes the step directories of `root` beyond the `keep` newest that
/// have a manifest (and unfinished ones older than those); never a
/// directory that is not a step directory.
Status applyRetention(const std::string &root, int keep);

/// The elements of one box of a variable, row-major.
struct CheckpointPiece {
  TensorBox box;
  std::vector<uint8_t> bytes;
};

/// The part of a checkpoint one rank writes: `manifest` lists every variable
/// of the program (name, dtype, global shape, file) with the run's state;
/// `tensors` are this rank's blocks of the variables it writes.
struct CheckpointSnapshot {
  struct Tensor {
    std::string file;
    DType dtype = DType::kInvalid;
    std::vector<int64_t> globalShape;
    std::vector<CheckpointPiece> pieces;
  };
  format::Checkpoint manifest;
  std::vector<Tensor> tensors;
  /// Bytes held by the pieces.
  int64_t bytes() const;
};

struct CheckpointWriterOptions {
  std::string root;
  int rank = 0, worldSize = 1;
  /// Checkpoints kept (applyRetention); 0 keeps all.
  int keep = 3;
  /// Names this run's temporaries; the same on every rank of the job.
  std::string runId;
  /// How long rank 0 waits for the others' blocks of one save.
  double peerTimeoutSeconds = 300;
  /// Progress lines (rank 0: "saved checkpoint ...") and warnings (a save
  /// that failed, on the rank that saw it); null for none.
  std::function<void(const std::string &)> log, warn;
  /// Called on rank 0 after a checkpoint of `step` is complete.
  std::function<void(int64_t step)> committed;
};

/// Writes snapshots on a background thread, one at a time. A save that
/// fails (a full disk, a peer that never finished) leaves no checkpoint
/// behind and is reported through `warn`; training goes on and the
/// previous checkpoint stays the newest.
class AsyncCheckpointWriter {
public:
  /// Creates the root if needed; rank 0 removes temporaries of earlier runs.
  static StatusOr<std::unique_ptr<AsyncCheckpointWriter>>
  create(CheckpointWriterOptions options);
  ~AsyncCheckpointWriter();

  /// Waits until the previous save is written, then hands `snapshot` to
  /// the writer thread. Returns the seconds spent waiting.
  double submit(CheckpointSnapshot snapshot);
  /// Waits until every submitted save is written (or has failed).
  void drain();

  /// Saves written completely by this rank, and saves that failed here.
  int64_t written() const;
  int64_t failed() const;
  /// Seconds the writer thread spent writing, over all saves.
  double busySeconds() const;

private:
  explicit AsyncCheckpointWriter(CheckpointWriterOptions options);
  void loop();
  Status write(CheckpointSnapshot &snapshot);
  Status commit(CheckpointSnapshot &snapshot, const std::string &tmp);
  /// Rank 0: waits until every other rank has marked its part of the save
  /// in `tmp` done or failed (or the peer timeout passes); the first failed
  /// part's reason, or the ranks that did not finish.
  Status waitForPeers(const std::string &tmp);

  CheckpointWriterOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::optional<CheckpointSnapshot> pending_;
  bool busy_ = false, stopping_ = false;
  int64_t written_ = 0, failed_ = 0;
  double busySeconds_ = 0;
  std::thread thread_;
};

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_IO_CHECKPOINTSTORE_H
