//===- Format.h - numbers for people: bytes, counts -------------*- C++ -*-===//

#ifndef DTCC_RUNTIME_BASE_FORMAT_H
#define DTCC_RUNTIME_BASE_FORMAT_H

#include <cstdint>
#include <string>

namespace dtcc::runtime {

/// "512 B", "12.5 KiB", "3.21 MiB", "1.50 GiB".
std::string formatBytes(int64_t bytes);

/// 1234567 -> "1,234,567".
std::string formatCount(int64_t n);

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_BASE_FORMAT_H
