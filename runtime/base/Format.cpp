//===- Format.cpp ---------------------------------------------------------===//

#include "runtime/base/Format.h"

#include <cinttypes>
#include <cstdio>

namespace dtcc::runtime {

std::string formatBytes(int64_t bytes) {
  char buf[64];
  if (bytes >= (int64_t(1) << 30))
    std::snprintf(buf, sizeof(buf), "%.2f GiB", bytes / double(1 << 30));
  else if (bytes >= (1 << 20))
    std::snprintf(buf, sizeof(buf), "%.2f MiB", bytes / double(1 << 20));
  else if (bytes >= (1 << 10))
    std::snprintf(buf, sizeof(buf), "%.1f KiB", bytes / 1024.0);
  else
    std::snprintf(buf, sizeof(buf), "%" PRId64 " B", bytes);
  return buf;
}

std::string formatCount(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out = n < 0 ? "-" : "";
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0)
      out += ',';
    out += digits[i];
  }
  return out;
}

} // namespace dtcc::runtime
