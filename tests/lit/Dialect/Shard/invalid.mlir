// RUN: dtcc-opt %s -split-input-file -verify-diagnostics

module attributes {dshard.mesh = #dshard.mesh<[dp = 2]>} {
  func.func @f(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
    // expected-error @+1 {{expected a sharding of rank 2}}
    %c = dshard.constraint %x, <[{dp}]> : tensor<8x4xf32>
    return %c : tensor<8x4xf32>
  }
}

// -----

module attributes {dshard.mesh = #dshard.mesh<[dp = 2]>} {
  func.func @f(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
    // expected-error @+1 {{expected kind sum, max, min or prod, got 'avg'}}
    %r = dshard.all_reduce %x "dp" {kind = "avg"} : tensor<8x4xf32>
    return %r : tensor<8x4xf32>
  }
}

// -----

module attributes {dshard.mesh = #dshard.mesh<[dp = 2]>} {
  func.func @f(%x: tensor<8x4xf32>) -> tensor<12x4xf32> {
    // expected-error @+1 {{expected dim 0}}
    %g = dshard.all_gather %x "dp" dim = 0 : (tensor<8x4xf32>) -> tensor<12x4xf32>
    return %g : tensor<12x4xf32>
  }
}

// -----

module attributes {dshard.mesh = #dshard.mesh<[dp = 2]>} {
  func.func @f(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
    // expected-error @+1 {{expected root < 2}}
    %b = dshard.broadcast %x "dp" root = 2 : tensor<8x4xf32>
    return %b : tensor<8x4xf32>
  }
}

// -----

// expected-error @+1 {{mesh axis}}
module attributes {dshard.mesh = #dshard.mesh<[dp = 0]>} {
}

// -----

module attributes {dshard.mesh = #dshard.mesh<[dp = 2, tp = 2]>} {
  func.func @f(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
    // expected-error @+1 {{appear}}
    %c = dshard.constraint %x, <[{dp}, {dp}]> : tensor<8x4xf32>
    return %c : tensor<8x4xf32>
  }
}

// -----

// Tests that the shardings passes record on other dialects' ops are checked
// (a malformed one used to crash dtcc-shard-partition): one per operand...
func.func @f(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
  // expected-error @+1 {{'dgraph.exp' op expected 'dshard.in_shardings' to hold #dshard.sharding attributes, got 1 : i64}}
  %y = dgraph.exp %x {dshard.in_shardings = [1]} : tensor<8x4xf32>
  return %y : tensor<8x4xf32>
}

// -----

// ... as many as operands...
func.func @f(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
  // expected-error @+1 {{'dgraph.exp' op expected 'dshard.in_shardings' to be an array of 1 #dshard.sharding attributes (one per operand), got []}}
  %y = dgraph.exp %x {dshard.in_shardings = []} : tensor<8x4xf32>
  return %y : tensor<8x4xf32>
}

// -----

// ... of the value's rank...
func.func @f(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
  // expected-error @+1 {{'dgraph.exp' op expected 'dshard.shardings' of result 0 to have 2 dimensions, as its type 'tensor<8x4xf32>', got #dshard.sharding<[{}]>}}
  %y = dgraph.exp %x {dshard.shardings = [#dshard.sharding<[{}]>]} : tensor<8x4xf32>
  return %y : tensor<8x4xf32>
}

// -----

// ... and a mesh that is a mesh.
// expected-error @+1 {{'builtin.module' op expected 'dshard.mesh' to be a #dshard.mesh attribute, got "dp=2"}}
module attributes {dshard.mesh = "dp=2"} {
}

// -----

// Every dshard.* attribute on another dialect's op is declared
// (dialects/Shard/IR/ShardOps.h) and its value checked.
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{expected 'dshard.stage' to be an integer >= 0, got -1 : i64}}
  %y = dgraph.neg %x {dshard.stage = -1 : i64} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{expected 'dshard.pass' to be "forward" or "backward", got "sideways"}}
  %y = dgraph.neg %x {dshard.micro = 0 : i64, dshard.pass = "sideways"} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// expected-error @+1 {{expected 'dshard.zero' to be a unit attribute, got 1 : i64}}
dgraph.variable @w : tensor<4xf32> = dense<0.0> {dshard.zero = 1 : i64}

// -----

// expected-error @+1 {{expected 'dshard.half_copy' to be a symbol reference, got "w/half"}}
dgraph.variable @w : tensor<4xf32> = dense<0.0> {dshard.half_copy = "w/half"}

// -----

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{unknown dshard attribute 'dshard.stages'}}
  %y = dgraph.neg %x {dshard.stages = 1 : i64} : tensor<4xf32>
  return %y : tensor<4xf32>
}
