// RUN: dtcc-opt %s -split-input-file -verify-diagnostics -dtcc-shard-partition

// dtcc-shard-partition's errors, each at the op it names.

// Tests that partition needs a placed module.
// expected-error @+1 {{expected a module with a dshard.mesh (run dtcc-shard-annotate first)}}
module {
  func.func @train_step(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
    return %x : tensor<8x4xf32>
  }
}

// -----

// Tests that a variable's split must divide its dimension.
module attributes {dshard.mesh = #dshard.mesh<[dp = 3]>} {
  // expected-error @+1 {{cannot be split as}}
  dgraph.variable @w : tensor<4x2xf32> = dense<0.5> {trainable, dshard.sharding = #dshard.sharding<[{dp}, {}]>}
  func.func @train_step(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
    return %x : tensor<8x4xf32>
  }
}
