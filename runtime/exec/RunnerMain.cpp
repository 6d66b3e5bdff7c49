//===- RunnerMain.cpp - entry point of compiled programs ------------------===//

#include "runtime/device/cpu/BlasCore.h"
#include "runtime/exec/Runner.h"

int main(int argc, char **argv) {
  // Before anything starts threads: may execute the program again with
  // OpenBLAS told which kernels suit this CPU (BlasCore.h).
  dtcc::runtime::cpu::selectBlasKernels(argv);
  return dtcc::runtime::runnerMain(argc, argv);
}
