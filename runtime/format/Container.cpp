//===- Container.cpp - reading and writing program containers -------------===//

#include "runtime/format/Container.h"

#include "runtime/base/Random.h"

#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dtcc::runtime {
namespace {

constexpr char kMagic[8] = {'D', 'T', 'C', 'C', 'P', 'R', 'G', '1'};
constexpr uint64_t kDataAlignment = 4096;

/// The last bytes of every container.
struct Trailer {
  char magic[8];
  uint64_t programOffset;
  uint64_t programSize;
  uint64_t dataOffset;
  uint64_t dataSize;
  uint64_t programHash; // FNV-1a of the program bytes
};
static_assert(sizeof(Trailer) == 48, "trailer layout is part of the format");


} // namespace

LoadedProgram::~LoadedProgram() {
  if (mapping_)
    munmap(mapping_, mappingSize_);
}

bool LoadedProgram::hasProgram(const std::string &path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in)
    return false;
  auto size = static_cast<uint64_t>(in.tellg());
  if (size < sizeof(Trailer))
    return false;
  Trailer t;
  in.seekg(size - sizeof(Trailer));
  in.read(reinterpret_cast<char *>(&t), sizeof(t));
  return in && std::memcmp(t.magic, kMagic, 8) == 0;
}

StatusOr<std::unique_ptr<LoadedProgram>>
LoadedProgram::open(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0)
    return notFound("cannot open '", path, "': ", std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    return notFound("cannot stat '", path, "': ", std::strerror(errno));
  }
  auto size = static_cast<uint64_t>(st.st_size);
  if (size < sizeof(Trailer)) {
    ::close(fd);
    return invalidArgument("'", path, "' is not a dtcc program (too small)");
  }
  void *mapping = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (mapping == MAP_FAILED)
    return unavailable("cannot map '", path, "': ", std::strerror(errno));
  std::unique_ptr<LoadedProgram> loaded(new LoadedProgram());
  loaded->mapping_ = mapping;
  loaded->mappingSize_ = size;
  const auto *bytes = static_cast<const uint8_t *>(mapping);

  Trailer t;
  std::memcpy(&t, bytes + size - sizeof(Trailer), sizeof(Trailer));
  if (std::memcmp(t.magic, kMagic, 8) != 0)
    return invalidArgument("'", path,
                           "' is not a dtcc program (no program trailer)");
  uint64_t end = size - sizeof(Trailer);
  if (t.programOffset > end || t.programSize > end - t.programOffset ||
      t.dataOffset > end || t.dataSize > end - t.dataOffset)
    return dataLoss("'", path, "' is truncated or corrupt: the trailer points ",
                    "outside the file");
  if (fnv1a(bytes + t.programOffset, t.programSize) != t.programHash)
    return dataLoss("'", path, "' is corrupt: the program checksum differs");
  if (!loaded->program_.ParseFromArray(bytes + t.programOffset,
                                       static_cast<int>(t.programSize)))
    return dataLoss("'", path, "' is corrupt: the program does not parse");
  if (loaded->program_.format_version() != kProgramFormatVersion)
    return invalidArgument("'", path, "' has program format version ",
                           loaded->program_.format_version(),
                           "; this runtime reads version ",
                           kProgramFormatVersion);
  loaded->data_ = bytes + t.dataOffset;
  loaded->dataSize_ = t.dataSize;
  return loaded;
}

Status writeContainer(const std::string &path, const std::string &prefixPath,
                      const format::Program &program, const std::string &data) {
  std::string prefix;
  if (!prefixPath.empty()) {
    std::ifstream in(prefixPath, std::ios::binary);
    if (!in)
      return notFound("cannot read the runner '", prefixPath, "'");
    prefix.assign(std::istreambuf_iterator<char>(in), {});
    // A runner that already carries a program would confuse the loader.
    if (LoadedProgram::hasProgram(prefixPath))
      return invalidArgument("'", prefixPath, "' already contains a program");
  }
  std::string programBytes;
  if (!program.SerializeToString(&programBytes))
    return internalError("cannot serialize the program (over 2 GiB?)");

  std::string tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out)
    return notFound("cannot write '", tmp, "': ", std::strerror(errno));
  Trailer t;
  std::memcpy(t.magic, kMagic, 8);
  out.write(prefix.data(), prefix.size());
  t.programOffset = prefix.size();
  t.programSize = programBytes.size();
  t.programHash = fnv1a(reinterpret_cast<const uint8_t *>(programBytes.data()),
                        programBytes.size());
  out.write(programBytes.data(), programBytes.size());
  uint64_t pos = t.programOffset + t.programSize;
  uint64_t aligned = (pos + kDataAlignment - 1) / kDataAlignment * kDataAlignment;
  std::string pad(aligned - pos, '\0');
  out.write(pad.data(), pad.size());
  t.dataOffset = aligned;
  t.dataSize = data.size();
  out.write(data.data(), data.size());
  out.write(reinterpret_cast<const char *>(&t), sizeof(t));
  out.close();
  if (!out)
    return Status(StatusCode::kUnavailable,
                  strCat("cannot write '", tmp, "' (disk full?)"));
  if (!prefixPath.empty())
    chmod(tmp.c_str(), 0755);
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    return unavailable("cannot rename '", tmp, "' to '", path, "': ",
                       std::strerror(errno));
  return Status::ok();
}

} // namespace dtcc::runtime
