// RUN: dtcc-opt %s -split-input-file -dtcc-graph-autodiff -dtcc-graph-mixed-precision="dtype=bf16 half-norms=false" | FileCheck %s
// RUN: dtcc-opt %s -split-input-file -dtcc-graph-autodiff -dtcc-graph-mixed-precision=dtype=bf16 | FileCheck %s --check-prefix=HALF
// RUN: dtcc-opt %s -split-input-file -dtcc-graph-autodiff -dtcc-graph-mixed-precision=dtype=bf16 -dtcc-graph-optimizer | FileCheck %s --check-prefix=OPT
// RUN: dtcc-opt %s -split-input-file -dtcc-graph-autodiff -dtcc-graph-mixed-precision="dtype=bf16 widen-terms=true" | FileCheck %s --check-prefix=WIDE
// RUN: dtcc-opt %s -split-input-file -dtcc-graph-autodiff -dtcc-graph-mixed-precision=dtype=fp16 | FileCheck %s --check-prefix=FP16
// RUN: dtcc-opt %s -split-input-file -dtcc-graph-autodiff -dtcc-graph-mixed-precision=dtype=fp32 | FileCheck %s --check-prefix=FP32

// Tests that weights are cast at their loads, matmuls run in bf16, with
// half-norms=false (PyTorch autocast) the norm and the softmax compute in
// fp32 between casts (the norm's statistics stay fp32 for its gradient), the
// loss stays fp32, and every gradient leaves @train_step in fp32 (so the
// optimizer updates fp32 masters).
// By default (half-norms) the norm, the softmax and their gradients read and
// write bf16, with the norm's scale and bias the bf16 copies of the masters
// and its statistics fp32, and no activation is widened to fp32 before the
// loss:
// HALF-LABEL: func.func @train_step
// HALF: %[[G:.*]] = dgraph.load @g : tensor<8xf32>
// HALF-NEXT: %[[GH:.*]] = dgraph.cast %[[G]] : tensor<8xf32> to tensor<8xbf16>
// HALF-NEXT: %[[B:.*]] = dgraph.load @b : tensor<8xf32>
// HALF-NEXT: %[[BH:.*]] = dgraph.cast %[[B]] : tensor<8xf32> to tensor<8xbf16>
// HALF: %[[H:.*]] = dgraph.matmul {{.*}} -> tensor<6x8xbf16>
// HALF-NEXT: %[[N:.*]], %[[MEAN:.*]], %[[RSTD:.*]] = dgraph.layer_norm %[[H]], %[[GH]], %[[BH]] {{.*}} : (tensor<6x8xbf16>, tensor<8xbf16>, tensor<8xbf16>) -> (tensor<6x8xbf16>, tensor<6xf32>, tensor<6xf32>)
// HALF-NEXT: %[[T:.*]] = dgraph.tanh %[[N]] : tensor<6x8xbf16>
// HALF-NEXT: %[[P:.*]] = dgraph.softmax %[[T]], dim = 1 : tensor<6x8xbf16>
// HALF-NEXT: dgraph.add %[[P]], %[[H]] : tensor<6x8xbf16>
// HALF-NOT: to tensor<6x8xf32>
// HALF: dgraph.softmax_grad %[[P]], %{{.*}}, dim = 1 : tensor<6x8xbf16>
// HALF: %[[DX:.*]], %[[DG:.*]], %[[DB:.*]] = dgraph.layer_norm_grad %[[H]], %[[GH]], %[[MEAN]], %[[RSTD]], %{{.*}} axis = 1 : (tensor<6x8xbf16>, tensor<8xbf16>, tensor<6xf32>, tensor<6xf32>, tensor<6x8xbf16>) -> (tensor<6x8xbf16>, tensor<8xbf16>, tensor<8xbf16>)
// HALF-DAG: %[[DBF:.*]] = dgraph.cast %[[DB]] : tensor<8xbf16> to tensor<8xf32>
// HALF-DAG: %[[DGF:.*]] = dgraph.cast %[[DG]] : tensor<8xbf16> to tensor<8xf32>
// HALF: dgraph.add %{{.*}}, %[[DX]] : tensor<6x8xbf16>
// HALF: return {{.*}}, %[[DGF]], %[[DBF]], {{.*}} : tensor<f32>, tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8x5xf32>
// CHECK: module attributes {dgraph.dtype = "bf16"
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<f32> {dgraph.name = "loss"}, tensor<4x8xf32> {{.*}}, tensor<8xf32> {{.*}}, tensor<8xf32> {{.*}}, tensor<8x5xf32> {{.*}})
// CHECK: %[[X:.*]] = dgraph.cast %arg0 : tensor<6x4xf32> to tensor<6x4xbf16>
// CHECK: %[[W1:.*]] = dgraph.load @w1 : tensor<4x8xf32>
// CHECK-NEXT: %[[W1H:.*]] = dgraph.cast %[[W1]] : tensor<4x8xf32> to tensor<4x8xbf16>
// CHECK: %[[G:.*]] = dgraph.load @g : tensor<8xf32>
// CHECK-NEXT: %[[B:.*]] = dgraph.load @b : tensor<8xf32>
// CHECK-NEXT: %[[W2:.*]] = dgraph.load @w2 : tensor<8x5xf32>
// CHECK-NEXT: %[[W2H:.*]] = dgraph.cast %[[W2]] : tensor<8x5xf32> to tensor<8x5xbf16>
// CHECK: %[[H:.*]] = dgraph.matmul %[[X]], %[[W1H]] : (tensor<6x4xbf16>, tensor<4x8xbf16>) -> tensor<6x8xbf16>
// CHECK-NEXT: %[[H32:.*]] = dgraph.cast %[[H]] : tensor<6x8xbf16> to tensor<6x8xf32>
// CHECK-NEXT: %[[N:.*]], %[[MEAN:.*]], %[[RSTD:.*]] = dgraph.layer_norm %[[H32]], %[[G]], %[[B]] {{.*}} -> (tensor<6x8xf32>, tensor<6xf32>, tensor<6xf32>)
// CHECK-NEXT: %[[N16:.*]] = dgraph.cast %[[N]] : tensor<6x8xf32> to tensor<6x8xbf16>
// CHECK-NEXT: %[[T:.*]] = dgraph.tanh %[[N16]] : tensor<6x8xbf16>
// CHECK-NEXT: %[[T32:.*]] = dgraph.cast %[[T]] : tensor<6x8xbf16> to tensor<6x8xf32>
// CHECK-NEXT: %[[P:.*]] = dgraph.softmax %[[T32]], dim = 1 : tensor<6x8xf32>
// CHECK-NEXT: %[[P16:.*]] = dgraph.cast %[[P]] : tensor<6x8xf32> to tensor<6x8xbf16>
// CHECK-NEXT: %[[R:.*]] = dgraph.add %[[P16]], %[[H]] : tensor<6x8xbf16>
// CHECK-NEXT: %[[LOGITS:.*]] = dgraph.matmul %[[R]], %[[W2H]] : (tensor<6x8xbf16>, tensor<8x5xbf16>) -> tensor<6x5xbf16>
// CHECK-NEXT: %[[LOGITS32:.*]] = dgraph.cast %[[LOGITS]] : tensor<6x5xbf16> to tensor<6x5xf32>
// CHECK-NEXT: %[[CE:.*]] = dgraph.cross_entropy %[[LOGITS32]], %arg1 : (tensor<6x5xf32>, tensor<6xi64>) -> tensor<6xf32>
// CHECK-NEXT: %[[LOSS:.*]] = dgraph.reduce_sum %[[CE]], dims = [0] : (tensor<6xf32>) -> tensor<f32>
// CHECK: dgraph.cross_entropy_grad %[[LOGITS32]], %arg1, %{{.*}} : (tensor<6x5xf32>, tensor<6xi64>, tensor<6xf32>) -> tensor<6x5xf32>
// CHECK: %[[DW2:.*]] = dgraph.matmul %[[R]], %{{.*}} {transpose_lhs} : (tensor<6x8xbf16>, tensor<6x5xbf16>) -> tensor<8x5xbf16>
// CHECK-NEXT: %[[DW2F:.*]] = dgraph.cast %[[DW2]] : tensor<8x5xbf16> to tensor<8x5xf32>
// CHECK: dgraph.softmax_grad %[[P]], %{{.*}}, dim = 1 : tensor<6x8xf32>
// The norm's gradient widens the bf16 activation anew (the forward's fp32
// copy is not kept for the backward pass):
// CHECK: %[[H32B:.*]] = dgraph.cast %[[H]] : tensor<6x8xbf16> to tensor<6x8xf32>
// CHECK-NEXT: %[[DX:.*]], %[[DG:.*]], %[[DB:.*]] = dgraph.layer_norm_grad %[[H32B]], %[[G]], %[[MEAN]], %[[RSTD]], %{{.*}} axis = 1 : (tensor<6x8xf32>, tensor<8xf32>, tensor<6xf32>, tensor<6xf32>, tensor<6x8xf32>)
// CHECK-NEXT: dgraph.cast %[[DX]] : tensor<6x8xf32> to tensor<6x8xbf16>
// CHECK: %[[DW1:.*]] = dgraph.matmul %[[X]], %{{.*}} {transpose_lhs} : (tensor<6x4xbf16>, tensor<6x8xbf16>) -> tensor<4x8xbf16>
// CHECK-NEXT: %[[DW1F:.*]] = dgraph.cast %[[DW1]] : tensor<4x8xbf16> to tensor<4x8xf32>
// CHECK-NEXT: return %[[LOSS]], %[[DW1F]], %[[DG]], %[[DB]], %[[DW2F]] : tensor<f32>, tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8x5xf32>

// The optimizer consumes fp32 gradients and keeps fp32 masters and state.
// OPT-DAG: dgraph.variable @"w1/adam_m" : tensor<4x8xf32>
// OPT-DAG: dgraph.variable @"w1/adam_v" : tensor<4x8xf32>
// OPT-LABEL: func.func @train_step
// OPT: %[[DW1:.*]] = dgraph.cast %{{.*}} : tensor<4x8xbf16> to tensor<4x8xf32>
// OPT: %[[P:.*]] = dgraph.load @w1 : tensor<4x8xf32>
// OPT: %[[NEW:.*]], %{{.*}}, %{{.*}} = dgraph.adamw %[[P]], %[[DW1]], {{.*}} : tensor<4x8xf32>
// OPT: dgraph.store %[[NEW]], @w1 : tensor<4x8xf32>

// fp16 scales the loss's gradient seed and unscales each fp32 gradient; the
// loss itself is not scaled.
// FP16-LABEL: func.func @train_step
// FP16: dgraph.matmul {{.*}} -> tensor<6x8xf16>
// FP16: %[[LOSS:.*]] = dgraph.reduce_sum {{.*}} -> tensor<f32>
// FP16: dgraph.constant {dgraph.grad_seed} dense<1.024000e+03> : tensor<f32>
// FP16: %[[DW1:.*]] = dgraph.cast %{{.*}} : tensor<4x8xf16> to tensor<4x8xf32>
// FP16-NEXT: %[[INV:.*]] = dgraph.constant dense<9.765625E-4> : tensor<4x8xf32>
// FP16-NEXT: %[[DW1U:.*]] = dgraph.mul %[[DW1]], %[[INV]] : tensor<4x8xf32>
// FP16: return %[[LOSS]], %[[DW1U]],

// fp32 leaves the module as autodiff made it.
// FP32-NOT: dgraph.dtype
// FP32-LABEL: func.func @train_step
// FP32-NOT: dgraph.cast
// FP32: return
dgraph.variable @w1 : tensor<4x8xf32> {trainable}
dgraph.variable @g : tensor<8xf32> {trainable}
dgraph.variable @b : tensor<8xf32> {trainable}
dgraph.variable @w2 : tensor<8x5xf32> {trainable}
func.func @main(%x: tensor<6x4xf32> {dgraph.name = "x"}, %labels: tensor<6xi64> {dgraph.name = "labels"}) -> (tensor<f32> {dgraph.name = "loss"}) {
  %w1 = dgraph.load @w1 : tensor<4x8xf32>
  %g = dgraph.load @g : tensor<8xf32>
  %b = dgraph.load @b : tensor<8xf32>
  %w2 = dgraph.load @w2 : tensor<8x5xf32>
  %h = dgraph.matmul %x, %w1 : (tensor<6x4xf32>, tensor<4x8xf32>) -> tensor<6x8xf32>
  %n, %mean, %rstd = dgraph.layer_norm %h, %g, %b axis = 1, epsilon = 1.0e-05 : (tensor<6x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<6x8xf32>, tensor<6xf32>, tensor<6xf32>)
  %t = dgraph.tanh %n : tensor<6x8xf32>
  %p = dgraph.softmax %t, dim = 1 : tensor<6x8xf32>
  %r = dgraph.add %p, %h : tensor<6x8xf32>
  %logits = dgraph.matmul %r, %w2 : (tensor<6x8xf32>, tensor<8x5xf32>) -> tensor<6x5xf32>
  %ce = dgraph.cross_entropy %logits, %labels : (tensor<6x5xf32>, tensor<6xi64>) -> tensor<6xf32>
  %l = dgraph.reduce_sum %ce, dims = [0] : (tensor<6xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests that values computed from constants alone take their user's type
// (the constant is converted, not cast), that an fp32 user of a norm gets
// its fp32 result (no round trip through bf16; with half norms it gets the
// bf16 result widened), that an op mixing it with an fp32 input stays fp32,
// and that RMS norm statistics stay fp32.
// HALF-LABEL: func.func @train_step
// HALF: %[[Y:.*]], %[[RS:.*]] = dgraph.rms_norm {{.*}} : (tensor<4x8xbf16>, tensor<8xbf16>) -> (tensor<4x8xbf16>, tensor<4xf32>)
// HALF-NEXT: %[[YF:.*]] = dgraph.cast %[[Y]] : tensor<4x8xbf16> to tensor<4x8xf32>
// HALF-NEXT: dgraph.sub %[[YF]], %arg1 : tensor<4x8xf32>
// HALF: dgraph.rms_norm_grad {{.*}}, %[[RS]], {{.*}} : (tensor<4x8xbf16>, tensor<8xbf16>, tensor<4xf32>, tensor<4x8xbf16>)
// CHECK-LABEL: func.func @train_step
// CHECK: %[[W:.*]] = dgraph.load @w : tensor<8x8xf32>
// CHECK-NEXT: %[[WH:.*]] = dgraph.cast %[[W]] : tensor<8x8xf32> to tensor<8x8xbf16>
// CHECK: %[[SCALE:.*]] = dgraph.constant dense<2.500000e-01> : tensor<4x8xf32>
// CHECK-NEXT: %[[SCALEH:.*]] = dgraph.constant dense<2.500000e-01> : tensor<4x8xbf16>
// CHECK: %[[Y:.*]] = dgraph.matmul %{{.*}}, %[[WH]] {{.*}} -> tensor<4x8xbf16>
// CHECK-NEXT: %[[S:.*]] = dgraph.mul %[[Y]], %[[SCALEH]] : tensor<4x8xbf16>
// CHECK-NEXT: %[[S32:.*]] = dgraph.cast %[[S]] : tensor<4x8xbf16> to tensor<4x8xf32>
// CHECK-NEXT: %[[N:.*]], %[[RSTD:.*]] = dgraph.rms_norm %[[S32]], %{{.*}} axis = 1, {{.*}} -> (tensor<4x8xf32>, tensor<4xf32>)
// CHECK-NEXT: %[[D:.*]] = dgraph.sub %[[N]], %arg1 : tensor<4x8xf32>
// The norm's gradient reads the bf16 value widened anew (the forward's
// fp32 copy is not kept for it):
// CHECK: %[[S32B:.*]] = dgraph.cast %[[S]] : tensor<4x8xbf16> to tensor<4x8xf32>
// CHECK-NEXT: dgraph.rms_norm_grad %[[S32B]], %{{.*}}, %[[RSTD]], %{{.*}} : {{.*}}tensor<4xf32>
// CHECK: return %{{.*}}, %{{.*}}, %{{.*}} : tensor<f32>, tensor<8x8xf32>, tensor<8xf32>
dgraph.variable @w : tensor<8x8xf32> {trainable}
dgraph.variable @g : tensor<8xf32> {trainable}
func.func @main(%x: tensor<4x8xf32> {dgraph.name = "x"}, %target: tensor<4x8xf32> {dgraph.name = "target"}) -> (tensor<f32> {dgraph.name = "loss"}) {
  %w = dgraph.load @w : tensor<8x8xf32>
  %g = dgraph.load @g : tensor<8xf32>
  %c = dgraph.constant dense<0.25> : tensor<4x8xf32>
  %y = dgraph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %s = dgraph.mul %y, %c : tensor<4x8xf32>
  %n, %rstd = dgraph.rms_norm %s, %g axis = 1, epsilon = 1.0e-06 : (tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>)
  %d = dgraph.sub %n, %target : tensor<4x8xf32>
  %sq = dgraph.mul %d, %d : tensor<4x8xf32>
  %l = dgraph.reduce_sum %sq, dims = [0, 1] : (tensor<4x8xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests that grid_sample and its gradient run in fp32 between casts (a
// bf16 grid, here from an affine map's matmul, would misplace samples),
// with or without half norms, handing a half result to their half users.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[I:.*]] = dgraph.reshape %{{.*}} : (tensor<2x3x7xbf16>) -> tensor<2x3x1x7xbf16>
// CHECK-NEXT: %[[I32:.*]] = dgraph.cast %[[I]] : tensor<2x3x1x7xbf16> to tensor<2x3x1x7xf32>
// CHECK: %[[G:.*]] = dgraph.reshape %{{.*}} : (tensor<40x2xbf16>) -> tensor<2x4x5x2xbf16>
// CHECK-NEXT: %[[G32:.*]] = dgraph.cast %[[G]] : tensor<2x4x5x2xbf16> to tensor<2x4x5x2xf32>
// CHECK-NEXT: %[[S:.*]] = dgraph.grid_sample %[[I32]], %[[G32]] : (tensor<2x3x1x7xf32>, tensor<2x4x5x2xf32>) -> tensor<2x3x4x5xf32>
// CHECK-NEXT: dgraph.cast %[[S]] : tensor<2x3x4x5xf32> to tensor<2x3x4x5xbf16>
// CHECK: %[[DX:.*]], %[[DG:.*]] = dgraph.grid_sample_grad %{{.*}} : (tensor<2x3x4x5xf32>, tensor<2x3x1x7xf32>, tensor<2x4x5x2xf32>) -> (tensor<2x3x1x7xf32>, tensor<2x4x5x2xf32>)
// CHECK-DAG: dgraph.cast %[[DX]] : tensor<2x3x1x7xf32> to tensor<2x3x1x7xbf16>
// CHECK-DAG: dgraph.cast %[[DG]] : tensor<2x4x5x2xf32> to tensor<2x4x5x2xbf16>
// HALF-LABEL: func.func @train_step
// HALF: dgraph.grid_sample %{{.*}} : (tensor<2x3x1x7xf32>, tensor<2x4x5x2xf32>) -> tensor<2x3x4x5xf32>
dgraph.variable @w : tensor<3x2x3xf32> {trainable}
dgraph.variable @theta : tensor<3x2xf32> {trainable}
func.func @main(%x: tensor<2x2x7xf32> {dgraph.name = "x"}, %base: tensor<40x3xf32> {dgraph.name = "base"}) -> (tensor<f32> {dgraph.name = "loss"}) {
  %w = dgraph.load @w : tensor<3x2x3xf32>
  %theta = dgraph.load @theta : tensor<3x2xf32>
  %y = dgraph.conv %x, %w strides = [1], dilations = [1], pad_low = [1], pad_high = [1], groups = 1
      : (tensor<2x2x7xf32>, tensor<3x2x3xf32>) -> tensor<2x3x7xf32>
  %i = dgraph.reshape %y : (tensor<2x3x7xf32>) -> tensor<2x3x1x7xf32>
  %m = dgraph.matmul %base, %theta : (tensor<40x3xf32>, tensor<3x2xf32>) -> tensor<40x2xf32>
  %g = dgraph.reshape %m : (tensor<40x2xf32>) -> tensor<2x4x5x2xf32>
  %s = dgraph.grid_sample %i, %g : (tensor<2x3x1x7xf32>, tensor<2x4x5x2xf32>) -> tensor<2x3x4x5xf32>
  %l = dgraph.reduce_sum %s, dims = [0, 1, 2, 3] : (tensor<2x3x4x5xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests that with widen-terms (a pipeline) the gradient of a weight two
// ops read (a tied embedding and head) is summed in fp32 from each term
// widened, not summed in bf16 and widened: the terms stay apart as in an
// fp32 program (a pipeline sums the terms of its stages after the
// micro-batches). Without it the sum stays bf16 (what --grad-reduce half
// reduces over dp).
// WIDE-LABEL: func.func @train_step(%arg0: tensor<3xi64>)
// WIDE: %[[HEAD:.*]] = dgraph.matmul %{{.*}}, %{{.*}} {transpose_lhs} : (tensor<3x8xbf16>, tensor<3x4xbf16>) -> tensor<8x4xbf16>
// WIDE: %[[HEAD32:.*]] = dgraph.cast %[[HEAD]] : tensor<8x4xbf16> to tensor<8x4xf32>
// WIDE: %[[EMB:.*]] = dgraph.scatter_add
// WIDE: %[[EMB32:.*]] = dgraph.cast %[[EMB]] : tensor<8x4xbf16> to tensor<8x4xf32>
// WIDE: %[[SUM:.*]] = dgraph.add %[[HEAD32]], %[[EMB32]] : tensor<8x4xf32>
// WIDE-NOT: tensor<8x4xbf16> to tensor<8x4xf32>
// WIDE: return %{{.*}}, %[[SUM]]
// HALF-LABEL: func.func @train_step(%arg0: tensor<3xi64>)
// HALF: %[[SUM:.*]] = dgraph.add %{{.*}}, %{{.*}} : tensor<8x4xbf16>
// HALF: %[[G:.*]] = dgraph.cast %[[SUM]] : tensor<8x4xbf16> to tensor<8x4xf32>
// HALF: return %{{.*}}, %[[G]]
dgraph.variable @w : tensor<8x4xf32> {trainable}
func.func @main(%ids: tensor<3xi64>) -> (tensor<f32> {dgraph.name = "loss"}) {
  %w = dgraph.load @w : tensor<8x4xf32>
  %e = dgraph.gather %w, %ids axis = 0 : (tensor<8x4xf32>, tensor<3xi64>) -> tensor<3x4xf32>
  %logits = dgraph.matmul %e, %w {transpose_rhs} : (tensor<3x4xf32>, tensor<8x4xf32>) -> tensor<3x8xf32>
  %l = dgraph.reduce_sum %logits, dims = [0, 1] : (tensor<3x8xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
