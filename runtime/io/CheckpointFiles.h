//===- CheckpointFiles.h - the files of a checkpoint directory --*- C++ -*-===//
//
// A checkpoint is a directory: checkpoint.json (format::Checkpoint as JSON)
// and one row-major file per variable holding the whole, global tensor
// (docs/training-abi.md). This is the file level: boxes of tensor files,
// the manifest, and its verification against the files' CRC-32C. Saving
// and loading an Executable's state is runtime/exec/Checkpoint.h;
// checkpoint roots, retention and the background writer are
// CheckpointStore.h.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_IO_CHECKPOINTFILES_H
#define DTCC_RUNTIME_IO_CHECKPOINTFILES_H

#include "runtime/base/DType.h"
#include "runtime/base/Status.h"
#include "runtime/format/Checkpoint.pb.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dtcc::runtime {

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
/// write their boxes of one file independently. The file is fsync'ed.
Status writeTensorBox(const std::string &path, DType dtype,
                      const std::vector<int64_t> &globalShape,
                      const TensorBox &box, const void *data);
/// Reads the elements of `box` of the tensor file `path` into `data`.
/// The file must have exactly the size of `globalShape`.
Status readTensorBox(const std::string &path, DType dtype,
                     const std::vector<int64_t> &globalShape,
                     const TensorBox &box, void *data);

/// Writes `manifest` as JSON to DIR/checkpoint.json (fsync'ed).
Status writeCheckpointManifest(const std::string &dir,
                               const format::Checkpoint &manifest);
/// Reads and checks DIR/checkpoint.json (format version, entries).
StatusOr<format::Checkpoint> readCheckpointManifest(const std::string &dir);

/// Reads DIR's manifest and checks every variable's file: present, of the
/// size of its dtype and shape, and, when the manifest has one, of its
/// CRC-32C. The error names the file and what is wrong with it.
StatusOr<format::Checkpoint> verifyCheckpoint(const std::string &dir);

/// The CRC-32C of a whole file, and its size in `bytes`.
StatusOr<uint32_t> fileCrc32c(const std::string &path, int64_t *bytes = nullptr);

// File-system helpers shared by the checkpoint code.
bool pathExists(const std::string &path);
bool isDirectoryPath(const std::string &path);
/// The entries of `dir` other than "." and "..", unsorted.
StatusOr<std::vector<std::string>> listDirectory(const std::string &dir);
/// Removes a checkpoint directory: files only, so that a mistaken path never
/// takes a tree of other data with it.
Status removeCheckpointDir(const std::string &dir);
/// fsync of a file or a directory (a directory: its entries, after a
/// rename or a create inside it).
Status syncPath(const std::string &path);

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_IO_CHECKPOINTFILES_H
