//===- Units.h - numbers for planner reports --------------------*- C++ -*-===//
//
// Planner reports use decimal units (GB = 1e9 bytes) like the papers they are
// checked against.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_PLANNER_UNITS_H
#define DTCC_PLANNER_UNITS_H

#include <cstdio>
#include <string>

namespace dtcc::planner {

/// "12.3 GB", "512 MB", "2.10 TB".
inline std::string formatBytes(double bytes) {
  char buf[48];
  double b = bytes < 0 ? -bytes : bytes;
  if (b >= 1e12)
    std::snprintf(buf, sizeof(buf), "%.2f TB", bytes / 1e12);
  else if (b >= 1e9)
    std::snprintf(buf, sizeof(buf), "%.1f GB", bytes / 1e9);
  else if (b >= 1e6)
    std::snprintf(buf, sizeof(buf), "%.0f MB", bytes / 1e6);
  else if (b >= 1e3)
    std::snprintf(buf, sizeof(buf), "%.0f kB", bytes / 1e3);
  else
    std::snprintf(buf, sizeof(buf), "%.0f B", bytes);
  return buf;
}

/// "12.3 s", "45.6 ms", "789 us".
inline std::string formatSeconds(double seconds) {
  char buf[48];
  if (seconds >= 1)
    std::snprintf(buf, sizeof(buf), "%.2f s", seconds);
  else if (seconds >= 1e-3)
    std::snprintf(buf, sizeof(buf), "%.1f ms", seconds * 1e3);
  else
    std::snprintf(buf, sizeof(buf), "%.0f us", seconds * 1e6);
  return buf;
}

/// "12.3%".
inline std::string formatPercent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f%%", fraction * 100);
  return buf;
}

/// "1.23 B", "124 M", "12,345".
inline std::string formatCount(double n) {
  char buf[48];
  if (n >= 1e12)
    std::snprintf(buf, sizeof(buf), "%.2f T", n / 1e12);
  else if (n >= 1e9)
    std::snprintf(buf, sizeof(buf), "%.2f B", n / 1e9);
  else if (n >= 1e6)
    std::snprintf(buf, sizeof(buf), "%.1f M", n / 1e6);
  else
    std::snprintf(buf, sizeof(buf), "%.0f", n);
  return buf;
}

} // namespace dtcc::planner

#endif // DTCC_PLANNER_UNITS_H
