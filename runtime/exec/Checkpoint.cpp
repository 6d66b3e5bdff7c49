//===- Checkpoint.cpp - saving and restoring training state ---------------===//

#include "runtime/exec/Checkpoint.h"

#include "runtime/base/HostTensor.h"
#include "runtime/comm/CommContext.h"
#include "runtime/exec/Executable.h"

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

/// Closes a file descriptor when it goes out of scope.
class FileCloser {
public:
  explicit FileCloser(int fd) : fd_(fd) {}
  ~FileCloser() {
    if (fd_ >= 0)
      ::close(fd_);
  }

private:
  int fd_;
};

int64_t product(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

Status checkBox(const std::string &path, const std::vector<int64_t> &shape,
                const TensorBox &box) {
  bool ok = box.start.size() == shape.size() && box.size.size() == shape.size();
  for (size_t d = 0; ok && d < shape.size(); ++d)
    ok = box.start[d] >= 0 && box.size[d] >= 0 &&
         box.start[d] + box.size[d] <= shape[d];
  if (!ok)
    return invalidArgument(
        "tensor file '", path, "': box at ", shapeText(box.start), " of size ",
        shapeText(box.size), " is not inside shape ", shapeText(shape));
  return Status::ok();
}

/// Calls `fn(fileOffset, dataOffset, bytes)` for each contiguous run of
/// `box` in the row-major file of `shape`.
template <typename Fn>
Status forEachRun(const std::vector<int64_t> &shape, const TensorBox &box,
                  int64_t elementSize, Fn &&fn) {
  if (box.numel() == 0)
    return Status::ok();
  const int rank = static_cast<int>(shape.size());
  // Trailing dimensions the box covers whole merge into one run with the
  // first partial dimension in front of them.
  int64_t run = 1;
  int d = rank - 1;
  while (d >= 0) {
    run *= box.size[d];
    if (box.start[d] != 0 || box.size[d] != shape[d])
      break;
    --d;
  }
  std::vector<int64_t> strides(rank, 1);
  for (int i = rank - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * shape[i + 1];
  // Iterate over the outer dimensions [0, d).
  std::vector<int64_t> index(std::max(d, 0), 0);
  int64_t dataOffset = 0;
  while (true) {
    int64_t offset = 0;
    for (int i = 0; i < d; ++i)
      offset += (box.start[i] + index[i]) * strides[i];
    if (d >= 0)
      offset += box.start[d] * strides[d];
    DTCC_RETURN_IF_ERROR(
        fn(offset * elementSize, dataOffset * elementSize, run * elementSize));
    dataOffset += run;
    int i = d - 1;
    while (i >= 0 && ++index[i] == box.size[i])
      index[i--] = 0;
    if (i < 0)
      return Status::ok();
  }
}

Status writeAll(int fd, const std::string &path, const char *data,
                int64_t bytes, int64_t offset) {
  while (bytes > 0) {
    ssize_t n = pwrite(fd, data, bytes, offset);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return unavailable("cannot write '", path, "': ", errnoText());
    data += n;
    bytes -= n;
    offset += n;
  }
  return Status::ok();
}

Status readAll(int fd, const std::string &path, char *data, int64_t bytes,
               int64_t offset) {
  while (bytes > 0) {
    ssize_t n = pread(fd, data, bytes, offset);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return unavailable("cannot read '", path, "': ", errnoText());
    if (n == 0)
      return dataLoss("'", path, "' ends early (truncated?)");
    data += n;
    bytes -= n;
    offset += n;
  }
  return Status::ok();
}

bool isDirectory(const std::string &path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool exists(const std::string &path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

/// Lists the entries of `dir` other than "." and "..".
StatusOr<std::vector<std::string>> listDir(const std::string &dir) {
  DIR *d = opendir(dir.c_str());
  if (!d)
    return unavailable("cannot read directory '", dir, "': ", errnoText());
  std::vector<std::string> names;
  while (dirent *e = readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..")
      names.push_back(name);
  }
  closedir(d);
  return names;
}

/// Removes a checkpoint directory: files only, so that a mistaken path never
/// takes a tree of other data with it.
Status removeCheckpointDir(const std::string &dir) {
  DTCC_ASSIGN_OR_RETURN(std::vector<std::string> names, listDir(dir));
  for (const std::string &name : names) {
    std::string path = dir + "/" + name;
    if (isDirectory(path))
      return invalidArgument("'", dir, "' holds a directory '", name,
                             "'; a checkpoint holds files only, so it is "
                             "left alone");
  }
  for (const std::string &name : names)
    if (unlink((dir + "/" + name).c_str()) != 0)
      return unavailable("cannot remove '", dir, "/", name, "': ", errnoText());
  if (rmdir(dir.c_str()) != 0)
    return unavailable("cannot remove '", dir, "': ", errnoText());
  return Status::ok();
}

Status syncPath(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0)
    return unavailable("cannot open '", path, "': ", errnoText());
  FileCloser closer(fd);
  if (fsync(fd) != 0)
    return unavailable("cannot sync '", path, "': ", errnoText());
  return Status::ok();
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

TensorBox TensorBox::whole(const std::vector<int64_t> &shape) {
  TensorBox box;
  box.start.assign(shape.size(), 0);
  box.size = shape;
  return box;
}

int64_t TensorBox::numel() const { return product(size); }

Status writeTensorBox(const std::string &path, DType dtype,
                      const std::vector<int64_t> &globalShape,
                      const TensorBox &box, const void *data) {
  DTCC_RETURN_IF_ERROR(checkBox(path, globalShape, box));
  const int64_t elementSize = dtypeSize(dtype);
  const int64_t total = product(globalShape) * elementSize;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT, 0644);
  if (fd < 0)
    return unavailable("cannot create '", path, "': ", errnoText());
  FileCloser closer(fd);
  struct stat st;
  if (fstat(fd, &st) != 0)
    return unavailable("cannot stat '", path, "': ", errnoText());
  if (st.st_size > total)
    return invalidArgument("tensor file '", path, "' has ", st.st_size,
                           " bytes, more than a tensor<",
                           shapeText(globalShape), dtypeName(dtype), "> (",
                           total, ")");
  // Every writer of the file extends it to its full size, so the order in
  // which ranks write does not matter.
  if (st.st_size < total && ftruncate(fd, total) != 0)
    return unavailable("cannot extend '", path, "': ", errnoText());
  const char *bytes = static_cast<const char *>(data);
  DTCC_RETURN_IF_ERROR(forEachRun(
      globalShape, box, elementSize,
      [&](int64_t fileOffset, int64_t dataOffset, int64_t size) {
        return writeAll(fd, path, bytes + dataOffset, size, fileOffset);
      }));
  if (fsync(fd) != 0)
    return unavailable("cannot sync '", path, "': ", errnoText());
  return Status::ok();
}

Status readTensorBox(const std::string &path, DType dtype,
                     const std::vector<int64_t> &globalShape,
                     const TensorBox &box, void *data) {
  DTCC_RETURN_IF_ERROR(checkBox(path, globalShape, box));
  const int64_t elementSize = dtypeSize(dtype);
  const int64_t total = product(globalShape) * elementSize;
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0)
    return errno == ENOENT
               ? notFound("tensor file '", path, "' not found")
               : unavailable("cannot open '", path, "': ", errnoText());
  FileCloser closer(fd);
  struct stat st;
  if (fstat(fd, &st) != 0)
    return unavailable("cannot stat '", path, "': ", errnoText());
  if (st.st_size != total)
    return dataLoss("tensor file '", path, "' has ", st.st_size,
                    " bytes, expected ", total, " for ",
                    HostTensor::typeString(dtype, globalShape));
  char *bytes = static_cast<char *>(data);
  return forEachRun(globalShape, box, elementSize,
                    [&](int64_t fileOffset, int64_t dataOffset, int64_t size) {
                      return readAll(fd, path, bytes + dataOffset, size,
                                     fileOffset);
                    });
}

Status writeCheckpointManifest(const std::string &dir,
                               const format::Checkpoint &manifest) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  auto status =
      google::protobuf::util::MessageToJsonString(manifest, &json, options);
  if (!status.ok())
    return internalError("cannot encode the checkpoint manifest: ",
                         status.ToString());
  std::string path = dir + "/" + kCheckpointManifest;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    return unavailable("cannot create '", path, "': ", errnoText());
  FileCloser closer(fd);
  DTCC_RETURN_IF_ERROR(writeAll(fd, path, json.data(), json.size(), 0));
  if (fsync(fd) != 0)
    return unavailable("cannot sync '", path, "': ", errnoText());
  return Status::ok();
}

StatusOr<format::Checkpoint> readCheckpointManifest(const std::string &dir) {
  std::string path = dir + "/" + kCheckpointManifest;
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    if (errno != ENOENT)
      return unavailable("cannot open '", path, "': ", errnoText());
    if (!exists(dir))
      return notFound("no checkpoint at '", dir,
                      "': the directory does not exist");
    return notFound("'", dir, "' is not a checkpoint: it has no ",
                    kCheckpointManifest);
  }
  std::string json;
  {
    FileCloser closer(fd);
    struct stat st;
    if (fstat(fd, &st) != 0)
      return unavailable("cannot stat '", path, "': ", errnoText());
    json.resize(st.st_size);
    DTCC_RETURN_IF_ERROR(readAll(fd, path, json.data(), json.size(), 0));
  }
  format::Checkpoint manifest;
  auto status = google::protobuf::util::JsonStringToMessage(json, &manifest);
  if (!status.ok())
    return dataLoss(
        "'", path, "' is not a valid checkpoint manifest: ", status.ToString());
  if (manifest.format_version() < 1 ||
      manifest.format_version() > kCheckpointFormatVersion)
    return dataLoss("'", path, "' has checkpoint format version ",
                    manifest.format_version(), "; this runtime reads version ",
                    kCheckpointFormatVersion);
  std::set<std::string> names;
  for (const format::Checkpoint::Variable &v : manifest.variables()) {
    std::string what = strCat("'", path, "': variable '", v.name(), "'");
    if (!names.insert(v.name()).second)
      return dataLoss(what, " appears twice");
    if (!isValidDType(v.dtype()) || v.dtype() == 0)
      return dataLoss(what, " has unknown element type ", v.dtype());
    for (int64_t d : v.shape())
      if (d < 0)
        return dataLoss(what, " has a negative dimension");
    // Files live inside the checkpoint: no paths elsewhere.
    if (v.file().empty() || v.file().find('/') != std::string::npos ||
        v.file() == "." || v.file() == "..")
      return dataLoss(what, " has an invalid file name '", v.file(), "'");
  }
  return manifest;
}

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
  for (const auto &[name, view] : exe.variables()) {
    DTCC_RETURN_IF_ERROR(checkContiguous(name, view));
    host.resize(view.sizeInBytes());
    DTCC_RETURN_IF_ERROR(
        exe.device().copyDeviceToHost(host.data(), view.data, host.size()));
    format::Checkpoint::Variable *entry = manifest.add_variables();
    entry->set_name(name);
    entry->set_dtype(static_cast<int32_t>(view.dtype));
    for (int64_t d : view.shape)
      entry->add_shape(d);
    entry->set_file(std::to_string(index++) + ".bin");
    DTCC_RETURN_IF_ERROR(
        writeTensorBox(tmp + "/" + entry->file(), view.dtype, view.shape,
                       TensorBox::whole(view.shape), host.data()));
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
  std::string problems;
  std::set<std::string> used;
  for (const auto &[name, view] : exe.variables()) {
    DTCC_RETURN_IF_ERROR(checkContiguous(name, view));
    DTCC_ASSIGN_OR_RETURN(VariableLayout layout, layoutOf(exe, name, view));
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

  // Each rank reads its blocks: the checkpoint does not depend on the plan
  // that wrote it.
  std::vector<uint8_t> host, piece;
  for (const auto &[name, view] : exe.variables()) {
    const format::Checkpoint::Variable &v = *entries.at(name);
    DTCC_ASSIGN_OR_RETURN(VariableLayout layout, layoutOf(exe, name, view));
    host.resize(view.sizeInBytes());
    int64_t elem = dtypeSize(view.dtype);
    for (const BlockPiece &p : layout.pieces) {
      TensorBox box{p.globalStart, p.size};
      piece.resize(box.numel() * elem);
      DTCC_RETURN_IF_ERROR(readTensorBox(dir + "/" + v.file(), view.dtype,
                                         layout.global, box, piece.data()));
      copyBox(piece.data(), p.size, std::vector<int64_t>(p.size.size(), 0),
              host.data(), view.shape, p.localStart, p.size, elem);
    }
    DTCC_RETURN_IF_ERROR(
        exe.device().copyHostToDevice(view.data, host.data(), host.size()));
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

  // The manifest lists every variable of the program (all pipeline stages),
  // each in the file of its index in the program, the same on every rank.
  manifest.set_format_version(kCheckpointFormatVersion);
  manifest.clear_variables();
  std::map<std::string, std::string> files;
  const format::Program &program = exe.program();
  for (int i = 0; i < program.variables_size(); ++i) {
    const format::Variable &v = program.variables(i);
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
  std::vector<uint8_t> host, piece;
  for (const auto &[name, view] : exe.variables()) {
    DTCC_RETURN_IF_ERROR(checkContiguous(name, view));
    DTCC_ASSIGN_OR_RETURN(VariableLayout layout, layoutOf(exe, name, view));
    if (!layout.writes)
      continue;
    host.resize(view.sizeInBytes());
    DTCC_RETURN_IF_ERROR(
        exe.device().copyDeviceToHost(host.data(), view.data, host.size()));
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

} // namespace dtcc::runtime
