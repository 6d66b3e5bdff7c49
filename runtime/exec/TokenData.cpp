//===- TokenData.cpp - memory-mapped token files for training -------------===//

#include "runtime/exec/TokenData.h"

#include "runtime/base/Random.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dtcc::runtime {

StatusOr<TokenDType> parseTokenDType(const std::string &name) {
  if (name == "uint16")
    return TokenDType::kU16;
  if (name == "uint32")
    return TokenDType::kU32;
  return invalidArgument("--data-dtype expects uint16 or uint32, got '", name,
                         "'");
}

const char *tokenDTypeName(TokenDType dtype) {
  return dtype == TokenDType::kU16 ? "uint16" : "uint32";
}

int64_t tokenSampleOffset(uint64_t seed, uint64_t k, int64_t numTokens,
                          int64_t seqLen) {
  uint64_t range = static_cast<uint64_t>(numTokens - seqLen);
  return static_cast<int64_t>(splitmix64(seed ^ splitmix64(k)) % range);
}

TokenData::~TokenData() {
  if (mapping_)
    munmap(mapping_, mappingSize_);
}

StatusOr<std::unique_ptr<TokenData>> TokenData::open(const std::string &path,
                                                     TokenDType dtype,
                                                     int64_t seqLen,
                                                     int64_t vocabSize) {
  if (seqLen < 1)
    return invalidArgument("token data needs a sequence length of at least "
                           "1, got ",
                           seqLen);
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0)
    return errno == ENOENT ? notFound("token file '", path, "' not found")
                           : unavailable("cannot open token file '", path,
                                         "': ", std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalidArgument("token file '", path, "' is not a regular file");
  }
  const int64_t bytes = st.st_size;
  const int64_t width = dtype == TokenDType::kU16 ? 2 : 4;
  const char *dtypeName = tokenDTypeName(dtype);
  if (bytes % width != 0) {
    ::close(fd);
    return invalidArgument("token file '", path, "' has ", bytes,
                           " bytes, not a whole number of ", dtypeName,
                           " tokens (is --data-dtype right?)");
  }
  const int64_t numTokens = bytes / width;
  if (numTokens < seqLen + 1) {
    ::close(fd);
    return invalidArgument("token file '", path, "' has ", numTokens, " ",
                           dtypeName, " tokens; a sequence of ", seqLen,
                           " needs at least ", seqLen + 1);
  }
  void *mapping = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  int mapErrno = errno;
  ::close(fd);
  if (mapping == MAP_FAILED)
    return unavailable("cannot map token file '", path,
                       "': ", std::strerror(mapErrno));
  // Samples are drawn from anywhere in the file.
  madvise(mapping, bytes, MADV_RANDOM);
  std::unique_ptr<TokenData> data(new TokenData());
  data->path_ = path;
  data->dtype_ = dtype;
  data->seqLen_ = seqLen;
  data->numTokens_ = numTokens;
  data->vocabSize_ = vocabSize;
  data->mapping_ = mapping;
  data->mappingSize_ = bytes;
  return data;
}

uint32_t TokenData::token(int64_t i) const {
  // Token files are little-endian, as is every host dtcc runs on.
  const char *base = static_cast<const char *>(mapping_);
  if (dtype_ == TokenDType::kU16) {
    uint16_t v;
    std::memcpy(&v, base + 2 * i, 2);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, base + 4 * i, 4);
  return v;
}

namespace {

template <typename T>
Status fillRows(const TokenData &data, uint64_t seed, uint64_t firstSample,
                int64_t rows, int64_t vocabSize, T *ids, T *labels) {
  const int64_t s = data.seqLen();
  for (int64_t r = 0; r < rows; ++r) {
    int64_t offset =
        tokenSampleOffset(seed, firstSample + r, data.numTokens(), s);
    for (int64_t j = 0; j <= s; ++j) {
      uint32_t t = data.token(offset + j);
      if (vocabSize > 0 && t >= static_cast<uint64_t>(vocabSize))
        return invalidArgument("token file '", data.path(), "' holds token ", t,
                               " at position ", offset + j,
                               ", outside the model's vocabulary of ",
                               vocabSize, " (is --data-dtype right?)");
      if (j < s)
        ids[r * s + j] = static_cast<T>(t);
      if (j > 0)
        labels[r * s + j - 1] = static_cast<T>(t);
    }
  }
  return Status::ok();
}

} // namespace

Status TokenData::fill(uint64_t seed, uint64_t firstSample, HostTensor &ids,
                       HostTensor &labels) const {
  if (ids.shape.size() != 2 || ids.shape[1] != seqLen_)
    return invalidArgument("token batches are [rows, ", seqLen_, "], got ",
                           ids.typeString());
  if (labels.shape != ids.shape || labels.dtype != ids.dtype)
    return invalidArgument("ids and labels differ: ", ids.typeString(), " and ",
                           labels.typeString());
  const int64_t rows = ids.shape[0];
  switch (ids.dtype) {
  case DType::kI32:
    return fillRows(*this, seed, firstSample, rows, vocabSize_,
                    ids.data<int32_t>(), labels.data<int32_t>());
  case DType::kI64:
    return fillRows(*this, seed, firstSample, rows, vocabSize_,
                    ids.data<int64_t>(), labels.data<int64_t>());
  default:
    return invalidArgument("token inputs must be i32 or i64, got ",
                           ids.typeString());
  }
}

} // namespace dtcc::runtime
