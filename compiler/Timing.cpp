//===- Timing.cpp - where a compile's time goes ---------------------------===//

#include "compiler/Timing.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace dtcc {

bool timingRequested() {
  static const bool requested = [] {
    const char *v = std::getenv("DTCC_TIME_PASSES");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return requested;
}

namespace {
/// Destroyed at exit in reverse order: the root scope stops, then the
/// manager prints.
struct ProcessTiming {
  ProcessTiming() {
    manager.setEnabled(timingRequested());
    manager.setDisplayMode(mlir::DefaultTimingManager::DisplayMode::List);
    root = manager.getRootScope();
  }
  mlir::DefaultTimingManager manager;
  mlir::TimingScope root;
};
} // namespace

mlir::TimingScope &compilerTiming() {
  static ProcessTiming timing;
  return timing.root;
}

mlir::TimingScope nestedCompilerTiming(const std::string &name) {
  // Small integers: never the address of a TimingIdentifier, the other
  // keys of the root's children.
  static uintptr_t next = 0;
  return compilerTiming().nest(reinterpret_cast<const void *>(++next),
                               [&] { return name; });
}

} // namespace dtcc
