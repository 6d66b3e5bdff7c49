// RUN: dtcc-opt %s -dtcc-graph-autodiff -dtcc-graph-optimizer="optimizer=sgd" -verify-diagnostics
// RUN: dtcc-opt %s -dtcc-graph-autodiff -dtcc-graph-optimizer="optimizer=sgd momentum=0.9" | FileCheck %s

// Tests that offloading the optimizer with SGD without momentum (no state
// to move to the host) is an error, and that with momentum it is not.
// CHECK: dgraph.sgd
// expected-error @+1 {{optimizer offload moves the optimizer's state (Adam's moments, SGD's momentum) to the host, but SGD without momentum has none: train with adamw or --momentum > 0, or without --offload}}
module attributes {dshard.plan = #dshard.plan<mesh = [], zero = 0, micro_batches = 1, schedule = "1f1b", recompute = none, offload = optimizer>} {
dgraph.variable @w : tensor<4xf32> = dense<1.0> {trainable}
func.func @main() -> (tensor<f32> {dgraph.name = "loss"}) {
  %w = dgraph.load @w : tensor<4xf32>
  %s = dgraph.reduce_sum %w, dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %s : tensor<f32>
}
}
