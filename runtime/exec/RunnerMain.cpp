//===- RunnerMain.cpp - entry point of compiled programs ------------------===//

#include "runtime/exec/Runner.h"

int main(int argc, char **argv) { return dtcc::runtime::runnerMain(argc, argv); }
