//===- Checkpoint.cpp - saving and restoring training state ---------------===//

#include "runtime/exec/Checkpoint.h"

#include "runtime/base/HostTensor.h"
#include "runtime/comm/CommContext.h"
#include "runtime/exec/Executable.h"
#include "runtime/io/Crc32c.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <map>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

namespace dtcc::runtime {
namespace {

std::string errnoText() { return std::strerror(errno); }
bool exists(const std::string &path) { return pathExists(path); }
bool isDirectory(const std::string &path) { return isDirectoryPath(path); }
StatusOr<std::vector<std::string>> listDir(const std::string &dir) {
  return listDirectory(dir);
}

/// "ckpt/" and "ckpt" name the same directory; DIR.tmp must sit beside it.
StatusOr<std::string> normalizeDir(const std::string &dir) {
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/')
    d.pop_back();
  if (d.empty() || d == "/" || d == "." || d == "..")
    return invalidArgument("'", dir, "' cannot be a checkpoint directory");
  return d;
}

Status checkContiguous(const std::string &name, const TensorView &view) {
  if (!view.isContiguous())
    return unimplemented("variable '", name,
                         "' is not contiguous; checkpoints need contiguous "
                         "variables");
  return Status::ok();
}

} // namespace

namespace {

/// Where a variable's elements on this rank lie in the whole tensor, and
/// whether this rank writes them (one rank per distinct block: the one at
/// coordinate 0 on every axis that does not split the variable).
struct VariableLayout {
  std::vector<int64_t> global;
  std::vector<BlockPiece> pieces;
  bool writes = true;
};

StatusOr<VariableLayout> layoutOf(const Executable &exe, const std::string &name,
                                  const TensorView &view) {
  VariableLayout l;
  const format::Sharding *s = exe.variableSharding(name);
  const bool onMesh = exe.comm() != nullptr;
  // A variable of one pipeline stage is written by that stage's ranks.
  const int64_t stage = exe.variableStage(name);
  const bool otherStage = stage >= 0 && exe.meshCoords().coord("pp") != stage;
  if (!s) {
    l.global = view.shape;
    l.pieces.push_back({std::vector<int64_t>(view.shape.size(), 0),
                        std::vector<int64_t>(view.shape.size(), 0), view.shape});
    bool first = true;
    if (onMesh)
      for (const std::string &axis : exe.comm()->mesh().axisNames())
        if (exe.meshCoords().coord(axis) != 0 && !(axis == "pp" && stage >= 0))
          first = false;
    l.writes = !otherStage && first;
    return l;
  }
  l.global.assign(s->global_shape().begin(), s->global_shape().end());
  DTCC_ASSIGN_OR_RETURN(l.pieces, blockPieces(*s, exe.meshCoords()));
  std::set<std::string> splitting;
  for (const format::DimSharding &d : s->dims())
    splitting.insert(d.axes().begin(), d.axes().end());
  for (const std::string &axis : exe.comm()->mesh().axisNames())
    if (!splitting.count(axis) && exe.meshCoords().coord(axis) != 0 &&
        !(axis == "pp" && stage >= 0))
      l.writes = false;
  l.writes &= !otherStage;
  return l;
}

/// Waits for every rank of the mesh (nothing on one device).
Status meshBarrier(const Executable &exe) {
  if (!exe.comm())
    return Status::ok();
  DTCC_ASSIGN_OR_RETURN(Communicator * all,
                        exe.comm()->group(exe.comm()->mesh().axisNames()));
  return all->barrier();
}

bool isRootRank(const Executable &exe) {
  return !exe.comm() || exe.comm()->mesh().world().rank() == 0;
}

/// The variables a checkpoint leaves out, each with the one it is derived
/// from: the half copies of master weights (`rounded_from`), which a
/// restore makes again from their masters. So a checkpoint does not depend
/// on whether the program that wrote it kept such copies.
std::map<std::string, std::string> roundedCopies(const format::Program &program) {
  std::map<std::string, std::string> out;
  for (const format::Variable &v : program.variables())
    if (!v.rounded_from().empty())
      out[v.name()] = v.rounded_from();
  return out;
}

/// Lists every variable of `program` (all pipeline stages) but the
/// roundedCopies in `manifest`, each in the file of its index in the
/// program, the same on every rank; returns each variable's file by name.
std::map<std::string, std::string>
listVariables(const format::Program &program, format::Checkpoint &manifest) {
  manifest.set_format_version(kCheckpointFormatVersion);
  manifest.clear_variables();
  std::map<std::string, std::string> files;
  for (int i = 0; i < program.variables_size(); ++i) {
    const format::Variable &v = program.variables(i);
    if (!v.rounded_from().empty())
      continue;
    const format::Buffer &b = program.buffers(v.buffer());
    format::Checkpoint::Variable *entry = manifest.add_variables();
    entry->set_name(v.name());
    entry->set_dtype(b.dtype());
    if (v.has_sharding())
      for (int64_t d : v.sharding().global_shape())
        entry->add_shape(d);
    else
      for (int64_t d : b.shape())
        entry->add_shape(d);
    entry->set_file(std::to_string(i) + ".bin");
    files[v.name()] = entry->file();
  }
  return files;
}

} // namespace

Status saveCheckpoint(Executable &exe, const std::string &dirArg,
                      format::Checkpoint manifest) {
  if (exe.comm())
    return saveShardedCheckpoint(exe, dirArg, std::move(manifest));
  DTCC_ASSIGN_OR_RETURN(std::string dir, normalizeDir(dirArg));
  const bool replacing = exists(dir);
  if (replacing) {
    if (!isDirectory(dir))
      return invalidArgument("cannot save a checkpoint to '", dir,
                             "': it is a file");
    DTCC_ASSIGN_OR_RETURN(std::vector<std::string> names, listDir(dir));
    if (!names.empty() && !exists(dir + "/" + kCheckpointManifest))
      return invalidArgument("cannot save a checkpoint to '", dir,
                             "': it is a non-empty directory that is not a "
                             "checkpoint, so it is not replaced");
  }
  // A DIR.tmp left by an interrupted save is incomplete by construction.
  const std::string tmp = dir + ".tmp";
  if (exists(tmp))
    DTCC_RETURN_IF_ERROR(
        removeCheckpointDir(tmp).withContext("removing an interrupted save"));
  if (mkdir(tmp.c_str(), 0755) != 0)
    return unavailable("cannot create '", tmp, "': ", errnoText());

  manifest.set_format_version(kCheckpointFormatVersion);
  manifest.clear_variables();
  std::vector<uint8_t> host;
  int index = 0;
  const std::map<std::string, std::string> derived = roundedCopies(exe.program());
  for (const auto &[name, view] : exe.variables()) {
    if (derived.count(name))
      continue;
    DTCC_RETURN_IF_ERROR(checkContiguous(name, view));
    host.resize(view.sizeInBytes());
    DTCC_RETURN_IF_ERROR(
        exe.readBuffer(view, host.data()));
    format::Checkpoint::Variable *entry = manifest.add_variables();
    entry->set_name(name);
    entry->set_dtype(static_cast<int32_t>(view.dtype));
    for (int64_t d : view.shape)
      entry->add_shape(d);
    entry->set_file(std::to_string(index++) + ".bin");
    DTCC_RETURN_IF_ERROR(
        writeTensorBox(tmp + "/" + entry->file(), view.dtype, view.shape,
                       TensorBox::whole(view.shape), host.data()));
    entry->set_crc32c(crc32cHex(crc32c(0, host.data(), host.size())));
  }
  // The manifest last: a directory with one is complete.
  DTCC_RETURN_IF_ERROR(writeCheckpointManifest(tmp, manifest));
  DTCC_RETURN_IF_ERROR(syncPath(tmp));

  if (!replacing) {
    if (rename(tmp.c_str(), dir.c_str()) != 0)
      return unavailable("cannot rename '", tmp, "' to '", dir,
                         "': ", errnoText());
    return Status::ok();
  }
  // Swap atomically where the file system can; the old one ends in DIR.tmp.
  if (renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(),
                RENAME_EXCHANGE) == 0)
    return removeCheckpointDir(tmp).withContext(
        "removing the previous checkpoint");
  if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
    return unavailable("cannot move '", tmp, "' to '", dir, "': ", errnoText());
  // Otherwise in two renames; between them the previous one is in DIR.old.
  const std::string old = dir + ".old";
  if (exists(old))
    DTCC_RETURN_IF_ERROR(removeCheckpointDir(old));
  if (rename(dir.c_str(), old.c_str()) != 0)
    return unavailable("cannot rename '", dir, "' to '", old,
                       "': ", errnoText());
  if (rename(tmp.c_str(), dir.c_str()) != 0)
    return unavailable("cannot rename '", tmp, "' to '", dir,
                       "': ", errnoText(), " (the previous checkpoint is in '",
                       old, "')");
  return removeCheckpointDir(old).withContext(
      "removing the previous checkpoint");
}

StatusOr<format::Checkpoint> loadCheckpoint(Executable &exe,
                                            const std::string &dirArg) {
  DTCC_ASSIGN_OR_RETURN(std::string dir, normalizeDir(dirArg));
  DTCC_ASSIGN_OR_RETURN(format::Checkpoint manifest,
                        readCheckpointManifest(dir));
  std::map<std::string, const format::Checkpoint::Variable *> entries;
  for (const format::Checkpoint::Variable &v : manifest.variables())
    entries[v.name()] = &v;

  // Check everything before touching a variable, and list every problem.
  // A half copy is read from its master's file (written by a program with
  // or without such copies), rounded.
  const std::map<std::string, std::string> derived = roundedCopies(exe.program());
  auto fileOf = [&](const std::string &name) {
    auto d = derived.find(name);
    return d == derived.end() ? name : d->second;
  };
  std::string problems;
  std::set<std::string> used;
  for (const auto &[name, view] : exe.variables()) {
    DTCC_RETURN_IF_ERROR(checkContiguous(name, view));
    DTCC_ASSIGN_OR_RETURN(VariableLayout layout, layoutOf(exe, name, view));
    if (derived.count(name)) {
      auto master = entries.find(fileOf(name));
      if (master != entries.end() &&
          (static_cast<DType>(master->second->dtype()) != DType::kF32 ||
           std::vector<int64_t>(master->second->shape().begin(),
                                master->second->shape().end()) != layout.global))
        problems += strCat("\n  '", name, "': rounded from '", fileOf(name),
                           "', which the checkpoint has as ",
                           HostTensor::typeString(
                               static_cast<DType>(master->second->dtype()),
                               {master->second->shape().begin(),
                                master->second->shape().end()}),
                           ", expected ",
                           HostTensor::typeString(DType::kF32, layout.global));
      continue; // its master's entry is checked as that variable
    }
    const int64_t globalBytes =
        HostTensor(view.dtype, layout.global).bytes.size();
    auto it = entries.find(name);
    if (it == entries.end()) {
      problems += strCat("\n  missing: '", name, "' (", view.typeString(), ")");
      continue;
    }
    used.insert(name);
    const format::Checkpoint::Variable &v = *it->second;
    std::vector<int64_t> shape(v.shape().begin(), v.shape().end());
    std::string saved =
        HostTensor::typeString(static_cast<DType>(v.dtype()), shape);
    if (static_cast<DType>(v.dtype()) != view.dtype || shape != layout.global) {
      problems += strCat("\n  '", name, "': the program has ",
                         HostTensor::typeString(view.dtype, layout.global),
                         ", the checkpoint ", saved);
      continue;
    }
    struct stat st;
    std::string path = dir + "/" + v.file();
    if (stat(path.c_str(), &st) != 0)
      problems +=
          strCat("\n  '", name, "': its file ", v.file(), " is missing");
    else if (st.st_size != globalBytes)
      problems += strCat("\n  '", name, "': its file ", v.file(), " has ",
                         st.st_size, " bytes, expected ", globalBytes);
  }
  // (Variables of other pipeline stages are in the program, not this rank.)
  std::set<std::string> inProgram;
  for (const format::Variable &v : exe.program().variables())
    inProgram.insert(v.name());
  for (const format::Checkpoint::Variable &v : manifest.variables())
    if (!used.count(v.name()) && !inProgram.count(v.name()))
      problems += strCat("\n  not in the program: '", v.name(), "'");
  if (!problems.empty())
    return invalidArgument(
        "the checkpoint in '", dir, "'",
        manifest.model().empty() ? "" : " (model '" + manifest.model() + "')",
        " does not match this program:", problems);
  // Files that changed since they were written (a torn write, a bit flip).
  for (const std::string &name : used) {
    const format::Checkpoint::Variable &v = *entries.at(name);
    if (v.crc32c().empty())
      continue;
    DTCC_ASSIGN_OR_RETURN(uint32_t crc, fileCrc32c(dir + "/" + v.file()));
    if (crc32cHex(crc) != v.crc32c())
      return dataLoss("'", dir, "/", v.file(), "' (variable '", name,
                      "') has CRC-32C ", crc32cHex(crc),
                      ", the manifest says ", v.crc32c(), " (corrupt)");
  }

  // Each rank reads its blocks: the checkpoint does not depend on the plan
  // that wrote it.
  std::vector<uint8_t> host, piece, master;
  for (const auto &[name, view] : exe.variables()) {
    const format::Checkpoint::Variable &v = *entries.at(fileOf(name));
    DTCC_ASSIGN_OR_RETURN(VariableLayout layout, layoutOf(exe, name, view));
    host.resize(view.sizeInBytes());
    int64_t elem = dtypeSize(view.dtype);
    const bool rounded = derived.count(name) > 0;
    for (const BlockPiece &p : layout.pieces) {
      TensorBox box{p.globalStart, p.size};
      piece.resize(box.numel() * elem);
      if (rounded) {
        master.resize(box.numel() * sizeof(float));
        DTCC_RETURN_IF_ERROR(readTensorBox(dir + "/" + v.file(), DType::kF32,
                                           layout.global, box, master.data()));
        storeFloats(reinterpret_cast<const float *>(master.data()),
                    box.numel(), view.dtype, piece.data());
      } else
        DTCC_RETURN_IF_ERROR(readTensorBox(dir + "/" + v.file(), view.dtype,
                                           layout.global, box, piece.data()));
      copyBox(piece.data(), p.size, std::vector<int64_t>(p.size.size(), 0),
              host.data(), view.shape, p.localStart, p.size, elem);
    }
    DTCC_RETURN_IF_ERROR(
        exe.writeBuffer(view, host.data()));
  }
  return manifest;
}

Status saveShardedCheckpoint(Executable &exe, const std::string &dirArg,
                             format::Checkpoint manifest) {
  DTCC_ASSIGN_OR_RETURN(std::string dir, normalizeDir(dirArg));
  const std::string tmp = dir + ".tmp";
  const bool root = isRootRank(exe);
  // Rank 0 prepares DIR.tmp; every rank writes its blocks into it; rank 0
  // writes the manifest and moves it into place.
  Status prepared = Status::ok();
  if (root) {
    if (exists(dir) && !isDirectory(dir))
      prepared = invalidArgument("cannot save a checkpoint to '", dir,
                                 "': it is a file");
    else if (exists(dir) && !exists(dir + "/" + kCheckpointManifest) &&
             !listDir(dir).value().empty())
      prepared = invalidArgument("cannot save a checkpoint to '", dir,
                                 "': it is a non-empty directory that is not "
                                 "a checkpoint, so it is not replaced");
    else if (exists(tmp))
      prepared = removeCheckpointDir(tmp);
    if (prepared.isOk() && mkdir(tmp.c_str(), 0755) != 0)
      prepared = unavailable("cannot create '", tmp, "': ", errnoText());
  }
  DTCC_RETURN_IF_ERROR(prepared);
  DTCC_RETURN_IF_ERROR(meshBarrier(exe));

  const std::map<std::string, std::string> files =
      listVariables(exe.program(), manifest);
  std::vector<uint8_t> host, piece;
  for (const auto &[name, view] : exe.variables()) {
    if (!files.count(name))
      continue; // a half copy, made again from its master on restore
    DTCC_RETURN_IF_ERROR(checkContiguous(name, view));
    DTCC_ASSIGN_OR_RETURN(VariableLayout layout, layoutOf(exe, name, view));
    if (!layout.writes)
      continue;
    host.resize(view.sizeInBytes());
    DTCC_RETURN_IF_ERROR(
        exe.readBuffer(view, host.data()));
    int64_t elem = dtypeSize(view.dtype);
    for (const BlockPiece &p : layout.pieces) {
      TensorBox box{p.globalStart, p.size};
      piece.resize(box.numel() * elem);
      copyBox(host.data(), view.shape, p.localStart, piece.data(), p.size,
              std::vector<int64_t>(p.size.size(), 0), p.size, elem);
      DTCC_RETURN_IF_ERROR(writeTensorBox(tmp + "/" + files.at(name), view.dtype,
                                          layout.global, box, piece.data()));
    }
  }
  DTCC_RETURN_IF_ERROR(meshBarrier(exe));
  Status moved = Status::ok();
  if (root) {
    // The checksums of what every rank wrote, read back from the files.
    for (format::Checkpoint::Variable &v : *manifest.mutable_variables()) {
      auto crc = fileCrc32c(tmp + "/" + v.file());
      if (!crc.isOk()) {
        moved = crc.status();
        break;
      }
      v.set_crc32c(crc32cHex(crc.value()));
    }
  }
  if (root && moved.isOk()) {
    moved = writeCheckpointManifest(tmp, manifest);
    if (moved.isOk())
      moved = syncPath(tmp);
    if (moved.isOk() && exists(dir))
      moved = removeCheckpointDir(dir);
    if (moved.isOk() && rename(tmp.c_str(), dir.c_str()) != 0)
      moved = unavailable("cannot rename '", tmp, "' to '", dir,
                          "': ", errnoText());
  }
  DTCC_RETURN_IF_ERROR(moved);
  return meshBarrier(exe);
}

StatusOr<CheckpointSnapshot> snapshotCheckpoint(Executable &exe,
                                                format::Checkpoint manifest) {
  CheckpointSnapshot snapshot;
  const std::map<std::string, std::string> files =
      listVariables(exe.program(), manifest);
  std::vector<uint8_t> host;
  const std::map<std::string, std::string> derived = roundedCopies(exe.program());
  for (const auto &[name, view] : exe.variables()) {
    if (derived.count(name))
      continue; // made again from its master on restore
    DTCC_RETURN_IF_ERROR(checkContiguous(name, view));
    DTCC_ASSIGN_OR_RETURN(VariableLayout layout, layoutOf(exe, name, view));
    if (!layout.writes)
      continue;
    auto it = files.find(name);
    if (it == files.end())
      return internalError("variable '", name, "' is not in the program");
    host.resize(view.sizeInBytes());
    DTCC_RETURN_IF_ERROR(
        exe.readBuffer(view, host.data()));
    CheckpointSnapshot::Tensor tensor;
    tensor.file = it->second;
    tensor.dtype = view.dtype;
    tensor.globalShape = layout.global;
    const int64_t elem = dtypeSize(view.dtype);
    for (const BlockPiece &p : layout.pieces) {
      CheckpointPiece piece;
      piece.box = TensorBox{p.globalStart, p.size};
      piece.bytes.resize(piece.box.numel() * elem);
      copyBox(host.data(), view.shape, p.localStart, piece.bytes.data(),
              p.size, std::vector<int64_t>(p.size.size(), 0), p.size, elem);
      tensor.pieces.push_back(std::move(piece));
    }
    snapshot.tensors.push_back(std::move(tensor));
  }
  snapshot.manifest = std::move(manifest);
  return snapshot;
}

} // namespace dtcc::runtime
