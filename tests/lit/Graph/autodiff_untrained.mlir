// RUN: dtcc-opt %s -split-input-file -dtcc-graph-autodiff -verify-diagnostics | FileCheck %s
// RUN: dtcc-opt %s -split-input-file -dtcc-graph-autodiff -dtcc-graph-optimizer="weight-decay=0.1" -verify-diagnostics | FileCheck %s --check-prefix=OPT

// Tests that a parameter read only by a comparison (a learned threshold,
// `h * (h > thr)`) has no gradient path to the loss: it gets no gradient,
// becomes non-trainable and is listed in dgraph.untrained, so the optimizer
// neither updates nor decays it and keeps no state for it (PyTorch's
// optimizers skip a parameter whose .grad is None).
// CHECK: module attributes {dgraph.untrained = ["thr"]}
// CHECK: dgraph.variable @thr : tensor<4xf32>{{$}}
// CHECK: dgraph.variable @w : tensor<4xf32> {trainable}
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<f32> {dgraph.name = "loss"}, tensor<4xf32> {dgraph.grad_of = @w, dgraph.name = "grad/w"})
// OPT-NOT: thr/adam
// OPT-LABEL: func.func @train_step
// OPT-NOT: dgraph.load @thr/adam
// OPT: dgraph.adamw
// OPT-NOT: dgraph.adamw
// OPT: dgraph.store %{{.*}}, @w
// OPT-NOT: @thr
// OPT: return
dgraph.variable @thr : tensor<4xf32> {trainable}
dgraph.variable @w : tensor<4xf32> {trainable}
// expected-warning @+1 {{parameter 'thr' has no gradient path to the loss: it is not trained (as PyTorch's optimizers skip a parameter whose .grad is None)}}
func.func @main(%x: tensor<4xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
  %w = dgraph.load @w : tensor<4xf32>
  %thr = dgraph.load @thr : tensor<4xf32>
  %h = dgraph.mul %x, %w : tensor<4xf32>
  %keep = dgraph.gt %h, %thr : tensor<4xf32>
  %gate = dgraph.cast %keep : tensor<4xi1> to tensor<4xf32>
  %y = dgraph.mul %h, %gate : tensor<4xf32>
  %l = dgraph.reduce_sum %y, dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests that a parameter whose gradient is zero only because an op on its
// path has none (floor), or only numerically (a ReLU that is dead for every
// input), is still a parameter with a (zero) gradient, as in PyTorch, where
// its .grad is a tensor of zeros and weight decay applies.
// CHECK-NOT: dgraph.untrained
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: tensor<4xf32> {dgraph.grad_of = @s, dgraph.name = "grad/s"}
// CHECK-SAME: tensor<4xf32> {dgraph.grad_of = @b, dgraph.name = "grad/b"}
// OPT-LABEL: func.func @train_step
// OPT-COUNT-2: dgraph.adamw
dgraph.variable @s : tensor<4xf32> {trainable}
dgraph.variable @b : tensor<4xf32> {trainable}
func.func @main(%x: tensor<4xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
  %s = dgraph.load @s : tensor<4xf32>
  %b = dgraph.load @b : tensor<4xf32>
  %f = dgraph.floor %s : tensor<4xf32>
  %h = dgraph.add %x, %b : tensor<4xf32>
  %r = dgraph.relu %h : tensor<4xf32>
  %y = dgraph.mul %r, %f : tensor<4xf32>
  %l = dgraph.reduce_sum %y, dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests that no gradient flows through dgraph.stop_gradient (the ONNX
// importer's straight-through estimator of a fake quantization): a
// parameter read only through one has no gradient path (untrained, as a
// PyTorch buffer), the gradient of one read both directly and through one
// is the direct part alone (x - stop_gradient(x) passes dy, no more), and
// no stop_gradient is left in either function afterwards.
// CHECK: module attributes {dgraph.untrained = ["scale"]}
// CHECK: dgraph.variable @scale : tensor<4xf32>{{$}}
// CHECK-NOT: stop_gradient
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<f32> {dgraph.name = "loss"}, tensor<4xf32> {dgraph.grad_of = @v, dgraph.name = "grad/v"})
// CHECK-NOT: stop_gradient
// CHECK: %[[SEED:.*]] = dgraph.constant {dgraph.grad_seed}
// CHECK-NOT: dgraph.mul
// CHECK: %[[G:.*]] = dgraph.broadcast_in_dim %[[SEED]]
// CHECK-NOT: dgraph.mul
// CHECK: return %{{.*}}, %[[G]]
dgraph.variable @scale : tensor<4xf32> {trainable}
dgraph.variable @v : tensor<4xf32> {trainable}
// expected-warning @+1 {{parameter 'scale' has no gradient path to the loss}}
func.func @main(%x: tensor<4xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
  %s = dgraph.load @scale : tensor<4xf32>
  %v = dgraph.load @v : tensor<4xf32>
  %sd = dgraph.stop_gradient %s : tensor<4xf32>
  %vd = dgraph.stop_gradient %v : tensor<4xf32>
  %q = dgraph.mul %vd, %sd : tensor<4xf32>
  %z = dgraph.sub %v, %vd : tensor<4xf32>
  %y = dgraph.add %q, %z : tensor<4xf32>
  %l = dgraph.reduce_sum %y, dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
