// RUN: not dtcc-opt %s -dtcc-plan-set="mesh=dp=3" -dtcc-shard-annotate 2>&1 | FileCheck %s --check-prefix=DIVIDE
// RUN: not dtcc-opt %s -dtcc-plan-set="mesh=dp" -dtcc-shard-annotate 2>&1 | FileCheck %s --check-prefix=SPEC
// RUN: not dtcc-opt %s -dtcc-plan-set="mesh=dp=2,dp=2" -dtcc-shard-annotate 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not dtcc-opt %s -dtcc-plan-set="mesh=dp=2 zero=4" -dtcc-shard-annotate 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: not dtcc-opt %s -dtcc-shard-propagate 2>&1 | FileCheck %s --check-prefix=NOMESH

module {
  dgraph.variable @w : tensor<4x2xf32> = dense<0.5> {trainable}
  func.func @train_step(%x: tensor<8x4xf32> {dgraph.name = "x"}) -> (tensor<8x2xf32> {dgraph.name = "y"}) {
    %w = dgraph.load @w : tensor<4x2xf32>
    %y = dgraph.matmul %x, %w : (tensor<8x4xf32>, tensor<4x2xf32>) -> tensor<8x2xf32>
    return %y : tensor<8x2xf32>
  }
}
// DIVIDE: error: input 'x' of @train_step has batch 8 (dimension 0), which dp=3 does not divide
// SPEC: error: invalid mesh 'dp': expected AXIS=SIZE with SIZE >= 1, got 'dp'
// TWICE: error: invalid mesh 'dp=2,dp=2': mesh axis 'dp' appears twice
// ZERO: error: invalid plan: expected a ZeRO stage 0, 1, 2 or 3, got 4
// NOMESH: error: expected a module with a dshard.mesh (run dtcc-shard-annotate first)
