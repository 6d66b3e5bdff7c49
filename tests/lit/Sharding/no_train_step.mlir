// RUN: not dtcc-opt %s -dtcc-plan-set="mesh=dp=2" -dtcc-shard-annotate 2>&1 | FileCheck %s
// RUN: not dtcc-opt %s -dtcc-plan-set="mesh=dp=2,pp=2" -dtcc-shard-annotate 2>&1 | FileCheck %s --check-prefix=PP

module {
  func.func @main(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
    return %x : tensor<8x4xf32>
  }
}
// CHECK: error: a sharded program trains: expected @train_step (compile with --train)
// PP: error: mesh axis 'pp' (size 2): cut the step into stages with dtcc-shard-pipeline first
