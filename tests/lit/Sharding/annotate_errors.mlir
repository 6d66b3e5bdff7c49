// RUN: dtcc-opt %s -split-input-file -verify-diagnostics -dtcc-shard-annotate

// dtcc-shard-annotate's errors, each at the op it names.

// Tests that annotation needs the module's plan.
// expected-error @+1 {{expected a module with a dshard.plan (run dtcc-plan-set first)}}
module {
  func.func @train_step(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
    return %x : tensor<8x4xf32>
  }
}

// -----

// Tests that a pipelined plan needs its stages cut first.
// expected-error @+1 {{mesh axis 'pp' (size 2): cut the step into stages with dtcc-shard-pipeline first}}
module attributes {dshard.plan = #dshard.plan<mesh = [pp = 2]>} {
  func.func @train_step(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
    return %x : tensor<8x4xf32>
  }
}

// -----

// Tests that a sharded program trains.
// expected-error @+1 {{a sharded program trains: expected @train_step (compile with --train)}}
module attributes {dshard.plan = #dshard.plan<mesh = [dp = 2]>} {
  func.func @main(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
    return %x : tensor<8x4xf32>
  }
}

// -----

// Tests that every rank takes an equal share of each batch.
module attributes {dshard.plan = #dshard.plan<mesh = [dp = 3]>} {
  // expected-error @+1 {{input 'x' of @train_step has batch 8 (dimension 0), which dp=3 does not divide}}
  func.func @train_step(%x: tensor<8x4xf32> {dgraph.name = "x"}) -> tensor<8x4xf32> {
    return %x : tensor<8x4xf32>
  }
}

// -----

// Tests that a step's micro-batches split over dp too.
module attributes {dshard.plan = #dshard.plan<mesh = [pp = 2, dp = 4], micro_batches = 4>} {
  // expected-error @+1 {{input 'x' of @train_step_pp0: 4 micro-batches of 2 rows each do not split over dp=4}}
  func.func @train_step_pp0(%x: tensor<8x4xf32> {dgraph.name = "x"}) -> tensor<8x4xf32> attributes {dshard.stage = 0 : i64} {
    return %x : tensor<8x4xf32>
  }
}

// -----

// Tests that context parallelism needs attention to split the sequence of.
module attributes {dshard.plan = #dshard.plan<mesh = [cp = 2]>} {
  dgraph.variable @w : tensor<4x4xf32> = dense<0.5> {trainable}
  // expected-error @+1 {{mesh axis 'cp' (size 2) splits the sequence of attention, but @train_step has no attention (a matmul of two activations)}}
  func.func @train_step(%x: tensor<2x8x4xf32> {dgraph.name = "x"}) -> tensor<2x8x4xf32> {
    %w = dgraph.load @w : tensor<4x4xf32>
    %y = dgraph.matmul %x, %w : (tensor<2x8x4xf32>, tensor<4x4xf32>) -> tensor<2x8x4xf32>
    return %y : tensor<2x8x4xf32>
  }
}

// -----

// Tests that every context-parallel rank takes an equal chunk of each
// sequence.
module attributes {dshard.plan = #dshard.plan<mesh = [cp = 4]>} {
  // expected-error @+1 {{input 'x' of @train_step has sequence 6 (dimension 1), which cp=4 does not divide}}
  func.func @train_step(%x: tensor<2x6x4xf32> {dgraph.name = "x"}) -> tensor<2x4x4xf32> {
    %s = dgraph.matmul %x, %x {transpose_lhs} : (tensor<2x6x4xf32>, tensor<2x6x4xf32>) -> tensor<2x4x4xf32>
    return %s : tensor<2x4x4xf32>
  }
}

// -----

// Tests that sequence parallelism needs tensor parallelism.
// expected-error @+1 {{sequence parallelism splits the sequence over tp: expected a mesh with tp > 1, got #dshard.mesh<[dp = 2]>}}
module attributes {dshard.plan = #dshard.plan<mesh = [dp = 2], sequence_parallel = true>} {
  func.func @train_step(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
    return %x : tensor<8x4xf32>
  }
}
