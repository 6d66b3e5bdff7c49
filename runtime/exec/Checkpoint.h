//===- Checkpoint.h - saving and restoring training state -------*- C++ -*-===//
//
// Saving an Executable's variables to a checkpoint directory and loading
// them back, on one device or as one rank of a mesh (the directory's files:
// runtime/io/CheckpointFiles.h). Saves are staged in DIR.tmp and swapped
// into place; snapshotCheckpoint feeds the background writer of
// runtime/io/CheckpointStore.h.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_EXEC_CHECKPOINT_H
#define DTCC_RUNTIME_EXEC_CHECKPOINT_H

#include "runtime/base/DType.h"
#include "runtime/base/Status.h"
#include "runtime/format/Checkpoint.pb.h"
#include "runtime/io/CheckpointFiles.h"
#include "runtime/io/CheckpointStore.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dtcc::runtime {

class Executable;

/// Saves every variable of `exe` to `dir` (but the half copies of master
/// weights, `rounded_from`: a restore rounds their masters again), with the
/// run's state from
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

/// The part of a checkpoint of `exe`'s variables that this rank writes,
/// copied to host memory (for AsyncCheckpointWriter): the manifest lists
/// every variable of the program in the file of its index, as
/// saveShardedCheckpoint does; the pieces are this rank's blocks of the
/// variables it writes (all of them on one device). Only copies: no
/// communication, so it can be taken on any rank at any step.
StatusOr<CheckpointSnapshot> snapshotCheckpoint(Executable &exe,
                                                format::Checkpoint manifest);

/// Loads the checkpoint at `dir` into the variables of `exe`. Every variable
/// of the program must be in the checkpoint with the same dtype and shape
/// (a half copy of a master weight is its master's data rounded, whether
/// the checkpoint holds the copy or not),
/// and the checkpoint must hold no others; all differences are listed in one
/// error, and nothing is modified then. Files whose CRC-32C differs from the
/// manifest's are an error (data loss) naming the file. Returns the manifest.
StatusOr<format::Checkpoint> loadCheckpoint(Executable &exe,
                                            const std::string &dir);

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_EXEC_CHECKPOINT_H
