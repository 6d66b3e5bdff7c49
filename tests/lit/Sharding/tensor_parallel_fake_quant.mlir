// RUN: dtcc-opt %s -dtcc-plan-set="mesh=tp=2" -dtcc-shard-annotate -dtcc-shard-propagate -dtcc-shard-partition -canonicalize | FileCheck %s

// Quantization-aware training multiplies by a fake-quantized weight (ONNX
// QuantizeLinear + DequantizeLinear: scaled by a per-column scale from
// state, rounded, clamped, rescaled, and the straight-through select). The
// weight is still split by columns (column parallel), its scale with it,
// each rank quantizing its own columns: no collective in the forward pass.
// A weight read beside an activation is not seen through (@mixed stays
// whole).
module {
  dgraph.variable @w : tensor<4x8xf32> = dense<0.5> {trainable}
  dgraph.variable @scale : tensor<8xf32> = dense<0.1>
  dgraph.variable @mixed : tensor<8x8xf32> = dense<0.25> {trainable}
  func.func @train_step(%x: tensor<6x4xf32> {dgraph.name = "x"}, %a: tensor<8x8xf32> {dgraph.name = "a"}) -> (tensor<f32> {dgraph.name = "loss"}) {
    %w = dgraph.load @w : tensor<4x8xf32>
    %s = dgraph.load @scale : tensor<8xf32>
    %sb = dgraph.broadcast_in_dim %s, dims = [1] : (tensor<8xf32>) -> tensor<4x8xf32>
    %r = dgraph.reciprocal %sb : tensor<4x8xf32>
    %t = dgraph.mul %w, %r : tensor<4x8xf32>
    %l = dgraph.round %t : tensor<4x8xf32>
    %lo = dgraph.constant dense<-128.0> : tensor<4x8xf32>
    %hi = dgraph.constant dense<127.0> : tensor<4x8xf32>
    %c1 = dgraph.max %l, %lo : tensor<4x8xf32>
    %c = dgraph.min %c1, %hi : tensor<4x8xf32>
    %fq = dgraph.mul %c, %sb : tensor<4x8xf32>
    %ge = dgraph.ge %l, %lo : tensor<4x8xf32>
    %le = dgraph.le %l, %hi : tensor<4x8xf32>
    %in = dgraph.and %ge, %le : tensor<4x8xi1>
    %z = dgraph.sub %w, %w : tensor<4x8xf32>
    %th = dgraph.add %fq, %z : tensor<4x8xf32>
    %wq = dgraph.select %in, %th, %fq : tensor<4x8xf32>
    %h = dgraph.matmul %x, %wq : (tensor<6x4xf32>, tensor<4x8xf32>) -> tensor<6x8xf32>
    %m = dgraph.load @mixed : tensor<8x8xf32>
    %ma = dgraph.add %m, %a : tensor<8x8xf32>
    %y = dgraph.matmul %h, %ma : (tensor<6x8xf32>, tensor<8x8xf32>) -> tensor<6x8xf32>
    %sum = dgraph.reduce_sum %y, dims = [0, 1] : (tensor<6x8xf32>) -> tensor<f32>
    return %sum : tensor<f32>
  }
}
// CHECK-DAG: dgraph.variable @w : tensor<4x4xf32> = (tensor<4x8xf32>) dense<5.000000e-01> {{.*}}dshard.sharding = #dshard.sharding<[{}, {tp}]>
// CHECK-DAG: dgraph.variable @mixed : tensor<8x8xf32> = dense<2.500000e-01> {trainable}
// CHECK: func.func @train_step
// CHECK-NOT: dshard.all_gather
// CHECK: dgraph.matmul %{{.*}} : (tensor<6x4xf32>, tensor<4x4xf32>) -> tensor<6x4xf32>
