// RUN: dtcc-opt %s -split-input-file -dtcc-graph-mark-layers -verify-diagnostics

// Tests that layers are found in the forward model, not after autodiff.
module {
  func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
    return %x : tensor<2xf32>
  }
  // expected-error @+1 {{expected the forward model, got @train_step without layers: run dtcc-graph-mark-layers before dtcc-graph-autodiff}}
  func.func @train_step(%x: tensor<2xf32>) -> tensor<2xf32> {
    return %x : tensor<2xf32>
  }
}
