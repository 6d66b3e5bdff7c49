//===- dtcc-opt.cpp - run dtcc passes on .mlir files ----------------------===//
//
// Like mlir-opt, with dtcc's dialects and passes registered.
//
//===----------------------------------------------------------------------===//

#include "dialects/Exec/IR/ExecOps.h"
#include "dialects/Graph/IR/GraphOps.h"
#include "passes/Graph/Passes.h"
#include "passes/Lowering/Passes.h"
#include "passes/Sharding/Passes.h"
#include "dialects/Shard/IR/ShardOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<dtcc::graph::GraphDialect, dtcc::shard::ShardDialect,
                  dtcc::exec::ExecDialect, mlir::func::FuncDialect>();
  dtcc::graph::registerGraphPasses();
  dtcc::lowering::registerLoweringPasses();
  dtcc::shard::registerShardingPasses();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "dtcc optimizer driver\n", registry));
}
