//===- Container.h - programs inside executables and files ------*- C++ -*-===//
//
// A compiled artifact is the runner executable followed by the serialized
// Program, its data section and a fixed-size trailer that locates both. A
// plain program file is the same without the runner in front.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_FORMAT_CONTAINER_H
#define DTCC_RUNTIME_FORMAT_CONTAINER_H

#include "runtime/base/Status.h"
#include "runtime/format/Program.pb.h"

#include <cstdint>
#include <memory>
#include <string>

namespace dtcc::runtime {

/// The program format version this runtime reads and the compiler writes.
constexpr int32_t kProgramFormatVersion = 1;

/// Whether `ref` names bytes inside a data section of `dataSize` bytes (a
/// damaged or truncated file's offsets may not).
inline bool insideDataSection(const format::DataRef &ref, uint64_t dataSize) {
  return ref.offset() >= 0 && ref.size() >= 0 &&
         uint64_t(ref.offset()) <= dataSize &&
         uint64_t(ref.size()) <= dataSize - uint64_t(ref.offset());
}

/// A program read from a container, with its data section mapped.
class LoadedProgram {
public:
  ~LoadedProgram();
  LoadedProgram(const LoadedProgram &) = delete;
  LoadedProgram &operator=(const LoadedProgram &) = delete;

  /// Opens `path` and reads the program at its end. Errors say whether the
  /// file is missing, not a dtcc program, truncated or corrupt.
  static StatusOr<std::unique_ptr<LoadedProgram>> open(const std::string &path);
  /// Whether `path` ends with a container trailer (a compiled executable
  /// rather than the bare runner).
  static bool hasProgram(const std::string &path);

  const format::Program &program() const { return program_; }
  const uint8_t *data() const { return data_; }
  uint64_t dataSize() const { return dataSize_; }

private:
  LoadedProgram() = default;
  format::Program program_;
  void *mapping_ = nullptr;
  size_t mappingSize_ = 0;
  const uint8_t *data_ = nullptr;
  uint64_t dataSize_ = 0;
};

/// Writes `prefixPath`'s bytes (the runner; empty for none), the program and
/// the data section to `path`, and makes it executable when a prefix is given.
Status writeContainer(const std::string &path, const std::string &prefixPath,
                      const format::Program &program, const std::string &data);

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_FORMAT_CONTAINER_H
