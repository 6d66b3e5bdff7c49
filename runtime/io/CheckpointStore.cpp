//===- CheckpointStore.cpp - a run's checkpoints, written in the background ===//

#include "runtime/io/CheckpointStore.h"

#include "runtime/base/Format.h"
#include "runtime/io/Crc32c.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dtcc::runtime {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// The step of a directory named step_<digits>; nullopt otherwise.
std::optional<int64_t> parseStepName(const std::string &name) {
  const std::string prefix = "step_";
  if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size() ||
      name.size() > prefix.size() + 18)
    return std::nullopt;
  int64_t step = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9')
      return std::nullopt;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

/// mkdir -p.
Status makeDirs(const std::string &path) {
  if (path.empty() || isDirectoryPath(path))
    return Status::ok();
  size_t slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0)
    DTCC_RETURN_IF_ERROR(makeDirs(path.substr(0, slash)));
  if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST)
    return unavailable("cannot create directory '", path,
                       "': ", std::strerror(errno));
  return Status::ok();
}

/// Writes `text` to a new file `path` (the markers of a sharded save),
/// whole or not at all: written beside it, then renamed into place, so
/// that a peer polling for the file never reads it half written (rank 0
/// read a failed rank's marker before its reason was in it).
Status writeSmallFile(const std::string &path, const std::string &text) {
  const std::string part = path + ".part";
  int fd = ::open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    return unavailable("cannot create '", part, "': ", std::strerror(errno));
  ssize_t n = text.empty() ? 0 : ::write(fd, text.data(), text.size());
  int err = errno;
  ::close(fd);
  if (n < 0 || size_t(n) != text.size()) {
    ::unlink(part.c_str());
    return unavailable("cannot write '", part, "': ",
                       n < 0 ? std::strerror(err) : "short write");
  }
  if (std::rename(part.c_str(), path.c_str()) != 0) {
    err = errno;
    ::unlink(part.c_str());
    return unavailable("cannot rename '", part, "' to '", path, "': ",
                       std::strerror(err));
  }
  return Status::ok();
}

std::string readSmallFile(const std::string &path) {
  std::string text;
  if (std::FILE *f = std::fopen(path.c_str(), "r")) {
    char buf[512];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0)
      text.append(buf, n);
    std::fclose(f);
  }
  return text;
}

std::string markerPath(const std::string &tmp, int rank, bool ok) {
  return strCat(tmp, "/.rank-", rank, ok ? ".ok" : ".failed");
}

} // namespace

std::string checkpointStepDir(const std::string &root, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08" PRId64, step);
  return root + "/" + name;
}

int64_t CheckpointSnapshot::bytes() const {
  int64_t n = 0;
  for (const Tensor &t : tensors)
    for (const CheckpointPiece &p : t.pieces)
      n += static_cast<int64_t>(p.bytes.size());
  return n;
}

StatusOr<std::vector<CheckpointEntry>> listCheckpoints(const std::string &root) {
  std::vector<CheckpointEntry> entries;
  if (!pathExists(root))
    return entries;
  DTCC_ASSIGN_OR_RETURN(std::vector<std::string> names, listDirectory(root));
  for (const std::string &name : names) {
    std::optional<int64_t> step = parseStepName(name);
    std::string dir = root + "/" + name;
    if (step && isDirectoryPath(dir) &&
        pathExists(dir + "/" + kCheckpointManifest))
      entries.push_back({*step, dir});
  }
  std::sort(entries.begin(), entries.end(),
            [](const CheckpointEntry &a, const CheckpointEntry &b) {
              return a.step > b.step;
            });
  return entries;
}

StatusOr<std::optional<CheckpointEntry>>
findLatestCheckpoint(const std::string &root,
                     const std::function<void(const std::string &)> &skipped) {
  DTCC_ASSIGN_OR_RETURN(std::vector<CheckpointEntry> entries,
                        listCheckpoints(root));
  for (const CheckpointEntry &e : entries) {
    auto manifest = verifyCheckpoint(e.dir);
    Status problem = manifest.status();
    if (problem.isOk() && manifest.value().step() != e.step)
      problem = dataLoss("its manifest says step ", manifest.value().step());
    if (problem.isOk())
      return std::optional<CheckpointEntry>(e);
    if (skipped)
      skipped(strCat("skipping checkpoint '", e.dir, "': ", problem.message()));
  }
  return std::optional<CheckpointEntry>();
}

Status applyRetention(const std::string &root, int keep) {
  if (keep <= 0)
    return Status::ok();
  DTCC_ASSIGN_OR_RETURN(std::vector<CheckpointEntry> entries,
                        listCheckpoints(root));
  if (static_cast<int>(entries.size()) <= keep)
    return Status::ok();
  const int64_t oldestKept = entries[keep - 1].step;
  Status first = Status::ok();
  DTCC_ASSIGN_OR_RETURN(std::vector<std::string> names, listDirectory(root));
  for (const std::string &name : names) {
    std::optional<int64_t> step = parseStepName(name);
    if (!step || *step >= oldestKept || !isDirectoryPath(root + "/" + name))
      continue;
    Status s = removeCheckpointDir(root + "/" + name);
    if (!s.isOk() && first.isOk())
      first = s;
  }
  return first;
}

//===----------------------------------------------------------------------===//
// AsyncCheckpointWriter
//===----------------------------------------------------------------------===//

AsyncCheckpointWriter::AsyncCheckpointWriter(CheckpointWriterOptions options)
    : options_(std::move(options)) {}

StatusOr<std::unique_ptr<AsyncCheckpointWriter>>
AsyncCheckpointWriter::create(CheckpointWriterOptions options) {
  if (options.root.empty())
    return invalidArgument("a checkpoint root is required");
  while (options.root.size() > 1 && options.root.back() == '/')
    options.root.pop_back();
  if (options.runId.empty())
    return invalidArgument("a checkpoint writer needs the run's id");
  DTCC_RETURN_IF_ERROR(makeDirs(options.root).withContext("--checkpoint-dir"));
  if (!isDirectoryPath(options.root))
    return invalidArgument("--checkpoint-dir '", options.root,
                           "' is not a directory");
  if (options.rank == 0) {
    // Saves that a killed run left half-written never became checkpoints.
    DTCC_ASSIGN_OR_RETURN(std::vector<std::string> names,
                          listDirectory(options.root));
    for (const std::string &name : names) {
      if (name.rfind(".step_", 0) != 0 ||
          (name.find(".tmp-") == std::string::npos &&
           name.find(".old-") == std::string::npos))
        continue;
      Status s = removeCheckpointDir(options.root + "/" + name);
      if (!s.isOk() && options.warn)
        options.warn(strCat("cannot remove an unfinished save: ", s.message()));
    }
  }
  std::unique_ptr<AsyncCheckpointWriter> writer(
      new AsyncCheckpointWriter(std::move(options)));
  writer->thread_ = std::thread([w = writer.get()] { w->loop(); });
  return writer;
}

AsyncCheckpointWriter::~AsyncCheckpointWriter() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !pending_ && !busy_; });
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable())
    thread_.join();
}

double AsyncCheckpointWriter::submit(CheckpointSnapshot snapshot) {
  auto start = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !pending_ && !busy_; });
  double waited = secondsSince(start);
  pending_ = std::move(snapshot);
  lock.unlock();
  cv_.notify_all();
  return waited;
}

void AsyncCheckpointWriter::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !pending_ && !busy_; });
}

int64_t AsyncCheckpointWriter::written() const {
  std::lock_guard<std::mutex> lock(mu_);
  return written_;
}

int64_t AsyncCheckpointWriter::failed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_;
}

double AsyncCheckpointWriter::busySeconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return busySeconds_;
}

void AsyncCheckpointWriter::loop() {
  while (true) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return pending_.has_value() || stopping_; });
    if (!pending_)
      return;
    CheckpointSnapshot snapshot = std::move(*pending_);
    pending_.reset();
    busy_ = true;
    lock.unlock();

    auto start = Clock::now();
    const int64_t step = snapshot.manifest.step();
    Status s = write(snapshot);
    double seconds = secondsSince(start);
    if (!s.isOk() && options_.warn)
      options_.warn(strCat("checkpoint of step ", step, " not saved: ",
                           s.message(),
                           "; training goes on and the previous checkpoint "
                           "stays the newest"));
    snapshot = CheckpointSnapshot(); // free the host copy before waking
    lock.lock();
    busy_ = false;
    busySeconds_ += seconds;
    ++(s.isOk() ? written_ : failed_);
    lock.unlock();
    cv_.notify_all();
  }
}

Status AsyncCheckpointWriter::write(CheckpointSnapshot &snapshot) {
  const int64_t step = snapshot.manifest.step();
  char name[64];
  std::snprintf(name, sizeof(name), ".step_%08" PRId64 ".tmp-", step);
  const std::string tmp = options_.root + "/" + name + options_.runId;
  if (mkdir(tmp.c_str(), 0755) != 0 && errno != EEXIST)
    return unavailable("cannot create '", tmp, "': ", std::strerror(errno));
  Status mine = Status::ok();
  for (const CheckpointSnapshot::Tensor &t : snapshot.tensors) {
    for (const CheckpointPiece &p : t.pieces) {
      mine = writeTensorBox(tmp + "/" + t.file, t.dtype, t.globalShape, p.box,
                            p.bytes.data());
      if (!mine.isOk())
        break;
    }
    if (!mine.isOk())
      break;
  }
  if (options_.worldSize > 1) {
    // Tell rank 0 how this rank's part went (a failed marker is empty when
    // even its text does not fit).
    Status marked =
        mine.isOk() ? writeSmallFile(markerPath(tmp, options_.rank, true), "")
                    : writeSmallFile(markerPath(tmp, options_.rank, false),
                                     mine.message());
    if (mine.isOk() && !marked.isOk())
      mine = marked;
    if (!marked.isOk() && !mine.isOk() && options_.rank != 0)
      (void)writeSmallFile(markerPath(tmp, options_.rank, false), "");
  }
  if (options_.rank != 0)
    return mine;
  // Every rank is done with DIR.tmp before rank 0 commits or removes it,
  // also when rank 0's own part failed: a peer still writing would
  // otherwise create it again after its removal and leave it behind.
  Status peers = waitForPeers(tmp);
  Status s = !mine.isOk() ? mine : !peers.isOk() ? peers : commit(snapshot, tmp);
  if (!s.isOk() && pathExists(tmp))
    (void)removeCheckpointDir(tmp);
  return s;
}

Status AsyncCheckpointWriter::waitForPeers(const std::string &tmp) {
  auto start = Clock::now();
  const auto deadline =
      start + std::chrono::duration_cast<Clock::duration>(
                  std::chrono::duration<double>(options_.peerTimeoutSeconds));
  std::vector<bool> done(options_.worldSize, false);
  done[0] = true;
  int remaining = options_.worldSize - 1;
  Status failed = Status::ok(); // the first rank's whose part failed
  while (remaining > 0) {
    for (int r = 1; r < options_.worldSize; ++r) {
      if (done[r])
        continue;
      if (pathExists(markerPath(tmp, r, false))) {
        std::string why = readSmallFile(markerPath(tmp, r, false));
        if (failed.isOk())
          failed = unavailable("rank ", r, " could not write its blocks",
                               why.empty() ? "" : ": " + why);
      } else if (!pathExists(markerPath(tmp, r, true))) {
        continue;
      }
      done[r] = true;
      --remaining;
    }
    if (remaining == 0)
      break;
    if (Clock::now() > deadline) {
      std::string missing;
      for (int r = 1; r < options_.worldSize; ++r)
        if (!done[r])
          missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      return deadlineExceeded("rank(s) ", missing,
                              " did not finish writing their blocks within ",
                              options_.peerTimeoutSeconds, " s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return failed;
}

Status AsyncCheckpointWriter::commit(CheckpointSnapshot &snapshot,
                                     const std::string &tmp) {
  const int64_t step = snapshot.manifest.step();
  // Checksums of the files as they are on disk.
  int64_t total = 0;
  for (format::Checkpoint::Variable &v :
       *snapshot.manifest.mutable_variables()) {
    const std::string path = tmp + "/" + v.file();
    int64_t expected = dtypeSize(static_cast<DType>(v.dtype()));
    for (int64_t d : v.shape())
      expected *= d;
    if (expected == 0 && !pathExists(path))
      DTCC_RETURN_IF_ERROR(writeSmallFile(path, ""));
    int64_t bytes = 0;
    DTCC_ASSIGN_OR_RETURN(uint32_t crc, fileCrc32c(path, &bytes));
    if (bytes != expected)
      return dataLoss("'", path, "' has ", bytes, " bytes after the save, "
                      "expected ", expected);
    v.set_crc32c(crc32cHex(crc));
    total += bytes;
  }
  for (int r = 1; r < options_.worldSize; ++r)
    ::unlink(markerPath(tmp, r, true).c_str());
  // The manifest last: with it the directory is a checkpoint.
  snapshot.manifest.set_format_version(kCheckpointFormatVersion);
  DTCC_RETURN_IF_ERROR(writeCheckpointManifest(tmp, snapshot.manifest));
  DTCC_RETURN_IF_ERROR(syncPath(tmp));
  const std::string dir = checkpointStepDir(options_.root, step);
  if (pathExists(dir)) {
    // A checkpoint of this step from an earlier attempt (it did not verify,
    // or this run would have resumed from it).
    char name[64];
    std::snprintf(name, sizeof(name), ".step_%08" PRId64 ".old-", step);
    const std::string old = options_.root + "/" + name + options_.runId;
    if (rename(dir.c_str(), old.c_str()) != 0)
      return unavailable("cannot move the earlier '", dir,
                         "' aside: ", std::strerror(errno));
    DTCC_RETURN_IF_ERROR(removeCheckpointDir(old));
  }
  if (rename(tmp.c_str(), dir.c_str()) != 0)
    return unavailable("cannot rename '", tmp, "' to '", dir,
                       "': ", std::strerror(errno));
  DTCC_RETURN_IF_ERROR(syncPath(options_.root));
  if (options_.committed)
    options_.committed(step);
  if (options_.log)
    options_.log(strCat("saved checkpoint ", dir, " (step ", step, ", ",
                        formatBytes(total), ", written in the background)"));
  Status kept = applyRetention(options_.root, options_.keep);
  if (!kept.isOk() && options_.warn)
    options_.warn(strCat("retention: ", kept.message()));
  return Status::ok();
}

} // namespace dtcc::runtime
