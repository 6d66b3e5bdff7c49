//===- RunnerMain.cpp - entry point of compiled programs ------------------===//

#include "runtime/device/cpu/BlasCore.h"
#include "runtime/exec/Runner.h"

int main(int argc, char **argv) {
  // Before anything starts threads: may execute the program again with
  // the settings OpenBLAS and OpenMP read when they load (BlasCore.h).
  dtcc::runtime::cpu::applyLoadTimeSettings(argv);
  return dtcc::runtime::runnerMain(argc, argv);
}
