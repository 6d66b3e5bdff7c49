//===- CheckpointFiles.cpp - the files of a checkpoint directory ----------===//

#include "runtime/io/CheckpointFiles.h"

#include "runtime/base/HostTensor.h"
#include "runtime/io/Crc32c.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
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


} // namespace

bool isDirectoryPath(const std::string &path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool pathExists(const std::string &path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

/// Lists the entries of `dir` other than "." and "..".
StatusOr<std::vector<std::string>> listDirectory(const std::string &dir) {
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
  DTCC_ASSIGN_OR_RETURN(std::vector<std::string> names, listDirectory(dir));
  for (const std::string &name : names) {
    std::string path = dir + "/" + name;
    if (isDirectoryPath(path))
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
    if (!pathExists(dir))
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

StatusOr<uint32_t> fileCrc32c(const std::string &path, int64_t *bytes) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0)
    return errno == ENOENT ? notFound("'", path, "' is missing")
                           : unavailable("cannot open '", path,
                                         "': ", errnoText());
  FileCloser closer(fd);
  std::vector<char> buf(1 << 20);
  uint32_t crc = 0;
  int64_t total = 0;
  while (true) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return unavailable("cannot read '", path, "': ", errnoText());
    if (n == 0)
      break;
    crc = crc32c(crc, buf.data(), static_cast<size_t>(n));
    total += n;
  }
  if (bytes)
    *bytes = total;
  return crc;
}

StatusOr<format::Checkpoint> verifyCheckpoint(const std::string &dir) {
  DTCC_ASSIGN_OR_RETURN(format::Checkpoint manifest,
                        readCheckpointManifest(dir));
  for (const format::Checkpoint::Variable &v : manifest.variables()) {
    const std::string path = dir + "/" + v.file();
    std::vector<int64_t> shape(v.shape().begin(), v.shape().end());
    const int64_t expected =
        product(shape) * dtypeSize(static_cast<DType>(v.dtype()));
    struct stat st;
    if (stat(path.c_str(), &st) != 0)
      return dataLoss("'", path, "' (variable '", v.name(), "') is missing");
    if (st.st_size != expected)
      return dataLoss("'", path, "' (variable '", v.name(), "') has ",
                      st.st_size, " bytes, expected ", expected, " for ",
                      HostTensor::typeString(static_cast<DType>(v.dtype()),
                                             shape),
                      st.st_size < expected ? " (truncated)" : "");
    if (v.crc32c().empty())
      continue; // written before checkpoints had checksums
    int64_t bytes = 0;
    DTCC_ASSIGN_OR_RETURN(uint32_t crc, fileCrc32c(path, &bytes));
    if (crc32cHex(crc) != v.crc32c())
      return dataLoss("'", path, "' (variable '", v.name(),
                      "') has CRC-32C ", crc32cHex(crc), ", the manifest says ",
                      v.crc32c(), " (corrupt)");
  }
  return manifest;
}

} // namespace dtcc::runtime
