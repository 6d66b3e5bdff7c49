//===- Checkpoint.h - saving and restoring training state -------*- C++ -*-===//
//
// A checkpoint is a directory: checkpoint.json (format::Checkpoint as JSON)
// and one row-major file per variable holding the whole, global tensor
// (docs/training-abi.md). Saves are staged in DIR.tmp and swapped into place.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_EXEC_CHECKPOINT_H
#define DTCC_RUNTIME_EXEC_CHECKPOINT_H

#include "runtime/base/DType.h"
#include "runtime/base/Status.h"
#include "runtime/format/Checkpoint.pb.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dtcc::runtime {

class Executable;

/// The checkpoint format version this runtime writes and reads.
constexpr int32_t kCheckpointFormatVersion = 1;
/// The manifest's file name inside a checkpoint directory.
constexpr const char *kCheckpointManifest = "checkpoint.json";

/// A box of a tensor in global coordinates: dimension d covers
/// [start[d], start[d] + size[d]). A rank of a sharded run holds one box of
/// each variable; a single device holds the whole tensor.
struct TensorBox {
  std::vector<int64_t> start, size;

  /// The box covering all of `shape`.
  static TensorBox whole(const std::vector<int64_t> &shape);
  int64_t numel() const;
};

/// Writes the elements of `box` (`data`: the box's elements, row-major) into
/// the tensor file `path` of a tensor of `globalShape`, creating the file at
/// its full size if needed and leaving the rest of it untouched, so ranks can
/// write their boxes of one file independently.
Status writeTensorBox(const std::string &path, DType dtype,
                      const std::vector<int64_t> &globalShape,
                      const TensorBox &box, const void *data);
/// Reads the elements of `box` of the tensor file `path` into `data`.
/// The file must have exactly the size of `globalShape`.
Status readTensorBox(const std::string &path, DType dtype,
                     const std::vector<int64_t> &globalShape,
                     const TensorBox &box, void *data);

/// Writes `manifest` as JSON to DIR/checkpoint.json.
Status writeCheckpointManifest(const std::string &dir,
                               const format::Checkpoint &manifest);
/// Reads and checks DIR/checkpoint.json (format version, entries).
StatusOr<format::Checkpoint> readCheckpointManifest(const std::string &dir);

/// Saves every variable of `exe` to `dir`, with the run's state from
/// `manifest` (step, seed, data settings; its variables are filled in). The
/// save goes to DIR.tmp first; an existing checkpoint at `dir` is replaced
/// only once the new one is complete. A non-empty `dir` that is not a
/// checkpoint is never replaced.
Status saveCheckpoint(Executable &exe, const std::string &dir,
                      format::Checkpoint manifest);

/// saveCheckpoint on a mesh: every rank writes its blocks of each variable
/// into the files of the whole tensors; rank 0 writes the manifest. Every
/// rank must call it.
Status saveShardedCheckpoint(Executable &exe, const std::string &dir,
                             format::Checkpoint manifest);

/// Loads the checkpoint at `dir` into the variables of `exe`. Every variable
/// of the program must be in the checkpoint with the same dtype and shape,
/// and the checkpoint must hold no others; all differences are listed in one
/// error, and nothing is modified then. Returns the manifest.
StatusOr<format::Checkpoint> loadCheckpoint(Executable &exe,
                                            const std::string &dir);

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_EXEC_CHECKPOINT_H
