// RUN: dtcc-opt %s -split-input-file -allow-unregistered-dialect -verify-diagnostics -dtcc-plan-set="mesh=tp=2" -dtcc-plan-search-layouts

// Tests that a module without a training step is an error.

// expected-error @+1 {{a sharded program trains: expected @train_step (compile with --train)}}
module {
  func.func @main() {
    return
  }
}

// -----

// Tests that a module dtcc-shard-annotate already placed is an error: the
// search runs before it.

// expected-error @+1 {{the module is already placed on a mesh: dtcc-plan-search-layouts runs before dtcc-shard-annotate}}
module attributes {dshard.mesh = #dshard.mesh<[tp = 2]>} {
  func.func @train_step() {
    return
  }
}

// -----

// Tests that a step cut into pipeline stages is an error.

// expected-error @+1 {{expected a step without pipeline stages (@train_step), got @train_step_pp0}}
module {
  func.func @train_step_pp0() {
    return
  }
}

// -----

// Tests that an op without a sharding rule is an error at the op.

module {
  func.func @train_step(%x: tensor<4xf32>) -> tensor<4xf32> {
    // expected-error @+1 {{'test.opaque' op has no sharding rule: it cannot be placed on the mesh #dshard.mesh<[tp = 2]>}}
    %y = "test.opaque"(%x) : (tensor<4xf32>) -> tensor<4xf32>
    return %y : tensor<4xf32>
  }
}
