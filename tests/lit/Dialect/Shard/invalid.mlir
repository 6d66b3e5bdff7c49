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
